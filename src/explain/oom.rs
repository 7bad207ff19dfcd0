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

use serde::{Deserialize, Serialize};

use crate::units::{Bytes, GIB};

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

impl OomFormat {
    /// The PyTorch versions that print this format.
    pub fn torch_versions(self) -> &'static str {
        match self {
            OomFormat::Cached => "torch 1.0 to 1.3",
            OomFormat::Reserved => "torch 1.4 to 2.0",
            OomFormat::OfWhichFree => "torch 2.1 or later",
            OomFormat::CudaMallocAsync => {
                "the cudaMallocAsync backend (pytorch/pytorch#82682, 2022)"
            }
            OomFormat::OverOneExabyte => "any recent torch, either backend",
            OomFormat::RequestOnly => "unknown",
        }
    }
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

/// Why the allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomClass {
    /// The load does not fit what this process may use (the card, or the fraction limit).
    Capacity,
    /// The memory is there, held by PyTorch's cache, but in pieces.
    Fragmentation,
    /// Someone else holds the memory the request lacked.
    AnotherProcess,
    /// The figures do not decide (see the reason).
    Unknown,
}

impl OomClass {
    /// `capacity`, `fragmentation`, `another process` or `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            OomClass::Capacity => "capacity",
            OomClass::Fragmentation => "fragmentation",
            OomClass::AnotherProcess => "another process",
            OomClass::Unknown => "unknown",
        }
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

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/// Reads the out-of-memory message in `message`, which may be surrounded by other text (a
/// traceback, a log) and wrapped over several lines. When it holds several, the last that parses
/// is returned.
///
/// `None` when there is no header (`CUDA|HIP|XPU out of memory. Tried to allocate`, `Allocation
/// on device N would exceed allowed memory. (out of memory)`) followed by a complete requested
/// size. A message cut after the request keeps the fields before the cut; the others are `None`.
/// Never panics.
pub fn parse(message: &str) -> Option<OomReport> {
    // Logs rewrap the message and the cudaMallocAsync one is aligned with runs of spaces.
    let text = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut found: Vec<(usize, OomReport)> = Vec::new();
    for (at, _) in text.match_indices(TRIED) {
        let before = &text[..at];
        let platform = if before.ends_with("CUDA ") {
            Platform::Cuda
        } else if before.ends_with("HIP ") {
            Platform::Hip
        } else if before.ends_with("XPU ") {
            Platform::Xpu
        } else {
            continue;
        };
        if let Some(report) = parse_caching(&text[at + TRIED.len()..], platform) {
            found.push((at, report));
        }
    }
    for (at, _) in text.match_indices(ASYNC) {
        if let Some(report) = parse_async(&text[at + ASYNC.len()..]) {
            found.push((at, report));
        }
    }
    found.into_iter().max_by_key(|(at, _)| *at).map(|(_, r)| r)
}

const TRIED: &str = "out of memory. Tried to allocate ";
const ASYNC: &str = "Allocation on device ";
/// NVML_VALUE_NOT_AVAILABLE (2^64 − 1) goes through `format_size` as `17179869184.00 GiB`.
const NOT_AVAILABLE_FROM: u128 = 1 << 64;

/// A size field: a size, or NVML's "not available".
enum Reading {
    Size(PrintedSize),
    NotAvailable,
}

fn eat(s: &mut &str, literal: &str) -> bool {
    match s.strip_prefix(literal) {
        Some(rest) => {
            *s = rest;
            true
        }
        None => false,
    }
}

fn digits(s: &mut &str, max: usize) -> Option<u64> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > max {
        return None;
    }
    let value = s[..n].parse().ok()?;
    *s = &s[n..];
    Some(value)
}

