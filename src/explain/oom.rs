//! The out-of-memory post-mortem: PyTorch's message parsed into fields and classified.
//!
//! [`parse`] reads the text of a `torch.OutOfMemoryError` (CUDA or ROCm/HIP, also XPU) in any of
//! the formats PyTorch has printed, anywhere in a longer text (a traceback, a log), into an
//! [`OomReport`]; [`classify`] turns the report into a [`Diagnosis`]: capacity, fragmentation,
//! another process, or unknown, with a one-line reason and concrete advice.
//!
//! # The formats
//!
//! Every size goes through the allocator's `format_size`: up to 1024 bytes as `N bytes` (exact),
//! then KiB up to 1 MiB, MiB up to 1 GiB and GiB beyond, each with two decimals. A printed size
//! therefore stands for an interval: [`PrintedSize`] keeps the bytes it stands for and the
//! half-width of that interval.
//!
//! | [`OomFormat`] | PyTorch | wording (C++ pieces, `X` = `format_size`) |
//! | --- | --- | --- |
//! | `Cached` | 1.0 – 1.3: pytorch/pytorch#13751 (Nov 2018, `THCCachingAllocator`) | `CUDA out of memory. Tried to allocate X (GPU N; X total capacity; X already allocated; X free; X cached)` where *cached* is reserved − allocated |
//! | `Reserved` | 1.4 – 2.0 (*cached* renamed *reserved*, with `memory_reserved`) | `… X free; ` + `X allowed; ` (1.8+, pytorch/pytorch#48172, only with a memory fraction) + `X reserved in total by PyTorch)` + from 2021 (pytorch/pytorch#44742, `max_split_size_mb`) ` If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF` |
//! | `OfWhichFree` | 2.1+: pytorch/pytorch#99699 (Apr 2023) | `CUDA out of memory. Tried to allocate X. GPU N has a total capacty of X of which X is free. ` + NVML's processes (`Process PID has X memory in use. `, `Including non-PyTorch memory, this process has X memory in use. `) + `Of the allocated memory X is allocated by PyTorch, and X is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb …`; 2.2 (pytorch/pytorch#113481, Nov 2023; its source reads `capacity`): the hint became `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)`; 2.4 (pytorch/pytorch#124673): `is allocated by PyTorch, with X allocated in private pools (e.g., CUDA Graphs), and …`; 2.5 (pytorch/pytorch#129546): `X allowed; ` restored after the processes when a memory fraction is set. ROCm builds print `HIP out of memory`, no process (no NVML), and `PYTORCH_HIP_ALLOC_CONF` (recent builds: `PYTORCH_CUDA_ALLOC_CONF`) |
//! | `CudaMallocAsync` | `backend:cudaMallocAsync` (pytorch/pytorch#82682, 2022) | `Allocation on device N would exceed allowed memory. (out of memory)\nCurrently allocated     : X\nRequested               : X\nDevice limit            : X\nFree (according to CUDA): X\nPyTorch limit (set by user-supplied memory fraction)\n                        : X` |
//! | `OverOneExabyte` | both backends, before any allocation | `CUDA out of memory. Tried to allocate more than 1EB memory.` |
//!
//! NVML prints a figure it does not have (Windows WDDM, some containers) as `17179869184.00 GiB`
//! (2^64 bytes); such a reading is kept as "not available" (`None`), never as a size. The
//! cudaMallocAsync backend prints the same value as its limit when no fraction is set: no limit.
//!
//! # The rule
//!
//! Notation: R the request, A allocated by PyTorch (live tensors, private pools included), U
//! reserved by PyTorch but unallocated, T the card's total capacity, L the memory-fraction limit,
//! F the free memory, P this process's memory as NVML counts it (CUDA context, library workspaces
//! and PyTorch's reserved memory), N = P − (A + U) its non-PyTorch part. Comparisons use the bytes
//! each printed figure stands for (the precision is at most 0.005 of its unit, 5.12 MiB for GiB).
//! The checks run in this order; the first that holds decides ([`OomRule`]):
//!
//! 1. **capacity** (`over_capacity`): the request is over 1 EB, or A + R + N > T (the card, even
//!    empty of anything else, cannot hold this process), or A + R > L (the fraction limit counts
//!    the allocator's memory only). A missing A or N counts as 0: the check stays sound.
//! 2. **fragmentation** (`cache_covers_request`): U ≥ R: PyTorch already holds enough memory for
//!    the request, but in pieces of split segments none of which fits. (Then A + R ≤ A + U ≤ T, so
//!    rule 1 cannot hold: the two never compete.)
//! 3. **capacity** (`near_capacity`): A + R + N is within a tolerance of T (or A + R of L): 1 % of
//!    the limit plus the printed precision of R, A and the limit. Rounding of blocks (2 MiB pages,
//!    20 MiB blocks for mid-size requests) makes a closer fit unreachable in practice.
//! 4. **fragmentation** (`fraction_limit_cache`): with a fraction limit, A + U + R > L while
//!    A + R ≤ L: the limit was hit because cached pieces count against it.
//! 5. **another process** (`held_elsewhere`): the memory held neither by this process nor free,
//!    H = T − P − F, is at least the shortfall S = R − F (freeing it would have made room) and at
//!    least a noise floor: 256 MiB when P is NVML's reading, 1 GiB when it is estimated as A + U
//!    (A for cudaMallocAsync) because NVML did not report this process (its CUDA context and
//!    library workspaces, typically 0.3–1 GiB, then land in H).
//! 6. **fragmentation** (`cache_covers_shortfall`): U > 0 and U ≥ S: the free memory lacks S, and
//!    PyTorch's cached pieces hold at least that much.
//! 7. **unknown** (`missing_figures`): a figure a rule needs is missing (truncated message, the
//!    cudaMallocAsync backend has no cache figure, old XPU builds print no free memory); the
//!    reason names them.
//! 8. **unknown** (`no_rule_fits`): every figure is there and none of the rules holds.
//!
//! Inside a container NVML reports host PIDs, so PyTorch does not recognize itself and lists its
//! own process as `Process PID has …`. When the message lists processes but not this one, the
//! listed process with the smallest usage at least A + U is taken to be this process (it must
//! hold at least what PyTorch reserved); the reason says so.

