//! `pkg/controllers/provisioning/suite_test.go`: the provisioner's own suite, over the same
//! fake instance types as the scheduling suite (`fake.NewCloudProvider`) and `test.NodePool()`
//! (no requirements: every capacity type, architecture and OS its types offer).

use super::*;

pub const PROVISIONING: &str = "pkg/controllers/provisioning/suite_test.go";

/// Its of this file `capstan plan` cannot be asked, with the reason.
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "Batcher: 3 Its",
        "the batching window is queue mechanics (capstan's controller batches on its own idle \
         and maximum durations, tested in controller::provisioning)",
    ),
    (
        "terminationGracePeriod: 3 Its",
        "the global default is a Karpenter operator option capstan's NodeClaims take from the \
         NodePool only (tested in controller::provisioning)",
    ),
    (
        "should mark podHealthyNodePoolScheduledTime (2 Its)",
        "cluster-state timestamps for Karpenter's metrics",
    ),
    (
        "should annotate nodes",
        "plan's JSON gives each NodeClaim's labels and taints, not its annotations",
    ),
    (
        "should not use a different NodePool hash on the NodeClaim if the NodePool changes during scheduling",
        "Karpenter's Schedule/CreateNodeClaims split within one pass",
    ),
];

fn add_prov(out: &mut Vec<Scenario>, it: &'static str, types: fn() -> Vec<FakeType>, run: Body) {
    out.push(Scenario {
        file: PROVISIONING,
        it,
        run: Box::new(move |dir: &PathBuf| run(&mut Session::new(dir, types()))),
    });
}

/// `test.NodePool()`: no requirements.
fn any_pool() -> Value {
    nodepool("default", vec![])
}

/// `test.NodePool()` with `spec.limits`.
fn limited_pool(limits: Value) -> Value {
    let mut p = any_pool();
    p["spec"]["limits"] = limits;
    p
}

/// The default types plus `AddInstanceResources`' three: `example` (here `example-<cpu>`), arch
/// `arch`, linux, one spot offering in test-zone-1 at the fake price, 10/4Gi, 11/5Gi, 12/6Gi.
fn with_examples() -> Vec<FakeType> {
    let mut v = default_types();
    for (cpu, mem) in [(10.0, 4.0), (11.0, 5.0), (12.0, 6.0)] {
        v.push(
            FakeType::new(&format!("example-{cpu}"), "arch", cpu, mem).offering(
                "spot",
                "test-zone-1",
                fake_price(cpu, mem),
            ),
        );
    }
    v
}

fn scheduled_on(s: &Session, pod: &str, itype: &str) -> Result<(), String> {
    let got = type_of(s, pod)?;
    ensure(
        got == itype,
        format!("{pod} on {got}, Karpenter expects {itype}"),
    )
}

