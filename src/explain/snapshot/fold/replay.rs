//! One device's trace replayed entry by entry: the allocated and reserved levels, their series,
//! the allocations alive at each phase's peak and the out-of-memory entries.

use super::*;

pub(super) const KEY_BEFORE: u32 = 0;
pub(super) const KEY_BETWEEN: u32 = 1;

#[derive(Clone, Copy)]
pub(super) struct RawPoint {
    pub(super) event: u64,
    pub(super) time: Option<i64>,
    pub(super) alloc: i128,
    pub(super) reserved: i128,
}

/// A downsampled time series: points of `stride` entries each holding their highest levels;
/// when full, pairs are merged and the stride doubles.
pub(super) struct Series {
    pub(super) stride: u64,
    pub(super) points: Vec<RawPoint>,
    pub(super) current: Option<RawPoint>,
    pub(super) in_current: u64,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            stride: 1,
            points: Vec::new(),
            current: None,
            in_current: 0,
        }
    }
}

impl Series {
    pub(super) fn push(&mut self, event: u64, time: Option<i64>, alloc: i128, reserved: i128) {
        match &mut self.current {
            Some(p) => {
                p.alloc = p.alloc.max(alloc);
                p.reserved = p.reserved.max(reserved);
            }
            None => {
                self.current = Some(RawPoint {
                    event,
                    time,
                    alloc,
                    reserved,
                })
            }
        }
        self.in_current += 1;
        if self.in_current >= self.stride {
            if let Some(p) = self.current.take() {
                self.points.push(p);
            }
            self.in_current = 0;
            if self.points.len() >= SERIES_MAX_POINTS {
                self.points = self
                    .points
                    .chunks(2)
                    .map(|pair| {
                        let mut p = pair[0];
                        if let Some(q) = pair.get(1) {
                            p.alloc = p.alloc.max(q.alloc);
                            p.reserved = p.reserved.max(q.reserved);
                        }
                        p
                    })
                    .collect();
                self.stride = self.stride.saturating_mul(2);
            }
        }
    }
}

/// What the bounds for all devices together leave to one device's replay.
#[derive(Clone, Copy)]
pub(super) struct Room {
    /// New phases.
    pub(super) phases: usize,
    /// Allocations and segments tracked alive.
    pub(super) alive: usize,
}

pub(super) struct Alive {
    pub(super) size: u64,
    pub(super) stack: Option<u32>,
    pub(super) event: u64,
    pub(super) time: Option<i64>,
    pub(super) phase: u32,
}

#[derive(Clone, Copy)]
pub(super) struct TopAlloc {
    pub(super) address: u64,
    pub(super) size: u64,
    pub(super) stack: Option<u32>,
    pub(super) event: u64,
    pub(super) time: Option<i64>,
    pub(super) phase: u32,
}

pub(super) struct OomAcc {
    pub(super) at: TracePoint,
    pub(super) requested: u64,
    pub(super) device_free: Option<u64>,
}

#[derive(Default)]
pub(super) struct PhaseAcc {
    pub(super) key: u32,
    pub(super) entries: u64,
    pub(super) first_event: u64,
    pub(super) last_event: u64,
    pub(super) start_time: Option<i64>,
    pub(super) end_time: Option<i64>,
    pub(super) allocations: u64,
    pub(super) allocated_total: u64,
    pub(super) frees: u64,
    pub(super) freed_total: u64,
    pub(super) start_alloc: i128,
    pub(super) start_reserved: i128,
    pub(super) end_alloc: i128,
    pub(super) end_reserved: i128,
    pub(super) peak_alloc: i128,
    pub(super) peak_alloc_at: TracePoint,
    pub(super) peak_reserved: i128,
    pub(super) peak_reserved_at: TracePoint,
    /// The allocated peak was reached and the allocations alive there are not captured yet.
    pub(super) pending: bool,
    pub(super) top: Vec<TopAlloc>,
    pub(super) ooms: Vec<OomAcc>,
}

