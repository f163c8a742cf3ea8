//! capstan's forecast floor for a workload's HPA, on the hpa crate's seasonal models: the
//! reactive recommendation is recorded every step (the largest within the step), refitted
//! every hour once a season of history exists, and the replicas forecast within the lead
//! time — plus the rolling-origin backtest's mean absolute error, as a safety margin — are
//! the floor. The replicas the floor itself raised are never learned from: the series is the
//! HPA's own demand.

use crate::scenario::ForecastSpec;
use capstan_hpa::forecast::{Model, backtest};

/// Refit (and re-forecast) this often.
const REFIT_SECONDS: f64 = 3600.0;
/// Backtest this often (it refits at every origin: the expensive part).
const BACKTEST_SECONDS: f64 = 6.0 * 3600.0;

#[derive(Clone, Debug)]
pub struct Forecaster {
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
    /// The last backtest's mean absolute error (replicas), and its error relative to the
    /// seasonal-naive forecast.
    pub mae: f64,
    pub relative_mae: Option<f64>,
    /// The floor now.
    pub floor: i32,
}

impl Forecaster {
    pub fn new(spec: &ForecastSpec) -> Forecaster {
        let step = spec.step.0;
        Forecaster {
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
            mae: 0.0,
            relative_mae: None,
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
            let min_train = self.period;
            let every = (self.period / 8).max(1);
            if let Some(b) = backtest(
                &self.history,
                self.period,
                self.lead_steps,
                min_train,
                every,
            ) {
                self.mae = b.mae;
                self.relative_mae = Some(b.relative_mae());
            }
        }
        if t >= self.refit_at {
            self.refit_at = t + REFIT_SECONDS;
            let model = Model::fit(&self.history, self.period);
            let horizon = (REFIT_SECONDS / self.step).ceil() as usize + self.lead_steps + 1;
            self.forecast = model.forecast(horizon);
            self.fitted_len = self.history.len();
        }
        // The steps from the one under way to the end of the lead time.
        let from = self.history.len() - self.fitted_len;
        let peak = self
            .forecast
            .iter()
            .skip(from)
            .take(self.lead_steps)
            .copied()
            .fold(0.0, f64::max);
        self.floor = if peak > 0.0 {
            (peak + self.mae).ceil() as i32
        } else {
            0
        };
        self.floor
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
}
