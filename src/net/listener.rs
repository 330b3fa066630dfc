//! Kafka listeners: one SO_REUSEPORT socket per shard on the same address, so the kernel spreads
//! incoming connections across shards.

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

/// Accepts connections on this shard until shutdown, at most `max_connections_per_shard` at once.
pub(crate) async fn accept_loop(shard: &Rc<Shard>, listener: TcpListener, connections: &TaskTracker) {
    let limit = Arc::new(Semaphore::new(shard.node.config.kafka.max_connections_per_shard));
    let shutdown = shard.node.shutdown.clone();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = limit.clone().acquire_owned() => permit.expect("never closed"),
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
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
                let shard = shard.clone();
                connections.spawn_local(async move {
                    super::connection::serve(shard, stream, peer).await;
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
