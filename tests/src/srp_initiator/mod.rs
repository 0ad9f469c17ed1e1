//! A test SRP initiator over the fabric API, behaving like Linux `ib_srp` with RDMA CM: it
//! logs in with the 56-byte RDMA CM form of SRP_LOGIN_REQ, owns registered memory that the
//! target reads from and writes to, sends SRP_CMD with direct, indirect or immediate data
//! descriptors, task management and logout, tracks its credits, and answers SRP_CRED_REQ.
//!
//! It is deliberately able to misbehave (exceed its credits, send malformed IUs) so tests can
//! check that the target survives.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fabric::{
    Access, CmEventKind, CmId, ConnParam, Cq, EventChannel, Fabric, FabricError, Mr, Pd, Qp, QpCap,
    QpInit, RecvWr, SendWr, SgeList, WcStatus, WorkCompletion,
};
use iobuf::DmaRegion;
use transport_srp::proto::cmd::{DirectDesc, IndirectDesc, LINUX_IMM_DATA_OFFSET};
use transport_srp::proto::login::REQ_FLAG_IMMED_REQUESTED;
use transport_srp::proto::{
    BufFormats, CredReq, CredRsp, DataDesc, ILogout, LoginRej, LoginReq, LoginRsp, PortId,
    RejectReason, Residual, SrpCmd, SrpRsp, TLogout, Tag, TaskAttr, TaskMgmt, TmResponse, TskMgmt,
    opcode,
};

/// How long the initiator waits for anything.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// What a login asks for.
#[derive(Clone, Debug)]
pub struct LoginParams {
    /// Initiator port id (ib_srp: 8 zero bytes + the port GUID).
    pub initiator: PortId,
    /// Target port id (id_ext + ioc_guid).
    pub target: PortId,
    /// REQUESTED MAX INITIATOR TO TARGET IU LENGTH (ib_srp default 8260).
    pub it_iu_len: u32,
    /// Ask for immediate data at offset 68.
    pub immediate: bool,
    /// MULTI-CHANNEL ACTION 1 (keep the nexus's other channels).
    pub multi_channel: bool,
    /// Registered data memory the target transfers to and from.
    pub data_size: usize,
    /// Send-queue entries (and IU send buffers).
    pub send_slots: usize,
    /// Source address (the host device).
    pub src: Option<SocketAddr>,
    /// The first tag: tags must be unique across the channels of an I_T nexus, so ib_srp
    /// puts the channel's hardware queue index in bits 16 and up (`blk_mq_unique_tag`); a
    /// second channel of a nexus starts at e.g. `1 << 16`.
    pub tag_base: u64,
}

impl LoginParams {
    /// What Linux sends by default.
    pub fn linux(initiator: PortId, target: PortId) -> Self {
        LoginParams {
            initiator,
            target,
            it_iu_len: 8260,
            immediate: true,
            multi_channel: false,
            data_size: 8 << 20,
            send_slots: 256,
            src: None,
            tag_base: 0,
        }
    }
}

/// Why a login failed.
#[derive(Debug)]
pub enum LoginError {
    /// SRP_LOGIN_REJ with this reason.
    Rejected(RejectReason),
    /// The connection manager rejected without an SRP reject (status given).
    CmRejected(i32),
    /// Another connection-manager outcome.
    Cm(String),
    /// A fabric call failed.
    Fabric(FabricError),
}

impl From<FabricError> for LoginError {
    fn from(e: FabricError) -> Self {
        LoginError::Fabric(e)
    }
}

impl LoginError {
    /// The SRP reject reason code, if the target sent SRP_LOGIN_REJ.
    pub fn reason(&self) -> Option<u32> {
        match self {
            LoginError::Rejected(r) => Some(r.code()),
            _ => None,
        }
    }
}

/// Where a command's data goes, in the initiator's registered memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    /// No data.
    None,
    /// Data-in into these (offset, length) segments.
    In(Vec<(usize, u32)>),
    /// Data-out from these (offset, length) segments.
    Out(Vec<(usize, u32)>),
}

