//! DH-HMAC-CHAP on the queues of hosts that must authenticate (nvmet's `fabrics-cmd-auth.c`):
//! the binding of the sans-I/O [`CtrlAuth`] to a queue.
//!
//! - A Connect from a host with a `dhchap_key` on the subsystem answers AUTHREQ.ATR and gives
//!   the queue (admin and every I/O queue) a [`QueueAuth`] ([`for_connect`]).
//! - Until the queue authenticated, [`gate`] refuses every command but Authentication
//!   Send/Receive and Property Get of CAP with Authentication Required.
//! - [`execute`] runs Authentication Send/Receive. A new AUTH_Negotiate picks up the host's
//!   current keys (`nvmf_subsystem_set_keys`) and the configured offer (`nvmf_set_config`), so a
//!   rotated key applies to the next (re-)authentication of a live controller.
//! - A failure completes its command (a Receive carries the AUTH_Failure1) with
//!   [`NvmeReq::disconnect_after`]: the transport closes the queue only once that completion
//!   was sent, so the host reads why it was refused instead of waiting for its admin timeout.
//! - A step that waits for the host longer than the keep-alive timeout (else 120 s) closes the
//!   queue ([`QueueAuth::timed_out`], checked with the keep-alive timer).
//!
//! # Where the DH work runs
//!
//! The DH steps (the controller's exponent for the Challenge and the shared secret when the
//! Reply arrives) cost up to ~23 ms each at ffdhe8192, too long to stall the other queues of a
//! reactor. With a DH group other than null those two steps run on a small pool of
//! authentication threads (two, `rtgt-auth-N`): the command answers [`NvmeAction::Queued`],
//! the [`CtrlAuth`] moves to the thread with the data, and once done the thread leaves the
//! outcome in the queue's slot and asks the queue's reactor to replay the request
//! ([`crate::target::resume_transport_request`]); [`execute`] then completes it. The HMAC-only
//! steps (null group, Success1/2) run inline: they take microseconds.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::queue::Queue;
use super::request::{NvmeAction, NvmeCtx, NvmeReq, complete, data_slice};
use crate::nvme::auth::ctrl::DEFAULT_STEP_TIMEOUT;
use crate::nvme::auth::{
    AUTH_REQUIRED, AuthCmd, AuthDirection, AuthEvent, AuthOutcome, CtrlAuth, CtrlAuthParams,
    DhGroup, Message, OsRandom,
};
use crate::nvme::spec::{fctype, prop};
use crate::nvme::{Sqe, Status};
use crate::target::{Subsystem, Target};

/// A step's result, left by an authentication thread for the queue's reactor.
type Done = Option<(Box<CtrlAuth>, AuthOutcome)>;

/// The authentication state of one queue of a host that must authenticate.
#[derive(Debug)]
pub(super) struct QueueAuth {
    /// The state machine; `None` while a step runs on an authentication thread.
    ctrl: Option<Box<CtrlAuth>>,
    /// Whether the queue authenticated (kept while the machine is away).
    authenticated: bool,
    /// The token of the request whose step runs on an authentication thread.
    inflight: Option<u64>,
    /// Where that thread leaves the result.
    done: Arc<Mutex<Done>>,
}

impl QueueAuth {
    /// Whether the queue authenticated.
    pub(super) fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a step waited for the host past its deadline (the queue must close). Logs it.
    pub(super) fn timed_out(&self, now: Instant) -> bool {
        let Some(c) = &self.ctrl else {
            return false;
        };
        let late = c.deadline().is_some_and(|d| now >= d);
        if late {
            tracing::warn!(auth = ?c, "DH-HMAC-CHAP: the host did not go on in time; closing the queue");
        }
        late
    }

    /// SPDK's `auth` object of `nvmf_subsystem_get_qpairs`: `{state, digest, dhgroup}`.
    pub(super) fn describe(&self) -> Value {
        let Some(c) = &self.ctrl else {
            return json!({"state": "working"});
        };
        let mut v = json!({"state": c.state_name()});
        if let Some((d, g)) = c.negotiated() {
            v["digest"] = json!(d.name());
            v["dhgroup"] = json!(g.name());
        }
        v
    }
}

