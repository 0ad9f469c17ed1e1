//! The servers: SPDK framing on a Unix socket ([`serve_unix`]) and on TCP ([`serve_tcp`]),
//! and JSON-RPC over HTTP ([`serve_http`], feature `http`). All share one [`MethodTable`]
//! (and so one RPC state) and run on the caller's tokio runtime.
//!
//! Per connection the raw servers read into a buffer capped at the request size limit, let the
//! [`Scanner`](crate::framing::Scanner) find complete values, and handle them one after the
//! other, writing each answer followed by `\n` before reading on. A client that half-closes
//! still gets every answer. A syntax error is answered with `-32700` and the connection is
//! closed; so is a request larger than the cap (`-32600`), without buffering more than the cap.
//!
//! At most `max_connections` connections are served at once. A client over the limit is not
//! left waiting in the listen backlog (SPDK's behaviour, which hangs every later client once
//! the slots are taken): it is accepted, told `-32000 Too many connections` (on HTTP: `503`
//! with that error as the body) and closed. A connection with no request in progress for
//! `idle_timeout` (counted from its opening or its last answer, so a request that trickles in
//! slower than that counts as idle too, and so does a client that does not read its answer)
//! is closed, which frees its slot; a long call in progress (`framework_wait_init`, a pause
//! waiting for I/O) is never cut.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use jsonrpsee::ConnectionId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::dispatch::{Reply, error_response};
use crate::error::{RpcError, codes};
use crate::framing::{Scan, Scanner};
use crate::table::MethodTable;

#[cfg(feature = "http")]
mod http;
mod unix;

#[cfg(feature = "http")]
pub use http::{HttpOptions, serve_http};
pub use unix::{SocketLock, UnixOptions, serve_unix, serve_unix_locked};

/// SPDK's per-connection receive buffer, and so its largest request (256 KiB).
pub const DEFAULT_MAX_REQUEST_SIZE: usize = 256 * 1024;
/// SPDK's connection limit per server (64).
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// SPDK's listen backlog (512).
pub const DEFAULT_BACKLOG: u32 = 512;
/// How long a connection may sit without a request in progress before it is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default address of the TCP endpoint (rpc.py's default port).
pub const DEFAULT_TCP_ADDR: &str = "127.0.0.1:5260";

/// How long a closing connection may keep sending before we hang up (so a client that is
/// still writing an oversized or broken request can read our error instead of a reset).
const DRAIN_TIME: Duration = Duration::from_secs(2);
/// How much a closing connection may send while draining.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;
/// Read size per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// How long a refused connection (over the limit) may take to receive its error, and may keep
/// sending before we hang up.
const REFUSE_TIME: Duration = Duration::from_secs(1);

/// Limits shared by all servers.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more wait in the backlog (SPDK: 64).
    pub max_connections: usize,
    /// Largest request (one JSON value, a batch included) in bytes (SPDK: 256 KiB).
    pub max_request_size: usize,
    /// On shutdown, how long in-flight requests may take before their connections are dropped.
    pub shutdown_grace: Duration,
    /// A connection without a request in progress for this long is closed (`None`: never).
    /// The clock starts when the connection opens and again after each answer.
    pub idle_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_request_size: DEFAULT_MAX_REQUEST_SIZE,
            shutdown_grace: Duration::from_secs(5),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// The error a client over the connection limit receives before its connection is closed.
pub(crate) fn too_many_connections(limit: usize) -> RpcError {
    RpcError::new(
        codes::SERVER_BUSY,
        format!("Too many connections: the server serves at most {limit} at once; try again later"),
    )
}

/// Options of the TCP endpoint (SPDK framing, rpc.py's `-s <ip> -p <port>` mode).
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// Allow a non-loopback address. Off by default: exposing the control plane must be an
    /// explicit choice (and is logged as a warning). There is no authentication on this endpoint.
    pub allow_non_loopback: bool,
    /// Listen backlog.
    pub backlog: u32,
    /// Connection and size limits.
    pub limits: Limits,
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self {
            allow_non_loopback: false,
            backlog: DEFAULT_BACKLOG,
            limits: Limits::default(),
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another process holds the socket's lock file (SPDK's single-instance guard).
    #[error("RPC Unix domain socket path {} in use. Specify another.", path.display())]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// A non-loopback address was given without allowing it.
    #[error(
        "refusing to listen on non-loopback address {addr}: the RPC endpoint controls the whole target; allow remote access explicitly to do this"
    )]
    NonLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// A system call failed.
    #[error("{what} {target}: {source}")]
    Io {
        /// What we were doing.
        what: &'static str,
        /// The path or address involved.
        target: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl ServeError {
    pub(crate) fn io(what: &'static str, target: impl ToString, source: io::Error) -> Self {
        ServeError::Io {
            what,
            target: target.to_string(),
            source,
        }
    }
}

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeAddr {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A TCP address (TCP framing or HTTP).
    Tcp(SocketAddr),
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    accepted: AtomicU64,
    active: AtomicUsize,
    peak_buffer: AtomicUsize,
    oversized: AtomicU64,
    parse_errors: AtomicU64,
    refused: AtomicU64,
    idle_closed: AtomicU64,
}

impl Stats {
    fn note_buffer(&self, len: usize) {
        self.peak_buffer.fetch_max(len, Ordering::Relaxed);
    }
}

/// Counters of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerStats {
    /// Connections accepted so far.
    pub accepted: u64,
    /// Connections being served now.
    pub active: usize,
    /// Largest receive buffer any connection held, in bytes (bounded by the request cap).
    pub peak_request_buffer: usize,
    /// Requests refused for exceeding the size cap.
    pub oversized_requests: u64,
    /// Connections closed after a JSON syntax error.
    pub parse_errors: u64,
    /// Connections refused because `max_connections` were being served.
    pub refused_connections: u64,
    /// Connections closed because they were idle for the idle timeout.
    pub idle_closed: u64,
}

