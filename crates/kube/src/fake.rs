//! The fake cloud on a real cluster (Karpenter's kwok provider is the model).
//!
//! - [`ClusterFakeCloud`] is a `CloudProvider` whose machines are `FakeInstance` objects in
//!   the cluster, so every capstan process — the leader and whoever takes over — sees one
//!   cloud. Offerings, prices and launch draws come from the deterministic fake cloud; a
//!   launch is idempotent across processes because the object's name is derived from the
//!   claim's client token (a second create answers AlreadyExists).
//! - [`FakeNodes`] plays the instances' kubelets: once an instance's boot delay has passed, it
//!   creates its Node — named after the claim, annotated `kwok.x-k8s.io/node: fake` so kwok
//!   keeps it Ready and runs its pods, with the providerID, capacity and allocatable from the
//!   catalog, every label the claim resolved (capstan's and Karpenter's spellings), and the
//!   `karpenter.sh/unregistered` taint until capstan adopts it. A Node whose instance is gone
//!   is deleted.

use crate::api::capstan_resource;
use crate::client::{Throttle, api_error};
use crate::resources::{
    FAKE_NODE_LABEL, FakeInstanceSpec, FakeNodeClassSpec, KWOK_ANNOTATION, TaintRecord,
};
use capstan_cloud::{
    Clock, CloudError, CloudProvider, Drift, Instance, InstanceState, InterruptionEvent,
    LaunchRequest, RepairPolicy,
};
use capstan_controller::api::Kind;
use capstan_fake_cloud::FakeCloud;
use capstan_model::labels::{self, UNREGISTERED_TAINT};
use capstan_model::{InstanceType, NodePool, Resources};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a looked-up node class is trusted.
const CLASS_TTL: f64 = 10.0;
/// Boot delay when a class says none.
const DEFAULT_BOOT_SECONDS: f64 = 5.0;

/// The name of the FakeInstance a client token launches.
pub fn instance_name(client_token: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in client_token.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fi-{h:016x}")
}

/// The instance id in a fake provider id (`fake:///zone/i-…`).
fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}

fn instances_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &capstan_resource("FakeInstance", "fakeinstances"),
    )
}

fn classes_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &capstan_resource("FakeNodeClass", "fakenodeclasses"),
    )
}

fn cloud_error(e: capstan_controller::api::ApiError) -> CloudError {
    CloudError::Transient {
        message: e.to_string(),
    }
}

fn spec_of(d: &DynamicObject) -> Option<FakeInstanceSpec> {
    serde_json::from_value(d.data.get("spec")?.clone()).ok()
}

fn instance_of(s: &FakeInstanceSpec, now: f64) -> Instance {
    let state = match s.ready_at {
        Some(r) if r <= now => InstanceState::Running,
        _ => InstanceState::Pending,
    };
    Instance {
        provider_id: s.provider_id.clone(),
        claim_name: s.claim_name.clone(),
        nodepool: s.nodepool.clone(),
        client_token: s.client_token.clone(),
        instance_type: s.instance_type.clone(),
        zone: s.zone.clone(),
        capacity_type: s.capacity_type.clone(),
        price: s.price_usd_per_hour,
        labels: Arc::new(s.labels.clone()),
        state,
        launched_at: Duration::from_secs_f64(s.launched_at.max(0.0)),
        ready_at: s.ready_at.map(|r| Duration::from_secs_f64(r.max(0.0))),
    }
}

/// Node classes looked up, by name: when, and the spec (`None`: not found).
type ClassCache = Arc<Mutex<BTreeMap<String, (f64, Option<FakeNodeClassSpec>)>>>;

/// A CloudProvider whose instances live in the cluster as FakeInstance objects.
#[derive(Clone)]
pub struct ClusterFakeCloud {
    client: kube::Client,
    throttle: Throttle,
    inner: FakeCloud,
    clock: Arc<dyn Clock>,
    classes: ClassCache,
}

impl ClusterFakeCloud {
    pub fn new(
        client: kube::Client,
        throttle: Throttle,
        inner: FakeCloud,
        clock: Arc<dyn Clock>,
    ) -> Self {
        ClusterFakeCloud {
            client,
            throttle,
            inner,
            clock,
            classes: Arc::default(),
        }
    }

    fn now(&self) -> f64 {
        self.clock.now().as_secs_f64()
    }

