//! Reading the files users already have: `kubectl get … -o json` output (a `List`, `PodList`,
//! `NodeList`…, or a single object), multi-document YAML, NodePool manifests. JSON or YAML is
//! told by content, not by file name.

use crate::convert::{self, Node};
use crate::error::FieldError;
use crate::nodepool::{NodeClaimObject, NodePool, NodePoolObject};
use crate::pod::Pod;
use serde::Deserialize;
use serde_json::Value;

/// A load failure: one line naming the file, the object and the field.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {object}: {error}")]
    Object {
        file: String,
        object: String,
        error: FieldError,
    },
}

/// The kinds of object capstan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Node,
    DaemonSet,
    NodePool,
    NodeClaim,
    PodDisruptionBudget,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
}

impl Kind {
    /// The apiVersion and kind an object of this kind is written with.
    fn type_meta(self) -> (&'static str, &'static str) {
        match self {
            Kind::Pod => ("v1", "Pod"),
            Kind::Node => ("v1", "Node"),
            Kind::DaemonSet => ("apps/v1", "DaemonSet"),
            Kind::NodePool => ("karpenter.sh/v1", "NodePool"),
            Kind::NodeClaim => ("karpenter.sh/v1", "NodeClaim"),
            Kind::PodDisruptionBudget => ("policy/v1", "PodDisruptionBudget"),
            Kind::PersistentVolumeClaim => ("v1", "PersistentVolumeClaim"),
            Kind::PersistentVolume => ("v1", "PersistentVolume"),
            Kind::StorageClass => ("storage.k8s.io/v1", "StorageClass"),
        }
    }

    fn of(api_version: &str, kind: &str) -> Option<Kind> {
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        Some(match (group, kind) {
            ("", "Pod") => Kind::Pod,
            ("", "Node") => Kind::Node,
            ("apps", "DaemonSet") => Kind::DaemonSet,
            ("capstan.dev" | "karpenter.sh", "NodePool") => Kind::NodePool,
            ("capstan.dev" | "karpenter.sh", "NodeClaim") => Kind::NodeClaim,
            ("policy", "PodDisruptionBudget") => Kind::PodDisruptionBudget,
            ("", "PersistentVolumeClaim") => Kind::PersistentVolumeClaim,
            ("", "PersistentVolume") => Kind::PersistentVolume,
            ("storage.k8s.io", "StorageClass") => Kind::StorageClass,
            _ => return None,
        })
    }
}

/// What a file held, converted.
#[derive(Debug, Default)]
pub struct Objects {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    /// DaemonSet pod templates, named after their DaemonSet.
    pub daemonsets: Vec<Pod>,
    pub nodepools: Vec<NodePool>,
    pub nodeclaims: Vec<NodeClaimObject>,
    pub pdbs: Vec<crate::pdb::Pdb>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses.
    pub volumes: crate::volume::Volumes,
    /// Things capstan read but does not use or model, one line each (prefixed with the file).
    pub warnings: Vec<String>,
    /// Objects the file held (list items counted one by one), of any kind.
    pub objects: usize,
    /// `List`s (`List`, `PodList`, …) the file held, empty ones included.
    pub lists: usize,
}

impl Objects {
    /// The file held nothing but empty lists — what `kubectl get … -o json` prints when there
    /// is nothing: a valid empty input, unlike an empty file.
    pub fn only_empty_lists(&self) -> bool {
        self.objects == 0 && self.lists > 0
    }

    /// `Err("FILE: no KIND in FILE (…)")` when a file the command reads for `what` gave none of
    /// it (`count` is how many it gave) and is not just empty lists.
    pub fn require(&self, file: &str, what: &str, count: usize) -> Result<(), LoadError> {
        if count > 0 || self.only_empty_lists() {
            return Ok(());
        }
        let held = if self.objects == 0 {
            "it holds no object".to_string()
        } else {
            let skipped: Vec<&str> = self
                .warnings
                .iter()
                .filter_map(|w| w.strip_prefix(&format!("{file}: ")))
                .filter_map(|w| w.split(": skipped").next())
                .take(3)
                .collect();
            format!("it holds {}", skipped.join(", "))
        };
        Err(LoadError::Parse {
            file: file.to_string(),
            message: format!("no {what} in {file} ({held})"),
        })
    }
}

/// Splits a file into documents, flattening `List`-style objects (`items`).
pub fn documents(file: &str, text: &str) -> Result<Vec<Value>, LoadError> {
    split(file, text).map(|(docs, _)| docs)
}

