//! A shard: one OS thread, one single-threaded tokio runtime, and the state it owns.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::groups::LocalGroups;
use super::mesh::{self, Job, ShardId};
use crate::cluster::metadata_group::{MetadataGroup, METADATA_GROUP, METADATA_SHARD};
use crate::coordinator::consumer_group::ConsumerGroupConfig;
use crate::coordinator::router::GroupRouter;
use crate::coordinator::shell::{PartitionRunner, RaftSettings};
use crate::coordinator::state::GroupConfig;
use crate::metrics::ShardMetrics;
use crate::node::Node;
use crate::raft::network::SoloNetwork;
use crate::storage::{OpenFiles, Partition, PartitionLog};
use crate::store::local::LocalStore;
use crate::store::upstream::UpstreamStore;
use crate::store::PartitionStore;

/// Key of a partition owned by a shard.
pub type PartitionKey = (Uuid, i32);

/// Per-core state. Lives on its shard's thread only (`Rc`, `RefCell`); other shards reach it
/// through [`crate::runtime::Mesh`].
#[derive(Debug)]
pub struct Shard {
    pub id: ShardId,
    pub node: Arc<Node>,
    pub metrics: ShardMetrics,
    partitions: RefCell<HashMap<PartitionKey, Rc<Partition>>>,
    /// The segment files of this shard's partitions that are open now.
    pub open_files: Rc<OpenFiles>,
    /// The coordinator partitions this shard owns, by `__consumer_offsets` partition.
    coordinators: RefCell<HashMap<i32, Rc<PartitionRunner>>>,
    /// The metadata group, on its shard.
    metadata: OnceCell<Rc<MetadataGroup>>,
    /// Where the data APIs find partition data, from this shard.
    store: Box<dyn PartitionStore>,
    /// Where the group APIs find the group coordinator, from this shard.
    groups: Box<dyn GroupRouter>,
    /// A sidecar's forwarding of group requests to the group service.
    sidecar: Option<Rc<crate::sidecar::forward::Forwarder>>,
    /// Client connections accepted by this shard so far: the next one's number.
    connections_accepted: std::cell::Cell<u64>,
}

impl Shard {
    pub(crate) fn new(id: ShardId, node: Arc<Node>) -> Rc<Shard> {
        Rc::new_cyclic(|shard| {
            let store: Box<dyn PartitionStore> = match &node.upstream {
                Some(upstream) => Box::new(UpstreamStore::new(node.clone(), upstream.clone(), LocalStore::new(shard.clone()))),
                None => Box::new(LocalStore::new(shard.clone())),
            };
            let sidecar = node.sidecar.clone().map(|s| Rc::new(crate::sidecar::forward::Forwarder::new(s)));
            Shard {
                open_files: OpenFiles::new(node.open_files_per_shard),
                id,
                metrics: ShardMetrics::new(id),
                node,
                partitions: RefCell::new(HashMap::new()),
                coordinators: RefCell::new(HashMap::new()),
                metadata: OnceCell::new(),
                store,
                groups: Box::new(LocalGroups::new(shard.clone())),
                sidecar,
                connections_accepted: std::cell::Cell::new(0),
            }
        })
    }

    /// Numbers a newly accepted client connection (unique on this shard).
    pub(crate) fn next_connection_number(&self) -> u64 {
        let number = self.connections_accepted.get();
        self.connections_accepted.set(number + 1);
        number
    }

    /// The group coordinator as the group APIs reach it from this shard.
    pub fn groups(&self) -> &dyn GroupRouter {
        self.groups.as_ref()
    }

    /// A sidecar's forwarder of group requests (`None` unless `role = "sidecar"`).
    pub fn sidecar_forwarder(&self) -> Option<&Rc<crate::sidecar::forward::Forwarder>> {
        self.sidecar.as_ref()
    }

