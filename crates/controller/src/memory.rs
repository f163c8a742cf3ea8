//! An in-memory Kubernetes API server: objects with uids and resourceVersions, a bounded watch
//! history per kind, preconditioned writes, finalizers, the eviction subresource with PDB
//! checks, Events and the Lease. The simulator and the controller's own tests run against it.
//!
//! Like a real API server it does not know who leads: it never refuses a write for coming
//! from a deposed leader. It can count such writes ([`ApiStats::non_holder_writes`]), and in
//! strict mode ([`InMemoryApi::set_strict_fencing`]) refuse them, as an extra assertion in
//! tests; capstan itself relies only on client-side fencing and preconditions.

use crate::api::{
    ApiError, Change, Changes, ClusterApi, ClusterEvent, Kind, LEASE_NAME, Lease, Listing, Meta,
    MetaPatch, Object, TaintChange, Write, Written,
};
use capstan_cloud::Clock;
use capstan_model::labels::normalize_key;
use capstan_model::{Node, NodeClaim, Pod};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

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

#[derive(Default)]
struct History {
    changes: VecDeque<(u64, Change)>,
    /// Changes up to this resourceVersion have been dropped.
    compacted: u64,
}

#[derive(Default)]
struct Store {
    rv: u64,
    uids: u64,
    objects: BTreeMap<(Kind, String), (Meta, Object)>,
    history: BTreeMap<Kind, History>,
    lease: Option<(u64, Lease)>,
    stats: ApiStats,
    strict: bool,
    /// Pods capstan removed since the simulator last looked, and how.
    removed: Vec<(Arc<Pod>, Removal)>,
    /// Pods indexed by namespace and `app` label, for PDB checks.
    by_app: BTreeMap<(String, String), BTreeSet<String>>,
    events: VecDeque<(f64, ClusterEvent)>,
}

fn target(kind: Kind, key: &str) -> String {
    format!("{}/{key}", kind.plural())
}

