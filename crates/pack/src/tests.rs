//! Behaviour of the packing planner, and the invariants every plan of every strategy keeps.

use super::*;
use capstan_model::catalog::Offering;
use capstan_model::labels::{CAPACITY_TYPE, HOSTNAME, ZONE};
use capstan_model::nodepool::NodePoolObject;
use capstan_model::{Catalog, NodePool};
use capstan_sched::Snapshot;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn catalog(names: &[&str]) -> Vec<InstanceType> {
    let mut c = Catalog::builtin();
    c.instance_types
        .retain(|t| names.contains(&t.name.as_str()));
    c.instance_types
}

const SMALL: &[&str] = &[
    "t3a.medium",
    "t3a.large",
    "m7i.large",
    "m7i.xlarge",
    "m7i.2xlarge",
    "m7i.4xlarge",
    "c7i.large",
    "c7i.xlarge",
    "c7i.2xlarge",
    "r7i.large",
    "r7i.xlarge",
    "r7i.2xlarge",
    "g5.xlarge",
    "g5.2xlarge",
    "g4dn.xlarge",
    "g4dn.12xlarge",
];

fn pod(name: &str, cpu: i64, mem_mib: i64, spec: Value, labels: Value) -> Pod {
    let mut s = spec.as_object().cloned().unwrap_or_default();
    let mut requests = json!({"cpu": format!("{cpu}m"), "memory": format!("{mem_mib}Mi")});
    let mut limits = json!({});
    if let Some(g) = s.remove("gpu") {
        // Extended resources are requested at their limit (Kubernetes refuses anything else).
        requests["nvidia.com/gpu"] = json!(g.to_string());
        limits["nvidia.com/gpu"] = json!(g.to_string());
    }
    s.insert(
        "containers".into(),
        json!([{"name": "c", "resources": {"requests": requests, "limits": limits}}]),
    );
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": Value::Object(s)
    }))
    .unwrap();
    capstan_model::convert::pod(&p, &mut Vec::new()).unwrap()
}

fn plain(name: &str, cpu: i64, mem: i64) -> Pod {
    pod(name, cpu, mem, json!({}), json!({}))
}

fn spot_pool() -> NodePool {
    let obj: NodePoolObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "spot"},
        "spec": {"template": {"spec": {"requirements": [{"key": CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]}}}
    }))
    .unwrap();
    NodePool::compile(&obj).unwrap()
}

fn run(pods: &[Pod], types: &[InstanceType], pools: &[NodePool], strategy: Strategy) -> PackResult {
    let snapshot = Snapshot::default();
    let shared = shared(pods);
    let input = SolveInput {
        snapshot: &snapshot,
        pending: &shared,
        nodepools: pools,
        instance_types: types,
    };
    let r = pack_as(input, strategy);
    check(pods, types, pools, &r);
    r
}

