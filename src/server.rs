//! Starting and stopping a node: everything `corral serve` does between reading its config and
//! exiting.
//!
//! Startup order: validate config → lock the data directory → read what the previous run left
//! (clean-shutdown marker, cluster id, topic catalog, producer ids) → bind the Kafka and admin
//! ports → start the shards, which open their partitions → report ready.
//!
//! Shutdown: the node's token is cancelled; shards stop accepting, let open connections finish
//! what they have read, sync and close their partitions; then the clean-shutdown marker is
//! written so the next start trusts the indexes on disk.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

use crate::cluster::catalog::Catalog;
use crate::cluster::producer_ids::ProducerIds;
use crate::config::{Config, ConfigError};
use crate::node::Node;
use crate::runtime::{Mesh, Shards};
use crate::storage::log::{sync_dir, write_atomically};

const CLEAN_SHUTDOWN: &str = ".clean_shutdown";
const LOCK: &str = ".lock";

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("data directory {0} is in use by another corral process")]
    Locked(PathBuf),
    #[error("cannot listen on {addr} ({key}): {source}")]
    Bind {
        key: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Shard(String),
}

/// A running node.
#[derive(Debug)]
pub struct Server {
    /// Where the first Kafka listener is bound (the real port when the config said 0).
    pub kafka_addr: SocketAddr,
    /// Where each Kafka listener is bound, in `kafka.listeners` order.
    pub listener_addrs: Vec<SocketAddr>,
    pub admin_addr: SocketAddr,
    node: Arc<Node>,
    shards: Shards,
    admin: JoinHandle<()>,
    /// The thread of the Raft links to other nodes (clusters only), and what stops it once the
    /// shards have stopped.
    raft_net: Option<(JoinHandle<()>, CancellationToken)>,
    data_dir: PathBuf,
    _lock: File,
}

