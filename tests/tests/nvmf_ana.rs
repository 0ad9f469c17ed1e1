//! Asymmetric Namespace Access seen by NVMe/RDMA hosts on the sim fabric: one subsystem with
//! ANA reporting on two listeners (two paths), a controller through each. Identify reports
//! the ANA fields, each controller reads its own path's ANA log page, a state change raises
//! the ANA change notice and moves the change count, I/O through an inaccessible path gets
//! Asymmetric Access Inaccessible (302h, no DNR) while the optimized path serves it.

use rtgt_tests::nvme_cmds::ana::{INACCESSIBLE, OPTIMIZED, ana_log, two_path_subsystem};
use rtgt_tests::nvme_host::*;
use rtgt_tests::{HOST_IP, TARGET_IP};
use serde_json::json;
use target_core::ana::AnaState;
use target_core::nvme::ana::{ANA_CHANGE_DW0, OAES_ANA_CHANGE};
use target_core::nvme::spec::admin_opc;
use target_core::nvme::{Sqe, Status};
use target_core::target::{AdrFam, ListenAddr, SubsystemParams};

const NQN: &str = "nqn.2016-06.io.rtgt:ana";

struct Paths {
    e: NvmfEnv,
    a: ListenAddr,
    b: ListenAddr,
}

fn addr(port: u16) -> ListenAddr {
    ListenAddr::new("RDMA", AdrFam::Ipv4, TARGET_IP, &port.to_string())
}

/// A subsystem with ANA reporting and 4 groups, namespaces 1 and 2 (groups 1 and 2), on
/// listeners 4420 (optimized) and 4421 (inaccessible).
fn two_paths() -> Paths {
    let e = NvmfEnv::new(2, json!({}));
    let (a, b) = (addr(4420), addr(4421));
    two_path_subsystem(&e.t, NQN, &a, &b);
    Paths { e, a, b }
}

/// A controller through the listener on `port`.
fn connect(e: &NvmfEnv, port: u16) -> HostCtrl {
    let mut o = ConnectOpts::new(NQN, HOSTNQN);
    o.src = Some(HOST_IP.parse().unwrap());
    HostCtrl::connect(
        &e.t.fabric,
        format!("{TARGET_IP}:{port}").parse().unwrap(),
        o,
    )
    .unwrap()
}

impl Paths {
    fn connect(&self, port: u16) -> HostCtrl {
        connect(&self.e, port)
    }

    fn set(&self, l: &ListenAddr, state: AnaState, group: Option<u32>) {
        let t = &self.e.t;
        t.rt.block_on(t.target.set_listener_ana_state(NQN, l, state, group))
            .unwrap();
    }
}

fn read_status(c: &mut HostCtrl, nsid: u32) -> Status {
    c.read_status(nsid)
}

/// Enables the ANA change notice and parks an AER; returns its CID.
fn park_ana_aer(c: &mut HostCtrl) -> u16 {
    c.park_aer(OAES_ANA_CHANGE)
}

