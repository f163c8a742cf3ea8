//! [`ClusterApi`] over kube-rs: each read and each [`Write`] is one request to the API server.
//!
//! | write | request |
//! |---|---|
//! | `CreateClaim` | `POST /apis/capstan.dev/v1/nodeclaims` |
//! | `ClaimStatus` | `PATCH …/nodeclaims/{name}/status` (merge patch with `metadata.resourceVersion`) |
//! | `MarkClaim` | `PATCH …/nodeclaims/{name}` (merge patch of two annotations, with the resourceVersion) |
//! | `Meta` | `PATCH /api/v1/nodes/{name}` or `…/nodeclaims/{name}` (merge patch with the resourceVersion) |
//! | `Taint` | `PATCH /api/v1/nodes/{name}` (JSON patch: the resourceVersion, then tests of the taints at their indexes) |
//! | `Delete` | `DELETE …/{name}` with `preconditions: {uid, resourceVersion}` |
//! | `Evict` | `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (`policy/v1` Eviction, uid precondition) |
//! | `CreatePod` | `POST /api/v1/namespaces/{ns}/pods` (a headroom placeholder) |
//! | `Event` | `POST /apis/events.k8s.io/v1/namespaces/{ns}/events` |
//! | `CreateLease`, `UpdateLease` | `POST`/`PUT /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}` (PUT carries the resourceVersion) |

use crate::client::{Throttle, api_error};
use crate::convert;
use crate::resources::{API_VERSION, GROUP, VERSION};
use crate::watch::KindWatch;
use capstan_controller::api::{
    ApiError, Changes, ClusterApi, ClusterEvent, EventType, Kind, Lease, Listing, MetaPatch,
    Object, TaintChange, Write, Written,
};
use capstan_model::claim::{DISRUPTION_REASON_ANNOTATION, TERMINATION_DEADLINE_ANNOTATION};
use capstan_model::time::format_rfc3339;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;

/// How [`KubeApi`] talks to the cluster.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Client-side rate limit, as client-go's `--kube-api-qps` / `--kube-api-burst`.
    pub qps: u32,
    pub burst: u32,
    pub lease_namespace: String,
    pub lease_name: String,
    /// This process, as Events report it.
    pub identity: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            qps: 50,
            burst: 100,
            lease_namespace: "kube-system".into(),
            lease_name: capstan_controller::api::LEASE_NAME.into(),
            identity: "capstan".into(),
        }
    }
}

/// The API resource of a capstan kind.
pub fn capstan_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// ClusterApi on a real API server.
pub struct KubeApi {
    client: kube::Client,
    throttle: Throttle,
    settings: Settings,
    watches: Mutex<BTreeMap<Kind, std::sync::Arc<KindWatch>>>,
}

fn target(kind: Kind, key: &str) -> String {
    format!("{}/{key}", kind.plural())
}

/// Splits a `namespace/name` key.
fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("default", key))
}

