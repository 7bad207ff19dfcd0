//! The one table model for the terminal, and its one writer: every terminal renderer (estimate,
//! measure, predict, sweep, explain, compare, cards) builds a [`Table`] and calls
//! [`Table::terminal`], so widths, alignment, the sanitiser and the spaces are decided here once.
//! It lives in the foundation layer so that every layer may use it; `report::export::Terminal`
//! converts a report's tables into it.
//!
//! Widths count the columns a terminal shows (`unicode-width`, already in the build through
//! indicatif): a CJK name takes two, an accent none. No-break spaces (between a number and its
//! unit, French thousands) are written as plain spaces, so that `grep "3.00 GiB"` finds them.

use unicode_width::UnicodeWidthStr;

use super::terminal_safe;

/// Where a cell sits in its column: numbers right, text left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its heading, its alignment, the width it keeps at least (so that a table keeps its
/// familiar shape when its cells are short) and the spaces before it.
#[derive(Clone, Debug)]
pub struct Column {
    heading: String,
    align: Align,
    min_width: usize,
    gap: usize,
}

impl Column {
    /// A text column.
    pub fn left(heading: impl Into<String>) -> Column {
        Column {
            heading: heading.into(),
            align: Align::Left,
            min_width: 0,
            gap: 1,
        }
    }

    /// A number column.
    pub fn right(heading: impl Into<String>) -> Column {
        Column {
            align: Align::Right,
            ..Column::left(heading)
        }
    }

    /// At least `width` columns wide, whatever its cells.
    pub fn min(mut self, width: usize) -> Column {
        self.min_width = width;
        self
    }

    /// `spaces` before the column (1 unless told; the first column's are the table's indent).
    pub fn gap(mut self, spaces: usize) -> Column {
        self.gap = spaces;
        self
    }
}

#[derive(Clone, Debug)]
enum Row {
    /// One cell per column; fewer, and the last one spans the columns left (written as it is, not
    /// counted in any width: a note, a reading that has no columns).
    Cells(Vec<String>),
    /// A line of its own between rows, written as it is.
    Text(String),
    /// A line under the heading's width (at most [`RULE_MAX`] columns).
    Rule,
}

/// A rule is never wider than this, however wide the table.
const RULE_MAX: usize = 100;

/// Rows under columns. The heading line is written when a column has a heading.
#[derive(Clone, Debug, Default)]
pub struct Table {
    indent: usize,
    columns: Vec<Column>,
    rows: Vec<Row>,
}