/// A running server. Dropping it stops the server in the background; [`ServerHandle::shutdown`]
/// stops it and waits until it is gone (listener closed, connections finished or dropped after
/// the grace period, socket and lock file removed).
#[derive(Debug)]
pub struct ServerHandle {
    addr: ServeAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
}

impl ServerHandle {
    /// Where the server listens (for TCP with port 0: the actual port).
    pub fn local_addr(&self) -> &ServeAddr {
        &self.addr
    }

    /// A snapshot of the server's counters.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            accepted: self.stats.accepted.load(Ordering::Relaxed),
            active: self.stats.active.load(Ordering::Relaxed),
            peak_request_buffer: self.stats.peak_buffer.load(Ordering::Relaxed),
            oversized_requests: self.stats.oversized.load(Ordering::Relaxed),
            parse_errors: self.stats.parse_errors.load(Ordering::Relaxed),
            refused_connections: self.stats.refused.load(Ordering::Relaxed),
            idle_closed: self.stats.idle_closed.load(Ordering::Relaxed),
        }
    }

    /// Stop accepting and close connections once their current request is answered; wait
    /// for all of it, including the removal of a Unix socket and its lock file.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "RPC server task failed");
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Something that accepts connections.
pub(crate) trait Accept: Send + 'static {
    type Conn: Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Conn, String)>> + Send;
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    async fn accept(&self) -> io::Result<(UnixStream, String)> {
        let (s, _) = UnixListener::accept(self).await?;
        Ok((s, "unix".to_string()))
    }
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    async fn accept(&self) -> io::Result<(TcpStream, String)> {
        let (s, peer) = TcpListener::accept(self).await?;
        let _ = s.set_nodelay(true);
        Ok((s, peer.to_string()))
    }
}

/// What a server task needs to run.
pub(crate) struct Running {
    pub(crate) stop_rx: watch::Receiver<bool>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) limits: Limits,
}

/// Create the stop channel and stats for a new server; returns the handle and the task's part.
pub(crate) fn new_server(addr: ServeAddr, limits: Limits) -> (ServerHandle, Running) {
    let (stop, stop_rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    let handle = ServerHandle {
        addr,
        stop,
        task: None,
        stats: stats.clone(),
    };
    (
        handle,
        Running {
            stop_rx,
            stats,
            limits,
        },
    )
}

impl ServerHandle {
    pub(crate) fn set_task(&mut self, task: JoinHandle<()>) {
        self.task = Some(task);
    }
}

/// Wait until `rx` says stop.
pub(crate) async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

static NEXT_CONN_ID: AtomicUsize = AtomicUsize::new(1);

/// How often at most a burst of refused connections is logged.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Accept connections until told to stop. Each is served with `serve` while fewer than
/// `max_connections` are being served; one over the limit is handed to `refuse` (which tells
/// the client and closes) instead of being left in the backlog. Then let open connections
/// finish within the grace period.
pub(crate) async fn accept_loop<L, F, Fut, R, RFut>(
    listener: L,
    run: Running,
    what: &'static str,
    serve: F,
    refuse: R,
) where
    L: Accept,
    F: Fn(L::Conn, ConnectionId, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
    R: Fn(L::Conn) -> RFut,
    RFut: Future<Output = ()> + Send + 'static,
{
    let max = run.limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    // Refusals in progress are bounded too: past that, a refused connection is just closed.
    let refusal_slots = Arc::new(Semaphore::new(max));
    let mut conns = JoinSet::new();
    let mut refusing = JoinSet::new();
    let mut last_refusal_log: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped(run.stop_rx.clone()) => break,
        };
        while conns.try_join_next().is_some() {}
        while refusing.try_join_next().is_some() {}
        let (conn, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "{what}: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let refused = run.stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if last_refusal_log.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL) {
                last_refusal_log = Some(tokio::time::Instant::now());
                tracing::warn!(
                    %peer,
                    limit = max,
                    refused_so_far = refused,
                    "{what}: connection limit reached; refusing new connections until one closes"
                );
            }
            if let Ok(p) = refusal_slots.clone().try_acquire_owned() {
                let fut = refuse(conn);
                refusing.spawn(async move {
                    let _ = tokio::time::timeout(2 * REFUSE_TIME, fut).await;
                    drop(p);
                });
            }
            continue;
        };
        let id = ConnectionId(NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed));
        tracing::debug!(conn = id.0, %peer, "{what}: connection accepted");
        run.stats.accepted.fetch_add(1, Ordering::Relaxed);
        run.stats.active.fetch_add(1, Ordering::Relaxed);
        let stats = run.stats.clone();
        let fut = serve(conn, id, run.stop_rx.clone());
        conns.spawn(async move {
            fut.await;
            stats.active.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!(conn = id.0, "connection closed");
            drop(permit);
        });
    }
    drop(listener);
    refusing.shutdown().await;
    let grace = run.limits.shutdown_grace;
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all_done).await.is_err() {
        tracing::warn!(
            "{what}: dropping {} connection(s) still busy after {grace:?}",
            conns.len()
        );
        conns.shutdown().await;
    }
}

