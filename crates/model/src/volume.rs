//! Volume topology: the node requirements a pod's PersistentVolumeClaims add, as Karpenter's
//! `VolumeTopology` reads them — a bound claim's PersistentVolume node affinity (the hostname
//! dropped for `local` and `hostPath` volumes, which a new node cannot keep), an unbound
//! claim's StorageClass `allowedTopologies`; several terms are ORed (see `any_of`). They constrain
//! where a new node may go (its zone, mostly) without joining the pod's own node affinity, so
//! topology spread still counts the nodes the pod's affinity selects.
//!
//! A pending pod whose claims kube-scheduler cannot bind — a claim missing or being deleted,
//! lost, bound to a missing volume or not yet marked bound, unbound without a StorageClass or
//! with one of `Immediate` binding — gets no node, and a reason ([`Volumes::resolve`]).

use crate::convert::node_selector_requirements;
use crate::labels::{HOSTNAME, normalize_key};
use crate::pod::Pod;
use crate::requirements::{Requirement, Requirements};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use std::collections::BTreeMap;

/// The annotation the PV controller sets once a claim is bound; kube-scheduler treats a claim
/// with a `volumeName` but without it as not yet bound.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// A volume of a pod that is a PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    /// The claim's name in the pod's namespace (`<pod>-<volume>` for an ephemeral volume).
    pub claim: String,
    /// An ephemeral volume: its claim lives and dies with the pod.
    pub ephemeral: bool,
}

/// A PersistentVolumeClaim, as far as scheduling reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    /// `namespace/name`.
    pub key: String,
    pub volume_name: Option<String>,
    pub storage_class: Option<String>,
    pub deleting: bool,
    /// `status.phase: Lost`: bound to a volume that no longer exists.
    pub lost: bool,
    pub bind_completed: bool,
}

/// A PersistentVolume: the requirements its node affinity puts on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub requirements: Requirements,
    pub deleting: bool,
}

/// A StorageClass: the requirements its first `allowedTopologies` term puts on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageClass {
    pub name: String,
    pub requirements: Requirements,
    /// `volumeBindingMode: Immediate` (the default): its claims are bound before scheduling.
    pub immediate: bool,
}

/// The claims, volumes and classes of a cluster, by key (`namespace/name` for claims).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Volumes {
    pub claims: BTreeMap<String, Claim>,
    pub volumes: BTreeMap<String, Volume>,
    pub classes: BTreeMap<String, StorageClass>,
}

