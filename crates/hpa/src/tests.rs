//! Table of HPA behaviours, written from the Kubernetes documentation and the controller's
//! algorithm. Each case is one test named as a sentence.

use super::*;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricSource, CrossVersionObjectReference, ExternalMetricSource,
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscalerBehavior, MetricIdentifier,
    MetricSpec, MetricTarget, ObjectMetricSource, PodsMetricSource, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

fn q(s: &str) -> Option<Q> {
    Some(Q(s.to_string()))
}

fn util(resource: &str, pct: i32) -> MetricSpec {
    MetricSpec {
        type_: "Resource".into(),
        resource: Some(ResourceMetricSource {
            name: resource.into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(pct),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn avg_value(resource: &str, v: &str) -> MetricSpec {
    MetricSpec {
        type_: "Resource".into(),
        resource: Some(ResourceMetricSource {
            name: resource.into(),
            target: MetricTarget {
                type_: "AverageValue".into(),
                average_value: q(v),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn container_util(container: &str, resource: &str, pct: i32) -> MetricSpec {
    MetricSpec {
        type_: "ContainerResource".into(),
        container_resource: Some(ContainerResourceMetricSource {
            container: container.into(),
            name: resource.into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(pct),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn pods_metric(name: &str, v: &str) -> MetricSpec {
    MetricSpec {
        type_: "Pods".into(),
        pods: Some(PodsMetricSource {
            metric: MetricIdentifier {
                name: name.into(),
                selector: None,
            },
            target: MetricTarget {
                type_: "AverageValue".into(),
                average_value: q(v),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn object(name: &str, kind: &str, v: &str) -> MetricSpec {
    let target = if kind == "Value" {
        MetricTarget {
            type_: "Value".into(),
            value: q(v),
            ..Default::default()
        }
    } else {
        MetricTarget {
            type_: "AverageValue".into(),
            average_value: q(v),
            ..Default::default()
        }
    };
    MetricSpec {
        type_: "Object".into(),
        object: Some(ObjectMetricSource {
            described_object: CrossVersionObjectReference {
                api_version: Some("networking.k8s.io/v1".into()),
                kind: "Ingress".into(),
                name: "main".into(),
            },
            metric: MetricIdentifier {
                name: name.into(),
                selector: None,
            },
            target,
        }),
        ..Default::default()
    }
}

fn external(name: &str, kind: &str, v: &str) -> MetricSpec {
    let target = if kind == "Value" {
        MetricTarget {
            type_: "Value".into(),
            value: q(v),
            ..Default::default()
        }
    } else {
        MetricTarget {
            type_: "AverageValue".into(),
            average_value: q(v),
            ..Default::default()
        }
    };
    MetricSpec {
        type_: "External".into(),
        external: Some(ExternalMetricSource {
            metric: MetricIdentifier {
                name: name.into(),
                selector: None,
            },
            target,
        }),
        ..Default::default()
    }
}

fn rules(
    window: Option<i32>,
    select: Option<&str>,
    policies: &[(&str, i32, i32)],
) -> HPAScalingRules {
    HPAScalingRules {
        stabilization_window_seconds: window,
        select_policy: select.map(str::to_string),
        policies: (!policies.is_empty()).then(|| {
            policies
                .iter()
                .map(|(t, v, p)| HPAScalingPolicy {
                    type_: t.to_string(),
                    value: *v,
                    period_seconds: *p,
                })
                .collect()
        }),
        tolerance: None,
    }
}

/// A running, ready pod started long ago, requesting `cpu` millicores and 1 GiB in one container.
fn pod(name: &str, cpu: i64) -> PodInfo {
    PodInfo {
        name: name.into(),
        phase: Phase::Running,
        ready: Some(true),
        deleting: false,
        start: ZERO_TIME,
        ready_transition: ZERO_TIME,
        containers: [ContainerInfo {
            name: "app".into(),
            requests: [
                ("cpu".to_string(), cpu),
                ("memory".to_string(), 1024 * 1024 * 1024 * 1000),
            ]
            .into_iter()
            .collect(),
            sidecar: false,
        }]
        .into(),
    }
}

/// Changes a pod's (shared) containers.
fn edit_containers(p: &mut PodInfo, f: impl FnOnce(&mut Vec<ContainerInfo>)) {
    let mut cs = p.containers.to_vec();
    f(&mut cs);
    p.containers = cs.into();
}

/// A tick for `n` pods requesting 1 CPU each, HPA min 1 max 20 on the given metrics, not the
/// first sight (no pending recommendations).
struct B(Tick);

impl B {
    fn new(current: i32, metrics: Vec<MetricSpec>) -> B {
        B(Tick {
            spec: HorizontalPodAutoscalerSpec {
                min_replicas: Some(1),
                max_replicas: 20,
                metrics: Some(metrics),
                ..Default::default()
            },
            current_replicas: current,
            status_replicas: current,
            pods: (0..current).map(|i| pod(&format!("p{i}"), 1000)).collect(),
            metrics: Metrics {
                window: 60.0,
                timestamp: 0.0,
                ..Default::default()
            },
            history: History {
                recommendations: Some(Vec::new()),
                ..Default::default()
            },
            recommendation: None,
            controller: ControllerConfig::default(),
        })
    }

    /// CPU usage per pod (millicores), `None` for no sample.
    fn cpu(mut self, usage: &[Option<i64>]) -> B {
        let m = self.0.metrics.resource.entry("cpu".into()).or_default();
        for (i, u) in usage.iter().enumerate() {
            if let Some(u) = u {
                m.insert(format!("p{i}"), *u);
            }
        }
        self
    }

    fn cpu_all(self, usage: i64) -> B {
        let n = self.0.pods.len();
        self.cpu(&vec![Some(usage); n])
    }

    fn with(mut self, f: impl FnOnce(&mut Tick)) -> B {
        f(&mut self.0);
        self
    }

    fn decide(self) -> Decision {
        decide(&self.0)
    }
}

fn cond<'a>(d: &'a Decision, t: &str) -> &'a Condition {
    d.conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition in {:?}", d.conditions))
}

fn reason(d: &Decision, t: &str) -> String {
    format!("{}/{}", cond(d, t).status, cond(d, t).reason)
}

macro_rules! case {
    ($name:ident, $tick:expr, $replicas:expr) => {
        #[test]
        fn $name() {
            let d = $tick.decide();
            assert_eq!(d.desired_replicas, $replicas, "{d:#?}");
        }
    };
    ($name:ident, $tick:expr, $replicas:expr, $($ctype:literal => $cwant:literal),+) => {
        #[test]
        fn $name() {
            let d = $tick.decide();
            assert_eq!(d.desired_replicas, $replicas, "{d:#?}");
            $(assert_eq!(reason(&d, $ctype), $cwant, "{d:#?}");)+
        }
    };
}

// ---- Resource utilization ----

// Upstream keeps a sample of a pod the selector no longer lists in the metrics map: it counts
// in len(metrics). 3 × 80% → 1.6; the missing pod at 0 gives 2400/4000 = 1.2 × 5 samples.
case!(
    a_sample_of_a_pod_outside_the_pod_list_counts_in_the_replica_count,
    B::new(4, vec![util("cpu", 50)])
        .cpu(&[Some(800), Some(800), Some(800), None])
        .with(|t| {
            t.metrics
                .resource
                .get_mut("cpu")
                .unwrap()
                .insert("gone".into(), 800);
        }),
    6
);

// Usage 1000 each; requests 1000, 1000, 2000, 1000: 80% of request → 1.6 × 4 → 7. Reusing
// the shared sum for the third pod would give 100% and 8.
case!(
    replicas_sharing_their_containers_are_summed_like_separate_pods,
    B::new(4, vec![util("cpu", 50)]).cpu_all(1000).with(|t| {
        let shared = t.pods[0].containers.clone();
        for (i, p) in t.pods.iter_mut().enumerate() {
            if i == 2 {
                edit_containers(p, |cs| {
                    cs[0].requests.insert("cpu".into(), 2000);
                });
            } else {
                p.containers = shared.clone();
            }
        }
    }),
    7
);

#[test]
fn the_order_of_the_pods_does_not_change_the_decision() {
    let usage: Vec<Option<i64>> = (0..12)
        .map(|i| (i % 5 != 3).then_some(300 + 97 * i))
        .collect();
    let sorted = B::new(12, vec![util("cpu", 50)]).cpu(&usage).with(|t| {
        t.pods.sort_by(|a, b| a.name.cmp(&b.name));
    });
    let reversed = B::new(12, vec![util("cpu", 50)])
        .cpu(&usage)
        .with(|t| t.pods.reverse());
    let (a, b) = (sorted.decide(), reversed.decide());
    assert_eq!(a.desired_replicas, b.desired_replicas);
    assert_eq!(a.metrics, b.metrics);
    assert_ne!(a.desired_replicas, 12, "the case must scale: {a:#?}");
}

case!(scales_up_in_proportion_to_utilization, B::new(3, vec![util("cpu", 50)]).cpu_all(1000), 6,
    "AbleToScale" => "True/SucceededRescale", "ScalingActive" => "True/ValidMetricFound", "ScalingLimited" => "False/DesiredWithinRange");
case!(
    scales_down_in_proportion_to_utilization,
    B::new(4, vec![util("cpu", 50)]).cpu_all(250),
    2
);
case!(a_ratio_within_tolerance_keeps_the_current_count, B::new(4, vec![util("cpu", 50)]).cpu_all(520), 4,
    "AbleToScale" => "True/ReadyForNewScale");
case!(
    a_ratio_of_exactly_one_plus_tolerance_is_still_within,
    B::new(4, vec![util("cpu", 50)]).cpu_all(550),
    4
);
case!(
    a_ratio_just_above_tolerance_scales,
    B::new(4, vec![util("cpu", 50)]).cpu_all(560),
    5
);
// 55.9% truncates to 55%: a ratio of exactly 1.1, within tolerance (1.118 would not be).
case!(
    utilization_is_truncated_to_a_whole_percent_before_the_ratio,
    B::new(4, vec![util("cpu", 50)]).cpu_all(559),
    4
);
case!(
    a_per_direction_scale_up_tolerance_in_behavior_wins,
    B::new(4, vec![util("cpu", 50)]).cpu_all(530).with(|t| {
        t.spec.behavior = Some(HorizontalPodAutoscalerBehavior {
            scale_up: Some(HPAScalingRules {
                tolerance: q("0.05"),
                ..Default::default()
            }),
            scale_down: None,
        });
    }),
    5
);
case!(
    a_per_direction_scale_down_tolerance_in_behavior_wins,
    B::new(10, vec![util("cpu", 50)]).cpu_all(450).with(|t| {
        t.spec.behavior = Some(HorizontalPodAutoscalerBehavior {
            scale_up: None,
            scale_down: Some(HPAScalingRules {
                tolerance: q("0.01"),
                stabilization_window_seconds: Some(0),
                ..Default::default()
            }),
        });
    }),
    9
);
case!(
    the_controller_wide_tolerance_applies_without_behavior,
    B::new(4, vec![util("cpu", 50)]).cpu_all(570).with(|t| {
        t.controller.tolerance_up = 0.2;
    }),
    4
);
case!(
    missing_pods_count_as_full_usage_when_scaling_down,
    B::new(4, vec![util("cpu", 50)]).cpu(&[Some(100), Some(100), Some(100), None]),
    3
);
case!(
    missing_pods_count_as_zero_usage_when_scaling_up,
    B::new(4, vec![util("cpu", 50)]).cpu(&[Some(1000), Some(1000), Some(1000), None]),
    6
);
case!(
    missing_pods_count_at_the_target_when_it_is_above_one_hundred_percent,
    B::new(4, vec![util("cpu", 150)]).cpu(&[Some(500), Some(500), Some(500), None]),
    2
);
case!(
    missing_pods_that_would_reverse_the_direction_keep_the_current_count,
    B::new(2, vec![util("cpu", 50)]).cpu(&[Some(400), None]),
    2
);
case!(
    unready_pods_count_as_zero_usage_when_scaling_up,
    B::new(4, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(1000), Some(1000), None])
        .with(|t| {
            t.pods[3].phase = Phase::Pending;
        }),
    6
);
case!(
    unready_pods_are_ignored_when_scaling_down,
    B::new(4, vec![util("cpu", 50)])
        .cpu(&[Some(100), Some(100), Some(100), Some(900)])
        .with(|t| {
            t.pods[3].phase = Phase::Pending;
        }),
    1
);
case!(
    unready_pods_that_would_reverse_a_scale_up_keep_the_current_count,
    B::new(4, vec![util("cpu", 50)])
        .cpu(&[Some(600), Some(1000), Some(1000), Some(1000)])
        .with(|t| {
            for p in &mut t.pods[1..] {
                p.phase = Phase::Pending;
            }
        }),
    4
);
case!(
    a_sample_taken_before_a_full_window_after_readiness_is_ignored_during_cpu_initialization,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(5000)])
        .with(|t| {
            t.pods[1].start = -60.0;
            t.pods[1].ready_transition = -10.0;
        }),
    2
);
case!(
    a_ready_pod_with_a_full_window_counts_during_cpu_initialization,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(5000)])
        .with(|t| {
            t.pods[1].start = -200.0;
            t.pods[1].ready_transition = -120.0;
        }),
    4
);
case!(
    an_unready_pod_during_cpu_initialization_is_ignored,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(500), Some(5000)])
        .with(|t| {
            t.pods[1].start = -100.0;
            t.pods[1].ready = Some(false);
        }),
    2
);
case!(
    after_initialization_a_pod_never_ready_is_ignored,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(500), Some(5000)])
        .with(|t| {
            t.pods[1].start = -1000.0;
            t.pods[1].ready = Some(false);
            t.pods[1].ready_transition = -990.0;
        }),
    2
);
case!(
    after_initialization_a_pod_that_became_unready_later_still_counts,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(500), Some(5000)])
        .with(|t| {
            t.pods[1].start = -1000.0;
            t.pods[1].ready = Some(false);
            t.pods[1].ready_transition = -500.0;
        }),
    4
);
case!(
    a_pod_without_a_ready_condition_is_unready_for_cpu,
    B::new(2, vec![util("cpu", 50)])
        .cpu(&[Some(500), Some(5000)])
        .with(|t| {
            t.pods[1].ready = None;
        }),
    2
);
case!(
    memory_metrics_do_not_look_at_readiness,
    B::new(2, vec![util("memory", 50)]).with(|t| {
        t.pods[1].ready = Some(false);
        let gib = 1024i64 * 1024 * 1024 * 1000;
        t.metrics.resource.insert(
            "memory".into(),
            [("p0".to_string(), gib), ("p1".to_string(), gib)]
                .into_iter()
                .collect(),
        );
    }),
    4
);
case!(
    failed_pods_are_ignored,
    B::new(3, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(1000), Some(9000)])
        .with(|t| {
            t.pods[2].phase = Phase::Failed;
        }),
    4
);
// Upstream's groupPods ignores only deleting and Failed pods: a Succeeded pod's sample counts
// like a Running one's. 11000m over 3000m of requests is 366%, 7.32 × 3 → 22, which the
// scale-up limit caps at 2 × 3 (ignored, it would be 4).
case!(
    succeeded_pods_count_like_running_ones,
    B::new(3, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(1000), Some(9000)])
        .with(|t| {
            t.pods[2].phase = Phase::Succeeded;
        }),
    6
);
case!(
    pods_being_deleted_are_ignored,
    B::new(3, vec![util("cpu", 50)])
        .cpu(&[Some(1000), Some(1000), Some(9000)])
        .with(|t| {
            t.pods[2].deleting = true;
        }),
    4
);
case!(a_pod_without_a_request_for_the_resource_is_an_error, B::new(2, vec![util("cpu", 50)]).cpu_all(1000).with(|t| {
    edit_containers(&mut t.pods[1], |cs| {
        cs[0].requests.remove("cpu");
    });
}), 2, "ScalingActive" => "False/FailedGetResourceMetric");
case!(no_resource_metrics_at_all_is_failed_get_resource_metric, B::new(2, vec![util("cpu", 50)]), 2,
    "ScalingActive" => "False/FailedGetResourceMetric", "AbleToScale" => "True/SucceededGetScale");
case!(a_selector_matching_no_pods_is_an_error, B::new(2, vec![util("cpu", 50)]).cpu_all(1000).with(|t| {
    t.pods.clear();
}), 2, "ScalingActive" => "False/FailedGetResourceMetric");
case!(metrics_only_for_unready_pods_are_an_error, B::new(2, vec![util("cpu", 50)]).cpu_all(1000).with(|t| {
    for p in &mut t.pods { p.phase = Phase::Pending; }
}), 2, "ScalingActive" => "False/FailedGetResourceMetric");
case!(
    a_resource_average_value_target_divides_usage_per_pod,
    B::new(3, vec![avg_value("cpu", "500m")]).cpu_all(1000),
    6
);
case!(
    a_container_resource_metric_reads_only_that_container,
    B::new(2, vec![container_util("app", "cpu", 50)]).with(|t| {
        for p in &mut t.pods {
            edit_containers(p, |cs| {
                cs.push(ContainerInfo {
                    name: "proxy".into(),
                    requests: [("cpu".to_string(), 4000)].into_iter().collect(),
                    sidecar: false,
                })
            });
        }
        t.metrics.container_resource.insert(
            "app".into(),
            [(
                "cpu".to_string(),
                [("p0".to_string(), 1000), ("p1".to_string(), 1000)]
                    .into_iter()
                    .collect(),
            )]
            .into_iter()
            .collect(),
        );
    }),
    4
);
case!(
    sidecar_requests_count_toward_pod_utilization,
    B::new(2, vec![util("cpu", 50)]).cpu_all(1000).with(|t| {
        for p in &mut t.pods {
            edit_containers(p, |cs| {
                cs.push(ContainerInfo {
                    name: "proxy".into(),
                    requests: [("cpu".to_string(), 1000)].into_iter().collect(),
                    sidecar: true,
                })
            });
        }
    }),
    2
);

// ---- Pods, Object and External metrics ----

case!(
    a_pods_metric_scales_on_the_average_per_pod,
    B::new(2, vec![pods_metric("rps", "10")]).with(|t| {
        t.metrics.pods.insert(
            "rps".into(),
            [("p0".to_string(), 20_000), ("p1".to_string(), 20_000)]
                .into_iter()
                .collect(),
        );
    }),
    4
);
case!(
    a_pods_metric_fills_missing_pods_with_the_target_when_scaling_down,
    B::new(4, vec![pods_metric("rps", "10")]).with(|t| {
        t.metrics.pods.insert(
            "rps".into(),
            [
                ("p0".to_string(), 2_000),
                ("p1".to_string(), 2_000),
                ("p2".to_string(), 2_000),
            ]
            .into_iter()
            .collect(),
        );
    }),
    2
);
case!(
    a_pods_metric_fills_missing_pods_with_zero_when_scaling_up,
    B::new(4, vec![pods_metric("rps", "10")]).with(|t| {
        t.metrics.pods.insert(
            "rps".into(),
            [
                ("p0".to_string(), 30_000),
                ("p1".to_string(), 30_000),
                ("p2".to_string(), 30_000),
            ]
            .into_iter()
            .collect(),
        );
    }),
    8
);
// Upstream fills missing pods only when the ratio is not exactly 1 (`else if usageRatio >
// 1.0`): 3 pods at the target and one without a sample keep the count. Filling it with 0 would
// read 0.75 and scale down to 3.
case!(
    a_pods_metric_at_exactly_the_target_leaves_missing_pods_out,
    B::new(4, vec![pods_metric("rps", "10")]).with(|t| {
        t.metrics.pods.insert(
            "rps".into(),
            [
                ("p0".to_string(), 10_000),
                ("p1".to_string(), 10_000),
                ("p2".to_string(), 10_000),
            ]
            .into_iter()
            .collect(),
        );
    }),
    4
);
case!(
    a_pods_metric_ignores_readiness,
    B::new(2, vec![pods_metric("rps", "10")]).with(|t| {
        t.pods[1].ready = Some(false);
        t.metrics.pods.insert(
            "rps".into(),
            [("p0".to_string(), 20_000), ("p1".to_string(), 20_000)]
                .into_iter()
                .collect(),
        );
    }),
    4
);
case!(
    an_object_value_target_scales_by_ready_pods,
    B::new(3, vec![object("rps", "Value", "100")]).with(|t| {
        t.metrics.object.insert("rps".into(), 200_000);
    }),
    6
);
case!(
    an_object_value_target_counts_only_running_ready_pods,
    B::new(4, vec![object("rps", "Value", "100")]).with(|t| {
        t.pods[3].ready = Some(false);
        t.metrics.object.insert("rps".into(), 200_000);
    }),
    6
);
case!(
    an_object_value_within_tolerance_keeps_the_current_count,
    B::new(3, vec![object("rps", "Value", "100")]).with(|t| {
        t.metrics.object.insert("rps".into(), 105_000);
    }),
    3
);
case!(
    an_object_average_value_target_divides_by_status_replicas,
    B::new(4, vec![object("rps", "AverageValue", "50")]).with(|t| {
        t.metrics.object.insert("rps".into(), 300_000);
    }),
    6
);
case!(
    an_external_value_target_scales_by_ready_pods,
    B::new(2, vec![external("queue", "Value", "30")]).with(|t| {
        t.metrics.external.insert("queue".into(), 60_000);
    }),
    4
);
case!(
    an_external_average_value_target_needs_usage_over_target_replicas,
    B::new(3, vec![external("queue", "AverageValue", "30")]).with(|t| {
        t.metrics.external.insert("queue".into(), 150_000);
    }),
    5
);
case!(a_missing_object_metric_is_failed_get_object_metric, B::new(2, vec![object("rps", "Value", "100")]), 2,
    "ScalingActive" => "False/FailedGetObjectMetric");
case!(a_missing_external_metric_is_failed_get_external_metric, B::new(2, vec![external("queue", "Value", "100")]), 2,
    "ScalingActive" => "False/FailedGetExternalMetric");
case!(an_object_target_without_a_value_is_invalid, B::new(2, vec![object("rps", "Value", "100")]).with(|t| {
    let o = t.spec.metrics.as_mut().unwrap()[0].object.as_mut().unwrap();
    o.target = MetricTarget { type_: "Utilization".into(), average_utilization: Some(50), ..Default::default() };
    t.metrics.object.insert("rps".into(), 1);
}), 2, "ScalingActive" => "False/FailedGetObjectMetric");
case!(an_unknown_metric_type_is_an_invalid_metric_source_type, B::new(2, vec![MetricSpec { type_: "Magic".into(), ..Default::default() }]), 2,
    "ScalingActive" => "False/InvalidMetricSourceType");

// ---- Several metrics ----

case!(
    several_metrics_take_the_largest_proposal,
    B::new(2, vec![util("cpu", 50), external("queue", "Value", "10")])
        .cpu_all(500)
        .with(|t| {
            t.metrics.external.insert("queue".into(), 50_000);
        }),
    4
);
case!(a_partly_invalid_set_of_metrics_still_scales_up, B::new(2, vec![object("missing", "Value", "1"), util("cpu", 50)]).cpu_all(2000), 4,
    "ScalingActive" => "True/ValidMetricFound");
case!(a_partly_invalid_set_of_metrics_never_scales_down, B::new(4, vec![object("missing", "Value", "1"), util("cpu", 50)]).cpu_all(100), 4,
    "ScalingActive" => "False/FailedGetObjectMetric");
case!(
    no_metrics_listed_means_cpu_at_eighty_percent,
    B::new(2, vec![]).cpu_all(1600),
    4
);

// ---- Normalization without behavior ----

case!(scale_up_without_behavior_is_limited_to_four_from_small_counts, B::new(1, vec![util("cpu", 50)]).cpu_all(5000), 4,
    "ScalingLimited" => "True/ScaleUpLimit");
case!(scale_up_without_behavior_is_limited_to_twice_the_current_count, B::new(5, vec![util("cpu", 50)]).cpu_all(2000), 10,
    "ScalingLimited" => "True/ScaleUpLimit");
case!(max_replicas_caps_the_desired_count, B::new(8, vec![util("cpu", 50)]).cpu_all(1500).with(|t| t.spec.max_replicas = 10), 10,
    "ScalingLimited" => "True/TooManyReplicas");
case!(min_replicas_floors_the_desired_count, B::new(4, vec![util("cpu", 50)]).cpu_all(10).with(|t| t.spec.min_replicas = Some(3)), 3,
    "ScalingLimited" => "True/TooFewReplicas");
case!(downscale_stabilization_keeps_the_highest_recent_recommendation, B::new(6, vec![util("cpu", 50)]).cpu_all(100).with(|t| {
    t.history.recommendations = Some(vec![Recommendation { at: -100.0, replicas: 5 }]);
}), 5, "AbleToScale" => "True/SucceededRescale");
case!(
    recommendations_older_than_the_window_are_forgotten,
    B::new(6, vec![util("cpu", 50)]).cpu_all(100).with(|t| {
        t.history.recommendations = Some(vec![Recommendation {
            at: -301.0,
            replicas: 6,
        }]);
    }),
    2
);
case!(on_first_sight_the_current_count_counts_as_a_recent_recommendation, B::new(6, vec![util("cpu", 50)]).cpu_all(100).with(|t| {
    t.history.recommendations = None;
}), 6, "AbleToScale" => "True/ScaleDownStabilized");
case!(a_count_above_max_is_brought_down_without_reading_metrics, B::new(12, vec![util("cpu", 50)]).with(|t| t.spec.max_replicas = 10), 10,
    "AbleToScale" => "True/SucceededRescale");
case!(
    a_count_below_min_is_brought_up_without_reading_metrics,
    B::new(1, vec![util("cpu", 50)]).with(|t| t.spec.min_replicas = Some(3)),
    3
);
case!(a_target_at_zero_replicas_with_a_nonzero_minimum_is_not_scaled, B::new(0, vec![util("cpu", 50)]), 0,
    "ScalingActive" => "False/ScalingDisabled");
case!(
    a_given_recommendation_skips_the_metrics,
    B::new(2, vec![util("cpu", 50)]).with(|t| t.recommendation = Some(3)),
    3
);

// ---- Behavior ----

fn with_behavior(
    up: Option<HPAScalingRules>,
    down: Option<HPAScalingRules>,
) -> impl FnOnce(&mut Tick) {
    move |t| {
        t.spec.behavior = Some(HorizontalPodAutoscalerBehavior {
            scale_up: up,
            scale_down: down,
        })
    }
}

case!(a_pods_policy_limits_how_many_pods_are_added_per_period, B::new(4, vec![util("cpu", 50)]).cpu_all(2000)
    .with(with_behavior(Some(rules(None, None, &[("Pods", 2, 60)])), None)), 6, "ScalingLimited" => "True/ScaleUpLimit");
case!(a_percent_policy_limits_how_many_pods_are_removed_per_period, B::new(10, vec![util("cpu", 50)]).cpu_all(100)
    .with(with_behavior(None, Some(rules(Some(0), None, &[("Percent", 50, 60)])))), 5, "ScalingLimited" => "True/ScaleDownLimit");
case!(
    select_policy_max_takes_the_policy_allowing_the_most_change,
    B::new(10, vec![util("cpu", 50)])
        .cpu_all(5000)
        .with(with_behavior(
            Some(rules(
                None,
                Some("Max"),
                &[("Pods", 4, 60), ("Percent", 50, 60)]
            )),
            None
        )),
    15
);
case!(
    select_policy_min_takes_the_policy_allowing_the_least_change,
    B::new(10, vec![util("cpu", 50)])
        .cpu_all(5000)
        .with(with_behavior(
            Some(rules(
                None,
                Some("Min"),
                &[("Pods", 4, 60), ("Percent", 50, 60)]
            )),
            None
        )),
    14
);
case!(
    select_policy_disabled_stops_scaling_in_that_direction,
    B::new(10, vec![util("cpu", 50)])
        .cpu_all(100)
        .with(with_behavior(
            None,
            Some(rules(Some(0), Some("Disabled"), &[]))
        )),
    10
);
case!(scale_events_within_the_period_count_against_the_policy, B::new(6, vec![util("cpu", 50)]).cpu_all(2000)
    .with(with_behavior(Some(rules(None, None, &[("Pods", 2, 60)])), None))
    .with(|t| t.history.scale_up_events = vec![ScaleEvent { at: -30.0, change: 2, outdated: false }]), 6, "ScalingLimited" => "True/ScaleUpLimit");
case!(
    scale_events_older_than_the_period_do_not_count,
    B::new(6, vec![util("cpu", 50)])
        .cpu_all(2000)
        .with(with_behavior(
            Some(rules(None, None, &[("Pods", 2, 60)])),
            None
        ))
        .with(|t| t.history.scale_up_events = vec![ScaleEvent {
            at: -61.0,
            change: 2,
            outdated: false
        }]),
    8
);
case!(
    a_percent_scale_up_rounds_up,
    B::new(3, vec![util("cpu", 50)])
        .cpu_all(5000)
        .with(with_behavior(
            Some(rules(None, None, &[("Percent", 10, 60)])),
            None
        )),
    4
);
case!(
    a_percent_scale_down_rounds_down,
    B::new(9, vec![util("cpu", 50)])
        .cpu_all(10)
        .with(with_behavior(
            None,
            Some(rules(Some(0), None, &[("Percent", 10, 60)]))
        )),
    8
);
case!(a_scale_up_stabilization_window_takes_the_lowest_recent_recommendation, B::new(4, vec![util("cpu", 50)]).cpu_all(2500)
    .with(with_behavior(Some(rules(Some(60), None, &[("Percent", 1000, 15)])), None))
    .with(|t| t.history.recommendations = Some(vec![Recommendation { at: -30.0, replicas: 5 }])), 5,
    "AbleToScale" => "True/SucceededRescale");
case!(behavior_without_scale_down_uses_the_controllers_window, B::new(6, vec![util("cpu", 50)]).cpu_all(100)
    .with(with_behavior(Some(rules(None, None, &[])), None))
    .with(|t| t.history.recommendations = Some(vec![Recommendation { at: -200.0, replicas: 6 }])), 6,
    "AbleToScale" => "True/ScaleDownStabilized");
case!(a_behavior_scale_up_above_max_is_too_many_replicas, B::new(8, vec![util("cpu", 50)]).cpu_all(5000).with(|t| t.spec.max_replicas = 9)
    .with(with_behavior(None, None)), 9, "ScalingLimited" => "True/TooManyReplicas");
case!(a_behavior_scale_down_below_min_is_too_few_replicas, B::new(4, vec![util("cpu", 50)]).cpu_all(10).with(|t| t.spec.min_replicas = Some(3))
    .with(with_behavior(None, Some(rules(Some(0), None, &[])))), 3, "ScalingLimited" => "True/TooFewReplicas");

// ---- Scale to zero ----

case!(
    an_external_metric_scales_a_workload_from_zero,
    B::new(0, vec![external("queue", "Value", "10")]).with(|t| {
        t.spec.min_replicas = Some(0);
        t.metrics.external.insert("queue".into(), 30_000);
    }),
    3
);
case!(
    an_external_metric_of_zero_keeps_a_workload_at_zero,
    B::new(0, vec![external("queue", "Value", "10")]).with(|t| {
        t.spec.min_replicas = Some(0);
        t.metrics.external.insert("queue".into(), 0);
    }),
    0
);
case!(
    an_idle_object_metric_scales_to_zero_when_min_is_zero,
    B::new(2, vec![object("rps", "AverageValue", "10")]).with(|t| {
        t.spec.min_replicas = Some(0);
        t.metrics.object.insert("rps".into(), 0);
        t.history.recommendations = Some(vec![Recommendation {
            at: -400.0,
            replicas: 2,
        }]);
    }),
    0
);

#[test]
fn scale_events_are_remembered_only_with_behavior() {
    let d = B::new(3, vec![util("cpu", 50)]).cpu_all(1000).decide();
    assert!(d.history.scale_up_events.is_empty());
    let d = B::new(3, vec![util("cpu", 50)])
        .cpu_all(1000)
        .with(with_behavior(None, None))
        .decide();
    assert_eq!(
        d.history.scale_up_events,
        vec![ScaleEvent {
            at: 0.0,
            change: 3,
            outdated: false
        }]
    );
}

#[test]
fn an_outdated_scale_event_slot_is_reused() {
    let d = B::new(3, vec![util("cpu", 50)])
        .cpu_all(1000)
        .with(with_behavior(None, None))
        .with(|t| {
            t.history.scale_up_events = vec![
                ScaleEvent {
                    at: -100.0,
                    change: 1,
                    outdated: false,
                },
                ScaleEvent {
                    at: -5.0,
                    change: 1,
                    outdated: false,
                },
            ]
        })
        .decide();
    assert_eq!(
        d.history.scale_up_events,
        vec![
            ScaleEvent {
                at: 0.0,
                change: 3,
                outdated: false
            },
            ScaleEvent {
                at: -5.0,
                change: 1,
                outdated: false
            }
        ]
    );
}

#[test]
fn the_issue_sequence_follows_the_downscale_window() {
    // 50% CPU target, min 2, max 10, default 300 s downscale window.
    let mut history = History::default();
    let mut last_t = 0.0;
    let mut current = 3;
    for (t, usage, want) in [
        (0.0, Some(1000), 6),
        (240.0, Some(500), 6),
        (400.0, Some(150), 6),
        (541.0, Some(150), 2),
        (600.0, None, 2),
    ] {
        let dt = t - last_t;
        for r in history.recommendations.iter_mut().flatten() {
            r.at -= dt;
        }
        last_t = t;
        let mut b = B::new(current, vec![util("cpu", 50)]).with(|x| {
            x.spec.min_replicas = Some(2);
            x.spec.max_replicas = 10;
            x.history = history.clone();
        });
        if let Some(u) = usage {
            b = b.cpu_all(u);
        }
        let d = b.decide();
        assert_eq!(d.desired_replicas, want, "at t={t}: {d:#?}");
        if usage.is_none() {
            assert_eq!(reason(&d, "ScalingActive"), "False/FailedGetResourceMetric");
        }
        history = d.history;
        current = d.desired_replicas;
    }
}

mod samples_by_pod_index {
    use super::*;
    use proptest::prelude::*;

    /// A pod in one of the states the metric stage tells apart.
    fn varied(i: usize, state: u8, cpu: i64) -> PodInfo {
        let mut p = pod(&format!("p{i:03}"), cpu);
        match state % 6 {
            0 => {}
            1 => p.ready = Some(false),
            2 => p.phase = Phase::Pending,
            3 => p.deleting = true,
            4 => {
                // Started recently, ready a moment ago: inside the CPU initialization period.
                p.start = -20.0;
                p.ready_transition = -5.0;
            }
            _ => p.ready = None,
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

        /// Samples handed over already joined to the pods decide exactly as the same samples
        /// keyed by pod name.
        #[test]
        fn samples_by_pod_index_decide_as_samples_by_name(
            pods in proptest::collection::vec((0u8..6, 100i64..2000, proptest::option::of(0i64..3000)), 1..30),
            current in 1i32..30,
            target in 10i32..150,
            average in any::<bool>(),
        ) {
            let spec = if average { avg_value("cpu", "500m") } else { util("cpu", target) };
            let mut by_name = B::new(current, vec![spec]).0;
            by_name.pods = pods
                .iter()
                .enumerate()
                .map(|(i, (state, cpu, _))| varied(i, *state, *cpu))
                .collect();
            let mut by_index = by_name.clone();
            by_name.metrics.resource.insert(
                "cpu".into(),
                pods.iter()
                    .enumerate()
                    .filter_map(|(i, (_, _, s))| s.map(|s| (format!("p{i:03}"), s)))
                    .collect(),
            );
            by_index.metrics.resource_by_pod_index.insert(
                "cpu".into(),
                pods.iter().map(|(_, _, s)| *s).collect(),
            );
            prop_assert_eq!(decide(&by_index), decide(&by_name));
        }
    }

    #[test]
    fn samples_by_pod_index_of_another_length_are_a_failed_metric() {
        let mut b = B::new(3, vec![util("cpu", 50)]).0;
        b.metrics
            .resource_by_pod_index
            .insert("cpu".into(), vec![Some(500); 2]);
        let d = decide(&b);
        assert_eq!(d.desired_replicas, 3);
        assert_eq!(reason(&d, "ScalingActive"), "False/FailedGetResourceMetric");
        assert!(
            d.metrics[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("2 samples of cpu by pod index for 3 pods")),
            "{:?}",
            d.metrics
        );
    }
}

#[test]
fn no_ready_pods_is_reported_before_a_missing_request() {
    // Upstream groups the pods before it sums their requests: with neither ready pods nor a
    // request, it says the former.
    let d = B::new(2, vec![util("cpu", 50)])
        .cpu_all(1000)
        .with(|t| {
            for p in &mut t.pods {
                p.phase = Phase::Pending;
            }
            edit_containers(&mut t.pods[1], |cs| {
                cs[0].requests.remove("cpu");
            });
        })
        .decide();
    let message = &cond(&d, "ScalingActive").message;
    assert!(message.contains("did not receive metrics"), "{message}");
    let d = B::new(2, vec![util("cpu", 50)])
        .cpu_all(1000)
        .with(|t| {
            edit_containers(&mut t.pods[1], |cs| {
                cs[0].requests.remove("cpu");
            });
        })
        .decide();
    let message = &cond(&d, "ScalingActive").message;
    assert!(
        message.contains("missing request for cpu in container app of Pod p1"),
        "{message}"
    );
}