impl Server {
    /// Starts a node and returns once it serves clients.
    pub fn start(config: Config) -> Result<Server, StartError> {
        config.validate()?;
        // Without a recorder every metric update is a no-op (what `admin.metrics = false` is for).
        let metrics = config.admin.metrics.then(crate::metrics::install);
        let data_dir = config.storage.data_dir.clone();
        let io = |source| StartError::DataDir { path: data_dir.clone(), source };
        let meta_dir = data_dir.join("meta");
        std::fs::create_dir_all(&meta_dir).map_err(io)?;
        let lock = File::create(data_dir.join(LOCK)).map_err(io)?;
        if lock.try_lock().is_err() {
            return Err(StartError::Locked(data_dir));
        }
        let clean_start = take_clean_marker(&data_dir).map_err(io)?;
        let cluster_id = match config.cluster.is_multi_node() {
            true => cluster_id_of(&config.cluster.nodes),
            false => cluster_id(&meta_dir).map_err(io)?,
        };
        crate::cluster::remove_deleted_dirs(&data_dir).map_err(io)?;

        let shards = config.shard_count();
        let open_files_per_shard = crate::storage::per_shard_budget(config.storage.max_open_files, shards)
            .map_err(|reason| StartError::Config(ConfigError::Invalid { key: "storage.max_open_files", reason }))?;
        let catalog = Catalog::load(&meta_dir, shards, config.node.id).map_err(io)?;
        crate::cluster::ensure_offsets_topic(&catalog, config.groups.offsets_partitions).map_err(StartError::Shard)?;
        let producer_ids = ProducerIds::default();

        // Each listener's sockets (one per shard), then each shard's socket of every listener.
        let listener_configs = config.listeners();
        let mut sockets: Vec<Vec<std::net::TcpListener>> = (0..shards).map(|_| Vec::new()).collect();
        let mut bound = Vec::with_capacity(listener_configs.len());
        for l in &listener_configs {
            let key = if bound.is_empty() { "kafka.listen" } else { "kafka.listeners" };
            let (per_shard, addr) =
                crate::net::listener::bind(l.listen, shards).map_err(|source| StartError::Bind { key, addr: l.listen, source })?;
            for (shard, socket) in sockets.iter_mut().zip(per_shard) {
                shard.push(socket);
            }
            bound.push(addr);
        }
        let kafka_addr = bound[0];
        let crate::security::NodeSecurity { listeners, sasl, raft_tls, admin_tls, admin_token } =
            crate::security::listeners(&config, &bound, crate::security::kernel_tls::for_config(&config))?;
        let authorizer = crate::security::acl::Authorizer::new(&config.authorization, catalog.acls.clone());
        let quotas = crate::security::quota::Quotas::new(&config.quotas);
        let admin_listener = std::net::TcpListener::bind(config.admin.listen).map_err(|source| StartError::Bind {
            key: "admin.listen",
            addr: config.admin.listen,
            source,
        })?;
        let admin_addr = admin_listener.local_addr().map_err(io)?;

        // Every node's address on every listener: from cluster.nodes, or this node's own.
        let mut listener_brokers = Vec::with_capacity(listener_configs.len());
        for (index, (l, bound)) in listener_configs.iter().zip(&bound).enumerate() {
            let own = match l.advertised.is_empty() {
                true => (bound.ip().to_string(), bound.port()),
                false => crate::config::parse_host_port(&l.advertised)
                    .map_err(|reason| StartError::Config(ConfigError::Invalid { key: "kafka.listeners", reason }))?,
            };
            let mut brokers = std::collections::BTreeMap::new();
            for n in &config.cluster.nodes {
                // Validated already.
                let address = if index == 0 { Some(&n.kafka) } else { n.listeners.get(&l.name) };
                if let Some(address) = address {
                    let address = crate::config::parse_host_port(address)
                        .map_err(|reason| StartError::Config(ConfigError::Invalid { key: "cluster.nodes", reason }))?;
                    brokers.insert(n.id, address);
                }
            }
            brokers.entry(config.node.id).or_insert(own);
            listener_brokers.push(brokers);
        }
        let brokers = listener_brokers[0].clone();
        let advertised = brokers[&config.node.id].clone();
        let (peers, peer_tasks) = if config.cluster.is_multi_node() {
            let raft_listen = config.cluster.raft_listen;
            let listener = std::net::TcpListener::bind(raft_listen).map_err(|source| StartError::Bind {
                key: "cluster.raft_listen",
                addr: raft_listen,
                source,
            })?;
            let others = config.cluster.nodes.iter().filter(|n| n.id != config.node.id).map(|n| (n.id as u64, n.raft.clone()));
            let secret = config.cluster.secret().map_err(StartError::Config)?;
            let nodes = config.cluster.nodes.iter().map(|n| {
                let host = crate::config::parse_host_port(&n.raft).map(|(host, _)| host).unwrap_or_default();
                (n.id as u64, host)
            });
            let auth = crate::raft::peer_auth::PeerAuth::new(config.node.id as u64, secret.as_deref(), raft_tls, nodes);
            let (peers, tasks) = crate::raft::transport::Peers::new(listener, others.collect(), auth);
            (peers, Some(tasks))
        } else {
            (Default::default(), None)
        };
        let coordinator_shards =
            catalog.get(crate::cluster::OFFSETS_TOPIC).map(|t| t.partitions.iter().map(|p| p.shard).collect()).unwrap_or_default();
        let (mesh, inboxes) = Mesh::new(shards, config.runtime.mesh_queue_capacity);
        let client_limits = crate::net::limits::ClientLimits::new(&config.kafka);
        let upstream = match config.storage.backend {
            crate::config::StorageBackend::Upstream => {
                Some(Arc::new(crate::upstream::Upstream::new(config.upstream.clone()).map_err(StartError::Config)?))
            }
            _ => None,
        };
        let sidecar = match config.role {
            crate::config::Role::Sidecar => Some(Arc::new(crate::sidecar::GroupService::new(&config).map_err(StartError::Config)?)),
            _ => None,
        };
        let node = Arc::new(Node {
            node_id: config.node.id,
            config,
            cluster_id,
            advertised,
            catalog,
            end_offsets: Default::default(),
            mesh,
            producer_ids,
            shutdown: Default::default(),
            clean_start,
            open_files_per_shard,
            coordinator_shards,
            ready: Default::default(),
            brokers,
            listener_brokers,
            listeners,
            sasl,
            admin_tls,
            admin_token,
            authorizer,
            quotas,
            peers: Arc::new(peers),
            metadata_leader: std::sync::atomic::AtomicI64::new(-1),
            upstream,
            sidecar,
            client_limits,
        });
        let raft_net = match peer_tasks {
            Some(tasks) => {
                let stop = CancellationToken::new();
                Some((
                    crate::raft::transport::start(
                        Arc::new(crate::runtime::raft_inbound::ShardsInbound { node: node.clone() }),
                        tasks,
                        stop.clone(),
                    )
                    .map_err(io)?,
                    stop,
                ))
            }
            None => None,
        };
        let shards = crate::runtime::start(node.clone(), inboxes, sockets).map_err(StartError::Shard)?;
        let admin = crate::admin::start(node.clone(), admin_listener, metrics).map_err(io)?;
        node.set_ready();
        for l in &node.listeners {
            if l.index > 0 {
                tracing::info!(listener = %l.name, protocol = l.protocol.name(), address = %l.bound, "listening");
            }
        }
        tracing::info!(
            kafka = %kafka_addr,
            admin = %admin_addr,
            shards = node.mesh.shard_count(),
            topics = node.catalog.len(),
            clean_start,
            "corral is serving"
        );
        Ok(Server { kafka_addr, listener_addrs: bound, admin_addr, node, shards, admin, raft_net, data_dir, _lock: lock })
    }

    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Begins a graceful shutdown; [`Server::wait`] returns when it is complete.
    pub fn shutdown(&self) {
        self.node.shutdown.cancel();
    }

