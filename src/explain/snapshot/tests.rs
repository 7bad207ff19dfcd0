use super::writer::{Pickler, Py, dumps};
use super::*;
use std::collections::HashMap;

const MIB: i128 = 1 << 20;
const BASE: i128 = 0x7F3A_0000_0000;
const S1: i128 = BASE;
const S2: i128 = BASE + 2 * MIB;
const T0: i128 = 1_700_000_000_000_000;

/// Shared string objects, as Python shares its identifier-like literals.
#[derive(Default)]
struct Lit(HashMap<String, Py>);

impl Lit {
    fn s(&mut self, text: &str) -> Py {
        self.0
            .entry(text.to_string())
            .or_insert_with(|| Py::str(text))
            .clone()
    }
}

fn frame(filename: &str, line: i128, name: &str, lit: &mut Lit) -> Py {
    Py::dict(vec![
        (lit.s("name"), Py::str(name)),
        (lit.s("filename"), Py::str(filename)),
        (lit.s("line"), Py::Int(line)),
    ])
}

/// The twin of `build` in tools/snapshot_fixtures.py: the same objects, the same sharing.
fn build(n_warm: usize) -> Py {
    let mut lit = Lit::default();
    let l = &mut lit;
    let mut frames: HashMap<&str, Py> = HashMap::new();
    for (key, file, line, name) in [
        (
            "malloc",
            "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
            1234,
            "c10::cuda::CUDACachingAllocator::malloc",
        ),
        (
            "linear",
            "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
            125,
            "forward",
        ),
        ("ctx", "/usr/lib/python3.11/contextlib.py", 81, "inner"),
        ("build", "/home/u/model.py", 12, "build"),
        ("forward", "/home/u/model.py", 30, "forward"),
        ("main", "/home/u/run.py", 40, "main"),
        (
            "recorder",
            "/tmp/iteragpu-python-x1/iteragpu/recorder.py",
            150,
            "phase",
        ),
    ] {
        frames.insert(key, frame(file, line, name, l));
    }
    let stack = |names: &[&str]| Py::list(names.iter().map(|n| frames[n].clone()).collect());
    let empty = l.s("");
    let clock = std::cell::Cell::new(T0);
    let entry = |l: &mut Lit, action: &str, addr: i128, size: i128, meta: Py, st: Py| {
        clock.set(clock.get() + 10);
        Py::dict(vec![
            (l.s("action"), l.s(action)),
            (l.s("addr"), Py::Int(addr)),
            (l.s("size"), Py::Int(size)),
            (l.s("stream"), Py::Int(0)),
            (l.s("time_us"), Py::Int(clock.get())),
            (l.s("compile_context"), Py::str("N/A")),
            (l.s("user_metadata"), meta),
            (l.s("frames"), st),
        ])
    };
    let (m0, m1, m2) = (
        "iteragpu phase 0 model_load",
        "iteragpu phase 1 forward",
        "iteragpu phase 2 warm_forward",
    );
    let st_a = stack(&["malloc", "linear", "ctx", "build", "main"]);
    let st_b = stack(&["malloc", "linear", "build", "main"]);
    let st_t = stack(&["malloc", "recorder", "main"]);
    let st_c = stack(&["malloc", "linear", "forward", "main"]);
    let st_d = stack(&["malloc", "forward", "main"]);
    let (a, b, t, c, d, x) = (S1, S1 + MIB, S1 + MIB + MIB / 2, S2, S2, S1 + MIB);
    let mut trace = vec![
        entry(l, "segment_alloc", S1, 2 * MIB, empty.clone(), st_a.clone()),
        entry(l, "alloc", a, MIB, Py::str(m0), st_a.clone()),
        entry(l, "alloc", b, MIB / 2, Py::str(m0), st_b.clone()),
        entry(l, "alloc", t, MIB / 4, empty.clone(), st_t.clone()),
        entry(
            l,
            "free_requested",
            t,
            MIB / 4,
            empty.clone(),
            stack(&["recorder", "main"]),
        ),
        entry(l, "free_completed", t, MIB / 4, empty.clone(), st_t),
        entry(l, "segment_alloc", S2, 2 * MIB, Py::str(m1), st_c.clone()),
        entry(l, "alloc", c, MIB / 4, Py::str(m1), st_c.clone()),
        entry(
            l,
            "free_requested",
            c,
            MIB / 4,
            Py::str(m1),
            stack(&["forward", "main"]),
        ),
        entry(l, "free_completed", c, MIB / 4, Py::str(m1), st_c.clone()),
        entry(l, "alloc", d, 3 * MIB / 2, Py::str(m1), st_d.clone()),
    ];
    clock.set(clock.get() + 10);
    trace.push(Py::dict(vec![
        (l.s("action"), l.s("oom")),
        (l.s("device_free"), Py::Int(1000)),
        (l.s("size"), Py::Int(8 << 30)),
        (l.s("stream"), Py::Int(0)),
        (l.s("time_us"), Py::Int(clock.get())),
        (l.s("compile_context"), Py::str("N/A")),
        (l.s("user_metadata"), Py::str(m1)),
        (l.s("frames"), stack(&["forward", "main"])),
    ]));
    trace.push(entry(
        l,
        "free_requested",
        b,
        MIB / 2,
        Py::str(m1),
        stack(&["main"]),
    ));
    trace.push(entry(
        l,
        "free_completed",
        b,
        MIB / 2,
        Py::str(m1),
        st_b.clone(),
    ));
    for _ in 0..n_warm {
        let st_x = stack(&["malloc", "linear", "forward", "main"]);
        trace.push(entry(l, "alloc", x, MIB / 4, Py::str(m2), st_x.clone()));
        trace.push(entry(
            l,
            "free_requested",
            x,
            MIB / 4,
            Py::str(m2),
            stack(&["forward", "main"]),
        ));
        trace.push(entry(l, "free_completed", x, MIB / 4, Py::str(m2), st_x));
    }
    let empty_frames = Py::list(vec![]);
    let segment = |l: &mut Lit,
                   address: i128,
                   allocated: i128,
                   requested: i128,
                   block: (i128, Py),
                   seg_frames: Py| {
        Py::dict(vec![
            (l.s("device"), Py::Int(0)),
            (l.s("address"), Py::Int(address)),
            (l.s("total_size"), Py::Int(2 * MIB)),
            (l.s("allocated_size"), Py::Int(allocated)),
            (l.s("active_size"), Py::Int(allocated)),
            (l.s("requested_size"), Py::Int(requested)),
            (l.s("stream"), Py::Int(0)),
            (l.s("segment_type"), l.s("large")),
            (
                l.s("segment_pool_id"),
                Py::tuple(vec![Py::Int(0), Py::Int(0)]),
            ),
            (l.s("is_expandable"), Py::Bool(false)),
            (
                l.s("blocks"),
                Py::list(vec![
                    Py::dict(vec![
                        (l.s("address"), Py::Int(block.0)),
                        (l.s("size"), Py::Int(allocated)),
                        (l.s("requested_size"), Py::Int(requested)),
                        (l.s("state"), l.s("active_allocated")),
                        (l.s("frames"), block.1),
                    ]),
                    Py::dict(vec![
                        (l.s("address"), Py::Int(address + allocated)),
                        (l.s("size"), Py::Int(2 * MIB - allocated)),
                        (l.s("requested_size"), Py::Int(0)),
                        (l.s("state"), l.s("inactive")),
                        (l.s("frames"), empty_frames.clone()),
                    ]),
                ]),
            ),
            (l.s("frames"), seg_frames),
        ])
    };
    let segments = Py::list(vec![
        segment(l, S1, MIB, MIB - 100, (a, st_a.clone()), st_a),
        segment(l, S2, 3 * MIB / 2, 3 * MIB / 2 - 1000, (d, st_d), st_c),
    ]);
    let settings = Py::dict(vec![
        (
            l.s("PYTORCH_CUDA_ALLOC_CONF"),
            Py::str("expandable_segments:False"),
        ),
        (l.s("max_split_size"), Py::Int(-1)),
        (l.s("garbage_collection_threshold"), Py::Float(0.0)),
        (l.s("expandable_segments"), Py::Bool(false)),
        (l.s("pinned_num_register_threads"), Py::Int(1)),
        (l.s("release_lock_on_cudamalloc"), Py::Bool(false)),
        (l.s("pinned_use_cuda_host_register"), Py::Bool(false)),
        (
            l.s("roundup_power2_divisions"),
            Py::dict(vec![
                (Py::str("16"), Py::Int(0)),
                (Py::str("32"), Py::Int(0)),
            ]),
        ),
    ]);
    Py::dict(vec![
        (l.s("segments"), segments),
        (l.s("device_traces"), Py::list(vec![Py::list(trace)])),
        (l.s("allocator_settings"), settings),
    ])
}

