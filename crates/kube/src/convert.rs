//! Kubernetes objects into capstan's compact forms, and back for the objects capstan writes.
//! An object that does not convert becomes [`Object::Invalid`] with one line naming the field:
//! the controller says so and leaves it alone.

use crate::resources::API_VERSION;
use capstan_controller::api::{Invalid, Kind, Meta, Object};
use capstan_model::nodepool::{NodeClaimObject, NodePoolObject};
use capstan_model::{NodeClaim, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use serde_json::Value;
use std::sync::Arc;

/// What preconditions need from an object's metadata.
pub fn meta(m: &ObjectMeta) -> Meta {
    Meta {
        uid: m.uid.clone().unwrap_or_default(),
        resource_version: m.resource_version.clone().unwrap_or_default(),
    }
}

fn key(m: &ObjectMeta) -> String {
    match &m.namespace {
        Some(ns) => format!("{ns}/{}", m.name.clone().unwrap_or_default()),
        None => m.name.clone().unwrap_or_default(),
    }
}

fn invalid(kind: Kind, m: &ObjectMeta, error: String) -> Object {
    Object::Invalid(Arc::new(Invalid {
        kind,
        key: key(m),
        error,
    }))
}

pub fn pod(p: &Pod) -> Object {
    let mut warnings = Vec::new();
    match capstan_model::convert::pod(p, &mut warnings) {
        Ok(mut c) => {
            c.uid = p.metadata.uid.clone().unwrap_or_default();
            Object::Pod(Arc::new(c))
        }
        Err(e) => invalid(Kind::Pod, &p.metadata, e.to_string()),
    }
}

pub fn node(n: &Node) -> Object {
    match capstan_model::convert::node(n) {
        Ok(c) => Object::Node(Arc::new(c)),
        Err(e) => invalid(Kind::Node, &n.metadata, e.to_string()),
    }
}

pub fn pdb(p: &PodDisruptionBudget) -> Object {
    match capstan_model::pdb::convert(p) {
        Ok(c) => Object::Pdb(Arc::new(c)),
        Err(e) => invalid(Kind::Pdb, &p.metadata, e.to_string()),
    }
}

pub fn daemonset(d: &DaemonSet) -> Object {
    let mut warnings = Vec::new();
    match capstan_model::convert::daemonset(d, &mut warnings) {
        Ok(p) => Object::DaemonSet(Arc::new(p)),
        Err(e) => invalid(Kind::DaemonSet, &d.metadata, e.to_string()),
    }
}

pub fn storage_class(c: &StorageClass) -> Object {
    Object::StorageClass(Arc::new(capstan_model::volume::storage_class(c)))
}

pub fn persistent_volume(v: &PersistentVolume) -> Object {
    match capstan_model::volume::volume(v) {
        Ok(v) => Object::PersistentVolume(Arc::new(v)),
        Err(e) => invalid(Kind::PersistentVolume, &v.metadata, e.to_string()),
    }
}

pub fn volume_attachment(a: &VolumeAttachment) -> Object {
    Object::VolumeAttachment(Arc::new(capstan_model::volume::attachment(a)))
}

pub fn persistent_volume_claim(c: &PersistentVolumeClaim) -> Object {
    Object::PersistentVolumeClaim(Arc::new(capstan_model::volume::claim(c)))
}

/// A dynamic object as JSON, without what capstan never reads (managedFields).
fn json_of(d: &DynamicObject) -> Value {
    let mut d = d.clone();
    d.metadata.managed_fields = None;
    serde_json::to_value(&d).unwrap_or(Value::Null)
}

/// A NodePool (`capstan.dev/v1` or `karpenter.sh/v1`). Budgets that do not compile are kept
/// (the pool allows no disruption); anything else wrong makes it invalid.
pub fn nodepool(d: &DynamicObject) -> Object {
    let parsed: Result<NodePoolObject, String> =
        serde_json::from_value(json_of(d)).map_err(|e| e.to_string());
    let compiled =
        parsed.and_then(|o| NodePool::compile_fail_closed(&o).map_err(|e| e.to_string()));
    match compiled {
        Ok(p) => Object::NodePool(Arc::new(p)),
        Err(e) => invalid(Kind::NodePool, &d.metadata, e),
    }
}

pub fn nodeclaim_object(d: &DynamicObject) -> Result<NodeClaimObject, String> {
    serde_json::from_value(json_of(d)).map_err(|e| e.to_string())
}

/// A NodeClaim. Times are unix seconds: capstan's clock on a cluster is the wall clock.
pub fn nodeclaim(d: &DynamicObject) -> Object {
    let compact = nodeclaim_object(d)
        .and_then(|o| NodeClaim::from_object(&o, 0.0).map_err(|e| e.to_string()));
    match compact {
        Ok(c) => Object::NodeClaim(Arc::new(c)),
        Err(e) => invalid(Kind::NodeClaim, &d.metadata, e),
    }
}

/// The object to create for a new claim: its metadata as a client sends it (no uid,
/// timestamps or status: the server sets them).
pub fn new_claim(c: &NodeClaim) -> Value {
    let mut o = serde_json::to_value(c.to_object(0.0)).unwrap_or(Value::Null);
    o["apiVersion"] = API_VERSION.into();
    if let Some(m) = o["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("creationTimestamp");
        m.remove("deletionTimestamp");
    }
    if let Some(obj) = o.as_object_mut() {
        obj.remove("status");
    }
    o
}

/// The image headroom placeholders run: it sleeps and holds the room.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// A headroom placeholder as the API server takes it: capstan's compact pod (name, labels,
/// requests, node selector, tolerations) at the headroom PriorityClass, running the pause
/// image, gone at once when preempted.
pub fn new_headroom_pod(p: &capstan_model::Pod) -> Value {
    use capstan_model::resources::format_amount;
    use capstan_model::taints::TolerationOperator;
    let mut requests = serde_json::Map::new();
    for (name, v) in p.requests.iter() {
        if v > 0 && name != capstan_model::resources::PODS {
            requests.insert(name.to_string(), format_amount(name, v).into());
        }
    }
    let tolerations: Vec<Value> = p
        .tolerations
        .iter()
        .map(|t| {
            let mut o = serde_json::json!({
                "key": t.key,
                "operator": match t.operator {
                    TolerationOperator::Exists => "Exists",
                    TolerationOperator::Equal => "Equal",
                },
            });
            if t.operator == TolerationOperator::Equal {
                o["value"] = t.value.clone().into();
            }
            if let Some(e) = t.effect {
                o["effect"] = e.as_str().into();
            }
            o
        })
        .collect();
    let spread: Vec<Value> = p.spread.iter().map(spread_constraint).collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": p.labels},
        "spec": {
            "priorityClassName": capstan_model::headroom::PRIORITY_CLASS,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "nodeSelector": p.node_selector.single_values(),
            "tolerations": tolerations,
            "topologySpreadConstraints": spread,
            "containers": [{
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"requests": requests},
            }],
        },
    })
}

