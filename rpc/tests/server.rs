//! The servers over real sockets: SPDK framing, envelope, batches, limits, states, decoding,
//! the single-instance guard and HTTP.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Client, TempDir, demo_table, pretty};
use rpc::{
    Limits, MSG_ALREADY_INITIALIZED, MSG_NOT_YET_INITIALIZED, RpcError, RpcState, ServeAddr,
    ServeError, ServerHandle, TcpOptions, UnixOptions, serve_tcp, serve_unix,
};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

struct Unix {
    dir: TempDir,
    server: ServerHandle,
    built: common::Built,
}

impl Unix {
    async fn start(state: RpcState) -> Self {
        Self::start_with(state, UnixOptions::default()).await
    }

    async fn start_with(state: RpcState, opts: UnixOptions) -> Self {
        let dir = TempDir::new();
        let built = demo_table(state);
        let server = serve_unix(built.table.clone(), dir.sock(), opts)
            .await
            .unwrap();
        Unix { dir, server, built }
    }

    async fn client(&self) -> Client<UnixStream> {
        Client::new(UnixStream::connect(self.dir.sock()).await.unwrap())
    }
}

fn err(code: i32, msg: &str) -> Value {
    json!({"code": code, "message": msg})
}

#[tokio::test]
async fn pretty_printed_requests_get_compact_responses_with_newline() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    let req = json!({"jsonrpc": "2.0", "method": "demo_echo", "id": 1, "params": {"value": {"b": [1, 2], "a": "x"}}});
    c.send(pretty(&req).as_bytes()).await;
    // Exact bytes: key order jsonrpc, id, result; compact; one '\n' (checked by `line`).
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"b":[1,2],"a":"x"}}"#
    );
    c.send(pretty(&json!({"jsonrpc": "2.0", "method": "nope", "id": 2})).as_bytes())
        .await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found"}}"#
    );
}

#[tokio::test]
async fn request_split_byte_by_byte() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    let req = pretty(
        &json!({"jsonrpc": "2.0", "method": "demo_echo", "id": 7, "params": {"value": "a\"}{b"}}),
    );
    for b in req.as_bytes() {
        c.stream.write_all(&[*b]).await.unwrap();
        c.stream.flush().await.unwrap();
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    assert_eq!(
        c.value().await,
        json!({"jsonrpc": "2.0", "id": 7, "result": "a\"}{b"})
    );
}

#[tokio::test]
async fn several_requests_in_one_write_are_answered_in_order() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    // rpc.py joins queued requests with "\n"; the last has no newline.
    let reqs: Vec<String> = (1..=5)
        .map(|i| pretty(&json!({"jsonrpc": "2.0", "method": "demo_echo", "id": i, "params": {"value": i * 10}})))
        .collect();
    c.send(reqs.join("\n").as_bytes()).await;
    for i in 1..=5 {
        assert_eq!(
            c.value().await,
            json!({"jsonrpc": "2.0", "id": i, "result": i * 10})
        );
    }
    // Back-to-back with no separator at all.
    c.send(br#"{"method":"demo_echo","id":"a","params":{"value":1}}{"method":"demo_echo","id":"b","params":{"value":2}}"#)
        .await;
    assert_eq!(c.value().await["id"], "a");
    assert_eq!(c.value().await["id"], "b");
}

#[tokio::test]
async fn ids_are_echoed_verbatim_and_null_params_is_absent() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    c.send(
        br#"{"jsonrpc":"2.0","method":"spdk_get_version","params":null,"id":"req \u00e9 \"1\""}"#,
    )
    .await;
    let line = c.line().await.unwrap();
    assert!(
        line.starts_with(
            r#"{"jsonrpc":"2.0","id":"req \u00e9 \"1\"","result":{"version":"SPDK v26.05""#
        ),
        "{line}"
    );
    c.send(br#"{"method":"demo_echo","params":{"value":0},"id":-12.5e3}"#)
        .await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":-12.5e3,"result":0}"#
    );
}

