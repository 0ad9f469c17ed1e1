//! The association: one NVMe-oF controller, shared by its admin queue and its I/O queues.

use std::sync::Arc;

use parking_lot::Mutex;

use super::DisconnectFn;
use super::queue::QueueRef;
use crate::nvme::{Connect, ConnectReject, Controller};
use crate::reactor::Reactors;
use crate::target::Subsystem;

struct State {
    ctrl: Controller,
    io_queues: Vec<(u16, QueueRef)>,
    closed: bool,
}

/// One association: an NVMe-oF controller (the sans-I/O [`Controller`] state under a lock)
/// with its admin queue and I/O queues, registered with its subsystem under its CNTLID.
///
/// The admin queue's poll group owns it: it runs the admin commands, the keep-alive timer and
/// the AERs. I/O queues on any reactor attach to it with their Connect and detach when they
/// go; those are the only cross-reactor accesses, and they happen on the control path, under
/// the lock.
pub struct Association {
    cntlid: u16,
    subsystem: Arc<Subsystem>,
    admin: QueueRef,
    hostnqn: String,
    host_id: crate::reservation::HostId,
    disconnect: DisconnectFn,
    state: Mutex<State>,
}

impl std::fmt::Debug for Association {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Association")
            .field("cntlid", &self.cntlid)
            .field("subnqn", &self.subsystem.nqn())
            .field("hostnqn", &self.hostnqn)
            .finish()
    }
}

impl Association {
    pub(super) fn new(
        ctrl: Controller,
        subsystem: Arc<Subsystem>,
        admin: QueueRef,
        disconnect: DisconnectFn,
    ) -> Self {
        Self {
            cntlid: ctrl.cntlid(),
            hostnqn: ctrl.hostnqn().as_str().to_string(),
            host_id: crate::reservation::HostId(*ctrl.hostid()),
            subsystem,
            admin,
            disconnect,
            state: Mutex::new(State {
                ctrl,
                io_queues: Vec::new(),
                closed: false,
            }),
        }
    }

    /// The controller id.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The subsystem.
    pub fn subsystem(&self) -> &Arc<Subsystem> {
        &self.subsystem
    }

    /// The host NQN of the association.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// The host's 128-bit Host Identifier (from Connect): who the host is to reservations.
    /// Read per I/O command, so it is kept outside the lock.
    pub fn host_id(&self) -> crate::reservation::HostId {
        self.host_id
    }

    /// The admin queue.
    pub fn admin_queue(&self) -> QueueRef {
        self.admin
    }

    /// Runs `f` on the NVMe controller state, under the lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut Controller) -> R) -> R {
        f(&mut self.state.lock().ctrl)
    }

    /// Whether the association has ended.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Connected I/O queues.
    pub fn num_io_queues(&self) -> usize {
        self.state.lock().io_queues.len()
    }

    /// Attaches an I/O queue after validating its Connect. Returns the Connect response DW0.
    pub(super) fn attach_io_queue(&self, c: &Connect, q: QueueRef) -> Result<u32, ConnectReject> {
        let mut s = self.state.lock();
        if s.closed {
            return Err(ConnectReject::unknown_controller());
        }
        let dw0 = s.ctrl.accept_io_queue(c)?;
        s.io_queues.push((c.cmd.qid, q));
        let n = s.io_queues.len() as u32;
        drop(s);
        self.subsystem
            .update_controller(self.cntlid, |i| i.num_io_qpairs = n);
        Ok(dw0)
    }

    /// Detaches an I/O queue that went away.
    pub(super) fn detach_io_queue(&self, qid: u16, q: QueueRef) {
        let mut s = self.state.lock();
        let before = s.io_queues.len();
        s.io_queues.retain(|(id, r)| !(*id == qid && *r == q));
        if s.io_queues.len() == before {
            return;
        }
        s.ctrl.io_queue_closed(qid);
        let n = s.io_queues.len() as u32;
        drop(s);
        self.subsystem
            .update_controller(self.cntlid, |i| i.num_io_qpairs = n);
    }

    /// Disconnects every I/O queue (controller reset), keeping the association.
    pub(super) fn disconnect_io_queues(&self, reactors: &Reactors) {
        let queues: Vec<QueueRef> = self
            .state
            .lock()
            .io_queues
            .iter()
            .map(|(_, q)| *q)
            .collect();
        for q in queues {
            q.disconnect(reactors, self.disconnect);
        }
    }

    /// Ends the association: no further I/O queue may attach, every attached one is told to
    /// disconnect, and the controller id is freed. Idempotent.
    pub(super) fn teardown(&self, reactors: &Reactors) {
        let queues: Vec<QueueRef> = {
            let mut s = self.state.lock();
            if s.closed {
                return;
            }
            s.closed = true;
            s.ctrl.set_fatal();
            s.io_queues.iter().map(|(_, q)| *q).collect()
        };
        tracing::debug!(
            cntlid = self.cntlid,
            subnqn = self.subsystem.nqn(),
            io_queues = queues.len(),
            "association ended"
        );
        for q in queues {
            q.disconnect(reactors, self.disconnect);
        }
        self.subsystem.remove_controller(self.cntlid);
    }
}
