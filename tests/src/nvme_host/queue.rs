//! One host queue: an RDMA connection speaking the NVMe/RDMA binding.
//!
//! The host side of the wire, written from the specification like Linux's nvme-rdma: connect
//! through RDMA CM with the 32-byte private data, post 16-byte receives for responses, send
//! 64-byte command capsules (plus in-capsule data), and describe data with keyed SGLs over its
//! own registered memory — optionally through memory windows that the target must invalidate
//! remotely (SGL subtype 0xF, checked against the receive completion like Linux does).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fabric::{
    Access, BindMw, CmEventKind, CmId, CompChannel, ConnParam, Cq, EventChannel, Fabric, Mr, Mw,
    Pd, Qp, QpCap, QpInit, RecvWr, SendWr, Sge, SgeList, WcStatus, WorkCompletion,
};
use iobuf::IoBuf;
use target_core::nvme::{Cqe, SglDescriptor, Sqe};
use transport_rdma::cm_data::{ConnectRequestData, RejectStatus, decode_accept};

/// How long to wait for anything (events, completions).
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Why a host operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// The target rejected the RDMA connection; the NVMe/RDMA reject status, if any.
    Rejected(Option<u16>),
    /// A connection-manager step failed.
    Cm(String),
    /// Nothing happened in time.
    Timeout(String),
    /// A work request failed.
    Wc(WcStatus),
    /// The command completed with an error status.
    Nvme(Cqe),
    /// Every command slot is in use.
    Full,
    /// The queue is disconnected.
    Disconnected,
    /// The target broke the protocol (wrong CID, bogus invalidation, bad length...).
    Protocol(String),
    /// DH-HMAC-CHAP failed (the reason from AUTH_Failure1, or the host's own).
    Auth(target_core::nvme::auth::FailureReason),
    /// The controller requires authentication and the host has no key (Linux: -EKEYREJECTED).
    NoKey,
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for HostError {}

/// Data of a command.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    /// No data: the null keyed descriptor.
    None,
    /// Host-to-controller data sent in the capsule (SGL 0x01).
    InCapsule(&'a [u8]),
    /// Host-to-controller data fetched by the target with RDMA READ.
    KeyedWrite {
        /// The bytes.
        bytes: &'a [u8],
        /// Through a memory window the target must invalidate (SGL 0x4F).
        invalidate: bool,
    },
    /// Host-to-controller data fetched by the target with RDMA READ from whatever the command
    /// slot's data buffer holds (benchmarks: no copy on the host).
    KeyedWriteInPlace {
        /// Length.
        len: u32,
    },
    /// Controller-to-host data the target RDMA WRITEs.
    KeyedRead {
        /// Length.
        len: u32,
        /// Through a memory window the target must invalidate (SGL 0x4F).
        invalidate: bool,
    },
    /// A hand-made SGL1 and in-capsule bytes (for malformed-command tests). Keyed addresses
    /// are used as given.
    Raw {
        /// SGL1.
        sgl: SglDescriptor,
        /// Bytes after the SQE in the capsule.
        capsule: &'a [u8],
    },
}

/// A completed command.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The completion entry.
    pub cqe: Cqe,
    /// For reads: the data the target wrote.
    pub data: Vec<u8>,
    /// The rkey the target invalidated with its response, if any.
    pub invalidated: Option<u32>,
}

impl Completion {
    /// `Ok(self)` on success, the CQE as an error otherwise.
    pub fn ok(self) -> Result<Completion, HostError> {
        if self.cqe.status.is_success() {
            Ok(self)
        } else {
            Err(HostError::Nvme(self.cqe))
        }
    }
}

/// Queue parameters.
#[derive(Debug, Clone, Copy)]
pub struct QueueOpts {
    /// Queue id announced in the private data.
    pub qid: u16,
    /// Entries (HSQSIZE + 1).
    pub depth: u16,
    /// Largest data transfer per command (sizes the data region).
    pub max_io: usize,
    /// Largest in-capsule payload the host may send.
    pub max_in_capsule: usize,
    /// Controller id announced in the private data.
    pub cntlid: u16,
}

