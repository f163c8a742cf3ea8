//! Launching: one launch template per (AMI, user data, block devices, metadata options,
//! security groups, instance profile, tags) — named by a hash of exactly those, created once
//! and reused — and a CreateFleet of type `instant` with one override per instance type ×
//! zone, over the 60 cheapest types (minValues respected).

use crate::{AwsError, Settings, sdk_error};
use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, InstanceType as Ec2Type,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    OnDemandOptionsRequest, RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy,
    SpotOptionsRequest, Tag, TagSpecification, TargetCapacitySpecificationRequest, VolumeType,
};
use capstan_model::InstanceType;
use capstan_model::awsnodeclass::{AwsNodeClassSpec, MetadataOptions};
use capstan_model::labels;
use capstan_model::requirements::Requirements;
use capstan_model::taints::Taint;
use std::collections::{BTreeMap, BTreeSet};

/// Overrides per fleet request at most (EC2 documents 300 across a fleet's launch templates).
pub const MAX_OVERRIDES: usize = 300;

/// Fleet error codes that mean "no capacity in this offering now": the offering is marked
/// unavailable for three minutes and the next is tried.
pub const CAPACITY_ERRORS: [&str; 7] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "InsufficientFreeAddressesInSubnet",
    "UnfulfillableCapacity",
    "Unsupported",
    "VcpuLimitExceeded",
    "SpotMaxPriceTooLow",
];

/// Everything a launch template holds.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Template {
    pub ami: String,
    pub user_data: String,
    pub security_groups: Vec<String>,
    pub instance_profile: String,
    pub block_devices: Vec<capstan_model::awsnodeclass::BlockDeviceMapping>,
    pub metadata: MetadataOptions,
    pub associate_public_ip: Option<bool>,
    pub detailed_monitoring: bool,
    pub tags: BTreeMap<String, String>,
}

