//! A lower bound on the price of any plan: the LP relaxation over aggregate resources (CPU,
//! memory, pods and every extended resource such as GPUs) per group of pods with the same set of
//! places they may go.
//!
//! A *cell* is somewhere capacity can come from: an (instance type, NodePool) pair at its
//! cheapest allowed offering, or an existing node / in-flight claim's free capacity at price 0
//! (at most one of it). A group's pods must get their total demand of each resource from cells
//! they may use; cells give at most `capacity × count`. Dropping integrality and the
//! all-of-a-pod-on-one-node coupling only loosens the problem, so the optimum is ≤ the price of
//! every feasible plan.

use crate::{Cand, PackError};
use capstan_model::requirements::Undefined;
use capstan_model::resources::{CPU, MEMORY, PODS};
use capstan_model::taints::untolerated;
use capstan_model::{Pod, Resources};
use capstan_sched::SolveInput;
use capstan_sched::predicates::{
    PoolDaemons, pod_allowed_in_pool, pod_requirements, type_compatible,
};
use good_lp::{
    Expression, ProblemVariables, Solution, SolverModel, Variable, constraint, microlp, variable,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Where capacity can come from.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    pub price: f64,
    pub cap: Resources,
    /// Existing capacity: at most one.
    pub bounded: bool,
}

/// Pods that may use the same cells, with their total demand.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub demand: Resources,
    pub cells: Vec<usize>,
}

/// The resource names the bound accounts for.
fn dims(groups: &[Group]) -> Vec<String> {
    let mut d: BTreeSet<String> = [CPU, MEMORY, PODS].iter().map(|s| s.to_string()).collect();
    for g in groups {
        d.extend(g.demand.extended.keys().cloned());
    }
    d.into_iter().collect()
}

/// Removes cells another cell beats for every group that may use them: no more expensive, at
/// least as much of everything, usable by a superset of groups. Existing capacity is kept.
fn prune(cells: &[Cell], groups: &mut [Group], dims: &[String]) -> Vec<usize> {
    let n = cells.len();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (g, grp) in groups.iter().enumerate() {
        for &c in &grp.cells {
            members[c].push(g);
        }
    }
    let mut dominated = vec![false; n];
    let mut order: Vec<usize> = (0..n).filter(|&c| !members[c].is_empty()).collect();
    order.sort_by(|&a, &b| cells[a].price.total_cmp(&cells[b].price).then(a.cmp(&b)));
    let mut kept: Vec<usize> = Vec::new();
    for &c in &order {
        if cells[c].bounded {
            kept.push(c);
            continue;
        }
        let beaten = kept.iter().any(|&k| {
            !cells[k].bounded
                && cells[k].price <= cells[c].price
                && dims
                    .iter()
                    .all(|d| cells[k].cap.get(d) >= cells[c].cap.get(d))
                && members[c]
                    .iter()
                    .all(|g| members[k].binary_search(g).is_ok())
        });
        if beaten {
            dominated[c] = true;
        } else {
            kept.push(c);
        }
    }
    for g in groups.iter_mut() {
        g.cells.retain(|&c| !dominated[c]);
    }
    kept
}

/// The LP optimum for these cells and groups.
pub(crate) fn lp_bound(cells: &[Cell], groups: &[Group]) -> Result<f64, PackError> {
    if groups.iter().all(|g| g.demand.is_zero()) {
        return Ok(0.0);
    }
    let mut groups = groups.to_vec();
    let dims = dims(&groups);
    let kept = prune(cells, &mut groups, &dims);
    let mut vars = ProblemVariables::new();
    let mut x: HashMap<usize, Variable> = HashMap::new();
    for &c in &kept {
        let v = if cells[c].bounded {
            variable().min(0.0).max(1.0)
        } else {
            variable().min(0.0)
        };
        x.insert(c, vars.add(v));
    }
    // u[(g, c, d)]: how much of resource d group g takes from cell c.
    let mut u: BTreeMap<(usize, usize, usize), Variable> = BTreeMap::new();
    for (g, grp) in groups.iter().enumerate() {
        for &c in &grp.cells {
            for (di, d) in dims.iter().enumerate() {
                if grp.demand.get(d) > 0 && cells[c].cap.get(d) > 0 {
                    u.insert((g, c, di), vars.add(variable().min(0.0)));
                }
            }
        }
    }
    let objective: Expression = kept.iter().map(|c| cells[*c].price * x[c]).sum();
    let mut model = vars.minimise(objective).using(microlp);
    for (g, grp) in groups.iter().enumerate() {
        for (di, d) in dims.iter().enumerate() {
            let need = grp.demand.get(d);
            if need <= 0 {
                continue;
            }
            let supply: Expression = grp
                .cells
                .iter()
                .filter_map(|&c| u.get(&(g, c, di)))
                .map(|v| Expression::from(*v))
                .sum();
            model = model.with(constraint!(supply >= scale(d, need)));
        }
    }
    for &c in &kept {
        for (di, d) in dims.iter().enumerate() {
            let takers: Vec<Variable> = (0..groups.len())
                .filter_map(|g| u.get(&(g, c, di)).copied())
                .collect();
            if takers.is_empty() {
                continue;
            }
            let used: Expression = takers.iter().map(|v| Expression::from(*v)).sum();
            model = model.with(constraint!(used <= scale(d, cells[c].cap.get(d)) * x[&c]));
        }
    }
    let sol = model
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?;
    Ok(kept
        .iter()
        .map(|c| cells[*c].price * sol.value(x[c]))
        .sum::<f64>()
        .max(0.0))
}

