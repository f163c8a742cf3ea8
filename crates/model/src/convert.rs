//! Conversion from k8s-openapi objects to capstan's compact forms, at the edge. Every error
//! names the field; features capstan does not model are reported as warnings, never dropped
//! silently.

use crate::error::FieldError;
use crate::labels::{self, normalize_key};
use crate::pod::{
    ContainerRequests, HostPort, InclusionPolicy, Namespaces, Pod, PodAffinityTerm, PodPhase,
    TopologySpread, Weighted, WhenUnsatisfiable, effective_requests,
};
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::Resources;
use crate::selector::{LabelSelector, SelectorOp, SelectorRequirement};
use crate::taints::{Effect, Taint, Toleration, TolerationOperator};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use std::collections::BTreeMap;

/// capstan's compact form of a Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub name: String,
    /// Label keys normalized (Karpenter spellings become `capstan.dev/`).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub capacity: Resources,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    pub ready: bool,
    pub provider_id: Option<String>,
    /// RFC 3339.
    pub created: Option<String>,
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set: the node is going, held by its finalizers.
    pub deleting: bool,
}

/// Pods a node takes when its allocatable says nothing about pods (the kubelet's default).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// Taints a node carries while it comes up, by key and effect: the node lifecycle
/// controller's not-ready (both effects) and unreachable, the external cloud provider's
/// uninitialized, and Karpenter's unregistered (Karpenter's `KnownEphemeralTaints`); and any
/// with a key under [`EPHEMERAL_TAINT_PREFIXES`].
pub const EPHEMERAL_TAINTS: [(&str, Effect); 5] = [
    ("node.kubernetes.io/not-ready", Effect::NoSchedule),
    ("node.kubernetes.io/not-ready", Effect::NoExecute),
    ("node.kubernetes.io/unreachable", Effect::NoSchedule),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        Effect::NoSchedule,
    ),
    (crate::labels::UNREGISTERED_TAINT, Effect::NoExecute),
];

/// Key prefixes of taint families a controller adds while a node comes up: the Node
/// Readiness Controller's `readiness.k8s.io/<rule>` (Karpenter's
/// `KnownEphemeralTaintKeyPrefixes`).
pub const EPHEMERAL_TAINT_PREFIXES: [&str; 1] = ["readiness.k8s.io/"];

impl Node {
    /// The node as the provisioner's scheduler sees it while it is not initialized: without
    /// the ephemeral taints ([`EPHEMERAL_TAINTS`]) and its NodeClaim's `startup` taints, which
    /// go as it comes up (Karpenter's `StateNode.Taints`), and with what its NodeClaim expects
    /// where its allocatable still reads zero — GPUs before the device plugin registers them
    /// (Karpenter's `StateNode.Allocatable`). Pending pods that fit wait for it rather than get
    /// another node bought for them.
    pub fn before_initialization(&self, startup: &[Taint], expected: &Resources) -> Node {
        let mut n = self.clone();
        for (k, v) in expected.iter() {
            if n.allocatable.get(k) == 0 {
                n.allocatable.set(k, v);
            }
        }
        n.taints.retain(|t| {
            !EPHEMERAL_TAINTS
                .iter()
                .any(|(k, e)| t.key == *k && t.effect == *e)
                && !EPHEMERAL_TAINT_PREFIXES
                    .iter()
                    .any(|p| t.key.starts_with(p))
                && !startup
                    .iter()
                    .any(|s| s.key == t.key && s.value == t.value && s.effect == t.effect)
        });
        n
    }

    /// Whether the node is initialized: a node with a NodeClaim once it carries the
    /// `karpenter.sh/initialized` label (what Karpenter's `StateNode.Initialized` reads; capstan
    /// labels the node before it marks the claim) or its claim is marked Initialized (a
    /// snapshot whose node lost the label); a node without a claim (not capstan's) always.
    pub fn initialized(&self, claim: Option<&crate::NodeClaim>) -> bool {
        claim.is_none_or(|c| c.status.initialized()) || self.labelled_initialized()
    }

    /// The node as the provisioner's scheduler sees it while it is still coming up (see
    /// [`Node::before_initialization`]), or `None` once it is initialized or its NodeClaim is
    /// being deleted. The one rule the controller and `capstan plan` both apply.
    pub fn coming_up(&self, claim: Option<&crate::NodeClaim>) -> Option<Node> {
        let c = claim?;
        (!self.initialized(claim) && !c.deleting())
            .then(|| self.before_initialization(&c.startup_taints, &c.status.allocatable))
    }

    /// How many pods the node takes: its allocatable `pods`, or the kubelet's default.
    pub fn max_pods(&self) -> i64 {
        if self.allocatable.pods == 0 {
            DEFAULT_MAX_PODS
        } else {
            self.allocatable.pods
        }
    }

    /// What the node counts against NodePool limits: its capacity, or its allocatable when
    /// no capacity is known.
    pub fn capacity_or_allocatable(&self) -> &Resources {
        if self.capacity.is_zero() {
            &self.allocatable
        } else {
            &self.capacity
        }
    }

    /// Whether the node carries the disrupted taint, in capstan's or Karpenter's spelling.
    pub fn has_disrupted_taint(&self) -> bool {
        self.taints.iter().any(|t| is_disrupted_taint(&t.key))
    }

