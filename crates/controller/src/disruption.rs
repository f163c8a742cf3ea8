//! Disruption: every `disruption_interval`, once the cluster has settled, run the engine
//! (`disrupt::evaluate`), hold a consolidation for `validation_delay` and carry it out only if
//! the engine still proposes it, then: taint the candidates, launch the replacements, and once
//! they are initialized, terminate the candidates. A disruption whose replacements fail is
//! aborted (taints off, replacements deleted). Disrupted taints nobody is acting on (a
//! deposed leader's, a half-done command's) are removed.

use crate::Action;
use crate::api::{ClusterApi, EventType, Kind};
use crate::catalog::instance_types;
use crate::context::Ctx;
use capstan_cloud::CloudProvider;
use capstan_disrupt::{Command, NodeInfo, PodFacts, Replacement, Target};
use capstan_model::disruption::Reason;
use capstan_model::labels::{self, DISRUPTED_TAINT};
use capstan_model::pdb::Pdb;
use capstan_model::{InstanceType, Node, NodeClaim, NodePool, Pod, Requirement};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A command being carried out.
#[derive(Clone, Debug)]
pub(crate) struct InProgress {
    reason: Reason,
    candidates: Vec<String>,
    /// Replacement claim names.
    replacements: Vec<String>,
    started: f64,
}

/// A command waiting out its validation delay.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposed {
    pub reason: Reason,
    pub candidates: Vec<String>,
    pub at: f64,
}

/// What to do with the engine's first command.
#[derive(Clone, Debug, PartialEq)]
pub enum Validation {
    /// Carry it out now.
    Execute,
    /// It is proposed and still waiting out the delay.
    Wait,
    /// Propose it (and wait).
    Propose(Proposed),
}

/// Consolidations (empty and underutilized) wait `delay` seconds as proposals and are carried
/// out only if the engine proposes the same command again after the wait; the rest go now.
pub fn validate(proposed: Option<&Proposed>, cmd: &Command, now: f64, delay: f64) -> Validation {
    if !matches!(cmd.reason, Reason::Underutilized | Reason::Empty) {
        return Validation::Execute;
    }
    match proposed {
        Some(p) if p.reason == cmd.reason && p.candidates == cmd.candidates => {
            if now - p.at >= delay {
                Validation::Execute
            } else {
                Validation::Wait
            }
        }
        _ => Validation::Propose(Proposed {
            reason: cmd.reason,
            candidates: cmd.candidates.clone(),
            at: now,
        }),
    }
}

/// What the disruption engine reads, owned (built from the cache).
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    pub nodes: Vec<NodeInfo>,
    pub pods: Vec<Arc<Pod>>,
    /// Per pod: its node's index in `nodes` (when the node is in the cache).
    pub pod_nodes: Vec<Option<usize>>,
    /// Per pod: the PDBs (indexes in `pdbs`) that select it, as the cache keeps them.
    pub pod_pdbs: Vec<Arc<[usize]>>,
    /// Per pod: what the engine's first pass reads of it.
    pub pod_facts: Vec<PodFacts>,
    pub pdbs: Vec<Pdb>,
    pub nodepools: Vec<NodePool>,
    pub daemonsets: Vec<Pod>,
    pub spot_to_spot: bool,
    pub ignore_preferences: bool,
}

impl Inputs {
    /// All but the nodes and pods: read from the cache and the configuration each time.
    fn rest<A: ClusterApi, C: CloudProvider>(cx: &Ctx<'_, A, C>) -> Inputs {
        let cache = cx.cache();
        Inputs {
            pdbs: cache.pdbs().map(|p| Pdb::clone(p)).collect(),
            nodepools: cache.nodepool_list(),
            daemonsets: cache.daemonsets().map(|p| Pod::clone(p)).collect(),
            spot_to_spot: cx.config.spot_to_spot_consolidation,
            ignore_preferences: cx.config.ignore_preferences,
            ..Inputs::default()
        }
    }

    /// Everything the engine reads, comparable: each node as it prints, and the pods by
    /// address (the cache's own `Arc`s) with their nodes and PDBs.
    #[allow(clippy::type_complexity)]
    fn fingerprint(
        &self,
    ) -> (
        Vec<String>,
        Vec<usize>,
        &[Option<usize>],
        Vec<&[usize]>,
        &[PodFacts],
    ) {
        (
            self.nodes.iter().map(|n| format!("{n:?}")).collect(),
            self.pods.iter().map(|p| Arc::as_ptr(p) as usize).collect(),
            &self.pod_nodes,
            self.pod_pdbs.iter().map(|b| &b[..]).collect(),
            &self.pod_facts,
        )
    }

