//! Accounting: what the controllers did (their records, for the timeline), what capstan's
//! writes removed (evictions are fine; a pod deleted past its PDB is a violation), budgets
//! kept, cost against its lower bound each minute, and at the end leaks, double launches and
//! pods that fit but were never scheduled.

use crate::replicasets::PodTimes;
use crate::{Outcome, Removal, Sample, Sim, percentile, round, workload};
use capstan_cloud::CloudProvider;
use capstan_controller::Action;
use capstan_controller::api::{Kind, Object};
use capstan_model::disruption::Reason;
use capstan_model::{InstanceType, Node, NodePool, Pod, labels};
use capstan_sched::SnapshotBuilder;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A pod pending this long at the end, that fits somewhere, breaks an invariant.
const STUCK_SECONDS: f64 = 900.0;

impl Sim {
    pub(crate) fn on_record(&mut self, who: usize, r: capstan_controller::Record) {
        let t = r.at;
        match r.action {
            Action::Elected { term } => {
                self.summary.leader_elections += 1;
                self.event(t, "leader", format!("controller {who} leads term {term}"));
            }
            Action::Deposed { reason } => {
                self.event(t, "leader", format!("controller {who} deposed: {reason}"));
            }
            Action::Requested { pods, .. } => {
                for k in &pods {
                    let Some(&w) = self.pods.get(k) else { continue };
                    let Some(pt) = self.members[w].pods.get_mut(k) else {
                        continue;
                    };
                    if pt.bound.is_none() && !pt.requested {
                        pt.requested = true;
                        self.request_durations.push(t - pt.created);
                    }
                }
            }
            Action::Launched {
                claim,
                instance_type,
                zone,
                capacity_type,
                price,
            } => {
                self.summary.nodes_launched += 1;
                self.event(
                    t,
                    "launch",
                    format!("{claim}: {instance_type} {zone} {capacity_type} ${price:.4}/h"),
                );
            }
            Action::Terminated { claim, reason } => {
                self.summary.nodes_terminated += 1;
                self.event(t, "terminate", format!("{claim} ({reason})"));
            }
            Action::Interrupted { claim, event } => {
                if event == Reason::SpotInterruption {
                    self.summary.spot_interruptions += 1;
                }
                if event != Reason::RebalanceRecommendation {
                    if let Some(n) = self
                        .view
                        .claim(&claim)
                        .and_then(|c| c.status.node_name.clone())
                    {
                        self.doomed_nodes.insert(n);
                    }
                }
                self.event(t, "interruption", format!("{claim}: {event}"));
            }
            Action::Disrupting {
                reason,
                candidates,
                replacements,
                savings,
            } => {
                self.summary.consolidations += 1;
                for c in &candidates {
                    self.disrupting.insert(c.clone());
                }
                self.event(
                    t,
                    "disruption",
                    format!(
                        "{}: {} → {replacements} replacements, saves ${savings:.3}/h",
                        reason.cli_name(),
                        candidates.join(", ")
                    ),
                );
            }
            Action::DisruptionAborted { candidates, why } => {
                self.event(
                    t,
                    "disruption",
                    format!("aborted {}: {why}", candidates.join(", ")),
                );
            }
            Action::GarbageCollected { provider_id } => {
                self.event(t, "gc", format!("terminated orphan {provider_id}"));
            }
            Action::NotRegistered { claim } => {
                self.event(t, "liveness", format!("{claim} never registered"));
            }
            Action::LaunchAbandoned { claim, error } => {
                self.event(t, "launch", format!("{claim} abandoned: {error}"));
            }
            _ => {}
        }
    }

