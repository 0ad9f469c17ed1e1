//! The RBD bdev on a cluster with cephx authentication (started by this test binary): a
//! restricted user (`client.rtgt`, profile rbd on pool rbd) through `user_id` + `key_file`,
//! and the errors of a missing or wrong key.

mod common;

use std::time::{Duration, Instant};

use bdev_rbd::params::{ClusterName, Create, RegisterCluster};
use bdev_rbd::{ConfMap, RbdModule};
use common::*;
use target_core::bdev::BdevRegistry;

fn c() -> &'static TestCluster {
    cluster_with("cephx", &["--cephx"])
}

fn keyring(c: &TestCluster) -> String {
    format!("{}/ceph.client.rtgt.keyring", c.dir)
}

#[test]
fn user_id_and_key_file_authenticate_a_restricted_user() {
    let c = c();
    c.create_image("x", 8);
    let m = RbdModule::new(test_options());
    m.register_cluster(RegisterCluster {
        name: "cx".into(),
        user_id: Some("rtgt".into()),
        config_file: Some(c.conf.clone()),
        key_file: Some(keyring(c)),
        ..RegisterCluster::default()
    })
    .unwrap();
    assert_eq!(m.cluster("cx").unwrap().cluster().user(), "client.rtgt");
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("x", "x", "cx", 4096))
        .unwrap();
    let mut ch = channel(&bdevs, "x");
    let d = write_pattern(&mut ch, 4096, 3, 2, 5);
    assert_eq!(read_bytes(&mut ch, 4096, 3, 2), d);
    let info = m
        .clusters_info(bdev_rbd::params::GetClustersInfo {
            name: Some("cx".into()),
        })
        .unwrap();
    assert_eq!(info["user_id"], "rtgt");
    assert_eq!(info["key_file"], keyring(c));
    // No secret anywhere in what rtgt shows or saves.
    let key = std::fs::read_to_string(keyring(c)).unwrap();
    let secret = key
        .lines()
        .find_map(|l| l.trim().strip_prefix("key = "))
        .unwrap()
        .to_string();
    let shown = format!(
        "{info} {} {:?}",
        bdevs.get("x").unwrap().driver_specific(),
        m.config_entries()
    );
    assert!(!shown.contains(&secret), "the key leaked: {shown}");

    // The restricted user may not touch another pool.
    c.rbd(&["pool", "init", "rbd"]);
    let out = std::process::Command::new("ceph")
        .args(["--conf", &c.conf, "osd", "pool", "create", "other", "8"])
        .output()
        .unwrap();
    assert!(out.status.success());
    c.rbd(&["pool", "init", "other"]);
    c.rbd(&["create", "other/y", "--size", "8M"]);
    let e = m
        .create_bdev(
            &bdevs,
            Create {
                pool_name: "other".into(),
                ..create_params("y", "y", "cx", 4096)
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::EPERM), "{e}");
    m.delete_bdev(&bdevs, bdev_rbd::params::Delete { name: "x".into() })
        .unwrap();
    drop(ch);
    assert!(wait_until(Duration::from_secs(10), || m
        .unregister_cluster(ClusterName { name: "cx".into() })
        .is_ok()));
}

#[test]
fn missing_or_wrong_keys_fail_clearly() {
    let c = c();
    let m = RbdModule::new(test_options());
    // No key for the user at all.
    let start = Instant::now();
    let e = m
        .register_cluster(RegisterCluster {
            name: "nokey".into(),
            user_id: Some("rtgt".into()),
            config_file: Some(c.conf.clone()),
            config_param: Some(ConfMap(vec![("keyring".into(), "/nonexistent".into())])),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    eprintln!("no key: {e}");
    assert!(start.elapsed() < Duration::from_secs(12));
    assert!(e.to_string().contains("client.rtgt"), "{e}");
    // A key file that does not exist.
    let e = m
        .register_cluster(RegisterCluster {
            name: "nofile".into(),
            user_id: Some("rtgt".into()),
            config_file: Some(c.conf.clone()),
            key_file: Some(format!("{}/missing.keyring", c.dir)),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    assert!(e.to_string().contains("missing.keyring"), "{e}");
    // A wrong key.
    let bad = format!("{}/bad.keyring", c.dir);
    let out = std::process::Command::new("ceph-authtool")
        .arg("--gen-print-key")
        .output()
        .unwrap();
    let other_key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::fs::write(&bad, format!("[client.rtgt]\n\tkey = {other_key}\n")).unwrap();
    let e = m
        .register_cluster(RegisterCluster {
            name: "badkey".into(),
            user_id: Some("rtgt".into()),
            config_file: Some(c.conf.clone()),
            key_file: Some(bad),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    eprintln!("wrong key: {e}");
    assert!(
        matches!(e.code(), Some(libc::EACCES) | Some(libc::EPERM)),
        "{e}"
    );
    assert!(e.to_string().contains("mon"), "{e}");
    assert!(m.cluster_names().is_empty());
}
