//! The host side of one NVMe/TCP connection, sans-I/O: for unit tests against
//! [`crate::conn::Connection`], and for the Rust NVMe/TCP test host.
//!
//! It behaves like the Linux `nvme-tcp` host (drivers/nvme/host/tcp.c): ICReq with HPDA and
//! MAXR2T as configured (Linux: 0 and 0), checks of ICResp as Linux makes them (PFV 0, digests
//! echoed, MAXH2CDATA a multiple of 4 and at least 4096), write data in-capsule when it fits
//! (8 KiB for fabrics commands and on the admin queue, the I/O queue's in-capsule size
//! otherwise) and through R2T/H2CData split at MAXH2CDATA otherwise, C2HData in order with the
//! SUCCESS flag honoured, and "short data-in" detection. Unlike Linux it also checks R2T limits
//! (MAXR2T) and C2HData offsets, and answers protocol errors with an H2CTermReq.
//!
//! It is a test tool: it allocates per command (data vectors, a map of commands).

use std::collections::{BTreeMap, VecDeque};

use target_core::nvme::spec::admin_opc;
use target_core::nvme::{Cqe, SglDescriptor, Sqe, Status};

use crate::pdu::{
    ADMIN_IN_CAPSULE_DATA, C2hData, CapsuleCmd, DataDigest, Digests, Fatal, Fes, Framing, H2cData,
    IcReq, IcResp, MAX_ENCODED_HEADER, MAX_PDA, MIN_MAXH2CDATA, PFV_1_0, Pdu, PduReader, PduType,
    R2t, ReadEvent, Role, TermReq,
};

/// How the host connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// Digests to ask for.
    pub digests: Digests,
    /// HPDA to ask for (0's based dwords).
    pub hpda: u8,
    /// MAXR2T to announce (0's based: 0 = one outstanding R2T per command).
    pub maxr2t: u32,
    /// In-capsule data for commands other than fabrics ones: IOCCSZ·16 − 64 on an I/O queue,
    /// 8 KiB on the admin queue.
    pub in_capsule_limit: u32,
    /// Queue id (SQID of synthesized completions for SUCCESS C2HData).
    pub qid: u16,
}

impl Default for HostConfig {
    /// The Linux host on an I/O queue of a target with 4 KiB of in-capsule data, no digests.
    fn default() -> Self {
        HostConfig {
            digests: Digests::default(),
            hpda: 0,
            maxr2t: 0,
            in_capsule_limit: 4096,
            qid: 1,
        }
    }
}

/// Why the host gave up on the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostError {
    /// The controller sent a C2HTermReq.
    Terminated {
        /// Its Fatal Error Status (raw).
        fes: u16,
        /// Its Fatal Error Information.
        fei: u32,
        /// The offending header it carried.
        error_data: Vec<u8>,
    },
    /// A PDU header was malformed: the host sent an H2CTermReq with this status.
    Malformed(Fatal),
    /// The controller broke a rule the host checks (the message names it); the host sent an
    /// H2CTermReq.
    Protocol(&'static str),
    /// The host was used wrongly (submitting before the connection is up, a CID in use).
    Usage(&'static str),
}

/// A finished command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Its completion: from the response capsule, or made up for a SUCCESS C2HData.
    pub cqe: Cqe,
    /// Data read (controller-to-host commands).
    pub data: Vec<u8>,
    /// It was completed by the SUCCESS flag of its last C2HData PDU.
    pub by_success_flag: bool,
}

#[derive(Clone, Debug)]
enum Payload {
    None,
    Write(Vec<u8>),
    Read { buf: Vec<u8>, received: u32 },
}

#[derive(Clone, Debug)]
struct Cmd {
    payload: Payload,
    in_capsule: bool,
    /// Bytes of write data sent in H2CData PDUs.
    sent: u32,
    /// R2Ts received and not yet answered.
    r2ts_pending: u32,
    /// Status forced by a data digest error.
    status: Option<Status>,
}

/// Host connection states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostState {
    /// ICReq sent, waiting for ICResp.
    AwaitIcResp,
    /// Commands can be submitted.
    Live,
    /// The connection failed.
    Failed(HostError),
}

/// The data PDU being received.
#[derive(Clone, Debug)]
enum Rx {
    None,
    C2h { cid: u16, offset: u32, d: C2hData },
    Term { fes: u16, fei: u32, data: Vec<u8> },
}

