//! Scenarios: what a simulation runs — traffic, workloads, NodePools, the cloud's behaviour,
//! faults and the duration — as YAML. Unknown fields are errors; every error names the file
//! and the field.

use capstan_fake_cloud::FakeCloudConfig;
use capstan_model::nodepool::{NodePoolObject, parse_duration};
use capstan_model::{NodePool, Quantity};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The built-in scenario `capstan simulate` runs with no `--scenario`.
pub const DEFAULT: &str = include_str!("../scenarios/default.yaml");
/// Three busy hours for `--seeds N --faults` runs.
pub const FAULTS: &str = include_str!("../scenarios/faults.yaml");
/// A 1,000-node day (30,000+ pods at peak), for the scale benchmark.
pub const LARGE: &str = include_str!("../scenarios/large.yaml");

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub name: String,
    /// How long to simulate (`24h`, `90m`…).
    #[serde(default = "day")]
    pub duration: String,
    /// Unix-time start, RFC 3339 (the disruption engine's cron budgets read it).
    #[serde(default = "start")]
    pub start: String,
    #[serde(default)]
    pub catalog: CatalogFilter,
    pub node_pools: Vec<NodePoolObject>,
    #[serde(default)]
    pub daemon_sets: Vec<DaemonSet>,
    #[serde(default)]
    pub cloud: FakeCloudConfig,
    pub traffic: Traffic,
    pub workloads: Vec<Workload>,
    #[serde(default)]
    pub faults: Faults,
    #[serde(default)]
    pub controller: ControllerSpec,
}

fn day() -> String {
    "24h".into()
}

fn start() -> String {
    "2026-01-05T00:00:00Z".into()
}

/// Which instance types of the built-in catalog the fake cloud offers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CatalogFilter {
    /// Instance families (`m7i`, `c7g`…); empty: all.
    #[serde(default)]
    pub families: Vec<String>,
    /// Largest vCPU count offered; 0: no limit.
    #[serde(default)]
    pub max_vcpu: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DaemonSet {
    pub name: String,
    pub cpu: String,
    pub memory: String,
}

/// Requests per second arriving at the cluster: a diurnal curve, spikes and lulls, noise.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Traffic {
    pub base_rps: f64,
    pub peak_rps: f64,
    /// Hour of the day (0–24) of the diurnal peak.
    #[serde(default = "fourteen")]
    pub peak_hour: f64,
    /// Relative noise (standard deviation of a per-minute multiplier).
    #[serde(default)]
    pub noise: f64,
    #[serde(default)]
    pub spikes: Vec<Window>,
    #[serde(default)]
    pub lulls: Vec<Window>,
}

fn fourteen() -> f64 {
    14.0
}

/// A period during which traffic is multiplied.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Window {
    /// Offset from the start (`11h`, `90m`).
    pub at: String,
    pub duration: String,
    pub multiplier: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    pub name: String,
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// Per-pod CPU and memory requests.
    pub cpu: String,
    pub memory: String,
    /// Fixed replicas (no autoscaler).
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Scaled by the HPA on CPU utilization from its share of the traffic.
    #[serde(default)]
    pub hpa: Option<HpaSpec>,
    /// Scaled by a KEDA-style ScaledObject on a queue's depth (can scale to zero).
    #[serde(default)]
    pub queue: Option<QueueSpec>,
    /// Fraction of the traffic this workload serves.
    #[serde(default)]
    pub traffic_share: f64,
    /// CPU one request per second costs (`2m`).
    #[serde(default = "zero_cpu")]
    pub cpu_per_rps: String,
    /// CPU a pod uses idle.
    #[serde(default = "zero_cpu")]
    pub idle_cpu: String,
    #[serde(default)]
    pub pdb: Option<PdbSpec>,
    /// Topology spread (`zone` or `hostname`), maxSkew 1, ScheduleAnyway for hostname,
    /// DoNotSchedule for zone.
    #[serde(default)]
    pub spread: Option<String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Seconds from binding to Ready.
    #[serde(default = "ten")]
    pub startup_seconds: f64,
    #[serde(default = "thirty")]
    pub termination_grace_seconds: i64,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub do_not_disrupt: bool,
}