fn summary_of(bytes: &[u8]) -> SnapshotSummary {
    summarize(bytes, &SummaryOptions::default()).expect("the snapshot is read")
}

fn phase<'a>(trace: &'a TraceSummary, name: &str) -> &'a PhaseSummary {
    trace
        .phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no phase {name} in {:?}", trace.phases))
}

fn sizes(list: &[Allocation]) -> Vec<u64> {
    list.iter().map(|a| a.size_bytes).collect()
}

const M: u64 = 1 << 20;
const P4: &[u8] = include_bytes!("../../../tests/fixtures/snapshots/phases-p4.pickle");
const P2: &[u8] = include_bytes!("../../../tests/fixtures/snapshots/phases-p2.pickle");

#[test]
fn the_writer_writes_what_cpython_writes() {
    assert!(
        dumps(&build(340), 4) == P4,
        "protocol 4 differs from CPython's bytes"
    );
    assert!(
        dumps(&build(40), 2) == P2,
        "protocol 2 differs from CPython's bytes"
    );
}

/// The expectations on the timeline of tools/snapshot_fixtures.py (n_warm ≥ 1).
fn check_fixture(s: &SnapshotSummary, n_warm: u64) {
    assert_eq!(s.devices.len(), 1);
    let dev = &s.devices[0];
    assert_eq!(dev.device, 0);
    let seg = &dev.segments;
    assert_eq!(seg.segments, 2);
    assert_eq!(seg.reserved_bytes, 4 * M);
    assert_eq!(seg.allocated_bytes, 5 * M / 2);
    assert_eq!(seg.active_bytes, 5 * M / 2);
    assert_eq!(seg.requested_bytes, 5 * M / 2 - 1100);
    assert_eq!(seg.inactive_bytes, 3 * M / 2);
    assert_eq!(seg.inactive_split_bytes, 3 * M / 2);
    assert_eq!(seg.largest_inactive_block_bytes, M);
    assert_eq!(seg.pools.len(), 1);
    assert_eq!(seg.pools[0].pool_id, Some([0, 0]));
    assert_eq!(seg.pools[0].segment_type, "large");
    assert_eq!(sizes(&dev.largest_blocks_at_end), vec![3 * M / 2, M]);
    let top = &dev.largest_blocks_at_end[1];
    assert_eq!(top.user_frame.as_ref().map(|f| f.line), Some(12));
    let trace = dev.trace.as_ref().expect("a trace");
    assert_eq!(trace.entries, 14 + 3 * n_warm);
    assert_eq!(trace.actions["alloc"], 5 + n_warm);
    assert_eq!(trace.actions["oom"], 1);
    assert!(!trace.history.truncated, "{:?}", trace.history);
    assert_eq!(trace.history.allocated_before_first_entry_bytes, 0);
    assert_eq!(trace.end_allocated_bytes, 5 * M / 2);
    assert_eq!(trace.end_reserved_bytes, 4 * M);
    assert_eq!(trace.peak_allocated_bytes, 3 * M);
    assert_eq!(trace.peak_allocated_at.event, Some(10));
    assert_eq!(trace.peak_reserved_bytes, 4 * M);
    let names: Vec<&str> = trace.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            BEFORE_FIRST_PHASE,
            "model_load",
            BETWEEN_PHASES,
            "forward",
            "warm_forward"
        ]
    );
    let before = phase(trace, BEFORE_FIRST_PHASE);
    assert_eq!((before.entries, before.peak_allocated_bytes), (1, 0));
    assert_eq!(before.peak_reserved_bytes, 2 * M);
    assert_eq!(before.peak_reserved_at.event, Some(0));
    let load = phase(trace, "model_load");
    assert_eq!(load.index, Some(0));
    assert_eq!(load.peak_allocated_bytes, 3 * M / 2);
    assert_eq!(load.peak_allocated_at.event, Some(2));
    assert_eq!(load.peak_allocated_at.time_us, Some(1_700_000_000_000_030));
    assert_eq!(sizes(&load.largest_at_peak), vec![M, M / 2]);
    let a = &load.largest_at_peak[0];
    assert_eq!(a.address, 0x7F3A_0000_0000);
    let user = a.user_frame.as_ref().expect("a user frame");
    assert_eq!(
        (&*user.filename, user.line, &*user.name),
        ("/home/u/model.py", 12, "build")
    );
    // Python frames only (the C++ frame is left out), torch's and the standard library's kept.
    let top: Vec<i64> = a.stack_top.iter().map(|f| f.line).collect();
    assert_eq!(top, vec![125, 81, 12, 40]);
    assert_eq!(a.phase.as_deref(), Some("model_load"));
    assert_eq!(a.allocated_at.and_then(|p| p.event), Some(1));
    let between = phase(trace, BETWEEN_PHASES);
    assert_eq!(between.peak_allocated_bytes, 7 * M / 4);
    let t = between
        .largest_at_peak
        .iter()
        .find(|x| x.size_bytes == M / 4)
        .expect("T");
    // iteragpu's own recorder frame is skipped: the user frame is the caller's.
    let user = t.user_frame.as_ref().expect("a user frame");
    assert_eq!((&*user.filename, user.line), ("/home/u/run.py", 40));
    assert_eq!(t.stack_top.len(), 2);
    let fwd = phase(trace, "forward");
    assert_eq!(fwd.start_allocated_bytes, 3 * M / 2);
    assert_eq!(fwd.peak_allocated_bytes, 3 * M);
    assert_eq!(fwd.peak_allocated_at.event, Some(10));
    assert_eq!(sizes(&fwd.largest_at_peak), vec![3 * M / 2, M, M / 2]);
    assert_eq!(fwd.peak_reserved_bytes, 4 * M);
    assert_eq!(fwd.peak_reserved_at.event, Some(6));
    assert_eq!(fwd.end_allocated_bytes, 5 * M / 2);
    assert_eq!(fwd.ooms.len(), 1);
    assert_eq!(fwd.ooms[0].requested_bytes, 8 << 30);
    assert_eq!(fwd.ooms[0].device_free_bytes, Some(1000));
    assert_eq!((fwd.allocations, fwd.frees), (2, 2));
    let warm = phase(trace, "warm_forward");
    assert_eq!(warm.entries, 3 * n_warm);
    assert_eq!(warm.peak_allocated_bytes, 11 * M / 4);
    assert_eq!(sizes(&warm.largest_at_peak), vec![3 * M / 2, M, M / 4]);
    assert!(trace.series.len() <= SERIES_MAX_POINTS);
    assert_eq!(
        trace.series.iter().map(|p| p.allocated_bytes).max(),
        Some(3 * M)
    );
    let settings = s.allocator_settings.as_ref().expect("settings");
    assert_eq!(
        settings["PYTORCH_CUDA_ALLOC_CONF"],
        "expandable_segments:False"
    );
    assert_eq!(settings["max_split_size"], -1);
    assert_eq!(settings["roundup_power2_divisions"]["32"], 0);
    assert!(s.notes.is_empty(), "{:?}", s.notes);
}

