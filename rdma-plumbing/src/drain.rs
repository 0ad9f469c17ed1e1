//! Draining a queue pair before anything it used is freed (the `ib_drain_qp` pattern, with
//! the fabric's teardown rules, see the `fabric` crate).
//!
//! 1. The queue pair goes to the error state: every work request outstanding, and every send
//!    work request posted afterwards, completes with a flush error.
//! 2. A zero-length, signaled RDMA WRITE goes on the send queue: the *marker*. A send queue
//!    completes in order, so when the marker's completion arrives, every send work request
//!    posted before it has completed too — including the unsignaled ones, and those whose
//!    completion the adapter lost.
//! 3. The receive queue has no marker (rxe never completes receives posted in the error
//!    state): the runtime counts its posted receives and reports when the last one has
//!    flushed. With a shared receive queue the receives belong to the queue, and there is
//!    nothing to wait for.
//! 4. If the marker's completion or a receive's flush never comes (an adapter that loses it),
//!    a watchdog ends the wait: the queue pair is destroyed, after which the adapter touches
//!    none of its buffers, and what was still posted counts as completed.
//!
//! [`Drain`] is the bookkeeping (sans-I/O); [`marker`] and [`post_marker`] are step 2.

use fabric::{Qp, SendWr, SgeList};

/// The drain of one queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drain {
    started: bool,
    send_done: bool,
    recv_done: bool,
    timed_out: bool,
}

impl Drain {
    /// A queue pair not draining yet. `own_receive_queue`: its receives are its own (no shared
    /// receive queue), so their flushes are waited for.
    pub fn new(own_receive_queue: bool) -> Self {
        Drain {
            started: false,
            send_done: false,
            recv_done: !own_receive_queue,
            timed_out: false,
        }
    }

    /// Starts the drain; `true` the first time only (the caller then moves the queue pair to
    /// the error state and posts the marker).
    pub fn start(&mut self) -> bool {
        !std::mem::replace(&mut self.started, true)
    }

    /// The marker completed (with any status), or could not be posted (nothing will mark the
    /// end of the send queue then: there is nothing to wait for). Returns whether the queue
    /// pair is now drained.
    pub fn marker_done(&mut self) -> bool {
        if self.started {
            self.send_done = true;
        }
        self.is_drained()
    }

    /// Every receive posted to the queue pair's own receive queue has completed after it
    /// entered the error state (accepted before [`Drain::start`] too: a disconnect already
    /// moves the queue pair to the error state). Returns whether the queue pair is now
    /// drained.
    pub fn receives_done(&mut self) -> bool {
        self.recv_done = true;
        self.is_drained()
    }

    /// The watchdog fired. `true` if the drain was still waiting: the caller destroys the
    /// queue pair now, and everything still posted counts as completed (the queue pair is then
    /// drained). `false` if there was nothing to end.
    pub fn time_out(&mut self) -> bool {
        if !self.started || self.is_drained() {
            return false;
        }
        self.send_done = true;
        self.recv_done = true;
        self.timed_out = true;
        true
    }

    /// Whether the drain started.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Whether the send queue is over (marker done, or ended by the watchdog).
    pub fn send_done(&self) -> bool {
        self.send_done
    }

    /// Whether no completion will come any more for the queue pair.
    pub fn is_drained(&self) -> bool {
        self.started && self.send_done && self.recv_done
    }

    /// Whether the watchdog ended it.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }
}

/// The marker: a signaled zero-length RDMA WRITE (it moves no data; a queue pair in the error
/// state completes it with a flush error).
pub fn marker(wr_id: u64) -> SendWr {
    SendWr::rdma_write(wr_id, SgeList::new(), 0, 0)
}

/// Posts the marker on `qp`; `false` if there is no queue pair or the adapter refused it.
pub fn post_marker(qp: Option<&Qp>, wr_id: u64) -> bool {
    let wr = marker(wr_id);
    qp.is_some_and(|q| q.post_send([&wr]).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orders::for_each as for_each_order;

    #[derive(Clone, Copy, Debug)]
    enum Ev {
        Start,
        Marker,
        Recvs,
        Timeout,
    }

    #[test]
    fn drained_only_when_started_and_both_queues_are_over_in_every_order() {
        for own in [true, false] {
            for with_timeout in [false, true] {
                let mut evs = vec![Ev::Start, Ev::Marker, Ev::Recvs];
                if with_timeout {
                    evs.push(Ev::Timeout);
                }
                for_each_order(&evs, &mut |order| {
                    let mut d = Drain::new(own);
                    let (mut started, mut marker, mut recvs) = (false, false, !own);
                    let mut starts = 0;
                    let mut destroyed = 0;
                    for &e in order {
                        let was = d.is_drained();
                        match e {
                            Ev::Start => {
                                if d.start() {
                                    starts += 1;
                                }
                                started = true;
                            }
                            Ev::Marker => {
                                d.marker_done();
                                // A marker is only posted after the start; before, its
                                // completion cannot exist.
                                marker |= started;
                            }
                            Ev::Recvs => {
                                d.receives_done();
                                recvs = true;
                            }
                            Ev::Timeout => {
                                if d.time_out() {
                                    destroyed += 1;
                                    assert!(!was, "{order:?}: timed out after drained");
                                    marker = true;
                                    recvs = true;
                                }
                            }
                        }
                        assert_eq!(d.is_drained(), started && marker && recvs, "{order:?}");
                        assert!(!was || d.is_drained(), "{order:?}: drained is final");
                    }
                    assert_eq!(starts, 1);
                    assert!(destroyed <= 1);
                    assert!(!d.start(), "a second start is refused");
                    if !d.is_drained() {
                        // Only a marker that completed before the start (impossible on a
                        // real queue pair) leaves it waiting: the watchdog ends it.
                        assert!(d.time_out());
                        assert!(d.is_drained() && d.timed_out());
                    }
                });
            }
        }
    }

    #[test]
    fn a_shared_receive_queue_waits_for_the_marker_only() {
        let mut d = Drain::new(false);
        assert!(!d.is_drained(), "not started");
        assert!(d.start());
        assert!(!d.is_drained());
        assert!(d.marker_done());
        assert!(!d.time_out(), "nothing left to end");
        assert!(!d.timed_out());
    }

    #[test]
    fn own_receives_are_waited_for_and_the_watchdog_ends_a_lost_marker() {
        let mut d = Drain::new(true);
        d.start();
        assert!(!d.receives_done());
        assert!(d.time_out());
        assert!(d.is_drained() && d.send_done() && d.timed_out());
        assert!(!d.time_out(), "once");
    }

    #[test]
    fn the_marker_is_a_signaled_zero_length_rdma_write() {
        let m = marker(42);
        assert_eq!(m.wr_id, 42);
        assert!(m.signaled);
        assert!(m.sges.is_empty());
        assert!(matches!(m.op, fabric::WrOp::RdmaWrite { .. }));
        assert!(!post_marker(None, 1), "no queue pair, no marker");
    }
}
