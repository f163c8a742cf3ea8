//! Predicates the solver and the packing planner share: the only place these rules live.

use capstan_model::labels::{self, CAPACITY_TYPE, HOSTNAME, ZONE};
use capstan_model::requirements::{Operator, Undefined};
use capstan_model::taints::untolerated;
use capstan_model::{InstanceType, NodePool, Pod, Requirement, Requirements, Resources};

/// Whether a type's labels satisfy a requirement (zone, zone ID and capacity type are per
/// offering).
pub fn type_allows(t: &InstanceType, r: &Requirement) -> bool {
    if r.key == ZONE || r.key == CAPACITY_TYPE || r.key == labels::ZONE_ID {
        return true;
    }
    match t.labels.get(&r.key) {
        Some(v) => r.has(v),
        None => {
            // A well-known label the type does not carry has no value, nor does a label other
            // types of its catalog define (the type's requirements say DoesNotExist); any
            // other custom label is the NodePool's to define.
            let type_key =
                (labels::is_well_known(&r.key) && r.key != labels::NODEPOOL && r.key != HOSTNAME)
                    || t.requirements.has_key(&r.key);
            !type_key || matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
        }
    }
}

/// Whether a type can be launched for these requirements: its labels satisfy them and it has
/// an available offering they allow.
pub fn type_compatible(t: &InstanceType, reqs: &Requirements) -> bool {
    reqs.iter().all(|r| type_allows(t, r)) && t.has_offering(reqs)
}

/// The requests every new node of the pool carries for the DaemonSets that would run on it:
/// those that tolerate its taints and whose node requirements it can meet — counting the
/// `karpenter.sh/registered` and `karpenter.sh/initialized` labels every node it launches
/// will carry (as Karpenter's NodeClaimTemplate does for this reckoning only).
pub fn daemon_overhead(pool: &NodePool, daemonsets: &[Pod]) -> Resources {
    let mut o = Resources::new();
    if daemonsets.is_empty() {
        return o;
    }
    let mut template = pool.requirements.clone();
    for key in [labels::REGISTERED_LABEL, labels::INITIALIZED_LABEL] {
        if !template.has_key(key) {
            template.add(Requirement::in_values(key, ["true"]));
        }
    }
    for ds in daemonsets {
        // Required node-affinity terms are ORed: one the pool can meet is enough.
        let mut alternatives: Vec<Requirements> = ds
            .required_terms
            .iter()
            .map(|t| {
                let mut reqs = ds.node_selector.clone();
                reqs.add_all(t);
                reqs
            })
            .collect();
        if alternatives.is_empty() {
            alternatives.push(ds.node_selector.clone());
        }
        if untolerated(&pool.taints, &ds.tolerations, false).is_none()
            && alternatives
                .iter()
                .any(|reqs| template.compatible(reqs, Undefined::AllowWellKnown).is_ok())
        {
            o.add(&ds.requests);
        }
    }
    o
}

/// A pod's hard node requirements: nodeSelector, its first required node-affinity term and
/// what its volumes require.
pub fn pod_requirements(pod: &Pod) -> Requirements {
    let mut reqs = pod.node_selector.clone();
    reqs.add_all(&pod.volume_requirements);
    if let Some(t) = pod.required_terms.first() {
        reqs.add_all(t);
    }
    reqs
}

/// Whether a pod may run on new nodes of a pool: taints tolerated, requirements compatible.
pub fn pod_allowed_in_pool(pool: &NodePool, pod: &Pod) -> bool {
    untolerated(&pool.taints, &pod.tolerations, false).is_none()
        && pool
            .requirements
            .compatible(&pod_requirements(pod), Undefined::AllowWellKnown)
            .is_ok()
}

/// Whether a pod's placement depends on other pods (topology spread, pod (anti-)affinity,
/// host ports). When no pending pod does, and no bound pod repels others, bound pods matter
/// only by their requests (see `Snapshot::used`).
pub fn looks_at_other_pods(p: &Pod) -> bool {
    !p.spread.is_empty()
        || !p.affinity.is_empty()
        || !p.anti_affinity.is_empty()
        || !p.preferred_affinity.is_empty()
        || !p.preferred_anti_affinity.is_empty()
        || !p.host_ports.is_empty()
}