/// Reads `format_size`'s output: `N bytes`, `D.DD KiB|MiB|GiB`.
fn reading(s: &mut &str) -> Option<Reading> {
    let start = *s;
    let mut rest = start;
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    if int_len == 0 || int_len > 20 {
        return None;
    }
    let int = &rest[..int_len];
    rest = &rest[int_len..];
    let mut frac = "";
    if let Some(after) = rest.strip_prefix('.') {
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 4 {
            return None;
        }
        frac = &after[..n];
        rest = &after[n..];
    }
    rest = rest.strip_prefix(' ')?;
    let (unit, len) = [("bytes", 1u64), ("KiB", KIB), ("MiB", MIB), ("GiB", GIB)]
        .into_iter()
        .find(|(name, _)| rest.starts_with(name))
        .map(|(name, unit)| (unit, name.len()))?;
    rest = &rest[len..];
    if rest
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
    {
        return None;
    }
    // At most 24 digits times 2^30: far inside u128.
    let mut mantissa: u128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        mantissa = mantissa * 10 + u128::from(b - b'0');
    }
    let scale = 10u128.pow(frac.len() as u32);
    let unit = u128::from(unit);
    let bytes = (mantissa * unit * 2 + scale) / (2 * scale);
    let precision = if unit == 1 && frac.is_empty() {
        0
    } else {
        // Half a unit of the last digit, plus half a byte of the rounding above, rounded up.
        (unit + scale).div_ceil(2 * scale)
    };
    let text = start[..start.len() - rest.len()].to_string();
    *s = rest;
    if bytes >= NOT_AVAILABLE_FROM {
        return Some(Reading::NotAvailable);
    }
    Some(Reading::Size(PrintedSize {
        bytes: Bytes(bytes as u64),
        precision_bytes: precision as u64,
        text,
    }))
}

/// A size that must be a size (a "not available" reading fails it).
fn size(s: &mut &str) -> Option<PrintedSize> {
    let mut t = *s;
    match reading(&mut t)? {
        Reading::Size(size) => {
            *s = t;
            Some(size)
        }
        Reading::NotAvailable => None,
    }
}

fn empty_report(format: OomFormat, platform: Platform, request: PrintedSize) -> OomReport {
    OomReport {
        format,
        platform,
        device: None,
        tried_to_allocate: request,
        request_is_lower_bound: false,
        total_capacity: None,
        free: None,
        this_process_listed: false,
        this_process_in_use: None,
        other_processes: Vec::new(),
        allowed: None,
        allocated_by_pytorch: None,
        reserved_by_pytorch: None,
        reserved_but_unallocated: None,
        private_pools: None,
        hint: None,
    }
}

/// After `… out of memory. Tried to allocate `: the caching allocator's formats.
fn parse_caching(mut s: &str, platform: Platform) -> Option<OomReport> {
    if s.starts_with("more than 1EB memory") {
        let mut report = empty_report(
            OomFormat::OverOneExabyte,
            platform,
            PrintedSize::exact(1 << 60, "more than 1EB"),
        );
        report.request_is_lower_bound = true;
        return Some(report);
    }
    let request = size(&mut s)?;
    if s.starts_with(" (GPU ") {
        Some(parse_parenthesised(s, platform, request))
    } else if s.starts_with(". GPU ") {
        Some(parse_sentences(s, platform, request))
    } else {
        Some(empty_report(OomFormat::RequestOnly, platform, request))
    }
}

/// `(GPU 0; X total capacity; X already allocated; X free; [X allowed; ]X reserved in total by
/// PyTorch)` and its 2018 form ending in `X cached)`.
fn parse_parenthesised(mut s: &str, platform: Platform, request: PrintedSize) -> OomReport {
    let mut report = empty_report(OomFormat::Reserved, platform, request);
    eat(&mut s, " (GPU ");
    let Some(device) = digits(&mut s, 9) else {
        return report;
    };
    if !eat(&mut s, "; ") {
        return report;
    }
    report.device = u32::try_from(device).ok();
    let mut cached = None;
    let mut closed = false;
    loop {
        let mut t = s;
        let Some(value) = size(&mut t) else { break };
        if !eat(&mut t, " ") {
            break;
        }
        let label = [
            "total capacity",
            "already allocated",
            "free",
            "allowed",
            "reserved in total by PyTorch",
            "cached",
        ]
        .into_iter()
        .find(|label| {
            t.strip_prefix(*label)
                .is_some_and(|r| r.is_empty() || r.starts_with(';') || r.starts_with(')'))
        });
        let Some(label) = label else { break };
        t = &t[label.len()..];
        let slot = match label {
            "total capacity" => &mut report.total_capacity,
            "already allocated" => &mut report.allocated_by_pytorch,
            "free" => &mut report.free,
            "allowed" => &mut report.allowed,
            "reserved in total by PyTorch" => &mut report.reserved_by_pytorch,
            _ => &mut cached,
        };
        *slot = Some(value);
        s = t;
        if eat(&mut s, "; ") {
            continue;
        }
        closed = eat(&mut s, ")");
        break;
    }
    if let Some(cached) = cached {
        report.format = OomFormat::Cached;
        report.reserved_but_unallocated = Some(cached);
    }
    if closed
        && s.starts_with(" If reserved memory is >> allocated memory try setting max_split_size_mb")
    {
        report.hint = Some(AllocatorHint::MaxSplitSizeMb);
    }
    derive(&mut report);
    report
}

