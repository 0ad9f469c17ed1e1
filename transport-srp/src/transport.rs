//! The SRP transport as the target sees it: registration, options, RDMA CM listeners and the
//! acceptor that turns SRP_LOGIN_REQs into channels on poll groups.
//!
//! One connection-manager event channel serves every listener (one CM listener per address,
//! shared by every subsystem listening there). Its poller runs on reactor 0: a connect request
//! is decided there (target port, listener, initiator, IU lengths; [`crate::login::decide`]),
//! rejected with SRP_LOGIN_REJ, or handed to the least loaded poll group by message, which
//! builds the channel and answers SRP_LOGIN_RSP. Later CM events of a connection are forwarded
//! to the poll group that owns it.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fabric::{CmId, ConnectRequest, EventChannel};
use parking_lot::Mutex;
use rdma_plumbing::cm::{self, CmInput, CmNotice};
use serde_json::{Value, json};
use target_core::reactor::{PollStatus, PollerId, ReactorCtx, Reactors};
use target_core::registry::{
    CreateResult, JsonType, Transport, TransportAttr, TransportContext, TransportError,
    TransportOps, TransportParams, TransportPollGroup,
};
use target_core::target::{
    AdrFam, ListenAddr, PgCore, Subsystem, SubsystemState, SubsystemType, Target, scsi_port,
};

use crate::channel::CloseReason;
use crate::login::{self, Acl, Limits, PortConfig};
use crate::nexus::NexusKey;
use crate::opts::{self, SrpOpts};
use crate::port_id;
use crate::proto::{BufFormats, LoginRej, LoginReq, PortId, RejectReason, Tag};
use crate::runtime::{NewChannel, SrpPg};
use crate::sessions::{Route, Sessions};

target_core::register_transport!(
    SRP_OPS = TransportOps {
        name: "SRP",
        description: "SCSI RDMA Protocol target (Linux ib_srp initiators over RDMA CM)",
        defaults: opts::defaults,
        create,
        options: &[
            TransportAttr::plain(
                "max_req_size",
                JsonType::Uint(32),
                "max-req-size",
                "Largest initiator-to-target IU (SRP)"
            ),
            TransportAttr::plain(
                "max_rsp_size",
                JsonType::Uint(32),
                "max-rsp-size",
                "Largest target-to-initiator IU (SRP)"
            ),
            TransportAttr::plain(
                "immediate_data",
                JsonType::Bool,
                "immediate-data",
                "Accept SRP-2 immediate data (SRP)"
            ),
            TransportAttr::plain(
                "use_srq",
                JsonType::Bool,
                "use-srq",
                "Shared receive queue per poll group and device (SRP)"
            ),
            TransportAttr::plain(
                "srq_size",
                JsonType::Uint(32),
                "srq-size",
                "Receive buffers per shared receive queue (SRP)"
            ),
            TransportAttr::plain(
                "sq_size",
                JsonType::Uint(32),
                "sq-size",
                "Send queue depth per channel (SRP)"
            ),
            TransportAttr::plain(
                "disconnect_timeout_ms",
                JsonType::Uint(32),
                "disconnect-timeout-ms",
                "Wait for the connection manager on close (SRP)"
            ),
            TransportAttr::plain(
                "no_srq",
                JsonType::Bool,
                "no-srq",
                "Disable the shared receive queue"
            ),
        ],
        subsystem_attrs: &[port_id::SRP_PORT_ID],
        listener_attrs: &[
            TransportAttr {
                name: scsi_port::RELATIVE_PORT_ATTR,
                kind: JsonType::Uint(16),
                help: "SCSI relative target port id of this SRP listener, 1-65535 (default: derived from the address)",
                long: Some("relative-target-port-id"),
                parse: scsi_port::parse_id,
                shown_unset: None,
            },
            TransportAttr {
                name: scsi_port::TPG_ATTR,
                kind: JsonType::Uint(16),
                help: "ALUA target port group of this SRP listener, 1-65535 (default: its relative port id)",
                long: Some("target-port-group-id"),
                parse: scsi_port::parse_id,
                shown_unset: None,
            },
        ],
    }
);

struct Listener {
    addr: ListenAddr,
    id: CmId,
}

/// Login counters.
#[derive(Default)]
pub(crate) struct LoginStats {
    pub accepted: AtomicU64,
    /// Rejects by reason code (index = code − 0x10000, 0..=6), plus one for anything else.
    pub rejected: [AtomicU64; 8],
}