    /// The FakeNodeClass a NodePool names (`None`: it names none, the defaults apply), or why
    /// the pool cannot launch.
    async fn class(
        &self,
        r: Option<&capstan_model::nodepool::NodeClassRef>,
    ) -> Result<Option<FakeNodeClassSpec>, CloudError> {
        let Some(r) = r else {
            return Ok(None);
        };
        if r.group != crate::resources::GROUP || r.kind != "FakeNodeClass" {
            return Err(CloudError::Invalid {
                message: format!(
                    "node class {}/{} {} is not served by the fake provider (it serves capstan.dev/FakeNodeClass)",
                    r.group, r.kind, r.name
                ),
            });
        }
        let now = self.now();
        if let Some((at, spec)) = self.classes.lock().expect("classes").get(&r.name) {
            if now - at < CLASS_TTL {
                return spec.clone().map(Some).ok_or_else(|| CloudError::Invalid {
                    message: format!("FakeNodeClass {} not found", r.name),
                });
            }
        }
        self.throttle.wait().await;
        let got = classes_api(&self.client)
            .get_opt(&r.name)
            .await
            .map_err(|e| cloud_error(api_error(&r.name, Kind::NodePool, e)))?;
        let spec = got.map(|d| {
            d.data
                .get("spec")
                .cloned()
                .and_then(|s| serde_json::from_value::<FakeNodeClassSpec>(s).ok())
                .unwrap_or_default()
        });
        self.classes
            .lock()
            .expect("classes")
            .insert(r.name.clone(), (now, spec.clone()));
        spec.map(Some).ok_or_else(|| CloudError::Invalid {
            message: format!("FakeNodeClass {} not found", r.name),
        })
    }

    async fn get_instance(&self, name: &str) -> Result<Option<FakeInstanceSpec>, CloudError> {
        self.throttle.wait().await;
        let got = instances_api(&self.client)
            .get_opt(name)
            .await
            .map_err(|e| cloud_error(api_error(name, Kind::Node, e)))?;
        Ok(got.as_ref().and_then(spec_of))
    }

    async fn list_specs(
        &self,
        selector: Option<&str>,
    ) -> Result<Vec<(String, FakeInstanceSpec)>, CloudError> {
        let mut lp = ListParams::default();
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        self.throttle.wait().await;
        let list = instances_api(&self.client)
            .list(&lp)
            .await
            .map_err(|e| cloud_error(api_error("fakeinstances", Kind::Node, e)))?;
        Ok(list
            .items
            .iter()
            .filter_map(|d| Some((d.metadata.name.clone()?, spec_of(d)?)))
            .collect())
    }
}

