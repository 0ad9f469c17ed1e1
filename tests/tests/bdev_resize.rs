//! A bdev that changes size (`bdev_null_resize` here; an RBD image resized by another client in
//! `rbd_initiators.rs`) changes the namespaces and LUs on it while hosts are connected: NVMe
//! hosts get a Namespace Attribute Changed notice whose Changed Namespace List names the
//! namespace, Identify Namespace reports the new NSZE/NCAP/NUSE and I/O reaches the new blocks;
//! SCSI initiators get CAPACITY DATA HAS CHANGED (2Ah/09h) once on the LU, and READ CAPACITY
//! the new size. Other LUs hear nothing.

use std::time::Duration;

use rtgt_tests::nvme_host::*;
use rtgt_tests::srp_initiator::{BS, Data as SrpData, Layout, SrpFixture, SrpInitiator, cdb};
use serde_json::json;
use target_core::bdev::NullBdev;
use target_core::nvme::Status;

const A: &str = "nqn.2016-06.io.rtgt:resize";

/// Grows null bdev `name` to `mib` MiB, as `bdev_null_resize` does.
fn null_resize(t: &rtgt_tests::TestTarget, name: &str, mib: u64) {
    let bdevs = t.target.bdevs();
    NullBdev::lookup(bdevs, name)
        .expect("a null bdev")
        .resize(bdevs, mib)
        .expect("resize");
}

/// (NSZE, NCAP, NUSE) of Identify Namespace.
fn sizes(c: &mut HostCtrl, nsid: u32) -> [u64; 3] {
    let d = c.identify(0, nsid).expect("identify namespace");
    let at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    [at(0), at(8), at(16)]
}

fn write_status(c: &mut HostCtrl, nsid: u32, lba: u64) -> Status {
    c.io[0]
        .cmd(
            write_sqe(nsid, lba, 1),
            Data::KeyedWrite {
                bytes: &[0x5a; 512],
                invalidate: true,
            },
        )
        .expect("the write completes")
        .cqe
        .status
}

#[test]
fn a_grown_null_bdev_is_a_namespace_attribute_changed_notice_and_a_bigger_namespace() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(A, true, 0, 512);
    e.t.malloc("Other", 1024, 512);
    e.t.null("Grows", 2048, 512);
    let other = e.t.add_ns(A, "Other");
    let nsid = e.t.add_ns(A, "Grows");
    let mut c = e.connect(e.opts(A)).unwrap();
    assert_eq!(sizes(&mut c, nsid), [2048; 3]);
    assert_eq!(write_status(&mut c, nsid, 3000), Status::LBA_OUT_OF_RANGE);

    let aer = c.park_aer(1 << 8);
    null_resize(&e.t, "Grows", 2);
    let done = c.admin.wait(aer).unwrap().ok().unwrap();
    assert_eq!(done.cqe.dw0, 0x0004_0002, "Namespace Attribute Changed");
    let changed = nsid_list(&c.get_log(0x04, 0xFFFF_FFFF, 0, 4096, false).unwrap());
    assert_eq!(changed, [nsid], "only the resized namespace is listed");
    assert_eq!(sizes(&mut c, nsid), [4096; 3], "2 MiB of 512-byte blocks");
    assert_eq!(sizes(&mut c, other), [1024; 3]);
    assert_eq!(write_status(&mut c, nsid, 3000), Status::SUCCESS);
    assert_eq!(write_status(&mut c, nsid, 4095), Status::SUCCESS);
    assert_eq!(write_status(&mut c, nsid, 4096), Status::LBA_OUT_OF_RANGE);

    // The same size again changes nothing: no notice.
    let aer = c.park_aer(1 << 8);
    null_resize(&e.t, "Grows", 2);
    c.admin
        .assert_none_complete_for(&[aer], Duration::from_millis(500));
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

fn tur(i: &mut SrpInitiator, lun: u16) -> Option<(u8, u8, u8)> {
    i.run(lun, &cdb::tur(), &SrpData::None, Layout::Direct)
        .unwrap()
        .sense_key()
}

/// READ CAPACITY(16): (last LBA, block size).
fn capacity(i: &mut SrpInitiator, lun: u16) -> (u64, u32) {
    let r = i
        .run(
            lun,
            &cdb::read_capacity16(),
            &SrpData::In(vec![(0, 32)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0, "READ CAPACITY(16)");
    let m = i.mem();
    (
        u64::from_be_bytes(m[0..8].try_into().unwrap()),
        u32::from_be_bytes(m[8..12].try_into().unwrap()),
    )
}

#[test]
fn a_grown_null_bdev_is_a_capacity_data_has_changed_unit_attention_on_its_lu() {
    let fx = SrpFixture::new(1, json!({}), 1, 2048);
    fx.t.null("Grows", 2048, BS);
    let nsid = fx.t.add_ns(&fx.nqn, "Grows");
    let lun = u16::try_from(nsid - 1).unwrap();
    let mut ini = fx.login(0x11);
    // The first command of a new nexus reports the power-on unit attention.
    for l in [0, lun] {
        while tur(&mut ini, l).is_some() {}
    }
    assert_eq!(capacity(&mut ini, lun), (2047, BS));

    null_resize(&fx.t, "Grows", 3);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let ua = loop {
        match tur(&mut ini, lun) {
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            s => break s,
        }
    };
    assert_eq!(ua, Some((0x6, 0x2a, 0x09)), "CAPACITY DATA HAS CHANGED");
    assert_eq!(tur(&mut ini, lun), None, "reported once");
    assert_eq!(tur(&mut ini, 0), None, "not on the LU that kept its size");
    assert_eq!(capacity(&mut ini, lun), (3 * 2048 - 1, BS));
    assert_eq!(capacity(&mut ini, 0), (2047, BS));
}
