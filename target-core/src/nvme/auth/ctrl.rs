//! The controller side of DH-HMAC-CHAP on one queue: a sans-I/O state machine.
//!
//! The exec layer creates a [`CtrlAuth`] for every queue of a host that must authenticate, feeds
//! it the data of each Authentication Send ([`CtrlAuth::send`]) and the AL of each
//! Authentication Receive ([`CtrlAuth::receive`]) after [`super::AuthCmd::parse`] accepted the
//! command, and polls [`CtrlAuth::poll_timeout`] at [`CtrlAuth::deadline`]. Each call returns an
//! [`AuthOutcome`]: the command's completion status, the data of a Receive, and whether the
//! queue just became authenticated or failed.
//!
//! A transaction (base spec §8.13.5, SPDK's `lib/nvmf/auth.c` states):
//!
//! ```text
//! Idle --Send(AUTH_Negotiate)--> Challenge --Receive--> Reply --Send(Reply)--> Success1
//!   Success1 --Receive--> Idle, authenticated          (the host did not ask for R2)
//!   Success1 --Receive(R2)--> Success2 --Send(Success2)--> Idle, authenticated
//! any error found in a Send --> Failure1 --Receive(AUTH_Failure1)--> Failed
//! Send(AUTH_Failure2), timeout, error after Success1 --> Failed
//! ```
//!
//! As in SPDK, a protocol error in an Authentication Send completes that command successfully and
//! the next Authentication Receive returns AUTH_Failure1 with the reason; after that (and after
//! any other failure) the exec layer must tear the queue down, once the completion carrying the
//! failure was sent. A new AUTH_Negotiate restarts: on a fresh queue, in the middle of a
//! transaction (as the kernel allows) and on an authenticated queue (re-authentication; the
//! queue stays authenticated until that transaction fails). The negotiated hash is the strongest
//! the host offers within the configured set, likewise the DH group (SPDK's choice).

use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::chap::{ResponseInput, Role, response};
use super::dh::{DhError, DhGroup, DhGroupSet, DhKey};
use super::hash::{Buf64, Digest, DigestSet, ct_eq};
use super::messages::{
    Challenge, FAILURE_LEN, Failure, FailureReason, Message, Negotiate, PROTOCOL_DHCHAP,
    REASON_FAILED, Reply, Success1,
};
use super::random::Random;
use super::secret::DhchapSecret;
use crate::nvme::spec::Status;

/// How long a step may wait for the host when the runtime has no keep-alive timeout to use
/// (SPDK's `NVMF_AUTH_DEFAULT_KATO_US`, the kernel's 120 s).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// The keys a host authenticates with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostKeys {
    /// The host's key (`dhchap_key`): the host proves it knows it.
    pub host: DhchapSecret,
    /// The controller's key (`dhchap_ctrlr_key`): the controller proves it knows it when the
    /// host asks (bidirectional authentication).
    pub ctrl: Option<DhchapSecret>,
}

/// What the controller may negotiate (`nvmf_set_config` `dhchap_digests`/`dhchap_dhgroups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthPolicy {
    /// Allowed hash functions.
    pub digests: DigestSet,
    /// Allowed DH groups.
    pub dhgroups: DhGroupSet,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        AuthPolicy {
            digests: DigestSet::all(),
            dhgroups: DhGroupSet::all(),
        }
    }
}

/// Everything a [`CtrlAuth`] needs to know about its queue.
#[derive(Clone, Debug)]
pub struct CtrlAuthParams {
    /// The host NQN from the Connect.
    pub hostnqn: String,
    /// The subsystem NQN.
    pub subnqn: String,
    /// Queue id (for logs).
    pub qid: u16,
    /// The host's keys.
    pub keys: HostKeys,
    /// The allowed hashes and groups.
    pub policy: AuthPolicy,
    /// How long each step may wait for the host (SPDK: the keep-alive timeout, else
    /// [`DEFAULT_STEP_TIMEOUT`]).
    pub step_timeout: Duration,
}

