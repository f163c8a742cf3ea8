use serde_json::{Value, json};
use std::process::Command;

fn catalog() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../model/data/aws-instance-types-us-east-1.json"
    )
    .to_string()
}

fn node(name: &str, it: &str, cpu: &str, mem: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "creationTimestamp": "2026-11-29T00:00:00Z", "labels": {
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a",
        "node.kubernetes.io/instance-type": it, "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "58"}, "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(name: &str, node: &str, cpu: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Running"}})
}

fn write(name: &str, v: &Value) -> String {
    let dir = std::env::temp_dir().join(format!("capstan-cons-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p.to_string_lossy().to_string()
}

fn cluster() -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        node("a", "m7i.2xlarge", "7910m", "29Gi"), node("b", "m7i.2xlarge", "7910m", "29Gi"), node("c", "m7i.2xlarge", "7910m", "29Gi"),
        pod("web-1", "a", "1", "web"), pod("web-2", "b", "1", "web"), pod("db-1", "c", "1", "db"),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "default"},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}
    ]})
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn consolidate_reports_commands_blocked_nodes_and_prices() {
    let c = write("cluster.json", &cluster());
    let np = write(
        "np.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {}}, "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}}}),
    );
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--catalog",
        &catalog(),
        "--nodepool",
        &np,
        "--now",
        "2026-11-30T09:15:00Z",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["blocked"][0]["node"], "c");
    assert_eq!(
        v["blocked"][0]["reason"],
        "pdb default/db allows 0 disruptions"
    );
    let cmd = &v["commands"][0];
    assert_eq!(cmd["reason"], "underutilized");
    assert!(cmd["savings_usd_per_hour"].as_f64().unwrap() > 0.0);
    assert!(v["after_usd_per_hour"].as_f64().unwrap() < v["before_usd_per_hour"].as_f64().unwrap());
    for m in cmd["moves"].as_array().unwrap() {
        let to = m["to"].as_str().unwrap();
        assert!(to == "c" || to.starts_with("replacement-"), "{m}");
    }
}

#[test]
fn until_stable_prints_every_round_until_nothing_changes() {
    let c = write("cluster2.json", &cluster());
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--catalog",
        &catalog(),
        "--now",
        "2026-11-30T09:15:00Z",
        "--until-stable",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rounds = v["rounds"].as_array().unwrap();
    assert!(
        rounds.len() >= 2,
        "the default 10% budget takes one node a round: {v:#}"
    );
    assert!(
        rounds.last().unwrap()["commands"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let first = rounds[0]["before_usd_per_hour"].as_f64().unwrap();
    let last = rounds.last().unwrap()["after_usd_per_hour"]
        .as_f64()
        .unwrap();
    assert!(last < first);
}

#[test]
fn a_bad_now_exits_2() {
    let c = write("cluster3.json", &cluster());
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--catalog",
        &catalog(),
        "--now",
        "yesterday",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--now: \"yesterday\" is not an RFC 3339 time")
    );
}

#[test]
fn a_nodepool_whose_budget_schedule_does_not_parse_exits_2_naming_the_file_the_nodepool_and_the_field()
 {
    let c = write("cluster3.json", &cluster());
    let np = write(
        "bad-budget.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "nightly"},
            "spec": {"template": {"spec": {"requirements": []}},
                     "disruption": {"budgets": [{"nodes": "0", "schedule": "0 9 * * funday", "duration": "8h"}]}}}),
    );
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--catalog",
        &catalog(),
        "--nodepool",
        &np,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(line.contains("bad-budget.json"), "{err}");
    assert!(line.contains("nightly"), "{err}");
    assert!(
        line.contains("spec.disruption.budgets[0].schedule"),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "one line: {err}"
    );
}

#[test]
fn until_stable_names_replacements_inside_a_command_and_as_nodes_in_later_rounds_as_the_contract_says()
 {
    // Oversized nodes each with one small pod, and a budget of one node at a time: rounds of
    // replacements and deletions, each round seeing the nodes the earlier ones launched.
    let mut items: Vec<Value> = (0..4)
        .map(|i| node(&format!("n{i}"), "m7i.4xlarge", "15890m", "61Gi"))
        .collect();
    items.extend((0..4).map(|i| pod(&format!("w{i}"), &format!("n{i}"), "500m", "web")));
    let c = write(
        "until-stable-names.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let pool = write(
        "one-at-a-time.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large", "m7i.xlarge", "m7i.4xlarge"]}]}},
                "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}}}),
    );
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--nodepool",
        &pool,
        "--catalog",
        &catalog(),
        "--now",
        "2026-11-30T09:15:00Z",
        "--until-stable",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rounds = v["rounds"].as_array().unwrap();
    let mut nodes: Vec<String> = (0..4).map(|i| format!("n{i}")).collect();
    let mut replaced = 0;
    for (r, round) in rounds.iter().enumerate() {
        let mut launched = 0;
        for cmd in round["commands"].as_array().unwrap() {
            let replacements = cmd["replacements"].as_array().unwrap().len();
            for m in cmd["moves"].as_array().unwrap() {
                let to = m["to"].as_str().unwrap();
                match to
                    .strip_prefix("replacement-")
                    .and_then(|k| k.parse::<usize>().ok())
                {
                    // `replacement-K`: entry K of this command's replacements.
                    Some(k) => {
                        assert!(k < replacements, "round {r}: {to} of {replacements}: {cmd}")
                    }
                    // Otherwise a node of this round's cluster, replacements of earlier rounds
                    // included as `replacement-R-K`.
                    None => assert!(
                        nodes.iter().any(|n| n == to),
                        "round {r}: {to} is no node in {nodes:?}"
                    ),
                }
            }
            for cand in cmd["candidates"].as_array().unwrap() {
                nodes.retain(|n| n != cand.as_str().unwrap());
            }
            for _ in 0..replacements {
                nodes.push(format!("replacement-{r}-{launched}"));
                launched += 1;
                replaced += 1;
            }
        }
    }
    assert!(replaced >= 1, "some round replaced a node: {v:#}");
    assert!(rounds.len() >= 3, "{v:#}");
}

