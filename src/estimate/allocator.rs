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
//! It does not model streams, `expandable_segments`, `max_split_size_mb` or cudaMallocAsync.

/// Rounding of one request (kMinBlockSize).
pub const MIN_BLOCK: u64 = 512;
pub const SMALL_SIZE: u64 = 1 << 20;
pub const SMALL_BUFFER: u64 = 2 << 20;
pub const LARGE_BUFFER: u64 = 20 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;

/// Bytes PyTorch counts as allocated for a request of `size` bytes.
pub fn rounded(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

/// Bytes of the segment cudaMalloc'd when no cached block fits a rounded request.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
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

/// The simulated allocator of one device.
#[derive(Clone, Debug, Default)]
pub struct CachingAllocator {
    segments: Vec<Segment>,
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

    /// Adds memory held for the whole run without replaying it (many tensors): it counts in the
    /// levels but offers no free space to later requests.
    pub fn preload(&mut self, allocated: u64, reserved: u64) {
        self.allocated += allocated;
        self.reserved += reserved;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    /// `torch.cuda.reset_peak_memory_stats`: peaks restart from the current levels.
    pub fn reset_peaks(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    pub fn malloc(&mut self, size: u64) -> Allocation {
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

    pub fn free(&mut self, allocation: Allocation) {
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

    /// `torch.cuda.empty_cache`: releases every segment that holds no allocation.
    pub fn empty_cache(&mut self) {
        let before: u64 = self.segments.iter().map(|s| s.size).sum();
        self.segments
            .retain(|s| s.blocks.iter().any(|b| b.owner.is_some()));
        let after: u64 = self.segments.iter().map(|s| s.size).sum();
        self.reserved -= before - after;
    }
}

/// Reserved bytes for tensors allocated once and kept (weights), without replaying every
/// allocation: small tensors are packed into 2 MiB segments, medium ones first-fit into 20 MiB
/// segments, large ones each get their size rounded up to 2 MiB. `sizes` is (bytes, count).
/// Equal to the replay when nothing is freed, and fast for models with 100,000 tensors.
pub fn packed_reserved(sizes: &[(u64, u64)]) -> u64 {
    let mut small = 0u128;
    let mut large = 0u128;
    let mut medium_free: Vec<u64> = Vec::new();
    for &(size, count) in sizes {
        let r = rounded(size);
        if r <= SMALL_SIZE {
            small += r as u128 * count as u128;
        } else if r < MIN_LARGE_ALLOC {
            for _ in 0..count.min(1_000_000) {
                // Best fit among the segments' remaining space, as the allocator does.
                let slot = medium_free
                    .iter_mut()
                    .filter(|f| **f >= r)
                    .min_by_key(|f| **f);
                match slot {
                    Some(f) => *f -= r,
                    None => medium_free.push(LARGE_BUFFER - r),
                }
            }
        } else {
            large += segment_size(r) as u128 * count as u128;
        }
    }
    let small_segments = small.div_ceil(SMALL_BUFFER as u128) * SMALL_BUFFER as u128;
    let total = small_segments + medium_free.len() as u128 * LARGE_BUFFER as u128 + large;
    u64::try_from(total).unwrap_or(u64::MAX)
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
}
