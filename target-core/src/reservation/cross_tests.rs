//! NVMe ↔ SCSI: an NVMe host and SRP I_T nexuses on one volume, through both translations
//! (NVMe Reservation commands as capsule fields, SCSI PERSISTENT RESERVE CDBs and
//! parameter lists), with notifications delivered as the wiring will deliver them.

use std::collections::HashMap;

use super::*;
use crate::nvme::resv::{self as nresv, NotifyMask, RESERVATION_CONFLICT, opc};
use crate::nvme::resv_log::ResvLog;
use crate::nvme::spec::{Status, io_opc, le};
use crate::nvme::sqe::Sqe;
use crate::scsi::pr_access::command_class as scsi_class;
use crate::scsi::pr_in::{PERSISTENT_RESERVE_IN, decode_pr_in, execute_pr_in};
use crate::scsi::pr_out::{PERSISTENT_RESERVE_OUT, PrStatus, decode_pr_out, execute_pr_out};
use crate::scsi::reserve::{RESERVE_6, execute_reserve_release};
use crate::scsi::sense::Sense;
use crate::scsi::ua::{UaCheck, UaQueue, UnitAttention};

const NSID: u32 = 1;
const HOST_A: HostId = HostId([0xA0; 16]);
const HOST_B: HostId = HostId([0xB0; 16]);
const WRITE_10: [u8; 10] = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const READ_10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];

fn srp(b: u8) -> Nexus {
    Nexus {
        initiator: InitiatorPort::srp([b; 16]),
        relative_target_port: 1,
    }
}

/// One volume, its NVMe hosts' notification logs and its nexuses' UA queues.
struct Volume {
    res: Reservation,
    logs: HashMap<HostId, ResvLog>,
    uas: HashMap<Nexus, UaQueue>,
    aens: usize,
}

impl Volume {
    fn new(ptpl_capable: bool) -> Volume {
        Volume {
            res: Reservation::new(ptpl_capable),
            logs: HashMap::new(),
            uas: HashMap::new(),
            aens: 0,
        }
    }

    fn deliver(&mut self, fx: &Effects) {
        for n in &fx.notices {
            match n.to {
                Initiator::Nvme(h) => {
                    let log = self.logs.entry(h).or_default();
                    if log.notify(NSID, n.kind, NotifyMask::default()) {
                        self.aens += 1;
                    }
                }
                Initiator::Scsi(x) => self
                    .uas
                    .entry(x)
                    .or_insert_with(UaQueue::empty)
                    .establish(UnitAttention::for_notice(n.kind)),
            }
        }
    }

    // --- NVMe side

    fn nvme(&mut self, host: HostId, opcode: u8, cdw10: u32, k1: u64, k2: u64) -> Status {
        let mut s = Sqe::new(opcode, 1);
        s.set_nsid(NSID).set_cdw(10, cdw10);
        let mut data = [0u8; 16];
        le::put_u64(&mut data, 0, k1);
        le::put_u64(&mut data, 8, k2);
        let cmd = match nresv::decode(&s, Ok(16)) {
            Ok(c) => c,
            Err(st) => return st,
        };
        match nresv::execute(&cmd, &mut self.res, host, &data) {
            Ok(fx) => {
                self.deliver(&fx);
                Status::SUCCESS
            }
            Err(st) => st,
        }
    }

    fn nvme_io_allowed(&self, host: HostId, opcode: u8) -> bool {
        self.res
            .permits(Initiator::Nvme(host), nresv::command_class(opcode))
    }

    fn nvme_report(&self) -> Vec<u8> {
        let mut out = vec![0u8; 4096];
        let n = nresv::report(&self.res, true, &mut out).unwrap();
        out.truncate(n);
        out
    }

    // --- SCSI side

    fn pr_out(
        &mut self,
        n: Nexus,
        sa: u8,
        rtype: u8,
        key: u64,
        sa_key: u64,
        aptpl: bool,
    ) -> PrStatus {
        let mut c = [0u8; 10];
        c[0] = PERSISTENT_RESERVE_OUT;
        c[1] = sa;
        c[2] = rtype;
        c[8] = 24;
        let mut p = [0u8; 24];
        p[..8].copy_from_slice(&key.to_be_bytes());
        p[8..16].copy_from_slice(&sa_key.to_be_bytes());
        p[20] = u8::from(aptpl);
        let cdb = decode_pr_out(&c, 24).unwrap();
        let r = execute_pr_out(&mut self.res, n, &cdb, &p);
        self.deliver(&r.effects);
        r.status
    }

