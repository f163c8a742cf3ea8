use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

fn catalog() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../model/data/aws-instance-types-us-east-1.json"
    )
    .to_string()
}

fn tmp(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn pod(name: &str, cpu: &str, mem: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"] = json!({"phase": "Running"});
    }
    p
}

fn capstan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_places_every_pending_pod_once_and_prices_the_plan() {
    let pods: Vec<Value> = (0..12)
        .map(|i| pod(&format!("web-{i}"), "500m", "1Gi", None))
        .collect();
    let f = tmp(
        "pods.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    );
    let out = capstan(&[
        "plan",
        "--pods",
        f.to_str().unwrap(),
        "--catalog",
        &catalog(),
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["strategy"], "default");
    let mut seen: Vec<String> = v["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
        })
        .collect();
    seen.sort();
    assert_eq!(seen.len(), 12);
    seen.dedup();
    assert_eq!(seen.len(), 12);
    let total: f64 = v["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["price_usd_per_hour"].as_f64().unwrap())
        .sum();
    assert!((total - v["total_price_usd_per_hour"].as_f64().unwrap()).abs() < 1e-6);
    assert!(v["lower_bound_usd_per_hour"].as_f64().unwrap() <= total + 1e-9);
    for c in v["nodeclaims"].as_array().unwrap() {
        assert_eq!(c["capacity_type"], "on-demand");
        assert!(
            c["instance_type_options"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| *t == c["instance_type"])
        );
    }
}

#[test]
fn plan_uses_existing_nodes_from_the_cluster_first() {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-1", "labels": {
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a",
        "node.kubernetes.io/instance-type": "m7i.xlarge"}},
        "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"}, "conditions": [{"type": "Ready", "status": "True"}]}});
    let cluster = json!({"apiVersion": "v1", "kind": "List", "items": [node, pod("api-0", "1", "2Gi", Some("ip-10-0-0-1")), pod("web-9", "1", "1Gi", None)]});
    let c = tmp("cluster.json", &cluster.to_string());
    let p = tmp("pending.json", &json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "1", "1Gi", None), pod("big-1", "8", "16Gi", None)]}).to_string());
    let out = capstan(&[
        "plan",
        "--pods",
        p.to_str().unwrap(),
        "--cluster",
        c.to_str().unwrap(),
        "--catalog",
        &catalog(),
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let existing = &v["existing"][0];
    assert_eq!(existing["node"], "ip-10-0-0-1");
    assert_eq!(
        existing["pods"].as_array().unwrap().len(),
        2,
        "web-1 and the cluster's pending web-9 fit the free 2.9 CPU: {v:#}"
    );
    assert_eq!(
        v["nodeclaims"].as_array().unwrap().len(),
        1,
        "the 8-CPU pod needs a new node"
    );
}

#[test]
fn a_pod_that_fits_nowhere_is_unschedulable_with_a_reason() {
    let p = tmp(
        "huge.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [pod("huge-1", "2048", "1Gi", None)]})
            .to_string(),
    );
    let out = capstan(&[
        "plan",
        "--pods",
        p.to_str().unwrap(),
        "--catalog",
        &catalog(),
        "--output",
        "json",
    ]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["unschedulable"][0]["pod"], "default/huge-1");
    let reason = v["unschedulable"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("no instance type has enough cpu: needs 2048"),
        "{reason}"
    );
}

#[test]
fn bad_plan_input_exits_2_with_one_line() {
    let p = tmp(
        "bad.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "12x", "1Gi", None)]})
            .to_string(),
    );
    let out = capstan(&[
        "plan",
        "--pods",
        p.to_str().unwrap(),
        "--catalog",
        &catalog(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.json: pod default/web-1: spec.containers[0].resources.requests.cpu: invalid quantity \"12x\""), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let good = tmp(
        "one.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "1", "1Gi", None)]})
            .to_string(),
    );
    let out = capstan(&[
        "plan",
        "--pods",
        good.to_str().unwrap(),
        "--catalog",
        &catalog(),
        "--strategy",
        "magic",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = capstan(&[
        "plan",
        "--pods",
        good.to_str().unwrap(),
        "--catalog",
        "/nonexistent/catalog.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn karpenter_nodepool_manifests_plan_with_their_requirements() {
    let np = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: arm}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [arm64]}\n      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m7g, c7g]}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec: {}\n";
    let npf = tmp("np.yaml", np);
    let p = tmp(
        "arm.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "1", "1Gi", None)]})
            .to_string(),
    );
    let out = capstan(&[
        "plan",
        "--pods",
        p.to_str().unwrap(),
        "--catalog",
        &catalog(),
        "--nodepool",
        npf.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = v["nodeclaims"][0]["instance_type"].as_str().unwrap();
    assert!(t.starts_with("m7g.") || t.starts_with("c7g."), "{t}");
    assert_eq!(v["nodeclaims"][0]["nodepool"], "arm");
    assert!(String::from_utf8_lossy(&out.stderr).contains("EC2NodeClass default: skipped"));
}

#[test]
fn bench_packing_reports_every_strategy_on_every_set() {
    let dir = std::env::temp_dir().join(format!("capstan-sets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pods: Vec<Value> = (0..20)
        .map(|i| pod(&format!("web-{i}"), "250m", "512Mi", None))
        .collect();
    std::fs::write(
        dir.join("tiny.json"),
        json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    )
    .unwrap();
    let out = capstan(&[
        "bench",
        "packing",
        "--sets",
        dir.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["set"], "tiny");
        assert_eq!(r["pods"], 20);
        assert!(r["ratio_to_bound"].as_f64().unwrap() >= 1.0 - 1e-9, "{r}");
        for k in [
            "nodes",
            "price_usd_per_hour",
            "lower_bound_usd_per_hour",
            "solve_ms",
        ] {
            assert!(r[k].is_number(), "{k}");
        }
    }
    let optimal = rows.iter().find(|r| r["strategy"] == "optimal").unwrap();
    assert_eq!(optimal["gap"], 0.0);
}

fn res_pod(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": resources}]}})
}

#[test]
fn pods_kubernetes_would_refuse_and_files_without_pods_exit_2_with_one_line_naming_them() {
    // (file name, body, what the one line says)
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "negative.json",
            res_pod("neg", json!({"requests": {"cpu": "-1"}})).to_string(),
            "negative.json: pod default/neg: spec.containers[0].resources.requests.cpu: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
        (
            "over-limit.json",
            res_pod("over", json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})).to_string(),
            "over-limit.json: pod default/over: spec.containers[0].resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
        ),
        (
            "gpu.json",
            res_pod("gpu", json!({"requests": {"nvidia.com/gpu": "1.5"}, "limits": {"nvidia.com/gpu": "1.5"}})).to_string(),
            "gpu.json: pod default/gpu: spec.containers[0].resources.limits.nvidia.com/gpu: Invalid value: \"1.5\": must be an integer",
        ),
        (
            "hugepages.json",
            res_pod("huge", json!({"limits": {"hugepages-2Mi": "128Mi"}})).to_string(),
            "hugepages.json: pod default/huge: spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
        ),
        ("empty.json", String::new(), "empty.json: no pods in"),
        (
            "nodepool.yaml",
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {template: {spec: {requirements: []}}}\n".into(),
            "nodepool.yaml: no pods in",
        ),
        (
            "mixed.json",
            json!({"apiVersion": "v1", "kind": "PodList", "items": [
                {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}},
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}]})
            .to_string(),
            "mixed.json: PodList item 1 (n): kind Node in a PodList",
        ),
    ];
    for (name, body, says) in cases {
        let f = tmp(name, &body);
        let out = capstan(&["plan", "--pods", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
    }
}

#[test]
fn a_pod_list_whose_items_omit_kind_is_planned_and_an_empty_list_is_an_empty_plan_at_zero() {
    let items = json!({"apiVersion": "v1", "kind": "PodList", "items": [
        {"metadata": {"name": "a", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}]});
    let f = tmp("kindless.json", &items.to_string());
    let out = capstan(&["plan", "--pods", f.to_str().unwrap(), "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["nodeclaims"].as_array().unwrap().len(), 1, "{plan}");
    // What `kubectl get pods -o json` prints when nothing is pending.
    let empty = tmp(
        "none.json",
        r#"{"apiVersion":"v1","kind":"List","items":[]}"#,
    );
    for output in ["table", "json"] {
        let out = capstan(&[
            "plan",
            "--pods",
            empty.to_str().unwrap(),
            "--output",
            output,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("-0.0"), "no negative zero: {text}");
    }
}

#[test]
fn a_reason_compares_amounts_in_one_unit() {
    let f = tmp(
        "huge-cpu.json",
        &res_pod("big", json!({"requests": {"cpu": "100000"}})).to_string(),
    );
    let out = capstan(&["plan", "--pods", f.to_str().unwrap(), "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = plan["unschedulable"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("needs 100000, largest offers ") && !reason.ends_with('m'),
        "{reason}"
    );
}

#[test]
fn bad_files_for_every_command_that_reads_one_exit_2_with_one_line_and_never_panic() {
    let garbage: String = (0..2000u32)
        .map(|i| char::from_u32(0x20 + (i.wrapping_mul(2_654_435_761) % 0x5e)).unwrap())
        .collect();
    let none = tmp(
        "no-pods.json",
        r#"{"apiVersion":"v1","kind":"List","items":[]}"#,
    );
    let none = none.to_str().unwrap();
    // (command before the file, command after it, file body)
    let cases: Vec<(Vec<&str>, Vec<&str>, String)> = vec![
        (vec!["plan", "--pods"], vec![], garbage.clone()),
        (vec!["plan", "--pods"], vec![], "{\"kind\": \"PodList\", \"items\": [".into()),
        (vec!["plan", "--cluster"], vec!["--pods", none], "kind: List\nitems: 5\n".into()),
        (vec!["plan", "--nodepool"], vec!["--pods", none], garbage.clone()),
        (vec!["plan", "--nodepool"], vec!["--pods", none], "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {template: {spec: {requirements: [{key: a, operator: Gt, values: [x]}]}}}\n".into()),
        (vec!["plan", "--catalog"], vec!["--pods", none], garbage.clone()),
        (vec!["plan", "--catalog"], vec!["--pods", none], "{\"instance_types\": [{\"name\": 1}]}".into()),
        (vec!["consolidate", "--cluster"], vec![], garbage.clone()),
        (vec!["consolidate", "--cluster"], vec![], "".into()),
        (vec!["consolidate", "--cluster"], vec![], "{\"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"n\"}}, {\"apiVersion\": \"karpenter.sh/v1\", \"kind\": \"NodeClaim\", \"metadata\": {\"name\": \"c\"}, \"spec\": {\"expireAfter\": \"soon\"}}]}".into()),
        (vec!["simulate", "--scenario"], vec!["--out", "/tmp/capstan-it-bad-scenario"], garbage.clone()),
        (vec!["simulate", "--scenario"], vec!["--out", "/tmp/capstan-it-bad-scenario"], "name: x\nduration: forever\n".into()),
        (vec!["hpa", "decide"], vec![], garbage.clone()),
        (vec!["hpa", "decide"], vec![], "{\"spec\": {}, \"currentReplicas\": -1}".into()),
        (vec!["cloud", "check", "--config"], vec![], garbage.clone()),
        (vec!["cloud", "check", "--config"], vec![], "seed: x\n".into()),
    ];
    for (i, (before, after, body)) in cases.into_iter().enumerate() {
        let f = tmp(&format!("bad-{i}.txt"), &body);
        let mut args = before.clone();
        args.push(f.to_str().unwrap());
        args.extend(after.iter().copied());
        let out = capstan(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "case {i} {before:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "case {i} {before:?}: {err}"
        );
        assert!(!err.contains("panicked"), "case {i}: {err}");
        assert!(
            err.contains(&format!("bad-{i}.txt")),
            "case {i}: the line names the file: {err}"
        );
    }
}

/// Karpenter v1 dropped the defaulting of capacity type, architecture and OS: a NodePool that
/// says nothing about them allows every value, so a migrated spot or Graviton pool stays one.
/// The built-in pool (no `--nodepool`) keeps its documented amd64, linux, on-demand.
#[test]
fn a_nodepool_file_that_leaves_capacity_type_and_arch_open_plans_spot_and_any_arch() {
    let open = tmp(
        "open.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: open}\nspec:\n  template:\n    spec:\n      requirements:\n      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i, m7g]}\n",
    );
    let pods: Vec<Value> = (0..4)
        .map(|i| pod(&format!("web-{i}"), "1", "2Gi", None))
        .collect();
    let p = tmp(
        "open-pods.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    );
    let plan = |extra: &[&str]| -> Value {
        let mut args = vec!["plan", "--pods", p.to_str().unwrap(), "--output", "json"];
        args.extend_from_slice(extra);
        let out = capstan(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let open_plan = plan(&["--nodepool", open.to_str().unwrap()]);
    let claims = open_plan["nodeclaims"].as_array().unwrap();
    assert!(!claims.is_empty());
    for c in claims {
        assert_eq!(c["capacity_type"], "spot", "{c}");
    }
    let builtin = plan(&[]);
    for c in builtin["nodeclaims"].as_array().unwrap() {
        assert_eq!(c["capacity_type"], "on-demand", "{c}");
        // Graviton families carry a `g` after their generation (m7g, c6gd, x2gd).
        let family = c["instance_type"]
            .as_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap();
        let after_generation = family.trim_start_matches(|ch: char| ch.is_ascii_lowercase());
        assert!(
            !after_generation.contains('g'),
            "the built-in pool is amd64: {c}"
        );
    }
}

/// Karpenter's `spot.yaml` NodePool (spot only) plans spot nodes priced from a
/// `describe-spot-price-history` file, the newest price per pool winning; without the file it
/// plans on estimates and says so; a bad price is exit 2 naming the entry.
#[test]
fn a_spot_only_nodepool_plans_on_the_spot_price_file_or_on_estimates_it_names() {
    let spot_pool = tmp(
        "spot.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: spot}\nspec:\n  template:\n    spec:\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      - {key: kubernetes.io/os, operator: In, values: [linux]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['2']}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    let pods: Vec<Value> = (0..2)
        .map(|i| pod(&format!("web-{i}"), "1", "2Gi", None))
        .collect();
    let p = tmp(
        "spot-pods.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    );
    let prices = tmp(
        "spot-prices.json",
        &json!({"SpotPriceHistory": [
            {"InstanceType": "m7i.large", "AvailabilityZone": "us-east-1b", "ProductDescription": "Linux/UNIX",
             "SpotPrice": "0.001000", "Timestamp": "2026-11-30T10:00:00+00:00"},
            {"InstanceType": "m7i.large", "AvailabilityZone": "us-east-1b", "ProductDescription": "Linux/UNIX",
             "SpotPrice": "0.020000", "Timestamp": "2026-11-30T12:00:00+00:00"},
            {"InstanceType": "c7i.xlarge", "AvailabilityZone": "us-east-1c", "ProductDescription": "Linux/UNIX",
             "SpotPrice": "0.030000", "Timestamp": "2026-11-30T12:00:00+00:00"}
        ]})
        .to_string(),
    );
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "plan",
            "--pods",
            p.to_str().unwrap(),
            "--nodepool",
            spot_pool.to_str().unwrap(),
            "--output",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        capstan(&a)
    };
    let out = run(args(&["--spot-prices", prices.to_str().unwrap()]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("estimates"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = v["nodeclaims"].as_array().unwrap();
    assert!(!claims.is_empty(), "{v}");
    assert!(v["unschedulable"].as_array().unwrap().is_empty(), "{v}");
    for c in claims {
        assert_eq!(c["capacity_type"], "spot", "{c}");
        let priced = match (
            c["instance_type"].as_str().unwrap(),
            c["zone"].as_str().unwrap(),
        ) {
            ("m7i.large", "us-east-1b") => 0.02,
            ("c7i.xlarge", "us-east-1c") => 0.03,
            other => panic!("{other:?} has no price in the file"),
        };
        assert!(
            (c["price_usd_per_hour"].as_f64().unwrap() - priced).abs() < 1e-9,
            "{c}"
        );
    }
    // Without the file: estimates, and the command says so.
    let out = run(args(&[]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("spot prices are estimates"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["unschedulable"].as_array().unwrap().is_empty(), "{v}");
    // A price that is not a number: exit 2, one line naming the file and the entry.
    let bad = tmp(
        "bad-spot-prices.json",
        r#"{"SpotPriceHistory": [{"InstanceType": "m7i.large", "AvailabilityZone": "us-east-1b", "SpotPrice": "cheap", "Timestamp": "2026-11-30T12:00:00Z"}]}"#,
    );
    let out = run(args(&["--spot-prices", bad.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad-spot-prices.json") && err.contains("SpotPriceHistory[0].SpotPrice"),
        "{err}"
    );
}

/// A node Karpenter launched that is registered but not yet initialized (its NodeClaim not
/// Initialized, the node NotReady with its startup taint) takes pending pods as it will be,
/// as Karpenter's scheduler counts it; an initialized node with the same taints does not.
#[test]
fn plan_counts_a_node_still_coming_up_without_its_startup_and_not_ready_taints() {
    let snapshot = |initialized: bool| {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-2", "labels": {
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a",
            "node.kubernetes.io/instance-type": "m7i.xlarge", "karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc", "taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "example.com/agent-not-ready", "value": "true", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
                       "conditions": [{"type": "Ready", "status": "False"}]}});
        let mut conditions = vec![
            json!({"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": "2026-12-01T10:00:00Z"}),
            json!({"type": "Registered", "status": "True", "reason": "Registered", "lastTransitionTime": "2026-12-01T10:00:30Z"}),
        ];
        if initialized {
            conditions.push(json!({"type": "Initialized", "status": "True", "reason": "Initialized", "lastTransitionTime": "2026-12-01T10:01:00Z"}));
        }
        let claim = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc12", "labels": {"karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": "m7i.xlarge"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.xlarge"]}],
                "startupTaints": [{"key": "example.com/agent-not-ready", "value": "true", "effect": "NoSchedule"}]},
            "status": {"providerID": "aws:///us-east-1a/i-0abc", "nodeName": "ip-10-0-0-2", "conditions": conditions}});
        let name = format!("coming-up-{initialized}.json");
        tmp(
            &name,
            &json!({"apiVersion": "v1", "kind": "List", "items": [node, claim]}).to_string(),
        )
    };
    let p = tmp(
        "coming-up-pods.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "1", "1Gi", None)]})
            .to_string(),
    );
    let plan = |cluster: &std::path::Path| -> Value {
        let out = capstan(&[
            "plan",
            "--pods",
            p.to_str().unwrap(),
            "--cluster",
            cluster.to_str().unwrap(),
            "--output",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = plan(&snapshot(false));
    assert_eq!(v["existing"][0]["node"], "ip-10-0-0-2", "{v:#}");
    assert!(v["nodeclaims"].as_array().unwrap().is_empty(), "{v:#}");
    let v = plan(&snapshot(true));
    assert!(v["existing"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(v["nodeclaims"].as_array().unwrap().len(), 1, "{v:#}");
}

/// `kubectl get pods,pvc,pv,storageclass -o json`: a pending pod's bound claim puts its new
/// node in the volume's zone; a pod whose claim does not exist gets no node, with a warning
/// naming the claim; without any claim, volume or class the pods are planned, with a warning.
#[test]
fn plan_reads_claims_volumes_and_storage_classes_and_places_pods_where_their_volumes_are() {
    let with_claim = |name: &str, claim: &str| {
        let mut p = pod(name, "500m", "1Gi", None);
        p["spec"]["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
        p
    };
    let volumes = vec![
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-b"},
            "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b"]}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-db-0", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}}, "spec": {"volumeName": "pv-b", "storageClassName": "gp3"}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
            "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}),
    ];
    let pods = vec![
        with_claim("db-0", "data-db-0"),
        with_claim("db-1", "data-db-1"),
    ];
    let plan = |items: Vec<Value>, cluster: Option<Vec<Value>>| {
        let f = tmp(
            "volume-pods.json",
            &json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
        );
        let mut args = vec!["plan", "--pods", f.to_str().unwrap(), "--output", "json"];
        let c;
        if let Some(cluster) = cluster {
            c = tmp(
                "volume-cluster.json",
                &json!({"apiVersion": "v1", "kind": "List", "items": cluster}).to_string(),
            );
            args.extend(["--cluster", c.to_str().unwrap()]);
        }
        let out = capstan(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        (serde_json::from_slice::<Value>(&out.stdout).unwrap(), err)
    };
    // The claims in the cluster file, or in the pods file itself.
    for (items, cluster) in [
        (pods.clone(), Some(volumes.clone())),
        (pods.iter().chain(&volumes).cloned().collect(), None),
    ] {
        let (v, err) = plan(items, cluster);
        let claims = v["nodeclaims"].as_array().unwrap();
        assert_eq!(claims.len(), 1, "{v:#}");
        assert_eq!(claims[0]["zone"], "us-east-1b", "{v:#}");
        assert_eq!(claims[0]["pods"], json!(["default/db-0"]), "{v:#}");
        assert!(
            err.contains(
                "pod default/db-1: no node planned: waiting for its PersistentVolumeClaim default/data-db-1"
            ),
            "{err}"
        );
    }
    // No claim, volume or class given: both planned, and told so.
    let (v, err) = plan(pods, None);
    let placed: usize = v["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 2, "{v:#}");
    assert!(
        err.contains("2 pending pods use PersistentVolumeClaims, and no claim, volume or StorageClass was given"),
        "{err}"
    );
}