#[test]
fn cpython_fixtures_are_summarised() {
    let s4 = summary_of(P4);
    assert_eq!(s4.pickle_protocol, 4);
    assert_eq!(s4.bytes_read, P4.len() as u64);
    assert!(s4.history_recorded);
    check_fixture(&s4, 340);
    let s2 = summary_of(P2);
    assert_eq!(s2.pickle_protocol, 2);
    check_fixture(&s2, 40);
}

#[test]
fn every_protocol_gives_the_same_summary() {
    let tree = build(3);
    let reference = summary_of(&dumps(&tree, 4));
    check_fixture(&reference, 3);
    for protocol in [2, 3, 5] {
        let mut s = summary_of(&dumps(&tree, protocol));
        s.pickle_protocol = 4;
        s.bytes_read = reference.bytes_read;
        assert_eq!(s, reference, "protocol {protocol}");
    }
}

/// The tree with only the trace entries from `skip` on (as when max_entries dropped the oldest).
fn without_first_entries(n_warm: usize, skip: usize) -> Py {
    let Py::Dict(root) = build(n_warm) else {
        unreachable!()
    };
    let mut items = (*root).clone();
    let Py::List(traces) = &items[1].1 else {
        unreachable!()
    };
    let Py::List(trace) = &traces[0] else {
        unreachable!()
    };
    let kept: Vec<Py> = trace[skip..].to_vec();
    items[1].1 = Py::list(vec![Py::list(kept)]);
    Py::dict(items)
}

