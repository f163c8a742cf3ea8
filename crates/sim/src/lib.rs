//! capstan's deterministic simulator: the real controller loops against an in-memory
//! Kubernetes API and the fake cloud, with the rest of a cluster modelled around them —
//! kubelets that register nodes when instances boot, a kube-scheduler that binds pods with
//! the scheduling core's predicates, ReplicaSets, the HPA and a KEDA-style scaler driven by
//! a traffic trace, and faults. Everything runs on a single-threaded tokio runtime with
//! paused time, one virtual second per step, from a seed: the same seed gives the same run.
//!
//! The simulator never makes a decision the controller makes (invariant 3): it only plays
//! the parts of the world capstan does not own.

pub mod api;
pub mod report;
pub mod scenario;
pub mod workload;

use api::{InMemoryApi, Removal};
use capstan_cloud::{
    Clock, CloudError, CloudProvider, Drift, Instance, InstanceState, InterruptionEvent,
    LaunchRequest, OfferingKey, RepairPolicy, TokioClock,
};
use capstan_controller::api::{Kind, NodeClaim, Object, UNREGISTERED_TAINT};
use capstan_controller::{Action, Cache, Controller, Planner};
use capstan_fake_cloud::FakeCloud;
use capstan_model::labels;
use capstan_model::pod::PodPhase;
use capstan_model::taints::Effect;
use capstan_model::{Catalog, InstanceType, Node, NodePool, Pod, Taint};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenario::{Compiled, seconds};
use serde::Serialize;
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use workload::WorkloadState;

/// How a run goes.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// Add random faults drawn from the seed.
    pub faults: bool,
    /// capstan controller processes (one leads, the others stand by); 0 runs the world
    /// without capstan, to see what it would do alone.
    pub replicas: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            faults: false,
            replicas: 2,
        }
    }
}

/// The run's figures (`summary.json`). Field order is fixed, so the file is byte-for-byte
/// reproducible apart from `wall_seconds`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub scenario: String,
    pub seed: u64,
    pub faults: bool,
    pub simulated_seconds: f64,
    pub cost_usd: f64,
    pub cost_lower_bound_usd: f64,
    pub pod_pending_seconds_p50: f64,
    pub pod_pending_seconds_p99: f64,
    pub pod_pending_seconds_max: f64,
    pub nodes_launched: u64,
    pub nodes_terminated: u64,
    pub spot_interruptions: u64,
    pub consolidations: u64,
    pub pods_lost: u64,
    pub budget_violations: u64,
    pub pdb_violations: u64,
    pub leaked_instances: u64,
    /// Pods that fit a node of some NodePool but were still pending after 15 minutes at the end.
    pub pods_stuck: u64,
    pub peak_nodes: u64,
    pub peak_pods: u64,
    pub pods_created: u64,
    pub controller_restarts: u64,
    pub leader_elections: u64,
    pub fenced_writes: u64,
    pub faults_injected: Vec<String>,
    pub wall_seconds: f64,
}

impl Summary {
    /// The invariants a run must keep; each broken one, as a sentence.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        let mut check = |v: u64, what: &str| {
            if v > 0 {
                f.push(format!("{what}: {v}"));
            }
        };
        check(self.pods_lost, "pods lost");
        check(self.leaked_instances, "instances leaked");
        check(self.budget_violations, "disruption budget violations");
        check(self.pdb_violations, "PDB violations");
        check(self.pods_stuck, "pods that fit but were never scheduled");
        f
    }
}

/// One sample per simulated minute, for the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub t: f64,
    pub rps: f64,
    pub replicas: Vec<i32>,
    pub pending: usize,
    pub pods: usize,
    pub spot_nodes: usize,
    pub on_demand_nodes: usize,
    pub cost_per_hour: f64,
    pub bound_per_hour: f64,
    pub queue_depth: f64,
}

/// Something that happened, for the report's timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineEvent {
    pub t: f64,
    pub kind: String,
    pub detail: String,
}

/// Everything a run produced.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub summary: Summary,
    pub workloads: Vec<String>,
    pub samples: Vec<Sample>,
    pub events: Vec<TimelineEvent>,
}

/// The fake cloud as capstan sees it, with the simulator's API faults (throttling) in front.
#[derive(Clone)]
pub struct SimCloud {
    pub inner: FakeCloud,
    clock: Arc<dyn Clock>,
    throttled_until: Arc<AtomicU64>,
}

impl SimCloud {
    fn throttled(&self) -> Option<CloudError> {
        let until = self.throttled_until.load(Ordering::SeqCst);
        let now = self.clock.now().as_secs();
        (now < until).then(|| CloudError::Throttled {
            retry_after: Duration::from_secs(until - now),
        })
    }
}

impl CloudProvider for SimCloud {
    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        if let Some(e) = self.throttled() {
            return Err(e);
        }
        self.inner.create(request).await
    }
    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        if let Some(e) = self.throttled() {
            return Err(e);
        }
        self.inner.delete(provider_id).await
    }
    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        self.inner.list().await
    }
    async fn instance_types(&self, nodepool: &NodePool) -> Result<Vec<InstanceType>, CloudError> {
        self.inner.instance_types(nodepool).await
    }
    async fn is_drifted(&self, instance: &Instance) -> Result<Option<Drift>, CloudError> {
        self.inner.is_drifted(instance).await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }
    async fn interruptions(&self) -> Result<Vec<InterruptionEvent>, CloudError> {
        self.inner.interruptions().await
    }
    async fn ack_interruptions(&self, events: &[InterruptionEvent]) -> Result<(), CloudError> {
        self.inner.ack_interruptions(events).await
    }
}

/// A fault at a time.
#[derive(Clone, Debug)]
enum Fault {
    Outage {
        prefix: String,
        capacity_type: Option<String>,
        until: f64,
    },
    Restore {
        keys: Vec<OfferingKey>,
        capacity: u32,
    },
    Storm {
        fraction: f64,
    },
    Crash,
    Failover,
    Throttle {
        until: f64,
    },
}

