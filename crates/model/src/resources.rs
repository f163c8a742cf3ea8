//! Resource lists in the units the scheduler compares: CPU in millicores, everything else in
//! whole units (bytes for memory and storage, counts for pods and extended resources).

use crate::quantity::{Quantity, QuantityError};
use std::collections::BTreeMap;
use std::fmt;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const NEURON: &str = "aws.amazon.com/neuron";

pub const MIB: i64 = 1024 * 1024;

/// A resource list. The four common resources are fields (fast, no allocation); every other
/// resource name (`nvidia.com/gpu`, `hugepages-2Mi`, …) lives in `extended`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Count.
    pub pods: i64,
    /// Whole units, by resource name. Zero entries are never stored.
    pub extended: BTreeMap<String, i64>,
}

/// Which resource did not fit, and by how much.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub resource: String,
    pub requested: i64,
    pub available: i64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (needs {}, has {})",
            self.resource,
            format_amount(&self.resource, self.requested),
            format_amount(&self.resource, self.available)
        )
    }
}

/// Formats an amount in the unit a person reads for that resource.
/// Amounts of one resource in one unit, so they compare at a glance: cpu in cores (with the
/// decimals needed), memory in the largest binary unit that divides them all.
pub fn format_amounts(resource: &str, vs: &[i64]) -> Vec<String> {
    match resource {
        CPU => vs
            .iter()
            .map(|&v| {
                if v % 1000 == 0 {
                    format!("{}", v / 1000)
                } else {
                    let s = format!("{:.3}", v as f64 / 1000.0);
                    s.trim_end_matches('0').trim_end_matches('.').to_string()
                }
            })
            .collect(),
        MEMORY | EPHEMERAL_STORAGE => {
            let unit = [(1024 * MIB, "Gi"), (MIB, "Mi"), (1024, "Ki")]
                .into_iter()
                .find(|(u, _)| vs.iter().all(|v| v % u == 0));
            vs.iter()
                .map(|&v| match unit {
                    Some((u, name)) => format!("{}{name}", v / u),
                    None => format!("{v}"),
                })
                .collect()
        }
        _ => vs.iter().map(|v| format!("{v}")).collect(),
    }
}

