//! The Ceph RBD bdev module through the RPC table, against a real cluster
//! (scripts/ceph-cluster.sh; a missing Ceph installation is a failure, not a skip): the
//! `bdev_rbd_*` methods reach the table by linking the crate alone, decode with the bdev rules,
//! map errors to SPDK's codes, delete through the generic bdev delete (namespaces first), and
//! save_config writes the cluster registrations before the bdevs, so the saved configuration
//! loads back to the same state.

use rpc::RpcState;
use rpc::methods::load;
use rtgt_tests::ceph::CephCluster;
use rtgt_tests::rpc_rig::{Rig, assert_code, saved_section};
use serde_json::{Value, json};

// Linking the crate is what registers its bdev module.
use bdev_rbd as _;

const NQN: &str = "nqn.2016-06.io.spdk:rbd1";

#[test]
fn rbd_methods_work_through_the_rpc_table_against_a_real_cluster() {
    let c = CephCluster::start("table");
    c.rbd(&["create", "rbd/img1", "--size", "8M"]);
    let r = Rig::runtime();

    let methods = r.ok("rpc_get_methods", Value::Null);
    for m in bdev_rbd::params::METHODS {
        assert!(
            methods.as_array().unwrap().iter().any(|v| v == m),
            "{m} is not in the table"
        );
    }

    // Registration: the name back; errors keep SPDK's decode rule and errno codes.
    let e = r.err(
        "bdev_rbd_register_cluster",
        json!({"name": "ceph1", "config_file": c.conf, "bogus": 1}),
    );
    assert_code(&e, -32603, "spdk_json_decode_object failed");
    let e = r.err(
        "bdev_rbd_register_cluster",
        json!({"name": "ceph1", "config_param": {"mon_host": 5}}),
    );
    assert_code(&e, -32603, "spdk_json_decode_object failed");
    assert_eq!(
        r.ok(
            "bdev_rbd_register_cluster",
            json!({"name": "ceph1", "config_file": c.conf})
        ),
        "ceph1"
    );
    let e = r.err(
        "bdev_rbd_register_cluster",
        json!({"name": "ceph1", "config_file": c.conf}),
    );
    assert_code(&e, -libc::EEXIST, "already registered");
    let info = r.ok("bdev_rbd_get_clusters_info", json!({"name": "ceph1"}));
    assert_eq!(info["cluster_name"], "ceph1");
    assert_eq!(info["config_file"], c.conf.as_str());
    assert_eq!(
        r.ok("bdev_rbd_wait_for_latest_osdmap", json!({"name": "ceph1"})),
        true
    );

    // A bdev on the shared handle.
    let e = r.err(
        "bdev_rbd_create",
        json!({"pool_name": "rbd", "rbd_name": "img1", "block_size": 520, "cluster_name": "ceph1"}),
    );
    assert_code(&e, -libc::EINVAL, "block_size");
    let e = r.err(
        "bdev_rbd_create",
        json!({"pool_name": "rbd", "rbd_name": "nope", "block_size": 4096, "cluster_name": "ceph1"}),
    );
    assert_code(&e, -libc::ENOENT, "nope");
    let name = r.ok(
        "bdev_rbd_create",
        json!({"name": "rbd0", "pool_name": "rbd", "rbd_name": "img1", "block_size": 4096,
               "cluster_name": "ceph1"}),
    );
    assert_eq!(name, "rbd0");
    let b = &r.ok("bdev_get_bdevs", json!({"name": "rbd0"}))[0];
    assert_eq!(b["product_name"], "Ceph Rbd Disk");
    assert_eq!(b["num_blocks"], 2048);
    let e = r.err("bdev_rbd_unregister_cluster", json!({"name": "ceph1"}));
    assert_code(&e, -libc::EBUSY, "rbd0");

    // Resize grows the bdev; shrinking is refused.
    assert_eq!(
        r.ok("bdev_rbd_resize", json!({"name": "rbd0", "new_size": 16})),
        true
    );
    let b = &r.ok("bdev_get_bdevs", json!({"name": "rbd0"}))[0];
    assert_eq!(b["num_blocks"], 4096);
    let e = r.err("bdev_rbd_resize", json!({"name": "rbd0", "new_size": 4}));
    assert_code(&e, -libc::EINVAL, "smaller");

    // Exported as a namespace, then saved: registrations before the bdevs, and the saved
    // configuration loads back to the same state.
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "rbd0"}}),
    );
    let saved = r.save();
    let methods: Vec<String> = saved_section(&saved, "bdev")
        .iter()
        .map(|e| e["method"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        methods,
        [
            "bdev_rbd_register_cluster",
            "bdev_rbd_create",
            "bdev_wait_for_examine"
        ]
    );
    {
        let cfg = load::parse(&serde_json::to_string(&saved).unwrap()).unwrap();
        let b = Rig::new(RpcState::Startup);
        b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
        b.state.set(RpcState::Runtime);
        b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
        assert_eq!(b.save(), saved, "save → load → save");
        // The loaded target's bdev holds the image too: delete it before the original's.
        b.ok("bdev_rbd_delete", json!({"name": "rbd0"}));
        b.ok("bdev_rbd_unregister_cluster", json!({"name": "ceph1"}));
    }

    // Deleting goes through the generic bdev delete: the namespace goes first.
    let e = r.err("bdev_rbd_delete", json!({"name": "nope"}));
    assert_code(&e, -libc::ENODEV, "nope");
    assert_eq!(r.ok("bdev_rbd_delete", json!({"name": "rbd0"})), true);
    let subs = r.ok("nvmf_get_subsystems", json!({"nqn": NQN}));
    assert_eq!(subs[0]["namespaces"], json!([]), "{subs}");
    assert_eq!(r.ok("bdev_get_bdevs", Value::Null), json!([]));
    assert_eq!(
        r.ok("bdev_rbd_unregister_cluster", json!({"name": "ceph1"})),
        true
    );
    assert_eq!(r.ok("bdev_rbd_get_clusters_info", Value::Null), json!([]));
}
