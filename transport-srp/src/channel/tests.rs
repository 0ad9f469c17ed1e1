//! Channel state machine tests: every event order the reference allows, asserting the state
//! sequence and the actions; credit accounting including a misbehaving initiator.

use super::*;
use Action::*;
use ChannelState::*;
use rdma_plumbing::orders::for_each as for_each_order;

fn live(credits: u32) -> Channel {
    let mut ch = Channel::new(credits, false);
    ch.handle(Event::Established);
    ch
}

fn acts(o: &Output) -> Vec<Action> {
    o.actions.to_vec()
}

fn states(o: &Output) -> Vec<ChannelState> {
    o.entered.to_vec()
}

const DRAIN: [Action; 2] = [QpToError, PostSqMarker];

/// Delivers both marker completions and returns the combined output.
fn drain(ch: &mut Channel) -> Vec<Action> {
    let mut a = acts(&ch.handle(Event::SqMarkerDone { ok: false }));
    a.extend(acts(&ch.handle(Event::RecvsDrained)));
    a
}

#[test]
fn rtu_before_first_iu() {
    let mut ch = Channel::new(4, false);
    assert_eq!(ch.state(), Connecting);
    let o = ch.handle(Event::Established);
    assert_eq!(states(&o), [Live]);
    assert!(o.actions.is_empty());
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Process);
    assert!(ch.can_send());
}

#[test]
fn ius_before_rtu_are_queued_then_replayed() {
    let mut ch = Channel::new(4, false);
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Queue);
    assert_eq!(ch.on_iu(IuKind::TskMgmt), IuDisposition::Queue);
    assert_eq!(ch.queued(), 2);
    assert_eq!(ch.credits().outstanding(), 0);
    let o = ch.handle(Event::Established);
    assert_eq!(states(&o), [Live]);
    assert_eq!(acts(&o), [ReplayQueued]);
    assert_eq!(ch.queued(), 0);
    // The runtime replays them through on_iu; now they take credits.
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Process);
    assert_eq!(ch.on_iu(IuKind::TskMgmt), IuDisposition::Process);
    assert_eq!(ch.credits().outstanding(), 2);
    // A second RTU (COMM_EST then RTU) does nothing.
    assert!(ch.handle(Event::Established).is_empty());
}

#[test]
fn dreq_from_initiator_then_timewait() {
    let mut ch = live(4);
    let o = ch.handle(Event::Disconnected);
    assert_eq!(states(&o), [Disconnecting]);
    assert_eq!(acts(&o), [Disconnect]);
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Drop);
    let o = ch.handle(Event::TimewaitExit);
    assert_eq!(states(&o), [Draining]);
    assert_eq!(acts(&o), DRAIN);
    let o = ch.handle(Event::SqMarkerDone { ok: false });
    assert!(o.is_empty());
    let o = ch.handle(Event::RecvsDrained);
    assert_eq!(states(&o), [Disconnected]);
    assert_eq!(acts(&o), [ReleaseSession, FreeChannel]);
    assert!(ch.is_freed());
}

#[test]
fn dreq_from_target_and_drep() {
    // A new single-channel login of the same nexus terminates this channel.
    let mut ch = live(4);
    let o = ch.handle(Event::Close(CloseReason::Terminated));
    assert_eq!(states(&o), [Disconnecting]);
    assert_eq!(
        acts(&o),
        [SendTLogout(TLogoutReason::MultiChannelAction), Disconnect]
    );
    assert_eq!(ch.close_reason(), Some(CloseReason::Terminated));
    // RDMA CM reports the DREP as DISCONNECTED.
    let o = ch.handle(Event::Disconnected);
    assert_eq!(states(&o), [Draining]);
    assert_eq!(acts(&o), DRAIN);
    assert_eq!(drain(&mut ch), [ReleaseSession, FreeChannel]);
    assert_eq!(ch.state(), Disconnected);
    // TimeWait exit after everything is over: nothing.
    assert!(ch.handle(Event::TimewaitExit).is_empty());
}

#[test]
fn drep_never_comes_timewait_exit() {
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::Admin));
    let o = ch.handle(Event::TimewaitExit);
    assert_eq!(states(&o), [Draining]);
    assert_eq!(acts(&o), DRAIN);
    assert_eq!(drain(&mut ch), [ReleaseSession, FreeChannel]);
}

