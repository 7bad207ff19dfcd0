//! PyTorch's memory snapshot (`torch.cuda.memory._snapshot()`), read as a stream.
//!
//! `torch.cuda.memory._dump_snapshot(path)` writes the snapshot dictionary with Python's
//! `pickle.dump` (protocol 4 up to Python 3.13, 5 from 3.14):
//!
//! ```text
//! {"segments": [ {device, address, total_size, allocated_size, active_size, requested_size,
//!                 stream, segment_type: "small"|"large", segment_pool_id: (int, int),
//!                 is_expandable, frames,
//!                 blocks: [ {address, size, requested_size,
//!                            state: "active_allocated"|"active_pending_free"|"inactive",
//!                            frames: [ {name, filename, line} … ]} … ]} … ],
//!  "device_traces": [ [ {action, addr | device_free (oom), size, stream, time_us,
//!                        compile_context, user_metadata (2.5+), frames} … ]  one list per device ],
//!  "allocator_settings": {PYTORCH_CUDA_ALLOC_CONF, max_split_size, expandable_segments, …},
//!  …}
//! ```
//!
//! `action` is one of alloc, free_requested, free_completed, segment_alloc, segment_free,
//! segment_map, segment_unmap (expandable segments), snapshot, oom (and annotate in recent
//! versions). Frames are innermost first; PyTorch shares frame dictionaries and memoizes
//! strings, so a frame list is mostly references back to earlier objects.
//!
//! Such a file reaches gigabytes (several KB per trace entry with deep stacks). It is read here
//! by a small pickle machine (`pickle`, the opcodes `pickle.dump` writes for these structures,
//! protocols 2 to 5; anything else is refused with the opcode and its byte offset) that never
//! builds the whole tree: it knows where it is in the structure (`segments[i].blocks[j]`,
//! `device_traces[d][k]`) and folds each entry into the summary (`fold`) as it completes. Strings,
//! frames and stacks are interned; the memo keeps four bytes per memoized object. The
//! `serde-pickle` crate was not used: it parses the whole stream into a value tree (its memo
//! clones whole values), so its memory grows with the file.
//!
//! The file comes from the workload, so it may be made to exhaust the reader. Nothing is copied
//! per fetch: a memoized container is kept once and each BINGET shares it (`Rc`), so a memo bomb
//! (one tuple fetched 60,000 times) costs what the tuple costs. What the memo keeps, the stack
//! holds (65,536 slots, tuples of at most 64 items), the generic values build and the strings
//! intern each have a budget; past one, the value is not kept and a note says how many were not.
//! The summary is bounded too: each frame is made once and shared by the allocations that show
//! it (stored once in JSON, in `frames`), every string keeps at most 1,000 characters, and past
//! 8 MiB of JSON details are dropped with a note that says which (`bound`). So any file gives a
//! bounded summary or a stated refusal, and `measure --timeline` always writes its result.
//!
//! The summary replays the traces (alloc +size and free_completed −size for the allocated bytes,
//! segment_alloc/segment_map +size and segment_free/segment_unmap −size for the reserved bytes),
//! cuts them into phases with the `user_metadata` markers `iteragpu phase <index> <name>` that
//! `measure --timeline` sets, and anchors the replayed levels to the segments at the end of the
//! snapshot (so that a trace whose first entries were dropped by `max_entries` still gives
//! absolute levels, and says that it is truncated).

