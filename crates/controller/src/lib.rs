//! capstan's controller: the reconcile loops, written once against two traits —
//! [`ClusterApi`] (the Kubernetes API) and [`CloudProvider`] — so the same code runs against
//! kube + AWS in production and against the simulator's in-memory API + fake cloud.
//!
//! One [`Controller::step`] runs every loop that is due, in a fixed order:
//!
//! 1. **leader election** — acquire or renew the lease; a follower does nothing else;
//! 2. **sync** — bring the cache up to date (watch, or list when the watch expired);
//! 3. **interruption** — act on the cloud's events: pre-launch replacements, cordon, drain;
//! 4. **lifecycle** — launch NodeClaims (rate-limited, jittered exponential backoff, fallback
//!    to other offerings on InsufficientCapacity with an unavailable-offerings cache),
//!    register and initialize their nodes, replace nodes that never register, terminate
//!    claims being deleted (evict through the eviction API, then delete the instance);
//! 5. **provisioning** — batch pending pods (idle / max windows), plan with the packer or
//!    the scheduling core, create NodeClaims;
//! 6. **disruption** — run the engine, re-validate a command after a delay, launch its
//!    replacements first, taint, then terminate the candidates;
//! 7. **garbage collection** — terminate instances no NodeClaim owns; clean up claims whose
//!    instance is gone.
//!
//! Nothing here reads the wall clock: time comes from a [`Clock`]. Decisions come from the
//! pure crates (`sched`, `pack`, `disrupt`) as data; this crate only applies them.

pub mod api;
pub mod cache;

pub use api::{ApiError, ClusterApi, Event, Fence, Kind, Lease, Listing, NodeClaim, Object};
pub use cache::Cache;

