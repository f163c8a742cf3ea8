//! The in-memory API server's state and how each write changes it.

use super::{ApiStats, EVENTS_KEPT, HISTORY, Removal};
use crate::api::{
    ApiError, Change, ClusterEvent, Kind, LEASE_NAME, Lease, Meta, MetaPatch, Object, TaintChange,
    Write, Written,
};
use capstan_model::labels::normalize_key;
use capstan_model::pdb::Pdb;
use capstan_model::{Node, NodeClaim, Pod};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

#[derive(Default)]
pub(super) struct History {
    pub(super) changes: VecDeque<(u64, Change)>,
    /// Changes up to this resourceVersion have been dropped.
    pub(super) compacted: u64,
}

#[derive(Default)]
pub(super) struct Store {
    pub(super) rv: u64,
    pub(super) uids: u64,
    pub(super) objects: BTreeMap<(Kind, String), (Meta, Object)>,
    pub(super) history: BTreeMap<Kind, History>,
    pub(super) lease: Option<(u64, Lease)>,
    pub(super) stats: ApiStats,
    pub(super) strict: bool,
    /// Pods capstan removed since the simulator last looked, and how.
    pub(super) removed: Vec<(Arc<Pod>, Removal)>,
    /// Every PDB (by key, the order PDBs are checked in) with the active pods it selects and
    /// the healthy among them, kept up to date as pods and PDBs change: an eviction's check
    /// reads counts instead of going over the pods.
    pub(super) pdbs: BTreeMap<String, PdbCount>,
    pub(super) events: VecDeque<(f64, ClusterEvent)>,
}

/// A PDB and the pods it selects: how many are active, and how many of those healthy.
pub(super) struct PdbCount {
    pdb: Arc<Pdb>,
    expected: i64,
    healthy: i64,
}

impl PdbCount {
    fn add(&mut self, p: &Pod, sign: i64) {
        if p.is_active() && self.pdb.selects(p) {
            self.expected += sign;
            self.healthy += sign * i64::from(Pdb::healthy(p));
        }
    }
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

    /// Counts a pod into (`sign` 1) or out of (-1) the PDBs that select it.
    fn count_pod(&mut self, p: &Pod, sign: i64) {
        for c in self.pdbs.values_mut() {
            c.add(p, sign);
        }
    }

    /// Starts counting a PDB (created or replaced) over the pods there are.
    fn count_pdb(&mut self, pdb: &Arc<Pdb>) {
        let mut c = PdbCount {
            pdb: pdb.clone(),
            expected: 0,
            healthy: 0,
        };
        for (_, o) in self.objects.values() {
            if let Object::Pod(p) = o {
                c.add(p, 1);
            }
        }
        self.pdbs.insert(pdb.key(), c);
    }

    /// Stores an object (creating or replacing it), keeping the uid of what it replaces;
    /// returns what the server holds.
    fn store(&mut self, object: Object) -> Written {
        let (meta, object) = self.put_object(object);
        Written::Object(meta, object)
    }

    pub(super) fn put(&mut self, object: Object) -> Meta {
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
                self.count_pod(&old, -1);
            }
            self.count_pod(p, 1);
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
        if let Object::Pdb(pdb) = &object {
            self.count_pdb(pdb);
        }
        (meta, object)
    }

    pub(super) fn remove(&mut self, kind: Kind, key: &str) -> Option<Object> {
        let (_, o) = self.objects.remove(&(kind, key.to_string()))?;
        match &o {
            Object::Pod(p) => {
                let p = p.clone();
                self.count_pod(&p, -1);
            }
            Object::Pdb(pdb) => {
                self.pdbs.remove(&pdb.key());
            }
            _ => {}
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

    /// The pods a PDB-like check looks at for `pod`: its namespace and `app` (the index
    /// holds every stored pod, kept by `index` on each put and removal).
    /// The name of a PDB that allows no disruption of `pod`, if any: of those that select
    /// it, the first (by key) whose selected pods allow none to go
    /// (`Pdb::allowed_from`, as the disruption controller counts them).
    /// Each PDB selecting `pod`, with the disruptions it allows now.
    pub(super) fn pdb_allowances(&self, pod: &Pod) -> Vec<(String, i64)> {
        self.pdbs
            .values()
            .filter(|c| c.pdb.selects(pod))
            .map(|c| (c.pdb.key(), c.pdb.allowed_from(c.expected, c.healthy)))
            .collect()
    }

    pub(super) fn blocking_pdb(&self, pod: &Pod) -> Option<String> {
        self.pdbs
            .values()
            .filter(|c| c.pdb.selects(pod))
            .find(|c| c.pdb.allowed_from(c.expected, c.healthy) <= 0)
            .map(|c| c.pdb.key())
    }

    pub(super) fn check_writer(&mut self, identity: &str, write: &Write) -> Result<(), ApiError> {
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

    pub(super) fn apply(&mut self, now: f64, write: Write) -> Result<Written, ApiError> {
        let rv = write.precondition_rv().unwrap_or("").to_string();
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
            Write::CreatePod(p) => {
                let key = p.key();
                if self.objects.contains_key(&(Kind::Pod, key.clone())) {
                    return Err(ApiError::AlreadyExists {
                        target: target(Kind::Pod, &key),
                    });
                }
                Ok(self.store(Object::Pod(Arc::from(p))))
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
                kind, name, patch, ..
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
                current,
                change,
                ..
            } => {
                let Object::Node(n) = self.current(Kind::Node, &node, &rv, None)? else {
                    unreachable!("nodes are stored as nodes")
                };
                // The JSON patch's tests: each taint removed is where it was read.
                if let TaintChange::Remove(key) = &change {
                    let moved = current
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| &t.key == key)
                        .any(|(i, _)| n.taints.get(i).is_none_or(|t| &t.key != key));
                    if moved {
                        return Err(self.conflict(Kind::Node, &node, "the taints changed".into()));
                    }
                }
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
            Write::Nominate { pod, node } => {
                let Object::Pod(p) = self.current(Kind::Pod, &pod, "", None)? else {
                    unreachable!("pods are stored as pods")
                };
                let mut p = Pod::clone(&p);
                p.nominated_node = node;
                Ok(self.store(Object::Pod(Arc::new(p))))
            }
            // The compact NodePool carries no status: the write is accepted and counted.
            Write::PoolStatus { .. } => Ok(Written::Done),
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
