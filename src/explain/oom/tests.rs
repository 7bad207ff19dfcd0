use super::classify::*;
use super::parse::*;
use super::*;
use proptest::prelude::*;

/// Bytes a `format_size` text stands for (hundredths of the unit, rounded half up),
/// computed independently of the parser.
fn gib(hundredths: u64) -> u64 {
    ((u128::from(hundredths) * u128::from(GIB) * 2 + 100) / 200) as u64
}
fn mib(hundredths: u64) -> u64 {
    ((u128::from(hundredths) * u128::from(MIB) * 2 + 100) / 200) as u64
}

fn bytes(size: &Option<PrintedSize>) -> u64 {
    size.as_ref().expect("field present").bytes.0
}

/// The allocator's `format_size`, as c10/cuda/CUDACachingAllocator.cpp writes it.
fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1_048_576 {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1_073_741_824 {
        format!("{:.2} MiB", size as f64 / 1_048_576.0)
    } else {
        format!("{:.2} GiB", size as f64 / 1_073_741_824.0)
    }
}

/// The H200 message (torch 2.11), verbatim.
const H200: &str = "CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 139.20 GiB is free. Including non-PyTorch memory, this process has 610.00 MiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

#[test]
fn printed_sizes_carry_bytes_and_precision() {
    let mut s = "139.80 GiB";
    let Some(Reading::Size(size)) = reading(&mut s) else {
        panic!("a size")
    };
    assert_eq!(size.bytes, Bytes(150_109_106_995));
    assert_eq!(size.precision_bytes, 5_368_710);
    assert_eq!(size.text, "139.80 GiB");
    let mut s = "0 bytes";
    let Some(Reading::Size(size)) = reading(&mut s) else {
        panic!("a size")
    };
    assert_eq!((size.bytes, size.precision_bytes), (Bytes(0), 0));
    let mut s = "1.50 KiB";
    let Some(Reading::Size(size)) = reading(&mut s) else {
        panic!("a size")
    };
    assert_eq!((size.bytes, size.precision_bytes), (Bytes(1536), 6));
    let mut s = "610.00 MiB";
    let Some(Reading::Size(size)) = reading(&mut s) else {
        panic!("a size")
    };
    assert_eq!(
        (size.bytes, size.precision_bytes),
        (Bytes(639_631_360), 5_244)
    );
    // NVML's "not available" (2^64 − 1, formatted as 2^64 bytes) is not a size.
    let not_available = format_size(u64::MAX);
    assert_eq!(not_available, "17179869184.00 GiB");
    let mut s = not_available.as_str();
    assert!(matches!(reading(&mut s), Some(Reading::NotAvailable)));
    // A unit must be complete.
    for cut in ["139.80 Gi", "139.80 ", "139.", "1.5 GiBx"] {
        let mut s = cut;
        assert!(reading(&mut s).is_none(), "{cut}");
    }
}

// --- One test per historical format, each message assembled as the C++ assembles it. ---

/// torch 1.0 – 1.3 (pytorch/pytorch#13751, THCCachingAllocator.cpp): the PR's own example.
/// `cached` is `amount_cached - amount_allocated`, i.e. reserved but unallocated.
#[test]
fn cached_format_torch_1_0() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "16.00 GiB",
        " (GPU ",
        "0",
        "; ",
        "11.93 GiB",
        " total capacity; ",
        "4.00 GiB",
        " already allocated; ",
        "7.33 GiB",
        " free; ",
        "179.00 KiB",
        " cached)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::Cached);
    assert_eq!(r.platform, Platform::Cuda);
    assert_eq!(r.device, Some(0));
    assert_eq!(r.tried_to_allocate.bytes.0, 16 * GIB);
    assert_eq!(bytes(&r.total_capacity), gib(1193));
    assert_eq!(bytes(&r.allocated_by_pytorch), 4 * GIB);
    assert_eq!(bytes(&r.free), gib(733));
    assert_eq!(bytes(&r.reserved_but_unallocated), 179 * KIB);
    assert_eq!(bytes(&r.reserved_by_pytorch), 4 * GIB + 179 * KIB);
    assert_eq!(r.allowed, None);
    assert_eq!(r.hint, None);
    assert_eq!(classify(&r).class, OomClass::Capacity);
}

