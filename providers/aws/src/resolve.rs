//! An AWSNodeClass's selectors resolved against EC2: subnets, security groups and AMIs, each
//! term an OR of the others and a term's tags an AND, as Karpenter resolves them.

use crate::{AwsError, sdk_error};
use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::Filter;
use capstan_model::awsnodeclass::{
    AmiSelectorTerm, AwsNodeClassSpec, ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet,
};
use std::collections::{BTreeMap, BTreeSet};

/// A node class as EC2 resolves it now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// One subnet per zone: the one with the most free addresses.
    pub subnets: Vec<ResolvedSubnet>,
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// Newest first, per architecture.
    pub amis: Vec<ResolvedAmi>,
}

impl Resolved {
    pub fn zones(&self) -> BTreeSet<String> {
        self.subnets.iter().map(|s| s.zone.clone()).collect()
    }

    /// Zone name → zone ID, for the subnets' zones whose ID EC2 gave.
    pub fn zone_ids(&self) -> BTreeMap<String, String> {
        self.subnets
            .iter()
            .filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?)))
            .collect()
    }

    pub fn subnet_in(&self, zone: &str) -> Option<&ResolvedSubnet> {
        self.subnets.iter().find(|s| s.zone == zone)
    }

    /// The newest AMI for an architecture (`amd64`, `arm64`).
    pub fn ami_for(&self, arch: &str) -> Option<&ResolvedAmi> {
        self.amis.iter().find(|a| a.arch.as_deref() == Some(arch))
    }
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

pub async fn subnets(
    ec2: &Client,
    spec: &AwsNodeClassSpec,
) -> Result<Vec<ResolvedSubnet>, AwsError> {
    // zone → (free addresses, subnet)
    let mut best: BTreeMap<String, (i32, ResolvedSubnet)> = BTreeMap::new();
    for term in &spec.subnet_selector_terms {
        let mut req = ec2.describe_subnets();
        if let Some(id) = &term.id {
            req = req.subnet_ids(id);
        } else {
            req = req.set_filters(Some(tag_filters(&term.tags)));
        }
        let out = req
            .send()
            .await
            .map_err(|e| sdk_error("DescribeSubnets", e))?;
        for s in out.subnets() {
            let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                continue;
            };
            let free = s.available_ip_address_count().unwrap_or(0);
            let r = ResolvedSubnet {
                id: id.into(),
                zone: zone.into(),
                zone_id: s.availability_zone_id().map(String::from),
            };
            match best.get(zone) {
                Some((f, _)) if *f >= free => {}
                _ => {
                    best.insert(zone.into(), (free, r));
                }
            }
        }
    }
    Ok(best.into_values().map(|(_, s)| s).collect())
}

pub async fn security_groups(
    ec2: &Client,
    spec: &AwsNodeClassSpec,
) -> Result<Vec<ResolvedSecurityGroup>, AwsError> {
    let mut out: BTreeMap<String, ResolvedSecurityGroup> = BTreeMap::new();
    for term in &spec.security_group_selector_terms {
        let mut req = ec2.describe_security_groups();
        if let Some(id) = &term.id {
            req = req.group_ids(id);
        } else if let Some(name) = &term.name {
            req = req.filters(Filter::builder().name("group-name").values(name).build());
        } else {
            req = req.set_filters(Some(tag_filters(&term.tags)));
        }
        let resp = req
            .send()
            .await
            .map_err(|e| sdk_error("DescribeSecurityGroups", e))?;
        for g in resp.security_groups() {
            if let Some(id) = g.group_id() {
                out.insert(
                    id.into(),
                    ResolvedSecurityGroup {
                        id: id.into(),
                        name: g.group_name().map(String::from),
                    },
                );
            }
        }
    }
    Ok(out.into_values().collect())
}

/// The image name pattern and owner an alias stands for: where SSM has no parameter for the
/// alias (see [`crate::ssm`]), the same images by their published names, newest first
/// (`@latest`) or with the version in the name.
fn alias_lookup(alias: &str) -> Option<(Vec<String>, &'static str)> {
    let (family, version) = alias.split_once('@')?;
    let v = if version == "latest" {
        "*"
    } else {
        version.trim_start_matches('v')
    };
    let names = match family {
        "al2023" => vec![
            format!("amazon-eks-node-al2023-x86_64-standard-*-{v}"),
            format!("amazon-eks-node-al2023-arm64-standard-*-{v}"),
        ],
        "al2" => vec![
            format!("amazon-eks-node-*-{v}"),
            format!("amazon-eks-arm64-node-*-{v}"),
        ],
        "bottlerocket" => vec![
            format!("bottlerocket-aws-k8s-*-x86_64-{v}*"),
            format!("bottlerocket-aws-k8s-*-aarch64-{v}*"),
        ],
        "windows2019" => vec![format!("Windows_Server-2019-English-Core-EKS_Optimized-*")],
        "windows2022" => vec![format!("Windows_Server-2022-English-Core-EKS_Optimized-*")],
        "windows2025" => vec![format!("Windows_Server-2025-English-Core-EKS_Optimized-*")],
        _ => return None,
    };
    Some((names, "amazon"))
}

