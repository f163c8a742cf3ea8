//! An in-memory Kubernetes API: objects with resourceVersions, a watch history, conditional
//! writes, the eviction API with PDB checks, and a lease with write fencing.

use capstan_controller::api::{ApiError, ClusterApi, Event, Fence, Kind, Lease, Listing, Object};
use capstan_model::Pod;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many changes the watch history keeps; older watches get [`ApiError::Gone`].
const HISTORY: usize = 200_000;

/// Why a pod left the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Through the eviction API.
    Evicted,
    /// Deleted by capstan directly (a forced drain).
    DeletedByController,
}

/// Counters the simulator reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiStats {
    pub writes: u64,
    pub conflicts: u64,
    pub fenced_writes: u64,
    pub evictions: u64,
    pub evictions_refused: u64,
}

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<(Kind, String), (u64, Object)>,
    history: VecDeque<Event>,
    lease: Option<(u64, Lease)>,
    stats: ApiStats,
    /// Pods capstan removed since the simulator last looked, and how.
    removed: Vec<(Arc<Pod>, Removal)>,
    /// Pods indexed by namespace and `app` label, for PDB checks.
    by_app: BTreeMap<(String, String), std::collections::BTreeSet<String>>,
}

impl Store {
    fn bump(&mut self, kind: Kind, key: String, object: Option<Object>) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        self.history.push_back(Event {
            rv,
            kind,
            key,
            object,
        });
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        rv
    }

    fn index(&mut self, p: &Pod, add: bool) {
        let app = p.labels.get("app").cloned().unwrap_or_default();
        let k = (p.namespace.clone(), app);
        if add {
            self.by_app.entry(k).or_default().insert(p.key());
        } else if let Some(s) = self.by_app.get_mut(&k) {
            s.remove(&p.key());
        }
    }

    fn put(&mut self, object: Object) -> u64 {
        let kind = object.kind();
        let key = object.key();
        if let Object::Pod(p) = &object {
            if let Some((_, Object::Pod(old))) = self.objects.get(&(kind, key.clone())) {
                let old = old.clone();
                self.index(&old, false);
            }
            self.index(p, true);
        }
        let rv = self.bump(kind, key.clone(), Some(object.clone()));
        self.objects.insert((kind, key), (rv, object));
        rv
    }

    fn remove(&mut self, kind: Kind, key: &str) -> Option<Object> {
        let (_, o) = self.objects.remove(&(kind, key.to_string()))?;
        if let Object::Pod(p) = &o {
            let p = p.clone();
            self.index(&p, false);
        }
        self.bump(kind, key.to_string(), None);
        Some(o)
    }

    fn check_fence(&mut self, fence: &Fence) -> Result<(), ApiError> {
        self.stats.writes += 1;
        match &self.lease {
            Some((_, l)) if l.holder != fence.holder || l.term != fence.term => {
                self.stats.fenced_writes += 1;
                Err(ApiError::Fenced {
                    holder: l.holder.clone(),
                    term: l.term,
                })
            }
            _ => Ok(()),
        }
    }

    /// The pods a PDB-like check looks at for `pod`: its namespace and `app`.
    fn peers(&self, pod: &Pod) -> Vec<Arc<Pod>> {
        let app = pod.labels.get("app").cloned().unwrap_or_default();
        self.by_app
            .get(&(pod.namespace.clone(), app))
            .into_iter()
            .flatten()
            .filter_map(|k| match self.objects.get(&(Kind::Pod, k.clone())) {
                Some((_, Object::Pod(p))) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// The name of a PDB that allows no disruption of `pod`, if any.
    fn blocking_pdb(&self, pod: &Pod) -> Option<String> {
        let peers = self.peers(pod);
        let refs: Vec<&Pod> = peers.iter().map(|p| &**p).collect();
        self.objects
            .range((Kind::Pdb, String::new())..(Kind::DaemonSet, String::new()))
            .filter_map(|(_, (_, o))| match o {
                Object::Pdb(p) => Some(p),
                _ => None,
            })
            .filter(|pdb| pdb.selects(pod))
            .find(|pdb| {
                // Peers outside the selector do not matter: `allowed` filters by it.
                pdb.allowed(&refs) <= 0
            })
            .map(|pdb| pdb.key())
    }
}

/// The in-memory API server. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct InMemoryApi {
    store: Arc<Mutex<Store>>,
}

impl InMemoryApi {
    pub fn new() -> InMemoryApi {
        InMemoryApi::default()
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().expect("api store")
    }

    /// Writes an object as the cluster's other actors do (kubelet, kube-scheduler,
    /// ReplicaSet controller): unconditionally and unfenced.
    pub fn put(&self, object: Object) -> u64 {
        self.lock().put(object)
    }

    pub fn remove(&self, kind: Kind, key: &str) -> Option<Object> {
        self.lock().remove(kind, key)
    }

    pub fn get(&self, kind: Kind, key: &str) -> Option<Object> {
        self.lock()
            .objects
            .get(&(kind, key.to_string()))
            .map(|(_, o)| o.clone())
    }

    /// Every object of a kind, in key order.
    pub fn all(&self, kind: Kind) -> Vec<Object> {
        let st = self.lock();
        st.objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, (_, o))| o.clone())
            .collect()
    }

    pub fn pod(&self, key: &str) -> Option<Arc<Pod>> {
        match self.get(Kind::Pod, key) {
            Some(Object::Pod(p)) => Some(p),
            _ => None,
        }
    }

    pub fn stats(&self) -> ApiStats {
        self.lock().stats.clone()
    }

    pub fn lease(&self) -> Option<Lease> {
        self.lock().lease.as_ref().map(|(_, l)| l.clone())
    }

    /// Pods capstan removed (evicted or deleted) since the last call.
    pub fn take_removed(&self) -> Vec<(Arc<Pod>, Removal)> {
        std::mem::take(&mut self.lock().removed)
    }

    /// Whether a PDB would refuse to let `pod` go now.
    pub fn pdb_blocks(&self, pod: &Pod) -> bool {
        self.lock().blocking_pdb(pod).is_some()
    }
}

