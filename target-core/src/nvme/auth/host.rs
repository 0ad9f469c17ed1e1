//! The host side of DH-HMAC-CHAP on one queue: what the Linux host does
//! (`drivers/nvme/host/auth.c`), sans-I/O. The test NVMe host (`rtgt-tests`' `nvme_host`) and
//! the tests of [`super::CtrlAuth`] drive it.
//!
//! ```text
//! start()                   -> AUTH_Negotiate: send it, then receive
//! receive(Challenge)        -> SendThenReceive(Reply)
//! receive(Success1)         -> Done, or SendThenDone(Success2) when the controller proved its key
//! receive(AUTH_Failure1)    -> Failed (nothing to send)
//! any check failing         -> Failed with an AUTH_Failure2 to send
//! ```

use super::chap::{ResponseInput, Role, response};
use super::dh::{DhGroup, DhKey};
use super::hash::{Buf64, Digest, ct_eq};
use super::messages::{
    Failure, FailureReason, Message, Negotiate, PROTOCOL_DHCHAP, ProtocolDescriptor, REASON_FAILED,
    Reply, Success2,
};
use super::random::Random;
use super::secret::DhchapSecret;

/// What a host authenticates with.
#[derive(Clone, Debug)]
pub struct HostAuthParams {
    /// The host NQN.
    pub hostnqn: String,
    /// The subsystem NQN.
    pub subnqn: String,
    /// The host's key (`nvme connect --dhchap-secret`).
    pub host_key: DhchapSecret,
    /// The controller's key (`--dhchap-ctrl-secret`): if set, the host asks the controller to
    /// authenticate too.
    pub ctrl_key: Option<DhchapSecret>,
    /// The hash ids to offer, in order (may include ids this side does not know, for tests).
    pub hash_ids: Vec<u8>,
    /// The DH group ids to offer, in order.
    pub dh_ids: Vec<u8>,
}

impl HostAuthParams {
    /// The Linux host's offer: SHA-256, SHA-384, SHA-512 and every DH group, null first.
    pub fn linux(
        hostnqn: &str,
        subnqn: &str,
        host_key: DhchapSecret,
        ctrl_key: Option<DhchapSecret>,
    ) -> HostAuthParams {
        HostAuthParams {
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            host_key,
            ctrl_key,
            hash_ids: Digest::ALL.iter().map(|d| d.id()).collect(),
            dh_ids: DhGroup::ALL.iter().map(|g| g.id()).collect(),
        }
    }
}

/// What the host does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostAction {
    /// Send this with Authentication Send, then read the next message with Authentication
    /// Receive.
    SendThenReceive(Vec<u8>),
    /// Send this (DH-HMAC-CHAP_Success2) with Authentication Send; authentication is complete.
    SendThenDone(Vec<u8>),
    /// Authentication is complete.
    Done,
    /// Authentication failed: send the AUTH_Failure2 if there is one, then give up.
    Failed {
        /// Why.
        reason: FailureReason,
        /// The AUTH_Failure2 to send.
        failure2: Option<Vec<u8>>,
    },
}

enum State {
    Start,
    AwaitChallenge,
    AwaitSuccess1 {
        hl: usize,
        /// The expected R2 when the host asked the controller to authenticate.
        expected_r2: Option<Buf64>,
    },
    Done,
    Failed,
}

/// DH-HMAC-CHAP on one queue, host side.
pub struct HostAuth {
    params: HostAuthParams,
    tid: u16,
    state: State,
    negotiated: Option<(Digest, DhGroup)>,
}

impl core::fmt::Debug for HostAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostAuth")
            .field("hostnqn", &self.params.hostnqn)
            .field("tid", &self.tid)
            .field("negotiated", &self.negotiated)
            .finish_non_exhaustive()
    }
}

impl HostAuth {
    /// A transaction with id `tid` (the Linux host uses the queue's command id counter).
    pub fn new(params: HostAuthParams, tid: u16) -> HostAuth {
        HostAuth {
            params,
            tid,
            state: State::Start,
            negotiated: None,
        }
    }

    /// The transaction id.
    pub fn tid(&self) -> u16 {
        self.tid
    }

    /// The hash and DH group the controller chose.
    pub fn negotiated(&self) -> Option<(Digest, DhGroup)> {
        self.negotiated
    }

    /// Whether authentication completed.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// AUTH_Negotiate: send it with Authentication Send, then receive. Starting again begins a
    /// new transaction with the same id (re-authentication uses a new [`HostAuth`] with a new id).
    pub fn start(&mut self) -> Vec<u8> {
        self.state = State::AwaitChallenge;
        let mut p = ProtocolDescriptor {
            auth_id: PROTOCOL_DHCHAP,
            ..Default::default()
        };
        p.hash_ids.extend(
            self.params
                .hash_ids
                .iter()
                .copied()
                .take(p.hash_ids.capacity()),
        );
        p.dh_ids
            .extend(self.params.dh_ids.iter().copied().take(p.dh_ids.capacity()));
        Message::Negotiate(Negotiate {
            tid: self.tid,
            sc_c: 0,
            protocols: vec![p],
        })
        .encode()
    }

