//! The cluster as the controller sees it: the [`ClusterApi`] trait, the objects it serves, and
//! the writes ([`Write`]) capstan makes — each one Kubernetes request.
//!
//! Reads are per kind, as Kubernetes serves them: [`ClusterApi::list`] one kind, then
//! [`ClusterApi::watch`] that kind from the list's resourceVersion. resourceVersions are
//! opaque strings kept per object ([`Meta`]); a watch that has expired answers
//! [`ApiError::Gone`] and only that kind is listed again.
//!
//! Writes are intents: create a NodeClaim, patch its status, patch an object's metadata, add
//! or remove a taint, delete with preconditions, evict a pod, publish an Event, create or
//! renew the Lease. Every write that changes an object carries the resourceVersion (and for
//! deletes the uid) its decision was made on, so a write based on a stale read fails with
//! [`ApiError::Conflict`]. Leader fencing is client-side, as client-go does it (see
//! `election.rs`): no API server checks who the leader is.

use capstan_model::disruption::Reason;
use capstan_model::pdb::Pdb;
use capstan_model::volume::{Attachment, Claim, StorageClass, Volume};
use capstan_model::{ClaimStatus, Node, NodeClaim, NodePool, Pod, Taint};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// The name of the leader-election lease.
pub const LEASE_NAME: &str = "capstan";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    NodeClaim,
    NodePool,
    Pdb,
    DaemonSet,
    StorageClass,
    PersistentVolume,
    PersistentVolumeClaim,
    VolumeAttachment,
}

impl Kind {
    /// Every kind capstan watches, in the order the cache syncs them (volumes before pods, so
    /// a pod is read with its claims).
    pub const ALL: [Kind; 10] = [
        Kind::NodePool,
        Kind::Pdb,
        Kind::DaemonSet,
        Kind::StorageClass,
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::VolumeAttachment,
        Kind::Node,
        Kind::NodeClaim,
        Kind::Pod,
    ];

    /// The resource's plural, as the API path and RBAC name it.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Node => "nodes",
            Kind::NodeClaim => "nodeclaims",
            Kind::NodePool => "nodepools",
            Kind::Pdb => "poddisruptionbudgets",
            Kind::DaemonSet => "daemonsets",
            Kind::StorageClass => "storageclasses",
            Kind::PersistentVolume => "persistentvolumes",
            Kind::PersistentVolumeClaim => "persistentvolumeclaims",
            Kind::VolumeAttachment => "volumeattachments",
        }
    }
}

/// What preconditions name: the object's uid and resourceVersion as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub uid: String,
    pub resource_version: String,
}

/// An object that could not be read into capstan's form: kept, so the controller can say why
/// (a condition and an Event) and fail closed (an invalid NodePool provisions nothing and its
/// nodes are not disrupted).
#[derive(Clone, Debug, PartialEq)]
pub struct Invalid {
    pub kind: Kind,
    pub key: String,
    /// One line naming the field.
    pub error: String,
}