#[test]
fn a_truncated_history_is_said_and_levels_stay_absolute() {
    // Drop the segment_alloc of S1 and both allocations of model_load.
    let s = summary_of(&dumps(&without_first_entries(2, 3), 4));
    let trace = s.devices[0].trace.as_ref().expect("a trace");
    let h = &trace.history;
    assert!(h.truncated);
    assert_eq!(h.allocated_before_first_entry_bytes, 3 * M / 2);
    assert_eq!(h.reserved_before_first_entry_bytes, 2 * M);
    assert_eq!(
        h.frees_without_alloc, 1,
        "B is freed but never seen allocated"
    );
    let reason = h.reason.as_deref().expect("a reason");
    assert!(reason.contains("first entries are missing"), "{reason}");
    assert!(
        reason.contains("frees 1 allocation it never saw"),
        "{reason}"
    );
    let fwd = phase(trace, "forward");
    assert_eq!(fwd.peak_allocated_bytes, 3 * M);
    assert_eq!(fwd.peak_reserved_bytes, 4 * M);
    // Only D is known to the trace at the peak: A and B were allocated before it starts.
    assert_eq!(sizes(&fwd.largest_at_peak), vec![3 * M / 2]);
    // The unmarked entries that remain come before any marker the trace still holds.
    assert_eq!(trace.phases[0].name, BEFORE_FIRST_PHASE.to_string());
    // With the max_entries the caller gave, the reason says so.
    let bytes = dumps(&without_first_entries(2, 3), 4);
    let n = 14 - 3 + 3 * 2;
    let options = SummaryOptions {
        max_entries: Some(n),
        ..Default::default()
    };
    let s = summarize(&bytes[..], &options).expect("read");
    let reason = s.devices[0].trace.as_ref().unwrap().history.reason.clone();
    assert!(reason.unwrap().contains("the max_entries given"));
}

/// A snapshot from parts: segments and per-device traces as `Py` lists.
fn snapshot(segments: Vec<Py>, traces: Option<Vec<Py>>) -> Vec<u8> {
    let mut root = vec![(Py::str("segments"), Py::list(segments))];
    if let Some(traces) = traces {
        root.push((Py::str("device_traces"), Py::list(traces)));
    }
    dumps(&Py::dict(root), 4)
}

fn seg(device: i64, address: i128, blocks: &[(i128, &str)]) -> Py {
    let total: i128 = blocks.iter().map(|b| b.0).sum();
    let mut at = address;
    let blocks = blocks
        .iter()
        .map(|(size, state)| {
            let b = Py::dict(vec![
                (Py::str("address"), Py::Int(at)),
                (Py::str("size"), Py::Int(*size)),
                (Py::str("requested_size"), Py::Int(*size)),
                (Py::str("state"), Py::str(state)),
            ]);
            at += size;
            b
        })
        .collect();
    Py::dict(vec![
        (Py::str("device"), Py::int(device)),
        (Py::str("address"), Py::Int(address)),
        (Py::str("total_size"), Py::Int(total)),
        (
            Py::str("segment_type"),
            Py::str(if total <= 2 * MIB { "small" } else { "large" }),
        ),
        (Py::str("blocks"), Py::list(blocks)),
    ])
}

fn ev(action: &str, addr: i128, size: i128) -> Py {
    Py::dict(vec![
        (Py::str("action"), Py::str(action)),
        (Py::str("addr"), Py::Int(addr)),
        (Py::str("size"), Py::Int(size)),
    ])
}

#[test]
fn several_devices_no_frames_no_times() {
    let bytes = snapshot(
        vec![
            seg(0, 0x1000_0000, &[(2 * MIB, "inactive")]),
            seg(
                1,
                0x2000_0000,
                &[(MIB, "active_allocated"), (MIB, "inactive")],
            ),
            seg(
                1,
                0x3000_0000,
                &[(4 * MIB, "active_pending_free"), (16 * MIB, "inactive")],
            ),
        ],
        Some(vec![
            Py::list(vec![]),
            Py::list(vec![
                ev("segment_alloc", 0x2000_0000, 2 * MIB),
                ev("alloc", 0x2000_0000, MIB),
                ev("segment_alloc", 0x3000_0000, 20 * MIB),
                ev("alloc", 0x3000_0000, 4 * MIB),
                ev("free_requested", 0x3000_0000, 4 * MIB),
                ev("mystery", 0, 0),
            ]),
        ]),
    );
    let s = summary_of(&bytes);
    assert_eq!(s.devices.len(), 2);
    let d0 = &s.devices[0];
    assert!(d0.trace.is_none());
    assert_eq!(d0.segments.reserved_bytes, 2 * M);
    assert_eq!(d0.segments.inactive_split_bytes, 0, "one block: releasable");
    assert_eq!(d0.segments.pools[0].segment_type, "small");
    let d1 = &s.devices[1];
    assert_eq!(d1.segments.allocated_bytes, M);
    assert_eq!(d1.segments.active_bytes, 5 * M);
    assert_eq!(d1.segments.inactive_split_bytes, 17 * M);
    assert_eq!(d1.segments.largest_inactive_block_bytes, 16 * M);
    assert_eq!(d1.segments.pools.len(), 2);
    let trace = d1.trace.as_ref().expect("device 1 has a trace");
    assert!(!trace.history.truncated, "{:?}", trace.history);
    assert_eq!(trace.end_allocated_bytes, 5 * M);
    assert_eq!(trace.first_time_us, None);
    assert_eq!(trace.actions["mystery"], 1);
    assert_eq!(trace.phases.len(), 1);
    assert_eq!(trace.phases[0].name, BEFORE_FIRST_PHASE);
    let peak = &trace.phases[0].largest_at_peak;
    assert_eq!(sizes(peak), vec![4 * M, M]);
    assert!(peak[0].user_frame.is_none() && peak[0].stack_top.is_empty());
}

#[test]
fn a_snapshot_without_history() {
    let s = summary_of(&snapshot(
        vec![seg(0, 0x1000, &[(2 * MIB, "active_allocated")])],
        None,
    ));
    assert!(!s.history_recorded);
    assert!(s.devices[0].trace.is_none());
    assert_eq!(s.devices[0].segments.allocated_bytes, 2 * M);
    // torch.cuda.memory_snapshot(): the segments list alone.
    let bytes = dumps(
        &Py::list(vec![seg(0, 0x1000, &[(2 * MIB, "active_allocated")])]),
        4,
    );
    assert_eq!(summary_of(&bytes).devices[0].segments.segments, 1);
    // A one-segment list and a one-device trace list use APPEND without MARK.
    let s = summary_of(&snapshot(
        vec![seg(0, 0x1000, &[(MIB, "active_allocated")])],
        Some(vec![Py::list(vec![ev("alloc", 0x1000, MIB)])]),
    ));
    let t = s.devices[0].trace.as_ref().expect("a trace");
    assert_eq!((t.entries, t.end_allocated_bytes), (1, M));
}

