//! The `default` packer: whole nodes from the configuration LP by diving (`dive`), and, for
//! classes of up to [`GREEDY_MAX_PODS`] pods, also a price-aware pattern greedy — the cheaper
//! plan wins, after local improvement.
//!
//! The greedy: each pod is worth what its resources cost at the LP optimum (the dual prices).
//! Whole nodes of the LP's solution first; then, repeatedly, for every non-dominated instance
//! type, fill one empty node with the most valuable pods that fit, take the type whose node
//! returns the most value per dollar, and repeat that pattern as often as the remaining pods
//! allow. Local improvement moves every node to the cheapest type that holds it, empties light
//! nodes into others' spare room, and merges pairs when one bigger node is cheaper.

use crate::bound::{dual_prices, scale};
use crate::config;
use crate::{Cand, Class, PackError, PackedNode, cheapest_holding, pods_requests, shape_groups};
use capstan_model::Resources;
use capstan_sched::SolveInput;

/// Indices of candidates no other candidate beats (cheaper or equal with at least as much of
/// every resource).
pub(crate) fn nondominated(cands: &[Cand], dims: &[String]) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    // cands are sorted by price: a candidate can only be beaten by an earlier one.
    for (i, c) in cands.iter().enumerate() {
        let beaten = kept
            .iter()
            .any(|&k| dims.iter().all(|d| cands[k].cap.get(d) >= c.cap.get(d)));
        if !beaten {
            kept.push(i);
        }
    }
    kept
}

struct Shape {
    req: Vec<i64>,
    value: f64,
    pods: Vec<usize>,
    /// Index into the configuration LP's shapes.
    group: usize,
}

fn vec_of(r: &Resources, dims: &[String]) -> Vec<i64> {
    dims.iter().map(|d| r.get(d)).collect()
}

/// How many more of `req` fit into `cap - used`.
fn fit_count(cap: &[i64], used: &[i64], req: &[i64]) -> i64 {
    let mut k = i64::MAX;
    for i in 0..req.len() {
        if req[i] > 0 {
            k = k.min((cap[i] - used[i]) / req[i]);
        } else if cap[i] - used[i] < 0 {
            return 0;
        }
    }
    k.max(0)
}