    /// Handles what an Authentication Receive returned.
    pub fn receive(&mut self, data: &[u8], rng: &mut dyn Random) -> HostAction {
        let msg = match Message::decode(data) {
            Ok(m) => m,
            Err(e) => return self.fail(e.reason()),
        };
        if let Message::Failure1(f) = msg {
            self.state = State::Failed;
            return HostAction::Failed {
                reason: f.reason,
                failure2: None,
            };
        }
        if msg.tid() != self.tid {
            return self.fail(FailureReason::IncorrectProtocolMessage);
        }
        match (core::mem::replace(&mut self.state, State::Failed), msg) {
            (State::AwaitChallenge, Message::Challenge(c)) => match self.challenge(&c, rng) {
                Ok(a) => a,
                Err(reason) => self.fail(reason),
            },
            (State::AwaitSuccess1 { hl, expected_r2 }, Message::Success1(s)) => {
                if usize::from(s.hl) != hl {
                    return self.fail(FailureReason::HashUnusable);
                }
                let Some(expected) = expected_r2 else {
                    self.state = State::Done;
                    return HostAction::Done;
                };
                match s.response {
                    Some(r2) if ct_eq(expected.as_bytes(), &r2) => {
                        self.state = State::Done;
                        HostAction::SendThenDone(
                            Message::Success2(Success2 { tid: self.tid }).encode(),
                        )
                    }
                    _ => self.fail(FailureReason::Failed),
                }
            }
            _ => self.fail(FailureReason::IncorrectProtocolMessage),
        }
    }

    fn challenge(
        &mut self,
        c: &super::messages::Challenge,
        rng: &mut dyn Random,
    ) -> Result<HostAction, FailureReason> {
        let digest = Digest::from_id(c.hash_id)
            .filter(|d| self.params.hash_ids.contains(&d.id()) && c.challenge.len() == d.hash_len())
            .ok_or(FailureReason::HashUnusable)?;
        let group = DhGroup::from_id(c.dh_id)
            .filter(|g| self.params.dh_ids.contains(&g.id()))
            .ok_or(FailureReason::DhGroupUnusable)?;
        self.negotiated = Some((digest, group));
        let (dh_value, shared) = if group == DhGroup::Null {
            if !c.dh_value.is_empty() {
                return Err(FailureReason::IncorrectPayload);
            }
            (Vec::new(), None)
        } else {
            if c.dh_value.is_empty() {
                return Err(FailureReason::DhGroupUnusable);
            }
            let key = DhKey::generate(group, rng).map_err(|_| FailureReason::Failed)?;
            let shared = key
                .shared_secret(&c.dh_value)
                .map_err(|_| FailureReason::DhGroupUnusable)?;
            (key.public_value().to_vec(), Some(shared))
        };
        let input = |role, challenge, seqnum| ResponseInput {
            digest,
            role,
            challenge,
            shared: shared.as_ref().map(|s| s.as_bytes()),
            seqnum,
            tid: self.tid,
            hostnqn: &self.params.hostnqn,
            subnqn: &self.params.subnqn,
        };
        let r1 = response(
            &self.params.host_key,
            &input(Role::Host, &c.challenge, c.seqnum),
        );
        let (c2, s2, expected_r2) = match &self.params.ctrl_key {
            None => (None, 0, None),
            Some(ckey) => {
                let mut c2 = Buf64::zeroed(digest.hash_len());
                rng.fill(c2.as_bytes_mut())
                    .map_err(|_| FailureReason::Failed)?;
                let s2 = rng.u32().map_err(|_| FailureReason::Failed)?.max(1);
                let r2 = response(ckey, &input(Role::Controller, c2.as_bytes(), s2));
                (Some(c2.as_bytes().to_vec()), s2, Some(r2))
            }
        };
        self.state = State::AwaitSuccess1 {
            hl: digest.hash_len(),
            expected_r2,
        };
        Ok(HostAction::SendThenReceive(
            Message::Reply(Reply {
                tid: self.tid,
                response: r1.as_bytes().to_vec(),
                challenge: c2,
                seqnum: s2,
                dh_value,
            })
            .encode(),
        ))
    }

    fn fail(&mut self, reason: FailureReason) -> HostAction {
        self.state = State::Failed;
        HostAction::Failed {
            reason,
            failure2: Some(
                Message::Failure2(Failure {
                    tid: self.tid,
                    reason_code: REASON_FAILED,
                    reason,
                })
                .encode(),
            ),
        }
    }
}
