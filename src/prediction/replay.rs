//! A prediction's storage events replayed through the caching-allocator model: per phase, the
//! peaks of allocated and reserved memory, the levels at its start and end, and — in a second
//! pass over the same events — what was alive at the peak, by category (the last role each storage
//! showed), module and tensor. Within a capacity (the simulated card), the first request the
//! allocator cannot serve even after releasing its cached segments stops the replay there: an
//! out-of-memory, its phases `out_of_memory`, the phases after it `not_reached`.

use std::collections::{BTreeMap, HashMap};

use crate::estimate::allocator::{Allocation, Backend, CachingAllocator, rounded};
use crate::schema::prediction::{AtPeak, ModuleBytes, PhaseStatus, PredictedPhase, TensorAtPeak};
use crate::schema::trace::{Alloc, Category, Unpredictable};

/// One event of the trace, in the order the worker sent it.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceEvent {
    PhaseStart {
        name: String,
        index: u64,
        /// The enclosing open phase's index as the worker said it (else the innermost open one).
        parent: Option<u64>,
        automatic: bool,
        inputs: serde_json::Map<String, serde_json::Value>,
    },
    /// Closes the open phase `index` (and, first, any phase still open inside it, as failed).
    PhaseEnd {
        index: u64,
        failed: bool,
        inputs: serde_json::Map<String, serde_json::Value>,
    },
    Alloc(Box<Alloc>),
    Free(u64),
    Tag(u64, Category),
    Unpredictable(Unpredictable),
    /// The script's `torch.cuda.empty_cache()`: cached segments released.
    EmptyCache,
    /// The script's `torch.cuda.reset_peak_memory_stats()`: the peaks it reads restart (the
    /// phases keep their own).
    ResetPeaks,
    /// The script's `torch.cuda.reset_accumulated_memory_stats()`.
    ResetAccumulated,
}

struct Live {
    /// The storage holds a block (an empty storage holds none).
    held: bool,
    alloc: Box<Alloc>,
}

/// The device side of a replay: the caching-allocator model and the block each live storage
/// holds, stepped one trace event at a time. The replay's two passes and the answers to the
/// script's own `torch.cuda.memory_*` calls (`prediction::answers`) each step one of these over
/// the same events, so they all read one model.
pub struct Device {
    pub allocator: CachingAllocator,
    blocks: HashMap<u64, Allocation>,
    capacity: Option<u64>,
}

/// What one event did to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// A storage got a block.
    Allocated,
    /// The capacity refused a storage, after releasing this many cached bytes: PyTorch raises
    /// its out-of-memory error there.
    Refused { released: u64 },
    /// Nothing was allocated (a free, an empty storage, a tag, a phase boundary…).
    Other,
}

impl Device {
    /// A device of `backend` whose allocator may reserve at most `capacity` bytes.
    pub fn new(backend: Backend, capacity: Option<u64>) -> Self {
        Device {
            allocator: CachingAllocator::with_backend(backend),
            blocks: HashMap::new(),
            capacity,
        }
    }

    /// Applies one event. A refused storage gets no block (a script that goes on past a
    /// predicted out-of-memory is not the card's run: the replay stops there).
    pub fn step(&mut self, event: &TraceEvent) -> Stepped {
        let a = &mut self.allocator;
        match event {
            TraceEvent::Alloc(alloc) if alloc.bytes > 0 && !alloc.managed => {
                match malloc_within(a, alloc.bytes, self.capacity) {
                    Ok(block) => {
                        self.blocks.insert(alloc.id, block);
                        Stepped::Allocated
                    }
                    Err(released) => Stepped::Refused { released },
                }
            }
            TraceEvent::Free(id) => {
                if let Some(block) = self.blocks.remove(id) {
                    a.free(block);
                }
                Stepped::Other
            }
            TraceEvent::EmptyCache => {
                a.empty_cache();
                Stepped::Other
            }
            TraceEvent::ResetPeaks => {
                a.reset_peaks();
                Stepped::Other
            }
            TraceEvent::ResetAccumulated => {
                a.reset_accumulated();
                Stepped::Other
            }
            _ => Stepped::Other,
        }
    }
}

/// A phase open at some point of the replay, with its own peaks (phases nest, so the
/// allocator's single peak counters cannot serve them all).
struct Open {
    name: String,
    index: u64,
    parent: Option<u64>,
    automatic: bool,
    inputs: serde_json::Map<String, serde_json::Value>,
    start_allocated: u64,
    start_reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    peak_tensor: u64,
    /// The highest unified memory outside the allocator (`Alloc::managed`) live in the phase.
    peak_managed: u64,
    /// Event index at which the phase started, and at which its allocated peak was reached.
    start_at: usize,
    peak_at: Option<usize>,
    unpredictable: Vec<Unpredictable>,
    tainted: bool,
    /// Its taint may come from an op with no bound (a guessed output), not only from a
    /// data-dependent size taken at a bound: unpredictable rather than bounded.
    taint_unbounded: bool,
}