pub(crate) fn pack(
    input: &SolveInput<'_>,
    class: &Class,
    ctx: &config::Ctx<'_>,
) -> Result<Vec<PackedNode>, PackError> {
    let pods = input.pending;
    let (dims, groups, demand) = shape_groups(pods, class.pods.iter().copied());
    let nd = nondominated(&class.cands, &dims);
    if nd.is_empty() || class.pods.is_empty() {
        return Ok(Vec::new());
    }
    let nd_cands: Vec<Cand> = nd.iter().map(|&i| class.cands[i].clone()).collect();
    let cfg_shapes: Vec<config::Shape> = groups
        .iter()
        .map(|ids| config::Shape {
            req: vec_of(&pods[ids[0]].requests, &dims),
            n: ids.len() as i64,
        })
        .collect();
    let node_types: Vec<config::NodeType> = nd_cands
        .iter()
        .map(|c| config::NodeType {
            cap: vec_of(&c.cap, &dims),
            price: c.price,
        })
        .collect();
    // The configuration LP's columns and shape prices; resource duals if it fails.
    let cg = ctx.config_lp(&dims, &cfg_shapes, &node_types).ok();
    if let Some(cg) = &cg {
        if class.pods.len() > GREEDY_MAX_PODS {
            if let Some(nodes) = dived(
                input,
                class,
                ctx,
                &cfg_shapes,
                &node_types,
                &nd,
                &groups,
                cg,
            ) {
                return Ok(nodes);
            }
        }
    }
    let resource_duals = match &cg {
        Some(_) => None,
        None => Some(dual_prices(&nd_cands, &demand)?),
    };
    let groups_by_shape = groups.clone();
    let mut shapes: Vec<Shape> = groups
        .into_iter()
        .enumerate()
        .map(|(g, ids)| {
            let r = &pods[ids[0]].requests;
            let mut value: f64 = match (&cg, &resource_duals) {
                (Some(cg), _) => cg.duals[g],
                (None, Some(d)) => dims
                    .iter()
                    .map(|x| d.get(x).copied().unwrap_or(0.0) * scale(x, r.get(x)))
                    .sum(),
                (None, None) => 0.0,
            };
            if value <= 1e-12 {
                // Degenerate prices: weigh by share of the total demand instead.
                value = dims
                    .iter()
                    .filter(|d| demand.get(d) > 0)
                    .map(|d| r.get(d) as f64 / demand.get(d) as f64)
                    .sum::<f64>()
                    * 1e-6;
            }
            Shape {
                req: vec_of(r, &dims),
                value,
                pods: ids,
                group: g,
            }
        })
        .collect();
    shapes.sort_by(|a, b| b.value.total_cmp(&a.value).then_with(|| b.req.cmp(&a.req)));
    let caps: Vec<Vec<i64>> = nd
        .iter()
        .map(|&i| vec_of(&class.cands[i].cap, &dims))
        .collect();
    let mut left: Vec<i64> = shapes.iter().map(|s| s.pods.len() as i64).collect();
    let mut patterns: Vec<(usize, Vec<i64>)> = Vec::new(); // (candidate index into class.cands, counts)
    // Whole nodes of the LP's solution first (rounded down), then the rest greedily.
    if let Some(cg) = &cg {
        let mut cols: Vec<(f64, usize)> =
            cg.z.iter()
                .copied()
                .enumerate()
                .map(|(k, z)| (z, k))
                .collect();
        cols.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (z, k) in cols {
            let (t, counts) = &cg.columns[k];
            for _ in 0..((z + 1e-9).floor() as i64) {
                let mine: Vec<i64> = (0..shapes.len())
                    .map(|i| counts[shapes[i].group].min(left[i]))
                    .collect();
                if mine.iter().all(|&c| c == 0) {
                    break;
                }
                for (l, c) in left.iter_mut().zip(&mine) {
                    *l -= c;
                }
                patterns.push((nd[*t], mine));
            }
        }
    }
    while left.iter().any(|&c| c > 0) {
        let mut best: Option<(f64, f64, usize, Vec<i64>)> = None;
        for (j, cap) in caps.iter().enumerate() {
            let mut used = vec![0i64; dims.len()];
            let mut counts = vec![0i64; shapes.len()];
            let mut value = 0.0;
            for (s, sh) in shapes.iter().enumerate() {
                if left[s] == 0 {
                    continue;
                }
                let k = fit_count(cap, &used, &sh.req).min(left[s]);
                if k > 0 {
                    counts[s] = k;
                    for (u, r) in used.iter_mut().zip(&sh.req) {
                        *u += r * k;
                    }
                    value += sh.value * k as f64;
                }
            }
            if value <= 0.0 {
                continue;
            }
            let eff = value / class.cands[nd[j]].price.max(1e-9);
            let better = match &best {
                None => true,
                Some((be, bv, _, _)) => {
                    eff > *be * (1.0 + 1e-9) || (eff >= *be * (1.0 - 1e-9) && value > *bv)
                }
            };
            if better {
                best = Some((eff, value, j, counts));
            }
        }
        let Some((_, _, j, counts)) = best else { break };
        let reps = counts
            .iter()
            .zip(&left)
            .filter(|(k, _)| **k > 0)
            .map(|(k, l)| l / k)
            .min()
            .unwrap_or(1)
            .max(1);
        for (l, k) in left.iter_mut().zip(&counts) {
            *l -= k * reps;
        }
        for _ in 0..reps {
            patterns.push((nd[j], counts.clone()));
        }
    }
    // Hand out actual pods to the patterns.
    let mut next: Vec<usize> = vec![0; shapes.len()];
    let mut nodes: Vec<PackedNode> = patterns
        .into_iter()
        .map(|(cand, counts)| {
            let mut ids = Vec::new();
            for (s, &k) in counts.iter().enumerate() {
                for _ in 0..k {
                    ids.push(shapes[s].pods[next[s]]);
                    next[s] += 1;
                }
            }
            PackedNode { cand, pods: ids }
        })
        .collect();
    improve(input, class, &mut nodes);
    // The cheaper of the two plans wins (diving is better on large sets, the pattern greedy
    // now and then on sets of a few nodes).
    if let Some(cg) = &cg {
        if let Some(dived) = dived(
            input,
            class,
            ctx,
            &cfg_shapes,
            &node_types,
            &nd,
            &groups_by_shape,
            cg,
        ) {
            let price = |n: &[PackedNode]| n.iter().map(|n| class.cands[n.cand].price).sum::<f64>();
            if price(&dived) < price(&nodes) - 1e-9 {
                return Ok(dived);
            }
        }
    }
    Ok(nodes)
}

/// Above this many pods the pattern greedy is not tried: diving wins there.
const GREEDY_MAX_PODS: usize = 1_000;

