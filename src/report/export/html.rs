//! One self-contained HTML file: inline CSS and SVG charts, the raw inputs embedded as JSON, no
//! network access.

use std::fmt::Write as _;

use super::Exporter;
use crate::report::document::{Block, Chart, Document};

pub struct Html;

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const COLORS: [&str; 4] = ["#3b6ea5", "#e08a2c", "#5a9e5a", "#9a5aa5"];

fn gib(b: f64) -> String {
    format!("{:.2}", b / (1u64 << 30) as f64)
}

/// Five horizontal grid lines from 0 to `max` bytes, labelled in GiB, `y` mapping bytes to pixels.
fn y_grid(o: &mut String, max: f64, x1: f64, x2: f64, y: impl Fn(f64) -> f64) {
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let yy = y(v);
        let _ = write!(
            o,
            r##"<line x1="{x1}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" font-size="10" text-anchor="end">{} GiB</text>"##,
            x1 - 4.0,
            yy + 3.0,
            gib(v)
        );
    }
}

fn svg_bars(title: &str, series: &[String], categories: &[(String, Vec<Option<u64>>)]) -> String {
    let (w, h, left, bottom, top) = (760.0, 300.0, 60.0, 70.0, 30.0);
    let max = categories
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let plot_h = h - bottom - top;
    let n = categories.len().max(1) as f64;
    let group_w = (w - left - 10.0) / n;
    let bar_w = (group_w * 0.8 / series.len().max(1) as f64).max(1.0);
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{}</title>"#,
        escape(title)
    );
    let _ = write!(
        o,
        r#"<text x="{left}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    y_grid(&mut o, max, left, w - 10.0, |v| {
        top + plot_h - plot_h * v / max
    });
    for (i, (label, values)) in categories.iter().enumerate() {
        let x0 = left + group_w * i as f64 + group_w * 0.1;
        for (j, v) in values.iter().enumerate() {
            let Some(v) = v else { continue };
            let bh = plot_h * *v as f64 / max;
            let _ = write!(
                o,
                r#"<rect x="{:.1}" y="{:.1}" width="{bar_w:.1}" height="{bh:.1}" fill="{}"><title>{}: {} bytes</title></rect>"#,
                x0 + bar_w * j as f64,
                top + plot_h - bh,
                COLORS[j % COLORS.len()],
                escape(&format!("{label} — {}", series[j])),
                v
            );
        }
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{}" font-size="10" transform="rotate(30 {:.1} {})">{}</text>"#,
            x0,
            h - bottom + 14.0,
            x0,
            h - bottom + 14.0,
            escape(label)
        );
    }
    for (j, s) in series.iter().enumerate() {
        let x = left + 10.0 + 200.0 * j as f64;
        let _ = write!(
            o,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>"#,
            h - 14.0,
            COLORS[j % COLORS.len()],
            x + 14.0,
            h - 5.0,
            escape(s)
        );
    }
    o.push_str("</svg>");
    o
}

fn svg_timeline(
    title: &str,
    x_label: &str,
    points: &[(f64, u64, u64)],
    marks: &[(f64, String)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 340.0, 70.0, 50.0, 30.0, 110.0);
    let xmin = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (xmin, xmax) = if xmin.is_finite() {
        (xmin, xmax)
    } else {
        (0.0, 1.0)
    };
    let span = (xmax - xmin).max(f64::MIN_POSITIVE);
    let ymax = points
        .iter()
        .map(|p| p.1.max(p.2))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    let (pw, ph) = (w - left - right, h - top - bottom);
    let sx = |x: f64| left + pw * (x - xmin) / span;
    let sy = |y: f64| top + ph - ph * y / ymax;
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{}</title>"#,
        escape(title)
    );
    let _ = write!(
        o,
        r#"<text x="{left}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    y_grid(&mut o, ymax, left, left + pw, sy);
    for (k, (x, name)) in marks.iter().enumerate() {
        let xx = sx(*x);
        // Labels alternate between two heights so that neighbours do not overlap.
        let y = top + 10.0 + (k % 2) as f64 * 11.0;
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{:.1}" stroke="#999" stroke-dasharray="2 3"/><text x="{:.1}" y="{y:.1}" font-size="9" fill="#555">{}</text>"##,
            top + ph,
            xx + 2.0,
            escape(name)
        );
    }
    for (k, (label, pick)) in [
        (
            "reserved",
            (|p: &(f64, u64, u64)| p.2) as fn(&(f64, u64, u64)) -> u64,
        ),
        ("allocated", |p: &(f64, u64, u64)| p.1),
    ]
    .iter()
    .enumerate()
    {
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", sx(p.0), sy(pick(p) as f64)))
            .collect();
        let color = COLORS[k];
        let _ = write!(
            o,
            r##"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/><text x="{}" y="{:.1}" font-size="11" fill="{color}">{label}</text>"##,
            path.join(" "),
            left + pw + 6.0,
            top + 14.0 + k as f64 * 14.0
        );
    }
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 12.0,
        escape(x_label)
    );
    o.push_str("</svg>");
    o
}

