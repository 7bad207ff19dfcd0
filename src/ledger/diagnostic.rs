//! The allocator's own story, phase by phase, as values: retries (cudaMalloc failed and the cache
//! was freed), out-of-memory errors caught, large inactive split bytes (fragmentation), and the
//! `cudaMallocAsync` backend. The ledger's file and the terminal hold their English words
//! (`Display`); the fiche words them in its language through `report::catalog::ledger`.

use serde::Serialize;

use crate::schema::measure::MeasureResult;
use crate::units::Bytes;

/// Inactive split bytes at or above this share of the reserved memory mean fragmentation.
const FRAGMENTED_SHARE: f64 = 0.10;
/// …and at least this many bytes (small workloads always have some).
const FRAGMENTED_BYTES: u64 = 256 << 20;

/// One thing the allocator's counters say; `phase` and `index` name the phase as the result does.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Diagnostic {
    /// cudaMalloc failed `retries` times in the phase; each time the cache was freed and the
    /// request tried again.
    AllocRetries {
        phase: String,
        index: u64,
        retries: u64,
    },
    /// Out-of-memory errors the allocator raised in the phase (and the workload caught).
    OomsRaised {
        phase: String,
        index: u64,
        ooms: u64,
    },
    /// Up to `split_bytes` free inside split blocks, `share_pct` % of the reserved peak.
    Fragmentation {
        phase: String,
        index: u64,
        split_bytes: u64,
        share_pct: f64,
    },
    /// The `cudaMallocAsync` backend: the driver's pool holds the memory.
    MallocAsyncBackend,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Diagnostic::AllocRetries {
                phase,
                index,
                retries,
            } => write!(
                f,
                "{phase} #{index}: {retries} allocation retr{} (cudaMalloc failed, the cache was freed and the request tried again): fragmentation, and slow",
                if *retries == 1 { "y" } else { "ies" }
            ),
            Diagnostic::OomsRaised { phase, index, ooms } => write!(
                f,
                "{phase} #{index}: {ooms} out-of-memory error(s) raised by the allocator"
            ),
            Diagnostic::Fragmentation {
                phase,
                index,
                split_bytes,
                share_pct,
            } => write!(
                f,
                "{phase} #{index}: fragmentation: up to {} free inside split blocks ({share_pct:.0}% of the reserved peak), unusable for larger requests; try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                Bytes(*split_bytes).both()
            ),
            Diagnostic::MallocAsyncBackend => f.write_str(
                "backend cudaMallocAsync: the driver's pool manages the memory; PyTorch reports no split blocks or segments for it, and reserved is the pool's size",
            ),
        }
    }
}

/// The ledger's file holds the English words.
impl From<Diagnostic> for String {
    fn from(d: Diagnostic) -> String {
        d.to_string()
    }
}

/// The allocator's diagnostics of a run, in phase order (the backend last).
pub fn diagnostics(r: &MeasureResult) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut retries_before: Option<u64> = None;
    let mut ooms_before: Option<u64> = None;
    for p in &r.phases {
        let Some(d) = p.devices.first() else { continue };
        let Some(stats) = &d.allocator else { continue };
        let (phase, index) = (p.name.clone(), p.index);
        if let (Some(now), Some(before)) = (stats.num_alloc_retries, retries_before)
            && now > before
        {
            out.push(Diagnostic::AllocRetries {
                phase: phase.clone(),
                index,
                retries: now - before,
            });
        }
        if let (Some(now), Some(before)) = (stats.num_ooms, ooms_before)
            && now > before
        {
            out.push(Diagnostic::OomsRaised {
                phase: phase.clone(),
                index,
                ooms: now - before,
            });
        }
        retries_before = stats.num_alloc_retries.or(retries_before);
        ooms_before = stats.num_ooms.or(ooms_before);
        if let (Some(split), Some(resv)) = (stats.inactive_split_bytes_peak, d.peak_reserved_bytes)
            && split >= FRAGMENTED_BYTES
            && split as f64 >= FRAGMENTED_SHARE * resv as f64
        {
            out.push(Diagnostic::Fragmentation {
                phase,
                index,
                split_bytes: split,
                share_pct: 100.0 * split as f64 / resv as f64,
            });
        }
    }
    if r.environment
        .python
        .as_ref()
        .and_then(|p| p.allocator_backend())
        == Some("cudaMallocAsync")
    {
        out.push(Diagnostic::MallocAsyncBackend);
    }
    out
}
