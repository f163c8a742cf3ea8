//! `capstan bench scheduling`: Karpenter's scheduling benchmark workload, reproduced.
//!
//! One NodePool; N synthetic instance types where type i has i+1 vCPU, 2(i+1) GiB and 10(i+1)
//! pods, offered spot and on-demand in three zones; pods in five equal groups (no constraint;
//! zonal topology spread maxSkew 1 DoNotSchedule; hostname topology spread; zonal self
//! pod-affinity; hostname self anti-affinity), CPU drawn from {100, 250, 500, 1000, 1500}m and
//! memory from {100Mi … 4Gi}, seeded.

use capstan_model::catalog::Offering;
use capstan_model::labels::{self, HOSTNAME, ZONE};
use capstan_model::nodepool::NodePoolObject;
use capstan_model::pod::{
    InclusionPolicy, Namespaces, PodAffinityTerm, PodPhase, TopologySpread, WhenUnsatisfiable,
};
use capstan_model::resources::MIB;
use capstan_model::selector::LabelSelector;
use capstan_model::{InstanceType, NodePool, Pod, Requirements, Resources};
use capstan_sched::{Plan, Snapshot, SolveInput, SolveOptions, solve};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const CPU_MILLI: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMORY_MIB: [i64; 6] = [100, 250, 500, 1024, 2048, 4096];
const GROUPS: [&str; 5] = [
    "generic",
    "zone-spread",
    "host-spread",
    "zone-affinity",
    "host-anti-affinity",
];

/// The benchmark's instance types: type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods; priced
/// like Karpenter's fake provider (0.025 $/vCPU + 0.001 $/GB, spot at 70%).
pub fn instance_types(n: usize) -> Vec<InstanceType> {
    (0..n)
        .map(|i| {
            let cpu = (i + 1) as i64;
            let name = format!("fake-it-{i}");
            let mut l = BTreeMap::new();
            l.insert(labels::INSTANCE_TYPE.to_string(), name.clone());
            l.insert(labels::ARCH.to_string(), "amd64".to_string());
            l.insert(labels::OS.to_string(), "linux".to_string());
            l.insert(labels::INSTANCE_CPU.to_string(), cpu.to_string());
            let cap = Resources {
                cpu: cpu * 1000,
                memory: 2 * cpu * 1024 * MIB,
                pods: 10 * cpu,
                ..Default::default()
            };
            let od = 0.025 * cpu as f64 + 0.001 * (2 * cpu) as f64 * 1.073_741_824;
            let offerings = ZONES
                .iter()
                .flat_map(|z| {
                    [
                        (labels::CAPACITY_ON_DEMAND, od),
                        (labels::CAPACITY_SPOT, od * 0.7),
                    ]
                    .map(|(ct, price)| Offering {
                        zone: z.to_string(),
                        zone_id: None,
                        capacity_type: ct.to_string(),
                        price,
                        available: true,
                    })
                })
                .collect();
            InstanceType {
                name,
                requirements: Requirements::from_labels(&l),
                labels: l,
                capacity: cap.clone(),
                allocatable: cap,
                offerings,
            }
        })
        .collect()
}

/// The benchmark's one NodePool: amd64 Linux, spot or on-demand, no limits.
pub fn nodepool() -> NodePool {
    let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]}}}
    }))
    .expect("benchmark NodePool is valid");
    NodePool::compile(&obj).expect("benchmark NodePool compiles")
}

/// `n` pods in five equal groups, seeded.
pub fn pods(n: usize, seed: u64) -> Vec<Arc<Pod>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let group = GROUPS[i % GROUPS.len()];
            let mut labels = BTreeMap::new();
            labels.insert("bench-group".to_string(), group.to_string());
            let selector = Some(LabelSelector::from_match_labels(&labels));
            let requests = Resources {
                cpu: CPU_MILLI[rng.random_range(0..CPU_MILLI.len())],
                memory: MEMORY_MIB[rng.random_range(0..MEMORY_MIB.len())] * MIB,
                pods: 1,
                ..Default::default()
            };
            let spread = |key: &str| TopologySpread {
                max_skew: 1,
                topology_key: key.to_string(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                selector: selector.clone(),
                min_domains: None,
                node_affinity_policy: InclusionPolicy::Honor,
                node_taints_policy: InclusionPolicy::Ignore,
            };
            let term = |key: &str| PodAffinityTerm {
                selector: selector.clone(),
                namespaces: Namespaces::List(vec!["default".into()]),
                topology_key: key.to_string(),
            };
            let mut p = Pod {
                namespace: "default".into(),
                name: format!("{group}-{i}"),
                labels,
                phase: PodPhase::Pending,
                requests,
                ..Default::default()
            };
            match i % GROUPS.len() {
                1 => p.spread.push(spread(ZONE)),
                2 => p.spread.push(spread(HOSTNAME)),
                3 => p.affinity.push(term(ZONE)),
                4 => p.anti_affinity.push(term(HOSTNAME)),
                _ => {}
            }
            Arc::new(p)
        })
        .collect()
}

