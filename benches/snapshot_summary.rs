//! Benchmark: summarises a synthetic memory snapshot of about 1 GB (as
//! `torch.cuda.memory._dump_snapshot()` writes it with deep stacks and a long history) and prints
//! the time and the peak resident set of the process that reads it.
//!
//! The snapshot is made here, streamed to a temporary file by the tests' pickle writer, from a
//! deterministic simulation of a training job on two devices: weights allocated at model_load,
//! then iterations that allocate and free activations (small blocks packed in 2 MiB segments,
//! large ones in their own cached segments, an empty_cache between phases), every entry with a
//! phase marker, a fresh compile_context string and a stack of ~24 frames (C++ and Python) drawn
//! from a few thousand memoized frame dicts, each alloc and free_requested with its own new frame
//! list and each free_completed sharing its alloc's list, as PyTorch writes them. The segments at
//! the end hold exactly what the history leaves, so the summary must find the history complete
//! and the simulated peaks; the reading process checks that, then prints its figures.
//!
//! Then `iteragpu explain --snapshot FILE --json` runs on the same file, end to end, with its time
//! and peak resident set.
//!
//! Run with `cargo bench --bench snapshot_summary`; `SNAPSHOT_BENCH_MIB=256` makes a smaller
//! file, `SNAPSHOT_BENCH_OUT=PATH` keeps it. Targets: a few seconds, a peak resident set well below the file size.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use iteragpu::explain::snapshot::{SummaryOptions, summarize_file};

/// The pickle writer is test code, not part of the library: the benchmark compiles it in itself.
#[allow(dead_code)]
#[path = "../src/explain/snapshot/writer.rs"]
mod writer;
use writer::Pickler;

const CHILD: &str = "ITERAGPU_SNAPSHOT_BENCH_CHILD";
const MIB: u64 = 1 << 20;
const SMALL_SEGMENT: u64 = 2 * MIB;
const BATCH: usize = 1000;

fn peak_rss_bytes() -> u64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return 0;
    }
    // Linux reports kilobytes.
    usage.ru_maxrss as u64 * 1024
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Log-uniform in [lo, hi).
    fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (a + (b - a) * u).exp() as u64
    }
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    count: Rc<Cell<u64>>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The memo indices of what the pickle shares: key and value strings, frame dicts.
struct Shared {
    strings: HashMap<&'static str, u32>,
    frames: Vec<Option<u32>>,
    frame_text: Vec<(String, u32, String)>,
    empty_frames: Option<u32>,
}

impl Shared {
    fn new(frame_text: Vec<(String, u32, String)>) -> Self {
        Shared {
            strings: HashMap::new(),
            frames: vec![None; frame_text.len()],
            frame_text,
            empty_frames: None,
        }
    }

    /// A shared string: written and memoized at its first use, fetched afterwards.
    fn s<W: Write>(&mut self, p: &mut Pickler<W>, text: &'static str) {
        match self.strings.get(text) {
            Some(&i) => p.get(i),
            None => {
                let i = p.str(text);
                self.strings.insert(text, i);
            }
        }
    }

    fn frame<W: Write>(&mut self, p: &mut Pickler<W>, id: usize) {
        if let Some(i) = self.frames[id] {
            p.get(i);
            return;
        }
        let i = p.empty_dict();
        p.mark();
        let (file, line, name) = self.frame_text[id].clone();
        self.s(p, "name");
        p.str(&name);
        self.s(p, "filename");
        p.str(&file);
        self.s(p, "line");
        p.int(i128::from(line));
        p.setitems();
        self.frames[id] = Some(i);
    }

    /// A new frame list; returns its memo index.
    fn stack<W: Write>(&mut self, p: &mut Pickler<W>, frames: &[usize]) -> u32 {
        let i = p.empty_list();
        if frames.len() == 1 {
            self.frame(p, frames[0]);
            p.append();
        } else if !frames.is_empty() {
            p.mark();
            for &f in frames {
                self.frame(p, f);
            }
            p.appends();
        }
        i
    }

    fn empty_frames<W: Write>(&mut self, p: &mut Pickler<W>) {
        match self.empty_frames {
            Some(i) => p.get(i),
            None => self.empty_frames = Some(p.empty_list()),
        }
    }
}

