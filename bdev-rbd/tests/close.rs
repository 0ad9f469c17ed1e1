//! Closing at exit (the module's `fini`, `RbdModule::close_all`) with I/O in flight against a
//! stopped OSD: the close waits for that I/O to end instead of closing the image under librbd's
//! completions (which crashed rtgt before), then closes the image and the cluster connection,
//! so `rbd status` shows no watcher at once rather than after the cluster's 30 s watch timeout.

mod common;

use std::time::{Duration, Instant};

use common::*;
use target_core::bdev::{Bdev, BdevRegistry};

/// Long enough that the I/O held up by the stopped OSD is resent, and succeeds, after the OSD
/// restarts (so the close runs with the OSD back and can remove its watch).
const OSD_OP_TIMEOUT: Duration = Duration::from_secs(20);

fn watchers(c: &TestCluster, image: &str) -> String {
    c.rbd(&["status", &format!("rbd/{image}")])
}

#[test]
fn close_all_waits_for_io_in_flight_to_a_stopped_osd_then_releases_the_watch() {
    let c = cluster("close");
    c.create_image("x", 16);
    let m = module_with_osd_timeout(c, "c", OSD_OP_TIMEOUT);
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("x", "x", "c", 4096))
        .unwrap();
    let mut ch = channel(&bdevs, "x");
    let kept = write_pattern(&mut ch, 4096, 0, 8, 7);
    assert!(
        watchers(c, "x").contains("watcher="),
        "the open image is watched: {}",
        watchers(c, "x")
    );

    // The OSD goes away and eight writes are left in flight when the channel closes, as the
    // poll groups leave them when the target stops.
    c.ctl("osd-stop");
    for i in 0..8u64 {
        ch.submit(Box::new(write_io(100 + i, 1, bufs(&[4096]), false)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut early = 0;
    ch.poll(&mut |_| early += 1);
    assert_eq!(early, 0, "an I/O completed with the OSD stopped");
    assert_eq!(ch.outstanding(), 8);
    drop(ch);

    let t0 = Instant::now();
    let closer = {
        let (m, bdevs) = (m.clone(), bdevs.clone());
        std::thread::spawn(move || m.close_all(&bdevs))
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !closer.is_finished(),
        "close_all returned with I/O still in flight"
    );
    c.ctl("osd-start");
    closer.join().expect("close_all did not panic");
    eprintln!(
        "closed {:.1} s after close_all started",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        t0.elapsed() < OSD_OP_TIMEOUT + Duration::from_secs(10),
        "close_all took {:?}",
        t0.elapsed()
    );

    // The watch is gone now, not after osd_client_watch_timeout.
    let s = watchers(c, "x");
    assert!(!s.contains("watcher="), "a watcher is left: {s}");
    // The image is closed: no channel opens on it, and the data written before is there for
    // the next client.
    let b: std::sync::Arc<dyn Bdev> = bdevs.get("x").unwrap();
    assert!(
        bdevs.open_channel(&b).is_err(),
        "a channel opened on a closed image"
    );
    let m2 = module_with(c, "c2");
    let bdevs2 = BdevRegistry::new();
    m2.create_bdev(&bdevs2, create_params("y", "x", "c2", 4096))
        .unwrap();
    let mut ch2 = channel(&bdevs2, "y");
    assert_eq!(read_bytes(&mut ch2, 4096, 0, 8), kept);
    drop(ch2);
    m2.close_all(&bdevs2);
}
