//! Implicit ALUA on SRP (SPC-4 §5.15) seen by an SRP initiator on the sim fabric: one
//! subsystem with ANA reporting on two SRP listeners (two SCSI target ports, each its own
//! target port group). INQUIRY reports TPGS = 01b and VPD 83h the port's relative port and
//! group; REPORT TARGET PORT GROUPS (both formats) lists both groups with their states; a
//! command through a port that is not active for the LU gets NOT READY with the state's ASCQ
//! while the commands SPC-4 allows still run; a state change raises ASYMMETRIC ACCESS STATE
//! CHANGED on every nexus of the LU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rtgt_tests::srp_initiator::{Data, Layout, LoginParams, SrpFixture, SrpInitiator, cdb, rw10};
use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
use serde_json::json;
use target_core::ana::AnaState;
use target_core::target::{AdrFam, ListenAddr, SubsystemParams, scsi_port};
use transport_srp::proto::PortId;

const NQN: &str = "nqn.2016-06.io.rtgt:alua";
const PORT_A: u16 = 5100;
const PORT_B: u16 = 5101;
/// Explicit ids of port A; port B gets derived ones.
const REL_A: u16 = 0x0011;
const TPG_A: u16 = 0x0021;

struct Alua {
    t: TestTarget,
    a: ListenAddr,
    b: ListenAddr,
    rel_b: u16,
    tpg_b: u16,
    gate: Arc<rtgt_tests::gate::Gate>,
}

fn srp_addr(port: u16) -> ListenAddr {
    ListenAddr::new("SRP", AdrFam::Ipv4, TARGET_IP, &port.to_string())
}

/// ANA reporting, 4 groups; LUN 0 (group 1) a malloc bdev, LUN 1 (group 2) a gated one; port
/// A optimized with explicit ids, port B inaccessible with derived ids.
fn two_ports() -> Alua {
    let t = TestTarget::start(2);
    t.transport("SRP", json!({}));
    let mut p = SubsystemParams::new(NQN);
    p.allow_any_host = true;
    p.ana_reporting = true;
    p.max_namespaces = 4;
    t.rt.block_on(t.target.create_subsystem(p)).unwrap();
    t.malloc("m0", 1024, 512);
    t.add_ns(NQN, "m0");
    let gate = t.gated("g1", 1024, 512);
    t.add_ns(NQN, "g1");
    let mut a = srp_addr(PORT_A);
    a.attrs
        .insert(scsi_port::RELATIVE_PORT_ATTR.into(), json!(REL_A));
    a.attrs.insert(scsi_port::TPG_ATTR.into(), json!(TPG_A));
    t.rt.block_on(t.target.add_listener(NQN, a.clone()))
        .unwrap();
    let b = srp_addr(PORT_B);
    t.rt.block_on(
        t.target
            .add_listener_ana(NQN, b.clone(), Some(AnaState::Inaccessible)),
    )
    .unwrap();
    let stored = t.target.subsystem(NQN).unwrap().with_config(|c| {
        c.listeners
            .iter()
            .find(|l| **l == b)
            .and_then(scsi_port::scsi_port)
            .unwrap()
    });
    Alua {
        t,
        a,
        b,
        rel_b: stored.relative_port,
        tpg_b: stored.tpg_id,
        gate,
    }
}

impl Alua {
    fn login(&self, port: u16, ini: u64) -> SrpInitiator {
        let mut p = LoginParams::linux(
            PortId::from_halves(0, ini),
            transport_srp::port_id::derived_target_port_id(NQN),
        );
        p.src = Some(std::net::SocketAddr::new(HOST_IP.parse().unwrap(), 0));
        let addr = std::net::SocketAddr::new(TARGET_IP.parse().unwrap(), port);
        SrpInitiator::login(&self.t.fabric, addr, &p).expect("login")
    }

    fn set(&self, l: &ListenAddr, state: AnaState, group: Option<u32>) {
        self.t
            .rt
            .block_on(self.t.target.set_listener_ana_state(NQN, l, state, group))
            .unwrap();
    }
}