#[test]
fn no_cm_event_at_all_then_timer() {
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::Logout));
    let o = ch.handle(Event::DisconnectTimeout);
    assert_eq!(acts(&o), DRAIN);
    // The timer is meaningless in other states.
    let mut other = live(4);
    assert!(other.handle(Event::DisconnectTimeout).is_empty());
    assert_eq!(other.state(), Live);
}

#[test]
fn disconnect_failure_drains() {
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::Admin));
    assert_eq!(acts(&ch.handle(Event::DisconnectFailed)), DRAIN);
}

#[test]
fn close_during_connecting() {
    let mut ch = Channel::new(4, false);
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Queue);
    let o = ch.handle(Event::Close(CloseReason::PortDisabled));
    assert_eq!(states(&o), [Disconnecting, Draining]);
    assert_eq!(acts(&o), [DropQueued, QpToError, PostSqMarker]);
    // RTU arriving late changes nothing.
    assert!(ch.handle(Event::Established).is_empty());
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Drop);
    assert_eq!(drain(&mut ch), [ReleaseSession, FreeChannel]);
}

#[test]
fn dreq_during_connecting_drains() {
    let mut ch = Channel::new(4, false);
    let o = ch.handle(Event::Disconnected);
    assert_eq!(states(&o), [Disconnecting, Draining]);
    assert_eq!(acts(&o), DRAIN);
}

#[test]
fn reject_and_connect_error_during_connecting() {
    for ev in [
        Event::Rejected,
        Event::ConnectError,
        Event::TimewaitExit,
        Event::DeviceRemoval,
    ] {
        let mut ch = Channel::new(4, false);
        let o = ch.handle(ev);
        assert_eq!(states(&o), [Disconnecting, Draining], "{ev:?}");
        assert_eq!(acts(&o), DRAIN);
    }
}

#[test]
fn double_close_is_idempotent() {
    let mut ch = live(4);
    assert!(!ch.handle(Event::Close(CloseReason::Admin)).is_empty());
    assert!(ch.handle(Event::Close(CloseReason::Admin)).is_empty());
    assert!(ch.handle(Event::Close(CloseReason::Logout)).is_empty());
    assert_eq!(ch.close_reason(), Some(CloseReason::Admin));
    assert!(!ch.handle(Event::Disconnected).is_empty());
    assert!(ch.handle(Event::Disconnected).is_empty());
    assert!(ch.handle(Event::TimewaitExit).is_empty());
    assert!(
        ch.handle(Event::Close(CloseReason::PortDisabled))
            .is_empty()
    );
    assert!(ch.handle(Event::SqMarkerDone { ok: false }).is_empty());
    assert!(ch.handle(Event::SqMarkerDone { ok: false }).is_empty());
    assert_eq!(
        acts(&ch.handle(Event::RecvsDrained)),
        [ReleaseSession, FreeChannel]
    );
    assert!(ch.handle(Event::RecvsDrained).is_empty());
    assert!(ch.handle(Event::MarkerPostFailed).is_empty());
}

#[test]
fn marker_orders_and_flushes() {
    // Receives drained first, then the send marker (success status is possible too).
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::PortDisabled));
    assert!(ch.handle(Event::CompletionError).is_empty()); // flushed receives
    assert!(ch.handle(Event::RecvsDrained).is_empty());
    assert!(ch.handle(Event::CompletionError).is_empty()); // flushed sends
    assert_eq!(
        acts(&ch.handle(Event::SqMarkerDone { ok: true })),
        [ReleaseSession, FreeChannel]
    );
    // Markers completing before the close are not markers of this drain: ignored.
    let mut ch = live(4);
    assert!(ch.handle(Event::SqMarkerDone { ok: true }).is_empty());
    assert!(ch.handle(Event::RecvsDrained).is_empty());
    assert_eq!(ch.state(), Live);
}

#[test]
fn logout() {
    let mut ch = live(4);
    assert_eq!(ch.on_iu(IuKind::ILogout), IuDisposition::Process);
    let o = ch.handle(Event::Close(CloseReason::Logout));
    assert_eq!(acts(&o), [Disconnect]);
    assert_eq!(states(&o), [Disconnecting]);
}

