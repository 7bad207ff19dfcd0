//! The memory-snapshot reader (`explain::snapshot`) on a committed fixture written by CPython's
//! pickler, and on snapshots the fake torch writes, checked against the fake's own counters.

use crate::common::fixture;
use iteragpu::explain::snapshot::{
    BETWEEN_PHASES, PhaseSummary, SnapshotSummary, SummaryOptions, TraceSummary, summarize_file,
};
use iteragpu::schema::history::LiveSummary;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

fn phase<'a>(trace: &'a TraceSummary, name: &str) -> &'a PhaseSummary {
    trace
        .phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no phase {name}: {:?}", trace.phases))
}

#[test]
fn a_committed_snapshot_is_summarised() {
    let path = fixture("snapshots/phases-p4.pickle");
    let s = summarize_file(&path, &SummaryOptions::default()).expect("the fixture is read");
    assert_eq!(s.pickle_protocol, 4);
    assert_eq!(
        s.bytes_read,
        std::fs::metadata(&path).expect("fixture").len()
    );
    let dev = &s.devices[0];
    assert_eq!(dev.segments.reserved_bytes, 4 * MIB);
    let trace = dev.trace.as_ref().expect("the fixture has a trace");
    assert!(!trace.history.truncated);
    let fwd = phase(trace, "forward");
    assert_eq!(fwd.index, Some(1));
    assert_eq!(fwd.peak_allocated_bytes, 3 * MIB);
    let largest = &fwd.largest_at_peak[0];
    assert_eq!(largest.size_bytes, 3 * MIB / 2);
    let user = largest.user_frame.as_ref().expect("a user frame");
    assert_eq!((&*user.filename, user.line), ("/home/u/model.py", 30));
    assert_eq!(fwd.ooms.len(), 1);
    // The summary is plain data: it goes through JSON unchanged.
    let json = serde_json::to_string(&s).expect("serializes");
    let back: SnapshotSummary = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, s);
}

/// Runs tests/fixtures/snapshots/fake_timeline.py on the fake torch; its snapshot and what the
/// fake's counters said. python3 is needed by every test of the fake torch (docs/development.md).
fn fake_run(
    dir: &Path,
    devices: u32,
    max_entries: Option<u64>,
) -> (SnapshotSummary, serde_json::Value) {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("snapshots/fake_timeline.py"))
        .arg(dir)
        .env("PYTHONPATH", fixture("../fake_torch"))
        .env("FAKE_TORCH_DEVICES", devices.to_string());
    for var in [
        "FAKE_TORCH_CAPACITY",
        "FAKE_TORCH_NO_CUDA",
        "FAKE_TORCH_CPU_ONLY",
        "FAKE_TORCH_CRASH_AFTER_SYNC",
        "FAKE_TORCH_HANG_AFTER_SYNC",
        "FAKE_TORCH_NOISE",
        "FAKE_TORCH_HANG_ABOVE",
        "PYTORCH_CUDA_ALLOC_CONF",
    ] {
        cmd.env_remove(var);
    }
    if let Some(n) = max_entries {
        cmd.arg(n.to_string());
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("python3 cannot run (the fake torch needs it): {e}"));
    assert!(
        out.status.success(),
        "fake_timeline.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("expected.json")).expect("expected.json is written"),
    )
    .expect("expected.json is JSON");
    let options = SummaryOptions {
        max_entries,
        ..Default::default()
    };
    let summary = summarize_file(&dir.join("snapshot.pickle"), &options)
        .expect("the fake's snapshot is read");
    (summary, expected)
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn the_fake_torch_snapshot_agrees_with_its_counters() {
    for devices in [1u32, 2] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (s, expected) = fake_run(dir.path(), devices, None);
        assert_eq!(s.devices.len(), devices as usize);
        assert!(s.history_recorded);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
        let settings = s.allocator_settings.as_ref().expect("allocator settings");
        assert_eq!(settings["expandable_segments"], false);
        for dev in &s.devices {
            let key = dev.device.to_string();
            let stats = &expected["stats"][&key];
            let seg = &dev.segments;
            assert_eq!(seg.reserved_bytes, u(&stats["reserved_bytes.all.current"]));
            assert_eq!(
                seg.allocated_bytes,
                u(&stats["allocated_bytes.all.current"])
            );
            assert_eq!(
                seg.requested_bytes,
                u(&stats["requested_bytes.all.current"])
            );
            assert_eq!(seg.segments, u(&stats["segment.all.current"]));
            assert_eq!(
                seg.inactive_split_bytes,
                u(&stats["inactive_split_bytes.all.current"])
            );
            let trace = dev.trace.as_ref().expect("a trace per device");
            assert!(!trace.history.truncated, "{:?}", trace.history);
            assert_eq!(trace.end_allocated_bytes, seg.active_bytes);
            let names: Vec<&str> = trace.phases.iter().map(|p| p.name.as_str()).collect();
            let marked: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| !n.starts_with('('))
                .collect();
            let wanted: Vec<&str> = if dev.device == 0 {
                vec!["model_load", "forward", "big", "train_step"]
            } else {
                vec!["model_load", "forward", "train_step"]
            };
            assert_eq!(marked, wanted, "device {key}: {names:?}");
            for p in expected["phases"].as_array().expect("phases") {
                let name = p["name"].as_str().expect("name");
                let Some(mine) = trace.phases.iter().find(|x| x.name == name) else {
                    continue;
                };
                let fake = &p["devices"][&key];
                let what = format!("device {key}, phase {name}");
                assert_eq!(mine.index, p["index"].as_u64(), "{what}");
                assert_eq!(
                    mine.start_allocated_bytes,
                    u(&fake["start_allocated"]),
                    "{what}"
                );
                assert_eq!(
                    mine.start_reserved_bytes,
                    u(&fake["start_reserved"]),
                    "{what}"
                );
                assert_eq!(
                    mine.peak_allocated_bytes,
                    u(&fake["peak_allocated"]),
                    "{what}"
                );
                assert_eq!(
                    mine.peak_reserved_bytes,
                    u(&fake["peak_reserved"]),
                    "{what}"
                );
                assert_eq!(
                    mine.end_allocated_bytes,
                    u(&fake["end_allocated"]),
                    "{what}"
                );
                assert_eq!(mine.end_reserved_bytes, u(&fake["end_reserved"]), "{what}");
            }
            if dev.device == 0 {
                // The 64 MiB tensor made the peak of "big", allocated on the script's line.
                let big = phase(trace, "big");
                let top = &big.largest_at_peak[0];
                assert_eq!(top.size_bytes, 64 * MIB);
                assert_eq!(top.phase.as_deref(), Some("big"));
                let user = top.user_frame.as_ref().expect("a user frame");
                assert!(user.filename.ends_with("fake_timeline.py"), "{user:?}");
                assert_eq!(user.line, u(&expected["lines"]["big"]) as i64);
                assert!(top.stack_top.len() >= 2, "{:?}", top.stack_top);
                // empty_cache() between the phases, unmarked.
                let between = phase(trace, BETWEEN_PHASES);
                assert!(between.end_reserved_bytes < between.start_reserved_bytes);
                assert!(trace.actions.contains_key("segment_free"));
            }
        }
    }
}

