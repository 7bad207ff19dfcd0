//! `explain --snapshot`: any PyTorch memory snapshot as a document (`iteragpu.snapshot/1`), made
//! from the reader's summary. What the file states (segments' sizes, blocks' sizes) is kept as it
//! is and labelled `at_dump`; what the replay of the trace gives (levels over time, peaks, what was
//! alive at a peak) is labelled `derived`. Phases come from the tool's own markers, else from
//! torch's `record_function` annotations, else from fixed time windows, and the document says which.

use super::{Allocation, Annotation, SnapshotSummary};
use super::{SegmentInfo, SeriesPoint, TracePoint, TraceSummary};
use serde::Serialize;

/// The schema of the document `explain --snapshot --json` writes.
pub const SCHEMA: &str = "iteragpu.snapshot/1";
/// Fixed time windows cut a trace that carries no phase marker.
pub const TIME_WINDOWS: usize = 10;
/// At most this many annotated scopes are phases (the outermost ones, first first).
pub const MAX_SCOPES: usize = 200;

/// Where a snapshot's phases come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PhasesFrom {
    /// The `iteragpu phase <index> <name>` markers `measure --timeline` sets in `user_metadata`.
    Markers,
    /// torch's `record_function` scopes (`external_annotations`, START and END).
    RecordFunction,
    /// No marker: the trace cut into `TIME_WINDOWS` equal spans of time (of entries when the
    /// trace has no `time_us`).
    TimeWindows,
    /// No trace (`_record_memory_history` not enabled, or `max_entries=0`): only the state at
    /// dump time.
    NoTrace,
}

/// What `explain --snapshot --json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotDoc {
    /// `iteragpu.snapshot/1`.
    pub schema: &'static str,
    pub tool_version: &'static str,
    /// The snapshot file as given, and its size in bytes.
    pub file: String,
    pub file_bytes: Option<u64>,
    pub phases_from: PhasesFrom,
    /// One per device, by device index.
    pub devices: Vec<DeviceView>,
    /// The reader's whole summary (the same one `measure --timeline` keeps in its result).
    pub summary: SnapshotSummary,
}

/// One device: its state at dump time (the file's numbers), then what the trace replay derives.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceView {
    pub device: i64,
    pub at_dump: AtDump,
    /// The highest replayed levels; `None` without a trace (`timeline_missing` says why).
    pub peak: Option<Peak>,
    pub timeline_missing: Option<String>,
    /// The phases (or windows) in time order, each with its derived peaks.
    pub phases: Vec<PhaseView>,
    /// The replayed series for a chart (in JSON, the summary's `devices[].trace.series`).
    #[serde(skip)]
    pub series: Option<Vec<SeriesPoint>>,
}

/// The state when the snapshot was taken, from the segments and blocks as the file states them.
#[derive(Clone, Debug, Serialize)]
pub struct AtDump {
    pub segments: u64,
    /// Σ segments' `total_size` (what `memory_reserved()` reported).
    pub reserved_bytes: u64,
    /// Σ sizes of the blocks in state `active_allocated` (what `memory_allocated()` reported).
    pub allocated_bytes: u64,
    /// reserved − allocated: memory the allocator holds but no tensor uses.
    pub reserved_minus_allocated_bytes: u64,
    /// Σ sizes of the inactive (free, cached) blocks, those inside split segments (which
    /// `empty_cache()` cannot return), and the largest free block: the largest request served
    /// without a new segment.
    pub free_bytes: u64,
    pub free_in_split_segments_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// The largest segments (largest first), each with its free blocks.
    pub largest_segments: Vec<SegmentInfo>,
    /// The largest allocated blocks, with their frames (the workload's own first).
    pub largest_allocations: Vec<Allocation>,
}

/// The device's peak, from the replayed trace (`derived`: the file does not state it).
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// Always `true`: these levels are the trace's entries added up, anchored to the segments
    /// at dump time.
    pub derived: bool,
    pub allocated_bytes: u64,
    pub allocated_at: TracePoint,
    pub reserved_bytes: u64,
    pub reserved_at: TracePoint,
    /// The phase (or window) that holds the allocated peak.
    pub phase: Option<String>,
    /// The largest allocations alive at the allocated peak, with their frames (among those
    /// whose alloc entry the trace holds).
    pub largest_alive: Vec<Allocation>,
    /// Whether the trace's first entries are missing, and why.
    pub truncated: bool,
    pub truncated_reason: Option<String>,
}

