use super::*;
use capstan_model::pod::{Namespaces, PodAffinityTerm, PodPhase};
use proptest::prelude::*;

fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
    Arc::new(Pod {
        namespace: "default".into(),
        name: name.into(),
        node_name: node.map(str::to_string),
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        ..Default::default()
    })
}

fn meta(rv: u64) -> Meta {
    Meta {
        uid: "u".into(),
        resource_version: rv.to_string(),
    }
}

fn applied(rv: u64, o: Object) -> Change {
    Change::Applied(meta(rv), o)
}

fn node(name: &str) -> Object {
    Object::Node(Arc::new(Node {
        name: name.into(),
        provider_id: Some(format!("fake://{name}")),
        ..Default::default()
    }))
}

#[test]
fn binding_a_pod_moves_it_from_pending_to_its_node() {
    let mut c = Cache::default();
    c.apply(applied(1, Object::Pod(pod("a", None))));
    assert!(c.pending().contains_key("default/a"));
    c.apply(applied(2, Object::Pod(pod("a", Some("n1")))));
    assert!(c.pending().is_empty());
    assert_eq!(c.workload_pods_on("n1").len(), 1);
    c.apply(Change::Deleted(Kind::Pod, "default/a".into()));
    assert!(c.workload_pods_on("n1").is_empty());
}

#[test]
fn the_pod_journal_names_each_pod_put_or_removed_since_a_cursor_until_it_no_longer_reaches_back() {
    let mut c = Cache::default();
    let start = c.pod_journal_end();
    c.apply(applied(1, Object::Pod(pod("a", None))));
    c.apply(applied(2, node("n1")));
    let middle = c.pod_journal_end();
    c.apply(applied(3, Object::Pod(pod("a", Some("n1")))));
    c.apply(Change::Deleted(Kind::Pod, "default/b".into()));
    c.apply(Change::Deleted(Kind::Pod, "default/a".into()));
    fn since(c: &Cache, at: u64) -> Option<Vec<&str>> {
        c.pods_changed_since(at).map(Iterator::collect)
    }
    assert_eq!(
        since(&c, start),
        Some(vec!["default/a", "default/a", "default/b", "default/a"]),
        "nodes are not in it; a removal of what was never there is"
    );
    assert_eq!(
        since(&c, middle),
        Some(vec!["default/a", "default/b", "default/a"])
    );
    let end = c.pod_journal_end();
    assert_eq!(since(&c, end), Some(vec![]));
    assert_eq!(since(&c, end + 1), None, "a cursor from the future");
    for i in 0..super::POD_JOURNAL {
        c.apply(Change::Deleted(Kind::Pod, format!("default/{i}")));
    }
    assert_eq!(
        since(&c, start),
        None,
        "the journal keeps only the last changes"
    );
    assert_eq!(since(&c, end).map(|v| v.len()), Some(super::POD_JOURNAL));
}

#[test]
fn a_nodes_pod_fingerprint_changes_when_a_pod_comes_or_goes_not_when_one_is_updated() {
    let mut c = Cache::default();
    c.apply(applied(1, node("n1")));
    assert_eq!(c.pods_fingerprint("n1"), 0, "no pods");
    c.apply(applied(2, Object::Pod(pod("a", Some("n1")))));
    let one = c.pods_fingerprint("n1");
    assert_ne!(one, 0);
    c.apply(applied(3, Object::Pod(pod("b", Some("n1")))));
    let two = c.pods_fingerprint("n1");
    assert_ne!(two, one);
    // An update in place (a label, the phase's details) is no pod event.
    let mut b = Pod::clone(&pod("b", Some("n1")));
    b.labels.insert("touched".into(), "yes".into());
    c.apply(applied(4, Object::Pod(Arc::new(b))));
    assert_eq!(c.pods_fingerprint("n1"), two);
    // The same name with a new uid is another pod.
    let mut again = Pod::clone(&pod("b", Some("n1")));
    again.uid = "u2".into();
    c.apply(applied(5, Object::Pod(Arc::new(again))));
    assert_ne!(c.pods_fingerprint("n1"), two);
    c.apply(Change::Deleted(Kind::Pod, "default/a".into()));
    c.apply(Change::Deleted(Kind::Pod, "default/b".into()));
    assert_eq!(c.pods_fingerprint("n1"), 0, "all gone");
    c.apply(applied(8, Object::Pod(pod("a", Some("n1")))));
    assert_eq!(
        c.pods_fingerprint("n1"),
        one,
        "a set's fingerprint, whatever led to it"
    );
    c.check_indexes().unwrap();
}

