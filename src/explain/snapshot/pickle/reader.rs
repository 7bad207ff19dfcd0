//! Buffered reading of the pickle's bytes, with the offset every error names.

use super::*;

pub(super) struct Reader<R> {
    pub(super) inner: R,
    pub(super) buf: Box<[u8]>,
    pub(super) pos: usize,
    pub(super) end: usize,
    /// Offset in the input of `buf[0]`.
    pub(super) base: u64,
}

impl<R: Read> Reader<R> {
    pub(super) fn new(inner: R) -> Self {
        Reader {
            inner,
            buf: vec![0u8; BUFFER].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 0,
        }
    }

    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Makes `need` (≤ BUFFER) bytes available; false at the end of the input.
    pub(super) fn fill(&mut self, need: usize) -> io::Result<bool> {
        if self.end - self.pos >= need {
            return Ok(true);
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < need {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    #[inline]
    pub(super) fn byte(&mut self) -> io::Result<Option<u8>> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(Some(b));
        }
        if !self.fill(1)? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    #[inline]
    pub(super) fn take<const N: usize>(&mut self) -> io::Result<Option<[u8; N]>> {
        if self.end - self.pos < N && !self.fill(N)? {
            return Ok(None);
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(Some(out))
    }

    /// `n` bytes (at most MAX_STRING_BYTES, checked by the caller), borrowed when they fit the
    /// buffer.
    pub(super) fn bytes(&mut self, n: usize) -> io::Result<Option<std::borrow::Cow<'_, [u8]>>> {
        if n <= BUFFER {
            if !self.fill(n)? {
                return Ok(None);
            }
            let start = self.pos;
            self.pos += n;
            return Ok(Some(std::borrow::Cow::Borrowed(
                &self.buf[start..start + n],
            )));
        }
        let mut out = Vec::with_capacity(n);
        out.extend_from_slice(&self.buf[self.pos..self.end]);
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        let want = (n - out.len()) as u64;
        let got = (&mut self.inner).take(want).read_to_end(&mut out)?;
        self.base += got as u64;
        if out.len() < n {
            return Ok(None);
        }
        Ok(Some(std::borrow::Cow::Owned(out)))
    }
}
