//! Provisioning: batch pending pods (a window that closes after `batch_idle` without new
//! pods, or at `batch_max`), plan them with the packer (or the scheduling core), create the
//! NodeClaims, and nominate the pods onto them until their nodes are up. Pods that fit
//! nowhere get an Event saying why.

use crate::api::{ClusterApi, Kind};
use crate::catalog::instance_types;
use crate::context::Ctx;
use crate::{Action, Planner};
use capstan_cloud::CloudProvider;
use capstan_model::{InstanceType, Pod, labels};
use capstan_sched::{InFlight, Snapshot, SnapshotBuilder, SolveInput};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The batch window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    start: Option<f64>,
    last_change: f64,
    seen: usize,
}

impl Batch {
    /// Whether to plan now, with `pending` pods waiting: once no new pod arrived for `idle`
    /// seconds, or once the batch is `max` seconds old. Planning closes the window.
    pub fn due(&mut self, now: f64, pending: usize, idle: f64, max: f64) -> bool {
        if pending == 0 {
            self.start = None;
            return false;
        }
        match self.start {
            None => {
                self.start = Some(now);
                self.last_change = now;
                self.seen = pending;
            }
            Some(_) if pending != self.seen => {
                self.last_change = now;
                self.seen = pending;
            }
            _ => {}
        }
        let start = self.start.unwrap_or(now);
        if now - self.last_change < idle && now - start < max {
            return false;
        }
        self.start = None;
        true
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Provisioner {
    batch: Batch,
}

impl Provisioner {
    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) {
        // Nominations end when their claim is gone, or once its node is up.
        let cache = &cx.s.cache;
        let live: BTreeSet<String> = cache
            .claims()
            .filter(|c| !c.deleting() && !c.status.initialized())
            .map(|c| c.name.clone())
            .collect();
        cx.s.nominations
            .retain(|pod, claim| live.contains(claim) && cache.pending().contains(pod));
        let pending_keys: Vec<String> = cache
            .pending()
            .iter()
            .filter(|k| !cx.s.nominations.contains_key(*k))
            .cloned()
            .collect();
        let (idle, max) = (cx.config.batch_idle, cx.config.batch_max);
        if !self.batch.due(now, pending_keys.len(), idle, max) {
            return;
        }
        let types = instance_types(cx, now).await;
        // NodePools the provider cannot launch for get nothing (their Ready condition says why).
        let mut pools = cx.s.cache.nodepool_list();
        pools.retain(|p| cx.s.catalog.failed(&p.name).is_none());
        if pools.is_empty() {
            return;
        }
        let pending: Vec<Arc<Pod>> = pending_keys
            .iter()
            .filter_map(|k| cx.cache().pod(k).cloned())
            .collect();
        let planning = cx.clock.now();
        let snapshot = snapshot(cx, &types, &pending);
        let input = SolveInput {
            snapshot: &snapshot,
            pending: &pending,
            nodepools: &pools,
            instance_types: &types,
        };
        let plan = match cx.config.planner {
            Planner::Sched => capstan_sched::solve(input, &Default::default()),
            Planner::Pack => match capstan_pack::pack(input, &Default::default()) {
                Ok(r) => r.plan,
                Err(e) => {
                    tracing::warn!(error = %e, "packer failed; using the scheduling core");
                    capstan_sched::solve(input, &Default::default())
                }
            },
        };
        let plan_seconds = (cx.clock.now().saturating_sub(planning)).as_secs_f64();
        let inflight: BTreeSet<&str> = snapshot.inflight.iter().map(|f| f.name.as_str()).collect();
        let mut nominate: Vec<(String, String)> = Vec::new();
        for b in &plan.existing {
            if inflight.contains(b.node.as_str()) {
                for &i in &b.pods {
                    nominate.push((pending[i].key(), b.node.clone()));
                }
            }
        }
        let mut created = 0;
        for nc in &plan.new_claims {
            let Some(pool) = pools.iter().find(|p| p.name == nc.nodepool) else {
                continue;
            };
            let names: Vec<String> = nc
                .instance_types
                .iter()
                .filter_map(|&t| types.get(t))
                .map(|t| t.name.clone())
                .collect();
            let claim = cx
                .create_claim(pool, nc.requirements.clone(), names, nc.requests.clone())
                .await;
            if let Some(name) = claim {
                created += 1;
                for &i in &nc.pods {
                    nominate.push((pending[i].key(), name.clone()));
                }
            }
        }
        cx.s.nominations.extend(nominate);
        for u in &plan.unschedulable {
            let pod = pending[u.pod].key();
            cx.warn_once((Kind::Pod, pod), "FailedScheduling", u.reason.clone())
                .await;
        }
        tracing::info!(
            pods = pending.len(),
            claims = created,
            unschedulable = plan.unschedulable.len(),
            plan_ms = plan_seconds * 1000.0,
            "provisioned"
        );
        cx.record(
            now,
            Action::Provisioned {
                claims: created,
                pods: pending.len(),
                unschedulable: plan.unschedulable.len(),
                plan_seconds,
            },
        );
    }
}

/// What the planner sees: nodes with their bound pods (summarized when nothing pending looks
/// at other pods), in-flight claims with the pods nominated to them, DaemonSets.
fn snapshot<A: ClusterApi, C: CloudProvider>(
    cx: &Ctx<'_, A, C>,
    types: &[InstanceType],
    pending: &[Arc<Pod>],
) -> Snapshot {
    let cache = cx.cache();
    let mut b = SnapshotBuilder::new(pending, cache.repelling() > 0);
    b.daemonsets(cache.daemonsets().map(|p| Pod::clone(p)));
    let none = capstan_model::Resources::new();
    for n in cache.nodes() {
        let pool = n.labels.get(labels::NODEPOOL).map(String::as_str);
        b.node(
            n,
            pool,
            cache.pods_on(&n.name),
            cache.used_on(&n.name).unwrap_or(&none),
        );
    }
    for c in cache.claims() {
        if let Some(slot) = InFlight::of_claim(c, types) {
            b.inflight(slot);
        }
    }
    for (pod, claim) in &cx.s.nominations {
        if let Some(p) = cache.pod(pod) {
            b.nominated(claim, p);
        }
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_closes_after_an_idle_second_or_at_its_maximum_age() {
        // (now, pending, due) with idle 1 s and max 10 s.
        let cases = [
            (0.0, 3, false),
            (0.5, 3, false),
            (1.0, 3, true),
            (2.0, 0, false),
            (3.0, 1, false),
            (3.5, 2, false),
            (4.0, 3, false),
            (4.5, 4, false),
            (5.0, 5, false),
            (13.0, 6, true),
        ];
        let mut b = Batch::default();
        for (now, pending, want) in cases {
            assert_eq!(
                b.due(now, pending, 1.0, 10.0),
                want,
                "at {now} with {pending}"
            );
        }
    }
}