/// `. GPU 0 has a total capacity of X of which X is free. [processes][X allowed; ]Of the
/// allocated memory X is allocated by PyTorch, [with X allocated in private pools (e.g., CUDA
/// Graphs), ]and X is reserved by PyTorch but unallocated.[ hint]`
fn parse_sentences(mut s: &str, platform: Platform, request: PrintedSize) -> OomReport {
    let mut report = empty_report(OomFormat::OfWhichFree, platform, request);
    eat(&mut s, ". GPU ");
    let Some(device) = digits(&mut s, 9) else {
        return report;
    };
    // `capacty`: the spelling of torch 2.1.
    if !eat(&mut s, " has a total capacity of ") && !eat(&mut s, " has a total capacty of ") {
        return report;
    }
    report.device = u32::try_from(device).ok();
    let Some(total) = size(&mut s) else {
        return report;
    };
    report.total_capacity = Some(total);
    if eat(&mut s, " of which ") {
        let Some(free) = size(&mut s) else {
            return report;
        };
        report.free = Some(free);
        if !eat(&mut s, " is free.") {
            return report;
        }
    } else if !eat(&mut s, ".") {
        // Old XPU builds print no free memory: `has a total capacity of X. Of the allocated …`.
        return report;
    }
    loop {
        eat(&mut s, " ");
        if eat(&mut s, "Process ") {
            let Some(pid) = digits(&mut s, 19) else { break };
            if !eat(&mut s, " has ") {
                break;
            }
            let in_use = match reading(&mut s) {
                Some(Reading::Size(size)) => Some(size),
                Some(Reading::NotAvailable) => None,
                None => break,
            };
            report.other_processes.push(ProcessUsage { pid, in_use });
            if !eat(&mut s, " memory in use.") {
                break;
            }
        } else if eat(&mut s, "Including non-PyTorch memory, this process has ") {
            let in_use = match reading(&mut s) {
                Some(Reading::Size(size)) => Some(size),
                Some(Reading::NotAvailable) => None,
                None => break,
            };
            report.this_process_listed = true;
            report.this_process_in_use = in_use;
            if !eat(&mut s, " memory in use.") {
                break;
            }
        } else if eat(&mut s, "Of the allocated memory ") {
            parse_of_the_allocated(s, &mut report);
            break;
        } else {
            let mut t = s;
            match size(&mut t) {
                Some(allowed) if eat(&mut t, " allowed;") => {
                    report.allowed = Some(allowed);
                    s = t;
                }
                _ => break,
            }
        }
    }
    derive(&mut report);
    report
}

fn parse_of_the_allocated(mut s: &str, report: &mut OomReport) {
    let Some(allocated) = size(&mut s) else {
        return;
    };
    report.allocated_by_pytorch = Some(allocated);
    if !eat(&mut s, " is allocated by PyTorch,") {
        return;
    }
    if eat(&mut s, " with ") {
        let Some(private) = size(&mut s) else {
            return;
        };
        report.private_pools = Some(private);
        if !eat(&mut s, " allocated in private pools (e.g., CUDA Graphs),") {
            return;
        }
    }
    if !eat(&mut s, " and ") {
        return;
    }
    let Some(unallocated) = size(&mut s) else {
        return;
    };
    report.reserved_but_unallocated = Some(unallocated);
    if !eat(&mut s, " is reserved by PyTorch but unallocated.") {
        return;
    }
    if eat(
        &mut s,
        " If reserved but unallocated memory is large try setting ",
    ) {
        let setting = s.split(' ').next().unwrap_or("");
        if setting.starts_with("max_split_size_mb") {
            report.hint = Some(AllocatorHint::MaxSplitSizeMb);
        } else if setting.contains("ALLOC_CONF=expandable_segments:True") {
            report.hint = Some(AllocatorHint::ExpandableSegments);
        }
    } else if s.starts_with(" Please use `empty_cache`") {
        report.hint = Some(AllocatorHint::EmptyCache);
    }
}

