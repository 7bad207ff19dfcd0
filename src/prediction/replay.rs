//! A prediction's storage events replayed through the caching-allocator model: per phase, the
//! peaks of allocated and reserved memory, the levels at its start and end, and — in a second
//! pass over the same events — what was alive at the peak, by category (the last role each storage
//! showed), module and tensor.

use std::collections::{BTreeMap, HashMap};

use super::document::{AtPeak, ModuleBytes, PhaseStatus, PredictedPhase, TensorAtPeak};
use super::trace::{Alloc, Category, Unpredictable};
use crate::estimate::allocator::{Allocation, Backend, CachingAllocator, rounded};

/// One event of the trace, in the order the worker sent it.
#[derive(Clone, Debug)]
pub enum TraceEvent {
    PhaseStart {
        name: String,
        index: u64,
    },
    PhaseEnd {
        failed: bool,
        inputs: serde_json::Map<String, serde_json::Value>,
    },
    Alloc(Box<Alloc>),
    Free(u64),
    Tag(u64, Category),
    Unpredictable(Unpredictable),
}

struct Live {
    allocation: Option<Allocation>,
    alloc: Box<Alloc>,
}

struct Open {
    name: String,
    index: u64,
    start_allocated: u64,
    start_reserved: u64,
    /// Event index at which the phase started, and at which its allocated peak was reached.
    start_at: usize,
    peak_at: Option<usize>,
    unpredictable: Vec<Unpredictable>,
    tainted: bool,
    peak_tensor: u64,
}

/// The allocator backend a target names (`native`, `expandable_segments`, `cudaMallocAsync`).
pub fn backend(name: &str) -> Backend {
    match name {
        "expandable_segments" => Backend::ExpandableSegments,
        "cudaMallocAsync" => Backend::MallocAsync,
        _ => Backend::Native,
    }
}

/// Replays `events`; `context_bytes` is added to the peak reserved for the driver's view.
pub fn replay(events: &[TraceEvent], context_bytes: u64, backend: Backend) -> Vec<PredictedPhase> {
    let mut a = CachingAllocator::with_backend(backend);
    let mut live: HashMap<u64, Live> = HashMap::new();
    let mut tainted_live = 0usize;
    // Live tensor bytes (rounded to 512, workspaces left out).
    let mut tensors = 0u64;
    let mut open: Option<Open> = None;
    let mut phases: Vec<(PredictedPhase, Option<usize>)> = Vec::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            TraceEvent::PhaseStart { name, index } => {
                a.reset_peaks();
                open = Some(Open {
                    name: name.clone(),
                    index: *index,
                    start_allocated: a.allocated,
                    start_reserved: a.reserved,
                    start_at: i,
                    peak_at: None,
                    unpredictable: Vec::new(),
                    tainted: tainted_live > 0,
                    peak_tensor: tensors,
                });
            }
            TraceEvent::Alloc(alloc) => {
                // PyTorch hands out no block for an empty storage.
                let allocation = (alloc.bytes > 0).then(|| a.malloc(alloc.bytes));
                if alloc.tainted {
                    tainted_live += 1;
                }
                if alloc.category != Category::Workspace && alloc.bytes > 0 {
                    tensors += rounded(alloc.bytes);
                }
                if let Some(o) = &mut open {
                    o.tainted |= alloc.tainted;
                    o.peak_tensor = o.peak_tensor.max(tensors);
                    if a.allocated == a.peak_allocated && allocation.is_some() {
                        o.peak_at = Some(i);
                    }
                }
                live.insert(
                    alloc.id,
                    Live {
                        allocation,
                        alloc: alloc.clone(),
                    },
                );
            }
            TraceEvent::Free(id) => {
                if let Some(l) = live.remove(id) {
                    if let Some(allocation) = l.allocation {
                        a.free(allocation);
                        if l.alloc.category != Category::Workspace {
                            tensors -= rounded(l.alloc.bytes);
                        }
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
                if let Some(o) = &mut open {
                    o.unpredictable.push(u.clone());
                }
            }
            TraceEvent::PhaseEnd { failed, inputs } => {
                let Some(o) = open.take() else { continue };
                let unpredictable = o.tainted || !o.unpredictable.is_empty();
                let status = if unpredictable {
                    PhaseStatus::Unpredictable
                } else if *failed {
                    PhaseStatus::Failed
                } else {
                    PhaseStatus::Predicted
                };
                let known = status == PhaseStatus::Predicted;
                let figure = |v: u64| known.then_some(v);
                phases.push((
                    PredictedPhase {
                        name: o.name,
                        index: o.index,
                        status,
                        inputs: inputs.clone(),
                        start_allocated_bytes: figure(o.start_allocated),
                        start_reserved_bytes: figure(o.start_reserved),
                        peak_allocated_bytes: figure(a.peak_allocated),
                        peak_reserved_bytes: figure(a.peak_reserved),
                        peak_tensor_bytes: figure(o.peak_tensor),
                        end_allocated_bytes: figure(a.allocated),
                        end_reserved_bytes: figure(a.reserved),
                        driver_view_bytes: figure(a.peak_reserved.saturating_add(context_bytes)),
                        at_peak: None,
                        unpredictable: o.unpredictable,
                    },
                    // No allocation in the phase: its peak is its start level.
                    if known {
                        Some(o.peak_at.unwrap_or(o.start_at))
                    } else {
                        None
                    },
                ));
            }
        }
    }
    snapshots(events, &mut phases, backend);
    phases.into_iter().map(|(p, _)| p).collect()
}

