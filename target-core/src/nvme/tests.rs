//! End-to-end tests through the public API: the Linux connect, shutdown and discovery sequences
//! (reference §8.2, §8.3, §6.3) replayed as capsules, every admin command and its error paths,
//! and a fuzz-style no-panic test.

use std::time::{Duration, Instant};

use super::discovery::{adrfam, eflags, subtype};
use super::fabrics::build;
use super::identify::ctrl_off;
use super::regs::csts;
use super::spec::{NSID_ALL, admin_opc, cns, fctype, fid, io_opc, le, lid, prop};
use super::*;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
const SUBNQN: &str = "nqn.2016-06.io.rtgt:cnode1";
const HOSTID: [u8; 16] = [0xAB; 16];
const CC_EN0: u32 = 0x0046_0000;
const CC_EN1: u32 = 0x0046_0001;
const CC_SHN: u32 = 0x0046_4001;

/// A test target: one NVM subsystem, one discovery subsystem, and the exec-layer glue a real
/// `nvme_exec` module would provide (subsystem lookup, allow list, CNTLID allocation).
struct Tgt {
    limits: TransportLimits,
    namespaces: Vec<NamespaceView>,
    alloc: CntlidAllocator,
    allowed: Vec<&'static str>,
    genctr: u64,
    entries: Vec<DiscoveryEntry<'static>>,
}

impl Tgt {
    fn new() -> Tgt {
        let mut ns1 = NamespaceView::new(1, 512, 2048);
        ns1.nguid = [0x11; 16];
        ns1.uuid = [0x12; 16];
        ns1.volatile_write_cache = true;
        ns1.supports_unmap = true;
        ns1.supports_write_zeroes = true;
        let mut ns3 = NamespaceView::new(3, 4096, 256);
        ns3.nguid = [0x31; 16];
        ns3.eui64 = [0x32; 8];
        ns3.supports_write_zeroes = true;
        Tgt {
            limits: TransportLimits::default(),
            namespaces: vec![ns3, ns1],
            alloc: CntlidAllocator::default(),
            allowed: vec![HOSTNQN],
            genctr: 1,
            entries: vec![DiscoveryEntry::nvme_rdma(
                SUBNQN,
                adrfam::IPV4,
                "192.168.100.1",
                "4420",
                1,
            )],
        }
    }

    fn view(&self) -> SubsystemView<'_> {
        SubsystemView {
            kind: SubsystemKind::Nvm,
            serial: "RTGT0000000000000001",
            model: "rtgt Controller",
            firmware: "0.1.0",
            max_namespaces: 32,
            namespaces: &self.namespaces,
            discovery_log: None,
            ana: None,
        }
    }

    fn disc_view(&self) -> SubsystemView<'_> {
        SubsystemView {
            kind: SubsystemKind::Discovery,
            serial: "",
            model: "",
            firmware: "0.1.0",
            max_namespaces: 0,
            namespaces: &[],
            discovery_log: Some(DiscoveryLog {
                genctr: self.genctr,
                entries: &self.entries,
            }),
            ana: None,
        }
    }

    /// What the exec layer does with an admin-queue Connect capsule; returns the controller and
    /// the 16-byte response.
    fn admin_connect(&mut self, sqe: &Sqe, data: &[u8], now: Instant) -> (Option<Controller>, Cqe) {
        let policy = self.limits.admin_sgl_policy(0, 1 << 20);
        // The admin queue never carries in-capsule data over RDMA: SGL 0x4F, RDMA READ.
        let fetched = match sgl::parse(sqe, &[], &policy) {
            Ok(DataSgl::Keyed(k)) => &data[..(k.len as usize).min(data.len())],
            Ok(_) => &[][..],
            Err(s) => return (None, Cqe::for_command(sqe, 0, 1, s)),
        };
        let c = match parse_connect(sqe, fetched) {
            Ok(c) => c,
            Err(r) => return (None, r.cqe(sqe, 0, 1)),
        };
        let kind = if c.data.subnqn == DISCOVERY_NQN {
            SubsystemKind::Discovery
        } else if c.data.subnqn == SUBNQN {
            SubsystemKind::Nvm
        } else {
            return (None, ConnectReject::unknown_subsystem().cqe(sqe, 0, 1));
        };
        if kind == SubsystemKind::Nvm
            && !host_allowed(false, self.allowed.iter().copied(), &c.data.hostnqn)
        {
            return (None, ConnectReject::invalid_host().cqe(sqe, 0, 1));
        }
        if let Err(r) = check_admin_connect(&c, &self.limits) {
            return (None, r.cqe(sqe, 0, 1));
        }
        let Some(cntlid) = self.alloc.alloc() else {
            return (None, ConnectReject::controller_busy().cqe(sqe, 0, 1));
        };
        let ctrl = Controller::new(cntlid, &c, kind, self.limits, now);
        let cqe = c.success_cqe(sqe, ctrl.connect_dw0());
        (Some(ctrl), cqe)
    }

    /// An I/O-queue Connect for `ctrl` with its own CNTLID.
    fn io_queue(&self, ctrl: &mut Controller, qid: u16, sqsize: u16) -> Cqe {
        let cntlid = ctrl.cntlid();
        self.io_connect(ctrl, &io_connect_capsule(qid, sqsize, cntlid))
    }

    /// An I/O-queue Connect capsule (SQE + in-capsule data) for `ctrl`.
    fn io_connect(&self, ctrl: &mut Controller, capsule: &[u8]) -> Cqe {
        let sqe = Sqe::from_bytes(capsule).unwrap();
        let policy = self.limits.io_sgl_policy();
        let data = match sgl::parse(&sqe, &capsule[64..], &policy) {
            Ok(DataSgl::InCapsule { offset, len }) => {
                &capsule[64 + offset as usize..64 + (offset + len) as usize]
            }
            Ok(_) => &[][..],
            Err(s) => return Cqe::for_command(&sqe, 0, 1, s),
        };
        let c = match parse_connect(&sqe, data) {
            Ok(c) => c,
            Err(r) => return r.cqe(&sqe, 0, 1),
        };
        // The exec layer finds the controller by (SUBNQN, HOSTNQN, CNTLID).
        if c.data.subnqn != *ctrl.subnqn().as_str() || c.data.cntlid != ctrl.cntlid() {
            return ConnectReject::unknown_controller().cqe(&sqe, c.cmd.qid, 1);
        }
        match ctrl.accept_io_queue(&c) {
            Ok(dw0) => c.success_cqe(&sqe, dw0),
            Err(r) => r.cqe(&sqe, c.cmd.qid, 1),
        }
    }
}

fn keyed(len: u32) -> SglDescriptor {
    SglDescriptor::keyed(0xFFFF_8880_0000_0000, len, 0x1234, true)
}

fn admin_connect_capsule(cid: u16, subnqn: &str, kato: u32) -> (Sqe, [u8; 1024]) {
    (
        build::connect_sqe(cid, 0, 31, kato, keyed(1024)),
        build::connect_data(HOSTID, 0xFFFF, subnqn, HOSTNQN),
    )
}

fn io_connect_capsule(qid: u16, sqsize: u16, cntlid: u16) -> Vec<u8> {
    let sqe = build::connect_sqe(qid, qid, sqsize, 0, SglDescriptor::in_capsule(0, 1024));
    let mut v = sqe.0.to_vec();
    v.extend_from_slice(&build::connect_data(HOSTID, cntlid, SUBNQN, HOSTNQN));
    v
}

/// Runs an admin command with a host buffer of `len` bytes; returns the completion and the
/// bytes that would be RDMA-written to the host. Panics if the command was parked.
fn run(
    ctrl: &mut Controller,
    view: &SubsystemView<'_>,
    sqe: Sqe,
    len: usize,
    now: Instant,
) -> (Completion, Vec<u8>) {
    let mut buf = vec![0xEEu8; len];
    match ctrl.admin(view, &sqe, &mut buf, now) {
        AdminOutcome::Complete(c) => {
            assert!(c.data_len <= len);
            if !c.status.is_success() {
                assert_eq!(c.data_len, 0);
            }
            buf.truncate(c.data_len);
            (c, buf)
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn status(ctrl: &mut Controller, view: &SubsystemView<'_>, sqe: Sqe, len: usize) -> Status {
    run(ctrl, view, sqe, len, Instant::now()).0.status
}

fn identify(cns_: u8, nsid: u32) -> Sqe {
    let mut s = Sqe::new(admin_opc::IDENTIFY, 0x100 | u16::from(cns_));
    s.set_nsid(nsid)
        .set_cdw(10, u32::from(cns_))
        .set_sgl1(keyed(4096));
    s
}

fn get_log(lid_: u8, nsid: u32, len: u32, offset: u64, rae: bool) -> Sqe {
    let numd = len / 4 - 1;
    let mut s = Sqe::new(admin_opc::GET_LOG_PAGE, 0x200);
    s.set_nsid(nsid)
        .set_cdw(
            10,
            u32::from(lid_) | u32::from(rae) << 15 | (numd & 0xFFFF) << 16,
        )
        .set_cdw(11, numd >> 16)
        .set_cdw(12, offset as u32)
        .set_cdw(13, (offset >> 32) as u32)
        .set_sgl1(keyed(len));
    s
}

fn set_features(f: u8, cdw11: u32) -> Sqe {
    let mut s = Sqe::new(admin_opc::SET_FEATURES, 0x300);
    s.set_cdw(10, u32::from(f))
        .set_cdw(11, cdw11)
        .set_sgl1(SglDescriptor::null_keyed());
    s
}

fn get_features(f: u8, sel: u32, cdw11: u32) -> Sqe {
    let mut s = Sqe::new(admin_opc::GET_FEATURES, 0x301);
    s.set_cdw(10, u32::from(f) | sel << 8)
        .set_cdw(11, cdw11)
        .set_sgl1(SglDescriptor::null_keyed());
    s
}

fn aer(cid: u16) -> Sqe {
    Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, cid)
}

fn keep_alive() -> Sqe {
    Sqe::new(admin_opc::KEEP_ALIVE, 0x0018)
}

fn prop_get(off: u32, eight: bool, ctrl: &mut Controller, view: &SubsystemView<'_>) -> u64 {
    let (c, _) = run(
        ctrl,
        view,
        build::property_get(0x10, off, eight),
        0,
        Instant::now(),
    );
    assert!(c.status.is_success(), "{:?}", c.status);
    u64::from(c.dw1) << 32 | u64::from(c.dw0)
}

fn prop_set(cc: u32, ctrl: &mut Controller, view: &SubsystemView<'_>) -> CcChange {
    let (c, _) = run(
        ctrl,
        view,
        build::property_set(0x11, prop::CC, cc),
        0,
        Instant::now(),
    );
    assert!(c.status.is_success(), "{:?}", c.status);
    c.effect
}

/// Connects and enables an I/O controller the way Linux does.
fn live_controller(t: &mut Tgt, now: Instant) -> Controller {
    let (s, d) = admin_connect_capsule(0, SUBNQN, 5000);
    let (ctrl, cqe) = t.admin_connect(&s, &d, now);
    assert!(cqe.status.is_success());
    let mut ctrl = ctrl.unwrap();
    let v = t.view();
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &v), CcChange::Enabled);
    ctrl
}

