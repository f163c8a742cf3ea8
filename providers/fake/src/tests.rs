//! Behaviour of the fake cloud.

use super::*;
use crate::testkit::{Builder, cloud, request, with_capacity_type};
use capstan_cloud::ManualClock;
use capstan_model::Requirement;

fn key(t: &str, z: &str, ct: &str) -> OfferingKey {
    OfferingKey {
        instance_type: t.into(),
        zone: z.into(),
        capacity_type: ct.into(),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn on_demand_launches_at_the_catalog_price_with_node_labels() {
    let (c, _) = cloud(1);
    let i = block_on(c.create(&with_capacity_type(
        request("a", &["m7i.large"]),
        "on-demand",
    )))
    .unwrap();
    assert_eq!(i.instance_type, "m7i.large");
    assert_eq!(i.capacity_type, "on-demand");
    assert_eq!(i.price, 0.1008);
    assert_eq!(i.labels[labels::INSTANCE_FAMILY], "m7i");
    assert_eq!(i.labels[labels::ZONE], i.zone);
    assert!(i.provider_id.starts_with("fake:///us-east-1"));
}

#[test]
fn spot_prices_sit_between_a_quarter_and_three_quarters_of_on_demand() {
    let (c, _) = cloud(1);
    for t in testkit::SMALL {
        for z in c.zones().to_vec() {
            for h in [0u64, 6, 12, 18, 30] {
                let p = c.spot_price(t, &z, Duration::from_secs(h * 3600)).unwrap();
                let od = c.inner.od_price[t];
                assert!(
                    p >= 0.25 * od - 1e-12 && p <= 0.75 * od + 1e-12,
                    "{t} {z} {p} vs {od}"
                );
            }
        }
    }
    let i = block_on(c.create(&request("s", &["m7i.large"]))).unwrap();
    assert_eq!(
        i.capacity_type, "spot",
        "spot is cheaper, so it is chosen when allowed"
    );
}

#[test]
fn spot_prices_drift_slowly() {
    let (c, _) = cloud(3);
    let p0 = c
        .spot_price("m7i.large", "us-east-1a", Duration::ZERO)
        .unwrap();
    let p1 = c
        .spot_price("m7i.large", "us-east-1a", Duration::from_secs(60))
        .unwrap();
    let p6 = c
        .spot_price("m7i.large", "us-east-1a", Duration::from_secs(6 * 3600))
        .unwrap();
    assert!(
        (p1 - p0).abs() < 0.001 * p0,
        "a minute moves the price by under 0.1%"
    );
    assert_ne!(p0, p6, "six hours move it");
}

#[test]
fn an_exhausted_pool_returns_insufficient_capacity_naming_the_offering() {
    let (c, _) = cloud(1);
    let only = |name: &str| {
        let mut r = with_capacity_type(request(name, &["m7i.large"]), "on-demand");
        r.requirements.add(capstan_model::Requirement::in_values(
            labels::ZONE,
            ["us-east-1a"],
        ));
        r
    };
    c.set_capacity(key("m7i.large", "us-east-1a", "on-demand"), 2);
    block_on(c.create(&only("a"))).unwrap();
    block_on(c.create(&only("b"))).unwrap();
    let err = block_on(c.create(&only("c"))).unwrap_err();
    assert_eq!(
        err,
        CloudError::InsufficientCapacity {
            offerings: vec![key("m7i.large", "us-east-1a", "on-demand")]
        }
    );
    assert_eq!(
        err.to_string(),
        "insufficient capacity in m7i.large/us-east-1a/on-demand"
    );
    // Capacity comes back when an instance goes.
    let first = block_on(c.list()).unwrap()[0].provider_id.clone();
    block_on(c.delete(&first)).unwrap();
    assert!(block_on(c.create(&only("c"))).is_ok());
}

#[test]
fn an_exhausted_pool_falls_through_to_the_next_offering() {
    let (c, _) = cloud(1);
    for z in c.zones().to_vec() {
        c.set_capacity(key("m7i.large", &z, "on-demand"), 0);
    }
    let i = block_on(c.create(&with_capacity_type(
        request("a", &["m7i.large", "m7i.xlarge"]),
        "on-demand",
    )))
    .unwrap();
    assert_eq!(i.instance_type, "m7i.xlarge");
}

#[test]
fn spot_is_launched_before_a_cheaper_on_demand_offering_when_both_are_allowed() {
    let (c, _) = cloud(1);
    for z in c.zones().to_vec() {
        c.set_capacity(key("m7i.large", &z, "spot"), 0);
    }
    // m7i.large on demand ($0.1008) is cheaper than m7i.2xlarge on spot (at least a quarter
    // of $0.4032), but Karpenter and EC2 take spot first where the request allows both.
    let i = block_on(c.create(&request("a", &["m7i.large", "m7i.2xlarge"]))).unwrap();
    assert_eq!(
        (i.instance_type.as_str(), i.capacity_type.as_str()),
        ("m7i.2xlarge", "spot")
    );
    // With no spot left, the same call falls back to on-demand.
    for z in c.zones().to_vec() {
        c.set_capacity(key("m7i.2xlarge", &z, "spot"), 0);
    }
    let i = block_on(c.create(&request("b", &["m7i.large", "m7i.2xlarge"]))).unwrap();
    assert_eq!(
        (i.instance_type.as_str(), i.capacity_type.as_str()),
        ("m7i.large", "on-demand")
    );
}

#[test]
fn a_reservation_is_used_before_spot_and_when_it_is_full_spot_follows() {
    let (c, _) = cloud(1);
    // One reserved m7i.xlarge in us-east-1c: dearer than m7i.large on spot, taken first.
    c.set_capacity(key("m7i.xlarge", "us-east-1c", "reserved"), 1);
    let types = block_on(c.instance_types(&NodePool::default_pool())).unwrap();
    let reserved: Vec<&Offering> = types
        .iter()
        .flat_map(|t| t.offerings.iter())
        .filter(|o| o.capacity_type == "reserved")
        .collect();
    assert_eq!(reserved.len(), 1, "offered only where reserved");
    let i = block_on(c.create(&request("a", &["m7i.large", "m7i.xlarge"]))).unwrap();
    assert_eq!(
        (
            i.instance_type.as_str(),
            i.zone.as_str(),
            i.capacity_type.as_str()
        ),
        ("m7i.xlarge", "us-east-1c", "reserved")
    );
    assert_eq!(i.labels[labels::CAPACITY_TYPE], "reserved");
    let i = block_on(c.create(&request("b", &["m7i.large", "m7i.xlarge"]))).unwrap();
    assert_eq!(i.capacity_type, "spot", "the reservation is full");
}

#[test]
fn offerings_at_capacity_are_reported_unavailable() {
    let (c, _) = cloud(1);
    c.set_capacity(key("m7i.large", "us-east-1b", "spot"), 0);
    let types = block_on(c.instance_types(&NodePool::default_pool())).unwrap();
    let t = types.iter().find(|t| t.name == "m7i.large").unwrap();
    let o = t
        .offerings
        .iter()
        .find(|o| o.zone == "us-east-1b" && o.capacity_type == "spot")
        .unwrap();
    assert!(!o.available);
    assert!(t.offerings.iter().filter(|o| o.available).count() == 5);
    assert!(
        types.iter().all(|t| t.labels[labels::ARCH] == "amd64"),
        "the pool's arch requirement filters m7g"
    );
}

#[test]
fn throttling_starts_above_the_configured_rate_and_recovers() {
    let clock = ManualClock::new();
    let mut cfg = FakeCloudConfig::default();
    cfg.api.rate_per_second = 2;
    cfg.api.burst = 3;
    let c = Builder::new()
        .config(cfg)
        .clock(Arc::new(clock.clone()))
        .build();
    for i in 0..3 {
        block_on(c.create(&request(&format!("ok-{i}"), &["m7i.large"]))).unwrap();
    }
    let err = block_on(c.create(&request("over", &["m7i.large"]))).unwrap_err();
    let CloudError::Throttled { retry_after } = err else {
        panic!("{err:?}")
    };
    assert!(
        retry_after > Duration::ZERO && retry_after <= Duration::from_millis(500),
        "{retry_after:?}"
    );
    clock.advance(retry_after);
    block_on(c.create(&request("over", &["m7i.large"]))).unwrap();
    assert!(
        block_on(c.create(&request("again", &["m7i.large"]))).is_err(),
        "the bucket is empty again"
    );
    clock.advance(Duration::from_secs(10));
    for i in 0..3 {
        block_on(c.create(&request(&format!("later-{i}"), &["m7i.large"]))).unwrap();
    }
}

#[test]
fn the_interruption_warning_precedes_reclamation_by_exactly_two_minutes() {
    let clock = ManualClock::new();
    let mut cfg = FakeCloudConfig::default();
    cfg.interruptions.rate_multiplier = 2000.0; // a storm: lifetimes of minutes to hours
    cfg.interruptions.rebalance_fraction = 1.0;
    let c = Builder::new()
        .config(cfg)
        .clock(Arc::new(clock.clone()))
        .build();
    let i = block_on(c.create(&request("s", &["m7i.large"]))).unwrap();
    assert_eq!(i.capacity_type, "spot");
    let mut warning = None;
    let mut reclaimed = None;
    let mut rebalance = None;
    for _ in 0..(30 * 24 * 60) {
        clock.advance(Duration::from_secs(1));
        let evs = block_on(c.interruptions()).unwrap();
        block_on(c.ack_interruptions(&evs)).unwrap();
        for e in evs {
            match e {
                InterruptionEvent::SpotInterruptionWarning { at, reclaim_at, .. } => {
                    assert_eq!(reclaim_at, at + SPOT_WARNING);
                    assert_eq!(
                        block_on(c.get(&i.provider_id)).unwrap().state,
                        InstanceState::Running,
                        "still running at the warning"
                    );
                    warning = Some(at);
                }
                InterruptionEvent::StateChange { at, state, .. } => {
                    assert_eq!(state, InstanceState::Terminated);
                    reclaimed = Some(at);
                }
                InterruptionEvent::RebalanceRecommendation { at, .. } => rebalance = Some(at),
                other => panic!("{other:?}"),
            }
        }
        if reclaimed.is_some() {
            break;
        }
    }
    let (w, r) = (
        warning.expect("a warning"),
        reclaimed.expect("a reclamation"),
    );
    assert_eq!(r - w, Duration::from_secs(120));
    assert!(rebalance.expect("a rebalance recommendation") <= w);
    assert!(
        block_on(c.list()).unwrap().is_empty(),
        "the instance is gone"
    );
}

#[test]
fn an_interruption_can_be_injected() {
    let (c, clock) = cloud(1);
    let i = block_on(c.create(&request("s", &["m7i.large"]))).unwrap();
    clock.advance(Duration::from_secs(10));
    c.interrupt(&i.provider_id).unwrap();
    let ev = block_on(c.interruptions()).unwrap();
    assert!(
        matches!(ev[..], [InterruptionEvent::SpotInterruptionWarning { at, reclaim_at, .. }] if at == Duration::from_secs(10) && reclaim_at == Duration::from_secs(130))
    );
    clock.advance(Duration::from_secs(119));
    assert_eq!(block_on(c.list()).unwrap().len(), 1);
    clock.advance(Duration::from_secs(1));
    assert!(block_on(c.list()).unwrap().is_empty());
}

#[test]
fn repeated_creates_with_one_token_launch_once() {
    let (c, _) = cloud(1);
    let a = block_on(c.create(&request("same", &["m7i.large"]))).unwrap();
    let b = block_on(c.create(&request("same", &["m7i.xlarge"]))).unwrap();
    assert_eq!(a, b);
    assert_eq!(block_on(c.list()).unwrap().len(), 1);
}

#[test]
fn concurrent_creates_with_one_token_launch_once() {
    let (c, _) = cloud(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let ids: Vec<String> = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move {
                    c.create(&request("race", &["m7i.large"]))
                        .await
                        .map(|i| i.provider_id)
                })
            })
            .collect();
        let mut ids = Vec::new();
        for t in tasks {
            ids.push(t.await.unwrap().unwrap());
        }
        ids
    });
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(block_on(c.list()).unwrap().len(), 1);
}

