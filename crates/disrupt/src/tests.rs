//! Behaviour of the disruption engine: one method or budget rule at a time.

use super::*;
use capstan_model::nodepool::{Budget, NodePoolObject};
use capstan_model::pdb::IntOrPercent;
use capstan_model::selector::LabelSelector;
use capstan_model::{Catalog, Resources};
use serde_json::{Value, json};
use std::sync::Arc;

const NOW: f64 = 1_796_030_100.0; // 2026-11-30T09:15:00Z, a Monday

fn types() -> Vec<InstanceType> {
    let mut c = Catalog::builtin();
    c.instance_types.retain(|t| {
        [
            "m7i.large",
            "m7i.xlarge",
            "m7i.2xlarge",
            "m7i.4xlarge",
            "c7i.large",
            "c7i.xlarge",
        ]
        .contains(&t.name.as_str())
    });
    c.instance_types
}

fn pool(extra: Value) -> NodePool {
    let mut spec = json!({"template": {"spec": {}}, "disruption": {"consolidateAfter": "0s"}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            spec[k] = v;
        }
    }
    let obj: NodePoolObject = serde_json::from_value(json!({"apiVersion": "capstan.dev/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": spec})).unwrap();
    NodePool::compile(&obj).unwrap()
}

fn node(name: &str, it: &str, age_hours: f64, types: &[InstanceType]) -> NodeInfo {
    let t = types.iter().find(|t| t.name == it).unwrap();
    let mut labels = t.labels.clone();
    labels.insert(labels::ZONE.into(), "us-east-1a".into());
    labels.insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
    labels.insert(labels::NODEPOOL.into(), "default".into());
    labels.insert(labels::HOSTNAME.into(), name.into());
    let n = Node {
        name: name.into(),
        labels,
        allocatable: t.allocatable.clone(),
        capacity: t.capacity.clone(),
        ready: true,
        ..Default::default()
    };
    let mut info = NodeInfo::from_node(n, types);
    info.created = Some(NOW - age_hours * 3600.0);
    info
}

fn pod(name: &str, on: &str, cpu: i64, mem_mib: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        labels: [("app".to_string(), "web".to_string())]
            .into_iter()
            .collect(),
        node_name: Some(on.into()),
        phase: capstan_model::pod::PodPhase::Running,
        requests: Resources {
            cpu,
            memory: mem_mib << 20,
            pods: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn eval(
    nodes: &[NodeInfo],
    pods: &[Pod],
    pdbs: &[Pdb],
    pools: &[NodePool],
    types: &[InstanceType],
) -> Evaluation {
    eval_with(nodes, pods, pdbs, pools, types, true)
}

fn eval_with(
    nodes: &[NodeInfo],
    pods: &[Pod],
    pdbs: &[Pdb],
    pools: &[NodePool],
    types: &[InstanceType],
    spot_to_spot: bool,
) -> Evaluation {
    let pods: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
    let input = Input {
        nodes,
        pods: &pods,
        pdbs,
        nodepools: pools,
        instance_types: types,
        daemonsets: &[],
        now: NOW,
        spot_to_spot,
        ignore_preferences: false,
        known: None,
    };
    let worked_out = evaluate(input);
    // Every evaluation here is also made with each pod's node and PDBs given, as the
    // controller's cache gives them: the engine must decide the same.
    let (node, pdbs) = known(&input);
    let given = evaluate(Input {
        known: Some(Known {
            node: &node,
            pdbs: &pdbs,
            facts: None,
        }),
        ..input
    });
    assert_eq!(worked_out, given, "the same with what is known given");
    // And with each pod's facts kept, as the controller keeps them.
    let facts: Vec<PodFacts> = input.pods.iter().map(|p| PodFacts::of(p)).collect();
    let kept = evaluate(Input {
        known: Some(Known {
            node: &node,
            pdbs: &pdbs,
            facts: Some(&facts),
        }),
        ..input
    });
    assert_eq!(worked_out, kept, "the same with the pods' facts given");
    worked_out
}

/// Each pod's node index and selecting PDBs, worked out from names and labels.
fn known(input: &Input<'_>) -> (Vec<Option<usize>>, Vec<Arc<[usize]>>) {
    let node = input
        .pods
        .iter()
        .map(|p| {
            let n = p.node_name.as_deref()?;
            input.nodes.iter().position(|x| x.node.name == n)
        })
        .collect();
    let pdbs = input
        .pods
        .iter()
        .map(|p| {
            (0..input.pdbs.len())
                .filter(|&i| input.pdbs[i].selects(p))
                .collect()
        })
        .collect();
    (node, pdbs)
}

#[test]
fn what_the_caller_knows_of_each_pod_decides_as_what_the_engine_works_out() {
    // A PDB on half a workload that allows no eviction: given wrongly (each pod selected by
    // nothing), the node it blocks would be consolidated; given rightly, it is not.
    let t = types();
    let np = pool(json!({}));
    let nodes = [
        node("a", "m7i.xlarge", 1.0, &t),
        node("b", "m7i.xlarge", 1.0, &t),
    ];
    let mut guarded = pod("p1", "a", 200, 256);
    guarded.labels.insert("tier".into(), "db".into());
    let pods = [Arc::new(guarded), Arc::new(pod("p2", "b", 200, 256))];
    let pdb = Pdb {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("tier".to_string(), "db".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: Some(IntOrPercent::Int(1)),
        max_unavailable: None,
        always_allow_unhealthy: false,
    };
    let input = Input {
        nodes: &nodes,
        pods: &pods,
        pdbs: std::slice::from_ref(&pdb),
        nodepools: std::slice::from_ref(&np),
        instance_types: &t,
        daemonsets: &[],
        now: NOW,
        spot_to_spot: false,
        ignore_preferences: false,
        known: None,
    };
    let (node, pdbs) = known(&input);
    assert_eq!(pdbs[0].as_ref(), &[0][..]);
    let right = evaluate(Input {
        known: Some(Known {
            node: &node,
            pdbs: &pdbs,
            facts: None,
        }),
        ..input
    });
    assert_eq!(right, evaluate(input));
    let nothing: Vec<Arc<[usize]>> = vec![Arc::from(Vec::new()); pods.len()];
    let wrong = evaluate(Input {
        known: Some(Known {
            node: &node,
            pdbs: &nothing,
            facts: None,
        }),
        ..input
    });
    assert_ne!(right, wrong, "what is given is what the engine uses");
}

/// Gives every type a spot offering in us-east-1a at 30% of its first offering's price.
fn add_spot_offerings(types: &mut [InstanceType]) {
    for it in types.iter_mut() {
        let od = it.offerings[0].price;
        it.offerings.push(capstan_model::Offering {
            zone: "us-east-1a".into(),
            zone_id: None,
            capacity_type: "spot".into(),
            price: od * 0.3,
            available: true,
        });
    }
}

fn spot_pool() -> NodePool {
    pool(
        json!({"template": {"spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}),
    )
}

/// A spot node of type `it`, priced at that type's last (spot) offering.
fn spot_node(name: &str, it: &str, types: &[InstanceType]) -> NodeInfo {
    let mut n = node(name, it, 5.0, types);
    n.capacity_type = "spot".into();
    std::sync::Arc::make_mut(&mut n.node)
        .labels
        .insert(labels::CAPACITY_TYPE.into(), "spot".into());
    n.price = types
        .iter()
        .find(|x| x.name == it)
        .unwrap()
        .offerings
        .last()
        .unwrap()
        .price;
    n
}

fn budget(
    nodes: &str,
    schedule: Option<&str>,
    duration: Option<&str>,
    reasons: Option<&[&str]>,
) -> Budget {
    Budget {
        nodes: nodes.into(),
        schedule: schedule.map(str::to_string),
        duration: duration.map(str::to_string),
        reasons: reasons.map(|r| r.iter().map(|s| s.to_string()).collect()),
    }
}

#[test]
fn budgets_allow_counts_and_percentages_rounded_up_and_the_most_restrictive_wins() {
    // (budgets, reason, total nodes, allowed)
    let cases: Vec<(Vec<Budget>, &str, i64, i64)> = vec![
        (vec![budget("10%", None, None, None)], "Empty", 15, 2),
        (vec![budget("10%", None, None, None)], "Empty", 5, 1),
        (vec![budget("10%", None, None, None)], "Empty", 0, 0),
        (vec![budget("3", None, None, None)], "Drifted", 100, 3),
        (
            vec![
                budget("50%", None, None, None),
                budget("2", None, None, None),
            ],
            "Underutilized",
            10,
            2,
        ),
        (
            vec![budget("0", None, None, Some(&["Drifted"]))],
            "Empty",
            10,
            i64::MAX,
        ),
        (
            vec![budget("0", None, None, Some(&["Drifted"]))],
            "Drifted",
            10,
            0,
        ),
        // Weekdays 09:00 for 8 h: active at Monday 09:15.
        (
            vec![budget("0", Some("0 9 * * mon-fri"), Some("8h"), None)],
            "Empty",
            10,
            0,
        ),
        // Weekends only: inactive now.
        (
            vec![budget("0", Some("0 0 * * sat"), Some("48h"), None)],
            "Empty",
            10,
            i64::MAX,
        ),
    ];
    for (b, reason, total, want) in cases {
        let budgets = capstan_model::disruption::Budgets::compile(Some(&b));
        let reason = Reason::parse(reason).unwrap();
        assert_eq!(
            budgets.allows(reason, total, NOW),
            want,
            "{b:?} {reason} {total}"
        );
    }
}

#[test]
fn an_empty_node_is_deleted_after_consolidate_after() {
    let t = types();
    let nodes = [
        node("a", "m7i.large", 2.0, &t),
        node("b", "m7i.large", 2.0, &t),
    ];
    let pods = [pod("p", "a", 500, 512)];
    let r = eval(&nodes, &pods, &[], &[pool(json!({}))], &t);
    let c = r
        .commands
        .iter()
        .find(|c| c.reason == Reason::Empty)
        .expect("an emptiness command");
    assert_eq!(c.candidates, vec!["b".to_string()]);
    assert!(c.moves.is_empty() && c.replacements.is_empty());
    assert!((c.savings - nodes[1].price).abs() < 1e-9);
    let later = pool(json!({"disruption": {"consolidateAfter": "3h"}}));
    let r = eval(&nodes, &pods, &[], &[later], &t);
    assert!(
        r.commands.is_empty(),
        "two-hour-old nodes wait for a three-hour consolidateAfter: {r:#?}"
    );
}

#[test]
fn consolidate_after_counts_from_the_last_pod_event_not_the_nodes_age() {
    let t = types();
    let pools = [pool(json!({"disruption": {"consolidateAfter": "10m"}}))];
    // (last pod event, minutes ago; the empty node is removed)
    let cases = [
        (None, true),
        (Some(30.0), true),
        (Some(10.0), true),
        (Some(5.0), false),
        (Some(0.0), false),
    ];
    for (ago, removed) in cases {
        // A day old, so its age alone would allow it.
        let mut n = node("a", "m7i.large", 24.0, &t);
        n.last_pod_event = ago.map(|m: f64| NOW - m * 60.0);
        let r = eval(&[n], &[], &[], &pools, &t);
        let empty = r.commands.iter().any(|c| c.reason == Reason::Empty);
        assert_eq!(empty, removed, "last pod event {ago:?} minutes ago: {r:#?}");
    }
}

#[test]
fn empty_nodes_go_in_one_command_as_far_as_the_budget_allows() {
    let t = types();
    let nodes: Vec<NodeInfo> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| node(n, "m7i.large", 2.0, &t))
        .collect();
    let pods = [pod("p", "a", 500, 512)];
    let two = pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "2"}]}}));
    let r = eval(&nodes, &pods, &[], &[two], &t);
    let empty: Vec<&Command> = r
        .commands
        .iter()
        .filter(|c| c.reason == Reason::Empty)
        .collect();
    assert_eq!(empty.len(), 1, "{r:#?}");
    assert_eq!(empty[0].candidates, vec!["b".to_string(), "c".to_string()]);
    assert!((empty[0].savings - 2.0 * nodes[1].price).abs() < 1e-9);
    let d = r.blocked.iter().find(|b| b.node == "d").expect("d blocked");
    assert!(d.reason.contains("allows 0 Empty"), "{}", d.reason);
}

