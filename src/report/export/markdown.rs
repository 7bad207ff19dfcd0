//! Markdown: plain text for reading and diffing; charts are skipped (their numbers are in the
//! tables) and no file content can become HTML in a renderer.

use std::fmt::Write as _;

use super::Exporter;
use crate::report::document::{Block, Document};

pub struct Markdown;

/// Markdown text: `<` and `>` escaped so that no file content becomes HTML in a renderer.
fn md(s: &str) -> String {
    s.replace('<', "&lt;").replace('>', "&gt;")
}

fn md_cell(s: &str) -> String {
    md(s).replace('|', "\\|").replace('\n', " ")
}

impl Exporter for Markdown {
    fn render(&self, doc: &Document) -> String {
        let mut o = format!("# {}\n\n", md(&doc.title));
        for block in &doc.blocks {
            match block {
                Block::Heading(h) => {
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
                            r.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | ")
                        );
                    }
                    o.push('\n');
                }
                Block::Chart(_) => {}
            }
        }
        o
    }
}
