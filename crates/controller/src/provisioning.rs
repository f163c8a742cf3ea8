//! Provisioning: batch pending pods (a window that closes after `batch_idle` without new
//! pods, or at `batch_max`), plan them with the packer (or the scheduling core), create the
//! NodeClaims, and nominate the pods onto them until their nodes are up. Pods that fit
//! nowhere get an Event saying why.

use crate::api::{ClusterApi, EventType, Kind};
use crate::by_claim::PodsByClaim;
use crate::cache::{Cache, NodePods, seek};
use crate::catalog::instance_types;
use crate::context::Ctx;
use crate::{Action, Config, Planner};
use capstan_cloud::CloudProvider;
use capstan_model::{InstanceType, Node, Pod};
use capstan_sched::{InFlight, Snapshot, SnapshotBuilder, SolveInput};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// The batch window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    start: Option<f64>,
    last_change: f64,
    seen: usize,
}

impl Batch {
    /// Whether to plan now, with `pending` pods waiting: once no new pod arrived for `idle`
    /// seconds, or once the batch is `max` seconds old. Planning closes the window.
    pub fn due(&mut self, now: f64, pending: usize, idle: f64, max: f64) -> bool {
        if pending == 0 {
            self.start = None;
            return false;
        }
        match self.start {
            None => {
                self.start = Some(now);
                self.last_change = now;
                self.seen = pending;
            }
            Some(_) if pending != self.seen => {
                self.last_change = now;
                self.seen = pending;
            }
            _ => {}
        }
        let start = self.start.unwrap_or(now);
        if now - self.last_change < idle && now - start < max {
            return false;
        }
        self.start = None;
        true
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Provisioner {
    batch: Batch,
    /// The window for the pods of deleting nodes when nothing is pending.
    moving_batch: Batch,
    launched: LaunchedFor,
    /// Where the cache's pod journal ended when the nominations were last checked (none
    /// yet: they are all checked), and the moving pods then.
    pods_seen: Option<u64>,
    moving_seen: BTreeSet<String>,
}

/// A pod still unbound this long after the node launched for it came up is looked at again.
const BIND_GRACE: f64 = 30.0;
/// After this many launches that did not get it, a pod gets no further node…
const STRIKES: u32 = 2;
/// …for this long, unless it or a NodePool changes first.
const HOLD: f64 = 600.0;

/// The runaway guard: pods capstan launched a node for, until they bind. A pod still unbound
/// [`BIND_GRACE`] after that node came up is a suspect; if the next plan places it on that very
/// node (capstan's model says it fits there, kube-scheduler did not bind it: a constraint
/// capstan does not model, a volume's zone say), that launch is a strike and the pod gets an
/// Event with kube-scheduler's message. After [`STRIKES`] strikes it gets no further node
/// until it (its uid) or the NodePools change, or [`HOLD`] passes — rather than node after
/// node it will never run on. A pod the plan sends elsewhere (its room was taken, a spread
/// moved on) is no suspect any more.
#[derive(Clone, Debug, Default)]
struct LaunchedFor {
    /// Pod key → (claim, pod uid): the launch it waits for.
    claims: PodsByClaim<String>,
    /// Pod key → (its launched node, claim, pod uid).
    suspects: BTreeMap<String, (String, String, String)>,
    /// Pod key → (pod uid, strikes).
    strikes: BTreeMap<String, (String, u32)>,
    /// Pod key → (pod uid, NodePools fingerprint, since).
    held: BTreeMap<String, (String, u64, f64)>,
}

impl LaunchedFor {
    fn launched(&mut self, pod: &str, uid: &str, claim: &str) {
        self.claims
            .insert(pod.to_string(), claim.to_string(), uid.to_string());
    }

    /// Forgets pods that bound or went, ends holds, and turns launches whose node has been up
    /// [`BIND_GRACE`] without the pod into suspects. `changed` are the pods changed since the
    /// last review, if known: then only they and the launches' claims are looked at.
    fn review<'c>(
        &mut self,
        cache: &Cache,
        provisionable: impl Fn(&str) -> Option<&'c Arc<Pod>>,
        changed: Option<&[&str]>,
        now: f64,
    ) {
        let live = |pod: &str, uid: &str| provisionable(pod).is_some_and(|p| p.uid == uid);
        let fingerprint = pools_fingerprint(cache);
        self.held.retain(|pod, (uid, fp, since)| {
            *fp == fingerprint && now - *since < HOLD && live(pod, uid)
        });
        let held = &self.held;
        self.strikes
            .retain(|pod, (uid, n)| live(pod, uid) && (*n < STRIKES || held.contains_key(pod)));
        self.suspects.retain(|pod, (_, _, uid)| live(pod, uid));
        let mut suspects = Vec::new();
        // What becomes of a launch whose pod still waits, by its claim.
        let verdict = |claim: &str| -> Verdict {
            let Some(c) = cache.claim(claim).filter(|c| !c.deleting()) else {
                return Verdict::Drop;
            };
            let Some(up) = c.status.initialized_at else {
                return Verdict::Keep;
            };
            if now - up < BIND_GRACE {
                return Verdict::Keep;
            }
            match &c.status.node_name {
                Some(node) => Verdict::Suspect(node.clone()),
                None => Verdict::Drop,
            }
        };
        let fresh = self.claims.take_fresh();
        match changed {
            None => {
                // Many pods wait for each claim: each claim is looked up once.
                let mut verdicts: HashMap<String, Verdict, foldhash::fast::FixedState> =
                    HashMap::default();
                self.claims.retain(|pod, claim, uid| {
                    if !live(pod, uid) {
                        return false;
                    }
                    let v = verdicts
                        .entry(claim.to_string())
                        .or_insert_with(|| verdict(claim));
                    match v {
                        Verdict::Keep => true,
                        Verdict::Drop => false,
                        Verdict::Suspect(node) => {
                            suspects.push((
                                pod.to_string(),
                                (node.clone(), claim.to_string(), uid.to_string()),
                            ));
                            false
                        }
                    }
                });
            }
            Some(changed) => {
                // Every launch was kept at the last review, its pod waiting then: only the
                // pods changed since, and those entered since, may have bound or gone.
                for pod in changed
                    .iter()
                    .copied()
                    .chain(fresh.iter().map(String::as_str))
                {
                    if self.claims.get(pod).is_some_and(|(_, uid)| !live(pod, uid)) {
                        self.claims.remove(pod);
                    }
                }
                let claims: Vec<String> = self.claims.claims().cloned().collect();
                for claim in claims {
                    match verdict(&claim) {
                        Verdict::Keep => {}
                        Verdict::Drop => {
                            self.claims.remove_claim(&claim);
                        }
                        Verdict::Suspect(node) => {
                            for (pod, uid) in self.claims.remove_claim(&claim) {
                                suspects.push((pod, (node.clone(), claim.clone(), uid)));
                            }
                        }
                    }
                }
            }
        }
        debug_assert!(
            self.claims
                .iter()
                .all(|(p, c, uid)| live(p, uid) && verdict(c) == Verdict::Keep),
            "a launch the review kept should have gone"
        );
        debug_assert!(self.claims.consistent());
        self.suspects.extend(suspects);
    }

    /// After a plan, once no claim is in flight (until then kube-scheduler may rightly wait,
    /// for a spread's other zones say): each suspect the plan placed on its launched node is
    /// struck, with the Event's note; the other suspects are cleared.
    fn judge(
        &mut self,
        cache: &Cache,
        placed: &BTreeMap<String, String>,
        now: f64,
    ) -> Vec<(String, String)> {
        let mut notes = Vec::new();
        if cache
            .claims()
            .any(|c| !c.deleting() && !c.status.initialized())
        {
            return notes;
        }
        let fingerprint = pools_fingerprint(cache);
        for (pod, (node, claim, uid)) in std::mem::take(&mut self.suspects) {
            if placed.get(&pod) != Some(&node) {
                continue;
            }
            let says = cache
                .pod(&pod)
                .and_then(|p| p.scheduling_message.clone())
                .unwrap_or_else(|| "no message".into());
            notes.push((
                pod.clone(),
                format!(
                    "capstan launched {claim} (node {node}) for this pod and its model says the pod fits there, but kube-scheduler did not bind it: {says}"
                ),
            ));
            let entry = self.strikes.entry(pod.clone()).or_insert((uid.clone(), 0));
            entry.1 += 1;
            if entry.1 >= STRIKES && !self.held.contains_key(&pod) {
                self.held.insert(pod.clone(), (uid, fingerprint, now));
                notes.push((
                    pod,
                    format!(
                        "no further node is launched for this pod: {STRIKES} nodes launched for it did not get it; until it or a NodePool changes, or for {} minutes",
                        HOLD / 60.0
                    ),
                ));
            }
        }
        notes
    }

    #[cfg(test)]
    fn holds(&self, pod: &str) -> bool {
        self.held.contains_key(pod)
    }
}

/// What becomes of a launch whose pod still waits: kept, dropped, or its pod a suspect that
/// its node (named) did not take.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    Keep,
    Drop,
    Suspect(String),
}

