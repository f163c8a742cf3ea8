//! A GPU node is initialized only once its device plugin has registered the GPUs (Karpenter's
//! `RequestedResourcesRegistered`): until then it is Ready but not initialized, nothing may
//! disrupt it, and kube-scheduler cannot bind the pod that asked for a GPU.

use super::{Cluster, wait_for};
use std::time::Duration;

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_gpu_node_is_initialized_only_once_its_device_plugin_has_registered_the_gpus() {
    let c = Cluster::get();
    c.apply(
        r#"
apiVersion: capstan.dev/v1
kind: FakeNodeClass
metadata: {name: gpu}
spec: {bootDelay: 1s, devicePluginDelay: 30s}
---
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: capstan.dev, kind: FakeNodeClass, name: gpu}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [g4dn.xlarge]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#,
    );
    let ns = c.namespace("gpu");
    c.apply(&format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: train, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: train}}}}
  template:
    metadata: {{labels: {{app: train}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{{name: c, image: fake, resources: {{requests: {{cpu: 500m, memory: 256Mi}}, limits: {{nvidia.com/gpu: 1}}}}}}]
"#
    ));
    let capstan = c.capstan("gpu", &[]);
    let condition = |claim: &serde_json::Value, kind: &str| {
        claim["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["type"] == kind))
            .and_then(|x| x["status"].as_str())
            .unwrap_or("")
            .to_string()
    };
    // The node comes up Ready with its GPU at 0: registered, not initialized.
    let (claim, node) = wait_for(
        "the GPU node Ready and registered",
        Duration::from_secs(120),
        || {
            let claims = c.items(&["nodeclaims.capstan.dev"]);
            let claim = claims.first()?;
            (condition(claim, "Registered") == "True").then_some(())?;
            let name = claim["status"]["nodeName"].as_str()?.to_string();
            let node = c.get_json(&["node", &name]);
            let ready = node["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|x| x["type"] == "Ready" && x["status"] == "True");
            ready.then(|| {
                (
                    claim["metadata"]["name"].as_str().unwrap().to_string(),
                    name,
                )
            })
        },
    );
    let gpus = |node: &serde_json::Value| {
        node["status"]["allocatable"]["nvidia.com/gpu"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let n = c.get_json(&["node", &node]);
    assert_eq!(gpus(&n), "0", "the device plugin registers 30 s after boot");
    let claim_now = c.get_json(&["nodeclaim.capstan.dev", &claim]);
    assert_ne!(
        condition(&claim_now, "Initialized"),
        "True",
        "initialized before its GPUs were registered: {claim_now}"
    );
    assert!(
        n["metadata"]["labels"]
            .get("karpenter.sh/initialized")
            .is_none(),
        "labelled initialized before its GPUs were registered"
    );
    assert_eq!(
        c.phases(&ns, "train")[0].2,
        "",
        "bound to a node with no GPU"
    );
    // The device plugin registers the GPU: the node is initialized and the pod binds there.
    wait_for(
        "the claim Initialized once the GPU is registered",
        Duration::from_secs(120),
        || {
            let claim_now = c.get_json(&["nodeclaim.capstan.dev", &claim]);
            (condition(&claim_now, "Initialized") == "True").then_some(())
        },
    );
    assert_eq!(gpus(&c.get_json(&["node", &node])), "1");
    wait_for("the GPU pod Running", Duration::from_secs(120), || {
        (c.running(&ns, "train") == 1).then_some(())
    });
    assert_eq!(c.phases(&ns, "train")[0].2, node);
    assert_eq!(c.items(&["nodeclaims.capstan.dev"]).len(), 1);
    drop(capstan);
}