mod bound;
mod fold;
mod pickle;
mod stored;
pub mod view;
/// Writes pickles for the tests; `benches/snapshot_summary.rs` compiles it in by path and uses
/// what the tests do not, hence `dead_code` allowed.
#[cfg(test)]
#[allow(dead_code)]
mod writer;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// The label of the trace entries recorded before the first phase marker.
pub const BEFORE_FIRST_PHASE: &str = "(before the first phase)";
/// The label of unmarked trace entries recorded after a phase ended and before the next began.
pub const BETWEEN_PHASES: &str = "(between phases)";
/// The prefix of the `user_metadata` that marks a phase: `iteragpu phase <index> <name>`.
pub const PHASE_MARKER_PREFIX: &str = "iteragpu phase ";
/// At most this many points in a device's time series.
pub const SERIES_MAX_POINTS: usize = 2000;
/// This many allocations are kept alive at each phase's peak (and at the end of the snapshot).
pub const LARGEST_KEPT: usize = 10;
/// This many Python frames are kept from the innermost end of each stack.
pub const STACK_TOP_FRAMES: usize = 5;
/// Every string of the summary (frames, phase names, actions, allocator settings) keeps at most
/// this many characters: a longer one is cut and ends with "…".
pub const MAX_STRING_CHARS: usize = 1000;
/// The summary, written as the result writes it (pretty JSON), takes at most this many bytes:
/// past it details are dropped, and a note says which (see `bound`).
pub const MAX_SUMMARY_BYTES: u64 = 8 << 20;

/// `text` with at most `MAX_STRING_CHARS` characters, the last one "…" when it was cut.
pub(crate) fn cut(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(MAX_STRING_CHARS) {
        None => Cow::Borrowed(text),
        Some(_) => {
            let end = text
                .char_indices()
                .nth(MAX_STRING_CHARS - 1)
                .map_or(text.len(), |(i, _)| i);
            Cow::Owned(format!("{}…", &text[..end]))
        }
    }
}

/// How the snapshot was recorded, when the caller knows it.
#[derive(Clone, Debug, Default)]
pub struct SummaryOptions {
    /// The `max_entries` given to `_record_memory_history`: a device trace that holds this many
    /// entries is known to have lost its oldest ones.
    pub max_entries: Option<u64>,
    /// The phases' wall-clock bounds as the result recorded them (`started_at_unix_us`,
    /// `ended_at_unix_us`): an entry without a marker inside a phase's bounds belongs to it.
    /// PyTorch's metadata is thread-local, so the allocations of autograd's backward threads
    /// carry no marker; the trace's `time_us` is the same Unix clock in microseconds.
    pub phase_bounds: Vec<PhaseBound>,
}

/// One phase's index, name and wall-clock bounds (microseconds since the Unix epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseBound {
    pub index: u64,
    pub name: String,
    pub start_us: i64,
    pub end_us: i64,
}

/// What a memory snapshot says, per device: the segments at the end, and, when the allocation
/// history was recorded, the replayed timeline cut into phases.
///
/// Bounded whatever the file: every string at most `MAX_STRING_CHARS` characters, each frame
/// stored once, the whole at most `MAX_SUMMARY_BYTES` as JSON. In JSON, the allocations' frames
/// are positions in `frames` (results written before the table, with the frames inline, are
/// read as well).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct SnapshotSummary {
    /// The frames the allocations below show, each once, in the order first shown.
    #[serde(default)]
    pub frames: Vec<Frame>,
    /// The pickle protocol of the file (4 for Python ≤ 3.13's default, 5 for 3.14's).
    pub pickle_protocol: u8,
    /// Bytes read up to the pickle's STOP.
    pub bytes_read: u64,
    /// Whether any device trace holds an entry (`_record_memory_history(enabled="all")`).
    pub history_recorded: bool,
    /// One entry per device that has segments or trace entries, by device index.
    pub devices: Vec<DeviceSummary>,
    /// `allocator_settings` as PyTorch wrote them (PYTORCH_CUDA_ALLOC_CONF, max_split_size,
    /// expandable_segments, …), absent before PyTorch 2.3.
    pub allocator_settings: Option<BTreeMap<String, serde_json::Value>>,
    /// What the reader met but could not use (unknown actions, entries without a size, bounds
    /// reached, details dropped to stay under `MAX_SUMMARY_BYTES`), one sentence each; empty for
    /// a snapshot PyTorch wrote.
    pub notes: Vec<String>,
    /// `external_annotations` as PyTorch wrote them (`record_function` scopes recorded with
    /// `_record_memory_history(global_record_annotations=True)`, PyTorch 2.6+), in file order,
    /// at most `MAX_ANNOTATIONS`; absent from files without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<Annotation>,
}