/// torch 1.4 – 1.7: `reserved in total by PyTorch` (pytorch/pytorch#32101's message).
#[test]
fn reserved_format_torch_1_4() {
    let msg = concat!(
        "RuntimeError: ",
        "CUDA out of memory. Tried to allocate ",
        "152.00 MiB",
        " (GPU ",
        "0",
        "; ",
        "31.72 GiB",
        " total capacity; ",
        "24.89 GiB",
        " already allocated; ",
        "6.12 MiB",
        " free; ",
        "30.70 GiB",
        " reserved in total by PyTorch)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::Reserved);
    assert_eq!(r.tried_to_allocate.bytes.0, 152 * MIB);
    assert_eq!(bytes(&r.total_capacity), gib(3172));
    assert_eq!(bytes(&r.allocated_by_pytorch), gib(2489));
    assert_eq!(bytes(&r.free), mib(612));
    assert_eq!(bytes(&r.reserved_by_pytorch), gib(3070));
    // Derived: 30.70 GiB − 24.89 GiB, with both precisions.
    let u = r.reserved_but_unallocated.as_ref().expect("derived");
    assert_eq!(u.bytes.0, gib(3070) - gib(2489));
    assert_eq!(u.precision_bytes, 2 * 5_368_710);
    assert_eq!(u.text, "30.70 GiB - 24.89 GiB");
    // 5.81 GiB cached, 152 MiB refused: the textbook fragmentation case.
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Fragmentation, OomRule::CacheCoversRequest)
    );
}

/// torch 1.8 – 2.0 with `set_per_process_memory_fraction` (pytorch/pytorch#48172):
/// `X allowed; ` before the reserved figure. Numbers from a real run (fraction 0.1).
#[test]
fn reserved_format_with_memory_fraction_torch_1_8() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "37.25 GiB",
        " (GPU ",
        "0",
        "; ",
        "23.68 GiB",
        " total capacity; ",
        "192.29 MiB",
        " already allocated; ",
        "15.79 GiB",
        " free; ",
        "2.37 GiB allowed; ",
        "5.05 GiB",
        " reserved in total by PyTorch)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::Reserved);
    assert_eq!(bytes(&r.allowed), gib(237));
    assert_eq!(bytes(&r.allocated_by_pytorch), mib(19229));
    assert_eq!(bytes(&r.reserved_by_pytorch), gib(505));
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Capacity, OomRule::OverCapacity)
    );
    assert_eq!(d.figures.limit_kind, Some(LimitKind::MemoryFraction));
    assert_eq!(d.figures.limit, Some(Bytes(gib(237))));
    assert!(d.reason.contains("memory-fraction limit"), "{}", d.reason);
}

/// torch 1.10 – 2.0: the max_split_size_mb hint after the parenthesis (pytorch/pytorch#44742).
#[test]
fn reserved_format_with_max_split_hint_torch_2_0() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "20.00 MiB",
        " (GPU ",
        "0",
        "; ",
        "15.78 GiB",
        " total capacity; ",
        "14.56 GiB",
        " already allocated; ",
        "3.50 MiB",
        " free; ",
        "14.71 GiB",
        " reserved in total by PyTorch)",
        " If reserved memory is >> allocated memory try setting max_split_size_mb to avoid",
        " fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        ""
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::Reserved);
    assert_eq!(r.hint, Some(AllocatorHint::MaxSplitSizeMb));
    assert_eq!(r.tried_to_allocate.bytes.0, 20 * MIB);
    assert_eq!(bytes(&r.free), 3 * MIB + 512 * KIB);
    let d = classify(&r);
    assert_eq!(d.class, OomClass::Fragmentation);
    assert!(
        d.advice[0].contains("first shipped in torch 2.1"),
        "{:?}",
        d.advice
    );
}

