//! Replica proposals per metric: upstream's `computeReplicasForMetrics` and
//! `replica_calculator.go`.

use crate::{Conditions, MetricResult, Phase, PodInfo, Tick, milli_string};
use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The per-direction tolerance (spec.behavior tolerances win over the controller's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tolerances {
    pub up: f64,
    pub down: f64,
}

impl Tolerances {
    pub fn of(tick: &Tick) -> Tolerances {
        let q = |r: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>| {
            r.and_then(|r| r.tolerance.as_ref())
                .and_then(|t| capstan_model::Quantity::parse(&t.0).ok())
                .map(|q| q.milli_ceil() as f64 / 1000.0)
        };
        let b = tick.spec.behavior.as_ref();
        Tolerances {
            up: q(b.and_then(|b| b.scale_up.as_ref())).unwrap_or(tick.controller.tolerance_up),
            down: q(b.and_then(|b| b.scale_down.as_ref()))
                .unwrap_or(tick.controller.tolerance_down),
        }
    }

    pub fn is_within(&self, ratio: f64) -> bool {
        (1.0 - self.down) <= ratio && ratio <= (1.0 + self.up)
    }
}

fn milli(q: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<i64> {
    q.as_ref()
        .and_then(|q| capstan_model::Quantity::parse(&q.0).ok())
        .map(|q| q.milli_ceil())
}

/// A failed metric: the ScalingActive reason and the error.
struct Failure {
    reason: &'static str,
    message: String,
}

fn fail(reason: &'static str, message: impl Into<String>) -> Failure {
    Failure {
        reason,
        message: message.into(),
    }
}

/// A successful proposal.
struct Proposal {
    replicas: i32,
    /// How upstream names the metric in ScalingActive's message.
    described: String,
    utilization: Option<i32>,
    raw: i64,
}

/// The default when `spec.metrics` is empty: CPU at 80% of request.
fn default_metrics() -> Vec<MetricSpec> {
    vec![MetricSpec {
        type_: "Resource".into(),
        resource: Some(k8s_openapi::api::autoscaling::v2::ResourceMetricSource {
            name: "cpu".into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(80),
                ..Default::default()
            },
        }),
        ..Default::default()
    }]
}

/// Upstream's `computeReplicasForMetrics`: the largest proposal; an error when every metric is
/// invalid, or some are and the valid ones would scale down.
pub(crate) fn compute_for_metrics(
    tick: &Tick,
    conditions: &mut Conditions,
) -> (Result<i32, ()>, Vec<MetricResult>) {
    let specs = match &tick.spec.metrics {
        Some(m) if !m.is_empty() => m.clone(),
        _ => default_metrics(),
    };
    let mut results = Vec::new();
    let mut replicas = 0;
    let mut chosen = String::new();
    let mut invalid = 0;
    let mut first_invalid: Option<Failure> = None;
    for spec in &specs {
        let (type_, name) = metric_identity(spec);
        match compute_for_metric(tick, spec) {
            Ok(p) => {
                if replicas == 0 || p.replicas > replicas {
                    replicas = p.replicas;
                    chosen = p.described.clone();
                }
                results.push(MetricResult {
                    type_,
                    name,
                    replicas: Some(p.replicas),
                    utilization: p.utilization,
                    raw_value: Some(milli_string(p.raw)),
                    error: None,
                });
            }
            Err(f) => {
                results.push(MetricResult {
                    type_,
                    name,
                    replicas: None,
                    utilization: None,
                    raw_value: None,
                    error: Some(f.message.clone()),
                });
                invalid += 1;
                if first_invalid.is_none() {
                    first_invalid = Some(f);
                }
            }
        }
    }
    if invalid >= specs.len() || (invalid > 0 && replicas < tick.current_replicas) {
        let f = first_invalid.expect("at least one invalid metric");
        conditions.set(
            "ScalingActive",
            false,
            f.reason,
            format!(
                "the HPA was unable to compute the replica count: {}",
                f.message
            ),
        );
        return (Err(()), results);
    }
    conditions.set(
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {chosen}"),
    );
    (Ok(replicas), results)
}

fn metric_identity(spec: &MetricSpec) -> (String, String) {
    let name = match spec.type_.as_str() {
        "Resource" => spec.resource.as_ref().map(|r| r.name.clone()),
        "ContainerResource" => spec
            .container_resource
            .as_ref()
            .map(|r| format!("{}/{}", r.container, r.name)),
        "Pods" => spec.pods.as_ref().map(|p| p.metric.name.clone()),
        "Object" => spec.object.as_ref().map(|o| o.metric.name.clone()),
        "External" => spec.external.as_ref().map(|e| e.metric.name.clone()),
        _ => None,
    };
    (spec.type_.clone(), name.unwrap_or_default())
}