/// Resolves when a connection idle since `since` has been idle for `idle` (never for `None`).
pub(crate) async fn idle_expired(since: tokio::time::Instant, idle: Option<Duration>) {
    match idle {
        Some(d) => tokio::time::sleep_until(since + d).await,
        None => std::future::pending().await,
    }
}

/// What [`serve_stream`] needs besides the stream.
#[derive(Clone)]
pub(crate) struct StreamCtx {
    pub(crate) table: MethodTable,
    pub(crate) stats: Arc<Stats>,
    pub(crate) max_request: usize,
    pub(crate) idle_timeout: Option<Duration>,
}

impl StreamCtx {
    pub(crate) fn new(table: MethodTable, run: &Running) -> Self {
        Self {
            table,
            stats: run.stats.clone(),
            max_request: run.limits.max_request_size,
            idle_timeout: run.limits.idle_timeout,
        }
    }
}

/// Tell a client over the connection limit so with SPDK framing, and close: the error is sent
/// at once (the client may not send anything), then what the client sends is drained for a
/// moment so that it reads the error rather than a reset.
pub(crate) async fn refuse_stream<S>(mut stream: S, limit: usize, stop_rx: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let text = error_response(None, &too_many_connections(limit));
    close_with(&mut stream, text, &stop_rx, REFUSE_TIME).await;
}

