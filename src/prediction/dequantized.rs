//! The dequantized weights the replay saw: bitsandbytes' 4-bit forward dequantizes each weight
//! to the compute dtype for its matmul (`dequantize_4bit`), and the worker tags those storages
//! `dequantized weight`. The estimate *assumes* one such weight at a time; a prediction that saw
//! them says how large the largest was and how many there were, so the fiche calls the term
//! predicted.

use crate::prediction::replay::TraceEvent;
use crate::schema::prediction::DequantizedSeen;
use crate::schema::trace::Category;
use std::collections::HashMap;

/// The dequantized weights among `events`; `None` when the worker tagged none.
pub fn seen(events: &[TraceEvent]) -> Option<DequantizedSeen> {
    let mut bytes: HashMap<u64, u64> = HashMap::new();
    let mut found = DequantizedSeen {
        largest_bytes: 0,
        count: 0,
    };
    for e in events {
        match e {
            TraceEvent::Alloc(a) => {
                bytes.insert(a.id, a.bytes);
                if a.category == Category::DequantizedWeight {
                    found.count += 1;
                    found.largest_bytes = found.largest_bytes.max(a.bytes);
                }
            }
            TraceEvent::Tag(id, Category::DequantizedWeight) => {
                if let Some(b) = bytes.remove(id) {
                    found.count += 1;
                    found.largest_bytes = found.largest_bytes.max(b);
                }
            }
            _ => {}
        }
    }
    (found.count > 0).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prediction::replay::tests::alloc as made;

    fn alloc(id: u64, bytes: u64) -> TraceEvent {
        made(id, bytes, Category::Temporary, "m")
    }

    /// Each storage tagged once counts once; the largest is kept; none tagged is `None`.
    #[test]
    fn the_largest_tagged_storage_and_their_count() {
        let events = vec![
            alloc(1, 4096),
            alloc(2, 65536),
            alloc(3, 1 << 20),
            TraceEvent::Tag(1, Category::DequantizedWeight),
            TraceEvent::Tag(2, Category::DequantizedWeight),
            TraceEvent::Tag(2, Category::DequantizedWeight),
            TraceEvent::Tag(3, Category::Activation),
        ];
        let s = seen(&events).unwrap();
        assert_eq!((s.largest_bytes, s.count), (65536, 2));
        assert_eq!(seen(&events[..3]), None);
    }
}