#[tokio::test]
async fn notifications_run_but_only_errors_are_answered() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    c.send(br#"{"jsonrpc":"2.0","method":"demo_count"}"#).await;
    c.send(br#"{"jsonrpc":"2.0","method":"demo_count","id":null}"#)
        .await;
    c.send(br#"{"jsonrpc":"2.0","method":"no_such_method"}"#)
        .await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}"#
    );
    assert_eq!(
        c.call(json!({"method": "demo_count", "id": 3})).await["result"],
        3
    );
    assert_eq!(u.built.demo.counted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn batches() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    let batch = json!([
        {"jsonrpc": "2.0", "method": "demo_echo", "id": 1, "params": {"value": "one"}},
        {"jsonrpc": "2.0", "method": "demo_count"},
        5,
        {"jsonrpc": "2.0", "method": "nope", "id": "x"},
        {"jsonrpc": "2.0", "method": "demo_sleep", "id": 2, "params": {"ms": 5}}
    ]);
    c.send(pretty(&batch).as_bytes()).await;
    assert_eq!(
        c.line().await.unwrap(),
        concat!(
            r#"[{"jsonrpc":"2.0","id":1,"result":"one"},"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}},"#,
            r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"Method not found"}},"#,
            r#"{"jsonrpc":"2.0","id":2,"result":5}]"#
        )
    );
    assert_eq!(u.built.demo.counted.load(Ordering::SeqCst), 1);
    // Empty batch: one error object, not an array.
    c.send(b"[]").await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}"#
    );
    // All notifications: nothing at all; the next answer is for the next request.
    c.send(br#"[{"method":"demo_count"},{"method":"demo_count","id":null}]"#)
        .await;
    assert_eq!(
        c.call(json!({"method": "demo_count", "id": 9})).await["result"],
        4
    );
    // Elements run in order: create then a duplicate create in one batch.
    let r = c
        .call(json!([
            {"method": "bdev_malloc_create", "id": 1, "params": {"num_blocks": 8, "block_size": 512, "name": "M"}},
            {"method": "bdev_malloc_create", "id": 2, "params": {"num_blocks": 8, "block_size": 512, "name": "M"}}
        ]))
        .await;
    assert_eq!(r[0]["result"], "M");
    assert_eq!(r[1]["error"], err(-17, "File exists"));
}

#[tokio::test]
async fn envelope_errors_keep_the_connection_open() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    let invalid =
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}"#;
    for bad in [
        r#"{"jsonrpc":"2.0","method":"demo_count","id":1,"extra":true}"#,
        r#"{"jsonrpc":"1.0","method":"demo_count","id":1}"#,
        r#"{"jsonrpc":"2.0","method":7,"id":1}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","method":"demo_count","id":[1]}"#,
        r#""just a string""#,
        "42 ",
    ] {
        c.send(bad.as_bytes()).await;
        assert_eq!(c.line().await.unwrap(), invalid, "{bad}");
    }
    // A bad params type is the one case where SPDK echoes the id.
    c.send(br#"{"jsonrpc":"2.0","method":"demo_count","params":"x","id":5}"#)
        .await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32600,"message":"Invalid request"}}"#
    );
    assert_eq!(
        c.call(json!({"method": "demo_echo", "id": 6, "params": {"value": true}}))
            .await["result"],
        true
    );
}

#[tokio::test]
async fn syntax_error_answers_parse_error_and_closes() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    c.send(br#"{"jsonrpc":"2.0","method":"demo_count","id":1}{"method": oops"#)
        .await;
    assert_eq!(c.value().await["result"], 1);
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
    );
    c.expect_eof().await;
    assert_eq!(u.server.stats().parse_errors, 1);
    // Invalid UTF-8 inside a string is a parse error too.
    let mut c = u.client().await;
    c.send(b"{\"method\":\"demo_count\",\"id\":\"\xff\"}").await;
    assert_eq!(c.value().await["error"]["code"], -32700);
    c.expect_eof().await;
}

#[tokio::test]
async fn oversized_request_is_refused_with_bounded_memory() {
    let u = Unix::start(RpcState::Runtime).await;
    // 200 KiB fits under the 256 KiB cap.
    let mut c = u.client().await;
    let big = "y".repeat(200 * 1024);
    let r = c
        .call(json!({"method": "demo_echo", "id": 1, "params": {"value": big}}))
        .await;
    assert_eq!(r["result"].as_str().unwrap().len(), 200 * 1024);

    // 300 KiB does not: the client gets an error and EOF, the server never buffers > 256 KiB.
    let c = u.client().await;
    let (mut rd, mut wr) = c.stream.into_split();
    let writer = tokio::spawn(async move {
        let huge = format!(
            r#"{{"method":"demo_echo","id":2,"params":{{"value":"{}"}}}}"#,
            "z".repeat(300 * 1024)
        );
        // The server stops reading at the cap; it drains the rest before closing.
        let _ = wr.write_all(huge.as_bytes()).await;
        // Keep streaming garbage-free JSON: the server must not buffer it.
        let _ = wr.write_all("z".repeat(4 << 20).as_bytes()).await;
        let _ = wr.shutdown().await;
    });
    let mut out = Vec::new();
    tokio::time::timeout(
        common::TIMEOUT,
        tokio::io::AsyncReadExt::read_to_end(&mut rd, &mut out),
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Request too large (limit 262144 bytes)\"}}\n"
    );
    writer.await.unwrap();
    let stats = u.server.stats();
    assert_eq!(stats.oversized_requests, 1);
    assert!(stats.peak_request_buffer <= 256 * 1024, "{stats:?}");
    // The server is still fine.
    let mut c = u.client().await;
    assert_eq!(
        c.call(json!({"method": "demo_count", "id": 3})).await["result"],
        1
    );
}