/// An object of any kind the API serves, in capstan's compact form.
#[derive(Clone, Debug)]
pub enum Object {
    Pod(Arc<Pod>),
    Node(Arc<Node>),
    NodeClaim(Arc<NodeClaim>),
    NodePool(Arc<NodePool>),
    Pdb(Arc<Pdb>),
    /// A DaemonSet, as its pod template.
    DaemonSet(Arc<Pod>),
    StorageClass(Arc<StorageClass>),
    PersistentVolume(Arc<Volume>),
    PersistentVolumeClaim(Arc<Claim>),
    VolumeAttachment(Arc<Attachment>),
    Invalid(Arc<Invalid>),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Pod(_) => Kind::Pod,
            Object::Node(_) => Kind::Node,
            Object::NodeClaim(_) => Kind::NodeClaim,
            Object::NodePool(_) => Kind::NodePool,
            Object::Pdb(_) => Kind::Pdb,
            Object::DaemonSet(_) => Kind::DaemonSet,
            Object::StorageClass(_) => Kind::StorageClass,
            Object::PersistentVolume(_) => Kind::PersistentVolume,
            Object::PersistentVolumeClaim(_) => Kind::PersistentVolumeClaim,
            Object::VolumeAttachment(_) => Kind::VolumeAttachment,
            Object::Invalid(i) => i.kind,
        }
    }

    /// The object's key: `namespace/name` for namespaced kinds, the name otherwise.
    pub fn key(&self) -> String {
        match self {
            Object::Pod(p) => p.key(),
            Object::Node(n) => n.name.clone(),
            Object::NodeClaim(c) => c.name.clone(),
            Object::NodePool(p) => p.name.clone(),
            Object::Pdb(p) => p.key(),
            Object::DaemonSet(p) => p.key(),
            Object::StorageClass(c) => c.name.clone(),
            Object::PersistentVolume(v) => v.name.clone(),
            Object::PersistentVolumeClaim(c) => c.key.clone(),
            Object::VolumeAttachment(a) => a.name.clone(),
            Object::Invalid(i) => i.key.clone(),
        }
    }
}

/// A change, as a watch delivers it.
#[derive(Clone, Debug)]
pub enum Change {
    Applied(Meta, Object),
    Deleted(Kind, String),
}

impl Change {
    pub fn kind(&self) -> Kind {
        match self {
            Change::Applied(_, o) => o.kind(),
            Change::Deleted(k, _) => *k,
        }
    }
}

/// One kind at one resourceVersion.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub resource_version: String,
    pub objects: Vec<(Meta, Object)>,
}

/// What a watch delivered, and the resourceVersion to watch from next.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    pub changes: Vec<Change>,
    pub resource_version: String,
}

/// The leader-election lease (coordination.k8s.io/v1 Lease).
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    /// `holderIdentity`; empty when released.
    pub holder: String,
    /// `renewTime`, clock seconds.
    pub renewed_at: f64,
    /// `acquireTime`, clock seconds.
    pub acquired_at: f64,
    pub duration_seconds: f64,
    /// `leaseTransitions`: incremented at every change of holder; capstan's term.
    pub transitions: u64,
}

/// A metadata change: labels and annotations set (`None` removes), finalizers replaced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetaPatch {
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
    pub finalizers: Option<Vec<String>>,
}

impl MetaPatch {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.finalizers.is_none()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TaintChange {
    Add(Taint),
    /// Removes every taint with this key.
    Remove(String),
}

/// Event type (events.k8s.io/v1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event about an object (events.k8s.io/v1): what a person reads in `kubectl describe`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterEvent {
    pub regarding: (Kind, String),
    /// The object's uid, as the API server gave it (empty when unknown): `kubectl describe`
    /// finds an object's Events by it.
    pub uid: String,
    pub type_: EventType,
    /// CamelCase, e.g. `Launched`, `FailedScheduling`, `InvalidNodePool`.
    pub reason: String,
    /// What happened, in a sentence.
    pub note: String,
}

