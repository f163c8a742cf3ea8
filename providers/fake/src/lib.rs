//! A deterministic in-memory cloud behind [`CloudProvider`].
//!
//! Everything random is a pure function of the seed and a stable key (the pool, the client
//! token), never of call order, so the same seed gives the same prices, boot delays, faults and
//! interruptions however calls interleave. Time comes from the [`Clock`] it is given, so it runs
//! under a paused tokio runtime.
//!
//! - Catalog: any [`Catalog`] (the built-in AWS one by default), offered on-demand at its price
//!   and spot at a seeded 25–75% of it that drifts slowly, in three zones.
//! - Finite capacity per pool → [`CloudError::InsufficientCapacity`] naming the offerings.
//! - A token bucket (`governor`) on create/delete → [`CloudError::Throttled`].
//! - Boot delay drawn per instance; launch failures and never-ready nodes at configured rates.
//! - Spot interruptions: each pool has an interruption-frequency band; a spot instance's
//!   lifetime is drawn from it; the warning comes exactly 120 s before reclamation, a
//!   rebalance recommendation before some of them.
//! - Idempotent create: one client token, one instance, also under concurrent calls.

pub mod config;
pub mod testkit;

pub use testkit::Builder;

pub use config::{ConfigError, FakeCloudConfig};

use capstan_cloud::{
    Clock, CloudError, CloudProvider, Drift, Instance, InstanceState, InterruptionEvent,
    LaunchRequest, OfferingKey, RepairPolicy,
};
use capstan_model::catalog::zone_id_allowed;
use capstan_model::labels::{self, CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT};
use capstan_model::{Catalog, InstanceType, NodePool, Offering, Requirements};
use governor::Quota;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The warning a spot instance gets before it is reclaimed.
pub const SPOT_WARNING: Duration = Duration::from_secs(120);

/// Interruption-frequency bands (share of instances interrupted per month), as AWS's Spot
/// Instance Advisor publishes them: <5%, 5–10%, 10–15%, 15–20%, >20%. Mid-points used.
pub const BANDS: [f64; 5] = [0.025, 0.075, 0.125, 0.175, 0.25];
const MONTH: f64 = 30.0 * 86_400.0;

/// splitmix64: a stable mixer, so derived values never depend on std's hasher.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn key_hash(seed: u64, parts: &[&str], salt: u64) -> u64 {
    let mut h = mix(seed ^ 0xC0FF_EE00_D15E_A5E5);
    for p in parts {
        for b in p.bytes() {
            h = mix(h ^ b as u64);
        }
        h = mix(h ^ 0xFF);
    }
    mix(h ^ salt)
}

/// A uniform number in [0, 1) fixed by the seed and the key.
fn unit(seed: u64, parts: &[&str], salt: u64) -> f64 {
    (key_hash(seed, parts, salt) >> 11) as f64 / (1u64 << 53) as f64
}

type Limiter = capstan_cloud::RateLimiter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scheduled {
    Rebalance,
    Warning,
    Reclaim,
    Ready,
    /// Notice of a scheduled retirement (the time it happens is `Retire`'s).
    MaintenanceNotice(Duration),
    Retire,
}

#[derive(Debug, Default)]
struct State {
    instances: BTreeMap<String, Arc<Instance>>,
    /// Instance number ([`instance_number`]) → the image generation it launched with. GC
    /// asks about every instance every pass: a number is hashed and compared in place, where
    /// a provider id is a string elsewhere in memory. Numbers are unique: a launch whose
    /// number is taken takes the next free one.
    images: HashMap<u64, u64, foldhash::fast::FixedState>,
    by_token: HashMap<String, String>,
    failed_attempts: HashMap<String, u64>,
    used: HashMap<OfferingKey, u32>,
    /// Future events: (time, sequence) → (what, provider id).
    timeline: BTreeMap<(Duration, u64), (Scheduled, String)>,
    seq: u64,
    pending_events: Vec<InterruptionEvent>,
    /// Delivered, unacknowledged events and when they become visible again.
    inflight: Vec<(Duration, InterruptionEvent)>,
    /// Instances that started running or stopped, for [`FakeCloud::take_transitions`].
    transitions: Vec<Transition>,
    image: u64,
    /// Per-pool capacity where it differs from `capacity.perPool`.
    capacity: HashMap<OfferingKey, u32>,
    /// Warm pools: when each of a pool's instances is (or, while it initialises, will be)
    /// stopped and ready to start.
    warm: BTreeMap<OfferingKey, Vec<Duration>>,
}

