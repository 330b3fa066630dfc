//! Kafka listeners: one SO_REUSEPORT socket per shard on each listener's address, so the kernel
//! spreads incoming connections across shards. A TLS listener finishes the handshake before the
//! connection reads its first request, and gives the session to the kernel where it takes it.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use ktls::CorkStream;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use crate::runtime::Shard;
use crate::security::kernel_tls::{self, Accepted};
use crate::security::session::ConnectionSecurity;
use crate::security::Listener;

const BACKLOG: i32 = 1024;

/// Binds `count` listening sockets to `addr` with SO_REUSEPORT and returns them with the address
/// actually bound (the port is chosen by the kernel when `addr` has port 0).
///
/// A plain bind first checks that nothing else holds the address: without it, another process
/// that also sets SO_REUSEPORT would silently share the port instead of failing.
pub(crate) fn bind(addr: SocketAddr, count: usize) -> io::Result<(Vec<std::net::TcpListener>, SocketAddr)> {
    let probe = std::net::TcpListener::bind(addr)?;
    let bound = probe.local_addr()?;
    drop(probe);
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = Socket::new(Domain::for_address(bound), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&bound.into())?;
        socket.listen(BACKLOG)?;
        listeners.push(socket.into());
    }
    Ok((listeners, bound))
}

/// Accepts connections on this shard's socket of `listener` until shutdown. `limit` holds the
/// shard's `max_connections_per_shard`, shared by its listeners.
pub(crate) async fn accept_loop(
    shard: &Rc<Shard>,
    socket: TcpListener,
    listener: Arc<Listener>,
    limit: Arc<Semaphore>,
    connections: &TaskTracker,
) {
    let shutdown = shard.node.shutdown.clone();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = limit.clone().acquire_owned() => permit.expect("never closed"),
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = socket.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let slot = match shard.node.client_limits.admit(peer.ip()) {
                    Ok(slot) => slot,
                    Err(limit) => {
                        // Closed at once, as Kafka does: the client backs off and tries again.
                        tracing::debug!(%peer, limit = limit.label(), "refused a connection");
                        crate::metrics::connection_refused(limit.label());
                        drop(stream);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let shard = shard.clone();
                let listener = listener.clone();
                connections.spawn_local(async move {
                    match &listener.tls {
                        None => super::connection::serve_tcp(shard, stream, peer, ConnectionSecurity::new(listener.clone(), None)).await,
                        Some(acceptor) => serve_tls(shard, stream, peer, &listener, acceptor).await,
                    }
                    drop((slot, permit));
                });
            }
            Err(e) => {
                // Out of file descriptors and similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves a TLS listener's connection: the handshake within `request_body_timeout_ms`, then, where
/// the kernel takes the session, a plain socket whose bytes the kernel encrypts.
async fn serve_tls(shard: Rc<Shard>, stream: TcpStream, peer: SocketAddr, listener: &Arc<Listener>, acceptor: &TlsAcceptor) {
    let timeout = Duration::from_millis(shard.node.config.kafka.request_body_timeout_ms);
    let Some(kernel) = &listener.kernel_tls else {
        let Some(stream) = handshake(acceptor, stream, timeout, peer, listener).await else { return };
        let security = ConnectionSecurity::new(listener.clone(), crate::security::tls::client_principal(stream.get_ref().1));
        crate::metrics::tls_connection(&listener.name, false);
        return super::connection::serve_tls(shard, stream, peer, security).await;
    };
    // Corked: the handshake reads whole TLS records only, so none meant for the kernel is taken.
    // The cork (the ktls crate's) asserts on a read buffer rustls could make too small for a
    // record header: a client that brings that about loses its connection, not its shard.
    let corked = AssertUnwindSafe(async {
        let stream = handshake(acceptor, CorkStream::new(stream), timeout, peer, listener).await?;
        let security = ConnectionSecurity::new(listener.clone(), crate::security::tls::client_principal(stream.get_ref().1));
        Some((tokio::time::timeout(timeout, kernel_tls::hand_over(stream, kernel)).await, security))
    });
    let (handed_over, security) = match corked.catch_unwind().await {
        Ok(Some(handed_over)) => handed_over,
        Ok(None) => return,
        Err(_) => return handshake_failed(peer, listener, "a record the kTLS hand-over cannot frame"),
    };
    match handed_over {
        Ok(Ok(Accepted::Kernel { stream, early })) => {
            crate::metrics::tls_connection(&listener.name, true);
            super::connection::serve_kernel_tls(shard, stream, early, peer, security).await
        }
        Ok(Ok(Accepted::Userspace(stream))) => {
            crate::metrics::tls_connection(&listener.name, false);
            super::connection::serve_tls(shard, *stream, peer, security).await
        }
        Ok(Err(e)) => handshake_failed(peer, listener, &format!("handing the session to the kernel failed: {e}")),
        Err(_) => handshake_failed(peer, listener, "the session was not handed to the kernel within request_body_timeout_ms"),
    }
}

/// The server side of a TLS handshake, within `timeout`; a failure is logged and counted.
async fn handshake<IO: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    io: IO,
    timeout: Duration,
    peer: SocketAddr,
    listener: &Listener,
) -> Option<TlsStream<IO>> {
    match tokio::time::timeout(timeout, acceptor.accept(io)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            handshake_failed(peer, listener, &e.to_string());
            None
        }
        Err(_) => {
            handshake_failed(peer, listener, "it did not finish within request_body_timeout_ms");
            None
        }
    }
}

/// A TLS connection closed before it could be served: logged and counted.
fn handshake_failed(peer: SocketAddr, listener: &Listener, why: &str) {
    tracing::info!(%peer, listener = %listener.name, why, "TLS handshake failed");
    crate::metrics::tls_handshake_failed(&listener.name);
}
