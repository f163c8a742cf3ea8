//! The configuration LP, solved by column generation: the strongest bound this crate computes,
//! and the backbone of the `default` packer.
//!
//! Pods with equal requests form *shapes*. A *pattern* is how many pods of each shape one node of
//! one instance type holds. The LP buys fractional amounts of patterns so every shape is
//! covered, at the lowest price. Columns are generated from the dual prices of the shapes: for
//! every instance type a branch-and-bound knapsack finds the pattern worth most at those prices;
//! a pattern worth more than its node's price enters the LP. When no pattern does (and every
//! knapsack was solved exactly), the LP value is the configuration LP's optimum, a lower bound
//! on every plan. When the search is cut short, Farley's bound (dual value ÷ the best
//! value-to-price ratio any pattern could reach) still is.

use crate::PackError;
use good_lp::{
    Expression, ProblemVariables, Solution, SolverModel, Variable, constraint, microlp, variable,
};

/// Pods with equal requests: their demand vector and count.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shape {
    pub req: Vec<i64>,
    pub n: i64,
}

/// A node type: capacity vector (same dimensions as shapes) and price.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeType {
    pub cap: Vec<i64>,
    pub price: f64,
}

#[derive(Clone, Debug)]
pub(crate) struct ConfigLp {
    /// A proven lower bound on the price of covering every shape.
    pub bound: f64,
    /// Whether `bound` is the configuration LP optimum itself.
    #[allow(dead_code)]
    pub exact: bool,
    /// Columns: (node type, counts per shape), and their LP values.
    pub columns: Vec<(usize, Vec<i64>)>,
    pub z: Vec<f64>,
    /// Dual price per shape (per pod).
    pub duals: Vec<f64>,
}

/// Search nodes one exact pricing knapsack may take before its LP relaxation settles it.
/// A configuration LP already solved: its shapes, its types and the answer.
type Solved = (Vec<Shape>, Vec<NodeType>, ConfigLp);

/// What one packing run shares: the caller's "should stop" check (the crate reads no clock) and
/// the configuration LPs already solved, since the bound and the packer ask for the same one.
pub(crate) struct Ctx<'a> {
    pub stop: &'a dyn Fn() -> bool,
    solved: std::cell::RefCell<Vec<Solved>>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(stop: &'a dyn Fn() -> bool) -> Ctx<'a> {
        Ctx {
            stop,
            solved: Default::default(),
        }
    }

    /// [`solve`], once per distinct problem.
    pub(crate) fn config_lp(
        &self,
        shapes: &[Shape],
        types: &[NodeType],
    ) -> Result<ConfigLp, PackError> {
        if let Some((_, _, lp)) = self
            .solved
            .borrow()
            .iter()
            .find(|(s, t, _)| s == shapes && t == types)
        {
            return Ok(lp.clone());
        }
        let lp = solve(shapes, types, Vec::new(), self.stop)?;
        self.solved
            .borrow_mut()
            .push((shapes.to_vec(), types.to_vec(), lp.clone()));
        Ok(lp)
    }
}

const NODE_LIMIT: usize = 200_000;
/// Search nodes one quick pricing knapsack may take: enough to find an improving pattern when
/// there is an obvious one, so most iterations never pay for an exact search.
const QUICK_NODE_LIMIT: usize = 2_000;
const MAX_ITERATIONS: usize = 200;
/// Search nodes all pricing knapsacks of one column generation may take together (about a
/// second here): past it the best bound so far stands, with its gap. A count, not a clock, so a
/// plan does not depend on the machine.
const WORK_BUDGET: usize = 5_000_000;
/// Column generation stops once the master's value is within this share of a proven bound.
const GAP_TARGET: f64 = 2e-4;

fn fits(cap: &[i64], used: &[i64], req: &[i64], k: i64) -> bool {
    cap.iter()
        .zip(used)
        .zip(req)
        .all(|((c, u), r)| u + r * k <= *c)
}

fn max_fit(cap: &[i64], used: &[i64], req: &[i64], limit: i64) -> i64 {
    let mut k = limit;
    for i in 0..req.len() {
        if req[i] > 0 {
            k = k.min((cap[i] - used[i]) / req[i]);
        }
    }
    k.max(0)
}