/// The planner with a strategy and two seconds for `optimal`.
fn pack_as(input: SolveInput<'_>, strategy: Strategy) -> PackResult {
    pack(
        input,
        &PackOptions {
            strategy,
            time_limit_seconds: 2.0,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Pods as the planner takes them.
fn shared(pods: &[Pod]) -> Vec<std::sync::Arc<Pod>> {
    pods.iter().cloned().map(std::sync::Arc::new).collect()
}

/// Every invariant of a plan.
fn check(pods: &[Pod], types: &[InstanceType], pools: &[NodePool], r: &PackResult) {
    let plan = &r.plan;
    let mut seen = vec![0; pods.len()];
    for c in &plan.new_claims {
        c.pods.iter().for_each(|&p| seen[p] += 1);
    }
    plan.existing
        .iter()
        .for_each(|b| b.pods.iter().for_each(|&p| seen[p] += 1));
    plan.unschedulable.iter().for_each(|u| seen[u.pod] += 1);
    assert!(
        seen.iter().all(|&n| n == 1),
        "each pod exactly once: {seen:?}"
    );
    let mut price = 0.0;
    let mut zone_counts: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for c in &plan.new_claims {
        let t = &types[c.offering.instance_type];
        let pool = pools.iter().find(|p| p.name == c.nodepool).unwrap();
        let mut used = pods_requests(&shared(pods), &c.pods);
        used.add(
            capstan_sched::predicates::PoolDaemons::new(pool, &[], types)
                .overhead(c.offering.instance_type),
        );
        assert!(
            used.fits_in(&t.allocatable),
            "{} over allocatable, max pods or GPUs on {}: {used}",
            c.name,
            t.name
        );
        for &o in &c.instance_types {
            assert!(
                used.fits_in(&types[o].allocatable),
                "option {} holds {}",
                types[o].name,
                c.name
            );
        }
        let offered = t
            .offerings
            .iter()
            .find(|o| {
                o.zone == c.offering.zone
                    && o.capacity_type == c.offering.capacity_type
                    && o.available
            })
            .unwrap_or_else(|| {
                panic!(
                    "{} offered in {}/{}",
                    t.name, c.offering.zone, c.offering.capacity_type
                )
            });
        assert_eq!(
            offered.price, c.offering.price,
            "the claim's price is its offering's"
        );
        assert!(
            pool.requirements
                .allows(CAPACITY_TYPE, &c.offering.capacity_type)
        );
        price += c.offering.price;
        let mut anti = BTreeSet::new();
        for &p in &c.pods {
            let pod = &pods[p];
            let app = pod.labels.get("app").cloned().unwrap_or_default();
            if pod.anti_affinity.iter().any(|t| t.topology_key == HOSTNAME) {
                assert!(
                    anti.insert(app.clone()),
                    "anti-affinity pods of {app} share {}",
                    c.name
                );
            }
            if pod.spread.iter().any(|s| s.topology_key == ZONE) {
                *zone_counts
                    .entry(app)
                    .or_default()
                    .entry(c.offering.zone.clone())
                    .or_default() += 1;
            }
            if let Some(z) = pod.node_selector.get(ZONE) {
                assert!(z.has(&c.offering.zone), "{} selector honoured", pod.name);
            }
        }
    }
    for (app, counts) in zone_counts {
        let all: Vec<i64> = ["us-east-1a", "us-east-1b", "us-east-1c"]
            .iter()
            .map(|z| counts.get(*z).copied().unwrap_or(0))
            .collect();
        assert!(
            all.iter().max().unwrap() - all.iter().min().unwrap() <= 1,
            "zone skew of {app}: {all:?}"
        );
    }
    assert!(
        (price - r.total_price).abs() < 1e-9,
        "total is the sum of the offerings"
    );
    assert!(
        r.total_price >= r.lower_bound - 1e-6,
        "cost {} below the bound {}",
        r.total_price,
        r.lower_bound
    );
}

#[test]
fn karpenter_ffd_is_the_scheduling_core_with_karpenters_claim_order() {
    let types = catalog(SMALL);
    let pods: Vec<Pod> = (0..30)
        .map(|i| plain(&format!("p{i}"), 300 + 50 * (i % 7), 512))
        .collect();
    let pools = [NodePool::default_pool()];
    let r = run(&pods, &types, &pools, Strategy::KarpenterFfd);
    let snapshot = Snapshot::default();
    let base = solve(
        SolveInput {
            snapshot: &snapshot,
            pending: &shared(&pods),
            nodepools: &pools,
            instance_types: &types,
        },
        &SolveOptions {
            claim_order: ClaimOrder::FewestPodsFirst,
            ..Default::default()
        },
    );
    assert_eq!(r.plan, base);
}

#[test]
fn the_configuration_bound_counts_whole_pods_per_node() {
    // 1.2-CPU pods on 2-vCPU nodes (1.93 allocatable): one pod per node, whatever the LP says
    // about fractional CPU.
    let types = catalog(&["c7i.large"]);
    let pods: Vec<Pod> = (0..4).map(|i| plain(&format!("p{i}"), 1200, 256)).collect();
    let r = run(
        &pods,
        &types,
        &[NodePool::default_pool()],
        Strategy::Default,
    );
    assert_eq!(r.plan.new_claims.len(), 4);
    assert!(
        (r.lower_bound - r.total_price).abs() < 1e-9,
        "bound {} = price {}",
        r.lower_bound,
        r.total_price
    );
}

#[test]
fn default_is_never_more_expensive_than_first_fit() {
    let types = catalog(SMALL);
    let pods: Vec<Pod> = (0..60)
        .map(|i| {
            plain(
                &format!("p{i}"),
                [250, 500, 1000, 2000][i % 4],
                [512, 1024, 4096, 8192][i % 4],
            )
        })
        .collect();
    let pools = [NodePool::default_pool()];
    let d = run(&pods, &types, &pools, Strategy::Default);
    let f = run(&pods, &types, &pools, Strategy::KarpenterFfd);
    assert!(d.total_price <= f.total_price + 1e-9);
    assert!(
        d.total_price <= 1.03 * d.lower_bound,
        "{} vs bound {}",
        d.total_price,
        d.lower_bound
    );
}

#[test]
fn optimal_proves_its_plan_on_a_small_set() {
    let types = catalog(SMALL);
    let pods: Vec<Pod> = (0..24)
        .map(|i| {
            plain(
                &format!("p{i}"),
                [250, 500, 1000][i % 3],
                [512, 1024, 2048][i % 3],
            )
        })
        .collect();
    let r = run(
        &pods,
        &types,
        &[NodePool::default_pool()],
        Strategy::Optimal,
    );
    assert_eq!(r.gap, 0.0);
    let d = run(
        &pods,
        &types,
        &[NodePool::default_pool()],
        Strategy::Default,
    );
    assert!(r.total_price <= d.total_price + 1e-9);
}

#[test]
fn gpu_pods_only_land_on_gpu_types_and_cpu_pods_avoid_them() {
    let types = catalog(SMALL);
    let mut pods: Vec<Pod> = (0..6)
        .map(|i| pod(&format!("g{i}"), 2000, 8192, json!({"gpu": 1}), json!({})))
        .collect();
    pods.extend((0..20).map(|i| plain(&format!("w{i}"), 500, 1024)));
    let r = run(
        &pods,
        &types,
        &[NodePool::default_pool()],
        Strategy::Default,
    );
    for c in &r.plan.new_claims {
        let gpus = types[c.offering.instance_type]
            .allocatable
            .get("nvidia.com/gpu");
        let wants: i64 = c
            .pods
            .iter()
            .map(|&p| pods[p].requests.get("nvidia.com/gpu"))
            .sum();
        assert!(wants <= gpus);
        if wants == 0 {
            assert_eq!(
                gpus, 0,
                "CPU-only nodes are cheaper without GPUs: {}",
                types[c.offering.instance_type].name
            );
        }
    }
}

#[test]
fn zone_spread_pods_keep_their_zone_counts_when_repacked() {
    let types = catalog(SMALL);
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<Pod> = (0..30)
        .map(|i| {
            pod(
                &format!("w{i}"),
                500,
                1024,
                spread.clone(),
                json!({"app": "web"}),
            )
        })
        .collect();
    run(
        &pods,
        &types,
        &[NodePool::default_pool()],
        Strategy::Default,
    );
}

#[test]
fn spot_capacity_is_spread_over_pools() {
    let types: Vec<InstanceType> = catalog(&[
        "m7i.large",
        "m7i.xlarge",
        "c7i.large",
        "c7i.xlarge",
        "m6i.large",
        "m6i.xlarge",
    ])
    .into_iter()
    .map(|mut t| {
        let od = t.offerings[0].price;
        let extra: Vec<Offering> = t
            .offerings
            .iter()
            .enumerate()
            .map(|(i, o)| Offering {
                zone: o.zone.clone(),
                zone_id: o.zone_id.clone(),
                capacity_type: "spot".into(),
                price: od * (0.3 + 0.01 * i as f64),
                available: true,
            })
            .collect();
        t.offerings.extend(extra);
        t
    })
    .collect();
    let pods: Vec<Pod> = (0..40)
        .map(|i| plain(&format!("p{i}"), 900, 1024))
        .collect();
    let r = run(&pods, &types, &[spot_pool()], Strategy::Default);
    let mut load: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut total = 0;
    for c in &r.plan.new_claims {
        assert_eq!(
            c.offering.capacity_type, "spot",
            "spot is cheaper and allowed"
        );
        let cpu = types[c.offering.instance_type].capacity.cpu;
        *load
            .entry((
                types[c.offering.instance_type].name.clone(),
                c.offering.zone.clone(),
            ))
            .or_default() += cpu;
        total += cpu;
    }
    let max = *load.values().max().unwrap();
    assert!(
        max as f64 <= 0.25 * total as f64 + 4000.0,
        "no pool over a quarter of the spot vCPU: {load:?}"
    );
    assert!(load.len() >= 4, "{load:?}");
}

#[test]
fn spreading_spot_never_pays_more_than_the_premium_over_the_cheapest_offering() {
    // Both types hold one pod each; r7i.large costs 31% more. Twenty nodes of spot capacity
    // put all of it in m7i.large's two pools, far over a quarter each, yet none goes to the
    // dearer type.
    let types: Vec<InstanceType> = catalog(&["m7i.large", "r7i.large"])
        .into_iter()
        .map(|mut t| {
            t.offerings
                .retain(|o| o.zone == "us-east-1a" || o.zone == "us-east-1b");
            let extra: Vec<Offering> = t
                .offerings
                .iter()
                .map(|o| Offering {
                    capacity_type: "spot".into(),
                    price: o.price * 0.3,
                    ..o.clone()
                })
                .collect();
            t.offerings.extend(extra);
            t
        })
        .collect();
    let pods: Vec<Pod> = (0..20)
        .map(|i| plain(&format!("p{i}"), 1500, 1024))
        .collect();
    let r = run(&pods, &types, &[spot_pool()], Strategy::Default);
    assert_eq!(r.plan.new_claims.len(), 20, "one pod a node");
    for c in &r.plan.new_claims {
        assert_eq!(types[c.offering.instance_type].name, "m7i.large");
        assert_eq!(c.offering.capacity_type, "spot");
    }
    let zones: BTreeSet<&str> = r
        .plan
        .new_claims
        .iter()
        .map(|c| c.offering.zone.as_str())
        .collect();
    assert_eq!(zones.len(), 2, "spread over both of its pools");
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    #[test]
    fn every_plan_of_every_strategy_keeps_the_invariants() {
        let types = catalog(SMALL);
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 24,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]),
        );
        // (cpu, memory MiB, kind: 0 plain, 1 gpu, 2 zone spread, 3 hostname anti-affinity, 4 zone selector)
        let pods_strategy = prop::collection::vec((100i64..4000, 128i64..16_000, 0u8..5), 1..40);
        runner
            .run(&(pods_strategy, any::<bool>()), |(specs, spot)| {
                let pods: Vec<Pod> = specs
                    .iter()
                    .enumerate()
                    .map(|(i, &(cpu, mem, kind))| match kind {
                        1 => pod(&format!("g{i}"), cpu.min(3000), mem.min(12_000), json!({"gpu": 1}), json!({"app": "gpu"})),
                        2 => pod(
                            &format!("s{i}"),
                            cpu,
                            mem,
                            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": {"app": "spread"}}}]}),
                            json!({"app": "spread"}),
                        ),
                        3 => pod(
                            &format!("a{i}"),
                            cpu,
                            mem,
                            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": HOSTNAME}]}}}),
                            json!({"app": "anti"}),
                        ),
                        4 => pod(&format!("z{i}"), cpu, mem, json!({"nodeSelector": {ZONE: "us-east-1b"}}), json!({"app": "zonal"})),
                        _ => plain(&format!("p{i}"), cpu, mem),
                    })
                    .collect();
                let pools = if spot { vec![spot_pool()] } else { vec![NodePool::default_pool()] };
                for s in [super::Strategy::KarpenterFfd, super::Strategy::Default, super::Strategy::Optimal] {
                    run(&pods, &types, &pools, s);
                }
                Ok(())
            })
            .unwrap();
    }
}