#[test]
fn the_series_is_downsampled_without_losing_the_peak() {
    let mut entries = Vec::new();
    for i in 0..5000i128 {
        entries.push(ev("alloc", 0x10_0000 + i * 512, 512));
        if i != 3000 {
            entries.push(ev("free_completed", 0x10_0000 + i * 512, 512));
        }
    }
    entries.push(ev("free_completed", 0x10_0000 + 3000 * 512, 512));
    let s = summary_of(&snapshot(vec![], Some(vec![Py::list(entries)])));
    let t = s.devices[0].trace.as_ref().expect("a trace");
    assert!(t.series.len() <= SERIES_MAX_POINTS && t.series.len() > 1000);
    assert!(t.series_stride >= 8);
    assert_eq!(t.peak_allocated_bytes, 1024);
    assert_eq!(t.series.iter().map(|p| p.allocated_bytes).max(), Some(1024));
    assert!(t.series.windows(2).all(|w| w[0].event < w[1].event));
}

#[test]
fn refusals_name_the_opcode_and_the_offset() {
    // Protocol 0, as pickle.dumps({}, 0) writes it.
    let err = summarize(&b"(dp0\n."[..], &SummaryOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("0x64 ('d', DICT) at byte 1"),
        "unexpected message: {msg}"
    );
    // A GLOBAL (a class), which a snapshot never holds.
    let mut p = vec![0x80, 4, b'c'];
    p.extend_from_slice(b"os\nsystem\n");
    let msg = summarize(&p[..], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("GLOBAL") && msg.contains("at byte 2"), "{msg}");
    let msg = summarize(&[0x80u8, 9][..], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("protocol 9"), "{msg}");
    let full = dumps(&build(1), 4);
    let msg = summarize(&full[..full.len() / 2], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("truncated"), "{msg}");
    let msg = summarize(&dumps(&Py::str("hello"), 4)[..], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("not a PyTorch memory snapshot"), "{msg}");
    let msg = summarize(
        &dumps(&Py::dict(vec![(Py::str("a"), Py::Int(1))]), 4)[..],
        &SummaryOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("neither"), "{msg}");
    let msg = summarize(&[0x80u8, 4, b'h', 7][..], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("memo index 7 was never stored"), "{msg}");
    let mut huge = vec![0x80u8, 4, 0x8d];
    huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let msg = summarize(&huge[..], &SummaryOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("refused rather than use unbounded memory"),
        "{msg}"
    );
}

#[test]
fn the_opcode_writer_streams_what_dump_writes() {
    // The benchmark's path: opcodes by hand, sharing through memo indices.
    let mut p = Pickler::new(Vec::new(), 4).expect("vec");
    p.empty_dict();
    p.mark();
    let k_segments = p.str("segments");
    let _ = k_segments;
    p.empty_list();
    p.str("device_traces");
    p.empty_list();
    p.empty_list();
    p.mark();
    for i in 0..3 {
        p.empty_dict();
        p.mark();
        p.str("action");
        p.str("alloc");
        p.str("addr");
        p.int(4096 * (i + 1));
        p.str("size");
        p.int(512);
        p.setitems();
    }
    p.appends();
    p.append();
    p.setitems();
    let bytes = p.stop().expect("vec");
    let s = summary_of(&bytes);
    let trace = s.devices[0].trace.as_ref().expect("a trace");
    assert_eq!(trace.end_allocated_bytes, 1536);
    // No segment holds the 1,536 bytes the trace leaves allocated: said, not hidden.
    let reason = trace.history.reason.as_deref().unwrap_or("");
    assert!(reason.contains("do not hold"), "{reason}");
}

#[test]
fn shared_tuples_and_strings_come_back_from_the_memo() {
    let pool = Py::tuple(vec![Py::Int(1), Py::Int(7)]);
    let state = Py::str("inactive");
    let segs: Vec<Py> = (0..3)
        .map(|i| {
            Py::dict(vec![
                (Py::str("device"), Py::Int(0)),
                (Py::str("total_size"), Py::Int(MIB)),
                (Py::str("segment_type"), Py::str("small")),
                (Py::str("segment_pool_id"), pool.clone()),
                (
                    Py::str("blocks"),
                    Py::list(vec![Py::dict(vec![
                        (Py::str("size"), Py::Int(MIB)),
                        (Py::str("state"), state.clone()),
                        (Py::str("address"), Py::Int(i * MIB)),
                    ])]),
                ),
            ])
        })
        .collect();
    let s = summary_of(&snapshot(segs, None));
    let pools = &s.devices[0].segments.pools;
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool_id, Some([1, 7]));
    assert_eq!(pools[0].segments, 3);
    assert_eq!(pools[0].inactive_bytes, 3 * M);
}

