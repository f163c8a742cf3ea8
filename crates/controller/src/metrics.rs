//! The controller's Prometheus metrics, named and labelled as Karpenter's where the concept is
//! the same (`karpenter_*`; a dashboard or alert written for Karpenter reads them unchanged),
//! and `capstan_*` where it has none.
//!
//! Events (a claim created, a decision taken, a cloud call) are counted where the loops make
//! them. The cluster's state (pods, nodes, NodePool usage, prices) is a set of gauges rebuilt
//! from the cache by [`Metrics::observe_state`] — all at once, under the lock a scrape takes,
//! so a scrape never sees a half-built set and a pod or node that is gone leaves no series.
//! Latencies Karpenter's dashboards read by quantile (`{quantile="0.5"}`) are summaries over
//! the last ten minutes; the rest are histograms.
//!
//! Every metric is registered when [`Metrics`] is made, so `/metrics` names each one from the
//! start (a family with no series yet prints nothing, as client_golang's vectors do).

use crate::cache::Cache;
use capstan_model::InstanceType;
use capstan_model::disruption::Reason;
use capstan_model::labels;
use prometheus::core::{Collector, Desc};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
    proto,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

/// How long a summary's quantiles look back (client_golang's default MaxAge).
const SUMMARY_WINDOW: f64 = 600.0;
/// Observations a summary keeps in its window at most (the oldest go first).
const SUMMARY_CAP: usize = 10_000;
/// Karpenter's summary objectives: min, median, p90, p99, max.
const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// The voluntary methods Karpenter labels eligible nodes and allowed disruptions by.
const VOLUNTARY: [Reason; 3] = [Reason::Empty, Reason::Drifted, Reason::Underutilized];

/// A metric's name, type and help, as the registry and the dashboard test see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Described {
    pub name: &'static str,
    pub kind: &'static str,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

macro_rules! described {
    ($($id:ident = $name:literal, $kind:literal, [$($l:literal),*], $help:literal;)*) => {
        $(const $id: Described = Described { name: $name, kind: $kind, labels: &[$($l),*], help: $help };)*
        /// Every metric capstan serves.
        pub const ALL: &[Described] = &[$($id),*];
    };
}