    fn pr_in(&self, sa: u8) -> Vec<u8> {
        let mut c = [0u8; 10];
        c[0] = PERSISTENT_RESERVE_IN;
        c[1] = sa;
        c[7] = 0x10;
        let mut out = vec![0u8; 4096];
        let n = execute_pr_in(&self.res, &decode_pr_in(&c).unwrap(), &mut out);
        out.truncate(n as usize);
        out
    }

    /// The exec layer's order: unit attention first, then the reservation check.
    fn scsi_cmd(&mut self, n: Nexus, cdb: &[u8]) -> Result<(), PrStatus> {
        if let UaCheck::Report(s) = self.uas.entry(n).or_insert_with(UaQueue::empty).check(cdb) {
            return Err(PrStatus::CheckCondition(s));
        }
        if !self.res.permits(Initiator::Scsi(n), scsi_class(cdb)) {
            return Err(PrStatus::ReservationConflict);
        }
        Ok(())
    }
}

#[test]
fn nvme_reservation_blocks_srp_writes_and_srp_sees_it() {
    let mut v = Volume::new(false);
    let s = srp(0x51);
    // NVMe host A registers and acquires Write Exclusive.
    assert_eq!(v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xAAAA), Status::SUCCESS);
    assert_eq!(
        v.nvme(HOST_A, opc::ACQUIRE, 1 << 8, 0xAAAA, 0),
        Status::SUCCESS
    );
    // The SRP initiator, unregistered: writes conflict, reads pass.
    assert_eq!(v.scsi_cmd(s, &WRITE_10), Err(PrStatus::ReservationConflict));
    assert_eq!(v.scsi_cmd(s, &READ_10), Ok(()));
    // It registers: a registrant of a Write Exclusive reservation still cannot write.
    assert_eq!(v.pr_out(s, 0x00, 0, 0, 0x5555, false), PrStatus::Good);
    assert_eq!(v.scsi_cmd(s, &WRITE_10), Err(PrStatus::ReservationConflict));
    // PR IN sees the NVMe host's reservation: key and type (WE = 1h in both protocols).
    let rr = v.pr_in(0x01);
    assert_eq!(&rr[8..16], &0xAAAAu64.to_be_bytes());
    assert_eq!(rr[21], 0x01);
    let keys = v.pr_in(0x00);
    assert_eq!(&keys[4..8], &[0, 0, 0, 16]);
    // READ FULL STATUS describes the NVMe host by its Host Identifier.
    let fs = v.pr_in(0x03);
    assert_eq!(fs[8 + 12], 0x03, "ALL_TG_PT, holder");
    assert_eq!(&fs[8 + 32..8 + 48], &[0xA0; 16]);
    // The NVMe report lists the SRP nexus.
    let rep = v.nvme_report();
    assert_eq!(le::u16_at(&rep, 5), 2);
    assert_eq!(le::u64_at(&rep, 128 + 8), 0x5555);
    assert_eq!(&rep[128 + 16..128 + 32], &[0x51; 16]);
    // Both views count the same generation.
    assert_eq!(
        le::u32_at(&rep, 0),
        u32::from_be_bytes(keys[..4].try_into().unwrap())
    );
}

