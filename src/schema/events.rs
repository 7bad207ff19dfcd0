//! The worker's JSON Lines events, one object per line: `{"type": …, "data": …}`.
//!
//! ```text
//! {"type": "hello", "data": {"pid": 4242, "protocol": 1}}
//! {"type": "hello", "data": {"pid": 4243, "protocol": 1, "rank": {"rank": 1, "local_rank": 1, "world_size": 2, "local_world_size": 2, "node_rank": 0, "host": "gpu7", "run_id": "3f2a…", "device": "cuda:1"}}}
//! {"type": "hello", "data": {"pid": 4244, "protocol": 1, "notebook": {"started_at": "2025-12-01T15:00:00+00:00", "code_hash": "sha256:…", "devices": ["cuda:0"]}}}
//! {"type": "environment", "data": {"python": {…}, "torch": {…}, "can_measure": true, …}}
//! {"type": "describe", "data": {"workload": "dense", "parameters": 33583104}}
//! {"type": "phase_start", "data": {"name": "cold_forward", "index": 2, "inputs": {…}, "parent": null, "automatic": false}}
//! {"type": "phase_end", "data": {"name": "cold_forward", "index": 2, "status": "ok", "duration_s": 0.01,
//!   "devices": [{"device": "cuda:0", "start_allocated_bytes": 1024, "peak_allocated_bytes": …}], "error": null}}
//! {"type": "unavailable", "data": {"reason": "PyTorch cannot be imported …"}}
//! {"type": "done", "data": {"status": "ok"}}
//! ```
//! Phases nest: `parent` is the index of the phase open around it (null at the top level) and
//! `phase_end` carries the `index` of the phase it closes; `automatic` marks a phase the tool made
//! (not a user's marker). Both keys are optional: an older worker sends neither and never nests.
//! The allocator's recording (`measure/history.rs`) adds:
//! ```text
//! {"type": "history", "data": {"mode": "state", "recording": true, "max_entries": null, "phase_markers": false, "oom_observer": true, "null_reasons": {}}}
//! {"type": "oom_snapshot", "data": {"device": "cuda:0", "requested_bytes": 429496729600, "device_allocated_bytes": 0, "device_free_bytes": 149467152384, "at_unix_us": 1764480000000000, "snapshot": "/tmp/iteragpu-oom-4242-x/oom-4242-1.pickle", "reason": null}}
//! {"type": "snapshot", "data": {"path": "/out/.r.json.snapshot.tmp", "reason": null}}
//! ```
//! A prediction (`iteragpu predict`) adds the storages of the target device, in order:
//! ```text
//! {"type": "alloc", "data": {"id": 7, "bytes": 262144, "category": "temporary", "module": "LlamaForCausalLM.model.layers.0.mlp", "shape": [2, 16, 2048], "dtype": "float32", "tainted": false, "file": "train.py", "line": 42}}
//! {"type": "tag", "data": {"id": 7, "category": "activation"}}
//! {"type": "free", "data": {"id": 7}}
//! {"type": "unpredictable", "data": {"op": "aten.nonzero.default", "file": "/home/me/train.py", "line": 42, "reason": "its output size depends on the data"}}
//! {"type": "placeholder", "data": {"op": "item", "file": "/home/me/train.py", "line": 51, "dtype": "float32"}}
//! {"type": "placeholder_count", "data": {"file": "/home/me/train.py", "line": 51, "count": 2}}
//! {"type": "note", "data": {"text": "torch.save skipped: fake tensors hold no data"}}
//! ```
//! Unknown types are kept (an old CLI can read a newer worker); a line that is not JSON is
//! reported, not fatal.
//!
//! On a worker's standard-output channel each line begins with the run's token in place of the
//! event's `{`: `{"token": "3f…", "type": …, "data": …}`. The CLI makes the token
//! ([`new_token`]) and passes it in [`TOKEN_ENV`]; a line without it is [`Line::Forged`], never
//! an event, and the result says how many there were ([`forged_note`]). A rank's socket
//! connection under torchrun and a notebook's events file carry no token.
//!
//! `Event` is the contract: `schema/events.schema.json` is generated from it (schemars), and
//! `tests/integration/contract.rs` fails when it is stale and validates what the worker emits.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::environment::PythonEnvironment;

/// `torch.cuda.mem_get_info` at the end of a phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemGetInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// The four counters and both levels of one device for one phase. `null` means not read, and
/// `null_reasons` says why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceReading {
    pub device: String,
    pub start_allocated_bytes: Option<u64>,
    pub start_reserved_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
    pub mem_get_info: Option<MemGetInfo>,
    /// The caching allocator's own counters at the phase's end (`.current`) and its highest in
    /// the phase (`.peak`); null with a reason when `memory_stats()` could not be read.
    #[serde(default)]
    pub allocator: Option<AllocatorStats>,
    #[serde(default)]
    pub null_reasons: BTreeMap<String, String>,
}

