//! Forecasting demand, so capacity can be there before a predicted peak: additive Holt-Winters
//! for seasonal demand, Croston (SBA) for intermittent demand, the seasonal-naive forecast, a
//! choice among them by rolling-origin backtests (never random splits), and a replica floor
//! that looks `lead` steps ahead — as long as a new node takes to be ready.

/// Additive Holt-Winters (level, trend, seasonal), parameters chosen by one-step-ahead error.
#[derive(Clone, Debug, PartialEq)]
pub struct HoltWinters {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
    pub period: usize,
    level: f64,
    trend: f64,
    season: Vec<f64>,
    /// Samples seen (so forecasts know their seasonal phase).
    n: usize,
    /// Mean squared one-step-ahead error over the fit.
    pub mse: f64,
}

const GRID: [f64; 6] = [0.05, 0.1, 0.2, 0.3, 0.5, 0.8];

impl HoltWinters {
    /// Fits to `y` with the given seasonal period; needs two full periods.
    pub fn fit(y: &[f64], period: usize) -> Option<HoltWinters> {
        if period < 2 || y.len() < 2 * period {
            return None;
        }
        let mut best: Option<HoltWinters> = None;
        for &a in &GRID {
            for &b in &[0.0, 0.01, 0.05, 0.1] {
                for &g in &GRID {
                    let m = HoltWinters::run(y, period, a, b, g);
                    if best.as_ref().is_none_or(|x| m.mse < x.mse) {
                        best = Some(m);
                    }
                }
            }
        }
        best
    }

    fn run(y: &[f64], period: usize, alpha: f64, beta: f64, gamma: f64) -> HoltWinters {
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        let first = mean(&y[..period]);
        let second = mean(&y[period..2 * period]);
        let mut level = first;
        let mut trend = (second - first) / period as f64;
        let mut season: Vec<f64> = y[..period].iter().map(|v| v - first).collect();
        let mut sse = 0.0;
        let mut count = 0;
        for (t, &v) in y.iter().enumerate().skip(period) {
            let s = t % period;
            let f = level + trend + season[s];
            sse += (v - f) * (v - f);
            count += 1;
            let prev = level;
            level = alpha * (v - season[s]) + (1.0 - alpha) * (level + trend);
            trend = beta * (level - prev) + (1.0 - beta) * trend;
            season[s] = gamma * (v - level) + (1.0 - gamma) * season[s];
        }
        HoltWinters {
            alpha,
            beta,
            gamma,
            period,
            level,
            trend,
            season,
            n: y.len(),
            mse: sse / count.max(1) as f64,
        }
    }

    /// The next `h` values.
    pub fn forecast(&self, h: usize) -> Vec<f64> {
        (1..=h)
            .map(|k| {
                self.level + k as f64 * self.trend + self.season[(self.n + k - 1) % self.period]
            })
            .collect()
    }
}

/// Croston's method with the Syntetos–Boylan bias correction, for demand that is often zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Croston {
    pub alpha: f64,
    size: f64,
    interval: f64,
}

impl Croston {
    /// Fits to `y`; the estimates start from the series' mean demand size and mean interval.
    pub fn fit(y: &[f64], alpha: f64) -> Option<Croston> {
        let demands: Vec<f64> = y.iter().copied().filter(|v| *v > 0.0).collect();
        if demands.is_empty() {
            return None;
        }
        let mut size = demands.iter().sum::<f64>() / demands.len() as f64;
        let mut interval = y.len() as f64 / demands.len() as f64;
        let mut since = 1.0;
        for &v in y {
            if v > 0.0 {
                size += alpha * (v - size);
                interval += alpha * (since - interval);
                since = 1.0;
            } else {
                since += 1.0;
            }
        }
        Some(Croston {
            alpha,
            size,
            interval,
        })
    }

    /// The expected demand per step (flat).
    pub fn rate(&self) -> f64 {
        (1.0 - self.alpha / 2.0) * self.size / self.interval
    }

    /// The size of a demand burst when one comes (what capacity must absorb).
    pub fn burst(&self) -> f64 {
        self.size
    }
}

/// The model a series gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    Seasonal(HoltWinters),
    Intermittent(Croston),
    /// Repeat the last period (too little history for Holt-Winters, or the backtest's choice).
    SeasonalNaive {
        last: Vec<f64>,
    },
}

/// Share of zero steps above which demand counts as intermittent.
pub const INTERMITTENT_ZERO_SHARE: f64 = 0.3;

/// The kinds of model a series may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    Seasonal,
    Intermittent,
    SeasonalNaive,
}

impl ModelKind {
    pub const ALL: [ModelKind; 3] = [
        ModelKind::Seasonal,
        ModelKind::Intermittent,
        ModelKind::SeasonalNaive,
    ];
}

