//! What was observed: the phases' readings, the driver's view, the failure, the prediction next
//! to the observation, the KV cache, and the series.

use super::facts::Facts;
use super::words::{in_unit, labelled, status_word};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::observed::{self, ObservedText};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

pub(super) fn observed(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    b.push(Block::Heading(lang.say(CommonText::ObservedHeading).into()));
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for p in &r.phases {
        if p.devices.is_empty() {
            rows.push(vec![
                Cell::Code(p.name.clone()),
                "—".into(),
                status_word(p.status, lang).into(),
                lang.say(ObservedText::EndReadingsWorkerEnded).into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ]);
        }
        for d in &p.devices {
            let gap = match (d.end_reserved_bytes, d.end_allocated_bytes) {
                (Some(rv), Some(a)) if rv >= a => Some(rv - a),
                _ => None,
            };
            rows.push(vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                status_word(p.status, lang).into(),
                Cell::size(d.peak_allocated_bytes),
                Cell::size(d.peak_reserved_bytes),
                Cell::size(d.end_allocated_bytes),
                Cell::size(d.end_reserved_bytes),
                Cell::size(gap),
            ]);
        }
    }
    b.push(Block::Table {
        header: vec![
            "phase".into(),
            lang.say(ObservedText::Device).into(),
            lang.say(CommonText::Status).into(),
            in_unit(lang.say(CommonText::PeakAllocated), lang),
            in_unit(lang.say(CommonText::PeakReserved), lang),
            in_unit(lang.say(ObservedText::EndAllocated), lang),
            in_unit(lang.say(ObservedText::EndReserved), lang),
            in_unit(lang.say(ObservedText::ReservedAllocatedEndSame), lang),
        ],
        rows,
    });
    b.push(Block::List(vec![
        lang.say(ObservedText::PeaksAbsoluteOverEach).into(),
        lang.say(ObservedText::EndLevelMinusStart).into(),
    ]));
    // The driver's view.
    let driver: Vec<Vec<Cell>> = r
        .phases
        .iter()
        .flat_map(|p| p.driver.iter().flatten().map(move |d| (p, d)))
        .filter(|(_, d)| d.peak_process_used_bytes.is_some())
        .map(|(p, d)| {
            vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                Cell::size(d.peak_process_used_bytes),
                Cell::size(d.outside_allocator_at_end_bytes),
                lang.integer(d.samples as u128).into(),
            ]
        })
        .collect();
    if driver.is_empty() {
        let why = match &r.environment.driver_reason {
            Some(why) => observed::driver_reason(why, lang),
            None => lang.say(ObservedText::NotSampled).into(),
        };
        b.push(Block::Para(labelled(
            lang.say(ObservedText::DriverView),
            lang,
            why,
        )));
    } else {
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                lang.say(ObservedText::Device).into(),
                in_unit(lang.say(ObservedText::ProcessPeakNvml), lang),
                in_unit(lang.say(ObservedText::OutsidePytorchAllocatorAtEnd), lang),
                lang.say(ObservedText::Samples).into(),
            ],
            rows: driver,
        });
    }
    if let Some(f) = &r.failure {
        b.push(Block::Para(observed::failure(f, lang)));
    }
    if !r.predictions.is_empty() {
        b.push(Block::Para(
            lang.say(ObservedText::PredictedSameCodeData).into(),
        ));
        let mut seen: std::collections::HashMap<&str, usize> = Default::default();
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                in_unit(lang.say(ObservedText::PredictedPeakAllocated), lang),
                in_unit(lang.say(CommonText::Observed), lang),
                lang.say(ObservedText::Error).into(),
                in_unit(lang.say(ObservedText::PredictedPeakReserved), lang),
                in_unit(lang.say(CommonText::Observed), lang),
                lang.say(ObservedText::Error).into(),
                lang.say(ObservedText::LargestPredictedPeak).into(),
            ],
            rows: r
                .predictions
                .iter()
                .map(|c| {
                    let n = seen.entry(c.phase.as_str()).or_default();
                    let k = *n;
                    *n += 1;
                    vec![
                        Cell::Code(c.phase.clone()),
                        Cell::size(Some(c.predicted_peak_allocated_bytes)),
                        Cell::size(c.observed_peak_allocated_bytes),
                        Cell::Percent(c.error_allocated_pct),
                        Cell::size(Some(c.predicted_peak_reserved_bytes)),
                        Cell::size(c.observed_peak_reserved_bytes),
                        Cell::Percent(c.error_reserved_pct),
                        largest_at_peak(r, &c.phase, k, lang).into(),
                    ]
                })
                .collect(),
        });
    }
    for c in &r.kv_cache {
        b.push(Block::Para(observed::kv_cache(c, lang)));
    }
    let bars: Vec<(String, Vec<Option<u64>>)> = r
        .phases
        .iter()
        .filter_map(|p| {
            let d = p.devices.first()?;
            let drv = p
                .driver
                .as_ref()
                .and_then(|v| v.first())
                .and_then(|x| x.peak_process_used_bytes);
            Some((
                format!("{} #{}", p.name, p.index),
                vec![d.peak_allocated_bytes, d.peak_reserved_bytes, drv],
            ))
        })
        .collect();
    if !bars.is_empty() {
        b.push(Block::Chart(Chart::Bars {
            title: lang.say(ObservedText::PeaksPerPhaseFirst).into(),
            series: vec![
                lang.say(CommonText::PeakAllocated).into(),
                lang.say(CommonText::PeakReserved).into(),
                lang.say(ObservedText::DriverViewProcessPeak).into(),
            ],
            categories: bars,
        }));
    }
    if let (Some(s), Some(v)) = (f.series, &f.validated) {
        super::series::series_observed(b, s, v, lang);
    }
}

/// The two largest categories alive at the predicted peak of the `k`-th phase named `name`.
fn largest_at_peak(r: &MeasureResult, name: &str, k: usize, lang: Style) -> String {
    let Some(at) = r
        .prediction
        .as_ref()
        .and_then(|p| p.phases.iter().filter(|ph| ph.name == name).nth(k))
        .and_then(|ph| ph.at_peak.as_ref())
    else {
        return "—".into();
    };
    let mut categories: Vec<(&String, &u64)> = at.by_category.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1));
    categories
        .iter()
        .take(2)
        .map(|(c, b)| {
            format!(
                "{} {}",
                observed::storage_category(c, lang),
                lang.size(Some(**b))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
