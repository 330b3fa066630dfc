//! Thread-per-core runtime: one pinned OS thread per shard, each running a single-threaded tokio
//! runtime with a `LocalSet` so shard-owned state can be `!Send`.
//!
//! Shards never share mutable state directly. Work for another shard's partitions goes through
//! the [`Mesh`]; node-wide, read-mostly state ([`crate::node::Node`]) is shared by `Arc`.

mod background;
pub mod groups;
pub mod mesh;
pub mod raft_inbound;
pub mod shard;

use std::sync::Arc;
use std::thread::JoinHandle;

pub use mesh::{Mesh, Reply, ShardId, ShardStopped};
pub use shard::Shard;

use crate::node::Node;

/// Running shard threads.
#[derive(Debug)]
pub struct Shards {
    threads: Vec<JoinHandle<Result<(), String>>>,
}

/// Starts one thread per shard, each given its socket of every Kafka listener (bound with
/// SO_REUSEPORT, one per shard), and returns once every shard has opened its partitions and is
/// accepting.
pub(crate) fn start(
    node: Arc<Node>,
    inboxes: Vec<tokio::sync::mpsc::Receiver<mesh::Job>>,
    sockets: Vec<Vec<std::net::TcpListener>>,
) -> Result<Shards, String> {
    let count = sockets.len();
    let cores = if node.config.runtime.pin_threads { core_affinity::get_core_ids().unwrap_or_default() } else { Vec::new() };
    let drained = Arc::new(tokio::sync::Barrier::new(count));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut threads = Vec::with_capacity(count);
    for (id, (inbox, sockets)) in inboxes.into_iter().zip(sockets).enumerate() {
        let start = shard::ShardStart {
            id,
            node: node.clone(),
            inbox,
            sockets,
            core: (!cores.is_empty()).then(|| cores[id % cores.len()]),
            started: started_tx.clone(),
            drained: drained.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("shard-{id}"))
            .spawn(move || shard::run(start))
            .map_err(|e| format!("cannot spawn shard thread: {e}"))?;
        threads.push(thread);
    }
    drop(started_tx);
    for _ in 0..count {
        match started_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                node.shutdown.cancel();
                return Err(e);
            }
            Err(_) => {
                node.shutdown.cancel();
                return Err("a shard thread exited during startup".into());
            }
        }
    }
    Ok(Shards { threads })
}

impl Shards {
    /// Waits for every shard thread to finish (after the node's shutdown token is cancelled).
    pub fn join(self) -> Result<(), String> {
        let mut result = Ok(());
        for thread in self.threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err("a shard thread panicked".into()),
            }
        }
        result
    }
}
