//! capstan's packing planner: which machines to buy for the pods that need new capacity.
//!
//! Three strategies share one pipeline. The scheduling core (`capstan_sched::solve`) places
//! every pod with all its constraints. Pods that carry no topology, affinity or host-port
//! constraint and that no other pod's topology term selects ("free" pods) are then re-packed,
//! per NodePool and compatibility class, by the strategy:
//!
//! - `karpenter-ffd`: Karpenter's first-fit-decreasing, untouched (sched with Karpenter's claim
//!   order); kept as the baseline.
//! - `default`: the configuration LP by column generation (`config`, `master`, `knap`), made
//!   whole by diving (`dive`), improved locally (`greedy`); to a budget of work, not time.
//! - `optimal`: from there, an exact search over the patterns the LP's prices allow and an
//!   integer program, within the caller's deadline, reporting the gap it has not closed.
//!
//! [`bound::lower_bound`] is an LP relaxation over aggregate resources per group of pods with
//! the same compatible instance types, provably ≤ any plan's cost; the configuration LP's
//! Farley bound is the strong one where it applies. [`spot`] spreads spot capacity over pools.
//!
//! Pure: no I/O, no clock of ours (the caller says how many seconds are left; good_lp's
//! solver honours the time limit itself).

pub mod bound;
mod config;
mod dive;
mod exact;
mod greedy;
mod knap;
mod master;
pub mod spot;

use capstan_model::taints::untolerated;
use capstan_model::{InstanceType, Pod, Requirements, Resources};
use capstan_sched::predicates::{PoolDaemons, pod_requirements, type_compatible};
use capstan_sched::{ChosenOffering, ClaimOrder, NewClaim, Plan, SolveInput, SolveOptions, solve};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Default,
    KarpenterFfd,
    Optimal,
}

impl Strategy {
    pub fn parse(s: &str) -> Option<Strategy> {
        Some(match s {
            "default" => Strategy::Default,
            "karpenter-ffd" => Strategy::KarpenterFfd,
            "optimal" => Strategy::Optimal,
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Default => "default",
            Strategy::KarpenterFfd => "karpenter-ffd",
            Strategy::Optimal => "optimal",
        }
    }
}

#[derive(Clone, Debug)]
pub struct PackOptions {
    pub strategy: Strategy,
    /// For `optimal`: seconds the exact solver may take.
    pub time_limit_seconds: f64,
    /// Most of one plan's spot capacity (vCPU) one pool (instance type × zone) may hold.
    pub spot_max_pool_share: f64,
    /// Karpenter's MinValuesPolicy BestEffort (see `SolveOptions::relax_min_values`).
    pub relax_min_values: bool,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            strategy: Strategy::Default,
            time_limit_seconds: 10.0,
            spot_max_pool_share: 0.25,
            relax_min_values: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("linear program failed: {0}")]
    Solver(String),
}

/// A plan with its price, its lower bound and its certified gap.
#[derive(Clone, Debug)]
pub struct PackResult {
    pub strategy: Strategy,
    pub plan: Plan,
    pub total_price: f64,
    pub lower_bound: f64,
    /// How far the plan may be from the optimum: (price − lower bound) / price, or 0 when
    /// `optimal` proved the plan optimal by search.
    pub gap: f64,
}

