//! Headroom: spare capacity a NodePool keeps ready for pods that have not arrived yet, as
//! placeholder pods of a low priority (the overprovisioning pattern). Real pods preempt them
//! at once; the placeholders go pending and capstan launches capacity for them again.
//!
//! Asked for with the NodePool annotation `capstan.dev/headroom` (it works unchanged on
//! `karpenter.sh/v1` NodePools): `count=4,cpu=1,memory=2Gi` keeps room for four pods of one
//! CPU and 2 GiB; `percent=10,cpu=500m,memory=1Gi` keeps 10% of the CPU the pool's pods
//! request, in pods of 500m and 1 GiB (rounded up, at least one).

use crate::quantity::Quantity;
use crate::resources::{CPU, MEMORY, Resources};

/// The NodePool annotation.
pub const ANNOTATION: &str = "capstan.dev/headroom";
/// The label on placeholder pods, naming their NodePool.
pub const LABEL: &str = "capstan.dev/headroom";
/// The PriorityClass placeholder pods run at (the chart installs it, value
/// [`PRIORITY`], `preemptionPolicy: Never`).
pub const PRIORITY_CLASS: &str = "capstan-headroom";
/// Below every workload's default priority (0), above Cluster Autoscaler's expendable cutoff
/// (-10): capstan launches nodes for placeholders, and any ordinary pod preempts them.
pub const PRIORITY: i32 = -1;

/// How much room, in placeholder pods of one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Headroom {
    pub amount: Amount,
    /// Each placeholder's requests (`pods: 1` included).
    pub requests: Resources,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// This many placeholders.
    Pods(u32),
    /// Placeholders holding this percentage of the CPU the pool's other pods request.
    PercentOfCpu(u32),
}

impl Headroom {
    /// Parses the annotation's value; the error says what is wrong with it.
    pub fn parse(value: &str) -> Result<Headroom, String> {
        let mut amount = None;
        let mut requests = Resources::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            let set = |amount: &mut Option<Amount>, a: Amount| {
                if amount.replace(a).is_some() {
                    return Err("give one of count and percent, once".to_string());
                }
                Ok(())
            };
            match k {
                "count" => {
                    let n: u32 = v
                        .parse()
                        .map_err(|_| format!("count={v}: expected a whole number"))?;
                    set(&mut amount, Amount::Pods(n))?;
                }
                "percent" => {
                    let n: u32 = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| format!("percent={v}: expected 1 to 1000"))?;
                    set(&mut amount, Amount::PercentOfCpu(n))?;
                }
                CPU | MEMORY => {
                    let q = Quantity::parse(v).map_err(|e| format!("{k}={v}: {e}"))?;
                    requests.set_quantity(k, q);
                    if requests.get(k) <= 0 {
                        return Err(format!("{k}={v}: must be more than zero"));
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown key {k:?} (expected count or percent, cpu, memory)"
                    ));
                }
            }
        }
        let amount = amount.ok_or("give count=N or percent=P")?;
        if requests.cpu <= 0 && requests.memory <= 0 {
            return Err("give the placeholder's cpu and/or memory".into());
        }
        requests.pods = 1;
        Ok(Headroom { amount, requests })
    }

    /// How many placeholders, when the pool's other pods request `requested_cpu` millicores.
    pub fn placeholders(&self, requested_cpu: i64) -> u32 {
        match self.amount {
            Amount::Pods(n) => n,
            Amount::PercentOfCpu(p) => {
                let want = requested_cpu.max(0) as i128 * p as i128;
                let each = (self.requests.cpu.max(1) as i128) * 100;
                let n = (want + each - 1) / each;
                n.clamp(1, u32::MAX as i128) as u32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_annotations_parse_or_say_what_is_wrong() {
        let ok: &[(&str, Amount, i64, i64)] = &[
            ("count=4,cpu=1,memory=2Gi", Amount::Pods(4), 1000, 2 << 30),
            (" percent=10 , cpu=500m ", Amount::PercentOfCpu(10), 500, 0),
            ("memory=1Gi,count=0", Amount::Pods(0), 0, 1 << 30),
        ];
        for (text, amount, cpu, mem) in ok {
            let h = Headroom::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(h.amount, *amount, "{text}");
            assert_eq!(
                (h.requests.cpu, h.requests.memory, h.requests.pods),
                (*cpu, *mem, 1),
                "{text}"
            );
        }
        let bad: &[(&str, &str)] = &[
            ("", "count=N or percent=P"),
            ("cpu=1", "count=N or percent=P"),
            ("count=2", "cpu and/or memory"),
            ("count=2,percent=5,cpu=1", "one of count and percent"),
            ("count=-1,cpu=1", "whole number"),
            ("percent=0,cpu=1", "1 to 1000"),
            ("count=1,cpu=lots", "cpu=lots"),
            ("count=1,cpu=0", "more than zero"),
            ("count=1,gpu=1", "unknown key \"gpu\""),
            ("count 1", "not key=value"),
        ];
        for (text, says) in bad {
            let e = Headroom::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_percentage_of_requested_cpu_becomes_whole_placeholders_and_at_least_one() {
        let h = Headroom::parse("percent=10,cpu=500m").unwrap();
        for (requested, want) in [(0, 1), (4_000, 1), (5_000, 1), (5_001, 2), (100_000, 20)] {
            assert_eq!(h.placeholders(requested), want, "{requested}m");
        }
        let h = Headroom::parse("count=3,memory=1Gi").unwrap();
        assert_eq!(h.placeholders(1_000_000), 3);
    }
}
