use super::*;
use crate::api::{Change, MetaPatch};
use capstan_cloud::ManualClock;
use capstan_model::NodeClaim;

fn server() -> (InMemoryApi, ApiClient) {
    let api = InMemoryApi::new(Arc::new(ManualClock::new()));
    let c = api.client("a");
    (api, c)
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn lease(holder: &str, transitions: u64) -> Lease {
    Lease {
        holder: holder.into(),
        renewed_at: 0.0,
        acquired_at: 0.0,
        duration_seconds: 15.0,
        transitions,
    }
}

fn claim(name: &str) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        finalizers: vec!["capstan.dev/termination".into()],
        ..Default::default()
    }
}

fn meta_of(w: Written) -> Meta {
    match w {
        Written::Object(m, _) => m,
        other => panic!("expected an object, got {other:?}"),
    }
}

#[test]
fn a_write_with_a_stale_resource_version_conflicts() {
    block(async {
        let (api, c) = server();
        let m = meta_of(
            c.write(Write::CreateClaim(Box::new(claim("c1"))))
                .await
                .unwrap(),
        );
        let status = |rv: &str| Write::ClaimStatus {
            name: "c1".into(),
            rv: rv.into(),
            status: Box::default(),
        };
        c.write(status(&m.resource_version)).await.unwrap();
        let err = c.write(status(&m.resource_version)).await.unwrap_err();
        assert!(matches!(err, ApiError::Conflict { .. }), "{err}");
        assert_eq!(api.stats().conflicts, 1);
    });
}

#[test]
fn the_server_assigns_a_claim_its_uid_and_creation_time() {
    block(async {
        let clock = Arc::new(ManualClock::new());
        clock.set(std::time::Duration::from_secs(42));
        let api = InMemoryApi::new(clock);
        let c = api.client("a");
        let m = meta_of(
            c.write(Write::CreateClaim(Box::new(claim("c1"))))
                .await
                .unwrap(),
        );
        let Some(Object::NodeClaim(stored)) = api.get(Kind::NodeClaim, "c1") else {
            panic!("stored");
        };
        assert_eq!(stored.uid, m.uid);
        assert!(!m.uid.is_empty());
        assert_eq!(stored.created, 42.0);
        let again = c
            .write(Write::CreateClaim(Box::new(claim("c1"))))
            .await
            .unwrap_err();
        assert!(matches!(again, ApiError::AlreadyExists { .. }));
    });
}

#[test]
fn a_finalizer_holds_a_delete_until_it_is_released() {
    block(async {
        let (api, c) = server();
        let m = meta_of(
            c.write(Write::CreateClaim(Box::new(claim("c1"))))
                .await
                .unwrap(),
        );
        let held = c
            .write(Write::Delete {
                kind: Kind::NodeClaim,
                key: "c1".into(),
                uid: m.uid.clone(),
                rv: m.resource_version.clone(),
            })
            .await
            .unwrap();
        let Written::Object(m2, Object::NodeClaim(going)) = held else {
            panic!("held by its finalizer");
        };
        assert!(going.deleting());
        let done = c
            .write(Write::Meta {
                kind: Kind::NodeClaim,
                name: "c1".into(),
                rv: m2.resource_version,
                patch: MetaPatch {
                    finalizers: Some(vec![]),
                    ..Default::default()
                },
            })
            .await
            .unwrap();
        assert!(matches!(done, Written::Removed));
        assert!(api.get(Kind::NodeClaim, "c1").is_none());
    });
}

#[test]
fn a_delete_with_another_uid_is_refused() {
    block(async {
        let (_api, c) = server();
        let m = meta_of(
            c.write(Write::CreateClaim(Box::new(claim("c1"))))
                .await
                .unwrap(),
        );
        let err = c
            .write(Write::Delete {
                kind: Kind::NodeClaim,
                key: "c1".into(),
                uid: "someone-else".into(),
                rv: m.resource_version,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Conflict { .. }), "{err}");
    });
}

