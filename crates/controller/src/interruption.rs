//! The cloud's events about instances: a spot interruption warning (two minutes), scheduled
//! maintenance, an instance stopping, a rebalance recommendation. Those that take the
//! instance start the claim's termination with the cloud's deadline (pre-launching
//! replacements first for warnings, whose boot the drain waits for while the notice allows:
//! [`crate::termination::hold_drain`]); a claim already going gets the deadline, so its drain
//! forces its pods off in time. Events are acknowledged only once handled: the rest come back,
//! to whoever leads then.

use crate::api::ClusterApi;
use crate::catalog::instance_types;
use crate::context::Ctx;
use crate::disruption::{Disruption, launch_replacement};
use crate::{Action, secs};
use capstan_cloud::{CloudProvider, InstanceState, InterruptionEvent, OfferingKey};
use capstan_model::NodeClaim;
use capstan_model::disruption::Reason;

/// For an event that means the instance goes: why, and by when the node must be drained.
pub fn reclaim(ev: &InterruptionEvent, now: f64) -> Option<(Reason, f64)> {
    match ev {
        InterruptionEvent::SpotInterruptionWarning { reclaim_at, .. } => {
            Some((Reason::SpotInterruption, secs(*reclaim_at)))
        }
        InterruptionEvent::ScheduledMaintenance { when, .. } => {
            Some((Reason::ScheduledMaintenance, secs(*when)))
        }
        InterruptionEvent::StateChange {
            state: InstanceState::ShuttingDown | InstanceState::Terminated,
            ..
        } => Some((Reason::InstanceTerminated, now)),
        _ => None,
    }
}

pub(crate) async fn reconcile<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    disruption: &mut Disruption,
    now: f64,
) {
    let events = match cx
        .cloud_call("interruption", "Interruptions", cx.cloud.interruptions())
        .await
    {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "reading interruption events failed");
            return;
        }
    };
    if events.is_empty() {
        return;
    }
    let mut handled: Vec<InterruptionEvent> = Vec::new();
    for ev in &events {
        cx.s.metrics
            .interruption_received
            .with_label_values(&[message_type(ev)])
            .inc();
        cx.s.metrics
            .interruption_queued
            .with_label_values::<&str>(&[])
            .observe((now - ev.at().as_secs_f64()).max(0.0));
    }
    for ev in events {
        if !cx.leading() {
            break;
        }
        let Some(c) = cx.claim_by_provider(ev.provider_id()) else {
            handled.push(ev);
            continue;
        };
        if let Some((reason, deadline)) = reclaim(&ev, now) {
            if reason == Reason::SpotInterruption {
                mark_interrupted_offering(cx, &c, now);
            }
            cx.record(
                now,
                Action::Interrupted {
                    claim: c.name.clone(),
                    event: reason,
                },
            );
            let done = if c.deleting() {
                // Already going (a disruption draining it, say): the cloud's deadline still
                // binds, so the drain forces its pods off in time for it.
                cx.tighten_deadline(&c.name, reason, deadline).await
            } else if reason == Reason::InstanceTerminated {
                cx.begin_deletion(&c.name, reason, Some(deadline)).await
            } else {
                replace(cx, now, &c, reason, deadline).await
            };
            if done {
                handled.push(ev);
            }
            continue;
        }
        // A rebalance recommendation (best effort: not retried), or a state change that takes
        // nothing.
        if matches!(ev, InterruptionEvent::RebalanceRecommendation { .. })
            && !c.deleting()
            && !disruption.busy()
        {
            if let Some(node) = c.status.node_name.clone() {
                let types = instance_types(cx, now).await;
                // Only NodePools that opt in act on a recommendation: the engine's inputs
                // (the whole cluster) are built for those alone.
                if !opts_in_to_rebalance(cx.cache(), &node) {
                    handled.push(ev);
                    continue;
                }
                let mut kept = std::mem::take(&mut cx.s.disruption_inputs);
                let d = kept.refresh(cx, &types);
                let input = d.input(&types, cx.config.epoch_unix + now);
                let cmd = capstan_disrupt::rebalance(input, &node);
                cx.s.disruption_inputs = kept;
                if let Ok(Some(cmd)) = cmd {
                    cx.record(
                        now,
                        Action::Interrupted {
                            claim: c.name.clone(),
                            event: Reason::RebalanceRecommendation,
                        },
                    );
                    disruption.execute(cx, now, &cmd, &types).await;
                }
            }
        }
        handled.push(ev);
    }
    if !handled.is_empty() {
        match cx
            .cloud_call(
                "interruption",
                "AckInterruptions",
                cx.cloud.ack_interruptions(&handled),
            )
            .await
        {
            Ok(()) => {
                cx.s.metrics
                    .interruption_deleted
                    .with_label_values::<&str>(&[])
                    .inc_by(handled.len() as u64)
            }
            Err(e) => tracing::warn!(error = %e, "acknowledging interruption events failed"),
        }
    }
}

/// Whether the node's NodePool acts on rebalance recommendations (`capstan.dev/spot-rebalance`);
/// the engine's [`capstan_disrupt::rebalance`] decides nothing for the others.
fn opts_in_to_rebalance(cache: &crate::Cache, node: &str) -> bool {
    cache
        .node(node)
        .and_then(|n| n.labels.get(capstan_model::labels::NODEPOOL))
        .and_then(|p| cache.nodepool(p))
        .is_some_and(|p| p.spot_rebalance)
}

