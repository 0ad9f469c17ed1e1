//! Channels on a poll group: setup from an accepted login, receive handling and IU dispatch,
//! the state machine's actions (disconnect, drain, release) and the management view.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fabric::{
    Access, CmId, ConnParam, Mr, QpCap, QpInit, RNR_RETRY_INFINITE, RecvWr, SendWr, SgeList,
    WcStatus, WorkCompletion,
};
use iobuf::{DmaRegion, IoBuf};
use rdma_plumbing::cm::CmNotice;
use rdma_plumbing::drain;
use serde_json::{Value, json};
use target_core::scsi::ScsiStatus;
use target_core::scsi_exec::{ItNexus, NexusUnitAttentions};
use target_core::target::{ControllerInfo, ListenAddr, PgCore, Subsystem, SubsystemState};

use super::req::Req;

/// Send-batch room beyond a poll's rounds for one transfer's work requests while they are
/// built (a transfer with more remote segments grows the batch once; it keeps its capacity).
const BUILD_HEADROOM: usize = 32;
use super::{RecvRef, SrpPg, kind, pack};
use crate::channel::{
    Action, Channel, ChannelState, CloseReason, Event, IuDisposition, IuKind, Output,
};
use crate::login::Accept;
use crate::nexus::NexusKey;
use crate::proto::{
    CredReq, LoginReq, MultiChannelResult, RejectReason, SrpRsp, TLogout, Tag, TmResponse, opcode,
};
use crate::sessions::{AcceptError, Gid};

/// Request slots beyond the credits: a response returns its credit before its SEND
/// completion frees the slot, so a fast initiator may reuse the credit first.
pub(super) const REQ_SPARE: u32 = 16;
/// Send slots for target-initiated IUs (T_LOGOUT, CRED_REQ, answers to credit overruns).
pub(super) const SPARES: u16 = crate::login::SEND_SPARES as u16;

/// An accepted login handed from the acceptor to the poll group that will own the channel.
pub(crate) struct NewChannel {
    pub gid: Gid,
    pub id: CmId,
    pub login: LoginReq,
    pub accept: Accept,
    pub result: MultiChannelResult,
    pub sub: Arc<Subsystem>,
    pub nexus: NexusKey,
    pub listen: ListenAddr,
    pub peer: SocketAddr,
    pub responder_resources: u8,
    pub initiator_depth: u8,
}

/// One channel.
pub(super) struct Chan {
    pub gid: Gid,
    pub key: u16,
    pub dev: usize,
    cq: usize,
    cq_reserved: u32,
    pub cm_id: Option<CmId>,
    pub qp: Option<fabric::Qp>,
    pub qp_num: u32,
    pub sm: Channel,
    pub sub: Arc<Subsystem>,
    pub sub_id: u32,
    pub nexus: NexusKey,
    /// The I_T nexus as target-core's SCSI engine sees it.
    pub scsi: ItNexus,
    /// The unit attention queues of the channel's nexus, per LU, shared by every channel of
    /// the nexus (the session's, from [`crate::sessions::Sessions::accept`]).
    pub ua: Arc<NexusUnitAttentions>,
    pub cntlid: u16,
    pub peer: SocketAddr,
    pub listen: ListenAddr,
    /// The listener's I/O counters on this poll group (metrics, `nvmf_get_stats`).
    pub io_stats: Arc<target_core::target::listener_io::ListenerIo>,
    pub max_it: u32,
    pub max_ti: u32,
    pub imm_off: Option<u16>,
    pub srq: bool,
    /// Offset of the IU inside a ring buffer (aligns immediate data to 512 bytes).
    pub rpad: usize,
    recv_mr: Option<Mr>,
    /// Ring buffers; `None` while lent to the bdev (immediate data).
    pub recv: Vec<Option<IoBuf>>,
    recv_idle: Vec<u16>,
    recv_posted: u32,
    recvs_drained_sent: bool,
    early: VecDeque<(RecvRef, u32)>,
    slot_wait: VecDeque<(RecvRef, u32)>,
    pub send_mr: Mr,
    pub send_bufs: Vec<IoBuf>,
    pub sq_depth: u32,
    pub sq_used: u32,
    pub sq_wait: VecDeque<(u16, u16)>,
    /// Send work requests of this poll, posted together by [`SrpPg::flush_sends`] (one
    /// doorbell per channel per poll; on soft-RoCE a doorbell is a system call). A request's
    /// transfer is built in place at its end and cut to the round that fits the send queue:
    /// its capacity covers a poll's worth of rounds plus one whole transfer being built.
    pub send_batch: Vec<SendWr>,
    pub batched: bool,
    pub reqs: Vec<Req>,
    pub req_free: Vec<u16>,
    spare_free: Vec<u16>,
    /// Credits each spare send slot carries (REQUEST LIMIT DELTA, and whether it is the
    /// CRED_REQ), given back if its SEND fails.
    spare_grants: [SpareGrant; SPARES as usize],
    pub qp_error: bool,
    deadline: Option<Instant>,
    pub max_sge: usize,
    pub stats: ChanStats,
    /// The LUN of this channel's last command and the index of its task set in
    /// `SrpPg::task_sets` (the channel's subsystem is fixed): a channel's commands mostly
    /// address one LU.
    pub last_task_set: Option<(u16, u32)>,
}