impl Store {
    fn bump(&mut self, change: Change) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        let h = self.history.entry(change.kind()).or_default();
        h.changes.push_back((rv, change));
        if h.changes.len() > HISTORY {
            if let Some((old, _)) = h.changes.pop_front() {
                h.compacted = old;
            }
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

    /// Stores an object (creating or replacing it), keeping the uid of what it replaces;
    /// returns what the server holds.
    fn store(&mut self, object: Object) -> Written {
        let (meta, object) = self.put_object(object);
        Written::Object(meta, object)
    }

    fn put(&mut self, object: Object) -> Meta {
        self.put_object(object).0
    }

    fn put_object(&mut self, object: Object) -> (Meta, Object) {
        let kind = object.kind();
        let key = object.key();
        let old = self.objects.get(&(kind, key.clone()));
        let uid = match old {
            Some((m, _)) => m.uid.clone(),
            None => {
                self.uids += 1;
                format!("{:08x}-{:04x}", self.uids, kind as u8)
            }
        };
        let object = match object {
            // The server assigns a claim its uid; the object carries it.
            Object::NodeClaim(c) if c.uid != uid => {
                let mut c = NodeClaim::clone(&c);
                c.uid = uid.clone();
                Object::NodeClaim(Arc::new(c))
            }
            o => o,
        };
        if let Object::Pod(p) = &object {
            if let Some((_, Object::Pod(old))) = old {
                let old = old.clone();
                self.index(&old, false);
            }
            self.index(p, true);
        }
        let rv = self.bump(Change::Applied(
            Meta {
                uid: uid.clone(),
                resource_version: String::new(),
            },
            object.clone(),
        ));
        let meta = Meta {
            uid,
            resource_version: rv.to_string(),
        };
        // The history entry carries the final meta too.
        if let Some((_, Change::Applied(m, _))) = self
            .history
            .get_mut(&kind)
            .and_then(|h| h.changes.back_mut())
        {
            *m = meta.clone();
        }
        self.objects
            .insert((kind, key), (meta.clone(), object.clone()));
        (meta, object)
    }

    fn remove(&mut self, kind: Kind, key: &str) -> Option<Object> {
        let (_, o) = self.objects.remove(&(kind, key.to_string()))?;
        if let Object::Pod(p) = &o {
            let p = p.clone();
            self.index(&p, false);
        }
        self.bump(Change::Deleted(kind, key.to_string()));
        Some(o)
    }

    fn conflict(&mut self, kind: Kind, key: &str, message: String) -> ApiError {
        self.stats.conflicts += 1;
        ApiError::Conflict {
            target: target(kind, key),
            message,
        }
    }

    /// The object at `key` if its resourceVersion (and uid, when given) still match.
    fn current(
        &mut self,
        kind: Kind,
        key: &str,
        rv: &str,
        uid: Option<&str>,
    ) -> Result<Object, ApiError> {
        let Some((meta, o)) = self.objects.get(&(kind, key.to_string())) else {
            return Err(ApiError::NotFound {
                target: target(kind, key),
            });
        };
        let (meta, o) = (meta.clone(), o.clone());
        if let Some(uid) = uid {
            if !uid.is_empty() && uid != meta.uid {
                return Err(self.conflict(
                    kind,
                    key,
                    format!("uid precondition {uid} does not match {}", meta.uid),
                ));
            }
        }
        if !rv.is_empty() && rv != meta.resource_version {
            return Err(self.conflict(
                kind,
                key,
                format!(
                    "resourceVersion {rv} is stale (now {})",
                    meta.resource_version
                ),
            ));
        }
        Ok(o)
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
            .find(|pdb| pdb.allowed(&refs) <= 0)
            .map(|pdb| pdb.key())
    }

    fn check_writer(&mut self, identity: &str, write: &Write) -> Result<(), ApiError> {
        self.stats.writes += 1;
        if matches!(write, Write::CreateLease(_) | Write::UpdateLease { .. }) {
            return Ok(());
        }
        let holder = self.lease.as_ref().map(|(_, l)| l.holder.as_str());
        if holder.is_some_and(|h| h != identity) {
            self.stats.non_holder_writes += 1;
            if self.strict {
                self.stats.refused_non_holder += 1;
                return Err(ApiError::Forbidden {
                    target: write.target(),
                    message: format!("{identity} does not hold the lease"),
                });
            }
        }
        Ok(())
    }

    fn apply(&mut self, now: f64, write: Write) -> Result<Written, ApiError> {
        match write {
            Write::CreateClaim(c) => {
                let mut c = *c;
                if self
                    .objects
                    .contains_key(&(Kind::NodeClaim, c.name.clone()))
                {
                    return Err(ApiError::AlreadyExists {
                        target: target(Kind::NodeClaim, &c.name),
                    });
                }
                c.created = now;
                c.deleted_at = None;
                Ok(self.store(Object::NodeClaim(Arc::new(c))))
            }
            Write::MarkClaim {
                name,
                rv,
                reason,
                deadline,
            } => {
                let Object::NodeClaim(c) = self.current(Kind::NodeClaim, &name, &rv, None)? else {
                    unreachable!("claims are stored as claims")
                };
                let mut c = NodeClaim::clone(&c);
                c.deletion_reason = Some(reason);
                c.deadline = deadline;
                Ok(self.store(Object::NodeClaim(Arc::new(c))))
            }
            Write::ClaimStatus { name, rv, status } => {
                let Object::NodeClaim(c) = self.current(Kind::NodeClaim, &name, &rv, None)? else {
                    unreachable!("claims are stored as claims")
                };
                let mut c = NodeClaim::clone(&c);
                c.status = *status;
                Ok(self.store(Object::NodeClaim(Arc::new(c))))
            }
            Write::Meta {
                kind,
                name,
                rv,
                patch,
            } => {
                let o = self.current(kind, &name, &rv, None)?;
                let (done, object) = match o {
                    Object::Node(n) => {
                        let mut n = Node::clone(&n);
                        patch_node(&mut n, &patch);
                        (
                            n.deleting && n.finalizers.is_empty(),
                            Object::Node(Arc::new(n)),
                        )
                    }
                    Object::NodeClaim(c) => {
                        let c = patch_claim(&c, &patch);
                        (
                            c.deleting() && c.finalizers.is_empty(),
                            Object::NodeClaim(Arc::new(c)),
                        )
                    }
                    _ => {
                        return Err(ApiError::Invalid {
                            target: target(kind, &name),
                            message: "capstan patches only nodes and nodeclaims".into(),
                        });
                    }
                };
                if done {
                    // The last finalizer of a terminating object is gone: so is the object.
                    self.remove(kind, &name);
                    return Ok(Written::Removed);
                }
                Ok(self.store(object))
            }
            Write::Taint {
                node,
                rv,
                current,
                change,
            } => {
                let Object::Node(n) = self.current(Kind::Node, &node, &rv, None)? else {
                    unreachable!("nodes are stored as nodes")
                };
                debug_assert_eq!(n.taints, current, "taints as read at {rv}");
                let mut n = Node::clone(&n);
                match change {
                    TaintChange::Add(t) => {
                        if !n
                            .taints
                            .iter()
                            .any(|x| x.key == t.key && x.effect == t.effect)
                        {
                            n.taints.push(t);
                        }
                    }
                    TaintChange::Remove(key) => n.taints.retain(|t| t.key != key),
                }
                Ok(self.store(Object::Node(Arc::new(n))))
            }
            Write::Delete { kind, key, uid, rv } => {
                let o = self.current(kind, &key, &rv, Some(&uid))?;
                let held = match &o {
                    Object::Node(n) if !n.finalizers.is_empty() => {
                        let mut n = Node::clone(n);
                        n.deleting = true;
                        Some(Object::Node(Arc::new(n)))
                    }
                    Object::NodeClaim(c) if !c.finalizers.is_empty() => {
                        let mut c = NodeClaim::clone(c);
                        c.deleted_at.get_or_insert(now);
                        Some(Object::NodeClaim(Arc::new(c)))
                    }
                    _ => None,
                };
                match held {
                    Some(o) => Ok(self.store(o)),
                    None => {
                        if let Some(Object::Pod(p)) = self.remove(kind, &key) {
                            self.removed.push((p, Removal::DeletedByController));
                        }
                        Ok(Written::Removed)
                    }
                }
            }
            Write::Evict { pod, uid } => {
                let p = match self.current(Kind::Pod, &pod, "", Some(&uid))? {
                    Object::Pod(p) => p,
                    _ => unreachable!("pods are stored as pods"),
                };
                if let Some(pdb) = self.blocking_pdb(&p) {
                    self.stats.evictions_refused += 1;
                    return Err(ApiError::TooManyRequests {
                        pod,
                        message: format!(
                            "Cannot evict pod as it would violate the pod's disruption budget {pdb}"
                        ),
                    });
                }
                self.stats.evictions += 1;
                self.remove(Kind::Pod, &pod);
                self.removed.push((p, Removal::Evicted));
                Ok(Written::Done)
            }
            Write::Event(e) => {
                self.stats.events += 1;
                self.events.push_back((now, e));
                if self.events.len() > EVENTS_KEPT {
                    self.events.pop_front();
                }
                Ok(Written::Done)
            }
            Write::CreateLease(lease) => {
                if self.lease.is_some() {
                    return Err(ApiError::AlreadyExists {
                        target: format!("leases/{LEASE_NAME}"),
                    });
                }
                self.rv += 1;
                self.lease = Some((self.rv, lease));
                Ok(Written::Lease(self.rv.to_string()))
            }
            Write::UpdateLease { lease, rv } => {
                let current = self.lease.as_ref().map(|(v, _)| v.to_string());
                if current.as_deref() != Some(rv.as_str()) {
                    self.stats.conflicts += 1;
                    return Err(ApiError::Conflict {
                        target: format!("leases/{LEASE_NAME}"),
                        message: format!("resourceVersion {rv} is stale"),
                    });
                }
                self.rv += 1;
                self.lease = Some((self.rv, lease));
                Ok(Written::Lease(self.rv.to_string()))
            }
        }
    }
}

fn apply_map(
    map: &mut BTreeMap<String, String>,
    patch: &BTreeMap<String, Option<String>>,
    normalize: bool,
) {
    for (k, v) in patch {
        let k = if normalize {
            normalize_key(k).into_owned()
        } else {
            k.clone()
        };
        match v {
            Some(v) => {
                map.insert(k, v.clone());
            }
            None => {
                map.remove(&k);
            }
        }
    }
}

fn patch_node(n: &mut Node, patch: &MetaPatch) {
    apply_map(&mut n.labels, &patch.labels, true);
    apply_map(&mut n.annotations, &patch.annotations, false);
    if let Some(f) = &patch.finalizers {
        n.finalizers = f.clone();
    }
}

fn patch_claim(c: &NodeClaim, patch: &MetaPatch) -> NodeClaim {
    let mut c = c.clone();
    apply_map(&mut c.labels, &patch.labels, true);
    apply_map(&mut c.annotations, &patch.annotations, false);
    if let Some(f) = &patch.finalizers {
        c.finalizers = f.clone();
    }
    c
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