#[test]
fn every_method_spends_one_allowance_per_nodepool() {
    // `a` and `b` are empty, `c` and `d` hold a small pod each (either could move to the
    // other). A budget of two: emptiness takes both empty nodes, and consolidation, which on
    // its own would delete `c` or `d`, finds the pool's allowance spent (Karpenter counts a
    // pool's going nodes against every reason's budget).
    let t = types();
    let nodes: Vec<NodeInfo> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| node(n, "m7i.large", 2.0, &t))
        .collect();
    let pods = [pod("p1", "c", 200, 256), pod("p2", "d", 200, 256)];
    let two = pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "2"}]}}));
    let r = eval(&nodes, &pods, &[], std::slice::from_ref(&two), &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].reason, Reason::Empty);
    assert_eq!(
        r.commands[0].candidates,
        vec!["a".to_string(), "b".to_string()]
    );
    // With one empty node, the other unit of the allowance goes to consolidation.
    let r = eval(&nodes[1..], &pods, &[], &[two], &t);
    let reasons: Vec<Reason> = r.commands.iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        vec![Reason::Empty, Reason::Underutilized],
        "{r:#?}"
    );
}

#[test]
fn several_nodes_are_not_replaced_by_a_node_no_cheaper_than_one_of_them() {
    // Two m7i.large: `a` with two pods, `b` with one; all three fit on one m7i.large (and, by
    // memory, on nothing cheaper). Replacing
    // both with a new m7i.large saves one node's price, as deleting `b` alone does with fewer
    // pods moved and no launch: Karpenter's filterOutSameInstanceType rejects the former.
    let t = types();
    let nodes = [
        node("a", "m7i.large", 2.0, &t),
        node("b", "m7i.large", 2.0, &t),
    ];
    let pods = [
        pod("p1", "a", 300, 1536),
        pod("p2", "a", 300, 1536),
        pod("p3", "b", 300, 1536),
    ];
    let all =
        pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}}));
    let r = eval(&nodes, &pods, &[], &[all], &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    let c = &r.commands[0];
    assert_eq!(c.candidates, vec!["b".to_string()]);
    assert!(c.replacements.is_empty(), "{c:#?}");
}

#[test]
fn consolidation_moves_pods_onto_a_node_whatever_its_last_pod_event() {
    // Two m7i.large, `a` with two pods, `b` with one; consolidateAfter 60 s; `b` settled.
    // Karpenter moves no pods onto a node still inside its consolidateAfter; capstan does
    // (a deliberate difference: on the built-in day that rule costs 3.9% more and adds 9 s to
    // the pending median), so `b` goes however recently `a` saw a pod event.
    let t = types();
    for since in [30.0, 59.0, 61.0, 3600.0] {
        let mut nodes = [
            node("a", "m7i.large", 2.0, &t),
            node("b", "m7i.large", 2.0, &t),
        ];
        nodes[0].last_pod_event = Some(NOW - since);
        nodes[1].last_pod_event = Some(NOW - 3600.0);
        let pods = [
            pod("p1", "a", 300, 1536),
            pod("p2", "a", 300, 1536),
            pod("p3", "b", 300, 1536),
        ];
        let np = pool(
            json!({"disruption": {"consolidateAfter": "60s", "budgets": [{"nodes": "100%"}]}}),
        );
        let r = eval(&nodes, &pods, &[], &[np], &t);
        let deleted = r
            .commands
            .iter()
            .any(|c| c.candidates == ["b"] && c.replacements.is_empty());
        assert!(deleted, "a's last pod event {since} s ago: {r:#?}");
    }
}

