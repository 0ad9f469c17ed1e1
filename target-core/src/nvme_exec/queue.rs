//! The NVMe state of one transport connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use arrayvec::ArrayVec;
use serde_json::{Value, json};

use super::association::Association;
use super::auth_cmd::QueueAuth;
use super::fused::FusedTable;
use super::request::AerDone;
use super::{DisconnectFn, TransportInfo};
use crate::nvme::{Cqe, SglPolicy, Sqe, Status, SubsystemKind};
use crate::reactor::Reactors;
use crate::target::listener_io::ListenerIo;
use crate::target::{AdrFam, ListenAddr, PgCore, SubsystemType, Target};

/// Names one queue of one transport on one reactor. `key` is the transport's own,
/// generation-tagged connection key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueRef {
    /// The reactor (poll group) that owns the queue.
    pub reactor: usize,
    /// The transport's index.
    pub transport: usize,
    /// The transport's key for the connection.
    pub key: u64,
}

impl QueueRef {
    /// Sends a disconnect request for this queue to its reactor.
    pub fn disconnect(&self, reactors: &Reactors, f: DisconnectFn) {
        let (t, k) = (self.transport, self.key);
        if let Err(e) = reactors.send_ctrl(self.reactor, move |ctx| f(ctx, t, k)) {
            tracing::debug!(
                "cannot send a queue disconnect to reactor {}: {e}",
                self.reactor
            );
        }
    }
}

/// What a queue is, once connected.
#[derive(Debug, Clone)]
pub enum QueueRole {
    /// No Connect yet: only a Connect is accepted.
    Unconnected,
    /// The admin queue of a controller (it owns the controller).
    Admin(Arc<Association>),
    /// An I/O queue of a controller.
    Io(Arc<Association>),
}

/// One connection's NVMe state: role, queue id and size, submission queue head, subsystem, and
/// the addresses it came through.
#[derive(Debug)]
pub struct Queue {
    pub(super) me: QueueRef,
    pub(super) role: QueueRole,
    pub(super) qid: u16,
    pub(super) sqsize: u16,
    pub(super) sqhd: u16,
    pub(super) sq_flow_control_disabled: bool,
    pub(super) subsystem: Option<u32>,
    pub(super) listen: ListenAddr,
    pub(super) local: SocketAddr,
    pub(super) peer: SocketAddr,
    /// DH-HMAC-CHAP state, when the host must authenticate.
    pub(super) auth: Option<QueueAuth>,
    /// Where this queue's listener is in the poll group's ANA snapshot (`PgCore::ana_state`).
    pub(super) ana_path: Option<(u64, usize)>,
    /// Its listener's I/O counters on this poll group.
    io_stats: Arc<ListenerIo>,
    /// Fused Compare + Write pairs in progress.
    pub(super) fused: FusedTable,
    /// The target (fused halves wake each other by control message); `None` in unit tests.
    pub(super) target: Option<Arc<Target>>,
    closing: bool,
    finished: bool,
}

fn addr_json(trtype: &str, a: &SocketAddr) -> Value {
    json!({
        "trtype": trtype,
        "adrfam": if a.is_ipv4() { AdrFam::Ipv4.as_str() } else { AdrFam::Ipv6.as_str() },
        "traddr": a.ip().to_string(),
        "trsvcid": a.port().to_string(),
    })
}

