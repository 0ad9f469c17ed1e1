//! SCSI reservations over SRP (docs/reservations.md): two SRP logins with different initiator
//! port ids are two I_T nexuses, hence two registrants. PERSISTENT RESERVE IN/OUT,
//! RESERVE(6)/RELEASE(6) and the RESERVATION CONFLICT check run on the volume's one
//! reservation state; the nexuses sit on different reactors, so each change must reach the
//! other poll group's view before the command that made it completes.

use rtgt_tests::srp_initiator::pr::*;
use rtgt_tests::srp_initiator::{Data, Layout, SrpFixture, SrpInitiator, cdb};
use serde_json::json;

const A: u64 = 0x5254_0012_3456_0001;
const B: u64 = 0x5254_0012_3456_0002;
const C: u64 = 0x5254_0012_3456_0003;

#[test]
fn persistent_reservations_between_two_srp_initiators() {
    let fx = SrpFixture::new(2, json!({}), 1, 2048);
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    let mut c = fx.login(C);

    // Two nexuses, two registrants.
    assert_eq!(pr_out(&mut a, REGISTER, 0, 0, 0xAA).status, GOOD);
    assert_eq!(pr_out(&mut b, REGISTER, 0, 0, 0xBB).status, GOOD);
    let (generation, keys) = read_keys(&mut c);
    assert_eq!((generation, keys), (2, vec![0xAA, 0xBB]));
    // Registering again with a wrong key conflicts.
    assert_eq!(pr_out(&mut b, REGISTER, 0, 0x11, 0xCC).status, CONFLICT);

    // A reserves Write Exclusive: writes from the others conflict, reads are allowed.
    assert_eq!(read_reservation(&mut b), None);
    assert_eq!(
        pr_out(&mut a, RESERVE, WRITE_EXCLUSIVE, 0xAA, 0).status,
        GOOD
    );
    assert_eq!(read_reservation(&mut b), Some((0xAA, WRITE_EXCLUSIVE)));
    assert_eq!(write(&mut b).status, CONFLICT, "registrant's write");
    assert_eq!(write(&mut c).status, CONFLICT, "non-registrant's write");
    assert_eq!(read(&mut b).status, GOOD, "registrant's read");
    assert_eq!(read(&mut c).status, GOOD, "non-registrant's read");
    assert_eq!(write(&mut a).status, GOOD, "holder's write");
    // B cannot take another reservation while A holds one.
    assert_eq!(
        pr_out(&mut b, RESERVE, WRITE_EXCLUSIVE, 0xBB, 0).status,
        CONFLICT
    );
    // RESERVE(6) from a registrant while a Write Exclusive reservation exists: conflict
    // (SPC-4 5.13.3); from the holder: GOOD, nothing changes.
    assert_eq!(six(&mut b, 0x16).status, CONFLICT, "RESERVE(6) from B");
    assert_eq!(six(&mut a, 0x16).status, GOOD, "RESERVE(6) from the holder");
    assert_eq!(write(&mut b).status, CONFLICT);

    // B preempts A: A's registration is gone, B holds the reservation, and A hears of it.
    assert_eq!(
        pr_out(&mut b, PREEMPT, WRITE_EXCLUSIVE, 0xBB, 0xAA).status,
        GOOD
    );
    assert_eq!(read_reservation(&mut c), Some((0xBB, WRITE_EXCLUSIVE)));
    let r = write(&mut a);
    assert_eq!(
        (r.status, r.sense_key()),
        (CHECK_CONDITION, Some((0x6, 0x2A, 0x05))),
        "REGISTRATIONS PREEMPTED"
    );
    assert_eq!(
        write(&mut a).status,
        CONFLICT,
        "the preempted initiator's write"
    );
    assert_eq!(write(&mut b).status, GOOD, "the new holder's write");
    let (_, keys) = read_keys(&mut a);
    assert_eq!(keys, vec![0xBB]);

    // Release: everyone writes again.
    assert_eq!(
        pr_out(&mut b, RELEASE, WRITE_EXCLUSIVE, 0xBB, 0).status,
        GOOD
    );
    assert_eq!(read_reservation(&mut a), None);
    assert_eq!(write(&mut a).status, GOOD);
    assert_eq!(write(&mut c).status, GOOD);

    // Clear: every registration goes.
    assert_eq!(pr_out(&mut a, REGISTER, 0, 0, 0xA2).status, GOOD);
    assert_eq!(
        pr_out(&mut b, RESERVE, WRITE_EXCLUSIVE, 0xBB, 0).status,
        GOOD
    );
    assert_eq!(pr_out(&mut a, CLEAR, 0, 0xA2, 0).status, GOOD);
    let (_, keys) = read_keys(&mut c);
    assert!(keys.is_empty(), "{keys:x?}");
    assert_eq!(read_reservation(&mut c), None);
    let r = write(&mut b);
    assert_eq!(
        (r.status, r.sense_key()),
        (CHECK_CONDITION, Some((0x6, 0x2A, 0x03))),
        "RESERVATIONS PREEMPTED on the cleared holder"
    );
    assert_eq!(write(&mut b).status, GOOD);
}