#[test]
fn a_pdb_that_always_allows_unhealthy_pods_does_not_hold_back_an_unready_one() {
    // `a` holds one pod a PDB at maxUnavailable 0 selects; its pod fits on `b`. Whether `a`
    // may go: (pod Ready, the PDB's unhealthyPodEvictionPolicy is AlwaysAllow, a deleted).
    let cases = [
        (Some(true), false, false),
        (Some(true), true, false),
        (Some(false), false, false),
        (Some(false), true, true),
        (None, true, false),
    ];
    let t = types();
    for (ready, always, want) in cases {
        let nodes = [
            node("a", "m7i.xlarge", 2.0, &t),
            node("b", "m7i.xlarge", 2.0, &t),
        ];
        let mut p = pod("p1", "a", 500, 512);
        p.ready = ready;
        let pods = [p, pod("p2", "b", 1500, 2048)];
        let pdb = Pdb {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(LabelSelector::from_match_labels(
                &[("app".to_string(), "web".to_string())]
                    .into_iter()
                    .collect(),
            )),
            min_available: None,
            max_unavailable: Some(IntOrPercent::Int(0)),
            always_allow_unhealthy: always,
        };
        let all =
            pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}}));
        let r = eval(&nodes, &pods, &[pdb], &[all], &t);
        let deleted = r.commands.iter().any(|c| c.candidates == ["a"]);
        assert_eq!(
            deleted, want,
            "ready {ready:?}, AlwaysAllow {always}: {r:#?}"
        );
    }
}

#[test]
fn budgets_count_as_karpenter_does_initialized_nodes_with_not_ready_and_going_ones_using_them_up() {
    // Four nodes, `a` holding a pod, `b`, `c`, `d` empty; `c` in the state of the case. How
    // many empty nodes go in the one emptiness command (Karpenter's BuildDisruptionBudgetMapping:
    // initialized nodes make the total, NotReady or going ones use the budget up, a cordon does
    // not; percentages round up).
    type Case = (&'static str, &'static str, fn(&mut NodeInfo), usize);
    let cases: [Case; 7] = [
        ("healthy", "1", |_| {}, 1),
        (
            "NotReady",
            "1",
            |n| Arc::make_mut(&mut n.node).ready = false,
            0,
        ),
        (
            "deleting",
            "1",
            |n| Arc::make_mut(&mut n.node).deleting = true,
            0,
        ),
        (
            "carrying the disrupted taint",
            "1",
            |n| {
                Arc::make_mut(&mut n.node)
                    .taints
                    .push(capstan_model::Taint {
                        key: labels::DISRUPTED_TAINT.into(),
                        value: String::new(),
                        effect: capstan_model::taints::Effect::NoSchedule,
                    })
            },
            0,
        ),
        // A person's cordon does not use the budget; the cordoned node is no candidate.
        (
            "cordoned",
            "1",
            |n| Arc::make_mut(&mut n.node).unschedulable = true,
            1,
        ),
        // Not initialized (and so NotReady): neither in the total nor using the budget up.
        (
            "not initialized",
            "1",
            |n| {
                n.initialized = false;
                Arc::make_mut(&mut n.node).ready = false;
            },
            1,
        ),
        // 30% of the three initialized nodes rounds up to 1 (of all four it would be 2).
        (
            "not initialized, percentage",
            "30%",
            |n| {
                n.initialized = false;
                Arc::make_mut(&mut n.node).ready = false;
            },
            1,
        ),
    ];
    let t = types();
    for (state, budget, set, want) in cases {
        let mut nodes: Vec<NodeInfo> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, "m7i.large", 2.0, &t))
            .collect();
        set(&mut nodes[2]);
        let pods = [pod("p", "a", 500, 512)];
        let np =
            pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": budget}]}}));
        let r = eval(&nodes, &pods, &[], &[np], &t);
        let gone: usize = r
            .commands
            .iter()
            .filter(|c| c.reason == Reason::Empty)
            .map(|c| c.candidates.len())
            .sum();
        assert_eq!(gone, want, "c {state}, budget {budget}: {r:#?}");
        assert!(
            r.commands
                .iter()
                .all(|c| !c.candidates.contains(&"c".to_string()) || state == "healthy"),
            "c {state} is no candidate"
        );
    }
}

#[test]
fn eviction_cost_and_lifetime_remaining_are_karpenters() {
    // (pod-deletion-cost, priority, cost)
    let cases: [(Option<&str>, i32, f64); 6] = [
        (None, 0, 1.0),
        (Some("134217728"), 0, 2.0), // 2^27 adds one pod's worth
        (None, 33_554_432, 2.0),     // 2^25 priority adds one
        (None, -2_000_000_000, -10.0),
        (Some("not a number"), 0, 1.0),
        (Some("2147483647"), 1_000_000_000, 10.0),
    ];
    for (deletion_cost, priority, want) in cases {
        let mut p = pod("p", "a", 100, 128);
        if let Some(c) = deletion_cost {
            p.annotations
                .insert(labels::POD_DELETION_COST.into(), c.into());
        }
        p.priority = priority;
        assert!(
            (eviction_cost(&p) - want).abs() < 1e-9,
            "{deletion_cost:?} {priority}: {}",
            eviction_cost(&p)
        );
    }
    assert_eq!(lifetime_remaining(Some(3600.0), None), 1.0);
    assert_eq!(lifetime_remaining(None, Some(7200)), 1.0);
    assert!((lifetime_remaining(Some(1800.0), Some(7200)) - 0.75).abs() < 1e-12);
    assert_eq!(lifetime_remaining(Some(9000.0), Some(7200)), 0.0);
}