impl Model {
    /// Chooses and fits a model for `y` with the given seasonal period, by the share of zero
    /// steps alone (see [`select`] for the choice by backtest).
    pub fn fit(y: &[f64], period: usize) -> Model {
        let zeros = y.iter().filter(|v| **v <= 0.0).count();
        if !y.is_empty() && zeros as f64 / y.len() as f64 > INTERMITTENT_ZERO_SHARE {
            if let Some(m) = Model::fit_kind(y, period, ModelKind::Intermittent) {
                return m;
            }
        }
        Model::fit_kind(y, period, ModelKind::Seasonal)
            .unwrap_or_else(|| Model::seasonal_naive(y, period))
    }

    /// Fits a model of one kind, if `y` is enough for it.
    pub fn fit_kind(y: &[f64], period: usize, kind: ModelKind) -> Option<Model> {
        match kind {
            ModelKind::Seasonal => HoltWinters::fit(y, period).map(Model::Seasonal),
            ModelKind::Intermittent => Croston::fit(y, 0.1).map(Model::Intermittent),
            ModelKind::SeasonalNaive => {
                (y.len() >= period).then(|| Model::seasonal_naive(y, period))
            }
        }
    }

    fn seasonal_naive(y: &[f64], period: usize) -> Model {
        let start = y.len().saturating_sub(period.max(1));
        Model::SeasonalNaive {
            last: y[start..].to_vec(),
        }
    }

    /// The next `h` values. Intermittent demand forecasts its burst size, not its average:
    /// capacity has to absorb a burst when it comes.
    pub fn forecast(&self, h: usize) -> Vec<f64> {
        match self {
            Model::Seasonal(hw) => hw.forecast(h).into_iter().map(|v| v.max(0.0)).collect(),
            Model::Intermittent(c) => vec![c.burst(); h],
            Model::SeasonalNaive { last } if last.is_empty() => vec![0.0; h],
            Model::SeasonalNaive { last } => (0..h).map(|k| last[k % last.len()]).collect(),
        }
    }
}

/// The kind of model whose rolling-origin backtest over the last `window` steps of `y` (an
/// origin every `step`, scored `horizon` ahead) has the smallest mean absolute error, with
/// that backtest. Demand that is often zero but comes at the same time of day — a nightly
/// batch — is forecast far better by a seasonal model than by Croston's flat burst, and
/// steady demand better by Holt-Winters than by repeating yesterday: the backtest decides,
/// not a rule of thumb. Ties go to the earlier kind in [`ModelKind::ALL`].
pub fn select(
    y: &[f64],
    period: usize,
    horizon: usize,
    window: usize,
    step: usize,
) -> Option<(ModelKind, Backtest)> {
    let mut best: Option<(ModelKind, Backtest)> = None;
    for kind in ModelKind::ALL {
        let min_train = y.len().saturating_sub(window + horizon).max(period);
        let Some(b) = backtest_kind(y, period, horizon, min_train, step, Some(kind)) else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, x)| b.mae < x.mae) {
            best = Some((kind, b));
        }
    }
    best
}

/// How a model did in a rolling-origin backtest, against the seasonal-naive forecast.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Backtest {
    pub origins: usize,
    pub horizon: usize,
    pub mae: f64,
    pub seasonal_naive_mae: f64,
}

impl Backtest {
    /// Below 1: better than repeating the last season (1 when both are exact).
    pub fn relative_mae(&self) -> f64 {
        if self.seasonal_naive_mae > 0.0 {
            self.mae / self.seasonal_naive_mae
        } else if self.mae == 0.0 {
            1.0
        } else {
            f64::INFINITY
        }
    }
}

/// Rolling-origin evaluation: for each origin from `min_train` on (every `step` samples), fit on
/// everything before it and score the next `horizon` values. Training data always precedes the
/// data it is scored on.
pub fn backtest(
    y: &[f64],
    period: usize,
    horizon: usize,
    min_train: usize,
    step: usize,
) -> Option<Backtest> {
    backtest_kind(y, period, horizon, min_train, step, None)
}

/// [`backtest`] with models of one kind (`None`: as [`Model::fit`] chooses). An origin whose
/// training data is too short for the kind is skipped.
pub fn backtest_kind(
    y: &[f64],
    period: usize,
    horizon: usize,
    min_train: usize,
    step: usize,
    kind: Option<ModelKind>,
) -> Option<Backtest> {
    let (mut err, mut naive_err, mut n, mut origins) = (0.0, 0.0, 0usize, 0usize);
    let mut origin = min_train.max(period);
    while origin + horizon <= y.len() {
        let train = &y[..origin];
        let model = match kind {
            None => Some(Model::fit(train, period)),
            Some(k) => Model::fit_kind(train, period, k),
        };
        let Some(model) = model else {
            origin += step.max(1);
            continue;
        };
        let f = model.forecast(horizon);
        for k in 0..horizon {
            let actual = y[origin + k];
            err += (f[k] - actual).abs();
            // seasonal naive: the value one period before (from training data only)
            let back = origin + k - period * (k / period + 1);
            naive_err += (y[back] - actual).abs();
            n += 1;
        }
        origins += 1;
        origin += step.max(1);
    }
    (n > 0).then(|| Backtest {
        origins,
        horizon,
        mae: err / n as f64,
        seasonal_naive_mae: naive_err / n as f64,
    })
}

