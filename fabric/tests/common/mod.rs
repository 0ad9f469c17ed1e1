//! Shared harness of the fabric conformance tests: picks the provider from `RTGT_FABRIC`
//! (`sim`, the default, or `rdma` with `RTGT_FABRIC_ADDR` set to the device's IP address),
//! and builds connected queue-pair pairs through the connection manager.
//!
//! With `RTGT_FABRIC=rdma` and no usable device the tests fail; they never skip.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use fabric::mem::IoBuf;
use fabric::*;

/// How long to wait for an event or a completion (soft-RoCE under TCG is slow).
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The provider under test.
pub struct Env {
    pub fabric: Fabric,
    pub addr: IpAddr,
    pub net: Option<SimNetwork>,
}

impl Env {
    pub fn is_sim(&self) -> bool {
        self.net.is_some()
    }
}

fn addr_from_env() -> Option<IpAddr> {
    std::env::var("RTGT_FABRIC_ADDR").ok().map(|s| {
        s.parse()
            .unwrap_or_else(|e| panic!("RTGT_FABRIC_ADDR={s}: {e}"))
    })
}

/// The provider selected by `RTGT_FABRIC` (a fresh network with one device per test for sim).
pub fn env() -> Env {
    let which = std::env::var("RTGT_FABRIC").unwrap_or_else(|_| "sim".into());
    match which.as_str() {
        "sim" => {
            let net = SimNetwork::new();
            let addr = addr_from_env().unwrap_or(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
            net.add_device("sim0", addr).expect("sim device");
            Env {
                fabric: Fabric::sim(&net),
                addr,
                net: Some(net),
            }
        }
        "rdma" => {
            let fabric = Fabric::rdma()
                .unwrap_or_else(|e| panic!("RTGT_FABRIC=rdma but the rdma provider failed: {e}"));
            let addr = addr_from_env()
                .expect("RTGT_FABRIC=rdma needs RTGT_FABRIC_ADDR (the RDMA device's IP address)");
            Env {
                fabric,
                addr,
                net: None,
            }
        }
        other => panic!("RTGT_FABRIC={other}: expected sim or rdma"),
    }
}

static PORT: AtomicU16 = AtomicU16::new(0);

/// A port no other test of this process uses.
pub fn port() -> u16 {
    let base = 20000 + (std::process::id() % 2000) as u16 * 10;
    base + PORT.fetch_add(1, Ordering::Relaxed)
}

/// Waits until `fd` is readable, up to `timeout`.
pub fn readable(fd: RawFd, timeout: Duration) -> bool {
    fabric::wait_readable(fd, timeout).expect("poll")
}

/// The next connection-manager event, waiting on the channel's fd.
pub fn next_event(ch: &EventChannel) -> CmEvent {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(e) = ch.get_event().expect("get_event") {
            return e;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no connection-manager event within {TIMEOUT:?}"
        );
        readable(ch.fd(), left.min(Duration::from_millis(200)));
    }
}

