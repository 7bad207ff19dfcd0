//! Exporters behind one trait: Markdown for reading and diffing, HTML as a single self-contained
//! file with inline SVG charts and the raw results embedded, terminal text (`explain --snapshot`).

mod html;
mod markdown;
mod svg;
mod terminal;

pub use html::Html;
pub use markdown::Markdown;
pub use terminal::Terminal;

use super::document::Document;

/// Escapes text for HTML and SVG content and attribute values (both exporters: here, so that
/// neither imports the other); control characters and bidirectional
/// overrides are shown as escapes first (`crate::output::terminal_safe`, the one sanitiser).
pub fn escape(s: &str) -> String {
    let s = crate::output::terminal_safe(s);
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

/// Renders a document into one output format.
pub trait Exporter {
    fn render(&self, doc: &Document) -> String;
}

/// The exporter a file name asks for: `.md`/`.markdown` or `.html`/`.htm`.
pub fn for_path(path: &std::path::Path) -> Option<Box<dyn Exporter>> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("md") | Some("markdown") => Some(Box::new(Markdown)),
        Some("html") | Some("htm") => Some(Box::new(Html)),
        _ => None,
    }
}
