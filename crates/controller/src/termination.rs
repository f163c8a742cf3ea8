//! Terminating a claim that is being deleted: taint its node, wait for its replacements if
//! the cloud is taking it and its notice leaves time, drain it (through the eviction
//! API, lowest priority first; forced once the NodePool's terminationGracePeriod has passed or
//! the cloud's deadline is near), delete the instance, then release the finalizers of the
//! node and the claim so both go.

use crate::Action;
use crate::api::{ApiError, ClusterApi, Kind, Write};
use crate::context::Ctx;
use capstan_cloud::{CloudError, CloudProvider};
use capstan_model::claim::TERMINATION_FINALIZER;
use capstan_model::disruption::Reason;
use capstan_model::{NodeClaim, Pod};
use std::sync::Arc;

/// Seconds before an interruption deadline (beyond the pods' grace periods) at which capstan
/// stops waiting for PDBs and deletes the pods left on the node.
pub const DEADLINE_MARGIN: f64 = 10.0;

/// How the drain takes pods off a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// Through the eviction API: PodDisruptionBudgets are honoured.
    Evict,
    /// Deleting the pods: the node goes now whatever the PDBs say.
    Force,
}

/// How a pod whose own grace period is `pod_grace` is drained from a claim whose deletion
/// began at `since`: forced once only its grace period is left of the NodePool's
/// terminationGracePeriod (`grace`) — as Karpenter deletes each pod early enough to run its
/// whole grace period (preStop hooks included) before the node goes — or when the cloud takes
/// the instance at `deadline` sooner than the node's longest pod grace period plus a margin
/// (as the kubelet's graceful node shutdown does, the pods still there are deleted in time
/// rather than killed).
pub fn drain_mode(
    now: f64,
    since: f64,
    grace: Option<f64>,
    deadline: Option<f64>,
    pod_grace: f64,
    longest_pod_grace: f64,
) -> Drain {
    let past_grace = grace.is_some_and(|g| now >= since + g - pod_grace);
    let deadline_near = deadline.is_some_and(|d| now >= d - longest_pod_grace - DEADLINE_MARGIN);
    if past_grace || deadline_near {
        Drain::Force
    } else {
        Drain::Evict
    }
}

/// Seconds of a cloud's notice kept for evictions PDBs pace, once a held drain of pods they
/// protect starts, on top of the pods' grace periods and [`DEADLINE_MARGIN`].
pub const EVICTION_SLACK: f64 = 30.0;

/// Whether the drain of a claim the cloud takes at `deadline` (an interruption, maintenance)
/// waits for the replacements launched when it came: while any claim created since is not
/// yet initialized and the notice leaves time to drain after (the longest pod grace period,
/// [`DEADLINE_MARGIN`], and `slack` for PDB-paced evictions). Karpenter drains at once, and
/// every pod waits a boot for its new node; held, they move onto nodes that are up. Never past
/// the time a drain needs: the node goes at the deadline either way.
pub fn hold_drain(
    now: f64,
    deadline: Option<f64>,
    longest_pod_grace: f64,
    slack: f64,
    replacements_booting: bool,
) -> bool {
    let Some(d) = deadline else {
        return false;
    };
    replacements_booting && now < d - longest_pod_grace - DEADLINE_MARGIN - slack
}

fn awaits_replacements(
    cache: &crate::cache::Cache,
    c: &NodeClaim,
    pods: &[Arc<Pod>],
    now: f64,
) -> bool {
    if !matches!(
        c.deletion_reason,
        Some(Reason::SpotInterruption | Reason::ScheduledMaintenance)
    ) {
        return false;
    }
    let Some(since) = c.deleted_at else {
        return false;
    };
    let longest = longest_grace(pods);
    let booting = cache.claims().any(|o| {
        o.name != c.name && !o.deleting() && o.created >= since - 1.0 && !o.status.initialized()
    });
    let protected = pods.iter().any(|p| cache.pdbs().any(|b| b.selects(p)));
    let slack = if protected { EVICTION_SLACK } else { 0.0 };
    hold_drain(now, c.deadline, longest, slack, booting)
}

/// The longest grace period among `pods`.
fn longest_grace(pods: &[Arc<Pod>]) -> f64 {
    pods.iter().map(|p| p.grace_seconds()).fold(0.0, f64::max)
}

