//! One NVMe/TCP connection on its poll group: the socket, the protocol machine
//! ([`Connection`]), the exec layer's [`Queue`] (created with the first capsule: its queue id
//! is the Connect's), the receive buffer, the per-slot requests with their data buffers, and
//! the send queue that gathers PDUs into one `sendmsg`.
//!
//! Everything is allocated when the connection is accepted: nothing per PDU or per command.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::fd::RawFd;
use std::time::Instant;

use arrayvec::ArrayVec;
use iobuf::{BufCache, IoBuf};
use socket2::Socket;
use target_core::bdev::MAX_IO_BUFS;
use target_core::nvme_exec::{NvmeReq, Queue};
use target_core::target::ListenAddr;

use crate::conn::{Connection, DataBuffers, SlotId};
use crate::pdu::MAX_ENCODED_HEADER;
use crate::poll_group::NewConn;

/// Receive buffer per connection.
pub(crate) const RX_BUF: usize = 64 * 1024;
/// PDUs queued for sending per connection (header slots of [`MAX_ENCODED_HEADER`] bytes).
pub(crate) const TX_SLOTS: usize = 32;
/// Most iovecs handed to one `sendmsg`.
const IOV_BATCH: usize = 64;

/// Where a request is, as the runtime sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqState {
    /// No command, or the machine moves its data (buffers attached or awaited).
    Idle,
    /// Waiting for data buffers from the pool.
    WaitBuffer,
    /// Its bdev I/O is out.
    Submitted,
    /// Waiting for its paused subsystem (admission replay).
    Queued,
    /// A parked AER.
    Parked,
    /// Its bdev backend was full: retried later.
    Busy,
    /// Completed: the machine sends its data and response.
    Responding,
}

/// What data buffers a request holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataKind {
    None,
    /// The slot's in-capsule buffer.
    InCapsule,
    /// Buffers from the shared pool.
    Pool,
}

/// The runtime's state of one command slot.
pub(crate) struct Req {
    pub ex: NvmeReq,
    /// The slot's own in-capsule buffer while the request does not use it.
    pub icd: Option<IoBuf>,
    pub data: DataKind,
    pub state: ReqState,
    /// When the command started, for latency.
    pub started_ns: u64,
}

/// The data buffers of a connection's slots, for the machine.
pub(crate) struct SlotBufs<'a>(pub &'a mut [Req]);

/// Read-only view for [`Connection::poll_send`].
pub(crate) struct SlotBufsRef<'a>(pub &'a [Req]);

fn bufs_of(reqs: &[Req], slot: SlotId) -> &[IoBuf] {
    reqs.get(slot.index())
        .and_then(|r| r.ex.io.as_ref())
        .map_or(&[], |io| io.bufs.as_slice())
}

/// Calls `f` with each piece of `[offset, offset + len)` of `bufs` seen as one byte range.
fn walk<'b>(bufs: &'b [IoBuf], offset: u32, len: u32, mut f: impl FnMut(&'b IoBuf, usize, usize)) {
    let (mut off, mut left) = (offset as usize, len as usize);
    for b in bufs {
        if left == 0 {
            break;
        }
        if off >= b.len() {
            off -= b.len();
            continue;
        }
        let n = (b.len() - off).min(left);
        f(b, off, n);
        off = 0;
        left -= n;
    }
}

/// Calls `f` with each piece of `[offset, offset + len)` of `bufs` seen as one byte range,
/// mutable.
fn walk_mut(bufs: &mut [IoBuf], offset: u32, len: u32, mut f: impl FnMut(&mut [u8])) {
    let (mut off, mut left) = (offset as usize, len as usize);
    for b in bufs {
        if left == 0 {
            break;
        }
        if off >= b.len() {
            off -= b.len();
            continue;
        }
        let n = (b.len() - off).min(left);
        f(&mut b.as_mut_slice()[off..off + n]);
        off = 0;
        left -= n;
    }
}

/// Zeroes `[from, to)` of the request's data buffers (seen as one byte range).
pub(crate) fn zero_fill(r: &mut Req, from: u32, to: u32) {
    if let Some(io) = r.ex.io.as_mut() {
        walk_mut(&mut io.bufs, from, to.saturating_sub(from), |p| p.fill(0));
    }
}