    /// Counts budget violations: for each NodePool, nodes being disrupted (tainted, cordoned
    /// or NotReady, as the engine counts them) beyond what its budgets allow when a disruption
    /// starts.
    pub(crate) fn check_budgets(&mut self, now: f64) {
        if self.disrupting.is_empty() {
            return;
        }
        let started = std::mem::take(&mut self.disrupting);
        let nodes: Vec<Arc<Node>> = self
            .api
            .all(Kind::Node)
            .into_iter()
            .filter_map(|o| match o {
                Object::Node(n) => Some(n),
                _ => None,
            })
            .collect();
        let pools: BTreeSet<String> = started
            .iter()
            .filter_map(|n| nodes.iter().find(|x| x.name == *n))
            .filter_map(|n| n.labels.get(labels::NODEPOOL).cloned())
            .collect();
        for pool in pools {
            let Some(np) = self.sc.nodepools.iter().find(|p| p.name == pool) else {
                continue;
            };
            // As Karpenter counts: initialized nodes make the total, NotReady and going ones use
            // the budget up.
            let mine: Vec<&Arc<Node>> = nodes
                .iter()
                .filter(|n| {
                    n.labels.get(labels::NODEPOOL) == Some(&pool) && n.labelled_initialized()
                })
                .collect();
            let disrupting = mine.iter().filter(|n| n.budget_disrupting()).count() as i64;
            let allowed = [Reason::Empty, Reason::Underutilized, Reason::Drifted]
                .into_iter()
                .map(|r| {
                    np.budgets
                        .allows(r, mine.len() as i64, self.sc.start_unix + now)
                })
                .max()
                .unwrap_or(i64::MAX);
            if disrupting > allowed {
                self.summary.budget_violations += 1;
                self.event(
                    now,
                    "violation",
                    format!("{pool}: {disrupting} nodes disrupting, budget allows {allowed}"),
                );
            }
        }
    }

    /// Pods capstan removed: evictions are fine (their ReplicaSet replaces them); a pod
    /// deleted outright while its PDB allowed no disruption is a violation. Nodes deleted
    /// with pods still on them kill those pods.
    pub(crate) fn account_removals(&mut self, now: f64) {
        for (p, how) in self.api.take_removed() {
            if let Some(t) = self.forget_pod(&p.key()) {
                self.count_pending(&t, now);
            }
            // Deleting pods from a node the cloud is about to take is not a voluntary
            // disruption: they would die there anyway.
            let doomed = p
                .node_name
                .as_ref()
                .is_some_and(|n| self.doomed_nodes.contains(n));
            if how == Removal::DeletedByController && !doomed && self.api.pdb_blocks(&p) {
                self.summary.pdb_violations += 1;
                self.event(
                    now,
                    "violation",
                    format!("{} deleted past its PDB", p.key()),
                );
            }
        }
        // Pods on nodes that no longer exist (capstan deleted the node under them).
        let orphans: Vec<String> = self.view.dangling().iter().cloned().collect();
        for n in orphans {
            self.kill_node(now, &n, "node deleted with pods on it");
        }
    }

    /// A pod created at `created` stopped pending at `now` (bound, or gone, or the run ended).
    /// `ramp`: it was created during a predictable ramp of its workload's demand.
    pub(crate) fn waited(&mut self, created: f64, ramp: bool, now: f64) {
        let d = now - created;
        self.pending_durations.push(d);
        if ramp {
            self.pending_in_ramps.push(d);
        }
        if created >= 86_400.0 {
            self.pending_after_day_1.push(d);
            if ramp {
                self.pending_in_ramps_after_day_1.push(d);
            }
        }
    }

    fn count_pending(&mut self, t: &PodTimes, now: f64) {
        if t.bound.is_none() {
            self.waited(t.created, t.ramp, now);
        }
    }

    /// Claims the cloud runs more than one instance for: each counted once.
    fn check_double_launches(&mut self, now: f64) {
        // Claims with more than one live instance, in name order: counted by borrowed name,
        // only those copied out.
        let doubles: BTreeMap<String, usize> = self.cloud.inner.live_instances(|i| {
            let mut m: std::collections::HashMap<&str, usize, foldhash::fast::FixedState> =
                Default::default();
            for inst in i {
                *m.entry(inst.claim_name.as_str()).or_insert(0) += 1;
            }
            m.into_iter()
                .filter(|&(_, n)| n > 1)
                .map(|(c, n)| (c.to_string(), n))
                .collect()
        });
        for (claim, n) in doubles {
            if n > 1 && self.double_launched.insert(claim.clone()) {
                self.summary.double_launches += 1;
                self.event(now, "violation", format!("{claim} runs {n} instances"));
            }
        }
    }