/// How the data buffers are described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One direct descriptor (needs exactly one segment).
    Direct,
    /// An indirect descriptor with every segment in the IU.
    Indirect,
    /// An indirect descriptor whose table is larger than what the IU carries (an external
    /// table, which ib_srp only sends with `allow_ext_sg`).
    IndirectPartial,
    /// Immediate data (data-out only): the bytes travel inside the SRP_CMD.
    Immediate,
}

/// A response (or another target IU) the initiator received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Tag echoed.
    pub tag: u64,
    /// SCSI status.
    pub status: u8,
    /// Sense data (fixed format bytes).
    pub sense: Vec<u8>,
    /// Task management response code, for TM.
    pub tm: Option<TmResponse>,
    /// Data-in residual.
    pub data_in: Residual,
    /// Data-out residual.
    pub data_out: Residual,
    /// Credits granted back.
    pub req_lim_delta: u32,
}

impl Response {
    /// Sense key / ASC / ASCQ, if sense data came back.
    pub fn sense_key(&self) -> Option<(u8, u8, u8)> {
        (self.sense.len() >= 14).then(|| (self.sense[2] & 0x0f, self.sense[12], self.sense[13]))
    }
}

/// A logged-in SRP channel.
pub struct SrpInitiator {
    ch: EventChannel,
    id: CmId,
    qp: Qp,
    cq: Cq,
    _pd: Pd,
    data_mr: Mr,
    data: iobuf::IoBuf,
    send_mr: Mr,
    send: iobuf::IoBuf,
    send_free: Vec<usize>,
    send_len: usize,
    recv_mr: Mr,
    recv: iobuf::IoBuf,
    recv_len: usize,
    /// The login response.
    pub login: LoginRsp,
    /// Credits left (may go negative when a test overruns on purpose).
    pub req_lim: i64,
    next_tag: u64,
    outstanding: HashMap<u64, ()>,
    responses: VecDeque<Response>,
    /// T_LOGOUTs received.
    pub t_logouts: Vec<TLogout>,
    /// CRED_REQs received (each answered).
    pub cred_reqs: u32,
    /// Whether the target disconnected (DREQ / DISCONNECTED seen).
    pub disconnected: bool,
    recv_posted: usize,
    /// Before the first command to a LUN, send TEST UNIT READY and swallow the POWER ON, RESET
    /// unit attention a new nexus has pending there, as Linux's LUN scan does (default). A
    /// test of the unit attention itself turns it off.
    pub absorb_power_on: bool,
    /// LUNs addressed so far.
    addressed: std::collections::HashSet<u16>,
}

fn wait_event(ch: &EventChannel, timeout: Duration) -> Result<fabric::CmEvent, LoginError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(e) = ch.get_event()? {
            return Ok(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LoginError::Cm("no connection-manager event in time".into()));
        }
        fabric::wait_readable(ch.fd(), left.min(Duration::from_millis(50)))?;
    }
}

const RECV_SLOTS: usize = 256;
const RECV_LEN: usize = 1024;