/// A pod with container `requests` (= limits) and `init` containers, each (cpu, memory,
/// restartPolicy Always: a sidecar).
fn with_init(s: &mut Session, requests: (&str, &str), init: &[(&str, &str, bool)]) -> Value {
    let r = |cpu: &str, mem: &str| json!({"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}});
    let mut p = sized(s, r(requests.0, requests.1));
    p["spec"]["initContainers"] = init
        .iter()
        .enumerate()
        .map(|(i, (cpu, mem, sidecar))| {
            let mut c =
                json!({"name": format!("init-{i}"), "image": "pause", "resources": r(cpu, mem)});
            if *sidecar {
                c["restartPolicy"] = json!("Always");
            }
            c
        })
        .collect();
    p
}

/// Pods constrained (by `make`: a node selector or a required node affinity) to what the
/// NodePool and its types offer get nodes; pods constrained to anything else get none.
fn supported_constraints(
    s: &mut Session,
    make: fn(&mut Session, &str, &str) -> Value,
) -> Result<(), String> {
    let ok = [
        ("karpenter.sh/nodepool", "default"),
        (ZONE, "test-zone-1"),
        (ITYPE, "default-instance-type"),
        ("kubernetes.io/arch", "arm64"),
        ("kubernetes.io/os", "linux"),
    ];
    let pods = ok.iter().map(|(k, v)| make(s, k, v)).collect();
    s.provision(&[any_pool()], pods);
    for i in 1..=ok.len() {
        node(s, &format!("p{i}"))?;
    }
    let bad = [
        ("karpenter.sh/nodepool", "unknown"),
        (ZONE, "unknown"),
        (ITYPE, "unknown"),
        ("kubernetes.io/arch", "unknown"),
        ("kubernetes.io/os", "unknown"),
        (CT, "unknown"),
        ("foo", "bar"),
    ];
    let pods = bad.iter().map(|(k, v)| make(s, k, v)).collect();
    s.provision(&[any_pool()], pods);
    for i in ok.len() + 1..=ok.len() + bad.len() {
        not_scheduled(s, &format!("p{i}"))?;
    }
    Ok(())
}

/// Two pods that repel each other by hostname, 1.5 CPU each (`Resource Limits`).
fn repelling(s: &mut Session) -> Value {
    let mut p = sized(s, json!({"requests": {"cpu": "1.5"}}));
    p["metadata"]["labels"] = json!({"app": "foo"});
    p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "foo"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    p
}

pub fn cases() -> Vec<Scenario> {
    let mut out = Vec::new();
    let mut add = |it, run: Body| add_prov(&mut out, it, default_types, run);
    add("should provision nodes", |s| {
        let p = bare(s);
        s.provision(&[any_pool()], vec![p]);
        nodes_launched(s, 1)?;
        node(s, "p1").map(|_| ())
    });
    add("Should provision nodes for multiple pods", |s| {
        let pods = (0..100).map(|_| bare(s)).collect();
        s.provision(&[any_pool()], pods);
        ensure(!s.nodes.is_empty(), "nodes launched")?;
        for i in 1..=100 {
            node(s, &format!("p{i}"))?;
        }
        Ok(())
    });
    add("should ignore NodePools that are deleting", |s| {
        let mut pool = any_pool();
        pool["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
        pool["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
        let p = bare(s);
        s.provision(&[pool], vec![p]);
        nodes_launched(s, 0)?;
        not_scheduled(s, "p1")
    });
    add(
        "should mark pod as unschedulable if there are no valid nodepools",
        |s| {
            let mut pool = any_pool();
            pool["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
            pool["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
            let p = bare(s);
            s.provision(&[pool], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should provision nodes for pods with supported node selectors",
        |s| supported_constraints(s, |s, k, v| selecting(s, json!({ k: v }))),
    );
    add(
        "should provision nodes for pods with supported node affinities",
        |s| supported_constraints(s, |s, k, v| requiring(s, json!([req(k, "In", &[v])]))),
    );
    add("should provision nodes for accelerators", |s| {
        let a = sized(s, json!({"limits": {"fake.com/vendor-a": "1"}}));
        let b = sized(s, json!({"limits": {"fake.com/vendor-b": "1"}}));
        s.provision(&[any_pool()], vec![a, b]);
        node(s, "p1")?;
        node(s, "p2").map(|_| ())
    });
    add("should provision multiple nodes when maxPods is set", |s| {
        let pool = nodepool(
            "default",
            vec![req(ITYPE, "In", &["single-pod-instance-type"])],
        );
        let pods = (0..3).map(|_| bare(s)).collect();
        s.provision(&[pool], pods);
        nodes_launched(s, 3)?;
        on_distinct_nodes(s, &["p1", "p2", "p3"], 3)
    });
    add(
        "should schedule all pods on one inflight node when node is in deleting state",
        |s| {
            // `test.Node` of the NodePool, of the first type, held by the termination finalizer
            // and deleted, with three pods bound.
            unowned_node(s, "old", json!({"cpu": "4", "memory": "4Gi", "pods": "5"}));
            let n = node_mut(s, "old");
            n["metadata"]["labels"]["karpenter.sh/nodepool"] = json!("default");
            n["metadata"]["labels"][ITYPE] = json!("default-instance-type");
            n["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
            n["metadata"]["deletionTimestamp"] = json!("2026-12-01T11:00:00Z");
            for _ in 0..3 {
                let p = bare(s);
                s.bind(p, "old", "Running");
            }
            let pods = vec![bare(s), bare(s)];
            s.provision(&[any_pool()], pods);
            nodes_launched(s, 2)?;
            for p in ["p4", "p5"] {
                ensure(
                    node(s, p)? != "old",
                    format!("{p} not on the deleting node"),
                )?;
            }
            Ok(())
        },
    );
    let mut add = |it, run: Body| add_prov(&mut out, it, with_examples, run);
    add(
        "should schedule based on the max resource requests of containers and initContainers with sidecar containers when initcontainer comes first",
        |s| {
            let p = with_init(
                s,
                ("6", "2Gi"),
                &[("10", "4Gi", false), ("4.9", "2.9Gi", true)],
            );
            s.provision(&[any_pool()], vec![p]);
            scheduled_on(s, "p1", "example-11")
        },
    );
    add(
        "should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are smaller than container resources",
        |s| {
            let p = with_init(
                s,
                ("6", "2Gi"),
                &[("4.9", "2.9Gi", true), ("5", "1Gi", false)],
            );
            s.provision(&[any_pool()], vec![p]);
            scheduled_on(s, "p1", "example-11")
        },
    );
    add(
        "should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are bigger than container resources",
        |s| {
            let p = with_init(
                s,
                ("5", "1Gi"),
                &[("4.9", "2.9Gi", true), ("6", "2Gi", false)],
            );
            s.provision(&[any_pool()], vec![p]);
            scheduled_on(s, "p1", "example-11")
        },
    );
    add(
        "should schedule based on the pod level resources requests",
        |s| {
            let mut p = with_init(s, ("5", "1Gi"), &[("6", "2Gi", false), ("4", "2Gi", true)]);
            p["spec"]["resources"] = json!({"requests": {"cpu": "9.9", "memory": "3.9Gi"},
                "limits": {"cpu": "10", "memory": "4Gi"}});
            s.provision(&[any_pool()], vec![p]);
            scheduled_on(s, "p1", "example-10")
        },
    );
    let mut add = |it, run: Body| add_prov(&mut out, it, default_types, run);
    add("should not schedule when limits are exceeded", |s| {
        // A NodeClaim of the pool, launched with 100 CPUs, not registered yet.
        s.extra.push(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "launched", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []},
            "status": {"capacity": {"cpu": "100"}}}));
        let p = bare(s);
        s.provision(&[limited_pool(json!({"cpu": "20"}))], vec![p]);
        not_scheduled(s, "p1")
    });
    add("should schedule if limits would be met", |s| {
        let p = sized(s, json!({"requests": {"cpu": "1.75"}}));
        s.provision(&[limited_pool(json!({"cpu": "2"}))], vec![p]);
        node(s, "p1").map(|_| ())
    });
    add(
        "should partially schedule if limits would be exceeded",
        |s| {
            let pods = vec![repelling(s), repelling(s)];
            s.provision(&[limited_pool(json!({"cpu": "3"}))], pods);
            let placed = ["p1", "p2"]
                .iter()
                .filter(|p| s.node_of(p).is_some())
                .count();
            ensure(
                placed == 1,
                format!("{placed} of 2 scheduled, Karpenter expects 1"),
            )
        },
    );
    add("should not schedule if limits would be exceeded", |s| {
        let p = sized(s, json!({"requests": {"cpu": "2.1"}}));
        s.provision(&[limited_pool(json!({"cpu": "2"}))], vec![p]);
        not_scheduled(s, "p1")
    });
    add(
        "should not schedule if limits would be exceeded (GPU)",
        |s| {
            let p = sized(s, json!({"limits": {"fake.com/vendor-a": "1"}}));
            s.provision(&[limited_pool(json!({"pods": "1"}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule to a nodepool after a scheduling round if limits would be exceeded",
        |s| {
            let pool = limited_pool(json!({"cpu": "2"}));
            let p = sized(s, json!({"requests": {"cpu": "1.75"}}));
            s.provision(std::slice::from_ref(&pool), vec![p]);
            node(s, "p1")?;
            let p = sized(s, json!({"requests": {"cpu": "1.75"}}));
            s.provision(&[pool], vec![p]);
            not_scheduled(s, "p2")
        },
    );
    add(
        "should not schedule if limits would be exceeded (node)",
        |s| {
            let pool = limited_pool(json!({"nodes": "2"}));
            for i in 1..=2 {
                let p = repelling(s);
                s.provision(std::slice::from_ref(&pool), vec![p]);
                node(s, &format!("p{i}"))?;
            }
            let p = repelling(s);
            s.provision(&[pool], vec![p]);
            not_scheduled(s, "p3")
        },
    );
    daemonsets(&mut out);
    labels_and_taints(&mut out);
    volume_topology(&mut out);
    preferential_fallback(&mut out);
    ignore_preferences(&mut out);
    multiple_nodepools(&mut out);
    static_nodepools(&mut out);
    min_values_policy(&mut out);
    out
}

/// The node `pod` is on has Karpenter's capacity `cpu` CPUs and `mem_gib` GiB (the type's).
fn capacity_is(s: &Session, pod: &str, cpu: f64, mem_gib: f64) -> Result<(), String> {
    let t = type_of(s, pod)?;
    let ft = s
        .types
        .iter()
        .find(|f| f.name == t)
        .ok_or(format!("{t} is not a catalog type"))?;
    ensure(
        ft.cpu == cpu && ft.mem_gib == mem_gib,
        format!(
            "{pod} on {t} ({} CPU, {} GiB), Karpenter expects {cpu} CPU and {mem_gib} GiB",
            ft.cpu, ft.mem_gib
        ),
    )
}

fn cpu_mem(cpu: &str, mem: &str) -> Value {
    json!({"cpu": cpu, "memory": mem})
}

/// A pending pod requesting 1 CPU and 1Gi (most `Daemonsets` Its).
fn one_one(s: &mut Session) -> Value {
    sized(s, json!({"requests": cpu_mem("1", "1Gi")}))
}

fn required(reqs: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": reqs}]}}}})
}

/// A DaemonSet whose pods use host port `port`.
fn ds_with_port(s: &mut Session, name: &str, requests: Value, port: i64, spec: Value) {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "pause", "resources": {"requests": requests},
        "ports": [{"containerPort": port, "hostPort": port}]}]);
    daemonset(s, name, json!({}), spec);
}

/// A pod of DaemonSet `ds` that exists but is not bound (`test.UnschedulablePod` owned by
/// it): its requests, not the template's, are what the DaemonSet costs a node.
fn daemon_pod(s: &mut Session, ds: &Value, requests: Value, spec: Value) -> Value {
    let mut p = sized(s, json!({ "requests": requests }));
    let name = ds["metadata"]["name"].as_str().unwrap_or_default();
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": name, "uid": ds["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    for (k, v) in spec.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

/// `Daemonsets` (lines 934–1526).
fn daemonsets(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should account for daemonsets", |s| {
        daemonset(s, "ds", cpu_mem("2", "2Gi"), json!({}));
        let p = one_one(s);
        s.provision(&[any_pool()], vec![p]);
        capacity_is(s, "p1", 4.0, 4.0)
    });
    add("should account for daemonset hostports", |s| {
        ds_with_port(s, "ds", cpu_mem("2", "2Gi"), 8080, json!({}));
        let mut p = one_one(s);
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080, "hostPort": 8080}]);
        s.provision(&[any_pool()], vec![p]);
        not_scheduled(s, "p1")?;
        nodes_launched(s, 0)
    });
    add("should account for daemonsets (with startup taint)", |s| {
        let mut pool = any_pool();
        pool["spec"]["template"]["spec"]["startupTaints"] =
            json!([{"key": "foo.com/taint", "effect": "NoSchedule"}]);
        daemonset(s, "ds", cpu_mem("2", "2Gi"), json!({}));
        let p = one_one(s);
        s.provision(&[pool], vec![p]);
        capacity_is(s, "p1", 4.0, 4.0)
    });
    add(
        "should not schedule if daemonset overhead is too large",
        |s| {
            daemonset(s, "ds", cpu_mem("10000", "10000Gi"), json!({}));
            let p = bare(s);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should account for overhead using daemonset pod spec instead of daemonset spec",
        |s| {
            let ds = daemonset(s, "ds", cpu_mem("4", "4Gi"), json!({}));
            let dp = daemon_pod(s, &ds, cpu_mem("2", "2Gi"), json!({}));
            s.extra.push(dp);
            let p = selecting(s, json!({"karpenter.sh/nodepool": "default"}));
            let mut p = p;
            p["spec"]["containers"][0]["resources"] = json!({"requests": cpu_mem("1", "1Gi")});
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p2", 4.0, 4.0)
        },
    );
    add(
        "should not schedule if resource requests are not defined and limits (requests) are too large",
        |s| {
            let p = sized(
                s,
                json!({"limits": cpu_mem("10000", "10000Gi"), "requests": {"cpu": "1"}}),
            );
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule based on the max resource requests of containers and initContainers",
        |s| {
            let mut p = sized(
                s,
                json!({"limits": cpu_mem("10000", "1Gi"), "requests": {"cpu": "1"}}),
            );
            p["spec"]["initContainers"] = json!([{"name": "init", "image": "pause",
                "resources": {"limits": cpu_mem("10000", "3Gi"), "requests": {"cpu": "3"}}}]);
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should not schedule if combined max resources are too large for any node",
        |s| {
            let mut p = sized(
                s,
                json!({"limits": cpu_mem("10000", "1Gi"), "requests": {"cpu": "1"}}),
            );
            p["spec"]["initContainers"] = json!([{"name": "init", "image": "pause",
                "resources": {"limits": cpu_mem("10000", "10000Gi"), "requests": {"cpu": "1"}}}]);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule if initContainer resources are too large",
        |s| {
            let mut p = bare(s);
            p["spec"]["initContainers"] = json!([{"name": "init", "image": "pause",
            "resources": {"requests": cpu_mem("10000", "10000Gi")}}]);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should be able to schedule pods if resource requests and limits are not defined",
        |s| {
            let p = bare(s);
            s.provision(&[any_pool()], vec![p]);
            node(s, "p1").map(|_| ())
        },
    );
    add(
        "should ignore daemonsets without matching tolerations",
        |s| {
            let mut pool = any_pool();
            pool["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "foo", "value": "bar", "effect": "NoSchedule"}]);
            daemonset(s, "ds", cpu_mem("2", "2Gi"), json!({}));
            let mut p = one_one(s);
            p["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
            s.provision(&[pool], vec![p]);
            capacity_is(s, "p1", 2.0, 2.0)
        },
    );
    add("should ignore daemonsets with an invalid selector", |s| {
        daemonset(
            s,
            "ds",
            cpu_mem("2", "2Gi"),
            json!({"nodeSelector": {"node": "invalid"}}),
        );
        let p = one_one(s);
        s.provision(&[any_pool()], vec![p]);
        capacity_is(s, "p1", 2.0, 2.0)
    });
    add(
        "should ignore daemonsets when no instance types meet the daemonset requirements",
        |s| {
            daemonset(
                s,
                "ds",
                cpu_mem("2", "2Gi"),
                required(json!([req(ITYPE, "In", &["non-existent-instance-type"])])),
            );
            let p = one_one(s);
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p1", 2.0, 2.0)
        },
    );
    add(
        "should account for daemonsets with a custom label nodeSelector that matches the nodepool",
        |s| {
            let mut pool = any_pool();
            pool["spec"]["template"]["metadata"] = json!({"labels": {"purpose": "monitoring"}});
            daemonset(
                s,
                "ds",
                cpu_mem("2", "2Gi"),
                json!({"nodeSelector": {"purpose": "monitoring"}}),
            );
            let p = one_one(s);
            s.provision(&[pool], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should filter out daemonsets based on instance type requirements",
        |s| {
            daemonset(
                s,
                "small",
                json!({"cpu": "1"}),
                required(json!([req("size", "In", &["small"])])),
            );
            daemonset(
                s,
                "large",
                json!({"cpu": "10"}),
                required(json!([req("size", "In", &["large"])])),
            );
            let p = one_one(s);
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should account daemonsets with NotIn operator and unspecified key",
        |s| {
            daemonset(
                s,
                "ds",
                cpu_mem("2", "2Gi"),
                required(json!([req("foo", "NotIn", &["bar"])])),
            );
            let p = requiring(s, json!([req(ZONE, "In", &["test-zone-2"])]));
            let mut p = p;
            p["spec"]["containers"][0]["resources"] = json!({"requests": cpu_mem("1", "1Gi")});
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should remove daemonset node hostname affinity when considering daemonset schedulability",
        |s| {
            let mut pool = any_pool();
            pool["spec"]["template"]["metadata"] = json!({"labels": {"foo": "bar"}});
            let ds = daemonset(
                s,
                "ds",
                cpu_mem("4", "4Gi"),
                required(json!([req("foo", "In", &["bar"])])),
            );
            // The DaemonSet controller pins each of its pods to a node by name.
            let dp = daemon_pod(
                s,
                &ds,
                cpu_mem("2", "2Gi"),
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["node-name"]}]}]}}}}),
            );
            s.extra.push(dp);
            let mut p = selecting(s, json!({"foo": "bar"}));
            p["spec"]["containers"][0]["resources"] = json!({"requests": cpu_mem("1", "1Gi")});
            s.provision(&[pool], vec![p]);
            capacity_is(s, "p2", 4.0, 4.0)
        },
    );
    add(
        "should consider a daemonset schedulable with multiple node affinity terms",
        |s| {
            let mut pool = any_pool();
            pool["spec"]["template"]["metadata"] = json!({"labels": {"foo": "bar"}});
            daemonset(
                s,
                "ds",
                cpu_mem("2", "2Gi"),
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [
                        {"matchExpressions": [req("foo", "In", &["voo"])]},
                        {"matchExpressions": [req("foo", "In", &["bar"])]}]}}}}),
            );
            let p = one_one(s);
            s.provision(&[pool], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should consider a daemonset schedulable with an incompatible node affinity preference",
        |s| {
            daemonset(
                s,
                "ds",
                cpu_mem("2", "2Gi"),
                json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [req("node", "In", &["invalid"])]}}]}}}),
            );
            let p = one_one(s);
            s.provision(&[any_pool()], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should consider a daemonset schedulable with a PreferNoSchedule taint",
        |s| {
            let mut pool = any_pool();
            pool["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "test", "effect": "PreferNoSchedule"}]);
            daemonset(s, "ds", cpu_mem("2", "2Gi"), json!({}));
            let p = one_one(s);
            s.provision(&[pool], vec![p]);
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
    add(
        "should not account for daemonset hostports when daemonset would not schedule on selected node",
        |s| {
            ds_with_port(
                s,
                "large",
                cpu_mem("4", "4Gi"),
                8080,
                required(json!([req("size", "In", &["large"])])),
            );
            ds_with_port(
                s,
                "small",
                cpu_mem("2", "2Gi"),
                8081,
                required(json!([req("size", "In", &["small"])])),
            );
            let mut p = requiring(s, json!([req("size", "In", &["small"])]));
            p["spec"]["containers"][0]["resources"] = json!({"requests": cpu_mem("1", "1Gi")});
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 8080, "hostPort": 8080}]);
            s.provision(&[any_pool()], vec![p]);
            let n = node(s, "p1")?;
            ensure(
                s.label_of(&n, "size").as_deref() == Some("small"),
                "on a small type",
            )?;
            capacity_is(s, "p1", 4.0, 4.0)
        },
    );
}