/// After `Allocation on device `: the cudaMallocAsync backend's message.
fn parse_async(mut s: &str) -> Option<OomReport> {
    let device = digits(&mut s, 9)?;
    if !eat(&mut s, " would exceed allowed memory. (out of memory)") {
        return None;
    }
    if !eat(&mut s, " Currently allocated : ") {
        return None;
    }
    let allocated = size(&mut s)?;
    if !eat(&mut s, " Requested : ") {
        return None;
    }
    let request = size(&mut s)?;
    let mut report = empty_report(OomFormat::CudaMallocAsync, Platform::Cuda, request);
    report.device = u32::try_from(device).ok();
    report.allocated_by_pytorch = Some(allocated);
    if !eat(&mut s, " Device limit : ") {
        return Some(report);
    }
    let Some(total) = size(&mut s) else {
        return Some(report);
    };
    report.total_capacity = Some(total);
    if eat(&mut s, " Free (according to CUDA): ") {
    } else if eat(&mut s, " Free (according to HIP): ") {
        report.platform = Platform::Hip;
    } else {
        return Some(report);
    }
    let Some(free) = size(&mut s) else {
        return Some(report);
    };
    report.free = Some(free);
    if !eat(
        &mut s,
        " PyTorch limit (set by user-supplied memory fraction) : ",
    ) {
        return Some(report);
    }
    // Without a fraction the limit is UINT64_MAX, printed like NVML's "not available".
    if let Some(Reading::Size(limit)) = reading(&mut s) {
        report.allowed = Some(limit);
    }
    Some(report)
}

