//! The self-contained HTML report: the summary, and inline SVG charts (no scripts, no
//! network) — replicas and pending pods, nodes by capacity type, hourly cost against its lower
//! bound, and a timeline of launches, interruptions, disruptions and faults.
//!
//! The SVG is written by hand rather than with a plotting crate: the charts are plain
//! polylines, and hand-written SVG keeps the bytes deterministic and needs no fonts.

use crate::{Outcome, Sample};
use std::fmt::Write;

const W: f64 = 1100.0;
const H: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
/// The timeline's rows are labelled on the left.
const TIMELINE_LEFT: f64 = 140.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick step that gives about five ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let n = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * mag
}

struct Series<'a> {
    name: String,
    color: &'a str,
    values: Vec<f64>,
    dashed: bool,
}

fn axes(out: &mut String, title: &str, x_max: f64, y_max: f64, y_label: &str) {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{t}">"##,
        t = esc(title)
    );
    let _ = write!(
        out,
        r##"<rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/><text x="{LEFT}" y="18" font-family="sans-serif" font-size="14" font-weight="bold">{}</text>"##,
        esc(title)
    );
    let ystep = nice_step(y_max);
    let mut y = 0.0;
    while y <= y_max + 1e-9 {
        let py = TOP + ph - y / y_max * ph;
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" font-family="sans-serif" font-size="11" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            py + 4.0,
            fmt_num(y)
        );
        y += ystep;
    }
    let xstep = if x_max > 12.0 { 3.0 } else { nice_step(x_max) };
    let mut x = 0.0;
    while x <= x_max + 1e-9 {
        let px = LEFT + x / x_max * pw;
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{px:.1}" y="{:.1}" font-family="sans-serif" font-size="11" text-anchor="middle">{}h</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            fmt_num(x)
        );
        x += xstep;
    }
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><text x="14" y="{:.1}" font-family="sans-serif" font-size="11" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"##,
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(y_label)
    );
}

fn fmt_num(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn line_chart(title: &str, hours: &[f64], series: &[Series<'_>], y_label: &str) -> String {
    let mut out = String::new();
    let x_max = hours.last().copied().unwrap_or(1.0).max(1e-9);
    let y_max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    axes(&mut out, title, x_max, y_max, y_label);
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    for (k, s) in series.iter().enumerate() {
        let mut pts = String::new();
        for (x, y) in hours.iter().zip(&s.values) {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                LEFT + x / x_max * pw,
                TOP + ph - y / y_max * ph
            );
        }
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.6"{dash} points="{}"/>"#,
            s.color,
            pts.trim_end()
        );
        let lx = LEFT + 10.0 + (k as f64) * 150.0;
        let _ = write!(
            out,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="3" fill="{}"/><text x="{:.1}" y="{:.1}" font-family="sans-serif" font-size="11">{}</text>"##,
            TOP + 4.0,
            s.color,
            lx + 16.0,
            TOP + 8.0,
            esc(&s.name)
        );
    }
    out.push_str("</svg>");
    out
}

fn timeline(o: &Outcome, hours_max: f64) -> String {
    let kinds = [
        ("launch", "#2ca02c"),
        ("terminate", "#7f7f7f"),
        ("interruption", "#d62728"),
        ("disruption", "#1f77b4"),
        ("fault", "#ff7f0e"),
        ("lost", "#000000"),
        ("violation", "#e377c2"),
    ];
    let row = 22.0;
    let h = TOP + row * kinds.len() as f64 + BOTTOM;
    let pw = W - TIMELINE_LEFT - 40.0;
    let x_max = hours_max.max(1e-9);
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" aria-label="Event timeline"><rect x="0" y="0" width="{W}" height="{h}" fill="#fff"/><text x="{TIMELINE_LEFT}" y="18" font-family="sans-serif" font-size="14" font-weight="bold">Event timeline</text>"##
    );
    for (i, (kind, color)) in kinds.iter().enumerate() {
        let y = TOP + row * i as f64 + row / 2.0;
        let count = o.events.iter().filter(|e| e.kind == *kind).count();
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-family="sans-serif" font-size="11" text-anchor="end">{kind} ({count})</text><line x1="{TIMELINE_LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/>"##,
            TIMELINE_LEFT - 6.0,
            y + 4.0,
            TIMELINE_LEFT + pw
        );
        for e in o.events.iter().filter(|e| e.kind == *kind) {
            let x = TIMELINE_LEFT + (e.t / 3600.0) / x_max * pw;
            let _ = write!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="2" height="12" fill="{color}"><title>{:.0}s {}</title></rect>"#,
                x - 1.0,
                y - 6.0,
                e.t,
                esc(&e.detail)
            );
        }
    }
    let mut x = 0.0;
    let step = if x_max > 12.0 { 3.0 } else { nice_step(x_max) };
    while x <= x_max + 1e-9 {
        let px = TIMELINE_LEFT + x / x_max * pw;
        let _ = write!(
            out,
            r##"<text x="{px:.1}" y="{:.1}" font-family="sans-serif" font-size="11" text-anchor="middle">{}h</text>"##,
            h - BOTTOM + 16.0,
            fmt_num(x)
        );
        x += step;
    }
    out.push_str("</svg>");
    out
}

