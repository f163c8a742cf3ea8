//! `pkg/controllers/provisioning/scheduling/suite_test.go`: the scheduling suite, over
//! Karpenter's default fake instance types, a provisioning round at a time.

use super::topology::{
    Session, default_offerings, default_types, expect_skew, fake_instance_types, spread,
};
use super::*;

pub mod provisioning;

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
    constraints_and_logic(&mut out);
    fallback_and_compatibility(&mut out);
    binpacking(&mut out);
    in_flight(&mut out);
    in_flight_taints(&mut out);
    in_flight_rest(&mut out);
    existing_nodes(&mut out);
    daemonsets(&mut out);
    volume_usage(&mut out);
    deleting_nodes(&mut out);
    out
}

/// Its Karpenter's suite has that `capstan plan` cannot be asked, with the reason.
pub const NOT_RUN: &[(&str, &str)] = &[(
    "should not schedule pods with nodePool which is not ready ",
    "a NodePool's readiness is capstan's output (from its node class: the controller's \
     NodeClassNotReady condition and Event, tested in controller::catalog), not an input a \
     NodePool file can set",
)];

type Body = fn(&mut Session) -> Result<(), String>;

fn add_to(out: &mut Vec<Scenario>, it: &'static str, types: fn() -> Vec<FakeType>, run: Body) {
    out.push(Scenario {
        file: SUITE,
        it,
        run: Box::new(move |dir: &PathBuf| run(&mut Session::new(dir, types()))),
    });
}

fn five_fake() -> Vec<FakeType> {
    fake_instance_types(5)
}

/// A pending pod with nothing set.
fn bare(s: &mut Session) -> Value {
    s.pod(json!({}), None, vec![], json!({}))
}

/// A pending pod with these container `resources` (requests and limits).
fn sized(s: &mut Session, resources: Value) -> Value {
    let mut p = bare(s);
    p["spec"]["containers"][0]["resources"] = resources;
    p
}

/// A pending pod with these required node-selector terms (ORed).
fn terms(s: &mut Session, terms: Vec<Value>) -> Value {
    let mut p = bare(s);
    let terms: Vec<Value> = terms
        .into_iter()
        .map(|t| json!({ "matchExpressions": t }))
        .collect();
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({ "nodeSelectorTerms": terms });
    p
}

/// Adds weighted preferred node-selector terms to a pod.
fn prefer(mut p: Value, prefs: Vec<(i32, Value)>) -> Value {
    let prefs: Vec<Value> = prefs
        .into_iter()
        .map(|(w, e)| json!({"weight": w, "preference": {"matchExpressions": e}}))
        .collect();
    p["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
        json!(prefs);
    p
}

fn selecting(s: &mut Session, selector: Value) -> Value {
    one(s, selector, json!([]), json!([]))
}

fn requiring(s: &mut Session, reqs: Value) -> Value {
    one(s, json!({}), reqs, json!([]))
}

/// The node a scheduled pod runs on, or an error naming the pod.
fn node(s: &Session, pod: &str) -> Result<String, String> {
    s.node_of(pod).ok_or(format!("{pod} not scheduled"))
}

fn no_label(s: &Session, pod: &str, key: &str, value: Option<&str>) -> Result<(), String> {
    let n = node(s, pod)?;
    let got = s.label_of(&n, key);
    let bad = match value {
        Some(v) => got.as_deref() == Some(v),
        None => got.is_some(),
    };
    ensure(!bad, format!("node label {key}: {got:?}"))
}

/// Every listed pod scheduled, on `n` distinct nodes.
fn on_distinct_nodes(s: &Session, pods: &[&str], n: usize) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    for p in pods {
        names.insert(node(s, p)?);
    }
    ensure(
        names.len() == n,
        format!("{} nodes for {pods:?}, Karpenter expects {n}", names.len()),
    )
}

fn type_of(s: &Session, pod: &str) -> Result<String, String> {
    let n = node(s, pod)?;
    s.label_of(&n, ITYPE)
        .ok_or("node has no instance type".into())
}

fn pool_with(reqs: Vec<Value>) -> Value {
    pool(Some(reqs), json!({}))
}

fn test_key_pool() -> Value {
    pool_with(vec![req("test-key", "In", &["test-value"])])
}