/// How a phase was closed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closed {
    Ended {
        failed: bool,
    },
    /// Its enclosing phase ended first (the worker closed the outer one).
    OuterEnded,
    /// The events stopped with it open (the worker died, was stopped, or timed out in it).
    NeverEnded,
    /// Open when the simulated card ran out of memory.
    OutOfMemory,
}

/// A request the simulated card could not serve, and the allocator's state when PyTorch would
/// have raised.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    /// The storage asked for (its category the last role it showed).
    pub alloc: Alloc,
    /// The innermost open phase's name and index.
    pub phase: Option<(String, u64)>,
    /// What serving it would have added to the reserved memory.
    pub growth: u64,
    /// Cached segments released before giving up.
    pub released: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// What was alive then.
    pub alive: AtPeak,
    /// A data-dependent storage was alive, or the request itself is one's upper bound.
    pub tainted: bool,
}

/// `malloc` on a card whose allocator may reserve at most `capacity` bytes: a request that does
/// not fit first makes the allocator release its cached segments (PyTorch's
/// `release_cached_blocks` before it raises; modelled as releasing them all), then is served
/// (a retry, `num_alloc_retries`) or refused with the bytes released (`num_ooms`).
fn malloc_within(
    a: &mut CachingAllocator,
    size: u64,
    capacity: Option<u64>,
) -> Result<Allocation, u64> {
    if let Some(cap) = capacity
        && a.reserved.saturating_add(a.growth(size)) > cap
    {
        let before = a.reserved;
        a.empty_cache();
        if a.reserved.saturating_add(a.growth(size)) > cap {
            a.stats.num_ooms += 1;
            return Err(before - a.reserved);
        }
        a.stats.num_alloc_retries += 1;
    }
    Ok(a.malloc(size))
}

/// The phases a replay found, ordered by index, and what it has to say about them.
pub struct Replayed {
    pub phases: Vec<PredictedPhase>,
    /// Phases that did not end where they should have.
    pub notes: Vec<String>,
    /// The request the capacity refused, if any.
    pub refused: Option<Refused>,
    /// How many events were replayed when a stop request ended the replay early
    /// ([`replay_until`]); `None` when every event was.
    pub cut: Option<usize>,
}

/// How many events a replay takes between two looks at its stop request (about a millisecond).
pub const STOP_EVERY: usize = 16_384;

/// The allocator backend a target names (`native`, `expandable_segments`, `cudaMallocAsync`).
pub fn backend(name: &str) -> Backend {
    match name {
        "expandable_segments" => Backend::ExpandableSegments,
        "cudaMallocAsync" => Backend::MallocAsync,
        _ => Backend::Native,
    }
}

/// Replays `events`; `context_bytes` is added to the peak reserved for the driver's view.
/// Phases nest: each keeps its own peaks over its whole span (an outer phase's peak covers its
/// inner ones). A phase still open at the end of the events is closed there, `failed` (or
/// `unpredictable`), with the figures reached so far.
pub fn replay(events: &[TraceEvent], context_bytes: u64, backend: Backend) -> Replayed {
    replay_within(events, context_bytes, backend, None)
}

/// [`replay`] on a card whose allocator may reserve at most `capacity` bytes (`None`:
/// unlimited). Under the capacity nothing changes; the first request it refuses ends the replay:
/// the phases open then are `out_of_memory` with the figures reached before it, every phase that
/// starts later is `not_reached` without figures.
pub fn replay_within(
    events: &[TraceEvent],
    context_bytes: u64,
    backend: Backend,
    capacity: Option<u64>,
) -> Replayed {
    replay_until(events, context_bytes, backend, capacity, &|| false)
}