fn default_ns() -> String {
    "default".into()
}
fn zero_cpu() -> String {
    "0".into()
}
fn ten() -> f64 {
    10.0
}
fn thirty() -> i64 {
    30
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HpaSpec {
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub target_cpu_utilization: i32,
    /// behavior.scaleDown.stabilizationWindowSeconds (default 300).
    #[serde(default)]
    pub scale_down_stabilization_seconds: Option<i32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueSpec {
    /// When jobs arrive: windows with a rate.
    pub arrivals: Vec<Arrival>,
    /// Seconds one replica takes per job.
    pub job_seconds: f64,
    /// Queue depth one replica handles (KEDA `queueLength`).
    pub target_per_replica: f64,
    #[serde(default)]
    pub activation: f64,
    pub max_replicas: i32,
    #[serde(default = "three_hundred")]
    pub cooldown_seconds: f64,
}

fn three_hundred() -> f64 {
    300.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Arrival {
    pub at: String,
    pub duration: String,
    pub per_minute: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PdbSpec {
    #[serde(default)]
    pub min_available: Option<String>,
    #[serde(default)]
    pub max_unavailable: Option<String>,
}

/// Faults injected at fixed times (`--faults` adds random ones from the seed).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Faults {
    /// Pools out of capacity for a while.
    #[serde(default)]
    pub capacity_outages: Vec<Outage>,
    /// Many spot instances interrupted at once.
    #[serde(default)]
    pub interruption_storms: Vec<Storm>,
    /// The controller process dies and restarts (losing its memory).
    #[serde(default)]
    pub controller_crashes: Vec<String>,
    /// The leader stalls past its lease; the standby takes over; the old leader then
    /// writes once with its stale term.
    #[serde(default)]
    pub leader_failovers: Vec<String>,
    /// The cloud API allows only this many calls per second for a while.
    #[serde(default)]
    pub throttling: Vec<Throttle>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Outage {
    pub at: String,
    pub duration: String,
    /// Instance-type prefix (`m7i.`), or all when empty.
    #[serde(default)]
    pub instance_types: String,
    #[serde(default)]
    pub capacity_type: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Storm {
    pub at: String,
    /// Fraction of running spot instances interrupted.
    pub fraction: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Throttle {
    pub at: String,
    pub duration: String,
}

/// Controller settings a scenario may change.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControllerSpec {
    /// `pack` (default) or `sched`.
    #[serde(default)]
    pub planner: Option<String>,
    #[serde(default)]
    pub batch_idle: Option<String>,
    #[serde(default)]
    pub batch_max: Option<String>,
    #[serde(default)]
    pub disruption_interval: Option<String>,
    /// After a disruption evaluation that found nothing, wait this long unless nodes change.
    #[serde(default)]
    pub quiet_interval: Option<String>,
}

/// A scenario that does not make sense: `file: field: message`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub field: String,
    pub message: String,
}

/// A scenario checked and compiled.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub scenario: Scenario,
    pub duration: f64,
    pub start_unix: f64,
    pub nodepools: Vec<NodePool>,
}

/// Seconds of a duration string (`24h`, `90m`, `30s`, `1h30m`).
pub fn seconds(s: &str) -> Result<f64, String> {
    match parse_duration(s)? {
        Some(v) => Ok(v as f64),
        None => Err(format!("{s:?} is not a finite duration")),
    }
}

impl Scenario {
    pub fn parse(file: &str, text: &str) -> Result<Compiled, ScenarioError> {
        let err = |field: String, message: String| ScenarioError {
            file: file.to_string(),
            field,
            message,
        };
        let de = serde_yaml::Deserializer::from_str(text);
        let s: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let message = e.into_inner().to_string();
            let message = match message.split_once(": ") {
                Some((path, rest)) if field.starts_with(path) => rest.to_string(),
                _ => message,
            };
            err(field, message)
        })?;
        s.compile().map_err(|(f, m)| err(f, m))
    }

    fn compile(self) -> Result<Compiled, (String, String)> {
        let dur = |v: &str, field: &str| seconds(v).map_err(|m| (field.to_string(), m));
        let duration = dur(&self.duration, "duration")?;
        if duration <= 0.0 {
            return Err(("duration".into(), "must be positive".into()));
        }
        let start_unix = capstan_disrupt::time::parse_rfc3339(&self.start).ok_or_else(|| {
            (
                "start".to_string(),
                format!("{:?} is not RFC 3339", self.start),
            )
        })?;
        if self.node_pools.is_empty() {
            return Err(("nodePools".into(), "a scenario needs a NodePool".into()));
        }
        let mut nodepools = Vec::new();
        for (i, o) in self.node_pools.iter().enumerate() {
            let p = NodePool::compile(o)
                .map_err(|e| (format!("nodePools[{i}].{}", e.field), e.message.clone()))?;
            nodepools.push(p);
        }
        self.cloud
            .validate()
            .map_err(|(f, m)| (format!("cloud.{f}"), m))?;
        let qty = |v: &str, field: &str| {
            Quantity::parse(v).map_err(|e| (field.to_string(), e.to_string()))
        };
        for (i, d) in self.daemon_sets.iter().enumerate() {
            qty(&d.cpu, &format!("daemonSets[{i}].cpu"))?;
            qty(&d.memory, &format!("daemonSets[{i}].memory"))?;
        }
        let t = &self.traffic;
        if t.base_rps < 0.0 || t.peak_rps < t.base_rps {
            return Err((
                "traffic.peakRps".into(),
                "needs 0 <= baseRps <= peakRps".into(),
            ));
        }
        for (name, ws) in [("spikes", &t.spikes), ("lulls", &t.lulls)] {
            for (i, w) in ws.iter().enumerate() {
                dur(&w.at, &format!("traffic.{name}[{i}].at"))?;
                dur(&w.duration, &format!("traffic.{name}[{i}].duration"))?;
                if w.multiplier < 0.0 {
                    return Err((
                        format!("traffic.{name}[{i}].multiplier"),
                        "must not be negative".into(),
                    ));
                }
            }
        }
        if self.workloads.is_empty() {
            return Err(("workloads".into(), "a scenario needs a workload".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, w) in self.workloads.iter().enumerate() {
            let f = |x: &str| format!("workloads[{i}].{x}");
            if !names.insert(w.name.clone()) {
                return Err((f("name"), format!("{:?} appears twice", w.name)));
            }
            qty(&w.cpu, &f("cpu"))?;
            qty(&w.memory, &f("memory"))?;
            qty(&w.cpu_per_rps, &f("cpuPerRps"))?;
            qty(&w.idle_cpu, &f("idleCpu"))?;
            let modes = [w.replicas.is_some(), w.hpa.is_some(), w.queue.is_some()];
            if modes.iter().filter(|m| **m).count() != 1 {
                return Err((
                    f("replicas"),
                    "set exactly one of replicas, hpa and queue".into(),
                ));
            }
            if let Some(h) = &w.hpa {
                if h.min_replicas < 1 || h.max_replicas < h.min_replicas {
                    return Err((
                        f("hpa.maxReplicas"),
                        "needs 1 <= minReplicas <= maxReplicas".into(),
                    ));
                }
                if h.target_cpu_utilization <= 0 {
                    return Err((f("hpa.targetCpuUtilization"), "must be positive".into()));
                }
            }
            if let Some(q) = &w.queue {
                if q.job_seconds <= 0.0 || q.target_per_replica <= 0.0 || q.max_replicas < 1 {
                    return Err((
                        f("queue"),
                        "jobSeconds, targetPerReplica and maxReplicas must be positive".into(),
                    ));
                }
                for (j, a) in q.arrivals.iter().enumerate() {
                    dur(&a.at, &f(&format!("queue.arrivals[{j}].at")))?;
                    dur(&a.duration, &f(&format!("queue.arrivals[{j}].duration")))?;
                }
            }
            if let Some(s) = &w.spread {
                if s != "zone" && s != "hostname" {
                    return Err((f("spread"), format!("expected zone or hostname, got {s:?}")));
                }
            }
            if let Some(p) = &w.pdb {
                if p.min_available.is_some() == p.max_unavailable.is_some() {
                    return Err((
                        f("pdb"),
                        "set exactly one of minAvailable and maxUnavailable".into(),
                    ));
                }
            }
        }
        let fl = &self.faults;
        for (i, o) in fl.capacity_outages.iter().enumerate() {
            dur(&o.at, &format!("faults.capacityOutages[{i}].at"))?;
            dur(
                &o.duration,
                &format!("faults.capacityOutages[{i}].duration"),
            )?;
        }
        for (i, s) in fl.interruption_storms.iter().enumerate() {
            dur(&s.at, &format!("faults.interruptionStorms[{i}].at"))?;
            if !(0.0..=1.0).contains(&s.fraction) {
                return Err((
                    format!("faults.interruptionStorms[{i}].fraction"),
                    "must be between 0 and 1".into(),
                ));
            }
        }
        for (i, a) in fl.controller_crashes.iter().enumerate() {
            dur(a, &format!("faults.controllerCrashes[{i}]"))?;
        }
        for (i, a) in fl.leader_failovers.iter().enumerate() {
            dur(a, &format!("faults.leaderFailovers[{i}]"))?;
        }
        for (i, t) in fl.throttling.iter().enumerate() {
            dur(&t.at, &format!("faults.throttling[{i}].at"))?;
            dur(&t.duration, &format!("faults.throttling[{i}].duration"))?;
        }
        let c = &self.controller;
        if let Some(p) = &c.planner {
            if p != "pack" && p != "sched" {
                return Err((
                    "controller.planner".into(),
                    format!("expected pack or sched, got {p:?}"),
                ));
            }
        }
        for (v, f) in [
            (&c.batch_idle, "controller.batchIdle"),
            (&c.batch_max, "controller.batchMax"),
            (&c.disruption_interval, "controller.disruptionInterval"),
            (&c.quiet_interval, "controller.quietInterval"),
        ] {
            if let Some(v) = v {
                dur(v, f)?;
            }
        }
        Ok(Compiled {
            duration,
            start_unix,
            nodepools,
            scenario: self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_scenarios_parse() {
        for (name, text) in [("default", DEFAULT), ("large", LARGE), ("faults", FAULTS)] {
            let c = Scenario::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert!(c.duration > 0.0);
        }
    }

    #[test]
    fn bad_scenarios_name_the_file_and_field() {
        let cases = [
            ("name: x\nbogus: 1\n", "bogus"),
            (
                &DEFAULT.replace("duration: 24h", "duration: forever"),
                "duration",
            ),
            (
                &DEFAULT.replace("targetCpuUtilization: 60", "targetCpuUtilization: 0"),
                "workloads[0].hpa.targetCpuUtilization",
            ),
            (
                &DEFAULT.replace("cpu: 500m", "cpu: lots"),
                "workloads[0].cpu",
            ),
        ];
        for (text, field) in cases {
            let e = Scenario::parse("s.yaml", text).unwrap_err();
            assert_eq!(e.file, "s.yaml");
            assert!(e.field.contains(field), "{field}: got {e}");
        }
    }
}
