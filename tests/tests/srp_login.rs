//! SRP logins against the in-process target on the simulated fabric: accepted with ib_srpt's
//! negotiation, rejected with the right reason, single- and multi-channel semantics, and the
//! sessions and channels management shows.

use std::time::Duration;

use rtgt_tests::srp_initiator::{BS, Layout, SrpFixture, SrpInitiator, pattern};
use serde_json::json;
use transport_srp::proto::{MultiChannelResult, PortId, TLogoutReason};

const INI: u64 = 0x5254_0012_3456_7890;

fn reason(r: Result<SrpInitiator, rtgt_tests::srp_initiator::LoginError>) -> u32 {
    match r {
        Ok(_) => panic!("login accepted"),
        Err(e) => e
            .reason()
            .unwrap_or_else(|| panic!("not an SRP reject: {e:?}")),
    }
}

#[test]
fn linux_login_is_accepted_with_ib_srpt_negotiation() {
    let fx = SrpFixture::new(2, json!({}), 1, 4096);
    let mut i = fx.login(INI);
    assert_eq!(i.login.req_lim_delta, 128);
    assert_eq!(i.login.max_it_iu_len, 8276);
    assert_eq!(i.login.max_ti_iu_len, 256);
    assert_eq!(i.login.buf_fmt.0, 0x0006);
    assert_eq!(i.login.multi_channel, MultiChannelResult::NoneExisting);
    assert!(i.immediate());
    let data = pattern(1, 8192);
    let r = i.write(0, 8, BS, 0, &data, Layout::Direct).unwrap();
    assert_eq!(r.status, 0, "{r:?}");
    let (r, back) = i.read(0, 8, BS, 16, 65536, Layout::Direct).unwrap();
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(back, data);

    // Management sees one session (hostnqn = the initiator port id) with one channel.
    let ctrls = fx.controllers();
    assert_eq!(ctrls.len(), 1);
    assert_eq!(ctrls[0].hostnqn, "0x00000000000000005254001234567890");
    assert_eq!(ctrls[0].transport, "SRP");
    assert_eq!(ctrls[0].num_io_qpairs, 1);
    let q = fx.qpairs();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0]["state"], "live");
    assert_eq!(
        q[0]["initiator_port_id"],
        "0x00000000000000005254001234567890"
    );
    assert_eq!(q[0]["target_port_id"], fx.port.to_string());
    assert_eq!(q[0]["cntlid"], ctrls[0].cntlid);
    assert_eq!(q[0]["immediate_data"], true);
    assert_eq!(q[0]["listen_address"]["trtype"], "SRP");
}

#[test]
fn logins_are_rejected_with_ib_srpt_reasons() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    // Another target port id: unable to associate.
    let mut p = fx.params(INI);
    p.target = PortId::from_halves(1, 2);
    assert_eq!(reason(fx.login_with(&p)), 0x10003);
    // IU length above max_req_size, or below 64.
    let mut p = fx.params(INI);
    p.it_iu_len = 8277;
    assert_eq!(reason(fx.login_with(&p)), 0x10002);
    p.it_iu_len = 63;
    assert_eq!(reason(fx.login_with(&p)), 0x10002);
    // The IU length check comes first, even for an unknown port.
    p.target = PortId::from_halves(1, 2);
    p.it_iu_len = 10_000;
    assert_eq!(reason(fx.login_with(&p)), 0x10002);

    // Host not allowed: channel limit reached (what a missing ACL looks like in ib_srpt).
    fx.t.rt
        .block_on(fx.t.target.allow_any_host(&fx.nqn, false))
        .unwrap();
    assert_eq!(reason(fx.login_with(&fx.params(INI))), 0x10006);
    // Allowed under any of its names: the port id, the GUID form, the peer address.
    for host in [
        "0x00000000000000005254001234567890",
        "5254:0012:3456:7890",
        rtgt_tests::HOST_IP,
    ] {
        fx.t.target.add_host(&fx.nqn, host).unwrap();
        let i = fx.login_with(&fx.params(INI)).expect(host);
        drop(i);
        fx.t.rt
            .block_on(fx.t.target.remove_host(&fx.nqn, host))
            .unwrap();
        fx.wait_until("the channel to go", |f| f.qpairs().is_empty());
        assert_eq!(reason(fx.login_with(&fx.params(INI))), 0x10006, "{host}");
    }
    // A subsystem that does not listen on this address does not exist here.
    fx.t.rt
        .block_on(fx.t.target.allow_any_host(&fx.nqn, true))
        .unwrap();
    let other = "nqn.2016-06.io.rtgt:other";
    fx.t.subsystem(other, true);
    let mut p = fx.params(INI);
    p.target = transport_srp::port_id::derived_target_port_id(other);
    assert_eq!(reason(fx.login_with(&p)), 0x10003);

    let s = fx.stats();
    let _ = s;
}

