//! capstan's controller: the reconcile loops, written once against two traits —
//! [`ClusterApi`] (the Kubernetes API) and [`CloudProvider`] — so the same code runs against
//! kube + a cloud in production and against the simulator's in-memory API + fake cloud.
//!
//! One [`Controller::step`] runs every loop that is due, in a fixed order; each loop is a
//! module with its own state:
//!
//! 1. [`election`] — acquire or renew the Lease; a follower does nothing else;
//! 2. sync — bring the [`Cache`] up to date (watch each kind, or list it again);
//! 3. [`interruption`] — act on the cloud's events: pre-launch replacements, drain in time;
//! 4. [`lifecycle`] — per claim: [`launch`], [`registration`] (register and initialize),
//!    [`termination`] (drain through the eviction API, delete the instance, release the
//!    finalizers);
//! 5. [`provisioning`] — batch pending pods, plan, create NodeClaims;
//! 6. [`disruption`] — run the engine, re-validate after a delay, launch replacements first,
//!    taint, then terminate the candidates;
//! 7. [`gc`] — terminate instances no NodeClaim owns; clean up claims whose instance is gone.
//!
//! Nothing here reads the wall clock: time comes from a [`Clock`]. Decisions come from the
//! pure crates (`sched`, `pack`, `disrupt`) and from the pure functions of each loop module,
//! as data; the loops only apply them. Writes go through [`context::Ctx::write`], which
//! refuses to write unless this process leads within its renew deadline (client-side fencing,
//! as client-go does it), applies what the server returned to the cache, and logs and counts
//! failures.

pub mod api;
pub mod cache;
pub mod memory;
pub mod metrics;

mod by_claim;
mod catalog;
mod context;
mod disruption;
mod election;
mod gc;
pub mod headroom;
mod interruption;
mod launch;
mod lifecycle;
mod provisioning;
mod registration;
mod termination;

#[cfg(test)]
mod harness;

pub use api::{
    ApiError, Change, ClusterApi, ClusterEvent, EventType, Kind, Lease, Listing, Meta, Object,
    Write,
};
pub use cache::Cache;
pub use context::{PassWork, WriteStats};
pub use launch::jittered_backoff;
pub use memory::{ApiClient, InMemoryApi};
pub use metrics::Metrics;

use capstan_cloud::{Clock, CloudProvider};
use capstan_model::disruption::Reason;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How new NodeClaims are planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Planner {
    /// capstan's packer (`pack::pack`, default strategy): cheapest cover, spot spread.
    #[default]
    Pack,
    /// The scheduling core alone (`sched::solve`): Karpenter's first-fit.
    Sched,
}

/// Cluster Autoscaler's default expendable cutoff: pods below priority -10 buy no nodes.
pub const EXPENDABLE_PRIORITY_CUTOFF: i32 = -10;