#[tokio::test]
async fn large_responses_are_sent_whole() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    let r = c
        .call(json!({"method": "demo_big", "id": 1, "params": {"bytes": 3 << 20}}))
        .await;
    assert_eq!(r["result"].as_str().unwrap().len(), 3 << 20);
}

/// A stream to either kind of raw endpoint.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

async fn connect(addr: &ServeAddr) -> Client<Box<dyn Stream>> {
    let s: Box<dyn Stream> = match addr {
        ServeAddr::Unix(p) => Box::new(UnixStream::connect(p).await.unwrap()),
        ServeAddr::Tcp(a) => Box::new(TcpStream::connect(a).await.unwrap()),
    };
    Client::new(s)
}

/// Waits (at most 5 s) until `f` holds.
async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + common::TIMEOUT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A Unix and a TCP server on the demo table with these limits.
async fn raw_servers(limits: Limits) -> (TempDir, Vec<ServerHandle>) {
    let dir = TempDir::new();
    let unix = serve_unix(
        demo_table(RpcState::Runtime).table,
        dir.sock(),
        UnixOptions {
            limits: limits.clone(),
            ..UnixOptions::default()
        },
    )
    .await
    .unwrap();
    let tcp = serve_tcp(
        demo_table(RpcState::Runtime).table,
        "127.0.0.1:0".parse().unwrap(),
        TcpOptions {
            limits,
            ..TcpOptions::default()
        },
    )
    .await
    .unwrap();
    (dir, vec![unix, tcp])
}

