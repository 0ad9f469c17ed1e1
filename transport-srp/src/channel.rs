//! The RDMA channel state machine (reference §2.2–2.5) and per-channel credit accounting.
//!
//! States only move forward: CONNECTING → LIVE → DISCONNECTING → DRAINING → DISCONNECTED.
//! Every transition is "set if new > old", so each teardown step runs once, whichever event
//! gets there first, and repeating an event is harmless.
//!
//! The machine performs no I/O. It takes events (CM events, local close requests, marker and
//! error completions, command starts and finishes, reference drops) and returns [`Action`]s
//! for the runtime to carry out, in order.
//!
//! Teardown, as in ib_srpt but draining both queues (the `ib_drain_qp` pattern):
//!
//! 1. *Disconnect*: `rdma_disconnect` sends a DREQ, or the DREP when the initiator sent the
//!    DREQ (state DISCONNECTING; outstanding commands are aborted).
//! 2. *Close* once the CM is done with the connection (DREP received, DREQ answered and
//!    TimeWait over, a reject, device removal) or at once for a forced close (port disabled,
//!    subsystem deleted, QP error): move the QP to the error state, then post a zero-length
//!    RDMA WRITE on the send queue (state DRAINING). Its completion (success or flush) is the
//!    last completion of the send queue.
//! 3. The receive queue has no marker: receives posted to a queue pair in the error state are
//!    never completed by rxe, so the runtime counts its posted receives instead and reports
//!    [`Event::RecvsDrained`] once every one of them has completed (flushed) after the queue
//!    pair entered the error state. With a shared receive queue there is nothing to count.
//! 4. When the send-queue marker has completed and the receives are drained, the channel is
//!    DISCONNECTED. Once its commands have finished, the session is released; the channel is
//!    freed when its last reference goes.
//! 5. A watchdog bounds DRAINING: if the marker's completion or a receive's flush never comes
//!    (an adapter that loses it), the runtime's timer feeds [`Event::DrainTimeout`]; the queue
//!    pair is destroyed ([`Action::DestroyQp`]), whatever was still posted counts as done, and
//!    the channel goes on to DISCONNECTED.

use arrayvec::ArrayVec;

use crate::proto::TLogoutReason;

/// Channel states, in the only order they are entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChannelState {
    /// REP sent; waiting for RTU / ESTABLISHED. IUs that arrive are queued.
    Connecting,
    /// Connected; IUs are processed.
    Live,
    /// DREQ sent, or DREQ received and DREP sent.
    Disconnecting,
    /// QP in the error state, drain markers posted.
    Draining,
    /// Both queues drained: no completion will follow.
    Disconnected,
}

impl ChannelState {
    /// Lower-case name, as `srp_get_sessions` reports it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Live => "live",
            Self::Disconnecting => "disconnecting",
            Self::Draining => "draining",
            Self::Disconnected => "disconnected",
        }
    }
}

/// Why the target closes a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The initiator sent SRP_I_LOGOUT.
    Logout,
    /// A single-channel login of the same nexus terminated this channel: T_LOGOUT reason 4,
    /// then disconnect.
    Terminated,
    /// The operator disconnected the session.
    Admin,
    /// The target port was disabled: disconnect and drain at once.
    PortDisabled,
    /// The subsystem was deleted: disconnect and drain at once.
    SubsystemDeleted,
    /// The RDMA device is going away: drain at once, no disconnect.
    DeviceRemoval,
    /// The QP went to the error state (an error completion while live).
    QpError,
    /// The initiator broke the protocol badly enough to end the channel.
    ProtocolError,
}

impl CloseReason {
    /// `true` if the close does not wait for the CM (DREP / TimeWait) before draining.
    pub fn is_forced(self) -> bool {
        matches!(
            self,
            Self::PortDisabled | Self::SubsystemDeleted | Self::DeviceRemoval | Self::QpError
        )
    }
}

