//! Instance types with offerings, and the shared catalog file format.

use crate::labels;
use crate::requirements::{Operator, Requirements};
use crate::resources::{self, MIB, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where and how an instance type can be bought.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// The zone's ID (`use1-az4`, `topology.k8s.aws/zone-id`): the same physical zone in
    /// every account, where zone names are shuffled per account. Unknown where the catalog
    /// does not say.
    pub zone_id: Option<String>,
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
}

/// Stopped, pre-initialised instances of one offering that a launch can start in seconds
/// instead of booting one (a warm pool), as the cloud reports them now.
#[derive(Clone, Debug, PartialEq)]
pub struct Warm {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// How many are ready to start.
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// The labels a node of this type carries, as `In [value]` requirements (zone and
    /// capacity type are per offering and not included).
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub capacity: Resources,
    /// What pods may use: capacity minus system overhead.
    pub allocatable: Resources,
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// The cheapest available offering that `reqs` allow (zone and capacity type).
    pub fn cheapest_offering(&self, reqs: &Requirements) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && offering_allowed(o, reqs))
            .min_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
            })
    }

    pub fn has_offering(&self, reqs: &Requirements) -> bool {
        self.offerings
            .iter()
            .any(|o| o.available && offering_allowed(o, reqs))
    }
}

/// The type named `name` as NodePool `pool` sees it, and its index. Where NodePools see
/// different figures for one type (their node classes differ: kubelet settings, subnets'
/// zones), the merged list holds one variant per pool, labelled with the pool
/// (`capstan.dev/nodepool`, see [`merge_pool_types`]); otherwise one entry serves all.
pub fn type_for_pool<'a>(
    types: &'a [InstanceType],
    name: &str,
    pool: Option<&str>,
) -> Option<(usize, &'a InstanceType)> {
    let mut first = None;
    for (i, t) in types.iter().enumerate() {
        if t.name != name {
            continue;
        }
        match t.labels.get(labels::NODEPOOL) {
            None => return Some((i, t)),
            Some(p) if Some(p.as_str()) == pool => return Some((i, t)),
            Some(_) => {
                first.get_or_insert((i, t));
            }
        }
    }
    first
}

/// The types of every NodePool in one list, in name order: a type every pool that offers it
/// sees alike is listed once; one pools see differently is listed once per pool, labelled
/// (and required) `capstan.dev/nodepool: <pool>`, so each pool schedules onto its own figures
/// and offerings.
pub fn merge_pool_types(per_pool: Vec<(String, Vec<InstanceType>)>) -> Vec<InstanceType> {
    let mut by_name: BTreeMap<String, Vec<(String, InstanceType)>> = BTreeMap::new();
    for (pool, types) in per_pool {
        for t in types {
            by_name
                .entry(t.name.clone())
                .or_default()
                .push((pool.clone(), t));
        }
    }
    let mut out = Vec::new();
    for (_, variants) in by_name {
        if variants.iter().all(|(_, t)| *t == variants[0].1) {
            out.push(variants.into_iter().next().expect("one at least").1);
            continue;
        }
        for (pool, mut t) in variants {
            t.labels.insert(labels::NODEPOOL.into(), pool.clone());
            t.requirements
                .add(crate::requirements::Requirement::in_values(
                    labels::NODEPOOL,
                    [pool.as_str()],
                ));
            out.push(t);
        }
    }
    out
}

/// Whether requirements allow an offering: its zone, zone ID and capacity type. An offering
/// whose zone ID is unknown meets a zone-ID requirement only where that allows no value
/// (`NotIn`, `DoesNotExist`), as a node without the label would.
pub fn offering_allowed(o: &Offering, reqs: &Requirements) -> bool {
    reqs.allows(labels::ZONE, &o.zone)
        && reqs.allows(labels::CAPACITY_TYPE, &o.capacity_type)
        && zone_id_allowed(o.zone_id.as_deref(), reqs)
}