/// One device's trace, replayed entry by entry.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) entries: u64,
    pub(super) actions: [u64; ACTIONS.len()],
    pub(super) other_actions: BTreeMap<String, u64>,
    /// Levels relative to the first entry; anchored to the segments at the end.
    pub(super) alloc: i128,
    pub(super) reserved: i128,
    pub(super) min_alloc: i128,
    pub(super) min_reserved: i128,
    pub(super) peak_alloc: i128,
    pub(super) peak_alloc_at: TracePoint,
    pub(super) peak_reserved: i128,
    pub(super) peak_reserved_at: TracePoint,
    pub(super) first_time: Option<i64>,
    pub(super) last_time: Option<i64>,
    pub(super) alive: FxHashMap<u64, Alive>,
    pub(super) by_size: BTreeSet<(u64, u64)>,
    pub(super) segments: FxHashMap<u64, u64>,
    pub(super) frees_without_alloc: u64,
    pub(super) segment_frees_without_alloc: u64,
    /// More allocations or segments were alive at once than the replay tracks.
    pub(super) untracked: bool,
    pub(super) phases: Vec<PhaseAcc>,
    pub(super) phase_slot: FxHashMap<u32, usize>,
    pub(super) current: Option<usize>,
    pub(super) current_key: u32,
    pub(super) seen_marker: bool,
    pub(super) series: Series,
}

pub(super) fn capture(
    phase: &mut PhaseAcc,
    alive: &FxHashMap<u64, Alive>,
    by_size: &BTreeSet<(u64, u64)>,
) {
    phase.top = by_size
        .iter()
        .rev()
        .take(LARGEST_KEPT)
        .filter_map(|&(size, address)| {
            alive.get(&address).map(|a| TopAlloc {
                address,
                size,
                stack: a.stack,
                event: a.event,
                time: a.time,
                phase: a.phase,
            })
        })
        .collect();
    phase.pending = false;
}

impl Replay {
    /// Allocations and segments tracked alive.
    pub(super) fn tracked(&self) -> usize {
        self.alive.len() + self.segments.len()
    }

    /// Replays one entry; false when a new phase could not be opened (bound reached).
    pub(super) fn apply(&mut self, e: &EntryAcc, marker_key: u32, room: Room) -> bool {
        let index = self.entries;
        self.entries += 1;
        let time = e.time_us;
        if self.first_time.is_none() {
            self.first_time = time;
        }
        if time.is_some() {
            self.last_time = time;
        }
        let key = if marker_key != u32::MAX {
            self.seen_marker = true;
            marker_key
        } else if self.seen_marker {
            KEY_BETWEEN
        } else {
            KEY_BEFORE
        };
        let mut opened = true;
        if self.current.is_none() || self.current_key != key {
            opened = self.switch(key, index, time, room.phases);
        }
        let Some(cur) = self.current else {
            return opened;
        };
        let point = TracePoint {
            event: Some(index),
            time_us: time,
        };
        match ACTIONS.iter().position(|w| *w == e.action) {
            Some(i) => self.actions[i] += 1,
            None => {
                let name = e.other_action.as_deref().unwrap_or("(none)").to_string();
                if self.other_actions.len() < MAX_OTHER_ACTIONS
                    || self.other_actions.contains_key(&name)
                {
                    *self.other_actions.entry(name).or_insert(0) += 1;
                }
            }
        }
        let tracked = self.tracked();
        let phase = &mut self.phases[cur];
        phase.entries += 1;
        phase.last_event = index;
        if time.is_some() {
            phase.end_time = time;
        }
        match e.action {
            Word::Alloc => {
                if let Some(size) = e.size {
                    self.alloc += i128::from(size);
                    phase.allocations += 1;
                    phase.allocated_total = phase.allocated_total.saturating_add(size);
                    if let Some(address) = e
                        .addr
                        .filter(|a| tracked < room.alive || self.alive.contains_key(a))
                    {
                        let alive = Alive {
                            size,
                            stack: e.stack,
                            event: index,
                            time,
                            phase: cur as u32,
                        };
                        if let Some(old) = self.alive.insert(address, alive) {
                            self.by_size.remove(&(old.size, address));
                        }
                        self.by_size.insert((size, address));
                    } else if e.addr.is_some() {
                        self.untracked = true;
                    }
                    if self.alloc > phase.peak_alloc {
                        phase.peak_alloc = self.alloc;
                        phase.peak_alloc_at = point;
                        phase.pending = true;
                    }
                    if self.alloc > self.peak_alloc {
                        self.peak_alloc = self.alloc;
                        self.peak_alloc_at = point;
                    }
                }
            }
            Word::FreeCompleted => {
                let known = e.addr.and_then(|a| self.alive.get(&a).map(|x| x.size));
                if let Some(size) = e.size.or(known) {
                    if phase.pending {
                        capture(phase, &self.alive, &self.by_size);
                    }
                    self.alloc -= i128::from(size);
                    self.min_alloc = self.min_alloc.min(self.alloc);
                    phase.frees += 1;
                    phase.freed_total = phase.freed_total.saturating_add(size);
                    if let Some(address) = e.addr {
                        match self.alive.remove(&address) {
                            Some(a) => {
                                self.by_size.remove(&(a.size, address));
                            }
                            None if !self.untracked => self.frees_without_alloc += 1,
                            None => {}
                        }
                    }
                }
            }
            Word::SegmentAlloc | Word::SegmentMap => {
                if let Some(size) = e.size {
                    self.reserved += i128::from(size);
                    if let Some(address) = e.addr {
                        if tracked < room.alive || self.segments.contains_key(&address) {
                            self.segments.insert(address, size);
                        } else {
                            self.untracked = true;
                        }
                    }
                    if self.reserved > phase.peak_reserved {
                        phase.peak_reserved = self.reserved;
                        phase.peak_reserved_at = point;
                    }
                    if self.reserved > self.peak_reserved {
                        self.peak_reserved = self.reserved;
                        self.peak_reserved_at = point;
                    }
                }
            }
            Word::SegmentFree | Word::SegmentUnmap => {
                if let Some(size) = e.size {
                    self.reserved -= i128::from(size);
                    self.min_reserved = self.min_reserved.min(self.reserved);
                    if let Some(address) = e.addr {
                        let known = self.segments.remove(&address).is_some();
                        if !known && e.action == Word::SegmentFree && !self.untracked {
                            self.segment_frees_without_alloc += 1;
                        }
                    }
                }
            }
            Word::Oom if phase.ooms.len() < MAX_OOMS_KEPT => {
                phase.ooms.push(OomAcc {
                    at: point,
                    requested: e.size.unwrap_or(0),
                    device_free: e.device_free,
                });
            }
            _ => {}
        }
        phase.end_alloc = self.alloc;
        phase.end_reserved = self.reserved;
        self.series.push(index, time, self.alloc, self.reserved);
        opened
    }