/// GPU and large types of the shared catalog, for sets shaped like production GPU clusters.
const GPU_AND_LARGE: &[&str] = &[
    "m7i.large",
    "m7i.4xlarge",
    "r7i.8xlarge",
    "m7i.48xlarge",
    "r7i.24xlarge",
    "g4dn.xlarge",
    "g4dn.12xlarge",
    "g4dn.metal",
    "g5.2xlarge",
    "g5.12xlarge",
    "g5.48xlarge",
    "g6.xlarge",
    "g6.12xlarge",
    "g6.48xlarge",
    "p4d.24xlarge",
];

mod production_shapes {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    /// The shapes of benches/data's production sets (1–8 GPUs with CPU and memory per GPU
    /// varying several-fold, CPU pods from 100m, shapes only the largest types hold) in
    /// heavy-tailed counts: every invariant holds for every strategy.
    #[test]
    fn plans_of_production_shaped_sets_keep_the_invariants() {
        let types = catalog(GPU_AND_LARGE);
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 12,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[19; 32]),
        );
        // (gpus: 0 or 1/2/4/8, cpu per unit, memory MiB per unit, pods of this shape)
        let shape = (
            prop::sample::select(vec![0i64, 0, 0, 1, 1, 2, 4, 8]),
            100i64..22_000,
            256i64..90_000,
            1usize..40,
        );
        runner
            .run(&prop::collection::vec(shape, 1..12), |shapes| {
                let mut pods = Vec::new();
                for (k, &(g, cpu, mem, n)) in shapes.iter().enumerate() {
                    let units = g.max(1);
                    let cpu = (cpu * units).min(180_000);
                    let mem = (mem * units).min(700_000);
                    for i in 0..n {
                        let name = format!("s{k}-{i}");
                        pods.push(if g > 0 {
                            pod(
                                &name,
                                cpu,
                                mem,
                                json!({"gpu": g}),
                                json!({"app": format!("s{k}")}),
                            )
                        } else {
                            plain(&name, cpu, mem)
                        });
                    }
                }
                for s in [
                    super::Strategy::KarpenterFfd,
                    super::Strategy::Default,
                    super::Strategy::Optimal,
                ] {
                    run(&pods, &types, &[NodePool::default_pool()], s);
                }
                Ok(())
            })
            .unwrap();
    }
}