/// A spot interruption says the pool is short of capacity: its offering is avoided for
/// `unavailable_ttl` (Karpenter: three minutes), so the replacement goes elsewhere.
fn mark_interrupted_offering<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    claim: &NodeClaim,
    now: f64,
) {
    let st = &claim.status;
    if let (Some(t), Some(z)) = (&st.instance_type, &st.zone) {
        let key = OfferingKey {
            instance_type: t.clone(),
            zone: z.clone(),
            capacity_type: capstan_model::labels::CAPACITY_SPOT.into(),
        };
        cx.s.catalog
            .mark_unavailable(key, now + cx.config.unavailable_ttl);
    }
}

/// The `message_type` label of an interruption message (Karpenter's spellings).
fn message_type(ev: &InterruptionEvent) -> &'static str {
    match ev {
        InterruptionEvent::SpotInterruptionWarning { .. } => "spot_interrupted",
        InterruptionEvent::RebalanceRecommendation { .. } => "rebalance_recommendation",
        InterruptionEvent::ScheduledMaintenance { .. } => "scheduled_change",
        InterruptionEvent::StateChange { .. } => "state_change",
    }
}

/// Pre-launches replacements for an interrupted node and starts its drain, to finish before
/// `deadline`.
async fn replace<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
    claim: &NodeClaim,
    reason: Reason,
    deadline: f64,
) -> bool {
    if let Some(node) = claim.status.node_name.clone() {
        let types = instance_types(cx, now).await;
        let mut kept = std::mem::take(&mut cx.s.disruption_inputs);
        let d = kept.refresh(cx, &types);
        let input = d.input(&types, cx.config.epoch_unix + now);
        // The cloud takes the node: its replacement may start a warm instance.
        let warm = crate::catalog::warm_instances(cx, "replacing").await;
        let cmd = capstan_disrupt::interruption(input, &node, reason, deadline - now, &warm);
        cx.s.disruption_inputs = kept;
        if let Some(cmd) = cmd {
            for r in &cmd.replacements {
                launch_replacement(cx, reason, r, &types).await;
            }
        }
    }
    cx.begin_deletion(&claim.name, reason, Some(deadline)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_a_node_whose_nodepool_opts_in_has_its_rebalance_recommendation_weighed() {
        use crate::api::{Change, Meta, Object};
        use capstan_model::{Node, NodePool};
        use std::sync::Arc;
        let mut cache = crate::Cache::default();
        let mut put = |o: Object| {
            cache.apply(Change::Applied(
                Meta {
                    uid: "u".into(),
                    resource_version: "1".into(),
                },
                o,
            ))
        };
        for (name, opts_in) in [("eager", "true"), ("steady", "false")] {
            let obj: capstan_model::nodepool::NodePoolObject =
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                    "metadata": {"name": name, "annotations": {"capstan.dev/spot-rebalance": opts_in}},
                    "spec": {"template": {"spec": {"requirements": []}}},
                }))
                .unwrap();
            let pool = NodePool::compile_fail_closed(&obj).unwrap();
            assert_eq!(pool.spot_rebalance, opts_in == "true", "{name}");
            put(Object::NodePool(Arc::new(pool)));
        }
        for (node, pool) in [
            ("n-eager", Some("eager")),
            ("n-steady", Some("steady")),
            ("n-unknown-pool", Some("gone")),
            ("n-no-pool", None),
        ] {
            let mut n = Node {
                name: node.into(),
                ..Default::default()
            };
            if let Some(p) = pool {
                n.labels
                    .insert(capstan_model::labels::NODEPOOL.into(), p.into());
            }
            put(Object::Node(Arc::new(n)));
        }
        let cases = [
            ("n-eager", true),
            ("n-steady", false),
            ("n-unknown-pool", false),
            ("n-no-pool", false),
            ("n-missing", false),
        ];
        for (node, want) in cases {
            assert_eq!(opts_in_to_rebalance(&cache, node), want, "{node}");
        }
    }

    #[test]
    fn events_that_take_the_instance_give_its_deadline() {
        let pid = "fake://i-1".to_string();
        let cases = [
            (
                InterruptionEvent::SpotInterruptionWarning {
                    provider_id: pid.clone(),
                    reclaim_at: Duration::from_secs(220),
                    at: Duration::from_secs(100),
                },
                Some((Reason::SpotInterruption, 220.0)),
            ),
            (
                InterruptionEvent::StateChange {
                    provider_id: pid.clone(),
                    state: InstanceState::ShuttingDown,
                    at: Duration::from_secs(100),
                },
                Some((Reason::InstanceTerminated, 100.0)),
            ),
            (
                InterruptionEvent::StateChange {
                    provider_id: pid.clone(),
                    state: InstanceState::Running,
                    at: Duration::from_secs(100),
                },
                None,
            ),
            (
                InterruptionEvent::RebalanceRecommendation {
                    provider_id: pid,
                    at: Duration::from_secs(100),
                },
                None,
            ),
        ];
        for (ev, want) in cases {
            assert_eq!(reclaim(&ev, 100.0), want, "{ev:?}");
        }
    }
}
