//! A streaming pickle machine for the opcodes `pickle.dump` writes for dictionaries, lists,
//! tuples, strings, numbers, booleans and None (protocols 2 to 5).
//!
//! Unlike an unpickler it does not build the object: every dictionary or list is given a role
//! when it opens, from where it sits (its parent's role and its key or index), by a [`Schema`]:
//! *streamed* (each item is handed to the schema as it is set, and the container itself only
//! keeps an accumulator), *built* (a small generic value, within a budget) or *skipped*. The
//! memo keeps a four-byte handle per memoized object: interned strings, the schema's interned
//! frames and stacks, interned tuples of scalars, and a small arena for the rest; a streamed
//! container is memoized as "skipped".
//!
//! Where a container sits follows from the stack, as Python's pickler writes it: after a MARK,
//! the items of the container below the mark; a container with one item (or the last item after
//! full batches of 1,000) is written as `item APPEND` or `key value SETITEM` without a MARK. A
//! list on top of the stack therefore takes a new container as its item only if the schema says
//! that kind can be one of its items (device traces are lists of lists, traces lists of dicts).
//!
//! Every count that grows with the input is bounded (stack, marks, memo, strings, generic
//! values), and every byte sequence ends in a value or an error naming the offset.

mod memo;
mod opcodes;
mod reader;
mod value;

use super::SnapshotError;
use memo::Memo;
pub(crate) use opcodes::describe_opcode;
use opcodes::long1;
use reader::Reader;
use rustc_hash::FxHashMap;
use std::io::{self, Read};
use std::ops::Deref;
use std::rc::Rc;
use value::cost;
pub(crate) use value::{Seq, Strings, Value, prefix};

/// Python's pickler writes list and dict items in batches of this many.
const BATCH: u64 = 1000;
const BUFFER: usize = 1 << 18;
/// Bounds on what grows with the input. Python's pickler never holds more than a few thousand
/// items on the stack for a snapshot (batches of 1,000 items, a nesting of about eight).
const MAX_STACK: usize = 1 << 16;
const MAX_MARKS: usize = 1 << 16;
const MAX_MEMO: usize = 1 << 27;
const MAX_SPARSE_MEMO: usize = 1 << 20;
const MAX_STRING_BYTES: u64 = 16 << 20;
const MAX_INTERNED_STRINGS: usize = 1 << 22;
const MAX_INTERNED_STRING_BYTES: usize = 64 << 20;
/// A string that is not interned keeps at most this many bytes (cut at a character boundary):
/// nothing the summary reads is longer, and a long one fetched again and again from the memo
/// would otherwise be scanned again and again.
pub(crate) const MAX_TEXT_BYTES: usize = 4096;
/// A tuple of more items is not kept (a snapshot's tuples are pool ids: two integers). With the
/// stack bound, this bounds what the stack holds: 65,536 slots of at most 64 values each.
pub(crate) const MAX_TUPLE_ITEMS: usize = 64;
/// Tuples of scalars up to this length are interned (one copy per distinct tuple).
const MAX_INTERNED_TUPLE: usize = 16;
const MAX_TUPLES: usize = 1 << 16;
const MAX_ARENA: usize = 1 << 16;
/// Values (container items, 24 bytes of text) that the memo keeps in all: every memoized
/// object is kept once and shared by each fetch (never copied), and all of them together
/// within this budget; past it a memoized object is not kept (fetching it gives nothing).
const MAX_MEMO_ITEMS: usize = 1 << 21;
const MAX_BUILT_ITEMS: u64 = 1 << 20;
const MAX_BUILT_DEPTH: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dict,
    List,
}

/// Where a container opens.
pub(crate) enum Place<'a> {
    /// The first container, with nothing below it.
    Root,
    /// The value of this key in a dictionary.
    Key(&'a Value),
    /// This item of a list.
    Index(u64),
}

/// What a container becomes.
pub(crate) enum Role<C> {
    Stream(C),
    Build,
    Skip,
}

