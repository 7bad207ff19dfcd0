//! Exporters behind one trait: Markdown for reading and diffing, HTML as a single self-contained
//! file with inline SVG charts and the raw results embedded.

mod html;
mod markdown;
mod svg;

pub use html::Html;
pub use markdown::Markdown;

use super::document::Document;

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