/// One phase or window, with the peaks of its span of the trace (derived).
#[derive(Clone, Debug, Serialize)]
pub struct PhaseView {
    pub name: String,
    pub start_time_us: Option<i64>,
    pub end_time_us: Option<i64>,
    /// The highest replayed levels within it; `None` when no point of the series falls in it.
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
}

impl SnapshotDoc {
    /// The document of `summary`, read from `file` (`file_bytes` long).
    pub fn of(summary: SnapshotSummary, file: String, file_bytes: Option<u64>) -> SnapshotDoc {
        let traces: Vec<&TraceSummary> = summary
            .devices
            .iter()
            .filter_map(|d| d.trace.as_ref())
            .collect();
        let phases_from = if traces.is_empty() {
            PhasesFrom::NoTrace
        } else if traces
            .iter()
            .any(|t| t.phases.iter().any(|p| p.index.is_some()))
        {
            PhasesFrom::Markers
        } else if summary.annotations.iter().any(|a| a.stage == "START") {
            PhasesFrom::RecordFunction
        } else {
            PhasesFrom::TimeWindows
        };
        let devices = summary
            .devices
            .iter()
            .map(|d| {
                let s = &d.segments;
                let at_dump = AtDump {
                    segments: s.segments,
                    reserved_bytes: s.reserved_bytes,
                    allocated_bytes: s.allocated_bytes,
                    reserved_minus_allocated_bytes: s
                        .reserved_bytes
                        .saturating_sub(s.allocated_bytes),
                    free_bytes: s.inactive_bytes,
                    free_in_split_segments_bytes: s.inactive_split_bytes,
                    largest_free_block_bytes: s.largest_inactive_block_bytes,
                    largest_segments: s.largest_segments.clone(),
                    largest_allocations: d.largest_blocks_at_end.clone(),
                };
                let Some(t) = &d.trace else {
                    return DeviceView {
                        device: d.device,
                        at_dump,
                        peak: None,
                        timeline_missing: Some(
                            "the snapshot holds no trace for this device (history not recorded, or max_entries=0): only the state at dump time is known"
                                .into(),
                        ),
                        phases: Vec::new(),
                        series: None,
                    };
                };
                let phases = match phases_from {
                    PhasesFrom::Markers => marked(t),
                    PhasesFrom::RecordFunction => {
                        // A device without scopes of its own is cut into windows.
                        let spans = scopes(t, &summary.annotations, d.device);
                        if spans.is_empty() { windows(t) } else { spans }
                    }
                    _ => windows(t),
                };
                // The replay's phase that holds the allocated peak knows what was alive there.
                let at_peak = t
                    .phases
                    .iter()
                    .filter(|p| p.peak_allocated_bytes == t.peak_allocated_bytes)
                    .find(|p| p.peak_allocated_at == t.peak_allocated_at)
                    .or_else(|| t.phases.iter().max_by_key(|p| p.peak_allocated_bytes));
                let peak_time = t.peak_allocated_at.time_us;
                let phase = match phases_from {
                    PhasesFrom::Markers => at_peak.map(|p| p.name.clone()),
                    _ => peak_time.and_then(|time| {
                        phases
                            .iter()
                            .rev()
                            .find(|p| {
                                p.start_time_us.is_some_and(|s| s <= time)
                                    && p.end_time_us.is_some_and(|e| time <= e)
                            })
                            .map(|p| p.name.clone())
                    }),
                };
                DeviceView {
                    device: d.device,
                    at_dump,
                    peak: Some(Peak {
                        derived: true,
                        allocated_bytes: t.peak_allocated_bytes,
                        allocated_at: t.peak_allocated_at,
                        reserved_bytes: t.peak_reserved_bytes,
                        reserved_at: t.peak_reserved_at,
                        phase,
                        largest_alive: at_peak.map(|p| p.largest_at_peak.clone()).unwrap_or_default(),
                        truncated: t.history.truncated,
                        truncated_reason: t.history.reason.clone(),
                    }),
                    timeline_missing: None,
                    phases,
                    series: Some(t.series.clone()),
                }
            })
            .collect();
        SnapshotDoc {
            schema: SCHEMA,
            tool_version: env!("CARGO_PKG_VERSION"),
            file,
            file_bytes,
            phases_from,
            devices,
            summary,
        }
    }
}