#[test]
fn a_truncated_fake_history_is_said_and_ends_at_the_counters() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (s, expected) = fake_run(dir.path(), 1, Some(8));
    let dev = &s.devices[0];
    let trace = dev.trace.as_ref().expect("a trace");
    assert_eq!(trace.entries, 8, "max_entries keeps the newest entries");
    assert!(trace.history.truncated);
    let reason = trace.history.reason.as_deref().expect("a reason");
    assert!(reason.contains("max_entries"), "{reason}");
    assert!(trace.history.allocated_before_first_entry_bytes > 0);
    let stats = &expected["stats"]["0"];
    assert_eq!(
        trace.end_allocated_bytes,
        u(&stats["allocated_bytes.all.current"])
    );
    assert_eq!(
        trace.end_reserved_bytes,
        u(&stats["reserved_bytes.all.current"])
    );
    let last = trace.phases.last().expect("a phase");
    assert_eq!(last.name, "train_step");
    assert_eq!(
        last.end_allocated_bytes,
        u(&stats["allocated_bytes.all.current"])
    );
}

/// `measure --timeline` end to end: the snapshot beside the result (never over a file), its size
/// and SHA-256, the summary's phases and peaks equal to the result's own readings, `explain`
/// naming what was alive at the peak and the line that allocated it, and the fiche's chart.
#[test]
fn measure_timeline_keeps_the_snapshot_beside_the_result() {
    use crate::common::{iteragpu, read_json, with_fake_torch};
    use predicates::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    with_fake_torch()
        .args(["measure", "--width", "512", "--timeline", "--output"])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("r.snapshot.pickle"));
    let doc = read_json(&out);
    let t = &doc["timeline"];
    let snapshot = dir.path().join("r.snapshot.pickle");
    assert_eq!(t["path"], snapshot.to_str().unwrap());
    let bytes = std::fs::read(&snapshot).unwrap();
    assert_eq!(t["bytes"], bytes.len() as u64);
    let sha: String =
        sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&bytes))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
    assert_eq!(t["sha256"], sha);
    assert_eq!(doc["history"]["mode"], "timeline");
    assert_eq!(doc["history"]["phase_markers"], true);
    let only_temporary = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".iteragpu-snapshot")
        })
        .count();
    assert_eq!(only_temporary, 0, "no temporary file left behind");

    // Every phase of the result is in the trace, with the fake's counters as its peak.
    let summary: SnapshotSummary = serde_json::from_value(t["summary"].clone()).unwrap();
    let trace = summary.devices[0].trace.as_ref().unwrap();
    for p in doc["phases"].as_array().unwrap() {
        let index = p["index"].as_u64().unwrap();
        let traced = trace
            .phases
            .iter()
            .find(|q| q.index == Some(index))
            .unwrap_or_else(|| panic!("phase {index} not in the trace"));
        assert_eq!(traced.name, p["name"].as_str().unwrap());
        assert_eq!(
            traced.peak_allocated_bytes,
            p["devices"][0]["peak_allocated_bytes"].as_u64().unwrap(),
            "{}",
            traced.name
        );
    }
    iteragpu()
        .arg("explain")
        .arg(&out)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("alive at the peak")
                .and(predicate::str::contains("iteragpu/workloads/dense.py:")),
        );
    let html = dir.path().join("fiche.html");
    iteragpu()
        .arg("report")
        .arg(&out)
        .arg("--output")
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("allocated and reserved over time"));
    assert!(page.contains("<polyline"));

    // A second run refuses to replace the snapshot, before anything runs.
    let again = dir.path().join("r2.json");
    std::fs::write(dir.path().join("r2.snapshot.pickle"), b"keep me").unwrap();
    with_fake_torch()
        .args(["measure", "--width", "512", "--timeline", "--output"])
        .arg(&again)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("r2.snapshot.pickle"));
    assert!(!again.exists());
    assert_eq!(
        std::fs::read(dir.path().join("r2.snapshot.pickle")).unwrap(),
        b"keep me"
    );
    // Where a timeline means nothing, it is refused.
    for cmd in [
        &["sweep", "--vary", "batch=1,2", "--timeline"][..],
        &["predict", "--timeline"][..],
    ] {
        with_fake_torch()
            .args(cmd)
            .arg("--output")
            .arg(dir.path().join("x.json"))
            .assert()
            .code(1)
            .stderr(predicate::str::contains("--timeline"));
    }
}