/// torch 2.1 (pytorch/pytorch#99699): the sentences, NVML's processes, and `capacty`.
/// The PR's own example.
#[test]
fn of_which_free_format_torch_2_1() {
    let msg = concat!(
        "torch.cuda.OutOfMemoryError: ",
        "CUDA out of memory. Tried to allocate ",
        "138.00 MiB",
        ". GPU ",
        "0",
        " has a total capacty of ",
        "15.90 GiB",
        " of which ",
        "8.44 MiB",
        " is free. ",
        "Process 1246069 has 577.00 MiB memory in use. ",
        "Including non-PyTorch memory, this process has 15.32 GiB memory in use. ",
        "Of the allocated memory ",
        "14.12 GiB",
        " is allocated by PyTorch, and ",
        "410.41 MiB",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting max_split_size_mb to avoid",
        " fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        ""
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::OfWhichFree);
    assert_eq!(r.device, Some(0));
    assert_eq!(r.tried_to_allocate.bytes.0, 138 * MIB);
    assert_eq!(bytes(&r.total_capacity), gib(1590));
    assert_eq!(bytes(&r.free), mib(844));
    assert_eq!(
        r.other_processes,
        vec![ProcessUsage {
            pid: 1_246_069,
            in_use: Some(PrintedSize {
                bytes: Bytes(577 * MIB),
                precision_bytes: 5_244,
                text: "577.00 MiB".into()
            })
        }]
    );
    assert!(r.this_process_listed);
    assert_eq!(bytes(&r.this_process_in_use), gib(1532));
    assert_eq!(bytes(&r.allocated_by_pytorch), gib(1412));
    assert_eq!(bytes(&r.reserved_but_unallocated), mib(41041));
    assert_eq!(bytes(&r.reserved_by_pytorch), gib(1412) + mib(41041));
    assert_eq!(r.hint, Some(AllocatorHint::MaxSplitSizeMb));
    // 410 MiB cached covers the 138 MiB request.
    assert_eq!(classify(&r).class, OomClass::Fragmentation);
}

/// torch 2.2 – 2.3 (pytorch/pytorch#113481): `capacity`, the expandable_segments hint.
#[test]
fn of_which_free_format_torch_2_2_expandable_hint() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "2.00 GiB",
        ". GPU ",
        "1",
        " has a total capacity of ",
        "79.15 GiB",
        " of which ",
        "1.02 GiB",
        " is free. ",
        "Including non-PyTorch memory, this process has 78.12 GiB memory in use. ",
        "Of the allocated memory ",
        "60.31 GiB",
        " is allocated by PyTorch, and ",
        "17.20 GiB",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid",
        " fragmentation.  See documentation for Memory Management ",
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.device, Some(1));
    assert_eq!(r.hint, Some(AllocatorHint::ExpandableSegments));
    assert_eq!(bytes(&r.reserved_but_unallocated), gib(1720));
    assert!(r.other_processes.is_empty());
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Fragmentation, OomRule::CacheCoversRequest)
    );
    assert!(d.reason.contains("in pieces"));
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"))
    );
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("`iteragpu sweep --vary alloc_conf=default,expandable_segments`"))
    );
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("torch.cuda.empty_cache()"))
    );
}

/// torch 2.4 (pytorch/pytorch#124673): private pools (CUDA Graphs) inside "allocated".
#[test]
fn of_which_free_format_torch_2_4_private_pools() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "4.00 GiB",
        ". GPU ",
        "0",
        " has a total capacity of ",
        "79.10 GiB",
        " of which ",
        "2.25 GiB",
        " is free. ",
        "Including non-PyTorch memory, this process has 76.84 GiB memory in use. ",
        "Of the allocated memory ",
        "70.52 GiB",
        " is allocated by PyTorch, ",
        "with 12.00 GiB allocated in private pools (e.g., CUDA Graphs), ",
        "and ",
        "5.81 GiB",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid",
        " fragmentation.  See documentation for Memory Management ",
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(bytes(&r.private_pools), 12 * GIB);
    assert_eq!(bytes(&r.allocated_by_pytorch), gib(7052));
    assert_eq!(bytes(&r.reserved_but_unallocated), gib(581));
    let d = classify(&r);
    assert_eq!(d.class, OomClass::Fragmentation);
    assert!(d.advice.iter().any(|a| a.contains("private pools")));
}