impl SrpInitiator {
    /// Connects to `target` and logs in.
    pub fn login(fabric: &Fabric, target: SocketAddr, p: &LoginParams) -> Result<Self, LoginError> {
        let ch = fabric.create_event_channel()?;
        let id = ch.create_id()?;
        id.resolve_addr(p.src, target, 5000)?;
        let e = wait_event(&ch, TIMEOUT)?;
        if !matches!(e.kind, CmEventKind::AddrResolved) {
            return Err(LoginError::Cm(format!("resolve_addr: {e:?}")));
        }
        let dev = id
            .device()
            .ok_or_else(|| LoginError::Cm("no device".into()))?;
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(4096, None)?;
        let qp = id.create_qp(&QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: p.send_slots as u32 + 8,
                max_recv_wr: RECV_SLOTS as u32,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })?;
        id.resolve_route(5000)?;
        let e = wait_event(&ch, TIMEOUT)?;
        if !matches!(e.kind, CmEventKind::RouteResolved) {
            return Err(LoginError::Cm(format!("resolve_route: {e:?}")));
        }
        let all = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let alloc = |len: usize| {
            DmaRegion::new(len)
                .map_err(|e| LoginError::Cm(e.to_string()))
                .map(|r| r.into_buf())
        };
        let data = alloc(p.data_size)?;
        let data_mr = pd.register(data.region(), all)?;
        let send_len = (p.it_iu_len as usize).max(64).next_multiple_of(64);
        let send = alloc(send_len * p.send_slots)?;
        let send_mr = pd.register(send.region(), all)?;
        let recv = alloc(RECV_LEN * RECV_SLOTS)?;
        let recv_mr = pd.register(recv.region(), Access::LOCAL_WRITE)?;
        let mut me = SrpInitiator {
            ch,
            id,
            qp,
            cq,
            _pd: pd,
            data_mr,
            data,
            send_mr,
            send,
            send_free: (0..p.send_slots).rev().collect(),
            send_len,
            recv_mr,
            recv,
            recv_len: RECV_LEN,
            login: LoginRsp::decode(&[0xC0; 52]).map_err(|e| LoginError::Cm(e.to_string()))?,
            req_lim: 0,
            next_tag: p.tag_base + 1,
            outstanding: HashMap::new(),
            responses: VecDeque::new(),
            t_logouts: Vec::new(),
            cred_reqs: 0,
            disconnected: false,
            recv_posted: 0,
            absorb_power_on: true,
            addressed: std::collections::HashSet::new(),
        };
        for i in 0..RECV_SLOTS {
            me.post_recv(i)?;
        }
        let req = LoginReq {
            tag: Tag(0u64.to_le_bytes()),
            req_it_iu_len: p.it_iu_len,
            req_buf_fmt: BufFormats::BOTH,
            req_flags: u8::from(p.multi_channel)
                | if p.immediate {
                    REQ_FLAG_IMMED_REQUESTED
                } else {
                    0
                },
            imm_data_offset: if p.immediate {
                LINUX_IMM_DATA_OFFSET
            } else {
                0
            },
            initiator_port_id: p.initiator,
            target_port_id: p.target,
        };
        let pdata = req.encode_rdma_cm();
        me.id.connect(&ConnParam {
            private_data: &pdata,
            responder_resources: 4,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
        })?;
        let e = wait_event(&me.ch, TIMEOUT)?;
        match e.kind {
            CmEventKind::Established { private_data, .. } => {
                me.login = LoginRsp::decode(&private_data)
                    .map_err(|e| LoginError::Cm(format!("bad LOGIN_RSP: {e}")))?;
                me.req_lim = i64::from(me.login.req_lim_delta);
                Ok(me)
            }
            CmEventKind::Rejected { private_data } => match LoginRej::decode(&private_data) {
                Ok(rej) if e.status == fabric::CM_REJ_CONSUMER_DEFINED => {
                    Err(LoginError::Rejected(rej.reason))
                }
                _ => Err(LoginError::CmRejected(e.status)),
            },
            other => Err(LoginError::Cm(format!("connect: {other:?}"))),
        }
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), FabricError> {
        let addr = self.recv.base_addr() + (slot * self.recv_len) as u64;
        let wr = RecvWr::new(
            slot as u64,
            SgeList::one(self.recv_mr.sge(addr, self.recv_len as u32)),
        );
        self.qp.post_recv([&wr]).map_err(|e| FabricError::Os {
            op: "post_recv",
            errno: e.posted as i32,
        })?;
        self.recv_posted += 1;
        Ok(())
    }

    /// The initiator's data memory.
    pub fn mem(&mut self) -> &mut [u8] {
        self.data.as_mut_slice()
    }

    /// Whether immediate data was negotiated.
    pub fn immediate(&self) -> bool {
        self.login.immediate
    }

    /// Commands waiting for a response.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// A direct descriptor of `len` bytes at offset `off` of the initiator's data memory
    /// (for hand-made IUs).
    pub fn desc(&self, off: usize, len: u32) -> DirectDesc {
        DirectDesc {
            va: self.data.base_addr() + off as u64,
            rkey: self.data_mr.rkey(),
            len,
        }
    }

    fn take_send(&mut self) -> Result<usize, FabricError> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = self.send_free.pop() {
                return Ok(s);
            }
            self.poll_once()?;
            if Instant::now() > deadline {
                return Err(FabricError::Exhausted("initiator send slots"));
            }
        }
    }

    fn post_iu(&mut self, iu: &[u8], slot: usize) -> Result<(), FabricError> {
        let off = slot * self.send_len;
        self.send.as_mut_slice()[off..off + iu.len()].copy_from_slice(iu);
        let wr = SendWr::send(
            (1u64 << 63) | slot as u64,
            SgeList::one(
                self.send_mr
                    .sge(self.send.base_addr() + off as u64, iu.len() as u32),
            ),
        );
        self.qp.post_send([&wr]).map_err(|e| FabricError::Os {
            op: "post_send",
            errno: e.posted as i32,
        })
    }

    /// The initiator's queue pair number (for fault hooks that match completions).
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// Size of the initiator's data memory.
    pub fn mem_len(&self) -> usize {
        self.data.len()
    }

    /// Sends raw bytes as an IU (for malformed-IU tests). Consumes no credit.
    pub fn send_raw(&mut self, iu: &[u8]) -> Result<(), FabricError> {
        let slot = self.take_send()?;
        self.post_iu(iu, slot)
    }

    /// Sends an SRP_CMD with a 16-byte CDB. Takes a credit unless `force` (a test may overrun
    /// on purpose); fails when none is left otherwise. Returns the tag.
    pub fn command(
        &mut self,
        lun: u16,
        cdb: &[u8],
        data: &Data,
        layout: Layout,
        force: bool,
    ) -> Result<u64, FabricError> {
        self.command_attr(lun, cdb, data, layout, force, TaskAttr::Simple)
    }

    /// [`SrpInitiator::command`] with a task attribute.
    pub fn command_attr(
        &mut self,
        lun: u16,
        cdb: &[u8],
        data: &Data,
        layout: Layout,
        force: bool,
        task_attr: TaskAttr,
    ) -> Result<u64, FabricError> {
        if self.addressed.insert(lun) && self.absorb_power_on {
            let tag = self.command(lun, &[0; 6], &Data::None, Layout::Direct, false)?;
            let r = self.wait(tag)?;
            if r.status != 0 && r.sense_key() != Some((0x6, 0x29, 0x00)) {
                // Another condition, or no LU there: the test's own command will find out.
                tracing::debug!("TEST UNIT READY before LUN {lun}'s first command: {r:?}");
            }
        }
        if !force {
            let deadline = Instant::now() + TIMEOUT;
            while self.req_lim <= 1 {
                self.poll_once()?;
                if Instant::now() > deadline {
                    return Err(FabricError::Exhausted("credits"));
                }
            }
        }
        let slot = self.take_send()?;
        let tag = self.next_tag;
        self.next_tag += 1;
        let mut c = [0u8; 16];
        c[..cdb.len().min(16)].copy_from_slice(&cdb[..cdb.len().min(16)]);
        let mut list = Vec::new();
        let mut imm = Vec::new();
        let segs: &[(usize, u32)] = match data {
            Data::None => &[],
            Data::In(s) | Data::Out(s) => s,
        };
        // The descriptor list sits in the IU right after the 20-byte indirect header at byte 48.
        let table_va = self.send.base_addr() + (slot * self.send_len + 48 + 20) as u64;
        let desc = match (layout, data) {
            (_, Data::None) => DataDesc::None,
            (Layout::Direct, _) => {
                let (o, l) = segs[0];
                DataDesc::Direct(self.desc(o, l))
            }
            (Layout::Indirect | Layout::IndirectPartial, _) => {
                for &(o, l) in segs {
                    list.extend_from_slice(&self.desc(o, l).encode());
                }
                let extra = if layout == Layout::IndirectPartial {
                    16
                } else {
                    0
                };
                let total: u32 = segs.iter().map(|s| s.1).sum();
                DataDesc::Indirect(IndirectDesc::new(
                    DirectDesc {
                        va: table_va,
                        rkey: self.send_mr.rkey(),
                        len: (list.len() + extra) as u32,
                    },
                    total,
                    &list,
                ))
            }
            (Layout::Immediate, _) => {
                for &(o, l) in segs {
                    imm.extend_from_slice(&self.data.as_slice()[o..o + l as usize]);
                }
                DataDesc::Immediate(&imm)
            }
        };
        let (data_out, data_in) = match data {
            Data::Out(_) => (desc, DataDesc::None),
            _ => (DataDesc::None, desc),
        };
        let cmd = SrpCmd {
            sol_not: 0,
            tag: Tag(tag.to_le_bytes()),
            lun: target_core::scsi::lun::encode(lun),
            task_attr,
            cdb: &c,
            data_out,
            data_in,
        };
        let mut iu = vec![0u8; self.send_len];
        let n = cmd
            .encode(&mut iu, LINUX_IMM_DATA_OFFSET)
            .map_err(|_| FabricError::InvalidArgument("SRP_CMD does not fit the IU"))?;
        self.post_iu(&iu[..n], slot)?;
        self.req_lim -= 1;
        self.outstanding.insert(tag, ());
        Ok(tag)
    }

    /// Sends SRP_TSK_MGMT. Returns its tag.
    pub fn task_mgmt(&mut self, lun: u16, action: TaskMgmt) -> Result<u64, FabricError> {
        let slot = self.take_send()?;
        let tag = self.next_tag | (1 << 31);
        self.next_tag += 1;
        let iu = TskMgmt {
            sol_not: 0,
            tag: Tag(tag.to_le_bytes()),
            lun: target_core::scsi::lun::encode(lun),
            action,
        }
        .encode();
        self.post_iu(&iu, slot)?;
        self.req_lim -= 1;
        self.outstanding.insert(tag, ());
        Ok(tag)
    }

    /// Sends SRP_I_LOGOUT.
    pub fn logout(&mut self) -> Result<(), FabricError> {
        let slot = self.take_send()?;
        let iu = ILogout {
            tag: Tag(0xdead_u64.to_le_bytes()),
        }
        .encode();
        self.post_iu(&iu, slot)
    }

    /// Disconnects (sends a DREQ).
    pub fn disconnect(&mut self) -> Result<(), FabricError> {
        self.id.disconnect()
    }

    fn handle_recv(&mut self, wc: &WorkCompletion) -> Result<(), FabricError> {
        let slot = wc.wr_id as usize;
        self.recv_posted -= 1;
        if !wc.status.is_success() {
            return Ok(());
        }
        let off = slot * self.recv_len;
        let iu = self.recv.as_slice()[off..off + wc.byte_len as usize].to_vec();
        match iu.first().copied() {
            Some(opcode::RSP) => {
                let r =
                    SrpRsp::decode(&iu).map_err(|_| FabricError::InvalidState("bad SRP_RSP"))?;
                let tag = u64::from_le_bytes(r.tag.0);
                self.req_lim += i64::from(r.req_lim_delta);
                self.outstanding.remove(&tag);
                self.responses.push_back(Response {
                    tag,
                    status: r.status,
                    sense: r.sense.to_vec(),
                    tm: (r.resp_data.len() >= 4).then(|| r.tm_response()).flatten(),
                    data_in: r.data_in,
                    data_out: r.data_out,
                    req_lim_delta: r.req_lim_delta,
                });
            }
            Some(opcode::T_LOGOUT) => {
                if let Ok(t) = TLogout::decode(&iu) {
                    self.t_logouts.push(t);
                }
            }
            Some(opcode::CRED_REQ) => {
                if let Ok(c) = CredReq::decode(&iu) {
                    self.cred_reqs += 1;
                    self.req_lim += i64::from(c.req_lim_delta);
                    let rsp = CredRsp { tag: c.tag }.encode();
                    if let Some(s) = self.send_free.pop() {
                        self.post_iu(&rsp, s)?;
                    }
                }
            }
            _ => {}
        }
        if !self.disconnected {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// Polls completions and connection events once; returns how many things happened.
    pub fn poll_once(&mut self) -> Result<usize, FabricError> {
        let n = self.poll_nowait()?;
        if n == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(n)
    }

    /// Takes the oldest response that has arrived, without polling.
    pub fn take_response(&mut self) -> Option<Response> {
        self.responses.pop_front()
    }

    /// Like [`SrpInitiator::poll_once`] but never sleeps (benchmarks spin on it).
    pub fn poll_nowait(&mut self) -> Result<usize, FabricError> {
        let mut wcs = [WorkCompletion::default(); 32];
        let n = self.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            if wc.wr_id >> 63 == 1 {
                self.send_free.push((wc.wr_id & 0xffff_ffff) as usize);
                if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr {
                    tracing::warn!("initiator send failed: {:?}", wc.status);
                }
            } else {
                self.handle_recv(wc)?;
            }
        }
        let mut m = 0;
        while let Some(e) = self.ch.get_event()? {
            m += 1;
            if matches!(e.kind, CmEventKind::Disconnected) {
                self.disconnected = true;
                let _ = self.id.disconnect();
            }
        }
        Ok(n + m)
    }

    /// The next response, waiting up to `timeout`.
    pub fn next_response(&mut self, timeout: Duration) -> Result<Option<Response>, FabricError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.responses.pop_front() {
                return Ok(Some(r));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            self.poll_once()?;
        }
    }

    /// Waits for the response to `tag` (other responses stay queued).
    pub fn wait(&mut self, tag: u64) -> Result<Response, FabricError> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(i) = self.responses.iter().position(|r| r.tag == tag) {
                return Ok(self.responses.remove(i).expect("present"));
            }
            if Instant::now() > deadline {
                return Err(FabricError::InvalidState("no response in time"));
            }
            self.poll_once()?;
        }
    }

    /// Waits until the target disconnects us (or `timeout`).
    pub fn wait_disconnected(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.disconnected && Instant::now() < deadline {
            if self.poll_once().is_err() {
                break;
            }
        }
        self.disconnected
    }

    /// Runs a command and waits for its response.
    pub fn run(
        &mut self,
        lun: u16,
        cdb: &[u8],
        data: &Data,
        layout: Layout,
    ) -> Result<Response, FabricError> {
        let tag = self.command(lun, cdb, data, layout, false)?;
        self.wait(tag)
    }

    /// WRITE(10) of `data` at `lba` (block size `bs`) from memory offset `off`.
    pub fn write(
        &mut self,
        lun: u16,
        lba: u32,
        bs: u32,
        off: usize,
        data: &[u8],
        layout: Layout,
    ) -> Result<Response, FabricError> {
        self.data.as_mut_slice()[off..off + data.len()].copy_from_slice(data);
        let blocks = (data.len() as u32 / bs) as u16;
        let tag = self.command(
            lun,
            &rw10(0x2a, lba, blocks),
            &Data::Out(split(off, data.len() as u32, layout)),
            layout,
            false,
        )?;
        self.wait(tag)
    }

    /// READ(10) of `blocks` blocks at `lba` into memory offset `off`; returns the data.
    pub fn read(
        &mut self,
        lun: u16,
        lba: u32,
        bs: u32,
        blocks: u16,
        off: usize,
        layout: Layout,
    ) -> Result<(Response, Vec<u8>), FabricError> {
        let len = u32::from(blocks) * bs;
        let tag = self.command(
            lun,
            &rw10(0x28, lba, blocks),
            &Data::In(split(off, len, layout)),
            layout,
            false,
        )?;
        let r = self.wait(tag)?;
        Ok((r, self.data.as_slice()[off..off + len as usize].to_vec()))
    }
}

