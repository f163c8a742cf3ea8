//! Normalizing a raw recommendation: stabilization windows, scale-up limits, and
//! `spec.behavior` policies, as upstream's `normalizeDesiredReplicas*` do.

use crate::{Conditions, History, Recommendation, ScaleEvent, Tick};
use k8s_openapi::api::autoscaling::v2::HPAScalingRules;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Select {
    Max,
    Min,
    Disabled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PolicyType {
    Pods,
    Percent,
}

#[derive(Clone, Debug)]
struct Rules {
    window: f64,
    select: Select,
    policies: Vec<(PolicyType, i32, i32)>,
}

fn rules(
    r: Option<&HPAScalingRules>,
    default_window: f64,
    default_policies: Vec<(PolicyType, i32, i32)>,
) -> Rules {
    let select = match r.and_then(|r| r.select_policy.as_deref()) {
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        _ => Select::Max,
    };
    let policies = match r.and_then(|r| r.policies.as_ref()) {
        Some(p) if !p.is_empty() => p
            .iter()
            .map(|p| {
                let t = if p.type_ == "Percent" {
                    PolicyType::Percent
                } else {
                    PolicyType::Pods
                };
                (t, p.value, p.period_seconds)
            })
            .collect(),
        _ => default_policies,
    };
    Rules {
        window: r
            .and_then(|r| r.stabilization_window_seconds)
            .map(f64::from)
            .unwrap_or(default_window),
        select,
        policies,
    }
}

/// Scale-up rules with upstream's defaults: no window; max of 4 pods or 100% per 15 s.
fn scale_up_rules(tick: &Tick) -> Rules {
    rules(
        tick.spec
            .behavior
            .as_ref()
            .and_then(|b| b.scale_up.as_ref()),
        0.0,
        vec![(PolicyType::Pods, 4, 15), (PolicyType::Percent, 100, 15)],
    )
}

/// Scale-down rules with upstream's defaults: the controller's window; 100% per 15 s.
fn scale_down_rules(tick: &Tick) -> Rules {
    rules(
        tick.spec
            .behavior
            .as_ref()
            .and_then(|b| b.scale_down.as_ref()),
        tick.controller.downscale_stabilization,
        vec![(PolicyType::Percent, 100, 15)],
    )
}

/// Without `spec.behavior`: the downscale stabilization window, then min/max and the scale-up
/// limit max(2 × current, 4).
pub(crate) fn normalize(
    tick: &Tick,
    history: &mut History,
    conditions: &mut Conditions,
    current: i32,
    prenormalized: i32,
    min: i32,
) -> i32 {
    let stabilized = stabilize(tick, history, prenormalized);
    if stabilized != prenormalized {
        conditions.set(
            "AbleToScale",
            true,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        );
    } else {
        conditions.set(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        );
    }
    let (desired, reason, message) =
        convert_with_rules(tick, current, stabilized, min, tick.spec.max_replicas);
    conditions.set("ScalingLimited", desired != stabilized, reason, message);
    desired
}

/// Upstream's `stabilizeRecommendation`.
fn stabilize(tick: &Tick, history: &mut History, prenormalized: i32) -> i32 {
    let recs = history.recommendations.get_or_insert_with(Vec::new);
    let cutoff = -tick.controller.downscale_stabilization;
    let mut max = prenormalized;
    let mut old = None;
    for (i, r) in recs.iter().enumerate() {
        if r.at < cutoff {
            old = Some(i);
        } else if r.replicas > max {
            max = r.replicas;
        }
    }
    let rec = Recommendation {
        at: 0.0,
        replicas: prenormalized,
    };
    match old {
        Some(i) => recs[i] = rec,
        None => recs.push(rec),
    }
    max
}

fn convert_with_rules(
    tick: &Tick,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
) -> (i32, &'static str, &'static str) {
    let c = &tick.controller;
    let scale_up_limit =
        (c.scale_up_limit_factor * current as f64).max(c.scale_up_limit_minimum) as i32;
    let (maximum, mut cond, mut reason) = if max > scale_up_limit {
        (
            scale_up_limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    } else {
        (
            max,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    };
    if desired < min {
        cond = "TooFewReplicas";
        reason = "the desired replica count is less than the minimum replica count";
        return (min, cond, reason);
    } else if desired > maximum {
        return (maximum, cond, reason);
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// With `spec.behavior`: stabilization windows both ways, then the scaling policies.
pub(crate) fn normalize_with_behaviors(
    tick: &Tick,
    history: &mut History,
    conditions: &mut Conditions,
    current: i32,
    prenormalized: i32,
    min: i32,
) -> i32 {
    let up = scale_up_rules(tick);
    let down = scale_down_rules(tick);
    let (stabilized, reason, message) =
        stabilize_with_behaviors(history, &up, &down, current, prenormalized);
    if stabilized != prenormalized {
        conditions.set("AbleToScale", true, reason, message);
    } else {
        conditions.set(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        );
    }
    let (desired, reason, message) = convert_with_behavior_rate(
        history,
        &up,
        &down,
        current,
        stabilized,
        min,
        tick.spec.max_replicas,
    );
    conditions.set("ScalingLimited", desired != stabilized, reason, message);
    desired
}

fn stabilize_with_behaviors(
    history: &mut History,
    up: &Rules,
    down: &Rules,
    current: i32,
    desired: i32,
) -> (i32, &'static str, &'static str) {
    let recs = history.recommendations.get_or_insert_with(Vec::new);
    let up_cutoff = -up.window;
    let down_cutoff = -down.window;
    let mut up_rec = desired;
    let mut down_rec = desired;
    let mut old = None;
    for (i, r) in recs.iter().enumerate() {
        if r.at > up_cutoff {
            up_rec = up_rec.min(r.replicas);
        }
        if r.at > down_cutoff {
            down_rec = down_rec.max(r.replicas);
        }
        if r.at < up_cutoff && r.at < down_cutoff {
            old = Some(i);
        }
    }
    let mut recommendation = current;
    if recommendation < up_rec {
        recommendation = up_rec;
    }
    if recommendation > down_rec {
        recommendation = down_rec;
    }
    let rec = Recommendation {
        at: 0.0,
        replicas: desired,
    };
    match old {
        Some(i) => recs[i] = rec,
        None => recs.push(rec),
    }
    if desired >= current {
        (
            recommendation,
            "ScaleUpStabilized",
            "recent recommendations were lower than current one, applying the lowest recent recommendation",
        )
    } else {
        (
            recommendation,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    }
}

/// Replicas changed by events within the last `period` seconds.
fn change_in_period(period: i32, events: &[ScaleEvent]) -> i32 {
    let cutoff = -(period as f64);
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

fn scale_up_limit(current: i32, history: &History, r: &Rules) -> i32 {
    if r.select == Select::Disabled {
        return current;
    }
    let mut result = if r.select == Select::Min {
        i32::MAX
    } else {
        i32::MIN
    };
    for &(t, value, period) in &r.policies {
        let start = current - change_in_period(period, &history.scale_up_events)
            + change_in_period(period, &history.scale_down_events);
        let proposed = match t {
            PolicyType::Pods => start + value,
            PolicyType::Percent => (start as f64 * (1.0 + value as f64 / 100.0)).ceil() as i32,
        };
        result = if r.select == Select::Min {
            result.min(proposed)
        } else {
            result.max(proposed)
        };
    }
    result
}

fn scale_down_limit(current: i32, history: &History, r: &Rules) -> i32 {
    if r.select == Select::Disabled {
        return current;
    }
    let mut result = if r.select == Select::Min {
        i32::MIN
    } else {
        i32::MAX
    };
    for &(t, value, period) in &r.policies {
        let start = current - change_in_period(period, &history.scale_up_events)
            + change_in_period(period, &history.scale_down_events);
        let proposed = match t {
            PolicyType::Pods => start - value,
            PolicyType::Percent => (start as f64 * (1.0 - value as f64 / 100.0)) as i32,
        };
        result = if r.select == Select::Min {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

fn convert_with_behavior_rate(
    history: &History,
    up: &Rules,
    down: &Rules,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
) -> (i32, &'static str, &'static str) {
    if desired > current {
        let limit = scale_up_limit(current, history, up).max(current);
        let (maximum, reason, message) = if max > limit {
            (
                limit,
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            )
        } else {
            (
                max,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )
        };
        if desired > maximum {
            return (maximum, reason, message);
        }
    } else if desired < current {
        let limit = scale_down_limit(current, history, down).min(current);
        let (minimum, reason, message) = if min < limit {
            (
                limit,
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate",
            )
        } else {
            (
                min,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        };
        if desired < minimum {
            return (minimum, reason, message);
        }
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// Upstream's `storeScaleEvent`: only with `spec.behavior`; an outdated event slot is reused.
pub(crate) fn store_scale_event(tick: &Tick, history: &mut History, prev: i32, new: i32) {
    if tick.spec.behavior.is_none() {
        return;
    }
    let (events, rules, change) = if new > prev {
        (
            &mut history.scale_up_events,
            scale_up_rules(tick),
            new - prev,
        )
    } else {
        (
            &mut history.scale_down_events,
            scale_down_rules(tick),
            prev - new,
        )
    };
    let longest = rules.policies.iter().map(|p| p.2).max().unwrap_or(0);
    let cutoff = -(longest as f64);
    for e in events.iter_mut() {
        if e.at < cutoff {
            e.outdated = true;
        }
    }
    let ev = ScaleEvent {
        at: 0.0,
        change,
        outdated: false,
    };
    match events.iter().position(|e| e.outdated) {
        Some(i) => events[i] = ev,
        None => events.push(ev),
    }
}