/// One host connection.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    state: HostState,
    reader: PduReader,
    tx: Framing,
    maxh2cdata: u32,
    cmds: BTreeMap<u16, Cmd>,
    r2ts: VecDeque<R2t>,
    out: Vec<u8>,
    done: VecDeque<Completion>,
    rx: Rx,
    /// R2Ts received, in all.
    pub r2ts_received: u64,
    /// Most R2Ts one command had pending at once.
    pub max_r2ts_pending: u32,
    /// C2HData PDUs received.
    pub c2h_received: u64,
}

impl Host {
    /// A host that has queued its ICReq.
    pub fn new(cfg: HostConfig) -> Host {
        let mut h = Host {
            cfg,
            state: HostState::AwaitIcResp,
            reader: PduReader::new(Role::Host),
            tx: Framing::default(),
            maxh2cdata: 0,
            cmds: BTreeMap::new(),
            r2ts: VecDeque::new(),
            out: Vec::new(),
            done: VecDeque::new(),
            rx: Rx::None,
            r2ts_received: 0,
            max_r2ts_pending: 0,
            c2h_received: 0,
        };
        let req = IcReq {
            pfv: PFV_1_0,
            hpda: cfg.hpda,
            digests: cfg.digests,
            maxr2t: cfg.maxr2t,
        };
        h.put(|b| req.encode(b));
        h
    }

    /// The state.
    pub fn state(&self) -> &HostState {
        &self.state
    }

    /// MAXH2CDATA from ICResp.
    pub fn maxh2cdata(&self) -> u32 {
        self.maxh2cdata
    }

    /// Commands submitted and not completed.
    pub fn outstanding(&self) -> usize {
        self.cmds.len()
    }

    /// Appends raw bytes to the output (to send malformed PDUs).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Answers the pending R2Ts with H2CData PDUs and takes everything to send.
    pub fn take_output(&mut self) -> Vec<u8> {
        while let Some(r) = self.r2ts.pop_front() {
            self.answer_r2t(r);
        }
        std::mem::take(&mut self.out)
    }

    /// The next finished command.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    /// Submits a command without data.
    pub fn submit(&mut self, sqe: Sqe) -> Result<(), HostError> {
        self.submit_with(sqe, Payload::None)
    }

    /// Submits a host-to-controller command with its data.
    pub fn submit_write(&mut self, sqe: Sqe, data: Vec<u8>) -> Result<(), HostError> {
        self.submit_with(sqe, Payload::Write(data))
    }

    /// Submits a controller-to-host command reading `len` bytes.
    pub fn submit_read(&mut self, sqe: Sqe, len: u32) -> Result<(), HostError> {
        self.submit_with(
            sqe,
            Payload::Read {
                buf: vec![0; len as usize],
                received: 0,
            },
        )
    }

    fn submit_with(&mut self, mut sqe: Sqe, payload: Payload) -> Result<(), HostError> {
        if self.state != HostState::Live {
            return Err(HostError::Usage("the connection is not live"));
        }
        let cid = sqe.cid();
        if self.cmds.contains_key(&cid) {
            return Err(HostError::Usage("CID in use"));
        }
        let limit = if sqe.opcode() == admin_opc::FABRICS {
            ADMIN_IN_CAPSULE_DATA
        } else {
            self.cfg.in_capsule_limit
        };
        let (in_capsule, len) = match &payload {
            Payload::None => (false, 0),
            Payload::Write(d) => (d.len() as u32 <= limit, d.len() as u32),
            Payload::Read { buf, .. } => (false, buf.len() as u32),
        };
        let icd = if in_capsule && len > 0 { len } else { 0 };
        sqe.set_sgl1(if icd > 0 {
            SglDescriptor::unkeyed(0, 1, 0, len)
        } else {
            SglDescriptor::transport(len)
        });
        let tx = self.tx;
        self.put(|b| CapsuleCmd { sqe }.encode(&tx, icd, b));
        if let (Payload::Write(d), true) = (&payload, icd > 0) {
            self.out.extend_from_slice(d);
            if tx.digests.data {
                let mut dg = DataDigest::new();
                dg.update(d);
                self.out.extend_from_slice(&dg.value().to_le_bytes());
            }
        }
        self.cmds.insert(
            cid,
            Cmd {
                payload,
                in_capsule: icd > 0,
                sent: 0,
                r2ts_pending: 0,
                status: None,
            },
        );
        Ok(())
    }

    /// Feeds bytes from the controller.
    pub fn recv(&mut self, mut input: &[u8]) -> Result<(), HostError> {
        loop {
            if let HostState::Failed(e) = &self.state {
                return Err(e.clone());
            }
            let (n, ev) = self.reader.read(input);
            input = &input[n..];
            let r = match ev {
                ReadEvent::NeedMore => return Ok(()),
                ReadEvent::Header { pdu, .. } => self.on_header(pdu),
                ReadEvent::Data(d) => self.on_data(d),
                ReadEvent::End { data_digest_ok } => self.on_end(data_digest_ok),
                ReadEvent::Fatal(f) => Err(HostError::Malformed(f)),
                ReadEvent::Abort => Err(HostError::Protocol("termination request of bad length")),
            };
            if let Err(e) = r {
                self.fail(e.clone());
                return Err(e);
            }
        }
    }

