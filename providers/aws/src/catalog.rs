//! Instance types from EC2: DescribeInstanceTypes and DescribeInstanceTypeOfferings become
//! entries of the shared catalog format (so one conversion, `capstan_model::catalog`, makes
//! the labels), with allocatable from Karpenter's overhead formulas, on-demand prices from the
//! catalog snapshot and spot prices from DescribeSpotPriceHistory.

use aws_sdk_ec2::types::InstanceTypeInfo;
use capstan_model::catalog::{CatalogEntry, CatalogOffering};
use std::collections::{BTreeMap, BTreeSet};

pub use capstan_model::overhead::{
    ARM64_CMA_MIB, EVICTION_MEMORY_MIB, KubeletOverrides, VM_MEMORY_OVERHEAD, allocatable,
    eni_limited_pods, kube_reserved_cpu_millis, kube_reserved_memory_mib, max_pods,
    memory_capacity_mib,
};

fn arch_of(info: &InstanceTypeInfo) -> Option<&'static str> {
    let archs = info.processor_info()?.supported_architectures();
    if archs.iter().any(|a| a.as_str() == "arm64") {
        Some("arm64")
    } else if archs.iter().any(|a| a.as_str() == "x86_64") {
        Some("amd64")
    } else {
        None
    }
}

/// One catalog entry from DescribeInstanceTypes: `None` for types capstan cannot run pods on
/// (no x86_64 or arm64, bare data missing).
pub fn entry(
    info: &InstanceTypeInfo,
    on_demand_price: Option<f64>,
    offerings: Vec<CatalogOffering>,
    k: &KubeletOverrides,
) -> Option<CatalogEntry> {
    let name = info.instance_type()?.as_str().to_string();
    let arch = arch_of(info)?;
    let vcpu = i64::from(info.v_cpu_info()?.default_v_cpus()?);
    let memory_mib = info.memory_info()?.size_in_mib()?;
    let net = info.network_info();
    let enis = net
        .and_then(|n| n.maximum_network_interfaces())
        .map(i64::from);
    let ips = net
        .and_then(|n| n.ipv4_addresses_per_interface())
        .map(i64::from);
    let eni_pods = match (enis, ips) {
        (Some(e), Some(i)) => eni_limited_pods(e, i),
        _ => 110,
    };
    let pods = max_pods(eni_pods, vcpu, k);
    let (cpu_m, mem_mib) = allocatable(vcpu, memory_mib, arch, pods, k);
    let (family, size) = name.split_once('.').unwrap_or((&name, ""));
    let gpus = info.gpu_info().map(|g| g.gpus()).unwrap_or_default();
    let gpu_count: i64 = gpus.iter().filter_map(|g| g.count()).map(i64::from).sum();
    let gpu_name = gpus
        .first()
        .and_then(|g| g.name())
        .map(|n| n.to_lowercase());
    let gpu_memory_mib = info
        .gpu_info()
        .and_then(|g| g.total_gpu_memory_in_mib())
        .map(i64::from);
    let accel = info
        .neuron_info()
        .map(|n| n.neuron_devices())
        .unwrap_or_default();
    let accelerator_count: i64 = accel.iter().filter_map(|d| d.count()).map(i64::from).sum();
    let accelerator_name = accel
        .first()
        .and_then(|d| d.name())
        .map(|n| n.to_lowercase());
    let nvme = info
        .instance_storage_info()
        .and_then(|s| s.total_size_in_gb())
        .unwrap_or(0);
    let bandwidth = net
        .and_then(|n| n.network_cards().first())
        .and_then(|c| c.peak_bandwidth_in_gbps())
        .map(|g| (g * 1000.0) as i64);
    let generation = family
        .trim_start_matches(|c: char| c.is_ascii_alphabetic())
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .ok();
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    Some(CatalogEntry {
        name: name.clone(),
        family: Some(family.to_string()),
        category: Some(category),
        generation,
        size: Some(size.to_string()),
        arch: arch.to_string(),
        os: None,
        labels: Default::default(),
        extended_resources: Default::default(),
        vcpu,
        memory_mib,
        cpu_manufacturer: info
            .processor_info()
            .and_then(|p| p.manufacturer())
            .map(|m| m.to_lowercase()),
        hypervisor: info.hypervisor().map(|h| h.as_str().to_string()),
        gpu_count,
        gpu_name,
        gpu_memory_mib,
        accelerator_count,
        accelerator_name,
        local_nvme_gib: Some(nvme),
        network_bandwidth_mbps: bandwidth,
        karpenter_allocatable_cpu_millicores: Some(cpu_m),
        karpenter_allocatable_memory_mib: Some(mem_mib),
        max_pods: pods,
        eni_max_interfaces: enis,
        eni_ipv4_per_interface: ips,
        eni_branch_interfaces: None,
        eni_max_pods_formula: Some(eni_pods),
        on_demand_price_usd_per_hour: on_demand_price,
        offerings: Some(offerings),
    })
}

/// Spot prices: the newest price per (type, zone) from DescribeSpotPriceHistory rows.
pub fn latest_spot_prices(
    rows: impl IntoIterator<Item = (String, String, f64, i64)>,
) -> BTreeMap<(String, String), f64> {
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    for (t, zone, price, at) in rows {
        let e = newest.entry((t, zone)).or_insert((i64::MIN, price));
        if at >= e.0 {
            *e = (at, price);
        }
    }
    newest.into_iter().map(|(k, (_, p))| (k, p)).collect()
}