/// `Labels` and `Taints` (lines 1545–1693).
fn labels_and_taints(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should label nodes", |s| {
        let mut pool = nodepool(
            "default",
            vec![
                req("test-key-2", "In", &["test-value-2"]),
                req("test-key-3", "NotIn", &["test-value-3"]),
                req("test-key-4", "Lt", &["4"]),
                req("test-key-5", "Gt", &["5"]),
                json!({"key": "test-key-6", "operator": "Exists"}),
                json!({"key": "test-key-7", "operator": "DoesNotExist"}),
            ],
        );
        pool["spec"]["template"]["metadata"] = json!({"labels": {"test-key-1": "test-value-1"}});
        let p = bare(s);
        s.provision(&[pool], vec![p]);
        let n = node(s, "p1")?;
        let l = |k: &str| s.label_of(&n, k);
        ensure(
            l("karpenter.sh/nodepool").as_deref() == Some("default"),
            "nodepool label",
        )?;
        ensure(
            l("test-key-1").as_deref() == Some("test-value-1"),
            "test-key-1",
        )?;
        ensure(
            l("test-key-2").as_deref() == Some("test-value-2"),
            "test-key-2",
        )?;
        for (k, not) in [
            ("test-key-3", "test-value-3"),
            ("test-key-4", "test-value-4"),
            ("test-key-5", "test-value-5"),
        ] {
            let v = l(k);
            ensure(
                v.is_some() && v.as_deref() != Some(not),
                format!("{k}: {v:?}, Karpenter expects a value other than {not}"),
            )?;
        }
        ensure(l("test-key-6").is_some(), "test-key-6 set")?;
        ensure(l("test-key-7").is_none(), "test-key-7 not set")
    });
    for (it, prefix) in [
        (
            "should label nodes with labels in the kubernetes domains",
            "",
        ),
        (
            "should label nodes with labels in the subdomain from kubernetes domains",
            "subdomain.",
        ),
    ] {
        out.push(Scenario {
            file: PROVISIONING,
            it,
            run: Box::new(move |dir: &PathBuf| {
                for domain in ["kubernetes.io", "k8s.io"] {
                    let s = &mut Session::new(dir, default_types());
                    let key = format!("{prefix}{domain}/test");
                    let mut pool = any_pool();
                    pool["spec"]["template"]["metadata"] =
                        json!({"labels": { key.as_str(): "test-value" }});
                    let p = requiring(s, json!([req(&key, "In", &["test-value"])]));
                    s.provision(&[pool], vec![p]);
                    let n = node(s, "p1")?;
                    ensure(
                        s.label_of(&n, &key).as_deref() == Some("test-value"),
                        format!("{key} on the node"),
                    )?;
                }
                Ok(())
            }),
        });
    }
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add(
        "should not label nodes with well-known labels from requirements",
        |s| {
            let pool = nodepool(
                "default",
                vec![
                    req("foo", "In", &["bar"]),
                    req("node.kubernetes.io/windows-build", "NotIn", &["test-value"]),
                ],
            );
            let p = bare(s);
            s.provision(&[pool], vec![p]);
            let n = node(s, "p1")?;
            ensure(
                s.label_of(&n, "node.kubernetes.io/windows-build")
                    .as_deref()
                    != Some("test-value"),
                "no windows-build label of test-value",
            )?;
            ensure(s.label_of(&n, "foo").as_deref() == Some("bar"), "foo: bar")
        },
    );
    add("should schedule pods that tolerate taints", |s| {
        let mut pool = any_pool();
        pool["spec"]["template"]["spec"]["taints"] =
            json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]);
        let tolerations = [
            json!([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
            json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]),
            json!([{"operator": "Exists"}]),
        ];
        let pods = tolerations
            .iter()
            .map(|t| {
                let mut p = bare(s);
                p["spec"]["tolerations"] = t.clone();
                p
            })
            .collect();
        s.provision(&[pool], pods);
        for i in 1..=4 {
            node(s, &format!("p{i}"))?;
        }
        Ok(())
    });
}

