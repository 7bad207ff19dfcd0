//! A model of PyTorch's CUDA caching allocator, to predict `memory_reserved` from a sequence of
//! allocations and frees (the constants and rules of c10/cuda/CUDACachingAllocator.cpp):
//!
//! * every request is rounded up to a multiple of 512 bytes (kMinBlockSize);
//! * requests up to 1 MiB (kSmallSize) come from the small pool, whose segments are 2 MiB
//!   (kSmallBuffer); larger requests come from the large pool, whose segments are 20 MiB
//!   (kLargeBuffer) for requests under 10 MiB (kMinLargeAlloc) and the request rounded up to
//!   2 MiB (kRoundLarge) otherwise;
//! * a request takes the smallest free block of its pool that fits (best fit), split when the
//!   rest is at least 512 bytes (small pool) or more than 1 MiB (large pool);
//! * freed blocks merge with free neighbours of the same segment; segments stay reserved
//!   until `empty_cache`.
//!
//! With `expandable_segments:True`, blocks are split whenever 512 bytes remain and each pool maps
//! whole pages (20 MiB large, 2 MiB small): approximated as the highest allocated level of each
//! pool rounded up to its page (one H200 reading agrees: 2,329,935,872 reserved, where replaying
//! a growing segment block by block over-predicted by 5%); fragmentation is not modelled. With
//! `backend:cudaMallocAsync`, `memory_allocated` counts the requested bytes and the driver's pool
//! is approximated as the highest allocated level rounded up to 32 MiB (one H200 reading agrees:
//! 2,316,468,224 allocated → 2,348,810,240 reserved); its internal fragmentation is not modelled.
//!
//! It does not model streams, `max_split_size_mb` or `roundup_power2_divisions`.
//!
//! It keeps PyTorch's own counters (`DeviceStats`: current, peak, allocated and freed of each
//! counter, for all pools and for each pool), updated where the C++ updates them, so that a
//! predicted script's `torch.cuda.memory_stats()` and friends read this model (see
//! `prediction::answers`).

/// Rounding of one request (kMinBlockSize).
pub const MIN_BLOCK: u64 = 512;
pub const SMALL_SIZE: u64 = 1 << 20;
pub const SMALL_BUFFER: u64 = 2 << 20;
pub const LARGE_BUFFER: u64 = 20 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;

/// Bytes PyTorch counts as allocated for a request of `size` bytes (saturating at the last
/// 512 bytes of the `u64` range, which no device holds).
pub fn rounded(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// Bytes of the segment cudaMalloc'd when no cached block fits a rounded request.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[derive(Clone, Debug)]
struct Block {
    offset: u64,
    size: u64,
    /// `Some(id)` while allocated.
    owner: Option<u64>,
    /// The bytes asked for (before rounding) while allocated: `requested_bytes`.
    requested: u64,
}

#[derive(Clone, Debug)]
struct Segment {
    small: bool,
    size: u64,
    blocks: Vec<Block>,
}

/// One of PyTorch's allocator counters (`c10::CachingAllocator::Stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
    /// Added up since the start (or `reset_accumulated_memory_stats`).
    pub allocated: u64,
    pub freed: u64,
}

impl Stat {
    fn increase(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
        self.allocated += n;
    }

    fn decrease(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
        self.freed += n;
    }
}

/// A counter for all pools and for each pool (PyTorch's `StatType`: aggregate, small, large).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStat {
    pub all: Stat,
    pub small_pool: Stat,
    pub large_pool: Stat,
}

impl PoolStat {
    fn increase(&mut self, small: bool, n: u64) {
        self.all.increase(n);
        self.pool(small).increase(n);
    }

    fn decrease(&mut self, small: bool, n: u64) {
        self.all.decrease(n);
        self.pool(small).decrease(n);
    }

    fn pool(&mut self, small: bool) -> &mut Stat {
        if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        }
    }

    fn each(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }
}

/// PyTorch's `DeviceStats`, as `torch.cuda.memory_stats()` names them. `active` equals
/// `allocation` here: no block waits for another stream's events (streams are not modelled).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub allocation: PoolStat,
    pub segment: PoolStat,
    pub active: PoolStat,
    pub inactive_split: PoolStat,
    pub allocated_bytes: PoolStat,
    pub reserved_bytes: PoolStat,
    pub active_bytes: PoolStat,
    pub inactive_split_bytes: PoolStat,
    pub requested_bytes: PoolStat,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_sync_all_streams: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
}

