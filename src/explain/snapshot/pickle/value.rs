//! The values the machine keeps: scalars, interned strings and small built containers.

use super::*;

/// A value on the machine's stack.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer in [2^63, 2^64).
    UInt(u64),
    /// An integer outside the 64-bit range (its value is not kept).
    BigInt,
    Float(f64),
    /// An interned string.
    Str(u32),
    /// A string that was not interned (the interner's budget was spent), at most
    /// `MAX_TEXT_BYTES`.
    Text(Rc<str>),
    /// Containers are shared, never copied: a memoized one fetched a thousand times is one
    /// allocation referenced a thousand times.
    Tuple(Rc<Seq<Value>>),
    /// Built (generic) containers.
    List(Rc<Seq<Value>>),
    Dict(Rc<Seq<(Value, Value)>>),
    /// The schema's interned frame and stack.
    Frame(u32),
    Stack(u32),
    /// A streamed container's result, handed to the parent that consumes it.
    Folded(u32),
    /// A skipped or streamed container, or a memoized object that was not kept.
    Skipped,
}

impl Value {
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    pub(crate) fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(i) => u64::try_from(i).ok(),
            Value::UInt(u) => Some(u),
            Value::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            Value::Int(i) => Some(i != 0),
            _ => None,
        }
    }

    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::UInt(_) | Value::BigInt => "int",
            Value::Float(_) => "float",
            Value::Str(_) | Value::Text(_) => "str",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Frame(_) | Value::Stack(_) | Value::Folded(_) | Value::Skipped => "container",
        }
    }
}

/// The items of a container, with whether any of them is a container itself (known once, so
/// that a container fetched again is never scanned again).
#[derive(Debug)]
pub(crate) struct Seq<T> {
    pub(super) items: Box<[T]>,
    pub(super) flat: bool,
}

impl Seq<Value> {
    pub(super) fn of(items: Box<[Value]>) -> Rc<Self> {
        let flat = items.iter().all(is_flat);
        Rc::new(Seq { items, flat })
    }
}

impl Seq<(Value, Value)> {
    pub(super) fn of_pairs(items: Box<[(Value, Value)]>) -> Rc<Self> {
        let flat = items.iter().all(|(k, v)| is_flat(k) && is_flat(v));
        Rc::new(Seq { items, flat })
    }
}

impl<T> Deref for Seq<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

/// What keeping `value` costs, in values (24 bytes): its items for a container (shared ones are
/// counted where they were made), its length for a text.
pub(super) fn cost(value: &Value) -> usize {
    match value {
        Value::Tuple(items) | Value::List(items) => 1 + items.len(),
        Value::Dict(items) => 1 + 2 * items.len(),
        Value::Text(t) => 1 + t.len() / 24,
        _ => 1,
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(crate) fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Interned strings, within a budget; ids are dense from 0. Each string is stored once, shared
/// by the list and the map.
#[derive(Default)]
pub(crate) struct Strings {
    map: FxHashMap<Rc<str>, u32>,
    list: Vec<Rc<str>>,
    bytes: usize,
    /// Strings that were not interned because the budget was spent.
    pub(crate) refused: u64,
}

impl Strings {
    pub(crate) fn intern(&mut self, s: &str) -> Option<u32> {
        if let Some(&id) = self.map.get(s) {
            return Some(id);
        }
        if self.list.len() >= MAX_INTERNED_STRINGS
            || self.bytes.saturating_add(s.len()) > MAX_INTERNED_STRING_BYTES
        {
            self.refused += 1;
            return None;
        }
        let id = self.list.len() as u32;
        let shared: Rc<str> = s.into();
        self.bytes += s.len();
        self.list.push(shared.clone());
        self.map.insert(shared, id);
        Some(id)
    }

    pub(crate) fn get(&self, id: u32) -> &str {
        self.list.get(id as usize).map_or("", |s| s)
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// The text of a string value (interned or not).
    pub(crate) fn text<'a>(&'a self, value: &'a Value) -> Option<&'a str> {
        match value {
            Value::Str(id) => Some(self.get(*id)),
            Value::Text(t) => Some(t),
            _ => None,
        }
    }
}