    /// Being disrupted already, cordoned, or NotReady: not a candidate for another disruption,
    /// and takes no new pods in a what-if.
    pub fn is_disrupting(&self) -> bool {
        self.unschedulable || !self.ready || self.has_disrupted_taint()
    }

    /// Uses up its NodePool's disruption budget, as Karpenter counts (its
    /// `BuildDisruptionBudgetMapping`): NotReady, or going (deleting, or carrying the disrupted
    /// taint). A cordon alone does not: `kubectl cordon` is a person's, not a disruption.
    pub fn budget_disrupting(&self) -> bool {
        !self.ready || self.deleting || self.has_disrupted_taint()
    }

    /// Whether the node carries the initialized label (`karpenter.sh/initialized: "true"`):
    /// only initialized nodes count toward a NodePool's disruption budget.
    pub fn labelled_initialized(&self) -> bool {
        self.labels
            .get(crate::labels::INITIALIZED_LABEL)
            .map(String::as_str)
            == Some("true")
    }

    /// The node an instance of `t` registers as: the type's labels plus zone, capacity type,
    /// NodePool and hostname; ready, with the type's allocatable.
    pub fn for_instance_type(
        t: &crate::catalog::InstanceType,
        name: &str,
        zone: &str,
        capacity_type: &str,
        nodepool: &str,
    ) -> Node {
        let mut l = t.labels.clone();
        l.insert(labels::ZONE.into(), zone.into());
        l.insert(labels::CAPACITY_TYPE.into(), capacity_type.into());
        l.insert(labels::NODEPOOL.into(), nodepool.into());
        l.insert(labels::HOSTNAME.into(), name.into());
        Node {
            name: name.into(),
            labels: l,
            allocatable: t.allocatable.clone(),
            capacity: t.capacity.clone(),
            ready: true,
            ..Default::default()
        }
    }
}

fn resource_list(
    map: &BTreeMap<String, K8sQuantity>,
    field: &str,
) -> Result<Resources, FieldError> {
    let mut r = Resources::new();
    for (k, v) in map {
        r.set_str(k, &v.0)
            .map_err(|e| FieldError::new(format!("{field}.{k}"), e.to_string()))?;
    }
    Ok(r)
}

/// Kubernetes' extended resources (`example.com/foo`: a domain other than kubernetes.io's),
/// which cannot be overcommitted or split.
fn is_extended(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => {
            domain != "kubernetes.io"
                && !domain.ends_with(".kubernetes.io")
                && !name.starts_with("requests.")
        }
        None => false,
    }
}

/// Kubernetes' validation of a container's resources where it changes a plan (the API server
/// refuses such a pod, so it never runs): no negative amounts, requests within limits,
/// extended resources whole and requested exactly at their limit, hugepages only beside cpu
/// or memory. The messages are the API server's.
fn validate_resources(res: &core::ResourceRequirements, field: &str) -> Result<(), FieldError> {
    let parse = |map: &Option<BTreeMap<String, K8sQuantity>>, which: &str| {
        let mut out = BTreeMap::new();
        for (k, v) in map.iter().flatten() {
            let q = crate::quantity::Quantity::parse(&v.0).map_err(|e| {
                FieldError::new(format!("{field}.resources.{which}.{k}"), e.to_string())
            })?;
            if q.is_negative() {
                return Err(FieldError::new(
                    format!("{field}.resources.{which}.{k}"),
                    format!(
                        "Invalid value: \"{}\": must be greater than or equal to 0",
                        v.0
                    ),
                ));
            }
            if is_extended(k) && !q.is_whole() {
                return Err(FieldError::new(
                    format!("{field}.resources.{which}.{k}"),
                    format!("Invalid value: \"{}\": must be an integer", v.0),
                ));
            }
            out.insert(k.clone(), (q, v.0.clone()));
        }
        Ok(out)
    };
    let limits = parse(&res.limits, "limits")?;
    let requests = parse(&res.requests, "requests")?;
    for (k, (q, text)) in &requests {
        match limits.get(k) {
            Some((l, ltext)) if is_extended(k) && q != l => {
                return Err(FieldError::new(
                    format!("{field}.resources.requests.{k}"),
                    format!("Invalid value: \"{text}\": must be equal to {k} limit of {ltext}"),
                ));
            }
            Some((l, ltext)) if q > l => {
                return Err(FieldError::new(
                    format!("{field}.resources.requests.{k}"),
                    format!(
                        "Invalid value: \"{text}\": must be less than or equal to {k} limit of {ltext}"
                    ),
                ));
            }
            None if is_extended(k) => {
                return Err(FieldError::new(
                    format!("{field}.resources.limits"),
                    format!(
                        "Required value: Limit must be set for non overcommitable resources ({k})"
                    ),
                ));
            }
            _ => {}
        }
    }
    let all = || requests.keys().chain(limits.keys());
    if all().any(|k| k.starts_with("hugepages-")) && !all().any(|k| k == "cpu" || k == "memory") {
        return Err(FieldError::new(
            format!("{field}.resources"),
            "Forbidden: HugePages require cpu or memory".to_string(),
        ));
    }
    Ok(())
}

