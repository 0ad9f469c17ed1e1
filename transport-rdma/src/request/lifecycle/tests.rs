use super::*;
use rdma_plumbing::orders::for_each as for_each_order;

use Event as E;
use State as S;

const ALL_STATES: [State; 15] = [
    S::Free,
    S::Ready,
    S::NeedBuffer,
    S::H2cPending,
    S::H2c,
    S::Executing,
    S::IoDone,
    S::Queued,
    S::Parked,
    S::Busy,
    S::Retrying,
    S::Responding,
    S::C2hPending,
    S::SendPending,
    S::Completing,
];

fn feed(l: &mut Lifecycle, evs: &[Event]) -> Vec<Act> {
    evs.iter()
        .map(|&e| l.on(e).unwrap_or_else(|i| panic!("{i:?} after {evs:?}")))
        .collect()
}

#[test]
fn a_read_without_data_in_the_capsule_goes_through_every_step() {
    // A keyed read: buffers, execute, bdev, finish, response with data, SEND.
    let mut l = Lifecycle::default();
    let acts = feed(
        &mut l,
        &[
            E::Start(Start::NeedData),
            E::Buffers(Fetch::Execute),
            E::Exec(Exec::Submitted),
            E::IoBack,
            E::Exec(Exec::Complete { writes: 1 }),
            E::Posted,
            E::SendDone,
        ],
    );
    assert_eq!(
        acts,
        [
            Act::TakeBuffers,
            Act::Execute,
            Act::Wait,
            Act::FinishIo,
            Act::Enqueue(WaitQueue::Writes),
            Act::Wait,
            Act::Free,
        ]
    );
    assert!(l.is_free());
}

#[test]
fn a_read_whose_buffers_were_taken_on_arrival_takes_six_transitions() {
    // The driver took the buffers as the command arrived: it starts with them, and the exec
    // layer's answer comes with the response planned.
    let mut l = Lifecycle::default();
    let mut states = Vec::new();
    let mut acts = Vec::new();
    for e in [
        E::Start(Start::Fetched(Fetch::Execute)),
        E::Exec(Exec::Submitted),
        E::IoBack,
        E::Exec(Exec::Complete { writes: 1 }),
        E::Posted,
        E::SendDone,
    ] {
        acts.push(l.on(e).unwrap());
        states.push(l.state());
    }
    assert_eq!(
        acts,
        [
            Act::Execute,
            Act::Wait,
            Act::FinishIo,
            Act::Enqueue(WaitQueue::Writes),
            Act::Wait,
            Act::Free,
        ]
    );
    assert_eq!(
        states,
        [
            S::Ready,
            S::Executing,
            S::IoDone,
            S::C2hPending,
            S::Completing,
            S::Free
        ]
    );
    // A write's buffers taken on arrival: its READs are planned as from `NeedBuffer`.
    let mut w = Lifecycle::default();
    assert_eq!(
        w.on(E::Start(Start::Fetched(Fetch::Reads(2)))),
        Ok(Act::Enqueue(WaitQueue::Reads))
    );
    assert_eq!((w.state(), w.reads_left()), (S::H2cPending, 2));
    let mut u = Lifecycle::default();
    assert_eq!(
        u.on(E::Start(Start::Fetched(Fetch::Unplannable))),
        Ok(Act::PlanResponse)
    );
    assert_eq!(u.state(), S::Responding);
}

#[test]
fn a_keyed_write_fetches_its_data_in_rounds_before_executing() {
    let mut l = Lifecycle::default();
    feed(
        &mut l,
        &[E::Start(Start::NeedData), E::Buffers(Fetch::Reads(3))],
    );
    assert_eq!(l.state(), S::H2cPending);
    assert_eq!(l.reads_left(), 3);
    // Two READs fit the credits now, the third later; completions interleave.
    assert_eq!(l.on(E::ReadsPosted(2)), Ok(Act::Wait));
    assert_eq!(l.reads_posted(), 2);
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Wait));
    assert_eq!(l.on(E::ReadsPosted(1)), Ok(Act::Wait));
    assert_eq!(l.state(), S::H2c);
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Wait));
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Execute));
    assert_eq!(l.state(), S::Ready);
    // More READs than planned, or a completion without a posted READ, are refused.
    let mut m = Lifecycle::default();
    feed(
        &mut m,
        &[E::Start(Start::NeedData), E::Buffers(Fetch::Reads(1))],
    );
    assert!(m.on(E::ReadsPosted(2)).is_err());
    assert!(m.on(E::ReadDone { ok: true }).is_err());
    assert!(m.on(E::ReadsPosted(0)).is_err());
}

#[test]
fn a_failed_read_frees_the_request_without_executing() {
    let mut l = Lifecycle::default();
    feed(
        &mut l,
        &[
            E::Start(Start::NeedData),
            E::Buffers(Fetch::Reads(2)),
            E::ReadsPosted(2),
            E::ReadDone { ok: false },
        ],
    );
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Free));
    assert!(l.is_free());
}

