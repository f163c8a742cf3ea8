//! Pods that select Karpenter's labels, a zone spread, a zone ID, a custom label a NodePool requirement
//! fixes or leaves open (`Exists`) — and a pod nothing can satisfy.

use super::{Cluster, wait_for};
use std::time::Duration;

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn pods_selecting_karpenter_labels_zones_and_a_custom_label_are_bound_and_an_impossible_pod_waits_with_an_event()
 {
    let c = Cluster::get();
    // No consolidation: the impossible pod no longer holds disruption up, and a
    // consolidation's replacement would blur the count of nodes bought for it.
    c.default_pool(
        "      - {key: team, operator: In, values: [ml]}\n      - {key: tier, operator: Exists}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}\n  disruption: {consolidateAfter: Never}",
    );
    let ns = c.namespace("selectors");
    c.deployment(
        &ns,
        "ondemand",
        2,
        "500m",
        "      nodeSelector: {karpenter.sh/capacity-type: on-demand}",
    );
    c.deployment(
        &ns,
        "family",
        2,
        "500m",
        "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i]}]}]}}}",
    );
    // minDomains: kube-scheduler counts only the zones of nodes already up, so without it the
    // first node to register could take all three pods.
    c.deployment(
        &ns,
        "spread",
        3,
        "500m",
        "      topologySpreadConstraints: [{maxSkew: 1, minDomains: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}]",
    );
    c.deployment(&ns, "custom", 2, "500m", "      nodeSelector: {team: ml}");
    // The NodePool's `tier Exists`, narrowed by a pod's selector, and not narrowed at all.
    c.deployment(&ns, "gold", 1, "500m", "      nodeSelector: {tier: gold}");
    c.deployment(
        &ns,
        "tiered",
        1,
        "500m",
        "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: tier, operator: Exists}]}]}}}",
    );
    // The fake cloud names its zones' IDs as AWS does (us-east-1b → use1-az2).
    c.deployment(
        &ns,
        "zoneid",
        1,
        "500m",
        "      nodeSelector: {topology.k8s.aws/zone-id: use1-az2}",
    );
    c.deployment(
        &ns,
        "impossible",
        1,
        "500m",
        "      nodeSelector: {karpenter.k8s.aws/instance-family: z9}",
    );
    let capstan = c.capstan("selectors", &[]);
    for (app, n) in [
        ("ondemand", 2),
        ("family", 2),
        ("spread", 3),
        ("custom", 2),
        ("gold", 1),
        ("tiered", 1),
        ("zoneid", 1),
    ] {
        wait_for(&format!("{app} Running"), Duration::from_secs(180), || {
            (c.running(&ns, app) == n).then_some(())
        });
    }
    // Where they landed matches what they asked for.
    let nodes = c.items(&["nodes"]);
    let label = |node: &str, key: &str| {
        nodes
            .iter()
            .find(|n| n["metadata"]["name"] == node)
            .and_then(|n| n["metadata"]["labels"][key].as_str())
            .unwrap_or_default()
            .to_string()
    };
    for (_, _, node) in c.phases(&ns, "family") {
        assert_eq!(label(&node, "karpenter.k8s.aws/instance-family"), "m7i");
    }
    for (_, _, node) in c.phases(&ns, "custom") {
        assert_eq!(
            label(&node, "team"),
            "ml",
            "the requirement's label reached the node"
        );
    }
    for (_, _, node) in c.phases(&ns, "gold") {
        assert_eq!(label(&node, "tier"), "gold", "Exists narrowed by the pod");
    }
    for (_, _, node) in c.phases(&ns, "tiered") {
        assert!(
            !label(&node, "tier").is_empty(),
            "Exists gives the node a tier"
        );
    }
    for (_, _, node) in c.phases(&ns, "zoneid") {
        assert_eq!(label(&node, "topology.k8s.aws/zone-id"), "use1-az2");
        assert_eq!(label(&node, "topology.kubernetes.io/zone"), "us-east-1b");
    }
    let zones: std::collections::BTreeSet<String> = c
        .phases(&ns, "spread")
        .iter()
        .map(|(_, _, n)| label(n, "topology.kubernetes.io/zone"))
        .collect();
    assert_eq!(zones.len(), 3, "spread over three zones: {zones:?}");
    // The impossible pod waits, with an Event saying why, and no node is bought for it.
    let (pod, phase, _) = c.phases(&ns, "impossible").remove(0);
    assert_eq!(phase, "Pending");
    let why = wait_for(
        "an Event on the impossible pod",
        Duration::from_secs(60),
        || {
            c.items(&["events.events.k8s.io", "-n", &ns])
                .into_iter()
                .find(|e| {
                    e["regarding"]["name"] == pod.as_str()
                        && e["reportingController"] == "capstan.dev/controller"
                })
                .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        },
    );
    assert!(
        why.contains("instance-family") || why.contains("z9"),
        "{why}"
    );
    let claims = c.items(&["nodeclaims.capstan.dev"]).len();
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(
        c.items(&["nodeclaims.capstan.dev"]).len(),
        claims,
        "no node after node for a pod nothing can hold"
    );
    assert_eq!(c.phases(&ns, "impossible")[0].1, "Pending");
    drop(capstan);
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_nodepool_whose_node_class_does_not_exist_is_not_ready_and_gets_no_node() {
    let c = Cluster::get();
    c.apply(
        r#"
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {name: orphan}
spec:
  template:
    spec:
      nodeClassRef: {group: capstan.dev, kind: FakeNodeClass, name: missing}
      requirements: []
---
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {name: foreign}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"#,
    );
    let ns = c.namespace("orphan");
    c.deployment(&ns, "web", 2, "500m", "");
    let capstan = c.capstan("orphan", &[]);
    for (pool, why) in [
        ("orphan", "FakeNodeClass missing not found"),
        ("foreign", "not served by the fake provider"),
    ] {
        let condition = wait_for(
            &format!("{pool} Ready=False"),
            Duration::from_secs(60),
            || {
                let p = c.get_json(&["nodepool.capstan.dev", pool]);
                p["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|x| x["type"] == "Ready").cloned())
            },
        );
        assert_eq!(condition["status"], "False", "{condition}");
        assert_eq!(condition["reason"], "NodeClassNotReady");
        assert!(
            condition["message"]
                .as_str()
                .unwrap_or_default()
                .contains(why),
            "{condition}"
        );
    }
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        c.items(&["nodeclaims.capstan.dev"]).is_empty(),
        "nothing launched"
    );
    assert_eq!(
        c.phases(&ns, "web")
            .iter()
            .filter(|(_, p, _)| p == "Pending")
            .count(),
        2
    );
    drop(capstan);
}