/// The number of an instance this cloud launched, from its provider id
/// (`fake:///<zone>/i-<16 hex digits>`); `None` for any other id.
fn instance_number(provider_id: &str) -> Option<u64> {
    // The last 19 bytes, read from the end: no search through the id.
    let tail = provider_id
        .len()
        .checked_sub(19)
        .and_then(|at| provider_id.get(at..))?;
    let hex = tail.strip_prefix("/i-")?;
    // Only the spelling this cloud writes: lower-case digits, no sign.
    let ours = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if !hex.bytes().all(ours) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A machine starting or stopping.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub at: Duration,
    pub provider_id: String,
    pub state: InstanceState,
}

/// The fake cloud. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct FakeCloud {
    inner: Arc<Inner>,
}

struct Inner {
    config: FakeCloudConfig,
    catalog: Catalog,
    zones: Vec<String>,
    /// Zone ID by zone name, for every zone offered.
    zone_ids: HashMap<String, String>,
    /// On-demand price per type name (types without a price are not offered).
    od_price: HashMap<String, f64>,
    clock: Arc<dyn Clock>,
    limiter: Limiter,
    state: Mutex<State>,
}

impl std::fmt::Debug for FakeCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCloud")
            .field("seed", &self.inner.config.seed)
            .finish_non_exhaustive()
    }
}