/// A workload whose snapshot is made to exhaust the reader (tests/fixtures/scripts/
/// hostile_snapshot.py: a memo bomb, a 1 MB frame string shown by every allocation of 50 phases
/// with 10,000-byte names). Before the bounds, the first needed about 144 GB and the second wrote
/// gigabytes (both aborted the CLI and lost the measurement). Now the measurement is written,
/// with a bounded summary, and `explain` and `report` read it.
#[test]
fn a_hostile_snapshot_never_loses_the_measurement() {
    use crate::common::{iteragpu, read_json, with_fake_torch};
    let dir = tempfile::tempdir().unwrap();
    for kind in ["memo", "frames"] {
        let out = dir.path().join(format!("{kind}.json"));
        let started = std::time::Instant::now();
        with_fake_torch()
            .args(["measure", "--timeline", "--script"])
            .arg(fixture("scripts/hostile_snapshot.py"))
            .arg("--output")
            .arg(&out)
            .env("HOSTILE_SNAPSHOT", kind)
            .assert()
            .success();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{kind}: {:?}",
            started.elapsed()
        );
        let size = std::fs::metadata(&out).unwrap().len();
        assert!(size < 9 << 20, "{kind}: a result of {size} bytes");
        let doc = read_json(&out);
        assert_eq!(doc["status"], "ok", "{kind}");
        assert_eq!(doc["phases"][0]["name"], "work");
        let t = &doc["timeline"];
        assert!(t["path"].is_string(), "{kind}: {t}");
        let summary: SnapshotSummary = serde_json::from_value(t["summary"].clone())
            .unwrap_or_else(|e| panic!("{kind}: {e}: {}", t["summary_reason"]));
        if kind == "frames" {
            let trace = summary.devices[0].trace.as_ref().unwrap();
            assert_eq!(trace.phases.len(), 50);
            assert!(summary.frames.len() <= 6);
            assert!(
                summary
                    .frames
                    .iter()
                    .all(|f| f.filename.chars().count() <= 1000)
            );
        }
        iteragpu().arg("explain").arg(&out).assert().success();
        let html = dir.path().join(format!("{kind}.html"));
        iteragpu()
            .arg("report")
            .arg(&out)
            .arg("--output")
            .arg(&html)
            .assert()
            .success();
        let page = std::fs::metadata(&html).unwrap().len();
        assert!(page < 16 << 20, "{kind}: a fiche of {page} bytes");
    }
}

#[path = "../../fuzz/support/snapshot_summary.rs"]
mod snapshot_summary;

#[path = "../../fuzz/support/oom_message.rs"]
mod oom_message;

