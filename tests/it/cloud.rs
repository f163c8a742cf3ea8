use std::io::Write;
use std::process::{Command, Stdio};

fn check(config: &str, extra: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["cloud", "check", "--config", "-"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_fake_cloud_configuration_resolves_against_the_builtin_catalog() {
    let out = check(
        "seed: 3\nspot: {enabled: true}\napi: {ratePerSecond: 5, burst: 10}\n",
        &["--output", "json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["seed"], 3);
    assert_eq!(v["instance_types"], 1345);
    assert_eq!(v["pools"], 1345 * 3 * 2);
    assert_eq!(v["zones"][0], "us-east-1a");
}

#[test]
fn a_bad_fake_cloud_configuration_exits_2_naming_file_and_field() {
    let out = check("boot:\n  minSeconds: 10\n  maxSecs: 20\n", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("error: -: boot.maxSecs: unknown field `maxSecs`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn a_warm_pool_is_checked_against_the_catalog_and_counted() {
    let ok = check(
        "warmPool:\n  pools: [{instanceType: m6a.2xlarge, zone: us-east-1b, capacityType: spot, size: 3}]\n  start: {minSeconds: 5, maxSeconds: 15}\n",
        &["--output", "json"],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["warm_pool_instances"], 3);
    assert_eq!(v["warm_start_seconds"], serde_json::json!([5.0, 15.0]));
    let bad = check(
        "warmPool:\n  pools: [{instanceType: m6a.2xlarge, zone: us-west-2a, size: 3}]\n",
        &[],
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(
        err.starts_with(
            "error: -: warmPool.pools[0].zone: \"us-west-2a\" is not one of the cloud's zones"
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}
