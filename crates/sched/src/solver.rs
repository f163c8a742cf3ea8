//! The scheduling loop: first fit over slots (nodes, in-flight claims, new claims), pods
//! sorted by CPU then memory descending, preferences relaxed one step at a time.

use crate::predicates::{PoolDaemons, pod_requirements, type_allows, type_values};
use crate::topology::{KeyConstraint, Owned, PodTopology, Topology, pin};
use crate::{
    Binding, ChosenOffering, ClaimOrder, NewClaim, Plan, SolveInput, SolveOptions, Unschedulable,
};
use capstan_model::catalog::{offering_allowed, zone_id_allowed};
use capstan_model::labels::{self, CAPACITY_TYPE, HOSTNAME, ZONE, ZONE_ID};
use capstan_model::pod::{HostPort, Pod, WhenUnsatisfiable};
use capstan_model::requirements::{Incompatible, Undefined};
use capstan_model::resources::{Shortfall, format_amount};
use capstan_model::taints::{Taint, untolerated};
use capstan_model::{InstanceType, Node, NodePool, Requirement, Requirements, Resources};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Plans where every pending pod goes. See the crate docs.
pub fn solve(input: SolveInput<'_>, options: &SolveOptions) -> Plan {
    solve_cutting(input, options, true)
}

/// Per NodePool: what its limits leave after existing nodes, in-flight claims and the claims
/// counted for it (`None`: the pool has no limits). A new claim holds, against the limits, the
/// largest capacity among its instance types (Karpenter reserves the same way), and one node.
pub fn limits_left(input: &SolveInput<'_>) -> Vec<Option<BTreeMap<String, i64>>> {
    input
        .nodepools
        .iter()
        .map(|p| {
            if p.limits.is_empty() {
                return None;
            }
            let mut left = p.limits.clone();
            let mine = |l: &BTreeMap<String, String>| {
                l.get(labels::NODEPOOL).is_some_and(|n| *n == p.name)
            };
            let used = input
                .snapshot
                .nodes
                .iter()
                .filter(|n| mine(&n.labels))
                .map(|n| (1, n.capacity_or_allocatable()))
                .chain(
                    input
                        .snapshot
                        .inflight
                        .iter()
                        .filter(|c| c.nodepool == p.name)
                        .map(|c| (1, &c.capacity)),
                )
                .chain(
                    input
                        .snapshot
                        .counted
                        .get(&p.name)
                        .map(|c| (c.nodes, &c.capacity)),
                );
            for (nodes, cap) in used {
                for (k, v) in left.iter_mut() {
                    *v -= if k == "nodes" { nodes } else { cap.get(k) };
                }
            }
            Some(left)
        })
        .collect()
}

/// What a new claim holds against its NodePool's limits: the largest capacity among its
/// instance types (with one node).
pub fn claim_holds(types: &[InstanceType], options: impl IntoIterator<Item = usize>) -> Resources {
    let mut held = Resources::new();
    for t in options {
        held.max_with(&types[t].capacity);
    }
    held
}

/// Whether new claims fit what their NodePools' limits leave ([`limits_left`], each claim
/// holding [`claim_holds`] and one node): how the scheduling core keeps limits, for a plan made
/// another way (the packing planner's).
pub fn within_limits(input: &SolveInput<'_>, claims: &[NewClaim]) -> bool {
    let left = limits_left(input);
    input.nodepools.iter().zip(&left).all(|(pool, left)| {
        let Some(left) = left else { return true };
        let mut nodes = 0;
        let mut held = Resources::new();
        for c in claims.iter().filter(|c| c.nodepool == pool.name) {
            nodes += 1;
            held.add(&claim_holds(
                input.instance_types,
                c.instance_types.iter().copied(),
            ));
        }
        left.iter().all(|(k, &v)| {
            let used = if k == "nodes" { nodes } else { held.get(k) };
            used <= v
        })
    })
}

/// [`solve`] with every pod tried, as it would be without [`Solver::cut_runs`]: what the
/// cut is checked against.
#[cfg(test)]
pub(crate) fn solve_uncut(input: SolveInput<'_>, options: &SolveOptions) -> Plan {
    solve_cutting(input, options, false)
}

fn solve_cutting(input: SolveInput<'_>, options: &SolveOptions, cut: bool) -> Plan {
    let mut s = Solver::new(input, options.clone(), cut);
    s.run();
    s.into_plan()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Node,
    InFlight,
    New { pool: usize },
}

#[derive(Clone, Debug)]
struct Slot {
    name: String,
    kind: SlotKind,
    /// Shared: a node's come from its labels, made once where the caller has them.
    reqs: Arc<Requirements>,
    undefined: Undefined,
    taints: Vec<Taint>,
    used: Resources,
    /// Fixed slots: allocatable. New slots: component-wise max over `options`.
    max: Resources,
    /// New slots: compatible instance types (indices), cheapest first.
    options: Vec<u32>,
    pods: Vec<usize>,
    ports: Vec<HostPort>,
    closed: bool,
    /// New slots in a NodePool with limits: the capacity held against them.
    reserved: Resources,
    /// New slots: the warm instance it starts (index into the snapshot's `warm`).
    warm: Option<usize>,
}

/// Why a slot refused a pod.
#[derive(Clone, Debug)]
enum Reject {
    Topology(usize),
    MissingTopologyLabel(String),
    Resources(Shortfall),
    /// The pod's requests do not fit what the slot has left (the shortfall is worked out only
    /// when a message needs it: most refusals are just the next slot's turn).
    NoRoom,
    Taint(Taint),
    HostPort(i32),
    Requirement(Incompatible),
    NoInstanceType,
    MinValues {
        key: String,
        have: usize,
        need: u32,
    },
    Closed,
}

/// What a successful fit changes.
struct Fit {
    reqs: Option<Requirements>,
    options: Option<Vec<u32>>,
}

/// Per pending pod: the groups it may own and the groups that count it.
#[derive(Default)]
struct PodGroups {
    spread_hard: Vec<usize>,
    spread_soft: Vec<usize>,
    req_aff: Vec<usize>,
    req_anti: Vec<usize>,
    pref_aff: Vec<usize>,
    pref_anti: Vec<usize>,
    selected_by: Vec<usize>,
    selected_by_anti: Vec<usize>,
}

/// How far a pod's preferences have been relaxed.
#[derive(Clone, Debug, Default)]
struct Relaxed {
    term: usize,
    pref_aff: usize,
    pref_anti: usize,
    pref_node: usize,
    soft: usize,
    tolerate_prefer: bool,
}

/// Distinct (zone, capacity type) pairs, so offering checks are bit masks.
struct OfferingIndex {
    pairs: Vec<(String, String)>,
    /// Per pair: its zone's ID, where the catalog knows it.
    zone_ids: Vec<Option<String>>,
    /// Per instance type: which pairs it has an available offering in.
    masks: Vec<u128>,
    /// Per instance type, per pair: the price, infinite where not offered.
    prices: Vec<Vec<f64>>,
}