/// torch 2.5+ with a memory fraction (pytorch/pytorch#129546): `X allowed; ` after the
/// processes. Numbers from a real run on a 44 GiB card shared with another process.
#[test]
fn of_which_free_format_torch_2_5_memory_fraction() {
    let msg = concat!(
        "CUDA out of memory. Tried to allocate ",
        "996.00 MiB",
        ". GPU ",
        "0",
        " has a total capacity of ",
        "44.43 GiB",
        " of which ",
        "9.06 GiB",
        " is free. ",
        "Process 2102129 has 17.54 GiB memory in use. ",
        "Including non-PyTorch memory, this process has 17.81 GiB memory in use. ",
        "17.69 GiB allowed; ",
        "Of the allocated memory ",
        "17.44 GiB",
        " is allocated by PyTorch, ",
        "and ",
        "59.88 MiB",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid",
        " fragmentation.  See documentation for Memory Management ",
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(bytes(&r.allowed), gib(1769));
    assert_eq!(r.other_processes.len(), 1);
    assert_eq!(r.other_processes[0].pid, 2_102_129);
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Capacity, OomRule::OverCapacity)
    );
    assert_eq!(d.figures.limit_kind, Some(LimitKind::MemoryFraction));
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("set_per_process_memory_fraction"))
    );
    // The card itself holds the need: no larger card is suggested.
    assert!(
        !d.advice.iter().any(|a| a.contains("iteragpu cards")),
        "{:?}",
        d.advice
    );
}

/// The H200 reading (torch 2.11), verbatim.
#[test]
fn h200_message_parses_and_is_capacity() {
    let r = parse(H200).expect("parses");
    assert_eq!(r.format, OomFormat::OfWhichFree);
    assert_eq!(r.platform, Platform::Cuda);
    assert_eq!(r.device, Some(0));
    assert_eq!(r.tried_to_allocate.bytes.0, 400 * GIB);
    assert_eq!(r.tried_to_allocate.text, "400.00 GiB");
    assert!(!r.request_is_lower_bound);
    assert_eq!(bytes(&r.total_capacity), gib(13980));
    assert_eq!(bytes(&r.free), gib(13920));
    assert!(r.this_process_listed);
    assert_eq!(bytes(&r.this_process_in_use), 610 * MIB);
    assert!(r.other_processes.is_empty());
    assert_eq!(bytes(&r.allocated_by_pytorch), 0);
    assert_eq!(bytes(&r.reserved_but_unallocated), 0);
    assert_eq!(r.allowed, None);
    assert_eq!(r.private_pools, None);
    assert_eq!(r.hint, Some(AllocatorHint::ExpandableSegments));

    let d = classify(&r);
    assert_eq!(d.class, OomClass::Capacity);
    assert_eq!(d.rule, OomRule::OverCapacity);
    assert_eq!(d.figures.limit_kind, Some(LimitKind::Card));
    assert_eq!(d.figures.need, Some(Bytes(400 * GIB + 610 * MIB)));
    assert_eq!(d.figures.non_pytorch, Some(Bytes(610 * MIB)));
    assert_eq!(
        d.reason,
        "the request (429.50 GB = 400.00 GiB) + PyTorch's live allocations (0.00 GB = 0.00 GiB) + this process's non-PyTorch memory (0.64 GB = 0.60 GiB) = 430.14 GB = 400.60 GiB, which exceeds the card's total capacity of 150.11 GB = 139.80 GiB"
    );
    assert!(d.advice.iter().any(|a| a.contains("--search frontier")));
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("`iteragpu cards --need 400.60GiB`"))
    );
}

/// ROCm (hipify writes `HIP`): no NVML, so no process; `PYTORCH_HIP_ALLOC_CONF` in the hint.
/// A real message: another program held the card.
#[test]
fn hip_variant() {
    let msg = concat!(
        "torch.OutOfMemoryError: ",
        "HIP out of memory. Tried to allocate ",
        "978.00 MiB",
        ". GPU ",
        "0",
        " has a total capacity of ",
        "15.98 GiB",
        " of which ",
        "630.00 MiB",
        " is free. ",
        "Of the allocated memory ",
        "0 bytes",
        " is allocated by PyTorch, and ",
        "0 bytes",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid",
        " fragmentation.  See documentation for Memory Management ",
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.platform, Platform::Hip);
    assert_eq!(r.hint, Some(AllocatorHint::ExpandableSegments));
    assert!(!r.this_process_listed);
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::AnotherProcess, OomRule::HeldElsewhere)
    );
    assert_eq!(
        d.figures.this_process_source,
        Some(ProcessSource::Estimated)
    );
    assert!(d.advice.iter().any(|a| a.contains("CUDA context")));
}

