//! capstan's disruption engine: what to remove or replace now, as data.
//!
//! Given the cluster (nodes with their NodePool, instance type and price; bound pods; PDBs), the
//! NodePools, the instance types and `now`, [`evaluate`] returns the [`Command`]s to carry out
//! and the nodes that are [`Blocked`], with why:
//!
//! - **expiry** (`expireAfter`): forceful — no budget or do-not-disrupt stops it;
//! - **emptiness**: no pods that need another node (`Pod::reschedulable`: DaemonSet, mirror
//!   and terminating pods go with it), `consolidateAfter` after the node's last pod
//!   event;
//! - **drift**, oldest node first: the node no longer satisfies its NodePool's requirements,
//!   its NodePool's template changed (hash annotation), or the provider reports drift;
//! - **consolidation** (`WhenEmptyOrUnderutilized`): several nodes at once (their pods onto
//!   the rest plus cheaper replacements, Karpenter's multi-node consolidation, extended to
//!   several replacements), then single nodes (delete, or replace with a cheaper node).
//!
//! Voluntary methods honour NodePool disruption budgets (counts or percentages rounded up,
//! cron windows, reasons; of the initialized nodes, NotReady and going ones use them up — a
//! cordon does not — as Karpenter counts), PDBs and
//! `do-not-disrupt`. Every command's moves were simulated with the scheduling core, so they are
//! feasible under every predicate. Pure: `now` is a parameter.

pub mod heap;

use capstan_model::catalog::{offering_allowed, zone_id_allowed};
pub use capstan_model::disruption::Reason;
use capstan_model::labels::{self, CAPACITY_SPOT, DO_NOT_DISRUPT};
use capstan_model::nodepool::ConsolidationPolicy;
use capstan_model::pdb::Pdb;
use capstan_model::{InstanceType, Node, NodePool, Pod, Requirements};
use capstan_sched::{Plan, SnapshotBuilder, SolveInput, SolveOptions, solve};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Annotation holding the hash of the NodePool template a node was launched from.
pub const NODEPOOL_HASH: &str = "capstan.dev/nodepool-hash";
/// Annotation holding the version of that hash's serialization.
pub const NODEPOOL_HASH_VERSION: &str = "capstan.dev/nodepool-hash-version";

/// Karpenter's rule for spot-to-spot replacement: at least this many cheaper spot types, so a
/// replacement does not just chase the single cheapest pool into the next interruption.
pub const MIN_SPOT_OPTIONS: usize = 15;

/// Single-node consolidation looks at this many candidates per evaluation at most.
pub const SINGLE_NODE_ATTEMPTS: usize = 100;

/// A node as the engine sees it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Shared with the caller's cache: an evaluation copies no node.
    pub node: std::sync::Arc<Node>,
    /// NodePool name (from `capstan.dev/nodepool`); `None` for nodes capstan does not manage.
    pub nodepool: Option<String>,
    /// Index into the instance types.
    pub instance_type: Option<usize>,
    pub capacity_type: String,
    pub zone: String,
    pub price: f64,
    /// Unix seconds.
    pub created: Option<f64>,
    /// Drift the cloud provider reports.
    pub provider_drift: Option<String>,
    /// Unix seconds of the last pod bound to or removed from the node (Karpenter's
    /// `lastPodEventTime`); `consolidateAfter` counts from it, or from `created` without one.
    pub last_pod_event: Option<f64>,
    /// Initialized (Karpenter's NodeClaim condition): only initialized nodes count toward a
    /// budget's total, or are candidates. True unless the caller knows otherwise.
    pub initialized: bool,
    /// What the node's NodeClaim's `Consolidatable` condition says, where the caller reads
    /// it from a cluster rather than keeping pod events (a snapshot of a Karpenter
    /// cluster): True, `consolidateAfter` has passed; False or absent, it has not. `None`:
    /// reckon from `last_pod_event`.
    pub consolidatable: Option<bool>,
    /// Unix seconds the node was found drifted (its NodeClaim's `Drifted` condition), where
    /// known: drift takes the earliest first.
    pub drifted_at: Option<f64>,
    /// The NodeClaim's own `spec.expireAfter` (Karpenter copies the NodePool's at launch;
    /// `Some(None)` = Never). `None`: the NodePool's applies (capstan's own claims).
    pub expire_after: Option<Option<u64>>,
    /// The provider could not list the instance types of the node's NodePool just now: whether
    /// its type is still offered is not known (no instance-type drift, as Karpenter when its
    /// GetInstanceTypes fails).
    pub types_unknown: bool,
}

impl NodeInfo {
    /// A node from the cluster, priced from the catalog by its labels.
    pub fn from_node(node: impl Into<std::sync::Arc<Node>>, types: &[InstanceType]) -> NodeInfo {
        let node = node.into();
        let nodepool = node.labels.get(labels::NODEPOOL).cloned();
        let capacity_type = node
            .labels
            .get(labels::CAPACITY_TYPE)
            .cloned()
            .unwrap_or_else(|| labels::CAPACITY_ON_DEMAND.into());
        let zone = node.labels.get(labels::ZONE).cloned().unwrap_or_default();
        let created = node
            .created
            .as_deref()
            .and_then(capstan_model::time::parse_rfc3339);
        let mut info = NodeInfo {
            node,
            nodepool,
            instance_type: None,
            capacity_type,
            zone,
            price: 0.0,
            created,
            provider_drift: None,
            last_pod_event: None,
            initialized: true,
            consolidatable: None,
            drifted_at: None,
            expire_after: None,
            types_unknown: false,
        };
        info.price_from(types, false);
        info
    }

    /// The node's instance type in `types` (by its labels) and its price there: all that
    /// [`NodeInfo::from_node`] reads of the types. `same_listing`: the types are the ones
    /// the node was priced with, or others listed alike (the same names and NodePool labels
    /// in the same order), so its index stands and only the price is read again.
    pub fn price_from(&mut self, types: &[InstanceType], same_listing: bool) {
        if !same_listing {
            let pool = self.node.labels.get(labels::NODEPOOL).map(String::as_str);
            self.instance_type = self
                .node
                .labels
                .get(labels::INSTANCE_TYPE)
                .and_then(|t| capstan_model::catalog::type_for_pool(types, t, pool))
                .map(|(i, _)| i);
        }
        self.price = self
            .instance_type
            .map(|t| {
                let offerings = &types[t].offerings;
                offerings
                    .iter()
                    .find(|o| o.zone == self.zone && o.capacity_type == self.capacity_type)
                    .or_else(|| {
                        offerings
                            .iter()
                            .find(|o| o.capacity_type == self.capacity_type)
                    })
                    .or_else(|| offerings.first())
                    .map(|o| o.price)
                    .unwrap_or(0.0)
            })
            .unwrap_or(0.0);
    }

    /// When the node expires: its NodeClaim's `expireAfter`, else its NodePool's (`None`:
    /// never).
    pub fn expire_after_seconds(&self, pool: &NodePool) -> Option<u64> {
        self.expire_after.unwrap_or(pool.expire_after_seconds)
    }

    /// What the node's NodeClaim says of it (one rule for the controller and the what-if):
    /// its price where it has one, its age (expiry and `consolidateAfter` count from the
    /// NodeClaim), whether it is initialized (its claim is, and the node carries the label
    /// the budget check reads), NotReady until then (it takes no moved pods), and going once
    /// the claim is being deleted. `epoch_unix` turns the claim's clock seconds into Unix ones.
    pub fn apply_claim(&mut self, claim: &capstan_model::NodeClaim, epoch_unix: f64) {
        self.claim_price(claim);
        self.created = Some(epoch_unix + claim.created);
        self.initialized = claim.status.initialized() && self.node.labelled_initialized();
        if !claim.status.initialized() {
            std::sync::Arc::make_mut(&mut self.node).ready = false;
        }
        if claim.deleting() {
            let node = std::sync::Arc::make_mut(&mut self.node);
            node.unschedulable = true;
            node.deleting = true;
        }
    }