/// Best pattern for one node type at the given values: (value, counts, exact).
/// Surrogate relaxations of a bounded multi-dimensional knapsack (one per dimension, the
/// normalized sum, and CPU/memory mixes), each solved as a fractional knapsack: the smallest is a
/// valid upper bound on what the items from a position on can add.
pub(crate) struct Surrogates {
    /// Per surrogate: its weights, and (branch position, value, size, count) by density.
    sorted: Vec<Surrogate>,
}

type Surrogate = (Vec<f64>, Vec<(usize, f64, f64, f64)>);

impl Surrogates {
    /// `order` lists the shapes in the order a search branches on them.
    pub(crate) fn new(
        cap: &[i64],
        shapes: &[Shape],
        values: &[f64],
        order: &[usize],
    ) -> Surrogates {
        let dims = cap.len();
        let mut weights: Vec<Vec<f64>> = (0..dims)
            .map(|r| (0..dims).map(|q| if q == r { 1.0 } else { 0.0 }).collect())
            .collect();
        weights.push(
            (0..dims)
                .map(|r| if cap[r] > 0 { 1.0 / cap[r] as f64 } else { 0.0 })
                .collect(),
        );
        // Mixes of the first two dimensions (CPU and memory), where most of the tension is.
        if dims >= 2 && cap[0] > 0 && cap[1] > 0 {
            for a in [0.2, 0.4, 0.6, 0.8] {
                let mut v = vec![0.0; dims];
                v[0] = a / cap[0] as f64;
                v[1] = (1.0 - a) / cap[1] as f64;
                weights.push(v);
            }
        }
        let sorted = weights
            .into_iter()
            .map(|w| {
                let mut items: Vec<(usize, f64, f64, f64)> = order
                    .iter()
                    .enumerate()
                    .map(|(pos, &s)| {
                        let size: f64 = shapes[s]
                            .req
                            .iter()
                            .zip(&w)
                            .map(|(r, w)| *r as f64 * w)
                            .sum();
                        (pos, values[s], size, shapes[s].n as f64)
                    })
                    .collect();
                items.sort_by(|a, b| {
                    let da = if a.2 > 0.0 { a.1 / a.2 } else { f64::INFINITY };
                    let db = if b.2 > 0.0 { b.1 / b.2 } else { f64::INFINITY };
                    db.total_cmp(&da)
                });
                (w, items)
            })
            .collect();
        Surrogates { sorted }
    }

    /// Upper bound on the value items at positions ≥ `from` can add within `rem`.
    pub(crate) fn bound(&self, from: usize, rem: &[i64]) -> f64 {
        let mut best = f64::INFINITY;
        for (w, items) in &self.sorted {
            let mut left: f64 = rem.iter().zip(w).map(|(r, w)| *r as f64 * w).sum();
            let mut total = 0.0;
            for &(pos, v, size, n) in items {
                if pos < from {
                    continue;
                }
                if size <= 0.0 {
                    total += v * n;
                    continue;
                }
                if left <= 0.0 {
                    continue;
                }
                let take = (left / size).min(n);
                total += v * take;
                left -= take * size;
            }
            best = best.min(total);
        }
        best
    }
}

/// The order a search branches on shapes: most value per unit of the scarcest resource first;
/// shapes worth nothing or not fitting at all are left out.
pub(crate) fn branch_order(
    cap: &[i64],
    shapes: &[Shape],
    values: &[f64],
    include_worthless: bool,
) -> Vec<usize> {
    let dims = cap.len();
    let mut order: Vec<usize> = (0..shapes.len())
        .filter(|&s| {
            (include_worthless || values[s] > 1e-12) && fits(cap, &vec![0; dims], &shapes[s].req, 1)
        })
        .collect();
    let size = |s: usize| -> f64 {
        (0..dims)
            .filter(|&r| cap[r] > 0)
            .map(|r| shapes[s].req[r] as f64 / cap[r] as f64)
            .fold(0.0, f64::max)
            .max(1e-12)
    };
    order.sort_by(|&a, &b| (values[b] / size(b)).total_cmp(&(values[a] / size(a))));
    order
}