/// Changes whenever a NodePool does.
fn pools_fingerprint(cache: &Cache) -> u64 {
    let text = format!("{:?}", cache.nodepool_list());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Static NodePools (`replicas`, Karpenter's static capacity, behind its `StaticCapacity`
/// feature gate; with the gate off they launch nothing and say so once): each keeps that many
/// NodeClaims whatever the pods — new ones over every type its requirements allow, cheapest
/// first; when replicas go down, the claims whose nodes run the fewest pods (not yet up
/// first, then the newest) are deleted. `limits.nodes` caps the count.
async fn keep_static_pools<A: ClusterApi, C: CloudProvider>(cx: &mut Ctx<'_, A, C>, now: f64) {
    let pools: Vec<capstan_model::NodePool> = cx
        .cache()
        .nodepools()
        .filter(|p| p.replicas.is_some() && !p.deleting)
        .map(|p| capstan_model::NodePool::clone(p))
        .collect();
    for pool in pools {
        if !cx.config.static_capacity {
            let why = format!(
                "NodePool {} sets replicas, which takes Karpenter's StaticCapacity feature gate (--feature-gates StaticCapacity=true); it is off, so the NodePool launches nothing",
                pool.name
            );
            cx.warn_once(
                (Kind::NodePool, pool.name.clone()),
                "StaticCapacityDisabled",
                why,
            )
            .await;
            continue;
        }
        let want = pool.replicas.unwrap_or(0) as usize;
        let want = match pool.limits.get("nodes") {
            Some(&n) => want.min(n.max(0) as usize),
            None => want,
        };
        let mut live: Vec<Arc<capstan_model::NodeClaim>> = cx
            .cache()
            .claims()
            .filter(|c| c.nodepool == pool.name && !c.deleting())
            .cloned()
            .collect();
        if live.len() < want {
            if cx.s.catalog.failed(&pool.name).is_some() {
                continue;
            }
            let types = instance_types(cx, now).await;
            let mut options: Vec<(f64, String)> = types
                .iter()
                .filter(|t| capstan_sched::predicates::type_compatible(t, &pool.requirements))
                .filter_map(|t| {
                    let o = t.cheapest_offering(&pool.requirements)?;
                    Some((o.price, t.name.clone()))
                })
                .collect();
            options.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            let mut names: Vec<String> = Vec::new();
            for (_, n) in options {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
            if names.is_empty() {
                let why = format!(
                    "static NodePool {}: no instance type its requirements allow has an available offering",
                    pool.name
                );
                cx.warn_once(
                    (Kind::NodePool, pool.name.clone()),
                    "NoCompatibleInstanceTypes",
                    why,
                )
                .await;
                continue;
            }
            for _ in live.len()..want {
                let made = cx
                    .create_claim(
                        "static",
                        &pool,
                        pool.requirements.clone(),
                        names.clone(),
                        capstan_model::Resources::new(),
                        false,
                    )
                    .await;
                if made.is_none() {
                    break;
                }
            }
        } else if live.len() > want {
            let cache = cx.cache();
            let pods = |c: &capstan_model::NodeClaim| {
                c.status
                    .node_name
                    .as_ref()
                    .map_or(0, |n| cache.workload_pods_on(n).len())
            };
            live.sort_by(|a, b| {
                a.status
                    .initialized()
                    .cmp(&b.status.initialized())
                    .then_with(|| pods(a).cmp(&pods(b)))
                    .then_with(|| b.created.total_cmp(&a.created))
                    .then_with(|| a.name.cmp(&b.name))
            });
            for c in &live[..live.len() - want] {
                cx.begin_deletion(&c.name, capstan_model::disruption::Reason::ScaledDown, None)
                    .await;
            }
        }
    }
}

impl Provisioner {
    /// Whether to plan now, with `waiting` pending pods and `moving` pods of deleting nodes
    /// (see [`Batch::due`]): the pending pods' window is the same whatever the moving pods do.
    fn due(&mut self, now: f64, waiting: usize, moving: usize, idle: f64, max: f64) -> bool {
        if waiting > 0 {
            self.moving_batch.due(now, 0, idle, max);
            self.batch.due(now, waiting, idle, max)
        } else {
            self.batch.due(now, 0, idle, max);
            self.moving_batch.due(now, moving, idle, max)
        }
    }

    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) {
        keep_static_pools(cx, now).await;
        crate::registration::clear_nominations(cx, now).await;
        let cutoff = cx.config.expendable_priority_cutoff;
        for (pod, priority) in expendable(cx.cache(), cx.config) {
            cx.once(
                (Kind::Pod, pod),
                EventType::Normal,
                "Expendable",
                format!(
                    "priority {priority} is below the expendable cutoff {cutoff}: no node is \
                     launched for this pod; it runs where there is room"
                ),
            )
            .await;
        }
        // Nominations end when their claim is gone, or once its node is up.
        let cache = &cx.s.cache;
        let live = |claim: &str| {
            cache
                .claim(claim)
                .is_some_and(|c| !c.deleting() && !c.status.initialized())
        };
        let config = cx.config;
        let ours = &cx.s.nominated;
        let provisionable = |pod: &str| provisionable_pod(cache, config, ours, pod);
        let moving = moving(cache, cx.config, now);
        let planned = |pod: &str| provisionable(pod).is_some() || moving.contains(pod);
        // The pods changed since the last pass, when the cache's journal still reaches back.
        let changed: Option<Vec<&str>> = self
            .pods_seen
            .and_then(|at| cache.pods_changed_since(at))
            .map(Iterator::collect);
        self.pods_seen = Some(cache.pod_journal_end());
        let fresh = cx.s.nominations.take_fresh();
        match &changed {
            None => {
                // Many pods are nominated to each claim: each claim is looked up once.
                let mut claim_live: HashMap<String, bool, foldhash::fast::FixedState> =
                    HashMap::default();
                cx.s.nominations.retain(|pod, claim, _| {
                    let live = *claim_live
                        .entry(claim.to_string())
                        .or_insert_with(|| live(claim));
                    live && planned(pod)
                });
            }
            Some(changed) => {
                // Every nomination held at the last pass: it ends now if its claim is no
                // longer in flight, or if its pod — changed, moving or not since, or
                // nominated since — is no longer planned.
                let ended: Vec<String> =
                    cx.s.nominations
                        .claims()
                        .filter(|c| !live(c))
                        .cloned()
                        .collect();
                for claim in ended {
                    cx.s.nominations.remove_claim(&claim);
                }
                let moved = self.moving_seen.symmetric_difference(&moving);
                for pod in changed
                    .iter()
                    .copied()
                    .chain(moved.map(String::as_str))
                    .chain(fresh.iter().map(String::as_str))
                {
                    if cx.s.nominations.contains_key(pod) && !planned(pod) {
                        cx.s.nominations.remove(pod);
                    }
                }
            }
        }
        debug_assert!(
            cx.s.nominations
                .iter()
                .all(|(pod, claim, _)| live(claim) && planned(pod)),
            "a nomination the pass kept should have ended"
        );
        debug_assert!(cx.s.nominations.consistent());
        self.moving_seen.clone_from(&moving);
        cx.s.unservable.retain(|pod| planned(pod));
        self.launched
            .review(cache, provisionable, changed.as_deref(), now);
        // Pending pods first, then those of deleting nodes (Karpenter's order: if pods are
        // moving already, it undershoots rather than plans a pod twice).
        // The pending pods, the nominations and the held pods are all in key order: one walk
        // of the three.
        let mut pending_keys: Vec<String> = Vec::new();
        // A pod whose claims kube-scheduler cannot bind yet gets no node, and a reason.
        let mut waiting = Vec::new();
        {
            let mut nominated = cx.s.nominations.keys().map(|k| (k, ())).peekable();
            let mut held = self.launched.held.keys().map(|k| (k, ())).peekable();
            for (k, p) in provisionable_pods(cache, config, &cx.s.nominated) {
                if seek(&mut nominated, k).is_some() || seek(&mut held, k).is_some() {
                    continue;
                }
                match &p.volume_error {
                    Some(e) => waiting.push((k.clone(), e.clone())),
                    None => pending_keys.push(k.clone()),
                }
            }
        }
        for k in moving.iter().filter(|k| !cx.s.nominations.contains_key(k)) {
            match cache.pod(k).and_then(|p| p.volume_error.clone()) {
                Some(e) => waiting.push((k.clone(), e)),
                None => pending_keys.push(k.clone()),
            }
        }
        for (pod, why) in waiting {
            let note = format!("capstan launches no node for it: {why}");
            cx.warn_once((Kind::Pod, pod), "WaitingForVolume", note)
                .await;
        }
        let (idle, max) = (cx.config.batch_idle, cx.config.batch_max);
        // Pending pods open and close the batch as ever; pods of deleting nodes join any plan,
        // and get one of their own (their own window) only while no pod is pending — so they
        // never hold back or hurry the pending pods' plan.
        let moving_only = pending_keys.iter().filter(|k| moving.contains(*k)).count();
        let waiting = pending_keys.len() - moving_only;
        if !self.due(now, waiting, moving_only, idle, max) {
            return;
        }
        let types = instance_types(cx, now).await;
        // NodePools the provider cannot launch for get nothing (their Ready condition says why).
        let mut pools = cx.s.cache.nodepool_list();
        pools.retain(|p| p.replicas.is_none() && cx.s.catalog.failed(&p.name).is_none());
        if pools.is_empty() {
            return;
        }
        let ignore_preferences = cx.config.ignore_preferences;
        let pending: Vec<Arc<Pod>> = pending_keys
            .iter()
            .filter_map(|k| cx.cache().pod(k).cloned())
            .map(|p| {
                if moving.contains(&p.key()) {
                    Arc::new(p.off_its_node())
                } else {
                    p
                }
            })
            .map(|p| {
                if ignore_preferences {
                    Arc::new(p.without_preferences())
                } else {
                    p
                }
            })
            .collect();
        let planning = cx.clock.now();
        cx.s.work.planned = Some(pending.len());
        let mut snapshot = snapshot(cx, &types, &pending, &moving);
        snapshot.warm = crate::catalog::warm_instances(cx, "planning").await;
        let input = SolveInput {
            snapshot: &snapshot,
            pending: &pending,
            nodepools: &pools,
            instance_types: &types,
        };
        let solve_options = capstan_sched::SolveOptions {
            relax_min_values: cx.config.relax_min_values,
            ..Default::default()
        };
        let plan = match cx.config.planner {
            Planner::Sched => capstan_sched::solve(input, &solve_options),
            Planner::Pack => {
                let options = capstan_pack::PackOptions {
                    relax_min_values: cx.config.relax_min_values,
                    ..Default::default()
                };
                match capstan_pack::pack(input, &options) {
                    Ok(r) => r.plan,
                    Err(e) => {
                        tracing::warn!(error = %e, "packer failed; using the scheduling core");
                        capstan_sched::solve(input, &solve_options)
                    }
                }
            }
        };
        let plan_seconds = (cx.clock.now().saturating_sub(planning)).as_secs_f64();
        let inflight: BTreeSet<&str> = snapshot.inflight.iter().map(|f| f.name.as_str()).collect();
        let mut nominate: Vec<(String, String)> = Vec::new();
        for b in &plan.existing {
            if inflight.contains(b.node.as_str()) {
                for &i in &b.pods {
                    nominate.push((pending[i].key(), b.node.clone()));
                }
            }
        }
        let placed: BTreeMap<String, String> = plan
            .existing
            .iter()
            .flat_map(|b| b.pods.iter().map(|&i| (pending[i].key(), b.node.clone())))
            .collect();
        for (pod, note) in self.launched.judge(cx.cache(), &placed, now) {
            tracing::warn!(%pod, %note, "launched for, not bound");
            cx.warn_once((Kind::Pod, pod), "NotBound", note).await;
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
            let claim = cx
                .create_claim(
                    "provisioned",
                    pool,
                    nc.requirements.clone(),
                    names,
                    nc.requests.clone(),
                    nc.warm,
                )
                .await;
            if let Some(name) = claim {
                created += 1;
                let pods: Vec<String> = nc.pods.iter().map(|&i| pending[i].key()).collect();
                nominate.extend(pods.iter().map(|k| (k.clone(), name.clone())));
                cx.record(now, Action::Requested { claim: name, pods });
            }
        }
        for (pod, claim) in &nominate {
            // Pods of deleting nodes bind once evicted, whenever that is: no runaway guard.
            if moving.contains(pod) {
                continue;
            }
            if let Some(p) = cx.cache().pod(pod) {
                self.launched.launched(pod, &p.uid, claim);
            }
        }
        cx.s.nominations
            .extend(nominate.into_iter().map(|(pod, claim)| (pod, claim, ())));
        cx.s.unservable.clear();
        for u in &plan.unschedulable {
            let pod = pending[u.pod].key();
            cx.s.unservable.insert(pod.clone());
            cx.warn_once((Kind::Pod, pod), "FailedScheduling", u.reason.to_string())
                .await;
        }
        let for_moving = plan
            .new_claims
            .iter()
            .filter(|c| c.pods.iter().any(|&i| moving.contains(&pending[i].key())))
            .count();
        tracing::info!(
            pods = pending.len(),
            moving = moving.len(),
            for_moving,
            claims = created,
            unschedulable = plan.unschedulable.len(),
            plan_ms = plan_seconds * 1000.0,
            "provisioned"
        );
        cx.s.metrics
            .scheduled(plan_seconds, pending.len(), plan.unschedulable.len());
        cx.record(
            now,
            Action::Provisioned {
                claims: created,
                pods: pending.len(),
                unschedulable: plan.unschedulable.len(),
                plan_seconds,
            },
        );
    }
}

/// Whether capstan buys a node for a pending pod: kube-scheduler found no node for it (see
/// [`Pod::is_provisionable`]) and it is not expendable.
/// A pod nominated to a node is preempting (kube-scheduler's nomination), unless the
/// nomination is one capstan made as the node launched for it registered (`ours`): that pod
/// is still capstan's, its launch still tracked.
fn provisionable_by(p: &Pod, config: &Config, ours: &Nominated) -> bool {
    let not_preempting = match &p.nominated_node {
        None => true,
        Some(n) => ours.get(&p.key()).is_some_and(|(_, node, _)| node == n),
    };
    not_preempting
        && p.waits_for_capacity(&config.scheduler_names)
        && p.priority >= config.expendable_priority_cutoff
}

/// Pod key → (claim, node, when) of each nomination capstan made (`Shared::nominated`).
pub(crate) type Nominated = std::collections::BTreeMap<String, (String, String, f64)>;

/// The pending pods capstan buys nodes for ([`provisionable_by`]), in key order.
pub(crate) fn provisionable_pods<'c>(
    cache: &'c Cache,
    config: &'c Config,
    ours: &'c Nominated,
) -> impl Iterator<Item = (&'c String, &'c Arc<Pod>)> + 'c {
    cache
        .pending()
        .iter()
        .filter(|(_, p)| provisionable_by(p, config, ours))
}

