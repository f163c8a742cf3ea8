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
use crate::knap;
use crate::master::Master;

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
    /// The restricted master's value: at least the configuration LP's optimum.
    pub value: f64,
    /// Whether `bound` is the configuration LP optimum itself.
    #[allow(dead_code)]
    pub exact: bool,
    /// Columns: (node type, counts per shape), and their LP values.
    pub columns: Vec<(usize, Vec<i64>)>,
    pub z: Vec<f64>,
    /// Dual price per shape (per pod).
    pub duals: Vec<f64>,
}

/// A configuration LP already solved: its shapes, its types and the answer.
type Solved = (Vec<Shape>, Vec<NodeType>, ConfigLp);

/// What one packing run shares: the caller's "should stop" check (the crate reads no clock) and
/// the configuration LPs already solved, since the bound and the packer ask for the same one.
pub(crate) struct Ctx<'a> {
    pub stop: &'a dyn Fn() -> bool,
    /// Seconds the caller still gives (infinite without a deadline).
    pub left: &'a dyn Fn() -> f64,
    solved: std::cell::RefCell<Vec<Solved>>,
    /// The requests of the pods on each node of a plan already made (the first-fit plan): its
    /// patterns start column generation near a good solution instead of from one shape per node.
    seed_nodes: std::cell::RefCell<Vec<Vec<capstan_model::Resources>>>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(stop: &'a dyn Fn() -> bool, left: &'a dyn Fn() -> f64) -> Ctx<'a> {
        Ctx {
            stop,
            left,
            solved: Default::default(),
            seed_nodes: Default::default(),
        }
    }

    /// Remembers a plan's nodes as seeds for the configuration LPs solved after.
    pub(crate) fn seed_with(
        &self,
        plan: &capstan_sched::Plan,
        pods: &[std::sync::Arc<capstan_model::Pod>],
    ) {
        *self.seed_nodes.borrow_mut() = plan
            .new_claims
            .iter()
            .map(|c| c.pods.iter().map(|&p| pods[p].requests.clone()).collect())
            .collect();
    }

    /// The seed plan's nodes as columns of this LP: each node's pods of these shapes, on the
    /// cheapest type that holds them.
    fn seeds(
        &self,
        dims: &[String],
        shapes: &[Shape],
        types: &[NodeType],
    ) -> Vec<(usize, Vec<i64>)> {
        let index: std::collections::HashMap<&[i64], usize> = shapes
            .iter()
            .enumerate()
            .map(|(s, sh)| (sh.req.as_slice(), s))
            .collect();
        let mut out = Vec::new();
        for node in self.seed_nodes.borrow().iter() {
            let mut counts = vec![0i64; shapes.len()];
            for r in node {
                let v: Vec<i64> = dims.iter().map(|d| r.get(d)).collect();
                if let Some(&s) = index.get(v.as_slice()) {
                    counts[s] += 1;
                }
            }
            if counts.iter().all(|&c| c == 0) {
                continue;
            }
            let used: Vec<i64> = (0..dims.len())
                .map(|d| {
                    shapes
                        .iter()
                        .zip(&counts)
                        .map(|(sh, c)| sh.req[d] * c)
                        .sum()
                })
                .collect();
            let cheapest = types
                .iter()
                .enumerate()
                .filter(|(_, t)| t.cap.iter().zip(&used).all(|(c, u)| u <= c))
                .min_by(|a, b| a.1.price.total_cmp(&b.1.price));
            if let Some((t, _)) = cheapest {
                out.push((t, counts));
            }
        }
        out
    }

    /// [`solve`], once per distinct problem.
    pub(crate) fn config_lp(
        &self,
        dims: &[String],
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
        let seeds = self.seeds(dims, shapes, types);
        let lp = solve(
            shapes,
            types,
            seeds,
            Limits::CERTIFY,
            &mut Vec::new(),
            self.stop,
        )?;
        self.solved
            .borrow_mut()
            .push((shapes.to_vec(), types.to_vec(), lp.clone()));
        Ok(lp)
    }
}

