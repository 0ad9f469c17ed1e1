//! A blocking JSON-RPC 2.0 client with SPDK's framing, over a Unix socket or TCP.
//!
//! The wire format is rpc.py's: a request is one JSON object (`jsonrpc`, `method`, `id`, and
//! `params` only when there are parameters), with no delimiter; the answer is decoded as a
//! stream, so a response split over many reads or followed by other bytes is fine
//! ([`rpc::framing::Scanner`] finds where each value ends). Ids count up from 1 per connection.
//!
//! Each call has a deadline (`timeout`, rpc.py's `-t`, default 60 s); a connection closed
//! before the answer is complete is an error, except after `spdk_kill_instance`, whose target
//! may exit before answering (rpc.py tolerates that too).
//!
//! ```no_run
//! use std::time::Duration;
//! use rtgt::client::{Client, Endpoint};
//!
//! let ep = Endpoint::parse("/var/tmp/spdk.sock", 5260);
//! let mut c = Client::connect(&ep, Duration::from_secs(60), 0)?;
//! let subsystems = c.call("nvmf_get_subsystems", None)?;
//! # Ok::<(), rtgt::client::ClientError>(())
//! ```

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rpc::framing::{Scan, Scanner};
use serde_json::{Map, Value};

/// rpc.py's default socket.
pub const DEFAULT_SOCKET: &str = "/var/tmp/spdk.sock";
/// rpc.py's default TCP port (used when the server address is an IP address).
pub const DEFAULT_PORT: u16 = 5260;
/// Largest answer accepted (SPDK's own limit on what it sends is 32 MiB).
pub const MAX_RESPONSE: usize = 64 << 20;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix stream socket.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl Endpoint {
    /// rpc.py's rule for `-s ADDR [-p PORT]`: an IPv4 or IPv6 literal is a TCP address on
    /// `port`; anything else is the path of a Unix socket.
    pub fn parse(server: &str, port: u16) -> Endpoint {
        match server.parse::<IpAddr>() {
            Ok(ip) => Endpoint::Tcp(SocketAddr::new(ip, port)),
            Err(_) => Endpoint::Unix(PathBuf::from(server)),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The server could not be reached.
    Connect {
        /// Where we tried.
        endpoint: Endpoint,
        /// Why it failed.
        source: io::Error,
    },
    /// Reading or writing the connection failed.
    Io(io::Error),
    /// No complete answer before the deadline.
    Timeout,
    /// The server closed the connection before the answer was complete.
    Closed,
    /// The answer is not JSON-RPC, or is not the answer to our request.
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    Rpc {
        /// The error code (`-32602`, a negative errno, ...).
        code: i64,
        /// The server's message.
        message: String,
    },
}

impl ClientError {
    /// The JSON-RPC error code, when the server answered with an error.
    pub fn code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { endpoint, source } => {
                write!(f, "cannot connect to {endpoint}: {source}")?;
                if matches!(
                    source.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) {
                    write!(f, " (is `rtgt serve` running there?)")?;
                }
                Ok(())
            }
            ClientError::Io(e) => write!(f, "connection error: {e}"),
            ClientError::Timeout => write!(f, "timeout while waiting for the response"),
            ClientError::Closed => write!(f, "connection closed with a partial response"),
            ClientError::Protocol(m) => write!(f, "bad response: {m}"),
            ClientError::Rpc { code, message } => write!(f, "error {code}: {message}"),
        }
    }
}