pub fn format_amount(resource: &str, v: i64) -> String {
    match resource {
        CPU => {
            if v % 1000 == 0 {
                format!("{}", v / 1000)
            } else {
                format!("{v}m")
            }
        }
        MEMORY | EPHEMERAL_STORAGE => {
            if v % (1024 * MIB) == 0 {
                format!("{}Gi", v / (1024 * MIB))
            } else if v % MIB == 0 {
                format!("{}Mi", v / MIB)
            } else {
                format!("{v}")
            }
        }
        _ => format!("{v}"),
    }
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one resource from a parsed quantity, converting to the scheduler's unit.
    pub fn set_quantity(&mut self, name: &str, q: Quantity) {
        let v = if name == CPU {
            q.milli_ceil()
        } else {
            q.units_ceil()
        };
        self.set(name, v);
    }

    /// Parses and sets one resource.
    pub fn set_str(&mut self, name: &str, value: &str) -> Result<(), QuantityError> {
        let q = Quantity::parse(value)?;
        self.set_quantity(name, q);
        Ok(())
    }

    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            CPU => self.cpu = v,
            MEMORY => self.memory = v,
            EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            PODS => self.pods = v,
            other => {
                if v == 0 {
                    self.extended.remove(other);
                } else {
                    self.extended.insert(other.to_string(), v);
                }
            }
        }
    }

    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Every (name, amount) pair that is non-zero, common resources first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        [
            (CPU, self.cpu),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .chain(self.extended.iter().map(|(k, v)| (k.as_str(), *v)))
    }

    /// Adds `other`. Amounts saturate at the ends of `i64` (a quantity such as `1E` CPU
    /// already sits at the top): an absurd request stays absurd instead of wrapping round.
    pub fn add(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
            if *e == 0 {
                self.extended.remove(k);
            }
        }
    }

    /// Subtracts `other`, saturating as `add` does.
    pub fn sub(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_sub(*v);
            if *e == 0 {
                self.extended.remove(k);
            }
        }
    }

    /// `n` times these amounts, saturating as `add` does.
    pub fn times(&self, n: i64) -> Resources {
        Resources {
            cpu: self.cpu.saturating_mul(n),
            memory: self.memory.saturating_mul(n),
            ephemeral_storage: self.ephemeral_storage.saturating_mul(n),
            pods: self.pods.saturating_mul(n),
            extended: self
                .extended
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
                .filter(|(_, v)| *v != 0)
                .collect(),
        }
    }

    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    /// What is left of `self` after `other`, no amount below zero.
    pub fn minus_floor_zero(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        let negative: Vec<String> = r
            .iter()
            .filter(|(_, v)| *v < 0)
            .map(|(k, _)| k.to_string())
            .collect();
        for k in negative {
            r.set(&k, 0);
        }
        r
    }

    /// Component-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.pods = self.pods.max(other.pods);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// True when every requested amount is within `available`. A resource absent from
    /// `available` counts as zero, except ephemeral storage, which nodes often do not report
    /// and which is then not checked (as Karpenter does when a type declares none).
    pub fn fits_in(&self, available: &Resources) -> bool {
        self.cpu <= available.cpu
            && self.memory <= available.memory
            && self.pods <= available.pods
            && (available.ephemeral_storage == 0
                || self.ephemeral_storage <= available.ephemeral_storage)
            && self
                .extended
                .iter()
                .all(|(k, v)| *v <= available.extended.get(k).copied().unwrap_or(0))
    }

    /// The first resource that does not fit, for reasons shown to people.
    pub fn shortfall(&self, available: &Resources) -> Option<Shortfall> {
        let check = |name: &str, requested: i64, avail: i64| {
            (requested > avail).then(|| Shortfall {
                resource: name.to_string(),
                requested,
                available: avail,
            })
        };
        if let Some(s) = check(CPU, self.cpu, available.cpu) {
            return Some(s);
        }
        if let Some(s) = check(MEMORY, self.memory, available.memory) {
            return Some(s);
        }
        if let Some(s) = check(PODS, self.pods, available.pods) {
            return Some(s);
        }
        if available.ephemeral_storage != 0
            && let Some(s) = check(
                EPHEMERAL_STORAGE,
                self.ephemeral_storage,
                available.ephemeral_storage,
            )
        {
            return Some(s);
        }
        self.extended.iter().find_map(|(k, v)| {
            let avail = available.extended.get(k).copied().unwrap_or(0);
            (*v > avail).then(|| Shortfall {
                resource: k.clone(),
                requested: *v,
                available: avail,
            })
        })
    }

    pub fn is_zero(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.pods == 0
            && self.extended.is_empty()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{k}={}", format_amount(k, v))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_compared_in_one_message_share_a_unit() {
        // (resource, amounts, texts)
        let cases: [(&str, Vec<i64>, Vec<&str>); 5] = [
            (CPU, vec![100_000_000, 893_690], vec!["100000", "893.69"]),
            (CPU, vec![2000, 16000], vec!["2", "16"]),
            (CPU, vec![500, 2000], vec!["0.5", "2"]),
            (MEMORY, vec![3 << 30, 1536 * MIB], vec!["3072Mi", "1536Mi"]),
            (MEMORY, vec![4 << 30, 2 << 30], vec!["4Gi", "2Gi"]),
        ];
        for (r, vs, want) in cases {
            assert_eq!(format_amounts(r, &vs), want, "{r} {vs:?}");
        }
    }

    fn res(pairs: &[(&str, &str)]) -> Resources {
        let mut r = Resources::new();
        for (k, v) in pairs {
            r.set_str(k, v).unwrap();
        }
        r
    }

    #[test]
    fn cpu_is_kept_in_millicores_and_memory_in_bytes() {
        let r = res(&[("cpu", "1.5"), ("memory", "1Gi"), ("nvidia.com/gpu", "2")]);
        assert_eq!(r.cpu, 1500);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.get("nvidia.com/gpu"), 2);
    }

    #[test]
    fn extended_resources_missing_from_the_node_do_not_fit() {
        let pod = res(&[("cpu", "1"), ("nvidia.com/gpu", "1")]);
        let node = res(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")]);
        assert!(!pod.fits_in(&node));
        let s = pod.shortfall(&node).unwrap();
        assert_eq!(s.resource, "nvidia.com/gpu");
        assert_eq!(s.to_string(), "nvidia.com/gpu (needs 1, has 0)");
    }

    #[test]
    fn add_and_sub_are_inverse_and_drop_zero_entries() {
        let a = res(&[("cpu", "1"), ("amd.com/gpu", "1")]);
        let mut b = res(&[("cpu", "2")]);
        b.add(&a);
        assert_eq!(b.cpu, 3000);
        b.sub(&a);
        assert_eq!(b, res(&[("cpu", "2")]));
    }

    #[test]
    fn shortfall_names_the_first_resource_over() {
        let pod = res(&[("cpu", "3"), ("memory", "1Gi"), ("pods", "1")]);
        let node = res(&[("cpu", "2"), ("memory", "8Gi"), ("pods", "10")]);
        assert_eq!(
            pod.shortfall(&node).unwrap().to_string(),
            "cpu (needs 3, has 2)"
        );
    }
}