/// Recent ROCm builds keep the CUDA spelling of the variable and the new docs address.
#[test]
fn hip_variant_with_cuda_spelling() {
    let msg = concat!(
        "HIP out of memory. Tried to allocate ",
        "2.00 GiB",
        ". GPU ",
        "0",
        " has a total capacity of ",
        "15.98 GiB",
        " of which ",
        "512.00 MiB",
        " is free. ",
        "Of the allocated memory ",
        "14.20 GiB",
        " is allocated by PyTorch, and ",
        "96.00 MiB",
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid",
        " fragmentation.  See documentation for Memory Management ",
        " (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.platform, Platform::Hip);
    assert_eq!(r.hint, Some(AllocatorHint::ExpandableSegments));
    assert_eq!(classify(&r).class, OomClass::Capacity);
}

/// The cudaMallocAsync backend (CUDAMallocAsyncAllocator.cpp, pytorch/pytorch#82682), with a
/// fraction set; its lines are aligned with spaces and separated by newlines.
#[test]
fn cuda_malloc_async_with_fraction() {
    let msg = concat!(
        "Allocation on device ",
        "0",
        " would exceed allowed memory. (out of memory)",
        "\nCurrently allocated     : ",
        "4.86 GiB",
        "\nRequested               : ",
        "10.12 GiB",
        "\nDevice limit            : ",
        "24.00 GiB",
        "\nFree (according to CUDA): ",
        "18.73 GiB",
        "\nPyTorch limit (set by user-supplied memory fraction)",
        "\n                        : ",
        "12.00 GiB"
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.format, OomFormat::CudaMallocAsync);
    assert_eq!(r.device, Some(0));
    assert_eq!(bytes(&r.allocated_by_pytorch), gib(486));
    assert_eq!(r.tried_to_allocate.bytes.0, gib(1012));
    assert_eq!(bytes(&r.total_capacity), 24 * GIB);
    assert_eq!(bytes(&r.free), gib(1873));
    assert_eq!(bytes(&r.allowed), 12 * GIB);
    assert_eq!(r.reserved_but_unallocated, None);
    let d = classify(&r);
    assert_eq!(d.class, OomClass::Capacity);
    assert_eq!(d.figures.limit_kind, Some(LimitKind::MemoryFraction));
}

/// Without a fraction the limit is UINT64_MAX, printed `17179869184.00 GiB`: no limit. A real
/// message (ComfyUI on a 24 GiB card).
#[test]
fn cuda_malloc_async_without_fraction() {
    let msg = concat!(
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n",
        "Currently allocated     : 4.86 GiB\n",
        "Requested               : 10.12 GiB\n",
        "Device limit            : 24.00 GiB\n",
        "Free (according to CUDA): 0 bytes\n",
        "PyTorch limit (set by user-supplied memory fraction)\n",
        "                        : 17179869184.00 GiB\n",
        "This error means you ran out of memory on your GPU.\n",
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.allowed, None);
    assert_eq!(bytes(&r.free), 0);
    let d = classify(&r);
    // 19 GiB held by something else than this process's live allocations.
    assert_eq!(d.class, OomClass::AnotherProcess);
}

/// `Tried to allocate more than 1EB memory.`: the request is a lower bound.
#[test]
fn over_one_exabyte() {
    let r = parse(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.",
    )
    .expect("parses");
    assert_eq!(r.format, OomFormat::OverOneExabyte);
    assert!(r.request_is_lower_bound);
    assert_eq!(r.tried_to_allocate.bytes.0, 1 << 60);
    let d = classify(&r);
    assert_eq!(d.class, OomClass::Capacity);
    assert!(d.advice[0].contains("wrong shape"));
}

/// XPU prints the same sentences without NVML and with its own hint.
#[test]
fn xpu_variant() {
    let msg = concat!(
        "XPU out of memory. Tried to allocate ",
        "2.00 GiB",
        ". GPU ",
        "0",
        " has a total capacity of ",
        "15.11 GiB",
        ". Of the allocated memory ",
        "14.20 GiB",
        " is allocated by PyTorch, and ",
        "20.00 MiB",
        " is reserved by PyTorch but unallocated.",
        " Please use `empty_cache` to release all unoccupied cached memory."
    );
    let r = parse(msg).expect("parses");
    assert_eq!(r.platform, Platform::Xpu);
    assert_eq!(r.free, None);
    assert_eq!(r.hint, Some(AllocatorHint::EmptyCache));
    assert_eq!(classify(&r).class, OomClass::Capacity);
}

/// NVML's "not available" (Windows WDDM): the processes are kept, their usage is not.
#[test]
fn nvml_not_available_readings() {
    let msg = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.13 GiB. GPU 0 has a total capacity of 8.00 GiB of which 6.10 GiB is free. Process 9132 has 17179869184.00 GiB memory in use. Including non-PyTorch memory, this process has 17179869184.00 GiB memory in use. 2.63 GiB allowed; Of the allocated memory 954.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.";
    let r = parse(msg).expect("parses");
    assert_eq!(
        r.other_processes,
        vec![ProcessUsage {
            pid: 9132,
            in_use: None
        }]
    );
    assert!(r.this_process_listed);
    assert_eq!(r.this_process_in_use, None);
    assert_eq!(bytes(&r.allowed), gib(263));
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Capacity, OomRule::OverCapacity)
    );
    assert_eq!(d.figures.limit_kind, Some(LimitKind::MemoryFraction));
}

