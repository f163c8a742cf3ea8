//! Pricing for column generation: the bounded multi-dimensional knapsack
//! `max Σ v_j x_j  s.t.  Σ_j a_ij x_j ≤ b_i,  x_j ∈ {0, …, u_j}`, where items are pod shapes and
//! rows are a node type's resources (CPU, memory, pods, GPUs: a handful).
//!
//! A branch-and-bound whose bound at every node is the exact LP relaxation, solved by a small
//! bounded-variable simplex (dense, the basis is at most one row per resource). With so few rows
//! the LP solution has at most that many fractional items, so the bound is within a few pods of
//! the integer optimum and the tree stays small even when a node holds hundreds of pods — where a
//! depth-first search over counts with surrogate bounds could not finish.
//!
//! The search stops proving once nothing left can beat the best pattern (or the caller's
//! threshold) by more than a factor `1 + eps`; what it returns is an upper bound on the best
//! pattern's value either way, so callers can certify a bound without an exact search.

// Dense linear algebra on a handful of rows reads best with indices.
#![allow(clippy::needless_range_loop)]

/// Numerical tolerance on normalized data (every row's capacity is 1).
const TOL: f64 = 1e-9;

/// The LP relaxation at one node: bounds per item.
struct Lp<'a> {
    m: usize,
    /// Column of item j: `a[j * m .. (j + 1) * m]`, normalized by capacity.
    a: &'a [f64],
    v: &'a [f64],
}

#[derive(Clone)]
struct LpSol {
    value: f64,
    x: Vec<f64>,
    /// Row duals: what each resource is worth at this optimum.
    y: Vec<f64>,
}

/// A basis: the basic variable of each row (`j < n` an item, `n + i` row i's slack) and which
/// nonbasic items sit at their upper bound. Children of a search node start from their parent's.
#[derive(Clone, Debug)]
struct Basis {
    rows: Vec<usize>,
    at_upper: Vec<bool>,
    /// The basis matrix's inverse, row-major.
    binv: Vec<f64>,
}

/// The simplex's working state.
struct State {
    basis: Vec<usize>,
    /// Row of each basic variable (`usize::MAX`: nonbasic).
    row_of: Vec<usize>,
    at_upper: Vec<bool>,
    binv: Vec<f64>,
    xb: Vec<f64>,
}

