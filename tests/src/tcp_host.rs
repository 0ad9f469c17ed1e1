//! A Rust NVMe/TCP test host: [`transport_tcp::host::Host`] (the sans-I/O host side) over a
//! real socket, so tests drive rtgt's TCP transport over loopback the way the Linux
//! `nvme-tcp` host does — and break the rules on purpose ([`TcpQueue::send_raw`]).
//!
//! - [`TcpQueue`]: one connection: ICReq/ICResp, submit, wait, pipelined I/O.
//! - [`TcpCtrl`]: a controller: admin queue bring-up (Connect, CC.EN, Identify, Number of
//!   Queues) and I/O queues.
//! - [`TcpEnv`]: an in-process target with the TCP transport listening on 127.0.0.1.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::{CNTLID_DYNAMIC, admin_opc, prop};
use target_core::nvme::{Cqe, Sqe, Status};
use target_core::target::{AdrFam, ListenAddr};
use transport_tcp::host::{Completion, Host, HostConfig, HostError, HostState};
use transport_tcp::pdu::Digests;

use crate::TestTarget;
use crate::nvme_host::{DhchapOpts, HOSTNQN, Workload, authenticate_if_asked_on, pattern};

/// How long a test waits for the target.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// One NVMe/TCP connection.
pub struct TcpQueue {
    sock: TcpStream,
    /// The sans-I/O host.
    pub host: Host,
    qid: u16,
    depth: u16,
    next_cid: u16,
    done: HashMap<u16, Completion>,
    /// The socket was closed by the target.
    pub eof: bool,
    /// When set, every piece of bytes this host wrote to the socket, in order (a capture of
    /// the host's side, e.g. for fuzz seeds).
    pub capture: Option<Vec<Vec<u8>>>,
}

impl TcpQueue {
    /// Connects to `to` and completes ICReq/ICResp.
    pub fn connect(to: SocketAddr, cfg: HostConfig, depth: u16) -> Result<TcpQueue, String> {
        Self::connect_with(to, cfg, depth, false)
    }

    /// [`TcpQueue::connect`], capturing what the host sends from its ICReq on when
    /// `capture` is set.
    pub fn connect_with(
        to: SocketAddr,
        cfg: HostConfig,
        depth: u16,
        capture: bool,
    ) -> Result<TcpQueue, String> {
        let sock = TcpStream::connect_timeout(&to, TIMEOUT).map_err(|e| format!("connect: {e}"))?;
        sock.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut q = TcpQueue {
            sock,
            host: Host::new(cfg),
            qid: cfg.qid,
            depth,
            next_cid: 0,
            done: HashMap::new(),
            eof: false,
            capture: capture.then(Vec::new),
        };
        let deadline = Instant::now() + TIMEOUT;
        while *q.host.state() == HostState::AwaitIcResp {
            q.pump(deadline)?;
        }
        match q.host.state() {
            HostState::Live => Ok(q),
            s => Err(format!("ICResp: {s:?}")),
        }
    }

    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Entries.
    pub fn depth(&self) -> u16 {
        self.depth
    }

