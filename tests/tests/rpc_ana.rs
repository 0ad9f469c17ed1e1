//! ANA over RPC with SPDK's methods and parameters: `nvmf_create_subsystem ana_reporting`,
//! `nvmf_subsystem_add_ns anagrpid`, `nvmf_subsystem_add_listener ana_state`,
//! `nvmf_subsystem_listener_set_ana_state`, `nvmf_subsystem_set_ns_ana_group`,
//! `nvmf_subsystem_get_listeners` `ana_states`, their errors, and save_config (order and
//! round trip).

use rpc::RpcState;
use rpc::methods::load;
use rtgt_tests::rpc_rig::{Rig, assert_code, saved_section};
use serde_json::{Value, json};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn la(port: &str) -> Value {
    json!({"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": port})
}

/// A subsystem with ANA reporting and 4 groups, Malloc0 as namespace 1 in group 3, Malloc1 as
/// namespace 2 (group 2), listener 4420 optimized, 4421 inaccessible.
fn rig() -> Rig {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.malloc("Malloc1");
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    r.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true, "ana_reporting": true, "max_namespaces": 4}),
    );
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "anagrpid": 3}}),
    );
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc1"}}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": la("4420")}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": la("4421"), "ana_state": "inaccessible"}),
    );
    r
}

/// `ana_states` of each listener, as (trsvcid, [state of group 1..]).
fn states(r: &Rig) -> Vec<(String, Vec<String>)> {
    r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN}))
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let groups = l["ana_states"].as_array().unwrap();
            for (i, g) in groups.iter().enumerate() {
                assert_eq!(g["ana_group"], json!(i + 1));
            }
            (
                l["address"]["trsvcid"].as_str().unwrap().to_string(),
                groups
                    .iter()
                    .map(|g| g["ana_state"].as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn states_are_set_per_listener_and_group_and_shown() {
    let r = rig();
    let o = "optimized";
    let i = "inaccessible";
    assert_eq!(
        states(&r),
        [
            ("4420".into(), s(&[o, o, o, o])),
            ("4421".into(), s(&[i, i, i, i]))
        ]
    );
    let set = |port: &str, state: &str, g: Option<u32>| {
        let mut p = json!({"nqn": NQN, "listen_address": la(port), "ana_state": state});
        if let Some(g) = g {
            p["anagrpid"] = json!(g);
        }
        r.call("nvmf_subsystem_listener_set_ana_state", p)
    };
    assert_eq!(set("4421", "non_optimized", Some(3)).unwrap(), json!(true));
    assert_eq!(set("4420", "inaccessible", Some(2)).unwrap(), json!(true));
    assert_eq!(
        states(&r),
        [
            ("4420".into(), s(&[o, i, o, o])),
            ("4421".into(), s(&[i, i, "non_optimized", i]))
        ]
    );
    // Namespace 2 moves to group 1; the subsystem shows it.
    r.ok(
        "nvmf_subsystem_set_ns_ana_group",
        json!({"nqn": NQN, "nsid": 2, "anagrpid": 1}),
    );
    let sub = &r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0];
    let groups: Vec<&Value> = sub["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["anagrpid"])
        .collect();
    assert_eq!(groups, [&json!(3), &json!(1)]);

    // Errors: SPDK's -32602 with the reason, and nothing changes.
    let before = states(&r);
    for (e, needle) in [
        (set("4421", "change", None), "Invalid ana_state"),
        (set("4421", "persistent_loss", None), "Invalid ana_state"),
        (set("4421", "optimized", Some(5)), "ANA group 5"),
        (set("4421", "optimized", Some(0)), "ANA group 0"),
        (set("4422", "optimized", None), "not found"),
    ] {
        assert_code(&e.unwrap_err(), -32602, needle);
    }
    assert_code(
        &r.err(
            "nvmf_subsystem_set_ns_ana_group",
            json!({"nqn": NQN, "nsid": 1, "anagrpid": 9}),
        ),
        -32602,
        "ANA group 9",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_set_ns_ana_group",
            json!({"nqn": NQN, "nsid": 7, "anagrpid": 1}),
        ),
        -32602,
        "Namespace 7",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_listener_set_ana_state",
            json!({"nqn": NQN, "listen_address": la("4420")}),
        ),
        -32602,
        "Invalid parameters",
    );
    assert_eq!(states(&r), before);
    // A namespace's group must be one of the subsystem's.
    r.malloc("Malloc2");
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc2", "anagrpid": 5}}),
        ),
        -32602,
        "ANA group 5",
    );
}

#[test]
fn a_subsystem_without_ana_reporting_refuses_ana_changes() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": la("4420")}),
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_listener_set_ana_state",
            json!({"nqn": NQN, "listen_address": la("4420"), "ana_state": "inaccessible"}),
        ),
        -32602,
        "without ana_reporting",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_set_ns_ana_group",
            json!({"nqn": NQN, "nsid": 1, "anagrpid": 1}),
        ),
        -32602,
        "without ana_reporting",
    );
    let l = r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN}));
    assert!(l[0].get("ana_states").is_none(), "{l}");
}

