//! Karpenter's node overhead on AWS, as formulas of plain numbers: what kube-reserved,
//! system-reserved, the eviction threshold and the hypervisor take from a type's CPU and
//! memory, and how many pods its ENIs allow. The AWS provider computes its catalog with them;
//! the what-if applies a node class's kubelet settings to the catalog's types with them.

use crate::awsnodeclass::AwsNodeClassSpec;
use crate::quantity::Quantity;
use crate::resources::MIB;
use crate::{InstanceType, labels};

/// Karpenter's default share of memory the hypervisor keeps (`VM_MEMORY_OVERHEAD_PERCENT`).
pub const VM_MEMORY_OVERHEAD: f64 = 0.075;
/// Karpenter's default hard eviction threshold for memory.
pub const EVICTION_MEMORY_MIB: i64 = 100;
/// Graviton kernels reserve this much for CMA.
pub const ARM64_CMA_MIB: i64 = 64;

/// Pods a node can run with the VPC CNI: one IP per pod on every ENI but its primary, plus
/// the two host-network pods (kube-proxy, aws-node).
pub fn eni_limited_pods(max_enis: i64, ipv4_per_eni: i64) -> i64 {
    max_enis * (ipv4_per_eni - 1) + 2
}

/// Karpenter's kube-reserved CPU in millicores: 6% of the first core, 1% of the second,
/// 0.5% of the third and fourth, 0.25% of every other.
pub fn kube_reserved_cpu_millis(vcpus: i64) -> f64 {
    (0..vcpus)
        .map(|i| match i {
            0 => 60.0,
            1 => 10.0,
            2 | 3 => 5.0,
            _ => 2.5,
        })
        .sum()
}

/// Karpenter's kube-reserved memory in MiB: 11 MiB per pod plus 255 MiB.
pub fn kube_reserved_memory_mib(max_pods: i64) -> i64 {
    11 * max_pods + 255
}

/// Memory a node reports as capacity: the type's memory less the CMA on arm64, less the VM
/// overhead (rounded up to whole MiB).
pub fn memory_capacity_mib(memory_mib: i64, arch: &str) -> i64 {
    let m = if arch == "arm64" {
        memory_mib - ARM64_CMA_MIB
    } else {
        memory_mib
    };
    m - (m as f64 * VM_MEMORY_OVERHEAD).ceil() as i64
}

/// Kubelet settings from the node class that change allocatable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletOverrides {
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    /// Extra millicores and MiB reserved (kubeReserved replaces the formula, systemReserved
    /// adds to it), as Karpenter does.
    pub kube_reserved: Option<(Option<f64>, Option<i64>)>,
    pub system_reserved: (f64, i64),
    pub eviction_memory_mib: Option<i64>,
}

/// Allocatable CPU (millicores) and memory (MiB) as Karpenter computes them.
pub fn allocatable(
    vcpus: i64,
    memory_mib: i64,
    arch: &str,
    pods: i64,
    k: &KubeletOverrides,
) -> (i64, f64) {
    let (kr_cpu, kr_mem) = match k.kube_reserved {
        Some((c, m)) => (
            c.unwrap_or_else(|| kube_reserved_cpu_millis(vcpus)),
            m.unwrap_or_else(|| kube_reserved_memory_mib(pods)),
        ),
        None => (
            kube_reserved_cpu_millis(vcpus),
            kube_reserved_memory_mib(pods),
        ),
    };
    let cpu = vcpus as f64 * 1000.0 - kr_cpu - k.system_reserved.0;
    let mem = memory_capacity_mib(memory_mib, arch)
        - kr_mem
        - k.system_reserved.1
        - k.eviction_memory_mib.unwrap_or(EVICTION_MEMORY_MIB);
    (cpu.floor() as i64, mem as f64)
}

/// The pods a node of the type runs: `maxPods` if set, else the ENI limit, capped by
/// `podsPerCore × vCPUs`.
pub fn max_pods(eni_pods: i64, vcpus: i64, k: &KubeletOverrides) -> i64 {
    let mut pods = k.max_pods.unwrap_or(eni_pods);
    if let Some(ppc) = k.pods_per_core.filter(|p| *p > 0) {
        pods = pods.min(ppc * vcpus);
    }
    pods
}

