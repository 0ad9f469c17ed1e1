//! Test support: a controller connection with buffers and a tiny in-memory "core", a host, and
//! a driver that moves bytes between them in pieces of random size.

use std::collections::HashMap;

use target_core::nvme::spec::io_opc;
use target_core::nvme::{Cqe, Sqe, Status};

use crate::conn::{Action, Config, ConnState, Connection, DataBuffers, SlotId, Transmit};
use crate::host::{Completion, Host, HostConfig};
use crate::pdu::MAX_ENCODED_HEADER;

/// Logical block size of the test disk.
pub const BLOCK: usize = 512;

/// A deterministic xorshift generator.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// A random choice.
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.next() as usize % v.len()]
    }
}

/// Buffers keyed by slot; every access is checked against the size asked for.
#[derive(Default, Debug)]
pub struct Bufs {
    /// The buffers.
    pub map: HashMap<SlotId, Vec<u8>>,
}

impl DataBuffers for Bufs {
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]) {
        let b = self
            .map
            .get_mut(&slot)
            .expect("write to a slot without a buffer");
        let at = offset as usize;
        assert!(at + data.len() <= b.len(), "write beyond the buffer");
        b[at..at + data.len()].copy_from_slice(data);
    }

    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        let b = self
            .map
            .get(&slot)
            .expect("read from a slot without a buffer");
        let (at, end) = (offset as usize, offset as usize + len as usize);
        assert!(end <= b.len(), "read beyond the buffer");
        // In two pieces, to exercise digests over pieces.
        let mid = at + (end - at) / 2;
        f(&b[at..mid]);
        f(&b[mid..end]);
    }
}

/// A controller connection with its runtime: buffers, a disk, and policies for the tests.
pub struct Ctrl {
    /// The machine.
    pub conn: Connection,
    /// Its buffers.
    pub bufs: Bufs,
    /// The namespace.
    pub disk: Vec<u8>,
    /// Queue id reported in completions.
    pub qid: u16,
    /// Commands executed and not completed yet (completed by [`Ctrl::complete_pending`]).
    pub pending: Vec<(SlotId, Cqe, u32)>,
    /// Complete commands at once (else they wait in `pending`).
    pub complete_at_once: bool,
    /// DW0 of completions.
    pub dw0: u32,
    /// Every action seen, in order.
    pub actions: Vec<Action>,
    /// Close was asked.
    pub closed: bool,
    /// Attach buffers as soon as asked (else they wait in `waiting_buffers` until
    /// [`Ctrl::grant_buffers`], or until the machine stalls on one).
    pub buffers_at_once: bool,
    /// Buffers asked for and not attached yet.
    pub waiting_buffers: Vec<(SlotId, u32)>,
    /// Orders the delayed buffer grants.
    pub rng: Rng,
}

impl Ctrl {
    /// A connection with `cfg` and a disk of `blocks` blocks filled with a pattern.
    pub fn new(cfg: Config, blocks: usize) -> Ctrl {
        Ctrl {
            conn: Connection::new(cfg).expect("valid config"),
            bufs: Bufs::default(),
            disk: (0..blocks * BLOCK).map(|i| (i * 31 + 7) as u8).collect(),
            qid: 1,
            pending: Vec::new(),
            complete_at_once: true,
            dw0: 0,
            actions: Vec::new(),
            closed: false,
            buffers_at_once: true,
            waiting_buffers: Vec::new(),
            rng: Rng(0x5EED),
        }
    }

