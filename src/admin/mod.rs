//! The admin HTTP listener (HTTPS with `admin.tls`): health probes, Prometheus metrics, the groups API and a page to look
//! at, on a thread of its own so a scrape never competes with Kafka clients for a shard.
//!
//! - `GET /health/live`: 200 while the process runs.
//! - `GET /health/ready`: 200 once every shard has opened its partitions and accepts clients;
//!   503 before that and while shutting down.
//! - `GET /metrics`: Prometheus text format, with the per-group, Raft and mesh series computed at
//!   the scrape (`group_metrics.rs`, `raft_metrics.rs`).
//! - `GET /v1/groups`, `GET /v1/groups/{id}`: JSON (`groups.rs`).
//! - `GET /`: the groups page (`page.html`), which reads the groups API.
//!
//! With `admin.bearer_token_file`, every request but the health probes and the page (which holds
//! no data) must carry `Authorization: Bearer <token>`; without it the answer is 401. The page
//! asks for the token then, and sends it with its reads of the groups API.

pub(crate) mod client;
mod group_metrics;
mod groups;
mod raft_metrics;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::node::Node;

/// The groups page: plain HTML and a little JavaScript, no build step.
const PAGE: &str = include_str!("page.html");

/// How long a client of the HTTPS admin listener may take over its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often histogram buckets are drained when nobody scrapes, to bound their memory.
const UPKEEP: Duration = Duration::from_secs(5);

pub(crate) fn start(
    node: Arc<Node>,
    listener: std::net::TcpListener,
    metrics: Option<PrometheusHandle>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("admin".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "admin listener cannot start");
                return;
            }
        };
        runtime.block_on(serve(node, listener, metrics));
    })
}

async fn serve(node: Arc<Node>, listener: std::net::TcpListener, metrics: Option<PrometheusHandle>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "admin listener cannot start");
            return;
        }
    };
    let mut upkeep = tokio::time::interval(UPKEEP);
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = upkeep.tick() => if let Some(m) = &metrics { m.run_upkeep() },
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let node = node.clone();
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let tls = node.admin_tls.as_ref().map(|t| t.acceptor.clone());
                    let service = service_fn(move |req| route(req, node.clone(), metrics.clone()));
                    let http = http1::Builder::new();
                    match tls {
                        None => drop(http.serve_connection(TokioIo::new(stream), service).await),
                        Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => drop(http.serve_connection(TokioIo::new(stream), service).await),
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "admin: TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "admin: TLS handshake timed out"),
                        },
                    }
                });
            }
        }
    }
}

async fn route(req: Request<Incoming>, node: Arc<Node>, metrics: Option<PrometheusHandle>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, content_type: &'static str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
        Ok(response)
    };
    const TEXT: &str = "text/plain; charset=utf-8";
    const JSON: &str = "application/json";
    if req.method() != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET is served\n".into());
    }
    let scope = match req.uri().query() {
        Some(q) if q.split('&').any(|kv| kv == "scope=local") => groups::Scope::Local,
        _ => groups::Scope::Cluster,
    };
    let path = req.uri().path();
    // The probes, the page, and the icon a browser asks for with it (404): they hold no data.
    let open = matches!(path, "/health/live" | "/health/ready" | "/" | "/favicon.ico");
    if let Some(token) = node.admin_token.as_ref().filter(|_| !open) {
        if !token.admits(req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes())) {
            crate::metrics::admin_request_unauthorized();
            let mut response = reply(StatusCode::UNAUTHORIZED, TEXT, "a bearer token is required (admin.bearer_token_file)\n".into())?;
            response
                .headers_mut()
                .insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer realm=\"corral\""));
            return Ok(response);
        }
    }
    if let Some(id) = path.strip_prefix("/v1/groups/") {
        let (status, body) = match percent_encoding::percent_decode_str(id).decode_utf8() {
            Ok(id) if !id.is_empty() => groups::describe(node, id.into_owned(), scope).await,
            _ => (StatusCode::BAD_REQUEST, serde_json::json!({ "error": "the group id is empty or not UTF-8" })),
        };
        return reply(status, JSON, body.to_string());
    }
    match path {
        "/" => reply(StatusCode::OK, "text/html; charset=utf-8", PAGE.into()),
        "/v1/groups" => {
            let (status, body) = groups::list(node, scope).await;
            reply(status, JSON, body.to_string())
        }
        "/health/live" => reply(StatusCode::OK, TEXT, "live\n".into()),
        "/health/ready" if node.is_ready() => reply(StatusCode::OK, TEXT, "ready\n".into()),
        "/health/ready" => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, "not ready\n".into()),
        "/metrics" => {
            let Some(metrics) = metrics else {
                return reply(StatusCode::NOT_FOUND, TEXT, "metrics are off (admin.metrics = false)\n".into());
            };
            // Read at the scrape, so the request path does not update a gauge per request.
            crate::metrics::queued_request_bytes(node.client_limits.held_request_bytes());
            let mut text = metrics.render();
            group_metrics::render(&node, &mut text).await;
            raft_metrics::render(&node, &mut text).await;
            reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", text)
        }
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found; try /, /health/live, /health/ready, /metrics, /v1/groups\n".into()),
    }
}