impl OfferingIndex {
    fn new(types: &[InstanceType]) -> OfferingIndex {
        let mut pairs: Vec<(String, String)> = types
            .iter()
            .flat_map(|t| {
                t.offerings
                    .iter()
                    .map(|o| (o.zone.clone(), o.capacity_type.clone()))
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        pairs.truncate(128);
        let zone_ids = pairs
            .iter()
            .map(|(z, _)| {
                types
                    .iter()
                    .flat_map(|t| &t.offerings)
                    .find(|o| o.zone == *z && o.zone_id.is_some())
                    .and_then(|o| o.zone_id.clone())
            })
            .collect();
        let masks = types
            .iter()
            .map(|t| {
                let mut m = 0u128;
                for o in t.offerings.iter().filter(|o| o.available) {
                    if let Some(i) = pairs
                        .iter()
                        .position(|(z, c)| *z == o.zone && *c == o.capacity_type)
                    {
                        m |= 1 << i;
                    }
                }
                m
            })
            .collect();
        let prices = types
            .iter()
            .map(|t| {
                let mut p = vec![f64::INFINITY; pairs.len()];
                for o in t.offerings.iter().filter(|o| o.available) {
                    if let Some(i) = pairs
                        .iter()
                        .position(|(z, c)| *z == o.zone && *c == o.capacity_type)
                    {
                        p[i] = p[i].min(o.price);
                    }
                }
                p
            })
            .collect();
        OfferingIndex {
            pairs,
            zone_ids,
            masks,
            prices,
        }
    }

    /// The cheapest (price, pair) of type `t` within `mask`.
    fn cheapest(&self, t: usize, mask: u128) -> Option<(f64, usize)> {
        let mut best: Option<(f64, usize)> = None;
        let mut m = self.masks[t] & mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let p = self.prices[t][i];
            if best.is_none_or(|(bp, _)| p < bp) {
                best = Some((p, i));
            }
        }
        best
    }

    fn allowed(&self, reqs: &Requirements) -> u128 {
        let mut m = 0u128;
        for (i, (z, c)) in self.pairs.iter().enumerate() {
            if reqs.allows(ZONE, z)
                && reqs.allows(CAPACITY_TYPE, c)
                && zone_id_allowed(self.zone_ids[i].as_deref(), reqs)
            {
                m |= 1 << i;
            }
        }
        m
    }
}

struct Solver<'a> {
    input: SolveInput<'a>,
    options: SolveOptions,
    slots: Vec<Slot>,
    by_name: HashMap<String, usize>,
    open: Vec<usize>,
    topo: Topology,
    groups: Vec<PodGroups>,
    pool_order: Vec<usize>,
    pool_types: Vec<Vec<u32>>,
    /// Per pool: the warm instances it may start, as (entry of the snapshot's `warm`, type,
    /// offering pair), cheapest first.
    pool_warm: Vec<Vec<(usize, u32, usize)>>,
    /// Per entry of the snapshot's `warm`: how many are not yet taken by a new claim.
    warm_left: Vec<u32>,
    /// Per pool: the DaemonSets on its new nodes, per instance type.
    daemons: Vec<PoolDaemons>,
    /// Per pool, per catalog type (filled for the pool's types): what pods may use of a new
    /// node after the DaemonSets.
    capacity: Vec<Vec<Resources>>,
    /// Per pool with limits: limit minus what existing nodes use.
    limit_base: Vec<Option<BTreeMap<String, i64>>>,
    reserved_sum: Vec<Resources>,
    reserved_nodes: Vec<i64>,
    offerings: OfferingIndex,
    /// Label keys the instance types define beyond the well-known ones (a catalog's own
    /// labels): a NodePool that does not mention one leaves it to the types.
    type_keys: BTreeSet<String>,
    min_cpu: i64,
    min_memory: i64,
    claim_seq: Vec<usize>,
    placed: Vec<Option<usize>>,
    unschedulable: Vec<Unschedulable>,
    /// The pods to try, in order (Karpenter's: largest first).
    order: Vec<usize>,
    /// Pods left out of `order` as they can only fail, each with the pod kept that it fails
    /// as ([`Solver::cut_runs`]).
    cut: Vec<(usize, usize)>,
}

/// Whether a pod is one a warm instance starts for: one below priority 0 holds room for later
/// (the overprovisioning pattern's placeholders, capstan's headroom and forecast room) and
/// waits for a machine to boot, keeping the warm instances for the pods that wait now.
fn waits_now(pod: &Pod) -> bool {
    pod.priority >= 0
}

/// `a + b <= cap`, component-wise, without allocating (sums saturate, as `Resources::add`).
fn sum_fits(a: &Resources, b: &Resources, cap: &Resources) -> bool {
    a.cpu.saturating_add(b.cpu) <= cap.cpu
        && a.memory.saturating_add(b.memory) <= cap.memory
        && a.pods.saturating_add(b.pods) <= cap.pods
        && (cap.ephemeral_storage == 0
            || a.ephemeral_storage.saturating_add(b.ephemeral_storage) <= cap.ephemeral_storage)
        && b.extended.iter().all(|(k, v)| {
            a.extended.get(k).copied().unwrap_or(0).saturating_add(*v)
                <= cap.extended.get(k).copied().unwrap_or(0)
        })
}

/// What the pod lacks on the slot, for a message.
fn shortfall(slot: &Slot, pod: &Pod) -> Reject {
    Reject::Resources(
        slot.used
            .plus(&pod.requests)
            .shortfall(&slot.max)
            .unwrap_or(Shortfall {
                resource: "pods".into(),
                requested: 0,
                available: 0,
            }),
    )
}