#[test]
fn boot_delays_fall_in_the_configured_range_and_nodes_become_ready() {
    let (c, clock) = cloud(5);
    let i = block_on(c.create(&request("b", &["m7i.large"]))).unwrap();
    let ready = i.ready_at.unwrap();
    assert!(
        ready >= Duration::from_secs(30) && ready <= Duration::from_secs(90),
        "{ready:?}"
    );
    assert_eq!(i.state, InstanceState::Pending);
    clock.set(ready);
    assert_eq!(
        block_on(c.get(&i.provider_id)).unwrap().state,
        InstanceState::Running
    );
}

#[test]
fn faults_fail_launches_and_keep_nodes_from_ever_being_ready() {
    let mut cfg = FakeCloudConfig::default();
    cfg.faults.launch_failure_rate = 0.5;
    cfg.faults.never_ready_rate = 0.5;
    cfg.api.burst = 10_000;
    let c = Builder::new().config(cfg).build();
    let mut failures = 0;
    let mut never_ready = 0;
    for n in 0..200 {
        let r = request(&format!("f{n}"), &["m7i.large"]);
        let mut tries = 0;
        let i = loop {
            tries += 1;
            match block_on(c.create(&r)) {
                Ok(i) => break i,
                Err(CloudError::Transient { .. }) => failures += 1,
                Err(e) => panic!("{e:?}"),
            }
            assert!(tries < 50, "a retry eventually succeeds");
        };
        never_ready += usize::from(i.ready_at.is_none());
    }
    assert!((60..=140).contains(&never_ready), "{never_ready}");
    assert!((100..=300).contains(&failures), "{failures}");
}

