//! PodDisruptionBudgets: how many of the pods they select may be evicted now.

use crate::error::FieldError;
use crate::pod::Pod;
use crate::selector::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A count or a percentage (`"25%"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i64),
    Percent(i64),
}

impl IntOrPercent {
    pub fn parse(v: &IntOrString) -> Option<IntOrPercent> {
        match v {
            IntOrString::Int(i) => Some(IntOrPercent::Int(*i as i64)),
            IntOrString::String(s) => match s.strip_suffix('%') {
                Some(p) => p.parse().ok().map(IntOrPercent::Percent),
                None => s.parse().ok().map(IntOrPercent::Int),
            },
        }
    }

    /// The value against `total`, percentages rounded up (as Kubernetes scales them).
    pub fn scaled(&self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(i) => *i,
            IntOrPercent::Percent(p) => (total * p + 99) / 100,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// `None` selects nothing.
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
    /// `spec.unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not healthy may be
    /// evicted whatever the budget allows (the eviction API's rule).
    pub always_allow_unhealthy: bool,
}

impl Pdb {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn selects(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| !s.requirements.is_empty() && s.matches(&pod.labels))
    }

    /// Evictions allowed now among `pods` (the disruption controller's computation): healthy
    /// pods are the running ones.
    pub fn allowed(&self, pods: &[&Pod]) -> i64 {
        let selected: Vec<&&Pod> = pods
            .iter()
            .filter(|p| self.selects(p) && p.is_active())
            .collect();
        let expected = selected.len() as i64;
        let healthy = selected.iter().filter(|p| Pdb::healthy(p)).count() as i64;
        self.allowed_from(expected, healthy)
    }

    /// Whether a pod counts as healthy (the disruption controller's currentHealthy): running,
    /// not deleting, and not known to be unready.
    pub fn healthy(pod: &Pod) -> bool {
        pod.phase == crate::pod::PodPhase::Running && !pod.deleting && pod.ready != Some(false)
    }

    /// Whether this budget limits evicting `pod`: it selects the pod, unless the pod is
    /// unhealthy and the budget lets unhealthy pods go (`AlwaysAllow`).
    pub fn limits(&self, pod: &Pod) -> bool {
        !self.always_allow_unhealthy || Pdb::healthy(pod)
    }

    /// Disruptions allowed given the selected active pods (`expected`) and how many of them
    /// are healthy.
    pub fn allowed_from(&self, expected: i64, healthy: i64) -> i64 {
        let allowed = match (&self.min_available, &self.max_unavailable) {
            (Some(min), _) => healthy - min.scaled(expected),
            (None, Some(max)) => max.scaled(expected) - (expected - healthy),
            (None, None) => healthy - expected,
        };
        allowed.max(0)
    }
}

impl Pdb {
    /// Whether the budget can never allow an eviction, whatever the pods' health (Karpenter's
    /// fully blocking PDB): `maxUnavailable: 0` or `"0%"`, or `minAvailable: "100%"`.
    pub fn fully_blocking(&self) -> bool {
        matches!(
            self.max_unavailable,
            Some(IntOrPercent::Int(0) | IntOrPercent::Percent(0))
        ) || self.min_available == Some(IntOrPercent::Percent(100))
    }
}

/// Whether `pod`, on a node being deleted, is planned for now, ahead of its eviction, so its
/// new room is ready when it goes (Karpenter's `IsCurrentlyReschedulable`): it needs another
/// node ([`Pod::reschedulable`]), no active `do-not-disrupt` keeps it where it is, and no
/// budget blocks its eviction for good — one fully blocking budget that limits it, or two
/// budgets selecting it (the eviction API refuses a pod with several).
pub fn moves_ahead_of_drain<'a>(
    pod: &Pod,
    pdbs: impl IntoIterator<Item = &'a Pdb>,
    now: f64,
) -> bool {
    if !pod.is_active() || !pod.reschedulable() {
        return false;
    }
    if pod.deleting {
        // A terminating StatefulSet pod: going already, it comes back under its own name.
        return true;
    }
    if pod.do_not_disrupt(now).is_some() {
        return false;
    }
    let selecting: Vec<&Pdb> = pdbs.into_iter().filter(|b| b.selects(pod)).collect();
    match selecting.as_slice() {
        [] => true,
        [b] => !(b.fully_blocking() && b.limits(pod)),
        _ => false,
    }
}