#[test]
fn deep_nesting_is_cut_not_recursed_into() {
    let opts = SummaryOptions::default();
    // A million TUPLE1 around one integer: the tuple stays flat (dropping a million-deep value
    // would overflow the stack).
    let mut p = vec![0x80u8, 4, b'K', 1];
    p.extend(std::iter::repeat_n(0x85u8, 1_000_000));
    p.push(b'.');
    let msg = summarize(&p[..], &opts).unwrap_err().to_string();
    assert!(msg.contains("not a PyTorch memory snapshot"), "{msg}");
    // A chain of memoized lists, each fetched into the next, in the built allocator settings.
    let mut p = Pickler::new(Vec::new(), 4).expect("vec");
    p.empty_dict();
    p.mark();
    p.str("device_traces");
    p.empty_list();
    p.str("allocator_settings");
    p.empty_dict();
    let mut previous = None;
    for batch in 0..300 {
        p.mark();
        for _ in 0..1000 {
            p.str("k");
            let list = p.empty_list();
            match previous {
                Some(i) => p.get(i),
                None => p.int(batch),
            }
            p.append();
            previous = Some(list);
        }
        p.setitems();
    }
    p.setitems();
    let bytes = p.stop().expect("vec");
    let s = summarize(&bytes[..], &opts).expect("read");
    assert!(s.allocator_settings.is_some());
    // Lists opened inside lists without end: refused by the stack bound.
    let mut p = vec![0x80u8, 4];
    p.extend(std::iter::repeat_n(b']', 1 << 19));
    p.push(b'.');
    let msg = summarize(&p[..], &opts).unwrap_err().to_string();
    assert!(msg.contains("stack"), "{msg}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn small_snapshot() -> Vec<u8> {
        dumps(&build(2), 4)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = summarize(&bytes[..], &SummaryOptions::default());
            let mut framed = vec![0x80u8, 4];
            framed.extend_from_slice(&bytes);
            let _ = summarize(&framed[..], &SummaryOptions::default());
        }

        #[test]
        fn mutated_snapshots_never_panic(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = small_snapshot();
            for (at, byte) in &edits {
                let i = at.index(bytes.len());
                bytes[i] = *byte;
            }
            let _ = summarize(&bytes[..], &SummaryOptions::default());
            let end = cut.index(bytes.len());
            let _ = summarize(&bytes[..end], &SummaryOptions::default());
        }

        #[test]
        fn spliced_opcodes_never_panic(ops in proptest::collection::vec(
            prop::sample::select(vec![
                b"}".to_vec(), b"]".to_vec(), b")".to_vec(), b"(".to_vec(), b"s".to_vec(),
                b"u".to_vec(), b"a".to_vec(), b"e".to_vec(), b"t".to_vec(), b"\x85".to_vec(),
                b"\x86".to_vec(), b"\x87".to_vec(), b"\x94".to_vec(), b"h\x00".to_vec(),
                b"h\x01".to_vec(), b"q\x00".to_vec(), b"N".to_vec(), b"K\x05".to_vec(),
                b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x7f".to_vec(),
                b"\x8c\x08segments".to_vec(), b"\x8c\x0ddevice_traces".to_vec(),
                b"\x8c\x06blocks".to_vec(), b"\x8c\x06frames".to_vec(), b"\x8c\x04size".to_vec(),
                b"\x8c\x06action".to_vec(), b"\x8c\x05alloc".to_vec(), b".".to_vec(),
            ]),
            0..64,
        )) {
            let mut bytes = vec![0x80u8, 4];
            for op in &ops {
                bytes.extend_from_slice(op);
            }
            bytes.push(b'.');
            let _ = summarize(&bytes[..], &SummaryOptions::default());
        }
    }

    #[test]
    fn every_prefix_of_a_snapshot_is_an_error_not_a_panic() {
        let bytes = small_snapshot();
        for end in 0..bytes.len() {
            assert!(summarize(&bytes[..end], &SummaryOptions::default()).is_err());
        }
        assert!(summarize(&bytes[..], &SummaryOptions::default()).is_ok());
    }
}

#[test]
fn frames_of_the_fixture_are_interned_once() {
    // Many entries share few distinct frames and stacks: the reader keeps those, not the
    // entries (a crude check that nothing grows per entry).
    let mut folder = fold::Folder::new(SummaryOptions::default());
    let run = pickle::run(P4, &mut folder).expect("read");
    assert!(run.strings.len() < 100, "{} strings", run.strings.len());
}

/// Autograd's threads carry no marker (PyTorch's metadata is thread-local): an unmarked entry
/// inside a phase's wall-clock bounds belongs to that phase, a marked entry keeps its marker.
#[test]
fn unmarked_entries_inside_a_phase_bounds_belong_to_it() {
    let at = |e: Py, t: i128, meta: &str| match e {
        Py::Dict(items) => {
            let mut items = items.as_ref().clone();
            items.push((Py::str("time_us"), Py::Int(t)));
            items.push((Py::str("user_metadata"), Py::str(meta)));
            Py::dict(items)
        }
        other => other,
    };
    let bytes = snapshot(
        vec![seg(
            0,
            0x1000_0000,
            &[(3 * MIB, "active_allocated"), (MIB, "inactive")],
        )],
        Some(vec![Py::list(vec![
            at(
                ev("segment_alloc", 0x1000_0000, 4 * MIB),
                100,
                "iteragpu phase 0 forward",
            ),
            at(
                ev("alloc", 0x1000_0000, MIB),
                110,
                "iteragpu phase 0 forward",
            ),
            // The backward thread: no marker, inside phase 1's bounds.
            at(ev("alloc", 0x1010_0000, 2 * MIB), 210, ""),
            // After every phase: stays between phases.
            at(ev("alloc", 0x1030_0000, 0), 400, ""),
        ])]),
    );
    let bounds = vec![
        PhaseBound {
            index: 0,
            name: "forward".into(),
            start_us: 90,
            end_us: 150,
        },
        PhaseBound {
            index: 1,
            name: "backward".into(),
            start_us: 200,
            end_us: 300,
        },
    ];
    let s = summarize(
        &bytes[..],
        &SummaryOptions {
            phase_bounds: bounds,
            ..Default::default()
        },
    )
    .expect("read");
    let trace = s.devices[0].trace.as_ref().unwrap();
    let names: Vec<&str> = trace.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["forward", "backward", BETWEEN_PHASES]);
    let backward = phase(trace, "backward");
    assert_eq!(backward.index, Some(1));
    assert_eq!(backward.peak_allocated_bytes, 3 * M);
    // Without the bounds, the backward thread's allocation is unmarked.
    let s = summary_of(&bytes);
    let names: Vec<String> = s.devices[0]
        .trace
        .as_ref()
        .unwrap()
        .phases
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(names, ["forward", BETWEEN_PHASES]);
}

/// Files made to exhaust the reader: each must give a bounded summary (or a stated refusal)
/// quickly and within little memory.
mod hostile {
    use super::*;
    use std::time::{Duration, Instant};

    /// The process's peak resident memory (Linux), in bytes.
    fn peak_rss() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    fn short(out: &mut Vec<u8>, text: &str) {
        out.push(0x8c);
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
    }

