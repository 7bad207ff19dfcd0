//! The fiche's charts as inline SVG: axes scaled to the data (a capacity far above it is named
//! with an arrow, never drawn as a line that flattens everything), horizontal labels, a legend,
//! colours from the Okabe–Ito palette (safe for colour-blind readers) doubled by patterns and
//! dash styles (safe in greyscale), and a text alternative (`<title>` and `<desc>`) for each.
//!
//! Every chart marks its plot area `class="plot"` and its data `class="data"`, and says along
//! which axis the data's values run (`data-value-axis`): the browser test checks that the data
//! spans at least half of the plot.

use crate::report::catalog::export::ExportText;
use std::fmt::Write as _;

use super::escape;
use crate::report::document::Chart;
use crate::report::format::Style;

/// Okabe–Ito: blue, orange, bluish green, reddish purple.
const COLORS: [&str; 4] = ["#0072B2", "#E69F00", "#009E73", "#CC79A7"];
/// Greyscale doubles: solid, hatched, dotted, cross-hatched.
const FILLS: [&str; 4] = ["s0", "p1", "p2", "p3"];
const DASHES: [&str; 4] = ["", "6 3", "2 2", "8 2 2 2"];
/// How far above the data a reference line may be and still be drawn.
const IN_RANGE: f64 = 1.6;

