//! kube-scheduler: binds pending pods to ready nodes that have room, with the scheduling
//! core's predicates. Like kube-scheduler's unschedulable queue, a pod that did not fit waits
//! until capacity changes (a node added or changed, a pod leaving a node) or a minute passes,
//! and is marked `PodScheduled=False` (`Unschedulable`): only then does capstan see it.

use crate::Sim;
use capstan_controller::api::{Kind, Object};
use capstan_model::pod::{DEFAULT_SCHEDULER, PodPhase};
use capstan_model::requirements::Requirement;
use capstan_model::{Node, Pod, Resources, labels};
use capstan_sched::Snapshot;
use capstan_sched::predicates::looks_at_other_pods;
use capstan_sched::{SnapshotBuilder, SolveInput, SolveOptions};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// What a scheduling pass did to a node that the view does not show yet: pods deleted (by
/// uid) and pods bound.
#[derive(Clone, Debug, Default)]
struct NodeChange {
    gone: HashSet<String>,
    added: Vec<Arc<Pod>>,
}

type Changes = BTreeMap<String, NodeChange>;

/// kube-scheduler's placement: `pending` onto the snapshot's nodes only (it launches
/// nothing), without the reasons a person would read.
fn solve_on(snapshot: &Snapshot, pending: &[Arc<Pod>]) -> capstan_sched::Plan {
    capstan_sched::solve(
        SolveInput {
            snapshot,
            pending,
            nodepools: &[],
            instance_types: &[],
        },
        &SolveOptions {
            skip_diagnosis: true,
            ..Default::default()
        },
    )
}

impl Sim {
    pub(crate) fn schedule(&mut self, now: f64) {
        if self.view.pending().is_empty() {
            return;
        }
        let counters = self.view.counters();
        let capacity = (counters.node_generation, counters.freed);
        let flush = capacity != self.capacity_seen || now - self.last_flush >= 60.0;
        if flush {
            self.unschedulable.clear();
            self.capacity_seen = capacity;
            self.last_flush = now;
            self.failed.clear();
        }
        // Every pod pending at the last pass was bound there or is waiting out its
        // unschedulable backoff: with no flush, nothing failed since and no pending pod put
        // since, none is left to try, and the pending pods need not be gone over.
        let quiet =
            !flush && self.failed.is_empty() && counters.pending_put == self.pending_put_seen;
        self.pending_put_seen = counters.pending_put;
        if quiet {
            return;
        }
        for p in self.failed.drain(..) {
            self.unschedulable.insert(p.key());
        }
        let pending: Vec<Arc<Pod>> = self
            .view
            .pending()
            .iter()
            .filter(|(k, _)| !self.unschedulable.contains(*k))
            .map(|(_, p)| p)
            .filter(|p| !p.scheduling_gated && p.scheduler() == DEFAULT_SCHEDULER)
            .cloned()
            .collect();
        if pending.is_empty() {
            return;
        }
        let mut pending = pending;
        // kube-scheduler's queue takes the most important pods first: each priority, highest
        // first, is placed (and preempts) before the next sees what room is left.
        let mut levels: Vec<i32> = pending.iter().map(|p| p.priority).collect();
        levels.sort_unstable_by(|a, b| b.cmp(a));
        levels.dedup();
        let headroom = self.sc.nodepools.iter().any(|p| p.headroom.is_some())
            || self.workloads.iter().any(|w| {
                w.forecaster
                    .as_ref()
                    .is_some_and(|f| f.mode == crate::scenario::ForecastMode::Capacity)
            });
        let lowest = self
            .workloads
            .iter()
            .map(|w| w.template.priority)
            .chain(headroom.then_some(capstan_model::headroom::PRIORITY))
            .min();
        // What this pass changed on each node: the view does not show it yet.
        let mut changed: Changes = BTreeMap::new();
        // Pending pods nominated to a node (`status.nominatedNodeName`), those waiting out a
        // backoff too: kube-scheduler's nominator holds their room there.
        let mut nominated: Vec<Arc<Pod>> = self
            .view
            .pending()
            .values()
            .filter(|p| p.nominated_node.is_some())
            .cloned()
            .collect();
        for level in levels {
            let mut pods: Vec<Arc<Pod>> = if pending.iter().all(|p| p.priority == level) {
                std::mem::take(&mut pending)
            } else {
                pending
                    .iter()
                    .filter(|p| p.priority == level)
                    .cloned()
                    .collect()
            };
            if !nominated.is_empty() {
                pods = self.bind_nominated(pods, &mut nominated, &mut changed, now);
                if pods.is_empty() {
                    continue;
                }
            }
            let snapshot = if nominated.iter().any(|p| p.priority >= level) {
                let held = Self::holding(&nominated, level, &pods, &changed);
                self.snapshot(&pods, &held)
            } else {
                self.snapshot(&pods, &changed)
            };
            // No node with room for the smallest pod: none fits, but some may preempt.
            let (placed, unschedulable) = if snapshot.nodes.is_empty() {
                (Vec::new(), (0..pods.len()).collect())
            } else {
                let plan = solve_on(&snapshot, &pods);
                let left: Vec<usize> = plan.unschedulable.iter().map(|u| u.pod).collect();
                (plan.existing, left)
            };
            for b in placed {
                for i in b.pods {
                    let bound = self.bind(&pods[i], &b.node, now);
                    changed.entry(b.node.clone()).or_default().added.push(bound);
                }
            }
            // Nominated pods bound elsewhere (or now preempting) hold no room any more.
            if !nominated.is_empty() {
                let waiting: HashSet<&str> = unschedulable
                    .iter()
                    .map(|&i| pods[i].uid.as_str())
                    .collect();
                let placing: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
                nominated.retain(|p| {
                    !placing.contains(p.uid.as_str()) || waiting.contains(p.uid.as_str())
                });
            }
            // Pods that fit nowhere may preempt lower-priority pods.
            for i in unschedulable {
                let p = &pods[i];
                let may = !p.never_preempts && lowest.is_some_and(|l| p.priority > l);
                if may && self.preempt(p, &mut changed, now) {
                    continue;
                }
                self.failed.push(p.clone());
                self.mark_unschedulable(p);
            }
        }
    }