type Ctl = Controller<InMemoryApi, SimCloud>;

/// Seconds between the kubelet registering a node and its agents removing startup taints.
const STARTUP_TAINT_SECONDS: f64 = 5.0;
/// A pod pending this long at the end, that fits somewhere, breaks an invariant.
const STUCK_SECONDS: f64 = 900.0;

struct PodTimes {
    created: f64,
    bound: Option<f64>,
    ready_at: Option<f64>,
    /// Counted in its workload's `ready`.
    counted_ready: bool,
}

/// A workload's pods, kept up to date as they come and go (so a simulated second costs
/// nothing per pod).
#[derive(Default)]
struct Members {
    /// Its pods by key, with their times.
    pods: BTreeMap<String, PodTimes>,
    ready: usize,
    /// Bumped when a pod joins, leaves or is bound: the autoscaler rebuilds its pod list.
    version: u64,
}

impl Members {
    /// (key, bound at, ready at) of the bound pods, in key order.
    fn bound(&self) -> impl Iterator<Item = (&String, f64, f64)> {
        self.pods
            .iter()
            .filter_map(|(k, t)| Some((k, t.bound?, t.ready_at?)))
    }
}

struct Sim {
    sc: Compiled,
    opts: Options,
    clock: Arc<dyn Clock>,
    api: Arc<InMemoryApi>,
    cloud: SimCloud,
    types: Vec<InstanceType>,
    controllers: Vec<Option<Ctl>>,
    incarnation: Vec<u64>,
    paused_until: Vec<f64>,
    stale_write_due: Vec<bool>,
    view: Cache,
    workloads: Vec<WorkloadState>,
    /// Pod key → its workload (whose `Members` hold its times).
    pods: HashMap<String, usize>,
    members: Vec<Members>,
    /// Bound pods not yet Ready, by when they will be.
    becoming_ready: BTreeSet<(u64, String)>,
    pending_durations: Vec<f64>,
    startup_taints: BTreeMap<String, f64>,
    faults: BTreeMap<(u64, u64), Fault>,
    fault_log: Vec<String>,
    rng: ChaCha8Rng,
    summary: Summary,
    samples: Vec<Sample>,
    events: Vec<TimelineEvent>,
    cost: f64,
    bound_cost: f64,
    /// Pods the scheduler tried and could not place, until capacity changes.
    unschedulable: BTreeSet<String>,
    capacity_seen: (u64, u64),
    last_flush: f64,
    /// (when, $ per millicore-hour, $ per byte-hour) for the cost lower bound.
    unit_prices: Option<(f64, f64, f64)>,
    disrupting: BTreeSet<String>,
    /// When capacity last came back after an outage.
    capacity_back_at: f64,
    /// Nodes whose instance the cloud will take (interruption warnings, maintenance).
    doomed_nodes: BTreeSet<String>,
    node_pool: BTreeMap<String, String>,
}

/// Runs a scenario to the end.
pub fn run(sc: &Compiled, opts: &Options, progress: &mut dyn FnMut(f64)) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a single-threaded runtime");
    rt.block_on(async {
        let mut sim = Sim::new(sc.clone(), opts.clone());
        sim.run(progress).await
    })
}

fn catalog_for(sc: &Compiled) -> Catalog {
    let mut c = Catalog::builtin();
    let f = &sc.scenario.catalog;
    c.instance_types.retain(|t| {
        let fam = t.name.split('.').next().unwrap_or("");
        (f.families.is_empty() || f.families.iter().any(|x| x == fam))
            && (f.max_vcpu == 0 || t.capacity.cpu <= f.max_vcpu as i64 * 1000)
    });
    c
}