    /// Sends what the host queued, then reads what arrived (waiting up to 10 ms for it) and
    /// feeds it to the host. Errors on a host protocol error or when `deadline` passed.
    pub fn pump(&mut self, deadline: Instant) -> Result<(), String> {
        let out = self.host.take_output();
        if !out.is_empty() {
            self.write(&out)?;
        }
        if Instant::now() >= deadline {
            return Err("timeout".into());
        }
        self.sock
            .set_read_timeout(Some(Duration::from_millis(10)))
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 65536];
        match self.sock.read(&mut buf) {
            Ok(0) => {
                self.eof = true;
                Err("connection closed by the target".into())
            }
            Ok(n) => self
                .host
                .recv(&buf[..n])
                .map_err(|e| format!("host: {e:?}")),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(())
            }
            Err(e) => {
                self.eof = true;
                Err(format!("receive: {e}"))
            }
        }
    }

    /// Reads until the target closes the connection (or `within` passes): returns the host's
    /// error (a C2HTermReq gives [`HostError::Terminated`]) and whether the socket closed.
    pub fn wait_closed(&mut self, within: Duration) -> (Option<HostError>, bool) {
        let deadline = Instant::now() + within;
        while !self.eof && Instant::now() < deadline {
            let _ = self.pump(deadline);
        }
        let err = match self.host.state() {
            HostState::Failed(e) => Some(e.clone()),
            _ => None,
        };
        (err, self.eof)
    }

    /// Appends raw bytes to what the host sends (malformed PDUs).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.host.send_raw(bytes);
        let out = self.host.take_output();
        self.write(&out)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        if let Some(c) = self.capture.as_mut() {
            c.push(bytes.to_vec());
        }
        self.sock.write_all(bytes).map_err(|e| format!("send: {e}"))
    }

    fn cid(&mut self) -> u16 {
        loop {
            let c = self.next_cid;
            self.next_cid = self.next_cid.wrapping_add(1) % self.depth.max(1);
            if !self.done.contains_key(&c) {
                return c;
            }
        }
    }

    /// Submits a command (its CID is set here); `write` data or a `read` length.
    pub fn submit(
        &mut self,
        mut sqe: Sqe,
        write: Option<Vec<u8>>,
        read: u32,
    ) -> Result<u16, String> {
        let cid = self.cid();
        sqe.set_cid(cid);
        let r = match (write, read) {
            (Some(d), _) => self.host.submit_write(sqe, d),
            (None, 0) => self.host.submit(sqe),
            (None, n) => self.host.submit_read(sqe, n),
        };
        r.map_err(|e| format!("submit: {e:?}"))?;
        Ok(cid)
    }

    /// Waits for the completion of `cid`.
    pub fn wait(&mut self, cid: u16) -> Result<Completion, String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            while let Some(c) = self.host.poll_completion() {
                self.done.insert(c.cqe.cid, c);
            }
            if let Some(c) = self.done.remove(&cid) {
                return Ok(c);
            }
            self.pump(deadline)?;
        }
    }

    /// Pumps for `d`; panics if any of `cids` completes meanwhile (a command that must wait).
    /// Completions that arrive are kept for [`TcpQueue::wait`].
    pub fn assert_none_complete_for(&mut self, cids: &[u16], d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.pump(until + TIMEOUT).expect("host pump");
            while let Some(c) = self.host.poll_completion() {
                assert!(
                    !cids.contains(&c.cqe.cid),
                    "CID {:#x} completed while it should wait",
                    c.cqe.cid
                );
                self.done.insert(c.cqe.cid, c);
            }
        }
    }

    /// Waits for any completion.
    pub fn wait_any(&mut self) -> Result<Completion, String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(c) = self.host.poll_completion() {
                return Ok(c);
            }
            if let Some(&k) = self.done.keys().next() {
                return Ok(self.done.remove(&k).expect("present"));
            }
            self.pump(deadline)?;
        }
    }

    /// Submits and waits.
    pub fn cmd(
        &mut self,
        sqe: Sqe,
        write: Option<Vec<u8>>,
        read: u32,
    ) -> Result<Completion, String> {
        let cid = self.submit(sqe, write, read)?;
        self.wait(cid)
    }

    /// Submits and waits; an error status is an error.
    pub fn cmd_ok(
        &mut self,
        sqe: Sqe,
        write: Option<Vec<u8>>,
        read: u32,
    ) -> Result<Completion, String> {
        let c = self.cmd(sqe, write, read)?;
        if c.cqe.status != Status::SUCCESS {
            return Err(format!(
                "command {:#x} failed: {:?}",
                sqe.opcode(),
                c.cqe.status
            ));
        }
        Ok(c)
    }
}

