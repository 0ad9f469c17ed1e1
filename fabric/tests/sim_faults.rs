//! Sim-only behaviour: fault hooks, simulated device events, and checks that only the
//! simulation can make deterministic. Always runs against `sim`, whatever `RTGT_FABRIC` says.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use fabric::mem::IoBuf;
use fabric::*;

fn sim_env() -> Env {
    let net = SimNetwork::new();
    let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    net.add_device("sim0", addr).expect("device");
    Env {
        fabric: Fabric::sim(&net),
        addr,
        net: Some(net),
    }
}

fn net(env: &Env) -> &SimNetwork {
    env.net.as_ref().expect("sim")
}

/// Asserts that exactly `want` faults were applied since `before`, and none is left armed.
fn assert_fired(env: &Env, before: FaultCounts, want: FaultCounts) {
    let f = net(env).faults();
    assert_eq!(f.fired().since(&before), want, "faults applied");
    assert_eq!(f.pending(), 0, "armed faults that did not fire");
}

fn next_async(dev: &Device) -> AsyncEvent {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(e) = dev.get_async_event().expect("async") {
            return e;
        }
        assert!(Instant::now() < deadline, "no async event");
        readable(dev.async_fd(), Duration::from_millis(100));
    }
}

#[test]
fn dropped_completion_never_arrives() {
    let env = sim_env();
    let c = connect(&env);
    c.server.recv(1, 0, 64);
    c.server.recv(2, 64, 64);
    let before = net(&env).faults().fired();
    net(&env)
        .faults()
        .drop_completion(CompletionMatch::qp(c.server.qp.qp_num()).recv().wr_id(1));
    assert_eq!(net(&env).faults().pending(), 1);
    c.client.send(10, 0, 8);
    c.client.send(11, 0, 8);
    assert_eq!(wait_wc(&c.client.scq, 2).len(), 2);
    let w = wait_wc(&c.server.rcq, 1)[0];
    assert_eq!(w.wr_id, 2);
    no_wc(&c.server.rcq, Duration::from_millis(50));
    assert_fired(
        &env,
        before,
        FaultCounts {
            completions_dropped: 1,
            ..Default::default()
        },
    );
}

#[test]
fn a_fault_that_matches_nothing_stays_armed_and_is_not_counted() {
    let env = sim_env();
    let c = connect(&env);
    c.server.recv(1, 0, 64);
    let before = net(&env).faults().fired();
    // No completion of a queue pair that does not exist: the fault never fires.
    net(&env)
        .faults()
        .drop_completion(CompletionMatch::qp(0xdead));
    c.client.send(10, 0, 8);
    assert_eq!(wait_wc(&c.server.rcq, 1)[0].wr_id, 1);
    assert_eq!(net(&env).faults().fired(), before);
    assert_eq!(net(&env).faults().pending(), 1);
}

#[test]
fn delayed_completion_arrives_late() {
    let env = sim_env();
    let c = connect(&env);
    c.server.recv(1, 0, 64);
    c.server.recv(2, 64, 64);
    net(&env).faults().delay_completion(
        CompletionMatch::qp(c.server.qp.qp_num()).wr_id(1),
        Duration::from_millis(200),
    );
    let t0 = Instant::now();
    c.client.send(10, 0, 8);
    c.client.send(11, 0, 8);
    let w = wait_wc(&c.server.rcq, 1)[0];
    assert_eq!(w.wr_id, 2, "the undelayed completion overtakes");
    let w = wait_wc(&c.server.rcq, 1)[0];
    assert_eq!(w.wr_id, 1);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_fired(
        &env,
        FaultCounts::default(),
        FaultCounts {
            completions_delayed: 1,
            ..Default::default()
        },
    );
}

