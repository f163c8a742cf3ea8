//! The ReplicaSet controller and the autoscalers: each second, pods whose startup finished
//! become Ready, the traffic moves, due autoscalers (HPA, KEDA-style) set replicas, and the
//! ReplicaSet adds pods or removes them (unscheduled first, then unready, then the newest).

use crate::{Sim, workload};
use capstan_controller::api::{Kind, Object};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) struct PodTimes {
    pub created: f64,
    /// Created during a predictable ramp of its workload's demand.
    pub ramp: bool,
    pub bound: Option<f64>,
    /// A NodeClaim was created for it while it was pending.
    pub requested: bool,
    pub ready_at: Option<f64>,
    /// The zone of the node it was bound to.
    pub zone: Option<String>,
    /// Counted in its workload's `ready`.
    pub counted_ready: bool,
}

/// A workload's pods, kept up to date as they come and go (so a simulated second costs
/// nothing per pod).
#[derive(Default)]
pub(crate) struct Members {
    /// Its pods by key, with their times.
    pub pods: BTreeMap<String, PodTimes>,
    pub ready: usize,
    /// Bumped when a pod joins, leaves or is bound: the autoscaler rebuilds its pod list.
    pub version: u64,
    /// Its placeholder pods (forecast capacity), by key, with the zone each is pinned to: not
    /// members, never counted.
    pub placeholders: BTreeMap<String, Option<String>>,
    /// The (version, wanted) its placeholders were last matched to.
    pub placeholders_for: Option<(u64, usize)>,
}

impl Members {
    /// (key, bound at, ready at) of the bound pods, in key order.
    pub fn bound(&self) -> impl Iterator<Item = (&String, f64, f64)> {
        self.pods
            .iter()
            .filter_map(|(k, t)| Some((k, t.bound?, t.ready_at?)))
    }
}

impl Sim {
    /// Forgets a pod that left the cluster, keeping its workload's counts.
    pub(crate) fn forget_pod(&mut self, key: &str) -> Option<PodTimes> {
        let w = self.pods.remove(key)?;
        let m = &mut self.members[w];
        let t = m.pods.remove(key)?;
        m.version += 1;
        if t.counted_ready {
            m.ready -= 1;
        }
        Some(t)
    }

    pub(crate) async fn workloads(&mut self, now: f64) {
        // Pods whose startup finished are Ready.
        while let Some((at, key)) = self.becoming_ready.first().cloned() {
            if at as f64 > now {
                break;
            }
            self.becoming_ready.pop_first();
            let Some(&w) = self.pods.get(&key) else {
                continue;
            };
            let m = &mut self.members[w];
            if let Some(t) = m.pods.get_mut(&key) {
                if t.bound.is_some() && !t.counted_ready {
                    t.counted_ready = true;
                    m.ready += 1;
                }
            }
        }
        let minute = (now / 60.0) as u64;
        let rps = workload::rps(&self.sc.scenario.traffic, now)
            * workload::noise(self.opts.seed, minute, self.sc.scenario.traffic.noise);
        for w in 0..self.workloads.len() {
            let ready = self.members[w].ready;
            self.workloads[w].tick(&self.sc, now, rps, ready);
        }
        let due: Vec<bool> = self
            .workloads
            .iter()
            .map(|st| st.autoscale_due(now))
            .collect();
        if due.contains(&true) {
            let mut scaled = Vec::new();
            for (w, st) in self.workloads.iter_mut().enumerate() {
                if due[w] {
                    let m = &self.members[w];
                    let live = || m.bound().map(|(k, b, r)| (k.as_str(), b, r)).collect();
                    if let Some(n) = st.autoscale(now, m.version, live) {
                        scaled.push(format!("{} → {n} replicas", st.spec.name));
                    }
                }
            }
            for e in scaled {
                self.event(now, "scale", e);
            }
        }
        for w in 0..self.workloads.len() {
            let desired = self.workloads[w].desired.max(0) as usize;
            let have = self.members[w].pods.len();
            if have < desired {
                let ramp = self.workloads[w].in_predictable_ramp(&self.sc.scenario.traffic, now);
                for _ in have..desired {
                    let p = self.workloads[w].new_pod();
                    self.pods.insert(p.key(), w);
                    let m = &mut self.members[w];
                    m.pods.insert(
                        p.key(),
                        PodTimes {
                            created: now,
                            ramp,
                            bound: None,
                            requested: false,
                            ready_at: None,
                            zone: None,
                            counted_ready: false,
                        },
                    );
                    m.version += 1;
                    self.summary.pods_created += 1;
                    self.api.put(Object::Pod(Arc::new(p)));
                }
            } else if have > desired {
                // The ReplicaSet controller removes unscheduled pods first, then the
                // others in upstream's order (`ActivePodsWithRanks`).
                let pending: Vec<String> = self.members[w]
                    .pods
                    .iter()
                    .filter(|(_, t)| t.bound.is_none())
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut victims: Vec<String> = pending.into_iter().rev().collect();
                let live: Vec<Victim> = self
                    .live_pods(w, now)
                    .into_iter()
                    .map(|(key, ready, bound, ready_at)| Victim {
                        node: self.api.pod(&key).and_then(|p| p.node_name.clone()),
                        created: self.members[w].pods.get(&key).map_or(bound, |t| t.created),
                        key,
                        ready,
                        ready_at,
                    })
                    .collect();
                victims.extend(scale_down_order(live, now));
                for k in victims.into_iter().take(have - desired) {
                    if let Some(t) = self.forget_pod(&k) {
                        if t.bound.is_none() {
                            self.waited(t.created, t.ramp, now);
                        }
                    }
                    self.api.remove(Kind::Pod, &k);
                }
            }
            self.placeholders(w);
        }
    }

