//! The controller's view of the cluster: a reflector fed by list and watch, with the indexes
//! the loops ask for (pods by node, pending pods, nodes by provider id).

use crate::api::{ApiError, ClusterApi, Event, Kind, NodeClaim, Object};
use capstan_model::pdb::Pdb;
use capstan_model::{Node, NodePool, Pod};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct Cache {
    /// The resourceVersion the cache has seen up to; `None` before the first list.
    pub rv: Option<u64>,
    pub pods: BTreeMap<String, (u64, Arc<Pod>)>,
    pub nodes: BTreeMap<String, (u64, Arc<Node>)>,
    pub claims: BTreeMap<String, (u64, NodeClaim)>,
    pub nodepools: BTreeMap<String, (u64, NodePool)>,
    pub pdbs: BTreeMap<String, (u64, Pdb)>,
    pub daemonsets: BTreeMap<String, (u64, Pod)>,
    /// Node name → the active pods bound to it, by key.
    pub pods_on: BTreeMap<String, BTreeMap<String, Arc<Pod>>>,
    /// Node name → the summed requests of the active pods bound to it.
    pub used_on: BTreeMap<String, capstan_model::Resources>,
    /// Names of nodes that active pods are bound to but that are not in the cache (deleted
    /// under their pods, or not seen yet).
    pub dangling: BTreeSet<String>,
    /// How many pods in the cache have required pod anti-affinity (they repel others, so
    /// planners must see every bound pod while there are any).
    pub repelling: usize,
    /// Keys of pending pods (unbound, active, not DaemonSet pods).
    pub pending: BTreeSet<String>,
    /// Provider id → node name.
    pub node_by_provider: BTreeMap<String, String>,
    /// Bumped by every change to nodes, claims, NodePools, PDBs or DaemonSets.
    pub generation: u64,
    /// Bumped by every change to a pod.
    pub pod_generation: u64,
    /// Bumped whenever a pod leaves a node (capacity freed).
    pub freed: u64,
    /// Bumped by every change to a node.
    pub node_generation: u64,
}

impl Cache {
    /// Brings the cache up to date: a watch from the last resourceVersion, or a fresh list
    /// the first time and whenever the watch has expired.
    pub async fn sync<A: ClusterApi>(&mut self, api: &A) -> Result<(), ApiError> {
        if let Some(rv) = self.rv {
            match api.watch(rv).await {
                Ok(events) => {
                    for e in events {
                        self.apply(e);
                    }
                    return Ok(());
                }
                Err(ApiError::Gone { .. }) => {
                    tracing::info!(rv, "watch expired; listing again");
                }
                Err(e) => return Err(e),
            }
        }
        let listing = api.list().await?;
        // The counters stay monotonic across a relist: loops compare them with what they saw.
        let counters = (
            self.generation,
            self.pod_generation,
            self.freed,
            self.node_generation,
        );
        *self = Cache::default();
        (
            self.generation,
            self.pod_generation,
            self.freed,
            self.node_generation,
        ) = counters;
        for (rv, o) in listing.objects {
            self.put(rv, o);
        }
        self.rv = Some(listing.rv);
        self.generation += 1;
        self.pod_generation += 1;
        self.freed += 1;
        self.node_generation += 1;
        Ok(())
    }

    pub fn apply(&mut self, e: Event) {
        self.rv = Some(self.rv.unwrap_or(0).max(e.rv));
        match e.object {
            Some(o) => self.put(e.rv, o),
            None => self.remove(e.kind, &e.key),
        }
    }

    fn put(&mut self, rv: u64, o: Object) {
        let key = o.key();
        match o {
            Object::Pod(p) => {
                self.unindex_pod(&key);
                self.index_pod(&key, &p);
                self.repelling += !p.anti_affinity.is_empty() as usize;
                if let Some((_, old)) = self.pods.insert(key, (rv, p)) {
                    self.repelling -= !old.anti_affinity.is_empty() as usize;
                }
                self.pod_generation += 1;
            }
            Object::Node(n) => {
                if let Some((_, old)) = self.nodes.get(&key) {
                    if let Some(pid) = &old.provider_id {
                        self.node_by_provider.remove(pid);
                    }
                }
                if let Some(pid) = &n.provider_id {
                    self.node_by_provider.insert(pid.clone(), key.clone());
                }
                self.dangling.remove(&key);
                self.nodes.insert(key, (rv, Arc::new(n)));
                self.generation += 1;
                self.node_generation += 1;
            }
            Object::NodeClaim(c) => {
                self.claims.insert(key, (rv, c));
                self.generation += 1;
            }
            Object::NodePool(p) => {
                self.nodepools.insert(key, (rv, p));
                self.generation += 1;
            }
            Object::Pdb(p) => {
                self.pdbs.insert(key, (rv, p));
                self.generation += 1;
            }
            Object::DaemonSet(p) => {
                self.daemonsets.insert(key, (rv, p));
                self.generation += 1;
            }
        }
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        if kind == Kind::Pod {
            self.pod_generation += 1;
        } else {
            self.generation += 1;
        }
        match kind {
            Kind::Pod => {
                self.unindex_pod(key);
                if let Some((_, old)) = self.pods.remove(key) {
                    self.repelling -= !old.anti_affinity.is_empty() as usize;
                }
            }
            Kind::Node => {
                self.node_generation += 1;
                if self.pods_on.contains_key(key) {
                    self.dangling.insert(key.to_string());
                }
                if let Some((_, n)) = self.nodes.remove(key) {
                    if let Some(pid) = &n.provider_id {
                        self.node_by_provider.remove(pid);
                    }
                }
            }
            Kind::NodeClaim => {
                self.claims.remove(key);
            }
            Kind::NodePool => {
                self.nodepools.remove(key);
            }
            Kind::Pdb => {
                self.pdbs.remove(key);
            }
            Kind::DaemonSet => {
                self.daemonsets.remove(key);
            }
        }
    }