impl Stats {
    fn counters(&mut self) -> [&mut PoolStat; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `torch.cuda.memory_stats()`'s flat dictionary: `NAME.POOL.FIELD` for every counter, then
    /// the plain counts; `max_split_size` is -1 (unlimited, the default) and nothing is
    /// oversize.
    pub fn flat(&self) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        let named: [(&str, &PoolStat); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (name, stat) in named {
            for (pool, s) in [
                ("all", stat.all),
                ("small_pool", stat.small_pool),
                ("large_pool", stat.large_pool),
            ] {
                for (field, v) in [
                    ("current", s.current),
                    ("peak", s.peak),
                    ("allocated", s.allocated),
                    ("freed", s.freed),
                ] {
                    out.insert(format!("{name}.{pool}.{field}"), signed(v));
                }
            }
        }
        for field in ["current", "peak", "allocated", "freed"] {
            out.insert(format!("oversize_allocations.{field}"), 0);
            out.insert(format!("oversize_segments.{field}"), 0);
        }
        out.insert("max_split_size".into(), -1);
        for (name, v) in [
            ("num_alloc_retries", self.num_alloc_retries),
            ("num_ooms", self.num_ooms),
            ("num_sync_all_streams", self.num_sync_all_streams),
            ("num_device_alloc", self.num_device_alloc),
            ("num_device_free", self.num_device_free),
        ] {
            out.insert(name.into(), signed(v));
        }
        out
    }
}

/// Which allocator PyTorch runs (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Native,
    ExpandableSegments,
    MallocAsync,
}

/// The pool granularity of the cudaMallocAsync approximation.
pub const ASYNC_GRANULE: u64 = 32 << 20;

/// The simulated allocator of one device.
#[derive(Clone, Debug, Default)]
pub struct CachingAllocator {
    backend: Backend,
    segments: Vec<Segment>,
    /// cudaMallocAsync and expandable segments: the bytes of each live allocation (counted, and
    /// asked for).
    async_live: std::collections::HashMap<u64, (u64, u64)>,
    /// Expandable segments: the live bytes of each pool.
    small_level: u64,
    large_level: u64,
    next_id: u64,
    /// The levels now (`stats.allocated_bytes.all.current`, `stats.reserved_bytes.all.current`).
    pub allocated: u64,
    pub reserved: u64,
    /// PyTorch's counters; their peaks restart only with [`CachingAllocator::reset_peaks`].
    pub stats: Stats,
}

/// A live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation(u64);