/// At most this many `external_annotations` are kept (the others are counted in a note).
pub const MAX_ANNOTATIONS: usize = 20_000;

/// One entry of `external_annotations`: a `record_function` scope starting or ending.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotation {
    pub device: i64,
    /// `START` or `END`, as PyTorch wrote it.
    pub stage: String,
    /// The scope's name (`record_function("name")`).
    pub name: String,
    /// The same Unix clock in microseconds as the trace entries' `time_us`.
    pub time_us: Option<i64>,
}

impl Serialize for SnapshotSummary {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The allocations' frames are written as their positions in the table.
        stored::writing(&self.frames, || {
            SnapshotSummary::serialize(self, serializer)
        })
    }
}

impl<'de> Deserialize<'de> for SnapshotSummary {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // The table may come after the allocations that refer to it (a document whose keys were
        // sorted): it is taken out first.
        let mut value = serde_json::Value::deserialize(deserializer)?;
        let frames: Vec<Frame> = match value.as_object_mut().and_then(|m| m.remove("frames")) {
            Some(table) => serde_json::from_value(table).map_err(D::Error::custom)?,
            None => Vec::new(),
        };
        let inline = frames.is_empty();
        let mut summary = stored::reading(frames, || SnapshotSummary::deserialize(value))
            .map_err(D::Error::custom)?;
        // Results written before the table have their frames inline, a copy per allocation:
        // equal frames are made one, and the table is made here.
        if inline {
            summary.share_frames();
        }
        summary.index_frames();
        Ok(summary)
    }
}

impl SnapshotSummary {
    /// Every allocation of the summary.
    pub fn allocations(&self) -> impl Iterator<Item = &Allocation> {
        self.devices.iter().flat_map(|d| {
            d.largest_blocks_at_end.iter().chain(
                d.trace
                    .iter()
                    .flat_map(|t| t.phases.iter().flat_map(|p| p.largest_at_peak.iter())),
            )
        })
    }

    /// Makes `frames` the distinct frames of the allocations, in the order first shown (a frame
    /// is known by its shared strings, without hashing its text).
    pub fn index_frames(&mut self) {
        let mut seen: HashSet<stored::Key> = HashSet::new();
        let mut frames = Vec::new();
        for a in self.allocations() {
            for f in a.user_frame.iter().chain(&a.stack_top) {
                if seen.insert(stored::key(f)) {
                    frames.push(f.clone());
                }
            }
        }
        self.frames = frames;
    }

    /// Makes equal frames one (shared strings).
    fn share_frames(&mut self) {
        let mut shared: HashSet<Frame> = HashSet::new();
        let mut share = |f: &mut Frame| match shared.get(f) {
            Some(known) => *f = known.clone(),
            None => {
                shared.insert(f.clone());
            }
        };
        for d in &mut self.devices {
            let phases = d.trace.iter_mut().flat_map(|t| t.phases.iter_mut());
            let allocations = d
                .largest_blocks_at_end
                .iter_mut()
                .chain(phases.flat_map(|p| p.largest_at_peak.iter_mut()));
            for a in allocations {
                a.user_frame.iter_mut().for_each(&mut share);
                a.stack_top.iter_mut().for_each(&mut share);
            }
        }
    }
}

/// One device: its segments at the end of the snapshot and its replayed trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// The CUDA device index (the position of its list in `device_traces`, the `device` field
    /// of its segments).
    pub device: i64,
    /// The allocator's segments when the snapshot was taken.
    pub segments: SegmentMap,
    /// The largest allocated blocks when the snapshot was taken (at most 10, largest first),
    /// with the stack that allocated them when context was recorded.
    pub largest_blocks_at_end: Vec<Allocation>,
    /// The replayed trace; `None` when this device's trace is empty (history not recorded).
    pub trace: Option<TraceSummary>,
}

