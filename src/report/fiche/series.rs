//! A sweep series as observed: its trials, the largest load, the frontier, the emulated limit,
//! and the peak against the varied value (or the allocator settings side by side); a predicted
//! series (`sweep --predict`) drawn the same way, labelled predicted, and beside a measured one
//! both frontiers.

use super::facts::Validated;
use super::words::{in_unit, labelled, text, trial_status};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::series::{self, SeriesText};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::load::{self, InputError, InputFile as Input, Loaded};
use crate::schema::measure::MeasureResult;
use crate::schema::prediction::PredictionDoc;
use crate::schema::series::{FrontierRecord, Series, TrialRecord, TrialStatus};
use serde_json::{Map, Value};

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

/// The file of a predicted series, and the series it holds.
pub(super) type PredictedSeries<'a> = (&'a Loaded, &'a Series);

/// The series given to `report`, predicted apart: at most one measured and one predicted.
pub(super) fn split<'a>(
    all: &[&'a Loaded],
) -> Result<(Option<PredictedSeries<'a>>, Vec<&'a Loaded>), InputError> {
    let mut predicted = None;
    let mut others = Vec::new();
    for &l in all {
        match &l.doc {
            Input::Series(s) if s.predicted() => {
                if predicted.is_some() {
                    return Err(l.wrong(
                        load::SERIES,
                        "a fiche takes one predicted series (and one measured series of the same workload)",
                    ));
                }
                predicted = Some((l, &**s));
            }
            _ => others.push(l),
        }
    }
    if let Some(second) = others.get(1) {
        return Err(second.wrong(
            load::SERIES,
            "a fiche takes one measured series (and one predicted series, `sweep --predict`, of the same workload)",
        ));
    }
    Ok((predicted, others))
}

/// The first of `ours` dimensions that trial `t` did not vary and `theirs` holds otherwise:
/// (name, our value, their value or "null"), the values as text.
pub(super) fn first_mismatch(
    ours: &Map<String, Value>,
    t: &TrialRecord,
    theirs: &Map<String, Value>,
) -> Option<(String, String, String)> {
    let varied: Vec<String> = t.values.keys().map(|k| k.replace('-', "_")).collect();
    ours.iter()
        .filter(|(key, _)| !varied.contains(key))
        .find(|(key, value)| theirs.get(key.as_str()) != Some(value))
        .map(|(key, value)| {
            let other = theirs.get(key.as_str()).map_or("null".into(), text);
            (key.clone(), text(value), other)
        })
}

/// A predicted series belongs with a result when it predicted the same workload, every
/// dimension but the varied ones the same.
pub(super) fn check_predicted_matches(
    r: &MeasureResult,
    s: &Series,
    l: &Loaded,
) -> Result<(), InputError> {
    let refuse = |message: String| InputError::Apart {
        path: l.path.clone(),
        schema: load::SERIES.into(),
        message,
    };
    for t in &s.trials {
        let Some(p) = &t.prediction else { continue };
        if p.identity.workload != r.identity.workload {
            return Err(refuse(format!(
                "the result measured the `{}` workload and the predicted series `{}`",
                r.identity.workload, p.identity.workload
            )));
        }
        if let Some((key, ours, theirs)) = first_mismatch(&r.dimensions, t, &p.dimensions) {
            return Err(refuse(format!(
                "the result has {key} = {ours} and trial {} of the predicted series has {key} = {theirs}: not the same workload besides the varied dimension",
                t.index + 1
            )));
        }
    }
    Ok(())
}

/// A predicted series belongs with a prediction when it predicted the same workload, every
/// dimension but the varied ones the same, for the same card at the same capacity: its frontier
/// then answers the prediction's question at other values.
pub(super) fn check_series_of_prediction(
    p: &PredictionDoc,
    run: &Loaded,
    s: &Series,
    l: &Loaded,
) -> Result<(), InputError> {
    let refuse = |message: String| InputError::Apart {
        path: l.path.clone(),
        schema: load::SERIES.into(),
        message,
    };
    let (pred, series) = (run.path.display(), l.path.display());
    let fix = "make both with the same options and --card or --memory-limit (sweep --predict varying one dimension)";
    if let Some(t) = &s.target
        && t.name != p.target.name
    {
        return Err(refuse(format!(
            "the prediction {pred} is for `{}` and the predicted series {series} for `{}`: {fix}",
            p.target.name, t.name
        )));
    }
    let capacity = p
        .capacity
        .as_ref()
        .map_or(p.target.total_memory, |c| c.device_bytes);
    if let Some(limit) = &s.limit
        && limit.bytes != capacity
    {
        return Err(refuse(format!(
            "the prediction {pred} is held against {} and the predicted series {series} against {} ({}): {fix}",
            crate::units::Bytes(capacity).both(),
            crate::units::Bytes(limit.bytes).both(),
            limit.source
        )));
    }
    for t in &s.trials {
        let Some(tp) = &t.prediction else { continue };
        if tp.identity.workload != p.identity.workload {
            return Err(refuse(format!(
                "the prediction {pred} predicted the `{}` workload and the predicted series {series} `{}`: {fix}",
                p.identity.workload, tp.identity.workload
            )));
        }
        if let Some((key, ours, theirs)) = first_mismatch(&p.dimensions, t, &tp.dimensions) {
            return Err(refuse(format!(
                "the prediction {pred} has {key} = {ours} and trial {} of the predicted series {series} has {key} = {theirs}: not the same workload besides the varied dimension; {fix}",
                t.index + 1
            )));
        }
    }
    Ok(())
}