fn run_with(
    pods: &[Pod],
    types: &[InstanceType],
    pools: &[NodePool],
    daemonsets: &[Pod],
    strategy: Strategy,
) -> PackResult {
    let snapshot = Snapshot {
        daemonsets: daemonsets.to_vec(),
        ..Default::default()
    };
    let shared = shared(pods);
    let input = SolveInput {
        snapshot: &snapshot,
        pending: &shared,
        nodepools: pools,
        instance_types: types,
    };
    let r = pack_as(input, strategy);
    let mut seen = vec![0; pods.len()];
    r.plan
        .new_claims
        .iter()
        .for_each(|c| c.pods.iter().for_each(|&p| seen[p] += 1));
    r.plan.unschedulable.iter().for_each(|u| seen[u.pod] += 1);
    assert!(
        seen.iter().all(|&n| n == 1),
        "each pod exactly once: {seen:?}"
    );
    let mut price = 0.0;
    for c in &r.plan.new_claims {
        let t = &types[c.offering.instance_type];
        let mut used = capstan_model::Resources::new();
        for &p in &c.pods {
            used.add(&shared[p].requests);
        }
        // Daemonset overhead comes on top (pools here select every daemonset's node).
        for d in daemonsets {
            used.add(&d.requests);
        }
        used.pods += daemonsets.len() as i64;
        let mut cap = t.allocatable.clone();
        if cap.ephemeral_storage == 0 {
            used.ephemeral_storage = 0;
        }
        cap.ephemeral_storage = cap.ephemeral_storage.max(used.ephemeral_storage);
        assert!(
            used.fits_in(&cap),
            "{} holds what it was given: {used} in {}",
            t.name,
            t.allocatable
        );
        price += c.offering.price;
    }
    assert!(
        (price - r.total_price).abs() < 1e-6,
        "the price is the sum of the offerings: {price} vs {}",
        r.total_price
    );
    assert!(
        r.total_price >= r.lower_bound - 1e-6,
        "{} < bound {}",
        r.total_price,
        r.lower_bound
    );
    r
}

