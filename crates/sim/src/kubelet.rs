//! The kubelets: an instance that boots registers its node (with the unregistered taint and
//! its claim's taints), DaemonSet pods start on it, and its agents lift the startup taints a
//! few seconds later; an instance that stops takes its node and pods with it.

use crate::Sim;
use capstan_cloud::InstanceState;
use capstan_controller::api::{Kind, Object};
use capstan_model::labels::UNREGISTERED_TAINT;
use capstan_model::pod::PodPhase;
use capstan_model::taints::Effect;
use capstan_model::time::format_rfc3339;
use capstan_model::{Node, Pod, Taint};
use std::sync::Arc;

/// Seconds between the kubelet registering a node and its agents removing startup taints.
const STARTUP_TAINT_SECONDS: f64 = 5.0;

impl Sim {
    pub(crate) async fn kubelet(&mut self, now: f64) {
        for tr in self.cloud.inner.take_transitions() {
            match tr.state {
                InstanceState::Running => self.register(now, &tr.provider_id),
                InstanceState::Terminated | InstanceState::ShuttingDown => {
                    let node = self
                        .view
                        .node_by_provider(&tr.provider_id)
                        .map(str::to_string);
                    if let Some(node) = node {
                        self.kill_node(now, &node, "instance terminated");
                    }
                }
                InstanceState::Pending => {}
            }
        }
        let due: Vec<String> = self
            .startup_taints
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for n in due {
            self.startup_taints.remove(&n);
            if let Some(Object::Node(node)) = self.api.get(Kind::Node, &n) {
                let startup: Vec<String> = self
                    .view
                    .claim_of_node(&node)
                    .map(|c| c.startup_taints.iter().map(|t| t.key.clone()).collect())
                    .unwrap_or_default();
                let mut node = Node::clone(&node);
                node.taints.retain(|t| !startup.contains(&t.key));
                self.api.put(Object::Node(Arc::new(node)));
            }
        }
    }

    fn register(&mut self, now: f64, provider_id: &str) {
        let Some(inst) = self.cloud.inner.peek(provider_id) else {
            return;
        };
        let Some(t) = self.types.iter().find(|t| t.name == inst.instance_type) else {
            return;
        };
        let name = format!("node-{}", provider_id.trim_start_matches("fake://"));
        let mut node =
            Node::for_instance_type(t, &name, &inst.zone, &inst.capacity_type, &inst.nodepool);
        for (k, v) in inst.labels.iter() {
            node.labels.entry(k.clone()).or_insert(v.clone());
        }
        node.provider_id = Some(provider_id.to_string());
        node.created = Some(format_rfc3339(self.sc.start_unix + now));
        node.taints.push(Taint {
            key: UNREGISTERED_TAINT.into(),
            value: String::new(),
            effect: Effect::NoExecute,
        });
        // The kubelet registers with the taints its NodeClaim asked for.
        if let Some(c) = self.view.claim(&inst.claim_name).cloned() {
            node.taints.extend(c.taints.iter().cloned());
            node.taints.extend(c.startup_taints.iter().cloned());
            if !c.startup_taints.is_empty() {
                self.startup_taints
                    .insert(name.clone(), now + STARTUP_TAINT_SECONDS);
            }
        }
        self.api.put(Object::Node(Arc::new(node)));
        // DaemonSet pods start on every node.
        let daemonsets: Vec<Arc<Pod>> = self.view.daemonsets().cloned().collect();
        for ds in daemonsets {
            let mut p = Pod::clone(&ds);
            p.name = format!("{}-{name}", ds.name);
            p.node_name = Some(name.clone());
            p.phase = PodPhase::Running;
            self.api.put(Object::Pod(Arc::new(p)));
        }
        self.event(
            now,
            "node",
            format!(
                "{name} registered ({} {} {})",
                inst.instance_type, inst.zone, inst.capacity_type
            ),
        );
    }

    /// A node is gone (its instance stopped, or its object was deleted): the pods on it die.
    pub(crate) fn kill_node(&mut self, now: f64, node: &str, why: &str) {
        let pods: Vec<Arc<Pod>> = self.view.pods_on(node).cloned().collect();
        let mut lost = 0;
        for p in pods {
            self.api.remove(Kind::Pod, &p.key());
            // Placeholders hold room, not work: they are made again.
            if !p.is_daemonset_pod() && !crate::forecast::is_placeholder(&p) {
                lost += 1;
                self.forget_pod(&p.key());
            }
        }
        if lost > 0 {
            self.summary.pods_lost += lost;
            self.event(now, "lost", format!("{lost} pods died with {node} ({why})"));
        }
        self.api.remove(Kind::Node, node);
    }
}