#[test]
fn srp_preempt_and_abort_fences_the_nvme_host() {
    let mut v = Volume::new(false);
    let s = srp(0x52);
    v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA);
    v.nvme(HOST_A, opc::ACQUIRE, 3 << 8, 0xA, 0); // WE-RO
    assert_eq!(v.pr_out(s, 0x00, 0, 0, 0xB, false), PrStatus::Good);
    assert_eq!(
        v.scsi_cmd(s, &WRITE_10),
        Ok(()),
        "registrants may write under WE-RO"
    );
    // fence_scsi: PREEMPT AND ABORT the NVMe host's key, taking EA-RO (SCSI 6h).
    let mut c = [0u8; 10];
    c[0] = PERSISTENT_RESERVE_OUT;
    c[1] = 0x05;
    c[2] = 0x06;
    c[8] = 24;
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(&0xBu64.to_be_bytes());
    p[8..16].copy_from_slice(&0xAu64.to_be_bytes());
    let r = execute_pr_out(&mut v.res, s, &decode_pr_out(&c, 24).unwrap(), &p);
    assert_eq!(r.status, PrStatus::Good);
    assert_eq!(r.effects.aborted, vec![Initiator::Nvme(HOST_A)]);
    v.deliver(&r.effects);
    // The NVMe host gets a Registration Preempted log page and an AEN.
    assert_eq!(v.aens, 1);
    let (page, _) = v.logs.get_mut(&HOST_A).unwrap().read(false);
    assert_eq!(page[8], 1);
    assert_eq!(le::u32_at(&page, 12), NSID);
    // Its writes and reads now conflict (EA-RO, not registered); its old key is gone.
    assert!(!v.nvme_io_allowed(HOST_A, io_opc::WRITE));
    assert!(!v.nvme_io_allowed(HOST_A, io_opc::READ));
    assert_eq!(
        v.nvme(HOST_A, opc::ACQUIRE, 3 << 8, 0xA, 0),
        RESERVATION_CONFLICT
    );
    // NVMe report: RTYPE 4 (EA-RO), one registrant, the SRP nexus holding it.
    let rep = v.nvme_report();
    assert_eq!((rep[4], le::u16_at(&rep, 5)), (4, 1));
    assert_eq!(rep[64 + 2], 1);
    // Host B registers and may read/write (registrant of EA-RO).
    assert_eq!(v.nvme(HOST_B, opc::REGISTER, 0, 0, 0xC), Status::SUCCESS);
    assert!(v.nvme_io_allowed(HOST_B, io_opc::WRITE));
}

#[test]
fn nvme_clear_and_release_raise_unit_attentions_on_srp() {
    let mut v = Volume::new(false);
    let (s1, s2) = (srp(0x61), srp(0x62));
    v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA);
    v.pr_out(s1, 0x00, 0, 0, 0x1, false);
    v.pr_out(s2, 0x00, 0, 0, 0x2, false);
    // A holds WE-AR, then releases it: both nexuses get RESERVATIONS RELEASED.
    assert_eq!(
        v.nvme(HOST_A, opc::ACQUIRE, 5 << 8, 0xA, 0),
        Status::SUCCESS
    );
    assert_eq!(
        v.nvme(HOST_A, opc::RELEASE, 5 << 8, 0xA, 0),
        Status::SUCCESS
    );
    for s in [s1, s2] {
        assert_eq!(
            v.scsi_cmd(s, &READ_10),
            Err(PrStatus::CheckCondition(
                UnitAttention::ReservationsReleased.sense()
            ))
        );
        assert_eq!(v.scsi_cmd(s, &READ_10), Ok(()), "reported once");
    }
    // A clears: both nexuses lose their registration and get RESERVATIONS PREEMPTED.
    assert_eq!(v.nvme(HOST_A, opc::RELEASE, 1, 0xA, 0), Status::SUCCESS);
    assert!(v.res.registrants().is_empty());
    let inquiry = [0x12, 0, 0, 0, 36, 0];
    assert_eq!(v.scsi_cmd(s1, &inquiry), Ok(()), "INQUIRY does not report");
    assert_eq!(
        v.scsi_cmd(s1, &WRITE_10),
        Err(PrStatus::CheckCondition(Sense::new(
            crate::scsi::sense::SenseKey::UnitAttention,
            0x2A,
            0x03
        )))
    );
}

#[test]
fn srp_release_notifies_nvme_registrants() {
    let mut v = Volume::new(false);
    let s = srp(0x71);
    v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA);
    v.pr_out(s, 0x00, 0, 0, 0x7, false);
    assert_eq!(v.pr_out(s, 0x01, 0x05, 0x7, 0, false), PrStatus::Good); // WE-RO
    assert_eq!(v.pr_out(s, 0x02, 0x05, 0x7, 0, false), PrStatus::Good);
    let (page, _) = v.logs.get_mut(&HOST_A).unwrap().read(false);
    assert_eq!(page[8], 2, "Reservation Released");
}