/// Credits a target-initiated IU carries to the initiator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SpareGrant {
    /// REQUEST LIMIT DELTA.
    pub delta: u32,
    /// It is an SRP_CRED_REQ (a target request the initiator answers).
    pub cred_req: bool,
}

/// Per-channel counters.
#[derive(Default, Debug, Clone, Copy)]
pub(super) struct ChanStats {
    pub commands: u64,
    pub task_mgmt: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub overruns: u64,
    pub aborted: u64,
}

impl Chan {
    /// Whether IUs wait for a request slot ([`SrpPg::slot_freed`] starts the next one).
    pub fn slot_waiters(&self) -> bool {
        !self.slot_wait.is_empty()
    }

    /// Send slots requests may use (the spares keep theirs).
    pub fn sq_budget(&self) -> u32 {
        self.sq_depth.saturating_sub(u32::from(SPARES))
    }

    /// What tells this channel's receive, spare and marker work requests from those of an
    /// earlier channel in the same slot (whose queue pair a drain timeout destroyed with
    /// completions still to come).
    pub fn generation(&self) -> u16 {
        self.gid as u16
    }

    fn can_post_recv(&self) -> bool {
        !self.qp_error && self.sm.state() <= crate::channel::ChannelState::Live
    }

    fn post_ring(&mut self, slot: u16) -> bool {
        let (Some(qp), Some(mr), Some(Some(b))) = (
            self.qp.as_ref(),
            self.recv_mr.as_ref(),
            self.recv.get(slot as usize),
        ) else {
            return false;
        };
        let wr = RecvWr::new(
            pack(kind::RECV, self.key, slot, self.generation()),
            SgeList::one(mr.sge(b.base_addr() + self.rpad as u64, self.max_it)),
        );
        match qp.post_recv([&wr]) {
            Ok(()) => {
                self.recv_posted += 1;
                true
            }
            Err(e) => {
                tracing::warn!("SRP channel {}: posting a receive failed: {e}", self.gid);
                false
            }
        }
    }

    /// The management view (`nvmf_subsystem_get_qpairs`).
    pub fn describe(&self, pg: usize) -> Value {
        let fam = |a: &SocketAddr| if a.is_ipv4() { "IPv4" } else { "IPv6" };
        let c = self.sm.credits();
        json!({
            "cntlid": self.cntlid,
            "qid": self.gid,
            "state": self.sm.state().name(),
            "thread": format!("nvmf_tgt_poll_group_{pg:03}"),
            "listen_address": {
                "trtype": "SRP",
                "adrfam": self.listen.adrfam.as_str(),
                "traddr": self.listen.traddr,
                "trsvcid": self.listen.trsvcid,
            },
            "peer_address": {
                "trtype": "SRP",
                "adrfam": fam(&self.peer),
                "traddr": self.peer.ip().to_string(),
                "trsvcid": self.peer.port().to_string(),
            },
            "initiator_port_id": self.nexus.initiator.to_string(),
            "target_port_id": self.nexus.target.to_string(),
            "req_lim": c.available(),
            "req_lim_delta": c.owed(),
            "credits": c.limit(),
            "outstanding": self.sm.commands(),
            "max_it_iu_len": self.max_it,
            "max_ti_iu_len": self.max_ti,
            "immediate_data": self.imm_off.is_some(),
            "srq": self.srq,
            "receive_slots": self.recv.len(),
            "receives_posted": self.recv_posted,
            "qp_num": self.qp_num,
            "commands": self.stats.commands,
            "task_management": self.stats.task_mgmt,
            "read_bytes": self.stats.read_bytes,
            "write_bytes": self.stats.write_bytes,
            "credit_overruns": self.stats.overruns,
            "aborted": self.stats.aborted,
        })
    }
}

/// The bytes of a received IU, from the channel's ring (`recv`, IU at `rpad`) or the
/// device's shared receive queue buffers (`srq`). Takes the pieces rather than the channel so
/// that the caller may update the channel's other fields meanwhile.
pub(super) fn iu_bytes<'a>(
    recv: &'a [Option<IoBuf>],
    rpad: usize,
    srq: &'a [Option<IoBuf>],
    rref: RecvRef,
    len: u32,
) -> &'a [u8] {
    let (buf, pad) = match rref {
        RecvRef::Ring(s) => (recv.get(s as usize).and_then(Option::as_ref), rpad),
        RecvRef::Srq(s) => (srq.get(s as usize).and_then(Option::as_ref), 0),
    };
    buf.and_then(|b| b.as_slice().get(pad..pad + len as usize))
        .unwrap_or(&[])
}

