//! capstan's compact form of a Pod: only what scheduling and disruption read.

use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::selector::LabelSelector;
use crate::taints::Toleration;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(s: &str) -> PodPhase {
        match s {
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            "Pending" => PodPhase::Pending,
            _ => PodPhase::Unknown,
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// The phase as `status.phase` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InclusionPolicy {
    Honor,
    Ignore,
}

/// One `topologySpreadConstraints` entry, with `matchLabelKeys` already folded into the
/// selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologySpread {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` selects no pods (the constraint then only limits by domain count).
    pub selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    pub node_affinity_policy: InclusionPolicy,
    pub node_taints_policy: InclusionPolicy,
}

/// Which namespaces a pod (anti-)affinity term looks in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespaces {
    All,
    List(Vec<String>),
}

impl Namespaces {
    pub fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::List(l) => l.iter().any(|n| n == ns),
        }
    }
}

/// A required or preferred pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    /// `None` selects no pods.
    pub selector: Option<LabelSelector>,
    pub namespaces: Namespaces,
    pub topology_key: String,
}

impl PodAffinityTerm {
    pub fn selects(&self, pod: &Pod) -> bool {
        self.namespaces.contains(&pod.namespace)
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Weighted<T> {
    pub weight: i32,
    pub term: T,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub port: i32,
    pub protocol: String,
    /// "0.0.0.0" when unset: every address.
    pub ip: String,
}

impl HostPort {
    /// Kubernetes' NodePorts conflict rule.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_name: Option<String>,
    pub phase: PodPhase,
    pub deleting: bool,
    /// The controlling owner's kind (`ReplicaSet`, `DaemonSet`, …).
    pub owner_kind: Option<String>,
    pub owner_name: Option<String>,
    /// Effective requests (Kubernetes' rules, overhead included) plus `pods: 1`.
    pub requests: Resources,
    pub priority: i32,
    /// `spec.preemptionPolicy: Never`: the pod waits for room rather than preempting
    /// lower-priority pods.
    pub never_preempts: bool,
    /// `spec.nodeSelector` as requirements.
    pub node_selector: Requirements,
    /// Required node affinity: OR of terms. Empty means no such constraint.
    pub required_terms: Vec<Requirements>,
    pub preferred_terms: Vec<Weighted<Requirements>>,
    pub tolerations: Vec<Toleration>,
    pub spread: Vec<TopologySpread>,
    pub affinity: Vec<PodAffinityTerm>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_affinity: Vec<Weighted<PodAffinityTerm>>,
    pub preferred_anti_affinity: Vec<Weighted<PodAffinityTerm>>,
    pub host_ports: Vec<HostPort>,
    pub termination_grace_seconds: Option<i64>,
    /// kube-scheduler's verdict: `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: bool,
    /// That condition's message ("0/3 nodes are available: …").
    pub scheduling_message: Option<String>,
    /// `spec.schedulingGates` is not empty: no scheduler may place the pod yet.
    pub scheduling_gated: bool,
    /// `status.nominatedNodeName`: kube-scheduler's preemption is making room for the pod on
    /// that node, or capstan nominated it to the node launched for it as that registered.
    pub nominated_node: Option<String>,
    /// `spec.schedulerName` when it is not the default scheduler.
    pub scheduler_name: Option<String>,
    /// Unix seconds of `metadata.deletionTimestamp` on a deleted pod: when its grace period
    /// ends and the kubelet kills what is left.
    pub deletion_deadline: Option<f64>,
    /// Unix seconds of `metadata.creationTimestamp` (pod startup latency counts from it).
    pub created: Option<f64>,
    /// Unix seconds of `status.startTime`: when the kubelet took the pod.
    pub started: Option<f64>,
    /// Its `Ready` condition, where the status has one.
    pub ready: Option<bool>,
    /// The PersistentVolumeClaims its volumes use (`persistentVolumeClaim` and `ephemeral`).
    pub volume_claims: Vec<crate::volume::ClaimRef>,
    /// What its volumes require of a node (a zone, mostly): set by whoever knows the claims
    /// ([`crate::volume::Volumes::resolve`]); kept apart from its node affinity, which topology
    /// spread reads.
    pub volume_requirements: Requirements,
    /// Why its volumes keep kube-scheduler from placing it (a claim missing, unbound, …):
    /// nothing is launched for it meanwhile.
    pub volume_error: Option<String>,
    /// [`Pod::template_hash`], worked out once per pod value.
    pub template_hash: TemplateHash,
}

/// A [`Pod::template_hash`] kept with the pod once worked out. A clone starts without it
/// (a clone is made to be changed); it never takes part in a comparison.
#[derive(Default)]
pub struct TemplateHash(std::sync::OnceLock<u64>);

impl Clone for TemplateHash {
    fn clone(&self) -> TemplateHash {
        TemplateHash::default()
    }
}

impl PartialEq for TemplateHash {
    fn eq(&self, _: &TemplateHash) -> bool {
        true
    }
}

impl std::fmt::Debug for TemplateHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TemplateHash")
    }
}