/// The suite's StorageClass of `Volume Topology Requirements`: WaitForFirstConsumer, zones
/// test-zone-2 and test-zone-3.
fn zonal_class(s: &mut Session) {
    s.extra.push(storage_class(
        "sc",
        &["test-zone-2", "test-zone-3"],
        &[],
        Some("WaitForFirstConsumer"),
    ));
}

/// A pending pod with one generic ephemeral volume of class `sc` (its claim `<pod>-ephemeral-0`).
fn with_ephemeral(s: &mut Session) -> (Value, String) {
    let mut p = bare(s);
    p["spec"]["volumes"] = json!([{"name": "ephemeral-0", "ephemeral": {"volumeClaimTemplate": {
        "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}}}]);
    let claim = format!(
        "{}-ephemeral-0",
        p["metadata"]["name"].as_str().unwrap_or_default()
    );
    (p, claim)
}

fn in_zone(s: &Session, pod: &str, zone: &str) -> Result<(), String> {
    let n = node(s, pod)?;
    let z = s.label_of(&n, ZONE);
    ensure(
        z.as_deref() == Some(zone),
        format!("{pod} in {z:?}, Karpenter expects {zone}"),
    )
}

fn zones_req(zones: &[&str]) -> Value {
    json!([req(ZONE, "In", zones)])
}

/// `Volume Topology Requirements` (lines 1987–2386).
fn volume_topology(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should not schedule if invalid pvc", |s| {
        let p = with_claims(s, &["invalid"]);
        s.provision(&[any_pool()], vec![p]);
        not_scheduled(s, "p1")
    });
    add(
        "should schedule with an empty storage class if the pvc is bound",
        |s| {
            let mut v = volume("test-volume", json!({}), vec![]);
            v["spec"]["storageClassName"] = json!("");
            s.extra.push(v);
            s.extra.push(claim("data", Some(""), Some("test-volume")));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            node(s, "p1").map(|_| ())
        },
    );
    add(
        "should not schedule with an empty storage class if the pvc is not bound",
        |s| {
            s.extra.push(claim("data", Some(""), None));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule with a missing storage class if the pvc is bound",
        |s| {
            let mut v = volume("test-volume", json!({}), vec![]);
            v["spec"]["storageClassName"] = json!("missing-storage-class");
            s.extra.push(v);
            s.extra.push(claim(
                "data",
                Some("missing-storage-class"),
                Some("test-volume"),
            ));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            node(s, "p1").map(|_| ())
        },
    );
    add(
        "should not schedule with a missing storage class if the pvc is not bound",
        |s| {
            s.extra
                .push(claim("data", Some("missing-storage-class"), None));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule valid pods when a pod with an invalid pvc is encountered (pvc)",
        |s| {
            let bad = with_claims(s, &["invalid"]);
            s.provision(&[any_pool()], vec![bad.clone()]);
            let good = bare(s);
            s.provision(&[any_pool()], vec![bad, good]);
            not_scheduled(s, "p1")?;
            node(s, "p2").map(|_| ())
        },
    );
    add(
        "should schedule valid pods when a pod with an invalid pvc is encountered (storage class)",
        |s| {
            s.extra
                .push(claim("data", Some("invalid-storage-class"), None));
            let bad = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![bad.clone()]);
            let good = bare(s);
            s.provision(&[any_pool()], vec![bad, good]);
            not_scheduled(s, "p1")?;
            node(s, "p2").map(|_| ())
        },
    );
    add(
        "should schedule valid pods when a pod with an invalid pvc is encountered (volume name)",
        |s| {
            s.extra
                .push(claim("data", None, Some("invalid-volume-name")));
            let bad = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![bad.clone()]);
            let good = bare(s);
            s.provision(&[any_pool()], vec![bad, good]);
            not_scheduled(s, "p1")?;
            node(s, "p2").map(|_| ())
        },
    );
    add(
        "should schedule to storage class zones if volume does not exist",
        |s| {
            zonal_class(s);
            s.extra.push(claim("data", Some("sc"), None));
            let mut p = with_claims(s, &["data"]);
            p["spec"]["affinity"] =
                required(zones_req(&["test-zone-1", "test-zone-3"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            in_zone(s, "p1", "test-zone-3")
        },
    );
    add(
        "should schedule to storage class zones if volume does not exist (ephemeral volume)",
        |s| {
            zonal_class(s);
            let (mut p, c) = with_ephemeral(s);
            s.extra.push(claim(&c, Some("sc"), None));
            p["spec"]["affinity"] =
                required(zones_req(&["test-zone-1", "test-zone-3"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            in_zone(s, "p1", "test-zone-3")
        },
    );
    add(
        "should not schedule if storage class zones are incompatible",
        |s| {
            zonal_class(s);
            s.extra.push(claim("data", Some("sc"), None));
            let mut p = with_claims(s, &["data"]);
            p["spec"]["affinity"] = required(zones_req(&["test-zone-1"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule if storage class zones are incompatible (ephemeral volume)",
        |s| {
            zonal_class(s);
            let (mut p, c) = with_ephemeral(s);
            s.extra.push(claim(&c, Some("sc"), None));
            p["spec"]["affinity"] = required(zones_req(&["test-zone-1"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule to volume zones if volume already bound",
        |s| {
            zonal_class(s);
            s.extra
                .push(volume("pv", json!({}), vec![zone_term(&["test-zone-3"])]));
            s.extra.push(claim("data", Some("sc"), Some("pv")));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            in_zone(s, "p1", "test-zone-3")
        },
    );
    add(
        "should schedule to volume zones if volume already bound (ephemeral volume)",
        |s| {
            zonal_class(s);
            let (p, c) = with_ephemeral(s);
            s.extra
                .push(volume("pv", json!({}), vec![zone_term(&["test-zone-3"])]));
            s.extra.push(claim(&c, Some("sc"), Some("pv")));
            s.provision(&[any_pool()], vec![p]);
            in_zone(s, "p1", "test-zone-3")
        },
    );
    for (it, source, ephemeral) in [
        (
            "should ignore hostname affinity scheduling when using local path volumes (when using local volumes)",
            "local",
            false,
        ),
        (
            "should ignore hostname affinity scheduling when using local path volumes (when using hostpath volumes)",
            "hostPath",
            false,
        ),
        (
            "should ignore hostname affinity scheduling when using local path volumes (ephemeral volume) (when using local volumes)",
            "local",
            true,
        ),
        (
            "should ignore hostname affinity scheduling when using local path volumes (ephemeral volume) (when using hostpath volumes)",
            "hostPath",
            true,
        ),
    ] {
        out.push(Scenario {
            file: PROVISIONING,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let mut sc = storage_class("local-path", &[], &[], None);
                sc["provisioner"] = json!("kubernetes.io/no-provisioner");
                s.extra.push(sc);
                s.extra.push(volume(
                    "pv",
                    json!({ source: {"path": "/mnt/local-disks"} }),
                    vec![json!({"matchExpressions": [req("kubernetes.io/hostname", "In", &["some-other-node"])]})],
                ));
                let p = if ephemeral {
                    let (mut p, c) = with_ephemeral(s);
                    p["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"]
                        ["storageClassName"] = json!("local-path");
                    s.extra.push(claim(&c, Some("local-path"), Some("pv")));
                    p
                } else {
                    s.extra.push(claim("data", Some("local-path"), Some("pv")));
                    with_claims(s, &["data"])
                };
                s.provision(&[any_pool()], vec![p]);
                node(s, "p1").map(|_| ())
            }),
        });
    }
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add(
        "should not ignore hostname affinity when using non-local path volumes",
        |s| {
            zonal_class(s);
            s.extra.push(volume(
                "pv",
                json!({}),
                vec![json!({"matchExpressions": [req("kubernetes.io/hostname", "In", &["some-other-node"])]})],
            ));
            s.extra.push(claim("data", Some("sc"), Some("pv")));
            let p = with_claims(s, &["data"]);
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule if volume zones are incompatible",
        |s| {
            zonal_class(s);
            s.extra
                .push(volume("pv", json!({}), vec![zone_term(&["test-zone-3"])]));
            s.extra.push(claim("data", Some("sc"), Some("pv")));
            let mut p = with_claims(s, &["data"]);
            p["spec"]["affinity"] = required(zones_req(&["test-zone-1"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule if volume zones are incompatible (ephemeral volume)",
        |s| {
            zonal_class(s);
            let (mut p, c) = with_ephemeral(s);
            s.extra
                .push(volume("pv", json!({}), vec![zone_term(&["test-zone-3"])]));
            s.extra.push(claim(&c, Some("sc"), Some("pv")));
            p["spec"]["affinity"] = required(zones_req(&["test-zone-1"]))["affinity"].clone();
            s.provision(&[any_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not relax an added volume topology zone node-selector away",
        |s| {
            zonal_class(s);
            s.extra
                .push(volume("pv", json!({}), vec![zone_term(&["test-zone-3"])]));
            s.extra.push(claim("data", Some("sc"), Some("pv")));
            let mut p = with_claims(s, &["data"]);
            p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [req("example.com/label", "In", &["unsupported"])]},
                    {"matchExpressions": [req(CT, "In", &["on-demand"])]}]}}});
            s.provision(&[any_pool()], vec![p]);
            in_zone(s, "p1", "test-zone-3")
        },
    );
}

fn zone_terms(zones: &[&str]) -> Value {
    let terms: Vec<Value> = zones
        .iter()
        .map(|z| json!({"matchExpressions": [req(ZONE, "In", &[z])]}))
        .collect();
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
}

fn preferring(prefs: Vec<(i64, &str, &str)>) -> Value {
    let terms: Vec<Value> = prefs
        .iter()
        .map(|(w, k, v)| json!({"weight": w, "preference": {"matchExpressions": [req(k, "In", &[v])]}}))
        .collect();
    json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
}

/// `Preferential Fallback` (lines 2387–2561).
fn preferential_fallback(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should not relax the final term", |s| {
        let mut p = bare(s);
        p["spec"]["affinity"] = zone_terms(&["invalid"]);
        let pool = nodepool("default", vec![req(ZONE, "In", &["test-zone-1"])]);
        s.provision(&[pool], vec![p]);
        not_scheduled(s, "p1")
    });
    add("should relax multiple terms", |s| {
        let mut p = bare(s);
        p["spec"]["affinity"] = zone_terms(&["invalid", "invalid", "test-zone-1", "test-zone-2"]);
        s.provision(&[any_pool()], vec![p]);
        in_zone(s, "p1", "test-zone-1")
    });
    add("should relax all node affinity terms", |s| {
        let mut p = bare(s);
        p["spec"]["affinity"] = preferring(vec![(1, ZONE, "invalid"), (1, ITYPE, "invalid")]);
        s.provision(&[any_pool()], vec![p]);
        node(s, "p1").map(|_| ())
    });
    add("should relax to use lighter weights", |s| {
        let mut p = bare(s);
        p["spec"]["affinity"] = preferring(vec![
            (100, ITYPE, "test-zone-3"),
            (50, ZONE, "test-zone-2"),
            (1, ZONE, "test-zone-1"),
        ]);
        let pool = nodepool(
            "default",
            vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])],
        );
        s.provision(&[pool], vec![p]);
        in_zone(s, "p1", "test-zone-2")
    });
    add(
        "should tolerate PreferNoSchedule taint only after trying to relax Affinity terms",
        |s| {
            let mut p = bare(s);
            p["spec"]["affinity"] = preferring(vec![(1, ZONE, "invalid"), (1, ITYPE, "invalid")]);
            let mut pool = any_pool();
            pool["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}]);
            s.provision(&[pool], vec![p]);
            let n = node(s, "p1")?;
            let tainted = s
                .nodes
                .iter()
                .find(|x| x["metadata"]["name"] == n.as_str())
                .and_then(|x| x["spec"]["taints"].as_array())
                .is_some_and(|t| {
                    t.iter().any(|t| {
                        t["key"] == "foo"
                            && t["value"] == "bar"
                            && t["effect"] == "PreferNoSchedule"
                    })
                });
            ensure(tainted, "the node carries foo=bar:PreferNoSchedule")
        },
    );
    for (it, key) in [
        (
            "should ignore node preferredDuringSchedulingIgnoredDuringExecution affinity (topology.kubernetes.io/zone)",
            ZONE,
        ),
        (
            "should ignore node preferredDuringSchedulingIgnoredDuringExecution affinity (kubernetes.io/hostname)",
            "kubernetes.io/hostname",
        ),
    ] {
        out.push(Scenario {
            file: PROVISIONING,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let mut a = sized(s, json!({"requests": {"cpu": "2"}}));
                a["metadata"]["labels"] = json!({"app": "foo"});
                let mut b = sized(s, json!({"requests": {"cpu": "1"}}));
                b["metadata"]["labels"] = json!({"app": "baz"});
                b["spec"]["affinity"] = preferring(vec![(1, key, "value-1")]);
                s.provision(&[any_pool()], vec![a, b]);
                let (na, nb) = (node(s, "p1")?, node(s, "p2")?);
                ensure(
                    na == nb,
                    format!("p1 on {na}, p2 on {nb}: Karpenter expects one node"),
                )
            }),
        });
    }
}

/// The zone-1 pod (2 CPU), two zone-2 pods (3 CPU each) and a 1-CPU pod whose only pull
/// toward zone 2 is a preference (`pref`, a pod affinity or node affinity): with preferences
/// ignored it joins the node with fewer pods, the zone-1 pod's.
fn ignored_pull(s: &mut Session, pref: Value) -> Result<(), String> {
    s.flags = vec!["--preference-policy".into(), "Ignore".into()];
    let mut z1 = selecting(s, json!({ ZONE: "test-zone-1" }));
    z1["metadata"]["labels"] = json!({"app": "foo"});
    z1["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "2"}});
    let mut pods = vec![z1];
    for _ in 0..2 {
        let mut z2 = selecting(s, json!({ ZONE: "test-zone-2" }));
        z2["metadata"]["labels"] = json!({"app": "bar"});
        z2["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "3"}});
        pods.push(z2);
    }
    let mut a = sized(s, json!({"requests": {"cpu": "1"}}));
    a["metadata"]["labels"] = json!({"app": "baz"});
    a["spec"]["affinity"] = pref;
    pods.push(a);
    s.provision(&[any_pool()], pods);
    let (n1, n2, _, na) = (
        node(s, "p1")?,
        node(s, "p2")?,
        node(s, "p3")?,
        node(s, "p4")?,
    );
    ensure(
        na == n1 && na != n2,
        format!("p4 on {na}; Karpenter expects the zone-1 pod's node {n1}, not {n2}"),
    )
}

/// Five pods of app foo with a soft `constraint` among each other, preferences ignored: one node.
fn five_on_one(
    s: &mut Session,
    affinity: Option<Value>,
    spread: Option<Value>,
) -> Result<(), String> {
    s.flags = vec!["--preference-policy".into(), "Ignore".into()];
    let pods = (0..5)
        .map(|_| {
            let mut p = bare(s);
            p["metadata"]["labels"] = json!({"app": "foo"});
            if let Some(a) = &affinity {
                p["spec"]["affinity"] = a.clone();
            }
            if let Some(c) = &spread {
                p["spec"]["topologySpreadConstraints"] = json!([c]);
            }
            p
        })
        .collect();
    s.provision(&[any_pool()], pods);
    on_distinct_nodes(s, &["p1", "p2", "p3", "p4", "p5"], 1)
}

/// `Ignore Preferences` (lines 2562–2770), under `--preference-policy Ignore`.
fn ignore_preferences(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should ignore node affinity preferences", |s| {
        ignored_pull(s, preferring(vec![(1, ZONE, "test-zone-2")]))
    });
    for key in [ZONE, "kubernetes.io/hostname"] {
        let spread_it: &'static str = if key == ZONE {
            "should ignore topologySpreadConstraint preferences (topology.kubernetes.io/zone)"
        } else {
            "should ignore topologySpreadConstraint preferences (kubernetes.io/hostname)"
        };
        let anti_it: &'static str = if key == ZONE {
            "should ignore pod anti-affinity preferences (topology.kubernetes.io/zone)"
        } else {
            "should ignore pod anti-affinity preferences (kubernetes.io/hostname)"
        };
        let affinity_it: &'static str = if key == ZONE {
            "should ignore pod affinity preferences (topology.kubernetes.io/zone)"
        } else {
            "should ignore pod affinity preferences (kubernetes.io/hostname)"
        };
        out.push(Scenario {
            file: PROVISIONING,
            it: spread_it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let c = json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "foo"}}});
                five_on_one(s, None, Some(c))
            }),
        });
        out.push(Scenario {
            file: PROVISIONING,
            it: anti_it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let a = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": key,
                        "labelSelector": {"matchLabels": {"app": "foo"}}}}]}});
                five_on_one(s, Some(a), None)
            }),
        });
        out.push(Scenario {
            file: PROVISIONING,
            it: affinity_it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let a = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": key,
                        "labelSelector": {"matchLabels": {"app": "bar"}}}}]}});
                ignored_pull(s, a)
            }),
        });
    }
}