/// Resources in numerically friendly units: cores, GiB, counts.
pub(crate) fn scale(d: &str, v: i64) -> f64 {
    match d {
        CPU => v as f64 / 1000.0,
        MEMORY => v as f64 / (1u64 << 30) as f64,
        _ => v as f64,
    }
}

/// The node requirements every plan must meet for a pod: its nodeSelector, and its required
/// node affinity when that is a single term (with several, any may be used, so none binds),
/// and what its volumes require.
fn binding_requirements(pod: &Pod) -> capstan_model::Requirements {
    let mut reqs = pod.node_selector.clone();
    reqs.add_all(&pod.volume_requirements);
    if pod.required_terms.len() == 1 {
        reqs.add_all(&pod.required_terms[0]);
    }
    reqs
}

/// Free capacity of existing nodes and in-flight claims: cells at price 0.
fn existing_cells(
    input: &SolveInput<'_>,
) -> Vec<(Cell, capstan_model::Requirements, Vec<capstan_model::Taint>)> {
    let snap = input.snapshot;
    let mut used: HashMap<&str, Resources> = HashMap::new();
    for p in snap.pods.iter().filter(|p| p.is_active()) {
        if let Some(n) = &p.node_name {
            used.entry(n.as_str()).or_default().add(&p.requests);
        }
    }
    let mut out = Vec::new();
    for n in snap.nodes.iter().filter(|n| !n.unschedulable) {
        let mut cap = n.allocatable.clone();
        cap.pods = n.max_pods();
        if let Some(u) = used.get(n.name.as_str()) {
            cap.sub(u);
        }
        out.push((
            Cell {
                price: 0.0,
                cap,
                bounded: true,
            },
            capstan_model::Requirements::from_labels(&n.labels),
            n.taints.clone(),
        ));
    }
    for c in &snap.inflight {
        let mut cap = c.allocatable.clone();
        if let Some(u) = used.get(c.name.as_str()) {
            cap.sub(u);
        }
        out.push((
            Cell {
                price: 0.0,
                cap,
                bounded: true,
            },
            capstan_model::Requirements::from_labels(&c.labels),
            c.taints.clone(),
        ));
    }
    out
}

/// The bound for all pending pods of a solve input.
pub fn lower_bound(input: &SolveInput<'_>) -> Result<f64, PackError> {
    lower_bound_counted(input, &vec![1; input.pending.len()])
}

