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