fn micro(unix: f64) -> MicroTime {
    MicroTime(Timestamp::from_microsecond((unix * 1e6) as i64).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn unix(t: &MicroTime) -> f64 {
    t.0.as_microsecond() as f64 / 1e6
}

impl KubeApi {
    pub fn new(client: kube::Client, settings: Settings) -> KubeApi {
        KubeApi {
            throttle: Throttle::new(settings.qps, settings.burst),
            client,
            settings,
            watches: Mutex::default(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn claims(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &capstan_resource("NodeClaim", "nodeclaims"),
        )
    }

    fn nodepools(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &capstan_resource("NodePool", "nodepools"),
        )
    }

    fn leases(&self) -> Api<KubeLease> {
        Api::namespaced(self.client.clone(), &self.settings.lease_namespace)
    }

    fn watch_of(&self, kind: Kind) -> std::sync::Arc<KindWatch> {
        self.watches
            .lock()
            .expect("watches")
            .entry(kind)
            .or_default()
            .clone()
    }

    async fn list_all<K>(
        &self,
        kind: Kind,
        api: Api<K>,
        conv: fn(&K) -> Object,
    ) -> Result<Listing, ApiError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let mut objects = Vec::new();
        let mut lp = ListParams::default().limit(500);
        loop {
            self.throttle.wait().await;
            let page = api
                .list(&lp)
                .await
                .map_err(|e| api_error(kind.plural(), kind, e))?;
            for o in &page.items {
                objects.push((convert::meta(o.meta()), conv(o)));
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => {
                    return Ok(Listing {
                        resource_version: page.metadata.resource_version.unwrap_or_default(),
                        objects,
                    });
                }
            }
        }
    }

    fn object(kind: Kind, o: Value) -> Result<Written, ApiError> {
        let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap_or_default();
        if meta.deletion_timestamp.is_some()
            && meta.finalizers.as_ref().is_none_or(|f| f.is_empty())
        {
            return Ok(Written::Removed);
        }
        let object = match kind {
            Kind::Node => serde_json::from_value::<Node>(o)
                .map(|n| convert::node(&n))
                .map_err(|e| ApiError::Unavailable(e.to_string()))?,
            Kind::NodeClaim => serde_json::from_value::<DynamicObject>(o)
                .map(|d| convert::nodeclaim(&d))
                .map_err(|e| ApiError::Unavailable(e.to_string()))?,
            Kind::Pod => serde_json::from_value::<Pod>(o)
                .map(|p| convert::pod(&p))
                .map_err(|e| ApiError::Unavailable(e.to_string()))?,
            _ => return Ok(Written::Done),
        };
        Ok(Written::Object(convert::meta(&meta), object))
    }

    async fn patch(
        &self,
        kind: Kind,
        name: &str,
        patch: Patch<Value>,
    ) -> Result<Written, ApiError> {
        let t = target(kind, name);
        self.throttle.wait().await;
        let pp = PatchParams::default();
        let o = match kind {
            Kind::Node => {
                let api: Api<Node> = Api::all(self.client.clone());
                serde_json::to_value(
                    api.patch(name, &pp, &patch)
                        .await
                        .map_err(|e| api_error(&t, kind, e))?,
                )
            }
            _ => serde_json::to_value(
                self.claims()
                    .patch(name, &pp, &patch)
                    .await
                    .map_err(|e| api_error(&t, kind, e))?,
            ),
        }
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
        Self::object(kind, o)
    }

    async fn delete(
        &self,
        kind: Kind,
        key: &str,
        uid: &str,
        rv: &str,
    ) -> Result<Written, ApiError> {
        let t = target(kind, key);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: (!uid.is_empty()).then(|| uid.to_string()),
                resource_version: (!rv.is_empty()).then(|| rv.to_string()),
            }),
            ..Default::default()
        };
        self.throttle.wait().await;
        let left = match kind {
            Kind::Pod => {
                let (ns, name) = split(key);
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                api.delete(name, &dp)
                    .await
                    .map_err(|e| api_error(&t, kind, e))?
                    .left()
                    .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            }
            Kind::Node => {
                let api: Api<Node> = Api::all(self.client.clone());
                api.delete(key, &dp)
                    .await
                    .map_err(|e| api_error(&t, kind, e))?
                    .left()
                    .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            }
            Kind::NodeClaim => self
                .claims()
                .delete(key, &dp)
                .await
                .map_err(|e| api_error(&t, kind, e))?
                .left()
                .map(|o| serde_json::to_value(o).unwrap_or(Value::Null)),
            _ => {
                return Err(ApiError::Invalid {
                    target: t,
                    message: "capstan deletes only pods, nodes and nodeclaims".into(),
                });
            }
        };
        match left {
            Some(o) => Self::object(kind, o),
            None => Ok(Written::Removed),
        }
    }

    async fn evict(&self, pod: &str, uid: &str) -> Result<Written, ApiError> {
        let (ns, name) = split(pod);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        // A policy/v1 Eviction as the API defines it (kube-rs' `evict` spells the field
        // `delete_options`, which the server drops with its uid precondition).
        let mut body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        });
        if !uid.is_empty() {
            body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
        }
        self.throttle.wait().await;
        api.create_subresource::<Value, Value>("eviction", name, &PostParams::default(), &body)
            .await
            .map_err(|e| api_error(pod, Kind::Pod, e))?;
        Ok(Written::Done)
    }

    async fn event(&self, e: ClusterEvent) -> Result<Written, ApiError> {
        let (kind, key) = &e.regarding;
        let (ns, name) = match kind {
            Kind::Pod | Kind::Pdb | Kind::DaemonSet | Kind::PersistentVolumeClaim => split(key),
            _ => ("default", key.as_str()),
        };
        let (api_version, k8s_kind) = match kind {
            Kind::Pod => ("v1", "Pod"),
            Kind::Node => ("v1", "Node"),
            Kind::NodeClaim => (API_VERSION, "NodeClaim"),
            Kind::NodePool => (API_VERSION, "NodePool"),
            Kind::Pdb => ("policy/v1", "PodDisruptionBudget"),
            Kind::DaemonSet => ("apps/v1", "DaemonSet"),
            Kind::StorageClass => ("storage.k8s.io/v1", "StorageClass"),
            Kind::PersistentVolume => ("v1", "PersistentVolume"),
            Kind::PersistentVolumeClaim => ("v1", "PersistentVolumeClaim"),
            Kind::VolumeAttachment => ("storage.k8s.io/v1", "VolumeAttachment"),
        };
        let now = Timestamp::now();
        let ev = KubeEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(e.reason.clone()),
            reason: Some(e.reason.clone()),
            note: Some(e.note.chars().take(1000).collect()),
            type_: Some(
                match e.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            reporting_controller: Some("capstan.dev/controller".into()),
            reporting_instance: Some(self.settings.identity.chars().take(128).collect()),
            regarding: Some(ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(k8s_kind.into()),
                name: Some(name.into()),
                namespace: matches!(
                    kind,
                    Kind::Pod | Kind::Pdb | Kind::DaemonSet | Kind::PersistentVolumeClaim
                )
                .then(|| ns.to_string()),
                uid: (!e.uid.is_empty()).then(|| e.uid.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), ns);
        self.throttle.wait().await;
        api.create(&PostParams::default(), &ev)
            .await
            .map_err(|err| api_error("events", Kind::Pod, err))?;
        Ok(Written::Done)
    }

    fn lease_object(&self, l: &Lease, rv: Option<&str>) -> KubeLease {
        KubeLease {
            metadata: ObjectMeta {
                name: Some(self.settings.lease_name.clone()),
                namespace: Some(self.settings.lease_namespace.clone()),
                resource_version: rv.map(str::to_string),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: (!l.holder.is_empty()).then(|| l.holder.clone()),
                lease_duration_seconds: Some(l.duration_seconds.round() as i32),
                acquire_time: Some(micro(l.acquired_at)),
                renew_time: Some(micro(l.renewed_at)),
                lease_transitions: Some(l.transitions as i32),
                ..Default::default()
            }),
        }
    }
}