/// Whether requirements allow a zone ID (`None`: unknown, the label absent).
pub fn zone_id_allowed(zone_id: Option<&str>, reqs: &Requirements) -> bool {
    match (zone_id, reqs.get(labels::ZONE_ID)) {
        (_, None) => true,
        (Some(id), Some(r)) => r.has(id),
        (None, Some(r)) => matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{field}: {message}")]
    Field { field: String, message: String },
}

/// The shared catalog file: `{"meta": {...}, "instance_types": [...]}`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    #[serde(default)]
    pub meta: Option<serde_json::Value>,
    /// Zone name → zone ID (`{"us-east-1a": "use1-az4"}`), for offerings that do not give
    /// their own `zone_id`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub zone_ids: BTreeMap<String, String>,
    pub instance_types: Vec<CatalogEntry>,
}

#[derive(Debug, Deserialize, Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CatalogEntry {
    pub name: String,
    #[serde(default)]
    pub family: Option<String>,
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub generation: Option<i64>,
    #[serde(default)]
    pub size: Option<String>,
    pub arch: String,
    /// `kubernetes.io/os`; `linux` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    pub vcpu: i64,
    pub memory_mib: i64,
    /// Further labels a node of this type carries. A key some type in the file defines is the
    /// types' to define: a type without it has no such label (`DoesNotExist`), as for
    /// Karpenter's well-known labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extended resources the type has, by name (`example.com/fpga: 2`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_resources: BTreeMap<String, i64>,
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    #[serde(default)]
    pub hypervisor: Option<String>,
    #[serde(default)]
    pub gpu_count: i64,
    #[serde(default)]
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub gpu_memory_mib: Option<i64>,
    #[serde(default)]
    pub accelerator_count: i64,
    #[serde(default)]
    pub accelerator_name: Option<String>,
    #[serde(default)]
    pub local_nvme_gib: Option<i64>,
    #[serde(default)]
    pub network_bandwidth_mbps: Option<i64>,
    #[serde(default)]
    pub karpenter_allocatable_cpu_millicores: Option<i64>,
    #[serde(default)]
    pub karpenter_allocatable_memory_mib: Option<f64>,
    pub max_pods: i64,
    #[serde(default)]
    pub eni_max_interfaces: Option<i64>,
    #[serde(default)]
    pub eni_ipv4_per_interface: Option<i64>,
    #[serde(default)]
    pub eni_branch_interfaces: Option<i64>,
    #[serde(default)]
    pub eni_max_pods_formula: Option<i64>,
    #[serde(default)]
    pub on_demand_price_usd_per_hour: Option<f64>,
    #[serde(default)]
    pub offerings: Option<Vec<CatalogOffering>>,
}

#[derive(Debug, Deserialize, Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CatalogOffering {
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
    pub capacity_type: String,
    pub price_usd_per_hour: f64,
    #[serde(default = "yes")]
    pub available: bool,
}

fn yes() -> bool {
    true
}

/// `data/aws-instance-types-us-east-1.json`, a copy of the team's shared catalog.
pub const BUILTIN_CATALOG: &str = include_str!("../data/aws-instance-types-us-east-1.json");

/// A loaded catalog.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub region: String,
    pub instance_types: Vec<InstanceType>,
    /// Whether the file listed every type's offerings: then they say where capacity exists,
    /// and planning adds no estimated spot offerings.
    pub offerings_listed: bool,
}

