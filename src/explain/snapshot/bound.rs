//! The summary's size bound. A snapshot PyTorch wrote gives a summary of a few hundred
//! kilobytes; a file made to look like one (thousands of phases, thousands of devices, long
//! names) could give hundreds of megabytes, which the result, `explain` and `report` would carry.
//! Past `MAX_SUMMARY_BYTES` (as the result writes it), details are dropped in a fixed order, each
//! level keeping less than the one before, until the summary fits; a note says what was kept and
//! what was dropped. What always fits (the segments of 1,024 devices) is kept last; past that the
//! summary is refused, with the size it would have had.

use super::{
    MAX_SUMMARY_BYTES, PhaseSummary, SeriesPoint, SnapshotError, SnapshotSummary, SummaryOptions,
    TraceSummary, cut,
};
use crate::units::Bytes;
use std::collections::HashSet;

/// Room left for the note that says what was dropped.
const NOTE_ROOM: u64 = 4096;

/// What one level keeps.
#[derive(Clone, Copy)]
struct Level {
    /// Points of each device's time series.
    series: usize,
    /// Frames of each allocation's stack top.
    stack: usize,
    /// Largest allocations of each phase, and at the end.
    largest: usize,
    /// Pools of each device.
    pools: usize,
    /// Phases of each device (the measurement's first).
    phases: usize,
    /// Out-of-memory entries of each phase.
    ooms: usize,
    /// Whether the allocator settings, the unusual actions' names and the traces are kept.
    settings: bool,
    actions: bool,
    traces: bool,
}

const ALL: usize = usize::MAX;

impl Level {
    /// A row of `LEVELS`: the counts in the order of the fields, then what is kept or not.
    const fn new(counts: [usize; 6], settings: bool, actions: bool, traces: bool) -> Level {
        let [series, stack, largest, pools, phases, ooms] = counts;
        Level {
            series,
            stack,
            largest,
            pools,
            phases,
            ooms,
            settings,
            actions,
            traces,
        }
    }
}

/// Each level keeps less than the one before. Counts: series points, stack frames, largest
/// allocations, pools, phases, out-of-memory entries; then settings, actions, traces.
const LEVELS: [Level; 6] = [
    Level::new([250, ALL, ALL, ALL, ALL, ALL], true, true, true),
    Level::new([250, 1, 3, ALL, ALL, ALL], true, true, true),
    Level::new([100, 1, 3, 16, 1000, 4], true, true, true),
    Level::new([100, 1, 1, 16, 200, 1], true, true, true),
    Level::new([20, 0, 1, 1, 20, 1], false, false, true),
    Level::new([0, 0, 1, 0, 0, 0], false, false, false),
];

/// The bytes `summary` takes as the result writes it (pretty JSON), counted, not kept.
pub(crate) fn stored_len(summary: &SnapshotSummary) -> u64 {
    let mut count = 0u64;
    match serde_json::to_writer_pretty(Counter(&mut count), summary) {
        Ok(()) => count,
        Err(_) => u64::MAX,
    }
}

/// What the summary holds, to say what was dropped.
#[derive(Clone, Copy, Default)]
struct Counts {
    traces: usize,
    phases: usize,
    pools: usize,
    allocations: usize,
    ooms: usize,
    frames: usize,
}

impl Counts {
    fn of(s: &SnapshotSummary) -> Counts {
        let mut c = Counts {
            frames: s.frames.len(),
            ..Counts::default()
        };
        for d in &s.devices {
            c.pools += d.segments.pools.len();
            c.allocations += d.largest_blocks_at_end.len();
            if let Some(t) = &d.trace {
                c.traces += 1;
                c.phases += t.phases.len();
                for p in &t.phases {
                    c.allocations += p.largest_at_peak.len();
                    c.ooms += p.ooms.len();
                }
            }
        }
        c
    }
}