/// The shared receive queue buffers of device `dev` (empty without SRQ).
pub(super) fn srq_bufs(devs: &[super::DevCtx], dev: usize) -> &[Option<IoBuf>] {
    devs.get(dev)
        .and_then(|d| d.srq.as_ref())
        .map_or(&[][..], |q| q.bufs.as_slice())
}

fn reject_id(id: &CmId, reason: RejectReason, tag: Tag) {
    let rej = crate::proto::LoginRej {
        reason,
        tag,
        buf_fmt: crate::proto::BufFormats::BOTH,
    };
    if let Err(e) = id.reject(&rej.encode()) {
        tracing::warn!("SRP: sending the login reject failed: {e}");
    }
}

impl SrpPg {
    /// Builds the channel of an accepted login and answers SRP_LOGIN_RSP (or rejects).
    pub(crate) fn new_channel(&mut self, core: &mut PgCore, nc: NewChannel) {
        if let Some(h) = self.shared.handoffs.get(self.index) {
            h.fetch_sub(1, Ordering::Relaxed);
        }
        let gid = nc.gid;
        let tag = nc.login.tag;
        match self.setup(core, nc) {
            Ok(()) => {}
            Err((id, reason, why)) => {
                tracing::warn!(
                    "SRP login (channel {gid}) rejected with {:#x}: {why}",
                    reason.code()
                );
                self.shared.logins.reject(reason);
                if let Some(id) = id {
                    reject_id(&id, reason, tag);
                }
                self.shared.sessions.remove(gid);
            }
        }
    }