impl Catalog {
    /// Builds instance types from a parsed catalog file. `field` paths in errors are relative
    /// to the file (`instance_types[3].offerings[0].capacity_type`).
    pub fn from_file(file: CatalogFile) -> Result<Catalog, CatalogError> {
        let region = file
            .meta
            .as_ref()
            .and_then(|m| m.get("region"))
            .and_then(|r| r.as_str())
            .unwrap_or("us-east-1")
            .to_string();
        let mut types = Vec::with_capacity(file.instance_types.len());
        let offerings_listed = file.instance_types.iter().all(|e| e.offerings.is_some());
        let type_keys: std::collections::BTreeSet<String> = file
            .instance_types
            .iter()
            .flat_map(|e| e.labels.keys().cloned())
            .collect();
        for (i, e) in file.instance_types.into_iter().enumerate() {
            types.push(
                instance_type(&region, &file.zone_ids, e).map_err(|(field, message)| {
                    CatalogError::Field {
                        field: format!("instance_types[{i}].{field}"),
                        message,
                    }
                })?,
            );
        }
        // A label some type defines, another type does not have.
        for t in &mut types {
            for k in &type_keys {
                if !t.labels.contains_key(k) {
                    t.requirements
                        .add(crate::requirements::Requirement::does_not_exist(k));
                }
            }
        }
        Ok(Catalog {
            region,
            instance_types: types,
            offerings_listed,
        })
    }

    /// The built-in catalog: 1,363 AWS instance types with us-east-1 on-demand prices and
    /// Karpenter's allocatable figures (source and licence in the file's `meta`).
    pub fn builtin() -> Catalog {
        let file: CatalogFile =
            serde_json::from_str(BUILTIN_CATALOG).expect("built-in catalog parses");
        Catalog::from_file(file).expect("built-in catalog is valid")
    }

    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.iter().find(|t| t.name == name)
    }
}

