//! JSON-RPC over HTTP/1.1 (`--http-listen 127.0.0.1:PORT`), for tools that speak HTTP rather
//! than rpc.py's raw stream.
//!
//! `POST` a JSON-RPC request (or batch) as the body; the answer is the body of a `200`
//! (`application/json`), or `204 No Content` when there is nothing to answer (notifications).
//! The request is handled by the same dispatcher as the socket, so envelope rules, batches,
//! state masks and error codes are SPDK's here too. With a token configured, requests without
//! `Authorization: Bearer <token>` get `401` before their body is read. Bodies over the size
//! cap get `413`; other methods `405`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use jsonrpsee::ConnectionId;

use super::{
    Limits, ListenAddr, ServeError, ServerHandle, accept_loop, bind_tcp, new_server, stopped,
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

/// Idle keep-alive connections and slow header senders are dropped after this long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

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
    let (mut handle, run) = new_server(ListenAddr::Tcp(local), opts.limits);
    tracing::info!(addr = %local, token = opts.token.is_some(), "JSON-RPC server listening on HTTP");
    let task = tokio::spawn(accept_loop(
        listener,
        run,
        "JSON-RPC HTTP",
        move |stream, conn, stop| {
            let ctx = ctx.clone();
            async move {
                let service = service_fn(move |req| {
                    let ctx = ctx.clone();
                    async move { Ok::<_, Infallible>(handle_request(&ctx, req, conn).await) }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::pin!(connection);
                tokio::select! {
                    r = connection.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(conn = conn.0, error = %e, "HTTP connection ended with an error");
                        }
                    }
                    _ = stopped(stop) => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
            }
        },
    ));
    handle.set_task(task);
    Ok(handle)
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
    match ctx.table.handle_value(&body[start..end], conn).await {
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