#[test]
fn port_disable_and_subsystem_delete_drain_at_once() {
    for r in [
        CloseReason::PortDisabled,
        CloseReason::SubsystemDeleted,
        CloseReason::QpError,
    ] {
        let mut ch = live(4);
        let o = ch.handle(Event::Close(r));
        assert_eq!(states(&o), [Disconnecting, Draining]);
        assert_eq!(acts(&o), [Disconnect, QpToError, PostSqMarker]);
    }
    // Disabled while a relogin's disconnect is pending.
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::Terminated));
    assert_eq!(
        acts(&ch.handle(Event::Close(CloseReason::PortDisabled))),
        DRAIN
    );
    // Device removal: no disconnect on a vanishing device.
    let mut ch = live(4);
    let o = ch.handle(Event::Close(CloseReason::DeviceRemoval));
    assert_eq!(acts(&o), DRAIN);
    let mut ch = live(4);
    assert_eq!(acts(&ch.handle(Event::DeviceRemoval)), DRAIN);
}

#[test]
fn qp_error_while_live() {
    let mut ch = live(4);
    let o = ch.handle(Event::CompletionError);
    assert_eq!(acts(&o), [Disconnect, QpToError, PostSqMarker]);
    assert_eq!(ch.close_reason(), Some(CloseReason::QpError));
    let mut ch = Channel::new(4, false);
    assert_eq!(acts(&ch.handle(Event::CompletionError)), DRAIN);
}

#[test]
fn outstanding_commands_hold_the_session() {
    let mut ch = live(4);
    for _ in 0..3 {
        assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Process);
        ch.command_started();
    }
    // One completes normally.
    assert_eq!(ch.credits_mut().response_delta(), 1);
    assert!(ch.command_finished(true).is_empty());
    let o = ch.handle(Event::Disconnected);
    assert_eq!(acts(&o), [AbortOutstanding, Disconnect]);
    ch.handle(Event::TimewaitExit);
    let o = ch.handle(Event::SqMarkerDone { ok: false });
    assert!(o.is_empty());
    let o = ch.handle(Event::RecvsDrained);
    assert_eq!(states(&o), [Disconnected]);
    assert!(
        o.actions.is_empty(),
        "session released with commands running"
    );
    assert!(ch.command_finished(false).is_empty());
    assert_eq!(
        acts(&ch.command_finished(false)),
        [ReleaseSession, FreeChannel]
    );
    assert_eq!(ch.credits().owed(), 2);
    // Extra finishes do not release twice.
    assert!(ch.command_finished(false).is_empty());
}

#[test]
fn references() {
    let mut ch = live(4);
    ch.acquire();
    ch.acquire();
    ch.handle(Event::Close(CloseReason::PortDisabled));
    assert_eq!(drain(&mut ch), [ReleaseSession]);
    assert!(!ch.is_freed());
    assert!(ch.release().is_empty());
    assert_eq!(acts(&ch.release()), [FreeChannel]);
    assert!(ch.release().is_empty());
    // A release without an acquire cannot drop the session's own reference.
    let mut ch = live(4);
    assert!(ch.release().is_empty());
    ch.handle(Event::Close(CloseReason::PortDisabled));
    assert_eq!(drain(&mut ch), [ReleaseSession, FreeChannel]);
}

#[test]
fn srq_channel_has_no_receives_to_count() {
    let mut ch = Channel::new(4, true);
    ch.handle(Event::Established);
    let o = ch.handle(Event::Close(CloseReason::PortDisabled));
    assert_eq!(acts(&o), [Disconnect, QpToError, PostSqMarker]);
    assert_eq!(
        acts(&ch.handle(Event::SqMarkerDone { ok: false })),
        [ReleaseSession, FreeChannel]
    );
}

#[test]
fn marker_post_failure_counts_as_a_drained_send_queue() {
    let mut ch = live(4);
    ch.handle(Event::Close(CloseReason::PortDisabled));
    assert!(ch.handle(Event::MarkerPostFailed).is_empty());
    let o = ch.handle(Event::RecvsDrained);
    assert_eq!(states(&o), [Disconnected]);
    assert_eq!(acts(&o), [ReleaseSession, FreeChannel]);
}