impl Default for QueueOpts {
    fn default() -> Self {
        Self {
            qid: 0,
            depth: 32,
            max_io: 8192,
            max_in_capsule: 8192,
            cntlid: 0,
        }
    }
}

/// How to connect at the RDMA level (for negative tests).
#[derive(Debug, Clone, Default)]
pub struct CmOverride {
    /// Private data to send instead of the proper record.
    pub private_data: Option<Vec<u8>>,
    /// Responder resources to offer (default 16; 0 makes the target reject IRD).
    pub responder_resources: Option<u8>,
}

const K_SEND: u64 = 1 << 60;
const K_RECV: u64 = 2 << 60;
const K_BIND: u64 = 3 << 60;
const KIND: u64 = 0xF << 60;

#[derive(Debug, Default)]
struct Slot {
    busy: bool,
    cid: u16,
    epoch: u16,
    sent: bool,
    done: Option<(Cqe, Option<u32>)>,
    read_len: u32,
    rkey: Option<u32>,
    invalidate: bool,
}

/// A connected host queue.
pub struct HostQueue {
    ch: EventChannel,
    id: CmId,
    qp: Qp,
    _pd: Pd,
    cq: Cq,
    comp: CompChannel,
    opts: QueueOpts,
    /// CRQSIZE from the accept.
    pub crqsize: u16,
    cmd: IoBuf,
    cmd_mr: Mr,
    cap_size: usize,
    rsp: IoBuf,
    rsp_mr: Mr,
    data: IoBuf,
    data_mr: Mr,
    mws: Vec<Mw>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    disconnected: bool,
    idle_polls: u64,
    /// Completions that arrived for no outstanding command (protocol errors).
    pub stray: Vec<Cqe>,
    wcs: [WorkCompletion; 32],
    /// Benchmark mode: no read poisoning, completions queued for [`HostQueue::pop_done`],
    /// commands posted by [`HostQueue::flush`].
    bench: bool,
    done_ring: std::collections::VecDeque<u16>,
    /// Benchmark mode: sends posted unsignaled since the last signaled one, and how many
    /// make a signaled one (well under the send queue's size).
    unsignaled: u32,
    signal_every: u32,
    unposted: Vec<SendWr>,
    unposted_recvs: Vec<RecvWr>,
}

/// In benchmark mode, one send in this many is signaled: 16, or fewer on a send queue too small
/// to hold the commands in flight plus 16 unretired sends (its size is `3 · depth + 4`).
fn bench_signal_interval(max_send_wr: u32) -> u32 {
    (max_send_wr / 4).clamp(1, 16)
}

fn next_event(ch: &EventChannel, deadline: Instant) -> Result<fabric::CmEvent, HostError> {
    loop {
        if let Some(e) = ch.get_event().map_err(|e| HostError::Cm(e.to_string()))? {
            return Ok(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HostError::Timeout("connection-manager event".into()));
        }
        let _ = fabric::wait_readable(ch.fd(), left.min(Duration::from_millis(50)));
    }
}

