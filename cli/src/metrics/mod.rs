//! `rtgt serve --metrics [ADDR:]PORT`: Prometheus metrics on `/metrics` and a health check on
//! `/healthz`, over HTTP/1.1. Off by default; a bare port listens on loopback. The endpoint
//! only reads (it controls nothing), so a non-loopback address is allowed, with a log line.
//!
//! A scrape gathers what the RPC methods report (through the method table, in process) and
//! the bdev layer's counters and histograms; nothing is computed on the data path for it.

mod exposition;
mod render;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rpc::methods::TargetContext;
use rpc::{MethodTable, RpcState};
use serde_json::{Value, json};
use target_core::bdev::HistKind;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use render::{BdevMetrics, Inputs, render};

/// Parses `--metrics`: `PORT` (loopback) or `ADDR:PORT`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse().map_err(|_| {
        format!("'{s}' is neither a port nor ADDR:PORT (e.g. 9465, 127.0.0.1:9465, [::1]:9465)")
    })
}

/// Connections served at once; more wait in the accept queue.
const MAX_CONNECTIONS: usize = 16;

/// Binds `addr` and serves until the returned task is aborted.
pub async fn serve(
    addr: SocketAddr,
    table: MethodTable,
    ctx: Arc<TargetContext>,
) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--metrics {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            "metrics on a non-loopback address {local}: anyone who reaches it reads them"
        );
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        loop {
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("metrics: accept failed: {e}");
                    continue;
                }
            };
            let (table, ctx) = (table.clone(), Arc::clone(&ctx));
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let (table, ctx) = (table.clone(), Arc::clone(&ctx));
                    async move { Ok::<_, Infallible>(respond(req, &table, &ctx).await) }
                });
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%peer, "metrics connection ended with an error: {e}");
                }
                drop(permit);
            });
        }
    });
    tracing::info!("metrics on http://{local}/metrics");
    Ok((local, task))
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

async fn respond(
    req: Request<Incoming>,
    table: &MethodTable,
    ctx: &TargetContext,
) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            render(&gather(table, ctx).await),
        ),
        "/healthz" => match table.state().get() {
            RpcState::Runtime => text(StatusCode::OK, PLAIN, "ok\n".into()),
            RpcState::Startup => text(
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN,
                "starting: waiting for framework_start_init\n".into(),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "/metrics or /healthz\n".into(),
        ),
    }
}

async fn call(table: &MethodTable, method: &str, params: Option<Value>) -> Option<Value> {
    let text = params.map(|p| p.to_string());
    match table.call(method, text.as_deref()).await {
        Ok(raw) => serde_json::from_str(raw.get()).ok(),
        Err(e) => {
            tracing::debug!("metrics: {method}: {e:?}");
            None
        }
    }
}

/// Everything a scrape shows.
async fn gather(table: &MethodTable, ctx: &TargetContext) -> Inputs {
    let mut inp = Inputs::default();
    if table.state().get() != RpcState::Runtime {
        return inp;
    }
    inp.reactors = call(table, "framework_get_reactors", None).await;
    inp.nvmf_stats = call(table, "nvmf_get_stats", None).await;
    inp.subsystems = call(table, "nvmf_get_subsystems", None).await;
    let nqns: Vec<String> = inp
        .subsystems
        .iter()
        .flat_map(|s| s.as_array().into_iter().flatten())
        .filter(|s| s["subtype"] != "Discovery")
        .filter_map(|s| s["nqn"].as_str().map(str::to_owned))
        .collect();
    for nqn in nqns {
        if let Some(c) = call(
            table,
            "nvmf_subsystem_get_controllers",
            Some(json!({"nqn": nqn})),
        )
        .await
        {
            inp.controllers.push((nqn, c));
        }
    }
    let bdevs = ctx.target().bdevs();
    for name in bdevs.names() {
        let Some(stats) = bdevs.iostat(&name) else {
            continue;
        };
        let hist = HistKind::ALL
            .into_iter()
            .filter_map(|k| bdevs.histogram(&name, k).map(|h| (k, h)))
            .collect();
        inp.bdevs.push(BdevMetrics { name, stats, hist });
    }
    inp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            parse_addr("9465").unwrap(),
            "127.0.0.1:9465".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
        assert!(parse_addr("localhost").is_err());
    }
}