    /// Feeds `bytes`, attaching buffers whenever the machine stalls on one; asserts that
    /// everything is consumed.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        loop {
            let n = self.conn.recv(bytes, &mut self.bufs);
            bytes = &bytes[n..];
            self.run_actions();
            if bytes.is_empty() {
                return;
            }
            // Stalled on in-capsule data: its buffer must be among those asked for (or was just
            // attached by run_actions).
            assert!(
                n > 0 || !self.waiting_buffers.is_empty(),
                "recv stalled without asking for a buffer"
            );
            self.grant_buffers();
        }
    }

    /// Attaches every buffer asked for, in random order.
    pub fn grant_buffers(&mut self) {
        while !self.waiting_buffers.is_empty() {
            let i = self.rng.next() as usize % self.waiting_buffers.len();
            let (slot, len) = self.waiting_buffers.swap_remove(i);
            self.attach(slot, len);
        }
        self.run_actions();
    }

    fn attach(&mut self, slot: SlotId, len: u32) {
        let old = self.bufs.map.insert(slot, vec![0; len as usize]);
        assert!(old.is_none(), "slot {slot:?} already has a buffer");
        self.conn.buffer_ready(slot).expect("buffer_ready");
    }

    /// Carries out every queued action.
    pub fn run_actions(&mut self) {
        while let Some(a) = self.conn.poll_action() {
            self.actions.push(a);
            match a {
                Action::NeedBuffer { slot, len } => {
                    assert!(
                        self.conn
                            .slot_state(slot)
                            .is_some_and(|s| s != crate::conn::SlotState::Free),
                        "NeedBuffer for a free slot"
                    );
                    if self.buffers_at_once {
                        self.attach(slot, len);
                    } else {
                        self.waiting_buffers.push((slot, len));
                    }
                }
                Action::Execute { slot } => self.execute(slot),
                Action::Fail { slot, status } => {
                    let sqe = *self.conn.sqe(slot).expect("outstanding");
                    self.finish(slot, self.cqe(&sqe, status), 0);
                }
                Action::Close => self.closed = true,
            }
        }
    }

    fn cqe(&self, sqe: &Sqe, status: Status) -> Cqe {
        Cqe {
            dw0: self.dw0,
            dw1: 0,
            sqhd: 0xFFFF,
            sqid: self.qid,
            cid: sqe.cid(),
            status,
        }
    }

    /// The test "core": Write/Read at SLBA against the disk, Flush, and anything else a success.
    fn execute(&mut self, slot: SlotId) {
        let sqe = *self
            .conn
            .sqe(slot)
            .expect("Execute for an outstanding command");
        let slba = (u64::from(sqe.cdw11()) << 32 | u64::from(sqe.cdw10())) as usize;
        let at = slba * BLOCK;
        let xfer_len = self.conn.xfer(slot).expect("outstanding").len() as usize;
        let (status, c2h) = match sqe.opcode() {
            io_opc::WRITE => match self.bufs.map.get(&slot) {
                Some(b) if at + b.len() <= self.disk.len() => {
                    self.disk[at..at + b.len()].copy_from_slice(b);
                    (Status::SUCCESS, 0)
                }
                Some(_) => (Status::LBA_OUT_OF_RANGE, 0),
                None => (Status::INVALID_FIELD, 0),
            },
            io_opc::READ => match self.bufs.map.get_mut(&slot) {
                Some(b) if at + b.len() <= self.disk.len() => {
                    b.copy_from_slice(&self.disk[at..at + xfer_len]);
                    (Status::SUCCESS, xfer_len as u32)
                }
                Some(_) => (Status::LBA_OUT_OF_RANGE, 0),
                None => (Status::INVALID_FIELD, 0),
            },
            _ => (Status::SUCCESS, 0),
        };
        let cqe = self.cqe(&sqe, status);
        self.finish(slot, cqe, c2h);
    }

    fn finish(&mut self, slot: SlotId, cqe: Cqe, c2h: u32) {
        if self.complete_at_once {
            self.conn.complete(slot, cqe, c2h).expect("complete");
        } else {
            self.pending.push((slot, cqe, c2h));
        }
    }

    /// Completes the waiting commands in the order given by `order` (indices are taken modulo
    /// what is left).
    pub fn complete_pending(&mut self, rng: &mut Rng) {
        while !self.pending.is_empty() {
            let i = rng.next() as usize % self.pending.len();
            let (slot, cqe, c2h) = self.pending.swap_remove(i);
            self.conn.complete(slot, cqe, c2h).expect("complete");
        }
    }

    /// Everything the machine has to send, as wire bytes.
    pub fn flush(&mut self) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut hdr = [0u8; MAX_ENCODED_HEADER];
        while let Some(t) = self.conn.poll_send(&mut hdr, &self.bufs) {
            self.put(&mut wire, &hdr, t);
        }
        wire
    }

    fn put(&mut self, wire: &mut Vec<u8>, hdr: &[u8], t: Transmit) {
        wire.extend_from_slice(&hdr[..t.header_len]);
        if let Some(d) = t.data {
            let b = self
                .bufs
                .map
                .get(&d.slot)
                .expect("data from a slot without a buffer");
            wire.extend_from_slice(&b[d.offset as usize..(d.offset + d.len) as usize]);
        }
        if let Some(dd) = t.ddgst {
            wire.extend_from_slice(&dd);
        }
        if let Some(s) = t.release {
            self.bufs.map.remove(&s);
        }
    }
}

