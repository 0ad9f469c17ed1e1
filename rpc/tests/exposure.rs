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