impl LoginStats {
    pub fn reject(&self, r: RejectReason) {
        let i = r.code().wrapping_sub(0x1_0000).min(7) as usize;
        self.rejected[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by the transport, its acceptor and its poll groups.
pub(crate) struct Shared {
    pub index: usize,
    pub opts: SrpOpts,
    pub target: Weak<Target>,
    pub reactors: Reactors,
    pub events: EventChannel,
    listeners: Mutex<Vec<Listener>>,
    pub sessions: Sessions,
    next_gid: AtomicU64,
    /// Logins handed to each poll group and not yet set up there.
    pub handoffs: Vec<AtomicUsize>,
    pub logins: LoginStats,
    acceptor: Mutex<Option<PollerId>>,
    stopped: AtomicBool,
}

impl Shared {
    /// Sends a message to this transport's poll group on reactor `pg`.
    pub fn to_pg(
        self: &Arc<Self>,
        pg: usize,
        f: impl FnOnce(&mut SrpPg, &mut PgCore) + Send + 'static,
    ) -> bool {
        cm::to_poll_group::<SrpPg>(&self.reactors, self.index, pg, f)
    }

    /// Asks the owner of channel `gid` to close it.
    pub fn close_channel(self: &Arc<Self>, gid: u64, route: Route, reason: CloseReason) {
        self.to_pg(route.pg, move |pg, core| pg.close_gid(core, gid, reason));
    }
}

/// The SRP transport.
pub struct SrpTransport {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SrpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrpTransport").finish_non_exhaustive()
    }
}

fn create(ctx: TransportContext, params: &TransportParams) -> CreateResult {
    let opts = SrpOpts::decode(params)?;
    let fabric = rdma_plumbing::env::open_fabric(&ctx.env)?;
    let events = fabric
        .create_event_channel()
        .map_err(|e| TransportError::Fabric(format!("cannot create a CM event channel: {e}")))?;
    let shared = Arc::new(Shared {
        index: ctx.index,
        opts,
        target: ctx.target.clone(),
        handoffs: (0..ctx.reactors.len())
            .map(|_| AtomicUsize::new(0))
            .collect(),
        reactors: ctx.reactors.clone(),
        events,
        listeners: Mutex::new(Vec::new()),
        sessions: Sessions::default(),
        next_gid: AtomicU64::new(1),
        logins: LoginStats::default(),
        acceptor: Mutex::new(None),
        stopped: AtomicBool::new(false),
    });
    let s = Arc::clone(&shared);
    let fd = shared.events.fd();
    let rate = Duration::from_micros(u64::from(shared.opts.acceptor_poll_rate.max(100)));
    ctx.reactors
        .send_ctrl(0, move |rctx| {
            if s.stopped.load(Ordering::Acquire) {
                return;
            }
            let s2 = Arc::clone(&s);
            let id = rctx
                .poller("srp_acceptor")
                .period(rate)
                .wake_fd(fd)
                .register(move |rctx| acceptor_poll(&s2, rctx));
            *s.acceptor.lock() = Some(id);
        })
        .map_err(|e| TransportError::Other(format!("cannot start the SRP acceptor: {e}")))?;
    tracing::info!(
        "SRP transport: max_queue_depth {} max_req_size {} max_rsp_size {} immediate_data {} use_srq {}",
        shared.opts.max_queue_depth,
        shared.opts.max_req_size,
        shared.opts.max_rsp_size,
        shared.opts.immediate_effective(),
        shared.opts.use_srq
    );
    Ok(Arc::new(SrpTransport { shared }))
}

impl Transport for SrpTransport {
    fn name(&self) -> &'static str {
        "SRP"
    }

    fn dump_opts(&self) -> TransportParams {
        self.shared.opts.dump()
    }

    fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        if !matches!(addr.adrfam, AdrFam::Ipv4 | AdrFam::Ipv6) {
            return Err(TransportError::Invalid(format!(
                "SRP listens on RDMA CM IP addresses; adrfam {} is not supported",
                addr.adrfam.as_str()
            )));
        }
        let ip = addr
            .ip()
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        let port = addr
            .port()
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        if matches!(ip, IpAddr::V4(_)) != (addr.adrfam == AdrFam::Ipv4) {
            return Err(TransportError::Invalid(format!(
                "address {ip} does not match adrfam {}",
                addr.adrfam.as_str()
            )));
        }
        let fab = |what: &str, e: fabric::FabricError| {
            TransportError::Fabric(format!("SRP listener {addr}: {what}: {e}"))
        };
        let id = self
            .shared
            .events
            .create_id()
            .map_err(|e| fab("create id", e))?;
        id.bind(SocketAddr::new(ip, port))
            .map_err(|e| fab("bind", e))?;
        id.listen(128).map_err(|e| fab("listen", e))?;
        self.shared.listeners.lock().push(Listener {
            addr: addr.clone(),
            id,
        });
        Ok(())
    }

    fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        let mut l = self.shared.listeners.lock();
        let before = l.len();
        l.retain(|x| x.addr != *addr);
        if l.len() == before {
            return Err(TransportError::Invalid(format!(
                "SRP is not listening on {addr}"
            )));
        }
        Ok(())
    }

    fn poll_group_create(
        &self,
        core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        Ok(Box::new(SrpPg::new(Arc::clone(&self.shared), core)))
    }

    fn choose_poll_group(
        &self,
        _admin: bool,
        loads: &[target_core::registry::PollGroupLoad],
    ) -> usize {
        choose_pg(&self.shared, loads)
    }

    fn destroy(&self) {
        let s = &self.shared;
        s.stopped.store(true, Ordering::Release);
        s.listeners.lock().clear();
        if let Some(id) = s.acceptor.lock().take() {
            let _ = s
                .reactors
                .send_ctrl(0, move |rctx| rctx.unregister_poller(id));
        }
    }

    fn stats(&self) -> Value {
        let l = &self.shared.logins;
        let r = |i: usize| l.rejected[i].load(Ordering::Relaxed);
        json!({
            "trtype": "SRP",
            "logins_accepted": l.accepted.load(Ordering::Relaxed),
            "logins_rejected": {
                "no_reason": r(0),
                "insufficient_resources": r(1),
                "it_iu_length_too_large": r(2),
                "unable_to_associate": r(3),
                "buffer_formats_unsupported": r(4),
                "multi_channel_unsupported": r(5),
                "channel_limit_reached": r(6),
                "other": r(7),
            },
            "channels": self.shared.sessions.channels(),
            "sessions": self.shared.sessions.sessions(),
            "listeners": self.shared.listeners.lock().len(),
        })
    }
}

impl Drop for SrpTransport {
    fn drop(&mut self) {
        self.destroy();
    }
}

fn choose_pg(shared: &Shared, loads: &[target_core::registry::PollGroupLoad]) -> usize {
    loads
        .iter()
        .min_by_key(|l| {
            let pending = shared
                .handoffs
                .get(l.index)
                .map_or(0, |h| h.load(Ordering::Relaxed));
            (l.io_qpairs + pending, l.index)
        })
        .map_or(0, |l| l.index)
}

fn acceptor_poll(shared: &Arc<Shared>, _rctx: &mut ReactorCtx) -> PollStatus {
    if shared.stopped.load(Ordering::Acquire) {
        return PollStatus::Idle;
    }
    let n = cm::poll_events(&shared.events, 32, |input| match input {
        CmInput::Connect { listener, req } => login_request(shared, listener, *req),
        // SRP has no use for an address change (ib_srpt ignores it too).
        CmInput::Notice {
            notice: CmNotice::AddrChange,
            ..
        } => tracing::debug!("SRP acceptor: CM address change ignored"),
        CmInput::Notice { id, notice } => match shared.sessions.route_of_cm(id) {
            Some((gid, route)) => {
                shared.to_pg(route.pg, move |pg, core| pg.cm_event(core, gid, notice));
            }
            None => tracing::debug!("SRP acceptor: {notice:?} for an unknown connection"),
        },
    });
    PollStatus::from_count(n)
}

/// Whether logins are accepted for a subsystem in this state (ib_srpt's "port enabled").
fn enabled(sub: &Subsystem) -> bool {
    matches!(
        sub.state(),
        SubsystemState::Active
            | SubsystemState::Pausing
            | SubsystemState::Paused
            | SubsystemState::Resuming
    )
}

fn reject(shared: &Shared, id: CmId, reason: RejectReason, tag: Tag, why: &str, who: &str) {
    shared.logins.reject(reason);
    tracing::warn!(
        "SRP login from {who} rejected with {:#x}: {why}",
        reason.code()
    );
    let rej = LoginRej {
        reason,
        tag,
        buf_fmt: BufFormats::BOTH,
    };
    if let Err(e) = id.reject(&rej.encode()) {
        tracing::warn!("SRP: sending the login reject failed: {e}");
    }
}

/// The subsystem whose target port id a login names, among those listening on `addr`.
fn find_subsystem(target: &Target, port: &PortId, addr: &ListenAddr) -> Option<Arc<Subsystem>> {
    target.subsystems().into_iter().find(|s| {
        s.kind() == SubsystemType::Nvme
            && s.with_config(|c| {
                port_id::target_port_id(
                    s.nqn(),
                    port_id::explicit_target_port_id(&c.transport_attrs),
                ) == *port
                    && c.listeners.iter().any(|l| l == addr)
            })
    })
}