impl<'a> Solver<'a> {
    /// `cut`: leave out the pods that can only fail ([`Solver::cut_runs`]).
    fn new(input: SolveInput<'a>, options: SolveOptions, cut: bool) -> Solver<'a> {
        let types = input.instance_types;
        let pools = input.nodepools;
        let offerings = OfferingIndex::new(types);

        // NodePools by weight (heaviest first), then name. A static NodePool (`replicas`)
        // launches for no pod.
        let mut pool_order: Vec<usize> = (0..pools.len())
            .filter(|&p| pools[p].replicas.is_none() && !pools[p].deleting)
            .collect();
        pool_order.sort_by(|&a, &b| {
            pools[b]
                .weight
                .cmp(&pools[a].weight)
                .then_with(|| pools[a].name.cmp(&pools[b].name))
        });

        // Instance types each pool can launch, cheapest first.
        let pool_types: Vec<Vec<u32>> = pools
            .iter()
            .map(|p| {
                let mask = offerings.allowed(&p.requirements);
                let mut v: Vec<(f64, u32)> = types
                    .iter()
                    .enumerate()
                    .filter(|(i, t)| {
                        offerings.masks[*i] & mask != 0
                            && p.requirements.iter().all(|r| type_allows(t, r))
                    })
                    .map(|(i, t)| {
                        (
                            t.cheapest_offering(&p.requirements)
                                .map(|o| o.price)
                                .unwrap_or(f64::INFINITY),
                            i as u32,
                        )
                    })
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                v.into_iter().map(|(_, i)| i).collect()
            })
            .collect();

        // DaemonSet overhead per pool and instance type.
        let daemons: Vec<PoolDaemons> = pools
            .iter()
            .map(|p| PoolDaemons::new(p, &input.snapshot.daemonsets, types))
            .collect();
        let capacity = daemons
            .iter()
            .zip(&pool_types)
            .map(|(d, ts)| {
                let mut caps = vec![Resources::new(); types.len()];
                for &t in ts {
                    caps[t as usize] = d.capacity(t as usize, &types[t as usize]);
                }
                caps
            })
            .collect();

        // Existing nodes and in-flight claims become fixed slots, tried in this order:
        // initialized nodes, nodes coming up, in-flight claims (Karpenter's order).
        let mut slots = Vec::new();
        let mut by_name = HashMap::new();
        let coming_up = &input.snapshot.coming_up;
        let nodes = &input.snapshot.nodes;
        let (up, coming): (Vec<usize>, Vec<usize>) =
            (0..nodes.len()).partition(|&i| !coming_up.contains(&nodes[i].name));
        for i in up.into_iter().chain(coming) {
            let n: &Node = &nodes[i];
            let reqs = match input.snapshot.node_requirements.get(i) {
                Some(Some(r)) => r.clone(),
                _ => Arc::new(Requirements::from_labels(&n.labels)),
            };
            let mut max = n.allocatable.clone();
            max.pods = n.max_pods();
            by_name.insert(n.name.clone(), slots.len());
            slots.push(Slot {
                name: n.name.clone(),
                kind: SlotKind::Node,
                reqs,
                undefined: Undefined::Deny,
                taints: n.taints.clone(),
                used: Resources::new(),
                max,
                options: Vec::new(),
                pods: Vec::new(),
                ports: Vec::new(),
                // Cordoned, or going (Karpenter leaves deleting nodes out).
                closed: n.unschedulable || n.deleting,
                reserved: Resources::new(),
                warm: None,
            });
        }
        for c in &input.snapshot.inflight {
            let mut max = c.allocatable.clone();
            if max.pods == 0 {
                max.pods = capstan_model::convert::DEFAULT_MAX_PODS;
            }
            let mut l = c.labels.clone();
            l.entry(HOSTNAME.to_string())
                .or_insert_with(|| c.name.clone());
            by_name.insert(c.name.clone(), slots.len());
            slots.push(Slot {
                name: c.name.clone(),
                kind: SlotKind::InFlight,
                reqs: Arc::new(Requirements::from_labels(&l)),
                undefined: Undefined::Deny,
                taints: c.taints.clone(),
                used: Resources::new(),
                max,
                options: Vec::new(),
                pods: Vec::new(),
                ports: Vec::new(),
                closed: false,
                reserved: Resources::new(),
                warm: None,
            });
        }

        // Bound pods use their nodes.
        for (n, used) in &input.snapshot.used {
            if let Some(&s) = by_name.get(n) {
                slots[s].used.add(used);
            }
        }
        for p in input.snapshot.pods.iter().filter(|p| p.is_active()) {
            if let Some(&s) = p.node_name.as_ref().and_then(|n| by_name.get(n)) {
                slots[s].used.add(&p.requests);
                slots[s].ports.extend(p.host_ports.iter().cloned());
            }
        }

        // DaemonSet pods a node or in-flight claim will run but does not run yet (it is still
        // coming up, or the DaemonSet is newer than the node): their requests are held there,
        // as Karpenter's `ExistingNode` holds them — the requests of the DaemonSets whose
        // taints and node requirements the node meets, less those of the DaemonSet pods bound
        // to it, never below zero.
        if !input.snapshot.daemonsets.is_empty() {
            let mut running = vec![Resources::new(); slots.len()];
            for (n, r) in &input.snapshot.daemons_used {
                if let Some(&s) = by_name.get(n) {
                    running[s].add(r);
                }
            }
            let bound_daemons = input
                .snapshot
                .pods
                .iter()
                .filter(|p| p.is_active() && p.is_daemonset_pod());
            for p in bound_daemons {
                if let Some(&s) = p.node_name.as_ref().and_then(|n| by_name.get(n)) {
                    running[s].add(&p.requests);
                }
            }
            let ds_reqs: Vec<Requirements> = input
                .snapshot
                .daemonsets
                .iter()
                .map(pod_requirements)
                .collect();
            for (slot, running) in slots.iter_mut().zip(&running) {
                let mut due = Resources::new();
                for (ds, reqs) in input.snapshot.daemonsets.iter().zip(&ds_reqs) {
                    if untolerated(&slot.taints, &ds.tolerations, false).is_none()
                        && slot.reqs.compatible(reqs, Undefined::Deny).is_ok()
                    {
                        due.add(&ds.requests);
                    }
                }
                slot.used.add(&due.minus_floor_zero(running));
            }
        }

        let limit_base = limits_left(&input);

        let min_cpu = input
            .pending
            .iter()
            .map(|p| p.requests.cpu)
            .min()
            .unwrap_or(0);
        let min_memory = input
            .pending
            .iter()
            .map(|p| p.requests.memory)
            .min()
            .unwrap_or(0);

        // Warm instances each pool may start: of a type it launches, in a zone and capacity
        // type it allows, cheapest first.
        let warm = &input.snapshot.warm;
        let pool_warm = pools
            .iter()
            .enumerate()
            .map(|(p, pool)| {
                let mask = offerings.allowed(&pool.requirements);
                let mut v: Vec<(f64, usize, u32, usize)> = warm
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.count > 0)
                    .filter_map(|(wi, w)| {
                        let pair = offerings
                            .pairs
                            .iter()
                            .position(|(z, c)| *z == w.zone && *c == w.capacity_type)?;
                        let bit = 1u128 << pair;
                        let t = *pool_types[p].iter().find(|&&t| {
                            types[t as usize].name == w.instance_type
                                && offerings.masks[t as usize] & mask & bit != 0
                        })?;
                        Some((offerings.prices[t as usize][pair], wi, t, pair))
                    })
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                v.into_iter()
                    .map(|(_, wi, t, pair)| (wi, t, pair))
                    .collect()
            })
            .collect();
        let warm_left = warm.iter().map(|w| w.count).collect();

        let topo = Topology::new(universe(&input, &pool_types, &offerings));
        let type_keys = types
            .iter()
            .flat_map(|t| t.requirements.iter().map(|r| r.key.clone()))
            .filter(|k| !labels::is_well_known(k))
            .collect();
        let mut s = Solver {
            open: (0..slots.len()).filter(|&i| !slots[i].closed).collect(),
            slots,
            by_name,
            topo,
            groups: Vec::new(),
            pool_order,
            pool_types,
            pool_warm,
            warm_left,
            daemons,
            capacity,
            limit_base,
            reserved_sum: vec![Resources::new(); pools.len()],
            reserved_nodes: vec![0; pools.len()],
            offerings,
            type_keys,
            min_cpu,
            min_memory,
            claim_seq: vec![0; pools.len()],
            placed: vec![None; input.pending.len()],
            unschedulable: Vec::new(),
            order: Vec::new(),
            cut: Vec::new(),
            input,
            options,
        };
        let order = s.order();
        (s.order, s.cut) = if cut {
            s.cut_runs(order)
        } else {
            (order, Vec::new())
        };
        s.build_groups();
        s
    }