/// kube-scheduler's name, the `spec.schedulerName` of a pod that names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

impl Pod {
    /// A hash of everything [`Pod::same_but_name`] compares (std's hasher with its fixed
    /// keys: the same in every run), worked out on first use and kept with this pod value.
    pub fn template_hash(&self) -> u64 {
        *self.template_hash.0.get_or_init(|| {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            self.namespace.hash(&mut h);
            self.requests.hash(&mut h);
            self.labels.hash(&mut h);
            self.node_selector.hash(&mut h);
            self.volume_requirements.hash(&mut h);
            self.required_terms.hash(&mut h);
            self.preferred_terms.hash(&mut h);
            self.tolerations.hash(&mut h);
            self.spread.hash(&mut h);
            self.affinity.hash(&mut h);
            self.anti_affinity.hash(&mut h);
            self.preferred_affinity.hash(&mut h);
            self.preferred_anti_affinity.hash(&mut h);
            self.host_ports.hash(&mut h);
            self.priority.hash(&mut h);
            self.annotations.hash(&mut h);
            self.owner_kind.hash(&mut h);
            self.owner_name.hash(&mut h);
            h.finish()
        })
    }

    /// Whether two pods are the same but for their name and uid (and their binding and
    /// status): a scheduler decides the same for both. Pods made from one template compare by
    /// their kept [`Pod::template_hash`]es, not field by field.
    pub fn same_but_name(&self, other: &Pod) -> bool {
        let same =
            self.template_hash() == other.template_hash() || self.fields_same_but_name(other);
        debug_assert_eq!(
            same,
            self.fields_same_but_name(other),
            "a template hash collided"
        );
        same
    }

    fn fields_same_but_name(&self, b: &Pod) -> bool {
        let a = self;
        a.namespace == b.namespace
            && a.requests == b.requests
            && a.labels == b.labels
            && a.node_selector == b.node_selector
            && a.volume_requirements == b.volume_requirements
            && a.required_terms == b.required_terms
            && a.preferred_terms == b.preferred_terms
            && a.tolerations == b.tolerations
            && a.spread == b.spread
            && a.affinity == b.affinity
            && a.anti_affinity == b.anti_affinity
            && a.preferred_affinity == b.preferred_affinity
            && a.preferred_anti_affinity == b.preferred_anti_affinity
            && a.host_ports == b.host_ports
            && a.priority == b.priority
            && a.annotations == b.annotations
            && a.owner_kind == b.owner_kind
            && a.owner_name == b.owner_name
    }

    /// The pod as Karpenter's `--preference-policy Ignore` plans it: without preferred node
    /// affinity, preferred pod (anti-)affinity or `ScheduleAnyway` topology spread.
    pub fn without_preferences(&self) -> Pod {
        let mut p = self.clone();
        p.preferred_terms.clear();
        p.preferred_affinity.clear();
        p.preferred_anti_affinity.clear();
        p.spread
            .retain(|s| s.when_unsatisfiable != WhenUnsatisfiable::ScheduleAnyway);
        p
    }

    /// Why the pod's `do-not-disrupt` annotation blocks a voluntary disruption at `now`
    /// (unix seconds), if it does. `"true"` blocks; a Go duration (`"30m"`) blocks from the
    /// pod's start (its creation, before it has started) until the duration has passed, as
    /// Karpenter reads it; `"false"` does not block; any other value blocks (fail closed)
    /// and says so.
    pub fn do_not_disrupt(&self, now: f64) -> Option<String> {
        let v = self.annotations.get(crate::labels::DO_NOT_DISRUPT)?;
        match v.as_str() {
            "true" => Some(format!("pod {} has do-not-disrupt", self.key())),
            "false" => None,
            d => match crate::time::parse_duration(d) {
                Ok(Some(secs)) => {
                    let from = self.started.or(self.created).unwrap_or(now);
                    let until = from + secs as f64;
                    (now < until).then(|| {
                        format!(
                            "pod {} has do-not-disrupt for {d}, {:.0} s more",
                            self.key(),
                            until - now
                        )
                    })
                }
                _ => Some(format!(
                    "pod {} has do-not-disrupt {d:?}, neither \"true\" nor a duration: it blocks",
                    self.key()
                )),
            },
        }
    }