/// Moves bytes both ways, in pieces of 1..=`max_piece` bytes, until nothing moves. Returns the
/// host's completions.
pub fn pump(ctrl: &mut Ctrl, host: &mut Host, rng: &mut Rng, max_piece: usize) -> Vec<Completion> {
    let mut done = Vec::new();
    for _ in 0..10_000 {
        let up = host.take_output();
        let mut at = 0;
        while at < up.len() {
            let n = (rng.range(1, max_piece as u64) as usize).min(up.len() - at);
            ctrl.feed(&up[at..at + n]);
            at += n;
        }
        ctrl.run_actions();
        ctrl.grant_buffers();
        if !ctrl.complete_at_once {
            ctrl.complete_pending(rng);
        }
        let down = ctrl.flush();
        let mut at = 0;
        while at < down.len() {
            let n = (rng.range(1, max_piece as u64) as usize).min(down.len() - at);
            if host.recv(&down[at..at + n]).is_err() {
                return done;
            }
            at += n;
        }
        while let Some(c) = host.poll_completion() {
            done.push(c);
        }
        if up.is_empty() && down.is_empty() {
            return done;
        }
    }
    panic!("the exchange did not settle");
}

/// A connected pair: ICReq/ICResp exchanged.
pub fn connected(cfg: Config, hcfg: HostConfig, blocks: usize) -> (Ctrl, Host) {
    let mut ctrl = Ctrl::new(cfg, blocks);
    let mut host = Host::new(hcfg);
    let mut rng = Rng(1);
    pump(&mut ctrl, &mut host, &mut rng, 1 << 20);
    assert_eq!(ctrl.conn.state(), ConnState::Live);
    assert_eq!(*host.state(), crate::host::HostState::Live);
    ctrl.qid = hcfg.qid;
    ctrl.conn.connected(hcfg.qid, true);
    (ctrl, host)
}

/// A Write of `blocks` blocks at `slba`.
pub fn write_cmd(cid: u16, slba: u64, blocks: u32) -> Sqe {
    rw_cmd(io_opc::WRITE, cid, slba, blocks)
}

/// A Read of `blocks` blocks at `slba`.
pub fn read_cmd(cid: u16, slba: u64, blocks: u32) -> Sqe {
    rw_cmd(io_opc::READ, cid, slba, blocks)
}

fn rw_cmd(opc: u8, cid: u16, slba: u64, blocks: u32) -> Sqe {
    let mut s = Sqe::new(opc, cid);
    s.set_nsid(1)
        .set_cdw(10, slba as u32)
        .set_cdw(11, (slba >> 32) as u32)
        .set_cdw(12, blocks - 1);
    s
}

/// `len` bytes of data that depend on `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..len).map(|_| r.next() as u8).collect()
}