/// The controller's settings. Times are seconds.
#[derive(Clone, Debug)]
pub struct Config {
    /// This process's identity in the lease.
    pub identity: String,
    /// Seeds the backoff jitter and claim names.
    pub seed: u64,
    /// Unix seconds at clock zero (the disruption engine works in Unix time).
    pub epoch_unix: f64,
    /// Provision once no new pending pod arrived for this long…
    pub batch_idle: f64,
    /// …or once the batch is this old.
    pub batch_max: f64,
    /// Launches per second, and burst.
    pub launch_rate: u32,
    pub launch_burst: u32,
    pub backoff_base: f64,
    pub backoff_max: f64,
    /// How long an offering that returned InsufficientCapacity is avoided.
    pub unavailable_ttl: f64,
    /// A launched instance whose node has not registered after this long is replaced.
    pub registration_ttl: f64,
    /// A claim whose launch has not succeeded this long after it was made is deleted and its
    /// pods planned again (Karpenter's launch timeout).
    pub launch_ttl: f64,
    pub disruption_interval: f64,
    /// After an evaluation that found nothing to do, the next waits for a change to nodes or
    /// claims, or this long.
    pub quiet_interval: f64,
    /// A consolidation command is re-validated after this delay before it is carried out.
    pub validation_delay: f64,
    /// Give up a disruption whose replacements are not initialized after this long.
    pub replacement_timeout: f64,
    /// How often garbage collection lists the provider's instances (and asks whether they
    /// drifted). Karpenter's collection runs every two minutes: each pass lists every
    /// instance (tens of `DescribeInstances` pages at 10,000 nodes) and looks at each.
    pub gc_interval: f64,
    /// An instance with no NodeClaim is left alone this long (its claim may be being written).
    pub gc_grace: f64,
    /// Elect a leader through the Lease; `false` runs this process as the only one (it leads
    /// from the start and never touches the Lease).
    pub leader_elect: bool,
    /// How long a lease lasts without renewal before another process may take it.
    pub lease_duration: f64,
    /// The leader stops writing when its last successful renewal is older than this
    /// (shorter than `lease_duration`, as client-go's renewDeadline).
    pub renew_deadline: f64,
    /// How often the lease is read and renewed (client-go's retryPeriod); 0: every pass.
    /// Passes in between act on the renewal they have, within the renew deadline.
    pub renew_interval: f64,
    pub planner: Planner,
    /// Instance types (with prices) are fetched again after this long.
    pub catalog_ttl: f64,
    /// The schedulers whose unschedulable pods capstan provisions for (`spec.schedulerName`).
    pub scheduler_names: Vec<String>,
    /// Pods whose priority is below this are expendable (Cluster Autoscaler's
    /// `--expendable-pods-priority-cutoff`): they never cause a launch, and run only where
    /// there is room.
    pub expendable_priority_cutoff: i32,
    /// The namespace NodePools' headroom placeholder pods live in (capstan's own).
    pub headroom_namespace: String,
    /// Karpenter's `--preference-policy Ignore`: plan pods without their preferences
    /// (preferred node and pod (anti-)affinity, `ScheduleAnyway` spread). Off: they are
    /// honoured where they can be and relaxed where they cannot.
    pub ignore_preferences: bool,
    /// Karpenter's `--min-values-policy BestEffort`: a NodeClaim whose types cannot meet a
    /// NodePool's `minValues` asks for what they offer (and is annotated
    /// `karpenter.sh/nodeclaim-min-values-relaxed`); off (Strict), the pod waits.
    pub relax_min_values: bool,
    /// Rebuild the state gauges of [`Metrics`] (pods, nodes, NodePools, prices) at most this
    /// often; 0: never (the simulator, where nothing scrapes them).
    pub metrics_state_interval: f64,
    /// The Lease's name, as the leader-election metric labels it.
    pub lease_name: String,
    /// Karpenter's `SpotToSpotConsolidation` feature gate (off by default, as Karpenter's):
    /// consolidation may replace spot nodes with cheaper spot nodes (a single node only with
    /// 15 cheaper spot types). Off, spot nodes are only deleted.
    pub spot_to_spot_consolidation: bool,
    /// Karpenter's `StaticCapacity` feature gate (off by default, as Karpenter's): NodePools
    /// with `replicas` keep that many nodes. Off, such a NodePool launches nothing and says
    /// why.
    pub static_capacity: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            identity: "capstan".into(),
            seed: 0,
            epoch_unix: 0.0,
            batch_idle: 1.0,
            batch_max: 10.0,
            launch_rate: 10,
            launch_burst: 20,
            backoff_base: 1.0,
            backoff_max: 300.0,
            unavailable_ttl: 180.0,
            registration_ttl: 900.0,
            launch_ttl: 300.0,
            disruption_interval: 10.0,
            quiet_interval: 60.0,
            validation_delay: 15.0,
            replacement_timeout: 600.0,
            gc_interval: 120.0,
            gc_grace: 30.0,
            leader_elect: true,
            lease_duration: 15.0,
            renew_deadline: 10.0,
            renew_interval: 0.0,
            planner: Planner::Pack,
            catalog_ttl: 300.0,
            scheduler_names: vec![capstan_model::pod::DEFAULT_SCHEDULER.to_string()],
            expendable_priority_cutoff: EXPENDABLE_PRIORITY_CUTOFF,
            headroom_namespace: "kube-system".into(),
            ignore_preferences: false,
            relax_min_values: false,
            metrics_state_interval: 0.0,
            lease_name: api::LEASE_NAME.to_string(),
            spot_to_spot_consolidation: false,
            static_capacity: false,
        }
    }
}