    /// Creates every topology group any pod could own, then counts the bound pods.
    fn build_groups(&mut self) {
        let pending = self.input.pending;
        let mut groups: Vec<PodGroups> = Vec::with_capacity(pending.len());
        // Pods cut from the queue are never tried: they need no groups (the pods kept of
        // their runs, identical and earlier, make the same ones).
        let mut cut = vec![false; pending.len()];
        for &(i, _) in &self.cut {
            cut[i] = true;
        }
        for (i, pod) in pending.iter().enumerate() {
            let mut g = PodGroups::default();
            if cut[i] {
                groups.push(g);
                continue;
            }
            let mut filter = pod.node_selector.clone();
            if pod.required_terms.len() == 1 {
                filter.add_all(&pod.required_terms[0]);
            }
            for s in &pod.spread {
                let id = self.topo.spread_group(pod, s, &filter);
                match s.when_unsatisfiable {
                    WhenUnsatisfiable::DoNotSchedule => g.spread_hard.push(id),
                    WhenUnsatisfiable::ScheduleAnyway => g.spread_soft.push(id),
                }
            }
            g.req_aff = pod
                .affinity
                .iter()
                .map(|t| self.topo.affinity_group(t, false))
                .collect();
            g.req_anti = pod
                .anti_affinity
                .iter()
                .map(|t| self.topo.affinity_group(t, true))
                .collect();
            let mut pa: Vec<_> = pod.preferred_affinity.iter().collect();
            pa.sort_by_key(|w| std::cmp::Reverse(w.weight));
            g.pref_aff = pa
                .iter()
                .map(|w| self.topo.affinity_group(&w.term, false))
                .collect();
            let mut pn: Vec<_> = pod.preferred_anti_affinity.iter().collect();
            pn.sort_by_key(|w| std::cmp::Reverse(w.weight));
            g.pref_anti = pn
                .iter()
                .map(|w| self.topo.affinity_group(&w.term, true))
                .collect();
            groups.push(g);
        }
        // Required anti-affinity of bound pods keeps selected pods out of their domains.
        let bound: Vec<&Pod> = self
            .input
            .snapshot
            .pods
            .iter()
            .filter(|p| {
                p.is_active()
                    && p.node_name
                        .as_ref()
                        .is_some_and(|n| self.by_name.contains_key(n))
            })
            .map(|p| &**p)
            .collect();
        let bound_anti: Vec<Vec<usize>> = bound
            .iter()
            .map(|p| {
                p.anti_affinity
                    .iter()
                    .map(|t| self.topo.affinity_group(t, true))
                    .collect()
            })
            .collect();
        for (i, pod) in pending.iter().enumerate() {
            if cut[i] {
                continue;
            }
            for (gi, grp) in self.topo.groups.iter().enumerate() {
                if grp.selects(pod) {
                    groups[i].selected_by.push(gi);
                    if matches!(grp.g.kind, crate::topology::Kind::AntiAffinity) {
                        groups[i].selected_by_anti.push(gi);
                    }
                }
            }
        }
        for (p, owner_of) in bound.iter().zip(&bound_anti) {
            let slot = self.by_name[p.node_name.as_ref().expect("bound")];
            let selected_by: Vec<usize> = (0..self.topo.groups.len())
                .filter(|&g| self.topo.groups[g].selects(p))
                .collect();
            let sl = &self.slots[slot];
            self.topo.record(
                &selected_by,
                owner_of,
                slot,
                |k| sl.reqs.get(k).and_then(|r| r.values().first().cloned()),
                |g| g.node_counts(&sl.reqs, sl.undefined, &sl.taints),
            );
        }
        self.groups = groups;
        self.filter_spread_domains();
    }

    /// A spread with nodeAffinityPolicy or nodeTaintsPolicy Honor knows only the domains of
    /// the nodes and NodePools it counts (kube-scheduler's and Karpenter's domain discovery):
    /// a domain only a node the pod's node affinity excludes, or whose taints it does not
    /// tolerate, offers is no domain for its skew.
    fn filter_spread_domains(&mut self) {
        let pools = self.input.nodepools;
        let types = self.input.instance_types;
        for g in 0..self.topo.groups.len() {
            let grp = &self.topo.groups[g];
            let filtered = grp.g.filter_reqs.is_some() || grp.g.filter_tolerations.is_some();
            if grp.hostname
                || !filtered
                || !matches!(grp.g.kind, crate::topology::Kind::Spread { .. })
            {
                continue;
            }
            let key = &grp.g.key;
            let mut domains = BTreeSet::new();
            for slot in self
                .slots
                .iter()
                .filter(|s| !matches!(s.kind, SlotKind::New { .. }))
            {
                if let Some(r) = slot.reqs.get(key).filter(|r| r.len() == Some(1))
                    && grp.node_counts(&slot.reqs, slot.undefined, &slot.taints)
                {
                    domains.insert(r.values()[0].clone());
                }
            }
            for (p, pool) in pools.iter().enumerate() {
                if grp.node_counts(&pool.requirements, Undefined::AllowWellKnown, &pool.taints) {
                    collect_pool_values(pool, &self.pool_types[p], types, key, &mut domains);
                }
            }
            self.topo.groups[g].domains = Some(domains);
        }
    }