/// [`replay_within`] that asks `stop` every [`STOP_EVERY`] events, so that a long replay answers
/// Ctrl-C and SIGTERM at once: when `stop` says so, the events replayed so far are judged as if
/// the run had ended there (phases still open did not end), and `Replayed::cut` says how many.
pub fn replay_until(
    events: &[TraceEvent],
    context_bytes: u64,
    backend: Backend,
    capacity: Option<u64>,
    stop: &dyn Fn() -> bool,
) -> Replayed {
    let mut cut = None;
    let mut device = Device::new(backend, capacity);
    let mut refused: Option<(usize, Refused)> = None;
    let mut live: HashMap<u64, Live> = HashMap::new();
    let mut tainted_live = 0usize;
    // An op with no bound (`Unpredictable::bound` absent) was met: a taint from then on may be
    // its guess.
    let mut unbounded_seen = false;
    // An op taken at a bound was met: a taint is that bound's only when no op without one was.
    let mut bounded_seen = false;
    // Live tensor bytes (rounded to 512, workspaces left out).
    let mut tensors = 0u64;
    // Live unified memory outside the allocator (`Alloc::managed`).
    let mut managed = 0u64;
    // The open phases, the innermost last.
    let mut open: Vec<Open> = Vec::new();
    let mut phases: Vec<(PredictedPhase, Option<usize>)> = Vec::new();
    let mut notes = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if i > 0 && i % STOP_EVERY == 0 && stop() {
            cut = Some(i);
            break;
        }
        let stepped = device.step(event);
        let a = &device.allocator;
        // Within one event the levels end at their highest: an allocation only raises them (a
        // release before a retry ends below the level already counted), a free only lowers them.
        let mut allocated_here = false;
        match event {
            TraceEvent::PhaseStart {
                name,
                index,
                parent,
                automatic,
                inputs,
            } => {
                open.push(Open {
                    name: name.clone(),
                    index: *index,
                    parent: parent.or_else(|| open.last().map(|o| o.index)),
                    automatic: *automatic,
                    inputs: inputs.clone(),
                    start_allocated: a.allocated,
                    start_reserved: a.reserved,
                    peak_allocated: a.allocated,
                    peak_reserved: a.reserved,
                    peak_tensor: tensors,
                    peak_managed: managed,
                    start_at: i,
                    peak_at: None,
                    unpredictable: Vec::new(),
                    tainted: tainted_live > 0,
                    taint_unbounded: tainted_live > 0 && (unbounded_seen || !bounded_seen),
                });
            }
            TraceEvent::Alloc(alloc) => {
                if let Stepped::Refused { released } = stepped {
                    let roles = roles(events);
                    let mut asked = (**alloc).clone();
                    if let Some(category) = roles.get(&asked.id) {
                        asked.category = *category;
                    }
                    refused = Some((
                        i,
                        Refused {
                            phase: open.last().map(|o| (o.name.clone(), o.index)),
                            growth: a.growth(alloc.bytes),
                            released,
                            allocated: a.allocated,
                            reserved: a.reserved,
                            alive: at_peak(&with_roles(&live, &roles), a.allocated),
                            tainted: alloc.tainted || tainted_live > 0,
                            alloc: asked,
                        },
                    ));
                    break;
                }
                allocated_here = stepped == Stepped::Allocated;
                if alloc.tainted {
                    tainted_live += 1;
                    for o in &mut open {
                        o.tainted = true;
                        o.taint_unbounded |= unbounded_seen || !bounded_seen;
                    }
                }
                if alloc.managed {
                    managed += alloc.bytes;
                } else if alloc.category != Category::Workspace && alloc.bytes > 0 {
                    tensors += rounded(alloc.bytes);
                }
                live.insert(
                    alloc.id,
                    Live {
                        held: allocated_here,
                        alloc: alloc.clone(),
                    },
                );
            }
            TraceEvent::Free(id) => {
                if let Some(l) = live.remove(id) {
                    if l.alloc.managed {
                        managed -= l.alloc.bytes;
                    }
                    if l.held && l.alloc.category != Category::Workspace {
                        tensors -= rounded(l.alloc.bytes);
                    }
                    if l.alloc.tainted {
                        tainted_live -= 1;
                    }
                }
            }
            TraceEvent::Tag(id, category) => {
                if let Some(l) = live.get_mut(id) {
                    l.alloc.category = *category;
                }
            }
            TraceEvent::Unpredictable(u) => {
                // The op ran inside every open phase: their peaks are known at a bound at best.
                unbounded_seen |= u.bound.is_none();
                bounded_seen |= u.bound.is_some();
                for o in &mut open {
                    o.unpredictable.push(u.clone());
                }
            }
            TraceEvent::PhaseEnd {
                index,
                failed,
                inputs,
            } => {
                // An end for no open phase (a worker out of step) closes nothing.
                let Some(k) = open.iter().rposition(|o| o.index == *index) else {
                    continue;
                };
                while open.len() > k + 1 {
                    let inner = open.pop().expect("deeper than k");
                    notes.push(format!(
                        "phase {} did not end before the phase {} around it: closed as failed there",
                        inner.name, open[k].name
                    ));
                    phases.push(close(inner, Closed::OuterEnded, a, context_bytes, None));
                }
                let o = open.pop().expect("k is open");
                let how = Closed::Ended { failed: *failed };
                phases.push(close(o, how, a, context_bytes, Some(inputs)));
            }
            TraceEvent::EmptyCache | TraceEvent::ResetPeaks | TraceEvent::ResetAccumulated => {}
        }
        for o in &mut open {
            o.peak_reserved = o.peak_reserved.max(a.reserved);
            o.peak_tensor = o.peak_tensor.max(tensors);
            o.peak_managed = o.peak_managed.max(managed);
            if a.allocated > o.peak_allocated {
                o.peak_allocated = a.allocated;
            }
            // The latest event at the peak: what is alive there is the peak's content.
            if allocated_here && a.allocated >= o.peak_allocated {
                o.peak_at = Some(i);
            }
        }
    }
    let how = if refused.is_some() {
        Closed::OutOfMemory
    } else {
        Closed::NeverEnded
    };
    while let Some(o) = open.pop() {
        if how == Closed::NeverEnded {
            notes.push(format!(
                "phase {} did not end: its figures stop at the last event received",
                o.name
            ));
        }
        phases.push(close(o, how, &device.allocator, context_bytes, None));
    }
    let events = &events[..cut.unwrap_or(events.len())];
    snapshots(events, &mut phases, backend, capacity, stop);
    let mut phases: Vec<PredictedPhase> = phases.into_iter().map(|(p, _)| p).collect();
    if let Some((at, _)) = &refused {
        phases.extend(not_reached(&events[at + 1..]));
    }
    phases.sort_by_key(|p| p.index);
    Replayed {
        phases,
        notes,
        refused: refused.map(|(_, r)| r),
        cut,
    }
}

