//! NodePool and NodeClaim: the serde form of `capstan.dev/v1` (field-for-field Karpenter's
//! `karpenter.sh/v1`), and the compiled form the scheduler reads.

use crate::disruption::Budgets;
use crate::error::FieldError;
use crate::labels::{self, normalize_key};
use crate::quantity::Quantity;
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::CPU;
use crate::taints::{Effect, Taint};
pub use crate::time::parse_duration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "capstan.dev";
pub const API_VERSION: &str = "capstan.dev/v1";
pub const KARPENTER_API_VERSION: &str = "karpenter.sh/v1";

/// Metadata as manifests carry it; only name, labels and annotations are read.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Everything else the API server adds (uid, resourceVersion, managedFields…).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolObject {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: NodePoolSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, QuantityValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Karpenter's static-capacity field: a fixed node count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<NodeClassRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<RequirementSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    /// NodeClaims only: the resources the claim was sized for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ClaimResources>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClaimResources {
    #[serde(default)]
    pub requests: BTreeMap<String, QuantityValue>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeClassRef {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RequirementSpec {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaintSpec {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Disruption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<Budget>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Budget {
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
}

/// A quantity as manifests write it: `cpu: 1000` or `memory: 1000Gi`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum QuantityValue {
    Int(i64),
    Float(f64),
    Str(String),
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for QuantityValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$"
        })
    }
}

impl QuantityValue {
    pub fn parse(&self) -> Result<Quantity, crate::quantity::QuantityError> {
        match self {
            QuantityValue::Int(i) => Ok(Quantity::from_units(*i)),
            QuantityValue::Float(f) => Quantity::parse(&f.to_string()),
            QuantityValue::Str(s) => Quantity::parse(s),
        }
    }
}

/// What [`NodePool::compile_with`] does with budgets (or a headroom annotation) that do not
/// compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BudgetErrors {
    Reject,
    Keep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    WhenEmptyOrUnderutilized,
}

/// A NodePool compiled for scheduling and disruption.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePool {
    pub name: String,
    pub weight: i32,
    /// Template requirements, template labels (as `In [value]`), and `capstan.dev/nodepool`.
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Per resource, in scheduler units (millicores for cpu); `nodes` limits the node count.
    pub limits: BTreeMap<String, i64>,
    /// `None` = Never.
    pub expire_after_seconds: Option<u64>,
    pub termination_grace_period_seconds: Option<u64>,
    pub consolidation_policy: ConsolidationPolicy,
    /// `None` = Never.
    pub consolidate_after_seconds: Option<u64>,
    pub budgets: Budgets,
    /// Replace spot nodes on a rebalance recommendation (annotation
    /// `capstan.dev/spot-rebalance: "true"`).
    pub spot_rebalance: bool,
    /// Spare capacity kept as placeholder pods (annotation `capstan.dev/headroom`); a value
    /// that does not parse keeps none, and says so in `unsupported`.
    pub headroom: Option<crate::headroom::Headroom>,
    /// A static NodePool (Karpenter's `spec.replicas`): this many nodes whatever the pods,
    /// no pod-driven launches and no consolidation.
    pub replicas: Option<u32>,
    /// What the NodePool asks for that capstan reads but does not do, and what it does
    /// instead — one sentence each, for the NodePool's status and an Event.
    pub unsupported: Vec<String>,
    /// Its deletion is requested (`metadata.deletionTimestamp`; a finalizer holds it): it
    /// launches nothing more, as Karpenter ignores a deleting NodePool.
    pub deleting: bool,
    pub spec: NodePoolSpec,
}

