//! The CustomResourceDefinitions capstan serves, generated from the Rust types (schemars, made
//! structural as kube-derive makes them), with printer columns, the status subresource, and
//! Karpenter's validation rules (patterns, enums, CEL) where Karpenter's CRDs have them.
//! `capstan crds` prints them; `crds/` holds them, and a test fails when it drifts.

use crate::resources::{
    ClassStatus, Column, FakeInstanceSpec, FakeNodeClassSpec, GROUP, NodePoolStatus, VERSION, col,
};
use capstan_model::nodepool::{NodeClaimSpec, NodeClaimStatus, NodePoolSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

/// The schema of `T`, structural, as Kubernetes takes it.
fn schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
        .with_transform(StructuralSchemaRewriter)
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("title");
        o.remove("$schema");
    }
    strip_defaults(&mut v);
    v
}

/// Removes the `default`s schemars writes for `#[serde(default)]` fields: the API server
/// would write them into every object, and a manifest should read back as it was applied.
fn strip_defaults(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("default");
            for (k, child) in o.iter_mut() {
                // Inside `properties` the keys are field names, not keywords.
                if k == "properties" {
                    if let Value::Object(props) = child {
                        for p in props.values_mut() {
                            strip_defaults(p);
                        }
                    }
                } else {
                    strip_defaults(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}

/// The sub-schema at a path of property names (`items` steps into arrays).
fn at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut cur = v;
    for p in path {
        cur = if *p == "items" {
            &mut cur["items"]
        } else {
            &mut cur["properties"][*p]
        };
    }
    cur
}

fn rule(v: &mut Value, path: &[&str], rule: &str, message: &str) {
    let s = at(v, path);
    let list = s
        .as_object_mut()
        .expect("a schema object")
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]));
    list.as_array_mut()
        .expect("a list")
        .push(json!({"rule": rule, "message": message}));
}

fn set(v: &mut Value, path: &[&str], key: &str, value: Value) {
    at(v, path)[key] = value;
}

const DURATION: &str = r"^(([0-9]+(s|m|h))+|Never)$";
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const OPERATORS: [&str; 8] = [
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "Gte",
    "Lte",
];
const RESTRICTED_RULE: &str = "self in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.find(\"^([^/]+)\").endsWith(\"karpenter.sh\")";