impl Lp<'_> {
    fn n(&self) -> usize {
        self.v.len()
    }

    fn col(&self, j: usize) -> &[f64] {
        &self.a[j * self.m..(j + 1) * self.m]
    }

    /// Bounded-variable primal simplex from the all-slack basis, with the items of `crash` (in
    /// that order) started at their upper bounds while they fit: most of a knapsack's items end
    /// at a bound, so this saves most pivots. `None` when `lo` does not fit.
    fn solve(&self, lo: &[f64], hi: &[f64], crash: &[usize]) -> Option<(LpSol, Basis)> {
        let (m, n) = (self.m, self.n());
        let mut xb = vec![1.0; m];
        for j in 0..n {
            if lo[j] > 0.0 {
                for (x, a) in xb.iter_mut().zip(self.col(j)) {
                    *x -= a * lo[j];
                }
            }
        }
        if xb.iter().any(|&x| x < -TOL) {
            return None;
        }
        let mut at_upper = vec![false; n];
        for &j in crash {
            let span = hi[j] - lo[j];
            if span > 0.0 && xb.iter().zip(self.col(j)).all(|(x, a)| x - a * span >= 0.0) {
                for (x, a) in xb.iter_mut().zip(self.col(j)) {
                    *x -= a * span;
                }
                at_upper[j] = true;
            }
        }
        let mut binv = vec![0.0; m * m];
        for i in 0..m {
            binv[i * m + i] = 1.0;
        }
        let basis: Vec<usize> = (n..n + m).collect();
        let mut row_of = vec![usize::MAX; n + m];
        for (i, &b) in basis.iter().enumerate() {
            row_of[b] = i;
        }
        let mut st = State {
            basis,
            row_of,
            at_upper,
            binv,
            xb,
        };
        self.primal(&mut st, lo, hi);
        Some(self.finish(st, lo, hi))
    }

    /// The LP with bounds `lo`/`hi` from a basis optimal for bounds that differed only on basic
    /// variables: dual simplex back to feasibility, then primal clean-up. `None` when infeasible.
    #[inline(never)]
    fn resolve(&self, lo: &[f64], hi: &[f64], from: &Basis) -> Option<(LpSol, Basis)> {
        let (m, n) = (self.m, self.n());
        let inv = from.binv.clone();
        let mut row_of = vec![usize::MAX; n + m];
        for (i, &v) in from.rows.iter().enumerate() {
            row_of[v] = i;
        }
        // Basic values: B^-1 (b - Σ nonbasic columns at their bounds).
        let mut rhs = vec![1.0; m];
        for j in 0..n {
            if row_of[j] == usize::MAX {
                let x = if from.at_upper[j] { hi[j] } else { lo[j] };
                if x != 0.0 {
                    for (r, a) in rhs.iter_mut().zip(self.col(j)) {
                        *r -= a * x;
                    }
                }
            }
        }
        let xb: Vec<f64> = (0..m)
            .map(|i| (0..m).map(|k| inv[i * m + k] * rhs[k]).sum())
            .collect();
        let mut st = State {
            basis: from.rows.clone(),
            row_of,
            at_upper: from.at_upper.clone(),
            binv: inv,
            xb,
        };
        if !self.dual(&mut st, lo, hi) {
            return None;
        }
        self.primal(&mut st, lo, hi);
        Some(self.finish(st, lo, hi))
    }

    fn bounds_of(&self, v: usize, lo: &[f64], hi: &[f64]) -> (f64, f64) {
        if v < self.n() {
            (lo[v], hi[v])
        } else {
            (0.0, f64::INFINITY)
        }
    }

    fn duals(&self, st: &State, y: &mut [f64]) {
        let (m, n) = (self.m, self.n());
        for (k, yk) in y.iter_mut().enumerate() {
            *yk = (0..m)
                .map(|i| {
                    let b = st.basis[i];
                    if b < n {
                        self.v[b] * st.binv[i * m + k]
                    } else {
                        0.0
                    }
                })
                .sum();
        }
    }

    /// `B^-1 A_e`.
    fn ftran(&self, st: &State, e: usize, alpha: &mut [f64]) {
        let (m, n) = (self.m, self.n());
        for (i, al) in alpha.iter_mut().enumerate() {
            *al = if e < n {
                let row = &st.binv[i * m..(i + 1) * m];
                row.iter().zip(self.col(e)).map(|(b, a)| b * a).sum()
            } else {
                st.binv[i * m + (e - n)]
            };
        }
    }

    /// Replaces the basic variable of row `r` by `e`, whose column in the current basis is
    /// `alpha`.
    fn pivot(&self, st: &mut State, r: usize, e: usize, alpha: &[f64]) {
        let m = self.m;
        let old = st.basis[r];
        st.row_of[old] = usize::MAX;
        st.basis[r] = e;
        st.row_of[e] = r;
        let p = alpha[r];
        for k in 0..m {
            st.binv[r * m + k] /= p;
        }
        for i in 0..m {
            if i != r && alpha[i] != 0.0 {
                let f = alpha[i];
                for k in 0..m {
                    st.binv[i * m + k] -= f * st.binv[r * m + k];
                }
            }
        }
    }

    /// Dual simplex: from a dual feasible basis to a primal feasible one. False when the
    /// bounds admit no solution.
    #[inline(never)]
    fn dual(&self, st: &mut State, lo: &[f64], hi: &[f64]) -> bool {
        let (m, n) = (self.m, self.n());
        let mut y = vec![0.0; m];
        let mut alpha = vec![0.0; m];
        for _ in 0..20 * (n + m) + 100 {
            // Leaving row: the basic variable furthest outside its bounds.
            let mut leave: Option<(usize, f64, bool)> = None; // (row, violation, below)
            for i in 0..m {
                let (lb, ub) = self.bounds_of(st.basis[i], lo, hi);
                let (viol, below) = if st.xb[i] < lb - 1e-9 {
                    (lb - st.xb[i], true)
                } else if st.xb[i] > ub + 1e-9 {
                    (st.xb[i] - ub, false)
                } else {
                    continue;
                };
                if leave.is_none_or(|(_, v, _)| viol > v) {
                    leave = Some((i, viol, below));
                }
            }
            let Some((r, _, below)) = leave else {
                return true;
            };
            self.duals(st, &mut y);
            // Entering: keeps every reduced cost's sign (the smallest |d / alpha_r|).
            let mut enter: Option<(usize, f64, f64)> = None; // (var, ratio, alpha_r)
            for k in 0..n + m {
                if st.row_of[k] != usize::MAX {
                    continue;
                }
                let (ar, d, can_up, can_down) = if k < n {
                    if hi[k] - lo[k] <= TOL {
                        continue;
                    }
                    let col = self.col(k);
                    let row = &st.binv[r * m..(r + 1) * m];
                    let ar: f64 = row.iter().zip(col).map(|(b, a)| b * a).sum();
                    let d = self.v[k] - col.iter().zip(&y).map(|(a, y)| a * y).sum::<f64>();
                    (ar, d, !st.at_upper[k], st.at_upper[k])
                } else {
                    (st.binv[r * m + (k - n)], -y[k - n], true, false)
                };
                // x_B[r] moves by -ar * delta; it must rise when below, fall when above.
                let ok = (can_up && ((below && ar < -TOL) || (!below && ar > TOL)))
                    || (can_down && ((below && ar > TOL) || (!below && ar < -TOL)));
                if !ok {
                    continue;
                }
                let ratio = d.abs() / ar.abs();
                if enter.is_none_or(|(_, best, bar)| {
                    ratio < best - 1e-12 || (ratio <= best + 1e-12 && ar.abs() > bar.abs())
                }) {
                    enter = Some((k, ratio, ar));
                }
            }
            let Some((e, _, ar)) = enter else {
                return false;
            };
            let leaving = st.basis[r];
            let (lb, ub) = self.bounds_of(leaving, lo, hi);
            let target = if below { lb } else { ub };
            let delta = (st.xb[r] - target) / ar;
            self.ftran(st, e, &mut alpha);
            let current = if e < n {
                if st.at_upper[e] { hi[e] } else { lo[e] }
            } else {
                0.0
            };
            for i in 0..m {
                st.xb[i] -= alpha[i] * delta;
            }
            if leaving < n {
                st.at_upper[leaving] = !below;
            }
            self.pivot(st, r, e, &alpha);
            st.xb[r] = current + delta;
        }
        false
    }

    /// Primal simplex from a primal feasible basis to the optimum.
    fn primal(&self, st: &mut State, lo: &[f64], hi: &[f64]) {
        let (m, n) = (self.m, self.n());
        let mut y = vec![0.0; m];
        let mut alpha = vec![0.0; m];
        let max_iter = 20 * (n + m) + 100;
        for iter in 0..max_iter {
            self.duals(st, &mut y);
            // Entering variable: Dantzig's rule, Bland's (lowest index) late in a long run.
            let bland = iter > 5 * (n + m);
            let mut enter: Option<(usize, f64, f64)> = None; // (var, |d|, direction)
            for j in 0..n {
                if st.row_of[j] != usize::MAX || hi[j] - lo[j] <= TOL {
                    continue;
                }
                let d = self.v[j] - self.col(j).iter().zip(&y).map(|(a, y)| a * y).sum::<f64>();
                let dir = if !st.at_upper[j] && d > TOL {
                    1.0
                } else if st.at_upper[j] && d < -TOL {
                    -1.0
                } else {
                    continue;
                };
                if enter.is_none_or(|(_, best, _)| !bland && d.abs() > best) {
                    enter = Some((j, d.abs(), dir));
                }
            }
            for i in 0..m {
                // A slack enters (rising from 0) when its row's dual is negative.
                if st.row_of[n + i] == usize::MAX && -y[i] > TOL {
                    if enter.is_none_or(|(_, best, _)| !bland && -y[i] > best) {
                        enter = Some((n + i, -y[i], 1.0));
                    }
                }
            }
            let Some((e, _, dir)) = enter else {
                break;
            };
            self.ftran(st, e, &mut alpha);
            // Ratio test: basic values move by -dir * t * alpha.
            let mut t_max = if e < n { hi[e] - lo[e] } else { f64::INFINITY };
            let mut leave: Option<(usize, bool)> = None; // (row, leaves at its upper bound)
            for i in 0..m {
                let rate = -dir * alpha[i];
                let b = st.basis[i];
                let (lb, ub) = self.bounds_of(b, lo, hi);
                let (t, up) = if rate < -TOL {
                    ((st.xb[i] - lb) / -rate, false)
                } else if rate > TOL && ub.is_finite() {
                    ((ub - st.xb[i]) / rate, true)
                } else {
                    continue;
                };
                let t = t.max(0.0);
                if t < t_max - TOL
                    || (t <= t_max + TOL && leave.is_some_and(|(r, _)| b < st.basis[r]))
                {
                    t_max = t;
                    leave = Some((i, up));
                }
            }
            if !t_max.is_finite() {
                // Unbounded cannot happen with bounded items and nonnegative columns; stop.
                break;
            }
            for i in 0..m {
                st.xb[i] -= dir * t_max * alpha[i];
            }
            match leave {
                None => {
                    // The entering item moves to its other bound.
                    st.at_upper[e] = !st.at_upper[e];
                }
                Some((r, up)) => {
                    let entering_value = if e < n {
                        (if st.at_upper[e] { hi[e] } else { lo[e] }) + dir * t_max
                    } else {
                        t_max
                    };
                    let old = st.basis[r];
                    if old < n {
                        st.at_upper[old] = up;
                    }
                    self.pivot(st, r, e, &alpha);
                    st.xb[r] = entering_value;
                }
            }
        }
    }

    #[inline(never)]
    fn finish(&self, st: State, lo: &[f64], hi: &[f64]) -> (LpSol, Basis) {
        let n = self.n();
        let mut x: Vec<f64> = (0..n)
            .map(|j| if st.at_upper[j] { hi[j] } else { lo[j] })
            .collect();
        for (i, &b) in st.basis.iter().enumerate() {
            if b < n {
                x[b] = st.xb[i].clamp(lo[b], hi[b]);
            }
        }
        let value = x.iter().zip(self.v).map(|(x, v)| x * v).sum();
        let mut y = vec![0.0; self.m];
        self.duals(&st, &mut y);
        (
            LpSol { value, x, y },
            Basis {
                rows: st.basis,
                at_upper: st.at_upper,
                binv: st.binv,
            },
        )
    }
}

