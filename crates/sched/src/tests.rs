//! Behaviour of the scheduling simulation, one predicate or relaxation step at a time.

use super::*;
use capstan_model::catalog::Offering;
use capstan_model::convert;
use capstan_model::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, ZONE};
use capstan_model::nodepool::NodePoolObject;
use capstan_model::requirements::Undefined;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// An instance type with `cpu` vCPUs (all allocatable), `mem` GiB, `pods` max pods, on-demand in
/// three zones at `price`.
fn itype(name: &str, cpu: i64, mem_gib: i64, pods: i64, price: f64) -> InstanceType {
    let mut labels = BTreeMap::new();
    labels.insert(INSTANCE_TYPE.to_string(), name.to_string());
    labels.insert(ARCH.to_string(), "amd64".to_string());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert(
        "capstan.dev/instance-family".to_string(),
        name.split('.').next().unwrap().to_string(),
    );
    let alloc = Resources {
        cpu: cpu * 1000,
        memory: mem_gib << 30,
        pods,
        ..Default::default()
    };
    InstanceType {
        name: name.to_string(),
        requirements: Requirements::from_labels(&labels),
        labels,
        capacity: alloc.clone(),
        allocatable: alloc,
        offerings: ZONES
            .iter()
            .map(|z| Offering {
                zone: z.to_string(),
                zone_id: None,
                capacity_type: "on-demand".into(),
                price,
                available: true,
            })
            .collect(),
    }
}

fn catalog() -> Vec<InstanceType> {
    vec![
        itype("m.large", 2, 8, 29, 0.10),
        itype("m.xlarge", 4, 16, 58, 0.20),
        itype("m.2xlarge", 8, 32, 58, 0.40),
        itype("m.4xlarge", 16, 64, 234, 0.80),
    ]
}

fn pool(spec: Value) -> NodePool {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let mut body = spec.clone();
    body.as_object_mut().unwrap().remove("name");
    let obj: NodePoolObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": body
    }))
    .unwrap();
    NodePool::compile(&obj).unwrap()
}

fn default_pool() -> NodePool {
    NodePool::default_pool()
}

/// A pod from a (partial) Kubernetes pod spec; `cpu` millicores and `mem` MiB go on one container.
fn pod(name: &str, cpu: i64, mem: i64, labels: Value, spec: Value) -> Pod {
    let mut s = spec.as_object().cloned().unwrap_or_default();
    s.insert(
        "containers".into(),
        json!([{"name": "app", "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}]),
    );
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": Value::Object(s)
    }))
    .unwrap();
    convert::pod(&p, &mut Vec::new()).unwrap()
}

fn plain(name: &str, cpu: i64, mem: i64) -> Pod {
    pod(name, cpu, mem, json!({}), json!({}))
}