/// Karpenter's rules for requirements (NodePool templates and NodeClaims alike).
fn requirement_rules(v: &mut Value, reqs: &[&str]) {
    let item: Vec<&str> = reqs.iter().copied().chain(["items"]).collect();
    let key: Vec<&str> = item.iter().copied().chain(["key"]).collect();
    set(v, &key, "maxLength", json!(316));
    set(
        v,
        &key,
        "pattern",
        json!(
            r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        ),
    );
    rule(
        v,
        &key,
        RESTRICTED_RULE,
        "label domain \"karpenter.sh\" is restricted",
    );
    let op: Vec<&str> = item.iter().copied().chain(["operator"]).collect();
    set(v, &op, "enum", json!(OPERATORS));
    let min: Vec<&str> = item.iter().copied().chain(["minValues"]).collect();
    set(v, &min, "minimum", json!(1));
    set(v, &min, "maximum", json!(50));
    set(v, reqs, "maxItems", json!(100));
    rule(
        v,
        reqs,
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        "requirements with operator 'In' must have a value defined",
    );
    rule(
        v,
        reqs,
        "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    );
    rule(
        v,
        reqs,
        "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    );
}

fn taint_rules(v: &mut Value, list: &[&str]) {
    let effect: Vec<&str> = list.iter().copied().chain(["items", "effect"]).collect();
    set(v, &effect, "enum", json!(TAINT_EFFECTS));
    let key: Vec<&str> = list.iter().copied().chain(["items", "key"]).collect();
    set(v, &key, "minLength", json!(1));
    set(
        v,
        &key,
        "pattern",
        json!(
            r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        ),
    );
}

fn class_ref_rules(v: &mut Value, path: &[&str]) {
    for f in ["group", "kind", "name"] {
        let p: Vec<&str> = path.iter().copied().chain([f]).collect();
        set(v, &p, "minLength", json!(1));
    }
    set(v, path, "required", json!(["group", "kind", "name"]));
}

fn nodepool_spec() -> Value {
    let mut v = schema::<NodePoolSpec>();
    let t = ["template", "spec"];
    requirement_rules(&mut v, &["template", "spec", "requirements"]);
    taint_rules(&mut v, &["template", "spec", "taints"]);
    taint_rules(&mut v, &["template", "spec", "startupTaints"]);
    class_ref_rules(&mut v, &["template", "spec", "nodeClassRef"]);
    set(
        &mut v,
        &[t[0], t[1], "expireAfter"],
        "pattern",
        json!(DURATION),
    );
    set(
        &mut v,
        &[t[0], t[1], "terminationGracePeriod"],
        "pattern",
        json!(r"^([0-9]+(s|m|h))+$"),
    );
    let d = ["disruption"];
    set(
        &mut v,
        &[d[0], "consolidationPolicy"],
        "enum",
        json!(["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"]),
    );
    set(
        &mut v,
        &[d[0], "consolidateAfter"],
        "pattern",
        json!(DURATION),
    );
    let b = ["disruption", "budgets"];
    set(&mut v, &b, "maxItems", json!(50));
    set(
        &mut v,
        &[b[0], b[1], "items", "nodes"],
        "pattern",
        json!(r"^((100|[0-9]{1,2})%|[0-9]+)$"),
    );
    set(
        &mut v,
        &[b[0], b[1], "items", "duration"],
        "pattern",
        json!(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"),
    );
    set(
        &mut v,
        &[b[0], b[1], "items", "schedule"],
        "pattern",
        json!(
            r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
        ),
    );
    set(
        &mut v,
        &[b[0], b[1], "items", "reasons", "items"],
        "enum",
        json!(["Underutilized", "Empty", "Drifted"]),
    );
    rule(
        &mut v,
        &[b[0], b[1], "items"],
        "has(self.schedule) == has(self.duration)",
        "'schedule' must be set with 'duration'",
    );
    set(&mut v, &["weight"], "minimum", json!(1));
    set(&mut v, &["weight"], "maximum", json!(100));
    v
}

fn nodeclaim_spec() -> Value {
    let mut v = schema::<NodeClaimSpec>();
    requirement_rules(&mut v, &["requirements"]);
    taint_rules(&mut v, &["taints"]);
    taint_rules(&mut v, &["startupTaints"]);
    class_ref_rules(&mut v, &["nodeClassRef"]);
    set(&mut v, &["expireAfter"], "pattern", json!(DURATION));
    // A claim's spec is immutable once made, as Karpenter's is.
    let o = v.as_object_mut().expect("an object");
    o.insert(
        "x-kubernetes-validations".into(),
        json!([{"rule": "self == oldSelf", "message": "spec is immutable"}]),
    );
    v
}

/// Karpenter's EC2NodeClass rules, on capstan's AWSNodeClass.
fn awsnodeclass_spec() -> Value {
    let mut v = schema::<capstan_model::awsnodeclass::AwsNodeClassSpec>();
    set(
        &mut v,
        &["amiFamily"],
        "enum",
        json!(capstan_model::awsnodeclass::AMI_FAMILIES),
    );
    for (terms, id) in [
        ("subnetSelectorTerms", r"subnet-[0-9a-z]+"),
        ("securityGroupSelectorTerms", r"sg-[0-9a-z]+"),
        ("amiSelectorTerms", r"ami-[0-9a-z]+"),
    ] {
        set(&mut v, &[terms], "maxItems", json!(30));
        set(&mut v, &[terms], "minItems", json!(1));
        set(&mut v, &[terms, "items", "id"], "pattern", json!(id));
    }
    rule(
        &mut v,
        &["subnetSelectorTerms", "items"],
        "has(self.tags) || has(self.id)",
        "expected at least one, got none, ['tags', 'id']",
    );
    rule(
        &mut v,
        &["subnetSelectorTerms", "items"],
        "!has(self.id) || !has(self.tags)",
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
    );
    rule(
        &mut v,
        &["securityGroupSelectorTerms", "items"],
        "has(self.tags) || has(self.id) || has(self.name)",
        "expected at least one, got none, ['tags', 'id', 'name']",
    );
    rule(
        &mut v,
        &["amiSelectorTerms", "items"],
        "has(self.alias) || has(self.tags) || has(self.id) || has(self.name) || has(self.ssmParameter)",
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
    );
    rule(
        &mut v,
        &["amiSelectorTerms", "items"],
        "!has(self.alias) || (!has(self.id) && !has(self.tags) && !has(self.name) && !has(self.owner))",
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    );
    let alias = ["amiSelectorTerms", "items", "alias"];
    set(&mut v, &alias, "maxLength", json!(30));
    set(&mut v, &alias, "pattern", json!(r"^[a-zA-Z0-9]+@.+$"));
    rule(
        &mut v,
        &alias,
        "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
    );
    for terms in [
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "amiSelectorTerms",
    ] {
        set(
            &mut v,
            &[terms, "items", "tags"],
            "maxProperties",
            json!(20),
        );
    }
    rule(
        &mut v,
        &["amiSelectorTerms"],
        "!(self.exists(x, has(x.alias)) && self.size() != 1)",
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    );
    set(&mut v, &["blockDeviceMappings"], "maxItems", json!(50));
    set(
        &mut v,
        &["blockDeviceMappings", "items", "ebs", "volumeType"],
        "enum",
        json!(["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]),
    );
    set(
        &mut v,
        &["metadataOptions", "httpTokens"],
        "enum",
        json!(["required", "optional"]),
    );
    for f in ["httpEndpoint", "httpProtocolIPv6"] {
        set(
            &mut v,
            &["metadataOptions", f],
            "enum",
            json!(["enabled", "disabled"]),
        );
    }
    set(&mut v, &["instanceStorePolicy"], "enum", json!(["RAID0"]));
    let o = v.as_object_mut().expect("an object");
    let mut rules = vec![json!({
        "rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
        "message": "must specify exactly one of ['role', 'instanceProfile']"
    })];
    for (alias, family) in [
        ("al2", "AL2"),
        ("al2023", "AL2023"),
        ("bottlerocket", "Bottlerocket"),
        ("windows2019", "Windows2019"),
        ("windows2022", "Windows2022"),
        ("windows2025", "Windows2025"),
    ] {
        rules.push(json!({
            "rule": format!("!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"),
            "message": format!("if set, amiFamily must be '{family}' or 'Custom' when using an {family} alias"),
        }));
    }
    rules.push(json!({
        "rule": "self.amiSelectorTerms.exists(x, has(x.alias)) || has(self.amiFamily)",
        "message": "must specify amiFamily if amiSelectorTerms does not contain an alias"
    }));
    o.insert("x-kubernetes-validations".into(), json!(rules));
    preserve_unknown(&mut v);
    v
}

/// Free-form objects (the kubelet configuration, fields kept as written) as Kubernetes
/// takes them: `x-kubernetes-preserve-unknown-fields` rather than `additionalProperties: true`.
fn preserve_unknown(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("additionalProperties") == Some(&Value::Bool(true)) {
                o.remove("additionalProperties");
                o.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
            o.values_mut().for_each(preserve_unknown);
        }
        Value::Array(a) => a.iter_mut().for_each(preserve_unknown),
        _ => {}
    }
}

/// The AWS provider's node class: one schema under two kinds (capstan's name and Karpenter's).
fn node_class_crd(kind: &'static str, plural: &'static str, singular: &'static str) -> Value {
    crd(Definition {
        kind,
        plural,
        singular,
        spec: awsnodeclass_spec(),
        status: schema::<capstan_model::awsnodeclass::AwsNodeClassStatus>(),
        spec_required: true,
        columns: vec![
            col(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
                0,
            ),
            col("Age", "date", ".metadata.creationTimestamp", 0),
            col("Role", "string", ".spec.role", 1),
        ],
    })
}

fn columns(cols: &[Column]) -> Value {
    cols.iter()
        .map(|c| {
            let mut o = json!({"name": c.name, "type": c.type_, "jsonPath": c.json_path});
            if c.priority > 0 {
                o["priority"] = json!(c.priority);
            }
            o
        })
        .collect()
}

struct Definition {
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    spec: Value,
    status: Value,
    spec_required: bool,
    columns: Vec<Column>,
}

fn crd(d: Definition) -> Value {
    let props = json!({
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": d.spec,
        "status": d.status,
    });
    let mut schema = json!({"type": "object", "properties": props});
    if d.spec_required {
        schema["required"] = json!(["spec"]);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", d.plural)},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": d.kind,
                "listKind": format!("{}List", d.kind),
                "plural": d.plural,
                "singular": d.singular,
                "categories": ["capstan"],
            },
            "scope": "Cluster",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns(&d.columns),
            }],
        },
    })
}

