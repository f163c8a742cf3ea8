//! The HorizontalPodAutoscaler, decision by decision as kube-controller-manager makes it
//! (`pkg/controller/podautoscaler`: `horizontal.go`, `replica_calculator.go`), as a pure
//! function of one reconcile tick: [`decide`].
//!
//! Time is relative to the tick: every instant is "seconds from now" (negative in the past);
//! `f64::NEG_INFINITY` is Kubernetes' zero time. Quantities are milli-units, as upstream
//! computes them (`MilliValue`).
//!
//! Beside the faithful HPA: [`keda`] (event-driven scaling with scale to zero), [`signal`]
//! (metrics-pipeline model, rates, smoothing, robust aggregation) and [`forecast`] (seasonal
//! forecasting with rolling-origin backtests, a replica floor ahead of predicted peaks).

mod behavior;
pub mod forecast;
pub mod keda;
mod replica;
pub mod signal;

pub use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerSpec;

use std::collections::BTreeMap;

/// Kubernetes' zero time (0001-01-01), as an instant relative to now: about 2,025 years ago.
/// Finite, as Go's is: the zero time plus a delay is after the zero time, so a pod whose
/// start and readiness transition are both unset has "never been ready".
pub const ZERO_TIME: f64 = -63_900_000_000.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// A container's requests, in milli-units by resource name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerInfo {
    pub name: String,
    pub requests: BTreeMap<String, i64>,
    /// An init container with `restartPolicy: Always` (a sidecar): counted with the app.
    pub sidecar: bool,
}

/// What the HPA reads of one pod the target's selector matches.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    pub name: String,
    pub phase: Phase,
    /// The PodReady condition: `None` when the pod has none.
    pub ready: Option<bool>,
    pub deleting: bool,
    /// `status.startTime`, relative.
    pub start: f64,
    /// The PodReady condition's lastTransitionTime, relative.
    pub ready_transition: f64,
    /// Shared: the replicas of one template have the same containers.
    pub containers: std::sync::Arc<[ContainerInfo]>,
}

/// Metric samples as the metrics APIs would return them. A pod absent from a map has no sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    /// The resource metrics window, seconds.
    pub window: f64,
    /// The samples' timestamp, relative.
    pub timestamp: f64,
    /// resource → pod → usage (milli).
    pub resource: BTreeMap<String, BTreeMap<String, i64>>,
    /// resource → usage (milli) of each pod of [`Tick::pods`], by index (`None`: no sample):
    /// samples already joined to the pods, for a caller that holds them that way (the
    /// simulator, whose pods come and go by the thousand). Used instead of `resource` for
    /// that resource; it cannot name a pod outside the list.
    pub resource_by_pod_index: BTreeMap<String, Vec<Option<i64>>>,
    /// container → resource → pod → usage (milli).
    pub container_resource: BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>,
    /// metric → pod → value (milli).
    pub pods: BTreeMap<String, BTreeMap<String, i64>>,
    /// metric → value (milli).
    pub object: BTreeMap<String, i64>,
    /// metric → value (milli); several series of one metric are summed, as upstream does.
    pub external: BTreeMap<String, i64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recommendation {
    /// Relative time it was made.
    pub at: f64,
    pub replicas: i32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleEvent {
    pub at: f64,
    pub change: i32,
    pub outdated: bool,
}

/// What the controller remembers of one HPA between ticks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// `None`: first sight of this HPA.
    pub recommendations: Option<Vec<Recommendation>>,
    pub scale_up_events: Vec<ScaleEvent>,
    pub scale_down_events: Vec<ScaleEvent>,
}

/// kube-controller-manager's HPA settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    pub tolerance_up: f64,
    pub tolerance_down: f64,
    pub cpu_initialization_period: f64,
    pub initial_readiness_delay: f64,
    pub downscale_stabilization: f64,
    pub scale_up_limit_factor: f64,
    pub scale_up_limit_minimum: f64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            tolerance_up: 0.1,
            tolerance_down: 0.1,
            cpu_initialization_period: 300.0,
            initial_readiness_delay: 30.0,
            downscale_stabilization: 300.0,
            scale_up_limit_factor: 2.0,
            scale_up_limit_minimum: 4.0,
        }
    }
}

/// One reconcile tick.
#[derive(Clone, Debug, Default)]
pub struct Tick {
    pub spec: HorizontalPodAutoscalerSpec,
    /// The target's `spec.replicas`.
    pub current_replicas: i32,
    /// The target's `status.replicas`.
    pub status_replicas: i32,
    pub pods: Vec<PodInfo>,
    pub metrics: Metrics,
    pub history: History,
    /// Skip the metric stage and normalize this raw recommendation.
    pub recommendation: Option<i32>,
    pub controller: ControllerConfig,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// One metric's proposal.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricResult {
    #[serde(rename = "type")]
    pub type_: String,
    pub name: String,
    pub replicas: Option<i32>,
    /// Resource utilization, percent of request.
    pub utilization: Option<i32>,
    /// The current value: average per pod for resources and pods metrics (milli-units as a
    /// Kubernetes quantity string).
    pub raw_value: Option<String>,
    pub error: Option<String>,
}

