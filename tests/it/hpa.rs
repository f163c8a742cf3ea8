use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

fn decide(input: &Value) -> (Value, std::process::ExitStatus) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["hpa", "decide", "-", "--output", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), out.status)
}

fn tick(replicas: i64, cpu: Option<&str>, history: Option<&Value>) -> Value {
    let pods: Vec<Value> = (0..replicas)
        .map(|i| json!({"name": format!("web-{i}"), "phase": "Running", "ready": true, "requests": {"cpu": "1"}}))
        .collect();
    let usage: serde_json::Map<String, Value> = match cpu {
        Some(c) => (0..replicas)
            .map(|i| (format!("web-{i}"), json!(c)))
            .collect(),
        None => serde_json::Map::new(),
    };
    let mut t = json!({
        "spec": {"minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]},
        "currentReplicas": replicas,
        "pods": pods,
        "metrics": {"resource": {"cpu": usage}}
    });
    if let Some(h) = history {
        t["history"] = h.clone();
    }
    t
}

/// Ages every remembered entry by `dt` seconds.
fn aged(history: &Value, dt: f64) -> Value {
    let mut h = history.clone();
    for key in ["recommendations", "scaleUpEvents", "scaleDownEvents"] {
        for e in h[key].as_array_mut().unwrap() {
            e["ageSeconds"] = json!(e["ageSeconds"].as_f64().unwrap() + dt);
        }
    }
    h
}

#[test]
fn hpa_decide_reproduces_the_downscale_window_sequence() {
    // 3 replicas at 100% → 6; t=240 at 50% → 6; t=400 at 15% → 6 (the 6 of t=240 is in the
    // window); t=541 at 15% → 2; t=600 without the metric → 2 with ScalingActive False.
    let steps = [
        (0.0, Some("1"), 6),
        (240.0, Some("500m"), 6),
        (400.0, Some("150m"), 6),
        (541.0, Some("150m"), 2),
        (600.0, None, 2),
    ];
    let mut history: Option<Value> = None;
    let mut replicas = 3;
    let mut last = 0.0;
    for (t, cpu, want) in steps {
        let h = history.as_ref().map(|h| aged(h, t - last));
        last = t;
        let (d, _) = decide(&tick(replicas, cpu, h.as_ref()));
        assert_eq!(d["desiredReplicas"], want, "t={t}: {d:#}");
        let active = d["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "ScalingActive")
            .unwrap();
        if cpu.is_some() {
            assert_eq!(active["status"], "True", "t={t}");
        } else {
            assert_eq!(active["status"], "False");
            assert_eq!(active["reason"], "FailedGetResourceMetric");
            assert_eq!(d["rescale"], false);
        }
        replicas = d["desiredReplicas"].as_i64().unwrap();
        history = Some(d["history"].clone());
    }
}

#[test]
fn a_list_of_ticks_gives_a_list_of_decisions() {
    let (d, _) = decide(&json!([
        tick(3, Some("1"), None),
        tick(2, Some("500m"), None)
    ]));
    let list = d.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["desiredReplicas"], 6);
    assert_eq!(list[1]["desiredReplicas"], 2);
    assert_eq!(list[0]["metrics"][0]["utilization"], 100);
}

#[test]
fn a_bad_tick_exits_2_naming_the_field() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["hpa", "decide", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"spec: {maxReplicas: 3}\ncurrentReplicas: three\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("error: -: tick: currentReplicas: invalid type"),
        "{err}"
    );
}

/// Kubernetes' own HPA cases (`replica_calculator_test.go`, `horizontal_test.go`), transcribed
/// into `hpa decide` ticks in `tests/data/hpa-upstream.json`: every one must give upstream's
/// replica count (and, where upstream's calculator fails, a failed metric and no rescale).
#[test]
fn hpa_decide_matches_upstream_on_every_transcribed_case() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/hpa-upstream.json"
    ))
    .unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(cases.len() >= 90, "{} cases", cases.len());
    let inputs: Vec<Value> = cases.iter().map(|c| c["input"].clone()).collect();
    let (out, _) = decide(&Value::Array(inputs));
    let out = out.as_array().unwrap();
    assert_eq!(out.len(), cases.len());
    let mut wrong = Vec::new();
    for (c, d) in cases.iter().zip(out) {
        let want = &c["expect"]["desiredReplicas"];
        let mut ok = &d["desiredReplicas"] == want;
        if c["expect"]["metricsError"] == json!(true) {
            ok &= d["rescale"] == json!(false)
                && d["metrics"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| !m["error"].is_null()));
        }
        if !ok {
            wrong.push(format!(
                "{} ({}): want {want}, got {} — {}",
                c["name"].as_str().unwrap(),
                c["source"].as_str().unwrap(),
                d["desiredReplicas"],
                c["note"].as_str().unwrap()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
