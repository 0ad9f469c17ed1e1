//! The logic behind SPDK's bdev_rbd RPCs against a real cluster (started by the test binary):
//! cluster registration and its info, bdev creation and deletion with SPDK's errors, the
//! `driver_specific` and save_config JSON and its round trip, namespaces, read-only images,
//! handles of a bdev's own, core masks, and bounded failures when the cluster is unreachable.

mod common;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdev_rbd::params::{ClusterName, Create, Delete, GetClustersInfo, RegisterCluster};
use bdev_rbd::{ConfMap, RbdModule, RbdOptions, Timeouts};
use common::*;
use serde_json::{Value, json};
use target_core::bdev::{
    BdevIo, BdevOp, BdevRegistry, Claim, IoStatus, IoType, NullBdev, NullParams,
};

fn c() -> &'static TestCluster {
    cluster("control")
}

fn mon_host(c: &TestCluster) -> String {
    std::fs::read_to_string(&c.conf)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("mon_host = ").map(str::to_string))
        .unwrap()
}

#[test]
fn register_create_show_delete_unregister() {
    let c = c();
    c.create_image("ctl-a", 8);
    let m = RbdModule::new(test_options());
    let reg = RegisterCluster {
        name: "c1".into(),
        user_id: Some("admin".into()),
        config_param: Some(ConfMap(vec![("rados_osd_op_timeout".into(), "7".into())])),
        config_file: Some(c.conf.clone()),
        ..RegisterCluster::default()
    };
    assert_eq!(m.register_cluster(reg.clone()).unwrap(), "c1");
    let e = m.register_cluster(reg).unwrap_err();
    assert_eq!(e.code(), Some(libc::EEXIST), "{e}");
    // config_param applies over the file and rtgt's defaults; the defaults apply elsewhere.
    let cl = Arc::clone(m.cluster("c1").unwrap().cluster());
    assert_eq!(cl.conf_get("rados_osd_op_timeout").unwrap(), "7");
    assert_eq!(cl.conf_get("client_mount_timeout").unwrap(), "5");
    assert_eq!(cl.conf_get("rbd_skip_partial_discard").unwrap(), "false");
    assert_eq!(cl.conf_get("rbd_cache").unwrap(), "false");
    assert_eq!(cl.conf_get("rbd_io_scheduler").unwrap(), "none");

    let info = m
        .clusters_info(GetClustersInfo {
            name: Some("c1".into()),
        })
        .unwrap();
    let nonce = info["nonce"].as_str().unwrap().to_string();
    assert!(nonce.contains("127.0.0.1"), "nonce {nonce}");
    assert_eq!(
        info,
        json!({
            "cluster_name": "c1",
            "user_id": "admin",
            "config_param": {"rados_osd_op_timeout": "7"},
            "config_file": c.conf,
            "nonce": nonce,
        })
    );
    assert_eq!(
        m.clusters_info(GetClustersInfo::default()).unwrap(),
        json!([info])
    );
    let e = m
        .clusters_info(GetClustersInfo {
            name: Some("c9".into()),
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT));

    let bdevs = BdevRegistry::new();
    let uuid = "76210ea4-7920-40a0-a07b-8992a7443c76";
    let base = Create {
        pool_name: "rbd".into(),
        rbd_name: "ctl-a".into(),
        block_size: 4096,
        cluster_name: Some("c1".into()),
        ..Create::default()
    };
    // Default names are SPDK's Ceph<N>.
    let n0 = m
        .create_bdev(
            &bdevs,
            Create {
                uuid: Some(uuid.into()),
                ..base.clone()
            },
        )
        .unwrap();
    assert_eq!(n0, "Ceph0");
    assert_eq!(m.create_bdev(&bdevs, base.clone()).unwrap(), "Ceph1");
    let b = bdevs.get("Ceph0").unwrap();
    assert_eq!(b.uuid().to_string(), uuid);
    assert_eq!(
        b.driver_specific(),
        json!({"rbd": {
            "pool_name": "rbd",
            "rbd_name": "ctl-a",
            "user_id": "admin",
            "config_param": {"rados_osd_op_timeout": "7"},
            "config_file": c.conf,
            "cluster_name": "c1",
        }})
    );
    assert_eq!(
        b.config(),
        json!({"method": "bdev_rbd_create", "params": {
            "name": "Ceph0",
            "pool_name": "rbd",
            "rbd_name": "ctl-a",
            "block_size": 4096,
            "cluster_name": "c1",
            "uuid": uuid,
        }})
    );
    assert!(!b.write_cache());

    // Errors, with nothing left behind.
    let e = m
        .create_bdev(
            &bdevs,
            Create {
                name: Some("Ceph0".into()),
                ..base.clone()
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::EEXIST), "{e}");
    let e = m
        .create_bdev(
            &bdevs,
            Create {
                name: Some("missing".into()),
                rbd_name: "no-such-image".into(),
                ..base.clone()
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    assert!(e.to_string().contains("rbd/no-such-image"), "{e}");
    let e = m
        .create_bdev(
            &bdevs,
            Create {
                name: Some("nopool".into()),
                pool_name: "nopool".into(),
                ..base.clone()
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    assert_eq!(bdevs.names(), ["Ceph0", "Ceph1"]);
    assert_eq!(m.cluster("c1").unwrap().users(), ["Ceph0", "Ceph1"]);

    // In use: unregistering is refused and names the bdevs.
    let e = m
        .unregister_cluster(ClusterName { name: "c1".into() })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::EBUSY));
    assert!(e.to_string().contains("Ceph0, Ceph1"), "{e}");

    // A claimed bdev (a namespace's) cannot be deleted; the rpc layer removes namespaces first.
    bdevs
        .claim(
            "Ceph1",
            Claim {
                module: "nvmf".into(),
                holder: "nqn.test".into(),
            },
        )
        .unwrap();
    let e = m
        .delete_bdev(
            &bdevs,
            Delete {
                name: "Ceph1".into(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::EPERM), "{e}");
    bdevs.release("Ceph1");
    // Not an RBD bdev: No such device, as SPDK.
    bdevs
        .register(
            NullBdev::create(NullParams {
                name: "null0".into(),
                num_blocks: 8,
                block_size: 512,
                physical_block_size: 0,
                uuid: None,
            })
            .unwrap(),
        )
        .unwrap();
    let e = m
        .delete_bdev(
            &bdevs,
            Delete {
                name: "null0".into(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENODEV));
    for n in ["Ceph0", "Ceph1"] {
        assert!(m.delete_bdev(&bdevs, Delete { name: n.into() }).unwrap());
    }
    let e = m
        .delete_bdev(
            &bdevs,
            Delete {
                name: "Ceph0".into(),
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENODEV));
    assert!(
        m.unregister_cluster(ClusterName { name: "c1".into() })
            .unwrap()
    );
    assert_eq!(
        m.clusters_info(GetClustersInfo::default()).unwrap(),
        json!([])
    );
}

/// What save_config writes for the module: registrations first, then the bdevs.
fn dump(m: &RbdModule, bdevs: &BdevRegistry) -> Vec<Value> {
    let mut out = m.config_entries();
    out.extend(bdevs.list().iter().map(|b| b.config()));
    out
}

/// What load_config does with those entries.
fn load(entries: &[Value]) -> (Arc<RbdModule>, Arc<BdevRegistry>) {
    let m = RbdModule::new(test_options());
    let bdevs = BdevRegistry::new();
    for e in entries {
        let p = e["params"].clone();
        match e["method"].as_str().unwrap() {
            "bdev_rbd_register_cluster" => {
                m.register_cluster(serde_json::from_value(p).unwrap())
                    .unwrap();
            }
            "bdev_rbd_create" => {
                m.create_bdev(&bdevs, serde_json::from_value(p).unwrap())
                    .unwrap();
            }
            other => panic!("unexpected method {other}"),
        }
    }
    (m, bdevs)
}

#[test]
fn save_config_round_trips_with_namespaces_read_only_and_own_handles() {
    let c = c();
    c.create_image("ctl-rt", 8);
    c.rbd(&["namespace", "create", "--pool", "rbd", "--namespace", "ns1"]);
    c.rbd(&["create", "rbd/ns1/ctl-ns", "--size", "8M"]);
    let m = RbdModule::new(test_options());
    m.register_cluster(RegisterCluster {
        name: "rt".into(),
        config_file: Some(c.conf.clone()),
        config_param: Some(ConfMap(vec![("rbd_cache".into(), "false".into())])),
        ..RegisterCluster::default()
    })
    .unwrap();
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("plain", "ctl-rt", "rt", 4096))
        .unwrap();
    m.create_bdev(
        &bdevs,
        Create {
            namespace_name: Some("ns1".into()),
            ..create_params("inns", "ctl-ns", "rt", 512)
        },
    )
    .unwrap();
    m.create_bdev(
        &bdevs,
        Create {
            read_only: true,
            ..create_params("ro", "ctl-rt", "rt", 4096)
        },
    )
    .unwrap();
    m.create_bdev(
        &bdevs,
        Create {
            name: Some("own".into()),
            user_id: Some("admin".into()),
            pool_name: "rbd".into(),
            rbd_name: "ctl-rt".into(),
            block_size: 4096,
            config: Some(ConfMap(vec![("mon_host".into(), mon_host(c))])),
            ..Create::default()
        },
    )
    .unwrap();

    // The image in the namespace is not the one outside it.
    let e = m
        .create_bdev(&bdevs, create_params("outside", "ctl-ns", "rt", 512))
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    let mut ch = channel(&bdevs, "inns");
    let data = write_pattern(&mut ch, 512, 5, 3, 11);
    assert_eq!(read_bytes(&mut ch, 512, 5, 3), data);
    assert_eq!(
        bdevs.get("inns").unwrap().driver_specific()["rbd"]["namespace_name"],
        "ns1"
    );

    // Read-only: writes are not supported, reads are.
    let ro = bdevs.get("ro").unwrap();
    for t in [IoType::Write, IoType::WriteZeroes, IoType::Unmap] {
        assert!(!ro.supports(t), "{t:?}");
    }
    let mut ch = channel(&bdevs, "ro");
    let w = run(&mut ch, write_io(0, 1, bufs(&[4096]), false));
    assert_eq!(w.status, IoStatus::Unsupported);
    let r = run(&mut ch, read_io(0, 1, &[4096]));
    assert_eq!(r.status, IoStatus::Success);

    // A handle of its own: SPDK shows user_id and config.
    assert_eq!(
        bdevs.get("own").unwrap().driver_specific(),
        json!({"rbd": {
            "pool_name": "rbd",
            "rbd_name": "ctl-rt",
            "user_id": "admin",
            "config": {"mon_host": mon_host(c)},
        }})
    );

    let saved = dump(&m, &bdevs);
    assert_eq!(saved[0]["method"], "bdev_rbd_register_cluster");
    assert_eq!(
        saved[0]["params"],
        json!({"name": "rt", "config_param": {"rbd_cache": "false"}, "config_file": c.conf})
    );
    assert_eq!(saved[2]["params"]["namespace_name"], "ns1");
    assert_eq!(saved[3]["params"]["read_only"], true);
    assert!(saved[4]["params"].get("cluster_name").is_none());
    for b in bdevs.names() {
        m.delete_bdev(&bdevs, Delete { name: b }).unwrap();
    }
    m.unregister_cluster(ClusterName { name: "rt".into() })
        .unwrap();

    let (m2, bdevs2) = load(&saved);
    assert_eq!(dump(&m2, &bdevs2), saved, "save_config does not round-trip");
    // And the reloaded namespace bdev sees the data written before.
    let mut ch = channel(&bdevs2, "inns");
    assert_eq!(read_bytes(&mut ch, 512, 5, 3), data);
}

#[test]
fn wait_for_latest_osdmap() {
    let c = c();
    let m = module_with(c, "w");
    assert!(
        m.wait_for_latest_osdmap(ClusterName { name: "w".into() })
            .unwrap()
    );
    let e = m
        .wait_for_latest_osdmap(ClusterName { name: "x".into() })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT));
}

/// Threads of this process whose CPU affinity is exactly `cpus` (as in /proc).
fn threads_on(cpus: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        if field("Cpus_allowed_list:") == cpus {
            out.push(field("Name:"));
        }
    }
    out
}

