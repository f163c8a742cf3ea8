//! Topology bookkeeping: spread constraints and pod (anti-)affinity, counted per domain.
//!
//! A *group* is one distinct constraint (kind, topology key, selector, namespaces, and for
//! spreads their parameters and node filters). Each group counts the pods it selects per
//! domain; anti-affinity groups also count their *owners*, so that a pod selected by a placed
//! pod's required anti-affinity stays out of that pod's domain (the symmetric rule).
//!
//! Hostname domains are slots (nodes, in-flight and new NodeClaims), counted by slot index;
//! every other key's domains are label values.

use capstan_model::labels::HOSTNAME;
use capstan_model::pod::{InclusionPolicy, Namespaces, Pod, PodAffinityTerm, TopologySpread};
use capstan_model::requirements::Undefined;
use capstan_model::selector::LabelSelector;
use capstan_model::taints::{Taint, Toleration, untolerated};
use capstan_model::{Requirement, Requirements};
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Spread {
        max_skew: i32,
        min_domains: Option<i32>,
    },
    Affinity,
    AntiAffinity,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupKey {
    pub kind: Kind,
    pub key: String,
    pub selector: Option<LabelSelector>,
    pub namespaces: Namespaces,
    /// Spread with nodeAffinityPolicy Honor: only nodes matching these count.
    pub filter_reqs: Option<Requirements>,
    /// Spread with nodeTaintsPolicy Honor: only nodes whose taints these tolerate count.
    pub filter_tolerations: Option<Vec<Toleration>>,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub g: GroupKey,
    pub hostname: bool,
    /// Non-hostname keys: pods selected, per domain value.
    counts: BTreeMap<String, u32>,
    /// Hostname key: pods selected, per slot.
    host_counts: Vec<u32>,
    /// Anti-affinity: required owners per domain value / per slot.
    owners: BTreeMap<String, u32>,
    host_owners: Vec<u32>,
    pub total: u32,
    pub owners_total: u32,
    /// Every slot below this index holds a selected pod (counts never fall within a solve).
    zero_cursor: usize,
    /// Spread with a Honor policy: the domains of the nodes and NodePools that count (set by
    /// the solver; `None`: every domain of the universe).
    pub domains: Option<BTreeSet<String>>,
}

