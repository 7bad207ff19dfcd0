//! A sweep series as observed: its trials, the largest load, the frontier, the emulated limit,
//! and the peak against the varied value (or the allocator settings side by side).

use super::facts::Validated;
use super::words::{in_unit, labelled, text, trial_status};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::series::{self, SeriesText};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::series::Series;

pub(super) fn series_observed(b: &mut Vec<Block>, s: &Series, v: &Validated, lang: Style) {
    let var = v.variable;
    let rows: Vec<Vec<Cell>> = s
        .trials
        .iter()
        .map(|t| {
            let values: Vec<String> = t
                .values
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .chain(t.load.clone())
                .collect();
            let status = if t.out_of_memory {
                lang.say(SeriesText::OutMemory)
            } else {
                trial_status(t.status, lang)
            };
            vec![
                Cell::Code(values.join(" ")),
                status.into(),
                Cell::size(t.peak_reserved_bytes),
                if t.status.is_ok() {
                    "".into()
                } else {
                    lang.say(SeriesText::PartialNotNeedComplete).into()
                },
                format!(
                    "{}{}s",
                    lang.decimal(t.duration_s, 2),
                    crate::report::format::NBSP
                )
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.say(SeriesText::Trial).into(),
            lang.say(CommonText::Status).into(),
            in_unit(lang.say(CommonText::PeakReserved), lang),
            String::new(),
            lang.say(SeriesText::Duration).into(),
        ],
        rows,
    });
    if let Some(largest) = v.largest {
        b.push(Block::Para(series::largest_tested(var, largest, lang)));
    }
    if let Some(f) = v.frontier {
        b.push(Block::Para(series::frontier(f, lang)));
    }
    if let Some(l) = &s.limit {
        let limit = format!("{} (`{}`)", lang.size(Some(l.bytes)), l.source);
        b.push(Block::Para(labelled(
            lang.say(SeriesText::EmulatedLimitNotReal),
            lang,
            limit,
        )));
    }
    if !s.alloc_confs.is_empty() {
        // One chart across two allocators would mix two curves: the settings side by side.
        alloc_conf_comparison(b, s, lang);
        return;
    }
    let points: Vec<(u64, Option<u64>, bool)> = s
        .trials
        .iter()
        .filter_map(|t| {
            Some((
                t.values.get(var)?.as_u64()?,
                t.peak_reserved_bytes,
                t.status.is_ok(),
            ))
        })
        .collect();
    if !points.is_empty() {
        let mut lines: Vec<(String, u64)> = s
            .limit
            .iter()
            .map(|l| (lang.say(SeriesText::EmulatedLimit).to_string(), l.bytes))
            .chain(v.cards.iter().cloned())
            .collect();
        lines.truncate(6);
        b.push(Block::Chart(Chart::Scatter {
            title: format!("{} {var}", lang.say(SeriesText::PeakReservedAgainst)),
            x_label: var.to_string(),
            points,
            lines,
        }));
    }
}

/// An allocator A/B (`sweep --vary alloc_conf=…`): each setting's peak reserved per value.
fn alloc_conf_comparison(b: &mut Vec<Block>, s: &Series, lang: Style) {
    let first = s.alloc_confs[0];
    b.push(Block::Para(series::alloc_confs_compared(first, lang)));
    let mut header = vec![
        s.varied
            .first()
            .map_or("—".into(), |v| v.name().to_string()),
    ];
    header.extend(s.alloc_confs.iter().map(|a| {
        in_unit(
            &format!("{} {}", lang.say(SeriesText::PeakReservedComma), a.name()),
            lang,
        )
    }));
    header.push(lang.say(SeriesText::Change).into());
    let rows: Vec<Vec<Cell>> = s
        .alloc_conf_rows()
        .iter()
        .map(|row| {
            let mut cells: Vec<Cell> = vec![
                row.value
                    .map_or("—".into(), |(_, v)| lang.integer(u128::from(v)))
                    .into(),
            ];
            let mut changes = Vec::new();
            for (k, t) in row.trials.iter().enumerate() {
                cells.push(match t {
                    None => lang.say(SeriesText::NotRun).into(),
                    Some(t) if !t.status.is_ok() => trial_status(t.status, lang).into(),
                    Some(t) => Cell::size(t.peak_reserved_bytes),
                });
                if k > 0
                    && let Some(c) = row.change(k)
                {
                    let change = lang.percent(Some(c * 100.0));
                    changes.push(labelled(s.alloc_confs[k].name(), lang, change));
                }
            }
            cells.push(changes.join("; ").into());
            cells
        })
        .collect();
    b.push(Block::Table { header, rows });
}
