//! A small pickle writer that follows CPython's pickler (protocols 2 to 5: the same opcodes,
//! memo rules, 1,000-item batches and, from protocol 4, 64 KiB frames), for the tests and for
//! the benchmark's synthetic snapshots. Not used to read anything.
//!
//! Two levels: [`Pickler`]'s opcode methods, for a generator that streams a huge snapshot and
//! chooses what it shares through the memo; and [`Pickler::dump`] of a [`Py`] tree, whose `Rc`
//! identity plays the part of Python's `id()` (an `Rc` met twice is written once, then fetched
//! from the memo, as `pickle.dump` does for an object referenced twice).

use std::collections::HashMap;
use std::io::{self, Write};
use std::rc::Rc;

const FRAME_TARGET: usize = 64 * 1024;
const BATCH: usize = 1000;

/// A Python value to pickle. `Rc`s shared in the tree are shared in the pickle.
#[derive(Clone, Debug)]
pub enum Py {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Rc<str>),
    Tuple(Rc<Vec<Py>>),
    List(Rc<Vec<Py>>),
    Dict(Rc<Vec<(Py, Py)>>),
}

impl Py {
    /// A new string object (not shared with any other).
    pub fn str(s: &str) -> Py {
        Py::Str(Rc::from(s))
    }
    pub fn list(items: Vec<Py>) -> Py {
        Py::List(Rc::new(items))
    }
    pub fn dict(items: Vec<(Py, Py)>) -> Py {
        Py::Dict(Rc::new(items))
    }
    pub fn tuple(items: Vec<Py>) -> Py {
        Py::Tuple(Rc::new(items))
    }
    pub fn int(v: impl Into<i128>) -> Py {
        Py::Int(v.into())
    }

    fn identity(&self) -> Option<usize> {
        match self {
            Py::Str(s) => Some(Rc::as_ptr(s) as *const u8 as usize),
            Py::Tuple(t) if !t.is_empty() => Some(Rc::as_ptr(t) as usize),
            Py::List(l) => Some(Rc::as_ptr(l) as usize),
            Py::Dict(d) => Some(Rc::as_ptr(d) as usize),
            _ => None,
        }
    }
}

/// Writes pickle opcodes to `out`.
pub struct Pickler<W: Write> {
    out: W,
    protocol: u8,
    frame: Vec<u8>,
    memo_len: u32,
    memo: HashMap<usize, u32>,
}

impl<W: Write> Pickler<W> {
    /// Starts a pickle: writes PROTO.
    pub fn new(mut out: W, protocol: u8) -> io::Result<Self> {
        assert!((2..=5).contains(&protocol), "protocols 2 to 5");
        out.write_all(&[0x80, protocol])?;
        Ok(Pickler {
            out,
            protocol,
            frame: Vec::with_capacity(FRAME_TARGET * 2),
            memo_len: 0,
            memo: HashMap::new(),
        })
    }

    /// Ends the current frame if it is large enough (call between objects, as CPython does).
    pub fn boundary(&mut self) -> io::Result<()> {
        if self.frame.len() >= FRAME_TARGET {
            self.commit()?;
        }
        Ok(())
    }

    fn commit(&mut self) -> io::Result<()> {
        if self.frame.is_empty() {
            return Ok(());
        }
        if self.protocol >= 4 && self.frame.len() >= 4 {
            let mut header = [0u8; 9];
            header[0] = 0x95;
            header[1..].copy_from_slice(&(self.frame.len() as u64).to_le_bytes());
            self.out.write_all(&header)?;
        }
        self.out.write_all(&self.frame)?;
        self.frame.clear();
        Ok(())
    }

    fn op(&mut self, bytes: &[u8]) {
        self.frame.extend_from_slice(bytes);
    }

    /// Memoizes the top of the stack; returns its memo index.
    pub fn memoize(&mut self) -> u32 {
        let index = self.memo_len;
        self.memo_len += 1;
        if self.protocol >= 4 {
            self.op(&[0x94]);
        } else if index < 256 {
            self.op(&[b'q', index as u8]);
        } else {
            self.op(b"r");
            self.op(&index.to_le_bytes());
        }
        index
    }

    /// Pushes a memoized object (BINGET / LONG_BINGET).
    pub fn get(&mut self, index: u32) {
        if index < 256 {
            self.op(&[b'h', index as u8]);
        } else {
            self.op(b"j");
            self.op(&index.to_le_bytes());
        }
    }

    /// A new string, memoized; returns its memo index.
    pub fn str(&mut self, s: &str) -> u32 {
        let n = s.len();
        if n < 256 && self.protocol >= 4 {
            self.op(&[0x8c, n as u8]);
        } else if n as u64 > u64::from(u32::MAX) && self.protocol >= 4 {
            self.op(&[0x8d]);
            self.op(&(n as u64).to_le_bytes());
        } else {
            self.op(b"X");
            self.op(&(n as u32).to_le_bytes());
        }
        self.op(s.as_bytes());
        self.memoize()
    }