/// Whole nodes by diving on the configuration LP (see `dive`), improved locally.
#[allow(clippy::too_many_arguments)]
fn dived(
    input: &SolveInput<'_>,
    class: &Class,
    ctx: &config::Ctx<'_>,
    shapes: &[config::Shape],
    types: &[config::NodeType],
    nd: &[usize],
    groups: &[Vec<usize>],
    cg: &config::ConfigLp,
) -> Option<Vec<PackedNode>> {
    let patterns = crate::dive::round(shapes, types, cg, ctx.stop).ok()?;
    let mut next = vec![0usize; groups.len()];
    let mut nodes: Vec<PackedNode> = patterns
        .into_iter()
        .map(|(t, counts)| {
            let mut ids = Vec::new();
            for (g, &k) in counts.iter().enumerate() {
                ids.extend_from_slice(&groups[g][next[g]..next[g] + k as usize]);
                next[g] += k as usize;
            }
            PackedNode {
                cand: nd[t],
                pods: ids,
            }
        })
        .collect();
    improve(input, class, &mut nodes);
    Some(nodes)
}

/// Local improvement: downsize, empty light nodes into spare room, merge pairs.
pub(crate) fn improve(input: &SolveInput<'_>, class: &Class, nodes: &mut Vec<PackedNode>) {
    let pods = input.pending;
    downsize(input, class, nodes);
    // Empty the lightest nodes into other nodes' spare room.
    let mut rounds = 0;
    loop {
        rounds += 1;
        if rounds > 200 {
            break;
        }
        let used: Vec<Resources> = nodes.iter().map(|n| pods_requests(pods, &n.pods)).collect();
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| {
            class.cands[nodes[a].cand]
                .price
                .total_cmp(&class.cands[nodes[b].cand].price)
        });
        let mut improved = false;
        for &victim in order.iter().take(40) {
            let mut trial_used = used.clone();
            let mut moves: Vec<(usize, usize)> = Vec::new();
            let mut ok = true;
            for &p in &nodes[victim].pods {
                let req = &pods[p].requests;
                let target = (0..nodes.len()).find(|&i| {
                    i != victim && {
                        let mut u = trial_used[i].clone();
                        u.add(req);
                        u.fits_in(&class.cands[nodes[i].cand].cap)
                    }
                });
                match target {
                    Some(i) => {
                        trial_used[i].add(req);
                        moves.push((p, i));
                    }
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                // Moving saves the victim's price; targets keep their types.
                for (p, i) in moves {
                    nodes[i].pods.push(p);
                }
                nodes[victim].pods.clear();
                nodes.retain(|n| !n.pods.is_empty());
                improved = true;
                break;
            }
        }
        if !improved {
            break;
        }
    }
    // Merge pairs of light nodes when one node holding both is cheaper.
    let mut rounds = 0;
    loop {
        rounds += 1;
        if rounds > 200 {
            break;
        }
        let used: Vec<Resources> = nodes.iter().map(|n| pods_requests(pods, &n.pods)).collect();
        let util = |i: usize| {
            let c = &class.cands[nodes[i].cand].cap;
            (used[i].cpu as f64 / c.cpu.max(1) as f64)
                .max(used[i].memory as f64 / c.memory.max(1) as f64)
        };
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| util(a).total_cmp(&util(b)));
        let light: Vec<usize> = order.into_iter().take(24).collect();
        let mut best: Option<(f64, usize, usize, usize)> = None;
        for (x, &a) in light.iter().enumerate() {
            for &b in &light[x + 1..] {
                let req = used[a].plus(&used[b]);
                if let Some(c) = cheapest_holding(class, &req) {
                    let saving = class.cands[nodes[a].cand].price
                        + class.cands[nodes[b].cand].price
                        - class.cands[c].price;
                    if saving > 1e-9 && best.is_none_or(|(s, ..)| saving > s) {
                        best = Some((saving, a, b, c));
                    }
                }
            }
        }
        let Some((_, a, b, c)) = best else { break };
        let moved = std::mem::take(&mut nodes[b].pods);
        nodes[a].pods.extend(moved);
        nodes[a].cand = c;
        nodes.retain(|n| !n.pods.is_empty());
    }
    downsize(input, class, nodes);
}

/// Every node to the cheapest candidate that holds its pods.
fn downsize(input: &SolveInput<'_>, class: &Class, nodes: &mut [PackedNode]) {
    for n in nodes.iter_mut() {
        let req = pods_requests(input.pending, &n.pods);
        if let Some(c) = cheapest_holding(class, &req) {
            if class.cands[c].price < class.cands[n.cand].price {
                n.cand = c;
            }
        }
    }
}
