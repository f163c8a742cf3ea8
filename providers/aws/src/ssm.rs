//! AMI aliases through SSM, as Karpenter resolves them: `al2023@latest` is the image id in the
//! EKS-optimized AMI's public parameter for the cluster's Kubernetes version, one per
//! architecture; `al2023@v20240807` the parameter of that release. An `ssmParameter` selector
//! term is read the same way.
//!
//! Where SSM has none of an alias's parameters (a partition without them, or moto), the alias
//! falls back to the images' published names (see `resolve`).

use crate::{AwsError, sdk_error};

/// The SSM parameters an alias names, for Kubernetes `k8s` (`1.34`): standard variants,
/// x86_64 and arm64. `None` for a family or version form that has none.
pub fn alias_parameters(alias: &str, k8s: &str) -> Option<Vec<String>> {
    let (family, version) = alias.split_once('@')?;
    let latest = version == "latest";
    let eks = format!("/aws/service/eks/optimized-ami/{k8s}");
    Some(match family {
        "al2023" => ["x86_64", "arm64"]
            .iter()
            .map(|arch| {
                let root = format!("{eks}/amazon-linux-2023/{arch}/standard");
                if latest {
                    format!("{root}/recommended/image_id")
                } else {
                    format!(
                        "{root}/amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}/image_id"
                    )
                }
            })
            .collect(),
        "al2" => {
            if latest {
                vec![
                    format!("{eks}/amazon-linux-2/recommended/image_id"),
                    format!("{eks}/amazon-linux-2-arm64/recommended/image_id"),
                ]
            } else {
                vec![
                    format!("{eks}/amazon-linux-2/amazon-eks-node-{k8s}-{version}/image_id"),
                    format!(
                        "{eks}/amazon-linux-2-arm64/amazon-eks-arm64-node-{k8s}-{version}/image_id"
                    ),
                ]
            }
        }
        "bottlerocket" => {
            // Release tags carry a `v` on GitHub, not in the parameter path; both are accepted.
            let v = if latest {
                "latest"
            } else {
                version.trim_start_matches('v')
            };
            ["x86_64", "arm64"]
                .iter()
                .map(|arch| format!("/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{v}/image_id"))
                .collect()
        }
        "windows2019" | "windows2022" | "windows2025" if latest => {
            let year = family.trim_start_matches("windows");
            vec![format!(
                "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
            )]
        }
        _ => return None,
    })
}

/// The value of each parameter that exists (an image id); a missing parameter is skipped.
pub async fn image_ids(
    ssm: &aws_sdk_ssm::Client,
    names: &[String],
) -> Result<Vec<String>, AwsError> {
    let mut ids = Vec::new();
    for name in names {
        match ssm.get_parameter().name(name).send().await {
            Ok(out) => {
                if let Some(v) = out.parameter().and_then(|p| p.value()) {
                    ids.push(v.to_string());
                }
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_parameter_not_found()) =>
            {
                tracing::debug!(parameter = %name, "no such SSM parameter");
            }
            Err(e) => return Err(sdk_error("GetParameter", e)),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_name_the_parameters_karpenter_reads() {
        let cases: &[(&str, &[&str])] = &[
            (
                "al2023@latest",
                &[
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id",
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/arm64/standard/recommended/image_id",
                ],
            ),
            (
                "al2023@v20240807",
                &[
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.34-v20240807/image_id",
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.34-v20240807/image_id",
                ],
            ),
            (
                "al2@latest",
                &[
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2/recommended/image_id",
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2-arm64/recommended/image_id",
                ],
            ),
            (
                "al2@v20240807",
                &[
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2/amazon-eks-node-1.34-v20240807/image_id",
                    "/aws/service/eks/optimized-ami/1.34/amazon-linux-2-arm64/amazon-eks-arm64-node-1.34-v20240807/image_id",
                ],
            ),
            (
                "bottlerocket@v1.20.3",
                &[
                    "/aws/service/bottlerocket/aws-k8s-1.34/x86_64/1.20.3/image_id",
                    "/aws/service/bottlerocket/aws-k8s-1.34/arm64/1.20.3/image_id",
                ],
            ),
            (
                "bottlerocket@latest",
                &[
                    "/aws/service/bottlerocket/aws-k8s-1.34/x86_64/latest/image_id",
                    "/aws/service/bottlerocket/aws-k8s-1.34/arm64/latest/image_id",
                ],
            ),
            (
                "windows2022@latest",
                &[
                    "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.34/image_id",
                ],
            ),
        ];
        for (alias, want) in cases {
            assert_eq!(
                alias_parameters(alias, "1.34").unwrap(),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{alias}"
            );
        }
        assert_eq!(alias_parameters("ubuntu@latest", "1.34"), None);
        assert_eq!(alias_parameters("windows2022@v1", "1.34"), None);
        assert_eq!(alias_parameters("al2023", "1.34"), None);
    }
}
