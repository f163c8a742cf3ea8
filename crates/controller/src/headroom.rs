//! Headroom: each NodePool that asks for spare capacity (annotation `capstan.dev/headroom`)
//! keeps that many placeholder pods in capstan's namespace — `capstan-headroom-<pool>-<i>`,
//! at the `capstan-headroom` PriorityClass, on the pool's nodes. kube-scheduler preempts a
//! placeholder the moment a real pod needs its room; the placeholder is gone, this loop
//! creates it again, it goes pending, and the provisioner launches capacity for it like for
//! any pod. Consolidation sees placeholders as pods that need a place, so the room is kept.
//! A pool's placeholders spread over its zones (`maxSkew: 1` on the zone label, counting that
//! pool's placeholders): a zone-spread workload can only grow in the zones its spread allows,
//! so room that sits in one zone serves a step of it no better than no room.

use crate::api::{ApiError, ClusterApi, Kind, Write};
use crate::context::Ctx;
use capstan_cloud::CloudProvider;
use capstan_model::headroom::{Amount, LABEL, PRIORITY};
use capstan_model::pod::{InclusionPolicy, TopologySpread, WhenUnsatisfiable};
use capstan_model::requirements::Requirement;
use capstan_model::selector::LabelSelector;
use capstan_model::taints::Toleration;
use capstan_model::{NodePool, Pod, labels};
use std::collections::{BTreeMap, BTreeSet};

/// A placeholder's name: `capstan-headroom-<pool>-<i>`.
pub fn placeholder_name(pool: &str, i: u32) -> String {
    format!("capstan-headroom-{pool}-{i}")
}

/// The placeholder pod `i` of a NodePool.
pub fn placeholder(pool: &NodePool, namespace: &str, i: u32) -> Option<Pod> {
    let h = pool.headroom.as_ref()?;
    let mut p = Pod {
        name: placeholder_name(&pool.name, i),
        namespace: namespace.to_string(),
        requests: h.requests.clone(),
        priority: PRIORITY,
        never_preempts: true,
        termination_grace_seconds: Some(0),
        ..Default::default()
    };
    p.uid = p.key();
    p.labels.insert(LABEL.into(), pool.name.clone());
    p.node_selector.add(Requirement::in_values(
        labels::NODEPOOL,
        [pool.name.as_str()],
    ));
    for t in &pool.taints {
        p.tolerations
            .push(Toleration::exists(&t.key, Some(t.effect)));
    }
    p.spread.push(TopologySpread {
        max_skew: 1,
        topology_key: labels::ZONE.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: Some(LabelSelector::from_match_labels(&p.labels)),
        min_domains: None,
        node_affinity_policy: InclusionPolicy::Honor,
        node_taints_policy: InclusionPolicy::Ignore,
    });
    Some(p)
}

#[derive(Debug, Default)]
pub(crate) struct Headroom {
    /// Placeholders this term has seen or made, by key, with their NodePool.
    known: BTreeMap<String, String>,
    /// Whether this term has looked over every pod for placeholders an earlier one left.
    swept: bool,
}

impl Headroom {
    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        _now: f64,
    ) {
        let namespace = cx.config.headroom_namespace.clone();
        if !self.swept {
            self.swept = true;
            for p in cx.cache().pods() {
                if let Some(pool) = p.labels.get(LABEL) {
                    self.known.insert(p.key(), pool.clone());
                }
            }
        }
        let pools: Vec<std::sync::Arc<NodePool>> = cx
            .cache()
            .nodepools()
            .filter(|p| p.headroom.is_some() && !p.deleting && p.replicas.is_none())
            .cloned()
            .collect();
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for pool in &pools {
            let n = count(cx, pool);
            for i in 0..n {
                let Some(p) = placeholder(pool, &namespace, i) else {
                    continue;
                };
                let key = p.key();
                wanted.insert(key.clone());
                if let Some(existing) = cx.cache().pod(&key) {
                    // A placeholder of an earlier shape (the annotation or the pool's taints
                    // changed, or an older capstan made it) goes; the next pass makes it
                    // again as asked. A pod's requests cannot change in place.
                    if !existing.deleting && !same_shape(existing, &p) {
                        tracing::info!(pool = %pool.name, pod = %key, "headroom placeholder of an earlier shape replaced");
                        delete(cx, &key).await;
                    }
                    continue;
                }
                match cx.write(Write::CreatePod(Box::new(p))).await {
                    Ok(_) | Err(ApiError::AlreadyExists { .. }) => {
                        self.known.insert(key, pool.name.clone());
                    }
                    Err(e) => {
                        tracing::warn!(pool = %pool.name, error = %e, "headroom placeholder not created");
                        cx.warn_once(
                            (Kind::NodePool, pool.name.clone()),
                            "HeadroomNotCreated",
                            format!("headroom placeholder {key} not created: {e}"),
                        )
                        .await;
                        break;
                    }
                }
            }
        }
        // Placeholders no NodePool wants any more (fewer asked for, annotation gone).
        let extra: Vec<String> = self
            .known
            .keys()
            .filter(|k| !wanted.contains(*k))
            .cloned()
            .collect();
        for key in extra {
            if cx.cache().pod_meta(&key).is_none() && cx.cache().pod(&key).is_none() {
                self.known.remove(&key);
                continue;
            }
            if delete(cx, &key).await {
                self.known.remove(&key);
            }
        }
    }
}