#[test]
fn linux_connect_sequence() {
    let mut t = Tgt::new();
    let t0 = Instant::now();

    // 2. Connect on the admin queue: keyed SGL 0x4F, 1 KiB of data fetched by RDMA READ.
    let (s, d) = admin_connect_capsule(0x0000, SUBNQN, 5000);
    let (ctrl, cqe) = t.admin_connect(&s, &d, t0);
    let mut ctrl = ctrl.expect("connect accepted");
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(cqe.dw0, u32::from(ctrl.cntlid()));
    assert!((1..=0xFFEF).contains(&ctrl.cntlid()));
    assert_eq!((cqe.sqid, cqe.sqhd, cqe.cid), (0, 1, 0));
    assert_eq!(ctrl.kato_ms(), 5000);
    assert_eq!(
        ctrl.keep_alive_deadline(),
        Some(t0 + Duration::from_millis(5000))
    );
    let view = t.view();

    // 3-5. CAP, CC (EN=0), CAP again.
    let cap = prop_get(prop::CAP, true, &mut ctrl, &view);
    assert_eq!(cap, 0x0000_0020_0F01_007F);
    assert_eq!((cap >> 48) & 0xF, 0, "MPSMIN");
    assert_eq!(prop_set(CC_EN0, &mut ctrl, &view), CcChange::None);
    assert_eq!(prop_get(prop::CAP, true, &mut ctrl, &view), cap);
    // 6-7. CC.EN=1, then CSTS until RDY.
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &view), CcChange::Enabled);
    assert_eq!(prop_get(prop::CSTS, false, &mut ctrl, &view), 1);
    assert_eq!(
        prop_get(prop::CC, false, &mut ctrl, &view),
        u64::from(CC_EN1)
    );
    // 8. VS.
    assert_eq!(prop_get(prop::VS, false, &mut ctrl, &view), 0x0001_0300);

    // 9. Identify Controller: every field the host validates.
    let (c, id) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, t0);
    assert!(c.status.is_success());
    assert_eq!(id.len(), 4096);
    assert_eq!(le::u16_at(&id, ctrl_off::CNTLID), ctrl.cntlid());
    assert_eq!(
        &id[ctrl_off::SN..ctrl_off::SN + 20],
        b"RTGT0000000000000001"
    );
    assert_eq!(&id[ctrl_off::MN..ctrl_off::MN + 16], b"rtgt Controller ");
    assert_eq!(&id[ctrl_off::FR..ctrl_off::FR + 8], b"0.1.0   ");
    assert_eq!(id[ctrl_off::CMIC], 0x02);
    assert_eq!(id[ctrl_off::MDTS], 5, "128 KiB = 2^5 x 4 KiB");
    assert_eq!(le::u32_at(&id, ctrl_off::VER), 0x0001_0300);
    assert_eq!(le::u32_at(&id, ctrl_off::OAES), 1 << 8);
    assert_eq!(le::u32_at(&id, ctrl_off::CTRATT), 1);
    assert_eq!(id[ctrl_off::CNTRLTYPE], 1);
    assert_eq!(le::u16_at(&id, ctrl_off::OACS), 0);
    assert_eq!(id[ctrl_off::AERL], 3);
    assert_eq!(id[ctrl_off::LPA], 0x06);
    assert_eq!(le::u16_at(&id, ctrl_off::KAS), 10);
    assert_eq!(id[512], 0x66);
    assert_eq!(id[513], 0x44);
    assert_eq!(le::u16_at(&id, ctrl_off::MAXCMD), 128);
    assert_eq!(le::u32_at(&id, ctrl_off::NN), 32);
    assert_eq!(le::u16_at(&id, ctrl_off::ONCS), 0x2D);
    // Fused Compare + Write.
    assert_eq!(le::u16_at(&id, ctrl_off::FUSES), 1);
    assert_eq!(id[ctrl_off::VWC], 0x05);
    assert_eq!(le::u32_at(&id, ctrl_off::SGLS), 0x0010_0005);
    assert_eq!(
        &id[ctrl_off::SUBNQN..ctrl_off::SUBNQN + SUBNQN.len()],
        SUBNQN.as_bytes()
    );
    assert_eq!(id[ctrl_off::SUBNQN + SUBNQN.len()], 0);
    assert_eq!(le::u32_at(&id, ctrl_off::IOCCSZ), 260);
    assert_eq!(le::u32_at(&id, ctrl_off::IORCSZ), 1);
    assert_eq!(le::u16_at(&id, ctrl_off::ICDOFF), 0);
    assert_eq!(id[ctrl_off::MSDBD], 1);
    assert_eq!(le::u16_at(&id, 128), 0, "CRDT1 = 0");
    assert_eq!(id[265], 0, "APSTA = 0");

    // 12. Identify CNS 06h CSI 0: zeros.
    let (c, z) = run(&mut ctrl, &view, identify(cns::CS_CONTROLLER, 0), 4096, t0);
    assert!(c.status.is_success());
    assert!(z.iter().all(|&b| b == 0));
    // 14. SMART log, NSID 0xFFFFFFFF, 512 bytes.
    let (c, smart) = run(
        &mut ctrl,
        &view,
        get_log(lid::SMART, 0xFFFF_FFFF, 512, 0, false),
        512,
        t0,
    );
    assert!(c.status.is_success());
    assert_eq!(smart.len(), 512);
    assert_eq!(smart[3], 100);
    assert_eq!(le::u16_at(&smart, 1), 311);

    // 15. Keep Alive.
    let t1 = t0 + Duration::from_millis(2500);
    let (c, _) = run(&mut ctrl, &view, keep_alive(), 0, t1);
    assert!(c.status.is_success());
    assert_eq!(
        ctrl.keep_alive_deadline(),
        Some(t1 + Duration::from_millis(5000))
    );

    // 17. Number of Queues: the host asks for 4 (0's based 3).
    let (c, _) = run(
        &mut ctrl,
        &view,
        set_features(fid::NUMBER_OF_QUEUES, 3 | 3 << 16),
        0,
        t1,
    );
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 0x0003_0003));
    assert_eq!(ctrl.granted_io_queues(), 4);

    // 18-19. I/O queues: in-capsule Connect data (SGL 0x01), KATO 0.
    for qid in 1..=4 {
        let cqe = t.io_queue(&mut ctrl, qid, 127);
        assert_eq!(cqe.status, Status::SUCCESS, "qid {qid}");
        assert_eq!((cqe.sqid, cqe.cid, cqe.sqhd), (qid, qid, 1));
        assert_eq!(cqe.dw0, u32::from(ctrl.cntlid()));
    }
    assert_eq!(ctrl.num_io_queues(), 4);
    let cqe = t.io_queue(&mut ctrl, 5, 127);
    assert_eq!(cqe.status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(cqe.dw0, 42, "IATTR 0, IPO 42: QID above the granted count");

    // 20. Async event configuration and the AER (CID 31).
    let (c, _) = run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 0x100),
        0,
        t1,
    );
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 0x100));
    let mut no_data = [0u8; 0];
    assert_eq!(
        ctrl.admin(&view, &aer(0x001F), &mut no_data, t1),
        AdminOutcome::Parked
    );

    // 21. Active namespace list from NSID 0.
    let (c, list) = run(&mut ctrl, &view, identify(cns::ACTIVE_NS_LIST, 0), 4096, t1);
    assert!(c.status.is_success());
    assert_eq!(le::u32_at(&list, 0), 1);
    assert_eq!(le::u32_at(&list, 4), 3);
    assert!(list[8..].iter().all(|&b| b == 0));

    // 22. Per namespace: descriptors, CNS 08h, CNS 00h.
    let (c, desc) = run(&mut ctrl, &view, identify(cns::NS_DESCRIPTORS, 1), 4096, t1);
    assert!(c.status.is_success());
    // NGUID (2, 16), UUID (3, 16), CSI (4, 1).
    assert_eq!(&desc[0..4], &[2, 16, 0, 0]);
    assert_eq!(&desc[4..20], &[0x11; 16]);
    assert_eq!(&desc[20..24], &[3, 16, 0, 0]);
    assert_eq!(&desc[24..40], &[0x12; 16]);
    assert_eq!(&desc[40..45], &[4, 1, 0, 0, 0]);
    assert!(desc[45..].iter().all(|&b| b == 0));
    let (c, indep) = run(
        &mut ctrl,
        &view,
        identify(cns::CS_INDEPENDENT_NAMESPACE, 1),
        4096,
        t1,
    );
    assert!(c.status.is_success());
    assert_eq!(indep[14] & 1, 1, "NSTAT ready");
    assert_eq!(indep[1], 1, "NMIC shared");
    let (c, ns) = run(&mut ctrl, &view, identify(cns::NAMESPACE, 1), 4096, t1);
    assert!(c.status.is_success());
    assert_eq!(le::u64_at(&ns, 0), 2048);
    assert_eq!(le::u64_at(&ns, 8), 2048, "NCAP non-zero");
    assert_eq!(le::u64_at(&ns, 16), 2048);
    assert_eq!(ns[25], 0, "NLBAF");
    assert_eq!(ns[26], 0, "FLBAS");
    assert_eq!(ns[30], 1);
    assert_eq!(&ns[104..120], &[0x11; 16], "NGUID equals the CNS 03h one");
    assert_eq!(ns[130], 9, "LBADS 512");
    let (_, ns3) = run(&mut ctrl, &view, identify(cns::NAMESPACE, 3), 4096, t1);
    assert_eq!(ns3[130], 12);
    assert_eq!(&ns3[120..128], &[0x32; 8]);

    // 23. The partition scan reads LBA 0 on I/O queue 1.
    let mut read = Sqe::new(io_opc::READ, 0x2001);
    read.set_nsid(1).set_cdw(12, 7).set_sgl1(keyed(4096));
    let policy = t.limits.io_sgl_policy();
    let sgl = sgl::parse(&read, &[], &policy).unwrap();
    assert_eq!(sgl.invalidate_key(), Some(0x1234));
    let cmd = io::decode(
        &read,
        view.namespace(1),
        Ok(sgl.len()),
        t.limits.max_io_size,
    )
    .unwrap();
    assert_eq!(
        cmd,
        IoCmd::Read {
            slba: 0,
            blocks: 8,
            fua: false
        }
    );

    // Keep alive keeps it alive; silence kills it.
    let t2 = t1 + Duration::from_millis(4999);
    assert!(!ctrl.keep_alive_expired(t2));
    run(&mut ctrl, &view, keep_alive(), 0, t2);
    assert!(!ctrl.keep_alive_expired(t2 + Duration::from_millis(4999)));
    assert!(ctrl.keep_alive_expired(t2 + Duration::from_millis(5000)));
    assert!(
        !ctrl.keep_alive_expired(t2 + Duration::from_millis(9000)),
        "reported once"
    );
    assert_ne!(
        prop_get(prop::CSTS, false, &mut ctrl, &view) & u64::from(csts::CFS),
        0
    );
}