/// The segments of one device when the snapshot was taken.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentMap {
    /// Number of segments (cudaMalloc'd ranges, or mapped ranges of expandable segments).
    pub segments: u64,
    /// Σ `total_size`: what `memory_reserved()` reports.
    pub reserved_bytes: u64,
    /// Σ block sizes in state `active_allocated`: what `memory_allocated()` reports.
    pub allocated_bytes: u64,
    /// `allocated_bytes` plus the blocks in state `active_pending_free` (freed, waiting for
    /// another stream): what the trace replay counts as allocated.
    pub active_bytes: u64,
    /// Σ `requested_size` of the allocated blocks (before PyTorch's rounding).
    pub requested_bytes: u64,
    /// Σ sizes of the inactive (free, cached) blocks.
    pub inactive_bytes: u64,
    /// Inactive bytes in segments that are split (hold more than one block): free memory that
    /// `empty_cache()` cannot return, PyTorch's `inactive_split_bytes`.
    pub inactive_split_bytes: u64,
    /// The largest inactive block of the device.
    pub largest_inactive_block_bytes: u64,
    /// Per pool (private pool id and small/large), in pool order.
    pub pools: Vec<PoolSummary>,
    /// The largest segments (at most `SEGMENTS_KEPT`, largest first), each with the numbers
    /// the file states and the free blocks inside it; absent from summaries written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub largest_segments: Vec<SegmentInfo>,
}

/// This many segments are listed per device (the largest); all are counted in the totals.
pub const SEGMENTS_KEPT: usize = 32;

/// One segment as the file states it, with its free (inactive) blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub address: Option<u64>,
    /// `total_size`: what cudaMalloc (or the mapping) gave.
    pub total_size_bytes: u64,
    /// `allocated_size`, `active_size` and `requested_size` as the file states them (`None`
    /// when absent).
    pub allocated_size_bytes: Option<u64>,
    pub active_size_bytes: Option<u64>,
    pub requested_size_bytes: Option<u64>,
    /// "small", "large" or "unknown".
    pub segment_type: String,
    pub pool_id: Option<[i64; 2]>,
    pub is_expandable: bool,
    /// Its blocks, and how many of them are inactive (free, cached), their bytes and the
    /// largest (each the `size` the file states).
    pub blocks: u64,
    pub free_blocks: u64,
    pub free_bytes: u64,
    pub largest_free_block_bytes: u64,
}

/// The segments of one pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolSummary {
    /// `segment_pool_id`: `[0, 0]` is the default pool; others are private pools (CUDA graphs,
    /// `torch.cuda.MemPool`). `None` when the file does not say.
    pub pool_id: Option<[i64; 2]>,
    /// "small" (blocks ≤ 1 MiB, 2 MiB segments) or "large", as `segment_type` says ("unknown"
    /// when absent).
    pub segment_type: String,
    /// Number of segments, and how many of them are expandable.
    pub segments: u64,
    pub expandable_segments: u64,
    /// Σ `total_size` of the pool's segments.
    pub reserved_bytes: u64,
    /// Σ allocated blocks (`active_allocated`).
    pub allocated_bytes: u64,
    /// Σ allocated and pending-free blocks.
    pub active_bytes: u64,
    /// Σ inactive blocks.
    pub inactive_bytes: u64,
    /// Inactive bytes in split segments (see `SegmentMap::inactive_split_bytes`).
    pub inactive_split_bytes: u64,
    /// The pool's largest inactive block: the largest request it can serve without a new
    /// segment (modulo PyTorch's rounding and `max_split_size`).
    pub largest_inactive_block_bytes: u64,
}