fn instance_type(
    region: &str,
    zone_ids: &BTreeMap<String, String>,
    e: CatalogEntry,
) -> Result<InstanceType, (String, String)> {
    if e.vcpu <= 0 {
        return Err(("vcpu".into(), format!("must be positive, got {}", e.vcpu)));
    }
    if e.memory_mib <= 0 {
        return Err((
            "memory_mib".into(),
            format!("must be positive, got {}", e.memory_mib),
        ));
    }
    let mut capacity = Resources {
        cpu: e.vcpu * 1000,
        memory: e.memory_mib * MIB,
        pods: e.max_pods,
        ..Default::default()
    };
    let gpu_resource = match e.gpu_name.as_deref() {
        Some("radeon-pro-v520") => resources::AMD_GPU,
        _ => resources::NVIDIA_GPU,
    };
    if e.gpu_count > 0 {
        capacity.set(gpu_resource, e.gpu_count);
    }
    let neuron = e
        .accelerator_name
        .as_deref()
        .is_some_and(|n| n.starts_with("inferentia") || n.starts_with("trainium"));
    if neuron && e.accelerator_count > 0 {
        capacity.set(resources::NEURON, e.accelerator_count);
    }
    for (name, n) in &e.extended_resources {
        if *n < 0 || !name.contains('/') {
            return Err((
                format!("extended_resources.{name}"),
                "must be a non-negative count of a domain-qualified resource (example.com/fpga)"
                    .into(),
            ));
        }
        capacity.set(name, *n);
    }
    let mut allocatable = capacity.clone();
    if let Some(c) = e.karpenter_allocatable_cpu_millicores {
        allocatable.cpu = c;
    }
    if let Some(m) = e.karpenter_allocatable_memory_mib {
        allocatable.memory = (m * MIB as f64).floor() as i64;
    }

    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    put(labels::INSTANCE_TYPE, e.name.clone());
    put(labels::ARCH, e.arch.clone());
    put(labels::OS, e.os.clone().unwrap_or_else(|| "linux".into()));
    put(labels::REGION, region.to_string());
    put(labels::INSTANCE_CPU, e.vcpu.to_string());
    put(labels::INSTANCE_MEMORY, e.memory_mib.to_string());
    // Karpenter's AWS provider labels GPUs, NVMe and accelerators only where the type has
    // them: a type without is absent from `Exists`, present in `DoesNotExist`.
    if e.gpu_count > 0 {
        put(labels::INSTANCE_GPU_COUNT, e.gpu_count.to_string());
        let maker = if gpu_resource == resources::AMD_GPU {
            "amd"
        } else {
            "nvidia"
        };
        put(labels::INSTANCE_GPU_MANUFACTURER, maker.into());
    }
    let (family, size) = match e.name.split_once('.') {
        Some((f, s)) => (f.to_string(), s.to_string()),
        None => (e.name.clone(), String::new()),
    };
    let family = e.family.clone().unwrap_or(family);
    put(labels::INSTANCE_FAMILY, family.clone());
    put(labels::INSTANCE_SIZE, e.size.clone().unwrap_or(size));
    let category = e.category.clone().unwrap_or_else(|| {
        family
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect()
    });
    put(labels::INSTANCE_CATEGORY, category);
    if let Some(g) = e.generation {
        put(labels::INSTANCE_GENERATION, g.to_string());
    }
    if let Some(n) = &e.gpu_name {
        put(labels::INSTANCE_GPU_NAME, n.clone());
    }
    if let Some(m) = e.gpu_memory_mib {
        put(labels::INSTANCE_GPU_MEMORY, m.to_string());
    }
    if let Some(m) = &e.cpu_manufacturer {
        put(labels::INSTANCE_CPU_MANUFACTURER, m.clone());
    }
    if let Some(h) = &e.hypervisor {
        put(labels::INSTANCE_HYPERVISOR, h.clone());
    }
    if let Some(b) = e.network_bandwidth_mbps {
        put(labels::INSTANCE_NETWORK_BANDWIDTH, b.to_string());
    }
    if let Some(n) = e.local_nvme_gib.filter(|&n| n > 0) {
        put(labels::INSTANCE_LOCAL_NVME, n.to_string());
    }
    if let Some(a) = e
        .accelerator_name
        .as_ref()
        .filter(|_| e.accelerator_count > 0)
    {
        put(labels::INSTANCE_ACCELERATOR_NAME, a.clone());
        if neuron {
            put(labels::INSTANCE_ACCELERATOR_MANUFACTURER, "aws".into());
        }
        put(
            labels::INSTANCE_ACCELERATOR_COUNT,
            e.accelerator_count.to_string(),
        );
    }

    let offerings = match e.offerings {
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (j, o) in list.into_iter().enumerate() {
                if !labels::CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                    return Err((
                        format!("offerings[{j}].capacity_type"),
                        format!(
                            "must be \"reserved\", \"spot\" or \"on-demand\", got {:?}",
                            o.capacity_type
                        ),
                    ));
                }
                if !(o.price_usd_per_hour.is_finite() && o.price_usd_per_hour >= 0.0) {
                    return Err((
                        format!("offerings[{j}].price_usd_per_hour"),
                        "must be a non-negative number".into(),
                    ));
                }
                out.push(Offering {
                    zone_id: o.zone_id.or_else(|| zone_ids.get(&o.zone).cloned()),
                    zone: o.zone,
                    capacity_type: o.capacity_type,
                    price: o.price_usd_per_hour,
                    available: o.available,
                });
            }
            out
        }
        // No offerings listed: on-demand in three zones at the listed price; no spot. A type
        // without a price cannot be launched.
        None => match e.on_demand_price_usd_per_hour {
            Some(p) => ["a", "b", "c"]
                .iter()
                .map(|z| Offering {
                    zone: format!("{region}{z}"),
                    zone_id: zone_ids.get(&format!("{region}{z}")).cloned(),
                    capacity_type: labels::CAPACITY_ON_DEMAND.into(),
                    price: p,
                    available: true,
                })
                .collect(),
            None => Vec::new(),
        },
    };
    for (k, v) in &e.labels {
        if labels::is_well_known(k) {
            return Err((
                format!("labels.{k}"),
                "is a well-known label the type's own fields set".into(),
            ));
        }
        l.insert(k.clone(), v.clone());
    }
    Ok(InstanceType {
        name: e.name,
        requirements: Requirements::from_labels(&l),
        labels: l,
        capacity,
        allocatable,
        offerings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    fn load(json: &str) -> Result<Catalog, CatalogError> {
        Catalog::from_file(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn pools_that_see_a_type_alike_share_one_entry_and_pools_that_differ_get_one_each() {
        let c = load(r#"{"meta":{"region":"us-east-1"},"instance_types":[
            {"name":"m7i.large","arch":"amd64","vcpu":2,"memory_mib":8192,"max_pods":29,"on_demand_price_usd_per_hour":0.1008},
            {"name":"c7i.large","arch":"amd64","vcpu":2,"memory_mib":4096,"max_pods":29,"on_demand_price_usd_per_hour":0.0893}]}"#).unwrap();
        let base = c.instance_types;
        let mut fewer_pods = base.clone();
        fewer_pods[0].allocatable.pods = 8;
        let merged = merge_pool_types(vec![
            ("a".into(), base.clone()),
            ("b".into(), base.clone()),
            ("c".into(), fewer_pods),
        ]);
        let names: Vec<(&str, Option<&str>)> = merged
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.labels.get(labels::NODEPOOL).map(String::as_str),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("c7i.large", None),
                ("m7i.large", Some("a")),
                ("m7i.large", Some("b")),
                ("m7i.large", Some("c")),
            ]
        );
        assert!(merged[3].requirements.allows(labels::NODEPOOL, "c"));
        assert!(!merged[3].requirements.allows(labels::NODEPOOL, "a"));
        let cases = [
            ("m7i.large", Some("c"), Some((3, 8))),
            ("m7i.large", Some("a"), Some((1, 29))),
            ("m7i.large", Some("elsewhere"), Some((1, 29))),
            ("m7i.large", None, Some((1, 29))),
            ("c7i.large", Some("c"), Some((0, 29))),
            ("r7i.large", Some("c"), None),
        ];
        for (name, pool, want) in cases {
            let got = type_for_pool(&merged, name, pool).map(|(i, t)| (i, t.allocatable.pods));
            assert_eq!(got, want, "{name} for {pool:?}");
        }
        // One pool, or pools alike: the list is the pool's own.
        assert_eq!(merge_pool_types(vec![("a".into(), base.clone())]).len(), 2);
    }

    #[test]
    fn a_type_without_offerings_is_on_demand_in_three_zones() {
        let c = load(r#"{"meta":{"region":"us-west-2"},"instance_types":[{"name":"m7i.large","arch":"amd64","vcpu":2,"memory_mib":8192,"max_pods":29,"karpenter_allocatable_cpu_millicores":1930,"karpenter_allocatable_memory_mib":7134.5,"on_demand_price_usd_per_hour":0.1008}]}"#).unwrap();
        let t = &c.instance_types[0];
        assert_eq!(t.offerings.len(), 3);
        assert_eq!(t.offerings[0].zone, "us-west-2a");
        assert!(
            t.offerings
                .iter()
                .all(|o| o.capacity_type == "on-demand" && o.price == 0.1008)
        );
        assert_eq!(t.allocatable.cpu, 1930);
        assert_eq!(t.allocatable.pods, 29);
        assert_eq!(t.labels[labels::INSTANCE_FAMILY], "m7i");
        assert_eq!(t.labels[labels::INSTANCE_SIZE], "large");
        assert_eq!(t.labels[labels::INSTANCE_CATEGORY], "m");
    }

    #[test]
    fn types_without_gpus_or_nvme_have_no_such_labels_rather_than_zero() {
        let c = load(r#"{"instance_types":[
            {"name":"m7i.large","arch":"amd64","vcpu":2,"memory_mib":8192,"max_pods":29,"gpu_count":0,"local_nvme_gib":0,"accelerator_count":0,"on_demand_price_usd_per_hour":0.1},
            {"name":"g5.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":58,"gpu_count":1,"gpu_name":"a10g","local_nvme_gib":250,"on_demand_price_usd_per_hour":1.0},
            {"name":"g4ad.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":8,"gpu_count":1,"gpu_name":"radeon-pro-v520","on_demand_price_usd_per_hour":0.4},
            {"name":"inf2.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":58,"accelerator_count":1,"accelerator_name":"inferentia2","on_demand_price_usd_per_hour":0.7}]}"#).unwrap();
        let label = |i: usize, k: &str| c.instance_types[i].labels.get(k).map(String::as_str);
        // (type, key, value)
        let cases = [
            (0, labels::INSTANCE_GPU_COUNT, None),
            (0, labels::INSTANCE_GPU_NAME, None),
            (0, labels::INSTANCE_GPU_MANUFACTURER, None),
            (0, labels::INSTANCE_LOCAL_NVME, None),
            (0, labels::INSTANCE_ACCELERATOR_COUNT, None),
            (1, labels::INSTANCE_GPU_COUNT, Some("1")),
            (1, labels::INSTANCE_GPU_NAME, Some("a10g")),
            (1, labels::INSTANCE_GPU_MANUFACTURER, Some("nvidia")),
            (1, labels::INSTANCE_LOCAL_NVME, Some("250")),
            (2, labels::INSTANCE_GPU_MANUFACTURER, Some("amd")),
            (3, labels::INSTANCE_ACCELERATOR_NAME, Some("inferentia2")),
            (3, labels::INSTANCE_ACCELERATOR_MANUFACTURER, Some("aws")),
            (3, labels::INSTANCE_GPU_COUNT, None),
        ];
        for (i, key, want) in cases {
            assert_eq!(label(i, key), want, "{} {key}", c.instance_types[i].name);
        }
    }

    #[test]
    fn gpus_are_named_by_vendor() {
        let c = load(r#"{"instance_types":[
            {"name":"g5.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":58,"gpu_count":1,"gpu_name":"a10g","on_demand_price_usd_per_hour":1.0},
            {"name":"g4ad.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":8,"gpu_count":1,"gpu_name":"radeon-pro-v520","on_demand_price_usd_per_hour":0.4},
            {"name":"inf2.xlarge","arch":"amd64","vcpu":4,"memory_mib":16384,"max_pods":58,"accelerator_count":1,"accelerator_name":"inferentia2","on_demand_price_usd_per_hour":0.7}]}"#).unwrap();
        assert_eq!(c.instance_types[0].allocatable.get("nvidia.com/gpu"), 1);
        assert_eq!(c.instance_types[1].allocatable.get("amd.com/gpu"), 1);
        assert_eq!(c.instance_types[1].allocatable.get("nvidia.com/gpu"), 0);
        assert_eq!(
            c.instance_types[2].allocatable.get("aws.amazon.com/neuron"),
            1
        );
    }

    #[test]
    fn offerings_take_zone_ids_from_the_offering_or_the_files_map_and_requirements_select_them() {
        let c = load(r#"{"zone_ids":{"us-east-1a":"use1-az4","us-east-1b":"use1-az6"},"instance_types":[
            {"name":"m7i.large","arch":"amd64","vcpu":2,"memory_mib":8192,"max_pods":29,"offerings":[
                {"zone":"us-east-1a","capacity_type":"on-demand","price_usd_per_hour":0.1},
                {"zone":"us-east-1b","zone_id":"use1-az1","capacity_type":"on-demand","price_usd_per_hour":0.1},
                {"zone":"us-east-1c","capacity_type":"on-demand","price_usd_per_hour":0.1}]}]}"#)
        .unwrap();
        let ids: Vec<Option<&str>> = c.instance_types[0]
            .offerings
            .iter()
            .map(|o| o.zone_id.as_deref())
            .collect();
        assert_eq!(ids, [Some("use1-az4"), Some("use1-az1"), None]);
        // (requirement on the zone ID, zones allowed)
        let cases: [(Option<Requirement>, &[&str]); 5] = [
            (None, &["us-east-1a", "us-east-1b", "us-east-1c"]),
            (
                Some(Requirement::in_values(labels::ZONE_ID, ["use1-az1"])),
                &["us-east-1b"],
            ),
            (
                Some(Requirement::not_in(labels::ZONE_ID, ["use1-az1"])),
                &["us-east-1a", "us-east-1c"],
            ),
            (
                Some(Requirement::exists(labels::ZONE_ID)),
                &["us-east-1a", "us-east-1b"],
            ),
            (
                Some(Requirement::does_not_exist(labels::ZONE_ID)),
                &["us-east-1c"],
            ),
        ];
        for (r, want) in cases {
            let mut reqs = Requirements::new();
            if let Some(r) = r.clone() {
                reqs.add(r);
            }
            let got: Vec<&str> = c.instance_types[0]
                .offerings
                .iter()
                .filter(|o| offering_allowed(o, &reqs))
                .map(|o| o.zone.as_str())
                .collect();
            assert_eq!(got, want, "{r:?}");
        }
    }

    #[test]
    fn a_type_takes_its_os_extra_labels_and_extended_resources_from_the_file() {
        let c = load(r#"{"instance_types":[
            {"name":"w.large","arch":"amd64","os":"windows","vcpu":2,"memory_mib":4096,"max_pods":10,
             "labels":{"size":"large","integer":"2"},"extended_resources":{"fake.com/vendor-a":2},
             "on_demand_price_usd_per_hour":0.3},
            {"name":"l.small","arch":"arm64","vcpu":1,"memory_mib":1024,"max_pods":10,
             "labels":{"integer":"1"},"on_demand_price_usd_per_hour":0.1}]}"#)
        .unwrap();
        let (w, l) = (&c.instance_types[0], &c.instance_types[1]);
        assert_eq!(w.labels[labels::OS], "windows");
        assert_eq!(l.labels[labels::OS], "linux", "linux when absent");
        assert_eq!(w.labels["size"], "large");
        assert_eq!(w.capacity.get("fake.com/vendor-a"), 2);
        assert_eq!(w.allocatable.get("fake.com/vendor-a"), 2);
        assert!(!l.labels.contains_key("size"));
        assert_eq!(
            l.requirements.get("size").map(|r| r.operator()),
            Some(Operator::DoesNotExist),
            "a label another type defines is absent, not the pool's to define"
        );
        assert!(!l.requirements.has_key("unrelated"));
        for (json, field) in [
            (
                r#"{"instance_types":[{"name":"x","arch":"amd64","vcpu":1,"memory_mib":1,"max_pods":1,"labels":{"kubernetes.io/arch":"arm64"}}]}"#,
                "instance_types[0].labels.kubernetes.io/arch",
            ),
            (
                r#"{"instance_types":[{"name":"x","arch":"amd64","vcpu":1,"memory_mib":1,"max_pods":1,"extended_resources":{"fpga":1}}]}"#,
                "instance_types[0].extended_resources.fpga",
            ),
        ] {
            let err = load(json).unwrap_err().to_string();
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn a_type_without_a_price_is_not_launchable() {
        let c = load(r#"{"instance_types":[{"name":"x.large","arch":"amd64","vcpu":2,"memory_mib":4096,"max_pods":10,"on_demand_price_usd_per_hour":null}]}"#).unwrap();
        assert!(c.instance_types[0].offerings.is_empty());
    }

    #[test]
    fn a_bad_offering_names_its_field() {
        let err = load(r#"{"instance_types":[{"name":"x.large","arch":"amd64","vcpu":2,"memory_mib":4096,"max_pods":10,"offerings":[{"zone":"a","capacity_type":"dedicated","price_usd_per_hour":1}]}]}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "instance_types[0].offerings[0].capacity_type: must be \"reserved\", \"spot\" or \"on-demand\", got \"dedicated\""
        );
        let c = load(r#"{"instance_types":[{"name":"x.large","arch":"amd64","vcpu":2,"memory_mib":4096,"max_pods":10,"offerings":[{"zone":"a","capacity_type":"reserved","price_usd_per_hour":0}]}]}"#).unwrap();
        assert_eq!(c.instance_types[0].offerings[0].capacity_type, "reserved");
    }

    #[test]
    fn the_builtin_catalog_loads_every_type() {
        let c = Catalog::builtin();
        assert_eq!(c.instance_types.len(), 1363);
        assert_eq!(
            c.instance_types
                .iter()
                .filter(|t| !t.offerings.is_empty())
                .count(),
            1345
        );
    }
}
