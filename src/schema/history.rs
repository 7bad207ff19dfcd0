//! The caching allocator's own record of allocations, asked of the worker (`spec.history`) and
//! reported back: the live blocks with their Python frames at an out-of-memory (always, unless
//! `--no-history`), and with `--timeline` every allocation and free, dumped as PyTorch's snapshot
//! pickle for memory_viz and summarised by `explain::snapshot`. The Python side is
//! `python/iteragpu/history.py`: it only dumps snapshots; every summary of one is made here, by
//! the CLI's reader, so that the rule for the workload's frames is written once
//! (`Folder::classify`).

use crate::explain::snapshot::{self, Allocation, SnapshotSummary};
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
    /// The folder where the worker dumps the snapshot at each out-of-memory (a private one the
    /// CLI made for the run, removed after it): the CLI reads each dump as its event arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_dir: Option<PathBuf>,
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub filename: Option<String>,
    pub line: Option<u64>,
    pub name: Option<String>,
}

/// A live block at the out-of-memory: its size as the allocator holds it, what was asked for,
/// and its frames (the workload's own first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveBlock {
    pub bytes: u64,
    pub requested_bytes: Option<u64>,
    pub frames: Vec<Frame>,
}

/// The device's segments at the out-of-memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSummary {
    pub segments: u64,
    pub reserved_bytes: u64,
    pub live_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_block: u64,
    pub largest_live: Vec<LiveBlock>,
}

impl LiveSummary {
    /// `device`'s segments and its largest live blocks, as the snapshot reader summarised them
    /// (zeros for a device without segments). Live bytes count the blocks freed but still
    /// waiting for their stream (`active_bytes`), as `largest_live` does not: it lists the
    /// allocated blocks.
    pub fn of_device(summary: &SnapshotSummary, device: i64) -> LiveSummary {
        let Some(d) = summary.devices.iter().find(|d| d.device == device) else {
            return LiveSummary::default();
        };
        let s = &d.segments;
        LiveSummary {
            segments: s.segments,
            reserved_bytes: s.reserved_bytes,
            live_bytes: s.active_bytes,
            free_bytes: s.inactive_bytes,
            largest_free_block: s.largest_inactive_block_bytes,
            largest_live: d.largest_blocks_at_end.iter().map(LiveBlock::of).collect(),
        }
    }
}

impl LiveBlock {
    /// The block's innermost frame of the workload first, then the innermost frames of its stack
    /// (PyTorch's included). The reader keeps no requested size per block.
    fn of(a: &Allocation) -> LiveBlock {
        let stack = a
            .stack_top
            .iter()
            .filter(|f| Some(*f) != a.user_frame.as_ref());
        LiveBlock {
            bytes: a.size_bytes,
            requested_bytes: None,
            frames: a.user_frame.iter().chain(stack).map(Frame::of).collect(),
        }
    }
}

impl Frame {
    fn of(f: &snapshot::Frame) -> Frame {
        Frame {
            filename: Some(f.filename.to_string()),
            line: u64::try_from(f.line).ok(),
            name: Some(f.name.to_string()),
        }
    }
}

/// Event `oom_snapshot`: what PyTorch's observer saw before raising an out-of-memory, and where
/// the worker dumped the allocator's snapshot for the CLI to summarise into an `OomSnapshot`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomDump {
    pub device: String,
    pub requested_bytes: u64,
    pub device_allocated_bytes: u64,
    /// The device's free memory as CUDA reported it to the allocator.
    pub device_free_bytes: u64,
    pub at_unix_us: Option<u64>,
    /// The pickle of `torch.cuda.memory._snapshot()` in `HistorySpec::oom_dir`; null with
    /// `reason` when it could not be dumped.
    pub snapshot: Option<PathBuf>,
    pub reason: Option<String>,
}

impl OomDump {
    /// The device's index in the snapshot (`cuda:N`).
    pub fn device_index(&self) -> Option<i64> {
        self.device.rsplit_once(':')?.1.parse().ok()
    }

    /// The result's record of this out-of-memory: the live blocks, or why there are none.
    pub fn observed(self, live: Result<LiveSummary, String>) -> OomSnapshot {
        let (live, reason) = match live {
            Ok(live) => (Some(live), None),
            Err(reason) => (None, Some(reason)),
        };
        OomSnapshot {
            device: self.device,
            requested_bytes: self.requested_bytes,
            device_allocated_bytes: self.device_allocated_bytes,
            device_free_bytes: self.device_free_bytes,
            at_unix_us: self.at_unix_us,
            live,
            reason,
        }
    }
}

/// What PyTorch's observer saw before raising an out-of-memory, as the result keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        let dump: OomDump = serde_json::from_str(
            r#"{"device": "cuda:1", "requested_bytes": 429496729600, "device_allocated_bytes": 0,
               "device_free_bytes": 149467152384, "at_unix_us": 1, "snapshot": null,
               "reason": "OSError: [Errno 28] No space left on device"}"#,
        )
        .unwrap();
        assert_eq!(dump.device_index(), Some(1));
        let reason = dump.reason.clone();
        let observed = dump.observed(Err(reason.clone().unwrap()));
        assert_eq!((observed.live, observed.reason), (None, reason));
        // The result's record, as results have always held it.
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

    fn frame(filename: &str, line: i64) -> snapshot::Frame {
        snapshot::Frame {
            filename: filename.into(),
            line,
            name: "f".into(),
        }
    }

    /// The reader's device summary becomes the live summary: the live bytes count the blocks
    /// awaiting their stream, the workload's frame comes first, other devices are left out.
    #[test]
    fn the_live_summary_is_the_readers() {
        let own = frame("/home/me/train.py", 42);
        let torch = frame("/venv/site-packages/torch/nn/modules/linear.py", 125);
        let device = |device, bytes| snapshot::DeviceSummary {
            device,
            segments: snapshot::SegmentMap {
                segments: 2,
                reserved_bytes: 4 << 20,
                allocated_bytes: bytes,
                active_bytes: bytes + 512,
                inactive_bytes: (4 << 20) - bytes - 512,
                largest_inactive_block_bytes: 1 << 20,
                ..Default::default()
            },
            largest_blocks_at_end: vec![Allocation {
                address: 0,
                size_bytes: bytes,
                allocated_at: None,
                phase: None,
                user_frame: Some(own.clone()),
                stack_top: vec![torch.clone(), own.clone()],
            }],
            trace: None,
        };
        let summary = SnapshotSummary {
            frames: Vec::new(),
            pickle_protocol: 4,
            bytes_read: 0,
            history_recorded: false,
            devices: vec![device(0, 1 << 20), device(1, 3 << 20)],
            allocator_settings: None,
            notes: Vec::new(),
            annotations: Vec::new(),
        };
        let live = LiveSummary::of_device(&summary, 1);
        assert_eq!(
            (live.segments, live.reserved_bytes, live.live_bytes),
            (2, 4 << 20, (3 << 20) + 512)
        );
        assert_eq!(
            (live.free_bytes, live.largest_free_block),
            ((1 << 20) - 512, 1 << 20)
        );
        let block = &live.largest_live[0];
        assert_eq!((block.bytes, block.requested_bytes), (3 << 20, None));
        let lines: Vec<Option<u64>> = block.frames.iter().map(|f| f.line).collect();
        assert_eq!(
            lines,
            [Some(42), Some(125)],
            "the workload's frame once, first"
        );
        assert_eq!(LiveSummary::of_device(&summary, 7), LiveSummary::default());
    }
}
