//! `AWSNodeClass` (`capstan.dev/v1`): Karpenter's `EC2NodeClass` v1 under capstan's group. A
//! Karpenter EC2NodeClass loads with only its `apiVersion` changed. The fields capstan's AWS
//! provider launches with are typed; the ones it passes through or does not act on yet
//! (`capacityReservationSelectorTerms`, `networkInterfaces`, `cpuOptions`, …) are kept as they
//! were written, so nothing a user gave is lost, and the provider says which it ignores.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub const KIND: &str = "AWSNodeClass";
/// Karpenter's kind and group, read by the read-only what-if.
pub const KARPENTER_KIND: &str = "EC2NodeClass";
pub const KARPENTER_GROUP: &str = "karpenter.k8s.aws";

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsNodeClassSpec {
    /// AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Windows2025 or Custom; required
    /// unless an `amiSelectorTerms` entry has an alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The IAM role for the nodes' instance profile (exactly one of `role`, `instanceProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// The kubelet settings (KubeletConfiguration fields): `maxPods`, `podsPerCore`,
    /// `kubeReserved`, `systemReserved` and `evictionHard` change allocatable; for AL2023 all of
    /// them reach nodeadm's kubelet config in the user data as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<BTreeMap<String, Value>>"))]
    pub kubelet: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    // Kept as written, not acted on yet (the provider reports them on the node class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_selector_terms: Option<Vec<BTreeMap<String, Value>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_interfaces: Option<Vec<BTreeMap<String, Value>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<BTreeMap<String, Value>>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiSelectorTerm {
    /// `family@version`, such as `al2023@latest` or `bottlerocket@v1.20.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<Ebs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ebs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i64>,
    /// A quantity such as `20Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

impl MetadataOptions {
    /// Karpenter's defaults: IMDS on, IPv6 endpoint off, hop limit 1, IMDSv2 required.
    pub fn or_defaults(this: Option<&MetadataOptions>) -> MetadataOptions {
        let d = this.cloned().unwrap_or_default();
        MetadataOptions {
            http_endpoint: d.http_endpoint.or(Some("enabled".into())),
            http_protocol_ipv6: d.http_protocol_ipv6.or(Some("disabled".into())),
            http_put_response_hop_limit: d.http_put_response_hop_limit.or(Some(1)),
            http_tokens: d.http_tokens.or(Some("required".into())),
        }
    }
}

/// What the provider resolved the selectors to.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AwsNodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::nodepool::Condition>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The architecture the image runs on (`amd64`, `arm64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}

/// A node class that cannot be used as written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct NodeClassError {
    pub field: String,
    pub message: String,
}

/// The `amiFamily` values Karpenter accepts.
pub const AMI_FAMILIES: [&str; 7] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Custom",
    "Windows2019",
    "Windows2022",
    "Windows2025",
];

impl AwsNodeClassSpec {
    /// Karpenter's admission rules (its CRD's CEL), checked again where the CRD cannot be:
    /// files, and Karpenter's objects read directly.
    pub fn validate(&self) -> Result<(), NodeClassError> {
        let err = |field: &str, message: String| {
            Err(NodeClassError {
                field: field.into(),
                message,
            })
        };
        if self.role.is_some() == self.instance_profile.is_some() {
            return err(
                "spec.role",
                "must specify exactly one of ['role', 'instanceProfile']".into(),
            );
        }
        if let Some(f) = &self.ami_family {
            if !AMI_FAMILIES.contains(&f.as_str()) {
                return err(
                    "spec.amiFamily",
                    format!("{f:?} is not one of {}", AMI_FAMILIES.join(", ")),
                );
            }
        }
        for (field, len) in [
            ("spec.subnetSelectorTerms", self.subnet_selector_terms.len()),
            (
                "spec.securityGroupSelectorTerms",
                self.security_group_selector_terms.len(),
            ),
            ("spec.amiSelectorTerms", self.ami_selector_terms.len()),
        ] {
            if len == 0 || len > 30 {
                return err(field, format!("must have 1 to 30 terms, has {len}"));
            }
        }
        for (i, t) in self.subnet_selector_terms.iter().enumerate() {
            if t.id.is_some() != t.tags.is_empty() {
                return err(
                    &format!("spec.subnetSelectorTerms[{i}]"),
                    "expected exactly one of ['tags', 'id']".into(),
                );
            }
        }
        for (i, t) in self.security_group_selector_terms.iter().enumerate() {
            let set = [t.id.is_some(), t.name.is_some(), !t.tags.is_empty()];
            if set.iter().filter(|s| **s).count() != 1 {
                return err(
                    &format!("spec.securityGroupSelectorTerms[{i}]"),
                    "expected exactly one of ['tags', 'id', 'name']".into(),
                );
            }
        }
        let mut aliases = 0;
        for (i, t) in self.ami_selector_terms.iter().enumerate() {
            let field = format!("spec.amiSelectorTerms[{i}]");
            if let Some(a) = &t.alias {
                aliases += 1;
                let Some((family, version)) = a.split_once('@') else {
                    return err(&field, format!("alias {a:?} is not family@version"));
                };
                let Some(canonical) = alias_family(family) else {
                    return err(
                        &field,
                        format!(
                            "alias {a:?}: family must be one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"
                        ),
                    );
                };
                if version.is_empty() {
                    return err(&field, format!("alias {a:?} has no version"));
                }
                if let Some(f) = &self.ami_family {
                    if f != canonical && f != "Custom" {
                        return err(
                            "spec.amiFamily",
                            format!(
                                "if set, amiFamily must be '{canonical}' or 'Custom' when using an {canonical} alias"
                            ),
                        );
                    }
                }
                if t.id.is_some() || t.name.is_some() || !t.tags.is_empty() || t.owner.is_some() {
                    return err(
                        &field,
                        "an alias cannot be combined with other fields".into(),
                    );
                }
            } else if t.id.is_none()
                && t.name.is_none()
                && t.tags.is_empty()
                && t.ssm_parameter.is_none()
            {
                return err(
                    &field,
                    "expected at least one of ['tags', 'id', 'name', 'alias', 'ssmParameter']"
                        .into(),
                );
            }
        }
        if aliases > 0 && self.ami_selector_terms.len() > 1 {
            return err(
                "spec.amiSelectorTerms",
                "an alias must be the only term".into(),
            );
        }
        if aliases == 0 && self.ami_family.is_none() {
            return err(
                "spec.amiFamily",
                "must specify amiFamily if amiSelectorTerms does not contain an alias".into(),
            );
        }
        Ok(())
    }