/// The structure being read: which containers are streamed and what their items mean.
pub(crate) trait Schema {
    type Ctx: Copy;
    type Acc;
    /// The role of a container of `kind` that opens at `place` in a streamed container of
    /// context `parent` (`None`: the root).
    fn open(
        &mut self,
        parent: Option<Self::Ctx>,
        place: Place<'_>,
        kind: Kind,
        strings: &Strings,
    ) -> Role<Self::Ctx>;
    /// Whether a container of `kind` can be an item of the streamed list `parent`.
    fn accepts(&self, parent: Self::Ctx, kind: Kind) -> bool;
    fn acc(&mut self, ctx: Self::Ctx) -> Self::Acc;
    /// One item set into a streamed container (`key` is `None` for a list).
    fn item(
        &mut self,
        ctx: Self::Ctx,
        acc: &mut Self::Acc,
        key: Option<&Value>,
        value: &Value,
        strings: &Strings,
    );
    /// The streamed container is complete (consumed by its parent): what it stands for.
    fn close(&mut self, ctx: Self::Ctx, acc: Self::Acc, strings: &Strings) -> Value;
}

/// What the machine read, besides what the schema folded.
pub(crate) struct Run {
    pub(crate) protocol: u8,
    pub(crate) bytes_read: u64,
    pub(crate) strings: Strings,
    /// The type of the object the pickle holds.
    pub(crate) top: &'static str,
    /// Items of generic values dropped once their budget was spent.
    pub(crate) built_dropped: u64,
    /// Memoized objects not kept once the memo's budget was spent.
    pub(crate) memo_refused: u64,
    /// Tuples of more than `MAX_TUPLE_ITEMS` items, not kept.
    pub(crate) tuples_dropped: u64,
    /// Strings that were not interned and were cut to `MAX_TEXT_BYTES`.
    pub(crate) texts_cut: u64,
}

enum Body<C, A> {
    Stream(C, A),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Skip,
}

struct Open<C, A> {
    kind: Kind,
    items: u64,
    /// Nesting of built containers (1 for one the schema asked to build).
    depth: u8,
    memo: Option<u32>,
    memo_more: Vec<u32>,
    body: Body<C, A>,
}

enum Slot<C, A> {
    Val(Value),
    Open(Box<Open<C, A>>),
}

const TAG_SHIFT: u32 = 29;
const ID_MASK: u32 = (1 << TAG_SHIFT) - 1;
const TAG_STR: u32 = 1;
const TAG_FRAME: u32 = 2;
const TAG_STACK: u32 = 3;
const TAG_TUPLE: u32 = 4;
const TAG_ARENA: u32 = 5;
/// A container still open, at this position of the stack (see `Vm::close_early`).
const TAG_OPEN: u32 = 6;
/// A memo slot that holds an object not kept (streamed, skipped, over budget).
const NOT_KEPT: u32 = 0;

struct Vm<'s, R, S: Schema> {
    reader: Reader<R>,
    schema: &'s mut S,
    stack: Vec<Slot<S::Ctx, S::Acc>>,
    marks: Vec<usize>,
    memo: Memo,
    strings: Strings,
    protocol: u8,
    built_budget: u64,
    built_dropped: u64,
    tuples_dropped: u64,
    texts_cut: u64,
    pool: Pool<S::Ctx, S::Acc>,
}

/// Runs the machine over `input` until STOP, handing streamed items to `schema`.
pub(crate) fn run<R: Read, S: Schema>(input: R, schema: &mut S) -> Result<Run, SnapshotError> {
    let mut vm = Vm {
        reader: Reader::new(input),
        schema,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
        strings: Strings::default(),
        protocol: 0,
        built_budget: MAX_BUILT_ITEMS,
        built_dropped: 0,
        tuples_dropped: 0,
        texts_cut: 0,
        pool: Pool { spare: Vec::new() },
    };
    let top = vm.execute()?;
    Ok(Run {
        protocol: vm.protocol,
        bytes_read: vm.reader.offset(),
        top,
        built_dropped: vm.built_dropped,
        memo_refused: vm.memo.refused,
        tuples_dropped: vm.tuples_dropped,
        texts_cut: vm.texts_cut,
        strings: vm.strings,
    })
}

#[cold]
fn stack_too_deep(offset: u64) -> SnapshotError {
    SnapshotError::TooLarge {
        offset,
        message: format!("the pickle stack grows past {MAX_STACK} items"),
    }
}