/// Writes the workload's commands (`qd` in flight, a pattern of `seed`), then reads them back
/// and compares.
pub fn write_read_verify(q: &mut TcpQueue, w: &Workload) -> Result<(), String> {
    let Workload {
        nsid,
        bs,
        lba0,
        blocks,
        count,
        qd,
        seed,
    } = *w;
    for write in [true, false] {
        let mut next = 0usize;
        let mut inflight: HashMap<u16, u64> = HashMap::new();
        while next < count || !inflight.is_empty() {
            while next < count && inflight.len() < qd {
                let lba = lba0 + (next as u64) * u64::from(blocks);
                let len = blocks as usize * bs;
                let cid = if write {
                    let s = crate::nvme_host::write_sqe(nsid, lba, blocks);
                    q.submit(s, Some(pattern(seed, lba, blocks, bs)), 0)?
                } else {
                    let s = crate::nvme_host::read_sqe(nsid, lba, blocks);
                    q.submit(s, None, len as u32)?
                };
                inflight.insert(cid, lba);
                next += 1;
            }
            let c = q.wait_any()?;
            let Some(lba) = inflight.remove(&c.cqe.cid) else {
                return Err(format!("completion of unknown cid {}", c.cqe.cid));
            };
            if c.cqe.status != Status::SUCCESS {
                return Err(format!(
                    "{} at lba {lba}: {:?}",
                    if write { "write" } else { "read" },
                    c.cqe.status
                ));
            }
            if !write && c.data != pattern(seed, lba, blocks, bs) {
                return Err(format!("data mismatch at lba {lba} ({blocks} blocks)"));
            }
        }
    }
    Ok(())
}

/// How a controller connects.
#[derive(Clone, Debug)]
pub struct TcpConnectOpts {
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Digests asked for in every ICReq.
    pub digests: Digests,
    /// I/O queues.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub io_depth: u16,
    /// Keep-alive timeout (ms).
    pub kato_ms: u32,
    /// Host Identifier (default: one derived from the host NQN).
    pub hostid: Option<[u8; 16]>,
    /// DH-HMAC-CHAP keys, used when a Connect response asks for authentication.
    pub dhchap: Option<DhchapOpts>,
    /// Capture what the host sends on every queue ([`TcpQueue::capture`]).
    pub capture: bool,
}

impl TcpConnectOpts {
    /// Two I/O queues of 32 entries, no digests, no keep-alive.
    pub fn new(subnqn: &str) -> Self {
        Self {
            subnqn: subnqn.into(),
            hostnqn: HOSTNQN.into(),
            digests: Digests::default(),
            io_queues: 2,
            io_depth: 32,
            kato_ms: 0,
            hostid: None,
            dhchap: None,
            capture: false,
        }
    }
}

/// A connected controller.
pub struct TcpCtrl {
    /// The admin queue.
    pub admin: TcpQueue,
    /// I/O queues (qid = index + 1).
    pub io: Vec<TcpQueue>,
    /// Controller id.
    pub cntlid: u16,
    /// In-capsule bytes the target takes on I/O queues (IOCCSZ·16 − 64).
    pub in_capsule: u32,
}

fn hostid(hostnqn: &str) -> [u8; 16] {
    let mut h = [0u8; 16];
    for (i, b) in hostnqn.bytes().enumerate() {
        h[i % 16] = h[i % 16].wrapping_mul(31).wrapping_add(b);
    }
    h
}

/// Fabrics Connect on a queue (data in-capsule, as Linux sends it), then DH-HMAC-CHAP if the
/// response asks for it.
pub fn tcp_connect_cmd(
    q: &mut TcpQueue,
    o: &TcpConnectOpts,
    cntlid: u16,
    kato_ms: u32,
) -> Result<Completion, String> {
    let id = o.hostid.unwrap_or_else(|| hostid(&o.hostnqn));
    let data = build::connect_data(id, cntlid, &o.subnqn, &o.hostnqn);
    let sqe = build::connect_sqe(
        0,
        q.qid(),
        q.depth() - 1,
        kato_ms,
        target_core::nvme::SglDescriptor::null_keyed(),
    );
    let c = q.cmd(sqe, Some(data.to_vec()), 0)?;
    if c.cqe.status == Status::SUCCESS {
        let qid = q.qid();
        authenticate_if_asked_on(q, qid, &o.subnqn, &o.hostnqn, o.dhchap.as_ref(), c.cqe.dw0)
            .map_err(|e| format!("authentication on queue {qid}: {e:?}"))?;
    }
    Ok(c)
}