/// Something the controller did, for logs, the simulator's timeline and tests.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Elected {
        term: u64,
    },
    Deposed {
        reason: String,
    },
    Provisioned {
        claims: usize,
        pods: usize,
        unschedulable: usize,
        /// Seconds the plan took on the controller's clock (0 on the simulator's paused clock).
        plan_seconds: f64,
    },
    /// A NodeClaim created for pending pods: the launch request they waited for.
    Requested {
        claim: String,
        pods: Vec<String>,
    },
    Launched {
        claim: String,
        instance_type: String,
        zone: String,
        capacity_type: String,
        price: f64,
    },
    LaunchFailed {
        claim: String,
        error: String,
        retry_in: f64,
    },
    LaunchAbandoned {
        claim: String,
        error: String,
    },
    Registered {
        claim: String,
        node: String,
    },
    Initialized {
        claim: String,
    },
    NotRegistered {
        claim: String,
    },
    Disrupting {
        reason: Reason,
        candidates: Vec<String>,
        replacements: usize,
        savings: f64,
    },
    DisruptionAborted {
        candidates: Vec<String>,
        why: String,
    },
    Interrupted {
        claim: String,
        event: Reason,
    },
    Terminated {
        claim: String,
        reason: Reason,
    },
    GarbageCollected {
        provider_id: String,
    },
}

/// An [`Action`] and when it happened (clock seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub at: f64,
    pub action: Action,
}