#[cold]
fn malformed(offset: u64, message: impl Into<String>) -> SnapshotError {
    SnapshotError::Malformed {
        offset,
        message: message.into(),
    }
}

impl<R: Read, S: Schema> Vm<'_, R, S> {
    fn truncated(&self, what: &'static str) -> SnapshotError {
        SnapshotError::Truncated {
            offset: self.reader.offset(),
            what,
        }
    }

    fn need<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], SnapshotError> {
        match self.reader.take::<N>()? {
            Some(b) => Ok(b),
            None => Err(self.truncated(what)),
        }
    }

    /// Pushes a slot (the stack's bound is checked once per opcode, each pushing at most one).
    #[inline]
    fn push(&mut self, slot: Slot<S::Ctx, S::Acc>) {
        self.stack.push(slot);
    }

    fn pop(&mut self, offset: u64, op: &str) -> Result<Slot<S::Ctx, S::Acc>, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(malformed(offset, format!("{op} on an empty stack")));
        }
        self.stack
            .pop()
            .ok_or_else(|| malformed(offset, format!("{op} on an empty stack")))
    }

    fn pop_mark(&mut self, offset: u64, op: &str) -> Result<usize, SnapshotError> {
        self.marks
            .pop()
            .ok_or_else(|| malformed(offset, format!("{op} without a MARK")))
    }

    fn execute(&mut self) -> Result<&'static str, SnapshotError> {
        loop {
            let offset = self.reader.offset();
            if self.stack.len() >= MAX_STACK {
                return Err(stack_too_deep(offset));
            }
            let Some(op) = self.reader.byte()? else {
                return Err(self.truncated("the pickle (no STOP opcode)"));
            };
            match op {
                // PROTO
                0x80 => {
                    let [p] = self.need::<1>("PROTO")?;
                    if !(2..=5).contains(&p) {
                        return Err(SnapshotError::Protocol {
                            protocol: p,
                            offset,
                        });
                    }
                    self.protocol = p;
                }
                // FRAME: a length hint only.
                0x95 => {
                    self.need::<8>("FRAME")?;
                }
                b'}' => self.open(Kind::Dict),
                b']' => self.open(Kind::List),
                b')' => self.push(Slot::Val(Value::Tuple(Seq::of(Box::new([]))))),
                b'(' => {
                    if self.marks.len() >= MAX_MARKS {
                        return Err(SnapshotError::TooLarge {
                            offset,
                            message: format!("more than {MAX_MARKS} nested MARKs"),
                        });
                    }
                    self.marks.push(self.stack.len());
                }
                b's' => {
                    let start = self.single_start(2, offset, "SETITEM")?;
                    self.fill(start.checked_sub(1), Kind::Dict, start, offset, "SETITEM")?;
                }
                b'u' => {
                    let mark = self.pop_mark(offset, "SETITEMS")?;
                    if !(self.stack.len() - mark.min(self.stack.len())).is_multiple_of(2) {
                        return Err(malformed(offset, "SETITEMS with an odd number of items"));
                    }
                    let target = self.batch_target(mark);
                    self.fill(target, Kind::Dict, mark, offset, "SETITEMS")?;
                }
                b'a' => {
                    let start = self.single_start(1, offset, "APPEND")?;
                    self.fill(start.checked_sub(1), Kind::List, start, offset, "APPEND")?;
                }
                b'e' => {
                    let mark = self.pop_mark(offset, "APPENDS")?;
                    let target = self.batch_target(mark);
                    self.fill(target, Kind::List, mark, offset, "APPENDS")?;
                }
                // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
                0x8c => {
                    let [n] = self.need::<1>("SHORT_BINUNICODE")?;
                    self.string(u64::from(n), offset)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.need::<4>("BINUNICODE")?);
                    self.string(u64::from(n), offset)?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.need::<8>("BINUNICODE8")?);
                    self.string(n, offset)?;
                }
                // BININT, BININT1, BININT2, LONG1
                b'J' => {
                    let v = i32::from_le_bytes(self.need::<4>("BININT")?);
                    self.push(Slot::Val(Value::Int(i64::from(v))));
                }
                b'K' => {
                    let [v] = self.need::<1>("BININT1")?;
                    self.push(Slot::Val(Value::Int(i64::from(v))));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.need::<2>("BININT2")?);
                    self.push(Slot::Val(Value::Int(i64::from(v))));
                }
                0x8a => {
                    let [n] = self.need::<1>("LONG1")?;
                    let bytes = match self.reader.bytes(usize::from(n))? {
                        Some(b) => b,
                        None => return Err(self.truncated("LONG1")),
                    };
                    let value = long1(&bytes);
                    self.push(Slot::Val(value));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.need::<8>("BINFLOAT")?);
                    self.push(Slot::Val(Value::Float(v)));
                }
                b'N' => self.push(Slot::Val(Value::None)),
                0x88 => self.push(Slot::Val(Value::Bool(true))),
                0x89 => self.push(Slot::Val(Value::Bool(false))),
                // MEMOIZE, BINPUT, LONG_BINPUT
                0x94 => {
                    let index = self.memo.next_index();
                    self.memoize(index, offset)?;
                }
                b'q' => {
                    let [i] = self.need::<1>("BINPUT")?;
                    self.memoize(u32::from(i), offset)?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.need::<4>("LONG_BINPUT")?);
                    self.memoize(i, offset)?;
                }
                // BINGET, LONG_BINGET
                b'h' => {
                    let [i] = self.need::<1>("BINGET")?;
                    self.get(u32::from(i), offset)?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.need::<4>("LONG_BINGET")?);
                    self.get(i, offset)?;
                }
                // TUPLE1, TUPLE2, TUPLE3, TUPLE
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(malformed(offset, "TUPLE with too few items on the stack"));
                    }
                    let start = self.stack.len() - n;
                    self.tuple(start);
                }
                b't' => {
                    let mark = self.pop_mark(offset, "TUPLE")?;
                    self.tuple(mark);
                }
                b'.' => {
                    let top = self.pop(offset, "STOP")?;
                    let name = match &top {
                        Slot::Val(v) => v.type_name(),
                        Slot::Open(o) => match o.kind {
                            Kind::Dict => "dict",
                            Kind::List => "list",
                        },
                    };
                    self.value_of(top);
                    return Ok(name);
                }
                other => {
                    return Err(SnapshotError::Opcode {
                        opcode: other,
                        offset,
                    });
                }
            }
        }
    }

    /// Where the `n` items of SETITEM (2) or APPEND (1) start: the container they go into and
    /// the items must lie above the innermost mark.
    fn single_start(&self, n: usize, offset: u64, op: &str) -> Result<usize, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n + 1 {
            return Err(malformed(
                offset,
                format!("{op} with too few items on the stack"),
            ));
        }
        Ok(self.stack.len() - n)
    }

    /// The container that SETITEMS or APPENDS (whose mark was just popped) sets into.
    fn batch_target(&self, mark: usize) -> Option<usize> {
        let floor = self.marks.last().copied().unwrap_or(0);
        mark.checked_sub(1).filter(|&t| t >= floor)
    }

    fn string(&mut self, n: u64, offset: u64) -> Result<(), SnapshotError> {
        if n > MAX_STRING_BYTES {
            return Err(SnapshotError::TooLarge {
                offset,
                message: format!("a string of {n} bytes (at most {MAX_STRING_BYTES} are read)"),
            });
        }
        let value = {
            let Some(bytes) = self.reader.bytes(n as usize)? else {
                return Err(SnapshotError::Truncated {
                    offset,
                    what: "a string",
                });
            };
            let text = match std::str::from_utf8(&bytes) {
                Ok(t) => std::borrow::Cow::Borrowed(t),
                Err(_) => String::from_utf8_lossy(&bytes),
            };
            match self.strings.intern(&text) {
                Some(id) => Value::Str(id),
                None => {
                    let kept = prefix(&text, MAX_TEXT_BYTES);
                    self.texts_cut += u64::from(kept.len() < text.len());
                    Value::Text(kept.into())
                }
            }
        };
        self.push(Slot::Val(value));
        Ok(())
    }

    /// The slots from `start` to the top as a tuple (not kept past `MAX_TUPLE_ITEMS`).
    fn tuple(&mut self, start: usize) {
        let start = start.min(self.stack.len());
        let keep = self.stack.len() - start <= MAX_TUPLE_ITEMS;
        let Vm {
            stack,
            schema,
            memo,
            strings,
            pool,
            ..
        } = self;
        let schema = &mut **schema;
        let items = stack
            .drain(start..)
            .map(|slot| shallow(slot_value(slot, schema, memo, strings, pool)));
        let value = if keep {
            Value::Tuple(Seq::of(items.collect()))
        } else {
            // Each item is still completed (a container in it may be memoized).
            items.for_each(drop);
            self.tuples_dropped += 1;
            Value::Skipped
        };
        self.push(Slot::Val(value));
    }

    fn memoize(&mut self, index: u32, offset: u64) -> Result<(), SnapshotError> {
        let position = self.stack.len().saturating_sub(1) as u32;
        let handle = match self.stack.last_mut() {
            None => return Err(malformed(offset, "memoizing an empty stack")),
            Some(Slot::Open(open)) => {
                if open.memo.is_none() {
                    open.memo = Some(index);
                } else if open.memo_more.len() < 16 {
                    open.memo_more.push(index);
                }
                (TAG_OPEN << TAG_SHIFT) | (position & ID_MASK)
            }
            Some(Slot::Val(value)) => self.memo.keep(value),
        };
        self.memo
            .put(index, handle)
            .map_err(|message| SnapshotError::TooLarge {
                offset,
                message: message.into(),
            })
    }

    fn get(&mut self, index: u32, offset: u64) -> Result<(), SnapshotError> {
        let Some(handle) = self.memo.get(index) else {
            return Err(malformed(
                offset,
                format!("memo index {index} was never stored"),
            ));
        };
        let handle = match handle >> TAG_SHIFT {
            TAG_OPEN => self.close_early(index, (handle & ID_MASK) as usize),
            _ => handle,
        };
        let value = self.memo.value(handle);
        self.push(Slot::Val(value));
        Ok(())
    }

    /// A streamed container fetched from the memo while it is still on the stack, waiting for
    /// its parent: `pickle.dump` refers to a container only once it is written whole (PyTorch
    /// shares a segment's frame list with the block allocated with it, and the segment's comes
    /// first), so it is closed here, in place, and the fetch gets what it stands for. One still
    /// being filled (a mark above it) stays open: its fetch gets nothing, as before.
    fn close_early(&mut self, index: u32, position: usize) -> u32 {
        let complete = !self.marks.contains(&(position + 1));
        match self.stack.get(position) {
            Some(Slot::Open(open))
                if complete
                    && matches!(open.body, Body::Stream(..))
                    && (open.memo == Some(index) || open.memo_more.contains(&index)) => {}
            _ => return NOT_KEPT,
        }
        let slot = std::mem::replace(&mut self.stack[position], Slot::Val(Value::Skipped));
        let value = self.value_of(slot);
        self.stack[position] = Slot::Val(value);
        self.memo.get(index).unwrap_or(NOT_KEPT)
    }

    /// Opens a container, its role decided from where it sits.
    fn open(&mut self, kind: Kind) {
        let (body, depth) = {
            let stack = &self.stack;
            let schema = &mut *self.schema;
            let located = locate(stack, &self.marks, |ctx| schema.accepts(ctx, kind));
            match located {
                Located::Root => {
                    let role = schema.open(None, Place::Root, kind, &self.strings);
                    (role_body(role, kind, schema), 1)
                }
                Located::Orphan => (Body::Skip, 0),
                Located::In(parent, place) => match &stack[parent] {
                    Slot::Open(p) => match &p.body {
                        Body::Stream(ctx, _) => {
                            let role = schema.open(Some(*ctx), place, kind, &self.strings);
                            (role_body(role, kind, schema), 1)
                        }
                        // Built values stay shallow: nothing reads deep ones, and a deep one
                        // would cost a deep recursion to drop.
                        Body::List(_) | Body::Dict(_)
                            if self.built_budget > 0 && p.depth < MAX_BUILT_DEPTH =>
                        {
                            (role_body(Role::Build, kind, schema), p.depth + 1)
                        }
                        _ => (Body::Skip, 0),
                    },
                    Slot::Val(_) => (Body::Skip, 0),
                },
            }
        };
        let open = self.pool.boxed(Open {
            kind,
            items: 0,
            depth,
            memo: None,
            memo_more: Vec::new(),
            body,
        });
        self.push(Slot::Open(open));
    }

    /// A slot as a value: a container is complete when its parent consumes it.
    #[inline]
    fn value_of(&mut self, slot: Slot<S::Ctx, S::Acc>) -> Value {
        slot_value(
            slot,
            &mut *self.schema,
            &mut self.memo,
            &self.strings,
            &mut self.pool,
        )
    }

    /// Sets the slots from `start` to the top (pairs for a dict) into the container at
    /// `target`, then cuts the stack at `start`.
    fn fill(
        &mut self,
        target: Option<usize>,
        kind: Kind,
        start: usize,
        offset: u64,
        op: &str,
    ) -> Result<(), SnapshotError> {
        let end = self.stack.len();
        let Some(target) = target.filter(|&t| t < start && start <= end) else {
            return Err(malformed(offset, format!("{op} with no container below")));
        };
        let mut open = match std::mem::replace(&mut self.stack[target], Slot::Val(Value::Skipped)) {
            Slot::Open(open) if open.kind == kind => open,
            other => {
                let what = match &other {
                    Slot::Open(o) if o.kind == Kind::Dict => "a dict",
                    Slot::Open(_) => "a list",
                    Slot::Val(v) => v.type_name(),
                };
                self.stack[target] = other;
                return Err(malformed(
                    offset,
                    format!(
                        "{op} on {what}, not a {} being built",
                        match kind {
                            Kind::Dict => "dict",
                            Kind::List => "list",
                        }
                    ),
                ));
            }
        };
        let Vm {
            stack,
            schema,
            memo,
            strings,
            built_budget,
            built_dropped,
            pool,
            ..
        } = self;
        let schema = &mut **schema;
        let mut items = stack.drain(start..);
        loop {
            let key = match kind {
                Kind::List => None,
                Kind::Dict => match items.next() {
                    Some(slot) => Some(slot_value(slot, schema, memo, strings, pool)),
                    None => break,
                },
            };
            let Some(slot) = items.next() else {
                break;
            };
            let value = slot_value(slot, schema, memo, strings, pool);
            open.items += 1;
            match &mut open.body {
                Body::Stream(ctx, acc) => schema.item(*ctx, acc, key.as_ref(), &value, strings),
                Body::List(list) => {
                    if *built_budget > 0 {
                        *built_budget -= 1;
                        list.push(value);
                    } else {
                        *built_dropped += 1;
                    }
                }
                Body::Dict(dict) => {
                    if *built_budget > 0 {
                        *built_budget -= 1;
                        dict.push((key.unwrap_or(Value::Skipped), value));
                    } else {
                        *built_dropped += 1;
                    }
                }
                Body::Skip => {}
            }
        }
        drop(items);
        stack[target] = Slot::Open(open);
        Ok(())
    }
}