    fn index_pod(&mut self, key: &str, p: &Arc<Pod>) {
        if !p.is_active() || p.is_daemonset_pod() && p.node_name.is_none() {
            return;
        }
        match &p.node_name {
            Some(n) => {
                if !self.nodes.contains_key(n) {
                    self.dangling.insert(n.clone());
                }
                self.pods_on
                    .entry(n.clone())
                    .or_default()
                    .insert(key.to_string(), p.clone());
                self.used_on.entry(n.clone()).or_default().add(&p.requests);
            }
            None if !p.is_daemonset_pod() => {
                self.pending.insert(key.to_string());
            }
            None => {}
        }
    }

    fn unindex_pod(&mut self, key: &str) {
        if let Some((_, old)) = self.pods.get(key) {
            if let Some(n) = &old.node_name {
                self.freed += 1;
                if let Some(set) = self.pods_on.get_mut(n) {
                    if set.remove(key).is_some() {
                        if let Some(u) = self.used_on.get_mut(n) {
                            u.sub(&old.requests);
                        }
                    }
                    if set.is_empty() {
                        self.pods_on.remove(n);
                        self.used_on.remove(n);
                        self.dangling.remove(n);
                    }
                }
            }
        }
        self.pending.remove(key);
    }

    /// Pods bound to `node` that are not DaemonSet pods.
    pub fn workload_pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods_on
            .get(node)
            .into_iter()
            .flat_map(|set| set.values())
            .filter(|p| !p.is_daemonset_pod())
            .cloned()
            .collect()
    }

    /// The claim a node belongs to (by provider id).
    pub fn claim_of_node(&self, node: &Node) -> Option<&NodeClaim> {
        let pid = node.provider_id.as_ref()?;
        self.claims
            .values()
            .map(|(_, c)| c)
            .find(|c| c.status.provider_id.as_ref() == Some(pid))
    }

    pub fn nodepool_list(&self) -> Vec<NodePool> {
        self.nodepools.values().map(|(_, p)| p.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::pod::PodPhase;

    fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            namespace: "default".into(),
            name: name.into(),
            node_name: node.map(str::to_string),
            phase: if node.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            ..Default::default()
        })
    }

    fn ev(rv: u64, o: Object) -> Event {
        Event {
            rv,
            kind: o.kind(),
            key: o.key(),
            object: Some(o),
        }
    }

    #[test]
    fn binding_a_pod_moves_it_from_pending_to_its_node() {
        let mut c = Cache::default();
        c.apply(ev(1, Object::Pod(pod("a", None))));
        assert!(c.pending.contains("default/a"));
        c.apply(ev(2, Object::Pod(pod("a", Some("n1")))));
        assert!(c.pending.is_empty());
        assert_eq!(c.workload_pods_on("n1").len(), 1);
        c.apply(Event {
            rv: 3,
            kind: Kind::Pod,
            key: "default/a".into(),
            object: None,
        });
        assert!(c.workload_pods_on("n1").is_empty());
        assert_eq!(c.rv, Some(3));
    }

    #[test]
    fn a_node_with_pods_bound_to_it_is_dangling_while_it_is_missing() {
        let mut c = Cache::default();
        let gone = |key: &str| Event {
            rv: 0,
            kind: if key.contains('/') {
                Kind::Pod
            } else {
                Kind::Node
            },
            key: key.into(),
            object: None,
        };
        c.apply(ev(1, Object::Pod(pod("a", Some("n1")))));
        assert!(c.dangling.contains("n1"), "bound before the node is seen");
        let node = capstan_model::convert::Node {
            name: "n1".into(),
            ..Default::default()
        };
        c.apply(ev(2, Object::Node(node.clone())));
        assert!(c.dangling.is_empty());
        c.apply(gone("n1"));
        assert!(c.dangling.contains("n1"), "deleted under its pod");
        c.apply(gone("default/a"));
        assert!(c.dangling.is_empty(), "its last pod left");
        c.apply(ev(3, Object::Node(node)));
        assert!(
            c.dangling.is_empty(),
            "a node without pods is never dangling"
        );
    }

    #[test]
    fn pods_with_anti_affinity_are_counted_as_they_come_change_and_go() {
        let mut c = Cache::default();
        let repelling = |name: &str, anti: bool| {
            let mut p = Pod::clone(&pod(name, Some("n1")));
            if anti {
                p.anti_affinity.push(capstan_model::pod::PodAffinityTerm {
                    selector: None,
                    namespaces: capstan_model::pod::Namespaces::All,
                    topology_key: "kubernetes.io/hostname".into(),
                });
            }
            Object::Pod(Arc::new(p))
        };
        c.apply(ev(1, repelling("a", true)));
        c.apply(ev(2, repelling("b", false)));
        assert_eq!(c.repelling, 1);
        c.apply(ev(3, repelling("a", true)));
        assert_eq!(c.repelling, 1, "an update of the same pod counts once");
        c.apply(ev(4, repelling("a", false)));
        assert_eq!(c.repelling, 0);
        c.apply(ev(5, repelling("b", true)));
        c.apply(Event {
            rv: 6,
            kind: Kind::Pod,
            key: "default/b".into(),
            object: None,
        });
        assert_eq!(c.repelling, 0);
    }
}