/// A READ(10) (0x28) or WRITE(10) (0x2a) CDB.
pub fn rw10(op: u8, lba: u32, blocks: u16) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = op;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// Splits `[off, off + len)` into descriptor segments for `layout`: one for direct and
/// immediate data, four uneven, non-adjacent-in-order pieces for indirect (the pieces are
/// listed in order but sized 1/8, 3/8, 1/4, 1/4 so they cross page boundaries).
pub fn split(off: usize, len: u32, layout: Layout) -> Vec<(usize, u32)> {
    match layout {
        Layout::Direct | Layout::Immediate => vec![(off, len)],
        Layout::Indirect | Layout::IndirectPartial => {
            let a = (len / 8) & !511;
            let b = (len * 3 / 8) & !511;
            let c = (len / 4) & !511;
            let d = len - a - b - c;
            let mut v = Vec::new();
            let mut o = off;
            for l in [a, b, c, d] {
                if l > 0 {
                    v.push((o, l));
                    o += l as usize;
                }
            }
            v
        }
    }
}

/// A deterministic byte pattern.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A target with an SRP transport, one subsystem exporting malloc bdevs and a listener, ready
/// for [`SrpInitiator`]s on the host device.
pub struct SrpFixture {
    /// The target.
    pub t: crate::TestTarget,
    /// The subsystem's NQN.
    pub nqn: String,
    /// The listener's address.
    pub addr: SocketAddr,
    /// The subsystem's target port id.
    pub port: PortId,
}