/// The tool's own phases, as the replay cut them (pseudo-phases included, named as such).
fn marked(t: &TraceSummary) -> Vec<PhaseView> {
    t.phases
        .iter()
        .map(|p| PhaseView {
            name: match p.index {
                Some(i) => format!("{} #{i}", p.name),
                None => p.name.clone(),
            },
            start_time_us: p.start_time_us,
            end_time_us: p.end_time_us,
            peak_allocated_bytes: Some(p.peak_allocated_bytes),
            peak_reserved_bytes: Some(p.peak_reserved_bytes),
        })
        .collect()
}

/// The highest levels of the series points stamped within `[start, end]` (each point holds the
/// highest levels of a span of entries that begins at its stamp).
fn peaks_within(t: &TraceSummary, start: i64, end: i64) -> (Option<u64>, Option<u64>) {
    let inside = t
        .series
        .iter()
        .filter(|p| p.time_us.is_some_and(|x| start <= x && x <= end));
    inside.fold((None, None), |(a, r), p| {
        (
            Some(a.map_or(p.allocated_bytes, |a: u64| a.max(p.allocated_bytes))),
            Some(r.map_or(p.reserved_bytes, |r: u64| r.max(p.reserved_bytes))),
        )
    })
}

/// The outermost `record_function` scopes of `device`, START paired with the next END of the
/// same name, at most `MAX_SCOPES`.
fn scopes(t: &TraceSummary, annotations: &[Annotation], device: i64) -> Vec<PhaseView> {
    let mut open: Vec<(&str, Option<i64>)> = Vec::new();
    let mut spans: Vec<PhaseView> = Vec::new();
    for a in annotations.iter().filter(|a| a.device == device) {
        match a.stage.as_str() {
            "START" => open.push((&a.name, a.time_us)),
            "END" => {
                let Some(at) = open.iter().rposition(|(n, _)| *n == a.name) else {
                    continue;
                };
                let (name, start) = open.remove(at);
                // Only the scopes no other open scope holds.
                if at == 0 && spans.len() < MAX_SCOPES {
                    let (allocated, reserved) = match (start, a.time_us) {
                        (Some(s), Some(e)) => peaks_within(t, s, e),
                        _ => (None, None),
                    };
                    spans.push(PhaseView {
                        name: name.to_string(),
                        start_time_us: start,
                        end_time_us: a.time_us,
                        peak_allocated_bytes: allocated,
                        peak_reserved_bytes: reserved,
                    });
                }
            }
            _ => {}
        }
    }
    spans
}

/// `TIME_WINDOWS` equal spans of the trace's time (of its entries when it has no time).
fn windows(t: &TraceSummary) -> Vec<PhaseView> {
    let (Some(first), Some(last)) = (t.first_time_us, t.last_time_us) else {
        return entry_windows(t);
    };
    let n = TIME_WINDOWS as i64;
    let span = (last - first).max(0);
    (0..n)
        .map(|k| {
            let start = first + span * k / n;
            let end = if k == n - 1 {
                last
            } else {
                first + span * (k + 1) / n - 1
            };
            let (allocated, reserved) = peaks_within(t, start, end);
            PhaseView {
                name: format!("window {}/{n}", k + 1),
                start_time_us: Some(start),
                end_time_us: Some(end),
                peak_allocated_bytes: allocated,
                peak_reserved_bytes: reserved,
            }
        })
        .collect()
}

/// Windows of entries for a trace without `time_us` (before PyTorch 2.1).
fn entry_windows(t: &TraceSummary) -> Vec<PhaseView> {
    let n = TIME_WINDOWS as u64;
    (0..n)
        .map(|k| {
            let (start, end) = (t.entries * k / n, t.entries * (k + 1) / n);
            let inside = t
                .series
                .iter()
                .filter(|p| start <= p.event && p.event < end);
            let allocated = inside.clone().map(|p| p.allocated_bytes).max();
            let reserved = inside.map(|p| p.reserved_bytes).max();
            PhaseView {
                name: format!("window {}/{n} (entries {start}–{end})", k + 1),
                start_time_us: None,
                end_time_us: None,
                peak_allocated_bytes: allocated,
                peak_reserved_bytes: reserved,
            }
        })
        .collect()
}