fn login_request(shared: &Arc<Shared>, listener: u64, req: ConnectRequest) {
    let who = req.peer_addr.to_string();
    let pd = &req.private_data;
    let mut tag = [0u8; 8];
    if let Some(t) = pd.get(..8) {
        tag.copy_from_slice(t);
    }
    let tag = Tag(tag);
    let Some(addr) = shared
        .listeners
        .lock()
        .iter()
        .find(|l| l.id.handle() == listener)
        .map(|l| l.addr.clone())
    else {
        return reject(
            shared,
            req.id,
            RejectReason::InsufficientResources,
            tag,
            "listener is gone",
            &who,
        );
    };
    let login = match LoginReq::decode_rdma_cm(pd) {
        Ok(l) => l,
        Err(e) => {
            return reject(
                shared,
                req.id,
                RejectReason::NoReason,
                tag,
                &format!("malformed SRP_LOGIN_REQ private data ({e})"),
                &who,
            );
        }
    };
    let Some(target) = shared.target.upgrade() else {
        return reject(
            shared,
            req.id,
            RejectReason::InsufficientResources,
            tag,
            "the target is shutting down",
            &who,
        );
    };
    tracing::info!(
        "SRP login from {who} on {addr}: initiator {} target {} it_iu_len {} flags {:#04x}",
        login.initiator_port_id,
        login.target_port_id,
        login.req_it_iu_len,
        login.req_flags
    );
    let o = &shared.opts;
    let peer = req.peer_addr.ip();
    let sub = find_subsystem(&target, &login.target_port_id, &addr);
    // The port configuration the decision runs against. Without a subsystem behind the
    // named port id the id cannot match, which gives ib_srpt's order of reasons (an IU length
    // error still wins over "unable to associate").
    let (id_ext, ioc_guid) = match &sub {
        Some(_) => (login.target_port_id.hi(), login.target_port_id.lo()),
        None => (!login.target_port_id.hi(), !login.target_port_id.lo()),
    };
    let mut cfg = PortConfig::new(id_ext, ioc_guid);
    cfg.enabled = sub.as_ref().is_none_or(|s| enabled(s));
    cfg.max_req_size = o.max_req_size;
    cfg.max_rsp_size = o.max_rsp_size;
    cfg.queue_depth = o.max_queue_depth;
    cfg.immediate_data = o.immediate_effective();
    cfg.acl = match &sub {
        Some(s)
            if s.with_config(|c| {
                c.allow_any_host
                    || c.hosts
                        .iter()
                        .any(|h| port_id::host_matches(h, &login.initiator_port_id, Some(peer)))
            }) =>
        {
            Acl::AllowAny
        }
        _ => Acl::Allow(Vec::new()),
    };
    let max_qp_wr = req
        .id
        .device()
        .and_then(|d| d.query().ok())
        .map_or(0, |a| a.max_qp_wr);
    let limits = Limits {
        max_qp_wr,
        srq: o.use_srq,
    };
    let accept = match login::decide(&login, &cfg, Some(peer), &limits) {
        Ok(a) => a,
        Err(rj) => {
            return reject(shared, req.id, rj.reason, login.tag, rj.cause, &who);
        }
    };
    let sub = sub.expect("a login is accepted only for a subsystem");
    let loads = target.loads();
    let pg = choose_pg(shared, &loads);
    let gid = shared.next_gid.fetch_add(1, Ordering::Relaxed);
    let key = NexusKey {
        initiator: login.initiator_port_id,
        target: login.target_port_id,
    };
    let route = Route {
        pg,
        cm: req.id.handle(),
    };
    let (effects, terminate) = shared.sessions.login(key, gid, accept.action, route);
    for (old, r) in terminate {
        tracing::info!(
            "SRP: single-channel login from {} terminates channel {old}",
            login.initiator_port_id
        );
        shared.close_channel(old, r, CloseReason::Terminated);
    }
    if let Some(h) = shared.handoffs.get(pg) {
        h.fetch_add(1, Ordering::Relaxed);
    }
    let nc = NewChannel {
        gid,
        id: req.id,
        login,
        accept,
        result: effects.result,
        sub,
        nexus: key,
        listen: addr,
        peer: req.peer_addr,
        responder_resources: req.responder_resources,
        initiator_depth: req.initiator_depth,
    };
    let s = Arc::clone(shared);
    if !shared.to_pg(pg, move |p, core| p.new_channel(core, nc)) {
        // The message (and the connection request in it) is gone with the reactor.
        s.sessions.remove(gid);
        if let Some(h) = s.handoffs.get(pg) {
            h.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
