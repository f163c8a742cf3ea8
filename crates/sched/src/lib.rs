//! capstan's scheduling simulation: given a cluster snapshot, pending pods, NodePools and
//! instance types, decide where every pending pod goes — an existing node, an in-flight
//! NodeClaim, a new NodeClaim — or why it cannot go anywhere.
//!
//! Pure: no I/O, no clock, no randomness. [`solve`] returns a [`Plan`] as data.
//!
//! The algorithm is Karpenter's (first-fit over pods sorted by CPU then memory, descending,
//! with preferences treated as requirements and relaxed one step at a time on failure), with
//! the predicates of kube-scheduler: resources and max pods, node selector and required node
//! affinity, taints, topology spread, pod (anti-)affinity, host ports, and per-NodePool
//! daemonset overhead.

pub mod predicates;
pub mod snapshot;
mod solver;
mod topology;

use capstan_model::{InstanceType, Node, NodePool, Pod, Requirements, Resources, Taint};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use snapshot::SnapshotBuilder;
pub use solver::{claim_holds, limits_left, solve, within_limits};

/// A NodeClaim that has been launched but whose node has not registered yet. The scheduler
/// treats it like a node it already knows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InFlight {
    pub name: String,
    pub nodepool: String,
    /// Labels the node will have (instance type, zone, capacity type, NodePool labels…).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub capacity: Resources,
}

impl InFlight {
    /// A launched (or launching) claim whose node has not registered, as a slot: the labels
    /// its node will have — its instance type's, the claim's, the offering it launched with,
    /// every label its requirements fix — and the type's allocatable. `None` when the claim is
    /// going, registered, or its type is not in `types`.
    pub fn of_claim(c: &capstan_model::NodeClaim, types: &[InstanceType]) -> Option<InFlight> {
        if c.deleting() || c.status.registered() {
            return None;
        }
        let name = c
            .status
            .instance_type
            .as_ref()
            .or(c.instance_types.first())?;
        let (_, t) = capstan_model::catalog::type_for_pool(types, name, Some(&c.nodepool))?;
        let mut labels = t.labels.clone();
        labels.extend(c.labels.clone());
        if let Some(z) = &c.status.zone {
            labels.insert(capstan_model::labels::ZONE.into(), z.clone());
            if let Some(id) = t
                .offerings
                .iter()
                .find(|o| o.zone == *z)
                .and_then(|o| o.zone_id.clone())
            {
                labels.insert(capstan_model::labels::ZONE_ID.into(), id);
            }
        }
        if let Some(ct) = &c.status.capacity_type {
            labels.insert(capstan_model::labels::CAPACITY_TYPE.into(), ct.clone());
        }
        for (k, v) in c.requirements.single_values() {
            labels.entry(k).or_insert(v);
        }
        labels.insert(capstan_model::labels::HOSTNAME.into(), c.name.clone());
        Some(InFlight {
            name: c.name.clone(),
            nodepool: c.nodepool.clone(),
            labels,
            taints: c.taints.clone(),
            allocatable: t.allocatable.clone(),
            capacity: t.capacity.clone(),
        })
    }
}

/// What is already there: nodes, the pods bound to them, in-flight NodeClaims, DaemonSets.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Shared, so the many snapshots of one cluster (a disruption evaluation's what-ifs) hold
    /// its nodes without copying them.
    pub nodes: Vec<Arc<Node>>,
    /// Per node of `nodes`, by index: its labels as requirements, where the caller has them
    /// already (one evaluation's what-ifs share them); the solver works out any not given.
    pub node_requirements: Vec<Option<Arc<Requirements>>>,
    /// Pods bound to nodes (or to in-flight claims, by name). Pending pods here are ignored;
    /// pass them as `pending`.
    /// Shared, so a caller holding tens of thousands of pods builds a snapshot without copying them.
    pub pods: Vec<Arc<Pod>>,
    pub inflight: Vec<InFlight>,
    /// DaemonSet pod templates: their requests are reserved on every new node they would run on.
    pub daemonsets: Vec<Pod>,
    /// Requests already on a node (or in-flight claim), by name, beyond the pods in `pods`.
    /// A caller whose pending pods have no topology spread, (anti-)affinity or host ports,
    /// while no bound pod has required anti-affinity, may summarize bound pods here: only
    /// their resources matter then.
    pub used: BTreeMap<String, Resources>,
    /// Of `used`, the requests of DaemonSet pods, by node: what a node already runs of the
    /// DaemonSets it will run (DaemonSet pods in `pods` count too).
    pub daemons_used: BTreeMap<String, Resources>,
    /// Machines left out of `nodes` (they can take none of the pending pods and nothing
    /// pending looks at them) that still count against their NodePool's limits, summed by
    /// NodePool ([`Snapshot::count`]).
    pub counted: BTreeMap<String, Counted>,
    /// Nodes of `nodes` still coming up (not initialized): pods are tried on initialized nodes
    /// first, then on these, then on in-flight claims, as Karpenter orders existing nodes, so
    /// a pod that fits both lands where it runs sooner.
    pub coming_up: BTreeSet<String>,
    /// Stopped instances the cloud can start in seconds (its warm pools). A new NodeClaim
    /// goes on one of these, cheapest first, before a NodeClaim that boots a machine: pods
    /// wait for a start, not a boot. Each serves one NodeClaim of the plan.
    pub warm: Vec<capstan_model::Warm>,
}

