//! Whole nodes from the configuration LP, by diving.
//!
//! The LP buys fractional amounts of patterns. Its whole parts are nodes of a good plan; what is
//! left over (at most about one fractional pattern per shape) is where rounding loses money.
//! Instead of packing that residual greedily, the residual is itself a smaller configuration LP:
//! it is solved again (the columns so far, cut down to what is left, plus a few rounds of
//! pricing for patterns that fit the residual), its whole parts are taken, and when none is
//! whole the most-used pattern is fixed as one node. Every step fixes at least one node, so the
//! dive ends; each re-solve sees only what is still uncovered.

use crate::PackError;
use crate::config::{self, ConfigLp, Limits, NodeType, Shape};

/// Pricing rounds in each re-solve of the residual (8 gave plans 0.02–0.05% cheaper on the
/// trace samples for 18% more work).
const DIVE_ITERATIONS: usize = 3;

/// Patterns (type, counts per shape) that cover every shape's pods exactly once between them.
pub(crate) fn round(
    shapes: &[Shape],
    types: &[NodeType],
    lp: &ConfigLp,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<(usize, Vec<i64>)>, PackError> {
    let mut left: Vec<i64> = shapes.iter().map(|s| s.n).collect();
    let mut nodes: Vec<(usize, Vec<i64>)> = Vec::new();
    let mut columns = lp.columns.clone();
    let mut z = lp.z.clone();
    // Row prices per type carry from one re-solve to the next (the types stay the same).
    let mut hints: Vec<Vec<f64>> = Vec::new();
    let take = |counts: &[i64], left: &mut Vec<i64>| -> Option<Vec<i64>> {
        let c: Vec<i64> = counts
            .iter()
            .zip(left.iter())
            .map(|(c, l)| (*c).min(*l))
            .collect();
        if c.iter().all(|&k| k == 0) {
            return None;
        }
        for (l, k) in left.iter_mut().zip(&c) {
            *l -= k;
        }
        Some(c)
    };
    loop {
        // The LP's whole nodes, most used pattern first.
        let mut order: Vec<usize> = (0..columns.len()).filter(|&k| z[k] > 1e-9).collect();
        order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
        let mut took = false;
        for &k in &order {
            for _ in 0..(z[k] + 1e-6).floor() as i64 {
                match take(&columns[k].1, &mut left) {
                    Some(c) => {
                        nodes.push((columns[k].0, c));
                        took = true;
                    }
                    None => break,
                }
            }
        }
        if left.iter().all(|&l| l == 0) {
            break;
        }
        if !took {
            // Nothing whole: fix the most used pattern as one node.
            let Some(c) = order
                .iter()
                .find_map(|&k| take(&columns[k].1, &mut left).map(|c| (columns[k].0, c)))
            else {
                break;
            };
            nodes.push(c);
            if left.iter().all(|&l| l == 0) {
                break;
            }
        }
        // The residual as a configuration LP of its own.
        let idx: Vec<usize> = (0..shapes.len()).filter(|&s| left[s] > 0).collect();
        let sub_shapes: Vec<Shape> = idx
            .iter()
            .map(|&s| Shape {
                req: shapes[s].req.clone(),
                n: left[s],
            })
            .collect();
        // The last LP's support, cut down to the residual, seeds the re-solve (all columns so far
        // would make each re-solve as large as the first).
        let mut seeds: Vec<(usize, Vec<i64>)> = columns
            .iter()
            .zip(&z)
            .filter(|(_, z)| **z > 1e-9)
            .map(|((t, c), _)| {
                (
                    *t,
                    idx.iter().map(|&s| c[s].min(left[s])).collect::<Vec<i64>>(),
                )
            })
            .filter(|(_, c)| c.iter().any(|&k| k > 0))
            .collect();
        seeds.sort();
        seeds.dedup();
        let limits = Limits {
            iterations: if stop() { 1 } else { DIVE_ITERATIONS },
            certify: false,
        };
        let sub = config::solve(&sub_shapes, types, seeds, limits, &mut hints, stop)?;
        columns = sub
            .columns
            .iter()
            .map(|(t, c)| {
                let mut full = vec![0i64; shapes.len()];
                for (j, &s) in idx.iter().enumerate() {
                    full[s] = c[j];
                }
                (*t, full)
            })
            .collect();
        z = sub.z;
    }
    if left.iter().any(|&l| l > 0) {
        return Err(PackError::Solver(
            "diving left pods without a node".to_string(),
        ));
    }
    Ok(nodes)
}
