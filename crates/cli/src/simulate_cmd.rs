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

/// Writes `summary.json` and `report.html` into `dir`, and `forecast.json` (what each
/// forecasting workload learned) when a workload forecasts.
pub fn write(dir: &Path, o: &Outcome) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.json"), summary_json(&o.summary))?;
    std::fs::write(dir.join("report.html"), capstan_sim::report::html(o))?;
    if !o.forecasts.is_empty() {
        let text = serde_json::to_string(&o.forecasts).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("forecast.json"), text + "\n")?;
    }
    Ok(())
}

/// One seed of a many-seed run that broke an invariant.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeedFailure {
    pub seed: u64,
    pub failures: Vec<String>,
    pub replay: String,
}

/// What a many-seed run found.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SeedsReport {
    pub scenario: String,
    /// Seeds `first_seed..first_seed + seeds` (for a merged report: the shards' union).
    #[serde(default)]
    pub first_seed: u64,
    pub seeds: u64,
    /// `INDEX/COUNT` for one shard of a campaign; the shard count for a merged one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
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
        first_seed: first,
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

/// Shard `index` of `count` of seeds `first..first + n`: its first seed and how many (the
/// remainder spread over the first shards, so every seed is in exactly one shard).
pub fn shard_range(first: u64, n: u64, index: u64, count: u64) -> (u64, u64) {
    let start = index * n / count;
    let end = (index + 1) * n / count;
    (first + start, end - start)
}

/// Parses `INDEX/COUNT` (`3/10`): index below count, count positive.
pub fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (i, k) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected INDEX/COUNT, e.g. 0/10"))?;
    let i: u64 = i
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: INDEX is not a number"))?;
    let k: u64 = k
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: COUNT is not a number"))?;
    if k == 0 || i >= k {
        return Err(format!(
            "{s:?}: INDEX must be below COUNT, and COUNT positive"
        ));
    }
    Ok((i, k))
}

/// Why shard reports do not merge into one campaign.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("no shard reports to merge")]
    Empty,
    #[error(
        "{file}: scenario {got:?}, faults {got_faults}; the first shard ran {want:?}, faults {want_faults}"
    )]
    Mismatch {
        file: String,
        got: String,
        got_faults: bool,
        want: String,
        want_faults: bool,
    },
    #[error("{file}: seeds {start}..{end} overlap seeds the shards before it ran")]
    Overlap { file: String, start: u64, end: u64 },
    #[error("seeds {start}..{end} are in no shard")]
    Gap { start: u64, end: u64 },
    #[error("{file}: shard {got}, but the others are of {count} shards")]
    ShardCount {
        file: String,
        got: String,
        count: u64,
    },
    #[error("shards {missing:?} of {count} are missing")]
    MissingShards { missing: Vec<u64>, count: u64 },
    #[error("{file}: shard {index} is given twice")]
    DuplicateShard { file: String, index: u64 },
}

/// One report of the shards' reports (`(file, report)`): totals summed, failures listed in
/// seed order, wall time the slowest shard's (they run side by side). The shards must be of
/// one scenario and fault setting and cover one run of seeds exactly once.
pub fn merge(shards: &[(String, SeedsReport)]) -> Result<SeedsReport, MergeError> {
    // Shards that say which they are (`I/K`) must be all K of them, once each: a shard
    // missing at either end would otherwise merge into a shorter run that looks whole.
    let mut count = None;
    let mut seen = std::collections::BTreeSet::new();
    for (file, r) in shards {
        let Some((i, k)) = r.shard.as_deref().and_then(|s| parse_shard(s).ok()) else {
            continue;
        };
        if *count.get_or_insert(k) != k {
            return Err(MergeError::ShardCount {
                file: file.clone(),
                got: format!("{i}/{k}"),
                count: count.unwrap_or(k),
            });
        }
        if !seen.insert(i) {
            return Err(MergeError::DuplicateShard {
                file: file.clone(),
                index: i,
            });
        }
    }
    if let Some(k) = count {
        let missing: Vec<u64> = (0..k).filter(|i| !seen.contains(i)).collect();
        if !missing.is_empty() {
            return Err(MergeError::MissingShards { missing, count: k });
        }
    }
    let mut sorted: Vec<&(String, SeedsReport)> = shards.iter().collect();
    // Empty shards (more shards than seeds) cover nothing: first, so they never look like
    // an overlap.
    sorted.sort_by_key(|(_, r)| (r.first_seed, r.seeds));
    let (_, first) = sorted.first().ok_or(MergeError::Empty)?;
    let mut m = SeedsReport {
        scenario: first.scenario.clone(),
        first_seed: first.first_seed,
        faults: first.faults,
        shard: None,
        ..Default::default()
    };
    let mut next = first.first_seed;
    for (file, r) in sorted {
        if r.scenario != m.scenario || r.faults != m.faults {
            return Err(MergeError::Mismatch {
                file: file.clone(),
                got: r.scenario.clone(),
                got_faults: r.faults,
                want: m.scenario.clone(),
                want_faults: m.faults,
            });
        }
        if r.seeds == 0 {
            continue;
        }
        if r.first_seed < next {
            return Err(MergeError::Overlap {
                file: file.clone(),
                start: r.first_seed,
                end: r.first_seed + r.seeds,
            });
        }
        if r.first_seed > next {
            return Err(MergeError::Gap {
                start: next,
                end: r.first_seed,
            });
        }
        next = r.first_seed + r.seeds;
        m.seeds += r.seeds;
        m.passed += r.passed;
        m.failed.extend(r.failed.iter().cloned());
        m.pods_lost += r.pods_lost;
        m.leaked_instances += r.leaked_instances;
        m.budget_violations += r.budget_violations;
        m.pdb_violations += r.pdb_violations;
        m.pods_stuck += r.pods_stuck;
        m.spot_interruptions += r.spot_interruptions;
        m.controller_restarts += r.controller_restarts;
        m.double_launches += r.double_launches;
        m.writes_refused_by_preconditions += r.writes_refused_by_preconditions;
        m.writes_from_deposed_leaders += r.writes_from_deposed_leaders;
        m.wall_seconds = m.wall_seconds.max(r.wall_seconds);
    }
    m.failed.sort_by_key(|f| f.seed);
    Ok(m)
}

