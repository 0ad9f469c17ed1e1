//! JSON-RPC over HTTP/1.1 (`--http-listen 127.0.0.1:PORT`), for tools that speak HTTP rather
//! than rpc.py's raw stream.
//!
//! `POST` a JSON-RPC request (or batch) as the body; the answer is the body of a `200`
//! (`application/json`), or `204 No Content` when there is nothing to answer (notifications).
//! The request is handled by the same dispatcher as the socket, so envelope rules, batches,
//! state masks and error codes are SPDK's here too. With a token configured, requests without
//! `Authorization: Bearer <token>` get `401` before their body is read. Bodies over the size
//! cap get `413`; other methods `405`. A client over the connection limit gets `503` (with the
//! JSON-RPC error `-32000 Too many connections` as the body) and a closed connection; a
//! keep-alive connection with no request in progress for the idle timeout is closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use jsonrpsee::ConnectionId;

use super::{
    Limits, REFUSE_TIME, ServeAddr, ServeError, ServerHandle, accept_loop, bind_tcp, idle_expired,
    new_server, stopped, too_many_connections,
};
use crate::dispatch::{Reply, error_response};
use crate::error::RpcError;
use crate::framing::{Scan, Scanner};
use crate::table::MethodTable;

/// Options of the HTTP endpoint.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// Require `Authorization: Bearer <token>` on every request.
    pub token: Option<String>,
    /// Allow a non-loopback address (an explicit choice, logged as a warning).
    pub allow_non_loopback: bool,
    /// Connection and size limits.
    pub limits: Limits,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("allow_non_loopback", &self.allow_non_loopback)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Without an idle timeout, slow header senders are dropped after this long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether an HTTP connection has a request in progress, and when it last answered.
struct Activity {
    opened: tokio::time::Instant,
    busy: AtomicUsize,
    /// Milliseconds from `opened` to the last answer.
    last_answer_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: tokio::time::Instant::now(),
            busy: AtomicUsize::new(0),
            last_answer_ms: AtomicU64::new(0),
        }
    }

    fn answered(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_answer_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the connection has been idle for at least `d`.
    fn idle_for(&self, d: Duration) -> bool {
        self.idle_since()
            .is_some_and(|s| s + d <= tokio::time::Instant::now())
    }

    /// Since when the connection is idle (`None` while a call is being handled).
    fn idle_since(&self) -> Option<tokio::time::Instant> {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return None;
        }
        Some(self.opened + Duration::from_millis(self.last_answer_ms.load(Ordering::Relaxed)))
    }
}

/// Marks a call in progress until dropped.
struct Busy<'a>(&'a Activity);

impl<'a> Busy<'a> {
    fn new(a: &'a Activity) -> Self {
        a.busy.fetch_add(1, Ordering::Relaxed);
        Busy(a)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

struct HttpCtx {
    table: MethodTable,
    /// The full expected header value, `Bearer <token>`.
    expected_auth: Option<Vec<u8>>,
    max_body: usize,
}

/// Serve the method table as JSON-RPC over HTTP on `addr`.
pub async fn serve_http(
    table: MethodTable,
    addr: SocketAddr,
    opts: HttpOptions,
) -> Result<ServerHandle, ServeError> {
    if opts.token.as_ref().is_some_and(|t| t.trim().is_empty()) {
        return Err(ServeError::io(
            "checking the bearer token of",
            addr,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "the token is empty"),
        ));
    }
    let listener = bind_tcp(
        addr,
        opts.allow_non_loopback,
        super::DEFAULT_BACKLOG,
        "JSON-RPC HTTP endpoint",
    )?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::io("querying address of", addr, e))?;
    if opts.token.is_none() && !local.ip().is_loopback() {
        tracing::warn!(addr = %local, "JSON-RPC HTTP endpoint on a non-loopback address without a token");
    }
    let ctx = Arc::new(HttpCtx {
        table,
        expected_auth: opts
            .token
            .as_ref()
            .map(|t| format!("Bearer {t}").into_bytes()),
        max_body: opts.limits.max_request_size,
    });
    let (mut handle, run) = new_server(ServeAddr::Tcp(local), opts.limits);
    let (limit, idle, stats) = (
        run.limits.max_connections,
        run.limits.idle_timeout,
        run.stats.clone(),
    );
    tracing::info!(addr = %local, token = opts.token.is_some(), "JSON-RPC server listening on HTTP");
    let task = tokio::spawn(accept_loop(
        listener,
        run,
        "JSON-RPC HTTP",
        move |stream, conn, stop| {
            let ctx = ctx.clone();
            let stats = stats.clone();
            async move {
                let activity = Arc::new(Activity::new());
                let act = activity.clone();
                let service = service_fn(move |req| {
                    let (ctx, act) = (ctx.clone(), act.clone());
                    async move {
                        let r = handle_request(&ctx, req, conn, &act).await;
                        act.answered();
                        Ok::<_, Infallible>(r)
                    }
                });
                // With an idle timeout, the watchdog below closes slow header senders too (no
                // answer yet means idle); hyper's own timer stays out of its way.
                let header_timeout = idle.map_or(HEADER_TIMEOUT, |d| {
                    HEADER_TIMEOUT.max(d + Duration::from_secs(1))
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::pin!(connection);
                loop {
                    // While a call is in progress, look again after a timeout's worth.
                    let since = activity
                        .idle_since()
                        .unwrap_or_else(tokio::time::Instant::now);
                    tokio::select! {
                        r = connection.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!(conn = conn.0, error = %e, "HTTP connection ended with an error");
                            }
                            break;
                        }
                        _ = stopped(stop.clone()) => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                            break;
                        }
                        _ = idle_expired(since, idle) => {
                            if idle.is_some_and(|d| activity.idle_for(d)) {
                                stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!(conn = conn.0, timeout = ?idle, "HTTP connection idle; closing");
                                break;
                            }
                        }
                    }
                }
            }
        },
        move |stream| refuse_http(stream, limit),
    ));
    handle.set_task(task);
    Ok(handle)
}