#[test]
fn consolidation_takes_the_candidate_karpenter_finds_cheapest_to_disrupt() {
    // Three nodes, one 1-CPU pod each; any one can go (a budget of one node). Which one is
    // first by Karpenter's disruption cost: the pods' eviction costs times the lifetime left
    // (Karpenter's order until August 2026, which it replaced with a savings ratio; capstan
    // keeps it — see ARCHITECTURE.md).
    type Case = (&'static str, fn(&mut [NodeInfo], &mut [Pod]), &'static str);
    let cases: [Case; 4] = [
        ("all alike: the first", |_, _| {}, "a"),
        (
            "a's pod costs more to delete",
            |_, p| {
                p[0].annotations
                    .insert(labels::POD_DELETION_COST.into(), "268435456".into());
            },
            "b",
        ),
        (
            "a's pod has a higher priority",
            |_, p| p[0].priority = 100_000_000,
            "b",
        ),
        (
            "c is near its expiry",
            |n, _| n[2].created = Some(NOW - 700.0 * 3600.0),
            "c",
        ),
    ];
    let t = types();
    for (what, set, want) in cases {
        let mut nodes: Vec<NodeInfo> = ["a", "b", "c"]
            .iter()
            .map(|n| node(n, "m7i.xlarge", 2.0, &t))
            .collect();
        let mut pods = vec![
            pod("pa", "a", 1000, 1024),
            pod("pb", "b", 1000, 1024),
            pod("pc", "c", 1000, 1024),
        ];
        set(&mut nodes, &mut pods);
        let np = pool(json!({
            "template": {"spec": {"expireAfter": "720h"}},
            "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}}));
        let r = eval(&nodes, &pods, &[], &[np], &t);
        let under: Vec<&Command> = r
            .commands
            .iter()
            .filter(|c| c.reason == Reason::Underutilized)
            .collect();
        assert_eq!(under.len(), 1, "{what}: {r:#?}");
        assert_eq!(under[0].candidates, [want.to_string()], "{what}");
    }
}

#[test]
fn an_underutilized_node_is_deleted_when_its_pods_fit_elsewhere() {
    let t = types();
    let nodes = [
        node("a", "m7i.xlarge", 2.0, &t),
        node("b", "m7i.xlarge", 2.0, &t),
    ];
    let pods = [pod("p1", "a", 1000, 1024), pod("p2", "b", 1000, 1024)];
    // The default budget (10% of two nodes, rounded up) allows one: b's pod moves to a.
    let r = eval(&nodes, &pods, &[], &[pool(json!({}))], &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].candidates.len(), 1);
    assert!(r.commands[0].replacements.is_empty());
    // With room in the budget both go: one cheaper node holds both pods.
    let all =
        pool(json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}}));
    let r = eval(&nodes, &pods, &[], &[all], &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    let c = &r.commands[0];
    assert_eq!(c.reason, Reason::Underutilized);
    assert_eq!(
        c.candidates.len(),
        2,
        "both go: one cheaper node holds both pods"
    );
    assert_eq!(c.replacements.len(), 1);
    assert!(c.savings > 0.0);
    assert!(r.after < r.before);
    assert_eq!(c.moves.len(), 2);
}

#[test]
fn an_oversized_node_is_replaced_by_a_cheaper_one() {
    let t = types();
    let nodes = [node("big", "m7i.4xlarge", 5.0, &t)];
    let pods = [pod("p1", "big", 500, 1024)];
    let r = eval(&nodes, &pods, &[], &[pool(json!({}))], &t);
    let c = &r.commands[0];
    assert_eq!(c.replacements.len(), 1);
    assert!(c.replacements[0].price < nodes[0].price);
    assert_eq!(
        c.moves,
        vec![Move {
            pod: "default/p1".into(),
            to: Target::Replacement(0)
        }]
    );
}

#[test]
fn blocked_nodes_are_reported_once_each_in_name_order_however_the_nodes_come() {
    let t = types();
    let names = ["a", "b", "c", "d"];
    let pods: Vec<Pod> = names
        .iter()
        .map(|n| {
            let mut p = pod(&format!("p-{n}"), n, 500, 1024);
            p.annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
            p
        })
        .collect();
    let sorted: Vec<NodeInfo> = names
        .iter()
        .map(|n| node(n, "m7i.4xlarge", 5.0, &t))
        .collect();
    let mut reversed = sorted.clone();
    reversed.reverse();
    let mut shuffled = sorted.clone();
    shuffled.swap(0, 2);
    let want: Vec<(String, String)> = names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                format!("pod default/p-{n} has do-not-disrupt"),
            )
        })
        .collect();
    for (what, nodes) in [
        ("in name order", &sorted),
        ("reversed", &reversed),
        ("shuffled", &shuffled),
    ] {
        let r = eval(nodes, &pods, &[], &[pool(json!({}))], &t);
        assert!(r.commands.is_empty(), "{what}: {r:?}");
        let got: Vec<(String, String)> = r
            .blocked
            .iter()
            .map(|b| (b.node.clone(), b.reason.clone()))
            .collect();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn do_not_disrupt_pods_and_pdbs_block_voluntary_disruption() {
    let t = types();
    let nodes = [node("big", "m7i.4xlarge", 5.0, &t)];
    let mut p = pod("p1", "big", 500, 1024);
    p.annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    let r = eval(&nodes, &[p.clone()], &[], &[pool(json!({}))], &t);
    assert!(r.commands.is_empty());
    assert_eq!(r.blocked[0].reason, "pod default/p1 has do-not-disrupt");
    // A duration protects from the pod's start until it has passed (Karpenter's grace period).
    p.annotations.insert(DO_NOT_DISRUPT.into(), "30m".into());
    p.started = Some(NOW - 600.0);
    let r = eval(&nodes, &[p.clone()], &[], &[pool(json!({}))], &t);
    assert!(r.commands.is_empty());
    assert_eq!(
        r.blocked[0].reason,
        "pod default/p1 has do-not-disrupt for 30m, 1200 s more"
    );
    p.started = Some(NOW - 2400.0);
    let r = eval(&nodes, &[p.clone()], &[], &[pool(json!({}))], &t);
    assert_eq!(r.commands.len(), 1, "the grace period is over: {r:?}");
    // "false" holds nothing; nor does a pod already terminating, whatever it says.
    p.annotations.insert(DO_NOT_DISRUPT.into(), "false".into());
    let r = eval(&nodes, &[p.clone()], &[], &[pool(json!({}))], &t);
    assert_eq!(r.commands.len(), 1, "do-not-disrupt false: {r:?}");
    let mut going = p.clone();
    going
        .annotations
        .insert(DO_NOT_DISRUPT.into(), "true".into());
    going.deleting = true;
    let r = eval(&nodes, &[going], &[], &[pool(json!({}))], &t);
    assert!(
        r.blocked
            .iter()
            .all(|b| !b.reason.contains("do-not-disrupt")),
        "a terminating pod: {r:?}"
    );
    p.annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    let pdb = Pdb {
        namespace: "default".into(),
        name: "web-pdb".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: Some(IntOrPercent::Int(1)),
        max_unavailable: None,
        always_allow_unhealthy: false,
    };
    let r = eval(
        &nodes,
        &[pod("p1", "big", 500, 1024)],
        &[pdb],
        &[pool(json!({}))],
        &t,
    );
    assert!(r.commands.is_empty());
    assert_eq!(
        r.blocked[0].reason,
        "pdb default/web-pdb allows 0 disruptions"
    );
}

#[test]
fn expiry_is_forceful() {
    let t = types();
    let nodes = [node("old", "m7i.large", 800.0, &t)];
    let mut p = pod("p1", "old", 500, 1024);
    p.annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    let zero =
        pool(json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}}));
    let r = eval(&nodes, &[p], &[], &[zero], &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].reason, Reason::Expired);
    assert_eq!(
        r.commands[0].replacements.len(),
        1,
        "its pod needs a new node"
    );
}

#[test]
fn with_a_budget_of_one_drift_takes_empty_nodes_first_then_the_earliest_drifted() {
    // Three drifted nodes: `early` (drifted two hours ago) and `late` (an hour ago) run a
    // pod; `bare` runs none. A budget of one node: Karpenter's order, empty first, then by
    // the time each drifted.
    let t = types();
    let mut nodes = [
        node("late", "c7i.large", 5.0, &t),
        node("early", "c7i.large", 1.0, &t),
        node("bare", "c7i.large", 0.5, &t),
    ];
    for (n, ago) in nodes.iter_mut().zip([1.0, 2.0, 0.5]) {
        n.provider_drift = Some("AMI".into());
        n.drifted_at = Some(NOW - ago * 3600.0);
    }
    let np =
        pool(json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}}));
    let pods = [pod("p1", "late", 500, 512), pod("p2", "early", 500, 512)];
    // (nodes in play, the one drift takes)
    for (keep, want) in [(3, "bare"), (2, "early")] {
        let r = eval(&nodes[..keep], &pods, &[], std::slice::from_ref(&np), &t);
        let taken: Vec<&str> = r
            .commands
            .iter()
            .flat_map(|c| c.candidates.iter().map(String::as_str))
            .collect();
        assert_eq!(taken, [want], "{r:#?}");
    }
}