#[test]
fn linux_disconnect_shutdown() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    run(
        &mut ctrl,
        &view,
        set_features(fid::NUMBER_OF_QUEUES, 1 | 1 << 16),
        0,
        now,
    );
    for qid in 1..=2 {
        assert!(t.io_queue(&mut ctrl, qid, 127).status.is_success());
    }
    assert_eq!(
        ctrl.admin(&view, &aer(0x1F), &mut [], now),
        AdminOutcome::Parked
    );
    // I/O QPs disconnect first; the association stays.
    ctrl.io_queue_closed(1);
    ctrl.io_queue_closed(2);
    assert_eq!(ctrl.num_io_queues(), 0);
    assert!(!ctrl.io_queue_connected(1));
    // CC.SHN = 01b with EN still 1, then CSTS until SHST = 10b.
    assert_eq!(prop_set(CC_SHN, &mut ctrl, &view), CcChange::Shutdown);
    let csts_v = prop_get(prop::CSTS, false, &mut ctrl, &view) as u32;
    assert_eq!(csts_v & csts::SHST_MASK, csts::SHST_COMPLETE);
    assert_ne!(csts_v & csts::RDY, 0);
    assert_ne!(csts_v, 0xFFFF_FFFF);
    // A new I/O Connect after shutdown is refused.
    let cqe = t.io_queue(&mut ctrl, 1, 127);
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    // The exec layer frees the CNTLID when the admin QP goes.
    let id = ctrl.cntlid();
    t.alloc.free(id);
    assert!(!t.alloc.in_use(id));
}

#[test]
fn reset_drops_queues_and_aers() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 0x100),
        0,
        now,
    );
    assert!(t.io_queue(&mut ctrl, 1, 15).status.is_success());
    assert_eq!(
        ctrl.admin(&view, &aer(0x1F), &mut [], now),
        AdminOutcome::Parked
    );
    assert_eq!(ctrl.parked_aers(), &[0x1F]);
    assert_eq!(prop_set(CC_EN0, &mut ctrl, &view), CcChange::Disabled);
    assert!(ctrl.parked_aers().is_empty());
    // The reset waits for the I/O queue the exec layer disconnects: its id stays taken and
    // CSTS.RDY reads 1 until it is gone.
    assert!(ctrl.reset_pending());
    assert_eq!(ctrl.num_io_queues(), 1);
    assert_eq!(prop_get(prop::CSTS, false, &mut ctrl, &view), 1);
    ctrl.io_queue_closed(1);
    assert!(!ctrl.reset_pending());
    assert_eq!(ctrl.num_io_queues(), 0);
    assert_eq!(prop_get(prop::CSTS, false, &mut ctrl, &view), 0);
    // Admin commands are refused until re-enabled.
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096),
        Status::COMMAND_SEQUENCE_ERROR
    );
    // Events are not generated: the configuration was reset.
    assert_eq!(ctrl.ns_changed(&[1]), None);
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &view), CcChange::Enabled);
    assert!(t.io_queue(&mut ctrl, 1, 15).status.is_success());
    // A host that enables again before the old queues are gone cannot reuse their ids.
    assert_eq!(prop_set(CC_EN0, &mut ctrl, &view), CcChange::Disabled);
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &view), CcChange::Enabled);
    assert_eq!(
        t.io_queue(&mut ctrl, 1, 15).status,
        Status::COMMAND_SEQUENCE_ERROR
    );
    assert!(!ctrl.reset_pending());
    assert!(t.io_queue(&mut ctrl, 2, 15).status.is_success());
    ctrl.io_queue_closed(1);
    assert!(t.io_queue(&mut ctrl, 1, 15).status.is_success());
    assert_eq!(
        t.io_queue(&mut ctrl, 1, 15).status,
        Status::COMMAND_SEQUENCE_ERROR
    );
}

#[test]
fn namespace_change_notices() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    // Before the host enables notices, changes are only logged.
    assert_eq!(ctrl.ns_changed(&[7]), None);
    {
        let view = t.view();
        run(
            &mut ctrl,
            &view,
            set_features(fid::ASYNC_EVENT_CONFIG, 0x100),
            0,
            now,
        );
        assert_eq!(
            ctrl.admin(&view, &aer(0x001F), &mut [], now),
            AdminOutcome::Parked
        );
    }
    // A namespace is added: the AER completes with 0x00040002.
    let mut ns2 = NamespaceView::new(2, 512, 100);
    ns2.nguid = [0x22; 16];
    t.namespaces.push(ns2);
    let done = ctrl.ns_changed(&[2]).expect("AER completes");
    assert_eq!(
        done,
        AerCompletion {
            cid: 0x001F,
            dw0: 0x0004_0002
        }
    );
    let cqe = done.cqe(9).encode();
    assert_eq!(&cqe[0..4], &[0x02, 0x00, 0x04, 0x00]);
    assert_eq!(&cqe[12..14], &[0x1F, 0x00]);
    // Masked until the host reads LID 04h.
    assert_eq!(ctrl.ns_changed(&[2, 3]), None);
    let view = t.view();
    assert_eq!(
        ctrl.admin(&view, &aer(0x101F), &mut [], now),
        AdminOutcome::Parked
    );
    let (c, log) = run(
        &mut ctrl,
        &view,
        get_log(lid::CHANGED_NS_LIST, 0xFFFF_FFFF, 4096, 0, false),
        4096,
        now,
    );
    assert!(c.status.is_success());
    assert_eq!(le::u32_at(&log, 0), 2);
    assert_eq!(le::u32_at(&log, 4), 3);
    assert_eq!(le::u32_at(&log, 8), 7);
    assert_eq!(le::u32_at(&log, 12), 0);
    // The rescan sees the new namespace.
    let (_, list) = run(
        &mut ctrl,
        &view,
        identify(cns::ACTIVE_NS_LIST, 0),
        4096,
        now,
    );
    assert_eq!(
        [
            le::u32_at(&list, 0),
            le::u32_at(&list, 4),
            le::u32_at(&list, 8)
        ],
        [1, 2, 3]
    );
    // Read again: the list was cleared.
    let (_, log) = run(
        &mut ctrl,
        &view,
        get_log(lid::CHANGED_NS_LIST, 0xFFFF_FFFF, 4096, 0, false),
        4096,
        now,
    );
    assert!(log.iter().all(|&b| b == 0));
    // Unmasked: the next change completes the re-armed AER.
    assert_eq!(
        ctrl.ns_changed(&[2]),
        Some(AerCompletion {
            cid: 0x101F,
            dw0: 0x0004_0002
        })
    );
    // With RAE=1 the mask stays.
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_log(lid::CHANGED_NS_LIST, 0, 4096, 0, true),
        4096,
        now,
    );
    assert!(c.status.is_success());
    assert_eq!(
        ctrl.admin(&view, &aer(0x201F), &mut [], now),
        AdminOutcome::Parked
    );
    assert_eq!(ctrl.ns_changed(&[1]), None);
}