    fn setup(
        &mut self,
        core: &mut PgCore,
        nc: NewChannel,
    ) -> Result<(), (Option<CmId>, RejectReason, String)> {
        let res = RejectReason::InsufficientResources;
        // The subsystem may have started going away since the acceptor looked. Its state is
        // set before the deactivation reaches the poll groups, and this runs on the poll
        // group's reactor in one go: either we see it here, or the deactivation comes after
        // the channel exists and closes it.
        let alive = matches!(
            nc.sub.state(),
            SubsystemState::Active
                | SubsystemState::Pausing
                | SubsystemState::Paused
                | SubsystemState::Resuming
        ) && core
            .subsystem(nc.sub.id())
            .is_some_and(|s| Arc::ptr_eq(s, &nc.sub));
        if !alive {
            return Err((
                Some(nc.id),
                res,
                format!("subsystem {} is not active", nc.sub.nqn()),
            ));
        }
        let o = self.shared.opts.clone();
        let entry = self.chans.vacant_entry();
        let Ok(key) = u16::try_from(entry.key()) else {
            return Err((
                Some(nc.id),
                res,
                "too many channels on this poll group".into(),
            ));
        };
        let Some(device) = nc.id.device() else {
            return Err((Some(nc.id), res, "the connection has no device".into()));
        };
        let dev = match self.dev_for(core, device) {
            Ok(d) => d,
            Err(e) => return Err((Some(nc.id), res, e)),
        };
        let credits = nc.accept.credits;
        let srq = o.use_srq;
        let d = &mut self.devs[dev];
        // The login decision sized the credits for this device (the acceptor asked it too).
        let limits = crate::login::Limits {
            max_qp_wr: d.max_qp_wr,
            srq,
        };
        let (rq_depth, sq_depth) = limits.queue_depths(credits, o.sq_size);
        let cq_need = sq_depth + rq_depth + 4;
        let cq = match d.cqs.reserve(cq_need) {
            Ok(c) => c,
            Err(e) => return Err((Some(nc.id), res, format!("completion queue: {e}"))),
        };
        let unreserve = |pg: &mut SrpPg| pg.devs[dev].cqs.release(cq, cq_need);
        let max_sge = d.max_sge.clamp(1, fabric::MAX_SGE as u32);
        let init = QpInit {
            pd: &d.pd,
            send_cq: d.cqs.cq(cq),
            recv_cq: d.cqs.cq(cq),
            srq: d.srq.as_ref().map(|s| s.srq.srq()),
            cap: QpCap {
                max_send_wr: sq_depth,
                max_recv_wr: if srq { 0 } else { rq_depth },
                max_send_sge: max_sge,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let qp = match nc.id.create_qp(&init) {
            Ok(q) => q,
            Err(e) => {
                unreserve(self);
                return Err((Some(nc.id), res, format!("queue pair: {e}")));
            }
        };
        let sq_depth = sq_depth.min(qp.cap().max_send_wr.max(crate::login::MIN_SEND_DEPTH));
        let d = &self.devs[dev];
        // Receive ring (the IU at `rpad` so that immediate data lands 512-byte aligned).
        let max_it = nc.accept.max_it_iu_len;
        let imm_off = nc.accept.imm_data_offset;
        let rpad = imm_off.map_or(0, |off| {
            (usize::from(off)).next_multiple_of(512) - usize::from(off)
        });
        let (recv_mr, recv) = if srq {
            (None, Vec::new())
        } else {
            let slot = (rpad + max_it as usize).next_multiple_of(512);
            let ring = DmaRegion::new(slot * rq_depth as usize)
                .and_then(|r| Ok((r.split(slot)?, r)))
                .map_err(|e| e.to_string())
                .and_then(|(bufs, r)| {
                    d.pd.register(&r, Access::LOCAL_WRITE)
                        .map(|mr| (mr, bufs))
                        .map_err(|e| e.to_string())
                });
            match ring {
                Ok((mr, bufs)) => (Some(mr), bufs.into_iter().map(Some).collect()),
                Err(e) => {
                    unreserve(self);
                    return Err((Some(nc.id), res, format!("receive ring: {e}")));
                }
            }
        };
        // Response buffers: one per request slot, then the spares.
        let nreq = credits + REQ_SPARE;
        let max_ti = nc.accept.max_ti_iu_len;
        let sslot = (max_ti as usize).next_multiple_of(64);
        let send = DmaRegion::new(sslot * (nreq as usize + usize::from(SPARES)))
            .and_then(|r| Ok((r.split(sslot)?, r)))
            .map_err(|e| e.to_string())
            .and_then(|(bufs, r)| {
                d.pd.register(&r, Access::NONE)
                    .map(|mr| (mr, bufs))
                    .map_err(|e| e.to_string())
            });
        let (send_mr, send_bufs) = match send {
            Ok(x) => x,
            Err(e) => {
                unreserve(self);
                return Err((Some(nc.id), res, format!("send ring: {e}")));
            }
        };
        let scsi = super::req::scsi_nexus(&nc.nexus, &nc.sub, &nc.listen);
        let mut chan = Chan {
            gid: nc.gid,
            key,
            dev,
            cq,
            cq_reserved: cq_need,
            qp_num: qp.qp_num(),
            qp: Some(qp),
            cm_id: None,
            sm: Channel::new(credits, srq),
            sub_id: nc.sub.id(),
            sub: Arc::clone(&nc.sub),
            nexus: nc.nexus,
            // Replaced by the session's when it is accepted below.
            ua: Arc::new(NexusUnitAttentions::settled(scsi.identity())),
            scsi,
            cntlid: 0,
            peer: nc.peer,
            io_stats: core.listener_io(&nc.listen),
            listen: nc.listen.clone(),
            max_it,
            max_ti,
            imm_off,
            srq,
            rpad,
            recv_mr,
            recv,
            recv_idle: Vec::with_capacity(rq_depth as usize),
            recv_posted: 0,
            recvs_drained_sent: false,
            early: VecDeque::with_capacity(rq_depth as usize),
            slot_wait: VecDeque::with_capacity(rq_depth as usize),
            send_mr,
            send_bufs,
            sq_depth,
            sq_used: 0,
            sq_wait: VecDeque::with_capacity(nreq as usize),
            send_batch: Vec::with_capacity(sq_depth.min(128) as usize + BUILD_HEADROOM),
            batched: false,
            reqs: (0..nreq).map(|_| Req::new()).collect(),
            req_free: (0..nreq as u16).rev().collect(),
            spare_free: (0..SPARES).collect(),
            spare_grants: [SpareGrant::default(); SPARES as usize],
            qp_error: false,
            deadline: None,
            max_sge: max_sge as usize,
            stats: ChanStats::default(),
            last_task_set: None,
        };
        if !srq {
            for slot in 0..chan.recv.len() as u16 {
                if !chan.post_ring(slot) {
                    unreserve(self);
                    return Err((Some(nc.id), res, "posting the receive ring failed".into()));
                }
            }
        }
        // Register the session; a later single-channel login may have superseded this one.
        let host = nc.nexus.initiator.to_string();
        let (cntlid, ua) =
            match self
                .shared
                .sessions
                .accept(nc.gid, &nc.sub, chan.scsi.identity(), |id| ControllerInfo {
                    cntlid: id,
                    cntrltype: "io",
                    hostnqn: host.clone(),
                    hostid: String::new(),
                    num_io_qpairs: 1,
                    transport: "SRP",
                }) {
                Ok(c) => c,
                Err(AcceptError::Superseded) => {
                    unreserve(self);
                    return Err((
                        Some(nc.id),
                        RejectReason::NoReason,
                        "superseded by a single-channel login of the same nexus".into(),
                    ));
                }
                Err(AcceptError::NoControllerId) => {
                    unreserve(self);
                    return Err((
                        Some(nc.id),
                        res,
                        "no free session id in the subsystem".into(),
                    ));
                }
            };
        chan.cntlid = cntlid;
        chan.ua = ua;
        let d = &self.devs[dev];
        let rsp = nc.accept.response(nc.login.tag, nc.result).encode();
        let param = ConnParam {
            private_data: &rsp,
            responder_resources: nc.responder_resources.min(d.max_rd_atom),
            initiator_depth: nc.initiator_depth.max(1).min(d.max_init_rd_atom),
            retry_count: 7,
            rnr_retry_count: RNR_RETRY_INFINITE,
        };
        if let Err(e) = nc.id.accept(&param) {
            unreserve(self);
            self.shared.sessions.remove(nc.gid);
            return Err((Some(nc.id), res, format!("accept failed: {e}")));
        }
        chan.cm_id = Some(nc.id);
        self.chans.insert(chan);
        self.by_gid.insert(nc.gid, key as usize);
        if srq {
            self.by_qpn
                .insert(self.chans[key as usize].qp_num, key as usize);
        }
        core.qpair_created();
        core.qpair_associate(nc.sub.id(), false);
        self.shared.logins.accepted.fetch_add(1, Ordering::Relaxed);
        let c = &self.chans[key as usize];
        tracing::info!(
            "SRP channel {} accepted on poll group {}: {} -> {} ({}), credits {credits}, it_iu {} ti_iu {}, immediate data {}, {:?}",
            c.gid,
            self.index,
            c.nexus.initiator,
            c.sub.nqn(),
            c.peer,
            c.max_it,
            c.max_ti,
            c.imm_off.is_some(),
            nc.result
        );
        Ok(())
    }

    /// A CM event for channel `gid`.
    pub(crate) fn cm_event(&mut self, core: &mut PgCore, gid: Gid, sig: CmNotice) {
        let Some(&key) = self.by_gid.get(&gid) else {
            return;
        };
        let ev = match sig {
            CmNotice::Established => Event::Established,
            CmNotice::Disconnected => Event::Disconnected,
            CmNotice::TimewaitExit => Event::TimewaitExit,
            CmNotice::Rejected => Event::Rejected,
            CmNotice::ConnectError => Event::ConnectError,
            CmNotice::DeviceRemoval => Event::DeviceRemoval,
            // Not forwarded by the acceptor; nothing for a channel to do.
            CmNotice::AddrChange => return,
        };
        tracing::debug!("SRP channel {gid}: CM {sig:?}");
        if sig != CmNotice::Established {
            self.shared.sessions.closing(gid);
        }
        let out = self.chans[key].sm.handle(ev);
        self.run(core, key as u16, out);
    }

    /// Closes channel `gid` (a single-channel login of its nexus, an operator).
    pub(crate) fn close_gid(&mut self, core: &mut PgCore, gid: Gid, reason: CloseReason) {
        if let Some(&key) = self.by_gid.get(&gid) {
            self.close_key(core, key as u16, reason);
        }
    }

    fn close_key(&mut self, core: &mut PgCore, key: u16, reason: CloseReason) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        self.shared.sessions.closing(c.gid);
        tracing::info!("SRP channel {}: closing ({reason:?})", c.gid);
        let out = c.sm.handle(Event::Close(reason));
        self.run(core, key, out);
    }

    /// Closes every channel that `pred` selects.
    pub(super) fn close_where(
        &mut self,
        core: &mut PgCore,
        reason: CloseReason,
        pred: impl Fn(&Chan) -> bool,
    ) {
        let keys: Vec<u16> = self
            .chans
            .iter()
            .filter(|(_, c)| pred(c))
            .map(|(k, _)| k as u16)
            .collect();
        for k in keys {
            self.close_key(core, k, reason);
        }
    }

    /// Carries out the state machine's actions.
    pub(super) fn run(&mut self, core: &mut PgCore, key: u16, out: Output) {
        for a in out.actions {
            let Some(c) = self.chans.get_mut(key as usize) else {
                return;
            };
            match a {
                Action::ReplayQueued => {
                    let mut early = std::mem::take(&mut c.early);
                    while let Some((r, len)) = early.pop_front() {
                        self.on_iu(core, key, r, len);
                    }
                    if let Some(c) = self.chans.get_mut(key as usize) {
                        c.early = early;
                    }
                }
                Action::DropQueued => {
                    let mut early = std::mem::take(&mut c.early);
                    while let Some((r, _)) = early.pop_front() {
                        self.recycle_recv(key, r);
                    }
                    if let Some(c) = self.chans.get_mut(key as usize) {
                        c.early = early;
                    }
                }
                Action::SendTLogout(reason) => {
                    let iu = TLogout {
                        solnt: false,
                        reason,
                        tag: Tag([0; 8]),
                    }
                    .encode();
                    self.send_spare(key, &iu, SpareGrant::default());
                }
                Action::Disconnect => {
                    c.qp_error = true;
                    c.deadline = Some(
                        Instant::now()
                            + Duration::from_millis(u64::from(
                                self.shared.opts.disconnect_timeout_ms,
                            )),
                    );
                    self.closing += 1;
                    let failed = match c.cm_id.as_ref().map(|id| id.disconnect()) {
                        Some(Err(e)) => {
                            tracing::warn!("SRP channel {}: disconnect failed: {e}", c.gid);
                            true
                        }
                        _ => false,
                    };
                    if failed {
                        let o = c.sm.handle(Event::DisconnectFailed);
                        self.run(core, key, o);
                    }
                    self.check_recvs_drained(core, key);
                }
                Action::QpToError => {
                    self.flush_chan(core, key);
                    let Some(c) = self.chans.get_mut(key as usize) else {
                        continue;
                    };
                    c.qp_error = true;
                    // The drain's watchdog (it replaces the disconnect's timer, if any).
                    if c.deadline.is_none() {
                        self.closing += 1;
                    }
                    c.deadline = Some(Instant::now() + self.shared.opts.drain_timeout());
                    if let Some(qp) = c.qp.as_ref()
                        && let Err(e) = qp.modify_to_error()
                    {
                        tracing::warn!("SRP channel {}: QP to error failed: {e}", c.gid);
                    }
                    self.check_recvs_drained(core, key);
                }
                Action::PostSqMarker => {
                    // The marker goes after everything batched.
                    self.flush_chan(core, key);
                    let Some(c) = self.chans.get_mut(key as usize) else {
                        continue;
                    };
                    let wr_id = pack(kind::MARKER, key, 0, c.generation());
                    if !drain::post_marker(c.qp.as_ref(), wr_id) {
                        tracing::warn!("SRP channel {}: posting the drain marker failed", c.gid);
                        let o = c.sm.handle(Event::MarkerPostFailed);
                        self.run(core, key, o);
                    }
                }
                Action::AbortOutstanding => self.abort_channel(core, key),
                Action::DestroyQp => {
                    self.drain_timeouts += 1;
                    tracing::warn!(
                        "SRP channel {}: not drained after {} ms ({} receives not flushed); destroying its queue pair",
                        c.gid,
                        self.shared.opts.disconnect_timeout_ms,
                        c.recv_posted
                    );
                    c.qp = None;
                    c.recv_posted = 0;
                    self.sends_done(core, key);
                }
                Action::ReleaseSession => self.release_session(core, key),
                Action::FreeChannel => {
                    self.chans.remove(key as usize);
                }
            }
        }
    }

    fn check_recvs_drained(&mut self, core: &mut PgCore, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        if c.qp_error && c.recv_posted == 0 && !c.recvs_drained_sent {
            c.recvs_drained_sent = true;
            let out = c.sm.handle(Event::RecvsDrained);
            self.run(core, key, out);
        }
    }

    pub(super) fn check_deadlines(&mut self, core: &mut PgCore) {
        let now = Instant::now();
        let due: Vec<u16> = self
            .chans
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k as u16)
            .collect();
        for key in due {
            let c = &mut self.chans[key as usize];
            c.deadline = None;
            self.closing = self.closing.saturating_sub(1);
            let ev = match c.sm.state() {
                ChannelState::Disconnecting => {
                    tracing::info!(
                        "SRP channel {}: no word from the connection manager; draining",
                        c.gid
                    );
                    Event::DisconnectTimeout
                }
                ChannelState::Draining => Event::DrainTimeout,
                _ => continue,
            };
            let out = c.sm.handle(ev);
            self.run(core, key, out);
        }
    }