/// Every write capstan makes. Each is one request; ARCHITECTURE.md lists the request and the
/// RBAC verb each needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// `POST nodeclaims`; the server assigns uid, resourceVersion and creationTimestamp.
    CreateClaim(Box<NodeClaim>),
    /// `PATCH nodeclaims/{name}/status` (merge patch carrying `metadata.resourceVersion`).
    ClaimStatus {
        name: String,
        rv: String,
        status: Box<ClaimStatus>,
    },
    /// `PATCH nodeclaims/{name}` (merge patch carrying `metadata.resourceVersion`): the
    /// annotations that say why capstan deletes it and by when the cloud takes it.
    MarkClaim {
        name: String,
        rv: String,
        reason: Reason,
        deadline: Option<f64>,
    },
    /// `PATCH {nodes|nodeclaims}/{name}` (merge patch carrying `metadata.resourceVersion`).
    Meta {
        kind: Kind,
        name: String,
        rv: String,
        patch: MetaPatch,
    },
    /// `PATCH nodes/{name}` (JSON patch: a test of each taint it removes at its index in
    /// `current`, the taints as read at `rv`; see [`Write::precondition_rv`]).
    Taint {
        node: String,
        rv: String,
        current: Vec<Taint>,
        change: TaintChange,
    },
    /// `DELETE {kind}/{key}` with preconditions on uid and resourceVersion. With finalizers
    /// the object stays, terminating, until they are removed.
    Delete {
        kind: Kind,
        key: String,
        uid: String,
        rv: String,
    },
    /// `POST pods/{name}/eviction` with a uid precondition: [`ApiError::TooManyRequests`] while a
    /// PodDisruptionBudget allows no disruption, [`ApiError::NotFound`] when it is gone.
    Evict { pod: String, uid: String },
    /// `PATCH pods/{name}/status` (merge patch of `status.nominatedNodeName`; `None` clears
    /// it): the node capstan launched for a pending pod, set as the node registers, so
    /// kube-scheduler's nominator holds the room there for it (KEP-5278). capstan clears the
    /// ones it set that did not bind: with `NominatedNodeNameForExpectation` on,
    /// kube-scheduler leaves that to the component that set it.
    Nominate { pod: String, node: Option<String> },
    /// `PATCH nodepools/{name}/status` (merge patch of its conditions; capstan owns them).
    PoolStatus {
        name: String,
        conditions: Vec<capstan_model::nodepool::Condition>,
    },
    /// `POST pods`: a NodePool's headroom placeholder, the only pod capstan creates
    /// (labelled with its NodePool, PriorityClass `capstan-headroom`, the pause image,
    /// requesting `requests`, on the pool's nodes, tolerating its taints).
    CreatePod(Box<Pod>),
    /// `POST events` (events.k8s.io/v1).
    Event(ClusterEvent),
    /// `POST leases` in the lease namespace.
    CreateLease(Lease),
    /// `PUT leases/{name}` carrying the resourceVersion read.
    UpdateLease { lease: Lease, rv: String },
}

impl Write {
    /// A short name for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Write::CreateClaim(_) => "create nodeclaim",
            Write::ClaimStatus { .. } => "patch nodeclaim status",
            Write::MarkClaim { .. } => "annotate nodeclaim",
            Write::Meta {
                kind: Kind::Node, ..
            } => "patch node metadata",
            Write::Meta { .. } => "patch nodeclaim metadata",
            Write::Taint { .. } => "patch node taints",
            Write::Delete {
                kind: Kind::Pod, ..
            } => "delete pod",
            Write::Delete {
                kind: Kind::Node, ..
            } => "delete node",
            Write::Delete { .. } => "delete nodeclaim",
            Write::Evict { .. } => "evict pod",
            Write::Nominate { .. } => "nominate pod",
            Write::PoolStatus { .. } => "patch nodepool status",
            Write::CreatePod(_) => "create pod",
            Write::Event(_) => "publish event",
            Write::CreateLease(_) => "create lease",
            Write::UpdateLease { .. } => "update lease",
        }
    }

    /// The resourceVersion the write is conditional on. Nodes are shared with kubelets and
    /// kube's node controllers, which update them every few seconds: a taint change is
    /// conditional on the taints it acts on (JSON patch tests), a label or annotation change
    /// touches only its own keys, and only a finalizer change (a whole list) needs the node's
    /// resourceVersion. Everything else capstan writes is conditional on it.
    pub fn precondition_rv(&self) -> Option<&str> {
        match self {
            Write::Taint { .. } => None,
            Write::Meta {
                kind: Kind::Node,
                patch,
                ..
            } if patch.finalizers.is_none() => None,
            Write::Meta { rv, .. }
            | Write::ClaimStatus { rv, .. }
            | Write::MarkClaim { rv, .. }
            | Write::Delete { rv, .. }
            | Write::UpdateLease { rv, .. } => Some(rv),
            _ => None,
        }
    }

    /// The object the write is about, as `kind/key`.
    pub fn target(&self) -> String {
        match self {
            Write::CreateClaim(c) => format!("nodeclaims/{}", c.name),
            Write::ClaimStatus { name, .. } | Write::MarkClaim { name, .. } => {
                format!("nodeclaims/{name}")
            }
            Write::Meta { kind, name, .. } => format!("{}/{name}", kind.plural()),
            Write::Taint { node, .. } => format!("nodes/{node}"),
            Write::Delete { kind, key, .. } => format!("{}/{key}", kind.plural()),
            Write::Evict { pod, .. } | Write::Nominate { pod, .. } => format!("pods/{pod}"),
            Write::PoolStatus { name, .. } => format!("nodepools/{name}"),
            Write::CreatePod(p) => format!("pods/{}", p.key()),
            Write::Event(e) => format!("{}/{}", e.regarding.0.plural(), e.regarding.1),
            Write::CreateLease(_) | Write::UpdateLease { .. } => format!("leases/{LEASE_NAME}"),
        }
    }
}