#[test]
fn daemonsets_requesting_ephemeral_storage_do_not_lose_pods() {
    let types = catalog(SMALL);
    let mut ds = plain("ds", 100, 128);
    ds.requests.ephemeral_storage = 1 << 30;
    let pods: Vec<Pod> = (0..10).map(|i| plain(&format!("p{i}"), 500, 512)).collect();
    let r = run_with(
        &pods,
        &types,
        &[NodePool::default_pool()],
        &[ds],
        Strategy::Default,
    );
    assert!(r.plan.unschedulable.is_empty());
    assert!(r.lower_bound > 0.0);
}

#[test]
fn pods_with_several_required_terms_stay_where_sched_put_them() {
    let types = catalog(SMALL);
    let terms = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such.type"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}});
    let pods = vec![pod("odd", 500, 512, terms, json!({})), plain("p", 500, 512)];
    for s in [Strategy::Default, Strategy::Optimal] {
        let r = run_with(&pods, &types, &[NodePool::default_pool()], &[], s);
        assert!(r.plan.unschedulable.is_empty());
    }
}

#[test]
fn a_bound_never_exceeds_a_plan_that_nodepool_limits_cut_short() {
    let types = catalog(SMALL);
    let obj: NodePoolObject = serde_json::from_value(
        json!({"apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "small"},
        "spec": {"template": {"spec": {}}, "limits": {"cpu": "4"}}}),
    )
    .unwrap();
    let limited = NodePool::compile(&obj).unwrap();
    let pods: Vec<Pod> = (0..10)
        .map(|i| plain(&format!("p{i}"), 3000, 1024))
        .collect();
    for s in [Strategy::KarpenterFfd, Strategy::Default, Strategy::Optimal] {
        let r = run_with(&pods, &types, std::slice::from_ref(&limited), &[], s);
        assert!(
            !r.plan.unschedulable.is_empty(),
            "the limit leaves pods out"
        );
        let cpu: i64 = r
            .plan
            .new_claims
            .iter()
            .map(|c| types[c.offering.instance_type].capacity.cpu)
            .sum();
        assert!(cpu <= 4000, "limits hold: {cpu}m");
    }
}

