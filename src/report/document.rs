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

#[derive(Clone, Debug)]
pub enum Block {
    Heading(String),
    Para(String),
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
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
    pub lang: &'static str,
    pub blocks: Vec<Block>,
    pub attachments: Vec<Attachment>,
}
