//! Preempt and abort across protocols and poll groups: the commands of the initiators a
//! reservation preempt-and-abort removed (NVMe Acquire RACQA 010b, SCSI PREEMPT AND ABORT)
//! are aborted on every poll group, and the command that preempted completes once they are
//! gone.
//!
//! The volume's state has already changed when this starts, so every command those
//! initiators send from now on is checked against it (Reservation Conflict for what it
//! refuses). What is left are the commands already past that check:
//!
//! 1. [`Target::preempt_abort`] visits every poll group once; each hands the
//!    [`PreemptAbort`] to its transports ([`crate::registry::TransportPollGroup::preempt_abort`]),
//!    which mark the matching commands aborted and [`AbortFence::hold`] the fence once per
//!    command still in flight. NVMe: the preempted hosts' commands admitted to the namespace
//!    (`nvme_exec::preempt_abort_mark`); a command not yet at the bdev is completed with
//!    Command Aborted due to Preempt and Abort instead of being submitted, one at the bdev
//!    gets that status instead of its own when it comes back. SCSI: the preempted nexuses'
//!    tasks on the LU end with TASK ABORTED, as for a PREEMPT AND ABORT from SCSI.
//! 2. When every poll group has been visited the fence is armed; the last marked command to
//!    go ([`AbortFence::release`]) runs the completion of the preempting command.
//!
//! Other initiators' commands are neither touched nor waited for. Nothing of this runs per
//! I/O: the fence is an `Arc` cloned into the marked commands only, and a command's
//! completion looks at its own `Option` field.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use super::{Target, with_poll_group};
use crate::reservation::{HostId, Initiator, Nexus};

/// What a preempt-and-abort aborts: the commands of `hosts` (NVMe) and `nexuses` (SCSI) to
/// namespace `nsid` (LU `nsid - 1`) of subsystem `sub`.
#[derive(Debug, Clone)]
pub struct PreemptAbort {
    /// The subsystem.
    pub sub: u32,
    /// The namespace.
    pub nsid: u32,
    /// The preempted NVMe hosts.
    pub hosts: Arc<[HostId]>,
    /// The preempted SCSI I_T nexuses.
    pub nexuses: Arc<[Nexus]>,
}

impl PreemptAbort {
    /// Splits the initiators a preempt-and-abort removed by protocol.
    pub fn new(sub: u32, nsid: u32, aborted: &[Initiator]) -> Self {
        let hosts = aborted
            .iter()
            .filter_map(|w| match w {
                Initiator::Nvme(h) => Some(*h),
                Initiator::Scsi(_) => None,
            })
            .collect();
        let nexuses = aborted
            .iter()
            .filter_map(|w| match w {
                Initiator::Scsi(n) => Some(*n),
                Initiator::Nvme(_) => None,
            })
            .collect();
        Self {
            sub,
            nsid,
            hosts,
            nexuses,
        }
    }

    /// Whether it preempted no NVMe host.
    pub fn no_hosts(&self) -> bool {
        self.hosts.is_empty()
    }
}

type Done = Box<dyn FnOnce() + Send>;

/// Counts the aborted commands still in flight, on every poll group; runs the preempting
/// command's completion when the last one is gone (and every poll group has been visited).
pub struct AbortFence {
    remaining: AtomicU32,
    done: Mutex<Option<Done>>,
}

impl std::fmt::Debug for AbortFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortFence")
            .field("remaining", &self.remaining.load(Ordering::Relaxed))
            .finish()
    }
}

impl AbortFence {
    /// A fence that runs `done` once every hold is released. It starts with one hold (the
    /// visit of the poll groups), released by the caller when marking is over.
    fn new(done: Done) -> Self {
        Self {
            remaining: AtomicU32::new(1),
            done: Mutex::new(Some(done)),
        }
    }

    /// One more aborted command in flight.
    pub fn hold(&self) {
        self.remaining.fetch_add(1, Ordering::AcqRel);
    }

    /// An aborted command is gone.
    pub fn release(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(done) = self.done.lock().take()
        {
            done();
        }
    }

    /// Aborted commands still in flight.
    pub fn remaining(&self) -> u32 {
        self.remaining.load(Ordering::Acquire)
    }
}

impl Target {
    /// Aborts the commands `pa` names on every poll group, then calls `done` (on whichever
    /// reactor saw the last of them go). The volume's state must already refuse their new
    /// commands.
    pub fn preempt_abort(self: &Arc<Self>, pa: PreemptAbort, done: impl FnOnce() + Send + 'static) {
        tracing::info!(
            "preempt and abort on namespace {} of subsystem {}: aborting the commands of {} \
             NVMe host(s) and {} SCSI nexus(es)",
            pa.nsid,
            pa.sub,
            pa.hosts.len(),
            pa.nexuses.len()
        );
        let fence = Arc::new(AbortFence::new(Box::new(done)));
        let (f1, f2) = (Arc::clone(&fence), Arc::clone(&fence));
        let sent = self.reactors().for_each_reactor(
            move |ctx| {
                with_poll_group(ctx, |pg| pg.preempt_abort(&pa, &f1));
            },
            move |_| f2.release(),
        );
        if let Err(e) = sent {
            tracing::warn!("preempt and abort: cannot reach the poll groups: {e}");
            fence.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_fence_fires_once_after_the_visit_and_every_hold() {
        let fired = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&fired);
        let fence = AbortFence::new(Box::new(move || {
            assert!(!f.swap(true, Ordering::SeqCst), "fired twice");
        }));
        fence.hold();
        fence.hold();
        fence.release();
        fence.release();
        assert!(
            !fired.load(Ordering::SeqCst),
            "the visit still holds the fence"
        );
        fence.release();
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(fence.remaining(), 0);
    }

    #[test]
    fn the_initiators_are_split_by_protocol() {
        let h = HostId([7; 16]);
        let n = Nexus {
            initiator: crate::reservation::InitiatorPort::srp([1; 16]),
            relative_target_port: 1,
        };
        let pa = PreemptAbort::new(1, 2, &[Initiator::Nvme(h), Initiator::Scsi(n)]);
        assert_eq!(&pa.hosts[..], &[h]);
        assert_eq!(&pa.nexuses[..], &[n]);
        assert!(!pa.no_hosts());
    }
}