static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The opening of a chart: its size, its accessible title and description, the patterns.
fn open(w: f64, h: f64, title: &str, desc: &str, axis: &str) -> (String, usize) {
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut o = format!(
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="c{id}t c{id}d" data-value-axis="{axis}" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title id="c{id}t">{}</title><desc id="c{id}d">{}</desc><defs>"#,
        escape(title),
        escape(desc)
    );
    for (k, c) in COLORS.iter().enumerate().skip(1) {
        let shape = match k {
            1 => format!(r#"<path d="M0,6 L6,0" stroke="{c}" stroke-width="2"/>"#),
            2 => format!(r#"<circle cx="3" cy="3" r="1.6" fill="{c}"/>"#),
            _ => format!(r#"<path d="M0,6 L6,0 M0,0 L6,6" stroke="{c}" stroke-width="1.2"/>"#),
        };
        let _ = write!(
            o,
            r#"<pattern id="c{id}p{k}" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="{c}" fill-opacity="0.25"/>{shape}</pattern>"#
        );
    }
    o.push_str("</defs>");
    let _ = write!(
        o,
        r#"<text x="8" y="18" font-size="14" font-weight="600">{}</text>"#,
        escape(title)
    );
    (o, id)
}

/// The fill of series `k` in chart `id` (its patterns are its own).
fn fill(id: usize, k: usize) -> String {
    match FILLS[k % FILLS.len()] {
        "s0" => COLORS[0].to_string(),
        _ => format!("url(#c{id}p{})", k % FILLS.len()),
    }
}

fn close(o: &mut String) {
    o.push_str("</svg></figure>");
}

/// `bytes` in the fiche's unit as a tick label, with the decimals an axis of `max` bytes in five
/// ticks needs (the same for every tick of the axis).
fn tick(style: Style, bytes: f64, max: f64) -> String {
    let step = style.in_unit(max) / 4.0;
    let decimals = if step >= 10.0 {
        0
    } else if step >= 1.0 {
        1
    } else if step > 0.0 {
        ((-step.log10()).ceil() as usize + 1).min(5)
    } else {
        2
    };
    style.decimal(style.in_unit(bytes.max(0.0)), decimals)
}

/// A legend item: a swatch (fill or line) and its text.
fn legend(o: &mut String, x: f64, y: f64, swatch: &str, text: &str) -> f64 {
    let _ = write!(
        o,
        r#"{swatch}<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
        x + 16.0,
        y + 9.0,
        escape(text)
    );
    x + 24.0 + 6.5 * text.chars().count() as f64
}

/// A label at (`x`, `y`) in `size` points, anchored at its `anchor` (`start`, `middle`, `end`);
/// `text` is already escaped.
fn label(o: &mut String, (x, y): (f64, f64), size: u8, anchor: &str, text: &str) {
    let _ = write!(
        o,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}">{text}</text>"#
    );
}

/// The outline of the plot area of a chart over a vertical value axis.
fn plot_area(o: &mut String, (left, top): (f64, f64), (pw, ph): (f64, f64)) {
    let _ = write!(
        o,
        r#"<rect class="plot" x="{left}" y="{top}" width="{pw:.1}" height="{ph:.1}" fill="none"/>"#
    );
}

/// The vertical value axis from 0 to `max` bytes: grid lines, their values, and the unit above.
fn value_axis(
    o: &mut String,
    style: Style,
    max: f64,
    (x1, x2, top): (f64, f64, f64),
    y: impl Fn(f64) -> f64,
) {
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let yy = y(v);
        let _ = write!(
            o,
            r#"<line class="grid" x1="{x1}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}"/>"#
        );
        label(o, (x1 - 4.0, yy + 3.0), 10, "end", &tick(style, v, max));
    }
    label(o, (x1 - 4.0, top - 8.0), 10, "end", style.unit());
}

/// The highest value a vertical axis shows: the data, and the reference lines within its reach.
fn value_max(data_max: f64, lines: &[(String, u64)]) -> f64 {
    lines
        .iter()
        .map(|(_, b)| *b as f64)
        .filter(|b| *b <= data_max * IN_RANGE)
        .fold(data_max, f64::max)
        * 1.05
}

/// The title of the horizontal axis, under the chart.
fn x_axis_title(o: &mut String, x: f64, h: f64, text: &str) {
    let _ = write!(
        o,
        r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
        h - 10.0,
        escape(text)
    );
}

/// A legend's swatch for the bars of series `k` in chart `id`.
fn bar_swatch(x: f64, id: usize, k: usize) -> String {
    format!(
        r#"<rect x="{x:.1}" y="28" width="12" height="10" fill="{}" stroke="{}"/>"#,
        fill(id, k),
        COLORS[k % COLORS.len()]
    )
}

/// Splits a label into lines of at most `width` characters (horizontal labels, no rotation).
fn wrap(label: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in label.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines.truncate(3);
    lines
}

/// Reference lines: those within reach of the data are drawn; the others are named above the
/// plot with an arrow and their value.
fn reference_lines(
    o: &mut String,
    style: Style,
    lines: &[(String, u64)],
    data_max: f64,
    (x1, x2): (f64, f64),
    sy: impl Fn(f64) -> f64,
    top: f64,
) {
    let mut above = Vec::new();
    for (k, (label, bytes)) in lines.iter().enumerate() {
        let value = *bytes as f64;
        if value <= data_max * IN_RANGE {
            let y = sy(value);
            let _ = write!(
                o,
                r##"<line x1="{x1}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="{}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#D55E00">{} ({}{}{})</text>"##,
                DASHES[(k + 1) % DASHES.len()],
                x2 + 4.0,
                y + 3.0,
                escape(label),
                style.size_number(value as u64),
                crate::report::format::NBSP,
                style.unit()
            );
        } else {
            above.push(format!(
                "↑ {} {}{}{}",
                label,
                style.size_number(value as u64),
                crate::report::format::NBSP,
                style.unit()
            ));
        }
    }
    for (k, text) in above.iter().take(4).enumerate() {
        let _ = write!(
            o,
            r##"<text x="{x2:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#D55E00">{}</text>"##,
            top - 4.0 - 12.0 * (above.len().min(4) - 1 - k) as f64,
            escape(text)
        );
    }
}

/// A chart of the document as SVG.
pub fn chart(style: Style, chart: &Chart) -> String {
    match chart {
        Chart::Bars {
            title,
            series,
            categories,
        } => bars(style, title, series, categories),
        Chart::Waterfall {
            title,
            steps,
            lines,
        } => waterfall(style, title, steps, lines),
        Chart::Timeline {
            title,
            x_label,
            points,
            marks,
        } => timeline(style, title, x_label, points, marks),
        Chart::Scatter {
            title,
            x_label,
            points,
            lines,
        } => scatter(style, title, x_label, points, lines),
    }
}

/// Peaks per category as horizontal bars: one row per phase (its name readable, never rotated),
/// one bar per series.
fn bars(
    style: Style,
    title: &str,
    series: &[String],
    categories: &[(String, Vec<Option<u64>>)],
) -> String {
    let max = categories
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    let label_w = categories
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(4)
        .min(32) as f64
        * 6.6
        + 12.0;
    let bar_h = 8.0;
    let row_h = bar_h * series.len().max(1) as f64 + 8.0;
    let (w, top, right) = (760.0, 58.0, 20.0);
    let h = top + row_h * categories.len().max(1) as f64 + 30.0;
    let (left, pw, ph) = (
        label_w,
        w - label_w - right,
        row_h * categories.len() as f64,
    );
    let sx = |v: f64| left + pw * v / max;
    let desc = categories
        .iter()
        .map(|(label, values)| {
            let parts: Vec<String> = series
                .iter()
                .zip(values)
                .map(|(s, v)| match v {
                    Some(b) => format!("{s} {}", style.size(Some(*b))),
                    None => format!("{s} —"),
                })
                .collect();
            format!("{label}: {}", parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ");
    let (mut o, id) = open(w, h, title, &desc, "x");
    let _ = write!(
        o,
        r#"<rect class="plot" x="{left:.1}" y="{top}" width="{pw:.1}" height="{ph:.1}" fill="none"/>"#
    );
    // Legend under the title.
    let mut x = 8.0;
    for (k, s) in series.iter().enumerate() {
        x = legend(&mut o, x, 28.0, &bar_swatch(x, id, k), s);
    }
    // Value axis on top, in the fiche's unit.
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let xx = sx(v);
        let _ = write!(
            o,
            r#"<line class="grid" x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{:.1}"/>"#,
            top + ph
        );
        label(
            &mut o,
            (xx, top + ph + 14.0),
            10,
            "middle",
            &tick(style, v, max),
        );
    }
    label(
        &mut o,
        (w - right, top + ph + 26.0),
        10,
        "end",
        style.unit(),
    );
    for (i, (name, values)) in categories.iter().enumerate() {
        let y0 = top + row_h * i as f64 + 4.0;
        let short: String = name.chars().take(32).collect();
        label(
            &mut o,
            (left - 6.0, y0 + row_h / 2.0),
            11,
            "end",
            &escape(&short),
        );
        for (j, v) in values.iter().enumerate() {
            let Some(v) = v else { continue };
            let _ = write!(
                o,
                r#"<rect class="data" x="{left:.1}" y="{:.1}" width="{:.1}" height="{bar_h}" fill="{}" stroke="{}" stroke-width="0.6"><title>{} — {}: {} ({})</title></rect>"#,
                y0 + bar_h * j as f64,
                (sx(*v as f64) - left).max(0.5),
                fill(id, j),
                COLORS[j % COLORS.len()],
                escape(name),
                escape(&series[j]),
                style.size(Some(*v)),
                style.raw(*v)
            );
        }
    }
    close(&mut o);
    o
}

/// From the weights to the driver's view: steps that add and levels drawn from zero, reference
/// lines (the estimate, the capacities) drawn in range or named with an arrow.
fn waterfall(
    style: Style,
    title: &str,
    steps: &[(String, u64, bool)],
    lines: &[(String, u64)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 340.0, 64.0, 64.0, 70.0, 170.0);
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
    let data_max = bars.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64;
    let ymax = value_max(data_max, lines);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let n = bars.len().max(1) as f64;
    let slot = pw / n;
    let sy = |y: f64| top + ph - ph * y / ymax;
    let desc = bars
        .iter()
        .map(|(label, from, to, level)| {
            if *level {
                format!("{label} = {}", style.size(Some(*to)))
            } else {
                format!("+ {label} {}", style.size(Some(to - from)))
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    let (mut o, id) = open(w, h, title, &desc, "y");
    plot_area(&mut o, (left, top), (pw, ph));
    let mut x = 8.0;
    for (k, text) in [style.say(ExportText::Adds), style.say(ExportText::Level)]
        .iter()
        .enumerate()
    {
        x = legend(&mut o, x, 28.0, &bar_swatch(x, id, 1 - k), text);
    }
    value_axis(&mut o, style, ymax, (left, left + pw, top), sy);
    let chars = ((slot / 6.2) as usize).max(6);
    for (i, (name, from, to, level)) in bars.iter().enumerate() {
        let x = left + slot * i as f64 + slot * 0.15;
        let (y1, y2) = (sy(*to as f64), sy(*from as f64));
        let k = usize::from(!*level);
        let _ = write!(
            o,
            r#"<rect class="data" x="{x:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{}" stroke="{}" stroke-width="0.8"><title>{}: {} ({})</title></rect>"#,
            slot * 0.7,
            (y2 - y1).max(0.5),
            fill(id, k),
            COLORS[k],
            escape(name),
            style.size(Some(to - from)),
            style.raw(to - from)
        );
        for (line, text) in wrap(name, chars).iter().enumerate() {
            let at = (
                left + slot * i as f64 + slot / 2.0,
                h - bottom + 14.0 + 12.0 * line as f64,
            );
            label(&mut o, at, 10, "middle", &escape(text));
        }
    }
    reference_lines(&mut o, style, lines, data_max, (left, left + pw), sy, top);
    close(&mut o);
    o
}

/// Peak against a varied value: successes (filled circles, joined) and failures (crosses),
/// reference lines (an emulated limit, cards) in range or named with an arrow.
fn scatter(
    style: Style,
    title: &str,
    x_label: &str,
    points: &[(u64, Option<u64>, bool)],
    lines: &[(String, u64)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 340.0, 64.0, 50.0, 70.0, 170.0);
    let xmax = points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let xmin = points.iter().map(|p| p.0).min().unwrap_or(0) as f64;
    let data_max = points.iter().filter_map(|p| p.1).max().unwrap_or(1).max(1) as f64;
    let ymax = value_max(data_max, lines);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let span = (xmax - xmin).max(1.0);
    let sx = |x: f64| left + pw * (x - xmin) / span;
    let sy = |y: f64| top + ph - ph * y / ymax;
    let desc = points
        .iter()
        .map(|(x, y, ok)| {
            format!(
                "{x_label} {}: {}{}",
                style.integer(u128::from(*x)),
                style.size(*y),
                if *ok {
                    ""
                } else {
                    style.say(ExportText::FailedSuffix)
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let (mut o, _) = open(w, h, title, &desc, "y");
    plot_area(&mut o, (left, top), (pw, ph));
    let mut x = 8.0;
    let swatch = format!(
        r#"<circle cx="{:.1}" cy="33" r="4" fill="{}"/>"#,
        x + 6.0,
        COLORS[0]
    );
    x = legend(&mut o, x, 28.0, &swatch, style.say(ExportText::Completed));
    let swatch = format!(
        r#"<path d="M{:.1},29 l8,8 M{:.1},37 l8,-8" stroke="{}" stroke-width="2"/>"#,
        x + 2.0,
        x + 2.0,
        COLORS[1]
    );
    legend(
        &mut o,
        x,
        28.0,
        &swatch,
        style.say(ExportText::FailedPartialPeak),
    );
    value_axis(&mut o, style, ymax, (left, left + pw, top), sy);
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
            r#"<polyline class="data" fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            COLORS[0],
            path.join(" ")
        );
    }
    for (x, y, success) in points {
        let cx = sx(*x as f64);
        let Some(y) = y else { continue };
        let cy = sy(*y as f64);
        let tip = format!(
            "{x_label} {}: {} ({})",
            style.integer(u128::from(*x)),
            style.size(Some(*y)),
            style.raw(*y)
        );
        if *success {
            let _ = write!(
                o,
                r#"<circle class="data" cx="{cx:.1}" cy="{cy:.1}" r="4" fill="{}"><title>{}</title></circle>"#,
                COLORS[0],
                escape(&tip)
            );
        } else {
            let _ = write!(
                o,
                r#"<path class="data" d="M{:.1},{:.1} l8,8 M{:.1},{:.1} l8,-8" stroke="{}" stroke-width="2"><title>{}</title></path>"#,
                cx - 4.0,
                cy - 4.0,
                cx - 4.0,
                cy + 4.0,
                COLORS[1],
                escape(&tip)
            );
        }
    }
    // X ticks at the measured values (at most 8 of them).
    let mut xs: Vec<u64> = points.iter().map(|p| p.0).collect();
    xs.sort_unstable();
    xs.dedup();
    let stride = xs.len().div_ceil(8).max(1);
    for x in xs.iter().step_by(stride) {
        let value = style.integer(u128::from(*x));
        label(
            &mut o,
            (sx(*x as f64), top + ph + 14.0),
            10,
            "middle",
            &value,
        );
    }
    x_axis_title(&mut o, left + pw / 2.0, h, x_label);
    reference_lines(&mut o, style, lines, data_max, (left, left + pw), sy, top);
    close(&mut o);
    o
}

/// Allocated and reserved over time, the phases' starts marked.
fn timeline(
    style: Style,
    title: &str,
    x_label: &str,
    points: &[(f64, u64, u64)],
    marks: &[(f64, String)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 360.0, 64.0, 50.0, 70.0, 30.0);
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
    let peak_alloc = points.iter().map(|p| p.1).max().unwrap_or(0);
    let peak_resv = points.iter().map(|p| p.2).max().unwrap_or(0);
    let desc = format!(
        "{} {}; {} {}; {} {}",
        style.integer(points.len() as u128),
        style.say(ExportText::Points),
        style.say(ExportText::HighestAllocated),
        style.size(Some(peak_alloc)),
        style.say(ExportText::HighestReserved),
        style.size(Some(peak_resv))
    );
    let (mut o, _) = open(w, h, title, &desc, "y");
    plot_area(&mut o, (left, top), (pw, ph));
    value_axis(&mut o, style, ymax, (left, left + pw, top), sy);
    for (k, (x, name)) in marks.iter().enumerate() {
        let xx = sx(*x);
        // Labels alternate between two heights so that neighbours do not overlap.
        let y = top + 10.0 + (k % 2) as f64 * 11.0;
        let _ = write!(
            o,
            r#"<line class="axis" x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{:.1}" stroke-dasharray="2 3"/><text x="{:.1}" y="{y:.1}" font-size="9">{}</text>"#,
            top + ph,
            xx + 2.0,
            escape(name)
        );
    }
    let mut lx = 8.0;
    for (k, name) in [
        style.say(ExportText::Reserved),
        style.say(ExportText::Allocated),
    ]
    .iter()
    .enumerate()
    {
        let path: Vec<String> = points
            .iter()
            .map(|p| {
                let v = if k == 0 { p.2 } else { p.1 };
                format!("{:.1},{:.1}", sx(p.0), sy(v as f64))
            })
            .collect();
        let color = COLORS[k];
        let dash = DASHES[k];
        let _ = write!(
            o,
            r#"<polyline class="data" fill="none" stroke="{color}" stroke-width="1.8" stroke-dasharray="{dash}" points="{}"/>"#,
            path.join(" ")
        );
        let swatch = format!(
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="33" y2="33" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
            lx + 12.0
        );
        lx = legend(&mut o, lx, 28.0, &swatch, name);
    }
    for k in 0..=4 {
        let v = xmin + span * k as f64 / 4.0;
        let value = style.decimal(v, if span < 10.0 { 2 } else { 0 });
        label(&mut o, (sx(v), top + ph + 14.0), 10, "middle", &value);
    }
    x_axis_title(&mut o, left + pw / 2.0, h, x_label);
    close(&mut o);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn labels_wrap_without_rotation_and_far_capacities_become_arrows() {
        assert_eq!(wrap("growth to the peak", 10), ["growth to", "the peak"]);
        let style = Style::new(Lang::En, Units::Gib);
        let svg = scatter(
            style,
            "t",
            "batch",
            &[(1, Some(150 << 20), true), (8, Some(470 << 20), true)],
            &[("RTX 5070".into(), 12_000_000_000)],
        );
        assert!(!svg.contains("rotate("));
        assert!(svg.contains("↑ RTX 5070"), "far above the data: an arrow");
        assert!(!svg.contains(r#"<line x1="64" x2="590""#));
        assert!(svg.contains("<desc"));
    }
}