/// What the server holds after a write.
#[derive(Clone, Debug)]
pub enum Written {
    /// The object as the server returned it (creates, patches, a delete held by finalizers).
    Object(Meta, Object),
    /// The object is gone (a delete, or the last finalizer removed from a terminating object).
    Removed,
    /// The Lease's new resourceVersion.
    Lease(String),
    /// Nothing to keep (evictions: the pod goes as its kubelet stops it; Events).
    Done,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// A precondition failed (HTTP 409): the object changed since it was read.
    #[error("{target}: conflict: {message}")]
    Conflict { target: String, message: String },
    #[error("{target} not found")]
    NotFound { target: String },
    #[error("{target} already exists")]
    AlreadyExists { target: String },
    /// The eviction would break a PodDisruptionBudget (HTTP 429).
    #[error("cannot evict {pod}: {message}")]
    TooManyRequests { pod: String, message: String },
    /// The request was refused as invalid (HTTP 422 or 400).
    #[error("{target}: invalid: {message}")]
    Invalid { target: String, message: String },
    /// The watch's resourceVersion is too old: list that kind again (HTTP 410).
    #[error("watch of {kind:?} from resourceVersion {since} expired")]
    Gone { kind: Kind, since: String },
    /// Not allowed (HTTP 401/403), or — in the in-memory API's strict mode — written by a
    /// process that does not hold the lease.
    #[error("{target}: forbidden: {message}")]
    Forbidden { target: String, message: String },
    /// The server could not be reached or answered 5xx/429 for a reason other than a PDB;
    /// worth retrying after a backoff.
    #[error("api unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// Whether retrying later (after a re-read for a conflict) may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApiError::Conflict { .. } | ApiError::Unavailable(_) | ApiError::TooManyRequests { .. }
        )
    }
}

/// The cluster's API server, as capstan uses it. Generic like
/// [`capstan_cloud::CloudProvider`]: the controller is generic over it.
pub trait ClusterApi: Send + Sync {
    /// Every object of one kind, and the resourceVersion to watch from.
    fn list(&self, kind: Kind) -> impl Future<Output = Result<Listing, ApiError>> + Send;
    /// The changes to one kind after resourceVersion `since`, oldest first, without waiting;
    /// [`ApiError::Gone`] when the history no longer reaches back that far.
    fn watch(
        &self,
        kind: Kind,
        since: &str,
    ) -> impl Future<Output = Result<Changes, ApiError>> + Send;
    /// Carries out one write, and says what the server holds afterwards.
    fn write(&self, write: Write) -> impl Future<Output = Result<Written, ApiError>> + Send;
    /// Reads the leader-election lease and its resourceVersion.
    fn get_lease(&self) -> impl Future<Output = Result<Option<(String, Lease)>, ApiError>> + Send;
}