impl TcpCtrl {
    /// Connects the admin queue, enables the controller, identifies it and connects the I/O
    /// queues.
    pub fn connect(to: SocketAddr, o: &TcpConnectOpts) -> Result<TcpCtrl, String> {
        let cfg = HostConfig {
            digests: o.digests,
            in_capsule_limit: 8192,
            qid: 0,
            ..HostConfig::default()
        };
        let mut admin = TcpQueue::connect_with(to, cfg, 32, o.capture)?;
        let c = tcp_connect_cmd(&mut admin, o, CNTLID_DYNAMIC, o.kato_ms)?;
        if c.cqe.status != Status::SUCCESS {
            return Err(format!("admin Connect: {:?}", c.cqe.status));
        }
        let cntlid = c.cqe.dw0 as u16;
        let mut ctrl = TcpCtrl {
            admin,
            io: Vec::new(),
            cntlid,
            in_capsule: 0,
        };
        ctrl.prop_set(prop::CC, 0x0046_0001)?;
        let deadline = Instant::now() + TIMEOUT;
        while ctrl.prop_get(prop::CSTS, false)? & 1 == 0 {
            if Instant::now() >= deadline {
                return Err("CSTS.RDY".into());
            }
        }
        let id = ctrl.identify(1, 0)?;
        let ioccsz = u32::from_le_bytes(id[1792..1796].try_into().expect("4"));
        ctrl.in_capsule = (ioccsz * 16).saturating_sub(64);
        if o.io_queues > 0 {
            let n = u32::from(o.io_queues - 1);
            let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
            s.set_cdw(10, 0x07).set_cdw(11, n | n << 16);
            ctrl.admin.cmd_ok(s, None, 0)?;
            for qid in 1..=o.io_queues {
                let cfg = HostConfig {
                    digests: o.digests,
                    in_capsule_limit: ctrl.in_capsule,
                    qid,
                    ..HostConfig::default()
                };
                let mut q = TcpQueue::connect_with(to, cfg, o.io_depth, o.capture)?;
                let c = tcp_connect_cmd(&mut q, o, cntlid, 0)?;
                if c.cqe.status != Status::SUCCESS {
                    return Err(format!("I/O Connect {qid}: {:?}", c.cqe.status));
                }
                ctrl.io.push(q);
            }
        }
        Ok(ctrl)
    }

    /// Property Get (8 bytes when `eight`).
    pub fn prop_get(&mut self, off: u32, eight: bool) -> Result<u64, String> {
        let c = self
            .admin
            .cmd_ok(build::property_get(0, off, eight), None, 0)?;
        Ok(u64::from(c.cqe.dw0) | u64::from(c.cqe.dw1) << 32)
    }

    /// Property Set (4 bytes).
    pub fn prop_set(&mut self, off: u32, v: u32) -> Result<(), String> {
        self.admin
            .cmd_ok(build::property_set(0, off, v), None, 0)
            .map(|_| ())
    }

    /// Identify (4 KiB).
    pub fn identify(&mut self, cns: u8, nsid: u32) -> Result<Vec<u8>, String> {
        let mut s = Sqe::new(admin_opc::IDENTIFY, 0);
        s.set_nsid(nsid).set_cdw(10, u32::from(cns));
        Ok(self.admin.cmd_ok(s, None, 4096)?.data)
    }

