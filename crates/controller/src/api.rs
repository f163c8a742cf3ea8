//! The cluster as the controller sees it: the [`ClusterApi`] trait and the objects it serves.
//!
//! The API is Kubernetes' shape reduced to what capstan needs: list, watch from a
//! resourceVersion, conditional writes (every update and delete names the resourceVersion it
//! read), eviction through the eviction API (which honours PDBs), and a lease for leader
//! election. Every write also carries a [`Fence`]: the leader's identity and term. An
//! implementation refuses a write whose fence is not the lease's current holder and term,
//! so a deposed leader cannot overwrite its successor's decisions.

use capstan_model::pdb::Pdb;
use capstan_model::{Node, NodePool, Pod, Requirements, Resources, Taint};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// The taint a node carries from registration until capstan has adopted it.
pub const UNREGISTERED_TAINT: &str = "capstan.dev/unregistered";
/// The name of the leader-election lease.
pub const LEASE_NAME: &str = "capstan-controller";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    NodeClaim,
    NodePool,
    Pdb,
    DaemonSet,
}

/// What the controller knows of a NodeClaim's launch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimStatus {
    pub provider_id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// USD per hour at launch.
    pub price: f64,
    /// Clock seconds of the launch.
    pub launched_at: Option<f64>,
    pub node_name: Option<String>,
    pub registered: bool,
    pub initialized: bool,
    /// Clock seconds termination began.
    pub deleting_since: Option<f64>,
    /// Why it is being deleted.
    pub deletion_reason: Option<String>,
    /// For interruptions: clock seconds the cloud reclaims the instance.
    pub deadline: Option<f64>,
}

/// A request for one machine, as capstan's `NodeClaim` resource holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeClaim {
    pub name: String,
    pub uid: String,
    pub nodepool: String,
    /// The NodePool's requirements narrowed by the pods planned onto it.
    pub requirements: Requirements,
    /// Instance types to launch, in order of preference.
    pub instance_types: Vec<String>,
    pub requests: Resources,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Clock seconds of creation.
    pub created: f64,
    pub status: ClaimStatus,
}

impl NodeClaim {
    pub fn deleting(&self) -> bool {
        self.status.deleting_since.is_some()
    }
}

/// An object of any kind the API serves.
#[derive(Clone, Debug)]
pub enum Object {
    Pod(Arc<Pod>),
    Node(Node),
    NodeClaim(NodeClaim),
    NodePool(NodePool),
    Pdb(Pdb),
    /// A DaemonSet, as its pod template.
    DaemonSet(Pod),
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
        }
    }
}

/// A change, as a watch delivers it. `object` is `None` for a deletion.
#[derive(Clone, Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: Kind,
    pub key: String,
    pub object: Option<Object>,
}

/// Everything, at one resourceVersion.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub rv: u64,
    pub objects: Vec<(u64, Object)>,
}

/// The leader-election lease (coordination.k8s.io Lease, reduced).
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub holder: String,
    /// Clock seconds of the last renewal.
    pub renewed_at: f64,
    pub duration_seconds: f64,
    /// Incremented at every change of holder (the Lease's leaseTransitions).
    pub term: u64,
}

/// Who writes: the leader's identity and term. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub holder: String,
    pub term: u64,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{kind:?} {key}: resourceVersion {expected} is stale")]
    Conflict {
        kind: Kind,
        key: String,
        expected: u64,
    },
    #[error("{kind:?} {key} not found")]
    NotFound { kind: Kind, key: String },
    #[error("{kind:?} {key} already exists")]
    AlreadyExists { kind: Kind, key: String },
    /// The eviction would break a PodDisruptionBudget (HTTP 429).
    #[error("cannot evict {pod}: it would violate disruption budget {pdb}")]
    TooManyRequests { pod: String, pdb: String },
    /// The writer is not the lease's current holder and term.
    #[error("write fenced: the lease is held by {holder} in term {term}")]
    Fenced { holder: String, term: u64 },
    /// The watch's resourceVersion is too old: list again (HTTP 410).
    #[error("watch from resourceVersion {since} expired")]
    Gone { since: u64 },
    #[error("api unavailable: {0}")]
    Unavailable(String),
}

/// The cluster's API server, as capstan uses it. Generic like
/// [`capstan_cloud::CloudProvider`]: the controller is generic over it.
pub trait ClusterApi: Send + Sync {
    /// Every object capstan watches, and the resourceVersion to watch from.
    fn list(&self) -> impl Future<Output = Result<Listing, ApiError>> + Send;
    /// The changes after resourceVersion `since`, oldest first; [`ApiError::Gone`] when the
    /// history no longer reaches back that far.
    fn watch(&self, since: u64) -> impl Future<Output = Result<Vec<Event>, ApiError>> + Send;
    fn create(
        &self,
        object: Object,
        fence: &Fence,
    ) -> impl Future<Output = Result<u64, ApiError>> + Send;
    /// Replaces the object if its resourceVersion is still `rv`.
    fn replace(
        &self,
        object: Object,
        rv: u64,
        fence: &Fence,
    ) -> impl Future<Output = Result<u64, ApiError>> + Send;
    /// Deletes the object if its resourceVersion is still `rv`.
    fn delete(
        &self,
        kind: Kind,
        key: &str,
        rv: u64,
        fence: &Fence,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// Evicts a pod through the eviction API: refused while a PDB allows no disruption.
    fn evict(&self, pod: &str, fence: &Fence) -> impl Future<Output = Result<(), ApiError>> + Send;
    fn get_lease(&self) -> impl Future<Output = Result<Option<(u64, Lease)>, ApiError>> + Send;
    /// Creates the lease (`rv` = `None`) or replaces it if its resourceVersion is still `rv`.
    fn put_lease(
        &self,
        lease: Lease,
        rv: Option<u64>,
    ) -> impl Future<Output = Result<u64, ApiError>> + Send;
}
