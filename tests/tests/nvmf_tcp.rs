//! NVMe/TCP through the TCP transport over loopback, with the Rust NVMe/TCP test host: connect,
//! identify, verified I/O at queue depths 1–128 and sizes 512 B–1 MiB with digests off and on,
//! malformed PDUs answered with a C2HTermReq and the connection closed while another keeps
//! working, discovery, and core features (pause/resume, masking) over TCP.

use rtgt_tests::nvme_host::Workload;
use rtgt_tests::tcp_host::*;
use serde_json::json;
use std::time::Duration;
use target_core::nvme::Status;
use transport_tcp::host::HostError;
use transport_tcp::pdu::Digests;

const NQN: &str = "nqn.2016-06.io.rtgt:tcp";

fn env(opts: serde_json::Value) -> TcpEnv {
    let e = TcpEnv::new(2, opts);
    // 64 MiB of 512-byte blocks.
    e.subsystem(NQN, true, 131072, 512);
    e
}

#[test]
fn connect_identify_and_io() {
    let e = env(json!({}));
    let mut o = TcpConnectOpts::new(NQN);
    o.io_queues = 2;
    let mut c = e.connect(&o).expect("connect");
    assert_eq!(c.in_capsule, 4096, "IOCCSZ from in_capsule_data_size");
    let id = c.identify(1, 0).expect("identify controller");
    let subnqn = String::from_utf8_lossy(&id[768..1024]);
    assert!(subnqn.starts_with(NQN), "SUBNQN {subnqn}");
    let ns = c.identify(0, 1).expect("identify namespace");
    assert_eq!(u64::from_le_bytes(ns[0..8].try_into().unwrap()), 131072);
    write_read_verify(
        &mut c.io[0],
        &Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 16,
            qd: 4,
            seed: 7,
        },
    )
    .expect("verified I/O");
    drop(c);
    e.assert_quiescent(Duration::from_secs(10));
}

fn digests(header: bool, data: bool) -> Digests {
    Digests { header, data }
}

/// Verified I/O at queue depths 1–128 and sizes 512 B–1 MiB, with digests off, header only,
/// data only and both: in-capsule writes up to 4 KiB, R2T/H2CData above, C2HData (with the
/// SUCCESS flag) for reads, transfers spanning several pool buffers.
#[test]
fn queue_depths_sizes_and_digests() {
    let e = env(json!({"max_io_size": 1048576}));
    let mut seed = 1;
    for dg in [
        digests(false, false),
        digests(true, false),
        digests(false, true),
        digests(true, true),
    ] {
        let mut o = TcpConnectOpts::new(NQN);
        o.digests = dg;
        o.io_queues = 2;
        o.io_depth = 128;
        let mut c = e.connect(&o).expect("connect");
        let mut lba = 0u64;
        for (qd, sizes) in [
            (1usize, &[512usize, 4096, 8192, 131072, 1048576][..]),
            (16, &[512, 4096, 65536, 262144][..]),
            (128, &[512, 4096, 131072][..]),
        ] {
            for &size in sizes {
                let blocks = (size / 512) as u32;
                let count = (qd * 2).max(4);
                if lba + u64::from(blocks) * count as u64 > 131072 {
                    lba = 0;
                }
                let q = &mut c.io[seed as usize % 2];
                write_read_verify(
                    q,
                    &Workload {
                        nsid: 1,
                        bs: 512,
                        lba0: lba,
                        blocks,
                        count,
                        qd,
                        seed,
                    },
                )
                .unwrap_or_else(|err| panic!("digests {dg:?} qd {qd} size {size}: {err}"));
                lba += u64::from(blocks) * count as u64;
                seed += 1;
            }
        }
    }
    let stats = e.stats();
    let tcp: Vec<&serde_json::Value> = stats["poll_groups"]
        .as_array()
        .expect("poll groups")
        .iter()
        .flat_map(|g| g["transports"].as_array().into_iter().flatten())
        .filter(|t| t["trtype"] == "TCP")
        .collect();
    assert!(!tcp.is_empty(), "TCP poll group stats in {stats}");
    let sum = |k: &str| tcp.iter().map(|t| t[k].as_u64().unwrap_or(0)).sum::<u64>();
    assert!(sum("r2ts") > 0 && sum("c2h_data_pdus") > 0, "{stats}");
    assert_eq!(sum("data_digest_errors"), 0);
    // Every command came through a socket read and went back through a sendmsg, and the
    // reactor polled for them.
    assert!(
        sum("socket_reads") > 0 && sum("socket_sends") > 0 && sum("polls") > 0,
        "{stats}"
    );
    assert!(
        sum("socket_sends_blocked") <= sum("socket_sends"),
        "{stats}"
    );
    e.assert_quiescent(Duration::from_secs(10));
}

