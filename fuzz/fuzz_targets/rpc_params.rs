//! RPC parameter decoding and handling: arbitrary parameters to every method of the daemon's
//! real method table, called in-process (`MethodTable::call`) against a live target, in the
//! STARTUP or RUNTIME state.
//!
//! Input: `[state][calls...]`, each call `[method index][mode][length u16][payload]`. Mode 0
//! sends the payload as the params text (JSON or not); otherwise the payload drives a
//! generator that builds a params object from the parameter names and plausible values the
//! methods use, so that calls get past decoding into the handlers (creating, changing and
//! deleting bdevs, subsystems, namespaces, hosts, listeners, transports).
//! Properties: nothing panics, no call hangs, every call ends in a JSON result or a JSON-RPC
//! error with a non-zero code and a message; the table still answers afterwards. State an
//! input created is removed before the next one.
#![no_main]
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use rpc::RpcState;
use rtgt_fuzz::Bytes;
use rtgt_fuzz::live::RpcRig;
use serde_json::{Map, Value, json};

static RIG: Mutex<Option<RpcRig>> = Mutex::new(None);

const KEYS: &[&str] = &[
    "name",
    "nqn",
    "num_blocks",
    "block_size",
    "bdev_name",
    "nsid",
    "host",
    "trtype",
    "traddr",
    "trsvcid",
    "adrfam",
    "allow_any_host",
    "serial_number",
    "model_number",
    "max_namespaces",
    "min_cntlid",
    "max_cntlid",
    "uuid",
    "nguid",
    "eui64",
    "filename",
    "tgt_name",
    "listen_address",
    "srp_port_id",
    "ana_reporting",
    "dmrsl",
    "wzsl",
    "passthrough",
    "enable_nssr",
    "admin_label",
    "max_queue_depth",
    "max_io_qpairs_per_ctrlr",
    "in_capsule_data_size",
    "max_io_size",
    "io_unit_size",
    "max_aq_depth",
    "num_shared_buffers",
    "buf_cache_size",
    "no_srq",
    "abort_timeout_sec",
    "acceptor_poll_rate",
    "sq_size",
    "max_req_size",
    "max_rsp_size",
    "use_srq",
    "immediate_data",
    "level",
    "flag",
    "sig_name",
    "subsystem",
    "with_batches",
    "current",
    "include_aliases",
    "path",
    "timeout_ms",
    "anagrpid",
    "no_auto_visible",
    "ptpl_file",
    "optimal_io_boundary",
    "physical_block_size",
    "readonly",
    "fallocate",
    "crdt1",
    "crdt2",
    "crdt3",
    "max_subsystems",
    "secure_channel",
    "psk",
    "dhchap_key",
    "small_pool_count",
    "large_pool_count",
    "impl_name",
    "enable_zerocopy_send_server",
    "kas",
    "min_kato",
    "keep_alive_timeout_ms",
    "disconnect_timeout_ms",
    "md_size",
    "md_interleave",
    "dif_type",
    "per_channel",
    "reset_mode",
    "timeout_us",
];

const LONG: &str = "nqn.2016-06.io.spdk:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

const STRINGS: &[&str] = &[
    "",
    "Malloc0",
    "Malloc1",
    "Null0",
    "AIO0",
    "nqn.2016-06.io.spdk:cnode1",
    "nqn.2016-06.io.spdk:cnode2",
    "nqn.2014-08.org.nvmexpress.discovery",
    "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
    "RDMA",
    "rdma",
    "SRP",
    "srp",
    "TCP",
    "10.0.0.1",
    "10.0.0.2",
    "127.0.0.1",
    "::1",
    "0.0.0.0",
    "4420",
    "5556",
    "65536",
    "-1",
    "IPv4",
    "ipv4",
    "IPv6",
    "SPDK00000000000001",
    "SPDK_Controller1",
    "nvmf_tgt",
    "0x00000000000000005254001234567890",
    "5254:0012:3456:7890",
    "0x02c90300ff0001:0x02c90300ff0001",
    "f6b0a1e2-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
    "00112233445566778899aabbccddeeff",
    "0011223344556677",
    "/nonexistent/rtgt",
    "/dev/null",
    "DEBUG",
    "INFO",
    "ERROR",
    "nvmf",
    "bdev",
    "SIGTERM",
    "SIGUSR1",
    "\u{0}",
    "nqn.2016-06.io.spdk:\u{7f}",
    LONG,
];

fn value(b: &mut Bytes<'_>, rig: &RpcRig, depth: u8) -> Value {
    match b.u8() % 12 {
        0 => Value::Null,
        1 => Value::Bool(b.u8() & 1 != 0),
        2 => json!(b.u8()),
        3 => json!(b.u16()),
        4 => json!(b.u32()),
        5 => json!(b.u64()),
        6 => json!(-(i64::from(b.u32()))),
        7 => json!(f64::from(b.u16()) / 7.0),
        8 | 9 => {
            let i = usize::from(b.u8()) % (STRINGS.len() + 1);
            match STRINGS.get(i) {
                Some(s) => json!(s),
                None => json!(rig.aio_file),
            }
        }
        10 if depth < 3 => {
            let n = b.u8() % 4;
            Value::Array((0..n).map(|_| value(b, rig, depth + 1)).collect())
        }
        _ if depth < 3 => object(b, rig, depth + 1),
        _ => json!(b.u16().to_string()),
    }
}

fn object(b: &mut Bytes<'_>, rig: &RpcRig, depth: u8) -> Value {
    let n = b.u8() % 8;
    let mut m = Map::new();
    for _ in 0..n {
        let k = KEYS[usize::from(b.u8()) % KEYS.len()];
        m.insert(k.to_string(), value(b, rig, depth));
    }
    Value::Object(m)
}

fuzz_target!(|data: &[u8]| {
    let mut guard = RIG.lock().unwrap_or_else(|p| p.into_inner());
    let rig = guard.get_or_insert_with(RpcRig::new);
    let methods: Vec<&'static str> = rig.table.methods().into_iter().map(|m| m.name).collect();
    let mut b = Bytes::new(data);
    let state = if b.u8() & 1 == 0 {
        RpcState::Runtime
    } else {
        RpcState::Startup
    };
    rig.state.set(state);
    let mut calls = 0;
    while !b.is_empty() && calls < 12 {
        calls += 1;
        let method = methods[usize::from(b.u8()) % methods.len()];
        let mode = b.u8();
        let len = usize::from(b.u16() % 2048);
        let payload = b.take(len);
        let params: Option<String> = match mode % 4 {
            0 => Some(String::from_utf8_lossy(payload).into_owned()),
            1 => None,
            _ => Some(object(&mut Bytes::new(payload), rig, 0).to_string()),
        };
        if let Some(p) = &params
            && let Ok(v) = serde_json::from_str::<Value>(p)
            && rig.skip(method, &v)
        {
            continue;
        }
        match rig.call(method, params.as_deref()) {
            Some(Ok(_)) | None => {}
            Some(Err(e)) => {
                assert_ne!(e.code, 0, "{method}: error without a code");
                assert!(!e.message.is_empty(), "{method}: error without a message");
            }
        }
    }
    // Still answering.
    assert!(matches!(rig.call("spdk_get_version", None), Some(Ok(_))));
    rig.reset(RpcState::Runtime);
});