#[test]
fn event_before_aer_completes_next_aer() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 0x100),
        0,
        now,
    );
    assert_eq!(ctrl.ns_changed(&[1]), None);
    let (c, _) = run(&mut ctrl, &view, aer(0x1F), 0, now);
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 0x0004_0002));
}

#[test]
fn aer_limit_and_abort() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    for cid in 0..4 {
        assert_eq!(
            ctrl.admin(&view, &aer(cid), &mut [], now),
            AdminOutcome::Parked
        );
    }
    let (c, _) = run(&mut ctrl, &view, aer(4), 0, now);
    assert_eq!(c.status, Status::AER_LIMIT_EXCEEDED);
    assert_eq!(c.status.linux(), 0x4105);
    // Abort names a parked AER.
    let mut abort = Sqe::new(admin_opc::ABORT, 0x55);
    abort.set_cdw(10, 2 << 16);
    assert_eq!(
        ctrl.admin(&view, &abort, &mut [], now),
        AdminOutcome::Abort { sqid: 0, cid: 2 }
    );
    assert!(ctrl.cancel_aer(2));
    assert_eq!(Completion::abort_result(true).dw0, 0);
    assert_eq!(Completion::abort_result(false).dw0, 1);
    assert_eq!(ctrl.parked_aers(), &[0, 1, 3]);
}

#[test]
fn connect_rejections() {
    let mut t = Tgt::new();
    let now = Instant::now();

    // Unknown subsystem.
    let (s, d) = admin_connect_capsule(1, "nqn.2016-06.io.rtgt:nope", 5000);
    let (c, cqe) = t.admin_connect(&s, &d, now);
    assert!(c.is_none());
    assert_eq!((cqe.status.linux(), cqe.dw0), (0x4182, 0x0001_0100));

    // Host not on the allow list.
    t.allowed = vec!["nqn.2014-08.org.nvmexpress:uuid:other"];
    let (s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    let (c, cqe) = t.admin_connect(&s, &d, now);
    assert!(c.is_none());
    assert_eq!(cqe.status.linux(), 0x4184);
    t.allowed = vec![HOSTNQN];

    // RECFMT != 0.
    let (mut s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    s.set_u16_at(40, 1);
    assert_eq!(t.admin_connect(&s, &d, now).1.status.linux(), 0x4180);

    // Admin SQSIZE 0, and CNTLID other than 0xFFFF.
    let (mut s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    s.set_u16_at(44, 0);
    assert_eq!(t.admin_connect(&s, &d, now).1.dw0, 44);
    let s = build::connect_sqe(1, 0, 31, 0, keyed(1024));
    let d = build::connect_data(HOSTID, 5, SUBNQN, HOSTNQN);
    assert_eq!(t.admin_connect(&s, &d, now).1.dw0, 0x0001_0010);

    // Connect data SGL shorter than 1 KiB.
    let (mut s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    s.set_sgl1(keyed(512));
    assert_eq!(t.admin_connect(&s, &d, now).1.status, Status::INVALID_FIELD);

    // Out of controller ids: busy, retryable.
    let mut full = Tgt::new();
    full.alloc = CntlidAllocator::new(1, 1);
    let (s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    assert!(full.admin_connect(&s, &d, now).0.is_some());
    let cqe = full.admin_connect(&s, &d, now).1;
    assert_eq!(cqe.status.linux(), 0x0181);
    assert!(!cqe.status.is_dnr());

    // I/O Connect before CC.EN=1.
    let (s, d) = admin_connect_capsule(1, SUBNQN, 5000);
    let mut ctrl = t.admin_connect(&s, &d, now).0.unwrap();
    let cntlid = ctrl.cntlid();
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(1, 127, cntlid));
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    let view = t.view();
    prop_set(CC_EN1, &mut ctrl, &view);

    // A second Connect on the admin queue.
    let (s, _) = admin_connect_capsule(2, SUBNQN, 5000);
    assert_eq!(
        status(&mut ctrl, &view, s, 0),
        Status::COMMAND_SEQUENCE_ERROR
    );

    // SQSIZE boundaries (pitfall 1): MQES accepted, MQES+1 and 0 refused with IPO 44.
    let mqes = t.limits.mqes();
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(1, mqes + 1, cntlid));
    assert_eq!((cqe.status.linux(), cqe.dw0), (0x4182, 44));
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(1, 0, cntlid));
    assert_eq!(cqe.dw0, 44);
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(1, mqes, cntlid));
    assert!(cqe.status.is_success());
    // The same QID again.
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(1, mqes, cntlid));
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE_ERROR);
    // Unknown CNTLID.
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(2, 127, cntlid + 100));
    assert_eq!(cqe.dw0, 0x0001_0010);
    // A different HOSTID on the same association.
    let sqe = build::connect_sqe(9, 2, 127, 0, SglDescriptor::in_capsule(0, 1024));
    let mut cap = sqe.0.to_vec();
    cap.extend_from_slice(&build::connect_data([1; 16], cntlid, SUBNQN, HOSTNQN));
    assert_eq!(t.io_connect(&mut ctrl, &cap).dw0, 0x0001_0000);
    // QID beyond the controller's maximum when Number of Queues was never set.
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(128, 127, cntlid));
    assert_eq!(cqe.dw0, 42);
    let cqe = t.io_connect(&mut ctrl, &io_connect_capsule(127, 127, cntlid));
    assert!(cqe.status.is_success());
    // In-capsule Connect data beyond the capsule.
    let mut cap = io_connect_capsule(3, 127, cntlid);
    cap.truncate(64 + 512);
    assert_eq!(
        t.io_connect(&mut ctrl, &cap).status,
        Status::DATA_SGL_LENGTH_INVALID
    );
}

#[test]
fn commands_before_enable() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let (s, d) = admin_connect_capsule(0, SUBNQN, 5000);
    let mut ctrl = t.admin_connect(&s, &d, now).0.unwrap();
    let view = t.view();
    for sqe in [
        identify(cns::CONTROLLER, 0),
        get_log(lid::SMART, 0xFFFF_FFFF, 512, 0, false),
        set_features(fid::NUMBER_OF_QUEUES, 0),
        get_features(fid::KEEP_ALIVE_TIMER, 0, 0),
        aer(0x1F),
        keep_alive(),
        Sqe::new(0xC0, 1),
    ] {
        assert_eq!(
            status(&mut ctrl, &view, sqe, 4096),
            Status::COMMAND_SEQUENCE_ERROR,
            "{sqe:?}"
        );
    }
    // Property commands work.
    assert_eq!(prop_get(prop::CSTS, false, &mut ctrl, &view), 0);
    // A CC that cannot be enabled: CFS, RDY stays 0.
    assert_eq!(
        prop_set(0x0000_0001, &mut ctrl, &view),
        CcChange::EnableFailed
    );
    assert_eq!(
        prop_get(prop::CSTS, false, &mut ctrl, &view),
        u64::from(csts::CFS)
    );
}

#[test]
fn fabrics_on_admin_queue() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    assert_eq!(
        status(&mut ctrl, &view, Sqe::fabrics(fctype::AUTH_SEND, 1), 0),
        Status::INVALID_OPCODE
    );
    assert_eq!(
        status(&mut ctrl, &view, Sqe::fabrics(fctype::AUTH_RECV, 1), 0),
        Status::INVALID_OPCODE
    );
    assert_eq!(
        status(&mut ctrl, &view, Sqe::fabrics(fctype::DISCONNECT, 1), 0),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(&mut ctrl, &view, Sqe::fabrics(0xC0, 1), 0),
        Status::INVALID_OPCODE
    );
    // Property Get of a 4-byte property reports DW1 = 0.
    let (c, _) = run(
        &mut ctrl,
        &view,
        build::property_get(1, prop::VS, false),
        0,
        now,
    );
    assert_eq!((c.dw0, c.dw1), (0x0001_0300, 0));
    let (c, _) = run(
        &mut ctrl,
        &view,
        build::property_get(1, prop::CAP, true),
        0,
        now,
    );
    assert_eq!((c.dw0, c.dw1), (0x0F01_007F, 0x20));
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            build::property_get(1, prop::NSSR, false),
            0
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(&mut ctrl, &view, build::property_set(1, prop::CSTS, 0), 0),
        Status::INVALID_FIELD
    );
}