/// Deletes a placeholder; whether it is gone or going.
async fn delete<A: ClusterApi, C: CloudProvider>(cx: &mut Ctx<'_, A, C>, key: &str) -> bool {
    let Some(meta) = cx.cache().pod_meta(key).cloned() else {
        return false;
    };
    let w = Write::Delete {
        kind: Kind::Pod,
        key: key.to_string(),
        uid: meta.uid,
        rv: meta.resource_version,
    };
    match cx.write(w).await {
        Ok(_) | Err(ApiError::NotFound { .. }) => true,
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "headroom placeholder not deleted");
            false
        }
    }
}

/// Whether a placeholder that exists is the one wanted now: the requests the annotation
/// sets, the pool's node selector, its taints tolerated, the spread. Admission may add to a
/// pod (default tolerations, a LimitRange's requests): what it adds is not a difference, so
/// a resource the annotation no longer names is not one either.
fn same_shape(existing: &Pod, wanted: &Pod) -> bool {
    wanted
        .requests
        .iter()
        .all(|(name, v)| v <= 0 || existing.requests.get(name) == v)
        && existing.node_selector == wanted.node_selector
        && wanted
            .tolerations
            .iter()
            .all(|t| existing.tolerations.contains(t))
        && existing.spread == wanted.spread
}

/// How many placeholders a NodePool wants now.
fn count<A: ClusterApi, C: CloudProvider>(cx: &Ctx<'_, A, C>, pool: &NodePool) -> u32 {
    let Some(h) = &pool.headroom else {
        return 0;
    };
    match h.amount {
        Amount::Pods(n) => n,
        Amount::PercentOfCpu(_) => {
            // The CPU the pool's pods request, placeholders aside.
            let cache = cx.cache();
            let mut cpu = 0;
            for n in cache.nodes() {
                if n.labels.get(labels::NODEPOOL) != Some(&pool.name) {
                    continue;
                }
                cpu += cache.used_on(&n.name).map_or(0, |u| u.cpu);
                for p in cache.pods_on(&n.name) {
                    if p.labels.contains_key(LABEL) && p.is_active() {
                        cpu -= p.requests.cpu;
                    }
                }
            }
            h.placeholders(cpu)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(annotation: &str, taint: bool) -> NodePool {
        let mut spec = serde_json::json!({"template": {"spec": {"requirements": []}}});
        if taint {
            spec["template"]["spec"]["taints"] =
                serde_json::json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        }
        let obj: capstan_model::nodepool::NodePoolObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "annotations": {"capstan.dev/headroom": annotation}},
            "spec": spec,
        }))
        .unwrap();
        NodePool::compile_fail_closed(&obj).unwrap()
    }

    #[test]
    fn a_placeholder_runs_below_every_pod_on_its_pools_nodes_tolerating_their_taints() {
        let p = placeholder(&pool("count=2,cpu=1,memory=1Gi", true), "capstan", 1).unwrap();
        assert_eq!(p.key(), "capstan/capstan-headroom-general-1");
        assert_eq!((p.priority, p.never_preempts), (PRIORITY, true));
        assert_eq!((p.requests.cpu, p.requests.memory), (1000, 1 << 30));
        assert!(p.node_selector.allows(labels::NODEPOOL, "general"));
        assert!(!p.node_selector.allows(labels::NODEPOOL, "other"));
        assert_eq!(p.tolerations.len(), 1);
        assert_eq!(p.labels.get(LABEL).map(String::as_str), Some("general"));
        // Spread over the pool's zones, counting its own placeholders only.
        assert_eq!(p.spread.len(), 1);
        let s = &p.spread[0];
        assert_eq!((s.max_skew, s.topology_key.as_str()), (1, labels::ZONE));
        assert_eq!(s.when_unsatisfiable, WhenUnsatisfiable::DoNotSchedule);
        let sel = s.selector.as_ref().unwrap();
        assert!(sel.matches(&p.labels));
        let other: BTreeMap<String, String> = [(LABEL.to_string(), "other".to_string())].into();
        assert!(!sel.matches(&other));
        // Above the expendable cutoff: capstan provisions for it.
        assert!(p.priority > crate::Config::default().expendable_priority_cutoff);
    }

    #[test]
    fn a_pool_whose_headroom_does_not_parse_keeps_none_and_says_why() {
        let p = pool("count=lots,cpu=1", false);
        assert!(p.headroom.is_none());
        assert!(placeholder(&p, "capstan", 0).is_none());
        assert!(
            p.unsupported
                .iter()
                .any(|u| u.contains("capstan.dev/headroom") && u.contains("no headroom")),
            "{:?}",
            p.unsupported
        );
    }
}