impl CachingAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_backend(backend: Backend) -> Self {
        CachingAllocator {
            backend,
            ..Self::default()
        }
    }

    /// `torch.cuda.reset_peak_memory_stats`: every peak restarts from its current level.
    pub fn reset_peaks(&mut self) {
        for counter in self.stats.counters() {
            for s in counter.each() {
                s.peak = s.current;
            }
        }
    }

    /// `torch.cuda.reset_accumulated_memory_stats`: the added-up counts restart from zero.
    pub fn reset_accumulated(&mut self) {
        for counter in self.stats.counters() {
            for s in counter.each() {
                s.allocated = 0;
                s.freed = 0;
            }
        }
        let st = &mut self.stats;
        st.num_alloc_retries = 0;
        st.num_ooms = 0;
        st.num_sync_all_streams = 0;
        st.num_device_alloc = 0;
        st.num_device_free = 0;
    }

    /// The highest allocated and reserved levels since the last [`reset_peaks`](Self::reset_peaks).
    pub fn peaks(&self) -> (u64, u64) {
        (
            self.stats.allocated_bytes.all.peak,
            self.stats.reserved_bytes.all.peak,
        )
    }

    /// An allocation handed out (`alloc_found_block`'s counters).
    fn count_alloc(&mut self, small: bool, taken: u64, requested: u64) {
        let st = &mut self.stats;
        st.allocation.increase(small, 1);
        st.active.increase(small, 1);
        st.allocated_bytes.increase(small, taken);
        st.active_bytes.increase(small, taken);
        st.requested_bytes.increase(small, requested);
        self.allocated = st.allocated_bytes.all.current;
    }

    /// An allocation given back (`free` and `free_block`'s counters).
    fn count_free(&mut self, small: bool, taken: u64, requested: u64) {
        let st = &mut self.stats;
        st.allocation.decrease(small, 1);
        st.active.decrease(small, 1);
        st.allocated_bytes.decrease(small, taken);
        st.active_bytes.decrease(small, taken);
        st.requested_bytes.decrease(small, requested);
        self.allocated = st.allocated_bytes.all.current;
    }

    /// Expandable segments: the pages that cover each pool's level.
    fn pages(&self) -> u64 {
        self.small_level.div_ceil(SMALL_BUFFER) * SMALL_BUFFER
            + self.large_level.div_ceil(LARGE_BUFFER) * LARGE_BUFFER
    }

    /// A segment (or pages) mapped: `cudaMalloc`.
    fn count_segment(&mut self, small: bool, bytes: u64) {
        let st = &mut self.stats;
        st.segment.increase(small, 1);
        st.reserved_bytes.increase(small, bytes);
        st.num_device_alloc += 1;
        self.reserved = st.reserved_bytes.all.current;
    }

    /// A segment released: `cudaFree`.
    fn count_release(&mut self, small: bool, bytes: u64) {
        let st = &mut self.stats;
        st.segment.decrease(small, 1);
        st.reserved_bytes.decrease(small, bytes);
        st.num_device_free += 1;
        self.reserved = st.reserved_bytes.all.current;
    }

    /// Moves `inactive_split` by how segment `s`'s free blocks changed: PyTorch counts a free
    /// block as an inactive split while its segment is split in several blocks.
    fn count_split(&mut self, small: bool, before: (u64, u64), after: (u64, u64)) {
        let st = &mut self.stats;
        for (stat, b, a) in [
            (&mut st.inactive_split, before.0, after.0),
            (&mut st.inactive_split_bytes, before.1, after.1),
        ] {
            if a > b {
                stat.increase(small, a - b);
            } else if b > a {
                stat.decrease(small, b - a);
            }
        }
    }

    pub fn malloc(&mut self, size: u64) -> Allocation {
        match self.backend {
            Backend::MallocAsync => return self.malloc_async(size),
            Backend::ExpandableSegments => return self.malloc_pages(size),
            Backend::Native => {}
        }
        let requested = size;
        let size = rounded(size);
        let small = size <= SMALL_SIZE;
        let id = self.next_id;
        self.next_id += 1;
        // Best fit among the free blocks of the pool.
        let mut best: Option<(usize, usize, u64)> = None;
        for (s, seg) in self
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.small == small)
        {
            for (b, block) in seg.blocks.iter().enumerate() {
                if block.owner.is_none()
                    && block.size >= size
                    && best.is_none_or(|(_, _, bs)| block.size < bs)
                {
                    best = Some((s, b, block.size));
                }
            }
        }
        let (s, b) = match best {
            Some((s, b, _)) => (s, b),
            None => {
                let seg_size = segment_size(size);
                self.count_segment(small, seg_size);
                self.segments.push(Segment {
                    small,
                    size: seg_size,
                    blocks: vec![Block {
                        offset: 0,
                        size: seg_size,
                        owner: None,
                        requested: 0,
                    }],
                });
                (self.segments.len() - 1, 0)
            }
        };
        let before = self.segments[s].inactive_split();
        let seg = &mut self.segments[s];
        let remaining = seg.blocks[b].size - size;
        let split = if small {
            remaining >= MIN_BLOCK
        } else {
            remaining > SMALL_SIZE
        };
        let taken = if split { size } else { seg.blocks[b].size };
        if split {
            let offset = seg.blocks[b].offset + size;
            seg.blocks.insert(
                b + 1,
                Block {
                    offset,
                    size: remaining,
                    owner: None,
                    requested: 0,
                },
            );
            seg.blocks[b].size = size;
        }
        seg.blocks[b].owner = Some(id);
        seg.blocks[b].requested = requested;
        let after = seg.inactive_split();
        self.count_split(small, before, after);
        // PyTorch counts the whole block handed out (a block not split counts in full).
        self.count_alloc(small, taken, requested);
        Allocation(id)
    }

    /// cudaMallocAsync: the requested bytes count; the pool is the highest level rounded up.
    fn malloc_async(&mut self, size: u64) -> Allocation {
        let id = self.next_id;
        self.next_id += 1;
        let small = size <= SMALL_SIZE;
        self.async_live.insert(id, (size, size));
        self.count_alloc(small, size, size);
        let pool = self
            .allocated
            .div_ceil(ASYNC_GRANULE)
            .saturating_mul(ASYNC_GRANULE);
        if pool > self.reserved {
            // The driver's pool grows (counted as the large pool's).
            self.count_segment(false, pool - self.reserved);
        }
        Allocation(id)
    }

    /// Expandable segments: exact (rounded) requests; each pool's pages cover its highest level.
    fn malloc_pages(&mut self, size: u64) -> Allocation {
        let requested = size;
        let size = rounded(size);
        let id = self.next_id;
        self.next_id += 1;
        let small = size <= SMALL_SIZE;
        self.async_live.insert(id, (size, requested));
        self.count_alloc(small, size, requested);
        if small {
            self.small_level += size;
        } else {
            self.large_level += size;
        }
        // The pages that cover both pools' levels: reserved grows to them, in this request's pool.
        let pages = self.pages();
        if pages > self.reserved {
            self.count_segment(small, pages - self.reserved);
        }
        Allocation(id)
    }

    pub fn free(&mut self, allocation: Allocation) {
        if let Some((size, requested)) = self.async_live.remove(&allocation.0) {
            let small = size <= SMALL_SIZE;
            self.count_free(small, size, requested);
            if self.backend == Backend::ExpandableSegments {
                if small {
                    self.small_level -= size;
                } else {
                    self.large_level -= size;
                }
            }
            return;
        }
        let Some((s, b)) = self.segments.iter().enumerate().find_map(|(s, seg)| {
            seg.blocks
                .iter()
                .position(|bl| bl.owner == Some(allocation.0))
                .map(|b| (s, b))
        }) else {
            return;
        };
        let before = self.segments[s].inactive_split();
        let seg = &mut self.segments[s];
        let small = seg.small;
        let (taken, requested) = (seg.blocks[b].size, seg.blocks[b].requested);
        seg.blocks[b].owner = None;
        seg.blocks[b].requested = 0;
        // Merge with the next, then the previous free neighbour.
        if b + 1 < seg.blocks.len() && seg.blocks[b + 1].owner.is_none() {
            let next = seg.blocks.remove(b + 1);
            seg.blocks[b].size += next.size;
        }
        if b > 0 && seg.blocks[b - 1].owner.is_none() {
            let this = seg.blocks.remove(b);
            seg.blocks[b - 1].size += this.size;
        }
        let after = seg.inactive_split();
        self.count_split(small, before, after);
        self.count_free(small, taken, requested);
    }

    /// What serving a request of `size` bytes would add to the reserved memory: 0 when a cached
    /// block serves it, else the new segment (native) or the pages or pool it grows by. A
    /// simulated card refuses a request whose growth does not fit.
    pub fn growth(&self, size: u64) -> u64 {
        match self.backend {
            Backend::MallocAsync => self
                .allocated
                .saturating_add(size)
                .div_ceil(ASYNC_GRANULE)
                .saturating_mul(ASYNC_GRANULE)
                .saturating_sub(self.reserved),
            Backend::ExpandableSegments => {
                let size = rounded(size);
                let (small, large) = if size <= SMALL_SIZE {
                    (self.small_level + size, self.large_level)
                } else {
                    (self.small_level, self.large_level.saturating_add(size))
                };
                (small.div_ceil(SMALL_BUFFER) * SMALL_BUFFER)
                    .saturating_add(large.div_ceil(LARGE_BUFFER).saturating_mul(LARGE_BUFFER))
                    .saturating_sub(self.reserved)
            }
            Backend::Native => {
                let size = rounded(size);
                let small = size <= SMALL_SIZE;
                let cached = self
                    .segments
                    .iter()
                    .filter(|s| s.small == small)
                    .any(|s| s.blocks.iter().any(|b| b.owner.is_none() && b.size >= size));
                if cached { 0 } else { segment_size(size) }
            }
        }
    }

    /// `torch.cuda.empty_cache` (and `release_cached_blocks` before an out-of-memory): releases
    /// every segment that holds no allocation.
    pub fn empty_cache(&mut self) {
        self.stats.num_sync_all_streams += 1;
        match self.backend {
            Backend::MallocAsync => {
                let pool = self.allocated.div_ceil(ASYNC_GRANULE) * ASYNC_GRANULE;
                if self.reserved > pool {
                    self.count_release(false, self.reserved - pool);
                }
                return;
            }
            Backend::ExpandableSegments => {
                let pages = self.pages();
                let mut excess = self.reserved.saturating_sub(pages);
                // Unmapped from the large pool first, then the small one.
                for small in [false, true] {
                    let held = if small {
                        self.stats.reserved_bytes.small_pool.current
                    } else {
                        self.stats.reserved_bytes.large_pool.current
                    };
                    let released = excess.min(held);
                    if released > 0 {
                        self.count_release(small, released);
                        excess -= released;
                    }
                }
                return;
            }
            Backend::Native => {}
        }
        let (kept, released): (Vec<Segment>, Vec<Segment>) = std::mem::take(&mut self.segments)
            .into_iter()
            .partition(|s| s.blocks.iter().any(|b| b.owner.is_some()));
        self.segments = kept;
        for seg in released {
            self.count_release(seg.small, seg.size);
        }
    }
}

