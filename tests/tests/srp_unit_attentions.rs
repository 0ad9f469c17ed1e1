//! Unit attentions over SRP (docs/reservations.md, "Unit attentions"): one queue per I_T
//! nexus per logical unit, shared by every channel of the nexus. POWER ON on a nexus's first
//! command to each LU; a condition is heard once by a multi-channel nexus and only on its LU.

use rtgt_tests::srp_initiator::pr::*;
use rtgt_tests::srp_initiator::{Data, Layout, Response, SrpFixture, SrpInitiator, cdb};
use serde_json::json;

const A: u64 = 0x5254_0012_3456_0001;
const B: u64 = 0x5254_0012_3456_0002;

fn tur(i: &mut SrpInitiator, lun: u16) -> Response {
    i.run(lun, &cdb::tur(), &Data::None, Layout::Direct)
        .unwrap()
}

fn sense(r: &Response) -> Option<(u8, u8, u8)> {
    (r.status == CHECK_CONDITION)
        .then(|| r.sense_key())
        .flatten()
}

#[test]
fn power_on_is_reported_on_the_first_command_to_each_lu() {
    let fx = SrpFixture::new(2, json!({}), 2, 2048);
    let mut a = fx.login(A);
    a.absorb_power_on = false;
    // INQUIRY and REPORT LUNS do not report it.
    let r = a
        .run(
            0,
            &cdb::inquiry(None, 36),
            &Data::In(vec![(0, 36)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, GOOD, "INQUIRY");
    assert_eq!(sense(&tur(&mut a, 0)), Some((0x6, 0x29, 0x00)), "LU 0");
    assert_eq!(tur(&mut a, 0).status, GOOD);
    assert_eq!(sense(&tur(&mut a, 1)), Some((0x6, 0x29, 0x00)), "LU 1");
    assert_eq!(tur(&mut a, 1).status, GOOD);
    // A second channel of the same nexus: already reported.
    let mut p = fx.params(A);
    p.multi_channel = true;
    p.tag_base = 1 << 16;
    let mut a2 = fx.login_with(&p).expect("second channel");
    a2.absorb_power_on = false;
    assert_eq!(
        tur(&mut a2, 0).status,
        GOOD,
        "the nexus heard it on its first channel"
    );
    // Another nexus has its own.
    let mut b = fx.login(B);
    b.absorb_power_on = false;
    assert_eq!(sense(&tur(&mut b, 0)), Some((0x6, 0x29, 0x00)), "B");
}

#[test]
fn a_condition_is_heard_once_per_nexus_and_only_on_its_lu() {
    let fx = SrpFixture::new(2, json!({}), 2, 2048);
    let mut p = fx.params(A);
    p.multi_channel = true;
    let mut a1 = fx.login_with(&p).expect("A, channel 1");
    p.tag_base = 1 << 16;
    let mut a2 = fx.login_with(&p).expect("A, channel 2");
    let mut b = fx.login(B);
    // Both nexuses register on LU 1; B preempts A there.
    assert_eq!(pr_out_on(&mut a1, 1, REGISTER, 0, 0, 0xAA).status, GOOD);
    assert_eq!(pr_out_on(&mut b, 1, REGISTER, 0, 0, 0xBB).status, GOOD);
    assert_eq!(tur(&mut a1, 0).status, GOOD);
    assert_eq!(tur(&mut a2, 0).status, GOOD);
    assert_eq!(tur(&mut a2, 1).status, GOOD);
    assert_eq!(
        pr_out_on(&mut b, 1, PREEMPT, WRITE_EXCLUSIVE, 0xBB, 0xAA).status,
        GOOD
    );
    // LU 0 knows nothing of it, on either channel.
    assert_eq!(tur(&mut a1, 0).status, GOOD, "LU 0, channel 1");
    assert_eq!(tur(&mut a2, 0).status, GOOD, "LU 0, channel 2");
    // LU 1: reported once, on whichever channel asks first.
    assert_eq!(
        sense(&tur(&mut a2, 1)),
        Some((0x6, 0x2A, 0x05)),
        "REGISTRATIONS PREEMPTED on channel 2"
    );
    assert_eq!(tur(&mut a1, 1).status, GOOD, "not again on channel 1");
    assert_eq!(tur(&mut a2, 1).status, GOOD);
}

/// MODE SELECT changes parameters every nexus shares: the others hear MODE PARAMETERS
/// CHANGED (2Ah/01h) on that LU, the nexus that changed them does not.
#[test]
fn mode_select_tells_the_other_nexuses() {
    let fx = SrpFixture::new(2, json!({}), 2, 2048);
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    // Header (no block descriptor), then the control page as MODE SENSE reports it, SWP set.
    let list: [u8; 16] = [
        0, 0, 0, 0, 0x0A, 0x0A, 0x00, 0x10, 0x08, 0x40, 0, 0, 0xFF, 0xFF, 0, 0,
    ];
    a.mem()[..list.len()].copy_from_slice(&list);
    let r = a
        .run(
            0,
            &[0x15, 0x10, 0, 0, list.len() as u8, 0],
            &Data::Out(vec![(0, list.len() as u32)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, GOOD, "MODE SELECT: {:?}", r.sense_key());
    assert_eq!(tur(&mut a, 0).status, GOOD, "the requester hears nothing");
    assert_eq!(sense(&tur(&mut b, 1)), None, "not on another LU");
    assert_eq!(sense(&tur(&mut b, 0)), Some((0x6, 0x2A, 0x01)), "B on LU 0");
    assert_eq!(tur(&mut b, 0).status, GOOD, "reported once");
}

/// SPC-4: the initiator port whose I_T nexus was lost (its last channel closed) hears I_T
/// NEXUS LOSS OCCURRED (29h/07h) on its first command to each LU when it logs in again —
/// not POWER ON; an initiator port never seen before hears POWER ON.
#[test]
fn a_nexus_back_after_its_loss_hears_it_nexus_loss_occurred() {
    let fx = SrpFixture::new(2, json!({}), 2, 2048);
    let mut a = fx.login(A);
    a.absorb_power_on = false;
    assert_eq!(
        sense(&tur(&mut a, 0)),
        Some((0x6, 0x29, 0x00)),
        "first login"
    );
    a.logout().unwrap();
    drop(a);
    fx.wait_until("A's nexus is gone", |f| f.controllers().is_empty());

    let mut a = fx.login(A);
    a.absorb_power_on = false;
    for lun in [0, 1] {
        assert_eq!(
            sense(&tur(&mut a, lun)),
            Some((0x6, 0x29, 0x07)),
            "LU {lun} after the nexus loss"
        );
        assert_eq!(tur(&mut a, lun).status, GOOD, "reported once");
    }
    let mut b = fx.login(B);
    b.absorb_power_on = false;
    assert_eq!(sense(&tur(&mut b, 0)), Some((0x6, 0x29, 0x00)), "B is new");
    // Back once: a second loss-free login of A's nexus on another channel hears nothing.
    let mut p = fx.params(A);
    p.multi_channel = true;
    p.tag_base = 1 << 16;
    let mut a2 = fx.login_with(&p).expect("second channel");
    a2.absorb_power_on = false;
    assert_eq!(tur(&mut a2, 0).status, GOOD);
}
