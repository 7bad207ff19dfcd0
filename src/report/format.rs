//! How the fiche writes numbers, sizes, percentages and dates: one unit chosen once (`--units`),
//! and French done right (`--lang fr`): decimal commas, a narrow no-break space between thousands,
//! a no-break space before a unit or `%`, French unit names (Gio, Go) and month names.

use crate::report::catalog::Message;
use crate::report::catalog::common::CommonText;
use crate::units::Bytes;

/// English or French.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    En,
    Fr,
}

/// The one unit of the fiche's sizes (raw bytes stay on hover and in the embedded JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Units {
    /// Gibibytes (2^30 bytes): what PyTorch's and nvidia-smi's figures are in.
    Gib,
    /// Gigabytes (10^9 bytes): what vendors' labels are in.
    Gb,
}

/// A no-break space (before a unit or `%`).
pub const NBSP: char = '\u{a0}';
/// A narrow no-break space (between groups of thousands, in French).
pub const NNBSP: char = '\u{202f}';

/// The language and the unit of one fiche.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub lang: Lang,
    pub units: Units,
}

impl Style {
    pub fn new(lang: Lang, units: Units) -> Style {
        Style { lang, units }
    }

    /// A fixed message of the catalog in the fiche's language.
    pub fn say(self, message: impl Message) -> &'static str {
        let [en, fr] = message.words();
        match self.lang {
            Lang::En => en,
            Lang::Fr => fr,
        }
    }

    pub fn code(self) -> &'static str {
        match self.lang {
            Lang::En => "en",
            Lang::Fr => "fr",
        }
    }

    pub fn fr(self) -> bool {
        self.lang == Lang::Fr
    }

    /// `GiB`, `GB`, `Gio` or `Go`.
    pub fn unit(self) -> &'static str {
        match (self.units, self.lang) {
            (Units::Gib, Lang::En) => "GiB",
            (Units::Gb, Lang::En) => "GB",
            (Units::Gib, Lang::Fr) => "Gio",
            (Units::Gb, Lang::Fr) => "Go",
        }
    }

    /// `bytes` in the fiche's unit.
    pub fn in_unit(self, bytes: f64) -> f64 {
        match self.units {
            Units::Gib => bytes / f64::from(1u32 << 30),
            Units::Gb => bytes / 1e9,
        }
    }

    /// `bytes` in the fiche's unit, as a bare number (`0.13`, `0,13`).
    pub fn size_number(self, bytes: u64) -> String {
        let b = Bytes(bytes);
        let value = match self.units {
            Units::Gib => b.gib(),
            Units::Gb => b.gb(),
        };
        // Small sizes keep their first significant digits instead of reading 0.00.
        let decimals = if value != 0.0 && value < 0.01 { 4 } else { 2 };
        self.decimal(value, decimals)
    }

    /// `0.13 GiB` / `0,13 Gio`; `null (not read)` for a value that was not read (never 0).
    pub fn size(self, bytes: Option<u64>) -> String {
        match bytes {
            None => self.say(CommonText::NullNotRead).into(),
            Some(b) => format!("{}{NBSP}{}", self.size_number(b), self.unit()),
        }
    }

    /// A file's size in mebibytes, one decimal: `12.3 MiB` / `12,3 Mio` (`? MiB` when unknown).
    pub fn mebibytes(self, bytes: Option<u64>) -> String {
        let number = bytes.map_or("?".into(), |b| {
            self.decimal(b as f64 / f64::from(1u32 << 20), 1)
        });
        let unit = match self.lang {
            Lang::En => "MiB",
            Lang::Fr => "Mio",
        };
        format!("{number}{NBSP}{unit}")
    }

    /// Raw bytes, grouped: `134,332,416 B` / `134 332 416 o`.
    pub fn raw(self, bytes: u64) -> String {
        format!(
            "{}{NBSP}{}",
            self.integer(bytes as u128),
            self.say(CommonText::ByteSymbol)
        )
    }

    /// A whole number, grouped by thousands.
    pub fn integer(self, n: u128) -> String {
        let grouped = crate::units::group_thousands(n);
        match self.lang {
            Lang::En => grouped,
            Lang::Fr => grouped.replace(',', &NNBSP.to_string()),
        }
    }

    /// A decimal number with `decimals` digits, its separator the language's.
    pub fn decimal(self, x: f64, decimals: usize) -> String {
        let text = format!("{x:.decimals$}");
        match self.lang {
            Lang::En => text,
            Lang::Fr => text.replace('.', ","),
        }
    }

    /// A signed percentage: `+12.5 %` / `+12,5 %`.
    pub fn percent(self, pct: Option<f64>) -> String {
        match pct {
            None => "null".into(),
            Some(p) => format!(
                "{}{}{NBSP}%",
                if p >= 0.0 { "+" } else { "−" },
                self.decimal(p.abs(), 1)
            ),
        }
    }

    /// An RFC 3339 time as the reader says it: `30 November 2026, 06:33 UTC` /
    /// `30 novembre 2026, 06 h 33 UTC`; the text itself when it does not parse.
    pub fn date(self, rfc3339: &str) -> String {
        let Ok(t) = chrono::DateTime::parse_from_rfc3339(rfc3339) else {
            return rfc3339.to_string();
        };
        let t = t.with_timezone(&chrono::Utc);
        use chrono::{Datelike, Timelike};
        const EN: [&str; 12] = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        const FR: [&str; 12] = [
            "janvier",
            "février",
            "mars",
            "avril",
            "mai",
            "juin",
            "juillet",
            "août",
            "septembre",
            "octobre",
            "novembre",
            "décembre",
        ];
        let month = t.month0() as usize;
        match self.lang {
            Lang::En => format!(
                "{} {} {}, {:02}:{:02}:{:02} UTC",
                t.day(),
                EN[month],
                t.year(),
                t.hour(),
                t.minute(),
                t.second()
            ),
            Lang::Fr => format!(
                "{} {} {}, {:02}{NBSP}h{NBSP}{:02}{NBSP}min{NBSP}{:02}{NBSP}s UTC",
                t.day(),
                FR[month],
                t.year(),
                t.hour(),
                t.minute(),
                t.second()
            ),
        }
    }
}