impl std::error::Error for ClientError {}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        // A zero duration means "block forever" to the OS; never pass it.
        let t = Some(t.max(Duration::from_millis(1)));
        match self {
            Stream::Unix(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
            Stream::Tcp(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

/// The JSON-RPC request rpc.py sends: `jsonrpc`, `method`, `id`, and `params` only when given.
pub fn request(id: u64, method: &str, params: Option<&Value>) -> Value {
    let mut req = Map::new();
    req.insert("jsonrpc".into(), Value::from("2.0"));
    req.insert("method".into(), Value::from(method));
    req.insert("id".into(), Value::from(id));
    if let Some(p) = params {
        req.insert("params".into(), p.clone());
    }
    Value::Object(req)
}

/// One element of a batch answer: the result, or the server's `(code, message)`.
pub type BatchItem = Result<Value, (i64, String)>;

/// A connection to a JSON-RPC server.
pub struct Client {
    stream: Stream,
    endpoint: Endpoint,
    timeout: Duration,
    buf: Vec<u8>,
    scanner: Scanner,
    next_id: u64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects, trying `retries` more times 0.2 s apart (rpc.py's `-r`). `timeout` bounds
    /// connecting and each call.
    pub fn connect(
        endpoint: &Endpoint,
        timeout: Duration,
        retries: u32,
    ) -> Result<Client, ClientError> {
        let mut attempt = 0;
        loop {
            let r = match endpoint {
                Endpoint::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
                Endpoint::Tcp(a) => TcpStream::connect_timeout(a, timeout).map(|s| {
                    let _ = s.set_nodelay(true);
                    Stream::Tcp(s)
                }),
            };
            match r {
                Ok(stream) => {
                    return Ok(Client {
                        stream,
                        endpoint: endpoint.clone(),
                        timeout,
                        buf: Vec::new(),
                        scanner: Scanner::new(),
                        next_id: 1,
                    });
                }
                Err(e) if attempt >= retries => {
                    return Err(ClientError::Connect {
                        endpoint: endpoint.clone(),
                        source: e,
                    });
                }
                Err(_) => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Where this client is connected.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The id the next request gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Calls `method`; `params` is sent as given (`None` omits the member). Returns the
    /// `result`, or [`ClientError::Rpc`] for an error answer.
    pub fn call(&mut self, method: &str, params: Option<&Value>) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let deadline = Instant::now() + self.timeout;
        self.send(&request(id, method, params), deadline)?;
        let answer = match self.recv(deadline) {
            Err(ClientError::Closed) if method == "spdk_kill_instance" => return Ok(Value::Null),
            r => r?,
        };
        let obj = answer
            .as_object()
            .ok_or_else(|| ClientError::Protocol(format!("not an object: {answer}")))?;
        if obj.get("id") != Some(&Value::from(id)) && !obj.contains_key("error") {
            return Err(ClientError::Protocol(format!(
                "answer to request {id} has id {}",
                obj.get("id").unwrap_or(&Value::Null)
            )));
        }
        decode_answer(obj).map_err(|(code, message)| ClientError::Rpc { code, message })
    }

    /// Sends `calls` as one JSON-RPC batch and returns one item per call, in call order.
    pub fn call_batch(
        &mut self,
        calls: &[(String, Option<Value>)],
    ) -> Result<Vec<BatchItem>, ClientError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.next_id;
        let reqs: Vec<Value> = calls
            .iter()
            .map(|(m, p)| {
                let id = self.next_id;
                self.next_id += 1;
                request(id, m, p.as_ref())
            })
            .collect();
        let deadline = Instant::now() + self.timeout;
        self.send(&Value::Array(reqs), deadline)?;
        let answer = self.recv(deadline)?;
        let Value::Array(items) = answer else {
            // A single error object answers a batch the server refused as a whole.
            if let Some(obj) = answer.as_object() {
                let (code, message) = decode_answer(obj)
                    .err()
                    .unwrap_or((0, format!("unexpected answer {answer}")));
                return Err(ClientError::Rpc { code, message });
            }
            return Err(ClientError::Protocol(format!(
                "batch answer is not an array: {answer}"
            )));
        };
        let mut out: Vec<Option<BatchItem>> = vec![None; calls.len()];
        for item in items {
            let obj = item
                .as_object()
                .ok_or_else(|| ClientError::Protocol(format!("batch element {item}")))?;
            let idx = obj
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| id.checked_sub(first))
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < calls.len())
                .ok_or_else(|| {
                    ClientError::Protocol(format!("batch element with unknown id: {item}"))
                })?;
            out[idx] = Some(decode_answer(obj));
        }
        out.into_iter()
            .enumerate()
            .map(|(i, o)| {
                o.ok_or_else(|| {
                    ClientError::Protocol(format!("no answer to batch element {}", i + 1))
                })
            })
            .collect()
    }

    fn send(&mut self, req: &Value, deadline: Instant) -> Result<(), ClientError> {
        self.stream
            .set_timeouts(remaining(deadline)?)
            .map_err(ClientError::Io)?;
        let bytes = serde_json::to_vec(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.stream.write_all(&bytes).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
            _ => ClientError::Io(e),
        })
    }

    /// Reads until one complete JSON value is buffered and returns it; bytes after it stay
    /// buffered for the next call.
    fn recv(&mut self, deadline: Instant) -> Result<Value, ClientError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.scanner.next(&self.buf) {
                Scan::Complete { start, end } => {
                    let v = serde_json::from_slice(&self.buf[start..end])
                        .map_err(|e| ClientError::Protocol(e.to_string()))?;
                    self.buf.drain(..end);
                    self.scanner = Scanner::new();
                    return Ok(v);
                }
                Scan::Invalid => {
                    let text = String::from_utf8_lossy(&self.buf);
                    return Err(ClientError::Protocol(format!(
                        "not JSON: {}",
                        text.chars().take(200).collect::<String>()
                    )));
                }
                Scan::NeedMore => {}
            }
            if self.buf.len() > MAX_RESPONSE {
                return Err(ClientError::Protocol(format!(
                    "response larger than {MAX_RESPONSE} bytes"
                )));
            }
            self.stream
                .set_timeouts(remaining(deadline)?)
                .map_err(ClientError::Io)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ClientError::Timeout);
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ClientError::Closed);
                }
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
    }
}