    /// Karpenter's order: largest first (CPU, then memory), then as given.
    fn order(&self) -> Vec<usize> {
        let pending = self.input.pending;
        let mut order: Vec<usize> = (0..pending.len()).collect();
        // With warm instances to start, pods holding room go last: they take no warm
        // instance ([`waits_now`]), and a claim one of them opens to boot must not take the
        // pods a warm start would serve.
        let warm = self.pool_warm.iter().any(|w| !w.is_empty());
        let room = |i: usize| warm && !waits_now(&pending[i]);
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&pending[a].requests, &pending[b].requests);
            room(a)
                .cmp(&room(b))
                .then(pb.cpu.cmp(&pa.cpu))
                .then(pb.memory.cmp(&pa.memory))
                .then(a.cmp(&b))
        });
        order
    }

    fn run(&mut self) {
        // As Karpenter's queue: pods that failed are tried again, in the same order, as long
        // as a pass placed something (a pod with affinity to one sorted after it).
        let mut queue = std::mem::take(&mut self.order);
        let cut = std::mem::take(&mut self.cut);
        loop {
            let failed = self.pass(&queue);
            if failed.is_empty() || failed.len() == queue.len() {
                break;
            }
            let retried: HashSet<usize> = failed.iter().copied().collect();
            self.unschedulable.retain(|u| !retried.contains(&u.pod));
            queue = failed;
        }
        if !cut.is_empty() {
            let reasons: HashMap<usize, Arc<str>> = self
                .unschedulable
                .iter()
                .map(|u| (u.pod, u.reason.clone()))
                .collect();
            for (pod, like) in cut {
                debug_assert!(
                    reasons.contains_key(&like),
                    "the last pod kept of a cut run is unschedulable"
                );
                let reason = reasons.get(&like).cloned().unwrap_or_default();
                self.unschedulable.push(Unschedulable { pod, reason });
            }
        }
    }

    /// `order` less the pods that can only fail, each with the pod kept that it fails as.
    ///
    /// When nothing can be launched (no NodePools, no claim in flight: kube-scheduler's
    /// view), the room the open nodes have left bounds how many pods of one shape any pass
    /// can place, as a pass only adds to what a node uses. In a run of identical pods in
    /// `order`, the pods placed are the first ones, in every pass: a pod identical to one
    /// that just failed fails too. So a run longer than the bound is cut one pod past it:
    /// that pod fails, and the pods after it would fail with its reason, changing nothing.
    /// Tens of thousands of replicas waiting for nodes to boot are tried as a few.
    fn cut_runs(&self, order: Vec<usize>) -> (Vec<usize>, Vec<(usize, usize)>) {
        if !self.input.nodepools.is_empty() || !self.input.snapshot.inflight.is_empty() {
            return (order, Vec::new());
        }
        let pending = self.input.pending;
        let mut kept = Vec::with_capacity(order.len());
        let mut cut = Vec::new();
        let mut k = 0;
        while k < order.len() {
            let first = &pending[order[k]];
            let mut end = k + 1;
            while end < order.len() && first.same_but_name(&pending[order[end]]) {
                end += 1;
            }
            let keep = match self.room_for(&first.requests) {
                Some(bound) if bound.saturating_add(1) < end - k => bound + 1,
                _ => end - k,
            };
            kept.extend_from_slice(&order[k..k + keep]);
            let like = order[k + keep - 1];
            cut.extend(order[k + keep..end].iter().map(|&i| (i, like)));
            k = end;
        }
        (kept, cut)
    }

    /// How many pods requesting `requests` the open slots have room for at most, by CPU,
    /// memory and pod count alone; `None` when the requests bound nothing.
    fn room_for(&self, requests: &Resources) -> Option<usize> {
        let of = |r: &Resources| [r.cpu, r.memory, r.pods];
        let want = of(requests);
        if want.iter().all(|w| *w <= 0) {
            return None;
        }
        let mut total = 0usize;
        for &s in &self.open {
            let slot = &self.slots[s];
            if slot.closed {
                continue;
            }
            let (max, used) = (of(&slot.max), of(&slot.used));
            let fits = (0..3)
                .filter(|&d| want[d] > 0)
                .map(|d| {
                    let left = max[d].saturating_sub(used[d]).max(0);
                    usize::try_from(left / want[d]).unwrap_or(usize::MAX)
                })
                .min()
                .unwrap_or(usize::MAX);
            total = total.saturating_add(fits);
        }
        Some(total)
    }

    /// Tries each pod of `queue` once; returns those that found no place (each also recorded
    /// in `unschedulable` with its reason).
    fn pass(&mut self, queue: &[usize]) -> Vec<usize> {
        let pending = self.input.pending;
        let mut failed = Vec::new();
        // A pod identical to one that just failed (all but name and uid) fails too: failing
        // changes nothing, and identical pods sort next to each other.
        let mut last_failed: Option<usize> = None;
        for &i in queue {
            let pod = &pending[i];
            if let Some(j) = last_failed {
                if pending[j].same_but_name(pod) {
                    let reason = self
                        .unschedulable
                        .last()
                        .map(|u| u.reason.clone())
                        .unwrap_or_default();
                    self.unschedulable.push(Unschedulable { pod: i, reason });
                    failed.push(i);
                    continue;
                }
            }
            let placed_before = self.unschedulable.len();
            let mut relaxed = Relaxed::default();
            loop {
                let reqs = self.pod_requirements(pod, &relaxed);
                let owned = self.owned(i, &relaxed);
                let g = &self.groups[i];
                let topo =
                    self.topo
                        .constraints(pod, &owned, &g.selected_by_anti, &g.selected_by, &reqs);
                if topo.impossible.is_none()
                    && self.place(i, &reqs, &topo, &owned, relaxed.tolerate_prefer)
                {
                    break;
                }
                if !self.relax(pod, i, &mut relaxed) {
                    let reason = if self.options.skip_diagnosis {
                        "no node or NodePool fits".into()
                    } else {
                        self.diagnose(i, &reqs, &topo, relaxed.tolerate_prefer)
                            .into()
                    };
                    self.unschedulable.push(Unschedulable { pod: i, reason });
                    break;
                }
            }
            last_failed = (self.unschedulable.len() > placed_before).then_some(i);
            if last_failed.is_some() {
                failed.push(i);
            }
        }
        failed
    }

    fn pod_requirements(&self, pod: &Pod, r: &Relaxed) -> Requirements {
        let mut reqs = pod.node_selector.clone();
        reqs.add_all(&pod.volume_requirements);
        if let Some(t) = pod.required_terms.get(r.term) {
            reqs.add_all(t);
        }
        let mut pref: Vec<_> = pod.preferred_terms.iter().collect();
        pref.sort_by_key(|w| std::cmp::Reverse(w.weight));
        if let Some(w) = pref.get(r.pref_node) {
            reqs.add_all(&w.term);
        }
        reqs
    }

    fn owned(&self, i: usize, r: &Relaxed) -> Owned {
        let g = &self.groups[i];
        let mut groups = g.spread_hard.clone();
        groups.extend(&g.spread_soft[r.soft.min(g.spread_soft.len())..]);
        groups.extend(&g.req_aff);
        groups.extend(&g.req_anti);
        groups.extend(&g.pref_aff[r.pref_aff.min(g.pref_aff.len())..]);
        groups.extend(&g.pref_anti[r.pref_anti.min(g.pref_anti.len())..]);
        groups.sort_unstable();
        groups.dedup();
        Owned {
            groups,
            required_anti: g.req_anti.clone(),
        }
    }

    /// One relaxation step, in Karpenter's order. False when nothing is left to relax.
    fn relax(&self, pod: &Pod, i: usize, r: &mut Relaxed) -> bool {
        let g = &self.groups[i];
        if r.term + 1 < pod.required_terms.len() {
            r.term += 1;
        } else if r.pref_aff < g.pref_aff.len() {
            r.pref_aff += 1;
        } else if r.pref_anti < g.pref_anti.len() {
            r.pref_anti += 1;
        } else if r.pref_node < pod.preferred_terms.len() {
            r.pref_node += 1;
        } else if r.soft < g.spread_soft.len() {
            r.soft += 1;
        } else if !r.tolerate_prefer {
            r.tolerate_prefer = true;
        } else {
            return false;
        }
        true
    }

    /// Tries existing slots in order, then a new claim from each pool by weight.
    fn place(
        &mut self,
        i: usize,
        reqs: &Requirements,
        topo: &PodTopology,
        owned: &Owned,
        tolerate_prefer: bool,
    ) -> bool {
        let pod = &self.input.pending[i];
        let pools = self.input.nodepools;
        let pool_ok: Vec<bool> = pools
            .iter()
            .map(|p| {
                untolerated(&p.taints, &pod.tolerations, !tolerate_prefer).is_none()
                    && p.requirements
                        .compatible_with(reqs, Undefined::AllowWellKnown, &self.type_keys)
                        .is_ok()
            })
            .collect();
        if self.options.claim_order == ClaimOrder::FewestPodsFirst {
            let slots = &self.slots;
            self.open.sort_by_key(|&s| match slots[s].kind {
                SlotKind::New { .. } => (1, slots[s].pods.len(), s),
                _ => (0, 0, s),
            });
        }
        // `open` is in slot order unless Karpenter's ordering re-sorted it.
        let first = if self.options.claim_order == ClaimOrder::FirstFit {
            let start = self.topo.first_candidate_slot(&topo.host);
            self.open.partition_point(|&s| s < start)
        } else {
            0
        };
        let mut found = None;
        let mut closed_seen = 0;
        for k in first..self.open.len() {
            let s = self.open[k];
            let slot = &self.slots[s];
            if slot.closed {
                closed_seen += 1;
                continue;
            }
            if let SlotKind::New { pool } = slot.kind {
                if !pool_ok[pool] {
                    continue;
                }
            }
            if let Ok(fit) = self.fit(s, slot, pod, reqs, topo, tolerate_prefer) {
                found = Some((s, fit));
                break;
            }
        }
        if closed_seen * 2 > self.open.len() {
            let slots = &self.slots;
            self.open.retain(|&s| !slots[s].closed);
        }
        if let Some((s, fit)) = found {
            self.commit(s, i, fit, owned);
            return true;
        }
        for pi in 0..self.pool_order.len() {
            let p = self.pool_order[pi];
            if !pool_ok[p] {
                continue;
            }
            // A warm instance before a machine that boots, for a pod that waits now.
            let warm = if waits_now(pod) {
                self.pool_warm[p].len()
            } else {
                0
            };
            for k in 0..warm {
                let (w, t, pair) = self.pool_warm[p][k];
                if self.warm_left[w] == 0 {
                    continue;
                }
                let Some(slot) = self.warm_slot(p, w, t, pair) else {
                    continue;
                };
                let s = self.slots.len();
                if let Ok(fit) = self.fit(s, &slot, pod, reqs, topo, tolerate_prefer) {
                    self.warm_left[w] -= 1;
                    self.claim_seq[p] += 1;
                    self.slots.push(slot);
                    self.open.push(s);
                    self.commit(s, i, fit, owned);
                    return true;
                }
            }
            let Some(slot) = self.fresh_slot(p) else {
                continue;
            };
            let s = self.slots.len();
            if let Ok(fit) = self.fit(s, &slot, pod, reqs, topo, tolerate_prefer) {
                self.claim_seq[p] += 1;
                self.slots.push(slot);
                self.open.push(s);
                self.commit(s, i, fit, owned);
                return true;
            }
        }
        false
    }

    /// An empty NodeClaim for a pool, with the types its remaining limits allow.
    fn fresh_slot(&self, p: usize) -> Option<Slot> {
        let pool = &self.input.nodepools[p];
        let types = self.input.instance_types;
        let mut options = self.pool_types[p].clone();
        if let Some(base) = &self.limit_base[p] {
            for (k, limit) in base {
                let left = if k == "nodes" {
                    limit - self.reserved_nodes[p]
                } else {
                    limit - self.reserved_sum[p].get(k)
                };
                if k == "nodes" {
                    if left < 1 {
                        return None;
                    }
                } else {
                    options.retain(|&t| types[t as usize].capacity.get(k) <= left);
                }
            }
        }
        if options.is_empty() {
            return None;
        }
        let mut max = Resources::new();
        for &t in &options {
            max.max_with(&self.capacity[p][t as usize]);
        }
        Some(Slot {
            name: format!("{}-{}", pool.name, self.claim_seq[p]),
            kind: SlotKind::New { pool: p },
            reqs: Arc::new(pool.requirements.clone()),
            undefined: Undefined::AllowWellKnown,
            taints: pool.taints.clone(),
            // A new claim's `used` is its pods' requests; `max` and the options' capacities
            // are net of the DaemonSets, which differ per type.
            used: Resources::new(),
            max,
            options,
            pods: Vec::new(),
            ports: Vec::new(),
            closed: false,
            reserved: Resources::new(),
            warm: None,
        })
    }

    /// An empty NodeClaim for a pool that starts warm instance `w`: type `t` only (if the
    /// pool's remaining limits allow it), in its offering's zone and capacity type.
    fn warm_slot(&self, p: usize, w: usize, t: u32, pair: usize) -> Option<Slot> {
        let mut slot = self.fresh_slot(p)?;
        if !slot.options.contains(&t) {
            return None;
        }
        slot.options = vec![t];
        slot.max = self.capacity[p][t as usize].clone();
        let (zone, capacity_type) = &self.offerings.pairs[pair];
        let mut reqs = Requirements::clone(&slot.reqs);
        reqs.add(Requirement::in_values(ZONE, [zone.as_str()]));
        reqs.add(Requirement::in_values(
            CAPACITY_TYPE,
            [capacity_type.as_str()],
        ));
        slot.reqs = Arc::new(reqs);
        slot.warm = Some(w);
        Some(slot)
    }

    fn fit(
        &self,
        s: usize,
        slot: &Slot,
        pod: &Pod,
        pod_reqs: &Requirements,
        topo: &PodTopology,
        tolerate_prefer: bool,
    ) -> Result<Fit, Reject> {
        if slot.closed {
            return Err(Reject::Closed);
        }
        if !sum_fits(&slot.used, &pod.requests, &slot.max) {
            return Err(Reject::NoRoom);
        }
        self.topo.host_ok(&topo.host, s).map_err(Reject::Topology)?;
        let is_new = matches!(slot.kind, SlotKind::New { .. });
        if !is_new {
            if let Some(t) = untolerated(&slot.taints, &pod.tolerations, !tolerate_prefer) {
                return Err(Reject::Taint(t.clone()));
            }
        }
        if let Some(hp) = pod
            .host_ports
            .iter()
            .find(|hp| slot.ports.iter().any(|o| o.conflicts(hp)))
        {
            return Err(Reject::HostPort(hp.port));
        }
        if !pod_reqs.is_empty() {
            slot.reqs
                .compatible_with(pod_reqs, slot.undefined, &self.type_keys)
                .map_err(Reject::Requirement)?;
        }
        if !is_new {
            for kc in &topo.keyed {
                match slot.reqs.get(&kc.key).and_then(|r| r.values().first()) {
                    Some(v) => {
                        if kc.allowed.as_ref().is_some_and(|a| !a.contains(v)) {
                            return Err(Reject::Topology(kc.why.first().copied().unwrap_or(0)));
                        }
                    }
                    None if kc.allowed.is_some() => {
                        return Err(Reject::MissingTopologyLabel(kc.key.clone()));
                    }
                    None => {}
                }
            }
            return Ok(Fit {
                reqs: None,
                options: None,
            });
        }

        // A new NodeClaim: narrow its requirements and instance types.
        let mut new_reqs = None;
        if !pod_reqs.is_empty() {
            new_reqs = Some(slot.reqs.intersect(pod_reqs));
        }
        for kc in &topo.keyed {
            let r = new_reqs.as_ref().unwrap_or(&slot.reqs);
            if r.get(&kc.key).is_some_and(|x| x.len() == Some(1)) {
                // already pinned: just check it
                let v = &r.get(&kc.key).expect("checked").values()[0];
                if kc.allowed.as_ref().is_some_and(|a| !a.contains(v)) {
                    return Err(Reject::Topology(kc.why.first().copied().unwrap_or(0)));
                }
                continue;
            }
            let d = self
                .pick_domain(kc, r)
                .ok_or_else(|| match kc.why.first() {
                    Some(&g) => Reject::Topology(g),
                    None => Reject::MissingTopologyLabel(kc.key.clone()),
                })?;
            new_reqs
                .get_or_insert_with(|| Requirements::clone(&slot.reqs))
                .add(pin(&kc.key, &d));
        }
        let SlotKind::New { pool } = slot.kind else {
            unreachable!("fixed slots returned above")
        };
        let types = self.input.instance_types;
        let caps = &self.capacity[pool];
        let daemons = &self.daemons[pool];
        let used = slot.used.plus(&pod.requests);
        let reqs = new_reqs.as_ref().unwrap_or(&slot.reqs);
        let changed: Vec<&capstan_model::Requirement> = match &new_reqs {
            Some(n) => n
                .iter()
                .filter(|r| slot.reqs.get(&r.key) != Some(*r))
                .collect(),
            None => Vec::new(),
        };
        let mask = if changed
            .iter()
            .any(|r| r.key == ZONE || r.key == CAPACITY_TYPE || r.key == ZONE_ID)
        {
            self.offerings.allowed(reqs)
        } else {
            u128::MAX
        };
        let options: Vec<u32> = slot
            .options
            .iter()
            .copied()
            .filter(|&t| {
                let it = &types[t as usize];
                used.fits_in(&caps[t as usize])
                    && self.offerings.masks[t as usize] & mask != 0
                    && changed.iter().all(|r| type_allows(it, r))
            })
            .collect();
        if options.is_empty() {
            return Err(Reject::NoInstanceType);
        }
        // The host ports of the DaemonSets that would run beside it, per type.
        let options = if pod.host_ports.is_empty() {
            options
        } else {
            let free: Vec<u32> = options
                .into_iter()
                .filter(|&t| {
                    let held = &daemons.of(t as usize).host_ports;
                    !pod.host_ports
                        .iter()
                        .any(|hp| held.iter().any(|o| o.conflicts(hp)))
                })
                .collect();
            if free.is_empty() {
                return Err(Reject::HostPort(pod.host_ports[0].port));
            }
            free
        };
        let mut relaxed: Vec<(String, u32)> = Vec::new();
        for r in reqs.iter() {
            if let Some(min) = r.min_values {
                let distinct: BTreeSet<&str> = options
                    .iter()
                    .flat_map(|&t| type_values(&types[t as usize], &r.key, reqs))
                    .collect();
                if distinct.len() < min as usize {
                    if !self.options.relax_min_values {
                        return Err(Reject::MinValues {
                            key: r.key.clone(),
                            have: distinct.len(),
                            need: min,
                        });
                    }
                    // Karpenter's MinValuesPolicy BestEffort: the claim asks for what is left.
                    relaxed.push((r.key.clone(), distinct.len() as u32));
                }
            }
        }
        if !relaxed.is_empty() {
            let mut r = new_reqs.unwrap_or_else(|| Requirements::clone(&slot.reqs));
            for (key, min) in relaxed {
                r.set_min_values(&key, Some(min));
            }
            new_reqs = Some(r);
        }
        Ok(Fit {
            reqs: new_reqs,
            options: Some(options),
        })
    }

    /// The domain a new claim is pinned to for a keyed constraint.
    fn pick_domain(&self, kc: &KeyConstraint, reqs: &Requirements) -> Option<String> {
        let universe = self.topo.universe.get(&kc.key)?;
        self.topo
            .pick(kc, universe.iter().filter(|d| reqs.allows(&kc.key, d)))
            .cloned()
    }

    fn commit(&mut self, s: usize, i: usize, fit: Fit, owned: &Owned) {
        let pod = &self.input.pending[i];
        let types = self.input.instance_types;
        {
            let slot = &mut self.slots[s];
            slot.used.add(&pod.requests);
            slot.pods.push(i);
            slot.ports.extend(pod.host_ports.iter().cloned());
            if let Some(r) = fit.reqs {
                slot.reqs = Arc::new(r);
            }
            if let Some(o) = fit.options {
                if o.len() != slot.options.len() {
                    if let SlotKind::New { pool } = slot.kind {
                        let mut max = Resources::new();
                        for &t in &o {
                            max.max_with(&self.capacity[pool][t as usize]);
                        }
                        slot.max = max;
                    }
                }
                slot.options = o;
            }
        }
        if let SlotKind::New { pool } = self.slots[s].kind {
            if self.limit_base[pool].is_some() {
                let reserved =
                    claim_holds(types, self.slots[s].options.iter().map(|&t| t as usize));
                let first = self.slots[s].pods.len() == 1;
                let old = std::mem::replace(&mut self.slots[s].reserved, reserved.clone());
                self.reserved_sum[pool].sub(&old);
                self.reserved_sum[pool].add(&reserved);
                if first {
                    self.reserved_nodes[pool] += 1;
                }
            }
        }
        let slot = &self.slots[s];
        let g = &self.groups[i];
        let owner_of: Vec<usize> = owned.required_anti.clone();
        self.topo.record(
            &g.selected_by,
            &owner_of,
            s,
            |k| {
                slot.reqs
                    .get(k)
                    .filter(|r| r.len() == Some(1))
                    .map(|r| r.values()[0].clone())
            },
            |grp| grp.node_counts(&slot.reqs, slot.undefined, &slot.taints),
        );
        let remaining_cpu = slot.max.cpu - slot.used.cpu;
        let remaining_mem = slot.max.memory - slot.used.memory;
        if slot.max.pods - slot.used.pods < 1
            || remaining_cpu < self.min_cpu
            || remaining_mem < self.min_memory
        {
            self.slots[s].closed = true;
        }
        self.placed[i] = Some(s);
    }

    /// A reason a person can act on, naming the blocking constraint.
    fn diagnose(
        &self,
        i: usize,
        reqs: &Requirements,
        topo: &PodTopology,
        tolerate_prefer: bool,
    ) -> String {
        let pod = &self.input.pending[i];
        if let Some(msg) = &topo.impossible {
            return msg.clone();
        }
        let mut parts = Vec::new();
        // Existing nodes and in-flight claims, summarized like kube-scheduler does.
        let fixed: Vec<usize> = (0..self.slots.len())
            .filter(|&s| !matches!(self.slots[s].kind, SlotKind::New { .. }))
            .collect();
        if !fixed.is_empty() {
            let mut why: BTreeMap<String, usize> = BTreeMap::new();
            for &s in &fixed {
                let slot = &self.slots[s];
                let r = if slot.closed && !sum_fits(&slot.used, &pod.requests, &slot.max) {
                    Err(shortfall(slot, pod))
                } else {
                    let mut open = slot.clone();
                    open.closed = false;
                    self.fit(s, &open, pod, reqs, topo, tolerate_prefer)
                        .map(|_| ())
                        .map_err(|r| match r {
                            Reject::NoRoom => shortfall(&open, pod),
                            other => other,
                        })
                };
                if let Err(r) = r {
                    let text = match &r {
                        Reject::Resources(sf) => format!("insufficient {}", sf.resource),
                        other => self.reject_text(other, reqs),
                    };
                    *why.entry(text).or_insert(0) += 1;
                }
            }
            let summary: Vec<String> = why.iter().map(|(t, n)| format!("{n} {t}")).collect();
            parts.push(format!(
                "0/{} nodes fit ({})",
                fixed.len(),
                summary.join(", ")
            ));
        }
        if self.pool_order.is_empty() {
            parts.push("no NodePool to launch from".into());
        }
        for pool in self.input.nodepools.iter() {
            if pool.deleting {
                parts.push(format!(
                    "nodepool {}: being deleted, launches nothing",
                    pool.name
                ));
            } else if pool.replicas.is_some() {
                parts.push(format!(
                    "nodepool {}: static (replicas), launches for no pod",
                    pool.name
                ));
            }
        }
        for &p in &self.pool_order {
            let pool = &self.input.nodepools[p];
            let text = if let Some(t) =
                untolerated(&pool.taints, &pod.tolerations, !tolerate_prefer)
            {
                format!("untolerated taint {t}")
            } else if let Err(e) =
                pool.requirements
                    .compatible_with(reqs, Undefined::AllowWellKnown, &self.type_keys)
            {
                e.to_string()
            } else {
                match self.fresh_slot(p) {
                    None => self.limits_text(p),
                    Some(slot) => {
                        match self.fit(self.slots.len(), &slot, pod, reqs, topo, tolerate_prefer) {
                            Ok(_) => "fits, but lost to an earlier pod's choice".into(),
                            Err(Reject::NoInstanceType | Reject::Resources(_) | Reject::NoRoom) => {
                                self.no_type_text(p, &slot, pod, reqs)
                            }
                            Err(r) => self.reject_text(&r, reqs),
                        }
                    }
                }
            };
            parts.push(format!("nodepool {}: {text}", pool.name));
        }
        parts.join("; ")
    }

    fn reject_text(&self, r: &Reject, _reqs: &Requirements) -> String {
        match r {
            Reject::Topology(g) => format!("{} would be violated", self.topo.groups[*g].describe()),
            Reject::MissingTopologyLabel(k) => format!("no label {k} for topology"),
            Reject::Resources(s) => format!("insufficient {s}"),
            Reject::NoRoom => "insufficient resources".into(),
            Reject::Taint(t) => format!("untolerated taint {t}"),
            Reject::HostPort(p) => format!("host port {p} in use"),
            Reject::Requirement(e) => e.to_string(),
            Reject::NoInstanceType => "no instance type fits".into(),
            Reject::MinValues { key, have, need } => {
                format!("minValues for {key}: {have} of {need} values left")
            }
            Reject::Closed => "full".into(),
        }
    }

    fn limits_text(&self, p: usize) -> String {
        let pool = &self.input.nodepools[p];
        let limits: Vec<String> = pool
            .limits
            .iter()
            .map(|(k, v)| format!("{k}={}", format_amount(k, *v)))
            .collect();
        format!("limits reached ({})", limits.join(", "))
    }

    /// Why no instance type of a pool holds the pod.
    fn no_type_text(&self, p: usize, slot: &Slot, pod: &Pod, reqs: &Requirements) -> String {
        let types = self.input.instance_types;
        let all = slot.reqs.intersect(reqs);
        let mask = self.offerings.allowed(&all);
        let matching: Vec<usize> = slot
            .options
            .iter()
            .map(|&t| t as usize)
            .filter(|&t| {
                self.offerings.masks[t] & mask != 0 && all.iter().all(|r| type_allows(&types[t], r))
            })
            .collect();
        if matching.is_empty() {
            return format!("no instance type matches {reqs}");
        }
        let mut max = Resources::new();
        for &t in &matching {
            max.max_with(&types[t].allocatable);
        }
        // With one DaemonSet overhead for every matching type, name it; when it differs per
        // type, compare with what each type leaves after its own.
        let (need, room, overhead) = match self.daemons[p].common_overhead(matching.iter().copied())
        {
            Some(o) => (
                o.plus(&pod.requests),
                max.clone(),
                (!o.is_zero()).then(|| o.to_string()),
            ),
            None => {
                let mut net = Resources::new();
                for &t in &matching {
                    net.max_with(&self.capacity[p][t]);
                }
                let text = "(which differs per instance type)".to_string();
                (pod.requests.clone(), net, Some(text))
            }
        };
        if let Some(sf) = need.shortfall(&room) {
            let alone = pod.requests.shortfall(&max).is_none();
            let tail = match overhead {
                Some(o) if alone => format!(" after daemonset overhead {o}"),
                _ => String::new(),
            };
            let [needs, offers] =
                <[String; 2]>::try_from(capstan_model::resources::format_amounts(
                    &sf.resource,
                    &[sf.requested, sf.available],
                ))
                .expect("two amounts");
            return format!(
                "no instance type has enough {}: needs {needs}, largest offers {offers}{tail}",
                sf.resource,
            );
        }
        format!("no single instance type has all of {need}")
    }

    fn into_plan(self) -> Plan {
        let mut plan = Plan::default();
        for slot in &self.slots {
            match slot.kind {
                SlotKind::New { pool } => {
                    let mask = self.offerings.allowed(&slot.reqs);
                    let mut opts: Vec<(f64, usize, usize)> = slot
                        .options
                        .iter()
                        .filter_map(|&t| {
                            self.offerings
                                .cheapest(t as usize, mask)
                                .map(|(p, pair)| (p, t as usize, pair))
                        })
                        .collect();
                    opts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    let &(price, t, pair) = opts
                        .first()
                        .expect("a new claim keeps only types with an allowed offering");
                    let (zone, capacity_type) = self.offerings.pairs[pair].clone();
                    let offering = ChosenOffering {
                        instance_type: t,
                        zone,
                        capacity_type,
                        price,
                    };
                    plan.new_claims.push(NewClaim {
                        name: slot.name.clone(),
                        nodepool: self.input.nodepools[pool].name.clone(),
                        requirements: Requirements::clone(&slot.reqs),
                        pods: slot.pods.clone(),
                        requests: slot.used.plus(self.daemons[pool].overhead(t)),
                        instance_types: opts.into_iter().map(|(_, t, _)| t).collect(),
                        offering,
                        warm: slot.warm.is_some(),
                    });
                }
                _ => {
                    if !slot.pods.is_empty() {
                        plan.existing.push(Binding {
                            node: slot.name.clone(),
                            pods: slot.pods.clone(),
                        });
                    }
                }
            }
        }
        let mut un = self.unschedulable;
        un.sort_by_key(|u| u.pod);
        plan.unschedulable = un;
        plan
    }
}

