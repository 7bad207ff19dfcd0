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
}

#[derive(Clone, Debug)]
struct Segment {
    small: bool,
    size: u64,
    blocks: Vec<Block>,
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
    /// cudaMallocAsync and expandable segments: the bytes of each live allocation.
    async_live: std::collections::HashMap<u64, u64>,
    /// Expandable segments: the live bytes of each pool.
    small_level: u64,
    large_level: u64,
    next_id: u64,
    pub allocated: u64,
    pub reserved: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
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

    /// `torch.cuda.reset_peak_memory_stats`: peaks restart from the current levels.
    pub fn reset_peaks(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    pub fn malloc(&mut self, size: u64) -> Allocation {
        match self.backend {
            Backend::MallocAsync => return self.malloc_async(size),
            Backend::ExpandableSegments => return self.malloc_pages(size),
            Backend::Native => {}
        }
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
                self.reserved += seg_size;
                self.segments.push(Segment {
                    small,
                    size: seg_size,
                    blocks: vec![Block {
                        offset: 0,
                        size: seg_size,
                        owner: None,
                    }],
                });
                (self.segments.len() - 1, 0)
            }
        };
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
                },
            );
            seg.blocks[b].size = size;
        }
        seg.blocks[b].owner = Some(id);
        // PyTorch counts the whole block handed out (a block not split counts in full).
        self.allocated += taken;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Allocation(id)
    }

    /// cudaMallocAsync: the requested bytes count; the pool is the highest level rounded up.
    fn malloc_async(&mut self, size: u64) -> Allocation {
        let id = self.next_id;
        self.next_id += 1;
        self.async_live.insert(id, size);
        self.allocated += size;
        let pool = self
            .allocated
            .div_ceil(ASYNC_GRANULE)
            .saturating_mul(ASYNC_GRANULE);
        self.reserved = self.reserved.max(pool);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Allocation(id)
    }

    /// Expandable segments: exact (rounded) requests; each pool's pages cover its highest level.
    fn malloc_pages(&mut self, size: u64) -> Allocation {
        let size = rounded(size);
        let id = self.next_id;
        self.next_id += 1;
        let small = size <= SMALL_SIZE;
        self.async_live.insert(id, size);
        self.allocated += size;
        let pool = if small {
            &mut self.small_level
        } else {
            &mut self.large_level
        };
        *pool += size;
        let pages = self.small_level.div_ceil(SMALL_BUFFER) * SMALL_BUFFER
            + self.large_level.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
        self.reserved = self.reserved.max(pages);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Allocation(id)
    }

    pub fn free(&mut self, allocation: Allocation) {
        if let Some(size) = self.async_live.remove(&allocation.0) {
            self.allocated -= size;
            if self.backend == Backend::ExpandableSegments {
                if size <= SMALL_SIZE {
                    self.small_level -= size;
                } else {
                    self.large_level -= size;
                }
            }
            return;
        }
        for seg in &mut self.segments {
            if let Some(b) = seg
                .blocks
                .iter()
                .position(|bl| bl.owner == Some(allocation.0))
            {
                self.allocated -= seg.blocks[b].size;
                seg.blocks[b].owner = None;
                // Merge with the next, then the previous free neighbour.
                if b + 1 < seg.blocks.len() && seg.blocks[b + 1].owner.is_none() {
                    let next = seg.blocks.remove(b + 1);
                    seg.blocks[b].size += next.size;
                }
                if b > 0 && seg.blocks[b - 1].owner.is_none() {
                    let this = seg.blocks.remove(b);
                    seg.blocks[b - 1].size += this.size;
                }
                return;
            }
        }
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

    /// `torch.cuda.empty_cache`: releases every segment that holds no allocation.
    pub fn empty_cache(&mut self) {
        match self.backend {
            Backend::MallocAsync => {
                self.reserved = self.allocated.div_ceil(ASYNC_GRANULE) * ASYNC_GRANULE;
                return;
            }
            Backend::ExpandableSegments => {
                self.reserved = self.small_level.div_ceil(SMALL_BUFFER) * SMALL_BUFFER
                    + self.large_level.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
                return;
            }
            Backend::Native => {}
        }
        let before: u64 = self.segments.iter().map(|s| s.size).sum();
        self.segments
            .retain(|s| s.blocks.iter().any(|b| b.owner.is_some()));
        let after: u64 = self.segments.iter().map(|s| s.size).sum();
        self.reserved -= before - after;
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
            (a.allocated, a.reserved, a.peak_allocated),
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
