//! `explain --snapshot`: a snapshot's document (`explain::snapshot::view::SnapshotDoc`) as a
//! report `Document`, written by `export` as Markdown, HTML (with the timeline chart) or terminal
//! text. Words come from `catalog::snapshot`; numbers from `format::Style`.

use crate::explain::snapshot::view::{DeviceView, SnapshotDoc};
use crate::explain::snapshot::{Allocation, Frame};
use crate::ledger::render::frame;
use crate::report::catalog::common::CommonText;
use crate::report::catalog::snapshot::{self, SnapshotText as T};
use crate::report::catalog::timeline::TimelineText;
use crate::report::document::{Block, Cell, Chart, Document};
use crate::report::format::Style;

/// At most this many phases are marked on a chart and listed in a table.
const PHASES_SHOWN: usize = 40;

/// The document of a snapshot, in `lang`.
pub fn document(doc: &SnapshotDoc, lang: Style) -> Document {
    let mut b = vec![
        Block::Para(format!(
            "`{}` ({})",
            doc.file,
            lang.mebibytes(doc.file_bytes)
        )),
        Block::Para(snapshot::phases_from(doc.phases_from, lang).into()),
    ];
    for d in &doc.devices {
        device(&mut b, d, lang);
    }
    if !doc.summary.notes.is_empty() {
        b.push(Block::Heading(lang.say(T::Notes).into()));
        b.push(Block::List(doc.summary.notes.clone()));
    }
    Document {
        title: format!("{} — {}", lang.say(T::Title), doc.file),
        style: lang,
        blocks: b,
        attachments: Vec::new(),
    }
}

fn seconds(time: Option<i64>, origin: Option<i64>, lang: Style) -> String {
    match (time, origin) {
        (Some(t), Some(o)) => lang.decimal((t - o) as f64 / 1e6, 3),
        _ => "—".into(),
    }
}

/// A window's level, "—" when no entry of the trace falls in it.
fn level(bytes: Option<u64>) -> Cell {
    bytes.map_or("—".into(), |b| Cell::size_with_unit(Some(b)))
}

fn where_made(a: &Allocation) -> Cell {
    let own = a.user_frame.as_ref().map(frame);
    own.map_or("—".into(), Cell::Code)
}

fn innermost(frames: &[Frame]) -> Cell {
    frames.first().map_or("—".into(), |f| Cell::Code(frame(f)))
}

fn allocations(b: &mut Vec<Block>, list: &[Allocation], lang: Style) {
    b.push(Block::Table {
        header: vec![
            lang.say(T::Size).into(),
            lang.say(T::UserFrame).into(),
            lang.say(T::StackTop).into(),
        ],
        rows: list
            .iter()
            .map(|a| {
                vec![
                    Cell::size_with_unit(Some(a.size_bytes)),
                    where_made(a),
                    innermost(&a.stack_top),
                ]
            })
            .collect(),
    });
}

