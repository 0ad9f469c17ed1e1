//! The core's NVMe features over NVMe/TCP, unchanged: the same commands and helpers as the
//! NVMe/RDMA tests (`rtgt_tests::nvme_cmds`, `rtgt_tests::dhchap_env`) through the Rust
//! NVMe/TCP test host on loopback. ANA (listener states, path statuses 302h/301h, log page
//! 0Ch, the ANA change notice), DH-HMAC-CHAP (a keyed host connects, a wrong key is refused,
//! no secret in the logs or RPC output) and reservations between two hosts (83h, the
//! notification log page 80h and its AEN, Preempt and Abort waiting for the preempted host's
//! command: the TCP transport's parked completions). Pause/resume and masking are in
//! `nvmf_tcp.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use rtgt_tests::dhchap_env::{AuthEnv, SUB, log_text, secret};
use rtgt_tests::nvme_cmds::ana::{
    INACCESSIBLE, OPTIMIZED, PERSISTENT_LOSS, ana_log, two_path_subsystem,
};
use rtgt_tests::nvme_cmds::resv::{
    EA, WE, acquire, assert_registration_preempted, preempt_and_abort_aborts, register, release,
    report, resv_sqe,
};
use rtgt_tests::nvme_cmds::{NvmeQueue, get_log, park_aer, read_status, write_status};
use rtgt_tests::nvme_host::{DhchapOpts, HOSTNQN, Workload};
use rtgt_tests::tcp_host::*;
use serde_json::json;
use target_core::ana::AnaState;
use target_core::nvme::Status;
use target_core::nvme::ana::{
    ANA_CHANGE_DW0, ANA_INACCESSIBLE, ANA_PERSISTENT_LOSS, OAES_ANA_CHANGE,
};
use target_core::nvme::resv::{RESERVATION_CONFLICT, opc};
use target_core::target::{AdrFam, ListenAddr};

const OK: Status = Status::SUCCESS;

fn io(nsid: u32, lba0: u64, seed: u32) -> Workload {
    Workload {
        nsid,
        bs: 512,
        lba0,
        blocks: 8,
        count: 8,
        qd: 4,
        seed,
    }
}

fn tcp_addr(port: u16) -> ListenAddr {
    ListenAddr::new("TCP", AdrFam::Ipv4, "127.0.0.1", &port.to_string())
}

