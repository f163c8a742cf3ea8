//! Launching a NodeClaim's instance: rate-limited, retried with jittered exponential backoff,
//! falling back to other offerings when one is out of capacity (the unavailable-offerings
//! cache), abandoned when no offering can ever work. The launch is idempotent: its client
//! token comes from the claim's name and uid, so a retried or duplicated launch returns the
//! instance already made.

use crate::api::{ClusterApi, EventType, Kind};
use crate::catalog::Catalog;
use crate::context::Ctx;
use crate::{Action, Config, secs};
use capstan_cloud::{Clock, CloudError, CloudProvider, LaunchRequest, OfferingKey};
use capstan_model::catalog::offering_allowed;
use capstan_model::disruption::Reason;
use capstan_model::{InstanceType, NodeClaim};
use rand::Rng;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

/// Capacity errors one pass falls back from before it leaves the claim to the next pass.
const MAX_FALLBACKS: usize = 4;

/// Exponential backoff with "equal jitter": the delay for `attempts` is half fixed, half
/// random (`r` in [0, 1)), within `base · 2^attempts` capped at `max` — so retries of many
/// claims neither stampede nor stall.
pub fn jittered_backoff(base: f64, max: f64, attempts: u32, r: f64) -> f64 {
    let cap = (base * 2f64.powi(attempts.min(30) as i32)).min(max);
    cap / 2.0 + r * cap / 2.0
}