/// A few thousand frames: the allocator's C++ frames, dispatcher frames, torch's Python, the
/// model's code, the training script.
fn frame_table() -> (Vec<(String, u32, String)>, FramePools) {
    let mut table = Vec::new();
    let mut pools = FramePools::default();
    for (i, name) in [
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc",
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate",
        "at::TensorBase at::detail::_empty_generic<long>",
        "at::detail::empty_generic",
        "at::detail::empty_cuda",
    ]
    .iter()
    .enumerate()
    {
        pools.allocator.push(table.len());
        table.push((
            "/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp".to_string(),
            1000 + i as u32 * 37,
            name.to_string(),
        ));
    }
    for i in 0..1500u32 {
        pools.cpp.push(table.len());
        table.push((
            format!("/opt/pytorch/aten/src/ATen/native/cuda/Kernel{}.cu", i % 97),
            100 + i,
            format!("at::native::(anonymous namespace)::op_{i}_kernel_impl"),
        ));
    }
    for i in 0..600u32 {
        pools.torch.push(table.len());
        table.push((
            format!(
                "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/mod{}.py",
                i % 40
            ),
            10 + i,
            ["forward", "_call_impl", "_wrapped_call_impl", "__call__"][i as usize % 4].to_string(),
        ));
    }
    for i in 0..1200u32 {
        pools.user.push(table.len());
        table.push((
            format!("/home/user/project/model/layer{}.py", i % 60),
            20 + i,
            format!("block_{}_forward", i % 300),
        ));
    }
    for (file, line, name) in [
        ("/home/user/project/train.py", 88, "train_step"),
        ("/home/user/project/train.py", 140, "main"),
        ("/home/user/project/train.py", 151, "<module>"),
    ] {
        pools.outer.push(table.len());
        table.push((file.to_string(), line, name.to_string()));
    }
    (table, pools.with_sites())
}

#[derive(Default)]
struct FramePools {
    allocator: Vec<usize>,
    cpp: Vec<usize>,
    torch: Vec<usize>,
    user: Vec<usize>,
    outer: Vec<usize>,
    /// The call sites of the job: a loop allocates from the same few thousand stacks again and
    /// again (each time as a new frame list, as PyTorch writes them).
    alloc_sites: Vec<Vec<usize>>,
    free_sites: Vec<Vec<usize>>,
}

impl FramePools {
    fn with_sites(mut self) -> Self {
        let mut rng = Rng(0x5EED);
        let mut out = Vec::new();
        for _ in 0..4000 {
            self.random_alloc_stack(&mut rng, &mut out);
            self.alloc_sites.push(out.clone());
        }
        for _ in 0..500 {
            self.random_free_stack(&mut rng, &mut out);
            self.free_sites.push(out.clone());
        }
        self
    }

    fn alloc_stack(&self, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        out.extend_from_slice(&self.alloc_sites[rng.below(self.alloc_sites.len() as u64) as usize]);
    }

    fn free_stack(&self, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        out.extend_from_slice(&self.free_sites[rng.below(self.free_sites.len() as u64) as usize]);
    }

    /// A stack, innermost first, ~24 frames deep.
    fn random_alloc_stack(&self, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        out.extend_from_slice(&self.allocator);
        for _ in 0..4 {
            out.push(self.cpp[rng.below(self.cpp.len() as u64) as usize]);
        }
        for _ in 0..3 {
            out.push(self.torch[rng.below(self.torch.len() as u64) as usize]);
        }
        for _ in 0..8 {
            out.push(self.user[rng.below(self.user.len() as u64) as usize]);
        }
        out.extend_from_slice(&self.outer);
    }

    fn random_free_stack(&self, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        for _ in 0..2 {
            out.push(self.torch[rng.below(self.torch.len() as u64) as usize]);
        }
        for _ in 0..5 {
            out.push(self.user[rng.below(self.user.len() as u64) as usize]);
        }
        out.extend_from_slice(&self.outer);
    }
}

struct Live {
    size: u64,
    /// The memo index of its alloc entry's frame list (shared by its free_completed).
    stack: u32,
    segment: usize,
}

#[derive(Clone)]
struct Segment {
    address: u64,
    size: u64,
    large: bool,
    /// Live blocks (address → size) and, for small segments, the bump pointer.
    live: BTreeMap<u64, u64>,
    used: u64,
}

