//! Faults: those the scenario names at fixed times, and with `--faults` random ones drawn
//! from the seed — capacity outages, spot interruption storms, controller crashes, a leader
//! freezing mid-write, cloud API throttling, launch failures and instances that never boot.

use crate::scenario::Compiled;
use crate::{Options, Sim};
use capstan_cloud::{CloudProvider, InstanceState, OfferingKey};
use capstan_fake_cloud::FakeCloudConfig;
use capstan_model::labels;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// A fault at a time.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    Outage {
        prefix: String,
        capacity_type: Option<String>,
        until: f64,
    },
    Restore {
        keys: Vec<OfferingKey>,
        capacity: u32,
    },
    Storm {
        fraction: f64,
    },
    Crash,
    Failover,
    Throttle {
        until: f64,
    },
}

/// How long a frozen leader stalls: past its lease, so the standby takes over.
const FREEZE_SECONDS: f64 = 20.0;

/// The run's faults by (second, sequence), and their log lines. Random faults also set the
/// cloud's launch-failure and never-ready rates.
pub(crate) fn plan(
    sc: &Compiled,
    opts: &Options,
    rng: &mut ChaCha8Rng,
    cloud: &mut FakeCloudConfig,
) -> (BTreeMap<(u64, u64), Fault>, Vec<String>) {
    let mut faults: BTreeMap<(u64, u64), Fault> = BTreeMap::new();
    let mut log = Vec::new();
    let mut seq = 0u64;
    let mut add = |at: f64, f: Fault, log: &mut Vec<String>, what: String| {
        seq += 1;
        log.push(format!("{at:.0}s {what}"));
        faults.insert((at as u64, seq), f);
    };
    let fl = &sc.scenario.faults;
    for o in &fl.capacity_outages {
        add(
            o.at.0,
            Fault::Outage {
                prefix: o.instance_types.clone(),
                capacity_type: o.capacity_type.clone(),
                until: o.at.0 + o.duration.0,
            },
            &mut log,
            format!("capacity outage {}*", o.instance_types),
        );
    }
    for s in &fl.interruption_storms {
        add(
            s.at.0,
            Fault::Storm {
                fraction: s.fraction,
            },
            &mut log,
            format!("interruption storm {:.0}%", s.fraction * 100.0),
        );
    }
    for c in &fl.controller_crashes {
        add(c.0, Fault::Crash, &mut log, "controller crash".into());
    }
    for c in &fl.leader_failovers {
        add(c.0, Fault::Failover, &mut log, "leader failover".into());
    }
    for t in &fl.throttling {
        add(
            t.at.0,
            Fault::Throttle {
                until: t.at.0 + t.duration.0,
            },
            &mut log,
            "cloud API throttling".into(),
        );
    }
    if opts.faults {
        cloud.faults.launch_failure_rate = rng.random_range(0.0..0.15);
        cloud.faults.never_ready_rate = rng.random_range(0.0..0.05);
        log.push(format!(
            "launch failure rate {:.3}, never-ready rate {:.3}",
            cloud.faults.launch_failure_rate, cloud.faults.never_ready_rate
        ));
        let families = &sc.scenario.catalog.families;
        let duration = sc.duration;
        let at = |rng: &mut ChaCha8Rng| rng.random_range(0.05..0.9) * duration;
        for _ in 0..rng.random_range(1..=3) {
            let t = at(rng);
            let prefix = if families.is_empty() || rng.random_bool(0.3) {
                String::new()
            } else {
                format!("{}.", families[rng.random_range(0..families.len())])
            };
            let ct = if rng.random_bool(0.5) {
                Some("spot".to_string())
            } else {
                None
            };
            let d = rng.random_range(300.0..3600.0);
            add(
                t,
                Fault::Outage {
                    prefix: prefix.clone(),
                    capacity_type: ct.clone(),
                    until: t + d,
                },
                &mut log,
                format!(
                    "capacity outage {prefix}* {} for {d:.0}s",
                    ct.unwrap_or_else(|| "all".into())
                ),
            );
        }
        for _ in 0..rng.random_range(1..=2) {
            let t = at(rng);
            let fraction = rng.random_range(0.1..0.5);
            add(
                t,
                Fault::Storm { fraction },
                &mut log,
                format!("interruption storm {:.0}%", fraction * 100.0),
            );
        }
        for _ in 0..rng.random_range(1..=3) {
            let t = at(rng);
            add(t, Fault::Crash, &mut log, "controller crash".into());
        }
        for _ in 0..rng.random_range(0..=2) {
            let t = at(rng);
            add(t, Fault::Failover, &mut log, "leader failover".into());
        }
        for _ in 0..rng.random_range(0..=2) {
            let t = at(rng);
            let d = rng.random_range(30.0..600.0);
            add(
                t,
                Fault::Throttle { until: t + d },
                &mut log,
                format!("cloud API throttling for {d:.0}s"),
            );
        }
    }
    (faults, log)
}

