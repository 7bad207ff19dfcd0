//! What a sweep varies: `--vary batch=1,2,4,8` (a list), `--vary context=1024..65536` (a range,
//! for the frontier search), two lists for a grid. Every other option stays identical.

use serde::{Deserialize, Serialize};

use crate::schema::alloc_conf::ALLOC_CONF;

pub use crate::schema::alloc_conf::AllocConf;
pub use crate::schema::dimensions::Variable;

/// How a sweep chooses its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Search {
    /// The largest value that succeeds, to --frontier-step.
    Frontier,
}

/// The values of one varied dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Values {
    List(Vec<u64>),
    Range { lo: u64, hi: u64 },
}

/// One `--vary` option.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vary {
    pub variable: Variable,
    pub values: Values,
}

/// One `--vary` option as written: a dimension's values, or allocator settings to compare in
/// fresh processes (`alloc_conf=default,expandable_segments`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VaryArg {
    Dimension(Vary),
    AllocConf(Vec<AllocConf>),
}

/// Parses `name=1,2,4`, `name=lo..hi` or `alloc_conf=default,expandable_segments`.
pub fn parse_vary_arg(text: &str) -> Result<VaryArg, String> {
    let Some((name, values)) = text.split_once('=') else {
        return Err(format!(
            "`{text}` is not NAME=VALUES: write e.g. batch=1,2,4,8, context=1024..65536 or alloc_conf=default,expandable_segments"
        ));
    };
    if name.trim().replace('_', "-") != ALLOC_CONF {
        return parse_vary(text).map(VaryArg::Dimension);
    }
    let list: Vec<AllocConf> = values
        .split(',')
        .map(|v| AllocConf::parse(v).map_err(|e| format!("--vary alloc_conf: {e}")))
        .collect::<Result<_, _>>()?;
    if let Some(dup) = list
        .iter()
        .enumerate()
        .find(|(i, a)| list[..*i].contains(a))
        .map(|(_, a)| a)
    {
        return Err(format!(
            "--vary alloc_conf: {dup} is listed twice; each setting once"
        ));
    }
    if list.len() < 2 {
        return Err(format!(
            "--vary alloc_conf={values}: an A/B needs two settings or more, e.g. alloc_conf=default,expandable_segments (one setting: measure … --alloc-conf {values})"
        ));
    }
    Ok(VaryArg::AllocConf(list))
}

/// Parses `name=1,2,4` or `name=lo..hi`.
pub fn parse_vary(text: &str) -> Result<Vary, String> {
    let Some((name, values)) = text.split_once('=') else {
        return Err(format!(
            "`{text}` is not NAME=VALUES: write e.g. batch=1,2,4,8 or context=1024..65536"
        ));
    };
    let name = Variable::parse(name).map_err(|e| format!("{e}, or alloc_conf"))?;
    let number = |v: &str| crate::units::parse_count(v).map_err(|e| format!("--vary {name}: {e}"));
    let values = if let Some((lo, hi)) = values.split_once("..") {
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo >= hi {
            return Err(format!(
                "--vary {name}={lo}..{hi}: the range must grow (lo < hi)"
            ));
        }
        Values::Range { lo, hi }
    } else {
        let list: Vec<u64> = values
            .split(',')
            .map(|v| number(v.trim()))
            .collect::<Result<_, _>>()?;
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = list.iter().find(|v| !seen.insert(**v)) {
            return Err(format!(
                "--vary {name}: {dup} is listed twice; each value once"
            ));
        }
        Values::List(list)
    };
    Ok(Vary {
        variable: name,
        values,
    })
}

/// Orders the cells of a two-variable grid so that adjacent trials differ by one variable only
/// (a serpentine walk: the inner values go up, then down, then up…).
pub fn grid_order(outer: &[u64], inner: &[u64]) -> Vec<(u64, u64)> {
    let mut cells = Vec::with_capacity(outer.len() * inner.len());
    for (i, o) in outer.iter().enumerate() {
        if i % 2 == 0 {
            cells.extend(inner.iter().map(|v| (*o, *v)));
        } else {
            cells.extend(inner.iter().rev().map(|v| (*o, *v)));
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(
            parse_vary("batch=1,2,4").unwrap().values,
            Values::List(vec![1, 2, 4])
        );
        assert_eq!(
            parse_vary("context=1024..65536").unwrap().values,
            Values::Range {
                lo: 1024,
                hi: 65536
            }
        );
        assert_eq!(
            parse_vary("prompt_tokens=8").unwrap().variable,
            Variable::PromptTokens
        );
        assert!(parse_vary("batch").unwrap_err().contains("NAME=VALUES"));
        assert!(
            parse_vary("colour=1")
                .unwrap_err()
                .contains("cannot be varied")
        );
        assert!(parse_vary("batch=1,1").unwrap_err().contains("twice"));
        assert!(parse_vary("batch=8..2").unwrap_err().contains("grow"));
        assert!(parse_vary("batch=0,2").is_err());
    }

    #[test]
    fn allocator_settings_are_an_a_b() {
        assert_eq!(
            parse_vary_arg("alloc_conf=default,expandable_segments"),
            Ok(VaryArg::AllocConf(vec![
                AllocConf::Default,
                AllocConf::ExpandableSegments
            ]))
        );
        assert!(matches!(
            parse_vary_arg("batch=1,2"),
            Ok(VaryArg::Dimension(_))
        ));
        assert!(
            parse_vary_arg("alloc_conf=default")
                .unwrap_err()
                .contains("two settings")
        );
        assert!(
            parse_vary_arg("alloc-conf=default,default")
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            parse_vary_arg("alloc_conf=default,max_split_size_mb:64")
                .unwrap_err()
                .contains("max_split_size_mb:64")
        );
    }

    #[test]
    fn grid_neighbours_differ_by_one_variable() {
        let cells = grid_order(&[1, 2, 4], &[128, 256]);
        assert_eq!(
            cells,
            [(1, 128), (1, 256), (2, 256), (2, 128), (4, 128), (4, 256)]
        );
        for w in cells.windows(2) {
            assert!((w[0].0 == w[1].0) ^ (w[0].1 == w[1].1));
        }
    }
}
