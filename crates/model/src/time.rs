//! Civil time without a clock: Go durations, RFC 3339 timestamps and cron schedules on UTC
//! unix seconds. Parsed once, at the edge, into these types; nothing downstream re-parses.

/// Parses a Go duration (`720h`, `1h30m`, `90s`, `1.5h`), or `Never` as `None`.
pub fn parse_duration(s: &str) -> Result<Option<u64>, String> {
    if s == "Never" {
        return Ok(None);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    if rest == "0" {
        return Ok(Some(0));
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "invalid duration {s:?}: missing unit (ns, us, ms, s, m, h)"
                ));
            }
            u => return Err(format!("invalid duration {s:?}: unknown unit {u:?}")),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(Some(total.ceil() as u64))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1–12, day 1–31) of days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Parses an RFC 3339 timestamp (`2026-11-30T09:15:00Z`, offsets and fractions allowed) to
/// unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        frac = format!("0.{}", &r[..end]).parse().ok()?;
        rest = &r[end..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (o[1..3].parse::<i64>().ok()? * 3600 + o[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    Some((days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset) as f64 + frac)
}

/// Formats unix seconds as RFC 3339 in UTC, to the second (`2026-11-30T09:15:00Z`), as
/// Kubernetes writes metav1.Time.
pub fn format_rfc3339(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A cron schedule (five fields, UTC): minute hour day-of-month month day-of-week.
#[derive(Clone, Debug, PartialEq)]
pub struct Cron {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    dom: Vec<bool>,
    months: Vec<bool>,
    dow: Vec<bool>,
    dom_any: bool,
    dow_any: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn field(
    spec: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
) -> Result<(Vec<bool>, bool), String> {
    let mut set = vec![false; max as usize + 1];
    let value = |t: &str| -> Result<u32, String> {
        let lower = t.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + name_base);
        }
        t.parse::<u32>().map_err(|_| {
            format!(
                "{t:?} is not a number{}",
                if names.is_empty() { "" } else { " or a name" }
            )
        })
    };
    for part in spec.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| format!("bad step {s:?}"))?),
            None => (part, 1),
        };
        if step == 0 {
            return Err("a step must be at least 1".into());
        }
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(format!("{part:?} is outside {min}-{max}"));
        }
        let mut v = lo;
        while v <= hi {
            set[v as usize] = true;
            v += step;
        }
    }
    Ok((set, spec == "*"))
}

impl Cron {
    pub fn parse(s: &str) -> Result<Cron, String> {
        let expanded = match s.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let f: Vec<&str> = expanded.split_whitespace().collect();
        if f.len() != 5 {
            return Err(format!(
                "expected five fields (minute hour day-of-month month day-of-week), got {}",
                f.len()
            ));
        }
        let (minutes, _) = field(f[0], 0, 59, &[], 0).map_err(|e| format!("minute: {e}"))?;
        let (hours, _) = field(f[1], 0, 23, &[], 0).map_err(|e| format!("hour: {e}"))?;
        let (dom, dom_any) =
            field(f[2], 1, 31, &[], 0).map_err(|e| format!("day of month: {e}"))?;
        let (months, _) = field(f[3], 1, 12, &MONTHS, 1).map_err(|e| format!("month: {e}"))?;
        let (mut dow, dow_any) =
            field(f[4], 0, 7, &DAYS, 0).map_err(|e| format!("day of week: {e}"))?;
        if dow[7] {
            dow[0] = true;
        }
        Ok(Cron {
            minutes,
            hours,
            dom,
            months,
            dow,
            dom_any,
            dow_any,
        })
    }

    /// Whether the schedule fires in the minute containing unix time `t`.
    pub fn matches(&self, t: i64) -> bool {
        let days = t.div_euclid(86_400);
        let secs = t.rem_euclid(86_400);
        let (_, m, d) = civil_from_days(days);
        let weekday = (days + 4).rem_euclid(7); // 1970-01-01 was a Thursday
        let day_ok = match (self.dom_any, self.dow_any) {
            (true, true) => true,
            (true, false) => self.dow[weekday as usize],
            (false, true) => self.dom[d as usize],
            (false, false) => self.dom[d as usize] || self.dow[weekday as usize],
        };
        self.minutes[(secs / 60 % 60) as usize]
            && self.hours[(secs / 3600) as usize]
            && self.months[m as usize]
            && day_ok
    }

