//! `pkg/controllers/provisioning/scheduling/suite_test.go`: the scheduling suite, over
//! Karpenter's default fake instance types, a provisioning round at a time.

use super::topology::{Session, default_types};
use super::*;

pub const SUITE: &str = "pkg/controllers/provisioning/scheduling/suite_test.go";

const ZONE: &str = "topology.kubernetes.io/zone";
const CT: &str = "karpenter.sh/capacity-type";
const ITYPE: &str = "node.kubernetes.io/instance-type";

/// The suite's BeforeEach NodePool: any of spot, on-demand and reserved, plus `requirements`
/// where a test replaces them, and template `labels`.
fn pool(requirements: Option<Vec<Value>>, labels: Value) -> Value {
    let reqs =
        requirements.unwrap_or_else(|| vec![req(CT, "In", &["spot", "on-demand", "reserved"])]);
    let mut p = nodepool("default", reqs);
    if labels.as_object().is_some_and(|o| !o.is_empty()) {
        p["spec"]["template"]["metadata"] = json!({ "labels": labels });
    }
    p
}

/// One pod: node selector, required terms and preferred terms (weight 1 each).
fn one(s: &mut Session, selector: Value, reqs: Value, prefs: Value) -> Value {
    let mut p = s.pod_req(json!({}), None, vec![], selector, reqs);
    if prefs.as_array().is_some_and(|a| !a.is_empty()) {
        p["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
            json!([{"weight": 1, "preference": {"matchExpressions": prefs}}]);
    }
    p
}

fn scheduled_with(s: &Session, pod: &str, labels: &[(&str, &str)]) -> Result<(), String> {
    let n = s.node_of(pod).ok_or(format!("{pod} scheduled"))?;
    for (k, v) in labels {
        let got = s.label_of(&n, k);
        ensure(
            got.as_deref() == Some(*v),
            format!("node label {k}: {got:?}, want {v}"),
        )?;
    }
    Ok(())
}

fn not_scheduled(s: &Session, pod: &str) -> Result<(), String> {
    ensure(s.node_of(pod).is_none(), format!("{pod} not scheduled"))
}

pub fn cases() -> Vec<Scenario> {
    let mut out: Vec<Scenario> = Vec::new();
    let mut add = |it: &'static str, run: fn(&mut Session) -> Result<(), String>| {
        out.push(Scenario {
            file: SUITE,
            it,
            run: Box::new(move |dir: &PathBuf| run(&mut Session::new(dir, default_types()))),
        });
    };
    add(
        "should schedule unconstrained pods that don't have matching node selectors",
        |s| {
            let p = one(s, json!({}), json!([]), json!([]));
            s.provision(&[pool(None, json!({"test-key": "test-value"}))], vec![p]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])
        },
    );
    add(
        "should not schedule pods that have conflicting node selectors",
        |s| {
            let p = one(
                s,
                json!({"test-key": "different-value"}),
                json!([]),
                json!([]),
            );
            s.provision(&[pool(None, json!({"test-key": "test-value"}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule pods that have node selectors with undefined key",
        |s| {
            let p = one(s, json!({"test-key": "test-value"}), json!([]), json!([]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule pods that have matching requirements",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req("test-key", "In", &["test-value", "another-value"])]),
                json!([]),
            );
            s.provision(&[pool(None, json!({"test-key": "test-value"}))], vec![p]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])
        },
    );
    add(
        "should not schedule pods that have conflicting requirements",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req("test-key", "In", &["another-value"])]),
                json!([]),
            );
            s.provision(&[pool(None, json!({"test-key": "test-value"}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add("should use NodePool constraints", |s| {
        let p = one(s, json!({}), json!([]), json!([]));
        s.provision(
            &[pool(
                Some(vec![req(ZONE, "In", &["test-zone-2"])]),
                json!({}),
            )],
            vec![p],
        );
        scheduled_with(s, "p1", &[(ZONE, "test-zone-2")])
    });
    add("should use node selectors", |s| {
        let p = one(s, json!({ZONE: "test-zone-2"}), json!([]), json!([]));
        s.provision(
            &[pool(
                Some(vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])]),
                json!({}),
            )],
            vec![p],
        );
        scheduled_with(s, "p1", &[(ZONE, "test-zone-2")])
    });
    add("should not schedule nodes with a hostname selector", |s| {
        let p = one(
            s,
            json!({"kubernetes.io/hostname": "red-node"}),
            json!([]),
            json!([]),
        );
        s.provision(&[pool(None, json!({}))], vec![p]);
        not_scheduled(s, "p1")
    });
    add("should not schedule the pod if nodeselector unknown", |s| {
        let p = one(s, json!({ZONE: "unknown"}), json!([]), json!([]));
        s.provision(
            &[pool(
                Some(vec![req(ZONE, "In", &["test-zone-1"])]),
                json!({}),
            )],
            vec![p],
        );
        not_scheduled(s, "p1")
    });
    add(
        "should not schedule if node selector outside of NodePool constraints",
        |s| {
            let p = one(s, json!({ZONE: "test-zone-2"}), json!([]), json!([]));
            s.provision(
                &[pool(
                    Some(vec![req(ZONE, "In", &["test-zone-1"])]),
                    json!({}),
                )],
                vec![p],
            );
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule compatible requirements with Operator=In",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(ZONE, "In", &["test-zone-3"])]),
                json!([]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-3")])
        },
    );
    add(
        "should schedule compatible requirements with Operator=Gt",
        |s| {
            let p = one(s, json!({}), json!([]), json!([]));
            s.provision(
                &[pool(Some(vec![req("integer", "Gt", &["8"])]), json!({}))],
                vec![p],
            );
            scheduled_with(s, "p1", &[("integer", "16")])
        },
    );
    add(
        "should schedule compatible requirements with Operator=Lt",
        |s| {
            let p = one(s, json!({}), json!([]), json!([]));
            s.provision(
                &[pool(Some(vec![req("integer", "Lt", &["8"])]), json!({}))],
                vec![p],
            );
            scheduled_with(s, "p1", &[("integer", "2")])
        },
    );
    add(
        "should schedule compatible requirements with Operator=Gte",
        |s| {
            let p = one(s, json!({}), json!([]), json!([]));
            s.provision(
                &[pool(Some(vec![req("integer", "Gte", &["16"])]), json!({}))],
                vec![p],
            );
            scheduled_with(s, "p1", &[("integer", "16")])
        },
    );
    add(
        "should schedule compatible requirements with Operator=Lte",
        |s| {
            let p = one(s, json!({}), json!([]), json!([]));
            s.provision(
                &[pool(Some(vec![req("integer", "Lte", &["2"])]), json!({}))],
                vec![p],
            );
            scheduled_with(s, "p1", &[("integer", "2")])
        },
    );
    add(
        "should not schedule incompatible preferences and requirements with Operator=In",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(ZONE, "In", &["unknown"])]),
                json!([]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule compatible requirements with Operator=NotIn",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "NotIn",
                    &["test-zone-1", "test-zone-2", "unknown"]
                )]),
                json!([]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-3")])
        },
    );
    add(
        "should not schedule incompatible preferences and requirements with Operator=NotIn",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "NotIn",
                    &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"]
                )]),
                json!([]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule compatible preferences and requirements with Operator=In",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"]
                )]),
                json!([req(ZONE, "In", &["test-zone-2", "unknown"])]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-2")])
        },
    );
    add(
        "should schedule incompatible preferences and requirements with Operator=In",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"]
                )]),
                json!([req(ZONE, "In", &["unknown"])]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[])
        },
    );
    add(
        "should schedule compatible preferences and requirements with Operator=NotIn",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"]
                )]),
                json!([req(ZONE, "NotIn", &["test-zone-1", "test-zone-3"])]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-2")])
        },
    );
    add(
        "should schedule incompatible preferences and requirements with Operator=NotIn",
        |s| {
            let p = one(
                s,
                json!({}),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"]
                )]),
                json!([req(
                    ZONE,
                    "NotIn",
                    &["test-zone-1", "test-zone-2", "test-zone-3"]
                )]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[])
        },
    );
    add(
        "should schedule compatible node selectors, preferences and requirements",
        |s| {
            let p = one(
                s,
                json!({ZONE: "test-zone-3"}),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3"]
                )]),
                json!([req(
                    ZONE,
                    "In",
                    &["test-zone-1", "test-zone-2", "test-zone-3"]
                )]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-3")])
        },
    );
    add(
        "should combine multidimensional node selectors, preferences and requirements",
        |s| {
            let p = one(
                s,
                json!({ZONE: "test-zone-3", ITYPE: "arm-instance-type"}),
                json!([
                    req(ZONE, "In", &["test-zone-1", "test-zone-3"]),
                    req(ITYPE, "In", &["default-instance-type", "arm-instance-type"])
                ]),
                json!([
                    req(ZONE, "NotIn", &["unknown"]),
                    req(ITYPE, "NotIn", &["unknown"])
                ]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(
                s,
                "p1",
                &[(ZONE, "test-zone-3"), (ITYPE, "arm-instance-type")],
            )
        },
    );
    out
}