impl CloudProvider for ClusterFakeCloud {
    fn provider_name(&self) -> &'static str {
        "fake"
    }

    async fn create(&self, req: &LaunchRequest) -> Result<Instance, CloudError> {
        let name = instance_name(&req.client_token);
        if let Some(s) = self.get_instance(&name).await? {
            return Ok(instance_of(&s, self.now()));
        }
        let class = self
            .class(req.node_class.as_ref())
            .await?
            .unwrap_or_default();
        let mut inst = self.inner.create(req).await?;
        let boot = class
            .boot_delay
            .as_deref()
            .and_then(|d| capstan_model::time::parse_duration(d).ok().flatten())
            .map(|s| s as f64)
            .unwrap_or(DEFAULT_BOOT_SECONDS);
        let devices = class
            .device_plugin_delay
            .as_deref()
            .and_then(|d| capstan_model::time::parse_duration(d).ok().flatten())
            .map(|s| s as f64)
            .filter(|&s| s > 0.0);
        let launched = self.now();
        let ready_at = inst.ready_at.map(|_| launched + boot);
        let mut labels = (*inst.labels).clone();
        for (k, v) in req.requirements.single_values() {
            labels.entry(k).or_insert(v);
        }
        let spec = FakeInstanceSpec {
            provider_id: inst.provider_id.clone(),
            claim_name: req.claim_name.clone(),
            nodepool: req.nodepool.clone(),
            client_token: req.client_token.clone(),
            instance_type: inst.instance_type.clone(),
            zone: inst.zone.clone(),
            capacity_type: inst.capacity_type.clone(),
            price_usd_per_hour: inst.price,
            launched_at: launched,
            ready_at,
            devices_at: ready_at.zip(devices).map(|(r, d)| r + d),
            node_name: req.claim_name.clone(),
            labels,
            taints: req.taints.iter().map(TaintRecord::from).collect(),
        };
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": crate::resources::API_VERSION,
            "kind": "FakeInstance",
            "metadata": {"name": name, "labels": {"capstan.dev/instance-id": instance_id(&inst.provider_id),
                                                   "karpenter.sh/nodepool": req.nodepool}},
            "spec": spec,
        }))
        .map_err(|e| CloudError::Invalid {
            message: e.to_string(),
        })?;
        self.throttle.wait().await;
        match instances_api(&self.client)
            .create(&PostParams::default(), &obj)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Another process launched it first: that one is the instance.
                if let Some(s) = self.get_instance(&name).await? {
                    return Ok(instance_of(&s, self.now()));
                }
            }
            Err(e) => return Err(cloud_error(api_error(&name, Kind::Node, e))),
        }
        inst.launched_at = Duration::from_secs_f64(launched);
        inst.ready_at = spec.ready_at.map(Duration::from_secs_f64);
        inst.labels = Arc::new(spec.labels);
        Ok(inst)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let selector = format!("capstan.dev/instance-id={}", instance_id(provider_id));
        let found = self.list_specs(Some(&selector)).await?;
        let _ = self.inner.delete(provider_id).await;
        let Some((name, _)) = found
            .into_iter()
            .find(|(_, s)| s.provider_id == provider_id)
        else {
            return Err(CloudError::NotFound {
                provider_id: provider_id.into(),
            });
        };
        self.throttle.wait().await;
        match instances_api(&self.client)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(CloudError::NotFound {
                provider_id: provider_id.into(),
            }),
            Err(e) => Err(cloud_error(api_error(&name, Kind::Node, e))),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let selector = format!("capstan.dev/instance-id={}", instance_id(provider_id));
        let now = self.now();
        self.list_specs(Some(&selector))
            .await?
            .into_iter()
            .find(|(_, s)| s.provider_id == provider_id)
            .map(|(_, s)| instance_of(&s, now))
            .ok_or_else(|| CloudError::NotFound {
                provider_id: provider_id.into(),
            })
    }

    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        let now = self.now();
        Ok(self
            .list_specs(None)
            .await?
            .into_iter()
            .map(|(_, s)| Arc::new(instance_of(&s, now)))
            .collect())
    }

    async fn instance_types(&self, nodepool: &NodePool) -> Result<Vec<InstanceType>, CloudError> {
        self.class(nodepool.spec.template.spec.node_class_ref.as_ref())
            .await?;
        self.inner.instance_types(nodepool).await
    }

    async fn is_drifted(&self, _instance: &Instance) -> Result<Option<Drift>, CloudError> {
        Ok(None)
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }

    async fn interruptions(&self) -> Result<Vec<InterruptionEvent>, CloudError> {
        Ok(Vec::new())
    }

    async fn ack_interruptions(&self, _events: &[InterruptionEvent]) -> Result<(), CloudError> {
        Ok(())
    }
}

fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    capstan_model::claim::quantities(r)
        .into_iter()
        .map(|(k, v)| {
            let s = match v {
                capstan_model::nodepool::QuantityValue::Str(s) => s,
                capstan_model::nodepool::QuantityValue::Int(i) => i.to_string(),
                capstan_model::nodepool::QuantityValue::Float(f) => f.to_string(),
            };
            (k, Quantity(s))
        })
        .collect()
}

/// Annotation on a fake Node whose extended resources are not registered yet: the Unix
/// seconds the device plugin registers them.
pub const DEVICES_AT_ANNOTATION: &str = "capstan.dev/device-plugin-at";

