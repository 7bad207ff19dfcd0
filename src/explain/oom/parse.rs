//! Reading PyTorch's out-of-memory messages of every version (the formats are in the parent
//! module's documentation) into an [`OomReport`].

use super::*;

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

pub(super) const TRIED: &str = "out of memory. Tried to allocate ";
pub(super) const ASYNC: &str = "Allocation on device ";
/// NVML_VALUE_NOT_AVAILABLE (2^64 − 1) goes through `format_size` as `17179869184.00 GiB`.
pub(super) const NOT_AVAILABLE_FROM: u128 = 1 << 64;

/// A size field: a size, or NVML's "not available".
pub(super) enum Reading {
    Size(PrintedSize),
    NotAvailable,
}

pub(super) fn eat(s: &mut &str, literal: &str) -> bool {
    match s.strip_prefix(literal) {
        Some(rest) => {
            *s = rest;
            true
        }
        None => false,
    }
}

pub(super) fn digits(s: &mut &str, max: usize) -> Option<u64> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > max {
        return None;
    }
    let value = s[..n].parse().ok()?;
    *s = &s[n..];
    Some(value)
}

/// Reads `format_size`'s output: `N bytes`, `D.DD KiB|MiB|GiB`.
pub(super) fn reading(s: &mut &str) -> Option<Reading> {
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

/// NVML's figure for a process: a size, or `Some(None)` when NVML has none.
fn in_use(s: &mut &str) -> Option<Option<PrintedSize>> {
    match reading(s)? {
        Reading::Size(size) => Some(Some(size)),
        Reading::NotAvailable => Some(None),
    }
}

/// A size that must be a size (a "not available" reading fails it).
pub(super) fn size(s: &mut &str) -> Option<PrintedSize> {
    let mut t = *s;
    match reading(&mut t)? {
        Reading::Size(size) => {
            *s = t;
            Some(size)
        }
        Reading::NotAvailable => None,
    }
}

pub(super) fn empty_report(
    format: OomFormat,
    platform: Platform,
    request: PrintedSize,
) -> OomReport {
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
pub(super) fn parse_caching(mut s: &str, platform: Platform) -> Option<OomReport> {
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

/// Where a field of the parenthesised formats goes.
type Slot = fn(&mut OomReport) -> &mut Option<PrintedSize>;

/// The fields of the parenthesised formats, by label; 2018's `cached` is reserved − allocated.
const PARENTHESISED: [(&str, Slot); 6] = [
    ("total capacity", |r| &mut r.total_capacity),
    ("already allocated", |r| &mut r.allocated_by_pytorch),
    ("free", |r| &mut r.free),
    ("allowed", |r| &mut r.allowed),
    ("reserved in total by PyTorch", |r| {
        &mut r.reserved_by_pytorch
    }),
    ("cached", |r| &mut r.reserved_but_unallocated),
];

/// `(GPU 0; X total capacity; X already allocated; X free; [X allowed; ]X reserved in total by
/// PyTorch)` and its 2018 form ending in `X cached)`.
pub(super) fn parse_parenthesised(
    mut s: &str,
    platform: Platform,
    request: PrintedSize,
) -> OomReport {
    let mut report = empty_report(OomFormat::Reserved, platform, request);
    eat(&mut s, " (GPU ");
    let Some(device) = digits(&mut s, 9) else {
        return report;
    };
    if !eat(&mut s, "; ") {
        return report;
    }
    report.device = u32::try_from(device).ok();
    let mut closed = false;
    loop {
        let mut t = s;
        let Some(value) = size(&mut t) else { break };
        if !eat(&mut t, " ") {
            break;
        }
        let field = PARENTHESISED.iter().find(|(label, _)| {
            t.strip_prefix(*label)
                .is_some_and(|r| r.is_empty() || r.starts_with(';') || r.starts_with(')'))
        });
        let Some((label, slot)) = field else { break };
        t = &t[label.len()..];
        *slot(&mut report) = Some(value);
        s = t;
        if eat(&mut s, "; ") {
            continue;
        }
        closed = eat(&mut s, ")");
        break;
    }
    // Only the 2018 form prints the unallocated part itself (`cached`).
    if report.reserved_but_unallocated.is_some() {
        report.format = OomFormat::Cached;
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
pub(super) fn parse_sentences(mut s: &str, platform: Platform, request: PrintedSize) -> OomReport {
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
            let Some(in_use) = in_use(&mut s) else { break };
            report.other_processes.push(ProcessUsage { pid, in_use });
            if !eat(&mut s, " memory in use.") {
                break;
            }
        } else if eat(&mut s, "Including non-PyTorch memory, this process has ") {
            let Some(in_use) = in_use(&mut s) else { break };
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

pub(super) fn parse_of_the_allocated(mut s: &str, report: &mut OomReport) {
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
pub(super) fn parse_async(mut s: &str) -> Option<OomReport> {
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
pub(super) fn derive(report: &mut OomReport) {
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
