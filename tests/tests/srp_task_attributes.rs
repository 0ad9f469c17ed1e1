//! SRP_CMD task attributes (SAM-5 8.6, docs/reservations.md "Task attributes"): an ORDERED
//! task waits for the older tasks of its logical unit and the younger SIMPLE tasks wait for
//! it; HEAD OF QUEUE is not held behind the barrier; ACA is refused. The gated bdev shows
//! which commands reached the bdev: a dormant task never does.

use std::time::Duration;

use rtgt_tests::srp_initiator::{Data, Layout, Response, SrpFixture, SrpInitiator, rw10};
use serde_json::json;
use transport_srp::proto::{Tag, TaskAttr, TaskMgmt, TmResponse};

const A: u64 = 0x5254_0012_3456_00a1;
const B: u64 = 0x5254_0012_3456_00b1;
const GOOD: u8 = 0x00;

fn read(i: &mut SrpInitiator, lun: u16, lba: u32, attr: TaskAttr) -> u64 {
    let off = (lba as usize % 64) * 512;
    i.command_attr(
        lun,
        &rw10(0x28, lba, 1),
        &Data::In(vec![(off, 512)]),
        Layout::Direct,
        false,
        attr,
    )
    .unwrap()
}

fn write(i: &mut SrpInitiator, lun: u16, lba: u32, attr: TaskAttr) -> u64 {
    let off = (lba as usize % 64) * 512;
    i.command_attr(
        lun,
        &rw10(0x2a, lba, 1),
        &Data::Out(vec![(off, 512)]),
        Layout::Direct,
        false,
        attr,
    )
    .unwrap()
}

/// Opens the gate when dropped: a failed assertion does not leave I/O held in the target
/// (its shutdown would wait for it forever).
struct OpenOnDrop(std::sync::Arc<rtgt_tests::gate::Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Runs `f`'s command and waits for its response.
fn now(i: &mut SrpInitiator, f: impl FnOnce(&mut SrpInitiator) -> u64) -> Response {
    let t = f(i);
    i.wait(t).unwrap()
}

fn quiet(i: &mut SrpInitiator, ms: u64, what: &str) {
    let r = i.next_response(Duration::from_millis(ms)).unwrap();
    assert!(r.is_none(), "{what}: {r:?}");
}

#[test]
fn ordered_waits_for_older_tasks_younger_simple_waits_for_it_head_of_queue_passes() {
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    let (nsid, gate) = fx.gated("Gate0", 1024);
    let _open = OpenOnDrop(gate.clone());
    let lun = (nsid - 1) as u16;
    let mut a = fx.login(A);
    // The initiator's first command to the LU (its TEST UNIT READY) before the gate closes.
    assert_eq!(
        now(&mut a, |i| read(i, lun, 0, TaskAttr::Simple)).status,
        GOOD
    );

    gate.close();
    let r1 = read(&mut a, lun, 1, TaskAttr::Simple);
    fx.wait_until("the slow SIMPLE read in the bdev", |_| gate.held() == 1);
    let w = write(&mut a, lun, 2, TaskAttr::Ordered);
    let r2 = read(&mut a, lun, 3, TaskAttr::Simple);
    quiet(&mut a, 300, "nothing can end while the read is held");
    assert_eq!(
        gate.held(),
        1,
        "the ORDERED write and the SIMPLE read behind it stay out of the bdev"
    );
    let h = read(&mut a, lun, 4, TaskAttr::HeadOfQueue);
    fx.wait_until("HEAD OF QUEUE passes the ORDERED barrier", |_| {
        gate.held() == 2
    });

    // The older read and the HEAD OF QUEUE read end: only then does the ORDERED write start.
    gate.pass(2);
    assert_eq!(a.wait(r1).unwrap().status, GOOD);
    assert_eq!(a.wait(h).unwrap().status, GOOD);
    fx.wait_until("the ORDERED write in the bdev", |_| gate.held() == 1);
    quiet(&mut a, 300, "the ORDERED write is held");
    assert_eq!(
        gate.held(),
        1,
        "the younger SIMPLE read waits for the ORDERED write"
    );

    gate.pass(1);
    assert_eq!(a.wait(w).unwrap().status, GOOD);
    fx.wait_until("the younger SIMPLE read in the bdev", |_| gate.held() == 1);
    gate.open();
    assert_eq!(a.wait(r2).unwrap().status, GOOD);

    // The task set is idle again: an ORDERED command runs at once.
    assert_eq!(
        now(&mut a, |i| write(i, lun, 5, TaskAttr::Ordered)).status,
        GOOD
    );
}

#[test]
fn aca_task_attribute_is_refused() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let mut a = fx.login(A);
    let r = now(&mut a, |i| read(i, 0, 0, TaskAttr::Aca));
    assert_eq!(r.status, 0x02, "{r:?}");
    assert_eq!(
        r.sense_key(),
        Some((0x5, 0x24, 0x00)),
        "INVALID FIELD IN CDB"
    );
    // The LU still serves the other attributes.
    assert_eq!(
        now(&mut a, |i| read(i, 0, 0, TaskAttr::Ordered)).status,
        GOOD
    );
}