fn container_requests(c: &core::Container, field: &str) -> Result<Resources, FieldError> {
    let Some(res) = &c.resources else {
        return Ok(Resources::new());
    };
    validate_resources(res, field)?;
    let mut requests = match &res.requests {
        Some(r) => resource_list(r, &format!("{field}.resources.requests"))?,
        None => Resources::new(),
    };
    // The API server defaults a missing request to the limit.
    if let Some(limits) = &res.limits {
        for (k, v) in limits {
            if res.requests.as_ref().is_none_or(|r| !r.contains_key(k)) {
                requests.set_str(k, &v.0).map_err(|e| {
                    FieldError::new(format!("{field}.resources.limits.{k}"), e.to_string())
                })?;
            }
        }
    }
    Ok(requests)
}

fn host_ports(c: &core::Container, out: &mut Vec<HostPort>) {
    for p in c.ports.iter().flatten() {
        if let Some(hp) = p.host_port.filter(|p| *p > 0) {
            out.push(HostPort {
                port: hp,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
            });
        }
    }
}

/// Node-selector requirements (`matchExpressions`) with keys normalized.
pub fn node_selector_requirements(
    exprs: &[core::NodeSelectorRequirement],
    field: &str,
) -> Result<Requirements, FieldError> {
    let mut out = Requirements::new();
    for (i, e) in exprs.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let op = Operator::parse(&e.operator).ok_or_else(|| {
            FieldError::new(
                format!("{f}.operator"),
                format!("unknown operator {:?}", e.operator),
            )
        })?;
        let values = e.values.clone().unwrap_or_default();
        let r = Requirement::new(normalize_key(&e.key).into_owned(), op, &values)
            .map_err(|err| FieldError::new(format!("{f}.values"), err.to_string()))?;
        out.add(r);
    }
    Ok(out)
}

fn node_selector_term(
    t: &core::NodeSelectorTerm,
    field: &str,
    warnings: &mut Vec<String>,
) -> Result<Requirements, FieldError> {
    if t.match_fields.as_ref().is_some_and(|m| !m.is_empty()) {
        warnings.push(format!(
            "{field}.matchFields: not supported by the scheduling simulation; ignored"
        ));
    }
    node_selector_requirements(
        t.match_expressions.as_deref().unwrap_or_default(),
        &format!("{field}.matchExpressions"),
    )
}

pub fn label_selector(s: &meta::LabelSelector, field: &str) -> Result<LabelSelector, FieldError> {
    let mut reqs = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        reqs.push(SelectorRequirement {
            key: k.clone(),
            op: SelectorOp::In,
            values: vec![v.clone()],
        });
    }
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let op = match e.operator.as_str() {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            other => {
                return Err(FieldError::new(
                    format!("{field}.matchExpressions[{i}].operator"),
                    format!(
                        "unknown operator {other:?} (expected In, NotIn, Exists or DoesNotExist)"
                    ),
                ));
            }
        };
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        reqs.push(SelectorRequirement {
            key: e.key.clone(),
            op,
            values,
        });
    }
    reqs.sort();
    Ok(LabelSelector { requirements: reqs })
}

fn affinity_term(
    t: &core::PodAffinityTerm,
    pod_ns: &str,
    pod_labels: &BTreeMap<String, String>,
    field: &str,
    warnings: &mut Vec<String>,
) -> Result<PodAffinityTerm, FieldError> {
    let mut selector = match &t.label_selector {
        Some(s) => Some(label_selector(s, &format!("{field}.labelSelector"))?),
        None => None,
    };
    if let Some(sel) = selector.as_mut() {
        for k in t.match_label_keys.iter().flatten() {
            if let Some(v) = pod_labels.get(k) {
                sel.and_equals(k, v);
            }
        }
        for k in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = pod_labels.get(k) {
                sel.requirements.push(SelectorRequirement {
                    key: k.clone(),
                    op: SelectorOp::NotIn,
                    values: vec![v.clone()],
                });
                sel.requirements.sort();
            }
        }
    }
    let list = t.namespaces.clone().unwrap_or_default();
    let namespaces = match &t.namespace_selector {
        Some(ns)
            if ns.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && ns.match_expressions.as_ref().is_none_or(|m| m.is_empty()) =>
        {
            Namespaces::All
        }
        Some(_) => {
            warnings.push(format!(
                "{field}.namespaceSelector: namespace labels are not in the snapshot; the term looks in every namespace"
            ));
            Namespaces::All
        }
        None if list.is_empty() => Namespaces::List(vec![pod_ns.to_string()]),
        None => Namespaces::List(list),
    };
    if t.topology_key.is_empty() {
        return Err(FieldError::new(
            format!("{field}.topologyKey"),
            "must not be empty",
        ));
    }
    Ok(PodAffinityTerm {
        selector,
        namespaces,
        topology_key: normalize_key(&t.topology_key).into_owned(),
    })
}

