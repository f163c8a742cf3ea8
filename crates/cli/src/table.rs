//! Plain-text tables for the default (human) output.

/// `v` with `digits` decimals, never as a negative zero (`-0.0000`: an empty sum, or a
/// rounding error below the last digit).
pub fn fixed(v: f64, digits: usize) -> String {
    let s = format!("{v:.digits$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_string(),
        _ => s,
    }
}

/// `v` rounded to `digits` decimals for JSON, never a negative zero.
pub fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f + 0.0
}

/// Renders rows under a header, columns padded to their widest cell; numbers right-aligned.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.len());
            }
        }
    }
    let numeric = |s: &str| !s.is_empty() && s.parse::<f64>().is_ok();
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if numeric(c) {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_never_print_as_negative_zero() {
        // (value, digits, text)
        let cases = [
            (-0.0, 4, "0.0000"),
            (-0.00001, 4, "0.0000"),
            (-0.5, 1, "-0.5"),
            (0.0, 2, "0.00"),
            (1.23456, 4, "1.2346"),
        ];
        for (v, d, want) in cases {
            assert_eq!(fixed(v, d), want, "{v}");
        }
        assert!(round(-0.0000001, 4).is_sign_positive());
        assert_eq!(serde_json::json!(round(-0.0, 6)).to_string(), "0.0");
    }

    #[test]
    fn columns_line_up_and_numbers_align_right() {
        let t = super::render(
            &["NAME", "PODS"],
            &[
                vec!["a".into(), "5".into()],
                vec!["long-name".into(), "12".into()],
            ],
        );
        assert_eq!(t, "NAME       PODS\na             5\nlong-name    12\n");
    }
}
