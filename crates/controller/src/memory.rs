//! An in-memory Kubernetes API server: objects with uids and resourceVersions, a bounded watch
//! history per kind, preconditioned writes, finalizers, the eviction subresource with PDB
//! checks, Events and the Lease. The simulator and the controller's own tests run against it.
//!
//! Like a real API server it does not know who leads: it never refuses a write for coming
//! from a deposed leader. It can count such writes ([`ApiStats::non_holder_writes`]), and in
//! strict mode ([`InMemoryApi::set_strict_fencing`]) refuse them, as an extra assertion in
//! tests; capstan itself relies only on client-side fencing and preconditions.

mod store;

use crate::api::{
    ApiError, Changes, ClusterApi, ClusterEvent, Kind, Lease, Listing, Meta, Object, Write, Written,
};
use capstan_cloud::Clock;
use capstan_model::{NodeClaim, Pod};
use std::sync::{Arc, Mutex, MutexGuard};
use store::Store;

/// How many changes each kind's watch history keeps; older watches get [`ApiError::Gone`].
const HISTORY: usize = 100_000;
/// How many Events are kept for inspection.
const EVENTS_KEPT: usize = 10_000;

/// Why a pod left the API through a write of capstan's.
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
    /// Writes refused because their resourceVersion or uid precondition failed.
    pub conflicts: u64,
    /// Writes that came from a process not holding the lease when they arrived.
    pub non_holder_writes: u64,
    /// Of those, how many strict mode refused.
    pub refused_non_holder: u64,
    pub evictions: u64,
    pub evictions_refused: u64,
    pub events: u64,
}

/// The in-memory API server. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct InMemoryApi {
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
}

/// One process's connection to the [`InMemoryApi`]: it implements [`ClusterApi`], and the
/// server knows its identity (as a real one knows the client's credentials).
#[derive(Clone)]
pub struct ApiClient {
    server: InMemoryApi,
    identity: String,
}

impl InMemoryApi {
    pub fn new(clock: Arc<dyn Clock>) -> InMemoryApi {
        InMemoryApi {
            store: Arc::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().expect("api store")
    }

    fn now(&self) -> f64 {
        self.clock.now().as_secs_f64()
    }

    /// A client for the process `identity`.
    pub fn client(&self, identity: &str) -> ApiClient {
        ApiClient {
            server: self.clone(),
            identity: identity.to_string(),
        }
    }

    /// Refuse (rather than only count) writes from processes that do not hold the lease.
    pub fn set_strict_fencing(&self, strict: bool) {
        self.lock().strict = strict;
    }

    /// Writes an object as the cluster's other actors do (kubelet, kube-scheduler,
    /// ReplicaSet controller): unconditionally. Returns its new meta.
    pub fn put(&self, object: Object) -> Meta {
        let now = self.now();
        let mut st = self.lock();
        let object = match object {
            Object::NodeClaim(c)
                if c.created == 0.0
                    && !st.objects.contains_key(&(Kind::NodeClaim, c.name.clone())) =>
            {
                let mut c = NodeClaim::clone(&c);
                c.created = now;
                Object::NodeClaim(Arc::new(c))
            }
            o => o,
        };
        st.put(object)
    }

    /// Removes an object at once, whatever its finalizers (a forced removal).
    pub fn remove(&self, kind: Kind, key: &str) -> Option<Object> {
        self.lock().remove(kind, key)
    }

    pub fn get(&self, kind: Kind, key: &str) -> Option<Object> {
        self.lock()
            .objects
            .get(&(kind, key.to_string()))
            .map(|(_, o)| o.clone())
    }

    pub fn meta(&self, kind: Kind, key: &str) -> Option<Meta> {
        self.lock()
            .objects
            .get(&(kind, key.to_string()))
            .map(|(m, _)| m.clone())
    }

    /// Every object of a kind, in key order.
    pub fn all(&self, kind: Kind) -> Vec<Object> {
        let st = self.lock();
        st.objects
            .range((kind, String::new())..)
            .take_while(|((k, _), _)| *k == kind)
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

    /// Each PodDisruptionBudget selecting `pod` (`namespace/name`), with the disruptions it
    /// allows now.
    pub fn pdb_allowances(&self, pod: &Pod) -> Vec<(String, i64)> {
        self.lock().pdb_allowances(pod)
    }

    /// Whether a PDB would refuse to let `pod` go now.
    pub fn pdb_blocks(&self, pod: &Pod) -> bool {
        self.lock().blocking_pdb(pod).is_some()
    }

    /// The Events published (the newest [`EVENTS_KEPT`]), with the clock seconds of each.
    pub fn events(&self) -> Vec<(f64, ClusterEvent)> {
        self.lock().events.iter().cloned().collect()
    }
}

impl ClusterApi for ApiClient {
    async fn list(&self, kind: Kind) -> Result<Listing, ApiError> {
        let st = self.server.lock();
        Ok(Listing {
            resource_version: st.rv.to_string(),
            objects: st
                .objects
                .range((kind, String::new())..)
                .take_while(|((k, _), _)| *k == kind)
                .map(|(_, (m, o))| (m.clone(), o.clone()))
                .collect(),
        })
    }

    async fn watch(&self, kind: Kind, since: &str) -> Result<Changes, ApiError> {
        let st = self.server.lock();
        let from: u64 = since.parse().map_err(|_| ApiError::Invalid {
            target: kind.plural().into(),
            message: format!("resourceVersion {since:?} is not one this server issued"),
        })?;
        let Some(h) = st.history.get(&kind) else {
            return Ok(Changes {
                changes: Vec::new(),
                resource_version: st.rv.max(from).to_string(),
            });
        };
        if from < h.compacted {
            return Err(ApiError::Gone {
                kind,
                since: since.to_string(),
            });
        }
        let skip = h.changes.partition_point(|(rv, _)| *rv <= from);
        Ok(Changes {
            changes: h
                .changes
                .iter()
                .skip(skip)
                .map(|(_, c)| c.clone())
                .collect(),
            resource_version: st.rv.max(from).to_string(),
        })
    }

    async fn write(&self, write: Write) -> Result<Written, ApiError> {
        let now = self.server.now();
        let mut st = self.server.lock();
        st.check_writer(&self.identity, &write)?;
        st.apply(now, write)
    }

    async fn get_lease(&self) -> Result<Option<(String, Lease)>, ApiError> {
        Ok(self
            .server
            .lock()
            .lease
            .as_ref()
            .map(|(rv, l)| (rv.to_string(), l.clone())))
    }
}

#[cfg(test)]
mod tests;