impl Group {
    pub fn selects(&self, pod: &Pod) -> bool {
        self.g.namespaces.contains(&pod.namespace)
            && self
                .g
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    pub fn host_count(&self, slot: usize) -> u32 {
        self.host_counts.get(slot).copied().unwrap_or(0)
    }

    pub fn host_owner_count(&self, slot: usize) -> u32 {
        self.host_owners.get(slot).copied().unwrap_or(0)
    }

    pub fn count(&self, domain: &str) -> u32 {
        self.counts.get(domain).copied().unwrap_or(0)
    }

    /// Whether a pod on a node with these requirements/taints counts for this group.
    pub fn node_counts(&self, reqs: &Requirements, undefined: Undefined, taints: &[Taint]) -> bool {
        if let Some(f) = &self.g.filter_reqs {
            if reqs.compatible(f, undefined).is_err() {
                return false;
            }
        }
        if let Some(tols) = &self.g.filter_tolerations {
            if untolerated(taints, tols, false).is_some() {
                return false;
            }
        }
        true
    }

    fn bump(&mut self, domain: Domain<'_>, owner: bool) {
        let (map, vec, total) = if owner {
            (
                &mut self.owners,
                &mut self.host_owners,
                &mut self.owners_total,
            )
        } else {
            (&mut self.counts, &mut self.host_counts, &mut self.total)
        };
        match domain {
            Domain::Slot(s) => {
                if vec.len() <= s {
                    vec.resize(s + 1, 0);
                }
                vec[s] += 1;
            }
            Domain::Value(v) => *map.entry(v.to_string()).or_insert(0) += 1,
        }
        *total += 1;
    }

    pub fn describe(&self) -> String {
        let sel = self
            .g
            .selector
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_else(|| "<none>".into());
        match &self.g.kind {
            Kind::Spread {
                max_skew,
                min_domains,
            } => {
                let md = min_domains
                    .map(|m| format!(" minDomains {m}"))
                    .unwrap_or_default();
                format!(
                    "topology spread on {} (maxSkew {max_skew}{md}, selector {sel})",
                    self.g.key
                )
            }
            Kind::Affinity => format!("pod affinity on {} (selector {sel})", self.g.key),
            Kind::AntiAffinity => format!("pod anti-affinity on {} (selector {sel})", self.g.key),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Domain<'a> {
    Slot(usize),
    Value(&'a str),
}

/// What one slot must satisfy on a hostname group.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HostCheck {
    /// Spread: at most this many selected pods already on the slot.
    AtMost(u32),
    /// Anti-affinity: no selected pod on the slot.
    Zero,
    /// Affinity: some selected pod on the slot.
    NonZero,
    /// Symmetric anti-affinity: no owner that selects this pod on the slot.
    NoOwners,
}

#[derive(Clone, Debug)]
pub(crate) struct HostConstraint {
    pub group: usize,
    pub check: HostCheck,
}

/// Constraints on one non-hostname key, merged over the pod's groups.
#[derive(Clone, Debug)]
pub(crate) struct KeyConstraint {
    pub key: String,
    /// `None`: any domain (the slot still gets pinned to one, so the count is exact).
    pub allowed: Option<BTreeSet<String>>,
    /// Spread groups whose counts decide which domain to pin to (fewest first).
    pub prefer: Vec<usize>,
    /// Groups that restricted `allowed`, for reasons.
    pub why: Vec<usize>,
}

/// The topology constraints one pod carries into a placement attempt.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodTopology {
    pub keyed: Vec<KeyConstraint>,
    pub host: Vec<HostConstraint>,
    /// A constraint that no slot can satisfy (e.g. affinity to pods that do not exist).
    pub impossible: Option<String>,
}

/// The groups a pod owns in its current (possibly relaxed) state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Owned {
    pub groups: Vec<usize>,
    /// The subset that are required anti-affinity (counted as owners when placed).
    pub required_anti: Vec<usize>,
}

pub(crate) struct Topology {
    pub groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    /// Per non-hostname key, every domain value a node could have, sorted.
    pub universe: BTreeMap<String, Vec<String>>,
}

impl Topology {
    pub fn new(universe: BTreeMap<String, Vec<String>>) -> Topology {
        Topology {
            groups: Vec::new(),
            index: HashMap::new(),
            universe,
        }
    }

    fn intern(&mut self, g: GroupKey) -> usize {
        if let Some(&i) = self.index.get(&g) {
            return i;
        }
        let i = self.groups.len();
        self.index.insert(g.clone(), i);
        self.groups.push(Group {
            hostname: g.key == HOSTNAME,
            g,
            counts: BTreeMap::new(),
            host_counts: Vec::new(),
            owners: BTreeMap::new(),
            host_owners: Vec::new(),
            total: 0,
            owners_total: 0,
            zero_cursor: 0,
            domains: None,
        });
        i
    }

    pub fn spread_group(
        &mut self,
        pod: &Pod,
        s: &TopologySpread,
        node_reqs: &Requirements,
    ) -> usize {
        self.intern(GroupKey {
            kind: Kind::Spread {
                max_skew: s.max_skew,
                min_domains: s.min_domains,
            },
            key: s.topology_key.clone(),
            selector: s.selector.clone(),
            namespaces: Namespaces::List(vec![pod.namespace.clone()]),
            filter_reqs: (s.node_affinity_policy == InclusionPolicy::Honor
                && !node_reqs.is_empty())
            .then(|| node_reqs.clone()),
            filter_tolerations: (s.node_taints_policy == InclusionPolicy::Honor)
                .then(|| pod.tolerations.clone()),
        })
    }

    pub fn affinity_group(&mut self, term: &PodAffinityTerm, anti: bool) -> usize {
        self.intern(GroupKey {
            kind: if anti {
                Kind::AntiAffinity
            } else {
                Kind::Affinity
            },
            key: term.topology_key.clone(),
            selector: term.selector.clone(),
            namespaces: term.namespaces.clone(),
            filter_reqs: None,
            filter_tolerations: None,
        })
    }

