//! The summary as JSON: each frame once, in the summary's `frames`, and the allocations' frames
//! as positions in it. While a summary is written (read), its table is installed for the thread
//! and the allocations' fields look their frames up there; an allocation written outside a
//! summary (`explain`'s ledger) has its frames inline, and inline frames are always read (results
//! written before the table).

use super::Frame;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

thread_local! {
    static WRITING: RefCell<Option<Index>> = const { RefCell::new(None) };
    static READING: RefCell<Option<Vec<Frame>>> = const { RefCell::new(None) };
}

/// A frame's identity: its shared strings (the summary makes each frame once and every
/// allocation shares it), so that finding it costs no hashing of its text.
pub(super) type Key = (usize, i64, usize);

pub(super) fn key(frame: &Frame) -> Key {
    (
        Arc::as_ptr(&frame.filename) as *const u8 as usize,
        frame.line,
        Arc::as_ptr(&frame.name) as *const u8 as usize,
    )
}

/// The positions of the table's frames: by identity, and by value for a frame that is equal to
/// one of the table but not shared with it (made once, on the first such frame).
struct Index {
    frames: Vec<Frame>,
    by_key: HashMap<Key, u32>,
    by_value: Option<HashMap<Frame, u32>>,
}

impl Index {
    fn position(&mut self, frame: &Frame) -> Option<u32> {
        if let Some(&i) = self.by_key.get(&key(frame)) {
            return Some(i);
        }
        let frames = &self.frames;
        let by_value = self.by_value.get_or_insert_with(|| {
            let mut map = HashMap::new();
            for (i, f) in frames.iter().enumerate().take(u32::MAX as usize) {
                map.entry(f.clone()).or_insert(i as u32);
            }
            map
        });
        by_value.get(frame).copied()
    }
}

/// Puts back what the thread had before (also on a panic).
struct Restore<T: 'static> {
    key: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    previous: Option<Option<T>>,
}

impl<T: 'static> Drop for Restore<T> {
    fn drop(&mut self) {
        let previous = self.previous.take().flatten();
        let _ = self.key.try_with(|cell| *cell.borrow_mut() = previous);
    }
}

fn install<T: 'static>(
    key: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    value: T,
) -> Restore<T> {
    let previous = key.with(|cell| cell.borrow_mut().replace(value));
    Restore {
        key,
        previous: Some(previous),
    }
}

/// Runs `write` with `frames` as the table the allocations' frames are written against.
pub(super) fn writing<R>(frames: &[Frame], write: impl FnOnce() -> R) -> R {
    let mut by_key = HashMap::new();
    for (i, f) in frames.iter().enumerate().take(u32::MAX as usize) {
        by_key.entry(key(f)).or_insert(i as u32);
    }
    let index = Index {
        frames: frames.to_vec(),
        by_key,
        by_value: None,
    };
    let _restore = install(&WRITING, index);
    write()
}

/// Runs `read` with `frames` as the table the allocations' positions are read against.
pub(super) fn reading<R>(frames: Vec<Frame>, read: impl FnOnce() -> R) -> R {
    let _restore = install(&READING, frames);
    read()
}

/// A frame as written: its position in the installed table, or the frame itself.
struct Ref<'a>(&'a Frame);

impl Serialize for Ref<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let id = WRITING.with(|t| t.borrow_mut().as_mut().and_then(|m| m.position(self.0)));
        match id {
            Some(id) => serializer.serialize_u32(id),
            None => self.0.serialize(serializer),
        }
    }
}

/// A frame as read: a position, or the frame itself.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Id(u64),
    Inline(Frame),
}

impl Stored {
    fn resolve<E: serde::de::Error>(self) -> Result<Frame, E> {
        match self {
            Stored::Inline(frame) => Ok(frame),
            Stored::Id(id) => READING
                .with(|t| {
                    t.borrow()
                        .as_ref()
                        .and_then(|table| table.get(usize::try_from(id).ok()?).cloned())
                })
                .ok_or_else(|| E::custom(format!("frame {id} is not in the summary's frames"))),
        }
    }
}

/// `Option<Frame>` as a position in the table.
pub(super) mod frame_option {
    use super::*;

    pub fn serialize<S: Serializer>(frame: &Option<Frame>, s: S) -> Result<S::Ok, S::Error> {
        match frame {
            Some(f) => s.serialize_some(&Ref(f)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Frame>, D::Error> {
        Option::<Stored>::deserialize(d)?
            .map(Stored::resolve)
            .transpose()
    }
}

/// `Vec<Frame>` as positions in the table.
pub(super) mod frame_list {
    use super::*;

    pub fn serialize<S: Serializer>(frames: &[Frame], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(frames.iter().map(Ref))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Frame>, D::Error> {
        Vec::<Stored>::deserialize(d)?
            .into_iter()
            .map(Stored::resolve)
            .collect()
    }
}

/// A shared string, as a JSON string.
pub(super) mod text {
    use super::*;

    pub fn serialize<S: Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}

/// An optional shared string.
pub(super) mod text_option {
    use super::*;

    pub fn serialize<S: Serializer>(text: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
        match text {
            Some(t) => s.serialize_some(&**t),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(Arc::from))
    }
}
