//! The CRDs: every NodePool in Karpenter's examples/v1 applies with only its apiVersion
//! changed; an invalid one is refused with a message naming the field.

use super::{Cluster, script};

/// Karpenter's examples/v1 NodePools, from the Go module proxy (cached), as capstan.dev/v1.
fn karpenter_examples() -> Vec<(String, String)> {
    let dir = std::path::PathBuf::from(script(&["karpenter"])).join("examples/v1");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let pools: Vec<String> = text
            .split("\n---")
            .filter(|d| d.contains("kind: NodePool"))
            .map(|d| d.replace("apiVersion: karpenter.sh/v1", "apiVersion: capstan.dev/v1"))
            .collect();
        if !pools.is_empty() {
            out.push((
                path.file_name().unwrap().to_string_lossy().to_string(),
                pools.join("\n---\n"),
            ));
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn every_nodepool_in_karpenters_examples_applies_and_an_invalid_one_is_refused_naming_the_field() {
    let c = Cluster::get();
    let examples = karpenter_examples();
    assert!(examples.len() >= 15, "{} example files", examples.len());
    for (file, yaml) in &examples {
        let out = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(yaml));
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // (manifest change, what the refusal names)
    let cases = [
        (
            "consolidationPolicy: Sometimes",
            "spec.disruption.consolidationPolicy",
        ),
        (
            "budgets: [{nodes: \"10%\", schedule: \"0 9 * * *\"}]",
            "'schedule' must be set with 'duration'",
        ),
        (
            "budgets: [{nodes: \"ten\"}]",
            "spec.disruption.budgets[0].nodes",
        ),
    ];
    for (line, names) in cases {
        let yaml = format!(
            "apiVersion: capstan.dev/v1\nkind: NodePool\nmetadata: {{name: bad}}\nspec:\n  template:\n    spec:\n      requirements: []\n  disruption:\n    {line}\n"
        );
        let out = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}: accepted");
        assert!(err.contains(names), "{line}: {err}");
    }
    let requirement = "apiVersion: capstan.dev/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n  template:\n    spec:\n      requirements: [{key: kubernetes.io/arch, operator: In, values: []}]\n";
    let out = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(requirement));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("requirements with operator 'In' must have a value defined"),
        "{err}"
    );
}