#[test]
fn forced_qp_error_flushes_and_raises_qp_fatal() {
    let env = sim_env();
    let c = connect(&env);
    c.server.recv(1, 0, 64);
    let qpn = c.server.qp.qp_num();
    assert!(net(&env).force_qp_error(qpn));
    assert!(!net(&env).force_qp_error(0xdead));
    assert_fired(
        &env,
        FaultCounts::default(),
        FaultCounts {
            qp_errors_forced: 1,
            ..Default::default()
        },
    );
    assert_eq!(c.server.qp.state().expect("state"), QpState::Error);
    let w = wait_wc(&c.server.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::WrFlushErr));
    let e = next_async(&c.server.dev);
    assert_eq!(e.kind, AsyncEventKind::QpFatal);
    assert_eq!(e.element, AsyncElement::Qp(qpn));
    // The peer's next SEND gets no answer.
    c.client.send(5, 0, 8);
    let w = wait_wc(&c.client.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (5, WcStatus::RetryExcErr));
}

#[test]
fn failed_registration_is_an_error_once() {
    let env = sim_env();
    let dev = device(&env);
    let pd = dev.alloc_pd().expect("pd");
    let io = IoBuf::alloc(4096).expect("alloc");
    net(&env).faults().fail_next_registration();
    let e = pd.register(io.region(), Access::LOCAL_WRITE).unwrap_err();
    assert!(matches!(e, FabricError::InjectedFault(_)), "{e}");
    pd.register(io.region(), Access::LOCAL_WRITE)
        .expect("the next one works");
    assert_fired(
        &env,
        FaultCounts::default(),
        FaultCounts {
            registrations_failed: 1,
            ..Default::default()
        },
    );
}

#[test]
fn refused_connection_is_rejected_with_private_data() {
    let env = sim_env();
    let l = listen(&env);
    net(&env).faults().refuse_next_connection(b"no room");
    let (cch, client) = client_endpoint(&env, l.addr, &Opts::default());
    client.id.connect(&ConnParam::default()).expect("connect");
    let e = next_event(&cch);
    assert_eq!(e.status, CM_REJ_CONSUMER_DEFINED);
    match e.kind {
        CmEventKind::Rejected { private_data } => assert_eq!(&private_data[..7], b"no room"),
        other => panic!("{other:?}"),
    }
    no_event(&l.ch, Duration::from_millis(50));
    assert_fired(
        &env,
        FaultCounts::default(),
        FaultCounts {
            connections_refused: 1,
            ..Default::default()
        },
    );
}

#[test]
fn srq_queue_pair_error_raises_last_wqe_reached() {
    let env = sim_env();
    let dev = device(&env);
    let pd = dev.alloc_pd().expect("pd");
    let srq = pd.create_srq(16, 1).expect("srq");
    let opts = Opts {
        server_srq: Some((&pd, &srq)),
        ..Default::default()
    };
    let c = connect_with(&env, &opts);
    c.server.qp.modify_to_error().expect("modify");
    let e = next_async(&dev);
    assert_eq!(e.kind, AsyncEventKind::QpLastWqeReached);
    assert_eq!(e.element, AsyncElement::Qp(c.server.qp.qp_num()));
    c.server.qp.modify_to_error().expect("again");
    assert_eq!(dev.get_async_event().expect("async"), None, "raised once");
}

#[test]
fn finite_rnr_retry_gives_up() {
    let env = sim_env();
    let mut opts = Opts::default();
    opts.server_param.rnr_retry_count = 3;
    let c = connect_with(&env, &opts);
    let t0 = Instant::now();
    c.client.send(1, 0, 8);
    let w = wait_wc(&c.client.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RnrRetryExcErr));
    assert!(t0.elapsed() >= Duration::from_millis(5), "it retried first");
}