/// Fills reserved from allocated + unallocated, or unallocated from reserved − allocated.
fn derive(report: &mut OomReport) {
    match (
        &report.allocated_by_pytorch,
        &report.reserved_by_pytorch,
        &report.reserved_but_unallocated,
    ) {
        (Some(a), None, Some(u)) => report.reserved_by_pytorch = Some(PrintedSize::sum(a, u)),
        (Some(a), Some(r), None) => {
            report.reserved_but_unallocated = Some(PrintedSize::difference(r, a));
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

/// Noise floor of rule 5 when this process's memory is NVML's reading.
const NOISE_MEASURED: u64 = 256 * MIB;
/// Noise floor of rule 5 when it is estimated from PyTorch's reserved memory.
const NOISE_ESTIMATED: u64 = GIB;

fn value(size: &Option<PrintedSize>) -> Option<u64> {
    size.as_ref().map(|s| s.bytes.0)
}

fn precision(size: &Option<PrintedSize>) -> u64 {
    size.as_ref().map_or(0, |s| s.precision_bytes)
}

/// `429.50 GB = 400.00 GiB`
fn both(bytes: u64) -> String {
    Bytes(bytes).both()
}

/// `a, b and c`
fn join_and(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [head @ .., last] => format!("{} and {last}", head.join(", ")),
    }
}

/// `400.60GiB`, rounded up to the hundredth, as `iteragpu cards --need` takes it.
fn gib_ceil(bytes: u64) -> String {
    let hundredths = (u128::from(bytes) * 100).div_ceil(u128::from(GIB));
    format!("{}.{:02}GiB", hundredths / 100, hundredths % 100)
}

/// Classifies a report by the rule of the module documentation; never panics.
pub fn classify(report: &OomReport) -> Diagnosis {
    let r = report.tried_to_allocate.bytes.0;
    let a = value(&report.allocated_by_pytorch);
    let u = value(&report.reserved_but_unallocated);
    let reserved = value(&report.reserved_by_pytorch);
    let t = value(&report.total_capacity);
    let l = value(&report.allowed);
    let f = value(&report.free);

    // This process: NVML's reading, a listed process taken to be it, or PyTorch's reserved.
    let listed = report.this_process_in_use.as_ref().map(|p| p.bytes.0);
    let candidate = if report.this_process_listed {
        None
    } else {
        reserved.and_then(|res| {
            let floor = res.saturating_sub(precision(&report.reserved_by_pytorch));
            report
                .other_processes
                .iter()
                .filter_map(|p| p.in_use.as_ref().map(|s| (p.pid, s.bytes.0)))
                .filter(|(_, used)| *used >= floor)
                .min_by_key(|(_, used)| *used)
        })
    };
    // The cudaMallocAsync message has no cache figure: its live allocations are the estimate.
    let estimate = match report.format {
        OomFormat::CudaMallocAsync => reserved.or(a),
        _ => reserved,
    };
    let (p, p_source) = match (listed, candidate, estimate) {
        (Some(p), _, _) => (Some(p), Some(ProcessSource::Nvml)),
        (None, Some((pid, p)), _) => (Some(p), Some(ProcessSource::ListedPid(pid))),
        (None, None, Some(estimate)) => (Some(estimate), Some(ProcessSource::Estimated)),
        _ => (None, None),
    };
    let measured = matches!(
        p_source,
        Some(ProcessSource::Nvml | ProcessSource::ListedPid(_))
    );
    let n = match (p, reserved) {
        (Some(p), Some(res)) if measured => Some(p.saturating_sub(res)),
        _ => None,
    };
    let others: Vec<&ProcessUsage> = report
        .other_processes
        .iter()
        .filter(|p| !matches!(p_source, Some(ProcessSource::ListedPid(pid)) if pid == p.pid))
        .collect();

    let a0 = a.unwrap_or(0);
    let need_card = a0.saturating_add(r).saturating_add(n.unwrap_or(0));
    let need_limit = a0.saturating_add(r);
    let shortfall = match (l, reserved) {
        (Some(l), Some(res)) if res.saturating_add(r) > l && need_limit <= l => {
            Some(res.saturating_add(r) - l)
        }
        _ => f.map(|f| r.saturating_sub(f)),
    };
    let held = match (t, p, f) {
        (Some(t), Some(p), Some(f)) => Some(t.saturating_sub(p).saturating_sub(f)),
        _ => None,
    };
    let mut figures = Figures {
        need: None,
        limit: None,
        limit_kind: None,
        this_process: p.map(Bytes),
        this_process_source: p_source,
        non_pytorch: n.map(Bytes),
        reserved_unallocated: u.map(Bytes),
        shortfall: shortfall.map(Bytes),
        held_elsewhere: held.map(Bytes),
    };
    let against = |kind: LimitKind, figures: &mut Figures| {
        let (need, limit) = match kind {
            LimitKind::Card => (need_card, t),
            LimitKind::MemoryFraction => (need_limit, l),
        };
        figures.need = Some(Bytes(need));
        figures.limit = limit.map(Bytes);
        figures.limit_kind = Some(kind);
    };
    let ctx = Context {
        report,
        a,
        n,
        p_source,
        others: &others,
    };

    // 0. A message whose every figure is zero (a driver that could not read them) decides nothing.
    let zeros = r == 0
        && [a, u, reserved, t, l, f]
            .iter()
            .all(|v| v.is_none_or(|v| v == 0));
    if zeros && !report.request_is_lower_bound {
        return unknown(
            OomRule::MissingFigures,
            "every figure of the message is zero (the request, the capacity, the free and the allocated memory): nothing can be classified from it".into(),
            figures,
        );
    }
    // 1. Capacity, certain.
    if report.request_is_lower_bound {
        return ctx.capacity(OomRule::OverCapacity, None, figures);
    }
    let over_limit = l.is_some_and(|l| need_limit > l);
    let over_card = t.is_some_and(|t| need_card > t);
    if over_limit || over_card {
        // Both exceeded: the smaller limit binds.
        let kind = match (over_limit, over_card) {
            (true, true) if t < l => LimitKind::Card,
            (true, _) => LimitKind::MemoryFraction,
            _ => LimitKind::Card,
        };
        against(kind, &mut figures);
        return ctx.capacity(OomRule::OverCapacity, Some(kind), figures);
    }
    // Default figures: against the binding limit.
    match (t, l) {
        (_, Some(l)) if t.is_none_or(|t| l <= t) => {
            against(LimitKind::MemoryFraction, &mut figures)
        }
        (Some(_), _) => against(LimitKind::Card, &mut figures),
        _ => {}
    }
    // 2. Fragmentation: the cache alone would hold the request (an empty request and an empty
    // cache say nothing: a message of zeros is not fragmentation).
    if let Some(u) = u
        && r > 0
        && u >= r
    {
        return ctx.fragmentation(OomRule::CacheCoversRequest, figures);
    }
    // 3. Capacity, within rounding.
    if a.is_some() {
        let slack = report
            .tried_to_allocate
            .precision_bytes
            .saturating_add(precision(&report.allocated_by_pytorch));
        let near = |need: u64, limit: Option<u64>, limit_precision: u64| {
            limit.is_some_and(|limit| {
                let tolerance = (limit / 100)
                    .saturating_add(slack)
                    .saturating_add(limit_precision);
                need.saturating_add(tolerance) >= limit
            })
        };
        let near_limit = near(need_limit, l, precision(&report.allowed));
        let near_card = near(need_card, t, precision(&report.total_capacity));
        if near_limit || near_card {
            let kind = if near_limit {
                LimitKind::MemoryFraction
            } else {
                LimitKind::Card
            };
            against(kind, &mut figures);
            return ctx.capacity(OomRule::NearCapacity, Some(kind), figures);
        }
    }
    // 4. The fraction limit refused it because the cache counts against it.
    if let (Some(l), Some(res)) = (l, reserved)
        && res.saturating_add(r) > l
    {
        against(LimitKind::MemoryFraction, &mut figures);
        return ctx.fragmentation(OomRule::FractionLimitCache, figures);
    }
    // 5. Another process: only when the free memory lacked something (a shortfall) and memory
    // held elsewhere covers it; when the free memory covered the request, what capped this
    // process is a limit (rule 8 says which), never another process.
    if let (Some(held), Some(short)) = (held, f.map(|f| r.saturating_sub(f))) {
        let noise = if measured {
            NOISE_MEASURED
        } else {
            NOISE_ESTIMATED
        };
        if short > 0 && held >= noise && held >= short {
            figures.shortfall = Some(Bytes(short));
            return ctx.another_process(held, short, figures);
        }
    }
    // 6. Fragmentation: the cache would cover what the free memory lacked.
    if let (Some(u), Some(short)) = (u, shortfall)
        && u > 0
        && short > 0
        && u >= short
    {
        return ctx.fragmentation(OomRule::CacheCoversShortfall, figures);
    }
    // 7, 8. Unknown.
    let mut missing = Vec::new();
    if t.is_none() && l.is_none() {
        missing.push("the card's total capacity");
    }
    if a.is_none() {
        missing.push("the memory allocated by PyTorch");
    }
    if u.is_none() {
        missing.push("the memory reserved by PyTorch but unallocated");
    }
    if f.is_none() {
        missing.push("the free memory");
    }
    let (rule, reason) = if missing.is_empty() && shortfall == Some(0) && l.is_none() {
        (
            OomRule::NoRuleFits,
            format!(
                "the device had {} free, more than the request ({}), so something other than the card capped this process: a memory fraction (`torch.cuda.set_per_process_memory_fraction`, printed as `allowed` only by PyTorch 1.8–2.0 and 2.5+) or another limit; check the run's settings",
                both(f.unwrap_or(0)),
                both(r)
            ),
        )
    } else if missing.is_empty() {
        (
            OomRule::NoRuleFits,
            format!(
                "no rule fits: the request ({}) and live allocations ({}) stay well under the limit, the cached pieces ({}) are smaller than the free memory's shortfall ({}), and the memory held elsewhere ({}) does not cover it",
                both(r),
                both(a0),
                both(u.unwrap_or(0)),
                both(shortfall.unwrap_or(0)),
                both(held.unwrap_or(0)),
            ),
        )
    } else {
        let backend = if report.format == OomFormat::CudaMallocAsync {
            " (the cudaMallocAsync backend prints no cache figure)"
        } else {
            ""
        };
        (
            OomRule::MissingFigures,
            format!(
                "cannot tell why the request ({}) failed: the message lacks {}{}",
                both(r),
                join_and(&missing),
                backend
            ),
        )
    };
    unknown(rule, reason, figures)
}

/// An unknown class, with the reason and what to do to find out.
fn unknown(rule: OomRule, reason: String, figures: Figures) -> Diagnosis {
    Diagnosis {
        class: OomClass::Unknown,
        rule,
        reason,
        advice: vec![
            "Measure the workload phase by phase in a fresh process (`iteragpu measure`): the phase that reaches the peak, and PyTorch's allocated and reserved memory there, decide the class.".into(),
            "`iteragpu environment` shows the card's free memory and the processes on it.".into(),
        ],
        figures,
    }
}

/// What the advice and reasons need besides the figures.
struct Context<'a> {
    report: &'a OomReport,
    a: Option<u64>,
    n: Option<u64>,
    p_source: Option<ProcessSource>,
    others: &'a [&'a ProcessUsage],
}

