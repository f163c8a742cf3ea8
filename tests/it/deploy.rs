//! What `deploy/` ships and the code must agree with: the Grafana dashboard queries only
//! metrics capstan serves, with labels they carry.

use capstan_controller::metrics::{ALL, Described};
use serde_json::Value;

/// Every `expr` in a Grafana dashboard, and every template query.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => queries(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

/// (metric name, label keys in the selector right after it) for every metric a PromQL
/// expression names.
fn metric_refs(expr: &str) -> Vec<(String, Vec<String>)> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if ident(b[i]) && (i == 0 || !ident(b[i - 1])) && !b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let name = &expr[start..i];
            if ["karpenter_", "capstan_", "leader_election_"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                let mut keys = Vec::new();
                if b.get(i) == Some(&b'{') {
                    let end = expr[i..].find('}').expect("a selector closes") + i;
                    for m in expr[i + 1..end].split(',') {
                        let k = m
                            .split(['=', '!', '~'])
                            .next()
                            .unwrap_or("")
                            .trim()
                            .to_string();
                        if !k.is_empty() {
                            keys.push(k);
                        }
                    }
                    i = end;
                }
                out.push((name.to_string(), keys));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The described metric a sample name belongs to, and the labels its samples may carry.
fn described(name: &str) -> Option<(Described, Vec<&'static str>)> {
    if let Some(d) = ALL.iter().find(|d| d.name == name) {
        let mut labels = d.labels.to_vec();
        if d.kind == "summary" {
            labels.push("quantile");
        }
        return Some((*d, labels));
    }
    for (suffix, kinds) in [
        ("_bucket", &["histogram"][..]),
        ("_count", &["histogram", "summary"][..]),
        ("_sum", &["histogram", "summary"][..]),
    ] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(d) = ALL
                .iter()
                .find(|d| d.name == base && kinds.contains(&d.kind))
            {
                let mut labels = d.labels.to_vec();
                if suffix == "_bucket" {
                    labels.push("le");
                }
                return Some((*d, labels));
            }
        }
    }
    None
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_capstan_serves_with_their_labels() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/capstan-dashboard.json"
    );
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).expect("JSON");
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    assert!(exprs.len() >= 20, "{} queries", exprs.len());
    let mut named = std::collections::BTreeSet::new();
    for e in &exprs {
        let refs = metric_refs(e);
        for (name, keys) in refs {
            let Some((d, labels)) = described(&name) else {
                panic!("the dashboard queries {name}, which capstan does not serve: {e}");
            };
            for k in keys {
                assert!(
                    labels.contains(&k.as_str()),
                    "the dashboard selects {name} by {k}, a label it does not carry: {e}"
                );
            }
            named.insert(d.name);
        }
    }
    // It shows capacity, cost, pending pods, scheduling latency, disruption and cloud errors.
    for want in [
        "karpenter_nodes_allocatable",
        "capstan_nodepools_cost_per_hour",
        "karpenter_pods_state",
        "karpenter_scheduler_scheduling_duration_seconds",
        "karpenter_voluntary_disruption_decisions_total",
        "karpenter_cloudprovider_errors_total",
    ] {
        assert!(named.contains(want), "the dashboard does not show {want}");
    }
}

#[test]
fn metric_references_are_found_with_the_labels_their_selectors_name() {
    let refs = metric_refs(
        r#"sum by (le) (rate(karpenter_x_bucket{a="1", b=~"x"}[5m])) * on (z) capstan_y"#,
    );
    assert_eq!(
        refs,
        vec![
            (
                "karpenter_x_bucket".to_string(),
                vec!["a".to_string(), "b".to_string()]
            ),
            ("capstan_y".to_string(), vec![]),
        ]
    );
    assert!(described("karpenter_nodes_termination_duration_seconds_count").is_some());
    assert!(described("karpenter_nodes_termination_duration_seconds_bucket").is_none());
    assert!(described("karpenter_no_such_metric").is_none());
}
