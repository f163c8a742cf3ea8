use super::*;

#[test]
fn quantiles_are_nearest_rank_from_minimum_to_maximum() {
    let sorted: Vec<f64> = (1..=10).map(f64::from).collect();
    // (q, expected)
    let cases = [
        (0.0, 1.0),
        (0.5, 5.0),
        (0.9, 9.0),
        (0.99, 10.0),
        (1.0, 10.0),
    ];
    for (q, want) in cases {
        assert_eq!(quantile(&sorted, q), want, "q={q}");
    }
    assert!(quantile(&[], 0.5).is_nan());
}

#[test]
fn a_summary_forgets_observations_older_than_its_window_but_keeps_count_and_sum() {
    let m = Metrics::new();
    m.pods_startup.observe(&[], 0.0, 100.0);
    m.pods_startup.observe(&[], 700.0, 2.0);
    m.pods_startup.observe(&[], 701.0, 4.0);
    let text = m.render();
    assert!(
        text.contains("# TYPE karpenter_pods_startup_duration_seconds summary"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_pods_startup_duration_seconds{quantile=\"1\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_pods_startup_duration_seconds{quantile=\"0\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_pods_startup_duration_seconds_count 3"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_pods_startup_duration_seconds_sum 106"),
        "{text}"
    );
}

#[test]
fn every_described_metric_has_a_unique_name_and_prometheus_syntax() {
    let mut seen = BTreeSet::new();
    for d in ALL {
        assert!(seen.insert(d.name), "{} twice", d.name);
        assert!(
            d.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{}",
            d.name
        );
        assert!(["counter", "gauge", "histogram", "summary"].contains(&d.kind));
        assert_eq!(
            d.kind == "counter",
            d.name.ends_with("_total"),
            "{}",
            d.name
        );
    }
}

#[test]
fn counters_and_histograms_render_with_their_labels() {
    let m = Metrics::new();
    m.claims_created
        .with_label_values(&["provisioned", "default"])
        .inc();
    m.cloud_call(
        "nodeclaim.lifecycle",
        "Create",
        "fake",
        0.02,
        Some(&capstan_cloud::CloudError::InsufficientCapacity { offerings: vec![] }),
    );
    let text = m.render();
    assert!(
        text.contains(
            "karpenter_nodeclaims_created_total{nodepool=\"default\",reason=\"provisioned\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("karpenter_cloudprovider_errors_total{controller=\"nodeclaim.lifecycle\",error=\"InsufficientCapacityError\",method=\"Create\",provider=\"fake\"} 1"), "{text}");
    assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"fake\",le=\"0.025\"} 1"), "{text}");
    assert!(text.contains("karpenter_build_info{version="), "{text}");
}

#[test]
fn the_state_gauges_drop_series_of_objects_that_are_gone() {
    use crate::api::{Change, Meta, Object};
    let m = Metrics::new();
    let mut cache = Cache::default();
    let pod = |name: &str| capstan_model::Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: name.into(),
        created: Some(1_000.0),
        ..Default::default()
    };
    for n in ["a", "b"] {
        cache.apply(Change::Applied(
            Meta::default(),
            Object::Pod(Arc::new(pod(n))),
        ));
    }
    m.observe_state(&cache, &[], 1_010.0, 10.0);
    let text = m.render();
    assert!(text.contains("name=\"a\""), "{text}");
    assert!(text.contains("name=\"b\""), "{text}");
    cache.apply(Change::Deleted(crate::api::Kind::Pod, "default/b".into()));
    let mut running = pod("a");
    running.phase = capstan_model::pod::PodPhase::Running;
    running.node_name = Some("n1".into());
    cache.apply(Change::Applied(
        Meta::default(),
        Object::Pod(Arc::new(running)),
    ));
    m.observe_state(&cache, &[], 1_012.5, 12.5);
    let text = m.render();
    assert!(text.contains("name=\"a\""), "{text}");
    assert!(!text.contains("name=\"b\""), "{text}");
    assert!(text.contains("phase=\"Running\""), "{text}");
    // Seen pending at 1010, running at 1012.5: 12.5 s after its creation at 1000.
    assert!(
        text.contains("karpenter_pods_startup_duration_seconds_sum 12.5"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_cluster_state_node_count 0"),
        "{text}"
    );
}
