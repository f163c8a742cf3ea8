//! Registration and initialization of a launched claim's node.
//!
//! - **Register**: the node whose providerID is the claim's gets the claim's labels (in
//!   capstan's and Karpenter's spellings), its taints and startup taints where missing, the
//!   NodePool template hash, and capstan's termination finalizer; then the
//!   `karpenter.sh/unregistered` taint comes off and the claim is Registered. A claim whose
//!   node has not appeared within `registration_ttl` is replaced.
//! - **Initialize**: once the node is Ready and its startup taints are gone, it is labelled
//!   `karpenter.sh/initialized=true` and the claim is Initialized (and may be disrupted).

use crate::Action;
use crate::api::{ClusterApi, EventType, Kind, MetaPatch, TaintChange, Write};
use crate::context::Ctx;
use capstan_cloud::{CloudProvider, OfferingKey};
use capstan_disrupt::{NODEPOOL_HASH, NODEPOOL_HASH_VERSION, template_hash};
use capstan_model::claim::TERMINATION_FINALIZER;
use capstan_model::disruption::Reason;
use capstan_model::labels::{self, UNREGISTERED_TAINT};
use capstan_model::nodepool::TEMPLATE_HASH_VERSION;
use capstan_model::{Node, NodeClaim, NodePool, Taint};

/// The metadata a node needs to be adopted for `claim`: labels it lacks (both spellings, and
/// Karpenter's `karpenter.sh/registered`), the template hash, and the finalizer. Empty when
/// it has all of them.
pub fn adoption_patch(
    node: &Node,
    claim: &NodeClaim,
    pool: Option<&NodePool>,
    zone_id: Option<&str>,
) -> MetaPatch {
    let mut patch = MetaPatch::default();
    // As Karpenter's AWS provider, the node carries its zone's ID where the catalog knows it.
    if let Some(id) = zone_id
        && node.labels.get(labels::ZONE_ID).map(String::as_str) != Some(id)
    {
        patch
            .labels
            .insert(labels::ZONE_ID.into(), Some(id.to_string()));
    }
    if node
        .labels
        .get(labels::REGISTERED_LABEL)
        .map(String::as_str)
        != Some("true")
    {
        patch
            .labels
            .insert(labels::REGISTERED_LABEL.into(), Some("true".into()));
    }
    for (k, v) in &claim.labels {
        if node.labels.get(k) != Some(v) {
            patch.labels.insert(k.clone(), Some(v.clone()));
            if let Some(alias) = labels::karpenter_spelling(k) {
                patch.labels.insert(alias, Some(v.clone()));
            }
        }
    }
    if let Some(pool) = pool {
        let hash = template_hash(pool);
        if node.annotations.get(NODEPOOL_HASH) != Some(&hash) {
            patch.annotations.insert(NODEPOOL_HASH.into(), Some(hash));
        }
        if node
            .annotations
            .get(NODEPOOL_HASH_VERSION)
            .map(String::as_str)
            != Some(TEMPLATE_HASH_VERSION)
        {
            patch.annotations.insert(
                NODEPOOL_HASH_VERSION.into(),
                Some(TEMPLATE_HASH_VERSION.into()),
            );
        }
    }
    if !node.finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        let mut f = node.finalizers.clone();
        f.push(TERMINATION_FINALIZER.into());
        patch.finalizers = Some(f);
    }
    patch
}

/// Taints of the claim (and its startup taints) the node does not carry yet.
pub fn missing_taints(node: &Node, claim: &NodeClaim) -> Vec<Taint> {
    claim
        .taints
        .iter()
        .chain(&claim.startup_taints)
        .filter(|t| {
            !node
                .taints
                .iter()
                .any(|n| n.key == t.key && n.effect == t.effect)
        })
        .cloned()
        .collect()
}