impl Volumes {
    /// Nothing was read: no claim, volume or class.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.volumes.is_empty() && self.classes.is_empty()
    }

    /// Adds another source's claims, volumes and classes.
    pub fn extend(&mut self, other: Volumes) {
        self.claims.extend(other.claims);
        self.volumes.extend(other.volumes);
        self.classes.extend(other.classes);
    }

    /// `pod` with what its volumes require (`volume_requirements`) or why it cannot be
    /// placed (`volume_error`), as [`Volumes::resolve`] finds.
    pub fn apply(&self, pod: &mut Pod) {
        if pod.volume_claims.is_empty() {
            return;
        }
        match self.resolve(pod) {
            Ok(reqs) => {
                pod.volume_requirements = reqs;
                pod.volume_error = None;
            }
            Err(e) => pod.volume_error = Some(e),
        }
    }

    /// The requirements a pod's claims put on its node, or why kube-scheduler cannot place it
    /// (pending pods only: a bound pod's claims are bound, and what can be read is kept).
    pub fn resolve(&self, pod: &Pod) -> Result<Requirements, String> {
        let bound = pod.node_name.is_some();
        let mut out = Requirements::new();
        for r in &pod.volume_claims {
            // A bound pod's ephemeral claim goes with it; a new one is made wherever it lands.
            if r.ephemeral && bound {
                continue;
            }
            let key = format!("{}/{}", pod.namespace, r.claim);
            match self.claim_requirements(&key) {
                Ok(reqs) => out.add_all(&reqs),
                Err(e) if !bound => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    fn claim_requirements(&self, key: &str) -> Result<Requirements, String> {
        let Some(c) = self.claims.get(key) else {
            return Err(format!("waiting for its PersistentVolumeClaim {key}"));
        };
        if c.deleting {
            return Err(format!("its PersistentVolumeClaim {key} is being deleted"));
        }
        if c.lost {
            return Err(format!(
                "its PersistentVolumeClaim {key} is Lost (bound to a PersistentVolume that does not exist)"
            ));
        }
        if let Some(v) = &c.volume_name {
            let Some(pv) = self.volumes.get(v) else {
                return Err(format!(
                    "its PersistentVolumeClaim {key} names PersistentVolume {v}, which does not exist"
                ));
            };
            if pv.deleting {
                return Err(format!(
                    "its PersistentVolumeClaim {key} is bound to PersistentVolume {v}, which is being deleted"
                ));
            }
            if !c.bind_completed {
                return Err(format!(
                    "its PersistentVolumeClaim {key} is not bound yet (no {BIND_COMPLETED})"
                ));
            }
            return Ok(pv.requirements.clone());
        }
        let Some(sc) = c.storage_class.as_deref().filter(|s| !s.is_empty()) else {
            return Err(format!(
                "its PersistentVolumeClaim {key} is unbound and names no StorageClass"
            ));
        };
        let Some(class) = self.classes.get(sc) else {
            return Err(format!(
                "its PersistentVolumeClaim {key} names StorageClass {sc}, which does not exist"
            ));
        };
        if class.immediate {
            return Err(format!(
                "its PersistentVolumeClaim {key} is unbound and StorageClass {sc} binds Immediately: waiting for the volume"
            ));
        }
        Ok(class.requirements.clone())
    }
}

/// A VolumeAttachment: a volume still attached to a node (its CSI driver has not detached
/// it). The instance waits for it to go, as Karpenter's termination does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    pub node: String,
    /// The PersistentVolume attached (`spec.source.persistentVolumeName`).
    pub volume: Option<String>,
}

/// A VolumeAttachment's scheduling form.
pub fn attachment(a: &storage::VolumeAttachment) -> Attachment {
    Attachment {
        name: a.metadata.name.clone().unwrap_or_default(),
        node: a.spec.node_name.clone(),
        volume: a.spec.source.persistent_volume_name.clone(),
    }
}

/// The claims a pod's volumes use.
pub fn claim_refs(pod_name: &str, spec: &core::PodSpec) -> Vec<ClaimRef> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(p) = &v.persistent_volume_claim {
                Some(ClaimRef {
                    claim: p.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| ClaimRef {
                    claim: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

/// A PersistentVolumeClaim's scheduling form.
pub fn claim(c: &core::PersistentVolumeClaim) -> Claim {
    let md = &c.metadata;
    let key = format!(
        "{}/{}",
        md.namespace.as_deref().unwrap_or("default"),
        md.name.as_deref().unwrap_or_default()
    );
    let spec = c.spec.as_ref();
    Claim {
        key,
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        storage_class: spec.and_then(|s| s.storage_class_name.clone()),
        deleting: md.deletion_timestamp.is_some(),
        lost: c
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Lost"),
        bind_completed: md
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED)),
    }
}

/// A PersistentVolume's scheduling form; an error names the field.
pub fn volume(v: &core::PersistentVolume) -> Result<Volume, crate::FieldError> {
    let name = v.metadata.name.clone().unwrap_or_default();
    let spec = v.spec.as_ref();
    let terms = spec
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let local = spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some());
    let mut alternatives = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        let mut reqs = node_selector_requirements(
            t.match_expressions.as_deref().unwrap_or_default(),
            &format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}].matchExpressions"),
        )?;
        if local {
            reqs = reqs.iter().filter(|r| r.key != HOSTNAME).cloned().collect();
        }
        alternatives.push(reqs);
    }
    let requirements = any_of(alternatives);
    Ok(Volume {
        name,
        requirements,
        deleting: v.metadata.deletion_timestamp.is_some(),
    })
}

/// Node requirements ORed across terms (a volume's node-affinity terms, a class's allowed
/// topologies) as one set: none for no term or a term that requires nothing; the union of
/// values where every term is one `In` on the same key (zone A or zone B: zone in {A, B},
/// exact); otherwise the first term (a node it allows is allowed, others it rules out may not
/// be).
fn any_of(mut terms: Vec<Requirements>) -> Requirements {
    if terms.is_empty() || terms.iter().any(Requirements::is_empty) {
        return Requirements::new();
    }
    let single_in = |r: &Requirements| {
        r.len() == 1
            && r.iter()
                .all(|q| q.operator() == crate::requirements::Operator::In)
    };
    let key = terms[0].iter().next().map(|r| r.key.clone());
    if terms.len() > 1
        && terms
            .iter()
            .all(|t| single_in(t) && t.iter().next().map(|r| &r.key) == key.as_ref())
    {
        let values: Vec<String> = terms
            .iter()
            .flat_map(|t| t.iter().flat_map(|r| r.values().to_vec()))
            .collect();
        let mut out = Requirements::new();
        out.add(Requirement::in_values(key.unwrap_or_default(), values));
        return out;
    }
    terms.swap_remove(0)
}