    /// The pod as it is planned when its node is going: the same pod, bound nowhere.
    pub fn off_its_node(&self) -> Pod {
        Pod {
            node_name: None,
            nominated_node: None,
            ..self.clone()
        }
    }

    /// `namespace/name`, as contracts print pods.
    pub fn key(&self) -> String {
        // Built by hand: `format!` costs several times as much, and keys are built by the
        // hundred thousand per pass in a large cluster.
        let mut key = String::with_capacity(self.namespace.len() + 1 + self.name.len());
        key.push_str(&self.namespace);
        key.push('/');
        key.push_str(&self.name);
        key
    }

    /// The bytes of [`Pod::key`] without building it: hashes and orders exactly as the key.
    pub fn key_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.namespace
            .bytes()
            .chain([b'/'])
            .chain(self.name.bytes())
    }

    /// Pending: not bound, not finished, not being deleted.
    pub fn is_pending(&self) -> bool {
        self.node_name.is_none() && !self.phase.is_terminal() && !self.deleting
    }

    /// The scheduler that places this pod.
    pub fn scheduler(&self) -> &str {
        self.scheduler_name.as_deref().unwrap_or(DEFAULT_SCHEDULER)
    }

    /// Whether capstan provisions for this pod (Karpenter's `IsProvisionable`): pending, and
    /// one of `schedulers` tried and gave up on it (`PodScheduled=False`, `Unschedulable`);
    /// not scheduling-gated, not preempting (a nominated node), not a DaemonSet's or a
    /// Node's (static) pod.
    pub fn is_provisionable(&self, schedulers: &[String]) -> bool {
        self.nominated_node.is_none() && self.waits_for_capacity(schedulers)
    }

    /// [`Pod::is_provisionable`] but for the nomination: a pod nominated to a node by the
    /// provisioner itself, not by kube-scheduler's preemption, still waits for capacity.
    pub fn waits_for_capacity(&self, schedulers: &[String]) -> bool {
        self.is_pending()
            && self.unschedulable
            && !self.scheduling_gated
            && !self.is_daemonset_pod()
            && self.owner_kind.as_deref() != Some("Node")
            && schedulers.iter().any(|s| s == self.scheduler())
    }

    pub fn is_daemonset_pod(&self) -> bool {
        self.owner_kind.as_deref() == Some("DaemonSet")
    }

    /// Whether the pod needs another node when its node goes (Karpenter's
    /// `IsReschedulable`): not a DaemonSet's or a mirror pod (they go with the node), and not
    /// terminating already — except a StatefulSet's, which comes back under its own name and
    /// needs the room.
    pub fn reschedulable(&self) -> bool {
        match self.owner_kind.as_deref() {
            Some("DaemonSet" | "Node") => false,
            Some("StatefulSet") => true,
            _ => !self.deleting,
        }
    }

    /// `terminationGracePeriodSeconds`, Kubernetes' 30 when unset.
    pub fn grace_seconds(&self) -> f64 {
        self.termination_grace_seconds.unwrap_or(30).max(0) as f64
    }

    /// Whether the pod counts against its node's resources.
    pub fn is_active(&self) -> bool {
        !self.phase.is_terminal()
    }
}

/// One container's requests for [`effective_requests`].
#[derive(Clone, Debug, Default)]
pub struct ContainerRequests {
    pub requests: Resources,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub restartable: bool,
}

