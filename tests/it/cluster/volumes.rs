//! Volume topology on the real control plane (kube-controller-manager binds the claims,
//! kube-scheduler checks the volumes): a pod's zonal PersistentVolume, and an unbound claim's
//! WaitForFirstConsumer StorageClass, put its new node in their zone; a pod whose claim does
//! not exist gets a reason and no node.

use super::{Cluster, wait_for};
use std::time::Duration;

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn pods_get_nodes_in_their_volumes_zones_and_a_pod_whose_claim_is_missing_gets_a_reason_and_no_node()
 {
    let c = Cluster::get();
    c.default_pool("");
    let ns = c.namespace("volumes");
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
      - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  volumeName: zonal-{ns}
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: late-{ns}, labels: {{capstan-e2e: "true"}}}}
provisioner: example.com/late
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{{key: topology.kubernetes.io/zone, values: [us-east-1c]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: scratch, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: late-{ns}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    ));
    // The pre-bound claim is bound by kube-controller-manager before capstan starts.
    wait_for(
        "the claim bound to its volume",
        Duration::from_secs(60),
        || {
            let pvc = c.get_json(&["pvc", "-n", &ns, "data"]);
            (pvc["status"]["phase"] == "Bound").then_some(())
        },
    );
    let volume = |claim: &str| {
        format!("      volumes: [{{name: v, persistentVolumeClaim: {{claimName: {claim}}}}}]")
    };
    c.deployment(&ns, "db", 1, "500m", &volume("data"));
    c.deployment(&ns, "late", 1, "500m", &volume("scratch"));
    c.deployment(&ns, "orphan", 1, "500m", &volume("absent"));
    let capstan = c.capstan("volumes", &[]);
    let zone_of = |node: &str| {
        c.get_json(&["node", node])["metadata"]["labels"]["topology.kubernetes.io/zone"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (_, _, db_node) = wait_for(
        "the pod of the zonal volume Running",
        Duration::from_secs(180),
        || {
            c.phases(&ns, "db")
                .into_iter()
                .find(|(_, phase, _)| phase == "Running")
        },
    );
    assert_eq!(zone_of(&db_node), "us-east-1b", "the volume's zone");
    // kube-scheduler picks the node for the unbound claim: one in the class's zone.
    let selected = wait_for(
        "kube-scheduler selects a node for the unbound claim",
        Duration::from_secs(180),
        || {
            let pvc = c.get_json(&["pvc", "-n", &ns, "scratch"]);
            pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
                .as_str()
                .map(str::to_string)
        },
    );
    assert_eq!(zone_of(&selected), "us-east-1c", "the class's allowed zone");
    let (orphan, _, _) = c.phases(&ns, "orphan").remove(0);
    let note = wait_for(
        "a WaitingForVolume Event on the pod whose claim is missing",
        Duration::from_secs(120),
        || {
            c.items(&["events.events.k8s.io", "-n", &ns])
                .into_iter()
                .find(|e| {
                    e["regarding"]["name"] == orphan.as_str() && e["reason"] == "WaitingForVolume"
                })
                .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        },
    );
    assert!(
        note.contains(&format!(
            "waiting for its PersistentVolumeClaim {ns}/absent"
        )),
        "{note}"
    );
    assert_eq!(
        c.items(&["nodeclaims.capstan.dev"]).len(),
        2,
        "one node in each volume's zone, none for the pod whose claim is missing"
    );
    assert_eq!(c.phases(&ns, "orphan")[0].1, "Pending");
    drop(capstan);
}