/// One row of `capstan bench scheduling`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SchedulingRow {
    pub pods: usize,
    pub instance_types: usize,
    pub seconds: f64,
    pub pods_per_second: f64,
    pub nodes: usize,
    pub unschedulable: usize,
    pub runs: usize,
}

/// Solves the workload once.
pub fn solve_workload(pods: &[Arc<Pod>], types: &[InstanceType], pools: &[NodePool]) -> Plan {
    let snapshot = Snapshot::default();
    solve(
        SolveInput {
            snapshot: &snapshot,
            pending: pods,
            nodepools: pools,
            instance_types: types,
        },
        &SolveOptions::default(),
    )
}

/// Runs the benchmark for `n` pods: repeats the solve (at least once, up to `max_runs` or about
/// two seconds) and reports the median time.
pub fn run_scheduling(n: usize, n_types: usize, seed: u64, max_runs: usize) -> SchedulingRow {
    let types = instance_types(n_types);
    let pools = vec![nodepool()];
    let pods = pods(n, seed);
    let mut times = Vec::new();
    let mut plan = None;
    let started = Instant::now();
    while times.len() < max_runs.max(1)
        && (times.is_empty() || started.elapsed().as_secs_f64() < 2.0)
    {
        let t = Instant::now();
        let p = solve_workload(&pods, &types, &pools);
        times.push(t.elapsed().as_secs_f64());
        plan = Some(p);
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let plan = plan.expect("ran at least once");
    SchedulingRow {
        pods: n,
        instance_types: n_types,
        seconds,
        pods_per_second: if seconds > 0.0 {
            n as f64 / seconds
        } else {
            f64::INFINITY
        },
        nodes: plan.new_claims.len(),
        unschedulable: plan.unschedulable.len(),
        runs: times.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_seeded_and_split_in_five_groups() {
        let a = pods(100, 1);
        assert_eq!(a, pods(100, 1));
        assert_ne!(a, pods(100, 2));
        assert_eq!(a.iter().filter(|p| !p.anti_affinity.is_empty()).count(), 20);
        assert_eq!(
            a.iter()
                .filter(|p| p.spread.iter().any(|s| s.topology_key == ZONE))
                .count(),
            20
        );
    }

    #[test]
    fn instance_type_i_has_i_plus_one_vcpu() {
        let t = instance_types(400);
        assert_eq!(t[0].allocatable.cpu, 1000);
        assert_eq!(t[399].allocatable.cpu, 400_000);
        assert_eq!(t[399].allocatable.memory, 800 << 30);
        assert_eq!(t[399].allocatable.pods, 4000);
        assert_eq!(t[0].offerings.len(), 6);
    }

    #[test]
    fn a_small_run_places_every_pod() {
        let row = run_scheduling(500, 50, 1, 1);
        assert_eq!(row.unschedulable, 0);
        assert!(
            row.nodes >= 100,
            "100 anti-affinity pods need 100 nodes, got {}",
            row.nodes
        );
    }
}

/// A synthetic cluster for the disruption benchmark: `nodes` nodes of the built-in catalog's
/// m7i family in three zones, about `pods_per_node` pods each (seeded sizes, some nodes light),
/// one PDB per deployment.
pub fn disruption_cluster(
    nodes: usize,
    pods_per_node: usize,
    seed: u64,
) -> (
    Vec<capstan_disrupt::NodeInfo>,
    Vec<std::sync::Arc<Pod>>,
    Vec<capstan_model::pdb::Pdb>,
    Vec<InstanceType>,
) {
    use capstan_model::{Catalog, Node};
    let mut catalog = Catalog::builtin();
    catalog.instance_types.retain(|t| {
        t.name.starts_with("m7i.") || t.name.starts_with("c7i.") || t.name.starts_with("r7i.")
    });
    let types = catalog.instance_types;
    let sizes = ["m7i.4xlarge", "m7i.8xlarge"];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let now = 1_796_030_100.0;
    let mut infos = Vec::with_capacity(nodes);
    let mut pods = Vec::with_capacity(nodes * pods_per_node);
    for i in 0..nodes {
        let it = sizes[rng.random_range(0..sizes.len())];
        let t = types.iter().find(|t| t.name == it).expect("catalog type");
        let name = format!("node-{i:04}");
        let node = Node::for_instance_type(t, &name, ZONES[i % 3], "on-demand", "default");
        let mut info = capstan_disrupt::NodeInfo::from_node(node, &types);
        info.created = Some(now - 86_400.0);
        infos.push(info);
        // Fill to a random share of the node's CPU; some nodes end up light.
        let fill = if rng.random_range(0..10) == 0 {
            0.15
        } else {
            rng.random_range(0.5..0.95)
        };
        let mut used = 0i64;
        let budget = (t.allocatable.cpu as f64 * fill) as i64;
        let mut k = 0;
        while k < pods_per_node * 2 {
            let cpu = CPU_MILLI[rng.random_range(0..3)];
            if used + cpu > budget || k >= pods_per_node {
                break;
            }
            used += cpu;
            let app = format!("app-{}", rng.random_range(0..50));
            pods.push(std::sync::Arc::new(Pod {
                namespace: "default".into(),
                name: format!("{name}-p{k}"),
                labels: [("app".to_string(), app)].into_iter().collect(),
                node_name: Some(name.clone()),
                phase: PodPhase::Running,
                requests: Resources {
                    cpu,
                    memory: MEMORY_MIB[rng.random_range(0..4)] * MIB,
                    pods: 1,
                    ..Default::default()
                },
                ..Default::default()
            }));
            k += 1;
        }
    }
    let pdbs = (0..50)
        .map(|a| capstan_model::pdb::Pdb {
            namespace: "default".into(),
            name: format!("app-{a}"),
            selector: Some(LabelSelector::from_match_labels(
                &[("app".to_string(), format!("app-{a}"))]
                    .into_iter()
                    .collect(),
            )),
            min_available: None,
            max_unavailable: Some(capstan_model::pdb::IntOrPercent::Percent(20)),
            always_allow_unhealthy: false,
        })
        .collect();
    (infos, pods, pdbs, types)
}

/// One full evaluation of the disruption engine over the synthetic cluster.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DisruptionRow {
    pub nodes: usize,
    pub pods: usize,
    pub seconds: f64,
    pub commands: usize,
    pub blocked: usize,
    pub savings_usd_per_hour: f64,
}

pub fn run_disruption(nodes: usize, pods_per_node: usize, seed: u64) -> DisruptionRow {
    let (infos, pods, pdbs, types) = disruption_cluster(nodes, pods_per_node, seed);
    let pools = vec![NodePool::default_pool()];
    let started = Instant::now();
    let e = capstan_disrupt::evaluate(capstan_disrupt::Input {
        nodes: &infos,
        pods: &pods,
        pdbs: &pdbs,
        nodepools: &pools,
        instance_types: &types,
        daemonsets: &[],
        now: 1_796_030_100.0,
        spot_to_spot: false,
        ignore_preferences: false,
        known: None,
    });
    DisruptionRow {
        nodes,
        pods: pods.len(),
        seconds: started.elapsed().as_secs_f64(),
        commands: e.commands.len(),
        blocked: e.blocked.len(),
        savings_usd_per_hour: e.before - e.after,
    }
}

/// One controller pass at a cluster's size (`capstan bench pass`, a column of
/// `capstan bench scale`): the provisioner's decision over a batch of pending pods — a
/// snapshot of every node with its bound pods, then the plan — and one full disruption
/// evaluation, on the synthetic cluster of [`disruption_cluster`]. Each part is timed on its
/// own; the row gives the median of `runs` runs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassRow {
    pub nodes: usize,
    /// Pods bound in the cluster.
    pub pods: usize,
    /// Pending pods planned (the scheduling benchmark's five groups: a fifth have no
    /// constraint, the rest topology spread or pod (anti-)affinity, so every bound pod is
    /// seen).
    pub pending: usize,
    pub plan_seconds: f64,
    pub evaluation_seconds: f64,
    /// Plan plus evaluation.
    pub seconds: f64,
    /// Of the pending pods: placed on existing nodes, on new NodeClaims, nowhere.
    pub on_existing: usize,
    pub on_new: usize,
    pub unschedulable: usize,
    pub new_claims: usize,
    pub commands: usize,
    pub runs: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run_pass(
    nodes: usize,
    pods_per_node: usize,
    pending: usize,
    seed: u64,
    runs: usize,
) -> PassRow {
    let (infos, bound, pdbs, types) = disruption_cluster(nodes, pods_per_node, seed);
    let pending_pods = pods(pending, seed);
    let pools = vec![NodePool::default_pool()];
    let now = 1_796_030_100.0;
    let mut by_node: std::collections::HashMap<&str, Vec<Arc<Pod>>> =
        std::collections::HashMap::new();
    for p in &bound {
        if let Some(n) = &p.node_name {
            by_node.entry(n.as_str()).or_default().push(p.clone());
        }
    }
    let repel = bound.iter().any(|p| !p.anti_affinity.is_empty());
    let runs = runs.max(1);
    let (mut plans, mut evals) = (Vec::new(), Vec::new());
    let mut row = PassRow {
        nodes,
        pods: bound.len(),
        pending,
        plan_seconds: 0.0,
        evaluation_seconds: 0.0,
        seconds: 0.0,
        on_existing: 0,
        on_new: 0,
        unschedulable: 0,
        new_claims: 0,
        commands: 0,
        runs,
    };
    for _ in 0..runs {
        let started = Instant::now();
        let mut b = capstan_sched::SnapshotBuilder::new(&pending_pods, repel);
        for info in &infos {
            let on = by_node
                .get(info.node.name.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut used = Resources::new();
            for p in on {
                used.add(&p.requests);
            }
            b.node(&info.node, info.nodepool.as_deref(), on, &used);
        }
        let snapshot = b.build();
        let plan = solve(
            SolveInput {
                snapshot: &snapshot,
                pending: &pending_pods,
                nodepools: &pools,
                instance_types: &types,
            },
            &SolveOptions::default(),
        );
        plans.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let e = capstan_disrupt::evaluate(capstan_disrupt::Input {
            nodes: &infos,
            pods: &bound,
            pdbs: &pdbs,
            nodepools: &pools,
            instance_types: &types,
            daemonsets: &[],
            now,
            spot_to_spot: false,
            ignore_preferences: false,
            known: None,
        });
        evals.push(started.elapsed().as_secs_f64());
        row.on_new = plan.new_claims.iter().map(|c| c.pods.len()).sum();
        row.on_existing = plan.existing.iter().map(|b| b.pods.len()).sum();
        row.unschedulable = plan.unschedulable.len();
        row.new_claims = plan.new_claims.len();
        row.commands = e.commands.len();
    }
    row.plan_seconds = median(plans);
    row.evaluation_seconds = median(evals);
    row.seconds = row.plan_seconds + row.evaluation_seconds;
    row
}

#[cfg(test)]
mod pass_tests {
    use super::*;

    #[test]
    fn a_pass_plans_every_pending_pod_and_times_both_halves() {
        let row = run_pass(40, 20, 100, 1, 2);
        assert_eq!(row.nodes, 40);
        assert_eq!(row.pending, 100);
        assert_eq!(row.on_existing + row.on_new + row.unschedulable, 100);
        // The 20 pods with hostname anti-affinity each need a node of their own; 40 nodes
        // have room for all of them.
        assert_eq!(row.unschedulable, 0);
        assert!(row.pods > 40 && row.pods <= 40 * 20, "{}", row.pods);
        assert!(row.plan_seconds > 0.0 && row.evaluation_seconds > 0.0);
        assert_eq!(row.seconds, row.plan_seconds + row.evaluation_seconds);
        assert_eq!(row.runs, 2);
    }
}