#[test]
fn exec_outcomes_and_their_waits() {
    for (e, state, act) in [
        (
            Exec::Complete { writes: 0 },
            S::SendPending,
            Act::Enqueue(WaitQueue::Sends),
        ),
        (
            Exec::Complete { writes: 2 },
            S::C2hPending,
            Act::Enqueue(WaitQueue::Writes),
        ),
        (Exec::Submitted, S::Executing, Act::Wait),
        (Exec::Queued, S::Queued, Act::Wait),
        (Exec::Parked, S::Parked, Act::Enqueue(WaitQueue::Parked)),
        (Exec::Busy, S::Busy, Act::Enqueue(WaitQueue::BdevRetry)),
    ] {
        let mut l = Lifecycle::default();
        l.on(E::Start(Start::Execute)).unwrap();
        assert_eq!(l.on(E::Exec(e)), Ok(act));
        assert_eq!(l.state(), state);
    }
    let mut l = Lifecycle::default();
    let acts = feed(
        &mut l,
        &[
            E::Start(Start::Execute),
            E::Exec(Exec::Busy),
            E::Retry,
            E::Exec(Exec::Queued),
            E::Resumed,
            E::Exec(Exec::Parked),
            E::AerDone,
            E::Planned { writes: 0 },
            E::Posted,
        ],
    );
    assert_eq!(
        acts,
        [
            Act::Execute,
            Act::Enqueue(WaitQueue::BdevRetry),
            Act::Resubmit,
            Act::Wait,
            Act::Execute,
            Act::Enqueue(WaitQueue::Parked),
            Act::PlanResponse,
            Act::Enqueue(WaitQueue::Sends),
            Act::Wait,
        ]
    );
    assert_eq!(l.state(), S::Completing);
}

#[test]
fn refusals_and_unplannable_transfers_respond_at_once() {
    let mut l = Lifecycle::default();
    assert_eq!(l.on(E::Start(Start::Respond)), Ok(Act::PlanResponse));
    let mut l = Lifecycle::default();
    feed(&mut l, &[E::Start(Start::NeedData)]);
    assert_eq!(l.on(E::Buffers(Fetch::Unplannable)), Ok(Act::PlanResponse));
    // Zero READs to post: nothing to fetch.
    let mut l = Lifecycle::default();
    feed(&mut l, &[E::Start(Start::NeedData)]);
    assert_eq!(l.on(E::Buffers(Fetch::Reads(0))), Ok(Act::Execute));
}

/// A request brought to `state` by the shortest path, with `reads` READs planned and
/// `posted` of them posted for the READ states.
fn at(state: State) -> Lifecycle {
    let mut l = Lifecycle::default();
    let path: &[Event] = match state {
        S::Free => &[],
        S::Ready => &[E::Start(Start::Execute)],
        S::NeedBuffer => &[E::Start(Start::NeedData)],
        S::H2cPending => &[
            E::Start(Start::NeedData),
            E::Buffers(Fetch::Reads(3)),
            E::ReadsPosted(1),
        ],
        S::H2c => &[
            E::Start(Start::NeedData),
            E::Buffers(Fetch::Reads(2)),
            E::ReadsPosted(2),
        ],
        S::Executing => &[E::Start(Start::Execute), E::Exec(Exec::Submitted)],
        S::IoDone => &[
            E::Start(Start::Execute),
            E::Exec(Exec::Submitted),
            E::IoBack,
        ],
        S::Queued => &[E::Start(Start::Execute), E::Exec(Exec::Queued)],
        S::Parked => &[E::Start(Start::Execute), E::Exec(Exec::Parked)],
        S::Busy => &[E::Start(Start::Execute), E::Exec(Exec::Busy)],
        S::Retrying => &[E::Start(Start::Execute), E::Exec(Exec::Busy), E::Retry],
        S::Responding => &[E::Start(Start::Respond)],
        S::C2hPending => &[E::Start(Start::Respond), E::Planned { writes: 2 }],
        S::SendPending => &[E::Start(Start::Respond), E::Planned { writes: 0 }],
        S::Completing => &[
            E::Start(Start::Respond),
            E::Planned { writes: 0 },
            E::Posted,
        ],
    };
    feed(&mut l, path);
    assert_eq!(l.state(), state);
    l
}