impl ClusterApi for InMemoryApi {
    async fn list(&self) -> Result<Listing, ApiError> {
        let st = self.lock();
        Ok(Listing {
            rv: st.rv,
            objects: st
                .objects
                .values()
                .map(|(rv, o)| (*rv, o.clone()))
                .collect(),
        })
    }

    async fn watch(&self, since: u64) -> Result<Vec<Event>, ApiError> {
        let st = self.lock();
        let oldest = st.history.front().map(|e| e.rv).unwrap_or(st.rv + 1);
        if since + 1 < oldest && since < st.rv {
            return Err(ApiError::Gone { since });
        }
        // History is in rv order: skip what the caller has.
        let skip = st.history.partition_point(|e| e.rv <= since);
        Ok(st.history.iter().skip(skip).cloned().collect())
    }

    async fn create(&self, object: Object, fence: &Fence) -> Result<u64, ApiError> {
        let mut st = self.lock();
        st.check_fence(fence)?;
        let (kind, key) = (object.kind(), object.key());
        if st.objects.contains_key(&(kind, key.clone())) {
            return Err(ApiError::AlreadyExists { kind, key });
        }
        Ok(st.put(object))
    }

    async fn replace(&self, object: Object, rv: u64, fence: &Fence) -> Result<u64, ApiError> {
        let mut st = self.lock();
        st.check_fence(fence)?;
        let (kind, key) = (object.kind(), object.key());
        match st.objects.get(&(kind, key.clone())) {
            None => Err(ApiError::NotFound { kind, key }),
            Some((cur, _)) if *cur != rv => {
                st.stats.conflicts += 1;
                Err(ApiError::Conflict {
                    kind,
                    key,
                    expected: rv,
                })
            }
            Some(_) => Ok(st.put(object)),
        }
    }