/// Machines of one NodePool left out of a snapshot: how many, and their summed capacity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counted {
    pub nodes: i64,
    pub capacity: Resources,
}

impl Snapshot {
    /// Counts a machine left out of `nodes` against its NodePool's limits.
    pub fn count(&mut self, nodepool: &str, capacity: &Resources) {
        self.count_many(nodepool, 1, capacity);
    }

    /// Counts `nodes` machines left out, `capacity` their summed capacity.
    pub fn count_many(&mut self, nodepool: &str, nodes: i64, capacity: &Resources) {
        let c = match self.counted.get_mut(nodepool) {
            Some(c) => c,
            None => self.counted.entry(nodepool.to_string()).or_default(),
        };
        c.nodes += nodes;
        c.capacity.add(capacity);
    }
}

/// The order in which planned NodeClaims are tried for a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClaimOrder {
    /// In creation order (first fit). Fast.
    #[default]
    FirstFit,
    /// Fewest pods first, as Karpenter does.
    FewestPodsFirst,
}

/// Knobs for [`solve`].
#[derive(Clone, Debug, Default)]
pub struct SolveOptions {
    pub claim_order: ClaimOrder,
    /// Skip working out why each unschedulable pod fits nowhere (the reason is then a
    /// generic sentence). For callers that only ask whether everything fits — the disruption
    /// engine's what-ifs, the simulator's kube-scheduler — where diagnosis is most of the cost.
    pub skip_diagnosis: bool,
    /// Karpenter's MinValuesPolicy BestEffort: a NodeClaim whose instance types cannot meet a
    /// requirement's `minValues` lowers it to what they offer instead of refusing the pod
    /// (the default, Strict, refuses).
    pub relax_min_values: bool,
}

/// Everything [`solve`] reads.
#[derive(Clone, Copy, Debug)]
pub struct SolveInput<'a> {
    pub snapshot: &'a Snapshot,
    pub pending: &'a [Arc<Pod>],
    pub nodepools: &'a [NodePool],
    pub instance_types: &'a [InstanceType],
}

/// Pods placed on a node that exists (or an in-flight NodeClaim).
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub node: String,
    /// Indices into `pending`.
    pub pods: Vec<usize>,
}

/// The offering a new NodeClaim would launch today: the cheapest its options allow.
#[derive(Clone, Debug, PartialEq)]
pub struct ChosenOffering {
    /// Index into `instance_types`.
    pub instance_type: usize,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}

/// A NodeClaim to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewClaim {
    /// `<nodepool>-<k>`, unique within the plan.
    pub name: String,
    pub nodepool: String,
    /// The NodePool's requirements narrowed by the pods (and topology) placed on it.
    pub requirements: Requirements,
    /// Indices into `pending`.
    pub pods: Vec<usize>,
    /// Sum of the pods' requests plus daemonset overhead.
    pub requests: Resources,
    /// Indices into `instance_types` of every type that holds all the pods and satisfies the
    /// requirements, cheapest first. The packing planner chooses among these.
    pub instance_types: Vec<usize>,
    pub offering: ChosenOffering,
    /// It starts one of the snapshot's warm instances ([`Snapshot::warm`]): its type, zone
    /// and capacity type are that instance's, and a planner that re-packs claims for price
    /// leaves it as it is.
    pub warm: bool,
}

/// A pod that fits nowhere, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Unschedulable {
    /// Index into `pending`.
    pub pod: usize,
    /// Shared: the pods that fail alike share one reason.
    pub reason: std::sync::Arc<str>,
}

/// The decision. Every pending pod appears exactly once: in `existing`, in a `new_claims`
/// entry, or in `unschedulable`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub existing: Vec<Binding>,
    pub new_claims: Vec<NewClaim>,
    pub unschedulable: Vec<Unschedulable>,
}

impl Plan {
    /// The hourly price of the new NodeClaims.
    pub fn new_price(&self) -> f64 {
        self.new_claims.iter().map(|c| c.offering.price).sum()
    }
}

#[cfg(test)]
mod tests;