impl FakeCloud {
    pub fn new(config: FakeCloudConfig, catalog: Catalog, clock: Arc<dyn Clock>) -> FakeCloud {
        let zones = zones_for(&config, &catalog);
        let zone_ids = zones
            .iter()
            .enumerate()
            .map(|(i, z)| {
                let id = config
                    .zone_ids
                    .get(z)
                    .cloned()
                    .or_else(|| {
                        catalog
                            .instance_types
                            .iter()
                            .flat_map(|t| &t.offerings)
                            .find(|o| o.zone == *z && o.zone_id.is_some())
                            .and_then(|o| o.zone_id.clone())
                    })
                    .unwrap_or_else(|| format!("{}-az{}", region_short(&catalog.region), i + 1));
                (z.clone(), id)
            })
            .collect();
        let od_price = catalog
            .instance_types
            .iter()
            .filter_map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.capacity_type == CAPACITY_ON_DEMAND)
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)
                    .map(|p| (t.name.clone(), p))
            })
            .collect();
        let capacity = config
            .capacity
            .pools
            .iter()
            .map(|p| {
                (
                    OfferingKey {
                        instance_type: p.instance_type.clone(),
                        zone: p.zone.clone(),
                        capacity_type: p.capacity_type.clone(),
                    },
                    p.capacity,
                )
            })
            .collect();
        let mut warm: BTreeMap<OfferingKey, Vec<Duration>> = BTreeMap::new();
        for p in &config.warm_pool.pools {
            let key = OfferingKey {
                instance_type: p.instance_type.clone(),
                zone: p.zone.clone(),
                capacity_type: p.capacity_type.clone(),
            };
            warm.entry(key)
                .or_default()
                .extend(std::iter::repeat_n(Duration::ZERO, p.size as usize));
        }
        let quota = Quota::per_second(
            NonZeroU32::new(config.api.rate_per_second.max(1)).expect("at least 1"),
        )
        .allow_burst(NonZeroU32::new(config.api.burst.max(1)).expect("at least 1"));
        let limiter = governor::RateLimiter::direct_with_clock(
            quota,
            capstan_cloud::GovernorClock(clock.clone()),
        );
        FakeCloud {
            inner: Arc::new(Inner {
                config,
                catalog,
                zones,
                zone_ids,
                od_price,
                clock,
                limiter,
                state: Mutex::new(State {
                    capacity,
                    warm,
                    ..State::default()
                }),
            }),
        }
    }

    /// Whether an instance drifted: launched with an older image generation, or in a zone no
    /// longer offered.
    fn drift(&self, st: &State, instance: &Instance) -> Result<Option<Drift>, CloudError> {
        let launched = instance_number(&instance.provider_id)
            .and_then(|n| st.images.get(&n))
            .copied()
            .ok_or_else(|| CloudError::NotFound {
                provider_id: instance.provider_id.clone(),
            })?;
        if launched != st.image {
            return Ok(Some(Drift {
                reason: format!(
                    "image generation {launched} is not the current {}",
                    st.image
                ),
            }));
        }
        if !self.inner.zones.contains(&instance.zone) {
            return Ok(Some(Drift {
                reason: format!("zone {} is no longer offered", instance.zone),
            }));
        }
        Ok(None)
    }

    /// Runs `f` over the instances that are not terminated, without copying them.
    pub fn live_instances<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Arc<Instance>>) -> R,
    ) -> R {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        f(&mut st
            .instances
            .values()
            .filter(|i| i.state != InstanceState::Terminated))
    }

    /// What the warm pools cost per hour now: each stopped instance its volume, each one still
    /// initialising its running price.
    pub fn warm_pool_cost_per_hour(&self) -> f64 {
        let now = self.inner.clock.now();
        let st = self.inner.state.lock().expect("fake cloud state");
        let stopped = self.inner.config.warm_pool.stopped_hourly_cost;
        st.warm
            .iter()
            .map(|(k, slots)| {
                slots
                    .iter()
                    .map(|&ready| {
                        if ready <= now {
                            stopped
                        } else {
                            self.price(&st, k, now).unwrap_or(0.0)
                        }
                    })
                    .sum::<f64>()
            })
            .sum()
    }

    /// Stopped instances ready to start, by pool.
    pub fn warm_ready(&self) -> BTreeMap<OfferingKey, usize> {
        let now = self.inner.clock.now();
        let st = self.inner.state.lock().expect("fake cloud state");
        st.warm
            .iter()
            .map(|(k, slots)| (k.clone(), slots.iter().filter(|&&r| r <= now).count()))
            .collect()
    }

    /// What happened to the machines themselves since the last call: instances that booted
    /// (their node can register) and instances that stopped (their node and pods are gone).
    /// The simulator's kubelet reads this; capstan does not.
    pub fn take_transitions(&self) -> Vec<Transition> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        std::mem::take(&mut st.transitions)
    }

    /// An instance's state and the labels its node registers with, without the API's rate
    /// limit (the simulator's view of the machine).
    pub fn peek(&self, provider_id: &str) -> Option<Instance> {
        let st = self.inner.state.lock().expect("fake cloud state");
        st.instances.get(provider_id).map(|i| Instance::clone(i))
    }

    pub fn config(&self) -> &FakeCloudConfig {
        &self.inner.config
    }

    pub fn zones(&self) -> &[String] {
        &self.inner.zones
    }

    fn seed(&self) -> u64 {
        self.inner.config.seed
    }

    /// The pool's interruption band (index into [`BANDS`]).
    pub fn interruption_band(&self, instance_type: &str, zone: &str) -> usize {
        (key_hash(self.seed(), &[instance_type, zone], 1) % BANDS.len() as u64) as usize
    }

    /// Spot price of a pool at clock time `at`: a seeded fraction of on-demand that swings
    /// slowly over the day, kept within the configured band.
    pub fn spot_price(&self, instance_type: &str, zone: &str, at: Duration) -> Option<f64> {
        let od = *self.inner.od_price.get(instance_type)?;
        let s = &self.inner.config.spot;
        let base = s.min_price_fraction
            + unit(self.seed(), &[instance_type, zone], 2)
                * (s.max_price_fraction - s.min_price_fraction);
        let phase = unit(self.seed(), &[instance_type, zone], 3) * std::f64::consts::TAU;
        let swing =
            s.daily_swing * (at.as_secs_f64() / 86_400.0 * std::f64::consts::TAU + phase).sin();
        let frac = (base + swing).clamp(s.min_price_fraction, s.max_price_fraction);
        Some(od * frac)
    }

    fn price(&self, st: &State, key: &OfferingKey, at: Duration) -> Option<f64> {
        if key.capacity_type == CAPACITY_RESERVED {
            // Only where a reservation is configured. It is paid for already: priced as
            // Karpenter prices reserved offerings, a ten-millionth of on-demand, which keeps
            // the types' order.
            if !st.capacity.contains_key(key) {
                return None;
            }
            return self
                .inner
                .od_price
                .get(&key.instance_type)
                .map(|p| p / 10_000_000.0);
        }
        if key.capacity_type == CAPACITY_SPOT {
            if !self.inner.config.spot.enabled {
                return None;
            }
            self.spot_price(&key.instance_type, &key.zone, at)
        } else {
            self.inner.od_price.get(&key.instance_type).copied()
        }
    }

    fn pool_capacity(&self, st: &State, key: &OfferingKey) -> u32 {
        st.capacity
            .get(key)
            .copied()
            .unwrap_or(self.inner.config.capacity.per_pool)
    }

    /// Sets one pool's capacity (0 makes it answer InsufficientCapacity).
    pub fn set_capacity(&self, key: OfferingKey, capacity: u32) {
        self.inner
            .state
            .lock()
            .expect("fake cloud state")
            .capacity
            .insert(key, capacity);
    }

    /// A new machine image: instances launched before are drifted.
    pub fn roll_image(&self) {
        self.inner.state.lock().expect("fake cloud state").image += 1;
    }

    /// Interrupts a spot instance now: warning now, reclamation in exactly 120 s.
    pub fn interrupt(&self, provider_id: &str) -> Result<(), CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        match st.instances.get(provider_id) {
            Some(i) if i.state != InstanceState::Terminated => {}
            _ => {
                return Err(CloudError::NotFound {
                    provider_id: provider_id.to_string(),
                });
            }
        }
        st.timeline.retain(|_, (what, id)| {
            !(id == provider_id
                && matches!(
                    what,
                    Scheduled::Warning | Scheduled::Reclaim | Scheduled::Rebalance
                ))
        });
        schedule(&mut st, now, Scheduled::Warning, provider_id);
        schedule(&mut st, now + SPOT_WARNING, Scheduled::Reclaim, provider_id);
        self.advance(&mut st, now);
        Ok(())
    }

    /// Schedules a retirement of the instance at `when`: a ScheduledMaintenance event now, then
    /// the instance shuts down and terminates at `when`.
    pub fn schedule_maintenance(
        &self,
        provider_id: &str,
        when: Duration,
    ) -> Result<(), CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        if st
            .instances
            .get(provider_id)
            .is_none_or(|i| i.state == InstanceState::Terminated)
        {
            return Err(CloudError::NotFound {
                provider_id: provider_id.to_string(),
            });
        }
        schedule(
            &mut st,
            now,
            Scheduled::MaintenanceNotice(when.max(now)),
            provider_id,
        );
        schedule(&mut st, when.max(now), Scheduled::Retire, provider_id);
        self.advance(&mut st, now);
        Ok(())
    }

    /// Applies every scheduled event up to `now`.
    fn advance(&self, st: &mut State, now: Duration) {
        while let Some((&(at, seq), _)) = st.timeline.iter().next() {
            if at > now {
                break;
            }
            let (what, id) = st.timeline.remove(&(at, seq)).expect("present");
            let live = st
                .instances
                .get(&id)
                .is_some_and(|i| i.state != InstanceState::Terminated);
            if !live {
                continue;
            }
            match what {
                Scheduled::Ready => {
                    if let Some(i) = st.instances.get_mut(&id).map(Arc::make_mut) {
                        i.state = InstanceState::Running;
                        st.transitions.push(Transition {
                            at,
                            provider_id: id,
                            state: InstanceState::Running,
                        });
                    }
                }
                Scheduled::Rebalance => {
                    st.pending_events
                        .push(InterruptionEvent::RebalanceRecommendation {
                            provider_id: id,
                            at,
                        })
                }
                Scheduled::Warning => {
                    st.pending_events
                        .push(InterruptionEvent::SpotInterruptionWarning {
                            provider_id: id,
                            at,
                            reclaim_at: at + SPOT_WARNING,
                        })
                }
                Scheduled::MaintenanceNotice(when) => {
                    st.pending_events
                        .push(InterruptionEvent::ScheduledMaintenance {
                            provider_id: id,
                            at,
                            when,
                        })
                }
                Scheduled::Retire => {
                    st.pending_events.push(InterruptionEvent::StateChange {
                        provider_id: id.clone(),
                        at,
                        state: InstanceState::ShuttingDown,
                    });
                    terminate(st, &id, at);
                    st.pending_events.push(InterruptionEvent::StateChange {
                        provider_id: id,
                        at,
                        state: InstanceState::Terminated,
                    });
                }
                Scheduled::Reclaim => {
                    terminate(st, &id, at);
                    st.pending_events.push(InterruptionEvent::StateChange {
                        provider_id: id,
                        at,
                        state: InstanceState::Terminated,
                    });
                }
            }
        }
    }

    fn throttle(&self) -> Result<(), CloudError> {
        self.inner
            .limiter
            .check()
            .map_err(|not_until| CloudError::Throttled {
                retry_after: not_until.wait_time_from(self.inner.clock.now()),
            })
    }

    fn create_now(&self, req: &LaunchRequest) -> Result<Instance, CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        if let Some(id) = st.by_token.get(&req.client_token) {
            return Ok(Instance::clone(&st.instances[id]));
        }
        self.throttle()?;
        if req.instance_types.is_empty() {
            return Err(CloudError::Invalid {
                message: format!("nodeclaim {}: no instance types to launch", req.claim_name),
            });
        }
        let seed = self.seed();
        let attempt = st
            .failed_attempts
            .get(&req.client_token)
            .copied()
            .unwrap_or(0);
        if unit(seed, &[&req.client_token], 100 + attempt)
            < self.inner.config.faults.launch_failure_rate
        {
            *st.failed_attempts
                .entry(req.client_token.clone())
                .or_insert(0) += 1;
            return Err(CloudError::Transient {
                message: format!(
                    "nodeclaim {}: launch failed (injected fault)",
                    req.claim_name
                ),
            });
        }
        // Every allowed offering: reserved, then spot, then on-demand where the request allows
        // several (as Karpenter launches), cheapest first within a capacity type.
        let mut candidates: Vec<(usize, f64, usize, OfferingKey)> = Vec::new();
        for (rank, t) in req.instance_types.iter().enumerate() {
            for zone in &self.inner.zones {
                for (ct_rank, ct) in labels::CAPACITY_TYPES.into_iter().enumerate() {
                    if !req.requirements.allows(labels::ZONE, zone)
                        || !req.requirements.allows(labels::CAPACITY_TYPE, ct)
                        || !zone_id_allowed(
                            self.inner.zone_ids.get(zone).map(|s| s.as_str()),
                            &req.requirements,
                        )
                    {
                        continue;
                    }
                    let key = OfferingKey {
                        instance_type: t.clone(),
                        zone: zone.clone(),
                        capacity_type: ct.to_string(),
                    };
                    if let Some(p) = self.price(&st, &key, now) {
                        candidates.push((ct_rank, p, rank, key));
                    }
                }
            }
        }
        if candidates.is_empty() {
            return Err(CloudError::Invalid {
                message: format!(
                    "nodeclaim {}: no offering of [{}] matches its requirements",
                    req.claim_name,
                    req.instance_types.join(", ")
                ),
            });
        }
        candidates.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        let has_room =
            |k: &OfferingKey| st.used.get(k).copied().unwrap_or(0) < self.pool_capacity(&st, k);
        // For a launch the planner put on a warm instance, a stopped one first, as an Auto
        // Scaling group starts its warm pool before it launches: the first allowed offering, in
        // the order above, with one ready. Other launches boot.
        let cold = candidates.iter().find(|(_, _, _, k)| has_room(k));
        let premium = self.inner.config.warm_pool.max_premium;
        let warm = candidates.iter().find(|(_, p, _, k)| {
            req.warm_start
                && has_room(k)
                && premium.is_none_or(|m| cold.is_some_and(|c| *p <= c.1 * (1.0 + m)))
                && st.warm.get(k).is_some_and(|w| w.iter().any(|&r| r <= now))
        });
        let from_warm = warm.is_some();
        let chosen = warm.or(cold);
        let Some((_, price, _, key)) = chosen.cloned() else {
            return Err(CloudError::InsufficientCapacity {
                offerings: candidates.into_iter().map(|(_, _, _, k)| k).collect(),
            });
        };
        *st.used.entry(key.clone()).or_insert(0) += 1;

        let mut number = key_hash(seed, &[&req.client_token], 0);
        while st.images.contains_key(&number) {
            number = number.wrapping_add(1);
        }
        let provider_id = format!("fake:///{}/i-{number:016x}", key.zone);
        let boot = &self.inner.config.boot;
        let boot_delay = boot.min_seconds
            + unit(seed, &[&req.client_token], 10) * (boot.max_seconds - boot.min_seconds);
        let delay = if from_warm {
            // The started instance leaves the pool and a new one boots to take its place.
            let slots = st.warm.get_mut(&key).expect("a warm pool");
            let at = slots.iter().position(|&r| r <= now).expect("a ready one");
            slots[at] = now + Duration::from_secs_f64(boot_delay);
            let start = &self.inner.config.warm_pool.start;
            start.min_seconds
                + unit(seed, &[&req.client_token], 12) * (start.max_seconds - start.min_seconds)
        } else {
            boot_delay
        };
        let never_ready =
            unit(seed, &[&req.client_token], 11) < self.inner.config.faults.never_ready_rate;
        let ready_at = now + Duration::from_secs_f64(delay);
        let mut node_labels = req.labels.clone();
        if let Some(t) = self.inner.catalog.get(&key.instance_type) {
            node_labels.extend(t.labels.clone());
        }
        node_labels.insert(labels::INSTANCE_TYPE.into(), key.instance_type.clone());
        node_labels.insert(labels::ZONE.into(), key.zone.clone());
        if let Some(id) = self.inner.zone_ids.get(&key.zone) {
            node_labels.insert(labels::ZONE_ID.into(), id.clone());
        }
        node_labels.insert(labels::CAPACITY_TYPE.into(), key.capacity_type.clone());
        node_labels.insert(labels::NODEPOOL.into(), req.nodepool.clone());
        let instance = Instance {
            provider_id: provider_id.clone(),
            claim_name: req.claim_name.clone(),
            nodepool: req.nodepool.clone(),
            client_token: req.client_token.clone(),
            instance_type: key.instance_type.clone(),
            zone: key.zone.clone(),
            capacity_type: key.capacity_type.clone(),
            price,
            labels: std::sync::Arc::new(node_labels),
            state: InstanceState::Pending,
            launched_at: now,
            ready_at: (!never_ready).then_some(ready_at),
        };
        st.instances
            .insert(provider_id.clone(), Arc::new(instance.clone()));
        let image = st.image;
        st.images.insert(number, image);
        st.by_token
            .insert(req.client_token.clone(), provider_id.clone());
        schedule(&mut st, ready_at, Scheduled::Ready, &provider_id);
        let ic = &self.inner.config.interruptions;
        if key.capacity_type == CAPACITY_SPOT && ic.enabled && ic.rate_multiplier > 0.0 {
            let band = BANDS[self.interruption_band(&key.instance_type, &key.zone)];
            let rate = band / MONTH * ic.rate_multiplier;
            let u = unit(seed, &[&req.client_token], 20);
            let lifetime = -(1.0 - u).ln() / rate;
            let warning = now + Duration::from_secs_f64(lifetime.min(1e9));
            schedule(&mut st, warning, Scheduled::Warning, &provider_id);
            schedule(
                &mut st,
                warning + SPOT_WARNING,
                Scheduled::Reclaim,
                &provider_id,
            );
            if unit(seed, &[&req.client_token], 21) < ic.rebalance_fraction {
                let lead = unit(seed, &[&req.client_token], 22) * ic.rebalance_lead_seconds;
                let at = warning
                    .saturating_sub(Duration::from_secs_f64(lead))
                    .max(now);
                schedule(&mut st, at, Scheduled::Rebalance, &provider_id);
            }
        }
        if ic.maintenance_per_month > 0.0 {
            let rate = ic.maintenance_per_month / MONTH;
            let u = unit(seed, &[&req.client_token], 30);
            let retire = now + Duration::from_secs_f64((-(1.0 - u).ln() / rate).min(1e9));
            let notice = retire
                .saturating_sub(Duration::from_secs_f64(ic.maintenance_notice_seconds))
                .max(now);
            schedule(
                &mut st,
                notice,
                Scheduled::MaintenanceNotice(retire),
                &provider_id,
            );
            schedule(&mut st, retire, Scheduled::Retire, &provider_id);
        }
        Ok(instance)
    }

    fn delete_now(&self, provider_id: &str) -> Result<(), CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        let Some(i) = st.instances.get(provider_id) else {
            return Err(CloudError::NotFound {
                provider_id: provider_id.to_string(),
            });
        };
        if i.state == InstanceState::Terminated {
            return Ok(());
        }
        self.throttle()?;
        terminate(&mut st, provider_id, now);
        st.timeline.retain(|_, (_, id)| id != provider_id);
        Ok(())
    }

    /// Instance types with offerings as they stand now (spot prices drift; a pool at capacity
    /// is unavailable).
    fn offered_types(&self, nodepool: Option<&NodePool>) -> Vec<InstanceType> {
        let now = self.inner.clock.now();
        let st = self.inner.state.lock().expect("fake cloud state");
        let reqs = nodepool.map(|p| &p.requirements);
        self.inner
            .catalog
            .instance_types
            .iter()
            .filter(|t| self.inner.od_price.contains_key(&t.name))
            .filter(|t| reqs.is_none_or(|r| labels_allowed(r, &t.labels)))
            .map(|t| {
                let mut t = t.clone();
                t.offerings = self
                    .inner
                    .zones
                    .iter()
                    .flat_map(|z| labels::CAPACITY_TYPES.map(|ct| (z.clone(), ct)))
                    .filter_map(|(zone, ct)| {
                        let key = OfferingKey {
                            instance_type: t.name.clone(),
                            zone: zone.clone(),
                            capacity_type: ct.to_string(),
                        };
                        let price = self.price(&st, &key, now)?;
                        let available =
                            st.used.get(&key).copied().unwrap_or(0) < self.pool_capacity(&st, &key);
                        Some(Offering {
                            zone_id: self.inner.zone_ids.get(&zone).cloned(),
                            zone,
                            capacity_type: ct.to_string(),
                            price,
                            available,
                        })
                    })
                    .collect();
                t
            })
            .collect()
    }
}