impl HostQueue {
    /// Connects a queue to `to` from `src`.
    pub fn connect(
        fabric: &Fabric,
        src: Option<SocketAddr>,
        to: SocketAddr,
        opts: QueueOpts,
        cm: &CmOverride,
    ) -> Result<HostQueue, HostError> {
        let cm_err = |what: &str, e: fabric::FabricError| HostError::Cm(format!("{what}: {e}"));
        let deadline = Instant::now() + TIMEOUT;
        let ch = fabric
            .create_event_channel()
            .map_err(|e| cm_err("event channel", e))?;
        let id = ch.create_id().map_err(|e| cm_err("create_id", e))?;
        id.resolve_addr(src, to, 3000)
            .map_err(|e| cm_err("resolve_addr", e))?;
        let e = next_event(&ch, deadline)?;
        if !matches!(e.kind, CmEventKind::AddrResolved) {
            return Err(HostError::Cm(format!("resolve: {:?}", e.kind)));
        }
        let dev = id
            .device()
            .ok_or_else(|| HostError::Cm("no device".into()))?;
        let pd = dev.alloc_pd().map_err(|e| cm_err("alloc_pd", e))?;
        let depth = usize::from(opts.depth.max(1));
        // A completion channel, so that a benchmark host can sleep until a completion
        // ([`HostQueue::wait_completion`]) as a kernel host does on its interrupt.
        let comp = dev
            .create_comp_channel()
            .map_err(|e| cm_err("create_comp_channel", e))?;
        let cq = dev
            .create_cq((depth * 4 + 16) as u32, Some(&comp))
            .map_err(|e| cm_err("create_cq", e))?;
        let qp = id
            .create_qp(&QpInit {
                pd: &pd,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: (depth * 3 + 4) as u32,
                    max_recv_wr: (depth + 1) as u32,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| cm_err("create_qp", e))?;
        id.resolve_route(3000)
            .map_err(|e| cm_err("resolve_route", e))?;
        let e = next_event(&ch, deadline)?;
        if !matches!(e.kind, CmEventKind::RouteResolved) {
            return Err(HostError::Cm(format!("route: {:?}", e.kind)));
        }
        let reg = |len: usize, a: Access| -> Result<(IoBuf, Mr), HostError> {
            let b = IoBuf::alloc(len.max(64)).map_err(|e| HostError::Cm(e.to_string()))?;
            let mr = pd
                .register(b.region(), a)
                .map_err(|e| cm_err("register", e))?;
            Ok((b, mr))
        };
        let cap_size = 64 + opts.max_in_capsule;
        let (cmd, cmd_mr) = reg(depth * cap_size, Access::LOCAL_WRITE)?;
        let (rsp, rsp_mr) = reg(depth * 16, Access::LOCAL_WRITE)?;
        let (data, data_mr) = reg(
            depth * opts.max_io,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::MW_BIND,
        )?;
        let mut mws = Vec::with_capacity(depth);
        for _ in 0..depth {
            mws.push(pd.alloc_mw().map_err(|e| cm_err("alloc_mw", e))?);
        }
        // The host's receives for responses: 16 bytes each, like Linux.
        let wrs: Vec<RecvWr> = (0..depth)
            .map(|i| {
                RecvWr::new(
                    K_RECV | i as u64,
                    SgeList::one(rsp_mr.sge(rsp.addr() + (i * 16) as u64, 16)),
                )
            })
            .collect();
        qp.post_recv(wrs.iter())
            .map_err(|e| HostError::Cm(format!("post_recv: {e}")))?;
        let record = ConnectRequestData {
            recfmt: 0,
            qid: opts.qid,
            hrqsize: opts.depth,
            hsqsize: opts.depth - 1,
            cntlid: opts.cntlid,
        }
        .encode();
        let pdata = cm.private_data.clone().unwrap_or_else(|| record.to_vec());
        id.connect(&ConnParam {
            private_data: &pdata,
            responder_resources: cm.responder_resources.unwrap_or(16),
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
        })
        .map_err(|e| cm_err("connect", e))?;
        let e = next_event(&ch, deadline)?;
        let crqsize = match e.kind {
            CmEventKind::Established { private_data, .. } => {
                decode_accept(&private_data).unwrap_or(0)
            }
            CmEventKind::Rejected { private_data } => {
                return Err(HostError::Rejected(RejectStatus::decode(&private_data)));
            }
            other => return Err(HostError::Cm(format!("connect: {other:?}"))),
        };
        let signal_every = bench_signal_interval(qp.cap().max_send_wr);
        Ok(HostQueue {
            ch,
            id,
            qp,
            _pd: pd,
            cq,
            comp,
            opts,
            crqsize,
            cmd,
            cmd_mr,
            cap_size,
            rsp,
            rsp_mr,
            data,
            data_mr,
            mws,
            slots: (0..depth).map(|_| Slot::default()).collect(),
            free: (0..depth).rev().collect(),
            disconnected: false,
            idle_polls: 0,
            stray: Vec::new(),
            wcs: [WorkCompletion::default(); 32],
            bench: false,
            done_ring: std::collections::VecDeque::with_capacity(depth),
            unsignaled: 0,
            signal_every,
            unposted: Vec::with_capacity(depth),
            unposted_recvs: Vec::with_capacity(depth),
        })
    }

    /// Benchmark mode (for `rtgt-bench`): reads are not poisoned, completed CIDs queue up for
    /// [`HostQueue::pop_done`] (so a driver need not scan its commands), and submitted
    /// commands and reposted receives wait for [`HostQueue::flush`] to post them in one call. Nothing allocates per
    /// command in this mode.
    pub fn set_bench_mode(&mut self, on: bool) {
        self.bench = on;
    }

    /// Posts the receives and commands queued in benchmark mode (receives first, so that
    /// every response finds one); returns how many commands.
    pub fn flush(&mut self) -> Result<usize, HostError> {
        if !self.unposted_recvs.is_empty() {
            let r = self.qp.post_recv(self.unposted_recvs.iter());
            self.unposted_recvs.clear();
            r.map_err(|e| HostError::Protocol(format!("repost: {e}")))?;
        }
        let n = self.unposted.len();
        if n > 0 {
            let r = self.qp.post_send(self.unposted.iter());
            self.unposted.clear();
            r.map_err(|e| HostError::Protocol(format!("post_send: {e}")))?;
        }
        Ok(n)
    }

    /// Before a benchmark host sleeps (it has nothing to submit; a kernel host waits for its
    /// interrupt instead of polling): arms the completion queue so that its next completion
    /// makes [`HostQueue::completion_fd`] readable, then polls once more, since completions
    /// that came before arming raise no event. Returns how many that poll handled (sleep only
    /// if none); call [`HostQueue::ack_completion_events`] after the sleep.
    pub fn arm_completion(&mut self) -> Result<usize, HostError> {
        self.cq
            .req_notify(false)
            .map_err(|e| HostError::Protocol(format!("req_notify: {e}")))?;
        self.poll()
    }

    /// The completion channel's fd, readable after a completion on an armed queue.
    pub fn completion_fd(&self) -> std::os::fd::RawFd {
        self.comp.fd()
    }

    /// Takes the completion channel's events (after a sleep on [`HostQueue::completion_fd`]).
    pub fn ack_completion_events(&mut self) {
        while let Ok(Some(_)) = self.comp.get_event() {}
    }

    /// The next completed command in benchmark mode, taken (its slot is free again).
    pub fn pop_done(&mut self) -> Option<(u16, Cqe)> {
        while let Some(cid) = self.done_ring.pop_front() {
            if let Some(cqe) = self.take_cqe(cid) {
                return Some((cid, cqe));
            }
        }
        None
    }

    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.opts.qid
    }