// --- Classification ---

/// Messages whose figures alone decide nothing: the class is unknown and the reason says why
/// (issue 21: the free memory covering the request was blamed on another process, and a
/// message of zeros on fragmentation).
#[test]
fn figures_that_decide_nothing_are_unknown() {
    let cases: [(&str, &str, &str); 3] = [
        (
            "free memory covers the request, other processes hold a lot",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 70.00 GiB is free. Including non-PyTorch memory, this process has 2.00 GiB memory in use. Of the allocated memory 1.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
            "memory fraction",
        ),
        (
            "a message of zeros",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 0 bytes. GPU 0 has a total capacity of 0 bytes of which 0 bytes is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
            "every figure of the message is zero",
        ),
        (
            "free memory covers the request with no other process",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 60.00 GiB is free. Including non-PyTorch memory, this process has 19.00 GiB memory in use. Of the allocated memory 18.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.",
            "memory fraction",
        ),
    ];
    for (name, msg, reason) in cases {
        let r = parse(msg).expect(name);
        let d = classify(&r);
        assert_eq!(
            d.class,
            OomClass::Unknown,
            "{name}: {:?} {}",
            d.rule,
            d.reason
        );
        assert!(d.reason.contains(reason), "{name}: {}", d.reason);
    }
}

/// In a container PyTorch lists itself as `Process PID` (host PID namespace). A real vLLM
/// message: the listed process covers PyTorch's reserved memory, so it is this process, and
/// the card is full of it.
#[test]
fn container_pid_is_taken_to_be_this_process() {
    let msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the allocated memory 90.63 GiB is allocated by PyTorch, and 120.54 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. See documentation for Memory Management (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
    let r = parse(msg).expect("parses");
    assert!(!r.this_process_listed);
    let d = classify(&r);
    assert_eq!(
        d.figures.this_process_source,
        Some(ProcessSource::ListedPid(2_752_205))
    );
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Capacity, OomRule::NearCapacity)
    );
    assert!(
        d.reason.contains("taken to be process 2752205"),
        "{}",
        d.reason
    );
    // A card that holds the request on top of this one's capacity: 93.02 + 1.25 GiB.
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("`iteragpu cards --need 94.27GiB`")),
        "{:?}",
        d.advice
    );
}

#[test]
fn another_process_is_named() {
    let msg = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.68 GiB of which 512.00 MiB is free. Process 4242 has 18.90 GiB memory in use. Including non-PyTorch memory, this process has 4.20 GiB memory in use. Of the allocated memory 3.50 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.";
    let r = parse(msg).expect("parses");
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::AnotherProcess, OomRule::HeldElsewhere)
    );
    assert!(
        d.reason.contains("process 4242 (20.29 GB = 18.90 GiB)"),
        "{}",
        d.reason
    );
    assert!(d.advice[0].contains("process 4242"), "{:?}", d.advice);
    assert!(
        d.advice
            .iter()
            .any(|a| a.contains("`iteragpu environment`"))
    );
    let held = d.figures.held_elsewhere.expect("computed").0;
    assert!(held > 18 * GIB && held < 19 * GIB, "{held}");
}