/// A device's trace, replayed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// Entries in `device_traces[device]`.
    pub entries: u64,
    /// Entries per action (alloc, free_requested, free_completed, segment_alloc, …).
    pub actions: BTreeMap<String, u64>,
    /// `time_us` of the first and last entries (absent before PyTorch 2.1).
    pub first_time_us: Option<i64>,
    pub last_time_us: Option<i64>,
    /// Whether the trace holds the whole history, and what is missing if not.
    pub history: HistoryCoverage,
    /// The highest replayed allocated and reserved levels over the whole trace.
    pub peak_allocated_bytes: u64,
    pub peak_allocated_at: TracePoint,
    pub peak_reserved_bytes: u64,
    pub peak_reserved_at: TracePoint,
    /// The replayed levels after the last entry (equal to the segments' `active_bytes` and
    /// `reserved_bytes`, to which they are anchored).
    pub end_allocated_bytes: u64,
    pub end_reserved_bytes: u64,
    /// The phases in the order they first appear; entries before the first marker form
    /// "(before the first phase)", unmarked entries after a phase "(between phases)".
    pub phases: Vec<PhaseSummary>,
    /// The timeline for a chart, at most 2,000 points: each point spans `series_stride`
    /// consecutive entries and holds the highest levels within them (peaks are never lost),
    /// stamped with the first entry of the span.
    pub series: Vec<SeriesPoint>,
    pub series_stride: u64,
}

/// Whether the first entries of the history are missing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryCoverage {
    /// True when the trace does not start from an empty allocator: it holds `max_entries`
    /// entries, or frees memory it never saw allocated, or memory was already allocated or
    /// reserved at its first entry. Its first entries are missing (`max_entries` dropped them,
    /// or recording began after those allocations).
    pub truncated: bool,
    /// Why `truncated` is true, in one sentence.
    pub reason: Option<String>,
    /// Allocated (active) and reserved bytes already present before the first entry: the
    /// levels at the end of the snapshot minus what the trace adds up to.
    pub allocated_before_first_entry_bytes: u64,
    pub reserved_before_first_entry_bytes: u64,
    /// free_completed entries whose address no earlier alloc entry gave, and segment_free /
    /// segment_unmap entries whose address no earlier segment_alloc / segment_map gave.
    pub frees_without_alloc: u64,
    pub segment_frees_without_alloc: u64,
}

/// An entry of a device trace: its index in `device_traces[device]` and its `time_us`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracePoint {
    /// `None` when the level was already reached before the first entry of the span (a phase's
    /// peak that is its starting level).
    pub event: Option<u64>,
    pub time_us: Option<i64>,
}

/// One phase of one device, from the trace entries that carry its marker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// The marker's name (`model_load`, `warm_forward[2]`, …) or one of the pseudo-phases
    /// "(before the first phase)" and "(between phases)".
    pub name: String,
    /// The marker's index (the phase's position in the measurement); `None` for pseudo-phases.
    pub index: Option<u64>,
    /// Trace entries of the phase (a phase interrupted by unmarked entries counts all its
    /// spans), the first and the last, with their times.
    pub entries: u64,
    pub first_event: u64,
    pub last_event: u64,
    pub start_time_us: Option<i64>,
    pub end_time_us: Option<i64>,
    /// alloc entries and their bytes; free_completed entries and their bytes.
    pub allocations: u64,
    pub allocated_total_bytes: u64,
    pub frees: u64,
    pub freed_total_bytes: u64,
    /// Levels just before the phase's first entry and just after its last.
    pub start_allocated_bytes: u64,
    pub end_allocated_bytes: u64,
    pub start_reserved_bytes: u64,
    pub end_reserved_bytes: u64,
    /// The highest allocated level during the phase (its starting level included) and where.
    pub peak_allocated_bytes: u64,
    pub peak_allocated_at: TracePoint,
    /// The highest reserved level during the phase and where.
    pub peak_reserved_bytes: u64,
    pub peak_reserved_at: TracePoint,
    /// The largest allocations alive at the allocated peak (at most 10, largest first), among
    /// those whose alloc entry is in the trace (a truncated trace does not know the older ones).
    pub largest_at_peak: Vec<Allocation>,
    /// Out-of-memory entries recorded during the phase (at most 16 kept).
    pub ooms: Vec<OomEvent>,
}

