//! Markdown: plain text for reading and diffing; charts are skipped (their numbers are in the
//! tables) and no file content can become HTML in a renderer. Sizes read in the fiche's one unit;
//! every size shown is listed again in raw bytes in a final table, for copy-paste.

use crate::report::catalog::common::CommonText;
use crate::report::catalog::export::ExportText;
use std::fmt::Write as _;

use super::Exporter;
use crate::report::document::{Block, Cell, Document, Tone};
use crate::report::format::{Style, slug};

pub struct Markdown;

/// Markdown text: `<` and `>` escaped so that no file content becomes HTML in a renderer, except
/// inside code spans, where nothing is HTML and `&lt;` would be shown as is.
fn md(s: &str) -> String {
    let s = crate::output::terminal_safe(s);
    let parts: Vec<&str> = s.split('`').collect();
    // An odd number of backticks leaves the last one unmatched: what follows it is text.
    let closed = parts.len() % 2 == 1;
    let mut out = String::with_capacity(s.len());
    for (k, part) in parts.iter().enumerate() {
        if k > 0 {
            out.push('`');
        }
        let in_code = k % 2 == 1 && (closed || k + 1 < parts.len());
        if in_code {
            out.push_str(part);
        } else {
            out.push_str(&part.replace('<', "&lt;").replace('>', "&gt;"));
        }
    }
    out
}

fn md_cell(s: &str) -> String {
    md(s).replace('|', "\\|").replace('\n', " ")
}

/// A code span in a table cell: nothing inside a code span is HTML (so `<` stays `<`, never
/// `&lt;`, which a renderer would show as is); a backtick cannot close it early and a `|` cannot
/// end the cell.
fn code_cell(s: &str) -> String {
    format!(
        "`{}`",
        crate::output::terminal_safe(s)
            .replace('`', "'")
            .replace('|', "\\|")
            .replace('\n', " ")
    )
}

fn cell(c: &Cell, style: Style) -> String {
    match c {
        Cell::Text(t) => md_cell(t),
        Cell::Code(t) => code_cell(t),
        Cell::Size {
            bytes: Some(b),
            with_unit,
        } => {
            if *with_unit {
                style.size(Some(*b))
            } else {
                style.size_number(*b)
            }
        }
        Cell::Size { bytes: None, .. } => style.say(CommonText::NullNotRead).into(),
        Cell::Percent(p) => style.percent(*p),
    }
}

impl Exporter for Markdown {
    fn render(&self, doc: &Document) -> String {
        let style = doc.style;
        let mut o = format!("# {}\n\n", md(&doc.title));
        // (section, row, column, bytes) of every size shown.
        let mut raw: Vec<(String, String, String, u64)> = Vec::new();
        let mut section = String::new();
        for block in &doc.blocks {
            match block {
                Block::Verdict(lines) => {
                    let _ = write!(o, "## {}\n\n", style.say(CommonText::Verdict));
                    for v in lines {
                        let mark = match v.tone {
                            Tone::Good => "✔ ",
                            Tone::Bad => "✘ ",
                            Tone::Neutral => "",
                        };
                        let value = match &v.section {
                            Some(h) => format!("{mark}{} ([→](#{}))", md(&v.value), slug(h)),
                            None => format!("{mark}{}", md(&v.value)),
                        };
                        let _ = writeln!(
                            o,
                            "- **{}**{} {value}",
                            md(&v.label),
                            style.say(CommonText::Colon)
                        );
                    }
                    o.push('\n');
                }
                Block::Heading(h) => {
                    section = h.clone();
                    let _ = write!(o, "## {}\n\n", md(h));
                }
                Block::Para(p) => {
                    let _ = write!(o, "{}\n\n", md(p));
                }
                Block::List(items) => {
                    for i in items {
                        let _ = writeln!(o, "- {}", md(i));
                    }
                    o.push('\n');
                }
                Block::Table { header, rows } => {
                    let _ = writeln!(
                        o,
                        "| {} |",
                        header
                            .iter()
                            .map(|h| md_cell(h))
                            .collect::<Vec<_>>()
                            .join(" | ")
                    );
                    let _ = writeln!(
                        o,
                        "|{}|",
                        header.iter().map(|_| " --- ").collect::<Vec<_>>().join("|")
                    );
                    for r in rows {
                        let _ = writeln!(
                            o,
                            "| {} |",
                            r.iter()
                                .map(|c| cell(c, style))
                                .collect::<Vec<_>>()
                                .join(" | ")
                        );
                        let row = r.first().map(|c| cell(c, style)).unwrap_or_default();
                        for (k, c) in r.iter().enumerate() {
                            if let Cell::Size { bytes: Some(b), .. } = c {
                                raw.push((
                                    section.clone(),
                                    row.clone(),
                                    header.get(k).cloned().unwrap_or_default(),
                                    *b,
                                ));
                            }
                        }
                    }
                    o.push('\n');
                }
                Block::Chart(_) => {}
            }
        }
        if !raw.is_empty() {
            let _ = write!(
                o,
                "## {}\n\n| {} | {} | {} | {} |\n| --- | --- | --- | --- |\n",
                style.say(ExportText::RawBytes),
                style.say(ExportText::Section),
                style.say(ExportText::Row),
                style.say(ExportText::Column),
                style.say(ExportText::Bytes)
            );
            for (s, r, c, b) in raw {
                let _ = writeln!(o, "| {} | {} | {} | {} |", md_cell(&s), r, md_cell(&c), b);
            }
            o.push('\n');
        }
        // Every piece from a file was escaped where it was placed; the whole text once more, so
        // that no piece added later can carry a control character through.
        crate::output::terminal_safe(&o).into_owned()
    }
}