/// A common header of `ty` with these fields.
fn ch(ty: u8, flags: u8, hlen: u8, pdo: u8, plen: u32) -> Vec<u8> {
    let mut v = vec![ty, flags, hlen, pdo];
    v.extend_from_slice(&plen.to_le_bytes());
    v
}

/// Malformed PDUs, each on a connection of its own: the target answers with a C2HTermReq
/// carrying the right FES (and FEI), closes that connection, and a controller on other
/// connections keeps doing verified I/O.
#[test]
fn malformed_pdus_terminate_only_their_connection() {
    let e = env(json!({}));
    let mut good = e.connect(&TcpConnectOpts::new(NQN)).expect("connect");
    let capsule = |flags: u8, hlen: u8, plen: u32| {
        let mut v = ch(0x04, flags, hlen, 0, plen);
        v.resize(v.len() + usize::from(hlen).saturating_sub(8) + 64, 0);
        v
    };
    let mut h2c = ch(0x06, 0x04, 24, 24, 28);
    h2c.extend_from_slice(&[
        0, 0, 0x55, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4,
    ]);
    let mut icreq = ch(0x00, 0, 128, 0, 128);
    icreq.resize(128, 0);
    // (what, digests, bytes, FES, FEI)
    type Case = (&'static str, Digests, Vec<u8>, u16, Option<u32>);
    let cases: Vec<Case> = vec![
        (
            "unknown type",
            digests(false, false),
            ch(0x0F, 0, 8, 0, 8),
            1,
            Some(0),
        ),
        (
            "controller-only type (C2HData)",
            digests(false, false),
            ch(0x07, 0, 24, 0, 24),
            1,
            Some(0),
        ),
        (
            "reserved flag",
            digests(false, false),
            capsule(0x80, 72, 72),
            1,
            Some(1),
        ),
        (
            "bad HLEN",
            digests(false, false),
            capsule(0, 70, 70),
            1,
            Some(2),
        ),
        (
            "PLEN below the header",
            digests(false, false),
            capsule(0, 72, 16),
            1,
            Some(4),
        ),
        ("ICReq again", digests(false, false), icreq, 2, None),
        (
            "H2CData of no command",
            digests(false, false),
            h2c,
            1,
            Some(10),
        ),
        (
            "header digest mismatch",
            digests(true, false),
            {
                let mut v = capsule(0x01, 72, 76);
                v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
                v
            },
            3,
            None,
        ),
    ];
    for (what, dg, bytes, fes, fei) in cases {
        let cfg = transport_tcp::host::HostConfig {
            digests: dg,
            qid: 0,
            ..Default::default()
        };
        let mut q = TcpQueue::connect(e.to, cfg, 32).expect("ICReq");
        q.send_raw(&bytes).expect("send");
        let (err, closed) = q.wait_closed(Duration::from_secs(10));
        match err {
            Some(HostError::Terminated { fes: f, fei: i, .. }) => {
                assert_eq!(f, fes, "{what}: FES");
                if let Some(want) = fei {
                    assert_eq!(i, want, "{what}: FEI");
                }
            }
            other => panic!("{what}: no C2HTermReq: {other:?}"),
        }
        assert!(closed, "{what}: the connection stays open");
        write_read_verify(
            &mut good.io[0],
            &Workload {
                nsid: 1,
                bs: 512,
                lba0: 0,
                blocks: 8,
                count: 8,
                qd: 4,
                seed: fes as u32,
            },
        )
        .unwrap_or_else(|err| panic!("after {what}: {err}"));
    }
    // A data digest error is not fatal: the command completes with Transient Transport
    // Error and the connection goes on.
    let mut o = TcpConnectOpts::new(NQN);
    o.digests = digests(false, true);
    o.io_queues = 1;
    let mut c = e.connect(&o).expect("connect with data digests");
    let q = &mut c.io[0];
    let mut s = rtgt_tests::nvme_host::write_sqe(1, 0, 1);
    s.set_cid(9);
    q.host.submit_write(s, vec![0x5a; 512]).expect("submit");
    let mut out = q.host.take_output();
    let n = out.len();
    out[n - 8] ^= 0xff; // in the data, before its digest
    q.send_raw(&out).expect("send");
    let r = q.wait(9).expect("completion");
    assert_eq!(r.cqe.status, Status::TRANSIENT_TRANSPORT_ERROR);
    write_read_verify(
        q,
        &Workload {
            nsid: 1,
            bs: 512,
            lba0: 64,
            blocks: 8,
            count: 8,
            qd: 4,
            seed: 99,
        },
    )
    .expect("I/O after a data digest error");
    drop(c);
    drop(good);
    e.assert_quiescent(Duration::from_secs(10));
}

/// The discovery controller over TCP lists the TCP listener: TRTYPE 3, ADRFAM IPv4, TSAS
/// SECTYPE 0 (no TLS).
#[test]
fn discovery_log_lists_tcp_entries() {
    let e = env(json!({}));
    let mut o = TcpConnectOpts::new(target_core::nvme::DISCOVERY_NQN);
    o.io_queues = 0;
    let mut d = e.connect(&o).expect("discovery connect");
    let log = d.get_log(0x70, 4096).expect("discovery log");
    let numrec = u64::from_le_bytes(log[8..16].try_into().unwrap());
    assert_eq!(numrec, 1);
    let r = &log[1024..2048];
    assert_eq!(
        &r[0..4],
        &[3, 1, 2, 2],
        "TCP, IPv4, NVM subsystem, not required"
    );
    assert_eq!(
        String::from_utf8_lossy(&r[32..64]).trim_end(),
        e.to.port().to_string()
    );
    assert_eq!(
        String::from_utf8_lossy(&r[512..768]).trim_end(),
        "127.0.0.1"
    );
    assert_eq!(r[768], 0, "SECTYPE none");
    let nqn = String::from_utf8_lossy(&r[256..512]);
    assert!(nqn.starts_with(NQN), "{nqn}");
    // A listener of the discovery subsystem itself (port 8009 by convention; a free port
    // here) serves discovery too.
    let port = free_port();
    let addr = target_core::target::ListenAddr::new(
        "TCP",
        target_core::target::AdrFam::Ipv4,
        "127.0.0.1",
        &port.to_string(),
    );
    e.t.rt
        .block_on(
            e.t.target
                .add_listener(target_core::nvme::DISCOVERY_NQN, addr),
        )
        .expect("discovery listener");
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut d2 = TcpCtrl::connect(to, &o).expect("discovery connect on its own listener");
    let log = d2.get_log(0x70, 4096).expect("discovery log");
    assert_eq!(u64::from_le_bytes(log[8..16].try_into().unwrap()), 1);
}

/// Core features work over TCP unchanged: pause/resume holds new I/O until the resume, and
/// namespace masking hides a namespace from a host.
#[test]
fn pause_resume_and_masking_over_tcp() {
    let e = env(json!({}));
    let mut c = e.connect(&TcpConnectOpts::new(NQN)).expect("connect");
    write_read_verify(
        &mut c.io[0],
        &Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 4,
            qd: 2,
            seed: 3,
        },
    )
    .expect("I/O");
    e.t.rt.block_on(e.t.target.pause(NQN, None)).expect("pause");
    let cid = c.io[0]
        .submit(rtgt_tests::nvme_host::read_sqe(1, 0, 1), None, 512)
        .expect("submit");
    let held = std::time::Instant::now();
    // Nothing comes back while paused.
    let deadline = held + Duration::from_millis(300);
    while std::time::Instant::now() < deadline {
        c.io[0]
            .pump(deadline + Duration::from_secs(1))
            .expect("pump");
        assert!(
            c.io[0].host.poll_completion().is_none(),
            "completed while paused"
        );
    }
    e.t.rt.block_on(e.t.target.resume(NQN)).expect("resume");
    let r = c.io[0].wait(cid).expect("completion after resume");
    assert_eq!(r.cqe.status, Status::SUCCESS);

    // Masking: a namespace visible to another host only.
    const MASKED: &str = "nqn.2016-06.io.rtgt:tcp-masked";
    e.t.subsystem(MASKED, true);
    e.t.malloc("m_masked", 1024, 512);
    let nsid = e.t.rt.block_on(e.t.target.add_namespace(
        MASKED,
        target_core::target::NsParams {
            bdev_name: "m_masked".into(),
            no_auto_visible: true,
            ..Default::default()
        },
    ));
    let nsid = nsid.expect("add masked namespace");
    e.t.rt
        .block_on(e.t.target.add_listener(MASKED, e.listen_addr()))
        .expect("listener");
    let mut m = e
        .connect(&TcpConnectOpts::new(MASKED))
        .expect("connect masked");
    let list = m.identify(2, 0).expect("active namespace list");
    assert!(
        rtgt_tests::nvme_host::nsid_list(&list).is_empty(),
        "masked namespace listed"
    );
    e.t.rt
        .block_on(e.t.target.set_ns_host_visible(
            MASKED,
            nsid,
            rtgt_tests::nvme_host::HOSTNQN,
            true,
        ))
        .expect("ns_add_host");
    let list = m.identify(2, 0).expect("active namespace list");
    assert_eq!(rtgt_tests::nvme_host::nsid_list(&list), [nsid]);
    write_read_verify(
        &mut m.io[0],
        &Workload {
            nsid,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 4,
            qd: 2,
            seed: 5,
        },
    )
    .expect("I/O once visible");
}