#[test]
fn device_removal_and_address_change_reach_identifiers() {
    let env = sim_env();
    let c = connect(&env);
    assert_eq!(
        net(&env).signal_addr_change(env.addr),
        3,
        "listener, client, server"
    );
    for ch in [&c.listener.ch, &c.listener.ch, &c.client_ch] {
        let e = next_event(ch);
        assert!(matches!(e.kind, CmEventKind::AddrChange), "{e:?}");
    }
    c.client.recv(1, 0, 64);
    assert!(net(&env).remove_device(env.addr));
    assert!(!net(&env).remove_device(env.addr));
    assert_fired(
        &env,
        FaultCounts::default(),
        FaultCounts {
            devices_removed: 1,
            ..Default::default()
        },
    );
    let e = next_event(&c.client_ch);
    assert!(matches!(e.kind, CmEventKind::DeviceRemoval), "{e:?}");
    let w = wait_wc(&c.client.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::WrFlushErr));
    assert!(env.fabric.devices().expect("devices").is_empty());
}

#[test]
fn objects_of_other_devices_are_refused() {
    let env = sim_env();
    let other = net(&env)
        .add_device("sim1", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)))
        .expect("second device");
    let l = listen(&env);
    let ch = env.fabric.create_event_channel().expect("ch");
    let id = ch.create_id().expect("id");
    id.resolve_addr(None, l.addr, 1000).expect("resolve");
    next_event(&ch);
    let dev = id.device().expect("device");
    assert_ne!(dev, other);
    let good_pd = dev.alloc_pd().expect("pd");
    let good_cq = dev.create_cq(16, None).expect("cq");
    let other_pd = other.alloc_pd().expect("pd");
    let other_cq = other.create_cq(16, None).expect("cq");
    let init = |pd, cq| QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    assert!(matches!(
        id.create_qp(&init(&other_pd, &good_cq)),
        Err(FabricError::Mismatch(_))
    ));
    assert!(matches!(
        id.create_qp(&init(&good_pd, &other_cq)),
        Err(FabricError::Mismatch(_))
    ));
    let qp = id.create_qp(&init(&good_pd, &good_cq)).expect("qp");
    assert!(matches!(
        id.create_qp(&init(&good_pd, &good_cq)),
        Err(FabricError::InvalidState(_))
    ));
    drop(qp);
    id.create_qp(&init(&good_pd, &good_cq))
        .expect("a new qp after the first is gone");
    // Source address on another device.
    let id2 = ch.create_id().expect("id");
    id2.resolve_addr(
        Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 0)),
        l.addr,
        1000,
    )
    .expect("resolve");
    next_event(&ch);
    assert_eq!(id2.device(), Some(other));
}

#[test]
fn a_cq_overrun_is_reported_as_an_async_event() {
    let env = sim_env();
    let dev = device(&env);
    let pd = dev.alloc_pd().expect("pd");
    let srq = pd.create_srq(16, 1).expect("srq");
    let opts = Opts {
        server_srq: Some((&pd, &srq)),
        ..Default::default()
    };
    let c = connect_with(&env, &opts);
    // The server's send CQ holds 256: post 300 unsignaled-but-failing sends after an error.
    c.server.qp.modify_to_error().expect("modify");
    let _ = next_async(&dev); // last WQE reached
    let wrs: Vec<SendWr> = (0..64).map(|i| SendWr::send(i, SgeList::new())).collect();
    for _ in 0..5 {
        c.server.qp.post_send(&wrs).expect("post");
    }
    let e = next_async(&dev);
    assert_eq!(e.kind, AsyncEventKind::CqErr);
    assert_eq!(e.element, AsyncElement::Cq(c.server.scq.handle()));
}

#[test]
fn disconnect_request_times_out_without_an_answer() {
    let env = sim_env();
    let c = connect(&env);
    c.client.id.disconnect().expect("disconnect");
    let e = next_event(&c.listener.ch);
    assert!(matches!(e.kind, CmEventKind::Disconnected), "{e:?}");
    // The server never disconnects; the client gives up after the DREQ timeout.
    let t0 = Instant::now();
    let e = next_event(&c.client_ch);
    assert!(matches!(e.kind, CmEventKind::Disconnected), "{e:?}");
    assert!(t0.elapsed() >= Duration::from_secs(1));
    let e = next_event(&c.client_ch);
    assert!(matches!(e.kind, CmEventKind::TimewaitExit), "{e:?}");
}