impl Context<'_> {
    fn capacity(&self, rule: OomRule, kind: Option<LimitKind>, figures: Figures) -> Diagnosis {
        let report = self.report;
        let r = report.tried_to_allocate.bytes.0;
        let need = figures.need.map_or(r, |b| b.0);
        // Near the limit, the need would find the same card: ask for the request on top of it.
        let card_need = match (rule, figures.limit) {
            (OomRule::NearCapacity, Some(limit)) => limit.0.saturating_add(r).max(need),
            _ => need,
        };
        let mut advice = vec![
            "Find the frontier at a smaller load: `iteragpu sweep --vary DIM=LO..HI --search frontier` gives the largest batch, context or other dimension that fits.".to_string(),
            format!(
                "Reduce the dimension that drives the peak (batch, context or sequence length, width), or its bytes per element (dtype, quantization, activation checkpointing), until the need falls under {}.",
                figures.limit.map_or("the card's capacity".to_string(), |l| both(l.0))
            ),
            format!(
                "Or a larger card: `iteragpu cards --need {}` lists the cards that hold {} (at least: later allocations may need more).",
                gib_ceil(card_need),
                both(card_need)
            ),
        ];
        let reason = if report.request_is_lower_bound {
            advice.insert(
                0,
                "A request over 1 EB is almost always a wrong shape (an overflowed or mistaken dimension): check the tensor being created before anything else.".into(),
            );
            "the request is more than 1 EB (1,152,921,504,606,846,976 bytes): no card holds it"
                .to_string()
        } else {
            let parts = self.need_parts(kind == Some(LimitKind::Card));
            let limit = figures.limit.map_or(0, |b| b.0);
            let limit_text = match kind {
                Some(LimitKind::MemoryFraction) => {
                    let total = report
                        .total_capacity
                        .as_ref()
                        .map(|t| format!("; the card has {}", both(t.bytes.0)))
                        .unwrap_or_default();
                    let fraction = format!(
                        "The limit is a memory fraction set with `torch.cuda.set_per_process_memory_fraction`{total}: raise the fraction if the card is yours."
                    );
                    // A larger card helps only if this card cannot hold the need either.
                    let card_holds = report
                        .total_capacity
                        .as_ref()
                        .is_some_and(|t| self.need_on_card() <= t.bytes.0);
                    if card_holds {
                        advice[2] = fraction;
                    } else {
                        advice.push(fraction);
                    }
                    format!("the memory-fraction limit of {}", both(limit))
                }
                _ => format!("the card's total capacity of {}", both(limit)),
            };
            let verb = if rule == OomRule::NearCapacity {
                "is within rounding of"
            } else {
                "exceeds"
            };
            format!("{parts} = {}, which {verb} {limit_text}", both(need))
        };
        Diagnosis {
            class: OomClass::Capacity,
            rule,
            reason,
            advice,
            figures,
        }
    }

    /// A + R + N: what this process needs on the card.
    fn need_on_card(&self) -> u64 {
        self.a
            .unwrap_or(0)
            .saturating_add(self.report.tried_to_allocate.bytes.0)
            .saturating_add(self.n.unwrap_or(0))
    }

    /// `the request (…) + PyTorch's live allocations (…) + this process's non-PyTorch memory (…)`
    fn need_parts(&self, with_non_pytorch: bool) -> String {
        let mut parts = vec![format!(
            "the request ({})",
            both(self.report.tried_to_allocate.bytes.0)
        )];
        if let Some(a) = self.a {
            parts.push(format!("PyTorch's live allocations ({})", both(a)));
        }
        if with_non_pytorch && let Some(n) = self.n {
            let whose = match self.p_source {
                Some(ProcessSource::ListedPid(pid)) => {
                    format!("this process's (taken to be process {pid})")
                }
                _ => "this process's".to_string(),
            };
            parts.push(format!("{whose} non-PyTorch memory ({})", both(n)));
        }
        parts.join(" + ")
    }

    fn fragmentation(&self, rule: OomRule, figures: Figures) -> Diagnosis {
        let report = self.report;
        let r = report.tried_to_allocate.bytes.0;
        let u = figures.reserved_unallocated.map_or(0, |b| b.0);
        let reason = match rule {
            OomRule::CacheCoversRequest => format!(
                "PyTorch holds {} reserved but unallocated, at least the request's {}, yet no cached block fits it: the memory is there, in pieces",
                both(u),
                both(r)
            ),
            OomRule::FractionLimitCache => format!(
                "the memory-fraction limit of {} is reached by PyTorch's reserved memory plus the request, although its live allocations plus the request ({}) fit: {} of cached pieces count against the limit",
                figures.limit.map_or_else(|| "?".into(), |l| both(l.0)),
                both(figures.need.map_or(r, |b| b.0)),
                both(u)
            ),
            _ => format!(
                "the free memory ({}) lacks {} for the request ({}), and PyTorch holds {} reserved but unallocated: the missing memory is there, in pieces",
                both(value(&report.free).unwrap_or(0)),
                both(figures.shortfall.map_or(0, |b| b.0)),
                both(r),
                both(u)
            ),
        };
        let mut expandable = "Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before the process starts: segments then grow and shrink by pages, so freed memory serves any size.".to_string();
        if matches!(report.format, OomFormat::Cached | OomFormat::Reserved) {
            expandable.push_str(" Expandable segments first shipped in torch 2.1 and this message's format is older: upgrade, or try `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N` (blocks over N MiB are then never split).");
        }
        if report.platform == Platform::Hip {
            expandable.push_str(
                " On ROCm builds that print `PYTORCH_HIP_ALLOC_CONF`, set that variable instead.",
            );
        }
        let mut advice = vec![
            expandable,
            "Check it with an A/B in fresh processes: `iteragpu sweep --vary alloc_conf=default,expandable_segments`.".to_string(),
            "Call `torch.cuda.empty_cache()` between phases (after loading, between evaluation and training) so the previous phase's cached blocks go back to the driver before the next one allocates other sizes.".to_string(),
        ];
        if let Some(private) = &report.private_pools
            && private.bytes.0 > 0
        {
            advice.push(format!(
                "{} sits free in private pools (CUDA Graphs): release the graphs you no longer replay.",
                both(private.bytes.0)
            ));
        }
        Diagnosis {
            class: OomClass::Fragmentation,
            rule,
            reason,
            advice,
            figures,
        }
    }

    fn another_process(&self, held: u64, short: u64, figures: Figures) -> Diagnosis {
        let report = self.report;
        let named: Vec<String> = self
            .others
            .iter()
            .map(|p| match &p.in_use {
                Some(size) => format!("process {} ({})", p.pid, both(size.bytes.0)),
                None => format!("process {} (usage not available)", p.pid),
            })
            .collect();
        let whom = if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        };
        let this = match self.p_source {
            Some(ProcessSource::Nvml) => "this process uses",
            Some(ProcessSource::ListedPid(_)) => {
                "this process (taken to be the listed one that covers PyTorch's reserved memory) uses"
            }
            _ => "PyTorch holds",
        };
        let reason = format!(
            "the card has {} free of {} while {this} {}: {} is held elsewhere{whom}, more than the {} the request ({}) lacked",
            both(value(&report.free).unwrap_or(0)),
            both(value(&report.total_capacity).unwrap_or(0)),
            both(figures.this_process.map_or(0, |b| b.0)),
            both(held),
            both(short),
            both(report.tried_to_allocate.bytes.0),
        );
        let mut advice = vec![
            format!(
                "Free the device: stop or wait for {}, or run on another GPU (`CUDA_VISIBLE_DEVICES`).",
                if named.is_empty() {
                    "the other work on the card".to_string()
                } else {
                    named.join(", ")
                }
            ),
            "`iteragpu environment` lists the processes on the card, with their memory."
                .to_string(),
        ];
        match self.p_source {
            Some(ProcessSource::ListedPid(pid)) => advice.push(format!(
                "PyTorch did not recognize itself among NVML's processes (inside a container NVML shows host PIDs): process {pid} was taken to be this one."
            )),
            Some(ProcessSource::Estimated) => {
                advice.push(
                    "The message lists no memory for this process (ROCm, or NVML unavailable): part of the held memory may be this process's own CUDA context and library workspaces."
                        .into(),
                );
                if report.format == OomFormat::CudaMallocAsync {
                    advice.push(
                        "With the cudaMallocAsync backend the pool may also keep freed blocks of this process: compare with what `iteragpu environment` shows for it."
                            .into(),
                    );
                }
            }
            _ => {}
        }
        Diagnosis {
            class: OomClass::AnotherProcess,
            rule: OomRule::HeldElsewhere,
            reason,
            advice,
            figures,
        }
    }
}

#[cfg(test)]
mod tests;