/// The pods to drain, in order: lowest priority first, as kubectl drain and Karpenter do.
pub fn drain_order(mut pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
    pods.retain(|p| !p.deleting);
    pods.sort_by_key(|p| (p.priority, p.key()));
    pods
}

/// A pod past its deletion deadline by this long is stuck (its kubelet is gone, say): the
/// drain stops waiting for it, as Karpenter's does.
pub const STUCK_TERMINATING: f64 = 60.0;

/// Whether the instance waits for this pod to terminate: it is being deleted, not stuck, and
/// neither the NodePool's terminationGracePeriod (counted from `since`) nor the cloud's
/// `deadline` has passed. `wall` is Unix seconds, the rest clock seconds.
pub fn still_terminating(
    p: &Pod,
    wall: f64,
    now: f64,
    since: f64,
    grace: Option<f64>,
    deadline: Option<f64>,
) -> bool {
    p.deleting
        && p.deletion_deadline
            .is_none_or(|d| wall < d + STUCK_TERMINATING)
        && grace.is_none_or(|g| now - since < g)
        && deadline.is_none_or(|d| now < d)
}

pub(crate) async fn terminate<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
    c: &NodeClaim,
) {
    let node = cx.cache().node_of_claim(c).map(|n| n.name.clone());
    if let Some(node) = &node {
        cx.set_disrupted_taint(node, true).await;
        let on_node = cx.cache().workload_pods_on(node);
        let pods = drain_order(on_node.clone());
        if !pods.is_empty() && awaits_replacements(cx.cache(), c, &pods, now) {
            tracing::debug!(claim = %c.name, %node, "drain waits for replacements");
            return;
        }
        if !pods.is_empty() {
            drain(cx, now, c, pods).await;
            return;
        }
        // The evicted pods run out their grace periods (preStop hooks included) on the node:
        // the instance stays until they are gone.
        let grace = cx
            .cache()
            .nodepool(&c.nodepool)
            .and_then(|p| p.termination_grace_period_seconds)
            .map(|g| g as f64);
        let wall = cx.config.epoch_unix + now;
        let since = c.deleted_at.unwrap_or(now);
        if on_node
            .iter()
            .any(|p| still_terminating(p, wall, now, since, grace, c.deadline))
        {
            return;
        }
        // Then the volumes detach (their CSI drivers delete the VolumeAttachments), as in
        // Karpenter: all but those of pods that stay to the end (DaemonSet pods), unless the
        // terminationGracePeriod or the cloud's deadline ends the wait.
        let in_time = grace.is_none_or(|g| now - since < g) && c.deadline.is_none_or(|d| now < d);
        if in_time && attached(cx.cache(), node).next().is_some() {
            tracing::debug!(claim = %c.name, %node, "waiting for volumes to detach");
            return;
        }
    }
    if let Some(pid) = &c.status.provider_id {
        if !cx.may_act() {
            return;
        }
        match cx
            .cloud_call("nodeclaim.termination", "Delete", cx.cloud.delete(pid))
            .await
        {
            Ok(()) | Err(CloudError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(error = %e, claim = %c.name, "instance delete failed; retrying");
                return;
            }
        }
    }
    let started = c.deleted_at.unwrap_or(now);
    if let Some(node) = &node {
        let held = cx
            .cache()
            .node(node)
            .is_some_and(|n| n.finalizers.iter().any(|f| f == TERMINATION_FINALIZER));
        if !remove_node(cx, node).await {
            return;
        }
        if held {
            let m = &cx.s.metrics;
            m.nodes_terminated.with_label_values(&[&c.nodepool]).inc();
            m.nodes_termination
                .observe(&[&c.nodepool], now, (now - started).max(0.0));
        }
    }
    let held = c.finalizers.iter().any(|f| f == TERMINATION_FINALIZER);
    if !cx.release_finalizer(Kind::NodeClaim, &c.name).await {
        return;
    }
    // Counted once: when capstan's finalizer goes (another finalizer may hold the claim on).
    if held {
        let m = &cx.s.metrics;
        m.claims_terminated
            .with_label_values(&[
                &c.nodepool,
                c.status.capacity_type.as_deref().unwrap_or_default(),
                c.status.zone.as_deref().unwrap_or_default(),
            ])
            .inc();
        m.claims_termination
            .observe(&[&c.nodepool], now, (now - started).max(0.0));
    }
    cx.s.nominations.remove_claim(&c.name);
    cx.record(
        now,
        Action::Terminated {
            claim: c.name.clone(),
            reason: c.deletion_reason.unwrap_or(Reason::ClaimDeleted),
        },
    );
}