/// The Node a booted instance registers as, at `now`: until the instance's `devices_at`, its
/// extended resources read 0, as a kubelet reports them before the device plugin registers.
pub fn node_for(s: &FakeInstanceSpec, t: Option<&InstanceType>, now: f64) -> Value {
    let mut l = s.labels.clone();
    l.insert(labels::HOSTNAME.into(), s.node_name.clone());
    l.insert(labels::INSTANCE_TYPE.into(), s.instance_type.clone());
    l.insert(labels::ZONE.into(), s.zone.clone());
    l.insert(labels::CAPACITY_TYPE.into(), s.capacity_type.clone());
    l.insert(labels::NODEPOOL.into(), s.nodepool.clone());
    if let Some(region) = s.zone.get(..s.zone.len().saturating_sub(1)) {
        l.entry(labels::REGION.into()).or_insert(region.to_string());
    }
    let mut l = labels::with_karpenter_spellings(&l);
    l.insert(FAKE_NODE_LABEL.into(), "true".into());
    let mut taints = vec![json!({"key": UNREGISTERED_TAINT, "effect": "NoExecute"})];
    for t in &s.taints {
        let mut v = json!({"key": t.key, "effect": t.effect});
        if !t.value.is_empty() {
            v["value"] = json!(t.value);
        }
        taints.push(v);
    }
    let (mut capacity, mut allocatable) = match t {
        Some(t) => (quantities(&t.capacity), quantities(&t.allocatable)),
        None => (BTreeMap::new(), BTreeMap::new()),
    };
    let mut annotations = json!({KWOK_ANNOTATION: "fake", "capstan.dev/fake-instance": instance_name(&s.client_token)});
    if let (Some(at), Some(t)) = (s.devices_at.filter(|&at| at > now), t) {
        for k in t.allocatable.extended.keys() {
            allocatable.insert(k.clone(), Quantity("0".into()));
            capacity.insert(k.clone(), Quantity("0".into()));
        }
        annotations[DEVICES_AT_ANNOTATION] = json!(format!("{at:.3}"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": s.node_name,
            "labels": l,
            "annotations": annotations,
        },
        "spec": {"providerID": s.provider_id, "taints": taints},
        "status": {"capacity": capacity, "allocatable": allocatable,
                   "nodeInfo": {"architecture": l.get(labels::ARCH).cloned().unwrap_or_default(),
                                "operatingSystem": l.get(labels::OS).cloned().unwrap_or_default(),
                                "kubeletVersion": "fake", "kubeProxyVersion": "fake",
                                "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                                "machineID": "", "osImage": "", "systemUUID": ""}},
    })
}

/// The instances' kubelets: Nodes appear once instances boot and go when they are gone.
pub struct FakeNodes {
    client: kube::Client,
    throttle: Throttle,
    types: Vec<InstanceType>,
    clock: Arc<dyn Clock>,
}

impl FakeNodes {
    pub fn new(
        client: kube::Client,
        throttle: Throttle,
        types: Vec<InstanceType>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        FakeNodes {
            client,
            throttle,
            types,
            clock,
        }
    }

    /// One pass: create the Nodes of booted instances, delete the Nodes of gone ones. Returns
    /// how many Nodes it created and deleted.
    pub async fn reconcile(&self) -> Result<(usize, usize), capstan_controller::api::ApiError> {
        let now = self.clock.now().as_secs_f64();
        self.throttle.wait().await;
        let instances = instances_api(&self.client)
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error("fakeinstances", Kind::Node, e))?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.throttle.wait().await;
        let existing = nodes
            .list_metadata(&ListParams::default().labels(&format!("{FAKE_NODE_LABEL}=true")))
            .await
            .map_err(|e| api_error("nodes", Kind::Node, e))?;
        let have: BTreeMap<String, bool> = existing
            .items
            .iter()
            .filter_map(|n| {
                Some((
                    n.metadata.name.clone()?,
                    n.metadata.deletion_timestamp.is_some(),
                ))
            })
            .collect();
        // Nodes whose device plugin has not registered their extended resources yet.
        let devices_pending: std::collections::BTreeSet<String> = existing
            .items
            .iter()
            .filter(|n| {
                n.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(DEVICES_AT_ANNOTATION))
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let mut wanted = std::collections::BTreeSet::new();
        let mut created = 0;
        for d in &instances.items {
            let Some(s) = spec_of(d) else {
                continue;
            };
            wanted.insert(s.node_name.clone());
            let t = self.types.iter().find(|t| t.name == s.instance_type);
            if devices_pending.contains(&s.node_name) && s.devices_at.is_none_or(|d| d <= now) {
                if let Some(t) = t {
                    self.register_devices(&nodes, &s.node_name, t).await?;
                }
                continue;
            }
            if have.contains_key(&s.node_name) || s.ready_at.is_none_or(|r| r > now) {
                continue;
            }
            let node: Node = serde_json::from_value(node_for(&s, t, now))
                .map_err(|e| capstan_controller::api::ApiError::Unavailable(e.to_string()))?;
            self.throttle.wait().await;
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => created += 1,
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(api_error(&s.node_name, Kind::Node, e)),
            }
        }
        let mut deleted = 0;
        for (name, deleting) in &have {
            if wanted.contains(name) || *deleting {
                continue;
            }
            self.throttle.wait().await;
            match nodes.delete(name, &DeleteParams::default()).await {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(api_error(name, Kind::Node, e)),
            }
        }
        Ok((created, deleted))
    }

    /// The device plugin registers: the node's extended resources get their full amounts in
    /// its status, then the annotation that said they were coming goes.
    async fn register_devices(
        &self,
        nodes: &Api<Node>,
        name: &str,
        t: &InstanceType,
    ) -> Result<(), capstan_controller::api::ApiError> {
        let pick = |r: &Resources| {
            quantities(r)
                .into_iter()
                .filter(|(k, _)| t.allocatable.extended.contains_key(k))
                .collect::<BTreeMap<_, _>>()
        };
        let status =
            json!({"status": {"capacity": pick(&t.capacity), "allocatable": pick(&t.allocatable)}});
        self.throttle.wait().await;
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| api_error(name, Kind::Node, e))?;
        let meta = json!({"metadata": {"annotations": {DEVICES_AT_ANNOTATION: null}}});
        self.throttle.wait().await;
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&meta))
            .await
            .map_err(|e| api_error(name, Kind::Node, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_booted_instances_node_carries_both_spellings_the_kwok_annotation_and_the_unregistered_taint()
     {
        let catalog = capstan_model::Catalog::builtin();
        let t = catalog
            .instance_types
            .iter()
            .find(|t| t.name == "m7i.large")
            .unwrap();
        let mut labels = t.labels.clone();
        labels.insert("team".into(), "a".into());
        let s = FakeInstanceSpec {
            provider_id: "fake:///us-east-1a/i-1".into(),
            claim_name: "default-1".into(),
            nodepool: "default".into(),
            client_token: "default-1-u".into(),
            instance_type: "m7i.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "spot".into(),
            price_usd_per_hour: 0.03,
            launched_at: 0.0,
            ready_at: Some(5.0),
            devices_at: None,
            node_name: "default-1".into(),
            labels,
            taints: vec![],
        };
        let n = node_for(&s, Some(t), 5.0);
        let l = &n["metadata"]["labels"];
        assert_eq!(l["karpenter.sh/capacity-type"], "spot");
        assert_eq!(l["capstan.dev/capacity-type"], "spot");
        assert_eq!(l["karpenter.sh/nodepool"], "default");
        assert_eq!(l["karpenter.k8s.aws/instance-family"], "m7i");
        assert_eq!(l["topology.kubernetes.io/region"], "us-east-1");
        assert_eq!(l["team"], "a");
        assert_eq!(n["metadata"]["annotations"][KWOK_ANNOTATION], "fake");
        assert_eq!(n["spec"]["taints"][0]["key"], UNREGISTERED_TAINT);
        assert_eq!(n["status"]["allocatable"]["pods"], "29");
        let _: Node = serde_json::from_value(n).unwrap();
    }

    #[test]
    fn a_gpu_nodes_gpus_read_zero_until_its_device_plugin_registers_them() {
        let catalog = capstan_model::Catalog::builtin();
        let t = catalog
            .instance_types
            .iter()
            .find(|t| t.allocatable.get("nvidia.com/gpu") > 0)
            .unwrap();
        let s = FakeInstanceSpec {
            provider_id: "fake:///us-east-1a/i-2".into(),
            client_token: "gpu-1-u".into(),
            instance_type: t.name.clone(),
            zone: "us-east-1a".into(),
            ready_at: Some(5.0),
            devices_at: Some(25.0),
            node_name: "gpu-1".into(),
            ..Default::default()
        };
        // (now, GPUs in allocatable, annotation)
        for (now, gpus, pending) in [(5.0, "0", true), (25.0, "", false)] {
            let n = node_for(&s, Some(t), now);
            let want = if gpus.is_empty() {
                t.allocatable.get("nvidia.com/gpu").to_string()
            } else {
                gpus.to_string()
            };
            assert_eq!(n["status"]["allocatable"]["nvidia.com/gpu"], want, "{now}");
            assert_eq!(n["status"]["capacity"]["nvidia.com/gpu"], want, "{now}");
            assert_eq!(
                n["metadata"]["annotations"]
                    .get(DEVICES_AT_ANNOTATION)
                    .is_some(),
                pending,
                "{now}"
            );
            assert_ne!(n["status"]["allocatable"]["cpu"], "0");
        }
    }

    #[test]
    fn one_client_token_names_one_instance() {
        assert_eq!(instance_name("a-1"), instance_name("a-1"));
        assert_ne!(instance_name("a-1"), instance_name("a-2"));
        assert_eq!(instance_id("fake:///us-east-1a/i-00ff"), "i-00ff");
    }
}