/// `torch.cuda.memory_stats()` fields that tell fragmentation and rounding apart. A field the
/// backend does not report (cudaMallocAsync reports few) is null.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AllocatorStats {
    /// Bytes in blocks handed out or waiting to be freed (allocated plus pending frees).
    pub active_bytes_current: Option<u64>,
    pub active_bytes_peak: Option<u64>,
    /// Free bytes inside split blocks: reserved, not allocatable for larger requests.
    pub inactive_split_bytes_current: Option<u64>,
    pub inactive_split_bytes_peak: Option<u64>,
    /// Bytes the program asked for (before rounding to blocks).
    pub requested_bytes_current: Option<u64>,
    pub requested_bytes_peak: Option<u64>,
    pub segments_current: Option<u64>,
    pub segments_peak: Option<u64>,
    /// cudaMalloc retries after freeing the cache (cumulative since the process started).
    pub num_alloc_retries: Option<u64>,
    /// Out-of-memory errors (cumulative).
    pub num_ooms: Option<u64>,
    #[serde(default)]
    pub num_sync_all_streams: Option<u64>,
    #[serde(default)]
    pub num_device_alloc: Option<u64>,
    #[serde(default)]
    pub num_device_free: Option<u64>,
    /// The largest free block of each pool (`small`, `large`) at the phase's end.
    #[serde(default)]
    pub largest_free_block: Option<BTreeMap<String, u64>>,
}

/// The exception a phase raised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub out_of_memory: bool,
}

/// The driver's view of a phase, sampled by the CLI through NVML while the phase ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriverPhase {
    pub device: String,
    /// NVML index the CUDA device was matched to.
    pub nvml_index: Option<u32>,
    pub samples: u64,
    /// Highest `used` memory of the whole device seen during the phase (all processes).
    pub peak_device_used_bytes: Option<u64>,
    /// Highest memory of the worker process seen during the phase.
    pub peak_process_used_bytes: Option<u64>,
    /// The worker's memory read just after the phase ended.
    pub process_used_at_end_bytes: Option<u64>,
    /// `process_used_at_end − end_reserved`: what the process holds outside PyTorch's caching
    /// allocator (CUDA context, libraries) — not a leak by itself. Approximate: read by the CLI
    /// right after the phase ended, not at the same instant.
    pub outside_allocator_at_end_bytes: Option<u64>,
    pub reason: Option<String>,
}

/// One phase as measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseRecord {
    pub name: String,
    pub index: u64,
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// `ok`, `failed` (exception), or, when the worker died during the phase, `crashed`,
    /// `timeout` or `interrupted`.
    pub status: crate::schema::run::RunStatus,
    pub duration_s: Option<f64>,
    /// Wall-clock bounds of the phase in microseconds since the Unix epoch (the clock of the
    /// allocator's trace, which `--timeline` splits by phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_unix_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_unix_us: Option<u64>,
    #[serde(default)]
    pub devices: Vec<DeviceReading>,
    pub error: Option<PhaseError>,
    /// Filled by the CLI from NVML.
    #[serde(default)]
    pub driver: Option<Vec<DriverPhase>>,
    /// Filled by the CLI for a phase the worker never finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The index of the phase open around this one (markers nest), absent at the top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
}

/// A rank's identity, from torchrun's environment (`RANK`, `LOCAL_RANK`, `GROUP_RANK`, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankHello {
    pub rank: u64,
    pub local_rank: u64,
    pub world_size: u64,
    pub local_world_size: u64,
    /// The node's rank (`GROUP_RANK`).
    pub node_rank: u64,
    pub host: String,
    /// `TORCHELASTIC_RUN_ID`: the same on every node of one job.
    pub run_id: Option<String>,
    /// The device this rank records (`devices[LOCAL_RANK]`).
    pub device: String,
}

/// What a notebook's `Recorder` says of itself in its `hello`: `iteragpu from-events` builds the
/// result from these and the events that follow, as the CLI does from a worker's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotebookHello {
    /// When the Recorder started (RFC 3339).
    pub started_at: String,
    /// `sha256:…` of the Python package that recorded, computed as `python_side::code_hash`.
    pub code_hash: String,
    /// The devices it records, `cuda:N`.
    pub devices: Vec<String>,
}

