//! NodePool and NodeClaim: the serde form of `capstan.dev/v1` (field-for-field Karpenter's
//! `karpenter.sh/v1`), and the compiled form the scheduler reads.

use crate::error::FieldError;
use crate::labels::{self, normalize_key};
use crate::quantity::Quantity;
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::CPU;
use crate::taints::{Effect, Taint};
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
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
pub struct ClaimResources {
    #[serde(default)]
    pub requests: BTreeMap<String, QuantityValue>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassRef {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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

impl QuantityValue {
    pub fn parse(&self) -> Result<Quantity, crate::quantity::QuantityError> {
        match self {
            QuantityValue::Int(i) => Ok(Quantity::from_units(*i)),
            QuantityValue::Float(f) => Quantity::parse(&f.to_string()),
            QuantityValue::Str(s) => Quantity::parse(s),
        }
    }
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
    pub budgets: Vec<Budget>,
    /// Replace spot nodes on a rebalance recommendation (annotation
    /// `capstan.dev/spot-rebalance: "true"`).
    pub spot_rebalance: bool,
    pub spec: NodePoolSpec,
}

/// Parses a Go duration (`720h`, `1h30m`, `90s`, `1.5h`), or `Never` as `None`.
pub fn parse_duration(s: &str) -> Result<Option<u64>, String> {
    if s == "Never" {
        return Ok(None);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    if rest == "0" {
        return Ok(Some(0));
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "invalid duration {s:?}: missing unit (ns, us, ms, s, m, h)"
                ));
            }
            u => return Err(format!("invalid duration {s:?}: unknown unit {u:?}")),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(Some(total.ceil() as u64))
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
                    "unknown operator {:?} (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)",
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

/// What the defaults add when a NodePool says nothing about a key (Karpenter's AWS provider
/// does the same): amd64, linux, on-demand.
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
        for d in default_requirements().iter() {
            if !requirements.has_key(&d.key) {
                requirements.add(d.clone());
            }
        }
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
        let consolidation_policy = match disruption.consolidation_policy.as_deref() {
            None | Some("WhenEmptyOrUnderutilized") => {
                ConsolidationPolicy::WhenEmptyOrUnderutilized
            }
            Some("WhenEmpty") => ConsolidationPolicy::WhenEmpty,
            Some(other) => {
                return Err(FieldError::new(
                    "spec.disruption.consolidationPolicy",
                    format!("expected WhenEmpty or WhenEmptyOrUnderutilized, got {other:?}"),
                ));
            }
        };
        let consolidate_after_seconds = dur(
            &disruption.consolidate_after,
            "spec.disruption.consolidateAfter",
            Some(0),
        )?;
        let budgets = disruption.budgets.clone().unwrap_or_else(|| {
            vec![Budget {
                nodes: "10%".into(),
                schedule: None,
                duration: None,
                reasons: None,
            }]
        });
        for (i, b) in budgets.iter().enumerate() {
            let f = format!("spec.disruption.budgets[{i}]");
            let n = b.nodes.strip_suffix('%').unwrap_or(&b.nodes);
            if n.parse::<u32>().is_err() {
                return Err(FieldError::new(
                    format!("{f}.nodes"),
                    format!("expected a count or a percentage, got {:?}", b.nodes),
                ));
            }
            if b.schedule.is_some() != b.duration.is_some() {
                return Err(FieldError::new(
                    f,
                    "schedule and duration must be set together",
                ));
            }
            if let Some(d) = &b.duration {
                parse_duration(d).map_err(|e| FieldError::new(format!("{f}.duration"), e))?;
            }
            for (j, r) in b.reasons.iter().flatten().enumerate() {
                if !matches!(r.as_str(), "Empty" | "Drifted" | "Underutilized") {
                    return Err(FieldError::new(
                        format!("{f}.reasons[{j}]"),
                        format!("expected Empty, Drifted or Underutilized, got {r:?}"),
                    ));
                }
            }
        }
        if let Some(w) = spec.weight
            && !(0..=100).contains(&w)
        {
            return Err(FieldError::new(
                "spec.weight",
                format!("must be between 0 and 100, got {w}"),
            ));
        }
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
            spec: spec.clone(),
        })
    }

    /// The NodePool capstan uses when none is given: amd64, linux, on-demand.
    pub fn default_pool() -> NodePool {
        let obj: NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": []}}}
        }))
        .expect("built-in NodePool is valid");
        NodePool::compile(&obj).expect("built-in NodePool compiles")
    }
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
    pub conditions: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_to_seconds() {
        let cases = [
            ("720h", Some(2_592_000)),
            ("1h30m", Some(5400)),
            ("90s", Some(90)),
            ("1.5h", Some(5400)),
            ("500ms", Some(1)),
            ("0s", Some(0)),
            ("Never", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).unwrap(), want, "{s}");
        }
        for bad in ["", "10", "1d", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_nodepool_without_arch_os_or_capacity_type_gets_the_defaults() {
        let p = NodePool::default_pool();
        assert!(p.requirements.allows(labels::ARCH, "amd64"));
        assert!(!p.requirements.allows(labels::ARCH, "arm64"));
        assert!(p.requirements.allows(labels::CAPACITY_TYPE, "on-demand"));
        assert!(!p.requirements.allows(labels::CAPACITY_TYPE, "spot"));
        assert!(p.requirements.allows(labels::NODEPOOL, "default"));
        assert_eq!(p.budgets[0].nodes, "10%");
        assert_eq!(p.expire_after_seconds, Some(720 * 3600));
    }
}
