//! The restricted master of column generation: `min Σ_k p_k z_k  s.t.  Σ_k a_sk z_k ≥ n_s`,
//! `z ≥ 0` — how many nodes of each pattern to buy so every shape is covered.
//!
//! A revised primal simplex with a dense basis inverse (one row per shape: at most a few hundred),
//! kept between rounds: a new column leaves the current basis feasible, so each round continues
//! from the last optimum with a few pivots instead of solving again from nothing (which was most
//! of column generation's time with a general LP solver).

// Dense linear algebra on a handful of rows reads best with indices.
#![allow(clippy::needless_range_loop)]

/// Pivots between two fresh inversions of the basis (bounds rounding drift).
const REFACTOR_EVERY: usize = 64;
const TOL: f64 = 1e-9;
/// Columns partial pricing looks at before taking the best improving one it has seen.
const PRICING_SEGMENT: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Var {
    /// A pattern column.
    Col(usize),
    /// The surplus of row s (`Σ a z − w = n`), cost 0.
    Surplus(usize),
    /// The artificial of row s (cost `big`), only until the row has a column.
    Artificial(usize),
}

#[derive(Clone, Debug)]
pub(crate) struct Master {
    rows: usize,
    demand: Vec<f64>,
    /// Columns as (row, coefficient) lists, and their costs.
    cols: Vec<Vec<(usize, f64)>>,
    cost: Vec<f64>,
    big: f64,
    basis: Vec<Var>,
    in_basis: Vec<bool>,
    surplus_basic: Vec<bool>,
    artificial_basic: Vec<bool>,
    binv: Vec<f64>,
    xb: Vec<f64>,
    since_refactor: usize,
    /// Where partial pricing resumes.
    next_scan: usize,
    pub pivots: usize,
}

impl Master {
    /// A master over rows with these demands; `big` must exceed any plan's price.
    pub(crate) fn new(demand: &[f64], big: f64) -> Master {
        let rows = demand.len();
        let mut binv = vec![0.0; rows * rows];
        for i in 0..rows {
            binv[i * rows + i] = 1.0;
        }
        Master {
            rows,
            demand: demand.to_vec(),
            cols: Vec::new(),
            cost: Vec::new(),
            big,
            basis: (0..rows).map(Var::Artificial).collect(),
            in_basis: Vec::new(),
            surplus_basic: vec![false; rows],
            artificial_basic: vec![true; rows],
            binv,
            xb: demand.to_vec(),
            since_refactor: 0,
            next_scan: 0,
            pivots: 0,
        }
    }

    pub(crate) fn add_column(&mut self, cost: f64, counts: &[i64]) {
        let c: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
        self.add_fractional(cost, &c);
    }