/// A type's value for a label key, offerings aside.
/// Every domain value a node could have, per topology key the pods use.
fn universe(
    input: &SolveInput<'_>,
    pool_types: &[Vec<u32>],
    _offerings: &OfferingIndex,
) -> BTreeMap<String, Vec<String>> {
    let mut keys: BTreeSet<String> = BTreeSet::new();
    for p in input.pending.iter().chain(&input.snapshot.pods) {
        keys.extend(p.spread.iter().map(|s| s.topology_key.clone()));
        for t in p.affinity.iter().chain(&p.anti_affinity) {
            keys.insert(t.topology_key.clone());
        }
        for w in p
            .preferred_affinity
            .iter()
            .chain(&p.preferred_anti_affinity)
        {
            keys.insert(w.term.topology_key.clone());
        }
    }
    keys.remove(HOSTNAME);
    let mut out = BTreeMap::new();
    for key in keys {
        let mut vals: BTreeSet<String> = BTreeSet::new();
        for (p, pool) in input.nodepools.iter().enumerate() {
            collect_pool_values(pool, &pool_types[p], input.instance_types, &key, &mut vals);
        }
        for n in &input.snapshot.nodes {
            if let Some(v) = n.labels.get(&key) {
                vals.insert(v.clone());
            }
        }
        for c in &input.snapshot.inflight {
            if let Some(v) = c.labels.get(&key) {
                vals.insert(v.clone());
            }
        }
        out.insert(key, vals.into_iter().collect());
    }
    out
}

fn collect_pool_values(
    pool: &NodePool,
    types: &[u32],
    all: &[InstanceType],
    key: &str,
    out: &mut BTreeSet<String>,
) {
    if let Some(v) = pool.labels.get(key) {
        out.insert(v.clone());
        return;
    }
    if let Some(r) = pool.requirements.get(key) {
        if !r.is_complement() && key != ZONE && key != CAPACITY_TYPE && !labels::is_well_known(key)
        {
            out.extend(r.values().iter().cloned());
            return;
        }
    }
    for &t in types {
        let t = &all[t as usize];
        if key == ZONE || key == CAPACITY_TYPE || key == ZONE_ID {
            for o in t.offerings.iter().filter(|o| o.available) {
                let v = match key {
                    ZONE => &o.zone,
                    ZONE_ID => match &o.zone_id {
                        Some(id) => id,
                        None => continue,
                    },
                    _ => &o.capacity_type,
                };
                if offering_allowed(o, &pool.requirements) {
                    out.insert(v.clone());
                }
            }
        } else if let Some(v) = t.labels.get(key) {
            if pool.requirements.allows(key, v) {
                out.insert(v.clone());
            }
        }
    }
}