#[test]
fn a_pods_volume_requirements_follow_its_claim_volume_and_class_as_they_come_and_change() {
    use capstan_model::labels::ZONE;
    use capstan_model::volume::{Claim, ClaimRef, StorageClass, Volume};
    let zone = |z: &str| -> capstan_model::Requirements {
        [capstan_model::Requirement::in_values(ZONE, [z.to_string()])]
            .into_iter()
            .collect()
    };
    let mut c = Cache::default();
    let mut p = Pod::clone(&pod("db", None));
    p.volume_claims = vec![ClaimRef {
        claim: "data".into(),
        ephemeral: false,
    }];
    c.apply(applied(1, Object::Pod(Arc::new(p))));
    let read = |c: &Cache| {
        let p = c.pod("default/db").unwrap();
        (p.volume_requirements.clone(), p.volume_error.clone())
    };
    assert_eq!(
        read(&c).1.as_deref(),
        Some("waiting for its PersistentVolumeClaim default/data")
    );
    c.apply(applied(
        2,
        Object::StorageClass(Arc::new(StorageClass {
            name: "late".into(),
            requirements: zone("z3"),
            immediate: false,
        })),
    ));
    let claim = |volume: Option<&str>| Claim {
        key: "default/data".into(),
        volume_name: volume.map(str::to_string),
        storage_class: Some("late".into()),
        bind_completed: volume.is_some(),
        ..Default::default()
    };
    c.apply(applied(
        3,
        Object::PersistentVolumeClaim(Arc::new(claim(None))),
    ));
    assert_eq!(read(&c), (zone("z3"), None), "unbound: the class's zone");
    c.apply(applied(
        4,
        Object::PersistentVolumeClaim(Arc::new(claim(Some("pv-1")))),
    ));
    assert!(read(&c).1.unwrap().contains("pv-1, which does not exist"));
    c.apply(applied(
        5,
        Object::PersistentVolume(Arc::new(Volume {
            name: "pv-1".into(),
            requirements: zone("z1"),
            deleting: false,
        })),
    ));
    assert_eq!(read(&c), (zone("z1"), None), "bound: the volume's zone");
    assert!(c.pending().contains_key("default/db"));
    c.apply(Change::Deleted(
        Kind::PersistentVolumeClaim,
        "default/data".into(),
    ));
    assert!(read(&c).1.is_some(), "its claim gone");
    assert_eq!(c.meta(Kind::PersistentVolume, "pv-1"), Some(&meta(5)));
    c.check_indexes().unwrap();
}

#[test]
fn a_node_with_pods_bound_to_it_is_dangling_while_it_is_missing() {
    let mut c = Cache::default();
    c.apply(applied(1, Object::Pod(pod("a", Some("n1")))));
    assert!(c.dangling().contains("n1"), "bound before the node is seen");
    c.apply(applied(2, node("n1")));
    assert!(c.dangling().is_empty());
    c.apply(Change::Deleted(Kind::Node, "n1".into()));
    assert!(c.dangling().contains("n1"), "deleted under its pod");
    assert_eq!(c.node_by_provider("fake://n1"), None);
    c.apply(Change::Deleted(Kind::Pod, "default/a".into()));
    assert!(c.dangling().is_empty(), "its last pod left");
    c.apply(applied(3, node("n1")));
    assert!(
        c.dangling().is_empty(),
        "a node without pods is never dangling"
    );
}

