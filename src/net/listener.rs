//! Kafka listeners: one SO_REUSEPORT socket per shard on each listener's address, so the kernel
//! spreads incoming connections across shards. A TLS listener finishes the handshake before the
//! connection reads its first request.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::runtime::Shard;
use crate::security::session::ConnectionSecurity;

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
    listener: Arc<crate::security::Listener>,
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
                        Some(acceptor) => {
                            let timeout = Duration::from_millis(shard.node.config.kafka.request_body_timeout_ms);
                            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                                Ok(Ok(stream)) => {
                                    let certificate = crate::security::tls::client_principal(stream.get_ref().1);
                                    let security = ConnectionSecurity::new(listener.clone(), certificate);
                                    super::connection::serve_tls(shard, stream, peer, security).await
                                }
                                Ok(Err(e)) => {
                                    tracing::info!(%peer, listener = %listener.name, error = %e, "TLS handshake failed");
                                    crate::metrics::tls_handshake_failed(&listener.name);
                                }
                                Err(_) => {
                                    tracing::info!(%peer, listener = %listener.name, "TLS handshake did not finish within request_body_timeout_ms");
                                    crate::metrics::tls_handshake_failed(&listener.name);
                                }
                            }
                        }
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