fn pool_label(s: &Session, pod: &str) -> Result<String, String> {
    let n = node(s, pod)?;
    s.label_of(&n, "karpenter.sh/nodepool")
        .ok_or(format!("{n} has no nodepool label"))
}

fn weighted(name: &str, weight: Option<i64>) -> Value {
    let mut p = nodepool(name, vec![]);
    if let Some(w) = weight {
        p["spec"]["weight"] = json!(w);
    }
    p
}

/// `Multiple NodePools` (lines 2772–2846).
fn multiple_nodepools(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should schedule to an explicitly selected NodePool", |s| {
        let p = selecting(s, json!({"karpenter.sh/nodepool": "chosen"}));
        s.provision(
            &[weighted("chosen", None), weighted("other", None)],
            vec![p],
        );
        let got = pool_label(s, "p1")?;
        ensure(got == "chosen", format!("from {got}"))
    });
    add("should schedule to a NodePool by labels", |s| {
        let mut a = weighted("labelled", None);
        a["spec"]["template"]["metadata"] = json!({"labels": {"foo": "bar"}});
        let p = selecting(s, json!({"foo": "bar"}));
        s.provision(&[a, weighted("other", None)], vec![p]);
        let got = pool_label(s, "p1")?;
        ensure(got == "labelled", format!("from {got}"))
    });
    add(
        "should not match NodePool with PreferNoSchedule taint when other NodePool match",
        |s| {
            let mut a = weighted("tainted", None);
            a["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}]);
            let p = bare(s);
            s.provision(&[a, weighted("other", None)], vec![p]);
            let got = pool_label(s, "p1")?;
            ensure(got != "tainted", format!("from {got}"))
        },
    );
    add(
        "should schedule to the nodepool with the highest priority always",
        |s| {
            let pools = [
                weighted("a", None),
                weighted("b", Some(20)),
                weighted("c", Some(100)),
            ];
            let pods = (0..3).map(|_| bare(s)).collect();
            s.provision(&pools, pods);
            for p in ["p1", "p2", "p3"] {
                let got = pool_label(s, p)?;
                ensure(got == "c", format!("{p} from {got}, Karpenter expects c"))?;
            }
            Ok(())
        },
    );
    add(
        "should schedule to explicitly selected nodepool even if other nodePools are higher priority",
        |s| {
            let pools = [
                weighted("target", None),
                weighted("b", Some(20)),
                weighted("c", Some(100)),
            ];
            let p = selecting(s, json!({"karpenter.sh/nodepool": "target"}));
            s.provision(&pools, vec![p]);
            let got = pool_label(s, "p1")?;
            ensure(got == "target", format!("from {got}"))
        },
    );
}