impl Template {
    /// `capstan/<cluster>/<hash>`: the hash (FNV-1a, 64 bits, over the template's JSON) is of
    /// exactly what the template holds, so equal settings share one template.
    pub fn name(&self, cluster: &str) -> String {
        let json = serde_json::to_string(self).expect("a template serializes");
        format!("capstan/{cluster}/{:016x}", fnv1a(json.as_bytes()))
    }
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The ownership tags Karpenter puts on instances, volumes and templates (IAM policies key on
/// them), plus the node class's own tags.
pub fn ownership_tags(
    settings: &Settings,
    nodepool: &str,
    claim: Option<&str>,
    node_class: &str,
    class_tags: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut t = class_tags.clone();
    t.insert(
        format!("kubernetes.io/cluster/{}", settings.cluster_name),
        "owned".into(),
    );
    t.insert("eks:eks-cluster-name".into(), settings.cluster_name.clone());
    t.insert(
        crate::CAPSTAN_CLUSTER_TAG.into(),
        settings.cluster_name.clone(),
    );
    t.insert(crate::NODEPOOL_TAG.into(), nodepool.into());
    t.insert(crate::NODECLASS_TAG.into(), node_class.into());
    if let Some(c) = claim {
        t.insert(crate::NODECLAIM_TAG.into(), c.into());
        t.insert("Name".into(), c.into());
    }
    t
}

fn tags(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// The user data for the node class's family: the kubelet registers with the NodeClaim's
/// labels, the `karpenter.sh/unregistered` taint and the NodePool's taints.
pub fn user_data(
    spec: &AwsNodeClassSpec,
    settings: &Settings,
    node_labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Result<String, AwsError> {
    let mut all_taints: Vec<String> = vec![format!("{}:NoExecute", labels::UNREGISTERED_TAINT)];
    all_taints.extend(taints.iter().map(|t| {
        if t.value.is_empty() {
            format!("{}:{}", t.key, t.effect.as_str())
        } else {
            format!("{}={}:{}", t.key, t.value, t.effect.as_str())
        }
    }));
    let label_arg: Vec<String> = node_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let custom = spec.user_data.clone().unwrap_or_default();
    match spec.family() {
        Some("Custom") => Ok(custom),
        Some("AL2023") => {
            let endpoint = settings.cluster_endpoint.clone().unwrap_or_default();
            let ca = settings.cluster_ca.clone().unwrap_or_default();
            // The node class's kubelet settings go through as nodeadm's kubelet config (JSON
            // is YAML).
            let config = spec
                .kubelet
                .as_ref()
                .filter(|k| !k.is_empty())
                .map(|k| {
                    format!(
                        "    config: {}\n",
                        serde_json::to_string(k).expect("kubelet settings serialize")
                    )
                })
                .unwrap_or_default();
            let cidr = settings
                .service_cidr
                .clone()
                .unwrap_or_else(|| "10.100.0.0/16".into());
            let node_config = format!(
                "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {}\n    apiServerEndpoint: {endpoint}\n    certificateAuthority: {ca}\n    cidr: {cidr}\n  kubelet:\n{config}    flags:\n    - --node-labels={}\n    - --register-with-taints={}\n",
                settings.cluster_name,
                label_arg.join(","),
                all_taints.join(","),
            );
            let boundary = "//";
            let mut parts = String::new();
            if !custom.is_empty() {
                let ct = if custom.contains("kind: NodeConfig") {
                    "application/node.eks.aws"
                } else {
                    "text/x-shellscript; charset=\"us-ascii\""
                };
                parts.push_str(&format!("--{boundary}\nContent-Type: {ct}\n\n{custom}\n"));
            }
            parts.push_str(&format!(
                "--{boundary}\nContent-Type: application/node.eks.aws\n\n{node_config}\n--{boundary}--\n"
            ));
            Ok(format!(
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n{parts}"
            ))
        }
        Some("Bottlerocket") => {
            let mut toml = custom;
            toml.push_str(&format!(
                "\n[settings.kubernetes]\ncluster-name = \"{}\"\napi-server = \"{}\"\ncluster-certificate = \"{}\"\n\n[settings.kubernetes.node-labels]\n",
                settings.cluster_name,
                settings.cluster_endpoint.clone().unwrap_or_default(),
                settings.cluster_ca.clone().unwrap_or_default(),
            ));
            for (k, v) in node_labels {
                toml.push_str(&format!("\"{k}\" = \"{v}\"\n"));
            }
            toml.push_str("\n[settings.kubernetes.node-taints]\n");
            for t in &all_taints {
                let (kv, effect) = t.rsplit_once(':').unwrap_or((t, ""));
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                toml.push_str(&format!("\"{k}\" = [\"{v}:{effect}\"]\n"));
            }
            Ok(toml)
        }
        Some("AL2") => Ok(format!(
            "#!/bin/bash -xe\n{custom}\n/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{}' --kubelet-extra-args '--node-labels=\"{}\" --register-with-taints=\"{}\"'\n",
            settings.cluster_name,
            settings.cluster_endpoint.clone().unwrap_or_default(),
            settings.cluster_ca.clone().unwrap_or_default(),
            label_arg.join(","),
            all_taints.join(","),
        )),
        other => Err(AwsError::NodeClass {
            field: "spec.amiFamily".into(),
            message: format!(
                "{} nodes are not launched by this build (AL2023, AL2, Bottlerocket and Custom are)",
                other.unwrap_or("this family's")
            ),
        }),
    }
}

fn parse_gib(q: &str) -> Option<i32> {
    if let Some(g) = q.strip_suffix("Gi") {
        return g.parse().ok();
    }
    if let Some(t) = q.strip_suffix("Ti") {
        return t.parse::<i32>().ok().map(|t| t * 1024);
    }
    if let Some(g) = q.strip_suffix('G') {
        // Decimal gigabytes, rounded up to GiB as EBS takes sizes.
        return g
            .parse::<f64>()
            .ok()
            .map(|g| (g * 1e9 / f64::from(1u32 << 30)).ceil() as i32);
    }
    None
}

/// The launch template's data.
pub fn template_data(t: &Template) -> Result<RequestLaunchTemplateData, AwsError> {
    use base64::Engine as _;
    let m = &t.metadata;
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&t.ami)
        .user_data(base64::engine::general_purpose::STANDARD.encode(&t.user_data))
        .iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(&t.instance_profile)
                .build(),
        )
        .metadata_options(
            LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .set_http_endpoint(m.http_endpoint.as_deref().map(Into::into))
                .set_http_protocol_ipv6(m.http_protocol_ipv6.as_deref().map(Into::into))
                .set_http_put_response_hop_limit(m.http_put_response_hop_limit.map(|h| h as i32))
                .set_http_tokens(m.http_tokens.as_deref().map(Into::into))
                .build(),
        )
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(t.detailed_monitoring)
                .build(),
        );
    if let Some(public) = t.associate_public_ip {
        // The groups go on the interface when there is one.
        data = data.network_interfaces(
            LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .device_index(0)
                .associate_public_ip_address(public)
                .set_groups(Some(t.security_groups.clone()))
                .build(),
        );
    } else {
        data = data.set_security_group_ids(Some(t.security_groups.clone()));
    }
    for (i, b) in t.block_devices.iter().enumerate() {
        let mut ebs = LaunchTemplateEbsBlockDeviceRequest::builder();
        if let Some(e) = &b.ebs {
            if let Some(size) = &e.volume_size {
                let gib = parse_gib(size).ok_or_else(|| AwsError::NodeClass {
                    field: format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
                    message: format!("{size:?} is not a size such as 20Gi"),
                })?;
                ebs = ebs.volume_size(gib);
            }
            ebs = ebs
                .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
                .set_encrypted(e.encrypted)
                .set_delete_on_termination(e.delete_on_termination)
                .set_iops(e.iops.map(|x| x as i32))
                .set_throughput(e.throughput.map(|x| x as i32))
                .set_kms_key_id(e.kms_key_id.clone())
                .set_snapshot_id(e.snapshot_id.clone());
        }
        data = data.block_device_mappings(
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(b.device_name.clone())
                .ebs(ebs.build())
                .build(),
        );
    }
    for rt in [ResourceType::Instance, ResourceType::Volume] {
        data = data.tag_specifications(
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(rt)
                .set_tags(Some(tags(&t.tags)))
                .build(),
        );
    }
    Ok(data.build())
}

/// Creates the template unless it exists (by name), and returns its name.
pub async fn ensure_template(
    ec2: &Client,
    settings: &Settings,
    t: &Template,
    template_tags: &BTreeMap<String, String>,
) -> Result<String, AwsError> {
    let name = t.name(&settings.cluster_name);
    let found = ec2
        .describe_launch_templates()
        .launch_template_names(&name)
        .send()
        .await;
    match found {
        Ok(out) if !out.launch_templates().is_empty() => return Ok(name),
        Ok(_) => {}
        Err(e) => {
            let e = sdk_error("DescribeLaunchTemplates", e);
            if !e.code_is("InvalidLaunchTemplateName.NotFoundException") {
                return Err(e);
            }
        }
    }
    let created = ec2
        .create_launch_template()
        .launch_template_name(&name)
        .launch_template_data(template_data(t)?)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::LaunchTemplate)
                .set_tags(Some(tags(template_tags)))
                .build(),
        )
        .send()
        .await;
    match created {
        Ok(_) => Ok(name),
        Err(e) => {
            let e = sdk_error("CreateLaunchTemplate", e);
            // Another replica made it first.
            if e.code_is("InvalidLaunchTemplateName.AlreadyExistsException") {
                Ok(name)
            } else {
                Err(e)
            }
        }
    }
}