/// AWS's short form of a region in its zone IDs: `us-east-1` → `use1`, `ap-southeast-2` →
/// `apse2`, `us-gov-west-1` → `usgw1`.
/// The zones a configuration offers: its own, else the region's `a`, `b` and `c`.
pub fn zones_for(config: &FakeCloudConfig, catalog: &Catalog) -> Vec<String> {
    if config.zones.is_empty() {
        ["a", "b", "c"]
            .iter()
            .map(|z| format!("{}{z}", catalog.region))
            .collect()
    } else {
        config.zones.clone()
    }
}

pub fn region_short(region: &str) -> String {
    let parts: Vec<&str> = region.split('-').collect();
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i == 0 || p.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(p);
            continue;
        }
        let short = match *p {
            "northeast" => "ne",
            "northwest" => "nw",
            "southeast" => "se",
            "southwest" => "sw",
            "gov" => "g",
            other => &other[..other.len().min(1)],
        };
        out.push_str(short);
    }
    out
}

fn labels_allowed(reqs: &Requirements, l: &BTreeMap<String, String>) -> bool {
    reqs.iter().all(|r| l.get(&r.key).is_none_or(|v| r.has(v)))
}

fn schedule(st: &mut State, at: Duration, what: Scheduled, id: &str) {
    st.seq += 1;
    let seq = st.seq;
    st.timeline.insert((at, seq), (what, id.to_string()));
}