    /// Each workload keeps as many placeholders as its forecast wants room for: preempted or
    /// killed ones are made again; extra ones go, unscheduled first, then the newest. A
    /// workload spread across zones gets its room where its spread will put its next pods:
    /// its pods' zones are counted (pending ones go to the emptiest zones first), the
    /// placeholders water-fill the zones from there, and each is pinned to its zone. Room in
    /// another zone is no room for a pod whose spread says this one.
    fn placeholders(&mut self, w: usize) {
        let wanted = self.workloads[w].ahead.max(0) as usize;
        let zonal = self.workloads[w]
            .template
            .spread
            .iter()
            .any(|s| s.topology_key == capstan_model::labels::ZONE);
        let m = &mut self.members[w];
        if wanted == 0 && m.placeholders.is_empty() {
            return;
        }
        let api = &self.api;
        let before = m.placeholders.len();
        m.placeholders.retain(|k, _| api.pod(k).is_some());
        let fresh = (m.version, wanted);
        if m.placeholders.len() == before && m.placeholders_for == Some(fresh) {
            return;
        }
        m.placeholders_for = Some(fresh);
        // The zone each wanted placeholder holds room in (None: anywhere).
        let mut want: BTreeMap<Option<String>, usize> = BTreeMap::new();
        if zonal && wanted > 0 {
            let mut count: BTreeMap<&str, usize> = self
                .cloud
                .inner
                .zones()
                .iter()
                .map(|z| (z.as_str(), 0))
                .collect();
            let mut pending = 0;
            for t in m.pods.values() {
                match t.zone.as_deref().and_then(|z| count.get_mut(z)) {
                    Some(c) => *c += 1,
                    None => pending += 1,
                }
            }
            for (z, n) in water_fill(count, pending, wanted) {
                want.insert(Some(z), n);
            }
        } else if wanted > 0 {
            want.insert(None, wanted);
        }
        tracing::debug!(workload = %self.workloads[w].spec.name, wanted, ?want, "forecast room by zone");
        // Per zone: keep what is wanted (bound ones first, then the oldest), remove the rest.
        let mut held: BTreeMap<Option<String>, Vec<(bool, String)>> = BTreeMap::new();
        for (k, z) in &m.placeholders {
            let bound = api.pod(k).is_some_and(|p| p.node_name.is_some());
            held.entry(z.clone()).or_default().push((bound, k.clone()));
        }
        let mut gone = Vec::new();
        for (z, mut ks) in held {
            let keep = want.get(&z).copied().unwrap_or(0);
            // Bound first, then the oldest: the tail goes.
            ks.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            gone.extend(ks.into_iter().skip(keep).map(|(_, k)| k));
        }
        for k in gone {
            self.members[w].placeholders.remove(&k);
            self.api.remove(Kind::Pod, &k);
        }
        for (z, n) in want {
            let have = self.members[w]
                .placeholders
                .values()
                .filter(|hz| **hz == z)
                .count();
            for _ in have..n {
                let p = self.workloads[w].new_placeholder(z.as_deref());
                self.members[w].placeholders.insert(p.key(), z.clone());
                self.api.put(Object::Pod(Arc::new(p)));
            }
        }
    }

    /// (key, ready, start, ready_at) of a workload's bound pods.
    fn live_pods(&self, w: usize, now: f64) -> Vec<(String, bool, f64, f64)> {
        self.members[w]
            .bound()
            .map(|(k, b, r)| (k.clone(), r <= now, b, r))
            .collect()
    }
}

/// A bound pod the ReplicaSet controller may remove.
struct Victim {
    key: String,
    node: Option<String>,
    ready: bool,
    ready_at: f64,
    created: f64,
}