/// The launch templates capstan made for the cluster (by capstan's tag: a Karpenter in the
/// same cluster tags its own with the cluster too): name and creation time (Unix seconds).
pub async fn cluster_templates(
    ec2: &Client,
    cluster: &str,
) -> Result<Vec<(String, i64)>, AwsError> {
    let mut out = Vec::new();
    let mut pages = ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{}", crate::CAPSTAN_CLUSTER_TAG))
                .values(cluster)
                .build(),
        )
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("DescribeLaunchTemplates", e))?;
        for t in page.launch_templates() {
            if let Some(name) = t.launch_template_name() {
                out.push((name.to_string(), t.create_time().map_or(0, |c| c.secs())));
            }
        }
    }
    Ok(out)
}

/// Deletes a launch template; one already gone counts as deleted.
pub async fn delete_template(ec2: &Client, name: &str) -> Result<(), AwsError> {
    match ec2
        .delete_launch_template()
        .launch_template_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = sdk_error("DeleteLaunchTemplate", e);
            if e.code_is("InvalidLaunchTemplateName.NotFoundException") {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Karpenter's cap on the instance types of one launch.
pub const MAX_TYPES: usize = 60;

/// The instance types a launch offers EC2, cheapest first: each type's cheapest offering
/// (of `offerings`: (type, price)) orders it, ties kept in request order, at most
/// [`MAX_TYPES`]. Where the cut leaves fewer distinct values of a key than its requirement's
/// `minValues`, the launch is refused, as Karpenter refuses it, rather than sent with less
/// flexibility than the NodePool asks for.
pub fn choose_types<'a>(
    offerings: &[(&'a InstanceType, f64, &'a str)],
    reqs: &Requirements,
) -> Result<Vec<&'a str>, String> {
    let mut cheapest: Vec<(&'a InstanceType, f64)> = Vec::new();
    for (t, price, _) in offerings {
        match cheapest.iter_mut().find(|(c, _)| c.name == t.name) {
            Some((_, p)) => *p = p.min(*price),
            None => cheapest.push((t, *price)),
        }
    }
    cheapest.sort_by(|a, b| a.1.total_cmp(&b.1));
    cheapest.truncate(MAX_TYPES);
    for r in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        // One fleet is of one capacity type: minValues on it is the NodePool's to meet
        // across launches, not one launch's.
        if r.key == capstan_model::labels::CAPACITY_TYPE {
            continue;
        }
        let values: BTreeSet<&str> = if r.key == capstan_model::labels::ZONE {
            // Zones are the offerings' (the kept types' subnets).
            offerings
                .iter()
                .filter(|(t, _, _)| cheapest.iter().any(|(c, _)| c.name == t.name))
                .map(|(_, _, z)| *z)
                .collect()
        } else {
            cheapest
                .iter()
                .filter_map(|(t, _)| {
                    if r.key == capstan_model::labels::INSTANCE_TYPE {
                        Some(t.name.as_str())
                    } else {
                        t.labels.get(&r.key).map(String::as_str)
                    }
                })
                .collect()
        };
        if values.len() < min as usize {
            return Err(format!(
                "minValues: {} needs {min} distinct values, the {} cheapest instance types offer {}",
                r.key,
                cheapest.len(),
                values.len()
            ));
        }
    }
    Ok(cheapest.into_iter().map(|(t, _)| t.name.as_str()).collect())
}

