//! `explain --snapshot`: a user's own PyTorch snapshot (the CPython-pickled fixture of
//! `tests/fixtures/snapshots/user_snapshot.py`, torch's exact keys), checked against the figures
//! its script wrote; the snapshot without a trace; the files written; each bad input refused.

use crate::common::{Run, fixture, read_json};
use serde_json::Value;
use std::path::PathBuf;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

fn user(name: &str) -> PathBuf {
    fixture(&format!("snapshots/user/{name}"))
}

fn explain_json(file: &std::path::Path) -> Value {
    let ran = Run::command("explain")
        .arg("--snapshot")
        .arg(file)
        .arg("--json")
        .succeeds();
    serde_json::from_str(&ran.stdout()).expect("explain --snapshot --json prints JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a size: {v}"))
}

#[test]
fn a_users_snapshot_gives_each_devices_peak_what_was_alive_and_its_fragmentation() {
    let doc = explain_json(&user("user-trace.pickle"));
    let expected = read_json(&user("expected.json"));
    assert_eq!(doc["schema"], "iteragpu.snapshot/1");
    assert_eq!(doc["phases_from"], "record_function");
    let devices = doc["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for (d, e) in devices.iter().zip(expected["devices"].as_array().unwrap()) {
        assert_eq!(d["device"], e["device"]);
        let peak = &d["peak"];
        assert_eq!(peak["derived"], true, "a replayed peak is labelled derived");
        assert_eq!(peak["allocated_bytes"], e["peak_allocated_bytes"]);
        assert_eq!(peak["allocated_at"]["time_us"], e["peak_allocated_time_us"]);
        assert_eq!(peak["reserved_bytes"], e["peak_reserved_bytes"]);
        assert_eq!(d["at_dump"]["allocated_bytes"], e["end_allocated_bytes"]);
        assert_eq!(d["at_dump"]["reserved_bytes"], e["end_reserved_bytes"]);
    }
    let d0 = &devices[0];
    // At the peak, inside `forward`: the weights, then two activations, each with the user's line.
    assert_eq!(d0["peak"]["phase"], "forward");
    let alive: Vec<(u64, String)> = d0["peak"]["largest_alive"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let f = &a["user_frame"];
            (
                u(&a["size_bytes"]),
                format!("{}:{}", f["filename"].as_str().unwrap(), f["line"]),
            )
        })
        .collect();
    assert_eq!(
        alive,
        [
            (8 * MIB, "/home/alice/train.py:12".to_string()),
            (6 * MIB, "/home/alice/train.py:30".into()),
            (4 * MIB, "/home/alice/model.py:88".into()),
        ]
    );
    // Fragmentation from the file's own numbers.
    let at = &d0["at_dump"];
    assert_eq!(
        u(&at["reserved_minus_allocated_bytes"]),
        22 * MIB - 8 * MIB - 512 * KIB
    );
    assert_eq!(u(&at["largest_free_block_bytes"]), 12 * MIB);
    assert_eq!(
        u(&at["free_in_split_segments_bytes"]),
        12 * MIB + 2 * MIB - 512 * KIB
    );
    let segments = at["largest_segments"].as_array().unwrap();
    assert_eq!(segments.len(), 2);
    assert_eq!(u(&segments[0]["total_size_bytes"]), 20 * MIB);
    assert_eq!(u(&segments[0]["allocated_size_bytes"]), 8 * MIB);
    assert_eq!(u(&segments[0]["requested_size_bytes"]), 8 * MIB - 100);
    assert_eq!(segments[0]["free_blocks"], 1);
    assert_eq!(segments[1]["segment_type"], "small");
    // The outermost record_function scopes are the phases; the nested one is not.
    let names: Vec<&str> = d0["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["forward", "backward"]);
    assert_eq!(u(&d0["phases"][0]["peak_allocated_bytes"]), 18 * MIB);
    // Device 1 has no scope of its own: it is cut into time windows; its OOM entry is kept.
    let d1 = &devices[1];
    assert_eq!(d1["phases"].as_array().unwrap().len(), 10);
    assert_eq!(d1["phases"][0]["name"], "window 1/10");
    let ooms = &doc["summary"]["devices"][1]["trace"]["phases"][0]["ooms"];
    assert_eq!(u(&ooms[0]["requested_bytes"]), 64 * MIB);
}

#[test]
fn the_committed_fixture_is_what_its_script_writes() {
    let dir = tempfile::tempdir().unwrap();
    let script = fixture("snapshots/user_snapshot.py");
    let status = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .status()
        .expect("python3 runs");
    assert!(status.success());
    for name in ["user-trace.pickle", "user-no-trace.pickle", "expected.json"] {
        let mut made = explain_or_read(&dir.path().join(name));
        let mut committed = explain_or_read(&user(name));
        for doc in [&mut made, &mut committed] {
            if let Some(m) = doc.as_object_mut() {
                m.remove("file");
                m.remove("file_bytes");
                m.get_mut("summary")
                    .and_then(|s| s.as_object_mut())
                    .map(|s| s.remove("bytes_read"));
            }
        }
        assert_eq!(
            made, committed,
            "{name}: rerun tests/fixtures/snapshots/user_snapshot.py"
        );
    }
}

