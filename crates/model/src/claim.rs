//! The NodeClaim as capstan's loops hold it (compact), and the one mapping, both ways,
//! between it and the `capstan.dev/v1` NodeClaim object ([`NodeClaimObject`]).
//!
//! Times in the compact form are seconds on the controller's clock; `epoch_unix` (the unix
//! time of clock zero) converts them to and from the object's RFC 3339 timestamps.

use crate::disruption::Reason;
use crate::error::FieldError;
use crate::labels;
use crate::nodepool::{
    ClaimResources, Condition, Metadata, NodeClaimObject, NodeClaimSpec, NodeClaimStatus,
    NodeClassRef, QuantityValue, RequirementSpec, TaintSpec, compile_requirements, compile_taint,
};
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::{CPU, Resources};
use crate::taints::Taint;
use crate::time::{format_rfc3339, parse_rfc3339};
use std::collections::BTreeMap;

/// The finalizer on every NodeClaim and Node capstan manages: deleting either drains the
/// node before the instance goes.
pub const TERMINATION_FINALIZER: &str = "capstan.dev/termination";
/// Annotation: why capstan is deleting the claim ([`Reason`]).
pub const DISRUPTION_REASON_ANNOTATION: &str = "capstan.dev/disruption-reason";
/// Karpenter's mark on a NodeClaim whose `minValues` its MinValuesPolicy BestEffort lowered.
pub const MIN_VALUES_RELAXED_ANNOTATION: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// Whether a NodeClaim's requirements ask for fewer distinct values on some key than its
/// NodePool's `minValues` (Karpenter's MinValuesPolicy BestEffort relaxed them).
pub fn min_values_relaxed(pool: &Requirements, claim: &Requirements) -> bool {
    pool.iter().any(|r| {
        r.min_values
            .is_some_and(|m| claim.get(&r.key).and_then(|c| c.min_values).unwrap_or(0) < m)
    })
}
/// Annotation: the planner put this claim on a stopped warm instance the provider reported
/// ([`crate::Warm`]), so the provider may start one rather than boot a machine. Claims without
/// it boot: a warm instance is kept for the pods that wait now, not spent on whatever asks.
pub const WARM_START_ANNOTATION: &str = "capstan.dev/warm-start";
/// Annotation: when the cloud takes the instance whatever the PDBs say (RFC 3339).
pub const TERMINATION_DEADLINE_ANNOTATION: &str = "capstan.dev/termination-deadline";

/// What capstan knows of a NodeClaim's launch and life.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimStatus {
    pub provider_id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// USD per hour at launch.
    pub price: f64,
    /// The launched instance's capacity and allocatable.
    pub capacity: Resources,
    pub allocatable: Resources,
    /// Clock seconds of the launch.
    pub launched_at: Option<f64>,
    pub node_name: Option<String>,
    /// Clock seconds its node registered (capstan adopted it).
    pub registered_at: Option<f64>,
    /// Clock seconds its node became ready with its startup taints gone.
    pub initialized_at: Option<f64>,
}

impl ClaimStatus {
    pub fn registered(&self) -> bool {
        self.registered_at.is_some()
    }
    pub fn initialized(&self) -> bool {
        self.initialized_at.is_some()
    }
}

/// A request for one machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeClaim {
    pub name: String,
    /// Assigned by the API server; with the name it makes the launch's client token.
    pub uid: String,
    pub nodepool: String,
    /// The NodePool's requirements narrowed by the pods planned onto it, including
    /// `node.kubernetes.io/instance-type In [instance_types]`.
    pub requirements: Requirements,
    /// Instance types to launch, in order of preference.
    pub instance_types: Vec<String>,
    pub requests: Resources,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub node_class: Option<NodeClassRef>,
    pub finalizers: Vec<String>,
    /// Clock seconds of creation (the server's `creationTimestamp`).
    pub created: f64,
    /// Clock seconds deletion was requested (`deletionTimestamp`): the claim is terminating,
    /// held by its finalizer until capstan has drained the node and removed the instance.
    pub deleted_at: Option<f64>,
    /// Why capstan deletes it.
    pub deletion_reason: Option<Reason>,
    /// Clock seconds the cloud takes the instance (interruptions, maintenance).
    pub deadline: Option<f64>,
    pub status: ClaimStatus,
}