/// Events the runtime feeds to the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// RTU received / `RDMA_CM_EVENT_ESTABLISHED` / `IB_EVENT_COMM_EST` (a receive completed
    /// before the RTU).
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`: a DREQ arrived, or, after our DREQ, the DREP arrived or
    /// the DREQ timed out. (IB CM: DREQ_RECEIVED and DREP_RECEIVED.)
    Disconnected,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`: the CM is done with the connection.
    TimewaitExit,
    /// The initiator rejected our REP (`RDMA_CM_EVENT_REJECTED`).
    Rejected,
    /// The connection never completed (`CONNECT_ERROR`, `UNREACHABLE`).
    ConnectError,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `rdma_disconnect` failed (nothing will come from the CM): drain now.
    DisconnectFailed,
    /// The runtime's timer: no DREP or TimeWait exit arrived in time after a disconnect.
    DisconnectTimeout,
    /// The runtime's timer: the drain did not finish in time (the marker's completion or a
    /// receive's flush never came).
    DrainTimeout,
    /// A local request to close the channel.
    Close(CloseReason),
    /// The zero-length RDMA WRITE marker completed (`ok`: success rather than flush).
    SqMarkerDone {
        /// Completion status was success.
        ok: bool,
    },
    /// Every receive posted to the channel's own receive queue has completed after the queue
    /// pair entered the error state (the runtime counts them; accepted from DISCONNECTING on,
    /// since `rdma_disconnect` already moves the queue pair to the error state).
    RecvsDrained,
    /// Posting a drain marker failed: no completion will mark the end of the queues.
    MarkerPostFailed,
    /// A work completion other than a marker failed (with any status, including flush).
    CompletionError,
}

/// What the runtime must do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Process the IUs queued while CONNECTING, in arrival order (through
    /// [`Channel::on_iu`] again, now that the channel is live).
    ReplayQueued,
    /// Drop the IUs queued while CONNECTING (repost their receive buffers or free them).
    DropQueued,
    /// Send SRP_T_LOGOUT with this reason (best effort, before the disconnect).
    SendTLogout(TLogoutReason),
    /// `rdma_disconnect`: DREQ, or DREP if the initiator sent the DREQ.
    Disconnect,
    /// Move the QP to the error state (flushes every posted work request).
    QpToError,
    /// Post the signalled zero-length RDMA WRITE marker: the last send-queue completion.
    /// (The receive side is drained by counting; see [`Event::RecvsDrained`].)
    PostSqMarker,
    /// Abort the outstanding commands: no more data transfers, no responses; each still
    /// reports [`Channel::command_finished`] when its bdev I/O is done.
    AbortOutstanding,
    /// The drain timed out: destroy the queue pair now. The adapter touches none of the
    /// channel's buffers after that, so every work request still posted counts as completed
    /// (flushed); completions that never came never will.
    DestroyQp,
    /// Release the session: destroy the CM id and QP, free the rings, unlink the channel
    /// from its nexus.
    ReleaseSession,
    /// The last reference is gone: free the channel.
    FreeChannel,
}

/// The result of feeding one event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Actions, in order.
    pub actions: ArrayVec<Action, 12>,
    /// States entered, in order.
    pub entered: ArrayVec<ChannelState, 4>,
}

impl Output {
    fn push(&mut self, a: Action) {
        // Capacity covers the longest sequence one event can produce.
        let _ = self.actions.try_push(a);
    }

    /// `true` if nothing happened.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty() && self.entered.is_empty()
    }
}

/// Kinds of IU a channel receives, for [`Channel::on_iu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IuKind {
    /// SRP_CMD (consumes a credit).
    Cmd,
    /// SRP_TSK_MGMT (consumes a credit).
    TskMgmt,
    /// SRP_I_LOGOUT.
    ILogout,
    /// SRP_CRED_RSP (no credit).
    CredRsp,
    /// SRP_AER_RSP (no credit).
    AerRsp,
    /// Anything else (including an undecodable IU).
    Other,
}

/// What to do with a received IU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IuDisposition {
    /// Process it now. For CMD and TSK_MGMT a credit was taken; the response must carry
    /// [`Credits::response_delta`]. For I_LOGOUT, close with [`CloseReason::Logout`].
    Process,
    /// Keep it until the channel is live ([`Action::ReplayQueued`]).
    Queue,
    /// The initiator used more credits than it was granted: do not execute it. Answer with
    /// status BUSY (TM: FAILED) carrying [`Credits::overrun_delta`] if a send slot is free,
    /// else drop it.
    Overrun,
    /// Nothing to do (the channel is closing, or the IU needs no action).
    Drop,
}

