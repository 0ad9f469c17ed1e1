//! The NVMe/RDMA request lifecycle, sans-I/O: SPDK's `nvmf_rdma_request_process` states as
//! one transition function. The poll group's driver (`RdmaPg::drive`) feeds it events and
//! carries out the [`Act`] each transition asks for; nothing else changes a request's state.
//!
//! ```text
//!  Free ─Start──▶ Ready ──execute──▶ Executing ─io─▶ IoDone ─finish─▶ …
//!    │              ▲  │                Queued ─resumed─▶ Ready
//!    │              │  │                Parked ─AER done─▶ Responding ─plan─┐
//!    │              │  │                Busy ─retry─▶ Retrying ─resubmit─▶ …  │
//!    ├─▶ NeedBuffer ┤  └─complete + plan─▶ C2hPending | SendPending ◀───────┤
//!    │      │       │                                  │ posted              │
//!    │      └─▶ H2cPending ─all posted─▶ H2c ─all read─┘    ▼                │
//!    │              │                                  Completing ─SEND done─▶ Free
//!    └─▶ Responding ─plan──────────────────────────────────────────────────┘
//! ```
//!
//! Two shortcuts keep the usual I/O at six transitions without skipping a state anything
//! outside the driver could see: a command whose buffers the driver took as it arrived
//! starts with them ([`Start::Fetched`]: `Free` to `Ready` or `H2cPending`, as `Buffers`
//! from `NeedBuffer`), and the exec layer's "finished" comes with the response planned
//! ([`Exec::Complete`]: straight to the queue it posts from; `Responding` remains for the
//! completions made without the exec layer: refused commands, AERs).
//!
//! `Ready`, `IoDone`, `Retrying` and `Responding` are the driver's own: it leaves them within
//! the same call. Every other state waits for an event from outside: a buffer, send-queue
//! room, a completion, the bdev, admission, an AER.
//!
//! When the request's queue pair closes ([`Event::Close`]) it leaves whatever queue it waits
//! in and is freed at once if nothing outside holds it; otherwise it is freed when that comes
//! back (its RDMA READs, its bdev I/O, its SEND), and never executes or responds again. The
//! drain marker's completion ([`Event::SendsOver`]) says every send work request has
//! completed: a request still waiting for one lost it, and is freed.

/// Where a request is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum State {
    /// In its resource set's free list.
    #[default]
    Free,
    /// About to execute (driver).
    Ready,
    /// Waiting for data buffers (in the poll group's buffer queue).
    NeedBuffer,
    /// Waiting for send-queue slots or RDMA READ credits (in the queue pair's read queue).
    H2cPending,
    /// Every RDMA READ is posted; waiting for their completions.
    H2c,
    /// A bdev I/O is in flight.
    Executing,
    /// The bdev I/O came back; about to finish it (driver).
    IoDone,
    /// Admission queued it while the subsystem or namespace is paused.
    Queued,
    /// A parked Asynchronous Event Request.
    Parked,
    /// The bdev backend was full: waiting to be retried (in the poll group's retry queue).
    Busy,
    /// About to resubmit (driver).
    Retrying,
    /// Has its completion; about to plan the response (driver).
    Responding,
    /// Waiting for send-queue slots for its RDMA WRITEs and SEND (the queue pair's write
    /// queue).
    C2hPending,
    /// Waiting for a send-queue slot for its SEND (the queue pair's send queue).
    SendPending,
    /// The response is posted; waiting for the SEND completion.
    Completing,
}

/// What the exec layer said after running a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Exec {
    /// Finished, and its response planned (the driver plans it with the answer, so the
    /// request does not stop in `Responding`): post it with this many RDMA WRITEs of data
    /// before the SEND.
    Complete {
        /// RDMA WRITEs of data (0: the SEND alone).
        writes: u16,
    },
    /// A bdev I/O is in flight.
    Submitted,
    /// Admission queued it.
    Queued,
    /// An AER, held.
    Parked,
    /// The backend is full: retry later.
    Busy,
}

/// How a received command starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Start {
    /// Nothing to fetch (no data, in-capsule data, no direction): execute.
    Execute,
    /// Keyed SGL with data: take buffers first.
    NeedData,
    /// Keyed SGL with data, and the driver took its buffers already (nobody waited for
    /// them): as [`Event::Buffers`] from `NeedBuffer`.
    Fetched(Fetch),
    /// Refused (bad SGL, malformed command): respond with the error completion.
    Respond,
}

/// What the data buffers a request took mean for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fetch {
    /// Nothing to fetch from the host (controller-to-host, or no bytes): execute.
    Execute,
    /// Fetch the host's data with this many RDMA READs first.
    Reads(u16),
    /// The READs cannot be planned (a bug): respond with an internal error.
    Unplannable,
}