impl NodeClaim {
    pub fn deleting(&self) -> bool {
        self.deleted_at.is_some()
    }

    /// The client token that makes its launch idempotent: one claim, one instance.
    pub fn client_token(&self) -> String {
        format!("{}-{}", self.name, self.uid)
    }

    /// The object as the API server holds it (`capstan.dev/v1`).
    pub fn to_object(&self, epoch_unix: f64) -> NodeClaimObject {
        let time = |t: f64| format_rfc3339(epoch_unix + t);
        let mut labels = self.labels.clone();
        labels.insert(labels::NODEPOOL.into(), self.nodepool.clone());
        labels.insert(labels::KARPENTER_NODEPOOL.into(), self.nodepool.clone());
        let mut annotations = self.annotations.clone();
        if let Some(r) = self.deletion_reason {
            annotations.insert(DISRUPTION_REASON_ANNOTATION.into(), r.as_str().into());
        }
        if let Some(d) = self.deadline {
            annotations.insert(TERMINATION_DEADLINE_ANNOTATION.into(), time(d));
        }
        let mut other = BTreeMap::new();
        if !self.uid.is_empty() {
            other.insert("uid".into(), self.uid.clone().into());
        }
        other.insert("creationTimestamp".into(), time(self.created).into());
        if let Some(d) = self.deleted_at {
            other.insert("deletionTimestamp".into(), time(d).into());
        }
        if !self.finalizers.is_empty() {
            other.insert("finalizers".into(), self.finalizers.clone().into());
        }
        let spec = NodeClaimSpec {
            node_class_ref: self.node_class.clone(),
            requirements: requirement_specs(&self.requirements, &self.instance_types),
            taints: self.taints.iter().map(taint_spec).collect(),
            startup_taints: self.startup_taints.iter().map(taint_spec).collect(),
            expire_after: None,
            termination_grace_period: None,
            resources: Some(ClaimResources {
                requests: quantities(&self.requests),
            }),
        };
        NodeClaimObject {
            api_version: crate::nodepool::API_VERSION.into(),
            kind: "NodeClaim".into(),
            metadata: Metadata {
                name: self.name.clone(),
                namespace: None,
                labels,
                annotations,
                other,
            },
            spec,
            status: Some(self.status.to_object(epoch_unix)),
        }
    }

