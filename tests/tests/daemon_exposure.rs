//! What `rtgt serve` exposes: its Unix socket (mode 0600 unless configured), and TCP / HTTP
//! endpoints that refuse non-loopback addresses without `--rpc-allow-remote` and an empty
//! bearer token, exiting before anything listens.
//!
//! The binary: `rtgt_tests::daemon::rtgt_bin`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;

use rtgt_tests::daemon::Daemon;
use std::time::{Duration, Instant};

fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rtgt-exposure-{}-{tag}.sock", std::process::id()))
}

/// Runs `rtgt serve` expecting it to refuse to start: returns its stderr.
fn refused(tag: &str, extra: &[&str]) -> String {
    let sock = sock_path(tag);
    let mut child = Daemon::spawn(&sock, extra);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rtgt serve {extra:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    assert!(
        !status.success(),
        "rtgt serve {extra:?} exited with success"
    );
    assert!(!sock.exists(), "{extra:?}: the socket was left behind");
    assert!(
        !PathBuf::from(format!("{}.lock", sock.display())).exists(),
        "{extra:?}: the lock file was left behind"
    );
    err
}

fn answers(sock: &Path) -> bool {
    let Ok(mut s) = UnixStream::connect(sock) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if s.write_all(br#"{"jsonrpc":"2.0","method":"spdk_get_version","id":1}"#)
        .is_err()
    {
        return false;
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).is_ok() && line.contains("SPDK v")
}

fn stop(mut child: Child, sock: &Path) {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.write_all(br#"{"jsonrpc":"2.0","method":"spdk_kill_instance","params":{"sig_name":"SIGTERM"},"id":1}"#)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "rtgt did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_socket_is_owner_only_unless_configured() {
    for (tag, extra, want) in [
        ("default", &[][..], 0o600),
        ("0660", &["--rpc-socket-mode", "0660"][..], 0o660),
    ] {
        let sock = sock_path(tag);
        let child = Daemon::spawn(&sock, extra);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !answers(&sock) {
            assert!(Instant::now() < deadline, "rtgt serve did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(mode(&sock), want, "{tag}: socket mode");
        assert_eq!(mode(Path::new(&format!("{}.lock", sock.display()))), 0o600);
        stop(child, &sock);
    }
}

#[test]
fn remote_endpoints_need_an_explicit_choice() {
    for (tag, flag) in [("tcp", "--rpc-listen"), ("http", "--http-listen")] {
        for addr in ["0.0.0.0:0", "[::]:0"] {
            let err = refused(tag, &[flag, addr]);
            assert!(err.contains("non-loopback"), "{flag} {addr}: {err}");
        }
    }
}

#[test]
fn an_empty_http_token_is_refused() {
    for token in ["", " "] {
        let err = refused(
            "token",
            &["--http-listen", "127.0.0.1:0", "--http-token", token],
        );
        assert!(err.contains("empty"), "{err}");
    }
    let file = std::env::temp_dir().join(format!("rtgt-exposure-{}-token", std::process::id()));
    std::fs::write(&file, "\n").unwrap();
    let err = refused(
        "tokenfile",
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--http-token-file",
            file.to_str().unwrap(),
        ],
    );
    assert!(err.contains("empty"), "{err}");
    let _ = std::fs::remove_file(&file);
}