#[test]
fn drain_timeout_destroys_the_queue_pair_and_ends_draining() {
    // Neither the marker nor the receives' flushes ever complete.
    let mut ch = live(4);
    ch.command_started();
    ch.handle(Event::Close(CloseReason::PortDisabled));
    assert_eq!(ch.state(), Draining);
    let o = ch.handle(Event::DrainTimeout);
    assert_eq!(states(&o), [Disconnected]);
    // A command still holds the session; its end releases it.
    assert_eq!(acts(&o), [DestroyQp]);
    assert_eq!(
        acts(&ch.command_finished(false)),
        [ReleaseSession, FreeChannel]
    );
    // Late completions and a second timeout change nothing.
    assert!(ch.handle(Event::SqMarkerDone { ok: false }).is_empty());
    assert!(ch.handle(Event::RecvsDrained).is_empty());
    assert!(ch.handle(Event::DrainTimeout).is_empty());
    // Outside DRAINING the drain timer means nothing.
    let mut ch = live(4);
    assert!(ch.handle(Event::DrainTimeout).is_empty());
    ch.handle(Event::Close(CloseReason::Logout));
    assert_eq!(ch.state(), Disconnecting);
    assert!(ch.handle(Event::DrainTimeout).is_empty());
    // The marker came, a receive's flush did not.
    ch.handle(Event::Disconnected);
    ch.handle(Event::SqMarkerDone { ok: false });
    let o = ch.handle(Event::DrainTimeout);
    assert_eq!(acts(&o), [DestroyQp, ReleaseSession, FreeChannel]);
}

#[test]
fn state_names() {
    let names: Vec<_> = [Connecting, Live, Disconnecting, Draining, Disconnected]
        .iter()
        .map(|s| s.name())
        .collect();
    assert_eq!(
        names,
        [
            "connecting",
            "live",
            "disconnecting",
            "draining",
            "disconnected"
        ]
    );
}

// ---- credits ----

#[test]
fn credit_flow() {
    let mut c = Credits::new(3);
    assert_eq!(c.available(), 3);
    c.consume().unwrap();
    c.consume().unwrap();
    c.consume().unwrap();
    assert_eq!(
        c.consume(),
        Err(Overrun {
            outstanding: 3,
            limit: 3
        })
    );
    assert_eq!(c.available(), 0);
    // One aborted: its credit rides on the next response.
    c.finished_without_response();
    assert_eq!(c.owed(), 1);
    assert_eq!(c.response_delta(), 2);
    assert_eq!(c.outstanding(), 1);
    assert_eq!(c.available(), 2);
    assert_eq!(c.response_delta(), 1);
    assert_eq!(c.outstanding(), 0);
    // Nothing outstanding: a stray response grants nothing.
    assert_eq!(c.response_delta(), 0);
    c.finished_without_response();
    assert_eq!(c.owed(), 0);
}

#[test]
fn cred_req_only_one_at_a_time() {
    let mut c = Credits::new(4);
    c.consume().unwrap();
    c.consume().unwrap();
    assert_eq!(c.take_cred_req(), None);
    c.finished_without_response();
    assert_eq!(c.take_cred_req(), Some(1));
    c.finished_without_response();
    assert_eq!(c.take_cred_req(), None, "a CRED_REQ is still outstanding");
    c.target_request_answered();
    assert_eq!(c.take_cred_req(), Some(1));
    assert_eq!(c.available(), 4);
}

#[test]
fn credits_carried_by_a_failed_spare_send_are_owed_again() {
    let mut c = Credits::new(4);
    for _ in 0..3 {
        c.consume().unwrap();
    }
    c.finished_without_response();
    c.finished_without_response();
    // The CRED_REQ carrying both could not be posted (or its SEND failed).
    assert_eq!(c.take_cred_req(), Some(2));
    c.spare_not_sent(2, true);
    assert_eq!((c.owed(), c.outstanding(), c.available()), (2, 3, 1));
    // CRED_REQ is not disabled: the next one carries them.
    assert_eq!(c.take_cred_req(), Some(2));
    assert_eq!(c.take_cred_req(), None, "one CRED_REQ at a time");
    c.target_request_answered();
    // The BUSY answer to an overrun carried an owed credit and failed: owed again, and it
    // does not touch an outstanding CRED_REQ.
    c.finished_without_response();
    assert_eq!(c.take_cred_req(), Some(1));
    c.consume().unwrap();
    c.consume().unwrap();
    c.consume().unwrap();
    c.consume().unwrap();
    c.finished_without_response();
    assert_eq!(c.overrun_delta(), 1);
    c.spare_not_sent(1, false);
    assert_eq!((c.owed(), c.outstanding()), (1, 4));
    assert_eq!(c.take_cred_req(), None, "the CRED_REQ is still outstanding");
    // Never more than the grant.
    c.spare_not_sent(9, false);
    assert_eq!((c.owed(), c.outstanding()), (4, 4));
}