impl DataBuffers for SlotBufs<'_> {
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]) {
        let Some(io) = self.0.get_mut(slot.index()).and_then(|r| r.ex.io.as_mut()) else {
            return;
        };
        let mut src = data;
        walk_mut(&mut io.bufs, offset, data.len() as u32, |dst| {
            let (now, rest) = src.split_at(dst.len());
            dst.copy_from_slice(now);
            src = rest;
        });
    }

    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        SlotBufsRef(self.0).read(slot, offset, len, f)
    }
}

impl DataBuffers for SlotBufsRef<'_> {
    fn write(&mut self, _slot: SlotId, _offset: u32, _data: &[u8]) {}

    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        walk(bufs_of(self.0, slot), offset, len, |b, off, n| {
            f(&b.as_slice()[off..off + n])
        });
    }
}

/// One PDU waiting to be written: header bytes in the connection's header arena, data as
/// pieces of pool buffers, the data digest.
struct TxEntry {
    hdr_len: usize,
    /// Data pieces as (address, length). The memory belongs to pool buffers held either by the
    /// request (until its releasing PDU) or by `owned` of this or a later entry of the same
    /// command, so it stays valid and unchanged until this entry is written.
    segs: ArrayVec<(usize, usize), MAX_IO_BUFS>,
    ddgst: [u8; 4],
    ddgst_len: usize,
    /// Buffers this entry keeps alive until written (the command's, when this PDU released
    /// its slot while data of it was still queued).
    owned: ArrayVec<IoBuf, MAX_IO_BUFS>,
    /// Bytes of this entry already written.
    sent: usize,
}

impl TxEntry {
    fn empty() -> TxEntry {
        TxEntry {
            hdr_len: 0,
            segs: ArrayVec::new(),
            ddgst: [0; 4],
            ddgst_len: 0,
            owned: ArrayVec::new(),
            sent: 0,
        }
    }

    fn total(&self) -> usize {
        self.hdr_len + self.segs.iter().map(|s| s.1).sum::<usize>() + self.ddgst_len
    }
}

/// The send side: a fixed ring of PDUs and their header arena. Entries are filled and retired
/// in place (an entry is about 1.5 KiB: moving it in and out of a queue was a quarter of the
/// reactor's instructions per 4 KiB read).
pub(crate) struct TxQueue {
    /// `TX_SLOTS` entries; entry `i` of the queue is `ring[(head + i) % TX_SLOTS]`.
    ring: Box<[TxEntry]>,
    /// `TX_SLOTS` headers; entry `i` of the queue uses slot `(head + i) % TX_SLOTS`.
    arena: Box<[u8]>,
    head: usize,
    len: usize,
}

impl TxQueue {
    fn new() -> TxQueue {
        TxQueue {
            ring: (0..TX_SLOTS).map(|_| TxEntry::empty()).collect(),
            arena: vec![0u8; TX_SLOTS * MAX_ENCODED_HEADER].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Whether nothing waits to be written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The queued entries, oldest first.
    fn iter(&self) -> impl Iterator<Item = &TxEntry> {
        (0..self.len).map(move |i| &self.ring[(self.head + i) % TX_SLOTS])
    }

    /// Retires the oldest entry, giving the buffers it kept back to `cache`.
    fn pop_front(&mut self, cache: &mut BufCache) {
        if self.len == 0 {
            return;
        }
        for b in self.ring[self.head].owned.drain(..) {
            cache.put(b);
        }
        self.head = (self.head + 1) % TX_SLOTS;
        self.len -= 1;
    }

    fn hdr(&self, i: usize) -> &[u8] {
        let s = (self.head + i) % TX_SLOTS;
        &self.arena[s * MAX_ENCODED_HEADER..(s + 1) * MAX_ENCODED_HEADER]
    }
}

/// What reading the socket gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxResult {
    /// Bytes arrived.
    Data(usize),
    /// Nothing now (or no room: the receive buffer is full).
    Nothing,
    /// The peer closed, or the socket failed.
    Gone,
}

/// Socket system calls of a connection, for `nvmf_get_stats`: per I/O they show how the
/// reactor and the socket interact (a send that would block waits for EPOLLOUT).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SockCounters {
    /// `read` calls.
    pub reads: u64,
    /// `sendmsg` calls.
    pub sends: u64,
    /// `sendmsg` calls that would have blocked with PDUs still queued (EPOLLOUT then waits).
    pub sends_blocked: u64,
}

