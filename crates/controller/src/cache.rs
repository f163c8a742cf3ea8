//! The controller's view of the cluster: a reflector per kind, fed by list and watch, with
//! the indexes the loops ask for. It is changed only by applying changes ([`Change`]) — those
//! a watch delivers, and the objects the API server returned for capstan's own writes — so
//! every index stays consistent with the objects (checked by a property test against indexes
//! rebuilt from scratch).

use crate::api::{ApiError, Change, ClusterApi, Invalid, Kind, Listing, Meta, Object};
use capstan_model::labels;
use capstan_model::pdb::Pdb;
use capstan_model::volume::{Attachment, Claim, StorageClass, Volume, Volumes};
use capstan_model::{Node, NodeClaim, NodePool, Pod, Requirements, Resources};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

type Map<T> = BTreeMap<String, (Meta, Arc<T>)>;

/// What the cache links to a node (`Cache::claim_of`).
#[derive(Clone, Debug)]
struct Linked {
    claim: Option<Arc<NodeClaim>>,
    /// Its `karpenter.sh/nodepool` label.
    pool: Option<Arc<str>>,
}

/// A node's claim and NodePool label, as [`Cache::nodes_linked_with_pods`] yields them.
#[derive(Clone, Copy, Debug)]
pub struct Links<'c>(Option<&'c Linked>);

impl<'c> Links<'c> {
    /// [`Cache::claim_of_node`].
    pub fn claim(&self) -> Option<&'c Arc<NodeClaim>> {
        self.0.and_then(|l| l.claim.as_ref())
    }

    /// The node's `karpenter.sh/nodepool` label.
    pub fn pool(&self) -> Option<&'c str> {
        self.0.and_then(|l| l.pool.as_deref())
    }
}

/// Whether a claim counts in [`Cache::launched_claims`].
fn launched(c: &NodeClaim) -> bool {
    c.status.provider_id.is_some() && !c.deleting()
}

/// A hash map with a fixed (deterministic) hasher, for point lookups only: nothing iterates
/// one where its order could matter.
type Hashed<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// The objects of one kind by key: in key order for iteration, and hashed for the lookups
/// the loops make by the thousand every pass (a B-tree lookup compares keys with long shared
/// prefixes, `default/web-…`, at every level).
#[derive(Clone, Debug)]
struct Keyed<T> {
    sorted: Map<T>,
    index: Hashed<String, Arc<T>>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Keyed {
            sorted: BTreeMap::new(),
            index: Hashed::default(),
        }
    }
}

impl<T> Keyed<T> {
    fn get(&self, key: &str) -> Option<&Arc<T>> {
        self.index.get(key)
    }