/// Whether a claim's node is initialized: Ready, its startup taints gone, and every extended
/// resource its pods asked for in its allocatable — a GPU node's device plugin registers
/// `nvidia.com/gpu` some time after the kubelet is Ready (Karpenter's
/// `RequestedResourcesRegistered`).
pub fn initialized(node: &Node, claim: &NodeClaim) -> bool {
    node.ready
        && !claim
            .startup_taints
            .iter()
            .any(|s| node.taints.iter().any(|t| t.key == s.key))
        && unregistered_resource(node, claim).is_none()
}

/// The first extended resource the claim's pods requested that the node's allocatable does
/// not have yet.
pub fn unregistered_resource<'c>(node: &Node, claim: &'c NodeClaim) -> Option<&'c str> {
    claim
        .requests
        .extended
        .iter()
        .find(|(k, v)| **v > 0 && node.allocatable.get(k) <= 0)
        .map(|(k, _)| k.as_str())
}

pub(crate) async fn register<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
    c: &NodeClaim,
) {
    let pid = c.status.provider_id.clone().unwrap_or_default();
    let Some(node_name) = cx.cache().node_by_provider(&pid).map(str::to_string) else {
        let launched = c.status.launched_at.unwrap_or(c.created);
        if now - launched > cx.config.registration_ttl {
            // As Karpenter, an offering whose instance never joined is not tried again for
            // a while: the replacement goes to another type, zone or capacity type.
            if let (Some(t), Some(z), Some(ct)) = (
                &c.status.instance_type,
                &c.status.zone,
                &c.status.capacity_type,
            ) {
                cx.s.catalog.mark_unavailable(
                    OfferingKey {
                        instance_type: t.clone(),
                        zone: z.clone(),
                        capacity_type: ct.clone(),
                    },
                    now + cx.config.unavailable_ttl,
                );
            }
            cx.record(
                now,
                Action::NotRegistered {
                    claim: c.name.clone(),
                },
            );
            cx.begin_deletion(&c.name, Reason::NotRegistered, None)
                .await;
        }
        return;
    };
    let Some(node) = cx.cache().node(&node_name).cloned() else {
        return;
    };
    let pool = cx.cache().nodepool(&c.nodepool).cloned();
    let zone_id = c.status.zone.as_ref().and_then(|z| {
        let t = c.status.instance_type.as_deref()?;
        let (_, t) =
            capstan_model::catalog::type_for_pool(cx.s.catalog.cached(), t, Some(&c.nodepool))?;
        t.offerings
            .iter()
            .find(|o| o.zone == *z)
            .and_then(|o| o.zone_id.clone())
    });
    let patch = adoption_patch(&node, c, pool.as_deref(), zone_id.as_deref());
    if !patch.is_empty() {
        let Some(meta) = cx.cache().node_meta(&node_name).cloned() else {
            return;
        };
        let w = Write::Meta {
            kind: Kind::Node,
            name: node_name.clone(),
            rv: meta.resource_version,
            patch,
        };
        if cx.write(w).await.is_err() {
            return;
        }
    }
    for t in missing_taints(&node, c) {
        if !cx.taint(&node_name, TaintChange::Add(t)).await {
            return;
        }
    }
    nominate(cx, &c.name, &node_name, now).await;
    if node.taints.iter().any(|t| t.key == UNREGISTERED_TAINT)
        && !cx
            .taint(&node_name, TaintChange::Remove(UNREGISTERED_TAINT.into()))
            .await
    {
        return;
    }
    let mut status = c.status.clone();
    status.registered_at = Some(now);
    status.node_name = Some(node_name.clone());
    if cx.claim_status(&c.name, status).await {
        cx.s.metrics
            .nodes_created
            .with_label_values(&[&c.nodepool])
            .inc();
        let note = format!("Node {node_name} registered for NodeClaim {}", c.name);
        cx.event(
            (Kind::NodeClaim, c.name.clone()),
            EventType::Normal,
            "Registered",
            note.clone(),
        )
        .await;
        cx.event(
            (Kind::Node, node_name.clone()),
            EventType::Normal,
            "Registered",
            note,
        )
        .await;
        cx.record(
            now,
            Action::Registered {
                claim: c.name.clone(),
                node: node_name,
            },
        );
    }
}

