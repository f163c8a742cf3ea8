//! capstan's deterministic simulator: the real controller loops against an in-memory
//! Kubernetes API and the fake cloud, with the rest of a cluster modelled around them —
//! kubelets that register nodes when instances boot ([`kubelet`]), a kube-scheduler that binds
//! pods with the scheduling core's predicates ([`scheduler`]), ReplicaSets, the HPA and a
//! KEDA-style scaler driven by a traffic trace ([`replicasets`], [`workload`]), and faults
//! ([`faults`]). Everything runs on a single-threaded tokio runtime with paused time, one
//! virtual second per step, from a seed: the same seed gives the same run.
//!
//! The simulator never makes a decision the controller makes (invariant 3): it only plays
//! the parts of the world capstan does not own, and counts what happened ([`accounting`]).

mod accounting;
mod cloud;
mod faults;
pub mod forecast;
mod kubelet;
mod replicasets;
pub mod report;
pub mod scenario;
mod scheduler;
pub mod workload;

pub use capstan_controller::memory::{ApiStats, InMemoryApi, Removal};
pub use cloud::SimCloud;

use capstan_cloud::{Clock, TokioClock};
use capstan_controller::api::{Kind, Object};
use capstan_controller::{ApiClient, Cache, Controller, Planner};
use capstan_fake_cloud::FakeCloud;
use capstan_model::{InstanceType, Pod};
use faults::Fault;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use replicasets::Members;
use scenario::{Compiled, PlannerSpec};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
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
    /// The in-memory API refuses writes from processes that do not hold the lease (an extra
    /// assertion; capstan must not need it, so it is off by default).
    pub strict_fencing: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            faults: false,
            replicas: 2,
            strict_fencing: false,
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
    /// At each minute, the packing crate's LP lower bound on the price of machines for every
    /// workload pod present then, summed over the run.
    pub cost_lower_bound_usd: f64,
    /// `cost_usd / cost_lower_bound_usd`: how far above the hindsight bound the run paid.
    pub cost_over_bound: f64,
    pub pod_pending_seconds_p50: f64,
    pub pod_pending_seconds_p99: f64,
    pub pod_pending_seconds_max: f64,
    /// Past the first day (a run longer than a day), the pending p99 of pods created then:
    /// what a forecaster that learned from the first day changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_pending_seconds_p99_after_day_1: Option<f64>,
    /// Pending p99 of the pods created during predictable ramps: a queue's scheduled arrival
    /// windows, and the daily rise of traffic (trough to peak hour) outside the scenario's
    /// irregular spikes and lulls. Capacity ahead of demand is for these.
    pub pod_pending_seconds_p99_in_ramps: f64,
    /// The same past the first day (a run longer than a day).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_pending_seconds_p99_in_ramps_after_day_1: Option<f64>,
    /// Each forecasting workload's last rolling-origin backtest: mean absolute error
    /// relative to the seasonal-naive forecast (below 1: better).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub forecast_relative_mae: BTreeMap<String, f64>,
    /// Pods a NodeClaim was created for while they were pending: how many, and seconds from
    /// their creation to that launch request.
    pub pods_launched_for: u64,
    pub pod_launch_request_seconds_p50: f64,
    pub pod_launch_request_seconds_p99: f64,
    pub nodes_launched: u64,
    pub nodes_terminated: u64,
    pub spot_interruptions: u64,
    pub consolidations: u64,
    /// Pods the simulated kube-scheduler deleted to make room for pods of higher priority.
    pub pods_preempted: u64,
    pub pods_lost: u64,
    pub budget_violations: u64,
    pub pdb_violations: u64,
    pub leaked_instances: u64,
    /// Claims for which the cloud ran more than one instance at once.
    pub double_launches: u64,
    /// Pods that fit a node of some NodePool but were still pending after 15 minutes at the end.
    pub pods_stuck: u64,
    pub peak_nodes: u64,
    pub peak_pods: u64,
    pub pods_created: u64,
    pub controller_restarts: u64,
    pub leader_elections: u64,
    /// Writes the API server refused because their resourceVersion or uid precondition no
    /// longer held.
    pub writes_refused_by_preconditions: u64,
    /// Writes that reached the API server from a process not holding the lease (a leader
    /// frozen mid-write); refused only with `strict_fencing`.
    pub writes_from_deposed_leaders: u64,
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
        check(self.double_launches, "claims launched twice");
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
    /// Each workload's forecast floor (0 without a forecast).
    pub floors: Vec<i32>,
    /// Pods pending, placeholders (headroom, forecast room) left out: they wait for no one.
    pub pending: usize,
    pub pods: usize,
    pub spot_nodes: usize,
    pub on_demand_nodes: usize,
    pub cost_per_hour: f64,
    pub bound_per_hour: f64,
    pub queue_depth: f64,
}

