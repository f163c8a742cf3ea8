//! Scenarios: what a simulation runs — traffic, workloads, NodePools, the cloud's behaviour,
//! faults and the duration — as YAML. Unknown fields are errors; every error names the file
//! and the field.

use capstan_fake_cloud::FakeCloudConfig;
use capstan_model::nodepool::NodePoolObject;
use capstan_model::pdb::IntOrPercent;
use capstan_model::time::{parse_duration, parse_rfc3339};
use capstan_model::{Catalog, NodePool, Quantity};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// A duration in seconds, read from a Go duration (`24h`, `90m`, `1h30m`).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Secs(pub f64);

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        seconds(&s).map(Secs).map_err(serde::de::Error::custom)
    }
}

/// Unix seconds, read from an RFC 3339 timestamp.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct UnixTime(pub f64);

impl<'de> Deserialize<'de> for UnixTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_rfc3339(&s)
            .map(UnixTime)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not RFC 3339")))
    }
}

/// A quantity (`500m`, `2`, `1Gi`), read once: `milli` in thousandths (CPU), `units` whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amount {
    pub milli: i64,
    pub units: i64,
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let q = Quantity::parse(&s).map_err(serde::de::Error::custom)?;
        Ok(Amount {
            milli: q.milli_ceil(),
            units: q.units_ceil(),
        })
    }
}

/// A count or a percentage (`2`, `50%`), as PDBs take them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share(pub IntOrPercent);

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Str(String),
        }
        let bad = |s: &str| {
            serde::de::Error::custom(format!("expected a count or a percentage, got {s:?}"))
        };
        match Raw::deserialize(d)? {
            Raw::Int(i) => Ok(Share(IntOrPercent::Int(i))),
            Raw::Str(s) => match s.trim().strip_suffix('%') {
                Some(p) => p
                    .trim()
                    .parse()
                    .map(|v| Share(IntOrPercent::Percent(v)))
                    .map_err(|_| bad(&s)),
                None => s
                    .trim()
                    .parse()
                    .map(|v| Share(IntOrPercent::Int(v)))
                    .map_err(|_| bad(&s)),
            },
        }
    }
}

/// A workload's topology spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spread {
    /// Across zones, maxSkew 1, DoNotSchedule.
    Zone,
    /// Across nodes, maxSkew 1, ScheduleAnyway.
    Hostname,
}

/// How the controller plans new NodeClaims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlannerSpec {
    Pack,
    Sched,
}

/// The built-in scenario `capstan simulate` runs with no `--scenario`.
pub const DEFAULT: &str = include_str!("../scenarios/default.yaml");
/// Three busy hours for `--seeds N --faults` runs.
pub const FAULTS: &str = include_str!("../scenarios/faults.yaml");
/// A 1,000-node day (30,000+ pods at peak), for the scale benchmark.
pub const LARGE: &str = include_str!("../scenarios/large.yaml");
/// The 1,000-node day ten times larger (10,000+ nodes, 300,000+ pods at peak): [`scaled`]
/// from [`LARGE`] by 10, kept in step with it by a test.
pub const XLARGE: &str = include_str!("../scenarios/xlarge.yaml");
/// A week of the default cluster: weekends lighter, a batch burst every weekday morning and
/// evening, and spikes at irregular times; the web, api and batch autoscalers forecast, and
/// the NodePool keeps headroom.
pub const WEEK: &str = include_str!("../scenarios/week.yaml");