#[test]
fn destroying_identifiers_disconnects_and_rejects() {
    let env = sim_env();
    // A connected identifier destroyed: the peer hears DISCONNECTED.
    let c = connect(&env);
    drop(c.server);
    let e = next_event(&c.client_ch);
    assert!(matches!(e.kind, CmEventKind::Disconnected), "{e:?}");

    // An unanswered connect request dropped: the initiator is rejected.
    let l = listen(&env);
    let (cch, client) = client_endpoint(&env, l.addr, &Opts::default());
    client.id.connect(&ConnParam::default()).expect("connect");
    let req = take_request(&l.ch, &l.id);
    drop(req);
    let e = next_event(&cch);
    assert!(matches!(e.kind, CmEventKind::Rejected { .. }), "{e:?}");
}

#[test]
fn memory_window_is_bound_to_one_queue_pair() {
    let env = sim_env();
    let c1 = connect(&env);
    let c2 = connect(&env);
    // Bind a window through c1's client queue pair.
    let win = Buf::new(
        &c1.client.pd,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mw = c1.client.pd.alloc_mw().expect("mw");
    let rkey = c1
        .client
        .qp
        .post_bind_mw(&BindMw {
            wr_id: 1,
            signaled: false,
            mw: &mw,
            mr: &win.mr,
            addr: win.addr(0),
            length: 4096,
            access: Access::REMOTE_WRITE,
        })
        .expect("bind");
    // Binding again while bound fails (type 2 windows must be invalidated first).
    c1.client
        .qp
        .post_bind_mw(&BindMw {
            wr_id: 2,
            signaled: true,
            mw: &mw,
            mr: &win.mr,
            addr: win.addr(0),
            length: 64,
            access: Access::REMOTE_WRITE,
        })
        .expect("post");
    let w = wait_wc(&c1.client.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (2, WcStatus::MwBindErr));
    // A write through another connection with that key is refused.
    c2.server
        .qp
        .post_send([&SendWr::rdma_write(
            3,
            c2.server.buf.sgl(0, 8),
            win.addr(0),
            rkey,
        )])
        .expect("post");
    let w = wait_wc(&c2.server.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (3, WcStatus::RemAccessErr));
}

#[test]
fn posting_rules() {
    let env = sim_env();
    let c = connect(&env);
    let too_many = SgeList::from_slice(&[c.client.buf.sge(0, 8); 5]).unwrap();
    let e = c
        .client
        .qp
        .post_recv([&RecvWr::new(1, too_many)])
        .unwrap_err();
    assert_eq!((e.posted, e.kind), (0, PostErrorKind::InvalidWr));
    let e = c
        .client
        .qp
        .post_send([&SendWr::send(1, too_many)])
        .unwrap_err();
    assert_eq!((e.posted, e.kind), (0, PostErrorKind::InvalidWr));
    // The receive queue depth is enforced.
    let wrs: Vec<RecvWr> = (0..65)
        .map(|i| RecvWr::new(i, c.client.buf.sgl(0, 8)))
        .collect();
    let e = c.client.qp.post_recv(&wrs).unwrap_err();
    assert_eq!((e.posted, e.kind), (64, PostErrorKind::QueueFull));
    // In the sim, receives posted in the error state flush (documented; rxe never completes
    // them).
    c.client.qp.modify_to_error().expect("modify");
    assert_eq!(wait_wc(&c.client.rcq, 64).len(), 64);
    c.client.recv(99, 0, 8);
    let w = wait_wc(&c.client.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status), (99, WcStatus::WrFlushErr));
}

#[test]
fn provider_selection_by_name() {
    let f = Fabric::from_name("sim").expect("sim");
    assert_eq!(f.name(), "sim");
    let net = f.sim_network().expect("network");
    assert_eq!(*net, SimNetwork::global());
    let devs = f.devices().expect("devices");
    assert!(devs.iter().any(|d| d.name() == "sim0"));
    assert!(Fabric::from_name("carrier-pigeon").is_err());
}

