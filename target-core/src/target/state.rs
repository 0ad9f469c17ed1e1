//! The subsystem state machine: requests queue per subsystem and run one at a time, each
//! transition fanned out over every reactor's poll group.
//!
//! ```text
//! INACTIVE ─▶ ACTIVATING ─▶ ACTIVE ─▶ PAUSING ─▶ PAUSED ─▶ RESUMING ─▶ ACTIVE
//!                 │                                 │
//!                 └─(failure)─▶ DEACTIVATING ◀──────┴── ACTIVE/PAUSED (stop)
//!                                    │
//!                                    ▼
//!                                INACTIVE
//! ```
//!
//! A failed activation rolls back through DEACTIVATING to INACTIVE; a failed resume rolls back
//! through PAUSING to PAUSED. Pausing cannot fail: it only waits for outstanding I/O to drain.
//! A configuration change ("modify") pauses the affected scope, applies the change, and resumes,
//! all as one queued request; if an operator paused the subsystem, the change is applied and
//! the subsystem stays paused until the operator resumes it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Target;
use super::error::CoreError;
use super::poll_group::{PgAction, with_poll_group};
use super::subsystem::Subsystem;

/// States of a subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SubsystemState {
    /// Not serving; no poll group admits I/O for it.
    Inactive,
    /// Becoming active on every poll group.
    Activating,
    /// Serving.
    Active,
    /// Stopping admission and waiting for outstanding I/O.
    Pausing,
    /// Not admitting new I/O (it queues); nothing outstanding.
    Paused,
    /// Replaying queued I/O on every poll group.
    Resuming,
    /// Disconnecting every connection.
    Deactivating,
}

impl SubsystemState {
    /// The lower-case name shown by `nvmf_get_subsystems`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Inactive => "inactive",
            Self::Activating => "activating",
            Self::Active => "active",
            Self::Pausing => "pausing",
            Self::Paused => "paused",
            Self::Resuming => "resuming",
            Self::Deactivating => "deactivating",
        }
    }
}

/// What a pause stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseScope {
    /// Admin and fabrics commands only (new connections wait); I/O keeps flowing.
    Admin,
    /// Admin commands and I/O to one namespace.
    Namespace(u32),
    /// Admin commands and I/O to every namespace.
    All,
}

/// Undoes a modification whose resume failed.
pub(crate) type UndoFn = Box<dyn FnOnce(&Arc<Subsystem>) + Send>;
/// A configuration change applied while the subsystem is paused; returns a value for the
/// caller (an NSID) and optionally how to undo it.
pub(crate) type ModifyFn =
    Box<dyn FnOnce(&Arc<Subsystem>) -> Result<(u32, Option<UndoFn>), CoreError> + Send>;
type Reply = Box<dyn FnOnce(Result<u32, CoreError>) + Send>;

/// A requested change.
pub(crate) enum Change {
    Activate,
    Deactivate,
    Pause { scope: PauseScope, user: bool },
    Resume { user: bool },
    Modify { scope: PauseScope, f: ModifyFn },
}

/// Requests waiting for their turn on one subsystem.
#[derive(Default)]
pub(crate) struct ChangeQueue {
    running: bool,
    pending: VecDeque<(Change, Reply)>,
}

/// Queues a change; it runs when every earlier change of this subsystem has finished.
pub(crate) fn submit(target: &Arc<Target>, sub: &Arc<Subsystem>, change: Change, reply: Reply) {
    let start = {
        let mut q = sub.changes.lock();
        q.pending.push_back((change, reply));
        !std::mem::replace(&mut q.running, true)
    };
    if start {
        run_next(Arc::clone(target), Arc::clone(sub));
    }
}

fn run_next(target: Arc<Target>, sub: Arc<Subsystem>) {
    let next = {
        let mut q = sub.changes.lock();
        let n = q.pending.pop_front();
        if n.is_none() {
            q.running = false;
        }
        n
    };
    let Some((change, reply)) = next else { return };
    let (t, s) = (Arc::clone(&target), Arc::clone(&sub));
    execute(
        target,
        sub,
        change,
        Box::new(move |res| {
            reply(res);
            run_next(t, s);
        }),
    );
}

fn set(sub: &Subsystem, to: SubsystemState) {
    let mut st = sub.state.lock();
    tracing::debug!(
        "subsystem {}: {} -> {}",
        sub.nqn(),
        st.as_str(),
        to.as_str()
    );
    *st = to;
}

fn wrong_state(sub: &Subsystem, what: &str) -> CoreError {
    CoreError::State(format!(
        "cannot {what} subsystem {} in state {}",
        sub.nqn(),
        sub.state().as_str()
    ))
}

/// Runs `action` on every poll group in turn, then `then` with the first error if any.
fn fan_out(
    target: &Arc<Target>,
    sub: &Arc<Subsystem>,
    action: PgAction,
    then: impl FnOnce(Result<(), CoreError>) + Send + 'static,
) {
    let s = Arc::clone(sub);
    let sent = target.reactors().for_each_reactor_async::<CoreError>(
        move |ctx, step| {
            let s = Arc::clone(&s);
            // No poll group on this reactor (shutting down): the unused step moves on.
            let _ = with_poll_group(ctx, |pg| pg.apply(&s, action, step));
        },
        move |_, res| then(res),
    );
    if let Err(e) = sent {
        // The reactors are gone (shutdown): nothing runs anywhere any more.
        tracing::warn!("subsystem {}: {action:?} not delivered: {e}", sub.nqn());
    }
}

