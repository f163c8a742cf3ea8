//! Scale-out: 200 replicas on a cluster with no nodes.

use super::{Cluster, WHY, wait_for};
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
    drop(capstan);
}