impl SockCounters {
    /// Adds `b` to these counters.
    pub fn add(&mut self, b: &SockCounters) {
        self.reads += b.reads;
        self.sends += b.sends;
        self.sends_blocked += b.sends_blocked;
    }
}

/// One connection.
pub(crate) struct TcpQpair {
    /// Generation: queue keys carry it so a stale disconnect does not hit a new connection.
    pub generation: u32,
    pub sock: Socket,
    pub fd: RawFd,
    pub conn: Connection,
    pub q: Option<Queue>,
    pub listen: ListenAddr,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub reqs: Box<[Req]>,
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    pub tx: TxQueue,
    /// Slots waiting for pool buffers, with the length they need.
    pub wait_buf: VecDeque<(SlotId, u32)>,
    /// Slots whose bdev was busy.
    pub busy: VecDeque<SlotId>,
    /// Bdev I/Os out.
    pub io_out: u32,
    /// Torn down: waiting only for bdev I/Os to come back.
    pub closing: bool,
    /// The machine said Close (or a Disconnect completed): close once the queue is written.
    pub close_when_flushed: bool,
    /// EPOLLOUT is on (a write would block).
    pub want_write: bool,
    /// In the poll group's dirty list.
    pub dirty: bool,
    pub created: Instant,
    /// Socket system calls made for this connection.
    pub sock_counters: SockCounters,
}

impl TcpQpair {
    /// A connection with everything it will use.
    pub fn new(
        generation: u32,
        c: NewConn,
        conn: Connection,
        icd_size: usize,
    ) -> io::Result<TcpQpair> {
        let NewConn {
            sock,
            listen,
            local,
            peer,
            now,
        } = c;
        let depth = usize::from(conn.config().queue_depth);
        let mut reqs = Vec::with_capacity(depth);
        for _ in 0..depth {
            reqs.push(Req {
                ex: NvmeReq::new(0),
                icd: Some(IoBuf::alloc(icd_size).map_err(io::Error::other)?),
                data: DataKind::None,
                state: ReqState::Idle,
                started_ns: 0,
            });
        }
        let fd = sock.as_raw_fd();
        Ok(TcpQpair {
            generation,
            sock,
            fd,
            conn,
            q: None,
            listen,
            local,
            peer,
            reqs: reqs.into_boxed_slice(),
            rx: vec![0u8; RX_BUF].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            tx: TxQueue::new(),
            wait_buf: VecDeque::with_capacity(depth),
            busy: VecDeque::with_capacity(depth),
            io_out: 0,
            closing: false,
            close_when_flushed: false,
            want_write: false,
            dirty: false,
            created: now,
            sock_counters: SockCounters::default(),
        })
    }