#[test]
fn deleting_twice_succeeds_and_deleting_the_unknown_is_not_found() {
    let (c, _) = cloud(1);
    let i = block_on(c.create(&request("d", &["m7i.large"]))).unwrap();
    block_on(c.delete(&i.provider_id)).unwrap();
    block_on(c.delete(&i.provider_id)).unwrap();
    assert_eq!(
        block_on(c.get(&i.provider_id)).unwrap().state,
        InstanceState::Terminated
    );
    assert!(matches!(
        block_on(c.delete("fake:///x/i-0")),
        Err(CloudError::NotFound { .. })
    ));
}

#[test]
fn a_new_image_drifts_older_instances() {
    let (c, _) = cloud(1);
    let old = block_on(c.create(&request("old", &["m7i.large"]))).unwrap();
    assert_eq!(block_on(c.is_drifted(&old)).unwrap(), None);
    c.roll_image();
    let new = block_on(c.create(&request("new", &["m7i.large"]))).unwrap();
    assert!(block_on(c.is_drifted(&old)).unwrap().is_some());
    assert_eq!(block_on(c.is_drifted(&new)).unwrap(), None);
    // Asked together, each gets the answer it gets alone; one the cloud never launched
    // is not found.
    let mut stranger = new.clone();
    stranger.provider_id = "fake:///x/i-404".into();
    let all = block_on(c.drift_of(&[&old, &new, &stranger]));
    assert_eq!(all[0], block_on(c.is_drifted(&old)));
    assert_eq!(all[1], Ok(None));
    assert!(matches!(all[2], Err(CloudError::NotFound { .. })));
    assert_eq!(all.len(), 3);
}

