//! `e2e-rpc`: a tiny JSON-RPC 2.0 client for SPDK-framed Unix sockets, shipped in the e2e guest.
//!
//! It is deliberately independent of the `rtgt` CLI so that scenarios can drive the daemon with
//! raw parameters whatever state the CLI is in. It is compiled by `tests/e2e/build-guest.sh`
//! with plain `rustc` (std only, no crate, not part of the workspace).
//!
//! ```text
//! e2e-rpc [-s SOCKET] [-t SECONDS] METHOD [PARAMS_JSON]
//! e2e-rpc [-s SOCKET] [-t SECONDS] --raw REQUEST_JSON
//! ```
//!
//! It sends one request (id 1), reads exactly one JSON value back (SPDK framing: concatenated
//! JSON values, each response followed by `\n`), prints that value on stdout and exits with
//! 0 when the response has a `result` member, 1 when it has an `error` member (or is not a
//! JSON-RPC response at all), and 2 on usage, connection, framing or timeout problems
//! (with a message on stderr).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: e2e-rpc [-s SOCKET] [-t SECONDS] METHOD [PARAMS_JSON]\n       \
                     e2e-rpc [-s SOCKET] [-t SECONDS] --raw REQUEST_JSON";

/// Largest response accepted; bigger ones are a framing problem worth reporting.
const MAX_RESPONSE: usize = 64 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("e2e-rpc: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<u8, String> {
    let mut socket = String::from("/var/tmp/spdk.sock");
    let mut timeout = 60.0f64;
    let mut raw = false;
    let mut positional = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-s" | "--socket" => socket = args.next().ok_or(USAGE)?,
            "-t" | "--timeout" => {
                let v = args.next().ok_or(USAGE)?;
                timeout = v.parse().map_err(|_| format!("bad timeout '{v}'"))?;
            }
            "--raw" => raw = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(0);
            }
            _ => positional.push(arg),
        }
    }
    let request = match (raw, positional.as_slice()) {
        (true, [req]) => req.clone(),
        (false, [method]) => format!(r#"{{"jsonrpc":"2.0","id":1,"method":{}}}"#, quote(method)),
        (false, [method, params]) => format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":{},"params":{}}}"#,
            quote(method),
            params
        ),
        _ => return Err(USAGE.to_string()),
    };

    let deadline = Instant::now() + Duration::from_secs_f64(timeout);
    let mut stream =
        UnixStream::connect(&socket).map_err(|e| format!("cannot connect to {socket}: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write to {socket}: {e}"))?;

    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut scan = Scanner::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no complete response within {timeout}s"));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "connection closed after {} bytes without a complete response",
                    buf.len()
                ))
            }
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!("no complete response within {timeout}s"))
            }
            Err(e) => return Err(format!("read from {socket}: {e}")),
        };
        let start = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = scan.feed(&buf, start)? {
            let value = String::from_utf8_lossy(&buf[scan.begin..end]);
            println!("{value}");
            return Ok(if scan.has_result && !scan.has_error {
                0
            } else {
                1
            });
        }
        if buf.len() > MAX_RESPONSE {
            return Err(format!("response larger than {MAX_RESPONSE} bytes"));
        }
    }
}

/// JSON string literal for `s`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Incremental scanner that finds the end of the first JSON value and notes which members
/// its top-level object has. It checks structure only as far as framing needs.
#[derive(Default)]
struct Scanner {
    pos: usize,
    begin: usize,
    started: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    /// Collecting a member name at depth 1 (a string that directly follows `{` or `,`).
    expect_key: bool,
    key: Option<Vec<u8>>,
    has_result: bool,
    has_error: bool,
}

impl Scanner {
    /// Scans `buf[from..]`; returns the end offset of the first complete value once seen.
    fn feed(&mut self, buf: &[u8], from: usize) -> Result<Option<usize>, String> {
        debug_assert_eq!(self.pos, from);
        while self.pos < buf.len() {
            let b = buf[self.pos];
            self.pos += 1;
            if !self.started {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => continue,
                    b'{' | b'[' => {
                        self.started = true;
                        self.begin = self.pos - 1;
                        self.depth = 1;
                        self.expect_key = b == b'{';
                        continue;
                    }
                    _ => {
                        return Err(format!(
                            "response does not start with an object: byte {b:#04x}"
                        ))
                    }
                }
            }
            if self.in_string {
                if let Some(k) = self.key.as_mut() {
                    k.push(b);
                }
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if let Some(mut k) = self.key.take() {
                        k.pop();
                        match k.as_slice() {
                            b"result" => self.has_result = true,
                            b"error" => self.has_error = true,
                            _ => {}
                        }
                    }
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expect_key {
                        self.key = Some(Vec::new());
                    }
                    self.expect_key = false;
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.expect_key = false;
                }
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Ok(Some(self.pos));
                    }
                }
                b',' => self.expect_key = self.depth == 1,
                _ => {}
            }
        }
        Ok(None)
    }
}
