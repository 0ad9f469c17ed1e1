//! The NVMe/RDMA queue pair lifecycle, sans-I/O: LIVE → CLOSING → DESTROYED.
//!
//! A queue pair closes for many reasons (the host disconnected, keep-alive expired, a
//! completion failed, the exec layer asked, the subsystem went away, shutdown); whichever
//! comes first starts the same teardown, once:
//!
//! 1. the exec layer is told (the controller's teardown starts), what is batched is posted,
//!    `rdma_disconnect`;
//! 2. the drain ([`rdma_plumbing::drain`]): error state, the zero-length RDMA WRITE marker,
//!    and a watchdog;
//! 3. every request is closed: what waits is freed, what the adapter or a bdev holds is freed
//!    when it comes back;
//! 4. the marker's completion means every send work request is over: requests still waiting
//!    for one lost it and are freed; without a shared receive queue, every receive of the
//!    queue pair's own queue must flush too;
//! 5. when the queue pair is drained and its last request is free, it is destroyed — queue
//!    pair first, then its CM identifier and buffers. If the drain never ends (a completion
//!    the adapter lost), the watchdog destroys the queue pair, after which nothing completes.
//!
//! The machine counts the queue pair's requests and own receives; the poll group's driver
//! (`RdmaPg::run_qpair`) carries out its [`Action`]s in order.

use arrayvec::ArrayVec;
use rdma_plumbing::Drain;

/// Queue pair states, entered in this order only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum State {
    /// Accepted; commands flow.
    Live,
    /// Tearing down: draining, requests finishing.
    Closing,
    /// Gone: nothing refers to it.
    Destroyed,
}

/// What happens to a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Event {
    /// Something asks for the queue pair to close.
    Close,
    /// The drain marker completed (any status): every send work request posted before it
    /// has completed.
    MarkerDone,
    /// The drain marker could not be posted: nothing will mark the end of the send queue,
    /// so the drain does not wait for it (requests still wait for their own completions).
    MarkerNotPosted,
    /// The drain watchdog fired.
    DrainTimeout,
    /// A request started on the queue pair.
    RequestStarted,
    /// A request of the queue pair was freed.
    RequestFreed,
    /// Receives were posted (or batched) to the queue pair's own receive queue.
    ReceivesPosted(u32),
    /// A receive of the queue pair's own queue completed (or was taken back unposted).
    ReceiveDone,
}

/// What the driver does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// Tell the exec layer the queue is closing.
    BeginClose,
    /// Post what is batched for the queue pair (it completes, flushed, like the rest).
    FlushBatches,
    /// `rdma_disconnect`.
    Disconnect,
    /// Move the queue pair to the error state (even if the CM refused to disconnect).
    ToError,
    /// Post the drain marker (if that fails, feed [`Event::MarkerNotPosted`]).
    PostMarker,
    /// Close every request of the queue pair, and give back the received commands that wait
    /// for a request.
    CloseRequests,
    /// Arm the drain watchdog.
    ArmWatchdog,
    /// Every send work request is over: free the requests waiting for a send completion.
    ReleaseLostSends,
    /// The watchdog fired: destroy the verbs queue pair now (the adapter lets go of its
    /// buffers; nothing more completes).
    DestroyQp,
    /// Drained and no request left: remove the queue pair and release its resources.
    Destroy,
}

/// The actions of one event.
pub(crate) type Actions = ArrayVec<Action, 10>;

/// One queue pair's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    state: State,
    drain: Drain,
    own_receives: bool,
    requests: u32,
    receives: u32,
}

impl Lifecycle {
    /// A live queue pair. `own_receives`: it has its own receive queue (no shared one).
    pub fn new(own_receives: bool) -> Self {
        Lifecycle {
            state: State::Live,
            drain: Drain::new(own_receives),
            own_receives,
            requests: 0,
            receives: 0,
        }
    }

    /// The state.
    #[cfg(test)]
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether it is closing (or gone).
    pub fn is_closing(&self) -> bool {
        self.state >= State::Closing
    }

    /// Requests started and not freed.
    #[cfg(test)]
    pub fn requests(&self) -> u32 {
        self.requests
    }

    /// Receives of its own queue posted and not completed.
    #[cfg(test)]
    pub fn receives(&self) -> u32 {
        self.receives
    }

    /// The drain.
    #[cfg(test)]
    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    /// Feeds one event. Inlined: a request's start and free feed it (twice per I/O) with an
    /// event the caller names, which folds it to a count and the state check.
    #[inline]
    pub fn on(&mut self, event: Event) -> Actions {
        let mut out = Actions::new();
        match event {
            Event::Close => {
                if self.state != State::Live {
                    return out;
                }
                self.state = State::Closing;
                out.push(Action::BeginClose);
                out.push(Action::FlushBatches);
                out.push(Action::Disconnect);
                if self.drain.start() {
                    out.push(Action::ToError);
                    out.push(Action::PostMarker);
                }
                out.push(Action::CloseRequests);
                out.push(Action::ArmWatchdog);
                self.receives_check();
            }
            Event::MarkerDone => {
                if self.state == State::Closing && !self.drain.send_done() {
                    self.drain.marker_done();
                    out.push(Action::ReleaseLostSends);
                }
            }
            Event::MarkerNotPosted => {
                if self.state == State::Closing {
                    self.drain.marker_done();
                }
            }
            Event::DrainTimeout => {
                let sends_over = self.drain.send_done();
                if self.state == State::Closing && self.drain.time_out() {
                    self.receives = 0;
                    out.push(Action::DestroyQp);
                    if !sends_over {
                        out.push(Action::ReleaseLostSends);
                    }
                }
            }
            Event::RequestStarted => self.requests += 1,
            Event::RequestFreed => self.requests = self.requests.saturating_sub(1),
            Event::ReceivesPosted(n) => {
                if self.own_receives && !self.drain.timed_out() {
                    self.receives += n;
                }
            }
            Event::ReceiveDone => {
                self.receives = self.receives.saturating_sub(1);
                self.receives_check();
            }
        }
        if self.state == State::Closing && self.drain.is_drained() && self.requests == 0 {
            self.state = State::Destroyed;
            out.push(Action::Destroy);
        }
        out
    }

    fn receives_check(&mut self) {
        if self.state == State::Closing && self.own_receives && self.receives == 0 {
            self.drain.receives_done();
        }
    }
}

#[cfg(test)]
mod tests;