    pub fn input<'a>(
        &'a self,
        types: &'a [InstanceType],
        now_unix: f64,
    ) -> capstan_disrupt::Input<'a> {
        capstan_disrupt::Input {
            nodes: &self.nodes,
            pods: &self.pods,
            pdbs: &self.pdbs,
            nodepools: &self.nodepools,
            instance_types: types,
            daemonsets: &self.daemonsets,
            now: now_unix,
            spot_to_spot: self.spot_to_spot,
            ignore_preferences: self.ignore_preferences,
            known: Some(capstan_disrupt::Known {
                node: &self.pod_nodes,
                pdbs: &self.pod_pdbs,
                facts: Some(&self.pod_facts),
            }),
        }
    }
}

/// The engine's view of the cluster: every node priced from its claim (or the catalog),
/// claims not yet initialized counted as NotReady, claims being deleted as cordoned. Kept
/// between evaluations: each call rebuilds only the nodes whose Node or NodeClaim object
/// changed (and prices the rest again when the instance types did) and the pods of nodes
/// whose pods changed ([`crate::cache::NodePods::version`]); the rest are moved over, not copied.
#[derive(Debug, Default)]
pub(crate) struct KeptInputs {
    inputs: Inputs,
    /// Per entry of `inputs.nodes`: the cache's Node and NodeClaim it was built from (held,
    /// so an address compared is never one reused).
    from: Vec<(Arc<Node>, Option<Arc<NodeClaim>>)>,
    /// The instance types `inputs.nodes` were priced with.
    types: Vec<InstanceType>,
    /// Per node with pods, in name order as `inputs.pods` holds them: its name, the cache's
    /// version of its pods, how many.
    chunks: Vec<(String, u64, usize)>,
}

impl KeptInputs {
    /// The inputs for the cluster as the cache has it now.
    pub fn refresh<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &Ctx<'_, A, C>,
        types: &[InstanceType],
    ) -> &Inputs {
        let cache = cx.cache();
        let epoch = cx.config.epoch_unix;
        // New instance types (offerings and prices change): the nodes kept are priced again,
        // and looked up again unless the types are listed as before.
        let types_changed = self.types != types;
        let same_listing = self.types.len() == types.len()
            && self.types.iter().zip(types).all(|(a, b)| {
                a.name == b.name && a.labels.get(labels::NODEPOOL) == b.labels.get(labels::NODEPOOL)
            });
        if types_changed {
            self.types = types.to_vec();
        }
        let mut nodes = Vec::with_capacity(cache.node_count());
        let mut from = Vec::with_capacity(cache.node_count());
        let mut old = std::mem::take(&mut self.inputs.nodes)
            .into_iter()
            .zip(std::mem::take(&mut self.from))
            .peekable();
        for (n, claim, _) in cache.nodes_with_claims_and_pods() {
            // The same Node object has the same name: most nodes are, without comparing it.
            while old
                .next_if(|(i, _)| !Arc::ptr_eq(&i.node, n) && i.node.name < n.name)
                .is_some()
            {}
            let kept = old
                .next_if(|(i, _)| Arc::ptr_eq(&i.node, n) || i.node.name == n.name)
                .filter(|(_, (node, c))| {
                    Arc::ptr_eq(node, n)
                        && match (c, claim) {
                            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                            (a, b) => a.is_none() && b.is_none(),
                        }
                });
            let kept = kept.map(|(mut info, built_from)| {
                if types_changed {
                    info.price_from(types, same_listing);
                    if let Some(c) = claim {
                        info.claim_price(c);
                    }
                }
                (info, built_from)
            });
            let (mut info, built_from) = kept.unwrap_or_else(|| {
                let mut info = NodeInfo::from_node(n.clone(), types);
                match claim {
                    Some(c) => info.apply_claim(c, epoch),
                    None => info.nodepool = None,
                }
                (info, (n.clone(), claim.cloned()))
            });
            // What changes while the Node and its NodeClaim do not.
            info.last_pod_event = claim
                .and_then(|_| cx.s.pod_events.last(&n.name))
                .map(|t| epoch + t);
            info.provider_drift = claim
                .and_then(|c| c.status.provider_id.as_ref())
                .and_then(|pid| cx.s.provider_drift.get(pid).cloned());
            // Whether its type is still offered is not known while the provider cannot list
            // the NodePool's types (or before the first listing).
            info.types_unknown = types.is_empty()
                || info
                    .nodepool
                    .as_ref()
                    .is_some_and(|p| cx.s.catalog.failed(p).is_some());
            nodes.push(info);
            from.push(built_from);
        }
        drop(old);
        // The pods grouped by node in name order, as the nodes are: each pod's node index by
        // walking the two together.
        let most = cache.pod_count();
        let mut pods = Vec::with_capacity(most);
        let mut pod_nodes = Vec::with_capacity(most);
        let mut pod_pdbs = Vec::with_capacity(most);
        let mut chunks = Vec::with_capacity(self.chunks.len());
        let mut old_chunks = std::mem::take(&mut self.chunks).into_iter().peekable();
        let mut pod_facts = Vec::with_capacity(most);
        let mut old_pods = std::mem::take(&mut self.inputs.pods)
            .into_iter()
            .zip(std::mem::take(&mut self.inputs.pod_pdbs))
            .zip(std::mem::take(&mut self.inputs.pod_facts));
        let skip = |old: &mut dyn Iterator<Item = _>, len: usize| {
            if len > 0 {
                old.nth(len - 1);
            }
        };
        let mut at = 0;
        for (node, on) in cache.pods_by_node() {
            // A pod list's version is handed out once, so a chunk of the same version is the
            // same node's: most are, without comparing names.
            let version = on.version();
            while let Some((_, _, len)) =
                old_chunks.next_if(|(n, v, _)| *v != version && n.as_str() < node)
            {
                skip(&mut old_pods, len);
            }
            let name = match old_chunks.next_if(|(n, v, _)| *v == version || n == node) {
                Some((n, version, len)) if version == on.version() && len == on.len() => {
                    for ((p, b), f) in old_pods.by_ref().take(len) {
                        pods.push(p);
                        pod_pdbs.push(b);
                        pod_facts.push(f);
                    }
                    n
                }
                was => {
                    let name = match was {
                        Some((n, _, len)) => {
                            skip(&mut old_pods, len);
                            n
                        }
                        None => node.to_string(),
                    };
                    for (p, b) in on.pods_with_pdbs() {
                        pods.push(p.clone());
                        pod_pdbs.push(b.clone());
                        pod_facts.push(PodFacts::of(p));
                    }
                    name
                }
            };
            while at < nodes.len() && nodes[at].node.name.as_str() < node {
                at += 1;
            }
            let index = (at < nodes.len() && nodes[at].node.name == node).then_some(at);
            pod_nodes.extend(std::iter::repeat_n(index, on.len()));
            chunks.push((name, on.version(), on.len()));
        }
        drop(old_chunks);
        self.chunks = chunks;
        self.from = from;
        self.inputs = Inputs {
            nodes,
            pods,
            pod_nodes,
            pod_pdbs,
            pod_facts,
            ..Inputs::rest(cx)
        };
        debug_assert_eq!(
            self.inputs.fingerprint(),
            inputs(cx, types).fingerprint(),
            "the kept inputs differ from ones built from scratch"
        );
        &self.inputs
    }
}