#[test]
fn core_mask_runs_librados_and_librbd_threads_on_those_cpus() {
    let c = c();
    c.create_image("ctl-mask", 8);
    let allowed = target_core::reactor::sys::allowed_cpus();
    assert!(
        allowed.len() >= 2,
        "needs two CPUs to tell the mask's threads from the others ({allowed:?})"
    );
    let cpu = *allowed.last().unwrap();
    let before = threads_on(&cpu.to_string());
    assert!(
        before.is_empty(),
        "threads already on CPU {cpu} only: {before:?}"
    );
    let m = RbdModule::new(test_options());
    m.register_cluster(RegisterCluster {
        name: "mask".into(),
        config_file: Some(c.conf.clone()),
        core_mask: Some(format!("0x{:x}", 1u64 << cpu)),
        ..RegisterCluster::default()
    })
    .unwrap();
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("masked", "ctl-mask", "mask", 4096))
        .unwrap();
    let mut ch = channel(&bdevs, "masked");
    write_pattern(&mut ch, 4096, 0, 1, 1);
    let pinned = threads_on(&cpu.to_string());
    assert!(
        pinned.iter().any(|n| n.starts_with("msgr-worker")),
        "librados' messenger threads are not on CPU {cpu}: {pinned:?}"
    );
    assert_eq!(
        m.clusters_info(GetClustersInfo {
            name: Some("mask".into())
        })
        .unwrap()["core_mask"],
        format!("0x{:x}", 1u64 << cpu)
    );
    drop(ch);
    m.delete_bdev(
        &bdevs,
        Delete {
            name: "masked".into(),
        },
    )
    .unwrap();
    // The image closes on a thread of its own: unregistering may briefly find it in use.
    assert!(wait_until(Duration::from_secs(10), || m
        .unregister_cluster(ClusterName {
            name: "mask".into()
        })
        .is_ok()));
    assert!(
        wait_until(Duration::from_secs(10), || threads_on(&cpu.to_string())
            .is_empty()),
        "threads left on CPU {cpu}: {:?}",
        threads_on(&cpu.to_string())
    );
}

fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn unreachable_cluster_fails_within_the_connect_timeout_naming_the_monitor() {
    let limit = Duration::from_secs(3);
    let m = RbdModule::new(RbdOptions {
        timeouts: Timeouts {
            connect: limit,
            osd_op: limit,
        },
    });
    let port = closed_port();
    let mon = format!("v2:127.0.0.1:{port}");
    let start = Instant::now();
    let e = m
        .register_cluster(RegisterCluster {
            name: "dead".into(),
            config_param: Some(ConfMap(vec![("mon_host".into(), mon.clone())])),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    let took = start.elapsed();
    eprintln!("unreachable cluster: {e} ({:.1} s)", took.as_secs_f64());
    assert!(took < limit + Duration::from_secs(6), "took {took:?}");
    assert_eq!(e.code(), Some(libc::ETIMEDOUT), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(msg.contains("timed out"), "{msg}");
    assert!(m.cluster_names().is_empty());

    let bdevs = BdevRegistry::new();
    let start = Instant::now();
    let e = m
        .create_bdev(
            &bdevs,
            Create {
                name: Some("dead0".into()),
                pool_name: "rbd".into(),
                rbd_name: "x".into(),
                block_size: 4096,
                config: Some(ConfMap(vec![("mon_host".into(), mon)])),
                ..Create::default()
            },
        )
        .unwrap_err();
    assert!(start.elapsed() < limit + Duration::from_secs(6));
    assert_eq!(e.code(), Some(libc::ETIMEDOUT), "{e}");
    assert!(e.to_string().contains("bdev dead0"), "{e}");
    assert!(bdevs.names().is_empty());

    // No monitor address at all: refused at once.
    let e = m
        .register_cluster(RegisterCluster {
            name: "nomon".into(),
            config_param: Some(ConfMap(vec![("log_to_stderr".into(), "false".into())])),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    assert!(e.to_string().contains("mon_host"), "{e}");
    // A config_file that does not exist.
    let e = m
        .register_cluster(RegisterCluster {
            name: "nofile".into(),
            config_file: Some("/nonexistent/ceph.conf".into()),
            ..RegisterCluster::default()
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
    assert!(e.to_string().contains("/nonexistent/ceph.conf"), "{e}");
}

#[test]
fn flush_on_an_idle_image_and_compare_by_reading() {
    let c = c();
    c.create_image("ctl-flush", 8);
    let m = module_with(c, "f");
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("fl", "ctl-flush", "f", 4096))
        .unwrap();
    let mut ch = channel(&bdevs, "fl");
    let f = run(&mut ch, BdevIo::new(BdevOp::Flush, 9));
    assert_eq!(f.status, IoStatus::Success);
    assert_eq!(f.tag, 9);
    // librbd has no compare of its own for the bdev to offer: target-core's channel compares by
    // reading.
    assert!(!bdevs.get("fl").unwrap().supports(IoType::Compare));
    let data = write_pattern(&mut ch, 4096, 2, 2, 77);
    let compare = |ch: &mut target_core::bdev::IoChannel, bytes: &[u8]| {
        let mut io = BdevIo::new(
            BdevOp::Compare {
                offset_blocks: 2,
                num_blocks: 2,
            },
            3,
        );
        let mut b = bufs(&[bytes.len()]);
        b[0].as_mut_slice().copy_from_slice(bytes);
        io.bufs = b;
        run(ch, io).status
    };
    assert_eq!(compare(&mut ch, &data), IoStatus::Success);
    let mut other = data.clone();
    other[5000] ^= 1;
    assert_eq!(compare(&mut ch, &other), IoStatus::Miscompare);
}