    /// Leaves the current phase (capturing its peak if pending) and enters `key`'s; false (and
    /// the current phase kept) when a new phase would pass the bound.
    pub(super) fn switch(&mut self, key: u32, index: u64, time: Option<i64>, room: usize) -> bool {
        let existing = self.phase_slot.get(&key).copied();
        if existing.is_none()
            && (self.phases.len() >= MAX_PHASES || room == 0)
            && self.current.is_some()
        {
            return false;
        }
        if let Some(c) = self.current {
            let phase = &mut self.phases[c];
            if phase.pending {
                capture(phase, &self.alive, &self.by_size);
            }
        }
        let start = TracePoint {
            event: None,
            time_us: time,
        };
        match existing {
            Some(slot) => {
                let phase = &mut self.phases[slot];
                if self.alloc > phase.peak_alloc {
                    phase.peak_alloc = self.alloc;
                    phase.peak_alloc_at = start;
                    phase.pending = true;
                }
                if self.reserved > phase.peak_reserved {
                    phase.peak_reserved = self.reserved;
                    phase.peak_reserved_at = start;
                }
                self.current = Some(slot);
            }
            None => {
                self.phases.push(PhaseAcc {
                    key,
                    first_event: index,
                    last_event: index,
                    start_time: time,
                    end_time: time,
                    start_alloc: self.alloc,
                    start_reserved: self.reserved,
                    end_alloc: self.alloc,
                    end_reserved: self.reserved,
                    peak_alloc: self.alloc,
                    peak_alloc_at: start,
                    peak_reserved: self.reserved,
                    peak_reserved_at: start,
                    pending: true,
                    ..PhaseAcc::default()
                });
                let slot = self.phases.len() - 1;
                self.phase_slot.insert(key, slot);
                self.current = Some(slot);
            }
        }
        self.current_key = key;
        true
    }

    /// Captures the pending peak of the phase the trace ends in.
    pub(super) fn end(&mut self) {
        if let Some(c) = self.current {
            let phase = &mut self.phases[c];
            if phase.pending {
                capture(phase, &self.alive, &self.by_size);
            }
        }
    }
}