fn remaining(deadline: Instant) -> Result<Duration, ClientError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ClientError::Timeout)
    } else {
        Ok(left)
    }
}

/// `result`, or `(code, message)` of `error`.
fn decode_answer(obj: &Map<String, Value>) -> Result<Value, (i64, String)> {
    if let Some(e) = obj.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string());
        return Err((code, message));
    }
    Ok(obj.get("result").cloned().unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;

    #[test]
    fn endpoints_follow_rpc_py() {
        assert_eq!(
            Endpoint::parse("/var/tmp/spdk.sock", 5260),
            Endpoint::Unix("/var/tmp/spdk.sock".into())
        );
        assert_eq!(
            Endpoint::parse("127.0.0.1", 5261),
            Endpoint::Tcp("127.0.0.1:5261".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse("::1", 5260),
            Endpoint::Tcp("[::1]:5260".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse("spdk.sock", 1),
            Endpoint::Unix("spdk.sock".into())
        );
    }

    #[test]
    fn requests_omit_absent_params() {
        assert_eq!(
            serde_json::to_string(&request(1, "bdev_get_bdevs", None)).unwrap(),
            r#"{"jsonrpc":"2.0","method":"bdev_get_bdevs","id":1}"#
        );
        assert_eq!(
            request(2, "x", Some(&json!({"a": 1})))["params"],
            json!({"a": 1})
        );
    }

    /// A server that answers in fragments, with two answers in one write, and with an error.
    #[test]
    fn answers_are_decoded_as_a_stream() {
        let dir = std::env::temp_dir().join(format!("rtgt-client-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut r = std::io::BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            // The client sends compact JSON without a newline: read byte-wise up to the end
            // of the first object, answer it in three fragments.
            let mut one = Vec::new();
            let mut sc = Scanner::new();
            loop {
                let b = r.fill_buf().unwrap();
                assert!(!b.is_empty());
                one.push(b[0]);
                r.consume(1);
                if let Scan::Complete { .. } = sc.next(&one) {
                    break;
                }
            }
            let req: Value = serde_json::from_slice(&one).unwrap();
            assert_eq!(req["method"], "m1");
            for part in [
                &b"{\"jsonrpc\":\"2.0\",\"id\""[..],
                b":1,\"res",
                b"ult\":[1,2]}\n",
            ] {
                w.write_all(part).unwrap();
                w.flush().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            // Answer to call 2 followed at once by the error answer to call 3.
            w.write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":true}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32602,\"message\":\"Invalid parameters\"}}\n",
            )
            .unwrap();
            // Keep the connection open until the client is done.
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest);
        });
        let ep = Endpoint::Unix(path.clone());
        let mut c = Client::connect(&ep, Duration::from_secs(5), 0).unwrap();
        assert_eq!(c.call("m1", None).unwrap(), json!([1, 2]));
        assert_eq!(c.call("m2", None).unwrap(), json!(true));
        match c.call("m3", Some(&json!({"x": 1}))) {
            Err(ClientError::Rpc { code, message }) => {
                assert_eq!(code, -32602);
                assert_eq!(message, "Invalid parameters");
            }
            other => panic!("{other:?}"),
        }
        drop(c);
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_silent_server_times_out_and_a_missing_one_is_named() {
        let dir = std::env::temp_dir().join(format!("rtgt-client-t-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("quiet.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let ep = Endpoint::Unix(path.clone());
        let mut c = Client::connect(&ep, Duration::from_millis(150), 0).unwrap();
        let t = Instant::now();
        assert!(matches!(c.call("x", None), Err(ClientError::Timeout)));
        assert!(t.elapsed() < Duration::from_secs(2));
        drop(listener);
        let _ = std::fs::remove_file(&path);
        let e = Client::connect(&ep, Duration::from_secs(1), 0).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("cannot connect to") && text.contains("quiet.sock"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