/// The phases that start after an out-of-memory: never reached on the card, no figure.
fn not_reached(events: &[TraceEvent]) -> Vec<PredictedPhase> {
    let mut open: Vec<u64> = Vec::new();
    let mut phases = Vec::new();
    for event in events {
        match event {
            TraceEvent::PhaseStart {
                name,
                index,
                parent,
                automatic,
                inputs,
            } => {
                phases.push(PredictedPhase {
                    name: name.clone(),
                    index: *index,
                    parent: parent.or_else(|| open.last().copied()),
                    automatic: *automatic,
                    status: PhaseStatus::NotReached,
                    inputs: inputs.clone(),
                    start_allocated_bytes: None,
                    start_reserved_bytes: None,
                    peak_allocated_bytes: None,
                    peak_reserved_bytes: None,
                    peak_tensor_bytes: None,
                    end_allocated_bytes: None,
                    end_reserved_bytes: None,
                    driver_view_bytes: None,
                    peak_managed_bytes: None,
                    at_peak: None,
                    unpredictable: Vec::new(),
                    lower: None,
                    assumed: None,
                });
                open.push(*index);
            }
            TraceEvent::PhaseEnd { index, .. } => {
                if let Some(k) = open.iter().rposition(|o| o == index) {
                    open.truncate(k);
                }
            }
            _ => {}
        }
    }
    phases
}

/// A storage's role is the last one it showed: a parameter materialised from the meta device
/// is tagged at the phase's end, after the peak, yet it was a parameter all along.
fn roles(events: &[TraceEvent]) -> HashMap<u64, Category> {
    let mut role: HashMap<u64, Category> = HashMap::new();
    for event in events {
        if let TraceEvent::Tag(id, category) = event {
            role.insert(*id, *category);
        }
    }
    role
}

/// The live storages with their last role.
fn with_roles(live: &HashMap<u64, Live>, roles: &HashMap<u64, Category>) -> HashMap<u64, Live> {
    live.iter()
        .map(|(id, l)| {
            let mut alloc = l.alloc.clone();
            if let Some(category) = roles.get(&alloc.id) {
                alloc.category = *category;
            }
            (
                *id,
                Live {
                    held: l.held,
                    alloc,
                },
            )
        })
        .collect()
}

/// A phase closed at the allocator's present levels, and the event of its peak when it has
/// figures.
fn close(
    o: Open,
    how: Closed,
    a: &CachingAllocator,
    context_bytes: u64,
    end_inputs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> (PredictedPhase, Option<usize>) {
    let unbounded = o.unpredictable.iter().any(|u| u.bound.is_none()) || o.taint_unbounded;
    let bounded = !unbounded && (o.tainted || !o.unpredictable.is_empty());
    let status = if unbounded {
        PhaseStatus::Unpredictable
    } else if how == Closed::OutOfMemory {
        PhaseStatus::OutOfMemory
    } else if how == (Closed::Ended { failed: false }) {
        if bounded {
            PhaseStatus::Bounded
        } else {
            PhaseStatus::Predicted
        }
    } else {
        PhaseStatus::Failed
    };
    // A phase that depends on data has no figure; a failed one has those reached until it
    // stopped.
    let known = status != PhaseStatus::Unpredictable;
    let figure = |v: u64| known.then_some(v);
    let mut inputs = o.inputs;
    if let Some(end) = end_inputs {
        inputs.extend(end.clone());
    }
    (
        PredictedPhase {
            name: o.name,
            index: o.index,
            parent: o.parent,
            automatic: o.automatic,
            status,
            inputs,
            start_allocated_bytes: figure(o.start_allocated),
            start_reserved_bytes: figure(o.start_reserved),
            peak_allocated_bytes: figure(o.peak_allocated),
            peak_reserved_bytes: figure(o.peak_reserved),
            peak_tensor_bytes: figure(o.peak_tensor),
            end_allocated_bytes: figure(a.allocated),
            end_reserved_bytes: figure(a.reserved),
            driver_view_bytes: figure(o.peak_reserved.saturating_add(context_bytes)),
            peak_managed_bytes: (o.peak_managed > 0)
                .then_some(o.peak_managed)
                .and_then(figure),
            at_peak: None,
            unpredictable: o.unpredictable,
            lower: None,
            assumed: None,
        },
        // No allocation in the phase: its peak is its start level.
        known.then(|| o.peak_at.unwrap_or(o.start_at)),
    )
}

/// Second pass: at each phase's peak event, what is alive.
fn snapshots(
    events: &[TraceEvent],
    phases: &mut [(PredictedPhase, Option<usize>)],
    backend: Backend,
    capacity: Option<u64>,
    stop: &dyn Fn() -> bool,
) {
    let mut wanted: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, (_, at)) in phases.iter().enumerate() {
        if let Some(i) = at {
            wanted.entry(*i).or_default().push(k);
        }
    }
    if wanted.is_empty() {
        return;
    }
    let role = roles(events);
    let mut device = Device::new(backend, capacity);
    let mut live: HashMap<u64, Live> = HashMap::new();
    for (i, event) in events.iter().enumerate() {
        // Stopped: the peaks not reached yet keep no content.
        if i > 0 && i % STOP_EVERY == 0 && stop() {
            return;
        }
        // The same capacity as the first pass, so that the same blocks are handed out; every
        // peak wanted comes before a refusal.
        let stepped = device.step(event);
        match event {
            TraceEvent::Alloc(alloc) => {
                if let Stepped::Refused { .. } = stepped {
                    return;
                }
                let mut alloc = alloc.clone();
                if let Some(category) = role.get(&alloc.id) {
                    alloc.category = *category;
                }
                let held = stepped == Stepped::Allocated;
                live.insert(alloc.id, Live { held, alloc });
            }
            TraceEvent::Free(id) => {
                live.remove(id);
            }
            _ => {}
        }
        if let Some(ks) = wanted.remove(&i) {
            let snapshot = at_peak(&live, device.allocator.allocated);
            for k in ks {
                phases[k].0.at_peak = Some(snapshot.clone());
            }
            if wanted.is_empty() {
                return;
            }
        }
    }
}

