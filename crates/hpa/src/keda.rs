//! Event-driven scaling in the style of KEDA's ScaledObject: an external trigger (a queue's
//! depth, say) with a target per replica and an activation threshold. KEDA itself moves a
//! workload between 0 and 1 replica (activation and cooldown); from 1 to N the HPA algorithm
//! decides, with the trigger as an External metric with an AverageValue target — exactly what
//! KEDA's generated HPA does.

use crate::{ControllerConfig, Decision, History, HorizontalPodAutoscalerSpec, Metrics, Tick};
use k8s_openapi::api::autoscaling::v2::{
    ExternalMetricSource, MetricIdentifier, MetricSpec, MetricTarget,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A ScaledObject with one trigger.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaledObject {
    /// The trigger's metric name (e.g. `queue-depth`).
    pub metric: String,
    /// Trigger value one replica handles (KEDA's `value` / `queueLength`).
    pub target_per_replica: f64,
    /// Above this the workload is active (KEDA's `activationValue`); at or below, idle.
    pub activation_threshold: f64,
    pub min_replicas: i32,
    pub max_replicas: i32,
    /// Seconds the trigger must stay idle before scaling to zero (KEDA default 300).
    pub cooldown_seconds: f64,
}

impl Default for ScaledObject {
    fn default() -> Self {
        ScaledObject {
            metric: "queue-depth".into(),
            target_per_replica: 10.0,
            activation_threshold: 0.0,
            min_replicas: 0,
            max_replicas: 100,
            cooldown_seconds: 300.0,
        }
    }
}

/// What the scaler remembers between ticks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScalerState {
    /// Seconds since the trigger was last active (`None`: never, or long ago).
    pub idle_for: Option<f64>,
    pub hpa: History,
}

/// One decision of the event scaler.
#[derive(Clone, Debug, PartialEq)]
pub struct EventDecision {
    pub desired_replicas: i32,
    pub active: bool,
    /// Why, in KEDA's terms.
    pub reason: &'static str,
    /// The HPA's decision when it took part (1 → N).
    pub hpa: Option<Decision>,
    pub state: ScalerState,
}

impl ScaledObject {
    /// The HPA KEDA would create for this ScaledObject.
    pub fn hpa_spec(&self) -> HorizontalPodAutoscalerSpec {
        HorizontalPodAutoscalerSpec {
            min_replicas: Some(self.min_replicas.max(1)),
            max_replicas: self.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "External".into(),
                external: Some(ExternalMetricSource {
                    metric: MetricIdentifier {
                        name: self.metric.clone(),
                        selector: None,
                    },
                    target: MetricTarget {
                        type_: "AverageValue".into(),
                        average_value: Some(Quantity(format!(
                            "{}m",
                            (self.target_per_replica * 1000.0).round() as i64
                        ))),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// Decides replicas for the trigger's current `value`, `elapsed` seconds after the last tick.
    pub fn decide(
        &self,
        current: i32,
        value: f64,
        elapsed: f64,
        state: &ScalerState,
        controller: &ControllerConfig,
    ) -> EventDecision {
        let active = value > self.activation_threshold;
        let idle_for = if active {
            Some(0.0)
        } else {
            state.idle_for.map(|t| t + elapsed)
        };
        let mut next = ScalerState {
            idle_for,
            hpa: state.hpa.aged(elapsed),
        };
        if current == 0 {
            if active {
                // 0 → 1 on the first event (or straight to minReplicas if that is higher).
                return EventDecision {
                    desired_replicas: self.min_replicas.max(1),
                    active,
                    reason: "ScaledObjectActivated",
                    hpa: None,
                    state: next,
                };
            }
            return EventDecision {
                desired_replicas: self.min_replicas,
                active,
                reason: "ScaledObjectIdle",
                hpa: None,
                state: next,
            };
        }
        let cooled = idle_for.is_none_or(|t| t >= self.cooldown_seconds);
        if !active && self.min_replicas == 0 && cooled {
            next.hpa = History::default();
            return EventDecision {
                desired_replicas: 0,
                active,
                reason: "ScaledObjectCooledDown",
                hpa: None,
                state: next,
            };
        }
        let mut metrics = Metrics::default();
        metrics
            .external
            .insert(self.metric.clone(), (value * 1000.0).round() as i64);
        let tick = Tick {
            spec: self.hpa_spec(),
            current_replicas: current,
            status_replicas: current,
            metrics,
            history: next.hpa.clone(),
            controller: controller.clone(),
            ..Default::default()
        };
        let d = crate::decide(&tick);
        next.hpa = d.history.clone();
        EventDecision {
            desired_replicas: d.desired_replicas,
            active,
            reason: if active {
                "ScaledObjectActive"
            } else {
                "ScaledObjectCoolingDown"
            },
            hpa: Some(d),
            state: next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn so() -> ScaledObject {
        ScaledObject {
            activation_threshold: 5.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_first_event_wakes_a_workload_from_zero_to_one() {
        let d = so().decide(
            0,
            6.0,
            30.0,
            &ScalerState::default(),
            &ControllerConfig::default(),
        );
        assert_eq!((d.desired_replicas, d.reason), (1, "ScaledObjectActivated"));
    }

    #[test]
    fn values_at_or_below_activation_keep_it_at_zero() {
        let d = so().decide(
            0,
            5.0,
            30.0,
            &ScalerState::default(),
            &ControllerConfig::default(),
        );
        assert_eq!((d.desired_replicas, d.reason), (0, "ScaledObjectIdle"));
    }

    #[test]
    fn from_one_replica_the_hpa_scales_on_value_per_replica() {
        let d = so().decide(
            1,
            95.0,
            30.0,
            &ScalerState::default(),
            &ControllerConfig::default(),
        );
        // 95 / 10 per replica → 10, limited without behavior to max(2 × 1, 4) = 4.
        assert_eq!(d.desired_replicas, 4);
        assert!(d.hpa.is_some());
    }

    #[test]
    fn it_scales_to_zero_only_after_the_cooldown() {
        let s = so();
        let c = ControllerConfig::default();
        let active = s.decide(2, 20.0, 30.0, &ScalerState::default(), &c);
        let mut state = active.state;
        let mut t = 0.0;
        let mut replicas = active.desired_replicas;
        while replicas > 0 {
            let d = s.decide(replicas, 0.0, 30.0, &state, &c);
            t += 30.0;
            replicas = d.desired_replicas;
            state = d.state;
            if replicas == 0 {
                assert_eq!(d.reason, "ScaledObjectCooledDown");
            }
            assert!(t < 3600.0);
        }
        assert_eq!(t, 300.0, "idle for exactly the 300 s cooldown");
    }

    #[test]
    fn a_non_zero_minimum_never_scales_to_zero() {
        let s = ScaledObject {
            min_replicas: 2,
            ..so()
        };
        let d = s.decide(
            2,
            0.0,
            1e6,
            &ScalerState::default(),
            &ControllerConfig::default(),
        );
        assert_eq!(d.desired_replicas, 2);
    }
}