    /// The compact claim of an object (`capstan.dev/v1` or `karpenter.sh/v1`). Errors name
    /// the field.
    pub fn from_object(o: &NodeClaimObject, epoch_unix: f64) -> Result<NodeClaim, FieldError> {
        let clock = |field: &str, v: &str| {
            parse_rfc3339(v)
                .map(|t| t - epoch_unix)
                .ok_or_else(|| FieldError::new(field, format!("invalid timestamp {v:?}")))
        };
        let md = &o.metadata;
        let labels: BTreeMap<String, String> = md
            .labels
            .iter()
            .map(|(k, v)| (labels::normalize_key(k).into_owned(), v.clone()))
            .collect();
        let nodepool = labels.get(labels::NODEPOOL).cloned().unwrap_or_default();
        let mut annotations = md.annotations.clone();
        let deletion_reason = match annotations.remove(DISRUPTION_REASON_ANNOTATION) {
            None => None,
            Some(r) => Some(Reason::parse(&r).ok_or_else(|| {
                FieldError::new(
                    format!("metadata.annotations[{DISRUPTION_REASON_ANNOTATION}]"),
                    format!("unknown disruption reason {r:?}"),
                )
            })?),
        };
        let deadline = match annotations.remove(TERMINATION_DEADLINE_ANNOTATION) {
            None => None,
            Some(d) => Some(clock(
                &format!("metadata.annotations[{TERMINATION_DEADLINE_ANNOTATION}]"),
                &d,
            )?),
        };
        let string = |k: &str| md.other.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let created = match string("creationTimestamp") {
            Some(t) => clock("metadata.creationTimestamp", &t)?,
            None => 0.0,
        };
        let deleted_at = match string("deletionTimestamp") {
            Some(t) => Some(clock("metadata.deletionTimestamp", &t)?),
            None => None,
        };
        let finalizers = md
            .other
            .get("finalizers")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let spec = &o.spec;
        let requirements = compile_requirements(&spec.requirements, "spec.requirements")?;
        let instance_types = spec
            .requirements
            .iter()
            .find(|r| labels::normalize_key(&r.key) == labels::INSTANCE_TYPE && r.operator == "In")
            .map(|r| r.values.clone())
            .unwrap_or_default();
        let taints = spec
            .taints
            .iter()
            .enumerate()
            .map(|(i, t)| compile_taint(t, &format!("spec.taints[{i}]")))
            .collect::<Result<_, _>>()?;
        let startup_taints = spec
            .startup_taints
            .iter()
            .enumerate()
            .map(|(i, t)| compile_taint(t, &format!("spec.startupTaints[{i}]")))
            .collect::<Result<_, _>>()?;
        let requests = match &spec.resources {
            Some(r) => resources(&r.requests, "spec.resources.requests")?,
            None => Resources::new(),
        };
        let status = match &o.status {
            Some(s) => ClaimStatus::from_object(s, epoch_unix)?,
            None => ClaimStatus::default(),
        };
        Ok(NodeClaim {
            name: md.name.clone(),
            uid: string("uid").unwrap_or_default(),
            nodepool,
            requirements,
            instance_types,
            requests,
            labels,
            annotations,
            taints,
            startup_taints,
            node_class: spec.node_class_ref.clone(),
            finalizers,
            created,
            deleted_at,
            deletion_reason,
            deadline,
            status,
        })
    }
}

/// Condition types of a NodeClaim, as Karpenter names them.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const DRIFTED: &str = "Drifted";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
}

impl ClaimStatus {
    /// The status stanza: fields, and the Launched, Registered, Initialized and Ready
    /// conditions (Ready is the root: True once Initialized).
    pub fn to_object(&self, epoch_unix: f64) -> NodeClaimStatus {
        let time = |t: f64| format_rfc3339(epoch_unix + t);
        let cond = |kind: &str, at: Option<f64>, pending: &str| match at {
            Some(t) => Condition {
                type_: kind.into(),
                status: "True".into(),
                reason: kind.into(),
                message: String::new(),
                last_transition_time: time(t),
            },
            None => Condition {
                type_: kind.into(),
                status: "Unknown".into(),
                reason: pending.into(),
                message: String::new(),
                last_transition_time: String::new(),
            },
        };
        let conditions = vec![
            cond(conditions::LAUNCHED, self.launched_at, "AwaitingLaunch"),
            cond(
                conditions::REGISTERED,
                self.registered_at,
                "AwaitingRegistration",
            ),
            cond(
                conditions::INITIALIZED,
                self.initialized_at,
                "AwaitingInitialization",
            ),
            cond(
                conditions::READY,
                self.initialized_at,
                "AwaitingInitialization",
            ),
        ];
        NodeClaimStatus {
            provider_id: self.provider_id.clone(),
            image_id: None,
            node_name: self.node_name.clone(),
            capacity: quantities(&self.capacity),
            allocatable: quantities(&self.allocatable),
            conditions,
            last_pod_event_time: None,
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type: self.capacity_type.clone(),
            price_usd_per_hour: (self.price != 0.0).then_some(self.price),
        }
    }