fn rfc3339(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = capstan_disrupt::time::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

impl Sim {
    fn new(sc: Compiled, opts: Options) -> Sim {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let mut cloud_cfg = sc.scenario.cloud.clone();
        cloud_cfg.seed = cloud_cfg.seed.wrapping_add(opts.seed);
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5ca1_ab1e);
        let mut faults: BTreeMap<(u64, u64), Fault> = BTreeMap::new();
        let mut fault_log = Vec::new();
        let duration = sc.duration;
        let mut seq = 0u64;
        let mut add = |at: f64, f: Fault, log: &mut Vec<String>, what: String| {
            seq += 1;
            log.push(format!("{at:.0}s {what}"));
            faults.insert((at as u64, seq), f);
        };
        let fl = &sc.scenario.faults;
        for o in &fl.capacity_outages {
            let at = seconds(&o.at).unwrap_or(0.0);
            let d = seconds(&o.duration).unwrap_or(0.0);
            add(
                at,
                Fault::Outage {
                    prefix: o.instance_types.clone(),
                    capacity_type: o.capacity_type.clone(),
                    until: at + d,
                },
                &mut fault_log,
                format!("capacity outage {}*", o.instance_types),
            );
        }
        for s in &fl.interruption_storms {
            add(
                seconds(&s.at).unwrap_or(0.0),
                Fault::Storm {
                    fraction: s.fraction,
                },
                &mut fault_log,
                format!("interruption storm {:.0}%", s.fraction * 100.0),
            );
        }
        for c in &fl.controller_crashes {
            add(
                seconds(c).unwrap_or(0.0),
                Fault::Crash,
                &mut fault_log,
                "controller crash".into(),
            );
        }
        for c in &fl.leader_failovers {
            add(
                seconds(c).unwrap_or(0.0),
                Fault::Failover,
                &mut fault_log,
                "leader failover".into(),
            );
        }
        for t in &fl.throttling {
            let at = seconds(&t.at).unwrap_or(0.0);
            add(
                at,
                Fault::Throttle {
                    until: at + seconds(&t.duration).unwrap_or(0.0),
                },
                &mut fault_log,
                "cloud API throttling".into(),
            );
        }
        if opts.faults {
            cloud_cfg.faults.launch_failure_rate = rng.random_range(0.0..0.15);
            cloud_cfg.faults.never_ready_rate = rng.random_range(0.0..0.05);
            fault_log.push(format!(
                "launch failure rate {:.3}, never-ready rate {:.3}",
                cloud_cfg.faults.launch_failure_rate, cloud_cfg.faults.never_ready_rate
            ));
            let families = &sc.scenario.catalog.families;
            let at = |rng: &mut ChaCha8Rng| rng.random_range(0.05..0.9) * duration;
            for _ in 0..rng.random_range(1..=3) {
                let t = at(&mut rng);
                let prefix = if families.is_empty() || rng.random_bool(0.3) {
                    String::new()
                } else {
                    format!("{}.", families[rng.random_range(0..families.len())])
                };
                let ct = if rng.random_bool(0.5) {
                    Some("spot".to_string())
                } else {
                    None
                };
                let d = rng.random_range(300.0..3600.0);
                add(
                    t,
                    Fault::Outage {
                        prefix: prefix.clone(),
                        capacity_type: ct.clone(),
                        until: t + d,
                    },
                    &mut fault_log,
                    format!(
                        "capacity outage {prefix}* {} for {d:.0}s",
                        ct.unwrap_or_else(|| "all".into())
                    ),
                );
            }
            for _ in 0..rng.random_range(1..=2) {
                let t = at(&mut rng);
                let fraction = rng.random_range(0.1..0.5);
                add(
                    t,
                    Fault::Storm { fraction },
                    &mut fault_log,
                    format!("interruption storm {:.0}%", fraction * 100.0),
                );
            }
            for _ in 0..rng.random_range(1..=3) {
                let t = at(&mut rng);
                add(t, Fault::Crash, &mut fault_log, "controller crash".into());
            }
            for _ in 0..rng.random_range(0..=2) {
                let t = at(&mut rng);
                add(t, Fault::Failover, &mut fault_log, "leader failover".into());
            }
            for _ in 0..rng.random_range(0..=2) {
                let t = at(&mut rng);
                let d = rng.random_range(30.0..600.0);
                add(
                    t,
                    Fault::Throttle { until: t + d },
                    &mut fault_log,
                    format!("cloud API throttling for {d:.0}s"),
                );
            }
        }
        let catalog = catalog_for(&sc);
        let fake = FakeCloud::new(cloud_cfg, catalog.clone(), clock.clone());
        let cloud = SimCloud {
            inner: fake,
            clock: clock.clone(),
            throttled_until: Arc::new(AtomicU64::new(0)),
        };
        let workloads: Vec<WorkloadState> = sc
            .scenario
            .workloads
            .iter()
            .map(WorkloadState::new)
            .collect();
        let api = Arc::new(InMemoryApi::new());
        for p in &sc.nodepools {
            api.put(Object::NodePool(p.clone()));
        }
        for d in &sc.scenario.daemon_sets {
            let mut p = Pod {
                namespace: "kube-system".into(),
                name: d.name.clone(),
                owner_kind: Some("DaemonSet".into()),
                owner_name: Some(d.name.clone()),
                ..Default::default()
            };
            let _ = p.requests.set_str("cpu", &d.cpu);
            let _ = p.requests.set_str("memory", &d.memory);
            p.requests.pods = 1;
            api.put(Object::DaemonSet(p));
        }
        for w in &workloads {
            if let Some(pdb) = w.pdb() {
                api.put(Object::Pdb(pdb));
            }
        }
        let summary = Summary {
            scenario: sc.scenario.name.clone(),
            seed: opts.seed,
            faults: opts.faults,
            simulated_seconds: sc.duration,
            faults_injected: fault_log.clone(),
            ..Default::default()
        };
        let mut sim = Sim {
            types: catalog.instance_types,
            clock,
            api,
            cloud,
            controllers: Vec::new(),
            incarnation: vec![0; opts.replicas],
            paused_until: vec![0.0; opts.replicas],
            stale_write_due: vec![false; opts.replicas],
            view: Cache::default(),
            workloads,
            pods: HashMap::new(),
            members: (0..sc.scenario.workloads.len())
                .map(|_| Members::default())
                .collect(),
            becoming_ready: BTreeSet::new(),
            pending_durations: Vec::new(),
            startup_taints: BTreeMap::new(),
            faults,
            fault_log,
            rng,
            summary,
            samples: Vec::new(),
            events: Vec::new(),
            cost: 0.0,
            bound_cost: 0.0,
            unschedulable: BTreeSet::new(),
            capacity_seen: (0, 0),
            last_flush: 0.0,
            unit_prices: None,
            disrupting: BTreeSet::new(),
            capacity_back_at: 0.0,
            doomed_nodes: BTreeSet::new(),
            node_pool: BTreeMap::new(),
            opts,
            sc,
        };
        for i in 0..sim.opts.replicas {
            let c = sim.new_controller(i);
            sim.controllers.push(Some(c));
        }
        sim
    }

    fn new_controller(&mut self, i: usize) -> Ctl {
        let c = &self.sc.scenario.controller;
        let mut config = capstan_controller::Config {
            identity: format!("capstan-{i}-{}", self.incarnation[i]),
            seed: self.opts.seed,
            epoch_unix: self.sc.start_unix,
            ..Default::default()
        };
        if c.planner.as_deref() == Some("sched") {
            config.planner = Planner::Sched;
        }
        if let Some(v) = &c.batch_idle {
            config.batch_idle = seconds(v).unwrap_or(config.batch_idle);
        }
        if let Some(v) = &c.batch_max {
            config.batch_max = seconds(v).unwrap_or(config.batch_max);
        }
        if let Some(v) = &c.disruption_interval {
            config.disruption_interval = seconds(v).unwrap_or(config.disruption_interval);
        }
        if let Some(v) = &c.quiet_interval {
            config.quiet_interval = seconds(v).unwrap_or(config.quiet_interval);
        }
        Controller::new(
            self.api.clone(),
            Arc::new(self.cloud.clone()),
            self.clock.clone(),
            config,
        )
    }

    fn now(&self) -> f64 {
        self.clock.now().as_secs_f64()
    }

    fn event(&mut self, t: f64, kind: &str, detail: String) {
        self.events.push(TimelineEvent {
            t,
            kind: kind.to_string(),
            detail,
        });
    }

    async fn run(&mut self, progress: &mut dyn FnMut(f64)) -> Outcome {
        let wall = std::time::Instant::now();
        let steps = self.sc.duration as u64;
        for step in 1..=steps {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.now();
            self.faults(now).await;
            self.kubelet(now).await;
            self.sync_view().await;
            self.workloads(now).await;
            self.sync_view().await;
            self.schedule(now);
            self.controllers(now).await;
            self.sync_view().await;
            self.account_removals(now);
            if step % 60 == 0 {
                self.sample(now).await;
                progress(now);
            }
        }
        self.finish(wall.elapsed().as_secs_f64()).await
    }

    async fn sync_view(&mut self) {
        if let Err(e) = self.view.sync(&*self.api).await {
            tracing::warn!(error = %e, "simulator view sync failed");
        }
    }

    // ------------------------------------------------------------------ faults

    async fn faults(&mut self, now: f64) {
        let due: Vec<(u64, u64)> = self
            .faults
            .range(..(now as u64 + 1, 0))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let Some(f) = self.faults.remove(&k) else {
                continue;
            };
            match f {
                Fault::Outage {
                    prefix,
                    capacity_type,
                    until,
                } => {
                    let keys = self.offering_keys(&prefix, capacity_type.as_deref());
                    for key in &keys {
                        self.cloud.inner.set_capacity(key.clone(), 0);
                    }
                    self.event(
                        now,
                        "fault",
                        format!("capacity outage: {} offerings", keys.len()),
                    );
                    // Restore later, as a fault of its own.
                    let capacity = self.cloud.inner.config().capacity.per_pool;
                    self.faults
                        .insert((until as u64, k.1), Fault::Restore { keys, capacity });
                }
                Fault::Restore { keys, capacity } => {
                    for key in keys {
                        self.cloud.inner.set_capacity(key, capacity);
                    }
                    self.capacity_back_at = now;
                    self.event(now, "fault", "capacity restored".into());
                }
                Fault::Storm { fraction } => {
                    let spot: Vec<String> = self
                        .cloud
                        .inner
                        .list()
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|i| {
                            i.capacity_type == labels::CAPACITY_SPOT
                                && i.state == InstanceState::Running
                        })
                        .map(|i| i.provider_id.clone())
                        .collect();
                    let n = (spot.len() as f64 * fraction).ceil() as usize;
                    let mut chosen = spot.clone();
                    // Fisher–Yates on the run's RNG.
                    for i in (1..chosen.len()).rev() {
                        let j = self.rng.random_range(0..=i);
                        chosen.swap(i, j);
                    }
                    chosen.truncate(n);
                    for id in &chosen {
                        let _ = self.cloud.inner.interrupt(id);
                    }
                    self.event(
                        now,
                        "fault",
                        format!("interruption storm: {} spot instances", chosen.len()),
                    );
                }
                Fault::Crash => {
                    let Some(leader) = self.leader() else {
                        continue;
                    };
                    self.incarnation[leader] += 1;
                    self.summary.controller_restarts += 1;
                    let c = self.new_controller(leader);
                    self.controllers[leader] = Some(c);
                    self.event(now, "fault", format!("controller {leader} crashed"));
                }
                Fault::Failover => {
                    if let Some(leader) = self.leader() {
                        self.paused_until[leader] = now + 20.0;
                        self.stale_write_due[leader] = true;
                        self.event(now, "fault", format!("controller {leader} stalls for 20 s"));
                    }
                }
                Fault::Throttle { until } => {
                    self.cloud
                        .throttled_until
                        .store(until as u64, Ordering::SeqCst);
                    self.event(now, "fault", "cloud API throttled".into());
                }
            }
        }
    }

    fn offering_keys(&self, prefix: &str, capacity_type: Option<&str>) -> Vec<OfferingKey> {
        let mut keys = Vec::new();
        for t in &self.types {
            if !t.name.starts_with(prefix) {
                continue;
            }
            for zone in self.cloud.inner.zones() {
                for ct in [labels::CAPACITY_SPOT, labels::CAPACITY_ON_DEMAND] {
                    if capacity_type.is_some_and(|c| c != ct) {
                        continue;
                    }
                    keys.push(OfferingKey {
                        instance_type: t.name.clone(),
                        zone: zone.clone(),
                        capacity_type: ct.to_string(),
                    });
                }
            }
        }
        keys
    }

    fn leader(&self) -> Option<usize> {
        let lease = self.api.lease()?;
        (0..self.opts.replicas)
            .find(|&i| lease.holder == format!("capstan-{i}-{}", self.incarnation[i]))
    }

    // ------------------------------------------------------------------ kubelet

    /// Instances that booted register their node; instances that stopped take their node
    /// and pods with them. Startup taints are removed a few seconds after registration.
    async fn kubelet(&mut self, now: f64) {
        for tr in self.cloud.inner.take_transitions() {
            match tr.state {
                InstanceState::Running => self.register(now, &tr.provider_id),
                InstanceState::Terminated | InstanceState::ShuttingDown => {
                    let node = self.view.node_by_provider.get(&tr.provider_id).cloned();
                    if let Some(node) = node {
                        self.kill_node(now, &node, "instance terminated");
                    }
                }
                InstanceState::Pending => {}
            }
        }
        let due: Vec<String> = self
            .startup_taints
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for n in due {
            self.startup_taints.remove(&n);
            if let Some(Object::Node(mut node)) = self.api.get(Kind::Node, &n) {
                let claim = self.claim_for(&node);
                let startup: Vec<String> = claim
                    .map(|c| c.startup_taints.iter().map(|t| t.key.clone()).collect())
                    .unwrap_or_default();
                node.taints.retain(|t| !startup.contains(&t.key));
                self.api.put(Object::Node(node));
            }
        }
    }

    fn claim_for(&self, node: &Node) -> Option<NodeClaim> {
        let pid = node.provider_id.as_ref()?;
        self.view
            .claims
            .values()
            .map(|(_, c)| c)
            .find(|c| c.status.provider_id.as_ref() == Some(pid))
            .cloned()
    }

    fn register(&mut self, now: f64, provider_id: &str) {
        let Some(inst) = self.cloud.inner.peek(provider_id) else {
            return;
        };
        let Some(t) = self.types.iter().find(|t| t.name == inst.instance_type) else {
            return;
        };
        let name = format!("node-{}", provider_id.trim_start_matches("fake://"));
        let mut node =
            Node::for_instance_type(t, &name, &inst.zone, &inst.capacity_type, &inst.nodepool);
        for (k, v) in inst.labels.iter() {
            node.labels.entry(k.clone()).or_insert(v.clone());
        }
        node.provider_id = Some(provider_id.to_string());
        node.created = Some(rfc3339(self.sc.start_unix + now));
        node.taints.push(Taint {
            key: UNREGISTERED_TAINT.into(),
            value: String::new(),
            effect: Effect::NoExecute,
        });
        // The kubelet registers with the taints its NodeClaim asked for.
        let claim = self
            .view
            .claims
            .values()
            .map(|(_, c)| c)
            .find(|c| c.name == inst.claim_name)
            .cloned();
        if let Some(c) = &claim {
            node.taints.extend(c.taints.iter().cloned());
            node.taints.extend(c.startup_taints.iter().cloned());
            if !c.startup_taints.is_empty() {
                self.startup_taints
                    .insert(name.clone(), now + STARTUP_TAINT_SECONDS);
            }
        }
        self.node_pool.insert(name.clone(), inst.nodepool.clone());
        self.api.put(Object::Node(node));
        // DaemonSet pods start on every node.
        for (_, ds) in self.view.daemonsets.values() {
            let mut p = ds.clone();
            p.name = format!("{}-{name}", ds.name);
            p.node_name = Some(name.clone());
            p.phase = PodPhase::Running;
            self.api.put(Object::Pod(Arc::new(p)));
        }
        self.event(
            now,
            "node",
            format!(
                "{name} registered ({} {} {})",
                inst.instance_type, inst.zone, inst.capacity_type
            ),
        );
    }

    /// A node is gone (its instance stopped, or its object was deleted): the pods on it die.
    fn kill_node(&mut self, now: f64, node: &str, why: &str) {
        let pods: Vec<Arc<Pod>> = self
            .view
            .pods_on
            .get(node)
            .into_iter()
            .flat_map(|set| set.values().cloned())
            .collect();
        let mut lost = 0;
        for p in pods {
            self.api.remove(Kind::Pod, &p.key());
            if !p.is_daemonset_pod() {
                lost += 1;
                self.forget_pod(&p.key());
            }
        }
        if lost > 0 {
            self.summary.pods_lost += lost;
            self.event(now, "lost", format!("{lost} pods died with {node} ({why})"));
        }
        self.api.remove(Kind::Node, node);
    }

    // ------------------------------------------------------------------ workloads

    /// Forgets a pod that left the cluster, keeping its workload's counts.
    fn forget_pod(&mut self, key: &str) -> Option<PodTimes> {
        let w = self.pods.remove(key)?;
        let m = &mut self.members[w];
        let t = m.pods.remove(key)?;
        m.version += 1;
        if t.counted_ready {
            m.ready -= 1;
        }
        Some(t)
    }

    async fn workloads(&mut self, now: f64) {
        // Pods whose startup finished are Ready.
        while let Some((at, key)) = self.becoming_ready.first().cloned() {
            if at as f64 > now {
                break;
            }
            self.becoming_ready.pop_first();
            let Some(&w) = self.pods.get(&key) else {
                continue;
            };
            let m = &mut self.members[w];
            if let Some(t) = m.pods.get_mut(&key) {
                if t.bound.is_some() && !t.counted_ready {
                    t.counted_ready = true;
                    m.ready += 1;
                }
            }
        }
        let minute = (now / 60.0) as u64;
        let rps = workload::rps(&self.sc.scenario.traffic, now)
            * workload::noise(self.opts.seed, minute, self.sc.scenario.traffic.noise);
        for w in 0..self.workloads.len() {
            let ready = self.members[w].ready;
            self.workloads[w].tick(&self.sc, now, rps, ready);
        }
        let due: Vec<bool> = self
            .workloads
            .iter()
            .map(|st| st.autoscale_due(now))
            .collect();
        if due.contains(&true) {
            let mut scaled = Vec::new();
            for (w, st) in self.workloads.iter_mut().enumerate() {
                if due[w] {
                    let m = &self.members[w];
                    let live = || m.bound().map(|(k, b, r)| (k.as_str(), b, r)).collect();
                    if let Some(n) = st.autoscale(now, m.version, live) {
                        scaled.push(format!("{} → {n} replicas", st.spec.name));
                    }
                }
            }
            for e in scaled {
                self.event(now, "scale", e);
            }
        }
        for w in 0..self.workloads.len() {
            let desired = self.workloads[w].desired.max(0) as usize;
            let have = self.members[w].pods.len();
            if have < desired {
                for _ in have..desired {
                    let p = self.workloads[w].new_pod();
                    self.pods.insert(p.key(), w);
                    let m = &mut self.members[w];
                    m.pods.insert(
                        p.key(),
                        PodTimes {
                            created: now,
                            bound: None,
                            ready_at: None,
                            counted_ready: false,
                        },
                    );
                    m.version += 1;
                    self.summary.pods_created += 1;
                    self.api.put(Object::Pod(Arc::new(p)));
                }
            } else if have > desired {
                // The ReplicaSet controller removes unscheduled pods first, then unready,
                // then the newest.
                let pending: Vec<String> = self.members[w]
                    .pods
                    .iter()
                    .filter(|(_, t)| t.bound.is_none())
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut victims: Vec<String> = pending.into_iter().rev().collect();
                let mut rest = self.live_pods(w, now);
                rest.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0)));
                victims.extend(rest.into_iter().map(|p| p.0));
                for k in victims.into_iter().take(have - desired) {
                    if let Some(t) = self.forget_pod(&k) {
                        if t.bound.is_none() {
                            self.pending_durations.push(now - t.created);
                        }
                    }
                    self.api.remove(Kind::Pod, &k);
                }
            }
        }
    }

    /// (key, ready, start, ready_at) of a workload's bound pods.
    fn live_pods(&self, w: usize, now: f64) -> Vec<(String, bool, f64, f64)> {
        self.members[w]
            .bound()
            .map(|(k, b, r)| (k.clone(), r <= now, b, r))
            .collect()
    }

    // ------------------------------------------------------------------ kube-scheduler

    /// Binds pending pods to nodes that have room, with the scheduling core's predicates.
    ///
    /// Like kube-scheduler's unschedulable queue, a pod that did not fit waits until capacity
    /// changes (a node added or changed, a pod leaving a node) or a minute has passed.
    fn schedule(&mut self, now: f64) {
        if self.view.pending.is_empty() {
            return;
        }
        let capacity = (self.view.node_generation, self.view.freed);
        if capacity != self.capacity_seen || now - self.last_flush >= 60.0 {
            self.capacity_seen = capacity;
            self.last_flush = now;
            self.unschedulable.clear();
        }
        let pending: Vec<Arc<Pod>> = self
            .view
            .pending
            .iter()
            .filter(|k| !self.unschedulable.contains(*k))
            .filter_map(|k| self.view.pods.get(k))
            .map(|(_, p)| p.clone())
            .collect();
        if pending.is_empty() {
            return;
        }
        // When no pending pod looks at other pods (spread, affinity, host ports) and no
        // bound pod repels others, bound pods matter only by their requests, and a node
        // without room for the smallest pending pod can be left out.
        let topology = pending
            .iter()
            .any(|p| capstan_sched::predicates::looks_at_other_pods(p))
            || self.view.repelling > 0;
        let (min_cpu, min_mem) = pending.iter().fold((i64::MAX, i64::MAX), |(c, m), p| {
            (c.min(p.requests.cpu), m.min(p.requests.memory))
        });
        let mut snapshot = capstan_sched::Snapshot::default();
        for (name, (_, node)) in &self.view.nodes {
            if !node.ready {
                continue;
            }
            if topology {
                let pods = self
                    .view
                    .pods_on
                    .get(name)
                    .into_iter()
                    .flat_map(|set| set.values().cloned());
                snapshot.pods.extend(pods);
            } else {
                let used = self.view.used_on.get(name).cloned().unwrap_or_default();
                let a = &node.allocatable;
                let max_pods = if a.pods == 0 {
                    capstan_sched::DEFAULT_MAX_PODS
                } else {
                    a.pods
                };
                if a.cpu - used.cpu < min_cpu
                    || a.memory - used.memory < min_mem
                    || max_pods - used.pods < 1
                {
                    continue;
                }
                snapshot.used.insert(name.clone(), used);
            }
            snapshot.nodes.push(capstan_model::Node::clone(node));
        }
        if snapshot.nodes.is_empty() {
            return;
        }
        let plan = capstan_sched::solve(
            capstan_sched::SolveInput {
                snapshot: &snapshot,
                pending: &pending,
                nodepools: &[],
                instance_types: &[],
            },
            &capstan_sched::SolveOptions {
                skip_diagnosis: true,
                ..Default::default()
            },
        );
        for u in &plan.unschedulable {
            self.unschedulable.insert(pending[u.pod].key());
        }
        for b in plan.existing {
            for i in b.pods {
                let mut p = Pod::clone(&pending[i]);
                p.node_name = Some(b.node.clone());
                p.phase = PodPhase::Running;
                let key = p.key();
                if let Some(&w) = self.pods.get(&key) {
                    let m = &mut self.members[w];
                    if let Some(t) = m.pods.get_mut(&key).filter(|t| t.bound.is_none()) {
                        t.bound = Some(now);
                        m.version += 1;
                        let startup = self.workloads[w].spec.startup_seconds;
                        t.ready_at = Some(now + startup);
                        self.pending_durations.push(now - t.created);
                        self.becoming_ready
                            .insert(((now + startup).ceil() as u64, key.clone()));
                    }
                }
                self.api.put(Object::Pod(Arc::new(p)));
            }
        }
    }

    // ------------------------------------------------------------------ controllers

    async fn controllers(&mut self, now: f64) {
        for i in 0..self.opts.replicas {
            if now < self.paused_until[i] {
                continue;
            }
            let stale = std::mem::take(&mut self.stale_write_due[i]);
            let Some(mut c) = self.controllers[i].take() else {
                continue;
            };
            if stale {
                // Resumed from a stall: acts once on its old term before noticing.
                c.step_without_renewal().await;
            }
            c.step().await;
            let records = c.take_records();
            self.controllers[i] = Some(c);
            for r in records {
                self.on_record(i, r);
            }
        }
        // Budgets: nodes disrupted voluntarily never exceed what the NodePool allows.
        self.check_budgets(now);
    }

    fn on_record(&mut self, who: usize, r: capstan_controller::Record) {
        let t = r.at;
        match r.action {
            Action::Elected { term } => {
                self.summary.leader_elections += 1;
                self.event(t, "leader", format!("controller {who} leads term {term}"));
            }
            Action::Deposed { reason } => {
                self.event(t, "leader", format!("controller {who} deposed: {reason}"));
            }
            Action::Launched {
                claim,
                instance_type,
                zone,
                capacity_type,
                price,
            } => {
                self.summary.nodes_launched += 1;
                self.event(
                    t,
                    "launch",
                    format!("{claim}: {instance_type} {zone} {capacity_type} ${price:.4}/h"),
                );
            }
            Action::Terminated { claim, reason } => {
                self.summary.nodes_terminated += 1;
                self.event(t, "terminate", format!("{claim} ({reason})"));
            }
            Action::Interrupted { claim, event } => {
                if event == "SpotInterruption" {
                    self.summary.spot_interruptions += 1;
                }
                if event != "RebalanceRecommendation" {
                    if let Some(n) = self
                        .view
                        .claims
                        .get(&claim)
                        .and_then(|(_, c)| c.status.node_name.clone())
                    {
                        self.doomed_nodes.insert(n);
                    }
                }
                self.event(t, "interruption", format!("{claim}: {event}"));
            }
            Action::Disrupting {
                reason,
                candidates,
                replacements,
                savings,
            } => {
                self.summary.consolidations += 1;
                for c in &candidates {
                    self.disrupting.insert(c.clone());
                }
                self.event(
                    t,
                    "disruption",
                    format!(
                        "{reason}: {} → {replacements} replacements, saves ${savings:.3}/h",
                        candidates.join(", ")
                    ),
                );
            }
            Action::DisruptionAborted { candidates, why } => {
                self.event(
                    t,
                    "disruption",
                    format!("aborted {}: {why}", candidates.join(", ")),
                );
            }
            Action::GarbageCollected { provider_id } => {
                self.event(t, "gc", format!("terminated orphan {provider_id}"));
            }
            Action::NotRegistered { claim } => {
                self.event(t, "liveness", format!("{claim} never registered"));
            }
            Action::LaunchAbandoned { claim, error } => {
                self.event(t, "launch", format!("{claim} abandoned: {error}"));
            }
            _ => {}
        }
    }

    /// Counts budget violations: for each NodePool, nodes being disrupted (tainted,
    /// cordoned or NotReady, as the engine counts them) beyond what its budgets allow when a
    /// disruption starts.
    fn check_budgets(&mut self, now: f64) {
        if self.disrupting.is_empty() {
            return;
        }
        let started = std::mem::take(&mut self.disrupting);
        let mut pools: BTreeSet<String> = BTreeSet::new();
        for n in &started {
            if let Some((_, node)) = self.api_node(n) {
                if let Some(p) = node.labels.get(labels::NODEPOOL) {
                    pools.insert(p.clone());
                }
            }
        }
        for pool in pools {
            let Some(np) = self.sc.nodepools.iter().find(|p| p.name == pool) else {
                continue;
            };
            let nodes: Vec<Node> = self
                .api
                .all(Kind::Node)
                .into_iter()
                .filter_map(|o| match o {
                    Object::Node(n) => Some(n),
                    _ => None,
                })
                .filter(|n| n.labels.get(labels::NODEPOOL) == Some(&pool))
                .collect();
            let disrupting = nodes
                .iter()
                .filter(|n| {
                    n.unschedulable
                        || !n.ready
                        || n.taints
                            .iter()
                            .any(|t| t.key == capstan_disrupt::DISRUPTED_TAINT)
                })
                .count() as i64;
            let allowed = ["Empty", "Underutilized", "Drifted"]
                .iter()
                .map(|r| {
                    capstan_disrupt::budget_allows(
                        &np.budgets,
                        r,
                        nodes.len() as i64,
                        self.sc.start_unix + now,
                    )
                })
                .max()
                .unwrap_or(i64::MAX);
            if disrupting > allowed {
                self.summary.budget_violations += 1;
                self.event(
                    now,
                    "violation",
                    format!("{pool}: {disrupting} nodes disrupting, budget allows {allowed}"),
                );
            }
        }
    }

    fn api_node(&self, name: &str) -> Option<(u64, Node)> {
        match self.api.get(Kind::Node, name) {
            Some(Object::Node(n)) => Some((0, n)),
            _ => None,
        }
    }

    /// Pods capstan removed: evictions are fine (their ReplicaSet replaces them); a pod
    /// deleted outright while its PDB allowed no disruption is a violation. Nodes deleted
    /// with pods still on them kill those pods.
    fn account_removals(&mut self, now: f64) {
        for (p, how) in self.api.take_removed() {
            if let Some(t) = self.forget_pod(&p.key()) {
                if t.bound.is_none() {
                    self.pending_durations.push(now - t.created);
                }
            }
            // Deleting pods from a node the cloud is about to take is not a voluntary
            // disruption: they would die there anyway.
            let doomed = p
                .node_name
                .as_ref()
                .is_some_and(|n| self.doomed_nodes.contains(n));
            if how == Removal::DeletedByController && !doomed && self.api.pdb_blocks(&p) {
                self.summary.pdb_violations += 1;
                self.event(
                    now,
                    "violation",
                    format!("{} deleted past its PDB", p.key()),
                );
            }
        }
        // Pods on nodes that no longer exist (capstan deleted the node under them).
        let orphans: Vec<String> = self.view.dangling.iter().cloned().collect();
        for n in orphans {
            self.kill_node(now, &n, "node deleted with pods on it");
        }
    }

    // ------------------------------------------------------------------ observation

    async fn sample(&mut self, now: f64) {
        let rate: f64 = self
            .cloud
            .inner
            .live_instances(|i| i.map(|i| i.price).sum());
        self.cost += rate / 60.0;
        let (mut cpu, mut mem) = (0i64, 0i64);
        for (_, p) in self.view.pods.values() {
            if p.is_active() && !p.is_daemonset_pod() {
                cpu += p.requests.cpu;
                mem += p.requests.memory;
            }
        }
        let bound = self.lower_bound_rate(now, cpu, mem).await;
        self.bound_cost += bound / 60.0;
        let (mut spot, mut od) = (0, 0);
        for (_, n) in self.view.nodes.values() {
            match n.labels.get(labels::CAPACITY_TYPE).map(String::as_str) {
                Some(labels::CAPACITY_SPOT) => spot += 1,
                _ => od += 1,
            }
        }
        let pods = self.pods.len();
        self.summary.peak_nodes = self.summary.peak_nodes.max((spot + od) as u64);
        self.summary.peak_pods = self.summary.peak_pods.max(pods as u64);
        let minute = (now / 60.0) as u64;
        self.samples.push(Sample {
            t: now,
            rps: workload::rps(&self.sc.scenario.traffic, now)
                * workload::noise(self.opts.seed, minute, self.sc.scenario.traffic.noise),
            replicas: self.workloads.iter().map(|w| w.desired).collect(),
            pending: self.view.pending.len(),
            pods,
            spot_nodes: spot,
            on_demand_nodes: od,
            cost_per_hour: rate,
            bound_per_hour: bound,
            queue_depth: self.workloads.iter().map(|w| w.queue_depth).sum(),
        });
    }

    /// A lower bound on the hourly cost of any set of machines holding `cpu` millicores and
    /// `mem` bytes of requests: each resource bought at the cheapest price per unit any
    /// offering has right now.
    async fn lower_bound_rate(&mut self, now: f64, cpu: i64, mem: i64) -> f64 {
        let fresh = self.unit_prices.is_some_and(|(at, _, _)| now - at < 900.0);
        if !fresh {
            let (c, m) = self.unit_prices().await;
            self.unit_prices = Some((now, c, m));
        }
        let (_, per_cpu, per_byte) = self.unit_prices.expect("just set");
        let a = if per_cpu.is_finite() {
            per_cpu * cpu as f64
        } else {
            0.0
        };
        let b = if per_byte.is_finite() {
            per_byte * mem as f64
        } else {
            0.0
        };
        a.max(b)
    }

    /// The cheapest price per millicore and per byte any available offering has now.
    async fn unit_prices(&self) -> (f64, f64) {
        let Some(pool) = self.sc.nodepools.first() else {
            return (f64::INFINITY, f64::INFINITY);
        };
        let types = self
            .cloud
            .inner
            .instance_types(pool)
            .await
            .unwrap_or_default();
        let (mut per_cpu, mut per_byte) = (f64::INFINITY, f64::INFINITY);
        for t in &types {
            let Some(price) = t
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.price)
                .min_by(f64::total_cmp)
            else {
                continue;
            };
            if t.allocatable.cpu > 0 {
                per_cpu = per_cpu.min(price / t.allocatable.cpu as f64);
            }
            if t.allocatable.memory > 0 {
                per_byte = per_byte.min(price / t.allocatable.memory as f64);
            }
        }
        (per_cpu, per_byte)
    }

    async fn finish(&mut self, _wall_so_far: f64) -> Outcome {
        let now = self.now();
        // Leaks: live instances no NodeClaim owns, older than a full GC cycle.
        let claims: BTreeMap<String, NodeClaim> = self
            .api
            .all(Kind::NodeClaim)
            .into_iter()
            .filter_map(|o| match o {
                Object::NodeClaim(c) => Some((c.name.clone(), c)),
                _ => None,
            })
            .collect();
        let grace = 120.0;
        for i in self.cloud.inner.list().await.unwrap_or_default() {
            let owned = claims.get(&i.claim_name).is_some_and(|c| {
                c.status.provider_id.is_none()
                    || c.status.provider_id.as_ref() == Some(&i.provider_id)
            });
            if !owned && now - i.launched_at.as_secs_f64() > grace {
                self.summary.leaked_instances += 1;
                self.event(
                    now,
                    "violation",
                    format!("leaked instance {}", i.provider_id),
                );
            }
        }
        // Pods still pending: their wait counts; those that fit somewhere are stuck.
        let mut stuck_candidates: Vec<Arc<Pod>> = Vec::new();
        for (k, t) in self.members.iter().flat_map(|m| &m.pods) {
            if t.bound.is_none() {
                self.pending_durations.push(now - t.created);
                // A pod has had its chance once capacity has been back a while.
                if now - t.created.max(self.capacity_back_at) > STUCK_SECONDS {
                    if let Some(p) = self.api.pod(k) {
                        stuck_candidates.push(p);
                    }
                }
            }
        }
        if !stuck_candidates.is_empty() {
            let pools: Vec<NodePool> = self.sc.nodepools.clone();
            // What the cloud offers now, with its availability.
            let mut offered: BTreeMap<String, InstanceType> = BTreeMap::new();
            for pool in &pools {
                for t in self
                    .cloud
                    .inner
                    .instance_types(pool)
                    .await
                    .unwrap_or_default()
                {
                    offered.entry(t.name.clone()).or_insert(t);
                }
            }
            let offered: Vec<InstanceType> = offered.into_values().collect();
            // An empty cluster, but with today's machines counted against NodePool limits: a
            // pod that only fits past a limit is not stuck.
            let snapshot = capstan_sched::Snapshot {
                counted: self
                    .view
                    .nodes
                    .values()
                    .filter_map(|(_, n)| {
                        let pool = n.labels.get(labels::NODEPOOL)?;
                        let cap = if n.capacity.is_zero() {
                            n.allocatable.clone()
                        } else {
                            n.capacity.clone()
                        };
                        Some((pool.clone(), cap))
                    })
                    .collect(),
                ..Default::default()
            };
            for p in &stuck_candidates {
                let plan = capstan_sched::solve(
                    capstan_sched::SolveInput {
                        snapshot: &snapshot,
                        pending: std::slice::from_ref(p),
                        nodepools: &pools,
                        instance_types: &offered,
                    },
                    &Default::default(),
                );
                if plan.unschedulable.is_empty() {
                    self.summary.pods_stuck += 1;
                }
            }
        }
        let mut d = std::mem::take(&mut self.pending_durations);
        d.sort_by(f64::total_cmp);
        self.summary.pod_pending_seconds_p50 = round(percentile(&d, 50.0), 3);
        self.summary.pod_pending_seconds_p99 = round(percentile(&d, 99.0), 3);
        self.summary.pod_pending_seconds_max = round(d.last().copied().unwrap_or(0.0), 3);
        self.summary.cost_usd = round(self.cost, 4);
        self.summary.cost_lower_bound_usd = round(self.bound_cost, 4);
        self.summary.fenced_writes = self.api.stats().fenced_writes;
        self.summary.faults_injected = self.fault_log.clone();
        Outcome {
            summary: self.summary.clone(),
            workloads: self.workloads.iter().map(|w| w.spec.name.clone()).collect(),
            samples: std::mem::take(&mut self.samples),
            events: std::mem::take(&mut self.events),
        }
    }
}

#[cfg(test)]
mod tests;
