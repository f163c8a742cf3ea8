//! Building a [`Snapshot`]: the one place that decides whether bound pods go in whole or
//! summarized by their requests, and which nodes can be left out.
//!
//! When no pending pod looks at other pods (topology spread, pod (anti-)affinity, host ports)
//! and no bound pod repels others (required anti-affinity), a bound pod matters only by its
//! requests: the snapshot carries each node's summed requests (`Snapshot::used`) instead of its
//! pods, and a node without room for the smallest pending pod is left out, still counted
//! against its NodePool's limits (`Snapshot::counted`). The controller's provisioner, the
//! disruption engine's what-ifs and the simulator's kube-scheduler all build their snapshots
//! here.

use crate::predicates::looks_at_other_pods;
use crate::{InFlight, Snapshot};
use capstan_model::{Node, Pod, Requirements, Resources};
use std::sync::Arc;

/// Builds a [`Snapshot`] for a set of pending pods.
#[derive(Debug)]
pub struct SnapshotBuilder {
    summarize: bool,
    /// The smallest pending pod's cpu and memory: a summarized node with less room takes none.
    smallest: Option<(i64, i64)>,
    snapshot: Snapshot,
}

impl SnapshotBuilder {
    /// A builder for `pending`; `bound_pods_repel` is whether any bound pod has required pod
    /// anti-affinity (then every bound pod must be seen).
    pub fn new(pending: &[Arc<Pod>], bound_pods_repel: bool) -> SnapshotBuilder {
        let summarize = !bound_pods_repel && !pending.iter().any(|p| looks_at_other_pods(p));
        let smallest = pending.iter().fold(None::<(i64, i64)>, |m, p| {
            let (c, b) = (p.requests.cpu, p.requests.memory);
            Some(m.map_or((c, b), |(mc, mb)| (mc.min(c), mb.min(b))))
        });
        SnapshotBuilder {
            summarize,
            smallest,
            snapshot: Snapshot::default(),
        }
    }

    /// Whether bound pods are summarized (so callers need not gather them).
    pub fn summarizes(&self) -> bool {
        self.summarize
    }

    /// Whether [`SnapshotBuilder::node`] would leave this node out (bound pods are summarized
    /// and it has no room for the smallest pending pod): a caller need not prepare it.
    pub fn leaves_out(&self, node: &Node, used: &Resources) -> bool {
        self.summarize && self.full(node, used)
    }

    /// [`SnapshotBuilder::leaves_out`] for a node whose [`room`] the caller keeps.
    pub fn leaves_out_room(&self, room: [i64; 3]) -> bool {
        self.summarize && self.full_room(room)
    }

    /// Whether a node with `used` requests bound has no room for the smallest pending pod.
    fn full(&self, node: &Node, used: &Resources) -> bool {
        self.full_room(room(node, used))
    }

    fn full_room(&self, [cpu_left, memory_left, pods_left]: [i64; 3]) -> bool {
        self.smallest
            .is_none_or(|(cpu, mem)| cpu_left < cpu || memory_left < mem || pods_left < 1)
    }

