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
    stop: &dyn Fn() -> bool,
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
        nodes: &mut usize,
        stop: &dyn Fn() -> bool,
    ) -> bool {
        *nodes += 1;
        if out.len() > room || ((*nodes).is_multiple_of(4096) && stop()) {
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
                nodes,
                stop,
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
        &mut 0,
        stop,
    )
}

/// Outcome of the combinatorial search over patterns.
enum Search {
    /// No cover cheaper than the bound it started with exists.
    Proven,
    /// A cheaper cover (columns, possibly repeated), and whether it is proven the cheapest.
    Better(Vec<usize>, bool),
    /// Ran out of nodes.
    Incomplete,
}

/// Depth-first search for a cover cheaper than `ub`: branch on the uncovered shape with the
/// fewest columns, try its columns by reduced cost, cut when cost so far plus the LP prices of
/// what remains reaches the best known cost, and never revisit a remaining demand at a higher
/// cost (a transposition table).
fn search(
    shapes: &[Shape],
    columns: &[(usize, Vec<i64>)],
    prices: &[f64],
    duals: &[f64],
    ub: f64,
    node_limit: usize,
    stop: &dyn Fn() -> bool,
) -> (Search, usize) {
    use std::collections::HashMap;
    let rc: Vec<f64> = columns
        .iter()
        .zip(prices)
        .map(|((_, c), p)| p - c.iter().zip(duals).map(|(k, d)| *k as f64 * d).sum::<f64>())
        .collect();
    let mut covering: Vec<Vec<usize>> = vec![Vec::new(); shapes.len()];
    for (k, (_, c)) in columns.iter().enumerate() {
        for (s, &n) in c.iter().enumerate() {
            if n > 0 {
                covering[s].push(k);
            }
        }
    }
    for list in covering.iter_mut() {
        list.sort_by(|&a, &b| rc[a].total_cmp(&rc[b]));
    }
    struct St<'a> {
        rc: Vec<f64>,
        columns: &'a [(usize, Vec<i64>)],
        prices: &'a [f64],
        duals: &'a [f64],
        covering: Vec<Vec<usize>>,
        best: f64,
        best_path: Option<Vec<usize>>,
        path: Vec<usize>,
        memo: HashMap<Vec<i64>, f64>,
        nodes: usize,
        limit: usize,
        stop: &'a dyn Fn() -> bool,
    }
    fn rec(st: &mut St<'_>, rem: &[i64], g: f64) -> bool {
        st.nodes += 1;
        if st.nodes > st.limit || (st.nodes.is_multiple_of(4096) && (st.stop)()) {
            return false;
        }
        if rem.iter().all(|&r| r <= 0) {
            if g < st.best - 1e-9 {
                st.best = g;
                st.best_path = Some(st.path.clone());
            }
            return true;
        }
        let lb = g + rem
            .iter()
            .zip(st.duals)
            .map(|(r, d)| (*r).max(0) as f64 * d)
            .sum::<f64>();
        if lb >= st.best - 1e-9 {
            return true;
        }
        if st.memo.get(rem).is_some_and(|&seen| seen <= g + 1e-12) {
            return true;
        }
        st.memo.insert(rem.to_vec(), g);
        let s = (0..rem.len())
            .filter(|&s| rem[s] > 0)
            .min_by_key(|&s| st.covering[s].len())
            .expect("something remains");
        for idx in 0..st.covering[s].len() {
            let k = st.covering[s][idx];
            // A child's bound is at least this one's plus the column's reduced cost, and the
            // columns come by reduced cost: once one cannot fit under the best, none can.
            if lb + st.rc[k] >= st.best - 1e-9 {
                break;
            }
            let child_lb = g
                + st.prices[k]
                + rem
                    .iter()
                    .zip(&st.columns[k].1)
                    .zip(st.duals)
                    .map(|((r, c), d)| (r - c).max(0) as f64 * d)
                    .sum::<f64>();
            if child_lb >= st.best - 1e-9 {
                continue;
            }
            let next: Vec<i64> = rem
                .iter()
                .zip(&st.columns[k].1)
                .map(|(r, c)| (r - c).max(0))
                .collect();
            st.path.push(k);
            let ok = rec(st, &next, g + st.prices[k]);
            st.path.pop();
            if !ok {
                return false;
            }
        }
        true
    }
    let mut st = St {
        rc,
        columns,
        prices,
        duals,
        covering,
        best: ub,
        best_path: None,
        path: Vec::new(),
        memo: HashMap::new(),
        nodes: 0,
        limit: node_limit,
        stop,
    };
    let need: Vec<i64> = shapes.iter().map(|s| s.n).collect();
    let complete = rec(&mut st, &need, 0.0);
    let outcome = match st.best_path {
        Some(path) => Search::Better(path, complete),
        None if complete => Search::Proven,
        None => Search::Incomplete,
    };
    (outcome, st.nodes)
}

