//! Rolling-origin backtests of two forecasters on the same series: for each origin (every
//! eighth of a season from one season of history on), fit on everything before it and score
//! the next `h` steps; the seasonal-naive forecast is the yardstick.

use augurs_core::prelude::*;
use augurs_ets::AutoETS;
use augurs_mstl::MSTLModel;
use capstan_hpa::forecast::Model;
use std::time::Instant;

#[derive(Default)]
struct Score {
    err: f64,
    n: usize,
    seconds: f64,
    failed: usize,
}

impl Score {
    fn mae(&self) -> f64 {
        self.err / self.n.max(1) as f64
    }
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: forecast-augurs FORECAST_JSON");
    let text = std::fs::read_to_string(&path).expect("a forecast.json");
    let series: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    println!(
        "| workload | horizon (steps) | origins | in-house rel. MAE | origins augurs fits | in-house rel. MAE there | augurs MSTL+ETS rel. MAE there | in-house fit s | augurs fit s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in series.as_array().expect("a list") {
        let name = s["workload"].as_str().unwrap_or("?");
        let period = s["season_steps"].as_u64().unwrap() as usize;
        let lead = s["lead_steps"].as_u64().unwrap() as usize;
        let y: Vec<f64> = s["recommended"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for h in [lead, 12] {
            let (mut naive, mut ours, mut theirs) =
                (Score::default(), Score::default(), Score::default());
            // The in-house and naive errors on the origins augurs could fit (it needs two
            // seasons of history).
            let (mut naive_common, mut ours_common) = (Score::default(), Score::default());
            let mut origins = 0;
            let mut origin = period;
            while origin + h <= y.len() {
                origins += 1;
                let train = &y[..origin];
                let actual = &y[origin..origin + h];
                for (k, a) in actual.iter().enumerate() {
                    let back = origin + k - period * (k / period + 1);
                    naive.err += (y[back] - a).abs();
                    naive.n += 1;
                }
                let t = Instant::now();
                let f = Model::fit(train, period).forecast(h);
                ours.seconds += t.elapsed().as_secs_f64();
                for (p, a) in f.iter().zip(actual) {
                    ours.err += (p - a).abs();
                    ours.n += 1;
                }
                let t = Instant::now();
                let mstl = MSTLModel::new(vec![period], AutoETS::non_seasonal().into_trend_model());
                let f = mstl.fit(train).and_then(|m| m.predict(h, None));
                theirs.seconds += t.elapsed().as_secs_f64();
                match f {
                    Ok(f) => {
                        for (p, a) in f.point.iter().zip(actual) {
                            theirs.err += (p.max(0.0) - a).abs();
                            theirs.n += 1;
                        }
                        let ours_f = Model::fit(train, period).forecast(h);
                        for (k, a) in actual.iter().enumerate() {
                            let back = origin + k - period * (k / period + 1);
                            naive_common.err += (y[back] - a).abs();
                            naive_common.n += 1;
                            ours_common.err += (ours_f[k] - a).abs();
                            ours_common.n += 1;
                        }
                    }
                    Err(_) => theirs.failed += 1,
                }
                origin += (period / 8).max(1);
            }
            let rel = |s: &Score, n: &Score| s.mae() / n.mae().max(1e-9);
            println!(
                "| {name} | {h} | {origins} | {:.3} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                rel(&ours, &naive),
                origins - theirs.failed,
                rel(&ours_common, &naive_common),
                rel(&theirs, &naive_common),
                ours.seconds,
                theirs.seconds,
            );
        }
    }
}