    /// A tuple of `tuple_items` integers memoized then fetched `fetches` times into a list; a
    /// list of `list_items` integers memoized in the allocator settings then fetched
    /// `list_fetches` times into another. An unpickler that copies what it fetches needs
    /// `fetches × tuple_items + list_fetches × list_items` values.
    fn memo_bomb(
        tuple_items: usize,
        fetches: usize,
        list_items: usize,
        list_fetches: usize,
    ) -> Vec<u8> {
        let mut p = vec![0x80, 4, b'}', b'('];
        short(&mut p, "segments");
        p.push(b']');
        short(&mut p, "t");
        p.push(b'(');
        p.extend(std::iter::repeat_n([b'K', 7], tuple_items).flatten());
        p.extend_from_slice(b"tq\x00");
        short(&mut p, "bomb");
        p.extend_from_slice(b"](");
        p.extend(std::iter::repeat_n([b'h', 0], fetches).flatten());
        p.push(b'e');
        short(&mut p, "allocator_settings");
        p.extend_from_slice(b"}(");
        short(&mut p, "big");
        p.push(b']');
        for chunk in 0..list_items.div_ceil(1000) {
            p.push(b'(');
            let n = (list_items - chunk * 1000).min(1000);
            p.extend(std::iter::repeat_n([b'K', 1], n).flatten());
            p.push(b'e');
        }
        p.extend_from_slice(b"q\x01u(");
        short(&mut p, "copies");
        p.extend_from_slice(b"](");
        p.extend(std::iter::repeat_n([b'h', 1], list_fetches).flatten());
        p.extend_from_slice(b"euu.");
        p
    }