/// One device's simulated allocator and the history it writes.
struct Sim {
    device: u64,
    rng: Rng,
    next_address: u64,
    segments: Vec<Option<Segment>>,
    free_large: BTreeMap<(u64, u64), usize>,
    empty_small: Vec<usize>,
    current_small: Option<usize>,
    live: HashMap<u64, Live>,
    order: Vec<u64>,
    allocated: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    entries: u64,
    time: u64,
    phase: Option<String>,
    phases: u64,
    in_batch: usize,
    stack_buf: Vec<usize>,
}

#[derive(Clone, Copy)]
enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
        }
    }
}

enum Frames<'a> {
    New(&'a [usize]),
    Shared(u32),
}

impl Sim {
    fn new(device: u64) -> Self {
        Sim {
            device,
            rng: Rng(0x9E37_79B9_7F4A_7C15 ^ (device + 1)),
            next_address: 0x7F00_0000_0000 + (device << 40),
            segments: Vec::new(),
            free_large: BTreeMap::new(),
            empty_small: Vec::new(),
            current_small: None,
            live: HashMap::new(),
            order: Vec::new(),
            allocated: 0,
            reserved: 0,
            peak_allocated: 0,
            peak_reserved: 0,
            entries: 0,
            time: 1_700_000_000_000_000,
            phase: None,
            phases: 0,
            in_batch: 0,
            stack_buf: Vec::new(),
        }
    }

    /// Writes one trace entry (in batches of 1,000 inside the trace list); returns the memo
    /// index of its frame list.
    fn entry<W: Write>(
        &mut self,
        p: &mut Pickler<W>,
        sh: &mut Shared,
        action: Action,
        addr: u64,
        size: u64,
        frames: Frames<'_>,
    ) -> u32 {
        if self.in_batch == 0 {
            p.mark();
        }
        self.time += 1 + self.rng.below(40);
        self.entries += 1;
        p.empty_dict();
        p.mark();
        sh.s(p, "action");
        sh.s(p, action.name());
        sh.s(p, "addr");
        p.int(i128::from(addr));
        sh.s(p, "size");
        p.int(i128::from(size));
        sh.s(p, "stream");
        p.int(0);
        sh.s(p, "time_us");
        p.int(i128::from(self.time));
        sh.s(p, "compile_context");
        p.str("N/A");
        sh.s(p, "user_metadata");
        match &self.phase {
            Some(marker) => {
                p.str(marker);
            }
            None => sh.s(p, ""),
        }
        sh.s(p, "frames");
        let stack = match frames {
            Frames::New(list) => sh.stack(p, list),
            Frames::Shared(i) => {
                p.get(i);
                i
            }
        };
        p.setitems();
        self.in_batch += 1;
        if self.in_batch == BATCH {
            p.appends();
            self.in_batch = 0;
        }
        p.boundary().expect("writing the snapshot");
        stack
    }

    fn new_segment(&mut self, size: u64, large: bool) -> usize {
        let address = self.next_address;
        self.next_address += size.next_multiple_of(2 * MIB) + 2 * MIB;
        self.segments.push(Some(Segment {
            address,
            size,
            large,
            live: BTreeMap::new(),
            used: 0,
        }));
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.segments.len() - 1
    }