    /// The partition store the data APIs use on this shard.
    pub fn store(&self) -> &dyn PartitionStore {
        self.store.as_ref()
    }

    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(&(topic_id, partition)).cloned()
    }

    pub fn add_partition(&self, topic_id: Uuid, partition: i32, p: Rc<Partition>) {
        self.partitions.borrow_mut().insert((topic_id, partition), p);
    }

    /// Closes a partition for good (its topic was deleted).
    pub fn remove_partition(&self, topic_id: Uuid, partition: i32) -> Option<Rc<Partition>> {
        self.node.end_offsets.remove(topic_id, partition);
        self.partitions.borrow_mut().remove(&(topic_id, partition))
    }

    /// This shard's runner for a coordinator partition.
    pub fn coordinator(&self, partition: i32) -> Option<Rc<PartitionRunner>> {
        self.coordinators.borrow().get(&partition).cloned()
    }

    /// The metadata group, on the shard that hosts it once it has started.
    pub fn metadata(&self) -> Option<Rc<MetadataGroup>> {
        self.metadata.get().cloned()
    }

    /// Every coordinator partition on this shard.
    pub fn coordinators(&self) -> Vec<Rc<PartitionRunner>> {
        self.coordinators.borrow().values().cloned().collect()
    }

    pub fn partitions(&self) -> Vec<(PartitionKey, Rc<Partition>)> {
        self.partitions.borrow().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Opens every partition of the catalog that this shard owns (of those placed on this node).
    fn open_partitions(&self) -> Result<(), String> {
        let node = &self.node;
        let now = crate::clock::now_ms();
        for topic in node.catalog.all() {
            for (index, meta) in topic.partitions.iter().enumerate() {
                if meta.shard != self.id || meta.leader != node.node_id {
                    continue;
                }
                let dir = node.partition_dir(&topic.name, index as i32);
                let mut config = topic.config.log_config(&node.config.topics.defaults, &node.config.storage);
                if topic.name == crate::cluster::OFFSETS_TOPIC {
                    config = crate::coordinator::offsets_log_config(config);
                }
                let (log, report) = PartitionLog::open(&self.open_files, &dir, config, node.clean_start, now)
                    .map_err(|e| format!("cannot open partition {}: {e}", dir.display()))?;
                if report.truncated_bytes > 0 {
                    tracing::warn!(
                        partition = %dir.display(),
                        truncated_bytes = report.truncated_bytes,
                        "recovered partition: truncated an incomplete tail"
                    );
                }
                // `__consumer_offsets` is written only by applying Raft entries, which are durable
                // in the Raft log already; its own fsyncs happen at checkpoints.
                let flush_messages = if topic.name == crate::cluster::OFFSETS_TOPIC { 0 } else { node.config.storage.flush_messages };
                let partition = Partition::new(log, node.end_offsets.publisher(topic.id, index as i32), flush_messages);
                self.add_partition(topic.id, index as i32, partition);
            }
        }
        Ok(())
    }

    /// Starts the coordinator partitions this shard owns (their logs are open already). On a
    /// single node each is a one-voter Raft group and this waits until all serve; in a cluster
    /// each group has every node as a voter, and a partition serves whenever this node leads it.
    async fn start_coordinators(&self) -> Result<(), String> {
        let node = &self.node;
        // A sidecar's groups are its group service's: it runs no coordinator of its own.
        if node.sidecar.is_some() {
            return Ok(());
        }
        let Some(topic) = node.catalog.get(crate::cluster::OFFSETS_TOPIC) else {
            return Ok(());
        };
        let me = node.node_id as u64;
        let cluster = &node.config.cluster;
        let members = node.raft_members();
        let voters: Vec<u64> = members.keys().copied().collect();
        let mut starting = Vec::new();
        for (index, meta) in topic.partitions.iter().enumerate() {
            if meta.shard != self.id {
                continue;
            }
            let index = index as i32;
            let log = self.partition(topic.id, index).ok_or_else(|| format!("coordinator partition {index} has no log"))?;
            let preferred_leader = voters[index as usize % voters.len()];
            let config = crate::raft::coordinator_config().map_err(|e| format!("Raft config: {e}"))?;
            let raft =
                RaftSettings { dir: node.coordinator_raft_dir(index), node_id: me, members: members.clone(), preferred_leader, config };
            let groups = GroupConfig::from_config(&node.config);
            let consumer = ConsumerGroupConfig {
                overrides: node.catalog.group_configs.clone(),
                ..ConsumerGroupConfig::from_config(&node.config.groups)
            };
            let expiration = node.config.groups.offsets_retention_check_interval_ms;
            let started: LocalBoxFuture<'_, Result<Rc<PartitionRunner>, String>> = if cluster.is_multi_node() {
                let network = node.peers.network(index as u32);
                Box::pin(PartitionRunner::start(index, log, groups, consumer, expiration, raft, network))
            } else {
                Box::pin(PartitionRunner::start(index, log, groups, consumer, expiration, raft, SoloNetwork))
            };
            starting.push(async move { started.await.map_err(|e| format!("coordinator partition {index}: {e}")) });
        }
        for runner in futures_util::future::join_all(starting).await {
            let runner = runner?;
            self.coordinators.borrow_mut().insert(runner.index, runner);
        }
        Ok(())
    }

    /// Starts the metadata group (on its shard only), after the shard serves its inbox: applying
    /// a topic change opens partitions on every shard.
    async fn start_metadata(self: &Rc<Self>) -> Result<(), String> {
        if self.id != METADATA_SHARD {
            return Ok(());
        }
        let members = self.node.raft_members();
        let group = if self.node.config.cluster.is_multi_node() {
            MetadataGroup::start(self, members, self.node.peers.network(METADATA_GROUP)).await
        } else {
            MetadataGroup::start(self, members, SoloNetwork).await
        };
        let group = group.map_err(|e| format!("metadata group: {e}"))?;
        let _ = self.metadata.set(group);
        Ok(())
    }

    /// Hands the leadership of the Raft groups on this shard that this node leads to other nodes
    /// (clusters only; clean shutdown). The groups keep running, to answer their successors.
    async fn hand_off_leadership(&self) {
        if !self.node.config.cluster.is_multi_node() {
            return;
        }
        let runners = self.coordinators();
        let coordinators = futures_util::future::join_all(runners.iter().map(|r| r.hand_off(&self.node.peers)));
        let metadata = async {
            if let Some(metadata) = self.metadata() {
                metadata.hand_off().await;
            }
        };
        futures_util::future::join(coordinators, metadata).await;
    }

    /// Stops the coordinator partitions' Raft groups and the metadata group (clean shutdown).
    async fn stop_raft_groups(&self) {
        let runners: Vec<_> = self.coordinators.borrow_mut().drain().map(|(_, r)| r).collect();
        futures_util::future::join_all(runners.iter().map(|r| r.shutdown())).await;
        if let Some(metadata) = self.metadata() {
            metadata.shutdown().await;
        }
    }

    /// Syncs and closes every partition (clean shutdown).
    fn close_partitions(&self) -> Result<(), String> {
        let mut first_error = None;
        for ((_, _), partition) in self.partitions.borrow_mut().drain() {
            let mut log = partition.log.borrow_mut();
            if let Err(e) = log.close() {
                tracing::error!(partition = %log.dir().display(), error = %e, "closing partition failed");
                first_error.get_or_insert(e.to_string());
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl crate::api::Services for Shard {
    fn node(&self) -> &Arc<Node> {
        &self.node
    }

    fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    fn store(&self) -> &dyn PartitionStore {
        Shard::store(self)
    }

    fn groups(&self) -> &dyn GroupRouter {
        Shard::groups(self)
    }

    fn sidecar(&self) -> Option<&Rc<crate::sidecar::forward::Forwarder>> {
        self.sidecar_forwarder()
    }
}

/// Everything a shard thread needs to start.
pub(crate) struct ShardStart {
    pub(crate) id: ShardId,
    pub(crate) node: Arc<Node>,
    pub(crate) inbox: mpsc::Receiver<Job>,
    /// This shard's socket of each Kafka listener, in the node's listener order.
    pub(crate) sockets: Vec<std::net::TcpListener>,
    pub(crate) core: Option<core_affinity::CoreId>,
    /// Reports "partitions loaded, accepting" or the startup error.
    pub(crate) started: std::sync::mpsc::Sender<Result<(), String>>,
    /// Every shard waits here after draining its connections, so no shard closes its
    /// partitions while another might still send it work.
    pub(crate) drained: Arc<tokio::sync::Barrier>,
}

/// The body of a shard thread.
pub(crate) fn run(start: ShardStart) -> Result<(), String> {
    if let Some(core) = start.core {
        core_affinity::set_for_current(core);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("shard {}: cannot build runtime: {e}", start.id))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(start))
}

async fn serve(start: ShardStart) -> Result<(), String> {
    let ShardStart { id, node, inbox, sockets, started, drained, .. } = start;
    let shard = Shard::new(id, node.clone());
    let opened = match shard.open_partitions() {
        Ok(()) => shard.start_coordinators().await,
        Err(e) => Err(e),
    };
    if let Err(e) = opened {
        let _ = started.send(Err(e.clone()));
        drained.wait().await;
        return Err(e);
    }
    tokio::task::spawn_local(mesh::serve_inbox(shard.clone(), inbox));
    if let Err(e) = shard.start_metadata().await {
        let _ = started.send(Err(e.clone()));
        drained.wait().await;
        return Err(e);
    }
    tokio::task::spawn_local(super::background::retention(shard.clone()));
    tokio::task::spawn_local(super::background::compaction(shard.clone()));
    if let (0, Some(upstream)) = (id, &node.upstream) {
        tokio::task::spawn_local(crate::upstream::refresh::run(node.clone(), upstream.clone()));
    }
    if let (0, Some(service)) = (id, &node.sidecar) {
        tokio::task::spawn_local(crate::sidecar::run(node.shutdown.clone(), service.clone()));
    }
    if node.config.storage.flush_ms > 0 {
        tokio::task::spawn_local(super::background::periodic_flush(shard.clone()));
    }
    let sockets = match sockets.into_iter().map(tokio::net::TcpListener::from_std).collect::<Result<Vec<_>, _>>() {
        Ok(sockets) => sockets,
        Err(e) => {
            let e = format!("shard {id}: cannot register listener: {e}");
            let _ = started.send(Err(e.clone()));
            drained.wait().await;
            return Err(e);
        }
    };
    let _ = started.send(Ok(()));

    let connections = TaskTracker::new();
    let limit = Arc::new(tokio::sync::Semaphore::new(node.config.kafka.max_connections_per_shard));
    let accepting = sockets
        .into_iter()
        .zip(&node.listeners)
        .map(|(socket, listener)| crate::net::listener::accept_loop(&shard, socket, listener.clone(), limit.clone(), &connections));
    futures_util::future::join_all(accepting).await;

    // Shutdown: hand the leadership of this shard's Raft groups to other nodes (clients then find
    // the new coordinators at once), while the requests already read finish within the grace
    // period.
    connections.close();
    let grace = Duration::from_millis(node.config.runtime.shutdown_grace_ms);
    let drain = async {
        if tokio::time::timeout(grace, connections.wait()).await.is_err() {
            tracing::warn!(shard = id, open = connections.len(), "grace period over; closing remaining connections");
        }
    };
    futures_util::future::join(shard.hand_off_leadership(), drain).await;
    drained.wait().await;
    shard.stop_raft_groups().await;
    shard.close_partitions()
}