fn svg_scatter(
    title: &str,
    x_label: &str,
    points: &[(u64, Option<u64>, bool)],
    lines: &[(String, u64)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 320.0, 70.0, 50.0, 30.0, 150.0);
    let xmax = points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let xmin = points.iter().map(|p| p.0).min().unwrap_or(0) as f64;
    let ymax = points
        .iter()
        .filter_map(|p| p.1)
        .chain(lines.iter().map(|l| l.1))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    let (pw, ph) = (w - left - right, h - top - bottom);
    let span = (xmax - xmin).max(1.0);
    let sx = |x: f64| left + pw * (x - xmin) / span;
    let sy = |y: f64| top + ph - ph * y / ymax;
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{}</title>"#,
        escape(title)
    );
    let _ = write!(
        o,
        r#"<text x="{left}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    y_grid(&mut o, ymax, left, left + pw, sy);
    for (i, (label, cap)) in lines.iter().enumerate() {
        let y = sy(*cap as f64);
        let _ = write!(
            o,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#c44" stroke-dasharray="4 3"/><text x="{}" y="{:.1}" font-size="10" fill="#c44">{}</text>"##,
            left + pw,
            left + pw + 4.0,
            y + 3.0 + (i % 2) as f64 * 0.0,
            escape(label)
        );
    }
    let mut ok: Vec<&(u64, Option<u64>, bool)> =
        points.iter().filter(|p| p.2 && p.1.is_some()).collect();
    ok.sort_by_key(|p| p.0);
    if ok.len() > 1 {
        let path: Vec<String> = ok
            .iter()
            .map(|p| format!("{:.1},{:.1}", sx(p.0 as f64), sy(p.1.unwrap_or(0) as f64)))
            .collect();
        let _ = write!(
            o,
            r##"<polyline fill="none" stroke="#3b6ea5" points="{}"/>"##,
            path.join(" ")
        );
    }
    for (x, y, success) in points {
        let cx = sx(*x as f64);
        match (y, success) {
            (Some(y), true) => {
                let _ = write!(
                    o,
                    r##"<circle cx="{cx:.1}" cy="{:.1}" r="4" fill="#3b6ea5"><title>{x}: {y} bytes (ok)</title></circle>"##,
                    sy(*y as f64)
                );
            }
            _ => {
                let yy = sy(y.unwrap_or(ymax as u64) as f64);
                let _ = write!(
                    o,
                    r##"<text x="{cx:.1}" y="{:.1}" font-size="14" fill="#c44" text-anchor="middle">✕<title>{x}: failed</title></text>"##,
                    yy + 5.0
                );
            }
        }
    }
    let _ = write!(
        o,
        r#"<text x="{left}" y="{}" font-size="10">{}</text><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text><text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
        h - bottom + 14.0,
        xmin,
        left + pw,
        h - bottom + 14.0,
        xmax,
        left + pw / 2.0,
        h - 12.0,
        escape(x_label)
    );
    o.push_str("</svg>");
    o
}

fn svg_waterfall(title: &str, steps: &[(String, u64, bool)], lines: &[(String, u64)]) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 320.0, 70.0, 90.0, 30.0, 170.0);
    // The running total of every bar, and the scale: the bars decide it; a reference line far
    // above them is named with an arrow instead of squashing the bars.
    let mut total = 0u64;
    let mut bars = Vec::new();
    for (label, bytes, level) in steps {
        let (from, to) = if *level {
            total = *bytes;
            (0, *bytes)
        } else {
            let from = total;
            total = total.saturating_add(*bytes);
            (from, total)
        };
        bars.push((label.as_str(), from, to, *level));
    }
    let top_bar = bars.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64;
    let in_range: Vec<&(String, u64)> = lines
        .iter()
        .filter(|(_, b)| (*b as f64) <= top_bar * 1.6)
        .collect();
    let ymax = in_range
        .iter()
        .map(|(_, b)| *b as f64)
        .fold(top_bar, f64::max)
        * 1.05;
    let (pw, ph) = (w - left - right, h - top - bottom);
    let n = bars.len().max(1) as f64;
    let slot = pw / n;
    let sy = |y: f64| top + ph - ph * y / ymax;
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{}</title>"#,
        escape(title)
    );
    let _ = write!(
        o,
        r#"<text x="{left}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    y_grid(&mut o, ymax, left, left + pw, sy);
    for (i, (label, from, to, level)) in bars.iter().enumerate() {
        let x = left + slot * i as f64 + slot * 0.15;
        let (y1, y2) = (sy(*to as f64), sy(*from as f64));
        let color = if *level { COLORS[0] } else { COLORS[1] };
        let _ = write!(
            o,
            r#"<rect x="{x:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}: {} bytes</title></rect>"#,
            slot * 0.7,
            (y2 - y1).max(0.5),
            escape(label),
            to - from
        );
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{}" font-size="10" transform="rotate(25 {:.1} {})">{}</text>"#,
            x,
            h - bottom + 14.0,
            x,
            h - bottom + 14.0,
            escape(label)
        );
    }
    let mut arrows = 0.0;
    for (label, bytes) in lines {
        if in_range.iter().any(|(l, _)| l == label) {
            let y = sy(*bytes as f64);
            let _ = write!(
                o,
                r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#c44" stroke-dasharray="4 3"/><text x="{}" y="{:.1}" font-size="10" fill="#c44">{} ({} GiB)</text>"##,
                left + pw,
                left + pw + 4.0,
                y + 3.0,
                escape(label),
                gib(*bytes as f64)
            );
        } else {
            // Above the scale: named with an arrow, on two short lines.
            let _ = write!(
                o,
                r##"<text x="{}" y="{:.1}" font-size="10" fill="#c44">↑ {}<tspan x="{}" dy="12">{} GiB, off the scale</tspan></text>"##,
                left + pw + 4.0,
                top + 10.0 + arrows,
                escape(label),
                left + pw + 14.0,
                gib(*bytes as f64)
            );
            arrows += 30.0;
        }
    }
    o.push_str("</svg>");
    o
}

