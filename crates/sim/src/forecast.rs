//! capstan's forecast for a workload's autoscaler, on the hpa crate's seasonal models: the
//! reactive recommendation is recorded every step (the largest within the step), refitted
//! every hour once a season of history exists with the kind of model (Holt-Winters, Croston,
//! seasonal naive) whose rolling-origin backtest over the last season did best, checked
//! every six hours, and the largest number of replicas forecast
//! within the lead time is what the forecast asks for — as room for them (placeholder pods,
//! [`ForecastMode::Capacity`]) or as a replica floor with the rolling-origin backtest's mean
//! absolute error on top ([`ForecastMode::Replicas`]). What the forecast itself raised is
//! never learned from: the series is the autoscaler's own demand.
//!
//! A forecast that just ran high — a completed step came in further below it than the
//! tolerance (the backtest's error, a quarter of the forecast, one replica: the largest) — is
//! scaled down by what that step came to against it, until a step agrees with it again: a
//! weekend morning does not pay for the weekday's burst for longer than the step that showed
//! it did not come (scale 0), and a lighter day still gets room for its own, smaller ramp.

use crate::scenario::{ForecastMode, ForecastSpec};
use capstan_hpa::forecast::{Model, ModelKind, select};

/// The label on a workload's placeholder pods (capacity mode), naming the workload.
pub const PLACEHOLDER_LABEL: &str = "capstan.dev/forecast";

/// A pod that holds room rather than doing work: a NodePool's headroom or a workload's
/// forecast capacity.
pub fn is_placeholder(p: &capstan_model::Pod) -> bool {
    p.labels.contains_key(capstan_model::headroom::LABEL)
        || p.labels.contains_key(PLACEHOLDER_LABEL)
}

/// Refit (and re-forecast) this often.
const REFIT_SECONDS: f64 = 3600.0;
/// Backtest this often (it refits at every origin: the expensive part).
const BACKTEST_SECONDS: f64 = 6.0 * 3600.0;

#[derive(Clone, Debug)]
pub struct Forecaster {
    pub mode: ForecastMode,
    pub step: f64,
    pub period: usize,
    /// Steps the floor looks ahead: the lead time, rounded up, plus the step under way.
    pub lead_steps: usize,
    /// The reactive recommendation, one value per completed step.
    pub history: Vec<f64>,
    /// The largest recommendation within the step under way, and whether there was one.
    current: f64,
    seen: bool,
    /// Start of the step under way.
    step_start: f64,
    /// The forecast from the last fit: values for the steps after `fitted_len`.
    forecast: Vec<f64>,
    fitted_len: usize,
    refit_at: f64,
    backtest_at: f64,
    /// The kind of model the last backtest chose.
    kind: Option<ModelKind>,
    /// The last backtest's mean absolute error (replicas), and its error relative to the
    /// seasonal-naive forecast.
    pub mae: f64,
    pub relative_mae: Option<f64>,
    /// What the last completed step came to against its forecast when it ran high (below
    /// by more than the tolerance), else 1: the forecast ahead is scaled by it.
    pub scale: f64,
    /// What the forecast asks for now: replicas to have room for, or the replica floor.
    pub floor: i32,
}

impl Forecaster {
    pub fn new(spec: &ForecastSpec) -> Forecaster {
        let step = spec.step.0;
        Forecaster {
            mode: spec.mode,
            step,
            period: (spec.season.0 / step).round().max(1.0) as usize,
            lead_steps: (spec.lead.0 / step).ceil() as usize + 1,
            history: Vec::new(),
            current: 0.0,
            seen: false,
            step_start: 0.0,
            forecast: Vec::new(),
            fitted_len: 0,
            refit_at: 0.0,
            backtest_at: 0.0,
            kind: None,
            mae: 0.0,
            relative_mae: None,
            scale: 1.0,
            floor: 0,
        }
    }

