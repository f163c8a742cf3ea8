//! The read-only what-if: `capstan plan --kubeconfig` on a cluster running Karpenter's
//! NodePools prints a plan and changes no object.

use super::{Cluster, script, wait_for};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Every object's resourceVersion, by kind/namespace/name: the cluster-scoped ones and those
/// of namespace `ns` (an earlier test's namespace may still be going away, its pods changing
/// as the namespace controller deletes them; that is not the what-if's doing).
fn versions(c: &Cluster, ns: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for kind in [
        "nodes",
        "pods",
        "deployments",
        "replicasets",
        "poddisruptionbudgets",
        "nodepools.karpenter.sh",
        "nodeclaims.capstan.dev",
        "events.events.k8s.io",
        "leases",
    ] {
        for o in c.items(&[kind, "-A"]) {
            let m = &o["metadata"];
            // Only what capstan could have written: its Events and its Lease.
            if kind == "events.events.k8s.io"
                && o["reportingController"] != "capstan.dev/controller"
            {
                continue;
            }
            if kind == "leases" && m["name"] != "capstan" {
                continue;
            }
            let namespace = m["namespace"].as_str().unwrap_or("");
            if !namespace.is_empty()
                && namespace != ns
                && !matches!(kind, "events.events.k8s.io" | "leases")
            {
                continue;
            }
            out.insert(
                format!(
                    "{kind}/{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                m["resourceVersion"].as_str().unwrap_or("").to_string(),
            );
        }
    }
    out
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn plan_on_a_cluster_with_karpenter_nodepools_prints_a_plan_and_changes_no_object() {
    let c = Cluster::get();
    let karpenter = std::path::PathBuf::from(script(&["karpenter"]));
    c.ok(&[
        "apply",
        "--server-side",
        "-f",
        &karpenter
            .join("crds/karpenter.sh_nodepools.yaml")
            .display()
            .to_string(),
    ]);
    c.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/nodepools.karpenter.sh",
    ]);
    let example =
        std::fs::read_to_string(karpenter.join("examples/v1/general-purpose.yaml")).unwrap();
    let pool: String = example
        .split("\n---")
        .filter(|d| d.contains("kind: NodePool"))
        .collect();
    c.apply(&pool);
    let ns = c.namespace("whatif");
    c.deployment(&ns, "web", 10, "500m", "");
    wait_for("10 pending pods", Duration::from_secs(60), || {
        (c.phases(&ns, "web").len() == 10).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = versions(&c, &ns);
    let out = c.capstan_cli(&["plan", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = plan["nodeclaims"].as_array().unwrap();
    assert!(!claims.is_empty(), "{plan}");
    assert!(claims.iter().all(|x| x["nodepool"] == "general-purpose"));
    let placed: usize = claims
        .iter()
        .map(|x| x["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 10);
    let out = c.capstan_cli(&["consolidate", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = versions(&c, &ns);
    let changed: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .chain(after.keys().filter(|k| !before.contains_key(*k)))
        .collect();
    assert!(changed.is_empty(), "the what-if changed {changed:?}");

    // Karpenter's EC2NodeClass, read directly: its kubelet maxPods and the zones of the
    // subnets its status lists shape the plan. (Karpenter's CRD is the AWS provider's; capstan's
    // EC2NodeClass CRD is the same schema, served here under karpenter.k8s.aws.)
    let crd = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../crds/ec2nodeclasses_capstan_dev.yaml"),
    )
    .unwrap()
    .replace(
        "ec2nodeclasses.capstan.dev",
        "ec2nodeclasses.karpenter.k8s.aws",
    )
    .replace("group: capstan.dev", "group: karpenter.k8s.aws");
    c.apply(&crd);
    c.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/ec2nodeclasses.karpenter.k8s.aws",
    ]);
    let class: String = example
        .split("\n---")
        .filter(|d| d.lines().any(|l| l == "kind: EC2NodeClass"))
        .collect::<String>()
        .replace("${CLUSTER_NAME}", "demo")
        .replace("spec:\n", "spec:\n  kubelet:\n    maxPods: 4\n");
    c.apply(&class);
    c.ok(&[
        "patch",
        "ec2nodeclasses.karpenter.k8s.aws",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"subnets": [{"id": "subnet-b", "zone": "us-east-1b"}]}}"#,
    ]);
    let out = c.capstan_cli(&["plan", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = plan["nodeclaims"].as_array().unwrap();
    let placed: Vec<usize> = claims
        .iter()
        .map(|x| x["pods"].as_array().unwrap().len())
        .collect();
    assert_eq!(placed.iter().sum::<usize>(), 10, "{plan}");
    assert!(
        placed.iter().all(|n| *n <= 4),
        "the node class's maxPods 4 bounds every node: {placed:?}"
    );
    assert!(
        claims.iter().all(|x| x["zone"] == "us-east-1b"),
        "only the zone of the node class's subnets: {plan}"
    );
    let _ = c.kubectl(
        &[
            "delete",
            "crd",
            "ec2nodeclasses.karpenter.k8s.aws",
            "--wait=false",
        ],
        None,
    );
    let _ = c.kubectl(
        &[
            "delete",
            "-f",
            &karpenter
                .join("crds/karpenter.sh_nodepools.yaml")
                .display()
                .to_string(),
            "--wait=false",
        ],
        None,
    );
}