/// Searches for the pattern of highest value; branches that cannot beat `threshold` (the node's
/// price) are cut, since only patterns worth more than their price matter.
pub(crate) fn knapsack(
    cap: &[i64],
    shapes: &[Shape],
    values: &[f64],
    threshold: f64,
    node_limit: usize,
) -> (f64, Vec<i64>, bool, f64, usize) {
    let dims = cap.len();
    let order = branch_order(cap, shapes, values, false);
    let surrogates = Surrogates::new(cap, shapes, values, &order);
    let bound = |from: usize, rem: &[i64]| surrogates.bound(from, rem);
    let mut best_value = 0.0;
    let mut best_counts = vec![0i64; shapes.len()];
    let mut counts = vec![0i64; shapes.len()];
    let mut used = vec![0i64; dims];
    let mut nodes = 0usize;
    let root_bound = bound(0, cap);
    #[allow(clippy::too_many_arguments)]
    fn dfs(
        i: usize,
        value: f64,
        order: &[usize],
        shapes: &[Shape],
        values: &[f64],
        cap: &[i64],
        used: &mut Vec<i64>,
        counts: &mut Vec<i64>,
        best_value: &mut f64,
        best_counts: &mut Vec<i64>,
        nodes: &mut usize,
        bound: &dyn Fn(usize, &[i64]) -> f64,
        threshold: f64,
        node_limit: usize,
    ) {
        *nodes += 1;
        if value > *best_value {
            *best_value = value;
            best_counts.clone_from(counts);
        }
        if i == order.len() || *nodes > node_limit {
            return;
        }
        let rem: Vec<i64> = cap.iter().zip(used.iter()).map(|(c, u)| c - u).collect();
        if value + bound(i, &rem) <= best_value.max(threshold) + 1e-12 {
            return;
        }
        let s = order[i];
        let k_max = max_fit(cap, used, &shapes[s].req, shapes[s].n);
        for k in (0..=k_max).rev() {
            for (u, r) in used.iter_mut().zip(&shapes[s].req) {
                *u += r * k;
            }
            counts[s] = k;
            dfs(
                i + 1,
                value + values[s] * k as f64,
                order,
                shapes,
                values,
                cap,
                used,
                counts,
                best_value,
                best_counts,
                nodes,
                bound,
                threshold,
                node_limit,
            );
            for (u, r) in used.iter_mut().zip(&shapes[s].req) {
                *u -= r * k;
            }
            counts[s] = 0;
            if *nodes > node_limit {
                return;
            }
        }
    }
    dfs(
        0,
        0.0,
        &order,
        shapes,
        values,
        cap,
        &mut used,
        &mut counts,
        &mut best_value,
        &mut best_counts,
        &mut nodes,
        &bound,
        threshold,
        node_limit,
    );
    let exact = nodes <= node_limit;
    // A finished search knows the maximum exactly (up to the threshold it pruned against).
    let ub = if exact {
        best_value.max(threshold.min(root_bound))
    } else {
        root_bound.max(best_value)
    };
    (best_value, best_counts, exact, ub, nodes)
}

/// The LP relaxation of one pricing knapsack: an upper bound on any pattern's value.
fn knapsack_lp(cap: &[i64], shapes: &[Shape], values: &[f64]) -> Result<f64, PackError> {
    let mut vars = ProblemVariables::new();
    let a: Vec<Variable> = shapes
        .iter()
        .map(|s| vars.add(variable().min(0.0).max(s.n as f64)))
        .collect();
    let objective: Expression = values.iter().zip(&a).map(|(v, x)| *v * *x).sum();
    let mut model = vars.maximise(objective).using(microlp);
    for (r, &limit) in cap.iter().enumerate() {
        let used: Expression = shapes
            .iter()
            .zip(&a)
            .filter(|(s, _)| s.req[r] > 0)
            .map(|(s, x)| s.req[r] as f64 * *x)
            .sum();
        model = model.with(constraint!(used <= limit as f64));
    }
    let sol = model
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?;
    Ok(values
        .iter()
        .zip(&a)
        .map(|(v, x)| v * sol.value(*x))
        .sum::<f64>()
        * (1.0 + 1e-9))
}