/// The columns `text` takes on a terminal.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// `text` as the terminal shows it: escapes for control and bidirectional characters, plain
/// spaces for no-break ones.
fn shown(text: &str) -> String {
    terminal_safe(text).replace(['\u{a0}', '\u{202f}'], " ")
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Table {
        Table {
            indent: 0,
            columns,
            rows: Vec::new(),
        }
    }

    /// `spaces` before every row (not before [`Table::text`] lines, which say their own).
    pub fn indent(mut self, spaces: usize) -> Table {
        self.indent = spaces;
        self
    }

    /// A row; see [`Row::Cells`] for a row of fewer cells than columns.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(Row::Cells(
            cells.into_iter().map(|c| shown(&c.into())).collect(),
        ));
    }

    /// A line of its own between rows (a note under a row, a sub-heading), written as it is.
    pub fn text(&mut self, line: impl Into<String>) {
        self.rows.push(Row::Text(shown(&line.into())));
    }

    /// A rule as wide as the heading line.
    pub fn rule(&mut self) {
        self.rows.push(Row::Rule);
    }

    /// Each column's width: its minimum, its heading, and its cells (a spanning cell excepted).
    pub fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .map(|c| c.min_width.max(width(&shown(&c.heading))))
            .collect();
        for row in &self.rows {
            let Row::Cells(cells) = row else { continue };
            let counted = if cells.len() < self.columns.len() {
                cells.len().saturating_sub(1)
            } else {
                cells.len()
            };
            for (w, cell) in widths.iter_mut().zip(&cells[..counted]) {
                *w = (*w).max(width(cell));
            }
        }
        widths
    }

    /// The table as terminal text, one line per row, no space at the end of a line.
    pub fn terminal(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| -> String {
            let mut o = " ".repeat(self.indent);
            let spans = cells.len() < self.columns.len();
            for (i, (cell, column)) in cells.iter().zip(&self.columns).enumerate() {
                if i > 0 {
                    o.push_str(&" ".repeat(column.gap));
                }
                let pad = " ".repeat(widths[i].saturating_sub(width(cell)));
                match column.align {
                    _ if spans && i + 1 == cells.len() => o.push_str(cell),
                    Align::Left => {
                        o.push_str(cell);
                        o.push_str(&pad);
                    }
                    Align::Right => {
                        o.push_str(&pad);
                        o.push_str(cell);
                    }
                }
            }
            let kept = o.trim_end().len();
            o.truncate(kept);
            o.push('\n');
            o
        };
        let heading: Vec<String> = self.columns.iter().map(|c| shown(&c.heading)).collect();
        let heading = line(&heading);
        let mut out = String::new();
        if self.columns.iter().any(|c| !c.heading.is_empty()) {
            out.push_str(&heading);
        }
        for row in &self.rows {
            match row {
                Row::Cells(cells) => out.push_str(&line(cells)),
                Row::Text(t) => {
                    out.push_str(t);
                    out.push('\n');
                }
                Row::Rule => {
                    let wide = width(heading.trim_end()).saturating_sub(self.indent);
                    out.push_str(&" ".repeat(self.indent));
                    out.push_str(&"─".repeat(wide.min(RULE_MAX)));
                    out.push('\n');
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes() -> Table {
        let mut t = Table::new(vec![Column::left("name"), Column::right("GiB").gap(2)]).indent(2);
        t.row(["weights", "13.49"]);
        t.row(["kv", "2.00"]);
        t
    }

    #[test]
    fn numbers_right_text_left_no_trailing_space() {
        assert_eq!(
            sizes().terminal(),
            "  name       GiB\n  weights  13.49\n  kv        2.00\n"
        );
        let mut t = Table::new(vec![Column::right("n"), Column::left("note")]);
        t.row(["10", ""]);
        t.row(["2", "short"]);
        assert_eq!(t.terminal(), " n note\n10\n 2 short\n");
    }

    #[test]
    fn a_minimum_width_holds_and_a_long_cell_widens_its_column() {
        let mut t = Table::new(vec![Column::left("a").min(6), Column::right("b").min(4)]);
        t.row(["x", "1"]);
        assert_eq!(t.terminal(), "a         b\nx         1\n");
        t.row(["a longer one", "2"]);
        assert_eq!(
            t.terminal(),
            "a               b\nx               1\na longer one    2\n"
        );
    }

    #[test]
    fn wide_characters_count_as_the_terminal_shows_them() {
        let mut t = Table::new(vec![Column::left("name"), Column::right("n")]);
        t.row(["日本語", "1"]);
        t.row(["é", "22"]);
        // 日本語 takes six columns: "name" is padded to six, "é" to six.
        assert_eq!(t.terminal(), "name    n\n日本語  1\né      22\n");
        assert_eq!(width("日本語"), 6);
        assert_eq!(width("—"), 1);
    }

    #[test]
    fn an_empty_table_is_its_heading_or_nothing() {
        let t = Table::new(vec![Column::left("a"), Column::right("b")]).indent(2);
        assert_eq!(t.terminal(), "  a b\n");
        assert_eq!(Table::new(vec![Column::left("")]).terminal(), "");
        assert_eq!(Table::default().terminal(), "");
    }

    #[test]
    fn cells_are_sanitised_and_spaces_plain() {
        let mut t = Table::new(vec![Column::left("name"), Column::right("size")]);
        t.row(["a\u{1b}[2Jb", "3.00\u{a0}GiB"]);
        t.row(["r\u{202e}l", "3,00\u{202f}Gio"]);
        t.text("note\u{7}");
        let text = t.terminal();
        assert_eq!(
            text,
            "name           size\na\\x1b[2Jb  3.00 GiB\nr\\u{202e}l 3,00 Gio\nnote\\x07\n"
        );
    }

    #[test]
    fn a_short_row_spans_and_text_and_rules_sit_between_rows() {
        let mut t = Table::new(vec![
            Column::left("phase").min(6),
            Column::right("peak"),
            Column::left("note").gap(2),
        ])
        .indent(2);
        t.row(["load", "1.0", "ok"]);
        t.row(["", "stopped: a reason longer than any column"]);
        t.rule();
        t.text("after");
        assert_eq!(
            t.terminal(),
            "  phase  peak  note\n  load    1.0  ok\n         stopped: a reason longer than any column\n  ─────────────────\nafter\n"
        );
    }
}