#[test]
fn writes_from_a_process_not_holding_the_lease_are_counted_and_refused_only_in_strict_mode() {
    block(async {
        let (api, a) = server();
        let b = api.client("b");
        b.write(Write::CreateLease(lease("b", 1))).await.unwrap();
        a.write(Write::CreateClaim(Box::new(claim("c1"))))
            .await
            .unwrap();
        assert_eq!(api.stats().non_holder_writes, 1);
        api.set_strict_fencing(true);
        let err = a
            .write(Write::CreateClaim(Box::new(claim("c2"))))
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Forbidden { .. }), "{err}");
        b.write(Write::CreateClaim(Box::new(claim("c3"))))
            .await
            .unwrap();
        assert_eq!(api.stats().refused_non_holder, 1);
    });
}

#[test]
fn a_watch_returns_the_changes_to_its_kind_after_its_resource_version() {
    block(async {
        let (api, c) = server();
        let a = api.put(Object::Node(Arc::new(capstan_model::Node {
            name: "a".into(),
            ..Default::default()
        })));
        api.put(Object::NodeClaim(Arc::new(claim("c1"))));
        api.put(Object::Node(Arc::new(capstan_model::Node {
            name: "b".into(),
            ..Default::default()
        })));
        let nodes = c.watch(Kind::Node, &a.resource_version).await.unwrap();
        let keys: Vec<String> = nodes
            .changes
            .iter()
            .map(|ch| match ch {
                Change::Applied(_, o) => o.key(),
                Change::Deleted(_, k) => k.clone(),
            })
            .collect();
        assert_eq!(keys, ["b"], "only nodes, only after its resourceVersion");
        let claims = c.watch(Kind::NodeClaim, &a.resource_version).await.unwrap();
        assert_eq!(claims.changes.len(), 1);
        let bad = c.watch(Kind::Node, "not-a-version").await.unwrap_err();
        assert!(matches!(bad, ApiError::Invalid { .. }));
    });
}

#[test]
fn the_lease_is_replaced_only_at_the_resource_version_read() {
    block(async {
        let (_api, c) = server();
        let Written::Lease(rv) = c.write(Write::CreateLease(lease("a", 1))).await.unwrap() else {
            panic!("lease");
        };
        c.write(Write::UpdateLease {
            lease: lease("a", 1),
            rv: rv.clone(),
        })
        .await
        .unwrap();
        let err = c
            .write(Write::UpdateLease {
                lease: lease("b", 2),
                rv,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Conflict { .. }));
    });
}

#[test]
fn a_pdb_counts_the_pods_it_selects_as_they_come_and_go_and_whatever_their_app() {
    use capstan_model::pdb::{IntOrPercent, Pdb};
    use capstan_model::pod::PodPhase;
    use capstan_model::selector::LabelSelector;
    let (api, _) = server();
    let pod = |name: &str, app: &str, phase: PodPhase| {
        Arc::new(Pod {
            namespace: "shop".into(),
            name: name.into(),
            labels: [("app", app), ("tier", "web")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            phase,
            ..Default::default()
        })
    };
    // Two apps, one budget over both: at most one of the three web pods may be down.
    let a = pod("a", "cart", PodPhase::Running);
    api.put(Object::Pod(a.clone()));
    api.put(Object::Pod(pod("b", "search", PodPhase::Running)));
    api.put(Object::Pdb(Arc::new(Pdb {
        namespace: "shop".into(),
        name: "web".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("tier".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: None,
        max_unavailable: Some(IntOrPercent::Int(1)),
        always_allow_unhealthy: false,
    })));
    // Counted when the budget came: two of two healthy, one may go.
    assert!(!api.pdb_blocks(&a));
    // A third web pod, of a third app, not running yet: one is down already.
    api.put(Object::Pod(pod("c", "checkout", PodPhase::Pending)));
    assert!(api.pdb_blocks(&a), "the pending pod of another app counts");
    // It runs: none down again.
    api.put(Object::Pod(pod("c", "checkout", PodPhase::Running)));
    assert!(!api.pdb_blocks(&a));
    // The budget goes: nothing blocks.
    api.put(Object::Pod(pod("c", "checkout", PodPhase::Pending)));
    api.remove(Kind::Pdb, "shop/web");
    assert!(!api.pdb_blocks(&a));
}