/// What happened with a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthEvent {
    /// The transaction goes on, or waits for the host.
    Continue,
    /// The queue is authenticated from now on.
    Authenticated,
    /// Authentication failed: complete the command (with its data: the AUTH_Failure1, if any),
    /// wait until the completion was sent, then tear the queue down.
    Failed(FailureReason),
}

/// The result of one Authentication Send or Receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthOutcome {
    /// The command's completion status.
    pub status: Status,
    /// For a Receive: the message to return (never longer than AL).
    pub data: Vec<u8>,
    /// What happened.
    pub event: AuthEvent,
}

impl AuthOutcome {
    fn ok(event: AuthEvent) -> AuthOutcome {
        AuthOutcome {
            status: Status::SUCCESS,
            data: Vec::new(),
            event,
        }
    }

    fn data(data: Vec<u8>, event: AuthEvent) -> AuthOutcome {
        AuthOutcome {
            status: Status::SUCCESS,
            data,
            event,
        }
    }
}

/// The negotiated parameters and per-transaction values.
struct Txn {
    tid: u16,
    digest: Digest,
    dhgroup: DhGroup,
    keys: HostKeys,
    c1: Buf64,
    s1: u32,
    dhkey: Option<DhKey>,
}

enum State {
    /// Waiting for AUTH_Negotiate.
    Idle,
    /// Negotiated: the next Receive gets the Challenge.
    Challenge(Box<Txn>),
    /// Challenge sent: waiting for the Reply.
    Reply(Box<Txn>),
    /// Reply verified: the next Receive gets Success1 (with R2 if the host asked).
    Success1 { tid: u16, hl: u8, r2: Option<Buf64> },
    /// Success1 with R2 sent: waiting for Success2.
    Success2 { tid: u16 },
    /// A failure found: the next Receive gets AUTH_Failure1.
    Failure1 { tid: u16, reason: FailureReason },
    /// Failed for good.
    Failed(FailureReason),
}

/// DH-HMAC-CHAP on one queue, controller side.
pub struct CtrlAuth {
    params: CtrlAuthParams,
    state: State,
    authenticated: bool,
    deadline: Option<Instant>,
    next_seq: u32,
    negotiated: Option<(Digest, DhGroup)>,
    last_failure: Option<(FailureReason, &'static str)>,
}

impl core::fmt::Debug for CtrlAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CtrlAuth")
            .field("hostnqn", &self.params.hostnqn)
            .field("qid", &self.params.qid)
            .field("state", &self.state_name())
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}

impl CtrlAuth {
    /// A queue that has not authenticated yet; the host has `step_timeout` to send
    /// AUTH_Negotiate.
    pub fn new(params: CtrlAuthParams, now: Instant) -> CtrlAuth {
        let deadline = Some(now + params.step_timeout);
        CtrlAuth {
            params,
            state: State::Idle,
            authenticated: false,
            deadline,
            next_seq: 0,
            negotiated: None,
            last_failure: None,
        }
    }

