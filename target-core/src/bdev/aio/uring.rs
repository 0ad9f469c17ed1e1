//! The io_uring engine: one ring per channel, submissions batched per poll.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use io_uring::{IoUring, opcode, types};
use slab::Slab;

use super::super::{BdevChannel, BdevIo, BdevOp, IoStatus, MAX_IO_BUFS};
use super::{AioFile, direct_ok, execute_sync};
use crate::reactor::sys::EventFd;

/// Ring depth, and the most I/Os a channel keeps in flight.
const DEPTH: usize = 256;

/// Checks that io_uring can be set up here.
pub(super) fn probe() -> std::io::Result<()> {
    IoUring::new(2).map(|_| ())
}

struct InFlight {
    io: Box<BdevIo>,
    iovs: [libc::iovec; MAX_IO_BUFS],
    expect: usize,
}

pub(super) struct UringChannel {
    ring: IoUring,
    file: Arc<AioFile>,
    efd: EventFd,
    /// Never grows past DEPTH, so the iovec arrays inside stay put while the kernel reads them.
    inflight: Slab<InFlight>,
    /// I/Os completed without the ring (synchronous fallbacks), handed out by the next poll.
    done: VecDeque<Box<BdevIo>>,
    unsubmitted: usize,
}

impl UringChannel {
    pub(super) fn new(file: Arc<AioFile>, _block_device: bool) -> std::io::Result<Self> {
        let ring = IoUring::new(DEPTH as u32)?;
        let efd = EventFd::new()?;
        ring.submitter().register_eventfd(efd.as_raw_fd())?;
        Ok(Self {
            ring,
            file,
            efd,
            inflight: Slab::with_capacity(DEPTH),
            done: VecDeque::with_capacity(DEPTH),
            unsubmitted: 0,
        })
    }

    fn flush_submissions(&mut self) {
        if self.unsubmitted == 0 {
            return;
        }
        match self.ring.submit() {
            Ok(_) => self.unsubmitted = 0,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => tracing::error!("io_uring submit failed: {e}"),
        }
    }
}

impl BdevChannel for UringChannel {
    fn submit(&mut self, mut io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        if self.inflight.len() >= DEPTH {
            return Err(io);
        }
        let bs = u64::from(self.file.block_size);
        let data_len = io.op.range().map_or(0, |(_, n)| (n * bs) as usize);
        // Compare never gets here (the channel compares by reading); if it did, it would be
        // answered at once as unsupported.
        if matches!(io.op, BdevOp::Compare { .. })
            || (io.op.has_data() && !direct_ok(&self.file, &io.bufs, data_len))
        {
            io.status = execute_sync(&self.file, &mut io);
            self.done.push_back(io);
            return Ok(());
        }
        let fd = types::Fd(self.file.file.as_raw_fd());
        let entry = self.inflight.vacant_entry();
        let key = entry.key() as u64;
        let slot = entry.insert(InFlight {
            io,
            iovs: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; MAX_IO_BUFS],
            expect: data_len,
        });
        let mut niov = 0;
        let mut left = data_len;
        for b in slot.io.bufs.iter_mut() {
            if left == 0 {
                break;
            }
            let n = b.len().min(left);
            slot.iovs[niov] = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: n,
            };
            niov += 1;
            left -= n;
        }
        let sqe = match slot.io.op {
            BdevOp::Read { offset_blocks, .. } => {
                opcode::Readv::new(fd, slot.iovs.as_ptr(), niov as u32)
                    .offset(offset_blocks * bs)
                    .build()
            }
            BdevOp::Write {
                offset_blocks, fua, ..
            } => opcode::Writev::new(fd, slot.iovs.as_ptr(), niov as u32)
                .offset(offset_blocks * bs)
                .rw_flags(if fua { libc::RWF_DSYNC } else { 0 })
                .build(),
            BdevOp::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            BdevOp::WriteZeroes {
                offset_blocks,
                num_blocks,
            } => opcode::Fallocate::new(fd, num_blocks * bs)
                .offset(offset_blocks * bs)
                .mode(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            BdevOp::Unmap {
                offset_blocks,
                num_blocks,
            } => opcode::Fallocate::new(fd, num_blocks * bs)
                .offset(offset_blocks * bs)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            BdevOp::Compare { .. } => unreachable!("compare is answered above"),
        }
        .user_data(key);
        // SAFETY: the iovec array and the buffers it points at live in the slab entry, which
        // stays in place (the slab never grows past DEPTH) and owns the buffers until the
        // completion for `key` is reaped.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            self.flush_submissions();
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                let slot = self.inflight.remove(key as usize);
                return Err(slot.io);
            }
        }
        self.unsubmitted += 1;
        Ok(())
    }

    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        self.flush_submissions();
        let mut n = 0;
        while let Some(io) = self.done.pop_front() {
            done(io);
            n += 1;
        }
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let key = cqe.user_data() as usize;
            if !self.inflight.contains(key) {
                tracing::error!("io_uring completion for unknown request {key}");
                continue;
            }
            let InFlight { mut io, expect, .. } = self.inflight.remove(key);
            let res = cqe.result();
            io.status = if res < 0 {
                IoStatus::Error(-res)
            } else if io.op.has_data() && (res as usize) < expect {
                IoStatus::Error(libc::EIO)
            } else {
                IoStatus::Success
            };
            done(io);
            n += 1;
        }
        n
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.efd.as_raw_fd())
    }

    fn arm(&mut self) -> bool {
        self.efd.drain();
        self.flush_submissions();
        let mut cq = self.ring.completion();
        cq.sync();
        !cq.is_empty() || !self.done.is_empty()
    }

    fn outstanding(&self) -> usize {
        self.inflight.len() + self.done.len()
    }
}