/// `summary` within `MAX_SUMMARY_BYTES`, or the refusal.
pub(super) fn bound(
    mut summary: SnapshotSummary,
    options: &SummaryOptions,
) -> Result<SnapshotSummary, SnapshotError> {
    let full = stored_len(&summary);
    if full <= MAX_SUMMARY_BYTES {
        return Ok(summary);
    }
    let before = Counts::of(&summary);
    let annotations = summary.annotations.len();
    let dropped = |s: &mut SnapshotSummary| {
        if annotations > 0 && s.annotations.is_empty() {
            s.notes.push(format!(
                "{} external annotations were dropped to stay under the bound",
                Bytes(annotations as u64).grouped()
            ));
        }
    };
    let measured: HashSet<(u64, String)> = options
        .phase_bounds
        .iter()
        .map(|b| (b.index, cut(&b.name).into_owned()))
        .collect();
    for level in LEVELS {
        apply(&mut summary, level, &measured);
        summary.index_frames();
        if stored_len(&summary).saturating_add(NOTE_ROOM) <= MAX_SUMMARY_BYTES {
            let note = note(full, level, &before, &Counts::of(&summary), 0);
            summary.notes.push(note);
            dropped(&mut summary);
            return Ok(summary);
        }
    }
    // The segments of the first devices, as many as fit.
    let mut sizes = summary.devices.iter().map(|d| {
        let mut count = 0u64;
        let _ = serde_json::to_writer_pretty(Counter(&mut count), d);
        count.saturating_add(16)
    });
    let all = summary.devices.len();
    let base = {
        let mut empty = summary.clone();
        empty.devices.clear();
        stored_len(&empty)
    };
    let mut used = base.saturating_add(NOTE_ROOM);
    let mut kept = 0;
    for size in sizes.by_ref() {
        if used.saturating_add(size) > MAX_SUMMARY_BYTES {
            break;
        }
        used += size;
        kept += 1;
    }
    drop(sizes);
    summary.devices.truncate(kept);
    if kept > 0 && stored_len(&summary).saturating_add(NOTE_ROOM) <= MAX_SUMMARY_BYTES {
        let last = LEVELS[LEVELS.len() - 1];
        let note = note(full, last, &before, &Counts::of(&summary), all - kept);
        summary.notes.push(note);
        dropped(&mut summary);
        return Ok(summary);
    }
    Err(SnapshotError::SummaryTooLarge { bytes: full })
}

/// Counts the bytes written through it.
struct Counter<'a>(&'a mut u64);

impl std::io::Write for Counter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        *self.0 = self.0.saturating_add(bytes.len() as u64);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keeps what `level` keeps.
fn apply(s: &mut SnapshotSummary, level: Level, measured: &HashSet<(u64, String)>) {
    if !level.settings {
        s.allocator_settings = None;
        s.annotations.clear();
    }
    for d in &mut s.devices {
        d.largest_blocks_at_end.truncate(level.largest);
        for a in &mut d.largest_blocks_at_end {
            a.stack_top.truncate(level.stack);
        }
        keep_largest_pools(&mut d.segments.pools, level.pools);
        d.segments.largest_segments.truncate(level.pools);
        if !level.traces {
            d.trace = None;
        }
        let Some(t) = &mut d.trace else {
            continue;
        };
        thin(t, level.series);
        keep_phases(t, level.phases, measured);
        if !level.actions {
            let others: u64 = t
                .actions
                .iter()
                .filter(|(name, _)| !super::fold::is_action(name))
                .map(|(_, n)| *n)
                .sum();
            t.actions.retain(|name, _| super::fold::is_action(name));
            if others > 0 {
                t.actions.insert("(other actions)".into(), others);
            }
        }
        for p in &mut t.phases {
            p.ooms.truncate(level.ooms);
            p.largest_at_peak.truncate(level.largest);
            for a in &mut p.largest_at_peak {
                a.stack_top.truncate(level.stack);
            }
        }
    }
}

/// The `max` pools that reserve the most, in their order.
fn keep_largest_pools(pools: &mut Vec<super::PoolSummary>, max: usize) {
    if pools.len() <= max {
        return;
    }
    let mut order: Vec<usize> = (0..pools.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(pools[i].reserved_bytes), i));
    retain_positions(pools, order.into_iter().take(max).collect());
}