/// The authentication state for a queue that just connected, if its host must authenticate on
/// `sub`: `kato_ms` is the controller's keep-alive timeout (each step may wait that long, else
/// 120 s).
pub(super) fn for_connect(
    cx: &NvmeCtx<'_>,
    sub: &Subsystem,
    hostnqn: &str,
    qid: u16,
    kato_ms: u32,
) -> Option<QueueAuth> {
    let keys = sub.host_keys(hostnqn)?;
    let step_timeout = if kato_ms == 0 {
        DEFAULT_STEP_TIMEOUT
    } else {
        Duration::from_millis(u64::from(kato_ms))
    };
    let params = CtrlAuthParams {
        hostnqn: hostnqn.to_string(),
        subnqn: sub.nqn().to_string(),
        qid,
        keys,
        policy: cx.core.target().auth_policy(),
        step_timeout,
    };
    tracing::debug!(
        hostnqn,
        subnqn = sub.nqn(),
        qid,
        "DH-HMAC-CHAP required on this queue"
    );
    Some(QueueAuth {
        ctrl: Some(Box::new(CtrlAuth::new(params, cx.now))),
        authenticated: false,
        inflight: None,
        done: Arc::new(Mutex::new(None)),
    })
}

/// Whether `sqe` is an Authentication Send or Receive.
pub(super) fn is_auth(sqe: &Sqe) -> bool {
    sqe.is_fabrics() && matches!(sqe.fctype(), fctype::AUTH_SEND | fctype::AUTH_RECV)
}

/// The status for a command a queue may not run before it authenticated, if any.
pub(super) fn gate(q: &Queue, sqe: &Sqe) -> Option<Status> {
    let a = q.auth.as_ref()?;
    if a.authenticated || is_auth(sqe) {
        return None;
    }
    let cap = sqe.is_fabrics()
        && sqe.fctype() == fctype::PROPERTY_GET
        && crate::nvme::fabrics::PropertyCmd::from_sqe(sqe).offset == prop::CAP;
    if cap {
        return None;
    }
    tracing::debug!(
        qid = q.qid,
        opcode = sqe.opcode(),
        "command before authentication"
    );
    Some(AUTH_REQUIRED)
}

enum Step {
    Send(Vec<u8>),
    Receive(u32),
}

/// Runs an Authentication Send or Receive on a queue with a [`QueueAuth`].
pub(super) fn execute(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    let Some(inflight) = q.auth.as_ref().map(|a| a.inflight) else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    // The replay of a step that ran on an authentication thread.
    if inflight == Some(req.token) {
        let auth = q.auth.as_mut().expect("checked above");
        auth.inflight = None;
        let done = auth.done.lock().take();
        let Some((ctrl, out)) = done else {
            tracing::error!("DH-HMAC-CHAP: a replayed step has no result");
            return complete(q, req, Status::INTERNAL_ERROR);
        };
        auth.ctrl = Some(ctrl);
        return finish(q, req, out);
    }
    if inflight.is_some() {
        // The host sends one authentication command at a time.
        return complete(q, req, Status::COMMAND_SEQUENCE_ERROR);
    }
    let cmd = match AuthCmd::parse(&req.sqe) {
        Some(Ok(c)) => c,
        Some(Err(e)) => return complete(q, req, e.status),
        None => return complete(q, req, Status::INVALID_OPCODE),
    };
    if !cmd.transfer_matches(req.sgl.len()) {
        return complete(q, req, Status::INVALID_FIELD);
    }
    let step = match cmd.direction {
        AuthDirection::Send => match data_slice(req) {
            Ok(d) => Step::Send(d.to_vec()),
            Err(s) => return complete(q, req, s),
        },
        AuthDirection::Receive => Step::Receive(cmd.len),
    };
    // A new transaction takes the host's keys and the offer in effect now.
    let negotiate =
        matches!(&step, Step::Send(d) if matches!(Message::decode(d), Ok(Message::Negotiate(_))));
    let fresh_keys = if negotiate {
        q.association()
            .and_then(|a| a.subsystem().host_keys(a.hostnqn()))
    } else {
        None
    };
    let policy = cx.core.target().auth_policy();
    let Some(auth) = q.auth.as_mut() else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    let Some(ctrl) = auth.ctrl.as_mut() else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if negotiate {
        if let Some(k) = fresh_keys {
            ctrl.set_keys(k);
        }
        ctrl.set_policy(policy);
    }
    let heavy = ctrl.negotiated().is_some_and(|(_, g)| g != DhGroup::Null)
        && matches!(
            (&step, ctrl.state_name()),
            (Step::Receive(_), "challenge") | (Step::Send(_), "reply")
        );
    if !heavy {
        let out = match step {
            Step::Send(d) => ctrl.send(&d, cx.now),
            Step::Receive(al) => ctrl.receive(al, cx.now, &mut OsRandom),
        };
        return finish(q, req, out);
    }
    let Some(mut ctrl) = auth.ctrl.take() else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    auth.inflight = Some(req.token);
    let slot = Arc::clone(&auth.done);
    let target: Arc<Target> = Arc::clone(cx.core.target());
    let (reactor, transport, token) = (q.me.reactor, q.me.transport, req.token);
    run_off_reactor(Box::new(move || {
        let out = match step {
            Step::Send(d) => ctrl.send(&d, Instant::now()),
            Step::Receive(al) => ctrl.receive(al, Instant::now(), &mut OsRandom),
        };
        *slot.lock() = Some((ctrl, out));
        let resume = move |ctx: &mut crate::reactor::ReactorCtx| {
            crate::target::resume_transport_request(ctx, transport, token)
        };
        if let Err(e) = target.reactors().send_ctrl(reactor, resume) {
            tracing::debug!("DH-HMAC-CHAP: cannot resume a request on reactor {reactor}: {e}");
        }
    }));
    NvmeAction::Queued
}