#[test]
fn types_map_one_to_one_between_protocols() {
    for t in ResvType::ALL {
        // NVMe acquires, SCSI reads the reservation.
        let mut v = Volume::new(false);
        v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA);
        assert_eq!(
            v.nvme(HOST_A, opc::ACQUIRE, u32::from(t.nvme()) << 8, 0xA, 0),
            Status::SUCCESS
        );
        assert_eq!(v.pr_in(0x01)[21], t.scsi(), "{t:?}");
        // SCSI reserves, NVMe reports; NVMe releases with its own code of the same type.
        let mut v = Volume::new(false);
        let s = srp(0x33);
        v.pr_out(s, 0x00, 0, 0, 0x3, false);
        v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA);
        assert_eq!(v.pr_out(s, 0x01, t.scsi(), 0x3, 0, false), PrStatus::Good);
        assert_eq!(v.nvme_report()[4], t.nvme(), "{t:?}");
        if t.all_registrants() {
            // Every registrant holds it: the NVMe host may release it.
            assert_eq!(
                v.nvme(HOST_A, opc::RELEASE, u32::from(t.nvme()) << 8, 0xA, 0),
                Status::SUCCESS
            );
            assert_eq!(v.res.reserved(), None);
        }
    }
}

#[test]
fn spc2_reserve_keeps_nvme_hosts_out() {
    let mut v = Volume::new(false);
    let s = srp(0x81);
    assert_eq!(
        execute_reserve_release(&mut v.res, s, &[RESERVE_6, 0, 0, 0, 0, 0]),
        PrStatus::Good
    );
    assert!(!v.nvme_io_allowed(HOST_A, io_opc::READ));
    assert_eq!(
        v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA),
        RESERVATION_CONFLICT
    );
    // After the nexus goes away the volume is open again.
    assert!(v.res.nexus_lost(s));
    assert!(v.nvme_io_allowed(HOST_A, io_opc::WRITE));
    assert_eq!(v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA), Status::SUCCESS);
    // Now registrations exist: RESERVE(6) from an unregistered nexus conflicts.
    assert_eq!(
        execute_reserve_release(&mut v.res, s, &[RESERVE_6, 0, 0, 0, 0, 0]),
        PrStatus::ReservationConflict
    );
}

#[test]
fn persisted_state_of_both_protocols_survives_a_restart() {
    let bdev = uuid::Uuid::from_bytes([7; 16]);
    let mut v = Volume::new(true);
    let s = srp(0x91);
    // SCSI registers with APTPL; the NVMe host registers and acquires EA.
    assert_eq!(v.pr_out(s, 0x00, 0, 0, 0x9, true), PrStatus::Good);
    assert!(v.res.ptpl());
    assert_eq!(v.nvme(HOST_A, opc::REGISTER, 0, 0, 0xA), Status::SUCCESS);
    assert_eq!(
        v.nvme(HOST_A, opc::ACQUIRE, 2 << 8, 0xA, 0),
        Status::SUCCESS
    );
    let text = ptpl::encode(&v.res, &bdev);
    // "Restart": a new volume loads the file.
    let mut v2 = Volume::new(true);
    v2.res = ptpl::decode(&text, &bdev, true).unwrap();
    assert!(v2.res.is_holder(Initiator::Nvme(HOST_A)));
    assert_eq!(v2.res.key_of(Initiator::Scsi(s)), Some(0x9));
    assert_eq!(v2.scsi_cmd(s, &READ_10), Err(PrStatus::ReservationConflict));
    // The NVMe host's reservation continues: it can release it with its key.
    assert_eq!(
        v2.nvme(HOST_A, opc::RELEASE, 2 << 8, 0xA, 0),
        Status::SUCCESS
    );
    // The SCSI side turns persistence off; the file becomes empty.
    assert_eq!(v2.pr_out(s, 0x00, 0, 0x9, 0x9, false), PrStatus::Good);
    assert_eq!(ptpl::encode(&v2.res, &bdev), "");
}
