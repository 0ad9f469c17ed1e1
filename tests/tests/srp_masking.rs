//! Namespace masking on SRP: the per-host lists of `nvmf_ns_add_host` name SRP initiators by
//! their initiator port id. A LUN a nexus does not see is absent from its REPORT LUNS and
//! answers LOGICAL UNIT NOT SUPPORTED, as a LUN nothing is behind; the other initiator, added
//! to the namespace, uses it. A change raises REPORTED LUNS DATA HAS CHANGED on the nexus.

use rtgt_tests::srp_initiator::{BS, Data, Layout, SrpFixture, SrpInitiator, cdb, rw10};
use serde_json::json;
use target_core::target::NsParams;
use transport_srp::proto::PortId;

const SEEN: u64 = 0x5254_0012_3456_7890;
const NOT_SEEN: u64 = 0x5254_0012_3456_7891;

fn report_luns(i: &mut SrpInitiator) -> Vec<u16> {
    let r = i
        .run(
            0,
            &cdb::report_luns(256),
            &Data::In(vec![(0, 256)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0, "REPORT LUNS");
    let len = u32::from_be_bytes(i.mem()[..4].try_into().unwrap()) as usize;
    (0..len / 8)
        .map(|k| u16::from_be_bytes([i.mem()[8 + k * 8], i.mem()[9 + k * 8]]))
        .collect()
}

fn tur(i: &mut SrpInitiator, lun: u16) -> Option<(u8, u8, u8)> {
    let r = i
        .run(lun, &cdb::tur(), &Data::None, Layout::Direct)
        .unwrap();
    r.sense_key()
}

#[test]
fn a_hidden_lun_is_not_there_for_initiators_it_was_not_added_to() {
    let fx = SrpFixture::new(1, json!({}), 1, 2048);
    fx.t.malloc("Hidden", 2048, BS);
    let nsid =
        fx.t.rt
            .block_on(fx.t.target.add_namespace(
                &fx.nqn,
                NsParams {
                    bdev_name: "Hidden".into(),
                    no_auto_visible: true,
                    ..Default::default()
                },
            ))
            .unwrap();
    assert_eq!(nsid, 2, "LUN 1");
    let set = |ini: u64, visible: bool| {
        let host = PortId::from_halves(0, ini).to_string();
        fx.t.rt
            .block_on(
                fx.t.target
                    .set_ns_host_visible(&fx.nqn, nsid, &host, visible),
            )
            .unwrap();
    };
    set(SEEN, true);
    let mut seen = fx.login(SEEN);
    let mut not_seen = fx.login(NOT_SEEN);

    assert_eq!(report_luns(&mut seen), [0, 1]);
    assert_eq!(
        tur(&mut seen, 1),
        None,
        "TEST UNIT READY on the visible LUN"
    );
    let r = seen
        .run(
            1,
            &rw10(0x2a, 0, 1),
            &Data::Out(vec![(0, BS)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0, "WRITE(10) on the visible LUN");

    assert_eq!(report_luns(&mut not_seen), [0]);
    assert_eq!(tur(&mut not_seen, 1), Some((0x5, 0x25, 0x00)));
    let r = not_seen
        .run(
            1,
            &rw10(0x28, 0, 1),
            &Data::In(vec![(0, BS)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(
        r.sense_key(),
        Some((0x5, 0x25, 0x00)),
        "READ(10) on the hidden LUN"
    );
    let r = not_seen
        .run(
            1,
            &cdb::inquiry(None, 36),
            &Data::In(vec![(0, 36)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(
        (r.status, not_seen.mem()[0]),
        (0, 0x7f),
        "INQUIRY: no LU there"
    );
    assert_eq!(tur(&mut not_seen, 0), None, "LUN 0 is visible to all");

    // Hidden from the first initiator too, while it is logged in: the next command (other
    // than INQUIRY, REPORT LUNS, REQUEST SENSE) reports REPORTED LUNS DATA HAS CHANGED once.
    set(SEEN, false);
    assert_eq!(
        tur(&mut seen, 0),
        Some((0x6, 0x3f, 0x0e)),
        "the unit attention"
    );
    assert_eq!(tur(&mut seen, 0), None, "reported once");
    assert_eq!(report_luns(&mut seen), [0]);
    assert_eq!(tur(&mut seen, 1), Some((0x5, 0x25, 0x00)));
    // And shown to the second: REPORT LUNS clears the condition (SPC-4), so nothing is
    // reported after it.
    set(NOT_SEEN, true);
    assert_eq!(report_luns(&mut not_seen), [0, 1]);
    // Its first command to the LU now there: POWER ON (its earlier commands found no LU).
    assert_eq!(tur(&mut not_seen, 1), Some((0x6, 0x29, 0x00)));
    assert_eq!(tur(&mut not_seen, 1), None);
    // REQUEST SENSE delivers a pending condition as its data, with GOOD status, and clears it.
    set(NOT_SEEN, false);
    let r = not_seen
        .run(
            0,
            &[0x03, 0, 0, 0, 18, 0],
            &Data::In(vec![(0, 18)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0, "REQUEST SENSE");
    let m = not_seen.mem();
    assert_eq!(
        (m[2] & 0xf, m[12], m[13]),
        (0x6, 0x3f, 0x0e),
        "its sense data"
    );
    assert_eq!(tur(&mut not_seen, 0), None);
}