impl Queue {
    /// A new, unconnected queue: `me` names it (reactor, transport, key), `qid` is the queue id
    /// the transport binding announced (RDMA CM private data; the Connect must match), `listen`
    /// the listener it came through, `local`/`peer` the connection's addresses. Counts it as a
    /// new unassociated connection of the poll group.
    pub fn new(
        core: &mut PgCore,
        me: QueueRef,
        qid: u16,
        listen: ListenAddr,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Self {
        core.qpair_created();
        let io_stats = core.listener_io(&listen);
        Self {
            io_stats,
            me,
            role: QueueRole::Unconnected,
            qid,
            sqsize: 0,
            sqhd: 0,
            sq_flow_control_disabled: false,
            subsystem: None,
            listen,
            local,
            peer,
            auth: None,
            ana_path: None,
            fused: FusedTable::default(),
            target: Some(Arc::clone(core.target())),
            closing: false,
            finished: false,
        }
    }

    /// An unconnected queue outside any poll group (unit tests).
    #[cfg(test)]
    pub(crate) fn detached(qid: u16) -> Self {
        let a: SocketAddr = "10.0.0.1:4420".parse().expect("addr");
        Self {
            me: QueueRef {
                reactor: 0,
                transport: 0,
                key: 1,
            },
            role: QueueRole::Unconnected,
            qid,
            sqsize: 0,
            sqhd: 0,
            sq_flow_control_disabled: false,
            subsystem: None,
            listen: ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.1", "4420"),
            io_stats: Arc::default(),
            local: a,
            peer: a,
            auth: None,
            ana_path: None,
            fused: FusedTable::default(),
            target: None,
            closing: false,
            finished: false,
        }
    }

    /// The queue's reference (reactor, transport, key).
    pub fn me(&self) -> QueueRef {
        self.me
    }

    /// Queue id (from the binding until the Connect, then the Connect's).
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Whether this is (or will be) an admin queue.
    pub fn is_admin(&self) -> bool {
        self.qid == 0
    }

    /// Role.
    pub fn role(&self) -> &QueueRole {
        &self.role
    }

    /// The association, once connected.
    pub fn association(&self) -> Option<&Arc<Association>> {
        match &self.role {
            QueueRole::Admin(c) | QueueRole::Io(c) => Some(c),
            QueueRole::Unconnected => None,
        }
    }

    /// The subsystem id, once connected.
    pub fn subsystem(&self) -> Option<u32> {
        self.subsystem
    }

    /// The listener the connection came through.
    pub fn listen_addr(&self) -> &ListenAddr {
        &self.listen
    }

    /// Whether the connection belongs to `host` (NQN, compared byte for byte as the allow
    /// list does).
    pub fn host_matches(&self, host: &str) -> bool {
        self.association().is_some_and(|c| c.hostnqn() == host)
    }

    /// Whether [`Queue::begin_close`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The SGL policy for commands on this queue.
    #[inline]
    pub fn sgl_policy(&self, t: &TransportInfo, in_capsule_capacity: u32) -> SglPolicy {
        if self.is_admin() {
            t.limits
                .admin_sgl_policy(in_capsule_capacity, t.admin_max_len)
        } else {
            let mut p = t.limits.io_sgl_policy();
            p.in_capsule_capacity = p.in_capsule_capacity.min(in_capsule_capacity);
            // An I/O queue Connect carries 1 KiB; the queue's policy allows that much anyway.
            p
        }
    }

    /// Advances the submission queue head for a received command.
    pub(super) fn consume_sqe(&mut self) {
        if self.sqsize > 0 {
            self.sqhd = if self.sqhd >= self.sqsize {
                0
            } else {
                self.sqhd + 1
            };
        }
    }

    /// SQHD to report.
    pub(super) fn sqhd(&self) -> u16 {
        if self.sq_flow_control_disabled {
            crate::nvme::cqe::SQHD_FLOW_CONTROL_DISABLED
        } else {
            self.sqhd
        }
    }

    /// A completion for `sqe` on this queue with `status`; an I/O queue counts it for its
    /// listener.
    #[inline]
    pub fn cqe(&self, sqe: &Sqe, status: Status) -> Cqe {
        if matches!(self.role, QueueRole::Io(_)) {
            self.io_stats.count_nvme(sqe, status);
        }
        Cqe::for_command(sqe, self.qid, self.sqhd(), status)
    }

    /// The keep-alive timer of this admin queue's controller expired at `now` (once), or a
    /// DH-HMAC-CHAP step of this queue waited for the host too long: the transport must
    /// disconnect the queue (for an admin queue that ends the association).
    pub fn keep_alive_expired(&self, now: Instant) -> bool {
        if !self.closing && self.auth.as_ref().is_some_and(|a| a.timed_out(now)) {
            return true;
        }
        match &self.role {
            QueueRole::Admin(c) if !self.closing => c.with(|c| c.keep_alive_expired(now)),
            _ => false,
        }
    }

    /// Namespaces of `subsystem` changed (`nsids`, possibly empty) or the ANA log of a
    /// listener did: for an admin queue of that subsystem, records the namespace change and,
    /// when the ANA log of the listener this queue came through has a new generation, the ANA
    /// change; returns the parked AERs to complete now (at most one per event).
    pub fn namespaces_changed(
        &self,
        core: &PgCore,
        subsystem: u32,
        nsids: &[u32],
    ) -> ArrayVec<AerDone, 2> {
        let mut out = ArrayVec::new();
        let QueueRole::Admin(c) = &self.role else {
            return out;
        };
        if self.subsystem != Some(subsystem) || self.closing {
            return out;
        }
        let ana = core.ana_generation(subsystem, &self.listen);
        let done = |a: crate::nvme::AerCompletion| AerDone {
            cid: a.cid,
            cqe: a.cqe(self.sqhd()),
        };
        c.with(|c| {
            if !nsids.is_empty()
                && let Some(a) = c.ns_changed(nsids)
            {
                out.push(done(a));
            }
            if let Some(g) = ana
                && let Some(a) = c.ana_log_generation(g)
            {
                out.push(done(a));
            }
        });
        out
    }

    /// Reservation notices on namespace `nsid` of `subsystem`: for an admin queue of that
    /// subsystem whose host is a recipient, queues the Reservation Notification log pages;
    /// returns the parked AER to complete now, if any.
    pub fn reservation_notices(
        &self,
        subsystem: u32,
        nsid: u32,
        notices: &[(crate::reservation::HostId, crate::reservation::NoticeKind)],
    ) -> Option<AerDone> {
        let QueueRole::Admin(c) = &self.role else {
            return None;
        };
        if self.subsystem != Some(subsystem) || self.closing {
            return None;
        }
        let mut done = None;
        for &(host, kind) in notices {
            if host != c.host_id() {
                continue;
            }
            if let Some(a) = c.with(|c| c.resv_notify(nsid, kind)) {
                done = Some(AerDone {
                    cid: a.cid,
                    cqe: a.cqe(self.sqhd()),
                });
            }
        }
        done
    }

    /// Subsystems, listeners or hosts changed: for the admin queue of a discovery controller,
    /// rebuilds the log its host sees and, if it differs from the one the host last saw,
    /// returns the parked AER to complete now with the discovery log change notice.
    pub fn discovery_changed(&self, target: &Arc<Target>) -> Option<AerDone> {
        match &self.role {
            QueueRole::Admin(c)
                if !self.closing && c.subsystem().kind() == SubsystemType::Discovery =>
            {
                let genctr = super::discovery_log::build(target, c.hostnqn(), self).genctr;
                c.with(|c| c.discovery_log_generation(genctr))
                    .map(|a| AerDone {
                        cid: a.cid,
                        cqe: a.cqe(self.sqhd()),
                    })
            }
            _ => None,
        }
    }

    /// The connection is going away. For an admin queue this ends the association at once: I/O
    /// queues are told to disconnect and the controller id is freed. Idempotent.
    pub fn begin_close(&mut self, core: &PgCore) {
        if self.closing {
            return;
        }
        self.closing = true;
        if let QueueRole::Admin(c) = &self.role {
            c.teardown(core.target().reactors());
        }
    }

    /// The connection is gone: detaches an I/O queue from its controller and updates the poll
    /// group's counters (which may finish a subsystem stop). Call exactly once.
    pub fn finish(&mut self, core: &mut PgCore) {
        if self.finished {
            return;
        }
        self.begin_close(core);
        self.finished = true;
        match &self.role {
            QueueRole::Unconnected => core.qpair_removed(None, false),
            QueueRole::Admin(_) => core.qpair_removed(self.subsystem, true),
            QueueRole::Io(c) => {
                c.detach_io_queue(self.qid, self.me);
                core.qpair_removed(self.subsystem, false);
            }
        }
    }

    /// SPDK's `nvmf_subsystem_get_qpairs` entry for this queue.
    pub fn describe(&self, transport: &str) -> Value {
        let (cntlid, hostnqn) = match self.association() {
            Some(c) => (Value::from(c.cntlid()), Value::from(c.hostnqn())),
            None => (Value::Null, Value::Null),
        };
        let state = if self.closing {
            "deactivating"
        } else if matches!(self.role, QueueRole::Unconnected) {
            "connecting"
        } else if self.auth.as_ref().is_some_and(|a| !a.is_authenticated()) {
            "authenticating"
        } else {
            "active"
        };
        let mut v = json!({
            "cntlid": cntlid,
            "qid": self.qid,
            "state": state,
            "thread": format!("nvmf_tgt_poll_group_{:03}", self.me.reactor),
            "hostnqn": hostnqn,
            "listen_address": {
                "trtype": transport,
                "adrfam": self.listen.adrfam.as_str(),
                "traddr": self.listen.traddr,
                "trsvcid": self.listen.trsvcid,
            },
            "peer_address": addr_json(transport, &self.peer),
        });
        if let Some(a) = &self.auth {
            v["auth"] = a.describe();
        }
        v
    }

    /// Whether the subsystem is a discovery subsystem (for logs).
    pub fn is_discovery(&self) -> bool {
        self.association()
            .is_some_and(|c| c.with(|c| c.kind() == SubsystemKind::Discovery))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::spec::admin_opc;

    #[test]
    fn sq_head_wraps_at_the_queue_size() {
        let mut q = Queue::detached(1);
        q.consume_sqe();
        assert_eq!(q.sqhd(), 0, "no size before Connect");
        q.sqsize = 3; // 4 entries
        q.sqhd = 1;
        let heads: Vec<u16> = (0..6)
            .map(|_| {
                q.consume_sqe();
                q.sqhd()
            })
            .collect();
        assert_eq!(heads, [2, 3, 0, 1, 2, 3]);
        q.sq_flow_control_disabled = true;
        assert_eq!(q.sqhd(), 0xFFFF);
        let c = q.cqe(&Sqe::new(admin_opc::KEEP_ALIVE, 0xF01F), Status::SUCCESS);
        assert_eq!((c.cid, c.sqid, c.sqhd), (0xF01F, 1, 0xFFFF));
    }

    #[test]
    fn unconnected_queue_describes_itself() {
        let q = Queue::detached(0);
        assert!(q.is_admin());
        assert!(q.association().is_none());
        assert!(!q.host_matches("x"));
        let d = q.describe("RDMA");
        assert_eq!(d["state"], "connecting");
        assert_eq!(d["qid"], 0);
        assert_eq!(d["listen_address"]["trsvcid"], "4420");
        assert_eq!(d["peer_address"]["adrfam"], "IPv4");
    }
}