/// What a workload's forecaster learned: the reactive HPA recommendation at each step, and
/// its last backtest.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForecastSeries {
    pub workload: String,
    pub step_seconds: f64,
    pub season_steps: usize,
    pub lead_steps: usize,
    pub recommended: Vec<f64>,
    pub backtest_mae: f64,
    pub backtest_relative_mae: Option<f64>,
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
    /// Each forecasting workload's learned series (`forecast.json`).
    pub forecasts: Vec<ForecastSeries>,
    /// Wall-clock cost of the controller's steps (not in `summary.json`: not reproducible).
    pub passes: Passes,
}

/// The wall time the controller processes spent in their steps, and the slowest step that
/// planned and the slowest that ran a disruption evaluation, with the cluster's size then:
/// the scale benchmark's "one controller pass".
#[derive(Clone, Debug, Default, Serialize)]
pub struct Passes {
    pub steps: u64,
    pub seconds: f64,
    pub slowest_plan: Option<Pass>,
    pub slowest_evaluation: Option<Pass>,
}

/// One timed controller step.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Pass {
    /// Simulated second it ran at.
    pub at: f64,
    pub seconds: f64,
    /// Pods planned (a planning step) or nodes evaluated (an evaluation step).
    pub work: usize,
    pub nodes: usize,
    pub pods: usize,
}

impl Passes {
    fn record(&mut self, at: f64, seconds: f64, work: capstan_controller::PassWork, view: &Cache) {
        self.steps += 1;
        self.seconds += seconds;
        let slower = |p: &Option<Pass>| p.is_none_or(|p| seconds > p.seconds);
        let pass = |work| Pass {
            at,
            seconds,
            work,
            nodes: view.nodes().count(),
            pods: view.pods().count(),
        };
        if let Some(n) = work.planned.filter(|_| slower(&self.slowest_plan)) {
            self.slowest_plan = Some(pass(n));
        }
        if let Some(n) = work.evaluated.filter(|_| slower(&self.slowest_evaluation)) {
            self.slowest_evaluation = Some(pass(n));
        }
    }
}

type Ctl = Controller<ApiClient, SimCloud>;

/// Identity of the simulator's own connection to the API (its kubelets, scheduler and
/// ReplicaSets read through it).
const SIMULATOR: &str = "simulator";

struct Sim {
    sc: Compiled,
    opts: Options,
    clock: Arc<dyn Clock>,
    api: InMemoryApi,
    /// The simulator's own reads.
    reader: ApiClient,
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
    /// Of those, the pods created after the first day.
    pending_after_day_1: Vec<f64>,
    /// The same, for pods created during predictable ramps.
    pending_in_ramps: Vec<f64>,
    pending_in_ramps_after_day_1: Vec<f64>,
    /// Seconds from a pod's creation to the first NodeClaim created for it.
    request_durations: Vec<f64>,
    startup_taints: BTreeMap<String, f64>,
    faults: BTreeMap<(u64, u64), Fault>,
    fault_log: Vec<String>,
    rng: ChaCha8Rng,
    summary: Summary,
    samples: Vec<Sample>,
    events: Vec<TimelineEvent>,
    cost: f64,
    bound_cost: f64,
    /// Pods the scheduler tried and could not place, skipped until capacity changes (or a
    /// minute passes), when the set is emptied (hashed, for lookups only).
    unschedulable: std::collections::HashSet<String, foldhash::fast::FixedState>,
    /// The pods that failed in the last step, entered in `unschedulable` only if the next
    /// step sees no capacity change: while capacity changes every second (a cluster filling
    /// up) they never need to be.
    failed: Vec<Arc<capstan_model::Pod>>,
    capacity_seen: (u64, u64),
    last_flush: f64,
    /// The view's `pending_put` when the scheduler last went over the pending pods.
    pending_put_seen: u64,
    /// (when, $ per millicore-hour, $ per byte-hour) for the cost lower bound.
    /// What the cloud offered when last asked (for the lower bound), and when.
    offered: Option<(f64, Vec<InstanceType>)>,
    /// The last lower bound, for the workload pod counts it was computed for.
    last_bound: Option<(Vec<usize>, f64)>,
    disrupting: BTreeSet<String>,
    /// When capacity last came back after an outage.
    capacity_back_at: f64,
    /// Nodes whose instance the cloud will take (interruption warnings, maintenance).
    doomed_nodes: BTreeSet<String>,
    /// Claims already counted as launched twice.
    double_launched: BTreeSet<String>,
    passes: Passes,
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

impl Sim {
    fn new(sc: Compiled, opts: Options) -> Sim {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let mut cloud_cfg = sc.scenario.cloud.clone();
        cloud_cfg.seed = cloud_cfg.seed.wrapping_add(opts.seed);
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5ca1_ab1e);
        let (faults, fault_log) = faults::plan(&sc, &opts, &mut rng, &mut cloud_cfg);
        let catalog = sc.catalog();
        let fake = FakeCloud::new(cloud_cfg, catalog.clone(), clock.clone());
        let cloud = SimCloud::new(fake, clock.clone());
        let workloads: Vec<WorkloadState> = sc
            .scenario
            .workloads
            .iter()
            .map(WorkloadState::new)
            .collect();
        let api = InMemoryApi::new(clock.clone());
        api.set_strict_fencing(opts.strict_fencing);
        for p in &sc.nodepools {
            api.put(Object::NodePool(Arc::new(p.clone())));
        }
        for d in &sc.scenario.daemon_sets {
            let mut p = Pod {
                namespace: "kube-system".into(),
                name: d.name.clone(),
                owner_kind: Some("DaemonSet".into()),
                owner_name: Some(d.name.clone()),
                ..Default::default()
            };
            p.requests.cpu = d.cpu.milli;
            p.requests.memory = d.memory.units;
            p.requests.pods = 1;
            api.put(Object::DaemonSet(Arc::new(p)));
        }
        for w in &workloads {
            if let Some(pdb) = w.pdb() {
                api.put(Object::Pdb(Arc::new(pdb)));
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
            reader: api.client(SIMULATOR),
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
            pending_after_day_1: Vec::new(),
            pending_in_ramps: Vec::new(),
            pending_in_ramps_after_day_1: Vec::new(),
            request_durations: Vec::new(),
            startup_taints: BTreeMap::new(),
            faults,
            fault_log,
            rng,
            summary,
            samples: Vec::new(),
            events: Vec::new(),
            cost: 0.0,
            bound_cost: 0.0,
            unschedulable: Default::default(),
            failed: Vec::new(),
            capacity_seen: (0, 0),
            last_flush: 0.0,
            pending_put_seen: 0,
            offered: None,
            last_bound: None,
            disrupting: BTreeSet::new(),
            capacity_back_at: 0.0,
            doomed_nodes: BTreeSet::new(),
            double_launched: BTreeSet::new(),
            passes: Passes::default(),
            opts,
            sc,
        };
        for i in 0..sim.opts.replicas {
            let c = sim.new_controller(i);
            sim.controllers.push(Some(c));
        }
        sim
    }