mod classify;
mod parse;

use serde::{Deserialize, Serialize};

use crate::units::{Bytes, GIB};

pub use classify::classify;
pub use parse::parse;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A size as PyTorch printed it, and the bytes it stands for.
///
/// `format_size` rounds to two decimals of its unit, so the true value lies in
/// [`bytes − precision_bytes`, `bytes + precision_bytes`] ([`PrintedSize::low`],
/// [`PrintedSize::high`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrintedSize {
    /// The printed value times its unit, rounded to the nearest byte (`139.80 GiB` →
    /// 150,109,106,995).
    pub bytes: Bytes,
    /// Half a unit of the last printed digit plus the rounding above, rounded up: 0 for `N bytes`,
    /// 6 for KiB, 5,244 for MiB, 5,368,710 for GiB. For a derived figure, the sum of its parts'.
    pub precision_bytes: u64,
    /// The text as printed (`139.80 GiB`), or for a derived figure the arithmetic that gave it
    /// (`14.71 GiB - 14.56 GiB`).
    pub text: String,
}

impl PrintedSize {
    /// The smallest byte count the printed text can stand for.
    pub fn low(&self) -> u64 {
        self.bytes.0.saturating_sub(self.precision_bytes)
    }
    /// The largest byte count the printed text can stand for.
    pub fn high(&self) -> u64 {
        self.bytes.0.saturating_add(self.precision_bytes)
    }
    fn exact(bytes: u64, text: impl Into<String>) -> PrintedSize {
        PrintedSize {
            bytes: Bytes(bytes),
            precision_bytes: 0,
            text: text.into(),
        }
    }
    fn sum(a: &PrintedSize, b: &PrintedSize) -> PrintedSize {
        PrintedSize {
            bytes: Bytes(a.bytes.0.saturating_add(b.bytes.0)),
            precision_bytes: a.precision_bytes.saturating_add(b.precision_bytes),
            text: format!("{} + {}", a.text, b.text),
        }
    }
    fn difference(a: &PrintedSize, b: &PrintedSize) -> PrintedSize {
        PrintedSize {
            bytes: Bytes(a.bytes.0.saturating_sub(b.bytes.0)),
            precision_bytes: a.precision_bytes.saturating_add(b.precision_bytes),
            text: format!("{} - {}", a.text, b.text),
        }
    }
}

