//! The `ptpl_file` of a SCSI logical unit (docs/reservations.md, "Persistence"): a
//! PERSISTENT RESERVE OUT that changes what persists is answered only once the file is on
//! disk, and the write (two fsyncs) runs off the reactor, which meanwhile serves its other
//! queues.
//!
//! The slow write: a FIFO sits where the writer puts its temporary file, so the write blocks
//! opening it until the test reads it — and what the test reads proves that the write the
//! command waits for is the one held there.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rtgt_tests::srp_initiator::pr::{CHECK_CONDITION, GOOD, REGISTER};
use rtgt_tests::srp_initiator::{Data, Layout, SrpFixture, SrpInitiator, rw10};
use serde_json::json;
use target_core::target::NsParams;

const A: u64 = 0x5254_0012_3456_0a01;
const B: u64 = 0x5254_0012_3456_0b01;

/// A fixture on one reactor (every channel on the same poll group) whose LUN 1 has a
/// `ptpl_file` in a fresh directory.
fn fixture(tag: &str) -> (SrpFixture, PathBuf, PathBuf) {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let dir = std::env::temp_dir().join(format!("rtgt-srp-ptpl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lun1.json");
    fx.t.malloc("P0", 1024, 512);
    let nsid =
        fx.t.rt
            .block_on(fx.t.target.add_namespace(
                &fx.nqn,
                NsParams {
                    bdev_name: "P0".into(),
                    ptpl_file: Some(file.to_str().unwrap().into()),
                    ..Default::default()
                },
            ))
            .unwrap();
    assert_eq!(nsid, 2, "LUN 1");
    (fx, dir, file)
}

/// Sends PERSISTENT RESERVE OUT REGISTER of `key` (replacing `old`) with APTPL = 1 to LUN 1;
/// returns the tag.
fn register_aptpl(i: &mut SrpInitiator, old: u64, key: u64) -> u64 {
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(&old.to_be_bytes());
    p[8..16].copy_from_slice(&key.to_be_bytes());
    p[20] = 0x01; // APTPL
    let off = i.mem_len() - 4096;
    i.mem()[off..off + 24].copy_from_slice(&p);
    let c = [0x5F, REGISTER, 0, 0, 0, 0, 0, 0, 24, 0];
    i.command(1, &c, &Data::Out(vec![(off, 24)]), Layout::Direct, false)
        .unwrap()
}

/// Opens the FIFO's read end without blocking when dropped, so that a writer stuck opening
/// it (a failed test) does not hold the target's shutdown forever.
struct Unblock(PathBuf);

impl Drop for Unblock {
    fn drop(&mut self) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0)
        {
            std::thread::sleep(Duration::from_millis(200));
            let mut sink = Vec::new();
            let _ = f.read_to_end(&mut sink);
        }
    }
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {p:?}");
}

#[test]
fn the_reply_waits_for_the_ptpl_file_and_the_reactor_serves_other_queues_meanwhile() {
    let (fx, dir, file) = fixture("slow");
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    // Both nexuses address both LUNs once (their first-command TEST UNIT READYs).
    for i in [&mut a, &mut b] {
        for lun in [0, 1] {
            i.run(lun, &[0; 6], &Data::None, Layout::Direct).unwrap();
        }
    }

    let tmp = dir.join("lun1.json.rtgt-tmp");
    mkfifo(&tmp);
    let unblock = Unblock(tmp.clone());
    let reg = register_aptpl(&mut a, 0, 0xAA);
    // The write is stuck opening the FIFO: no reply yet, and the reactor serves B's reads.
    for k in 0..20 {
        let r = b
            .run(
                0,
                &rw10(0x28, k, 1),
                &Data::In(vec![(0, 512)]),
                Layout::Direct,
            )
            .unwrap();
        assert_eq!(
            r.status, GOOD,
            "B's read {k} while the ptpl_file write is held"
        );
    }
    assert!(
        a.next_response(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "REGISTER answered before its ptpl_file write"
    );

    // The test reads the held write: the registration it waits for.
    let mut held = String::new();
    std::fs::File::open(&tmp)
        .unwrap()
        .read_to_string(&mut held)
        .unwrap();
    assert!(held.contains("\"rkey\":170"), "{held}");
    // A FIFO cannot be fsynced: that write fails, and the REGISTER says so (the change
    // stays, as in SPDK).
    let r = a.wait(reg).unwrap();
    assert_eq!(r.status, CHECK_CONDITION, "{r:?}");
    assert_eq!(r.sense_key(), Some((0x4, 0x44, 0x00)), "HARDWARE ERROR");
    assert!(!tmp.exists(), "the failed write's temporary file is gone");
    drop(unblock);

    // Without the FIFO: B's REGISTER is answered with the file already holding both keys.
    let t = register_aptpl(&mut b, 0, 0xBB);
    assert_eq!(b.wait(t).unwrap().status, GOOD);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains("\"rkey\":170") && saved.contains("\"rkey\":187"),
        "{saved}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quick_successive_registers_leave_the_newest_state_in_the_file() {
    let (fx, dir, file) = fixture("order");
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    for i in [&mut a, &mut b] {
        i.run(1, &[0; 6], &Data::None, Layout::Direct).unwrap();
    }
    let (mut ka, mut kb) = (0, 0);
    for round in 1..=10u64 {
        let ta = register_aptpl(&mut a, ka, 0x100 + round);
        let tb = register_aptpl(&mut b, kb, 0x200 + round);
        assert_eq!(a.wait(ta).unwrap().status, GOOD);
        assert_eq!(b.wait(tb).unwrap().status, GOOD);
        (ka, kb) = (0x100 + round, 0x200 + round);
        // Both replies are out: the file holds both keys of this round, no older one.
        let saved = std::fs::read_to_string(&file).unwrap();
        for key in [ka, kb] {
            assert!(saved.contains(&format!("\"rkey\":{key},")), "{saved}");
        }
        assert_eq!(saved.matches("\"rkey\"").count(), 2, "{saved}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