fn device(b: &mut Vec<Block>, d: &DeviceView, lang: Style) {
    b.push(Block::Heading(format!("cuda:{}", d.device)));
    let a = &d.at_dump;
    b.push(Block::Para(format!("**{}**", lang.say(T::AtDump))));
    let row = |what: T, bytes: u64| {
        vec![
            Cell::from(lang.say(what)),
            Cell::size_with_unit(Some(bytes)),
        ]
    };
    b.push(Block::Table {
        header: vec![lang.say(T::Quantity).into(), lang.say(T::Value).into()],
        rows: vec![
            vec![
                Cell::from(lang.say(T::Segments)),
                Cell::from(lang.integer(u128::from(a.segments))),
            ],
            row(T::Reserved, a.reserved_bytes),
            row(T::Allocated, a.allocated_bytes),
            row(T::ReservedMinusAllocated, a.reserved_minus_allocated_bytes),
            row(T::FreeBlocks, a.free_bytes),
            row(T::FreeInSplit, a.free_in_split_segments_bytes),
            row(T::LargestFreeBlock, a.largest_free_block_bytes),
        ],
    });
    match &d.peak {
        None => b.push(Block::Para(lang.say(T::NoTrace).into())),
        Some(p) => {
            let trace_origin = d
                .series
                .as_ref()
                .and_then(|s| s.first())
                .and_then(|p| p.time_us);
            b.push(Block::Heading(lang.say(T::Peak).into()));
            let phase = p.phase.clone().map_or("—".into(), Cell::Code);
            b.push(Block::Table {
                header: vec![
                    lang.say(T::Quantity).into(),
                    lang.say(T::Value).into(),
                    lang.say(T::When).into(),
                    lang.say(TimelineText::Phase).into(),
                ],
                rows: vec![
                    vec![
                        lang.say(CommonText::PeakAllocated).into(),
                        Cell::size_with_unit(Some(p.allocated_bytes)),
                        seconds(p.allocated_at.time_us, trace_origin, lang).into(),
                        phase,
                    ],
                    vec![
                        lang.say(CommonText::PeakReserved).into(),
                        Cell::size_with_unit(Some(p.reserved_bytes)),
                        seconds(p.reserved_at.time_us, trace_origin, lang).into(),
                        "—".into(),
                    ],
                ],
            });
            if let Some(reason) = &p.truncated_reason {
                b.push(Block::Para(format!("{} {reason}", lang.say(T::Truncated))));
            }
            b.push(Block::Heading(lang.say(T::LargestAlive).into()));
            if p.largest_alive.is_empty() {
                b.push(Block::Para(lang.say(T::NoneAlive).into()));
            } else {
                allocations(b, &p.largest_alive, lang);
            }
            chart(b, d, lang);
            b.push(Block::Heading(lang.say(T::Phases).into()));
            b.push(Block::Table {
                header: vec![
                    lang.say(TimelineText::Phase).into(),
                    lang.say(T::Start).into(),
                    lang.say(CommonText::PeakAllocated).into(),
                    lang.say(CommonText::PeakReserved).into(),
                ],
                rows: d
                    .phases
                    .iter()
                    .take(PHASES_SHOWN)
                    .map(|ph| {
                        vec![
                            Cell::Code(ph.name.clone()),
                            seconds(ph.start_time_us, trace_origin, lang).into(),
                            level(ph.peak_allocated_bytes),
                            level(ph.peak_reserved_bytes),
                        ]
                    })
                    .collect(),
            });
            if d.phases.len() > PHASES_SHOWN {
                b.push(Block::Para(format!(
                    "{} {PHASES_SHOWN} / {}.",
                    lang.say(TimelineText::PhasesMarkedChart),
                    lang.integer(d.phases.len() as u128)
                )));
            }
        }
    }
    b.push(Block::Heading(lang.say(T::SegmentMap).into()));
    b.push(Block::Table {
        header: vec![
            lang.say(T::Address).into(),
            lang.say(T::Kind).into(),
            lang.say(T::TotalSize).into(),
            lang.say(T::AllocatedSize).into(),
            lang.say(T::FreeBlockCount).into(),
            lang.say(T::LargestFreeBlock).into(),
        ],
        rows: a
            .largest_segments
            .iter()
            .map(|s| {
                vec![
                    Cell::Code(s.address.map_or("—".into(), |x| format!("{x:#x}"))),
                    Cell::Code(s.segment_type.clone()),
                    Cell::size_with_unit(Some(s.total_size_bytes)),
                    Cell::size_with_unit(s.allocated_size_bytes),
                    Cell::from(lang.integer(u128::from(s.free_blocks))),
                    Cell::size_with_unit(Some(s.largest_free_block_bytes)),
                ]
            })
            .collect(),
    });
    if !a.largest_allocations.is_empty() {
        b.push(Block::Heading(lang.say(T::LargestAtDump).into()));
        allocations(b, &a.largest_allocations, lang);
    }
}

/// The device's replayed levels over time, its phases' starts marked.
fn chart(b: &mut Vec<Block>, d: &DeviceView, lang: Style) {
    let Some(series) = d.series.as_ref() else {
        return;
    };
    let origin = series.first().and_then(|p| p.time_us);
    let x = |event: u64, time: Option<i64>| match (origin, time) {
        (Some(o), Some(t)) => (t - o) as f64 / 1e6,
        _ => event as f64,
    };
    let points: Vec<(f64, u64, u64)> = series
        .iter()
        .map(|p| (x(p.event, p.time_us), p.allocated_bytes, p.reserved_bytes))
        .collect();
    if points.len() < 2 {
        return;
    }
    let marks = d
        .phases
        .iter()
        .take(PHASES_SHOWN)
        .filter_map(|p| Some((x(0, Some(p.start_time_us?)), p.name.clone())))
        .filter(|_| origin.is_some())
        .collect();
    b.push(Block::Chart(Chart::Timeline {
        title: format!("cuda:{} — {}", d.device, lang.say(T::OverTime)),
        x_label: lang
            .say(if origin.is_some() {
                T::Seconds
            } else {
                T::Entries
            })
            .into(),
        points,
        marks,
    }));
}