    async fn delete(&self, kind: Kind, key: &str, rv: u64, fence: &Fence) -> Result<(), ApiError> {
        let mut st = self.lock();
        st.check_fence(fence)?;
        match st.objects.get(&(kind, key.to_string())) {
            None => Err(ApiError::NotFound {
                kind,
                key: key.to_string(),
            }),
            Some((cur, _)) if *cur != rv => {
                st.stats.conflicts += 1;
                Err(ApiError::Conflict {
                    kind,
                    key: key.to_string(),
                    expected: rv,
                })
            }
            Some(_) => {
                if let Some(Object::Pod(p)) = st.remove(kind, key) {
                    st.removed.push((p, Removal::DeletedByController));
                }
                Ok(())
            }
        }
    }

    async fn evict(&self, pod: &str, fence: &Fence) -> Result<(), ApiError> {
        let mut st = self.lock();
        st.check_fence(fence)?;
        let p = match st.objects.get(&(Kind::Pod, pod.to_string())) {
            Some((_, Object::Pod(p))) => p.clone(),
            _ => {
                return Err(ApiError::NotFound {
                    kind: Kind::Pod,
                    key: pod.to_string(),
                });
            }
        };
        if let Some(pdb) = st.blocking_pdb(&p) {
            st.stats.evictions_refused += 1;
            return Err(ApiError::TooManyRequests {
                pod: pod.to_string(),
                pdb,
            });
        }
        st.stats.evictions += 1;
        st.remove(Kind::Pod, pod);
        st.removed.push((p, Removal::Evicted));
        Ok(())
    }

    async fn get_lease(&self) -> Result<Option<(u64, Lease)>, ApiError> {
        Ok(self.lock().lease.clone())
    }

    async fn put_lease(&self, lease: Lease, rv: Option<u64>) -> Result<u64, ApiError> {
        let mut st = self.lock();
        let current = st.lease.as_ref().map(|(v, _)| *v);
        if current != rv {
            st.stats.conflicts += 1;
            return Err(ApiError::Conflict {
                kind: Kind::Node,
                key: capstan_controller::api::LEASE_NAME.into(),
                expected: rv.unwrap_or(0),
            });
        }
        st.rv += 1;
        let new = st.rv;
        st.lease = Some((new, lease));
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::Node;

    fn fence(holder: &str, term: u64) -> Fence {
        Fence {
            holder: holder.into(),
            term,
        }
    }

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn lease(holder: &str, term: u64) -> Lease {
        Lease {
            holder: holder.into(),
            renewed_at: 0.0,
            duration_seconds: 15.0,
            term,
        }
    }

    #[test]
    fn a_write_with_a_stale_resource_version_conflicts() {
        block(async {
            let api = InMemoryApi::new();
            let f = fence("a", 1);
            api.put_lease(lease("a", 1), None).await.unwrap();
            let node = Node {
                name: "n1".into(),
                ..Default::default()
            };
            let rv = api.create(Object::Node(node.clone()), &f).await.unwrap();
            api.replace(Object::Node(node.clone()), rv, &f)
                .await
                .unwrap();
            let err = api.replace(Object::Node(node), rv, &f).await.unwrap_err();
            assert!(matches!(err, ApiError::Conflict { .. }), "{err}");
        });
    }

    #[test]
    fn a_deposed_leaders_writes_are_fenced() {
        block(async {
            let api = InMemoryApi::new();
            let rv = api.put_lease(lease("a", 1), None).await.unwrap();
            api.put_lease(lease("b", 2), Some(rv)).await.unwrap();
            let node = Node {
                name: "n1".into(),
                ..Default::default()
            };
            let err = api
                .create(Object::Node(node.clone()), &fence("a", 1))
                .await
                .unwrap_err();
            assert!(matches!(err, ApiError::Fenced { .. }), "{err}");
            api.create(Object::Node(node), &fence("b", 2))
                .await
                .unwrap();
            assert_eq!(api.stats().fenced_writes, 1);
        });
    }

    #[test]
    fn a_watch_returns_the_changes_after_its_resource_version() {
        block(async {
            let api = InMemoryApi::new();
            let a = api.put(Object::Node(Node {
                name: "a".into(),
                ..Default::default()
            }));
            api.put(Object::Node(Node {
                name: "b".into(),
                ..Default::default()
            }));
            let evs = api.watch(a).await.unwrap();
            assert_eq!(
                evs.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
                ["b"]
            );
        });
    }
}