    pub fn from_object(s: &NodeClaimStatus, epoch_unix: f64) -> Result<ClaimStatus, FieldError> {
        let mut at = BTreeMap::new();
        for (i, c) in s.conditions.iter().enumerate() {
            if c.status == "True" {
                let t = parse_rfc3339(&c.last_transition_time).ok_or_else(|| {
                    FieldError::new(
                        format!("status.conditions[{i}].lastTransitionTime"),
                        format!("invalid timestamp {:?}", c.last_transition_time),
                    )
                })?;
                at.insert(c.type_.as_str(), t - epoch_unix);
            }
        }
        Ok(ClaimStatus {
            provider_id: s.provider_id.clone(),
            instance_type: s.instance_type.clone(),
            zone: s.zone.clone(),
            capacity_type: s.capacity_type.clone(),
            price: s.price_usd_per_hour.unwrap_or(0.0),
            capacity: resources(&s.capacity, "status.capacity")?,
            allocatable: resources(&s.allocatable, "status.allocatable")?,
            launched_at: at.get(conditions::LAUNCHED).copied(),
            node_name: s.node_name.clone(),
            registered_at: at.get(conditions::REGISTERED).copied(),
            initialized_at: at.get(conditions::INITIALIZED).copied(),
        })
    }
}

fn taint_spec(t: &Taint) -> TaintSpec {
    TaintSpec {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.as_str().into(),
        time_added: None,
    }
}

/// Requirements as manifest terms; the instance-type term lists `types` in their order of
/// preference (the compact form keeps values sorted).
fn requirement_specs(reqs: &Requirements, types: &[String]) -> Vec<RequirementSpec> {
    let mut out = Vec::new();
    for r in reqs.iter() {
        let terms = r.to_terms();
        for (i, (op, values)) in terms.into_iter().enumerate() {
            let values = if r.key == labels::INSTANCE_TYPE && op == Operator::In {
                let mut ordered: Vec<String> = types.iter().filter(|t| r.has(t)).cloned().collect();
                ordered.extend(values.into_iter().filter(|v| !types.contains(v)));
                ordered
            } else {
                values
            };
            out.push(RequirementSpec {
                // Karpenter's spelling where it has one, as a Karpenter user reads claims.
                key: labels::karpenter_spelling(&r.key).unwrap_or_else(|| r.key.clone()),
                operator: operator_name(op).into(),
                values,
                min_values: if i == 0 { r.min_values } else { None },
            });
        }
    }
    out
}

fn operator_name(op: Operator) -> &'static str {
    match op {
        Operator::In => "In",
        Operator::NotIn => "NotIn",
        Operator::Exists => "Exists",
        Operator::DoesNotExist => "DoesNotExist",
        Operator::Gt => "Gt",
        Operator::Lt => "Lt",
        Operator::Gte => "Gte",
        Operator::Lte => "Lte",
    }
}

/// Resources as Kubernetes quantities: cpu in millicores, bytes in the largest binary unit
/// that divides them (`8Gi`), everything else in units.
pub fn quantities(r: &Resources) -> BTreeMap<String, QuantityValue> {
    r.iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| {
            let bytes = k == "memory" || k == "ephemeral-storage" || k.starts_with("hugepages-");
            let q = if k == CPU {
                format!("{v}m")
            } else if bytes {
                binary(v)
            } else {
                v.to_string()
            };
            (k.to_string(), QuantityValue::Str(q))
        })
        .collect()
}

fn binary(v: i64) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if v % (1i64 << shift) == 0 {
            return format!("{}{unit}", v >> shift);
        }
    }
    v.to_string()
}

fn resources(m: &BTreeMap<String, QuantityValue>, field: &str) -> Result<Resources, FieldError> {
    let mut r = Resources::new();
    for (k, v) in m {
        let q = v
            .parse()
            .map_err(|e| FieldError::new(format!("{field}.{k}"), e.to_string()))?;
        r.set_quantity(k, q);
    }
    Ok(r)
}