/// An allocation (a block), with where it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub address: u64,
    /// The block size (rounded by the allocator).
    pub size_bytes: u64,
    /// Its alloc entry, when it comes from the trace.
    pub allocated_at: Option<TracePoint>,
    /// The phase of its alloc entry, when it comes from the trace (shared with the phase's
    /// other allocations, not copied).
    #[serde(default, with = "stored::text_option")]
    pub phase: Option<Arc<str>>,
    /// The innermost frame of user code: the first Python frame outside PyTorch (`torch/`,
    /// generated FX/Inductor code), iteragpu's own package and Python's standard library.
    /// Within a summary's JSON, its position in the summary's `frames`.
    #[serde(default, with = "stored::frame_option")]
    pub user_frame: Option<Frame>,
    /// The innermost Python frames of its stack (at most 5, innermost first), PyTorch's
    /// included: the top of the stack that allocated it. Positions, like `user_frame`.
    #[serde(default, with = "stored::frame_list")]
    pub stack_top: Vec<Frame>,
}

/// A frame of a recorded stack. Its strings are shared by every allocation that shows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    #[serde(with = "stored::text")]
    pub filename: Arc<str>,
    pub line: i64,
    #[serde(with = "stored::text")]
    pub name: Arc<str>,
}

/// An `oom` trace entry: the allocator raised an out-of-memory error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomEvent {
    pub at: TracePoint,
    /// The requested bytes that could not be allocated.
    pub requested_bytes: u64,
    /// What CUDA still reported free.
    pub device_free_bytes: Option<u64>,
}

/// A point of a device's time series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// The first trace entry of the span and its time.
    pub event: u64,
    pub time_us: Option<i64>,
    /// The highest allocated and reserved levels within the span.
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// Why a snapshot could not be summarised.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read the snapshot: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "unsupported pickle opcode {} at byte {offset}: a memory snapshot written by pickle.dump does not use it",
        pickle::describe_opcode(*opcode)
    )]
    Opcode { opcode: u8, offset: u64 },
    #[error("unsupported pickle protocol {protocol} at byte {offset} (protocols 2 to 5 are read)")]
    Protocol { protocol: u8, offset: u64 },
    #[error("the snapshot ends at byte {offset}, inside {what}: the file is truncated")]
    Truncated { offset: u64, what: &'static str },
    #[error("malformed pickle at byte {offset}: {message}")]
    Malformed { offset: u64, message: String },
    #[error("{message} at byte {offset}: refused rather than use unbounded memory")]
    TooLarge { offset: u64, message: String },
    #[error("not a PyTorch memory snapshot: {0}")]
    NotASnapshot(String),
    #[error(
        "its summary would take {bytes} bytes even with its details dropped (at most {MAX_SUMMARY_BYTES} are written): refused rather than write an unbounded result"
    )]
    SummaryTooLarge { bytes: u64 },
    #[error("the snapshot reader failed ({0}); the snapshot is kept as it is")]
    Failed(String),
}

/// Summarises the snapshot file at `path` (see [`summarize`]).
pub fn summarize_file(
    path: &Path,
    options: &SummaryOptions,
) -> Result<SnapshotSummary, SnapshotError> {
    let file = std::fs::File::open(path)?;
    summarize(file, options)
}

/// Summarises a snapshot pickle read from `input`, in one pass, with memory bounded by the
/// snapshot's live state (allocations alive at once, distinct strings and frames, each within a
/// bound), never by its length nor by how often the memo is fetched. Any byte sequence gives a
/// summary of at most `MAX_SUMMARY_BYTES` or an error, never a panic.
pub fn summarize<R: Read>(
    input: R,
    options: &SummaryOptions,
) -> Result<SnapshotSummary, SnapshotError> {
    let mut folder = fold::Folder::new(options.clone());
    let run = pickle::run(input, &mut folder)?;
    let summary = folder.finish(run)?;
    bound::bound(summary, options)
}

#[cfg(test)]
mod tests;