/// A node of the search not yet solved, by its parent's bound (then newest first).
struct Open {
    bound: f64,
    seq: u64,
    lo: Vec<f64>,
    hi: Vec<f64>,
    /// The parent's optimal basis (none at the root).
    from: Option<std::rc::Rc<Basis>>,
}

impl PartialEq for Open {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Open {}
impl PartialOrd for Open {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Open {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bound
            .total_cmp(&other.bound)
            .then(self.seq.cmp(&other.seq))
    }
}

/// What a pricing search found.
#[derive(Clone, Debug)]
pub(crate) struct Priced {
    /// The best pattern's value and its counts per shape.
    pub value: f64,
    pub counts: Vec<i64>,
    /// No pattern is worth more than this.
    pub upper: f64,
    /// Whether the search finished (else `upper` comes from the nodes left open).
    pub finished: bool,
    /// LP relaxations solved.
    pub nodes: usize,
    /// Other patterns worth more than the threshold met on the way, best first (at most
    /// [`MORE`]): column generation takes several columns per type and round.
    pub more: Vec<(f64, Vec<i64>)>,
}

/// Re-solves of the dive from a search's root.
const DIVE_DEPTH: usize = 24;

/// How many patterns besides the best one a search hands back.
const MORE: usize = 60;

/// Items by value per unit of their normalized size, best first.
fn density_order(m: usize, a: &[f64], v: &[f64]) -> Vec<usize> {
    let size = |j: usize| a[j * m..(j + 1) * m].iter().sum::<f64>().max(1e-12);
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&x, &y| (v[y] / size(y)).total_cmp(&(v[x] / size(x))));
    order
}

