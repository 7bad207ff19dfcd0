//! One self-contained HTML file: inline CSS and SVG charts, the raw inputs embedded as JSON, no
//! network access.

use crate::report::catalog::common::CommonText;
use std::fmt::Write as _;

use super::{Exporter, escape, svg};
use crate::report::document::{Block, Cell, Document, Tone};
use crate::report::format::{Style, slug};

pub struct Html;

/// A JSON document inside `<script type="application/json">`: every `<` becomes the JSON escape
/// `\u003c`, and every control or bidirectional character (`crate::output::unsafe_char`) its
/// `\uXXXX` escape. These are JSON escapes, valid only inside JSON strings, where the parsed value
/// is unchanged; a JSON document carries such characters only inside its strings.
fn json_script_safe(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if c == '<' || crate::output::unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Inline text: `code` spans between backticks become code (identifiers), the rest is escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (k, part) in text.split('`').enumerate() {
        if k % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

/// One table cell: a size is a number in the fiche's unit, its raw bytes on hover.
fn cell(c: &Cell, style: Style) -> String {
    match c {
        Cell::Text(t) => format!("<td>{}</td>", inline(t)),
        // A short identifier never breaks across lines; a long one (a path) may.
        Cell::Code(t) if t.chars().count() <= 24 => {
            format!("<td class=\"id\"><code>{}</code></td>", escape(t))
        }
        Cell::Code(t) => format!("<td><code>{}</code></td>", escape(t)),
        Cell::Size {
            bytes: Some(b),
            with_unit,
        } => format!(
            "<td class=\"n\" title=\"{}\">{}</td>",
            escape(&style.raw(*b)),
            escape(&if *with_unit {
                style.size(Some(*b))
            } else {
                style.size_number(*b)
            })
        ),
        Cell::Size { bytes: None, .. } => format!(
            "<td class=\"n\">{}</td>",
            escape(style.say(CommonText::NullNotRead))
        ),
        Cell::Percent(p) => format!("<td class=\"n\">{}</td>", escape(&style.percent(*p))),
    }
}

/// Light and dark colours follow the reader's setting; print is A4 with no table cut where it
/// can be avoided; wide tables scroll inside themselves, never the page.
const CSS: &str = r#"
:root{color-scheme:light dark;--fg:#1b1f24;--muted:#57606a;--bg:#ffffff;--line:#d0d7de;--grid:#e6e9ed;--card:#f6f8fa;--accent:#0072B2;--good:#1a7f37;--bad:#cf222e}
@media (prefers-color-scheme: dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;--line:#30363d;--grid:#262c36;--card:#161b22;--accent:#56B4E9;--good:#3fb950;--bad:#f85149}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1040px;margin:0 auto;padding:20px 18px 40px}
h1{font-size:1.45em;margin:0 0 .5em}
h2{font-size:1.12em;margin:1.8em 0 .5em;padding-bottom:.2em;border-bottom:1px solid var(--line)}
p,li{max-width:75ch}
a{color:var(--accent)}
.verdict{border:2px solid var(--accent);border-radius:8px;padding:10px 16px 12px;background:var(--card)}
.verdict h2{margin:0 0 .4em;border:0;font-size:1.05em}
.verdict dl{display:grid;grid-template-columns:minmax(9em,max-content) 1fr;gap:3px 16px;margin:0}
.verdict dt{color:var(--muted);font-weight:600}
.verdict dd{margin:0;overflow-wrap:anywhere}
.verdict .good::before{content:"✔ ";color:var(--good);font-weight:700}
.verdict .bad::before{content:"✘ ";color:var(--bad);font-weight:700}
table{display:block;max-width:100%;overflow-x:auto;border-collapse:collapse;margin:.8em 0;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--card);font-weight:600}
td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.id{white-space:nowrap}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--card);padding:0 3px;border-radius:3px;overflow-wrap:anywhere}
figure{margin:1em 0}
svg{display:block;max-width:100%;height:auto}
svg text{fill:currentColor}
svg .grid{stroke:var(--grid)}
svg .axis{stroke:var(--muted)}
svg .plot{stroke:var(--line)}
@media print{
@page{size:A4;margin:14mm}
body{background:#fff;color:#000;font-size:10.5pt}
main{max-width:none;padding:0}
table{display:table;overflow:visible;font-size:8.5pt;page-break-inside:avoid}
figure,.verdict,tr{page-break-inside:avoid}
h2{page-break-after:avoid}
a{color:inherit;text-decoration:none}
}
"#;

impl Exporter for Html {
    fn render(&self, doc: &Document) -> String {
        let style = doc.style;
        let mut o = format!(
            "<!DOCTYPE html>\n<html lang=\"{}\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"color-scheme\" content=\"light dark\"><title>{}</title><style>{CSS}</style></head><body><main>\n<h1>{}</h1>\n",
            style.code(),
            escape(&doc.title),
            escape(&doc.title)
        );
        for block in &doc.blocks {
            match block {
                Block::Verdict(lines) => {
                    let _ = write!(
                        o,
                        "<section class=\"verdict\" id=\"verdict\"><h2>{}</h2><dl>",
                        escape(style.say(CommonText::Verdict))
                    );
                    for v in lines {
                        let class = match v.tone {
                            Tone::Good => " class=\"good\"",
                            Tone::Bad => " class=\"bad\"",
                            Tone::Neutral => "",
                        };
                        let value = match &v.section {
                            Some(h) => format!(
                                "<a href=\"#{}\">{}</a>",
                                escape(&slug(h)),
                                inline(&v.value)
                            ),
                            None => inline(&v.value),
                        };
                        let _ = write!(o, "<dt>{}</dt><dd{class}>{value}</dd>", escape(&v.label));
                    }
                    o.push_str("</dl></section>\n");
                }
                Block::Heading(h) => {
                    let _ = writeln!(o, "<h2 id=\"{}\">{}</h2>", escape(&slug(h)), escape(h));
                }
                Block::Para(p) => {
                    let _ = writeln!(o, "<p>{}</p>", inline(p));
                }
                Block::List(items) => {
                    o.push_str("<ul>");
                    for i in items {
                        let _ = write!(o, "<li>{}</li>", inline(i));
                    }
                    o.push_str("</ul>\n");
                }
                Block::Table { header, rows } => {
                    o.push_str("<table>");
                    if header.iter().any(|h| !h.is_empty()) {
                        o.push_str("<thead><tr>");
                        for h in header {
                            let _ = write!(o, "<th scope=\"col\">{}</th>", inline(h));
                        }
                        o.push_str("</tr></thead>");
                    }
                    o.push_str("<tbody>");
                    for r in rows {
                        o.push_str("<tr>");
                        for c in r {
                            o.push_str(&cell(c, style));
                        }
                        o.push_str("</tr>");
                    }
                    o.push_str("</tbody></table>\n");
                }
                Block::Chart(chart) => {
                    o.push_str(&svg::chart(style, chart));
                    o.push('\n');
                }
            }
        }
        o.push_str("</main>\n");
        for a in &doc.attachments {
            // Every `<` becomes the JSON escape `\u003c` (valid only inside JSON strings, where the
            // parsed value is unchanged), so no file content can close or confuse the element.
            let _ = writeln!(
                o,
                "<script type=\"application/json\" data-path=\"{}\" data-sha256=\"{}\">{}</script>",
                escape(&a.path),
                escape(&a.sha256),
                json_script_safe(&a.raw)
            );
        }
        o.push_str("</body></html>\n");
        // Every piece from a file was escaped where it was placed (the attachments by
        // `json_script_safe`); the whole page once more, so that no piece can carry a control or
        // bidirectional character through.
        crate::output::terminal_safe(&o).into_owned()
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
            style: Style::new(
                crate::report::format::Lang::En,
                crate::report::format::Units::Gib,
            ),
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

    /// ESC[2J, an OSC title sequence, BEL, U+202E and U+2066 in a title, a heading, a paragraph, a
    /// table's text and code cells and an attachment: shown escaped in the HTML and the Markdown,
    /// never raw.
    #[test]
    fn control_and_bidi_characters_are_shown_escaped() {
        let hostile = "a\u{1b}[2Jb\u{1b}]0;title\u{7}c\u{202e}d\u{2066}e";
        let doc = Document {
            title: hostile.into(),
            style: Style::new(
                crate::report::format::Lang::En,
                crate::report::format::Units::Gib,
            ),
            blocks: vec![
                Block::Heading(hostile.into()),
                Block::Para(hostile.into()),
                Block::List(vec![hostile.into()]),
                Block::Table {
                    header: vec![hostile.into(), "code".into()],
                    rows: vec![vec![Cell::Text(hostile.into()), Cell::Code(hostile.into())]],
                },
            ],
            attachments: vec![Attachment {
                path: "r.json".into(),
                sha256: "00".into(),
                raw: "{\"x\": \"p\u{202e}q\u{2066}\"}".to_string(),
            }],
        };
        let bad = ['\u{1b}', '\u{7}', '\u{202e}', '\u{2066}'];
        for text in [Html.render(&doc), Markdown.render(&doc)] {
            for c in bad {
                assert!(!text.contains(c), "{c:?} raw in {text}");
            }
            assert!(text.contains("a\\x1b[2Jb\\x1b]0;title\\x07c\\u{202e}d\\u{2066}e"));
        }
        // The attachment stays valid JSON with the same value.
        let html = Html.render(&doc);
        let start = html.find("data-sha256=\"00\">").unwrap() + "data-sha256=\"00\">".len();
        let json = &html[start..start + html[start..].find("</script>").unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["x"], "p\u{202e}q\u{2066}");
    }
}