/// A slot as a value (see `Vm::value_of`), over the machine's fields so that it can run while
/// the stack is drained.
#[inline]
fn slot_value<S: Schema>(
    slot: Slot<S::Ctx, S::Acc>,
    schema: &mut S,
    memo: &mut Memo,
    strings: &Strings,
    pool: &mut Pool<S::Ctx, S::Acc>,
) -> Value {
    match slot {
        Slot::Val(v) => v,
        Slot::Open(open) => finish(open, schema, memo, strings, pool),
    }
}

/// Spare container boxes (a container opens and closes per trace entry and per frame list).
struct Pool<C, A> {
    spare: Vec<Box<Open<C, A>>>,
}

impl<C, A> Pool<C, A> {
    fn boxed(&mut self, open: Open<C, A>) -> Box<Open<C, A>> {
        match self.spare.pop() {
            Some(mut b) => {
                *b = open;
                b
            }
            None => Box::new(open),
        }
    }

    fn recycle(&mut self, open: Box<Open<C, A>>) {
        if self.spare.len() < 256 {
            self.spare.push(open);
        }
    }
}

/// A container is complete: what it stands for, written into its memo slots.
#[inline(never)]
fn finish<S: Schema>(
    mut open: Box<Open<S::Ctx, S::Acc>>,
    schema: &mut S,
    memo: &mut Memo,
    strings: &Strings,
    pool: &mut Pool<S::Ctx, S::Acc>,
) -> Value {
    let body = std::mem::replace(&mut open.body, Body::Skip);
    let index = open.memo.take();
    let memo_more = std::mem::take(&mut open.memo_more);
    pool.recycle(open);
    let value = match body {
        Body::Stream(ctx, acc) => schema.close(ctx, acc, strings),
        Body::List(items) => Value::List(Seq::of(items.into_boxed_slice())),
        Body::Dict(items) => Value::Dict(Seq::of_pairs(items.into_boxed_slice())),
        Body::Skip => Value::Skipped,
    };
    if index.is_some() {
        let handle = match value {
            Value::Folded(_) | Value::Skipped => NOT_KEPT,
            _ => memo.keep(&value),
        };
        for i in index.into_iter().chain(memo_more) {
            // The slot exists (it was put when memoized), so this cannot fail.
            let _ = memo.put(i, handle);
        }
    }
    value
}