    /// Records a pod placed on `slot`: counted in every group of `selected_by` that counts the
    /// node, and as an owner in `owner_of`. `value_of(key)` is the slot's domain for a key.
    pub fn record(
        &mut self,
        selected_by: &[usize],
        owner_of: &[usize],
        slot: usize,
        value_of: impl Fn(&str) -> Option<String>,
        counts_node: impl Fn(&Group) -> bool,
    ) {
        for (list, owner) in [(selected_by, false), (owner_of, true)] {
            for &g in list {
                let grp = &self.groups[g];
                if !owner && !counts_node(grp) {
                    continue;
                }
                if grp.hostname {
                    self.groups[g].bump(Domain::Slot(slot), owner);
                } else if let Some(v) = value_of(&grp.g.key) {
                    self.groups[g].bump(Domain::Value(&v), owner);
                }
            }
        }
    }

    /// The constraints `pod` brings, given the groups it owns and the anti-affinity groups
    /// that select it. `pod_reqs` are the pod's current node requirements.
    pub fn constraints(
        &self,
        pod: &Pod,
        owned: &Owned,
        selected_by_anti: &[usize],
        selected_by: &[usize],
        pod_reqs: &Requirements,
    ) -> PodTopology {
        let mut out = PodTopology::default();
        let mut keyed: BTreeMap<String, KeyConstraint> = BTreeMap::new();
        let restrict = |keyed: &mut BTreeMap<String, KeyConstraint>,
                        key: &str,
                        allowed: BTreeSet<String>,
                        g: usize| {
            let e = keyed
                .entry(key.to_string())
                .or_insert_with(|| KeyConstraint {
                    key: key.to_string(),
                    allowed: None,
                    prefer: Vec::new(),
                    why: Vec::new(),
                });
            e.allowed = Some(match e.allowed.take() {
                None => allowed,
                Some(prev) => prev.intersection(&allowed).cloned().collect(),
            });
            e.why.push(g);
        };
        let empty = Vec::new();
        for &g in &owned.groups {
            let grp = &self.groups[g];
            let self_match = u32::from(grp.selects(pod));
            let universe = self.universe.get(&grp.g.key).unwrap_or(&empty);
            match (&grp.g.kind, grp.hostname) {
                (Kind::Spread { max_skew, .. }, true) => {
                    // A new node is always possible, so the global minimum is zero.
                    let limit = (*max_skew as u32).saturating_sub(self_match);
                    out.host.push(HostConstraint {
                        group: g,
                        check: HostCheck::AtMost(limit),
                    });
                }
                (
                    Kind::Spread {
                        max_skew,
                        min_domains,
                    },
                    false,
                ) => {
                    let eligible: Vec<&String> = universe
                        .iter()
                        .filter(|d| grp.g.filter_reqs.is_none() || pod_reqs.allows(&grp.g.key, d))
                        .filter(|d| grp.domains.as_ref().is_none_or(|s| s.contains(*d)))
                        .collect();
                    let min = if min_domains.is_some_and(|m| (eligible.len() as i32) < m) {
                        0
                    } else {
                        eligible.iter().map(|d| grp.count(d)).min().unwrap_or(0)
                    };
                    let allowed: BTreeSet<String> = eligible
                        .into_iter()
                        .filter(|d| {
                            (grp.count(d) + self_match) as i64 - min as i64 <= *max_skew as i64
                        })
                        .cloned()
                        .collect();
                    restrict(&mut keyed, &grp.g.key, allowed, g);
                    keyed
                        .get_mut(&grp.g.key)
                        .expect("just inserted")
                        .prefer
                        .push(g);
                }
                (Kind::Affinity, true) => {
                    if grp.total > 0 {
                        out.host.push(HostConstraint {
                            group: g,
                            check: HostCheck::NonZero,
                        });
                    } else if self_match == 0 {
                        out.impossible =
                            Some(format!("{}: no pod matches the selector", grp.describe()));
                    }
                }
                (Kind::Affinity, false) => {
                    let allowed: BTreeSet<String> = grp
                        .counts
                        .iter()
                        .filter(|(_, c)| **c > 0)
                        .map(|(d, _)| d.clone())
                        .collect();
                    // As Karpenter: a pod that selects itself, whose node requirements allow
                    // none of the domains the selected pods are in, starts a domain of its own
                    // (two groups of one Deployment pinned to different zones).
                    let reachable = allowed.iter().any(|d| pod_reqs.allows(&grp.g.key, d));
                    if grp.total > 0 && (reachable || self_match == 0) {
                        restrict(&mut keyed, &grp.g.key, allowed, g);
                    } else if self_match == 0 {
                        out.impossible =
                            Some(format!("{}: no pod matches the selector", grp.describe()));
                    } else {
                        // First of its kind (or of the domains it may use): any domain, but
                        // pinned to one.
                        keyed
                            .entry(grp.g.key.clone())
                            .or_insert_with(|| KeyConstraint {
                                key: grp.g.key.clone(),
                                allowed: None,
                                prefer: Vec::new(),
                                why: Vec::new(),
                            });
                    }
                }
                (Kind::AntiAffinity, true) => out.host.push(HostConstraint {
                    group: g,
                    check: HostCheck::Zero,
                }),
                (Kind::AntiAffinity, false) => {
                    let allowed = universe
                        .iter()
                        .filter(|d| grp.count(d) == 0)
                        .cloned()
                        .collect();
                    restrict(&mut keyed, &grp.g.key, allowed, g);
                }
            }
        }
        for &g in selected_by_anti {
            let grp = &self.groups[g];
            if grp.owners_total == 0 {
                continue;
            }
            if grp.hostname {
                out.host.push(HostConstraint {
                    group: g,
                    check: HostCheck::NoOwners,
                });
            } else {
                let universe = self.universe.get(&grp.g.key).unwrap_or(&empty);
                let allowed = universe
                    .iter()
                    .filter(|d| grp.owners.get(*d).copied().unwrap_or(0) == 0)
                    .cloned()
                    .collect();
                restrict(&mut keyed, &grp.g.key, allowed, g);
            }
        }
        // Pods counted by a keyed group land in one known domain, so counts stay exact.
        for &g in selected_by {
            let grp = &self.groups[g];
            if grp.hostname {
                continue;
            }
            let e = keyed
                .entry(grp.g.key.clone())
                .or_insert_with(|| KeyConstraint {
                    key: grp.g.key.clone(),
                    allowed: None,
                    prefer: Vec::new(),
                    why: Vec::new(),
                });
            if matches!(grp.g.kind, Kind::Spread { .. }) && !e.prefer.contains(&g) {
                e.prefer.push(g);
            }
        }
        out.keyed = keyed.into_values().collect();
        out
    }