/// Block size of the fixture's bdevs.
pub const BS: u32 = 512;

impl SrpFixture {
    /// `reactors` reactors, SRP options `opts`, `luns` malloc bdevs of `blocks` blocks.
    pub fn new(reactors: usize, opts: serde_json::Value, luns: usize, blocks: u64) -> Self {
        Self::on(crate::TestTarget::start(reactors), opts, luns, blocks)
    }

    /// Like [`SrpFixture::new`], on a target already started.
    pub fn on(t: crate::TestTarget, opts: serde_json::Value, luns: usize, blocks: u64) -> Self {
        t.transport("SRP", opts);
        let nqn = "nqn.2016-06.io.rtgt:srp0".to_string();
        t.subsystem(&nqn, true);
        for i in 0..luns {
            let name = format!("Malloc{i}");
            t.malloc(&name, blocks, BS);
            t.add_ns(&nqn, &name);
        }
        let port = 4000 + (std::process::id() % 1000) as u16;
        t.listen(&nqn, "SRP", port);
        let addr = SocketAddr::new(crate::TARGET_IP.parse().expect("ip"), port);
        let port_id = transport_srp::port_id::derived_target_port_id(&nqn);
        SrpFixture {
            t,
            nqn,
            addr,
            port: port_id,
        }
    }