/// A StorageClass's scheduling form.
pub fn storage_class(c: &storage::StorageClass) -> StorageClass {
    let name = c.metadata.name.clone().unwrap_or_default();
    let alternatives = c
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| {
            let mut reqs = Requirements::new();
            for e in term.match_label_expressions.iter().flatten() {
                reqs.add(Requirement::in_values(
                    normalize_key(&e.key).into_owned(),
                    e.values.iter().cloned(),
                ));
            }
            reqs
        })
        .collect();
    let requirements = any_of(alternatives);
    StorageClass {
        name,
        requirements,
        immediate: c.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::ZONE;
    use serde_json::json;

    fn pod(volumes: serde_json::Value, node: Option<&str>) -> Pod {
        let p: core::Pod = serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes, "nodeName": node}
        }))
        .unwrap();
        crate::convert::pod(&p, &mut Vec::new()).unwrap()
    }

    fn cluster() -> Volumes {
        let pvcs = json!([
            {"metadata": {"name": "bound", "namespace": "ns", "annotations": {BIND_COMPLETED: "yes"}},
             "spec": {"volumeName": "pv-a", "storageClassName": "gp3"}},
            {"metadata": {"name": "binding", "namespace": "ns"},
             "spec": {"volumeName": "pv-a", "storageClassName": "gp3"}},
            {"metadata": {"name": "wffc", "namespace": "ns"}, "spec": {"storageClassName": "gp3"}},
            {"metadata": {"name": "now", "namespace": "ns"}, "spec": {"storageClassName": "fast"}},
            {"metadata": {"name": "nowhere", "namespace": "ns"}, "spec": {"storageClassName": "gone"}},
            {"metadata": {"name": "classless", "namespace": "ns"}, "spec": {}},
            {"metadata": {"name": "local", "namespace": "ns", "annotations": {BIND_COMPLETED: "yes"}},
             "spec": {"volumeName": "pv-local"}},
            {"metadata": {"name": "lost", "namespace": "ns"}, "spec": {"volumeName": "pv-x"},
             "status": {"phase": "Lost"}},
            {"metadata": {"name": "db-0-scratch", "namespace": "ns"}, "spec": {"storageClassName": "gp3"}},
        ]);
        let pvs = json!([
            {"metadata": {"name": "pv-a"}, "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
              "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1a"]}]},
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}},
            {"metadata": {"name": "pv-local"}, "spec": {"local": {"path": "/mnt"},
              "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": ["ip-10-0-0-1"]},
                {"key": ZONE, "operator": "In", "values": ["us-east-1c"]}]}]}}}},
        ]);
        let classes = json!([
            {"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
             "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["us-east-1b", "us-east-1c"]}]},
                                   {"matchLabelExpressions": [{"key": ZONE, "values": ["us-east-1a"]}]}]},
            {"metadata": {"name": "fast"}, "provisioner": "ebs.csi.aws.com"},
        ]);
        let mut v = Volumes::default();
        for c in pvcs.as_array().unwrap() {
            let c = claim(&serde_json::from_value(c.clone()).unwrap());
            v.claims.insert(c.key.clone(), c);
        }
        for p in pvs.as_array().unwrap() {
            let p = volume(&serde_json::from_value(p.clone()).unwrap()).unwrap();
            v.volumes.insert(p.name.clone(), p);
        }
        for c in classes.as_array().unwrap() {
            let c = storage_class(&serde_json::from_value(c.clone()).unwrap());
            v.classes.insert(c.name.clone(), c);
        }
        v
    }

    fn zones(r: &Requirements) -> Vec<String> {
        r.get(ZONE).map(|z| z.values().to_vec()).unwrap_or_default()
    }

    #[test]
    fn a_pending_pods_claims_put_their_volumes_zones_on_its_node_or_say_why_it_must_wait() {
        struct Case {
            what: &'static str,
            claim: &'static str,
            /// The zones required, or the start of the reason.
            want: Result<Vec<&'static str>, &'static str>,
        }
        let cases = [
            Case {
                what: "a bound claim: its volume's node-affinity terms ORed, the EBS key normalized",
                claim: "bound",
                want: Ok(vec!["us-east-1a", "us-east-1b"]),
            },
            Case {
                what: "a claim not yet marked bound",
                claim: "binding",
                want: Err("its PersistentVolumeClaim ns/binding is not bound yet"),
            },
            Case {
                what: "an unbound claim of a WaitForFirstConsumer class: its allowed topologies ORed",
                claim: "wffc",
                want: Ok(vec!["us-east-1a", "us-east-1b", "us-east-1c"]),
            },
            Case {
                what: "an unbound claim of an Immediate class",
                claim: "now",
                want: Err(
                    "its PersistentVolumeClaim ns/now is unbound and StorageClass fast binds Immediately",
                ),
            },
            Case {
                what: "a class that does not exist",
                claim: "nowhere",
                want: Err(
                    "its PersistentVolumeClaim ns/nowhere names StorageClass gone, which does not exist",
                ),
            },
            Case {
                what: "an unbound claim without a class",
                claim: "classless",
                want: Err(
                    "its PersistentVolumeClaim ns/classless is unbound and names no StorageClass",
                ),
            },
            Case {
                what: "a local volume: its zone, not its hostname",
                claim: "local",
                want: Ok(vec!["us-east-1c"]),
            },
            Case {
                what: "a lost claim",
                claim: "lost",
                want: Err("its PersistentVolumeClaim ns/lost is Lost"),
            },
            Case {
                what: "a claim that does not exist",
                claim: "missing",
                want: Err("waiting for its PersistentVolumeClaim ns/missing"),
            },
        ];
        let v = cluster();
        for c in cases {
            let p = pod(
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": c.claim}}]),
                None,
            );
            match (v.resolve(&p), c.want) {
                (Ok(r), Ok(want)) => assert_eq!(zones(&r), want, "{}", c.what),
                (Err(e), Err(want)) => assert!(e.starts_with(want), "{}: {e}", c.what),
                (got, want) => panic!("{}: got {got:?}, want {want:?}", c.what),
            }
        }
    }

    #[test]
    fn a_bound_pod_keeps_its_volumes_zone_but_not_its_ephemeral_claims_and_is_never_refused() {
        let v = cluster();
        let volumes = json!([
            {"name": "data", "persistentVolumeClaim": {"claimName": "bound"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
            {"name": "cache", "persistentVolumeClaim": {"claimName": "missing"}},
            {"name": "tmp", "emptyDir": {}},
        ]);
        let running = pod(volumes.clone(), Some("node-1"));
        assert_eq!(
            zones(&v.resolve(&running).unwrap()),
            vec!["us-east-1a", "us-east-1b"]
        );
        // Pending, the ephemeral claim (db-0-scratch) counts and the missing one refuses it.
        let pending = pod(volumes, None);
        assert_eq!(
            pending
                .volume_claims
                .iter()
                .map(|c| c.claim.as_str())
                .collect::<Vec<_>>(),
            vec!["bound", "db-0-scratch", "missing"]
        );
        assert_eq!(
            v.resolve(&pending).unwrap_err(),
            "waiting for its PersistentVolumeClaim ns/missing"
        );
    }
}

#[cfg(test)]
mod alternatives {
    use super::*;
    use crate::labels::ZONE;
    use serde_json::json;

    fn class(topologies: serde_json::Value) -> Requirements {
        let c: storage::StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "sc"}, "provisioner": "p", "allowedTopologies": topologies
        }))
        .unwrap();
        storage_class(&c).requirements
    }

    fn term(key: &str, values: &[&str]) -> serde_json::Value {
        json!({"matchLabelExpressions": [{"key": key, "values": values}]})
    }

    #[test]
    fn terms_of_one_key_are_ored_and_other_terms_fall_back_to_the_first() {
        // (terms, key, allowed values; None: no requirement on the key)
        let cases: Vec<(serde_json::Value, &str, Option<Vec<&str>>)> = vec![
            (json!([]), ZONE, None),
            (json!([term(ZONE, &["a"])]), ZONE, Some(vec!["a"])),
            (
                json!([term(ZONE, &["a"]), term(ZONE, &["b", "c"])]),
                ZONE,
                Some(vec!["a", "b", "c"]),
            ),
            // Different keys: the first term stands.
            (
                json!([term(ZONE, &["a"]), term("rack", &["r1"])]),
                ZONE,
                Some(vec!["a"]),
            ),
            (
                json!([term(ZONE, &["a"]), term("rack", &["r1"])]),
                "rack",
                None,
            ),
        ];
        for (terms, key, want) in cases {
            let got = class(terms.clone());
            let got = got.get(key).map(|r| r.values().to_vec());
            let want = want.map(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(got, want, "{terms}");
        }
    }

    #[test]
    fn a_volume_allowing_any_node_in_one_term_requires_nothing() {
        let v: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"},
            "spec": {"local": {"path": "/mnt"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]}]},
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["nowhere"]}]}
            ]}}}
        }))
        .unwrap();
        assert!(volume(&v).unwrap().requirements.is_empty());
    }
}