    /// A column whose counts need not be whole (a pattern of a relaxation, for bounds only).
    pub(crate) fn add_fractional(&mut self, cost: f64, counts: &[f64]) {
        self.cols.push(
            counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 1e-12)
                .map(|(s, c)| (s, *c))
                .collect(),
        );
        self.cost.push(cost);
        self.in_basis.push(false);
    }

    fn var_cost(&self, v: Var) -> f64 {
        match v {
            Var::Col(k) => self.cost[k],
            Var::Surplus(_) => 0.0,
            Var::Artificial(_) => self.big,
        }
    }

    /// `B^-1 a` for a variable's column.
    fn ftran(&self, v: Var, out: &mut [f64]) {
        let m = self.rows;
        match v {
            Var::Col(k) => {
                out.fill(0.0);
                for &(r, a) in &self.cols[k] {
                    for i in 0..m {
                        out[i] += self.binv[i * m + r] * a;
                    }
                }
            }
            Var::Surplus(s) => {
                for i in 0..m {
                    out[i] = -self.binv[i * m + s];
                }
            }
            Var::Artificial(s) => {
                for i in 0..m {
                    out[i] = self.binv[i * m + s];
                }
            }
        }
    }

    /// Duals `y = c_B B^-1`.
    pub(crate) fn duals(&self) -> Vec<f64> {
        let m = self.rows;
        let mut y = vec![0.0; m];
        for (i, &v) in self.basis.iter().enumerate() {
            let c = self.var_cost(v);
            if c != 0.0 {
                for k in 0..m {
                    y[k] += c * self.binv[i * m + k];
                }
            }
        }
        y
    }

    /// Inverts the basis afresh (Gauss-Jordan with partial pivoting) and recomputes its values.
    fn refactor(&mut self) {
        let m = self.rows;
        let mut b = vec![0.0; m * m];
        for (j, &v) in self.basis.iter().enumerate() {
            match v {
                Var::Col(k) => {
                    for &(r, a) in &self.cols[k] {
                        b[r * m + j] = a;
                    }
                }
                Var::Surplus(s) => b[s * m + j] = -1.0,
                Var::Artificial(s) => b[s * m + j] = 1.0,
            }
        }
        let mut inv = vec![0.0; m * m];
        for i in 0..m {
            inv[i * m + i] = 1.0;
        }
        for c in 0..m {
            let p = (c..m)
                .max_by(|&x, &y| b[x * m + c].abs().total_cmp(&b[y * m + c].abs()))
                .expect("rows");
            if b[p * m + c].abs() < 1e-12 {
                // Singular through drift: keep the product-form inverse.
                return;
            }
            if p != c {
                for k in 0..m {
                    b.swap(p * m + k, c * m + k);
                    inv.swap(p * m + k, c * m + k);
                }
            }
            let d = b[c * m + c];
            for k in 0..m {
                b[c * m + k] /= d;
                inv[c * m + k] /= d;
            }
            for r in 0..m {
                if r != c {
                    let f = b[r * m + c];
                    if f != 0.0 {
                        for k in 0..m {
                            b[r * m + k] -= f * b[c * m + k];
                            inv[r * m + k] -= f * inv[c * m + k];
                        }
                    }
                }
            }
        }
        self.binv = inv;
        for i in 0..m {
            self.xb[i] = (0..m)
                .map(|k| self.binv[i * m + k] * self.demand[k])
                .sum::<f64>()
                .max(0.0);
        }
        self.since_refactor = 0;
    }

    /// Primal simplex from the current basis to the optimum.
    pub(crate) fn solve(&mut self) {
        let m = self.rows;
        if m == 0 {
            return;
        }
        let mut alpha = vec![0.0; m];
        let mut stall = 0usize;
        let limit = 50 * (m + self.cols.len()) + 1000;
        for _ in 0..limit {
            let y = self.duals();
            // Entering variable: most negative reduced cost (Bland's rule once stalling).
            let bland = stall > 2 * m + 50;
            let mut enter: Option<(Var, f64)> = None;
            let scale = |c: f64| c.abs().max(1.0);
            // Partial pricing: columns in segments from where the last search stopped; the best
            // of the first segment holding an improving column enters (all of them under Bland).
            let total = self.cols.len();
            let mut scanned = 0;
            while scanned < total {
                let seg = if bland {
                    total
                } else {
                    PRICING_SEGMENT.min(total - scanned)
                };
                for i in 0..seg {
                    let k = if bland {
                        i
                    } else {
                        (self.next_scan + scanned + i) % total
                    };
                    if self.in_basis[k] {
                        continue;
                    }
                    let d = self.cost[k] - self.cols[k].iter().map(|&(r, a)| y[r] * a).sum::<f64>();
                    let d = d / scale(self.cost[k]);
                    if d < -TOL && enter.is_none_or(|(_, best)| !bland && d < best) {
                        enter = Some((Var::Col(k), d));
                    }
                }
                scanned += seg;
                if enter.is_some() {
                    break;
                }
            }
            if total > 0 {
                self.next_scan = (self.next_scan + scanned) % total;
            }
            for s in 0..m {
                // Surplus reduced cost is y_s: negative duals mean over-covering pays.
                if !self.surplus_basic[s] && y[s] < -TOL {
                    let d = y[s];
                    if enter.is_none_or(|(_, best)| !bland && d < best) {
                        enter = Some((Var::Surplus(s), d));
                    }
                }
            }
            let Some((e, _)) = enter else {
                break;
            };
            self.ftran(e, &mut alpha);
            let mut leave: Option<(usize, f64)> = None;
            for i in 0..m {
                if alpha[i] > TOL {
                    let t = self.xb[i] / alpha[i];
                    let better = match leave {
                        None => true,
                        Some((r, best)) => {
                            t < best - TOL
                                || (t <= best + TOL && {
                                    // Prefer artificials leaving; then Bland's lowest index.
                                    let art = matches!(self.basis[i], Var::Artificial(_));
                                    let art_r = matches!(self.basis[r], Var::Artificial(_));
                                    (art && !art_r) || (art == art_r && alpha[i] > alpha[r])
                                })
                        }
                    };
                    if better {
                        leave = Some((i, t));
                    }
                }
            }
            let Some((r, t)) = leave else {
                // Unbounded cannot happen (costs are nonnegative); stop.
                break;
            };
            if t <= TOL {
                stall += 1;
            } else {
                stall = 0;
            }
            for i in 0..m {
                self.xb[i] -= t * alpha[i];
                if self.xb[i] < 0.0 {
                    self.xb[i] = 0.0;
                }
            }
            self.xb[r] = t;
            match self.basis[r] {
                Var::Col(k) => self.in_basis[k] = false,
                Var::Surplus(s) => self.surplus_basic[s] = false,
                Var::Artificial(s) => self.artificial_basic[s] = false,
            }
            match e {
                Var::Col(k) => self.in_basis[k] = true,
                Var::Surplus(s) => self.surplus_basic[s] = true,
                Var::Artificial(s) => self.artificial_basic[s] = true,
            }
            self.basis[r] = e;
            let p = alpha[r];
            for k in 0..m {
                self.binv[r * m + k] /= p;
            }
            for i in 0..m {
                if i != r && alpha[i] != 0.0 {
                    let f = alpha[i];
                    for k in 0..m {
                        self.binv[i * m + k] -= f * self.binv[r * m + k];
                    }
                }
            }
            self.pivots += 1;
            self.since_refactor += 1;
            if self.since_refactor >= REFACTOR_EVERY {
                self.refactor();
            }
        }
        self.refactor();
    }

    /// The value of every column at the current basis.
    pub(crate) fn values(&self) -> Vec<f64> {
        let mut z = vec![0.0; self.cols.len()];
        for (i, &v) in self.basis.iter().enumerate() {
            if let Var::Col(k) = v {
                z[k] = self.xb[i].max(0.0);
            }
        }
        z
    }

    /// The price of the current basis.
    pub(crate) fn objective(&self) -> f64 {
        self.values()
            .iter()
            .zip(&self.cost)
            .map(|(z, c)| z * c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_buys_the_cheapest_cover_and_its_duals_price_the_rows() {
        // Two shapes; a column holding both is cheaper than one per shape.
        let mut m = Master::new(&[4.0, 4.0], 1e6);
        m.add_column(1.0, &[2, 0]);
        m.add_column(1.0, &[0, 2]);
        m.solve();
        assert!((m.objective() - 4.0).abs() < 1e-9);
        // A new column continues from the last basis.
        m.add_column(1.0, &[2, 2]);
        m.solve();
        assert!((m.objective() - 2.0).abs() < 1e-9, "{}", m.objective());
        let y = m.duals();
        let dual_obj: f64 = y.iter().zip([4.0, 4.0]).map(|(y, n)| y * n).sum();
        assert!((dual_obj - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_master_agrees_with_the_general_lp_solver_on_random_instances() {
        use good_lp::{
            Expression, ProblemVariables, Solution, SolverModel, constraint, microlp, variable,
        };
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for case in 0..200 {
            let rows = rng.random_range(1..=8);
            let demand: Vec<f64> = (0..rows).map(|_| rng.random_range(1..=40) as f64).collect();
            let mut cols: Vec<(f64, Vec<i64>)> = (0..rows)
                .map(|s| {
                    let mut c = vec![0; rows];
                    c[s] = rng.random_range(1..=5);
                    (rng.random_range(1.0..10.0), c)
                })
                .collect();
            for _ in 0..rng.random_range(0..30) {
                let c: Vec<i64> = (0..rows).map(|_| rng.random_range(0..=3)).collect();
                if c.iter().any(|&x| x > 0) {
                    cols.push((rng.random_range(1.0..10.0), c));
                }
            }
            let mut m = Master::new(&demand, 1e7);
            // Columns arrive in two rounds, as in column generation.
            let half = cols.len() / 2;
            for (p, c) in &cols[..half] {
                m.add_column(*p, c);
            }
            m.solve();
            for (p, c) in &cols[half..] {
                m.add_column(*p, c);
            }
            m.solve();
            let mut vars = ProblemVariables::new();
            let z: Vec<_> = cols.iter().map(|_| vars.add(variable().min(0.0))).collect();
            let obj: Expression = cols.iter().zip(&z).map(|((p, _), v)| *p * *v).sum();
            let mut model = vars.minimise(obj).using(microlp);
            for s in 0..rows {
                let cover: Expression = cols
                    .iter()
                    .zip(&z)
                    .map(|((_, c), v)| c[s] as f64 * *v)
                    .sum();
                model = model.with(constraint!(cover >= demand[s]));
            }
            let sol = model.solve().unwrap();
            let want: f64 = cols
                .iter()
                .zip(&z)
                .map(|((p, _), v)| p * sol.value(*v))
                .sum();
            assert!(
                (m.objective() - want).abs() < 1e-6 * want.max(1.0),
                "case {case}: {} != {want}",
                m.objective()
            );
            // The duals are feasible and their objective equals the primal's.
            let y = m.duals();
            assert!(y.iter().all(|&v| v >= -1e-9), "case {case}");
            for (p, c) in &cols {
                let v: f64 = c.iter().zip(&y).map(|(k, y)| *k as f64 * y).sum();
                assert!(v <= p + 1e-7, "case {case}: column worth {v} > {p}");
            }
            let dual: f64 = y.iter().zip(&demand).map(|(y, n)| y * n).sum();
            assert!((dual - want).abs() < 1e-6 * want.max(1.0), "case {case}");
        }
    }
}