/// Which pending pods the packer may move between new nodes, and the topology keys whose
/// values a move must keep. A pod is movable unless its placement involves a node's identity:
/// host ports, a hostname-keyed spread or (anti-)affinity of its own, or another pod's
/// hostname-keyed term that selects it. Constraints on other keys (zones, say) only care about
/// the domain, so the pod may move to any new node with the same values of those keys.
pub(crate) fn movable(input: &SolveInput<'_>) -> Vec<Option<Vec<String>>> {
    use capstan_model::labels::HOSTNAME;
    // (namespaces, selector, key) of every topology term in play.
    let mut terms: Vec<(
        &capstan_model::pod::Namespaces,
        &capstan_model::selector::LabelSelector,
        &str,
    )> = Vec::new();
    for p in input.pending.iter().chain(&input.snapshot.pods) {
        for sp in &p.spread {
            if let Some(sel) = &sp.selector {
                terms.push((&ALL, sel, &sp.topology_key));
            }
        }
        for t in p.affinity.iter().chain(&p.anti_affinity) {
            if let Some(sel) = &t.selector {
                terms.push((&t.namespaces, sel, &t.topology_key));
            }
        }
        for w in p
            .preferred_affinity
            .iter()
            .chain(&p.preferred_anti_affinity)
        {
            if let Some(sel) = &w.term.selector {
                terms.push((&w.term.namespaces, sel, &w.term.topology_key));
            }
        }
    }
    input
        .pending
        .iter()
        .map(|p| {
            // Host ports pin a pod to a node's ports; several required node-affinity terms mean
            // sched may have used any of them.
            if !p.host_ports.is_empty() || p.required_terms.len() > 1 {
                return None;
            }
            let mut keys: BTreeSet<String> = BTreeSet::new();
            keys.extend(p.spread.iter().map(|s| s.topology_key.clone()));
            keys.extend(
                p.affinity
                    .iter()
                    .chain(&p.anti_affinity)
                    .map(|t| t.topology_key.clone()),
            );
            keys.extend(
                p.preferred_affinity
                    .iter()
                    .chain(&p.preferred_anti_affinity)
                    .map(|w| w.term.topology_key.clone()),
            );
            for (ns, sel, key) in &terms {
                if ns.contains(&p.namespace) && sel.matches(&p.labels) {
                    keys.insert(key.to_string());
                }
            }
            if keys.contains(HOSTNAME) {
                return None;
            }
            Some(keys.into_iter().collect())
        })
        .collect()
}

static ALL: capstan_model::pod::Namespaces = capstan_model::pod::Namespaces::All;

/// One instance type a class can launch: its cheapest allowed offering and what pods may use.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub t: usize,
    pub price: f64,
    /// Allocatable minus daemonset overhead.
    pub cap: Resources,
}

/// Free pods that may share nodes: one NodePool, the same node requirements and tolerations.
#[derive(Clone, Debug)]
pub(crate) struct Class {
    pub pool: usize,
    pub reqs: Requirements,
    /// The pool's DaemonSets, per instance type.
    pub daemons: PoolDaemons,
    /// Every launchable type, cheapest first.
    pub cands: Vec<Cand>,
    pub pods: Vec<usize>,
}

/// Candidate types for a pool narrowed by `reqs`.
pub(crate) fn candidates(
    types: &[InstanceType],
    reqs: &Requirements,
    daemons: &PoolDaemons,
) -> Vec<Cand> {
    let mut v: Vec<Cand> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| type_compatible(t, reqs))
        .filter_map(|(i, t)| {
            let o = t.cheapest_offering(reqs)?;
            let cap = daemons.capacity(i, t);
            (cap.cpu >= 0 && cap.memory >= 0 && cap.pods > 0).then_some(Cand {
                t: i,
                price: o.price,
                cap,
            })
        })
        .collect();
    v.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.t.cmp(&b.t)));
    v
}

/// Groups the free pods of a sched plan's new claims into classes.
fn classes(input: &SolveInput<'_>, plan: &Plan, movable: &[Option<Vec<String>>]) -> Vec<Class> {
    let daemons: Vec<PoolDaemons> = input
        .nodepools
        .iter()
        .map(|p| PoolDaemons::new(p, &input.snapshot.daemonsets, input.instance_types))
        .collect();
    let mut by_key: BTreeMap<(usize, String, String), Class> = BTreeMap::new();
    // A claim on a warm instance stays as it is: it starts in seconds, which is its point.
    for c in plan.new_claims.iter().filter(|c| !c.warm) {
        let Some(pool) = input.nodepools.iter().position(|p| p.name == c.nodepool) else {
            continue;
        };
        let np = &input.nodepools[pool];
        for &p in &c.pods {
            let Some(keys) = &movable[p] else { continue };
            let pod = &input.pending[p];
            let mut reqs = np.requirements.intersect(&pod_requirements(pod));
            // Keep what sched honoured of the pod's preferred node affinity (Karpenter treats
            // preferences as required until they cannot be met): the claim's requirement on
            // each key a preferred term names.
            for term in &pod.preferred_terms {
                for r in term.term.iter() {
                    if let Some(kept) = c.requirements.get(&r.key) {
                        reqs.add(kept.clone());
                    }
                }
            }
            // Keep the topology domains the pod was placed in.
            let mut pinned = true;
            for k in keys {
                match c.requirements.get(k).filter(|r| r.len() == Some(1)) {
                    Some(r) => reqs.add(r.clone()),
                    None => pinned = false,
                }
            }
            if !pinned {
                continue;
            }
            let tolerated: String = np
                .taints
                .iter()
                .map(|t| {
                    if untolerated(std::slice::from_ref(t), &pod.tolerations, true).is_none() {
                        '1'
                    } else {
                        '0'
                    }
                })
                .collect();
            let key = (pool, reqs.to_string(), tolerated);
            by_key
                .entry(key)
                .or_insert_with(|| Class {
                    pool,
                    cands: candidates(input.instance_types, &reqs, &daemons[pool]),
                    reqs,
                    daemons: daemons[pool].clone(),
                    pods: Vec::new(),
                })
                .pods
                .push(p);
        }
    }
    by_key.into_values().collect()
}