/// The bodies of the fuzz targets `snapshot_summary` and `oom_message` (`cargo fuzz run …`) on
/// random inputs: snapshot fixtures with bytes changed, spliced opcodes, OOM messages with their
/// numbers and words changed.
mod fuzz_bodies {
    use super::{oom_message, snapshot_summary};
    use crate::common::fixture;
    use proptest::prelude::*;

    fn p4() -> Vec<u8> {
        std::fs::read(fixture("snapshots/phases-p4.pickle")).unwrap()
    }

    const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Process 4242 has 77.59 GiB memory in use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

    #[test]
    fn the_fixtures_pass_the_bodies() {
        let mut input = vec![3u8];
        input.extend(p4());
        snapshot_summary::run(&input).unwrap();
        oom_message::run(OOM.as_bytes()).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        #[test]
        fn mutated_snapshots(
            knob in any::<u8>(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        ) {
            let mut input = vec![knob];
            input.extend(p4());
            for (at, byte) in &edits {
                let i = 1 + at.index(input.len() - 1);
                input[i] = *byte;
            }
            prop_assert_eq!(snapshot_summary::run(&input), Ok(()));
        }

        #[test]
        fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert_eq!(snapshot_summary::run(&bytes), Ok(()));
            prop_assert_eq!(oom_message::run(&bytes), Ok(()));
        }

        #[test]
        fn mutated_oom_messages(
            edits in proptest::collection::vec(
                (any::<prop::sample::Index>(), prop::sample::select(vec![
                    "0", "9", ".", " ", "GiB", "MiB", "KiB", "bytes", "free", "total capacity",
                    "Tried to allocate", "Process", "has", "memory in use", "-1", "99999999999999999999",
                ])),
                0..8,
            ),
        ) {
            let mut text = OOM.to_string();
            for (at, word) in &edits {
                let mut i = at.index(text.len());
                while !text.is_char_boundary(i) {
                    i -= 1;
                }
                text.insert_str(i, word);
            }
            prop_assert_eq!(oom_message::run(text.as_bytes()), Ok(()));
        }
    }
}

/// The live blocks at an out-of-memory, made by the snapshot reader from a snapshot shaped as
/// PyTorch's `torch.cuda.memory._snapshot()` returns it (pickled by CPython, as the worker dumps
/// it): the largest live blocks first, at most 10, the workload's own frame before PyTorch's
/// (also from a frame list the block shares with its segment),
/// other devices and free blocks left out. A block freed and still awaiting its stream counts in
/// the live bytes but is not listed: the workload no longer holds it.
#[test]
fn the_live_blocks_at_an_out_of_memory_are_summarised_largest_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oom.pickle");
    let code = r#"
import pickle, sys
torch_frame = {"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"}
own = {"filename": "/home/me/train.py", "line": 42, "name": "step"}
small = [{"size": 512, "requested_size": 4, "state": "active_allocated", "frames": [own]} for _ in range(11)]
# As PyTorch: the segment and the block that made it share one frame list, the segment's first.
shared = [torch_frame, own]
snapshot = {"segments": [
    {"device": 0, "total_size": 20971520, "frames": shared, "blocks": [
        {"size": 8388608, "requested_size": 8000000, "state": "active_allocated", "frames": shared},
        {"size": 2097152, "requested_size": 2097152, "state": "active_pending_free", "frames": []},
        {"size": 10485760, "state": "inactive", "frames": []}]},
    {"device": 0, "total_size": 2097152, "blocks": small + [
        {"size": 2091520, "state": "inactive"}]},
    {"device": 1, "total_size": 1073741824, "blocks": [
        {"size": 1073741824, "state": "active_allocated", "frames": [own]}]}]}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snapshot, f)
"#;
    let out = Command::new("python3")
        .args(["-c", code])
        .arg(&path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = summarize_file(&path, &SummaryOptions::default()).expect("the pickle is read");
    let s = LiveSummary::of_device(&summary, 0);
    assert_eq!(s.segments, 2);
    assert_eq!(s.reserved_bytes, 20971520 + 2097152);
    assert_eq!(s.live_bytes, 8388608 + 2097152 + 11 * 512);
    assert_eq!(s.free_bytes, 10485760 + 2091520);
    assert_eq!(s.largest_free_block, 10485760);
    let live = &s.largest_live;
    assert_eq!(live.len(), 10, "limited to the largest ten");
    assert_eq!(live[0].bytes, 8388608);
    let files: Vec<&str> = live[0]
        .frames
        .iter()
        .map(|f| f.filename.as_deref().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "/home/me/train.py",
            "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py"
        ]
    );
    assert_eq!(live[1].bytes, 512);
    assert_eq!(live[1].frames[0].line, Some(42));
}