/// The report as one HTML document.
pub fn html(o: &Outcome) -> String {
    let s = &o.summary;
    let hours: Vec<f64> = o.samples.iter().map(|x| x.t / 3600.0).collect();
    let col = |f: &dyn Fn(&Sample) -> f64| o.samples.iter().map(f).collect::<Vec<f64>>();
    let mut replicas: Vec<Series<'_>> = o
        .workloads
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name: name.clone(),
            color: COLORS[i % COLORS.len()],
            values: col(&|x: &Sample| x.replicas.get(i).copied().unwrap_or(0) as f64),
            dashed: false,
        })
        .collect();
    // What each forecasting workload's forecast asked for (room or floor), dashed in its colour.
    for (i, name) in o.workloads.iter().enumerate() {
        if o.samples
            .iter()
            .any(|x| x.floors.get(i).is_some_and(|f| *f > 0))
        {
            replicas.push(Series {
                name: format!("{name} forecast"),
                color: COLORS[i % COLORS.len()],
                values: col(&|x: &Sample| x.floors.get(i).copied().unwrap_or(0) as f64),
                dashed: true,
            });
        }
    }
    replicas.push(Series {
        name: "pending pods".into(),
        color: "#000",
        values: col(&|x: &Sample| x.pending as f64),
        dashed: true,
    });
    let nodes = [
        Series {
            name: "spot".into(),
            color: COLORS[1],
            values: col(&|x: &Sample| x.spot_nodes as f64),
            dashed: false,
        },
        Series {
            name: "on-demand".into(),
            color: COLORS[0],
            values: col(&|x: &Sample| x.on_demand_nodes as f64),
            dashed: false,
        },
    ];
    let cost = [
        Series {
            name: "cost $/h".into(),
            color: COLORS[3],
            values: col(&|x: &Sample| x.cost_per_hour),
            dashed: false,
        },
        Series {
            name: "lower bound $/h".into(),
            color: COLORS[2],
            values: col(&|x: &Sample| x.bound_per_hour),
            dashed: true,
        },
    ];
    let traffic = [Series {
        name: "requests/s".into(),
        color: COLORS[4],
        values: col(&|x: &Sample| x.rps),
        dashed: false,
    }];
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>capstan simulate — {name} (seed {seed})</title><style>body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:4px 10px;text-align:left;font-size:13px}}svg{{display:block;margin:12px 0}}.events td{{font-size:12px}}</style></head><body><h1>capstan simulate — {name}</h1><p>Seed {seed}; {hours:.1} simulated hours.</p>"#,
        name = esc(&s.scenario),
        seed = s.seed,
        hours = s.simulated_seconds / 3600.0
    );
    out.push_str("<h2>Summary</h2><table>");
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(s) {
        for (k, v) in m {
            if k == "wall_seconds" || k == "faults_injected" {
                continue;
            }
            let _ = write!(
                out,
                "<tr><th>{}</th><td>{}</td></tr>",
                esc(&k),
                esc(&v.to_string())
            );
        }
    }
    out.push_str("</table>");
    if !s.faults_injected.is_empty() {
        out.push_str("<h3>Faults injected</h3><ul>");
        for f in &s.faults_injected {
            let _ = write!(out, "<li>{}</li>", esc(f));
        }
        out.push_str("</ul>");
    }
    out.push_str("<h2>Charts</h2>");
    out.push_str(&line_chart("Traffic", &hours, &traffic, "requests/s"));
    out.push_str(&line_chart(
        "Replicas and pending pods",
        &hours,
        &replicas,
        "pods",
    ));
    out.push_str(&line_chart(
        "Nodes by capacity type",
        &hours,
        &nodes,
        "nodes",
    ));
    out.push_str(&line_chart(
        "Hourly cost against its lower bound",
        &hours,
        &cost,
        "USD per hour",
    ));
    out.push_str(&timeline(o, hours.last().copied().unwrap_or(1.0)));
    let shown: Vec<_> = o
        .events
        .iter()
        .filter(|e| e.kind != "node" && e.kind != "scale")
        .take(2000)
        .collect();
    let _ = write!(
        out,
        "<h2>Events</h2><p>{} of {} events (node registrations and scaling omitted).</p><table class=\"events\"><tr><th>time</th><th>kind</th><th>detail</th></tr>",
        shown.len(),
        o.events.len()
    );
    for e in shown {
        let t = e.t as u64;
        let _ = write!(
            out,
            "<tr><td>{:02}:{:02}:{:02}</td><td>{}</td><td>{}</td></tr>",
            t / 3600,
            (t / 60) % 60,
            t % 60,
            esc(&e.kind),
            esc(&e.detail)
        );
    }
    out.push_str("</table></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_steps_are_one_two_or_five_times_a_power_of_ten() {
        for (max, step) in [(100.0, 20.0), (7.0, 2.0), (0.9, 0.2), (12000.0, 5000.0)] {
            assert_eq!(nice_step(max), step, "{max}");
        }
    }

    #[test]
    fn the_report_is_self_contained_and_escapes_text() {
        let o = Outcome {
            workloads: vec!["web<1>".into()],
            samples: vec![
                Sample {
                    t: 60.0,
                    replicas: vec![3],
                    ..Default::default()
                },
                Sample {
                    t: 120.0,
                    replicas: vec![5],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let h = html(&o);
        assert!(h.contains("web&lt;1&gt;"));
        assert!(!h.contains("<script"));
        // Nothing to fetch: no scripts, images, stylesheets or links.
        for attr in ["src=", "href=", "@import", "url("] {
            assert!(!h.contains(attr), "{attr}");
        }
        assert_eq!(h.matches("<svg").count(), 5);
    }
}
