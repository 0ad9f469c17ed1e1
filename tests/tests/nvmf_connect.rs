//! Connection establishment and everything a host can get wrong: NVMe/RDMA private data,
//! Connect (unknown subsystem, host not allowed, bad controller id / queue id), malformed
//! capsules and SGLs; plus discovery, AERs with namespace notices, Abort, Keep Alive.

use std::time::Duration;

use rtgt_tests::nvme_host::*;
use serde_json::json;
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::{admin_opc, fctype, io_opc, prop};
use target_core::nvme::{DISCOVERY_NQN, SglDescriptor, Sqe, Status};
use target_core::target::NsParams;

const A: &str = "nqn.2016-06.io.rtgt:a";
const B: &str = "nqn.2016-06.io.rtgt:b";
const C: &str = "nqn.2016-06.io.rtgt:c";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";

fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

#[test]
fn discovery_lists_what_the_host_may_access() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(A, true, 1024, 512);
    e.subsystem(B, false, 1024, 512);
    e.subsystem(C, false, 1024, 512);
    e.t.target.add_host(B, HOSTNQN).unwrap();
    e.t.target.add_host(C, OTHER_HOST).unwrap();
    let mut o = e.opts(DISCOVERY_NQN);
    o.io_queues = 0;
    let mut d = e.connect(o).expect("discovery connect");
    assert_eq!(d.id_ctrl[111], 2, "CNTRLTYPE discovery");
    assert_eq!(cstr(&d.id_ctrl[768..1024]), DISCOVERY_NQN);
    let hdr = d.get_log(0x70, 0, 0, 20, true).unwrap();
    let genctr = u64::from_le_bytes(hdr[0..8].try_into().unwrap());
    let numrec = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
    assert_eq!(numrec, 2, "a and b, not c");
    let entries = d.get_log(0x70, 0, 1024, 4096, false).unwrap();
    let nqns: Vec<String> = (0..2)
        .map(|i| cstr(&entries[i * 1024 + 256..i * 1024 + 512]))
        .collect();
    assert_eq!(nqns, [A, B]);
    for i in 0..2 {
        let r = &entries[i * 1024..(i + 1) * 1024];
        assert_eq!(&r[0..3], &[1, 1, 2], "RDMA, IPv4, NVM subsystem");
        assert_eq!(r[3], 2, "secure channel not required");
        assert_eq!(u16::from_le_bytes([r[6], r[7]]), 0xFFFF);
        // ASCII string fields: space-padded.
        assert_eq!(String::from_utf8_lossy(&r[32..64]).trim_end(), "4420");
        assert_eq!(r[63], b' ');
        assert_eq!(
            String::from_utf8_lossy(&r[512..768]).trim_end(),
            rtgt_tests::TARGET_IP
        );
        assert_eq!(r[767], b' ');
        assert_eq!(&r[768..771], &[1, 1, 1], "RC, not specified, RDMA_CM");
    }
    assert!(entries[2048..].iter().all(|&b| b == 0), "zero past the end");
    let hdr2 = d.get_log(0x70, 0, 0, 20, true).unwrap();
    assert_eq!(&hdr2[0..8], &genctr.to_le_bytes(), "GENCTR stable");
    // Allowing the host on c changes the log and its generation.
    e.t.target.add_host(C, HOSTNQN).unwrap();
    let hdr3 = d.get_log(0x70, 0, 0, 20, true).unwrap();
    assert_eq!(u64::from_le_bytes(hdr3[8..16].try_into().unwrap()), 3);
    assert_ne!(&hdr3[0..8], &genctr.to_le_bytes());
    // Identify other than the controller is refused on discovery.
    let mut s = Sqe::new(admin_opc::IDENTIFY, 0);
    s.set_nsid(1).set_cdw(10, 0);
    let r = d
        .admin_cmd(
            s,
            Data::KeyedRead {
                len: 4096,
                invalidate: true,
            },
        )
        .unwrap();
    assert_eq!(r.cqe.status, Status::INVALID_FIELD);
    d.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

