//! The `optimal` packer: the configuration (pattern) integer program, made exact by
//! reduced-cost pattern enumeration.
//!
//! 1. Column generation solves the configuration LP (see `config`): its value `LB` is a lower
//!    bound, its shape prices π make every pattern's reduced cost `price − π·counts` ≥ 0.
//! 2. The `default` plan gives an upper bound `UB`.
//! 3. A plan cheaper than `UB` can only use patterns whose reduced cost is below `UB − LB`
//!    (its cost is at least `LB` plus the reduced costs of the patterns it buys). Every such
//!    maximal pattern is enumerated, and the integer program over them is solved with good_lp.
//!    Its optimum (or `UB`) is the optimum of the whole problem.
//!
//! When the LP is not proven, the enumeration would be too large, or the solver runs out of
//! time, the best plan found is returned with its gap to `LB`.

use crate::config::{self, NodeType, Shape, Surrogates, branch_order};
use crate::greedy::{improve, nondominated};
use crate::{Class, PackError, PackedNode, shape_groups};
use capstan_sched::SolveInput;
use good_lp::microlp as mip_solver;
use good_lp::{
    Expression, ProblemVariables, Solution, SolutionStatus, SolverModel, Variable, WithTimeLimit,
    constraint, variable,
};

const MAX_PATTERNS: usize = 100_000;

/// Every maximal pattern for one node type worth at least `floor` at prices `values`.
/// `false` when there are more than `room` of them.
fn enumerate(
    cap: &[i64],
    shapes: &[Shape],
    values: &[f64],
    floor: f64,
    room: usize,
    out: &mut Vec<Vec<i64>>,
) -> bool {
    // Shapes worth nothing at the LP prices still need covering: they come last.
    let order = branch_order(cap, shapes, values, true);
    let sur = Surrogates::new(cap, shapes, values, &order);
    let mut used = vec![0i64; cap.len()];
    let mut counts = vec![0i64; shapes.len()];
    #[allow(clippy::too_many_arguments)]
    fn dfs(
        i: usize,
        value: f64,
        order: &[usize],
        shapes: &[Shape],
        values: &[f64],
        cap: &[i64],
        sur: &Surrogates,
        floor: f64,
        room: usize,
        used: &mut Vec<i64>,
        counts: &mut Vec<i64>,
        out: &mut Vec<Vec<i64>>,
    ) -> bool {
        if out.len() > room {
            return false;
        }
        let rem: Vec<i64> = cap.iter().zip(used.iter()).map(|(c, u)| c - u).collect();
        if i == order.len() {
            // Maximal: no shape still needed fits once more.
            let maximal = (0..shapes.len()).all(|s| {
                counts[s] >= shapes[s].n || shapes[s].req.iter().zip(&rem).any(|(r, left)| r > left)
            });
            if maximal && value >= floor - 1e-9 && counts.iter().any(|&c| c > 0) {
                out.push(counts.clone());
            }
            return true;
        }
        if value + sur.bound(i, &rem) < floor - 1e-9 {
            return true;
        }
        let s = order[i];
        let mut k_max = shapes[s].n;
        for (r, left) in shapes[s].req.iter().zip(&rem) {
            if *r > 0 {
                k_max = k_max.min(left / r);
            }
        }
        for k in (0..=k_max.max(0)).rev() {
            for (u, r) in used.iter_mut().zip(&shapes[s].req) {
                *u += r * k;
            }
            counts[s] = k;
            let ok = dfs(
                i + 1,
                value + values[s] * k as f64,
                order,
                shapes,
                values,
                cap,
                sur,
                floor,
                room,
                used,
                counts,
                out,
            );
            for (u, r) in used.iter_mut().zip(&shapes[s].req) {
                *u -= r * k;
            }
            counts[s] = 0;
            if !ok {
                return false;
            }
        }
        true
    }
    dfs(
        0,
        0.0,
        &order,
        shapes,
        values,
        cap,
        &sur,
        floor,
        room,
        &mut used,
        &mut counts,
        out,
    )
}