fn node(name: &str, zone: &str, cpu: i64, mem_gib: i64, extra: Value) -> capstan_model::Node {
    let mut labels = json!({"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64"});
    if let Some(e) = extra.get("labels").and_then(Value::as_object) {
        for (k, v) in e {
            labels[k] = v.clone();
        }
    }
    let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": extra.get("taints").cloned().unwrap_or(json!([])), "unschedulable": extra.get("unschedulable").cloned().unwrap_or(json!(false))},
        "status": {"allocatable": {"cpu": cpu.to_string(), "memory": format!("{mem_gib}Gi"), "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    convert::node(&n).unwrap()
}

fn bound(mut p: Pod, node: &str) -> std::sync::Arc<Pod> {
    p.node_name = Some(node.to_string());
    p.phase = capstan_model::pod::PodPhase::Running;
    std::sync::Arc::new(p)
}

struct World {
    snapshot: Snapshot,
    pools: Vec<NodePool>,
    types: Vec<InstanceType>,
}

impl World {
    fn new() -> World {
        World {
            snapshot: Snapshot::default(),
            pools: vec![default_pool()],
            types: catalog(),
        }
    }

    fn solve(&self, pending: &[Pod]) -> Plan {
        let pending: Vec<std::sync::Arc<Pod>> =
            pending.iter().cloned().map(std::sync::Arc::new).collect();
        let plan = solve(
            SolveInput {
                snapshot: &self.snapshot,
                pending: &pending,
                nodepools: &self.pools,
                instance_types: &self.types,
            },
            &SolveOptions::default(),
        );
        check_each_pod_once(&plan, pending.len());
        plan
    }
}

fn check_each_pod_once(plan: &Plan, n: usize) {
    let mut seen = vec![0; n];
    for b in &plan.existing {
        b.pods.iter().for_each(|&p| seen[p] += 1);
    }
    for c in &plan.new_claims {
        c.pods.iter().for_each(|&p| seen[p] += 1);
    }
    for u in &plan.unschedulable {
        seen[u.pod] += 1;
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every pending pod appears exactly once: {seen:?}"
    );
}

/// Where each pod went: node or claim name, or "-" if unschedulable.
fn placement(plan: &Plan, n: usize) -> Vec<String> {
    let mut out = vec!["-".to_string(); n];
    for b in &plan.existing {
        b.pods.iter().for_each(|&p| out[p] = b.node.clone());
    }
    for c in &plan.new_claims {
        c.pods.iter().for_each(|&p| out[p] = c.name.clone());
    }
    out
}

fn zone_of(plan: &Plan, claim: &str) -> String {
    let c = plan.new_claims.iter().find(|c| c.name == claim).unwrap();
    c.offering.zone.clone()
}

fn reason(plan: &Plan, pod: usize) -> String {
    plan.unschedulable
        .iter()
        .find(|u| u.pod == pod)
        .map(|u| u.reason.to_string())
        .unwrap_or_else(|| panic!("pod {pod} was expected to be unschedulable: {plan:#?}"))
}

#[test]
fn pods_go_to_existing_nodes_before_new_claims() {
    let mut w = World::new();
    w.snapshot
        .nodes
        .push(Arc::new(node("n1", ZONES[0], 4, 16, json!({}))));
    w.snapshot.pods.push(bound(plain("old", 3000, 1024), "n1"));
    let plan = w.solve(&[plain("a", 500, 512), plain("b", 1500, 512)]);
    assert_eq!(
        placement(&plan, 2),
        vec!["n1".to_string(), "default-0".to_string()],
        "only 1 CPU is free on n1"
    );
}

#[test]
fn in_flight_claims_take_pods_before_new_claims() {
    let mut w = World::new();
    w.snapshot.inflight.push(InFlight {
        name: "default-abc".into(),
        nodepool: "default".into(),
        labels: [
            (ZONE.to_string(), ZONES[1].to_string()),
            (ARCH.to_string(), "amd64".to_string()),
        ]
        .into_iter()
        .collect(),
        taints: vec![],
        allocatable: Resources {
            cpu: 2000,
            memory: 8 << 30,
            pods: 29,
            ..Default::default()
        },
        capacity: Resources::default(),
    });
    let plan = w.solve(&[plain("a", 1000, 512)]);
    assert_eq!(plan.existing[0].node, "default-abc");
    assert!(plan.new_claims.is_empty());
}

#[test]
fn initialized_nodes_take_pods_before_nodes_coming_up_whatever_their_order() {
    // Both nodes hold the pod; the one still coming up is listed first.
    for (coming_up, want) in [(None, "a-up"), (Some("a-up"), "b-ready")] {
        let mut w = World::new();
        for n in ["a-up", "b-ready"] {
            w.snapshot
                .nodes
                .push(Arc::new(node(n, ZONES[0], 4, 16, json!({}))));
        }
        if let Some(n) = coming_up {
            w.snapshot.coming_up.insert(n.to_string());
        }
        let plan = w.solve(&[plain("p", 500, 512)]);
        assert_eq!(plan.existing[0].node, want, "coming up: {coming_up:?}");
    }
}

#[test]
fn new_claims_take_the_cheapest_type_that_holds_their_pods() {
    let w = World::new();
    let plan = w.solve(&[plain("a", 3000, 1024)]);
    let c = &plan.new_claims[0];
    assert_eq!(w.types[c.offering.instance_type].name, "m.xlarge");
    assert_eq!(c.offering.price, 0.20);
    let names: Vec<&str> = c
        .instance_types
        .iter()
        .map(|&t| w.types[t].name.as_str())
        .collect();
    assert_eq!(
        names,
        vec!["m.xlarge", "m.2xlarge", "m.4xlarge"],
        "options kept for the planner, cheapest first"
    );
}

#[test]
fn pods_share_a_claim_until_its_largest_type_is_full() {
    let w = World::new();
    let pods: Vec<Pod> = (0..5)
        .map(|i| plain(&format!("p{i}"), 4000, 1024))
        .collect();
    let plan = w.solve(&pods);
    // 16 CPU is the largest type: four pods of 4 CPU fill it, the fifth opens a second claim.
    assert_eq!(plan.new_claims.len(), 2);
    assert_eq!(plan.new_claims[0].pods.len(), 4);
    assert_eq!(
        w.types[plan.new_claims[0].offering.instance_type].name,
        "m.4xlarge"
    );
}

#[test]
fn max_pods_limits_a_node_even_when_cpu_is_free() {
    let mut w = World::new();
    w.types = vec![itype("t.small", 64, 64, 3, 0.1)];
    let pods: Vec<Pod> = (0..5).map(|i| plain(&format!("p{i}"), 10, 10)).collect();
    let plan = w.solve(&pods);
    assert_eq!(plan.new_claims.len(), 2);
    assert_eq!(plan.new_claims[0].pods.len(), 3);
}

#[test]
fn daemonset_overhead_can_make_a_type_too_small() {
    let mut w = World::new();
    w.snapshot.daemonsets.push(plain("ds", 500, 128));
    let plan = w.solve(&[plain("a", 1800, 512)]);
    // 1.8 CPU alone fits m.large (2 CPU); with 0.5 CPU of daemonsets it does not.
    assert_eq!(
        w.types[plan.new_claims[0].offering.instance_type].name,
        "m.xlarge"
    );
    assert_eq!(plan.new_claims[0].requests.cpu, 2300);
}

#[test]
fn nodes_and_in_flight_claims_hold_room_for_the_daemonset_pods_they_do_not_run_yet() {
    // One 2-CPU machine, a DaemonSet of 0.5 CPU, a pending pod of 1.8 CPU: the pod goes on the
    // machine only when the DaemonSet's pod is not still to come there.
    fn ds_pod(on: &str) -> std::sync::Arc<Pod> {
        let mut p = plain(&format!("ds-{on}"), 500, 128);
        p.owner_kind = Some("DaemonSet".into());
        bound(p, on)
    }
    let in_flight = |labels: &[(&str, &str)]| InFlight {
        name: "m".into(),
        nodepool: "default".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([(ZONE.to_string(), ZONES[1].to_string())])
            .collect(),
        taints: vec![],
        allocatable: Resources {
            cpu: 2000,
            memory: 8 << 30,
            pods: 29,
            ..Default::default()
        },
        capacity: Resources::default(),
    };
    struct Case {
        what: &'static str,
        setup: Box<dyn Fn(&mut Snapshot)>,
        takes_the_pod: bool,
    }
    let cases = vec![
        Case {
            what: "an in-flight claim: its DaemonSet pod is still to come",
            setup: Box::new(move |s| s.inflight.push(in_flight(&[]))),
            takes_the_pod: false,
        },
        Case {
            what: "an in-flight claim the DaemonSet's node selector leaves out",
            setup: Box::new(move |s| {
                s.inflight.push(in_flight(&[("role", "batch")]));
                let web: BTreeMap<String, String> = [("role".into(), "web".into())].into();
                s.daemonsets[0].node_selector = Requirements::from_labels(&web);
            }),
            takes_the_pod: true,
        },
        Case {
            what: "a node without the DaemonSet's pod yet",
            setup: Box::new(|s| s.nodes.push(Arc::new(node("m", ZONES[0], 2, 8, json!({}))))),
            takes_the_pod: false,
        },
        Case {
            what: "a node whose taint the DaemonSet does not tolerate",
            setup: Box::new(|s| {
                s.nodes.push(Arc::new(node(
                    "m",
                    ZONES[0],
                    2,
                    8,
                    json!({"taints": [{"key": "gpu", "effect": "NoSchedule"}]}),
                )))
            }),
            takes_the_pod: true,
        },
        Case {
            what: "a node that runs the DaemonSet's pod (0.5 CPU used, 1.5 free)",
            setup: Box::new(|s| {
                s.nodes.push(Arc::new(node("m", ZONES[0], 2, 8, json!({}))));
                s.pods.push(ds_pod("m"));
            }),
            takes_the_pod: false,
        },
        Case {
            what: "a node that runs it, its pods summarized",
            setup: Box::new(|s| {
                s.nodes.push(Arc::new(node("m", ZONES[0], 3, 8, json!({}))));
                let used = Resources {
                    cpu: 500,
                    memory: 128 << 20,
                    pods: 1,
                    ..Default::default()
                };
                s.used.insert("m".into(), used.clone());
                s.daemons_used.insert("m".into(), used);
            }),
            // 3 CPU less the 0.5 it runs: 2.5 free, and nothing more is held.
            takes_the_pod: true,
        },
    ];
    for c in cases {
        let mut w = World::new();
        w.snapshot.daemonsets.push(plain("ds", 500, 128));
        (c.setup)(&mut w.snapshot);
        // The pending pod tolerates the taint of the fourth case; the DaemonSet does not.
        let tolerant = json!({"tolerations": [{"key": "gpu", "operator": "Exists"}]});
        let plan = w.solve(&[pod("a", 1800, 512, json!({}), tolerant)]);
        let on_m = plan.existing.iter().any(|b| b.node == "m");
        assert_eq!(on_m, c.takes_the_pod, "{}: {plan:#?}", c.what);
        assert_eq!(plan.new_claims.len(), usize::from(!on_m), "{}", c.what);
    }
}

#[test]
fn daemonsets_that_do_not_tolerate_a_pools_taint_add_no_overhead_there() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}}),
    )];
    w.snapshot.daemonsets.push(plain("ds", 500, 128));
    let p = pod(
        "a",
        1800,
        512,
        json!({}),
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
    );
    let plan = w.solve(&[p]);
    assert_eq!(
        w.types[plan.new_claims[0].offering.instance_type].name,
        "m.large"
    );
}

#[test]
fn daemonsets_requiring_the_registered_or_initialized_label_count_on_new_nodes() {
    // Every node a pool launches will carry karpenter.sh/registered and
    // karpenter.sh/initialized; a DaemonSet requiring either runs there.
    for key in ["karpenter.sh/registered", "karpenter.sh/initialized"] {
        let mut w = World::new();
        w.snapshot.daemonsets.push(pod(
            "ds",
            500,
            128,
            json!({}),
            json!({"nodeSelector": {key: "true"}}),
        ));
        let plan = w.solve(&[plain("a", 1800, 512)]);
        assert_eq!(plan.new_claims[0].requests.cpu, 2300, "{key}");
        // A DaemonSet requiring another value does not.
        w.snapshot.daemonsets[0] = pod(
            "ds",
            500,
            128,
            json!({}),
            json!({"nodeSelector": {key: "false"}}),
        );
        let plan = w.solve(&[plain("a", 1800, 512)]);
        assert_eq!(plan.new_claims[0].requests.cpu, 1800, "{key}");
    }
}

#[test]
fn a_daemonset_counts_on_a_pool_that_meets_any_of_its_node_affinity_terms() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"metadata": {"labels": {"foo": "bar"}}, "spec": {}}}),
    )];
    let terms = |values: &[&str]| -> Value {
        values
            .iter()
            .map(|v| json!({"matchExpressions": [{"key": "foo", "operator": "In", "values": [v]}]}))
            .collect()
    };
    // (terms, overhead counted)
    for (t, counted) in [
        (terms(&["voo", "bar"]), true),
        (terms(&["voo", "zoo"]), false),
    ] {
        w.snapshot.daemonsets = vec![pod(
            "ds",
            500,
            128,
            json!({}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}}}}),
        )];
        let plan = w.solve(&[plain("a", 1000, 512)]);
        let want = if counted { 1500 } else { 1000 };
        assert_eq!(plan.new_claims[0].requests.cpu, want, "{t}");
    }
}