pub fn compile_taint(t: &TaintSpec, field: &str) -> Result<Taint, FieldError> {
    let effect = Effect::parse(&t.effect).ok_or_else(|| {
        FieldError::new(
            format!("{field}.effect"),
            format!(
                "unknown taint effect {:?} (expected NoSchedule, PreferNoSchedule or NoExecute)",
                t.effect
            ),
        )
    })?;
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

pub fn compile_requirements(
    specs: &[RequirementSpec],
    field: &str,
) -> Result<Requirements, FieldError> {
    let mut out = Requirements::new();
    for (i, r) in specs.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let op = Operator::parse(&r.operator).ok_or_else(|| {
            FieldError::new(
                format!("{f}.operator"),
                format!(
                    "unknown operator {:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)",
                    r.operator
                ),
            )
        })?;
        let req = Requirement::new(normalize_key(&r.key).into_owned(), op, &r.values)
            .map_err(|e| FieldError::new(format!("{f}.values"), e.to_string()))?;
        if let Some(m) = r.min_values
            && op == Operator::In
            && (m as usize) > r.values.len()
        {
            return Err(FieldError::new(
                format!("{f}.minValues"),
                format!(
                    "minValues {m} is more than the {} values listed",
                    r.values.len()
                ),
            ));
        }
        out.add(req.with_min_values(r.min_values));
    }
    Ok(out)
}

/// The requirements of the built-in NodePool ([`NodePool::default_pool`]): amd64, linux,
/// on-demand. A NodePool file gets none of them: as in Karpenter v1, a key it leaves open
/// allows every value (spot before on-demand where both are allowed).
pub fn default_requirements() -> Requirements {
    [
        Requirement::in_values(labels::ARCH, ["amd64"]),
        Requirement::in_values(labels::OS, ["linux"]),
        Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_ON_DEMAND]),
    ]
    .into_iter()
    .collect()
}

impl NodePool {
    /// Compiles a parsed manifest. Errors name the field (`spec.template.spec.requirements[0].operator`).
    pub fn compile(obj: &NodePoolObject) -> Result<NodePool, FieldError> {
        NodePool::compile_with(obj, BudgetErrors::Reject)
    }

    /// As [`NodePool::compile`], but budgets that do not compile are kept as
    /// [`Budgets::Invalid`]: the pool provisions, and allows no disruption (the controller's
    /// fail-closed reading of a live object).
    pub fn compile_fail_closed(obj: &NodePoolObject) -> Result<NodePool, FieldError> {
        NodePool::compile_with(obj, BudgetErrors::Keep)
    }