fn at_peak(live: &HashMap<u64, Live>, allocated: u64) -> AtPeak {
    let mut by_category: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_module: HashMap<&str, u64> = HashMap::new();
    let mut counted = 0u64;
    for l in live.values().filter(|l| l.held) {
        let bytes = rounded(l.alloc.bytes);
        counted += bytes;
        *by_category.entry(l.alloc.category.to_string()).or_default() += bytes;
        *by_module
            .entry(l.alloc.module.as_deref().unwrap_or("(outside any module)"))
            .or_default() += bytes;
    }
    if allocated > counted {
        by_category.insert("allocator rounding".into(), allocated - counted);
    }
    let mut modules: Vec<ModuleBytes> = by_module
        .into_iter()
        .map(|(m, b)| ModuleBytes {
            module: m.to_string(),
            bytes: b,
        })
        .collect();
    modules.sort_by(|x, y| y.bytes.cmp(&x.bytes).then_with(|| x.module.cmp(&y.module)));
    modules.truncate(10);
    let mut tensors: Vec<&Live> = live.values().filter(|l| l.held).collect();
    tensors.sort_by(|x, y| {
        y.alloc
            .bytes
            .cmp(&x.alloc.bytes)
            .then_with(|| x.alloc.id.cmp(&y.alloc.id))
    });
    AtPeak {
        by_category,
        top_modules: modules,
        top_tensors: tensors
            .into_iter()
            .take(10)
            .map(|l| TensorAtPeak {
                bytes: l.alloc.bytes,
                shape: l.alloc.shape.clone(),
                dtype: l.alloc.dtype.clone(),
                category: l.alloc.category.to_string(),
                module: l.alloc.module.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An allocation of `bytes` made at `train.py` line `id + 10` (shared with `oom`'s tests).
    pub(crate) fn alloc(id: u64, bytes: u64, category: Category, module: &str) -> TraceEvent {
        TraceEvent::Alloc(Box::new(Alloc {
            id,
            bytes,
            category,
            module: Some(module.into()),
            shape: vec![bytes],
            dtype: "uint8".into(),
            tainted: false,
            file: Some("train.py".into()),
            line: Some(id + 10),
            managed: false,
            exprs: None,
        }))
    }

    pub(crate) fn start(name: &str, index: u64) -> TraceEvent {
        TraceEvent::PhaseStart {
            name: name.into(),
            index,
            parent: None,
            automatic: false,
            inputs: Default::default(),
        }
    }

    pub(crate) fn end(index: u64) -> TraceEvent {
        TraceEvent::PhaseEnd {
            index,
            failed: false,
            inputs: Default::default(),
        }
    }

    fn failed(index: u64) -> TraceEvent {
        TraceEvent::PhaseEnd {
            index,
            failed: true,
            inputs: Default::default(),
        }
    }

    /// A stop request ends a long replay within `STOP_EVERY` events: the phases that ended are
    /// kept whole, the one still open ends where the replay stopped (it did not end), and `cut`
    /// says how many events were replayed; never asked, the same stream is replayed whole.
    #[test]
    fn a_stop_request_ends_the_replay() {
        let mut events = vec![
            start("first", 0),
            alloc(1, 1 << 20, Category::Parameter, "m"),
        ];
        events.push(end(0));
        events.push(start("long", 1));
        for k in 0..STOP_EVERY as u64 {
            events.push(alloc(10 + k, 4096, Category::Temporary, "m"));
            events.push(TraceEvent::Free(10 + k));
        }
        events.push(end(1));
        let asked = std::cell::Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            true
        };
        let r = replay_until(&events, 0, Backend::Native, None, &stop);
        assert_eq!(r.cut, Some(STOP_EVERY));
        assert!(asked.get() >= 1);
        assert_eq!(r.phases.len(), 2);
        assert_eq!(r.phases[0].status, PhaseStatus::Predicted);
        assert_eq!(r.phases[0].peak_allocated_bytes, Some(1 << 20));
        assert_ne!(r.phases[1].status, PhaseStatus::Predicted);
        assert!(
            r.notes.iter().any(|n| n.contains("long did not end")),
            "{:?}",
            r.notes
        );
        let whole = replay_within(&events, 0, Backend::Native, None);
        assert_eq!(whole.cut, None);
        assert_eq!(whole.phases[1].status, PhaseStatus::Predicted);
    }

    /// A recorded stream, replayed exactly: sizes chosen to exercise both pools, segment sizes,
    /// splitting, reuse after free, and the breakdown at the peak.
    #[test]
    fn a_recorded_stream_replays_exactly() {
        let mib = 1u64 << 20;
        let events = vec![
            start("load", 0),
            alloc(0, 4 * mib, Category::Parameter, "m.w"), // large pool: a 20 MiB segment, split
            alloc(1, 1000, Category::Buffer, "m.b"),       // small pool: a 2 MiB segment, 1024 B
            end(0),
            start("forward", 1),
            // Best fit: the 16 MiB left in the first segment, split (4 MiB stay free).
            alloc(2, 12 * mib, Category::Temporary, "m"),
            TraceEvent::Tag(2, Category::Activation),
            // The 4 MiB block left is not split for 1 MiB: the request counts 4 MiB.
            alloc(3, 3 * mib, Category::Temporary, "m.act"),
            TraceEvent::Free(3),
            end(1),
            start("after", 2),
            alloc(4, 3 * mib, Category::Temporary, "m.act"), // the same 4 MiB block again
            TraceEvent::Free(2),
            TraceEvent::Free(4),
            end(2),
        ];
        let phases = replay(&events, 1000, Backend::Native).phases;
        assert_eq!(phases.len(), 3);
        let load = &phases[0];
        assert_eq!(load.peak_allocated_bytes, Some(4 * mib + 1024));
        assert_eq!(load.peak_reserved_bytes, Some(22 * mib));
        assert_eq!(load.driver_view_bytes, Some(22 * mib + 1000));
        let fwd = &phases[1];
        assert_eq!(fwd.start_allocated_bytes, Some(4 * mib + 1024));
        assert_eq!(fwd.peak_allocated_bytes, Some(20 * mib + 1024));
        assert_eq!(fwd.peak_tensor_bytes, Some(19 * mib + 1024));
        assert_eq!(fwd.peak_reserved_bytes, Some(22 * mib), "no new segment");
        assert_eq!(fwd.end_allocated_bytes, Some(16 * mib + 1024));
        let at = fwd.at_peak.as_ref().unwrap();
        assert_eq!(at.by_category["activation"], 12 * mib);
        assert_eq!(at.by_category["temporary"], 3 * mib);
        assert_eq!(at.by_category["parameter"], 4 * mib);
        assert_eq!(at.by_category["allocator rounding"], mib);
        assert_eq!(at.top_tensors[0].bytes, 12 * mib);
        assert_eq!(at.top_modules[0].module, "m");
        let after = &phases[2];
        assert_eq!(after.peak_reserved_bytes, Some(22 * mib));
        assert_eq!(after.peak_allocated_bytes, Some(20 * mib + 1024));
        assert_eq!(after.end_allocated_bytes, Some(4 * mib + 1024));
    }

    /// An op taken at a bound (`Unpredictable::bound`): its phase and those holding its
    /// outputs are bounded, with figures; an op without one makes its phase unpredictable.
    #[test]
    fn a_bounded_op_keeps_figures_and_an_unbounded_one_does_not() {
        let op = |bound: Option<&str>| {
            TraceEvent::Unpredictable(Unpredictable::op(
                "aten.nonzero.default",
                "its output size depends on the data",
                bound,
            ))
        };
        let tainted = |id| {
            TraceEvent::Alloc(Box::new(Alloc {
                id,
                bytes: 1 << 20,
                category: Category::Temporary,
                module: None,
                shape: vec![1 << 20],
                dtype: "uint8".into(),
                tainted: true,
                file: None,
                line: None,
                managed: false,
                exprs: None,
            }))
        };
        let events = vec![
            start("select", 0),
            op(Some("upper")),
            tainted(1),
            end(0),
            start("holds it", 1),
            end(1),
            start("custom", 2),
            op(None),
            tainted(2),
            end(2),
        ];
        let r = replay(&events, 0, Backend::Native);
        let status: Vec<_> = r.phases.iter().map(|p| p.status).collect();
        assert_eq!(
            status,
            [
                PhaseStatus::Bounded,
                PhaseStatus::Bounded,
                PhaseStatus::Unpredictable
            ]
        );
        assert_eq!(r.phases[0].peak_allocated_bytes, Some(1 << 20));
        assert!(r.phases[1].end_allocated_bytes.is_some());
        assert!(r.phases[2].peak_allocated_bytes.is_none());
    }

    #[test]
    fn data_dependent_phases_get_no_figure() {
        let tainted = TraceEvent::Alloc(Box::new(Alloc {
            id: 9,
            bytes: 4096,
            category: Category::Temporary,
            module: None,
            shape: vec![4096],
            dtype: "uint8".into(),
            tainted: true,
            file: None,
            line: None,
            managed: false,
            exprs: None,
        }));
        let events = vec![
            start("a", 0),
            tainted,
            end(0),
            start("b", 1),
            end(1),
            start("c", 2),
            TraceEvent::Free(9),
            end(2),
            start("d", 3),
            alloc(10, 512, Category::Other, "x"),
            end(3),
        ];
        let phases = replay(&events, 0, Backend::Native).phases;
        let status: Vec<PhaseStatus> = phases.iter().map(|p| p.status).collect();
        assert_eq!(
            status,
            [
                PhaseStatus::Unpredictable,
                PhaseStatus::Unpredictable,
                PhaseStatus::Unpredictable,
                PhaseStatus::Predicted
            ]
        );
        assert!(phases[0].peak_allocated_bytes.is_none());
        assert_eq!(phases[3].peak_allocated_bytes, Some(512));
    }

    fn nested(name: &str, index: u64, parent: Option<u64>, automatic: bool) -> TraceEvent {
        TraceEvent::PhaseStart {
            name: name.into(),
            index,
            parent,
            automatic,
            inputs: Default::default(),
        }
    }

    const MIB: u64 = 1 << 20;

    /// An outer phase's peak covers its inner phases; each inner phase has its own peak (not the
    /// outer's, not the previous sibling's); phases come out once each, by index, with their
    /// parent and origin; what was alive at each peak is each one's own.
    #[test]
    fn nested_phases_keep_their_own_peaks() {
        let events = vec![
            nested("step", 0, None, true),
            alloc(0, 4 * MIB, Category::Parameter, "m"),
            // No parent said (an older worker): the innermost open phase.
            nested("forward", 1, None, false),
            alloc(1, 8 * MIB, Category::Activation, "m.fwd"),
            TraceEvent::Free(1),
            end(1),
            nested("backward", 2, Some(0), false),
            alloc(2, 2 * MIB, Category::Gradient, "m.bwd"),
            TraceEvent::Free(2),
            end(2),
            TraceEvent::Free(0),
            end(0),
        ];
        let r = replay(&events, 0, Backend::Native);
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let names: Vec<(&str, u64, Option<u64>, bool)> = r
            .phases
            .iter()
            .map(|p| (p.name.as_str(), p.index, p.parent, p.automatic))
            .collect();
        assert_eq!(
            names,
            [
                ("step", 0, None, true),
                ("forward", 1, Some(0), false),
                ("backward", 2, Some(0), false)
            ]
        );
        let [step, forward, backward] = &r.phases[..] else {
            panic!("three phases")
        };
        assert!(r.phases.iter().all(|p| p.status == PhaseStatus::Predicted));
        assert_eq!(step.start_allocated_bytes, Some(0));
        assert_eq!(
            step.peak_allocated_bytes,
            Some(12 * MIB),
            "the outer peak covers forward's"
        );
        assert_eq!(step.peak_tensor_bytes, Some(12 * MIB));
        assert_eq!(step.peak_reserved_bytes, Some(20 * MIB));
        assert_eq!(step.end_allocated_bytes, Some(0));
        assert_eq!(forward.start_allocated_bytes, Some(4 * MIB));
        assert_eq!(forward.peak_allocated_bytes, Some(12 * MIB));
        assert_eq!(forward.end_allocated_bytes, Some(4 * MIB));
        assert_eq!(backward.start_allocated_bytes, Some(4 * MIB));
        assert_eq!(
            backward.peak_allocated_bytes,
            Some(6 * MIB),
            "its own peak, not forward's"
        );
        assert_eq!(backward.peak_tensor_bytes, Some(6 * MIB));
        let step_at = step.at_peak.as_ref().unwrap();
        assert_eq!(step_at.by_category["activation"], 8 * MIB);
        assert!(!step_at.by_category.contains_key("gradient"));
        let fwd_at = forward.at_peak.as_ref().unwrap();
        assert_eq!(fwd_at.by_category["activation"], 8 * MIB);
        let bwd_at = backward.at_peak.as_ref().unwrap();
        assert_eq!(bwd_at.by_category["gradient"], 2 * MIB);
        assert_eq!(bwd_at.by_category["parameter"], 4 * MIB);
        assert!(!bwd_at.by_category.contains_key("activation"));
    }

    /// An end for the outer phase closes the inner ones first, as failed, with their figures.
    #[test]
    fn an_outer_end_closes_the_inner_phases_as_failed() {
        let events = vec![
            start("outer", 0),
            alloc(0, 4 * MIB, Category::Parameter, "m"),
            nested("inner", 1, Some(0), false),
            nested("innermost", 2, Some(1), false),
            alloc(1, 2 * MIB, Category::Temporary, "m"),
            end(0),
            // An end for a phase that is not open changes nothing.
            end(7),
        ];
        let r = replay(&events, 0, Backend::Native);
        let status: Vec<(u64, PhaseStatus)> =
            r.phases.iter().map(|p| (p.index, p.status)).collect();
        assert_eq!(
            status,
            [
                (0, PhaseStatus::Predicted),
                (1, PhaseStatus::Failed),
                (2, PhaseStatus::Failed)
            ]
        );
        assert_eq!(r.phases[1].peak_allocated_bytes, Some(6 * MIB));
        assert_eq!(r.phases[2].end_allocated_bytes, Some(6 * MIB));
        assert!(r.phases[2].at_peak.is_some());
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(r.notes[0].contains("innermost"), "{:?}", r.notes);
        assert!(
            r.notes[1].contains("phase inner did not end"),
            "{:?}",
            r.notes
        );
    }

    /// A phase still open when the events stop (the worker died, was stopped or timed out in it)
    /// keeps its figures up to the last event and what was alive at its peak; a data-dependent
    /// one stays without figures.
    #[test]
    fn a_phase_that_never_ended_keeps_its_partial_peak() {
        let events = vec![
            start("load", 0),
            alloc(0, 4 * MIB, Category::Parameter, "m"),
            end(0),
            start("train", 1),
            nested("forward", 2, Some(1), false),
            alloc(1, 8 * MIB, Category::Activation, "m"),
            TraceEvent::Free(1),
            alloc(2, 2 * MIB, Category::Temporary, "m"),
        ];
        let r = replay(&events, 1000, Backend::Native);
        assert_eq!(r.phases.len(), 3);
        for ph in &r.phases[1..] {
            assert_eq!(ph.status, PhaseStatus::Failed, "{}", ph.name);
            assert_eq!(ph.start_allocated_bytes, Some(4 * MIB));
            assert_eq!(ph.peak_allocated_bytes, Some(12 * MIB));
            assert_eq!(ph.end_allocated_bytes, Some(6 * MIB));
            assert_eq!(ph.driver_view_bytes, Some(20 * MIB + 1000));
            let at = ph.at_peak.as_ref().expect("at_peak filled");
            assert_eq!(at.by_category["activation"], 8 * MIB);
        }
        assert_eq!(
            r.notes,
            [
                "phase forward did not end: its figures stop at the last event received",
                "phase train did not end: its figures stop at the last event received"
            ]
        );
        let tainted = TraceEvent::Alloc(Box::new(Alloc {
            id: 5,
            bytes: 4096,
            category: Category::Temporary,
            module: None,
            shape: vec![4096],
            dtype: "uint8".into(),
            tainted: true,
            file: None,
            line: None,
            managed: false,
            exprs: None,
        }));
        let r = replay(&[start("select", 0), tainted], 0, Backend::Native);
        assert_eq!(r.phases[0].status, PhaseStatus::Unpredictable);
        assert_eq!(r.phases[0].peak_allocated_bytes, None);
        assert!(r.phases[0].at_peak.is_none());
        assert_eq!(r.notes.len(), 1);
    }

    /// A phase that raised keeps the figures reached until it raised; an unpredictable op inside
    /// an inner phase makes every phase around it unpredictable.
    #[test]
    fn failed_phases_keep_figures_and_unpredictable_ops_reach_the_outer_phases() {
        let events = vec![
            start("a", 0),
            alloc(0, 3 * MIB, Category::Temporary, "m"),
            failed(0),
            start("outer", 1),
            nested("inner", 2, Some(1), false),
            TraceEvent::Unpredictable(Unpredictable::op("aten.nonzero.default", "data", None)),
            end(2),
            nested("sibling", 3, Some(1), false),
            end(3),
            end(1),
        ];
        let r = replay(&events, 0, Backend::Native);
        assert_eq!(r.phases[0].status, PhaseStatus::Failed);
        assert_eq!(r.phases[0].peak_allocated_bytes, Some(3 * MIB));
        assert!(r.phases[0].at_peak.is_some());
        let status: Vec<PhaseStatus> = r.phases[1..].iter().map(|p| p.status).collect();
        assert_eq!(
            status,
            [
                PhaseStatus::Unpredictable,
                PhaseStatus::Unpredictable,
                PhaseStatus::Predicted
            ]
        );
        assert_eq!(r.phases[1].unpredictable.len(), 1);
    }
}