/// The same scenario `factor` times larger: traffic, every workload's replica bounds and fixed
/// replicas, NodePool limits, the fake cloud's capacity per pool and its API rate and burst are
/// multiplied; the shape (pods per node, services, curve, timings) stays. The scale benchmark's
/// curve is `LARGE` scaled. Returns the scenario's YAML, named `name`.
pub fn scaled(text: &str, factor: f64, name: &str) -> Result<String, String> {
    use serde_yaml::Value;
    fn times(v: &mut Value, factor: f64, at: &str) -> Result<(), String> {
        let scaled = |x: f64| (x * factor).round();
        *v = match &*v {
            Value::Number(n) if n.is_u64() || n.is_i64() => {
                Value::Number((scaled(n.as_f64().unwrap_or(0.0)) as i64).into())
            }
            Value::Number(n) => Value::Number((n.as_f64().unwrap_or(0.0) * factor).into()),
            // Quantities: a number and a unit suffix ("40000", "160Ti").
            Value::String(s) => {
                let digits = s
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(s.len());
                let x: f64 = s[..digits]
                    .parse()
                    .map_err(|_| format!("{at}: {s:?} is not a plain quantity"))?;
                Value::String(format!("{}{}", scaled(x), &s[digits..]))
            }
            _ => return Err(format!("{at}: not a number")),
        };
        Ok(())
    }
    fn at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
        path.iter().try_fold(v, |v, k| v.get_mut(*k))
    }
    if !(factor.is_finite() && factor > 0.0) {
        return Err(format!("the factor {factor} is not a positive number"));
    }
    let mut doc: Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    doc["name"] = Value::String(name.to_string());
    for path in [
        &["traffic", "baseRps"][..],
        &["traffic", "peakRps"],
        &["cloud", "capacity", "perPool"],
        &["cloud", "api", "ratePerSecond"],
        &["cloud", "api", "burst"],
    ] {
        if let Some(v) = at(&mut doc, path) {
            times(v, factor, &path.join("."))?;
        }
    }
    if let Some(Value::Sequence(pools)) = doc.get_mut("nodePools") {
        for (i, p) in pools.iter_mut().enumerate() {
            if let Some(Value::Mapping(limits)) = at(p, &["spec", "limits"]) {
                for (k, v) in limits.iter_mut() {
                    let key = k.as_str().unwrap_or("?");
                    times(v, factor, &format!("nodePools[{i}].spec.limits.{key}"))?;
                }
            }
        }
    }
    if let Some(Value::Sequence(ws)) = doc.get_mut("workloads") {
        for (i, w) in ws.iter_mut().enumerate() {
            for path in [
                &["replicas"][..],
                &["hpa", "minReplicas"],
                &["hpa", "maxReplicas"],
                &["queue", "maxReplicas"],
            ] {
                if let Some(v) = at(w, path) {
                    times(v, factor, &format!("workloads[{i}].{}", path.join(".")))?;
                }
            }
        }
    }
    serde_yaml::to_string(&doc).map_err(|e| e.to_string())
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub name: String,
    /// How long to simulate (`24h`, `90m`…).
    #[serde(default = "day")]
    pub duration: Secs,
    /// Unix-time start, RFC 3339 (the disruption engine's cron budgets read it).
    #[serde(default = "start")]
    pub start: UnixTime,
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

fn day() -> Secs {
    Secs(86_400.0)
}

fn start() -> UnixTime {
    UnixTime(parse_rfc3339("2026-01-05T00:00:00Z").expect("a valid default start"))
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
    pub cpu: Amount,
    pub memory: Amount,
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
    /// Multipliers for successive days from the start, repeating (a week: weekdays 1, the
    /// weekend lighter); empty: every day alike.
    #[serde(default)]
    pub day_multipliers: Vec<f64>,
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
    pub at: Secs,
    pub duration: Secs,
    pub multiplier: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    pub name: String,
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// Per-pod CPU and memory requests.
    pub cpu: Amount,
    pub memory: Amount,
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
    #[serde(default)]
    pub cpu_per_rps: Amount,
    /// CPU a pod uses idle.
    #[serde(default)]
    pub idle_cpu: Amount,
    #[serde(default)]
    pub pdb: Option<PdbSpec>,
    /// Topology spread (`zone` or `hostname`), maxSkew 1, ScheduleAnyway for hostname,
    /// DoNotSchedule for zone.
    #[serde(default)]
    pub spread: Option<Spread>,
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
    /// Bring capacity (or replicas) ahead of the forecast demand.
    #[serde(default)]
    pub forecast: Option<ForecastSpec>,
}

/// capstan's forecast for an autoscaler (HPA or queue scaler): the reactive recommendation is
/// recorded every `step` and fitted with the seasonal model (daily `season`); the replicas
/// forecast within `lead` (node boot plus pod start) are brought ahead of demand, as `mode`
/// says.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForecastSpec {
    #[serde(default = "three_minutes")]
    pub lead: Secs,
    #[serde(default = "five_minutes")]
    pub step: Secs,
    #[serde(default = "day")]
    pub season: Secs,
    #[serde(default)]
    pub mode: ForecastMode,
}

/// How a forecast is brought ahead of demand.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ForecastMode {
    /// Room for the forecast replicas the autoscaler does not want yet: placeholder pods of
    /// the workload's shape at the headroom priority, which its real pods preempt the moment
    /// they are created. Real pods never wait early, and a wrong forecast costs nodes only.
    #[default]
    Capacity,
    /// A replica floor: the forecast (plus the backtest's mean error) raises the replicas
    /// themselves, so the early pods wait for the nodes instead.
    Replicas,
}

fn three_minutes() -> Secs {
    Secs(180.0)
}

fn five_minutes() -> Secs {
    Secs(300.0)
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
    /// Bring capacity ahead of the forecast demand.
    #[serde(default)]
    pub forecast: Option<ForecastSpec>,
}

