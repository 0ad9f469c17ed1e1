//! A reactor's I/O channel to an RBD image: fills a preallocated slot, starts the librbd
//! operation, and hands completions back from the [`Ring`] in `poll`. FUA writes are followed
//! by a flush before they complete.

use std::os::fd::RawFd;
use std::sync::Arc;

use target_core::bdev::{BdevChannel, BdevIo, BdevOp, IoStatus};

use crate::image::{AioOp, Image};
use crate::ring::{Ring, Stage};

/// Most I/Os one channel keeps in flight.
pub const CHANNEL_DEPTH: usize = 256;

/// One reactor's channel.
pub(crate) struct RbdChannel {
    ring: Arc<Ring>,
    /// Free slot indices (a stack; preallocated to the ring's depth).
    free: Vec<u32>,
    block_size: u64,
}

impl RbdChannel {
    pub(crate) fn new(image: Arc<Image>, block_size: u32) -> std::io::Result<Self> {
        let ring = Ring::new(image, CHANNEL_DEPTH)?;
        let free = (0..ring.depth() as u32).rev().collect();
        Ok(Self {
            ring,
            free,
            block_size: u64::from(block_size),
        })
    }

    /// Starts slot `i` at its current stage.
    fn start(&mut self, i: u32) {
        // SAFETY: slot `i` is not in flight (just taken from `free`, or just popped).
        let d = unsafe { self.ring.data(i) };
        let Some(io) = d.io.as_ref() else {
            return;
        };
        let bs = self.block_size;
        let op = match (d.stage, io.op) {
            (Stage::FlushAfterWrite, _) | (_, BdevOp::Flush) => AioOp::Flush,
            (_, BdevOp::Read { offset_blocks, .. }) => AioOp::Read {
                off: offset_blocks * bs,
                iov: d.iovs.as_ptr(),
                iovcnt: d.iovcnt as i32,
            },
            (_, BdevOp::Write { offset_blocks, .. }) => AioOp::Write {
                off: offset_blocks * bs,
                iov: d.iovs.as_ptr(),
                iovcnt: d.iovcnt as i32,
            },
            (
                _,
                BdevOp::Unmap {
                    offset_blocks,
                    num_blocks,
                },
            ) => AioOp::Discard {
                off: offset_blocks * bs,
                len: num_blocks * bs,
            },
            (
                _,
                BdevOp::WriteZeroes {
                    offset_blocks,
                    num_blocks,
                },
            ) => AioOp::WriteZeroes {
                off: offset_blocks * bs,
                len: num_blocks * bs,
            },
            (_, BdevOp::Compare { .. }) => {
                // Not advertised (supports() is false), so IoChannel never sends one.
                self.ring.complete_now(i, -(libc::EOPNOTSUPP as isize));
                return;
            }
        };
        // SAFETY: the slot's I/O and iovecs are in place and stay untouched until its index
        // is popped; the buffers belong to the I/O in the slot.
        unsafe { self.ring.start(i, op) };
    }
}

/// The status of an I/O from librbd's result.
fn status(op: &BdevOp, result: isize, expect: usize) -> IoStatus {
    if result < 0 {
        return IoStatus::Error(i32::try_from(-result).unwrap_or(libc::EIO));
    }
    match op {
        BdevOp::Read { .. } if result as usize != expect => IoStatus::Error(libc::EIO),
        _ => IoStatus::Success,
    }
}

impl BdevChannel for RbdChannel {
    fn submit(&mut self, mut io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        let Some(i) = self.free.pop() else {
            return Err(io);
        };
        // SAFETY: slot `i` came from the free list: not in flight, no other reference.
        let d = unsafe { self.ring.data(i) };
        let bs = self.block_size;
        let len = io.op.range().map_or(0, |(_, n)| (n * bs) as usize);
        d.iovcnt = 0;
        d.expect = 0;
        if io.op.has_data() {
            let mut left = len;
            for b in io.bufs.iter_mut() {
                if left == 0 {
                    break;
                }
                let n = b.len().min(left);
                d.iovs[d.iovcnt] = libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: n,
                };
                d.iovcnt += 1;
                left -= n;
            }
            d.expect = len;
        }
        d.stage = match io.op {
            BdevOp::Write { fua: true, .. } => Stage::WriteThenFlush,
            _ => Stage::Single,
        };
        d.io = Some(io);
        self.start(i);
        Ok(())
    }

    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        let mut n = 0;
        while let Some(i) = self.ring.pop() {
            let r = self.ring.result(i);
            // SAFETY: index `i` was popped: the slot is no longer in flight.
            let d = unsafe { self.ring.data(i) };
            if d.stage == Stage::WriteThenFlush && r >= 0 {
                d.stage = Stage::FlushAfterWrite;
                self.start(i);
                continue;
            }
            let Some(mut io) = d.io.take() else {
                continue;
            };
            io.status = status(&io.op, r, d.expect);
            self.free.push(i);
            done(io);
            n += 1;
        }
        n
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.ring.wake_fd())
    }

    fn arm(&mut self) -> bool {
        self.ring.arm()
    }

    fn outstanding(&self) -> usize {
        self.ring.depth() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_of_results() {
        let read = BdevOp::Read {
            offset_blocks: 0,
            num_blocks: 8,
        };
        assert_eq!(status(&read, 4096, 4096), IoStatus::Success);
        assert_eq!(status(&read, 512, 4096), IoStatus::Error(libc::EIO));
        assert_eq!(
            status(&read, -(libc::ETIMEDOUT as isize), 4096),
            IoStatus::Error(libc::ETIMEDOUT)
        );
        assert_eq!(status(&BdevOp::Flush, 0, 0), IoStatus::Success);
        assert_eq!(
            status(&BdevOp::Flush, -(libc::ESHUTDOWN as isize), 0),
            IoStatus::Error(libc::ESHUTDOWN)
        );
    }
}