#[test]
fn small_max_req_size_rejects_default_linux_initiators() {
    let fx = SrpFixture::new(1, json!({"max_req_size": 4096}), 1, 1024);
    assert_eq!(reason(fx.login_with(&fx.params(INI))), 0x10002);
    let mut p = fx.params(INI);
    p.it_iu_len = 4096;
    let i = fx.login_with(&p).unwrap();
    assert_eq!(i.login.max_it_iu_len, 4096);
}

#[test]
fn immediate_data_is_declined_when_not_offered() {
    for opts in [json!({"immediate_data": false}), json!({"use_srq": true})] {
        let fx = SrpFixture::new(1, opts.clone(), 1, 1024);
        let mut i = fx.login(INI);
        assert!(!i.immediate(), "{opts}");
        // Immediate data on a channel that did not negotiate it is an invalid IU field.
        let data = pattern(3, 512);
        let r = i.write(0, 0, BS, 0, &data, Layout::Immediate).unwrap();
        assert_eq!(r.status, 2, "{opts}");
        assert_eq!(r.sense_key(), Some((0x5, 0x0e, 0x03)));
        // Direct still works.
        let r = i.write(0, 0, BS, 0, &data, Layout::Direct).unwrap();
        assert_eq!(r.status, 0);
    }
}