fn explain_or_read(path: &std::path::Path) -> Value {
    if path.extension().is_some_and(|e| e == "json") {
        read_json(path)
    } else {
        explain_json(path)
    }
}

#[test]
fn a_snapshot_without_a_trace_gives_the_state_at_dump_time_and_says_the_timeline_is_missing() {
    let doc = explain_json(&user("user-no-trace.pickle"));
    assert_eq!(doc["phases_from"], "no_trace");
    let d0 = &doc["devices"][0];
    assert!(d0["peak"].is_null());
    assert!(
        d0["timeline_missing"]
            .as_str()
            .unwrap()
            .contains("max_entries=0")
    );
    assert_eq!(u(&d0["at_dump"]["reserved_bytes"]), 22 * MIB);
    assert_eq!(u(&d0["at_dump"]["allocated_bytes"]), 8 * MIB + 512 * KIB);
    let largest = &d0["at_dump"]["largest_allocations"][0];
    assert_eq!(u(&largest["size_bytes"]), 8 * MIB);
    assert_eq!(largest["user_frame"]["line"], 12);
    Run::command("explain")
        .arg("--snapshot")
        .arg(user("user-no-trace.pickle"))
        .succeeds()
        .stdout_has("No timeline")
        .stdout_has("only the state at dump time is known");
}

#[test]
fn the_text_says_where_the_phases_come_from_in_english_and_french() {
    Run::command("explain")
        .arg("--snapshot")
        .arg(user("user-trace.pickle"))
        .succeeds()
        .stdout_has("record_function")
        .stdout_has("Peak (derived by replaying the trace)")
        .stdout_has("/home/alice/model.py:88 in attention");
    Run::command("explain")
        .args(["--lang", "fr", "--snapshot"])
        .arg(user("user-trace.pickle"))
        .succeeds()
        .stdout_has("Pic (déduit en rejouant la trace)")
        .stdout_has("0,02 Gio");
}

#[test]
fn html_markdown_and_json_files_are_written_once_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("snap.html");
    let run = || {
        Run::command("explain")
            .arg("--snapshot")
            .arg(user("user-trace.pickle"))
            .arg("--output")
            .arg(&html)
    };
    run().succeeds().stdout_has("written:");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg"), "the timeline is drawn");
    assert!(page.contains("/home/alice/model.py:88"));
    run().expect_status(1).stderr_has("already exists");
    assert_eq!(
        std::fs::read_to_string(&html).unwrap(),
        page,
        "left as it was"
    );
    let md = dir.path().join("snap.md");
    Run::command("explain")
        .arg("--snapshot")
        .arg(user("user-trace.pickle"))
        .arg("--output")
        .arg(&md)
        .succeeds();
    assert!(std::fs::read_to_string(&md).unwrap().contains("## cuda:0"));
    let json = dir.path().join("snap.json");
    Run::command("explain")
        .arg("--snapshot")
        .arg(user("user-trace.pickle"))
        .arg("--output")
        .arg(&json)
        .succeeds();
    assert_eq!(read_json(&json)["schema"], "iteragpu.snapshot/1");
    Run::command("explain")
        .output(dir.path().join("snap.txt"))
        .arg("--snapshot")
        .arg(user("user-trace.pickle"))
        .expect_status(1)
        .stderr_has("give a .html")
        .wrote_nothing();
}

#[test]
fn each_bad_input_is_refused_with_the_file_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(user("user-trace.pickle")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "text.pickle",
            b"hello, world\n".to_vec(),
            "not a pickle, or one of protocol 0 or 1",
        ),
        (
            "truncated.pickle",
            whole[..whole.len() / 2].to_vec(),
            "the file is truncated",
        ),
        (
            "protocol6.pickle",
            b"\x80\x06}.".to_vec(),
            "unsupported pickle protocol 6",
        ),
        (
            "other.pickle",
            std::fs::read(user("not-a-snapshot.pickle")).unwrap(),
            "not a PyTorch memory snapshot",
        ),
        (
            "protocol0.pickle",
            std::fs::read(user("protocol-0.pickle")).unwrap(),
            "protocol 0 or 1",
        ),
        ("empty.pickle", Vec::new(), "truncated"),
    ];
    for (name, bytes, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        Run::command("explain")
            .arg("--snapshot")
            .arg(&path)
            .expect_status(1)
            .stderr_has(says)
            .stderr_has(&path.display().to_string())
            .stderr_has("expected a PyTorch memory snapshot");
    }
    Run::command("explain")
        .arg("--snapshot")
        .arg(dir.path().join("absent.pickle"))
        .expect_status(1)
        .stderr_has("absent.pickle");
    Run::command("explain")
        .arg(user("expected.json"))
        .arg("--snapshot")
        .arg(user("user-trace.pickle"))
        .expect_status(1)
        .stderr_has("cannot be used with");
}