impl Exporter for Html {
    fn render(&self, doc: &Document) -> String {
        let mut o = format!(
            "<!DOCTYPE html>\n<html lang=\"{}\"><head><meta charset=\"utf-8\"><title>{}</title><style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}}table{{border-collapse:collapse;margin:1em 0;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}}td.n{{text-align:right}}h2{{border-bottom:1px solid #ddd}}code{{font-size:12px}}</style></head><body>\n<h1>{}</h1>\n",
            doc.lang,
            escape(&doc.title),
            escape(&doc.title)
        );
        for block in &doc.blocks {
            match block {
                Block::Heading(h) => {
                    let _ = writeln!(o, "<h2>{}</h2>", escape(h));
                }
                Block::Para(p) => {
                    let _ = writeln!(o, "<p>{}</p>", escape(p));
                }
                Block::List(items) => {
                    o.push_str("<ul>");
                    for i in items {
                        let _ = write!(o, "<li>{}</li>", escape(i));
                    }
                    o.push_str("</ul>\n");
                }
                Block::Table { header, rows } => {
                    o.push_str("<table><tr>");
                    for h in header {
                        let _ = write!(o, "<th>{}</th>", escape(h));
                    }
                    o.push_str("</tr>");
                    for r in rows {
                        o.push_str("<tr>");
                        for c in r {
                            let numeric = c.chars().next().is_some_and(|ch| ch.is_ascii_digit())
                                && !c.contains(' ');
                            let _ = write!(
                                o,
                                "<td{}>{}</td>",
                                if numeric { " class=\"n\"" } else { "" },
                                escape(c)
                            );
                        }
                        o.push_str("</tr>");
                    }
                    o.push_str("</table>\n");
                }
                Block::Chart(Chart::Bars {
                    title,
                    series,
                    categories,
                }) => {
                    o.push_str(&svg_bars(title, series, categories));
                    o.push('\n');
                }
                Block::Chart(Chart::Waterfall {
                    title,
                    steps,
                    lines,
                }) => {
                    o.push_str(&svg_waterfall(title, steps, lines));
                    o.push('\n');
                }
                Block::Chart(Chart::Timeline {
                    title,
                    x_label,
                    points,
                    marks,
                }) => {
                    o.push_str(&svg_timeline(title, x_label, points, marks));
                    o.push('\n');
                }
                Block::Chart(Chart::Scatter {
                    title,
                    x_label,
                    points,
                    lines,
                }) => {
                    o.push_str(&svg_scatter(title, x_label, points, lines));
                    o.push('\n');
                }
            }
        }
        for a in &doc.attachments {
            // Every `<` becomes the JSON escape `\u003c` (valid only inside JSON strings, where the
            // parsed value is unchanged), so no file content can close or confuse the element.
            let _ = writeln!(
                o,
                "<script type=\"application/json\" data-path=\"{}\" data-sha256=\"{}\">{}</script>",
                escape(&a.path),
                escape(&a.sha256),
                a.raw.replace('<', "\\u003c")
            );
        }
        o.push_str("</body></html>\n");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::document::Attachment;
    use crate::report::export::Markdown;

    #[test]
    fn escapes_and_embeds_safely() {
        assert_eq!(escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
        let doc = Document {
            title: "<script>alert(1)</script>".into(),
            lang: "en",
            blocks: vec![Block::Para("a < b".into())],
            attachments: vec![Attachment {
                path: "r.json".into(),
                sha256: "00".into(),
                raw: "{\"x\": \"</script><script>alert(2)</script>\"}".into(),
            }],
        };
        let html = Html.render(&doc);
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)"));
        assert_eq!(html.matches("</script>").count(), 1);
        let text = Markdown.render(&doc);
        assert!(text.starts_with("# &lt;script&gt;"));
    }
}
