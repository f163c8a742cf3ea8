//! Plain-text tables for the default (human) output.

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