/// The documents and how many lists held them. A typed list's items (`PodList`'s) are of its
/// kind: those that omit `kind` get it; one of another kind is an error naming it.
fn split(file: &str, text: &str) -> Result<(Vec<Value>, usize), LoadError> {
    let parse_err = |message: String| LoadError::Parse {
        file: file.to_string(),
        message,
    };
    let yaml = |text: &str| -> Result<Vec<Value>, LoadError> {
        let mut docs = Vec::new();
        for d in serde_yaml::Deserializer::from_str(text) {
            let v = Value::deserialize(d).map_err(|e| parse_err(format!("invalid YAML: {e}")))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        Ok(docs)
    };
    let trimmed = text.trim_start();
    let mut docs = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON (as kubectl prints it), or YAML's flow style.
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => docs.extend(items),
            Ok(v) => docs.push(v),
            Err(json_err) => match yaml(text) {
                Ok(d) => {
                    docs = d
                        .into_iter()
                        .flat_map(|v| {
                            if let Value::Array(items) = v {
                                items
                            } else {
                                vec![v]
                            }
                        })
                        .collect()
                }
                Err(_) => return Err(parse_err(format!("invalid JSON: {json_err}"))),
            },
        }
    } else {
        docs = yaml(text)?;
    }
    let mut out = Vec::with_capacity(docs.len());
    let mut lists = 0;
    for d in docs {
        flatten(file, d, &mut out, &mut lists)?;
    }
    Ok((out, lists))
}

fn flatten(file: &str, v: Value, out: &mut Vec<Value>, lists: &mut usize) -> Result<(), LoadError> {
    let list_kind = v
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| *k == "List" || k.ends_with("List"))
        .map(str::to_string);
    let Some(list_kind) = list_kind else {
        out.push(v);
        return Ok(());
    };
    let Some(Value::Array(items)) = v.get("items") else {
        out.push(v);
        return Ok(());
    };
    *lists += 1;
    let item_kind = list_kind.strip_suffix("List").filter(|k| !k.is_empty());
    let api_version = v.get("apiVersion").cloned();
    for (j, mut item) in items.clone().into_iter().enumerate() {
        if let Some(ik) = item_kind {
            match item.get("kind").and_then(Value::as_str) {
                None | Some("") => {
                    if let Value::Object(m) = &mut item {
                        m.insert("kind".into(), Value::String(ik.to_string()));
                        if !m.contains_key("apiVersion") {
                            if let Some(av) = &api_version {
                                m.insert("apiVersion".into(), av.clone());
                            }
                        }
                    }
                }
                Some(k) if k == ik => {}
                Some(k) => {
                    return Err(LoadError::Parse {
                        file: file.to_string(),
                        message: format!(
                            "{list_kind} item {j} ({}): kind {k} in a {list_kind}",
                            object_name(&item)
                        ),
                    });
                }
            }
        }
        flatten(file, item, out, lists)?;
    }
    Ok(())
}

fn object_name(v: &Value) -> String {
    let md = v.get("metadata");
    let name = md
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    match md.and_then(|m| m.get("namespace")).and_then(Value::as_str) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// YAML manifests write `cpu: 1`; Kubernetes' JSON writes `"1"`. Turn numbers in resource maps
/// into strings so both read the same.
fn stringify_quantities(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                let is_resource_map = matches!(
                    k.as_str(),
                    "requests" | "limits" | "overhead" | "allocatable" | "capacity"
                );
                if is_resource_map && let Value::Object(res) = child {
                    for q in res.values_mut() {
                        if let Value::Number(n) = q {
                            *q = Value::String(n.to_string());
                        }
                    }
                    continue;
                }
                stringify_quantities(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(stringify_quantities),
        _ => {}
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(
            if path == "." { String::new() } else { path },
            e.into_inner().to_string(),
        )
    })
}