    /// Checks a slot against the hostname constraints; returns the blocking group.
    pub fn host_ok(&self, host: &[HostConstraint], slot: usize) -> Result<(), usize> {
        for h in host {
            let grp = &self.groups[h.group];
            let ok = match h.check {
                HostCheck::AtMost(n) => grp.host_count(slot) <= n,
                HostCheck::Zero => grp.host_count(slot) == 0,
                HostCheck::NonZero => grp.host_count(slot) > 0,
                HostCheck::NoOwners => grp.host_owner_count(slot) == 0,
            };
            if !ok {
                return Err(h.group);
            }
        }
        Ok(())
    }

    /// The first slot index that could pass these hostname constraints: slots below it hold a
    /// pod that a Zero / AtMost(0) constraint forbids. Lets a pod skip full prefixes of slots.
    pub fn first_candidate_slot(&mut self, host: &[HostConstraint]) -> usize {
        let mut start = 0;
        for h in host {
            if matches!(h.check, HostCheck::Zero | HostCheck::AtMost(0)) {
                let g = &mut self.groups[h.group];
                while g.host_counts.get(g.zero_cursor).is_some_and(|&c| c > 0) {
                    g.zero_cursor += 1;
                }
                start = start.max(g.zero_cursor);
            }
        }
        start
    }

    /// Picks the domain for a keyed constraint among `candidates`: the one with the fewest
    /// pods over the preferring spread groups, then by name.
    pub fn pick<'a>(
        &self,
        kc: &KeyConstraint,
        candidates: impl Iterator<Item = &'a String>,
    ) -> Option<&'a String> {
        candidates
            .filter(|d| kc.allowed.as_ref().is_none_or(|a| a.contains(*d)))
            .min_by_key(|d| {
                kc.prefer
                    .iter()
                    .map(|&g| self.groups[g].count(d))
                    .sum::<u32>()
            })
    }
}

/// `key In [value]`.
pub(crate) fn pin(key: &str, value: &str) -> Requirement {
    Requirement::in_values(key, [value])
}