/// `test.StaticNodePool()`: `spec.replicas` set.
fn static_pool(name: &str, replicas: i64) -> Value {
    let mut p = nodepool(name, vec![]);
    p["spec"]["replicas"] = json!(replicas);
    p
}

/// `StaticNodePool` (lines 2847–2874).
fn static_nodepools(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_prov(out, it, default_types, run);
    add("should not create NodeClaims for StaticNodePool", |s| {
        let p = bare(s);
        s.provision(&[static_pool("static", 2)], vec![p]);
        not_scheduled(s, "p1")
    });
    add(
        "should still provision dynamic NodeClaims when there are both Static and Dynamic NodePools",
        |s| {
            let p = bare(s);
            s.provision(&[any_pool(), static_pool("static", 1)], vec![p]);
            let got = pool_label(s, "p1")?;
            ensure(got == "default", format!("from {got}"))
        },
    );
}

/// Two (or, with `second_zone`, one) 4-CPU arm64 types at $0.52, spot, each in one zone
/// (`with instance type requirements`) — or one type in two zones (`with zone requirements`).
fn two_spot_types() -> Vec<FakeType> {
    vec![
        FakeType::new("instance-type-1", "arm64", 4.0, 4.0).offering(
            "spot",
            "test-zone-1-spot",
            0.52,
        ),
        FakeType::new("instance-type-2", "arm64", 4.0, 4.0).offering(
            "spot",
            "test-zone-2-spot",
            0.52,
        ),
    ]
}