/// A host that vanishes with commands in flight (writes waiting for R2T data, reads, in-capsule
/// writes): the target closes the connections, the commands in the bdev layer finish, and every
/// buffer and counter comes back; a new controller works.
#[test]
fn a_host_vanishing_mid_io_leaves_nothing_behind() {
    let e = env(json!({"num_shared_buffers": 64}));
    for round in 0..3u32 {
        let mut o = TcpConnectOpts::new(NQN);
        o.io_queues = 2;
        o.io_depth = 128;
        let mut c = e.connect(&o).expect("connect");
        for (i, q) in c.io.iter_mut().enumerate() {
            for k in 0..100u64 {
                let lba = k * 256;
                let s = match (k + i as u64 + u64::from(round)) % 3 {
                    0 => {
                        let s = rtgt_tests::nvme_host::write_sqe(1, lba, 256);
                        q.submit(s, Some(vec![7u8; 131072]), 0)
                    }
                    1 => q.submit(rtgt_tests::nvme_host::read_sqe(1, lba, 256), None, 131072),
                    _ => {
                        let s = rtgt_tests::nvme_host::write_sqe(1, lba, 8);
                        q.submit(s, Some(vec![9u8; 4096]), 0)
                    }
                };
                s.expect("submit");
            }
            // Send what was submitted (some of it) and vanish.
            let _ = q.pump(std::time::Instant::now() + Duration::from_secs(1));
        }
        drop(c);
        e.assert_quiescent(Duration::from_secs(10));
    }
    let mut c = e.connect(&TcpConnectOpts::new(NQN)).expect("connect after");
    write_read_verify(
        &mut c.io[0],
        &Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 256,
            count: 16,
            qd: 8,
            seed: 11,
        },
    )
    .expect("I/O after");
}
