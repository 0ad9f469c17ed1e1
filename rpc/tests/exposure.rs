//! Exposure of the RPC endpoints: an empty HTTP bearer token is refused (it would make
//! `Authorization: Bearer ` the password), and the single-instance lock never follows a
//! symbolic link planted at its path (the socket usually lives in world-writable /var/tmp).

mod common;

use common::{TempDir, demo_table};
use rpc::{HttpOptions, RpcState, ServeError, UnixOptions, serve_http, serve_unix};

#[tokio::test]
async fn an_empty_bearer_token_is_refused() {
    for token in ["", "   "] {
        let opts = HttpOptions {
            token: Some(token.to_string()),
            ..HttpOptions::default()
        };
        let r = serve_http(
            demo_table(RpcState::Runtime).table,
            "127.0.0.1:0".parse().unwrap(),
            opts,
        )
        .await;
        match r {
            Err(ServeError::Io { source, .. }) => {
                assert!(source.to_string().contains("empty"), "{source}")
            }
            other => panic!("an empty token was accepted: {:?}", other.map(|_| ())),
        }
    }
}

#[tokio::test]
async fn the_lock_file_never_follows_a_symbolic_link() {
    let dir = TempDir::new();
    let sock = dir.sock();
    let victim = dir.0.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, format!("{}.lock", sock.display())).unwrap();
    let r = serve_unix(
        demo_table(RpcState::Runtime).table,
        &sock,
        UnixOptions::default(),
    )
    .await;
    assert!(r.is_err(), "served with a planted lock symlink");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_ne!(mode, 0o600, "the victim's mode was changed");
    assert!(!sock.exists(), "a socket appeared anyway");
}

/// A table with one method whose answer is 1 MiB.
fn big_table() -> rpc::MethodTable {
    let mut m = rpc::Methods::new((), rpc::StateHandle::new(RpcState::Runtime));
    m.register("big", rpc::StateMask::ANY, |_p, _: &()| {
        Ok("b".repeat(1 << 20))
    })
    .unwrap();
    m.build()
}

async fn exchange(sock: &std::path::Path, req: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::UnixStream::connect(sock).await.unwrap();
    c.write_all(req).await.unwrap();
    c.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(common::TIMEOUT, c.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn small_requests_cannot_make_huge_answers() {
    let dir = TempDir::new();
    let sock = dir.sock();
    let server = serve_unix(big_table(), &sock, UnixOptions::default())
        .await
        .unwrap();
    let call = r#"{"jsonrpc":"2.0","method":"big","id":1}"#;
    // 4 calls: a 4 MiB answer is fine.
    let ok = exchange(&sock, format!("[{}]", [call; 4].join(",")).as_bytes()).await;
    let v: serde_json::Value = serde_json::from_str(&ok).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(4));
    // 40 calls (2 KiB of request): more than the 32 MiB response limit, one error instead.
    let big = exchange(&sock, format!("[{}]", [call; 40].join(",")).as_bytes()).await;
    assert_eq!(
        big,
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"Batch response too large (limit 33554432 bytes)\"}}\n"
    );
    // More than SPDK's 8192 JSON values in one request: parse error, connection closed.
    let many = exchange(
        &sock,
        format!("[{}]", vec![call; 1100].join(",")).as_bytes(),
    )
    .await;
    assert_eq!(
        many,
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}\n"
    );
    server.shutdown().await;
}