/// A known event.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Event {
    Hello {
        pid: u32,
        protocol: u32,
        /// Under torchrun: who this worker is.
        #[serde(default)]
        rank: Option<RankHello>,
        /// A notebook's standalone `iteragpu.Recorder` (no CLI started it): what the CLI would
        /// otherwise know itself.
        #[serde(default)]
        notebook: Option<NotebookHello>,
    },
    Environment(Box<PythonEnvironment>),
    Describe(Map<String, Value>),
    PhaseStart {
        name: String,
        index: u64,
        /// What the phase was given (its `phase_end` repeats them, possibly with more).
        #[serde(default)]
        inputs: Map<String, Value>,
        /// The index of the enclosing open phase (phases nest); null at the top level. Absent
        /// from older workers, which never nest.
        #[serde(default)]
        parent: Option<u64>,
        /// Made by the tool (a phase around a workload that marks none), not by a user's marker.
        #[serde(default)]
        automatic: bool,
    },
    PhaseEnd(Box<PhaseRecord>),
    Unavailable {
        reason: String,
    },
    Done {
        status: String,
        error: Option<Value>,
    },
    /// Prediction only: a storage appeared on the target device.
    Alloc(Box<crate::schema::trace::Alloc>),
    /// Prediction only, a symbolic trace: expression `id` (a JSON tree of the traced fields,
    /// `prediction::symbolic`) that allocations and phase inputs (`{"$expr": id}`) refer to.
    Expr {
        id: u64,
        tree: Value,
    },
    /// Prediction only, a symbolic trace: what it holds for, sent after a run that ended normally.
    Domain(Box<crate::schema::trace::Domain>),
    /// Prediction only: a storage's last reference died.
    Free {
        id: u64,
    },
    /// Prediction only: a storage's role became known.
    Tag {
        id: u64,
        category: crate::schema::trace::Category,
    },
    /// Prediction only: an op fake tensors cannot follow.
    Unpredictable(crate::schema::trace::Unpredictable),
    /// Prediction only: the script's `torch.cuda.empty_cache()`.
    EmptyCache {},
    /// Prediction only: the script's `torch.cuda.reset_peak_memory_stats()`.
    ResetPeaks {},
    /// Prediction only: the script's `torch.cuda.reset_accumulated_memory_stats()`.
    ResetAccumulated {},
    /// Prediction only: the script reads the allocator (`torch.cuda.memory_stats()` and
    /// friends); the CLI answers on the worker's answer pipe, from the replay's own model at
    /// this point of the events (`prediction::answers`).
    MemoryQuery {
        id: u64,
    },
    /// Prediction only: the script reached the Hub (`from_pretrained("ORG/NAME")`,
    /// `snapshot_download`); the CLI's Hub client answers on the answer pipe with files in the
    /// worker's overlay (`model::hub::overlay`).
    HubQuery(crate::model::hub::overlay::HubQuery),
    /// Prediction only: a value read from data (`.item()`) answered with a placeholder.
    Placeholder {
        op: String,
        file: Option<String>,
        line: Option<u64>,
        dtype: String,
        /// What the read was answered (`False` for a condition, `1` or `1.0` for a number);
        /// older workers did not say it (they answered 0).
        #[serde(default)]
        answer: Option<String>,
    },
    /// Prediction only: how many placeholder answers a call site got in all.
    PlaceholderCount {
        file: Option<String>,
        line: Option<u64>,
        count: u64,
    },
    /// Something the worker wants said in the result.
    Note {
        text: String,
    },
    /// The allocator's recording as the worker could start it.
    History(crate::schema::history::HistoryStatus),
    /// What PyTorch's out-of-memory observer saw before it raised, and where the snapshot is.
    OomSnapshot(Box<crate::schema::history::OomDump>),
    /// `--timeline`: the snapshot dumped (its temporary path) or why not.
    Snapshot {
        path: Option<String>,
        reason: Option<String>,
    },
}

/// The environment variable that carries a run's channel token to the worker
/// (`python/iteragpu/channel.py` takes it out of its environment at once).
pub const TOKEN_ENV: &str = "ITERAGPU_CHANNEL_TOKEN";

/// What one line of the channel was.
#[derive(Clone, Debug)]
pub enum Line {
    /// A line without the run's token (a forked child writing on the descriptor it inherited,
    /// anything else writing there): never taken as an event, counted and said.
    Forged,
    Event(Event),
    /// Valid JSON of an unknown type (or a known type with an unexpected shape): kept as is.
    Unknown(Value),
    /// Not JSON at all.
    Garbage(String),
}