/// [`KeptInputs::refresh`] from nothing, as it was done before the inputs were kept: the
/// debug builds' check of every refresh.
fn inputs<A: ClusterApi, C: CloudProvider>(cx: &Ctx<'_, A, C>, types: &[InstanceType]) -> Inputs {
    let cache = cx.cache();
    let mut nodes = Vec::with_capacity(cache.node_count());
    for n in cache.nodes() {
        let claim = cache.claim_of_node(n);
        let mut info = NodeInfo::from_node(n.clone(), types);
        match claim {
            Some(c) => {
                info.apply_claim(c, cx.config.epoch_unix);
                info.last_pod_event =
                    cx.s.pod_events
                        .last(&n.name)
                        .map(|t| cx.config.epoch_unix + t);
                if let Some(pid) = &c.status.provider_id {
                    info.provider_drift = cx.s.provider_drift.get(pid).cloned();
                }
            }
            None => info.nodepool = None,
        }
        // Whether its type is still offered is not known while the provider cannot list the
        // NodePool's types (or before the first listing).
        info.types_unknown = types.is_empty()
            || info
                .nodepool
                .as_ref()
                .is_some_and(|p| cx.s.catalog.failed(p).is_some());
        nodes.push(info);
    }
    // The pods grouped by node in name order, as the nodes are: each pod's node index by
    // walking the two together.
    let most = cache.pod_count();
    let mut pods = Vec::with_capacity(most);
    let mut pod_nodes = Vec::with_capacity(most);
    let mut pod_pdbs = Vec::with_capacity(most);
    let mut at = 0;
    let mut last: Option<(&str, Option<usize>)> = None;
    for (node, pod, pdbs) in cache.bound_pods_with_pdbs() {
        let index = match last {
            Some((n, i)) if std::ptr::eq(n, node) => i,
            _ => {
                while at < nodes.len() && nodes[at].node.name.as_str() < node {
                    at += 1;
                }
                let i = (at < nodes.len() && nodes[at].node.name == node).then_some(at);
                last = Some((node, i));
                i
            }
        };
        pods.push(pod.clone());
        pod_nodes.push(index);
        pod_pdbs.push(pdbs.clone());
    }
    let pod_facts = pods.iter().map(|p| PodFacts::of(p)).collect();
    Inputs {
        nodes,
        pods,
        pod_nodes,
        pod_pdbs,
        pod_facts,
        ..Inputs::rest(cx)
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Disruption {
    in_progress: Option<InProgress>,
    proposed: Option<Proposed>,
    next_at: f64,
    /// After an evaluation that found nothing: the cache generation and when.
    quiet: Option<(u64, f64)>,
}

/// When each node last had a pod bound or removed, from the cache's pods per node (sampled
/// at each disruption pass). A node first seen counts from then: after a failover,
/// `consolidateAfter` starts again rather than early.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodEvents {
    /// The cache's pod generation when last sampled.
    seen: Option<u64>,
    /// Node → (the cache's fingerprint of its pods, clock seconds it last changed). Hashed:
    /// looked up per node, never iterated in an order that matters.
    nodes: std::collections::HashMap<String, (u64, f64), foldhash::fast::FixedState>,
}

impl PodEvents {
    pub fn sample(&mut self, cache: &crate::Cache, now: f64) {
        let generation = cache.counters().pod_generation + cache.counters().node_generation;
        if self.seen == Some(generation) {
            return;
        }
        self.seen = Some(generation);
        for (n, on) in cache.nodes_with_pods() {
            let h = on.map_or(0, |on| on.fingerprint());
            match self.nodes.get_mut(n.name.as_str()) {
                Some((old, since)) => {
                    if *old != h {
                        *old = h;
                        *since = now;
                    }
                }
                None => {
                    self.nodes.insert(n.name.clone(), (h, now));
                }
            }
        }
        if self.nodes.len() != cache.node_count() {
            self.nodes.retain(|n, _| cache.node(n).is_some());
        }
    }

    /// Clock seconds of the node's last pod event (or first sighting).
    pub fn last(&self, node: &str) -> Option<f64> {
        self.nodes.get(node).map(|&(_, t)| t)
    }
}

impl Disruption {
    #[cfg(test)]
    pub fn proposed(&self) -> Option<&Proposed> {
        self.proposed.as_ref()
    }

    pub fn busy(&self) -> bool {
        self.in_progress.is_some()
    }

    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) {
        if now < self.next_at {
            return;
        }
        self.next_at = now + cx.config.disruption_interval;
        cx.s.pod_events.sample(&cx.s.cache, now);
        if let Some(ip) = self.in_progress.clone() {
            self.advance(cx, now, ip).await;
            return;
        }
        self.clean_up_taints(cx).await;
        self.report_invalid(cx).await;
        // Settle first (the loops run only on a synced cache): no disruption while machines
        // are coming up or pods wait for a launch. Pods the last plan found no place for do
        // not wait for anything, so they hold up nothing.
        let busy = crate::provisioning::provisionable_pods(cx.cache(), cx.config, &cx.s.nominated)
            .any(|(k, _)| !cx.s.unservable.contains(k))
            || cx
                .cache()
                .claims()
                .any(|c| !c.status.initialized() && !c.deleting());
        if busy {
            self.proposed = None;
            return;
        }
        // After an evaluation that found nothing, wait for a node-level change (nodes,
        // claims, NodePools, PDBs) or `quiet_interval`, whichever is first: pod churn alone
        // (the HPA moving replicas) is picked up at the next interval, and time-based methods
        // (expiry, consolidateAfter, budget windows) at most that late.
        if let Some((g, since)) = self.quiet {
            if g == cx.cache().generation() && now - since < cx.config.quiet_interval {
                return;
            }
        }
        let types = instance_types(cx, now).await;
        // Taken out while the engine reads it (the loop goes on with `cx`), put back below.
        let mut kept = std::mem::take(&mut cx.s.disruption_inputs);
        let d = kept.refresh(cx, &types);
        cx.s.work.evaluated = Some(d.nodes.len());
        let started = cx.clock.now();
        let eval = capstan_disrupt::evaluate(d.input(&types, cx.config.epoch_unix + now));
        cx.s.metrics.evaluated(
            cx.clock.now().saturating_sub(started).as_secs_f64(),
            &eval.eligible,
        );
        self.report_blocked(cx, &eval.blocked).await;
        tracing::debug!(
            now,
            commands = eval.commands.len(),
            first = ?eval.commands.first().map(|c| (c.reason, c.candidates.clone())),
            "disruption evaluation"
        );
        let Some(mut cmd) = eval.commands.into_iter().next() else {
            cx.s.disruption_inputs = kept;
            self.proposed = None;
            self.quiet = Some((cx.cache().generation(), now));
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
        cx.s.disruption_inputs = kept;
        match validate(
            self.proposed.as_ref(),
            &cmd,
            now,
            cx.config.validation_delay,
        ) {
            Validation::Execute => {
                self.proposed = None;
                self.execute(cx, now, &cmd, &types).await;
            }
            Validation::Wait => {}
            Validation::Propose(p) => self.proposed = Some(p),
        }
    }

    /// Carries out a command: taint the candidates, launch replacements; the candidates are
    /// terminated once the replacements are initialized.
    pub async fn execute<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        cmd: &Command,
        types: &[InstanceType],
    ) {
        if cmd.reason.budgeted() {
            if let Err(why) = budget_holds(cx, cmd, now).await {
                tracing::info!(reason = ?cmd.reason, candidates = ?cmd.candidates, %why,
                    "disruption not started: the budget no longer holds");
                return;
            }
        }
        for node in &cmd.candidates {
            if !cx.set_disrupted_taint(node, true).await {
                // Could not claim every candidate (a conflict or a lost lease): undo.
                for n in &cmd.candidates {
                    cx.set_disrupted_taint(n, false).await;
                }
                return;
            }
        }
        let mut replacements = Vec::new();
        for r in &cmd.replacements {
            match launch_replacement(cx, cmd.reason, r, types).await {
                Some(name) => replacements.push(name),
                None => {
                    for n in &cmd.candidates {
                        cx.set_disrupted_taint(n, false).await;
                    }
                    return;
                }
            }
        }
        // Pods the command moves onto replacements are planned there.
        for m in &cmd.moves {
            if let Target::Replacement(k) = &m.to {
                if let Some(name) = replacements.get(*k) {
                    cx.s.nominations.insert(m.pod.clone(), name.clone(), ());
                }
            }
        }
        let decision = if replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        // Voluntary decisions only (Karpenter counts expiry as forceful, not here).
        if cmd.reason.budgeted() {
            cx.s.metrics
                .decisions
                .with_label_values(&[
                    decision,
                    &cmd.reason.cli_name(),
                    crate::metrics::consolidation_type(cmd.reason, cmd.candidates.len()),
                ])
                .inc();
        }
        cx.record(
            now,
            Action::Disrupting {
                reason: cmd.reason,
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
        self.advance(cx, now, ip).await;
    }

    async fn advance<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        ip: InProgress,
    ) {
        let mut ready = true;
        for r in &ip.replacements {
            match cx.cache().claim(r) {
                Some(c) if c.status.initialized() => {}
                Some(c) if !c.deleting() => ready = false,
                _ => {
                    self.abort(cx, now, &ip, "a replacement failed to launch")
                        .await;
                    return;
                }
            }
        }
        if !ready {
            if now - ip.started > cx.config.replacement_timeout {
                self.abort(cx, now, &ip, "replacements did not initialize in time")
                    .await;
            }
            return;
        }
        for node in &ip.candidates {
            let claim = cx
                .cache()
                .node(node)
                .and_then(|n| cx.cache().claim_of_node(n))
                .map(|c| c.name.clone());
            if let Some(claim) = claim {
                cx.begin_deletion(&claim, ip.reason, None).await;
            }
        }
        self.in_progress = None;
    }

    async fn abort<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        ip: &InProgress,
        why: &str,
    ) {
        for n in &ip.candidates {
            cx.set_disrupted_taint(n, false).await;
        }
        for r in &ip.replacements {
            if cx.cache().claim(r).is_some() {
                cx.begin_deletion(r, Reason::DisruptionAborted, None).await;
            }
        }
        cx.record(
            now,
            Action::DisruptionAborted {
                candidates: ip.candidates.clone(),
                why: why.into(),
            },
        );
        self.in_progress = None;
    }

    /// Removes capstan's disrupted taint from nodes no command is acting on and whose claim is
    /// not being deleted (left by a deposed leader, or a command cut short).
    async fn clean_up_taints<A: ClusterApi, C: CloudProvider>(&mut self, cx: &mut Ctx<'_, A, C>) {
        let stray: Vec<String> = cx
            .cache()
            .nodes()
            .filter(|n| n.taints.iter().any(|t| t.key == DISRUPTED_TAINT))
            .filter(|n| cx.cache().claim_of_node(n).is_none_or(|c| !c.deleting()))
            .map(|n| n.name.clone())
            .collect();
        for node in stray {
            cx.set_disrupted_taint(&node, false).await;
        }
    }

    /// Says once per node and reason, as a Normal Event on the node and on its NodeClaim,
    /// what keeps a node that a disruption method applies to from being disrupted (the PDB,
    /// the do-not-disrupt pod or annotation, the budget) — Karpenter's `DisruptionBlocked`.
    async fn report_blocked<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        blocked: &[capstan_disrupt::Blocked],
    ) {
        for b in blocked {
            if b.reason.starts_with("already disrupting") {
                continue;
            }
            let claim = cx
                .cache()
                .node(&b.node)
                .and_then(|n| cx.cache().claim_of_node(n))
                .map(|c| c.name.clone());
            let note = format!("Cannot disrupt Node: {}", b.reason);
            cx.once(
                (Kind::Node, b.node.clone()),
                EventType::Normal,
                "DisruptionBlocked",
                note.clone(),
            )
            .await;
            if let Some(c) = claim {
                cx.once(
                    (Kind::NodeClaim, c),
                    EventType::Normal,
                    "DisruptionBlocked",
                    note,
                )
                .await;
            }
        }
    }

    /// Says once, as an Event, why a NodePool allows no disruption or an object was refused.
    async fn report_invalid<A: ClusterApi, C: CloudProvider>(&mut self, cx: &mut Ctx<'_, A, C>) {
        let mut notes: Vec<((Kind, String), &str, String)> = Vec::new();
        for p in cx.cache().nodepools() {
            if let Some(e) = p.budgets.error() {
                notes.push((
                    (Kind::NodePool, p.name.clone()),
                    "InvalidDisruptionBudgets",
                    format!("no disruption until the budgets compile: {e}"),
                ));
            }
        }
        for i in cx.cache().invalid() {
            notes.push(((i.kind, i.key.clone()), "InvalidObject", i.error.clone()));
        }
        for (regarding, reason, note) in notes {
            cx.warn_once(regarding, reason, note).await;
        }
    }
}