#[test]
fn identify_reports_ana_and_each_path_its_own_log() {
    let p = two_paths();
    let mut a = p.connect(4420);
    let mut b = p.connect(4421);
    let id = a.identify(1, 0).unwrap();
    assert_eq!(
        id[76] & 0x0B,
        0x0B,
        "CMIC: multi-port, multi-controller, ANA"
    );
    let oaes = u32::from_le_bytes(id[92..96].try_into().unwrap());
    assert_ne!(oaes & 1 << 11, 0, "OAES: ANA change notices");
    assert_eq!(id[342], 10, "ANATT");
    assert_eq!(id[343], 0x1F, "ANACAP: all five states");
    let u32_at = |o: usize| u32::from_le_bytes(id[o..o + 4].try_into().unwrap());
    assert_eq!(
        (u32_at(344), u32_at(348), u32_at(540)),
        (4, 4, 4),
        "ANAGRPMAX, NANAGRPID, MNAN"
    );
    // The supported log pages include 0Ch.
    let sup = a.get_log(0x00, 0, 0, 1024, false).unwrap();
    assert_eq!(u32::from_le_bytes(sup[48..52].try_into().unwrap()) & 1, 1);

    // Identify Namespace: ANAGRPID; NUSE 0 through the inaccessible path only.
    let ns_a = a.identify(0, 2).unwrap();
    let ns_b = b.identify(0, 2).unwrap();
    for ns in [&ns_a, &ns_b] {
        assert_eq!(u32::from_le_bytes(ns[92..96].try_into().unwrap()), 2);
    }
    assert_eq!(u64::from_le_bytes(ns_a[16..24].try_into().unwrap()), 1024);
    assert_eq!(u64::from_le_bytes(ns_b[16..24].try_into().unwrap()), 0);
    let csi = b.identify(8, 2).unwrap();
    assert_eq!(
        u32::from_le_bytes(csi[4..8].try_into().unwrap()),
        2,
        "CNS 08h ANAGRPID"
    );

    // Each controller reads its own path; groups with namespaces only, ascending.
    let (_, ga) = ana_log(&mut a.admin, false);
    let (_, gb) = ana_log(&mut b.admin, false);
    assert_eq!(ga, [(1, vec![1], OPTIMIZED), (2, vec![2], OPTIMIZED)]);
    assert_eq!(gb, [(1, vec![1], INACCESSIBLE), (2, vec![2], INACCESSIBLE)]);
    let (_, rgo) = ana_log(&mut b.admin, true);
    assert_eq!(rgo, [(1, vec![], INACCESSIBLE), (2, vec![], INACCESSIBLE)]);

    // A namespace-scoped feature of a namespace the path cannot access gets the path's
    // status; a controller-wide one does not.
    let get_feature = |c: &mut HostCtrl, fid: u32, nsid: u32| {
        let mut s = Sqe::new(admin_opc::GET_FEATURES, 0);
        s.set_nsid(nsid).set_cdw(10, fid);
        c.admin.cmd(s, Data::None).unwrap().cqe.status
    };
    assert_eq!(get_feature(&mut a, 0x05, 1), Status::SUCCESS);
    assert_eq!(
        get_feature(&mut b, 0x05, 1),
        target_core::nvme::ana::ANA_INACCESSIBLE,
        "Error Recovery of namespace 1 through the inaccessible path"
    );
    assert_eq!(
        get_feature(&mut b, 0x07, 0),
        Status::SUCCESS,
        "Number of Queues"
    );

    // I/O: served through the optimized path, 302h without DNR through the other.
    assert_eq!(read_status(&mut a, 1), Status::SUCCESS);
    let s = read_status(&mut b, 1);
    assert_eq!(s, target_core::nvme::ana::ANA_INACCESSIBLE);
    assert!(
        !s.is_dnr(),
        "the host must be allowed to retry on another path"
    );
}

#[test]
fn a_switch_notifies_both_paths_and_moves_io() {
    let p = two_paths();
    let mut a = p.connect(4420);
    let mut b = p.connect(4421);
    let (c0, _) = ana_log(&mut a.admin, false);
    let aer_a = park_ana_aer(&mut a);
    let aer_b = park_ana_aer(&mut b);

    // Demote the owner first, then promote the other path (docs/ha.md).
    p.set(&p.a, AnaState::Inaccessible, None);
    let done = a.admin.wait(aer_a).unwrap().ok().unwrap();
    assert_eq!(
        done.cqe.dw0, ANA_CHANGE_DW0,
        "ANA change notice on the demoted path"
    );
    assert!(!b.admin.is_done(aer_b), "path B's log did not change yet");
    p.set(&p.b, AnaState::Optimized, None);
    let done = b.admin.wait(aer_b).unwrap().ok().unwrap();
    assert_eq!(done.cqe.dw0, ANA_CHANGE_DW0);

    let (ca, ga) = ana_log(&mut a.admin, false);
    let (cb, gb) = ana_log(&mut b.admin, false);
    assert!(ca > c0 && cb == ca, "the change count moved: {c0} -> {ca}");
    assert!(ga.iter().all(|g| g.2 == INACCESSIBLE), "{ga:?}");
    assert!(gb.iter().all(|g| g.2 == OPTIMIZED), "{gb:?}");
    assert_eq!(
        read_status(&mut a, 2),
        target_core::nvme::ana::ANA_INACCESSIBLE
    );
    let w = Workload {
        nsid: 2,
        bs: 512,
        lba0: 0,
        blocks: 1,
        count: 16,
        qd: 4,
        seed: 5,
    };
    write_read_verify(&mut b.io[0], &w, Mode::KeyedInvalidate).unwrap();

    // One group only: group 2 back to A, group 1 stays with B.
    let aer_a = park_ana_aer(&mut a);
    p.set(&p.b, AnaState::Inaccessible, Some(2));
    p.set(&p.a, AnaState::Optimized, Some(2));
    assert_eq!(a.admin.wait(aer_a).unwrap().cqe.dw0, ANA_CHANGE_DW0);
    let (_, ga) = ana_log(&mut a.admin, false);
    assert_eq!(ga, [(1, vec![1], INACCESSIBLE), (2, vec![2], OPTIMIZED)]);
    assert_eq!(read_status(&mut a, 2), Status::SUCCESS);
    assert_eq!(
        read_status(&mut a, 1),
        target_core::nvme::ana::ANA_INACCESSIBLE
    );
    assert_eq!(read_status(&mut b, 1), Status::SUCCESS);
    assert_eq!(
        read_status(&mut b, 2),
        target_core::nvme::ana::ANA_INACCESSIBLE
    );
}