/// The backend named in the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Platform {
    /// `CUDA out of memory` (and the cudaMallocAsync message, which names no backend unless it
    /// reaches `Free (according to CUDA)`).
    Cuda,
    /// `HIP out of memory`: a ROCm build (hipify rewrites `CUDA` in the strings).
    Hip,
    /// `XPU out of memory`: Intel GPUs.
    Xpu,
}

/// Which of PyTorch's message formats was read (see the module documentation for the wording).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomFormat {
    /// `(GPU 0; … total capacity; … already allocated; … free; … cached)`: torch 1.0 – 1.3.
    Cached,
    /// `(GPU 0; … total capacity; … already allocated; … free; [… allowed; ]… reserved in total by
    /// PyTorch)`: torch 1.4 – 2.0 (also a parenthesised message cut before its last figure).
    Reserved,
    /// `GPU 0 has a total capacity of … of which … is free. …`: torch 2.1 and later.
    OfWhichFree,
    /// `Allocation on device 0 would exceed allowed memory. (out of memory)`: the cudaMallocAsync
    /// backend.
    CudaMallocAsync,
    /// `Tried to allocate more than 1EB memory.`: refused before any allocation.
    OverOneExabyte,
    /// Only the header and the request could be read (a message cut or rewritten after them).
    RequestOnly,
}

/// The setting PyTorch's own message suggests at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocatorHint {
    /// `try setting max_split_size_mb to avoid fragmentation` (from 2021 to torch 2.1).
    MaxSplitSizeMb,
    /// `try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (torch 2.2 and later; ROCm:
    /// `PYTORCH_HIP_ALLOC_CONF` in some builds).
    ExpandableSegments,
    /// `Please use `empty_cache` to release all unoccupied cached memory.` (XPU).
    EmptyCache,
}

/// A process NVML listed on the device, other than the one that raised the error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// Its PID as NVML reports it (inside a container, the host's PID: this process itself can
    /// then appear here).
    pub pid: u64,
    /// Its memory in use; `None` when NVML did not have it (printed as `17179869184.00 GiB`).
    pub in_use: Option<PrintedSize>,
}

/// The fields of one `torch.OutOfMemoryError` message. `None`: not in this format, or not
/// reached (a truncated message keeps what comes before the cut).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomReport {
    /// The format read.
    pub format: OomFormat,
    /// The backend the message names.
    pub platform: Platform,
    /// The device index (`GPU 0`, `device 0`).
    pub device: Option<u32>,
    /// The allocation that failed (`Tried to allocate`, `Requested`): the allocator's rounded
    /// size (2 MiB multiples, 20 MiB for requests of 1 to 10 MiB, 2 MiB for small ones).
    pub tried_to_allocate: PrintedSize,
    /// True when the request is only known to exceed `tried_to_allocate` (`more than 1EB`).
    pub request_is_lower_bound: bool,
    /// The device's total memory as the runtime reports it (`total capacity`, `Device limit`).
    pub total_capacity: Option<PrintedSize>,
    /// The device's free memory when the allocation failed (`of which … is free`, `… free`,
    /// `Free (according to CUDA)`).
    pub free: Option<PrintedSize>,
    /// True when NVML listed this process (`Including non-PyTorch memory, this process has …`).
    pub this_process_listed: bool,
    /// This process's memory in use, PyTorch's and the rest (CUDA context, cuBLAS/cuDNN/NCCL
    /// workspaces); `None` when not listed or when NVML did not have it.
    pub this_process_in_use: Option<PrintedSize>,
    /// The other processes NVML listed, in its order.
    pub other_processes: Vec<ProcessUsage>,
    /// The per-process limit set by a memory fraction (`… allowed;`, `PyTorch limit (set by
    /// user-supplied memory fraction)`); `None` when no fraction is set.
    pub allowed: Option<PrintedSize>,
    /// Memory in PyTorch's live allocations (`already allocated`, `is allocated by PyTorch`,
    /// `Currently allocated`); since torch 2.4 it includes `private_pools`.
    pub allocated_by_pytorch: Option<PrintedSize>,
    /// Everything PyTorch's allocator holds: printed (`reserved in total by PyTorch`) or derived
    /// as allocated + reserved-but-unallocated (`text` shows the sum).
    pub reserved_by_pytorch: Option<PrintedSize>,
    /// Memory PyTorch holds but no tensor uses, left in split segments after the allocator freed
    /// what it could: printed (`cached` in 1.0–1.3, `is reserved by PyTorch but unallocated`) or
    /// derived as reserved − allocated in 1.4–2.0 (`text` shows the difference).
    pub reserved_but_unallocated: Option<PrintedSize>,
    /// Free blocks held in private pools (CUDA Graphs), counted in `allocated_by_pytorch`
    /// (`with … allocated in private pools`, torch 2.4+).
    pub private_pools: Option<PrintedSize>,
    /// The setting PyTorch's message suggests.
    pub hint: Option<AllocatorHint>,
}

