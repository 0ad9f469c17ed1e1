//! `for_each_reactor`: visit every reactor in turn, each visit possibly finishing later.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{ReactorCtx, Reactors, SendError};

type VisitFn<E> = Box<dyn Fn(&mut ReactorCtx, Step<E>) + Send + Sync>;
type DoneFn<E> = Box<dyn FnOnce(&mut ReactorCtx, Result<(), E>) + Send>;

struct Iteration<E: Send + 'static> {
    reactors: Reactors,
    visit: VisitFn<E>,
    done: Mutex<Option<DoneFn<E>>>,
    origin: usize,
}

/// The token of one visit. Exactly one call to [`Step::next`] moves the iteration on; a step
/// dropped without it moves on too (with success), so that a torn-down reactor state cannot
/// hang the iteration, and says so in the log.
pub struct Step<E: Send + 'static> {
    it: Option<Arc<Iteration<E>>>,
    index: usize,
}

impl<E: Send + 'static> std::fmt::Debug for Step<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step").field("index", &self.index).finish()
    }
}

impl<E: Send + 'static> Step<E> {
    /// The index of the reactor being visited.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Finishes this visit. `Ok` continues with the next reactor (or `done` after the last);
    /// `Err` stops the iteration and hands the error to `done`.
    pub fn next(mut self, result: Result<(), E>) {
        if let Some(it) = self.it.take() {
            advance(it, self.index, result);
        }
    }
}

impl<E: Send + 'static> Drop for Step<E> {
    fn drop(&mut self) {
        if let Some(it) = self.it.take() {
            tracing::warn!(
                "for_each_reactor: visit of reactor {} ended without a result; continuing",
                self.index
            );
            advance(it, self.index, Ok(()));
        }
    }
}

fn advance<E: Send + 'static>(it: Arc<Iteration<E>>, index: usize, result: Result<(), E>) {
    let next = index + 1;
    if result.is_err() || next >= it.reactors.len() {
        let Some(done) = it.done.lock().take() else {
            return;
        };
        let origin = it.origin;
        let reactors = it.reactors.clone();
        if let Err(e) = reactors.send_ctrl(origin, move |ctx| done(ctx, result)) {
            tracing::error!("for_each_reactor: cannot deliver completion: {e}");
        }
        return;
    }
    let reactors = it.reactors.clone();
    let sent = reactors.send_ctrl(next, move |ctx| {
        let visit_it = Arc::clone(&it);
        (visit_it.visit)(
            ctx,
            Step {
                it: Some(it),
                index: next,
            },
        );
    });
    if let Err(e) = sent {
        tracing::error!("for_each_reactor: cannot reach reactor {next}: {e}");
    }
}

pub(super) fn start<E: Send + 'static>(
    reactors: &Reactors,
    visit: VisitFn<E>,
    done: DoneFn<E>,
) -> Result<(), SendError> {
    let it = Arc::new(Iteration {
        reactors: reactors.clone(),
        visit,
        done: Mutex::new(Some(done)),
        origin: Reactors::current().unwrap_or(0),
    });
    reactors.send_ctrl(0, move |ctx| {
        let visit_it = Arc::clone(&it);
        (visit_it.visit)(
            ctx,
            Step {
                it: Some(it),
                index: 0,
            },
        );
    })
}