#[test]
fn rdma_without_a_device_is_a_clear_error() {
    // The build host has no RDMA: opening the provider must fail with NoDevice, not panic.
    match Fabric::rdma() {
        Ok(f) => assert_eq!(f.name(), "rdma"),
        Err(e) => assert!(matches!(e, FabricError::NoDevice(_)), "{e}"),
    }
}

#[test]
fn gather_from_many_registrations_including_colliding_cache_slots() {
    let env = sim_env();
    let mut opts = Opts::default();
    opts.cap.max_send_sge = 16;
    opts.cap.max_recv_sge = 16;
    let c = connect_with(&env, &opts);
    // 40 registrations: more keys than cache slots, so some collide within one request
    // (exercising the locked fallback) and others hit.
    let mut bufs: Vec<Buf> = (0..40)
        .map(|_| Buf::new(&c.client.pd, 4096, Access::LOCAL_WRITE))
        .collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        b.fill(0, &pattern(i as u8, 64));
    }
    let remote = Buf::new(&c.server.pd, 4096, Access::ALL);
    for round in 0..4u64 {
        let picks: Vec<usize> = (0..16).map(|k| (k * 3 + round as usize * 7) % 40).collect();
        let sges: Vec<Sge> = picks.iter().map(|&i| bufs[i].sge(0, 64)).collect();
        let sgl = SgeList::from_slice(&sges).unwrap();
        let want: Vec<u8> = picks.iter().flat_map(|&i| pattern(i as u8, 64)).collect();
        // SEND gathered from 16 registrations.
        c.server.recv(round, 0, 16 * 64);
        c.client
            .qp
            .post_send([&SendWr::send(round, sgl)])
            .expect("send");
        let w = wait_wc(&c.server.rcq, 1)[0];
        assert_eq!((w.status, w.byte_len), (WcStatus::Success, 16 * 64));
        assert_eq!(c.server.buf.get(0, 16 * 64), &want[..]);
        // RDMA WRITE gathered from the same 16.
        c.client
            .qp
            .post_send([&SendWr::rdma_write(
                100 + round,
                sgl,
                remote.addr(0),
                remote.mr.rkey(),
            )])
            .expect("write");
        let wcs = wait_wc(&c.client.scq, 2);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(remote.get(0, 16 * 64), &want[..]);
    }
}

/// The sim checks every entry of a receive a SEND lands in, also entries no byte reaches (a
/// real adapter may check only what it writes): a bad second entry fails the SEND, also right
/// after a receive of the same shape took one (its keys are then cached).
#[test]
fn every_entry_of_a_receive_is_checked_also_where_no_byte_lands() {
    let env = sim_env();
    let mut c = connect(&env);
    let data = pattern(3, 16);
    c.server.buf.fill(0, &data);
    let cb = &c.client.buf;
    let two = |id: u64, second: Sge| {
        RecvWr::new(id, SgeList::from_slice(&[cb.sge(0, 64), second]).unwrap())
    };
    let wrs = [
        two(1, cb.sge(4096, 4096)),
        two(2, cb.sge(BUF_LEN - 10, 100)),
    ];
    c.client.qp.post_recv(&wrs).expect("post_recv");
    c.server.send(10, 0, 16);
    let w = wait_wc(&c.server.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (10, WcStatus::Success));
    let w = wait_wc(&c.client.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status, w.byte_len), (1, WcStatus::Success, 16));
    assert_eq!(c.client.buf.get(0, 16), &data[..]);
    c.server.send(11, 0, 16);
    let w = wait_wc(&c.server.scq, 1)[0];
    assert_eq!((w.wr_id, w.status), (11, WcStatus::RemOpErr));
    let w = wait_wc(&c.client.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status), (2, WcStatus::LocProtErr));
}
