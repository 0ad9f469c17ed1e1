//! A bounded writer for data-in buffers: it writes at most the allocation length (and at most
//! the caller's buffer), but keeps counting, so that length fields describe the full data.

pub(crate) struct DataIn<'a> {
    buf: &'a mut [u8],
    cap: usize,
    pos: usize,
}

impl<'a> DataIn<'a> {
    /// A writer that stores at most `min(buf.len(), alloc_len)` bytes.
    pub(crate) fn new(buf: &'a mut [u8], alloc_len: u32) -> Self {
        let cap = buf
            .len()
            .min(usize::try_from(alloc_len).unwrap_or(usize::MAX));
        DataIn { buf, cap, pos: 0 }
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) {
        if self.pos < self.cap {
            let n = bytes.len().min(self.cap - self.pos);
            if let (Some(dst), Some(src)) =
                (self.buf.get_mut(self.pos..self.pos + n), bytes.get(..n))
            {
                dst.copy_from_slice(src);
            }
        }
        self.pos = self.pos.saturating_add(bytes.len());
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }

    pub(crate) fn be16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }

    pub(crate) fn be32(&mut self, v: u32) {
        self.put(&v.to_be_bytes());
    }

    pub(crate) fn be64(&mut self, v: u64) {
        self.put(&v.to_be_bytes());
    }

    pub(crate) fn zeros(&mut self, n: usize) {
        const Z: [u8; 64] = [0; 64];
        let mut left = n;
        while left > 0 {
            let k = left.min(Z.len());
            self.put(&Z[..k]);
            left -= k;
        }
    }

    /// ASCII text left-aligned in a `width`-byte field, space padded; bytes outside 0x20..0x7E
    /// become spaces, text longer than the field is cut.
    pub(crate) fn ascii(&mut self, s: &str, width: usize) {
        let mut n = 0;
        for &c in s.as_bytes().iter().take(width) {
            self.u8(if (0x20..0x7F).contains(&c) { c } else { b' ' });
            n += 1;
        }
        for _ in n..width {
            self.u8(b' ');
        }
    }

    /// Overwrites already-counted bytes at `off` (only the part that was stored).
    pub(crate) fn patch(&mut self, off: usize, bytes: &[u8]) {
        for (i, &b) in bytes.iter().enumerate() {
            let p = off + i;
            if p < self.cap {
                if let Some(d) = self.buf.get_mut(p) {
                    *d = b;
                }
            }
        }
    }

    /// Bytes counted so far (the full length of the data, stored or not).
    pub(crate) fn total(&self) -> usize {
        self.pos
    }

    /// Bytes actually stored: what goes to the initiator.
    pub(crate) fn finish(self) -> u32 {
        u32::try_from(self.pos.min(self.cap)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_but_counts() {
        let mut b = [0u8; 8];
        let mut w = DataIn::new(&mut b, 5);
        w.be32(0x0102_0304);
        w.be32(0x0506_0708);
        w.patch(0, &[0xAA]);
        w.patch(6, &[0xBB]);
        assert_eq!(w.total(), 8);
        assert_eq!(w.finish(), 5);
        assert_eq!(b, [0xAA, 2, 3, 4, 5, 0, 0, 0]);
    }

    #[test]
    fn small_buffer_limits_too() {
        let mut b = [0u8; 2];
        let mut w = DataIn::new(&mut b, 100);
        w.ascii("a\u{e9}", 4);
        assert_eq!(w.finish(), 2);
        assert_eq!(&b, b"a ");
    }
}