/// The initiator used more credits than granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("credit overrun: {outstanding} requests outstanding, limit {limit}")]
pub struct Overrun {
    /// Requests holding credits.
    pub outstanding: u32,
    /// Credits granted.
    pub limit: u32,
}

/// Per-channel credit accounting (SRP request limit).
///
/// The initiator starts with `limit` credits (LOGIN_RSP REQUEST LIMIT DELTA). Each SRP_CMD
/// and SRP_TSK_MGMT takes one; each response gives it back plus any credits owed for
/// requests that ended without a response (aborted tasks), so the initiator never slowly
/// loses queue depth. A request beyond the limit is refused without touching the accounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credits {
    limit: u32,
    outstanding: u32,
    owed: u32,
    target_request_outstanding: bool,
}

impl Credits {
    /// Accounts for a channel granted `limit` credits at login.
    pub fn new(limit: u32) -> Self {
        Credits {
            limit,
            outstanding: 0,
            owed: 0,
            target_request_outstanding: false,
        }
    }

    /// A credit-consuming request arrived.
    pub fn consume(&mut self) -> Result<(), Overrun> {
        if self.outstanding >= self.limit {
            return Err(Overrun {
                outstanding: self.outstanding,
                limit: self.limit,
            });
        }
        self.outstanding += 1;
        Ok(())
    }

    /// REQUEST LIMIT DELTA for the response to a request that took a credit: 1 plus the
    /// credits owed.
    pub fn response_delta(&mut self) -> u32 {
        let d = (1 + self.owed).min(self.outstanding);
        self.outstanding -= d;
        self.owed = 0;
        d
    }

    /// REQUEST LIMIT DELTA for the answer to an overrun request (it took no credit).
    pub fn overrun_delta(&mut self) -> u32 {
        let d = self.owed.min(self.outstanding);
        self.outstanding -= d;
        self.owed = 0;
        d
    }

    /// A request that took a credit ended without a response (aborted): its credit travels
    /// back with the next response or CRED_REQ.
    pub fn finished_without_response(&mut self) {
        if self.owed < self.outstanding {
            self.owed += 1;
        }
    }

    /// If credits are owed and no target request is outstanding, the REQUEST LIMIT DELTA for
    /// an SRP_CRED_REQ (the caller sends it). The initiator keeps one spare receive for
    /// target requests, so only one may be outstanding.
    pub fn take_cred_req(&mut self) -> Option<u32> {
        if self.owed == 0 || self.target_request_outstanding {
            return None;
        }
        self.target_request_outstanding = true;
        Some(self.overrun_delta())
    }

    /// The initiator answered our CRED_REQ or AER_REQ.
    pub fn target_request_answered(&mut self) {
        self.target_request_outstanding = false;
    }

    /// A target-initiated IU carrying `delta` never reached the initiator: posting it failed,
    /// or its SEND completed in error. `cred_req`: it was the SRP_CRED_REQ whose delta
    /// [`Credits::take_cred_req`] gave; otherwise the answer to an overrun
    /// ([`Credits::overrun_delta`]). The credits are owed again (the next response or
    /// CRED_REQ carries them), and a failed CRED_REQ is no longer outstanding, so that the
    /// next one may go.
    pub fn spare_not_sent(&mut self, delta: u32, cred_req: bool) {
        self.outstanding = (self.outstanding + delta).min(self.limit);
        self.owed = (self.owed + delta).min(self.outstanding);
        if cred_req {
            self.target_request_outstanding = false;
        }
    }

    /// Credits granted at login.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Requests holding a credit (including those whose credit is owed back).
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Credits the initiator can still use, as far as the target knows (`req_lim`).
    pub fn available(&self) -> u32 {
        self.limit - self.outstanding
    }

    /// Credits owed to the initiator (`req_lim_delta`).
    pub fn owed(&self) -> u32 {
        self.owed
    }
}