    /// The AMI family the node class launches: its alias's, else `amiFamily`.
    pub fn family(&self) -> Option<&'static str> {
        for t in &self.ami_selector_terms {
            if let Some((f, _)) = t.alias.as_deref().and_then(|a| a.split_once('@')) {
                return alias_family(f);
            }
        }
        let f = self.ami_family.as_deref()?;
        AMI_FAMILIES.iter().copied().find(|x| *x == f)
    }

    /// Fields kept as written that the provider does not act on, by their manifest names.
    pub fn unsupported_fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut note = |set: bool, name: &'static str| {
            if set {
                out.push(name);
            }
        };
        note(
            self.capacity_reservation_selector_terms.is_some(),
            "capacityReservationSelectorTerms",
        );
        note(self.network_interfaces.is_some(), "networkInterfaces");
        note(self.ip_prefix_count.is_some(), "ipPrefixCount");
        note(self.cpu_options.is_some(), "cpuOptions");
        note(self.enclave_options.is_some(), "enclaveOptions");
        note(self.connection_tracking.is_some(), "connectionTracking");
        note(
            self.placement_group_selector.is_some(),
            "placementGroupSelector",
        );
        note(self.instance_store_policy.is_some(), "instanceStorePolicy");
        note(self.context.is_some(), "context");
        out
    }
}

fn alias_family(f: &str) -> Option<&'static str> {
    Some(match f {
        "al2" => "AL2",
        "al2023" => "AL2023",
        "bottlerocket" => "Bottlerocket",
        "windows2019" => "Windows2019",
        "windows2022" => "Windows2022",
        "windows2025" => "Windows2025",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: Value) -> Result<AwsNodeClassSpec, String> {
        let mut v = serde_json::json!({
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        });
        for (k, x) in extra.as_object().unwrap() {
            if x.is_null() {
                v.as_object_mut().unwrap().remove(k);
            } else {
                v[k] = x.clone();
            }
        }
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn karpenters_admission_rules_hold_and_name_the_field() {
        // (change to a valid spec, the field the error names or None if valid)
        let cases: Vec<(Value, Option<&str>)> = vec![
            (serde_json::json!({}), None),
            (
                serde_json::json!({"instanceProfile": "p"}),
                Some("spec.role"),
            ),
            (
                serde_json::json!({"role": null, "instanceProfile": "p"}),
                None,
            ),
            (serde_json::json!({"role": null}), Some("spec.role")),
            (
                serde_json::json!({"amiFamily": "AL2"}),
                Some("spec.amiFamily"),
            ),
            (serde_json::json!({"amiFamily": "Custom"}), None),
            (
                serde_json::json!({"amiSelectorTerms": [{"id": "ami-123"}]}),
                Some("spec.amiFamily"),
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"id": "ami-123"}], "amiFamily": "AL2023"}),
                None,
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
                Some("spec.amiSelectorTerms[0]"),
            ),
            (
                serde_json::json!({"subnetSelectorTerms": []}),
                Some("spec.subnetSelectorTerms"),
            ),
            (
                serde_json::json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}),
                Some("spec.subnetSelectorTerms[0]"),
            ),
            (
                serde_json::json!({"securityGroupSelectorTerms": [{"name": "x", "id": "sg-1"}]}),
                Some("spec.securityGroupSelectorTerms[0]"),
            ),
        ];
        for (change, want) in cases {
            let s = spec(change.clone()).unwrap();
            let got = s.validate().err().map(|e| e.field);
            assert_eq!(got.as_deref(), want, "{change}");
        }
    }

    #[test]
    fn an_unknown_field_is_refused_and_fields_not_acted_on_are_kept_and_named() {
        assert!(spec(serde_json::json!({"amiSelecterTerms": []})).is_err());
        let s = spec(serde_json::json!({"ipPrefixCount": 2, "cpuOptions": {"nestedVirtualization": "enabled"}}))
            .unwrap();
        assert_eq!(s.unsupported_fields(), ["ipPrefixCount", "cpuOptions"]);
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["cpuOptions"]["nestedVirtualization"], "enabled");
        assert_eq!(s.family(), Some("AL2023"));
    }
}
