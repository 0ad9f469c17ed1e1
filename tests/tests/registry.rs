//! A transport registered from a crate other than target-core is found by the registry, and
//! the options and attributes it declares are checked, stored, shown and saved by the RPC
//! layer, which does not know it.

use std::sync::Arc;

use parking_lot::Mutex;
use rtgt_tests::rpc_rig::{Rig, assert_code};
use serde_json::{Value, json};
use target_core::bdev::BdevIo;
use target_core::register_transport;
use target_core::registry::{
    self, CreateResult, JsonType, Transport, TransportAttr, TransportContext, TransportError,
    TransportOps, TransportParams, TransportPollGroup,
};
use target_core::target::{ListenAddr, PgCore};

/// The listeners the loopback transport was asked to open, with their attributes.
static LISTENING: Mutex<Vec<ListenAddr>> = Mutex::new(Vec::new());

struct Loopback;

impl Transport for Loopback {
    fn name(&self) -> &'static str {
        "LOOPBACK"
    }
    fn dump_opts(&self) -> TransportParams {
        let mut m = TransportParams::new();
        m.insert("trtype".into(), json!("LOOPBACK"));
        m
    }
    fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        LISTENING.lock().push(addr.clone());
        Ok(())
    }
    fn stop_listen(&self, _addr: &ListenAddr) -> Result<(), TransportError> {
        Ok(())
    }
    fn poll_group_create(
        &self,
        _core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        Ok(Box::new(LoopbackPg))
    }
    fn destroy(&self) {}
}

struct LoopbackPg;

impl TransportPollGroup for LoopbackPg {
    fn poll(&mut self, _core: &mut PgCore, _completions: &mut Vec<Box<BdevIo>>) -> usize {
        0
    }
    fn resume_request(&mut self, _core: &mut PgCore, _token: u64) {}
    fn disconnect_subsystem(&mut self, _core: &mut PgCore, _subsystem: u32) {}
}

/// A subsystem attribute stored upper-case, refused when empty, and shown as `unset-<nqn>`
/// while not set.
const LOOP_TAG: TransportAttr = TransportAttr {
    name: "loop_tag",
    kind: JsonType::Str,
    help: "a tag",
    long: Some("loop-tag"),
    parse: |v| match v.as_str() {
        Some("") => Err("must not be empty".into()),
        s => Ok(json!(s.unwrap_or_default().to_uppercase())),
    },
    shown_unset: Some(|nqn| json!(format!("unset-{nqn}"))),
};

fn defaults() -> TransportParams {
    let mut m = TransportParams::new();
    m.insert("max_queue_depth".into(), json!(64));
    m
}

fn create(_ctx: TransportContext, _p: &TransportParams) -> CreateResult {
    Ok(Arc::new(Loopback))
}

register_transport!(
    LOOPBACK = TransportOps {
        name: "LOOPBACK",
        description: "a transport defined outside target-core",
        defaults,
        create,
        options: &[TransportAttr::plain(
            "loop_depth",
            JsonType::Uint(8),
            "loop-depth",
            "a small number",
        )],
        subsystem_attrs: &[LOOP_TAG],
        listener_attrs: &[TransportAttr::plain(
            "loop_mode",
            JsonType::Str,
            "loop-mode",
            "a listener mode",
        )],
    }
);

#[test]
fn a_transport_from_another_crate_is_registered_and_found() {
    let ops = registry::find("loopback").expect("found case-insensitively");
    assert_eq!(ops.name, "LOOPBACK");
    assert_eq!((ops.defaults)()["max_queue_depth"], 64);
    assert!(registry::find("LoopBack").is_some());
    assert!(registry::find("nonexistent").is_none());
    let names: Vec<&str> = registry::list().iter().map(|o| o.name).collect();
    assert!(names.contains(&"LOOPBACK"), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "the listing is sorted by name");
}

const NQN: &str = "nqn.2016-06.io.spdk:loop1";
const NQN2: &str = "nqn.2016-06.io.spdk:loop2";

