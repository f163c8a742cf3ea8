//! Demand: the traffic curve, and workloads whose replicas an autoscaler sets — the HPA on
//! CPU utilization seen through the metrics pipeline, or a KEDA-style ScaledObject on a
//! queue's depth — with the ReplicaSet controller that turns replicas into pods.

use crate::scenario::{Compiled, ForecastMode, HpaSpec, Spread, Traffic, Workload};
use capstan_hpa::keda::{ScaledObject, ScalerState};
use capstan_hpa::signal::Pipeline;
use capstan_hpa::{
    ContainerInfo, ControllerConfig, History, HorizontalPodAutoscalerSpec, Phase, PodInfo, Tick,
};
use capstan_model::pdb::Pdb;
use capstan_model::pod::{InclusionPolicy, PodPhase, TopologySpread, WhenUnsatisfiable};
use capstan_model::requirements::Requirement;
use capstan_model::selector::LabelSelector;
use capstan_model::{Pod, Requirements, Resources, labels};
use k8s_openapi::api::autoscaling::v2::{
    HPAScalingRules, HorizontalPodAutoscalerBehavior, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use std::collections::{BTreeMap, VecDeque};

/// How often the HPA and the event scaler reconcile (kube-controller-manager's
/// `--horizontal-pod-autoscaler-sync-period`).
pub const SYNC_PERIOD: f64 = 15.0;

/// Requests per second at time `t` (seconds from the start), before noise.
pub fn rps(traffic: &Traffic, t: f64) -> f64 {
    let hour = (t / 3600.0) % 24.0;
    let phase = 2.0 * std::f64::consts::PI * (hour - traffic.peak_hour) / 24.0;
    let diurnal = 0.5 * (1.0 + phase.cos());
    let mut v = traffic.base_rps + (traffic.peak_rps - traffic.base_rps) * diurnal;
    if !traffic.day_multipliers.is_empty() {
        let day = (t / 86_400.0).floor().max(0.0) as usize;
        v *= traffic.day_multipliers[day % traffic.day_multipliers.len()];
    }
    for w in traffic.spikes.iter().chain(&traffic.lulls) {
        let (at, d) = (w.at.0, w.duration.0);
        if t >= at && t < at + d {
            v *= w.multiplier;
        }
    }
    v
}

/// A multiplier around 1 fixed by the seed and the minute (Box–Muller on a hash).
pub fn noise(seed: u64, minute: u64, sd: f64) -> f64 {
    if sd <= 0.0 {
        return 1.0;
    }
    let h = |salt: u64| {
        let mut x = seed ^ minute.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let z = (-2.0 * h(1).ln()).sqrt() * (2.0 * std::f64::consts::PI * h(2)).cos();
    (1.0 + sd * z).max(0.0)
}

/// One workload's state.
pub struct WorkloadState {
    pub spec: Workload,
    pub template: Pod,
    /// spec.replicas.
    pub desired: i32,
    seq: u64,
    history: History,
    scaler: ScalerState,
    hpa_spec: Option<HorizontalPodAutoscalerSpec>,
    scaled: Option<ScaledObject>,
    /// Per-pod CPU usage (milli) of each recent second, newest last.
    usage: VecDeque<(f64, f64)>,
    pub queue_depth: f64,
    pub jobs_done: f64,
    last_scale: f64,
    /// The last HPA tick, reused while the pod set does not change.
    tick: Option<CachedTick>,
    /// capstan's forecast, when the autoscaler asks for one.
    pub forecaster: Option<crate::forecast::Forecaster>,
    /// Replicas the forecast wants room for beyond spec.replicas (capacity mode): the
    /// workload's placeholder pods.
    pub ahead: i32,
    ahead_seq: u64,
}

/// An HPA tick kept between reconciles.
struct CachedTick {
    /// The version of the pod set it was built for.
    version: u64,
    tick: Tick,
    /// Each pod's (bound at, ready at).
    times: Vec<(f64, f64)>,
}

impl WorkloadState {
    pub fn new(spec: &Workload) -> WorkloadState {
        let mut req = Resources::new();
        req.cpu = spec.cpu.milli;
        req.memory = spec.memory.units;
        req.pods = 1;
        let labels_map: BTreeMap<String, String> = [("app".to_string(), spec.name.clone())]
            .into_iter()
            .collect();
        let selector = LabelSelector::from_match_labels(&labels_map);
        let mut spread = Vec::new();
        match spec.spread {
            Some(Spread::Zone) => spread.push(TopologySpread {
                max_skew: 1,
                topology_key: labels::ZONE.into(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                selector: Some(selector.clone()),
                min_domains: None,
                node_affinity_policy: InclusionPolicy::Honor,
                node_taints_policy: InclusionPolicy::Ignore,
            }),
            Some(Spread::Hostname) => spread.push(TopologySpread {
                max_skew: 1,
                topology_key: labels::HOSTNAME.into(),
                when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                selector: Some(selector.clone()),
                min_domains: None,
                node_affinity_policy: InclusionPolicy::Honor,
                node_taints_policy: InclusionPolicy::Ignore,
            }),
            None => {}
        }
        let mut annotations = BTreeMap::new();
        if spec.do_not_disrupt {
            annotations.insert(labels::DO_NOT_DISRUPT.to_string(), "true".to_string());
        }
        let template = Pod {
            namespace: spec.namespace.clone(),
            labels: labels_map,
            annotations,
            owner_kind: Some("ReplicaSet".into()),
            owner_name: Some(spec.name.clone()),
            requests: req,
            priority: spec.priority,
            node_selector: Requirements::from_labels(spec.node_selector.iter()),
            spread,
            termination_grace_seconds: Some(spec.termination_grace_seconds),
            phase: PodPhase::Pending,
            ..Default::default()
        };
        let (desired, hpa_spec, scaled) = match (&spec.replicas, &spec.hpa, &spec.queue) {
            (Some(r), _, _) => (*r, None, None),
            (_, Some(h), _) => (h.min_replicas, Some(hpa_spec(h)), None),
            (_, _, Some(q)) => (
                0,
                None,
                Some(ScaledObject {
                    metric: "queue-depth".into(),
                    target_per_replica: q.target_per_replica,
                    activation_threshold: q.activation,
                    min_replicas: 0,
                    max_replicas: q.max_replicas,
                    cooldown_seconds: q.cooldown_seconds,
                }),
            ),
            _ => (0, None, None),
        };
        WorkloadState {
            spec: spec.clone(),
            template,
            desired,
            seq: 0,
            history: History::default(),
            scaler: ScalerState::default(),
            hpa_spec,
            scaled,
            usage: VecDeque::new(),
            queue_depth: 0.0,
            jobs_done: 0.0,
            last_scale: 0.0,
            tick: None,
            forecaster: spec
                .hpa
                .as_ref()
                .and_then(|h| h.forecast.as_ref())
                .or(spec.queue.as_ref().and_then(|q| q.forecast.as_ref()))
                .map(crate::forecast::Forecaster::new),
            ahead: 0,
            ahead_seq: 0,
        }
    }

    pub fn pdb(&self) -> Option<Pdb> {
        let p = self.spec.pdb.as_ref()?;
        Some(Pdb {
            namespace: self.spec.namespace.clone(),
            name: self.spec.name.clone(),
            selector: Some(LabelSelector::from_match_labels(&self.template.labels)),
            min_available: p.min_available.map(|s| s.0),
            max_unavailable: p.max_unavailable.map(|s| s.0),
            always_allow_unhealthy: false,
        })
    }

    /// A new pod of this workload.
    pub fn new_pod(&mut self) -> Pod {
        self.seq += 1;
        let mut p = self.template.clone();
        p.name = format!("{}-{:06}", self.spec.name, self.seq);
        p.uid = p.name.clone();
        p
    }

    /// Whether demand is in a predictable ramp at `t`: inside one of its queue's arrival
    /// windows (the queue's schedule), or for traffic-driven workloads, while the daily
    /// traffic rises (the twelve hours up to the peak hour) outside irregular spikes and lulls.
    pub fn in_predictable_ramp(&self, traffic: &Traffic, t: f64) -> bool {
        if let Some(q) = &self.spec.queue {
            return q
                .arrivals
                .iter()
                .any(|a| t >= a.at.0 && t < a.at.0 + a.duration.0);
        }
        if self.hpa_spec.is_none() {
            return false;
        }
        let irregular = traffic
            .spikes
            .iter()
            .chain(&traffic.lulls)
            .any(|w| t >= w.at.0 && t < w.at.0 + w.duration.0);
        let since_trough = ((t / 3600.0) - (traffic.peak_hour - 12.0)).rem_euclid(24.0);
        !irregular && since_trough < 12.0
    }

    /// A new placeholder holding room for one of this workload's pods ahead of its forecast:
    /// its shape and placement, at the headroom priority, labelled
    /// [`crate::forecast::PLACEHOLDER_LABEL`] (its spread counts placeholders only), pinned
    /// to `zone` when given.
    pub fn new_placeholder(&mut self, zone: Option<&str>) -> Pod {
        self.ahead_seq += 1;
        let mut p = self.template.clone();
        p.name = format!("{}-ahead-{:06}", self.spec.name, self.ahead_seq);
        p.uid = p.name.clone();
        p.labels = [(
            crate::forecast::PLACEHOLDER_LABEL.to_string(),
            self.spec.name.clone(),
        )]
        .into_iter()
        .collect();
        p.annotations.clear();
        p.owner_kind = None;
        p.owner_name = None;
        p.priority = capstan_model::headroom::PRIORITY;
        p.never_preempts = true;
        p.termination_grace_seconds = Some(0);
        if let Some(z) = zone {
            // Pinned to the zone its workload's spread will want next: its own zone spread
            // has nothing left to say.
            p.node_selector
                .add(Requirement::in_values(labels::ZONE, [z]));
            p.spread.retain(|s| s.topology_key != labels::ZONE);
        }
        let selector = LabelSelector::from_match_labels(&p.labels);
        for s in &mut p.spread {
            s.selector = Some(selector.clone());
        }
        p
    }

    /// Advances one second: records per-pod CPU usage for the metrics pipeline and moves the
    /// queue.
    pub fn tick(&mut self, sc: &Compiled, t: f64, rps_now: f64, ready: usize) {
        if let Some(q) = &self.spec.queue {
            for a in &q.arrivals {
                let (at, d) = (a.at.0, a.duration.0);
                if t >= at && t < at + d {
                    self.queue_depth += a.per_minute / 60.0;
                }
            }
            let done = (ready as f64 / q.job_seconds).min(self.queue_depth);
            self.queue_depth -= done;
            self.jobs_done += done;
        }
        let load = rps_now * self.spec.traffic_share * self.spec.cpu_per_rps.milli as f64;
        let per_pod = self.spec.idle_cpu.milli as f64 + load / ready.max(1) as f64;
        self.usage.push_back((t, per_pod));
        while self.usage.len() > 120 {
            self.usage.pop_front();
        }
        let _ = sc;
    }

    /// Whether the autoscaler reconciles at `t`.
    pub fn autoscale_due(&self, t: f64) -> bool {
        t - self.last_scale >= SYNC_PERIOD && (self.hpa_spec.is_some() || self.scaled.is_some())
    }

    /// Runs the autoscaler if it is due; returns the new spec.replicas when it changed.
    /// `version` changes whenever the set of pods (or their bind and ready times) changes;
    /// only then is `pods` called for the (key, bound at, ready at) of the bound pods, in key
    /// order.
    pub fn autoscale<'k>(
        &mut self,
        t: f64,
        version: u64,
        pods: impl FnOnce() -> Vec<(&'k str, f64, f64)>,
    ) -> Option<i32> {
        if t - self.last_scale < SYNC_PERIOD {
            return None;
        }
        let elapsed = t - self.last_scale;
        self.last_scale = t;
        let controller = ControllerConfig::default();
        if let Some(so) = &self.scaled {
            let d = so.decide(
                self.desired,
                self.queue_depth,
                elapsed,
                &self.scaler,
                &controller,
            );
            let max = so.max_replicas;
            self.scaler = d.state;
            let desired =
                self.ahead_of_forecast(t, d.desired_replicas, max, controller.tolerance_up);
            return (desired != self.desired).then(|| {
                self.desired = desired;
                self.desired
            });
        }
        let spec = self.hpa_spec.clone()?;
        let pipeline = Pipeline::default();
        let usage = &self.usage;
        let sample = pipeline.observe(t, |x| {
            usage
                .iter()
                .rev()
                .find(|(ts, _)| *ts <= x)
                .map(|(_, v)| *v)
                .unwrap_or(0.0)
        });
        // The tick is kept between reconciles and updated in place while the pod set is the
        // same (the common case): building tens of thousands of pod records every 15 s is
        // most of the cost of a large simulation. Samples go by pod index, already joined.
        let (mut tick, times) = match self.tick.take() {
            Some(c) if c.version == version => (c.tick, c.times),
            cached => {
                let mut tick = cached.map(|c| c.tick).unwrap_or_default();
                let containers: std::sync::Arc<[ContainerInfo]> = [ContainerInfo {
                    name: "app".into(),
                    requests: [("cpu".to_string(), self.template.requests.cpu)]
                        .into_iter()
                        .collect(),
                    sidecar: false,
                }]
                .into();
                let live = pods();
                tick.pods = live
                    .iter()
                    .map(|(name, ..)| PodInfo {
                        name: name.to_string(),
                        phase: Phase::Running,
                        ready: None,
                        deleting: false,
                        start: 0.0,
                        ready_transition: 0.0,
                        containers: containers.clone(),
                    })
                    .collect();
                (tick, live.iter().map(|(_, b, r)| (*b, *r)).collect())
            }
        };
        tick.metrics.window = pipeline.window;
        let mut values = tick
            .metrics
            .resource_by_pod_index
            .remove("cpu")
            .unwrap_or_default();
        values.clear();
        for (info, (start, ready_at)) in tick.pods.iter_mut().zip(&times) {
            // The HPA's times are relative to the tick.
            let ready = *ready_at <= t;
            info.ready = Some(ready);
            info.start = *start - t;
            info.ready_transition = if ready { *ready_at - t } else { *start - t };
            // metrics-server has a sample for a pod that has been running a scrape or more.
            values.push(
                sample
                    .filter(|(_, ts)| *start <= ts - pipeline.scrape_interval)
                    .map(|(v, _)| v.round() as i64),
            );
        }
        tick.metrics
            .resource_by_pod_index
            .insert("cpu".into(), values);
        tick.metrics.timestamp = sample.map_or(0.0, |(_, ts)| ts - t);
        tick.spec = spec;
        tick.current_replicas = self.desired;
        tick.status_replicas = tick.pods.len() as i32;
        tick.history = self.history.aged(elapsed);
        tick.recommendation = None;
        let tolerance = controller.tolerance_up;
        tick.controller = controller;
        let d = capstan_hpa::decide(&tick);
        tracing::debug!(
            workload = %self.spec.name,
            t,
            current = self.desired,
            desired = d.desired_replicas,
            metrics = ?d.metrics.iter().map(|m| (m.utilization, m.replicas, m.error.clone())).collect::<Vec<_>>(),
            "hpa"
        );
        self.history = d.history;
        self.tick = Some(CachedTick {
            version,
            tick,
            times,
        });
        let max = self.hpa_spec.as_ref().map_or(i32::MAX, |s| s.max_replicas);
        let desired = self.ahead_of_forecast(t, d.desired_replicas, max, tolerance);
        (desired != self.desired).then(|| {
            self.desired = desired;
            self.desired
        })
    }

    /// The forecast learns from the autoscaler's `reactive` recommendation (not from the
    /// replicas, which its own floor raises) and may only raise what is wanted: the replicas
    /// (returned), or the room kept ahead of them (`ahead`). Neither goes past `max`.
    ///
    /// An autoscaler moves in steps past its `tolerance`: from 30 replicas the smallest rise
    /// is to 34, however gently demand climbs. So a rise the forecast sees is room for at
    /// least that step; room for the smoothed forecast alone leaves most of the step waiting.
    fn ahead_of_forecast(&mut self, t: f64, reactive: i32, max: i32, tolerance: f64) -> i32 {
        let Some(f) = &mut self.forecaster else {
            return reactive;
        };
        let wanted = f.observe(t, reactive).min(max);
        match f.mode {
            ForecastMode::Replicas => reactive.max(wanted),
            ForecastMode::Capacity => {
                let wanted = if wanted > reactive {
                    wanted.max(smallest_rise(reactive, tolerance)).min(max)
                } else {
                    wanted
                };
                self.ahead = (wanted - reactive).max(0);
                reactive
            }
        }
    }
}

/// The fewest replicas an autoscaler at `replicas` scales up to: its ratio must pass
/// `1 + tolerance`, and the replicas it asks for are rounded up.
fn smallest_rise(replicas: i32, tolerance: f64) -> i32 {
    (replicas as f64 * (1.0 + tolerance)).floor() as i32 + 1
}

fn hpa_spec(h: &HpaSpec) -> HorizontalPodAutoscalerSpec {
    HorizontalPodAutoscalerSpec {
        min_replicas: Some(h.min_replicas),
        max_replicas: h.max_replicas,
        metrics: Some(vec![MetricSpec {
            type_: "Resource".into(),
            resource: Some(ResourceMetricSource {
                name: "cpu".into(),
                target: MetricTarget {
                    type_: "Utilization".into(),
                    average_utilization: Some(h.target_cpu_utilization),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }]),
        behavior: h
            .scale_down_stabilization_seconds
            .map(|s| HorizontalPodAutoscalerBehavior {
                scale_down: Some(HPAScalingRules {
                    stabilization_window_seconds: Some(s),
                    ..Default::default()
                }),
                scale_up: None,
            }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_rise_of_an_autoscaler_is_past_its_tolerance_rounded_up() {
        // (replicas, tolerance, fewest it scales up to)
        let cases = [
            (30, 0.1, 34),
            (10, 0.1, 12),
            (3, 0.1, 4),
            (0, 0.1, 1),
            (30, 0.0, 31),
        ];
        for (replicas, tolerance, want) in cases {
            assert_eq!(
                smallest_rise(replicas, tolerance),
                want,
                "{replicas} {tolerance}"
            );
        }
    }

    fn traffic() -> Traffic {
        Traffic {
            base_rps: 100.0,
            peak_rps: 1000.0,
            peak_hour: 14.0,
            noise: 0.0,
            day_multipliers: vec![],
            spikes: vec![crate::scenario::Window {
                at: crate::scenario::Secs(11.0 * 3600.0),
                duration: crate::scenario::Secs(1800.0),
                multiplier: 2.0,
            }],
            lulls: vec![],
        }
    }

    #[test]
    fn traffic_peaks_at_the_peak_hour_and_bottoms_out_twelve_hours_later() {
        let t = traffic();
        assert!((rps(&t, 14.0 * 3600.0) - 1000.0).abs() < 1e-6);
        assert!((rps(&t, 2.0 * 3600.0) - 100.0).abs() < 1e-6);
    }

    #[test]
    fn a_spike_multiplies_traffic_only_inside_its_window() {
        let t = traffic();
        let before = rps(&t, 11.0 * 3600.0 - 1.0);
        let inside = rps(&t, 11.0 * 3600.0 + 60.0);
        let after = rps(&t, 11.5 * 3600.0 + 1.0);
        assert!(inside > 1.9 * before, "{before} {inside}");
        assert!(after < 1.1 * before, "{before} {after}");
    }

    #[test]
    fn noise_is_a_pure_function_of_seed_and_minute() {
        assert_eq!(noise(7, 3, 0.1), noise(7, 3, 0.1));
        assert_ne!(noise(7, 3, 0.1), noise(8, 3, 0.1));
        assert_eq!(noise(7, 3, 0.0), 1.0);
    }
}