fn terminate(st: &mut State, id: &str, at: Duration) {
    if let Some(i) = st.instances.get_mut(id).map(Arc::make_mut) {
        if i.state != InstanceState::Terminated {
            st.transitions.push(Transition {
                at,
                provider_id: id.to_string(),
                state: InstanceState::Terminated,
            });
        }
        i.state = InstanceState::Terminated;
        let key = OfferingKey {
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            capacity_type: i.capacity_type.clone(),
        };
        if let Some(u) = st.used.get_mut(&key) {
            *u = u.saturating_sub(1);
        }
    }
}

impl CloudProvider for FakeCloud {
    fn provider_name(&self) -> &'static str {
        "fake"
    }

    async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        self.create_now(request)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.delete_now(provider_id)
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        st.instances
            .get(provider_id)
            .map(|i| Instance::clone(i))
            .ok_or_else(|| CloudError::NotFound {
                provider_id: provider_id.to_string(),
            })
    }

    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        Ok(self.live_instances(|i| i.cloned().collect()))
    }

    async fn instance_types(&self, nodepool: &NodePool) -> Result<Vec<InstanceType>, CloudError> {
        Ok(self.offered_types(Some(nodepool)))
    }

    async fn is_drifted(&self, instance: &Instance) -> Result<Option<Drift>, CloudError> {
        let st = self.inner.state.lock().expect("fake cloud state");
        self.drift(&st, instance)
    }

    async fn drift_of(&self, instances: &[&Instance]) -> Vec<Result<Option<Drift>, CloudError>> {
        let st = self.inner.state.lock().expect("fake cloud state");
        instances.iter().map(|i| self.drift(&st, i)).collect()
    }

    async fn warm(&self) -> Result<Vec<capstan_model::Warm>, CloudError> {
        Ok(self
            .warm_ready()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| capstan_model::Warm {
                instance_type: k.instance_type,
                zone: k.zone,
                capacity_type: k.capacity_type,
                count: u32::try_from(n).unwrap_or(u32::MAX),
            })
            .collect())
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        ["False", "Unknown"]
            .into_iter()
            .map(|status| RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: status.into(),
                toleration: Duration::from_secs(30 * 60),
            })
            .collect()
    }

    async fn interruptions(&self) -> Result<Vec<InterruptionEvent>, CloudError> {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().expect("fake cloud state");
        self.advance(&mut st, now);
        let mut out = Vec::new();
        for (visible_at, e) in &mut st.inflight {
            if *visible_at <= now {
                *visible_at = now + VISIBILITY_TIMEOUT;
                out.push(e.clone());
            }
        }
        let fresh = std::mem::take(&mut st.pending_events);
        for e in &fresh {
            st.inflight.push((now + VISIBILITY_TIMEOUT, e.clone()));
        }
        out.extend(fresh);
        out.sort_by_key(|e| e.at());
        Ok(out)
    }

    async fn ack_interruptions(&self, events: &[InterruptionEvent]) -> Result<(), CloudError> {
        let mut st = self.inner.state.lock().expect("fake cloud state");
        st.inflight.retain(|(_, e)| !events.contains(e));
        Ok(())
    }
}

/// How long a delivered interruption event stays invisible before it is delivered again
/// (an SQS queue's visibility timeout).
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests;
