//! A report as structured content (headings, paragraphs, tables, lists, charts), independent of
//! any output format: the exporters in `export/` turn it into Markdown or HTML.

/// A chart; Markdown skips charts (their numbers are in the tables), HTML draws them.
#[derive(Clone, Debug)]
pub enum Chart {
    /// Bars per category (e.g. per phase): each category has one bar per series.
    Bars {
        title: String,
        series: Vec<String>,
        categories: Vec<(String, Vec<Option<u64>>)>,
    },
    /// From the estimate to the peak: bars that add (`Some(delta)` steps) and levels (a running
    /// total drawn from zero), with reference lines (the estimate, capacities) that are drawn
    /// when they fall in the chart's range and named with an arrow otherwise.
    Waterfall {
        title: String,
        /// (label, bytes, is_level): a level is drawn from zero; a step adds to the running total.
        steps: Vec<(String, u64, bool)>,
        lines: Vec<(String, u64)>,
    },
    /// Allocated and reserved over time (`measure --timeline`), the phases' starts marked.
    Timeline {
        title: String,
        x_label: String,
        /// (x, allocated, reserved): the highest levels of each span of the trace.
        points: Vec<(f64, u64, u64)>,
        /// (x, phase name): where each phase begins.
        marks: Vec<(f64, String)>,
    },
    /// Peak against a varied value, successes and failures marked, capacities as lines.
    Scatter {
        title: String,
        x_label: String,
        points: Vec<(u64, Option<u64>, bool)>,
        lines: Vec<(String, u64)>,
    },
}

/// One cell of a table. A size is a number in the fiche's one unit (named in the column's
/// header, or in the cell with `with_unit`), its raw bytes kept for hover and for Markdown's final
/// table of raw bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Text(String),
    /// An identifier (a path, a version, a hash, a status): shown as code, never translated.
    Code(String),
    Size {
        bytes: Option<u64>,
        with_unit: bool,
    },
    Percent(Option<f64>),
}

impl Cell {
    /// A size in a column whose header names the unit.
    pub fn size(bytes: Option<u64>) -> Cell {
        Cell::Size {
            bytes,
            with_unit: false,
        }
    }

    /// A size that says its unit (a table whose rows hold different kinds of value).
    pub fn size_with_unit(bytes: Option<u64>) -> Cell {
        Cell::Size {
            bytes,
            with_unit: true,
        }
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }
}

/// How a verdict line reads: good news, bad news, or a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Good,
    Bad,
    Neutral,
}

/// One line of the verdict: what it is, its answer, and the section that shows why.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub label: String,
    pub value: String,
    /// The heading (its text) of the section behind this line.
    pub section: Option<String>,
    pub tone: Tone,
}

#[derive(Clone, Debug)]
pub enum Block {
    /// The answer first: a few lines, each linked to the section that backs it.
    Verdict(Vec<Verdict>),
    Heading(String),
    /// Text; `code` spans in backticks are identifiers (shown as code).
    Para(String),
    Table {
        header: Vec<String>,
        rows: Vec<Vec<Cell>>,
    },
    List(Vec<String>),
    Chart(Chart),
}

/// A raw input attached to the report.
#[derive(Clone, Debug)]
pub struct Attachment {
    pub path: String,
    pub sha256: String,
    pub raw: String,
}

#[derive(Clone, Debug)]
pub struct Document {
    pub title: String,
    /// The language and the unit every number is written in.
    pub style: crate::report::format::Style,
    pub blocks: Vec<Block>,
    pub attachments: Vec<Attachment>,
}
