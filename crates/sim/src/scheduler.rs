//! kube-scheduler: binds pending pods to ready nodes that have room, with the scheduling
//! core's predicates. Like kube-scheduler's unschedulable queue, a pod that did not fit waits
//! until capacity changes (a node added or changed, a pod leaving a node) or a minute passes,
//! and is marked `PodScheduled=False` (`Unschedulable`): only then does capstan see it.

use crate::Sim;
use capstan_controller::api::Object;
use capstan_model::pod::{DEFAULT_SCHEDULER, PodPhase};
use capstan_model::{Pod, Resources};
use capstan_sched::{SnapshotBuilder, SolveInput, SolveOptions};
use std::sync::Arc;

impl Sim {
    pub(crate) fn schedule(&mut self, now: f64) {
        if self.view.pending().is_empty() {
            return;
        }
        let counters = self.view.counters();
        let capacity = (counters.node_generation, counters.freed);
        if capacity != self.capacity_seen || now - self.last_flush >= 60.0 {
            self.capacity_seen = capacity;
            self.last_flush = now;
            self.unschedulable.clear();
        }
        let pending: Vec<Arc<Pod>> = self
            .view
            .pending()
            .iter()
            .filter(|k| !self.unschedulable.contains(*k))
            .filter_map(|k| self.view.pod(k))
            .filter(|p| !p.scheduling_gated && p.scheduler() == DEFAULT_SCHEDULER)
            .cloned()
            .collect();
        if pending.is_empty() {
            return;
        }
        let mut b = SnapshotBuilder::new(&pending, self.view.repelling() > 0);
        let none = Resources::new();
        for node in self.view.nodes() {
            if !node.ready {
                continue;
            }
            let used = self.view.used_on(&node.name).unwrap_or(&none);
            b.node(node, None, self.view.pods_on(&node.name), used);
        }
        let snapshot = b.build();
        if snapshot.nodes.is_empty() {
            for p in &pending {
                self.unschedulable.insert(p.key());
                self.mark_unschedulable(p);
            }
            return;
        }
        let plan = capstan_sched::solve(
            SolveInput {
                snapshot: &snapshot,
                pending: &pending,
                nodepools: &[],
                instance_types: &[],
            },
            &SolveOptions {
                skip_diagnosis: true,
                ..Default::default()
            },
        );
        for u in &plan.unschedulable {
            self.unschedulable.insert(pending[u.pod].key());
            self.mark_unschedulable(&pending[u.pod]);
        }
        for b in plan.existing {
            for i in b.pods {
                let mut p = Pod::clone(&pending[i]);
                p.node_name = Some(b.node.clone());
                p.phase = PodPhase::Running;
                p.unschedulable = false;
                let key = p.key();
                if let Some(&w) = self.pods.get(&key) {
                    let m = &mut self.members[w];
                    if let Some(t) = m.pods.get_mut(&key).filter(|t| t.bound.is_none()) {
                        t.bound = Some(now);
                        m.version += 1;
                        let startup = self.workloads[w].spec.startup_seconds;
                        t.ready_at = Some(now + startup);
                        self.pending_durations.push(now - t.created);
                        self.becoming_ready
                            .insert(((now + startup).ceil() as u64, key.clone()));
                    }
                }
                self.api.put(Object::Pod(Arc::new(p)));
            }
        }
    }

    /// Sets `PodScheduled=False` (`Unschedulable`) on a pod that did not fit, as kube-scheduler
    /// does; capstan provisions only for such pods.
    fn mark_unschedulable(&self, pod: &Pod) {
        if !pod.unschedulable {
            let mut p = pod.clone();
            p.unschedulable = true;
            self.api.put(Object::Pod(Arc::new(p)));
        }
    }
}