fn compute_for_metric(tick: &Tick, spec: &MetricSpec) -> Result<Proposal, Failure> {
    let tol = Tolerances::of(tick);
    let spec_replicas = tick.current_replicas;
    let status_replicas = tick.status_replicas;
    match spec.type_.as_str() {
        "Resource" => {
            let r = spec.resource.as_ref().ok_or_else(|| {
                fail(
                    "FailedGetResourceMetric",
                    "resource metric source is missing",
                )
            })?;
            resource_proposal(
                tick,
                tol,
                &r.name,
                None,
                &r.target,
                "FailedGetResourceMetric",
            )
        }
        "ContainerResource" => {
            let r = spec.container_resource.as_ref().ok_or_else(|| {
                fail(
                    "FailedGetContainerResourceMetric",
                    "container resource metric source is missing",
                )
            })?;
            resource_proposal(
                tick,
                tol,
                &r.name,
                Some(&r.container),
                &r.target,
                "FailedGetContainerResourceMetric",
            )
        }
        "Pods" => {
            let p = spec
                .pods
                .as_ref()
                .ok_or_else(|| fail("FailedGetPodsMetric", "pods metric source is missing"))?;
            let target = milli(&p.target.average_value).ok_or_else(|| {
                fail(
                    "FailedGetPodsMetric",
                    "invalid pods metric source: no average value target was set",
                )
            })?;
            let samples = tick
                .metrics
                .pods
                .get(&p.metric.name)
                .filter(|m| !m.is_empty())
                .ok_or_else(|| {
                    fail(
                        "FailedGetPodsMetric",
                        format!(
                            "unable to get metric {}: no metrics returned from custom metrics API",
                            p.metric.name
                        ),
                    )
                })?;
            let samples = Aligned::new(&tick.pods, samples);
            let (replicas, usage) =
                plain_metric_replicas(tick, tol, &samples, spec_replicas, target, None)
                    .map_err(|e| fail("FailedGetPodsMetric", e))?;
            Ok(Proposal {
                replicas,
                described: format!("pods metric {}", p.metric.name),
                utilization: None,
                raw: usage,
            })
        }
        "Object" => {
            let o = spec
                .object
                .as_ref()
                .ok_or_else(|| fail("FailedGetObjectMetric", "object metric source is missing"))?;
            let name = &o.metric.name;
            let usage = || {
                tick.metrics
                    .object
                    .get(name)
                    .copied()
                    .ok_or_else(|| fail("FailedGetObjectMetric", format!("unable to get metric {name}: no metrics returned from custom metrics API")))
            };
            let described = format!("{} metric {name}", o.described_object.kind);
            if o.target.type_ == "Value" && o.target.value.is_some() {
                let target = milli(&o.target.value).unwrap_or(1).max(1);
                let usage = usage()?;
                let ratio = usage as f64 / target as f64;
                let replicas = usage_ratio_replicas(tick, tol, spec_replicas, ratio)
                    .map_err(|e| fail("FailedGetObjectMetric", e))?;
                Ok(Proposal {
                    replicas,
                    described,
                    utilization: None,
                    raw: usage,
                })
            } else if o.target.type_ == "AverageValue" && o.target.average_value.is_some() {
                let target = milli(&o.target.average_value).unwrap_or(1).max(1);
                let usage = usage()?;
                let (replicas, avg) = per_pod_replicas(tol, status_replicas, usage, target);
                Ok(Proposal {
                    replicas,
                    described,
                    utilization: None,
                    raw: avg,
                })
            } else {
                Err(fail(
                    "FailedGetObjectMetric",
                    "invalid object metric source: neither a value target nor an average value target was set",
                ))
            }
        }
        "External" => {
            let e = spec.external.as_ref().ok_or_else(|| {
                fail(
                    "FailedGetExternalMetric",
                    "external metric source is missing",
                )
            })?;
            let name = &e.metric.name;
            let usage = || {
                tick.metrics
                    .external
                    .get(name)
                    .copied()
                    .ok_or_else(|| fail("FailedGetExternalMetric", format!("unable to get external metric {name}: no metrics returned from external metrics API")))
            };
            let described = format!("external metric {name}");
            if let Some(target) = milli(&e.target.average_value) {
                let usage = usage()?;
                let (replicas, avg) = per_pod_replicas(tol, status_replicas, usage, target.max(1));
                Ok(Proposal {
                    replicas,
                    described,
                    utilization: None,
                    raw: avg,
                })
            } else if let Some(target) = milli(&e.target.value) {
                let usage = usage()?;
                let ratio = usage as f64 / target.max(1) as f64;
                let replicas = usage_ratio_replicas(tick, tol, spec_replicas, ratio)
                    .map_err(|e| fail("FailedGetExternalMetric", e))?;
                Ok(Proposal {
                    replicas,
                    described,
                    utilization: None,
                    raw: usage,
                })
            } else {
                Err(fail(
                    "FailedGetExternalMetric",
                    "invalid external metric source: neither a value target nor an average value target was set",
                ))
            }
        }
        other => Err(fail(
            "InvalidMetricSourceType",
            format!("unknown metric source type {other:?}"),
        )),
    }
}

