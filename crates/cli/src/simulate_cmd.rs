//! `capstan simulate`: runs a scenario (the built-in day by default) through the simulator,
//! writes `summary.json` and `report.html`, or runs many seeds with random faults and checks
//! the invariants after each.

use crate::input::{self, InputError};
use capstan_sim::scenario::{self, Compiled, Scenario};
use capstan_sim::{Options, Outcome, Summary};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Reads a scenario file, or the built-in one.
pub fn load(path: Option<&str>) -> Result<Compiled, InputError> {
    let (file, text) = match path {
        Some(p) => (p.to_string(), input::read(p)?),
        None => (
            "<built-in default scenario>".to_string(),
            scenario::DEFAULT.to_string(),
        ),
    };
    Scenario::parse(&file, &text).map_err(|e| InputError(e.to_string()))
}

/// `summary.json`: the summary with a trailing newline.
pub fn summary_json(s: &Summary) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(s).expect("a summary serializes")
    )
}

/// Runs one seed; `progress` receives simulated seconds.
pub fn run_one(sc: &Compiled, seed: u64, faults: bool, progress: &mut dyn FnMut(f64)) -> Outcome {
    let started = std::time::Instant::now();
    let mut o = capstan_sim::run(
        sc,
        &Options {
            seed,
            faults,
            ..Default::default()
        },
        progress,
    );
    o.summary.wall_seconds = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    o
}

/// Writes `summary.json` and `report.html` into `dir`.
pub fn write(dir: &Path, o: &Outcome) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.json"), summary_json(&o.summary))?;
    std::fs::write(dir.join("report.html"), capstan_sim::report::html(o))?;
    Ok(())
}

/// One seed of a many-seed run that broke an invariant.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SeedFailure {
    pub seed: u64,
    pub failures: Vec<String>,
    pub replay: String,
}

/// What a many-seed run found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SeedsReport {
    pub scenario: String,
    pub seeds: u64,
    pub faults: bool,
    pub passed: u64,
    pub failed: Vec<SeedFailure>,
    pub pods_lost: u64,
    pub leaked_instances: u64,
    pub budget_violations: u64,
    pub pdb_violations: u64,
    pub pods_stuck: u64,
    pub spot_interruptions: u64,
    pub controller_restarts: u64,
    pub double_launches: u64,
    pub writes_refused_by_preconditions: u64,
    pub writes_from_deposed_leaders: u64,
    pub wall_seconds: f64,
}

/// Runs seeds `first..first + n` on `workers` threads; `done` is called after each seed.
pub fn run_seeds(
    sc: &Compiled,
    scenario_arg: Option<&str>,
    first: u64,
    n: u64,
    faults: bool,
    workers: usize,
    done: &(dyn Fn() + Sync),
) -> SeedsReport {
    let started = std::time::Instant::now();
    let next = AtomicU64::new(first);
    let results: Mutex<Vec<Summary>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= first + n {
                        break;
                    }
                    let opts = Options {
                        seed,
                        faults,
                        ..Default::default()
                    };
                    let o = capstan_sim::run(sc, &opts, &mut |_| {});
                    results.lock().expect("results").push(o.summary);
                    done();
                }
            });
        }
    });
    let mut all = results.into_inner().expect("results");
    all.sort_by_key(|s| s.seed);
    let mut r = SeedsReport {
        scenario: sc.scenario.name.clone(),
        seeds: n,
        faults,
        ..Default::default()
    };
    for s in &all {
        let f = s.failures();
        if f.is_empty() {
            r.passed += 1;
        } else {
            let mut replay = format!("capstan simulate --seed {}", s.seed);
            if faults {
                replay.push_str(" --faults");
            }
            if let Some(p) = scenario_arg {
                replay.push_str(&format!(" --scenario {p}"));
            }
            r.failed.push(SeedFailure {
                seed: s.seed,
                failures: f,
                replay,
            });
        }
        r.pods_lost += s.pods_lost;
        r.leaked_instances += s.leaked_instances;
        r.budget_violations += s.budget_violations;
        r.pdb_violations += s.pdb_violations;
        r.pods_stuck += s.pods_stuck;
        r.spot_interruptions += s.spot_interruptions;
        r.controller_restarts += s.controller_restarts;
        r.double_launches += s.double_launches;
        r.writes_refused_by_preconditions += s.writes_refused_by_preconditions;
        r.writes_from_deposed_leaders += s.writes_from_deposed_leaders;
    }
    r.wall_seconds = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    r
}

/// The process's peak resident memory in MiB (Linux `VmHWM`), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}