fn one_type_two_zones() -> Vec<FakeType> {
    vec![
        FakeType::new("instance-type-1", "arm64", 4.0, 4.0)
            .offering("spot", "test-zone-1", 0.52)
            .offering("spot", "test-zone-2", 0.54),
    ]
}

/// A NodePool requiring `key In values` with `minValues: 3`, of `weight`.
fn min_values_pool(name: &str, weight: i64, reqs: &[(&str, bool)]) -> Value {
    let values = |key: &str| -> Vec<&str> {
        if key == ITYPE {
            vec!["instance-type-1", "instance-type-2", "instance-type-3"]
        } else {
            vec!["test-zone-1", "test-zone-2", "test-zone-3"]
        }
    };
    let terms = reqs
        .iter()
        .map(|(key, min)| {
            let mut r = json!({"key": key, "operator": "In", "values": values(key)});
            if *min {
                r["minValues"] = json!(3);
            }
            r
        })
        .collect();
    let mut p = nodepool(name, terms);
    p["spec"]["weight"] = json!(weight);
    p
}

fn best_effort(s: &mut Session) {
    s.flags = vec!["--min-values-policy".into(), "BestEffort".into()];
}

/// The first NodeClaim's relaxed mark and minValues for `key`.
fn relaxed(o: &Outcome, key: &str, min: u64) -> Result<(), String> {
    let c = o.claims().first().ok_or("no NodeClaim")?;
    ensure(
        c["annotations"]["karpenter.sh/nodeclaim-min-values-relaxed"] == "true",
        format!("not marked relaxed: {}", c["annotations"]),
    )?;
    ensure(
        c["min_values"][key] == min,
        format!(
            "minValues {} for {key}, Karpenter expects {min}",
            c["min_values"]
        ),
    )
}