    /// Adds a namespace backed by a gated malloc bdev (I/O parks while the gate is closed);
    /// returns its NSID and the gate.
    pub fn gated(&self, name: &str, blocks: u64) -> (u32, std::sync::Arc<crate::gate::Gate>) {
        let gate = self.t.gated(name, blocks, BS);
        (self.t.add_ns(&self.nqn, name), gate)
    }

    /// Login parameters of initiator `n` (port GUID `n`) for this target.
    pub fn params(&self, n: u64) -> LoginParams {
        let mut p = LoginParams::linux(PortId::from_halves(0, n), self.port);
        p.src = Some(SocketAddr::new(crate::HOST_IP.parse().expect("ip"), 0));
        p
    }

    /// Logs in as initiator `n` with Linux's parameters.
    pub fn login(&self, n: u64) -> SrpInitiator {
        SrpInitiator::login(&self.t.fabric, self.addr, &self.params(n)).expect("login")
    }

    /// Logs in with explicit parameters.
    pub fn login_with(&self, p: &LoginParams) -> Result<SrpInitiator, LoginError> {
        SrpInitiator::login(&self.t.fabric, self.addr, p)
    }

    /// The subsystem's channels (`nvmf_subsystem_get_qpairs`).
    pub fn qpairs(&self) -> Vec<serde_json::Value> {
        self.t
            .rt
            .block_on(self.t.target.qpairs(&self.nqn))
            .expect("qpairs")
    }