    /// Waits until the node has stopped, then records a clean shutdown.
    pub fn wait(self) -> Result<(), String> {
        let result = self.shards.join();
        let _ = self.admin.join();
        if let Some((raft_net, stop)) = self.raft_net {
            stop.cancel();
            let _ = raft_net.join();
        }
        // Closing the partitions wrote their last files without an fsync each: one sync of the
        // file system makes them all durable before the marker says they can be trusted.
        let result = result.and_then(|()| {
            crate::storage::log::sync_filesystem(&self.data_dir).map_err(|e| format!("cannot sync {}: {e}", self.data_dir.display()))
        });
        if result.is_ok() {
            write_atomically(&self.data_dir.join(CLEAN_SHUTDOWN), b"").map_err(|e| format!("cannot record clean shutdown: {e}"))?;
            tracing::info!("corral stopped cleanly");
        }
        result
    }
}

/// Reads and removes the clean-shutdown marker: its presence means the last run closed every
/// partition properly.
fn take_clean_marker(data_dir: &Path) -> std::io::Result<bool> {
    let marker = data_dir.join(CLEAN_SHUTDOWN);
    match std::fs::remove_file(&marker) {
        Ok(()) => {
            sync_dir(data_dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The cluster id of a multi-node cluster: the same on every node (clients refuse brokers that
/// report different ids), derived from the nodes' ids and Kafka addresses, which every node is
/// configured with alike (Raft addresses may differ, as each node sees its peers).
fn cluster_id_of(nodes: &[crate::config::ClusterNode]) -> String {
    let mut sorted: Vec<_> = nodes.iter().map(|n| format!("{}={}", n.id, n.kafka)).collect();
    sorted.sort();
    let described = sorted.join(";");
    let high = crc32c::crc32c(described.as_bytes());
    let low = crc32c::crc32c_append(high, b"corral-cluster");
    format!("corral-{high:08x}{low:08x}")
}

/// The cluster id of a single node, created on first start and kept in `meta/cluster.json`.
fn cluster_id(meta_dir: &Path) -> std::io::Result<String> {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Stored {
        cluster_id: String,
    }
    let path = meta_dir.join("cluster.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<Stored>(&bytes)
            .map(|s| s.cluster_id)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().simple().to_string();
            let bytes = serde_json::to_vec(&Stored { cluster_id: id.clone() }).map_err(std::io::Error::other)?;
            write_atomically(&path, &bytes)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}