/// A merge patch of metadata, carrying the resourceVersion it was decided on when it has one.
fn meta_patch(rv: Option<&str>, p: &MetaPatch) -> Value {
    let mut m = json!({});
    if let Some(rv) = rv {
        m["resourceVersion"] = json!(rv);
    }
    if !p.labels.is_empty() {
        m["labels"] = serde_json::to_value(&p.labels).unwrap_or(Value::Null);
    }
    if !p.annotations.is_empty() {
        m["annotations"] = serde_json::to_value(&p.annotations).unwrap_or(Value::Null);
    }
    if let Some(f) = &p.finalizers {
        m["finalizers"] = json!(f);
    }
    json!({"metadata": m})
}

/// The JSON patch for one taint change on taints as read (`current`): each taint it removes
/// is tested at its index first (422 when the taints moved). With `rv`, replacing the
/// resourceVersion also makes the whole update conditional (409 when stale).
pub fn taint_patch(
    rv: Option<&str>,
    current: &[capstan_model::Taint],
    change: &TaintChange,
) -> Value {
    let mut ops = Vec::new();
    if let Some(rv) = rv {
        ops.push(json!({"op": "replace", "path": "/metadata/resourceVersion", "value": rv}));
    }
    let taint = |t: &capstan_model::Taint| {
        let mut v = json!({"key": t.key, "effect": t.effect.as_str()});
        if !t.value.is_empty() {
            v["value"] = json!(t.value);
        }
        v
    };
    match change {
        TaintChange::Add(t) if current.is_empty() => {
            ops.push(json!({"op": "add", "path": "/spec/taints", "value": [taint(t)]}));
        }
        TaintChange::Add(t) => {
            ops.push(json!({"op": "add", "path": "/spec/taints/-", "value": taint(t)}));
        }
        TaintChange::Remove(key) => {
            for (i, t) in current.iter().enumerate().rev() {
                if &t.key == key {
                    ops.push(json!({"op": "test", "path": format!("/spec/taints/{i}/key"), "value": key}));
                    ops.push(json!({"op": "remove", "path": format!("/spec/taints/{i}")}));
                }
            }
        }
    }
    Value::Array(ops)
}

