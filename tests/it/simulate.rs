use std::process::Command;

fn capstan(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("capstan-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The built-in faults scenario, shortened.
fn short_scenario(dir: &std::path::Path, minutes: u32) -> String {
    let text =
        capstan_sim::scenario::FAULTS.replace("duration: 3h", &format!("duration: {minutes}m"));
    let p = dir.join("short.yaml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn simulate_writes_a_summary_and_a_self_contained_report() {
    let d = scratch("report");
    let s = short_scenario(&d, 20);
    let out = capstan(
        &[
            "simulate",
            "--scenario",
            &s,
            "--seed",
            "3",
            "--out",
            "r",
            "--output",
            "json",
        ],
        &d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("r/summary.json")).unwrap()).unwrap();
    assert_eq!(printed, file);
    for field in [
        "seed",
        "simulated_seconds",
        "cost_usd",
        "cost_lower_bound_usd",
        "cost_over_bound",
        "pods_launched_for",
        "pod_launch_request_seconds_p50",
        "pod_launch_request_seconds_p99",
        "pod_pending_seconds_p50",
        "pod_pending_seconds_p99",
        "pod_pending_seconds_max",
        "nodes_launched",
        "nodes_terminated",
        "spot_interruptions",
        "pods_lost",
        "budget_violations",
        "pdb_violations",
        "leaked_instances",
        "wall_seconds",
    ] {
        assert!(file.get(field).is_some(), "summary.json lacks {field}");
    }
    assert_eq!(file["seed"], 3);
    assert_eq!(file["simulated_seconds"], 1200.0);
    let html = std::fs::read_to_string(d.join("r/report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(!html.contains("<script") && !html.contains("src="));
}

#[test]
fn two_runs_of_one_seed_write_the_same_summary_but_for_wall_time() {
    let d = scratch("determinism");
    let s = short_scenario(&d, 20);
    let read = |out: &str| {
        let o = capstan(
            &[
                "simulate",
                "--scenario",
                &s,
                "--out",
                out,
                "--output",
                "json",
            ],
            &d,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(d.join(out).join("summary.json")).unwrap();
        text.lines()
            .filter(|l| !l.contains("wall_seconds"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(read("a"), read("b"));
}

#[test]
fn a_bad_scenario_exits_2_naming_the_file_and_field() {
    let d = scratch("bad");
    let text = capstan_sim::scenario::FAULTS.replace("maxReplicas: 200", "maxReplicas: 0");
    std::fs::write(d.join("bad.yaml"), text).unwrap();
    let out = capstan(&["simulate", "--scenario", "bad.yaml"], &d);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("workloads[0].hpa.maxReplicas"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn many_seeds_with_faults_report_each_failure_with_a_replay_command() {
    let d = scratch("seeds");
    let s = short_scenario(&d, 15);
    let out = capstan(
        &[
            "simulate",
            "--scenario",
            &s,
            "--seeds",
            "2",
            "--faults",
            "--output",
            "json",
        ],
        &d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["seeds"], 2);
    assert_eq!(v["passed"], 2);
    assert_eq!(v["failed"].as_array().unwrap().len(), 0);
}

#[test]
fn a_campaign_run_as_shards_and_merged_gives_the_totals_of_one_unsharded_run() {
    let d = scratch("shards");
    let s = short_scenario(&d, 15);
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "simulate",
            "--scenario",
            &s,
            "--seed",
            "11",
            "--seeds",
            "5",
            "--faults",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = capstan(&args, &d);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let whole = run(&[]);
    let mut files = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let r = run(&["--shard", &shard]);
        let f = d.join(format!("shard-{i}.json"));
        std::fs::write(&f, r.to_string()).unwrap();
        files.push(f.display().to_string());
    }
    // Given out of order, as files from a Job's pods come.
    files.reverse();
    let mut args = vec!["campaign", "merge", "--output", "json"];
    args.extend(files.iter().map(String::as_str));
    let out = capstan(&args, &d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let totals = |v: &serde_json::Value| -> serde_json::Value {
        let mut v = v.clone();
        let o = v.as_object_mut().unwrap();
        o.remove("wall_seconds");
        o.remove("shard");
        v
    };
    assert_eq!(totals(&merged), totals(&whole));
    assert_eq!(merged["first_seed"], 11);
    assert_eq!(merged["seeds"], 5);

    // Two copies of one shard, or a shard short, do not make a campaign: exit 2, saying why.
    let out = capstan(&["campaign", "merge", &files[0], &files[0], &files[1]], &d);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shard-2.json") && err.contains("given twice"),
        "{err}"
    );
    let out = capstan(&["campaign", "merge", &files[0], &files[1]], &d);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shards [0] of 3 are missing"), "{err}");
}