/// The claim's instance types that still have an offering its requirements allow and that is
/// not known to be out of capacity, in the claim's order. A type the catalog does not know
/// (or whose offerings the requirements exclude entirely) is kept: the cloud decides.
pub fn launchable_types(c: &NodeClaim, types: &[InstanceType], catalog: &Catalog) -> Vec<String> {
    c.instance_types
        .iter()
        .filter(|t| {
            let allowed: Vec<(&String, &str)> =
                capstan_model::catalog::type_for_pool(types, t, Some(&c.nodepool))
                    .map(|(_, x)| {
                        x.offerings
                            .iter()
                            .filter(|o| offering_allowed(o, &c.requirements))
                            .map(|o| (&o.zone, o.capacity_type.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
            allowed.is_empty()
                || allowed.iter().any(|(z, ct)| {
                    !catalog.is_unavailable(&OfferingKey {
                        instance_type: (*t).clone(),
                        zone: (*z).clone(),
                        capacity_type: ct.to_string(),
                    })
                })
        })
        .cloned()
        .collect()
}

/// The offering a launch of the claim asks for first: the cheapest allowed and available
/// offering of its first launchable type.
pub fn first_offering(
    c: &NodeClaim,
    types: &[InstanceType],
    catalog: &Catalog,
) -> Option<OfferingKey> {
    let first = launchable_types(c, types, catalog).into_iter().next()?;
    let (_, t) = capstan_model::catalog::type_for_pool(types, &first, Some(&c.nodepool))?;
    t.offerings
        .iter()
        .filter(|o| offering_allowed(o, &c.requirements))
        .map(|o| {
            (
                o.price,
                OfferingKey {
                    instance_type: first.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                },
            )
        })
        .filter(|(_, k)| !catalog.is_unavailable(k))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[derive(Clone, Debug, Default)]
struct Attempts {
    attempts: u32,
    next_at: f64,
}

pub(crate) struct Launcher {
    attempts: BTreeMap<String, Attempts>,
    limiter: capstan_cloud::RateLimiter,
}

impl Launcher {
    pub fn new(config: &Config, clock: Arc<dyn Clock>) -> Launcher {
        let quota = governor::Quota::per_second(
            NonZeroU32::new(config.launch_rate.max(1)).expect("at least 1"),
        )
        .allow_burst(NonZeroU32::new(config.launch_burst.max(1)).expect("at least 1"));
        Launcher {
            attempts: BTreeMap::new(),
            limiter: governor::RateLimiter::direct_with_clock(
                quota,
                capstan_cloud::GovernorClock(clock),
            ),
        }
    }

    /// Forgets retry state (a new term starts from what the API holds).
    pub fn forget(&mut self) {
        self.attempts.clear();
    }

    /// Forgets one claim's retry state.
    pub fn done(&mut self, claim: &str) {
        self.attempts.remove(claim);
    }

    /// Launches the claim's instance if it is due and the rate limit allows. Where the
    /// offerings tried are out of capacity and others are left (on-demand after spot, another
    /// zone or type), those are tried at once, in the same pass, not a loop period later.
    pub async fn launch<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        c: &NodeClaim,
    ) {
        if c.status.launched_at.is_none() && now - c.created >= cx.config.launch_ttl {
            let why = format!("not launched within {} s", cx.config.launch_ttl);
            // The offering every attempt went for first is cached unavailable, as one out of
            // capacity is: the claim planned next for these pods aims elsewhere.
            if let Some(key) = first_offering(c, cx.s.catalog.cached(), &cx.s.catalog) {
                cx.s.catalog
                    .mark_unavailable(key, now + cx.config.unavailable_ttl);
            }
            self.abandon(cx, now, c, &why).await;
            return;
        }
        for _ in 0..MAX_FALLBACKS {
            if !self.launch_once(cx, now, c).await {
                return;
            }
        }
    }

    /// One launch attempt; true when it failed for capacity and other offerings are left.
    async fn launch_once<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        c: &NodeClaim,
    ) -> bool {
        let state = self.attempts.entry(c.name.clone()).or_default().clone();
        if now < state.next_at || self.limiter.check().is_err() {
            return false;
        }
        let types = launchable_types(c, cx.s.catalog.cached(), &cx.s.catalog);
        if types.is_empty() {
            self.abandon(cx, now, c, "every offering is out of capacity")
                .await;
            return false;
        }
        let request = LaunchRequest {
            claim_name: c.name.clone(),
            nodepool: c.nodepool.clone(),
            client_token: c.client_token(),
            instance_types: types,
            requirements: c.requirements.clone(),
            labels: c.labels.clone(),
            taints: c.taints.clone(),
            node_class: c.node_class.clone(),
            warm_start: c
                .annotations
                .get(capstan_model::claim::WARM_START_ANNOTATION)
                .is_some_and(|v| v == "true"),
        };
        if !cx.may_act() {
            return false;
        }
        let launched = cx
            .cloud_call("nodeclaim.lifecycle", "Create", cx.cloud.create(&request))
            .await;
        if let Err(e) = &launched {
            let reason = match e {
                CloudError::InsufficientCapacity { .. } => "InsufficientCapacityError",
                CloudError::Throttled { .. } => "LaunchThrottled",
                _ => "LaunchFailed",
            };
            cx.once(
                (Kind::NodeClaim, c.name.clone()),
                EventType::Warning,
                reason,
                format!("Failed to launch: {e}"),
            )
            .await;
        }
        match launched {
            Ok(inst) => {
                self.attempts.remove(&c.name);
                let t = capstan_model::catalog::type_for_pool(
                    cx.s.catalog.cached(),
                    &inst.instance_type,
                    Some(&c.nodepool),
                )
                .map(|(_, t)| t);
                let mut status = c.status.clone();
                status.provider_id = Some(inst.provider_id.clone());
                status.instance_type = Some(inst.instance_type.clone());
                status.zone = Some(inst.zone.clone());
                status.capacity_type = Some(inst.capacity_type.clone());
                status.price = inst.price;
                status.launched_at = Some(secs(inst.launched_at));
                if let Some(t) = t {
                    status.capacity = t.capacity.clone();
                    status.allocatable = t.allocatable.clone();
                }
                if cx.claim_status(&c.name, status).await {
                    cx.event(
                        (Kind::NodeClaim, c.name.clone()),
                        EventType::Normal,
                        "Launched",
                        format!(
                            "Launched {} in {} ({}, {}, ${:.4}/h)",
                            inst.provider_id,
                            inst.zone,
                            inst.instance_type,
                            inst.capacity_type,
                            inst.price
                        ),
                    )
                    .await;
                    cx.record(
                        now,
                        Action::Launched {
                            claim: c.name.clone(),
                            instance_type: inst.instance_type,
                            zone: inst.zone,
                            capacity_type: inst.capacity_type,
                            price: inst.price,
                        },
                    );
                }
            }
            Err(CloudError::InsufficientCapacity { offerings }) => {
                let until = now + cx.config.unavailable_ttl;
                for o in &offerings {
                    cx.s.catalog.mark_unavailable(o.clone(), until);
                }
                cx.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: format!("insufficient capacity in {} offerings", offerings.len()),
                        retry_in: 0.0,
                    },
                );
                return !launchable_types(c, cx.s.catalog.cached(), &cx.s.catalog).is_empty();
            }
            Err(CloudError::Throttled { retry_after }) => {
                let retry = secs(retry_after).max(0.1);
                self.attempts.entry(c.name.clone()).or_default().next_at = now + retry;
                cx.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: "throttled".into(),
                        retry_in: retry,
                    },
                );
            }
            Err(CloudError::Transient { message }) => {
                let attempts = state.attempts + 1;
                let r: f64 = cx.s.rng.random();
                let retry =
                    jittered_backoff(cx.config.backoff_base, cx.config.backoff_max, attempts, r);
                self.attempts.insert(
                    c.name.clone(),
                    Attempts {
                        attempts,
                        next_at: now + retry,
                    },
                );
                cx.record(
                    now,
                    Action::LaunchFailed {
                        claim: c.name.clone(),
                        error: message,
                        retry_in: retry,
                    },
                );
            }
            Err(e @ (CloudError::Invalid { .. } | CloudError::NotFound { .. })) => {
                self.abandon(cx, now, c, &e.to_string()).await;
            }
        }
        false
    }

    /// Gives up a claim that can never launch: it is deleted, and its pods go back to the
    /// provisioner.
    async fn abandon<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
        c: &NodeClaim,
        why: &str,
    ) {
        if cx.begin_deletion(&c.name, Reason::LaunchFailed, None).await {
            self.attempts.remove(&c.name);
            cx.s.nominations.remove_claim(&c.name);
            cx.record(
                now,
                Action::LaunchAbandoned {
                    claim: c.name.clone(),
                    error: why.to_string(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::Requirement;
    use capstan_model::labels;

    #[test]
    fn backoff_doubles_per_attempt_within_jitter_and_stops_at_the_cap() {
        // (attempts, r, expected)
        let cases = [
            (1, 0.0, 1.0),
            (1, 0.999_999, 2.0),
            (3, 0.5, 6.0),
            (10, 0.0, 150.0),
            (10, 0.999_999, 300.0),
            (40, 0.5, 225.0),
        ];
        for (attempts, r, want) in cases {
            let got = jittered_backoff(1.0, 300.0, attempts, r);
            assert!((got - want).abs() < 1e-3, "{attempts} {r}: {got} != {want}");
        }
    }

    #[test]
    fn types_whose_allowed_offerings_are_all_out_of_capacity_are_not_launched() {
        let catalog_types: Vec<InstanceType> = capstan_model::Catalog::builtin()
            .instance_types
            .into_iter()
            .filter(|t| t.name == "m7i.large" || t.name == "c7i.large")
            .collect();
        let mut c = NodeClaim {
            name: "c".into(),
            instance_types: vec!["m7i.large".into(), "c7i.large".into(), "x.unknown".into()],
            ..Default::default()
        };
        c.requirements
            .add(Requirement::in_values(labels::ZONE, ["us-east-1a"]));
        let mut catalog = Catalog::default();
        assert_eq!(
            launchable_types(&c, &catalog_types, &catalog),
            ["m7i.large", "c7i.large", "x.unknown"]
        );
        catalog.mark_unavailable(
            OfferingKey {
                instance_type: "m7i.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
            },
            100.0,
        );
        assert_eq!(
            launchable_types(&c, &catalog_types, &catalog),
            ["c7i.large", "x.unknown"],
            "its only allowed offering is out; the unknown type is the cloud's to judge"
        );
    }
}