#[test]
fn pods_with_anti_affinity_are_counted_as_they_come_change_and_go() {
    let mut c = Cache::default();
    let repelling = |name: &str, anti: bool| {
        let mut p = Pod::clone(&pod(name, Some("n1")));
        if anti {
            p.anti_affinity.push(PodAffinityTerm {
                selector: None,
                namespaces: Namespaces::All,
                topology_key: "kubernetes.io/hostname".into(),
            });
        }
        Object::Pod(Arc::new(p))
    };
    c.apply(applied(1, repelling("a", true)));
    c.apply(applied(2, repelling("b", false)));
    assert_eq!(c.repelling(), 1);
    c.apply(applied(3, repelling("a", true)));
    assert_eq!(c.repelling(), 1, "an update of the same pod counts once");
    c.apply(applied(4, repelling("a", false)));
    assert_eq!(c.repelling(), 0);
    c.apply(applied(5, repelling("b", true)));
    c.apply(Change::Deleted(Kind::Pod, "default/b".into()));
    assert_eq!(c.repelling(), 0);
}

#[test]
fn a_relist_removes_what_is_gone_and_keeps_the_indexes() {
    let mut c = Cache::default();
    c.apply(applied(1, node("n1")));
    c.apply(applied(2, node("n2")));
    c.apply(applied(3, Object::Pod(pod("a", Some("n2")))));
    let before = c.counters();
    c.relist(
        Kind::Node,
        Listing {
            resource_version: "9".into(),
            objects: vec![(meta(1), node("n1"))],
        },
    );
    assert!(c.node("n2").is_none());
    assert!(c.dangling().contains("n2"));
    assert_eq!(c.node_by_provider("fake://n2"), None);
    assert!(c.counters().generation > before.generation);
    c.check_indexes().unwrap();
}

#[test]
fn an_object_that_turns_invalid_leaves_the_valid_maps() {
    let mut c = Cache::default();
    c.apply(applied(
        1,
        Object::NodePool(Arc::new(NodePool::default_pool())),
    ));
    assert!(c.nodepool("default").is_some());
    c.apply(applied(
        2,
        Object::Invalid(Arc::new(Invalid {
            kind: Kind::NodePool,
            key: "default".into(),
            error: "spec.weight: must be between 0 and 100".into(),
        })),
    ));
    assert!(c.nodepool("default").is_none());
    assert_eq!(c.invalid().count(), 1);
    c.apply(applied(
        3,
        Object::NodePool(Arc::new(NodePool::default_pool())),
    ));
    assert_eq!(c.invalid().count(), 0, "fixed again");
}

/// A random change to a small cluster: pods bound, unbound, finished or deleted; nodes and
/// claims come and go.
#[derive(Clone, Debug)]
enum Step {
    Pod {
        name: u8,
        node: Option<u8>,
        done: bool,
        daemon: bool,
        anti: bool,
        cpu: i64,
        app: Option<u8>,
    },
    DeletePod(u8),
    /// A PDB selecting `app=a{app}`, or (with `tier`) also `tier=web`.
    Pdb {
        name: u8,
        app: u8,
        tier: bool,
    },
    DeletePdb(u8),
    Node {
        name: u8,
        deleting: bool,
        /// Another node's provider id (two Node objects naming one instance).
        provider_of: Option<u8>,
        /// Its NodePool label.
        pool: Option<u8>,
    },
    DeleteNode(u8),
    Claim {
        name: u8,
        provider: Option<u8>,
        deleting: bool,
        node: Option<u8>,
    },
    DeleteClaim(u8),
    Relist(Vec<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..12, proptest::option::of(0u8..4), any::<bool>(), any::<bool>(), any::<bool>(), 0i64..2000, proptest::option::of(0u8..3))
            .prop_map(|(name, node, done, daemon, anti, cpu, app)| Step::Pod { name, node, done, daemon, anti, cpu, app }),
        1 => (0u8..12).prop_map(Step::DeletePod),
        1 => (0u8..3, 0u8..3, any::<bool>()).prop_map(|(name, app, tier)| Step::Pdb { name, app, tier }),
        1 => (0u8..3).prop_map(Step::DeletePdb),
        2 => (0u8..4, any::<bool>(), proptest::option::weighted(0.25, 0u8..4), proptest::option::of(0u8..2))
            .prop_map(|(name, deleting, provider_of, pool)| Step::Node { name, deleting, provider_of, pool }),
        1 => (0u8..4).prop_map(Step::DeleteNode),
        1 => (0u8..4, proptest::option::of(0u8..4), any::<bool>(), proptest::option::of(0u8..4))
            .prop_map(|(name, provider, deleting, node)| Step::Claim { name, provider, deleting, node }),
        1 => (0u8..4).prop_map(Step::DeleteClaim),
        1 => proptest::collection::vec(0u8..4, 0..4).prop_map(Step::Relist),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