/// Every CRD capstan serves, in a fixed order.
pub fn definitions() -> Vec<Value> {
    vec![
        crd(Definition {
            kind: "NodePool",
            plural: "nodepools",
            singular: "nodepool",
            spec: nodepool_spec(),
            status: schema::<NodePoolStatus>(),
            spec_required: true,
            columns: vec![
                col(
                    "NodeClass",
                    "string",
                    ".spec.template.spec.nodeClassRef.name",
                    0,
                ),
                col("Nodes", "string", ".status.resources.nodes", 0),
                col(
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0,
                ),
                col("Age", "date", ".metadata.creationTimestamp", 0),
                col("Weight", "integer", ".spec.weight", 1),
                col("CPU", "string", ".status.resources.cpu", 1),
                col("Memory", "string", ".status.resources.memory", 1),
            ],
        }),
        crd(Definition {
            kind: "NodeClaim",
            plural: "nodeclaims",
            singular: "nodeclaim",
            spec: nodeclaim_spec(),
            status: schema::<NodeClaimStatus>(),
            spec_required: true,
            columns: vec![
                col("Type", "string", ".status.instanceType", 0),
                col("Capacity", "string", ".status.capacityType", 0),
                col("Zone", "string", ".status.zone", 0),
                col("Node", "string", ".status.nodeName", 0),
                col(
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0,
                ),
                col("Age", "date", ".metadata.creationTimestamp", 0),
                col("ID", "string", ".status.providerID", 1),
                col(
                    "NodePool",
                    "string",
                    ".metadata.labels.karpenter\\.sh/nodepool",
                    1,
                ),
                col("NodeClass", "string", ".spec.nodeClassRef.name", 1),
                col(
                    "Drifted",
                    "string",
                    ".status.conditions[?(@.type==\"Drifted\")].status",
                    1,
                ),
            ],
        }),
        crd(Definition {
            kind: "FakeNodeClass",
            plural: "fakenodeclasses",
            singular: "fakenodeclass",
            spec: schema::<FakeNodeClassSpec>(),
            status: schema::<ClassStatus>(),
            spec_required: false,
            columns: vec![
                col("BootDelay", "string", ".spec.bootDelay", 0),
                col(
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0,
                ),
                col("Age", "date", ".metadata.creationTimestamp", 0),
            ],
        }),
        node_class_crd("AWSNodeClass", "awsnodeclasses", "awsnodeclass"),
        node_class_crd("EC2NodeClass", "ec2nodeclasses", "ec2nodeclass"),
        crd(Definition {
            kind: "FakeInstance",
            plural: "fakeinstances",
            singular: "fakeinstance",
            spec: schema::<FakeInstanceSpec>(),
            status: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            spec_required: true,
            columns: vec![
                col("Type", "string", ".spec.instanceType", 0),
                col("Zone", "string", ".spec.zone", 0),
                col("Capacity", "string", ".spec.capacityType", 0),
                col("Claim", "string", ".spec.claimName", 0),
                col("Node", "string", ".spec.nodeName", 0),
                col("Age", "date", ".metadata.creationTimestamp", 0),
            ],
        }),
    ]
}