impl ClusterApi for KubeApi {
    async fn list(&self, kind: Kind) -> Result<Listing, ApiError> {
        let c = self.client.clone();
        match kind {
            Kind::Pod => self.list_all(kind, Api::<Pod>::all(c), convert::pod).await,
            Kind::Node => {
                self.list_all(kind, Api::<Node>::all(c), convert::node)
                    .await
            }
            Kind::Pdb => {
                self.list_all(kind, Api::<PodDisruptionBudget>::all(c), convert::pdb)
                    .await
            }
            Kind::DaemonSet => {
                self.list_all(kind, Api::<DaemonSet>::all(c), convert::daemonset)
                    .await
            }
            Kind::NodePool => {
                self.list_all(kind, self.nodepools(), convert::nodepool)
                    .await
            }
            Kind::NodeClaim => self.list_all(kind, self.claims(), convert::nodeclaim).await,
            Kind::StorageClass => {
                self.list_all(kind, Api::<StorageClass>::all(c), convert::storage_class)
                    .await
            }
            Kind::PersistentVolume => {
                self.list_all(
                    kind,
                    Api::<PersistentVolume>::all(c),
                    convert::persistent_volume,
                )
                .await
            }
            Kind::VolumeAttachment => {
                self.list_all(
                    kind,
                    Api::<VolumeAttachment>::all(c),
                    convert::volume_attachment,
                )
                .await
            }
            Kind::PersistentVolumeClaim => {
                self.list_all(
                    kind,
                    Api::<PersistentVolumeClaim>::all(c),
                    convert::persistent_volume_claim,
                )
                .await
            }
        }
    }

    async fn watch(&self, kind: Kind, since: &str) -> Result<Changes, ApiError> {
        let w = self.watch_of(kind);
        let c = self.client.clone();
        let t = self.throttle.clone();
        match kind {
            Kind::Pod => w.poll(kind, since, Api::<Pod>::all(c), t, convert::pod),
            Kind::Node => w.poll(kind, since, Api::<Node>::all(c), t, convert::node),
            Kind::Pdb => w.poll(
                kind,
                since,
                Api::<PodDisruptionBudget>::all(c),
                t,
                convert::pdb,
            ),
            Kind::DaemonSet => w.poll(kind, since, Api::<DaemonSet>::all(c), t, convert::daemonset),
            Kind::NodePool => w.poll(kind, since, self.nodepools(), t, convert::nodepool),
            Kind::NodeClaim => w.poll(kind, since, self.claims(), t, convert::nodeclaim),
            Kind::StorageClass => w.poll(
                kind,
                since,
                Api::<StorageClass>::all(c),
                t,
                convert::storage_class,
            ),
            Kind::PersistentVolume => w.poll(
                kind,
                since,
                Api::<PersistentVolume>::all(c),
                t,
                convert::persistent_volume,
            ),
            Kind::VolumeAttachment => w.poll(
                kind,
                since,
                Api::<VolumeAttachment>::all(c),
                t,
                convert::volume_attachment,
            ),
            Kind::PersistentVolumeClaim => w.poll(
                kind,
                since,
                Api::<PersistentVolumeClaim>::all(c),
                t,
                convert::persistent_volume_claim,
            ),
        }
    }