#[test]
fn free_memory_above_the_request_is_not_fragmentation() {
    // A memory fraction this PyTorch does not print: the device had room, the cache is not
    // to blame.
    let msg = "CUDA out of memory. Tried to allocate 360.00 MiB. GPU 0 has a total capacity of 16.00 GiB of which 15.08 GiB is free. Of the allocated memory 940.00 MiB is allocated by PyTorch, and 276.00 MiB is reserved by PyTorch but unallocated.";
    let d = classify(&parse(msg).expect("parses"));
    assert_eq!((d.class, d.rule), (OomClass::Unknown, OomRule::NoRuleFits));
    assert!(d.reason.contains("memory fraction"), "{}", d.reason);
}

#[test]
fn fragmentation_when_cache_covers_the_shortfall() {
    // 23.5 GiB free, 25 GiB asked, 6 GiB cached in split segments: expandable segments
    // would give it back.
    let msg = "CUDA out of memory. Tried to allocate 25.00 GiB. GPU 0 has a total capacity of 80.00 GiB of which 23.50 GiB is free. Including non-PyTorch memory, this process has 56.50 GiB memory in use. Of the allocated memory 50.00 GiB is allocated by PyTorch, and 6.00 GiB is reserved by PyTorch but unallocated.";
    let d = classify(&parse(msg).expect("parses"));
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Fragmentation, OomRule::CacheCoversShortfall)
    );
    assert_eq!(d.figures.shortfall, Some(Bytes(gib(150))));
}

#[test]
fn fraction_limit_reached_through_the_cache() {
    // Limit 35.5 GiB: 30 allocated + 3 cached + 4 asked > 35.5, but 30 + 4 fits.
    let msg = "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 45.50 GiB is free. Including non-PyTorch memory, this process has 33.60 GiB memory in use. 35.50 GiB allowed; Of the allocated memory 30.00 GiB is allocated by PyTorch, and 3.00 GiB is reserved by PyTorch but unallocated.";
    let d = classify(&parse(msg).expect("parses"));
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Fragmentation, OomRule::FractionLimitCache)
    );
}

#[test]
fn missing_figures_give_unknown_with_the_reason() {
    // Cut after the request: nothing to compare it with.
    let r = parse("CUDA out of memory. Tried to allocate 20.00 MiB").expect("parses");
    assert_eq!(r.format, OomFormat::RequestOnly);
    let d = classify(&r);
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Unknown, OomRule::MissingFigures)
    );
    assert!(
        d.reason.contains("the card's total capacity"),
        "{}",
        d.reason
    );
    assert!(d.reason.contains("the free memory"), "{}", d.reason);
    // A cudaMallocAsync message cut before the free memory: it has no cache figure either.
    let msg = "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 10.00 GiB\nRequested               : 2.00 GiB\nDevice limit            : 24.00 GiB";
    let d = classify(&parse(msg).expect("parses"));
    assert_eq!(
        (d.class, d.rule),
        (OomClass::Unknown, OomRule::MissingFigures)
    );
    assert!(d.reason.contains("cudaMallocAsync"), "{}", d.reason);
}

#[test]
fn diagnosis_serializes_in_snake_case() {
    let post = diagnose(H200).expect("an OOM");
    let json = serde_json::to_value(&post).expect("serializes");
    assert_eq!(json["diagnosis"]["class"], "capacity");
    assert_eq!(json["diagnosis"]["rule"], "over_capacity");
    assert_eq!(json["report"]["format"], "of_which_free");
    assert_eq!(json["report"]["tried_to_allocate"]["bytes"], 400 * GIB);
    assert_eq!(
        json["report"]["tried_to_allocate"]["precision_bytes"],
        5_368_710
    );
    let back: PostMortem = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, post);
    assert_eq!(
        serde_json::to_value(OomClass::AnotherProcess).expect("serializes"),
        "another_process"
    );
}

// --- Robustness ---

#[test]
fn traceback_around_the_message() {
    let text = format!(
        "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    loss = model(batch)\n  File \"/usr/lib/python3.12/site-packages/torch/nn/modules/module.py\", line 1775, in _call_impl\n    return forward_call(*args, **kwargs)\ntorch.OutOfMemoryError: {H200}\n\nDuring handling of the above exception, another exception occurred:\n\nRuntimeError: stopped\n"
    );
    let r = parse(&text).expect("parses");
    assert_eq!(r, parse(H200).expect("parses"));
    // Wrapped over lines, as some loggers print it.
    let wrapped = H200.replace(". ", ".\n    ");
    assert_eq!(parse(&wrapped), parse(H200));
    // Two messages: the last one counts.
    let two = format!(
        "{H200}\nretrying\nCUDA out of memory. Tried to allocate 1.00 GiB (GPU 3; 15.78 GiB total capacity; 1.00 GiB already allocated; 10.00 GiB free; 2.00 GiB reserved in total by PyTorch)"
    );
    assert_eq!(parse(&two).expect("parses").device, Some(3));
}

