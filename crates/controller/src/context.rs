//! What the loops share: the cache, leadership, the catalog, nominations, records — and the
//! one way to write ([`Ctx::write`]) with the helpers several loops use (start a claim's
//! deletion, taint a node, create a claim, publish an Event).

use crate::api::{
    ApiError, Change, ClusterApi, ClusterEvent, EventType, Kind, MetaPatch, TaintChange, Write,
    Written,
};
use crate::cache::Cache;
use crate::catalog::Catalog;
use crate::{Action, Config, Record};
use capstan_cloud::{Clock, CloudProvider};
use capstan_model::claim::{TERMINATION_FINALIZER, instance_type_requirement};
use capstan_model::disruption::Reason;
use capstan_model::labels::{self, DISRUPTED_TAINT};
use capstan_model::taints::Effect;
use capstan_model::{ClaimStatus, NodeClaim, NodePool, Requirements, Resources, Taint};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// This process's leadership, as client-go's leader elector keeps it: the term it holds and
/// when it last renewed. It writes only within `renew_deadline` of that renewal.
#[derive(Clone, Debug, Default)]
pub(crate) struct Leadership {
    pub term: Option<u64>,
    /// Clock seconds of the last successful renewal.
    pub renewed_at: f64,
    /// Writes allowed past the deadline (a process frozen mid-pass sends the write it was
    /// about to send): see `Controller::step_after_freeze`.
    pub grace_writes: u32,
}

/// Writes attempted and refused, by kind of write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub attempted: u64,
    pub failed: BTreeMap<&'static str, u64>,
    /// Refused because a precondition (resourceVersion, uid) no longer held.
    pub conflicts: u64,
    /// Writes and cloud calls not made: this process did not lead, or was past its renew
    /// deadline.
    pub withheld: u64,
}

pub(crate) struct Shared {
    pub cache: Cache,
    pub lead: Leadership,
    pub catalog: Catalog,
    /// Pod key → the in-flight claim it is planned onto.
    pub nominations: crate::by_claim::PodsByClaim<()>,
    /// Pods whose `status.nominatedNodeName` capstan set as their claim's node registered:
    /// pod key → (claim, node, when). capstan clears those that did not bind
    /// ([`crate::registration::clear_nominations`]).
    pub nominated: crate::provisioning::Nominated,
    /// Pods the last plan found no place for (no NodePool or instance type serves them):
    /// they do not hold up disruption.
    pub unservable: BTreeSet<String>,
    /// When each node last had a pod bound or removed (`consolidateAfter` counts from it).
    pub pod_events: crate::disruption::PodEvents,
    /// The disruption engine's inputs, kept between evaluations.
    pub disruption_inputs: crate::disruption::KeptInputs,
    pub records: Vec<Record>,
    pub rng: ChaCha8Rng,
    pub claim_seq: u64,
    /// Provider id → the drift the cloud reports for it.
    pub provider_drift: BTreeMap<String, String>,
    pub stats: WriteStats,
    /// Events already published once (object and message), so each is said once; pruned to
    /// objects still in the cache.
    pub reported: BTreeSet<((Kind, String), String)>,
    /// The Ready condition last written for each NodePool (ready, why not).
    pub pool_ready: BTreeMap<String, (bool, String, Vec<String>)>,
    pub metrics: crate::metrics::Metrics,
    /// What the current step did that grows with the cluster (read by the scale benchmark).
    pub work: PassWork,
}

/// The parts of a controller step whose cost grows with the cluster: the provisioner's plan
/// and the disruption engine's evaluation. The simulator times each step and reads this to
/// say what the time was spent on; nothing decides from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassWork {
    /// Pods the provisioner planned (pending, and moving off deleting nodes), if it planned.
    pub planned: Option<usize>,
    /// Nodes the disruption engine evaluated, if it evaluated.
    pub evaluated: Option<usize>,
}

impl Shared {
    pub fn new(rng: ChaCha8Rng) -> Shared {
        Shared {
            cache: Cache::default(),
            lead: Leadership::default(),
            catalog: Catalog::default(),
            nominations: Default::default(),
            nominated: BTreeMap::new(),
            unservable: BTreeSet::new(),
            pod_events: Default::default(),
            disruption_inputs: Default::default(),
            records: Vec::new(),
            rng,
            claim_seq: 0,
            provider_drift: BTreeMap::new(),
            stats: WriteStats::default(),
            reported: BTreeSet::new(),
            pool_ready: BTreeMap::new(),
            metrics: crate::metrics::Metrics::new(),
            work: PassWork::default(),
        }
    }
}