fn to(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const ANA_NQN: &str = "nqn.2016-06.io.rtgt:tcp-ana";

/// One subsystem with ANA reporting on two TCP listeners: A optimized, B inaccessible; a
/// controller through each path; identify and the log page of each path; 302h without DNR
/// through B; a switch notifies with the ANA change AEN and moves the I/O; persistent loss
/// answers 301h.
#[test]
fn ana_over_tcp() {
    let e = TcpEnv::new(2, json!({}));
    let t = &e.t;
    let (pa, pb) = (e.to.port(), free_port());
    let (la, lb) = (tcp_addr(pa), tcp_addr(pb));
    two_path_subsystem(t, ANA_NQN, &la, &lb);
    let set = |l: &ListenAddr, s: AnaState, g: Option<u32>| {
        t.rt.block_on(t.target.set_listener_ana_state(ANA_NQN, l, s, g))
            .unwrap()
    };
    let o = TcpConnectOpts::new(ANA_NQN);
    let mut a = TcpCtrl::connect(to(pa), &o).expect("connect through A");
    let mut b = TcpCtrl::connect(to(pb), &o).expect("connect through B");

    let id = a.identify(1, 0).unwrap();
    assert_eq!(
        id[76] & 0x0B,
        0x0B,
        "CMIC: multi-port, multi-controller, ANA"
    );
    let oaes = u32::from_le_bytes(id[92..96].try_into().unwrap());
    assert_ne!(oaes & OAES_ANA_CHANGE, 0, "OAES: ANA change notices");
    let ns_b = b.identify(0, 2).unwrap();
    assert_eq!(
        u32::from_le_bytes(ns_b[92..96].try_into().unwrap()),
        2,
        "ANAGRPID"
    );

    // Each path reads its own states; 0Ch is among the supported log pages.
    let sup = get_log(&mut a.admin, 0x00, 0, 0, 1024, false).unwrap();
    assert_eq!(sup[0x0C * 4] & 1, 1, "LID 0Ch supported");
    let (c0, ga) = ana_log(&mut a.admin, false);
    let (_, gb) = ana_log(&mut b.admin, false);
    assert_eq!(ga, [(1, vec![1], OPTIMIZED), (2, vec![2], OPTIMIZED)]);
    assert_eq!(gb, [(1, vec![1], INACCESSIBLE), (2, vec![2], INACCESSIBLE)]);

    assert_eq!(read_status(&mut a.io[0], 1), OK);
    let s = read_status(&mut b.io[0], 1);
    assert_eq!(s, ANA_INACCESSIBLE, "302h through the inaccessible path");
    assert!(!s.is_dnr(), "the host may retry on another path");

    // The switch: A demoted (its AER completes with the ANA change notice), B promoted.
    let aer_a = park_aer(&mut a.admin, OAES_ANA_CHANGE);
    let aer_b = park_aer(&mut b.admin, OAES_ANA_CHANGE);
    set(&la, AnaState::Inaccessible, None);
    assert_eq!(a.admin.wait_cmd(aer_a).unwrap().cqe.dw0, ANA_CHANGE_DW0);
    set(&lb, AnaState::Optimized, None);
    assert_eq!(b.admin.wait_cmd(aer_b).unwrap().cqe.dw0, ANA_CHANGE_DW0);
    let (ca, ga) = ana_log(&mut a.admin, false);
    let (cb, gb) = ana_log(&mut b.admin, false);
    assert!(ca > c0 && cb == ca, "the change count moved: {c0} -> {ca}");
    assert!(ga.iter().all(|g| g.2 == INACCESSIBLE), "{ga:?}");
    assert!(gb.iter().all(|g| g.2 == OPTIMIZED), "{gb:?}");
    assert_eq!(read_status(&mut a.io[0], 2), ANA_INACCESSIBLE);
    write_read_verify(&mut b.io[0], &io(2, 0, 3)).expect("I/O through the promoted path");

    // Persistent loss of group 1 on A: 301h; the log says so; group 2 still 302h.
    let aer_a = park_aer(&mut a.admin, OAES_ANA_CHANGE);
    set(&la, AnaState::PersistentLoss, Some(1));
    assert_eq!(a.admin.wait_cmd(aer_a).unwrap().cqe.dw0, ANA_CHANGE_DW0);
    let (_, ga) = ana_log(&mut a.admin, false);
    assert_eq!(
        ga,
        [(1, vec![1], PERSISTENT_LOSS), (2, vec![2], INACCESSIBLE)]
    );
    assert_eq!(read_status(&mut a.io[0], 1), ANA_PERSISTENT_LOSS, "301h");
    assert_eq!(read_status(&mut a.io[0], 2), ANA_INACCESSIBLE, "302h");
    assert_eq!(read_status(&mut b.io[0], 1), OK);
    drop((a, b));
    e.assert_quiescent(Duration::from_secs(10));
}

fn auth_opts(key: Option<u8>, ctrl_key: Option<u8>) -> TcpConnectOpts {
    let mut o = TcpConnectOpts::new(SUB);
    o.dhchap = key.map(|k| DhchapOpts::new(&secret(k), ctrl_key.map(secret).as_deref()));
    o
}

/// A host with its key connects (every queue authenticated, bidirectionally too) and does
/// I/O; a wrong key, or none, is refused and the connection closed; no secret in the logs or
/// the RPC output.
#[test]
fn dhchap_over_tcp() {
    let e = AuthEnv::new("TCP");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0", "dhchap_ctrlr_key": "key2"}),
    );
    let mut c = TcpCtrl::connect(e.to, &auth_opts(Some(0), Some(2))).expect("authenticated");
    for (i, q) in c.io.iter_mut().enumerate() {
        write_read_verify(q, &io(1, 64 * i as u64, 7 + i as u32)).expect("I/O");
    }
    let qp = e.qpairs();
    assert_eq!(qp.len(), 3, "{qp:?}");
    for q in &qp {
        assert_eq!(q["auth"]["state"], "completed", "{q}");
        assert_eq!(q["listen_address"]["trtype"], "TCP", "{q}");
    }
    drop(c);

    // The wrong key: the target's AUTH_Failure1, then the connection closes.
    let err = TcpCtrl::connect(e.to, &auth_opts(Some(1), None))
        .err()
        .expect("a wrong key is refused");
    assert!(err.contains("Auth(Failed)"), "{err}");
    // No key at all: the host cannot answer.
    let err = TcpCtrl::connect(e.to, &auth_opts(None, None))
        .err()
        .expect("no key is refused");
    assert!(err.contains("NoKey"), "{err}");
    assert!(
        log_text()
            .lines()
            .any(|l| l.contains("authentication failed") && l.contains(HOSTNQN)),
        "a failure is logged with the host NQN"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !e.qpairs().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "refused queues stay: {:?}",
            e.qpairs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    e.assert_no_secret_anywhere();
}

const RESV_NQN: &str = "nqn.2016-06.io.spdk:tcp-resv";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-00000000000b";

fn resv_host(e: &TcpEnv, hostnqn: &str, id: u8) -> TcpCtrl {
    let mut o = TcpConnectOpts::new(RESV_NQN);
    o.hostnqn = hostnqn.into();
    o.hostid = Some([id; 16]);
    o.io_queues = 1;
    e.connect(&o).expect("connect")
}

/// Two hosts over TCP: register and acquire, the other host's write gets 83h, a preempted
/// host gets the notification log page and its AEN, and Preempt and Abort completes only after
/// the preempted host's write held in the bdev — the TCP transport parks that completion until
/// the command is done.
#[test]
fn reservations_over_tcp() {
    let e = TcpEnv::new(2, json!({}));
    e.t.subsystem(RESV_NQN, true);
    let gate = e.t.gated("g", 2048, 512);
    e.t.add_ns(RESV_NQN, "g");
    e.t.rt
        .block_on(e.t.target.add_listener(RESV_NQN, e.listen_addr()))
        .unwrap();
    let mut a = resv_host(&e, HOST_A, 0xA1);
    let mut b = resv_host(&e, HOST_B, 0xB2);

    assert_eq!(register(&mut a.io[0], 0, 0, 0xAA), OK);
    assert_eq!(register(&mut b.io[0], 0, 0, 0xBB), OK);
    assert_eq!(acquire(&mut a.io[0], 0, WE, 0xAA, 0), OK);
    assert_eq!(
        write_status(&mut b.io[0], 1),
        RESERVATION_CONFLICT,
        "B's write"
    );
    assert_eq!(read_status(&mut b.io[0], 1), OK, "B's read");
    assert_eq!(write_status(&mut a.io[0], 1), OK, "the holder's write");
    let (_, rtype, regs) = report(&mut b.io[0]);
    assert_eq!(
        (rtype, regs),
        (1, vec![(0xAA, true, [0xA1; 16]), (0xBB, false, [0xB2; 16])])
    );

    // A Reservation Report is shorter than the 4 KiB asked for: the rest comes as zeros, not
    // as what the pool buffer held before (a read of A's 0x5A block just used one).
    let d = b.io[0]
        .exec(rtgt_tests::nvme_host::read_sqe(1, 0, 8), None, 4096)
        .unwrap()
        .data;
    assert_eq!(&d[..512], &[0x5A; 512][..]);
    let mut s = resv_sqe(opc::REPORT, 4096 / 4 - 1);
    s.set_cdw(11, 1);
    let d = b.io[0].exec(s, None, 4096).unwrap().data;
    assert_eq!(d.len(), 4096);
    assert!(
        d[64 + 2 * 64..].iter().all(|&x| x == 0),
        "stale bytes past the report"
    );

    // B preempts A: A's parked AER reports the notification log page, which names namespace 1.
    let aer = park_aer(&mut a.admin, 0);
    assert_eq!(acquire(&mut b.io[0], 1, EA, 0xBB, 0xAA), OK);
    let dw0 = a.admin.wait_cmd(aer).unwrap().cqe.dw0;
    assert_registration_preempted(dw0, &mut a.admin, &mut b.admin);
    assert_eq!(
        read_status(&mut a.io[0], 1),
        RESERVATION_CONFLICT,
        "EA: reads too"
    );

    // Preempt and Abort: A (registered again, holding Write Exclusive) has a write held in the
    // bdev; B's Preempt and Abort waits for it and the write ends aborted, not successful.
    assert_eq!(release(&mut b.io[0], 0, EA, 0xBB), OK);
    assert_eq!(register(&mut a.io[0], 0, 0, 0xA2), OK);
    assert_eq!(acquire(&mut a.io[0], 0, WE, 0xA2, 0), OK);
    preempt_and_abort_aborts(&mut a.io[0], &mut b.io[0], &gate, 0xA2, 0xBB);
    drop((a, b));
    e.assert_quiescent(Duration::from_secs(10));
}