fn ctrl_hostnqn(q: &Queue) -> String {
    q.association()
        .map(|a| a.hostnqn().to_string())
        .unwrap_or_default()
}

/// Completes an authentication command with its outcome.
fn finish(q: &mut Queue, req: &mut NvmeReq, out: AuthOutcome) -> NvmeAction {
    let hostnqn = ctrl_hostnqn(q);
    let qid = q.qid;
    let Some(auth) = q.auth.as_mut() else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if let Some(c) = &auth.ctrl {
        auth.authenticated = c.is_authenticated();
    }
    match out.event {
        AuthEvent::Continue => {}
        AuthEvent::Authenticated => {
            let neg = auth.ctrl.as_ref().and_then(|c| c.negotiated());
            tracing::info!(
                %hostnqn, qid,
                digest = neg.map_or("?", |n| n.0.name()),
                dhgroup = neg.map_or("?", |n| n.1.name()),
                "DH-HMAC-CHAP: host authenticated"
            );
        }
        AuthEvent::Failed(reason) => {
            auth.authenticated = false;
            tracing::warn!(%hostnqn, qid, %reason,
                "DH-HMAC-CHAP: authentication failed; the queue closes once the answer is sent");
            req.disconnect_after = true;
        }
    }
    let mut len = 0u32;
    if out.status.is_success() && !out.data.is_empty() {
        match data_slice(req) {
            Ok(buf) if buf.len() >= out.data.len() => {
                buf[..out.data.len()].copy_from_slice(&out.data);
                len = out.data.len() as u32;
            }
            _ => {
                req.cqe = q.cqe(&req.sqe, Status::INTERNAL_ERROR);
                req.data_len = 0;
                return NvmeAction::Complete;
            }
        }
    }
    req.cqe = q.cqe(&req.sqe, out.status);
    req.data_len = len;
    NvmeAction::Complete
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on one of the authentication threads (started on first use).
fn run_off_reactor(job: Job) {
    static POOL: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let tx = POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..2 {
            let rx: Arc<Mutex<Receiver<Job>>> = Arc::clone(&rx);
            let spawned = std::thread::Builder::new()
                .name(format!("rtgt-auth-{i}"))
                .spawn(move || {
                    loop {
                        let job = rx.lock().recv();
                        match job {
                            Ok(j) => j(),
                            Err(_) => break,
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!("cannot start an authentication thread: {e}");
            }
        }
        Mutex::new(tx)
    });
    if let Err(e) = tx.lock().send(job) {
        // No thread: run it here rather than leave the request waiting forever.
        tracing::error!("authentication threads are gone; running a DH step on the reactor");
        (e.0)();
    }
}