#[test]
fn a_daemonset_counts_only_on_the_instance_types_it_can_run_on() {
    // A DaemonSet pinned to the m.2xlarge type: 1.8 CPU fits an m.large beside no daemons,
    // and only an m.2xlarge pays its 0.5 CPU (Karpenter's per-type daemon overhead groups).
    let mut w = World::new();
    let pinned = |ty: &str| {
        pod(
            "ds",
            500,
            128,
            json!({}),
            json!({"nodeSelector": {"node.kubernetes.io/instance-type": ty}}),
        )
    };
    // (the type the DaemonSet requires, the pod's CPU, the type chosen, the claim's CPU)
    let cases = [
        ("m.2xlarge", 1800, "m.large", 1800),
        ("m.large", 1800, "m.xlarge", 1800),
        ("m.large", 1400, "m.large", 1900),
        ("no.such-type", 1800, "m.large", 1800),
    ];
    for (ty, cpu, want, requests) in cases {
        w.snapshot.daemonsets = vec![pinned(ty)];
        let plan = w.solve(&[plain("a", cpu, 512)]);
        let c = &plan.new_claims[0];
        assert_eq!(w.types[c.offering.instance_type].name, want, "{ty} {cpu}");
        assert_eq!(c.requests.cpu, requests, "{ty} {cpu}");
    }
}

#[test]
fn a_daemonsets_host_port_is_held_on_the_new_nodes_it_runs_on() {
    let ported = |name: &str, port: i32, spec: Value| {
        let mut s = spec.as_object().cloned().unwrap_or_default();
        s.insert(
            "containers".into(),
            json!([{"name": "c", "ports": [{"containerPort": port, "hostPort": port}],
                "resources": {"requests": {"cpu": "100m"}}}]),
        );
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": Value::Object(s)
        }))
        .unwrap();
        convert::pod(&p, &mut Vec::new()).unwrap()
    };
    let mut w = World::new();
    // Everywhere: a pod wanting the same port can go nowhere new.
    w.snapshot.daemonsets = vec![ported("ds", 8080, json!({}))];
    let plan = w.solve(&[ported("a", 8080, json!({}))]);
    assert!(plan.new_claims.is_empty(), "{plan:?}");
    assert!(reason(&plan, 0).contains("8080"), "{}", reason(&plan, 0));
    // Another port: no conflict.
    let plan = w.solve(&[ported("a", 9090, json!({}))]);
    assert_eq!(plan.new_claims.len(), 1);
    // Only on m.large: the pod goes to the next type.
    w.snapshot.daemonsets = vec![ported(
        "ds",
        8080,
        json!({"nodeSelector": {"node.kubernetes.io/instance-type": "m.large"}}),
    )];
    let plan = w.solve(&[ported("a", 8080, json!({}))]);
    assert_eq!(
        w.types[plan.new_claims[0].offering.instance_type].name,
        "m.xlarge"
    );
}

#[test]
fn min_values_count_zones_from_offerings_and_best_effort_relaxes_what_cannot_be_met() {
    let mut w = World::new();
    let req = |key: &str, values: &[&str], min: u32| json!({"key": key, "operator": "In", "values": values, "minValues": min});
    let pods = [plain("a", 500, 512)];
    // (requirement, relax, claimed min values (None: unschedulable))
    let cases = [
        (req(ZONE, &ZONES, 3), false, Some(3)),
        (req(ZONE, &ZONES, 3), true, Some(3)),
        (
            req(INSTANCE_TYPE, &["m.large", "m.xlarge", "x.none"], 3),
            false,
            None,
        ),
        (
            req(INSTANCE_TYPE, &["m.large", "m.xlarge", "x.none"], 3),
            true,
            Some(2),
        ),
    ];
    for (r, relax, want) in cases {
        w.pools = vec![pool(
            json!({"template": {"spec": {"requirements": [r.clone()]}}}),
        )];
        let pending: Vec<std::sync::Arc<Pod>> =
            pods.iter().cloned().map(std::sync::Arc::new).collect();
        let plan = solve(
            SolveInput {
                snapshot: &w.snapshot,
                pending: &pending,
                nodepools: &w.pools,
                instance_types: &w.types,
            },
            &SolveOptions {
                relax_min_values: relax,
                ..Default::default()
            },
        );
        let key = r["key"].as_str().unwrap();
        let got = plan
            .new_claims
            .first()
            .map(|c| c.requirements.get(key).unwrap().min_values.unwrap());
        assert_eq!(got, want, "{r} relax={relax}: {plan:?}");
        if let Some(c) = plan.new_claims.first() {
            assert_eq!(
                capstan_model::claim::min_values_relaxed(&w.pools[0].requirements, &c.requirements),
                want.is_some_and(|m| m < 3),
            );
        }
    }
}

#[test]
fn a_pods_volume_zone_places_its_new_node_but_its_topology_spread_still_counts_every_zone() {
    let in_zone = |z: &str| {
        [capstan_model::Requirement::in_values(ZONE, [z.to_string()])]
            .into_iter()
            .collect()
    };
    let mut w = World::new();
    // A node in the first zone with room: the volume's zone (the third) keeps the pod off it.
    w.snapshot
        .nodes
        .push(Arc::new(node("n0", ZONES[0], 4, 16, json!({}))));
    let mut p = plain("db", 500, 512);
    p.volume_requirements = in_zone(ZONES[2]);
    let plan = w.solve(&[p.clone()]);
    assert!(plan.existing.is_empty(), "{plan:#?}");
    let zone = plan.new_claims[0].requirements.get(ZONE).unwrap();
    assert_eq!(zone.values(), [ZONES[2].to_string()]);
    // Topology spread counts the zones the pod's node affinity allows, not its volume's (as
    // kube-scheduler and Karpenter): with one pod of the spread in the first zone already, a
    // second one whose volume is there too would make the skew 2 - 0 and must wait.
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "s"}}}]});
    let mut w = World::new();
    w.snapshot
        .nodes
        .push(Arc::new(node("n0", ZONES[0], 4, 16, json!({}))));
    w.snapshot.pods.push(bound(
        pod("s-0", 500, 512, json!({"app": "s"}), spread.clone()),
        "n0",
    ));
    let mut second = pod("s-1", 500, 512, json!({"app": "s"}), spread.clone());
    second.volume_requirements = in_zone(ZONES[0]);
    let plan = w.solve(&[second]);
    assert_eq!(plan.unschedulable.len(), 1, "{plan:#?}");
    // Its volume in the second zone, it gets a node there.
    let mut third = pod("s-2", 500, 512, json!({"app": "s"}), spread);
    third.volume_requirements = in_zone(ZONES[1]);
    let plan = w.solve(&[third]);
    let zone = plan.new_claims[0].requirements.get(ZONE).unwrap();
    assert_eq!(zone.values(), [ZONES[1].to_string()]);
}

#[test]
fn a_static_nodepool_launches_for_no_pod_but_its_nodes_take_pods() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"name": "fixed", "replicas": 2, "template": {"spec": {}}}),
    )];
    let plan = w.solve(&[plain("a", 500, 512)]);
    assert!(plan.new_claims.is_empty());
    assert_eq!(
        reason(&plan, 0),
        "no NodePool to launch from; nodepool fixed: static (replicas), launches for no pod"
    );
    w.snapshot.nodes.push(Arc::new(node(
        "fixed-1",
        ZONES[0],
        2,
        8,
        json!({"labels": {"karpenter.sh/nodepool": "fixed"}}),
    )));
    let plan = w.solve(&[plain("a", 500, 512)]);
    assert_eq!(placement(&plan, 1), vec!["fixed-1".to_string()]);
}

