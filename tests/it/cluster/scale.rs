//! Scale-out: 200 replicas on a cluster with no nodes.

use super::{Cluster, WHY, metric_sum, parse_metrics, wait_for};
use serde_json::Value;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn two_hundred_replicas_on_an_empty_cluster_run_on_nodes_capstan_launched_at_the_planned_price() {
    let _ = WHY;
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("scale");
    c.deployment(&ns, "web", 200, "250m", "");
    // Pending as capstan counts it: kube-scheduler tried each and found no node.
    wait_for("200 unschedulable pods", Duration::from_secs(60), || {
        let marked = c
            .items(&["pods", "-n", &ns, "-l", "app=web"])
            .iter()
            .filter(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|x| {
                        x["type"] == "PodScheduled"
                            && x["status"] == "False"
                            && x["reason"] == "Unschedulable"
                    })
                })
            })
            .count();
        (marked == 200).then_some(())
    });
    // What capstan would buy, asked before it runs (read-only).
    let out = c.capstan_cli(&["plan", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned = plan["nodeclaims"].as_array().unwrap().len();
    let planned_price = plan["total_price_usd_per_hour"].as_f64().unwrap();
    assert!(planned > 0);
    let started = Instant::now();
    let capstan = c.capstan("scale", &[]);
    wait_for("every pod Running", Duration::from_secs(300), || {
        (c.running(&ns, "web") == 200).then_some(())
    });
    let took = started.elapsed();
    let claims = c.items(&["nodeclaims.capstan.dev"]);
    let price: f64 = claims
        .iter()
        .map(|c| c["status"]["priceUSDPerHour"].as_f64().unwrap_or(0.0))
        .sum();
    eprintln!(
        "scale-out: 200 pods Running in {:.1} s on {} nodes (${price:.4}/h); capstan plan said {planned} nodes (${planned_price:.4}/h)",
        took.as_secs_f64(),
        claims.len()
    );
    assert!(
        claims.len() <= planned + 1,
        "{} nodes for a plan of {planned}",
        claims.len()
    );
    assert!(
        price <= planned_price * 1.10 + 1e-9,
        "${price} for a plan of ${planned_price}"
    );
    // Every pod is on a node capstan launched, bound by kube-scheduler.
    let nodes: Vec<String> = c
        .items(&["nodes", "-l", "capstan.dev/fake-node=true"])
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for (pod, _, node) in c.phases(&ns, "web") {
        assert!(nodes.contains(&node), "{pod} on {node}");
    }
    // One FakeInstance per claim; every Node has its claim.
    assert_eq!(c.items(&["fakeinstances.capstan.dev"]).len(), claims.len());
    assert_eq!(nodes.len(), claims.len());

    // What /metrics says about it, by Karpenter's names (the state gauges are rebuilt every
    // second: wait for the one that has every pod running).
    let n = claims.len() as f64;
    let (text, samples) = wait_for(
        "metrics with every pod running",
        Duration::from_secs(20),
        || {
            let text = capstan.scrape();
            let samples = parse_metrics(&text);
            let running = metric_sum(
                &samples,
                "karpenter_pods_state",
                &[("namespace", &ns), ("phase", "Running")],
            );
            (running == 200.0).then_some((text, samples))
        },
    );
    let dir = super::repo().join("target/e2e-logs");
    std::fs::write(dir.join("metrics-after-scale-out.txt"), &text).expect("metrics saved");
    let m = |name: &str, with: &[(&str, &str)]| metric_sum(&samples, name, with);
    let pool = [("nodepool", "default")];
    assert_eq!(
        m(
            "karpenter_nodeclaims_created_total",
            &[("nodepool", "default"), ("reason", "provisioned")]
        ),
        n
    );
    assert_eq!(m("karpenter_nodes_created_total", &pool), n);
    assert_eq!(m("karpenter_nodeclaims_terminated_total", &[]), 0.0);
    assert_eq!(m("karpenter_cluster_state_synced", &[]), 1.0);
    assert_eq!(m("karpenter_cluster_state_node_count", &[]), n);
    assert_eq!(m("leader_election_master_status", &[]), 1.0);
    // Each claim launched with one Create call that succeeded.
    assert!(
        m(
            "karpenter_cloudprovider_duration_seconds_count",
            &[("method", "Create"), ("provider", "fake")]
        ) >= n
    );
    assert_eq!(m("karpenter_cloudprovider_errors_total", &[]), 0.0);
    // Every pod was pending when capstan started, and runs now.
    assert_eq!(
        m("karpenter_pods_startup_duration_seconds_count", &[]),
        200.0
    );
    let p50 = m(
        "karpenter_pods_startup_duration_seconds",
        &[("quantile", "0.5")],
    );
    assert!(p50 > 0.0 && p50 < 600.0, "median pod startup {p50} s");
    // The pool's usage is the launched capacity; its cost what the claims say they cost.
    let cpu: f64 = claims
        .iter()
        .map(|c| {
            let q = c["status"]["capacity"]["cpu"].as_str().unwrap();
            q.parse::<f64>()
                .unwrap_or_else(|_| q.trim_end_matches('m').parse::<f64>().unwrap() / 1000.0)
        })
        .sum();
    assert_eq!(
        m(
            "karpenter_nodepools_usage",
            &[("nodepool", "default"), ("resource_type", "cpu")]
        ),
        cpu
    );
    let cost = m("capstan_nodepools_cost_per_hour", &pool);
    assert!(
        (cost - price).abs() < 1e-6,
        "cost {cost} vs the claims' {price}"
    );
    assert!(m("karpenter_scheduler_scheduling_duration_seconds_count", &[]) >= 1.0);
    assert!(m("karpenter_nodes_allocatable", &[("resource_type", "pods")]) > 0.0);
    assert!(
        samples
            .iter()
            .any(|s| s.name == "karpenter_cloudprovider_instance_type_offering_price_estimate")
    );
    // Events: each claim launched and registered, said on the claim and on its node, by uid
    // (what `kubectl describe` finds them by).
    let uids: Vec<String> = claims
        .iter()
        .chain(
            c.items(&["nodes", "-l", "capstan.dev/fake-node=true"])
                .iter(),
        )
        .map(|o| o["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    let events = c.items(&["events.events.k8s.io", "-A"]);
    let count = |reason: &str, kind: &str| {
        events
            .iter()
            .filter(|e| e["reason"] == reason && e["regarding"]["kind"] == kind)
            .filter(|e| uids.iter().any(|u| e["regarding"]["uid"] == u.as_str()))
            .count()
    };
    assert_eq!(count("Launched", "NodeClaim"), claims.len());
    assert_eq!(count("Registered", "NodeClaim"), claims.len());
    assert_eq!(count("Registered", "Node"), claims.len());
    drop(capstan);
}