/// The anchor of a heading: lower case, letters and digits, words joined by `-` (GitHub's rule
/// for ASCII headings, so that Markdown links work there too).
pub fn slug(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.trim().to_lowercase().chars() {
        if c.is_alphanumeric() {
            out.push(c);
        } else if (c == ' ' || c == '-') && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_and_french_numbers() {
        let en = Style::new(Lang::En, Units::Gib);
        let fr = Style::new(Lang::Fr, Units::Gib);
        assert_eq!(en.size(Some(134_332_416)), "0.13\u{a0}GiB");
        assert_eq!(fr.size(Some(134_332_416)), "0,13\u{a0}Gio");
        assert_eq!(
            Style::new(Lang::En, Units::Gb).size(Some(14_000_000_000)),
            "14.00\u{a0}GB"
        );
        assert_eq!(en.size(Some(4_000_256)), "0.0037\u{a0}GiB", "no 0.00");
        assert_eq!(en.size(None), "null (not read)");
        assert_eq!(fr.raw(134_332_416), "134\u{202f}332\u{202f}416\u{a0}o");
        assert_eq!(en.raw(134_332_416), "134,332,416\u{a0}B");
        assert_eq!(fr.mebibytes(Some(12_897_485)), "12,3\u{a0}Mio");
        assert_eq!(en.mebibytes(None), "?\u{a0}MiB");
        assert_eq!(fr.percent(Some(12.5)), "+12,5\u{a0}%");
        assert_eq!(en.percent(Some(-3.25)), "−3.2\u{a0}%");
        assert_eq!(
            fr.date("2026-11-30T06:33:05.123+00:00"),
            "30 novembre 2026, 06\u{a0}h\u{a0}33\u{a0}min\u{a0}05\u{a0}s UTC"
        );
        assert_eq!(
            en.date("2026-11-30T06:33:05Z"),
            "30 November 2026, 06:33:05 UTC"
        );
        assert_eq!(en.date("not a date"), "not a date");
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("Why the peak exceeds the estimate"),
            "why-the-peak-exceeds-the-estimate"
        );
        assert_eq!(slug("Ranks (torchrun)"), "ranks-torchrun");
        assert_eq!(
            slug("Pourquoi le pic dépasse l’estimation"),
            "pourquoi-le-pic-dépasse-lestimation"
        );
    }
}