/// Runs a data-in command; returns (status, sense key/ASC/ASCQ, data).
fn data_in(
    i: &mut SrpInitiator,
    lun: u16,
    c: &[u8],
    len: u32,
) -> (u8, Option<(u8, u8, u8)>, Vec<u8>) {
    let r = i
        .run(lun, c, &Data::In(vec![(0, len)]), Layout::Direct)
        .unwrap();
    let n = (len as usize).min(i.mem().len());
    (r.status, r.sense_key(), i.mem()[..n].to_vec())
}

fn rtpg_cdb(extended: bool, alloc: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xA3;
    c[1] = 0x0A | if extended { 0x20 } else { 0 };
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}

/// REPORT TARGET PORT GROUPS: the returned bytes (RETURN DATA LENGTH + 4 of them).
fn rtpg(i: &mut SrpInitiator, lun: u16, extended: bool) -> Vec<u8> {
    let (st, sense, d) = data_in(i, lun, &rtpg_cdb(extended, 512), 512);
    assert_eq!((st, sense), (0, None), "REPORT TARGET PORT GROUPS");
    let len = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize + 4;
    d[..len].to_vec()
}

fn desc(state: u8, tpg: u16, altered: bool, rel: u16) -> Vec<u8> {
    let (t, r) = (tpg.to_be_bytes(), rel.to_be_bytes());
    vec![
        state,
        0x8F,
        t[0],
        t[1],
        0,
        if altered { 0x02 } else { 0 },
        0,
        1,
        0,
        0,
        r[0],
        r[1],
    ]
}

fn tur(i: &mut SrpInitiator, lun: u16) -> Option<(u8, u8, u8)> {
    i.run(lun, &cdb::tur(), &Data::None, Layout::Direct)
        .unwrap()
        .sense_key()
}

fn read(i: &mut SrpInitiator, lun: u16) -> Option<(u8, u8, u8)> {
    i.run(
        lun,
        &rw10(0x28, 0, 1),
        &Data::In(vec![(0, 512)]),
        Layout::Direct,
    )
    .unwrap()
    .sense_key()
}

/// Sends a READ(10) of block 0 into memory offset `off` without waiting; returns its tag.
fn send_read(i: &mut SrpInitiator, lun: u16, off: usize) -> u64 {
    i.command(
        lun,
        &rw10(0x28, 0, 1),
        &Data::In(vec![(off, 512)]),
        Layout::Direct,
        false,
    )
    .unwrap()
}

/// The VPD 83h designators of association target port: (type, identifier bytes 2-3).
fn port_designators(d: &[u8]) -> Vec<(u8, u16)> {
    let len = u16::from_be_bytes([d[2], d[3]]) as usize + 4;
    let mut k = 4;
    let mut v = Vec::new();
    while k + 4 <= len {
        let dl = usize::from(d[k + 3]);
        if d[k + 1] & 0x30 == 0x10 && d[k + 3] == 4 {
            assert_eq!(d[k] >> 4, 4, "SRP protocol identifier");
            assert_eq!(d[k + 1] & 0x80, 0x80, "PIV");
            v.push((d[k + 1] & 0x0F, u16::from_be_bytes([d[k + 6], d[k + 7]])));
        }
        k += 4 + dl;
    }
    v
}