    /// Entries.
    pub fn depth(&self) -> u16 {
        self.opts.depth
    }

    /// Commands outstanding.
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether the target disconnected (or we did).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
    }

    /// Sends a command; returns its CID. The SQE's CID is replaced.
    pub fn submit(&mut self, mut sqe: Sqe, data: Data<'_>) -> Result<u16, HostError> {
        if self.disconnected {
            return Err(HostError::Disconnected);
        }
        let Some(i) = self.free.pop() else {
            return Err(HostError::Full);
        };
        let max_io = self.opts.max_io;
        let slot = &mut self.slots[i];
        slot.epoch = (slot.epoch + 1) & 0xF;
        // Like Linux: the upper bits of the CID are a per-tag generation.
        let cid = (i as u16) | slot.epoch << 12;
        slot.busy = true;
        slot.cid = cid;
        slot.sent = false;
        slot.done = None;
        slot.read_len = 0;
        slot.rkey = None;
        slot.invalidate = false;
        sqe.set_cid(cid);
        let data_addr = self.data.addr() + (i * max_io) as u64;
        let mut capsule_extra: &[u8] = &[];
        let keyed = |len: usize, invalidate: bool, slot: &mut Slot| -> Result<u32, HostError> {
            if len > max_io {
                return Err(HostError::Protocol(format!(
                    "{len} bytes > max_io {max_io}"
                )));
            }
            let key = if invalidate {
                self.qp
                    .post_bind_mw(&BindMw {
                        wr_id: K_BIND | i as u64,
                        signaled: false,
                        mw: &self.mws[i],
                        mr: &self.data_mr,
                        addr: data_addr,
                        length: len.max(1) as u64,
                        access: Access::REMOTE_READ | Access::REMOTE_WRITE,
                    })
                    .map_err(|e| HostError::Protocol(format!("bind_mw: {e}")))?
            } else {
                self.data_mr.rkey()
            };
            slot.rkey = Some(key);
            slot.invalidate = invalidate;
            Ok(key)
        };
        match data {
            Data::None => {
                sqe.set_sgl1(SglDescriptor::null_keyed());
            }
            Data::InCapsule(bytes) => {
                sqe.set_sgl1(SglDescriptor::in_capsule(0, bytes.len() as u32));
                capsule_extra = bytes;
            }
            Data::KeyedWrite { bytes, invalidate } => {
                let key = keyed(bytes.len(), invalidate, slot)?;
                let off = i * max_io;
                self.data.as_mut_slice()[off..off + bytes.len()].copy_from_slice(bytes);
                sqe.set_sgl1(SglDescriptor::keyed(
                    data_addr,
                    bytes.len() as u32,
                    key,
                    invalidate,
                ));
            }
            Data::KeyedWriteInPlace { len } => {
                let key = keyed(len as usize, false, slot)?;
                sqe.set_sgl1(SglDescriptor::keyed(data_addr, len, key, false));
            }
            Data::KeyedRead { len, invalidate } => {
                let key = keyed(len as usize, invalidate, slot)?;
                let off = i * max_io;
                // Poison, so that bytes the target did not write show.
                if !self.bench {
                    self.data.as_mut_slice()[off..off + len as usize].fill(0xE5);
                }
                slot.read_len = len;
                sqe.set_sgl1(SglDescriptor::keyed(data_addr, len, key, invalidate));
            }
            Data::Raw { sgl, capsule } => {
                sqe.set_sgl1(sgl);
                capsule_extra = capsule;
            }
        }
        if capsule_extra.len() > self.opts.max_in_capsule {
            return Err(HostError::Protocol("in-capsule data too large".into()));
        }
        let off = i * self.cap_size;
        let buf = self.cmd.as_mut_slice();
        buf[off..off + 64].copy_from_slice(sqe.as_bytes());
        buf[off + 64..off + 64 + capsule_extra.len()].copy_from_slice(capsule_extra);
        let len = 64 + capsule_extra.len();
        let wr = SendWr::send(
            K_SEND | i as u64,
            SgeList::one(self.cmd_mr.sge(self.cmd.addr() + off as u64, len as u32)),
        );
        if self.bench {
            // Only every `signal_every`-th send asks for a completion (the slot is known free
            // once its response arrives; a signaled send retires the unsignaled ones before
            // it from the send queue). Counted over sends, not chosen by slot: slots complete
            // out of order, and a signaled slot held long by the backend (a read waiting on
            // the OSD) would let every other slot's sends fill the send queue.
            self.unsignaled += 1;
            let signaled = self.unsignaled >= self.signal_every;
            if signaled {
                self.unsignaled = 0;
            }
            self.unposted.push(wr.with_signaled(signaled));
            return Ok(cid);
        }
        self.qp
            .post_send([&wr])
            .map_err(|e| HostError::Protocol(format!("post_send: {e}")))?;
        Ok(cid)
    }

    fn slot_of(&self, cid: u16) -> Option<usize> {
        let i = usize::from(cid & 0x0FFF);
        self.slots
            .get(i)
            .filter(|s| s.busy && s.cid == cid)
            .map(|_| i)
    }

    /// Handles completions and connection events; returns how many completions.
    pub fn poll(&mut self) -> Result<usize, HostError> {
        let n = self.cq.poll(&mut self.wcs);
        if n == 0 {
            // Connection events only matter when nothing completes; checking costs a syscall.
            self.idle_polls += 1;
            if self.idle_polls % 64 == 1 {
                while let Ok(Some(e)) = self.ch.get_event() {
                    if matches!(e.kind, CmEventKind::Disconnected) {
                        self.disconnected = true;
                    }
                }
            }
        } else {
            self.idle_polls = 0;
        }
        for k in 0..n {
            let wc = self.wcs[k];
            let i = (wc.wr_id & 0xFFFF) as usize;
            match wc.wr_id & KIND {
                K_SEND => {
                    if !wc.status.is_success() {
                        self.disconnected = true;
                        if wc.status != WcStatus::WrFlushErr {
                            return Err(HostError::Wc(wc.status));
                        }
                    }
                    if let Some(s) = self.slots.get_mut(i) {
                        s.sent = true;
                    }
                }
                K_BIND if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr => {
                    return Err(HostError::Protocol(format!(
                        "memory window bind failed: {:?} (not invalidated by the target?)",
                        wc.status
                    )));
                }
                K_RECV => {
                    if !wc.status.is_success() {
                        self.disconnected = true;
                        if wc.status != WcStatus::WrFlushErr {
                            return Err(HostError::Wc(wc.status));
                        }
                        continue;
                    }
                    if wc.byte_len != 16 {
                        return Err(HostError::Protocol(format!(
                            "response of {} bytes (16 expected)",
                            wc.byte_len
                        )));
                    }
                    let cqe = Cqe::decode(&self.rsp.as_slice()[i * 16..i * 16 + 16])
                        .ok_or_else(|| HostError::Protocol("short CQE".into()))?;
                    let wr = RecvWr::new(
                        K_RECV | i as u64,
                        SgeList::one(self.rsp_mr.sge(self.rsp.addr() + (i * 16) as u64, 16)),
                    );
                    if self.bench {
                        self.unposted_recvs.push(wr);
                    } else {
                        self.qp
                            .post_recv([&wr])
                            .map_err(|e| HostError::Protocol(format!("repost: {e}")))?;
                    }
                    match self.slot_of(cqe.cid) {
                        Some(s) => {
                            let slot = &mut self.slots[s];
                            if let Some(k) = wc.invalidated_rkey
                                && (slot.rkey != Some(k) || !slot.invalidate)
                            {
                                return Err(HostError::Protocol(format!(
                                    "bogus remote invalidation of rkey {k:#x} for CID {:#x}",
                                    cqe.cid
                                )));
                            }
                            slot.done = Some((cqe, wc.invalidated_rkey));
                            if self.bench {
                                self.done_ring.push_back(cqe.cid);
                            }
                        }
                        None => self.stray.push(cqe),
                    }
                }
                _ => {}
            }
        }
        Ok(n)
    }

    /// Whether the command `cid` has completed.
    pub fn is_done(&self, cid: u16) -> bool {
        self.slot_of(cid)
            .is_some_and(|i| self.slots[i].done.is_some())
    }

    /// Polls for `d`; panics if any of `cids` completes meanwhile (a command that must wait,
    /// e.g. while its subsystem is paused).
    pub fn assert_none_complete_for(&mut self, cids: &[u16], d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.poll().expect("host poll");
            for &c in cids {
                assert!(
                    !self.is_done(c),
                    "CID {c:#x} completed while it should wait"
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Takes the completion of `cid` if it has arrived.
    pub fn take(&mut self, cid: u16) -> Option<Completion> {
        let i = self.slot_of(cid)?;
        let (cqe, invalidated) = self.slots[i].done?;
        let s = &mut self.slots[i];
        let off = i * self.opts.max_io;
        let data = self.data.as_slice()[off..off + s.read_len as usize].to_vec();
        s.busy = false;
        self.free.push(i);
        Some(Completion {
            cqe,
            data,
            invalidated,
        })
    }

    /// Takes just the completion entry of `cid` if it has arrived (no data copy, no
    /// allocation: for benchmarks).
    pub fn take_cqe(&mut self, cid: u16) -> Option<Cqe> {
        let i = self.slot_of(cid)?;
        let (cqe, _) = self.slots[i].done?;
        self.slots[i].busy = false;
        self.free.push(i);
        Some(cqe)
    }

    /// Waits for the completion of `cid`.
    pub fn wait(&mut self, cid: u16) -> Result<Completion, HostError> {
        self.wait_for(cid, TIMEOUT)
    }

    /// Waits up to `timeout` for the completion of `cid`.
    pub fn wait_for(&mut self, cid: u16, timeout: Duration) -> Result<Completion, HostError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.take(cid) {
                return Ok(c);
            }
            if self.slot_of(cid).is_none() {
                return Err(HostError::Protocol(format!(
                    "CID {cid:#x} is not outstanding"
                )));
            }
            if self.disconnected {
                return Err(HostError::Disconnected);
            }
            if self.poll()? == 0 {
                if Instant::now() >= deadline {
                    return Err(HostError::Timeout(format!("completion of CID {cid:#x}")));
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Sends one command and waits for it.
    pub fn cmd(&mut self, sqe: Sqe, data: Data<'_>) -> Result<Completion, HostError> {
        let cid = self.submit(sqe, data)?;
        self.wait(cid)
    }

    /// Disconnects at the RDMA level (what Linux does to delete a queue).
    pub fn disconnect(&mut self) {
        if !self.disconnected {
            let _ = self.id.disconnect();
            self.disconnected = true;
        }
    }

    /// Waits until the target disconnects this queue (or `timeout` passes).
    pub fn wait_disconnected(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.disconnected && Instant::now() < deadline {
            if let Err(HostError::Wc(_)) = self.poll() {
                self.disconnected = true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.disconnected
    }

    /// Sends `bytes` as a capsule without tracking a command (malformed-capsule tests; the
    /// bytes go through the first command slot's buffer, so keep nothing outstanding).
    pub fn send_raw_capsule(&mut self, bytes: &[u8]) -> Result<(), HostError> {
        let n = bytes.len().min(self.cmd.len());
        self.cmd.as_mut_slice()[..n].copy_from_slice(&bytes[..n]);
        let wr = SendWr::send(
            K_SEND | 0xFFFF,
            SgeList::one(self.cmd_mr.sge(self.cmd.addr(), n as u32)),
        );
        self.qp
            .post_send([&wr])
            .map_err(|e| HostError::Protocol(format!("post_send: {e}")))
    }

    /// The data region address of a slot (for hand-made SGLs in malformed-command tests) and
    /// the registration's rkey.
    pub fn raw_data_region(&self) -> (u64, u32) {
        (self.data.addr(), self.data_mr.rkey())
    }

    /// Bytes of the data region at `off` (hand-made SGLs: slot 0 is the first `max_io`).
    pub fn data_bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.data.as_slice()[off..off + len]
    }

    /// Writes bytes into the data region at `off`.
    pub fn set_data_bytes(&mut self, off: usize, bytes: &[u8]) {
        self.data.as_mut_slice()[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// The scatter entry for `len` bytes of the data region (tests only).
    pub fn data_sge(&self, len: u32) -> Sge {
        self.data_mr.sge(self.data.addr(), len)
    }

    /// The host's queue pair number (for fault hooks that match completions).
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }
}

impl Drop for HostQueue {
    fn drop(&mut self) {
        self.disconnect();
    }
}