#[test]
fn a_node_that_no_longer_meets_its_nodepool_drifts() {
    let t = types();
    let nodes = [node("c", "c7i.large", 1.0, &t)];
    let m_only = pool(
        json!({"disruption": {"consolidateAfter": "Never"}, "template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}]}}}),
    );
    let r = eval(&nodes, &[pod("p1", "c", 500, 1024)], &[], &[m_only], &t);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    let c = &r.commands[0];
    assert_eq!(c.reason, Reason::Drifted);
    assert!(t[c.replacements[0].instance_type].name.starts_with("m7i."));
}

#[test]
fn drift_in_a_nodepool_with_a_termination_grace_period_goes_past_pdbs_and_do_not_disrupt_pods() {
    // Karpenter's eventual disruption: with a terminationGracePeriod, what blocks a pod's
    // eviction holds the drain (up to that period), not the drift; without one, it blocks.
    let t = types();
    let nodes = [node("c", "c7i.large", 1.0, &t)];
    let m_only = |grace: Option<&str>| {
        let mut spec = json!({"requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}]});
        if let Some(g) = grace {
            spec["terminationGracePeriod"] = json!(g);
        }
        pool(json!({"disruption": {"consolidateAfter": "Never"}, "template": {"spec": spec}}))
    };
    let mut kept = pod("p1", "c", 500, 1024);
    kept.annotations
        .insert(DO_NOT_DISRUPT.into(), "true".into());
    let pdb = Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: None,
        max_unavailable: Some(IntOrPercent::Int(0)),
        always_allow_unhealthy: false,
    };
    let plain = pod("p1", "c", 500, 1024);
    // (case, pod, PDBs, the pool's terminationGracePeriod, drifts)
    type Case<'a> = (&'a str, &'a Pod, &'a [Pdb], Option<&'a str>, bool);
    let cases: [Case; 4] = [
        ("do-not-disrupt, no grace period", &kept, &[], None, false),
        (
            "do-not-disrupt, a grace period",
            &kept,
            &[],
            Some("1h"),
            true,
        ),
        (
            "a PDB at zero, no grace period",
            &plain,
            std::slice::from_ref(&pdb),
            None,
            false,
        ),
        (
            "a PDB at zero, a grace period",
            &plain,
            std::slice::from_ref(&pdb),
            Some("1h"),
            true,
        ),
    ];
    for (case, p, pdbs, grace, drifts) in cases {
        let r = eval(&nodes, std::slice::from_ref(p), pdbs, &[m_only(grace)], &t);
        let drifted = r.commands.iter().any(|c| c.reason == Reason::Drifted);
        assert_eq!(drifted, drifts, "{case}: {r:#?}");
        if !drifts {
            assert!(r.blocked.iter().any(|b| b.node == "c"), "{case}: {r:#?}");
        }
    }
}

#[test]
fn requirement_drift_hits_only_nodes_that_no_longer_satisfy_the_requirements() {
    let t = types();
    let mut labelled = node("n", "m7i.large", 1.0, &t);
    std::sync::Arc::make_mut(&mut labelled.node)
        .labels
        .insert("team".into(), "ml".into());
    let bare = node("n", "m7i.large", 1.0, &t);
    // (case, requirement, node, drifts)
    let cases = [
        (
            "a value the pool still allows",
            json!({"key": "team", "operator": "In", "values": ["ml", "web"]}),
            &labelled,
            false,
        ),
        (
            "a value the pool no longer allows",
            json!({"key": "team", "operator": "In", "values": ["web"]}),
            &labelled,
            true,
        ),
        (
            "a custom label the pool now fixes, missing",
            json!({"key": "team", "operator": "In", "values": ["ml"]}),
            &bare,
            true,
        ),
        (
            "Exists on a custom label no pod narrowed",
            json!({"key": "team", "operator": "Exists"}),
            &bare,
            false,
        ),
        (
            "NotIn on a label the node lacks",
            json!({"key": "team", "operator": "NotIn", "values": ["ml"]}),
            &bare,
            false,
        ),
        (
            "DoesNotExist on a label the node has",
            json!({"key": "team", "operator": "DoesNotExist"}),
            &labelled,
            true,
        ),
        (
            "a well-known key the type does not define",
            json!({"key": "karpenter.k8s.aws/instance-hypervisor", "operator": "In", "values": ["nitro"]}),
            &bare,
            false,
        ),
        (
            "a family the pool still allows",
            json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i", "c7i"]}),
            &bare,
            false,
        ),
    ];
    for (case, req, n, drifts) in cases {
        let p = pool(
            json!({"disruption": {"consolidateAfter": "Never"}, "template": {"spec": {"requirements": [req]}}}),
        );
        let r = eval(
            std::slice::from_ref(n),
            &[pod("p1", "n", 500, 1024)],
            &[],
            &[p],
            &t,
        );
        let drifted = r.commands.iter().any(|c| c.reason == Reason::Drifted);
        assert_eq!(drifted, drifts, "{case}: {r:#?}");
    }
}

#[test]
fn a_changed_template_hash_drifts_the_node() {
    let t = types();
    let p = pool(json!({"disruption": {"consolidateAfter": "Never"}}));
    let mut n = node("a", "m7i.large", 1.0, &t);
    let annotations = &mut std::sync::Arc::make_mut(&mut n.node).annotations;
    annotations.insert(NODEPOOL_HASH.into(), template_hash(&p));
    annotations.insert(
        NODEPOOL_HASH_VERSION.into(),
        capstan_model::nodepool::TEMPLATE_HASH_VERSION.into(),
    );
    let r = eval(
        std::slice::from_ref(&n),
        &[pod("p1", "a", 500, 1024)],
        &[],
        std::slice::from_ref(&p),
        &t,
    );
    assert!(r.commands.is_empty(), "same hash: no drift");
    let mut other_version = n.clone();
    let annotations = &mut std::sync::Arc::make_mut(&mut n.node).annotations;
    annotations.insert(NODEPOOL_HASH.into(), "0000".into());
    let r = eval(
        std::slice::from_ref(&n),
        &[pod("p1", "a", 500, 1024)],
        &[],
        std::slice::from_ref(&p),
        &t,
    );
    assert_eq!(r.commands[0].reason, Reason::Drifted);
    let annotations = &mut std::sync::Arc::make_mut(&mut other_version.node).annotations;
    annotations.insert(NODEPOOL_HASH.into(), "0000".into());
    annotations.insert(NODEPOOL_HASH_VERSION.into(), "v0".into());
    let r = eval(
        &[other_version],
        &[pod("p1", "a", 500, 1024)],
        &[],
        &[p],
        &t,
    );
    assert!(
        r.commands.is_empty(),
        "a hash of another version does not drift"
    );
}

#[test]
fn spot_replacements_need_enough_cheaper_spot_types() {
    let mut t = types();
    add_spot_offerings(&mut t);
    let big = spot_node("big", "m7i.4xlarge", &t);
    let r = eval(
        &[big],
        &[pod("p1", "big", 500, 1024)],
        &[],
        &[spot_pool()],
        &t,
    );
    assert!(
        r.commands.is_empty(),
        "only {} types: spot to spot replacement is refused: {r:#?}",
        t.len()
    );
}

#[test]
fn a_pdb_that_allows_one_disruption_lets_a_node_with_two_of_its_pods_go_in_two_waves() {
    // Karpenter's rule: only a PDB that allows no disruption blocks; the drain then evicts
    // within it, wave by wave, and the eviction API refuses the rest until pods are back.
    let t = types();
    let nodes = [
        node("a", "m7i.xlarge", 5.0, &t),
        node("b", "m7i.2xlarge", 5.0, &t),
    ];
    // The db pod fills b and fits nowhere else: only a can go.
    let mut other = pod("db", "b", 6500, 512);
    other.labels.insert("app".into(), "db".into());
    let pods: Vec<Pod> = vec![pod("w0", "a", 500, 512), pod("w1", "a", 500, 512), other];
    let pdb = Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: None,
        max_unavailable: Some(IntOrPercent::Int(1)),
        always_allow_unhealthy: false,
    };
    let r = eval(&nodes, &pods, &[pdb], &[pool(json!({}))], &t);
    let c = &r.commands[0];
    assert_eq!(c.reason, Reason::Underutilized);
    assert_eq!(c.candidates, ["a"], "{r:?}");
    assert_eq!(c.drain.len(), 2, "one pod per wave: {:?}", c.drain);
}

#[test]
fn drains_go_in_waves_within_pdb_allowances_lowest_priority_first() {
    let t = types();
    let nodes = [node("big", "m7i.4xlarge", 800.0, &t)];
    let mut pods: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("w{i}"), "big", 500, 512))
        .collect();
    pods[3].priority = -10;
    let pdb = Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: None,
        max_unavailable: Some(IntOrPercent::Int(2)),
        always_allow_unhealthy: false,
    };
    let r = eval(
        &nodes,
        &pods,
        &[pdb],
        &[pool(json!({"disruption": {"consolidateAfter": "Never"}}))],
        &t,
    );
    let c = &r.commands[0];
    assert_eq!(c.reason, Reason::Expired);
    assert_eq!(
        c.drain,
        vec![
            vec!["default/w3".to_string(), "default/w0".to_string()],
            vec!["default/w1".to_string(), "default/w2".to_string()]
        ]
    );
}

