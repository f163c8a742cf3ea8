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

/// Karpenter's examples/v1 EC2NodeClasses, each document with only its group changed.
fn karpenter_node_classes() -> Vec<(String, String)> {
    let dir = std::path::PathBuf::from(script(&["karpenter"])).join("examples/v1");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for d in text
            .split("\n---")
            .filter(|d| d.lines().any(|l| l == "kind: EC2NodeClass"))
        {
            out.push((
                path.file_name().unwrap().to_string_lossy().to_string(),
                d.replace(
                    "apiVersion: karpenter.k8s.aws/v1",
                    "apiVersion: capstan.dev/v1",
                ),
            ));
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs the local control plane (scripts/control-plane.sh up); bash .ci/run runs it"]
fn every_ec2nodeclass_in_karpenters_examples_applies_with_only_its_group_changed_and_loads() {
    let c = Cluster::get();
    let classes = karpenter_node_classes();
    assert!(classes.len() >= 15, "{} node classes", classes.len());
    for (file, yaml) in &classes {
        // As an EC2NodeClass under capstan.dev, and as an AWSNodeClass.
        for doc in [
            yaml.clone(),
            yaml.replace("kind: EC2NodeClass", "kind: AWSNodeClass"),
        ] {
            let out = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&doc));
            assert!(
                out.status.success(),
                "{file}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // And the provider reads it: the spec loads and passes Karpenter's rules.
        let v: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let spec: capstan_model::awsnodeclass::AwsNodeClassSpec =
            serde_json::from_value(v["spec"].clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
        spec.validate().unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    // (change to a valid node class, what the refusal names)
    let base = "apiVersion: capstan.dev/v1\nkind: AWSNodeClass\nmetadata: {name: bad}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n";
    let cases = [
        (
            "",
            "must specify exactly one of ['role', 'instanceProfile']",
        ),
        (
            "  role: r\n  amiFamily: AL2\n",
            "amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
        ),
        (
            "  role: r\n  metadataOptions: {httpTokens: sometimes}\n",
            "spec.metadataOptions.httpTokens",
        ),
    ];
    for (extra, names) in cases {
        let yaml = format!("{base}{extra}");
        let out = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra}: accepted");
        assert!(err.contains(names), "{extra}: {err}");
    }
}