    #[test]
    fn every_index_matches_one_rebuilt_from_scratch_after_any_changes(steps in proptest::collection::vec(step(), 1..60)) {
        let mut c = Cache::default();
        let mut last = c.counters();
        // Each claim with what the lifecycle reads of it: the claim, and its node.
        fn facts(c: &Cache) -> BTreeMap<String, (usize, Option<(String, bool)>)> {
            c.claims()
                .map(|k| {
                    let node = c.node_of_claim(k).map(|n| (n.name.clone(), n.deleting));
                    (k.name.clone(), (Arc::as_ptr(k) as usize, node))
                })
                .collect()
        }
        // Each node with pods: its version, and what its pods yield (pod `Arc`s and PDBs).
        type Yielded = BTreeMap<String, (u64, Vec<(usize, Vec<usize>)>)>;
        fn yielded(c: &Cache) -> Yielded {
            c.pods_by_node()
                .map(|(n, on)| {
                    let pods = on.pods_with_pdbs().map(|(p, b)| (Arc::as_ptr(p) as usize, b.to_vec())).collect();
                    (n.to_string(), (on.version(), pods))
                })
                .collect()
        }
        let mut pods_before = yielded(&c);
        for (rv, s) in steps.into_iter().enumerate() {
            let rv = rv as u64 + 1;
            let before = facts(&c);
            let cursor = c.claim_journal_end();
            match s {
                Step::Pod { name, node, done, daemon, anti, cpu, app } => {
                    let mut p = Pod::clone(&pod(&format!("p{name}"), node.map(|n| format!("n{n}")).as_deref()));
                    if done {
                        p.phase = PodPhase::Succeeded;
                    }
                    if daemon {
                        p.owner_kind = Some("DaemonSet".into());
                    }
                    if anti {
                        p.anti_affinity.push(PodAffinityTerm {
                            selector: None,
                            namespaces: Namespaces::All,
                            topology_key: "kubernetes.io/hostname".into(),
                        });
                    }
                    p.requests.cpu = cpu;
                    p.requests.pods = 1;
                    if let Some(a) = app {
                        p.labels.insert("app".into(), format!("a{a}"));
                        if name % 2 == 0 {
                            p.labels.insert("tier".into(), "web".into());
                        }
                    }
                    c.apply(applied(rv, Object::Pod(Arc::new(p))));
                }
                Step::DeletePod(n) => c.apply(Change::Deleted(Kind::Pod, format!("default/p{n}"))),
                Step::Pdb { name, app, tier } => {
                    let mut labels = std::collections::BTreeMap::from([("app".to_string(), format!("a{app}"))]);
                    if tier {
                        labels.insert("tier".into(), "web".into());
                    }
                    let pdb = capstan_model::pdb::Pdb {
                        namespace: "default".into(),
                        name: format!("b{name}"),
                        selector: Some(capstan_model::selector::LabelSelector::from_match_labels(&labels)),
                        min_available: None,
                        max_unavailable: None,
                        always_allow_unhealthy: false,
                    };
                    c.apply(applied(rv, Object::Pdb(Arc::new(pdb))));
                }
                Step::DeletePdb(n) => c.apply(Change::Deleted(Kind::Pdb, format!("default/b{n}"))),
                Step::Node { name, deleting, provider_of, pool } => {
                    let Object::Node(n) = node(&format!("n{name}")) else { unreachable!() };
                    let mut n = capstan_model::Node { deleting, ..capstan_model::Node::clone(&n) };
                    if let Some(k) = provider_of {
                        n.provider_id = Some(format!("fake://n{k}"));
                    }
                    if let Some(p) = pool {
                        n.labels.insert(capstan_model::labels::NODEPOOL.into(), format!("pool{p}"));
                    }
                    c.apply(applied(rv, Object::Node(Arc::new(n))));
                }
                Step::DeleteNode(n) => c.apply(Change::Deleted(Kind::Node, format!("n{n}"))),
                Step::Claim { name, provider, deleting, node } => {
                    let mut claim = NodeClaim { name: format!("c{name}"), ..Default::default() };
                    claim.deleted_at = deleting.then_some(1.0);
                    // Provider 0: node n{name}'s (one claim's alone, as provider ids are).
                    claim.status.provider_id = provider.map(|p| match p {
                        0 => format!("fake://n{name}"),
                        p => format!("fake://c{p}-{name}"),
                    });
                    claim.status.node_name = node.map(|n| format!("n{n}"));
                    c.apply(applied(rv, Object::NodeClaim(Arc::new(claim))));
                }
                Step::DeleteClaim(n) => c.apply(Change::Deleted(Kind::NodeClaim, format!("c{n}"))),
                Step::Relist(names) => c.relist(Kind::Node, Listing {
                    resource_version: rv.to_string(),
                    objects: names.iter().map(|n| (meta(rv), node(&format!("n{n}")))).collect(),
                }),
            }
            prop_assert_eq!(c.check_indexes(), Ok(()));
            let after = facts(&c);
            let touched: BTreeSet<&str> = c.claims_touched_since(cursor).expect("within reach").collect();
            for name in before.keys().chain(after.keys()) {
                if before.get(name) != after.get(name) {
                    prop_assert!(touched.contains(name.as_str()), "claim {} changed unnoted: {:?} -> {:?}", name, before.get(name), after.get(name));
                }
            }
            // A version unchanged by the step: the same pod `Arc`s, with the same PDBs.
            let pods_after = yielded(&c);
            for (n, (version, pods)) in &pods_after {
                if let Some((old_version, old_pods)) = pods_before.get(n) {
                    if old_version == version {
                        prop_assert_eq!(old_pods, pods, "node {}'s pods changed, its version did not", n);
                    }
                }
            }
            pods_before = pods_after;
            let now = c.counters();
            prop_assert!(now.generation >= last.generation && now.pod_generation >= last.pod_generation
                && now.freed >= last.freed && now.node_generation >= last.node_generation,
                "counters only grow");
            last = now;
        }
    }
}

#[test]
fn seek_finds_each_key_of_an_ascending_sequence_in_one_walk() {
    /// (entries, keys asked in order, what each finds)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [Option<usize>]);
    let cases: &[Case] = &[
        (&[], &["a"], &[None]),
        (
            &["a", "b", "c"],
            &["a", "b", "c"],
            &[Some(0), Some(1), Some(2)],
        ),
        (
            &["a", "c", "e"],
            &["b", "c", "d", "f"],
            &[None, Some(1), None, None],
        ),
        (&["b"], &["a", "b", "c"], &[None, Some(0), None]),
        (&["a", "b", "c", "d"], &["d"], &[Some(3)]),
        (
            &["node-10", "node-2"],
            &["node-1", "node-10", "node-2"],
            &[None, Some(0), Some(1)],
        ),
    ];
    for (entries, keys, want) in cases {
        let owned: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        let mut it = owned.iter().enumerate().map(|(i, k)| (k, i)).peekable();
        let got: Vec<Option<usize>> = keys.iter().map(|k| seek(&mut it, k)).collect();
        assert_eq!(&got, want, "entries {entries:?}, keys {keys:?}");
    }
}
