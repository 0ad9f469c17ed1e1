//! `fake-rtgt`: a stand-in for `rtgt serve` used only by the harness self-test
//! (`tests/e2e/selftest.sh --guest`), so that start_rtgt / rtgt_rpc / stop_rtgt are exercised
//! whatever state the real daemon is in. std only, compiled with plain `rustc`.
//!
//! ```text
//! fake-rtgt serve --help
//! fake-rtgt serve -r SOCKET [--exit-early]
//! ```
//!
//! It creates SOCKET and SOCKET.lock, answers JSON-RPC requests one connection at a time
//! (`rpc_get_methods`, `spdk_get_version`; anything else is -32601), and on SIGTERM removes
//! both files and exits 0. `--exit-early` prints a message and exits 3 before listening.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: i32) {
    TERMINATE.store(true, Ordering::SeqCst);
}

unsafe extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

const SIGTERM: i32 = 15;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("serve") {
        eprintln!("usage: fake-rtgt serve -r SOCKET [--exit-early]");
        std::process::exit(2);
    }
    if args.iter().any(|a| a == "--help") {
        println!("Usage: rtgt serve [OPTIONS]   (fake-rtgt for the e2e self-test)");
        return;
    }
    if args.iter().any(|a| a == "--exit-early") {
        eprintln!("fake-rtgt: failing on purpose");
        std::process::exit(3);
    }
    let sock = match args.iter().position(|a| a == "-r") {
        Some(i) if i + 1 < args.len() => args[i + 1].clone(),
        _ => "/var/tmp/spdk.sock".to_string(),
    };
    // SAFETY: installs a handler that only stores to an atomic, which is async-signal-safe.
    unsafe {
        signal(SIGTERM, on_sigterm);
    }
    let lock = format!("{sock}.lock");
    std::fs::write(&lock, b"").expect("create lock file");
    // A socket left by a killed instance is taken over, as rtgt does once it holds the lock.
    if std::fs::symlink_metadata(&sock).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(&sock);
    }
    let listener = UnixListener::bind(&sock).expect("bind socket");
    listener.set_nonblocking(true).expect("nonblocking");
    eprintln!("fake-rtgt: listening on {sock}");
    while !TERMINATE.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => serve(stream),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => eprintln!("fake-rtgt: accept: {e}"),
        }
    }
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(&lock);
    eprintln!("fake-rtgt: terminated");
}

fn serve(mut stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !TERMINATE.load(Ordering::SeqCst) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return,
        }
        while let Some(end) = value_end(&buf) {
            let req = String::from_utf8_lossy(&buf[..end]).to_string();
            buf.drain(..end);
            let resp = answer(&req);
            eprintln!("fake-rtgt: {req} -> {resp}");
            if stream.write_all(format!("{resp}\n").as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// End offset of the first complete JSON object or array in `buf` (leading whitespace allowed).
fn value_end(buf: &[u8]) -> Option<usize> {
    let (mut depth, mut in_str, mut esc, mut started) = (0usize, false, false, false);
    for (i, &b) in buf.iter().enumerate() {
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                started = true;
            }
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 && started {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The raw JSON text of member `key` of a flat request (good enough for the self-test).
fn member<'a>(req: &'a str, key: &str) -> Option<&'a str> {
    let at = req.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = req[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if let Some(s) = rest.strip_prefix('"') {
        s.find('"')? + 2
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

fn answer(req: &str) -> String {
    let id = member(req, "id").unwrap_or("null");
    match member(req, "method") {
        Some("\"rpc_get_methods\"") => {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":["rpc_get_methods","spdk_get_version"]}}"#
            )
        }
        Some("\"spdk_get_version\"") => {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"version":"fake"}}}}"#)
        }
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
        ),
    }
}