    /// Adds a node that may take pods, with the pods bound to it and their summed requests.
    /// `nodepool` is the pool whose limits it counts against if it is left out.
    pub fn node<'p>(
        &mut self,
        node: &Arc<Node>,
        nodepool: Option<&str>,
        pods: impl IntoIterator<Item = &'p Arc<Pod>>,
        used: &Resources,
    ) {
        self.node_with_requirements(node, None, nodepool, pods, used, None);
    }

    /// [`SnapshotBuilder::node`], with the requests of the node's active DaemonSet pods
    /// already summed ([`daemons_used`]) by a caller that keeps them.
    pub fn node_summed<'p>(
        &mut self,
        node: &Arc<Node>,
        nodepool: Option<&str>,
        pods: impl IntoIterator<Item = &'p Arc<Pod>>,
        used: &Resources,
        daemons: &Resources,
    ) {
        self.node_with_requirements(node, None, nodepool, pods, used, Some(daemons));
    }

    /// [`SnapshotBuilder::node`], with the node's labels already made requirements
    /// (`Requirements::from_labels`) and, when bound pods are summarized, the requests of
    /// its active DaemonSet pods (`daemons`) already summed, by a caller that builds many
    /// snapshots of one cluster.
    pub fn node_with_requirements<'p>(
        &mut self,
        node: &Arc<Node>,
        requirements: Option<&Arc<Requirements>>,
        nodepool: Option<&str>,
        pods: impl IntoIterator<Item = &'p Arc<Pod>>,
        used: &Resources,
        daemons: Option<&Resources>,
    ) {
        if self.summarize {
            if self.full(node, used) {
                if let Some(pool) = nodepool {
                    self.snapshot.count(pool, node.capacity_or_allocatable());
                }
                return;
            }
            self.snapshot.used.insert(node.name.clone(), used.clone());
            let daemons = match daemons {
                Some(summed) => summed.clone(),
                None => daemons_used(pods),
            };
            if !daemons.is_zero() {
                self.snapshot
                    .daemons_used
                    .insert(node.name.clone(), daemons);
            }
        } else {
            self.snapshot.pods.extend(pods.into_iter().cloned());
        }
        self.snapshot.nodes.push(node.clone());
        // In step with `nodes`, entry for entry.
        self.snapshot.node_requirements.push(requirements.cloned());
    }

    /// Adds a node still coming up (see [`Snapshot::coming_up`]): `node` as the scheduler
    /// sees it before initialization ([`Node::coming_up`]).
    pub fn node_coming_up<'p>(
        &mut self,
        node: &Arc<Node>,
        nodepool: Option<&str>,
        pods: impl IntoIterator<Item = &'p Arc<Pod>>,
        used: &Resources,
    ) {
        self.snapshot.coming_up.insert(node.name.clone());
        self.node(node, nodepool, pods, used);
    }

    /// Adds a launched NodeClaim whose node has not registered yet.
    pub fn inflight(&mut self, claim: InFlight) {
        self.snapshot.inflight.push(claim);
    }

    /// A pod already planned onto an in-flight claim: its requests (or, when bound pods are
    /// seen whole, the pod itself as bound there) occupy the claim.
    pub fn nominated(&mut self, claim: &str, pod: &Arc<Pod>) {
        if self.summarize {
            self.snapshot
                .used
                .entry(claim.to_string())
                .or_default()
                .add(&pod.requests);
        } else {
            let mut p = Pod::clone(pod);
            p.node_name = Some(claim.to_string());
            p.phase = capstan_model::pod::PodPhase::Running;
            self.snapshot.pods.push(Arc::new(p));
        }
    }

    /// A machine left out for the caller's own reasons that still counts against its
    /// NodePool's limits.
    pub fn counted(&mut self, nodepool: &str, capacity: &Resources) {
        self.snapshot.count(nodepool, capacity);
    }

    /// [`SnapshotBuilder::counted`] of `nodes` machines at once, `capacity` their sum.
    pub fn counted_many(&mut self, nodepool: &str, nodes: i64, capacity: &Resources) {
        self.snapshot.count_many(nodepool, nodes, capacity);
    }

    pub fn daemonsets(&mut self, templates: impl IntoIterator<Item = Pod>) {
        self.snapshot.daemonsets.extend(templates);
    }

    pub fn build(self) -> Snapshot {
        self.snapshot
    }
}

/// A node's room with `used` requests bound: cpu, memory and pod slots left.
pub fn room(node: &Node, used: &Resources) -> [i64; 3] {
    let a = &node.allocatable;
    [
        a.cpu - used.cpu,
        a.memory - used.memory,
        node.max_pods() - used.pods,
    ]
}

