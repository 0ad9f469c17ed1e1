//! Compare for bdevs without a compare of their own: the channel reads the range into a buffer
//! of its own, a chunk at a time, and compares it with the I/O's buffers (SPDK's bdev layer
//! does the same). Any bdev that can read can compare this way; the null bdev compares with
//! what its reads return.
//!
//! One compare runs at a time per channel and the others wait in order; a compare is not
//! atomic with respect to writes to the same blocks (no fused commands here). The buffer and
//! its read I/O are allocated on the channel's first such compare and kept: nothing is
//! allocated per I/O.

use std::collections::VecDeque;

use iobuf::IoBuf;

use super::{BdevChannel, BdevError, BdevIo, BdevOp, IoBufs, IoStatus};

/// Bytes read per chunk (at least one block).
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// The address of an I/O, to recognise the chunk read among the backend's completions.
fn addr(io: &BdevIo) -> usize {
    std::ptr::from_ref(io) as usize
}

/// Whether `bufs`, from byte `offset` on, hold `want`.
fn bufs_equal(bufs: &IoBufs, mut offset: usize, mut want: &[u8]) -> bool {
    for b in bufs.iter() {
        if want.is_empty() {
            break;
        }
        let s = b.as_slice();
        if offset >= s.len() {
            offset -= s.len();
            continue;
        }
        let n = (s.len() - offset).min(want.len());
        if s[offset..offset + n] != want[..n] {
            return false;
        }
        want = &want[n..];
        offset = 0;
    }
    want.is_empty()
}

/// The read + compare state of one channel.
pub(crate) struct ReadCompare {
    /// The chunk read with the buffer; `None` while the backend has it.
    read: Option<Box<BdevIo>>,
    read_addr: usize,
    block_size: u64,
    chunk_blocks: u64,
    /// Compares in arrival order; the first one runs.
    queue: VecDeque<Box<BdevIo>>,
    /// Blocks of the running compare found equal so far.
    done_blocks: u64,
    /// The backend handed the read back (busy): submit it again on the next poll.
    stalled: bool,
}

impl ReadCompare {
    /// Allocates the chunk buffer for a bdev of `block_size`-byte blocks.
    pub(crate) fn new(block_size: u32) -> Result<Self, BdevError> {
        let bs = u64::from(block_size.max(1));
        let chunk_blocks = (CHUNK_BYTES as u64 / bs).max(1);
        let buf = IoBuf::alloc((chunk_blocks * bs) as usize).map_err(|e| BdevError::Io {
            context: "allocating the compare buffer".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let mut read = Box::new(BdevIo::new(
            BdevOp::Read {
                offset_blocks: 0,
                num_blocks: 0,
            },
            0,
        ));
        read.bufs.push(buf);
        Ok(Self {
            read_addr: addr(&read),
            read: Some(read),
            block_size: bs,
            chunk_blocks,
            queue: VecDeque::with_capacity(16),
            done_blocks: 0,
            stalled: false,
        })
    }

    /// Whether `io` is this channel's chunk read.
    pub(crate) fn is_read(&self, io: &BdevIo) -> bool {
        addr(io) == self.read_addr
    }

    /// Compares waiting or running.
    pub(crate) fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Whether the chunk read is at the backend.
    pub(crate) fn reading(&self) -> bool {
        self.read.is_none()
    }

    /// Whether a read waits to be submitted again.
    pub(crate) fn stalled(&self) -> bool {
        self.stalled
    }

    /// Queues a compare (already checked for range and buffer size) and starts it if it is the
    /// only one.
    pub(crate) fn push(&mut self, io: Box<BdevIo>, inner: &mut dyn BdevChannel) {
        self.queue.push_back(io);
        if self.queue.len() == 1 {
            self.done_blocks = 0;
            self.start(inner);
        }
    }

    /// Submits the read of the running compare's next chunk.
    fn start(&mut self, inner: &mut dyn BdevChannel) {
        let Some((offset, num)) = self.queue.front().and_then(|io| io.op.range()) else {
            return;
        };
        let Some(mut read) = self.read.take() else {
            return;
        };
        let blocks = (num - self.done_blocks).min(self.chunk_blocks);
        read.op = BdevOp::Read {
            offset_blocks: offset + self.done_blocks,
            num_blocks: blocks,
        };
        read.status = IoStatus::Pending;
        read.bufs[0].set_len((blocks * self.block_size) as usize);
        match inner.submit(read) {
            Ok(()) => self.stalled = false,
            Err(read) => {
                self.read = Some(read);
                self.stalled = true;
            }
        }
    }

    /// Submits a read the backend handed back, if any.
    pub(crate) fn retry(&mut self, inner: &mut dyn BdevChannel) {
        if self.stalled {
            self.start(inner);
        }
    }

    /// The chunk read completed: compares it, and returns the running compare when it is
    /// decided (equal to the end, different, or the read failed). The next chunk or the next
    /// compare starts.
    pub(crate) fn read_done(
        &mut self,
        read: Box<BdevIo>,
        inner: &mut dyn BdevChannel,
    ) -> Option<Box<BdevIo>> {
        let status = read.status;
        let blocks = read.op.range().map_or(0, |(_, n)| n);
        let offset = (self.done_blocks * self.block_size) as usize;
        let equal = self.queue.front().map(|head| {
            status == IoStatus::Success && bufs_equal(&head.bufs, offset, read.bufs[0].as_slice())
        });
        self.read = Some(read);
        let equal = equal?;
        let outcome = match status {
            IoStatus::Success if !equal => IoStatus::Miscompare,
            IoStatus::Success => {
                self.done_blocks += blocks;
                let total = self
                    .queue
                    .front()
                    .and_then(|io| io.op.range())
                    .map_or(0, |r| r.1);
                if self.done_blocks < total {
                    self.start(inner);
                    return None;
                }
                IoStatus::Success
            }
            failed => failed,
        };
        let mut io = self.queue.pop_front()?;
        io.status = outcome;
        self.done_blocks = 0;
        self.start(inner);
        Some(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bufs(parts: &[&[u8]]) -> IoBufs {
        let mut v = IoBufs::new();
        for p in parts {
            let mut b = IoBuf::alloc(p.len()).unwrap();
            b.as_mut_slice().copy_from_slice(p);
            v.push(b);
        }
        v
    }

    #[test]
    fn equality_across_buffer_boundaries() {
        let b = bufs(&[b"abcd", b"ef", b"ghij"]);
        assert!(bufs_equal(&b, 0, b"abcdefghij"));
        assert!(bufs_equal(&b, 3, b"defg"));
        assert!(bufs_equal(&b, 6, b"ghij"));
        assert!(!bufs_equal(&b, 3, b"dEfg"));
        assert!(!bufs_equal(&b, 8, b"ijk"), "past the end");
        assert!(bufs_equal(&b, 20, b""));
    }
}
