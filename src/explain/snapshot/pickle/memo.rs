//! The memo: a four-byte handle per memoized object, within the reader's budgets.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Scalar {
    None,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Str(u32),
}

impl Scalar {
    pub(super) fn of(value: &Value) -> Option<Scalar> {
        Some(match *value {
            Value::None => Scalar::None,
            Value::Bool(b) => Scalar::Bool(b),
            Value::Int(i) => Scalar::Int(i),
            Value::UInt(u) => Scalar::UInt(u),
            Value::Str(s) => Scalar::Str(s),
            _ => return None,
        })
    }
}

/// Memo handles are kept in chunks of this many (no reallocation as the memo grows).
pub(super) const MEMO_CHUNK: usize = 1 << 16;

/// The memo: dense handles for the indices Python's pickler uses (0, 1, 2, …), in chunks, and a
/// bounded map for any other. What a handle stands for is kept once and shared by every fetch.
#[derive(Default)]
pub(super) struct Memo {
    pub(super) chunks: Vec<Box<[u32]>>,
    pub(super) dense_len: usize,
    pub(super) sparse: FxHashMap<u32, u32>,
    pub(super) tuples: FxHashMap<Box<[Scalar]>, u32>,
    pub(super) tuple_list: Vec<Rc<Seq<Value>>>,
    pub(super) arena: Vec<Value>,
    /// What the kept tuples and arena values cost in all (see `MAX_MEMO_ITEMS`).
    pub(super) kept: usize,
    /// Memoized objects not kept because a bound was reached.
    pub(super) refused: u64,
}

impl Memo {
    pub(super) fn next_index(&self) -> u32 {
        (self.dense_len + self.sparse.len()).min(u32::MAX as usize) as u32
    }

    pub(super) fn put(&mut self, index: u32, handle: u32) -> Result<(), &'static str> {
        let i = index as usize;
        if i < self.dense_len {
            self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK] = handle;
        } else if i == self.dense_len && !self.sparse.contains_key(&index) {
            if self.dense_len >= MAX_MEMO {
                return Err("more memoized objects than a memory snapshot holds");
            }
            if i.is_multiple_of(MEMO_CHUNK) {
                self.chunks.push(vec![0u32; MEMO_CHUNK].into_boxed_slice());
            }
            self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK] = handle;
            self.dense_len += 1;
        } else {
            if self.sparse.len() >= MAX_SPARSE_MEMO && !self.sparse.contains_key(&index) {
                return Err("too many memo indices out of sequence");
            }
            self.sparse.insert(index, handle);
        }
        Ok(())
    }

    #[inline]
    pub(super) fn get(&self, index: u32) -> Option<u32> {
        let i = index as usize;
        if i < self.dense_len {
            return Some(self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK]);
        }
        self.sparse.get(&index).copied()
    }

    /// Whether `cost` more fits the memo's budget (counted when it does).
    pub(super) fn afford(&mut self, cost: usize) -> bool {
        if self.kept.saturating_add(cost) > MAX_MEMO_ITEMS {
            self.refused += 1;
            return false;
        }
        self.kept += cost;
        true
    }

    /// The handle under which `value` is kept.
    pub(super) fn keep(&mut self, value: &Value) -> u32 {
        match value {
            Value::Str(id) if *id <= ID_MASK => (TAG_STR << TAG_SHIFT) | id,
            Value::Frame(id) if *id <= ID_MASK => (TAG_FRAME << TAG_SHIFT) | id,
            Value::Stack(id) if *id <= ID_MASK => (TAG_STACK << TAG_SHIFT) | id,
            Value::Tuple(items) if items.len() <= MAX_INTERNED_TUPLE => {
                let scalars: Option<Box<[Scalar]>> = items.iter().map(Scalar::of).collect();
                match scalars {
                    Some(key) => {
                        if let Some(&id) = self.tuples.get(&key) {
                            return (TAG_TUPLE << TAG_SHIFT) | id;
                        }
                        if self.tuple_list.len() >= MAX_TUPLES {
                            self.refused += 1;
                            return NOT_KEPT;
                        }
                        // The key and the shared tuple.
                        if !self.afford(2 * cost(value)) {
                            return NOT_KEPT;
                        }
                        let id = self.tuple_list.len() as u32;
                        self.tuple_list.push(items.clone());
                        self.tuples.insert(key, id);
                        (TAG_TUPLE << TAG_SHIFT) | id
                    }
                    None => self.keep_in_arena(value),
                }
            }
            Value::Tuple(_)
            | Value::None
            | Value::Bool(_)
            | Value::Int(_)
            | Value::UInt(_)
            | Value::BigInt
            | Value::Float(_) => self.keep_in_arena(value),
            // A memoized container can be fetched into another one again and again: only flat
            // ones are kept, so that no chain of fetches builds a deep value.
            Value::List(items) if items.flat => self.keep_in_arena(value),
            Value::Dict(items) if items.flat => self.keep_in_arena(value),
            _ => NOT_KEPT,
        }
    }

    pub(super) fn keep_in_arena(&mut self, value: &Value) -> u32 {
        if self.arena.len() >= MAX_ARENA {
            self.refused += 1;
            return NOT_KEPT;
        }
        // A container is shared, not copied: its cost is counted once, here.
        if !self.afford(cost(value)) {
            return NOT_KEPT;
        }
        self.arena.push(value.clone());
        (TAG_ARENA << TAG_SHIFT) | (self.arena.len() as u32 - 1)
    }

    /// What a handle stands for: a shared reference, never a copy (a fetch costs the same
    /// whatever the size of the value).
    #[inline]
    pub(super) fn value(&self, handle: u32) -> Value {
        let id = handle & ID_MASK;
        match handle >> TAG_SHIFT {
            TAG_STR => Value::Str(id),
            TAG_FRAME => Value::Frame(id),
            TAG_STACK => Value::Stack(id),
            TAG_TUPLE => match self.tuple_list.get(id as usize) {
                Some(items) => Value::Tuple(items.clone()),
                None => Value::Skipped,
            },
            TAG_ARENA => self
                .arena
                .get(id as usize)
                .cloned()
                .unwrap_or(Value::Skipped),
            _ => Value::Skipped,
        }
    }
}