    fn alloc<W: Write>(
        &mut self,
        p: &mut Pickler<W>,
        sh: &mut Shared,
        pools: &FramePools,
        size: u64,
    ) {
        let size = size.max(1).next_multiple_of(512);
        let mut stack = std::mem::take(&mut self.stack_buf);
        pools.alloc_stack(&mut self.rng, &mut stack);
        let (segment, address) = if size > MIB {
            let rounded = size.next_multiple_of(2 * MIB);
            let cached = self
                .free_large
                .range((rounded, 0)..(rounded + 4 * MIB, 0))
                .next()
                .map(|(k, v)| (*k, *v));
            let s = match cached {
                Some((key, s)) => {
                    self.free_large.remove(&key);
                    s
                }
                None => {
                    let s = self.new_segment(rounded, true);
                    let address = self.segments[s].as_ref().map_or(0, |g| g.address);
                    self.entry(
                        p,
                        sh,
                        Action::SegmentAlloc,
                        address,
                        rounded,
                        Frames::New(&stack),
                    );
                    s
                }
            };
            let seg = self.segments[s].as_mut().expect("a live segment");
            seg.live.insert(seg.address, size);
            (s, seg.address)
        } else {
            let fits = self.current_small.and_then(|s| {
                let seg = self.segments[s].as_ref()?;
                (seg.used + size <= seg.size).then_some(s)
            });
            let s = match fits {
                Some(s) => s,
                None => {
                    let s = match self.empty_small.pop() {
                        Some(s) => s,
                        None => {
                            let s = self.new_segment(SMALL_SEGMENT, false);
                            let address = self.segments[s].as_ref().map_or(0, |g| g.address);
                            self.entry(
                                p,
                                sh,
                                Action::SegmentAlloc,
                                address,
                                SMALL_SEGMENT,
                                Frames::New(&stack),
                            );
                            s
                        }
                    };
                    self.current_small = Some(s);
                    s
                }
            };
            let seg = self.segments[s].as_mut().expect("a live segment");
            let address = seg.address + seg.used;
            seg.used += size;
            seg.live.insert(address, size);
            (s, address)
        };
        self.allocated += size;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        let list = self.entry(p, sh, Action::Alloc, address, size, Frames::New(&stack));
        self.live.insert(
            address,
            Live {
                size,
                stack: list,
                segment,
            },
        );
        self.order.push(address);
        self.stack_buf = stack;
    }

    fn free<W: Write>(
        &mut self,
        p: &mut Pickler<W>,
        sh: &mut Shared,
        pools: &FramePools,
        address: u64,
    ) {
        let Some(live) = self.live.remove(&address) else {
            return;
        };
        let mut stack = std::mem::take(&mut self.stack_buf);
        pools.free_stack(&mut self.rng, &mut stack);
        self.entry(
            p,
            sh,
            Action::FreeRequested,
            address,
            live.size,
            Frames::New(&stack),
        );
        self.entry(
            p,
            sh,
            Action::FreeCompleted,
            address,
            live.size,
            Frames::Shared(live.stack),
        );
        self.allocated -= live.size;
        let seg = self.segments[live.segment]
            .as_mut()
            .expect("a live segment");
        seg.live.remove(&address);
        if seg.live.is_empty() {
            if seg.large {
                self.free_large
                    .insert((seg.size, seg.address), live.segment);
            } else {
                seg.used = 0;
                if self.current_small != Some(live.segment) {
                    self.empty_small.push(live.segment);
                }
            }
        }
        self.stack_buf = stack;
    }

    /// empty_cache(): the cached large segments and the empty small ones go back to CUDA.
    fn empty_cache<W: Write>(&mut self, p: &mut Pickler<W>, sh: &mut Shared) {
        let mut released: Vec<usize> = self.free_large.values().copied().collect();
        released.append(&mut self.empty_small);
        self.free_large.clear();
        released.sort_unstable();
        for s in released {
            if let Some(seg) = self.segments[s].take() {
                self.reserved -= seg.size;
                self.entry(
                    p,
                    sh,
                    Action::SegmentFree,
                    seg.address,
                    seg.size,
                    Frames::New(&[]),
                );
            }
        }
    }

    fn set_phase(&mut self, marker: Option<String>) {
        if marker.is_some() {
            self.phases += 1;
        }
        self.phase = marker;
    }

    /// Runs the job for `steps` steps (or until `stop` says so); returns the steps run.
    fn run<W: Write>(
        &mut self,
        p: &mut Pickler<W>,
        sh: &mut Shared,
        pools: &FramePools,
        steps: Option<u64>,
        stop: &dyn Fn() -> bool,
    ) -> u64 {
        // model_load: the weights stay.
        self.set_phase(Some("iteragpu phase 0 model_load".into()));
        for _ in 0..3000 {
            let size = if self.rng.below(10) < 3 {
                self.rng.log_uniform(4096, MIB)
            } else {
                self.rng.log_uniform(2 * MIB, 64 * MIB)
            };
            self.alloc(p, sh, pools, size);
        }
        let weights = self.order.len();
        let mut step = 0u64;
        let mut phase_index = 1;
        loop {
            if steps.is_some_and(|n| step >= n) || (steps.is_none() && stop()) {
                break;
            }
            if step.is_multiple_of(400) {
                // Between phases: the recorder's unmarked entries, then an empty_cache.
                self.set_phase(None);
                self.empty_cache(p, sh);
                let name = match phase_index {
                    1 => "cold_forward".to_string(),
                    2 => "warmup".to_string(),
                    n => format!("warm_forward[{}]", n - 3),
                };
                self.set_phase(Some(format!("iteragpu phase {phase_index} {name}")));
                phase_index += 1;
            }
            // One iteration: activations allocated layer by layer, freed mostly in reverse.
            let k = 20 + self.rng.below(60);
            for _ in 0..k {
                let size = if self.rng.below(10) < 7 {
                    self.rng.log_uniform(512, MIB)
                } else {
                    self.rng.log_uniform(MIB + 1, 96 * MIB)
                };
                self.alloc(p, sh, pools, size);
            }
            while self.order.len() > weights {
                let i = if self.rng.below(8) == 0 {
                    weights + self.rng.below((self.order.len() - weights) as u64) as usize
                } else {
                    self.order.len() - 1
                };
                let address = self.order.swap_remove(i);
                self.free(p, sh, pools, address);
            }
            step += 1;
        }
        self.set_phase(None);
        step
    }