/// What happens to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Event {
    /// A received command met this free request.
    Start(Start),
    /// Data buffers were taken.
    Buffers(Fetch),
    /// This many more of its RDMA READs were posted.
    ReadsPosted(u16),
    /// One of its RDMA READs completed (`ok`: successfully).
    ReadDone {
        /// Successful.
        ok: bool,
    },
    /// The exec layer's answer (to execute, io done, resubmit).
    Exec(Exec),
    /// Its bdev I/O came back.
    IoBack,
    /// Admission lets it go.
    Resumed,
    /// Time to retry the busy backend.
    Retry,
    /// Its parked AER got its completion.
    AerDone,
    /// The response is planned with this many RDMA WRITEs before the SEND.
    Planned {
        /// RDMA WRITEs of data (0: the SEND alone).
        writes: u16,
    },
    /// The response chain is posted.
    Posted,
    /// Its response SEND completed (with any status).
    SendDone,
    /// Its queue pair is closing.
    Close,
    /// The queue pair's drain marker completed: every send work request is over.
    SendsOver,
}

/// A queue a request can wait in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WaitQueue {
    /// The poll group's queue of requests waiting for data buffers.
    Buffers,
    /// The queue pair's RDMA READ queue.
    Reads,
    /// The queue pair's write (data + response) queue.
    Writes,
    /// The queue pair's response queue.
    Sends,
    /// The poll group's busy-backend retry queue.
    BdevRetry,
    /// The queue pair's parked AERs.
    Parked,
}

/// What the driver does after a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Act {
    /// Nothing: wait for the next event.
    Wait,
    /// Run the command through the exec layer (answer with [`Event::Exec`]).
    Execute,
    /// Finish the bdev I/O through the exec layer (answer with [`Event::Exec`]).
    FinishIo,
    /// Resubmit to the busy backend (answer with [`Event::Exec`]).
    Resubmit,
    /// Take data buffers (answer with [`Event::Buffers`], or leave it in the buffer queue).
    TakeBuffers,
    /// Put it in this queue.
    Enqueue(WaitQueue),
    /// Encode the completion and plan the data to the host (answer with
    /// [`Event::Planned`]).
    PlanResponse,
    /// Take it out of this queue (its queue pair closed), then free it if `free`.
    Leave {
        /// The queue it waited in.
        queue: WaitQueue,
        /// Free it now.
        free: bool,
    },
    /// Free it: give its receive, buffers and slot back.
    Free,
}

/// An event the request's state cannot take (a bug in the caller, or a stale completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    /// The state.
    pub state: State,
    /// The event.
    pub event: Event,
}

/// One request's lifecycle: its state, its RDMA READ accounts, and whether its queue pair
/// closed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    state: State,
    reads: u16,
    posted: u16,
    done: u16,
    failed: bool,
    closed: bool,
}

impl Lifecycle {
    /// The state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether it is free.
    pub fn is_free(&self) -> bool {
        self.state == State::Free
    }

    /// RDMA READs still to post.
    pub fn reads_left(&self) -> u16 {
        self.reads - self.posted
    }

    /// RDMA READs posted so far (those to post next start after them).
    pub fn reads_posted(&self) -> u16 {
        self.posted
    }

    /// Whether its queue pair closed.
    #[cfg(test)]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    #[inline(always)]
    fn go(&mut self, to: State, act: Act) -> Result<Act, Invalid> {
        self.state = to;
        if to == State::Free {
            *self = Lifecycle::default();
        }
        Ok(act)
    }

    /// All posted READs completed: execute, or free if one failed or the queue pair closed.
    #[inline]
    fn reads_finished(&mut self) -> Result<Act, Invalid> {
        if self.failed || self.closed {
            self.go(State::Free, Act::Free)
        } else {
            self.go(State::Ready, Act::Execute)
        }
    }

    /// The response is planned with `writes` RDMA WRITEs: wait for send-queue room.
    #[inline(always)]
    fn planned(&mut self, writes: u16) -> Result<Act, Invalid> {
        if writes > 0 {
            self.go(State::C2hPending, Act::Enqueue(WaitQueue::Writes))
        } else {
            self.go(State::SendPending, Act::Enqueue(WaitQueue::Sends))
        }
    }

    /// The request has its data buffers: fetch the host's data, or execute.
    #[inline(always)]
    fn fetched(&mut self, f: Fetch) -> Result<Act, Invalid> {
        match f {
            Fetch::Execute | Fetch::Reads(0) => self.go(State::Ready, Act::Execute),
            Fetch::Reads(n) => {
                self.reads = n;
                self.posted = 0;
                self.done = 0;
                self.go(State::H2cPending, Act::Enqueue(WaitQueue::Reads))
            }
            Fetch::Unplannable => self.go(State::Responding, Act::PlanResponse),
        }
    }