fn three_hundred() -> f64 {
    300.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Arrival {
    pub at: Secs,
    pub duration: Secs,
    pub per_minute: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PdbSpec {
    #[serde(default)]
    pub min_available: Option<Share>,
    #[serde(default)]
    pub max_unavailable: Option<Share>,
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
    pub controller_crashes: Vec<Secs>,
    /// The leader stalls past its lease; the standby takes over; the old leader then
    /// writes once with its stale term.
    #[serde(default)]
    pub leader_failovers: Vec<Secs>,
    /// The cloud API allows only this many calls per second for a while.
    #[serde(default)]
    pub throttling: Vec<Throttle>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Outage {
    pub at: Secs,
    pub duration: Secs,
    /// Instance-type prefix (`m7i.`), or all when empty.
    #[serde(default)]
    pub instance_types: String,
    #[serde(default)]
    pub capacity_type: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Storm {
    pub at: Secs,
    /// Fraction of running spot instances interrupted.
    pub fraction: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Throttle {
    pub at: Secs,
    pub duration: Secs,
}

/// Controller settings a scenario may change.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControllerSpec {
    /// `pack` (default) or `sched`.
    #[serde(default)]
    pub planner: Option<PlannerSpec>,
    #[serde(default)]
    pub batch_idle: Option<Secs>,
    #[serde(default)]
    pub batch_max: Option<Secs>,
    #[serde(default)]
    pub disruption_interval: Option<Secs>,
    /// After a disruption evaluation that found nothing, wait this long unless nodes change.
    #[serde(default)]
    pub quiet_interval: Option<Secs>,
    /// Pods below this priority never cause a launch (default -10, Cluster Autoscaler's
    /// expendable cutoff).
    #[serde(default)]
    pub expendable_priority_cutoff: Option<i32>,
    /// Karpenter's feature gates, as the Helm chart's `settings.featureGates` names them.
    #[serde(default)]
    pub feature_gates: FeatureGatesSpec,
}

/// `controller.featureGates`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FeatureGatesSpec {
    /// Consolidation may replace a spot node with a cheaper spot node (default off, as
    /// Karpenter's).
    #[serde(default)]
    pub spot_to_spot_consolidation: bool,
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
        let duration = self.duration.0;
        if duration <= 0.0 {
            return Err(("duration".into(), "must be positive".into()));
        }
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
        let t = &self.traffic;
        if t.base_rps < 0.0 || t.peak_rps < t.base_rps {
            return Err((
                "traffic.peakRps".into(),
                "needs 0 <= baseRps <= peakRps".into(),
            ));
        }
        for (name, ws) in [("spikes", &t.spikes), ("lulls", &t.lulls)] {
            for (i, w) in ws.iter().enumerate() {
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
            let modes = [w.replicas.is_some(), w.hpa.is_some(), w.queue.is_some()];
            if modes.iter().filter(|m| **m).count() != 1 {
                return Err((
                    f("replicas"),
                    "set exactly one of replicas, hpa and queue".into(),
                ));
            }
            let forecast = [
                (
                    w.hpa.as_ref().and_then(|h| h.forecast.as_ref()),
                    "hpa.forecast",
                ),
                (
                    w.queue.as_ref().and_then(|q| q.forecast.as_ref()),
                    "queue.forecast",
                ),
            ];
            for (fc, field) in forecast {
                let Some(fc) = fc else { continue };
                let (lead, step, season) = (fc.lead.0, fc.step.0, fc.season.0);
                if lead <= 0.0 || step <= 0.0 || season < step || (season / step).fract() != 0.0 {
                    return Err((
                        f(field),
                        "needs lead and step above zero and a season that is a whole number of steps".into(),
                    ));
                }
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
        if let Some(i) = self
            .traffic
            .day_multipliers
            .iter()
            .position(|m| !m.is_finite() || *m < 0.0)
        {
            return Err((
                format!("traffic.dayMultipliers[{i}]"),
                "must be zero or more".into(),
            ));
        }
        for (i, s) in self.faults.interruption_storms.iter().enumerate() {
            if !(0.0..=1.0).contains(&s.fraction) {
                return Err((
                    format!("faults.interruptionStorms[{i}].fraction"),
                    "must be between 0 and 1".into(),
                ));
            }
        }
        let compiled = Compiled {
            duration,
            start_unix: self.start.0,
            nodepools,
            scenario: self,
        };
        compiled
            .scenario
            .cloud
            .validate_offered(&compiled.catalog())
            .map_err(|(f, m)| (format!("cloud.{f}"), m))?;
        Ok(compiled)
    }
}

impl Compiled {
    /// The instance types of the built-in catalog the fake cloud offers.
    pub fn catalog(&self) -> Catalog {
        let mut c = Catalog::builtin();
        let f = &self.scenario.catalog;
        c.instance_types.retain(|t| {
            let fam = t.name.split('.').next().unwrap_or("");
            (f.families.is_empty() || f.families.iter().any(|x| x == fam))
                && (f.max_vcpu == 0 || t.capacity.cpu <= f.max_vcpu as i64 * 1000)
        });
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_xlarge_scenario_is_the_large_one_scaled_by_ten() {
        let want: serde_yaml::Value =
            serde_yaml::from_str(&scaled(LARGE, 10.0, "xlarge-10000-nodes").unwrap()).unwrap();
        let have: serde_yaml::Value = serde_yaml::from_str(XLARGE).unwrap();
        assert_eq!(
            have, want,
            "regenerate crates/sim/scenarios/xlarge.yaml: `capstan bench scale --print-scenario 10000`"
        );
    }

    #[test]
    fn scaling_multiplies_demand_limits_and_the_cloud_and_keeps_the_shape() {
        let big = Scenario::parse("x", &scaled(LARGE, 2.5, "big").unwrap()).unwrap();
        let small = Scenario::parse("l", LARGE).unwrap();
        let (b, s) = (&big.scenario, &small.scenario);
        assert_eq!(b.name, "big");
        assert_eq!(b.traffic.peak_rps, s.traffic.peak_rps * 2.5);
        assert_eq!(b.traffic.base_rps, s.traffic.base_rps * 2.5);
        assert_eq!(b.cloud.capacity.per_pool, s.cloud.capacity.per_pool * 5 / 2);
        assert_eq!(
            big.nodepools[0].limits["cpu"],
            small.nodepools[0].limits["cpu"] * 5 / 2
        );
        let hpa = |c: &Compiled| c.scenario.workloads[0].hpa.clone().unwrap();
        assert_eq!(hpa(&big).max_replicas, hpa(&small).max_replicas * 5 / 2);
        assert_eq!(hpa(&big).min_replicas, 25);
        assert_eq!(b.workloads[0].cpu.milli, s.workloads[0].cpu.milli);
        assert_eq!(b.duration.0, s.duration.0);
        assert_eq!(
            b.controller.batch_max.map(|x| x.0),
            s.controller.batch_max.map(|x| x.0)
        );
    }

    #[test]
    fn scaling_refuses_a_limit_it_cannot_multiply_and_a_factor_that_is_not_positive() {
        let text = LARGE.replace("cpu: \"40000\"", "cpu: \"lots\"");
        let e = scaled(&text, 2.0, "x").unwrap_err();
        assert!(e.contains("nodePools[0].spec.limits.cpu"), "{e}");
        assert!(scaled(LARGE, 0.0, "x").is_err());
        assert!(scaled(LARGE, f64::NAN, "x").is_err());
    }

    #[test]
    fn the_built_in_scenarios_parse() {
        for (name, text) in [
            ("default", DEFAULT),
            ("large", LARGE),
            ("xlarge", XLARGE),
            ("faults", FAULTS),
            ("week", WEEK),
        ] {
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
            (&DEFAULT.replace("start: ", "start: soon #"), "start"),
            (
                &WEEK.replacen(
                    "      targetCpuUtilization: 60\n",
                    "      targetCpuUtilization: 60\n      forecast: {lead: 0s}\n",
                    1,
                ),
                "workloads[0].hpa.forecast",
            ),
            (
                &WEEK.replacen(
                    "      targetCpuUtilization: 60\n",
                    "      targetCpuUtilization: 60\n      forecast: {step: 7m}\n",
                    1,
                ),
                "workloads[0].hpa.forecast",
            ),
            (
                &WEEK.replace(
                    "cooldownSeconds: 300\n      forecast: {lead: 3m}",
                    "cooldownSeconds: 300\n      forecast: {season: 1m}",
                ),
                "workloads[3].queue.forecast",
            ),
            (
                &WEEK.replacen(
                    "      targetCpuUtilization: 60\n",
                    "      targetCpuUtilization: 60\n      forecast: {lead: 3m, mode: later}\n",
                    1,
                ),
                "workloads[0]",
            ),
            (
                &WEEK.replace("[1, 1, 1, 1, 1, 0.55, 0.45]", "[1, -1]"),
                "traffic.dayMultipliers[1]",
            ),
        ];
        for (text, field) in cases {
            let e = Scenario::parse("s.yaml", text).unwrap_err();
            assert_eq!(e.file, "s.yaml");
            assert!(e.field.contains(field), "{field}: got {e}");
        }
    }
}