impl Segment {
    /// Its free blocks (count, bytes) while it is split in several blocks, else none.
    fn inactive_split(&self) -> (u64, u64) {
        if self.blocks.len() < 2 {
            return (0, 0);
        }
        self.blocks
            .iter()
            .filter(|b| b.owner.is_none())
            .fold((0, 0), |(n, bytes), b| (n + 1, bytes + b.size))
    }
}

/// Reserved bytes for tensors allocated once and kept (weights), without replaying every
/// allocation: small tensors are packed into 2 MiB segments, medium ones best-fit into 20 MiB
/// segments, large ones each get their size rounded up to 2 MiB. `sizes` is (bytes, count).
/// Equal to the replay when nothing is freed; saturates at `u64::MAX`.
///
/// Best fit of identical tensors is done in bulk: the segment with the least free space that
/// fits one tensor keeps taking them until it no longer fits one (its free space only shrinks,
/// so it stays the best fit), so each group costs one step per distinct free-space value, not one
/// per tensor: a million layers cost as little as one.
pub fn packed_reserved(sizes: &[(u64, u64)]) -> u64 {
    let mut small = 0u128;
    let mut large = 0u128;
    let mut medium = MediumSegments::default();
    for &(size, count) in sizes {
        let r = rounded(size);
        if r <= SMALL_SIZE {
            small += r as u128 * count as u128;
        } else if r < MIN_LARGE_ALLOC {
            medium.place(r, count);
        } else {
            large += segment_size(r) as u128 * count as u128;
        }
    }
    let small_segments = small.div_ceil(SMALL_BUFFER as u128) * SMALL_BUFFER as u128;
    let total = small_segments + medium.segments * LARGE_BUFFER as u128 + large;
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The 20 MiB segments of medium tensors, as a multiset of their free space.
#[derive(Default)]
struct MediumSegments {
    /// Free bytes → how many segments have exactly that much free.
    free: std::collections::BTreeMap<u64, u128>,
    segments: u128,
}

impl MediumSegments {
    /// Places `count` tensors of `r` bytes (1 MiB < r < 10 MiB) by best fit.
    fn place(&mut self, r: u64, mut count: u64) {
        while count > 0 {
            let Some((&free, &segments)) = self.free.range(r..).next() else {
                // No segment fits: new ones, each filled before the next is created.
                let per = LARGE_BUFFER / r;
                let (full, rest) = (count / per, count % per);
                self.add(LARGE_BUFFER - per * r, full as u128);
                if rest > 0 {
                    self.add(LARGE_BUFFER - rest * r, 1);
                }
                self.segments += full as u128 + u128::from(rest > 0);
                return;
            };
            let per = free / r;
            let fits = per as u128 * segments;
            self.remove(free, segments);
            if count as u128 >= fits {
                self.add(free - per * r, segments);
                // `fits` ≤ `count` here, so it fits in a u64.
                count -= fits as u64;
            } else {
                let (full, rest) = (count / per, count % per);
                self.add(free - per * r, full as u128);
                if rest > 0 {
                    self.add(free - rest * r, 1);
                }
                self.add(free, segments - full as u128 - u128::from(rest > 0));
                count = 0;
            }
        }
    }

    fn add(&mut self, free: u64, segments: u128) {
        if segments > 0 {
            *self.free.entry(free).or_default() += segments;
        }
    }

    fn remove(&mut self, free: u64, segments: u128) {
        if let Some(n) = self.free.get_mut(&free) {
            *n -= segments;
            if *n == 0 {
                self.free.remove(&free);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_segments() {
        assert_eq!(rounded(1), 512);
        assert_eq!(rounded(513), 1024);
        assert_eq!(segment_size(512), 2 << 20);
        assert_eq!(segment_size(1 << 20), 2 << 20);
        assert_eq!(segment_size((1 << 20) + 512), 20 << 20);
        assert_eq!(segment_size(10 << 20), 10 << 20);
        assert_eq!(segment_size((10 << 20) + 1), 12 << 20);
    }

    #[test]
    fn small_requests_share_a_segment() {
        let mut a = CachingAllocator::new();
        let x = a.malloc(1000);
        let y = a.malloc(1000);
        assert_eq!(a.allocated, 2048);
        assert_eq!(a.reserved, 2 << 20);
        a.free(x);
        a.free(y);
        assert_eq!(a.allocated, 0);
        assert_eq!(a.reserved, 2 << 20);
        a.empty_cache();
        assert_eq!(a.reserved, 0);
    }

    #[test]
    fn medium_requests_take_20_mib_segments_and_reuse_them() {
        let mut a = CachingAllocator::new();
        let x = a.malloc(4 << 20);
        assert_eq!(a.reserved, 20 << 20);
        let y = a.malloc(4 << 20);
        assert_eq!(
            a.reserved,
            20 << 20,
            "the second request fits the first segment's rest"
        );
        a.free(x);
        a.free(y);
        let z = a.malloc(16 << 20);
        assert_eq!(
            a.reserved,
            20 << 20,
            "merged free blocks serve a larger request"
        );
        assert_eq!(a.allocated, 16 << 20);
        a.free(z);
    }

    #[test]
    fn packing_matches_the_replay_for_weights() {
        let sizes = [
            (4096u64, 65),
            (58_720_256, 96),
            (16_777_216, 64),
            (4_194_304, 64),
            (2048, 10),
            (3 << 20, 7),
        ];
        let mut a = CachingAllocator::new();
        for (size, count) in sizes {
            for _ in 0..count {
                a.malloc(size);
            }
        }
        assert_eq!(packed_reserved(&sizes), a.reserved);
    }

    /// The bulk best fit equals placing the tensors one by one, whatever the mix of sizes.
    #[test]
    fn bulk_packing_equals_one_by_one() {
        fn one_by_one(sizes: &[(u64, u64)]) -> u64 {
            let mut free: Vec<u64> = Vec::new();
            for &(size, count) in sizes {
                let r = rounded(size);
                for _ in 0..count {
                    match free.iter_mut().filter(|f| **f >= r).min_by_key(|f| **f) {
                        Some(f) => *f -= r,
                        None => free.push(LARGE_BUFFER - r),
                    }
                }
            }
            free.len() as u64 * LARGE_BUFFER
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..300 {
            let sizes: Vec<(u64, u64)> = (0..1 + next(6))
                .map(|_| {
                    (
                        SMALL_SIZE + 1 + next(MIN_LARGE_ALLOC - SMALL_SIZE - 512),
                        next(40),
                    )
                })
                .collect();
            assert_eq!(packed_reserved(&sizes), one_by_one(&sizes), "{sizes:?}");
        }
    }

    #[test]
    fn a_million_layers_pack_at_once() {
        let start = std::time::Instant::now();
        // 8 MiB k_proj and v_proj of a million layers: two per 20 MiB segment.
        let reserved = packed_reserved(&[(8 << 20, 1_000_000), (8 << 20, 1_000_000)]);
        assert_eq!(reserved, 1_000_000 * (20 << 20));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn a_block_not_split_counts_in_full() {
        let mut a = CachingAllocator::new();
        let x = a.malloc(12 << 20);
        a.free(x);
        // 11.5 MiB in the 12 MiB block: the 0.5 MiB rest is not split off (≤ 1 MiB).
        let _y = a.malloc((23 << 20) / 2);
        assert_eq!(a.allocated, 12 << 20);
        assert_eq!(a.reserved, 12 << 20);
    }

    /// The counters move where CUDACachingAllocator.cpp moves them: `allocated_bytes` by the
    /// block handed out (a block not split counts in full), `requested_bytes` by the bytes asked,
    /// `inactive_split` by the free blocks of split segments, `segment`/`reserved_bytes` at
    /// cudaMalloc/cudaFree; peaks restart only at `reset_peaks`, added-up counts at
    /// `reset_accumulated`.
    #[test]
    fn the_counters_follow_pytorchs() {
        let mib = 1u64 << 20;
        let mut a = CachingAllocator::new();
        let x = a.malloc(4 * mib + 100);
        let st = &a.stats;
        assert_eq!(st.allocated_bytes.large_pool.current, 4 * mib + 512);
        assert_eq!(st.requested_bytes.all.current, 4 * mib + 100);
        assert_eq!((st.segment.all.current, st.num_device_alloc), (1, 1));
        assert_eq!(
            (
                st.inactive_split.all.current,
                st.inactive_split_bytes.all.current
            ),
            (1, 16 * mib - 512),
            "the 20 MiB segment is split: its free rest is an inactive split"
        );
        let y = a.malloc(16 * mib - 512 - mib / 2);
        assert_eq!(
            a.stats.allocated_bytes.all.current,
            20 * mib,
            "the rest (0.5 MiB) is not split off: the whole block counts"
        );
        assert_eq!(a.stats.inactive_split.all.current, 0);
        let s = a.malloc(1000);
        assert_eq!(a.stats.allocated_bytes.small_pool.current, 1024);
        assert_eq!(a.stats.reserved_bytes.small_pool.current, 2 * mib);
        a.free(y);
        a.free(x);
        assert_eq!(a.stats.inactive_split.large_pool.current, 0, "merged whole");
        assert_eq!(a.peaks(), (20 * mib + 1024, 22 * mib));
        a.reset_peaks();
        assert_eq!(a.peaks(), (1024, 22 * mib));
        a.empty_cache();
        assert_eq!(
            (
                a.reserved,
                a.stats.num_device_free,
                a.stats.segment.all.current
            ),
            (2 * mib, 1, 1),
            "the free 20 MiB segment is released; the small one holds an allocation"
        );
        assert_eq!(a.peaks().1, 22 * mib, "a release keeps the peak");
        assert_eq!(a.stats.allocation.all.allocated, 3);
        a.reset_accumulated();
        assert_eq!(a.stats.allocation.all.allocated, 0);
        assert_eq!(a.stats.num_device_alloc, 0);
        a.free(s);
        let flat = a.stats.flat();
        assert_eq!(flat["allocated_bytes.all.current"], 0);
        assert_eq!(flat["allocated_bytes.all.freed"], 1024);
        assert_eq!(flat["max_split_size"], -1);
    }

    #[test]
    fn the_other_backends_follow_their_readings() {
        let mib = 1u64 << 20;
        // cudaMallocAsync: requested bytes; the pool is the highest level rounded to 32 MiB.
        let mut a = CachingAllocator::with_backend(Backend::MallocAsync);
        let x = a.malloc(1000);
        assert_eq!(a.allocated, 1000);
        let y = a.malloc(40 * mib);
        assert_eq!(a.reserved, 64 * mib);
        a.free(y);
        a.free(x);
        assert_eq!(
            (a.allocated, a.reserved, a.peaks().0),
            (0, 64 * mib, 40 * mib + 1000)
        );
        a.empty_cache();
        assert_eq!(a.reserved, 0);
        // Expandable segments: each pool's pages cover its highest level.
        let mut e = CachingAllocator::with_backend(Backend::ExpandableSegments);
        let s = e.malloc(1000);
        let l = e.malloc(25 * mib);
        assert_eq!(
            e.allocated,
            25 * mib + 1024,
            "always split: no block counted in full"
        );
        assert_eq!(e.reserved, 2 * mib + 40 * mib);
        e.free(l);
        let l2 = e.malloc(30 * mib);
        assert_eq!(e.reserved, 2 * mib + 40 * mib, "the pages are reused");
        e.free(l2);
        e.free(s);
        assert_eq!(e.allocated, 0);
    }
}