/// How far one column generation goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Rounds of pricing at most.
    pub iterations: usize,
    /// Whether to price with full searches once quick ones find nothing (to certify the bound),
    /// or stop there.
    pub certify: bool,
}

impl Limits {
    pub(crate) const CERTIFY: Limits = Limits {
        iterations: MAX_ITERATIONS,
        certify: true,
    };
}

// Column generation's budgets. Every one is a count of work, never a clock, so a plan is the
// same on every machine; `WORK_BUDGET` and `FINAL_BUDGET` were set so the production-shaped and
// GPU-trace sets of a couple of thousand pods finish in about a second on the 2-core machines here.

/// Rounds of pricing at most.
const MAX_ITERATIONS: usize = 300;
/// LP relaxations all pricing searches of one column generation may solve together (each takes
/// a few microseconds): past it the best bound so far stands, with its gap.
const WORK_BUDGET: usize = 150_000;
/// LP relaxations a quick pricing search may solve: a type whose relaxation is not worth more
/// than its price stops at the root; the others get a short best-first search for columns.
const QUICK_NODE_LIMIT: usize = 300;
/// Quick rounds search a type only when its relaxation is worth this share more than its node:
/// a big node's relaxation overshoots by about a pod's worth and rarely hides a column.
const QUICK_MARGIN: f64 = 0.01;
/// LP relaxations one search of a full round may solve; past it the nodes left open bound it.
const NODE_LIMIT: usize = 3_000;
/// A full round's search stops once it has a pattern worth this share more than its node: a
/// round that finds one certifies nothing anyway, only a round finding none must search on.
const SATISFIED: f64 = 2e-3;
/// When the budget ends column generation early, one last round at the master's duals
/// certifies the bound: at most this many LP relaxations in all, and per search.
const FINAL_BUDGET: usize = 40_000;
const FINAL_NODE_LIMIT: usize = 20_000;
/// Pricing proves no pattern is worth more than its node's price by more than this share, so
/// the bound it certifies is within it of the LP optimum.
const PRICING_EPS: f64 = 2e-4;
/// Weight of the stability centre in the prices pricing looks at (Wentges' smoothing).
const SMOOTHING: f64 = 0.5;
/// Columns one round adds to the master at most.
const MAX_NEW_COLUMNS: usize = 300;
/// Column generation stops once the master's value is within this share of a proven bound.
const GAP_TARGET: f64 = 2e-3;

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

/// How hard one pricing round searches.
#[derive(Clone, Copy, Debug)]
enum Round {
    /// Short searches, only where a relaxation promises a column.
    Quick,
    /// Every type searched (up to this many relaxations each), stopping at a clear column.
    Full(usize),
    /// Every type searched to its end within the final budget: a certificate.
    Final,
}

/// One pricing round's outcome.
struct Priced {
    /// Patterns worth more than their node at the master's own duals: (gain ratio, type,
    /// counts).
    found: Vec<(f64, usize, Vec<i64>)>,
    /// No pattern of any type is worth more than its price times this, at the prices looked at.
    ratio: f64,
    /// Whether every search finished.
    finished: bool,
    work: usize,
}

/// What pricing reads, shared by every round.
struct Pricing<'a> {
    types: &'a [NodeType],
    reqs: &'a [&'a [i64]],
    counts: &'a [i64],
}

