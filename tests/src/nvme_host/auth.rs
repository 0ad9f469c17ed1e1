//! DH-HMAC-CHAP on the test host: after a Connect whose response asks for authentication
//! (AUTHREQ.ATR), the host runs a [`HostAuth`] transaction with Authentication Send/Receive on
//! that queue, as the Linux host does (`nvme_auth_negotiate`).

use target_core::nvme::auth::{
    AuthCmd, AuthDirection, DhGroup, DhchapSecret, Digest, FailureReason, HostAction, HostAuth,
    HostAuthParams, OsRandom,
};

use super::queue::HostError;
use crate::nvme_cmds::NvmeQueue;

/// The host's DH-HMAC-CHAP settings (`nvme connect --dhchap-secret/--dhchap-ctrl-secret`).
#[derive(Debug, Clone)]
pub struct DhchapOpts {
    /// The host's key.
    pub key: DhchapSecret,
    /// The controller's key: if set, the host authenticates the controller too.
    pub ctrl_key: Option<DhchapSecret>,
    /// Hash ids offered (default: SHA-256, 384, 512).
    pub hash_ids: Vec<u8>,
    /// DH group ids offered (default: all, null first).
    pub dh_ids: Vec<u8>,
}

impl DhchapOpts {
    /// The Linux host's offer with these secrets (DHHC-1 strings).
    pub fn new(key: &str, ctrl_key: Option<&str>) -> Self {
        Self {
            key: DhchapSecret::parse(key).expect("a DHHC-1 secret"),
            ctrl_key: ctrl_key.map(|k| DhchapSecret::parse(k).expect("a DHHC-1 secret")),
            hash_ids: Digest::ALL.iter().map(|d| d.id()).collect(),
            dh_ids: DhGroup::ALL.iter().map(|g| g.id()).collect(),
        }
    }

    /// Offers only `digests` and `groups`.
    pub fn offer(mut self, digests: &[Digest], groups: &[DhGroup]) -> Self {
        self.hash_ids = digests.iter().map(|d| d.id()).collect();
        self.dh_ids = groups.iter().map(|g| g.id()).collect();
        self
    }
}

/// The Authentication Receive allocation length (the Linux host's buffer).
pub const AUTH_AL: u32 = 4096;

fn auth_send(q: &mut impl NvmeQueue, msg: &[u8]) -> Result<(), HostError> {
    let sqe = AuthCmd::sqe(AuthDirection::Send, 0, msg.len() as u32);
    q.exec(sqe, Some(msg), 0)?.ok().map(|_| ())
}

fn auth_receive(q: &mut impl NvmeQueue) -> Result<Vec<u8>, HostError> {
    let sqe = AuthCmd::sqe(AuthDirection::Receive, 0, AUTH_AL);
    Ok(q.exec(sqe, None, AUTH_AL)?.ok()?.data)
}

/// Runs one DH-HMAC-CHAP transaction with id `tid` on `q`. Returns the negotiated hash and
/// group; a refusal is [`HostError::Auth`] with the reason the controller's AUTH_Failure1 gave
/// (or the host's own, after it sent AUTH_Failure2).
pub fn authenticate(
    q: &mut impl NvmeQueue,
    subnqn: &str,
    hostnqn: &str,
    o: &DhchapOpts,
    tid: u16,
) -> Result<(Digest, DhGroup), HostError> {
    let params = HostAuthParams {
        hostnqn: hostnqn.to_string(),
        subnqn: subnqn.to_string(),
        host_key: o.key.clone(),
        ctrl_key: o.ctrl_key.clone(),
        hash_ids: o.hash_ids.clone(),
        dh_ids: o.dh_ids.clone(),
    };
    let mut h = HostAuth::new(params, tid);
    let mut msg = h.start();
    loop {
        auth_send(q, &msg)?;
        let data = auth_receive(q)?;
        match h.receive(&data, &mut OsRandom) {
            HostAction::SendThenReceive(m) => msg = m,
            HostAction::SendThenDone(m) => {
                auth_send(q, &m)?;
                break;
            }
            HostAction::Done => break,
            HostAction::Failed { reason, failure2 } => {
                if let Some(f) = failure2 {
                    let _ = auth_send(q, &f);
                }
                return Err(HostError::Auth(reason));
            }
        }
    }
    h.negotiated()
        .ok_or_else(|| HostError::Protocol("authenticated without a negotiation".into()))
}

/// Authenticates on `q` (queue `qid`) if the Connect response (`dw0`) set AUTHREQ.ATR, as the
/// Linux host does (transaction id qid + 1); without keys that is [`HostError::NoKey`].
pub fn authenticate_if_asked_on(
    q: &mut impl NvmeQueue,
    qid: u16,
    subnqn: &str,
    hostnqn: &str,
    dhchap: Option<&DhchapOpts>,
    dw0: u32,
) -> Result<(), HostError> {
    if dw0 & target_core::nvme::auth::CONNECT_AUTHREQ_ATR == 0 {
        return Ok(());
    }
    let Some(o) = dhchap else {
        return Err(HostError::NoKey);
    };
    authenticate(q, subnqn, hostnqn, o, qid + 1).map(|_| ())
}

/// The reason of an authentication refusal, if `e` is one.
pub fn refused_reason(e: &HostError) -> Option<FailureReason> {
    match e {
        HostError::Auth(r) => Some(*r),
        _ => None,
    }
}