#[test]
fn garbage_and_non_oom_messages_give_none() {
    for text in [
        "",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: out of memory",
        "MemoryError: Unable to allocate 8.00 GiB for an array",
        "Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)",
        "CUDA out of memory. Tried to allocate",
        "CUDA out of memory. Tried to allocate 20.00",
        "CUDA out of memory. Tried to allocate 20.00 Mi",
        "CUDA out of memory. Tried to allocate twenty MiB",
        "MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 2.00 MB)",
        "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 4.86 GiB",
        "Allocation on device x would exceed allowed memory.",
    ] {
        assert_eq!(parse(text), None, "{text:?}");
    }
}

#[test]
fn every_cut_of_the_h200_message_is_safe() {
    let request_end = H200.find("GiB.").expect("in message") + 3;
    for (cut, _) in H200.char_indices() {
        let head = &H200[..cut];
        match parse(head) {
            None => assert!(cut < request_end, "cut at {cut}: {head:?}"),
            Some(r) => {
                assert!(cut >= request_end, "cut at {cut}");
                assert_eq!(r.tried_to_allocate.bytes.0, 400 * GIB);
                // Whatever was read is right.
                if let Some(t) = &r.total_capacity {
                    assert_eq!(t.bytes.0, gib(13980));
                }
                if let Some(f) = &r.free {
                    assert_eq!(f.bytes.0, gib(13920));
                }
                if let Some(p) = &r.this_process_in_use {
                    assert_eq!(p.bytes.0, 610 * MIB);
                }
                let _ = classify(&r);
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        if let Some(report) = parse(&text) {
            let _ = classify(&report);
        }
    }

    #[test]
    fn arbitrary_text_after_a_header_never_panics(
        header in prop::sample::select(vec![
            "CUDA out of memory. Tried to allocate ",
            "HIP out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of ",
            "CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; ",
            "Allocation on device 0 would exceed allowed memory. (out of memory) Currently allocated : ",
        ]),
        tail in "[0-9 .;:()a-zA-Z]{0,200}",
    ) {
        if let Some(report) = parse(&format!("{header}{tail}")) {
            let _ = classify(&report);
        }
    }

    /// Up to 2^53 bytes (8 PiB), where `format_size`'s double holds the size exactly.
    #[test]
    fn printed_figures_contain_the_true_size(size in 0u64..(1 << 53)) {
        let text = format_size(size);
        let mut s = text.as_str();
        match reading(&mut s) {
            Some(Reading::Size(printed)) => {
                prop_assert!(s.is_empty());
                prop_assert!(printed.low() <= size && size <= printed.high(),
                    "{text}: {} ± {}", printed.bytes.0, printed.precision_bytes);
            }
            _ => prop_assert!(false, "{text} not read"),
        }
    }

    #[test]
    fn extreme_figures_classify_without_overflow(
        r in any::<u64>(), a in any::<u64>(), u in any::<u64>(), t in any::<u64>(),
        f in any::<u64>(), l in proptest::option::of(any::<u64>()),
        p in proptest::option::of(any::<u64>()), other in proptest::option::of(any::<u64>()),
    ) {
        let s = |b: u64| Some(PrintedSize { bytes: Bytes(b), precision_bytes: u64::MAX / 2, text: String::new() });
        let mut report = empty_report(OomFormat::OfWhichFree, Platform::Cuda, s(r).unwrap());
        report.allocated_by_pytorch = s(a);
        report.reserved_but_unallocated = s(u);
        report.total_capacity = s(t);
        report.free = s(f);
        report.allowed = l.and_then(s);
        report.this_process_listed = p.is_some();
        report.this_process_in_use = p.and_then(s);
        report.other_processes = other.map(|o| ProcessUsage { pid: 7, in_use: s(o) }).into_iter().collect();
        derive(&mut report);
        let d = classify(&report);
        prop_assert!(!d.reason.is_empty());
        prop_assert!(!d.advice.is_empty());
    }
}