#[test]
fn reserve_6_and_release_6_between_two_srp_initiators() {
    let fx = SrpFixture::new(2, json!({}), 1, 2048);
    let mut a = fx.login(A);
    let mut b = fx.login(B);

    assert_eq!(six(&mut a, 0x16).status, GOOD, "RESERVE(6)");
    assert_eq!(write(&mut b).status, CONFLICT);
    assert_eq!(read(&mut b).status, CONFLICT, "SPC-2: reads conflict too");
    assert_eq!(
        b.run(0, &cdb::tur(), &Data::None, Layout::Direct)
            .unwrap()
            .status,
        CONFLICT,
        "TEST UNIT READY"
    );
    let r = b
        .run(
            0,
            &cdb::inquiry(None, 36),
            &Data::In(vec![(0, 36)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, GOOD, "INQUIRY is answered");
    assert_eq!(six(&mut b, 0x16).status, CONFLICT, "RESERVE(6) from B");
    assert_eq!(six(&mut b, 0x17).status, GOOD, "RELEASE(6) by a non-holder");
    assert_eq!(write(&mut b).status, CONFLICT, "still reserved");
    assert_eq!(
        pr_out(&mut b, REGISTER, 0, 0, 0xBB).status,
        CONFLICT,
        "PERSISTENT RESERVE OUT through another nexus's RESERVE"
    );
    assert_eq!(write(&mut a).status, GOOD, "the holder writes");
    assert_eq!(six(&mut a, 0x17).status, GOOD, "RELEASE(6)");
    assert_eq!(write(&mut b).status, GOOD);

    // With a registration on the LU, RESERVE(6) from an unregistered nexus conflicts.
    assert_eq!(pr_out(&mut b, REGISTER, 0, 0, 0xBB).status, GOOD);
    assert_eq!(
        six(&mut a, 0x16).status,
        CONFLICT,
        "RESERVE(6) vs registrations"
    );
    assert_eq!(
        pr_out(&mut b, REGISTER, 0, 0xBB, 0).status,
        GOOD,
        "unregister"
    );

    // The nexus going away drops its SPC-2 reservation.
    assert_eq!(six(&mut a, 0x16).status, GOOD);
    assert_eq!(write(&mut b).status, CONFLICT);
    a.logout().unwrap();
    drop(a);
    fx.wait_until("A's session is gone", |f| f.controllers().len() == 1);
    assert_eq!(write(&mut b).status, GOOD, "after A logged out");
}

/// fence_scsi: node B's PREEMPT AND ABORT aborts node A's in-flight writes (answered TASK
/// ABORTED, never GOOD), completes only after they are gone, and A's later writes conflict.
#[test]
fn preempt_and_abort_aborts_the_preempted_nexus_tasks_and_waits_for_them() {
    use rtgt_tests::srp_initiator::rw10;
    use std::time::Duration;
    let fx = SrpFixture::new(2, json!({}), 1, 2048);
    let (nsid, gate) = fx.gated("Gate0", 2048);
    let lun = (nsid - 1) as u16;
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    let mut c = fx.login(C);
    assert_eq!(pr_out_on(&mut a, lun, REGISTER, 0, 0, 0xAA).status, GOOD);
    assert_eq!(pr_out_on(&mut b, lun, REGISTER, 0, 0, 0xBB).status, GOOD);
    assert_eq!(
        pr_out_on(&mut a, lun, RESERVE, WRITE_EXCLUSIVE, 0xAA, 0).status,
        GOOD
    );
    // A third initiator's read is in flight too: not preempted, not aborted.
    assert_eq!(
        c.run(
            lun,
            &rw10(0x28, 0, 1),
            &Data::In(vec![(0, 512)]),
            Layout::Direct
        )
        .unwrap()
        .status,
        GOOD
    );
    gate.close();
    let writes: Vec<u64> = (0..3)
        .map(|k| {
            a.command(
                lun,
                &rw10(0x2a, k, 1),
                &Data::Out(vec![(k as usize * 512, 512)]),
                Layout::Direct,
                false,
            )
            .unwrap()
        })
        .collect();
    let read_c = c
        .command(
            lun,
            &rw10(0x28, 8, 1),
            &Data::In(vec![(0, 512)]),
            Layout::Direct,
            false,
        )
        .unwrap();
    fx.wait_until("A's writes and C's read parked", |_| gate.held() == 4);
    let pa = pr_out_start(&mut b, lun, PREEMPT_AND_ABORT, WRITE_EXCLUSIVE, 0xBB, 0xAA);
    assert!(
        b.next_response(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "PREEMPT AND ABORT waits for A's tasks"
    );
    gate.open();
    assert_eq!(b.wait(pa).unwrap().status, GOOD, "PREEMPT AND ABORT");
    for t in writes {
        let r = a.wait(t).unwrap();
        assert_eq!(r.status, 0x40, "A's in-flight write: TASK ABORTED, {r:?}");
    }
    assert_eq!(c.wait(read_c).unwrap().status, GOOD, "C's read ran");
    assert_eq!(
        read_reservation_on(&mut c, lun),
        Some((0xBB, WRITE_EXCLUSIVE))
    );
    let w = |i: &mut SrpInitiator| {
        i.run(
            lun,
            &rw10(0x2a, 20, 1),
            &Data::Out(vec![(0, 512)]),
            Layout::Direct,
        )
        .unwrap()
    };
    let r = w(&mut a);
    assert_eq!(
        (r.status, r.sense_key()),
        (CHECK_CONDITION, Some((0x6, 0x2A, 0x05))),
        "REGISTRATIONS PREEMPTED"
    );
    assert_eq!(w(&mut a).status, CONFLICT, "A's later write");
    assert_eq!(w(&mut b).status, GOOD, "the new holder writes");
}

fn read_reservation_on(i: &mut SrpInitiator, lun: u16) -> Option<(u64, u8)> {
    let c = [0x5E, 0x01, 0, 0, 0, 0, 0, 0x01, 0x00, 0];
    let r = i
        .run(lun, &c, &Data::In(vec![(0, 256)]), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, GOOD);
    let d = &i.mem()[..24];
    (u32::from_be_bytes(d[4..8].try_into().unwrap()) >= 16).then(|| {
        (
            u64::from_be_bytes(d[8..16].try_into().unwrap()),
            d[21] & 0x0F,
        )
    })
}