/// The subsystem NQNs of a discovery log, read with RAE = 0 (which re-arms the notice).
fn discovery_nqns(d: &mut HostCtrl) -> Vec<String> {
    let log = d.get_log(0x70, 0, 0, 4096, false).unwrap();
    let numrec = u64::from_le_bytes(log[8..16].try_into().unwrap()) as usize;
    (1..=numrec)
        .map(|i| cstr(&log[i * 1024 + 256..i * 1024 + 512]))
        .collect()
}

/// Issue 13 item 9: the discovery log change notice was advertised (OAES bit 31, Async Event
/// Configuration bit 31) but never sent: a persistent discovery controller was not told about
/// new subsystems, listeners or hosts.
#[test]
fn a_persistent_discovery_controller_is_told_of_every_change() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(A, true, 1024, 512);
    // Persistent: KATO set, AEN enabled, an AER outstanding (what nvme-cli's persistent
    // discovery controller and the kernel do).
    let mut o = e.opts(DISCOVERY_NQN);
    o.io_queues = 0;
    o.kato_ms = 30000;
    let mut d = e.connect(o).expect("discovery connect");
    let oaes = u32::from_le_bytes(d.id_ctrl[92..96].try_into().unwrap());
    assert_eq!(oaes, 1 << 31);
    let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
    s.set_cdw(10, 0x0B).set_cdw(11, 1 << 31);
    d.admin_cmd(s, Data::None).unwrap().ok().unwrap();
    assert_eq!(discovery_nqns(&mut d), [A]);
    let listener = target_core::target::ListenAddr::new(
        "RDMA",
        target_core::target::AdrFam::Ipv4,
        rtgt_tests::TARGET_IP,
        "4420",
    );
    let t = &e.t;
    let rt = &t.rt;
    type Change<'a> = (&'a str, Box<dyn Fn() + 'a>, Vec<&'a str>);
    let changes: Vec<Change> = vec![
        (
            "subsystem created with a listener",
            Box::new(|| {
                t.subsystem(B, true);
                t.listen(B, "RDMA", 4420);
            }),
            vec![A, B],
        ),
        (
            "any host disallowed",
            Box::new(|| rt.block_on(t.target.allow_any_host(B, false)).unwrap()),
            vec![A],
        ),
        (
            "host allowed",
            Box::new(|| t.target.add_host(B, HOSTNQN).unwrap()),
            vec![A, B],
        ),
        (
            "host removed",
            Box::new(|| rt.block_on(t.target.remove_host(B, HOSTNQN)).unwrap()),
            vec![A],
        ),
        (
            "any host allowed",
            Box::new(|| rt.block_on(t.target.allow_any_host(B, true)).unwrap()),
            vec![A, B],
        ),
        (
            "listener removed",
            Box::new(|| {
                rt.block_on(t.target.remove_listener(B, listener.clone()))
                    .unwrap()
            }),
            vec![A],
        ),
        (
            "listener added",
            Box::new(|| {
                t.listen(B, "RDMA", 4420);
            }),
            vec![A, B],
        ),
        (
            "subsystem deleted",
            Box::new(|| rt.block_on(t.target.delete_subsystem(B)).unwrap()),
            vec![A],
        ),
    ];
    for (what, change, want) in changes {
        let cid = d
            .admin
            .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
            .unwrap();
        d.admin.poll().unwrap();
        assert!(!d.admin.is_done(cid), "AER answered before the change");
        change();
        let r = d
            .admin
            .wait_for(cid, Duration::from_secs(5))
            .unwrap_or_else(|err| panic!("no discovery log change notice for '{what}': {err}"));
        assert!(r.cqe.status.is_success(), "{what}: {:?}", r.cqe.status);
        assert_eq!(r.cqe.dw0, 0x0070_F002, "{what}");
        assert_eq!(discovery_nqns(&mut d), want, "{what}");
    }
    // A change this host cannot see sends nothing.
    let cid = d
        .admin
        .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
        .unwrap();
    e.t.subsystem(C, false);
    e.t.target.add_host(C, OTHER_HOST).unwrap();
    e.t.listen(C, "RDMA", 4420);
    std::thread::sleep(Duration::from_millis(300));
    d.admin.poll().unwrap();
    assert!(
        !d.admin.is_done(cid),
        "a notice for a subsystem the host cannot see"
    );
    assert_eq!(discovery_nqns(&mut d), [A]);
    d.admin.disconnect();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn connect_refusals() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(A, false, 1024, 512);
    e.t.subsystem(B, true); // no listener
    e.t.target.add_host(A, OTHER_HOST).unwrap();
    let err = |r: Result<HostCtrl, HostError>| match r {
        Err(HostError::Nvme(c)) => c,
        Err(x) => panic!("unexpected error {x}"),
        Ok(_) => panic!("connected"),
    };
    // Not allowed: Connect Invalid Host with DNR.
    let c = err(e.connect(e.opts(A)));
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
    assert_eq!(c.status.linux(), 0x4184);
    // Unknown subsystem, and one that is not exported on this listener: IATTR 1, IPO 256.
    for nqn in ["nqn.2016-06.io.rtgt:nope", B] {
        let c = err(e.connect(e.opts(nqn)));
        assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS);
        assert_eq!(c.dw0, 0x0001_0100, "{nqn}");
    }
    // The allowed host connects; nothing was left behind by the refusals.
    let mut o = e.opts(A);
    o.hostnqn = OTHER_HOST.into();
    let mut ok = e.connect(o.clone()).unwrap();
    assert_eq!(e.controllers(A).len(), 1);
    assert_eq!(e.controllers(A)[0].hostnqn, OTHER_HOST);
    assert_eq!(e.controllers(A)[0].num_io_qpairs, 2);

    // I/O queue Connects that must fail.
    let qo = |qid: u16, cntlid: u16| QueueOpts {
        qid,
        depth: 32,
        max_io: 4096,
        max_in_capsule: 4096,
        cntlid,
    };
    let q_err = |qid: u16, cntlid: u16, o: &ConnectOpts| {
        let mut q = HostQueue::connect(
            &e.t.fabric,
            None,
            e.to,
            qo(qid, cntlid),
            &CmOverride::default(),
        )
        .unwrap();
        fabrics_connect(&mut q, o, cntlid, 0, true).unwrap().cqe
    };
    // Unknown controller id: IATTR 1, IPO 16.
    let c = q_err(3, ok.cntlid + 100, &o);
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 0x0001_0010)
    );
    // A queue id that is already connected.
    let c = q_err(1, ok.cntlid, &o);
    assert_eq!(c.status, Status::COMMAND_SEQUENCE_ERROR);
    // Another host using this controller id: HOSTNQN mismatch, IATTR 1 IPO 512.
    let mut other = o.clone();
    other.hostnqn = HOSTNQN.into();
    e.t.target.add_host(A, HOSTNQN).unwrap();
    let c = q_err(3, ok.cntlid, &other);
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(c.dw0 >> 16, 1);
    // A queue id above what Set Features granted (2 queues): IPO 42.
    let c = q_err(3, ok.cntlid, &o);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 42));
    // The controller still works.
    ok.keep_alive().unwrap();
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 1,
        count: 4,
        qd: 2,
        seed: 1,
    };
    write_read_verify(&mut ok.io[1], &w, Mode::InCapsule).unwrap();
    ok.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn private_data_rejects() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(A, true, 1024, 512);
    let rec = |qid: u16, hrq: u16, hsq: u16| {
        let mut b = vec![0u8; 32];
        b[2..4].copy_from_slice(&qid.to_le_bytes());
        b[4..6].copy_from_slice(&hrq.to_le_bytes());
        b[6..8].copy_from_slice(&hsq.to_le_bytes());
        b
    };
    let mut bad_fmt = rec(0, 32, 31);
    bad_fmt[0] = 1;
    for (name, pd, rr, want) in [
        ("RECFMT", Some(bad_fmt), None, 2u16),
        ("QID", Some(rec(200, 32, 31)), None, 3),
        ("HSQSIZE 0", Some(rec(1, 32, 0)), None, 4),
        ("I/O HSQSIZE > MQES", Some(rec(1, 129, 128)), None, 4),
        (
            "admin HSQSIZE > max_aq_depth",
            Some(rec(0, 129, 128)),
            None,
            4,
        ),
        ("HRQSIZE < HSQSIZE+1", Some(rec(1, 16, 31)), None, 5),
        ("IRD 0", None, Some(0u8), 7),
    ] {
        let r = HostQueue::connect(
            &e.t.fabric,
            None,
            e.to,
            QueueOpts::default(),
            &CmOverride {
                private_data: pd,
                responder_resources: rr,
            },
        );
        match r {
            Err(HostError::Rejected(s)) => assert_eq!(s, Some(want), "{name}"),
            Err(x) => panic!("{name}: {x}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
    // The admin queue may use max_aq_depth (128 by default), above Linux's 32.
    let q = HostQueue::connect(
        &e.t.fabric,
        None,
        e.to,
        QueueOpts {
            depth: 64,
            ..QueueOpts::default()
        },
        &CmOverride::default(),
    )
    .unwrap();
    assert_eq!(q.crqsize, 64);
    drop(q);
    let c = e.connect(e.opts(A)).unwrap();
    assert_eq!(c.io[0].crqsize, 32, "CRQSIZE = negotiated depth");
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn malformed_commands_get_the_right_status() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(A, true, 2048, 512);
    // Before Connect, only Connect is valid.
    let mut q = HostQueue::connect(
        &e.t.fabric,
        None,
        e.to,
        QueueOpts::default(),
        &CmOverride::default(),
    )
    .unwrap();
    let r = q
        .cmd(build::property_get(0, prop::CAP, true), Data::None)
        .unwrap();
    assert_eq!(r.cqe.status, Status::INVALID_OPCODE);
    drop(q);

    let mut c = e.connect(e.opts(A)).unwrap();
    let st = |r: Result<Completion, HostError>| r.unwrap().cqe.status;
    // Admin queue.
    let o = c.opts.clone();
    assert_eq!(
        fabrics_connect(&mut c.admin, &o, 0xFFFF, 0, false)
            .unwrap()
            .cqe
            .status,
        Status::COMMAND_SEQUENCE_ERROR
    );
    assert_eq!(
        st(c.admin_cmd(Sqe::new(0xC5, 0), Data::None)),
        Status::INVALID_OPCODE
    );
    let mut s = Sqe::new(admin_opc::IDENTIFY, 0);
    s.set_cdw(10, 1);
    assert_eq!(
        st(c.admin_cmd(
            s,
            Data::KeyedRead {
                len: 100,
                invalidate: true
            }
        )),
        Status::DATA_SGL_LENGTH_INVALID
    );
    assert_eq!(
        st(c.admin_cmd(fabrics_sqe(0xC0), Data::None)),
        Status::INVALID_OPCODE
    );
    // I/O queue.
    assert_eq!(c.id_ctrl[77], 5, "MDTS: 128 KiB");
    let q = &mut c.io[0];
    let data = vec![7u8; 4096];
    let (addr, rkey) = q.raw_data_region();
    assert_eq!(
        st(q.cmd(rw_sqe(0x7E, 1, 0, 1), Data::None)),
        Status::INVALID_OPCODE
    );
    let bit_bucket = SglDescriptor::unkeyed(1, 0, 0, 512);
    assert_eq!(
        st(q.cmd(
            write_sqe(1, 0, 1),
            Data::Raw {
                sgl: bit_bucket,
                capsule: &[]
            }
        )),
        Status::SGL_TYPE_INVALID
    );
    let mut odd_keyed = SglDescriptor::keyed(addr, 512, rkey, false);
    odd_keyed.0[15] = 0x45;
    assert_eq!(
        st(q.cmd(
            write_sqe(1, 0, 1),
            Data::Raw {
                sgl: odd_keyed,
                capsule: &[]
            }
        )),
        Status::INVALID_FIELD
    );
    assert_eq!(
        st(q.cmd(
            write_sqe(1, 0, 1),
            Data::Raw {
                sgl: SglDescriptor::in_capsule(5000, 512),
                capsule: &data[..512]
            }
        )),
        Status::SGL_OFFSET_INVALID
    );
    assert_eq!(
        st(q.cmd(
            write_sqe(1, 0, 2),
            Data::Raw {
                sgl: SglDescriptor::in_capsule(0, 1024),
                capsule: &data[..512]
            }
        )),
        Status::DATA_SGL_LENGTH_INVALID
    );
    assert_eq!(
        st(q.cmd(
            read_sqe(1, 0, 1),
            Data::Raw {
                sgl: SglDescriptor::in_capsule(0, 512),
                capsule: &data[..512]
            }
        )),
        Status::INVALID_FIELD
    );
    assert_eq!(
        st(q.cmd(
            write_sqe(1, 0, 8),
            Data::KeyedWrite {
                bytes: &data[..512],
                invalidate: true
            }
        )),
        Status::DATA_SGL_LENGTH_INVALID
    );
    // A transfer above MDTS: Invalid Field, before any data moves.
    assert_eq!(
        st(q.cmd(
            read_sqe(1, 0, 512),
            Data::Raw {
                sgl: SglDescriptor::keyed(addr, 256 * 1024, rkey, false),
                capsule: &[]
            }
        )),
        Status::INVALID_FIELD
    );
    assert_eq!(
        st(q.cmd(write_sqe(1, 2047, 2), Data::InCapsule(&data[..1024]))),
        Status::LBA_OUT_OF_RANGE
    );
    for nsid in [0, 5, 0xFFFF_FFFF] {
        assert_eq!(
            st(q.cmd(
                read_sqe(nsid, 0, 1),
                Data::KeyedRead {
                    len: 512,
                    invalidate: true
                }
            )),
            Status::INVALID_NAMESPACE,
            "nsid {nsid:#x}"
        );
    }
    let mut fused = write_sqe(1, 0, 1);
    fused.set_flags(0x41);
    assert_eq!(
        st(q.cmd(fused, Data::InCapsule(&data[..512]))),
        Status::INVALID_FIELD
    );
    assert_eq!(
        st(q.cmd(fabrics_sqe(fctype::PROPERTY_GET), Data::None)),
        Status::INVALID_OPCODE
    );
    // Errors land in the Error Information log.
    let log = c.get_log(0x01, 0xFFFF_FFFF, 0, 64, false).unwrap();
    assert_ne!(
        u64::from_le_bytes(log[0..8].try_into().unwrap()),
        0,
        "error count"
    );

    // A bad rkey breaks that queue pair only (RDMA READ access error); the rest keeps serving.
    let bad = SglDescriptor::keyed(addr, 512, rkey ^ 0x5a5a_0000, false);
    let q1 = &mut c.io[1];
    let _ = q1.submit(
        write_sqe(1, 0, 1),
        Data::Raw {
            sgl: bad,
            capsule: &[],
        },
    );
    assert!(
        q1.wait_disconnected(Duration::from_secs(10)),
        "queue with a bad rkey is torn down"
    );
    // A capsule shorter than a command: the target drops the queue as well.
    let mut q = HostQueue::connect(
        &e.t.fabric,
        None,
        e.to,
        QueueOpts {
            qid: 2,
            depth: 8,
            max_io: 4096,
            max_in_capsule: 4096,
            cntlid: c.cntlid,
        },
        &CmOverride::default(),
    )
    .unwrap();
    q.send_raw_capsule(&[0x02; 32]).unwrap();
    assert!(q.wait_disconnected(Duration::from_secs(10)));
    drop(q);
    // A capsule larger than the receive buffer fails at the RDMA level.
    let mut q = HostQueue::connect(
        &e.t.fabric,
        None,
        e.to,
        QueueOpts {
            qid: 2,
            depth: 8,
            max_io: 4096,
            max_in_capsule: 8192,
            cntlid: c.cntlid,
        },
        &CmOverride::default(),
    )
    .unwrap();
    q.send_raw_capsule(&vec![0u8; 64 + 8192]).unwrap();
    assert!(q.wait_disconnected(Duration::from_secs(10)));
    drop(q);
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 100,
        blocks: 4,
        count: 16,
        qd: 8,
        seed: 2,
    };
    write_read_verify(&mut c.io[0], &w, Mode::KeyedInvalidate).unwrap();
    c.keep_alive().unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn aer_reports_namespace_changes_and_abort_cancels_it() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(A, true, 1024, 512);
    e.t.malloc("extra", 512, 512);
    e.t.malloc("extra2", 512, 512);
    let mut c = e.connect(e.opts(A)).unwrap();
    let oaes = u32::from_le_bytes(c.id_ctrl[92..96].try_into().unwrap());
    assert_ne!(oaes & 1 << 8, 0);
    let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
    s.set_cdw(10, 0x0B).set_cdw(11, 1 << 8);
    c.admin_cmd(s, Data::None).unwrap().ok().unwrap();
    let aer = c
        .admin
        .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
        .unwrap();
    // The AER stays pending, and does not block other admin commands or a pause.
    c.keep_alive().unwrap();
    e.t.rt.block_on(e.t.target.pause(A, None)).unwrap();
    e.t.rt.block_on(e.t.target.resume(A)).unwrap();
    assert!(!c.admin.is_done(aer));
    let nsid =
        e.t.rt
            .block_on(e.t.target.add_namespace(
                A,
                NsParams {
                    bdev_name: "extra".into(),
                    ..Default::default()
                },
            ))
            .unwrap();
    let r = c.admin.wait(aer).unwrap().ok().unwrap();
    assert_eq!(r.cqe.dw0, 0x0004_0002);
    let list = c.get_log(0x04, 0xFFFF_FFFF, 0, 4096, false).unwrap();
    assert_eq!(u32::from_le_bytes(list[0..4].try_into().unwrap()), nsid);
    let ids = c.identify(2, 0).unwrap();
    assert_eq!(u32::from_le_bytes(ids[4..8].try_into().unwrap()), nsid);
    // Abort of a parked AER completes it with Aborted by Request.
    let aer = c
        .admin
        .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
        .unwrap();
    let mut ab = Sqe::new(admin_opc::ABORT, 0);
    ab.set_cdw(10, u32::from(aer) << 16);
    let r = c.admin_cmd(ab, Data::None).unwrap().ok().unwrap();
    assert_eq!(r.cqe.dw0 & 1, 0, "aborted");
    assert_eq!(
        c.admin.wait(aer).unwrap().cqe.status,
        Status::ABORTED_BY_REQUEST
    );
    // Abort of something else: not aborted.
    let mut ab = Sqe::new(admin_opc::ABORT, 0);
    ab.set_cdw(10, 1 | 0x1234 << 16);
    assert_eq!(
        c.admin_cmd(ab, Data::None).unwrap().ok().unwrap().cqe.dw0 & 1,
        1
    );
    // A new AER and another namespace: notice again (the log page read cleared the mask).
    let aer = c
        .admin
        .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
        .unwrap();
    e.t.rt
        .block_on(e.t.target.add_namespace(
            A,
            NsParams {
                bdev_name: "extra2".into(),
                ..Default::default()
            },
        ))
        .unwrap();
    assert_eq!(c.admin.wait(aer).unwrap().cqe.dw0, 0x0004_0002);
    // I/O to the new namespace works.
    let w = Workload {
        nsid,
        bs: 512,
        lba0: 0,
        blocks: 1,
        count: 4,
        qd: 4,
        seed: 8,
    };
    write_read_verify(&mut c.io[0], &w, Mode::InCapsule).unwrap();
    // Disconnect with an AER outstanding: dropped silently, nothing leaks.
    let _ = c
        .admin
        .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
        .unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn identify_matches_what_linux_checks() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(A, true, 1024, 512);
    let mut c = e.connect(e.opts(A)).unwrap();
    let id = c.id_ctrl.clone();
    let le32 = |o: usize| u32::from_le_bytes(id[o..o + 4].try_into().unwrap());
    assert_eq!(cstr(&id[768..1024]), A);
    assert_eq!(id[111], 1, "I/O controller");
    assert_ne!(u16::from_le_bytes([id[320], id[321]]), 0, "KAS");
    assert_eq!(
        le32(536) & 0x0010_0005,
        0x0010_0005,
        "SGLS keyed + in-capsule"
    );
    assert_eq!(le32(1792), 4 + 4096 / 16, "IOCCSZ");
    assert_eq!(le32(1796), 1, "IORCSZ");
    assert_eq!(u16::from_le_bytes([id[1800], id[1801]]), 0, "ICDOFF");
    assert!(u16::from_le_bytes([id[514], id[515]]) >= 128, "MAXCMD");
    // Namespace identification descriptors succeed.
    let d = c.identify(3, 1).unwrap();
    assert_ne!(d[0], 0);
    let cap = c.prop_get(prop::CAP, true).unwrap();
    assert_eq!(cap & 0xFFFF, 127, "MQES");
    // SMART log (hwmon).
    let smart = c.get_log(0x02, 0xFFFF_FFFF, 0, 512, false).unwrap();
    assert_eq!(smart[3], 100);
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn keyed_admin_connect_and_keyed_io_connect_without_in_capsule() {
    let e = NvmfEnv::new(1, json!({"in_capsule_data_size": 0}));
    e.subsystem(A, true, 1024, 512);
    let mut o = e.opts(A);
    o.in_capsule_connect = false;
    let mut c = e.connect(o).unwrap();
    assert_eq!(c.in_capsule, 256, "in_capsule_data_size raised to 256");
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 1,
        count: 8,
        qd: 8,
        seed: 4,
    };
    write_read_verify(&mut c.io[0], &w, Mode::Keyed).unwrap();
    let data = pattern(1, 0, 1, 512);
    // 256 bytes fit in the capsule; 512 do not fit the receive buffer (IOCCSZ): the SEND
    // fails at the RDMA level and that queue is gone.
    let small = pattern(1, 0, 1, 512);
    let mut s = write_sqe(1, 0, 1);
    s.set_cdw(12, 0);
    let r = c.io[1]
        .cmd(
            s,
            Data::Raw {
                sgl: SglDescriptor::in_capsule(0, 256),
                capsule: &small[..256],
            },
        )
        .unwrap();
    assert_eq!(
        r.cqe.status,
        Status::DATA_SGL_LENGTH_INVALID,
        "256 B for a 512 B block"
    );
    let r = c.io[0].cmd(write_sqe(1, 0, 1), Data::InCapsule(&data));
    assert!(
        matches!(r, Err(HostError::Wc(_)) | Err(HostError::Disconnected)),
        "{r:?}"
    );
    c.io.remove(0);
    c.shutdown().unwrap();
    let _ = io_opc::READ;
    e.assert_quiescent(Duration::from_secs(10));
}