#[test]
fn transport_declared_options_and_attributes_go_through_rpc_generically() {
    let r = Rig::runtime();
    // Its own option is type-checked by the RPC layer (a u8: 300 does not fit).
    let e = r.err(
        "nvmf_create_transport",
        json!({"trtype": "LOOPBACK", "loop_depth": 300}),
    );
    assert_code(&e, -32602, "loop_depth");
    r.ok("nvmf_create_transport", json!({"trtype": "LOOPBACK"}));

    // Subsystem attribute: validated, stored in canonical form, shown (derived while unset)
    // and saved only when set.
    let e = r.err("nvmf_create_subsystem", json!({"nqn": NQN, "loop_tag": ""}));
    assert_code(&e, -32602, "Invalid loop_tag \"\": must not be empty");
    // A value of the wrong JSON type fails the method spec's check, before the attribute's.
    let e = r.err("nvmf_create_subsystem", json!({"nqn": NQN, "loop_tag": 5}));
    assert_code(&e, -32602, "Invalid parameters");
    r.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "loop_tag": "blue"}),
    );
    r.ok("nvmf_create_subsystem", json!({"nqn": NQN2}));
    let subs = r.ok("nvmf_get_subsystems", Value::Null);
    let by_nqn = |n: &str| {
        subs.as_array()
            .unwrap()
            .iter()
            .find(|s| s["nqn"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_nqn(NQN)["loop_tag"], "BLUE");
    assert_eq!(by_nqn(NQN2)["loop_tag"], format!("unset-{NQN2}"));

    // Listener attribute: only for the transport that declares it; stored on the listener,
    // handed to the transport's listen, shown and saved.
    let listener = |trtype: &str, port: &str| {
        json!({"nqn": NQN, "loop_mode": "fast", "listen_address":
            {"trtype": trtype, "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": port}})
    };
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    let e = r.err("nvmf_subsystem_add_listener", listener("RDMA", "4420"));
    assert_code(&e, -32602, "RDMA listeners have no attribute 'loop_mode'");
    r.ok("nvmf_subsystem_add_listener", listener("LOOPBACK", "1"));
    let seen = LISTENING.lock().clone();
    assert!(
        seen.iter()
            .any(|l| l.trtype == "LOOPBACK" && l.attrs["loop_mode"] == "fast"),
        "{seen:?}"
    );
    let ls = r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN}));
    assert_eq!(ls[0]["loop_mode"], "fast", "{ls}");

    let saved = r.save().to_string();
    assert_eq!(saved.matches("\"loop_tag\":\"BLUE\"").count(), 1, "{saved}");
    assert!(!saved.contains("unset-"), "{saved}");
    assert!(saved.contains("\"loop_mode\":\"fast\""), "{saved}");
}

#[test]
fn transport_declared_options_and_attributes_reach_the_command_lines() {
    // The specs that build `rtgt rpc`, `rtgt shell` and the Python `rtgt-rpc` (methods.json)
    // offer what the transport declares, as `--long` options of the method it belongs to,
    // with the declared JSON type: a new transport needs no change in rpc or cli.
    let offered = |method: &str, key: &str| {
        let spec = rpc::methods::specs::find(method).unwrap_or_else(|| panic!("{method}"));
        spec.args
            .iter()
            .find(|a| a.key == key)
            .map(|a| (a.at, a.json_kind()))
    };
    assert_eq!(
        offered("nvmf_create_transport", "loop_depth"),
        Some((rpc_spec::At::Opt(None, "loop-depth"), JsonType::Uint(8)))
    );
    assert_eq!(
        offered("nvmf_create_subsystem", "loop_tag"),
        Some((rpc_spec::At::Opt(None, "loop-tag"), JsonType::Str))
    );
    assert_eq!(
        offered("nvmf_subsystem_add_listener", "loop_mode"),
        Some((rpc_spec::At::Opt(None, "loop-mode"), JsonType::Str))
    );
    // Each only where it belongs.
    assert_eq!(offered("nvmf_create_subsystem", "loop_depth"), None);
    assert_eq!(offered("nvmf_subsystem_add_listener", "loop_tag"), None);
    // And the described form the Python CLI reads carries them too.
    let described = rpc_spec::describe(&rpc::methods::specs::all().iter().collect::<Vec<_>>());
    let text = described.to_string();
    assert!(text.contains("\"loop-tag\""), "{text}");
}