    fn with_meta(&self, key: &str) -> Option<&(Meta, Arc<T>)> {
        self.sorted.get(key)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn insert(&mut self, key: String, value: (Meta, Arc<T>)) -> Option<(Meta, Arc<T>)> {
        self.index.insert(key.clone(), value.1.clone());
        self.sorted.insert(key, value)
    }

    fn remove(&mut self, key: &str) -> Option<(Meta, Arc<T>)> {
        self.index.remove(key);
        self.sorted.remove(key)
    }

    fn keys(&self) -> impl Iterator<Item = &String> {
        self.sorted.keys()
    }

    fn len(&self) -> usize {
        self.sorted.len()
    }

    fn values(&self) -> impl Iterator<Item = &(Meta, Arc<T>)> {
        self.sorted.values()
    }

    /// Whether the hashed index holds exactly the ordered map's objects.
    fn consistent(&self) -> bool {
        self.index.len() == self.sorted.len()
            && self
                .sorted
                .iter()
                .all(|(k, (_, v))| self.index.get(k).is_some_and(|x| Arc::ptr_eq(x, v)))
    }
}

/// Moves `entries` (ascending by key) past the keys before `key` and takes the value under
/// `key`, if there is one: asked for each key of another ascending sequence, it walks both
/// once. One comparison a step: names share long prefixes, so each is a long `memcmp`.
pub(crate) fn seek<'a, V>(
    entries: &mut std::iter::Peekable<impl Iterator<Item = (&'a String, V)>>,
    key: &str,
) -> Option<V> {
    while let Some((k, _)) = entries.peek() {
        match k.as_str().cmp(key) {
            std::cmp::Ordering::Less => {
                entries.next();
            }
            std::cmp::Ordering::Equal => return entries.next().map(|(_, v)| v),
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

/// A bound pod, with the PDBs that select it.
#[derive(Clone, Debug, PartialEq)]
struct Bound {
    pod: Arc<Pod>,
    /// Indexes, in [`Cache::pdbs`] order, of the PDBs that select the pod.
    pdbs: Arc<[usize]>,
}

/// The active pods bound to one node, as the cache keeps them up to date.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePods {
    /// By key, each with the PDBs that select it.
    pods: BTreeMap<String, Bound>,
    /// Their summed requests.
    used: Resources,
    /// The summed requests of the DaemonSet pods among them.
    daemons: Resources,
    /// The wrapping sum of [`pod_fingerprint`] over them: a loop that wants to know whether a
    /// node's pods changed compares it instead of going over them.
    fingerprint: u64,
    /// Set from the cache's own sequence whenever a pod is bound here, put or removed, or
    /// the PDBs selecting these pods may have changed: never the same for two states.
    version: u64,
}

impl NodePods {
    /// The pods, in key order.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> + Clone {
        self.pods.values().map(|b| &b.pod)
    }

    /// Their summed requests.
    pub fn used(&self) -> &Resources {
        &self.used
    }

    /// The summed requests of the DaemonSet pods among them (what
    /// `capstan_sched::snapshot::daemons_used` sums over [`NodePods::pods`]).
    pub fn daemons(&self) -> &Resources {
        &self.daemons
    }

    /// The pods in key order, each with the PDBs that select it (indexes into
    /// [`Cache::pdbs`] as it iterates now).
    pub fn pods_with_pdbs(&self) -> impl Iterator<Item = (&Arc<Pod>, &Arc<[usize]>)> {
        self.pods.values().map(|b| (&b.pod, &b.pdbs))
    }

    /// Which pods (by uid and key) they are: [`Cache::pods_fingerprint`].
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether there are none (the cache keeps no entry for a node without pods).
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Changes whenever anything [`NodePods::pods_with_pdbs`] yields may have: equal versions
    /// (of the same cache) mean the same pods, the same `Arc`s and the same PDBs.
    pub fn version(&self) -> u64 {
        self.version
    }
}

/// Which PDBs select a pod, by the only things a selector reads: the pod's namespace and its
/// values for the label keys some selector names. Pods alike on those (a workload's
/// replicas) share one answer.
#[derive(Clone, Debug, Default)]
struct PdbSelection {
    /// The label keys any PDB's selector names, sorted.
    keys: Vec<String>,
    /// A signature (namespace, then each key's value) → the PDBs selecting such pods. Only a
    /// memo: cleared when the PDBs change, or when it grows past [`PdbSelection::MEMO`].
    memo: Hashed<String, Arc<[usize]>>,
    /// The signature being looked up (kept to spare an allocation per pod).
    scratch: String,
    none: Arc<[usize]>,
}

impl PdbSelection {
    const MEMO: usize = 4096;

    /// Starts over for a new set of PDBs.
    fn reset(&mut self, pdbs: &Map<Pdb>) {
        let mut keys: Vec<String> = pdbs
            .values()
            .filter_map(|(_, d)| d.selector.as_ref())
            .flat_map(|s| s.requirements.iter().map(|r| r.key.clone()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.keys = keys;
        self.memo.clear();
    }

    fn of(&mut self, pdbs: &Map<Pdb>, pod: &Pod) -> Arc<[usize]> {
        if pdbs.is_empty() {
            return self.none.clone();
        }
        let sig = &mut self.scratch;
        sig.clear();
        sig.push_str(&pod.namespace);
        for k in &self.keys {
            // A separator no label value holds, then whether the label is there at all.
            match pod.labels.get(k) {
                Some(v) => {
                    sig.push_str("\0=");
                    sig.push_str(v);
                }
                None => sig.push_str("\0-"),
            }
        }
        if let Some(set) = self.memo.get(sig.as_str()) {
            return set.clone();
        }
        let set: Arc<[usize]> = pdbs
            .values()
            .enumerate()
            .filter(|(_, (_, d))| d.selects(pod))
            .map(|(i, _)| i)
            .collect();
        if self.memo.len() >= Self::MEMO {
            self.memo.clear();
        }
        self.memo.insert(sig.clone(), set.clone());
        set
    }
}

#[derive(Clone, Debug, Default)]
pub struct Cache {
    /// Per kind: the resourceVersion to watch from; absent before its first list.
    rv: BTreeMap<Kind, String>,
    pods: Keyed<Pod>,
    nodes: Keyed<Node>,
    claims: Keyed<NodeClaim>,
    nodepools: Map<NodePool>,
    pdbs: Map<Pdb>,
    daemonsets: Map<Pod>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses: what a pod's volumes
    /// require of its node. Every cached pod that uses claims carries it
    /// (`Pod::volume_requirements`, `Pod::volume_error`), kept current as they change.
    volumes: Volumes,
    volume_meta: BTreeMap<(Kind, String), Meta>,
    /// Keys of pods that use PersistentVolumeClaims.
    with_claims: BTreeSet<String>,
    attachments: Map<Attachment>,
    invalid: BTreeMap<(Kind, String), Arc<Invalid>>,
    /// Node name → the active pods bound to it, their summed requests and fingerprint.
    pods_on: BTreeMap<String, NodePods>,
    pdb_selection: PdbSelection,
    /// Nodes that active pods are bound to but that are not in the cache.
    dangling: BTreeSet<String>,
    /// Pods with required pod anti-affinity.
    repelling: usize,
    /// Pending pods (unbound, active, not DaemonSet pods) by key: the loops that go over
    /// them every pass read them here, not through a lookup each.
    pending: BTreeMap<String, Arc<Pod>>,
    /// Names of the nodes and of the claims whose deletion was requested.
    deleting_nodes: BTreeSet<String>,
    deleting_claims: BTreeSet<String>,
    /// Provider id → node name.
    node_by_provider: Hashed<String, String>,
    /// Provider id → claim name.
    claim_by_provider: Hashed<String, String>,
    /// Node name → the claims whose status names it.
    claims_by_node: Hashed<String, BTreeSet<String>>,
    /// Node name → the claim it belongs to ([`Cache::claim_of_node`]) and its NodePool label,
    /// for the nodes in the cache that have either: read alongside the nodes instead of
    /// looked up one node at a time. Kept by [`Cache::link`] whenever a node, or a claim with
    /// its provider id, changes.
    claim_of: BTreeMap<String, Linked>,
    /// Provider id → every node with it (two Node objects may name one instance:
    /// `node_by_provider` maps to the first by name), so a claim's change relinks each.
    nodes_with_provider: Hashed<String, BTreeSet<String>>,
    /// How many claims record an instance and are not being deleted: garbage collection
    /// compares it with the claims it found live instances of, instead of going over them.
    launched_claims: usize,
    counters: Counters,
    /// The last [`NodePods::version`] handed out.
    pods_on_version: u64,
    pod_journal: Journal<POD_JOURNAL>,
    /// The claims whose lifecycle facts may have changed: a claim put or removed, and the
    /// claims a node put or removed is the node of (by name or provider id).
    claim_journal: Journal<CLAIM_JOURNAL>,
}

/// How many pod keys the pod journal keeps.
const POD_JOURNAL: usize = 1 << 17;
/// How many claim names the claim journal keeps.
const CLAIM_JOURNAL: usize = 1 << 16;

/// Keys of objects that changed, in order, the last `KEEP` of them: a loop that keeps
/// something derived from the objects asks what changed since it last looked instead of
/// going over them all.
#[derive(Clone, Debug, Default)]
struct Journal<const KEEP: usize> {
    /// The sequence number of `keys[0]`.
    base: u64,
    keys: std::collections::VecDeque<String>,
}

impl<const KEEP: usize> Journal<KEEP> {
    fn push(&mut self, key: &str) {
        if self.keys.len() == KEEP {
            self.keys.pop_front();
            self.base += 1;
        }
        self.keys.push_back(key.to_string());
    }

    fn end(&self) -> u64 {
        self.base + self.keys.len() as u64
    }

    /// The keys pushed since the journal ended at `cursor`, or `None` once it no longer
    /// reaches back that far.
    fn since(&self, cursor: u64) -> Option<impl Iterator<Item = &str>> {
        let skip = usize::try_from(cursor.checked_sub(self.base)?).ok()?;
        (skip <= self.keys.len()).then(|| self.keys.range(skip..).map(String::as_str))
    }
}

/// The cache's own sequence numbers: loops compare them with what they last saw to know
/// whether anything changed. They only grow, across relists too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bumped by every change to nodes, claims, NodePools, PDBs, DaemonSets or invalid objects.
    pub generation: u64,
    /// Bumped by every change to a pod.
    pub pod_generation: u64,
    /// Bumped whenever a pod leaves a node (capacity freed).
    pub freed: u64,
    /// Bumped by every change to a node.
    pub node_generation: u64,
    /// Bumped whenever a pending pod is put (new, changed or listed again).
    pub pending_put: u64,
}

/// One pod's share of a node's [`Cache::pods_fingerprint`]: FNV-1a over its uid and key,
/// then mixed (splitmix64's finalizer) so that sums of them rarely collide.
fn pod_fingerprint(uid: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.bytes().chain([0]).chain(key.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Cache {
    /// Brings every kind up to date: a watch from its resourceVersion, or a fresh list of that
    /// kind the first time and whenever its watch has expired.
    pub async fn sync<A: ClusterApi>(&mut self, api: &A) -> Result<(), ApiError> {
        for kind in Kind::ALL {
            self.sync_kind(api, kind).await?;
        }
        Ok(())
    }

    pub async fn sync_kind<A: ClusterApi>(&mut self, api: &A, kind: Kind) -> Result<(), ApiError> {
        if let Some(rv) = self.rv.get(&kind).cloned() {
            match api.watch(kind, &rv).await {
                Ok(batch) => {
                    for c in batch.changes {
                        self.apply(c);
                    }
                    self.rv.insert(kind, batch.resource_version);
                    return Ok(());
                }
                Err(ApiError::Gone { .. }) => {
                    tracing::info!(?kind, rv, "watch expired; listing the kind again");
                }
                Err(e) => return Err(e),
            }
        }
        let listing = api.list(kind).await?;
        self.relist(kind, listing);
        Ok(())
    }

    /// Forgets where every watch was: the next sync lists every kind again.
    pub fn forget_watches(&mut self) {
        self.rv.clear();
    }

    /// Replaces one kind's objects with a listing, through the same path as watch changes.
    pub fn relist(&mut self, kind: Kind, listing: Listing) {
        let keep: BTreeSet<String> = listing.objects.iter().map(|(_, o)| o.key()).collect();
        for key in self.keys(kind) {
            if !keep.contains(&key) {
                self.apply(Change::Deleted(kind, key));
            }
        }
        for (m, o) in listing.objects {
            self.apply(Change::Applied(m, o));
        }
        self.rv.insert(kind, listing.resource_version);
        match kind {
            Kind::Pod => {
                self.counters.pod_generation += 1;
                self.counters.freed += 1;
            }
            Kind::Node => {
                self.counters.node_generation += 1;
                self.counters.generation += 1;
            }
            _ => self.counters.generation += 1,
        }
    }

    fn keys(&self, kind: Kind) -> Vec<String> {
        let mut keys: Vec<String> = match kind {
            Kind::Pod => self.pods.keys().cloned().collect(),
            Kind::Node => self.nodes.keys().cloned().collect(),
            Kind::NodeClaim => self.claims.keys().cloned().collect(),
            Kind::NodePool => self.nodepools.keys().cloned().collect(),
            Kind::Pdb => self.pdbs.keys().cloned().collect(),
            Kind::DaemonSet => self.daemonsets.keys().cloned().collect(),
            Kind::VolumeAttachment => self.attachments.keys().cloned().collect(),
            Kind::StorageClass | Kind::PersistentVolume | Kind::PersistentVolumeClaim => self
                .volume_meta
                .keys()
                .filter(|(k, _)| *k == kind)
                .map(|(_, key)| key.clone())
                .collect(),
        };
        keys.extend(
            self.invalid
                .keys()
                .filter(|(k, _)| *k == kind)
                .map(|(_, key)| key.clone()),
        );
        keys
    }

    /// Applies one change.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Applied(m, o) => self.put(m, o),
            Change::Deleted(kind, key) => self.remove(kind, &key),
        }
    }

    fn put(&mut self, meta: Meta, o: Object) {
        let key = o.key();
        let kind = o.kind();
        if let Object::Invalid(_) = &o {
            // A valid object turned invalid: it leaves the valid maps first.
            if self.has_valid(kind, &key) {
                self.remove(kind, &key);
            }
        } else if self.invalid.remove(&(kind, key.clone())).is_some() {
            self.counters.generation += 1;
        }
        match o {
            Object::Pod(p) => {
                self.pod_journal.push(&key);
                let p = self.with_volumes(p);
                if p.volume_claims.is_empty() {
                    self.with_claims.remove(&key);
                } else {
                    self.with_claims.insert(key.clone());
                }
                self.unindex_pod(&key);
                self.index_pod(&key, &p);
                self.repelling += !p.anti_affinity.is_empty() as usize;
                if let Some((_, old)) = self.pods.insert(key, (meta, p)) {
                    self.repelling -= !old.anti_affinity.is_empty() as usize;
                }
                self.counters.pod_generation += 1;
            }
            Object::Node(n) => {
                let old_pid = self.nodes.get(&key).and_then(|o| o.provider_id.clone());
                self.touch_claims_of_node(&key, old_pid.as_deref());
                self.touch_claims_of_node(&key, n.provider_id.as_deref());
                if let Some(pid) = &old_pid {
                    self.unprovide(pid, &key);
                }
                if let Some(pid) = &n.provider_id {
                    self.nodes_with_provider
                        .entry(pid.clone())
                        .or_default()
                        .insert(key.clone());
                    self.reprovide(pid);
                }
                self.dangling.remove(&key);
                if n.deleting {
                    self.deleting_nodes.insert(key.clone());
                } else {
                    self.deleting_nodes.remove(&key);
                }
                self.nodes.insert(key.clone(), (meta, n));
                self.link(&key);
                self.counters.generation += 1;
                self.counters.node_generation += 1;
            }
            Object::NodeClaim(c) => {
                self.claim_journal.push(&key);
                let old_pid = self
                    .claims
                    .get(&key)
                    .and_then(|o| o.status.provider_id.clone());
                let new_pid = c.status.provider_id.clone();
                self.launched_claims -= self.claims.get(&key).is_some_and(|o| launched(o)) as usize;
                self.launched_claims += launched(&c) as usize;
                if let Some(old) = self.claims.get(&key) {
                    if let Some(pid) = &old.status.provider_id {
                        self.claim_by_provider.remove(pid);
                    }
                    if let Some(node) = old.status.node_name.clone() {
                        self.unname_node(&node, &key);
                    }
                }
                if let Some(node) = &c.status.node_name {
                    self.claims_by_node
                        .entry(node.clone())
                        .or_default()
                        .insert(key.clone());
                }
                if let Some(pid) = &c.status.provider_id {
                    self.claim_by_provider.insert(pid.clone(), key.clone());
                }
                if c.deleting() {
                    self.deleting_claims.insert(key.clone());
                } else {
                    self.deleting_claims.remove(&key);
                }
                self.claims.insert(key, (meta, c));
                self.link_provider(old_pid.as_deref());
                self.link_provider(new_pid.as_deref());
                self.counters.generation += 1;
            }
            Object::NodePool(p) => {
                self.nodepools.insert(key, (meta, p));
                self.counters.generation += 1;
            }
            Object::Pdb(p) => {
                self.pdbs.insert(key, (meta, p));
                self.counters.generation += 1;
                self.reselect_pdbs();
            }
            Object::DaemonSet(p) => {
                self.daemonsets.insert(key, (meta, p));
                self.counters.generation += 1;
            }
            Object::StorageClass(c) => {
                self.volumes
                    .classes
                    .insert(key.clone(), StorageClass::clone(&c));
                self.volume_changed(kind, key, Some(meta));
            }
            Object::PersistentVolume(v) => {
                self.volumes.volumes.insert(key.clone(), Volume::clone(&v));
                self.volume_changed(kind, key, Some(meta));
            }
            Object::PersistentVolumeClaim(c) => {
                self.volumes.claims.insert(key.clone(), Claim::clone(&c));
                self.volume_changed(kind, key, Some(meta));
            }
            Object::VolumeAttachment(a) => {
                self.attachments.insert(key, (meta, a));
                self.counters.generation += 1;
            }
            Object::Invalid(i) => {
                self.invalid.insert((kind, key), i);
                self.counters.generation += 1;
            }
        }
    }

    /// Enters in the claim journal the claims node `name` (with provider id `pid`) is the node
    /// of: those whose status names it, and the one with its provider id.
    fn touch_claims_of_node(&mut self, name: &str, pid: Option<&str>) {
        if let Some(claims) = self.claims_by_node.get(name) {
            for c in claims {
                self.claim_journal.push(c);
            }
        }
        if let Some(c) = pid.and_then(|p| self.claim_by_provider.get(p)) {
            self.claim_journal.push(c);
        }
    }

    /// Sets node `name`'s entry in `claim_of` from the indexes as they are now.
    fn link(&mut self, name: &str) {
        let node = self.nodes.get(name);
        let claim = node.and_then(|n| self.claim_of_node(n)).cloned();
        let pool = node.and_then(|n| n.labels.get(labels::NODEPOOL));
        if claim.is_none() && pool.is_none() {
            self.claim_of.remove(name);
            return;
        }
        match self.claim_of.get_mut(name) {
            Some(linked) => {
                if linked.pool.as_deref() != pool.map(String::as_str) {
                    linked.pool = pool.map(|p| Arc::from(p.as_str()));
                }
                linked.claim = claim;
            }
            None => {
                let linked = Linked {
                    claim,
                    pool: pool.map(|p| Arc::from(p.as_str())),
                };
                self.claim_of.insert(name.to_string(), linked);
            }
        }
    }

    /// After a claim with provider id `pid` was put or removed: the links of the nodes with it.
    fn link_provider(&mut self, pid: Option<&str>) {
        let nodes: Vec<String> = pid
            .and_then(|p| self.nodes_with_provider.get(p))
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default();
        for node in nodes {
            self.link(&node);
        }
    }

    /// Node `node` no longer has provider id `pid`.
    fn unprovide(&mut self, pid: &str, node: &str) {
        if let Some(nodes) = self.nodes_with_provider.get_mut(pid) {
            nodes.remove(node);
            if nodes.is_empty() {
                self.nodes_with_provider.remove(pid);
            }
        }
        self.reprovide(pid);
    }

    /// `node_by_provider` for `pid`: the first node by name with it, whatever order the
    /// nodes came in.
    fn reprovide(&mut self, pid: &str) {
        match self.nodes_with_provider.get(pid).and_then(|n| n.first()) {
            Some(n) => {
                if self.node_by_provider.get(pid) != Some(n) {
                    self.node_by_provider.insert(pid.to_string(), n.clone());
                }
            }
            None => {
                self.node_by_provider.remove(pid);
            }
        }
    }

    fn unname_node(&mut self, node: &str, claim: &str) {
        if let Some(claims) = self.claims_by_node.get_mut(node) {
            claims.remove(claim);
            if claims.is_empty() {
                self.claims_by_node.remove(node);
            }
        }
    }

    fn has_valid(&self, kind: Kind, key: &str) -> bool {
        match kind {
            Kind::Pod => self.pods.contains_key(key),
            Kind::Node => self.nodes.contains_key(key),
            Kind::NodeClaim => self.claims.contains_key(key),
            Kind::NodePool => self.nodepools.contains_key(key),
            Kind::Pdb => self.pdbs.contains_key(key),
            Kind::DaemonSet => self.daemonsets.contains_key(key),
            Kind::StorageClass => self.volumes.classes.contains_key(key),
            Kind::PersistentVolume => self.volumes.volumes.contains_key(key),
            Kind::PersistentVolumeClaim => self.volumes.claims.contains_key(key),
            Kind::VolumeAttachment => self.attachments.contains_key(key),
        }
    }

    /// A pod with what its volumes require as the cached claims, volumes and classes say.
    fn with_volumes(&self, p: Arc<Pod>) -> Arc<Pod> {
        if p.volume_claims.is_empty() {
            return p;
        }
        let (reqs, error) = match self.volumes.resolve(&p) {
            Ok(r) => (r, None),
            Err(e) => (Requirements::new(), Some(e)),
        };
        if p.volume_requirements == reqs && p.volume_error == error {
            return p;
        }
        let mut q = Pod::clone(&p);
        q.volume_requirements = reqs;
        q.volume_error = error;
        Arc::new(q)
    }

    /// After a claim, volume or class changed: its meta kept, and the pods that use claims
    /// read again.
    fn volume_changed(&mut self, kind: Kind, key: String, meta: Option<Meta>) {
        match meta {
            Some(m) => self.volume_meta.insert((kind, key), m),
            None => self.volume_meta.remove(&(kind, key)),
        };
        self.counters.generation += 1;
        let keys: Vec<String> = self.with_claims.iter().cloned().collect();
        for k in keys {
            let Some((m, p)) = self.pods.with_meta(&k).cloned() else {
                continue;
            };
            let q = self.with_volumes(p.clone());
            if !Arc::ptr_eq(&p, &q) {
                self.put(m, Object::Pod(q));
            }
        }
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        if kind == Kind::Pod {
            self.counters.pod_generation += 1;
        } else {
            self.counters.generation += 1;
        }
        self.invalid.remove(&(kind, key.to_string()));
        match kind {
            Kind::Pod => {
                self.pod_journal.push(key);
                self.unindex_pod(key);
                self.with_claims.remove(key);
                if let Some((_, old)) = self.pods.remove(key) {
                    self.repelling -= !old.anti_affinity.is_empty() as usize;
                }
            }
            Kind::Node => {
                self.counters.node_generation += 1;
                if self.pods_on.contains_key(key) {
                    self.dangling.insert(key.to_string());
                }
                self.deleting_nodes.remove(key);
                let old_pid = self.nodes.get(key).and_then(|o| o.provider_id.clone());
                self.touch_claims_of_node(key, old_pid.as_deref());
                if let Some((_, n)) = self.nodes.remove(key) {
                    if let Some(pid) = &n.provider_id {
                        self.unprovide(pid, key);
                    }
                }
                self.claim_of.remove(key);
            }
            Kind::NodeClaim => {
                self.claim_journal.push(key);
                self.deleting_claims.remove(key);
                if let Some((_, c)) = self.claims.remove(key) {
                    self.launched_claims -= launched(&c) as usize;
                    if let Some(pid) = &c.status.provider_id {
                        if self.claim_by_provider.get(pid).is_some_and(|k| k == key) {
                            self.claim_by_provider.remove(pid);
                        }
                    }
                    if let Some(node) = &c.status.node_name {
                        self.unname_node(node, key);
                    }
                    self.link_provider(c.status.provider_id.as_deref());
                }
            }
            Kind::NodePool => {
                self.nodepools.remove(key);
            }
            Kind::Pdb => {
                self.pdbs.remove(key);
                self.reselect_pdbs();
            }
            Kind::DaemonSet => {
                self.daemonsets.remove(key);
            }
            Kind::StorageClass => {
                self.volumes.classes.remove(key);
                self.volume_changed(kind, key.to_string(), None);
            }
            Kind::PersistentVolume => {
                self.volumes.volumes.remove(key);
                self.volume_changed(kind, key.to_string(), None);
            }
            Kind::PersistentVolumeClaim => {
                self.volumes.claims.remove(key);
                self.volume_changed(kind, key.to_string(), None);
            }
            Kind::VolumeAttachment => {
                self.attachments.remove(key);
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
                let pdbs = self.pdb_selection.of(&self.pdbs, p);
                self.pods_on_version += 1;
                let on = self.pods_on.entry(n.clone()).or_default();
                on.version = self.pods_on_version;
                on.pods.insert(
                    key.to_string(),
                    Bound {
                        pod: p.clone(),
                        pdbs,
                    },
                );
                on.used.add(&p.requests);
                if p.is_active() && p.is_daemonset_pod() {
                    on.daemons.add(&p.requests);
                }
                on.fingerprint = on.fingerprint.wrapping_add(pod_fingerprint(&p.uid, key));
            }
            None => {
                self.counters.pending_put += 1;
                self.pending.insert(key.to_string(), p.clone());
            }
        }
    }

    /// The PDBs changed: which select each bound pod, again.
    fn reselect_pdbs(&mut self) {
        self.pdb_selection.reset(&self.pdbs);
        for on in self.pods_on.values_mut() {
            self.pods_on_version += 1;
            on.version = self.pods_on_version;
            for b in on.pods.values_mut() {
                b.pdbs = self.pdb_selection.of(&self.pdbs, &b.pod);
            }
        }
    }

    fn unindex_pod(&mut self, key: &str) {
        if let Some(old) = self.pods.get(key) {
            if let Some(n) = &old.node_name {
                self.counters.freed += 1;
                if let Some(on) = self.pods_on.get_mut(n) {
                    self.pods_on_version += 1;
                    on.version = self.pods_on_version;
                    if on.pods.remove(key).is_some() {
                        on.used.sub(&old.requests);
                        if old.is_active() && old.is_daemonset_pod() {
                            on.daemons.sub(&old.requests);
                        }
                        on.fingerprint =
                            on.fingerprint.wrapping_sub(pod_fingerprint(&old.uid, key));
                    }
                    if on.pods.is_empty() {
                        self.pods_on.remove(n);
                        self.dangling.remove(n);
                    }
                }
            }
        }
        self.pending.remove(key);
    }

    // ------------------------------------------------------------------ reads

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Where the pod journal ends now: kept by a loop to ask [`Cache::pods_changed_since`].
    pub fn pod_journal_end(&self) -> u64 {
        self.pod_journal.end()
    }

    /// The keys of the pods put or removed since the journal ended at `cursor`, in order
    /// (a pod changed twice is there twice), or `None` when the journal no longer reaches
    /// back that far.
    pub fn pods_changed_since(&self, cursor: u64) -> Option<impl Iterator<Item = &str>> {
        self.pod_journal.since(cursor)
    }

    /// Where the claim journal ends now: kept by a loop to ask [`Cache::claims_touched_since`].
    pub fn claim_journal_end(&self) -> u64 {
        self.claim_journal.end()
    }

    /// The names of the claims put or removed since the claim journal ended at `cursor`, and
    /// of the claims whose node (by name or provider id) was put or removed — everything
    /// [`Cache::node_of_claim`] reads — in order, with repeats; `None` when the journal no
    /// longer reaches back that far.
    pub fn claims_touched_since(&self, cursor: u64) -> Option<impl Iterator<Item = &str>> {
        self.claim_journal.since(cursor)
    }

    pub fn generation(&self) -> u64 {
        self.counters.generation
    }

    pub fn pod(&self, key: &str) -> Option<&Arc<Pod>> {
        self.pods.get(key)
    }

    /// The uid and resourceVersion of any cached object.
    pub fn meta(&self, kind: Kind, key: &str) -> Option<&Meta> {
        match kind {
            Kind::Pod => self.pods.with_meta(key).map(|(m, _)| m),
            Kind::Node => self.nodes.with_meta(key).map(|(m, _)| m),
            Kind::NodeClaim => self.claims.with_meta(key).map(|(m, _)| m),
            Kind::NodePool => self.nodepools.get(key).map(|(m, _)| m),
            Kind::Pdb => self.pdbs.get(key).map(|(m, _)| m),
            Kind::DaemonSet => self.daemonsets.get(key).map(|(m, _)| m),
            Kind::StorageClass | Kind::PersistentVolume | Kind::PersistentVolumeClaim => {
                self.volume_meta.get(&(kind, key.to_string()))
            }
            Kind::VolumeAttachment => self.attachments.get(key).map(|(m, _)| m),
        }
    }

    pub fn pod_meta(&self, key: &str) -> Option<&Meta> {
        self.pods.with_meta(key).map(|(m, _)| m)
    }

    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods.values().map(|(_, p)| p)
    }

    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.nodes.get(name)
    }

    pub fn node_meta(&self, name: &str) -> Option<&Meta> {
        self.nodes.with_meta(name).map(|(m, _)| m)
    }

    /// How many nodes there are.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// How many pods there are (bound or not).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Nodes in name order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.values().map(|(_, n)| n)
    }