    fn fail(&mut self, e: HostError) {
        if matches!(self.state, HostState::Failed(_)) {
            return;
        }
        let (fes, fei) = match &e {
            HostError::Terminated { .. } | HostError::Usage(_) => {
                self.state = HostState::Failed(e);
                return;
            }
            HostError::Malformed(f) => (f.fes, f.fei),
            HostError::Protocol(m) if m.contains("R2T limit") => {
                (Fes::DataTransferLimitExceeded, 0)
            }
            HostError::Protocol(m) if m.contains("range") => (Fes::DataTransferOutOfRange, 0),
            HostError::Protocol(_) => (Fes::PduSequenceError, 0),
        };
        let hdr = self.reader.header_bytes().to_vec();
        self.put(|b| TermReq::new(fes, fei).encode(PduType::H2cTermReq, &hdr, b));
        self.state = HostState::Failed(e);
    }

    fn on_header(&mut self, pdu: Pdu) -> Result<(), HostError> {
        self.rx = Rx::None;
        match pdu {
            Pdu::IcResp(r) => self.on_icresp(r),
            Pdu::C2hTermReq(t) => {
                self.rx = Rx::Term {
                    fes: t.fes,
                    fei: t.fei,
                    data: Vec::new(),
                };
                Ok(())
            }
            Pdu::CapsuleResp(r) => {
                let cid = r.cqe.cid;
                let Some(c) = self.cmds.remove(&cid) else {
                    return Err(HostError::Protocol("response for an unknown CID"));
                };
                let mut cqe = r.cqe;
                if cqe.status == Status::SUCCESS
                    && let Some(s) = c.status
                {
                    cqe.status = s;
                }
                let data = match c.payload {
                    Payload::Read { buf, received } => {
                        if cqe.status == Status::SUCCESS && received as usize != buf.len() {
                            return Err(HostError::Protocol("short data-in"));
                        }
                        buf
                    }
                    _ => Vec::new(),
                };
                self.done.push_back(Completion {
                    cqe,
                    data,
                    by_success_flag: false,
                });
                Ok(())
            }
            Pdu::R2t(r) => self.on_r2t(r),
            Pdu::C2hData(d) => {
                self.c2h_received += 1;
                let Some(c) = self.cmds.get(&d.cccid) else {
                    return Err(HostError::Protocol("C2HData for an unknown CID"));
                };
                let Payload::Read { buf, received } = &c.payload else {
                    return Err(HostError::Protocol(
                        "C2HData for a command that reads nothing",
                    ));
                };
                if d.datao != *received {
                    return Err(HostError::Protocol("C2HData offset out of range"));
                }
                if u64::from(d.datao) + u64::from(d.datal) > buf.len() as u64 {
                    return Err(HostError::Protocol(
                        "C2HData beyond the buffer: out of range",
                    ));
                }
                self.rx = Rx::C2h {
                    cid: d.cccid,
                    offset: d.datao,
                    d,
                };
                Ok(())
            }
            Pdu::IcReq(_) | Pdu::H2cTermReq(_) | Pdu::CapsuleCmd(_) | Pdu::H2cData(_) => {
                Err(HostError::Malformed(Fatal::field(0)))
            }
        }
    }

    fn on_icresp(&mut self, r: IcResp) -> Result<(), HostError> {
        if r.pfv != PFV_1_0 {
            return Err(HostError::Protocol("ICResp PFV"));
        }
        if r.digests != self.cfg.digests {
            return Err(HostError::Protocol("header/data digest mismatch"));
        }
        if r.cpda > MAX_PDA {
            return Err(HostError::Protocol("unsupported CPDA"));
        }
        if r.maxh2cdata < MIN_MAXH2CDATA || !r.maxh2cdata.is_multiple_of(4) {
            return Err(HostError::Protocol("invalid MAXH2CDATA"));
        }
        self.maxh2cdata = r.maxh2cdata;
        self.tx = Framing {
            digests: self.cfg.digests,
            pda: r.cpda,
        };
        self.reader.set_framing(Framing {
            digests: self.cfg.digests,
            pda: self.cfg.hpda,
        });
        self.state = HostState::Live;
        Ok(())
    }