    /// kube-scheduler tries a nominated pod on its nominated node first: each of `pods` that
    /// is nominated to a ready node where it fits — beside that node's pods and the other
    /// pods nominated there of its priority or higher — is bound there. Returns the rest, to
    /// be placed like any pod (one that fits nowhere loses its nomination with the failure).
    fn bind_nominated(
        &mut self,
        pods: Vec<Arc<Pod>>,
        nominated: &mut Vec<Arc<Pod>>,
        changed: &mut Changes,
        now: f64,
    ) -> Vec<Arc<Pod>> {
        let mut rest = Vec::with_capacity(pods.len());
        for pod in pods {
            let Some(node) = pod
                .nominated_node
                .as_deref()
                .and_then(|n| self.view.node(n))
                .filter(|n| n.ready && !n.unschedulable)
                .cloned()
            else {
                rest.push(pod);
                continue;
            };
            let on: Vec<Arc<Pod>> = self
                .pods_seen(&node.name, changed)
                .filter(|p| p.is_active())
                .chain(nominated.iter().filter(|o| {
                    o.uid != pod.uid
                        && o.priority >= pod.priority
                        && o.nominated_node.as_deref() == Some(node.name.as_str())
                }))
                .cloned()
                .collect();
            if self.fits_on(&pod, &node, &on) {
                nominated.retain(|o| o.uid != pod.uid);
                let bound = self.bind(&pod, &node.name, now);
                changed
                    .entry(node.name.clone())
                    .or_default()
                    .added
                    .push(bound);
            } else {
                rest.push(pod);
            }
        }
        rest
    }