#[test]
fn closing_frees_what_waits_and_keeps_what_is_held() {
    for s in ALL_STATES {
        let mut l = at(s);
        let act = l.on(E::Close).unwrap();
        let held = matches!(
            s,
            S::H2c
                | S::H2cPending
                | S::Executing
                | S::Completing
                | S::Ready
                | S::IoDone
                | S::Retrying
                | S::Responding
        );
        match s {
            S::Free => assert_eq!((act, l.is_closed()), (Act::Wait, false)),
            S::NeedBuffer | S::C2hPending | S::SendPending | S::Busy | S::Parked => {
                assert!(
                    matches!(act, Act::Leave { free: true, .. }),
                    "{s:?}: {act:?}"
                );
                assert!(l.is_free());
            }
            S::Queued => assert_eq!(act, Act::Free),
            S::H2cPending => {
                // One of three READs posted: it is waited for, the rest never go.
                assert_eq!(
                    act,
                    Act::Leave {
                        queue: WaitQueue::Reads,
                        free: false
                    }
                );
                assert_eq!(l.state(), S::H2c);
                assert_eq!(l.reads_left(), 0);
                assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Free));
            }
            _ => {
                assert!(held, "{s:?}");
                assert_eq!(act, Act::Wait, "{s:?}");
                assert_eq!(l.state(), s);
                assert!(l.is_closed());
            }
        }
    }
}

#[test]
fn a_closed_request_never_executes_or_responds_again() {
    // Its READs complete successfully after the close: freed, not executed.
    let mut l = at(S::H2c);
    l.on(E::Close).unwrap();
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Wait));
    assert_eq!(l.on(E::ReadDone { ok: true }), Ok(Act::Free));
    // Its bdev I/O comes back: freed, not finished.
    let mut l = at(S::Executing);
    l.on(E::Close).unwrap();
    assert_eq!(l.on(E::IoBack), Ok(Act::Free));
    // The exec layer answers after a close: freed, or its I/O waited for.
    for (e, act, state) in [
        (Exec::Complete { writes: 1 }, Act::Free, S::Free),
        (Exec::Busy, Act::Free, S::Free),
        (Exec::Submitted, Act::Wait, S::Executing),
    ] {
        let mut l = at(S::Ready);
        l.on(E::Close).unwrap();
        assert_eq!(l.on(E::Exec(e)), Ok(act));
        assert_eq!(l.state(), state);
    }
}

#[test]
fn the_drain_marker_frees_requests_whose_send_completions_were_lost() {
    let mut l = at(S::Completing);
    assert_eq!(l.on(E::SendsOver), Ok(Act::Free));
    let mut l = at(S::H2c);
    l.on(E::ReadDone { ok: false }).unwrap();
    assert_eq!(l.on(E::SendsOver), Ok(Act::Free), "one READ lost");
    for s in [S::Executing, S::Queued, S::Free, S::NeedBuffer] {
        let mut l = at(s);
        assert_eq!(l.on(E::SendsOver), Ok(Act::Wait), "{s:?}");
        assert_eq!(l.state(), s);
    }
}

#[test]
fn every_state_refuses_what_it_cannot_take() {
    // A stale completion or a bug must be an error, not a silent state change.
    let events = [
        E::Start(Start::Execute),
        E::Buffers(Fetch::Execute),
        E::ReadsPosted(1),
        E::ReadDone { ok: true },
        E::Exec(Exec::Complete { writes: 0 }),
        E::IoBack,
        E::Resumed,
        E::Retry,
        E::AerDone,
        E::Planned { writes: 0 },
        E::Posted,
        E::SendDone,
    ];
    let accepts = |s: State, e: Event| -> bool {
        matches!(
            (s, e),
            (S::Free, E::Start(_))
                | (S::NeedBuffer, E::Buffers(_))
                | (S::H2cPending, E::ReadsPosted(_))
                | (S::H2cPending | S::H2c, E::ReadDone { .. })
                | (S::Ready | S::IoDone | S::Retrying, E::Exec(_))
                | (S::Executing, E::IoBack)
                | (S::Queued, E::Resumed)
                | (S::Busy, E::Retry)
                | (S::Parked, E::AerDone)
                | (S::Responding, E::Planned { .. })
                | (S::C2hPending | S::SendPending, E::Posted)
                | (S::Completing, E::SendDone)
        )
    };
    for s in ALL_STATES {
        for e in events {
            let mut l = at(s);
            let before = l;
            let r = l.on(e);
            if accepts(s, e) {
                assert!(r.is_ok(), "{s:?} refused {e:?}");
            } else {
                assert_eq!(r, Err(Invalid { state: s, event: e }), "{s:?} took {e:?}");
                assert_eq!(l, before, "{s:?}: a refused event changes nothing");
            }
        }
    }
}

// ---- every order of a closing queue pair's events around one request ----

#[derive(Clone, Copy, Debug)]
enum Ev {
    Close,
    /// The adapter completes one posted READ (a flush after the close).
    ReadDone,
    /// The bdev I/O comes back.
    IoBack,
    /// The response SEND completes.
    SendDone,
    /// The drain marker completes (only after the close).
    Marker,
}