/// Serve one connection with SPDK framing.
pub(crate) async fn serve_stream<S>(
    mut stream: S,
    ctx: StreamCtx,
    conn: ConnectionId,
    stop_rx: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let StreamCtx {
        table,
        stats,
        max_request,
        idle_timeout,
    } = ctx;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK.min(max_request.max(1))];
    let mut scanner = Scanner::new();
    // Idle since the connection opened; the clock restarts after each answer.
    let mut idle_since = tokio::time::Instant::now();
    let closed_idle = |why: &str| {
        stats.idle_closed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(conn = conn.0, timeout = ?idle_timeout, "{why}; closing");
    };
    loop {
        // Answer every complete value in the buffer, in order.
        loop {
            match scanner.next(&buf) {
                Scan::Complete { start, end } => {
                    let reply = table.handle_value(&buf[start..end], conn).await;
                    let result = match reply {
                        Reply::Send(text) => {
                            // A client that does not read its answers is idle too.
                            let send = send_line(&mut stream, text);
                            match idle_timeout {
                                Some(d) => match tokio::time::timeout(d, send).await {
                                    Ok(r) => r,
                                    Err(_) => {
                                        closed_idle("client does not read its answer");
                                        return;
                                    }
                                },
                                None => send.await,
                            }
                        }
                        Reply::Nothing => Ok(()),
                        Reply::Fatal(text) => {
                            stats.parse_errors.fetch_add(1, Ordering::Relaxed);
                            close_with(&mut stream, text, &stop_rx, DRAIN_TIME).await;
                            return;
                        }
                    };
                    if let Err(e) = result {
                        tracing::debug!(conn = conn.0, error = %e, "write failed; closing");
                        return;
                    }
                    idle_since = tokio::time::Instant::now();
                    let stopping = *stop_rx.borrow();
                    if stopping {
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
                Scan::NeedMore => break,
                Scan::Invalid => {
                    tracing::warn!(
                        conn = conn.0,
                        "JSON syntax error on RPC connection; closing it"
                    );
                    stats.parse_errors.fetch_add(1, Ordering::Relaxed);
                    close_with(
                        &mut stream,
                        error_response(None, &RpcError::parse_error()),
                        &stop_rx,
                        DRAIN_TIME,
                    )
                    .await;
                    return;
                }
            }
        }
        let consumed = scanner.consumed();
        buf.drain(..consumed);
        scanner.rebase(consumed);
        if buf.is_empty() && buf.capacity() > 4 * READ_CHUNK {
            buf = Vec::new();
        }
        let room = max_request.saturating_sub(buf.len());
        if room == 0 {
            tracing::warn!(
                conn = conn.0,
                limit = max_request,
                "RPC request exceeds the size limit; closing"
            );
            stats.oversized.fetch_add(1, Ordering::Relaxed);
            let e = RpcError::new(
                codes::INVALID_REQUEST,
                format!("Request too large (limit {max_request} bytes)"),
            );
            close_with(&mut stream, error_response(None, &e), &stop_rx, DRAIN_TIME).await;
            return;
        }
        let want = room.min(chunk.len());
        let n = tokio::select! {
            r = stream.read(&mut chunk[..want]) => match r {
                Ok(n) => Some(n),
                Err(e) => {
                    tracing::debug!(conn = conn.0, error = %e, "read failed; closing");
                    return;
                }
            },
            _ = stopped(stop_rx.clone()) => None,
            _ = idle_expired(idle_since, idle_timeout) => {
                closed_idle(if buf.is_empty() {
                    "RPC connection idle"
                } else {
                    "RPC request incomplete for the idle timeout"
                });
                let _ = stream.shutdown().await;
                return;
            }
        };
        let Some(n) = n else {
            let _ = stream.shutdown().await;
            return;
        };
        if n == 0 {
            if scanner.in_value() {
                tracing::debug!(
                    conn = conn.0,
                    pending = buf.len(),
                    "client closed inside a request"
                );
            }
            let _ = stream.shutdown().await;
            return;
        }
        buf.reserve_exact(n.min(max_request - buf.len()));
        buf.extend_from_slice(&chunk[..n]);
        stats.note_buffer(buf.len());
    }
}

async fn send_line<S: AsyncWrite + Unpin>(stream: &mut S, mut text: String) -> io::Result<()> {
    text.push('\n');
    stream.write_all(text.as_bytes()).await?;
    stream.flush().await
}

/// Send a final error, stop writing, and drain what the client is still sending (bounded in
/// time and bytes) so it can read the error rather than a connection reset.
async fn close_with<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    text: String,
    stop_rx: &watch::Receiver<bool>,
    drain_time: Duration,
) {
    if send_line(stream, text).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    let drain = async {
        while drained < DRAIN_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(drain_time, drain) => {}
        _ = stopped(stop_rx.clone()) => {}
    }
}

/// Bind a TCP listener, refusing non-loopback addresses unless allowed.
pub(crate) fn bind_tcp(
    addr: SocketAddr,
    allow_non_loopback: bool,
    backlog: u32,
    what: &str,
) -> Result<TcpListener, ServeError> {
    if !addr.ip().is_loopback() {
        if !allow_non_loopback {
            return Err(ServeError::NonLoopback { addr });
        }
        tracing::warn!(%addr, "{what} listens on a non-loopback address: anyone who can reach it controls the target");
    }
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| ServeError::io("creating socket for", addr, e))?;
    socket
        .set_reuseaddr(true)
        .map_err(|e| ServeError::io("setting SO_REUSEADDR on", addr, e))?;
    socket
        .bind(addr)
        .map_err(|e| ServeError::io("binding", addr, e))?;
    socket
        .listen(backlog)
        .map_err(|e| ServeError::io("listening on", addr, e))
}

/// Serve the method table with SPDK framing on TCP (rpc.py `-s 127.0.0.1 -p 5260`).
pub async fn serve_tcp(
    table: MethodTable,
    addr: SocketAddr,
    opts: TcpOptions,
) -> Result<ServerHandle, ServeError> {
    let listener = bind_tcp(
        addr,
        opts.allow_non_loopback,
        opts.backlog,
        "JSON-RPC TCP endpoint",
    )?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::io("querying address of", addr, e))?;
    let (mut handle, run) = new_server(ServeAddr::Tcp(local), opts.limits);
    let ctx = StreamCtx::new(table, &run);
    let (limit, stop) = (run.limits.max_connections, run.stop_rx.clone());
    tracing::info!(addr = %local, "JSON-RPC server listening on TCP");
    let task = tokio::spawn(accept_loop(
        listener,
        run,
        "JSON-RPC TCP",
        move |stream, conn, stop| serve_stream(stream, ctx.clone(), conn, stop),
        move |stream| refuse_stream(stream, limit, stop.clone()),
    ));
    handle.set_task(task);
    Ok(handle)
}