/// A node the packer chose: a candidate index into its class, and the pods on it.
#[derive(Clone, Debug)]
pub(crate) struct PackedNode {
    pub cand: usize,
    pub pods: Vec<usize>,
}

/// Pods grouped by equal requests: the resource dimensions in play (cpu, memory, pods, then
/// every extended resource requested), the groups (pod indices), and the total demand.
pub(crate) fn shape_groups(
    pods: &[Arc<Pod>],
    ids: impl IntoIterator<Item = usize>,
) -> (Vec<String>, Vec<Vec<usize>>, Resources) {
    use capstan_model::resources::{CPU, MEMORY, PODS};
    let mut dims: Vec<String> = vec![CPU.into(), MEMORY.into(), PODS.into()];
    let mut by_req: BTreeMap<Vec<(String, i64)>, Vec<usize>> = BTreeMap::new();
    let mut demand = Resources::new();
    for p in ids {
        let r = &pods[p].requests;
        demand.add(r);
        for k in r.extended.keys() {
            if !dims.contains(k) {
                dims.push(k.clone());
            }
        }
        by_req
            .entry(r.iter().map(|(k, v)| (k.to_string(), v)).collect())
            .or_default()
            .push(p);
    }
    (dims, by_req.into_values().collect(), demand)
}

pub(crate) fn pods_requests(pods: &[Arc<Pod>], ids: &[usize]) -> Resources {
    let mut r = Resources::new();
    for &p in ids {
        r.add(&pods[p].requests);
    }
    r
}

/// The cheapest candidate of the class that holds these pods.
pub(crate) fn cheapest_holding(class: &Class, req: &Resources) -> Option<usize> {
    class.cands.iter().position(|c| req.fits_in(&c.cap))
}

/// Turns packed nodes back into NewClaims (downsized to the cheapest type that holds them).
fn claims_for(
    input: &SolveInput<'_>,
    class: &Class,
    nodes: &[PackedNode],
    seq: &mut usize,
) -> Vec<NewClaim> {
    let pool = &input.nodepools[class.pool];
    let mut out = Vec::new();
    for n in nodes {
        let req = pods_requests(input.pending, &n.pods);
        let options: Vec<usize> = class
            .cands
            .iter()
            .filter(|c| req.fits_in(&c.cap))
            .map(|c| c.t)
            .collect();
        let options = truncate_options(input.instance_types, options, &pool.requirements);
        let Some(&t) = options.first() else { continue };
        let it = &input.instance_types[t];
        let o = it
            .cheapest_offering(&class.reqs)
            .expect("candidates have an allowed offering");
        let mut used = req.clone();
        used.add(class.daemons.overhead(t));
        out.push(NewClaim {
            name: format!("{}-p{}", pool.name, *seq),
            nodepool: pool.name.clone(),
            requirements: class.reqs.clone(),
            pods: n.pods.clone(),
            requests: used,
            instance_types: options,
            offering: ChosenOffering {
                instance_type: t,
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
            },
            warm: false,
        });
        *seq += 1;
    }
    out
}