#[test]
fn inquiry_reports_implicit_alua_and_vpd_83h_the_ports_ids() {
    let x = two_ports();
    assert_ne!(x.rel_b, REL_A);
    assert_ne!(x.tpg_b, TPG_A);
    for (port, rel, tpg) in [(PORT_A, REL_A, TPG_A), (PORT_B, x.rel_b, x.tpg_b)] {
        let mut i = x.login(port, 1);
        let (st, _, d) = data_in(&mut i, 0, &cdb::inquiry(None, 96), 96);
        assert_eq!(st, 0);
        assert_eq!(d[5] & 0x30, 0x10, "TPGS = 01b (implicit ALUA only)");
        // INQUIRY works through a standby port too (port B), as does VPD 83h.
        let (st, _, d) = data_in(&mut i, 0, &cdb::inquiry(Some(0x83), 255), 255);
        assert_eq!(st, 0);
        assert_eq!(
            port_designators(&d),
            [(4, rel), (5, tpg)],
            "relative target port, then target port group (port {port})"
        );
    }
    // Without ANA reporting: TPGS 0, no group designator, the relative port stays.
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let mut i = fx.login(1);
    let (_, _, d) = data_in(&mut i, 0, &cdb::inquiry(None, 96), 96);
    assert_eq!(d[5] & 0x30, 0, "no TPGS without ana_reporting");
    let (_, _, d) = data_in(&mut i, 0, &cdb::inquiry(Some(0x83), 255), 255);
    let des = port_designators(&d);
    assert_eq!(des.len(), 1, "{des:?}");
    assert_eq!(des[0].0, 4);
    assert_ne!(des[0].1, 0);
    let (st, sense, _) = data_in(&mut i, 0, &rtpg_cdb(false, 256), 256);
    assert_eq!(
        (st, sense),
        (2, Some((5, 0x24, 0))),
        "no REPORT TARGET PORT GROUPS without ALUA"
    );
}

#[test]
fn rtpg_lists_both_groups_in_both_formats() {
    let x = two_ports();
    let mut a = x.login(PORT_A, 1);
    let mut b = x.login(PORT_B, 2);
    // Groups ascending by id; A active/optimized, B standby; nobody changed anything yet.
    let mut groups = [
        (TPG_A, desc(0x0, TPG_A, false, REL_A)),
        (x.tpg_b, desc(0x2, x.tpg_b, false, x.rel_b)),
    ];
    groups.sort_by_key(|g| g.0);
    let body: Vec<u8> = groups.iter().flat_map(|g| g.1.clone()).collect();
    let mut want = vec![0, 0, 0, 24];
    want.extend(&body);
    assert_eq!(rtpg(&mut a, 0, false), want, "length-only format");
    // RTPG runs through a standby port too, with the same answer.
    assert_eq!(rtpg(&mut b, 0, false), want);
    let mut want = vec![0, 0, 0, 28, 0x10, 10, 0, 0];
    want.extend(&body);
    assert_eq!(rtpg(&mut a, 1, true), want, "extended format, ANATT 10 s");
    // A truncated allocation length still reports the full length.
    let (st, _, d) = data_in(&mut a, 0, &rtpg_cdb(true, 8), 8);
    assert_eq!(st, 0);
    assert_eq!(&d[..8], &[0, 0, 0, 28, 0x10, 10, 0, 0]);
    // Other formats are refused.
    let mut c = rtpg_cdb(false, 64);
    c[1] |= 0x40;
    let (st, sense, _) = data_in(&mut a, 0, &c, 64);
    assert_eq!((st, sense), (2, Some((5, 0x24, 0))));

    // Group 1 (LUN 0): A non-optimized (altered), B optimized (altered); LUN 1 unchanged.
    x.set(&x.a, AnaState::NonOptimized, Some(1));
    x.set(&x.b, AnaState::Optimized, Some(1));
    assert_eq!(tur(&mut b, 0), Some((6, 0x2A, 0x06)), "the states changed");
    let d = rtpg(&mut b, 0, false);
    let find = |d: &[u8], tpg: u16| {
        d[4..]
            .chunks(12)
            .find(|c| u16::from_be_bytes([c[2], c[3]]) == tpg)
            .unwrap()
            .to_vec()
    };
    assert_eq!(find(&d, TPG_A), desc(0x1, TPG_A, true, REL_A));
    assert_eq!(find(&d, x.tpg_b), desc(0x0, x.tpg_b, true, x.rel_b));
    let d = rtpg(&mut b, 1, false);
    assert_eq!(find(&d, TPG_A), desc(0x0, TPG_A, false, REL_A));
    assert_eq!(find(&d, x.tpg_b), desc(0x2, x.tpg_b, false, x.rel_b));
}