    /// The pods on `node` as this pass sees them: the view's, less those the pass deleted,
    /// and those it bound there.
    fn pods_seen<'a>(
        &'a self,
        node: &'a str,
        changed: &'a Changes,
    ) -> impl Iterator<Item = &'a Arc<Pod>> + 'a {
        let c = changed.get(node);
        self.view
            .pods_on(node)
            .filter(move |p| c.is_none_or(|c| !c.gone.contains(&p.uid)))
            .chain(c.into_iter().flat_map(|c| &c.added))
    }

    /// `changed` with the room of the `nominated` pods of priority `level` or higher held on
    /// their nodes (kube-scheduler's filters see a node with its nominated pods of the pod's
    /// priority or higher added), but for those among `pods`, which are being placed.
    fn holding(
        nominated: &[Arc<Pod>],
        level: i32,
        pods: &[Arc<Pod>],
        changed: &Changes,
    ) -> Changes {
        let placing: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        let mut held = changed.clone();
        for p in nominated
            .iter()
            .filter(|p| p.priority >= level && !placing.contains(p.uid.as_str()))
        {
            let Some(node) = p.nominated_node.clone() else {
                continue;
            };
            let mut on = Pod::clone(p);
            on.node_name = Some(node.clone());
            held.entry(node).or_default().added.push(Arc::new(on));
        }
        held
    }

    /// Every ready node with its pods, as the scheduler sees them for `pending`, with what
    /// this pass `changed` on them.
    fn snapshot(&self, pending: &[Arc<Pod>], changed: &Changes) -> Snapshot {
        let mut b = SnapshotBuilder::new(pending, self.view.repelling() > 0);
        let none = Resources::new();
        for (node, on) in self.view.nodes_with_pods() {
            if !node.ready {
                continue;
            }
            let on_node = || on.into_iter().flat_map(|on| on.pods());
            match changed.get(&node.name) {
                Some(c) => {
                    let pods: Vec<&Arc<Pod>> = on_node()
                        .filter(|p| !c.gone.contains(&p.uid))
                        .chain(c.added.iter())
                        .collect();
                    let mut used = Resources::new();
                    for p in pods.iter().filter(|p| p.is_active()) {
                        used.add(&p.requests);
                    }
                    b.node(node, None, pods, &used);
                }
                None => match on {
                    Some(on) => b.node_summed(node, None, on.pods(), on.used(), on.daemons()),
                    None => b.node(node, None, on_node(), &none),
                },
            }
        }
        b.build()
    }

    /// Binds a pod to a node, as kube-scheduler's binding does, and starts its clock to Ready.
    fn bind(&mut self, pod: &Pod, node: &str, now: f64) -> Arc<Pod> {
        let mut p = pod.clone();
        p.node_name = Some(node.to_string());
        p.nominated_node = None;
        p.phase = PodPhase::Running;
        p.unschedulable = false;
        let key = p.key();
        let mut created = None;
        let mut ramp = false;
        let zone = self
            .view
            .node(node)
            .and_then(|n| n.labels.get(labels::ZONE).cloned());
        if let Some(&w) = self.pods.get(&key) {
            let m = &mut self.members[w];
            if let Some(t) = m.pods.get_mut(&key).filter(|t| t.bound.is_none()) {
                t.bound = Some(now);
                t.zone = zone;
                m.version += 1;
                let startup = self.workloads[w].spec.startup_seconds;
                t.ready_at = Some(now + startup);
                created = Some(t.created);
                ramp = t.ramp;
                tracing::debug!(
                    workload = %self.workloads[w].spec.name,
                    pod = %key,
                    created = t.created,
                    waited = now - t.created,
                    ramp,
                    node,
                    "bound"
                );
                self.becoming_ready
                    .insert(((now + startup).ceil() as u64, key.clone()));
            }
        }
        if let Some(c) = created {
            self.waited(c, ramp, now);
        }
        let p = Arc::new(p);
        self.api.put(Object::Pod(p.clone()));
        p
    }

    /// kube-scheduler's DefaultPreemption for a pod no node has room for. On each ready node
    /// where removing every pod of lower priority (DaemonSet pods aside) lets it fit, the
    /// victims are those pods less the ones it can keep: PDB-protected pods are reprieved
    /// first, then the rest, each most important first, a pod kept whenever the preemptor
    /// still fits. Of the candidates (the first 100), upstream's order picks one: fewest PDB
    /// violations, then the lowest highest victim priority, the smallest sum of victim
    /// priorities, the fewest victims, then the first node. A PDB is best-effort, as upstream:
    /// a node whose victims violate one is chosen only when no other node will do. The victims
    /// are deleted (the simulator's kubelet kills them at once) and the pod is bound there;
    /// their ReplicaSets replace them. Topology spread and pod (anti-)affinity are checked
    /// against the candidate node alone.
    fn preempt(&mut self, pod: &Arc<Pod>, changed: &mut Changes, now: f64) -> bool {
        const CANDIDATES: usize = 100;
        // (PDB violations, highest victim priority, sum of priorities, victims), the order
        // found, the node, the victims.
        type Candidate = ((usize, i32, i64, usize), usize, Arc<Node>, Vec<Arc<Pod>>);
        let mut found: Vec<Candidate> = Vec::new();
        let mut candidates = 0;
        let nodes: Vec<Arc<Node>> = self
            .view
            .nodes()
            .filter(|n| n.ready && !n.unschedulable)
            .cloned()
            .collect();
        for node in nodes {
            let on: Vec<Arc<Pod>> = self.pods_seen(&node.name, changed).cloned().collect();
            let (mut lower, mut keep): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
                on.into_iter().filter(|p| p.is_active()).partition(|p| {
                    p.priority < pod.priority
                        && !p.is_daemonset_pod()
                        && p.deletion_deadline.is_none()
                });
            if lower.is_empty() {
                continue;
            }
            // Enough room of every resource once they are all gone?
            let mut room = node.allocatable.clone();
            room.pods = node.max_pods();
            for p in &keep {
                room.sub(&p.requests);
            }
            if !pod.requests.fits_in(&room) || !self.fits_on(pod, &node, &keep) {
                continue;
            }
            candidates += 1;
            // Most important first: higher priority (then by name, for determinism).
            lower.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
            // Victims whose PDBs would go below zero, counting each as it is taken.
            let mut left: BTreeMap<String, i64> = BTreeMap::new();
            let mut violating = Vec::new();
            let mut rest = Vec::new();
            for v in lower {
                let mut violates = false;
                for (pdb, n) in self.api.pdb_allowances(&v) {
                    let a = left.entry(pdb).or_insert(n);
                    *a -= 1;
                    violates |= *a < 0;
                }
                if violates {
                    violating.push(v);
                } else {
                    rest.push(v);
                }
            }
            let mut victims = Vec::new();
            let mut violations = 0;
            for (v, violates) in violating
                .into_iter()
                .map(|v| (v, true))
                .chain(rest.into_iter().map(|v| (v, false)))
            {
                keep.push(v);
                if self.fits_on(pod, &node, &keep) {
                    continue;
                }
                let v = keep.pop().expect("just pushed");
                violations += usize::from(violates);
                victims.push(v);
            }
            // Room without removing anyone: this node failed a predicate that looks across
            // the cluster (topology spread, pod affinity); removing pods here does not help.
            if victims.is_empty() {
                continue;
            }
            let rank = (
                violations,
                victims.iter().map(|v| v.priority).max().unwrap_or(i32::MIN),
                victims.iter().map(|v| v.priority as i64 + (1 << 31)).sum(),
                victims.len(),
            );
            found.push((rank, found.len(), node, victims));
            if candidates >= CANDIDATES {
                break;
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        // The node checks above see the candidate alone; a pod that looks at other pods is
        // checked against the whole cluster (pinned to the candidate) before anyone goes.
        let across = looks_at_other_pods(pod);
        let Some((_, _, node, victims)) = found
            .into_iter()
            .find(|(_, _, n, v)| !across || self.fits_in_cluster(pod, n, v, changed))
        else {
            return false;
        };
        for v in &victims {
            let key = v.key();
            self.api.remove(Kind::Pod, &key);
            self.forget_pod(&key);
            let c = changed.entry(node.name.clone()).or_default();
            c.gone.insert(v.uid.clone());
            c.added.retain(|a| a.uid != v.uid);
        }
        self.summary.pods_preempted += victims.len() as u64;
        self.event(
            now,
            "preemption",
            format!(
                "{} preempted {} on {}",
                pod.key(),
                victims
                    .iter()
                    .map(|v| v.key())
                    .collect::<Vec<_>>()
                    .join(", "),
                node.name
            ),
        );
        let bound = self.bind(pod, &node.name, now);
        changed
            .entry(node.name.clone())
            .or_default()
            .added
            .push(bound);
        true
    }

    /// Whether `pod` fits `node` once `victims` are gone, with every other ready node as it
    /// is (so topology spread and pod affinity count the whole cluster).
    fn fits_in_cluster(
        &self,
        pod: &Arc<Pod>,
        node: &Node,
        victims: &[Arc<Pod>],
        changed: &Changes,
    ) -> bool {
        let mut pinned = Pod::clone(pod);
        pinned.node_selector.add(Requirement::in_values(
            labels::HOSTNAME,
            [node.name.as_str()],
        ));
        let one = [Arc::new(pinned)];
        let mut changed = changed.clone();
        let c = changed.entry(node.name.clone()).or_default();
        c.gone.extend(victims.iter().map(|v| v.uid.clone()));
        c.added.retain(|a| victims.iter().all(|v| v.uid != a.uid));
        let snapshot = self.snapshot(&one, &changed);
        solve_on(&snapshot, &one).unschedulable.is_empty()
    }

    /// Whether `pod` fits `node` holding only `pods`, by the scheduling core's predicates.
    fn fits_on(&self, pod: &Arc<Pod>, node: &Arc<Node>, pods: &[Arc<Pod>]) -> bool {
        let one = std::slice::from_ref(pod);
        let mut used = Resources::new();
        for p in pods {
            used.add(&p.requests);
        }
        let mut b = SnapshotBuilder::new(one, self.view.repelling() > 0);
        b.node(node, None, pods, &used);
        let snapshot = b.build();
        solve_on(&snapshot, one).unschedulable.is_empty()
    }

    /// Sets `PodScheduled=False` (`Unschedulable`) on a pod that did not fit, as kube-scheduler
    /// does; capstan provisions only for such pods.
    /// A nomination goes with it, as kube-scheduler 1.34 clears it on a failure (its default,
    /// `NominatedNodeNameForExpectation` off).
    fn mark_unschedulable(&self, pod: &Pod) {
        if !pod.unschedulable || pod.nominated_node.is_some() {
            let mut p = pod.clone();
            p.unschedulable = true;
            p.nominated_node = None;
            self.api.put(Object::Pod(Arc::new(p)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use crate::{Options, Sim};
    use capstan_model::pod::PodPhase;

    const WORLD: &str = r#"
name: preemption
duration: 1h
nodePools:
  - apiVersion: capstan.dev/v1
    kind: NodePool
    metadata: {name: general}
    spec: {template: {spec: {requirements: []}}}
traffic: {baseRps: 1, peakRps: 1}
workloads:
  - {name: filler, cpu: 400m, memory: 64Mi, replicas: 0, priority: -1}
  - {name: guarded, cpu: 400m, memory: 64Mi, replicas: 0, priority: -1, pdb: {maxUnavailable: 0}}
  - {name: peer, cpu: 400m, memory: 64Mi, replicas: 0, priority: 100}
  - {name: web, cpu: 700m, memory: 64Mi, replicas: 0, priority: 100}
"#;

    /// What one scheduling pass did to a pending `web` pod (or `mutate`d one), given nodes
    /// (name → the workloads of the pods filling it, in order, as many as fit).
    struct Outcome {
        /// The node the pod went to.
        bound: Option<String>,
        /// The pods that were deleted for it.
        victims: Vec<String>,
        preempted: u64,
    }

    /// A paused current-thread runtime, as the simulator runs on.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// [`WORLD`]'s simulator, with no pods.
    fn world() -> Sim {
        let sc = Scenario::parse("preemption.yaml", WORLD).unwrap();
        let opts = Options {
            replicas: 0,
            ..Default::default()
        };
        Sim::new(sc, opts)
    }

    fn pass(nodes: &[(&str, &[&str])], mutate: impl Fn(&mut Pod)) -> Outcome {
        runtime().block_on(async {
            let mut sim = world();
            let t = sim
                .types
                .iter()
                .find(|t| t.name == "m7i.large")
                .unwrap()
                .clone();
            let w = |sim: &Sim, name: &str| {
                sim.workloads
                    .iter()
                    .position(|w| w.spec.name == name)
                    .unwrap()
            };
            let mut before = Vec::new();
            for (name, fill) in nodes {
                let node = Node::for_instance_type(&t, name, "us-east-1a", "spot", "general");
                let mut free = node.allocatable.cpu;
                sim.api.put(Object::Node(Arc::new(node)));
                for (i, workload) in fill.iter().cycle().enumerate() {
                    let k = w(&sim, workload);
                    let mut p = sim.workloads[k].new_pod();
                    if p.requests.cpu > free || i > 50 {
                        break;
                    }
                    free -= p.requests.cpu;
                    p.node_name = Some(name.to_string());
                    p.phase = PodPhase::Running;
                    p.ready = Some(true);
                    before.push(p.key());
                    sim.api.put(Object::Pod(Arc::new(p)));
                }
            }
            let k = w(&sim, "web");
            let mut web = sim.workloads[k].new_pod();
            mutate(&mut web);
            let key = web.key();
            sim.api.put(Object::Pod(Arc::new(web)));
            sim.sync_view().await;
            sim.schedule(1.0);
            sim.sync_view().await;
            Outcome {
                bound: sim.view.pod(&key).and_then(|p| p.node_name.clone()),
                victims: before
                    .into_iter()
                    .filter(|k| sim.view.pod(k).is_none())
                    .collect(),
                preempted: sim.summary.pods_preempted,
            }
        })
    }

    /// The workload of a pod key (`default/filler-000003` → `filler`).
    fn of(key: &str) -> &str {
        let name = key.rsplit('/').next().unwrap();
        name.rsplit_once('-').unwrap().0
    }

    #[test]
    fn a_high_priority_pod_preempts_the_fewest_lower_priority_pods_on_a_full_node() {
        let o = pass(&[("a", &["filler"])], |_| {});
        assert_eq!(o.bound.as_deref(), Some("a"));
        // m7i.large holds four 400m fillers with less than 700m to spare: one must go.
        assert_eq!(o.victims.len(), 1, "{:?}", o.victims);
        assert_eq!(o.preempted, 1);
        assert!(o.victims.iter().all(|v| of(v) == "filler"));
    }

    #[test]
    fn pods_of_equal_or_higher_priority_are_never_victims() {
        let o = pass(&[("a", &["peer"])], |_| {});
        assert_eq!(o.bound, None);
        assert!(o.victims.is_empty());
        let o = pass(&[("a", &["filler"])], |p| p.priority = -1);
        assert_eq!((o.bound, o.victims.len()), (None, 0));
    }

    #[test]
    fn a_pod_whose_preemption_policy_is_never_waits_for_room() {
        let o = pass(&[("a", &["filler"])], |p| p.never_preempts = true);
        assert_eq!((o.bound, o.victims.len()), (None, 0));
    }

    #[test]
    fn a_node_whose_victims_a_pdb_protects_is_chosen_only_when_no_other_will_do() {
        // Both nodes would need one victim: the one without a PDB to break wins, whatever
        // the order.
        for nodes in [
            [("a", &["guarded"][..]), ("b", &["filler"][..])],
            [("a", &["filler"][..]), ("b", &["guarded"][..])],
        ] {
            let o = pass(&nodes, |_| {});
            let want = nodes.iter().find(|(_, f)| f[0] == "filler").unwrap().0;
            assert_eq!(o.bound.as_deref(), Some(want), "{nodes:?}");
            assert!(
                o.victims.iter().all(|v| of(v) == "filler"),
                "{:?}",
                o.victims
            );
        }
        // A PDB is best-effort in preemption, as upstream: with no other node, it is broken.
        let o = pass(&[("a", &["guarded"])], |_| {});
        assert_eq!(o.bound.as_deref(), Some("a"));
        assert_eq!(o.victims.len(), 1);
    }

    #[test]
    fn pdb_protected_pods_are_reprieved_first_on_the_chosen_node() {
        // Two guarded pods and two fillers: the one victim is a filler.
        let o = pass(&[("a", &["guarded", "filler"])], |_| {});
        assert_eq!(o.bound.as_deref(), Some("a"));
        assert_eq!(o.victims.len(), 1);
        assert_eq!(of(&o.victims[0]), "filler", "{:?}", o.victims);
    }

    /// Three pending `web` pods (700m) and one empty m7i.large `a` with room for two; the
    /// third is nominated to `nominate` (if any), and kept out of the pass (in its
    /// unschedulable backoff) when `backoff`. Returns where each pod went.
    fn nominated_pass(nominate: Option<&str>, backoff: bool) -> Vec<Option<String>> {
        runtime().block_on(async {
            let mut sim = world();
            let t = sim.types.iter().find(|t| t.name == "m7i.large").unwrap();
            let node = Node::for_instance_type(t, "a", "us-east-1a", "spot", "general");
            sim.api.put(Object::Node(Arc::new(node)));
            let k = sim
                .workloads
                .iter()
                .position(|w| w.spec.name == "web")
                .unwrap();
            let mut keys = Vec::new();
            for i in 0..3 {
                let mut p = sim.workloads[k].new_pod();
                if i == 2 {
                    p.nominated_node = nominate.map(String::from);
                    if backoff {
                        sim.unschedulable.insert(p.key());
                    }
                }
                keys.push(p.key());
                sim.api.put(Object::Pod(Arc::new(p)));
            }
            sim.sync_view().await;
            // The node's generation is what the last pass saw: no flush of the backoff.
            let counters = sim.view.counters();
            sim.capacity_seen = (counters.node_generation, counters.freed);
            sim.last_flush = 1.0;
            sim.schedule(1.0);
            sim.sync_view().await;
            keys.iter()
                .map(|k| sim.view.pod(k).and_then(|p| p.node_name.clone()))
                .collect()
        })
    }

    #[test]
    fn a_nominated_pod_gets_the_room_on_its_node_before_pods_of_its_priority_that_came_first() {
        let a = || Some("a".to_string());
        // (case, nominated to, in backoff, where the three pods went)
        type Case<'a> = (&'a str, Option<&'a str>, bool, [Option<String>; 3]);
        let cases: [Case; 4] = [
            ("no nomination: first come", None, false, [a(), a(), None]),
            (
                "nominated to a: it goes there",
                Some("a"),
                false,
                [a(), None, a()],
            ),
            (
                "nominated to a node that is gone",
                Some("gone"),
                false,
                [a(), a(), None],
            ),
            (
                "nominated, in backoff: its room is held",
                Some("a"),
                true,
                [a(), None, None],
            ),
        ];
        for (case, nominate, backoff, want) in cases {
            assert_eq!(nominated_pass(nominate, backoff), want, "{case}");
        }
    }
}