#[test]
fn a_deleting_nodepool_launches_nothing_and_a_deleting_node_takes_no_pods() {
    let mut w = World::new();
    let obj: NodePoolObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "going", "deletionTimestamp": "2026-12-01T10:00:00Z",
            "finalizers": ["example.com/hold"]},
        "spec": {"template": {"spec": {"requirements": []}}}
    }))
    .unwrap();
    w.pools = vec![NodePool::compile(&obj).unwrap()];
    assert!(w.pools[0].deleting);
    let plan = w.solve(&[plain("a", 500, 512)]);
    assert!(plan.new_claims.is_empty());
    assert_eq!(
        reason(&plan, 0),
        "no NodePool to launch from; nodepool going: being deleted, launches nothing"
    );
    // A node going (held by its finalizer) with room takes no pod; a new node does.
    let mut w = World::new();
    let mut n = node("going-1", ZONES[0], 4, 16, json!({}));
    n.deleting = true;
    w.snapshot.nodes.push(Arc::new(n));
    let plan = w.solve(&[plain("a", 500, 512)]);
    assert!(plan.existing.is_empty(), "{plan:#?}");
    assert_eq!(plan.new_claims.len(), 1);
}

#[test]
fn a_pod_too_large_for_every_type_gets_a_precise_reason() {
    let w = World::new();
    let plan = w.solve(&[plain("huge", 512_000, 1024)]);
    assert_eq!(
        reason(&plan, 0),
        "nodepool default: no instance type has enough cpu: needs 512, largest offers 16"
    );
}

#[test]
fn a_reason_mentions_daemonset_overhead_when_it_is_the_cause() {
    let mut w = World::new();
    w.snapshot.daemonsets.push(plain("ds", 500, 128));
    let plan = w.solve(&[plain("big", 15_800, 1024)]);
    let r = reason(&plan, 0);
    assert!(r.contains("after daemonset overhead"), "{r}");
}

#[test]
fn node_selectors_and_taints_block_with_reasons() {
    struct Case {
        name: &'static str,
        pools: Vec<NodePool>,
        pod: Pod,
        want: &'static str,
    }
    let tainted = pool(
        json!({"template": {"spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}}}),
    );
    let cases = vec![
        Case {
            name: "arch the pool does not allow",
            pools: vec![default_pool()],
            pod: pod(
                "a",
                100,
                100,
                json!({}),
                json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
            ),
            want: "nodepool default: requirement kubernetes.io/arch In [arm64] conflicts with kubernetes.io/arch In [amd64]",
        },
        Case {
            name: "a custom label no pool defines",
            pools: vec![default_pool()],
            pod: pod(
                "a",
                100,
                100,
                json!({}),
                json!({"nodeSelector": {"team": "x"}}),
            ),
            want: "nodepool default: requirement team In [x] names label \"team\", which is not defined",
        },
        Case {
            name: "a taint the pod does not tolerate",
            pools: vec![tainted],
            pod: plain("a", 100, 100),
            want: "nodepool default: untolerated taint gpu=true:NoSchedule",
        },
        Case {
            name: "spot asked of an on-demand pool",
            pools: vec![default_pool()],
            pod: pod(
                "a",
                100,
                100,
                json!({}),
                json!({"nodeSelector": {"karpenter.sh/capacity-type": "spot"}}),
            ),
            want: "nodepool default: requirement capstan.dev/capacity-type In [spot] conflicts with capstan.dev/capacity-type In [on-demand]",
        },
    ];
    for c in cases {
        let mut w = World::new();
        w.pools = c.pools;
        let plan = w.solve(std::slice::from_ref(&c.pod));
        assert_eq!(reason(&plan, 0), c.want, "{}", c.name);
    }
}

#[test]
fn tolerated_taints_and_startup_taints_do_not_block() {
    let mut w = World::new();
    w.pools = vec![pool(json!({"template": {"spec": {
        "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]}}}))];
    let p = pod(
        "a",
        100,
        100,
        json!({}),
        json!({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}),
    );
    let plan = w.solve(&[p]);
    assert_eq!(plan.new_claims.len(), 1);
}

#[test]
fn existing_node_taints_and_cordons_keep_pods_off() {
    let mut w = World::new();
    w.snapshot.nodes.push(Arc::new(node(
        "tainted",
        ZONES[0],
        8,
        32,
        json!({"taints": [{"key": "x", "effect": "NoSchedule"}]}),
    )));
    w.snapshot.nodes.push(Arc::new(node(
        "cordoned",
        ZONES[0],
        8,
        32,
        json!({"unschedulable": true}),
    )));
    let plan = w.solve(&[plain("a", 100, 100)]);
    assert!(plan.existing.is_empty());
    assert_eq!(plan.new_claims.len(), 1);
}

#[test]
fn node_affinity_terms_are_ored_and_tried_in_turn() {
    let w = World::new();
    let p = pod(
        "a",
        100,
        100,
        json!({}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]}]}
        ]}}}}),
    );
    let plan = w.solve(&[p]);
    assert_eq!(plan.new_claims[0].offering.zone, "us-east-1c");
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible_and_dropped_when_not() {
    let w = World::new();
    let prefer = |zone: &str| {
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}}]}}})
    };
    let plan = w.solve(&[pod("a", 100, 100, json!({}), prefer("us-east-1b"))]);
    assert_eq!(plan.new_claims[0].offering.zone, "us-east-1b");
    let plan = w.solve(&[pod("a", 100, 100, json!({}), prefer("eu-west-1a"))]);
    assert_eq!(
        plan.new_claims.len(),
        1,
        "an impossible preference is relaxed"
    );
}

#[test]
fn hostname_anti_affinity_puts_each_pod_on_its_own_node() {
    let w = World::new();
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            pod(
                &format!("db-{i}"),
                100,
                100,
                json!({"app": "db"}),
                anti.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert_eq!(plan.new_claims.len(), 4);
}

#[test]
fn anti_affinity_of_a_running_pod_keeps_selected_pods_away() {
    let mut w = World::new();
    w.snapshot
        .nodes
        .push(Arc::new(node("n1", ZONES[0], 8, 32, json!({}))));
    let guard = pod(
        "guard",
        100,
        100,
        json!({"app": "guard"}),
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
    );
    w.snapshot.pods.push(bound(guard, "n1"));
    let plan = w.solve(&[
        pod("web", 100, 100, json!({"app": "web"}), json!({})),
        plain("other", 100, 100),
    ]);
    assert_eq!(
        placement(&plan, 2),
        vec!["default-0".to_string(), "n1".to_string()]
    );
}

#[test]
fn zonal_spread_balances_new_pods_across_zones() {
    let w = World::new();
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                100,
                100,
                json!({"app": "web"}),
                spread.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        *per_zone.entry(c.offering.zone.clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_zone:?}"
    );
}

#[test]
fn a_spread_honouring_taints_or_node_affinity_knows_only_the_domains_it_counts() {
    // A node in rack r9, tainted and labelled `tier: old`; the NodePool makes rack r1 nodes
    // labelled `tier: new`. Three pods spread over racks (maxSkew 1), tolerating nothing:
    // counting r9 (policy Ignore), only one pod may go to r1 and the rest find no place;
    // honouring the taint, or a node selector `tier: new`, r9 is no domain and all go to r1.
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"metadata": {"labels": {"rack": "r1", "tier": "new"}}, "spec": {}}}),
    )];
    w.snapshot.nodes.push(Arc::new(node(
        "old",
        "us-east-1a",
        4,
        16,
        json!({"labels": {"rack": "r9", "tier": "old"},
               "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}),
    )));
    // (spread fields, node selector, pods planned)
    let cases = [
        (json!({}), json!({}), 1),
        (json!({"nodeTaintsPolicy": "Honor"}), json!({}), 3),
        (json!({}), json!({"tier": "new"}), 3),
        (
            json!({"nodeAffinityPolicy": "Ignore"}),
            json!({"tier": "new"}),
            1,
        ),
    ];
    for (extra, selector, want) in cases {
        let mut spread = json!({"maxSkew": 1, "topologyKey": "rack",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}});
        for (k, v) in extra.as_object().unwrap() {
            spread[k] = v.clone();
        }
        let spec = json!({"topologySpreadConstraints": [spread], "nodeSelector": selector});
        let pods: Vec<Pod> = (0..3)
            .map(|i| {
                pod(
                    &format!("web-{i}"),
                    100,
                    100,
                    json!({"app": "web"}),
                    spec.clone(),
                )
            })
            .collect();
        let plan = w.solve(&pods);
        let planned: usize = plan.new_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(planned, want, "{extra} {selector}: {plan:?}");
    }
}

