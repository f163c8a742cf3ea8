//! Well-known label keys, and the Karpenter aliases that mean the same thing.

use std::collections::BTreeMap;

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
pub const INSTANCE_GPU_MANUFACTURER: &str = "capstan.dev/instance-gpu-manufacturer";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str = "capstan.dev/instance-accelerator-manufacturer";
pub const INSTANCE_EBS_BANDWIDTH: &str = "capstan.dev/instance-ebs-bandwidth";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT: &str =
    "capstan.dev/instance-encryption-in-transit-supported";
pub const INSTANCE_TENANCY: &str = "capstan.dev/instance-tenancy";
pub const INSTANCE_CAPABILITY_FLEX: &str = "capstan.dev/instance-capability-flex";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";

/// Node label Karpenter (and capstan) sets to `"true"` once the node is registered.
pub const REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// Node label Karpenter (and capstan) sets to `"true"` once the node is initialized: Ready,
/// its startup taints gone.
pub const INITIALIZED_LABEL: &str = "karpenter.sh/initialized";

/// Taint a node carries from registration until capstan has adopted it (Karpenter's key).
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// Taint capstan puts on a node it is disrupting.
pub const DISRUPTED_TAINT: &str = "capstan.dev/disrupted";
/// Karpenter's spelling of the same taint: a node carrying either is being disrupted.
pub const KARPENTER_DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Pod annotation that keeps a node from being disrupted voluntarily.
pub const DO_NOT_DISRUPT: &str = "capstan.dev/do-not-disrupt";
/// Pod annotation ranking pods for removal (the ReplicaSet controller's; Karpenter weighs it in
/// a pod's eviction cost).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

pub const CAPACITY_SPOT: &str = "spot";
pub const CAPACITY_ON_DEMAND: &str = "on-demand";
/// Capacity reserved ahead (an On-Demand Capacity Reservation): paid for whether used or not.
pub const CAPACITY_RESERVED: &str = "reserved";
/// Capacity types in Karpenter's order of preference where a request allows several:
/// reserved, then spot, then on-demand.
pub const CAPACITY_TYPES: [&str; 3] = [CAPACITY_RESERVED, CAPACITY_SPOT, CAPACITY_ON_DEMAND];

/// Label keys instance types define (Karpenter's well-known labels, AWS's included). A pod
/// may require them even when a NodePool says nothing about them: the instance types narrow
/// them. A type without the feature has no such label (no GPU: no `gpu-count`, not `"0"`), so
/// `Exists` and `DoesNotExist` select what they select in Karpenter.
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
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_TENANCY,
    INSTANCE_CAPABILITY_FLEX,
    ZONE_ID,
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Karpenter's spelling of the NodePool label, which NodeClaims and Nodes carry.
pub const KARPENTER_NODEPOOL: &str = "karpenter.sh/nodepool";

/// Karpenter's spelling of a `capstan.dev/` key, where Karpenter has one: what a node must
/// carry as well for pods that select Karpenter's keys (kube-scheduler sees only real labels).
pub fn karpenter_spelling(key: &str) -> Option<String> {
    match key {
        CAPACITY_TYPE => Some("karpenter.sh/capacity-type".into()),
        NODEPOOL => Some(KARPENTER_NODEPOOL.into()),
        DO_NOT_DISRUPT => Some("karpenter.sh/do-not-disrupt".into()),
        k => k
            .strip_prefix("capstan.dev/instance-")
            .map(|rest| format!("karpenter.k8s.aws/instance-{rest}")),
    }
}

/// A node's labels as they go on the Node object: each `capstan.dev/` key with Karpenter's
/// spelling beside it.
pub fn with_karpenter_spellings(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    for (k, v) in labels {
        if let Some(alias) = karpenter_spelling(k) {
            out.entry(alias).or_insert_with(|| v.clone());
        }
    }
    out
}

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// Whether a node-label key is one capstan does not put on nodes from requirements: a
/// well-known key (the instance type or the offering gives it; the hostname is the node's),
/// or one in the provisioner's own domains (`karpenter.sh`, `karpenter.k8s.aws`,
/// `capstan.dev`, subdomains included). As Karpenter's `RestrictedLabelDomains` since v1.1,
/// keys in `kubernetes.io` and `k8s.io` are not restricted: a NodePool requiring
/// `example.kubernetes.io/tier In [a]` labels its nodes so (the controller writes the labels,
/// so the kubelet's NodeRestriction does not apply).
pub fn is_restricted(key: &str) -> bool {
    if is_well_known(key) {
        return true;
    }
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    let under = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    ["karpenter.sh", "karpenter.k8s.aws", "capstan.dev"]
        .iter()
        .any(|d| under(d))
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
        // The EBS CSI driver's zone key, on its PersistentVolumes (as Karpenter's AWS provider).
        "topology.ebs.csi.aws.com/zone" => Cow::Borrowed(ZONE),
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
    fn restricted_keys_are_the_well_known_ones_and_the_provisioners_own_domains() {
        for (key, want) in [
            ("kubernetes.io/hostname", true),
            ("topology.kubernetes.io/zone", true),
            ("karpenter.sh/capacity-type", true),
            ("karpenter.sh/anything", true),
            ("sub.karpenter.sh/anything", true),
            ("karpenter.k8s.aws/instance-family", true),
            ("capstan.dev/team", true),
            ("kubernetes.io/test", false),
            ("subdomain.k8s.io/test", false),
            ("node.kubernetes.io/role", false),
            ("example.com/team", false),
            ("team", false),
            ("notkarpenter.sh/x", false),
        ] {
            assert_eq!(is_restricted(key), want, "{key}");
        }
    }

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

    #[test]
    fn every_karpenter_spelling_normalizes_back_to_its_capstan_key() {
        for k in WELL_KNOWN.iter().copied().chain([DO_NOT_DISRUPT]) {
            if let Some(alias) = karpenter_spelling(k) {
                assert_eq!(normalize_key(&alias), k, "{alias}");
            }
        }
        assert_eq!(
            karpenter_spelling(INSTANCE_FAMILY).as_deref(),
            Some("karpenter.k8s.aws/instance-family")
        );
        assert_eq!(karpenter_spelling(ZONE), None);
    }
}