/// The bound for `counts[i]` pods like `input.pending[i]` each: the same figure as
/// [`lower_bound`] over the pods written out, without building or grouping them one by one.
pub fn lower_bound_counted(input: &SolveInput<'_>, counts: &[usize]) -> Result<f64, PackError> {
    let mut cells: Vec<Cell> = Vec::new();
    // (pool, type) cells.
    let mut pool_cells: Vec<Vec<(usize, usize)>> = Vec::new(); // per pool: (type, cell)
    for pool in input.nodepools {
        let daemons = PoolDaemons::new(pool, &input.snapshot.daemonsets, input.instance_types);
        let mut mine = Vec::new();
        for (t, it) in input.instance_types.iter().enumerate() {
            if !type_compatible(it, &pool.requirements) {
                continue;
            }
            let Some(o) = it.cheapest_offering(&pool.requirements) else {
                continue;
            };
            let cap = daemons.capacity(t, it);
            if cap.cpu < 0 || cap.memory < 0 || cap.pods <= 0 {
                continue;
            }
            mine.push((t, cells.len()));
            cells.push(Cell {
                price: o.price,
                cap,
                bounded: false,
            });
        }
        pool_cells.push(mine);
    }
    let existing = existing_cells(input);
    let first_existing = cells.len();
    cells.extend(existing.iter().map(|(c, _, _)| c.clone()));

    // Pods with the same requirements, tolerations and requests may use the same cells.
    let mut shapes: BTreeMap<String, (Vec<usize>, Resources)> = BTreeMap::new();
    for (i, p) in input.pending.iter().enumerate() {
        let n = counts.get(i).copied().unwrap_or(1);
        if n == 0 {
            continue;
        }
        let key = format!(
            "{}|{:?}|{:?}",
            pod_requirements(p),
            p.tolerations,
            p.requests
        );
        let e = shapes
            .entry(key)
            .or_insert_with(|| (Vec::new(), Resources::new()));
        e.0.push(i);
        e.1.add(&p.requests.times(n as i64));
    }
    let mut groups_by_cells: BTreeMap<Vec<usize>, Resources> = BTreeMap::new();
    for (pods, demand) in shapes.values() {
        let pod: &Pod = &input.pending[pods[0]];
        let reqs = binding_requirements(pod);
        let mut allowed = Vec::new();
        for (pi, pool) in input.nodepools.iter().enumerate() {
            if !pod_allowed_in_pool(pool, pod) {
                continue;
            }
            let narrowed = pool.requirements.intersect(&reqs);
            for &(t, c) in &pool_cells[pi] {
                if pod.requests.fits_in(&cells[c].cap)
                    && type_compatible(&input.instance_types[t], &narrowed)
                {
                    allowed.push(c);
                }
            }
        }
        for (k, (cell, node_reqs, taints)) in existing.iter().enumerate() {
            if pod.requests.fits_in(&cell.cap)
                && untolerated(taints, &pod.tolerations, false).is_none()
                && node_reqs.compatible(&reqs, Undefined::Deny).is_ok()
            {
                allowed.push(first_existing + k);
            }
        }
        if allowed.is_empty() {
            // Unschedulable pods cost nothing in any plan.
            continue;
        }
        groups_by_cells.entry(allowed).or_default().add(demand);
    }
    let groups: Vec<Group> = groups_by_cells
        .into_iter()
        .map(|(cells, demand)| Group { demand, cells })
        .collect();
    lp_bound(&cells, &groups)
}

/// Dual prices of each resource for a class: what one unit is worth at the LP optimum
/// (max Σ π·demand subject to π·capacity ≤ price for every candidate). Keyed by resource name.
pub(crate) fn dual_prices(
    cands: &[Cand],
    demand: &Resources,
) -> Result<BTreeMap<String, f64>, PackError> {
    let mut names: Vec<String> = vec![CPU.into(), MEMORY.into(), PODS.into()];
    names.extend(demand.extended.keys().cloned());
    let mut vars = ProblemVariables::new();
    let pi: Vec<Variable> = names
        .iter()
        .map(|_| vars.add(variable().min(0.0)))
        .collect();
    let objective: Expression = names
        .iter()
        .zip(&pi)
        .map(|(n, v)| scale(n, demand.get(n)) * *v)
        .sum();
    let mut model = vars.maximise(objective).using(microlp);
    for c in cands {
        let lhs: Expression = names
            .iter()
            .zip(&pi)
            .map(|(n, v)| scale(n, c.cap.get(n)) * *v)
            .sum();
        model = model.with(constraint!(lhs <= c.price));
    }
    let sol = model
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?;
    Ok(names
        .iter()
        .zip(&pi)
        .map(|(n, v)| (n.clone(), sol.value(*v)))
        .collect())
}

/// The configuration LP bound (column generation) when it applies: one NodePool, no existing
/// capacity, and every pending pod with the same node requirements and tolerations (so any pod
/// may share any node). `None` otherwise.
pub fn config_bound(input: &SolveInput<'_>) -> Result<Option<f64>, PackError> {
    Ok(config_bound_in(
        input,
        &crate::config::Ctx::new(&|| false, &|| f64::INFINITY),
    )?
    .map(|(b, _)| b))
}