/// A new channel token: 128 bits from the system's random source, in hex (the time and the pid
/// where that source cannot be read).
pub fn new_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (now ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A line of a channel whose lines carry `token`: the worker writes `{"token": "T", ` in place of
/// the event's opening `{`. A line that does not begin so is [`Line::Forged`]; the rest is parsed
/// as the event it encloses.
pub fn parse_signed(line: &str, token: &str) -> Line {
    let rest = line
        .strip_prefix("{\"token\": \"")
        .and_then(|r| r.strip_prefix(token))
        .and_then(|r| r.strip_prefix("\", "));
    match rest {
        Some(rest) => parse(&format!("{{{rest}")),
        None => Line::Forged,
    }
}

/// What the result says of lines without the run's token.
pub fn forged_note(n: u64) -> String {
    format!(
        "{n} forged line(s) ignored: line(s) on the event channel without this run's token (a child process writing on the descriptor it inherited, or another writer), never taken as events"
    )
}

pub fn parse(line: &str) -> Line {
    // The usual case first, straight from the text (a prediction's hundreds of thousands of
    // storage events): the same event as through a `Value`, without building and cloning one.
    if let Ok(event) = serde_json::from_str::<Event>(line) {
        return Line::Event(event);
    }
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return Line::Garbage(line.chars().take(500).collect());
    };
    match serde_json::from_value::<Event>(value.clone()) {
        Ok(event) => Line::Event(event),
        Err(_) => Line::Unknown(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_without_the_runs_token_is_forged() {
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert_ne!(token, new_token());
        let event = r#"{"type": "note", "data": {"text": "x"}}"#;
        let signed = format!(r#"{{"token": "{token}", {}"#, &event[1..]);
        assert!(matches!(
            parse_signed(&signed, &token),
            Line::Event(Event::Note { .. })
        ));
        // Unsigned, signed with another token, a token's prefix, or the token elsewhere.
        for forged in [
            event.to_string(),
            format!(r#"{{"token": "{}", {}"#, new_token(), &event[1..]),
            format!(r#"{{"token": "{}", {}"#, &token[..8], &event[1..]),
            format!(r#"{{"type": "note", "data": {{"text": "x"}}, "token": "{token}"}}"#),
        ] {
            assert!(
                matches!(parse_signed(&forged, &token), Line::Forged),
                "{forged}"
            );
        }
    }

    #[test]
    fn parses_known_unknown_and_garbage() {
        assert!(matches!(
            parse(r#"{"type":"hello","data":{"pid":1,"protocol":1}}"#),
            Line::Event(Event::Hello { pid: 1, .. })
        ));
        assert!(matches!(
            parse(r#"{"type":"future_event","data":{"x":1}}"#),
            Line::Unknown(_)
        ));
        assert!(matches!(parse("not json"), Line::Garbage(_)));
        let end = r#"{"type":"phase_end","data":{"name":"x","index":0,"status":"ok","duration_s":0.5,
            "devices":[{"device":"cuda:0","start_allocated_bytes":1,"start_reserved_bytes":null,"peak_allocated_bytes":3,
            "peak_reserved_bytes":4,"end_allocated_bytes":5,"end_reserved_bytes":6,"mem_get_info":null,
            "null_reasons":{"reserved":"boom"}}],"error":null}}"#;
        let Line::Event(Event::PhaseEnd(record)) = parse(end) else {
            panic!("phase_end not parsed")
        };
        assert_eq!(record.devices[0].start_reserved_bytes, None);
        assert_eq!(record.devices[0].null_reasons["reserved"], "boom");
    }

    /// An older worker's `phase_start` (no inputs, parent or automatic) still parses; a newer
    /// one's nesting and origin are read.
    #[test]
    fn phase_start_with_and_without_nesting() {
        let Line::Event(Event::PhaseStart {
            name,
            index,
            inputs,
            parent,
            automatic,
        }) = parse(r#"{"type":"phase_start","data":{"name":"load","index":0}}"#)
        else {
            panic!("old phase_start not parsed")
        };
        assert_eq!((name.as_str(), index), ("load", 0));
        assert!(inputs.is_empty());
        assert_eq!(parent, None);
        assert!(!automatic);
        let Line::Event(Event::PhaseStart {
            index,
            inputs,
            parent,
            automatic,
            ..
        }) = parse(
            r#"{"type":"phase_start","data":{"name":"step","index":3,"inputs":{"batch":8},"parent":1,"automatic":true}}"#,
        )
        else {
            panic!("nested phase_start not parsed")
        };
        assert_eq!(index, 3);
        assert_eq!(inputs["batch"], 8);
        assert_eq!(parent, Some(1));
        assert!(automatic);
        assert!(matches!(
            parse(r#"{"type":"phase_start","data":{"name":"x","index":0,"parent":null}}"#),
            Line::Event(Event::PhaseStart { parent: None, .. })
        ));
    }
}