/// Checks a budgeted command against the nodes as the API server holds them now, not as the
/// cache last saw them: a process that was frozen, or whose watch lags, may hold a cache in
/// which nodes interrupted or cordoned meanwhile are still healthy. One LIST of Nodes per
/// command started; a failed read starts nothing.
async fn budget_holds<A: ClusterApi, C: CloudProvider>(
    cx: &Ctx<'_, A, C>,
    cmd: &Command,
    now: f64,
) -> Result<(), String> {
    let listing = cx
        .api
        .list(Kind::Node)
        .await
        .map_err(|e| format!("listing nodes: {e}"))?;
    let nodes: Vec<Arc<capstan_model::Node>> = listing
        .objects
        .into_iter()
        .filter_map(|(_, o)| match o {
            crate::api::Object::Node(n) => Some(n),
            _ => None,
        })
        .collect();
    let mut wanted: BTreeMap<String, i64> = BTreeMap::new();
    for c in &cmd.candidates {
        let n = nodes
            .iter()
            .find(|n| n.name == *c)
            .ok_or_else(|| format!("node {c} is gone"))?;
        if n.is_disrupting() {
            return Err(format!("node {c} is already disrupting"));
        }
        if let Some(pool) = n.labels.get(labels::NODEPOOL) {
            *wanted.entry(pool.clone()).or_default() += 1;
        }
    }
    for (pool, want) in wanted {
        let Some(np) = cx.cache().nodepool(&pool) else {
            return Err(format!("nodepool {pool} is gone"));
        };
        // Karpenter's count: initialized nodes make the total; NotReady and going ones (a
        // deleting claim too) use it up; a cordon does not.
        let (total, disrupting) = nodes
            .iter()
            .filter(|n| n.labels.get(labels::NODEPOOL) == Some(&pool) && n.labelled_initialized())
            .fold((0i64, 0i64), |(t, d), n| {
                let going = cx.cache().claim_of_node(n).is_some_and(|c| c.deleting());
                (t + 1, d + i64::from(n.budget_disrupting() || going))
            });
        let allowed = np
            .budgets
            .allows(cmd.reason, total, cx.config.epoch_unix + now);
        if allowed != i64::MAX && disrupting + want > allowed {
            return Err(format!(
                "nodepool {pool}: {disrupting} nodes disrupting and {want} more would exceed the {allowed} its budget allows"
            ));
        }
    }
    Ok(())
}