    pub(crate) async fn sample(&mut self, now: f64) {
        self.check_double_launches(now);
        let rate: f64 = self
            .cloud
            .inner
            .live_instances(|i| i.map(|i| i.price).sum::<f64>())
            + self.cloud.inner.warm_pool_cost_per_hour();
        self.cost += rate / 60.0;
        let bound = self.lower_bound_rate(now).await;
        self.bound_cost += bound / 60.0;
        tracing::trace!(
            t = now,
            cost_per_hour = rate,
            bound_per_hour = bound,
            "cost"
        );
        let (mut spot, mut od) = (0, 0);
        for n in self.view.nodes() {
            match n.labels.get(labels::CAPACITY_TYPE).map(String::as_str) {
                Some(labels::CAPACITY_SPOT) => spot += 1,
                _ => od += 1,
            }
        }
        let pods = self.pods.len();
        self.summary.peak_nodes = self.summary.peak_nodes.max((spot + od) as u64);
        self.summary.peak_pods = self.summary.peak_pods.max(pods as u64);
        let minute = (now / 60.0) as u64;
        self.samples.push(Sample {
            t: now,
            rps: workload::rps(&self.sc.scenario.traffic, now)
                * workload::noise(self.opts.seed, minute, self.sc.scenario.traffic.noise),
            replicas: self.workloads.iter().map(|w| w.desired).collect(),
            floors: self
                .workloads
                .iter()
                .map(|w| w.forecaster.as_ref().map_or(0, |f| f.floor))
                .collect(),
            pending: self
                .view
                .pending()
                .iter()
                .filter(|(_, p)| !crate::forecast::is_placeholder(p))
                .count(),
            pods,
            spot_nodes: spot,
            on_demand_nodes: od,
            cost_per_hour: rate,
            bound_per_hour: bound,
            queue_depth: self.workloads.iter().map(|w| w.queue_depth).sum(),
        });
    }