/// The pending pod `key` if capstan buys a node for it (one of [`provisionable_pods`]), by a
/// hashed lookup.
pub(crate) fn provisionable_pod<'c>(
    cache: &'c Cache,
    config: &Config,
    ours: &Nominated,
    key: &str,
) -> Option<&'c Arc<Pod>> {
    cache
        .pending_pod(key)
        .filter(|p| provisionable_by(p, config, ours))
}

/// Pods of nodes being deleted (the Node's or its NodeClaim's deletion requested) that will
/// need room elsewhere: planned with the pending pods ahead of their eviction, so a node
/// someone deletes, or one that expires, has its pods' new room on the way before they go,
/// as in Karpenter ([`capstan_model::pdb::moves_ahead_of_drain`]). Expendable pods and other
/// schedulers' pods are not, as when pending.
pub(crate) fn moving(cache: &Cache, config: &Config, now: f64) -> BTreeSet<String> {
    let wall = config.epoch_unix + now;
    let pdbs: Vec<&capstan_model::pdb::Pdb> = cache.pdbs().map(|b| &**b).collect();
    // The deleting nodes, and the nodes of deleting claims (a node's claim is the one its
    // provider id indexes, `Cache::claim_of_node`): both from the cache's indexes of what is
    // being deleted, so a pass costs what is going, not the cluster's size.
    let going = cache
        .deleting_claims()
        .filter_map(|c| c.status.provider_id.as_deref())
        .filter(|p| {
            cache
                .claim_by_provider(p)
                .and_then(|c| cache.claim(c))
                .is_some_and(|c| c.deleting())
        })
        .filter_map(|p| cache.node_by_provider(p));
    let nodes: BTreeSet<&str> = cache
        .deleting_nodes()
        .map(|n| n.name.as_str())
        .chain(going)
        .collect();
    nodes
        .into_iter()
        .flat_map(|n| cache.pods_on(n))
        .filter(|p| {
            p.priority >= config.expendable_priority_cutoff
                && config.scheduler_names.iter().any(|s| s == p.scheduler())
                && capstan_model::pdb::moves_ahead_of_drain(p, pdbs.iter().copied(), wall)
        })
        .map(|p| p.key())
        .collect()
}