    async fn write(&self, write: Write) -> Result<Written, ApiError> {
        match write {
            Write::CreateClaim(c) => {
                let t = target(Kind::NodeClaim, &c.name);
                let obj: DynamicObject =
                    serde_json::from_value(convert::new_claim(&c)).map_err(|e| {
                        ApiError::Invalid {
                            target: t.clone(),
                            message: e.to_string(),
                        }
                    })?;
                self.throttle.wait().await;
                let created = self
                    .claims()
                    .create(&PostParams::default(), &obj)
                    .await
                    .map_err(|e| api_error(&t, Kind::NodeClaim, e))?;
                Ok(Written::Object(
                    convert::meta(&created.metadata),
                    convert::nodeclaim(&created),
                ))
            }
            Write::ClaimStatus { name, rv, status } => {
                let t = target(Kind::NodeClaim, &name);
                let body =
                    json!({"metadata": {"resourceVersion": rv}, "status": status.to_object(0.0)});
                self.throttle.wait().await;
                let o = self
                    .claims()
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .map_err(|e| api_error(&t, Kind::NodeClaim, e))?;
                Ok(Written::Object(
                    convert::meta(&o.metadata),
                    convert::nodeclaim(&o),
                ))
            }
            Write::MarkClaim {
                name,
                rv,
                reason,
                deadline,
            } => {
                let body = json!({"metadata": {"resourceVersion": rv, "annotations": {
                    DISRUPTION_REASON_ANNOTATION: reason.as_str(),
                    TERMINATION_DEADLINE_ANNOTATION: deadline.map(format_rfc3339),
                }}});
                self.patch(Kind::NodeClaim, &name, Patch::Merge(body)).await
            }
            w @ Write::Meta { .. } => {
                let rv = w.precondition_rv().map(str::to_string);
                let Write::Meta {
                    kind, name, patch, ..
                } = w
                else {
                    unreachable!("matched above")
                };
                let body = meta_patch(rv.as_deref(), &patch);
                self.patch(kind, &name, Patch::Merge(body)).await
            }
            Write::Taint {
                node,
                current,
                change,
                ..
            } => {
                let p: json_patch::Patch =
                    serde_json::from_value(taint_patch(None, &current, &change)).map_err(|e| {
                        ApiError::Invalid {
                            target: target(Kind::Node, &node),
                            message: e.to_string(),
                        }
                    })?;
                let t = target(Kind::Node, &node);
                self.throttle.wait().await;
                let api: Api<Node> = Api::all(self.client.clone());
                // A failed test (the taints moved since they were read) is a conflict.
                let o = api
                    .patch(&node, &PatchParams::default(), &Patch::<Value>::Json(p))
                    .await
                    .map_err(|e| match api_error(&t, Kind::Node, e) {
                        ApiError::Invalid { target, message } => {
                            ApiError::Conflict { target, message }
                        }
                        other => other,
                    })?;
                Self::object(Kind::Node, serde_json::to_value(o).unwrap_or(Value::Null))
            }
            Write::Delete { kind, key, uid, rv } => self.delete(kind, &key, &uid, &rv).await,
            Write::Evict { pod, uid } => self.evict(&pod, &uid).await,
            Write::Nominate { pod, node } => {
                let t = target(Kind::Pod, &pod);
                let (ns, name) = split(&pod);
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                let body = json!({"status": {"nominatedNodeName": node}});
                self.throttle.wait().await;
                let o = api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .map_err(|e| api_error(&t, Kind::Pod, e))?;
                Ok(Written::Object(
                    convert::meta(&o.metadata),
                    convert::pod(&o),
                ))
            }
            Write::PoolStatus { name, conditions } => {
                let t = target(Kind::NodePool, &name);
                let body = json!({"status": {"conditions": conditions}});
                self.throttle.wait().await;
                self.nodepools()
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .map_err(|e| api_error(&t, Kind::NodePool, e))?;
                Ok(Written::Done)
            }
            Write::CreatePod(p) => {
                let key = p.key();
                let t = target(Kind::Pod, &key);
                let body: Pod =
                    serde_json::from_value(convert::new_headroom_pod(&p)).map_err(|e| {
                        ApiError::Invalid {
                            target: t.clone(),
                            message: e.to_string(),
                        }
                    })?;
                let api: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace);
                self.throttle.wait().await;
                let created = api
                    .create(&PostParams::default(), &body)
                    .await
                    .map_err(|e| api_error(&t, Kind::Pod, e))?;
                Ok(Written::Object(
                    convert::meta(&created.metadata),
                    convert::pod(&created),
                ))
            }
            Write::Event(e) => self.event(e).await,
            Write::CreateLease(l) => {
                self.throttle.wait().await;
                let o = self
                    .leases()
                    .create(&PostParams::default(), &self.lease_object(&l, None))
                    .await
                    .map_err(|e| api_error("leases", Kind::Node, e))?;
                Ok(Written::Lease(
                    o.metadata.resource_version.unwrap_or_default(),
                ))
            }
            Write::UpdateLease { lease, rv } => {
                self.throttle.wait().await;
                let name = self.settings.lease_name.clone();
                let o = self
                    .leases()
                    .replace(
                        &name,
                        &PostParams::default(),
                        &self.lease_object(&lease, Some(&rv)),
                    )
                    .await
                    .map_err(|e| api_error("leases", Kind::Node, e))?;
                Ok(Written::Lease(
                    o.metadata.resource_version.unwrap_or_default(),
                ))
            }
        }
    }

    async fn get_lease(&self) -> Result<Option<(String, Lease)>, ApiError> {
        self.throttle.wait().await;
        let got = self
            .leases()
            .get_opt(&self.settings.lease_name)
            .await
            .map_err(|e| api_error("leases", Kind::Node, e))?;
        Ok(got.map(|l| {
            let rv = l.metadata.resource_version.clone().unwrap_or_default();
            let s = l.spec.unwrap_or_default();
            (
                rv,
                Lease {
                    holder: s.holder_identity.unwrap_or_default(),
                    renewed_at: s.renew_time.as_ref().map(unix).unwrap_or(0.0),
                    acquired_at: s.acquire_time.as_ref().map(unix).unwrap_or(0.0),
                    duration_seconds: s.lease_duration_seconds.unwrap_or(15) as f64,
                    transitions: s.lease_transitions.unwrap_or(0).max(0) as u64,
                },
            )
        }))
    }
}

#[cfg(test)]
mod tests;