/// A predicted series (`sweep --predict`), drawn like a measured one and labelled predicted; with
/// the measured series of the same workload, both frontiers side by side and why they differ.
pub(super) fn series_predicted(
    b: &mut Vec<Block>,
    s: &Series,
    measured: Option<&Series>,
    lang: Style,
) {
    b.push(Block::Heading(
        lang.say(SeriesText::PredictedSeriesHeading).into(),
    ));
    b.push(Block::Para(lang.say(SeriesText::PredictedSeries).into()));
    if let Some(t) = &s.target {
        b.push(Block::Para(labelled(
            lang.say(SeriesText::PredictedFor),
            lang,
            format!("`{}`", t.name),
        )));
    }
    if let Some(l) = &s.limit {
        let capacity = format!("{} (`{}`)", lang.size(Some(l.bytes)), l.source);
        b.push(Block::Para(labelled(
            lang.say(SeriesText::CapacityPredicted),
            lang,
            capacity,
        )));
    }
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
            let status = match (t.out_of_memory, t.status) {
                (true, _) => lang.say(SeriesText::PredictedNotToFit),
                (false, TrialStatus::Ok) => lang.say(SeriesText::PredictedToFit),
                (false, status) => trial_status(status, lang),
            };
            let why = match (&t.failed_phase, t.status) {
                (Some(p), _) if t.out_of_memory => Cell::Code(p.clone()),
                (_, TrialStatus::Ok) => "".into(),
                _ => Cell::Code(t.error.clone().unwrap_or_default()),
            };
            vec![
                Cell::Code(values.join(" ")),
                status.into(),
                Cell::size(t.peak_reserved_bytes),
                why,
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.say(SeriesText::Trial).into(),
            lang.say(CommonText::Status).into(),
            in_unit(lang.say(CommonText::PeakReserved), lang),
            String::new(),
        ],
        rows,
    });
    if let Some(f) = &s.frontier {
        b.push(Block::Para(series::predicted_frontier(f, lang)));
    }
    if let Some(var) = s.varied.first().map(|v| v.name()) {
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
            // The peaks are held against the capacity less the memory outside the allocator.
            let outside = s.target.as_ref().map_or(0, |t| t.context_bytes);
            let lines = s
                .limit
                .iter()
                .map(|l| {
                    (
                        lang.say(SeriesText::Capacity).to_string(),
                        l.bytes.saturating_sub(outside),
                    )
                })
                .collect();
            b.push(Block::Chart(Chart::Scatter {
                title: format!("{} {var}", lang.say(SeriesText::PeakReservedPredicted)),
                x_label: var.to_string(),
                points,
                lines,
            }));
        }
    }
    if let (Some(m), Some(pf)) = (measured, &s.frontier)
        && let Some(mf) = m.frontier.as_ref().filter(|mf| mf.variable == pf.variable)
    {
        frontiers(b, m, mf, s, pf, lang);
    }
}

/// A measured and a predicted frontier of one workload side by side, and, when they differ, why.
fn frontiers(
    b: &mut Vec<Block>,
    m: &Series,
    mf: &FrontierRecord,
    p: &Series,
    pf: &FrontierRecord,
    lang: Style,
) {
    let bound =
        |n: Option<u64>| -> Cell { n.map_or("—".into(), |n| lang.integer(u128::from(n)).into()) };
    let outside_p = p.target.as_ref().map_or(0, |t| t.context_bytes);
    let outside_m = m.max_outside_allocator();
    b.push(Block::Heading(lang.say(SeriesText::Frontiers).into()));
    b.push(Block::Table {
        header: vec![
            format!("`{}`", mf.variable),
            lang.say(SeriesText::LargestFits).into(),
            lang.say(SeriesText::FirstNotFits).into(),
            in_unit(lang.say(SeriesText::Capacity), lang),
            in_unit(lang.say(SeriesText::OutsideAllocator), lang),
        ],
        rows: vec![
            vec![
                lang.say(SeriesText::Measured).into(),
                bound(mf.last_success),
                bound(mf.first_failure),
                Cell::size(m.limit.as_ref().map(|l| l.bytes)),
                Cell::size(outside_m),
            ],
            vec![
                lang.say(SeriesText::Predicted).into(),
                bound(pf.last_success),
                bound(pf.first_failure),
                Cell::size(p.limit.as_ref().map(|l| l.bytes)),
                Cell::size(Some(outside_p)),
            ],
        ],
    });
    if (mf.last_success, mf.first_failure) == (pf.last_success, pf.first_failure) {
        b.push(Block::Para(lang.say(SeriesText::SameFrontier).into()));
        return;
    }
    // The largest value both series completed: their peaks there say where they part.
    let var = mf.variable.name();
    let peak_at = |s: &Series, v: u64| {
        s.trials
            .iter()
            .filter(|t| t.status.is_ok())
            .find(|t| t.values.get(var).and_then(serde_json::Value::as_u64) == Some(v))
            .and_then(|t| t.peak_reserved_bytes)
    };
    let common = m
        .trials
        .iter()
        .filter_map(|t| t.values.get(var)?.as_u64())
        .filter_map(|v| Some((v, peak_at(m, v)?, peak_at(p, v)?)))
        .max_by_key(|(v, _, _)| *v);
    b.push(Block::Para(series::frontiers_differ(
        var,
        common,
        (outside_m, outside_p),
        lang,
    )));
}