/// How long a pod capstan nominated may stay pending on its initialized node before the
/// nomination is cleared: kube-scheduler retries a pod as soon as a node changes, so one that
/// fits binds within a second or two of its node's Ready.
pub const NOMINATION_GRACE: f64 = 15.0;
/// How long a nomination stays when its node never initializes (the claim is replaced after
/// `registration_ttl` anyway; this bounds the pods' wait on a node that stays NotReady).
pub const NOMINATION_TTL: f64 = 120.0;

/// Sets `status.nominatedNodeName` of the pending pods planned onto `claim` to its node as
/// it registers, before the node takes any pod. kube-scheduler's nominator then holds their
/// room on that node against pods of their priority or lower, instead of binding whichever
/// pod its queue holds first: without it, pods with no constraints took the room planned
/// for zone-spread pods on the first nodes up, and those waited for a second launch. This is
/// the use KEP-5278 gives the field. kube-scheduler 1.34 clears it when the pod fails a
/// scheduling cycle (unless `NominatedNodeNameForExpectation` is on); capstan clears those
/// it set that did not bind ([`clear_nominations`]).
async fn nominate<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    claim: &str,
    node: &str,
    now: f64,
) {
    let pods: Vec<String> =
        cx.s.nominations
            .pods_of(claim)
            .filter(|k| {
                cx.s.cache
                    .pod(k)
                    .is_some_and(|p| p.node_name.is_none() && p.nominated_node.is_none())
            })
            .cloned()
            .collect();
    for pod in pods {
        let w = Write::Nominate {
            pod: pod.clone(),
            node: Some(node.to_string()),
        };
        if cx.write(w).await.is_ok() {
            cx.s.nominated
                .insert(pod, (claim.to_string(), node.to_string(), now));
        }
    }
}

/// Clears the nominations capstan made whose pods did not bind: their node is gone or being
/// deleted, it has been initialized for [`NOMINATION_GRACE`], or it never initialized within
/// [`NOMINATION_TTL`]. The pod is then pending without a nomination, and the provisioner
/// plans for it again. Nominations that bound, whose pod is gone, or that someone else has
/// changed since (kube-scheduler's preemption) are forgotten.
pub(crate) async fn clear_nominations<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
) {
    if cx.s.nominated.is_empty() {
        return;
    }
    let cache = &cx.s.cache;
    let mut clear = Vec::new();
    cx.s.nominated.retain(|pod, (claim, node, at)| {
        let Some(p) = cache.pod(pod) else {
            return false;
        };
        if p.node_name.is_some() || p.nominated_node.as_deref() != Some(node.as_str()) {
            return false;
        }
        let node_live = cache.node(node).is_some_and(|n| !n.deleting);
        let initialized = cache
            .claim(claim)
            .and_then(|c| c.status.initialized_at)
            .map(|t| t.max(*at));
        let stale = !node_live
            || initialized.is_some_and(|t| now - t >= NOMINATION_GRACE)
            || now - *at >= NOMINATION_TTL;
        if stale {
            clear.push(pod.clone());
        }
        !stale
    });
    for pod in clear {
        let _ = cx.write(Write::Nominate { pod, node: None }).await;
    }
}

