//! The JSON-RPC Unix socket server end to end: the input is written, in pieces, to a
//! connection of a live `serve_unix` server in front of the daemon's method table and a live
//! target; then the client half-closes and reads everything the server answers.
//!
//! Input: `[piece-size seed][stream]`.
//! Properties: nothing panics or hangs; every line the server sends is one JSON-RPC 2.0
//! response (or a batch of them) with an id and either a result or an error with a code; the
//! server's request buffer never exceeds its cap; and a new connection is served afterwards.
#![no_main]
use std::sync::Mutex;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rpc::{ServerHandle, UnixOptions};
use rtgt_fuzz::live::RpcRig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

struct Rig {
    rpc: RpcRig,
    server: ServerHandle,
    path: String,
}

static RIG: Mutex<Option<Rig>> = Mutex::new(None);

fn check_response(v: &Value) {
    let one = |r: &Value| {
        assert_eq!(r["jsonrpc"], "2.0", "{r}");
        assert!(r.get("id").is_some(), "no id: {r}");
        match (r.get("result"), r.get("error")) {
            (Some(_), None) => {}
            (None, Some(e)) => assert!(e["code"].as_i64().is_some_and(|c| c != 0), "{r}"),
            _ => panic!("neither result nor error: {r}"),
        }
    };
    match v {
        Value::Array(a) => {
            assert!(!a.is_empty());
            a.iter().for_each(one);
        }
        other => one(other),
    }
}

async fn exchange(path: &str, stream: &[u8], seed: u8) -> Vec<u8> {
    let mut c = UnixStream::connect(path).await.expect("connect");
    let mut x = u32::from(seed) | 1;
    let mut pos = 0;
    let (mut rd, mut wr) = c.split();
    let writer = async {
        while pos < stream.len() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let n = (x as usize % 4096 + 1).min(stream.len() - pos);
            if wr.write_all(&stream[pos..pos + n]).await.is_err() {
                break;
            }
            pos += n;
        }
        let _ = wr.shutdown().await;
    };
    let mut out = Vec::new();
    let reader = async {
        let _ = rd.read_to_end(&mut out).await;
    };
    tokio::join!(writer, reader);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let mut guard = RIG.lock().unwrap_or_else(|p| p.into_inner());
    let rig = guard.get_or_insert_with(|| {
        let rpc = RpcRig::new();
        let path = format!("/tmp/rtgt-fuzz-{}.sock", std::process::id());
        let table = rpc.table.clone();
        let server = rpc
            .tt
            .rt
            .block_on(rpc::serve_unix(table, &path, UnixOptions::default()))
            .expect("server");
        Rig { rpc, server, path }
    });
    // Calls that would only make the target allocate what an operator may legitimately ask for
    // are left out (see RpcRig::skip), as in rpc_params.
    let mut sc = rpc::framing::Scanner::new();
    while let rpc::framing::Scan::Complete { start, end } = sc.next(stream) {
        let Ok(v) = serde_json::from_slice::<Value>(&stream[start..end]) else {
            continue;
        };
        let calls = match &v {
            Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        };
        for c in calls {
            if let (Some(m), Some(p)) = (c["method"].as_str(), c.get("params"))
                && rig.rpc.skip(m, p)
            {
                return;
            }
        }
    }
    let out = rig.rpc.tt.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), exchange(&rig.path, stream, seed))
            .await
            .expect("the server did not finish the exchange within 30 s")
    });
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(line)));
        check_response(&v);
    }
    assert!(rig.server.stats().peak_request_buffer <= rpc::DEFAULT_MAX_REQUEST_SIZE);
    let probe = br#"{"jsonrpc":"2.0","method":"spdk_get_version","id":1}"#;
    let out = rig.rpc.tt.rt.block_on(exchange(&rig.path, probe, 1));
    let v: Value =
        serde_json::from_slice(out.strip_suffix(b"\n").unwrap_or(&out)).expect("probe answer");
    assert!(v["result"]["version"].is_string(), "{v}");
    rig.rpc.reset(rpc::RpcState::Runtime);
});
