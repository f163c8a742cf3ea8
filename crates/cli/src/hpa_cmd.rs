//! `capstan hpa decide`: the contract's tick format (../shared/contracts.md) to and from
//! `capstan_hpa::Tick` / `Decision`.

use crate::input::InputError;
use capstan_hpa::{
    ContainerInfo, ControllerConfig, Decision, History, HorizontalPodAutoscalerSpec, Metrics,
    Phase, PodInfo, Recommendation, ScaleEvent, Tick, ZERO_TIME,
};
use capstan_model::Quantity;
use capstan_model::nodepool::QuantityValue;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TickInput {
    spec: Value,
    current_replicas: i32,
    #[serde(default)]
    status_replicas: Option<i32>,
    /// Accepted for completeness; upstream reads readiness from the pods.
    #[serde(default)]
    #[allow(dead_code)]
    ready_replicas: Option<i32>,
    #[serde(default)]
    pods: Vec<PodInput>,
    #[serde(default)]
    metrics: MetricsInput,
    #[serde(default)]
    history: Option<HistoryInput>,
    #[serde(default)]
    recommendation: Option<i32>,
    #[serde(default)]
    controller: ControllerInput,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodInput {
    name: String,
    #[serde(default = "running")]
    phase: String,
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    deleting: bool,
    #[serde(default)]
    start_age_seconds: Option<f64>,
    #[serde(default)]
    ready_transition_age_seconds: Option<f64>,
    #[serde(default)]
    requests: Option<BTreeMap<String, QuantityValue>>,
    #[serde(default)]
    containers: Option<Vec<ContainerInput>>,
}

fn running() -> String {
    "Running".into()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContainerInput {
    name: String,
    #[serde(default)]
    requests: BTreeMap<String, QuantityValue>,
    /// `Always` marks a sidecar (restartable init container).
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetricsInput {
    #[serde(default)]
    window_seconds: Option<f64>,
    #[serde(default)]
    timestamp_age_seconds: Option<f64>,
    #[serde(default)]
    resource: BTreeMap<String, BTreeMap<String, QuantityValue>>,
    #[serde(default)]
    container_resource: BTreeMap<String, BTreeMap<String, BTreeMap<String, QuantityValue>>>,
    #[serde(default)]
    pods: BTreeMap<String, BTreeMap<String, QuantityValue>>,
    #[serde(default)]
    object: BTreeMap<String, QuantityValue>,
    #[serde(default)]
    external: BTreeMap<String, QuantityValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HistoryInput {
    #[serde(default)]
    recommendations: Vec<RecommendationInput>,
    #[serde(default)]
    scale_up_events: Vec<EventInput>,
    #[serde(default)]
    scale_down_events: Vec<EventInput>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RecommendationInput {
    age_seconds: f64,
    replicas: i32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EventInput {
    age_seconds: f64,
    replica_change: i32,
    #[serde(default)]
    outdated: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ControllerInput {
    #[serde(default)]
    tolerance: Option<ToleranceInput>,
    #[serde(default)]
    cpu_initialization_period_seconds: Option<f64>,
    #[serde(default)]
    initial_readiness_delay_seconds: Option<f64>,
    #[serde(default)]
    downscale_stabilization_seconds: Option<f64>,
    #[serde(default)]
    scale_up_limit_factor: Option<f64>,
    #[serde(default)]
    scale_up_limit_minimum: Option<f64>,
    /// The cluster's feature gates, as kube-apiserver's `--feature-gates`: `HPAScaleToZero`
    /// (alpha, off by default) is the one `hpa decide` reads.
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ToleranceInput {
    Both(f64),
    #[serde(rename_all = "camelCase")]
    Split {
        #[serde(default)]
        scale_up: Option<f64>,
        #[serde(default)]
        scale_down: Option<f64>,
    },
}

fn milli(v: &QuantityValue, field: &str) -> Result<i64, String> {
    v.parse()
        .map(|q: Quantity| q.milli_ceil())
        .map_err(|e| format!("{field}: {e}"))
}

fn milli_map(
    m: &BTreeMap<String, QuantityValue>,
    field: &str,
) -> Result<BTreeMap<String, i64>, String> {
    m.iter()
        .map(|(k, v)| Ok((k.clone(), milli(v, &format!("{field}.{k}"))?)))
        .collect()
}

fn age(v: Option<f64>) -> f64 {
    v.map(|a| -a).unwrap_or(ZERO_TIME)
}

fn convert(t: TickInput) -> Result<Tick, String> {
    let mut spec_value = t.spec;
    if let Some(obj) = spec_value.as_object_mut() {
        // scaleTargetRef is optional here: the tick already says what the target has.
        obj.entry("scaleTargetRef").or_insert_with(
            || json!({"kind": "Deployment", "name": "target", "apiVersion": "apps/v1"}),
        );
    }
    let spec: HorizontalPodAutoscalerSpec =
        serde_path_to_error::deserialize(spec_value).map_err(|e| {
            let path = e.path().to_string();
            format!("spec.{path}: {}", e.into_inner())
        })?;
    // The API server's validation of an HPA spec (a missing maxReplicas reads as 0).
    if spec.max_replicas < 1 {
        return Err(format!(
            "spec.maxReplicas: Invalid value: {}: must be greater than 0",
            spec.max_replicas
        ));
    }
    if let Some(min) = spec.min_replicas {
        if min < 0 {
            return Err(format!(
                "spec.minReplicas: Invalid value: {min}: must be greater than or equal to 0"
            ));
        }
        if min > spec.max_replicas {
            return Err(format!(
                "spec.maxReplicas: Invalid value: {}: must be greater than or equal to `minReplicas` ({min})",
                spec.max_replicas
            ));
        }
    }
    if t.current_replicas < 0 {
        return Err(format!(
            "currentReplicas: Invalid value: {}: must be greater than or equal to 0",
            t.current_replicas
        ));
    }
    if let Some(g) = t
        .controller
        .feature_gates
        .keys()
        .find(|g| g.as_str() != "HPAScaleToZero")
    {
        return Err(format!(
            "controller.featureGates.{g}: unrecognized feature gate (hpa decide reads HPAScaleToZero)"
        ));
    }
    // minReplicas 0 is upstream's HPAScaleToZero: the API server refuses it unless the gate
    // is on, and then only with an Object or External metric to scale from zero on.
    if spec.min_replicas.is_some_and(|m| m == 0) {
        let gate = t
            .controller
            .feature_gates
            .get("HPAScaleToZero")
            .copied()
            .unwrap_or(false);
        if !gate {
            return Err("spec.minReplicas: Invalid value: 0: must be greater than or equal to 1 (scaling to zero needs controller.featureGates.HPAScaleToZero: true)".into());
        }
        let scalable = spec
            .metrics
            .iter()
            .flatten()
            .any(|m| m.type_ == "Object" || m.type_ == "External");
        if !scalable {
            return Err(
                "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas"
                    .into(),
            );
        }
    }
    let mut pods = Vec::with_capacity(t.pods.len());
    for (i, p) in t.pods.into_iter().enumerate() {
        let f = format!("pods[{i}]");
        let phase = match p.phase.as_str() {
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            other => {
                return Err(format!(
                    "{f}.phase: expected Pending, Running, Succeeded or Failed, got {other:?}"
                ));
            }
        };
        let containers = match (p.containers, p.requests) {
            (Some(cs), _) => cs
                .into_iter()
                .enumerate()
                .map(|(j, c)| {
                    Ok(ContainerInfo {
                        name: c.name,
                        requests: milli_map(&c.requests, &format!("{f}.containers[{j}].requests"))?,
                        sidecar: c.restart_policy.as_deref() == Some("Always"),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?,
            (None, Some(r)) => vec![ContainerInfo {
                name: "pod".into(),
                requests: milli_map(&r, &format!("{f}.requests"))?,
                sidecar: false,
            }],
            (None, None) => vec![ContainerInfo::default()],
        };
        pods.push(PodInfo {
            name: p.name,
            phase,
            ready: p.ready,
            deleting: p.deleting,
            start: age(p.start_age_seconds),
            ready_transition: age(p.ready_transition_age_seconds),
            containers: containers.into(),
        });
    }
    let m = t.metrics;
    let metrics = Metrics {
        window: m.window_seconds.unwrap_or(60.0),
        timestamp: -m.timestamp_age_seconds.unwrap_or(0.0),
        resource: m
            .resource
            .iter()
            .map(|(r, v)| Ok((r.clone(), milli_map(v, &format!("metrics.resource.{r}"))?)))
            .collect::<Result<_, String>>()?,
        container_resource: m
            .container_resource
            .iter()
            .map(|(c, rs)| {
                let inner = rs
                    .iter()
                    .map(|(r, v)| {
                        Ok((
                            r.clone(),
                            milli_map(v, &format!("metrics.containerResource.{c}.{r}"))?,
                        ))
                    })
                    .collect::<Result<_, String>>()?;
                Ok((c.clone(), inner))
            })
            .collect::<Result<_, String>>()?,
        pods: m
            .pods
            .iter()
            .map(|(n, v)| Ok((n.clone(), milli_map(v, &format!("metrics.pods.{n}"))?)))
            .collect::<Result<_, String>>()?,
        object: milli_map(&m.object, "metrics.object")?,
        external: milli_map(&m.external, "metrics.external")?,
        // A tick file names its pods' samples; joining them is the HPA's job.
        resource_by_pod_index: Default::default(),
    };
    let history = match t.history {
        None => History::default(),
        Some(h) => History {
            recommendations: Some(
                h.recommendations
                    .iter()
                    .map(|r| Recommendation {
                        at: -r.age_seconds,
                        replicas: r.replicas,
                    })
                    .collect(),
            ),
            scale_up_events: h.scale_up_events.iter().map(event).collect(),
            scale_down_events: h.scale_down_events.iter().map(event).collect(),
        },
    };
    let d = ControllerConfig::default();
    let c = t.controller;
    let (tolerance_up, tolerance_down) = match c.tolerance {
        None => (d.tolerance_up, d.tolerance_down),
        Some(ToleranceInput::Both(t)) => (t, t),
        Some(ToleranceInput::Split {
            scale_up,
            scale_down,
        }) => (
            scale_up.unwrap_or(d.tolerance_up),
            scale_down.unwrap_or(d.tolerance_down),
        ),
    };
    Ok(Tick {
        spec,
        current_replicas: t.current_replicas,
        status_replicas: t.status_replicas.unwrap_or(t.current_replicas),
        pods,
        metrics,
        history,
        recommendation: t.recommendation,
        controller: ControllerConfig {
            tolerance_up,
            tolerance_down,
            cpu_initialization_period: c
                .cpu_initialization_period_seconds
                .unwrap_or(d.cpu_initialization_period),
            initial_readiness_delay: c
                .initial_readiness_delay_seconds
                .unwrap_or(d.initial_readiness_delay),
            downscale_stabilization: c
                .downscale_stabilization_seconds
                .unwrap_or(d.downscale_stabilization),
            scale_up_limit_factor: c.scale_up_limit_factor.unwrap_or(d.scale_up_limit_factor),
            scale_up_limit_minimum: c.scale_up_limit_minimum.unwrap_or(d.scale_up_limit_minimum),
        },
    })
}

fn event(e: &EventInput) -> ScaleEvent {
    ScaleEvent {
        at: -e.age_seconds,
        change: e.replica_change,
        outdated: e.outdated,
    }
}

fn age_out(at: f64) -> Value {
    let a = -at;
    if a.fract() == 0.0 {
        json!(a as i64)
    } else {
        json!(a)
    }
}

/// The contract's JSON for a decision.
pub fn decision_json(d: &Decision) -> Value {
    let events = |evs: &[ScaleEvent]| -> Vec<Value> {
        evs.iter()
            .map(|e| {
                let mut v = json!({"ageSeconds": age_out(e.at), "replicaChange": e.change});
                if e.outdated {
                    v["outdated"] = json!(true);
                }
                v
            })
            .collect()
    };
    json!({
        "desiredReplicas": d.desired_replicas,
        "rescale": d.rescale,
        "metrics": d.metrics,
        "conditions": d.conditions,
        "history": {
            "recommendations": d.history.recommendations.iter().flatten()
                .map(|r| json!({"ageSeconds": age_out(r.at), "replicas": r.replicas})).collect::<Vec<_>>(),
            "scaleUpEvents": events(&d.history.scale_up_events),
            "scaleDownEvents": events(&d.history.scale_down_events),
        }
    })
}

/// Reads one tick or a list of ticks. Errors name the file, the tick and the field.
pub fn read_ticks(file: &str, text: &str) -> Result<(Vec<Tick>, bool), InputError> {
    let yaml = |text: &str| -> Result<Vec<Value>, String> {
        let mut v = Vec::new();
        for d in serde_yaml::Deserializer::from_str(text) {
            let doc = Value::deserialize(d).map_err(|e| format!("{file}: invalid YAML: {e}"))?;
            if !doc.is_null() {
                v.push(doc);
            }
        }
        Ok(v)
    };
    let trimmed = text.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON, or YAML's flow style.
        match serde_json::from_str(text) {
            Ok(v) => vec![v],
            Err(json_err) => {
                yaml(text).map_err(|_| InputError(format!("{file}: invalid JSON: {json_err}")))?
            }
        }
    } else {
        yaml(text).map_err(InputError)?
    };
    let (items, is_list) = match docs.as_slice() {
        [Value::Array(items)] => (items.clone(), true),
        [single] => (vec![single.clone()], false),
        many => (many.to_vec(), true),
    };
    let mut ticks = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let object = if is_list {
            format!("tick {i}")
        } else {
            "tick".to_string()
        };
        let input: TickInput = serde_path_to_error::deserialize(item).map_err(|e| {
            let path = e.path().to_string();
            InputError(format!("{file}: {object}: {path}: {}", e.into_inner()))
        })?;
        ticks.push(convert(input).map_err(|e| InputError(format!("{file}: {object}: {e}")))?);
    }
    Ok((ticks, is_list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_tick_reads_and_decides() {
        let yaml = r#"
spec:
  minReplicas: 2
  maxReplicas: 10
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]
currentReplicas: 3
pods:
- {name: web-0, phase: Running, ready: true, requests: {cpu: "1"}}
- {name: web-1, phase: Running, ready: true, requests: {cpu: "1"}}
- {name: web-2, phase: Running, ready: true, containers: [{name: app, requests: {cpu: 1}}]}
metrics:
  resource: {cpu: {web-0: "1", web-1: "1", web-2: 1000m}}
"#;
        let (ticks, list) = read_ticks("t.yaml", yaml).unwrap();
        assert!(!list);
        let d = capstan_hpa::decide(&ticks[0]);
        assert_eq!(d.desired_replicas, 6);
        let j = decision_json(&d);
        assert_eq!(j["metrics"][0]["utilization"], 100);
        assert_eq!(j["metrics"][0]["rawValue"], "1");
        assert_eq!(j["history"]["recommendations"][1]["replicas"], 6);
    }

    #[test]
    fn bad_ticks_name_the_field() {
        let err = read_ticks(
            "t.yaml",
            "spec: {maxReplicas: 3}\ncurrentReplicas: 1\npods: [{name: a, phase: Sleeping}]\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "t.yaml: tick: pods[0].phase: expected Pending, Running, Succeeded or Failed, got \"Sleeping\""
        );
        let err = read_ticks(
            "t.yaml",
            "spec: {maxReplicas: 3}\ncurrentReplicas: 1\nmetrics: {resource: {cpu: {a: 12x}}}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("t.yaml: tick: metrics.resource.cpu.a: invalid quantity \"12x\""),
            "{err}"
        );
        let err = read_ticks(
            "t.yaml",
            "[{spec: {maxReplicas: 3}, currentReplicas: 1, colour: red}]",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("t.yaml: tick 0: colour: unknown field `colour`"),
            "{err}"
        );
        for (text, want) in [
            (
                "spec: {maxReplicas: 3, minReplicas: 0}\ncurrentReplicas: 1\n",
                "t.yaml: tick: spec.minReplicas: Invalid value: 0: must be greater than or equal to 1 (scaling to zero needs controller.featureGates.HPAScaleToZero: true)",
            ),
            (
                "spec: {maxReplicas: 3, minReplicas: 0}\ncurrentReplicas: 1\ncontroller: {featureGates: {HPAScaleToZero: true}}\n",
                "t.yaml: tick: spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas",
            ),
            (
                "spec: {maxReplicas: 3}\ncurrentReplicas: 1\ncontroller: {featureGates: {ScaleToInfinity: true}}\n",
                "t.yaml: tick: controller.featureGates.ScaleToInfinity: unrecognized feature gate (hpa decide reads HPAScaleToZero)",
            ),
        ] {
            let err = read_ticks("t.yaml", text).unwrap_err().to_string();
            assert_eq!(err, want);
        }
    }
}
