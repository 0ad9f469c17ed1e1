//! NVMe/TCP: the streaming PDU reader on arbitrary bytes in arbitrary pieces (both roles, every
//! framing), and the controller connection driven by a host byte stream interleaved with
//! runtime events (buffers attached late, commands completed late and out of order, sends
//! drained at any point).
//!
//! Input: `[sel][cfg]` then records `[op][len u16][bytes]`: op & 3 = 0 feeds `bytes` (in pieces
//! of op >> 2 bytes, all at once when 0), 1 attaches `len` waiting buffers, 2 completes `len`
//! executing commands (status and data length from `bytes`), 3 drains up to `len` PDUs.
//!
//! Properties: nothing panics; the reader consumes every byte until it reports a fatal error,
//! hands out exactly the data its header announced, and re-encoding a decoded header reads
//! back the same; the connection consumes every byte unless in-capsule data waits for a buffer
//! it asked for, and everything once terminating or closed; every action and every PDU to send
//! names a command that is outstanding (data only of attached buffers, within them); buffers
//! are touched only within what was asked; whatever the controller sends is a valid PDU
//! stream for a host; a termination request is its last PDU, and Close follows.
#![no_main]
use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use target_core::nvme::{Cqe, Status};
use transport_tcp::conn::{
    Action, Config, ConnState, Connection, DataBuffers, SlotId, SlotState, Xfer,
};
use transport_tcp::pdu::{
    Digests, Framing, MAX_ENCODED_HEADER, Pdu, PduReader, PduType, ReadEvent, Role,
};

/// Buffers that check every access.
#[derive(Default)]
struct Bufs(BTreeMap<SlotId, Vec<u8>>);

impl DataBuffers for Bufs {
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]) {
        let b = self
            .0
            .get_mut(&slot)
            .expect("write to a slot without a buffer");
        let at = offset as usize;
        assert!(at + data.len() <= b.len(), "write beyond the buffer");
        b[at..at + data.len()].copy_from_slice(data);
    }
    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        let b = self
            .0
            .get(&slot)
            .expect("read from a slot without a buffer");
        let end = offset as usize + len as usize;
        assert!(end <= b.len(), "read beyond the buffer");
        f(&b[offset as usize..end]);
    }
}

/// Re-encodes a decoded header with the framing it was read with; `None` for types whose
/// encoder needs more than the header (none today).
fn reencode(pdu: &Pdu, data_len: u32, f: &Framing, buf: &mut [u8]) -> Option<usize> {
    let zeros = vec![0; data_len.min(256) as usize];
    match pdu {
        Pdu::IcReq(p) => p.encode(buf),
        Pdu::IcResp(p) => p.encode(buf),
        Pdu::H2cTermReq(t) => t.encode(PduType::H2cTermReq, &zeros, buf),
        Pdu::C2hTermReq(t) => t.encode(PduType::C2hTermReq, &zeros, buf),
        Pdu::CapsuleCmd(p) => p.encode(f, data_len, buf),
        Pdu::CapsuleResp(p) => p.encode(f, buf),
        Pdu::H2cData(p) => p.encode(f, buf),
        Pdu::C2hData(p) => p.encode(f, buf),
        Pdu::R2t(p) => p.encode(f, buf),
    }
    .ok()
}

/// Reads `bytes` in pieces with a reader and checks its properties.
fn reader_properties(role: Role, framing: Option<Framing>, bytes: &[u8], piece: usize) {
    let mut r = PduReader::new(role);
    if let Some(f) = framing {
        r.set_framing(f);
    }
    let mut announced: Option<(u32, u32)> = None; // (data_len, handed out)
    for chunk in bytes.chunks(piece.max(1)) {
        let mut at = 0;
        loop {
            let (n, ev) = r.read(&chunk[at..]);
            at += n;
            match ev {
                ReadEvent::NeedMore => {
                    assert_eq!(at, chunk.len(), "NeedMore with bytes left");
                    break;
                }
                ReadEvent::Header { pdu, data_len } => {
                    assert!(announced.is_none(), "a header inside a PDU");
                    announced = Some((data_len, 0));
                    let f = r.framing().unwrap_or_default();
                    let mut buf = [0u8; MAX_ENCODED_HEADER];
                    if let Some(len) = reencode(&pdu, data_len, &f, &mut buf) {
                        let mut again = PduReader::new(r.role());
                        if let Some(f) = r.framing() {
                            again.set_framing(f);
                        }
                        let (_, ev) = again.read(&buf[..len]);
                        match ev {
                            ReadEvent::Header {
                                pdu: p2,
                                data_len: d2,
                            } => {
                                assert_eq!(p2, pdu, "re-encoded header reads back");
                                assert_eq!(d2, data_len);
                            }
                            other => panic!("re-encoded header rejected: {other:?}"),
                        }
                    }
                }
                ReadEvent::Data(d) => {
                    let a = announced.as_mut().expect("data outside a PDU");
                    a.1 += d.len() as u32;
                    assert!(a.1 <= a.0, "more data than announced");
                }
                ReadEvent::End { .. } => {
                    let (want, got) = announced.take().expect("end outside a PDU");
                    assert_eq!(want, got, "data handed out as announced");
                }
                ReadEvent::Fatal(_) | ReadEvent::Abort => {
                    assert!(r.is_failed() || matches!(ev, ReadEvent::Abort));
                    return;
                }
            }
        }
    }
}