#[test]
fn an_interruption_replaces_the_node_whatever_blocks_voluntary_moves() {
    let t = types();
    let nodes = [node("spot-1", "m7i.xlarge", 1.0, &t)];
    let mut p = pod("p1", "spot-1", 2000, 2048);
    p.annotations.insert(DO_NOT_DISRUPT.into(), "true".into());
    let c = interruption(
        Input {
            nodes: &nodes,
            pods: &[Arc::new(p)],
            pdbs: &[],
            nodepools: &[pool(json!({}))],
            instance_types: &t,
            daemonsets: &[],
            now: NOW,
            spot_to_spot: true,
            ignore_preferences: false,
            known: None,
        },
        "spot-1",
        Reason::SpotInterruption,
        120.0,
        &[],
    )
    .unwrap();
    assert_eq!(c.reason, Reason::SpotInterruption);
    assert_eq!(c.replacements.len(), 1);
    assert!(c.drain_seconds <= 120.0);
}

#[test]
fn an_interruption_replacement_starts_a_warm_instance_that_can_serve_and_otherwise_boots() {
    let t = types();
    let nodes = [node("spot-1", "m7i.xlarge", 1.0, &t)];
    let pods = [Arc::new(pod("p1", "spot-1", 2000, 2048))];
    let pools = [pool(json!({}))];
    let warm = |it: &str, zone: &str, count: u32| capstan_model::Warm {
        instance_type: it.into(),
        zone: zone.into(),
        // The NodePool leaves capacity type to its default: on-demand.
        capacity_type: "on-demand".into(),
        count,
    };
    // (warm instances, the replacement's type and zone where not the one that boots,
    // whether it starts a warm one)
    type Case<'a> = (Vec<capstan_model::Warm>, Option<(&'a str, &'a str)>, bool);
    let cases: [Case; 4] = [
        (vec![], None, false),
        (
            vec![warm("m7i.2xlarge", "us-east-1b", 1)],
            Some(("m7i.2xlarge", "us-east-1b")),
            true,
        ),
        // None left to start, or too small for the pods: it boots.
        (vec![warm("m7i.2xlarge", "us-east-1b", 0)], None, false),
        (vec![warm("c7i.large", "us-east-1b", 2)], None, false),
    ];
    let cold = |warm: &[capstan_model::Warm]| {
        let input = Input {
            nodes: &nodes,
            pods: &pods,
            pdbs: &[],
            nodepools: &pools,
            instance_types: &t,
            daemonsets: &[],
            now: NOW,
            spot_to_spot: true,
            ignore_preferences: false,
            known: None,
        };
        interruption(input, "spot-1", Reason::SpotInterruption, 120.0, warm).unwrap()
    };
    let booted = cold(&[]).replacements[0].clone();
    for (w, want, starts_warm) in cases {
        let r = cold(&w).replacements[0].clone();
        assert_eq!(r.warm, starts_warm, "{w:?}");
        match want {
            Some((it, zone)) => {
                assert_eq!(
                    (t[r.instance_type].name.as_str(), r.zone.as_str()),
                    (it, zone)
                );
                assert_ne!(t[r.instance_type].name, t[booted.instance_type].name);
            }
            None => assert_eq!(r, booted, "{w:?}"),
        }
    }
}

#[test]
fn an_interruption_evicts_everything_at_once_when_waves_would_miss_the_deadline() {
    let t = types();
    let nodes = [node("spot-1", "m7i.4xlarge", 1.0, &t)];
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            let mut p = pod(&format!("w{i}"), "spot-1", 500, 512);
            p.termination_grace_seconds = Some(90);
            p
        })
        .collect();
    let pdb = Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(LabelSelector::from_match_labels(
            &[("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
        )),
        min_available: None,
        max_unavailable: Some(IntOrPercent::Int(2)),
        always_allow_unhealthy: false,
    };
    let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
    let input = Input {
        nodes: &nodes,
        pods: &pods,
        pdbs: std::slice::from_ref(&pdb),
        nodepools: &[pool(json!({}))],
        instance_types: &t,
        daemonsets: &[],
        now: NOW,
        spot_to_spot: true,
        ignore_preferences: false,
        known: None,
    };
    let c = interruption(input, "spot-1", Reason::SpotInterruption, 120.0, &[]).unwrap();
    assert_eq!(
        c.drain.len(),
        1,
        "three 90-second waves would outlast the two minutes"
    );
    assert_eq!(c.drain[0].len(), 6);
    assert!(c.drain_seconds <= 120.0);
}