/// Solves a class exactly when it can: the nodes and the gap to the lower bound (0 = proven).
pub(crate) fn solve(
    input: &SolveInput<'_>,
    class: &Class,
    time_limit: f64,
    heuristic: Vec<PackedNode>,
    ctx: &config::Ctx<'_>,
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
    // The LP's shape prices are dual feasible (scaled so no pattern is worth more than its
    // node), and its bound is their value: the reduced-cost argument below needs nothing else.
    let lp = ctx.config_lp(&dims, &shapes, &types)?;
    if lp.bound <= 0.0 || (ctx.stop)() {
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
            ctx.stop,
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
    // First a combinatorial search (fast when few covers come close to the bound).
    let mut columns = columns;
    // A node budget stands in for time in this pure crate (about 300,000 nodes per second of
    // limit, measured on the 2-core machines here: the search can overrun the limit by a
    // fifth); the integer program, which honours the limit itself, gets a quarter of it.
    let node_limit =
        (time_limit.min((ctx.left)()) * 300_000.0).clamp(10_000.0, 50_000_000.0) as usize;
    let mut heuristic = heuristic;
    let mut ub = ub;
    // Each better cover found tightens the bound the next search prunes with, and drops the
    // columns whose reduced cost no longer fits under it.
    let mut budget = node_limit;
    while budget > 1_000 && !(ctx.stop)() {
        let slack = ub - lp.bound;
        columns.retain(|(t, c)| {
            let value: f64 = c.iter().zip(&lp.duals).map(|(k, d)| *k as f64 * d).sum();
            types[*t].price - value <= slack + 1e-9
        });
        let prices: Vec<f64> = columns.iter().map(|(t, _)| types[*t].price).collect();
        let (outcome, used) = search(&shapes, &columns, &prices, &lp.duals, ub, budget, ctx.stop);
        budget = budget.saturating_sub(used);
        match outcome {
            Search::Proven => return Ok((heuristic, 0.0)),
            Search::Incomplete => break,
            Search::Better(path, proven) => {
                let mut next = vec![0usize; shapes.len()];
                let mut nodes = Vec::new();
                for k in path {
                    let (t, counts) = &columns[k];
                    let mut ids = Vec::new();
                    for (s, &c) in counts.iter().enumerate() {
                        for _ in 0..c {
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
                if next.iter().zip(&groups).any(|(n, g)| *n < g.len()) {
                    break;
                }
                improve(input, class, &mut nodes);
                let price: f64 = nodes.iter().map(|n| class.cands[n.cand].price).sum();
                if proven {
                    return Ok((nodes, 0.0));
                }
                if price >= ub - 1e-9 {
                    break;
                }
                heuristic = nodes;
                ub = price;
            }
        }
    }
    if (ctx.stop)() {
        return Ok((heuristic, gap_of(ub, lp.bound)));
    }
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
        .with_time_limit(time_limit.min((ctx.left)()).max(0.01));
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
