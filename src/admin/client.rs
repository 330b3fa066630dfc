//! A GET to another node's admin listener (or, from `corral groups`, to a running node's): one
//! HTTP/1.1 request on a fresh connection, with a deadline and a bound on the body.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

/// The largest body read back (a group's details with every offset of a large group fit).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// How a request to an admin listener is sent: over TLS or not, with a bearer token or not.
#[derive(Default, Clone, Copy)]
pub(crate) struct Access<'a> {
    pub(crate) tls: Option<&'a TlsConnector>,
    /// The `Authorization` header's value.
    pub(crate) authorization: Option<&'a str>,
}

/// `GET http://{addr}{path}`, or `https://` with TLS: the status and the body, or why there is
/// none.
pub(crate) async fn get(addr: &str, path: &str, access: Access<'_>, timeout: Duration) -> Result<(StatusCode, Bytes), String> {
    tokio::time::timeout(timeout, exchange(addr, path, access)).await.map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}

async fn exchange(addr: &str, path: &str, access: Access<'_>) -> Result<(StatusCode, Bytes), String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let mut sender = match access.tls {
        None => handshake(stream, addr).await?,
        Some(tls) => {
            let (host, _) = crate::config::parse_host_port(addr)?;
            let name = ServerName::try_from(host).map_err(|e| format!("{addr}: {e}"))?;
            let stream = tls.connect(name, stream).await.map_err(|e| format!("{addr}: TLS: {e}"))?;
            handshake(stream, addr).await?
        }
    };
    let mut request = Request::get(path).header(hyper::header::HOST, addr);
    if let Some(authorization) = access.authorization {
        request = request.header(hyper::header::AUTHORIZATION, authorization);
    }
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| format!("bad request {path}: {e}"))?;
    let response = sender.send_request(request).await.map_err(|e| format!("{addr}: {e}"))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_BODY_BYTES).collect().await.map_err(|e| format!("{addr}: {e}"))?.to_bytes();
    Ok((status, body))
}

async fn handshake<S>(stream: S, addr: &str) -> Result<SendRequest<Empty<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("{addr}: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}