    /// The subsystem's sessions (`nvmf_subsystem_get_controllers`).
    pub fn controllers(&self) -> Vec<target_core::target::ControllerInfo> {
        self.t
            .target
            .subsystem(&self.nqn)
            .expect("subsystem")
            .controllers()
    }

    /// `nvmf_get_stats`.
    pub fn stats(&self) -> serde_json::Value {
        self.t.rt.block_on(self.t.target.stats())
    }

    /// The SRP transport's counters on poll group `pg` (from `nvmf_get_stats`).
    pub fn srp_stats(&self, pg: usize) -> serde_json::Value {
        self.stats()["poll_groups"][pg]["transports"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["trtype"] == "SRP"))
            .cloned()
            .expect("SRP counters of the poll group")
    }

    /// Waits until `f` holds (polling every 10 ms), up to [`TIMEOUT`].
    pub fn wait_until(&self, what: &str, mut f: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !f(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// SCSI reservation commands.
pub mod pr;

/// CDB helpers.
pub mod cdb {
    /// INQUIRY (standard, or a VPD page).
    pub fn inquiry(evpd: Option<u8>, alloc: u16) -> [u8; 6] {
        let mut c = [0x12, 0, 0, 0, 0, 0];
        if let Some(p) = evpd {
            c[1] = 1;
            c[2] = p;
        }
        c[3..5].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    /// READ CAPACITY(16).
    pub fn read_capacity16() -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x9e;
        c[1] = 0x10;
        c[13] = 32;
        c
    }

    /// REPORT LUNS.
    pub fn report_luns(alloc: u32) -> [u8; 12] {
        let mut c = [0u8; 12];
        c[0] = 0xa0;
        c[6..10].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    /// TEST UNIT READY.
    pub fn tur() -> [u8; 6] {
        [0; 6]
    }

    /// WRITE(16) with FUA.
    pub fn write16_fua(lba: u64, blocks: u32) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x8a;
        c[1] = 0x08;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..14].copy_from_slice(&blocks.to_be_bytes());
        c
    }

    /// READ(16).
    pub fn read16(lba: u64, blocks: u32) -> [u8; 16] {
        let mut c = write16_fua(lba, blocks);
        c[0] = 0x88;
        c[1] = 0;
        c
    }

    /// SYNCHRONIZE CACHE(10) of the whole LU.
    pub fn sync_cache() -> [u8; 10] {
        [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    }

    /// UNMAP with a parameter list of `len` bytes.
    pub fn unmap(len: u16) -> [u8; 10] {
        let mut c = [0u8; 10];
        c[0] = 0x42;
        c[7..9].copy_from_slice(&len.to_be_bytes());
        c
    }

    /// An UNMAP parameter list.
    pub fn unmap_list(ranges: &[(u64, u32)]) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        let n = ranges.len() * 16;
        v[0..2].copy_from_slice(&((n + 6) as u16).to_be_bytes());
        v[2..4].copy_from_slice(&(n as u16).to_be_bytes());
        for &(lba, blocks) in ranges {
            v.extend_from_slice(&lba.to_be_bytes());
            v.extend_from_slice(&blocks.to_be_bytes());
            v.extend_from_slice(&[0; 4]);
        }
        v
    }

    /// WRITE SAME(16) (`unmap`: the UNMAP bit; `ndob`: no data-out buffer).
    pub fn write_same16(lba: u64, blocks: u32, unmap: bool, ndob: bool) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x93;
        c[1] = if unmap { 0x08 } else { 0 } | u8::from(ndob);
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..14].copy_from_slice(&blocks.to_be_bytes());
        c
    }
}