use api::{ClaimStatus, UNREGISTERED_TAINT};
use capstan_cloud::{
    Clock, CloudError, CloudProvider, InstanceState, InterruptionEvent, LaunchRequest, OfferingKey,
};
use capstan_disrupt::{Command, NodeInfo, Reason, Target};
use capstan_model::labels;
use capstan_model::taints::Effect;
use capstan_model::{InstanceType, NodePool, Pod, Requirement, Requirements, Taint};
use capstan_sched::{InFlight, Snapshot, SolveInput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// How new NodeClaims are planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Planner {
    /// capstan's packer (`pack::pack`, default strategy): cheapest cover, spot spread.
    #[default]
    Pack,
    /// The scheduling core alone (`sched::solve`): Karpenter's first-fit.
    Sched,
}

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
    pub disruption_interval: f64,
    /// After an evaluation that found nothing to do, the next waits for a change to nodes or
    /// claims, or this long.
    pub quiet_interval: f64,
    /// A consolidation command is re-validated after this delay before it is carried out.
    pub validation_delay: f64,
    /// Give up a disruption whose replacements are not initialized after this long.
    pub replacement_timeout: f64,
    pub gc_interval: f64,
    /// An instance with no NodeClaim is left alone this long (its claim may be being written).
    pub gc_grace: f64,
    pub lease_duration: f64,
    pub planner: Planner,
    /// Instance types (with prices) are fetched again after this long.
    pub catalog_ttl: f64,
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
            disruption_interval: 10.0,
            quiet_interval: 60.0,
            validation_delay: 15.0,
            replacement_timeout: 600.0,
            gc_interval: 30.0,
            gc_grace: 30.0,
            lease_duration: 15.0,
            planner: Planner::Pack,
            catalog_ttl: 300.0,
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
        reason: String,
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
        event: String,
    },
    Terminated {
        claim: String,
        reason: String,
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

#[derive(Clone, Debug, Default)]
struct LaunchState {
    attempts: u32,
    next_at: f64,
}

#[derive(Clone, Debug)]
struct InProgress {
    reason: Reason,
    candidates: Vec<String>,
    /// Replacement claim names.
    replacements: Vec<String>,
    started: f64,
}

#[derive(Clone, Debug)]
struct Proposed {
    reason: Reason,
    candidates: Vec<String>,
    at: f64,
}

/// What the disruption engine reads, owned (built from the cache).
struct DisruptionInputs {
    nodes: Vec<NodeInfo>,
    pods: Vec<Arc<Pod>>,
    pdbs: Vec<capstan_model::pdb::Pdb>,
    nodepools: Vec<NodePool>,
    daemonsets: Vec<Pod>,
}

impl DisruptionInputs {
    fn input<'a>(&'a self, types: &'a [InstanceType], now_unix: f64) -> capstan_disrupt::Input<'a> {
        capstan_disrupt::Input {
            nodes: &self.nodes,
            pods: &self.pods,
            pdbs: &self.pdbs,
            nodepools: &self.nodepools,
            instance_types: types,
            daemonsets: &self.daemonsets,
            now: now_unix,
        }
    }
}

/// The loops and their memory. Everything here may be lost (a crash): the durable state is
/// in the API and the cloud, and a new controller picks up from there.
pub struct Controller<A: ClusterApi, C: CloudProvider> {
    api: Arc<A>,
    cloud: Arc<C>,
    clock: Arc<dyn Clock>,
    config: Config,
    cache: Cache,
    rng: ChaCha8Rng,
    limiter: capstan_cloud::RateLimiter,
    /// The lease term this process holds, if it is the leader.
    term: Option<u64>,
    lease_rv: Option<u64>,
    fresh_term: bool,
    batch_start: Option<f64>,
    batch_last_change: f64,
    batch_seen: usize,
    /// Pod key → the in-flight claim it is planned onto.
    nominations: BTreeMap<String, String>,
    launches: BTreeMap<String, LaunchState>,
    /// The claims that need the lifecycle loop, and the cache generation they were found at.
    unsettled: Option<(u64, Vec<String>)>,
    unavailable: BTreeMap<OfferingKey, f64>,
    types: Option<(f64, Vec<InstanceType>)>,
    in_progress: Option<InProgress>,
    proposed: Option<Proposed>,
    next_disruption: f64,
    quiet_generation: Option<u64>,
    quiet_since: f64,
    next_gc: f64,
    provider_drift: BTreeMap<String, String>,
    records: Vec<Record>,
    claim_seq: u64,
}

/// Seconds before an interruption deadline (beyond the pods' grace periods) at which capstan
/// stops waiting for PDBs and deletes the pods left on the node.
pub const DEADLINE_MARGIN: f64 = 10.0;

/// Exponential backoff with "equal jitter": the delay for `attempts` is half fixed, half
/// random (`r` in [0, 1)), within `base · 2^attempts` capped at `max` — so retries of many
/// claims neither stampede nor stall.
pub fn jittered_backoff(base: f64, max: f64, attempts: u32, r: f64) -> f64 {
    let cap = (base * 2f64.powi(attempts.min(30) as i32)).min(max);
    cap / 2.0 + r * cap / 2.0
}

/// For an event that means the instance goes: how capstan records it, and by when the node
/// must be drained (a spot reclaim, scheduled maintenance, or the instance already stopping).
fn reclaim(ev: &InterruptionEvent, now: f64) -> Option<(&'static str, f64)> {
    match ev {
        InterruptionEvent::SpotInterruptionWarning { reclaim_at, .. } => {
            Some(("SpotInterruption", secs(*reclaim_at)))
        }
        InterruptionEvent::ScheduledMaintenance { when, .. } => {
            Some(("ScheduledMaintenance", secs(*when)))
        }
        InterruptionEvent::StateChange {
            state: InstanceState::ShuttingDown | InstanceState::Terminated,
            ..
        } => Some(("InstanceTerminated", now)),
        _ => None,
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl<A: ClusterApi, C: CloudProvider> Controller<A, C> {
    pub fn new(api: Arc<A>, cloud: Arc<C>, clock: Arc<dyn Clock>, config: Config) -> Self {
        let quota = governor::Quota::per_second(
            NonZeroU32::new(config.launch_rate.max(1)).expect("at least 1"),
        )
        .allow_burst(NonZeroU32::new(config.launch_burst.max(1)).expect("at least 1"));
        let limiter = governor::RateLimiter::direct_with_clock(
            quota,
            capstan_cloud::GovernorClock(clock.clone()),
        );
        let mut seed = config.seed;
        for b in config.identity.bytes() {
            seed = seed.wrapping_mul(0x100_0000_01b3) ^ b as u64;
        }
        Controller {
            api,
            cloud,
            clock,
            rng: ChaCha8Rng::seed_from_u64(seed),
            limiter,
            config,
            cache: Cache::default(),
            term: None,
            lease_rv: None,
            fresh_term: false,
            batch_start: None,
            batch_last_change: 0.0,
            batch_seen: 0,
            nominations: BTreeMap::new(),
            launches: BTreeMap::new(),
            unsettled: None,
            unavailable: BTreeMap::new(),
            types: None,
            in_progress: None,
            proposed: None,
            next_disruption: 0.0,
            quiet_generation: None,
            quiet_since: 0.0,
            next_gc: 0.0,
            provider_drift: BTreeMap::new(),
            records: Vec::new(),
            claim_seq: 0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn is_leader(&self) -> bool {
        self.term.is_some()
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// What the controller did since the last call.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    fn record(&mut self, at: f64, action: Action) {
        tracing::debug!(at, ?action, identity = %self.config.identity, "controller");
        self.records.push(Record { at, action });
    }

    fn fence(&self) -> Fence {
        Fence {
            holder: self.config.identity.clone(),
            term: self.term.unwrap_or(0),
        }
    }

    /// Runs the loops forever on `tick` intervals (production). The simulator calls
    /// [`Controller::step`] itself, on virtual time.
    pub async fn run(mut self, tick: Duration) {
        loop {
            self.step().await;
            tokio::time::sleep(tick).await;
        }
    }

    /// Runs every loop that is due.
    pub async fn step(&mut self) {
        let now = secs(self.clock.now());
        if !self.elect(now).await {
            return;
        }
        self.reconcile(now).await;
    }

    /// One step of a process that was paused between its lease check and its writes: it
    /// acts as the leader of the term it last held without renewing. The API's fencing
    /// must refuse its writes if another process has taken the lease meanwhile.
    pub async fn step_without_renewal(&mut self) {
        let now = secs(self.clock.now());
        if self.term.is_none() {
            return;
        }
        self.reconcile(now).await;
    }

    async fn reconcile(&mut self, now: f64) {
        if let Err(e) = self.cache.sync(&*self.api).await {
            tracing::warn!(error = %e, "cache sync failed");
            return;
        }
        if self.fresh_term {
            self.fresh_term = false;
            self.recover(now).await;
        }
        self.interruptions(now).await;
        self.lifecycle(now).await;
        self.provision(now).await;
        if now >= self.next_disruption {
            self.next_disruption = now + self.config.disruption_interval;
            self.disruption(now).await;
        }
        if now >= self.next_gc {
            self.next_gc = now + self.config.gc_interval;
            self.gc(now).await;
        }
    }

    /// Handles an API error from a write: a fenced write means this process lost the lease.
    fn on_write_error(&mut self, now: f64, what: &str, e: &ApiError) {
        match e {
            ApiError::Fenced { .. } => {
                if self.term.take().is_some() {
                    self.record(
                        now,
                        Action::Deposed {
                            reason: format!("{what}: {e}"),
                        },
                    );
                }
            }
            _ => tracing::debug!(error = %e, what, "write failed"),
        }
    }

    // ---------------------------------------------------------------- leader election

    async fn elect(&mut self, now: f64) -> bool {
        let lease = match self.api.get_lease().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "reading the lease failed");
                self.term = None;
                return false;
            }
        };
        let me = self.config.identity.clone();
        let (rv, next) = match lease {
            None => (
                None,
                Lease {
                    holder: me.clone(),
                    renewed_at: now,
                    duration_seconds: self.config.lease_duration,
                    term: 1,
                },
            ),
            Some((rv, l)) if l.holder == me && Some(l.term) == self.term => (
                Some(rv),
                Lease {
                    renewed_at: now,
                    ..l
                },
            ),
            Some((rv, l)) if now - l.renewed_at > l.duration_seconds || l.holder == me => (
                // Expired, or held by an earlier run of this identity: take it over.
                Some(rv),
                Lease {
                    holder: me.clone(),
                    renewed_at: now,
                    duration_seconds: self.config.lease_duration,
                    term: l.term + 1,
                },
            ),
            Some(_) => {
                if self.term.take().is_some() {
                    self.record(
                        now,
                        Action::Deposed {
                            reason: "lease held by another".into(),
                        },
                    );
                }
                return false;
            }
        };
        let term = next.term;
        match self.api.put_lease(next, rv).await {
            Ok(new_rv) => {
                self.lease_rv = Some(new_rv);
                if self.term != Some(term) {
                    self.term = Some(term);
                    self.fresh_term = true;
                    self.record(now, Action::Elected { term });
                }
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "lease update lost");
                if self.term.take().is_some() {
                    self.record(
                        now,
                        Action::Deposed {
                            reason: e.to_string(),
                        },
                    );
                }
                false
            }
        }
    }

    /// On taking the lease: forget everything volatile and undo half-done disruptions (nodes
    /// tainted for a command whose claims are not being deleted).
    async fn recover(&mut self, now: f64) {
        self.cache.rv = None;
        if let Err(e) = self.cache.sync(&*self.api).await {
            tracing::warn!(error = %e, "relist failed");
            return;
        }
        self.nominations.clear();
        self.launches.clear();
        self.in_progress = None;
        self.proposed = None;
        self.batch_start = None;
        let by_provider = self.claims_by_provider();
        let tainted: Vec<String> = self
            .cache
            .nodes
            .values()
            .filter(|(_, n)| {
                n.taints
                    .iter()
                    .any(|t| t.key == capstan_disrupt::DISRUPTED_TAINT)
            })
            .filter(|(_, n)| {
                n.provider_id
                    .as_ref()
                    .and_then(|p| by_provider.get(p))
                    .is_none_or(|c| !self.cache.claims[c].1.deleting())
            })
            .map(|(_, n)| n.name.clone())
            .collect();
        for node in tainted {
            self.set_disrupted_taint(now, &node, false).await;
        }
    }

    fn claims_by_provider(&self) -> BTreeMap<String, String> {
        self.cache
            .claims
            .values()
            .filter_map(|(_, c)| {
                c.status
                    .provider_id
                    .as_ref()
                    .map(|p| (p.clone(), c.name.clone()))
            })
            .collect()
    }

    // ---------------------------------------------------------------- helpers

    async fn instance_types(&mut self, now: f64) -> Vec<InstanceType> {
        let fresh = self
            .types
            .as_ref()
            .is_some_and(|(at, _)| now - at < self.config.catalog_ttl);
        if !fresh {
            let mut merged: BTreeMap<String, InstanceType> = BTreeMap::new();
            for pool in self.cache.nodepool_list() {
                match self.cloud.instance_types(&pool).await {
                    Ok(ts) => {
                        for t in ts {
                            merged.entry(t.name.clone()).or_insert(t);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, pool = %pool.name, "instance types"),
                }
            }
            let mut v: Vec<InstanceType> = merged.into_values().collect();
            v.sort_by(|a, b| a.name.cmp(&b.name));
            self.types = Some((now, v));
        }
        self.unavailable.retain(|_, until| *until > now);
        let mut types = self
            .types
            .as_ref()
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        if !self.unavailable.is_empty() {
            for t in &mut types {
                for o in &mut t.offerings {
                    let key = OfferingKey {
                        instance_type: t.name.clone(),
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                    };
                    if self.unavailable.contains_key(&key) {
                        o.available = false;
                    }
                }
            }
        }
        types
    }

    fn pool(&self, name: &str) -> Option<&NodePool> {
        self.cache.nodepools.get(name).map(|(_, p)| p)
    }

    async fn replace_claim(&mut self, now: f64, claim: NodeClaim) -> bool {
        let Some((rv, _)) = self.cache.claims.get(&claim.name) else {
            return false;
        };
        let rv = *rv;
        let fence = self.fence();
        match self
            .api
            .replace(Object::NodeClaim(claim.clone()), rv, &fence)
            .await
        {
            Ok(new_rv) => {
                self.cache
                    .claims
                    .insert(claim.name.clone(), (new_rv, claim));
                true
            }
            Err(e) => {
                self.on_write_error(now, "update nodeclaim", &e);
                false
            }
        }
    }

    async fn replace_node(&mut self, now: f64, node: capstan_model::Node) -> bool {
        let Some((rv, _)) = self.cache.nodes.get(&node.name) else {
            return false;
        };
        let rv = *rv;
        let fence = self.fence();
        match self
            .api
            .replace(Object::Node(node.clone()), rv, &fence)
            .await
        {
            Ok(new_rv) => {
                self.cache
                    .nodes
                    .insert(node.name.clone(), (new_rv, Arc::new(node)));
                true
            }
            Err(e) => {
                self.on_write_error(now, "update node", &e);
                false
            }
        }
    }

    async fn set_disrupted_taint(&mut self, now: f64, node: &str, on: bool) -> bool {
        let Some((_, n)) = self.cache.nodes.get(node) else {
            return false;
        };
        let has = n
            .taints
            .iter()
            .any(|t| t.key == capstan_disrupt::DISRUPTED_TAINT);
        if has == on {
            return true;
        }
        let mut n = capstan_model::Node::clone(n);
        if on {
            n.taints.push(Taint {
                key: capstan_disrupt::DISRUPTED_TAINT.into(),
                value: String::new(),
                effect: Effect::NoSchedule,
            });
        } else {
            n.taints
                .retain(|t| t.key != capstan_disrupt::DISRUPTED_TAINT);
        }
        self.replace_node(now, n).await
    }

    /// Gives a claim being deleted the cloud's deadline, if it is earlier than the one it
    /// has: the drain forces its pods off in time for it.
    async fn tighten_deadline(&mut self, now: f64, mut c: NodeClaim, deadline: f64) -> bool {
        if c.status.deadline.is_some_and(|d| d <= deadline) {
            return true;
        }
        c.status.deadline = Some(deadline);
        self.replace_claim(now, c).await
    }

    /// Starts a claim's termination: the lifecycle loop drains and deletes it.
    async fn begin_deletion(
        &mut self,
        now: f64,
        claim: &str,
        reason: &str,
        deadline: Option<f64>,
    ) -> bool {
        let Some((_, c)) = self.cache.claims.get(claim) else {
            return false;
        };
        if c.deleting() {
            return true;
        }
        let mut c = c.clone();
        c.status.deleting_since = Some(now);
        c.status.deletion_reason = Some(reason.to_string());
        c.status.deadline = deadline;
        let node = c.status.node_name.clone();
        if !self.replace_claim(now, c).await {
            return false;
        }
        if let Some(node) = node {
            self.set_disrupted_taint(now, &node, true).await;
        }
        true
    }

    fn new_claim_name(&mut self, pool: &str) -> (String, String) {
        self.claim_seq += 1;
        let r: u32 = self.rng.random();
        (
            format!("{pool}-{r:08x}"),
            format!("{}-{}-{:08x}", self.term.unwrap_or(0), self.claim_seq, r),
        )
    }

    /// Creates a NodeClaim; returns its name.
    #[allow(clippy::too_many_arguments)]
    async fn create_claim(
        &mut self,
        now: f64,
        pool: &NodePool,
        requirements: Requirements,
        instance_types: Vec<String>,
        requests: capstan_model::Resources,
    ) -> Option<String> {
        for _ in 0..3 {
            let (name, uid) = self.new_claim_name(&pool.name);
            let mut labels = pool.labels.clone();
            labels.insert(labels::NODEPOOL.into(), pool.name.clone());
            let claim = NodeClaim {
                name: name.clone(),
                uid,
                nodepool: pool.name.clone(),
                requirements: requirements.clone(),
                instance_types: instance_types.clone(),
                requests: requests.clone(),
                labels,
                taints: pool.taints.clone(),
                startup_taints: pool.startup_taints.clone(),
                created: now,
                status: ClaimStatus::default(),
            };
            let fence = self.fence();
            match self
                .api
                .create(Object::NodeClaim(claim.clone()), &fence)
                .await
            {
                Ok(rv) => {
                    self.cache.claims.insert(name.clone(), (rv, claim));
                    return Some(name);
                }
                Err(ApiError::AlreadyExists { .. }) => continue,
                Err(e) => {
                    self.on_write_error(now, "create nodeclaim", &e);
                    return None;
                }
            }
        }
        None
    }

    // ---------------------------------------------------------------- interruption

    async fn interruptions(&mut self, now: f64) {
        let events = match self.cloud.interruptions().await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "reading interruption events failed");
                return;
            }
        };
        if events.is_empty() {
            return;
        }
        let by_provider = self.claims_by_provider();
        // Events are acknowledged once handled; the rest come back (to whoever leads then).
        let mut handled: Vec<InterruptionEvent> = Vec::new();
        for ev in events {
            if self.term.is_none() {
                break;
            }
            let Some(claim) = by_provider.get(ev.provider_id()).cloned() else {
                handled.push(ev);
                continue;
            };
            let Some((_, c)) = self.cache.claims.get(&claim) else {
                handled.push(ev);
                continue;
            };
            let c = c.clone();
            if let Some((event, deadline)) = reclaim(&ev, now) {
                self.record(
                    now,
                    Action::Interrupted {
                        claim: claim.clone(),
                        event: event.into(),
                    },
                );
                let done = if c.deleting() {
                    // Already going (a disruption draining it, say): the cloud's deadline
                    // still binds, so the drain forces its pods off in time for it.
                    self.tighten_deadline(now, c, deadline).await
                } else if matches!(ev, InterruptionEvent::StateChange { .. }) {
                    self.begin_deletion(now, &claim, event, Some(deadline))
                        .await
                } else {
                    self.replace_interrupted(now, &c, deadline).await
                };
                if done {
                    handled.push(ev);
                }
                continue;
            }
            // A rebalance recommendation (best effort: not retried), or a state change that
            // takes nothing.
            if matches!(ev, InterruptionEvent::RebalanceRecommendation { .. })
                && !c.deleting()
                && self.in_progress.is_none()
            {
                if let Some(node) = c.status.node_name.clone() {
                    let types = self.instance_types(now).await;
                    let d = self.disruption_inputs(&types);
                    let input = d.input(&types, self.config.epoch_unix + now);
                    if let Ok(Some(cmd)) = capstan_disrupt::rebalance(input, &node) {
                        self.record(
                            now,
                            Action::Interrupted {
                                claim: claim.clone(),
                                event: "RebalanceRecommendation".into(),
                            },
                        );
                        self.execute(now, &cmd, &types).await;
                    }
                }
            }
            handled.push(ev);
        }
        if !handled.is_empty() {
            if let Err(e) = self.cloud.ack_interruptions(&handled).await {
                tracing::warn!(error = %e, "acknowledging interruption events failed");
            }
        }
    }

    /// Pre-launches replacements for an interrupted node and starts its drain, to finish
    /// before `deadline`.
    async fn replace_interrupted(&mut self, now: f64, claim: &NodeClaim, deadline: f64) -> bool {
        if let Some(node) = claim.status.node_name.clone() {
            let types = self.instance_types(now).await;
            let d = self.disruption_inputs(&types);
            let input = d.input(&types, self.config.epoch_unix + now);
            if let Some(cmd) = capstan_disrupt::interruption(input, &node, deadline - now) {
                for r in &cmd.replacements {
                    self.launch_replacement(now, r, &types).await;
                }
            }
        }
        self.begin_deletion(now, &claim.name, "Interrupted", Some(deadline))
            .await
    }

    async fn launch_replacement(
        &mut self,
        now: f64,
        r: &capstan_disrupt::Replacement,
        types: &[InstanceType],
    ) -> Option<String> {
        let pool = self.pool(&r.nodepool)?.clone();
        let t = types.get(r.instance_type)?;
        let mut reqs = pool.requirements.clone();
        reqs.add(Requirement::in_values(
            labels::INSTANCE_TYPE,
            [t.name.clone()],
        ));
        reqs.add(Requirement::in_values(labels::ZONE, [r.zone.clone()]));
        reqs.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            [r.capacity_type.clone()],
        ));
        self.create_claim(
            now,
            &pool,
            reqs,
            vec![t.name.clone()],
            t.allocatable.clone(),
        )
        .await
    }

    // ---------------------------------------------------------------- lifecycle

    async fn lifecycle(&mut self, now: f64) {
        // Claims that need something: every claim but the settled ones (initialized, not
        // being deleted, node present), which are the great majority in a steady cluster.
        // Whether a claim is settled depends on the cache alone, so the list is kept until
        // the cache changes.
        let generation = self.cache.generation;
        let work = match self.unsettled.take() {
            Some((g, work)) if g == generation => work,
            _ => self
                .cache
                .claims
                .values()
                .filter(|(_, c)| {
                    c.deleting()
                        || !c.status.initialized
                        || c.status
                            .node_name
                            .as_ref()
                            .is_some_and(|n| !self.cache.nodes.contains_key(n))
                })
                .map(|(_, c)| c.name.clone())
                .collect(),
        };
        self.unsettled = Some((generation, work.clone()));
        for name in work {
            let Some((_, c)) = self.cache.claims.get(&name) else {
                continue;
            };
            let c = c.clone();
            if c.deleting() {
                self.terminate(now, c).await;
            } else if c.status.provider_id.is_none() {
                self.launch(now, c).await;
            } else if !c.status.registered {
                self.register(now, c).await;
            } else if !c.status.initialized {
                self.initialize(now, c).await;
            } else {
                self.begin_deletion(now, &name, "NodeDeleted", None).await;
            }
        }
    }

    fn backoff(&mut self, attempts: u32) -> f64 {
        let r: f64 = self.rng.random();
        jittered_backoff(
            self.config.backoff_base,
            self.config.backoff_max,
            attempts,
            r,
        )
    }

    async fn launch(&mut self, now: f64, c: NodeClaim) {
        let state = self.launches.entry(c.name.clone()).or_default().clone();
        if now < state.next_at {
            return;
        }
        if self.limiter.check().is_err() {
            return;
        }
        let pool_reqs = c.requirements.clone();
        // Types with at least one offering not known to be out of capacity.
        let unavailable = &self.unavailable;
        let types: Vec<String> = c
            .instance_types
            .iter()
            .filter(|t| {
                let allowed: Vec<(&String, &str)> = self
                    .types
                    .as_ref()
                    .and_then(|(_, ts)| ts.iter().find(|x| &x.name == *t))
                    .map(|x| {
                        x.offerings
                            .iter()
                            .filter(|o| {
                                pool_reqs.allows(labels::ZONE, &o.zone)
                                    && pool_reqs.allows(labels::CAPACITY_TYPE, &o.capacity_type)
                            })
                            .map(|o| (&o.zone, o.capacity_type.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                allowed.is_empty()
                    || allowed.iter().any(|(z, ct)| {
                        !unavailable.contains_key(&OfferingKey {
                            instance_type: (*t).clone(),
                            zone: (*z).clone(),
                            capacity_type: ct.to_string(),
                        })
                    })
            })
            .cloned()
            .collect();
        if types.is_empty() {
            self.abandon(now, &c, "every offering is out of capacity")
                .await;
            return;
        }
        let request = LaunchRequest {
            claim_name: c.name.clone(),
            nodepool: c.nodepool.clone(),
            client_token: format!("{}-{}", c.name, c.uid),
            instance_types: types,
            requirements: c.requirements.clone(),
            labels: c.labels.clone(),
            taints: c.taints.clone(),
        };
        match self.cloud.create(&request).await {
            Ok(inst) => {
                self.launches.remove(&c.name);
                let mut c2 = c.clone();
                c2.status.provider_id = Some(inst.provider_id.clone());
                c2.status.instance_type = Some(inst.instance_type.clone());
                c2.status.zone = Some(inst.zone.clone());
                c2.status.capacity_type = Some(inst.capacity_type.clone());
                c2.status.price = inst.price;
                c2.status.launched_at = Some(secs(inst.launched_at));
                if self.replace_claim(now, c2).await {
                    self.record(
                        now,
                        Action::Launched {
                            claim: c.name.clone(),
                            instance_type: inst.instance_type,
                            zone: inst.zone,
                            capacity_type: inst.capacity_type,
                            price: inst.price,
                        },
                    );
                }
            }
            Err(CloudError::InsufficientCapacity { offerings }) => {
                for o in &offerings {
                    self.unavailable
                        .insert(o.clone(), now + self.config.unavailable_ttl);
                }
                self.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: format!("insufficient capacity in {} offerings", offerings.len()),
                        retry_in: 0.0,
                    },
                );
            }
            Err(CloudError::Throttled { retry_after }) => {
                let retry = secs(retry_after).max(0.1);
                let s = self.launches.entry(c.name.clone()).or_default();
                s.next_at = now + retry;
                self.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: "throttled".into(),
                        retry_in: retry,
                    },
                );
            }
            Err(CloudError::Transient { message }) => {
                let attempts = state.attempts + 1;
                let retry = self.backoff(attempts);
                self.launches.insert(
                    c.name.clone(),
                    LaunchState {
                        attempts,
                        next_at: now + retry,
                    },
                );
                self.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: message,
                        retry_in: retry,
                    },
                );
            }
            Err(e @ (CloudError::Invalid { .. } | CloudError::NotFound { .. })) => {
                self.abandon(now, &c, &e.to_string()).await;
            }
        }
    }

    /// Deletes a claim that can never launch; its pods go back to the provisioner.
    async fn abandon(&mut self, now: f64, c: &NodeClaim, why: &str) {
        let Some((rv, _)) = self.cache.claims.get(&c.name) else {
            return;
        };
        let rv = *rv;
        let fence = self.fence();
        match self.api.delete(Kind::NodeClaim, &c.name, rv, &fence).await {
            Ok(()) => {
                self.cache.claims.remove(&c.name);
                self.launches.remove(&c.name);
                self.nominations.retain(|_, claim| claim != &c.name);
                self.record(
                    now,
                    Action::LaunchAbandoned {
                        claim: c.name.clone(),
                        error: why.to_string(),
                    },
                );
            }
            Err(e) => self.on_write_error(now, "delete nodeclaim", &e),
        }
    }

    async fn register(&mut self, now: f64, c: NodeClaim) {
        let pid = c.status.provider_id.clone().unwrap_or_default();
        let Some(node_name) = self.cache.node_by_provider.get(&pid).cloned() else {
            let launched = c.status.launched_at.unwrap_or(c.created);
            if now - launched > self.config.registration_ttl {
                self.record(
                    now,
                    Action::NotRegistered {
                        claim: c.name.clone(),
                    },
                );
                self.begin_deletion(now, &c.name, "NotRegistered", None)
                    .await;
            }
            return;
        };
        let Some((_, node)) = self.cache.nodes.get(&node_name) else {
            return;
        };
        let mut node = capstan_model::Node::clone(node);
        let before = node.clone();
        node.taints.retain(|t| t.key != UNREGISTERED_TAINT);
        for (k, v) in &c.labels {
            node.labels.insert(k.clone(), v.clone());
        }
        if let Some(pool) = self.pool(&c.nodepool) {
            node.annotations.insert(
                capstan_disrupt::NODEPOOL_HASH.into(),
                capstan_disrupt::template_hash(pool),
            );
        }
        if node != before && !self.replace_node(now, node).await {
            return;
        }
        let mut c2 = c.clone();
        c2.status.registered = true;
        c2.status.node_name = Some(node_name.clone());
        if self.replace_claim(now, c2).await {
            self.record(
                now,
                Action::Registered {
                    claim: c.name.clone(),
                    node: node_name,
                },
            );
        }
    }

    async fn initialize(&mut self, now: f64, c: NodeClaim) {
        let Some(node) = c
            .status
            .node_name
            .as_ref()
            .and_then(|n| self.cache.nodes.get(n))
            .map(|(_, n)| n)
        else {
            return;
        };
        let startup_left = c
            .startup_taints
            .iter()
            .any(|s| node.taints.iter().any(|t| t.key == s.key));
        if !node.ready || startup_left {
            return;
        }
        let mut c2 = c.clone();
        c2.status.initialized = true;
        if self.replace_claim(now, c2).await {
            self.record(
                now,
                Action::Initialized {
                    claim: c.name.clone(),
                },
            );
        }
    }

    /// Drains a claim's node through the eviction API, then deletes the instance, the node
    /// and the claim.
    async fn terminate(&mut self, now: f64, c: NodeClaim) {
        let node = c
            .status
            .node_name
            .clone()
            .or_else(|| {
                c.status
                    .provider_id
                    .as_ref()
                    .and_then(|p| self.cache.node_by_provider.get(p).cloned())
            })
            .filter(|n| self.cache.nodes.contains_key(n));
        if let Some(node) = &node {
            self.set_disrupted_taint(now, node, true).await;
            let pods = self.cache.workload_pods_on(node);
            let pending: Vec<Arc<Pod>> = pods.into_iter().filter(|p| !p.deleting).collect();
            if !pending.is_empty() {
                let grace = self
                    .pool(&c.nodepool)
                    .and_then(|p| p.termination_grace_period_seconds)
                    .map(|g| g as f64);
                let since = c.status.deleting_since.unwrap_or(now);
                // The cloud takes the node at its deadline whatever the PDBs say: as the
                // kubelet's graceful node shutdown does, delete the pods still there in time
                // for their grace period, rather than let them be killed.
                let longest_grace = pending
                    .iter()
                    .map(|p| p.termination_grace_seconds.unwrap_or(30).max(0) as f64)
                    .fold(0.0, f64::max);
                let forced = grace.is_some_and(|g| now - since >= g)
                    || c.status
                        .deadline
                        .is_some_and(|d| now >= d - longest_grace - DEADLINE_MARGIN);
                let fence = self.fence();
                // Lowest priority first, as kubectl drain and Karpenter do.
                let mut order = pending;
                order.sort_by_key(|p| (p.priority, p.key()));
                for p in order {
                    let key = p.key();
                    let r = if forced {
                        let rv = self.cache.pods.get(&key).map(|(rv, _)| *rv).unwrap_or(0);
                        self.api.delete(Kind::Pod, &key, rv, &fence).await
                    } else {
                        self.api.evict(&key, &fence).await
                    };
                    match r {
                        Ok(()) => {}
                        Err(ApiError::TooManyRequests { .. }) => {}
                        Err(e) => {
                            self.on_write_error(now, "evict", &e);
                            if self.term.is_none() {
                                return;
                            }
                        }
                    }
                }
                return;
            }
        }
        if let Some(pid) = &c.status.provider_id {
            match self.cloud.delete(pid).await {
                Ok(()) | Err(CloudError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, claim = %c.name, "instance delete failed; retrying");
                    return;
                }
            }
        }
        let fence = self.fence();
        if let Some(node) = &node {
            let rv = self.cache.nodes.get(node).map(|(rv, _)| *rv).unwrap_or(0);
            match self.api.delete(Kind::Node, node, rv, &fence).await {
                Ok(()) | Err(ApiError::NotFound { .. }) => {
                    self.cache.nodes.remove(node);
                }
                Err(e) => {
                    self.on_write_error(now, "delete node", &e);
                    return;
                }
            }
        }
        let Some((rv, _)) = self.cache.claims.get(&c.name) else {
            return;
        };
        match self.api.delete(Kind::NodeClaim, &c.name, *rv, &fence).await {
            Ok(()) | Err(ApiError::NotFound { .. }) => {
                self.cache.claims.remove(&c.name);
                self.nominations.retain(|_, claim| claim != &c.name);
                self.record(
                    now,
                    Action::Terminated {
                        claim: c.name.clone(),
                        reason: c.status.deletion_reason.clone().unwrap_or_default(),
                    },
                );
            }
            Err(e) => self.on_write_error(now, "delete nodeclaim", &e),
        }
    }

    // ---------------------------------------------------------------- provisioning

    async fn provision(&mut self, now: f64) {
        // Nominations end when their claim is gone, or once its node has been up a while.
        let live: BTreeSet<String> = self
            .cache
            .claims
            .values()
            .filter(|(_, c)| !c.deleting() && !c.status.initialized)
            .map(|(_, c)| c.name.clone())
            .collect();
        self.nominations
            .retain(|pod, claim| live.contains(claim) && self.cache.pending.contains(pod));
        let pending_keys: Vec<String> = self
            .cache
            .pending
            .iter()
            .filter(|k| !self.nominations.contains_key(*k))
            .cloned()
            .collect();
        if pending_keys.is_empty() {
            self.batch_start = None;
            return;
        }
        match self.batch_start {
            None => {
                self.batch_start = Some(now);
                self.batch_last_change = now;
                self.batch_seen = pending_keys.len();
            }
            Some(_) if pending_keys.len() != self.batch_seen => {
                self.batch_last_change = now;
                self.batch_seen = pending_keys.len();
            }
            _ => {}
        }
        let start = self.batch_start.unwrap_or(now);
        if now - self.batch_last_change < self.config.batch_idle
            && now - start < self.config.batch_max
        {
            return;
        }
        self.batch_start = None;
        let pools = self.cache.nodepool_list();
        if pools.is_empty() {
            return;
        }
        let types = self.instance_types(now).await;
        let pending: Vec<Arc<Pod>> = pending_keys
            .iter()
            .filter_map(|k| self.cache.pods.get(k))
            .map(|(_, p)| p.clone())
            .collect();
        // When nothing pending looks at other pods and no bound pod has anti-affinity, bound
        // pods matter only by their summed requests.
        let topology = pending
            .iter()
            .any(|p| capstan_sched::predicates::looks_at_other_pods(p))
            || self.cache.repelling > 0;
        let snapshot = self.snapshot(&types, topology);
        let input = SolveInput {
            snapshot: &snapshot,
            pending: &pending,
            nodepools: &pools,
            instance_types: &types,
        };
        let plan = match self.config.planner {
            Planner::Sched => capstan_sched::solve(input, &Default::default()),
            Planner::Pack => match capstan_pack::pack(input, &Default::default()) {
                Ok(r) => r.plan,
                Err(e) => {
                    tracing::warn!(error = %e, "packer failed; using the scheduling core");
                    capstan_sched::solve(input, &Default::default())
                }
            },
        };
        let inflight: BTreeSet<&str> = snapshot.inflight.iter().map(|f| f.name.as_str()).collect();
        let mut nominate: Vec<(String, String)> = Vec::new();
        for b in &plan.existing {
            if inflight.contains(b.node.as_str()) {
                for &i in &b.pods {
                    nominate.push((pending[i].key(), b.node.clone()));
                }
            }
        }
        let mut created = 0;
        for nc in &plan.new_claims {
            let Some(pool) = pools.iter().find(|p| p.name == nc.nodepool) else {
                continue;
            };
            let names: Vec<String> = nc
                .instance_types
                .iter()
                .filter_map(|&t| types.get(t))
                .map(|t| t.name.clone())
                .collect();
            if let Some(name) = self
                .create_claim(
                    now,
                    pool,
                    nc.requirements.clone(),
                    names,
                    nc.requests.clone(),
                )
                .await
            {
                created += 1;
                for &i in &nc.pods {
                    nominate.push((pending[i].key(), name.clone()));
                }
            }
        }
        self.nominations.extend(nominate);
        self.record(
            now,
            Action::Provisioned {
                claims: created,
                pods: pending.len(),
                unschedulable: plan.unschedulable.len(),
            },
        );
    }

    /// What the scheduler sees: nodes, bound pods, in-flight claims (with the pods nominated
    /// to them), DaemonSets.
    /// The cluster as the planner sees it; with `topology` false, bound pods are summarized
    /// per node (see `Snapshot::used`).
    fn snapshot(&self, types: &[InstanceType], topology: bool) -> Snapshot {
        let mut snap = Snapshot {
            nodes: self
                .cache
                .nodes
                .values()
                .map(|(_, n)| capstan_model::Node::clone(n))
                .collect(),
            daemonsets: self
                .cache
                .daemonsets
                .values()
                .map(|(_, p)| p.clone())
                .collect(),
            ..Default::default()
        };
        if topology {
            for set in self.cache.pods_on.values() {
                snap.pods.extend(set.values().cloned());
            }
        } else {
            snap.used = self.cache.used_on.clone();
        }
        for (_, c) in self.cache.claims.values() {
            if c.deleting() || c.status.registered {
                continue;
            }
            let t = c
                .status
                .instance_type
                .as_ref()
                .or(c.instance_types.first())
                .and_then(|n| types.iter().find(|t| &t.name == n));
            let Some(t) = t else {
                continue;
            };
            let mut labels = t.labels.clone();
            labels.extend(c.labels.clone());
            if let Some(z) = &c.status.zone {
                labels.insert(labels::ZONE.into(), z.clone());
            }
            if let Some(ct) = &c.status.capacity_type {
                labels.insert(labels::CAPACITY_TYPE.into(), ct.clone());
            }
            for (k, v) in c.requirements.single_values() {
                labels.entry(k).or_insert(v);
            }
            labels.insert(labels::HOSTNAME.into(), c.name.clone());
            snap.inflight.push(InFlight {
                name: c.name.clone(),
                nodepool: c.nodepool.clone(),
                labels,
                taints: c.taints.clone(),
                allocatable: t.allocatable.clone(),
                capacity: t.capacity.clone(),
            });
        }
        for (pod, claim) in &self.nominations {
            if let Some((_, p)) = self.cache.pods.get(pod) {
                if !topology {
                    snap.used.entry(claim.clone()).or_default().add(&p.requests);
                    continue;
                }
                let mut p = Pod::clone(p);
                p.node_name = Some(claim.clone());
                p.phase = capstan_model::pod::PodPhase::Running;
                snap.pods.push(Arc::new(p));
            }
        }
        snap
    }

    // ---------------------------------------------------------------- disruption

    fn disruption_inputs(&self, types: &[InstanceType]) -> DisruptionInputs {
        let by_provider = self.claims_by_provider();
        let mut infos = Vec::new();
        for (_, n) in self.cache.nodes.values() {
            let claim = n
                .provider_id
                .as_ref()
                .and_then(|p| by_provider.get(p))
                .and_then(|c| self.cache.claims.get(c))
                .map(|(_, c)| c);
            let mut info = NodeInfo::from_node(n.clone(), types);
            if let Some(c) = claim {
                if c.status.price > 0.0 {
                    info.price = c.status.price;
                }
                info.created = Some(self.config.epoch_unix + c.created);
                if !c.status.initialized {
                    // Not ready for disruption yet: counts against budgets like NotReady.
                    Arc::make_mut(&mut info.node).ready = false;
                }
                if c.deleting() {
                    Arc::make_mut(&mut info.node).unschedulable = true;
                }
                if let Some(pid) = &c.status.provider_id {
                    info.provider_drift = self.provider_drift.get(pid).cloned();
                }
            } else {
                info.nodepool = None;
            }
            infos.push(info);
        }
        let pods: Vec<Arc<Pod>> = self
            .cache
            .pods_on
            .values()
            .flat_map(|set| set.values().cloned())
            .collect();
        DisruptionInputs {
            nodes: infos,
            pods,
            pdbs: self.cache.pdbs.values().map(|(_, p)| p.clone()).collect(),
            nodepools: self.cache.nodepool_list(),
            daemonsets: self
                .cache
                .daemonsets
                .values()
                .map(|(_, p)| p.clone())
                .collect(),
        }
    }

    async fn disruption(&mut self, now: f64) {
        if let Some(ip) = self.in_progress.clone() {
            self.advance_in_progress(now, ip).await;
            return;
        }
        // Settle first: no disruption while pods wait or machines are still coming up.
        let busy = !self.cache.pending.is_empty()
            || self
                .cache
                .claims
                .values()
                .any(|(_, c)| !c.status.initialized && !c.deleting());
        if busy {
            self.proposed = None;
            return;
        }
        // After an evaluation that found nothing, wait for a node-level change (nodes,
        // claims, NodePools, PDBs) or `quiet_interval`, whichever is first: pod churn alone
        // (the HPA moving replicas) is picked up at the next interval, and time-based methods
        // (expiry, consolidateAfter, budget windows) at most that late.
        if self.quiet_generation == Some(self.cache.generation)
            && now - self.quiet_since < self.config.quiet_interval
        {
            return;
        }
        let types = self.instance_types(now).await;
        let d = self.disruption_inputs(&types);
        let eval = capstan_disrupt::evaluate(d.input(&types, self.config.epoch_unix + now));
        tracing::debug!(
            now,
            commands = eval.commands.len(),
            first = ?eval.commands.first().map(|c| (c.reason, c.candidates.clone())),
            "disruption evaluation"
        );
        let Some(mut cmd) = eval.commands.into_iter().next() else {
            self.proposed = None;
            self.quiet_generation = Some(self.cache.generation);
            self.quiet_since = now;
            return;
        };
        // Empty nodes go together, and more may empty while a proposal waits: the proposal
        // still holds if every node in it is still empty, and only those nodes go.
        if let Some(p) = &self.proposed {
            if p.reason == Reason::Empty
                && cmd.reason == Reason::Empty
                && p.candidates.iter().all(|c| cmd.candidates.contains(c))
            {
                cmd.candidates.retain(|c| p.candidates.contains(c));
                cmd.savings = d
                    .nodes
                    .iter()
                    .filter(|n| cmd.candidates.contains(&n.node.name))
                    .map(|n| n.price)
                    .sum();
            }
        }
        let needs_validation = matches!(cmd.reason, Reason::Underutilized | Reason::Empty);
        if needs_validation {
            match &self.proposed {
                Some(p)
                    if p.reason == cmd.reason
                        && p.candidates == cmd.candidates
                        && now - p.at >= self.config.validation_delay =>
                {
                    self.proposed = None;
                }
                Some(p) if p.reason == cmd.reason && p.candidates == cmd.candidates => return,
                _ => {
                    self.proposed = Some(Proposed {
                        reason: cmd.reason,
                        candidates: cmd.candidates.clone(),
                        at: now,
                    });
                    return;
                }
            }
        }
        self.execute(now, &cmd, &types).await;
    }

    /// Carries out a command: taint the candidates, launch replacements; the candidates are
    /// terminated once the replacements are initialized.
    async fn execute(&mut self, now: f64, cmd: &Command, types: &[InstanceType]) {
        for node in &cmd.candidates {
            if !self.set_disrupted_taint(now, node, true).await {
                // Could not claim every candidate (a conflict or a lost lease): undo.
                for n in &cmd.candidates {
                    self.set_disrupted_taint(now, n, false).await;
                }
                return;
            }
        }
        let mut replacements = Vec::new();
        for r in &cmd.replacements {
            match self.launch_replacement(now, r, types).await {
                Some(name) => replacements.push(name),
                None => {
                    for n in &cmd.candidates {
                        self.set_disrupted_taint(now, n, false).await;
                    }
                    return;
                }
            }
        }
        // Pods the command moves onto replacements are planned there.
        for m in &cmd.moves {
            if let Target::Replacement(k) = &m.to {
                if let Some(name) = replacements.get(*k) {
                    self.nominations.insert(m.pod.clone(), name.clone());
                }
            }
        }
        self.record(
            now,
            Action::Disrupting {
                reason: cmd.reason.as_str().to_string(),
                candidates: cmd.candidates.clone(),
                replacements: replacements.len(),
                savings: cmd.savings,
            },
        );
        let ip = InProgress {
            reason: cmd.reason,
            candidates: cmd.candidates.clone(),
            replacements,
            started: now,
        };
        self.in_progress = Some(ip.clone());
        self.advance_in_progress(now, ip).await;
    }

    async fn advance_in_progress(&mut self, now: f64, ip: InProgress) {
        let mut ready = true;
        for r in &ip.replacements {
            match self.cache.claims.get(r) {
                Some((_, c)) if c.status.initialized => {}
                Some((_, c)) if !c.deleting() => ready = false,
                _ => {
                    self.abort(now, &ip, "a replacement failed to launch").await;
                    return;
                }
            }
        }
        if !ready {
            if now - ip.started > self.config.replacement_timeout {
                self.abort(now, &ip, "replacements did not initialize in time")
                    .await;
            }
            return;
        }
        let by_provider = self.claims_by_provider();
        for node in &ip.candidates {
            let claim = self
                .cache
                .nodes
                .get(node)
                .and_then(|(_, n)| n.provider_id.as_ref())
                .and_then(|p| by_provider.get(p))
                .cloned();
            if let Some(claim) = claim {
                self.begin_deletion(now, &claim, ip.reason.as_str(), None)
                    .await;
            }
        }
        self.in_progress = None;
    }

    async fn abort(&mut self, now: f64, ip: &InProgress, why: &str) {
        for n in &ip.candidates {
            self.set_disrupted_taint(now, n, false).await;
        }
        for r in &ip.replacements {
            if self.cache.claims.contains_key(r) {
                self.begin_deletion(now, r, "DisruptionAborted", None).await;
            }
        }
        self.record(
            now,
            Action::DisruptionAborted {
                candidates: ip.candidates.clone(),
                why: why.into(),
            },
        );
        self.in_progress = None;
    }

    // ---------------------------------------------------------------- garbage collection

    async fn gc(&mut self, now: f64) {
        let instances = match self.cloud.list().await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "listing instances failed");
                return;
            }
        };
        let mut live: BTreeSet<String> = BTreeSet::new();
        for inst in &instances {
            if inst.state == InstanceState::Terminated {
                continue;
            }
            live.insert(inst.provider_id.clone());
            let owned = self
                .cache
                .claims
                .get(&inst.claim_name)
                .is_some_and(|(_, c)| {
                    c.status.provider_id.is_none()
                        || c.status.provider_id.as_ref() == Some(&inst.provider_id)
                });
            if !owned && now - secs(inst.launched_at) > self.config.gc_grace {
                match self.cloud.delete(&inst.provider_id).await {
                    Ok(()) | Err(CloudError::NotFound { .. }) => self.record(
                        now,
                        Action::GarbageCollected {
                            provider_id: inst.provider_id.clone(),
                        },
                    ),
                    Err(e) => tracing::debug!(error = %e, "gc delete failed"),
                }
                continue;
            }
            if owned {
                match self.cloud.is_drifted(inst).await {
                    Ok(Some(d)) => {
                        self.provider_drift
                            .insert(inst.provider_id.clone(), d.reason);
                    }
                    Ok(None) => {
                        self.provider_drift.remove(&inst.provider_id);
                    }
                    Err(_) => {}
                }
            }
        }
        // Claims whose instance is gone.
        let gone: Vec<String> = self
            .cache
            .claims
            .values()
            .filter(|(_, c)| {
                !c.deleting()
                    && c.status
                        .provider_id
                        .as_ref()
                        .is_some_and(|p| !live.contains(p))
            })
            .map(|(_, c)| c.name.clone())
            .collect();
        for claim in gone {
            self.begin_deletion(now, &claim, "InstanceTerminated", Some(now))
                .await;
        }
        self.provider_drift.retain(|p, _| live.contains(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_attempt_within_jitter_and_stops_at_the_cap() {
        // (attempts, r, expected)
        let cases = [
            (1, 0.0, 1.0),
            (1, 0.999_999, 2.0),
            (3, 0.5, 6.0),
            (10, 0.0, 150.0),
            (10, 0.999_999, 300.0),
            (40, 0.5, 225.0),
        ];
        for (attempts, r, want) in cases {
            let got = jittered_backoff(1.0, 300.0, attempts, r);
            assert!((got - want).abs() < 1e-3, "{attempts} {r}: {got} != {want}");
        }
    }
}