#[test]
fn optimal_does_not_claim_a_proof_it_does_not_have() {
    // Three 400m pods and one 100m pod on 1-CPU nodes: the 100m pod is worth nothing at the
    // LP prices, so no enumerated pattern covers it; that must not pass for a proof.
    let mut t = catalog(&["c7i.large"]);
    t[0].allocatable.cpu = 1000;
    t[0].capacity.cpu = 1000;
    let mut pods: Vec<Pod> = (0..3).map(|i| plain(&format!("p{i}"), 400, 128)).collect();
    pods.push(plain("small", 100, 128));
    let r = run_with(
        &pods,
        &t,
        &[NodePool::default_pool()],
        &[],
        Strategy::Optimal,
    );
    let price = t[0].offerings[0].price;
    assert!(
        (r.total_price - 2.0 * price).abs() < 1e-9,
        "two nodes: {}",
        r.total_price
    );
    assert_eq!(
        r.gap, 0.0,
        "two nodes are optimal: 1.3 CPU never fits one node"
    );
}

#[test]
fn optimal_told_to_stop_at_once_reports_the_gap_it_has_and_no_proof() {
    // Five 400m pods on 1-CPU nodes: the LP buys 2.5 nodes, the optimum is 3; only a search
    // proves it, and a search that is stopped has proven nothing.
    let mut t = catalog(&["c7i.large"]);
    t[0].allocatable.cpu = 1000;
    t[0].capacity.cpu = 1000;
    let pods: Vec<Pod> = (0..5).map(|i| plain(&format!("p{i}"), 400, 128)).collect();
    let shared = shared(&pods);
    let pools = [NodePool::default_pool()];
    let snapshot = capstan_sched::Snapshot::default();
    let input = capstan_sched::SolveInput {
        snapshot: &snapshot,
        pending: &shared,
        nodepools: &pools,
        instance_types: &t,
    };
    let options = PackOptions {
        strategy: Strategy::Optimal,
        ..Default::default()
    };
    let stopped = pack_until(input, &options, &|| 0.0).unwrap();
    let price = t[0].offerings[0].price;
    assert!((stopped.total_price - 3.0 * price).abs() < 1e-9);
    assert!(
        stopped.gap > 0.1,
        "no proof without a search: gap {}",
        stopped.gap
    );
    let proven = pack_until(input, &options, &|| f64::INFINITY).unwrap();
    assert_eq!(proven.gap, 0.0, "the search proves three nodes optimal");
}