#[test]
fn existing_pods_count_in_spread_domains() {
    let mut w = World::new();
    w.snapshot
        .nodes
        .push(Arc::new(node("n1", ZONES[0], 1, 4, json!({}))));
    for i in 0..2 {
        w.snapshot.pods.push(bound(
            pod(
                &format!("old-{i}"),
                100,
                100,
                json!({"app": "web"}),
                json!({}),
            ),
            "n1",
        ));
    }
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                100,
                100,
                json!({"app": "web"}),
                spread.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    let mut per_zone: BTreeMap<String, usize> = [(ZONES[0].to_string(), 2)].into_iter().collect();
    for c in &plan.new_claims {
        *per_zone.entry(c.offering.zone.clone()).or_default() += c.pods.len();
    }
    for b in &plan.existing {
        *per_zone.entry(ZONES[0].to_string()).or_default() += b.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "zone a already had two: {per_zone:?}"
    );
}

#[test]
fn min_domains_treats_the_global_minimum_as_zero_until_enough_domains_exist() {
    let w = World::new();
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 5, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                100,
                100,
                json!({"app": "web"}),
                spread.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    // Three zones < minDomains 5: each zone takes at most maxSkew pods.
    assert_eq!(
        plan.new_claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        3
    );
    let r = reason(&plan, 3);
    assert!(
        r.contains("topology spread on topology.kubernetes.io/zone (maxSkew 1 minDomains 5"),
        "{r}"
    );
}

#[test]
fn hostname_spread_limits_pods_per_node_to_max_skew() {
    let w = World::new();
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<Pod> = (0..5)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                100,
                100,
                json!({"app": "web"}),
                spread.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert_eq!(
        plan.new_claims
            .iter()
            .map(|c| c.pods.len())
            .collect::<Vec<_>>(),
        vec![2, 2, 1]
    );
}

#[test]
fn spread_and_anti_affinity_hold_together() {
    let w = World::new();
    let spec = json!({
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "kafka"}}}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "kafka"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            pod(
                &format!("k-{i}"),
                100,
                100,
                json!({"app": "kafka"}),
                spec.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert_eq!(plan.new_claims.len(), 6, "one node each");
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &plan.new_claims {
        *per_zone.entry(zone_of(&plan, &c.name)).or_default() += 1;
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

#[test]
fn schedule_anyway_spread_is_relaxed_when_it_cannot_hold() {
    let mut w = World::new();
    w.pools = vec![pool(json!({"template": {"spec": {"requirements": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}}}))];
    let soft = |when: &str| {
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"app": "web"}}}]})
    };
    // Only zone a can be launched, but zone b has a node with a pod: the skew would reach 2.
    w.snapshot
        .nodes
        .push(Arc::new(node("nb", ZONES[1], 1, 1, json!({}))));
    w.snapshot.pods.push(bound(
        pod("b0", 900, 100, json!({"app": "x"}), json!({})),
        "nb",
    ));
    w.snapshot.pods.push(bound(
        pod("b1", 10, 10, json!({"app": "web"}), json!({})),
        "nb",
    ));
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            pod(
                &format!("w{i}"),
                200,
                100,
                json!({"app": "web"}),
                soft("ScheduleAnyway"),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            pod(
                &format!("w{i}"),
                200,
                100,
                json!({"app": "web"}),
                soft("DoNotSchedule"),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert_eq!(
        plan.unschedulable.len(),
        1,
        "DoNotSchedule holds: a gets 2 while b has 1"
    );
}

#[test]
fn zonal_pod_affinity_keeps_pods_in_the_first_pods_zone() {
    let w = World::new();
    let aff = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}});
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            pod(
                &format!("c{i}"),
                6000,
                100,
                json!({"app": "cache"}),
                aff.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    let zones: BTreeSet<String> = plan
        .new_claims
        .iter()
        .map(|c| c.offering.zone.clone())
        .collect();
    assert!(plan.new_claims.len() > 1);
    assert_eq!(zones.len(), 1, "{zones:?}");
}

#[test]
fn affinity_to_pods_that_do_not_exist_is_unschedulable_with_a_reason() {
    let w = World::new();
    let aff = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let plan = w.solve(&[pod("web", 100, 100, json!({"app": "web"}), aff)]);
    assert_eq!(
        reason(&plan, 0),
        "pod affinity on kubernetes.io/hostname (selector app=db): no pod matches the selector"
    );
}

#[test]
fn hostname_affinity_joins_the_node_of_the_selected_pod() {
    let mut w = World::new();
    w.snapshot
        .nodes
        .push(Arc::new(node("n1", ZONES[0], 8, 32, json!({}))));
    w.snapshot
        .nodes
        .push(Arc::new(node("n2", ZONES[1], 8, 32, json!({}))));
    w.snapshot.pods.push(bound(
        pod("db", 100, 100, json!({"app": "db"}), json!({})),
        "n2",
    ));
    let aff = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let plan = w.solve(&[pod("web", 100, 100, json!({"app": "web"}), aff)]);
    assert_eq!(placement(&plan, 1), vec!["n2".to_string()]);
}

#[test]
fn preferred_anti_affinity_is_relaxed_when_the_pool_is_at_its_node_limit() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"spec": {}}, "limits": {"nodes": 1}}),
    )];
    let pref = json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}}});
    let pods: Vec<Pod> = (0..2)
        .map(|i| {
            pod(
                &format!("w{i}"),
                100,
                100,
                json!({"app": "web"}),
                pref.clone(),
            )
        })
        .collect();
    let plan = w.solve(&pods);
    assert_eq!(plan.new_claims.len(), 1);
    assert_eq!(plan.new_claims[0].pods.len(), 2);
}

#[test]
fn prefer_no_schedule_taints_are_avoided_then_tolerated() {
    let mut w = World::new();
    w.pools = vec![
        pool(
            json!({"name": "soft", "weight": 50, "template": {"spec": {"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}}}),
        ),
        pool(json!({"name": "plain", "template": {"spec": {}}})),
    ];
    let plan = w.solve(&[plain("a", 100, 100)]);
    assert_eq!(
        plan.new_claims[0].nodepool, "plain",
        "the untainted pool wins despite its lower weight"
    );
    w.pools.truncate(1);
    let plan = w.solve(&[plain("a", 100, 100)]);
    assert_eq!(
        plan.new_claims[0].nodepool, "soft",
        "with no other choice the taint is tolerated"
    );
}

#[test]
fn host_ports_keep_pods_apart() {
    let w = World::new();
    let hp = |name: &str| {
        let mut p = plain(name, 100, 100);
        p.host_ports.push(capstan_model::pod::HostPort {
            port: 8080,
            protocol: "TCP".into(),
            ip: "0.0.0.0".into(),
        });
        p
    };
    let plan = w.solve(&[hp("a"), hp("b")]);
    assert_eq!(plan.new_claims.len(), 2);
}

#[test]
fn heavier_nodepools_are_used_first_within_their_limits() {
    let mut w = World::new();
    w.pools = vec![
        pool(json!({"name": "light", "weight": 1, "template": {"spec": {}}})),
        pool(
            json!({"name": "heavy", "weight": 90, "template": {"spec": {}}, "limits": {"cpu": "4"}}),
        ),
    ];
    let pods: Vec<Pod> = (0..3).map(|i| plain(&format!("p{i}"), 3000, 100)).collect();
    let plan = w.solve(&pods);
    let pools: Vec<&str> = plan
        .new_claims
        .iter()
        .map(|c| c.nodepool.as_str())
        .collect();
    assert_eq!(pools, vec!["heavy", "light"], "{plan:#?}");
    assert_eq!(
        plan.new_claims[0].pods.len(),
        1,
        "heavy may only hold 4 CPU"
    );
}

#[test]
fn limits_count_existing_nodes_of_the_pool() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"spec": {}}, "limits": {"cpu": "8"}}),
    )];
    w.snapshot.nodes.push(Arc::new(node(
        "n1",
        ZONES[0],
        8,
        32,
        json!({"labels": {"karpenter.sh/nodepool": "default"}}),
    )));
    w.snapshot.pods.push(bound(plain("busy", 8000, 100), "n1"));
    let plan = w.solve(&[plain("a", 100, 100)]);
    assert_eq!(
        reason(&plan, 0),
        "0/1 nodes fit (1 insufficient cpu); nodepool default: limits reached (cpu=8)"
    );
}