    fn identity(&self, i: usize) -> String {
        format!("capstan-{i}-{}", self.incarnation[i])
    }

    fn new_controller(&mut self, i: usize) -> Ctl {
        let c = &self.sc.scenario.controller;
        let defaults = capstan_controller::Config::default();
        let secs = |v: Option<scenario::Secs>, d: f64| v.map_or(d, |s| s.0);
        let identity = self.identity(i);
        let config = capstan_controller::Config {
            identity: identity.clone(),
            seed: self.opts.seed,
            epoch_unix: self.sc.start_unix,
            planner: match c.planner {
                Some(PlannerSpec::Sched) => Planner::Sched,
                Some(PlannerSpec::Pack) | None => Planner::Pack,
            },
            batch_idle: secs(c.batch_idle, defaults.batch_idle),
            batch_max: secs(c.batch_max, defaults.batch_max),
            disruption_interval: secs(c.disruption_interval, defaults.disruption_interval),
            quiet_interval: secs(c.quiet_interval, defaults.quiet_interval),
            spot_to_spot_consolidation: c.feature_gates.spot_to_spot_consolidation,
            expendable_priority_cutoff: c
                .expendable_priority_cutoff
                .unwrap_or(defaults.expendable_priority_cutoff),
            ..defaults
        };
        Controller::new(
            Arc::new(self.api.client(&identity)),
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
        self.finish().await
    }

    async fn sync_view(&mut self) {
        if let Err(e) = self.view.sync(&self.reader).await {
            tracing::warn!(error = %e, "simulator view sync failed");
        }
    }

    fn leader(&self) -> Option<usize> {
        let lease = self.api.lease()?;
        (0..self.opts.replicas).find(|&i| lease.holder == self.identity(i))
    }

    /// Steps each controller process; a process resuming from a freeze first sends the write
    /// it froze on, from what it knew then.
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
                c.step_after_freeze().await;
            }
            let started = std::time::Instant::now();
            c.step().await;
            let wall = started.elapsed().as_secs_f64();
            self.passes.record(now, wall, c.take_work(), &self.view);
            let records = c.take_records();
            self.controllers[i] = Some(c);
            for r in records {
                self.on_record(i, r);
            }
        }
        // Budgets: nodes disrupted voluntarily never exceed what the NodePool allows.
        self.check_budgets(now);
    }

    fn claims(&self) -> BTreeMap<String, Arc<capstan_model::NodeClaim>> {
        self.api
            .all(Kind::NodeClaim)
            .into_iter()
            .filter_map(|o| match o {
                Object::NodeClaim(c) => Some((c.name.clone(), c)),
                _ => None,
            })
            .collect()
    }
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

#[cfg(test)]
mod tests;