/// The most instance types a NodeClaim names, as Karpenter (`MaxInstanceTypes`): a launch
/// request over hundreds of types gains nothing over one over the cheapest sixty.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// Keeps the `MAX_INSTANCE_TYPES` first (cheapest) of a claim's options, and then, for each
/// requirement with minValues the kept ones fall short of, the next cheapest that bring a
/// value not yet kept — so truncation never breaks minValues (Karpenter instead refuses the
/// truncated claim under its Strict policy). The order stays the options' order.
pub fn truncate_options(
    types: &[InstanceType],
    options: Vec<usize>,
    reqs: &Requirements,
) -> Vec<usize> {
    if options.len() <= MAX_INSTANCE_TYPES {
        return options;
    }
    let mut keep = vec![false; options.len()];
    for k in keep.iter_mut().take(MAX_INSTANCE_TYPES) {
        *k = true;
    }
    for r in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        let mut seen: BTreeSet<&String> = options
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .filter_map(|(&t, _)| types[t].labels.get(&r.key))
            .collect();
        for (i, &t) in options.iter().enumerate() {
            if seen.len() >= min as usize {
                break;
            }
            if let Some(v) = types[t].labels.get(&r.key)
                && seen.insert(v)
            {
                keep[i] = true;
            }
        }
    }
    options
        .into_iter()
        .zip(keep)
        .filter_map(|(t, k)| k.then_some(t))
        .collect()
}

/// Whether a set of claims respects each claim's minValues (its pool's, or what Karpenter's
/// BestEffort policy relaxed them to).
fn min_values_ok(input: &SolveInput<'_>, claims: &[NewClaim]) -> bool {
    claims.iter().all(|c| {
        c.requirements
            .iter()
            .filter_map(|r| r.min_values.map(|m| (r, m)))
            .all(|(r, m)| {
                let distinct: BTreeSet<&str> = c
                    .instance_types
                    .iter()
                    .flat_map(|&t| {
                        capstan_sched::predicates::type_values(
                            &input.instance_types[t],
                            &r.key,
                            &c.requirements,
                        )
                    })
                    .collect();
                distinct.len() >= m as usize
            })
    })
}

/// Plans with the chosen strategy.
pub fn pack(input: SolveInput<'_>, options: &PackOptions) -> Result<PackResult, PackError> {
    pack_until(input, options, &|| f64::INFINITY)
}