#[test]
fn extended_resources_only_land_on_types_that_have_them() {
    let mut w = World::new();
    let mut gpu = itype("g.xlarge", 4, 16, 58, 1.0);
    gpu.allocatable.set("nvidia.com/gpu", 1);
    gpu.capacity.set("nvidia.com/gpu", 1);
    w.types.push(gpu);
    let mut p = plain("train", 1000, 1000);
    p.requests.set("nvidia.com/gpu", 1);
    let plan = w.solve(&[p.clone(), plain("web", 1000, 1000)]);
    assert_eq!(
        w.types[plan.new_claims[0].offering.instance_type].name,
        "g.xlarge"
    );
    let mut p2 = p;
    p2.requests.set("nvidia.com/gpu", 2);
    let plan = w.solve(&[p2]);
    assert_eq!(
        reason(&plan, 0),
        "nodepool default: no instance type has enough nvidia.com/gpu: needs 2, largest offers 1"
    );
}

#[test]
fn min_values_keep_enough_instance_families_or_refuse() {
    let mut w = World::new();
    w.types = vec![
        itype("a.large", 2, 8, 29, 0.1),
        itype("b.large", 2, 8, 29, 0.11),
        itype("c.xlarge", 4, 16, 29, 0.2),
    ];
    w.pools = vec![pool(json!({"template": {"spec": {"requirements": [
        {"key": "capstan.dev/instance-family", "operator": "Exists", "minValues": 2}]}}}))];
    let plan = w.solve(&[plain("small", 1000, 100)]);
    assert_eq!(plan.new_claims[0].instance_types.len(), 3);
    let plan = w.solve(&[plain("big", 3000, 100)]);
    assert_eq!(
        reason(&plan, 0),
        "nodepool default: minValues for capstan.dev/instance-family: 1 of 2 values left"
    );
}