#[test]
fn misbehaving_initiator_overruns_credits() {
    // SCST's test: the initiator sends far more than granted.
    let mut ch = live(8);
    let mut processed = 0;
    let mut overrun = 0;
    let mut done = 0;
    for i in 0..1000 {
        match ch.on_iu(if i % 7 == 0 {
            IuKind::TskMgmt
        } else {
            IuKind::Cmd
        }) {
            IuDisposition::Process => {
                processed += 1;
                ch.command_started();
            }
            IuDisposition::Overrun => {
                overrun += 1;
                // The BUSY answer returns nothing it did not take.
                assert_eq!(ch.credits_mut().overrun_delta(), 0);
            }
            d => panic!("{d:?}"),
        }
        assert!(ch.credits().outstanding() <= 8);
        // Now and then a command completes.
        if i % 10 == 0 && ch.commands() > 0 {
            let d = ch.credits_mut().response_delta();
            assert_eq!(d, 1);
            ch.command_finished(true);
            done += 1;
        }
    }
    assert_eq!(processed + overrun, 1000);
    // Exactly the granted credits plus those given back were used.
    assert_eq!(processed, 8 + done);
    assert_eq!(ch.credits().outstanding(), ch.commands());
    // The channel still tears down normally.
    ch.handle(Event::Close(CloseReason::PortDisabled));
    drain(&mut ch);
    while ch.commands() > 0 {
        ch.command_finished(false);
    }
    assert!(ch.is_freed());
}

#[test]
fn initiator_responses_take_no_credit() {
    let mut ch = live(1);
    ch.credits_mut().consume().unwrap();
    ch.credits_mut().finished_without_response();
    assert_eq!(ch.credits_mut().take_cred_req(), Some(1));
    assert_eq!(ch.on_iu(IuKind::CredRsp), IuDisposition::Drop);
    assert_eq!(ch.on_iu(IuKind::AerRsp), IuDisposition::Drop);
    assert_eq!(ch.on_iu(IuKind::Other), IuDisposition::Drop);
    assert_eq!(ch.credits().outstanding(), 0);
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Process);
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Overrun);
}

// ---- every order ----

/// Steps a runtime can take; the model only takes those the reference allows at that point
/// (a marker completes only after it was posted, a command finishes only after it started).
#[derive(Clone, Copy, Debug)]
enum Step {
    Ev(Event),
    Iu,
    Finish,
    SqDone,
    RqDone,
}

#[derive(Default)]
struct Model {
    log: Vec<Action>,
    states: Vec<ChannelState>,
    queued: u32,
    running: u32,
    sq_posted: bool,
    sq_done: bool,
    rq_done: bool,
    aborted: bool,
}

impl Model {
    fn absorb(&mut self, ch: &mut Channel, o: Output) {
        let before = self.states.last().copied().unwrap_or(Connecting);
        let mut prev = before;
        for s in &o.entered {
            assert!(*s > prev, "state went {prev:?} -> {s:?}");
            prev = *s;
        }
        self.states.extend(o.entered.iter().copied());
        for a in o.actions.iter().copied() {
            self.log.push(a);
            match a {
                ReplayQueued => {
                    assert_eq!(o.entered.as_slice(), [Live]);
                    for _ in 0..std::mem::take(&mut self.queued) {
                        self.iu(ch);
                    }
                }
                DropQueued => self.queued = 0,
                PostSqMarker => self.sq_posted = true,
                AbortOutstanding => self.aborted = true,
                _ => {}
            }
        }
    }

    fn iu(&mut self, ch: &mut Channel) {
        let closing = ch.state() >= Disconnecting;
        match ch.on_iu(IuKind::Cmd) {
            IuDisposition::Process => {
                assert!(!closing);
                ch.command_started();
                self.running += 1;
            }
            IuDisposition::Queue => self.queued += 1,
            IuDisposition::Drop => assert!(ch.state() != Live),
            IuDisposition::Overrun => panic!("no overrun expected"),
        }
    }

