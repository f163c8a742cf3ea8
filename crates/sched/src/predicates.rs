//! Predicates the solver and the packing planner share: the only place these rules live.

use capstan_model::labels::{self, CAPACITY_TYPE, HOSTNAME, ZONE};
use capstan_model::pod::HostPort;
use capstan_model::requirements::{Operator, Undefined};
use capstan_model::taints::untolerated;
use capstan_model::{InstanceType, NodePool, Pod, Requirement, Requirements, Resources};
use std::collections::{BTreeSet, HashMap};

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

/// The values a type offers for a key, for minValues: its label, or for zone, zone ID and
/// capacity type those of its available offerings `reqs` allow.
pub fn type_values<'t>(t: &'t InstanceType, key: &str, reqs: &Requirements) -> Vec<&'t str> {
    let per_offering: Option<fn(&capstan_model::Offering) -> Option<&str>> = match key {
        ZONE => Some(|o| Some(o.zone.as_str())),
        CAPACITY_TYPE => Some(|o| Some(o.capacity_type.as_str())),
        labels::ZONE_ID => Some(|o| o.zone_id.as_deref()),
        _ => None,
    };
    match per_offering {
        Some(f) => t
            .offerings
            .iter()
            .filter(|o| o.available && capstan_model::catalog::offering_allowed(o, reqs))
            .filter_map(f)
            .collect(),
        None => t.labels.get(key).map(String::as_str).into_iter().collect(),
    }
}

/// Whether a type can be launched for these requirements: its labels satisfy them and it has
/// an available offering they allow.
pub fn type_compatible(t: &InstanceType, reqs: &Requirements) -> bool {
    reqs.iter().all(|r| type_allows(t, r)) && t.has_offering(reqs)
}

/// What the DaemonSets that would run on a new node of a pool cost it: their requests and
/// the host ports they hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DaemonLoad {
    pub overhead: Resources,
    pub host_ports: Vec<HostPort>,
}

/// The DaemonSets on a pool's new nodes, per instance type (Karpenter's daemon overhead
/// groups): a DaemonSet counts on a type when it tolerates the pool's taints and one of its
/// required node-affinity terms (ORed) is compatible with the pool's requirements — counting
/// the `karpenter.sh/registered` and `karpenter.sh/initialized` labels every node the pool
/// launches will carry, as Karpenter's NodeClaimTemplate does for this reckoning only — and
/// allowed by the type's own labels. Types with the same DaemonSets share one load.
#[derive(Clone, Debug, Default)]
pub struct PoolDaemons {
    loads: Vec<DaemonLoad>,
    /// Index into `loads` per catalog type; empty when every type has `loads[0]`.
    of_type: Vec<u32>,
}

impl PoolDaemons {
    pub fn new(pool: &NodePool, daemonsets: &[Pod], types: &[InstanceType]) -> PoolDaemons {
        let mut out = PoolDaemons {
            loads: vec![DaemonLoad::default()],
            of_type: Vec::new(),
        };
        if daemonsets.is_empty() {
            return out;
        }
        let mut template = pool.requirements.clone();
        for key in [labels::REGISTERED_LABEL, labels::INITIALIZED_LABEL] {
            if !template.has_key(key) {
                template.add(Requirement::in_values(key, ["true"]));
            }
        }
        // Label keys the types define beyond the well-known ones (a catalog's own labels):
        // the types decide those, as for pods.
        let type_keys: BTreeSet<String> = types
            .iter()
            .flat_map(|t| t.requirements.iter().map(|r| r.key.clone()))
            .filter(|k| !labels::is_well_known(k))
            .collect();
        // Per DaemonSet: the alternatives (required terms with its node selector) the pool
        // can meet; none when it cannot run on the pool at all.
        let candidates: Vec<(usize, Vec<Requirements>)> = daemonsets
            .iter()
            .enumerate()
            .filter(|(_, ds)| untolerated(&pool.taints, &ds.tolerations, false).is_none())
            .filter_map(|(d, ds)| {
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
                alternatives.retain(|reqs| {
                    template
                        .compatible_with(reqs, Undefined::AllowWellKnown, &type_keys)
                        .is_ok()
                });
                (!alternatives.is_empty()).then_some((d, alternatives))
            })
            .collect();
        if candidates.is_empty() {
            return out;
        }
        let mut keys: HashMap<Vec<usize>, u32> = HashMap::new();
        keys.insert(Vec::new(), 0);
        out.of_type = types
            .iter()
            .map(|t| {
                let on: Vec<usize> = candidates
                    .iter()
                    .filter(|(_, alts)| {
                        alts.iter()
                            .any(|reqs| reqs.iter().all(|r| type_allows(t, r)))
                    })
                    .map(|(d, _)| *d)
                    .collect();
                *keys.entry(on).or_insert_with_key(|on| {
                    let mut load = DaemonLoad::default();
                    for &d in on {
                        load.overhead.add(&daemonsets[d].requests);
                        load.host_ports
                            .extend(daemonsets[d].host_ports.iter().cloned());
                    }
                    out.loads.push(load);
                    (out.loads.len() - 1) as u32
                })
            })
            .collect();
        out
    }

    /// The load on a new node of catalog type `t`.
    pub fn of(&self, t: usize) -> &DaemonLoad {
        match self.of_type.get(t) {
            Some(&g) => &self.loads[g as usize],
            None => &self.loads[0],
        }
    }

    /// The overhead on a new node of catalog type `t`.
    pub fn overhead(&self, t: usize) -> &Resources {
        &self.of(t).overhead
    }

    /// The overhead when every type in `types` carries the same, else `None`.
    pub fn common_overhead(&self, types: impl IntoIterator<Item = usize>) -> Option<&Resources> {
        let mut seen: Option<&Resources> = None;
        for t in types {
            let o = self.overhead(t);
            match seen {
                Some(s) if s != o => return None,
                _ => seen = Some(o),
            }
        }
        seen
    }

    /// What pods may use of type `t` on a new node: allocatable minus the DaemonSets'
    /// requests. A resource the type does not declare (ephemeral storage in most catalogs)
    /// stays undeclared, so it is not checked, as the scheduler does.
    pub fn capacity(&self, t: usize, it: &InstanceType) -> Resources {
        let mut cap = it.allocatable.clone();
        cap.sub(self.overhead(t));
        if it.allocatable.ephemeral_storage == 0 {
            cap.ephemeral_storage = 0;
        }
        cap
    }
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
