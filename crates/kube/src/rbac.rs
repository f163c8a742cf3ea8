//! The permissions capstan's requests need, as data: every kind it lists and watches, every
//! write (`Write`'s table in ARCHITECTURE.md), the AWS provider's node classes, the fake
//! provider's objects, and the Lease. The Helm chart's ClusterRole and Role grant exactly
//! these (a test compares its rendering with this list), and the end-to-end tests run the
//! controller under the chart's ServiceAccount, so a permission missing here fails them.

use std::collections::BTreeSet;

/// (API group, resource, verb).
pub type Permission = (&'static str, &'static str, &'static str);

/// Cluster-wide, for every provider.
pub const CLUSTER: &[Permission] = &[
    // Reads: a list, then a watch, per kind.
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("policy", "poddisruptionbudgets", "list"),
    ("policy", "poddisruptionbudgets", "watch"),
    ("apps", "daemonsets", "list"),
    ("apps", "daemonsets", "watch"),
    // Volume topology: what a pod's claims require of its node.
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumeclaims", "watch"),
    ("", "persistentvolumes", "list"),
    ("", "persistentvolumes", "watch"),
    ("storage.k8s.io", "storageclasses", "list"),
    ("storage.k8s.io", "storageclasses", "watch"),
    // Termination waits for a node's volumes to detach.
    ("storage.k8s.io", "volumeattachments", "list"),
    ("storage.k8s.io", "volumeattachments", "watch"),
    ("capstan.dev", "nodepools", "list"),
    ("capstan.dev", "nodepools", "watch"),
    ("capstan.dev", "nodeclaims", "list"),
    ("capstan.dev", "nodeclaims", "watch"),
    // Writes.
    ("capstan.dev", "nodeclaims", "create"),
    ("capstan.dev", "nodeclaims", "patch"),
    ("capstan.dev", "nodeclaims", "delete"),
    ("capstan.dev", "nodeclaims/status", "patch"),
    ("capstan.dev", "nodepools/status", "patch"),
    ("", "nodes", "patch"),
    ("", "nodes", "delete"),
    ("", "pods", "delete"),
    ("", "pods/eviction", "create"),
    // The node launched for a pending pod, as it registers (`Write::Nominate`).
    ("", "pods/status", "patch"),
    ("events.k8s.io", "events", "create"),
    // The AWS provider's node classes: listed, their status written.
    ("capstan.dev", "awsnodeclasses", "list"),
    ("capstan.dev", "ec2nodeclasses", "list"),
    ("capstan.dev", "awsnodeclasses/status", "patch"),
    ("capstan.dev", "ec2nodeclasses/status", "patch"),
];

/// Cluster-wide, for `--provider fake` besides: its instances and node classes are objects,
/// and it registers the Nodes kwok then runs.
pub const FAKE: &[Permission] = &[
    ("capstan.dev", "fakeinstances", "get"),
    ("capstan.dev", "fakeinstances", "list"),
    ("capstan.dev", "fakeinstances", "create"),
    ("capstan.dev", "fakeinstances", "delete"),
    ("capstan.dev", "fakenodeclasses", "get"),
    ("", "nodes", "create"),
    // Its device plugins register GPUs in a Node's status (`devicePluginDelay`).
    ("", "nodes/status", "patch"),
];

/// In the Lease's namespace (capstan's own): leader election, and the NodePools' headroom
/// placeholder pods (deleted with the cluster-wide `pods delete`).
pub const LEASE: &[Permission] = &[
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    ("", "pods", "create"),
];

/// The cluster-wide permissions for a provider.
pub fn cluster(provider: &str) -> BTreeSet<Permission> {
    let mut p: BTreeSet<Permission> = CLUSTER.iter().copied().collect();
    if provider == "fake" {
        p.extend(FAKE.iter().copied());
    }
    p
}

/// An RBAC object's rules as (group, resource, verb) triples.
pub fn granted(rules: &serde_json::Value) -> BTreeSet<(String, String, String)> {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for r in rules.as_array().into_iter().flatten() {
        for g in strings(&r["apiGroups"]) {
            for res in strings(&r["resources"]) {
                for v in strings(&r["verbs"]) {
                    out.insert((g.clone(), res.clone(), v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(p: impl IntoIterator<Item = Permission>) -> BTreeSet<(String, String, String)> {
        p.into_iter()
            .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
            .collect()
    }

    /// The chart's rendered ClusterRole and Role for one values file.
    fn rendered(golden: &str) -> (serde_json::Value, serde_json::Value) {
        let mut cluster = serde_json::Value::Null;
        let mut role = serde_json::Value::Null;
        for doc in serde_yaml::Deserializer::from_str(golden) {
            let v: serde_json::Value = match serde::Deserialize::deserialize(doc) {
                Ok(v) => v,
                Err(_) => continue,
            };
            match v["kind"].as_str() {
                Some("ClusterRole") => cluster = v["rules"].clone(),
                Some("Role") => role = v["rules"].clone(),
                _ => {}
            }
        }
        (cluster, role)
    }

    #[test]
    fn the_charts_roles_grant_exactly_the_requests_capstan_makes() {
        let cases = [
            ("aws", include_str!("../../../deploy/chart/golden/aws.yaml")),
            (
                "aws",
                include_str!("../../../deploy/chart/golden/pinned.yaml"),
            ),
            (
                "fake",
                include_str!("../../../deploy/chart/golden/fake.yaml"),
            ),
        ];
        for (provider, golden) in cases {
            let (cluster_rules, role_rules) = rendered(golden);
            assert_eq!(
                granted(&cluster_rules),
                owned(cluster(provider)),
                "ClusterRole for {provider}"
            );
            assert_eq!(
                granted(&role_rules),
                owned(LEASE.iter().copied()),
                "Role for {provider}"
            );
        }
    }
}