#[test]
fn rebalance_recommendations_replace_spot_nodes_only_where_the_nodepool_opts_in() {
    let t = types();
    let nodes = [node("s", "m7i.xlarge", 1.0, &t)];
    let pods = [Arc::new(pod("p", "s", 1000, 1024))];
    let input = |pools: &[NodePool]| {
        rebalance(
            Input {
                nodes: &nodes,
                pods: &pods,
                pdbs: &[],
                nodepools: pools,
                instance_types: &t,
                daemonsets: &[],
                now: NOW,
                spot_to_spot: true,
                ignore_preferences: false,
                known: None,
            },
            "s",
        )
    };
    assert_eq!(input(&[pool(json!({}))]), Ok(None));
    let obj: NodePoolObject =
        serde_json::from_value(json!({"apiVersion": "capstan.dev/v1", "kind": "NodePool",
        "metadata": {"name": "default", "annotations": {"capstan.dev/spot-rebalance": "true"}},
        "spec": {"template": {"spec": {}}, "disruption": {"budgets": [{"nodes": "100%"}]}}}))
        .unwrap();
    let opted = NodePool::compile(&obj).unwrap();
    let c = input(&[opted]).unwrap().expect("a replacement");
    assert_eq!(c.replacements.len(), 1);
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    /// Applies a command to the cluster and checks every node it leaves holds its pods.
    fn check(
        nodes: &[NodeInfo],
        pods: &[Pod],
        pdbs: &[Pdb],
        pools: &[NodePool],
        types: &[InstanceType],
        r: &Evaluation,
    ) {
        assert!(r.after <= r.before + 1e-9, "the hourly price never goes up");
        let mut per_pool_reason: BTreeMap<Reason, i64> = BTreeMap::new();
        let mut evicted: Vec<&str> = Vec::new();
        for c in &r.commands {
            if c.reason != Reason::Expired {
                assert!(c.savings >= -1e-9, "{c:?}");
                *per_pool_reason.entry(c.reason).or_default() += c.candidates.len() as i64;
            }
            // Capacity after the moves.
            let mut used: BTreeMap<String, Resources> = BTreeMap::new();
            for p in pods {
                if let Some(n) = &p.node_name {
                    if !c.candidates.contains(n) {
                        used.entry(n.clone()).or_default().add(&p.requests);
                    }
                }
            }
            let mut on_replacement: Vec<Resources> =
                vec![Resources::default(); c.replacements.len()];
            for m in &c.moves {
                let p = pods.iter().find(|p| p.key() == m.pod).unwrap();
                match &m.to {
                    Target::Node(n) => {
                        assert!(
                            !c.candidates.contains(n),
                            "no pod moves onto a node that goes"
                        );
                        used.entry(n.clone()).or_default().add(&p.requests);
                    }
                    Target::Replacement(k) => on_replacement[*k].add(&p.requests),
                }
                if c.reason != Reason::Expired {
                    evicted.push(&p.name);
                }
            }
            for n in nodes {
                if let Some(u) = used.get(&n.node.name) {
                    assert!(
                        u.fits_in(&n.node.allocatable),
                        "{} over allocatable after {c:?}",
                        n.node.name
                    );
                }
            }
            for (k, u) in on_replacement.iter().enumerate() {
                assert!(u.fits_in(&types[c.replacements[k].instance_type].allocatable));
            }
            let moved: usize = c
                .candidates
                .iter()
                .map(|n| {
                    pods.iter()
                        .filter(|p| p.node_name.as_deref() == Some(n))
                        .count()
                })
                .sum();
            assert_eq!(c.moves.len(), moved, "every pod of the candidates moves");
        }
        // Budgets: the pool's budget for each reason, less disrupting nodes.
        let total = nodes.len() as i64;
        let disrupting = nodes.iter().filter(|n| n.disrupting()).count() as i64;
        for (reason, n) in per_pool_reason {
            let allowed = pools[0].budgets.allows(reason, total, NOW);
            if allowed != i64::MAX {
                assert!(
                    n <= (allowed - disrupting).max(0),
                    "{reason:?}: {n} over budget {allowed}"
                );
            }
        }
        // PDBs: a voluntary command moves pods only of PDBs that allow a disruption now, and
        // each drain wave stays within every PDB's allowance.
        let all: Vec<&Pod> = pods.iter().collect();
        for pdb in pdbs {
            let allowed = pdb.allowed(&all);
            let touched = evicted
                .iter()
                .any(|name| pods.iter().any(|p| p.name == **name && pdb.selects(p)));
            assert!(!touched || allowed > 0, "pdb {} allows none", pdb.key());
            for c in r.commands.iter().filter(|c| c.reason != Reason::Expired) {
                for wave in &c.drain {
                    let n = wave
                        .iter()
                        .filter(|key| pods.iter().any(|p| p.key() == **key && pdb.selects(p)))
                        .count() as i64;
                    assert!(n <= allowed.max(1), "pdb {} exceeded in a wave", pdb.key());
                }
            }
        }
    }

    #[test]
    fn commands_keep_the_cluster_feasible_within_budgets_and_pdbs_and_never_raise_the_price() {
        let t = types();
        let sizes = [
            "m7i.large",
            "m7i.xlarge",
            "m7i.2xlarge",
            "m7i.4xlarge",
            "c7i.large",
            "c7i.xlarge",
        ];
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 48,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[5; 32]),
        );
        let case = (
            prop::collection::vec((0usize..6, 0u8..8, 1.0f64..2000.0), 1..12),
            prop::collection::vec((0usize..12, 100i64..3000, 0u8..3), 0..40),
            0u8..4,
        );
        let seen = std::cell::RefCell::new(Vec::new());
        runner
            .run(&case, |(node_specs, pod_specs, budget)| {
                let nodes: Vec<NodeInfo> = node_specs
                    .iter()
                    .enumerate()
                    .map(|(i, &(s, state, age))| {
                        let mut n = node(&format!("n{i}"), sizes[s], age, &t);
                        if state == 0 {
                            std::sync::Arc::make_mut(&mut n.node).ready = false;
                        }
                        n
                    })
                    .collect();
                let mut used: BTreeMap<usize, i64> = BTreeMap::new();
                let mut pods = Vec::new();
                for (k, &(n, cpu, app)) in pod_specs.iter().enumerate() {
                    let n = n % nodes.len();
                    let cap = nodes[n].node.allocatable.cpu;
                    if used.get(&n).copied().unwrap_or(0) + cpu > cap {
                        continue;
                    }
                    *used.entry(n).or_default() += cpu;
                    let mut p = pod(&format!("p{k}"), &nodes[n].node.name, cpu, 256);
                    p.labels.insert("app".into(), format!("a{app}"));
                    pods.push(p);
                }
                let pdbs = vec![Pdb {
                    namespace: "default".into(),
                    name: "a0".into(),
                    selector: Some(LabelSelector::from_match_labels(&[("app".to_string(), "a0".to_string())].into_iter().collect())),
                    min_available: None,
                    max_unavailable: Some(IntOrPercent::Int(1)),
                    always_allow_unhealthy: false,
                }];
                let b = ["10%", "2", "50%", "100%"][budget as usize];
                let p = pool(json!({"disruption": {"consolidateAfter": "30m", "budgets": [{"nodes": b}]}, "template": {"spec": {"expireAfter": "720h"}}}));
                let pools = [p];
                let r = eval(&nodes, &pods, &pdbs, &pools, &t);
                check(&nodes, &pods, &pdbs, &pools, &t, &r);
                seen.borrow_mut().extend(r.commands.iter().map(|c| c.reason));
                Ok(())
            })
            .unwrap();
        // The cases exercise every voluntary method and expiry.
        let seen = seen.into_inner();
        for r in [Reason::Empty, Reason::Underutilized, Reason::Expired] {
            assert!(seen.contains(&r), "no {r:?} command in any case: {seen:?}");
        }
    }
}