#[test]
fn drift_knows_only_the_provider_ids_the_cloud_wrote() {
    let (c, _) = cloud(1);
    let i = block_on(c.create(&request("a", &["m7i.large"]))).unwrap();
    assert_eq!(block_on(c.is_drifted(&i)), Ok(None));
    let hex = i.provider_id.rsplit_once("/i-").unwrap().1.to_string();
    // Other spellings of the same number are not this instance.
    let upper = hex.to_uppercase();
    for other in [
        format!("fake:///z/i-+{}", &hex[1..]),
        format!("fake:///z/i-{hex}0"),
        format!("fake:///z/i-{}", &hex[1..]),
        format!("fake:///z/{hex}"),
        String::new(),
    ]
    .into_iter()
    .chain((upper != hex).then(|| format!("fake:///z/i-{upper}")))
    {
        let mut stranger = i.clone();
        stranger.provider_id = other.clone();
        assert!(
            matches!(
                block_on(c.is_drifted(&stranger)),
                Err(CloudError::NotFound { .. })
            ),
            "{other}"
        );
    }
}

#[test]
fn requests_that_can_never_launch_are_invalid() {
    let (c, _) = cloud(1);
    assert!(matches!(
        block_on(c.create(&request("x", &[]))),
        Err(CloudError::Invalid { .. })
    ));
    assert!(matches!(
        block_on(c.create(&request("y", &["no-such.type"]))),
        Err(CloudError::Invalid { .. })
    ));
}