/// Solves a class exactly when it can: the nodes and the gap to the lower bound (0 = proven).
pub(crate) fn solve(
    input: &SolveInput<'_>,
    class: &Class,
    time_limit: f64,
    heuristic: Vec<PackedNode>,
) -> Result<(Vec<PackedNode>, f64), PackError> {
    let pods = input.pending;
    let ub: f64 = heuristic.iter().map(|n| class.cands[n.cand].price).sum();
    let (dims, groups, _) = shape_groups(pods, class.pods.iter().copied());
    let shapes: Vec<Shape> = groups
        .iter()
        .map(|ids| Shape {
            req: dims.iter().map(|d| pods[ids[0]].requests.get(d)).collect(),
            n: ids.len() as i64,
        })
        .collect();
    let nd = nondominated(&class.cands, &dims);
    let types: Vec<NodeType> = nd
        .iter()
        .map(|&i| NodeType {
            cap: dims.iter().map(|d| class.cands[i].cap.get(d)).collect(),
            price: class.cands[i].price,
        })
        .collect();
    let gap_of = |price: f64, lb: f64| {
        if price > 0.0 {
            ((price - lb) / price).max(0.0)
        } else {
            0.0
        }
    };
    let lp = config::solve(&shapes, &types, Vec::new())?;
    if !lp.exact {
        return Ok((heuristic, gap_of(ub, lp.bound)));
    }
    let delta = ub - lp.bound;
    if delta <= 1e-9 * ub.max(1.0) {
        return Ok((heuristic, 0.0));
    }
    let mut columns: Vec<(usize, Vec<i64>)> = Vec::new();
    for (t, ty) in types.iter().enumerate() {
        let mut out = Vec::new();
        let room = MAX_PATTERNS.saturating_sub(columns.len());
        if !enumerate(
            &ty.cap,
            &shapes,
            &lp.duals,
            ty.price - delta,
            room,
            &mut out,
        ) {
            return Ok((heuristic, gap_of(ub, lp.bound)));
        }
        columns.extend(out.into_iter().map(|c| (t, c)));
    }
    // A column beaten by a no-more-expensive one covering at least as much is never needed.
    columns.sort_by(|a, b| {
        types[a.0]
            .price
            .total_cmp(&types[b.0].price)
            .then_with(|| b.1.cmp(&a.1))
    });
    let mut kept: Vec<(usize, Vec<i64>)> = Vec::with_capacity(columns.len());
    for col in columns {
        if !kept
            .iter()
            .any(|k| k.1.iter().zip(&col.1).all(|(a, b)| a >= b))
        {
            kept.push(col);
        }
    }
    let columns = kept;
    let mut vars = ProblemVariables::new();
    let z: Vec<Variable> = columns
        .iter()
        .map(|(_, counts)| {
            let ub = counts
                .iter()
                .zip(&shapes)
                .filter(|(c, _)| **c > 0)
                .map(|(c, s)| (s.n + c - 1) / c)
                .max()
                .unwrap_or(0);
            vars.add(variable().integer().min(0).max(ub as f64))
        })
        .collect();
    let objective: Expression = columns
        .iter()
        .zip(&z)
        .map(|((t, _), v)| types[*t].price * *v)
        .sum();
    let cutoff = objective.clone();
    let mut model = vars
        .minimise(objective)
        .using(mip_solver)
        .with_time_limit(time_limit);
    // Only plans strictly cheaper than the heuristic's are of interest.
    model = model.with(constraint!(cutoff <= ub - 1e-6));
    for (s, shape) in shapes.iter().enumerate() {
        let cover: Expression = columns
            .iter()
            .zip(&z)
            .filter(|((_, c), _)| c[s] > 0)
            .map(|((_, c), v)| c[s] as f64 * *v)
            .sum();
        model = model.with(constraint!(cover >= shape.n as f64));
    }
    let sol = match model.solve() {
        Ok(sol) => sol,
        // No plan cheaper than the heuristic's exists: it is optimal — provided every shape
        // appears in some column (shapes worth nothing at the LP prices are never enumerated).
        Err(good_lp::ResolutionError::Infeasible)
            if (0..shapes.len()).all(|s| columns.iter().any(|(_, c)| c[s] > 0)) =>
        {
            return Ok((heuristic, 0.0));
        }
        // Out of time before finding anything better.
        Err(_) => return Ok((heuristic, gap_of(ub, lp.bound))),
    };
    let proven = matches!(sol.status(), SolutionStatus::Optimal);
    let mut next = vec![0usize; shapes.len()];
    let mut nodes = Vec::new();
    for ((t, counts), v) in columns.iter().zip(&z) {
        for _ in 0..sol.value(*v).round() as i64 {
            let mut ids = Vec::new();
            for (s, &k) in counts.iter().enumerate() {
                for _ in 0..k {
                    if next[s] < groups[s].len() {
                        ids.push(groups[s][next[s]]);
                        next[s] += 1;
                    }
                }
            }
            if !ids.is_empty() {
                nodes.push(PackedNode {
                    cand: nd[*t],
                    pods: ids,
                });
            }
        }
    }
    if next.iter().zip(&groups).any(|(n, g)| *n < g.len()) {
        return Ok((heuristic, gap_of(ub, lp.bound)));
    }
    improve(input, class, &mut nodes);
    let price: f64 = nodes.iter().map(|n| class.cands[n.cand].price).sum();
    if price >= ub {
        // The heuristic plan was already optimal (when proven) or is the better one.
        return Ok((heuristic, if proven { 0.0 } else { gap_of(ub, lp.bound) }));
    }
    Ok((nodes, if proven { 0.0 } else { gap_of(price, lp.bound) }))
}