/// The VolumeAttachments of `node` the instance waits for: those of volumes no pod staying
/// on the node (a DaemonSet's, say) uses.
fn attached<'a>(
    cache: &'a crate::cache::Cache,
    node: &'a str,
) -> impl Iterator<Item = &'a capstan_model::volume::Attachment> {
    let staying: std::collections::BTreeSet<&str> = cache
        .pods_on(node)
        .flat_map(|p| {
            p.volume_claims
                .iter()
                .map(move |r| format!("{}/{}", p.namespace, r.claim))
        })
        .filter_map(|k| cache.volume_of_claim(&k))
        .collect();
    cache
        .attachments_on(node)
        .filter(move |a| a.volume.as_deref().is_none_or(|v| !staying.contains(v)))
}

async fn drain<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
    c: &NodeClaim,
    pods: Vec<Arc<Pod>>,
) {
    let grace = cx
        .cache()
        .nodepool(&c.nodepool)
        .and_then(|p| p.termination_grace_period_seconds)
        .map(|g| g as f64);
    let longest = longest_grace(&pods);
    let since = c.deleted_at.unwrap_or(now);
    let wall = cx.config.epoch_unix + now;
    for p in pods {
        let pod_grace = p.grace_seconds();
        let mode = drain_mode(now, since, grace, c.deadline, pod_grace, longest);
        // A do-not-disrupt pod is not evicted: only the terminationGracePeriod (or the cloud's
        // deadline) forces it, as in Karpenter; until then the node waits for it.
        if mode == Drain::Evict && p.do_not_disrupt(wall).is_some() {
            continue;
        }
        let key = p.key();
        let Some(meta) = cx.cache().pod_meta(&key).cloned() else {
            continue;
        };
        let w = match mode {
            Drain::Force => Write::Delete {
                kind: Kind::Pod,
                key,
                uid: meta.uid,
                rv: meta.resource_version,
            },
            Drain::Evict => Write::Evict {
                pod: key,
                uid: meta.uid,
            },
        };
        match cx.write(w).await {
            Ok(_) | Err(ApiError::TooManyRequests { .. }) | Err(ApiError::NotFound { .. }) => {}
            Err(_) if !cx.leading() => return,
            Err(_) => {}
        }
    }
}