/// The loops' context, borrowing the controller field by field (so a loop's own state can be
/// borrowed beside it).
macro_rules! cx {
    ($c:expr) => {
        context::Ctx {
            api: &*$c.api,
            cloud: &*$c.cloud,
            clock: &*$c.clock,
            config: &$c.config,
            s: &mut $c.shared,
        }
    };
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The loops and their memory. Everything here may be lost (a crash): the durable state is
/// in the API and the cloud, and a new controller picks up from there.
pub struct Controller<A: ClusterApi, C: CloudProvider> {
    api: Arc<A>,
    cloud: Arc<C>,
    clock: Arc<dyn Clock>,
    config: Config,
    shared: context::Shared,
    election: election::Election,
    lifecycle: lifecycle::Lifecycle,
    launcher: launch::Launcher,
    provisioner: provisioning::Provisioner,
    disruption: disruption::Disruption,
    headroom: headroom::Headroom,
    gc: gc::Gc,
    /// Clock seconds the state gauges were last rebuilt.
    state_at: Option<f64>,
    /// Clock seconds the record of Events said once was last pruned.
    reported_pruned_at: f64,
}

impl<A: ClusterApi, C: CloudProvider> Controller<A, C> {
    pub fn new(api: Arc<A>, cloud: Arc<C>, clock: Arc<dyn Clock>, config: Config) -> Self {
        let mut seed = config.seed;
        for b in config.identity.bytes() {
            seed = seed.wrapping_mul(0x100_0000_01b3) ^ b as u64;
        }
        Controller {
            launcher: launch::Launcher::new(&config, clock.clone()),
            shared: context::Shared::new(ChaCha8Rng::seed_from_u64(seed)),
            election: election::Election::default(),
            lifecycle: lifecycle::Lifecycle::default(),
            provisioner: provisioning::Provisioner::default(),
            disruption: disruption::Disruption::default(),
            headroom: headroom::Headroom::default(),
            gc: gc::Gc::default(),
            state_at: None,
            reported_pruned_at: 0.0,
            api,
            cloud,
            clock,
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn is_leader(&self) -> bool {
        self.shared.lead.term.is_some()
    }

    /// Whether the last pass reached the API server.
    pub fn connected(&self) -> bool {
        self.election.connected
    }

    pub fn cache(&self) -> &Cache {
        &self.shared.cache
    }

    /// The metrics `/metrics` serves (clones share them).
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Writes attempted, refused and failed, by kind of write.
    pub fn write_stats(&self) -> &WriteStats {
        &self.shared.stats
    }

    /// What the steps since the last call planned and evaluated (see [`PassWork`]).
    pub fn take_work(&mut self) -> PassWork {
        std::mem::take(&mut self.shared.work)
    }

    /// What the controller did since the last call.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.shared.records)
    }

    /// Runs the loops until `shutdown` resolves, every `tick` (production); then releases the
    /// Lease. The simulator calls [`Controller::step`] itself, on virtual time.
    pub async fn run(mut self, tick: Duration, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            // A pass is never cut short: the write in flight finishes before shutdown.
            self.step().await;
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(tick) => {}
            }
        }
        self.release().await;
    }

    /// Gives up the Lease (holder cleared), so a successor need not wait for it to expire.
    pub async fn release(&mut self) {
        let now = secs(self.clock.now());
        self.election.release(&mut cx!(self), now).await;
    }

    /// Runs every loop that is due.
    pub async fn step(&mut self) {
        let now = secs(self.clock.now());
        let span = tracing::debug_span!("election", identity = %self.config.identity);
        let leading = self
            .election
            .reconcile(&mut cx!(self), now)
            .instrument(span)
            .await;
        let fresh = std::mem::take(&mut self.election.fresh_term);
        self.shared
            .metrics
            .set_leader(&self.config.lease_name, leading);
        if !leading {
            if self.state_at.take().is_some() {
                self.shared.metrics.clear_state();
            }
            return;
        }
        if fresh {
            self.recover(now).await;
        }
        if let Err(e) = self.shared.cache.sync(&*self.api).await {
            tracing::warn!(error = %e, "cache sync failed");
            self.shared.metrics.set_synced(false);
            return;
        }
        self.shared.metrics.set_synced(true);
        self.reconcile(now).await;
        if now - self.reported_pruned_at >= 60.0 {
            self.reported_pruned_at = now;
            let cache = &self.shared.cache;
            let invalid: std::collections::BTreeSet<(api::Kind, String)> =
                cache.invalid().map(|i| (i.kind, i.key.clone())).collect();
            self.shared.reported.retain(|((kind, key), _)| {
                cache.meta(*kind, key).is_some() || invalid.contains(&(*kind, key.clone()))
            });
        }
        let every = self.config.metrics_state_interval;
        if every > 0.0 && self.state_at.is_none_or(|t| now - t >= every) {
            self.state_at = Some(now);
            self.shared.metrics.observe_state(
                &self.shared.cache,
                self.shared.catalog.cached(),
                self.config.epoch_unix + now,
                now,
            );
        }
    }

    /// One step of a process that froze between its renewal check and a write: it resumes
    /// with the cache it had and sends that one write, believing it still leads. Client-side
    /// fencing stops its further writes; the write itself is refused by its preconditions when
    /// the object changed meanwhile.
    pub async fn step_after_freeze(&mut self) {
        let now = secs(self.clock.now());
        if self.shared.lead.term.is_none() {
            return;
        }
        self.shared.lead.grace_writes = 1;
        self.reconcile(now).await;
        self.shared.lead.grace_writes = 0;
    }

    async fn reconcile(&mut self, now: f64) {
        let identity = self.config.identity.clone();
        interruption::reconcile(&mut cx!(self), &mut self.disruption, now)
            .instrument(tracing::debug_span!("interruption", %identity, now))
            .await;
        self.lifecycle
            .reconcile(&mut cx!(self), &mut self.launcher, now)
            .instrument(tracing::debug_span!("lifecycle", %identity, now))
            .await;
        self.headroom
            .reconcile(&mut cx!(self), now)
            .instrument(tracing::debug_span!("headroom", %identity, now))
            .await;
        self.provisioner
            .reconcile(&mut cx!(self), now)
            .instrument(tracing::debug_span!("provisioning", %identity, now))
            .await;
        self.disruption
            .reconcile(&mut cx!(self), now)
            .instrument(tracing::debug_span!("disruption", %identity, now))
            .await;
        self.gc
            .reconcile(&mut cx!(self), now)
            .instrument(tracing::debug_span!("gc", %identity, now))
            .await;
    }

    /// On taking the lease: list everything again and forget everything volatile; half-done
    /// disruptions are undone by the disruption loop's clean-up.
    async fn recover(&mut self, now: f64) {
        self.shared.cache.forget_watches();
        self.shared.nominations.clear();
        self.shared.unservable.clear();
        self.shared.pod_events = Default::default();
        self.shared.disruption_inputs = Default::default();
        self.launcher.forget();
        self.lifecycle = lifecycle::Lifecycle::default();
        self.provisioner = provisioning::Provisioner::default();
        self.disruption = disruption::Disruption::default();
        self.headroom = headroom::Headroom::default();
        tracing::info!(now, identity = %self.config.identity, "leading: relisting");
    }
}