    /// Records the reactive recommendation at `t` and returns the floor.
    pub fn observe(&mut self, t: f64, reactive: i32) -> i32 {
        while t >= self.step_start + self.step {
            // A step without an observation repeats the last value.
            let v = if self.seen {
                self.current
            } else {
                self.history.last().copied().unwrap_or(0.0)
            };
            self.judge(v);
            self.history.push(v);
            self.current = 0.0;
            self.seen = false;
            self.step_start += self.step;
        }
        self.current = self.current.max(reactive as f64);
        self.seen = true;
        if self.history.len() < self.period {
            self.floor = 0;
            return 0;
        }
        if t >= self.backtest_at {
            self.backtest_at = t + BACKTEST_SECONDS;
            // Over the last season, an origin every half hour.
            let every = (self.period / 48).max(1);
            if let Some((kind, b)) = select(
                &self.history,
                self.period,
                self.lead_steps,
                self.period,
                every,
            ) {
                self.kind = Some(kind);
                self.mae = b.mae;
                self.relative_mae = Some(b.relative_mae());
                // Refit now, with the kind just chosen.
                self.refit_at = t;
            }
        }
        if t >= self.refit_at {
            self.refit_at = t + REFIT_SECONDS;
            let model = self
                .kind
                .and_then(|k| Model::fit_kind(&self.history, self.period, k))
                .unwrap_or_else(|| Model::fit(&self.history, self.period));
            let horizon = (REFIT_SECONDS / self.step).ceil() as usize + self.lead_steps + 1;
            self.forecast = model.forecast(horizon);
            self.fitted_len = self.history.len();
        }
        // The steps from the one under way to the end of the lead time. Room is for demand
        // still to come: the step under way (whose value is its largest, perhaps already
        // past) counts only for a floor.
        let from = self.history.len() - self.fitted_len;
        let skip = match self.mode {
            ForecastMode::Replicas => 0,
            ForecastMode::Capacity => 1,
        };
        let peak = self
            .forecast
            .iter()
            .skip(from + skip)
            .take(self.lead_steps - skip)
            .copied()
            .fold(0.0, f64::max);
        let peak = peak * self.scale;
        self.floor = match self.mode {
            _ if peak <= 0.0 => 0,
            ForecastMode::Replicas => (peak + self.mae).ceil() as i32,
            // Room is bought for the forecast itself (a fraction of a replica is none), or for
            // the rise it sees from the step under way on top of today's replicas, whichever
            // is more: a forecast whose level runs low (yesterday was quieter) still knows
            // that demand climbs in the next minutes.
            ForecastMode::Capacity => {
                let now = self.forecast.get(from).copied().unwrap_or(0.0) * self.scale;
                let hour = (3600.0 / self.step).ceil() as usize;
                // Climbing within the hour, as forecast...
                let climbing = self
                    .forecast
                    .iter()
                    .skip(from + 1)
                    .take(hour)
                    .any(|&v| v * self.scale > now);
                // ...or as it did over the last hour: a day busier than the ones learned
                // from climbs past its forecast, and keeps climbing for a while.
                let n = self.history.len();
                let climbed = n > hour && self.history[n - 1] > self.history[n - 1 - hour];
                let rise = if now >= 1.0 && peak > now {
                    (reactive as f64 * peak / now).ceil() as i32
                } else if now >= 1.0 && (climbing || climbed) {
                    // The autoscaler's next step up (its size is the caller's to know).
                    reactive + 1
                } else {
                    0
                };
                (peak.round() as i32).max(rise)
            }
        };
        self.floor
    }

    /// A step completed with `actual` as its largest recommendation: whether the forecast for
    /// it ran high (and by what factor), or agreed again.
    fn judge(&mut self, actual: f64) {
        let Some(at) = self.history.len().checked_sub(self.fitted_len) else {
            return;
        };
        let Some(&predicted) = self.forecast.get(at) else {
            return;
        };
        let tolerance = self.mae.max(0.25 * predicted).max(1.0);
        self.scale = if predicted - actual > tolerance {
            (actual / predicted).clamp(0.0, 1.0)
        } else {
            1.0
        };
    }