fn tm_code(i: &mut SrpInitiator, tag: u64) -> TmResponse {
    let r = i.wait(tag).unwrap();
    r.tm.expect("a task management response")
}

#[test]
fn task_management_finds_and_aborts_dormant_tasks() {
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    let (nsid, gate) = fx.gated("Gate0", 1024);
    let _open = OpenOnDrop(gate.clone());
    let lun = (nsid - 1) as u16;
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    for i in [&mut a, &mut b] {
        assert_eq!(now(i, |i| read(i, lun, 0, TaskAttr::Simple)).status, GOOD);
    }

    // ABORT TASK of a dormant ORDERED task: answered at once (nothing of it is in flight),
    // and the SIMPLE task behind it goes to the bdev.
    gate.close();
    let r1 = read(&mut a, lun, 1, TaskAttr::Simple);
    fx.wait_until("the SIMPLE read in the bdev", |_| gate.held() == 1);
    let w = write(&mut a, lun, 2, TaskAttr::Ordered);
    let r2 = read(&mut a, lun, 3, TaskAttr::Simple);
    quiet(&mut a, 200, "all held");
    assert_eq!(gate.held(), 1);
    let tm = a
        .task_mgmt(
            lun,
            TaskMgmt::AbortTask {
                task_tag: Tag(w.to_le_bytes()),
            },
        )
        .unwrap();
    assert_eq!(tm_code(&mut a, tm), TmResponse::Complete);
    fx.wait_until("the SIMPLE read no longer behind the ORDERED", |_| {
        gate.held() == 2
    });

    // LOGICAL UNIT RESET from B with another dormant ORDERED task of A's: every task of the LU
    // is aborted; A's are answered TASK ABORTED (TAS = 1), the dormant one included.
    let w2 = write(&mut a, lun, 4, TaskAttr::Ordered);
    quiet(&mut a, 200, "all held");
    assert_eq!(gate.held(), 2);
    let tm = b.task_mgmt(lun, TaskMgmt::LunReset).unwrap();
    quiet(&mut b, 200, "the reset waits for the reads in the bdev");
    gate.open();
    assert_eq!(tm_code(&mut b, tm), TmResponse::Complete);
    for t in [r1, r2, w2] {
        let r = a.wait(t).unwrap();
        assert_eq!(r.status, 0x40, "TASK ABORTED: {r:?}");
    }
    quiet(&mut a, 100, "the task ABORT TASK aborted is not answered");

    // Nothing is left counted in the task set: ORDERED runs at once (the unit attention of
    // the reset first).
    let r = now(&mut a, |i| write(i, lun, 5, TaskAttr::Ordered));
    assert_eq!(r.sense_key(), Some((0x6, 0x29, 0x03)), "{r:?}");
    assert_eq!(
        now(&mut a, |i| write(i, lun, 5, TaskAttr::Ordered)).status,
        GOOD
    );
}