/// The node class's kubelet settings that change allocatable (`spec.kubelet`).
pub fn kubelet_overrides(spec: &AwsNodeClassSpec) -> KubeletOverrides {
    let Some(k) = &spec.kubelet else {
        return KubeletOverrides::default();
    };
    let int = |key: &str| k.get(key).and_then(|v| v.as_i64());
    let reserved = |key: &str| -> Option<(Option<f64>, Option<i64>)> {
        let m = k.get(key)?.as_object()?;
        let cpu = m
            .get("cpu")
            .and_then(|v| v.as_str())
            .and_then(|s| Quantity::parse(s).ok())
            .map(|q| q.milli_ceil() as f64);
        let mem = m
            .get("memory")
            .and_then(|v| v.as_str())
            .and_then(|s| Quantity::parse(s).ok())
            .map(|q| q.units_ceil() / (1 << 20));
        Some((cpu, mem))
    };
    let system = reserved("systemReserved").unwrap_or((None, None));
    let eviction = k
        .get("evictionHard")
        .and_then(|v| v.get("memory.available"))
        .and_then(|v| v.as_str())
        .and_then(|s| Quantity::parse(s).ok())
        .map(|q| q.units_ceil() / (1 << 20));
    KubeletOverrides {
        max_pods: int("maxPods"),
        pods_per_core: int("podsPerCore"),
        kube_reserved: reserved("kubeReserved"),
        system_reserved: (system.0.unwrap_or(0.0), system.1.unwrap_or(0)),
        eviction_memory_mib: eviction,
    }
}

/// A catalog type as a node class with kubelet settings `k` runs it: pods from `maxPods`
/// and `podsPerCore` (else the type's own, ENI-limited count), CPU and memory allocatable by
/// Karpenter's formulas. Default settings leave the type as it is.
pub fn with_kubelet(t: &InstanceType, k: &KubeletOverrides) -> InstanceType {
    let mut t = t.clone();
    if *k == KubeletOverrides::default() {
        return t;
    }
    let vcpus = t.capacity.cpu / 1000;
    let memory_mib = t.capacity.memory / MIB;
    let arch = t.labels.get(labels::ARCH).cloned().unwrap_or_default();
    let pods = max_pods(t.capacity.pods, vcpus, k);
    let (cpu, mem) = allocatable(vcpus, memory_mib, &arch, pods, k);
    t.capacity.pods = pods;
    t.allocatable.pods = pods;
    t.allocatable.cpu = cpu;
    t.allocatable.memory = (mem * MIB as f64).floor() as i64;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_classs_kubelet_settings_change_a_catalog_types_pods_and_allocatable() {
        let c = crate::catalog::Catalog::builtin();
        let m5 = c.get("m5.large").expect("m5.large").clone();
        let spec = |kubelet: serde_json::Value| -> AwsNodeClassSpec {
            serde_json::from_value(serde_json::json!({
                "kubelet": kubelet,
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
            }))
            .unwrap()
        };
        // Default settings: unchanged, and the formulas give the catalog's own figures.
        let same = with_kubelet(&m5, &kubelet_overrides(&spec(serde_json::json!({}))));
        assert_eq!(same, m5);
        let (cpu, mem) = allocatable(2, 8192, "amd64", 29, &KubeletOverrides::default());
        assert_eq!(cpu, m5.allocatable.cpu);
        assert!((mem * MIB as f64 - m5.allocatable.memory as f64).abs() <= MIB as f64);
        let cases = [
            (
                serde_json::json!({"maxPods": 8}),
                8,
                1930,
                8192 - 615 - 11 * 8 - 255 - 100,
            ),
            (
                serde_json::json!({"podsPerCore": 2}),
                4,
                1930,
                8192 - 615 - 11 * 4 - 255 - 100,
            ),
            (
                serde_json::json!({"maxPods": 20, "systemReserved": {"cpu": "100m", "memory": "200Mi"}}),
                20,
                1830,
                8192 - 615 - 11 * 20 - 255 - 200 - 100,
            ),
            (
                serde_json::json!({"evictionHard": {"memory.available": "500Mi"}}),
                29,
                1930,
                8192 - 615 - 11 * 29 - 255 - 500,
            ),
        ];
        for (kubelet, pods, cpu, mem_mib) in cases {
            let t = with_kubelet(&m5, &kubelet_overrides(&spec(kubelet.clone())));
            assert_eq!(t.allocatable.pods, pods, "{kubelet}");
            assert_eq!(t.capacity.pods, pods, "{kubelet}");
            assert_eq!(t.allocatable.cpu, cpu, "{kubelet}");
            assert_eq!(t.allocatable.memory, mem_mib * MIB, "{kubelet}");
        }
    }
}