described! {
    BUILD_INFO = "karpenter_build_info", "gauge", ["version"],
        "A metric with a constant '1' value labeled by the version capstan was built from.";
    CLAIMS_CREATED = "karpenter_nodeclaims_created_total", "counter", ["reason", "nodepool"],
        "Number of nodeclaims created in total, by the reason (provisioned, or the disruption method that replaces) and the owning nodepool.";
    CLAIMS_TERMINATED = "karpenter_nodeclaims_terminated_total", "counter", ["nodepool", "capacity_type", "zone"],
        "Number of nodeclaims terminated in total, by the owning nodepool, capacity type and zone.";
    CLAIMS_DISRUPTED = "karpenter_nodeclaims_disrupted_total", "counter", ["reason", "nodepool", "capacity_type"],
        "Number of nodeclaims disrupted in total, by the reason, the owning nodepool and capacity type.";
    CLAIMS_TERMINATION = "karpenter_nodeclaims_termination_duration_seconds", "summary", ["nodepool"],
        "Duration of NodeClaim termination in seconds: from the deletion request to the finalizer's release.";
    NODES_CREATED = "karpenter_nodes_created_total", "counter", ["nodepool"],
        "Number of nodes created (registered) in total, by owning nodepool.";
    NODES_TERMINATED = "karpenter_nodes_terminated_total", "counter", ["nodepool"],
        "Number of nodes terminated in total, by owning nodepool.";
    NODES_TERMINATION = "karpenter_nodes_termination_duration_seconds", "summary", ["nodepool"],
        "The time taken between a node's deletion request and the removal of its finalizer.";
    NODES_ALLOCATABLE = "karpenter_nodes_allocatable", "gauge", ["node_name", "nodepool", "instance_type", "capacity_type", "zone", "arch", "resource_type"],
        "Node allocatable are the resources allocatable by nodes (cpu in cores).";
    NODES_REQUESTS = "karpenter_nodes_total_pod_requests", "gauge", ["node_name", "nodepool", "instance_type", "capacity_type", "zone", "arch", "resource_type"],
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods (cpu in cores).";
    PODS_STATE = "karpenter_pods_state", "gauge", ["name", "namespace", "owner", "node", "nodepool", "zone", "arch", "capacity_type", "instance_type", "phase"],
        "Pod state is the current state of pods, labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.";
    PODS_STARTUP = "karpenter_pods_startup_duration_seconds", "summary", [],
        "The time from pod creation until the pod is running (pods this process saw pending).";
    DECISIONS = "karpenter_voluntary_disruption_decisions_total", "counter", ["decision", "reason", "consolidation_type"],
        "Number of disruption decisions performed, by decision (delete, replace), reason and consolidation type.";
    ELIGIBLE = "karpenter_voluntary_disruption_eligible_nodes", "gauge", ["reason"],
        "Number of nodes eligible for disruption at the last evaluation, by disruption reason.";
    EVALUATION = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds", "histogram", ["method", "consolidation_type"],
        "Duration of the disruption decision evaluation process in seconds.";
    SCHEDULING = "karpenter_scheduler_scheduling_duration_seconds", "histogram", ["controller"],
        "Duration of scheduling simulations used for provisioning in seconds.";
    QUEUE_DEPTH = "karpenter_scheduler_queue_depth", "gauge", ["controller"],
        "The number of pods the last scheduling simulation placed or tried to place.";
    UNSCHEDULABLE = "karpenter_scheduler_unschedulable_pods_count", "gauge", ["controller"],
        "The number of pods the last scheduling simulation could place on no node or NodePool.";
    POOL_USAGE = "karpenter_nodepools_usage", "gauge", ["nodepool", "resource_type"],
        "The amount of resources that have been provisioned for a nodepool (cpu in cores).";
    POOL_LIMIT = "karpenter_nodepools_limit", "gauge", ["nodepool", "resource_type"],
        "Limits specified on the nodepool that restrict the quantity of resources provisioned (cpu in cores).";
    POOL_ALLOWED = "karpenter_nodepools_allowed_disruptions", "gauge", ["nodepool", "reason"],
        "The number of nodes for a given NodePool that can be concurrently disrupting now, by reason.";
    POOL_COST = "capstan_nodepools_cost_per_hour", "gauge", ["nodepool", "capacity_type"],
        "What the nodepool's launched NodeClaims cost, in USD per hour at their launch prices.";
    INTERRUPTION_RECEIVED = "karpenter_interruption_received_messages_total", "counter", ["message_type"],
        "Count of interruption messages received from the cloud, by message type.";
    INTERRUPTION_DELETED = "karpenter_interruption_deleted_messages_total", "counter", [],
        "Count of interruption messages deleted (acknowledged) after handling.";
    INTERRUPTION_QUEUED = "karpenter_interruption_message_queue_duration_seconds", "histogram", [],
        "Amount of time an interruption message is on the queue before it is processed.";
    SYNCED = "karpenter_cluster_state_synced", "gauge", [],
        "Returns 1 if the cluster state is synced (every watched kind is listed and watched) and 0 otherwise.";
    NODE_COUNT = "karpenter_cluster_state_node_count", "gauge", [],
        "Current count of nodes in cluster state.";
    CLOUD_DURATION = "karpenter_cloudprovider_duration_seconds", "histogram", ["controller", "method", "provider"],
        "Duration of cloud provider method calls, by the controller, method name and provider.";
    CLOUD_ERRORS = "karpenter_cloudprovider_errors_total", "counter", ["controller", "method", "provider", "error"],
        "Total number of errors returned from CloudProvider calls, by controller, method, provider and error kind.";
    PRICE = "karpenter_cloudprovider_instance_type_offering_price_estimate", "gauge", ["instance_type", "capacity_type", "zone"],
        "Instance type offering estimated hourly price, by instance type, capacity type and zone.";
    AVAILABLE = "karpenter_cloudprovider_instance_type_offering_available", "gauge", ["instance_type", "capacity_type", "zone"],
        "Instance type offering availability (1 or 0), by instance type, capacity type and zone.";
    LEADER = "leader_election_master_status", "gauge", ["name"],
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.";
}

fn counter(d: Described) -> IntCounterVec {
    IntCounterVec::new(Opts::new(d.name, d.help), d.labels).expect("valid metric")
}

fn gauge(d: Described) -> GaugeVec {
    GaugeVec::new(Opts::new(d.name, d.help), d.labels).expect("valid metric")
}