/// A pricing problem: a node of capacity `cap`; items of requests `reqs` (one vector per shape,
/// same dimensions as `cap`), at most `counts[s]` of shape `s`, worth `values[s]` each.
#[derive(Clone, Copy)]
pub(crate) struct Problem<'a> {
    pub cap: &'a [i64],
    pub reqs: &'a [&'a [i64]],
    pub counts: &'a [i64],
    pub values: &'a [f64],
}

/// How a pricing search runs.
#[derive(Clone, Copy)]
pub(crate) struct Search {
    /// Only patterns worth more than this matter: branches that cannot beat
    /// `max(best, threshold) × (1 + eps)` are cut.
    pub threshold: f64,
    pub eps: f64,
    /// At most this many LP relaxations (the root's always is).
    pub node_limit: usize,
    /// The search stops early once it has a pattern worth more than this.
    pub satisfied: f64,
    /// When the root relaxation is worth no more than this, the search stops there (bounded,
    /// not finished).
    pub search_above: f64,
}

/// The best pattern of a pricing problem, with an upper bound on every pattern's value.
/// `hint` carries the row prices of the type's last root relaxation from one round to the next:
/// the Lagrangian bound at those prices settles most types without solving anything.
pub(crate) fn price(problem: &Problem<'_>, search: &Search, hint: &mut Vec<f64>) -> Priced {
    let Problem {
        cap,
        reqs,
        counts,
        values,
    } = *problem;
    let Search {
        threshold,
        eps,
        node_limit,
        satisfied,
        search_above,
    } = *search;
    let s_all = reqs.len();
    let dims: Vec<usize> = (0..cap.len()).filter(|&d| cap[d] > 0).collect();
    // Items: shapes worth something that fit an empty node.
    let mut items: Vec<usize> = Vec::new();
    let mut hi: Vec<f64> = Vec::new();
    for s in 0..s_all {
        if values[s] <= 0.0 || counts[s] <= 0 {
            continue;
        }
        let mut k = counts[s];
        let mut fits = true;
        for (d, &c) in cap.iter().enumerate() {
            let r = reqs[s][d];
            if r > 0 {
                if c <= 0 {
                    fits = false;
                    break;
                }
                k = k.min(c / r);
            }
        }
        if fits && k > 0 {
            items.push(s);
            hi.push(k as f64);
        }
    }
    let m = dims.len();
    let column_of = |s: usize| dims.iter().map(move |&d| reqs[s][d] as f64 / cap[d] as f64);
    let settled = |upper: f64, nodes: usize| Priced {
        value: 0.0,
        counts: vec![0; s_all],
        upper,
        finished: true,
        nodes,
        more: Vec::new(),
    };
    if !items.is_empty() && hint.len() == m {
        // The Lagrangian bound at the row prices of this type's last relaxation (prices move
        // little between rounds): Σ y + Σ_j u_j (v_j − y·a_j)⁺ bounds every pattern, and
        // settles most types without solving anything.
        let bound: f64 = hint.iter().sum::<f64>()
            + items
                .iter()
                .zip(&hi)
                .map(|(&s, &u)| {
                    let cost: f64 = column_of(s).zip(hint.iter()).map(|(a, y)| a * y).sum();
                    u * (values[s] - cost).max(0.0)
                })
                .sum::<f64>();
        if bound <= threshold * (1.0 + eps) + 1e-12 {
            return settled(bound, 0);
        }
    }
    if !items.is_empty() {
        // Most types are settled by the relaxation alone: worth no more than the threshold.
        let a: Vec<f64> = items.iter().flat_map(|&s| column_of(s)).collect();
        let v: Vec<f64> = items.iter().map(|&s| values[s]).collect();
        let lp = Lp { m, a: &a, v: &v };
        let lo = vec![0.0; items.len()];
        if let Some((root, _)) = lp.solve(&lo, &hi, &density_order(m, &a, &v)) {
            hint.clone_from(&root.y);
            for y in hint.iter_mut() {
                *y = y.max(0.0);
            }
            if root.value <= threshold * (1.0 + eps) + 1e-12 {
                return settled(root.value, 1);
            }
            if root.value <= search_above {
                // Not promising enough to search this round: bounded, not settled.
                let mut p = settled(root.value, 1);
                p.finished = false;
                return p;
            }
        }
    }
    // An item another one dominates (no larger in any resource, worth at least as much) is only
    // in an optimal pattern once the dominating item is at its bound; when that bound is the
    // node's capacity, the dominated item can no longer fit then, so it is never needed.
    let capacity_bound = |s: usize, k: f64| {
        cap.iter()
            .zip(reqs[s])
            .any(|(&c, &r)| r > 0 && (c / r) as f64 <= k)
    };
    let mut keep = vec![true; items.len()];
    for (x, &b) in items.iter().enumerate() {
        keep[x] = !items.iter().enumerate().any(|(y, &a)| {
            y != x
                && keep[y]
                && capacity_bound(a, hi[y])
                && values[a] >= values[b]
                && reqs[a].iter().zip(reqs[b]).all(|(ra, rb)| ra <= rb)
                && (values[a] > values[b] || reqs[a] != reqs[b] || y < x)
        });
    }
    let mut k = 0;
    items.retain(|_| {
        k += 1;
        keep[k - 1]
    });
    let mut k = 0;
    hi.retain(|_| {
        k += 1;
        keep[k - 1]
    });
    let mut out = Priced {
        value: 0.0,
        counts: vec![0; s_all],
        upper: 0.0,
        finished: true,
        nodes: 0,
        more: Vec::new(),
    };
    if items.is_empty() {
        return out;
    }
    let a: Vec<f64> = items.iter().flat_map(|&s| column_of(s)).collect();
    let v: Vec<f64> = items.iter().map(|&s| values[s]).collect();
    let lp = Lp { m, a: &a, v: &v };
    let n = items.len();
    // Integer feasibility is checked on the exact integers.
    // Item requests on the rows in play, item-major, and the rows' capacities: integer
    // feasibility is checked on these exact integers.
    let ireq: Vec<i64> = items
        .iter()
        .flat_map(|&s| dims.iter().map(move |&d| reqs[s][d]))
        .collect();
    let capv: Vec<i64> = dims.iter().map(|&d| cap[d]).collect();
    let used_of = |x: &[i64]| -> Vec<i64> {
        let mut u = vec![0i64; m];
        for (j, &k) in x.iter().enumerate() {
            if k != 0 {
                for (ud, r) in u.iter_mut().zip(&ireq[j * m..(j + 1) * m]) {
                    *ud += r * k;
                }
            }
        }
        u
    };
    let fits = |u: &[i64]| u.iter().zip(&capv).all(|(u, c)| u <= c);
    // Greedy order for completing a rounded solution: value per normalized size.
    let greedy = density_order(m, &a, &v);
    let mut best_x: Vec<i64> = vec![0; n];
    let mut found: Vec<(f64, Vec<i64>)> = Vec::new();
    let mut best = 0.0f64;
    let hi0 = hi.clone();
    // An integer pattern from a relaxation's solution: round down, then add what still fits,
    // best value per unit of resource at the relaxation's prices first.
    // The order in which `complete` adds items: best value per unit of resource at the root
    // relaxation's prices (set once the root is solved; nodes below price alike).
    let order: std::cell::RefCell<Vec<usize>> = std::cell::RefCell::new(Vec::new());
    let complete = |xf: &[f64], y: &[f64], lo: &[f64]| -> Option<(f64, Vec<i64>)> {
        let mut x: Vec<i64> = xf.iter().map(|&x| (x + 1e-7).floor() as i64).collect();
        let mut used = used_of(&x);
        if !fits(&used) {
            // Rounding error at a tight row: back off to the node's lower bounds.
            x = lo.iter().map(|&l| l as i64).collect();
            used = used_of(&x);
            if !fits(&used) {
                return None;
            }
        }
        if order.borrow().is_empty() {
            let priced = |j: usize| {
                let c = lp.col(j).iter().zip(y).map(|(a, y)| a * y).sum::<f64>();
                v[j] / c.max(1e-12)
            };
            let mut o: Vec<(f64, usize)> = (0..n).map(|j| (priced(j), j)).collect();
            o.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            *order.borrow_mut() = o.into_iter().map(|(_, j)| j).collect();
        }
        for &j in order.borrow().iter() {
            let mut k = hi0[j] as i64 - x[j];
            if k <= 0 {
                continue;
            }
            let req = &ireq[j * m..(j + 1) * m];
            for ((u, c), &r) in used.iter().zip(&capv).zip(req) {
                if r > 0 {
                    let left = c - u;
                    if left < r {
                        k = 0;
                        break;
                    }
                    k = k.min(left / r);
                }
            }
            if k > 0 {
                x[j] += k;
                for (u, r) in used.iter_mut().zip(req) {
                    *u += r * k;
                }
            }
        }
        let value: f64 = x.iter().zip(&v).map(|(&k, v)| k as f64 * v).sum();
        Some((value, x))
    };
    let record = |value: f64,
                  x: Vec<i64>,
                  best: &mut f64,
                  best_x: &mut Vec<i64>,
                  found: &mut Vec<(f64, Vec<i64>)>| {
        if value > threshold && found.len() < 64 && !found.iter().any(|(_, f)| *f == x) {
            found.push((value, x.clone()));
        }
        if value > *best {
            *best = value;
            *best_x = x;
        }
    };
    // Best first: the open node of the highest bound (its parent's LP value) next, so when the
    // search is cut short the bound left open is as low as it can be.
    let mut stack: std::collections::BinaryHeap<Open> = std::collections::BinaryHeap::new();
    stack.push(Open {
        bound: f64::INFINITY,
        seq: 0,
        lo: vec![0.0; n],
        hi,
        from: None,
    });
    let mut seq = 0u64;
    let mut open_bound = 0.0f64;
    let cut = |best: f64| best.max(threshold) * (1.0 + eps) + 1e-12;
    while let Some(Open {
        lo,
        hi,
        bound: parent,
        from,
        ..
    }) = stack.pop()
    {
        if parent <= cut(best) {
            continue;
        }
        if best > satisfied {
            // Good enough for the caller: what is left open bounds the rest.
            out.finished = false;
            open_bound = stack.iter().map(|o| o.bound).fold(parent, f64::max);
            break;
        }
        if out.nodes >= node_limit.max(1) {
            out.finished = false;
            open_bound = open_bound.max(parent);
            continue;
        }
        out.nodes += 1;
        let solved = match &from {
            Some(b) => lp.resolve(&lo, &hi, b),
            None => lp.solve(&lo, &hi, &greedy),
        };
        let Some((sol, basis)) = solved else {
            continue;
        };
        let basis = std::rc::Rc::new(basis);
        if out.nodes == 1 {
            out.upper = sol.value;
        }
        for x in [sol.x.as_slice()] {
            if let Some((value, x)) = complete(x, &sol.y, &lo) {
                record(value, x, &mut best, &mut best_x, &mut found);
            }
        }
        if out.nodes == 1 && sol.value > cut(best) {
            // Dive from the root: round the most fractional item up (else down) and re-solve,
            // until the relaxation is whole: a good pattern early prunes the rest of the search.
            let (mut dlo, mut dhi) = (lo.clone(), hi.clone());
            let mut at: (LpSol, std::rc::Rc<Basis>) = (sol.clone(), basis.clone());
            for _ in 0..DIVE_DEPTH {
                let frac = (0..n)
                    .map(|j| (j, at.0.x[j] - at.0.x[j].floor()))
                    .filter(|&(_, f)| f > 1e-7 && f < 1.0 - 1e-7)
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                let Some((j, _)) = frac else { break };
                let f = at.0.x[j].floor();
                let saved = (dlo[j], dhi[j]);
                dlo[j] = f + 1.0;
                out.nodes += 1;
                let mut next = lp.resolve(&dlo, &dhi, &at.1);
                if next.is_none() {
                    dlo[j] = saved.0;
                    dhi[j] = f;
                    out.nodes += 1;
                    next = lp.resolve(&dlo, &dhi, &at.1);
                }
                let Some((dsol, dbasis)) = next else { break };
                if let Some((value, x)) = complete(&dsol.x, &dsol.y, &dlo) {
                    record(value, x, &mut best, &mut best_x, &mut found);
                }
                at = (dsol, std::rc::Rc::new(dbasis));
            }
        }
        if sol.value <= cut(best) {
            continue;
        }
        // Branch on the fractional item worth most.
        let frac = (0..n)
            .filter(|&j| {
                let f = sol.x[j] - sol.x[j].floor();
                f > 1e-7 && f < 1.0 - 1e-7
            })
            .max_by(|&x, &y| v[x].total_cmp(&v[y]));
        let Some(j) = frac else {
            // Integral: the rounded solution was this one (or better).
            continue;
        };
        let f = sol.x[j].floor();
        let mut down_hi = hi.clone();
        down_hi[j] = f;
        let mut up_lo = lo.clone();
        up_lo[j] = f + 1.0;
        seq += 2;
        stack.push(Open {
            bound: sol.value,
            seq,
            lo,
            hi: down_hi,
            from: Some(basis.clone()),
        });
        stack.push(Open {
            bound: sol.value,
            seq: seq + 1,
            lo: up_lo,
            hi,
            from: Some(basis),
        });
    }
    out.value = best;
    let to_shapes = |x: &[i64]| {
        let mut c = vec![0i64; s_all];
        for (j, &s) in items.iter().enumerate() {
            c[s] = x[j];
        }
        c
    };
    out.counts = to_shapes(&best_x);
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.more = found
        .iter()
        .filter(|(_, x)| *x != best_x)
        .take(MORE)
        .map(|(v, x)| (*v, to_shapes(x)))
        .collect();
    let proven = if out.finished {
        cut(best)
    } else {
        cut(best).max(open_bound)
    };
    // The root's LP value is an upper bound too; a finished search knows more.
    out.upper = if out.nodes == 0 {
        f64::INFINITY
    } else {
        out.upper.min(proven).max(best)
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn run(
        cap: &[i64],
        reqs: &[&[i64]],
        counts: &[i64],
        values: &[f64],
        eps: f64,
        node_limit: usize,
    ) -> Priced {
        let problem = Problem {
            cap,
            reqs,
            counts,
            values,
        };
        let search = Search {
            threshold: 0.0,
            eps,
            node_limit,
            satisfied: f64::INFINITY,
            search_above: 0.0,
        };
        price(&problem, &search, &mut Vec::new())
    }

    /// Exhaustive search over counts: the reference.
    fn brute(cap: &[i64], reqs: &[Vec<i64>], counts: &[i64], values: &[f64]) -> f64 {
        fn go(
            s: usize,
            cap: &[i64],
            used: &mut Vec<i64>,
            reqs: &[Vec<i64>],
            counts: &[i64],
            values: &[f64],
        ) -> f64 {
            if s == reqs.len() {
                return 0.0;
            }
            let mut best = 0.0f64;
            for k in 0..=counts[s] {
                if (0..cap.len()).any(|d| used[d] + reqs[s][d] * k > cap[d]) {
                    break;
                }
                for d in 0..cap.len() {
                    used[d] += reqs[s][d] * k;
                }
                best = best.max(values[s] * k as f64 + go(s + 1, cap, used, reqs, counts, values));
                for d in 0..cap.len() {
                    used[d] -= reqs[s][d] * k;
                }
            }
            best
        }
        go(0, cap, &mut vec![0; cap.len()], reqs, counts, values)
    }

    #[test]
    fn pricing_finds_the_best_pattern_in_table_cases() {
        // (cap, reqs, counts, values, best)
        type Case = (Vec<i64>, Vec<Vec<i64>>, Vec<i64>, Vec<f64>, f64);
        let cases: Vec<Case> = vec![
            // Two complementary shapes fill a node together.
            (
                vec![8, 8],
                vec![vec![3, 1], vec![1, 3]],
                vec![10, 10],
                vec![1.0, 1.0],
                4.0,
            ),
            // Counts bind before capacity.
            (vec![100, 100], vec![vec![1, 1]], vec![7], vec![2.0], 14.0),
            // A shape that does not fit is never chosen.
            (
                vec![4, 4],
                vec![vec![5, 1], vec![2, 2]],
                vec![3, 3],
                vec![10.0, 1.0],
                2.0,
            ),
            // The third row (pods) binds.
            (
                vec![100, 100, 3],
                vec![vec![1, 1, 1]],
                vec![10],
                vec![1.0],
                3.0,
            ),
            // A resource the node lacks (GPUs) rules its shape out.
            (
                vec![8, 8, 0],
                vec![vec![1, 1, 1], vec![2, 2, 0]],
                vec![5, 5],
                vec![9.0, 1.0],
                4.0,
            ),
        ];
        for (cap, reqs, counts, values, want) in cases {
            let r: Vec<&[i64]> = reqs.iter().map(|r| r.as_slice()).collect();
            let p = run(&cap, &r, &counts, &values, 0.0, 100_000);
            assert!(p.finished);
            assert!(
                (p.value - want).abs() < 1e-9,
                "{cap:?} {reqs:?}: {} != {want}",
                p.value
            );
            let used: Vec<i64> = (0..cap.len())
                .map(|d| (0..reqs.len()).map(|s| reqs[s][d] * p.counts[s]).sum())
                .collect();
            assert!(used.iter().zip(&cap).all(|(u, c)| u <= c));
            let value: f64 = p
                .counts
                .iter()
                .zip(&values)
                .map(|(k, v)| *k as f64 * v)
                .sum();
            assert!((value - p.value).abs() < 1e-9);
        }
    }

    #[test]
    fn pricing_matches_exhaustive_search_and_its_upper_bound_holds_on_random_instances() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        for case in 0..400 {
            let dims = rng.random_range(1..=4);
            let shapes = rng.random_range(1..=5);
            let cap: Vec<i64> = (0..dims).map(|_| rng.random_range(10..=60)).collect();
            let reqs: Vec<Vec<i64>> = (0..shapes)
                .map(|_| (0..dims).map(|_| rng.random_range(0..=25)).collect())
                .collect();
            let counts: Vec<i64> = (0..shapes).map(|_| rng.random_range(0..=6)).collect();
            let values: Vec<f64> = (0..shapes).map(|_| rng.random_range(0.0..10.0)).collect();
            let want = brute(&cap, &reqs, &counts, &values);
            let r: Vec<&[i64]> = reqs.iter().map(|r| r.as_slice()).collect();
            let exact = run(&cap, &r, &counts, &values, 0.0, 1_000_000);
            assert!(
                (exact.value - want).abs() < 1e-7,
                "case {case}: {} != {want}",
                exact.value
            );
            // Cut short or with a tolerance, the upper bound still holds.
            for (eps, limit) in [(0.05, 1_000_000), (0.0, 2), (0.1, 1)] {
                let p = run(&cap, &r, &counts, &values, eps, limit);
                assert!(
                    p.upper + 1e-7 >= want,
                    "case {case}: upper {} < {want}",
                    p.upper
                );
                assert!(p.value <= want + 1e-7);
                if p.finished {
                    assert!(p.upper <= want * (1.0 + eps) + 1e-6, "case {case}");
                }
            }
        }
    }
}