    pub fn int(&mut self, v: i128) {
        if (0..256).contains(&v) {
            self.op(&[b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.op(b"M");
            self.op(&(v as u16).to_le_bytes());
        } else if (-(1i128 << 31)..(1i128 << 31)).contains(&v) {
            self.op(b"J");
            self.op(&(v as i32).to_le_bytes());
        } else {
            let bytes = encode_long(v);
            self.op(&[0x8a, bytes.len() as u8]);
            self.op(&bytes);
        }
    }

    pub fn float(&mut self, v: f64) {
        self.op(b"G");
        self.op(&v.to_be_bytes());
    }

    pub fn none(&mut self) {
        self.op(b"N");
    }

    pub fn bool(&mut self, b: bool) {
        self.op(&[if b { 0x88 } else { 0x89 }]);
    }

    /// EMPTY_DICT, memoized.
    pub fn empty_dict(&mut self) -> u32 {
        self.op(b"}");
        self.memoize()
    }

    /// EMPTY_LIST, memoized.
    pub fn empty_list(&mut self) -> u32 {
        self.op(b"]");
        self.memoize()
    }

    pub fn mark(&mut self) {
        self.op(b"(");
    }
    pub fn setitem(&mut self) {
        self.op(b"s");
    }
    pub fn setitems(&mut self) {
        self.op(b"u");
    }
    pub fn append(&mut self) {
        self.op(b"a");
    }
    pub fn appends(&mut self) {
        self.op(b"e");
    }

    /// TUPLE1..3 of the `n` values on top of the stack, memoized.
    pub fn tuple(&mut self, n: usize) -> u32 {
        assert!((1..=3).contains(&n), "TUPLE1 to TUPLE3");
        self.op(&[0x84 + n as u8]);
        self.memoize()
    }

    /// Pickles `value` as `pickle.dump` would (sharing what the tree shares).
    pub fn dump(&mut self, value: &Py) -> io::Result<()> {
        // CPython commits a frame at the start of each object it saves.
        self.boundary()?;
        if let Some(id) = value.identity()
            && let Some(&index) = self.memo.get(&id)
        {
            self.get(index);
            return Ok(());
        }
        match value {
            Py::None => self.none(),
            Py::Bool(b) => self.bool(*b),
            Py::Int(v) => self.int(*v),
            Py::Float(f) => self.float(*f),
            Py::Str(s) => {
                let index = self.str(s);
                self.remember(value, index);
            }
            Py::Tuple(items) => {
                if items.is_empty() {
                    self.op(b")");
                } else {
                    if items.len() > 3 {
                        self.mark();
                    }
                    for item in items.iter() {
                        self.dump(item)?;
                    }
                    let index = if items.len() > 3 {
                        self.op(b"t");
                        self.memoize()
                    } else {
                        self.tuple(items.len())
                    };
                    self.remember(value, index);
                }
            }
            Py::List(items) => {
                let index = self.empty_list();
                self.remember(value, index);
                if items.len() == 1 {
                    self.dump(&items[0])?;
                    self.append();
                } else {
                    for chunk in items.chunks(BATCH) {
                        self.mark();
                        for item in chunk {
                            self.dump(item)?;
                        }
                        self.appends();
                    }
                }
            }
            Py::Dict(items) => {
                let index = self.empty_dict();
                self.remember(value, index);
                if items.len() == 1 {
                    self.dump(&items[0].0)?;
                    self.dump(&items[0].1)?;
                    self.setitem();
                } else {
                    for chunk in items.chunks(BATCH) {
                        self.mark();
                        for (k, v) in chunk {
                            self.dump(k)?;
                            self.dump(v)?;
                        }
                        self.setitems();
                    }
                }
            }
        }
        Ok(())
    }

    fn remember(&mut self, value: &Py, index: u32) {
        if let Some(id) = value.identity() {
            self.memo.insert(id, index);
        }
    }

    /// Writes STOP, commits the last frame and returns the output.
    pub fn stop(mut self) -> io::Result<W> {
        self.op(b".");
        self.commit()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Python's `pickle.encode_long`: little-endian two's complement, as short as possible.
fn encode_long(x: i128) -> Vec<u8> {
    if x == 0 {
        return Vec::new();
    }
    let bits = 128 - x.unsigned_abs().leading_zeros() as usize;
    let nbytes = (bits >> 3) + 1;
    let mut bytes = x.to_le_bytes()[..nbytes.min(16)].to_vec();
    if x < 0 && nbytes > 1 && bytes[nbytes - 1] == 0xff && bytes[nbytes - 2] & 0x80 != 0 {
        bytes.pop();
    }
    bytes
}

/// `pickle.dumps(value, protocol)`.
pub fn dumps(value: &Py, protocol: u8) -> Vec<u8> {
    let mut pickler = Pickler::new(Vec::new(), protocol).expect("writing to a Vec cannot fail");
    pickler.dump(value).expect("writing to a Vec cannot fail");
    pickler.stop().expect("writing to a Vec cannot fail")
}
