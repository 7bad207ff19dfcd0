//! The releases the test suite runs on, read from the one table that declares them
//! (`docs/tested-versions.md`, embedded at build time; CI installs from the same table through
//! `tools/pins.py`): predict's torch range, and the notes that say a library of the interpreter is
//! newer than the newest tested or older than the oldest tested.

use std::collections::BTreeMap;
use std::sync::LazyLock;

/// The document that holds the table.
pub const DOCUMENT: &str = include_str!("../../docs/tested-versions.md");
const BEGIN: &str = "<!-- tested-versions:begin -->";
const END: &str = "<!-- tested-versions:end -->";

/// One library's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tested {
    /// The distribution's name on PyPI, as `importlib.metadata` knows it.
    pub library: String,
    pub oldest: String,
    pub newest: String,
}

/// The table, parsed once. A table that does not parse is a build of the tool that cannot say
/// what it was tested on: the unit test below fails on it, so no release ships with one.
pub static TABLE: LazyLock<Vec<Tested>> = LazyLock::new(|| parse(DOCUMENT).unwrap_or_default());

/// The rows between the markers: `| library | oldest | newest | … |`.
pub fn parse(document: &str) -> Result<Vec<Tested>, String> {
    let start = document
        .find(BEGIN)
        .ok_or_else(|| format!("no `{BEGIN}` marker"))?;
    let end = document
        .find(END)
        .ok_or_else(|| format!("no `{END}` marker"))?;
    let mut rows = Vec::new();
    for line in document[start + BEGIN.len()..end].lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 3 || cells[0] == "library" || cells[0].starts_with("---") {
            continue;
        }
        let (oldest, newest) = (cells[1], cells[2]);
        for v in [oldest, newest] {
            if release(v).is_none() {
                return Err(format!("{}: `{v}` is not a release", cells[0]));
            }
        }
        if compare(oldest, newest) == Some(std::cmp::Ordering::Greater) {
            return Err(format!(
                "{}: oldest {oldest} is after newest {newest}",
                cells[0]
            ));
        }
        rows.push(Tested {
            library: cells[0].to_string(),
            oldest: oldest.to_string(),
            newest: newest.to_string(),
        });
    }
    if rows.is_empty() {
        return Err("the table has no rows".into());
    }
    Ok(rows)
}

/// The numeric release of a version: `2.15.0+cu132` → [2, 15, 0], `5.26.0.dev0` → [5, 26, 0],
/// `1.0rc1` → [1, 0]; None when it does not start with a number.
pub fn release(version: &str) -> Option<Vec<u64>> {
    let mut parts = Vec::new();
    for piece in version.trim().trim_start_matches('v').split('.') {
        let digits: String = piece.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            break;
        }
        parts.push(digits.parse().ok()?);
        if digits.len() != piece.len() {
            break;
        }
    }
    (!parts.is_empty()).then_some(parts)
}

/// Release order, missing trailing parts as zeros (`2.6` = `2.6.0`).
pub fn compare(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let (mut a, mut b) = (release(a)?, release(b)?);
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    Some(a.cmp(&b))
}

/// A library's row, by its distribution name (case and `-`/`_` ignored, as pip does).
pub fn row(library: &str) -> Option<&'static Tested> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    TABLE.iter().find(|t| norm(&t.library) == norm(library))
}

/// What is said of the interpreter's libraries outside the tested range, one note each, in the
/// table's order. `versions`: distribution name → version, as the worker reported them.
pub fn untested_notes(versions: &BTreeMap<String, String>) -> Vec<String> {
    let mut notes = Vec::new();
    for t in TABLE.iter() {
        let Some((_, v)) = versions
            .iter()
            .find(|(name, _)| row(name).is_some_and(|r| r.library == t.library))
        else {
            continue;
        };
        if v.contains("fake") {
            continue;
        }
        match (compare(v, &t.newest), compare(v, &t.oldest)) {
            (Some(std::cmp::Ordering::Greater), _) => notes.push(format!(
                "{} {v} is newer than the newest release iteragpu is tested on ({}; docs/tested-versions.md): its figures are not checked against that release",
                t.library, t.newest
            )),
            (_, Some(std::cmp::Ordering::Less)) => notes.push(format!(
                "{} {v} is older than the oldest release iteragpu is tested on ({}; docs/tested-versions.md): its figures are not checked against that release",
                t.library, t.oldest
            )),
            (None, _) => notes.push(format!(
                "{}'s version `{v}` cannot be read as a release: whether iteragpu is tested on it is not known (tested: {} to {}; docs/tested-versions.md)",
                t.library, t.oldest, t.newest
            )),
            _ => {}
        }
    }
    notes
}