    /// The price the node's NodeClaim says it was bought at, where it says one: over the
    /// catalog's ([`NodeInfo::apply_claim`] and, after [`NodeInfo::price_from`], again).
    pub fn claim_price(&mut self, claim: &capstan_model::NodeClaim) {
        if claim.status.price > 0.0 {
            self.price = claim.status.price;
        }
    }

    /// Being disrupted already, cordoned, or NotReady: not a candidate.
    pub fn disrupting(&self) -> bool {
        self.node.is_disrupting()
    }
}

/// What evicting a pod costs, as Karpenter weighs it (`EvictionCost`): 1, plus its
/// `controller.kubernetes.io/pod-deletion-cost` over 2^27, plus its priority over 2^25, clamped
/// to [−10, 10]. A deletion cost that does not parse adds nothing (Karpenter logs it).
pub fn eviction_cost(p: &Pod) -> f64 {
    let mut cost = 1.0;
    if let Some(c) = p
        .annotations
        .get(labels::POD_DELETION_COST)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|c| c.is_finite())
    {
        cost += c / f64::from(1u32 << 27);
    }
    cost += f64::from(p.priority) / f64::from(1u32 << 25);
    cost.clamp(-10.0, 10.0)
}

/// The share of a node's lifetime left before `expireAfter` (Karpenter's `LifetimeRemaining`):
/// 1 without an expiry, falling to 0 as the node ages towards it.
pub fn lifetime_remaining(age_seconds: Option<f64>, expire_after_seconds: Option<u64>) -> f64 {
    match (age_seconds, expire_after_seconds) {
        (Some(age), Some(total)) if total > 0 => {
            ((total as f64 - age) / total as f64).clamp(0.0, 1.0)
        }
        _ => 1.0,
    }
}

/// Everything [`evaluate`] reads.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub nodes: &'a [NodeInfo],
    /// Pods bound to the nodes.
    pub pods: &'a [Arc<Pod>],
    pub pdbs: &'a [Pdb],
    pub nodepools: &'a [NodePool],
    pub instance_types: &'a [InstanceType],
    pub daemonsets: &'a [Pod],
    /// Unix seconds.
    pub now: f64,
    /// Karpenter's `SpotToSpotConsolidation` feature gate: consolidation may replace spot
    /// nodes whose replacement could be spot (a single node only with enough cheaper spot
    /// types). Off, such spot nodes are only deleted.
    pub spot_to_spot: bool,
    /// Karpenter's preference policy `Ignore`: the what-ifs place pods without their
    /// preferred affinities and ScheduleAnyway spreads, as the provisioner then plans them.
    pub ignore_preferences: bool,
    /// What the caller already knows of each pod; `None`: the engine works it out.
    pub known: Option<Known<'a>>,
}

/// What a caller that keeps the cluster between evaluations (the controller's cache) knows
/// of each pod, parallel to [`Input::pods`]: the engine then need not read every pod's node
/// name and labels to work it out again.
#[derive(Clone, Copy, Debug)]
pub struct Known<'a> {
    /// Per pod: the index in [`Input::nodes`] of the node it is bound to, if that is there.
    pub node: &'a [Option<usize>],
    /// Per pod: the indexes in [`Input::pdbs`] of the PDBs that select it
    /// ([`Pdb::selects`]).
    pub pdbs: &'a [Arc<[usize]>],
    /// Per pod: [`PodFacts::of`] it, where the caller keeps them; the engine's first pass
    /// then reads these instead of every pod.
    pub facts: Option<&'a [PodFacts]>,
}

/// What the engine's first pass over the pods reads of each, kept together: a caller that
/// keeps its inputs between evaluations keeps these too ([`Known::facts`]), and the pass
/// reads one compact array instead of every pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts {
    /// [`Pod::is_active`].
    pub active: bool,
    /// Has required pod anti-affinity.
    pub repels: bool,
    /// [`Pod::reschedulable`].
    pub reschedulable: bool,
    /// [`Pdb::healthy`].
    pub healthy: bool,
    pub requests: capstan_model::Resources,
    /// What a drain of its node makes of it ([`Gate`]).
    pub gate: Gate,
}

impl PodFacts {
    pub fn of(pod: &Pod) -> PodFacts {
        PodFacts {
            active: pod.is_active(),
            repels: !pod.anti_affinity.is_empty(),
            reschedulable: pod.reschedulable(),
            healthy: Pdb::healthy(pod),
            requests: pod.requests.clone(),
            gate: Gate::of(pod),
        }
    }
}

/// What a pod may hold of its node's voluntary disruption, read once per pod: whether the
/// drain skips it (terminating already, or a mirror pod: it goes with the node), and whether
/// it carries a `do-not-disrupt` annotation that can hold the node (any value but
/// `"false"`; [`Pod::do_not_disrupt`] says whether it does now).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gate {
    pub deleting: bool,
    pub mirror: bool,
    pub may_hold: bool,
}

impl Gate {
    pub fn of(pod: &Pod) -> Gate {
        Gate {
            deleting: pod.deleting,
            mirror: pod.owner_kind.as_deref() == Some("Node"),
            may_hold: pod
                .annotations
                .get(DO_NOT_DISRUPT)
                .is_some_and(|v| v != "false"),
        }
    }
}

/// [`PodFacts`] borrowed, from the caller's or from the pod itself.
struct Facts<'p> {
    active: bool,
    repels: bool,
    reschedulable: bool,
    healthy: bool,
    requests: &'p capstan_model::Resources,
    gate: Gate,
}