/// Asserts there is no event within `dur`.
pub fn no_event(ch: &EventChannel, dur: Duration) {
    let deadline = Instant::now() + dur;
    loop {
        if let Some(e) = ch.get_event().expect("get_event") {
            panic!("unexpected event {e:?}");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        readable(ch.fd(), left);
    }
}

/// Collects exactly `n` completions from `cq` (fails after [`TIMEOUT`]).
pub fn wait_wc(cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < n {
        let want = (n - out.len()).min(buf.len());
        let got = cq.poll(&mut buf[..want]);
        out.extend_from_slice(&buf[..got]);
        if got == 0 {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} completions within {TIMEOUT:?}: {out:?}",
                out.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    out
}

/// Asserts `cq` yields no completion within `dur`.
pub fn no_wc(cq: &Cq, dur: Duration) {
    let deadline = Instant::now() + dur;
    let mut buf = [WorkCompletion::default(); 4];
    while Instant::now() < deadline {
        let n = cq.poll(&mut buf);
        assert_eq!(n, 0, "unexpected completions: {:?}", &buf[..n]);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A registered buffer.
pub struct Buf {
    pub io: IoBuf,
    pub mr: Mr,
}

impl Buf {
    pub fn new(pd: &Pd, len: usize, access: Access) -> Buf {
        let io = IoBuf::alloc(len).expect("alloc");
        let mr = pd.register(io.region(), access).expect("register");
        Buf { io, mr }
    }

    pub fn addr(&self, off: usize) -> u64 {
        self.io.addr() + off as u64
    }

    pub fn sge(&self, off: usize, len: u32) -> Sge {
        self.mr.sge(self.addr(off), len)
    }

    pub fn sgl(&self, off: usize, len: u32) -> SgeList {
        SgeList::one(self.sge(off, len))
    }

    pub fn fill(&mut self, off: usize, data: &[u8]) {
        self.io.as_mut_slice()[off..off + data.len()].copy_from_slice(data);
    }

    pub fn get(&self, off: usize, len: usize) -> &[u8] {
        &self.io.as_slice()[off..off + len]
    }
}

/// A byte pattern that differs per `seed` and position.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One side of a connection.
pub struct Endpoint {
    pub id: CmId,
    pub qp: Qp,
    pub pd: Pd,
    pub dev: Device,
    pub scq: Cq,
    pub rcq: Cq,
    pub comp: Option<CompChannel>,
    pub srq: Option<Srq>,
    pub buf: Buf,
}

pub const BUF_LEN: usize = 64 * 1024;

impl Endpoint {
    pub fn recv(&self, wr_id: u64, off: usize, len: u32) {
        self.qp
            .post_recv([&RecvWr::new(wr_id, self.buf.sgl(off, len))])
            .expect("post_recv");
    }

    pub fn send(&self, wr_id: u64, off: usize, len: u32) {
        self.qp
            .post_send([&SendWr::send(wr_id, self.buf.sgl(off, len))])
            .expect("post_send");
    }
}

/// How to build a connection.
pub struct Opts<'a> {
    pub cap: QpCap,
    pub client_param: ConnParam<'a>,
    pub server_param: ConnParam<'a>,
    /// Give both sides a completion channel.
    pub channels: bool,
    /// Share this SRQ on the server side (created by the caller on `server_pd`).
    pub server_srq: Option<(&'a Pd, &'a Srq)>,
    /// Called with the client endpoint before connect (post receives here).
    pub client_pre: &'a dyn Fn(&Endpoint),
    /// Called with the server endpoint before accept (post receives here).
    pub server_pre: &'a dyn Fn(&Endpoint),
}

impl Default for Opts<'_> {
    fn default() -> Self {
        Opts {
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            },
            client_param: ConnParam::default(),
            server_param: ConnParam::default(),
            channels: false,
            server_srq: None,
            client_pre: &|_| {},
            server_pre: &|_| {},
        }
    }
}

/// A listener on `env.addr`.
pub struct Listener {
    pub ch: EventChannel,
    pub id: CmId,
    pub addr: SocketAddr,
}

pub fn listen(env: &Env) -> Listener {
    let ch = env.fabric.create_event_channel().expect("event channel");
    let id = ch.create_id().expect("create_id");
    let addr = SocketAddr::new(env.addr, port());
    id.bind(addr).expect("bind");
    id.listen(16).expect("listen");
    Listener { ch, id, addr }
}

fn endpoint(id: CmId, opts: &Opts<'_>, pd: Option<&Pd>, srq: Option<&Srq>) -> Endpoint {
    let dev = id.device().expect("cm id has a device");
    let pd = pd
        .cloned()
        .unwrap_or_else(|| dev.alloc_pd().expect("alloc_pd"));
    let comp = opts
        .channels
        .then(|| dev.create_comp_channel().expect("comp channel"));
    let scq = dev.create_cq(256, comp.as_ref()).expect("send cq");
    let rcq = dev.create_cq(256, comp.as_ref()).expect("recv cq");
    let qp = id
        .create_qp(&QpInit {
            pd: &pd,
            send_cq: &scq,
            recv_cq: &rcq,
            srq,
            cap: opts.cap,
            sq_sig_all: false,
        })
        .expect("create_qp");
    let buf = Buf::new(
        &pd,
        BUF_LEN,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    Endpoint {
        id,
        qp,
        pd,
        dev,
        scq,
        rcq,
        comp,
        srq: srq.cloned(),
        buf,
    }
}

/// The client half, resolved and with its queue pair, before connect.
pub fn client_endpoint(env: &Env, to: SocketAddr, opts: &Opts<'_>) -> (EventChannel, Endpoint) {
    let ch = env.fabric.create_event_channel().expect("event channel");
    let id = ch.create_id().expect("create_id");
    id.resolve_addr(None, to, 5000).expect("resolve_addr");
    let e = next_event(&ch);
    assert!(
        matches!(e.kind, CmEventKind::AddrResolved),
        "expected ADDR_RESOLVED, got {e:?}"
    );
    assert_eq!(e.id, id.handle());
    let ep = endpoint(id, opts, None, None);
    ep.id.resolve_route(5000).expect("resolve_route");
    let e = next_event(&ch);
    assert!(
        matches!(e.kind, CmEventKind::RouteResolved),
        "expected ROUTE_RESOLVED, got {e:?}"
    );
    (opts.client_pre)(&ep);
    (ch, ep)
}

/// A connected pair.
pub struct Conn {
    pub listener: Listener,
    pub client_ch: EventChannel,
    pub client: Endpoint,
    pub server: Endpoint,
    /// The connect request as the server saw it (without the id).
    pub req_private_data: Vec<u8>,
    pub req_responder_resources: u8,
    pub req_initiator_depth: u8,
    pub req_local: SocketAddr,
    pub req_peer: SocketAddr,
    /// The client's ESTABLISHED private data.
    pub rep_private_data: Vec<u8>,
}

/// Takes the next event, which must be a connect request.
pub fn take_request(ch: &EventChannel, listener: &CmId) -> ConnectRequest {
    let e = next_event(ch);
    assert_eq!(
        e.id,
        listener.handle(),
        "connect request names the listener"
    );
    match e.kind {
        CmEventKind::ConnectRequest(r) => *r,
        other => panic!("expected CONNECT_REQUEST, got {other:?}"),
    }
}

pub fn connect_with(env: &Env, opts: &Opts<'_>) -> Conn {
    let listener = listen(env);
    let (client_ch, client) = client_endpoint(env, listener.addr, opts);
    client.id.connect(&opts.client_param).expect("connect");
    let req = take_request(&listener.ch, &listener.id);
    let (srv_pd, srv_srq) = match opts.server_srq {
        Some((pd, srq)) => (Some(pd), Some(srq)),
        None => (None, None),
    };
    let server = endpoint(req.id, opts, srv_pd, srv_srq);
    (opts.server_pre)(&server);
    server.id.accept(&opts.server_param).expect("accept");
    let e = next_event(&client_ch);
    assert_eq!(e.id, client.id.handle());
    let rep_private_data = match e.kind {
        CmEventKind::Established { private_data, .. } => private_data,
        other => panic!(
            "client: expected ESTABLISHED, got {other:?} (status {})",
            e.status
        ),
    };
    let e = next_event(&listener.ch);
    assert_eq!(e.id, server.id.handle());
    assert!(
        matches!(e.kind, CmEventKind::Established { .. }),
        "server: expected ESTABLISHED, got {e:?}"
    );
    Conn {
        listener,
        client_ch,
        client,
        server,
        req_private_data: req.private_data,
        req_responder_resources: req.responder_resources,
        req_initiator_depth: req.initiator_depth,
        req_local: req.local_addr,
        req_peer: req.peer_addr,
        rep_private_data,
    }
}

pub fn connect(env: &Env) -> Conn {
    connect_with(env, &Opts::default())
}

/// The device that owns `env.addr`.
pub fn device(env: &Env) -> Device {
    let ch = env.fabric.create_event_channel().expect("event channel");
    let id = ch.create_id().expect("create_id");
    id.bind(SocketAddr::new(env.addr, 0)).expect("bind");
    id.device().expect("bound id has a device")
}