/// Where aliases and `ssmParameter` terms are read: SSM, and the cluster's Kubernetes
/// version (`1.34`) the EKS-optimized parameters are published under.
#[derive(Clone, Copy, Default)]
pub struct Ssm<'a> {
    pub client: Option<&'a aws_sdk_ssm::Client>,
    pub kubernetes_version: Option<&'a str>,
}

pub async fn amis(
    ec2: &Client,
    ssm: Ssm<'_>,
    spec: &AwsNodeClassSpec,
) -> Result<Vec<ResolvedAmi>, AwsError> {
    // (creation date, image) for every match.
    let mut found: BTreeMap<String, (String, ResolvedAmi)> = BTreeMap::new();
    for term in &spec.ami_selector_terms {
        for req in image_queries(ec2, ssm, term).await? {
            let resp = req
                .send()
                .await
                .map_err(|e| sdk_error("DescribeImages", e))?;
            for i in resp.images() {
                let Some(id) = i.image_id() else { continue };
                let arch = match i.architecture().map(|a| a.as_str()) {
                    Some("x86_64") => "amd64",
                    Some("arm64") => "arm64",
                    _ => continue,
                };
                let deprecated = i.deprecation_time().is_some_and(|t| !t.is_empty());
                found.insert(
                    id.into(),
                    (
                        i.creation_date().unwrap_or_default().to_string(),
                        ResolvedAmi {
                            id: id.into(),
                            name: i.name().map(String::from),
                            arch: Some(arch.into()),
                            deprecated: deprecated.then_some(true),
                        },
                    ),
                );
            }
        }
    }
    let mut all: Vec<(String, ResolvedAmi)> = found.into_values().collect();
    // Newest first; among equals, by id so the choice is stable.
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
    Ok(all.into_iter().map(|(_, a)| a).collect())
}

async fn image_queries(
    ec2: &Client,
    ssm: Ssm<'_>,
    term: &AmiSelectorTerm,
) -> Result<
    Vec<aws_sdk_ec2::operation::describe_images::builders::DescribeImagesFluentBuilder>,
    AwsError,
> {
    if let Some(alias) = &term.alias {
        let (names, owner) = alias_lookup(alias).ok_or_else(|| AwsError::NodeClass {
            field: "spec.amiSelectorTerms[].alias".into(),
            message: format!("unknown alias {alias:?}"),
        })?;
        if let (Some(client), Some(k8s)) = (ssm.client, ssm.kubernetes_version) {
            let params =
                crate::ssm::alias_parameters(alias, k8s).ok_or_else(|| AwsError::NodeClass {
                    field: "spec.amiSelectorTerms[].alias".into(),
                    message: format!("alias {alias:?} has no SSM parameter"),
                })?;
            let ids = crate::ssm::image_ids(client, &params).await?;
            if !ids.is_empty() {
                return Ok(vec![ec2.describe_images().set_image_ids(Some(ids))]);
            }
            tracing::debug!(%alias, kubernetes = k8s, "SSM has no parameter for the alias: selecting by image name");
        }
        return Ok(names
            .into_iter()
            .map(|n| {
                ec2.describe_images()
                    .owners(owner)
                    .filters(Filter::builder().name("name").values(n).build())
            })
            .collect());
    }
    if let Some(param) = &term.ssm_parameter {
        let client = ssm.client.ok_or_else(|| AwsError::NodeClass {
            field: "spec.amiSelectorTerms[].ssmParameter".into(),
            message: "no SSM client is configured".into(),
        })?;
        let ids = crate::ssm::image_ids(client, std::slice::from_ref(param)).await?;
        if ids.is_empty() {
            return Err(AwsError::NodeClass {
                field: "spec.amiSelectorTerms[].ssmParameter".into(),
                message: format!("SSM parameter {param:?} not found"),
            });
        }
        return Ok(vec![ec2.describe_images().set_image_ids(Some(ids))]);
    }
    let mut req = ec2.describe_images();
    if let Some(id) = &term.id {
        req = req.image_ids(id);
    }
    if let Some(name) = &term.name {
        req = req.filters(Filter::builder().name("name").values(name).build());
    }
    for f in tag_filters(&term.tags) {
        req = req.filters(f);
    }
    if let Some(owner) = &term.owner {
        req = req.owners(owner);
    } else if term.id.is_none() {
        // Karpenter's default owners for name and tag selection.
        req = req.owners("self").owners("amazon");
    }
    Ok(vec![req])
}

/// Resolves everything; a selector that matches nothing is an error naming its field.
pub async fn resolve(
    ec2: &Client,
    ssm: Ssm<'_>,
    spec: &AwsNodeClassSpec,
) -> Result<Resolved, AwsError> {
    let r = Resolved {
        subnets: subnets(ec2, spec).await?,
        security_groups: security_groups(ec2, spec).await?,
        amis: amis(ec2, ssm, spec).await?,
    };
    for (field, empty) in [
        ("spec.subnetSelectorTerms", r.subnets.is_empty()),
        (
            "spec.securityGroupSelectorTerms",
            r.security_groups.is_empty(),
        ),
        ("spec.amiSelectorTerms", r.amis.is_empty()),
    ] {
        if empty {
            return Err(AwsError::NodeClass {
                field: field.into(),
                message: "matches nothing in EC2".into(),
            });
        }
    }
    Ok(r)
}
