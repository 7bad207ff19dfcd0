//! The caching allocator's own record of allocations, asked of the worker (`spec.history`) and
//! reported back: the live blocks with their Python frames at an out-of-memory (always, unless
//! `--no-history`), and with `--timeline` every allocation and free, dumped as PyTorch's snapshot
//! pickle for memory_viz and summarised by `explain::snapshot`. The Python side is
//! `python/iteragpu/history.py`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the allocator records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryMode {
    /// The frames of live allocations only (no event history): bounded by what is alive.
    State,
    /// Every allocation and free with its frames, bounded by `max_entries`.
    Timeline,
}

/// The worker's instructions (`"history": {"mode": "state"}` in its spec).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistorySpec {
    pub mode: HistoryMode,
    /// `timeline`: the most events kept (the oldest are dropped first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u64>,
    /// `timeline`: where the worker dumps the snapshot (a temporary file the CLI then moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<PathBuf>,
}

/// The recording as the worker could start it (event `history`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryStatus {
    pub mode: HistoryMode,
    /// False when this PyTorch or its allocator backend refused (`null_reasons.record`).
    pub recording: bool,
    pub max_entries: Option<u64>,
    /// Each phase is marked in the trace's user metadata (thread-local in PyTorch: autograd's
    /// threads are not marked, so phases are also told apart by time).
    pub phase_markers: bool,
    /// PyTorch's out-of-memory observer is attached: a snapshot is taken before it raises.
    pub oom_observer: bool,
    #[serde(default)]
    pub null_reasons: BTreeMap<String, String>,
}

/// One Python frame of an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Frame {
    pub filename: Option<String>,
    pub line: Option<u64>,
    pub name: Option<String>,
}

/// A live block at the out-of-memory: its size as the allocator holds it, what was asked for,
/// and its frames (the workload's own first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveBlock {
    pub bytes: u64,
    pub requested_bytes: Option<u64>,
    pub frames: Vec<Frame>,
}

/// The device's segments at the out-of-memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveSummary {
    pub segments: u64,
    pub reserved_bytes: u64,
    pub live_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_block: u64,
    pub largest_live: Vec<LiveBlock>,
}

/// Event `oom_snapshot`: what PyTorch's observer saw before raising an out-of-memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomSnapshot {
    pub device: String,
    pub requested_bytes: u64,
    pub device_allocated_bytes: u64,
    /// The device's free memory as CUDA reported it to the allocator.
    pub device_free_bytes: u64,
    pub at_unix_us: Option<u64>,
    /// Null with `reason` when the snapshot could not be taken.
    pub live: Option<LiveSummary>,
    pub reason: Option<String>,
}

/// The most out-of-memory snapshots a result keeps (a workload that catches and retries its
/// out-of-memory errors would otherwise grow the result without bound): the first and the
/// latest ones.
pub const MAX_OOM_SNAPSHOTS: usize = 4;

/// Keeps the first `MAX_OOM_SNAPSHOTS - 1` and the latest snapshot.
pub fn keep(snapshots: &mut Vec<OomSnapshot>, next: OomSnapshot) -> bool {
    if snapshots.len() < MAX_OOM_SNAPSHOTS {
        snapshots.push(next);
        false
    } else {
        snapshots[MAX_OOM_SNAPSHOTS - 1] = next;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(n: u64) -> OomSnapshot {
        OomSnapshot {
            device: "cuda:0".into(),
            requested_bytes: n,
            device_allocated_bytes: 0,
            device_free_bytes: 0,
            at_unix_us: None,
            live: None,
            reason: None,
        }
    }

    #[test]
    fn the_first_and_latest_snapshots_are_kept() {
        let mut kept = Vec::new();
        let dropped: Vec<bool> = (0..10).map(|n| keep(&mut kept, snap(n))).collect();
        assert_eq!(dropped.iter().filter(|d| **d).count(), 6);
        let requested: Vec<u64> = kept.iter().map(|s| s.requested_bytes).collect();
        assert_eq!(requested, [0, 1, 2, 9]);
    }

    #[test]
    fn the_worker_events_parse() {
        let status: HistoryStatus = serde_json::from_str(
            r#"{"mode": "state", "recording": false, "max_entries": null, "phase_markers": false,
               "oom_observer": true, "null_reasons": {"record": "RuntimeError: not supported"}}"#,
        )
        .unwrap();
        assert!(!status.recording);
        let s: OomSnapshot = serde_json::from_str(
            r#"{"device": "cuda:0", "requested_bytes": 429496729600, "device_allocated_bytes": 0,
               "device_free_bytes": 149467152384, "at_unix_us": 1, "reason": null,
               "live": {"segments": 1, "reserved_bytes": 2097152, "live_bytes": 512, "free_bytes": 2096640,
                        "largest_free_block": 2096640,
                        "largest_live": [{"bytes": 512, "requested_bytes": 4,
                                          "frames": [{"filename": "/w/train.py", "line": 12, "name": "step"}]}]}}"#,
        )
        .unwrap();
        assert_eq!(s.live.unwrap().largest_live[0].frames[0].line, Some(12));
    }
}