fn resource_proposal(
    tick: &Tick,
    tol: Tolerances,
    resource: &str,
    container: Option<&str>,
    target: &MetricTarget,
    reason: &'static str,
) -> Result<Proposal, Failure> {
    let by_index = match container {
        None => tick.metrics.resource_by_pod_index.get(resource),
        Some(_) => None,
    };
    let samples = match by_index {
        Some(v) if v.len() != tick.pods.len() => {
            return Err(fail(
                reason,
                format!(
                    "{} samples of {resource} by pod index for {} pods",
                    v.len(),
                    tick.pods.len()
                ),
            ));
        }
        Some(v) => v.iter().any(Option::is_some).then(|| Aligned {
            per_pod: Cow::Borrowed(v),
            extra: (0, 0),
        }),
        None => match container {
            None => tick.metrics.resource.get(resource),
            Some(c) => tick.metrics.container_resource.get(c).and_then(|m| m.get(resource)),
        }
        .filter(|m| !m.is_empty())
        .map(|m| Aligned::new(&tick.pods, m)),
    }
    .ok_or_else(|| fail(reason, format!("unable to get metrics for resource {resource}: no metrics returned from resource metrics API")))?;
    let described_suffix = match container {
        Some(c) => format!(" on container {c}"),
        None => String::new(),
    };
    if let Some(avg) = milli(&target.average_value) {
        let (replicas, usage) = plain_metric_replicas(
            tick,
            tol,
            &samples,
            tick.current_replicas,
            avg,
            Some((resource, container)),
        )
        .map_err(|e| fail(reason, e))?;
        return Ok(Proposal {
            replicas,
            described: format!("{resource} resource{described_suffix}"),
            utilization: None,
            raw: usage,
        });
    }
    let Some(util) = target.average_utilization else {
        return Err(fail(
            reason,
            "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set",
        ));
    };
    let (replicas, utilization, raw) =
        resource_replicas(tick, tol, &samples, util, resource, container)
            .map_err(|e| fail(reason, e))?;
    Ok(Proposal {
        replicas,
        described: format!(
            "{resource} resource utilization (percentage of request){described_suffix}"
        ),
        utilization: Some(utilization),
        raw,
    })
}

/// Metric samples lined up with `tick.pods`: upstream keys both by pod name; here the join is
/// done once, so the rest of the calculation is arithmetic over indexes.
struct Aligned<'a> {
    /// The sample of each pod in `tick.pods`, by index.
    per_pod: Cow<'a, [Option<i64>]>,
    /// Samples that name no pod in the tick: (count, sum). Upstream keeps them in the metrics
    /// map, so they count in averages and in `len(metrics)`.
    extra: (usize, i64),
}