    pub fn claim(&self, name: &str) -> Option<&Arc<NodeClaim>> {
        self.claims.get(name)
    }

    pub fn claim_meta(&self, name: &str) -> Option<&Meta> {
        self.claims.with_meta(name).map(|(m, _)| m)
    }

    /// Claims in name order.
    pub fn claims(&self) -> impl Iterator<Item = &Arc<NodeClaim>> {
        self.claims.values().map(|(_, c)| c)
    }

    pub fn nodepool(&self, name: &str) -> Option<&Arc<NodePool>> {
        self.nodepools.get(name).map(|(_, p)| p)
    }

    /// The NodePools that compiled, in name order.
    pub fn nodepools(&self) -> impl Iterator<Item = &Arc<NodePool>> {
        self.nodepools.values().map(|(_, p)| p)
    }

    pub fn nodepool_list(&self) -> Vec<NodePool> {
        self.nodepools().map(|p| NodePool::clone(p)).collect()
    }

    pub fn pdbs(&self) -> impl Iterator<Item = &Arc<Pdb>> {
        self.pdbs.values().map(|(_, p)| p)
    }

    pub fn daemonsets(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.daemonsets.values().map(|(_, p)| p)
    }

    /// The VolumeAttachments of `node`, in name order.
    pub fn attachments_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Attachment> {
        self.attachments
            .values()
            .map(|(_, a)| &**a)
            .filter(move |a| a.node == node)
    }