impl Pricing<'_> {
    /// Prices every type at `pi`; columns are kept when they also improve at `current` (the
    /// master's own duals, which `pi` may be a smoothed version of).
    fn round(&self, pi: &[f64], current: &[f64], round: Round, hints: &mut [Vec<f64>]) -> Priced {
        let mut out = Priced {
            found: Vec::new(),
            ratio: 1.0,
            finished: true,
            work: 0,
        };
        let worth = |c: &[i64]| -> f64 { c.iter().zip(current).map(|(k, p)| *k as f64 * p).sum() };
        let mut final_left = FINAL_BUDGET;
        for (t, ty) in self.types.iter().enumerate() {
            let threshold = ty.price * (1.0 + 1e-7);
            let (limit, satisfied, search_above) = match round {
                Round::Quick => (
                    QUICK_NODE_LIMIT,
                    f64::INFINITY,
                    ty.price * (1.0 + QUICK_MARGIN),
                ),
                Round::Full(limit) => (limit, ty.price * (1.0 + SATISFIED), 0.0),
                Round::Final => (FINAL_NODE_LIMIT.min(final_left).max(1), f64::INFINITY, 0.0),
            };
            let p = knap::price(
                &knap::Problem {
                    cap: &ty.cap,
                    reqs: self.reqs,
                    counts: self.counts,
                    values: pi,
                },
                &knap::Search {
                    threshold,
                    eps: PRICING_EPS,
                    node_limit: limit,
                    satisfied,
                    search_above,
                },
                &mut hints[t],
            );
            out.work += p.nodes;
            final_left = final_left.saturating_sub(p.nodes);
            out.finished &= p.finished;
            if ty.price > 0.0 {
                out.ratio = out.ratio.max(p.upper / ty.price);
            } else if p.upper > 0.0 {
                // Farley's bound needs every type's value-to-price ratio; a free type has none.
                out.ratio = f64::INFINITY;
            }
            for (value, c) in std::iter::once((p.value, p.counts)).chain(p.more) {
                if value <= threshold + 1e-9 {
                    continue;
                }
                let gain = worth(&c);
                if gain > threshold + 1e-9 {
                    out.found.push((gain / ty.price.max(1e-12), t, c));
                }
            }
        }
        out
    }
}

/// The best certified bound so far and the feasible shape prices behind it.
struct Certified {
    bound: f64,
    duals: Vec<f64>,
}

impl Certified {
    /// Farley's bound at prices `pi` where no pattern is worth more than `ratio` times its node:
    /// `pi / ratio` is dual feasible, so `pi·demand / ratio` bounds every plan. True when it
    /// improves the best.
    fn improve(&mut self, pi: &[f64], demand: &[f64], ratio: f64) -> bool {
        if !ratio.is_finite() {
            return false;
        }
        let value: f64 = pi.iter().zip(demand).map(|(y, n)| y * n).sum::<f64>() / ratio;
        if value > self.bound {
            self.bound = value;
            self.duals = pi.iter().map(|p| p / ratio).collect();
            return true;
        }
        false
    }
}