    fn step(&mut self, ch: &mut Channel, s: Step) {
        let o = match s {
            Step::Ev(e) => ch.handle(e),
            Step::Iu => {
                self.iu(ch);
                return;
            }
            Step::Finish => {
                if self.running == 0 {
                    return;
                }
                self.running -= 1;
                let responded = !self.aborted && ch.can_send();
                if responded {
                    ch.credits_mut().response_delta();
                }
                ch.command_finished(responded)
            }
            Step::SqDone if self.sq_posted && !self.sq_done => {
                self.sq_done = true;
                ch.handle(Event::SqMarkerDone { ok: false })
            }
            Step::RqDone if self.sq_posted && !self.rq_done => {
                self.rq_done = true;
                ch.handle(Event::RecvsDrained)
            }
            Step::SqDone | Step::RqDone => return,
        };
        self.absorb(ch, o);
    }

    fn count(&self, a: Action) -> usize {
        self.log.iter().filter(|x| **x == a).count()
    }
}

/// Runs one order, then lets the world settle the way the CM and the HCA eventually do
/// (TimeWait exit, marker completions, bdev completions), and checks the invariants.
fn run_order(order: &[Step]) {
    let mut ch = Channel::new(16, false);
    let mut m = Model::default();
    for &s in order {
        m.step(&mut ch, s);
    }
    // Settle.
    m.step(&mut ch, Step::Ev(Event::TimewaitExit));
    for _ in 0..3 {
        m.step(&mut ch, Step::SqDone);
        m.step(&mut ch, Step::RqDone);
        while m.running > 0 {
            m.step(&mut ch, Step::Finish);
        }
    }
    assert_eq!(ch.state(), Disconnected, "{order:?}");
    assert!(ch.is_freed(), "{order:?}");
    assert_eq!(m.count(ReleaseSession), 1, "{order:?}");
    assert_eq!(m.count(FreeChannel), 1);
    assert_eq!(m.log.last(), Some(&FreeChannel));
    assert_eq!(m.count(QpToError), 1);
    assert_eq!(m.count(PostSqMarker), 1);
    assert!(m.count(Disconnect) <= 1);
    assert!(m.count(ReplayQueued) <= 1);
    assert!(m.count(AbortOutstanding) <= 1);
    assert!(m.count(SendTLogout(TLogoutReason::MultiChannelAction)) <= 1);
    // QP to error strictly before the markers, markers before the release.
    let pos = |a| m.log.iter().position(|x| *x == a).unwrap();
    assert!(pos(QpToError) < pos(PostSqMarker));
    assert!(pos(PostSqMarker) < pos(ReleaseSession));
    if let Some(d) = m.log.iter().position(|x| *x == Disconnect) {
        assert!(d < pos(QpToError), "{order:?}");
    }
    assert_eq!(ch.commands(), 0);
    assert_eq!(ch.queued(), 0);
}

#[test]
fn every_order_of_connect_io_and_initiator_disconnect() {
    let steps = [
        Step::Ev(Event::Established),
        Step::Iu,
        Step::Iu,
        Step::Finish,
        Step::Ev(Event::Disconnected),
        Step::SqDone,
        Step::RqDone,
        Step::Ev(Event::Disconnected),
    ];
    let mut n = 0;
    for_each_order(&steps, &mut |o| {
        run_order(o);
        n += 1;
    });
    assert_eq!(n, 40320);
}

#[test]
fn every_order_of_target_close_paths() {
    for close in [
        CloseReason::Terminated,
        CloseReason::Logout,
        CloseReason::PortDisabled,
        CloseReason::SubsystemDeleted,
        CloseReason::Admin,
    ] {
        let steps = [
            Step::Ev(Event::Established),
            Step::Iu,
            Step::Ev(Event::Close(close)),
            Step::Ev(Event::Disconnected),
            Step::Finish,
            Step::SqDone,
            Step::Ev(Event::CompletionError),
        ];
        for_each_order(&steps, &mut |o| run_order(o));
    }
}

#[test]
fn every_order_with_cm_failures() {
    let steps = [
        Step::Iu,
        Step::Ev(Event::Established),
        Step::Ev(Event::Rejected),
        Step::Ev(Event::DisconnectTimeout),
        Step::Ev(Event::Close(CloseReason::Terminated)),
        Step::RqDone,
        Step::Ev(Event::DeviceRemoval),
    ];
    for_each_order(&steps, &mut |o| run_order(o));
}