fn execute(target: Arc<Target>, sub: Arc<Subsystem>, change: Change, done: Reply) {
    use SubsystemState::*;
    if sub.destroying.load(Ordering::Acquire) && !matches!(change, Change::Deactivate) {
        return done(Err(CoreError::State(format!(
            "Subsystem {} is already being destroyed.",
            sub.nqn()
        ))));
    }
    let state = sub.state();
    match change {
        Change::Activate => match state {
            Active => done(Ok(0)),
            Inactive => {
                set(&sub, Activating);
                let (t, s) = (Arc::clone(&target), Arc::clone(&sub));
                fan_out(&target, &sub, PgAction::Activate, move |res| match res {
                    Ok(()) => {
                        set(&s, Active);
                        done(Ok(0))
                    }
                    Err(e) => {
                        tracing::error!("subsystem {} failed to start: {e}", s.nqn());
                        set(&s, Deactivating);
                        let s2 = Arc::clone(&s);
                        fan_out(&t, &s, PgAction::Deactivate, move |_| {
                            set(&s2, Inactive);
                            done(Err(e))
                        });
                    }
                });
            }
            _ => done(Err(wrong_state(&sub, "start"))),
        },
        Change::Deactivate => match state {
            Inactive => done(Ok(0)),
            Active | Paused => {
                set(&sub, Deactivating);
                let s = Arc::clone(&sub);
                fan_out(&target, &sub, PgAction::Deactivate, move |res| {
                    set(&s, Inactive);
                    s.user_paused.store(false, Ordering::Release);
                    done(res.map(|()| 0))
                });
            }
            _ => done(Err(wrong_state(&sub, "stop"))),
        },
        Change::Pause { scope, user } => match state {
            Active => {
                set(&sub, Pausing);
                let s = Arc::clone(&sub);
                fan_out(&target, &sub, PgAction::Pause(scope), move |res| {
                    set(&s, Paused);
                    if user {
                        s.user_paused.store(true, Ordering::Release);
                    }
                    done(res.map(|()| 0))
                });
            }
            Paused => {
                if user {
                    sub.user_paused.store(true, Ordering::Release);
                }
                if scope == PauseScope::Admin {
                    return done(Ok(0));
                }
                // Already paused: still drain the namespaces this pause names.
                fan_out(&target, &sub, PgAction::Pause(scope), move |res| {
                    done(res.map(|()| 0))
                });
            }
            _ => done(Err(wrong_state(&sub, "pause"))),
        },
        Change::Resume { user } => match state {
            Active => done(Ok(0)),
            Paused if !user && sub.user_paused() => done(Ok(0)),
            Paused => resume(target, sub, None, Box::new(move |r| done(r.map(|()| 0)))),
            _ => done(Err(wrong_state(&sub, "resume"))),
        },
        Change::Modify { scope, f } => match state {
            Inactive => done(f(&sub).map(|(v, _)| v)),
            Active => {
                set(&sub, Pausing);
                let (t, s) = (Arc::clone(&target), Arc::clone(&sub));
                fan_out(&target, &sub, PgAction::Pause(scope), move |_| {
                    set(&s, Paused);
                    match f(&s) {
                        Ok((v, undo)) => resume(t, s, undo, Box::new(move |r| done(r.map(|()| v)))),
                        Err(e) => resume(t, s, None, Box::new(move |_| done(Err(e)))),
                    }
                });
            }
            // Paused by an operator (internal pauses never outlive their request): drain
            // the scope, apply, and leave resuming to the operator.
            Paused => {
                let s = Arc::clone(&sub);
                fan_out(&target, &sub, PgAction::Pause(scope), move |_| {
                    done(f(&s).map(|(v, _)| v))
                });
            }
            _ => done(Err(wrong_state(&sub, "change"))),
        },
    }
}

/// PAUSED → RESUMING → ACTIVE; on failure back to PAUSED, then, if an undo is given, undo the
/// change and try once more.
fn resume(
    target: Arc<Target>,
    sub: Arc<Subsystem>,
    undo: Option<UndoFn>,
    done: Box<dyn FnOnce(Result<(), CoreError>) + Send>,
) {
    use SubsystemState::*;
    set(&sub, Resuming);
    let (t, s) = (Arc::clone(&target), Arc::clone(&sub));
    fan_out(&target, &sub, PgAction::Resume, move |res| match res {
        Ok(()) => {
            set(&s, Active);
            s.user_paused.store(false, Ordering::Release);
            done(Ok(()))
        }
        Err(e) => {
            tracing::error!("subsystem {} failed to resume: {e}", s.nqn());
            set(&s, Pausing);
            let (t2, s2) = (Arc::clone(&t), Arc::clone(&s));
            fan_out(&t, &s, PgAction::Pause(PauseScope::All), move |_| {
                set(&s2, Paused);
                match undo {
                    Some(undo) => {
                        undo(&s2);
                        resume(t2, s2, None, Box::new(move |_| done(Err(e))));
                    }
                    None => done(Err(e)),
                }
            });
        }
    });
}