    #[test]
    fn a_memo_bomb_is_shared_not_copied() {
        // 447 KB. Copied at each fetch: 60,000 × 64 + 60,000 × 100,000 values (about 144 GB).
        let bytes = memo_bomb(64, 60_000, 100_000, 60_000);
        assert!(bytes.len() < 500_000, "{}", bytes.len());
        let started = Instant::now();
        let s = summarize(&bytes[..], &SummaryOptions::default()).expect("a summary");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        // The settings are converted within their bound, and the cut is said.
        let settings = s.allocator_settings.as_ref().expect("settings");
        let values = serde_json::to_string(settings).unwrap().len();
        assert!(values < 200_000, "{values}");
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("allocator settings were cut")),
            "{:?}",
            s.notes
        );
        let json = serde_json::to_vec_pretty(&s).unwrap();
        assert!(json.len() < 1 << 20, "{}", json.len());
        if let Some(peak) = peak_rss() {
            assert!(peak < 1 << 30, "peak resident memory {peak} bytes");
        }
        // A tuple longer than a snapshot's tuples is not kept, and that is said.
        let s = summarize(
            &memo_bomb(50_000, 60_000, 10, 10)[..],
            &SummaryOptions::default(),
        )
        .expect("a summary");
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("tuples of more than 64 items")),
            "{:?}",
            s.notes
        );
    }

    /// Ten allocations alive in each of `phases` phases (named with `name_bytes` bytes), each
    /// allocated by the same six frames whose filename and function name are `string_bytes`
    /// long: one string object in the file, shared as Python shares it.
    fn frame_bomb(string_bytes: usize, name_bytes: usize, phases: usize) -> Vec<u8> {
        let big = Py::str(&format!("/{}.py", "x".repeat(string_bytes - 4)));
        let frames: Vec<Py> = (0..6)
            .map(|line| {
                Py::dict(vec![
                    (Py::str("filename"), big.clone()),
                    (Py::str("line"), Py::int(line + 1)),
                    (Py::str("name"), big.clone()),
                ])
            })
            .collect();
        let stack = Py::list(frames);
        let long = "n".repeat(name_bytes);
        let mut entries = Vec::new();
        let mut address = 1i128 << 30;
        for k in 0..phases {
            let marker = Py::str(&format!("{PHASE_MARKER_PREFIX}{k} {long}{k}"));
            for j in 0..10 {
                entries.push(Py::dict(vec![
                    (Py::str("action"), Py::str("alloc")),
                    (Py::str("addr"), Py::Int(address)),
                    (Py::str("size"), Py::Int((j + 1) << 12)),
                    (Py::str("user_metadata"), marker.clone()),
                    (Py::str("frames"), stack.clone()),
                ]));
                address += MIB;
            }
        }
        snapshot(Vec::new(), Some(vec![Py::list(entries)]))
    }

    #[test]
    fn a_long_frame_string_is_stored_once_and_cut() {
        // 1.5 MB. Copied into every allocation: 50 phases × 10 allocations × 6 frames × 2 × 1 MB.
        let bytes = frame_bomb(1 << 20, 10_000, 50);
        let started = Instant::now();
        let s = summarize(&bytes[..], &SummaryOptions::default()).expect("a summary");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        let trace = s.devices[0].trace.as_ref().expect("a trace");
        assert_eq!(trace.phases.len(), 50);
        // Each frame once in the table, its strings cut to 1,000 characters ending with "…".
        assert_eq!(s.frames.len(), STACK_TOP_FRAMES);
        for f in &s.frames {
            assert_eq!(f.filename.chars().count(), MAX_STRING_CHARS);
            assert!(f.filename.ends_with('…'));
        }
        // In memory, the allocations share the table's strings (no copy per allocation).
        let all: Vec<&Allocation> = s.allocations().collect();
        assert_eq!(all.len(), 500);
        let first = &all[0].stack_top[0];
        assert!(
            all.iter()
                .all(|a| Arc::ptr_eq(&a.stack_top[0].filename, &first.filename))
        );
        // Phase names are cut too, wherever they are shown.
        assert!(
            trace
                .phases
                .iter()
                .all(|p| p.name.chars().count() <= MAX_STRING_CHARS)
        );
        assert!(all.iter().all(|a| {
            a.phase
                .as_deref()
                .is_some_and(|p| p.chars().count() <= MAX_STRING_CHARS)
        }));
        // In JSON the allocations refer to the table by position.
        let json = serde_json::to_string_pretty(&s).unwrap();
        assert!(json.len() < 1 << 20, "{}", json.len());
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        let a = &doc["devices"][0]["trace"]["phases"][0]["largest_at_peak"][0];
        assert!(
            a["user_frame"].is_u64() && a["stack_top"][0].is_u64(),
            "{a}"
        );
        let back: SnapshotSummary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        if let Some(peak) = peak_rss() {
            assert!(peak < 1 << 30, "peak resident memory {peak} bytes");
        }
    }

    /// `phases` phases of one entry each, after ten allocations that stay alive: each phase
    /// shows the ten at its peak.
    fn phase_flood(phases: usize) -> Vec<u8> {
        let frames: Vec<Py> = (0..6)
            .map(|line| {
                Py::dict(vec![
                    (
                        Py::str("filename"),
                        Py::str(&format!("/home/u/model_{line}.py")),
                    ),
                    (Py::str("line"), Py::int(line + 1)),
                    (Py::str("name"), Py::str("forward")),
                ])
            })
            .collect();
        let stack = Py::list(frames);
        let mut entries = Vec::new();
        for j in 0..10 {
            entries.push(Py::dict(vec![
                (Py::str("action"), Py::str("alloc")),
                (Py::str("addr"), Py::Int((j + 1) << 30)),
                (Py::str("size"), Py::Int((j + 1) << 20)),
                (Py::str("frames"), stack.clone()),
            ]));
        }
        for k in 0..phases {
            entries.push(Py::dict(vec![
                (Py::str("action"), Py::str("alloc")),
                (Py::str("addr"), Py::Int(4096 * (k as i128 + 1))),
                (Py::str("size"), Py::Int(512)),
                (
                    Py::str("user_metadata"),
                    Py::str(&format!("{PHASE_MARKER_PREFIX}{k} step")),
                ),
                (Py::str("frames"), stack.clone()),
            ]));
        }
        snapshot(Vec::new(), Some(vec![Py::list(entries)]))
    }

    #[test]
    fn a_flood_of_phases_is_cut_to_the_size_bound_with_a_note() {
        let bytes = phase_flood(10_000);
        // The measurement's own phases are kept first (the 10,001st phase of a device is merged
        // into the one before: 9,999 is not one).
        let options = SummaryOptions {
            phase_bounds: (9_980..9_990)
                .map(|i| PhaseBound {
                    index: i,
                    name: "step".into(),
                    start_us: 0,
                    end_us: 0,
                })
                .collect(),
            ..Default::default()
        };
        let started = Instant::now();
        let s = summarize(&bytes[..], &options).expect("a summary");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
        let len = bound::stored_len(&s);
        assert!(len <= MAX_SUMMARY_BYTES, "{len}");
        let note = s.notes.last().expect("a note");
        assert!(
            note.contains("above the 8,388,608 bytes it may take"),
            "{note}"
        );
        assert!(note.contains("phases"), "{note}");
        let trace = s.devices[0].trace.as_ref().unwrap();
        assert!(trace.phases.len() < 10_000);
        for i in 9_980..9_990 {
            assert!(
                trace.phases.iter().any(|p| p.index == Some(i)),
                "phase {i} dropped"
            );
        }
        // Without the cut it would not fit.
        let mut folder = fold::Folder::new(options.clone());
        let run = pickle::run(&bytes[..], &mut folder).unwrap();
        let whole = folder.finish(run).unwrap();
        assert!(bound::stored_len(&whole) > MAX_SUMMARY_BYTES);
    }

    #[test]
    fn a_result_without_the_frame_table_is_still_read() {
        let s = summary_of(P4);
        assert!(!s.frames.is_empty());
        let json = serde_json::to_value(&s).unwrap();
        // Frames inline, as results were written before the table.
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("frames");
        for d in old["devices"].as_array_mut().unwrap() {
            let inline = |a: &mut serde_json::Value| {
                if let Some(i) = a["user_frame"].as_u64() {
                    a["user_frame"] = serde_json::to_value(&s.frames[i as usize]).unwrap();
                }
                let top: Vec<serde_json::Value> = a["stack_top"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| serde_json::to_value(&s.frames[i.as_u64().unwrap() as usize]).unwrap())
                    .collect();
                a["stack_top"] = top.into();
            };
            for a in d["largest_blocks_at_end"].as_array_mut().unwrap() {
                inline(a);
            }
            for p in d["trace"]["phases"].as_array_mut().unwrap() {
                for a in p["largest_at_peak"].as_array_mut().unwrap() {
                    inline(a);
                }
            }
        }
        let back: SnapshotSummary = serde_json::from_value(old).unwrap();
        assert_eq!(back, s);
        // The table after the allocations (keys sorted) reads the same.
        let sorted = serde_json::to_string(&json).unwrap();
        assert!(sorted.find("\"devices\"") < sorted.find("\"frames\""));
        let back: SnapshotSummary = serde_json::from_str(&sorted).unwrap();
        assert_eq!(back, s);
        // A position outside the table is an error, not a panic.
        let mut bad = json.clone();
        bad["devices"][0]["largest_blocks_at_end"][0]["user_frame"] = 999.into();
        let err = serde_json::from_value::<SnapshotSummary>(bad).unwrap_err();
        assert!(err.to_string().contains("frame 999"), "{err}");
        // An allocation written alone (explain's ledger) has its frames inline.
        let a = s.allocations().find(|a| a.user_frame.is_some()).unwrap();
        let alone = serde_json::to_value(a).unwrap();
        assert!(alone["user_frame"]["filename"].is_string(), "{alone}");
    }

    #[test]
    fn strings_are_cut_at_a_thousand_characters() {
        assert_eq!(cut("short"), "short");
        let exact = "é".repeat(MAX_STRING_CHARS);
        assert_eq!(cut(&exact), exact.as_str());
        let long = "é".repeat(MAX_STRING_CHARS + 1);
        let c = cut(&long);
        assert_eq!(c.chars().count(), MAX_STRING_CHARS);
        assert!(c.ends_with("é…"));
    }
}