    /// Reads what the socket has into the receive buffer.
    pub fn read(&mut self) -> RxResult {
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        } else if self.rx_end == self.rx.len() && self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        if self.rx_end == self.rx.len() {
            return RxResult::Nothing;
        }
        self.sock_counters.reads += 1;
        match (&self.sock).read(&mut self.rx[self.rx_end..]) {
            Ok(0) => RxResult::Gone,
            Ok(n) => {
                self.rx_end += n;
                RxResult::Data(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => RxResult::Nothing,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => RxResult::Nothing,
            Err(e) => {
                tracing::debug!(peer = %self.peer, "nvme/tcp receive: {e}");
                RxResult::Gone
            }
        }
    }

    /// Feeds received bytes to the machine; returns how many it took.
    pub fn feed(&mut self) -> usize {
        if self.rx_start == self.rx_end {
            return 0;
        }
        let n = self.conn.recv(
            &self.rx[self.rx_start..self.rx_end],
            &mut SlotBufs(&mut self.reqs),
        );
        self.rx_start += n;
        n
    }

    /// Gives back the buffers of a request whose slot the machine freed: the in-capsule buffer
    /// to the slot, pool buffers to `cache` (or into `keep` when queued data still refers to
    /// them).
    pub fn release_buffers(
        req: &mut Req,
        cache: &mut BufCache,
        keep: Option<&mut ArrayVec<IoBuf, MAX_IO_BUFS>>,
    ) {
        let Some(io) = req.ex.io.as_mut() else {
            return;
        };
        match req.data {
            DataKind::None => {}
            DataKind::InCapsule => {
                if let Some(mut b) = io.bufs.pop() {
                    b.reset();
                    req.icd = Some(b);
                }
            }
            DataKind::Pool => match keep {
                Some(k) => k.extend(io.bufs.drain(..)),
                None => {
                    for b in io.bufs.drain(..) {
                        cache.put(b);
                    }
                }
            },
        }
        req.data = DataKind::None;
    }

    /// Takes PDUs from the machine into the send queue while there is room.
    fn fill(&mut self, cache: &mut BufCache) {
        while self.tx.len < TX_SLOTS {
            let s = (self.tx.head + self.tx.len) % TX_SLOTS;
            let hdr = &mut self.tx.arena[s * MAX_ENCODED_HEADER..(s + 1) * MAX_ENCODED_HEADER];
            let Some(t) = self.conn.poll_send(hdr, &SlotBufsRef(&self.reqs)) else {
                return;
            };
            // Queued data (conservatively: any) of earlier entries.
            let earlier_data = self.tx.iter().any(|x| !x.segs.is_empty());
            let e = &mut self.tx.ring[s];
            debug_assert!(e.owned.is_empty(), "a retired entry gave its buffers back");
            e.hdr_len = t.header_len;
            e.segs.clear();
            e.ddgst = t.ddgst.unwrap_or_default();
            e.ddgst_len = if t.ddgst.is_some() { 4 } else { 0 };
            e.sent = 0;
            if let Some(d) = t.data {
                walk(bufs_of(&self.reqs, d.slot), d.offset, d.len, |b, off, n| {
                    let p = b.as_slice()[off..].as_ptr() as usize;
                    if e.segs.try_push((p, n)).is_err() {
                        tracing::error!("nvme/tcp: data PDU in too many pieces");
                    }
                });
            }
            let queued = earlier_data || !e.segs.is_empty();
            if let Some(slot) = t.release
                && let Some(r) = self.reqs.get_mut(slot.index())
            {
                // Queued data of this command (here or in earlier entries) points into its
                // pool buffers: this entry keeps them until written, so they are back in the
                // pool only after every earlier entry is written too.
                let keep = r.data == DataKind::Pool && queued;
                Self::release_buffers(r, cache, keep.then_some(&mut e.owned));
                r.state = ReqState::Idle;
            }
            self.tx.len += 1;
        }
    }

    /// Writes queued PDUs in batches until the socket would block or nothing is left.
    /// Returns bytes written, or the error that broke the connection.
    pub fn flush(&mut self, cache: &mut BufCache) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.fill(cache);
            if self.tx.is_empty() {
                return Ok(total);
            }
            let r = {
                let mut iov: ArrayVec<IoSlice<'_>, IOV_BATCH> = ArrayVec::new();
                'entries: for (i, e) in self.tx.iter().enumerate() {
                    let mut skip = e.sent;
                    let hdr = &self.tx.hdr(i)[..e.hdr_len];
                    let ddgst = &e.ddgst[..e.ddgst_len];
                    let pieces = std::iter::once(hdr)
                        .chain(e.segs.iter().map(|&(p, n)| {
                            // SAFETY: `p..p + n` lies in a pool buffer that is alive and not
                            // written until this entry is (see `TxEntry::segs`).
                            unsafe { std::slice::from_raw_parts(p as *const u8, n) }
                        }))
                        .chain(std::iter::once(ddgst));
                    for piece in pieces {
                        if skip >= piece.len() {
                            skip -= piece.len();
                            continue;
                        }
                        if iov.try_push(IoSlice::new(&piece[skip..])).is_err() {
                            break 'entries;
                        }
                        skip = 0;
                    }
                }
                self.sock_counters.sends += 1;
                self.sock
                    .send_vectored_with_flags(&iov, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
            };
            let mut n = match r {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.sock_counters.sends_blocked += 1;
                    return Ok(total);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n;
            while n > 0 && !self.tx.is_empty() {
                let e = &mut self.tx.ring[self.tx.head];
                let left = e.total() - e.sent;
                if n < left {
                    e.sent += n;
                    break;
                }
                n -= left;
                self.tx.pop_front(cache);
            }
            // Fully written entries are gone; a partial one waits for room.
            if self.tx.iter().next().is_some_and(|e| e.sent > 0) {
                return Ok(total);
            }
        }
    }

    /// Drops whatever waits to be sent (the connection is going away), returning the buffers.
    pub fn drop_tx(&mut self, cache: &mut BufCache) {
        while !self.tx.is_empty() {
            self.tx.pop_front(cache);
        }
        self.tx.head = 0;
    }
}
