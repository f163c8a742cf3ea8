//! Well-known label keys, and the Karpenter aliases that mean the same thing.

pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "capstan.dev/capacity-type";
pub const NODEPOOL: &str = "capstan.dev/nodepool";
pub const INSTANCE_FAMILY: &str = "capstan.dev/instance-family";
pub const INSTANCE_CATEGORY: &str = "capstan.dev/instance-category";
pub const INSTANCE_GENERATION: &str = "capstan.dev/instance-generation";
pub const INSTANCE_SIZE: &str = "capstan.dev/instance-size";
pub const INSTANCE_CPU: &str = "capstan.dev/instance-cpu";
pub const INSTANCE_MEMORY: &str = "capstan.dev/instance-memory";
pub const INSTANCE_GPU_COUNT: &str = "capstan.dev/instance-gpu-count";
pub const INSTANCE_GPU_NAME: &str = "capstan.dev/instance-gpu-name";
pub const INSTANCE_GPU_MEMORY: &str = "capstan.dev/instance-gpu-memory";
pub const INSTANCE_CPU_MANUFACTURER: &str = "capstan.dev/instance-cpu-manufacturer";
pub const INSTANCE_HYPERVISOR: &str = "capstan.dev/instance-hypervisor";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "capstan.dev/instance-network-bandwidth";
pub const INSTANCE_LOCAL_NVME: &str = "capstan.dev/instance-local-nvme";
pub const INSTANCE_ACCELERATOR_NAME: &str = "capstan.dev/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "capstan.dev/instance-accelerator-count";

/// Pod annotation that keeps a node from being disrupted voluntarily.
pub const DO_NOT_DISRUPT: &str = "capstan.dev/do-not-disrupt";

pub const CAPACITY_SPOT: &str = "spot";
pub const CAPACITY_ON_DEMAND: &str = "on-demand";

/// Label keys every instance type defines a value for. A pod may require them even when a
/// NodePool says nothing about them: the instance types narrow them.
pub const WELL_KNOWN: &[&str] = &[
    ARCH,
    OS,
    HOSTNAME,
    INSTANCE_TYPE,
    ZONE,
    REGION,
    CAPACITY_TYPE,
    NODEPOOL,
    INSTANCE_FAMILY,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_MEMORY,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MEMORY,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_HYPERVISOR,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_LOCAL_NVME,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_COUNT,
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// Maps a node-label key to capstan's spelling: Karpenter's `karpenter.sh/capacity-type`,
/// `karpenter.sh/nodepool`, `karpenter.k8s.aws/instance-*` and `karpenter.sh/do-not-disrupt`
/// mean exactly what the `capstan.dev/` keys mean; the deprecated beta labels mean the GA ones.
pub fn normalize_key(key: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    match key {
        "karpenter.sh/capacity-type" => Cow::Borrowed(CAPACITY_TYPE),
        "karpenter.sh/nodepool" => Cow::Borrowed(NODEPOOL),
        "karpenter.sh/do-not-disrupt" => Cow::Borrowed(DO_NOT_DISRUPT),
        "beta.kubernetes.io/arch" => Cow::Borrowed(ARCH),
        "beta.kubernetes.io/os" => Cow::Borrowed(OS),
        "failure-domain.beta.kubernetes.io/zone" => Cow::Borrowed(ZONE),
        "failure-domain.beta.kubernetes.io/region" => Cow::Borrowed(REGION),
        "beta.kubernetes.io/instance-type" => Cow::Borrowed(INSTANCE_TYPE),
        k => match k.strip_prefix("karpenter.k8s.aws/instance-") {
            Some(rest) => Cow::Owned(format!("capstan.dev/instance-{rest}")),
            None => Cow::Borrowed(k),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_keys_mean_the_capstan_keys() {
        let cases = [
            ("karpenter.sh/capacity-type", CAPACITY_TYPE),
            ("karpenter.sh/nodepool", NODEPOOL),
            ("karpenter.k8s.aws/instance-family", INSTANCE_FAMILY),
            ("karpenter.k8s.aws/instance-gpu-name", INSTANCE_GPU_NAME),
            ("failure-domain.beta.kubernetes.io/zone", ZONE),
            ("app", "app"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_key(input), want, "{input}");
        }
    }
}