/// Everything seeded about one run: prices, boot delays, interruption times.
fn fingerprint(seed: u64) -> Vec<String> {
    let clock = ManualClock::new();
    let mut cfg = FakeCloudConfig {
        seed,
        ..Default::default()
    };
    cfg.interruptions.rate_multiplier = 500.0;
    let c = Builder::new()
        .config(cfg)
        .clock(Arc::new(clock.clone()))
        .build();
    let mut out = Vec::new();
    for n in 0..20 {
        let i =
            block_on(c.create(&request(&format!("n{n}"), &["m7i.large", "c7i.large"]))).unwrap();
        out.push(format!(
            "{} {} {:.6} {:?}",
            i.provider_id, i.instance_type, i.price, i.ready_at
        ));
    }
    for _ in 0..(48 * 60) {
        clock.advance(Duration::from_secs(60));
        let evs = block_on(c.interruptions()).unwrap();
        block_on(c.ack_interruptions(&evs)).unwrap();
        for e in evs {
            out.push(format!("{e:?}"));
        }
    }
    out
}

#[test]
fn the_same_seed_gives_the_same_cloud_and_another_seed_another() {
    let a = fingerprint(11);
    assert_eq!(a, fingerprint(11));
    assert!(
        a.iter().any(|l| l.contains("SpotInterruptionWarning")),
        "the storm interrupts something"
    );
    assert_ne!(a, fingerprint(12));
}