/// Drives a request from `start` through `order`, feeding each event only when the world
/// could produce it (a READ completes only if posted and not yet completed; the marker only
/// after the close; the bdev I/O only while it is out; the SEND only once posted), and
/// answers the driver's own steps the way the exec layer would (`Complete` after execution).
/// Checks: freed exactly once, never executed after the close, never freed while a READ,
/// the bdev I/O or the SEND is still out, unless the marker said the sends were over.
fn run(start: State, order: &[Ev]) -> (Lifecycle, u32) {
    let mut l = at(start);
    let mut reads_out = match start {
        S::H2c => 2,
        S::H2cPending => 1,
        _ => 0,
    };
    let mut io_out = start == S::Executing;
    let mut send_out = start == S::Completing;
    let (mut closed, mut freed, mut sends_over) = (false, 0u32, false);
    let mut pending = order.to_vec();
    let mut guard = 0;
    while let Some(ev) = pending.first().copied() {
        guard += 1;
        assert!(guard < 100, "{start:?} {order:?}: no progress");
        let event = match ev {
            Ev::Close => {
                closed = true;
                E::Close
            }
            Ev::ReadDone if reads_out > 0 => {
                reads_out -= 1;
                E::ReadDone { ok: !closed }
            }
            Ev::IoBack if io_out => {
                io_out = false;
                E::IoBack
            }
            Ev::SendDone if send_out => {
                send_out = false;
                E::SendDone
            }
            Ev::Marker if closed => {
                sends_over = true;
                reads_out = 0;
                send_out = false;
                E::SendsOver
            }
            _ => {
                pending.remove(0);
                continue;
            }
        };
        pending.remove(0);
        let mut act = l
            .on(event)
            .unwrap_or_else(|i| panic!("{start:?} {order:?}: {i:?}"));
        // The driver's own steps.
        loop {
            act = match act {
                Act::Free | Act::Leave { free: true, .. } => {
                    freed += 1;
                    assert!(
                        sends_over || (reads_out == 0 && !send_out),
                        "{start:?} {order:?}: freed with work out"
                    );
                    assert!(!io_out, "{start:?} {order:?}: freed with its bdev I/O out");
                    break;
                }
                Act::Execute | Act::FinishIo | Act::Resubmit => {
                    assert!(!closed, "{start:?} {order:?}: ran after the close");
                    l.on(E::Exec(Exec::Complete { writes: 0 })).unwrap()
                }
                Act::PlanResponse => {
                    assert!(!closed, "{start:?} {order:?}: responded after the close");
                    l.on(E::Planned { writes: 0 }).unwrap()
                }
                Act::Enqueue(WaitQueue::Sends) => {
                    // Room at once: posted.
                    send_out = true;
                    l.on(E::Posted).unwrap()
                }
                Act::Wait | Act::Leave { free: false, .. } | Act::Enqueue(_) | Act::TakeBuffers => {
                    break;
                }
            };
        }
        if l.is_free() {
            break;
        }
    }
    // The world settles: what is out comes back (flushed).
    if !l.is_free() {
        assert!(
            closed,
            "{start:?} {order:?}: {l:?} not done without a close"
        );
    }
    assert!(freed <= 1, "{start:?} {order:?}: freed {freed} times");
    (l, freed)
}

#[test]
fn every_order_of_close_completions_and_marker() {
    let mut n = 0;
    for start in [
        S::H2c,
        S::H2cPending,
        S::Executing,
        S::Completing,
        S::Queued,
        S::Busy,
    ] {
        for_each_order(
            &[
                Ev::Close,
                Ev::ReadDone,
                Ev::ReadDone,
                Ev::IoBack,
                Ev::SendDone,
                Ev::Marker,
            ],
            &mut |o| {
                run(start, o);
                n += 1;
            },
        );
    }
    assert_eq!(n, 6 * 720);
}

#[test]
fn every_order_ends_freed_once_the_world_settles() {
    // After any order, the close and the marker (and what is still out) free the request.
    for_each_order(
        &[Ev::ReadDone, Ev::IoBack, Ev::SendDone, Ev::Close],
        &mut |o| {
            // Every state a request rests in (the driver's own states never outlive a call).
            for start in ALL_STATES
                .into_iter()
                .filter(|s| !matches!(s, S::Ready | S::IoDone | S::Retrying | S::Responding))
            {
                let mut order = o.to_vec();
                order.extend([
                    Ev::Close,
                    Ev::ReadDone,
                    Ev::ReadDone,
                    Ev::IoBack,
                    Ev::SendDone,
                ]);
                order.push(Ev::Marker);
                let (l, freed) = run(start, &order);
                assert!(l.is_free(), "{start:?} {order:?}: {l:?}");
                assert_eq!(freed, u32::from(start != S::Free), "{start:?} {order:?}");
            }
        },
    );
}