    fn on_r2t(&mut self, r: R2t) -> Result<(), HostError> {
        self.r2ts_received += 1;
        let limit = self.cfg.maxr2t.saturating_add(1);
        let Some(c) = self.cmds.get_mut(&r.cccid) else {
            return Err(HostError::Protocol("R2T for an unknown CID"));
        };
        let Payload::Write(d) = &c.payload else {
            return Err(HostError::Protocol("R2T for a command that writes nothing"));
        };
        if c.in_capsule {
            return Err(HostError::Protocol("R2T for in-capsule data"));
        }
        if r.r2tl == 0 {
            return Err(HostError::Protocol("R2T of length 0"));
        }
        let end = u64::from(r.r2to) + u64::from(r.r2tl);
        if end > d.len() as u64 {
            return Err(HostError::Protocol("R2T beyond the data: out of range"));
        }
        c.r2ts_pending += 1;
        if c.r2ts_pending > limit {
            return Err(HostError::Protocol("R2T limit exceeded"));
        }
        self.max_r2ts_pending = self.max_r2ts_pending.max(c.r2ts_pending);
        self.r2ts.push_back(r);
        Ok(())
    }

    /// Sends the H2CData PDUs answering `r`, split at MAXH2CDATA.
    fn answer_r2t(&mut self, r: R2t) {
        let tx = self.tx;
        let max = self.maxh2cdata.max(1);
        let Some(c) = self.cmds.get_mut(&r.cccid) else {
            return;
        };
        c.r2ts_pending = c.r2ts_pending.saturating_sub(1);
        let Payload::Write(d) = &c.payload else {
            return;
        };
        let data = d[r.r2to as usize..(r.r2to + r.r2tl) as usize].to_vec();
        c.sent += r.r2tl;
        let mut off = 0u32;
        while off < r.r2tl {
            let len = (r.r2tl - off).min(max);
            let h = H2cData {
                cccid: r.cccid,
                ttag: r.ttag,
                datao: r.r2to + off,
                datal: len,
                last: off + len == r.r2tl,
            };
            self.put(|b| h.encode(&tx, b));
            let piece = &data[off as usize..(off + len) as usize];
            self.out.extend_from_slice(piece);
            if tx.digests.data {
                let mut dg = DataDigest::new();
                dg.update(piece);
                self.out.extend_from_slice(&dg.value().to_le_bytes());
            }
            off += len;
        }
    }

    fn on_data(&mut self, piece: &[u8]) -> Result<(), HostError> {
        if let Rx::Term { data, .. } = &mut self.rx {
            data.extend_from_slice(piece);
            return Ok(());
        }
        if let Rx::C2h { cid, offset, .. } = &mut self.rx
            && let Some(Cmd {
                payload: Payload::Read { buf, received },
                ..
            }) = self.cmds.get_mut(cid)
        {
            let at = *offset as usize;
            buf[at..at + piece.len()].copy_from_slice(piece);
            *offset += piece.len() as u32;
            *received += piece.len() as u32;
        }
        Ok(())
    }

    fn on_end(&mut self, digest_ok: bool) -> Result<(), HostError> {
        let rx = std::mem::replace(&mut self.rx, Rx::None);
        let (cid, d) = match rx {
            Rx::None => return Ok(()),
            Rx::Term { fes, fei, data } => {
                // The controller closes after this; the host stops here.
                self.state = HostState::Failed(HostError::Terminated {
                    fes,
                    fei,
                    error_data: data,
                });
                return Ok(());
            }
            Rx::C2h { cid, d, .. } => (cid, d),
        };
        let qid = self.cfg.qid;
        let Some(c) = self.cmds.get_mut(&cid) else {
            return Ok(());
        };
        if !digest_ok {
            // As Linux: the command fails with Data Transfer Error.
            c.status = Some(Status::DATA_TRANSFER_ERROR);
        }
        if d.success {
            let c = self.cmds.remove(&cid).expect("present");
            let Payload::Read { buf, received } = c.payload else {
                return Ok(());
            };
            if received as usize != buf.len() {
                return Err(HostError::Protocol("short data-in"));
            }
            self.done.push_back(Completion {
                cqe: Cqe {
                    dw0: 0,
                    dw1: 0,
                    sqhd: 0,
                    sqid: qid,
                    cid,
                    status: c.status.unwrap_or(Status::SUCCESS),
                },
                data: buf,
                by_success_flag: true,
            });
        }
        Ok(())
    }

    fn put(&mut self, f: impl FnOnce(&mut [u8]) -> Result<usize, crate::pdu::BufferTooSmall>) {
        let mut b = [0u8; MAX_ENCODED_HEADER];
        if let Ok(n) = f(&mut b) {
            self.out.extend_from_slice(&b[..n]);
        }
    }
}