/// The decision, with its reasons and the history to remember.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub desired_replicas: i32,
    pub rescale: bool,
    pub metrics: Vec<MetricResult>,
    pub conditions: Vec<Condition>,
    pub history: History,
}

/// Conditions in upstream's order: AbleToScale, ScalingActive, ScalingLimited.
#[derive(Default)]
pub(crate) struct Conditions {
    list: Vec<Condition>,
}

impl Conditions {
    pub(crate) fn set(
        &mut self,
        type_: &str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        let c = Condition {
            type_: type_.to_string(),
            status: if status { "True" } else { "False" }.to_string(),
            reason: reason.to_string(),
            message: message.into(),
        };
        match self.list.iter_mut().find(|x| x.type_ == type_) {
            Some(x) => *x = c,
            None => self.list.push(c),
        }
    }

    fn into_sorted(mut self) -> Vec<Condition> {
        let rank = |t: &str| match t {
            "AbleToScale" => 0,
            "ScalingActive" => 1,
            _ => 2,
        };
        self.list.sort_by_key(|c| rank(&c.type_));
        self.list
    }
}

/// Formats milli-units as a Kubernetes quantity string.
impl History {
    /// The history as the next tick sees it, `elapsed` seconds later: every instant moves
    /// `elapsed` further into the past (times are relative to the tick).
    pub fn aged(&self, elapsed: f64) -> History {
        let mut h = self.clone();
        for r in h.recommendations.iter_mut().flatten() {
            r.at -= elapsed;
        }
        for e in h.scale_up_events.iter_mut().chain(&mut h.scale_down_events) {
            e.at -= elapsed;
        }
        h
    }
}

pub fn milli_string(v: i64) -> String {
    if v % 1000 == 0 {
        format!("{}", v / 1000)
    } else {
        format!("{v}m")
    }
}

/// One reconcile of the HPA: upstream's `reconcileAutoscaler` from the point where the scale
/// target has been read.
pub fn decide(tick: &Tick) -> Decision {
    let spec = &tick.spec;
    let mut conditions = Conditions::default();
    conditions.set(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    );
    let mut history = tick.history.clone();
    let current = tick.current_replicas;
    // recordInitialRecommendation
    if history.recommendations.is_none() {
        history.recommendations = Some(vec![Recommendation {
            at: 0.0,
            replicas: current,
        }]);
    }
    let min_replicas = spec.min_replicas.unwrap_or(1);
    let max_replicas = spec.max_replicas;
    let mut metrics = Vec::new();
    let mut desired;
    let mut rescale = true;
    if current == 0 && min_replicas != 0 {
        desired = 0;
        rescale = false;
        conditions.set(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
        );
    } else if current > max_replicas {
        desired = max_replicas;
    } else if current < min_replicas {
        desired = min_replicas;
    } else {
        let proposal = match tick.recommendation {
            Some(r) => {
                conditions.set("ScalingActive", true, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from a given recommendation");
                Ok(r)
            }
            None => {
                let (proposal, results) = replica::compute_for_metrics(tick, &mut conditions);
                metrics = results;
                proposal
            }
        };
        match proposal {
            Err(()) => {
                return Decision {
                    desired_replicas: current,
                    rescale: false,
                    metrics,
                    conditions: conditions.into_sorted(),
                    history,
                };
            }
            Ok(p) => {
                desired = p.max(0);
                desired = if spec.behavior.is_none() {
                    behavior::normalize(
                        tick,
                        &mut history,
                        &mut conditions,
                        current,
                        desired,
                        min_replicas,
                    )
                } else {
                    behavior::normalize_with_behaviors(
                        tick,
                        &mut history,
                        &mut conditions,
                        current,
                        desired,
                        min_replicas,
                    )
                };
                rescale = desired != current;
            }
        }
    }
    if rescale {
        conditions.set(
            "AbleToScale",
            true,
            "SucceededRescale",
            format!("the HPA controller was able to update the target scale to {desired}"),
        );
        behavior::store_scale_event(tick, &mut history, current, desired);
    } else {
        desired = current;
    }
    Decision {
        desired_replicas: desired,
        rescale,
        metrics,
        conditions: conditions.into_sorted(),
        history,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod history_tests {
    use super::*;

    #[test]
    fn an_aged_history_moves_every_instant_into_the_past() {
        let h = History {
            recommendations: Some(vec![Recommendation {
                at: -10.0,
                replicas: 3,
            }]),
            scale_up_events: vec![ScaleEvent {
                at: 0.0,
                change: 2,
                outdated: false,
            }],
            scale_down_events: vec![ScaleEvent {
                at: -5.0,
                change: 1,
                outdated: false,
            }],
        };
        let a = h.aged(15.0);
        assert_eq!(a.recommendations.unwrap()[0].at, -25.0);
        assert_eq!(a.scale_up_events[0].at, -15.0);
        assert_eq!(a.scale_down_events[0].at, -20.0);
    }
}