/// Deletes a claim's node (its finalizer holds it) and releases the finalizer, so it goes.
async fn remove_node<A: ClusterApi, C: CloudProvider>(cx: &mut Ctx<'_, A, C>, node: &str) -> bool {
    let Some(n) = cx.cache().node(node).cloned() else {
        return true;
    };
    if !n.deleting {
        let Some(meta) = cx.cache().node_meta(node).cloned() else {
            return true;
        };
        let w = Write::Delete {
            kind: Kind::Node,
            key: node.into(),
            uid: meta.uid,
            rv: meta.resource_version,
        };
        match cx.write(w).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(_) => return false,
        }
    }
    if cx.cache().node(node).is_none() {
        return true;
    }
    if !n.finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        return true;
    }
    cx.release_finalizer(Kind::Node, node).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_waits_for_evicted_pods_to_terminate_unless_stuck_or_out_of_time() {
        let pod = |deleting: bool, deadline: Option<f64>| Pod {
            deleting,
            deletion_deadline: deadline,
            ..Default::default()
        };
        // (pod, wall, now, since, grace, cloud deadline, waits)
        let cases = [
            (
                "running",
                pod(false, None),
                1000.0,
                100.0,
                0.0,
                None,
                None,
                false,
            ),
            (
                "in its grace period",
                pod(true, Some(1005.0)),
                1000.0,
                100.0,
                0.0,
                None,
                None,
                true,
            ),
            (
                "just past it",
                pod(true, Some(1005.0)),
                1030.0,
                100.0,
                0.0,
                None,
                None,
                true,
            ),
            (
                "stuck",
                pod(true, Some(1005.0)),
                1066.0,
                100.0,
                0.0,
                None,
                None,
                false,
            ),
            (
                "no deadline known",
                pod(true, None),
                9999.0,
                100.0,
                0.0,
                None,
                None,
                true,
            ),
            (
                "past terminationGracePeriod",
                pod(true, Some(1005.0)),
                1000.0,
                100.0,
                0.0,
                Some(60.0),
                None,
                false,
            ),
            (
                "within terminationGracePeriod",
                pod(true, Some(1005.0)),
                1000.0,
                100.0,
                0.0,
                Some(600.0),
                None,
                true,
            ),
            (
                "past the cloud's deadline",
                pod(true, Some(1005.0)),
                1000.0,
                100.0,
                0.0,
                None,
                Some(90.0),
                false,
            ),
        ];
        for (case, p, wall, now, since, grace, deadline, want) in cases {
            assert_eq!(
                still_terminating(&p, wall, now, since, grace, deadline),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn the_drain_is_forced_past_the_grace_period_or_near_the_clouds_deadline() {
        // (now, since, grace, deadline, the pod's grace, longest pod grace, expected)
        let cases = [
            (100.0, 0.0, None, None, 30.0, 30.0, Drain::Evict),
            (100.0, 0.0, Some(3600.0), None, 30.0, 30.0, Drain::Evict),
            (3600.0, 0.0, Some(3600.0), None, 30.0, 30.0, Drain::Force),
            // A pod of 300 s grace is deleted 300 s before the terminationGracePeriod ends, so
            // it runs its whole grace period; a pod of 30 s waits for PDBs until 30 s before.
            (3299.0, 0.0, Some(3600.0), None, 300.0, 300.0, Drain::Evict),
            (3300.0, 0.0, Some(3600.0), None, 300.0, 300.0, Drain::Force),
            (3300.0, 0.0, Some(3600.0), None, 30.0, 300.0, Drain::Evict),
            (3570.0, 0.0, Some(3600.0), None, 30.0, 300.0, Drain::Force),
            // Reclaimed at 200: pods need 30 s, plus the 10 s margin.
            (159.0, 80.0, None, Some(200.0), 30.0, 30.0, Drain::Evict),
            (160.0, 80.0, None, Some(200.0), 5.0, 30.0, Drain::Force),
            (250.0, 80.0, None, Some(200.0), 0.0, 0.0, Drain::Force),
        ];
        for (now, since, grace, deadline, pod, longest, want) in cases {
            assert_eq!(
                drain_mode(now, since, grace, deadline, pod, longest),
                want,
                "{now} {since} {grace:?} {deadline:?} {pod} {longest}"
            );
        }
    }

    #[test]
    fn an_interrupted_nodes_drain_waits_for_its_booting_replacements_only_while_the_notice_leaves_time_to_drain()
     {
        // Notice at 0, the cloud takes the instance at 120; the longest pod grace is 30, so
        // the drain must start by 120 - 30 - DEADLINE_MARGIN = 80, and by 50 when PDBs pace
        // it (EVICTION_SLACK).
        // (now, deadline, longest pod grace, slack, replacements booting, holds)
        let cases = [
            (0.0, Some(120.0), 30.0, EVICTION_SLACK, true, true),
            (49.0, Some(120.0), 30.0, EVICTION_SLACK, true, true),
            (50.0, Some(120.0), 30.0, EVICTION_SLACK, true, false),
            (79.0, Some(120.0), 30.0, 0.0, true, true),
            (80.0, Some(120.0), 30.0, 0.0, true, false),
            (0.0, Some(120.0), 30.0, EVICTION_SLACK, false, false),
            (0.0, Some(120.0), 90.0, EVICTION_SLACK, true, false),
            (0.0, None, 30.0, 0.0, true, false),
        ];
        for (now, deadline, longest, slack, booting, want) in cases {
            assert_eq!(
                hold_drain(now, deadline, longest, slack, booting),
                want,
                "{now} {deadline:?} {longest} {slack} {booting}"
            );
        }
    }

    #[test]
    fn pods_drain_lowest_priority_first_and_terminating_pods_are_left_alone() {
        let pod = |name: &str, priority: i32, deleting: bool| {
            Arc::new(Pod {
                namespace: "default".into(),
                name: name.into(),
                priority,
                deleting,
                ..Default::default()
            })
        };
        let order = drain_order(vec![
            pod("db", 1000, false),
            pod("batch", -10, false),
            pod("web", 0, false),
            pod("old", 0, true),
        ]);
        let names: Vec<&str> = order.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["batch", "web", "db"]);
    }
}