/// One RDMA channel.
#[derive(Clone, Debug)]
pub struct Channel {
    state: ChannelState,
    close_reason: Option<CloseReason>,
    queued: u32,
    commands: u32,
    aborted: bool,
    sq_drained: bool,
    rq_drained: bool,
    session_released: bool,
    refs: u32,
    freed: bool,
    credits: Credits,
}

impl Channel {
    /// A channel whose login was just accepted with `credits` credits. `srq`: receives come
    /// from a shared receive queue, so there is no per-channel receive queue to drain.
    pub fn new(credits: u32, srq: bool) -> Self {
        Channel {
            state: ChannelState::Connecting,
            close_reason: None,
            queued: 0,
            commands: 0,
            aborted: false,
            sq_drained: false,
            rq_drained: srq,
            session_released: false,
            refs: 1,
            freed: false,
            credits: Credits::new(credits),
        }
    }

    /// Current state.
    pub fn state(&self) -> ChannelState {
        self.state
    }

    /// Why the target closed the channel (the first reason given), if it did.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.close_reason
    }

    /// Credit accounts.
    pub fn credits(&self) -> &Credits {
        &self.credits
    }

    /// Credit accounts, to build responses.
    pub fn credits_mut(&mut self) -> &mut Credits {
        &mut self.credits
    }

    /// Commands started and not finished.
    pub fn commands(&self) -> u32 {
        self.commands
    }

    /// IUs queued while connecting.
    pub fn queued(&self) -> u32 {
        self.queued
    }

    /// `true` once the channel is freed.
    pub fn is_freed(&self) -> bool {
        self.freed
    }

    /// `true` if the runtime may still send on the QP.
    pub fn can_send(&self) -> bool {
        self.state == ChannelState::Live
    }

    fn set(&mut self, to: ChannelState, out: &mut Output) -> bool {
        if to <= self.state {
            return false;
        }
        tracing::debug!(
            from = self.state.name(),
            to = to.name(),
            "srp channel state"
        );
        self.state = to;
        let _ = out.entered.try_push(to);
        true
    }

    fn abort_outstanding(&mut self, out: &mut Output) {
        if self.queued > 0 {
            self.queued = 0;
            out.push(Action::DropQueued);
        }
        if self.commands > 0 && !self.aborted {
            self.aborted = true;
            out.push(Action::AbortOutstanding);
        }
    }

    /// Enters DISCONNECTING and sends the DREQ/DREP.
    fn disconnect(&mut self, out: &mut Output) {
        if self.set(ChannelState::Disconnecting, out) {
            self.abort_outstanding(out);
            out.push(Action::Disconnect);
        }
    }

    /// Enters DRAINING: QP to error and the send-queue marker.
    fn close(&mut self, out: &mut Output) {
        self.set(ChannelState::Disconnecting, out);
        if self.set(ChannelState::Draining, out) {
            self.abort_outstanding(out);
            out.push(Action::QpToError);
            out.push(Action::PostSqMarker);
        }
    }

    fn check_drained(&mut self, out: &mut Output) {
        if self.state == ChannelState::Draining && self.sq_drained && self.rq_drained {
            self.set(ChannelState::Disconnected, out);
            self.maybe_release(out);
        }
    }

    fn maybe_release(&mut self, out: &mut Output) {
        if self.state == ChannelState::Disconnected && self.commands == 0 && !self.session_released
        {
            self.session_released = true;
            out.push(Action::ReleaseSession);
            self.put(out);
        }
    }

    fn put(&mut self, out: &mut Output) {
        self.refs = self.refs.saturating_sub(1);
        if self.refs == 0 && !self.freed {
            self.freed = true;
            out.push(Action::FreeChannel);
        }
    }

    /// Feeds one event.
    pub fn handle(&mut self, ev: Event) -> Output {
        let mut out = Output::default();
        use ChannelState::*;
        match ev {
            Event::Established => {
                if self.set(Live, &mut out) && self.queued > 0 {
                    self.queued = 0;
                    out.push(Action::ReplayQueued);
                }
            }
            Event::Disconnected => match self.state {
                // DREQ from the initiator: answer it, then wait for TimeWait. Before the
                // connection is established there is nothing to answer: drain.
                Connecting => self.close(&mut out),
                Live => self.disconnect(&mut out),
                // Our DREQ was answered (or timed out).
                Disconnecting => self.close(&mut out),
                Draining | Disconnected => {}
            },
            Event::TimewaitExit
            | Event::Rejected
            | Event::ConnectError
            | Event::DeviceRemoval
            | Event::DisconnectFailed => self.close(&mut out),
            Event::DisconnectTimeout => {
                if self.state == Disconnecting {
                    self.close(&mut out);
                }
            }
            Event::DrainTimeout => {
                if self.state == Draining {
                    out.push(Action::DestroyQp);
                    self.sq_drained = true;
                    self.rq_drained = true;
                    self.check_drained(&mut out);
                }
            }
            Event::Close(reason) => self.local_close(reason, &mut out),
            Event::SqMarkerDone { .. } => {
                if self.state == Draining {
                    self.sq_drained = true;
                    self.check_drained(&mut out);
                }
            }
            Event::RecvsDrained => {
                if self.state >= Disconnecting {
                    self.rq_drained = true;
                    self.check_drained(&mut out);
                }
            }
            Event::MarkerPostFailed => {
                if self.state == Draining {
                    self.sq_drained = true;
                    self.check_drained(&mut out);
                }
            }
            Event::CompletionError => {
                // After the QP went to error, flushes are expected; before, an error means
                // the QP is dead.
                if self.state <= Live {
                    self.local_close(CloseReason::QpError, &mut out);
                }
            }
        }
        out
    }

    fn local_close(&mut self, reason: CloseReason, out: &mut Output) {
        if self.state >= ChannelState::Draining {
            return;
        }
        self.close_reason.get_or_insert(reason);
        match self.state {
            // No DREQ can be sent before the connection is established (the CM refuses it);
            // draining the QP and destroying the CM id later rejects the connection.
            ChannelState::Connecting => self.close(out),
            ChannelState::Live => {
                if reason == CloseReason::Terminated {
                    out.push(Action::SendTLogout(TLogoutReason::MultiChannelAction));
                }
                if reason == CloseReason::DeviceRemoval {
                    self.close(out);
                    return;
                }
                self.disconnect(out);
                if reason.is_forced() {
                    self.close(out);
                }
            }
            ChannelState::Disconnecting => {
                if reason.is_forced() {
                    self.close(out);
                }
            }
            ChannelState::Draining | ChannelState::Disconnected => {}
        }
    }

    /// Classifies a received (successful) receive completion.
    pub fn on_iu(&mut self, kind: IuKind) -> IuDisposition {
        match self.state {
            ChannelState::Connecting => {
                self.queued += 1;
                IuDisposition::Queue
            }
            ChannelState::Live => match kind {
                IuKind::Cmd | IuKind::TskMgmt => match self.credits.consume() {
                    Ok(()) => IuDisposition::Process,
                    Err(e) => {
                        tracing::warn!(%e, "srp initiator exceeded its request limit");
                        IuDisposition::Overrun
                    }
                },
                IuKind::ILogout => IuDisposition::Process,
                IuKind::CredRsp | IuKind::AerRsp => {
                    self.credits.target_request_answered();
                    IuDisposition::Drop
                }
                IuKind::Other => IuDisposition::Drop,
            },
            _ => IuDisposition::Drop,
        }
    }

    /// A command (or TM function) was handed to execution.
    pub fn command_started(&mut self) {
        self.commands += 1;
    }

    /// A command finished (response sent, or abandoned after an abort). `responded` is false
    /// when no SRP_RSP went out, so its credit is owed to the initiator.
    pub fn command_finished(&mut self, responded: bool) -> Output {
        let mut out = Output::default();
        self.commands = self.commands.saturating_sub(1);
        if !responded {
            self.credits.finished_without_response();
        }
        self.maybe_release(&mut out);
        out
    }

    /// Takes an extra reference (e.g. an RPC listing holding the channel).
    pub fn acquire(&mut self) {
        self.refs += 1;
    }

    /// Drops a reference taken with [`Channel::acquire`].
    pub fn release(&mut self) -> Output {
        let mut out = Output::default();
        if self.refs > 1 || self.session_released {
            self.put(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests;