fn role_body<S: Schema>(role: Role<S::Ctx>, kind: Kind, schema: &mut S) -> Body<S::Ctx, S::Acc> {
    match role {
        Role::Stream(ctx) => Body::Stream(ctx, schema.acc(ctx)),
        Role::Build => match kind {
            Kind::List => Body::List(Vec::new()),
            Kind::Dict => Body::Dict(Vec::new()),
        },
        Role::Skip => Body::Skip,
    }
}

enum Located<'a> {
    Root,
    Orphan,
    In(usize, Place<'a>),
}

/// Where a container that opens now sits: the container that will receive it, and its key or
/// index there.
fn locate<'a, C: Copy, A>(
    stack: &'a [Slot<C, A>],
    marks: &[usize],
    accepts: impl Fn(C) -> bool,
) -> Located<'a> {
    let top = stack.len();
    let mark = marks.last().copied();
    let floor = mark.unwrap_or(0);
    // `item APPEND`: a list on top of the stack, above the innermost mark, that can take it.
    if top > floor
        && let Slot::Open(c) = &stack[top - 1]
        && c.kind == Kind::List
        && c.items.is_multiple_of(BATCH)
        && match &c.body {
            Body::Stream(ctx, _) => accepts(*ctx),
            _ => true,
        }
    {
        return Located::In(top - 1, Place::Index(c.items));
    }
    // `key value SETITEM`: a dict below a key, above the innermost mark.
    if top >= floor + 2
        && let (Slot::Open(c), Slot::Val(key)) = (&stack[top - 2], &stack[top - 1])
        && c.kind == Kind::Dict
        && c.items.is_multiple_of(BATCH)
    {
        return Located::In(top - 2, Place::Key(key));
    }
    // A batch after a MARK: the container below the mark.
    if let Some(m) = mark
        && m >= 1
        && m <= top
        && let Slot::Open(c) = &stack[m - 1]
    {
        let n = (top - m) as u64;
        return match c.kind {
            Kind::List => Located::In(m - 1, Place::Index(c.items.saturating_add(n))),
            Kind::Dict if n % 2 == 1 => match &stack[top - 1] {
                Slot::Val(key) => Located::In(m - 1, Place::Key(key)),
                Slot::Open(_) => Located::Orphan,
            },
            // A container as a dict key: never in a snapshot.
            Kind::Dict => Located::Orphan,
        };
    }
    if top == 0 && marks.is_empty() {
        Located::Root
    } else {
        Located::Orphan
    }
}

/// A value with no container inside.
fn is_flat(value: &Value) -> bool {
    !matches!(value, Value::Tuple(_) | Value::List(_) | Value::Dict(_))
}

/// A tuple's element: a container is kept only if it is flat (tuples in a snapshot hold
/// numbers; this keeps TUPLE1 repeated a million times from nesting a million levels).
fn shallow(value: Value) -> Value {
    match &value {
        Value::Tuple(items) | Value::List(items) if !items.flat => Value::Skipped,
        Value::Dict(items) if !items.flat => Value::Skipped,
        _ => value,
    }
}