#[test]
fn a_claims_instance_types_are_cut_to_the_sixty_cheapest_unless_min_values_needs_more() {
    let types = Catalog::builtin().instance_types;
    assert!(
        types.len() > 100,
        "the built-in catalog has {} types",
        types.len()
    );
    let all: Vec<usize> = (0..types.len()).collect();
    let families = |kept: &[usize]| -> BTreeSet<&String> {
        kept.iter()
            .filter_map(|&t| types[t].labels.get(capstan_model::labels::INSTANCE_FAMILY))
            .collect()
    };
    let in_first_sixty = families(&all[..MAX_INSTANCE_TYPES]).len();
    let total = families(&all).len();
    assert!(
        in_first_sixty < total,
        "{in_first_sixty} of {total} families in the first sixty"
    );
    // (minValues on the family, types kept, families kept)
    let cases = [
        (None, MAX_INSTANCE_TYPES, in_first_sixty),
        (
            Some(in_first_sixty as u32),
            MAX_INSTANCE_TYPES,
            in_first_sixty,
        ),
        (
            Some(in_first_sixty as u32 + 2),
            MAX_INSTANCE_TYPES + 2,
            in_first_sixty + 2,
        ),
    ];
    for (min, len, fams) in cases {
        let mut reqs = Requirements::default();
        reqs.add(
            capstan_model::Requirement::exists(capstan_model::labels::INSTANCE_FAMILY)
                .with_min_values(min),
        );
        let kept = truncate_options(&types, all.clone(), &reqs);
        assert_eq!(kept.len(), len, "minValues {min:?}");
        assert_eq!(families(&kept).len(), fams, "minValues {min:?}");
        assert!(
            kept.windows(2).all(|w| w[0] < w[1]),
            "the options' order is kept"
        );
        assert_eq!(kept[..MAX_INSTANCE_TYPES], all[..MAX_INSTANCE_TYPES]);
    }
    let short = truncate_options(&types, all[..10].to_vec(), &Requirements::default());
    assert_eq!(short, all[..10].to_vec(), "ten options stay ten");
}

#[test]
fn a_counted_bound_equals_the_bound_over_the_pods_written_out() {
    let types = catalog(SMALL);
    let pools = [spot_pool()];
    let snapshot = Snapshot::default();
    let gpu = pod("g", 1000, 2048, json!({"gpu": 1}), json!({}));
    let shapes = [plain("a", 250, 512), plain("b", 2000, 8192), gpu];
    for counts in [[1, 1, 1], [7, 0, 2], [40, 13, 5], [0, 0, 0]] {
        let mut written: Vec<Pod> = Vec::new();
        for (s, &n) in shapes.iter().zip(&counts) {
            for i in 0..n {
                let mut p = s.clone();
                p.name = format!("{}-{i}", s.name);
                written.push(p);
            }
        }
        let written = shared(&written);
        let one = shared(&shapes);
        let input = |pending| SolveInput {
            snapshot: &snapshot,
            pending,
            nodepools: &pools,
            instance_types: &types,
        };
        let out = bound::lower_bound(&input(&written)).unwrap();
        let counted = bound::lower_bound_counted(&input(&one), &counts).unwrap();
        assert!(
            (out - counted).abs() <= 1e-9 * out.max(1.0),
            "{counts:?}: {out} written out, {counted} counted"
        );
        assert_eq!(counts == [0, 0, 0], counted == 0.0, "{counts:?}");
    }
}