/// [`pack`] within a deadline the caller keeps: `left` says how many seconds are left (this
/// crate reads no clock). Once none are, the best plan found so far is returned with its
/// certified gap; `optimal` gives its integer program only the time left. With no deadline
/// (`f64::INFINITY`), every limit is a count of work, so the same input gives the same plan on
/// any machine.
pub fn pack_until(
    input: SolveInput<'_>,
    options: &PackOptions,
    left: &dyn Fn() -> f64,
) -> Result<PackResult, PackError> {
    let stop = || left() <= 0.0;
    let ctx = config::Ctx::new(&stop, left);
    let order = if options.strategy == Strategy::KarpenterFfd {
        ClaimOrder::FewestPodsFirst
    } else {
        ClaimOrder::FirstFit
    };
    let base = solve(
        input,
        &SolveOptions {
            claim_order: order,
            relax_min_values: options.relax_min_values,
            ..Default::default()
        },
    );
    ctx.seed_with(&base, input.pending);
    // The bound covers the pods a plan places (unschedulable pods cost nothing).
    let lower_bound = bound::plan_bound_in(&input, &base, &ctx)?;
    if options.strategy == Strategy::KarpenterFfd {
        let total_price = base.new_price();
        return Ok(PackResult {
            strategy: options.strategy,
            plan: base,
            total_price,
            lower_bound,
            gap: gap_to(total_price, lower_bound),
        });
    }
    let movable = movable(&input);
    let classes = classes(&input, &base, &movable);
    // Re-pack each class; keep the result only if every pod of the class came back and the
    // pool's minValues hold.
    let mut seq = 0;
    let mut proven = options.strategy == Strategy::Optimal;
    let mut repacked: Vec<NewClaim> = Vec::new();
    let mut moved: BTreeSet<usize> = BTreeSet::new();
    for class in &classes {
        let nodes = match options.strategy {
            Strategy::Optimal => {
                let heuristic = greedy::pack(&input, class, &ctx)?;
                let (nodes, g) =
                    exact::solve(&input, class, options.time_limit_seconds, heuristic, &ctx)?;
                proven &= g <= 0.0;
                nodes
            }
            _ => greedy::pack(&input, class, &ctx)?,
        };
        let claims = claims_for(&input, class, &nodes, &mut seq);
        let mut back: Vec<usize> = claims.iter().flat_map(|c| c.pods.iter().copied()).collect();
        back.sort_unstable();
        let mut given = class.pods.clone();
        given.sort_unstable();
        if back == given && min_values_ok(&input, &claims) {
            moved.extend(given);
            repacked.extend(claims);
        } else {
            proven = false;
        }
    }
    let mut plan = base.clone();
    // Claims keep the pods that were not re-packed.
    plan.new_claims.retain_mut(|c| {
        c.pods.retain(|p| !moved.contains(p));
        !c.pods.is_empty()
    });
    // Claims sched made that still hold pods were not optimized by the exact solver.
    proven &= plan.new_claims.is_empty();
    shrink_claims(&input, &mut plan.new_claims);
    plan.new_claims.extend(repacked);
    // Never worse than the plain first-fit plan it started from, and never past a NodePool's
    // limits, which that plan honoured.
    if plan.new_price() > base.new_price() + 1e-9
        || !capstan_sched::within_limits(&input, &plan.new_claims)
    {
        plan = base;
        proven = false;
    }
    let before_spot = plan.new_price();
    spot::diversify(&input, &mut plan, options.spot_max_pool_share);
    let total_price = plan.new_price();
    proven &= (total_price - before_spot).abs() < 1e-9;
    let gap = if proven && options.strategy == Strategy::Optimal {
        0.0
    } else {
        gap_to(total_price, lower_bound)
    };
    Ok(PackResult {
        strategy: options.strategy,
        plan,
        total_price,
        lower_bound,
        gap,
    })
}

/// The certified gap of a plan of this price against a proven lower bound.
fn gap_to(price: f64, bound: f64) -> f64 {
    if price > 0.0 {
        ((price - bound) / price).max(0.0)
    } else {
        0.0
    }
}

/// After pods left a claim, move it to the cheapest option that still holds what remains.
fn shrink_claims(input: &SolveInput<'_>, claims: &mut [NewClaim]) {
    for c in claims.iter_mut().filter(|c| !c.warm) {
        let Some(pool) = input.nodepools.iter().find(|p| p.name == c.nodepool) else {
            continue;
        };
        let daemons = PoolDaemons::new(pool, &input.snapshot.daemonsets, input.instance_types);
        let used = pods_requests(input.pending, &c.pods);
        let ports: Vec<&capstan_model::pod::HostPort> = c
            .pods
            .iter()
            .flat_map(|&p| &input.pending[p].host_ports)
            .collect();
        // In a pool with limits, stay within the options sched chose under those limits.
        let keep: Vec<usize> = input
            .instance_types
            .iter()
            .enumerate()
            .filter(|(i, _)| pool.limits.is_empty() || c.instance_types.contains(i))
            .filter(|&(i, t)| {
                used.fits_in(&daemons.capacity(i, t))
                    && type_compatible(t, &c.requirements)
                    && !daemons
                        .of(i)
                        .host_ports
                        .iter()
                        .any(|d| ports.iter().any(|hp| d.conflicts(hp)))
            })
            .map(|(i, _)| i)
            .collect();
        let mut opts: Vec<(f64, usize)> = keep
            .iter()
            .filter_map(|&t| {
                input.instance_types[t]
                    .cheapest_offering(&c.requirements)
                    .map(|o| (o.price, t))
            })
            .collect();
        opts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if let Some(&(_, t)) = opts.first() {
            let o = input.instance_types[t]
                .cheapest_offering(&c.requirements)
                .expect("filtered");
            c.offering = ChosenOffering {
                instance_type: t,
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
            };
            c.instance_types = opts.into_iter().map(|(_, t)| t).collect();
            c.requests = used.plus(daemons.overhead(t));
        }
    }
}

#[cfg(test)]
mod tests;