pub(crate) async fn initialize<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
    c: &NodeClaim,
) {
    let Some(node) = c.status.node_name.as_ref().and_then(|n| cx.cache().node(n)) else {
        return;
    };
    if !initialized(node, c) {
        return;
    }
    let node_name = node.name.clone();
    if node
        .labels
        .get(labels::INITIALIZED_LABEL)
        .map(String::as_str)
        != Some("true")
    {
        let Some(meta) = cx.cache().node_meta(&node_name).cloned() else {
            return;
        };
        let mut patch = MetaPatch::default();
        patch
            .labels
            .insert(labels::INITIALIZED_LABEL.into(), Some("true".into()));
        let w = Write::Meta {
            kind: Kind::Node,
            name: node_name,
            rv: meta.resource_version,
            patch,
        };
        if cx.write(w).await.is_err() {
            return;
        }
    }
    let mut status = c.status.clone();
    status.initialized_at = Some(now);
    if cx.claim_status(&c.name, status).await {
        cx.record(
            now,
            Action::Initialized {
                claim: c.name.clone(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::taints::Effect;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: Effect::NoSchedule,
        }
    }

    fn claim() -> NodeClaim {
        NodeClaim {
            name: "c".into(),
            nodepool: "default".into(),
            labels: [
                (labels::NODEPOOL.to_string(), "default".to_string()),
                ("team".to_string(), "a".to_string()),
            ]
            .into(),
            taints: vec![taint("dedicated")],
            startup_taints: vec![taint("init")],
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_node_gets_the_claims_labels_in_both_spellings_the_hash_and_the_finalizer() {
        let node = Node {
            name: "n".into(),
            ..Default::default()
        };
        let pool = NodePool::default_pool();
        let p = adoption_patch(&node, &claim(), Some(&pool), Some("use1-az4"));
        assert_eq!(p.labels[labels::NODEPOOL], Some("default".into()));
        assert_eq!(p.labels[labels::KARPENTER_NODEPOOL], Some("default".into()));
        assert_eq!(p.labels["team"], Some("a".into()));
        assert_eq!(p.labels[labels::REGISTERED_LABEL], Some("true".into()));
        assert_eq!(p.labels[labels::ZONE_ID], Some("use1-az4".into()));
        assert_eq!(p.annotations[NODEPOOL_HASH], Some(template_hash(&pool)));
        assert_eq!(
            p.annotations[NODEPOOL_HASH_VERSION].as_deref(),
            Some(TEMPLATE_HASH_VERSION)
        );
        assert_eq!(p.finalizers, Some(vec![TERMINATION_FINALIZER.to_string()]));
    }

    #[test]
    fn an_adopted_node_needs_no_patch() {
        let pool = NodePool::default_pool();
        let c = claim();
        let mut node = Node {
            name: "n".into(),
            labels: c.labels.clone(),
            finalizers: vec!["other".into(), TERMINATION_FINALIZER.into()],
            ..Default::default()
        };
        node.annotations
            .insert(NODEPOOL_HASH.into(), template_hash(&pool));
        node.annotations
            .insert(NODEPOOL_HASH_VERSION.into(), TEMPLATE_HASH_VERSION.into());
        node.labels
            .insert(labels::REGISTERED_LABEL.into(), "true".into());
        assert!(adoption_patch(&node, &c, Some(&pool), None).is_empty());
    }

    #[test]
    fn a_node_is_initialized_when_ready_with_its_startup_taints_gone_and_its_gpus_registered() {
        let mut c = claim();
        c.requests.cpu = 3000;
        c.requests.set("nvidia.com/gpu", 2);
        let gpus = |n: i64| {
            let mut r = capstan_model::Resources::new();
            r.cpu = 8000;
            r.set("nvidia.com/gpu", n);
            r
        };
        // (ready, taints, allocatable GPUs, initialized)
        let cases = [
            (false, vec![], 4, false),
            (true, vec![taint("init")], 4, false),
            (true, vec![taint("dedicated")], 4, true),
            (true, vec![], 4, true),
            // Ready, but the device plugin has not registered the GPUs yet.
            (true, vec![], 0, false),
            (true, vec![], 1, true),
        ];
        for (ready, taints, gpu, want) in cases {
            let n = Node {
                ready,
                taints: taints.clone(),
                allocatable: gpus(gpu),
                ..Default::default()
            };
            assert_eq!(initialized(&n, &c), want, "{ready} {taints:?} {gpu}");
        }
        let waiting = Node {
            ready: true,
            allocatable: gpus(0),
            ..Default::default()
        };
        assert_eq!(unregistered_resource(&waiting, &c), Some("nvidia.com/gpu"));
        let bare = Node::default();
        assert_eq!(missing_taints(&bare, &c).len(), 2);
    }
}