    /// Everything is drained and every command finished: let go of the channel's resources.
    fn release_session(&mut self, core: &mut PgCore, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        if c.deadline.take().is_some() {
            self.closing = self.closing.saturating_sub(1);
        }
        self.by_gid.remove(&c.gid);
        if c.srq {
            self.by_qpn.remove(&c.qp_num);
        }
        self.shared.sessions.remove(c.gid);
        core.qpair_removed(Some(c.sub_id), false);
        if let Some(d) = self.devs.get_mut(c.dev) {
            d.cqs.release(c.cq, c.cq_reserved);
        }
        // Queue pair first, then its identifier, then the rings.
        c.qp = None;
        c.cm_id = None;
        c.recv.clear();
        c.recv_mr = None;
        tracing::info!(
            "SRP channel {} released ({} commands, {} bytes read, {} bytes written)",
            c.gid,
            c.stats.commands,
            c.stats.read_bytes,
            c.stats.write_bytes
        );
    }

    pub(super) fn on_recv(&mut self, core: &mut PgCore, key: u16, slot: u16, wc: WorkCompletion) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            tracing::error!("SRP: receive completion for unknown channel slot {key}");
            return;
        };
        c.recv_posted = c.recv_posted.saturating_sub(1);
        if !wc.status.is_success() {
            c.recv_idle.push(slot);
            if wc.status != WcStatus::WrFlushErr {
                tracing::warn!("SRP channel {}: receive failed: {:?}", c.gid, wc.status);
            }
            // A flush while the channel is live means the queue pair went to the error state
            // by itself (a fatal adapter error): the state machine closes the channel then,
            // and ignores flushes of a teardown it started.
            let out = c.sm.handle(Event::CompletionError);
            self.run(core, key, out);
            self.check_recvs_drained(core, key);
            return;
        }
        self.on_iu(core, key, RecvRef::Ring(slot), wc.byte_len);
    }

    pub(super) fn on_srq_recv(
        &mut self,
        core: &mut PgCore,
        dev: usize,
        slot: u16,
        wc: WorkCompletion,
    ) {
        if let Some(s) = self.devs.get_mut(dev).and_then(|d| d.srq.as_mut()) {
            s.srq.completed();
        }
        let key = self.by_qpn.get(&wc.qp_num).copied();
        match (wc.status.is_success(), key) {
            (true, Some(key)) => self.on_iu(core, key as u16, RecvRef::Srq(slot), wc.byte_len),
            (ok, _) => {
                if !ok {
                    tracing::warn!("SRP: shared receive failed: {:?}", wc.status);
                }
                self.devs[dev].post_srq(slot);
            }
        }
    }

    /// Gives a receive buffer back: reposted while the channel receives, parked otherwise.
    pub(super) fn recycle_recv(&mut self, key: u16, r: RecvRef) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            if let RecvRef::Srq(s) = r {
                tracing::error!("SRP: SRQ buffer {s} returned for a gone channel");
            }
            return;
        };
        match r {
            RecvRef::Ring(slot) => {
                if !(c.can_post_recv() && c.post_ring(slot)) {
                    c.recv_idle.push(slot);
                }
            }
            RecvRef::Srq(slot) => {
                let dev = c.dev;
                self.devs[dev].post_srq(slot);
            }
        }
    }

    /// A received IU: classify it through the state machine and act.
    pub(super) fn on_iu(&mut self, core: &mut PgCore, key: u16, r: RecvRef, len: u32) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), r, len);
        tracing::trace!(target: target_core::hex::WIRE_TARGET, kind = "srp_iu",
                        data = %target_core::hex::Hex(bytes));
        let op = bytes.first().copied();
        let kind = match op {
            Some(opcode::CMD) => IuKind::Cmd,
            Some(opcode::TSK_MGMT) => IuKind::TskMgmt,
            Some(opcode::I_LOGOUT) => IuKind::ILogout,
            Some(opcode::CRED_RSP) => IuKind::CredRsp,
            Some(opcode::AER_RSP) => IuKind::AerRsp,
            _ => IuKind::Other,
        };
        let c = &mut self.chans[key as usize];
        if c.sm.state() == crate::channel::ChannelState::Live
            && matches!(kind, IuKind::Cmd | IuKind::TskMgmt)
            && c.req_free.is_empty()
        {
            c.slot_wait.push_back((r, len));
            return;
        }
        match c.sm.on_iu(kind) {
            IuDisposition::Queue => c.early.push_back((r, len)),
            IuDisposition::Drop => {
                if kind == IuKind::Other && c.sm.state() == crate::channel::ChannelState::Live {
                    tracing::warn!(
                        "SRP channel {}: ignoring an IU with opcode {:?} ({len} bytes)",
                        c.gid,
                        op
                    );
                }
                self.recycle_recv(key, r);
            }
            IuDisposition::Overrun => self.answer_overrun(key, r, len, kind),
            IuDisposition::Process => match kind {
                IuKind::Cmd | IuKind::TskMgmt => {
                    let Some(slot) = c.req_free.pop() else {
                        // Checked above.
                        return;
                    };
                    c.sm.command_started();
                    self.start_req(core, key, slot, r, len, kind == IuKind::TskMgmt);
                }
                IuKind::ILogout => {
                    tracing::info!("SRP channel {}: SRP_I_LOGOUT", c.gid);
                    self.recycle_recv(key, r);
                    self.close_key(core, key, CloseReason::Logout);
                }
                _ => self.recycle_recv(key, r),
            },
        }
    }

    /// A request slot was freed: an IU that waited for one can go.
    pub(super) fn slot_freed(&mut self, core: &mut PgCore, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        if let Some((r, len)) = c.slot_wait.pop_front() {
            if c.sm.state() == crate::channel::ChannelState::Live {
                self.on_iu(core, key, r, len);
            } else {
                self.recycle_recv(key, r);
            }
        }
    }

    /// Drops the IUs waiting for a request slot (the channel is closing).
    pub(super) fn drop_slot_waiters(&mut self, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let mut w = std::mem::take(&mut c.slot_wait);
        while let Some((r, _)) = w.pop_front() {
            self.recycle_recv(key, r);
        }
        if let Some(c) = self.chans.get_mut(key as usize) {
            c.slot_wait = w;
        }
    }

    /// Answers an IU sent beyond the initiator's credits: BUSY (a task management request:
    /// FAILED), carrying only credits owed. Dropped if no spare send slot is free.
    fn answer_overrun(&mut self, key: u16, r: RecvRef, len: u32, kind: IuKind) {
        let c = &mut self.chans[key as usize];
        c.stats.overruns += 1;
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), r, len);
        let mut tag = [0u8; 8];
        let have_tag = match bytes.get(8..16) {
            Some(t) => {
                tag.copy_from_slice(t);
                true
            }
            None => false,
        };
        let c = &mut self.chans[key as usize];
        if have_tag && !c.spare_free.is_empty() {
            let delta = c.sm.credits_mut().overrun_delta();
            let tm_data = SrpRsp::tm_response_data(TmResponse::Failed);
            let rsp = if kind == IuKind::TskMgmt {
                SrpRsp::task_mgmt(Tag(tag), delta, &tm_data)
            } else {
                SrpRsp::scsi(Tag(tag), delta, ScsiStatus::Busy as u8, &[])
            };
            let mut b = [0u8; 64];
            let grant = SpareGrant {
                delta,
                cred_req: false,
            };
            match rsp.encode(&mut b, c.max_ti) {
                Ok(n) => {
                    self.send_spare(key, &b[..n], grant);
                }
                Err(_) => c.sm.credits_mut().spare_not_sent(delta, false),
            }
        }
        self.recycle_recv(key, r);
    }

    /// Sends a target-initiated IU carrying `grant` from a spare slot. `false` if none is
    /// free or the post failed: the grant's credits are then owed again.
    pub(super) fn send_spare(&mut self, key: u16, iu: &[u8], grant: SpareGrant) -> bool {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return false;
        };
        let Some(slot) = c.spare_free.pop() else {
            tracing::warn!("SRP channel {}: no spare send slot; IU dropped", c.gid);
            c.sm.credits_mut()
                .spare_not_sent(grant.delta, grant.cred_req);
            return false;
        };
        let i = c.reqs.len() + slot as usize;
        let generation = c.generation();
        let b = &mut c.send_bufs[i];
        let n = iu.len().min(b.capacity());
        b.as_mut_slice()[..n].copy_from_slice(&iu[..n]);
        let wr = SendWr::send(
            pack(kind::SPARE, key, slot, generation),
            SgeList::one(c.send_mr.sge(b.base_addr(), n as u32)),
        );
        match c.qp.as_ref().map(|q| q.post_send([&wr])) {
            Some(Ok(())) => {
                c.sq_used += 1;
                c.spare_grants[slot as usize] = grant;
                true
            }
            r => {
                if let Some(Err(e)) = r {
                    tracing::warn!("SRP channel {}: posting a target IU failed: {e}", c.gid);
                }
                c.spare_free.push(slot);
                c.sm.credits_mut()
                    .spare_not_sent(grant.delta, grant.cred_req);
                false
            }
        }
    }

    pub(super) fn on_spare_wc(
        &mut self,
        core: &mut PgCore,
        key: u16,
        slot: u16,
        wc: WorkCompletion,
    ) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        c.sq_used = c.sq_used.saturating_sub(1);
        c.spare_free.push(slot);
        let grant = c
            .spare_grants
            .get_mut(slot as usize)
            .map(std::mem::take)
            .unwrap_or_default();
        if wc.status.is_success() {
            self.wake_sq(core, key);
        } else {
            // The IU never arrived: what it carried is owed again.
            c.sm.credits_mut()
                .spare_not_sent(grant.delta, grant.cred_req);
            if wc.status != WcStatus::WrFlushErr {
                tracing::warn!("SRP channel {}: send failed: {:?}", c.gid, wc.status);
            }
            let out = c.sm.handle(Event::CompletionError);
            self.run(core, key, out);
        }
    }

    /// Sends SRP_CRED_REQ when credits are owed and nothing else would carry them back soon.
    pub(super) fn maybe_cred_req(&mut self, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        if !c.sm.can_send() || c.spare_free.is_empty() || c.sm.commands() > 0 {
            return;
        }
        if let Some(delta) = c.sm.credits_mut().take_cred_req() {
            let iu = CredReq {
                solnt: false,
                req_lim_delta: delta,
                tag: Tag(c.gid.to_le_bytes()),
            }
            .encode();
            self.send_spare(
                key,
                &iu,
                SpareGrant {
                    delta,
                    cred_req: true,
                },
            );
        }
    }

    pub(super) fn on_marker(&mut self, core: &mut PgCore, key: u16, wc: WorkCompletion) {
        // Every send work request posted before the marker has completed: work requests that
        // completed unsignaled (and so never reported) are done too.
        self.sends_done(core, key);
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let out = c.sm.handle(Event::SqMarkerDone {
            ok: wc.status.is_success(),
        });
        self.run(core, key, out);
    }

    /// Every send work request of the channel's requests is over (the drain marker
    /// completed, or the queue pair is destroyed): aborted requests waiting for them finish.
    fn sends_done(&mut self, core: &mut PgCore, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        for slot in 0..c.reqs.len() {
            let r = &mut c.reqs[slot];
            if r.sq_wrs > 0 {
                c.sq_used = c.sq_used.saturating_sub(r.sq_wrs);
                r.sq_wrs = 0;
            }
        }
        for slot in 0..self.chans[key as usize].reqs.len() as u16 {
            self.maybe_finish_aborted(core, key, slot);
        }
    }
}