/// Offerings of one type: on-demand and spot in every zone that offers it and has a subnet.
/// Spot without a price history row is priced at the on-demand price (as Karpenter does until
/// its first refresh).
pub fn offerings(
    name: &str,
    zones: &BTreeSet<String>,
    on_demand: Option<f64>,
    spot: &BTreeMap<(String, String), f64>,
) -> Vec<CatalogOffering> {
    let mut out = Vec::new();
    for z in zones {
        if let Some(p) = on_demand {
            out.push(CatalogOffering {
                zone: z.clone(),
                zone_id: None,
                capacity_type: "on-demand".into(),
                price_usd_per_hour: p,
                available: true,
            });
        }
        if let Some(p) = spot
            .get(&(name.to_string(), z.clone()))
            .copied()
            .or(on_demand)
        {
            out.push(CatalogOffering {
                zone: z.clone(),
                zone_id: None,
                capacity_type: "spot".into(),
                price_usd_per_hour: p,
                available: true,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{ArchitectureType, MemoryInfo, NetworkInfo, ProcessorInfo, VCpuInfo};
    use capstan_model::catalog::CatalogFile;

    fn shared() -> CatalogFile {
        serde_json::from_str(capstan_model::catalog::BUILTIN_CATALOG).unwrap()
    }

    /// The EC2 description of a shared-catalog type, from its raw figures.
    fn described(e: &CatalogEntry) -> InstanceTypeInfo {
        let arch = if e.arch == "arm64" {
            ArchitectureType::Arm64
        } else {
            ArchitectureType::X8664
        };
        let mut net = NetworkInfo::builder();
        if let (Some(n), Some(i)) = (e.eni_max_interfaces, e.eni_ipv4_per_interface) {
            net = net
                .maximum_network_interfaces(n as i32)
                .ipv4_addresses_per_interface(i as i32);
        }
        InstanceTypeInfo::builder()
            .instance_type(e.name.as_str().into())
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(e.vcpu as i32).build())
            .memory_info(MemoryInfo::builder().size_in_mib(e.memory_mib).build())
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(arch)
                    .build(),
            )
            .network_info(net.build())
            .build()
    }

    #[test]
    fn allocatable_from_ec2_figures_agrees_with_the_shared_catalog_for_every_type() {
        let file = shared();
        let mut compared = 0;
        for e in &file.instance_types {
            if e.eni_max_interfaces.is_none() {
                continue; // no ENI figures to derive max pods from
            }
            let got = entry(&described(e), None, vec![], &KubeletOverrides::default())
                .expect("a runnable type");
            assert_eq!(got.max_pods, e.max_pods, "{} max pods", e.name);
            let cpu = e.karpenter_allocatable_cpu_millicores.unwrap();
            let mem = e.karpenter_allocatable_memory_mib.unwrap();
            // The catalog rounds to whole millicores and MiB.
            assert!(
                (got.karpenter_allocatable_cpu_millicores.unwrap() - cpu).abs() <= 1,
                "{} cpu {:?} vs {cpu}",
                e.name,
                got.karpenter_allocatable_cpu_millicores
            );
            assert!(
                (got.karpenter_allocatable_memory_mib.unwrap() - mem).abs() <= 1.0,
                "{} memory {:?} vs {mem}",
                e.name,
                got.karpenter_allocatable_memory_mib
            );
            compared += 1;
        }
        assert!(compared > 1300, "{compared}");
    }

    #[test]
    fn kubelet_settings_change_pods_and_allocatable_as_karpenter_does() {
        // m5.large: 2 vCPU, 8 GiB, 3 ENIs × 10 IPs → 29 pods.
        let base = KubeletOverrides::default();
        let cases = [
            (base.clone(), 29, 1930, 6903.0),
            (
                KubeletOverrides {
                    max_pods: Some(110),
                    ..base.clone()
                },
                110,
                1930,
                6012.0,
            ),
            (
                KubeletOverrides {
                    pods_per_core: Some(4),
                    ..base.clone()
                },
                8,
                1930,
                7134.0,
            ),
            (
                KubeletOverrides {
                    system_reserved: (100.0, 100),
                    eviction_memory_mib: Some(500),
                    ..base.clone()
                },
                29,
                1830,
                6403.0,
            ),
        ];
        for (k, pods, cpu, mem) in cases {
            let p = max_pods(eni_limited_pods(3, 10), 2, &k);
            assert_eq!(p, pods, "{k:?}");
            assert_eq!(allocatable(2, 8192, "amd64", p, &k), (cpu, mem), "{k:?}");
        }
    }

    #[test]
    fn the_newest_spot_price_wins_and_spot_without_history_costs_on_demand() {
        let prices = latest_spot_prices([
            ("m5.large".into(), "us-east-1a".into(), 0.05, 10),
            ("m5.large".into(), "us-east-1a".into(), 0.04, 20),
            ("m5.large".into(), "us-east-1b".into(), 0.06, 5),
        ]);
        assert_eq!(prices[&("m5.large".into(), "us-east-1a".into())], 0.04);
        let zones: BTreeSet<String> = ["us-east-1a", "us-east-1c"].map(String::from).into();
        let o = offerings("m5.large", &zones, Some(0.096), &prices);
        let spot: Vec<(String, f64)> = o
            .iter()
            .filter(|o| o.capacity_type == "spot")
            .map(|o| (o.zone.clone(), o.price_usd_per_hour))
            .collect();
        assert_eq!(
            spot,
            [("us-east-1a".into(), 0.04), ("us-east-1c".into(), 0.096)]
        );
    }
}
