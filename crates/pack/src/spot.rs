//! Spot diversification: no more than a set share of one plan's spot capacity (by vCPU) in one
//! pool (instance type × zone). Nodes whose cheapest offering is spot take, in price order, the
//! first spot offering among their options whose pool still has room; when none has, the pool
//! with the least spot capacity so far. Only offerings within [`MAX_PREMIUM`] of the node's
//! cheapest are considered: spreading is insurance against one pool's interruptions, not worth
//! paying for a bigger or special machine (a GPU type at twice the price). A node with no spot
//! offering stays on demand.

use capstan_model::labels::CAPACITY_SPOT;
use capstan_sched::{ChosenOffering, Plan, SolveInput};
use std::collections::BTreeMap;

/// How much more than its cheapest spot offering a node may cost to spread spot capacity:
/// EC2's price-capacity-optimized allocation likewise chooses among the lowest-priced pools.
pub const MAX_PREMIUM: f64 = 0.2;

pub fn diversify(input: &SolveInput<'_>, plan: &mut Plan, max_share: f64) {
    let types = input.instance_types;
    let spot_nodes: Vec<usize> = (0..plan.new_claims.len())
        .filter(|&i| {
            let c = &plan.new_claims[i];
            c.offering.capacity_type == CAPACITY_SPOT && !c.warm
        })
        .collect();
    if spot_nodes.is_empty() || max_share >= 1.0 {
        return;
    }
    let total: i64 = spot_nodes
        .iter()
        .map(|&i| {
            types[plan.new_claims[i].offering.instance_type]
                .capacity
                .cpu
        })
        .sum();
    let limit = (total as f64 * max_share).max(1.0);
    let mut load: BTreeMap<(usize, String), i64> = BTreeMap::new();
    // Big nodes first: they are the hardest to place.
    let mut order = spot_nodes;
    order.sort_by_key(|&i| {
        std::cmp::Reverse(
            types[plan.new_claims[i].offering.instance_type]
                .capacity
                .cpu,
        )
    });
    for i in order {
        let c = &plan.new_claims[i];
        let mut offers: Vec<(f64, usize, String)> = c
            .instance_types
            .iter()
            .flat_map(|&t| {
                types[t]
                    .offerings
                    .iter()
                    .filter(|o| {
                        o.available
                            && o.capacity_type == CAPACITY_SPOT
                            && capstan_model::catalog::offering_allowed(o, &c.requirements)
                    })
                    .map(move |o| (o.price, t, o.zone.clone()))
            })
            .collect();
        offers.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let Some(first) = offers.first().cloned() else {
            continue;
        };
        let ceiling = first.0 * (1.0 + MAX_PREMIUM);
        offers.retain(|o| o.0 <= ceiling);
        let chosen = offers
            .iter()
            .find(|(_, t, z)| {
                let cpu = types[*t].capacity.cpu;
                (load.get(&(*t, z.clone())).copied().unwrap_or(0) + cpu) as f64 <= limit
            })
            .cloned()
            .unwrap_or_else(|| {
                offers
                    .iter()
                    .min_by_key(|(_, t, z)| load.get(&(*t, z.clone())).copied().unwrap_or(0))
                    .cloned()
                    .unwrap_or(first)
            });
        let (price, t, zone) = chosen;
        *load.entry((t, zone.clone())).or_insert(0) += types[t].capacity.cpu;
        plan.new_claims[i].offering = ChosenOffering {
            instance_type: t,
            zone,
            capacity_type: CAPACITY_SPOT.into(),
            price,
        };
    }
}