/// The requirement a claim for `types` adds: `node.kubernetes.io/instance-type In [types]`.
pub fn instance_type_requirement(types: &[String]) -> Requirement {
    Requirement::in_values(labels::INSTANCE_TYPE, types.iter().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taints::Effect;

    fn claim() -> NodeClaim {
        let types = vec![
            "m7i.xlarge".to_string(),
            "c7i.2xlarge".into(),
            "m6i.xlarge".into(),
        ];
        let mut reqs: Requirements = [
            Requirement::in_values(labels::CAPACITY_TYPE, ["spot", "on-demand"]),
            Requirement::not_in(labels::ZONE, ["us-east-1d"]),
            Requirement::new(labels::INSTANCE_GENERATION, Operator::Gt, &["5"])
                .unwrap()
                .with_min_values(Some(2)),
            Requirement::exists("team"),
        ]
        .into_iter()
        .collect();
        reqs.add(Requirement::not_in(labels::INSTANCE_GENERATION, ["9"]));
        reqs.add(instance_type_requirement(&types));
        let mut requests = Resources::new();
        requests.set(CPU, 3500);
        requests.set("memory", 8 << 30);
        requests.set("pods", 7);
        let mut allocatable = Resources::new();
        allocatable.set(CPU, 3920);
        allocatable.set("memory", 15 << 30);
        allocatable.set("pods", 58);
        NodeClaim {
            name: "default-0a1b2c3d".into(),
            uid: "7f0c".into(),
            nodepool: "default".into(),
            requirements: reqs,
            instance_types: types,
            requests,
            labels: [
                ("team".to_string(), "a".to_string()),
                (labels::NODEPOOL.to_string(), "default".to_string()),
            ]
            .into(),
            annotations: [("note".to_string(), "x".to_string())].into(),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: Effect::NoSchedule,
            }],
            startup_taints: vec![Taint {
                key: "init".into(),
                value: String::new(),
                effect: Effect::NoExecute,
            }],
            node_class: Some(NodeClassRef {
                group: "capstan.dev".into(),
                kind: "FakeNodeClass".into(),
                name: "default".into(),
            }),
            finalizers: vec![TERMINATION_FINALIZER.into()],
            created: 12.0,
            deleted_at: Some(400.0),
            deletion_reason: Some(Reason::SpotInterruption),
            deadline: Some(520.0),
            status: ClaimStatus {
                provider_id: Some("fake://i-0001".into()),
                instance_type: Some("m7i.xlarge".into()),
                zone: Some("us-east-1a".into()),
                capacity_type: Some("spot".into()),
                price: 0.0812,
                capacity: allocatable.clone(),
                allocatable,
                launched_at: Some(14.0),
                node_name: Some("node-i-0001".into()),
                registered_at: Some(30.0),
                initialized_at: Some(35.0),
            },
        }
    }

    #[test]
    fn a_claim_survives_the_round_trip_through_its_object() {
        let epoch = 1_796_030_100.0;
        let c = claim();
        let o = c.to_object(epoch);
        // Through JSON, as the API server would store it.
        let json = serde_json::to_value(&o).unwrap();
        let back: NodeClaimObject = serde_json::from_value(json).unwrap();
        assert_eq!(NodeClaim::from_object(&back, epoch).unwrap(), c);
    }

    #[test]
    fn a_fresh_claim_round_trips_with_unknown_conditions() {
        let mut c = claim();
        c.status = ClaimStatus::default();
        c.deleted_at = None;
        c.deletion_reason = None;
        c.deadline = None;
        let o = c.to_object(0.0);
        let s = o.status.as_ref().unwrap();
        assert!(s.conditions.iter().all(|c| c.status == "Unknown"));
        assert_eq!(NodeClaim::from_object(&o, 0.0).unwrap(), c);
    }

    #[test]
    fn the_object_lists_instance_types_in_order_of_preference() {
        let o = claim().to_object(0.0);
        let it = o
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .unwrap();
        assert_eq!(it.values, ["m7i.xlarge", "c7i.2xlarge", "m6i.xlarge"]);
        assert_eq!(o.metadata.labels[labels::KARPENTER_NODEPOOL], "default");
    }

    #[test]
    fn a_bad_timestamp_names_its_field() {
        let mut o = claim().to_object(0.0);
        o.metadata
            .other
            .insert("creationTimestamp".into(), "yesterday".into());
        let e = NodeClaim::from_object(&o, 0.0).unwrap_err();
        assert_eq!(e.field, "metadata.creationTimestamp");
    }
}