    /// Whether the schedule fired within the `duration` seconds up to `now`: a budget with this
    /// schedule is active then.
    pub fn active(&self, now: f64, duration: f64) -> bool {
        let now_min = (now as i64).div_euclid(60) * 60;
        let start = now - duration;
        let mut t = now_min;
        while (t as f64) > start {
            if self.matches(t) {
                return true;
            }
            t -= 60;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> f64 {
        parse_rfc3339(s).unwrap()
    }

    #[test]
    fn go_durations_parse_to_seconds() {
        let cases = [
            ("720h", Some(2_592_000)),
            ("1h30m", Some(5400)),
            ("90s", Some(90)),
            ("1.5h", Some(5400)),
            ("500ms", Some(1)),
            ("0s", Some(0)),
            ("Never", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).unwrap(), want, "{s}");
        }
        for bad in ["", "10", "1d", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_formatting_round_trips_whole_seconds() {
        for t in [0.0, 1_796_030_100.0, 951_782_400.0, -86_400.0] {
            assert_eq!(at(&format_rfc3339(t)), t);
        }
        assert_eq!(format_rfc3339(1_796_030_100.7), "2026-11-30T09:15:00Z");
    }

    #[test]
    fn rfc3339_timestamps_parse_to_unix_seconds() {
        assert_eq!(at("1970-01-01T00:00:00Z"), 0.0);
        assert_eq!(at("2026-11-30T09:15:00Z"), 1_796_030_100.0);
        assert_eq!(at("2026-11-30T10:15:00+01:00"), 1_796_030_100.0);
        assert_eq!(at("2026-11-30T09:15:00.5Z"), 1_796_030_100.5);
        assert!(parse_rfc3339("2026-13-01T00:00:00Z").is_none());
        assert!(parse_rfc3339("yesterday").is_none());
    }

    #[test]
    fn cron_windows_open_when_the_schedule_fired_within_the_duration() {
        // Weekdays from 09:00 for 8 hours. 2026-11-30 is a Monday; 2026-11-29 a Sunday.
        let c = Cron::parse("0 9 * * mon-fri").unwrap();
        let cases = [
            ("2026-11-30T08:59:00Z", false),
            ("2026-11-30T09:00:00Z", true),
            ("2026-11-30T16:59:00Z", true),
            ("2026-11-30T17:00:00Z", false),
            ("2026-11-29T12:00:00Z", false),
            ("2026-12-05T10:00:00Z", false),
        ];
        for (t, want) in cases {
            assert_eq!(c.active(at(t), 8.0 * 3600.0), want, "{t}");
        }
    }

    #[test]
    fn cron_fields_take_lists_ranges_steps_names_and_macros() {
        let every_15 = Cron::parse("*/15 * * * *").unwrap();
        assert!(every_15.matches(at("2026-11-30T09:45:00Z") as i64));
        assert!(!every_15.matches(at("2026-11-30T09:46:00Z") as i64));
        let daily = Cron::parse("@daily").unwrap();
        assert!(daily.matches(at("2026-11-30T00:00:30Z") as i64));
        let sunday7 = Cron::parse("0 0 * * 7").unwrap();
        assert!(sunday7.matches(at("2026-11-29T00:00:00Z") as i64));
        let dec = Cron::parse("0 0 1,15 dec *").unwrap();
        assert!(dec.matches(at("2026-12-15T00:00:00Z") as i64));
        assert!(!dec.matches(at("2026-11-15T00:00:00Z") as i64));
        for bad in ["* * * *", "61 * * * *", "*/0 * * * *", "0 0 * foo *"] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }
}