    /// The PersistentVolume a pod's claim (`namespace/name`) is bound to.
    pub fn volume_of_claim(&self, key: &str) -> Option<&str> {
        self.volumes.claims.get(key)?.volume_name.as_deref()
    }

    /// Objects that could not be read, with why.
    pub fn invalid(&self) -> impl Iterator<Item = &Arc<Invalid>> {
        self.invalid.values()
    }

    /// Active pods bound to `node` (DaemonSet pods included), in key order.
    pub fn pods_on(&self, node: &str) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods_on.get(node).into_iter().flat_map(|on| on.pods())
    }

    /// Every node in name order, with its active pods (`None`: it has none), read side by
    /// side rather than looked up one node at a time.
    pub fn nodes_with_pods(&self) -> impl Iterator<Item = (&Arc<Node>, Option<&NodePods>)> {
        let mut on = self.pods_on.iter().peekable();
        self.nodes().map(move |n| (n, seek(&mut on, &n.name)))
    }

    /// [`Cache::nodes_with_pods`], with each node's claim ([`Cache::claim_of_node`]).
    pub fn nodes_with_claims_and_pods(
        &self,
    ) -> impl Iterator<Item = (&Arc<Node>, Option<&Arc<NodeClaim>>, Option<&NodePods>)> {
        self.nodes_linked_with_pods()
            .map(|(n, linked, on)| (n, linked.claim(), on))
    }

    /// [`Cache::nodes_with_pods`], with what is linked to each node: its claim and its
    /// NodePool label.
    pub fn nodes_linked_with_pods(
        &self,
    ) -> impl Iterator<Item = (&Arc<Node>, Links<'_>, Option<&NodePods>)> {
        let mut linked = self.claim_of.iter().peekable();
        self.nodes_with_pods()
            .map(move |(n, on)| (n, Links(seek(&mut linked, &n.name)), on))
    }

    /// Every active bound pod, grouped by node (in name order).
    pub fn bound_pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods_on.values().flat_map(|on| on.pods())
    }

    /// [`Cache::bound_pods`], each with its node's name and the PDBs that select it: indexes
    /// into [`Cache::pdbs`] as it iterates now.
    pub fn bound_pods_with_pdbs(&self) -> impl Iterator<Item = (&str, &Arc<Pod>, &Arc<[usize]>)> {
        self.pods_on
            .iter()
            .flat_map(|(n, on)| on.pods.values().map(move |b| (n.as_str(), &b.pod, &b.pdbs)))
    }

    /// The nodes active pods are bound to (in the cache or not), in name order, with them.
    pub fn pods_by_node(&self) -> impl Iterator<Item = (&str, &NodePods)> {
        self.pods_on.iter().map(|(n, on)| (n.as_str(), on))
    }

    /// Pods bound to `node` that are not DaemonSet pods.
    pub fn workload_pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods_on(node)
            .filter(|p| !p.is_daemonset_pod())
            .cloned()
            .collect()
    }

    /// A fingerprint of which active pods (by uid and key) are bound to `node`: it changes
    /// when one comes or goes, not when one is updated in place. 0 for none.
    pub fn pods_fingerprint(&self, node: &str) -> u64 {
        self.pods_on.get(node).map_or(0, |on| on.fingerprint)
    }

    /// The summed requests of the active pods bound to `node`.
    pub fn used_on(&self, node: &str) -> Option<&Resources> {
        self.pods_on.get(node).map(|on| &on.used)
    }

    pub fn dangling(&self) -> &BTreeSet<String> {
        &self.dangling
    }

    /// How many pods have required pod anti-affinity.
    pub fn repelling(&self) -> usize {
        self.repelling
    }

    /// The pod `key` if it is one of [`Cache::pending`], by a hashed lookup.
    pub fn pending_pod(&self, key: &str) -> Option<&Arc<Pod>> {
        self.pods
            .get(key)
            .filter(|p| p.is_active() && p.node_name.is_none() && !p.is_daemonset_pod())
    }

    pub fn pending(&self) -> &BTreeMap<String, Arc<Pod>> {
        &self.pending
    }

    /// Nodes whose deletion was requested, in name order.
    pub fn deleting_nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.deleting_nodes.iter().filter_map(|n| self.node(n))
    }

    /// Claims whose deletion was requested, in name order.
    /// How many claims record an instance (`status.providerID`) and are not being deleted.
    pub fn launched_claims(&self) -> usize {
        self.launched_claims
    }

    pub fn deleting_claims(&self) -> impl Iterator<Item = &Arc<NodeClaim>> {
        self.deleting_claims.iter().filter_map(|c| self.claim(c))
    }

    pub fn node_by_provider(&self, provider_id: &str) -> Option<&str> {
        self.node_by_provider.get(provider_id).map(String::as_str)
    }

    pub fn claim_by_provider(&self, provider_id: &str) -> Option<&str> {
        self.claim_by_provider.get(provider_id).map(String::as_str)
    }

    /// The claim a node belongs to (by provider id).
    pub fn claim_of_node(&self, node: &Node) -> Option<&Arc<NodeClaim>> {
        let claim = self.claim_by_provider(node.provider_id.as_deref()?)?;
        self.claim(claim)
    }

    /// The node of a claim: by its status, else by its provider id.
    pub fn node_of_claim(&self, c: &NodeClaim) -> Option<&Arc<Node>> {
        c.status
            .node_name
            .as_deref()
            .and_then(|n| self.node(n))
            .or_else(|| {
                let pid = c.status.provider_id.as_deref()?;
                self.node(self.node_by_provider(pid)?)
            })
    }

    /// Checks every index against one rebuilt from the objects; the first difference, as a
    /// sentence.
    pub fn check_indexes(&self) -> Result<(), String> {
        let mut fresh = Cache::default();
        for (m, n) in self.nodes.values() {
            fresh.put(m.clone(), Object::Node(n.clone()));
        }
        for (m, c) in self.claims.values() {
            fresh.put(m.clone(), Object::NodeClaim(c.clone()));
        }
        for (m, p) in self.pods.values() {
            fresh.put(m.clone(), Object::Pod(p.clone()));
        }
        // The PDBs after the pods: their selection of every bound pod is then made afresh.
        for (m, d) in self.pdbs.values() {
            fresh.put(m.clone(), Object::Pdb(d.clone()));
        }
        let check = |what: &str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(format!("{what} differs from a rebuild"))
            }
        };
        let keys = |m: &BTreeMap<String, NodePods>| {
            m.iter()
                .map(|(n, on)| (n.clone(), on.pods.keys().cloned().collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        };
        let selected = |m: &BTreeMap<String, NodePods>| {
            m.values()
                .flat_map(|on| on.pods.values().map(|b| b.pdbs.to_vec()))
                .collect::<Vec<_>>()
        };
        let used = |m: &BTreeMap<String, NodePods>| {
            m.iter()
                .map(|(n, on)| (n.clone(), on.used.clone(), on.daemons.clone()))
                .collect::<Vec<_>>()
        };
        let fingerprints = |m: &BTreeMap<String, NodePods>| {
            m.iter()
                .map(|(n, on)| (n.clone(), on.fingerprint))
                .collect::<Vec<_>>()
        };
        check("pods' hashed index", self.pods.consistent())?;
        check("nodes' hashed index", self.nodes.consistent())?;
        check("claims' hashed index", self.claims.consistent())?;
        check("pods_on", keys(&self.pods_on) == keys(&fresh.pods_on))?;
        check(
            "PDBs selecting each bound pod",
            selected(&self.pods_on) == selected(&fresh.pods_on),
        )?;
        check(
            "used_on and DaemonSet requests",
            used(&self.pods_on) == used(&fresh.pods_on)
                && self
                    .pods_on
                    .values()
                    .all(|on| on.daemons == capstan_sched::snapshot::daemons_used(on.pods())),
        )?;
        check(
            "pods_fingerprint",
            fingerprints(&self.pods_on) == fingerprints(&fresh.pods_on),
        )?;
        check(
            "nodes_with_pods",
            self.nodes_with_pods()
                .all(|(n, on)| on.map(|o| &o.pods) == self.pods_on.get(&n.name).map(|o| &o.pods)),
        )?;
        check("dangling", self.dangling == fresh.dangling)?;
        check(
            "deleting_nodes",
            self.deleting_nodes == fresh.deleting_nodes,
        )?;
        check(
            "deleting_claims",
            self.deleting_claims == fresh.deleting_claims,
        )?;
        check("repelling", self.repelling == fresh.repelling)?;
        check(
            "launched_claims",
            self.launched_claims == fresh.launched_claims,
        )?;
        check("pending", self.pending == fresh.pending)?;
        check(
            "pending_pod",
            self.pods
                .keys()
                .all(|k| self.pending_pod(k).is_some() == self.pending.contains_key(k)),
        )?;
        check(
            "node_by_provider",
            self.node_by_provider == fresh.node_by_provider,
        )?;
        check(
            "claim_by_provider",
            self.claim_by_provider == fresh.claim_by_provider,
        )?;
        check(
            "claims_by_node",
            self.claims_by_node == fresh.claims_by_node,
        )?;
        check(
            "nodes_with_provider",
            self.nodes_with_provider == fresh.nodes_with_provider,
        )?;
        let ptr = |c: Option<&Arc<NodeClaim>>| c.map(Arc::as_ptr);
        fn pool(n: &Node) -> Option<&str> {
            n.labels.get(labels::NODEPOOL).map(String::as_str)
        }
        check(
            "claim_of",
            self.claim_of.len()
                == self
                    .nodes()
                    .filter(|n| self.claim_of_node(n).is_some() || pool(n).is_some())
                    .count()
                && self.nodes_linked_with_pods().all(|(n, l, _)| {
                    ptr(l.claim()) == ptr(self.claim_of_node(n)) && l.pool() == pool(n)
                }),
        )
    }
}

#[cfg(test)]
mod tests;