/// The process's peak resident memory in MiB (Linux `VmHWM`), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_seed_exactly_once() {
        for (n, k) in [(10, 3), (10_000, 10), (7, 7), (3, 5), (1, 1)] {
            let mut next = 1;
            for i in 0..k {
                let (start, len) = shard_range(1, n, i, k);
                assert_eq!(start, next, "{n} seeds in {k} shards");
                next = start + len;
            }
            assert_eq!(next, 1 + n, "{n} seeds in {k} shards");
        }
    }

    #[test]
    fn a_shard_is_index_over_count() {
        assert_eq!(parse_shard("3/10"), Ok((3, 10)));
        for bad in ["10/10", "1/0", "a/2", "3", "-1/4"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    fn report(first: u64, seeds: u64, lost: u64) -> SeedsReport {
        SeedsReport {
            scenario: "faults-3h".into(),
            first_seed: first,
            seeds,
            faults: true,
            passed: seeds,
            pods_lost: lost,
            wall_seconds: seeds as f64,
            ..Default::default()
        }
    }

    #[test]
    fn shard_reports_merge_only_when_they_cover_one_run_of_seeds_once() {
        let ok = merge(&[("b".into(), report(6, 5, 2)), ("a".into(), report(1, 5, 1))]).unwrap();
        assert_eq!(
            (ok.first_seed, ok.seeds, ok.passed, ok.pods_lost),
            (1, 10, 10, 3)
        );
        assert_eq!(ok.wall_seconds, 5.0, "the slowest shard's");
        let cases = [
            (
                vec![report(1, 5, 0), report(5, 5, 0)],
                MergeError::Overlap {
                    file: "1".into(),
                    start: 5,
                    end: 10,
                },
            ),
            (
                vec![report(1, 5, 0), report(7, 5, 0)],
                MergeError::Gap { start: 6, end: 7 },
            ),
            (vec![], MergeError::Empty),
        ];
        for (shards, want) in cases {
            let named: Vec<(String, SeedsReport)> = shards
                .into_iter()
                .enumerate()
                .map(|(i, r)| (i.to_string(), r))
                .collect();
            assert_eq!(merge(&named).unwrap_err(), want);
        }
        // Shards that say which they are: all of them, once each.
        let sharded = |first, seeds, shard: &str| SeedsReport {
            shard: Some(shard.into()),
            ..report(first, seeds, 0)
        };
        let cases = [
            (
                vec![sharded(1, 5, "0/3"), sharded(6, 5, "1/3")],
                Err(MergeError::MissingShards {
                    missing: vec![2],
                    count: 3,
                }),
            ),
            (
                vec![sharded(1, 5, "0/2"), sharded(1, 5, "0/2")],
                Err(MergeError::DuplicateShard {
                    file: "1".into(),
                    index: 0,
                }),
            ),
            (
                vec![sharded(1, 5, "0/2"), sharded(6, 5, "1/3")],
                Err(MergeError::ShardCount {
                    file: "1".into(),
                    got: "1/3".into(),
                    count: 2,
                }),
            ),
            // 2 seeds in 3 shards: one shard is empty, wherever it sorts.
            (
                vec![
                    sharded(2, 1, "2/3"),
                    sharded(2, 0, "1/3"),
                    sharded(1, 1, "0/3"),
                ],
                Ok(2),
            ),
        ];
        for (shards, want) in cases {
            let named: Vec<(String, SeedsReport)> = shards
                .into_iter()
                .enumerate()
                .map(|(i, r)| (i.to_string(), r))
                .collect();
            assert_eq!(merge(&named).map(|m| m.seeds), want);
        }
        let mut other = report(6, 5, 0);
        other.faults = false;
        assert!(matches!(
            merge(&[("a".into(), report(1, 5, 0)), ("b".into(), other)]),
            Err(MergeError::Mismatch { .. })
        ));
    }
}