    fn close_trace<W: Write>(&mut self, p: &mut Pickler<W>) {
        if self.in_batch > 0 {
            p.appends();
            self.in_batch = 0;
        }
    }

    /// The segments as `_snapshot()` lists them: live blocks, and the free space as inactive.
    fn write_segments<W: Write>(&self, p: &mut Pickler<W>, sh: &mut Shared, pools: &FramePools) {
        let mut rng = Rng(0xDEAD_BEEF ^ self.device);
        let mut stack = Vec::new();
        for seg in self.segments.iter().flatten() {
            p.empty_dict();
            p.mark();
            sh.s(p, "device");
            p.int(i128::from(self.device));
            sh.s(p, "address");
            p.int(i128::from(seg.address));
            sh.s(p, "total_size");
            p.int(i128::from(seg.size));
            let live: u64 = seg.live.values().sum();
            sh.s(p, "allocated_size");
            p.int(i128::from(live));
            sh.s(p, "active_size");
            p.int(i128::from(live));
            sh.s(p, "requested_size");
            p.int(i128::from(live));
            sh.s(p, "stream");
            p.int(0);
            sh.s(p, "segment_type");
            sh.s(p, if seg.large { "large" } else { "small" });
            sh.s(p, "segment_pool_id");
            p.int(0);
            p.int(0);
            p.tuple(2);
            sh.s(p, "is_expandable");
            p.bool(false);
            sh.s(p, "blocks");
            p.empty_list();
            let mut blocks: Vec<(u64, u64, bool)> =
                seg.live.iter().map(|(a, s)| (*a, *s, true)).collect();
            let free = seg.size - live;
            if free > 0 {
                blocks.push((seg.address + live, free, false));
            }
            let batched = blocks.len() != 1;
            for (i, (address, size, active)) in blocks.iter().enumerate() {
                if batched && i % BATCH == 0 {
                    p.mark();
                }
                p.empty_dict();
                p.mark();
                sh.s(p, "address");
                p.int(i128::from(*address));
                sh.s(p, "size");
                p.int(i128::from(*size));
                sh.s(p, "requested_size");
                p.int(i128::from(if *active { *size } else { 0 }));
                sh.s(p, "state");
                sh.s(
                    p,
                    if *active {
                        "active_allocated"
                    } else {
                        "inactive"
                    },
                );
                sh.s(p, "frames");
                if *active {
                    pools.alloc_stack(&mut rng, &mut stack);
                    sh.stack(p, &stack);
                } else {
                    sh.empty_frames(p);
                }
                p.setitems();
                if !batched {
                    p.append();
                } else if i % BATCH == BATCH - 1 || i == blocks.len() - 1 {
                    p.appends();
                }
                p.boundary().expect("writing the snapshot");
            }
            sh.s(p, "frames");
            sh.empty_frames(p);
            p.setitems();
        }
    }
}

struct Truth {
    bytes: u64,
    entries: [u64; 2],
    end_allocated: [u64; 2],
    end_reserved: [u64; 2],
    peak_allocated: [u64; 2],
    peak_reserved: [u64; 2],
    phases: [u64; 2],
    segments: [u64; 2],
}

