//! The `capstan.dev/v1` resources capstan serves besides NodePool and NodeClaim (whose types
//! live in `capstan_model::nodepool`): the fake cloud's node class, the fake cloud's
//! instances, and NodePool status.

use capstan_model::nodepool::{Condition, QuantityValue};
use capstan_model::taints::Taint;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "capstan.dev";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "capstan.dev/v1";
/// Karpenter's group, whose NodePools the read-only what-if reads.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// The annotation that makes kwok manage a Node (keep it Ready, run its pods).
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Label on Nodes the fake provider made.
pub const FAKE_NODE_LABEL: &str = "capstan.dev/fake-node";

/// The fake cloud, as a node class (`FakeNodeClass`): how its instances boot and fail.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FakeNodeClassSpec {
    /// Time from launch until the instance's Node appears (a Go duration; default `5s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub boot_delay: Option<String>,
    /// Time from an instance's Node appearing until its extended resources (GPUs) are in its
    /// capacity and allocatable, as a device plugin registers them after the kubelet (a Go
    /// duration; default `0s`: with the Node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub device_plugin_delay: Option<String>,
    /// Fraction of launches that fail with a transient error, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub launch_failure_rate: Option<f64>,
    /// Fraction of instances whose Node never appears, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub never_ready_rate: Option<f64>,
    /// Zones the fake cloud offers (default `<region>a`, `<region>b`, `<region>c`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What the pool's nodes hold now (`nodes`, `cpu`, `memory`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, QuantityValue>,
}

/// A taint as an instance is launched with it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaintRecord {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

impl From<&Taint> for TaintRecord {
    fn from(t: &Taint) -> Self {
        TaintRecord {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().into(),
        }
    }
}

/// One instance of the fake cloud (`FakeInstance`): the fake cloud keeps its machines in the
/// cluster, so every capstan process — the leader and whoever takes over — sees one cloud.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FakeInstanceSpec {
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub claim_name: String,
    pub nodepool: String,
    pub client_token: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    #[serde(rename = "priceUSDPerHour")]
    pub price_usd_per_hour: f64,
    /// Unix seconds.
    pub launched_at: f64,
    /// Unix seconds its Node appears; absent: never (a fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<f64>,
    /// Unix seconds its extended resources (GPUs) are registered; absent: with the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_at: Option<f64>,
    /// The Node's name when it appears.
    pub node_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<TaintRecord>,
}

/// Printer column of a CRD version.
pub(crate) struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub json_path: &'static str,
    pub priority: i32,
}

pub(crate) const fn col(
    name: &'static str,
    type_: &'static str,
    json_path: &'static str,
    priority: i32,
) -> Column {
    Column {
        name,
        type_,
        json_path,
        priority,
    }
}