#[test]
fn spot_nodes_are_replaced_by_spot_only_behind_the_feature_gate_and_deleted_either_way() {
    // Twenty general-purpose types, each with a spot offering at 30% of on-demand: plenty of
    // cheaper spot types for a spot node of the largest.
    let mut c = Catalog::builtin();
    c.instance_types.retain(|t| {
        ["m7i", "m6i", "c7i", "c6i", "r7i"]
            .iter()
            .any(|f| t.name.starts_with(&format!("{f}.")))
            && ["large", "xlarge", "2xlarge", "4xlarge"]
                .iter()
                .any(|s| t.name.ends_with(&format!(".{s}")))
    });
    let mut t = c.instance_types;
    assert!(t.len() >= 20, "{} types", t.len());
    for it in t.iter_mut() {
        it.offerings.retain(|o| o.capacity_type == "on-demand");
    }
    add_spot_offerings(&mut t);
    let pools = [spot_pool()];
    let run = |nodes: &[NodeInfo], pods: &[Pod], gate: bool| {
        eval_with(nodes, pods, &[], &pools, &t, gate)
    };
    let spot_node = |name: &str| spot_node(name, "m7i.4xlarge", &t);
    let one = [spot_node("big")];
    let small = [pod("p1", "big", 500, 1024)];
    let two = [spot_node("a"), spot_node("b")];
    let spread = [pod("p1", "a", 500, 1024), pod("p2", "b", 500, 1024)];
    // (nodes, pods, gate, a replacement expected, a deletion expected)
    type Case<'a> = (&'a [NodeInfo], &'a [Pod], bool, bool, bool);
    let cases: [Case; 4] = [
        (&one, &small, true, true, false),
        (&one, &small, false, false, false),
        // With the gate off, spot nodes are still deleted when their pods fit elsewhere.
        (&two, &spread, false, false, true),
        (&two, &spread, true, false, true),
    ];
    for (i, (nodes, pods, gate, replaced, deleted)) in cases.into_iter().enumerate() {
        let r = run(nodes, pods, gate);
        let replacing: Vec<&Command> = r
            .commands
            .iter()
            .filter(|c| !c.replacements.is_empty())
            .collect();
        assert_eq!(!replacing.is_empty(), replaced, "case {i}: {r:#?}");
        assert_eq!(
            r.commands.iter().any(|c| c.replacements.is_empty()),
            deleted,
            "case {i}: {r:#?}"
        );
        // The replacement goes out over the 15 cheapest cheaper spot types, not one pool: the
        // chosen type first, every option cheaper than the node it replaces.
        for c in replacing {
            let r = &c.replacements[0];
            assert_eq!(r.spot_options.len(), MIN_SPOT_OPTIONS, "case {i}");
            assert_eq!(r.spot_options[0], r.instance_type, "case {i}");
            let prices: Vec<f64> = r
                .spot_options
                .iter()
                .map(|&k| {
                    t[k].offerings
                        .iter()
                        .filter(|o| o.capacity_type == "spot")
                        .map(|o| o.price)
                        .fold(f64::INFINITY, f64::min)
                })
                .collect();
            assert!(
                prices.windows(2).all(|w| w[0] <= w[1]),
                "case {i}: {prices:?}"
            );
            assert!(prices.iter().all(|&p| p < nodes[0].price), "case {i}");
            assert!(r.requirements.allows(labels::CAPACITY_TYPE, "spot"));
        }
    }
}

#[test]
fn the_node_a_deleting_nodes_pods_are_moving_to_is_not_taken_from_them() {
    let t = types();
    // "a" is being deleted; its pod needs "b", which is empty until the pod is evicted.
    let going = |mut n: NodeInfo| {
        let node = std::sync::Arc::make_mut(&mut n.node);
        node.deleting = true;
        node.unschedulable = true;
        n
    };
    let with = |deleting: bool| {
        let a = node("a", "m7i.large", 2.0, &t);
        let nodes = [
            if deleting { going(a) } else { a },
            node("b", "m7i.large", 2.0, &t),
        ];
        let pods = [pod("p", "a", 1500, 4096)];
        eval(&nodes, &pods, &[], &[pool(json!({}))], &t)
    };
    let r = with(true);
    assert!(
        r.commands
            .iter()
            .all(|c| !c.candidates.contains(&"b".to_string())),
        "b is kept for the pod moving off a: {r:#?}"
    );
    // Without the deletion, b is empty and goes.
    let r = with(false);
    assert!(
        r.commands
            .iter()
            .any(|c| c.reason == Reason::Empty && c.candidates == ["b".to_string()]),
        "{r:#?}"
    );
}

#[test]
fn a_node_whose_instance_type_is_no_longer_offered_drifts_after_its_first_hour() {
    // Karpenter's InstanceTypeNotFound: one empty m7i.large node in us-east-1a, on-demand, in a
    // NodePool that never consolidates; the catalog as the case has it.
    type Case = (
        &'static str,
        f64,
        fn(&mut Vec<InstanceType>, &mut NodeInfo),
        bool,
    );
    let cases: [Case; 6] = [
        ("offered as it runs", 2.0, |_, _| {}, false),
        (
            "the type retired",
            2.0,
            |t, _| t.retain(|t| t.name != "m7i.large"),
            true,
        ),
        (
            "no offering left in its zone",
            2.0,
            |t, _| {
                for t in t.iter_mut().filter(|t| t.name == "m7i.large") {
                    t.offerings.retain(|o| o.zone != "us-east-1a");
                }
            },
            true,
        ),
        (
            "retired, but the node is not an hour old",
            0.5,
            |t, _| t.retain(|t| t.name != "m7i.large"),
            false,
        ),
        (
            "retired, while the provider cannot list the NodePool's types",
            2.0,
            |t, n| {
                t.retain(|t| t.name != "m7i.large");
                n.types_unknown = true;
            },
            false,
        ),
        (
            "without an instance-type label",
            2.0,
            |_, n| {
                Arc::make_mut(&mut n.node)
                    .labels
                    .remove(labels::INSTANCE_TYPE);
            },
            true,
        ),
    ];
    let np =
        pool(json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}));
    for (case, age, change, want) in cases {
        let mut t = types();
        let mut n = node("a", "m7i.large", age, &t);
        change(&mut t, &mut n);
        // Index the node's type into the catalog as the caller would.
        let created = n.created;
        let types_unknown = n.types_unknown;
        let mut n = NodeInfo::from_node(n.node.clone(), &t);
        n.created = created;
        n.types_unknown = types_unknown;
        let r = eval(&[n], &[], &[], std::slice::from_ref(&np), &t);
        let drifted = r
            .commands
            .iter()
            .any(|c| c.reason == Reason::Drifted && c.candidates == ["a"]);
        assert_eq!(drifted, want, "{case}: {r:#?}");
    }
}

#[test]
fn a_nodeclaims_own_expire_after_overrides_its_nodepools() {
    // A node 2 hours old in a NodePool whose nodes expire after 720 h; its NodeClaim's own
    // expireAfter (a Karpenter NodeClaim's, copied at launch) is the one that applies.
    let t = types();
    let np = pool(json!({"disruption": {"consolidateAfter": "Never"}}));
    for (own, want) in [(None, false), (Some(Some(3600)), true), (Some(None), false)] {
        let mut n = node("a", "m7i.large", 2.0, &t);
        n.expire_after = own;
        let r = eval(&[n], &[], &[], std::slice::from_ref(&np), &t);
        let expired = r.commands.iter().any(|c| c.reason == Reason::Expired);
        assert_eq!(expired, want, "{own:?}: {r:#?}");
    }
}

#[test]
fn the_preference_policy_ignore_lets_a_pod_that_prefers_its_dear_type_move() {
    // An m7i.4xlarge node whose small pod prefers m7i.4xlarge (Karpenter's Preferences
    // context): respected, the replacement would be the same type, no cheaper — nothing to
    // do; ignored (`--preference-policy Ignore`), a cheaper node replaces it.
    let t = types();
    let np = pool(json!({}));
    let mut p = pod("p1", "big", 500, 512);
    p.preferred_terms.push(capstan_model::pod::Weighted {
        weight: 1,
        term: [capstan_model::Requirement::in_values(
            labels::INSTANCE_TYPE,
            ["m7i.4xlarge"],
        )]
        .into_iter()
        .collect(),
    });
    let pods = [Arc::new(p)];
    for (ignore, want) in [(false, 0), (true, 1)] {
        let r = evaluate(Input {
            nodes: &[node("big", "m7i.4xlarge", 1.0, &t)],
            pods: &pods,
            pdbs: &[],
            nodepools: std::slice::from_ref(&np),
            instance_types: &t,
            daemonsets: &[],
            now: NOW,
            spot_to_spot: false,
            ignore_preferences: ignore,
            known: None,
        });
        assert_eq!(r.commands.len(), want, "ignore {ignore}: {r:#?}");
        if let Some(c) = r.commands.first() {
            assert_ne!(t[c.replacements[0].instance_type].name, "m7i.4xlarge");
        }
    }
}