/// Writes the snapshot: a dry run finds how many steps fill `target` bytes, the real run writes
/// the segments (the state at the end) first, as PyTorch does, then the traces.
fn generate(path: &Path, target: u64) -> io::Result<Truth> {
    let (table, pools) = frame_table();
    let shares = [target * 9 / 10, target / 10];
    let mut steps = [0u64; 2];
    let mut finals = Vec::new();
    for device in 0..2 {
        let count = Rc::new(Cell::new(0u64));
        let sink = Counting {
            inner: io::sink(),
            count: count.clone(),
        };
        let mut p = Pickler::new(sink, 4)?;
        let mut sh = Shared::new(table.clone());
        let mut sim = Sim::new(device as u64);
        let limit = shares[device];
        steps[device] = sim.run(&mut p, &mut sh, &pools, None, &|| count.get() >= limit);
        finals.push(sim);
    }
    let count = Rc::new(Cell::new(0u64));
    let file = Counting {
        inner: BufWriter::with_capacity(1 << 20, File::create(path)?),
        count: count.clone(),
    };
    let mut p = Pickler::new(file, 4)?;
    let mut sh = Shared::new(table);
    p.empty_dict();
    p.mark();
    sh.s(&mut p, "segments");
    p.empty_list();
    p.mark();
    for sim in &finals {
        sim.write_segments(&mut p, &mut sh, &pools);
    }
    p.appends();
    sh.s(&mut p, "device_traces");
    p.empty_list();
    p.mark();
    let mut truth = Truth {
        bytes: 0,
        entries: [0; 2],
        end_allocated: [0; 2],
        end_reserved: [0; 2],
        peak_allocated: [0; 2],
        peak_reserved: [0; 2],
        phases: [0; 2],
        segments: [0; 2],
    };
    for device in 0..2 {
        p.empty_list();
        let mut sim = Sim::new(device as u64);
        sim.run(&mut p, &mut sh, &pools, Some(steps[device]), &|| false);
        sim.close_trace(&mut p);
        assert_eq!(sim.allocated, finals[device].allocated, "both runs agree");
        truth.entries[device] = sim.entries;
        truth.end_allocated[device] = sim.allocated;
        truth.end_reserved[device] = sim.reserved;
        truth.peak_allocated[device] = sim.peak_allocated;
        truth.peak_reserved[device] = sim.peak_reserved;
        truth.phases[device] = sim.phases;
        truth.segments[device] = sim.segments.iter().flatten().count() as u64;
    }
    p.appends();
    sh.s(&mut p, "allocator_settings");
    p.empty_dict();
    p.mark();
    sh.s(&mut p, "PYTORCH_CUDA_ALLOC_CONF");
    p.str("");
    sh.s(&mut p, "expandable_segments");
    p.bool(false);
    sh.s(&mut p, "max_split_size");
    p.int(-1);
    p.setitems();
    p.setitems();
    let mut out = p.stop()?;
    out.flush()?;
    truth.bytes = count.get();
    Ok(truth)
}

fn child(path: &str) {
    let expect: Vec<u64> = std::env::var("ITERAGPU_SNAPSHOT_BENCH_TRUTH")
        .unwrap_or_default()
        .split(',')
        .filter_map(|x| x.parse().ok())
        .collect();
    let rss_before = peak_rss_bytes();
    let start = Instant::now();
    let summary = summarize_file(Path::new(path), &SummaryOptions::default())
        .unwrap_or_else(|e| panic!("the synthetic snapshot is read: {e}"));
    let elapsed = start.elapsed();
    let rss = peak_rss_bytes();
    let size = summary.bytes_read;
    println!(
        "summary: {:.2} s ({:.0} MB/s), peak RSS {:.1} MiB (before reading {:.1} MiB) for a {:.1} MiB snapshot ({:.1}% of its size)",
        elapsed.as_secs_f64(),
        size as f64 / 1e6 / elapsed.as_secs_f64(),
        rss as f64 / MIB as f64,
        rss_before as f64 / MIB as f64,
        size as f64 / MIB as f64,
        100.0 * rss as f64 / size as f64
    );
    for (d, dev) in summary.devices.iter().enumerate() {
        let t = dev.trace.as_ref().expect("each device has a trace");
        println!(
            "  device {}: {} entries, {} phases, {} segments, peak allocated {:.2} GiB, peak reserved {:.2} GiB, {} series points, history complete: {}",
            dev.device,
            t.entries,
            t.phases.len(),
            dev.segments.segments,
            t.peak_allocated_bytes as f64 / (1u64 << 30) as f64,
            t.peak_reserved_bytes as f64 / (1u64 << 30) as f64,
            t.series.len(),
            !t.history.truncated
        );
        if expect.len() == 14 {
            let at = |k: usize| expect[k * 2 + d];
            assert_eq!(t.entries, at(0), "entries");
            assert_eq!(t.end_allocated_bytes, at(1), "end allocated");
            assert_eq!(t.end_reserved_bytes, at(2), "end reserved");
            assert_eq!(t.peak_allocated_bytes, at(3), "peak allocated");
            assert_eq!(t.peak_reserved_bytes, at(4), "peak reserved");
            // The marked phases plus the unmarked entries between them.
            assert_eq!(
                t.phases.iter().filter(|p| p.index.is_some()).count() as u64,
                at(5),
                "phases"
            );
            assert_eq!(dev.segments.segments, at(6), "segments");
            assert!(!t.history.truncated, "{:?}", t.history);
            let peak = t
                .phases
                .iter()
                .max_by_key(|p| p.peak_allocated_bytes)
                .expect("phases");
            assert!(peak.largest_at_peak.iter().all(|a| a.user_frame.is_some()));
        }
    }
    let notes = &summary.notes;
    assert!(notes.is_empty(), "{notes:?}");
}

