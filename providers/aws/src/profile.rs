//! The instance profile for a node class that names a `role` (Karpenter's managed instance
//! profiles): one per node class, named for the cluster and a hash of region and node class,
//! tagged for the cluster, holding exactly that role. Created when missing; its role replaced
//! when the node class names another.

use crate::{AwsError, Settings, sdk_error};
use aws_sdk_iam::types::Tag;

/// The profile's name: `<cluster>_<hash of region and node class>` (at most 128 characters,
/// IAM's limit).
pub fn profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    let h = crate::launch::fnv1a(format!("{region}/{node_class}").as_bytes());
    let mut name = format!("{cluster}_{h:016x}");
    name.truncate(128);
    name
}

/// The role's name: the last path segment of an ARN, or the name itself.
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// Makes sure the node class's instance profile exists and holds `role`; returns its name.
pub async fn ensure(
    iam: &aws_sdk_iam::Client,
    settings: &Settings,
    region: &str,
    node_class: &str,
    role: &str,
) -> Result<String, AwsError> {
    let name = profile_name(&settings.cluster_name, region, node_class);
    let role = role_name(role);
    let existing = match iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
    {
        Ok(out) => out.instance_profile().map(|p| {
            p.roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect::<Vec<_>>()
        }),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            None
        }
        Err(e) => return Err(sdk_error("GetInstanceProfile", e)),
    };
    let roles = match existing {
        Some(roles) => roles,
        None => {
            let tags = [
                (
                    format!("kubernetes.io/cluster/{}", settings.cluster_name),
                    "owned".to_string(),
                ),
                ("eks:eks-cluster-name".into(), settings.cluster_name.clone()),
                ("topology.kubernetes.io/region".into(), region.to_string()),
                (crate::NODECLASS_TAG.into(), node_class.to_string()),
            ];
            let mut req = iam
                .create_instance_profile()
                .instance_profile_name(&name)
                .path(format!("/capstan/{region}/{}/", settings.cluster_name));
            for (k, v) in tags {
                req = req.tags(
                    Tag::builder()
                        .key(k)
                        .value(v)
                        .build()
                        .expect("key and value are set"),
                );
            }
            match req.send().await {
                Ok(_) => {}
                // Another replica (or an earlier pass) created it meanwhile.
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_entity_already_exists_exception()) => {}
                Err(e) => return Err(sdk_error("CreateInstanceProfile", e)),
            }
            tracing::info!(profile = %name, %role, node_class, "created instance profile");
            Vec::new()
        }
    };
    if roles.iter().any(|r| r == role) {
        return Ok(name);
    }
    for other in &roles {
        iam.remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(other)
            .send()
            .await
            .map_err(|e| sdk_error("RemoveRoleFromInstanceProfile", e))?;
    }
    iam.add_role_to_instance_profile()
        .instance_profile_name(&name)
        .role_name(role)
        .send()
        .await
        .map_err(|e| sdk_error("AddRoleToInstanceProfile", e))?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_named_for_the_cluster_and_a_hash_of_region_and_node_class() {
        let a = profile_name("demo", "us-east-1", "default");
        assert!(
            a.starts_with("demo_") && a.len() == "demo_".len() + 16,
            "{a}"
        );
        assert_eq!(a, profile_name("demo", "us-east-1", "default"));
        assert_ne!(a, profile_name("demo", "us-west-2", "default"));
        assert_ne!(a, profile_name("demo", "us-east-1", "gpu"));
        assert_eq!(profile_name(&"c".repeat(200), "r", "n").len(), 128);
    }

    #[test]
    fn a_role_is_named_by_its_name_or_its_arn() {
        assert_eq!(
            role_name("KarpenterNodeRole-demo"),
            "KarpenterNodeRole-demo"
        );
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/nodes/KarpenterNodeRole-demo"),
            "KarpenterNodeRole-demo"
        );
    }
}