/// A configuration bound this close to its LP's value leaves the aggregate bound (weaker where
/// both apply, about 1% below the LP's value on the recorded sets) too little to add for its cost.
const AGGREGATE_CANNOT_HELP: f64 = 1e-2;

/// The configuration bound and the LP value it certifies (the restricted master's), when it
/// applies.
pub(crate) fn config_bound_in(
    input: &SolveInput<'_>,
    ctx: &crate::config::Ctx<'_>,
) -> Result<Option<(f64, f64)>, PackError> {
    let snap = input.snapshot;
    if input.nodepools.len() != 1
        || !snap.nodes.is_empty()
        || !snap.inflight.is_empty()
        || input.pending.is_empty()
    {
        return Ok(None);
    }
    let pool = &input.nodepools[0];
    let first = &input.pending[0];
    let reqs = binding_requirements(first);
    let same = input.pending.iter().all(|p| {
        pod_allowed_in_pool(pool, p)
            && binding_requirements(p) == reqs
            && pool.taints.iter().all(|t| {
                untolerated(std::slice::from_ref(t), &p.tolerations, true).is_none()
                    == untolerated(std::slice::from_ref(t), &first.tolerations, true).is_none()
            })
    });
    if !same {
        return Ok(None);
    }
    let daemons = PoolDaemons::new(pool, &snap.daemonsets, input.instance_types);
    let narrowed = pool.requirements.intersect(&reqs);
    let cands = crate::candidates(input.instance_types, &narrowed, &daemons);
    let (dims, groups, _) = crate::shape_groups(input.pending, 0..input.pending.len());
    let vec_of = |r: &Resources| dims.iter().map(|d| r.get(d)).collect::<Vec<i64>>();
    let shapes: Vec<crate::config::Shape> = groups
        .iter()
        .map(|ids| crate::config::Shape {
            req: vec_of(&input.pending[ids[0]].requests),
            n: ids.len() as i64,
        })
        .collect();
    let nd = crate::greedy::nondominated(&cands, &dims);
    let types: Vec<crate::config::NodeType> = nd
        .iter()
        .map(|&i| crate::config::NodeType {
            cap: vec_of(&cands[i].cap),
            price: cands[i].price,
        })
        .collect();
    // A shape no type holds makes its pods unschedulable: they cost nothing in any plan.
    let shapes: Vec<crate::config::Shape> = shapes
        .into_iter()
        .filter(|s| {
            types
                .iter()
                .any(|t| t.cap.iter().zip(&s.req).all(|(c, r)| r <= c))
        })
        .collect();
    if shapes.is_empty() {
        return Ok(Some((0.0, 0.0)));
    }
    let lp = ctx.config_lp(&dims, &shapes, &types)?;
    Ok(Some((lp.bound, lp.value)))
}

/// The bound for a plan: over the pods it places (an unschedulable pod costs nothing), the
/// larger of the aggregate bound and, where it applies, the configuration bound.
pub fn plan_bound(input: &SolveInput<'_>, plan: &capstan_sched::Plan) -> Result<f64, PackError> {
    plan_bound_in(
        input,
        plan,
        &crate::config::Ctx::new(&|| false, &|| f64::INFINITY),
    )
}

pub(crate) fn plan_bound_in(
    input: &SolveInput<'_>,
    plan: &capstan_sched::Plan,
    ctx: &crate::config::Ctx<'_>,
) -> Result<f64, PackError> {
    let unschedulable: BTreeSet<usize> = plan.unschedulable.iter().map(|u| u.pod).collect();
    let placed: Vec<std::sync::Arc<Pod>> = input
        .pending
        .iter()
        .enumerate()
        .filter(|(i, _)| !unschedulable.contains(i))
        .map(|(_, p)| p.clone())
        .collect();
    let sub = SolveInput {
        pending: &placed,
        ..*input
    };
    // The configuration bound when it applies; the aggregate bound only where it could add
    // something (it never exceeds the configuration LP's value).
    let config = config_bound_in(&sub, ctx)?;
    if let Some((bound, value)) = config {
        if bound >= value * (1.0 - AGGREGATE_CANNOT_HELP) {
            return Ok(bound);
        }
    }
    let aggregate = lower_bound(&sub)?;
    Ok(match config {
        Some((b, _)) => aggregate.max(b),
        None => aggregate,
    })
}