#[test]
fn scheduled_maintenance_gives_notice_then_retires_the_instance() {
    let (c, clock) = cloud(1);
    let i = block_on(c.create(&with_capacity_type(
        request("m", &["m7i.large"]),
        "on-demand",
    )))
    .unwrap();
    c.schedule_maintenance(&i.provider_id, Duration::from_secs(3600))
        .unwrap();
    let ev = block_on(c.interruptions()).unwrap();
    assert!(
        matches!(ev[..], [InterruptionEvent::ScheduledMaintenance { when, .. }] if when == Duration::from_secs(3600))
    );
    block_on(c.ack_interruptions(&ev)).unwrap();
    clock.set(Duration::from_secs(3600));
    let ev = block_on(c.interruptions()).unwrap();
    let states: Vec<InstanceState> = ev
        .iter()
        .map(|e| match e {
            InterruptionEvent::StateChange { state, .. } => *state,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        states,
        vec![InstanceState::ShuttingDown, InstanceState::Terminated]
    );
    assert!(block_on(c.list()).unwrap().is_empty());
}

#[test]
fn configured_maintenance_retires_some_instances_with_notice() {
    let clock = ManualClock::new();
    let mut cfg = FakeCloudConfig::default();
    cfg.interruptions.maintenance_per_month = 30.0;
    cfg.interruptions.maintenance_notice_seconds = 3600.0;
    cfg.spot.enabled = false;
    let c = Builder::new()
        .config(cfg)
        .clock(Arc::new(clock.clone()))
        .build();
    for n in 0..10 {
        block_on(c.create(&request(&format!("n{n}"), &["m7i.large"]))).unwrap();
    }
    let mut notices = BTreeMap::new();
    for _ in 0..(10 * 24) {
        clock.advance(Duration::from_secs(3600));
        let evs = block_on(c.interruptions()).unwrap();
        block_on(c.ack_interruptions(&evs)).unwrap();
        for e in evs {
            match e {
                InterruptionEvent::ScheduledMaintenance {
                    provider_id,
                    at,
                    when,
                } => {
                    assert!(when >= at);
                    notices.insert(provider_id, when);
                }
                InterruptionEvent::StateChange {
                    provider_id,
                    at,
                    state,
                } => {
                    if state == InstanceState::Terminated {
                        assert_eq!(
                            notices.get(&provider_id),
                            Some(&at),
                            "retired when announced"
                        );
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(
        notices.len() >= 5,
        "most of ten instances retire within ten days at 30/month: {}",
        notices.len()
    );
}

#[test]
fn an_unacknowledged_interruption_is_delivered_again_after_the_visibility_timeout() {
    let (c, clock) = cloud(1);
    let i = block_on(c.create(&with_capacity_type(
        request("m", &["m7i.large"]),
        "on-demand",
    )))
    .unwrap();
    c.schedule_maintenance(&i.provider_id, Duration::from_secs(3600))
        .unwrap();
    let first = block_on(c.interruptions()).unwrap();
    assert_eq!(first.len(), 1);
    assert!(block_on(c.interruptions()).unwrap().is_empty(), "invisible");
    clock.advance(crate::VISIBILITY_TIMEOUT);
    let again = block_on(c.interruptions()).unwrap();
    assert_eq!(again, first);
    block_on(c.ack_interruptions(&again)).unwrap();
    clock.advance(crate::VISIBILITY_TIMEOUT * 2);
    assert!(
        block_on(c.interruptions()).unwrap().is_empty(),
        "acknowledged"
    );
}

#[test]
fn regions_shorten_as_aws_zone_ids_spell_them() {
    let cases = [
        ("us-east-1", "use1"),
        ("us-west-2", "usw2"),
        ("eu-central-1", "euc1"),
        ("ap-southeast-2", "apse2"),
        ("ap-northeast-1", "apne1"),
        ("us-gov-west-1", "usgw1"),
    ];
    for (region, want) in cases {
        assert_eq!(region_short(region), want, "{region}");
    }
}

#[test]
fn a_zone_id_requirement_launches_in_that_zone_and_the_node_carries_the_id() {
    let (c, _) = cloud(1);
    let offered = c.offered_types(None);
    let ids: BTreeMap<&str, Option<&str>> = offered[0]
        .offerings
        .iter()
        .map(|o| (o.zone.as_str(), o.zone_id.as_deref()))
        .collect();
    assert_eq!(
        ids,
        BTreeMap::from([
            ("us-east-1a", Some("use1-az1")),
            ("us-east-1b", Some("use1-az2")),
            ("us-east-1c", Some("use1-az3"))
        ])
    );
    for (id, zone) in [("use1-az2", "us-east-1b"), ("use1-az3", "us-east-1c")] {
        let mut r = request(id, &["m7i.large"]);
        r.requirements
            .add(Requirement::in_values(labels::ZONE_ID, [id]));
        let i = block_on(c.create(&r)).unwrap();
        assert_eq!(i.zone, zone);
        assert_eq!(i.labels[labels::ZONE_ID], id);
    }
    let mut r = request("nowhere", &["m7i.large"]);
    r.requirements
        .add(Requirement::in_values(labels::ZONE_ID, ["use1-az9"]));
    assert!(matches!(
        block_on(c.create(&r)),
        Err(CloudError::Invalid { .. })
    ));
}

#[test]
fn configured_zone_ids_name_the_zones() {
    let config: FakeCloudConfig = serde_yaml::from_str("zoneIds: {us-east-1a: use1-az4}").unwrap();
    let c = FakeCloud::new(
        config,
        crate::testkit::small_catalog(),
        Arc::new(ManualClock::new()),
    );
    let o = &c.offered_types(None)[0].offerings;
    let id = |z: &str| {
        o.iter()
            .find(|o| o.zone == z)
            .and_then(|o| o.zone_id.clone())
    };
    assert_eq!(id("us-east-1a").as_deref(), Some("use1-az4"));
    assert_eq!(id("us-east-1b").as_deref(), Some("use1-az2"));
}

fn warm_cloud(size: u32, capacity_type: &str) -> (FakeCloud, ManualClock) {
    let clock = ManualClock::new();
    let yaml = format!(
        "warmPool:\n  pools: [{{instanceType: c7i.large, zone: us-east-1b, capacityType: {capacity_type}, size: {size}}}]\n  start: {{minSeconds: 5, maxSeconds: 10}}\n  stoppedHourlyCost: 0.002\n"
    );
    let config = FakeCloudConfig::from_yaml("w.yaml", &yaml).unwrap();
    config.validate_offered(&testkit::small_catalog()).unwrap();
    let cloud = Builder::new()
        .config(config)
        .clock(Arc::new(clock.clone()))
        .build();
    (cloud, clock)
}

/// A launch the planner put on a warm instance.
fn warm_request(name: &str, types: &[&str]) -> LaunchRequest {
    LaunchRequest {
        warm_start: true,
        ..request(name, types)
    }
}

#[test]
fn a_launch_a_warm_instance_can_serve_starts_it_in_seconds_and_the_pool_refills_by_booting_another()
{
    let (c, clock) = warm_cloud(1, "spot");
    let wanted = key("c7i.large", "us-east-1b", "spot");
    assert_eq!(c.warm_ready()[&wanted], 1);
    // What the provisioner plans with: the stopped instances ready to start.
    let ready = capstan_model::Warm {
        instance_type: "c7i.large".into(),
        zone: "us-east-1b".into(),
        capacity_type: "spot".into(),
        count: 1,
    };
    assert_eq!(block_on(c.warm()).unwrap(), std::slice::from_ref(&ready));
    assert!((c.warm_pool_cost_per_hour() - 0.002).abs() < 1e-12);
    // A launch the planner did not put on a warm instance boots, though one is ready.
    let cold = block_on(c.create(&request("c1", &["c7i.large"]))).unwrap();
    assert!(cold.ready_at.unwrap() - cold.launched_at >= Duration::from_secs(30));
    assert_eq!(c.warm_ready()[&wanted], 1);
    // Cheaper offerings exist (m7i.large spot, other zones); the warm one is started first.
    let i = block_on(c.create(&warm_request("w1", &["m7i.large", "c7i.large"]))).unwrap();
    assert_eq!(
        (
            i.instance_type.as_str(),
            i.zone.as_str(),
            i.capacity_type.as_str()
        ),
        ("c7i.large", "us-east-1b", "spot")
    );
    let up = i.ready_at.unwrap() - i.launched_at;
    assert!(
        up >= Duration::from_secs(5) && up <= Duration::from_secs(10),
        "{up:?}"
    );
    // The refill boots at its running price until it stops.
    assert_eq!(c.warm_ready()[&wanted], 0);
    assert_eq!(block_on(c.warm()).unwrap(), []);
    let running = c
        .spot_price("c7i.large", "us-east-1b", clock.now())
        .unwrap();
    assert!((c.warm_pool_cost_per_hour() - running).abs() < 1e-12);
    // The next launch, while the pool refills, boots cold like any other.
    let j = block_on(c.create(&warm_request("w2", &["m7i.large", "c7i.large"]))).unwrap();
    assert!(j.ready_at.unwrap() - j.launched_at >= Duration::from_secs(30));
    clock.advance(Duration::from_secs(90));
    assert_eq!(c.warm_ready()[&wanted], 1);
    assert_eq!(block_on(c.warm()).unwrap(), [ready]);
    assert!((c.warm_pool_cost_per_hour() - 0.002).abs() < 1e-12);
}

#[test]
fn a_warm_instance_dearer_than_the_launchs_cheapest_offering_by_more_than_the_premium_stays_stopped()
 {
    let clock = ManualClock::new();
    let yaml = "warmPool:\n  maxPremium: 0.1\n  pools: [{instanceType: m7i.xlarge, zone: us-east-1b, capacityType: on-demand, size: 1}]\n";
    let c = Builder::new()
        .config(FakeCloudConfig::from_yaml("w.yaml", yaml).unwrap())
        .clock(Arc::new(clock.clone()))
        .build();
    let od =
        |name: &str, types: &[&str]| with_capacity_type(warm_request(name, types), "on-demand");
    // m7i.large is half the price: the launch boots it.
    let small = block_on(c.create(&od("s", &["m7i.large", "m7i.xlarge"]))).unwrap();
    assert_eq!(small.instance_type, "m7i.large");
    assert!(small.ready_at.unwrap() - small.launched_at >= Duration::from_secs(30));
    // A launch only m7i.xlarge can serve starts the warm one.
    let big = block_on(c.create(&od("b", &["m7i.xlarge"]))).unwrap();
    assert_eq!(big.zone, "us-east-1b");
    assert!(big.ready_at.unwrap() - big.launched_at <= Duration::from_secs(20));
}

#[test]
fn a_warm_pool_serves_only_launches_that_allow_its_offering() {
    let (c, _) = warm_cloud(2, "on-demand");
    let spot_only = with_capacity_type(warm_request("s", &["c7i.large"]), "spot");
    let i = block_on(c.create(&spot_only)).unwrap();
    assert_eq!(i.capacity_type, "spot");
    assert!(i.ready_at.unwrap() - i.launched_at >= Duration::from_secs(30));
    let other_type = with_capacity_type(warm_request("o", &["m7i.large"]), "on-demand");
    assert_eq!(
        block_on(c.create(&other_type)).unwrap().instance_type,
        "m7i.large"
    );
    assert_eq!(
        c.warm_ready()[&key("c7i.large", "us-east-1b", "on-demand")],
        2
    );
}

#[test]
fn a_warm_pool_of_something_the_cloud_does_not_offer_is_an_error_naming_the_field() {
    let catalog = testkit::small_catalog();
    let cases = [
        (
            "warmPool: {pools: [{instanceType: z9.huge, zone: us-east-1a, size: 1}]}",
            "warmPool.pools[0].instanceType",
        ),
        (
            "warmPool: {pools: [{instanceType: m7i.large, zone: eu-west-1a, size: 1}]}",
            "warmPool.pools[0].zone",
        ),
        (
            "warmPool: {pools: [{instanceType: m7i.large, zone: us-east-1a, capacityType: cheap, size: 1}]}",
            "warmPool.pools[0].capacityType",
        ),
        (
            "warmPool: {start: {minSeconds: 9, maxSeconds: 3}}",
            "warmPool.start.minSeconds",
        ),
        (
            "warmPool: {stoppedHourlyCost: -1}",
            "warmPool.stoppedHourlyCost",
        ),
        ("warmPool: {maxPremium: -0.5}", "warmPool.maxPremium"),
    ];
    for (yaml, field) in cases {
        let got = FakeCloudConfig::from_yaml("w.yaml", yaml)
            .map_err(|e| e.field)
            .and_then(|c| c.validate_offered(&catalog).map_err(|(f, _)| f));
        assert_eq!(got, Err(field.to_string()), "{yaml}");
    }
}
