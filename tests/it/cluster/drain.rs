//! Draining: `kubectl delete node` goes through capstan's finalizer, and a scale-in
//! consolidates through the eviction API against a PodDisruptionBudget.

use super::{Cluster, metric_sum, parse_metrics, wait_for};
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn kubectl_delete_node_drains_the_node_through_capstans_finalizer_before_the_instance_goes() {
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("delete-node");
    c.deployment(&ns, "web", 4, "500m", "");
    let capstan = c.capstan("delete-node", &[]);
    wait_for("4 pods Running", Duration::from_secs(120), || {
        (c.running(&ns, "web") == 4).then_some(())
    });
    let (_, _, node) = c.phases(&ns, "web").remove(0);
    let on_node = |n: &str| {
        c.phases(&ns, "web")
            .iter()
            .filter(|(_, _, x)| x == n)
            .count()
    };
    assert!(on_node(&node) > 0);
    c.ok(&["delete", "node", &node, "--wait=false"]);
    // The finalizer holds the node while its pods are evicted.
    let n = c.get_json(&["node", &node]);
    assert!(n["metadata"]["deletionTimestamp"].is_string(), "{n}");
    assert!(
        n["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "capstan.dev/termination")
    );
    wait_for(
        "the node drained and gone",
        Duration::from_secs(120),
        || {
            let gone = !c.kubectl(&["get", "node", &node], None).status.success();
            gone.then_some(())
        },
    );
    // Its claim and instance went with it; the pods run elsewhere.
    wait_for(
        "its claim and instance gone",
        Duration::from_secs(60),
        || {
            let claims = c.items(&["nodeclaims.capstan.dev"]);
            let instances = c.items(&["fakeinstances.capstan.dev"]);
            let still = claims
                .iter()
                .any(|x| x["status"]["nodeName"] == node.as_str())
                || instances
                    .iter()
                    .any(|x| x["spec"]["nodeName"] == node.as_str());
            (!still).then_some(())
        },
    );
    wait_for("4 pods Running again", Duration::from_secs(120), || {
        (c.running(&ns, "web") == 4).then_some(())
    });
    assert_eq!(on_node(&node), 0);
    drop(capstan);
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_deleted_nodes_instance_waits_for_its_volume_attachments_to_go() {
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("detach");
    c.deployment(&ns, "web", 1, "500m", "");
    let capstan = c.capstan("detach", &[]);
    let (_, _, node) = wait_for("the pod Running", Duration::from_secs(120), || {
        c.phases(&ns, "web")
            .into_iter()
            .find(|(_, phase, _)| phase == "Running")
    });
    // A volume a CSI driver attached to the node (no driver runs here: the test detaches it).
    let va = format!("csi-{ns}");
    c.apply(&format!(
        r#"
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {{name: {va}}}
spec:
  attacher: ebs.csi.aws.com
  nodeName: {node}
  source: {{persistentVolumeName: pv-{ns}}}
"#
    ));
    c.ok(&["delete", "node", &node, "--wait=false"]);
    wait_for(
        "the pod drained off the node",
        Duration::from_secs(120),
        || {
            let phases = c.phases(&ns, "web");
            phases.iter().all(|(_, _, n)| n != &node).then_some(())
        },
    );
    let instance_alive = || {
        c.items(&["fakeinstances.capstan.dev"])
            .iter()
            .any(|x| x["spec"]["nodeName"] == node.as_str())
    };
    std::thread::sleep(Duration::from_secs(10));
    assert!(
        instance_alive(),
        "the instance waits for the volume to detach"
    );
    assert!(c.kubectl(&["get", "node", &node], None).status.success());
    c.ok(&["delete", "volumeattachment", &va]);
    wait_for(
        "the instance and node gone once the volume detached",
        Duration::from_secs(60),
        || {
            let node_gone = !c.kubectl(&["get", "node", &node], None).status.success();
            (!instance_alive() && node_gone).then_some(())
        },
    );
    drop(capstan);
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_scale_in_consolidates_through_the_eviction_api_against_a_pdb_without_losing_a_pod() {
    let c = Cluster::get();
    c.pool(
        "c7i.large",
        "  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
    );
    let ns = c.namespace("scale-in");
    // Big pods first, one per node, then small ones the PDB guards in the room left: when the
    // big ones go, six nodes each hold one small pod, and consolidation must move them.
    c.deployment(&ns, "filler", 6, "1500m", "");
    let mut capstan = c.capstan_with_log("scale-in", "info,capstan_controller=debug");
    wait_for("the fillers Running", Duration::from_secs(180), || {
        (c.running(&ns, "filler") == 6).then_some(())
    });
    c.apply(&format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: {ns}}}\nspec: {{maxUnavailable: 1, selector: {{matchLabels: {{app: web}}}}}}\n"
    ));
    c.deployment(&ns, "web", 6, "300m", "");
    wait_for("every pod Running", Duration::from_secs(180), || {
        (c.running(&ns, "web") == 6).then_some(())
    });
    let before = c.items(&["nodeclaims.capstan.dev"]).len();
    c.ok(&["-n", &ns, "delete", "deployment", "filler"]);
    // Watch availability while capstan consolidates: the PDB keeps all but one up.
    let start = Instant::now();
    let mut lowest = usize::MAX;
    let after = loop {
        let running = c.running(&ns, "web");
        lowest = lowest.min(running);
        let claims = c.items(&["nodeclaims.capstan.dev"]);
        let settled = claims.len() < before
            && claims
                .iter()
                .all(|x| x["metadata"]["deletionTimestamp"].is_null())
            && running == 6
            && c.phases(&ns, "filler").is_empty();
        let moved = capstan.log_text().contains("\"evict pod\"");
        if settled && moved && start.elapsed() > Duration::from_secs(30) {
            break claims.len();
        }
        assert!(
            start.elapsed() < Duration::from_secs(420),
            "consolidation did not settle: {} claims, {running} running\n{}",
            claims.len(),
            capstan
                .log_text()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let log = capstan.log_text();
    let evicted = log.matches("\"evict pod\"").count();
    let refused = log
        .lines()
        .filter(|l| l.contains("evict pod") && l.contains("violate"))
        .count();
    eprintln!(
        "scale-in: {before} nodes -> {after}; {evicted} eviction requests, {refused} refused by the PDB; at least {lowest} of 6 pods Running throughout"
    );
    assert!(
        lowest >= 5,
        "the PDB allows one disruption: {lowest} running at worst"
    );
    assert!(
        refused > 0,
        "the PDB refused some evictions until others ran again"
    );
    assert_eq!(
        c.items(&["fakeinstances.capstan.dev"]).len(),
        after,
        "no leaked instance"
    );
    assert_eq!(c.items(&["nodes"]).len(), after);
    // /metrics tells the same story: every claim created and not left was disrupted by a
    // decision, drained and terminated, node and claim.
    let samples = parse_metrics(&capstan.scrape());
    let m = |name: &str| metric_sum(&samples, name, &[("nodepool", "default")]);
    let created = m("karpenter_nodeclaims_created_total");
    let terminated = m("karpenter_nodeclaims_terminated_total");
    assert_eq!(
        created - terminated,
        after as f64,
        "created {created}, terminated {terminated}"
    );
    assert!(terminated >= (before - after) as f64);
    // (A decision given up after its start counts its candidates disrupted but not gone.)
    assert!(m("karpenter_nodeclaims_disrupted_total") >= terminated);
    assert_eq!(m("karpenter_nodes_terminated_total"), terminated);
    assert_eq!(
        m("karpenter_nodes_termination_duration_seconds_count"),
        terminated
    );
    assert_eq!(m("karpenter_nodes_created_total"), created);
    let decisions = metric_sum(
        &samples,
        "karpenter_voluntary_disruption_decisions_total",
        &[],
    );
    assert!(decisions >= 1.0, "{decisions} decisions");
    assert_eq!(capstan.terminate().code(), Some(0), "SIGTERM: exit 0");
}