    fn compile_with(
        obj: &NodePoolObject,
        budget_errors: BudgetErrors,
    ) -> Result<NodePool, FieldError> {
        if obj.api_version != API_VERSION && obj.api_version != KARPENTER_API_VERSION {
            return Err(FieldError::new(
                "apiVersion",
                format!(
                    "expected {API_VERSION} or {KARPENTER_API_VERSION}, got {:?}",
                    obj.api_version
                ),
            ));
        }
        if obj.metadata.name.is_empty() {
            return Err(FieldError::new("metadata.name", "a NodePool needs a name"));
        }
        let spec = &obj.spec;
        let tspec = &spec.template.spec;
        let mut requirements =
            compile_requirements(&tspec.requirements, "spec.template.spec.requirements")?;
        let mut tlabels = BTreeMap::new();
        if let Some(m) = &spec.template.metadata {
            for (k, v) in &m.labels {
                tlabels.insert(normalize_key(k).into_owned(), v.clone());
            }
        }
        tlabels.insert(labels::NODEPOOL.to_string(), obj.metadata.name.clone());
        for (k, v) in &tlabels {
            let r = Requirement::in_values(k.clone(), [v.clone()]);
            if let Some(existing) = requirements.get(k)
                && !existing.intersects(&r)
            {
                return Err(FieldError::new(
                    format!("spec.template.metadata.labels[{k}]"),
                    format!("label {k}={v} contradicts requirement {existing}"),
                ));
            }
            requirements.add(r);
        }
        let taints = tspec
            .taints
            .iter()
            .enumerate()
            .map(|(i, t)| compile_taint(t, &format!("spec.template.spec.taints[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let startup_taints = tspec
            .startup_taints
            .iter()
            .enumerate()
            .map(|(i, t)| compile_taint(t, &format!("spec.template.spec.startupTaints[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut limits = BTreeMap::new();
        for (k, v) in spec.limits.iter().flatten() {
            let q = v
                .parse()
                .map_err(|e| FieldError::new(format!("spec.limits.{k}"), e.to_string()))?;
            let amount = if k == CPU {
                q.milli_ceil()
            } else {
                q.units_ceil()
            };
            limits.insert(k.clone(), amount);
        }
        let dur = |v: &Option<String>,
                   field: &str,
                   default: Option<u64>|
         -> Result<Option<u64>, FieldError> {
            match v {
                None => Ok(default),
                Some(s) => parse_duration(s).map_err(|e| FieldError::new(field, e)),
            }
        };
        let expire_after_seconds = dur(
            &tspec.expire_after,
            "spec.template.spec.expireAfter",
            Some(720 * 3600),
        )?;
        let termination_grace_period_seconds = dur(
            &tspec.termination_grace_period,
            "spec.template.spec.terminationGracePeriod",
            None,
        )?;
        let disruption = spec.disruption.clone().unwrap_or_default();
        let mut unsupported = Vec::new();
        let consolidation_policy = match disruption.consolidation_policy.as_deref() {
            None | Some("WhenEmptyOrUnderutilized") => {
                ConsolidationPolicy::WhenEmptyOrUnderutilized
            }
            Some("WhenEmpty") => ConsolidationPolicy::WhenEmpty,
            // Karpenter's Balanced weighs a move's savings against its disruption cost with a
            // threshold capstan does not have yet: it fails safe, to the policy that disrupts
            // the least, and says so.
            Some("Balanced") => {
                unsupported.push(
                    "consolidationPolicy Balanced is not supported yet: only empty nodes are consolidated (as WhenEmpty)"
                        .to_string(),
                );
                ConsolidationPolicy::WhenEmpty
            }
            Some(other) => {
                return Err(FieldError::new(
                    "spec.disruption.consolidationPolicy",
                    format!(
                        "expected WhenEmpty, WhenEmptyOrUnderutilized or Balanced, got {other:?}"
                    ),
                ));
            }
        };
        let consolidate_after_seconds = dur(
            &disruption.consolidate_after,
            "spec.disruption.consolidateAfter",
            Some(0),
        )?;
        let budgets = Budgets::compile(disruption.budgets.as_deref());
        if let (Budgets::Invalid(e), BudgetErrors::Reject) = (&budgets, budget_errors) {
            return Err(e.clone());
        }
        if let Some(w) = spec.weight
            && !(0..=100).contains(&w)
        {
            return Err(FieldError::new(
                "spec.weight",
                format!("must be between 0 and 100, got {w}"),
            ));
        }
        let replicas = match spec.replicas {
            None => None,
            Some(r) => {
                let r = u32::try_from(r).map_err(|_| {
                    FieldError::new("spec.replicas", format!("must be 0 or more, got {r}"))
                })?;
                // Karpenter's CRD rules for static NodePools.
                if let Some(k) = limits.keys().find(|k| *k != "nodes") {
                    return Err(FieldError::new(
                        format!("spec.limits.{k}"),
                        "a static NodePool (replicas set) takes only limits.nodes",
                    ));
                }
                if spec.weight.is_some() {
                    return Err(FieldError::new(
                        "spec.weight",
                        "a static NodePool (replicas set) takes no weight",
                    ));
                }
                Some(r)
            }
        };
        let headroom = match obj.metadata.annotations.get(crate::headroom::ANNOTATION) {
            None => None,
            Some(v) => match crate::headroom::Headroom::parse(v) {
                Ok(h) => Some(h),
                Err(e) => {
                    let field = format!("metadata.annotations[{}]", crate::headroom::ANNOTATION);
                    if let BudgetErrors::Reject = budget_errors {
                        return Err(FieldError::new(field, e));
                    }
                    unsupported.push(format!("{field}: {e}; no headroom is kept"));
                    None
                }
            },
        };
        Ok(NodePool {
            name: obj.metadata.name.clone(),
            weight: spec.weight.unwrap_or(0),
            requirements,
            labels: tlabels,
            taints,
            startup_taints,
            limits,
            expire_after_seconds,
            termination_grace_period_seconds,
            consolidation_policy,
            consolidate_after_seconds,
            budgets,
            spot_rebalance: obj
                .metadata
                .annotations
                .get("capstan.dev/spot-rebalance")
                .is_some_and(|v| v == "true"),
            headroom,
            replicas,
            unsupported,
            deleting: obj
                .metadata
                .other
                .get("deletionTimestamp")
                .is_some_and(|v| !v.is_null()),
            spec: spec.clone(),
        })
    }

    /// The NodePool capstan uses when none is given: amd64, linux, on-demand
    /// ([`default_requirements`]).
    pub fn default_pool() -> NodePool {
        let requirements: Vec<serde_json::Value> = default_requirements()
            .iter()
            .map(|r| serde_json::json!({"key": r.key, "operator": "In", "values": r.values()}))
            .collect();
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": requirements}}}
        }))
        .expect("built-in NodePool is valid");
        NodePool::compile(&obj).expect("built-in NodePool compiles")
    }
}

/// The version of [`template_hash`]'s serialization. Bump it whenever the set of fields that
/// drift, or their serialization, changes: nodes carrying a hash of another version are
/// re-annotated rather than drifted (as Karpenter does with `nodepool-hash-version`).
pub const TEMPLATE_HASH_VERSION: &str = "v1";

/// The template fields whose change drifts a node, in a stable serialization. Requirements
/// drift separately (each node is checked against them); `expireAfter` and
/// `terminationGracePeriod` apply to existing nodes as they are, so they do not drift.
#[derive(Serialize)]
struct DriftFields<'a> {
    labels: BTreeMap<&'a str, &'a str>,
    annotations: BTreeMap<&'a str, &'a str>,
    taints: Vec<(&'a str, &'a str, &'a str)>,
    startup_taints: Vec<(&'a str, &'a str, &'a str)>,
    node_class_ref: Option<(&'a str, &'a str, &'a str)>,
}

fn str_map(m: Option<&BTreeMap<String, String>>) -> BTreeMap<&str, &str> {
    m.into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Taints as a set: their order in the manifest does not drift anything.
fn taint_set(ts: &[TaintSpec]) -> Vec<(&str, &str, &str)> {
    let mut v: Vec<(&str, &str, &str)> = ts
        .iter()
        .map(|t| {
            (
                t.key.as_str(),
                t.value.as_deref().unwrap_or(""),
                t.effect.as_str(),
            )
        })
        .collect();
    v.sort_unstable();
    v
}

/// A stable hash of the template fields that drift (FNV-1a 64 over their versioned
/// serialization), for the `capstan.dev/nodepool-hash` annotation.
pub fn template_hash(template: &NodeClaimTemplate) -> String {
    let meta = template.metadata.as_ref();
    let fields = DriftFields {
        labels: str_map(meta.map(|m| &m.labels)),
        annotations: str_map(meta.map(|m| &m.annotations)),
        taints: taint_set(&template.spec.taints),
        startup_taints: taint_set(&template.spec.startup_taints),
        node_class_ref: template
            .spec
            .node_class_ref
            .as_ref()
            .map(|r| (r.group.as_str(), r.kind.as_str(), r.name.as_str())),
    };
    let text = serde_json::to_string(&fields).expect("drift fields serialize");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in TEMPLATE_HASH_VERSION
        .bytes()
        .chain([b':'])
        .chain(text.bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A NodeClaim object (`capstan.dev/v1` or `karpenter.sh/v1`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimObject {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: NodeClaimSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeClaimStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeClaimStatus {
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, QuantityValue>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, QuantityValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<String>,
    /// capstan's: the launched offering (Karpenter keeps these as labels only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    #[serde(
        default,
        rename = "priceUSDPerHour",
        skip_serializing_if = "Option::is_none"
    )]
    pub price_usd_per_hour: Option<f64>,
}

/// A status condition (metav1.Condition).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub last_transition_time: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(json: serde_json::Value) -> NodeClaimTemplate {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_headroom_annotation_that_does_not_parse_is_refused_from_a_file_and_kept_out_in_a_cluster()
    {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "annotations": {"capstan.dev/headroom": "count=1"}},
            "spec": {"template": {"spec": {"requirements": []}}}
        }))
        .unwrap();
        let e = NodePool::compile(&obj).unwrap_err();
        assert_eq!(e.field, "metadata.annotations[capstan.dev/headroom]");
        assert!(e.to_string().contains("cpu and/or memory"), "{e}");
        let p = NodePool::compile_fail_closed(&obj).unwrap();
        assert!(p.headroom.is_none());
        assert_eq!(p.unsupported.len(), 1, "{:?}", p.unsupported);
    }

    #[test]
    fn the_drift_hash_of_a_fixed_template_never_changes_within_a_version() {
        // If this fails, the drift serialization changed: bump TEMPLATE_HASH_VERSION (nodes
        // carrying the old version are re-annotated, not drifted), then update the golden hash.
        let t = template(serde_json::json!({
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "FakeNodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "taints": [{"key": "b", "effect": "NoSchedule"}, {"key": "a", "value": "1", "effect": "NoExecute"}],
                "startupTaints": [{"key": "init", "effect": "NoSchedule"}],
                "expireAfter": "720h",
                "terminationGracePeriod": "1h"
            }
        }));
        assert_eq!(TEMPLATE_HASH_VERSION, "v1");
        assert_eq!(template_hash(&t), "bdc87fe873cfde81");
    }

    #[test]
    fn only_the_fields_that_drift_change_the_hash() {
        let base = serde_json::json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}});
        let h = template_hash(&template(base));
        // (a change, whether it drifts)
        let cases = [
            (
                serde_json::json!({"spec": {"taints": [
                {"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}}),
                false,
            ),
            (
                serde_json::json!({"spec": {"expireAfter": "1h", "taints": [
                {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}),
                false,
            ),
            (
                serde_json::json!({"spec": {"requirements": [{"key": "x", "operator": "Exists"}], "taints": [
                {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}),
                false,
            ),
            (
                serde_json::json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}),
                true,
            ),
            (
                serde_json::json!({"metadata": {"labels": {"l": "1"}}, "spec": {"taints": [
                {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}),
                true,
            ),
        ];
        for (t, drifts) in cases {
            assert_eq!(template_hash(&template(t.clone())) != h, drifts, "{t}");
        }
    }

    #[test]
    fn every_template_field_is_classified_for_drift() {
        // A field added to the template must be placed here: in DRIFTS (then add it to
        // DriftFields and bump TEMPLATE_HASH_VERSION) or in DOES_NOT_DRIFT.
        const DRIFTS: &[&str] = &[
            "metadata.labels",
            "metadata.annotations",
            "spec.taints",
            "spec.startupTaints",
            "spec.nodeClassRef",
        ];
        const DOES_NOT_DRIFT: &[&str] = &[
            "spec.requirements",
            "spec.expireAfter",
            "spec.terminationGracePeriod",
            "spec.resources",
        ];
        let full = NodeClaimTemplate {
            metadata: Some(TemplateMetadata {
                labels: [("a".into(), "b".into())].into(),
                annotations: [("a".into(), "b".into())].into(),
            }),
            spec: NodeClaimSpec {
                node_class_ref: Some(NodeClassRef {
                    group: "g".into(),
                    kind: "k".into(),
                    name: "n".into(),
                }),
                requirements: vec![RequirementSpec {
                    key: "k".into(),
                    operator: "Exists".into(),
                    values: vec![],
                    min_values: None,
                }],
                taints: vec![TaintSpec {
                    key: "k".into(),
                    value: None,
                    effect: "NoSchedule".into(),
                    time_added: None,
                }],
                startup_taints: vec![TaintSpec {
                    key: "k".into(),
                    value: None,
                    effect: "NoSchedule".into(),
                    time_added: None,
                }],
                expire_after: Some("1h".into()),
                termination_grace_period: Some("1h".into()),
                resources: Some(ClaimResources::default()),
            },
        };
        let v = serde_json::to_value(&full).unwrap();
        let mut fields: Vec<String> = Vec::new();
        for part in ["metadata", "spec"] {
            for k in v[part].as_object().unwrap().keys() {
                fields.push(format!("{part}.{k}"));
            }
        }
        fields.sort();
        let mut known: Vec<String> = DRIFTS
            .iter()
            .chain(DOES_NOT_DRIFT)
            .map(|s| s.to_string())
            .collect();
        known.sort();
        assert_eq!(
            fields, known,
            "a template field is not classified for drift"
        );
    }

    #[test]
    fn a_nodepool_file_without_arch_os_or_capacity_type_allows_every_value() {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": KARPENTER_API_VERSION, "kind": "NodePool", "metadata": {"name": "open"},
            "spec": {"template": {"spec": {"requirements": []}}}
        }))
        .unwrap();
        let p = NodePool::compile(&obj).unwrap();
        for (key, value) in [
            (labels::ARCH, "amd64"),
            (labels::ARCH, "arm64"),
            (labels::OS, "linux"),
            (labels::OS, "windows"),
            (labels::CAPACITY_TYPE, "spot"),
            (labels::CAPACITY_TYPE, "on-demand"),
        ] {
            assert!(p.requirements.allows(key, value), "{key}={value}");
            assert!(!p.requirements.has_key(key), "{key} is not defaulted");
        }
    }

    #[test]
    fn a_balanced_nodepool_loads_consolidates_only_empty_nodes_and_says_so() {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": KARPENTER_API_VERSION, "kind": "NodePool", "metadata": {"name": "b"},
            "spec": {"template": {"spec": {"requirements": []}},
                     "disruption": {"consolidationPolicy": "Balanced"}}
        }))
        .unwrap();
        let p = NodePool::compile(&obj).unwrap();
        assert_eq!(p.consolidation_policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(p.unsupported.len(), 1);
        assert!(p.unsupported[0].contains("Balanced"), "{:?}", p.unsupported);
        assert!(NodePool::default_pool().unsupported.is_empty());
    }

    #[test]
    fn a_static_nodepool_takes_replicas_with_only_a_nodes_limit_and_no_weight() {
        // (extra spec, replicas or the field that is refused)
        let cases = [
            (serde_json::json!({"replicas": 3}), Ok(3)),
            (serde_json::json!({"replicas": 0}), Ok(0)),
            (
                serde_json::json!({"replicas": 3, "limits": {"nodes": "5"}}),
                Ok(3),
            ),
            (serde_json::json!({"replicas": -1}), Err("spec.replicas")),
            (
                serde_json::json!({"replicas": 3, "limits": {"cpu": "100"}}),
                Err("spec.limits.cpu"),
            ),
            (
                serde_json::json!({"replicas": 3, "weight": 10}),
                Err("spec.weight"),
            ),
        ];
        for (extra, want) in cases {
            let mut spec = serde_json::json!({"template": {"spec": {"requirements": []}}});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
                "apiVersion": API_VERSION, "kind": "NodePool", "metadata": {"name": "static"},
                "spec": spec
            }))
            .unwrap();
            let got = NodePool::compile(&obj)
                .map(|p| p.replicas.unwrap())
                .map_err(|e| e.field.clone());
            assert_eq!(got, want.map_err(String::from), "{extra}");
        }
        let dynamic = NodePool::default_pool();
        assert_eq!(dynamic.replicas, None);
    }

    #[test]
    fn the_built_in_nodepool_is_amd64_linux_on_demand() {
        let p = NodePool::default_pool();
        assert!(!p.requirements.allows(labels::OS, "windows"));
        assert!(p.requirements.allows(labels::ARCH, "amd64"));
        assert!(!p.requirements.allows(labels::ARCH, "arm64"));
        assert!(p.requirements.allows(labels::CAPACITY_TYPE, "on-demand"));
        assert!(!p.requirements.allows(labels::CAPACITY_TYPE, "spot"));
        assert!(p.requirements.allows(labels::NODEPOOL, "default"));
        assert_eq!(p.budgets, Budgets::default());
        assert_eq!(p.expire_after_seconds, Some(720 * 3600));
    }
}