fn small_pod(s: &mut Session) -> Value {
    sized(s, json!({"requests": {"cpu": "0.9", "memory": "0.9Gi"}}))
}

/// `MinValuesPolicy` (lines 2876–3414), with `--min-values-policy`.
fn min_values_policy(out: &mut Vec<Scenario>) {
    let mut add = |it, types: fn() -> Vec<FakeType>, run: Body| add_prov(out, it, types, run);
    add(
        "should not schedule when minValues requirement is not met",
        two_spot_types,
        |s| {
            let p = small_pod(s);
            s.provision(
                &[min_values_pool("default", 100, &[(ITYPE, true)])],
                vec![p],
            );
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule even when minValues requirement is not met",
        two_spot_types,
        |s| {
            best_effort(s);
            let p = small_pod(s);
            let o = s.provision(
                &[min_values_pool("default", 100, &[(ITYPE, true)])],
                vec![p],
            );
            scheduled_on(s, "p1", "instance-type-1")?;
            relaxed(&o, ITYPE, 2)?;
            let opts = &o.claims()[0]["instance_type_options"];
            ensure(
                *opts == json!(["instance-type-1", "instance-type-2"]),
                format!("options {opts}"),
            )
        },
    );
    add(
        "should relax minValues before falling back to other nodepools",
        two_spot_types,
        |s| {
            best_effort(s);
            let p = small_pod(s);
            let o = s.provision(
                &[
                    min_values_pool("default", 100, &[(ITYPE, true)]),
                    min_values_pool("no-min-values", 10, &[(ITYPE, false)]),
                ],
                vec![p],
            );
            scheduled_on(s, "p1", "instance-type-1")?;
            let got = pool_label(s, "p1")?;
            ensure(got == "default", format!("from {got}"))?;
            relaxed(&o, ITYPE, 2)
        },
    );
    add(
        "should choose nodepool with higher weight when relaxing minValues",
        two_spot_types,
        |s| {
            best_effort(s);
            let p = small_pod(s);
            let o = s.provision(
                &[
                    min_values_pool("default", 100, &[(ITYPE, true)]),
                    min_values_pool("lower", 10, &[(ITYPE, true)]),
                ],
                vec![p],
            );
            scheduled_on(s, "p1", "instance-type-1")?;
            let got = pool_label(s, "p1")?;
            ensure(got == "default", format!("from {got}"))?;
            relaxed(&o, ITYPE, 2)
        },
    );
    add(
        "should not schedule when zone minValues requirement is not met",
        one_type_two_zones,
        |s| {
            let p = small_pod(s);
            s.provision(&[min_values_pool("default", 0, &[(ZONE, true)])], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule even when zone minValues requirement is not met",
        one_type_two_zones,
        |s| {
            best_effort(s);
            let p = small_pod(s);
            let o = s.provision(&[min_values_pool("default", 0, &[(ZONE, true)])], vec![p]);
            scheduled_on(s, "p1", "instance-type-1")?;
            let n = node(s, "p1")?;
            let zone = s.label_of(&n, ZONE).unwrap_or_default();
            ensure(
                zone == "test-zone-1" || zone == "test-zone-2",
                format!("in {zone}"),
            )?;
            relaxed(&o, ZONE, 2)
        },
    );
    add(
        "should schedule when minValues requirement is not met",
        one_type_two_zones,
        |s| {
            best_effort(s);
            let p = small_pod(s);
            let o = s.provision(
                &[min_values_pool(
                    "default",
                    100,
                    &[(ITYPE, true), (ZONE, true)],
                )],
                vec![p],
            );
            scheduled_on(s, "p1", "instance-type-1")?;
            relaxed(&o, ITYPE, 1)?;
            relaxed(&o, ZONE, 2)
        },
    );
}