impl Aligned<'_> {
    /// Joins samples to pods by name. Pod names are unique, as within one namespace; when
    /// the pods arrive sorted by name (the simulator's case) the join is a single merge.
    fn new(pods: &[PodInfo], samples: &BTreeMap<String, i64>) -> Aligned<'static> {
        Self::merge_sorted(pods, samples).unwrap_or_else(|| Self::sort_and_merge(pods, samples))
    }

    /// The join when the pods are in strict name order, checked on the way: two neighbours
    /// that both matched a sample are in order because the samples are, so only pods without
    /// one are compared with their neighbours. `None` when the pods are not in order.
    fn merge_sorted(pods: &[PodInfo], samples: &BTreeMap<String, i64>) -> Option<Aligned<'static>> {
        let mut per_pod = vec![None; pods.len()];
        let mut extra = (0, 0);
        let mut keys = samples.iter().peekable();
        for (i, p) in pods.iter().enumerate() {
            let mut matched = false;
            while let Some(&(k, v)) = keys.peek() {
                if *k == p.name {
                    per_pod[i] = Some(*v);
                    keys.next();
                    matched = true;
                    break;
                }
                if k.as_str() > p.name.as_str() {
                    break;
                }
                extra.0 += 1;
                extra.1 += v;
                keys.next();
            }
            if !matched
                && (i > 0 && pods[i - 1].name >= p.name
                    || i + 1 < pods.len() && p.name >= pods[i + 1].name)
            {
                return None;
            }
        }
        for (_, v) in keys {
            extra.0 += 1;
            extra.1 += v;
        }
        Some(Aligned {
            per_pod: Cow::Owned(per_pod),
            extra,
        })
    }

    fn sort_and_merge(pods: &[PodInfo], samples: &BTreeMap<String, i64>) -> Aligned<'static> {
        let mut order: Vec<usize> = (0..pods.len()).collect();
        order.sort_by(|&a, &b| pods[a].name.cmp(&pods[b].name));
        let mut per_pod = vec![None; pods.len()];
        let mut extra = (0, 0);
        let mut next = order.iter().peekable();
        for (name, v) in samples {
            while next
                .peek()
                .is_some_and(|&&i| pods[i].name.as_str() < name.as_str())
            {
                next.next();
            }
            match next.peek() {
                Some(&&i) if pods[i].name == *name => {
                    per_pod[i] = Some(*v);
                    // Duplicate names (impossible in one namespace) share the sample.
                    let mut same = next.clone();
                    same.next();
                    for &j in same.take_while(|&&j| pods[j].name == *name) {
                        per_pod[j] = Some(*v);
                    }
                }
                _ => {
                    extra.0 += 1;
                    extra.1 += v;
                }
            }
        }
        Aligned {
            per_pod: Cow::Owned(per_pod),
            extra,
        }
    }
}

/// How upstream's `groupPods` classifies one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Ready,
    Unready,
    Missing,
    Ignored,
}

/// Upstream's `groupPods`, by pod index, with the (ready, unready, missing) counts.
fn group_pods(tick: &Tick, samples: &Aligned, cpu: bool) -> (Vec<Group>, usize, usize, usize) {
    let c = &tick.controller;
    let m = &tick.metrics;
    let (mut ready, mut unready, mut missing) = (0, 0, 0);
    let groups = tick
        .pods
        .iter()
        .zip(samples.per_pod.iter())
        .map(|(p, sample)| {
            // As upstream: only deleting and Failed pods are ignored (a Succeeded pod is
            // grouped like a Running one).
            let g = if p.deleting || p.phase == Phase::Failed {
                Group::Ignored
            } else if p.phase == Phase::Pending {
                Group::Unready
            } else if sample.is_none() {
                Group::Missing
            } else if cpu
                && match p.ready {
                    None => true,
                    Some(ready_now) => {
                        if p.start + c.cpu_initialization_period > 0.0 {
                            // Within the initialization period: ignore the sample if the pod
                            // is unready or a whole window has not passed since it became
                            // ready.
                            !ready_now || m.timestamp < p.ready_transition + m.window
                        } else {
                            // Ignore it if the pod is unready and has never been ready.
                            !ready_now && p.start + c.initial_readiness_delay > p.ready_transition
                        }
                    }
                }
            {
                Group::Unready
            } else {
                Group::Ready
            };
            match g {
                Group::Ready => ready += 1,
                Group::Unready => unready += 1,
                Group::Missing => missing += 1,
                Group::Ignored => {}
            }
            g
        })
        .collect();
    (groups, ready, unready, missing)
}

/// Upstream's `calculatePodRequests`, milli-units per pod index. Pods that share their
/// containers (replicas of one template) share the sum.
fn pod_requests(
    pods: &[PodInfo],
    container: Option<&str>,
    resource: &str,
) -> Result<Vec<i64>, String> {
    let mut last: Option<(&std::sync::Arc<[crate::ContainerInfo]>, i64)> = None;
    pods.iter()
        .map(|p| {
            if let Some((cs, sum)) = last {
                if std::sync::Arc::ptr_eq(cs, &p.containers) {
                    return Ok(sum);
                }
            }
            let mut sum = 0;
            for c in p.containers.iter() {
                if container.is_none_or(|want| want == c.name) {
                    match c.requests.get(resource) {
                        Some(v) => sum += v,
                        None => {
                            return Err(format!(
                                "missing request for {resource} in container {} of Pod {}",
                                c.name, p.name
                            ));
                        }
                    }
                }
            }
            last = Some((&p.containers, sum));
            Ok(sum)
        })
        .collect()
}