/// The torch minors `predict` supports: the table's torch row.
pub fn torch_range() -> Option<((u32, u32), (u32, u32))> {
    let t = row("torch")?;
    let minor = |v: &str| {
        let r = release(v)?;
        Some((
            u32::try_from(*r.first()?).ok()?,
            u32::try_from(*r.get(1)?).ok()?,
        ))
    };
    Some((minor(&t.oldest)?, minor(&t.newest)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_parses_and_names_torch_and_transformers() {
        let rows = parse(DOCUMENT).unwrap();
        assert!(rows.iter().any(|r| r.library == "torch"));
        assert!(rows.iter().any(|r| r.library == "transformers"));
        assert_eq!(TABLE.len(), rows.len());
        // 2026-12-07: transformers 5.25 with Hub kernels is the newest tested (issue 42).
        assert!(
            compare(&row("transformers").unwrap().newest, "5.25.0")
                >= Some(std::cmp::Ordering::Equal)
        );
    }

    #[test]
    fn releases_compare_numerically_and_ignore_local_and_dev_parts() {
        use std::cmp::Ordering::*;
        assert_eq!(release("2.15.0+cu132"), Some(vec![2, 15, 0]));
        assert_eq!(release("5.26.0.dev0"), Some(vec![5, 26, 0]));
        assert_eq!(release("1.0rc1"), Some(vec![1, 0]));
        assert_eq!(release("abc"), None);
        assert_eq!(compare("2.10.0", "2.9.1"), Some(Greater));
        assert_eq!(compare("2.6", "2.6.0"), Some(Equal));
        assert_eq!(compare("0.50.2", "0.50.10"), Some(Less));
    }

    #[test]
    fn a_library_outside_the_range_is_said_inside_it_is_not() {
        let t = row("transformers").unwrap();
        let mut v = BTreeMap::new();
        v.insert("transformers".to_string(), t.newest.clone());
        assert!(untested_notes(&v).is_empty());
        v.insert("transformers".to_string(), "99.0.0".to_string());
        let notes = untested_notes(&v);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("transformers 99.0.0 is newer than the newest"),
            "{notes:?}"
        );
        v.insert("transformers".to_string(), "4.0.0".to_string());
        assert!(untested_notes(&v)[0].contains("older than the oldest"));
        // pip's spelling of names: Pillow, torch_ao.
        let mut p = BTreeMap::new();
        p.insert("Pillow".to_string(), "1.0.0".to_string());
        assert!(untested_notes(&p)[0].starts_with("pillow 1.0.0 is older"));
    }

    #[test]
    fn a_broken_table_is_refused_with_the_row() {
        let doc = format!(
            "{BEGIN}\n| library | oldest | newest |\n|---|---|---|\n| torch | 2.9.0 | 2.6.0 |\n{END}"
        );
        assert!(
            parse(&doc)
                .unwrap_err()
                .contains("torch: oldest 2.9.0 is after newest 2.6.0")
        );
        let doc = format!("{BEGIN}\n| torch | next | 2.6.0 |\n{END}");
        assert!(parse(&doc).unwrap_err().contains("`next` is not a release"));
        assert!(parse("no table").is_err());
    }

    #[test]
    fn the_probe_reports_every_library_of_the_table() {
        let probe = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python/iteragpu/probe.py"
        ))
        .unwrap();
        let start = probe.find("LIBRARIES: tuple[str, ...] = (").unwrap();
        let listed: Vec<&str> = probe[start..probe[start..].find(')').unwrap() + start]
            .lines()
            .skip(1)
            .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
            .filter(|l| !l.is_empty())
            .collect();
        let table: Vec<&str> = TABLE.iter().map(|t| t.library.as_str()).collect();
        assert_eq!(
            listed, table,
            "python/iteragpu/probe.py LIBRARIES and docs/tested-versions.md"
        );
    }

    #[test]
    fn predicts_torch_range_is_the_tables_torch_row() {
        let (lo, hi) = torch_range().unwrap();
        assert_eq!(
            crate::schema::versions::supported_torch(),
            crate::schema::versions::TorchRange { min: lo, max: hi }
        );
    }
}