/// Column generation over `types` (already restricted to types that may host every shape; a
/// shape that does not fit a type simply never appears in its patterns).
///
/// `hints` holds, per type, the row prices of its last pricing relaxation (empty at first): a
/// caller solving related LPs over the same types (diving) passes the same vector on.
pub(crate) fn solve(
    shapes: &[Shape],
    types: &[NodeType],
    seed_columns: Vec<(usize, Vec<i64>)>,
    limits: Limits,
    hints: &mut Vec<Vec<f64>>,
    stop: &dyn Fn() -> bool,
) -> Result<ConfigLp, PackError> {
    hints.resize(types.len(), Vec::new());
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
            value: 0.0,
            exact: false,
            columns,
            z: Vec::new(),
            duals: vec![0.0; shapes.len()],
        });
    }
    let reqs: Vec<&[i64]> = shapes.iter().map(|s| s.req.as_slice()).collect();
    let counts: Vec<i64> = shapes.iter().map(|s| s.n).collect();
    let demand: Vec<f64> = shapes.iter().map(|s| s.n as f64).collect();
    let big = 1e4 * types.iter().map(|t| t.price).fold(1.0, f64::max);
    let mut master = Master::new(&demand, big);
    for (t, c) in &columns {
        master.add_column(types[*t].price, c);
    }
    let pricing = Pricing {
        types,
        reqs: &reqs,
        counts: &counts,
    };
    // The best of the Farley bounds met on the way (each is valid on its own) and the shape
    // prices that give it: the duals scaled so no pattern is worth more than its node. They are
    // also the stability centre: pricing looks at a point between them and the master's duals,
    // which damps the duals' swings from round to round.
    let mut best = Certified {
        bound: 0.0,
        duals: vec![0.0; shapes.len()],
    };
    let mut center: Option<Vec<f64>> = None;
    let mut smoothing = SMOOTHING;
    let mut exact = false;
    let mut obj = 0.0;
    let mut iterations = 0;
    // Quick rounds first (a short search for types whose relaxation promises a column); when
    // they find nothing, a full round.
    let mut quick = true;
    let mut work = 0usize;
    let mut resolve = true;
    loop {
        if resolve {
            master.solve();
            obj = master.objective();
        }
        let current: Vec<f64> = master.duals().into_iter().map(|y| y.max(0.0)).collect();
        let pi: Vec<f64> = match &center {
            Some(c) if smoothing > 0.0 => c
                .iter()
                .zip(&current)
                .map(|(c, p)| smoothing * c + (1.0 - smoothing) * p)
                .collect(),
            _ => current.clone(),
        };
        iterations += 1;
        let round = if quick {
            Round::Quick
        } else {
            Round::Full(NODE_LIMIT.min(WORK_BUDGET.saturating_sub(work)).max(1))
        };
        let priced = pricing.round(&pi, &current, round, hints);
        work += priced.work;
        if best.improve(&pi, &demand, priced.ratio) {
            center = Some(pi.clone());
        }
        // Close enough: the restricted master's value is within the target of a proven bound.
        if obj - best.bound <= GAP_TARGET * obj {
            exact = true;
            break;
        }
        if iterations >= limits.iterations || work >= WORK_BUDGET || stop() {
            break;
        }
        let mut found = priced.found;
        if found.is_empty() {
            resolve = false;
            if smoothing > 0.0 && center.is_some() {
                // Mispriced: nothing the smoothed prices found helps the master; look at its
                // own duals.
                smoothing = 0.0;
                continue;
            }
            if !quick || !limits.certify {
                // A full round at the master's duals found nothing: the master is optimal (and
                // certified when every search finished).
                exact = priced.finished;
                break;
            }
            quick = false;
            continue;
        }
        resolve = true;
        quick = true;
        smoothing = SMOOTHING;
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut added = 0;
        for (_, t, c) in found {
            if added == MAX_NEW_COLUMNS {
                break;
            }
            if !columns.iter().any(|(ct, cc)| *ct == t && *cc == c) {
                master.add_column(types[t].price, &c);
                columns.push((t, c));
                added += 1;
            }
        }
    }
    if limits.certify && !exact && !stop() {
        // Cut short by the budget: one last full round at the master's duals, each search to
        // its end within its own budget, certifies the bound as well as this master allows.
        let pi: Vec<f64> = master.duals().into_iter().map(|y| y.max(0.0)).collect();
        let priced = pricing.round(&pi, &pi, Round::Final, hints);
        best.improve(&pi, &demand, priced.ratio);
    }
    let z = master.values();
    Ok(ConfigLp {
        bound: best.bound,
        value: obj,
        exact,
        columns,
        z,
        duals: best.duals,
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
        let lp = solve(
            &shapes,
            &types,
            Vec::new(),
            Limits::CERTIFY,
            &mut Vec::new(),
            &|| false,
        )
        .unwrap();
        assert!(lp.exact);
        assert!((lp.bound - 4.0).abs() < 1e-6, "{}", lp.bound);
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
        let lp = solve(
            &shapes,
            &types,
            Vec::new(),
            Limits::CERTIFY,
            &mut Vec::new(),
            &|| false,
        )
        .unwrap();
        assert!(lp.exact);
        assert!((lp.bound - 2.0).abs() < 1e-6, "{}", lp.bound);
    }
}