impl Sim {
    /// Applies the faults due now.
    pub(crate) async fn faults(&mut self, now: f64) {
        let due: Vec<(u64, u64)> = self
            .faults
            .range(..(now as u64 + 1, 0))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let Some(f) = self.faults.remove(&k) else {
                continue;
            };
            match f {
                Fault::Outage {
                    prefix,
                    capacity_type,
                    until,
                } => {
                    let keys = self.offering_keys(&prefix, capacity_type.as_deref());
                    for key in &keys {
                        self.cloud.inner.set_capacity(key.clone(), 0);
                    }
                    self.event(
                        now,
                        "fault",
                        format!("capacity outage: {} offerings", keys.len()),
                    );
                    // Restore later, as a fault of its own.
                    let capacity = self.cloud.inner.config().capacity.per_pool;
                    self.faults
                        .insert((until as u64, k.1), Fault::Restore { keys, capacity });
                }
                Fault::Restore { keys, capacity } => {
                    for key in keys {
                        self.cloud.inner.set_capacity(key, capacity);
                    }
                    self.capacity_back_at = now;
                    self.event(now, "fault", "capacity restored".into());
                }
                Fault::Storm { fraction } => {
                    let spot: Vec<String> = self
                        .cloud
                        .inner
                        .list()
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|i| {
                            i.capacity_type == labels::CAPACITY_SPOT
                                && i.state == InstanceState::Running
                        })
                        .map(|i| i.provider_id.clone())
                        .collect();
                    let n = (spot.len() as f64 * fraction).ceil() as usize;
                    let mut chosen = spot.clone();
                    // Fisher–Yates on the run's RNG.
                    for i in (1..chosen.len()).rev() {
                        let j = self.rng.random_range(0..=i);
                        chosen.swap(i, j);
                    }
                    chosen.truncate(n);
                    for id in &chosen {
                        let _ = self.cloud.inner.interrupt(id);
                    }
                    self.event(
                        now,
                        "fault",
                        format!("interruption storm: {} spot instances", chosen.len()),
                    );
                }
                Fault::Crash => {
                    let Some(leader) = self.leader() else {
                        continue;
                    };
                    self.incarnation[leader] += 1;
                    self.summary.controller_restarts += 1;
                    let c = self.new_controller(leader);
                    self.controllers[leader] = Some(c);
                    self.event(now, "fault", format!("controller {leader} crashed"));
                }
                Fault::Failover => {
                    if let Some(leader) = self.leader() {
                        self.paused_until[leader] = now + FREEZE_SECONDS;
                        self.stale_write_due[leader] = true;
                        self.event(
                            now,
                            "fault",
                            format!(
                                "controller {leader} freezes mid-write for {FREEZE_SECONDS:.0} s"
                            ),
                        );
                    }
                }
                Fault::Throttle { until } => {
                    self.cloud.throttle_until(until as u64);
                    self.event(now, "fault", "cloud API throttled".into());
                }
            }
        }
    }

    fn offering_keys(&self, prefix: &str, capacity_type: Option<&str>) -> Vec<OfferingKey> {
        let mut keys = Vec::new();
        for t in &self.types {
            if !t.name.starts_with(prefix) {
                continue;
            }
            for zone in self.cloud.inner.zones() {
                for ct in [labels::CAPACITY_SPOT, labels::CAPACITY_ON_DEMAND] {
                    if capacity_type.is_some_and(|c| c != ct) {
                        continue;
                    }
                    keys.push(OfferingKey {
                        instance_type: t.name.clone(),
                        zone: zone.clone(),
                        capacity_type: ct.to_string(),
                    });
                }
            }
        }
        keys
    }
}