    /// What the last fit forecast for the step under way (for the report), if any.
    pub fn predicted_now(&self) -> Option<f64> {
        if self.forecast.is_empty() {
            return None;
        }
        self.forecast
            .get(self.history.len() - self.fitted_len)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Secs;

    fn spec() -> ForecastSpec {
        ForecastSpec {
            lead: Secs(180.0),
            step: Secs(300.0),
            season: Secs(86_400.0),
            mode: ForecastMode::Replicas,
        }
    }

    /// A daily ramp: 5 replicas at night, 40 from 9:00 to 17:00.
    fn demand(t: f64) -> i32 {
        let h = (t / 3600.0) % 24.0;
        if (9.0..17.0).contains(&h) { 40 } else { 5 }
    }

    #[test]
    fn no_floor_until_a_season_is_recorded_then_the_floor_rises_before_the_ramp() {
        let mut f = Forecaster::new(&spec());
        let mut t = 0.0;
        // The first day: nothing learned yet.
        while t < 86_400.0 {
            assert_eq!(f.observe(t, demand(t)), 0, "at {t}");
            t += 15.0;
        }
        // The second day: at 8:00 the ramp is beyond the lead time; a few minutes before 9:00
        // the floor already holds it.
        while t < 86_400.0 + 8.0 * 3600.0 {
            f.observe(t, demand(t));
            t += 15.0;
        }
        assert!(f.floor <= 10, "floor {} an hour before the ramp", f.floor);
        let mut before = 0;
        while t < 86_400.0 + 9.0 * 3600.0 {
            before = f.observe(t, demand(t));
            t += 15.0;
        }
        assert!(before >= 40, "floor {before} just before the ramp");
        // At night, far from the ramp, it lets the reactive HPA go down.
        while t < 86_400.0 + 20.0 * 3600.0 {
            f.observe(t, demand(t));
            t += 15.0;
        }
        assert!(f.floor <= 10, "floor {} at night", f.floor);
        assert!(f.relative_mae.is_some());
    }

    #[test]
    fn a_forecast_the_day_does_not_bear_out_is_scaled_to_the_day_after_one_step_until_they_agree_again()
     {
        let mut f = Forecaster::new(&spec());
        let mut t = 0.0;
        while t < 86_400.0 {
            f.observe(t, demand(t));
            t += 15.0;
        }
        // The second day stays quiet: a minute before 9:00 the forecast asks for the ramp.
        while t < 86_400.0 + 9.0 * 3600.0 - 60.0 {
            f.observe(t, 5);
            t += 15.0;
        }
        assert!(f.floor >= 40, "floor {} before the ramp", f.floor);
        assert_eq!(f.scale, 1.0);
        // A step of the ramp came and went without it: what is asked for is scaled down to
        // what came (5 of 40), no more than the quiet day's own level.
        while t < 86_400.0 + 9.0 * 3600.0 + 300.0 + 15.0 {
            f.observe(t, 5);
            t += 15.0;
        }
        assert!(f.scale < 0.2, "scale {}", f.scale);
        assert!(f.floor <= 6, "floor {}", f.floor);
        // In the evening the forecast no longer runs above the day: it asks again.
        while t < 86_400.0 + 20.0 * 3600.0 {
            f.observe(t, 5);
            t += 15.0;
        }
        assert_eq!(f.scale, 1.0, "forecast {:?}", f.predicted_now());
    }

    #[test]
    fn in_capacity_mode_a_climb_the_forecast_sees_is_room_above_todays_level_even_when_yesterday_was_quieter()
     {
        let mut f = Forecaster::new(&ForecastSpec {
            mode: ForecastMode::Capacity,
            ..spec()
        });
        // Up from 10 at 3:00 to 50 at 15:00, and down again.
        let day = |t: f64| {
            let h = (t / 3600.0 - 3.0).rem_euclid(24.0);
            10.0 + 40.0
                * if h < 12.0 {
                    h / 12.0
                } else {
                    (24.0 - h) / 12.0
                }
        };
        let mut t = 0.0;
        while t < 86_400.0 {
            f.observe(t, day(t).round() as i32);
            t += 15.0;
        }
        // The second day is a third busier: its level is above anything forecast.
        let busier = |t: f64| (day(t) * 1.3).round() as i32;
        while t < 86_400.0 + 10.0 * 3600.0 {
            f.observe(t, busier(t));
            t += 15.0;
        }
        let now = busier(t);
        let asked = f.observe(t, now);
        assert!(asked > now, "asked {asked} mid-climb at {now} replicas");
    }
}