fn histogram(d: Described, buckets: Vec<f64>) -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(d.name, d.help).buckets(buckets),
        d.labels,
    )
    .expect("valid metric")
}

/// Seconds, for calls and simulations that take milliseconds to minutes.
fn duration_buckets() -> Vec<f64> {
    vec![
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        120.0, 300.0,
    ]
}

/// A summary over the last [`SUMMARY_WINDOW`] seconds of observations, per label values:
/// exact quantiles of what the window holds, and a count and sum since the start.
#[derive(Clone)]
pub struct Summary {
    desc: Desc,
    series: Arc<Mutex<BTreeMap<Vec<String>, Window>>>,
}

#[derive(Default)]
struct Window {
    samples: VecDeque<(f64, f64)>,
    count: u64,
    sum: f64,
}

impl Summary {
    fn new(d: Described) -> Summary {
        Summary {
            desc: Desc::new(
                d.name.into(),
                d.help.into(),
                d.labels.iter().map(|s| s.to_string()).collect(),
                Default::default(),
            )
            .expect("valid metric"),
            series: Default::default(),
        }
    }

    /// Records `value` observed at clock time `at` (seconds).
    pub fn observe(&self, labels: &[&str], at: f64, value: f64) {
        let mut series = self.series.lock().expect("not poisoned");
        let w = series
            .entry(labels.iter().map(|s| s.to_string()).collect())
            .or_default();
        w.count += 1;
        w.sum += value;
        w.samples.push_back((at, value));
        w.forget_before(at);
    }

    /// Forgets what left the window by clock time `at`, in every series (a series with no new
    /// observation must not report old quantiles forever).
    pub fn prune(&self, at: f64) {
        let mut series = self.series.lock().expect("not poisoned");
        for w in series.values_mut() {
            w.forget_before(at);
        }
    }
}

impl Window {
    fn forget_before(&mut self, at: f64) {
        while self.samples.len() > SUMMARY_CAP
            || self
                .samples
                .front()
                .is_some_and(|(t, _)| at - t > SUMMARY_WINDOW)
        {
            self.samples.pop_front();
        }
    }
}

/// The `q` quantile of sorted values, by nearest rank (0 is the minimum, 1 the maximum).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Collector for Summary {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let series = self.series.lock().expect("not poisoned");
        let mut family = proto::MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(proto::MetricType::SUMMARY);
        let mut metrics = Vec::new();
        for (values, w) in series.iter() {
            let mut sorted: Vec<f64> = w.samples.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            let mut s = proto::Summary::default();
            s.set_sample_count(w.count);
            s.set_sample_sum(w.sum);
            s.set_quantile(
                QUANTILES
                    .iter()
                    .map(|&q| {
                        let mut p = proto::Quantile::default();
                        p.set_quantile(q);
                        p.set_value(quantile(&sorted, q));
                        p
                    })
                    .collect(),
            );
            let mut m = proto::Metric::default();
            m.set_label(
                self.desc
                    .variable_labels
                    .iter()
                    .zip(values)
                    .map(|(k, v)| {
                        let mut l = proto::LabelPair::default();
                        l.set_name(k.clone());
                        l.set_value(v.clone());
                        l
                    })
                    .collect(),
            );
            m.set_summary(s);
            metrics.push(m);
        }
        family.set_metric(metrics);
        vec![family]
    }
}