/// `karpenter.sh/do-not-disrupt: "30m"` protects the pod's node for 30 minutes from the pod's
/// start (Karpenter's grace period), then consolidation may take it.
#[test]
fn a_do_not_disrupt_duration_blocks_consolidation_until_it_has_passed_since_the_pod_started() {
    let mut p = pod("web-1", "a", "1", "web");
    p["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "30m"});
    p["status"]["startTime"] = json!("2026-11-30T09:00:00Z");
    let c = write(
        "grace.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [node("a", "m7i.2xlarge", "7910m", "29Gi"), p]}),
    );
    let np = write(
        "grace-np.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                 "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}}}),
    );
    let at = |now: &str| -> Value {
        let out = run(&[
            "consolidate",
            "--cluster",
            &c,
            "--nodepool",
            &np,
            "--now",
            now,
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
    let v = at("2026-11-30T09:15:00Z");
    assert!(v["commands"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(
        v["blocked"][0]["reason"],
        "pod default/web-1 has do-not-disrupt for 30m, 900 s more"
    );
    let v = at("2026-11-30T09:45:00Z");
    assert_eq!(v["commands"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["commands"][0]["candidates"][0], "a", "{v:#}");
}

#[test]
fn consolidate_reads_each_nodes_nodeclaim_and_karpenters_consolidatable_and_drifted_conditions() {
    // Three empty nodes, each with a NodeClaim: Karpenter's with Consolidatable True, one
    // without the condition (consolidateAfter has not passed: it stays), capstan's (no such
    // condition: the node's age decides), and a Karpenter one Drifted whose node is not empty.
    let claim = |name: &str, node: &str, group: &str, conditions: Value| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": "2026-11-29T00:00:00Z",
                "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": group, "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"nodeName": node, "conditions": conditions}})
    };
    let cond = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": "2026-11-29T00:00:00Z"});
    let up = [cond("Launched"), cond("Registered"), cond("Initialized")];
    let with = |extra: &[Value]| -> Value { up.iter().chain(extra).cloned().collect() };
    let mut nodes: Vec<Value> = ["k-yes", "k-no", "capstan", "drifted", "other"]
        .iter()
        .map(|n| {
            let mut v = node(n, "m7i.2xlarge", "7910m", "29Gi");
            v["metadata"]["labels"]["karpenter.sh/initialized"] = json!("true");
            v
        })
        .collect();
    nodes.extend([
        claim(
            "c1",
            "k-yes",
            "karpenter.sh",
            with(&[cond("Consolidatable")]),
        ),
        claim("c2", "k-no", "karpenter.sh", with(&[])),
        claim("c3", "capstan", "capstan.dev", with(&[])),
        claim("c4", "drifted", "karpenter.sh", with(&[cond("Drifted")])),
        claim("c5", "other", "karpenter.sh", with(&[])),
        pod("web-1", "drifted", "1", "web"),
    ]);
    let c = write(
        "claims.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": nodes}),
    );
    let np = write(
        "np-claims.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {}}, "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}}}),
    );
    let out = run(&[
        "consolidate",
        "--cluster",
        &c,
        "--catalog",
        &catalog(),
        "--nodepool",
        &np,
        "--now",
        "2026-11-30T09:15:00Z",
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_reason = |reason: &str| -> Vec<String> {
        let mut n: Vec<String> = v["commands"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["reason"] == reason)
            .flat_map(|c| c["candidates"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(by_reason("empty"), ["capstan", "k-yes"], "{v:#}");
    assert_eq!(by_reason("drifted"), ["drifted"], "{v:#}");
}

#[test]
fn a_node_no_nodeclaim_stands_for_is_no_candidate_in_a_snapshot_with_nodeclaims() {
    let cond = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": "2026-11-29T00:00:00Z"});
    let claim = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c1", "creationTimestamp": "2026-11-29T00:00:00Z",
            "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.sh", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
        "status": {"nodeName": "claimed", "conditions": [cond("Launched"), cond("Registered"),
            cond("Initialized"), cond("Consolidatable")]}});
    let nodes: Vec<Value> = ["claimed", "lone"]
        .iter()
        .map(|n| {
            let mut v = node(n, "m7i.2xlarge", "7910m", "29Gi");
            v["metadata"]["labels"]["karpenter.sh/initialized"] = json!("true");
            v
        })
        .collect();
    let np = write(
        "np-lone.json",
        &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {}}, "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}}}),
    );
    let deleted = |items: Vec<Value>, file: &str| -> Vec<String> {
        let c = write(
            file,
            &json!({"apiVersion": "v1", "kind": "List", "items": items}),
        );
        let out = run(&[
            "consolidate",
            "--cluster",
            &c,
            "--catalog",
            &catalog(),
            "--nodepool",
            &np,
            "--now",
            "2026-11-30T09:15:00Z",
            "--output",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut n: Vec<String> = v["commands"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["candidates"].as_array().cloned().unwrap_or_default())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    let mut with_claim = nodes.clone();
    with_claim.push(claim);
    assert_eq!(deleted(with_claim, "lone-claims.json"), ["claimed"]);
    // A recording of nodes alone is read node by node: both go.
    assert_eq!(deleted(nodes, "lone-nodes.json"), ["claimed", "lone"]);
}
