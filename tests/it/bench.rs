use std::process::Command;

fn capstan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
}

#[test]
fn bench_scheduling_prints_one_json_row_per_pod_count() {
    let out = capstan()
        .args([
            "bench",
            "scheduling",
            "--pods",
            "10",
            "--pods",
            "250",
            "--instance-types",
            "40",
            "--runs",
            "1",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, pods) in rows.iter().zip([10, 250]) {
        assert_eq!(row["pods"], pods);
        assert_eq!(row["instance_types"], 40);
        assert_eq!(row["unschedulable"], 0);
        for key in ["seconds", "pods_per_second", "nodes"] {
            assert!(row[key].is_number(), "{key} in {row}");
        }
    }
    assert!(
        rows[1]["nodes"].as_u64().unwrap() >= 50,
        "50 hostname anti-affinity pods need 50 nodes"
    );
}

#[test]
fn bench_scheduling_prints_a_table_by_default() {
    let out = capstan()
        .args([
            "bench",
            "scheduling",
            "--pods",
            "5",
            "--instance-types",
            "10",
            "--runs",
            "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("PODS  INSTANCE TYPES  SECONDS"), "{text}");
}

#[test]
fn a_bad_flag_exits_with_code_2() {
    let out = capstan()
        .args(["bench", "scheduling", "--pods", "many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("invalid value 'many'"), "{err}");
}

#[test]
fn bench_scale_runs_the_large_day_scaled_to_each_node_count_and_times_the_controller() {
    let out = capstan()
        .args([
            "bench",
            "scale",
            "--nodes",
            "100",
            "--nodes",
            "300",
            "--duration",
            "15m",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, nodes) in rows.iter().zip([100, 300]) {
        assert_eq!(row["nodes"], nodes);
        assert_eq!(row["simulated_seconds"], 900.0);
        assert_eq!(row["scenario"], format!("large-{nodes}-nodes"));
        for key in [
            "wall_seconds",
            "controller_seconds",
            "peak_pods",
            "wall_vs_first",
        ] {
            assert!(row[key].is_number(), "{key} in {row}");
        }
        let plan = &row["slowest_plan"];
        assert!(plan["work"].as_u64().unwrap() > 0, "{row}");
        assert!(plan["seconds"].as_f64().unwrap() > 0.0, "{row}");
        // One controller pass timed on a synthetic cluster of the row's size.
        assert_eq!(row["pass"]["nodes"], nodes);
        assert_eq!(row["pass"]["pending"], 1000);
        assert!(row["pass"]["seconds"].as_f64().unwrap() > 0.0, "{row}");
    }
    // Three times the cluster: more pods at peak in the same quarter hour.
    assert!(rows[1]["peak_pods"].as_u64() > rows[0]["peak_pods"].as_u64());
    assert_eq!(rows[0]["wall_vs_first"], 1.0);
}

#[test]
fn bench_scale_prints_the_committed_xlarge_scenario() {
    let out = capstan()
        .args(["bench", "scale", "--print-scenario", "10000"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        include_str!("../../crates/sim/scenarios/xlarge.yaml")
    );
    for args in [
        ["--nodes", "0"],
        ["--duration", "0s"],
        ["--duration", "soon"],
    ] {
        let bad = capstan()
            .args(["bench", "scale"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(bad.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(args[0]), "{args:?}: {err}");
    }
}

#[test]
fn bench_pass_times_a_plan_and_an_evaluation_of_a_synthetic_cluster() {
    let out = capstan()
        .args([
            "bench",
            "pass",
            "--nodes",
            "200",
            "--pending",
            "300",
            "--runs",
            "1",
        ])
        .args(["--output", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["nodes"], 200);
    assert_eq!(row["pending"], 300);
    let placed = ["on_existing", "on_new", "unschedulable"]
        .iter()
        .map(|k| row[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(placed, 300, "{row}");
    assert!(row["pods"].as_u64().unwrap() > 200 * 10, "{row}");
    for k in ["plan_seconds", "evaluation_seconds"] {
        assert!(row[k].as_f64().unwrap() > 0.0, "{k}: {row}");
    }
    for flag in ["--nodes", "--pending", "--runs", "--pods-per-node"] {
        let bad = capstan()
            .args(["bench", "pass", flag, "0"])
            .output()
            .unwrap();
        assert_eq!(bad.status.code(), Some(2), "{flag}");
        let err = String::from_utf8(bad.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
    }
}