/// Issue 13: 64 connections that send nothing (a script that opens connections and forgets
/// them) used to leave every further client waiting in the listen backlog for ever. Now the
/// 65th is told so at once and closed, and a client is served again as soon as a slot frees.
#[tokio::test]
async fn connection_over_the_limit_gets_an_error_instead_of_hanging() {
    let (_dir, servers) = raw_servers(Limits::default()).await;
    for s in &servers {
        let addr = s.local_addr().clone();
        let mut idle = Vec::new();
        for _ in 0..64 {
            idle.push(connect(&addr).await);
        }
        wait_until("64 connections are served", || s.stats().active == 64).await;
        let mut late = connect(&addr).await;
        late.send(br#"{"method":"demo_echo","id":65,"params":{"value":65}}"#)
            .await;
        let v = late.value().await;
        assert_eq!(v["error"]["code"], -32000, "{addr:?}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("Too many connections") && msg.contains("64"),
            "{msg}"
        );
        late.expect_eof().await;
        assert_eq!(s.stats().refused_connections, 1);
        assert_eq!(s.stats().active, 64);
        // The idle ones still work, and a freed slot serves the next client.
        assert_eq!(
            idle[0]
                .call(json!({"method": "demo_echo", "id": 1, "params": {"value": 1}}))
                .await["result"],
            1
        );
        drop(idle.pop());
        wait_until("the slot is free", || s.stats().active == 63).await;
        let mut next = connect(&addr).await;
        assert_eq!(
            next.call(json!({"method": "demo_echo", "id": 2, "params": {"value": 2}}))
                .await["result"],
            2
        );
    }
}

/// Issue 13: a connection without a request in progress for the idle timeout is closed, which
/// frees its slot; one that keeps calling, or waits for a long call, is not.
#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    // Generous margins: the client and the server share one thread of a loaded machine.
    let idle = Duration::from_millis(800);
    let limits = Limits {
        idle_timeout: Some(idle),
        ..Limits::default()
    };
    let (_dir, servers) = raw_servers(limits).await;
    for s in &servers {
        let addr = s.local_addr().clone();
        // Sends nothing: closed once the timeout has passed (not before).
        let mut silent = connect(&addr).await;
        let opened = std::time::Instant::now();
        match silent.line_within(Duration::from_secs(3)).await {
            Ok(None) => {}
            Ok(Some(l)) => panic!("{addr:?}: expected EOF, got {l}"),
            Err(()) => panic!("{addr:?}: an idle connection was still open after 3 s"),
        }
        assert!(
            opened.elapsed() >= idle,
            "closed after {:?}",
            opened.elapsed()
        );
        // Sends half a request and stalls: idle too.
        let mut stalled = connect(&addr).await;
        stalled.send(br#"{"method":"demo_ec"#).await;
        assert_eq!(stalled.line_within(Duration::from_secs(3)).await, Ok(None));
        // Calls every 100 ms for longer than the timeout: each answer restarts the clock.
        let mut busy = connect(&addr).await;
        for i in 0..10 {
            assert_eq!(
                busy.call(json!({"method": "demo_echo", "id": i, "params": {"value": i}}))
                    .await["result"],
                i
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A call that takes three timeouts is answered: it is not idle.
        let r = busy
            .call(json!({"method": "demo_sleep", "id": 99, "params": {"ms": 2400}}))
            .await;
        assert_eq!(r["result"], 2400, "{addr:?}: {r}");
        assert_eq!(s.stats().idle_closed, 2);
        busy.expect_eof().await;
        assert_eq!(s.stats().idle_closed, 3);
        wait_until("no connection is left", || s.stats().active == 0).await;
    }
}

#[tokio::test]
async fn idle_timeout_none_keeps_connections() {
    let limits = Limits {
        idle_timeout: None,
        ..Limits::default()
    };
    let (_dir, servers) = raw_servers(limits).await;
    for s in &servers {
        let mut c = connect(s.local_addr()).await;
        c.expect_silence(Duration::from_millis(300)).await;
        assert_eq!(
            c.call(json!({"method": "demo_count", "id": 1})).await["id"],
            1
        );
    }
}

#[tokio::test]
async fn half_closed_client_gets_its_answers() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    c.send(br#"{"method":"demo_sleep","id":1,"params":{"ms":30}} {"method":"demo_count","id":2}"#)
        .await;
    c.stream.shutdown().await.unwrap();
    assert_eq!(c.value().await["result"], 30);
    assert_eq!(c.value().await["result"], 1);
    c.expect_eof().await;
}

#[tokio::test]
async fn state_masks_and_framework_start_init() {
    let u = Unix::start(RpcState::Startup).await;
    let mut c = u.client().await;
    let mut waiter = u.client().await;
    waiter
        .send(br#"{"method":"framework_wait_init","id":"w"}"#)
        .await;

    let r = c.call(json!({"method": "bdev_malloc_create", "id": 1, "params": {"num_blocks": 1, "block_size": 512}})).await;
    assert_eq!(r["error"], err(-1, MSG_NOT_YET_INITIALIZED));
    // The state is checked before the parameters, as in SPDK.
    let r = c
        .call(json!({"method": "bdev_malloc_create", "id": 1, "params": {"bogus": 1}}))
        .await;
    assert_eq!(r["error"], err(-1, MSG_NOT_YET_INITIALIZED));
    let r = c
        .call(json!({"method": "nvmf_delete_subsystem", "id": 1, "params": {"bogus": 1}}))
        .await;
    assert_eq!(r["error"], err(-1, MSG_NOT_YET_INITIALIZED));
    assert_eq!(
        c.call(json!({"method": "nvmf_set_config", "id": 2})).await["result"],
        true
    );
    let current: Vec<String> = serde_json::from_value(
        c.call(json!({"method": "rpc_get_methods", "id": 3, "params": {"current": true}}))
            .await["result"]
            .clone(),
    )
    .unwrap();
    assert!(current.contains(&"framework_start_init".to_string()));
    assert!(current.contains(&"nvmf_set_config".to_string()));
    assert!(!current.contains(&"bdev_malloc_create".to_string()));
    waiter.expect_silence(Duration::from_millis(50)).await;

    let r = c
        .call(json!({"method": "framework_start_init", "id": 4, "params": {}}))
        .await;
    assert_eq!(
        r["error"],
        err(-32602, "framework_start_init requires no parameters")
    );
    assert_eq!(
        c.call(json!({"method": "framework_start_init", "id": 5}))
            .await["result"],
        true
    );
    assert_eq!(u.built.demo.init_calls.load(Ordering::SeqCst), 1);
    assert_eq!(u.built.table.state().get(), RpcState::Runtime);
    assert_eq!(
        waiter.value().await,
        json!({"jsonrpc": "2.0", "id": "w", "result": true})
    );

    let r = c
        .call(json!({"method": "framework_start_init", "id": 6}))
        .await;
    assert_eq!(r["error"], err(-1, MSG_ALREADY_INITIALIZED));
    let r = c.call(json!({"method": "nvmf_set_config", "id": 7})).await;
    assert_eq!(r["error"], err(-1, MSG_ALREADY_INITIALIZED));
    let r = c.call(json!({"method": "bdev_malloc_create", "id": 8, "params": {"num_blocks": 1, "block_size": 512}})).await;
    assert_eq!(r["result"], "Malloc0");
    assert_eq!(
        c.call(json!({"method": "framework_wait_init", "id": 9}))
            .await["result"],
        true
    );
}

#[tokio::test]
async fn concurrent_framework_start_init_runs_the_hook_once() {
    let u = Unix::start(RpcState::Startup).await;
    let mut a = u.client().await;
    let mut b = u.client().await;
    a.send(br#"{"method":"framework_start_init","id":1}"#).await;
    b.send(br#"{"method":"framework_start_init","id":2}"#).await;
    let (ra, rb) = (a.value().await, b.value().await);
    let oks = [&ra, &rb].iter().filter(|r| r["result"] == true).count();
    assert_eq!(oks, 1, "{ra} {rb}");
    assert_eq!(u.built.demo.init_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn rpc_get_methods_and_aliases() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    // rpc.py sends both flags explicitly.
    let all = c.call(json!({"method": "rpc_get_methods", "id": 1, "params": {"current": false, "include_aliases": false}})).await;
    let all: Vec<String> = serde_json::from_value(all["result"].clone()).unwrap();
    assert_eq!(
        all.first().map(String::as_str),
        Some("demo_big"),
        "reverse registration order"
    );
    assert_eq!(all.last().map(String::as_str), Some("rpc_get_methods"));
    for m in [
        "spdk_get_version",
        "framework_start_init",
        "framework_wait_init",
        "log_set_level",
        "nvmf_set_config",
    ] {
        assert!(all.iter().any(|n| n == m), "{m}");
    }
    assert!(!all.iter().any(|n| n == "construct_malloc_bdev"));
    let with: Vec<String> = serde_json::from_value(
        c.call(json!({"method": "rpc_get_methods", "id": 2, "params": {"include_aliases": true}}))
            .await["result"]
            .clone(),
    )
    .unwrap();
    assert!(with.iter().any(|n| n == "construct_malloc_bdev"));
    let current: Vec<String> = serde_json::from_value(
        c.call(json!({"method": "rpc_get_methods", "id": 3, "params": {"current": true}}))
            .await["result"]
            .clone(),
    )
    .unwrap();
    assert!(
        !current
            .iter()
            .any(|n| n == "nvmf_set_config" || n == "framework_start_init")
    );
    let r = c
        .call(json!({"method": "rpc_get_methods", "id": 4, "params": {"bogus": 1}}))
        .await;
    assert_eq!(r["error"], err(-32602, "Invalid parameters"));
    // The alias dispatches to the method.
    let r = c
        .call(json!({"method": "construct_malloc_bdev", "id": 5, "params": {"num_blocks": 8, "block_size": 512}}))
        .await;
    assert_eq!(r["result"], "Malloc0");
}

#[tokio::test]
async fn parameter_decoding_flavours() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    // strict: unknown key.
    let r = c
        .call(json!({"method": "demo_echo", "id": 1, "params": {"value": 1, "bogus": 2}}))
        .await;
    assert_eq!(r["error"], err(-32602, "Invalid parameters"));
    // strict: missing params means {} (missing required field here).
    let r = c.call(json!({"method": "demo_echo", "id": 2})).await;
    assert_eq!(r["error"], err(-32602, "Invalid parameters"));
    // strict: array params.
    let r = c
        .call(json!({"method": "demo_echo", "id": 3, "params": [1]}))
        .await;
    assert_eq!(r["error"], err(-32602, "Invalid parameters"));
    // relaxed: exactly what rpc.py sends for `nvmf_create_transport -t RDMA -u 8192 -n 4096 -b 32`.
    let r = c
        .call(json!({"method": "nvmf_create_transport", "id": 4, "params": {"no_srq":false,"c2h_success":true,"trtype":"RDMA","io_unit_size":8192,"num_shared_buffers":4096,"buf_cache_size":32,"zcopy":false,"dif_insert_or_strip":false,"no_wr_batching":false,"disable_mappable_bar0":false,"disable_adaptive_irq":false,"disable_shadow_doorbells":false,"disable_command_passthru":false}}))
        .await;
    assert_eq!(r["result"], true, "{r}");
    // bdev flavour: decode failure is -32603.
    let r = c
        .call(json!({"method": "bdev_malloc_create", "id": 5, "params": {"num_blocks": 8}}))
        .await;
    assert_eq!(r["error"], err(-32603, "spdk_json_decode_object failed"));
    // What rpc.py sends for `bdev_malloc_create 64 512 -b Malloc0`, then the duplicate.
    let p = json!({"num_blocks":131072,"block_size":512,"name":"Malloc0","md_interleave":false,"dif_is_head_of_md":false});
    assert_eq!(
        c.call(json!({"method": "bdev_malloc_create", "id": 6, "params": p}))
            .await["result"],
        "Malloc0"
    );
    let r = c
        .call(json!({"method": "bdev_malloc_create", "id": 7, "params": p}))
        .await;
    assert_eq!(r["error"], err(-17, "File exists"));
    let r = c.call(json!({"method": "bdev_malloc_create", "id": 8, "params": {"num_blocks": 8, "block_size": 100}})).await;
    assert_eq!(r["error"], err(-22, "Invalid argument"));
    // Messages name the object.
    let r = c
        .call(json!({"method": "nvmf_delete_subsystem", "id": 9, "params": {"nqn": "nqn.x:1"}}))
        .await;
    assert_eq!(
        r["error"],
        err(-32602, "Subsystem with NQN 'nqn.x:1' not found")
    );
    // "requires no parameters".
    let r = c
        .call(json!({"method": "spdk_get_version", "id": 10, "params": {}}))
        .await;
    assert_eq!(
        r["error"],
        err(-32602, "spdk_get_version method requires no parameters")
    );
    let r = c
        .call(json!({"method": "spdk_get_version", "id": 11}))
        .await;
    assert_eq!(
        r["result"],
        json!({"version": "SPDK v26.05", "fields": {"major": 26, "minor": 5, "patch": 0, "suffix": ""}, "rtgt_version": env!("CARGO_PKG_VERSION")})
    );
}

#[tokio::test]
async fn log_methods_and_kill() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    assert_eq!(
        c.call(json!({"method": "log_get_level", "id": 1})).await["result"],
        "NOTICE"
    );
    assert_eq!(
        c.call(json!({"method": "log_set_level", "id": 2, "params": {"level": "debug"}}))
            .await["result"],
        true
    );
    assert_eq!(
        c.call(json!({"method": "log_get_level", "id": 3})).await["result"],
        "DEBUG"
    );
    let r = c
        .call(json!({"method": "log_set_level", "id": 4, "params": {"level": "LOUD"}}))
        .await;
    assert_eq!(r["error"], err(-32603, "spdk_json_decode_object failed"));
    let r = c
        .call(json!({"method": "log_set_flag", "id": 5, "params": {"flag": "nope"}}))
        .await;
    assert_eq!(r["error"], err(-32602, "invalid log flag"));
    assert_eq!(
        c.call(json!({"method": "log_set_flag", "id": 6, "params": {"flag": "nvmf"}}))
            .await["result"],
        true
    );
    assert_eq!(
        c.call(json!({"method": "log_get_flags", "id": 7})).await["result"],
        json!({"nvmf": true})
    );
    assert_eq!(*u.built.log.level.lock(), Some(rpc::LogLevel::Debug));
    let r = c
        .call(json!({"method": "spdk_kill_instance", "id": 8, "params": {"sig_name": "SIGSTOP"}}))
        .await;
    assert_eq!(r["error"], err(-32602, "Invalid parameters"));
    let r = c
        .call(json!({"method": "spdk_kill_instance", "id": 9, "params": {"sig_name": "SIGTERM"}}))
        .await;
    assert_eq!(r["result"], true);
    assert_eq!(*u.built.demo.killed.lock(), vec![rpc::KillSignal::Term]);
}

#[tokio::test]
async fn in_process_calls_use_the_same_rules() {
    let b = demo_table(RpcState::Startup);
    let e = b
        .table
        .call(
            "bdev_malloc_create",
            Some(r#"{"num_blocks":1,"block_size":512}"#),
        )
        .await
        .unwrap_err();
    assert_eq!(e, RpcError::new(-1, MSG_NOT_YET_INITIALIZED));
    b.table.state().set(RpcState::Runtime);
    let name: String = b
        .table
        .call_typed(
            "bdev_malloc_create",
            Some(&json!({"num_blocks": 1, "block_size": 512})),
        )
        .await
        .unwrap();
    assert_eq!(name, "Malloc0");
    assert_eq!(
        b.table.call("nope", None).await.unwrap_err(),
        RpcError::method_not_found()
    );
}

#[tokio::test]
async fn single_instance_lock_modes_and_cleanup() {
    let u = Unix::start(RpcState::Runtime).await;
    let sock = u.dir.sock();
    let lock = sock.with_file_name("spdk.sock.lock");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(&lock), 0o600);
    // A second server on the same path fails cleanly and leaves the first one alone.
    let second = serve_unix(
        demo_table(RpcState::Runtime).table,
        &sock,
        UnixOptions::default(),
    )
    .await;
    match second {
        Err(e @ ServeError::InUse { .. }) => {
            assert_eq!(
                e.to_string(),
                format!(
                    "RPC Unix domain socket path {} in use. Specify another.",
                    sock.display()
                )
            )
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    let mut c = u.client().await;
    assert_eq!(
        c.call(json!({"method": "demo_count", "id": 1})).await["result"],
        1
    );
    // Shutdown closes idle connections and removes both files.
    assert_eq!(u.server.local_addr(), &ServeAddr::Unix(sock.clone()));
    u.server.shutdown().await;
    c.expect_eof().await;
    assert!(!sock.exists());
    assert!(!lock.exists());
    // The path can be reused, with another mode.
    let opts = UnixOptions {
        mode: 0o660,
        ..UnixOptions::default()
    };
    let again = serve_unix(demo_table(RpcState::Runtime).table, &sock, opts)
        .await
        .unwrap();
    assert_eq!(mode(&sock), 0o660);
    again.shutdown().await;
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = TempDir::new();
    let sock = dir.sock();
    // A crashed instance leaves its socket file behind.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let s = serve_unix(
        demo_table(RpcState::Runtime).table,
        &sock,
        UnixOptions::default(),
    )
    .await
    .unwrap();
    let mut c = Client::new(UnixStream::connect(&sock).await.unwrap());
    assert_eq!(
        c.call(json!({"method": "demo_count", "id": 1})).await["result"],
        1
    );
    s.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_the_request_in_flight_finish() {
    let u = Unix::start(RpcState::Runtime).await;
    let mut c = u.client().await;
    c.send(br#"{"method":"demo_sleep","id":1,"params":{"ms":100}}"#)
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let stop = tokio::spawn(u.server.shutdown());
    assert_eq!(c.value().await["result"], 100);
    c.expect_eof().await;
    stop.await.unwrap();
}

#[tokio::test]
async fn tcp_uses_the_same_framing_and_refuses_remote_by_default() {
    let b = demo_table(RpcState::Runtime);
    let s = serve_tcp(
        b.table.clone(),
        "127.0.0.1:0".parse().unwrap(),
        TcpOptions::default(),
    )
    .await
    .unwrap();
    let ServeAddr::Tcp(addr) = s.local_addr().clone() else {
        panic!()
    };
    let mut c = Client::new(TcpStream::connect(addr).await.unwrap());
    let req = pretty(
        &json!({"jsonrpc": "2.0", "method": "demo_echo", "id": 1, "params": {"value": [1]}}),
    );
    let (a, z) = req.as_bytes().split_at(10);
    c.send(a).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.send(z).await;
    assert_eq!(
        c.line().await.unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#
    );
    c.send(b"{oops").await;
    assert_eq!(c.value().await["error"]["code"], -32700);
    c.expect_eof().await;
    s.shutdown().await;

    let r = serve_tcp(
        b.table.clone(),
        "0.0.0.0:0".parse().unwrap(),
        TcpOptions::default(),
    )
    .await;
    assert!(matches!(r, Err(ServeError::NonLoopback { .. })), "{r:?}");
    let opts = TcpOptions {
        allow_non_loopback: true,
        ..TcpOptions::default()
    };
    serve_tcp(b.table, "0.0.0.0:0".parse().unwrap(), opts)
        .await
        .unwrap()
        .shutdown()
        .await;
}

#[cfg(feature = "http")]
mod http {
    use super::*;
    use rpc::{HttpOptions, serve_http};
    use tokio::io::AsyncReadExt;

    /// One HTTP/1.1 exchange on a fresh connection: (status, body).
    async fn post(
        addr: std::net::SocketAddr,
        method: &str,
        auth: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = format!(
            "{method} / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(a) = auth {
            req.push_str(&format!("Authorization: {a}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(common::TIMEOUT, s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let status: u16 = text[9..12].parse().unwrap();
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    async fn start(token: Option<&str>) -> (ServerHandle, std::net::SocketAddr) {
        start_with(token, Limits::default()).await
    }

    async fn start_with(
        token: Option<&str>,
        limits: Limits,
    ) -> (ServerHandle, std::net::SocketAddr) {
        let opts = HttpOptions {
            token: token.map(str::to_string),
            limits,
            ..HttpOptions::default()
        };
        let s = serve_http(
            demo_table(RpcState::Runtime).table,
            "127.0.0.1:0".parse().unwrap(),
            opts,
        )
        .await
        .unwrap();
        let ServeAddr::Tcp(addr) = s.local_addr().clone() else {
            panic!()
        };
        (s, addr)
    }

    #[tokio::test]
    async fn http_without_token() {
        let (s, addr) = start(None).await;
        let (st, body) = post(
            addr,
            "POST",
            None,
            r#"{"jsonrpc":"2.0","method":"demo_echo","id":1,"params":{"value":"h"}}"#,
        )
        .await;
        assert_eq!(
            (st, body.as_str()),
            (200, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"h\"}\n")
        );
        // Same SPDK rules as the socket: batches, notifications, envelope errors.
        let (st, body) = post(
            addr,
            "POST",
            None,
            r#"[{"method":"demo_count","id":1},{"method":"demo_count"}]"#,
        )
        .await;
        assert_eq!(
            (st, body.as_str()),
            (200, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}]\n")
        );
        let (st, body) = post(addr, "POST", None, r#"{"method":"demo_count"}"#).await;
        assert_eq!((st, body.as_str()), (204, ""));
        let (st, body) = post(
            addr,
            "POST",
            None,
            r#"{"method":"demo_count","id":1,"x":1}"#,
        )
        .await;
        assert_eq!(st, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
            -32600
        );
        let (st, body) = post(addr, "POST", None, r#"{"method":"#).await;
        assert_eq!(st, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
            -32700
        );
        let (st, _) = post(addr, "GET", None, "").await;
        assert_eq!(st, 405);
        let big = format!(
            r#"{{"method":"demo_echo","id":1,"params":{{"value":"{}"}}}}"#,
            "q".repeat(300 * 1024)
        );
        let (st, _) = post(addr, "POST", None, &big).await;
        assert_eq!(st, 413);
        s.shutdown().await;
    }

    #[tokio::test]
    async fn http_with_token() {
        let (s, addr) = start(Some("s3cret")).await;
        let req = r#"{"jsonrpc":"2.0","method":"spdk_get_version","id":1}"#;
        assert_eq!(post(addr, "POST", None, req).await.0, 401);
        assert_eq!(post(addr, "POST", Some("Bearer wrong"), req).await.0, 401);
        assert_eq!(post(addr, "POST", Some("Basic s3cret"), req).await.0, 401);
        assert_eq!(post(addr, "GET", None, "").await.0, 401);
        let (st, body) = post(addr, "POST", Some("bearer s3cret"), req).await;
        assert_eq!(st, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["result"]["fields"]["major"],
            26
        );
        s.shutdown().await;
    }

    #[tokio::test]
    async fn http_refuses_remote_by_default() {
        let r = serve_http(
            demo_table(RpcState::Runtime).table,
            "0.0.0.0:0".parse().unwrap(),
            HttpOptions::default(),
        )
        .await;
        assert!(matches!(r, Err(ServeError::NonLoopback { .. })));
    }

    /// Reads one response (headers and a Content-Length body) from a kept-alive connection.
    async fn read_response(s: &mut TcpStream) -> (u16, String) {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    return (text[9..12].parse().unwrap(), body.to_string());
                }
            }
            let n = tokio::time::timeout(common::TIMEOUT, s.read(&mut chunk))
                .await
                .expect("timed out reading a response")
                .unwrap();
            assert!(n > 0, "EOF inside a response");
            got.extend_from_slice(&chunk[..n]);
        }
    }

    /// Issue 13, HTTP: 64 idle connections used to leave the next client hanging.
    #[tokio::test]
    async fn http_connection_over_the_limit_gets_503() {
        let (s, addr) = start(None).await;
        let mut idle = Vec::new();
        for _ in 0..64 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        wait_until("64 connections are served", || s.stats().active == 64).await;
        let req = r#"{"jsonrpc":"2.0","method":"demo_echo","id":1,"params":{"value":"h"}}"#;
        let (st, body) = post(addr, "POST", None, req).await;
        assert_eq!(st, 503, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], -32000, "{v}");
        assert_eq!(s.stats().refused_connections, 1);
        drop(idle.pop());
        wait_until("the slot is free", || s.stats().active == 63).await;
        assert_eq!(post(addr, "POST", None, req).await.0, 200);
        s.shutdown().await;
    }

    /// Issue 13, HTTP: kept-alive and silent connections are closed after the idle timeout; a
    /// long call is not cut.
    #[tokio::test]
    async fn http_idle_connections_are_closed_after_the_idle_timeout() {
        let idle = Duration::from_millis(300);
        let limits = Limits {
            idle_timeout: Some(idle),
            ..Limits::default()
        };
        let (s, addr) = start_with(None, limits).await;
        let expect_closed = |mut c: TcpStream| async move {
            let mut rest = Vec::new();
            match tokio::time::timeout(Duration::from_secs(3), c.read_to_end(&mut rest)).await {
                Ok(Ok(_)) | Ok(Err(_)) => {}
                Err(_) => panic!("an idle HTTP connection was still open after 3 s"),
            }
        };
        // Silent from the start.
        expect_closed(TcpStream::connect(addr).await.unwrap()).await;
        // Kept alive after a call, including a call three timeouts long.
        let mut c = TcpStream::connect(addr).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","method":"demo_sleep","id":1,"params":{"ms":900}}"#;
        let req = format!(
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        c.write_all(req.as_bytes()).await.unwrap();
        let (st, text) = read_response(&mut c).await;
        assert_eq!(st, 200, "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["result"], 900);
        expect_closed(c).await;
        wait_until("both are counted", || s.stats().idle_closed == 2).await;
        s.shutdown().await;
    }
}
