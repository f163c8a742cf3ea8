//! What counts as pending: only pods kube-scheduler tried and gave up on (Karpenter's
//! `IsProvisionable`). Scheduling-gated pods and another scheduler's pods get no node, a pod
//! nothing can hold does not stop disruption, and a pod that does not bind to the node
//! launched for it gets no node after node.

use super::{Cluster, wait_for};
use std::time::Duration;

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn gated_pods_and_another_schedulers_pods_get_no_node_and_a_stuck_pod_does_not_stop_emptiness() {
    let c = Cluster::get();
    c.default_pool(
        "  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
    );
    let ns = c.namespace("pending");
    c.deployment(&ns, "web", 2, "500m", "");
    c.deployment(
        &ns,
        "gated",
        1,
        "500m",
        "      schedulingGates: [{name: example.com/quota}]",
    );
    c.deployment(&ns, "other", 1, "500m", "      schedulerName: volcano");
    c.deployment(
        &ns,
        "impossible",
        1,
        "500m",
        "      nodeSelector: {karpenter.k8s.aws/instance-family: z9}",
    );
    let capstan = c.capstan("pending", &[]);
    wait_for("web Running", Duration::from_secs(180), || {
        (c.running(&ns, "web") == 2).then_some(())
    });
    let claims = c.items(&["nodeclaims.capstan.dev"]).len();
    assert!(claims >= 1);
    // Long enough for several batches and disruption passes.
    std::thread::sleep(Duration::from_secs(15));
    assert_eq!(
        c.items(&["nodeclaims.capstan.dev"]).len(),
        claims,
        "nothing launched for the gated, the other scheduler's or the impossible pod"
    );
    let events = c.items(&["events.events.k8s.io", "-n", &ns]);
    let from_capstan = |pod: &str| {
        events.iter().any(|e| {
            e["regarding"]["name"] == pod && e["reportingController"] == "capstan.dev/controller"
        })
    };
    for app in ["gated", "other"] {
        let (pod, phase, node) = c.phases(&ns, app).remove(0);
        assert_eq!((phase.as_str(), node.as_str()), ("Pending", ""), "{app}");
        assert!(!from_capstan(&pod), "capstan said nothing about {pod}");
    }
    // Emptiness goes on while the impossible pod waits: scale web to zero and its nodes go.
    c.ok(&["-n", &ns, "scale", "deployment", "web", "--replicas=0"]);
    wait_for(
        "the empty nodes removed with pods still pending",
        Duration::from_secs(120),
        || {
            c.items(&["nodeclaims.capstan.dev"])
                .is_empty()
                .then_some(())
        },
    );
    assert_eq!(c.phases(&ns, "impossible")[0].1, "Pending");
    // Lifting the gate hands the pod to kube-scheduler; once it gives up, capstan launches.
    let (gated, _, _) = c.phases(&ns, "gated").remove(0);
    c.ok(&[
        "-n",
        &ns,
        "patch",
        "pod",
        &gated,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#,
    ]);
    wait_for("the ungated pod Running", Duration::from_secs(180), || {
        (c.running(&ns, "gated") == 1).then_some(())
    });
    assert_eq!(c.phases(&ns, "other")[0].1, "Pending");
    drop(capstan);
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_pod_that_does_not_bind_to_the_node_launched_for_it_gets_an_event_and_no_node_after_node() {
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("runaway");
    // A hostPath volume tied to one host: as Karpenter, capstan drops a local volume's
    // hostname (a new node cannot be that host) and launches a node the real kube-scheduler
    // then refuses.
    c.apply(&format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: zonal-{ns}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  hostPath: {{path: /tmp/zonal}}
  claimRef: {{namespace: {ns}, name: data}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [gone-{ns}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  volumeName: zonal-{ns}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    ));
    c.deployment(
        &ns,
        "db",
        1,
        "500m",
        "      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]",
    );
    let capstan = c.capstan("runaway", &[]);
    let (pod, _, _) = c.phases(&ns, "db").remove(0);
    let note = wait_for(
        "a NotBound Event on the pod",
        Duration::from_secs(180),
        || {
            c.items(&["events.events.k8s.io", "-n", &ns])
                .into_iter()
                .find(|e| e["regarding"]["name"] == pod.as_str() && e["reason"] == "NotBound")
                .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        },
    );
    assert!(note.contains("PersistentVolume's node affinity"), "{note}");
    let claims = c.items(&["nodeclaims.capstan.dev"]).len();
    assert_eq!(claims, 1, "one node was launched for it");
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(
        c.items(&["nodeclaims.capstan.dev"]).len(),
        claims,
        "no node after node for a pod that does not bind"
    );
    assert_eq!(c.phases(&ns, "db")[0].1, "Pending");
    drop(capstan);
}