#[test]
fn claims_are_labelled_with_their_nodepool_and_pinned_zone() {
    let w = World::new();
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let plan = w.solve(&[pod("w", 100, 100, json!({"app": "web"}), spread)]);
    let labels = plan.new_claims[0].requirements.single_values();
    assert_eq!(labels[NODEPOOL], "default");
    assert_eq!(labels[ZONE], plan.new_claims[0].offering.zone);
    assert_eq!(labels[CAPACITY_TYPE], "on-demand");
    assert!(!labels.contains_key(HOSTNAME));
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    #[derive(Clone, Debug)]
    struct Case {
        types: Vec<(i64, i64, i64, f64, bool)>,
        taint_pool: bool,
        pods: Vec<(i64, i64, u8, bool, u8)>,
        existing: Vec<(usize, i64)>,
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            prop::collection::vec(
                (
                    1i64..=32,
                    1i64..=128,
                    4i64..=64,
                    0.05f64..3.0,
                    any::<bool>(),
                ),
                1..8,
            ),
            any::<bool>(),
            // (cpu m, mem MiB, group 0..5, tolerates, zone selector 0..4)
            prop::collection::vec(
                (10i64..6000, 10i64..20_000, 0u8..6, any::<bool>(), 0u8..5),
                1..80,
            ),
            prop::collection::vec((0usize..3, 1i64..16), 0..4),
        )
            .prop_map(|(types, taint_pool, pods, existing)| Case {
                types,
                taint_pool,
                pods,
                existing,
            })
    }

    fn build(c: &Case) -> (World, Vec<Pod>) {
        let mut w = World::new();
        w.types = c
            .types
            .iter()
            .enumerate()
            .map(|(i, &(cpu, mem, pods, price, arm))| {
                let mut t = itype(&format!("t{i}.x"), cpu, mem, pods, price);
                if arm {
                    t.labels.insert(ARCH.into(), "arm64".into());
                }
                t.requirements = Requirements::from_labels(&t.labels);
                t
            })
            .collect();
        let mut pools = vec![pool(
            json!({"name": "general", "template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}}}),
        )];
        if c.taint_pool {
            pools.push(pool(
                json!({"name": "dedicated", "weight": 10, "template": {"spec": {
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}}),
            ));
        }
        w.pools = pools;
        for (i, &(z, cpu)) in c.existing.iter().enumerate() {
            w.snapshot.nodes.push(Arc::new(node(
                &format!("n{i}"),
                ZONES[z],
                cpu,
                32,
                json!({}),
            )));
        }
        let pods = c
            .pods
            .iter()
            .enumerate()
            .map(|(i, &(cpu, mem, group, tolerates, zone))| {
                let mut spec = serde_json::Map::new();
                let labels = json!({"app": format!("g{group}")});
                let sel = json!({"matchLabels": {"app": format!("g{group}")}});
                match group {
                    1 => {
                        spec.insert("topologySpreadConstraints".into(), json!([{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]));
                    }
                    2 => {
                        spec.insert("topologySpreadConstraints".into(), json!([{"maxSkew": 2, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]));
                    }
                    3 => {
                        spec.insert("affinity".into(), json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel, "topologyKey": HOSTNAME}]}}));
                    }
                    4 => {
                        spec.insert("affinity".into(), json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel, "topologyKey": ZONE}]}}));
                    }
                    _ => {}
                }
                if tolerates {
                    spec.insert("tolerations".into(), json!([{"key": "dedicated", "operator": "Exists"}]));
                }
                if (zone as usize) < ZONES.len() {
                    spec.insert("nodeSelector".into(), json!({ZONE: ZONES[zone as usize]}));
                }
                pod(&format!("p{i}"), cpu, mem, labels, Value::Object(spec))
            })
            .collect();
        (w, pods)
    }

    /// Checks every invariant the issue names on one plan.
    fn check(w: &World, pods: &[Pod], plan: &Plan) {
        check_each_pod_once(plan, pods.len());
        let mut zone_counts: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for c in &plan.new_claims {
            let t = &w.types[c.offering.instance_type];
            let mut used = Resources::new();
            for &p in &c.pods {
                used.add(&pods[p].requests);
            }
            assert!(
                used.fits_in(&t.allocatable),
                "claim {} over allocatable or max pods",
                c.name
            );
            for &o in &c.instance_types {
                assert!(
                    used.fits_in(&w.types[o].allocatable),
                    "every option holds the pods"
                );
            }
            let pool = w.pools.iter().find(|p| p.name == c.nodepool).unwrap();
            let mut node_labels = t.labels.clone();
            node_labels.insert(ZONE.into(), c.offering.zone.clone());
            node_labels.insert(CAPACITY_TYPE.into(), c.offering.capacity_type.clone());
            node_labels.extend(pool.labels.clone());
            let node_reqs = Requirements::from_labels(&node_labels);
            let mut anti_groups = BTreeSet::new();
            let mut host_spread: BTreeMap<String, i64> = BTreeMap::new();
            for &p in &c.pods {
                let pod = &pods[p];
                assert!(
                    capstan_model::taints::untolerated(&pool.taints, &pod.tolerations, false)
                        .is_none(),
                    "{} on a taint it does not tolerate",
                    pod.name
                );
                assert!(
                    node_reqs
                        .compatible(&pod.node_selector, Undefined::Deny)
                        .is_ok(),
                    "{} selector matched",
                    pod.name
                );
                let app = pod.labels["app"].clone();
                if !pod.anti_affinity.is_empty() {
                    assert!(
                        anti_groups.insert(app.clone()),
                        "anti-affinity pods of {app} share {}",
                        c.name
                    );
                }
                if pod.spread.iter().any(|s| s.topology_key == HOSTNAME) {
                    *host_spread.entry(app.clone()).or_default() += 1;
                }
                if pod.spread.iter().any(|s| s.topology_key == ZONE) {
                    *zone_counts
                        .entry(app)
                        .or_default()
                        .entry(c.offering.zone.clone())
                        .or_default() += 1;
                }
            }
            assert!(
                host_spread.values().all(|&n| n <= 2),
                "hostname spread within maxSkew 2 on {}",
                c.name
            );
        }
        for b in &plan.existing {
            let n = w.snapshot.nodes.iter().find(|n| n.name == b.node).unwrap();
            let mut used = Resources::new();
            for &p in &b.pods {
                used.add(&pods[p].requests);
            }
            assert!(used.fits_in(&n.allocatable));
            for &p in &b.pods {
                let pod = &pods[p];
                if pod.spread.iter().any(|s| s.topology_key == ZONE) {
                    *zone_counts
                        .entry(pod.labels["app"].clone())
                        .or_default()
                        .entry(n.labels[ZONE].clone())
                        .or_default() += 1;
                }
            }
        }
        for (app, counts) in zone_counts {
            // Zonal spread pods carry a zone selector for some; skew is over the zones they may use.
            let all: Vec<i64> = ZONES
                .iter()
                .map(|z| counts.get(*z).copied().unwrap_or(0))
                .collect();
            let selectors: BTreeSet<Option<String>> = pods
                .iter()
                .filter(|p| p.labels["app"] == app)
                .map(|p| p.node_selector.get(ZONE).map(|r| r.values()[0].clone()))
                .collect();
            if selectors.len() == 1 && selectors.contains(&None) {
                let (mx, mn) = (all.iter().max().unwrap(), all.iter().min().unwrap());
                assert!(mx - mn <= 1, "zone skew of {app}: {all:?}");
            }
        }
    }

    #[test]
    fn every_plan_respects_capacity_constraints_and_places_each_pod_once() {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 256,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        runner
            .run(&case(), |c| {
                let (w, pods) = build(&c);
                let plan = w.solve(&pods);
                check(&w, &pods, &plan);
                Ok(())
            })
            .unwrap();
    }

    /// Existing nodes only: (zone, cores, GiB, replicas of shape 0 bound there, extra CPU
    /// used m); shapes of pods: (CPU m, memory MiB, constraint 0..6, app label 0..3); runs of
    /// identical pending replicas: (shape, how many).
    #[derive(Clone, Debug)]
    struct Runs {
        nodes: Vec<(usize, i64, i64, usize, i64)>,
        shapes: Vec<(i64, i64, u8, u8)>,
        runs: Vec<(usize, usize)>,
    }

    fn runs() -> impl Strategy<Value = Runs> {
        (
            prop::collection::vec(
                (0usize..3, 1i64..=8, 1i64..=16, 0usize..4, 0i64..2000),
                1..6,
            ),
            prop::collection::vec((50i64..3000, 32i64..4096, 0u8..6, 0u8..3), 1..4),
            prop::collection::vec((0usize..4, 1usize..40), 1..6),
        )
            .prop_map(|(nodes, shapes, runs)| Runs {
                nodes,
                shapes,
                runs,
            })
    }

    fn replica(name: &str, (cpu, mem, constraint, app): (i64, i64, u8, u8)) -> Pod {
        let app = format!("g{app}");
        let sel = json!({"matchLabels": {"app": app}});
        let spec = match constraint {
            1 => {
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]})
            }
            2 => {
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel, "topologyKey": HOSTNAME}]}}})
            }
            3 => {
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": sel}]})
            }
            4 => {
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]})
            }
            5 => {
                json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel, "topologyKey": ZONE}]}}})
            }
            _ => json!({}),
        };
        pod(name, cpu, mem, json!({"app": app}), spec)
    }

    #[test]
    fn cutting_long_runs_of_replicas_changes_no_plan() {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 256,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]),
        );
        let cut_something = std::cell::Cell::new(0);
        runner
            .run(&runs(), |c| {
                let mut snapshot = Snapshot::default();
                for (i, &(zone, cores, gib, bound_here, extra)) in c.nodes.iter().enumerate() {
                    let name = format!("n{i}");
                    snapshot
                        .nodes
                        .push(Arc::new(node(&name, ZONES[zone], cores, gib, json!({}))));
                    for j in 0..bound_here {
                        snapshot
                            .pods
                            .push(bound(replica(&format!("b{i}-{j}"), c.shapes[0]), &name));
                    }
                    if extra > 0 {
                        let mut used = Resources::new();
                        used.cpu = extra;
                        snapshot.used.insert(name, used);
                    }
                }
                let pending: Vec<Arc<Pod>> = c
                    .runs
                    .iter()
                    .enumerate()
                    .flat_map(|(r, &(shape, n))| {
                        let shape = c.shapes[shape % c.shapes.len()];
                        (0..n).map(move |j| Arc::new(replica(&format!("r{r}-{j:02}"), shape)))
                    })
                    .collect();
                let input = || SolveInput {
                    snapshot: &snapshot,
                    pending: &pending,
                    nodepools: &[],
                    instance_types: &[],
                };
                for options in [
                    SolveOptions::default(),
                    SolveOptions {
                        skip_diagnosis: true,
                        ..Default::default()
                    },
                ] {
                    let uncut = crate::solver::solve_uncut(input(), &options);
                    let plan = solve(input(), &options);
                    check_each_pod_once(&plan, pending.len());
                    prop_assert_eq!(&plan, &uncut);
                    if uncut.unschedulable.len() >= 2 && !uncut.existing.is_empty() {
                        cut_something.set(cut_something.get() + 1);
                    }
                }
                Ok(())
            })
            .unwrap();
        assert!(
            cut_something.get() > 100,
            "few cases placed some replicas and left several: {}",
            cut_something.get()
        );
    }
}

#[test]
fn bound_pods_summarized_as_used_resources_fill_their_node_like_the_pods_would() {
    // The same cluster twice: with the bound pod listed, and with only its requests.
    let mut listed = World::new();
    listed
        .snapshot
        .nodes
        .push(Arc::new(node("n1", ZONES[0], 4, 16, json!({}))));
    listed
        .snapshot
        .pods
        .push(bound(plain("old", 3000, 1024), "n1"));
    let mut summarized = World::new();
    summarized.snapshot.nodes = listed.snapshot.nodes.clone();
    summarized
        .snapshot
        .used
        .insert("n1".into(), plain("old", 3000, 1024).requests);
    let pending = [plain("a", 500, 512), plain("b", 1500, 512)];
    let (a, b) = (listed.solve(&pending), summarized.solve(&pending));
    assert_eq!(placement(&a, 2), placement(&b, 2));
    assert_eq!(placement(&b, 2)[0], "n1");
    assert_ne!(placement(&b, 2)[1], "n1");
}

#[test]
fn machines_left_out_of_a_snapshot_still_count_against_nodepool_limits() {
    let mut w = World::new();
    w.pools = vec![pool(
        json!({"template": {"spec": {}}, "limits": {"cpu": "8"}}),
    )];
    let plan = w.solve(&[plain("a", 2000, 512)]);
    assert_eq!(plan.new_claims.len(), 1, "room under the limit");
    let mut full = capstan_model::Resources::new();
    full.cpu = 8000;
    w.snapshot.count("default", &full);
    let plan = w.solve(&[plain("a", 2000, 512)]);
    assert!(plan.new_claims.is_empty());
    assert_eq!(plan.unschedulable.len(), 1);
}