struct Harness {
    conn: Connection,
    bufs: Bufs,
    /// Slots the machine asked a buffer for, with the size, not attached yet.
    waiting: Vec<(SlotId, u32)>,
    /// Buffer sizes asked per slot (attached or not).
    asked: BTreeMap<SlotId, u32>,
    executing: Vec<SlotId>,
    /// Reads what the controller sends, as a host would.
    host: PduReader,
    closed: bool,
    term_sent: bool,
    hdr: [u8; MAX_ENCODED_HEADER],
}

impl Harness {
    fn outstanding(&self, slot: SlotId) -> bool {
        self.conn
            .slot_state(slot)
            .is_some_and(|s| s != SlotState::Free)
    }

    fn actions(&mut self, buffers_at_once: bool, complete_at_once: bool) {
        while let Some(a) = self.conn.poll_action() {
            assert!(!self.closed, "action after Close");
            match a {
                Action::NeedBuffer { slot, len } => {
                    assert!(self.outstanding(slot), "NeedBuffer for a free slot");
                    assert_eq!(self.conn.slot_state(slot), Some(SlotState::AwaitBuffer));
                    assert_eq!(self.conn.xfer(slot).map(Xfer::len), Some(len));
                    assert!(len <= self.conn.config().max_io_size.max(8192));
                    self.asked.insert(slot, len);
                    self.waiting.push((slot, len));
                    if buffers_at_once {
                        self.grant(usize::MAX);
                    }
                }
                Action::Execute { slot } | Action::Fail { slot, .. } => {
                    assert!(self.outstanding(slot), "Execute for a free slot");
                    assert_eq!(self.conn.slot_state(slot), Some(SlotState::Executing));
                    self.executing.push(slot);
                    if complete_at_once {
                        self.complete(usize::MAX, &[]);
                    }
                }
                Action::Close => self.closed = true,
            }
        }
    }

    fn grant(&mut self, n: usize) {
        for _ in 0..n.min(self.waiting.len()) {
            let (slot, len) = self.waiting.remove(0);
            if self.conn.slot_state(slot) != Some(SlotState::AwaitBuffer) {
                continue;
            }
            self.bufs.0.insert(slot, vec![0; len as usize]);
            self.conn
                .buffer_ready(slot)
                .expect("buffer_ready after NeedBuffer");
        }
    }

    fn complete(&mut self, n: usize, how: &[u8]) {
        for i in 0..n.min(self.executing.len()) {
            let slot = self.executing.remove(0);
            let sqe = *self.conn.sqe(slot).expect("executing command");
            let b = how.get(i).copied().unwrap_or(0);
            let status = if b & 0x80 != 0 {
                Status::INVALID_FIELD
            } else {
                Status::SUCCESS
            };
            let c2h = match b & 3 {
                0 => u32::MAX,
                1 => 0,
                2 => 512,
                _ => 1,
            };
            let mut cqe = Cqe::for_command(&sqe, 1, 0xFFFF, status);
            cqe.dw0 = u32::from(b & 0x40 != 0);
            self.conn
                .complete(slot, cqe, c2h)
                .expect("complete after Execute");
        }
    }

    fn drain(&mut self, n: usize) {
        for _ in 0..n {
            let state = self.conn.state();
            let Some(t) = self.conn.poll_send(&mut self.hdr, &self.bufs) else {
                return;
            };
            assert!(!self.term_sent, "a PDU after the termination request");
            let hdr = self.hdr;
            let wire_hdr = &hdr[..t.header_len];
            if wire_hdr.first() == Some(&(PduType::C2hTermReq as u8)) {
                assert_eq!(state, ConnState::Terminating);
                self.term_sent = true;
            }
            let mut wire = wire_hdr.to_vec();
            if let Some(d) = t.data {
                assert!(
                    self.outstanding(d.slot) || t.release == Some(d.slot),
                    "data of a free slot"
                );
                let b = self.bufs.0.get(&d.slot).expect("data without a buffer");
                let end = d.offset as usize + d.len as usize;
                assert!(end <= b.len(), "data beyond the buffer");
                wire.extend_from_slice(&b[d.offset as usize..end]);
            }
            if let Some(dd) = t.ddgst {
                wire.extend_from_slice(&dd);
            }
            if let Some(s) = t.release {
                assert!(!self.outstanding(s), "released slot still held");
                self.bufs.0.remove(&s);
                self.asked.remove(&s);
            }
            self.host_reads(&wire);
        }
    }