/// Upstream's `GetResourceUtilizationRatio` over the samples `value` gives per pod index
/// (samples of unknown pods have no request and are skipped, as upstream skips them):
/// (ratio, utilization %, average usage).
fn utilization_ratio(
    values: impl Iterator<Item = Option<i64>>,
    requests: &[i64],
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut total, mut req_total, mut n) = (0i64, 0i64, 0i64);
    for (v, r) in values.zip(requests) {
        let Some(v) = v else { continue };
        total += v;
        req_total += r;
        n += 1;
    }
    if req_total == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = (total * 100 / req_total) as i32;
    Ok((utilization as f64 / target as f64, utilization, total / n))
}

/// Upstream's `GetResourceReplicas` (target utilization).
fn resource_replicas(
    tick: &Tick,
    tol: Tolerances,
    samples: &Aligned,
    target: i32,
    resource: &str,
    container: Option<&str>,
) -> Result<(i32, i32, i64), String> {
    let current = tick.current_replicas;
    if tick.pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let (groups, ready, unready, missing) = group_pods(tick, samples, resource == "cpu");
    // Upstream drops the samples of ignored and unready pods; the ready pods' remain, and
    // those of unknown pods.
    if ready + samples.extra.0 == 0 {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let requests = pod_requests(&tick.pods, container, resource)?;
    let kept = |i: usize| {
        (groups[i] == Group::Ready)
            .then(|| samples.per_pod[i])
            .flatten()
    };
    let (ratio, utilization, raw) =
        utilization_ratio((0..groups.len()).map(kept), &requests, target)?;
    let scale_up_with_unready = unready > 0 && ratio > 1.0;
    if !scale_up_with_unready && missing == 0 {
        if tol.is_within(ratio) {
            return Ok((current, utilization, raw));
        }
        return Ok(((ratio * ready as f64).ceil() as i32, utilization, raw));
    }
    // On a scale-down, missing pods use 100% of their request (or the target, if higher);
    // on a scale-up, nothing.
    let fallback = 100.max(target as i64);
    // Neither for a ratio of exactly 1 nor for NaN (a zero target), as upstream.
    let fill_missing = ratio.partial_cmp(&1.0).is_some_and(|o| o.is_ne());
    let filled = |i: usize| match groups[i] {
        Group::Ready => samples.per_pod[i],
        Group::Missing if ratio < 1.0 => Some(requests[i] * fallback / 100),
        Group::Missing if ratio > 1.0 => Some(0),
        Group::Unready if scale_up_with_unready => Some(0),
        _ => None,
    };
    let (new_ratio, _, _) = utilization_ratio((0..groups.len()).map(filled), &requests, target)?;
    if tol.is_within(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return Ok((current, utilization, raw));
    }
    let len = ready
        + samples.extra.0
        + if fill_missing { missing } else { 0 }
        + if scale_up_with_unready { unready } else { 0 };
    let new_replicas = (new_ratio * len as f64).ceil() as i32;
    if (new_ratio < 1.0 && new_replicas > current) || (new_ratio > 1.0 && new_replicas < current) {
        return Ok((current, utilization, raw));
    }
    Ok((new_replicas, utilization, raw))
}

/// Upstream's `GetMetricUsageRatio` over (count, total): (ratio, average).
fn usage_ratio((n, total): (usize, i64), target: i64) -> (f64, i64) {
    let avg = total / n.max(1) as i64;
    (avg as f64 / target as f64, avg)
}

/// Upstream's `calcPlainMetricReplicas` (Pods metrics and resource AverageValue).
fn plain_metric_replicas(
    tick: &Tick,
    tol: Tolerances,
    samples: &Aligned,
    current: i32,
    target: i64,
    resource: Option<(&str, Option<&str>)>,
) -> Result<(i32, i64), String> {
    if tick.pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let cpu = resource.is_some_and(|(r, _)| r == "cpu");
    let (groups, ready, unready, missing) = group_pods(tick, samples, cpu);
    let ready_total: i64 = groups
        .iter()
        .zip(samples.per_pod.iter())
        .filter(|(g, _)| **g == Group::Ready)
        .filter_map(|(_, v)| *v)
        .sum();
    let kept = (ready + samples.extra.0, ready_total + samples.extra.1);
    if kept.0 == 0 {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let target = target.max(1);
    let (ratio, usage) = usage_ratio(kept, target);
    let scale_up_with_unready = unready > 0 && ratio > 1.0;
    if !scale_up_with_unready && missing == 0 {
        if tol.is_within(ratio) {
            return Ok((current, usage));
        }
        return Ok(((ratio * ready as f64).ceil() as i32, usage));
    }
    // On a scale-down, missing pods use exactly the target; on a scale-up, nothing; at a
    // ratio of exactly 1 they are left out (upstream's `else if usageRatio > 1.0`).
    let mut all = kept;
    if missing > 0 && ratio != 1.0 {
        let fill = if ratio < 1.0 { target } else { 0 };
        all = (all.0 + missing, all.1 + fill * missing as i64);
    }
    if scale_up_with_unready {
        all.0 += unready;
    }
    let (new_ratio, _) = usage_ratio(all, target);
    if tol.is_within(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return Ok((current, usage));
    }
    let new_replicas = (new_ratio * all.0 as f64).ceil() as i32;
    if (new_ratio < 1.0 && new_replicas > current) || (new_ratio > 1.0 && new_replicas < current) {
        return Ok((current, usage));
    }
    Ok((new_replicas, usage))
}

/// Upstream's `getUsageRatioReplicaCount` (Object and External Value targets).
fn usage_ratio_replicas(
    tick: &Tick,
    tol: Tolerances,
    current: i32,
    ratio: f64,
) -> Result<i32, String> {
    if current != 0 {
        if tol.is_within(ratio) {
            return Ok(current);
        }
        if tick.pods.is_empty() {
            return Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into());
        }
        let ready = tick
            .pods
            .iter()
            .filter(|p| p.phase == Phase::Running && p.ready == Some(true))
            .count();
        Ok((ratio * ready as f64).ceil() as i32)
    } else {
        // Scale to zero or n pods depending on the ratio.
        Ok(ratio.ceil() as i32)
    }
}

/// Upstream's `GetObjectPerPodMetricReplicas` / `GetExternalPerPodMetricReplicas`:
/// (replicas, average usage per replica).
fn per_pod_replicas(tol: Tolerances, status_replicas: i32, usage: i64, target: i64) -> (i32, i64) {
    let mut replicas = status_replicas;
    let ratio = usage as f64 / (target as f64 * status_replicas as f64);
    if !tol.is_within(ratio) {
        replicas = (usage as f64 / target as f64).ceil() as i32;
    }
    let avg = if status_replicas > 0 {
        (usage as f64 / status_replicas as f64).ceil() as i64
    } else {
        usage
    };
    (replicas, avg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(name: String) -> PodInfo {
        PodInfo {
            name,
            phase: Phase::Running,
            ready: Some(true),
            deleting: false,
            start: crate::ZERO_TIME,
            ready_transition: crate::ZERO_TIME,
            containers: std::sync::Arc::from([]),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

        /// The single-pass join agrees with sorting first, whatever the pods' order, and
        /// declines only when the pods are not in strict name order.
        #[test]
        fn joining_samples_in_one_pass_agrees_with_sorting_first(
            names in proptest::collection::vec(0u16..60, 0..40),
            sampled in proptest::collection::vec(0u16..80, 0..50),
            shuffle in any::<bool>(),
        ) {
            let mut names: Vec<String> = names.iter().map(|n| format!("p{n}")).collect();
            if !shuffle {
                names.sort();
                names.dedup();
            }
            let pods: Vec<PodInfo> = names.into_iter().map(pod).collect();
            let samples: BTreeMap<String, i64> =
                sampled.iter().map(|n| (format!("p{n}"), *n as i64 * 10)).collect();
            let slow = Aligned::sort_and_merge(&pods, &samples);
            let sorted = pods.windows(2).all(|w| w[0].name < w[1].name);
            match Aligned::merge_sorted(&pods, &samples) {
                Some(fast) => {
                    prop_assert!(sorted);
                    prop_assert_eq!(fast.per_pod, slow.per_pod);
                    prop_assert_eq!(fast.extra, slow.extra);
                }
                None => prop_assert!(!sorted),
            }
        }
    }
}