#[test]
fn each_nodepool_schedules_onto_its_own_figures_for_a_type_pools_see_differently() {
    // Two node classes: `east-a` has subnets in us-east-1a only and the default max pods;
    // `east-b` subnets in us-east-1b only and maxPods 4. The merged catalog holds a variant
    // of each type per pool.
    let for_pool = |zone: &str, pods: i64| -> Vec<InstanceType> {
        catalog()
            .into_iter()
            .map(|mut t| {
                t.offerings.retain(|o| o.zone == zone);
                t.allocatable.pods = t.allocatable.pods.min(pods);
                t.capacity.pods = t.allocatable.pods;
                t
            })
            .collect()
    };
    let mut w = World::new();
    w.pools = vec![
        pool(json!({"name": "east-a", "weight": 10, "template": {"spec": {}}})),
        pool(json!({"name": "east-b", "template": {"spec": {}}})),
    ];
    w.types = capstan_model::catalog::merge_pool_types(vec![
        ("east-a".into(), for_pool("us-east-1a", 110)),
        ("east-b".into(), for_pool("us-east-1b", 4)),
    ]);
    assert_eq!(w.types.len(), 2 * catalog().len());

    // Pods that must run in us-east-1b go to east-b, at most 4 to a node.
    let in_b = |name: &str| {
        pod(
            name,
            100,
            100,
            json!({}),
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1b"}}),
        )
    };
    let pods: Vec<Pod> = (0..6).map(|i| in_b(&format!("b{i}"))).collect();
    let plan = w.solve(&pods);
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    assert_eq!(plan.new_claims.len(), 2, "{plan:#?}");
    for c in &plan.new_claims {
        assert_eq!(c.nodepool, "east-b");
        assert_eq!(c.offering.zone, "us-east-1b");
        assert!(c.pods.len() <= 4, "east-b's max pods: {}", c.pods.len());
        for &t in &c.instance_types {
            assert_eq!(
                w.types[t].labels[NODEPOOL], "east-b",
                "only east-b's variants"
            );
        }
    }

    // Unconstrained pods go to the heavier east-a, in its zone, many to a node.
    let pods: Vec<Pod> = (0..6).map(|i| plain(&format!("a{i}"), 100, 100)).collect();
    let plan = w.solve(&pods);
    assert_eq!(plan.new_claims.len(), 1, "{plan:#?}");
    assert_eq!(plan.new_claims[0].nodepool, "east-a");
    assert_eq!(plan.new_claims[0].offering.zone, "us-east-1a");
}

#[test]
fn a_pod_selecting_a_zone_id_gets_a_claim_in_that_zone_and_none_where_no_zone_has_it() {
    let mut w = World::new();
    for t in &mut w.types {
        for (o, id) in t
            .offerings
            .iter_mut()
            .zip(["use1-az4", "use1-az6", "use1-az1"])
        {
            o.zone_id = Some(id.to_string());
        }
    }
    let sel = |id: &str| json!({"nodeSelector": {"topology.k8s.aws/zone-id": id}});
    // (zone ID selected, zone of the claim, or None for no claim)
    let cases = [
        ("use1-az6", Some(ZONES[1])),
        ("use1-az1", Some(ZONES[2])),
        ("use1-az9", None),
    ];
    for (id, zone) in cases {
        let plan = w.solve(&[pod("p", 500, 512, json!({}), sel(id))]);
        match zone {
            Some(z) => {
                assert_eq!(plan.new_claims.len(), 1, "{id}");
                assert_eq!(zone_of(&plan, &plan.new_claims[0].name), z, "{id}");
            }
            None => {
                assert!(plan.new_claims.is_empty(), "{id}");
                reason(&plan, 0);
            }
        }
    }
    // Where the catalog knows no zone IDs, nothing can satisfy the selector.
    let plain = World::new();
    let plan = plain.solve(&[pod("p", 500, 512, json!({}), sel("use1-az6"))]);
    assert!(plan.new_claims.is_empty());
    reason(&plan, 0);
}

#[test]
fn a_pod_with_zonal_affinity_to_a_pod_sorted_after_it_is_tried_again_and_follows_it() {
    let w = World::new();
    let aff = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}});
    // The follower asks for more CPU, so it is tried first, before any db pod exists.
    let follower = pod("web", 1500, 512, json!({}), aff);
    let target = pod(
        "db",
        100,
        128,
        json!({"app": "db"}),
        json!({"nodeSelector": {ZONE: ZONES[2]}}),
    );
    let plan = w.solve(&[follower, target]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let at = placement(&plan, 2);
    assert_eq!(zone_of(&plan, &at[0]), ZONES[2]);
    assert_eq!(zone_of(&plan, &at[1]), ZONES[2]);
}

#[test]
fn warm_instances_take_new_claims_before_machines_that_boot() {
    let warm = |t: &str, zone: &str, count: u32| capstan_model::Warm {
        instance_type: t.into(),
        zone: zone.into(),
        capacity_type: "on-demand".into(),
        count,
    };
    let at = |priority: i64| json!({ "priority": priority });
    // (case, warm instances, pool's zones, pods at priority 0, pods at priority -1, claims as
    // (type, zone if warm, pods), in plan order)
    type Case = (
        &'static str,
        Vec<capstan_model::Warm>,
        Option<&'static str>,
        usize,
        usize,
        Vec<(&'static str, &'static str, usize)>,
    );
    let cases: Vec<Case> = vec![
        (
            "none: one claim boots",
            vec![],
            None,
            10,
            0,
            vec![("m.4xlarge", "-", 10)],
        ),
        (
            "one warm instance, then a machine boots for the rest",
            vec![warm("m.xlarge", "us-east-1b", 1)],
            None,
            10,
            0,
            vec![("m.xlarge", "us-east-1b", 4), ("m.2xlarge", "-", 6)],
        ),
        (
            "each warm instance serves one claim",
            vec![warm("m.xlarge", "us-east-1b", 2)],
            None,
            10,
            0,
            vec![
                ("m.xlarge", "us-east-1b", 4),
                ("m.xlarge", "us-east-1b", 4),
                ("m.large", "-", 2),
            ],
        ),
        (
            "the cheapest warm instance first",
            vec![
                warm("m.2xlarge", "us-east-1a", 1),
                warm("m.xlarge", "us-east-1c", 1),
            ],
            None,
            10,
            0,
            vec![
                ("m.xlarge", "us-east-1c", 4),
                ("m.2xlarge", "us-east-1a", 6),
            ],
        ),
        (
            "pods holding room wait for a boot",
            vec![warm("m.xlarge", "us-east-1b", 1)],
            None,
            0,
            4,
            vec![("m.xlarge", "-", 4)],
        ),
        (
            "pods that wait now take the warm instance before pods holding room",
            vec![warm("m.xlarge", "us-east-1b", 1)],
            None,
            4,
            4,
            vec![("m.xlarge", "us-east-1b", 4), ("m.xlarge", "-", 4)],
        ),
        (
            "a warm instance in a zone the pool does not allow is not started",
            vec![warm("m.xlarge", "us-east-1b", 1)],
            Some("us-east-1a"),
            4,
            0,
            vec![("m.xlarge", "-", 4)],
        ),
    ];
    for (case, warm, zone, now, room, want) in cases {
        let mut w = World::new();
        w.snapshot.warm = warm;
        if let Some(z) = zone {
            w.pools = vec![pool(json!({"template": {"spec": {"requirements": [
                {"key": ZONE, "operator": "In", "values": [z]}]}}}))];
        }
        let pods: Vec<Pod> = (0..now)
            .map(|i| pod(&format!("now-{i}"), 1000, 1024, json!({}), at(0)))
            .chain((0..room).map(|i| pod(&format!("room-{i}"), 1000, 1024, json!({}), at(-1))))
            .collect();
        let plan = w.solve(&pods);
        let got: Vec<(&str, &str, usize)> = plan
            .new_claims
            .iter()
            .map(|c| {
                let t = w.types[c.offering.instance_type].name.as_str();
                let z = if c.warm {
                    c.offering.zone.as_str()
                } else {
                    "-"
                };
                if c.warm {
                    assert_eq!(c.instance_types, [c.offering.instance_type], "{case}");
                }
                (t, z, c.pods.len())
            })
            .collect();
        assert_eq!(got, want, "{case}");
        if now > 0 && room > 0 {
            let warm_pods: Vec<&str> = plan
                .new_claims
                .iter()
                .filter(|c| c.warm)
                .flat_map(|c| c.pods.iter().map(|&i| pods[i].name.as_str()))
                .collect();
            assert!(warm_pods.iter().all(|n| n.starts_with("now-")), "{case}");
        }
    }
}