/// A topology spread constraint as the Pod API spells it (its selector as matchExpressions).
fn spread_constraint(t: &capstan_model::pod::TopologySpread) -> Value {
    use capstan_model::pod::{InclusionPolicy, WhenUnsatisfiable};
    use capstan_model::selector::SelectorOp;
    let policy = |p: InclusionPolicy| match p {
        InclusionPolicy::Honor => "Honor",
        InclusionPolicy::Ignore => "Ignore",
    };
    let mut o = serde_json::json!({
        "maxSkew": t.max_skew,
        "topologyKey": t.topology_key,
        "whenUnsatisfiable": match t.when_unsatisfiable {
            WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
            WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
        },
        "nodeAffinityPolicy": policy(t.node_affinity_policy),
        "nodeTaintsPolicy": policy(t.node_taints_policy),
    });
    if let Some(sel) = &t.selector {
        let exprs: Vec<Value> = sel
            .requirements
            .iter()
            .map(|r| {
                let (op, values) = match r.op {
                    SelectorOp::In => ("In", Some(&r.values)),
                    SelectorOp::NotIn => ("NotIn", Some(&r.values)),
                    SelectorOp::Exists => ("Exists", None),
                    SelectorOp::DoesNotExist => ("DoesNotExist", None),
                };
                let mut e = serde_json::json!({"key": r.key, "operator": op});
                if let Some(v) = values {
                    e["values"] = v.clone().into();
                }
                e
            })
            .collect();
        o["labelSelector"] = serde_json::json!({ "matchExpressions": exprs });
    }
    if let Some(m) = t.min_domains {
        o["minDomains"] = m.into();
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_headroom_placeholder_reads_back_as_the_pod_capstan_asked_for() {
        use capstan_model::taints::{Effect, Toleration};
        let mut p = capstan_model::Pod {
            name: "capstan-headroom-general-0".into(),
            namespace: "kube-system".into(),
            priority: capstan_model::headroom::PRIORITY,
            never_preempts: true,
            ..Default::default()
        };
        p.labels
            .insert(capstan_model::headroom::LABEL.into(), "general".into());
        p.requests.cpu = 1500;
        p.requests.memory = 2 << 30;
        p.requests.pods = 1;
        p.node_selector
            .add(capstan_model::requirements::Requirement::in_values(
                capstan_model::labels::NODEPOOL,
                ["general"],
            ));
        p.tolerations
            .push(Toleration::exists("dedicated", Some(Effect::NoSchedule)));
        p.spread.push(capstan_model::pod::TopologySpread {
            max_skew: 1,
            topology_key: capstan_model::labels::ZONE.into(),
            when_unsatisfiable: capstan_model::pod::WhenUnsatisfiable::DoNotSchedule,
            selector: Some(capstan_model::selector::LabelSelector::from_match_labels(
                &p.labels,
            )),
            min_domains: None,
            node_affinity_policy: capstan_model::pod::InclusionPolicy::Honor,
            node_taints_policy: capstan_model::pod::InclusionPolicy::Ignore,
        });
        let mut v = new_headroom_pod(&p);
        assert_eq!(v["spec"]["priorityClassName"], "capstan-headroom");
        assert_eq!(
            v["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1500m", "memory": "2Gi"})
        );
        // As admission resolves the class.
        v["spec"]["priority"] = json!(-1);
        v["spec"]["preemptionPolicy"] = json!("Never");
        let k: Pod = serde_json::from_value(v).unwrap();
        let Object::Pod(back) = pod(&k) else {
            panic!("a pod");
        };
        assert_eq!(back.key(), p.key());
        assert_eq!(back.labels, p.labels);
        assert_eq!(back.requests, p.requests);
        assert_eq!(back.node_selector, p.node_selector);
        assert_eq!(back.tolerations, p.tolerations);
        assert_eq!(back.spread, p.spread);
        assert_eq!((back.priority, back.never_preempts), (-1, true));
    }

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_karpenter_nodepool_reads_like_capstans() {
        let d = dynamic(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "resourceVersion": "7", "uid": "u1",
                          "managedFields": [{"manager": "kubectl"}]},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }));
        let Object::NodePool(p) = nodepool(&d) else {
            panic!("a NodePool: {:?}", nodepool(&d));
        };
        assert!(
            p.requirements
                .allows(capstan_model::labels::CAPACITY_TYPE, "spot")
        );
        assert!(
            !p.requirements
                .allows(capstan_model::labels::CAPACITY_TYPE, "on-demand")
        );
    }

    #[test]
    fn a_nodepool_that_does_not_compile_is_invalid_naming_the_field() {
        let d = dynamic(json!({
            "apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "bad"},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "a", "operator": "Sometimes", "values": ["x"]}]}}}
        }));
        let Object::Invalid(i) = nodepool(&d) else {
            panic!("invalid");
        };
        assert_eq!(i.key, "bad");
        assert!(
            i.error
                .contains("spec.template.spec.requirements[0].operator"),
            "{}",
            i.error
        );
    }

    #[test]
    fn a_new_claim_carries_no_server_fields() {
        let c = NodeClaim {
            name: "default-1".into(),
            nodepool: "default".into(),
            uid: "u".into(),
            created: 5.0,
            ..Default::default()
        };
        let o = new_claim(&c);
        assert!(o["metadata"].get("uid").is_none());
        assert!(o["metadata"].get("creationTimestamp").is_none());
        assert!(o.get("status").is_none());
        assert_eq!(o["metadata"]["labels"]["karpenter.sh/nodepool"], "default");
    }
}