    /// Feeds one event; returns what the driver must do. Inlined into the driver: it runs
    /// about six times per I/O, mostly with an event the caller names, so it folds to a
    /// check of the state.
    #[inline(always)]
    pub fn on(&mut self, event: Event) -> Result<Act, Invalid> {
        use State::*;
        match (self.state, event) {
            (Free, Event::Start(s)) => match s {
                Start::Execute => self.go(Ready, Act::Execute),
                Start::NeedData => self.go(NeedBuffer, Act::TakeBuffers),
                Start::Fetched(f) => self.fetched(f),
                Start::Respond => self.go(Responding, Act::PlanResponse),
            },
            (NeedBuffer, Event::Buffers(f)) => self.fetched(f),
            (H2cPending, Event::ReadsPosted(n)) if n > 0 && n <= self.reads_left() => {
                self.posted += n;
                if self.posted == self.reads {
                    self.go(H2c, Act::Wait)
                } else {
                    Ok(Act::Wait)
                }
            }
            (H2cPending | H2c, Event::ReadDone { ok }) if self.done < self.posted => {
                self.done += 1;
                self.failed |= !ok;
                if self.state == H2c && self.done == self.posted {
                    self.reads_finished()
                } else {
                    Ok(Act::Wait)
                }
            }
            (Ready | IoDone | Retrying, Event::Exec(e)) => {
                if self.closed {
                    // The queue pair closed while the exec layer ran it: nothing answers; a
                    // bdev I/O it submitted is waited for.
                    return match e {
                        Exec::Submitted => self.go(Executing, Act::Wait),
                        _ => self.go(Free, Act::Free),
                    };
                }
                match e {
                    Exec::Complete { writes } => self.planned(writes),
                    Exec::Submitted => self.go(Executing, Act::Wait),
                    Exec::Queued => self.go(Queued, Act::Wait),
                    Exec::Parked => self.go(Parked, Act::Enqueue(WaitQueue::Parked)),
                    Exec::Busy => self.go(Busy, Act::Enqueue(WaitQueue::BdevRetry)),
                }
            }
            (Executing, Event::IoBack) => {
                if self.closed {
                    self.go(Free, Act::Free)
                } else {
                    self.go(IoDone, Act::FinishIo)
                }
            }
            (Queued, Event::Resumed) => self.go(Ready, Act::Execute),
            (Busy, Event::Retry) => self.go(Retrying, Act::Resubmit),
            (Parked, Event::AerDone) => self.go(Responding, Act::PlanResponse),
            (Responding, Event::Planned { writes }) => self.planned(writes),
            (C2hPending | SendPending, Event::Posted) => self.go(Completing, Act::Wait),
            (Completing, Event::SendDone) => self.go(Free, Act::Free),
            (_, Event::Close) => {
                self.closed = true;
                let leave = |queue| Act::Leave { queue, free: true };
                match self.state {
                    NeedBuffer => self.go(Free, leave(WaitQueue::Buffers)),
                    C2hPending => self.go(Free, leave(WaitQueue::Writes)),
                    SendPending => self.go(Free, leave(WaitQueue::Sends)),
                    Busy => self.go(Free, leave(WaitQueue::BdevRetry)),
                    Parked => self.go(Free, leave(WaitQueue::Parked)),
                    Queued => self.go(Free, Act::Free),
                    H2cPending => {
                        // READs not posted never will be; wait for those that were.
                        self.reads = self.posted;
                        self.failed = true;
                        if self.done == self.posted {
                            self.go(Free, leave(WaitQueue::Reads))
                        } else {
                            self.go(
                                H2c,
                                Act::Leave {
                                    queue: WaitQueue::Reads,
                                    free: false,
                                },
                            )
                        }
                    }
                    // The adapter or a bdev holds it (or it is the driver's): freed when that
                    // comes back.
                    H2c | Executing | Completing | Ready | IoDone | Retrying | Responding => {
                        Ok(Act::Wait)
                    }
                    Free => {
                        self.closed = false;
                        Ok(Act::Wait)
                    }
                }
            }
            (Completing, Event::SendsOver) => self.go(Free, Act::Free),
            (H2c, Event::SendsOver) if self.done < self.posted => {
                // The completions of its READs were lost with the queue pair.
                self.go(Free, Act::Free)
            }
            (_, Event::SendsOver) => Ok(Act::Wait),
            (state, event) => Err(Invalid { state, event }),
        }
    }
}

#[cfg(test)]
mod tests;