fn main() {
    if let Ok(path) = std::env::var(CHILD) {
        child(&path);
        return;
    }
    let mib: u64 = std::env::var("SNAPSHOT_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = tempfile::tempdir().expect("a temporary folder");
    // SNAPSHOT_BENCH_OUT=PATH keeps the synthetic snapshot there (for a profiler).
    let path = std::env::var_os("SNAPSHOT_BENCH_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("snapshot.pickle"));
    let start = Instant::now();
    let truth = generate(&path, mib * MIB).expect("the synthetic snapshot is written");
    println!(
        "snapshot_summary: generated {:.1} MiB ({} + {} trace entries, {} + {} segments) in {:.1} s",
        truth.bytes as f64 / MIB as f64,
        truth.entries[0],
        truth.entries[1],
        truth.segments[0],
        truth.segments[1],
        start.elapsed().as_secs_f64()
    );
    let fields = [
        truth.entries,
        truth.end_allocated,
        truth.end_reserved,
        truth.peak_allocated,
        truth.peak_reserved,
        truth.phases,
        truth.segments,
    ];
    let truth_env: Vec<String> = fields
        .iter()
        .flat_map(|f| f.iter().map(u64::to_string))
        .collect();
    // A fresh process, so that its peak resident set is the reader's alone.
    let out = Command::new(std::env::current_exe().expect("this benchmark's path"))
        .env(CHILD, &path)
        .env("ITERAGPU_SNAPSHOT_BENCH_TRUTH", truth_env.join(","))
        .output()
        .expect("the reading process runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the reading process failed");
    explain_snapshot(&path, &truth);
}

/// The command a user runs on such a file, end to end: `iteragpu explain --snapshot PATH
/// --json` (read, summary, the `iteragpu.snapshot/1` document), its time and the peak resident
/// set of its process (the largest child's, from getrusage).
fn explain_snapshot(path: &Path, truth: &Truth) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_iteragpu"))
        .args(["explain", "--json", "--snapshot"])
        .arg(path)
        .output()
        .expect("iteragpu runs");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "explain --snapshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rss = match unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } {
        0 => usage.ru_maxrss as u64 * 1024,
        _ => 0,
    };
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["schema"], "iteragpu.snapshot/1");
    for (d, dev) in doc["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .enumerate()
    {
        assert_eq!(
            dev["peak"]["allocated_bytes"], truth.peak_allocated[d],
            "peak allocated"
        );
        assert_eq!(
            dev["peak"]["reserved_bytes"], truth.peak_reserved[d],
            "peak reserved"
        );
    }
    println!(
        "explain --snapshot --json: {:.2} s end to end, peak RSS {:.1} MiB (the largest child's), {:.1} KiB of JSON, phases from {}",
        elapsed.as_secs_f64(),
        rss as f64 / MIB as f64,
        out.stdout.len() as f64 / 1024.0,
        doc["phases_from"]
    );
}
