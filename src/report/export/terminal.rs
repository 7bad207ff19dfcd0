//! A document as terminal text: headings, paragraphs, lists and tables; charts are left to the
//! HTML file (their numbers are in the tables), the verdict to the fiche's files. Each table goes
//! through `output::table`, the one terminal writer: a column of numbers is right-aligned, text
//! left, and the document's no-break spaces become plain ones (`grep "3.00 GiB"` finds them).

use super::Exporter;
use crate::output::table::{Column, Table};
use crate::output::terminal_safe;
use crate::report::document::{Block, Cell, Document};
use crate::report::format::Style;

pub struct Terminal;

impl Exporter for Terminal {
    fn render(&self, doc: &Document) -> String {
        let style = doc.style;
        let mut o = format!("{}\n", terminal_safe(&doc.title));
        for block in &doc.blocks {
            match block {
                Block::Heading(h) => o += &format!("\n{}\n", terminal_safe(h)),
                Block::Para(p) => {
                    o += &terminal_safe(&p.replace("**", "").replace('`', ""));
                    o.push('\n');
                }
                Block::List(items) => {
                    for i in items {
                        o += &format!("  - {}\n", terminal_safe(i));
                    }
                }
                Block::Table { header, rows } => o += &table(header, rows, style).terminal(),
                Block::Chart(_) | Block::Verdict(_) => {}
            }
        }
        o.replace(['\u{a0}', '\u{202f}'], " ")
    }
}

/// A document's table as the terminal's: two spaces between columns, numbers on the right.
fn table(header: &[String], rows: &[Vec<Cell>], style: Style) -> Table {
    let columns = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let cells = rows.iter().filter_map(|r| r.get(i));
            let numbers = cells.clone().all(number) && cells.clone().any(|c| !dash(c));
            let column = if numbers {
                Column::right(h.as_str())
            } else {
                Column::left(h.as_str())
            };
            column.gap(2)
        })
        .collect();
    let mut t = Table::new(columns).indent(2);
    for r in rows {
        t.row(r.iter().map(|c| match c {
            Cell::Text(t) | Cell::Code(t) => t.clone(),
            Cell::Size { bytes, .. } => style.size(*bytes),
            Cell::Percent(p) => style.percent(*p),
        }));
    }
    t
}

/// "—": no figure, in a column of numbers or of text alike.
fn dash(c: &Cell) -> bool {
    matches!(c, Cell::Text(t) if t == "—")
}

/// A number: a size, a percentage, or text that `format::Style` wrote from a number (digits,
/// separators and a sign: `1,024`, `1 024`, `0.125`, `−3`).
fn number(c: &Cell) -> bool {
    match c {
        Cell::Size { .. } | Cell::Percent(_) => true,
        Cell::Code(_) => false,
        Cell::Text(t) => {
            dash(c)
                || (t.starts_with(|c: char| c.is_ascii_digit() || "−-+".contains(c))
                    && t.chars()
                        .all(|c| c.is_ascii_digit() || ",. \u{a0}\u{202f}−-+".contains(c)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    /// Sizes on the terminal are grep-able: a plain space between a number and its unit, in
    /// English and in French (where the document holds no-break spaces).
    #[test]
    fn terminal_sizes_use_plain_spaces() {
        for (lang, want) in [(Lang::En, "3.00 GiB"), (Lang::Fr, "3,00 Gio")] {
            let doc = Document {
                title: "t".into(),
                style: Style::new(lang, Units::Gib),
                blocks: vec![Block::Table {
                    header: vec!["size".into()],
                    rows: vec![vec![Cell::size_with_unit(Some(3 << 30))]],
                }],
                attachments: Vec::new(),
            };
            let text = Terminal.render(&doc);
            assert!(text.contains(want), "{text:?}");
            assert!(!text.contains(['\u{a0}', '\u{202f}']), "{text:?}");
        }
    }

    #[test]
    fn numbers_right_text_left() {
        let doc = Document {
            title: "t".into(),
            style: Style::new(Lang::En, Units::Gib),
            blocks: vec![Block::Table {
                header: vec!["what".into(), "value".into(), "count".into()],
                rows: vec![
                    vec![
                        "reserved".into(),
                        Cell::size_with_unit(Some(3 << 30)),
                        "1,024".into(),
                    ],
                    vec!["free".into(), "—".into(), "7".into()],
                    vec![
                        Cell::Code("a`b".into()),
                        Cell::Percent(Some(0.5)),
                        "—".into(),
                    ],
                ],
            }],
            attachments: Vec::new(),
        };
        let text = Terminal.render(&doc);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "  what         value  count", "{text}");
        assert_eq!(lines[2], "  reserved  3.00 GiB  1,024", "{text}");
        assert_eq!(lines[3], "  free             —      7", "{text}");
    }
}
