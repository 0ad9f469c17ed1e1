//! Fencing a gateway, as the gateway-group failover does it (docs/ha.md, "Ceph gateway group
//! over RDMA"), against a real cluster: two registrations of one image play gateways A and B;
//! `ceph osd blocklist add` of the `nonce` A reports in `bdev_rbd_get_clusters_info`, then
//! `bdev_rbd_wait_for_latest_osdmap` on B; B takes the image over (its write breaks A's
//! exclusive lock), A's writes fail with EBLOCKLISTED and do not land; after
//! `ceph osd blocklist rm` a new registration for A works again.

mod common;

use std::time::{Duration, Instant};

use bdev_rbd::params::{ClusterName, GetClustersInfo};
use common::*;
use target_core::bdev::{BdevRegistry, IoStatus};

/// EBLOCKLISTED in Ceph is ESHUTDOWN.
const EBLOCKLISTED: i32 = libc::ESHUTDOWN;

#[test]
fn a_blocklisted_gateway_cannot_write_after_the_survivor_has_the_new_map() {
    let c = cluster("fencing");
    c.create_image("gw", 16);
    let a = module_with(c, "ceph0");
    let b = module_with(c, "ceph0");
    let (bdevs_a, bdevs_b) = (BdevRegistry::new(), BdevRegistry::new());
    a.create_bdev(&bdevs_a, create_params("Rbd0", "gw", "ceph0", 4096))
        .unwrap();
    b.create_bdev(&bdevs_b, create_params("Rbd0", "gw", "ceph0", 4096))
        .unwrap();
    let (mut ch_a, mut ch_b) = (channel(&bdevs_a, "Rbd0"), channel(&bdevs_b, "Rbd0"));

    // A owns the image (its write takes the exclusive lock).
    let from_a = write_pattern(&mut ch_a, 4096, 8, 2, 1);
    assert_eq!(read_bytes(&mut ch_b, 4096, 8, 2), from_a);

    // The fencing target: A's client address, as `ceph osd blocklist add` takes it.
    let info = |m: &bdev_rbd::RbdModule| {
        m.clusters_info(GetClustersInfo {
            name: Some("ceph0".into()),
        })
        .unwrap()["nonce"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (addr_a, addr_b) = (info(&a), info(&b));
    assert_ne!(addr_a, addr_b, "two registrations, two clients");
    assert!(
        addr_a.contains(":0/") && addr_a.starts_with("127.0.0.1"),
        "client address {addr_a}"
    );
    c.ceph(&["osd", "blocklist", "add", &addr_a]);
    let t = Instant::now();
    assert!(
        b.wait_for_latest_osdmap(ClusterName {
            name: "ceph0".into()
        })
        .unwrap()
    );
    eprintln!(
        "B had the OSD map with the entry {:.2} s after 'ceph osd blocklist add'",
        t.elapsed().as_secs_f64()
    );

    // B takes over: its write breaks the fenced owner's lock (no wait for A's watch to time out).
    let t = Instant::now();
    let from_b = write_pattern(&mut ch_b, 4096, 8, 2, 2);
    eprintln!(
        "B's first write after the fence: {:.2} s",
        t.elapsed().as_secs_f64()
    );

    // A still believes it owns the image: its write fails, within the OSD timeout and a margin.
    let mut data = bufs(&[2 * 4096]);
    pattern(3, &mut data);
    let t = Instant::now();
    let w = run_within(
        &mut ch_a,
        write_io(8, 2, data, false),
        Duration::from_secs(20),
    );
    eprintln!(
        "A's write after the fence: {:?} in {:.2} s",
        w.status,
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        w.status,
        IoStatus::Error(EBLOCKLISTED),
        "A's write after the fence"
    );
    assert_eq!(
        read_bytes(&mut ch_b, 4096, 8, 2),
        from_b,
        "the fenced gateway's write landed"
    );
    assert!(c.ceph(&["osd", "blocklist", "ls"]).contains(&addr_a));

    // Failback: the entry goes; A registers again (a new client) and writes.
    c.ceph(&["osd", "blocklist", "rm", &addr_a]);
    drop(ch_a);
    drop(bdevs_a);
    drop(a);
    let a = module_with(c, "ceph0");
    assert_ne!(info(&a), addr_a, "the new registration is a new client");
    let bdevs_a = BdevRegistry::new();
    a.create_bdev(&bdevs_a, create_params("Rbd0", "gw", "ceph0", 4096))
        .unwrap();
    let mut ch_a = channel(&bdevs_a, "Rbd0");
    assert!(
        a.wait_for_latest_osdmap(ClusterName {
            name: "ceph0".into()
        })
        .unwrap()
    );
    let back = write_pattern(&mut ch_a, 4096, 8, 2, 4);
    assert_eq!(read_bytes(&mut ch_b, 4096, 8, 2), back);
}

#[test]
fn waiting_for_the_map_of_an_unknown_cluster_is_refused() {
    let c = cluster("fencing");
    let m = module_with(c, "ceph0");
    let e = m
        .wait_for_latest_osdmap(ClusterName {
            name: "nope".into(),
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
}
