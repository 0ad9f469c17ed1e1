use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;

fn reactors(n: usize) -> Reactors {
    Reactors::start(ReactorConfig::with_count(n)).unwrap()
}

#[test]
fn messages_run_on_the_target_reactor() {
    let r = reactors(2);
    let (tx, rx) = mpsc::channel();
    for i in 0..2 {
        let tx = tx.clone();
        r.send_msg(i, move |ctx| {
            tx.send((ctx.index(), Reactors::current())).unwrap();
        })
        .unwrap();
    }
    let mut got: Vec<_> = (0..2).map(|_| rx.recv().unwrap()).collect();
    got.sort();
    assert_eq!(got, vec![(0, Some(0)), (1, Some(1))]);
    assert_eq!(Reactors::current(), None);
    assert_eq!(r.send_msg(5, |_| {}), Err(SendError::NoSuchReactor(5)));
    r.stop();
    assert_eq!(r.send_msg(0, |_| {}), Err(SendError::Stopped));
}

#[test]
fn full_queue_is_an_error_not_a_block() {
    let mut cfg = ReactorConfig::with_count(1);
    cfg.queue_capacity = 2;
    let r = Reactors::start(cfg).unwrap();
    let (block_tx, block_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel();
    r.send_msg(0, move |_| {
        started_tx.send(()).unwrap();
        block_rx.recv().unwrap();
    })
    .unwrap();
    started_rx.recv().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let ran = Arc::clone(&ran);
        r.send_msg(0, move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    assert_eq!(r.send_msg(0, |_| {}), Err(SendError::Full(0)));
    // Control messages are never refused for space.
    r.send_ctrl(0, |_| {}).unwrap();
    block_tx.send(()).unwrap();
    r.stop();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "queued messages run before stop"
    );
}

#[test]
fn for_each_visits_in_order_then_done_on_origin() {
    let r = reactors(3);
    let order = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let o = Arc::clone(&order);
    r.for_each_reactor(
        move |ctx| o.lock().push(ctx.index()),
        move |ctx| tx.send(ctx.index()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rx.recv().unwrap(),
        0,
        "done runs on reactor 0 for outside callers"
    );
    assert_eq!(*order.lock(), vec![0, 1, 2]);

    // Started from reactor 2, done comes back to reactor 2.
    let (tx, rx) = mpsc::channel();
    let r2 = r.clone();
    r.send_ctrl(2, move |_| {
        r2.for_each_reactor(|_| {}, move |ctx| tx.send(ctx.index()).unwrap())
            .unwrap();
    })
    .unwrap();
    assert_eq!(rx.recv().unwrap(), 2);
    r.stop();
}

/// A visit that finishes later, from a poller, as a pause waiting for I/O to drain does.
#[test]
fn async_for_each_waits_for_each_step_and_stops_on_error() {
    struct Parked(Option<Step<String>>);
    let r = reactors(2);
    for i in 0..2 {
        r.send_ctrl(i, |ctx| {
            ctx.set_local(Parked(None));
            let mut polls = 0;
            ctx.poller("finisher").register(move |ctx| {
                let p = ctx.local::<Parked>().unwrap();
                if p.0.is_some() {
                    polls += 1;
                    if polls == 50 {
                        polls = 0;
                        p.0.take().unwrap().next(Ok(()));
                        return PollStatus::Busy;
                    }
                }
                PollStatus::Idle
            });
        })
        .unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let visits = Arc::new(AtomicUsize::new(0));
    let v = Arc::clone(&visits);
    r.for_each_reactor_async::<String>(
        move |ctx, step| {
            v.fetch_add(1, Ordering::SeqCst);
            ctx.local::<Parked>().unwrap().0 = Some(step);
        },
        move |_, res| tx.send(res).unwrap(),
    )
    .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(()));
    assert_eq!(visits.load(Ordering::SeqCst), 2);

    let (tx, rx) = mpsc::channel();
    let visits = Arc::new(AtomicUsize::new(0));
    let v = Arc::clone(&visits);
    r.for_each_reactor_async::<String>(
        move |ctx, step| {
            v.fetch_add(1, Ordering::SeqCst);
            step.next(Err(format!("failed on {}", ctx.index())));
        },
        move |_, res| tx.send(res).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Err("failed on 0".to_string())
    );
    assert_eq!(
        visits.load(Ordering::SeqCst),
        1,
        "iteration stops at the error"
    );
    r.stop();
}

#[test]
fn a_dropped_step_does_not_hang_the_iteration() {
    let r = reactors(2);
    let (tx, rx) = mpsc::channel();
    r.for_each_reactor_async::<()>(|_, step| drop(step), move |_, res| tx.send(res).unwrap())
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(()));
    r.stop();
}

#[test]
fn timed_poller_runs_at_its_period() {
    let r = reactors(1);
    let count = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&count);
    r.send_ctrl(0, move |ctx| {
        ctx.poller("tick")
            .period(Duration::from_millis(20))
            .register(move |_| {
                c.fetch_add(1, Ordering::SeqCst);
                PollStatus::Idle
            });
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(210));
    let n = count.load(Ordering::SeqCst);
    assert!(
        (6..=12).contains(&n),
        "20 ms poller ran {n} times in 210 ms"
    );
    r.stop();
}

#[test]
fn idle_reactor_sleeps_and_a_message_wakes_it() {
    let r = reactors(1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.stats(0).unwrap().in_interrupt.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "reactor never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    let iterations = r.stats(0).unwrap().iterations.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    let idle_iters = r.stats(0).unwrap().iterations.load(Ordering::SeqCst) - iterations;
    assert!(
        idle_iters <= 2,
        "a sleeping reactor looped {idle_iters} times"
    );
    let (tx, rx) = mpsc::channel();
    let sent = Instant::now();
    r.send_msg(0, move |_| tx.send(Instant::now()).unwrap())
        .unwrap();
    let ran = rx.recv_timeout(Duration::from_secs(1)).unwrap();
    assert!(ran.duration_since(sent) < Duration::from_millis(100));
    r.stop();
}

#[test]
fn wake_fd_wakes_a_sleeping_reactor_and_arm_can_veto_sleep() {
    let r = reactors(1);
    let efd = Arc::new(sys::EventFd::new().unwrap());
    let fired = Arc::new(AtomicUsize::new(0));
    let (e, f) = (Arc::clone(&efd), Arc::clone(&fired));
    r.send_ctrl(0, move |ctx| {
        let fd = e.as_raw_fd();
        ctx.poller("fd")
            .wake_fd(fd)
            .arm(|_| false)
            .register(move |_| {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd we hold.
                let n = unsafe { libc::read(e.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                if n == 8 {
                    f.fetch_add(1, Ordering::SeqCst);
                    PollStatus::Busy
                } else {
                    PollStatus::Idle
                }
            });
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.stats(0).unwrap().in_interrupt.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "reactor never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    efd.notify();
    let deadline = Instant::now() + Duration::from_secs(1);
    while fired.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "fd readiness did not wake the poller"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    // A poller whose arm reports pending work keeps the reactor awake.
    r.send_ctrl(0, |ctx| {
        ctx.poller("busy-arm")
            .wake_fd(-1)
            .arm(|_| true)
            .register(|_| PollStatus::Idle);
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let sleeps = r.stats(0).unwrap().sleeps.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.stats(0).unwrap().sleeps.load(Ordering::SeqCst), sleeps);
    r.stop();
}

#[test]
fn call_returns_the_result_and_stop_drops_locals_on_the_reactor() {
    struct Guard(mpsc::Sender<Option<usize>>);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.send(Reactors::current());
        }
    }
    let r = reactors(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let v = rt.block_on(r.call(1, |ctx| ctx.index() * 10)).unwrap();
    assert_eq!(v, 10);
    let (tx, rx) = mpsc::channel();
    r.send_ctrl(1, move |ctx| ctx.set_local(Guard(tx))).unwrap();
    r.stop();
    assert_eq!(rx.recv().unwrap(), Some(1));
}

#[test]
fn pollers_can_be_removed() {
    let r = reactors(1);
    let count = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&count);
    let (tx, rx) = mpsc::channel();
    r.send_ctrl(0, move |ctx| {
        let id = ctx.poller("p").register(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            PollStatus::Idle
        });
        tx.send(id).unwrap();
    })
    .unwrap();
    let id = rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(10));
    r.send_ctrl(0, move |ctx| ctx.unregister_poller(id))
        .unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let a = count.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(count.load(Ordering::SeqCst), a);
    assert!(a > 0);
    assert!(r.info()[0].pollers.is_empty());
    r.stop();
}

#[test]
fn a_ready_fd_runs_its_timed_poller_at_once_and_watched_fds_wake() {
    let r = reactors(1);
    let efd = Arc::new(sys::EventFd::new().unwrap());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (e, rr) = (Arc::clone(&efd), Arc::clone(&ran));
    r.send_ctrl(0, move |ctx| {
        let fd = e.as_raw_fd();
        ctx.poller("slow")
            .period(Duration::from_secs(3600))
            .wake_fd(fd)
            .register(move |_| {
                e.drain();
                rr.lock().push(Instant::now());
                PollStatus::Busy
            });
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.stats(0).unwrap().in_interrupt.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "reactor never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    efd.notify();
    while ran.lock().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "ready fd did not run the poller"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    // A watched fd without a poller wakes the reactor too.
    let watched = Arc::new(sys::EventFd::new().unwrap());
    let w = Arc::clone(&watched);
    r.send_ctrl(0, move |ctx| ctx.watch_fd(w.as_raw_fd()))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let sleeps = r.stats(0).unwrap().sleeps.load(Ordering::SeqCst);
    watched.notify();
    std::thread::sleep(Duration::from_millis(20));
    assert!(r.stats(0).unwrap().sleeps.load(Ordering::SeqCst) > sleeps);
    let w = Arc::clone(&watched);
    r.send_ctrl(0, move |ctx| ctx.unwatch_fd(w.as_raw_fd()))
        .unwrap();
    r.stop();
}

#[test]
fn a_timed_poller_with_a_wake_fd_does_not_wake_a_sleeping_reactor() {
    let r = reactors(1);
    let efd = Arc::new(sys::EventFd::new().unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let (e, n) = (Arc::clone(&efd), Arc::clone(&runs));
    r.send_ctrl(0, move |ctx| {
        ctx.poller("acceptor-like")
            .period(Duration::from_millis(5))
            .wake_fd(e.as_raw_fd())
            .register(move |_| {
                n.fetch_add(1, Ordering::SeqCst);
                e.drain();
                PollStatus::Idle
            });
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.stats(0).unwrap().in_interrupt.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "reactor never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    let sleeps = r.stats(0).unwrap().sleeps.load(Ordering::SeqCst);
    let before = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    // A 5 ms period would have woken it about 40 times.
    let woke = r.stats(0).unwrap().sleeps.load(Ordering::SeqCst) - sleeps;
    assert!(woke <= 2, "the period woke a sleeping reactor {woke} times");
    assert!(runs.load(Ordering::SeqCst) - before <= 2);
    // The fd still wakes it.
    efd.notify();
    let deadline = Instant::now() + Duration::from_secs(2);
    while runs.load(Ordering::SeqCst) == before {
        assert!(
            Instant::now() < deadline,
            "the ready fd did not run the poller"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    r.stop();
}

#[test]
fn a_polling_reactor_runs_a_timed_poller_soon_after_its_fd_is_ready() {
    let r = reactors(1);
    let efd = Arc::new(sys::EventFd::new().unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    let (e, n) = (Arc::clone(&efd), Arc::clone(&ran));
    r.send_ctrl(0, move |ctx| {
        // Keeps the reactor polling: it never sleeps.
        ctx.poller("busy").register(|_| PollStatus::Busy);
        ctx.poller("hourly")
            .period(Duration::from_secs(3600))
            .wake_fd(e.as_raw_fd())
            .register(move |_| {
                e.drain();
                n.fetch_add(1, Ordering::SeqCst);
                PollStatus::Busy
            });
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let sleeps = r.stats(0).unwrap().sleeps.load(Ordering::SeqCst);
    let before = ran.load(Ordering::SeqCst);
    efd.notify();
    let t = Instant::now();
    while ran.load(Ordering::SeqCst) == before {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a ready fd waited for its poller's period"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        r.stats(0).unwrap().sleeps.load(Ordering::SeqCst),
        sleeps,
        "a polling reactor slept"
    );
    r.stop();
}