/// The CRDs as typed objects, to apply.
pub fn crds() -> Vec<CustomResourceDefinition> {
    definitions()
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("a generated CRD is a CustomResourceDefinition"))
        .collect()
}

/// The file name of a CRD in `crds/`.
pub fn file_name(crd: &Value) -> String {
    format!(
        "{}.yaml",
        crd["metadata"]["name"]
            .as_str()
            .unwrap_or("crd")
            .replace('.', "_")
    )
}

/// One CRD as YAML.
pub fn to_yaml(crd: &Value) -> String {
    serde_yaml::to_string(&sorted(crd)).expect("a CRD serializes")
}

/// Keys in sorted order at every level, whether or not serde_json keeps insertion order (a
/// dependency's `preserve_order` feature would otherwise change the files).
fn sorted(v: &Value) -> serde_yaml::Value {
    match v {
        Value::Object(o) => {
            let keys: std::collections::BTreeMap<&String, &Value> = o.iter().collect();
            let mut m = serde_yaml::Mapping::new();
            for (k, v) in keys {
                m.insert(serde_yaml::Value::String(k.clone()), sorted(v));
            }
            serde_yaml::Value::Mapping(m)
        }
        Value::Array(a) => serde_yaml::Value::Sequence(a.iter().map(sorted).collect()),
        other => serde_yaml::to_value(other).expect("a scalar"),
    }
}

/// Every CRD, as multi-document YAML (what `capstan crds` prints).
pub fn yaml() -> String {
    definitions()
        .iter()
        .map(|c| format!("---\n{}", to_yaml(c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_crds_are_the_ones_the_types_generate() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds");
        for c in definitions() {
            let name = file_name(&c);
            let path = format!("{dir}/{name}");
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == to_yaml(&c),
                "crds/{name} drifted from the Rust types: run `cargo run -- crds --out crds`"
            );
        }
    }

    #[test]
    fn every_crd_parses_as_a_custom_resource_definition_with_a_status_subresource() {
        let crds = crds();
        assert_eq!(crds.len(), 6);
        for c in &crds {
            let v = &c.spec.versions[0];
            assert!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some()
            );
            assert_eq!(c.spec.scope, "Cluster");
        }
    }

    #[test]
    fn nodepool_budgets_carry_karpenters_rules() {
        let mut np = nodepool_spec();
        let items = at(&mut np, &["disruption", "budgets", "items"]);
        assert_eq!(
            items["x-kubernetes-validations"][0]["message"],
            "'schedule' must be set with 'duration'"
        );
        assert_eq!(
            items["properties"]["nodes"]["pattern"],
            r"^((100|[0-9]{1,2})%|[0-9]+)$"
        );
    }
}
