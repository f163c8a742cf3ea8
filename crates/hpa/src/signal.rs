//! The signal an autoscaler sees: a model of the metrics pipeline (scrape interval, averaging
//! window, delay), sliding-window rates, exponential smoothing, and robust aggregation against
//! outlier pods.

/// A time series of (time seconds, value) samples, sorted by time.
pub type Series = [(f64, f64)];

/// metrics-server as the HPA sees it: usage is scraped every `scrape_interval` seconds, each
/// sample the average over the `window` before the scrape, visible `delay` seconds later.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pipeline {
    pub scrape_interval: f64,
    pub window: f64,
    pub delay: f64,
}

impl Default for Pipeline {
    fn default() -> Self {
        // metrics-server's defaults: 15 s resolution; kubelet's ~15 s window; a few seconds late.
        Pipeline {
            scrape_interval: 15.0,
            window: 15.0,
            delay: 5.0,
        }
    }
}

impl Pipeline {
    /// The latest scrape visible at time `t`, and its timestamp.
    pub fn last_scrape(&self, t: f64) -> Option<f64> {
        let visible = t - self.delay;
        if visible < 0.0 {
            return None;
        }
        Some((visible / self.scrape_interval).floor() * self.scrape_interval)
    }

    /// What the HPA reads at time `t` of a true usage signal `usage(time)`: (value, timestamp).
    /// The window average is integrated on a 1-second grid.
    pub fn observe(&self, t: f64, usage: impl Fn(f64) -> f64) -> Option<(f64, f64)> {
        let s = self.last_scrape(t)?;
        let start = (s - self.window).max(0.0);
        let steps = ((s - start).ceil() as usize).max(1);
        let dt = (s - start) / steps as f64;
        let avg = if s > start {
            (0..steps)
                .map(|i| usage(start + (i as f64 + 0.5) * dt))
                .sum::<f64>()
                / steps as f64
        } else {
            usage(s)
        };
        Some((avg, s))
    }
}

/// A counter's per-second rate over the `window` seconds ending at `t` (PromQL `rate`):
/// counter resets are treated as restarts from zero.
pub fn rate(counter: &Series, t: f64, window: f64) -> Option<f64> {
    let inside: Vec<&(f64, f64)> = counter
        .iter()
        .filter(|(ts, _)| *ts > t - window && *ts <= t)
        .collect();
    if inside.len() < 2 {
        return None;
    }
    let mut increase = 0.0;
    for w in inside.windows(2) {
        let (a, b) = (w[0].1, w[1].1);
        increase += if b >= a { b - a } else { b };
    }
    let span = inside.last().expect("two").0 - inside[0].0;
    (span > 0.0).then(|| increase / span)
}

/// Exponentially weighted moving average with smoothing factor `alpha` in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    pub alpha: f64,
    pub value: Option<f64>,
}

impl Ewma {
    pub fn new(alpha: f64) -> Ewma {
        Ewma {
            alpha: alpha.clamp(f64::MIN_POSITIVE, 1.0),
            value: None,
        }
    }

    /// The factor whose weights halve every `half_life` samples.
    pub fn with_half_life(half_life: f64) -> Ewma {
        Ewma::new(1.0 - 0.5f64.powf(1.0 / half_life.max(f64::MIN_POSITIVE)))
    }

    pub fn update(&mut self, x: f64) -> f64 {
        let v = match self.value {
            None => x,
            Some(prev) => prev + self.alpha * (x - prev),
        };
        self.value = Some(v);
        v
    }
}

/// The median (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The mean after dropping the `trim` share (0–0.5) of values from each end.
pub fn trimmed_mean(values: &[f64], trim: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let k = ((v.len() as f64) * trim.clamp(0.0, 0.49)).floor() as usize;
    let kept = &v[k..v.len() - k];
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_shows_the_window_average_of_the_last_visible_scrape() {
        let p = Pipeline::default();
        assert_eq!(
            p.observe(3.0, |_| 1.0),
            None,
            "nothing visible before the first delay"
        );
        // A step from 0 to 10 at t=100: at t=112 the visible scrape is at 105 (window 90–105).
        let (v, ts) = p
            .observe(112.0, |t| if t >= 100.0 { 10.0 } else { 0.0 })
            .unwrap();
        assert_eq!(ts, 105.0);
        assert!((v - 10.0 / 3.0).abs() < 1e-9, "{v}");
        let (v, _) = p
            .observe(130.0, |t| if t >= 100.0 { 10.0 } else { 0.0 })
            .unwrap();
        assert_eq!(v, 10.0);
    }

    #[test]
    fn rate_handles_counter_resets() {
        let c = [
            (0.0, 0.0),
            (10.0, 100.0),
            (20.0, 200.0),
            (30.0, 50.0),
            (40.0, 150.0),
        ];
        // increases: 100, 100, 50 (reset), 100 over 40 s
        assert_eq!(rate(&c, 40.0, 60.0), Some(350.0 / 40.0));
        assert_eq!(rate(&c, 40.0, 5.0), None, "one sample is no rate");
    }

    #[test]
    fn ewma_converges_and_half_life_halves_the_weight() {
        let mut e = Ewma::with_half_life(1.0);
        assert_eq!(e.alpha, 0.5);
        assert_eq!(e.update(10.0), 10.0);
        assert_eq!(e.update(0.0), 5.0);
        for _ in 0..60 {
            e.update(4.0);
        }
        assert!((e.value.unwrap() - 4.0).abs() < 1e-9);
    }

    #[test]
    fn robust_aggregates_ignore_an_outlier_pod() {
        let usage = [0.5, 0.52, 0.48, 0.51, 9.0];
        let mean = usage.iter().sum::<f64>() / 5.0;
        assert!(mean > 2.0);
        assert_eq!(median(&usage), Some(0.51));
        assert!((trimmed_mean(&usage, 0.2).unwrap() - (0.5 + 0.51 + 0.52) / 3.0).abs() < 1e-12);
        assert_eq!(median(&[1.0, 3.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