pub fn toleration(t: &core::Toleration, field: &str) -> Result<Toleration, FieldError> {
    let operator = match t.operator.as_deref() {
        None | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(o) => {
            return Err(FieldError::new(
                format!("{field}.operator"),
                format!("unknown operator {o:?} (expected Equal or Exists)"),
            ));
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(Effect::parse(e).ok_or_else(|| {
            FieldError::new(format!("{field}.effect"), format!("unknown effect {e:?}"))
        })?),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

pub fn taint(t: &core::Taint, field: &str) -> Result<Taint, FieldError> {
    let effect = Effect::parse(&t.effect).ok_or_else(|| {
        FieldError::new(
            format!("{field}.effect"),
            format!("unknown effect {:?}", t.effect),
        )
    })?;
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

/// Converts a pod. `warnings` collects what capstan does not model.
pub fn pod(p: &core::Pod, warnings: &mut Vec<String>) -> Result<Pod, FieldError> {
    let md = &p.metadata;
    let name = md
        .name
        .clone()
        .ok_or_else(|| FieldError::new("metadata.name", "a pod needs a name"))?;
    let namespace = md.namespace.clone().unwrap_or_else(|| "default".into());
    let labels = md.labels.clone().unwrap_or_default();
    let owner = md
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .or_else(|| md.owner_references.iter().flatten().next());
    let spec = p
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::new("spec", "a pod needs a spec"))?;
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .map(PodPhase::parse)
        .unwrap_or_default();
    let mut out = pod_spec(spec, &namespace, &labels, warnings)?;
    out.namespace = namespace;
    out.volume_claims = crate::volume::claim_refs(&name, spec);
    out.name = name;
    out.uid = md.uid.clone().unwrap_or_default();
    out.labels = labels;
    out.annotations = md
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (normalize_key(&k).into_owned(), v))
        .collect();
    out.phase = phase;
    if let Some(st) = &p.status {
        let verdict = st.conditions.iter().flatten().find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
        out.unschedulable = verdict.is_some();
        out.scheduling_message = verdict.and_then(|c| c.message.clone());
        out.nominated_node = st.nominated_node_name.clone().filter(|n| !n.is_empty());
    }
    out.deleting = md.deletion_timestamp.is_some();
    out.deletion_deadline = md
        .deletion_timestamp
        .as_ref()
        .and_then(|t| crate::time::parse_rfc3339(&t.0.to_string()));
    out.created = md
        .creation_timestamp
        .as_ref()
        .and_then(|t| crate::time::parse_rfc3339(&t.0.to_string()));
    out.started = p
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .and_then(|t| crate::time::parse_rfc3339(&t.0.to_string()));
    out.ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    out.owner_kind = owner.map(|o| o.kind.clone());
    out.owner_name = owner.map(|o| o.name.clone());
    Ok(out)
}

/// Converts a pod spec (also DaemonSet templates). Field paths start at `spec`.
pub fn pod_spec(
    spec: &core::PodSpec,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    warnings: &mut Vec<String>,
) -> Result<Pod, FieldError> {
    let mut containers = Vec::new();
    let mut ports = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        containers.push(container_requests(c, &format!("spec.containers[{i}]"))?);
        host_ports(c, &mut ports);
    }
    let mut inits = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let restartable = c.restart_policy.as_deref() == Some("Always");
        inits.push(ContainerRequests {
            requests: container_requests(c, &format!("spec.initContainers[{i}]"))?,
            restartable,
        });
        if restartable {
            host_ports(c, &mut ports);
        }
    }
    let overhead = match &spec.overhead {
        Some(o) => resource_list(o, "spec.overhead")?,
        None => Resources::new(),
    };
    let mut requests = effective_requests(&containers, &inits, &Resources::new());
    // Pod-level resources (spec.resources) replace the container sum for what they name.
    if let Some(pr) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let pod_level = resource_list(pr, "spec.resources.requests")?;
        for (k, v) in pod_level.iter() {
            requests.set(k, v);
        }
    }
    requests.add(&overhead);
    requests.pods = 1;

    let mut node_selector = Requirements::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        node_selector.add(Requirement::in_values(
            normalize_key(k).into_owned(),
            [v.clone()],
        ));
    }
    let mut out = Pod {
        requests,
        node_selector,
        node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
        priority: spec.priority.unwrap_or(0),
        never_preempts: spec.preemption_policy.as_deref() == Some("Never"),
        host_ports: ports,
        termination_grace_seconds: spec.termination_grace_period_seconds,
        scheduling_gated: spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty()),
        scheduler_name: spec
            .scheduler_name
            .clone()
            .filter(|n| !n.is_empty() && n != crate::pod::DEFAULT_SCHEDULER),
        ..Default::default()
    };
    if let Some(aff) = &spec.affinity {
        if let Some(na) = &aff.node_affinity {
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                for (i, t) in req.node_selector_terms.iter().enumerate() {
                    let f = format!(
                        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                    );
                    out.required_terms
                        .push(node_selector_term(t, &f, warnings)?);
                }
            }
            for (i, t) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!(
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                );
                out.preferred_terms.push(Weighted {
                    weight: t.weight,
                    term: node_selector_term(&t.preference, &f, warnings)?,
                });
            }
        }
        let pod_terms = |required: &Option<Vec<core::PodAffinityTerm>>,
                         preferred: &Option<Vec<core::WeightedPodAffinityTerm>>,
                         kind: &str,
                         warnings: &mut Vec<String>|
         -> Result<
            (Vec<PodAffinityTerm>, Vec<Weighted<PodAffinityTerm>>),
            FieldError,
        > {
            let mut req = Vec::new();
            for (i, t) in required.iter().flatten().enumerate() {
                let f = format!(
                    "spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
                );
                req.push(affinity_term(t, namespace, labels, &f, warnings)?);
            }
            let mut pref = Vec::new();
            for (i, t) in preferred.iter().flatten().enumerate() {
                let f = format!(
                    "spec.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"
                );
                pref.push(Weighted {
                    weight: t.weight,
                    term: affinity_term(&t.pod_affinity_term, namespace, labels, &f, warnings)?,
                });
            }
            Ok((req, pref))
        };
        if let Some(pa) = &aff.pod_affinity {
            (out.affinity, out.preferred_affinity) = pod_terms(
                &pa.required_during_scheduling_ignored_during_execution,
                &pa.preferred_during_scheduling_ignored_during_execution,
                "podAffinity",
                warnings,
            )?;
        }
        if let Some(pa) = &aff.pod_anti_affinity {
            (out.anti_affinity, out.preferred_anti_affinity) = pod_terms(
                &pa.required_during_scheduling_ignored_during_execution,
                &pa.preferred_during_scheduling_ignored_during_execution,
                "podAntiAffinity",
                warnings,
            )?;
        }
    }
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        out.tolerations
            .push(toleration(t, &format!("spec.tolerations[{i}]"))?);
    }
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let f = format!("spec.topologySpreadConstraints[{i}]");
        if c.max_skew < 1 {
            return Err(FieldError::new(
                format!("{f}.maxSkew"),
                format!("must be at least 1, got {}", c.max_skew),
            ));
        }
        let when = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(FieldError::new(
                    format!("{f}.whenUnsatisfiable"),
                    format!("expected DoNotSchedule or ScheduleAnyway, got {other:?}"),
                ));
            }
        };
        let policy = |v: &Option<String>, default, field: &str| match v.as_deref() {
            None => Ok(default),
            Some("Honor") => Ok(InclusionPolicy::Honor),
            Some("Ignore") => Ok(InclusionPolicy::Ignore),
            Some(o) => Err(FieldError::new(
                format!("{f}.{field}"),
                format!("expected Honor or Ignore, got {o:?}"),
            )),
        };
        let mut selector = match &c.label_selector {
            Some(s) => Some(label_selector(s, &format!("{f}.labelSelector"))?),
            None => None,
        };
        if let Some(sel) = selector.as_mut() {
            for k in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(k) {
                    sel.and_equals(k, v);
                }
            }
        }
        if let Some(md) = c.min_domains {
            if md < 1 {
                return Err(FieldError::new(
                    format!("{f}.minDomains"),
                    format!("must be at least 1, got {md}"),
                ));
            }
            if when != WhenUnsatisfiable::DoNotSchedule {
                return Err(FieldError::new(
                    format!("{f}.minDomains"),
                    "may only be set with whenUnsatisfiable: DoNotSchedule",
                ));
            }
        }
        out.spread.push(TopologySpread {
            max_skew: c.max_skew,
            topology_key: normalize_key(&c.topology_key).into_owned(),
            when_unsatisfiable: when,
            selector,
            min_domains: c.min_domains,
            node_affinity_policy: policy(
                &c.node_affinity_policy,
                InclusionPolicy::Honor,
                "nodeAffinityPolicy",
            )?,
            node_taints_policy: policy(
                &c.node_taints_policy,
                InclusionPolicy::Ignore,
                "nodeTaintsPolicy",
            )?,
        });
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        warnings.push("spec.resourceClaims: dynamic resource allocation is not modelled; the claims are ignored".into());
    }
    Ok(out)
}

