//! The snapshot's structure as a [`Schema`]: which containers are streamed, what their fields
//! mean, and how each completed segment and trace entry is folded into the summary.

use super::pickle::{Kind, Place, Role, Run, Schema, Strings, Value};
use super::{
    Allocation, Annotation, BEFORE_FIRST_PHASE, BETWEEN_PHASES, DeviceSummary, Frame,
    HistoryCoverage, LARGEST_KEPT, MAX_ANNOTATIONS, OomEvent, PHASE_MARKER_PREFIX, PhaseSummary,
    PoolSummary, SEGMENTS_KEPT, SERIES_MAX_POINTS, STACK_TOP_FRAMES, SegmentInfo, SegmentMap,
    SeriesPoint, SnapshotError, SnapshotSummary, SummaryOptions, TracePoint, TraceSummary, cut,
};
mod finish;
mod replay;

use replay::{KEY_BEFORE, KEY_BETWEEN, Replay, Room};

use crate::units::Bytes;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const MAX_DEVICES: usize = 1024;
const MAX_FRAMES: usize = 1 << 22;
const MAX_STACKS: usize = 1 << 22;
const MAX_MARKERS: usize = 100_000;
const MAX_PHASES: usize = 10_000;
/// Phases of all devices together (each holds its largest allocations and out-of-memory
/// entries): a snapshot that marks more is not a measurement's.
const MAX_PHASES_IN_ALL: usize = 20_000;
const MAX_OOMS_KEPT: usize = 16;
const MAX_OTHER_ACTIONS: usize = 64;
/// Pools per device (private pools of CUDA graphs and `MemPool`s): the others are counted in
/// the device's totals only.
const MAX_POOLS: usize = 256;
/// Allocations (and segments) tracked alive at once by the replay, all devices together; past
/// this the levels are still replayed but the newest are not ranked at the peaks.
const MAX_ALIVE: usize = 1 << 22;
/// JSON values (and object keys) of the allocator settings.
const MAX_SETTINGS_VALUES: usize = 10_000;

/// The words of the snapshot's keys and values, cached per interned string; each variant is
/// its word in snake case (`Word::from_str`), `Unseen` and `Other` excepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
enum Word {
    #[strum(disabled)]
    Unseen,
    #[strum(disabled)]
    #[default]
    Other,
    Segments,
    DeviceTraces,
    AllocatorSettings,
    ExternalAnnotations,
    Stage,
    Device,
    Address,
    TotalSize,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    SegmentType,
    SegmentPoolId,
    IsExpandable,
    Frames,
    Blocks,
    Size,
    State,
    Addr,
    Action,
    TimeUs,
    UserMetadata,
    DeviceFree,
    Filename,
    Line,
    Name,
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Annotate,
    ActiveAllocated,
    #[strum(serialize = "active_pending_free", serialize = "active_awaiting_free")]
    ActivePendingFree,
    Inactive,
    Small,
    Large,
}

fn word_of(s: &str) -> Word {
    s.parse().unwrap_or(Word::Other)
}

/// Whether `name` is one of PyTorch's trace actions.
pub(crate) fn is_action(name: &str) -> bool {
    ACTIONS.iter().any(|known| <&str>::from(*known) == name)
}