    /// A lower bound on the hourly cost of any set of machines holding every workload pod
    /// present now (pending ones too: in hindsight they should have been running): the packing
    /// crate's LP bound over them, with the offerings the cloud has now (refreshed every 15
    /// minutes), reused while no workload's pod count changes.
    async fn lower_bound_rate(&mut self, now: f64) -> f64 {
        let fresh = self
            .offered
            .as_ref()
            .is_some_and(|(at, _)| now - at < 900.0);
        if !fresh {
            let types = self.offered_types().await;
            self.offered = Some((now, types));
            self.last_bound = None;
        }
        let counts: Vec<usize> = self.members.iter().map(|m| m.pods.len()).collect();
        if let Some((c, b)) = &self.last_bound {
            if *c == counts {
                return *b;
            }
        }
        let templates: Vec<Arc<Pod>> = self
            .workloads
            .iter()
            .map(|w| Arc::new(w.template.clone()))
            .collect();
        let mut sb = SnapshotBuilder::new(&[], false);
        sb.daemonsets(self.view.daemonsets().map(|p| Pod::clone(p)));
        let snapshot = sb.build();
        let types = self
            .offered
            .as_ref()
            .map(|(_, t)| t.as_slice())
            .unwrap_or(&[]);
        let input = capstan_sched::SolveInput {
            snapshot: &snapshot,
            pending: &templates,
            nodepools: &self.sc.nodepools,
            instance_types: types,
        };
        let bound = match capstan_pack::bound::lower_bound_counted(&input, &counts) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "lower bound failed; counting 0");
                0.0
            }
        };
        self.last_bound = Some((counts, bound));
        bound
    }

    /// What the cloud offers now, with its availability, over every NodePool.
    async fn offered_types(&self) -> Vec<InstanceType> {
        let mut offered: BTreeMap<String, InstanceType> = BTreeMap::new();
        for pool in &self.sc.nodepools {
            for t in self
                .cloud
                .inner
                .instance_types(pool)
                .await
                .unwrap_or_default()
            {
                offered.entry(t.name.clone()).or_insert(t);
            }
        }
        offered.into_values().collect()
    }

    pub(crate) async fn finish(&mut self) -> Outcome {
        let now = self.now();
        self.check_double_launches(now);
        // Leaks: live instances no NodeClaim owns, older than a full GC cycle (its grace and
        // its interval) and a minute.
        let claims = self.claims();
        let defaults = capstan_controller::Config::default();
        let grace = defaults.gc_grace + defaults.gc_interval + 60.0;
        for i in self.cloud.inner.list().await.unwrap_or_default() {
            let owned = claims.get(&i.claim_name).is_some_and(|c| {
                c.status.provider_id.is_none()
                    || c.status.provider_id.as_ref() == Some(&i.provider_id)
            });
            if !owned && now - i.launched_at.as_secs_f64() > grace {
                self.summary.leaked_instances += 1;
                self.event(
                    now,
                    "violation",
                    format!("leaked instance {}", i.provider_id),
                );
            }
        }
        self.count_stuck(now).await;
        let mut d = std::mem::take(&mut self.pending_durations);
        d.sort_by(f64::total_cmp);
        self.summary.pod_pending_seconds_p50 = round(percentile(&d, 50.0), 3);
        self.summary.pod_pending_seconds_p99 = round(percentile(&d, 99.0), 3);
        self.summary.pod_pending_seconds_max = round(d.last().copied().unwrap_or(0.0), 3);
        let p99 = |mut d: Vec<f64>| {
            d.sort_by(f64::total_cmp);
            round(percentile(&d, 99.0), 3)
        };
        self.summary.pod_pending_seconds_p99_in_ramps =
            p99(std::mem::take(&mut self.pending_in_ramps));
        if self.sc.duration > 86_400.0 {
            self.summary.pod_pending_seconds_p99_after_day_1 =
                Some(p99(std::mem::take(&mut self.pending_after_day_1)));
            self.summary.pod_pending_seconds_p99_in_ramps_after_day_1 =
                Some(p99(std::mem::take(&mut self.pending_in_ramps_after_day_1)));
        }
        for w in &self.workloads {
            if let Some(e) = w
                .forecaster
                .as_ref()
                .and_then(|f| f.relative_mae)
                .filter(|e| e.is_finite())
            {
                self.summary
                    .forecast_relative_mae
                    .insert(w.spec.name.clone(), round(e, 4));
            }
        }
        let mut r = std::mem::take(&mut self.request_durations);
        r.sort_by(f64::total_cmp);
        self.summary.pods_launched_for = r.len() as u64;
        self.summary.pod_launch_request_seconds_p50 = round(percentile(&r, 50.0), 3);
        self.summary.pod_launch_request_seconds_p99 = round(percentile(&r, 99.0), 3);
        self.summary.cost_usd = round(self.cost, 4);
        self.summary.cost_lower_bound_usd = round(self.bound_cost, 4);
        self.summary.cost_over_bound = if self.bound_cost > 0.0 {
            round(self.cost / self.bound_cost, 4)
        } else {
            0.0
        };
        let stats = self.api.stats();
        self.summary.writes_refused_by_preconditions = stats.conflicts;
        self.summary.writes_from_deposed_leaders = stats.non_holder_writes;
        self.summary.faults_injected = self.fault_log.clone();
        Outcome {
            summary: self.summary.clone(),
            workloads: self.workloads.iter().map(|w| w.spec.name.clone()).collect(),
            samples: std::mem::take(&mut self.samples),
            events: std::mem::take(&mut self.events),
            forecasts: self
                .workloads
                .iter()
                .filter_map(|w| {
                    let f = w.forecaster.as_ref()?;
                    Some(crate::ForecastSeries {
                        workload: w.spec.name.clone(),
                        step_seconds: f.step,
                        season_steps: f.period,
                        lead_steps: f.lead_steps,
                        recommended: f.history.clone(),
                        backtest_mae: f.mae,
                        backtest_relative_mae: f.relative_mae,
                    })
                })
                .collect(),
            passes: std::mem::take(&mut self.passes),
        }
    }

    /// Pods still pending at the end: their wait counts; those that fit somewhere, once
    /// capacity has been back a while, are stuck.
    async fn count_stuck(&mut self, now: f64) {
        let mut candidates: Vec<Arc<Pod>> = Vec::new();
        let mut waiting = Vec::new();
        for (k, t) in self.members.iter().flat_map(|m| &m.pods) {
            if t.bound.is_none() {
                waiting.push((t.created, t.ramp));
                if now - t.created.max(self.capacity_back_at) > STUCK_SECONDS {
                    if let Some(p) = self.api.pod(k) {
                        candidates.push(p);
                    }
                }
            }
        }
        for (created, ramp) in waiting {
            self.waited(created, ramp, now);
        }
        if candidates.is_empty() {
            return;
        }
        let pools: Vec<NodePool> = self.sc.nodepools.clone();
        let offered = self.offered_types().await;
        // An empty cluster, but with today's machines counted against NodePool limits: a pod
        // that only fits past a limit is not stuck.
        let mut b = SnapshotBuilder::new(&candidates, false);
        for n in self.view.nodes() {
            if let Some(pool) = n.labels.get(labels::NODEPOOL) {
                b.counted(pool, n.capacity_or_allocatable());
            }
        }
        let snapshot = b.build();
        for p in &candidates {
            let plan = capstan_sched::solve(
                capstan_sched::SolveInput {
                    snapshot: &snapshot,
                    pending: std::slice::from_ref(p),
                    nodepools: &pools,
                    instance_types: &offered,
                },
                &Default::default(),
            );
            if plan.unschedulable.is_empty() {
                self.summary.pods_stuck += 1;
            }
        }
    }
}