/// `Constraints Validation` and `Scheduling Logic` (lines 425–677; lines 678–1125 repeat
/// `Well Known Labels`, `Constraints Validation` and `Scheduling Logic` It by It, and the Its
/// whose names differ there run under both names).
fn constraints_and_logic(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should not schedule pods that have node selectors with restricted labels",
        |s| {
            // v1.RestrictedLabels: kubernetes.io/hostname.
            let p = requiring(s, json!([req("kubernetes.io/hostname", "In", &["test"])]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule pods that have node selectors with restricted domains",
        |s| {
            // v1.RestrictedLabelDomains: karpenter.sh.
            let p = requiring(s, json!([req("karpenter.sh/test", "In", &["test"])]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    fn kubernetes_domains(s: &mut Session, prefix: &str) -> Result<(), String> {
        let keys: Vec<String> = ["kubernetes.io", "k8s.io"]
            .iter()
            .map(|d| format!("{prefix}{d}/test"))
            .collect();
        let reqs = keys.iter().map(|k| req(k, "In", &["test-value"])).collect();
        let np = pool_with(reqs);
        for (i, k) in keys.iter().enumerate() {
            let p = bare(s);
            s.provision(std::slice::from_ref(&np), vec![p]);
            scheduled_with(s, &format!("p{}", i + 1), &[(k, "test-value")])?;
        }
        Ok(())
    }
    add(
        "should schedule pods that have node selectors with label in the kubernetes domains",
        |s| kubernetes_domains(s, ""),
    );
    add(
        "should schedule pods that have node selectors with label in kubernetes domains",
        |s| kubernetes_domains(s, ""),
    );
    add(
        "should schedule pods that have node selectors with label in subdomain from kubernetes domains",
        |s| kubernetes_domains(s, "subdomain."),
    );
    add(
        "should schedule pods that have node selectors with label in wellknown label list",
        |s| {
            let pods = vec![
                selecting(s, json!({ZONE: "test-zone-1"})),
                selecting(s, json!({ITYPE: "default-instance-type"})),
                selecting(s, json!({"kubernetes.io/arch": "arm64"})),
                selecting(s, json!({"kubernetes.io/os": "linux"})),
                selecting(s, json!({CT: "spot"})),
            ];
            s.provision(&[pool(None, json!({}))], pods);
            for i in 1..=5 {
                node(s, &format!("p{i}"))?;
            }
            Ok(())
        },
    );
    add(
        "should not schedule pods that have node selectors with In operator and undefined key",
        |s| {
            let p = requiring(s, json!([req("test-key", "In", &["test-value"])]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule pods that have node selectors with NotIn operator and undefined key",
        |s| {
            let p = requiring(s, json!([req("test-key", "NotIn", &["test-value"])]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            no_label(s, "p1", "test-key", Some("test-value"))
        },
    );
    add(
        "should not schedule pods that have node selectors with Exists operator and undefined key",
        |s| {
            let p = requiring(s, json!([{"key": "test-key", "operator": "Exists"}]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule pods that with DoesNotExists operator and undefined key",
        |s| {
            let p = requiring(s, json!([{"key": "test-key", "operator": "DoesNotExist"}]));
            s.provision(&[pool(None, json!({}))], vec![p]);
            no_label(s, "p1", "test-key", None)
        },
    );
    add(
        "should schedule unconstrained pods that don't have matching node selectors",
        |s| {
            let p = bare(s);
            s.provision(&[test_key_pool()], vec![p]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])
        },
    );
    add(
        "should schedule pods that have node selectors with matching value and In operator",
        |s| {
            let p = requiring(s, json!([req("test-key", "In", &["test-value"])]));
            s.provision(&[test_key_pool()], vec![p]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])
        },
    );
    add(
        "should not schedule pods that have node selectors with matching value and NotIn operator",
        |s| {
            let p = requiring(s, json!([req("test-key", "NotIn", &["test-value"])]));
            s.provision(&[test_key_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule the pod with Exists operator and defined key",
        |s| {
            let p = requiring(s, json!([{"key": "test-key", "operator": "Exists"}]));
            s.provision(&[test_key_pool()], vec![p]);
            node(s, "p1").map(drop)
        },
    );
    add(
        "should not schedule the pod with DoesNotExists operator and defined key",
        |s| {
            let p = requiring(s, json!([{"key": "test-key", "operator": "DoesNotExist"}]));
            s.provision(&[test_key_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not schedule pods that have node selectors with different value and In operator",
        |s| {
            let p = requiring(s, json!([req("test-key", "In", &["another-value"])]));
            s.provision(&[test_key_pool()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should schedule pods that have node selectors with different value and NotIn operator",
        |s| {
            let p = requiring(s, json!([req("test-key", "NotIn", &["another-value"])]));
            s.provision(&[test_key_pool()], vec![p]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])
        },
    );
    fn two_values_pool() -> Value {
        pool_with(vec![req(
            "test-key",
            "In",
            &["test-value", "another-value"],
        )])
    }
    add("should schedule compatible pods to the same node", |s| {
        let a = requiring(s, json!([req("test-key", "In", &["test-value"])]));
        let b = requiring(s, json!([req("test-key", "NotIn", &["another-value"])]));
        s.provision(&[two_values_pool()], vec![a, b]);
        scheduled_with(s, "p1", &[("test-key", "test-value")])?;
        scheduled_with(s, "p2", &[("test-key", "test-value")])?;
        on_distinct_nodes(s, &["p1", "p2"], 1)
    });
    add(
        "should schedule incompatible pods to the different node",
        |s| {
            let a = requiring(s, json!([req("test-key", "In", &["test-value"])]));
            let b = requiring(s, json!([req("test-key", "In", &["another-value"])]));
            s.provision(&[two_values_pool()], vec![a, b]);
            scheduled_with(s, "p1", &[("test-key", "test-value")])?;
            scheduled_with(s, "p2", &[("test-key", "another-value")])?;
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "Exists operator should not overwrite the existing value",
        |s| {
            let p = requiring(
                s,
                json!([
                    req(ZONE, "In", &["non-existent-zone"]),
                    {"key": ZONE, "operator": "Exists"}
                ]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
}

/// `Preferential Fallback` and `Instance Type Compatibility` (lines 1126–1519).
fn fallback_and_compatibility(out: &mut Vec<Scenario>) {
    add_to(out, "should not relax the final term", default_types, |s| {
        let p = terms(s, vec![json!([req(ZONE, "In", &["invalid"])])]);
        let np = pool_with(vec![
            req(ZONE, "In", &["test-zone-1"]),
            req(ITYPE, "In", &["default-instance-type"]),
        ]);
        s.provision(&[np], vec![p]);
        not_scheduled(s, "p1")
    });
    add_to(out, "should relax multiple terms", default_types, |s| {
        let p = terms(
            s,
            vec![
                json!([req(ZONE, "In", &["invalid"])]),
                json!([req(ZONE, "In", &["invalid"])]),
                json!([req(ZONE, "In", &["test-zone-1"])]),
                json!([req(ZONE, "In", &["test-zone-2"])]),
            ],
        );
        s.provision(&[pool(None, json!({}))], vec![p]);
        scheduled_with(s, "p1", &[(ZONE, "test-zone-1")])
    });
    add_to(out, "should relax all terms", default_types, |s| {
        let p = bare(s);
        let p = prefer(
            p,
            vec![
                (1, json!([req(ZONE, "In", &["invalid"])])),
                (1, json!([req(ITYPE, "In", &["invalid"])])),
            ],
        );
        s.provision(&[pool(None, json!({}))], vec![p]);
        node(s, "p1").map(drop)
    });
    add_to(
        out,
        "should relax to use lighter weights",
        default_types,
        |s| {
            let p = bare(s);
            let p = prefer(
                p,
                vec![
                    (100, json!([req(ITYPE, "In", &["test-zone-3"])])),
                    (50, json!([req(ZONE, "In", &["test-zone-2"])])),
                    (1, json!([req(ZONE, "In", &["test-zone-1"])])),
                ],
            );
            let np = pool_with(vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])]);
            s.provision(&[np], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-2")])
        },
    );
    add_to(
        out,
        "should schedule even if preference is conflicting with requirement",
        default_types,
        |s| {
            let p = terms(s, vec![json!([req(ZONE, "In", &["test-zone-3"])])]);
            let p = prefer(p, vec![(1, json!([req(ZONE, "NotIn", &["test-zone-3"])]))]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            scheduled_with(s, "p1", &[(ZONE, "test-zone-3")])
        },
    );
    add_to(
        out,
        "should schedule even if preference requirements are conflicting",
        default_types,
        |s| {
            let p = one(
                s,
                json!({}),
                json!([]),
                json!([
                    req(ZONE, "In", &["invalid"]),
                    req(ZONE, "NotIn", &["invalid"])
                ]),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            node(s, "p1").map(drop)
        },
    );

    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    fn both_archs() -> Value {
        pool_with(vec![req("kubernetes.io/arch", "In", &["arm64", "amd64"])])
    }
    fn amd_only() -> Value {
        pool_with(vec![req("kubernetes.io/arch", "In", &["amd64"])])
    }
    add(
        "should not schedule if requesting more resources than any instance type has",
        |s| {
            let p = sized(s, json!({"requests": {"cpu": "512"}}));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should launch pods with different archs on different instances",
        |s| {
            let a = selecting(s, json!({"kubernetes.io/arch": "amd64"}));
            let b = selecting(s, json!({"kubernetes.io/arch": "arm64"}));
            s.provision(&[both_archs()], vec![a, b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "should exclude instance types that are not supported by the pod constraints (node affinity/instance type)",
        |s| {
            let p = requiring(s, json!([req(ITYPE, "In", &["arm-instance-type"])]));
            s.provision(&[amd_only()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should exclude instance types that are not supported by the pod constraints (node affinity/operating system)",
        |s| {
            let p = requiring(s, json!([req("kubernetes.io/os", "In", &["ios"])]));
            s.provision(&[amd_only()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should exclude instance types that are not supported by the provider constraints (arch)",
        |s| {
            let p = sized(s, json!({"limits": {"cpu": "14"}}));
            s.provision(&[amd_only()], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should launch pods with different operating systems on different instances",
        |s| {
            let a = selecting(s, json!({"kubernetes.io/os": "linux"}));
            let b = selecting(s, json!({"kubernetes.io/os": "windows"}));
            s.provision(&[both_archs()], vec![a, b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "should launch pods with different instance type node selectors on different instances",
        |s| {
            let a = selecting(
                s,
                json!({"beta.kubernetes.io/instance-type": "small-instance-type"}),
            );
            let b = selecting(s, json!({ITYPE: "default-instance-type"}));
            s.provision(&[both_archs()], vec![a, b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "should launch pods with different zone selectors on different instances",
        |s| {
            let a = selecting(s, json!({ZONE: "test-zone-1"}));
            let b = selecting(s, json!({ZONE: "test-zone-2"}));
            s.provision(&[both_archs()], vec![a, b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    fn two_gpu_types() -> Vec<FakeType> {
        let mut t = fake_instance_types(5);
        t[0].extended = Some(("karpenter.sh/super-great-gpu", 25));
        t[1].extended = Some(("karpenter.sh/even-better-gpu", 25));
        t
    }
    add_to(
        out,
        "should launch pods with resources that aren't on any single instance type on different instances",
        two_gpu_types,
        |s| {
            let a = sized(s, json!({"limits": {"karpenter.sh/super-great-gpu": "1"}}));
            let b = sized(s, json!({"limits": {"karpenter.sh/even-better-gpu": "1"}}));
            s.provision(&[pool(None, json!({}))], vec![a, b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add_to(
        out,
        "should fail to schedule a pod with resources requests that aren't on a single instance type",
        two_gpu_types,
        |s| {
            let p = sized(
                s,
                json!({"limits": {"karpenter.sh/super-great-gpu": "1", "karpenter.sh/even-better-gpu": "1"}}),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add_to(
        out,
        "should filter instance types that match labels",
        five_fake,
        |s| {
            let a = selecting(s, json!({"size": "large"}));
            let b = selecting(s, json!({"size": "small"}));
            s.provision(&[pool(None, json!({}))], vec![a, b]);
            scheduled_with(s, "p1", &[(ITYPE, "fake-it-4")])?;
            scheduled_with(s, "p2", &[(ITYPE, "fake-it-0")])
        },
    );
    add_to(
        out,
        "should not schedule with incompatible labels",
        five_fake,
        |s| {
            let a = selecting(s, json!({"size": "large", ITYPE: "fake-it-0"}));
            let b = selecting(s, json!({"size": "small", ITYPE: "fake-it-4"}));
            s.provision(&[pool(None, json!({}))], vec![a, b]);
            not_scheduled(s, "p1")?;
            not_scheduled(s, "p2")
        },
    );
    add_to(out, "should schedule optional labels", five_fake, |s| {
        let p = requiring(s, json!([{"key": "special", "operator": "Exists"}]));
        s.provision(&[pool(None, json!({}))], vec![p]);
        ensure(
            s.label_of(&node(s, "p1")?, "special").is_some(),
            "node has the special label",
        )?;
        scheduled_with(s, "p1", &[(ITYPE, "fake-it-4")])
    });
    add_to(
        out,
        "should schedule without optional labels if disallowed",
        five_fake,
        |s| {
            let p = requiring(s, json!([{"key": "special", "operator": "DoesNotExist"}]));
            // test.NodePool(): no requirements at all.
            s.provision(&[nodepool("default", vec![])], vec![p]);
            no_label(s, "p1", "special", None)
        },
    );
}

/// `n` pods with these container resources and node selector.
fn many(s: &mut Session, n: usize, selector: Value, resources: Value) -> Vec<Value> {
    (0..n)
        .map(|_| {
            let mut p = selecting(s, selector.clone());
            p["spec"]["containers"][0]["resources"] = resources.clone();
            p
        })
        .collect()
}

/// Every pod `p1`..`pn` scheduled on `itype`, on `nodes` nodes.
fn all_on(s: &Session, n: usize, itype: &str, nodes: usize) -> Result<(), String> {
    let names: Vec<String> = (1..=n).map(|i| format!("p{i}")).collect();
    for p in &names {
        let t = type_of(s, p)?;
        ensure(t == itype, format!("{p} on {t}, Karpenter expects {itype}"))?;
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    on_distinct_nodes(s, &refs, nodes)
}

/// Three types whose sizes and prices do not correlate, one on-demand offering each.
fn uncorrelated_prices() -> Vec<FakeType> {
    [
        ("medium", 2.0, 3.0),
        ("small", 1.0, 2.0),
        ("large", 4.0, 1.0),
    ]
    .into_iter()
    .map(|(name, size, price)| {
        FakeType::new(name, "amd64", size, size).offering("on-demand", "test-zone-1a", price)
    })
    .collect()
}

/// `Binpacking` (lines 1521–1828).
fn binpacking(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should schedule a small pod on the smallest instance",
        |s| {
            let p = sized(s, json!({"requests": {"memory": "100M"}}));
            s.provision(&[pool(None, json!({}))], vec![p]);
            all_on(s, 1, "small-instance-type", 1)
        },
    );
    add(
        "should schedule a small pod on the smallest possible instance type",
        |s| {
            let p = sized(s, json!({"requests": {"memory": "2000M"}}));
            s.provision(&[pool(None, json!({}))], vec![p]);
            all_on(s, 1, "small-instance-type", 1)
        },
    );
    add("should take pod runtime class into consideration", |s| {
        // The API server's RuntimeClass admission copies the class's 2-CPU overhead into
        // the pod's spec.overhead, which is what a recorded pod (and capstan) has.
        let mut p = sized(s, json!({"requests": {"cpu": "1"}}));
        p["spec"]["runtimeClassName"] = json!("my-runtime-class");
        p["spec"]["overhead"] = json!({"cpu": "2"});
        s.provision(&[pool(None, json!({}))], vec![p]);
        all_on(s, 1, "default-instance-type", 1)
    });
    add(
        "should schedule multiple small pods on the smallest possible instance type",
        |s| {
            let pods = many(s, 5, json!({}), json!({"requests": {"memory": "10M"}}));
            s.provision(&[pool(None, json!({}))], pods);
            all_on(s, 5, "small-instance-type", 1)
        },
    );
    add("should create new nodes when a node is at capacity", |s| {
        let pods = many(
            s,
            40,
            json!({"kubernetes.io/arch": "amd64"}),
            json!({"requests": {"memory": "1.8G"}}),
        );
        s.provision(&[pool(None, json!({}))], pods);
        all_on(s, 40, "default-instance-type", 20)
    });
    add("should pack small and large pods together", |s| {
        let mut pods = many(
            s,
            40,
            json!({"kubernetes.io/arch": "amd64"}),
            json!({"requests": {"memory": "1.8G"}}),
        );
        pods.extend(many(
            s,
            20,
            json!({"kubernetes.io/arch": "amd64"}),
            json!({"requests": {"memory": "400M"}}),
        ));
        s.provision(&[pool(None, json!({}))], pods);
        all_on(s, 60, "default-instance-type", 20)
    });
    add_to(out, "should pack nodes tightly", five_fake, |s| {
        let a = sized(s, json!({"requests": {"cpu": "4.5"}}));
        let b = sized(s, json!({"requests": {"cpu": "1"}}));
        s.provision(&[pool(None, json!({}))], vec![a, b]);
        on_distinct_nodes(s, &["p1", "p2"], 2)?;
        let (ta, tb) = (type_of(s, "p1")?, type_of(s, "p2")?);
        ensure(ta != tb, format!("both pods on {ta}"))
    });
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add("should handle zero-quantity resource requests", |s| {
        let p = sized(
            s,
            json!({"requests": {"foo.com/weird-resources": "0"}, "limits": {"foo.com/weird-resources": "0"}}),
        );
        s.provision(&[pool(None, json!({}))], vec![p]);
        node(s, "p1").map(drop)
    });
    add(
        "should not schedule pods that exceed every instance type's capacity",
        |s| {
            let p = sized(s, json!({"requests": {"memory": "2Ti"}}));
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should create new nodes when a node is at capacity due to pod limits per node",
        |s| {
            let pods = many(
                s,
                25,
                json!({"kubernetes.io/arch": "amd64"}),
                json!({"requests": {"memory": "1m", "cpu": "1m"}}),
            );
            s.provision(&[pool(None, json!({}))], pods);
            all_on(s, 25, "small-instance-type", 5)
        },
    );
    fn with_init(s: &mut Session, init_memory: &str) -> Value {
        let mut p = sized(s, json!({"requests": {"memory": "1Gi", "cpu": "1"}}));
        p["spec"]["initContainers"] = json!([{"name": "init", "image": "pause",
            "resources": {"requests": {"memory": init_memory, "cpu": "2"}}}]);
        p
    }
    add(
        "should take into account initContainer resource requests when binpacking",
        |s| {
            let p = with_init(s, "1Gi");
            s.provision(&[pool(None, json!({}))], vec![p]);
            all_on(s, 1, "default-instance-type", 1)
        },
    );
    add(
        "should not schedule pods when initContainer resource requests are greater than available instance types",
        |s| {
            let p = with_init(s, "1Ti");
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add_to(
        out,
        "should select for valid instance types, regardless of price",
        uncorrelated_prices,
        |s| {
            let p = sized(s, json!({"limits": {"cpu": "1m", "memory": "1Mi"}}));
            let o = s.provision(&[pool(None, json!({}))], vec![p]);
            all_on(s, 1, "large", 1)?;
            let mut options: Vec<&str> = o.claims()[0]["instance_type_options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            options.sort_unstable();
            ensure(
                options == ["large", "medium", "small"],
                format!("the claim's types: {options:?}, Karpenter passes all three"),
            )
        },
    );
}

fn cpu_limit(s: &mut Session, cpu: &str) -> Value {
    sized(s, json!({"limits": {"cpu": cpu}}))
}

fn zone_pod(s: &mut Session, zones: &[&str]) -> Value {
    let mut p = cpu_limit(s, "10m");
    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [req(ZONE, "In", zones)]}]}}});
    p
}

/// Pods labelled `test: test` with a DoNotSchedule spread of skew 1 over `key`.
fn spread_pods(s: &mut Session, n: usize, key: &str) -> Vec<Value> {
    s.pods(n, json!({"test": "test"}), None, vec![spread(key, 1, true)])
}

/// `In-Flight Nodes` up to its `Taints` context (lines 1829–2016). capstan's round makes its
/// claims Ready nodes, so Karpenter's in-flight nodes are existing nodes here.
fn in_flight(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should not launch a second node if there is an in-flight node that can support the pod",
        |s| {
            let a = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let b = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![b]);
            on_distinct_nodes(s, &["p1", "p2"], 1)
        },
    );
    add(
        "should not launch a second node if there is an in-flight node that can support the pod (node selectors)",
        |s| {
            let np = pool(None, json!({}));
            let a = zone_pod(s, &["test-zone-2"]);
            s.provision(std::slice::from_ref(&np), vec![a]);
            let b = zone_pod(s, &["test-zone-1", "test-zone-2"]);
            s.provision(std::slice::from_ref(&np), vec![b]);
            on_distinct_nodes(s, &["p1", "p2"], 1)?;
            let c = zone_pod(s, &["test-zone-1", "test-zone-3"]);
            s.provision(std::slice::from_ref(&np), vec![c]);
            on_distinct_nodes(s, &["p1", "p3"], 2)
        },
    );
    add(
        "should launch a second node if a pod won't fit on the existingNodes node",
        |s| {
            let a = cpu_limit(s, "1001m");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let b = cpu_limit(s, "1");
            s.provision(&[pool(None, json!({}))], vec![b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "should launch a second node if a pod isn't compatible with the existingNodes node (node selector)",
        |s| {
            let a = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let b = selecting(s, json!({"kubernetes.io/arch": "arm64"}));
            s.provision(&[pool(None, json!({}))], vec![b]);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
    add(
        "should launch a second node if an in-flight node is terminating",
        |s| {
            let a = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![a]);
            // The NodeClaim and its node are deleted (their finalizers cleared).
            let gone = node(s, "p1")?;
            s.nodes.retain(|n| n["metadata"]["name"] != gone.as_str());
            s.delete("p1");
            let b = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![b]);
            let n2 = node(s, "p2")?;
            ensure(n2 != gone, "p2 on the deleted node")
        },
    );
    add(
        "should balance pods across zones with in-flight nodes",
        |s| {
            let np = pool(None, json!({}));
            let first = spread_pods(s, 4, ZONE);
            s.provision(std::slice::from_ref(&np), first);
            expect_skew(s, ZONE, Some(("test", "test")), &[1, 1, 2])?;
            let nodes = s.nodes.len();
            let more = spread_pods(s, 5, ZONE);
            s.provision(std::slice::from_ref(&np), more);
            expect_skew(s, ZONE, Some(("test", "test")), &[3, 3, 3])?;
            ensure(
                s.nodes.len() == nodes,
                format!(
                    "{} nodes after the second round, {nodes} before",
                    s.nodes.len()
                ),
            )
        },
    );
    add(
        "should balance pods across hostnames with in-flight nodes",
        |s| {
            let np = pool(None, json!({}));
            let first = spread_pods(s, 4, "kubernetes.io/hostname");
            s.provision(std::slice::from_ref(&np), first);
            expect_skew(
                s,
                "kubernetes.io/hostname",
                Some(("test", "test")),
                &[1, 1, 1, 1],
            )?;
            let more = spread_pods(s, 5, "kubernetes.io/hostname");
            s.provision(std::slice::from_ref(&np), more);
            expect_skew(s, "kubernetes.io/hostname", Some(("test", "test")), &[1; 9])
        },
    );
}

/// Gives a node of the session its NodeClaim (registered; initialized or not), with the
/// NodePool's startup taints, as Karpenter's state has for the nodes it launched.
fn claim_node(s: &mut Session, node: &str, startup: Value, initialized: bool) {
    let mut conditions = vec![
        json!({"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": "2026-12-01T10:00:00Z"}),
        json!({"type": "Registered", "status": "True", "reason": "Registered", "lastTransitionTime": "2026-12-01T10:00:30Z"}),
    ];
    if initialized {
        conditions.push(json!({"type": "Initialized", "status": "True", "reason": "Initialized", "lastTransitionTime": "2026-12-01T10:01:00Z"}));
    }
    s.extra.push(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("claim-{node}"), "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [], "startupTaints": startup},
        "status": {"nodeName": node, "conditions": conditions}}));
}

fn node_mut<'a>(s: &'a mut Session, name: &str) -> &'a mut Value {
    s.nodes
        .iter_mut()
        .find(|n| n["metadata"]["name"] == name)
        .expect("the node exists")
}

fn taint_node(s: &mut Session, name: &str, taints: Value) {
    node_mut(s, name)["spec"]["taints"] = taints;
}

/// The node's `karpenter.sh/initialized: "true"` label.
fn label_initialized(s: &mut Session, name: &str) {
    node_mut(s, name)["metadata"]["labels"]["karpenter.sh/initialized"] = json!("true");
}

fn custom_startup_taint() -> Value {
    json!({"key": "foo.com/taint", "value": "tainted", "effect": "NoSchedule"})
}

/// `In-Flight Nodes`, `Taints` (lines 2017–2201).
fn in_flight_taints(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should assume pod will schedule to a tainted node with no taints",
        |s| {
            let a = cpu_limit(s, "8");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            s.delete("p1");
            taint_node(s, &n1, json!([]));
            let b = bare(s);
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p2")? == n1, "p2 on the first node")
        },
    );
    add(
        "should assume pod will schedule to a node with ephemeral taint node.kubernetes.io/not-ready:NoExecute when the node is uninitialized",
        |s| {
            let a = bare(s);
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            s.delete("p1");
            claim_node(s, &n1, json!([]), false);
            taint_node(
                s,
                &n1,
                json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
            );
            let b = bare(s);
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p2")? == n1, "p2 on the uninitialized node")?;
            s.delete("p2");
            label_initialized(s, &n1);
            let c = bare(s);
            s.provision(&[pool(None, json!({}))], vec![c]);
            ensure(
                node(s, "p3")? != n1,
                "p3 not on the initialized, tainted node",
            )
        },
    );
    add(
        "should not assume pod will schedule to a tainted node",
        |s| {
            let a = cpu_limit(s, "8");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            claim_node(s, &n1, json!([]), true);
            label_initialized(s, &n1);
            s.delete("p1");
            taint_node(
                s,
                &n1,
                json!([{"key": "foo.com/taint", "value": "tainted", "effect": "NoSchedule"}]),
            );
            let b = bare(s);
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p2")? != n1, "p2 not on the tainted node")
        },
    );
    fn startup_pool() -> Value {
        let mut p = pool(None, json!({}));
        p["spec"]["template"]["spec"]["startupTaints"] = json!([custom_startup_taint()]);
        p
    }
    add(
        "should assume pod will schedule to a tainted node with a custom startup taint",
        |s| {
            let a = cpu_limit(s, "8");
            s.provision(&[startup_pool()], vec![a]);
            let n1 = node(s, "p1")?;
            s.delete("p1");
            // Karpenter's node: the startup taint and the not-ready one.
            claim_node(s, &n1, json!([custom_startup_taint()]), false);
            taint_node(
                s,
                &n1,
                json!([custom_startup_taint(), {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
            );
            let b = bare(s);
            s.provision(&[startup_pool()], vec![b]);
            ensure(node(s, "p2")? == n1, "p2 on the node still coming up")
        },
    );
    add(
        "should not assume pod will schedule to a node with startup taints after initialization",
        |s| {
            let startup =
                json!({"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"});
            let mut np = pool(None, json!({}));
            np["spec"]["template"]["spec"]["startupTaints"] = json!([startup.clone()]);
            let a = bare(s);
            s.provision(std::slice::from_ref(&np), vec![a]);
            let n1 = node(s, "p1")?;
            s.delete("p1");
            claim_node(s, &n1, json!([startup.clone()]), true);
            label_initialized(s, &n1);
            taint_node(s, &n1, json!([startup]));
            node_mut(s, &n1)["status"]["capacity"] = json!({"pods": "10"});
            let b = bare(s);
            s.provision(std::slice::from_ref(&np), vec![b]);
            ensure(
                node(s, "p2")? != n1,
                "p2 not on the node whose startup taint came back",
            )
        },
    );
    add(
        "should consider a tainted NotReady node as in-flight even if initialized",
        |s| {
            let a = sized(s, json!({"requests": {"cpu": "10m"}}));
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            claim_node(s, &n1, json!([]), false);
            label_initialized(s, &n1);
            taint_node(
                s,
                &n1,
                json!([
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                    {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
                ]),
            );
            let b = sized(s, json!({"requests": {"cpu": "10m"}}));
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p2")? == n1, "p2 on the NotReady node")
        },
    );
}

/// One type, `medium`: 4.25 CPUs (4.15 allocatable) and 4 pods.
fn medium_four_pods() -> Vec<FakeType> {
    let mut t = FakeType::new("medium", "amd64", 4.25, 4.0);
    t.pods = 4;
    vec![super::topology::default_offerings(t)]
}

/// The rest of `In-Flight Nodes` (lines 2492–2605), its `Daemonsets` context left for later.
fn in_flight_rest(out: &mut Vec<Scenario>) {
    add_to(
        out,
        "should pack in-flight nodes before launching new nodes",
        medium_four_pods,
        |s| {
            // Karpenter draws ten batch sizes from 0 to 9 at random; these are fixed.
            for n in [3, 7, 1, 9, 0, 5, 2, 8, 4, 6] {
                let pods = many(s, n, json!({}), json!({"limits": {"cpu": "1"}}));
                s.provision(&[pool(None, json!({}))], pods);
            }
            // Nodes with a CPU or more free: at most the last one.
            let mut free = 0;
            for n in &s.nodes {
                let name = n["metadata"]["name"].as_str().unwrap();
                let used = s
                    .bound
                    .iter()
                    .filter(|p| p["spec"]["nodeName"] == name)
                    .count() as i64;
                if 4150 - 1000 * used >= 1000 {
                    free += 1;
                }
            }
            ensure(free <= 1, format!("{free} nodes with a CPU free"))
        },
    );
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should not launch a second node if there is an in-flight node that can support the pod (#2011)",
        |s| {
            let p = cpu_limit(s, "10m");
            s.provision(&[pool(None, json!({}))], vec![p.clone()]);
            ensure(s.nodes.len() == 1, "one node")?;
            // Not bound (ExpectProvisionedNoBinding): the pod is pending again.
            s.delete("p1");
            s.provision(&[pool(None, json!({}))], vec![p]);
            ensure(
                s.nodes.len() == 1,
                format!("{} nodes after the second round", s.nodes.len()),
            )
        },
    );
    add(
        "should order initialized nodes for scheduling uninitialized nodes when all other nodes are inflight",
        |s| {
            // A hundred NodeClaims Karpenter launched (the fake cloud's cheapest type); one of
            // them (Karpenter picks it at random; here the 58th) has its node, initialized; the
            // others have no node yet.
            let elem = 57;
            for i in 0..100 {
                let name = format!("launched-{i}");
                if i == elem {
                    s.node(
                        &name,
                        json!({"kubernetes.io/hostname": name, "karpenter.sh/nodepool": "default",
                            ZONE: "test-zone-1", CT: "spot", ITYPE: "small-instance-type",
                            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}),
                        json!({"cpu": "1900m", "memory": "2038Mi", "pods": "5"}),
                    );
                    claim_node(s, &name, json!([]), true);
                    label_initialized(s, &name);
                } else {
                    s.extra.push(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default",
                            ZONE: "test-zone-1", CT: "spot", ITYPE: "small-instance-type"}},
                        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                            "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
                        "status": {"providerID": format!("fake:///{name}"),
                            "conditions": [{"type": "Launched", "status": "True",
                                "reason": "Launched", "lastTransitionTime": "2026-12-01T10:00:00Z"}]}}));
                }
            }
            let p = bare(s);
            s.provision(&[pool(None, json!({}))], vec![p]);
            let want = format!("launched-{elem}");
            let got = node(s, "p1")?;
            ensure(
                got == want,
                format!("p1 on {got}, Karpenter expects {want}"),
            )
        },
    );
    add(
        "should schedule pods with the same host port to different nodes",
        |s| {
            let mut pods = vec![bare(s), bare(s)];
            for p in &mut pods {
                p["spec"]["containers"][0]["ports"] =
                    json!([{"containerPort": 8080, "hostPort": 8080}]);
            }
            s.provision(&[pool(None, json!({}))], pods);
            on_distinct_nodes(s, &["p1", "p2"], 2)
        },
    );
}

/// A node no NodeClaim made (`test.Node`), with this allocatable.
fn unowned_node(s: &mut Session, name: &str, allocatable: Value) {
    s.node(name, json!({"kubernetes.io/hostname": name}), allocatable);
}

/// `Existing Nodes` (lines 2606–2727), its `Daemonsets` context left for later.
fn existing_nodes(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should schedule a pod to an existing node unowned by Karpenter",
        |s| {
            unowned_node(
                s,
                "existing",
                json!({"cpu": "10", "memory": "10Gi", "pods": "110"}),
            );
            let p = sized(
                s,
                json!({"requests": {"cpu": "10m"}, "limits": {"cpu": "10m"}}),
            );
            s.provision(&[pool(None, json!({}))], vec![p]);
            ensure(node(s, "p1")? == "existing", "p1 on the existing node")
        },
    );
    add(
        "should schedule multiple pods to an existing node unowned by Karpenter",
        |s| {
            unowned_node(
                s,
                "existing",
                json!({"cpu": "10", "memory": "100Gi", "pods": "110"}),
            );
            let pods = many(
                s,
                100,
                json!({}),
                json!({"requests": {"cpu": "10m"}, "limits": {"cpu": "10m"}}),
            );
            s.provision(&[pool(None, json!({}))], pods);
            for i in 1..=100 {
                let p = format!("p{i}");
                ensure(
                    node(s, &p)? == "existing",
                    format!("{p} on the existing node"),
                )?;
            }
            Ok(())
        },
    );
    add(
        "should order initialized nodes for scheduling uninitialized nodes",
        |s| {
            // A hundred nodes Karpenter launched (the fake cloud's cheapest type), one of them
            // initialized (Karpenter picks it at random; here the 43rd).
            let elem = 42;
            for i in 0..100 {
                let name = format!("launched-{i}");
                s.node(
                    &name,
                    json!({"kubernetes.io/hostname": name, "karpenter.sh/nodepool": "default",
                        ZONE: "test-zone-1", CT: "spot", ITYPE: "small-instance-type",
                        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}),
                    json!({"cpu": "1900m", "memory": "2038Mi", "pods": "5"}),
                );
                claim_node(s, &name, json!([]), i == elem);
                if i == elem {
                    label_initialized(s, &name);
                }
            }
            let p = bare(s);
            s.provision(&[pool(None, json!({}))], vec![p]);
            let want = format!("launched-{elem}");
            let got = node(s, "p1")?;
            ensure(
                got == want,
                format!("p1 on {got}, Karpenter expects {want}"),
            )
        },
    );
    add(
        "should consider a pod incompatible with an existing node but compatible with NodePool",
        |s| {
            unowned_node(
                s,
                "existing",
                json!({"cpu": "10", "memory": "10Gi", "pods": "110"}),
            );
            claim_node(s, "existing", json!([]), true);
            label_initialized(s, "existing");
            let p = requiring(s, json!([req(ZONE, "In", &["test-zone-1"])]));
            // No NodePool yet: nothing can take the pod.
            s.provision(&[], vec![p.clone()]);
            not_scheduled(s, "p1")?;
            let o = s.provision(&[pool(None, json!({}))], vec![p]);
            let n = node(s, "p1").map_err(|e| format!("{e}: {}", o.plan["unschedulable"]))?;
            ensure(n != "existing", "p1 on a new node")
        },
    );
}

/// A DaemonSet (`test.DaemonSet`) whose pods request `requests`, with `spec` merged into its
/// pod template's spec (node selector, affinity).
fn daemonset(s: &mut Session, name: &str, requests: Value, spec: Value) -> Value {
    let mut pod_spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": requests}}]});
    for (k, v) in spec.as_object().into_iter().flatten() {
        pod_spec[k] = v.clone();
    }
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-ds-{name}")},
        "spec": {"selector": {"matchLabels": {"ds": name}},
            "template": {"metadata": {"labels": {"ds": name}}, "spec": pod_spec}}});
    s.extra.push(ds.clone());
    ds
}

/// A pod of the DaemonSet `ds` with these requests, bound to `node` (`ExpectManualBinding`).
fn bind_daemon_pod(s: &mut Session, ds: &Value, requests: Value, node: &str) {
    let mut p = sized(s, json!({ "requests": requests }));
    let name = ds["metadata"]["name"].as_str().unwrap();
    p["metadata"]["labels"] = json!({ "ds": name });
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": name, "uid": ds["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    s.bind(p, node, "Running");
}

/// The `Daemonsets` contexts of `In-Flight Nodes` (lines 2202–2491) and `Existing Nodes`
/// (lines 2728–2784). Karpenter's checks of its cluster state's DaemonSet requests and
/// available CPU are internal; what they imply for placement is checked.
fn daemonsets(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should track daemonset usage separately so we know how many DS resources are remaining to be scheduled",
        |s| {
            let ds = daemonset(s, "ds", json!({"cpu": "1", "memory": "1Gi"}), json!({}));
            let a = cpu_limit(s, "8");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            s.delete("p1");
            bind_daemon_pod(s, &ds, json!({"cpu": "1", "memory": "2Gi"}), &n1);
            // 15.9 allocatable less the DaemonSet pod's 1: room for 14.9 exactly.
            let b = cpu_limit(s, "14.9");
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p3")? == n1, "p3 on the first node")
        },
    );
    add(
        "should handle unexpected daemonset pods binding to the node",
        |s| {
            let ds1 = daemonset(
                s,
                "ds1",
                json!({"cpu": "1", "memory": "1Gi"}),
                json!({"nodeSelector": {"my-node-label": "value"}}),
            );
            daemonset(s, "ds2", json!({"cpu": "1m"}), json!({}));
            let a = cpu_limit(s, "8");
            s.provision(&[pool(None, json!({}))], vec![a]);
            let n1 = node(s, "p1")?;
            // The label appears on the node for a reason Karpenter cannot track.
            node_mut(s, &n1)["metadata"]["labels"]["my-node-label"] = json!("value");
            s.delete("p1");
            bind_daemon_pod(s, &ds1, json!({"cpu": "1", "memory": "2Gi"}), &n1);
            let b = cpu_limit(s, "15.5");
            s.provision(&[pool(None, json!({}))], vec![b]);
            ensure(node(s, "p3")? != n1, "p3 on a new node")
        },
    );
    add(
        "Should properly handle DaemonSet resources with Node Affinity for `karpenter.sh/initialized` and `karpenter.sh/registered`",
        |s| {
            for (name, key) in [
                ("ds1", "karpenter.sh/initialized"),
                ("ds2", "karpenter.sh/registered"),
            ] {
                daemonset(
                    s,
                    name,
                    json!({"cpu": "1"}),
                    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                        {"nodeSelectorTerms": [{"matchExpressions": [req(key, "In", &["true"])]}]}}}}),
                );
            }
            let a = cpu_limit(s, "2");
            let o = s.provision(&[pool(None, json!({}))], vec![a]);
            // Both DaemonSets will run on the node: 2 + 2 CPUs need the 16-CPU type.
            scheduled_with(s, "p1", &[(ITYPE, "arm-instance-type")])?;
            let labels = &o.claims()[0]["labels"];
            ensure(
                labels.get("karpenter.sh/initialized").is_none()
                    && labels.get("karpenter.sh/registered").is_none(),
                format!("the claim's labels: {labels}"),
            )
        },
    );
    add(
        "should not subtract daemonset overhead that is not strictly compatible with an existing node",
        |s| {
            unowned_node(
                s,
                "existing",
                json!({"cpu": "1", "memory": "1Gi", "pods": "110"}),
            );
            node_mut(s, "existing")["metadata"]["labels"]["karpenter.sh/nodepool"] =
                json!("default");
            claim_node(s, "existing", json!([]), true);
            label_initialized(s, "existing");
            daemonset(
                s,
                "ds",
                json!({"cpu": "100", "memory": "100Gi"}),
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [req(ZONE, "In", &["test-zone-1"])]}]}}}}),
            );
            let a = sized(s, json!({"requests": {"cpu": "1", "memory": "1Gi"}}));
            s.provision(&[pool(None, json!({}))], vec![a]);
            ensure(node(s, "p1")? == "existing", "p1 on the existing node")?;
            // Every new node would run the DaemonSet's 100 CPUs: none can take the next pod.
            let b = sized(s, json!({"requests": {"cpu": "1", "memory": "1Gi"}}));
            s.provision(&[pool(None, json!({}))], vec![b]);
            not_scheduled(s, "p2")
        },
    );
}

/// `VolumeUsage`'s catalog: `instance-type` with 1,024 CPUs and 1,024 pods (4 GiB).
fn volume_types() -> Vec<FakeType> {
    let mut t = FakeType::new("instance-type", "amd64", 1024.0, 4.0);
    t.pods = 1024;
    vec![default_offerings(t)]
}

/// `test.StorageClass`: provisioner `test-provisioner`, `zones` as one allowed-topology term
/// (each entry of `terms` a term of its own), binding mode as given (none: the API server's
/// default, Immediate).
fn storage_class(name: &str, zones: &[&str], terms: &[&[&str]], mode: Option<&str>) -> Value {
    let mut spec = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "test-provisioner"});
    let mut topo: Vec<Value> = terms
        .iter()
        .map(|z| json!({"matchLabelExpressions": [{"key": ZONE, "values": z}]}))
        .collect();
    if !zones.is_empty() {
        topo.push(json!({"matchLabelExpressions": [{"key": ZONE, "values": zones}]}));
    }
    if !topo.is_empty() {
        spec["allowedTopologies"] = json!(topo);
    }
    if let Some(m) = mode {
        spec["volumeBindingMode"] = json!(m);
    }
    spec
}

/// `test.PersistentVolumeClaim` in namespace default: bound (`bind-completed`) when it names
/// a volume.
fn claim(name: &str, class: Option<&str>, volume: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(sc) = class {
        c["spec"]["storageClassName"] = json!(sc);
    }
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
        c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    }
    c
}

/// `test.PersistentVolume`: a CSI volume (driver `test.driver`) unless `source` says
/// otherwise, with one node-affinity term per entry of `terms`.
fn volume(name: &str, source: Value, terms: Vec<Value>) -> Value {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "100Gi"}});
    match source.as_object() {
        Some(o) if !o.is_empty() => {
            for (k, v) in o {
                spec[k] = v.clone();
            }
        }
        _ => spec["csi"] = json!({"driver": "test.driver", "volumeHandle": "test-handle"}),
    }
    if !terms.is_empty() {
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": terms}});
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec})
}

fn zone_term(zones: &[&str]) -> Value {
    json!({"matchExpressions": [req(ZONE, "In", zones)]})
}

/// A pending pod using these claims (`PersistentVolumeClaims`).
fn with_claims(s: &mut Session, claims: &[&str]) -> Value {
    let mut p = bare(s);
    p["spec"]["volumes"] = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    p
}

/// Two pods on claims of `claims`, repelling each other across zones (the multi-zone Its).
fn zone_repelling(s: &mut Session, claims: &[&str]) -> Vec<Value> {
    claims
        .iter()
        .map(|c| {
            let mut p = with_claims(s, &[c]);
            p["metadata"]["labels"] = json!({"app": "multi-zone-app"});
            p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "multi-zone-app"}}, "topologyKey": ZONE}]}});
            p
        })
        .collect()
}

fn nodes_launched(s: &Session, want: usize) -> Result<(), String> {
    ensure(
        s.nodes.len() == want,
        format!("{} nodes, Karpenter expects {want}", s.nodes.len()),
    )
}

/// Two pods scheduled in distinct zones among test-zone-1 and test-zone-2.
fn in_two_zones(s: &Session) -> Result<(), String> {
    let z: Vec<Option<String>> = ["p1", "p2"]
        .iter()
        .map(|p| node(s, p).map(|n| s.label_of(&n, ZONE)))
        .collect::<Result<_, _>>()?;
    let ok = z
        .iter()
        .all(|z| matches!(z.as_deref(), Some("test-zone-1" | "test-zone-2")))
        && z[0] != z[1];
    ensure(
        ok,
        format!("zones {z:?}, Karpenter expects test-zone-1 and -2"),
    )
}

/// `VolumeUsage` (lines 2891–3898): what pods' PersistentVolumeClaims require, read from the
/// claims, volumes and StorageClasses in the cluster snapshot.
fn volume_usage(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, volume_types, run);
    add(
        "should launch a single node if all pods use the same PVC",
        |s| {
            s.extra.push(storage_class(
                "my-storage-class",
                &["test-zone-1"],
                &[],
                None,
            ));
            s.extra.push(volume(
                "my-volume",
                json!({}),
                vec![zone_term(&["test-zone-1"])],
            ));
            s.extra.push(claim(
                "my-claim",
                Some("my-storage-class"),
                Some("my-volume"),
            ));
            let pods = (0..100).map(|_| with_claims(s, &["my-claim"])).collect();
            s.provision(&[pool(None, json!({}))], pods);
            nodes_launched(s, 1)?;
            ensure(
                s.label_of(&node(s, "p1")?, ZONE).as_deref() == Some("test-zone-1"),
                "in the volume's zone",
            )
        },
    );
    add("should not fail for NFS volumes", |s| {
        s.extra.push(volume(
            "my-volume",
            json!({"nfs": {"server": "fake.server", "path": "/some/path"}, "storageClassName": "nfs"}),
            vec![zone_term(&["test-zone-1"])],
        ));
        s.extra.push(claim("my-claim", Some(""), Some("my-volume")));
        let pods = (0..5)
            .map(|_| with_claims(s, &["my-claim", "my-claim"]))
            .collect();
        s.provision(&[pool(None, json!({}))], pods);
        nodes_launched(s, 1)
    });
    add("should schedule pods using a PV with multiple zones", |s| {
        for i in 0..2 {
            let (v, c) = (format!("multi-zone-pv-{i}"), format!("multi-zone-pvc-{i}"));
            s.extra.push(volume(
                &v,
                json!({}),
                vec![zone_term(&["test-zone-1"]), zone_term(&["test-zone-2"])],
            ));
            s.extra.push(claim(&c, None, Some(&v)));
        }
        let pods = zone_repelling(s, &["multi-zone-pvc-0", "multi-zone-pvc-1"]);
        s.provision(&[pool(None, json!({}))], pods);
        in_two_zones(s)
    });
    add(
        "should preserve unconstrained PV alternatives after ignoring hostname affinity (for local volumes)",
        |s| hostname_or_zone(s, json!({"local": {"path": "/mnt/local-disks"}})),
    );
    add(
        "should preserve unconstrained PV alternatives after ignoring hostname affinity (for hostpath volumes)",
        |s| hostname_or_zone(s, json!({"hostPath": {"path": "/mnt/local-disks"}})),
    );
    add(
        "should schedule pods using a StorageClass with multiple zones in AllowedTopologies",
        |s| {
            s.extra.push(storage_class(
                "multi-zone-sc",
                &[],
                &[&["test-zone-1"], &["test-zone-2"]],
                Some("WaitForFirstConsumer"),
            ));
            for i in 0..2 {
                s.extra.push(claim(
                    &format!("multi-zone-pvc-{i}"),
                    Some("multi-zone-sc"),
                    None,
                ));
            }
            let pods = zone_repelling(s, &["multi-zone-pvc-0", "multi-zone-pvc-1"]);
            s.provision(&[pool(None, json!({}))], pods);
            in_two_zones(s)
        },
    );
    add(
        "should not launch nodes for pod with storageClass that uses an unsupported topology key",
        |s| {
            // The EBS CSI driver's zone key, with zones no instance type offers.
            let mut sc = storage_class(
                "default-storage-class",
                &[],
                &[],
                Some("WaitForFirstConsumer"),
            );
            sc["provisioner"] = json!("ebs.csi.eks.amazonaws.com");
            sc["allowedTopologies"] = json!([{"matchLabelExpressions": [
                {"key": "topology.ebs.csi.aws.com/zone", "values": ["us-west-2a", "us-west-2b"]}]}]);
            s.extra.push(sc);
            s.extra
                .push(claim("tmp-ephemeral", Some("default-storage-class"), None));
            let p = with_claims(s, &["tmp-ephemeral"]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not launch nodes for pod with unbound volume for volumeBindingMode immediate",
        |s| {
            s.extra.push(storage_class(
                "default-storage-class",
                &["test-zone-1"],
                &[],
                Some("Immediate"),
            ));
            s.extra
                .push(claim("tmp-ephemeral", Some("default-storage-class"), None));
            let p = with_claims(s, &["tmp-ephemeral"]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not launch nodes for pod with deleting persistentVolumeClaim",
        |s| {
            s.extra.push(storage_class(
                "default-storage-class",
                &["test-zone-1"],
                &[],
                Some("WaitForFirstConsumer"),
            ));
            let mut c = claim("tmp-ephemeral", Some("default-storage-class"), None);
            c["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
            c["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
            s.extra.push(c);
            let p = with_claims(s, &["tmp-ephemeral"]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should not launch nodes for pod with bound persistentVolume that is marked for deletion",
        |s| {
            let mut v = volume("pv-deleting", json!({}), vec![]);
            v["spec"]["csi"]["driver"] = json!("other-provider");
            v["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
            v["metadata"]["finalizers"] = json!(["kubernetes.io/pv-protection"]);
            s.extra.push(v);
            s.extra
                .push(claim("p1-tmp-ephemeral", None, Some("pv-deleting")));
            let mut p = bare(s);
            p["spec"]["volumes"] = json!([{"name": "tmp-ephemeral", "ephemeral": {"volumeClaimTemplate": {
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            nodes_launched(s, 0)
        },
    );
    add(
        "should not launch nodes for pod with Lost persistentVolumeClaim",
        |s| {
            s.extra.push(storage_class(
                "default-storage-class",
                &["test-zone-1"],
                &[],
                Some("WaitForFirstConsumer"),
            ));
            let mut c = claim("tmp-ephemeral", Some("default-storage-class"), None);
            c["status"] = json!({"phase": "Lost"});
            s.extra.push(c);
            let p = with_claims(s, &["tmp-ephemeral"]);
            s.provision(&[pool(None, json!({}))], vec![p]);
            not_scheduled(s, "p1")
        },
    );
    add(
        "should handle pods with PVCs with defined volumeName (when pv.kubernetes.io/bind-completed is missing)",
        |s| defined_volume_name(s, false),
    );
    add(
        "should handle pods with PVCs with defined volumeName (when pv.kubernetes.io/bind-completed is present)",
        |s| defined_volume_name(s, true),
    );
}

/// A local or hostPath volume whose first node-affinity term is a hostname (which a new node
/// cannot have) and whose second is a zone no type offers: the pod still gets a node.
fn hostname_or_zone(s: &mut Session, source: Value) -> Result<(), String> {
    s.extra.push(volume(
        "hostname-or-zone-pv",
        source,
        vec![
            json!({"matchExpressions": [req("kubernetes.io/hostname", "In", &["existing-host"])]}),
            zone_term(&["invalid-zone"]),
        ],
    ));
    s.extra.push(claim(
        "hostname-or-zone-pvc",
        None,
        Some("hostname-or-zone-pv"),
    ));
    let p = with_claims(s, &["hostname-or-zone-pvc"]);
    s.provision(&[pool(None, json!({}))], vec![p]);
    node(s, "p1").map(|_| ())
}

/// A claim naming a volume, with or without `bind-completed`: kube-scheduler waits for it.
fn defined_volume_name(s: &mut Session, present: bool) -> Result<(), String> {
    s.extra.push(storage_class(
        "default-storage-class",
        &["test-zone-1"],
        &[],
        Some("WaitForFirstConsumer"),
    ));
    let mut v = volume("tmp-pv", json!({}), vec![]);
    v["spec"]["csi"]["driver"] = json!("other-provider");
    s.extra.push(v);
    let mut c = claim(
        "tmp-ephemeral",
        Some("default-storage-class"),
        Some("tmp-pv"),
    );
    if !present {
        c["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("annotations");
    }
    s.extra.push(c);
    let p = with_claims(s, &["tmp-ephemeral"]);
    s.provision(&[pool(None, json!({}))], vec![p]);
    if present {
        node(s, "p1").map(|_| ())
    } else {
        not_scheduled(s, "p1")
    }
}

/// A pending pod requesting 100M of memory (the `Deleting Nodes` pods), owned by `owner`
/// (`(kind, name)`), labelled `labels`.
fn hundred_megs(s: &mut Session, owner: Option<(&str, &str)>, labels: Value) -> Value {
    let mut p = sized(s, json!({"requests": {"memory": "100M"}}));
    if let Some((kind, name)) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
            "name": name, "uid": format!("uid-{name}"), "controller": true, "blockOwnerDeletion": true}]);
    }
    if labels.as_object().is_some_and(|o| !o.is_empty()) {
        p["metadata"]["labels"] = labels;
    }
    p
}

/// `cluster.MarkForDeletion`: the node is going (its deletion requested, held by the
/// termination finalizer; Karpenter's disrupted taint on it).
fn mark_for_deletion(s: &mut Session, node: &str) {
    let n = node_mut(s, node);
    n["metadata"]["deletionTimestamp"] = json!("2026-12-01T11:00:00Z");
    n["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    n["spec"]["taints"] = json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]);
}

/// `ExpectEvicted`: the bound pod is terminating (deletion requested, not yet gone).
fn evicted(s: &mut Session, pod: &str) {
    let p = s
        .bound
        .iter_mut()
        .find(|p| p["metadata"]["name"] == pod)
        .expect("the pod is bound");
    p["metadata"]["deletionTimestamp"] = json!("2026-12-01T11:00:05Z");
}

/// One round for `pod`, its node marked for deletion, `then` applied, one more round with
/// nothing pending: `nodes` small-instance-type nodes then.
fn from_deleting_node(
    s: &mut Session,
    pod: Value,
    then: fn(&mut Session),
    nodes: usize,
) -> Result<(), String> {
    s.provision(&[pool(None, json!({}))], vec![pod]);
    let n = node(s, "p1")?;
    ensure(
        s.label_of(&n, ITYPE).as_deref() == Some("small-instance-type"),
        "p1 on small-instance-type",
    )?;
    mark_for_deletion(s, &n);
    then(s);
    s.provision(&[pool(None, json!({}))], vec![]);
    nodes_launched(s, nodes)?;
    for n in &s.nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        ensure(
            s.label_of(name, ITYPE).as_deref() == Some("small-instance-type"),
            format!("{name} is small-instance-type"),
        )?;
    }
    Ok(())
}

/// `Deleting Nodes` (lines 4060–4316): pods of a node being deleted, planned for ahead of
/// their eviction where they will come back.
fn deleting_nodes(out: &mut Vec<Scenario>) {
    let mut add = |it, run: Body| add_to(out, it, default_types, run);
    add(
        "should re-schedule pods from a deleting node when pods are active",
        |s| {
            let p = hundred_megs(s, None, json!({}));
            from_deleting_node(s, p, |_| {}, 2)
        },
    );
    add(
        "should not re-schedule pods from a deleting node when pods are not active",
        |s| {
            let p = hundred_megs(s, None, json!({}));
            from_deleting_node(s, p, |s| evicted(s, "p1"), 1)
        },
    );
    add(
        "should not re-schedule pods from a deleting node when pods are owned by a DaemonSet",
        |s| {
            let ds = daemonset(s, "ds", json!({}), json!({}));
            // Karpenter's node: a NodeClaim's, small-instance-type, 32 CPUs allocatable.
            s.node(
                "deleting",
                json!({"kubernetes.io/hostname": "deleting", "karpenter.sh/nodepool": "default",
                    ITYPE: "small-instance-type", CT: "on-demand", ZONE: "test-zone-1a"}),
                json!({"cpu": "32", "pods": "110"}),
            );
            claim_node(s, "deleting", json!([]), true);
            label_initialized(s, "deleting");
            bind_daemon_pod(s, &ds, json!({"memory": "100M"}), "deleting");
            mark_for_deletion(s, "deleting");
            evicted(s, "p1");
            s.provision(&[pool(None, json!({}))], vec![]);
            nodes_launched(s, 1)
        },
    );
    add(
        "should not reschedule pods from a deleting node when pods are not active and they are owned by a ReplicaSet",
        |s| {
            let p = hundred_megs(s, Some(("ReplicaSet", "rs")), json!({}));
            from_deleting_node(s, p, |s| evicted(s, "p1"), 1)
        },
    );
    add(
        "should reschedule pods from a deleting node when pods are not active and they are owned by a StatefulSet",
        |s| {
            let p = hundred_megs(s, Some(("StatefulSet", "ss")), json!({}));
            from_deleting_node(s, p, |s| evicted(s, "p1"), 2)
        },
    );
    let pdb = |name: &str, field: &str, value: Value| {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"test": "test"}}, field: value}})
    };
    let entries: [(&'static str, Vec<Value>); 4] = [
        (
            "should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs (0 max unavailable)",
            vec![pdb("pdb", "maxUnavailable", json!(0))],
        ),
        (
            "should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs (0% max unavailable)",
            vec![pdb("pdb", "maxUnavailable", json!("0%"))],
        ),
        (
            "should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs (100% min available)",
            vec![pdb("pdb", "minAvailable", json!("100%"))],
        ),
        (
            "should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs (multiple PDBs on the same pod)",
            vec![
                pdb("pdb-1", "minAvailable", json!("100%")),
                pdb("pdb-2", "minAvailable", json!("100%")),
            ],
        ),
    ];
    for (it, pdbs) in entries {
        out.push(Scenario {
            file: SUITE,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let s = &mut Session::new(dir, default_types());
                let p = hundred_megs(s, None, json!({"test": "test"}));
                s.extra.extend(pdbs.iter().cloned());
                from_deleting_node(s, p, |_| {}, 1)
            }),
        });
    }
}