    /// The controller's output must be a valid PDU stream for a host.
    fn host_reads(&mut self, mut wire: &[u8]) {
        loop {
            let (n, ev) = self.host.read(wire);
            wire = &wire[n..];
            match ev {
                ReadEvent::NeedMore => return,
                ReadEvent::Header {
                    pdu: Pdu::IcResp(r),
                    ..
                } => {
                    let f = self.conn.tx_framing();
                    assert_eq!(r.digests, f.digests, "ICResp echoes the digests");
                    self.host.set_framing(f);
                }
                ReadEvent::End { data_digest_ok } => {
                    assert!(data_digest_ok, "the controller's data digest is right")
                }
                ReadEvent::Header { .. } | ReadEvent::Data(_) => {}
                ReadEvent::Fatal(f) => panic!("the controller sent a malformed PDU: {f}"),
                ReadEvent::Abort => panic!("the controller sent a bad termination request"),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sel = b.u8();
    let cfg_byte = b.u8();
    let rest = b.take(b.len());

    // The reader on the whole input, both roles, before and after the IC exchange.
    let framing = Framing {
        digests: Digests::from_byte(sel),
        pda: (sel >> 2) & 31,
    };
    for (role, f) in [
        (Role::Controller, None),
        (Role::Controller, Some(framing)),
        (Role::Host, Some(framing)),
    ] {
        reader_properties(role, f, rest, usize::from(cfg_byte % 17) + 1);
    }

    // The connection.
    let max_io = [8192u32, 65536, 131072][usize::from(cfg_byte % 3)];
    let cfg = Config {
        queue_depth: [2u16, 4, 16, 128][usize::from((cfg_byte >> 2) & 3)],
        in_capsule_data_size: if cfg_byte & 0x10 != 0 { 4096 } else { 8192 },
        max_io_size: max_io,
        maxh2cdata: if cfg_byte & 0x20 != 0 { 4096 } else { max_io },
        r2t_size: if cfg_byte & 0x40 != 0 { 4096 } else { max_io },
        max_r2t_per_command: if cfg_byte & 0x80 != 0 { 4 } else { 1 },
        c2h_chunk: if sel & 0x40 != 0 { 1000 } else { max_io },
        c2h_success: sel & 0x80 != 0,
        cpda: 0,
    };
    let Ok(conn) = Connection::new(cfg) else {
        return;
    };
    let mut h = Harness {
        conn,
        bufs: Bufs::default(),
        waiting: Vec::new(),
        asked: BTreeMap::new(),
        executing: Vec::new(),
        host: PduReader::new(Role::Host),
        closed: false,
        term_sent: false,
        hdr: [0; MAX_ENCODED_HEADER],
    };
    let buffers_at_once = sel & 0x10 == 0;
    let complete_at_once = sel & 0x20 == 0;
    let mut r = Bytes::new(rest);
    let mut steps = 0;
    while !r.is_empty() && steps < 256 {
        steps += 1;
        let op = r.u8();
        let len = r.u16();
        match op & 3 {
            0 => {
                let bytes = r.take(usize::from(len));
                let piece = usize::from(op >> 2);
                let pieces: Vec<&[u8]> = if piece == 0 {
                    vec![bytes]
                } else {
                    bytes.chunks(piece).collect()
                };
                for p in pieces {
                    let mut at = 0;
                    loop {
                        let before = h.conn.state();
                        let n = h.conn.recv(&p[at..], &mut h.bufs);
                        at += n;
                        if matches!(before, ConnState::Terminating | ConnState::Closed) {
                            assert_eq!(at, p.len(), "a closing connection drops everything");
                        }
                        h.actions(buffers_at_once, complete_at_once);
                        if at == p.len() {
                            break;
                        }
                        // Stopped early: only to wait for a buffer it asked for.
                        assert!(
                            h.waiting
                                .iter()
                                .any(|(s, _)| h.conn.slot_state(*s) == Some(SlotState::AwaitBuffer))
                                || n > 0,
                            "recv stopped without waiting for a buffer"
                        );
                        if n == 0 {
                            h.grant(usize::MAX);
                            h.actions(buffers_at_once, complete_at_once);
                        }
                    }
                }
            }
            1 => {
                h.grant(usize::from(len));
                h.actions(buffers_at_once, complete_at_once);
            }
            2 => {
                let how = r.take(usize::from(len & 0xFF));
                h.complete(usize::from(len), how);
                h.actions(buffers_at_once, complete_at_once);
            }
            _ => h.drain(usize::from(len)),
        }
        assert!(h.conn.outstanding() <= usize::from(cfg.queue_depth));
        if h.conn.state() == ConnState::Terminating {
            // The termination request is the next PDU, then Close.
            h.drain(1);
            assert!(h.term_sent);
            h.actions(buffers_at_once, complete_at_once);
            assert!(h.closed);
        }
    }
    // Settle: every buffer, every completion, every PDU.
    for _ in 0..4 {
        h.grant(usize::MAX);
        h.actions(true, true);
        h.complete(usize::MAX, &[]);
        h.actions(true, true);
        h.drain(usize::MAX);
    }
    if h.closed {
        assert!(h.conn.poll_send(&mut h.hdr, &h.bufs).is_none());
    }
});
