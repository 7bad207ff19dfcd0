//! The answers to a predicted script's own allocator calls (`torch.cuda.memory_allocated()`,
//! `max_memory_reserved()`, `memory_stats()`…), from the replay's model: one allocator model for
//! the file and for what the script prints.
//!
//! The worker sends the events it still batches, then a `memory_query`; the events so far are
//! stepped through a [`Device`] (the replay's, with the same capacity), and the allocator's
//! counters go back on the worker's answer pipe as one JSON line, named as
//! `torch.cuda.memory_stats()` names them. The script's `reset_peak_memory_stats()`,
//! `empty_cache()` and `reset_accumulated_memory_stats()` are events of the trace, applied in
//! their place by this device and by the replay alike.

use serde_json::json;

use crate::estimate::allocator::Backend;
use crate::prediction::replay::{Device, TraceEvent};

/// A device stepped lazily over the events received so far: nothing is replayed twice, and a
/// script that never asks costs nothing.
pub struct Answers {
    device: Device,
    applied: usize,
}

impl Answers {
    pub fn new(backend: Backend, capacity: Option<u64>) -> Self {
        Answers {
            device: Device::new(backend, capacity),
            applied: 0,
        }
    }

    /// The answer to question `id`, after every one of `events` (all received so far, in order;
    /// each call passes the same list, grown).
    pub fn answer(&mut self, id: u64, events: &[TraceEvent]) -> String {
        for event in events.iter().skip(self.applied) {
            self.device.step(event);
        }
        self.applied = self.applied.max(events.len());
        json!({"id": id, "stats": self.device.allocator.stats.flat()}).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prediction::replay::replay;
    use crate::prediction::replay::tests::{alloc, end, start};
    use crate::schema::trace::Category;

    const MIB: u64 = 1 << 20;

    fn stat(answer: &str, key: &str) -> i64 {
        let v: serde_json::Value = serde_json::from_str(answer).unwrap();
        v["stats"][key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} in {answer}"))
    }

    /// What a script reads at each phase end (after resetting the peaks at its start) is the
    /// replay's figure for that phase, to the byte; empty_cache and the resets apply where the
    /// script called them.
    #[test]
    fn the_script_reads_the_replays_figures() {
        let mut events = vec![
            TraceEvent::ResetPeaks,
            start("load", 0),
            alloc(0, 4 * MIB, Category::Parameter, "m"),
            alloc(1, 1000, Category::Buffer, "m"),
            end(0),
        ];
        let mut answers = Answers::new(Backend::Native, None);
        let first = answers.answer(0, &events);
        events.extend([
            TraceEvent::ResetPeaks,
            start("forward", 1),
            alloc(2, 30 * MIB, Category::Activation, "m"),
            alloc(3, 3 * MIB, Category::Temporary, "m"),
            TraceEvent::Free(3),
            TraceEvent::Free(2),
            end(1),
        ]);
        let second = answers.answer(1, &events);
        let phases = replay(&events, 0, Backend::Native).phases;
        for (answer, phase) in [(&first, &phases[0]), (&second, &phases[1])] {
            let peak = |key| Some(stat(answer, key) as u64);
            assert_eq!(peak("allocated_bytes.all.peak"), phase.peak_allocated_bytes);
            assert_eq!(peak("reserved_bytes.all.peak"), phase.peak_reserved_bytes);
            assert_eq!(
                peak("allocated_bytes.all.current"),
                phase.end_allocated_bytes
            );
            assert_eq!(peak("reserved_bytes.all.current"), phase.end_reserved_bytes);
        }
        assert_eq!(
            stat(&second, "allocated_bytes.all.peak"),
            37 * MIB as i64 + 1024
        );
        assert_eq!(stat(&second, "segment.large_pool.current"), 2);
        assert_eq!(stat(&second, "requested_bytes.small_pool.current"), 1000);
        // empty_cache releases the 30 MiB segment left free; the script's next read sees it.
        events.push(TraceEvent::EmptyCache);
        let third = answers.answer(2, &events);
        assert_eq!(stat(&third, "reserved_bytes.all.current"), 22 * MIB as i64);
        assert_eq!(stat(&third, "num_device_free"), 1);
        assert_eq!(
            stat(&third, "reserved_bytes.all.peak"),
            52 * MIB as i64,
            "a release keeps the peak"
        );
        events.push(TraceEvent::ResetAccumulated);
        let fourth = answers.answer(3, &events);
        assert_eq!(stat(&fourth, "num_device_free"), 0);
        assert_eq!(stat(&fourth, "allocated_bytes.all.allocated"), 0);
        assert_eq!(
            stat(&fourth, "allocated_bytes.all.current"),
            4 * MIB as i64 + 1024
        );
        // The replay applies the release too: the file's last level is the script's.
        let replayed = replay(&events, 0, Backend::Native);
        assert_eq!(replayed.phases.len(), 2);
    }
}