#[test]
fn save_config_brings_the_states_back() {
    let r = rig();
    r.ok(
        "nvmf_subsystem_listener_set_ana_state",
        json!({"nqn": NQN, "listen_address": la("4421"), "ana_state": "optimized",
               "anagrpid": 2}),
    );
    let saved = r.save();
    let nvmf = saved_section(&saved, "nvmf");
    let methods: Vec<&str> = nvmf.iter().map(|c| c["method"].as_str().unwrap()).collect();
    let pos = |m: &str| methods.iter().position(|x| *x == m).unwrap();
    let set_at = pos("nvmf_subsystem_listener_set_ana_state");
    assert!(pos("nvmf_subsystem_add_listener") < set_at);
    assert!(pos("nvmf_subsystem_add_ns") < pos("nvmf_subsystem_add_listener"));
    let listeners: Vec<&Value> = nvmf
        .iter()
        .filter(|c| c["method"] == "nvmf_subsystem_add_listener")
        .collect();
    assert_eq!(listeners[0]["params"]["ana_state"], "optimized");
    assert_eq!(listeners[1]["params"]["ana_state"], "inaccessible");
    assert_eq!(
        nvmf[set_at]["params"],
        json!({"nqn": NQN, "listen_address": la("4421"), "ana_state": "optimized",
               "anagrpid": 2})
    );
    let ns: Vec<&Value> = nvmf
        .iter()
        .filter(|c| c["method"] == "nvmf_subsystem_add_ns")
        .map(|c| &c["params"]["namespace"]["anagrpid"])
        .collect();
    assert_eq!(ns, [&json!(3), &json!(2)]);

    // Round trip: a fresh target loads it and saves the same, with the same states.
    let r2 = Rig::new(RpcState::Startup);
    let text = saved.to_string();
    let cfg = load::parse(&text).unwrap();
    r2.tt.rt.block_on(load::apply(&r2.table, &cfg)).unwrap();
    r2.ok("framework_start_init", Value::Null);
    r2.tt.rt.block_on(load::apply(&r2.table, &cfg)).unwrap();
    assert_eq!(states(&r2), states(&r));
    assert_eq!(saved_section(&r2.save(), "nvmf"), nvmf);
}

fn srp_la(port: &str) -> Value {
    json!({"trtype": "SRP", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": port})
}

/// SRP listeners are ALUA target ports: `ana_state` and `nvmf_subsystem_listener_set_ana_state`
/// work on them, `nvmf_subsystem_get_listeners` shows their states and their relative port and
/// group ids (derived or given), duplicates and zero are refused, save_config brings it back.
#[test]
fn srp_listeners_are_alua_ports_over_rpc() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.ok("nvmf_create_transport", json!({"trtype": "SRP"}));
    r.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true, "ana_reporting": true, "max_namespaces": 2}),
    );
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": srp_la("5555"),
               "relative_target_port_id": 3, "target_port_group_id": 30}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": srp_la("5556"), "ana_state": "inaccessible"}),
    );
    assert_eq!(
        states(&r),
        [
            ("5555".to_string(), s(&["optimized", "optimized"])),
            ("5556".to_string(), s(&["inaccessible", "inaccessible"]))
        ]
    );
    let l = r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN}));
    assert_eq!(l[0]["relative_target_port_id"], 3);
    assert_eq!(l[0]["target_port_group_id"], 30);
    let rel_b = l[1]["relative_target_port_id"].as_u64().unwrap();
    let tpg_b = l[1]["target_port_group_id"].as_u64().unwrap();
    assert!(rel_b != 0 && rel_b != 3 && tpg_b != 0 && tpg_b != 30, "{l}");
    r.ok(
        "nvmf_subsystem_listener_set_ana_state",
        json!({"nqn": NQN, "listen_address": srp_la("5556"), "ana_state": "optimized",
               "anagrpid": 1}),
    );
    r.ok(
        "nvmf_subsystem_listener_set_ana_state",
        json!({"nqn": NQN, "listen_address": srp_la("5555"), "ana_state": "non_optimized"}),
    );
    assert_eq!(
        states(&r),
        [
            ("5555".to_string(), s(&["non_optimized", "non_optimized"])),
            ("5556".to_string(), s(&["optimized", "inaccessible"]))
        ]
    );
    // Refusals: a duplicate relative port or group id, 0, an RDMA listener with the attribute.
    for (k, v, what) in [
        (
            "relative_target_port_id",
            json!(3),
            "relative_target_port_id 3",
        ),
        ("target_port_group_id", json!(tpg_b), "target_port_group_id"),
        ("relative_target_port_id", json!(0), "1-65535"),
        ("target_port_group_id", json!(65536), "Invalid"),
    ] {
        let mut p = json!({"nqn": NQN, "listen_address": srp_la("5557")});
        p[k] = v;
        assert_code(&r.err("nvmf_subsystem_add_listener", p), -32602, what);
    }
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": la("4420"), "relative_target_port_id": 9}),
        ),
        -32602,
        "RDMA listeners have no attribute",
    );
    assert_eq!(states(&r).len(), 2, "nothing added");

    // Round trip: the ids and the states come back.
    let saved = r.save();
    let nvmf = saved_section(&saved, "nvmf");
    let r2 = Rig::new(RpcState::Startup);
    let cfg = load::parse(&saved.to_string()).unwrap();
    r2.tt.rt.block_on(load::apply(&r2.table, &cfg)).unwrap();
    r2.ok("framework_start_init", Value::Null);
    r2.tt.rt.block_on(load::apply(&r2.table, &cfg)).unwrap();
    assert_eq!(states(&r2), states(&r));
    assert_eq!(
        r2.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN})),
        r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN}))
    );
    assert_eq!(saved_section(&r2.save(), "nvmf"), nvmf);
}