/// Reads every object of the `wanted` kinds; other objects are skipped with a warning.
pub fn load(file: &str, text: &str, wanted: &[Kind]) -> Result<Objects, LoadError> {
    let mut out = Objects::default();
    let (docs, lists) = split(file, text)?;
    out.objects = docs.len();
    out.lists = lists;
    for (i, mut doc) in docs.into_iter().enumerate() {
        // An item that says nothing of its kind, in a file read for one kind, is of that kind
        // (a `List`'s items as some tools print them).
        if let ([only], Value::Object(m)) = (wanted, &mut doc) {
            if m.get("kind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                let (av, k) = only.type_meta();
                m.insert("kind".into(), Value::String(k.into()));
                m.entry("apiVersion").or_insert(Value::String(av.into()));
            }
        }
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind_name = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = object_name(&doc);
        let Some(kind) = Kind::of(&api_version, &kind_name) else {
            let what = if kind_name.is_empty() {
                format!("document {i} (no kind)")
            } else {
                format!("{kind_name} {name}")
            };
            out.warnings.push(format!(
                "{file}: {what}: skipped (not a kind this command reads)"
            ));
            continue;
        };
        if !wanted.contains(&kind) {
            out.warnings.push(format!("{file}: {kind_name} {name}: skipped (this command does not read {kind_name} objects here)"));
            continue;
        }
        let label = format!("{} {name}", kind_name.to_lowercase());
        let obj_err = |error: FieldError| LoadError::Object {
            file: file.to_string(),
            object: label.clone(),
            error,
        };
        stringify_quantities(&mut doc);
        let mut warnings = Vec::new();
        match kind {
            Kind::Pod => {
                let p: k8s_openapi::api::core::v1::Pod = typed(doc).map_err(obj_err)?;
                out.pods
                    .push(convert::pod(&p, &mut warnings).map_err(obj_err)?);
            }
            Kind::Node => {
                let n: k8s_openapi::api::core::v1::Node = typed(doc).map_err(obj_err)?;
                out.nodes.push(convert::node(&n).map_err(obj_err)?);
            }
            Kind::DaemonSet => {
                let ds: k8s_openapi::api::apps::v1::DaemonSet = typed(doc).map_err(obj_err)?;
                let p = convert::daemonset(&ds, &mut warnings).map_err(obj_err)?;
                out.daemonsets.push(p);
            }
            Kind::NodePool => {
                let obj: NodePoolObject = typed(doc).map_err(obj_err)?;
                out.nodepools
                    .push(NodePool::compile(&obj).map_err(obj_err)?);
            }
            Kind::NodeClaim => {
                let obj: NodeClaimObject = typed(doc).map_err(obj_err)?;
                out.nodeclaims.push(obj);
            }
            Kind::PodDisruptionBudget => {
                let p: k8s_openapi::api::policy::v1::PodDisruptionBudget =
                    typed(doc).map_err(obj_err)?;
                out.pdbs.push(crate::pdb::convert(&p).map_err(obj_err)?);
            }
            Kind::PersistentVolumeClaim => {
                let c: k8s_openapi::api::core::v1::PersistentVolumeClaim =
                    typed(doc).map_err(obj_err)?;
                let c = crate::volume::claim(&c);
                out.volumes.claims.insert(c.key.clone(), c);
            }
            Kind::PersistentVolume => {
                let v: k8s_openapi::api::core::v1::PersistentVolume =
                    typed(doc).map_err(obj_err)?;
                let v = crate::volume::volume(&v).map_err(obj_err)?;
                out.volumes.volumes.insert(v.name.clone(), v);
            }
            Kind::StorageClass => {
                let c: k8s_openapi::api::storage::v1::StorageClass = typed(doc).map_err(obj_err)?;
                let c = crate::volume::storage_class(&c);
                out.volumes.classes.insert(c.name.clone(), c);
            }
        }
        out.warnings.extend(
            warnings
                .into_iter()
                .map(|w| format!("{file}: {label}: {w}")),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_list_and_multi_document_yaml_read_the_same() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}},
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"ns"},"spec":{"containers":[{"name":"c"}]}}]}"#;
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: ns}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 1}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: ns}\nspec: {containers: [{name: c}]}\n";
        let a = load("pods.json", json, &[Kind::Pod]).unwrap();
        let b = load("pods.yaml", yaml, &[Kind::Pod]).unwrap();
        assert_eq!(a.pods, b.pods);
        assert_eq!(a.pods.len(), 2);
        assert_eq!(a.pods[0].requests.cpu, 1000);
    }

    #[test]
    fn bad_input_names_file_object_and_field() {
        let json = r#"{"apiVersion":"v1","kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"12x"}}}]}}]}"#;
        let err = load("pods.json", json, &[Kind::Pod]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pods.json: pod default/web-1: spec.containers[0].resources.requests.cpu: invalid quantity \"12x\": expected a number with an optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
        );
    }

    #[test]
    fn a_wrongly_typed_field_is_named_too() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":"nope"}}"#;
        let err = load("p.json", json, &[Kind::Pod]).unwrap_err().to_string();
        assert!(
            err.starts_with("p.json: pod p: spec.containers: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn unknown_nodepool_fields_are_reported_not_ignored() {
        let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      requirements: []\n      taintz: []\n";
        let err = load("np.yaml", yaml, &[Kind::NodePool])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "np.yaml: nodepool x: spec.template.spec.taintz: unknown field `taintz`"
            ),
            "{err}"
        );
    }

    #[test]
    fn other_kinds_are_skipped_with_a_warning() {
        let yaml = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec: {}\n";
        let o = load("np.yaml", yaml, &[Kind::NodePool]).unwrap();
        assert_eq!(
            o.warnings,
            vec![
                "np.yaml: EC2NodeClass default: skipped (not a kind this command reads)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let err = load("x.json", "{not json", &[Kind::Pod])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("x.json: invalid JSON"), "{err}");
    }
}