/// Keeps the items at the positions in `keep`, in their order.
fn retain_positions<T>(items: &mut Vec<T>, keep: HashSet<usize>) {
    let mut i = 0;
    items.retain(|_| {
        i += 1;
        keep.contains(&(i - 1))
    });
}

/// The time series with at most `max` points: consecutive points merged, each keeping the
/// highest levels of those it replaces (peaks are never lost).
fn thin(t: &mut TraceSummary, max: usize) {
    if t.series.len() <= max {
        return;
    }
    if max == 0 {
        t.series.clear();
        return;
    }
    let k = t.series.len().div_ceil(max);
    t.series = t
        .series
        .chunks(k)
        .map(|c| SeriesPoint {
            event: c[0].event,
            time_us: c[0].time_us,
            allocated_bytes: c.iter().map(|p| p.allocated_bytes).max().unwrap_or(0),
            reserved_bytes: c.iter().map(|p| p.reserved_bytes).max().unwrap_or(0),
        })
        .collect();
    t.series_stride = t.series_stride.saturating_mul(k as u64);
}

/// At most `max` phases, in their order: the measurement's phases first, then the pseudo-phases,
/// then the others (markers the measurement does not know).
fn keep_phases(t: &mut TraceSummary, max: usize, measured: &HashSet<(u64, String)>) {
    if t.phases.len() <= max {
        return;
    }
    let rank = |p: &PhaseSummary| match p.index {
        Some(i) if measured.contains(&(i, p.name.clone())) => 0u8,
        None => 1,
        Some(_) => 2,
    };
    let mut order: Vec<(u8, usize)> = t
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| (rank(p), i))
        .collect();
    order.sort_unstable();
    retain_positions(
        &mut t.phases,
        order.into_iter().take(max).map(|(_, i)| i).collect(),
    );
}

/// What was kept and what was dropped, in one sentence.
fn note(
    full: u64,
    level: Level,
    before: &Counts,
    after: &Counts,
    devices_dropped: usize,
) -> String {
    let limit = |n: usize, what: &str| -> Option<String> {
        (n != ALL).then(|| format!("{} {what}", Bytes(n as u64).grouped()))
    };
    let kept: Vec<String> = [
        (level.traces && level.series > 0)
            .then(|| limit(level.series, "points per time series"))
            .flatten(),
        limit(level.stack, "frame(s) per stack top"),
        limit(level.largest, "largest allocation(s) per phase"),
        limit(level.pools, "pool(s) per device"),
        (level.traces)
            .then(|| limit(level.phases, "phases per device (the measurement's first)"))
            .flatten(),
        limit(level.ooms, "out-of-memory entry(ies) per phase"),
        (!level.settings).then(|| "no allocator settings".to_string()),
        (!level.actions && level.traces)
            .then(|| "unusual actions counted together as \"(other actions)\"".to_string()),
        (!level.traces).then(|| "no device trace (the segments only)".to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let dropped: Vec<String> = [
        (devices_dropped, "devices"),
        (before.traces.saturating_sub(after.traces), "device traces"),
        (before.phases.saturating_sub(after.phases), "phases"),
        (before.pools.saturating_sub(after.pools), "pools"),
        (
            before.allocations.saturating_sub(after.allocations),
            "allocations",
        ),
        (
            before.ooms.saturating_sub(after.ooms),
            "out-of-memory entries",
        ),
        (before.frames.saturating_sub(after.frames), "frames"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", Bytes(n as u64).grouped()))
    .collect();
    format!(
        "the summary would take {} bytes, above the {} bytes it may take in the result: it keeps at most {}{}",
        Bytes(full).grouped(),
        Bytes(MAX_SUMMARY_BYTES).grouped(),
        kept.join(", "),
        if dropped.is_empty() {
            String::new()
        } else {
            format!("; dropped: {}", dropped.join(", "))
        }
    )
}
