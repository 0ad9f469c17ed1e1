use super::*;
use rdma_plumbing::orders::for_each as for_each_order;

use Action as A;

#[test]
fn a_close_starts_the_teardown_once_in_order() {
    let mut l = Lifecycle::new(false);
    l.on(Event::RequestStarted);
    let out = l.on(Event::Close);
    assert_eq!(
        out.as_slice(),
        [
            A::BeginClose,
            A::FlushBatches,
            A::Disconnect,
            A::ToError,
            A::PostMarker,
            A::CloseRequests,
            A::ArmWatchdog,
        ]
    );
    assert_eq!(l.state(), State::Closing);
    assert!(l.on(Event::Close).is_empty(), "a second close does nothing");
    assert_eq!(l.on(Event::MarkerDone).as_slice(), [A::ReleaseLostSends]);
    assert_eq!(l.on(Event::RequestFreed).as_slice(), [A::Destroy]);
    assert_eq!(l.state(), State::Destroyed);
    assert!(l.on(Event::Close).is_empty());
    assert!(l.on(Event::MarkerDone).is_empty());
}

#[test]
fn a_live_queue_pair_counts_and_never_destroys() {
    let mut l = Lifecycle::new(true);
    for e in [
        Event::RequestStarted,
        Event::ReceivesPosted(4),
        Event::ReceiveDone,
        Event::RequestFreed,
        Event::MarkerDone,
        Event::MarkerNotPosted,
        Event::DrainTimeout,
    ] {
        assert!(l.on(e).is_empty(), "{e:?}");
    }
    assert_eq!(l.state(), State::Live);
    assert_eq!((l.requests(), l.receives()), (0, 3));
}

#[test]
fn own_receives_must_flush_before_the_destroy() {
    let mut l = Lifecycle::new(true);
    l.on(Event::ReceivesPosted(2));
    l.on(Event::Close);
    assert!(l.on(Event::MarkerDone).as_slice() == [A::ReleaseLostSends]);
    assert!(l.on(Event::ReceiveDone).is_empty());
    assert_eq!(l.on(Event::ReceiveDone).as_slice(), [A::Destroy]);
}

#[test]
fn a_marker_not_posted_does_not_release_requests_still_out() {
    let mut l = Lifecycle::new(false);
    l.on(Event::RequestStarted);
    l.on(Event::Close);
    assert!(l.on(Event::MarkerNotPosted).is_empty());
    assert!(l.drain().is_drained());
    assert!(
        l.on(Event::DrainTimeout).is_empty(),
        "drained: nothing to end"
    );
    assert_eq!(l.on(Event::RequestFreed).as_slice(), [A::Destroy]);
}

#[test]
fn the_watchdog_ends_a_drain_whose_marker_never_completes() {
    let mut l = Lifecycle::new(true);
    l.on(Event::ReceivesPosted(3));
    l.on(Event::RequestStarted);
    l.on(Event::Close);
    assert_eq!(
        l.on(Event::DrainTimeout).as_slice(),
        [A::DestroyQp, A::ReleaseLostSends]
    );
    assert_eq!(l.receives(), 0, "what was posted counts as completed");
    assert!(
        l.on(Event::MarkerDone).is_empty(),
        "a late marker does nothing"
    );
    assert!(l.on(Event::DrainTimeout).is_empty(), "once");
    assert_eq!(l.on(Event::RequestFreed).as_slice(), [A::Destroy]);
}

// ---- every order ----

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A close request (CM disconnect, keep-alive, completion error, exec, shutdown…).
    Close,
    /// The marker completes (only once posted).
    Marker,
    /// One of the two outstanding requests is freed (its completion or bdev I/O came back,
    /// or the close freed it).
    Free,
    /// One of the two own receives flushes.
    Recv,
    /// The watchdog.
    Timeout,
}

#[derive(Default)]
struct World {
    log: Vec<Action>,
    requests: u32,
    receives: u32,
    marker_posted: bool,
    marker_done: bool,
    closed: bool,
    qp_destroyed: bool,
}