#[test]
fn claims_on_warm_instances_come_back_from_every_strategy_as_the_scheduling_core_made_them() {
    let types = catalog(SMALL);
    let pools = vec![spot_pool()];
    let pods: Vec<Pod> = (0..12)
        .map(|i| plain(&format!("p{i}"), 1000, 1024))
        .collect();
    let shared = shared(&pods);
    let snapshot = Snapshot {
        warm: vec![capstan_model::Warm {
            instance_type: "m7i.xlarge".into(),
            zone: "us-east-1b".into(),
            capacity_type: "on-demand".into(),
            count: 1,
        }],
        ..Default::default()
    };
    let input = SolveInput {
        snapshot: &snapshot,
        pending: &shared,
        nodepools: &pools,
        instance_types: &types,
    };
    let base = capstan_sched::solve(input, &Default::default());
    let warm: Vec<&NewClaim> = base.new_claims.iter().filter(|c| c.warm).collect();
    assert_eq!(warm.len(), 1, "{base:#?}");
    assert_eq!(types[warm[0].offering.instance_type].name, "m7i.xlarge");
    assert_eq!(warm[0].offering.zone, "us-east-1b");
    for strategy in [Strategy::Default, Strategy::KarpenterFfd, Strategy::Optimal] {
        let r = pack_as(input, strategy);
        let kept: Vec<&NewClaim> = r.plan.new_claims.iter().filter(|c| c.warm).collect();
        assert_eq!(kept, warm, "{strategy:?}");
        let placed: usize = r.plan.new_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(placed, pods.len(), "{strategy:?}");
    }
}

#[test]
fn a_pool_with_limits_is_repacked_within_what_its_limits_leave() {
    let types = catalog(SMALL);
    // Forty 2-CPU/4-GiB pods: first-fit fills the biggest type; the re-pack buys more,
    // smaller, cheaper nodes.
    let pods: Vec<Pod> = (0..40)
        .map(|i| plain(&format!("p{i}"), 2000, 4096))
        .collect();
    let limited = |limits: Value| {
        let obj: NodePoolObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {}}, "limits": limits}
        }))
        .unwrap();
        NodePool::compile(&obj).unwrap()
    };
    let free = run(&pods, &types, &[limited(json!({}))], Strategy::Default);
    let ffd = run(&pods, &types, &[limited(json!({}))], Strategy::KarpenterFfd);
    assert!(
        free.total_price < ffd.total_price - 1e-9
            && free.plan.new_claims.len() > ffd.plan.new_claims.len(),
        "the case needs a re-pack that is cheaper and uses more nodes: {} on {} nodes vs {} on {}",
        free.total_price,
        free.plan.new_claims.len(),
        ffd.total_price,
        ffd.plan.new_claims.len()
    );
    let ffd_nodes = ffd.plan.new_claims.len().to_string();
    // (limits, the price the default strategy must come to)
    let cases = [
        (json!({"cpu": "1000"}), free.total_price),
        (json!({"cpu": "1000", "memory": "4000Gi"}), free.total_price),
        // As many nodes as first-fit uses: the re-pack needs more, so first-fit stands.
        (json!({"nodes": ffd_nodes}), ffd.total_price),
    ];
    for (limits, want) in cases {
        let pool = limited(limits.clone());
        let r = run(
            &pods,
            &types,
            std::slice::from_ref(&pool),
            Strategy::Default,
        );
        assert!(
            (r.total_price - want).abs() < 1e-9,
            "limits {limits}: {} wanted {want}",
            r.total_price
        );
        assert!(
            r.plan.unschedulable.is_empty(),
            "limits {limits}: every pod placed"
        );
        let mut held = Resources::new();
        for c in &r.plan.new_claims {
            let mut max = Resources::new();
            for &t in &c.instance_types {
                max.max_with(&types[t].capacity);
            }
            held.add(&max);
        }
        for (k, &limit) in &pool.limits {
            let used = if k == "nodes" {
                r.plan.new_claims.len() as i64
            } else {
                held.get(k)
            };
            assert!(
                used <= limit,
                "limits {limits}: {k} holds {used} of {limit}"
            );
        }
    }
}