/// The replicas to have now so that the peak forecast within the next `lead` steps is covered:
/// ceil(peak × (1 + headroom) / per_replica). The reactive HPA may still go higher.
pub fn replica_floor(forecast: &[f64], lead: usize, per_replica: f64, headroom: f64) -> i32 {
    let peak = forecast
        .iter()
        .take(lead.max(1))
        .copied()
        .fold(0.0, f64::max);
    if per_replica <= 0.0 {
        return 0;
    }
    (peak * (1.0 + headroom) / per_replica).ceil() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stand-in for noise in [-1, 1].
    fn noise(i: usize) -> f64 {
        let x = (i as f64 * 12.9898).sin() * 43_758.545_3;
        2.0 * (x - x.floor()) - 1.0
    }

    /// Hourly demand: a daily cycle between 20 and 100, a slow upward trend, noise.
    fn diurnal(days: usize) -> Vec<f64> {
        (0..days * 24)
            .map(|i| {
                let h = (i % 24) as f64;
                60.0 - 40.0 * (std::f64::consts::TAU * h / 24.0).cos()
                    + 0.05 * i as f64
                    + 3.0 * noise(i)
            })
            .collect()
    }

    #[test]
    fn holt_winters_beats_seasonal_naive_in_rolling_origin_backtests() {
        let y = diurnal(14);
        let b = backtest(&y, 24, 6, 24 * 7, 6).unwrap();
        assert!(b.origins >= 20, "{b:?}");
        assert!(b.relative_mae() < 0.9, "{b:?}");
        assert!(b.mae < 5.0, "{b:?}");
    }

    #[test]
    fn the_forecast_follows_the_daily_peak() {
        let y = diurnal(7);
        let Model::Seasonal(hw) = Model::fit(&y, 24) else {
            panic!("seasonal data gets Holt-Winters")
        };
        let f = hw.forecast(24);
        // Hour 12 of the next day is the peak (about 100 + trend), hour 0 the trough (about 20).
        assert!((f[12] - 108.0).abs() < 8.0, "{}", f[12]);
        assert!((f[0] - 28.0).abs() < 8.0, "{}", f[0]);
    }

    #[test]
    fn intermittent_demand_gets_croston_and_forecasts_its_burst() {
        let y: Vec<f64> = (0..200)
            .map(|i| if i % 10 == 0 { 50.0 } else { 0.0 })
            .collect();
        let m = Model::fit(&y, 24);
        let Model::Intermittent(c) = &m else {
            panic!("{m:?}")
        };
        assert!((c.rate() - 50.0 / 10.0 * 0.95).abs() < 0.5, "{}", c.rate());
        assert_eq!(m.forecast(3), vec![50.0; 3]);
    }

    #[test]
    fn a_daily_burst_gets_a_seasonal_model_by_backtest_not_crostons_flat_burst() {
        // Zero most of the day, 60 for two hours at the same time every day: intermittent
        // by the share of zeros, but seasonal.
        let day = |d: usize| {
            (0..24).map(move |h| {
                if h == 9 || h == 10 {
                    60.0 + d as f64
                } else {
                    0.0
                }
            })
        };
        let y: Vec<f64> = (0..4).flat_map(day).collect();
        assert!(matches!(Model::fit(&y, 24), Model::Intermittent(_)));
        let (kind, b) = select(&y, 24, 2, 24, 1).unwrap();
        assert_ne!(kind, ModelKind::Intermittent, "{b:?}");
        let croston = backtest_kind(&y, 24, 2, 48, 1, Some(ModelKind::Intermittent)).unwrap();
        assert!(b.mae < croston.mae / 4.0, "{b:?} against {croston:?}");
        let f = Model::fit_kind(&y, 24, kind).unwrap().forecast(24);
        assert!(f[9] > 50.0 && f[3] < 10.0, "{f:?}");
    }

    #[test]
    fn short_history_falls_back_to_seasonal_naive() {
        let m = Model::fit(&[1.0, 2.0, 3.0], 24);
        assert_eq!(m.forecast(4), vec![1.0, 2.0, 3.0, 1.0]);
    }

    #[test]
    fn the_replica_floor_covers_the_peak_within_the_lead_time() {
        let f = [10.0, 20.0, 90.0, 40.0];
        assert_eq!(
            replica_floor(&f, 2, 10.0, 0.0),
            2,
            "the peak is beyond a two-step lead"
        );
        assert_eq!(replica_floor(&f, 3, 10.0, 0.0), 9);
        assert_eq!(replica_floor(&f, 3, 10.0, 0.1), 10);
    }
}