#[test]
fn moving_a_namespace_to_another_group_changes_identify_and_the_log() {
    let p = two_paths();
    let mut b = p.connect(4421);
    // Group 3 is optimized on B; namespace 2 moves there.
    p.set(&p.b, AnaState::Optimized, Some(3));
    let aer = park_ana_aer(&mut b);
    let t = &p.e.t;
    t.rt.block_on(t.target.set_ns_ana_group(NQN, 2, 3)).unwrap();
    assert_eq!(b.admin.wait(aer).unwrap().cqe.dw0, ANA_CHANGE_DW0);
    let ns = b.identify(0, 2).unwrap();
    assert_eq!(u32::from_le_bytes(ns[92..96].try_into().unwrap()), 3);
    let (_, gb) = ana_log(&mut b.admin, false);
    assert_eq!(gb, [(1, vec![1], INACCESSIBLE), (3, vec![2], OPTIMIZED)]);
    assert_eq!(read_status(&mut b, 2), Status::SUCCESS);
    assert_eq!(
        read_status(&mut b, 1),
        target_core::nvme::ana::ANA_INACCESSIBLE
    );
    // A group beyond ANAGRPMAX is refused and changes nothing.
    assert!(t.rt.block_on(t.target.set_ns_ana_group(NQN, 2, 5)).is_err());
    assert_eq!(ana_log(&mut b.admin, false).1, gb);
}

#[test]
fn a_path_leaving_optimized_drains_its_io_before_it_reports_inaccessible() {
    use std::time::{Duration, Instant};
    use target_core::bdev::{DelayBdev, DelayParams};
    let e = NvmfEnv::new(2, json!({}));
    let t = &e.t;
    let mut p = SubsystemParams::new(NQN);
    p.allow_any_host = true;
    p.ana_reporting = true;
    t.rt.block_on(t.target.create_subsystem(p)).unwrap();
    t.malloc("base", 1024, 512);
    let lat = 400_000; // 400 ms per write
    DelayBdev::create(
        t.target.bdevs(),
        DelayParams {
            name: "slow".into(),
            base_bdev_name: "base".into(),
            uuid: None,
            avg_read_latency: 0,
            p99_read_latency: 0,
            avg_write_latency: lat,
            p99_write_latency: lat,
        },
    )
    .unwrap();
    t.add_ns(NQN, "slow");
    let a = addr(4420);
    t.rt.block_on(t.target.add_listener(NQN, a.clone()))
        .unwrap();
    let mut c = connect(&e, 4420);
    let data = vec![0x5Au8; 512];
    let cids: Vec<u16> = (0..4)
        .map(|i| {
            c.io[0]
                .submit(
                    write_sqe(1, i, 1),
                    Data::KeyedWrite {
                        bytes: &data,
                        invalidate: false,
                    },
                )
                .unwrap()
        })
        .collect();
    // Let the writes reach the bdev before the state changes.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(100) {
        c.io[0].poll().unwrap();
    }
    let target = std::sync::Arc::clone(&e.t.target);
    // The call runs on a thread of its own while this one keeps the host polling.
    let set = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let started = Instant::now();
        let r = rt.block_on(target.set_listener_ana_state(NQN, &a, AnaState::Inaccessible, None));
        (r, started.elapsed())
    });
    for cid in cids {
        let done = c.io[0].wait_for(cid, Duration::from_secs(5)).unwrap();
        assert_eq!(done.cqe.status, Status::SUCCESS, "in-flight I/O completes");
    }
    let (r, took) = set.join().unwrap();
    r.unwrap();
    assert!(
        took >= Duration::from_millis(200),
        "the call returned after {took:?}, before the in-flight writes (400 ms) drained"
    );
    let (_, g) = ana_log(&mut c.admin, false);
    assert_eq!(g, [(1, vec![1], INACCESSIBLE)]);
    assert_eq!(
        read_status(&mut c, 1),
        target_core::nvme::ana::ANA_INACCESSIBLE
    );
}