pub(crate) struct Ctx<'a, A, C> {
    pub api: &'a A,
    pub cloud: &'a C,
    pub clock: &'a dyn Clock,
    pub config: &'a Config,
    pub s: &'a mut Shared,
}

impl<A: ClusterApi, C: CloudProvider> Ctx<'_, A, C> {
    pub fn cache(&self) -> &Cache {
        &self.s.cache
    }

    pub fn record(&mut self, at: f64, action: Action) {
        tracing::debug!(at, ?action, identity = %self.config.identity, "controller");
        self.s.records.push(Record { at, action });
    }

    pub fn leading(&self) -> bool {
        self.s.lead.term.is_some()
    }

    /// Steps down: this process no longer writes.
    pub fn depose(&mut self, now: f64, reason: String) {
        if self.s.lead.term.take().is_some() {
            tracing::warn!(identity = %self.config.identity, %reason, "no longer leading");
            self.record(now, Action::Deposed { reason });
        }
    }

    /// Whether this process may call the cloud now (calls that are idempotent, keyed by the
    /// claim): as for writes, but without using up a frozen process's one write.
    pub fn may_act(&mut self) -> bool {
        if self.s.lead.grace_writes > 0 && self.s.lead.term.is_some() {
            return true;
        }
        self.may_write()
    }

    /// Whether this process may write now: it leads, and renewed within the renew deadline.
    fn may_write(&mut self) -> bool {
        if self.s.lead.term.is_none() {
            self.s.stats.withheld += 1;
            return false;
        }
        let now = self.clock.now().as_secs_f64();
        if now - self.s.lead.renewed_at < self.config.renew_deadline {
            return true;
        }
        if self.s.lead.grace_writes > 0 {
            self.s.lead.grace_writes -= 1;
            return true;
        }
        self.s.stats.withheld += 1;
        let since = now - self.s.lead.renewed_at;
        self.depose(
            now,
            format!("last renewal {since:.0} s ago is past the renew deadline"),
        );
        false
    }

    /// Sends one write if this process may write, and applies what the server holds
    /// afterwards to the cache. Failures are logged with the object and counted.
    pub async fn write(&mut self, w: Write) -> Result<Written, ApiError> {
        let name = w.name();
        let target = w.target();
        if !matches!(w, Write::CreateLease(_) | Write::UpdateLease { .. }) && !self.may_write() {
            return Err(ApiError::Forbidden {
                target,
                message: "this process no longer leads".into(),
            });
        }
        self.s.stats.attempted += 1;
        let removes = match &w {
            Write::Delete { kind, key, .. } => Some((*kind, key.clone())),
            Write::Meta { kind, name, .. } => Some((*kind, name.clone())),
            _ => None,
        };
        match self.api.write(w).await {
            Ok(written) => {
                tracing::debug!(write = name, %target, "written");
                match &written {
                    Written::Object(m, o) => {
                        self.s.cache.apply(Change::Applied(m.clone(), o.clone()));
                    }
                    Written::Removed => {
                        if let Some((kind, key)) = removes {
                            self.s.cache.apply(Change::Deleted(kind, key));
                        }
                    }
                    Written::Lease(_) | Written::Done => {}
                }
                Ok(written)
            }
            Err(e) => {
                *self.s.stats.failed.entry(name).or_default() += 1;
                match &e {
                    ApiError::Conflict { .. } => {
                        self.s.stats.conflicts += 1;
                        tracing::warn!(write = name, %target, error = %e, "write refused: re-read next pass");
                    }
                    // A PDB holding an eviction, or an object already gone: expected.
                    ApiError::TooManyRequests { .. } | ApiError::NotFound { .. } => {
                        tracing::debug!(write = name, %target, error = %e, "write not done");
                    }
                    _ => tracing::warn!(write = name, %target, error = %e, "write failed"),
                }
                Err(e)
            }
        }
    }

    /// Publishes an Event (best effort).
    pub async fn event(
        &mut self,
        regarding: (Kind, String),
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        // A leader resuming from a freeze sends the one write it was about to send: an
        // Event is never that write.
        if self.s.lead.grace_writes > 0 {
            return;
        }
        let _ = self
            .write(Write::Event(ClusterEvent {
                uid: self
                    .cache()
                    .meta(regarding.0, &regarding.1)
                    .map(|m| m.uid.clone())
                    .unwrap_or_default(),
                regarding,
                type_,
                reason: reason.into(),
                note,
            }))
            .await;
    }

    /// Publishes a Warning Event once per (object, message).
    pub async fn warn_once(&mut self, regarding: (Kind, String), reason: &str, note: String) {
        self.once(regarding, EventType::Warning, reason, note).await
    }

    /// Publishes an Event once per (object, message).
    pub async fn once(
        &mut self,
        regarding: (Kind, String),
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let key = (regarding.clone(), note.clone());
        if self.s.reported.contains(&key) || !self.leading() {
            return;
        }
        self.event(regarding, type_, reason, note).await;
        self.s.reported.insert(key);
    }

    /// Awaits a cloud call, and counts its duration and error by the calling loop and method
    /// (Karpenter's cloud-provider metrics).
    pub async fn cloud_call<T>(
        &self,
        controller: &str,
        method: &str,
        call: impl std::future::Future<Output = Result<T, capstan_cloud::CloudError>>,
    ) -> Result<T, capstan_cloud::CloudError> {
        let start = self.clock.now();
        let result = call.await;
        let seconds = self.clock.now().saturating_sub(start).as_secs_f64();
        self.s.metrics.cloud_call(
            controller,
            method,
            self.cloud.provider_name(),
            seconds,
            result.as_ref().err(),
        );
        result
    }

    /// Patches a claim's status, from what the cache holds.
    pub async fn claim_status(&mut self, claim: &str, status: ClaimStatus) -> bool {
        let Some(meta) = self.cache().claim_meta(claim) else {
            return false;
        };
        let rv = meta.resource_version.clone();
        self.write(Write::ClaimStatus {
            name: claim.into(),
            rv,
            status: Box::new(status),
        })
        .await
        .is_ok()
    }

    /// Adds or removes a taint on a node, at the resourceVersion the cache holds.
    pub async fn taint(&mut self, node: &str, change: TaintChange) -> bool {
        let (Some(n), Some(meta)) = (self.cache().node(node), self.cache().node_meta(node)) else {
            return false;
        };
        let w = Write::Taint {
            node: node.into(),
            rv: meta.resource_version.clone(),
            current: n.taints.clone(),
            change,
        };
        self.write(w).await.is_ok()
    }

    /// Adds or removes the disrupted taint on a node; true when the node ends up as asked.
    pub async fn set_disrupted_taint(&mut self, node: &str, on: bool) -> bool {
        let Some(n) = self.cache().node(node) else {
            return false;
        };
        if n.taints.iter().any(|t| t.key == DISRUPTED_TAINT) == on {
            return true;
        }
        let change = if on {
            TaintChange::Add(Taint {
                key: DISRUPTED_TAINT.into(),
                value: String::new(),
                effect: Effect::NoSchedule,
            })
        } else {
            TaintChange::Remove(DISRUPTED_TAINT.into())
        };
        self.taint(node, change).await
    }

    /// Starts a claim's termination: records why (and the cloud's deadline), deletes it (its
    /// finalizer holds it while the termination loop drains and deletes the instance) and
    /// taints its node.
    pub async fn begin_deletion(
        &mut self,
        claim: &str,
        reason: Reason,
        deadline: Option<f64>,
    ) -> bool {
        let Some(c) = self.cache().claim(claim).cloned() else {
            return false;
        };
        if c.deleting() {
            return true;
        }
        if !self.mark(&c, reason, deadline).await {
            return false;
        }
        let Some(meta) = self.cache().claim_meta(claim).cloned() else {
            return false;
        };
        let deleted = self
            .write(Write::Delete {
                kind: Kind::NodeClaim,
                key: claim.into(),
                uid: meta.uid,
                rv: meta.resource_version,
            })
            .await;
        if deleted.is_err() {
            return false;
        }
        if reason.disruption() {
            self.s
                .metrics
                .claims_disrupted
                .with_label_values(&[
                    &reason.cli_name(),
                    &c.nodepool,
                    c.status.capacity_type.as_deref().unwrap_or_default(),
                ])
                .inc();
        }
        if let Some(node) = self.cache().node_of_claim(&c).map(|n| n.name.clone()) {
            self.set_disrupted_taint(&node, true).await;
        }
        true
    }

    /// Records why capstan deletes a claim, and the cloud's deadline.
    async fn mark(&mut self, c: &NodeClaim, reason: Reason, deadline: Option<f64>) -> bool {
        if c.deletion_reason == Some(reason) && c.deadline == deadline {
            return true;
        }
        let Some(meta) = self.cache().claim_meta(&c.name) else {
            return false;
        };
        let w = Write::MarkClaim {
            name: c.name.clone(),
            rv: meta.resource_version.clone(),
            reason,
            deadline,
        };
        self.write(w).await.is_ok()
    }

    /// Gives a claim being deleted the cloud's deadline, if it is earlier than the one it has:
    /// the drain forces its pods off in time for it.
    pub async fn tighten_deadline(&mut self, claim: &str, reason: Reason, deadline: f64) -> bool {
        let Some(c) = self.cache().claim(claim).cloned() else {
            return false;
        };
        if c.deadline.is_some_and(|d| d <= deadline) {
            return true;
        }
        let reason = c.deletion_reason.unwrap_or(reason);
        self.mark(&c, reason, Some(deadline)).await
    }

    /// Releases capstan's finalizer from a node or claim.
    pub async fn release_finalizer(&mut self, kind: Kind, name: &str) -> bool {
        let (finalizers, meta) = match kind {
            Kind::Node => match (self.cache().node(name), self.cache().node_meta(name)) {
                (Some(n), Some(m)) => (n.finalizers.clone(), m.clone()),
                _ => return true,
            },
            _ => match (self.cache().claim(name), self.cache().claim_meta(name)) {
                (Some(c), Some(m)) => (c.finalizers.clone(), m.clone()),
                _ => return true,
            },
        };
        if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
            return true;
        }
        let rest: Vec<String> = finalizers
            .into_iter()
            .filter(|f| f != TERMINATION_FINALIZER)
            .collect();
        let w = Write::Meta {
            kind,
            name: name.into(),
            rv: meta.resource_version,
            patch: MetaPatch {
                finalizers: Some(rest),
                ..Default::default()
            },
        };
        matches!(self.write(w).await, Ok(_) | Err(ApiError::NotFound { .. }))
    }

    fn new_claim_name(&mut self, pool: &str) -> String {
        self.s.claim_seq += 1;
        let r: u32 = self.s.rng.random();
        format!("{pool}-{r:08x}")
    }

    /// Creates a NodeClaim for `instance_types` (in order of preference); returns its name.
    /// `reason` labels the count of claims created: `provisioned`, or the disruption method a
    /// replacement is for.
    pub async fn create_claim(
        &mut self,
        reason: &str,
        pool: &NodePool,
        mut requirements: Requirements,
        instance_types: Vec<String>,
        requests: Resources,
        warm: bool,
    ) -> Option<String> {
        requirements.add(instance_type_requirement(&instance_types));
        for _ in 0..3 {
            let name = self.new_claim_name(&pool.name);
            let mut labels = pool.labels.clone();
            labels.insert(labels::NODEPOOL.into(), pool.name.clone());
            // A value for each custom requirement (a NodePool's `team Exists` narrowed to a
            // pod's `team: ml`): the node carries it, so the pod binds there.
            let typed = |k: &str| {
                instance_types.iter().any(|t| {
                    capstan_model::catalog::type_for_pool(
                        self.s.catalog.cached(),
                        t,
                        Some(&pool.name),
                    )
                    .is_some_and(|(_, it)| it.requirements.has_key(k))
                })
            };
            for (k, v) in requirements.node_labels(&name) {
                // A key the instance types define is theirs to set (a catalog's own labels).
                if !typed(&k) {
                    labels.entry(k).or_insert(v);
                }
            }
            let claim = NodeClaim {
                name: name.clone(),
                nodepool: pool.name.clone(),
                requirements: requirements.clone(),
                instance_types: instance_types.clone(),
                requests: requests.clone(),
                labels,
                taints: pool.taints.clone(),
                startup_taints: pool.startup_taints.clone(),
                node_class: pool.spec.template.spec.node_class_ref.clone(),
                finalizers: vec![TERMINATION_FINALIZER.into()],
                annotations: [
                    (
                        capstan_model::claim::MIN_VALUES_RELAXED_ANNOTATION,
                        capstan_model::claim::min_values_relaxed(&pool.requirements, &requirements),
                    ),
                    (capstan_model::claim::WARM_START_ANNOTATION, warm),
                ]
                .into_iter()
                .filter(|(_, on)| *on)
                .map(|(k, _)| (k.to_string(), "true".to_string()))
                .collect(),
                ..Default::default()
            };
            match self.write(Write::CreateClaim(Box::new(claim))).await {
                Ok(_) => {
                    self.s
                        .metrics
                        .claims_created
                        .with_label_values(&[reason, &pool.name])
                        .inc();
                    return Some(name);
                }
                Err(ApiError::AlreadyExists { .. }) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// The claim a provider id belongs to.
    pub fn claim_by_provider(&self, provider_id: &str) -> Option<Arc<NodeClaim>> {
        let name = self.cache().claim_by_provider(provider_id)?;
        self.cache().claim(name).cloned()
    }
}