/// The dual of the restricted master: shape prices no column can beat.
fn duals(
    shapes: &[Shape],
    types: &[NodeType],
    columns: &[(usize, Vec<i64>)],
) -> Result<(Vec<f64>, f64), PackError> {
    let mut vars = ProblemVariables::new();
    let pi: Vec<Variable> = shapes
        .iter()
        .map(|_| vars.add(variable().min(0.0)))
        .collect();
    let objective: Expression = shapes.iter().zip(&pi).map(|(s, v)| s.n as f64 * *v).sum();
    let mut model = vars.maximise(objective).using(microlp);
    for (t, counts) in columns {
        let lhs: Expression = counts
            .iter()
            .zip(&pi)
            .filter(|(c, _)| **c > 0)
            .map(|(c, v)| *c as f64 * *v)
            .sum();
        model = model.with(constraint!(lhs <= types[*t].price));
    }
    let sol = model
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?;
    let values: Vec<f64> = pi.iter().map(|v| sol.value(*v).max(0.0)).collect();
    let obj = shapes
        .iter()
        .zip(&values)
        .map(|(s, v)| s.n as f64 * v)
        .sum();
    Ok((values, obj))
}

/// The restricted master's primal solution.
fn primal(
    shapes: &[Shape],
    types: &[NodeType],
    columns: &[(usize, Vec<i64>)],
) -> Result<Vec<f64>, PackError> {
    let mut vars = ProblemVariables::new();
    let z: Vec<Variable> = columns
        .iter()
        .map(|_| vars.add(variable().min(0.0)))
        .collect();
    let objective: Expression = columns
        .iter()
        .zip(&z)
        .map(|((t, _), v)| types[*t].price * *v)
        .sum();
    let mut model = vars.minimise(objective).using(microlp);
    for (s, shape) in shapes.iter().enumerate() {
        let cover: Expression = columns
            .iter()
            .zip(&z)
            .filter(|((_, c), _)| c[s] > 0)
            .map(|((_, c), v)| c[s] as f64 * *v)
            .sum();
        model = model.with(constraint!(cover >= shape.n as f64));
    }
    let sol = model
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?;
    Ok(z.iter().map(|v| sol.value(*v).max(0.0)).collect())
}

