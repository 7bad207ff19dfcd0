//! `measure --timeline`: the allocator's trace over time, and per phase what was alive at its peak.

use super::words::in_unit;
use crate::report::catalog::timeline::{self, TimelineText};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

/// At most this many phase starts are marked on the timeline chart.
const TIMELINE_MARKS: usize = 40;

/// `measure --timeline`: allocated and reserved over time with the phases marked, and per phase
/// the largest allocation alive at its peak and the line that made it.
pub(super) fn timeline(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    use crate::explain::snapshot::{BEFORE_FIRST_PHASE, BETWEEN_PHASES};
    let Some(t) = &r.timeline else { return };
    b.push(Block::Heading(lang.say(TimelineText::Timeline).into()));
    b.push(Block::List(vec![match (&t.path, t.bytes) {
        (Some(path), bytes) => timeline::snapshot_written(path, bytes, lang),
        (None, _) => lang.say(TimelineText::SnapshotWasWritten).into(),
    }]));
    let Some(s) = &t.summary else { return };
    for d in &s.devices {
        let Some(trace) = &d.trace else { continue };
        let origin = trace.first_time_us;
        let x = |event: u64, time: Option<i64>| match (origin, time) {
            (Some(o), Some(t)) => (t - o) as f64 / 1e6,
            _ => event as f64,
        };
        let x_label = if origin.is_some() {
            lang.say(TimelineText::SecondsSinceFirstRecorded)
        } else {
            lang.say(TimelineText::EventAllocatorTrace)
        };
        let points: Vec<(f64, u64, u64)> = trace
            .series
            .iter()
            .map(|p| (x(p.event, p.time_us), p.allocated_bytes, p.reserved_bytes))
            .collect();
        let real: Vec<_> = trace
            .phases
            .iter()
            .filter(|p| p.name != BEFORE_FIRST_PHASE && p.name != BETWEEN_PHASES)
            .collect();
        let marks: Vec<(f64, String)> = real
            .iter()
            .take(TIMELINE_MARKS)
            .map(|p| (x(p.first_event, p.start_time_us), p.name.clone()))
            .collect();
        if points.len() >= 2 {
            b.push(Block::Chart(Chart::Timeline {
                title: format!(
                    "cuda:{} — {}",
                    d.device,
                    lang.say(TimelineText::AllocatedReservedOverTime)
                ),
                x_label: x_label.into(),
                points,
                marks,
            }));
        }
        if real.len() > TIMELINE_MARKS {
            b.push(Block::Para(format!(
                "{} {TIMELINE_MARKS} / {}.",
                lang.say(TimelineText::PhasesMarkedChart),
                lang.integer(real.len() as u128)
            )));
        }
        let rows: Vec<Vec<Cell>> = real
            .iter()
            .map(|p| {
                let top = p.largest_at_peak.first();
                vec![
                    Cell::Code(format!(
                        "{} #{}",
                        p.name,
                        p.index.map_or("?".into(), |i| i.to_string())
                    )),
                    Cell::size(Some(p.peak_allocated_bytes)),
                    Cell::size(Some(p.peak_reserved_bytes)),
                    Cell::size(top.map(|a| a.size_bytes)),
                    top.and_then(|a| a.user_frame.as_ref().or(a.stack_top.first()))
                        .map_or("—".into(), |f| {
                            Cell::Code(crate::ledger::render::frame(f))
                        }),
                ]
            })
            .collect();
        b.push(Block::Table {
            header: vec![
                lang.say(TimelineText::Phase).into(),
                in_unit(lang.say(TimelineText::PeakAllocatedTrace), lang),
                in_unit(lang.say(TimelineText::PeakReservedTrace), lang),
                in_unit(lang.say(TimelineText::LargestAlivePeak), lang),
                lang.say(TimelineText::AllocatedAt).into(),
            ],
            rows,
        });
    }
}