impl<'p> Facts<'p> {
    fn kept(f: &'p PodFacts) -> Facts<'p> {
        Facts {
            active: f.active,
            repels: f.repels,
            reschedulable: f.reschedulable,
            healthy: f.healthy,
            requests: &f.requests,
            gate: f.gate,
        }
    }

    fn of(pod: &'p Pod) -> Facts<'p> {
        Facts {
            active: pod.is_active(),
            repels: !pod.anti_affinity.is_empty(),
            reschedulable: pod.reschedulable(),
            healthy: Pdb::healthy(pod),
            requests: &pod.requests,
            gate: Gate::of(pod),
        }
    }
}

/// A node to launch before the candidates go.
#[derive(Clone, Debug, PartialEq)]
pub struct Replacement {
    pub nodepool: String,
    /// The type, zone, capacity type and price of the offering the plan chose.
    pub instance_type: usize,
    pub capacity_type: String,
    pub zone: String,
    pub price: f64,
    /// For a spot-to-spot replacement, as Karpenter launches it: the (at most 15) cheapest
    /// spot types cheaper than the node it replaces, cheapest first, for the cloud to choose
    /// among (price and capacity) rather than one pool; with it, the claim's requirements.
    /// Empty otherwise: the replacement is pinned to the chosen offering.
    pub spot_options: Vec<usize>,
    pub requirements: capstan_model::Requirements,
    /// The plan put it on a warm instance (only for an interruption: see [`interruption`]).
    pub warm: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Node(String),
    /// Index into the command's replacements.
    Replacement(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    /// `namespace/name`.
    pub pod: String,
    pub to: Target,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub reason: Reason,
    pub candidates: Vec<String>,
    pub replacements: Vec<Replacement>,
    pub moves: Vec<Move>,
    pub savings: f64,
    /// Evictions in waves: lowest priority first, each wave within every PDB's allowance.
    pub drain: Vec<Vec<String>>,
    /// How long the drain takes at most: each wave waits for its pods' grace periods, capped
    /// by the NodePool's terminationGracePeriod.
    pub drain_seconds: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    pub node: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    pub commands: Vec<Command>,
    pub blocked: Vec<Blocked>,
    /// Per voluntary method: the nodes it applies to and nothing blocks (do-not-disrupt,
    /// PDBs), before budgets — Karpenter's eligible nodes.
    pub eligible: BTreeMap<Reason, usize>,
    pub before: f64,
    pub after: f64,
}

/// The drift hash of a NodePool's template (see [`capstan_model::nodepool::template_hash`]).
pub fn template_hash(pool: &NodePool) -> String {
    capstan_model::nodepool::template_hash(&pool.spec.template)
}

struct Engine<'a> {
    input: Input<'a>,
    /// Node index → indexes of the active pods bound to it.
    pods_on: Vec<Vec<usize>>,
    pool_of: Vec<Option<usize>>,
    /// Each (pool, reason)'s allowance at the start of the evaluation, net of the pool's
    /// nodes already going.
    budget: BTreeMap<(usize, Reason), i64>,
    /// Disruptions this evaluation has decided per pool, by any method: every method spends
    /// the one pool's allowance (Karpenter counts a pool's deleting nodes against every
    /// reason's budget).
    spent: BTreeMap<usize, i64>,
    taken: BTreeSet<usize>,
    /// Evictions each PDB allows now.
    pdb_allowed: Vec<i64>,
    /// Per pod: the PDBs that select it.
    /// Pod index → its entry in `pdb_sets` (the PDBs that select it).
    pdbs_of: Vec<usize>,
    pdb_sets: Vec<Vec<usize>>,
    /// Per pod: what it may hold of its node's drain.
    gates: Vec<Gate>,
    /// Node index → its pods that move when it goes (`Pod::reschedulable`).
    movable_on: Vec<Vec<usize>>,
    /// Pods of nodes being deleted that need room elsewhere (the provisioner plans them ahead
    /// of their eviction): every what-if places them too, as Karpenter's does, so no command
    /// takes the room they are moving to.
    moving: Vec<usize>,
    /// NodePool index → its template hash.
    pool_hash: Vec<String>,
    /// Per node: allocatable minus its pods' requests (zero for nodes that take no pods).
    free: Vec<capstan_model::Resources>,
    /// The sum of `free`.
    free_total: capstan_model::Resources,
    /// Per node: its movable pods' requests.
    load: Vec<capstan_model::Resources>,
    /// Per node: all its pods' requests.
    used: Vec<capstan_model::Resources>,
    /// Whether some bound pod has required anti-affinity (then what-ifs need every pod).
    bound_anti: bool,
    /// Per pool: the cheapest price per millicore and per byte of any available offering.
    unit_price: Vec<(f64, f64)>,
    /// Per node: its labels as requirements, made when a what-if first needs them.
    node_requirements: Vec<std::cell::OnceCell<Arc<Requirements>>>,
    /// Per node: [`NodeInfo::disrupting`], read once (every what-if asks it of every node).
    disrupting: Vec<bool>,
    /// Per node: its active DaemonSet pods' requests, summed when a what-if first needs them.
    daemons_used: Vec<std::cell::OnceCell<capstan_model::Resources>>,
    /// Per node: its room with all its pods bound (`capstan_sched::snapshot::room`), which
    /// every what-if checks of every node.
    room: Vec<[i64; 3]>,
    /// The NodePool names nodes carry (`NodeInfo::nodepool`), each once, and per node the
    /// index of its own: what-ifs count the nodes they leave out by index, not by name.
    labelled_pools: Vec<String>,
    labelled_pool: Vec<Option<usize>>,
    /// Per node: [`Node::capacity_or_allocatable`], read once per evaluation.
    capacity: Vec<capstan_model::Resources>,
    /// Warm instances the cloud can start in seconds: a replacement may start one only when
    /// the cloud is taking the node (an interruption); a voluntary replacement boots at its
    /// cheapest offering.
    warm: Vec<capstan_model::Warm>,
}

impl<'a> Engine<'a> {
    fn new(input: Input<'a>) -> Engine<'a> {
        // Node name → index (unless the caller knows each pod's); pods arrive grouped by
        // node, so the last lookup is tried first.
        let node_index: std::collections::HashMap<&str, usize, foldhash::fast::FixedState> =
            match input.known {
                Some(_) => Default::default(),
                None => input
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.node.name.as_str(), i))
                    .collect(),
            };
        let pool_of = input
            .nodes
            .iter()
            .map(|n| {
                n.nodepool
                    .as_ref()
                    .and_then(|p| input.nodepools.iter().position(|x| x.name == *p))
            })
            .collect();
        // Which PDBs select each pod — computed once per distinct (namespace, labels), since
        // a workload's pods share them — and each PDB's allowance from the same pass.
        // A PDB's selector reads only the label keys it names: pods alike on those keys (and
        // namespace) are selected alike, so the PDBs are computed once per such signature.
        let mut keys: Vec<&str> = input
            .pdbs
            .iter()
            .filter_map(|d| d.selector.as_ref())
            .flat_map(|s| s.requirements.iter().map(|r| r.key.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        type Signature<'p> = (&'p str, Vec<Option<&'p str>>);
        let mut memo: std::collections::HashMap<Signature<'_>, usize, foldhash::fast::FixedState> =
            Default::default();
        let mut pdb_sets: Vec<Vec<usize>> = Vec::new();
        let mut expected = vec![0i64; input.pdbs.len()];
        let mut healthy = vec![0i64; input.pdbs.len()];
        let nodes = input.nodes.len();
        let mut pods_on: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        let mut movable_on: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        // Where the caller knows each pod's node, each node's lists are made once at the size
        // they may reach instead of growing pod by pod.
        if let Some(k) = input.known {
            let mut bound = vec![0usize; nodes];
            for &at in k.node.iter().flatten() {
                bound[at] += 1;
            }
            for ((on, movable), &n) in pods_on.iter_mut().zip(&mut movable_on).zip(&bound) {
                *on = Vec::with_capacity(n);
                *movable = Vec::with_capacity(n);
            }
        }
        let mut used_all = vec![capstan_model::Resources::new(); nodes];
        let mut load = vec![capstan_model::Resources::new(); nodes];
        let mut pdbs_of: Vec<usize> = Vec::with_capacity(input.pods.len());
        let mut gates: Vec<Gate> = Vec::with_capacity(input.pods.len());
        let mut bound_anti = false;
        // One pass over the pods (each pod's memory is read once per evaluation). The last
        // pod's node and signature are tried first: pods arrive grouped by node, and
        // neighbours are often replicas of one workload.
        let mut last_node: Option<(&str, usize)> = None;
        let mut last_sig: Option<(Signature<'_>, usize)> = None;
        let mut values: Vec<Option<&str>> = Vec::with_capacity(keys.len());
        // Known sets, numbered by their allocation (pods alike share one).
        let mut known_sets: std::collections::HashMap<
            *const usize,
            usize,
            foldhash::fast::FixedState,
        > = Default::default();
        // The last pod's known set: neighbours mostly share one.
        let mut last_known: Option<(*const usize, usize)> = None;
        if let Some(k) = input.known {
            debug_assert_eq!(k.node.len(), input.pods.len());
            debug_assert_eq!(k.pdbs.len(), input.pods.len());
            debug_assert!(k.facts.is_none_or(|f| {
                f.len() == input.pods.len()
                    && f.iter().zip(input.pods).all(|(f, p)| *f == PodFacts::of(p))
            }));
        }
        let facts = input.known.and_then(|k| k.facts);
        for (i, pod) in input.pods.iter().enumerate() {
            let f = match facts {
                Some(f) => Facts::kept(&f[i]),
                None => Facts::of(pod),
            };
            let set = if let Some(k) = input.known {
                let a = &k.pdbs[i];
                match last_known {
                    Some((ptr, set)) if ptr == a.as_ptr() => set,
                    _ => {
                        let set = *known_sets.entry(a.as_ptr()).or_insert_with(|| {
                            pdb_sets.push(a.to_vec());
                            pdb_sets.len() - 1
                        });
                        last_known = Some((a.as_ptr(), set));
                        set
                    }
                }
            } else {
                values.clear();
                values.extend(keys.iter().map(|k| pod.labels.get(*k).map(String::as_str)));
                match &mut last_sig {
                    Some(((ns, seen), set)) if *ns == pod.namespace && *seen == values => *set,
                    _ => {
                        let sig: Signature<'_> = (pod.namespace.as_str(), values.clone());
                        let set = *memo.entry(sig.clone()).or_insert_with(|| {
                            pdb_sets.push(
                                (0..input.pdbs.len())
                                    .filter(|&i| input.pdbs[i].selects(pod))
                                    .collect(),
                            );
                            pdb_sets.len() - 1
                        });
                        last_sig = Some((sig, set));
                        set
                    }
                }
            };
            pdbs_of.push(set);
            gates.push(f.gate);
            bound_anti |= f.repels;
            if !f.active {
                continue;
            }
            for &d in &pdb_sets[set] {
                expected[d] += 1;
                healthy[d] += f.healthy as i64;
            }
            let at = if let Some(k) = input.known {
                k.node[i]
            } else {
                let Some(n) = &pod.node_name else {
                    continue;
                };
                let at = match last_node {
                    Some((name, at)) if name == n.as_str() => Some(at),
                    _ => node_index.get(n.as_str()).copied(),
                };
                if let Some(at) = at {
                    last_node = Some((n.as_str(), at));
                }
                at
            };
            if let Some(at) = at {
                pods_on[at].push(i);
                used_all[at].add(f.requests);
                if f.reschedulable {
                    load[at].add(f.requests);
                    movable_on[at].push(i);
                }
            }
        }
        let pdb_allowed = input
            .pdbs
            .iter()
            .enumerate()
            .map(|(i, p)| p.allowed_from(expected[i], healthy[i]))
            .collect();
        let disrupting: Vec<bool> = input.nodes.iter().map(NodeInfo::disrupting).collect();
        let room: Vec<[i64; 3]> = input
            .nodes
            .iter()
            .zip(&used_all)
            .map(|(n, used)| capstan_sched::snapshot::room(&n.node, used))
            .collect();
        let mut labelled_pools: Vec<String> = Vec::new();
        let labelled_pool: Vec<Option<usize>> = input
            .nodes
            .iter()
            .map(|n| {
                let name = n.nodepool.as_deref()?;
                Some(match labelled_pools.iter().position(|p| p == name) {
                    Some(k) => k,
                    None => {
                        labelled_pools.push(name.to_string());
                        labelled_pools.len() - 1
                    }
                })
            })
            .collect();
        let capacity: Vec<capstan_model::Resources> = input
            .nodes
            .iter()
            .map(|n| n.node.capacity_or_allocatable().clone())
            .collect();
        let free: Vec<capstan_model::Resources> = input
            .nodes
            .iter()
            .zip(&used_all)
            .zip(&disrupting)
            .map(|((n, used), &disrupting)| {
                if disrupting {
                    capstan_model::Resources::new()
                } else {
                    let a = &n.node.allocatable;
                    capstan_model::Resources {
                        cpu: (a.cpu - used.cpu).max(0),
                        memory: (a.memory - used.memory).max(0),
                        pods: (n.node.max_pods() - used.pods).max(0),
                        ..Default::default()
                    }
                }
            })
            .collect();
        let moving = pods_on
            .iter()
            .zip(input.nodes)
            .filter(|(_, n)| n.node.deleting)
            .flat_map(|(ps, _)| ps.iter().copied())
            .filter(|&p| {
                capstan_model::pdb::moves_ahead_of_drain(&input.pods[p], input.pdbs, input.now)
            })
            .collect();
        let unit_price = input
            .nodepools
            .iter()
            .map(|np| {
                let (mut c, mut m) = (f64::INFINITY, f64::INFINITY);
                for t in input.instance_types {
                    if !capstan_sched::predicates::type_compatible(t, &np.requirements) {
                        continue;
                    }
                    for o in &t.offerings {
                        if o.available && offering_allowed(o, &np.requirements) {
                            if t.allocatable.cpu > 0 {
                                c = c.min(o.price / t.allocatable.cpu as f64);
                            }
                            if t.allocatable.memory > 0 {
                                m = m.min(o.price / t.allocatable.memory as f64);
                            }
                        }
                    }
                }
                (c, m)
            })
            .collect();
        Engine {
            input,
            pods_on,
            pool_of,
            budget: BTreeMap::new(),
            spent: BTreeMap::new(),
            taken: BTreeSet::new(),
            pdb_allowed,
            pdbs_of,
            pdb_sets,
            gates,
            movable_on,
            moving,
            pool_hash: input.nodepools.iter().map(template_hash).collect(),
            free_total: free
                .iter()
                .fold(capstan_model::Resources::new(), |mut t, r| {
                    t.add(r);
                    t
                }),
            free,
            load,
            used: used_all,
            bound_anti,
            unit_price,
            node_requirements: vec![std::cell::OnceCell::new(); input.nodes.len()],
            disrupting,
            daemons_used: vec![std::cell::OnceCell::new(); input.nodes.len()],
            room,
            labelled_pools,
            labelled_pool,
            capacity,
            warm: Vec::new(),
        }
    }

    /// Free capacity on the nodes outside `set` that can take pods: every node's, less the
    /// taken nodes' and the set's (each node once), rather than a pass over every node.
    fn free_outside(&self, set: &[usize]) -> capstan_model::Resources {
        let mut f = self.free_total.clone();
        for &i in &self.taken {
            f.sub(&self.free[i]);
        }
        for (k, &i) in set.iter().enumerate() {
            if !self.taken.contains(&i) && !set[..k].contains(&i) {
                f.sub(&self.free[i]);
            }
        }
        f
    }

    /// A lower bound on what replacements for `set` cost: the pods' CPU and memory that the
    /// other nodes cannot hold even together, bought at the cheapest price per unit. If the
    /// nodes cost no more than this, no consolidation of them can save money.
    fn replacement_bound(&self, set: &[usize]) -> f64 {
        let mut need = capstan_model::Resources::new();
        for &i in set {
            need = need.plus(&self.load[i]);
        }
        let free = self.free_outside(set);
        let cpu = (need.cpu - free.cpu).max(0) as f64;
        let mem = (need.memory - free.memory).max(0) as f64;
        let mut bound = f64::INFINITY;
        for &i in set {
            if let Some(p) = self.pool_of[i] {
                let (c, m) = self.unit_price[p];
                let b = (cpu * c).max(mem * m);
                bound = bound.min(if b.is_nan() { 0.0 } else { b });
            }
        }
        if bound.is_finite() { bound } else { 0.0 }
    }

    /// Whether the node's pods could fit on the other nodes by resources alone (a necessary
    /// condition for deleting it without a replacement).
    fn might_fit_elsewhere(&self, node: usize) -> bool {
        let need = &self.load[node];
        let free = self.free_outside(&[node]);
        need.cpu <= free.cpu && need.memory <= free.memory && need.pods <= free.pods
    }

    /// Pods that move when the node goes (`Pod::reschedulable`).
    fn movable_pods(&self, node: usize) -> &[usize] {
        &self.movable_on[node]
    }

    /// The price of the cheapest available offering in `pool` whose allocatable holds the
    /// sum of the node's movable pods' requests: no single replacement can cost less, so a
    /// replace that would not be cheaper than the node is known to fail without a solve.
    fn cheapest_single_replacement(&self, node: usize, pool: usize) -> f64 {
        let input = self.input;
        let np = &input.nodepools[pool];
        let mut need = capstan_model::Resources::new();
        for &p in self.movable_pods(node) {
            need = need.plus(&input.pods[p].requests);
        }
        input
            .instance_types
            .iter()
            .filter(|t| need.fits_in(&t.allocatable))
            .filter(|t| capstan_sched::predicates::type_compatible(t, &np.requirements))
            .flat_map(|t| t.offerings.iter())
            .filter(|o| o.available && offering_allowed(o, &np.requirements))
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    }

    /// Records `n` more (or, negative, fewer) disruptions decided in `pool`.
    fn spend(&mut self, pool: usize, n: i64) {
        *self.spent.entry(pool).or_default() += n;
    }

    fn remaining_budget(&mut self, pool: usize, reason: Reason) -> i64 {
        let input = self.input;
        let spent = self.spent.get(&pool).copied().unwrap_or(0);
        let base = *self.budget.entry((pool, reason)).or_insert_with(|| {
            let np = &input.nodepools[pool];
            // Karpenter's count: initialized nodes make the total; of those, NotReady and
            // going ones use the budget up (a cordon does not).
            let mine: Vec<&NodeInfo> = input
                .nodes
                .iter()
                .filter(|n| n.nodepool.as_deref() == Some(&np.name) && n.initialized)
                .collect();
            let disrupting = mine.iter().filter(|n| n.node.budget_disrupting()).count() as i64;
            let allowed = np.budgets.allows(reason, mine.len() as i64, input.now);
            if allowed == i64::MAX {
                allowed
            } else {
                (allowed - disrupting).max(0)
            }
        });
        if base == i64::MAX {
            base
        } else {
            (base - spent).max(0)
        }
    }

    /// Why a node may not be disrupted voluntarily, if it may not.
    fn voluntary_block(&self, node: usize) -> Option<String> {
        self.node_block(node).or_else(|| self.pod_block(node))
    }

    /// What blocks drift of a node whose NodePool has a terminationGracePeriod: only the node
    /// itself (not initialized, already going, annotated do-not-disrupt) — as Karpenter's
    /// eventual disruption, its pods' do-not-disrupt and PDBs hold the drain (up to that
    /// period), not the decision.
    fn eventual_block(&self, node: usize) -> Option<String> {
        self.node_block(node)
    }

    fn node_block(&self, node: usize) -> Option<String> {
        let n = &self.input.nodes[node];
        if !n.initialized {
            return Some("not initialized yet".into());
        }
        if n.disrupting() {
            return Some("already disrupting, cordoned or not ready".into());
        }
        if n.node
            .annotations
            .get(DO_NOT_DISRUPT)
            .or_else(|| n.node.annotations.get("karpenter.sh/do-not-disrupt"))
            .is_some_and(|v| v == "true")
        {
            return Some("node annotated do-not-disrupt".into());
        }
        None
    }

    /// What a node's pods block, as Karpenter's candidate check: an active `do-not-disrupt`
    /// pod (a terminating one is going anyway), or a PDB that allows no eviction of a pod
    /// the drain evicts — DaemonSet pods included, mirror and terminating pods not.
    fn pod_block(&self, node: usize) -> Option<String> {
        for &p in &self.pods_on[node] {
            let g = self.gates[p];
            if g.deleting || !g.may_hold {
                continue;
            }
            if let Some(why) = self.input.pods[p].do_not_disrupt(self.input.now) {
                return Some(why);
            }
        }
        let evicted: Vec<usize> = self.pods_on[node]
            .iter()
            .copied()
            .filter(|&p| !self.gates[p].deleting && !self.gates[p].mirror)
            .collect();
        self.pdb_block(&evicted)
    }

    /// Whether PDBs let these pods be evicted, as Karpenter decides it: a PDB that allows no
    /// disruption now blocks; one that allows some lets the drain go in waves within it (the
    /// eviction API refuses the rest until the moved pods run again).
    /// The PDBs that limit evicting pod `p` (`Pdb::limits`).
    fn limiting_pdbs(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let pod = &self.input.pods[p];
        self.pdb_sets[self.pdbs_of[p]]
            .iter()
            .copied()
            .filter(move |&i| self.input.pdbs[i].limits(pod))
    }

    fn pdb_block(&self, pods: &[usize]) -> Option<String> {
        pods.iter()
            .flat_map(|&p| self.limiting_pdbs(p))
            .find(|&i| self.pdb_allowed[i] <= 0)
            .map(|i| {
                format!(
                    "pdb {} allows {} disruptions",
                    self.input.pdbs[i].key(),
                    self.pdb_allowed[i].max(0)
                )
            })
    }

    /// Simulates moving the pods of `candidates` onto the other nodes (and, when `launch`,
    /// onto new nodes from the NodePools) — any of them, even one still under its
    /// `consolidateAfter` (where Karpenter moves no pods; see ARCHITECTURE.md).
    fn simulate(&self, candidates: &[usize], launch: bool) -> (Vec<Arc<Pod>>, Plan) {
        let input = self.input;
        let mut gone = vec![false; input.nodes.len()];
        for &c in candidates {
            gone[c] = true;
        }
        // The solver reads nothing of a pending pod's binding, so the pods go as they are:
        // the candidates' first, then those moving off deleting nodes.
        let pending: Vec<Arc<Pod>> = candidates
            .iter()
            .flat_map(|&c| self.movable_pods(c).iter().copied())
            .chain(self.moving.iter().copied())
            .map(|p| {
                if input.ignore_preferences {
                    Arc::new(input.pods[p].without_preferences())
                } else {
                    input.pods[p].clone()
                }
            })
            .collect();
        let mut b = SnapshotBuilder::new(&pending, self.bound_anti);
        b.daemonsets(input.daemonsets.iter().cloned());
        let mut counted = vec![(0i64, capstan_model::Resources::new()); self.labelled_pools.len()];
        for (i, n) in input.nodes.iter().enumerate() {
            if gone[i] || self.disrupting[i] || self.taken.contains(&i) {
                continue;
            }
            // A node without room for any of these pods is counted against its NodePool's
            // limits only (as the builder would), from the room worked out once; summed per
            // NodePool here, handed to the builder below.
            if b.leaves_out_room(self.room[i]) {
                if let Some(k) = self.labelled_pool[i] {
                    let (count, capacity) = &mut counted[k];
                    *count += 1;
                    capacity.add(&self.capacity[i]);
                }
                continue;
            }
            let pods = self.pods_on[i].iter().map(|&p| &input.pods[p]);
            // A node's labels become requirements, and its DaemonSet pods' requests are
            // summed, once per evaluation, not once per what-if.
            let reqs = Some(
                self.node_requirements[i]
                    .get_or_init(|| Arc::new(Requirements::from_labels(&n.node.labels))),
            );
            let daemons = b.summarizes().then(|| {
                self.daemons_used[i]
                    .get_or_init(|| capstan_sched::snapshot::daemons_used(pods.clone()))
            });
            b.node_with_requirements(
                &n.node,
                reqs,
                n.nodepool.as_deref(),
                pods,
                &self.used[i],
                daemons,
            );
        }
        for (pool, (count, capacity)) in self.labelled_pools.iter().zip(&counted) {
            if *count > 0 {
                b.counted_many(pool, *count, capacity);
            }
        }
        let mut snapshot = b.build();
        snapshot.warm.clone_from(&self.warm);
        let pools: Vec<NodePool> = if launch {
            input.nodepools.to_vec()
        } else {
            Vec::new()
        };
        let plan = solve(
            SolveInput {
                snapshot: &snapshot,
                pending: &pending,
                nodepools: &pools,
                instance_types: input.instance_types,
            },
            &SolveOptions {
                skip_diagnosis: true,
                ..Default::default()
            },
        );
        (pending, plan)
    }

    /// A command for the candidates if every pod finds a place (and, for consolidation, the
    /// result is strictly cheaper).
    fn command(
        &self,
        reason: Reason,
        candidates: &[usize],
        launch: bool,
        must_save: bool,
    ) -> Option<Command> {
        let input = self.input;
        let (pending, plan) = self.simulate(candidates, launch);
        if !plan.unschedulable.is_empty() {
            return None;
        }
        // Pods moving off deleting nodes need a node of their own: the provisioner is getting
        // it, and no command is decided until they have their room.
        let own = pending.len() - self.moving.len();
        if plan
            .new_claims
            .iter()
            .any(|c| c.pods.iter().any(|&p| p >= own))
        {
            return None;
        }
        let before: f64 = candidates.iter().map(|&c| input.nodes[c].price).sum();
        let after = plan.new_price();
        if must_save && after >= before - 1e-9 {
            return None;
        }
        if must_save
            && candidates.len() > 1
            && !self.multi_node_replacement_valid(candidates, &plan)
        {
            return None;
        }
        // Spot to spot, as Karpenter allows it: behind its feature gate; a single node only with
        // enough cheaper spot types, so the replacement does not chase one pool into the next
        // interruption (several nodes into fewer need no such check, as in Karpenter); the
        // replacement is launched over the 15 cheapest of them.
        let mut spot_options: Vec<Vec<usize>> = vec![Vec::new(); plan.new_claims.len()];
        if must_save
            && candidates
                .iter()
                .all(|&c| input.nodes[c].capacity_type == CAPACITY_SPOT)
            && plan.new_claims.iter().any(|c| {
                c.offering.capacity_type == CAPACITY_SPOT
                    || c.requirements.allows(labels::CAPACITY_TYPE, CAPACITY_SPOT)
            })
        {
            // Karpenter looks at what the replacement may be, not at the offering it would
            // pick: with the gate off, a spot node whose replacement could be spot is not
            // replaced at all (only deleted), even by a cheaper on-demand node.
            if !input.spot_to_spot {
                return None;
            }
            if candidates.len() == 1 {
                for (k, c) in plan.new_claims.iter().enumerate() {
                    if c.offering.capacity_type == CAPACITY_SPOT {
                        let mut cheaper: Vec<(f64, usize)> = c
                            .instance_types
                            .iter()
                            .filter_map(|&t| {
                                input.instance_types[t]
                                    .offerings
                                    .iter()
                                    .filter(|o| {
                                        o.available
                                            && o.capacity_type == CAPACITY_SPOT
                                            && o.price < before
                                            && c.requirements.allows(labels::ZONE, &o.zone)
                                            && zone_id_allowed(
                                                o.zone_id.as_deref(),
                                                &c.requirements,
                                            )
                                    })
                                    .map(|o| o.price)
                                    .min_by(f64::total_cmp)
                                    .map(|p| (p, t))
                            })
                            .collect();
                        // At least 15 options, or the instance-type minValues if more
                        // (Karpenter's truncation keeps the larger of the two).
                        let keep = c
                            .requirements
                            .get(labels::INSTANCE_TYPE)
                            .and_then(|r| r.min_values)
                            .map_or(MIN_SPOT_OPTIONS, |m| MIN_SPOT_OPTIONS.max(m as usize));
                        if cheaper.len() < keep {
                            return None;
                        }
                        cheaper.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                        spot_options[k] = cheaper.into_iter().take(keep).map(|(_, t)| t).collect();
                    }
                }
            }
        }
        let mut moves = Vec::new();
        for b in &plan.existing {
            for &p in b.pods.iter().filter(|&&p| p < own) {
                moves.push(Move {
                    pod: pending[p].key(),
                    to: Target::Node(b.node.clone()),
                });
            }
        }
        let replacements: Vec<Replacement> = plan
            .new_claims
            .iter()
            .zip(spot_options)
            .map(|(c, spot_options)| Replacement {
                nodepool: c.nodepool.clone(),
                instance_type: c.offering.instance_type,
                capacity_type: c.offering.capacity_type.clone(),
                zone: c.offering.zone.clone(),
                price: c.offering.price,
                requirements: if spot_options.is_empty() {
                    capstan_model::Requirements::new()
                } else {
                    c.requirements.clone()
                },
                spot_options,
                warm: c.warm,
            })
            .collect();
        for (k, c) in plan.new_claims.iter().enumerate() {
            for &p in &c.pods {
                moves.push(Move {
                    pod: pending[p].key(),
                    to: Target::Replacement(k),
                });
            }
        }
        moves.sort_by(|a, b| a.pod.cmp(&b.pod));
        let movable: Vec<usize> = candidates
            .iter()
            .flat_map(|&c| self.movable_pods(c).iter().copied())
            .collect();
        let waves = self.drain(&movable);
        let cap = candidates
            .iter()
            .filter_map(|&c| self.pool_of[c])
            .filter_map(|p| input.nodepools[p].termination_grace_period_seconds)
            .min()
            .map(|s| s as f64);
        let drain_seconds = self.drain_seconds(&waves, cap);
        let drain: Vec<Vec<String>> = waves
            .iter()
            .map(|w| w.iter().map(|&p| input.pods[p].key()).collect())
            .collect();
        Some(Command {
            reason,
            candidates: candidates
                .iter()
                .map(|&c| input.nodes[c].node.name.clone())
                .collect(),
            replacements,
            moves,
            savings: before - after,
            drain,
            drain_seconds,
        })
    }

    /// Karpenter's rules for a multi-node consolidation's launch: at most one replacement, and
    /// when that replacement could be of a type being removed, it must be cheaper than the
    /// cheapest removed node of such a type — otherwise keeping that node and deleting the
    /// others saves as much and moves fewer pods (Karpenter's `filterOutSameInstanceType`).
    fn multi_node_replacement_valid(&self, candidates: &[usize], plan: &Plan) -> bool {
        let Some(claim) = plan.new_claims.first() else {
            return true;
        };
        if plan.new_claims.len() > 1 {
            return false;
        }
        let input = self.input;
        let max_price = candidates
            .iter()
            .filter_map(|&c| {
                let n = &input.nodes[c];
                n.instance_type
                    .filter(|t| claim.instance_types.contains(t))
                    .map(|_| n.price)
            })
            .fold(f64::INFINITY, f64::min);
        claim.offering.price < max_price - 1e-9
    }

    /// Eviction waves: lowest priority first; a wave never takes more of a PDB's pods than it
    /// allows (at least one, so a forceful drain still progresses).
    fn drain(&self, pods: &[usize]) -> Vec<Vec<usize>> {
        let allowance: Vec<i64> = self.pdb_allowed.iter().map(|a| (*a).max(1)).collect();
        let mut order: Vec<usize> = pods.to_vec();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&self.input.pods[a], &self.input.pods[b]);
            pa.priority
                .cmp(&pb.priority)
                .then_with(|| pa.key_bytes().cmp(pb.key_bytes()))
        });
        let mut waves: Vec<Vec<usize>> = Vec::new();
        let mut left = order;
        while !left.is_empty() {
            let mut used = vec![0i64; allowance.len()];
            let mut wave = Vec::new();
            let mut rest = Vec::new();
            for p in left {
                if self.limiting_pdbs(p).all(|i| used[i] < allowance[i]) {
                    self.limiting_pdbs(p).for_each(|i| used[i] += 1);
                    wave.push(p);
                } else {
                    rest.push(p);
                }
            }
            waves.push(wave);
            left = rest;
        }
        waves
    }

    /// Σ over waves of the longest grace period in the wave (Kubernetes' default 30 s), all of
    /// it capped by `cap` (the NodePool's terminationGracePeriod: past it, pods are deleted).
    fn drain_seconds(&self, waves: &[Vec<usize>], cap: Option<f64>) -> f64 {
        let grace = |p: usize| self.input.pods[p].grace_seconds();
        let total: f64 = waves
            .iter()
            .map(|w| w.iter().map(|&p| grace(p)).fold(0.0, f64::max))
            .sum();
        cap.map_or(total, |c| total.min(c))
    }

    fn age(&self, node: usize) -> Option<f64> {
        self.input.nodes[node].created.map(|c| self.input.now - c)
    }

    /// Whether `consolidateAfter` has passed since the node's last pod event (or, without
    /// one, since it was created).
    fn settled(&self, node: usize, after: Option<u64>) -> bool {
        let n = &self.input.nodes[node];
        if let Some(c) = n.consolidatable {
            return after.is_some() && c;
        }
        let since = n.last_pod_event.or(n.created);
        after.is_some_and(|after| since.is_none_or(|t| self.input.now - t >= after as f64))
    }

    /// Karpenter's `InstanceTypeNotFound` drift: a node over an hour old whose instance type
    /// the catalog no longer lists, or lists with no offering in the node's zone and capacity
    /// type (as its labels say; an unlabelled one constrains nothing) — the type was retired
    /// or the NodeClass no longer allows it. Not while the provider cannot list the types.
    fn instance_type_gone(&self, node: usize) -> Option<String> {
        let n = &self.input.nodes[node];
        if n.types_unknown || !n.created.is_some_and(|c| self.input.now - c > 3600.0) {
            return None;
        }
        let Some(t) = n.instance_type else {
            return Some(match n.node.labels.get(labels::INSTANCE_TYPE) {
                Some(t) => format!("instance type {t} is no longer offered"),
                None => "the node has no instance type".into(),
            });
        };
        let zone = n.node.labels.get(labels::ZONE);
        let capacity = n.node.labels.get(labels::CAPACITY_TYPE);
        let t = &self.input.instance_types[t];
        let offered = t.offerings.iter().any(|o| {
            zone.is_none_or(|z| *z == o.zone) && capacity.is_none_or(|c| *c == o.capacity_type)
        });
        (!offered).then(|| {
            format!(
                "instance type {} has no offering in {} {}",
                t.name,
                zone.map_or("any zone", String::as_str),
                capacity.map_or("", String::as_str)
            )
        })
    }

    fn drifted(&self, node: usize, pool: usize) -> Option<String> {
        let n = &self.input.nodes[node];
        let np = &self.input.nodepools[pool];
        if let Some(d) = &n.provider_drift {
            return Some(d.clone());
        }
        // A hash of another serialization version says nothing (it is re-annotated instead).
        let version = n
            .node
            .annotations
            .get(NODEPOOL_HASH_VERSION)
            .map(String::as_str);
        if let (Some(h), Some(capstan_model::nodepool::TEMPLATE_HASH_VERSION)) =
            (n.node.annotations.get(NODEPOOL_HASH), version)
        {
            if *h != self.pool_hash[pool] {
                return Some("nodepool template changed".into());
            }
        }
        if let Some(why) = self.instance_type_gone(node) {
            return Some(why);
        }
        // Requirements are not in the hash: a node drifts on them only when it no longer
        // satisfies them. A label the pool constrains whose value it no longer allows, or a
        // custom label the pool now fixes (a launch would set it) that the node lacks. A
        // well-known key the node lacks is one its instance type does not define, so a
        // replacement would lack it too; an `Exists` the pods did not narrow sets no label.
        for r in np.requirements.iter() {
            match n.node.labels.get(&r.key) {
                Some(v) if !r.has(v) => return Some(format!("node no longer satisfies {r}")),
                None if !capstan_model::labels::is_well_known(&r.key)
                    && !r.is_complement()
                    && r.values().len() == 1 =>
                {
                    return Some(format!("node lacks the label {r} requires"));
                }
                _ => {}
            }
        }
        None
    }
}

/// What to do now. See the crate docs.
pub fn evaluate(input: Input<'_>) -> Evaluation {
    let mut e = Engine::new(input);
    let mut out = Evaluation {
        before: input.nodes.iter().map(|n| n.price).sum(),
        ..Default::default()
    };
    // Per node: why it cannot go (the last reason set, or the first where `get_or_insert`).
    let mut blocked: Vec<Option<String>> = vec![None; input.nodes.len()];
    let managed: Vec<usize> = (0..input.nodes.len())
        .filter(|&i| e.pool_of[i].is_some())
        .collect();

    // Expiry: forceful.
    for &i in &managed {
        let pool = &input.nodepools[e.pool_of[i].expect("managed")];
        let (Some(age), Some(limit)) = (e.age(i), input.nodes[i].expire_after_seconds(pool)) else {
            continue;
        };
        if age >= limit as f64 && !input.nodes[i].disrupting() {
            if let Some(mut c) = e.command(Reason::Expired, &[i], true, false) {
                c.savings = c.savings.max(0.0);
                e.taken.insert(i);
                out.commands.push(c);
            } else {
                blocked[i] = Some("expired, but its pods fit nowhere".into());
            }
        }
    }

    // Emptiness, then drift (Karpenter's order: an empty node costs nothing to remove):
    // empty drifted nodes first, then the earliest drifted (the oldest node where that is not
    // known), within budgets, PDBs and do-not-disrupt.
    let mut empty: Vec<usize> = Vec::new();
    let mut oldest_first = managed.clone();
    // Ties go by name: by index where the nodes come in name order, each name once (a
    // cache's do), which is the same order without comparing names.
    let by_name = input.nodes.is_sorted_by(|a, b| a.node.name < b.node.name);
    oldest_first.sort_by(|&a, &b| {
        let n = |i: usize| &input.nodes[i];
        let since = |i: usize| n(i).drifted_at.or(n(i).created).unwrap_or(f64::INFINITY);
        (!e.movable_pods(a).is_empty())
            .cmp(&!e.movable_pods(b).is_empty())
            .then(since(a).total_cmp(&since(b)))
            .then_with(|| match by_name {
                true => a.cmp(&b),
                false => n(a).node.name.cmp(&n(b).node.name),
            })
    });
    for (reason, order) in [(Reason::Empty, &managed), (Reason::Drifted, &oldest_first)] {
        for &i in order {
            if e.taken.contains(&i) {
                continue;
            }
            let p = e.pool_of[i].expect("managed");
            let np = &input.nodepools[p];
            // A static NodePool's (`replicas`) nodes are not consolidated, empty or not.
            let applies = match reason {
                Reason::Drifted => e.drifted(i, p).is_some(),
                _ => {
                    np.replicas.is_none()
                        && e.movable_pods(i).is_empty()
                        && e.settled(i, np.consolidate_after_seconds)
                }
            };
            if !applies {
                continue;
            }
            let eventual =
                reason == Reason::Drifted && np.termination_grace_period_seconds.is_some();
            let block = if eventual {
                e.eventual_block(i)
            } else {
                e.voluntary_block(i)
            };
            if let Some(why) = block {
                blocked[i] = Some(why);
                continue;
            }
            *out.eligible.entry(reason).or_default() += 1;
            if e.remaining_budget(p, reason) <= 0 {
                let why = match np.budgets.error() {
                    Some(e) => format!(
                        "nodepool {} allows no disruption: its budgets do not compile ({e})",
                        np.name
                    ),
                    None => format!(
                        "budget for nodepool {} allows 0 {} disruptions now",
                        np.name,
                        reason.as_str()
                    ),
                };
                blocked[i] = Some(why);
                continue;
            }
            if reason == Reason::Empty {
                // Like Karpenter, empty nodes go together: one command below.
                e.spend(p, 1);
                e.taken.insert(i);
                empty.push(i);
                continue;
            }
            let Some(c) = e.command(reason, &[i], reason == Reason::Drifted, false) else {
                blocked[i] = Some("its pods fit nowhere else".into());
                continue;
            };
            e.spend(p, 1);
            e.taken.insert(i);
            out.commands.push(c);
        }
        if reason == Reason::Empty && !empty.is_empty() {
            match e.command(Reason::Empty, &empty, false, false) {
                Some(c) => out.commands.push(c),
                None => {
                    for &i in &empty {
                        e.taken.remove(&i);
                        let p = e.pool_of[i].expect("managed");
                        e.spend(p, -1);
                        blocked[i] = Some("its pods fit nowhere else".into());
                    }
                }
            }
        }
    }

    // Consolidation of underutilized nodes.
    let mut candidates: Vec<usize> = managed
        .iter()
        .copied()
        .filter(|&i| !e.taken.contains(&i))
        .filter(|&i| {
            let np = &input.nodepools[e.pool_of[i].expect("managed")];
            np.consolidation_policy == ConsolidationPolicy::WhenEmptyOrUnderutilized
                && np.replicas.is_none()
                && e.settled(i, np.consolidate_after_seconds)
        })
        .collect();
    candidates.retain(|&i| match e.voluntary_block(i) {
        Some(why) => {
            blocked[i].get_or_insert(why);
            false
        }
        None => true,
    });
    if !candidates.is_empty() {
        out.eligible.insert(Reason::Underutilized, candidates.len());
    }
    // Cheapest to disrupt first, as Karpenter orders candidates (its `DisruptionCost`): the
    // eviction costs of the pods to move, scaled by the share of the node's lifetime left; on a
    // tie the most expensive node first.
    // Each candidate's cost is reckoned once, not at every comparison of the ordering.
    let mut costs = vec![0.0f64; input.nodes.len()];
    for &i in &candidates {
        let pods: f64 = e
            .movable_pods(i)
            .iter()
            .map(|&p| eviction_cost(&input.pods[p]))
            .sum();
        let pool = &input.nodepools[e.pool_of[i].expect("managed")];
        costs[i] = pods * lifetime_remaining(e.age(i), input.nodes[i].expire_after_seconds(pool));
    }
    candidates = heap::ordered(candidates, |&a, &b| {
        costs[a]
            .total_cmp(&costs[b])
            .then(input.nodes[b].price.total_cmp(&input.nodes[a].price))
            .then(a.cmp(&b))
    });
    candidates.retain(|&i| {
        let p = e.pool_of[i].expect("managed");
        if e.remaining_budget(p, Reason::Underutilized) > 0 {
            true
        } else {
            let name = &input.nodepools[p].name;
            blocked[i].get_or_insert(format!(
                "budget for nodepool {name} allows 0 Underutilized disruptions now"
            ));
            false
        }
    });
    let mut consolidated = false;
    // Multi-node: the longest prefix (binary search, up to 100 nodes) that is cheaper together.
    let mut lo = 2usize;
    let mut hi = candidates.len().min(100);
    let mut best: Option<(Command, usize)> = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        let set = &candidates[..mid];
        let within_budget = {
            let mut per_pool: BTreeMap<usize, i64> = BTreeMap::new();
            set.iter()
                .for_each(|&i| *per_pool.entry(e.pool_of[i].expect("managed")).or_default() += 1);
            per_pool
                .iter()
                .all(|(&p, &n)| e.remaining_budget(p, Reason::Underutilized) >= n)
        };
        let price: f64 = set.iter().map(|&i| input.nodes[i].price).sum();
        let cmd = if within_budget
            && e.replacement_bound(set) < price - 1e-9
            && e.pdb_block(
                &set.iter()
                    .flat_map(|&i| e.movable_pods(i).iter().copied())
                    .collect::<Vec<_>>(),
            )
            .is_none()
        {
            e.command(Reason::Underutilized, set, true, true)
        } else {
            None
        };
        match cmd {
            Some(c) => {
                best = Some((c, mid));
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    if let Some((c, mid)) = best {
        // The command's candidates are these nodes, in this order.
        for &i in &candidates[..mid] {
            e.taken.insert(i);
            let p = e.pool_of[i].expect("managed");
            e.spend(p, 1);
        }
        out.commands.push(c);
        consolidated = true;
    }
    // Single node: delete, or replace with one cheaper node — the cheapest-to-disrupt
    // candidates first, at most `SINGLE_NODE_ATTEMPTS` of them per evaluation (Karpenter
    // bounds this search with a timeout; a count keeps the engine deterministic).
    if !consolidated {
        for &i in candidates.iter().take(SINGLE_NODE_ATTEMPTS) {
            let p = e.pool_of[i].expect("managed");
            if e.remaining_budget(p, Reason::Underutilized) <= 0 {
                continue;
            }
            let delete = if e.might_fit_elsewhere(i) {
                e.command(Reason::Underutilized, &[i], false, true)
            } else {
                None
            };
            let c = delete.or_else(|| {
                // Skip the replace what-if when no single node could be cheaper.
                if e.cheapest_single_replacement(i, p) >= input.nodes[i].price - 1e-9 {
                    return None;
                }
                e.command(Reason::Underutilized, &[i], true, true)
                    .filter(|c| c.replacements.len() <= 1)
            });
            if let Some(c) = c {
                e.spend(p, 1);
                e.taken.insert(i);
                out.commands.push(c);
                break;
            }
        }
    }
    // In name order, one entry a name.
    let named = blocked
        .into_iter()
        .enumerate()
        .filter_map(|(i, why)| Some((input.nodes[i].node.name.clone(), why?)));
    out.blocked = if by_name {
        named
            .map(|(node, reason)| Blocked { node, reason })
            .collect()
    } else {
        named
            .collect::<BTreeMap<String, String>>()
            .into_iter()
            .map(|(node, reason)| Blocked { node, reason })
            .collect()
    };
    out.after = out.before - out.commands.iter().map(|c| c.savings).sum::<f64>();
    out
}

/// The command for a spot interruption warning: replace the node and drain it before the
/// reclaim time, `seconds_left` from now. Budgets, PDB waits and do-not-disrupt do not stop it
/// (the node goes anyway); when waves would outlast the deadline, every pod is evicted at once.
/// The replacement may start one of the cloud's `warm` instances, as the provisioner's plans
/// do: its pods have a deadline, and a warm start comes well within it where a boot may not.
pub fn interruption(
    input: Input<'_>,
    node: &str,
    reason: Reason,
    seconds_left: f64,
    warm: &[capstan_model::Warm],
) -> Option<Command> {
    let mut e = Engine::new(input);
    e.warm = warm.to_vec();
    let i = input.nodes.iter().position(|n| n.node.name == node)?;
    let mut c = e.command(reason, &[i], true, false)?;
    c.savings = c.savings.max(0.0);
    if c.drain_seconds > seconds_left && c.drain.len() > 1 {
        c.drain = vec![c.drain.concat()];
        c.drain_seconds = e.drain_seconds(&[e.movable_pods(i).to_vec()], Some(seconds_left));
    }
    c.drain_seconds = c.drain_seconds.min(seconds_left);
    Some(c)
}

/// A rebalance recommendation (elevated interruption risk) for a spot node: in NodePools that
/// opt in (annotation `capstan.dev/spot-rebalance: "true"`), a voluntary replacement within
/// budgets, PDBs and do-not-disrupt; elsewhere nothing.
pub fn rebalance(input: Input<'_>, node: &str) -> Result<Option<Command>, Blocked> {
    let mut e = Engine::new(input);
    let Some(i) = input.nodes.iter().position(|n| n.node.name == node) else {
        return Ok(None);
    };
    let Some(p) = e.pool_of[i] else {
        return Ok(None);
    };
    if !input.nodepools[p].spot_rebalance {
        return Ok(None);
    }
    let blocked = |reason: String| Blocked {
        node: node.to_string(),
        reason,
    };
    if let Some(why) = e.voluntary_block(i) {
        return Err(blocked(why));
    }
    if e.remaining_budget(p, Reason::Drifted) <= 0 {
        return Err(blocked(format!(
            "budget for nodepool {} allows 0 Drifted disruptions now",
            input.nodepools[p].name
        )));
    }
    Ok(e.command(Reason::Drifted, &[i], true, false))
}

#[cfg(test)]
mod tests;