/// The summed requests of the active DaemonSet pods among `pods`: what
/// [`Snapshot::daemons_used`] holds for their node.
pub fn daemons_used<'p>(pods: impl IntoIterator<Item = &'p Arc<Pod>>) -> Resources {
    let mut daemons = Resources::new();
    for p in pods
        .into_iter()
        .filter(|p| p.is_active() && p.is_daemonset_pod())
    {
        daemons.add(&p.requests);
    }
    daemons
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::pod::PodAffinityTerm;

    fn pod(name: &str, cpu: i64, node: Option<&str>) -> Arc<Pod> {
        let mut p = Pod {
            namespace: "default".into(),
            name: name.into(),
            node_name: node.map(str::to_string),
            ..Default::default()
        };
        p.requests.cpu = cpu;
        p.requests.memory = 1 << 30;
        p.requests.pods = 1;
        Arc::new(p)
    }

    fn node(name: &str, cpu: i64) -> Arc<Node> {
        let mut n = Node {
            name: name.into(),
            ready: true,
            ..Default::default()
        };
        n.allocatable.cpu = cpu;
        n.allocatable.memory = 16 << 30;
        Arc::new(n)
    }

    fn used(cpu: i64, pods: i64) -> Resources {
        let mut r = Resources::new();
        r.cpu = cpu;
        r.memory = pods << 30;
        r.pods = pods;
        r
    }

    #[test]
    fn bound_pods_are_summarized_and_full_nodes_left_out_but_counted() {
        let pending = [pod("p", 500, None)];
        let bound = [pod("b", 3800, Some("full"))];
        let mut b = SnapshotBuilder::new(&pending, false);
        assert!(b.summarizes());
        b.node(&node("full", 4000), Some("default"), &bound, &used(3800, 1));
        b.node(&node("roomy", 4000), Some("default"), &[], &used(0, 0));
        let s = b.build();
        assert_eq!(
            s.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["roomy"]
        );
        assert!(s.pods.is_empty(), "summarized: no pods copied");
        assert_eq!(
            s.counted["default"].nodes, 1,
            "the full node still counts against limits"
        );
        assert_eq!(s.counted["default"].capacity.cpu, 4000);
        assert_eq!(s.used["roomy"].cpu, 0);
    }

    #[test]
    fn a_pending_pod_that_looks_at_other_pods_keeps_every_node_whole() {
        let mut spread = Pod::clone(&pod("p", 500, None));
        spread.anti_affinity.push(PodAffinityTerm {
            selector: None,
            namespaces: capstan_model::pod::Namespaces::All,
            topology_key: "kubernetes.io/hostname".into(),
        });
        let pending = [Arc::new(spread)];
        let bound = [pod("b", 3800, Some("full"))];
        let mut b = SnapshotBuilder::new(&pending, false);
        assert!(!b.summarizes());
        b.node(&node("full", 4000), Some("default"), &bound, &used(3800, 1));
        let s = b.build();
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.pods.len(), 1);
        assert!(s.counted.is_empty());
    }

    #[test]
    fn a_nodes_daemonset_requests_given_summed_go_in_as_summing_its_pods_would() {
        let daemon = |name: &str, cpu: i64, done: bool| {
            let mut p = Pod::clone(&pod(name, cpu, Some("n")));
            p.owner_kind = Some("DaemonSet".into());
            if done {
                p.phase = capstan_model::pod::PodPhase::Succeeded;
            }
            Arc::new(p)
        };
        let cases: [(&str, Vec<Arc<Pod>>, i64); 4] = [
            ("no pods", vec![], 0),
            ("a plain pod only", vec![pod("web", 300, Some("n"))], 0),
            (
                "a daemon and a plain pod",
                vec![daemon("ds", 200, false), pod("web", 300, Some("n"))],
                200,
            ),
            (
                "a finished daemon pod counts for nothing",
                vec![daemon("ds", 200, false), daemon("old", 900, true)],
                200,
            ),
        ];
        for (case, bound, want) in cases {
            let pending = [pod("p", 100, None)];
            let summed = daemons_used(&bound);
            assert_eq!(summed.cpu, want, "{case}");
            let build = |given: Option<&Resources>| {
                let mut b = SnapshotBuilder::new(&pending, false);
                b.node_with_requirements(
                    &node("n", 4000),
                    None,
                    None,
                    &bound,
                    &used(500, 2),
                    given,
                );
                b.build().daemons_used
            };
            assert_eq!(build(Some(&summed)), build(None), "{case}");
        }
    }

    #[test]
    fn a_nodes_room_leaves_it_out_exactly_when_the_node_and_its_requests_would() {
        let pending = [pod("p", 500, None)];
        let mut few_slots = Node::clone(&node("s", 4000));
        few_slots.allocatable.pods = 3;
        let few_slots = Arc::new(few_slots);
        // (node, used, left out)
        let cases = [
            (node("roomy", 4000), used(0, 0), false),
            (node("just", 4000), used(3500, 1), false),
            (node("cpu", 4000), used(3501, 1), true),
            (node("memory", 4000), used(0, 16), true),
            (few_slots.clone(), used(0, 2), false),
            (few_slots, used(0, 3), true),
        ];
        for summarize in [true, false] {
            let b = SnapshotBuilder::new(&pending, !summarize);
            for (n, u, out) in &cases {
                assert_eq!(b.leaves_out(n, u), summarize && *out, "{}", n.name);
                assert_eq!(
                    b.leaves_out_room(room(n, u)),
                    b.leaves_out(n, u),
                    "{}",
                    n.name
                );
            }
        }
        // With nothing pending, every summarized node is left out.
        let b = SnapshotBuilder::new(&[], false);
        assert!(b.leaves_out_room([i64::MAX; 3]));
    }

    #[test]
    fn a_bound_pod_that_repels_keeps_every_node_whole() {
        let b = SnapshotBuilder::new(&[pod("p", 500, None)], true);
        assert!(!b.summarizes());
    }

    #[test]
    fn a_node_out_of_pod_slots_is_full() {
        let pending = [pod("p", 100, None)];
        let mut n = node("slots", 64_000);
        Arc::make_mut(&mut n).allocatable.pods = 2;
        let mut b = SnapshotBuilder::new(&pending, false);
        b.node(&n, None, &[], &used(200, 2));
        let s = b.build();
        assert!(s.nodes.is_empty());
        assert!(
            s.counted.is_empty(),
            "an unmanaged node counts against no pool"
        );
    }

    #[test]
    fn nominated_pods_occupy_their_claim_either_way() {
        let pending = [pod("p", 100, None)];
        let nominated = pod("n", 700, None);
        let mut b = SnapshotBuilder::new(&pending, false);
        b.nominated("claim-a", &nominated);
        assert_eq!(b.build().used["claim-a"].cpu, 700);
        let mut b = SnapshotBuilder::new(&pending, true);
        b.nominated("claim-a", &nominated);
        let s = b.build();
        assert_eq!(s.pods[0].node_name.as_deref(), Some("claim-a"));
    }
}