#[test]
fn unknown_and_unsupported_admin_commands() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    for opc in [
        admin_opc::DELETE_IO_SQ,
        admin_opc::CREATE_IO_SQ,
        admin_opc::DELETE_IO_CQ,
        admin_opc::CREATE_IO_CQ,
        0x10,
        0x11,
        0x19,
        0x80,
        0x81,
        0x82,
        0xFF,
    ] {
        let s = status(&mut ctrl, &view, Sqe::new(opc, 0xF00D), 4096);
        assert_eq!(s, Status::INVALID_OPCODE, "{opc:#x}");
        assert_eq!(s.linux(), 0x4001);
    }
    let mut fused = identify(cns::CONTROLLER, 0);
    fused.set_flags(0x41);
    assert_eq!(status(&mut ctrl, &view, fused, 4096), Status::INVALID_FIELD);
    // Failures are recorded in the Error log, newest first.
    let (_, log) = run(
        &mut ctrl,
        &view,
        get_log(lid::ERROR, 0xFFFF_FFFF, 4096, 0, false),
        4096,
        now,
    );
    assert_eq!(le::u64_at(&log, 0), 12);
    assert_eq!(le::u16_at(&log, 10), fused.cid());
    assert_eq!(le::u16_at(&log, 12) >> 1, 0x4002);
    assert_eq!(le::u16_at(&log, 64 + 10), 0xF00D);
}

#[test]
fn identify_edges() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    // CNS 00h: NSID 0 and broadcast → 0x400B; inactive ≤ NN → zeros; > NN → 0x400B.
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::NAMESPACE, 0), 4096).linux(),
        0x400B
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            identify(cns::NAMESPACE, 0xFFFF_FFFF),
            4096
        ),
        Status::INVALID_NAMESPACE
    );
    let (c, z) = run(&mut ctrl, &view, identify(cns::NAMESPACE, 2), 4096, now);
    assert!(c.status.is_success());
    assert!(z.iter().all(|&b| b == 0));
    let (c, z) = run(
        &mut ctrl,
        &view,
        identify(cns::CS_INDEPENDENT_NAMESPACE, 2),
        4096,
        now,
    );
    assert!(c.status.is_success());
    assert_eq!(z[14], 0, "inactive namespace: not ready");
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::NAMESPACE, 33), 4096),
        Status::INVALID_NAMESPACE
    );
    // CNS 02h.
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            identify(cns::ACTIVE_NS_LIST, 0xFFFF_FFFE),
            4096
        ),
        Status::INVALID_NAMESPACE
    );
    let (_, l) = run(
        &mut ctrl,
        &view,
        identify(cns::ACTIVE_NS_LIST, 1),
        4096,
        now,
    );
    assert_eq!((le::u32_at(&l, 0), le::u32_at(&l, 4)), (3, 0));
    let (_, l) = run(
        &mut ctrl,
        &view,
        identify(cns::ACTIVE_NS_LIST, 3),
        4096,
        now,
    );
    assert!(l.iter().all(|&b| b == 0));
    // CNS 03h: only active namespaces; zero identifiers are omitted (ns 3 has no UUID).
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::NS_DESCRIPTORS, 2), 4096),
        Status::INVALID_NAMESPACE
    );
    let (_, d) = run(
        &mut ctrl,
        &view,
        identify(cns::NS_DESCRIPTORS, 3),
        4096,
        now,
    );
    assert_eq!(&d[0..4], &[1, 8, 0, 0]);
    assert_eq!(&d[12..16], &[2, 16, 0, 0]);
    assert_eq!(&d[32..37], &[4, 1, 0, 0, 0]);
    assert!(d[37..].iter().all(|&b| b == 0));
    // CNS 05h/06h with a CSI other than NVM.
    let mut s = identify(cns::CS_CONTROLLER, 0);
    s.set_cdw(11, 2 << 24);
    assert_eq!(status(&mut ctrl, &view, s, 4096), Status::INVALID_FIELD);
    let mut s = identify(cns::CS_NAMESPACE, 1);
    s.set_cdw(11, 2 << 24);
    assert_eq!(status(&mut ctrl, &view, s, 4096), Status::INVALID_FIELD);
    assert!(status(&mut ctrl, &view, identify(cns::CS_NAMESPACE, 1), 4096).is_success());
    // Unknown CNS.
    for c in [0x04u8, 0x07, 0x10, 0x13, 0x1F, 0xFF] {
        assert_eq!(
            status(&mut ctrl, &view, identify(c, 1), 4096),
            Status::INVALID_FIELD,
            "cns {c:#x}"
        );
    }
    // Host buffer shorter than 4 KiB; longer is fine (4 KiB sent).
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4095).linux(),
        0x400F
    );
    let (c, _) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 8192, now);
    assert_eq!(c.data_len, 4096);
}

#[test]
fn identify_without_volatile_cache_or_in_capsule() {
    let mut t = Tgt::new();
    for n in &mut t.namespaces {
        n.volatile_write_cache = false;
        n.supports_write_zeroes = false;
    }
    t.limits.in_capsule_data_size = 0;
    t.limits.max_io_size = 1 << 20;
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    let (_, id) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, now);
    assert_eq!(id[ctrl_off::VWC], 0);
    assert_eq!(le::u16_at(&id, ctrl_off::ONCS), 0x25);
    assert_eq!(le::u32_at(&id, ctrl_off::SGLS), 0x5);
    assert_eq!(le::u32_at(&id, ctrl_off::IOCCSZ), 4);
    assert_eq!(id[ctrl_off::MDTS], 8);
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::VOLATILE_WRITE_CACHE, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 0);
}

#[test]
fn log_page_edges() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    // Partial SMART reads via LPO.
    let (_, full) = run(
        &mut ctrl,
        &view,
        get_log(lid::SMART, 0, 512, 0, false),
        512,
        now,
    );
    let (c, part) = run(
        &mut ctrl,
        &view,
        get_log(lid::SMART, 0, 8, 0, false),
        8,
        now,
    );
    assert!(c.status.is_success());
    assert_eq!(&part[..], &full[..8]);
    let (_, tail) = run(
        &mut ctrl,
        &view,
        get_log(lid::SMART, 0, 16, 504, false),
        16,
        now,
    );
    assert_eq!(&tail[..8], &full[504..]);
    assert_eq!(&tail[8..], &[0; 8], "zero-filled past the end");
    // Offsets: unaligned, past the end.
    assert_eq!(
        status(&mut ctrl, &view, get_log(lid::SMART, 0, 8, 2, false), 8),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(&mut ctrl, &view, get_log(lid::SMART, 0, 8, 516, false), 8),
        Status::INVALID_FIELD
    );
    assert!(status(&mut ctrl, &view, get_log(lid::SMART, 0, 8, 512, false), 8).is_success());
    // Host buffer shorter than NUMD.
    assert_eq!(
        status(&mut ctrl, &view, get_log(lid::SMART, 0, 512, 0, false), 508).linux(),
        0x400F
    );
    // Firmware slot, supported pages, effects.
    let (_, fw) = run(
        &mut ctrl,
        &view,
        get_log(lid::FW_SLOT, 0, 512, 0, false),
        512,
        now,
    );
    assert_eq!(fw[0], 1);
    assert_eq!(&fw[8..16], b"0.1.0   ");
    let (_, sup) = run(
        &mut ctrl,
        &view,
        get_log(lid::SUPPORTED_LOG_PAGES, 0, 1024, 0, false),
        1024,
        now,
    );
    assert_eq!(le::u32_at(&sup, 2 * 4), 1);
    assert_eq!(le::u32_at(&sup, 0x70 * 4), 0);
    let (_, eff) = run(
        &mut ctrl,
        &view,
        get_log(lid::CMD_EFFECTS, 0, 4096, 0, false),
        4096,
        now,
    );
    assert_eq!(le::u32_at(&eff, 6 * 4), 1);
    assert_eq!(le::u32_at(&eff, 1024 + 4), 3, "Write: CSUPP | LBCC");
    // Unknown log pages, including discovery on an I/O controller (80h, reservation
    // notifications, is known: tests/tests/nvmf_reservations.rs reads it).
    for l in [0x06u8, 0x0C, 0x70, 0xFF] {
        assert_eq!(
            status(&mut ctrl, &view, get_log(l, 0, 512, 0, false), 512).linux(),
            0x4109,
            "lid {l:#x}"
        );
    }
}

/// Issue 13 item 12: LPA bit 1 was clear although the Commands Supported and Effects log
/// (05h) is served, so hosts (Linux reads it at connect when the bit is set) never asked.
#[test]
fn lpa_bit_1_advertises_the_commands_supported_and_effects_log() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    let (_, id) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, now);
    assert_eq!(id[ctrl_off::LPA] & 0b10, 0b10, "LPA bit 1");
    // What Linux then reads: NSID FFFFFFFFh, CSI 0 (NVM) in CDW14, 4 KiB.
    let mut s = get_log(lid::CMD_EFFECTS, NSID_ALL, 4096, 0, false);
    s.set_cdw(14, 0);
    let (c, eff) = run(&mut ctrl, &view, s, 4096, now);
    assert!(c.status.is_success());
    assert_eq!(eff.len(), 4096);
    assert_eq!(
        le::u32_at(&eff, usize::from(admin_opc::IDENTIFY) * 4),
        1,
        "Identify: CSUPP"
    );
    assert_eq!(
        le::u32_at(&eff, 1024 + usize::from(io_opc::READ) * 4),
        1,
        "Read: CSUPP"
    );
    // And the supported log pages say so too.
    let (_, sup) = run(
        &mut ctrl,
        &view,
        get_log(lid::SUPPORTED_LOG_PAGES, 0, 1024, 0, false),
        1024,
        now,
    );
    assert_eq!(le::u32_at(&sup, usize::from(lid::CMD_EFFECTS) * 4), 1);
}