/// Why the allocation failed; its label (`another process`) is strum's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "lowercase")]
pub enum OomClass {
    /// The load does not fit what this process may use (the card, or the fraction limit).
    Capacity,
    /// The memory is there, held by PyTorch's cache, but in pieces.
    Fragmentation,
    /// Someone else holds the memory the request lacked.
    #[strum(serialize = "another process")]
    AnotherProcess,
    /// The figures do not decide (see the reason).
    Unknown,
}

impl OomClass {
    /// `capacity`, `fragmentation`, `another process` or `unknown`.
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// Which check of [`classify`] decided (numbered as in the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomRule {
    /// 1: request over 1 EB, A + R + N > T, or A + R > L.
    OverCapacity,
    /// 2: U ≥ R.
    CacheCoversRequest,
    /// 3: A + R + N within 1 % (plus printed precision) of T, or A + R of L.
    NearCapacity,
    /// 4: A + U + R > L although A + R ≤ L.
    FractionLimitCache,
    /// 5: T − P − F ≥ the shortfall and the noise floor.
    HeldElsewhere,
    /// 6: U > 0 and U ≥ R − F.
    CacheCoversShortfall,
    /// 7: a figure a rule needs is missing.
    MissingFigures,
    /// 8: no rule holds.
    NoRuleFits,
    /// A prediction only: the whole run's live tensors, replayed without a limit, exceed what the
    /// allocator may hold, whatever the cache held at the refused request.
    WholeRunOverCapacity,
}

/// What the figures in a diagnosis are measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The card's total capacity.
    Card,
    /// The per-process limit of a memory fraction.
    MemoryFraction,
}

/// Where this process's memory figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessSource {
    /// NVML's reading of this process (`this process has …`).
    Nvml,
    /// A listed process taken to be this one (PID namespaces: see the module documentation).
    ListedPid(u64),
    /// Estimated as PyTorch's reserved memory (the cudaMallocAsync backend: its live allocations):
    /// NVML did not report this process. Its CUDA context and library workspaces are missing.
    Estimated,
}

/// The quantities the rule computed, for tables and JSON (bytes; `None` when not computable).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// What this process needed in all against the limit: A + R (+ N against the card).
    pub need: Option<Bytes>,
    /// The limit `need` is measured against.
    pub limit: Option<Bytes>,
    /// What `limit` is.
    pub limit_kind: Option<LimitKind>,
    /// This process's memory (P).
    pub this_process: Option<Bytes>,
    /// Where `this_process` comes from.
    pub this_process_source: Option<ProcessSource>,
    /// This process's memory outside PyTorch's allocator (N = P − reserved).
    pub non_pytorch: Option<Bytes>,
    /// PyTorch's reserved-but-unallocated memory (U).
    pub reserved_unallocated: Option<Bytes>,
    /// What the free memory lacked: R − F (or A + U + R − L when the fraction limit refused it).
    pub shortfall: Option<Bytes>,
    /// Memory held neither by this process nor free: T − P − F.
    pub held_elsewhere: Option<Bytes>,
}

/// The post-mortem of one out-of-memory error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The class.
    pub class: OomClass,
    /// The check that decided.
    pub rule: OomRule,
    /// One line with the numbers (GB and GiB side by side).
    pub reason: String,
    /// What to do, most useful first; each line is self-contained.
    pub advice: Vec<String>,
    /// The quantities behind the reason.
    pub figures: Figures,
}

/// A message parsed and classified, as `iteragpu explain` and the fiche show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMortem {
    /// The fields read from the message.
    pub report: OomReport,
    /// Their classification.
    pub diagnosis: Diagnosis,
}

/// Parses and classifies in one step; `None` when `message` holds no out-of-memory message.
pub fn diagnose(message: &str) -> Option<PostMortem> {
    let report = parse(message)?;
    let diagnosis = classify(&report);
    Some(PostMortem { report, diagnosis })
}

#[cfg(test)]
mod tests;