/// A DaemonSet as its pod template: the pod it runs on every node it fits, owned by it.
pub fn daemonset(
    ds: &k8s_openapi::api::apps::v1::DaemonSet,
    warnings: &mut Vec<String>,
) -> Result<Pod, FieldError> {
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let Some(spec) = spec else {
        return Err(FieldError::new(
            "spec.template.spec",
            "a DaemonSet needs a pod template",
        ));
    };
    let ns = ds
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let tmpl_labels = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut p =
        pod_spec(spec, &ns, &tmpl_labels, warnings).map_err(|e| e.within("spec.template"))?;
    p.namespace = ns;
    p.name = ds.metadata.name.clone().unwrap_or_default();
    p.labels = tmpl_labels;
    p.owner_kind = Some("DaemonSet".into());
    p.owner_name = Some(p.name.clone());
    Ok(p)
}

/// What a DaemonSet costs a node, as Karpenter reckons it: its template's constraints, with
/// the requests of one of its pods where one exists (what a LimitRange or a mutating webhook
/// made of the template's).
pub fn daemonset_requests_from_pods<'p>(
    template: &mut Pod,
    pods: impl IntoIterator<Item = &'p Pod>,
) {
    let own = pods.into_iter().find(|p| {
        p.is_active()
            && p.is_daemonset_pod()
            && p.namespace == template.namespace
            && p.owner_name.is_some()
            && p.owner_name == template.owner_name
    });
    if let Some(p) = own {
        template.requests = p.requests.clone();
    }
}

/// Whether a taint key is the disrupted taint (either spelling).
pub fn is_disrupted_taint(key: &str) -> bool {
    key == labels::DISRUPTED_TAINT || key == labels::KARPENTER_DISRUPTED_TAINT
}