#[test]
fn report_supported_opcodes_lists_rtpg() {
    let x = two_ports();
    let mut a = x.login(PORT_A, 1);
    // One command: MAINTENANCE IN / 0Ah (REPORTING OPTIONS 2).
    let c = [0xA3, 0x0C, 0x02, 0xA3, 0x00, 0x0A, 0, 0, 1, 0, 0, 0];
    let (st, _, d) = data_in(&mut a, 0, &c, 256);
    assert_eq!(st, 0);
    assert_eq!(d[1] & 0x07, 0x03, "supported");
    assert_eq!(u16::from_be_bytes([d[2], d[3]]), 12, "CDB length");
    assert_eq!(&d[4..6], &[0xA3, 0xEA]);
}

#[test]
fn each_state_answers_a_read_with_its_sense_and_lets_allowed_commands_run() {
    let x = two_ports();
    let mut a = x.login(PORT_A, 1);
    let mut b = x.login(PORT_B, 2);
    let rc10 = [0x25u8, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    // Optimized and non-optimized: everything runs.
    assert_eq!(read(&mut a, 0), None);
    x.set(&x.a, AnaState::NonOptimized, None);
    assert_eq!(tur(&mut a, 0), Some((6, 0x2A, 0x06)), "the state changed");
    assert_eq!(read(&mut a, 0), None, "active/non-optimized serves reads");
    assert_eq!(
        tur(&mut b, 0),
        Some((6, 0x2A, 0x06)),
        "on every nexus of the LU"
    );

    // Standby (inaccessible): READ and TUR get NOT READY / 04h/0Bh; READ CAPACITY, INQUIRY,
    // REPORT LUNS, RTPG still run.
    assert_eq!(read(&mut b, 0), Some((2, 0x04, 0x0B)));
    assert_eq!(tur(&mut b, 0), Some((2, 0x04, 0x0B)));
    let (st, sense, d) = data_in(&mut b, 0, &rc10, 8);
    assert_eq!((st, sense), (0, None), "READ CAPACITY(10) in standby");
    assert_eq!(u32::from_be_bytes(d[..4].try_into().unwrap()), 1023);
    assert_eq!(data_in(&mut b, 0, &cdb::inquiry(None, 96), 96).0, 0);
    assert_eq!(data_in(&mut b, 0, &cdb::report_luns(256), 256).0, 0);

    // Unavailable (persistent loss: not settable over RPC, set through the target here):
    // READ CAPACITY is refused too, with 04h/0Ch; INQUIRY still runs.
    x.set(&x.b, AnaState::PersistentLoss, None);
    assert_eq!(tur(&mut b, 0), Some((6, 0x2A, 0x06)));
    assert_eq!(read(&mut b, 0), Some((2, 0x04, 0x0C)));
    let (st, sense, _) = data_in(&mut b, 0, &rc10, 8);
    assert_eq!((st, sense), (2, Some((2, 0x04, 0x0C))));
    assert_eq!(data_in(&mut b, 0, &cdb::inquiry(None, 96), 96).0, 0);
    assert_eq!(rtpg(&mut b, 0, false)[4..].chunks(12).count(), 2);

    // Port A leaves an active state for standby while a READ of LUN 1 is parked in the gated
    // bdev: the change goes through transitioning (Fh) and waits for the READ to drain; a
    // command sent meanwhile is held, never failed with a media error, and answered with the
    // transition's or the new state's NOT READY; then A is standby and B serves the LU.
    x.set(&x.b, AnaState::Optimized, None);
    assert_eq!(tur(&mut a, 1), Some((6, 0x2A, 0x06)), "B changed");
    assert_eq!(tur(&mut b, 1), Some((6, 0x2A, 0x06)));
    x.gate.close();
    let parked = send_read(&mut a, 1, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while x.gate.held() == 0 {
        assert!(Instant::now() < deadline, "the READ never reached the bdev");
        std::thread::sleep(Duration::from_millis(5));
    }
    let target = Arc::clone(&x.t.target);
    let addr_a = x.a.clone();
    // On a thread of its own: the call returns only once the READ has drained.
    let demote = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(target.set_listener_ana_state(NQN, &addr_a, AnaState::Inaccessible, None))
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!demote.is_finished(), "the demotion waits for the drain");
    let held = send_read(&mut a, 0, 512);
    std::thread::sleep(Duration::from_millis(100));
    x.gate.open();
    assert_eq!(
        a.wait(parked).unwrap().status,
        0,
        "the parked READ completes"
    );
    let r = a.wait(held).unwrap();
    let s = r.sense_key();
    assert!(
        matches!(s, Some((2, 0x04, 0x0A | 0x0B)) | Some((6, 0x2A, 0x06))),
        "held READ: {r:?}"
    );
    demote.join().unwrap().unwrap();
    let mut s = read(&mut a, 0);
    while s == Some((6, 0x2A, 0x06)) {
        s = read(&mut a, 0);
    }
    assert_eq!(s, Some((2, 0x04, 0x0B)), "standby after the drain");
    while tur(&mut b, 0).is_some() {}
    assert_eq!(read(&mut b, 0), None, "B serves the LU");
}

#[test]
fn a_state_change_raises_the_unit_attention_on_every_nexus_of_the_lu() {
    let x = two_ports();
    let mut chans = vec![
        x.login(PORT_A, 1),
        x.login(PORT_A, 2),
        x.login(PORT_B, 3),
        x.login(PORT_B, 4),
    ];
    // Group 2 (LUN 1) only: every nexus sees LUN 1, so every channel gets it once.
    x.set(&x.b, AnaState::Optimized, Some(2));
    for c in &mut chans {
        // INQUIRY neither reports nor clears it.
        assert_eq!(data_in(c, 1, &cdb::inquiry(None, 96), 96).0, 0);
        assert_eq!(
            tur(c, 1),
            Some((6, 0x2A, 0x06)),
            "ASYMMETRIC ACCESS STATE CHANGED"
        );
        assert_eq!(tur(c, 1), None, "reported once");
    }
    // Setting the state a path already has changes nothing: no unit attention.
    x.set(&x.b, AnaState::Optimized, Some(2));
    for c in &mut chans {
        assert_eq!(tur(c, 1), None);
    }
}

#[test]
fn duplicate_ids_are_refused_and_change_nothing() {
    let x = two_ports();
    let mut c = srp_addr(5102);
    c.attrs
        .insert(scsi_port::RELATIVE_PORT_ATTR.into(), json!(REL_A));
    let e =
        x.t.rt
            .block_on(x.t.target.add_listener(NQN, c))
            .unwrap_err();
    assert!(e.to_string().contains("relative_target_port_id 17"), "{e}");
    let mut c = srp_addr(5102);
    c.attrs.insert(scsi_port::TPG_ATTR.into(), json!(x.tpg_b));
    let e =
        x.t.rt
            .block_on(x.t.target.add_listener(NQN, c))
            .unwrap_err();
    assert!(e.to_string().contains("target_port_group_id"), "{e}");
    let n =
        x.t.target
            .subsystem(NQN)
            .unwrap()
            .with_config(|c| c.listeners.len());
    assert_eq!(n, 2, "nothing added");
}

/// A state change of an NVMe-oF listener of the same subsystem changes nothing SCSI hosts see:
/// no unit attention on the SRP channels (it used to raise REPORTED LUNS DATA HAS CHANGED,
/// the transport taking any ANA log change for a namespace change).
#[test]
fn an_nvme_listener_state_change_tells_srp_initiators_nothing() {
    let x = two_ports();
    x.t.transport("RDMA", json!({}));
    let r = ListenAddr::new("RDMA", AdrFam::Ipv4, TARGET_IP, "4420");
    x.t.rt
        .block_on(x.t.target.add_listener(NQN, r.clone()))
        .unwrap();
    let mut a = x.login(PORT_A, 1);
    assert_eq!(tur(&mut a, 0), None);
    x.set(&r, AnaState::Inaccessible, None);
    assert_eq!(tur(&mut a, 0), None, "no unit attention");
    // An SRP port's change does raise one.
    x.set(&x.b, AnaState::NonOptimized, Some(1));
    assert_eq!(tur(&mut a, 0), Some((6, 0x2A, 0x06)));
}
