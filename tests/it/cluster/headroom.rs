//! Headroom on a real cluster: placeholder pods capstan keeps, preempted by the real
//! kube-scheduler for a real pod and made again, and made again at a new shape.

use super::{Cluster, WHY, wait_for};
use serde_json::Value;
use std::time::Duration;

/// The placeholder pods in kube-system.
fn placeholder_pods(c: &Cluster) -> Vec<Value> {
    c.items(&[
        "pods",
        "-n",
        "kube-system",
        "-l",
        "capstan.dev/headroom=default",
    ])
}

/// The placeholders in kube-system: (name, phase, node).
fn placeholders(c: &Cluster) -> Vec<(String, String, String)> {
    placeholder_pods(c)
        .iter()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&p["metadata"]["name"]),
                s(&p["status"]["phase"]),
                s(&p["spec"]["nodeName"]),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn a_nodepools_headroom_runs_as_placeholders_that_kube_scheduler_preempts_and_capstan_makes_again()
{
    let _ = WHY;
    let c = Cluster::get();
    c.apply(
        r#"
apiVersion: capstan.dev/v1
kind: FakeNodeClass
metadata: {name: default}
spec: {bootDelay: 2s}
---
apiVersion: capstan.dev/v1
kind: NodePool
metadata:
  name: default
  annotations: {capstan.dev/headroom: "count=2,cpu=500m,memory=256Mi"}
spec:
  template:
    spec:
      nodeClassRef: {group: capstan.dev, kind: FakeNodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c7i.large]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}
"#,
    );
    let ns = c.namespace("headroom");
    let _capstan = c.capstan("headroom", &[]);
    // Two placeholders at the headroom class's priority, Running on a node capstan launched
    // for them (the pool has one zone).
    let first = wait_for("two placeholders Running", Duration::from_secs(120), || {
        let p = placeholders(&c);
        (p.len() == 2 && p.iter().all(|(_, phase, _)| phase == "Running")).then(|| p[0].2.clone())
    });
    let pod = c.get_json(&["pod", "-n", "kube-system", "capstan-headroom-default-0"]);
    assert_eq!(pod["spec"]["priority"], -1, "{pod}");
    assert_eq!(pod["spec"]["priorityClassName"], "capstan-headroom");
    // Spread over the pool's zones (one here, so one node holds both).
    let spread = &pod["spec"]["topologySpreadConstraints"][0];
    assert_eq!(
        spread["topologyKey"], "topology.kubernetes.io/zone",
        "{pod}"
    );
    assert_eq!(spread["whenUnsatisfiable"], "DoNotSchedule", "{pod}");
    assert_eq!(
        spread["labelSelector"]["matchExpressions"][0]["key"], "capstan.dev/headroom",
        "{pod}"
    );
    assert_eq!(c.items(&["nodes"]).len(), 1);
    // A pod that fits only once a placeholder goes: kube-scheduler preempts one, and the pod
    // runs on the node that was already there.
    c.deployment(&ns, "web", 1, "1200m", "");
    let node = wait_for("web Running", Duration::from_secs(60), || {
        c.phases(&ns, "web")
            .into_iter()
            .find(|(_, phase, _)| phase == "Running")
            .map(|(_, _, node)| node)
    });
    assert_eq!(node, first, "web took the headroom's node");
    // The preempted placeholder is made again and gets a node of its own.
    wait_for(
        "two placeholders Running again, one on a new node",
        Duration::from_secs(120),
        || {
            let p = placeholders(&c);
            (p.len() == 2
                && p.iter().all(|(_, phase, _)| phase == "Running")
                && p.iter().any(|(_, _, n)| *n != first))
            .then_some(())
        },
    );
    assert_eq!(c.items(&["nodes"]).len(), 2);
    // The pods kube-apiserver admitted (default tolerations added) are the shape asked for:
    // capstan keeps them.
    let uids = || {
        let mut u: Vec<String> = placeholder_pods(&c)
            .iter()
            .map(|p| {
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        u.sort();
        u
    };
    let before = uids();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        uids(),
        before,
        "placeholders kept while their shape is asked for"
    );
    // A new shape asked for: both are made again at it, and run.
    c.ok(&[
        "annotate",
        "nodepools.capstan.dev",
        "default",
        "--overwrite",
        "capstan.dev/headroom=count=2,cpu=400m,memory=256Mi",
    ]);
    wait_for(
        "two placeholders of 400m Running",
        Duration::from_secs(120),
        || {
            let p = placeholder_pods(&c);
            (p.len() == 2
                && p.iter().all(|p| {
                    p["status"]["phase"] == "Running"
                        && p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "400m"
                }))
            .then_some(())
        },
    );
}