    /// Get Log Page of `len` bytes.
    pub fn get_log(&mut self, lid: u8, len: u32) -> Result<Vec<u8>, String> {
        let mut s = Sqe::new(admin_opc::GET_LOG_PAGE, 0);
        let numd = len / 4 - 1;
        s.set_cdw(10, u32::from(lid) | (numd & 0xFFFF) << 16)
            .set_cdw(11, numd >> 16);
        Ok(self.admin.cmd_ok(s, None, len)?.data)
    }

    /// The completion of a one-block read of `nsid` on the first I/O queue.
    pub fn read_one(&mut self, nsid: u32) -> Result<Cqe, String> {
        let q = &mut self.io[0];
        Ok(q.cmd(crate::nvme_host::read_sqe(nsid, 0, 1), None, 512)?
            .cqe)
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: a test listens on it right away).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A target with the TCP transport, listening on 127.0.0.1 on a free port.
pub struct TcpEnv {
    /// The target.
    pub t: TestTarget,
    /// The listener address.
    pub to: SocketAddr,
}

impl TcpEnv {
    /// A target with `reactors` reactors and the TCP transport created with `opts`.
    pub fn new(reactors: usize, opts: Value) -> TcpEnv {
        let t = TestTarget::start(reactors);
        t.transport("TCP", opts);
        let port = free_port();
        TcpEnv {
            t,
            to: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// The listener's address as the target sees it.
    pub fn listen_addr(&self) -> ListenAddr {
        ListenAddr::new(
            "TCP",
            AdrFam::Ipv4,
            "127.0.0.1",
            &self.to.port().to_string(),
        )
    }

    /// A subsystem with a malloc namespace of `blocks` blocks of `bs` bytes, listening on
    /// the TCP address.
    pub fn subsystem(&self, nqn: &str, allow_any: bool, blocks: u64, bs: u32) {
        self.t.subsystem(nqn, allow_any);
        if blocks > 0 {
            let name = format!("m_{}", nqn.rsplit(':').next().unwrap_or("x"));
            self.t.malloc(&name, blocks, bs);
            self.t.add_ns(nqn, &name);
        }
        self.t
            .rt
            .block_on(self.t.target.add_listener(nqn, self.listen_addr()))
            .expect("add listener");
    }

    /// Connects a controller.
    pub fn connect(&self, o: &TcpConnectOpts) -> Result<TcpCtrl, String> {
        TcpCtrl::connect(self.to, o)
    }

    /// `nvmf_get_stats`.
    pub fn stats(&self) -> Value {
        self.t.rt.block_on(self.t.target.stats())
    }

    /// The TCP entries of every poll group in `nvmf_get_stats`.
    pub fn tcp_stats(&self) -> Vec<Value> {
        let stats = self.stats();
        stats["poll_groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["transports"].as_array().cloned().unwrap_or_default())
            .filter(|t| t["trtype"] == "TCP")
            .collect()
    }

    /// Waits until no TCP connection is left, every data buffer is back in the pool or a
    /// poll group's cache, and the poll groups count no queue pair and no bdev I/O.
    pub fn assert_quiescent(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let (_, tr) = self.t.target.transport("TCP").expect("TCP transport");
            let any: &dyn std::any::Any = &*tr;
            let (free, total) = any
                .downcast_ref::<transport_tcp::TcpTransport>()
                .expect("a TcpTransport")
                .pool_counts();
            let pgs = self.tcp_stats();
            let cached: u64 = pgs
                .iter()
                .map(|t| t["buffers_cached"].as_u64().unwrap_or(0))
                .sum();
            let conns: u64 = pgs
                .iter()
                .map(|t| t["connections"].as_u64().unwrap_or(0))
                .sum();
            let stats = self.stats();
            let counters_ok = stats["poll_groups"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|g| {
                    g["current_admin_qpairs"] == 0
                        && g["current_io_qpairs"] == 0
                        && g["current_unassociated_qpairs"] == 0
                        && g["pending_bdev_io"] == 0
                });
            if conns == 0 && free + cached as usize == total && counters_ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not released: {conns} connections, {free} + {cached} of {total} buffers, {stats}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