/// Column generation over `types` (already restricted to types that may host every shape; a
/// shape that does not fit a type simply never appears in its patterns).
pub(crate) fn solve(
    shapes: &[Shape],
    types: &[NodeType],
    seed_columns: Vec<(usize, Vec<i64>)>,
    stop: &dyn Fn() -> bool,
) -> Result<ConfigLp, PackError> {
    let mut columns = seed_columns;
    // Single-shape columns: for every shape, its five cheapest-per-pod types.
    for (s, shape) in shapes.iter().enumerate() {
        let mut per_pod: Vec<(f64, usize, i64)> = types
            .iter()
            .enumerate()
            .filter_map(|(t, ty)| {
                let k = max_fit(&ty.cap, &vec![0; ty.cap.len()], &shape.req, shape.n);
                (k > 0).then(|| (ty.price / k as f64, t, k))
            })
            .collect();
        per_pod.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, t, k) in per_pod.into_iter().take(5) {
            let mut c = vec![0; shapes.len()];
            c[s] = k;
            columns.push((t, c));
        }
    }
    columns.sort();
    columns.dedup();
    if columns.is_empty() {
        return Ok(ConfigLp {
            bound: 0.0,
            exact: false,
            columns,
            z: Vec::new(),
            duals: vec![0.0; shapes.len()],
        });
    }
    let mut exact = false;
    let mut pi;
    let mut obj;
    // The best of the Farley bounds met on the way: each is valid on its own.
    let mut best_bound = 0.0f64;
    // Farley's bound needs every type's value-to-price ratio; a free type has none.
    let any_free = types.iter().any(|t| t.price <= 0.0);
    let mut iterations = 0;
    // Quick pricing first; a search cut short there proves nothing, so when quick pricing finds
    // no column the next round prices exactly.
    let mut quick = true;
    let mut work = 0usize;
    loop {
        (pi, obj) = duals(shapes, types, &columns)?;
        iterations += 1;
        let limit = if quick { QUICK_NODE_LIMIT } else { NODE_LIMIT };
        let limit = limit
            .min(WORK_BUDGET.saturating_sub(work) / types.len().max(1))
            .max(100);
        let mut all_exact = true;
        let mut ratio_ub = 1.0f64;
        let mut found: Vec<(f64, usize, Vec<i64>)> = Vec::new();
        for (t, ty) in types.iter().enumerate() {
            let (value, counts, was_exact, mut ub, nodes) =
                knapsack(&ty.cap, shapes, &pi, ty.price * (1.0 + 1e-7), limit);
            work += nodes;
            if !quick && !was_exact && ub > ty.price * (1.0 + 1e-7) {
                // The search was cut short: the knapsack's LP relaxation settles it.
                ub = ub.min(knapsack_lp(&ty.cap, shapes, &pi)?);
            }
            all_exact &= was_exact || ub <= ty.price * (1.0 + 1e-7);
            if ty.price > 0.0 {
                ratio_ub = ratio_ub.max(ub / ty.price);
            }
            if value > ty.price * (1.0 + 1e-7) + 1e-9 {
                found.push((value / ty.price.max(1e-12), t, counts));
            }
        }
        if !any_free {
            best_bound = best_bound.max(obj / ratio_ub);
        }
        if found.is_empty() && (!quick || all_exact) {
            exact = all_exact;
            break;
        }
        // Close enough: the restricted master's value is within the target of a proven bound.
        if obj - best_bound <= GAP_TARGET * obj
            || iterations >= MAX_ITERATIONS
            || work >= WORK_BUDGET
            || stop()
        {
            break;
        }
        if found.is_empty() {
            quick = false;
            continue;
        }
        quick = true;
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, t, c) in found.into_iter().take(20) {
            if !columns.iter().any(|(ct, cc)| *ct == t && *cc == c) {
                columns.push((t, c));
            }
        }
    }
    let bound = if exact { obj } else { best_bound.min(obj) };
    let z = primal(shapes, types, &columns)?;
    Ok(ConfigLp {
        bound,
        exact,
        columns,
        z,
        duals: pi,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_bound_sees_what_the_aggregate_bound_misses() {
        // Pods of 600 units on nodes of 1000: one pod per node however you count resources.
        let shapes = vec![Shape {
            req: vec![600],
            n: 4,
        }];
        let types = vec![NodeType {
            cap: vec![1000],
            price: 1.0,
        }];
        let lp = solve(&shapes, &types, Vec::new(), &|| false).unwrap();
        assert!(lp.exact);
        assert!((lp.bound - 4.0).abs() < 1e-6, "{}", lp.bound);
    }

    #[test]
    fn knapsack_finds_the_best_pattern() {
        let shapes = vec![
            Shape {
                req: vec![3, 1],
                n: 10,
            },
            Shape {
                req: vec![1, 3],
                n: 10,
            },
        ];
        let (v, c, exact, _, _) = knapsack(&[8, 8], &shapes, &[1.0, 1.0], 0.0, NODE_LIMIT);
        assert!(exact);
        assert_eq!(v, 4.0);
        assert_eq!(c.iter().sum::<i64>(), 4);
    }

    #[test]
    fn mixing_shapes_beats_buying_one_type_per_shape() {
        let shapes = vec![
            Shape {
                req: vec![3, 1],
                n: 4,
            },
            Shape {
                req: vec![1, 3],
                n: 4,
            },
        ];
        let types = vec![NodeType {
            cap: vec![8, 8],
            price: 1.0,
        }];
        let lp = solve(&shapes, &types, Vec::new(), &|| false).unwrap();
        assert!(lp.exact);
        assert!((lp.bound - 2.0).abs() < 1e-6, "{}", lp.bound);
    }
}