/// Issue 13 item 12: the SMART / Health log for one NSID answered with the controller-wide
/// data although LPA bit 0 (per-namespace SMART) is clear; the spec wants Invalid Field.
#[test]
fn smart_log_for_one_namespace_is_invalid_field_without_lpa_bit_0() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    let (_, id) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, now);
    assert_eq!(id[ctrl_off::LPA] & 1, 0, "no per-namespace SMART");
    for nsid in [0, NSID_ALL] {
        assert!(
            status(
                &mut ctrl,
                &view,
                get_log(lid::SMART, nsid, 512, 0, false),
                512
            )
            .is_success(),
            "controller-wide SMART with NSID {nsid:#x}"
        );
    }
    // An active namespace, an inactive one, one above NN.
    for nsid in [1, 2, 1000] {
        assert_eq!(
            status(
                &mut ctrl,
                &view,
                get_log(lid::SMART, nsid, 512, 0, false),
                512
            ),
            Status::INVALID_FIELD,
            "SMART for NSID {nsid}"
        );
    }
}

#[test]
fn features() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    // Number of Queues: 0xFFFF refused; the grant is capped and fixed after the first Set.
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::NUMBER_OF_QUEUES, 0xFFFF),
            0
        ),
        Status::INVALID_FIELD
    );
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::NUMBER_OF_QUEUES, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 126 | 126 << 16, "unset: the maximum");
    let (c, _) = run(
        &mut ctrl,
        &view,
        set_features(fid::NUMBER_OF_QUEUES, 500 | 1 << 16),
        0,
        now,
    );
    assert_eq!(c.dw0, 126 | 1 << 16);
    assert_eq!(ctrl.granted_io_queues(), 2);
    let (c, _) = run(
        &mut ctrl,
        &view,
        set_features(fid::NUMBER_OF_QUEUES, 7 | 7 << 16),
        0,
        now,
    );
    assert_eq!(c.dw0, 126 | 1 << 16, "same answer the second time");
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::NUMBER_OF_QUEUES, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 126 | 1 << 16);
    // Async event configuration: only supported bits.
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::ASYNC_EVENT_CONFIG, 1 << 9),
            0
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::ASYNC_EVENT_CONFIG, 1 << 31),
            0
        ),
        Status::INVALID_FIELD
    );
    run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 0x1FF),
        0,
        now,
    );
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::ASYNC_EVENT_CONFIG, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 0x1FF);
    // Keep Alive Timer: rounded up to KAS (1 s), restarts the timer; 0 disables it.
    let t1 = now + Duration::from_secs(1);
    run(
        &mut ctrl,
        &view,
        set_features(fid::KEEP_ALIVE_TIMER, 1500),
        0,
        t1,
    );
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::KEEP_ALIVE_TIMER, 0, 0),
        0,
        t1,
    );
    assert_eq!(c.dw0, 2000);
    assert_eq!(
        ctrl.keep_alive_deadline(),
        Some(t1 + Duration::from_secs(2))
    );
    run(
        &mut ctrl,
        &view,
        set_features(fid::KEEP_ALIVE_TIMER, 0),
        0,
        t1,
    );
    assert_eq!(ctrl.keep_alive_deadline(), None);
    assert!(!ctrl.keep_alive_expired(t1 + Duration::from_secs(3600)));
    let s = status(&mut ctrl, &view, keep_alive(), 0);
    assert_eq!(s.linux(), 0x001A);
    assert!(!s.is_dnr());
    // Volatile write cache reflects the namespaces (ns 1 has one).
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::VOLATILE_WRITE_CACHE, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 1);
    assert!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::VOLATILE_WRITE_CACHE, 1),
            0
        )
        .is_success()
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::VOLATILE_WRITE_CACHE, 0),
            0
        ),
        Status::INVALID_FIELD
    );
    // Temperature threshold.
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::TEMPERATURE_THRESHOLD, 0, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 0x0157);
    run(
        &mut ctrl,
        &view,
        set_features(fid::TEMPERATURE_THRESHOLD, 1 << 20 | 250),
        0,
        now,
    );
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::TEMPERATURE_THRESHOLD, 0, 1 << 20),
        0,
        now,
    );
    assert_eq!(c.dw0, 250);
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::TEMPERATURE_THRESHOLD, 1, 1 << 20),
        0,
        now,
    );
    assert_eq!(c.dw0, 0, "default");
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::TEMPERATURE_THRESHOLD, 1 << 16),
            0
        ),
        Status::INVALID_FIELD
    );
    // Host identifier: 16 bytes with EXHID, else Invalid Field; Set → sequence error.
    let mut g = get_features(fid::HOST_IDENTIFIER, 0, 1);
    g.set_sgl1(keyed(16));
    let (c, data) = run(&mut ctrl, &view, g, 16, now);
    assert!(c.status.is_success());
    assert_eq!(&data[..], &HOSTID);
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            get_features(fid::HOST_IDENTIFIER, 0, 0),
            16
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            get_features(fid::HOST_IDENTIFIER, 0, 1),
            8
        )
        .linux(),
        0x400F
    );
    assert_eq!(
        status(&mut ctrl, &view, set_features(fid::HOST_IDENTIFIER, 1), 16),
        Status::COMMAND_SEQUENCE_ERROR
    );
    // Save bit, SEL=3 capabilities, SEL reserved, unknown features.
    let mut sv = set_features(fid::ASYNC_EVENT_CONFIG, 0);
    sv.set_cdw(10, u32::from(fid::ASYNC_EVENT_CONFIG) | 1 << 31);
    assert_eq!(status(&mut ctrl, &view, sv, 0).linux(), 0x410D);
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::KEEP_ALIVE_TIMER, 3, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 4);
    let (c, _) = run(
        &mut ctrl,
        &view,
        get_features(fid::VOLATILE_WRITE_CACHE, 3, 0),
        0,
        now,
    );
    assert_eq!(c.dw0, 0);
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            get_features(fid::KEEP_ALIVE_TIMER, 4, 0),
            0
        ),
        Status::INVALID_FIELD
    );
    for f in [0x03u8, 0x08, 0x0C, 0x0E, 0x16, 0x80, 0xFF] {
        assert_eq!(
            status(&mut ctrl, &view, set_features(f, 0), 0),
            Status::INVALID_FIELD,
            "set {f:#x}"
        );
        assert_eq!(
            status(&mut ctrl, &view, get_features(f, 0, 0), 0),
            Status::INVALID_FIELD,
            "get {f:#x}"
        );
    }
}

/// Issue 13 item 11: the mandatory features Arbitration (01h), Power Management (02h), Error
/// Recovery (05h) and Write Atomicity Normal (0Ah) answered Get Features with Invalid Field.
#[test]
fn mandatory_features_arbitration_power_error_recovery_write_atomicity_answer() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut ctrl = live_controller(&mut t, now);
    let view = t.view();
    // (feature, value): Arbitration burst "no limit" with round robin only (CAP.AMS 0, so no
    // weights); power state 0 of the single one (NPSS 0), no workload hint; no error recovery
    // time limit, no deallocated-block error; Write Atomicity Normal as AWUN says.
    for (f, value) in [(0x01u8, 0x7u32), (0x02, 0), (0x05, 0), (0x0A, 0)] {
        for sel in 0..3 {
            let (c, _) = run(&mut ctrl, &view, get_features(f, sel, 0), 0, now);
            assert_eq!(c.status, Status::SUCCESS, "get {f:#x} sel {sel}");
            assert_eq!(c.dw0, value, "get {f:#x} sel {sel}");
        }
        let (c, _) = run(&mut ctrl, &view, get_features(f, 3, 0), 0, now);
        assert_eq!(
            (c.status, c.dw0),
            (Status::SUCCESS, 0),
            "{f:#x}: neither saveable, namespace specific nor changeable"
        );
        assert_eq!(
            status(&mut ctrl, &view, set_features(f, value), 0),
            Status::FEATURE_NOT_CHANGEABLE,
            "set {f:#x}"
        );
    }
    // Prohibited on discovery controllers.
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 0);
    let mut disc = t.admin_connect(&s, &d, now).0.unwrap();
    let dv = t.disc_view();
    assert_eq!(prop_set(CC_EN1, &mut disc, &dv), CcChange::Enabled);
    for f in [0x01u8, 0x02, 0x05, 0x0A] {
        assert_eq!(
            status(&mut disc, &dv, get_features(f, 0, 0), 0),
            Status::INVALID_FIELD
        );
    }
}