/// Expendable pods kube-scheduler found no room for: they wait for room, and are told so once.
fn expendable(cache: &Cache, config: &Config) -> Vec<(String, i32)> {
    cache
        .pending()
        .iter()
        .filter(|(_, p)| {
            p.priority < config.expendable_priority_cutoff
                && p.is_provisionable(&config.scheduler_names)
        })
        .map(|(k, p)| (k.clone(), p.priority))
        .collect()
}

/// What the planner sees: nodes with their bound pods (summarized when nothing pending looks
/// at other pods), in-flight claims with the pods nominated to them, DaemonSets.
fn snapshot<A: ClusterApi, C: CloudProvider>(
    cx: &Ctx<'_, A, C>,
    types: &[InstanceType],
    pending: &[Arc<Pod>],
    moving: &BTreeSet<String>,
) -> Snapshot {
    let cache = cx.cache();
    let mut b = SnapshotBuilder::new(pending, cache.repelling() > 0);
    b.daemonsets(cache.daemonsets().map(|p| Pod::clone(p)));
    let none = capstan_model::Resources::new();
    // The nodes the moving pods are on: only their pods need checking against `moving`.
    let moving_from: HashSet<&str, foldhash::fast::FixedState> = moving
        .iter()
        .filter_map(|k| cache.pod(k)?.node_name.as_deref())
        .collect();
    for (n, linked, on) in cache.nodes_linked_with_pods() {
        let used = on.map_or(&none, |on| on.used());
        let claim = linked.claim().map(|c| &**c);
        // The node's NodePool label, as the cache keeps it (what `going` and `up` below
        // carry too).
        let pool = linked.pool();
        let some_move = moving_from.contains(n.name.as_str());
        let pods = on
            .into_iter()
            .flat_map(|on| on.pods())
            .filter(|p| !some_move || !moving.contains(&p.key()));
        // The cache keeps each node's DaemonSet requests; they are summed here only when pods
        // are moving off the node.
        let daemons = on.filter(|_| !some_move).map(NodePods::daemons);
        // A deleting node takes no pods; the pods moving off it are planned, not counted here.
        if claim.is_some_and(|c| c.deleting()) && !n.deleting {
            let going = Arc::new(Node {
                deleting: true,
                ..Node::clone(n)
            });
            match daemons {
                Some(d) => b.node_summed(&going, pool, pods, used, d),
                None => b.node(&going, pool, pods, used),
            }
            continue;
        }
        // A node still coming up takes pods as it will be once initialized, as in Karpenter,
        // after the initialized ones.
        match (n.coming_up(claim), daemons) {
            (Some(up), _) => b.node_coming_up(&Arc::new(up), pool, pods, used),
            (None, Some(d)) => b.node_summed(n, pool, pods, used, d),
            (None, None) => b.node(n, pool, pods, used),
        }
    }
    for c in cache.claims() {
        if let Some(slot) = InFlight::of_claim(c, types) {
            b.inflight(slot);
        }
    }
    for (pod, claim, _) in cx.s.nominations.iter() {
        if let Some(p) = cache.pod(pod) {
            b.nominated(claim, p);
        }
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walking_two_ascending_sequences_together_finds_exactly_the_shared_keys() {
        let keys: Vec<String> = ["a/1", "a/3", "b/1", "b/10"].map(String::from).into();
        // (queries in ascending order, which of them are among the keys)
        let cases: [(&[&str], &[bool]); 4] = [
            (
                &["a/1", "a/2", "a/3", "b/1", "b/10"],
                &[true, false, true, true, true],
            ),
            (&["a/0", "a/2", "b/0", "b/2", "c"], &[false; 5]),
            (&["b/10"], &[true]),
            (&["a/3", "b/1", "z"], &[true, true, false]),
        ];
        for (queries, want) in cases {
            let mut walk = keys.iter().map(|k| (k, ())).peekable();
            let got: Vec<bool> = queries
                .iter()
                .map(|q| seek(&mut walk, q).is_some())
                .collect();
            assert_eq!(got, want, "{queries:?}");
        }
    }

    #[test]
    fn a_pod_that_two_launched_nodes_with_room_did_not_get_is_held_until_it_changes() {
        use crate::api::{Change, Meta, Object};
        use capstan_model::{Node, NodeClaim};
        let mut cache = Cache::default();
        let mut rv = 0;
        let mut put = |cache: &mut Cache, o: Object| {
            rv += 1;
            cache.apply(Change::Applied(
                Meta {
                    uid: "u".into(),
                    resource_version: rv.to_string(),
                },
                o,
            ));
        };
        let pod = |uid: &str| {
            let mut p = Pod {
                namespace: "default".into(),
                name: "db".into(),
                uid: uid.into(),
                unschedulable: true,
                scheduling_message: Some("1 node(s) had volume node affinity conflict".into()),
                ..Default::default()
            };
            p.requests.cpu = 500;
            p.requests.pods = 1;
            Object::Pod(Arc::new(p))
        };
        let node = |name: &str| {
            let mut n = Node {
                name: name.into(),
                ready: true,
                ..Default::default()
            };
            n.allocatable.cpu = 2000;
            n.allocatable.pods = 29;
            Object::Node(Arc::new(n))
        };
        let claim = |name: &str, node: &str, up: Option<f64>| {
            let mut c = NodeClaim {
                name: name.into(),
                ..Default::default()
            };
            c.status.node_name = Some(node.into());
            c.status.initialized_at = up;
            Object::NodeClaim(Arc::new(c))
        };
        let key = "default/db".to_string();
        // The pending pods as `provisionable_pod` finds them: the cache's pod under the key.
        fn listed<'c>(cache: &'c Cache, key: &'c str) -> impl Fn(&str) -> Option<&'c Arc<Pod>> {
            move |k| cache.pod(key).filter(|_| k == key)
        }
        let on = |n: &str| -> BTreeMap<String, String> { [(key.clone(), n.to_string())].into() };
        // Each review made both ways, from the pods the cache says changed since the last and
        // over every launch, to the same end.
        let mut seen: Option<u64> = None;
        let mut review = |g: &mut LaunchedFor, cache: &Cache, now: f64| {
            let changed: Option<Vec<&str>> = seen
                .and_then(|at| cache.pods_changed_since(at))
                .map(Iterator::collect);
            seen = Some(cache.pod_journal_end());
            let mut everything = g.clone();
            everything.review(cache, listed(cache, &key), None, now);
            g.review(cache, listed(cache, &key), changed.as_deref(), now);
            assert_eq!(format!("{g:?}"), format!("{everything:?}"), "at {now}");
        };
        put(&mut cache, pod("p1"));
        put(&mut cache, node("n1"));
        put(&mut cache, claim("c1", "n1", Some(100.0)));
        let mut g = LaunchedFor::default();
        g.launched(&key, "p1", "c1");
        review(&mut g, &cache, 110.0);
        assert!(
            g.judge(&cache, &on("n1"), 110.0).is_empty(),
            "within the grace"
        );
        review(&mut g, &cache, 131.0);
        let notes = g.judge(&cache, &on("n1"), 131.0);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].1.contains("volume node affinity conflict"),
            "{notes:?}"
        );
        assert!(!g.holds(&key), "one strike");
        // A second node, in flight: no judgement until it is up.
        put(&mut cache, node("n2"));
        put(&mut cache, claim("c2", "n2", None));
        g.launched(&key, "p1", "c2");
        review(&mut g, &cache, 140.0);
        assert!(g.judge(&cache, &on("n1"), 140.0).is_empty());
        put(&mut cache, claim("c2", "n2", Some(150.0)));
        review(&mut g, &cache, 181.0);
        // Sent elsewhere by the plan (its room taken, say): no strike.
        let mut sent_elsewhere = g.clone();
        assert!(sent_elsewhere.judge(&cache, &on("n1"), 181.0).is_empty());
        assert!(!sent_elsewhere.holds(&key));
        let notes = g.judge(&cache, &on("n2"), 181.0);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[1].1.contains("no further node"), "{notes:?}");
        assert!(g.holds(&key));
        review(&mut g, &cache, 300.0);
        assert!(g.holds(&key), "held");
        // The pod is recreated (a new uid): the hold ends.
        put(&mut cache, pod("p2"));
        review(&mut g, &cache, 310.0);
        assert!(!g.holds(&key));
        // And a hold ends after HOLD.
        let mut h = LaunchedFor::default();
        h.held
            .insert(key.clone(), ("p2".into(), pools_fingerprint(&cache), 0.0));
        review(&mut h, &cache, HOLD - 1.0);
        assert!(h.holds(&key));
        review(&mut h, &cache, HOLD);
        assert!(!h.holds(&key));
    }

    #[test]
    fn pods_of_deleting_nodes_neither_hold_back_nor_hurry_the_pending_pods_plan() {
        // (pending pods, moving pods) each second.
        let pending = [0, 2, 2, 3, 3, 3, 0, 0, 0, 0];
        let moving = [0, 1, 0, 4, 1, 0, 2, 2, 2, 0];
        let alone = {
            let mut p = Provisioner::default();
            (0..pending.len())
                .map(|t| p.due(t as f64, pending[t], 0, 1.0, 10.0))
                .collect::<Vec<_>>()
        };
        let mut p = Provisioner::default();
        let with: Vec<bool> = (0..pending.len())
            .map(|t| p.due(t as f64, pending[t], moving[t], 1.0, 10.0))
            .collect();
        for t in 0..pending.len() {
            if pending[t] > 0 {
                assert_eq!(with[t], alone[t], "second {t}");
            }
        }
        // With nothing pending, the moving pods get a plan once stable for the idle second.
        assert_eq!(&with[6..], [false, true, false, false]);
    }

    #[test]
    fn the_batch_closes_after_an_idle_second_or_at_its_maximum_age() {
        // (now, pending, due) with idle 1 s and max 10 s.
        let cases = [
            (0.0, 3, false),
            (0.5, 3, false),
            (1.0, 3, true),
            (2.0, 0, false),
            (3.0, 1, false),
            (3.5, 2, false),
            (4.0, 3, false),
            (4.5, 4, false),
            (5.0, 5, false),
            (13.0, 6, true),
        ];
        let mut b = Batch::default();
        for (now, pending, want) in cases {
            assert_eq!(
                b.due(now, pending, 1.0, 10.0),
                want,
                "at {now} with {pending}"
            );
        }
    }
}