/// Bound pods in the order upstream's ReplicaSet controller removes them
/// (`ActivePodsWithRanks`, with `LogarithmicScaleDown`, GA since 1.31): not ready before
/// ready; then those sharing their node with more of the workload's pods (it spreads what
/// stays over nodes); then, among ready pods, the ones ready for less time by powers of two
/// of nanoseconds, and among the rest the newer by the same buckets of age; ties by uid, which
/// upstream draws at random (here a hash of the name, so a run repeats).
fn scale_down_order(mut pods: Vec<Victim>, now: f64) -> impl Iterator<Item = String> {
    let mut on_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &pods {
        *on_node.entry(p.node.as_deref().unwrap_or("")).or_default() += 1;
    }
    let rank: BTreeMap<String, usize> = pods
        .iter()
        .map(|p| (p.key.clone(), on_node[p.node.as_deref().unwrap_or("")]))
        .collect();
    // The bucket of an age: floor(log2(nanoseconds)), -1 for none.
    let bucket = |since: f64| {
        let ns = (now - since) * 1e9;
        if ns >= 1.0 {
            ns.log2().floor() as i64
        } else {
            -1
        }
    };
    let uid = |k: &str| {
        k.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    pods.sort_by_cached_key(|p| {
        let age = if p.ready {
            bucket(p.ready_at)
        } else {
            bucket(p.created)
        };
        (p.ready, std::cmp::Reverse(rank[&p.key]), age, uid(&p.key))
    });
    pods.into_iter().map(|p| p.key)
}

/// Where a zone-spread workload's next pods go: its `pending` pods, then `wanted` more, each
/// to the zone with the fewest (the first by name on a tie), as a `maxSkew: 1` spread places
/// them. Returns the zones of the `wanted` ones.
fn water_fill(
    mut count: BTreeMap<&str, usize>,
    pending: usize,
    wanted: usize,
) -> BTreeMap<String, usize> {
    let mut next = || {
        let (z, c) = count
            .iter_mut()
            .min_by(|a, b| (*a.1).cmp(&*b.1).then(a.0.cmp(b.0)))?;
        *c += 1;
        Some(z.to_string())
    };
    for _ in 0..pending {
        next();
    }
    let mut want = BTreeMap::new();
    for _ in 0..wanted {
        if let Some(z) = next() {
            *want.entry(z).or_default() += 1;
        }
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_for_a_zone_spread_workload_goes_where_its_next_pods_will_after_those_pending() {
        // (pods per zone, pending, wanted, room per zone)
        type Zones<'a> = &'a [(&'a str, usize)];
        let cases: [(Zones, usize, usize, Zones); 5] = [
            (
                &[("a", 10), ("b", 10), ("c", 10)],
                0,
                4,
                &[("a", 2), ("b", 1), ("c", 1)],
            ),
            (
                &[("a", 12), ("b", 10), ("c", 8)],
                0,
                4,
                &[("b", 1), ("c", 3)],
            ),
            (
                &[("a", 12), ("b", 10), ("c", 8)],
                2,
                2,
                &[("b", 1), ("c", 1)],
            ),
            (&[("a", 5), ("b", 5)], 0, 0, &[]),
            (&[], 0, 3, &[]),
        ];
        for (count, pending, wanted, want) in cases {
            let got = water_fill(count.iter().copied().collect(), pending, wanted);
            let want: BTreeMap<String, usize> =
                want.iter().map(|(z, n)| (z.to_string(), *n)).collect();
            assert_eq!(got, want, "{count:?} {pending} {wanted}");
        }
    }

    #[test]
    fn scale_down_removes_unready_pods_then_those_doubled_up_on_a_node_then_the_recently_ready() {
        let v = |key: &str, node: &str, ready: bool, ready_at: f64| Victim {
            key: key.into(),
            node: Some(node.into()),
            ready,
            ready_at,
            created: ready_at - 20.0,
        };
        let now = 10_000.0;
        // (pods, the first `n` removed, in order)
        let cases: [(Vec<Victim>, &[&str]); 4] = [
            // Not ready goes first, even alone on its node.
            (
                vec![
                    v("a", "n1", true, 100.0),
                    v("b", "n1", true, 200.0),
                    v("c", "n2", false, 9_990.0),
                ],
                &["c"],
            ),
            // Of ready pods, those sharing a node with more of theirs go first, however old.
            (
                vec![
                    v("old1", "n1", true, 100.0),
                    v("old2", "n1", true, 110.0),
                    v("new", "n2", true, 9_000.0),
                ],
                &["old2", "old1"],
            ),
            // On equally crowded nodes, the one ready for less time (by powers of two) goes.
            (
                vec![
                    v("a", "n1", true, 100.0),
                    v("b", "n2", true, 9_900.0),
                    v("c", "n3", true, 5_000.0),
                ],
                &["b", "c", "a"],
            ),
            // Within one power of two of age, the order is the uid's: neither newest nor
            // oldest first.
            (
                vec![
                    v("web-1", "n1", true, 9_000.0),
                    v("web-2", "n2", true, 9_000.3),
                    v("web-4", "n3", true, 9_000.5),
                ],
                &["web-4", "web-1", "web-2"],
            ),
        ];
        for (pods, want) in cases {
            let got: Vec<String> = scale_down_order(pods, now).take(want.len()).collect();
            assert_eq!(got, want);
        }
    }
}