/// A pod's effective requests by Kubernetes' rules (`resourcehelper.PodRequests`):
/// max(sum of app containers + sidecars, for each regular init container: itself plus the
/// sidecars started before it), plus pod overhead. Does not add the `pods` slot.
pub fn effective_requests(
    containers: &[Resources],
    init_containers: &[ContainerRequests],
    overhead: &Resources,
) -> Resources {
    let mut reqs = Resources::new();
    for c in containers {
        reqs.add(c);
    }
    let mut sidecars = Resources::new();
    let mut init_max = Resources::new();
    for ic in init_containers {
        let this = if ic.restartable {
            reqs.add(&ic.requests);
            sidecars.add(&ic.requests);
            sidecars.clone()
        } else {
            ic.requests.plus(&sidecars)
        };
        init_max.max_with(&this);
    }
    reqs.max_with(&init_max);
    reqs.add(overhead);
    reqs
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pod_without_preferences_keeps_what_it_requires() {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                            "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]},
                    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                        "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "a"}}}}]},
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}}}],
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                            "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "a"}}}}]}},
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {"app": "a"}}},
                    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {"matchLabels": {"app": "a"}}}]}
        }))
        .unwrap();
        let pod = crate::convert::pod(&p, &mut Vec::new()).unwrap();
        assert_eq!(
            (
                pod.preferred_terms.len(),
                pod.preferred_affinity.len(),
                pod.preferred_anti_affinity.len(),
                pod.spread.len()
            ),
            (1, 1, 1, 2)
        );
        let bare = pod.without_preferences();
        assert!(bare.preferred_terms.is_empty());
        assert!(bare.preferred_affinity.is_empty());
        assert!(bare.preferred_anti_affinity.is_empty());
        assert_eq!(bare.spread.len(), 1, "the DoNotSchedule spread stays");
        assert_eq!(
            bare.spread[0].when_unsatisfiable,
            WhenUnsatisfiable::DoNotSchedule
        );
        assert_eq!(bare.required_terms, pod.required_terms);
        assert_eq!(bare.anti_affinity, pod.anti_affinity);
    }

    use super::*;

    #[test]
    fn pods_of_one_template_are_the_same_but_for_their_name_and_a_changed_copy_is_not() {
        let mut template = Pod {
            namespace: "default".into(),
            name: "web-000001".into(),
            uid: "u1".into(),
            owner_kind: Some("ReplicaSet".into()),
            owner_name: Some("web".into()),
            ..Default::default()
        };
        template.labels.insert("app".into(), "web".into());
        template.requests.cpu = 500;
        template.requests.pods = 1;
        let copy = |change: &dyn Fn(&mut Pod)| {
            let mut p = template.clone();
            p.name = "web-000002".into();
            p.uid = "u2".into();
            change(&mut p);
            p
        };
        // Worked out before the copies are made: a copy must not keep the original's hash.
        template.template_hash();
        // (case, the copy, the same)
        let cases: [(&str, Pod, bool); 8] = [
            ("another name and uid", copy(&|_| {}), true),
            (
                "bound elsewhere, running",
                copy(&|p| {
                    p.node_name = Some("n".into());
                    p.phase = PodPhase::Running;
                }),
                true,
            ),
            (
                "a label",
                copy(&|p| {
                    p.labels.insert("tier".into(), "1".into());
                }),
                false,
            ),
            ("its requests", copy(&|p| p.requests.cpu = 600), false),
            ("its priority", copy(&|p| p.priority = 1), false),
            (
                "an annotation",
                copy(&|p| {
                    p.annotations.insert("a".into(), "b".into());
                }),
                false,
            ),
            (
                "its owner",
                copy(&|p| p.owner_name = Some("api".into())),
                false,
            ),
            (
                "another namespace",
                copy(&|p| p.namespace = "prod".into()),
                false,
            ),
        ];
        for (case, p, same) in cases {
            assert_eq!(template.same_but_name(&p), same, "{case}");
            assert_eq!(p.same_but_name(&template), same, "{case}, the other way");
        }
    }

    #[test]
    fn do_not_disrupt_blocks_for_true_for_its_duration_from_the_start_and_for_garbage() {
        let now = 10_000.0;
        // (value, started, created, blocks)
        let cases = [
            ("true", None, None, true),
            ("false", None, None, false),
            ("30m", Some(now - 600.0), Some(now - 900.0), true),
            ("30m", Some(now - 2400.0), None, false),
            ("30m", None, Some(now - 600.0), true),
            ("30m", None, Some(now - 1800.0), false),
            ("1h30m", Some(now - 3600.0), None, true),
            ("30m", None, None, true),
            ("soon", None, None, true),
            ("", None, None, true),
        ];
        for (v, started, created, blocks) in cases {
            let mut p = Pod {
                namespace: "default".into(),
                name: "p".into(),
                started,
                created,
                ..Default::default()
            };
            p.annotations
                .insert(crate::labels::DO_NOT_DISRUPT.into(), v.into());
            assert_eq!(
                p.do_not_disrupt(now).is_some(),
                blocks,
                "{v:?} {started:?} {created:?}: {:?}",
                p.do_not_disrupt(now)
            );
        }
        assert_eq!(Pod::default().do_not_disrupt(now), None);
    }

    fn r(cpu: i64, mem_mib: i64) -> Resources {
        Resources {
            cpu,
            memory: mem_mib * crate::resources::MIB,
            ..Default::default()
        }
    }

    fn init(cpu: i64, mem: i64, restartable: bool) -> ContainerRequests {
        ContainerRequests {
            requests: r(cpu, mem),
            restartable,
        }
    }

    #[test]
    fn a_pod_needs_another_node_unless_it_goes_with_its_node_or_is_terminating() {
        // (owner kind, terminating, reschedulable)
        let cases = [
            (None, false, true),
            (None, true, false),
            (Some("ReplicaSet"), false, true),
            (Some("ReplicaSet"), true, false),
            (Some("StatefulSet"), true, true),
            (Some("DaemonSet"), false, false),
            (Some("Node"), false, false),
        ];
        for (owner, deleting, want) in cases {
            let p = Pod {
                owner_kind: owner.map(str::to_string),
                deleting,
                ..Default::default()
            };
            assert_eq!(p.reschedulable(), want, "{owner:?} deleting={deleting}");
        }
    }

    #[test]
    fn effective_requests_follow_kubernetes_rules() {
        // (name, app containers, init containers, overhead, expected)
        type Case = (
            &'static str,
            Vec<Resources>,
            Vec<ContainerRequests>,
            Resources,
            Resources,
        );
        let cases: Vec<Case> = vec![
            (
                "app containers add up",
                vec![r(100, 64), r(200, 128)],
                vec![],
                r(0, 0),
                r(300, 192),
            ),
            (
                "a larger init container wins per resource",
                vec![r(100, 512)],
                vec![init(1000, 64, false)],
                r(0, 0),
                r(1000, 512),
            ),
            (
                "init containers take the max, not the sum",
                vec![r(100, 64)],
                vec![init(500, 64, false), init(300, 256, false)],
                r(0, 0),
                r(500, 256),
            ),
            (
                "sidecars add to the app containers",
                vec![r(100, 64)],
                vec![init(50, 32, true)],
                r(0, 0),
                r(150, 96),
            ),
            (
                "an init container after a sidecar runs beside it",
                vec![r(100, 64)],
                vec![init(50, 32, true), init(400, 64, false)],
                r(0, 0),
                r(450, 96),
            ),
            (
                "an init container before a sidecar does not",
                vec![r(100, 64)],
                vec![init(400, 64, false), init(50, 32, true)],
                r(0, 0),
                r(400, 96),
            ),
            (
                "overhead is added last",
                vec![r(100, 64)],
                vec![init(500, 64, false)],
                r(250, 120),
                r(750, 184),
            ),
            (
                "no containers request nothing",
                vec![],
                vec![],
                r(0, 0),
                r(0, 0),
            ),
        ];
        for (name, containers, inits, overhead, want) in cases {
            assert_eq!(
                effective_requests(&containers, &inits, &overhead),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn host_ports_conflict_on_same_port_protocol_and_overlapping_ip() {
        let hp = |port, proto: &str, ip: &str| HostPort {
            port,
            protocol: proto.into(),
            ip: ip.into(),
        };
        assert!(hp(80, "TCP", "0.0.0.0").conflicts(&hp(80, "TCP", "10.0.0.1")));
        assert!(!hp(80, "TCP", "10.0.0.2").conflicts(&hp(80, "TCP", "10.0.0.1")));
        assert!(!hp(80, "TCP", "0.0.0.0").conflicts(&hp(80, "UDP", "0.0.0.0")));
        assert!(!hp(80, "TCP", "0.0.0.0").conflicts(&hp(81, "TCP", "0.0.0.0")));
    }

    #[test]
    fn a_pods_key_bytes_order_as_its_key_whatever_its_namespace_and_name() {
        let pod = |ns: &str, name: &str| super::Pod {
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        };
        // '/' sorts after '-' and before letters: "a-b/x" < "a/x" < "ab/x" as keys.
        let pods = [
            pod("a", "x"),
            pod("a-b", "x"),
            pod("ab", "x"),
            pod("a", "x-1"),
            pod("", "z"),
            pod("a", ""),
        ];
        for a in &pods {
            for b in &pods {
                assert_eq!(
                    a.key_bytes().cmp(b.key_bytes()),
                    a.key().cmp(&b.key()),
                    "{} against {}",
                    a.key(),
                    b.key()
                );
            }
        }
    }
}