/// Creates the claim for a replacement: the pool's requirements pinned to the chosen type,
/// zone and capacity type — or, spot to spot, the planned claim's requirements over its
/// (15) cheapest spot types, for the cloud to choose among.
pub(crate) async fn launch_replacement<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    reason: Reason,
    r: &Replacement,
    types: &[InstanceType],
) -> Option<String> {
    let pool = cx.cache().nodepool(&r.nodepool)?.clone();
    let t = types.get(r.instance_type)?;
    if !r.spot_options.is_empty() {
        let names: Vec<String> = r
            .spot_options
            .iter()
            .filter_map(|&k| types.get(k))
            .map(|t| t.name.clone())
            .collect();
        let mut reqs = pool.requirements.intersect(&r.requirements);
        reqs.add(Requirement::in_values(
            labels::INSTANCE_TYPE,
            names.iter().cloned(),
        ));
        reqs.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_SPOT.to_string()],
        ));
        return cx
            .create_claim(
                &reason.cli_name(),
                &pool,
                reqs,
                names,
                t.allocatable.clone(),
                r.warm,
            )
            .await;
    }
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
    cx.create_claim(
        &reason.cli_name(),
        &pool,
        reqs,
        vec![t.name.clone()],
        t.allocatable.clone(),
        r.warm,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(reason: Reason, candidates: &[&str]) -> Command {
        Command {
            reason,
            candidates: candidates.iter().map(|s| s.to_string()).collect(),
            replacements: vec![],
            moves: vec![],
            savings: 1.0,
            drain: vec![],
            drain_seconds: 0.0,
        }
    }

    #[test]
    fn kept_inputs_equal_inputs_built_from_scratch_as_nodes_claims_pods_pdbs_and_prices_change() {
        use crate::api::{Change, Meta, Object};
        use capstan_model::NodeClaim;
        use rand::SeedableRng;
        let clock = capstan_cloud::ManualClock::new();
        let shared: Arc<dyn capstan_cloud::Clock> = Arc::new(clock);
        let api = crate::memory::InMemoryApi::new(shared.clone()).client("t");
        let catalog = capstan_fake_cloud::testkit::small_catalog();
        let cloud =
            capstan_fake_cloud::FakeCloud::new(Default::default(), catalog.clone(), shared.clone());
        let config = crate::Config::default();
        let mut s = crate::context::Shared::new(rand_chacha::ChaCha8Rng::seed_from_u64(1));
        let types = catalog.instance_types;
        let node = |name: &str, t: usize| {
            let mut n = Node::for_instance_type(&types[t], name, "us-east-1a", "on-demand", "p");
            n.provider_id = Some(format!("fake://{name}"));
            Object::Node(Arc::new(n))
        };
        let claim = |name: &str, node: &str, price: f64| {
            let mut c = NodeClaim {
                name: name.into(),
                ..Default::default()
            };
            c.status.provider_id = Some(format!("fake://{node}"));
            c.status.node_name = Some(node.into());
            c.status.price = price;
            Object::NodeClaim(Arc::new(c))
        };
        let pod = |name: &str, node: &str, app: &str| {
            let mut p = Pod {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                node_name: Some(node.into()),
                phase: capstan_model::pod::PodPhase::Running,
                ..Default::default()
            };
            p.labels.insert("app".into(), app.into());
            Object::Pod(Arc::new(p))
        };
        let pdb = |app: &str| {
            let labels = BTreeMap::from([("app".to_string(), app.to_string())]);
            Object::Pdb(Arc::new(Pdb {
                namespace: "default".into(),
                name: format!("b-{app}"),
                selector: Some(capstan_model::selector::LabelSelector::from_match_labels(
                    &labels,
                )),
                min_available: None,
                max_unavailable: None,
                always_allow_unhealthy: false,
            }))
        };
        let cheaper = |mut types: Vec<InstanceType>| {
            for o in &mut types[0].offerings {
                o.price /= 2.0;
            }
            types
        };
        let put = |o: Object| Change::Applied(Meta::default(), o);
        let gone = |kind: Kind, key: &str| Change::Deleted(kind, key.to_string());
        // (what the step does, the changes, the instance types after it)
        let steps: Vec<(&str, Vec<Change>, Vec<InstanceType>)> = vec![
            (
                "two nodes, one with a claim, and their pods",
                vec![
                    put(node("n1", 0)),
                    put(node("n2", 1)),
                    put(claim("c1", "n1", 0.5)),
                    put(pod("a", "n1", "web")),
                    put(pod("b", "n1", "batch")),
                    put(pod("c", "n2", "web")),
                ],
                types.clone(),
            ),
            ("nothing", vec![], types.clone()),
            (
                "a pod more on n2",
                vec![put(pod("d", "n2", "web"))],
                types.clone(),
            ),
            (
                "n1's claim repriced",
                vec![put(claim("c1", "n1", 0.25))],
                types.clone(),
            ),
            (
                "n2 gets a claim",
                vec![put(claim("c2", "n2", 0.0))],
                types.clone(),
            ),
            (
                "offerings repriced, listed as before",
                vec![],
                cheaper(types.clone()),
            ),
            (
                "a type fewer: listed otherwise",
                vec![],
                types[1..].to_vec(),
            ),
            ("a PDB for web", vec![put(pdb("web"))], types[1..].to_vec()),
            (
                "a pod leaves n1",
                vec![gone(Kind::Pod, "default/b")],
                types.clone(),
            ),
            (
                "n1 goes, its pods stay bound to it",
                vec![gone(Kind::Node, "n1")],
                types.clone(),
            ),
            ("a node between", vec![put(node("n15", 2))], types.clone()),
            ("c2 goes", vec![gone(Kind::NodeClaim, "c2")], types.clone()),
        ];
        let mut kept = KeptInputs::default();
        for (what, changes, types) in steps {
            for c in changes {
                s.cache.apply(c);
            }
            let cx = Ctx {
                api: &api,
                cloud: &cloud,
                clock: &*shared,
                config: &config,
                s: &mut s,
            };
            let got = kept.refresh(&cx, &types).fingerprint();
            assert_eq!(got, inputs(&cx, &types).fingerprint(), "{what}");
        }
        assert_eq!(kept.inputs.nodes.len(), 2);
        assert_eq!(kept.inputs.pods.len(), 3, "a (its node gone), c and d");
    }

    #[test]
    fn a_pod_bound_or_removed_restarts_the_nodes_pod_event_clock_and_other_changes_do_not() {
        use crate::api::{Change, Meta, Object};
        use capstan_model::Node;
        let meta = |rv: u64| Meta {
            uid: "u".into(),
            resource_version: rv.to_string(),
        };
        let node = Node {
            name: "n1".into(),
            ready: true,
            ..Default::default()
        };
        let pod = |name: &str, on: Option<&str>, phase: capstan_model::pod::PodPhase| {
            Object::Pod(Arc::new(Pod {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                node_name: on.map(str::to_string),
                phase,
                ..Default::default()
            }))
        };
        use capstan_model::pod::PodPhase::{Pending, Running, Succeeded};
        let mut cache = crate::Cache::default();
        let mut ev = PodEvents::default();
        cache.apply(Change::Applied(meta(1), Object::Node(Arc::new(node))));
        ev.sample(&cache, 0.0);
        assert_eq!(ev.last("n1"), Some(0.0), "first seen");
        // (what happens, at, the last pod event after it)
        let steps = [
            (
                "a pending pod elsewhere",
                pod("a", None, Pending),
                10.0,
                0.0,
            ),
            ("a bound to n1", pod("a", Some("n1"), Running), 20.0, 20.0),
            (
                "a's status changes, still bound",
                pod("a", Some("n1"), Running),
                30.0,
                20.0,
            ),
            ("b bound to n1", pod("b", Some("n1"), Running), 40.0, 40.0),
            ("b succeeds", pod("b", Some("n1"), Succeeded), 50.0, 50.0),
        ];
        for (i, (what, p, at, want)) in steps.into_iter().enumerate() {
            cache.apply(Change::Applied(meta(10 + i as u64), p));
            ev.sample(&cache, at);
            assert_eq!(ev.last("n1"), Some(want), "{what}");
        }
        cache.apply(Change::Deleted(crate::api::Kind::Pod, "default/a".into()));
        ev.sample(&cache, 60.0);
        assert_eq!(ev.last("n1"), Some(60.0), "a deleted");
    }

    #[test]
    fn consolidations_wait_out_the_validation_delay_and_the_rest_go_at_once() {
        let p = |reason, at| Proposed {
            reason,
            candidates: vec!["a".into()],
            at,
        };
        let empty = cmd(Reason::Empty, &["a"]);
        // (proposed, command, now, expected)
        let cases = [
            (None, cmd(Reason::Drifted, &["a"]), 0.0, "execute"),
            (None, cmd(Reason::Expired, &["a"]), 0.0, "execute"),
            (None, empty.clone(), 0.0, "propose"),
            (Some(p(Reason::Empty, 0.0)), empty.clone(), 14.0, "wait"),
            (Some(p(Reason::Empty, 0.0)), empty.clone(), 15.0, "execute"),
            (
                Some(p(Reason::Underutilized, 0.0)),
                empty.clone(),
                15.0,
                "propose",
            ),
            (
                Some(p(Reason::Empty, 0.0)),
                cmd(Reason::Empty, &["b"]),
                15.0,
                "propose",
            ),
        ];
        for (proposed, c, now, want) in cases {
            let got = match validate(proposed.as_ref(), &c, now, 15.0) {
                Validation::Execute => "execute",
                Validation::Wait => "wait",
                Validation::Propose(_) => "propose",
            };
            assert_eq!(got, want, "{proposed:?} {:?} at {now}", c.reason);
        }
    }
}