/// Second pass: at each phase's peak event, what is alive.
fn snapshots(
    events: &[TraceEvent],
    phases: &mut [(PredictedPhase, Option<usize>)],
    backend: Backend,
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
    // A storage's role is the last one it showed: a parameter materialised from the meta device
    // is tagged at the phase's end, after the peak, yet it was a parameter all along.
    let mut role: HashMap<u64, Category> = HashMap::new();
    for event in events {
        if let TraceEvent::Tag(id, category) = event {
            role.insert(*id, *category);
        }
    }
    let mut a = CachingAllocator::with_backend(backend);
    let mut live: HashMap<u64, Live> = HashMap::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            TraceEvent::Alloc(alloc) => {
                let allocation = (alloc.bytes > 0).then(|| a.malloc(alloc.bytes));
                let mut alloc = alloc.clone();
                if let Some(category) = role.get(&alloc.id) {
                    alloc.category = *category;
                }
                live.insert(alloc.id, Live { allocation, alloc });
            }
            TraceEvent::Free(id) => {
                if let Some(Live {
                    allocation: Some(allocation),
                    ..
                }) = live.remove(id)
                {
                    a.free(allocation);
                }
            }
            _ => {}
        }
        if let Some(ks) = wanted.remove(&i) {
            let snapshot = at_peak(&live, a.allocated);
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
    for l in live.values().filter(|l| l.allocation.is_some()) {
        let bytes = rounded(l.alloc.bytes);
        counted += bytes;
        *by_category
            .entry(l.alloc.category.name().to_string())
            .or_default() += bytes;
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
    let mut tensors: Vec<&Live> = live.values().filter(|l| l.allocation.is_some()).collect();
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
                category: l.alloc.category.name().to_string(),
                module: l.alloc.module.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: u64, bytes: u64, category: Category, module: &str) -> TraceEvent {
        TraceEvent::Alloc(Box::new(Alloc {
            id,
            bytes,
            category,
            module: Some(module.into()),
            shape: vec![bytes],
            dtype: "uint8".into(),
            tainted: false,
        }))
    }

    fn start(name: &str, index: u64) -> TraceEvent {
        TraceEvent::PhaseStart {
            name: name.into(),
            index,
        }
    }

    fn end() -> TraceEvent {
        TraceEvent::PhaseEnd {
            failed: false,
            inputs: Default::default(),
        }
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
            end(),
            start("forward", 1),
            // Best fit: the 16 MiB left in the first segment, split (4 MiB stay free).
            alloc(2, 12 * mib, Category::Temporary, "m"),
            TraceEvent::Tag(2, Category::Activation),
            // The 4 MiB block left is not split for 1 MiB: the request counts 4 MiB.
            alloc(3, 3 * mib, Category::Temporary, "m.act"),
            TraceEvent::Free(3),
            end(),
            start("after", 2),
            alloc(4, 3 * mib, Category::Temporary, "m.act"), // the same 4 MiB block again
            TraceEvent::Free(2),
            TraceEvent::Free(4),
            end(),
        ];
        let phases = replay(&events, 1000, Backend::Native);
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
        }));
        let events = vec![
            start("a", 0),
            tainted,
            end(),
            start("b", 1),
            end(),
            start("c", 2),
            TraceEvent::Free(9),
            end(),
            start("d", 3),
            alloc(10, 512, Category::Other, "x"),
            end(),
        ];
        let phases = replay(&events, 0, Backend::Native);
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
}