/// Answer a client over the connection limit with `503` and close.
async fn refuse_http(stream: tokio::net::TcpStream, limit: usize) {
    let service = service_fn(move |_req: Request<Incoming>| async move {
        let mut r = json(error_response(None, &too_many_connections(limit)));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        Ok::<_, Infallible>(r)
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSE_TIME)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "refused HTTP connection ended with an error");
    }
}

/// Compare without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(ctx: &HttpCtx, req: &Request<Incoming>) -> bool {
    let Some(expected) = &ctx.expected_auth else {
        return true;
    };
    let Some(got) = req.headers().get(AUTHORIZATION) else {
        return false;
    };
    let got = got.as_bytes();
    // The scheme name is case-insensitive (RFC 9110); the token is compared exactly.
    let scheme_ok = got.len() >= 7 && got[..7].eq_ignore_ascii_case(b"bearer ");
    scheme_ok && constant_time_eq(&got[7..], &expected[7..])
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json(text: String) -> Response<Full<Bytes>> {
    let mut body = text.into_bytes();
    body.push(b'\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn handle_request(
    ctx: &HttpCtx,
    req: Request<Incoming>,
    conn: ConnectionId,
    activity: &Activity,
) -> Response<Full<Bytes>> {
    if !authorized(ctx, &req) {
        tracing::warn!(
            conn = conn.0,
            "HTTP JSON-RPC request without a valid bearer token"
        );
        let mut r = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"rtgt\""),
        );
        return r;
    }
    if req.method() != Method::POST {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "Use POST\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let body = match Limited::new(req.into_body(), ctx.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                tracing::warn!(
                    conn = conn.0,
                    limit = ctx.max_body,
                    "HTTP JSON-RPC body too large"
                );
                return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request too large\n");
            }
            tracing::debug!(conn = conn.0, error = %e, "reading HTTP body failed");
            return plain(StatusCode::BAD_REQUEST, "Bad request body\n");
        }
    };
    // The body must be exactly one JSON value (surrounded by whitespace at most).
    let mut scanner = Scanner::new();
    let value = match scanner.next(&body) {
        Scan::Complete { start, end } => {
            let rest_ok = scanner.next(&body) == Scan::NeedMore && !scanner.in_value();
            if rest_ok { Some((start, end)) } else { None }
        }
        _ => None,
    };
    let Some((start, end)) = value else {
        return json(error_response(None, &RpcError::parse_error()));
    };
    let busy = Busy::new(activity);
    let reply = ctx.table.handle_value(&body[start..end], conn).await;
    drop(busy);
    match reply {
        Reply::Send(text) | Reply::Fatal(text) => json(text),
        Reply::Nothing => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