/// One override: a type in a zone's subnet, under a template.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub template: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet: String,
    pub price: f64,
}

/// What CreateFleet said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetResult {
    /// (instance id, type, zone, spot?)
    pub launched: Option<(String, String, String, bool)>,
    /// (type, zone, error code) for every override that failed.
    pub errors: Vec<(String, String, String, String)>,
}

pub async fn create_fleet(
    ec2: &Client,
    client_token: &str,
    spot: bool,
    overrides: &[Override],
    instance_tags: &BTreeMap<String, String>,
) -> Result<FleetResult, AwsError> {
    let mut by_template: BTreeMap<&str, Vec<&Override>> = BTreeMap::new();
    for o in overrides.iter().take(MAX_OVERRIDES) {
        by_template.entry(&o.template).or_default().push(o);
    }
    let configs: Vec<FleetLaunchTemplateConfigRequest> = by_template
        .into_iter()
        .map(|(template, os)| {
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(template)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(
                    os.into_iter()
                        .map(|o| {
                            FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(Ec2Type::from(o.instance_type.as_str()))
                                .subnet_id(&o.subnet)
                                .availability_zone(&o.zone)
                                .build()
                        })
                        .collect(),
                ))
                .build()
        })
        .collect();
    let capacity = if spot {
        DefaultTargetCapacityType::Spot
    } else {
        DefaultTargetCapacityType::OnDemand
    };
    let mut req = ec2
        .create_fleet()
        .r#type(aws_sdk_ec2::types::FleetType::Instant)
        .client_token(client_token)
        .set_launch_template_configs(Some(configs))
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(capacity)
                .build(),
        )
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .set_tags(Some(tags(instance_tags)))
                .build(),
        )
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Volume)
                .set_tags(Some(tags(instance_tags)))
                .build(),
        );
    if spot {
        req = req.spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                .build(),
        );
    } else {
        req = req.on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                .build(),
        );
    }
    let out = req.send().await.map_err(|e| sdk_error("CreateFleet", e))?;
    let mut result = FleetResult::default();
    for e in out.errors() {
        let ov = e
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        result.errors.push((
            ov.and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            ov.and_then(|o| o.availability_zone())
                .map(String::from)
                .unwrap_or_default(),
            e.error_code().unwrap_or_default().to_string(),
            e.error_message().unwrap_or_default().to_string(),
        ));
    }
    for i in out.instances() {
        let Some(id) = i.instance_ids().first() else {
            continue;
        };
        let ov = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let t = i
            .instance_type()
            .or_else(|| ov.and_then(|o| o.instance_type()))
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        let zone = ov
            .and_then(|o| o.availability_zone())
            .map(String::from)
            .or_else(|| {
                // The zone of the subnet the instance went to.
                let subnet = ov.and_then(|o| o.subnet_id())?;
                overrides
                    .iter()
                    .find(|o| o.subnet == subnet)
                    .map(|o| o.zone.clone())
            })
            .unwrap_or_default();
        let is_spot = i.lifecycle().map(|l| l.as_str() == "spot").unwrap_or(spot);
        result.launched = Some((id.clone(), t, zone, is_spot));
        break;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::requirements::{Operator, Requirement};

    fn itype(name: &str) -> InstanceType {
        let family = name.split('.').next().unwrap();
        InstanceType {
            name: name.into(),
            requirements: Requirements::default(),
            labels: BTreeMap::from([(labels::INSTANCE_FAMILY.to_string(), family.to_string())]),
            capacity: Default::default(),
            allocatable: Default::default(),
            offerings: vec![],
        }
    }

    fn min_values(key: &str, min: u32) -> Requirements {
        let mut r = Requirements::default();
        r.add(
            Requirement::new(key, Operator::Exists, &[] as &[&str])
                .unwrap()
                .with_min_values(Some(min)),
        );
        r
    }

    #[test]
    fn a_launch_offers_the_sixty_cheapest_types_and_refuses_when_that_breaks_min_values() {
        // 80 types in 8 families; family f<i> costs i, so the cheapest 60 hold 6 families.
        let types: Vec<InstanceType> = (0..80)
            .map(|i| itype(&format!("f{}.s{}", i / 10, i % 10)))
            .collect();
        let offerings: Vec<(&InstanceType, f64, &str)> = types
            .iter()
            .rev()
            .flat_map(|t| {
                let f: f64 = t.name[1..2].parse().unwrap();
                // Two zones each; the dearer offering listed first.
                [(t, f + 0.5, "us-east-1b"), (t, f, "us-east-1a")]
            })
            .collect();
        let cases: &[(&str, Requirements, Result<usize, &str>)] = &[
            ("no minValues", Requirements::default(), Ok(60)),
            ("60 types", min_values(labels::INSTANCE_TYPE, 60), Ok(60)),
            (
                "61 types",
                min_values(labels::INSTANCE_TYPE, 61),
                Err("node.kubernetes.io/instance-type needs 61"),
            ),
            ("6 families", min_values(labels::INSTANCE_FAMILY, 6), Ok(60)),
            (
                "7 families",
                min_values(labels::INSTANCE_FAMILY, 7),
                Err(
                    "capstan.dev/instance-family needs 7 distinct values, the 60 cheapest instance types offer 6",
                ),
            ),
            ("2 zones", min_values(labels::ZONE, 2), Ok(60)),
            (
                "3 zones",
                min_values(labels::ZONE, 3),
                Err(
                    "topology.kubernetes.io/zone needs 3 distinct values, the 60 cheapest instance types offer 2",
                ),
            ),
            (
                "capacity types are the pool's to spread",
                min_values(labels::CAPACITY_TYPE, 2),
                Ok(60),
            ),
        ];
        for (name, reqs, want) in cases {
            let got = choose_types(&offerings, reqs);
            match (want, got) {
                (Ok(n), Ok(chosen)) => {
                    assert_eq!(chosen.len(), *n, "{name}");
                    assert!(
                        chosen
                            .iter()
                            .all(|t| !t.starts_with("f6") && !t.starts_with("f7")),
                        "{name}: the cheapest"
                    );
                    assert!(
                        chosen[0].starts_with("f0") && chosen[59].starts_with("f5"),
                        "{name}: cheapest first"
                    );
                }
                (Err(w), Err(e)) => assert!(e.contains(w), "{name}: {e}"),
                (w, g) => panic!("{name}: want {w:?}, got {g:?}"),
            }
        }
    }

    fn template() -> Template {
        Template {
            ami: "ami-1".into(),
            user_data: "#!/bin/bash".into(),
            security_groups: vec!["sg-1".into()],
            instance_profile: "p".into(),
            block_devices: vec![],
            metadata: MetadataOptions::or_defaults(None),
            associate_public_ip: None,
            detailed_monitoring: false,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn equal_settings_share_a_template_name_and_any_change_makes_a_new_one() {
        let a = template();
        assert_eq!(a.name("demo"), template().name("demo"));
        assert!(a.name("demo").starts_with("capstan/demo/"));
        let mut b = template();
        b.ami = "ami-2".into();
        let mut c = template();
        c.tags.insert("team".into(), "x".into());
        let mut d = template();
        d.metadata.http_tokens = Some("optional".into());
        for other in [b, c, d] {
            assert_ne!(a.name("demo"), other.name("demo"), "{other:?}");
        }
    }

    #[test]
    fn al2023_user_data_registers_with_the_labels_taints_and_kubelet_settings() {
        let spec: AwsNodeClassSpec = serde_json::from_value(serde_json::json!({
            "role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "userData": "#!/bin/bash\necho hi",
            "kubelet": {"maxPods": 110, "imageGCHighThresholdPercent": 85}
        }))
        .unwrap();
        let settings = Settings {
            cluster_name: "demo".into(),
            cluster_endpoint: Some("https://demo".into()),
            ..Default::default()
        };
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let taints = vec![Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: capstan_model::taints::Effect::NoSchedule,
        }];
        let ud = user_data(&spec, &settings, &labels, &taints).unwrap();
        for want in [
            "Content-Type: multipart/mixed",
            "echo hi",
            "kind: NodeConfig",
            "name: demo",
            "apiServerEndpoint: https://demo",
            "--node-labels=team=a",
            "--register-with-taints=karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule",
            r#"config: {"imageGCHighThresholdPercent":85,"maxPods":110}"#,
        ] {
            assert!(ud.contains(want), "{want} in {ud}");
        }
        let mut windows = spec.clone();
        windows.ami_selector_terms[0].alias = Some("windows2022@latest".into());
        assert!(user_data(&windows, &settings, &labels, &taints).is_err());
    }

    #[test]
    fn volume_sizes_are_read_as_ebs_takes_them() {
        for (q, gib) in [
            ("20Gi", Some(20)),
            ("1Ti", Some(1024)),
            ("100G", Some(94)),
            ("20", None),
        ] {
            assert_eq!(parse_gib(q), gib, "{q}");
        }
    }
}