/// The trace actions, in the order they are counted.
const ACTIONS: [Word; 10] = [
    Word::Alloc,
    Word::FreeRequested,
    Word::FreeCompleted,
    Word::SegmentAlloc,
    Word::SegmentFree,
    Word::SegmentMap,
    Word::SegmentUnmap,
    Word::Snapshot,
    Word::Oom,
    Word::Annotate,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctx {
    Root,
    Segments,
    Segment,
    Blocks,
    Block,
    Traces,
    Trace(u32),
    Entry(u32),
    Frames,
    Frame,
    Annotations,
    Annotation,
}

pub(crate) enum Acc {
    None,
    Segment(Box<SegmentAcc>),
    Blocks(Box<BlockStats>),
    Block(BlockAcc),
    Entry(EntryAcc),
    Frames(StackRec),
    Frame(FrameAcc),
    Annotation(AnnotationAcc),
}

#[derive(Default)]
pub(crate) struct AnnotationAcc {
    device: Option<i64>,
    stage: Option<String>,
    name: Option<String>,
    time_us: Option<i64>,
}

#[derive(Default)]
pub(crate) struct SegmentAcc {
    device: Option<i64>,
    address: Option<u64>,
    total_size: Option<u64>,
    allocated_size: Option<u64>,
    active_size: Option<u64>,
    requested_size: Option<u64>,
    segment_type: u8,
    pool: Option<[i64; 2]>,
    expandable: bool,
    blocks: Option<Box<BlockStats>>,
}

#[derive(Clone, Copy)]
struct BlockTop {
    size: u64,
    address: u64,
    stack: Option<u32>,
}

#[derive(Default)]
pub(crate) struct BlockStats {
    count: u64,
    allocated: u64,
    pending: u64,
    inactive: u64,
    inactive_count: u64,
    largest_inactive: u64,
    requested: u64,
    top: Vec<BlockTop>,
}

#[derive(Default)]
pub(crate) struct BlockAcc {
    size: Option<u64>,
    requested: Option<u64>,
    address: Option<u64>,
    state: Word,
    stack: Option<u32>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Meta {
    #[default]
    Absent,
    Unmarked,
    Marker(u32),
}

#[derive(Default)]
pub(crate) struct EntryAcc {
    action: Word,
    other_action: Option<Box<str>>,
    addr: Option<u64>,
    size: Option<u64>,
    time_us: Option<i64>,
    stack: Option<u32>,
    meta: Meta,
    device_free: Option<u64>,
}

#[derive(Default)]
pub(crate) struct FrameAcc {
    filename: Option<u32>,
    line: i64,
    name: Option<u32>,
}

struct FrameRec {
    filename: Option<u32>,
    line: i64,
    name: Option<u32>,
    python: bool,
    user: bool,
}

/// A stack as kept: its innermost user frame and its innermost Python frames.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct StackRec {
    user: Option<u32>,
    top: [u32; STACK_TOP_FRAMES],
    n: u8,
}

enum Folded {
    Blocks(Box<BlockStats>),
    Block(BlockAcc),
}

#[derive(Default)]
struct PoolAcc {
    segments: u64,
    expandable: u64,
    reserved: u64,
    allocated: u64,
    active: u64,
    inactive: u64,
    inactive_split: u64,
    largest_inactive: u64,
}

#[derive(Default)]
struct DeviceAcc {
    seen_segments: bool,
    totals: PoolAcc,
    requested: u64,
    pools: BTreeMap<(Option<[i64; 2]>, u8), PoolAcc>,
    top_blocks: Vec<BlockTop>,
    /// The largest segments, at most `SEGMENTS_KEPT` once sorted.
    largest_segments: Vec<SegmentInfo>,
    replay: Option<Box<Replay>>,
}

/// The summary being built while the pickle streams by.
#[derive(Default)]
pub(crate) struct Folder {
    options: SummaryOptions,
    words: Vec<Word>,
    package_suffixes: Vec<String>,
    frames: Vec<FrameRec>,
    frame_ids: FxHashMap<(Option<u32>, i64, Option<u32>), u32>,
    stacks: Vec<StackRec>,
    stack_ids: FxHashMap<StackRec, u32>,
    markers: Vec<(u64, String)>,
    marker_of_string: FxHashMap<u32, Option<u32>>,
    marker_of_text: FxHashMap<(u64, String), u32>,
    folded: Option<(u32, Folded)>,
    folded_seq: u32,
    devices: BTreeMap<i64, DeviceAcc>,
    /// Phases opened and allocations tracked alive, all devices together.
    phases_in_all: usize,
    alive_in_all: usize,
    /// Whether each filename string is Python's and the user's (see `classify`).
    file_kinds: FxHashMap<u32, (bool, bool)>,
    /// The phase bound that held the last unmarked entry, and each bound's marker.
    last_bound: usize,
    bound_markers: Vec<Option<Option<u32>>>,
    ends_before: Vec<i64>,
    settings: Option<BTreeMap<String, serde_json::Value>>,
    root: Option<Kind>,
    saw_segments: bool,
    saw_traces: bool,
    /// Items of the segment list that are not segment dictionaries (`[1, 2, 3]`).
    stray_segments: u64,
    annotations: Vec<Annotation>,
    counts: BTreeMap<&'static str, u64>,
}

impl Folder {
    pub(crate) fn new(options: SummaryOptions) -> Self {
        let package_suffixes = crate::python_side::FILES
            .iter()
            .map(|(path, _)| format!("/{path}"))
            .collect();
        Folder {
            options,
            package_suffixes,
            ..Folder::default()
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_insert(0) += 1;
    }

    fn word(&mut self, value: &Value, strings: &Strings) -> Word {
        match value {
            Value::Str(id) => {
                let i = *id as usize;
                if let Some(&w) = self.words.get(i).filter(|w| **w != Word::Unseen) {
                    return w;
                }
                if i >= self.words.len() {
                    self.words.resize(strings.len().max(i + 1), Word::Unseen);
                }
                let w = word_of(strings.get(*id));
                self.words[i] = w;
                w
            }
            Value::Text(t) => word_of(t),
            _ => Word::Other,
        }
    }

    fn key_word(&mut self, key: Option<&Value>, strings: &Strings) -> Word {
        key.map_or(Word::Other, |k| self.word(k, strings))
    }

    fn device_mut(&mut self, device: i64) -> Option<&mut DeviceAcc> {
        if self.devices.len() >= MAX_DEVICES && !self.devices.contains_key(&device) {
            self.count("devices beyond the 1,024th were ignored");
            return None;
        }
        Some(self.devices.entry(device).or_default())
    }

    fn fold_out(&mut self, folded: Folded) -> Value {
        self.folded_seq = self.folded_seq.wrapping_add(1);
        self.folded = Some((self.folded_seq, folded));
        Value::Folded(self.folded_seq)
    }

    fn take_folded(&mut self, value: &Value) -> Option<Folded> {
        match (value, self.folded.take()) {
            (Value::Folded(id), Some((seq, folded))) if *id == seq => Some(folded),
            (_, other) => {
                self.folded = other;
                None
            }
        }
    }

    fn classify(&self, filename: &str) -> (bool, bool) {
        let python = filename.ends_with(".py") || filename.starts_with('<');
        let torch = filename.contains("/torch/")
            || filename.starts_with("torch/")
            || filename.contains("torchinductor_")
            || filename.starts_with("<eval_with_key");
        // iteragpu's machinery (recorder, worker, history) is not the workload; its built-in
        // workloads are: their lines are what allocated.
        let builtin_workload = filename.contains("iteragpu/workloads/");
        let package = !builtin_workload
            && (filename.contains("/iteragpu-python-")
                || self
                    .package_suffixes
                    .iter()
                    .any(|suffix| filename.ends_with(suffix.as_str()) || filename == &suffix[1..]));
        let stdlib = filename.starts_with("<frozen")
            || (filename.contains("/lib/python3")
                && !filename.contains("site-packages/")
                && !filename.contains("dist-packages/"));
        (python, python && !torch && !package && !stdlib)
    }

    fn intern_frame(&mut self, acc: FrameAcc, strings: &Strings) -> Value {
        let key = (acc.filename, acc.line, acc.name);
        if let Some(&id) = self.frame_ids.get(&key) {
            return Value::Frame(id);
        }
        if self.frames.len() >= MAX_FRAMES {
            self.count("distinct frames beyond the bound were not kept");
            return Value::Skipped;
        }
        let (python, user) = match acc.filename {
            // Once per distinct filename: a long one shared by many frames is scanned once.
            Some(f) => match self.file_kinds.get(&f) {
                Some(&kinds) => kinds,
                None => {
                    let kinds = self.classify(strings.get(f));
                    self.file_kinds.insert(f, kinds);
                    kinds
                }
            },
            None => (false, false),
        };
        let id = self.frames.len() as u32;
        self.frames.push(FrameRec {
            filename: acc.filename,
            line: acc.line,
            name: acc.name,
            python,
            user,
        });
        self.frame_ids.insert(key, id);
        Value::Frame(id)
    }

    fn intern_stack(&mut self, rec: StackRec) -> Value {
        if let Some(&id) = self.stack_ids.get(&rec) {
            return Value::Stack(id);
        }
        if self.stacks.len() >= MAX_STACKS {
            self.count("distinct stacks beyond the bound were not kept");
            return Value::Skipped;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(rec);
        self.stack_ids.insert(rec, id);
        Value::Stack(id)
    }

    fn marker(&mut self, value: &Value, strings: &Strings) -> Meta {
        let parse = |text: &str| -> Option<(u64, String)> {
            let rest = text.strip_prefix(PHASE_MARKER_PREFIX)?;
            let (index, name) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((index.parse().ok()?, cut(name).into_owned()))
        };
        match value {
            Value::Str(id) => {
                if let Some(known) = self.marker_of_string.get(id) {
                    return known.map_or(Meta::Unmarked, Meta::Marker);
                }
                let found = parse(strings.get(*id)).and_then(|m| self.marker_id(m));
                self.marker_of_string.insert(*id, found);
                found.map_or(Meta::Unmarked, Meta::Marker)
            }
            Value::Text(text) => parse(text)
                .and_then(|m| self.marker_id(m))
                .map_or(Meta::Unmarked, Meta::Marker),
            _ => Meta::Unmarked,
        }
    }

    /// The phase whose wall-clock bounds hold `time` (an unmarked entry of another thread).
    fn phase_at(&mut self, time: Option<i64>) -> Option<u32> {
        let time = time?;
        let bounds = &self.options.phase_bounds;
        if self.bound_markers.len() < bounds.len() {
            self.bound_markers.resize(bounds.len(), None);
            // The latest end among the bounds before each one.
            let mut latest = i64::MIN;
            self.ends_before = bounds
                .iter()
                .map(|b| {
                    let before = latest;
                    latest = latest.max(b.end_us);
                    before
                })
                .collect();
        }
        let holds = |i: usize| bounds[i].start_us <= time && time <= bounds[i].end_us;
        // Entries come in time order: the bound of the previous entry holds this one too, and
        // is the first that does when every bound before it has ended.
        let last = self.last_bound;
        let found = if last < bounds.len() && holds(last) && self.ends_before[last] < time {
            last
        } else {
            (0..bounds.len()).find(|&i| holds(i))?
        };
        self.last_bound = found;
        if let Some(known) = self.bound_markers[found] {
            return known;
        }
        let bound = &self.options.phase_bounds[found];
        let marker = (bound.index, cut(&bound.name).into_owned());
        let id = self.marker_id(marker);
        self.bound_markers[found] = Some(id);
        id
    }

    fn marker_id(&mut self, marker: (u64, String)) -> Option<u32> {
        if let Some(&id) = self.marker_of_text.get(&marker) {
            return Some(id);
        }
        if self.markers.len() >= MAX_MARKERS {
            self.count("phase markers beyond the 100,000th were read as unmarked");
            return None;
        }
        let id = self.markers.len() as u32;
        self.markers.push(marker.clone());
        self.marker_of_text.insert(marker, id);
        Some(id)
    }

    fn fold_segment(&mut self, s: SegmentAcc) {
        let device = s.device.unwrap_or(0);
        let Some(dev) = self.device_mut(device) else {
            return;
        };
        dev.seen_segments = true;
        let total = s.total_size.unwrap_or(0);
        let (allocated, active, requested, inactive, largest, blocks, top) = match &s.blocks {
            Some(b) => (
                b.allocated,
                b.allocated.saturating_add(b.pending),
                b.requested,
                b.inactive,
                b.largest_inactive,
                b.count,
                b.top.clone(),
            ),
            None => {
                let allocated = s.allocated_size.unwrap_or(0);
                let active = s.active_size.unwrap_or(allocated);
                let inactive = total.saturating_sub(active);
                let largest = if active == 0 { total } else { 0 };
                let requested = s.requested_size.unwrap_or(0);
                (
                    allocated,
                    active,
                    requested,
                    inactive,
                    largest,
                    0,
                    Vec::new(),
                )
            }
        };
        let split = if blocks >= 2 { inactive } else { 0 };
        let info = SegmentInfo {
            address: s.address,
            total_size_bytes: total,
            allocated_size_bytes: s.allocated_size,
            active_size_bytes: s.active_size,
            requested_size_bytes: s.requested_size,
            segment_type: segment_type_word(s.segment_type).to_string(),
            pool_id: s.pool,
            is_expandable: s.expandable,
            blocks,
            free_blocks: s.blocks.as_ref().map_or(0, |b| b.inactive_count),
            free_bytes: inactive,
            largest_free_block_bytes: largest,
        };
        let key = (s.pool, s.segment_type);
        let pool_kept = dev.pools.len() < MAX_POOLS || dev.pools.contains_key(&key);
        let pools = [
            Some(&mut dev.totals),
            pool_kept.then(|| dev.pools.entry(key).or_default()),
        ];
        for pool in pools.into_iter().flatten() {
            pool.segments += 1;
            pool.expandable += u64::from(s.expandable);
            pool.reserved = pool.reserved.saturating_add(total);
            pool.allocated = pool.allocated.saturating_add(allocated);
            pool.active = pool.active.saturating_add(active);
            pool.inactive = pool.inactive.saturating_add(inactive);
            pool.inactive_split = pool.inactive_split.saturating_add(split);
            pool.largest_inactive = pool.largest_inactive.max(largest);
        }
        dev.requested = dev.requested.saturating_add(requested);
        dev.top_blocks.extend(top);
        keep_largest(&mut dev.top_blocks);
        dev.largest_segments.push(info);
        if dev.largest_segments.len() > 4 * SEGMENTS_KEPT {
            keep_largest_segments(&mut dev.largest_segments);
        }
        if !pool_kept {
            self.count("segments of pools beyond the 256th of their device were counted in the device's totals only");
        }
    }

    fn fold_annotation(&mut self, a: AnnotationAcc) {
        let (Some(stage), Some(name)) = (a.stage, a.name) else {
            self.count("external annotations without a stage or a name were ignored");
            return;
        };
        if self.annotations.len() >= MAX_ANNOTATIONS {
            self.count("external annotations beyond the 20,000th were not kept");
            return;
        }
        self.annotations.push(Annotation {
            device: a.device.unwrap_or(0),
            stage,
            name,
            time_us: a.time_us,
        });
    }

    fn fold_entry(&mut self, device: u32, entry: EntryAcc) {
        let key = match entry.meta {
            Meta::Marker(m) => 2 + m,
            _ => self.phase_at(entry.time_us).map_or(u32::MAX, |m| 2 + m),
        };
        if entry.size.is_none() && entry.action != Word::Oom && entry.action != Word::Snapshot {
            self.count("trace entries without a size were counted but not replayed");
        }
        if entry.action == Word::Other && entry.other_action.is_none() {
            self.count("trace entries without an action were counted but not replayed");
        }
        let (phases_in_all, alive_in_all) = (self.phases_in_all, self.alive_in_all);
        let Some(dev) = self.device_mut(i64::from(device)) else {
            return;
        };
        let replay = dev
            .replay
            .get_or_insert_with(|| Box::new(Replay::default()));
        // The bounds hold for all devices together.
        let phases_before = replay.phases.len();
        let others_alive = alive_in_all.saturating_sub(replay.tracked());
        let room = Room {
            phases: MAX_PHASES_IN_ALL.saturating_sub(phases_in_all),
            alive: MAX_ALIVE.saturating_sub(others_alive),
        };
        let opened = replay.apply(&entry, key, room);
        let phases_in_all = phases_in_all + (replay.phases.len() - phases_before);
        let alive_in_all = others_alive + replay.tracked();
        self.phases_in_all = phases_in_all;
        self.alive_in_all = alive_in_all;
        if !opened {
            self.count("phases beyond the bound (10,000 per device, 20,000 in all) were merged into the one before");
        }
    }
}

fn keep_largest(tops: &mut Vec<BlockTop>) {
    if tops.len() > LARGEST_KEPT {
        tops.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
        tops.truncate(LARGEST_KEPT);
    } else {
        tops.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    }
}

/// Largest first, then by address: the same order whatever the file's order.
pub(super) fn keep_largest_segments(segments: &mut Vec<SegmentInfo>) {
    segments.sort_by(|a, b| {
        b.total_size_bytes
            .cmp(&a.total_size_bytes)
            .then(a.address.cmp(&b.address))
    });
    segments.truncate(SEGMENTS_KEPT);
}

/// The word of a segment's `segment_type` as kept (1 small, 2 large).
pub(super) fn segment_type_word(kind: u8) -> &'static str {
    match kind {
        1 => "small",
        2 => "large",
        _ => "unknown",
    }
}

fn pool_id(value: &Value) -> Option<[i64; 2]> {
    match value {
        Value::Tuple(items) if items.len() == 2 => Some([items[0].as_i64()?, items[1].as_i64()?]),
        Value::List(items) if items.len() == 2 => Some([items[0].as_i64()?, items[1].as_i64()?]),
        _ => None,
    }
}

/// A generic value as JSON: at most `budget` values in all (then `null`), every string cut to
/// `MAX_STRING_CHARS`. A container fetched many times from the memo is converted each time it
/// appears, so the budget, not the file's length, bounds the result.
fn to_json(value: &Value, strings: &Strings, budget: &mut usize) -> serde_json::Value {
    use serde_json::Value as J;
    if *budget == 0 {
        return J::Null;
    }
    *budget -= 1;
    let items = |list: &[Value], budget: &mut usize| -> J {
        let mut array = Vec::new();
        for v in list {
            if *budget == 0 {
                break;
            }
            array.push(to_json(v, strings, budget));
        }
        J::Array(array)
    };
    match value {
        Value::None => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::UInt(u) => J::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Str(_) | Value::Text(_) => J::String(cut(strings.text(value).unwrap_or("")).into()),
        Value::Tuple(list) | Value::List(list) => items(list, budget),
        Value::Dict(pairs) => {
            let mut map = serde_json::Map::new();
            for (k, v) in pairs.iter() {
                if *budget == 0 {
                    break;
                }
                *budget -= 1;
                let key = json_key(k, strings, budget);
                let value = to_json(v, strings, budget);
                map.insert(key, value);
            }
            J::Object(map)
        }
        _ => J::Null,
    }
}

fn json_key(key: &Value, strings: &Strings, budget: &mut usize) -> String {
    match strings.text(key) {
        Some(t) => cut(t).into_owned(),
        None => match to_json(key, strings, budget) {
            serde_json::Value::String(s) => s,
            other => cut(&other.to_string()).into_owned(),
        },
    }
}

impl Schema for Folder {
    type Ctx = Ctx;
    type Acc = Acc;

    fn open(
        &mut self,
        parent: Option<Ctx>,
        place: Place<'_>,
        kind: Kind,
        strings: &Strings,
    ) -> Role<Ctx> {
        let key = match place {
            Place::Key(k) => self.word(k, strings),
            _ => Word::Other,
        };
        match (parent, kind) {
            (None, _) => {
                self.root = Some(kind);
                match kind {
                    Kind::Dict => Role::Stream(Ctx::Root),
                    Kind::List => {
                        self.saw_segments = true;
                        Role::Stream(Ctx::Segments)
                    }
                }
            }
            (Some(Ctx::Root), Kind::List) if key == Word::Segments => Role::Stream(Ctx::Segments),
            (Some(Ctx::Root), Kind::List) if key == Word::DeviceTraces => Role::Stream(Ctx::Traces),
            (Some(Ctx::Root), Kind::Dict) if key == Word::AllocatorSettings => Role::Build,
            (Some(Ctx::Root), Kind::List) if key == Word::ExternalAnnotations => {
                Role::Stream(Ctx::Annotations)
            }
            (Some(Ctx::Annotations), Kind::Dict) => Role::Stream(Ctx::Annotation),
            (Some(Ctx::Segments), Kind::Dict) => Role::Stream(Ctx::Segment),
            (Some(Ctx::Segment), Kind::List) if key == Word::Blocks => Role::Stream(Ctx::Blocks),
            (Some(Ctx::Blocks), Kind::Dict) => Role::Stream(Ctx::Block),
            (Some(Ctx::Traces), Kind::List) => match place {
                Place::Index(i) if (i as usize) < MAX_DEVICES => Role::Stream(Ctx::Trace(i as u32)),
                _ => {
                    self.count("device traces beyond the 1,024th were ignored");
                    Role::Skip
                }
            },
            (Some(Ctx::Trace(d)), Kind::Dict) => Role::Stream(Ctx::Entry(d)),
            (Some(Ctx::Segment | Ctx::Block | Ctx::Entry(_)), Kind::List)
                if key == Word::Frames =>
            {
                Role::Stream(Ctx::Frames)
            }
            (Some(Ctx::Frames), Kind::Dict) => Role::Stream(Ctx::Frame),
            (Some(Ctx::Segments), Kind::List) => {
                self.stray_segments += 1;
                Role::Skip
            }
            _ => Role::Skip,
        }
    }

    fn accepts(&self, parent: Ctx, kind: Kind) -> bool {
        matches!(
            (parent, kind),
            (
                Ctx::Segments | Ctx::Blocks | Ctx::Trace(_) | Ctx::Frames | Ctx::Annotations,
                Kind::Dict
            ) | (Ctx::Traces, Kind::List)
        )
    }

    fn acc(&mut self, ctx: Ctx) -> Acc {
        match ctx {
            Ctx::Segment => Acc::Segment(Box::default()),
            Ctx::Blocks => Acc::Blocks(Box::default()),
            Ctx::Block => Acc::Block(BlockAcc::default()),
            Ctx::Entry(_) => Acc::Entry(EntryAcc::default()),
            Ctx::Frames => Acc::Frames(StackRec::default()),
            Ctx::Frame => Acc::Frame(FrameAcc::default()),
            Ctx::Annotation => Acc::Annotation(AnnotationAcc::default()),
            Ctx::Root | Ctx::Segments | Ctx::Traces | Ctx::Trace(_) | Ctx::Annotations => Acc::None,
        }
    }

    fn item(
        &mut self,
        ctx: Ctx,
        acc: &mut Acc,
        key: Option<&Value>,
        value: &Value,
        strings: &Strings,
    ) {
        match (ctx, acc) {
            (Ctx::Segments, _) => self.stray_segments += 1,
            (Ctx::Root, _) => match self.key_word(key, strings) {
                // The first one only (PyTorch writes one): a file that sets it again and again
                // would convert it again and again.
                Word::AllocatorSettings if self.settings.is_none() => {
                    if let Value::Dict(_) = value {
                        let mut budget = MAX_SETTINGS_VALUES;
                        let json = to_json(value, strings, &mut budget);
                        if budget == 0 {
                            self.count("allocator settings were cut to their first 10,000 values");
                        }
                        if let serde_json::Value::Object(map) = json {
                            self.settings = Some(map.into_iter().collect());
                        }
                    }
                }
                Word::Segments => self.saw_segments = true,
                Word::DeviceTraces => self.saw_traces = true,
                _ => {}
            },
            (Ctx::Segment, Acc::Segment(s)) => match self.key_word(key, strings) {
                Word::Device => s.device = value.as_i64(),
                Word::Address => s.address = value.as_u64(),
                Word::TotalSize => s.total_size = value.as_u64(),
                Word::AllocatedSize => s.allocated_size = value.as_u64(),
                Word::ActiveSize => s.active_size = value.as_u64(),
                Word::RequestedSize => s.requested_size = value.as_u64(),
                Word::SegmentType => {
                    s.segment_type = match self.word(value, strings) {
                        Word::Small => 1,
                        Word::Large => 2,
                        _ => 0,
                    }
                }
                Word::SegmentPoolId => s.pool = pool_id(value),
                Word::IsExpandable => s.expandable = value.as_bool().unwrap_or(false),
                Word::Blocks => {
                    if let Some(Folded::Blocks(b)) = self.take_folded(value) {
                        s.blocks = Some(b);
                    }
                }
                _ => {}
            },
            (Ctx::Blocks, Acc::Blocks(stats)) => {
                if let Some(Folded::Block(b)) = self.take_folded(value) {
                    let size = b.size.unwrap_or(0);
                    stats.count += 1;
                    match b.state {
                        Word::ActiveAllocated => {
                            stats.allocated = stats.allocated.saturating_add(size);
                            stats.requested =
                                stats.requested.saturating_add(b.requested.unwrap_or(size));
                            stats.top.push(BlockTop {
                                size,
                                address: b.address.unwrap_or(0),
                                stack: b.stack,
                            });
                            if stats.top.len() > 4 * LARGEST_KEPT {
                                keep_largest(&mut stats.top);
                            }
                        }
                        Word::ActivePendingFree => {
                            stats.pending = stats.pending.saturating_add(size);
                        }
                        _ => {
                            stats.inactive = stats.inactive.saturating_add(size);
                            stats.inactive_count += 1;
                            stats.largest_inactive = stats.largest_inactive.max(size);
                        }
                    }
                }
            }
            (Ctx::Block, Acc::Block(b)) => match self.key_word(key, strings) {
                Word::Size => b.size = value.as_u64(),
                Word::RequestedSize => b.requested = value.as_u64(),
                Word::Address => b.address = value.as_u64(),
                Word::State => b.state = self.word(value, strings),
                Word::Frames => {
                    if let Value::Stack(id) = *value {
                        b.stack = Some(id);
                    }
                }
                _ => {}
            },
            (Ctx::Entry(_), Acc::Entry(e)) => match self.key_word(key, strings) {
                Word::Action => {
                    e.action = self.word(value, strings);
                    if e.action == Word::Other || !ACTIONS.contains(&e.action) {
                        e.action = Word::Other;
                        e.other_action = strings.text(value).map(|t| cut(t).into());
                    }
                }
                Word::Addr => e.addr = value.as_u64(),
                Word::Size => e.size = value.as_u64(),
                Word::TimeUs => e.time_us = value.as_i64(),
                Word::DeviceFree => e.device_free = value.as_u64(),
                Word::UserMetadata => e.meta = self.marker(value, strings),
                Word::Frames => {
                    if let Value::Stack(id) = *value {
                        e.stack = Some(id);
                    }
                }
                _ => {}
            },
            (Ctx::Frames, Acc::Frames(rec)) => {
                if let Some((id, frame)) = match value {
                    Value::Frame(id) => self.frames.get(*id as usize).map(|f| (*id, f)),
                    _ => None,
                } {
                    {
                        if frame.python && usize::from(rec.n) < STACK_TOP_FRAMES {
                            rec.top[usize::from(rec.n)] = id;
                            rec.n += 1;
                        }
                        if rec.user.is_none() && frame.user {
                            rec.user = Some(id);
                        }
                    }
                }
            }
            (Ctx::Annotation, Acc::Annotation(a)) => match self.key_word(key, strings) {
                Word::Device => a.device = value.as_i64(),
                Word::Stage => a.stage = strings.text(value).map(|t| cut(t).into_owned()),
                Word::Name => a.name = strings.text(value).map(|t| cut(t).into_owned()),
                Word::TimeUs => a.time_us = value.as_i64(),
                _ => {}
            },
            (Ctx::Frame, Acc::Frame(f)) => match self.key_word(key, strings) {
                Word::Filename => {
                    if let Value::Str(id) = *value {
                        f.filename = Some(id);
                    }
                }
                Word::Name => {
                    if let Value::Str(id) = *value {
                        f.name = Some(id);
                    }
                }
                Word::Line => f.line = value.as_i64().unwrap_or(0),
                _ => {}
            },
            _ => {}
        }
    }

    fn close(&mut self, ctx: Ctx, acc: Acc, strings: &Strings) -> Value {
        match (ctx, acc) {
            (Ctx::Segment, Acc::Segment(s)) => {
                self.fold_segment(*s);
                Value::Skipped
            }
            (Ctx::Blocks, Acc::Blocks(b)) => self.fold_out(Folded::Blocks(b)),
            (Ctx::Block, Acc::Block(b)) => self.fold_out(Folded::Block(b)),
            (Ctx::Entry(d), Acc::Entry(e)) => {
                self.fold_entry(d, e);
                Value::Skipped
            }
            (Ctx::Frames, Acc::Frames(rec)) => self.intern_stack(rec),
            (Ctx::Frame, Acc::Frame(f)) => self.intern_frame(f, strings),
            (Ctx::Annotation, Acc::Annotation(a)) => {
                self.fold_annotation(a);
                Value::Skipped
            }
            _ => Value::Skipped,
        }
    }
}

#[cfg(test)]
mod workload_frames {
    /// The rule agrees with the table of the workload's frames.
    #[test]
    fn the_workloads_frames_are_those_of_the_shared_table() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/workload_frames.json"))
                .unwrap();
        let folder = super::Folder::new(Default::default());
        for row in table["frames"].as_array().unwrap() {
            let filename = row[0].as_str().unwrap();
            let expected = row[1].as_bool().unwrap();
            assert_eq!(folder.classify(filename).1, expected, "{filename}");
        }
    }
}