#[test]
fn io_path_with_in_capsule_write_and_dsm() {
    let t = Tgt::new();
    let view = t.view();
    let policy = t.limits.io_sgl_policy();
    // 4 KiB in-capsule write: the SEND carries exactly 64 + 4096 bytes.
    let mut w = Sqe::new(io_opc::WRITE, 0x3000);
    w.set_nsid(1)
        .set_cdw(12, 7)
        .set_sgl1(SglDescriptor::in_capsule(0, 4096));
    let mut capsule = w.0.to_vec();
    capsule.extend(std::iter::repeat_n(0x5A, 4096));
    let sqe = Sqe::from_bytes(&capsule).unwrap();
    let d = sgl::parse(&sqe, &capsule[64..], &policy).unwrap();
    assert_eq!(
        d,
        DataSgl::InCapsule {
            offset: 0,
            len: 4096
        }
    );
    let cmd = io::decode(
        &sqe,
        view.namespace(sqe.nsid()),
        Ok(d.len()),
        t.limits.max_io_size,
    );
    assert_eq!(
        cmd,
        Ok(IoCmd::Write {
            slba: 0,
            blocks: 8,
            fua: false
        })
    );
    // Discard of two ranges with Linux's full 4096-byte buffer, in capsule.
    let mut dsm = Sqe::new(io_opc::DATASET_MANAGEMENT, 0x3001);
    dsm.set_nsid(1)
        .set_cdw(10, 1)
        .set_cdw(11, 1 << 2)
        .set_sgl1(SglDescriptor::in_capsule(0, 4096));
    let mut ranges = [0u8; 4096];
    le::put_u32(&mut ranges, 4, 16);
    le::put_u64(&mut ranges, 8, 100);
    le::put_u32(&mut ranges, 20, 8);
    le::put_u64(&mut ranges, 24, 2040);
    let d = sgl::parse(&dsm, &ranges, &policy).unwrap();
    let ns = view.namespace(1).unwrap();
    let cmd = io::decode(&dsm, Some(ns), Ok(d.len()), t.limits.max_io_size).unwrap();
    assert_eq!(cmd, IoCmd::Deallocate { ranges: 2 });
    let got: Vec<_> = io::dsm_ranges(&ranges, 2, ns)
        .unwrap()
        .map(|r| (r.slba, r.blocks))
        .collect();
    assert_eq!(got, [(100, 16), (2040, 8)]);
    // NSID 0 / unknown NSID.
    let mut r = Sqe::new(io_opc::READ, 1);
    r.set_sgl1(keyed(512));
    assert_eq!(
        io::decode(&r, view.namespace(0), Ok(512), t.limits.max_io_size),
        Err(Status::INVALID_NAMESPACE)
    );
}

#[test]
fn discovery_session() {
    let mut t = Tgt::new();
    let now = Instant::now();
    // 1. Connect to the well-known NQN with KATO 0 (nvme discover without -k).
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 0);
    let (ctrl, cqe) = t.admin_connect(&s, &d, now);
    let mut ctrl = ctrl.unwrap();
    assert!(cqe.status.is_success());
    assert_eq!(ctrl.kind(), SubsystemKind::Discovery);
    assert_eq!(ctrl.kato_ms(), 120_000, "discovery default KATO");
    let view = t.disc_view();
    let cap = prop_get(prop::CAP, true, &mut ctrl, &view);
    assert_eq!(cap & 0xFFFF, 127);
    prop_set(CC_EN0, &mut ctrl, &view);
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &view), CcChange::Enabled);
    assert_eq!(prop_get(prop::CSTS, false, &mut ctrl, &view), 1);
    prop_get(prop::VS, false, &mut ctrl, &view);
    let (c, id) = run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, now);
    assert!(c.status.is_success());
    assert_eq!(id[ctrl_off::CNTRLTYPE], 2);
    assert_eq!(
        &id[ctrl_off::SUBNQN..ctrl_off::SUBNQN + DISCOVERY_NQN.len() + 1],
        format!("{DISCOVERY_NQN}\0").as_bytes()
    );
    assert_eq!(le::u16_at(&id, ctrl_off::CNTLID), ctrl.cntlid());
    assert_eq!(le::u32_at(&id, ctrl_off::OAES), 1 << 31);
    assert_eq!(id[ctrl_off::LPA], 4, "no effects log on discovery");
    assert_eq!(le::u32_at(&id, ctrl_off::SGLS) & 4, 4);
    assert_eq!(le::u16_at(&id, ctrl_off::ICDOFF), 0);
    assert_eq!(le::u16_at(&id, ctrl_off::MAXCMD), 128);
    assert_eq!(le::u32_at(&id, ctrl_off::IOCCSZ), 4);
    assert_eq!(le::u32_at(&id, ctrl_off::IORCSZ), 1);
    assert_eq!(
        le::u32_at(&id, ctrl_off::SGLS),
        0x5,
        "no in-capsule data for discovery"
    );
    assert_eq!(id[ctrl_off::CMIC], 0);
    // Some kernels send CNS 06h: an error is fine.
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::CS_CONTROLLER, 0), 4096),
        Status::INVALID_FIELD
    );
    // OAES bit 31: Set Features 0Bh and one AER.
    let (c, _) = run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 1 << 31),
        0,
        now,
    );
    assert_eq!(c.dw0, 1 << 31);
    assert_eq!(
        ctrl.admin(&view, &aer(0x1F), &mut [], now),
        AdminOutcome::Parked
    );

    // 2. Header: LPO 0, 20 bytes, NSID 0.
    let (c, hdr) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 20, 0, true),
        20,
        now,
    );
    assert!(c.status.is_success());
    assert_eq!(le::u64_at(&hdr, 0), 1, "GENCTR");
    assert_eq!(le::u64_at(&hdr, 8), 1, "NUMREC");
    assert_eq!(le::u16_at(&hdr, 16), 0, "RECFMT");
    // 3. Entries: LPO 1024, NUMREC × 1024 bytes.
    let (_, e) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 1024, 1024, true),
        1024,
        now,
    );
    assert_eq!(&e[0..4], &[1, 1, subtype::NVME, 2]);
    assert_eq!(&e[256..256 + SUBNQN.len()], SUBNQN.as_bytes());
    assert_eq!(&e[512..525], b"192.168.100.1");
    assert_eq!(&e[32..36], b"4420");
    // Beyond the end: zeros.
    let (c, z) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 4096, 2048, false),
        4096,
        now,
    );
    assert!(c.status.is_success());
    assert!(z.iter().all(|&b| b == 0));
    // 4. Re-read the header: stable.
    let (_, hdr2) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0xFFFF_FFFF, 20, 0, false),
        20,
        now,
    );
    assert_eq!(hdr, hdr2);

    // A new subsystem becomes visible: GENCTR moves, the AER fires.
    let done = ctrl.discovery_log_changed().expect("AER completes");
    assert_eq!(
        done,
        AerCompletion {
            cid: 0x1F,
            dw0: 0x0070_F002
        }
    );
    t.genctr += 1;
    let mut cur =
        DiscoveryEntry::nvme_rdma(DISCOVERY_NQN, adrfam::IPV4, "192.168.100.1", "4420", 1);
    cur.subtype = subtype::CURRENT_DISCOVERY;
    cur.eflags = eflags::DUPRETINFO | eflags::EPCSD;
    t.entries.push(cur);
    let view = t.disc_view();
    let (_, hdr) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 20, 0, false),
        20,
        now,
    );
    assert_eq!((le::u64_at(&hdr, 0), le::u64_at(&hdr, 8)), (2, 2));
    let (_, e) = run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 2048, 1024, false),
        2048,
        now,
    );
    assert_eq!(e[1024 + 2], subtype::CURRENT_DISCOVERY);
    assert_eq!(le::u16_at(&e, 1024 + 10), 3);

    // Discovery controllers refuse everything else.
    assert_eq!(
        status(&mut ctrl, &view, identify(cns::NAMESPACE, 1), 4096),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(&mut ctrl, &view, get_log(lid::SMART, 0, 512, 0, false), 512),
        Status::INVALID_LOG_PAGE
    );
    assert_eq!(
        status(&mut ctrl, &view, set_features(fid::NUMBER_OF_QUEUES, 0), 0),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            set_features(fid::ASYNC_EVENT_CONFIG, 1 << 8),
            0
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(
            &mut ctrl,
            &view,
            get_features(fid::VOLATILE_WRITE_CACHE, 0, 0),
            0
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(&mut ctrl, &view, Sqe::new(admin_opc::ABORT, 3), 0),
        Status::INVALID_OPCODE
    );
    assert_eq!(ctrl.ns_changed(&[1]), None);
    let cqe = t.io_queue(&mut ctrl, 1, 31);
    assert_eq!(cqe.status, Status::CONNECT_INVALID_PARAMETERS);
    // Keep Alive works (persistent discovery).
    assert!(status(&mut ctrl, &view, keep_alive(), 0).is_success());
    // 6. Disconnect: shutdown handshake.
    assert_eq!(prop_set(0x0046_4001, &mut ctrl, &view), CcChange::Shutdown);
    let v = prop_get(prop::CSTS, false, &mut ctrl, &view) as u32;
    assert_eq!(v & csts::SHST_MASK, csts::SHST_COMPLETE);
}

#[test]
fn persistent_discovery_kato_kept() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 30_000);
    let ctrl = t.admin_connect(&s, &d, now).0.unwrap();
    assert_eq!(ctrl.kato_ms(), 30_000);
    // Older kernels with NVME_KATO_GRACE send 15000 for discovery: accepted.
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 15_000);
    assert!(t.admin_connect(&s, &d, now).0.is_some());
    // An I/O controller connected with KATO 0 has no keep-alive timer.
    let (s, d) = admin_connect_capsule(0, SUBNQN, 0);
    let c = t.admin_connect(&s, &d, now).0.unwrap();
    assert_eq!(c.keep_alive_deadline(), None);
}