    /// Whether the queue has authenticated (and no later transaction failed).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether authentication failed for good (the queue must go).
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(_))
    }

    /// The hash and DH group of the last negotiation.
    pub fn negotiated(&self) -> Option<(Digest, DhGroup)> {
        self.negotiated
    }

    /// The reason and a short description of the last failure (for logs and RPC output; never
    /// key material).
    pub fn last_failure(&self) -> Option<(FailureReason, &'static str)> {
        self.last_failure
    }

    /// SPDK's name of the state (`nvmf_subsystem_get_qpairs` `auth.state`).
    pub fn state_name(&self) -> &'static str {
        match &self.state {
            State::Idle if self.authenticated => "completed",
            State::Idle => "negotiate",
            State::Challenge(_) => "challenge",
            State::Reply(_) => "reply",
            State::Success1 { .. } => "success1",
            State::Success2 { .. } => "success2",
            State::Failure1 { .. } => "failure1",
            State::Failed(_) => "error",
        }
    }

    /// When [`CtrlAuth::poll_timeout`] must be called next (`None`: no step is pending).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Replaces the keys (`nvmf_subsystem_set_keys`); they apply from the next AUTH_Negotiate.
    pub fn set_keys(&mut self, keys: HostKeys) {
        self.params.keys = keys;
    }

    /// Replaces the allowed hashes and groups; they apply from the next AUTH_Negotiate.
    pub fn set_policy(&mut self, policy: AuthPolicy) {
        self.params.policy = policy;
    }

    /// The timeout hook: if a step waited past its deadline, authentication fails and the queue
    /// must be torn down (the host is not asking, so no message can tell it).
    pub fn poll_timeout(&mut self, now: Instant) -> Option<FailureReason> {
        let deadline = self.deadline?;
        if now < deadline {
            return None;
        }
        self.deadline = None;
        let step = self.state_name();
        self.fail(FailureReason::Failed, "timed out");
        warn!(
            hostnqn = %self.params.hostnqn, subnqn = %self.params.subnqn, qid = self.params.qid,
            step, "DH-HMAC-CHAP: authentication timed out"
        );
        Some(FailureReason::Failed)
    }

    /// Handles the data of an Authentication Send (TL bytes).
    pub fn send(&mut self, data: &[u8], now: Instant) -> AuthOutcome {
        if let State::Failed(reason) = self.state {
            return AuthOutcome {
                status: Status::COMMAND_SEQUENCE_ERROR,
                data: Vec::new(),
                event: AuthEvent::Failed(reason),
            };
        }
        if let State::Failure1 { .. } = self.state {
            // The host must read the failure first; keep it pending.
            debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid,
                "DH-HMAC-CHAP: send while AUTH_Failure1 is pending");
            return AuthOutcome::ok(AuthEvent::Continue);
        }
        let raw_tid = data
            .get(4..6)
            .map_or(0, |t| u16::from_le_bytes([t[0], t[1]]));
        let msg = match Message::decode(data) {
            Ok(m) if m.encoded_len() == data.len() => m,
            Ok(_) => {
                return self.protocol_error(
                    raw_tid,
                    FailureReason::IncorrectPayload,
                    "message length differs from the transfer length",
                    now,
                );
            }
            Err(e) => {
                return self.protocol_error(raw_tid, e.reason(), "undecodable message", now);
            }
        };
        debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid, msg = msg.name(),
            tid = msg.tid(), state = self.state_name(), "DH-HMAC-CHAP: received");
        match msg {
            Message::Negotiate(n) => self.negotiate(&n, now),
            Message::Failure2(f) => {
                let reason = f.reason;
                self.fail(reason, "the host refused the controller (AUTH_Failure2)");
                warn!(hostnqn = %self.params.hostnqn, subnqn = %self.params.subnqn,
                    qid = self.params.qid, %reason,
                    "DH-HMAC-CHAP: the host failed the authentication (AUTH_Failure2)");
                AuthOutcome::ok(AuthEvent::Failed(reason))
            }
            Message::Reply(r) => match core::mem::replace(&mut self.state, State::Idle) {
                State::Reply(txn) => self.reply(txn, &r, now),
                other => {
                    self.state = other;
                    let tid = self.current_tid().unwrap_or(r.tid);
                    self.protocol_error(
                        tid,
                        FailureReason::IncorrectProtocolMessage,
                        "unexpected DH-HMAC-CHAP_Reply",
                        now,
                    )
                }
            },
            Message::Success2(s) => match self.state {
                State::Success2 { tid } if tid == s.tid => {
                    self.authenticated_now();
                    AuthOutcome::ok(AuthEvent::Authenticated)
                }
                State::Success2 { .. } => {
                    // No Receive follows Success2: fail at once rather than park a Failure1.
                    self.fail(FailureReason::IncorrectPayload, "transaction id mismatch");
                    self.log_failure();
                    AuthOutcome::ok(AuthEvent::Failed(FailureReason::IncorrectPayload))
                }
                _ => self.protocol_error(
                    s.tid,
                    FailureReason::IncorrectProtocolMessage,
                    "unexpected DH-HMAC-CHAP_Success2",
                    now,
                ),
            },
            m => {
                let tid = self.current_tid().unwrap_or(m.tid());
                self.protocol_error(
                    tid,
                    FailureReason::IncorrectProtocolMessage,
                    "unexpected message",
                    now,
                )
            }
        }
    }

    /// Handles an Authentication Receive with allocation length `al`.
    pub fn receive(&mut self, al: u32, now: Instant, rng: &mut dyn Random) -> AuthOutcome {
        let al = usize::try_from(al).unwrap_or(usize::MAX);
        let state = core::mem::replace(&mut self.state, State::Idle);
        let (tid, reason) = match state {
            State::Challenge(txn) => match self.challenge(txn, al, now, rng) {
                Ok(out) => return out,
                Err(f) => f,
            },
            State::Success1 { tid, hl, r2 } => {
                let len =
                    super::messages::DHCHAP_HEADER_LEN + r2.as_ref().map_or(0, |_| usize::from(hl));
                if al < len {
                    self.note_failure(
                        FailureReason::IncorrectPayload,
                        "allocation length too short",
                    );
                    (tid, FailureReason::IncorrectPayload)
                } else {
                    let bidirectional = r2.is_some();
                    let data = Message::Success1(Success1 {
                        tid,
                        hl,
                        response: r2.map(|r| r.as_bytes().to_vec()),
                    })
                    .encode();
                    if bidirectional {
                        self.state = State::Success2 { tid };
                        self.deadline = Some(now + self.params.step_timeout);
                        return AuthOutcome::data(data, AuthEvent::Continue);
                    }
                    self.authenticated_now();
                    return AuthOutcome::data(data, AuthEvent::Authenticated);
                }
            }
            State::Failure1 { tid, reason } => (tid, reason),
            State::Failed(reason) => {
                self.state = State::Failed(reason);
                return AuthOutcome {
                    status: Status::COMMAND_SEQUENCE_ERROR,
                    data: Vec::new(),
                    event: AuthEvent::Failed(reason),
                };
            }
            other => {
                let tid = match &other {
                    State::Reply(t) => t.tid,
                    State::Success2 { tid } => *tid,
                    _ => 0,
                };
                self.note_failure(
                    FailureReason::IncorrectProtocolMessage,
                    "Authentication Receive out of sequence",
                );
                (tid, FailureReason::IncorrectProtocolMessage)
            }
        };
        // Deliver AUTH_Failure1, then the queue goes.
        self.fail(reason, self.last_failure.map_or("failed", |f| f.1));
        self.log_failure();
        if al < FAILURE_LEN {
            return AuthOutcome {
                status: Status::INVALID_FIELD,
                data: Vec::new(),
                event: AuthEvent::Failed(reason),
            };
        }
        let data = Message::Failure1(Failure {
            tid,
            reason_code: REASON_FAILED,
            reason,
        })
        .encode();
        AuthOutcome::data(data, AuthEvent::Failed(reason))
    }

    /// The DH exponent of the transaction waiting for its Reply (test vectors only).
    #[cfg(test)]
    pub(crate) fn dh_exponent(&self) -> Option<Vec<u8>> {
        match &self.state {
            State::Reply(t) => t.dhkey.as_ref().map(DhKey::exponent_be),
            _ => None,
        }
    }

    // ------------------------------------------------------------------------------ steps

    fn negotiate(&mut self, n: &Negotiate, now: Instant) -> AuthOutcome {
        let tid = n.tid;
        if n.sc_c != 0 {
            return self.protocol_error(
                tid,
                FailureReason::ConcatMismatch,
                "secure channel concatenation requested",
                now,
            );
        }
        let Some(desc) = n.protocols.iter().find(|p| p.auth_id == PROTOCOL_DHCHAP) else {
            return self.protocol_error(
                tid,
                FailureReason::ProtocolUnusable,
                "no DH-HMAC-CHAP protocol descriptor",
                now,
            );
        };
        let policy = self.params.policy;
        let Some(digest) = policy
            .digests
            .iter()
            .rev()
            .find(|d| desc.hash_ids.contains(&d.id()))
        else {
            return self.protocol_error(
                tid,
                FailureReason::HashUnusable,
                "no usable hash function offered",
                now,
            );
        };
        let Some(dhgroup) = policy
            .dhgroups
            .iter()
            .rev()
            .find(|g| desc.dh_ids.contains(&g.id()))
        else {
            return self.protocol_error(
                tid,
                FailureReason::DhGroupUnusable,
                "no usable DH group offered",
                now,
            );
        };
        debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid, tid,
            digest = digest.name(), dhgroup = dhgroup.name(), "DH-HMAC-CHAP: negotiated");
        self.negotiated = Some((digest, dhgroup));
        self.state = State::Challenge(Box::new(Txn {
            tid,
            digest,
            dhgroup,
            keys: self.params.keys.clone(),
            c1: Buf64::default(),
            s1: 0,
            dhkey: None,
        }));
        self.deadline = Some(now + self.params.step_timeout);
        AuthOutcome::ok(AuthEvent::Continue)
    }

    /// Builds the Challenge; `Err` is the failure to deliver instead.
    fn challenge(
        &mut self,
        mut txn: Box<Txn>,
        al: usize,
        now: Instant,
        rng: &mut dyn Random,
    ) -> Result<AuthOutcome, (u16, FailureReason)> {
        let tid = txn.tid;
        let hl = txn.digest.hash_len();
        let len = super::messages::DHCHAP_HEADER_LEN + hl + txn.dhgroup.value_len();
        if al < len {
            self.note_failure(
                FailureReason::IncorrectPayload,
                "allocation length too short",
            );
            return Err((tid, FailureReason::IncorrectPayload));
        }
        let failed = |this: &mut Self, what| {
            this.note_failure(FailureReason::Failed, what);
            (tid, FailureReason::Failed)
        };
        txn.c1 = Buf64::zeroed(hl);
        if rng.fill(txn.c1.as_bytes_mut()).is_err() {
            return Err(failed(self, "random source unavailable"));
        }
        txn.s1 = match self.next_seqnum(rng) {
            Some(s) => s,
            None => return Err(failed(self, "random source unavailable")),
        };
        if txn.dhgroup != DhGroup::Null {
            match DhKey::generate(txn.dhgroup, rng) {
                Ok(k) => txn.dhkey = Some(k),
                Err(_) => return Err(failed(self, "DH key generation failed")),
            }
        }
        let data = Message::Challenge(Challenge {
            tid,
            hash_id: txn.digest.id(),
            dh_id: txn.dhgroup.id(),
            seqnum: txn.s1,
            challenge: txn.c1.as_bytes().to_vec(),
            dh_value: txn
                .dhkey
                .as_ref()
                .map_or_else(Vec::new, |k| k.public_value().to_vec()),
        })
        .encode();
        self.state = State::Reply(txn);
        self.deadline = Some(now + self.params.step_timeout);
        Ok(AuthOutcome::data(data, AuthEvent::Continue))
    }

    fn reply(&mut self, txn: Box<Txn>, r: &Reply, now: Instant) -> AuthOutcome {
        match self.check_reply(&txn, r) {
            Ok((hl, r2)) => {
                debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid,
                    bidirectional = r2.is_some(), "DH-HMAC-CHAP: host response verified");
                self.state = State::Success1 {
                    tid: txn.tid,
                    hl,
                    r2,
                };
                self.deadline = Some(now + self.params.step_timeout);
                AuthOutcome::ok(AuthEvent::Continue)
            }
            Err((reason, what)) => self.protocol_error(txn.tid, reason, what, now),
        }
    }

    /// Verifies R1 and computes R2 if the host asked for it.
    fn check_reply(
        &self,
        txn: &Txn,
        r: &Reply,
    ) -> Result<(u8, Option<Buf64>), (FailureReason, &'static str)> {
        let payload = |what| Err((FailureReason::IncorrectPayload, what));
        let hl = txn.digest.hash_len();
        if r.tid != txn.tid {
            return payload("transaction id mismatch");
        }
        if r.response.len() != hl {
            return payload("hash length mismatch");
        }
        if r.challenge.is_some() && r.seqnum == 0 {
            return payload("controller challenge with sequence number 0");
        }
        let shared = match &txn.dhkey {
            None if !r.dh_value.is_empty() => return payload("DH value with the null group"),
            None => None,
            Some(_) if r.dh_value.is_empty() => return payload("no DH value"),
            Some(k) => match k.shared_secret(&r.dh_value) {
                Ok(s) => Some(s),
                Err(DhError::PeerLength(_)) => return payload("DH value length"),
                Err(_) => return Err((FailureReason::Failed, "invalid DH value")),
            },
        };
        let input = |role, challenge, seqnum| ResponseInput {
            digest: txn.digest,
            role,
            challenge,
            shared: shared.as_ref().map(|s| s.as_bytes()),
            seqnum,
            tid: txn.tid,
            hostnqn: &self.params.hostnqn,
            subnqn: &self.params.subnqn,
        };
        let expected = response(
            &txn.keys.host,
            &input(Role::Host, txn.c1.as_bytes(), txn.s1),
        );
        if !ct_eq(expected.as_bytes(), &r.response) {
            return Err((FailureReason::Failed, "host response mismatch"));
        }
        let r2 = match &r.challenge {
            None => None,
            Some(c2) => {
                let Some(ckey) = &txn.keys.ctrl else {
                    return Err((
                        FailureReason::Failed,
                        "the host asked to authenticate the controller, which has no key",
                    ));
                };
                Some(response(ckey, &input(Role::Controller, c2, r.seqnum)))
            }
        };
        Ok((hl as u8, r2))
    }

    // ----------------------------------------------------------------------------- helpers

    fn next_seqnum(&mut self, rng: &mut dyn Random) -> Option<u32> {
        if self.next_seq == 0 {
            self.next_seq = rng.u32().ok()?;
        }
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        Some(self.next_seq)
    }

    fn current_tid(&self) -> Option<u16> {
        match &self.state {
            State::Challenge(t) | State::Reply(t) => Some(t.tid),
            State::Success1 { tid, .. } | State::Success2 { tid } | State::Failure1 { tid, .. } => {
                Some(*tid)
            }
            State::Idle | State::Failed(_) => None,
        }
    }

    /// A failure found in a Send: the next Receive returns AUTH_Failure1.
    fn protocol_error(
        &mut self,
        tid: u16,
        reason: FailureReason,
        what: &'static str,
        now: Instant,
    ) -> AuthOutcome {
        if let State::Success2 { .. } = self.state {
            // The host reads nothing after Success1 with R2: fail now.
            self.fail(reason, what);
            self.log_failure();
            return AuthOutcome::ok(AuthEvent::Failed(reason));
        }
        debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid, %reason, what,
            "DH-HMAC-CHAP: failure to report with AUTH_Failure1");
        self.note_failure(reason, what);
        self.state = State::Failure1 { tid, reason };
        self.deadline = Some(now + self.params.step_timeout);
        AuthOutcome::ok(AuthEvent::Continue)
    }

    fn note_failure(&mut self, reason: FailureReason, what: &'static str) {
        self.last_failure = Some((reason, what));
    }

    fn fail(&mut self, reason: FailureReason, what: &'static str) {
        self.note_failure(reason, what);
        self.state = State::Failed(reason);
        self.authenticated = false;
        self.deadline = None;
    }

    fn log_failure(&self) {
        let (reason, what) = self
            .last_failure
            .unwrap_or((FailureReason::Failed, "failed"));
        warn!(hostnqn = %self.params.hostnqn, subnqn = %self.params.subnqn,
            qid = self.params.qid, %reason, detail = what,
            "DH-HMAC-CHAP: authentication failed");
    }

    fn authenticated_now(&mut self) {
        debug!(hostnqn = %self.params.hostnqn, qid = self.params.qid,
            "DH-HMAC-CHAP: authenticated");
        self.state = State::Idle;
        self.authenticated = true;
        self.deadline = None;
    }
}
