//! The ReplicaSet controller and the autoscalers: each second, pods whose startup finished
//! become Ready, the traffic moves, due autoscalers (HPA, KEDA-style) set replicas, and the
//! ReplicaSet adds pods or removes them (unscheduled first, then unready, then the newest).

use crate::{Sim, workload};
use capstan_controller::api::{Kind, Object};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(crate) struct PodTimes {
    pub created: f64,
    /// Created during a predictable ramp of its workload's demand.
    pub ramp: bool,
    pub bound: Option<f64>,
    /// A NodeClaim was created for it while it was pending.
    pub requested: bool,
    pub ready_at: Option<f64>,
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
    /// Its placeholder pods (forecast capacity), by key: not members, never counted.
    pub placeholders: BTreeSet<String>,
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
                            counted_ready: false,
                        },
                    );
                    m.version += 1;
                    self.summary.pods_created += 1;
                    self.api.put(Object::Pod(Arc::new(p)));
                }
            } else if have > desired {
                // The ReplicaSet controller removes unscheduled pods first, then unready,
                // then the newest.
                let pending: Vec<String> = self.members[w]
                    .pods
                    .iter()
                    .filter(|(_, t)| t.bound.is_none())
                    .map(|(k, _)| k.clone())
                    .collect();
                let mut victims: Vec<String> = pending.into_iter().rev().collect();
                let mut rest = self.live_pods(w, now);
                rest.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0)));
                victims.extend(rest.into_iter().map(|p| p.0));
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
    /// workload spread across zones gets room in every zone (the count rounded up to a
    /// multiple of the zones): its next pod must go to the zone its spread says, and room in
    /// another zone is no room for it.
    fn placeholders(&mut self, w: usize) {
        let mut wanted = self.workloads[w].ahead.max(0) as usize;
        let zonal = self.workloads[w]
            .template
            .spread
            .iter()
            .any(|s| s.topology_key == capstan_model::labels::ZONE);
        if wanted > 0 && zonal {
            let zones = self.cloud.inner.zones().len().max(1);
            wanted = wanted.div_ceil(zones) * zones;
        }
        let m = &mut self.members[w];
        if wanted == 0 && m.placeholders.is_empty() {
            return;
        }
        let api = &self.api;
        m.placeholders.retain(|k| api.pod(k).is_some());
        let have = m.placeholders.len();
        if have < wanted {
            for _ in have..wanted {
                let p = self.workloads[w].new_placeholder();
                self.members[w].placeholders.insert(p.key());
                self.api.put(Object::Pod(Arc::new(p)));
            }
        } else if have > wanted {
            let mut victims: Vec<(bool, String)> = m
                .placeholders
                .iter()
                .map(|k| (api.pod(k).is_some_and(|p| p.node_name.is_some()), k.clone()))
                .collect();
            // Unscheduled first, then the newest.
            victims.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            for (_, k) in victims.into_iter().take(have - wanted) {
                self.members[w].placeholders.remove(&k);
                self.api.remove(Kind::Pod, &k);
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