#[test]
fn discovery_change_notices_follow_the_log_the_host_read() {
    let mut t = Tgt::new();
    let now = Instant::now();
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 30_000);
    let mut ctrl = t.admin_connect(&s, &d, now).0.unwrap();
    let view = t.disc_view();
    assert_eq!(prop_set(CC_EN1, &mut ctrl, &view), CcChange::Enabled);
    run(
        &mut ctrl,
        &view,
        set_features(fid::ASYNC_EVENT_CONFIG, 1 << 31),
        0,
        now,
    );
    run(
        &mut ctrl,
        &view,
        get_log(lid::DISCOVERY, 0, 1024, 0, false),
        1024,
        now,
    );
    assert_eq!(
        ctrl.admin(&view, &aer(0x1F), &mut [], now),
        AdminOutcome::Parked
    );
    // The same log: nothing to tell.
    assert_eq!(ctrl.discovery_log_generation(t.genctr), None);
    // A command built with a newer log does not count as having read it.
    t.genctr += 1;
    let newer = t.disc_view();
    assert!(status(&mut ctrl, &newer, keep_alive(), 0).is_success());
    let done = ctrl.discovery_log_generation(t.genctr).expect("notice");
    assert_eq!(done.dw0, 0x0070_F002);
    // Masked until the host reads the log with RAE = 0; then the next change is news.
    assert_eq!(
        ctrl.admin(&newer, &aer(0x2F), &mut [], now),
        AdminOutcome::Parked
    );
    assert_eq!(ctrl.discovery_log_generation(t.genctr + 1), None);
    run(
        &mut ctrl,
        &newer,
        get_log(lid::DISCOVERY, 0, 1024, 0, false),
        1024,
        now,
    );
    assert_eq!(ctrl.discovery_log_generation(t.genctr), None);
    assert_eq!(
        ctrl.discovery_log_generation(t.genctr + 5).map(|a| a.cid),
        Some(0x2F)
    );
    // I/O controllers never get it.
    let mut io = live_controller(&mut t, now);
    assert_eq!(io.discovery_log_generation(9), None);
}

#[test]
fn every_admin_command_refreshes_keep_alive() {
    let mut t = Tgt::new();
    let t0 = Instant::now();
    let mut ctrl = live_controller(&mut t, t0);
    let view = t.view();
    let t1 = t0 + Duration::from_secs(4);
    run(&mut ctrl, &view, identify(cns::CONTROLLER, 0), 4096, t1);
    assert!(!ctrl.keep_alive_expired(t0 + Duration::from_secs(8)));
    assert!(ctrl.keep_alive_expired(t1 + Duration::from_secs(5)));
}

/// xorshift64*: deterministic, dependency-free randomness for the fuzz test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random SQEs with plausible opcodes and random fields.
fn random_sqe(rng: &mut Rng) -> Sqe {
    let mut raw = [0u8; 64];
    rng.fill(&mut raw);
    const OPS: [u8; 14] = [
        0x00, 0x01, 0x02, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0C, 0x18, 0x7F, 0x7F, 0x7F, 0x04,
    ];
    match rng.below(4) {
        0 => {}
        _ => raw[0] = OPS[rng.below(OPS.len() as u64) as usize],
    }
    if raw[0] == 0x7F && rng.below(2) == 0 {
        raw[4] = [0, 1, 4, 5, 6, 8][rng.below(6) as usize];
    }
    if rng.below(2) == 0 {
        raw[1] = 0x40;
    }
    if rng.below(2) == 0 {
        // Small CNS / FID / LID / NSID values hit the interesting branches more often.
        raw[40] = rng.below(16) as u8 | if rng.below(4) == 0 { 0x70 } else { 0 };
        raw[4..8].copy_from_slice(&(rng.below(40) as u32).to_le_bytes());
    }
    Sqe(raw)
}

#[test]
fn fuzz_entry_points_do_not_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut t = Tgt::new();
    let now = Instant::now();
    let mut controllers = vec![live_controller(&mut t, now)];
    let (s, d) = admin_connect_capsule(0, SUBNQN, 5000);
    controllers.push(t.admin_connect(&s, &d, now).0.unwrap()); // not enabled
    let (s, d) = admin_connect_capsule(0, DISCOVERY_NQN, 0);
    let mut disc = t.admin_connect(&s, &d, now).0.unwrap();
    prop_set(CC_EN1, &mut disc, &t.disc_view());
    controllers.push(disc);

    let limits = t.limits;
    let policies = [
        limits.io_sgl_policy(),
        limits.admin_sgl_policy(0, 1 << 20),
        SglPolicy {
            keyed: false,
            transport_data_block: true,
            in_capsule_capacity: 8192,
            msdbd: 16,
            max_len: 1 << 20,
        },
        SglPolicy::rdma(4096, 16, 1 << 20),
    ];
    let mut buf = vec![0u8; 16384];
    let mut capsule = vec![0u8; 4096];
    for i in 0..60_000u32 {
        let sqe = random_sqe(&mut rng);
        let out_len = [0usize, 8, 16, 20, 512, 4095, 4096, 16384][rng.below(8) as usize];
        let in_len = rng.below(4097) as usize;
        rng.fill(&mut capsule[..in_len.min(64)]);
        let when = now + Duration::from_millis(rng.below(200_000));

        // SGL parsing.
        let policy = &policies[(i % 4) as usize];
        let sgl = sgl::parse(&sqe, &capsule[..in_len], policy);
        if let Ok(d) = &sgl {
            assert!(d.len() <= policy.max_len);
            if let DataSgl::InCapsule { offset, len } = d {
                assert!((*offset + *len) as usize <= in_len);
            }
        }
        // I/O decode with and without a namespace.
        let ns = t.namespaces.get(rng.below(3) as usize);
        if let Ok(cmd) = io::decode(
            &sqe,
            ns,
            sgl.as_ref().map(|d| d.len()).map_err(|s| *s),
            limits.max_io_size,
        ) {
            if let (
                Some(ns),
                IoCmd::Read { slba, blocks, .. } | IoCmd::Write { slba, blocks, .. },
            ) = (ns, cmd)
            {
                assert!(slba + u64::from(blocks) <= ns.num_blocks);
            }
            if let (Some(ns), IoCmd::Deallocate { ranges }) = (ns, cmd) {
                let _ = io::dsm_ranges(&capsule[..in_len], ranges, ns).map(|it| it.count());
            }
        }
        // Connect parsing with random data.
        let mut data = [0u8; 1024];
        rng.fill(&mut data);
        if rng.below(2) == 0 {
            data[256..256 + SUBNQN.len()].copy_from_slice(SUBNQN.as_bytes());
            data[256 + SUBNQN.len()] = 0;
            data[512..512 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
            data[512 + HOSTNQN.len()] = 0;
        }
        let mut connect_sqe = sqe;
        connect_sqe.0[0] = 0x7F;
        connect_sqe.0[4] = 0x01;
        if let Ok(c) = parse_connect(&connect_sqe, &data[..rng.below(1025) as usize]) {
            let _ = check_admin_connect(&c, &limits);
            let idx = rng.below(controllers.len() as u64) as usize;
            if let Ok(_dw0) = controllers[idx].accept_io_queue(&c) {
                controllers[idx].io_queue_closed(c.cmd.qid);
            }
        }
        // Admin commands on every controller state.
        let idx = rng.below(controllers.len() as u64) as usize;
        let view = if controllers[idx].kind() == SubsystemKind::Discovery {
            t.disc_view()
        } else {
            t.view()
        };
        let ctrl = &mut controllers[idx];
        match ctrl.admin(&view, &sqe, &mut buf[..out_len], when) {
            AdminOutcome::Complete(c) => {
                assert!(c.data_len <= out_len);
                if !c.status.is_success() {
                    assert_eq!(c.data_len, 0);
                }
                let cqe = c.cqe(&sqe, 1);
                assert_eq!(cqe.cid, sqe.cid());
            }
            AdminOutcome::Parked => {
                // Keep the number of parked AERs bounded by AERL+1.
                assert!(ctrl.parked_aers().len() <= 4);
                if rng.below(2) == 0 {
                    ctrl.cancel_aer(sqe.cid());
                }
            }
            AdminOutcome::Abort { .. } => {}
        }
        // Events and timers.
        match rng.below(16) {
            0 => {
                let _ = ctrl.ns_changed(&[rng.below(40) as u32]);
            }
            1 => {
                let _ = ctrl.discovery_log_changed();
            }
            2 => {
                let _ = ctrl.keep_alive_expired(when);
            }
            _ => {}
        }
        // Keep one controller enabled so that most commands get past the state check.
        if i % 1000 == 0 {
            for c in controllers.iter_mut() {
                let v = if c.kind() == SubsystemKind::Discovery {
                    t.disc_view()
                } else {
                    t.view()
                };
                prop_set(0, c, &v);
                prop_set(CC_EN1, c, &v);
            }
        }
        // Discovery log reads at random offsets.
        let log = DiscoveryLog {
            genctr: 3,
            entries: &t.entries,
        };
        let off = rng.next() >> rng.below(64);
        log.read(off, &mut buf[..out_len]);
    }
}