/// Converts a node. Label keys are normalized; EKS's `eks.amazonaws.com/capacityType`
/// (`ON_DEMAND`/`SPOT`) becomes `capstan.dev/capacity-type`.
pub fn node(n: &core::Node) -> Result<Node, FieldError> {
    let md = &n.metadata;
    let name = md
        .name
        .clone()
        .ok_or_else(|| FieldError::new("metadata.name", "a node needs a name"))?;
    let mut node_labels = BTreeMap::new();
    for (k, v) in md.labels.iter().flatten() {
        node_labels.insert(normalize_key(k).into_owned(), v.clone());
    }
    if !node_labels.contains_key(labels::CAPACITY_TYPE)
        && let Some(v) = md
            .labels
            .as_ref()
            .and_then(|l| l.get("eks.amazonaws.com/capacityType"))
    {
        let ct = if v.eq_ignore_ascii_case("SPOT") {
            labels::CAPACITY_SPOT
        } else {
            labels::CAPACITY_ON_DEMAND
        };
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), ct.to_string());
    }
    node_labels
        .entry(labels::HOSTNAME.to_string())
        .or_insert_with(|| name.clone());
    let spec = n.spec.clone().unwrap_or_default();
    let status = n.status.clone().unwrap_or_default();
    let mut taints = Vec::new();
    for (i, t) in spec.taints.iter().flatten().enumerate() {
        taints.push(taint(t, &format!("spec.taints[{i}]"))?);
    }
    let capacity = match &status.capacity {
        Some(c) => resource_list(c, "status.capacity")?,
        None => Resources::new(),
    };
    let allocatable = match &status.allocatable {
        Some(a) => resource_list(a, "status.allocatable")?,
        None => capacity.clone(),
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    Ok(Node {
        name,
        labels: node_labels,
        annotations: md.annotations.clone().unwrap_or_default(),
        taints,
        allocatable,
        capacity,
        unschedulable: spec.unschedulable.unwrap_or(false),
        ready,
        provider_id: spec.provider_id.clone(),
        created: md.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        finalizers: md.finalizers.clone().unwrap_or_default(),
        deleting: md.deletion_timestamp.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_whose_requests_add_up_past_the_largest_quantity_converts_without_overflow() {
        // Found by fuzzing (fuzz/fuzz_targets/pods.rs): each quantity is clamped to i64, and
        // their sum (containers, sidecars, pod overhead) once overflowed.
        let huge = serde_json::json!({"cpu": "9E", "memory": "9Ei", "example.com/gpu": "9E"});
        let p: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": huge.clone(), "limits": huge.clone()}},
                    {"name": "b", "resources": {"requests": huge.clone(), "limits": huge.clone()}}
                ],
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always",
                        "resources": {"requests": huge.clone(), "limits": huge.clone()}}
                ],
                "overhead": huge
            }
        }))
        .unwrap();
        let out = pod(&p, &mut Vec::new()).unwrap();
        assert_eq!(out.requests.cpu, i64::MAX);
        assert_eq!(out.requests.memory, i64::MAX);
        assert_eq!(out.requests.extended["example.com/gpu"], i64::MAX);
    }

    #[test]
    fn a_node_before_initialization_loses_its_ephemeral_and_startup_taints_only() {
        let t = |key: &str, value: &str, effect: Effect| Taint {
            key: key.into(),
            value: value.into(),
            effect,
        };
        let startup = [t("example.com/agent", "starting", Effect::NoSchedule)];
        // (taint, kept)
        let cases = [
            (
                t("node.kubernetes.io/not-ready", "", Effect::NoSchedule),
                false,
            ),
            (
                t("node.kubernetes.io/not-ready", "", Effect::NoExecute),
                false,
            ),
            (
                t("readiness.k8s.io/network-ready", "", Effect::NoSchedule),
                false,
            ),
            (
                t("node.kubernetes.io/unreachable", "", Effect::NoExecute),
                true,
            ),
            (
                t("node.kubernetes.io/unreachable", "", Effect::NoSchedule),
                false,
            ),
            (
                t(
                    "node.cloudprovider.kubernetes.io/uninitialized",
                    "true",
                    Effect::NoSchedule,
                ),
                false,
            ),
            (t("karpenter.sh/unregistered", "", Effect::NoExecute), false),
            (
                t("example.com/agent", "starting", Effect::NoSchedule),
                false,
            ),
            (t("example.com/agent", "other", Effect::NoSchedule), true),
            (t("dedicated", "gpu", Effect::NoSchedule), true),
        ];
        for (taint, kept) in cases {
            let n = Node {
                taints: vec![taint.clone()],
                ..Default::default()
            };
            assert_eq!(
                n.before_initialization(&startup, &Resources::new())
                    .taints
                    .len()
                    == 1,
                kept,
                "{taint:?}"
            );
        }
    }

    #[test]
    fn a_node_before_initialization_has_the_gpus_its_claim_expects_where_it_reads_zero() {
        let mut node = Node::default();
        node.allocatable.cpu = 3920;
        node.allocatable.set("nvidia.com/gpu", 0);
        let mut expected = Resources::new();
        expected.cpu = 4000;
        expected.set("nvidia.com/gpu", 1);
        let n = node.before_initialization(&[], &expected);
        assert_eq!(n.allocatable.get("nvidia.com/gpu"), 1);
        assert_eq!(n.allocatable.cpu, 3920, "what the node reports stands");
    }

    #[test]
    fn a_daemonset_costs_what_its_pods_request_where_one_exists() {
        let ds = |name: &str, cpu: i64| Pod {
            namespace: "kube-system".into(),
            name: name.into(),
            owner_kind: Some("DaemonSet".into()),
            owner_name: Some(name.into()),
            requests: Resources {
                cpu,
                ..Default::default()
            },
            ..Default::default()
        };
        let pod = |ns: &str, owner: &str, kind: &str, cpu: i64| Pod {
            namespace: ns.into(),
            name: format!("{owner}-x"),
            owner_kind: Some(kind.into()),
            owner_name: Some(owner.into()),
            requests: Resources {
                cpu,
                ..Default::default()
            },
            ..Default::default()
        };
        // (pods, cpu the DaemonSet "agent" costs)
        let cases = [
            (vec![], 4000),
            (vec![pod("kube-system", "agent", "DaemonSet", 2000)], 2000),
            (vec![pod("default", "agent", "DaemonSet", 2000)], 4000),
            (vec![pod("kube-system", "other", "DaemonSet", 2000)], 4000),
            (vec![pod("kube-system", "agent", "ReplicaSet", 2000)], 4000),
        ];
        for (pods, want) in cases {
            let mut t = ds("agent", 4000);
            daemonset_requests_from_pods(&mut t, &pods);
            assert_eq!(t.requests.cpu, want, "{pods:?}");
        }
    }

    #[test]
    fn a_node_is_coming_up_until_it_or_its_claim_says_initialized() {
        let taint = Taint {
            key: "node.kubernetes.io/not-ready".into(),
            value: String::new(),
            effect: Effect::NoSchedule,
        };
        let claim = crate::NodeClaim::default();
        let deleting = crate::NodeClaim {
            deleted_at: Some(5.0),
            ..Default::default()
        };
        let mut initialized_claim = crate::NodeClaim::default();
        initialized_claim.status.initialized_at = Some(3.0);
        // (labelled initialized, claim, coming up)
        let cases = [
            (false, None, false),
            (false, Some(&claim), true),
            (true, Some(&claim), false),
            (false, Some(&deleting), false),
            // The claim's condition without the label (Karpenter reads only the label).
            (false, Some(&initialized_claim), false),
        ];
        for (labelled, claim, want) in cases {
            let mut n = Node {
                taints: vec![taint.clone()],
                ..Default::default()
            };
            if labelled {
                n.labels
                    .insert(crate::labels::INITIALIZED_LABEL.into(), "true".into());
            }
            let up = n.coming_up(claim);
            assert_eq!(up.is_some(), want, "labelled {labelled}, claim {claim:?}");
            assert_eq!(
                n.initialized(claim),
                !want && claim.is_none_or(|c| !c.deleting())
            );
            if let Some(up) = up {
                assert!(up.taints.is_empty(), "seen without its not-ready taint");
            }
        }
    }

    fn pod_from(json: serde_json::Value) -> Result<Pod, FieldError> {
        let p: core::Pod = serde_json::from_value(json).unwrap();
        pod(&p, &mut Vec::new())
    }

    #[test]
    fn a_bad_quantity_names_the_container_field() {
        let err = pod_from(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "12x"}}}]}
        }))
        .unwrap_err();
        assert_eq!(err.field, "spec.containers[0].resources.requests.cpu");
        assert!(
            err.message.contains("invalid quantity \"12x\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn resources_kubernetes_refuses_are_refused_naming_the_field() {
        use serde_json::json;
        // (resources, the field named, the message's end; None: valid)
        let cases: [(serde_json::Value, Option<(&str, &str)>); 10] = [
            (
                json!({"requests": {"cpu": "-1"}}),
                Some((
                    "spec.containers[0].resources.requests.cpu",
                    "must be greater than or equal to 0",
                )),
            ),
            (
                json!({"limits": {"memory": "-1Gi"}}),
                Some((
                    "spec.containers[0].resources.limits.memory",
                    "must be greater than or equal to 0",
                )),
            ),
            (
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
                Some((
                    "spec.containers[0].resources.requests.cpu",
                    "must be less than or equal to cpu limit of 1",
                )),
            ),
            (
                json!({"requests": {"nvidia.com/gpu": "1.5"}, "limits": {"nvidia.com/gpu": "1.5"}}),
                Some((
                    "spec.containers[0].resources.limits.nvidia.com/gpu",
                    "must be an integer",
                )),
            ),
            (
                json!({"requests": {"nvidia.com/gpu": "1"}}),
                Some((
                    "spec.containers[0].resources.limits",
                    "Limit must be set for non overcommitable resources (nvidia.com/gpu)",
                )),
            ),
            (
                json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}),
                Some((
                    "spec.containers[0].resources.requests.nvidia.com/gpu",
                    "must be equal to nvidia.com/gpu limit of 2",
                )),
            ),
            (
                json!({"limits": {"hugepages-2Mi": "128Mi"}}),
                Some((
                    "spec.containers[0].resources",
                    "HugePages require cpu or memory",
                )),
            ),
            (
                json!({"limits": {"hugepages-2Mi": "128Mi", "memory": "1Gi"}}),
                None,
            ),
            (
                json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "500m"}}),
                None,
            ),
            (
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}),
                None,
            ),
        ];
        for (i, (res, want)) in cases.into_iter().enumerate() {
            let got = pod_from(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "app", "resources": res}]}
            }));
            match (got, want) {
                (Ok(_), None) => {}
                (Err(e), Some((field, msg))) => {
                    assert_eq!(e.field, field, "case {i}");
                    assert!(e.to_string().ends_with(msg), "case {i}: {e}");
                }
                (got, want) => panic!("case {i}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let p = pod_from(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}
        }))
        .unwrap();
        assert_eq!(p.requests.cpu, 500);
        assert_eq!(p.requests.memory, 1 << 30);
        assert_eq!(p.requests.pods, 1);
        assert_eq!(p.namespace, "default");
    }

    #[test]
    fn sidecars_and_overhead_count_in_the_pod_requests() {
        let p = pod_from(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {
                "overhead": {"cpu": "100m"},
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                    {"name": "migrate", "resources": {"requests": {"cpu": "2"}}}
                ],
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]
            }
        }))
        .unwrap();
        // max(1 + 0.2, 2 + 0.2) + 0.1
        assert_eq!(p.requests.cpu, 2300);
    }

    #[test]
    fn only_pods_kube_scheduler_gave_up_on_are_provisionable() {
        let unschedulable = serde_json::json!({"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]});
        let default = vec![crate::pod::DEFAULT_SCHEDULER.to_string()];
        // (case, spec additions, metadata additions, status, provisionable)
        let cases = [
            (
                "marked unschedulable",
                serde_json::json!({}),
                serde_json::json!({}),
                unschedulable.clone(),
                true,
            ),
            (
                "not yet tried",
                serde_json::json!({}),
                serde_json::json!({}),
                serde_json::json!({"phase": "Pending"}),
                false,
            ),
            (
                "another reason",
                serde_json::json!({}),
                serde_json::json!({}),
                serde_json::json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}),
                false,
            ),
            (
                "scheduling-gated",
                serde_json::json!({"schedulingGates": [{"name": "example.com/quota"}]}),
                serde_json::json!({}),
                unschedulable.clone(),
                false,
            ),
            (
                "preempting",
                serde_json::json!({}),
                serde_json::json!({}),
                serde_json::json!({"nominatedNodeName": "n1", "conditions": unschedulable["conditions"]}),
                false,
            ),
            (
                "another scheduler",
                serde_json::json!({"schedulerName": "volcano"}),
                serde_json::json!({}),
                unschedulable.clone(),
                false,
            ),
            (
                "the default scheduler by name",
                serde_json::json!({"schedulerName": "default-scheduler"}),
                serde_json::json!({}),
                unschedulable.clone(),
                true,
            ),
            (
                "a static pod",
                serde_json::json!({}),
                serde_json::json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u", "controller": true}]}),
                unschedulable.clone(),
                false,
            ),
            (
                "a DaemonSet's pod",
                serde_json::json!({}),
                serde_json::json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]}),
                unschedulable.clone(),
                false,
            ),
            (
                "bound",
                serde_json::json!({"nodeName": "n1"}),
                serde_json::json!({}),
                unschedulable.clone(),
                false,
            ),
        ];
        for (case, spec, meta, status, want) in cases {
            let mut spec_v = serde_json::json!({"containers": [{"name": "c"}]});
            spec_v
                .as_object_mut()
                .unwrap()
                .extend(spec.as_object().unwrap().clone());
            let mut meta_v = serde_json::json!({"name": "a", "namespace": "default"});
            meta_v
                .as_object_mut()
                .unwrap()
                .extend(meta.as_object().unwrap().clone());
            let p =
                pod_from(serde_json::json!({"metadata": meta_v, "spec": spec_v, "status": status}))
                    .unwrap();
            assert_eq!(p.is_provisionable(&default), want, "{case}");
        }
        let other = pod_from(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "c"}], "schedulerName": "volcano"},
            "status": unschedulable,
        }))
        .unwrap();
        assert!(other.is_provisionable(&["default-scheduler".into(), "volcano".into()]));
    }

    #[test]
    fn karpenter_label_keys_in_selectors_become_capstan_keys() {
        let p = pod_from(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "c"}], "nodeSelector": {"karpenter.sh/capacity-type": "spot"}}
        }))
        .unwrap();
        assert!(p.node_selector.get(labels::CAPACITY_TYPE).is_some());
    }

    #[test]
    fn match_label_keys_fold_the_pods_own_values_into_the_selector() {
        let p = pod_from(serde_json::json!({
            "metadata": {"name": "a", "labels": {"app": "web", "pod-template-hash": "abc"}},
            "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"]}]}
        }))
        .unwrap();
        let sel = p.spread[0].selector.as_ref().unwrap();
        let mut other: BTreeMap<String, String> = [("app".to_string(), "web".to_string())]
            .into_iter()
            .collect();
        assert!(
            !sel.matches(&other),
            "a pod of another revision is not counted"
        );
        other.insert("pod-template-hash".into(), "abc".into());
        assert!(sel.matches(&other));
        assert_eq!(p.spread[0].node_taints_policy, InclusionPolicy::Ignore);
        assert_eq!(p.spread[0].node_affinity_policy, InclusionPolicy::Honor);
    }

    #[test]
    fn an_unknown_spread_policy_is_an_error_naming_the_field() {
        let err = pod_from(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "Sometimes"}]}
        }))
        .unwrap_err();
        assert_eq!(
            err.field,
            "spec.topologySpreadConstraints[0].whenUnsatisfiable"
        );
    }

    #[test]
    fn eks_capacity_type_labels_are_understood() {
        let n: core::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"eks.amazonaws.com/capacityType": "SPOT"}},
            "status": {"allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let n = node(&n).unwrap();
        assert_eq!(n.labels[labels::CAPACITY_TYPE], "spot");
        assert_eq!(n.labels[labels::HOSTNAME], "n1");
        assert!(n.ready);
        assert_eq!(n.allocatable.cpu, 3920);
    }
}