/// The registry and every metric in it. Cloning shares them (the HTTP server holds a clone).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Held while the state gauges are rebuilt and while a scrape gathers.
    state_lock: Arc<Mutex<()>>,
    pub(crate) claims_created: IntCounterVec,
    pub(crate) claims_terminated: IntCounterVec,
    pub(crate) claims_disrupted: IntCounterVec,
    pub(crate) claims_termination: Summary,
    pub(crate) nodes_created: IntCounterVec,
    pub(crate) nodes_terminated: IntCounterVec,
    pub(crate) nodes_termination: Summary,
    nodes_allocatable: GaugeVec,
    nodes_requests: GaugeVec,
    pods_state: GaugeVec,
    pods_startup: Summary,
    pub(crate) decisions: IntCounterVec,
    eligible: GaugeVec,
    pub(crate) evaluation: HistogramVec,
    pub(crate) scheduling: HistogramVec,
    queue_depth: GaugeVec,
    unschedulable: GaugeVec,
    pool_usage: GaugeVec,
    pool_limit: GaugeVec,
    pool_allowed: GaugeVec,
    pool_cost: GaugeVec,
    pub(crate) interruption_received: IntCounterVec,
    pub(crate) interruption_deleted: IntCounterVec,
    pub(crate) interruption_queued: HistogramVec,
    synced: GaugeVec,
    node_count: GaugeVec,
    pub(crate) cloud_duration: HistogramVec,
    pub(crate) cloud_errors: IntCounterVec,
    price: GaugeVec,
    available: GaugeVec,
    leader: GaugeVec,
    /// Pods this process saw pending and not yet running (startup latency is theirs).
    waiting: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::new(),
            state_lock: Default::default(),
            claims_created: counter(CLAIMS_CREATED),
            claims_terminated: counter(CLAIMS_TERMINATED),
            claims_disrupted: counter(CLAIMS_DISRUPTED),
            claims_termination: Summary::new(CLAIMS_TERMINATION),
            nodes_created: counter(NODES_CREATED),
            nodes_terminated: counter(NODES_TERMINATED),
            nodes_termination: Summary::new(NODES_TERMINATION),
            nodes_allocatable: gauge(NODES_ALLOCATABLE),
            nodes_requests: gauge(NODES_REQUESTS),
            pods_state: gauge(PODS_STATE),
            pods_startup: Summary::new(PODS_STARTUP),
            decisions: counter(DECISIONS),
            eligible: gauge(ELIGIBLE),
            evaluation: histogram(EVALUATION, duration_buckets()),
            scheduling: histogram(SCHEDULING, duration_buckets()),
            queue_depth: gauge(QUEUE_DEPTH),
            unschedulable: gauge(UNSCHEDULABLE),
            pool_usage: gauge(POOL_USAGE),
            pool_limit: gauge(POOL_LIMIT),
            pool_allowed: gauge(POOL_ALLOWED),
            pool_cost: gauge(POOL_COST),
            interruption_received: counter(INTERRUPTION_RECEIVED),
            interruption_deleted: counter(INTERRUPTION_DELETED),
            interruption_queued: histogram(INTERRUPTION_QUEUED, duration_buckets()),
            synced: gauge(SYNCED),
            node_count: gauge(NODE_COUNT),
            cloud_duration: histogram(CLOUD_DURATION, duration_buckets()),
            cloud_errors: counter(CLOUD_ERRORS),
            price: gauge(PRICE),
            available: gauge(AVAILABLE),
            leader: gauge(LEADER),
            waiting: Default::default(),
        };
        let build = gauge(BUILD_INFO);
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1.0);
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(build),
            Box::new(m.claims_created.clone()),
            Box::new(m.claims_terminated.clone()),
            Box::new(m.claims_disrupted.clone()),
            Box::new(m.claims_termination.clone()),
            Box::new(m.nodes_created.clone()),
            Box::new(m.nodes_terminated.clone()),
            Box::new(m.nodes_termination.clone()),
            Box::new(m.nodes_allocatable.clone()),
            Box::new(m.nodes_requests.clone()),
            Box::new(m.pods_state.clone()),
            Box::new(m.pods_startup.clone()),
            Box::new(m.decisions.clone()),
            Box::new(m.eligible.clone()),
            Box::new(m.evaluation.clone()),
            Box::new(m.scheduling.clone()),
            Box::new(m.queue_depth.clone()),
            Box::new(m.unschedulable.clone()),
            Box::new(m.pool_usage.clone()),
            Box::new(m.pool_limit.clone()),
            Box::new(m.pool_allowed.clone()),
            Box::new(m.pool_cost.clone()),
            Box::new(m.interruption_received.clone()),
            Box::new(m.interruption_deleted.clone()),
            Box::new(m.interruption_queued.clone()),
            Box::new(m.synced.clone()),
            Box::new(m.node_count.clone()),
            Box::new(m.cloud_duration.clone()),
            Box::new(m.cloud_errors.clone()),
            Box::new(m.price.clone()),
            Box::new(m.available.clone()),
            Box::new(m.leader.clone()),
        ];
        assert_eq!(
            collectors.len(),
            ALL.len(),
            "every described metric is registered"
        );
        for c in collectors {
            m.registry.register(c).expect("metric names are unique");
        }
        m
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let families = {
            let _held = self.state_lock.lock().expect("not poisoned");
            self.registry.gather()
        };
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("text encoding to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    pub(crate) fn set_synced(&self, synced: bool) {
        self.synced
            .with_label_values::<&str>(&[])
            .set(f64::from(u8::from(synced)));
    }

    pub(crate) fn set_leader(&self, lease: &str, leading: bool) {
        self.leader
            .with_label_values(&[lease])
            .set(f64::from(u8::from(leading)));
    }

    /// After a provisioning simulation: what it took and what it could not place.
    pub(crate) fn scheduled(&self, seconds: f64, pods: usize, unschedulable: usize) {
        let c = ["provisioner"];
        self.scheduling.with_label_values(&c).observe(seconds);
        self.queue_depth.with_label_values(&c).set(pods as f64);
        self.unschedulable
            .with_label_values(&c)
            .set(unschedulable as f64);
    }

    /// After a disruption evaluation: how long it took and the nodes each method may take.
    pub(crate) fn evaluated(&self, seconds: f64, eligible: &BTreeMap<Reason, usize>) {
        self.evaluation
            .with_label_values(&["evaluate", ""])
            .observe(seconds);
        for r in VOLUNTARY {
            self.eligible
                .with_label_values(&[&r.cli_name()])
                .set(eligible.get(&r).copied().unwrap_or(0) as f64);
        }
    }

    /// A cloud call's duration and, when it failed, its error kind.
    pub(crate) fn cloud_call(
        &self,
        controller: &str,
        method: &str,
        provider: &str,
        seconds: f64,
        error: Option<&capstan_cloud::CloudError>,
    ) {
        self.cloud_duration
            .with_label_values(&[controller, method, provider])
            .observe(seconds.max(0.0));
        if let Some(e) = error {
            self.cloud_errors
                .with_label_values(&[controller, method, provider, error_kind(e)])
                .inc();
        }
    }

    /// Drops the state gauges and the last plan's and evaluation's (this process stopped leading: its cache is no longer the
    /// cluster's state, and the leader's are the ones to read).
    pub(crate) fn clear_state(&self) {
        let _held = self.state_lock.lock().expect("not poisoned");
        for g in self.state_gauges() {
            g.reset();
        }
    }

    fn state_gauges(&self) -> [&GaugeVec; 13] {
        [
            &self.nodes_allocatable,
            &self.nodes_requests,
            &self.pods_state,
            &self.pool_usage,
            &self.pool_limit,
            &self.pool_allowed,
            &self.pool_cost,
            &self.price,
            &self.available,
            &self.node_count,
            &self.queue_depth,
            &self.unschedulable,
            &self.eligible,
        ]
    }

    /// Rebuilds the state gauges from the cache and the instance types, and records the startup
    /// latency of pods seen pending that now run. `wall` is Unix seconds.
    pub(crate) fn observe_state(&self, cache: &Cache, types: &[InstanceType], wall: f64, at: f64) {
        let _held = self.state_lock.lock().expect("not poisoned");
        for g in &self.state_gauges()[..9] {
            g.reset();
        }
        let label = |l: &BTreeMap<String, String>, k: &str| l.get(k).cloned().unwrap_or_default();
        let mut node_count = 0;
        for n in cache.nodes() {
            node_count += 1;
            let pool = label(&n.labels, labels::NODEPOOL);
            if pool.is_empty() {
                continue;
            }
            let it = label(&n.labels, labels::INSTANCE_TYPE);
            let ct = label(&n.labels, labels::CAPACITY_TYPE);
            let zone = label(&n.labels, labels::ZONE);
            let arch = label(&n.labels, labels::ARCH);
            for (r, v) in n.allocatable.iter() {
                self.nodes_allocatable
                    .with_label_values(&[&n.name, &pool, &it, &ct, &zone, &arch, r])
                    .set(amount(r, v));
            }
            if let Some(used) = cache.used_on(&n.name) {
                for (r, v) in used.iter() {
                    self.nodes_requests
                        .with_label_values(&[&n.name, &pool, &it, &ct, &zone, &arch, r])
                        .set(amount(r, v));
                }
            }
        }
        self.node_count
            .with_label_values::<&str>(&[])
            .set(node_count as f64);

        for summary in [
            &self.pods_startup,
            &self.nodes_termination,
            &self.claims_termination,
        ] {
            summary.prune(at);
        }
        let mut waiting = self.waiting.lock().expect("not poisoned");
        let mut live = BTreeSet::new();
        for p in cache.pods() {
            let key = p.key();
            live.insert(key.clone());
            let node = p.node_name.as_deref().and_then(|n| cache.node(n));
            let nl = |k: &str| node.map(|n| label(&n.labels, k)).unwrap_or_default();
            let owner = match (&p.owner_kind, &p.owner_name) {
                (Some(k), Some(n)) => format!("{k}/{n}"),
                _ => String::new(),
            };
            let phase = p.phase.as_str();
            self.pods_state
                .with_label_values(&[
                    &p.name,
                    &p.namespace,
                    &owner,
                    p.node_name.as_deref().unwrap_or(""),
                    &nl(labels::NODEPOOL),
                    &nl(labels::ZONE),
                    &nl(labels::ARCH),
                    &nl(labels::CAPACITY_TYPE),
                    &nl(labels::INSTANCE_TYPE),
                    phase,
                ])
                .set(1.0);
            if phase == "Running" {
                if waiting.remove(&key) {
                    if let Some(created) = p.created {
                        self.pods_startup
                            .observe(&[], at, (wall - created).max(0.0));
                    }
                }
            } else if phase == "Pending" && !p.deleting {
                waiting.insert(key);
            }
        }
        waiting.retain(|k| live.contains(k));
        drop(waiting);

        let mut usage: BTreeMap<&str, capstan_model::Resources> = BTreeMap::new();
        let mut cost: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        let mut nodes_in: BTreeMap<&str, i64> = BTreeMap::new();
        for c in cache.claims() {
            if c.status.launched_at.is_none() {
                continue;
            }
            usage
                .entry(&c.nodepool)
                .or_default()
                .add(&c.status.capacity);
            *cost
                .entry((
                    &c.nodepool,
                    c.status.capacity_type.as_deref().unwrap_or_default(),
                ))
                .or_default() += c.status.price;
            *nodes_in.entry(&c.nodepool).or_default() += 1;
        }
        for p in cache.nodepools() {
            let u = usage.get(p.name.as_str()).cloned().unwrap_or_default();
            for r in [
                capstan_model::resources::CPU,
                capstan_model::resources::MEMORY,
                capstan_model::resources::PODS,
            ] {
                self.pool_usage
                    .with_label_values(&[&p.name, r])
                    .set(amount(r, u.get(r)));
            }
            for (r, v) in &p.limits {
                self.pool_limit
                    .with_label_values(&[&p.name, r])
                    .set(amount(r, *v));
            }
            let total = nodes_in.get(p.name.as_str()).copied().unwrap_or(0);
            for r in VOLUNTARY {
                self.pool_allowed
                    .with_label_values(&[&p.name, &r.cli_name()])
                    .set(p.budgets.allows(r, total, wall).max(0) as f64);
            }
        }
        for ((pool, ct), dollars) in cost {
            self.pool_cost.with_label_values(&[pool, ct]).set(dollars);
        }
        for t in types {
            for o in &t.offerings {
                let l = [t.name.as_str(), &o.capacity_type, &o.zone];
                self.price.with_label_values(&l).set(o.price);
                self.available
                    .with_label_values(&l)
                    .set(f64::from(u8::from(o.available)));
            }
        }
    }
}

/// A resource amount as Karpenter reports it: cpu in cores, the rest in units.
fn amount(resource: &str, v: i64) -> f64 {
    if resource == capstan_model::resources::CPU {
        v as f64 / 1000.0
    } else {
        v as f64
    }
}

/// The `error` label of a failed cloud call.
pub(crate) fn error_kind(e: &capstan_cloud::CloudError) -> &'static str {
    use capstan_cloud::CloudError as E;
    match e {
        E::InsufficientCapacity { .. } => "InsufficientCapacityError",
        E::Throttled { .. } => "ThrottledError",
        E::NotFound { .. } => "NodeClaimNotFoundError",
        E::Invalid { .. } => "InvalidRequestError",
        E::Transient { .. } => "TransientError",
    }
}

/// The `consolidation_type` label of a decision: `empty`, `single` or `multi` for
/// consolidation, empty for drift and expiry.
pub(crate) fn consolidation_type(reason: Reason, candidates: usize) -> &'static str {
    match reason {
        Reason::Empty => "empty",
        Reason::Underutilized if candidates > 1 => "multi",
        Reason::Underutilized => "single",
        _ => "",
    }
}

#[cfg(test)]
mod tests;