/// Converts a PodDisruptionBudget.
pub fn convert(p: &k8s_openapi::api::policy::v1::PodDisruptionBudget) -> Result<Pdb, FieldError> {
    let name =
        p.metadata.name.clone().ok_or_else(|| {
            FieldError::new("metadata.name", "a PodDisruptionBudget needs a name")
        })?;
    let spec = p.spec.clone().unwrap_or_default();
    let selector = match &spec.selector {
        Some(s) => Some(crate::convert::label_selector(s, "spec.selector")?),
        None => None,
    };
    let parse =
        |v: &Option<IntOrString>, field: &str| -> Result<Option<IntOrPercent>, FieldError> {
            match v {
                None => Ok(None),
                Some(v) => IntOrPercent::parse(v).map(Some).ok_or_else(|| {
                    FieldError::new(
                        field,
                        format!("expected a count or a percentage, got {v:?}"),
                    )
                }),
            }
        };
    Ok(Pdb {
        namespace: p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name,
        selector,
        min_available: parse(&spec.min_available, "spec.minAvailable")?,
        max_unavailable: parse(&spec.max_unavailable, "spec.maxUnavailable")?,
        always_allow_unhealthy: spec.unhealthy_pod_eviction_policy.as_deref()
            == Some("AlwaysAllow"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pods(n: usize, running: usize) -> Vec<Pod> {
        (0..n)
            .map(|i| Pod {
                namespace: "default".into(),
                name: format!("web-{i}"),
                labels: [("app".to_string(), "web".to_string())]
                    .into_iter()
                    .collect::<BTreeMap<_, _>>(),
                phase: if i < running {
                    crate::pod::PodPhase::Running
                } else {
                    crate::pod::PodPhase::Pending
                },
                node_name: Some("n".into()),
                ..Default::default()
            })
            .collect()
    }

    fn pdb(min: Option<IntOrPercent>, max: Option<IntOrPercent>) -> Pdb {
        Pdb {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(LabelSelector::from_match_labels(
                &[("app".to_string(), "web".to_string())]
                    .into_iter()
                    .collect(),
            )),
            min_available: min,
            max_unavailable: max,
            always_allow_unhealthy: false,
        }
    }

    #[test]
    fn allowed_disruptions_follow_the_disruption_controller() {
        use IntOrPercent::*;
        // (pods, running, minAvailable, maxUnavailable, allowed)
        let cases = [
            (5, 5, Some(Int(4)), None, 1),
            (5, 5, Some(Percent(80)), None, 1),
            (5, 4, Some(Int(4)), None, 0),
            (5, 5, None, Some(Int(1)), 1),
            (5, 4, None, Some(Int(1)), 0),
            (10, 10, None, Some(Percent(25)), 3),
            (3, 3, Some(Percent(50)), None, 1),
            (3, 3, Some(Int(3)), None, 0),
        ];
        for (n, running, min, max, want) in cases {
            let ps = pods(n, running);
            let refs: Vec<&Pod> = ps.iter().collect();
            assert_eq!(
                pdb(min, max).allowed(&refs),
                want,
                "{n} pods, {running} running, min {min:?} max {max:?}"
            );
        }
    }

    #[test]
    fn a_pod_on_a_deleting_node_is_planned_ahead_unless_it_stays_or_goes_for_good() {
        use IntOrPercent::*;
        let running = || pods(1, 1).remove(0);
        let owned = |kind: &str| Pod {
            owner_kind: Some(kind.into()),
            ..running()
        };
        let terminating = |p: Pod| Pod {
            deleting: true,
            ..p
        };
        let unready = Pod {
            ready: Some(false),
            ..running()
        };
        let dnd = Pod {
            annotations: [(
                crate::labels::DO_NOT_DISRUPT.to_string(),
                "true".to_string(),
            )]
            .into_iter()
            .collect(),
            ..running()
        };
        let always = Pdb {
            always_allow_unhealthy: true,
            ..pdb(None, Some(Int(0)))
        };
        // (case, pod, budgets, planned ahead)
        let cases: Vec<(&str, Pod, Vec<Pdb>, bool)> = vec![
            ("a running pod", running(), vec![], true),
            (
                "a ReplicaSet's terminating pod",
                terminating(owned("ReplicaSet")),
                vec![],
                false,
            ),
            (
                "a StatefulSet's terminating pod",
                terminating(owned("StatefulSet")),
                vec![],
                true,
            ),
            ("a DaemonSet's pod", owned("DaemonSet"), vec![], false),
            ("a mirror pod", owned("Node"), vec![], false),
            ("a do-not-disrupt pod", dnd, vec![], false),
            (
                "maxUnavailable 1",
                running(),
                vec![pdb(None, Some(Int(1)))],
                true,
            ),
            (
                "maxUnavailable 0",
                running(),
                vec![pdb(None, Some(Int(0)))],
                false,
            ),
            (
                "maxUnavailable 0%",
                running(),
                vec![pdb(None, Some(Percent(0)))],
                false,
            ),
            (
                "minAvailable 100%",
                running(),
                vec![pdb(Some(Percent(100)), None)],
                false,
            ),
            (
                "minAvailable 1",
                running(),
                vec![pdb(Some(Int(1)), None)],
                true,
            ),
            (
                "two budgets",
                running(),
                vec![pdb(None, Some(Int(1))), pdb(None, Some(Int(1)))],
                false,
            ),
            (
                "an unready pod, AlwaysAllow",
                unready.clone(),
                vec![always.clone()],
                true,
            ),
            ("a ready pod, AlwaysAllow", running(), vec![always], false),
        ];
        for (case, pod, budgets, want) in cases {
            assert_eq!(moves_ahead_of_drain(&pod, &budgets, 0.0), want, "{case}");
        }
    }
}