impl World {
    fn absorb(&mut self, out: Actions) {
        for a in out {
            assert!(
                !self.log.contains(&A::Destroy),
                "{a:?} after the queue pair was destroyed"
            );
            self.log.push(a);
            match a {
                A::PostMarker => self.marker_posted = true,
                A::DestroyQp => {
                    self.qp_destroyed = true;
                    self.receives = 0;
                }
                A::Destroy => {
                    assert_eq!(self.requests, 0, "destroyed with requests out");
                    assert!(
                        self.receives == 0 || self.qp_destroyed,
                        "destroyed with receives posted"
                    );
                    assert!(
                        self.marker_done || self.qp_destroyed,
                        "destroyed before the send queue was over"
                    );
                }
                _ => {}
            }
        }
    }

    fn step(&mut self, l: &mut Lifecycle, e: Ev) {
        let out = match e {
            Ev::Close => {
                self.closed = true;
                l.on(Event::Close)
            }
            Ev::Marker if self.marker_posted && !self.marker_done && !self.qp_destroyed => {
                self.marker_done = true;
                l.on(Event::MarkerDone)
            }
            Ev::Free if self.requests > 0 => {
                self.requests -= 1;
                l.on(Event::RequestFreed)
            }
            Ev::Recv if self.receives > 0 && self.closed => {
                self.receives -= 1;
                l.on(Event::ReceiveDone)
            }
            Ev::Timeout if self.closed => l.on(Event::DrainTimeout),
            _ => return,
        };
        self.absorb(out);
    }

    fn count(&self, a: Action) -> usize {
        self.log.iter().filter(|x| **x == a).count()
    }
}

fn run(order: &[Ev], own: bool) {
    let mut l = Lifecycle::new(own);
    let mut w = World::default();
    for _ in 0..2 {
        l.on(Event::RequestStarted);
        w.requests += 1;
    }
    if own {
        l.on(Event::ReceivesPosted(2));
        w.receives = 2;
    }
    for &e in order {
        w.step(&mut l, e);
    }
    // The world settles: a close eventually comes, the marker completes or the watchdog
    // fires, requests come back, receives flush.
    for e in [
        Ev::Close,
        Ev::Free,
        Ev::Free,
        Ev::Recv,
        Ev::Recv,
        Ev::Marker,
        Ev::Timeout,
    ] {
        w.step(&mut l, e);
    }
    assert_eq!(l.state(), State::Destroyed, "{order:?} own={own}");
    assert_eq!(w.count(A::Destroy), 1, "{order:?}");
    assert_eq!(w.log.last(), Some(&A::Destroy), "{order:?}");
    for a in [
        A::BeginClose,
        A::Disconnect,
        A::ToError,
        A::PostMarker,
        A::CloseRequests,
    ] {
        assert_eq!(w.count(a), 1, "{a:?} {order:?}");
    }
    assert!(w.count(A::DestroyQp) <= 1);
    assert!(w.count(A::ReleaseLostSends) <= 1, "{order:?}");
    let pos = |a| w.log.iter().position(|x| *x == a).unwrap();
    assert!(
        pos(A::FlushBatches) < pos(A::ToError),
        "batches go before the error state"
    );
    assert!(pos(A::ToError) < pos(A::PostMarker));
    assert!(pos(A::PostMarker) < pos(A::Destroy));
}

#[test]
fn every_order_of_teardown_events() {
    let steps = [
        Ev::Close,
        Ev::Marker,
        Ev::Free,
        Ev::Free,
        Ev::Recv,
        Ev::Recv,
        Ev::Close,
        Ev::Timeout,
    ];
    let mut n = 0;
    for own in [false, true] {
        for_each_order(&steps, &mut |o| {
            run(o, own);
            n += 1;
        });
    }
    assert_eq!(n, 2 * 40320);
}