#[test]
fn multi_channel_logins_are_maintained_and_single_channel_terminates() {
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    // ib_srp with ch_count = 3: the first login single-channel, the others multi-channel.
    let mut chans = vec![fx.login(INI)];
    for _ in 0..2 {
        let mut p = fx.params(INI);
        p.multi_channel = true;
        let i = fx.login_with(&p).unwrap();
        assert_eq!(i.login.multi_channel, MultiChannelResult::Maintained);
        chans.push(i);
    }
    // Another initiator on the same target is another session.
    let mut other = fx.login(INI + 1);
    assert_eq!(fx.qpairs().len(), 4);
    let mut ctrls = fx.controllers();
    ctrls.sort_by_key(|c| c.num_io_qpairs);
    assert_eq!(
        ctrls.iter().map(|c| c.num_io_qpairs).collect::<Vec<_>>(),
        [1, 3]
    );
    // The channels spread over both poll groups.
    let threads: std::collections::BTreeSet<String> = fx
        .qpairs()
        .iter()
        .map(|q| q["thread"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(threads.len(), 2, "{threads:?}");
    for (n, c) in chans.iter_mut().enumerate() {
        let data = pattern(n as u64, 4096);
        assert_eq!(
            c.write(0, n as u32 * 8, BS, 0, &data, Layout::Direct)
                .unwrap()
                .status,
            0
        );
    }

    // A reconnect: single-channel login of the same initiator terminates all three.
    let mut again = fx.login(INI);
    assert_eq!(again.login.multi_channel, MultiChannelResult::Terminated);
    for c in &mut chans {
        assert!(
            c.wait_disconnected(Duration::from_secs(10)),
            "old channel not disconnected"
        );
        c.poll_once().unwrap();
    }
    // ib_srp ignores it, but the target says why: T_LOGOUT, multi-channel action.
    assert!(chans.iter().any(|c| {
        c.t_logouts
            .iter()
            .any(|t| t.reason == TLogoutReason::MultiChannelAction)
    }));
    fx.wait_until("old channels released", |f| f.qpairs().len() == 2);
    // The other initiator was not touched; the new channel works.
    assert_eq!(
        other.read(0, 0, BS, 8, 0, Layout::Direct).unwrap().0.status,
        0
    );
    let (r, d) = again.read(0, 8, BS, 8, 0, Layout::Direct).unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(d, pattern(1, 4096));
    let mut ctrls = fx.controllers();
    ctrls.sort_by_key(|c| c.hostnqn.clone());
    assert_eq!(ctrls.len(), 2);
    assert!(ctrls.iter().all(|c| c.num_io_qpairs == 1));

    // SCST's relogin check: two more single-channel logins, each tearing the previous down.
    for _ in 0..2 {
        let mut next = fx.login(INI);
        assert_eq!(next.login.multi_channel, MultiChannelResult::Terminated);
        assert!(again.wait_disconnected(Duration::from_secs(10)));
        assert_eq!(
            next.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status,
            0
        );
        again = next;
    }
    fx.wait_until("one channel per initiator", |f| f.qpairs().len() == 2);
}

#[test]
fn malformed_login_private_data_is_rejected() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    // Use the fabric directly: a connect whose private data has the wrong opcode byte.
    let ch = fx.t.fabric.create_event_channel().unwrap();
    let id = ch.create_id().unwrap();
    let src = fx.params(INI).src;
    id.resolve_addr(src, fx.addr, 1000).unwrap();
    let wait = |ch: &fabric::EventChannel| loop {
        if let Some(e) = ch.get_event().unwrap() {
            return e;
        }
        fabric::wait_readable(ch.fd(), Duration::from_secs(5)).unwrap();
    };
    assert!(matches!(wait(&ch).kind, fabric::CmEventKind::AddrResolved));
    let dev = id.device().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let _qp = id
        .create_qp(&fabric::QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: fabric::QpCap::default(),
            sq_sig_all: true,
        })
        .unwrap();
    id.resolve_route(1000).unwrap();
    assert!(matches!(wait(&ch).kind, fabric::CmEventKind::RouteResolved));
    let mut pdata = [0u8; 56];
    pdata[11] = 0x02; // SRP_CMD, not SRP_LOGIN_REQ
    id.connect(&fabric::ConnParam {
        private_data: &pdata,
        ..Default::default()
    })
    .unwrap();
    let e = wait(&ch);
    match e.kind {
        fabric::CmEventKind::Rejected { private_data } => {
            let rej = transport_srp::proto::LoginRej::decode(&private_data).unwrap();
            assert_eq!(rej.reason.code(), 0x10000);
        }
        other => panic!("expected a reject, got {other:?}"),
    }
    // The target keeps serving.
    let mut i = fx.login(INI);
    assert_eq!(i.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    let s = fx.t.target.transport("SRP").unwrap().1.stats();
    assert_eq!(s["logins_rejected"]["no_reason"], 1, "{s}");
    assert_eq!(s["logins_accepted"], 1, "{s}");
}

#[test]
fn login_churn_leaves_nothing_behind() {
    // Many initiators logging in and out, and many rejected logins: the nexus table, the
    // sessions and the counters return to empty (ib_srpt keeps a nexus per initiator ever
    // seen; this target does not).
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    for n in 0..40u64 {
        let mut i = fx.login(0x1000 + n);
        assert_eq!(i.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
        if n % 2 == 0 {
            i.logout().unwrap();
            assert!(i.wait_disconnected(Duration::from_secs(10)));
        }
        drop(i);
        let mut p = fx.params(0x9000 + n);
        p.target = PortId::from_halves(n, n);
        assert_eq!(reason(fx.login_with(&p)), 0x10003);
    }
    fx.wait_until("every channel released", |f| f.qpairs().is_empty());
    assert!(fx.controllers().is_empty());
    let t = fx.t.target.transport("SRP").unwrap().1.stats();
    assert_eq!(
        (t["channels"].as_u64(), t["sessions"].as_u64()),
        (Some(0), Some(0)),
        "{t}"
    );
    assert_eq!(t["logins_accepted"], 40, "{t}");
    assert_eq!(t["logins_rejected"]["unable_to_associate"], 40, "{t}");
}

#[test]
fn an_explicit_target_port_id_replaces_the_derived_one() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let nqn = "nqn.2016-06.io.rtgt:explicit";
    let mut p = target_core::target::SubsystemParams::new(nqn);
    p.allow_any_host = true;
    transport_srp::port_id::set_target_port_id(
        &mut p.transport_attrs,
        (0x0002_c903_000e_8acd, 0x0002_c903_000e_8acd),
    );
    fx.t.rt.block_on(fx.t.target.create_subsystem(p)).unwrap();
    fx.t.malloc("Explicit0", 1024, BS);
    fx.t.add_ns(nqn, "Explicit0");
    let addr = target_core::target::ListenAddr::new(
        "SRP",
        target_core::target::AdrFam::Ipv4,
        rtgt_tests::TARGET_IP,
        &fx.addr.port().to_string(),
    );
    fx.t.rt
        .block_on(fx.t.target.add_listener(nqn, addr))
        .unwrap();
    let mut lp = fx.params(INI);
    lp.target = PortId::from_halves(0x0002_c903_000e_8acd, 0x0002_c903_000e_8acd);
    let mut i = fx.login_with(&lp).unwrap();
    assert_eq!(i.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    lp.target = transport_srp::port_id::derived_target_port_id(nqn);
    assert_eq!(reason(fx.login_with(&lp)), 0x10003);
}

/// A target whose RDMA device allows `max_qp_wr` work requests per queue, with SRP options
/// `opts` and one 8192-block LUN.
fn on_small_device(max_qp_wr: u32, opts: serde_json::Value) -> SrpFixture {
    use fabric::SimNetwork;
    use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
    let ip = |a: &str| a.parse::<std::net::IpAddr>().unwrap();
    let mut attr = SimNetwork::new()
        .add_device("probe", ip(TARGET_IP))
        .unwrap()
        .query()
        .unwrap();
    attr.max_qp_wr = max_qp_wr;
    let net = SimNetwork::new();
    net.add_device_with_attr("sim_tgt", ip(TARGET_IP), attr)
        .unwrap();
    net.add_device("sim_host", ip(HOST_IP)).unwrap();
    let t = TestTarget::start_on(net, target_core::reactor::ReactorConfig::with_count(1));
    SrpFixture::on(t, opts, 1, 8192)
}

#[test]
fn credits_are_sized_so_the_queue_pair_fits_the_device() {
    // ib_srpt grants min(128, max_qp_wr) credits; the receive queue holds the credits and two
    // more receives (an initiator's answer to a target request, an I_LOGOUT). On a device
    // whose queues hold 64 work requests, the default 128 credits become 62, not a queue
    // pair the device refuses.
    let fx = on_small_device(64, json!({}));
    let mut i = fx
        .login_with(&fx.params(INI))
        .unwrap_or_else(|e| panic!("login on a device with max_qp_wr 64: {e:?}"));
    assert_eq!(i.login.req_lim_delta, 62);
    let q = &fx.qpairs()[0];
    assert_eq!(
        (&q["credits"], &q["receive_slots"]),
        (&json!(62), &json!(64)),
        "{q}"
    );
    // The whole window in flight (ib_srp keeps one credit for task management).
    let mut tags = Vec::new();
    for n in 0..61u32 {
        let off = n as usize * 4096;
        i.mem()[off..off + 4096].copy_from_slice(&pattern(u64::from(n), 4096));
        tags.push(
            i.command(
                0,
                &rtgt_tests::srp_initiator::rw10(0x2a, n * 8, 8),
                &rtgt_tests::srp_initiator::Data::Out(vec![(off, 4096)]),
                Layout::Direct,
                false,
            )
            .unwrap(),
        );
    }
    for t in tags {
        assert_eq!(i.wait(t).unwrap().status, 0);
    }
    for n in 0..61u32 {
        let (r, d) = i.read(0, n * 8, BS, 8, 1 << 20, Layout::Direct).unwrap();
        assert_eq!(r.status, 0);
        assert!(d == pattern(u64::from(n), 4096), "block {n}");
    }
    drop(i);
    fx.wait_until("the channel released", |f| f.qpairs().is_empty());
    // With a shared receive queue the channel has no receive queue of its own to fit.
    let fx = on_small_device(64, json!({"use_srq": true}));
    let i = fx.login_with(&fx.params(INI)).unwrap();
    assert_eq!(i.login.req_lim_delta, 64);
    drop(i);
    // Queues too small for any channel (fewer than 2 credits, or no room for the send
    // queue's spare slots): the login is rejected for insufficient resources.
    for max_qp_wr in [3, 5] {
        let fx = on_small_device(max_qp_wr, json!({}));
        assert_eq!(
            reason(fx.login_with(&fx.params(INI))),
            0x10001,
            "max_qp_wr {max_qp_wr}"
        );
    }
}
