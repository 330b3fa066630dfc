//! The metadata Raft group: the cluster's topics, their configs and the node each partition is
//! placed on, the blocks of producer ids handed to each node, groups' own configs and the ACLs.
//!
//! One group of every node, hosted on shard [`METADATA_SHARD`]. A topic request on any node is
//! checked against that node's catalog, then proposed as a [`TopicChange`]: written by the
//! group's leader, or forwarded to it over the Raft links when another node leads. Every node
//! applies the committed changes in log order to its own [`Catalog`](super::catalog::Catalog):
//! it opens the partitions placed on it, publishes the topic, and writes the catalog with the id
//! of the entry, so after a restart only the entries that follow are applied again. The node
//! that proposed a change answers its client once the change is applied there too, so the client's
//! next Metadata request to it sees the topic.
//!
//! A snapshot is the catalog's replicated topics and producer-id blocks; installing one (a node that was away while the
//! log was purged) creates, grows and deletes topics until the catalog matches it.

use std::collections::{BTreeMap, HashSet};
use std::io::Cursor;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{AnyError, BasicNode, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use uuid::Uuid;

use super::catalog::{CatalogSnapshotData, StoredTopic, Topic};
use super::topic_config::TopicConfig;
use crate::coordinator::consumer_group::GroupOverrides;
use crate::node::Node;
use crate::raft::election::{Canvass, Election};
use crate::raft::{Command, Entry, LogId, Raft, StorageError, StoredMembership, TypeConfig};
use crate::runtime::{Shard, ShardId};
use crate::security::acl::{AclBinding, AclFilter, MAX_DELETE_FILTERS};

pub use crate::raft::METADATA_GROUP;
/// The shard that hosts the metadata group.
pub const METADATA_SHARD: ShardId = 0;
/// How long a topic change may take to commit, and to be applied on the node that asked for it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One entry of the metadata group's log: a topic change, or a producer-id block.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TopicChange {
    /// A new topic; `placement` holds the node of each partition.
    Create {
        name: String,
        id: Uuid,
        config: TopicConfig,
        placement: Vec<i32>,
    },
    /// A topic grown: `placement` is the whole topic's, existing partitions first.
    AddPartitions {
        id: Uuid,
        placement: Vec<i32>,
    },
    Delete {
        id: Uuid,
    },
    /// A topic's configs replaced by `config` (AlterConfigs, IncrementalAlterConfigs).
    Configure {
        id: Uuid,
        config: TopicConfig,
    },
    /// The next block of producer ids, for `node` (Kafka's AllocateProducerIds): replicated, so
    /// no id is handed out twice, whichever node asks and whatever it lost.
    AllocateProducerIds {
        node: i32,
    },
    /// A consumer group's own configs replaced by `config` (IncrementalAlterConfigs and
    /// AlterConfigs on a GROUP resource); empty ones remove the group's.
    ConfigureGroup {
        group: String,
        config: GroupOverrides,
    },
    /// ACLs made (CreateAcls); those held already stay as they are. None is made if the set
    /// would pass `MAX_ACLS` or `MAX_ACL_BYTES`. `id` names the request, for the proposing node to read
    /// whether they were (nil in entries written before it was kept).
    CreateAcls {
        #[serde(default)]
        id: Uuid,
        acls: Vec<AclBinding>,
    },
    /// ACLs removed (DeleteAcls): those the filters match when the entry is applied, so every
    /// node removes the same ones whatever the proposing node had applied when it was asked.
    /// `id` names the request, for the proposing node to read what was removed.
    DeleteAcls {
        id: Uuid,
        filters: Vec<AclFilter>,
    },
}

impl TopicChange {
    /// Checks a change against the rules its request was checked by, so a change that did not
    /// come from this code (a peer's bug, a hand-made entry) is refused when proposed and skipped
    /// alike on every node when applied: a valid name, not an internal topic, a partition count
    /// within `topics.max_partitions`, every partition on a configured node and no node past
    /// `topics.max_partitions_per_node` (`held` counts what a node holds of other topics), valid
    /// configs. Whether the topic exists is the catalog's to say, when the change is applied.
    pub fn validate(&self, limits: &PartitionLimits, is_node: impl Fn(i32) -> bool, held: impl Fn(i32) -> usize) -> Result<(), String> {
        let placement = match self {
            TopicChange::Create { name, config, placement, .. } => {
                super::topic_config::validate_topic_name(name)?;
                if super::is_internal(name) {
                    return Err(format!("{name} is internal"));
                }
                config.validate().map_err(|e| e.to_string())?;
                placement
            }
            TopicChange::AddPartitions { placement, .. } => placement,
            TopicChange::Delete { .. } => return Ok(()),
            TopicChange::Configure { config, .. } => return config.validate().map_err(|e| e.to_string()),
            TopicChange::ConfigureGroup { group, .. } if group.is_empty() => return Err("an empty group id".to_string()),
            TopicChange::ConfigureGroup { config, .. } => return super::group_config::validate(config),
            TopicChange::CreateAcls { acls, .. } => return acls.iter().try_for_each(AclBinding::validate),
            TopicChange::DeleteAcls { filters, .. } if filters.iter().all(|f| f.borrowed().is_valid()) => return Ok(()),
            TopicChange::DeleteAcls { .. } => return Err("an ACL filter holds an UNKNOWN code".to_string()),
            TopicChange::AllocateProducerIds { node } if is_node(*node) => return Ok(()),
            TopicChange::AllocateProducerIds { node } => {
                return Err(format!("producer ids for node {node}, which is not in [cluster] nodes"))
            }
        };
        let max = limits.per_topic;
        if placement.is_empty() || placement.len() > max.max(0) as usize {
            return Err(format!("{} partitions; between 1 and {max} are allowed", placement.len()));
        }
        if let Some(stranger) = placement.iter().find(|&&n| !is_node(n)) {
            return Err(format!("a partition placed on node {stranger}, which is not in [cluster] nodes"));
        }
        check_partitions_per_node(placement, held, limits.per_node)
    }

    /// Decodes a change as the log holds it (JSON).
    pub fn decode(bytes: &[u8]) -> Result<TopicChange, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a topic change: {e}"))
    }

    /// [`TopicChange::validate`] with this node's settings (the same on every node) and its
    /// catalog (the same on every node at the same point of the log).
    pub(crate) fn validate_on(&self, node: &Node) -> Result<(), String> {
        let held = node.catalog.partitions_per_node(self.topic_id().unwrap_or_default());
        self.validate(&PartitionLimits::of(node), |n| node.brokers.contains_key(&n), |n| held.get(&n).copied().unwrap_or(0))
    }

    fn topic_id(&self) -> Option<Uuid> {
        match self {
            TopicChange::Create { id, .. }
            | TopicChange::AddPartitions { id, .. }
            | TopicChange::Delete { id }
            | TopicChange::Configure { id, .. } => Some(*id),
            TopicChange::AllocateProducerIds { .. }
            | TopicChange::ConfigureGroup { .. }
            | TopicChange::CreateAcls { .. }
            | TopicChange::DeleteAcls { .. } => None,
        }
    }
}

/// The partition limits every topic change is checked against.
#[derive(Debug, Clone, Copy)]
pub struct PartitionLimits {
    /// `topics.max_partitions`.
    pub per_topic: i32,
    /// `topics.max_partitions_per_node`.
    pub per_node: i32,
}

impl PartitionLimits {
    pub fn of(node: &Node) -> PartitionLimits {
        PartitionLimits { per_topic: node.config.topics.max_partitions, per_node: node.config.topics.max_partitions_per_node }
    }
}

/// Refuses a topic's `placement` when a node would hold more than `max` partitions with it
/// (`held`: what the node holds of other topics).
pub(crate) fn check_partitions_per_node(placement: &[i32], held: impl Fn(i32) -> usize, max: i32) -> Result<(), String> {
    let mut here: BTreeMap<i32, usize> = BTreeMap::new();
    for &node in placement {
        *here.entry(node).or_default() += 1;
    }
    for (node, count) in here {
        let total = held(node) + count;
        if total > max.max(0) as usize {
            return Err(format!("node {node} would hold {total} partitions, more than topics.max_partitions_per_node ({max})"));
        }
    }
    Ok(())
}

/// Why a topic change was not made. Travels back to the node that forwarded it.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum WriteError {
    /// This node does not lead the metadata group; the leader, if known, is named.
    #[error("this node is not the controller (the metadata group's leader is {0:?})")]
    NotLeader(Option<u64>),
    #[error("the controller (node {node}) could not be reached: {reason}")]
    Unreachable { node: u64, reason: String },
    #[error("the topic change was not committed within {0:?}")]
    Timeout(Duration),
    #[error("the metadata group failed: {0}")]
    Failed(String),
}

/// Chooses the node of each partition in `range`: round-robin over the cluster's nodes (in id
/// order) from a starting node derived from the topic id, as partitions spread over shards.
pub fn place(node: &Node, topic_id: Uuid, range: std::ops::Range<i32>) -> Vec<i32> {
    let nodes: Vec<i32> = node.brokers.keys().copied().collect();
    range.map(|p| nodes[super::catalog::shard_for(topic_id, p, nodes.len())]).collect()
}

/// The running metadata group on this node.
pub struct MetadataGroup {
    raft: Raft,
    election: Rc<Election>,
    node: Arc<Node>,
}

impl std::fmt::Debug for MetadataGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataGroup").field("leader", &self.raft.metrics().borrow().current_leader).finish()
    }
}

impl MetadataGroup {
    /// Starts the group on its shard. A single node returns once it leads its one-voter group;
    /// in a cluster the group elects a leader in the background.
    pub async fn start<N: openraft::RaftNetworkFactory<TypeConfig> + Canvass + Clone + 'static>(
        shard: &Rc<Shard>,
        members: BTreeMap<u64, BasicNode>,
        network: N,
    ) -> Result<Rc<MetadataGroup>, String> {
        let node = shard.node.clone();
        let me = node.node_id as u64;
        let preferred = *members.keys().next().ok_or("the metadata group has no members")?;
        let dir = node.metadata_raft_dir();
        let store = crate::raft::RaftLogStore::open(&dir, crate::raft::LogStoreConfig::default())
            .await
            .map_err(|e| format!("cannot open its Raft log in {}: {e}", dir.display()))?;
        let config = crate::raft::metadata_config().map_err(|e| format!("Raft config: {e}"))?;
        let machine = MetadataStateMachine { node: node.clone(), current: None };
        let log_reader = store.reader();
        let raft = Raft::new(me, config, network.clone(), store, machine).await.map_err(|e| format!("cannot start its Raft group: {e}"))?;
        crate::raft::join_group(&raft, me, &members, STARTUP_TIMEOUT).await?;
        let election = Election::start(METADATA_GROUP, raft.clone(), log_reader, preferred, network);
        let group = Rc::new(MetadataGroup { raft, election, node });
        tokio::task::spawn_local(group.clone().follow_leader());
        if members.len() == 1 {
            group
                .raft
                .wait(Some(STARTUP_TIMEOUT))
                .metrics(|m| m.current_leader == Some(me), "leads")
                .await
                .map_err(|e| format!("did not take the lead of its one-voter Raft group: {e}"))?;
        }
        Ok(group)
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The group's Raft with its elections (where peers' RPCs arrive).
    pub fn election(&self) -> &Rc<Election> {
        &self.election
    }

    /// Publishes the group's leader to every shard (Metadata names it as the controller).
    async fn follow_leader(self: Rc<Self>) {
        let mut metrics = self.raft.metrics();
        loop {
            let leader = metrics.borrow().current_leader.map_or(-1, |l| l as i64);
            if self.node.metadata_leader.swap(leader, Ordering::AcqRel) != leader && leader >= 0 {
                crate::metrics::raft_leader_changed("metadata".into());
            }
            if metrics.changed().await.is_err() {
                self.node.metadata_leader.store(-1, Ordering::Release);
                return;
            }
        }
    }

    /// Writes an encoded [`TopicChange`] as this group's leader. Returns once it is committed and
    /// applied here. What does not decode (it may come from a peer) is refused before it reaches
    /// the log.
    pub async fn write(&self, change: Bytes) -> Result<LogId, WriteError> {
        if change.len() > crate::raft::MAX_COMMAND_BYTES {
            let limit = crate::raft::MAX_COMMAND_BYTES;
            return Err(WriteError::Failed(format!("the change takes {} bytes, more than the {limit} one entry may", change.len())));
        }
        let decoded = TopicChange::decode(&change).map_err(WriteError::Failed)?;
        decoded.validate_on(&self.node).map_err(|e| WriteError::Failed(format!("invalid topic change: {e}")))?;
        // A new topic meets today's minimums too, and a DeleteAcls today's bound on its filters
        // (entries already in the log are only validated).
        match &decoded {
            TopicChange::Create { config, .. } => {
                config.check_new_topic().map_err(|e| WriteError::Failed(format!("invalid topic change: {e}")))?
            }
            TopicChange::DeleteAcls { filters, .. } if filters.len() > MAX_DELETE_FILTERS => {
                return Err(WriteError::Failed(format!("invalid topic change: more than {MAX_DELETE_FILTERS} ACL filters")))
            }
            _ => {}
        }
        match tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(Command::new(change))).await {
            Ok(Ok(written)) => Ok(written.log_id),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to)))) => Err(WriteError::NotLeader(to.leader_id)),
            Ok(Err(e)) => Err(WriteError::Failed(e.to_string())),
            Err(_) => Err(WriteError::Timeout(WRITE_TIMEOUT)),
        }
    }

    /// Makes a topic change: writes it if this node leads, otherwise forwards it to the leader and
    /// waits until it is applied here as well. While there is no leader (an election, the first
    /// moments of a cluster) or the leader cannot be reached, it tries again until
    /// [`WRITE_TIMEOUT`]; a change that was written but whose answer was lost is harmless to
    /// write again (its entry is then skipped when applied).
    pub async fn propose(&self, change: &TopicChange) -> Result<(), WriteError> {
        let encoded = Bytes::from(serde_json::to_vec(change).map_err(|e| WriteError::Failed(e.to_string()))?);
        let me = self.node.node_id as u64;
        let deadline = tokio::time::Instant::now() + WRITE_TIMEOUT;
        loop {
            let failed = match self.write(encoded.clone()).await {
                Ok(_) => return Ok(()),
                Err(WriteError::NotLeader(Some(leader))) if leader != me => {
                    match self.node.peers.propose::<Result<LogId, WriteError>>(leader, encoded.clone()).await {
                        Ok(Ok(log_id)) => return self.wait_applied(log_id, deadline).await,
                        Ok(Err(e)) => e,
                        Err(reason) => WriteError::Unreachable { node: leader, reason },
                    }
                }
                Err(e) => e,
            };
            let retry = matches!(failed, WriteError::NotLeader(_) | WriteError::Unreachable { .. });
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !retry || remaining.is_zero() {
                return Err(failed);
            }
            tracing::debug!(error = %failed, "topic change not made yet; trying again");
            if failed == WriteError::NotLeader(None) {
                let _ = self.raft.wait(Some(remaining)).metrics(|m| m.current_leader.is_some(), "a metadata leader").await;
            } else {
                tokio::time::sleep(Duration::from_millis(50).min(remaining)).await;
            }
        }
    }

    async fn wait_applied(&self, log_id: LogId, deadline: tokio::time::Instant) -> Result<(), WriteError> {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_secs(1));
        self.raft
            .wait(Some(remaining))
            .applied_index_at_least(Some(log_id.index), "topic change applied")
            .await
            .map(drop)
            .map_err(|_| WriteError::Timeout(WRITE_TIMEOUT))
    }

    /// Hands the group's leadership to another node if this one leads it (clean shutdown of a
    /// cluster node; see [`crate::raft::hand_off`]).
    pub async fn hand_off(&self) {
        let me = self.node.node_id as u64;
        if self.raft.metrics().borrow().current_leader != Some(me) {
            return;
        }
        match crate::raft::hand_off(&self.election, me, METADATA_GROUP, &self.node.peers).await {
            Ok(to) => tracing::info!(to, "handed metadata leadership over"),
            Err(why) => {
                tracing::info!(%why, "could not hand metadata leadership over; the others will elect a leader")
            }
        }
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "metadata group did not shut down cleanly");
        }
    }
}

/// Applies one topic change to this node's catalog and partitions. A change that no longer fits
/// (a topic created twice by racing requests, grown or deleted after it was deleted) is skipped:
/// every node skips it alike, and the node that proposed it reads the outcome from its catalog.
async fn apply_change(node: &Arc<Node>, change: TopicChange, log_id: Option<LogId>) {
    let catalog = &node.catalog;
    if let Err(e) = change.validate_on(node) {
        tracing::error!(?log_id, error = %e, "skipped an invalid topic change");
        return;
    }
    match change {
        TopicChange::Create { name, id, config, placement } => {
            if catalog.get_by_id(id).is_some() || catalog.get(&name).is_some() {
                tracing::debug!(topic = %name, ?log_id, "skipped creating a topic that exists");
                return;
            }
            let count = placement.len() as i32;
            let topic = catalog.build(name, id, config, placement, None);
            open_local(node, &topic, 0..count).await;
            catalog.publish(topic.clone());
            tracing::info!(topic = %topic.name, partitions = count, here = local_count(node, &topic), "created topic");
        }
        TopicChange::AddPartitions { id, placement } => {
            let Some(current) = catalog.get_by_id(id).filter(|t| !super::is_internal(&t.name)) else {
                return;
            };
            let from = current.partitions.len() as i32;
            let to = placement.len() as i32;
            if to <= from {
                return;
            }
            let grown = catalog.build(current.name.clone(), id, current.config.clone(), placement, Some(&current));
            open_local(node, &grown, from..to).await;
            catalog.publish(grown);
            tracing::info!(topic = %current.name, from, to, "added partitions");
        }
        TopicChange::Delete { id } => {
            let Some(topic) = catalog.get_by_id(id).filter(|t| !super::is_internal(&t.name)) else {
                return;
            };
            catalog.unpublish(&topic);
            // The catalog is written before the files go, so a crash in between leaves only
            // orphaned files (removed when the name is used again), never a topic without them.
            persist(node, log_id);
            close_local(node, &topic).await;
            tracing::info!(topic = %topic.name, "deleted topic");
        }
        TopicChange::Configure { id, config } => {
            let Some(current) = catalog.get_by_id(id).filter(|t| !super::is_internal(&t.name)) else {
                return;
            };
            let configured = catalog.build(current.name.clone(), id, config, current.placement(), Some(&current));
            catalog.publish(configured.clone());
            reconfigure_local(node, &configured).await;
            tracing::info!(topic = %configured.name, "changed topic configs");
        }
        TopicChange::AllocateProducerIds { node: to } => {
            let (start, end) = catalog.producer_ids.allocate(to);
            tracing::debug!(node = to, start, end, "allocated a block of producer ids");
        }
        TopicChange::ConfigureGroup { group, config } => {
            catalog.group_configs.set(&group, config);
            tracing::info!(%group, ?config, "changed group configs");
        }
        // A count at info: one request may hold thousands; the bindings themselves at debug.
        TopicChange::CreateAcls { id, acls } => {
            let added = catalog.acls.add(&acls);
            match &added {
                Ok(()) => {
                    tracing::info!(count = acls.len(), held = catalog.acls.all().len(), "created ACLs");
                    tracing::debug!(?acls, "created ACLs");
                }
                Err(reason) => tracing::warn!(count = acls.len(), held = catalog.acls.all().len(), %reason, "refused ACLs"),
            }
            catalog.acl_creations.complete_added(id, added);
            catalog.touch();
        }
        TopicChange::DeleteAcls { id, filters } => {
            let matched = catalog.acls.remove_matching(&filters);
            match &matched {
                Ok(removed) => {
                    tracing::info!(filters = filters.len(), held = catalog.acls.all().len(), "deleted ACLs");
                    tracing::debug!(?removed, "deleted ACLs");
                }
                Err(reason) => tracing::warn!(filters = filters.len(), %reason, "refused an ACL deletion"),
            }
            catalog.acl_deletions.complete(id, matched);
            catalog.touch();
        }
    }
}

fn local_count(node: &Node, topic: &Topic) -> usize {
    topic.partitions.iter().filter(|p| p.leader == node.node_id).count()
}

/// Creates the partitions in `range` placed on this node: one job per owning shard, the shards
/// in parallel, each yielding to its connections between batches. A partition that cannot be
/// created is logged and left out: produce and fetch to it then fail, and the node's other topics
/// carry on.
async fn open_local(node: &Arc<Node>, topic: &Arc<Topic>, range: std::ops::Range<i32>) {
    let jobs = local_by_shard(node, topic, range).into_iter().map(|(shard, indexes)| {
        let owned = topic.clone();
        node.mesh.run_on(shard, move |owner| async move {
            let mut failed = Vec::new();
            for batch in indexes.chunks(CREATE_BATCH) {
                for &index in batch {
                    if let Err(e) = super::open_partition(&owner, &owned, index) {
                        failed.push((index, e.to_string()));
                    }
                }
                tokio::task::yield_now().await;
            }
            failed
        })
    });
    for outcome in futures_util::future::join_all(jobs).await {
        let failed = outcome.unwrap_or_else(|e| vec![(-1, e.to_string())]);
        for (partition, error) in failed {
            tracing::error!(topic = %topic.name, partition, %error, "cannot create partition");
        }
    }
}

/// The partitions of `topic` in `range` that this node holds, by the shard that owns each.
fn local_by_shard(node: &Node, topic: &Topic, range: std::ops::Range<i32>) -> BTreeMap<ShardId, Vec<i32>> {
    let mut by_shard: BTreeMap<ShardId, Vec<i32>> = BTreeMap::new();
    for index in range {
        if let Some(meta) = topic.partition(index).filter(|meta| meta.leader == node.node_id) {
            by_shard.entry(meta.shard).or_default().push(index);
        }
    }
    by_shard
}

/// Partitions a shard creates between two turns of serving its connections.
const CREATE_BATCH: usize = 256;

/// Gives the partitions of `topic` that this node holds the storage settings of its configs.
/// Retention and segment rolls follow at once; a new index interval applies from the next segment.
async fn reconfigure_local(node: &Arc<Node>, topic: &Arc<Topic>) {
    let config = topic.config.log_config(&node.config.topics.defaults, &node.config.storage);
    let all = 0..topic.partitions.len() as i32;
    let jobs = local_by_shard(node, topic, all).into_iter().map(|(shard, indexes)| {
        let (id, config) = (topic.id, config);
        node.mesh.run_on(shard, move |owner| async move {
            for index in indexes {
                if let Some(partition) = owner.partition(id, index) {
                    partition.log.borrow_mut().set_config(config);
                }
            }
        })
    });
    for outcome in futures_util::future::join_all(jobs).await {
        if let Err(e) = outcome {
            tracing::error!(topic = %topic.name, error = %e, "cannot change the storage settings of a partition");
        }
    }
}

/// Closes and removes the partitions of a deleted topic that this node holds.
async fn close_local(node: &Arc<Node>, topic: &Topic) {
    for (index, meta) in topic.partitions.iter().enumerate() {
        if meta.leader != node.node_id {
            continue;
        }
        let id = topic.id;
        let index = index as i32;
        let dir = node.partition_dir(&topic.name, index);
        let closed = node
            .mesh
            .run_on(meta.shard, move |owner| async move {
                owner.remove_partition(id, index);
                super::discard_dir(&dir)
            })
            .await;
        if let Ok(Err(e)) = closed {
            tracing::warn!(topic = %topic.name, partition = index, error = %e, "could not remove a deleted partition's files");
        }
    }
}

/// Writes the catalog with what has been applied. A failure is logged: the catalog in memory is
/// right, and a restart re-applies the entries the file misses.
fn persist(node: &Node, applied: Option<LogId>) {
    let (_, membership) = node.catalog.applied();
    if let Err(e) = node.catalog.persist_applied(applied, membership) {
        tracing::error!(error = %e, "cannot write the topic catalog");
    }
}

fn sm_error(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

type Meta = SnapshotMeta<u64, BasicNode>;

/// The metadata group's state machine: this node's topic catalog.
pub struct MetadataStateMachine {
    node: Arc<Node>,
    /// The last snapshot built or installed.
    current: Option<(Meta, Rc<Vec<u8>>)>,
}

impl std::fmt::Debug for MetadataStateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataStateMachine").field("applied", &self.node.catalog.applied().0).finish()
    }
}

/// A snapshot already taken when the builder was made.
#[derive(Debug)]
pub struct CatalogSnapshot(Option<Snapshot<TypeConfig>>);

impl RaftSnapshotBuilder<TypeConfig> for CatalogSnapshot {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        self.0.take().ok_or_else(|| sm_error("snapshot builder used twice"))
    }
}

impl RaftStateMachine<TypeConfig> for MetadataStateMachine {
    type SnapshotBuilder = CatalogSnapshot;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok(self.node.catalog.applied())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        for entry in entries {
            let catalog = &self.node.catalog;
            match entry.payload {
                EntryPayload::Blank => persist(&self.node, Some(entry.log_id)),
                EntryPayload::Normal(command) => {
                    // `write` lets only topic changes in; anything else is skipped alike everywhere.
                    match TopicChange::decode(command.payload()) {
                        Ok(change) => apply_change(&self.node, change, Some(entry.log_id)).await,
                        Err(e) => {
                            tracing::error!(log_id = %entry.log_id, error = %e, "skipped an undecodable metadata entry")
                        }
                    }
                    persist(&self.node, Some(entry.log_id));
                }
                EntryPayload::Membership(membership) => {
                    let stored = StoredMembership::new(Some(entry.log_id), membership);
                    catalog.persist_applied(Some(entry.log_id), stored).map_err(sm_error)?;
                }
            }
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> CatalogSnapshot {
        let (last_log_id, last_membership) = self.node.catalog.applied();
        let data = match serde_json::to_vec(&self.node.catalog.snapshot()) {
            Ok(data) => Rc::new(data),
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the catalog for a snapshot");
                return CatalogSnapshot(None);
            }
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id: format!("{}-{}", last_log_id.map_or(0, |l| l.leader_id.term), last_log_id.map_or(0, |l| l.index)),
        };
        self.current = Some((meta.clone(), data.clone()));
        CatalogSnapshot(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data.as_ref().clone())) }))
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<Cursor<Vec<u8>>>) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let wanted = CatalogSnapshotData::parse(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e.to_string())))?;
        self.node.catalog.producer_ids.replace(wanted.producer_ids);
        self.node.catalog.group_configs.replace(wanted.group_configs);
        self.node.catalog.acls.replace(wanted.acls);
        install(&self.node, &wanted.topics, meta).await.map_err(sm_error)?;
        self.current = Some((meta.clone(), Rc::new(data)));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self
            .current
            .as_ref()
            .map(|(meta, data)| Snapshot { meta: meta.clone(), snapshot: Box::new(Cursor::new(data.as_ref().clone())) }))
    }
}

/// Makes the catalog match a snapshot: topics it lacks are deleted, new ones created, grown ones
/// grown, reconfigured ones given their configs. The catalog is written before deleted topics' files go.
async fn install(node: &Arc<Node>, wanted: &[StoredTopic], meta: &Meta) -> std::io::Result<()> {
    let catalog = &node.catalog;
    let keep: HashSet<Uuid> = wanted.iter().map(|t| t.id).collect();
    let mut gone = Vec::new();
    for t in catalog.replicated() {
        if !keep.contains(&t.id) {
            if let Some(topic) = catalog.get_by_id(t.id) {
                catalog.unpublish(&topic);
                gone.push(topic);
            }
        }
    }
    for t in wanted {
        let config = t.config.clone();
        let changes = match catalog.get_by_id(t.id) {
            None => vec![TopicChange::Create { name: t.name.clone(), id: t.id, config, placement: t.placement.clone() }],
            Some(current) => {
                let mut changes = Vec::new();
                if current.partitions.len() < t.placement.len() {
                    changes.push(TopicChange::AddPartitions { id: t.id, placement: t.placement.clone() });
                }
                if current.config != t.config {
                    changes.push(TopicChange::Configure { id: t.id, config });
                }
                changes
            }
        };
        for change in changes {
            apply_change(node, change, meta.last_log_id).await;
        }
    }
    catalog.persist_applied(meta.last_log_id, meta.last_membership.clone())?;
    for topic in gone {
        close_local(node, &topic).await;
    }
    tracing::info!(topics = wanted.len(), applied = ?meta.last_log_id, "installed a metadata snapshot");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, placement: Vec<i32>) -> TopicChange {
        TopicChange::Create { name: name.into(), id: Uuid::nil(), config: TopicConfig::default(), placement }
    }

    #[test]
    fn a_replicated_change_is_checked_as_its_request_was() {
        let nodes = |n: i32| (0..3).contains(&n);
        let limits = PartitionLimits { per_topic: 10, per_node: 100 };
        let none = |_: i32| 0;
        assert_eq!(create("orders", vec![0, 1, 2]).validate(&limits, nodes, none), Ok(()));
        for bad in ["../x", "", "..", "a/b", "__consumer_offsets"] {
            assert!(create(bad, vec![0]).validate(&limits, nodes, none).is_err(), "{bad:?} accepted");
        }
        assert!(create("t", vec![]).validate(&limits, nodes, none).is_err(), "no partitions");
        assert!(create("t", vec![0; 11]).validate(&limits, nodes, none).is_err(), "over topics.max_partitions");
        assert!(create("t", vec![0, 7]).validate(&limits, nodes, none).is_err(), "a partition on an unknown node");
        let config = TopicConfig::from_pairs([("retention.ms", Some("1000"))]).unwrap();
        let mut bad_config: serde_json::Value = serde_json::to_value(&config).unwrap();
        bad_config["retention.ms"] = "soon".into();
        let config: TopicConfig = serde_json::from_value(bad_config).unwrap();
        let change = TopicChange::Create { name: "t".into(), id: Uuid::nil(), config: config.clone(), placement: vec![0] };
        assert!(change.validate(&limits, nodes, none).is_err(), "an invalid config value");
        assert!(TopicChange::Configure { id: Uuid::nil(), config }.validate(&limits, nodes, none).is_err(), "an invalid config value");
        let good = TopicConfig::from_pairs([("retention.ms", Some("1000"))]).unwrap();
        assert_eq!(TopicChange::Configure { id: Uuid::nil(), config: good }.validate(&limits, nodes, none), Ok(()));
        assert!(TopicChange::AddPartitions { id: Uuid::nil(), placement: vec![0, 9] }.validate(&limits, nodes, none).is_err());
        assert_eq!(TopicChange::Delete { id: Uuid::nil() }.validate(&limits, nodes, none), Ok(()));
    }

    #[test]
    fn no_node_holds_more_than_its_partition_budget() {
        let nodes = |n: i32| (0..3).contains(&n);
        let limits = PartitionLimits { per_topic: 10, per_node: 100 };
        let held = |n: i32| if n == 1 { 98 } else { 0 };
        assert_eq!(create("t", vec![0, 1, 2, 1]).validate(&limits, nodes, held), Ok(()), "node 1 at exactly 100");
        let refused = create("t", vec![1, 1, 1]).validate(&limits, nodes, held).unwrap_err();
        assert!(refused.contains("node 1 would hold 101 partitions"), "{refused}");
        let grow = TopicChange::AddPartitions { id: Uuid::nil(), placement: vec![0, 1, 1, 1] };
        assert!(grow.validate(&limits, nodes, held).is_err());
    }

    #[test]
    fn a_create_acls_entry_written_before_it_had_an_id_still_applies() {
        let old = TopicChange::decode(br#"{"CreateAcls":{"acls":[]}}"#).unwrap();
        assert!(matches!(&old, TopicChange::CreateAcls { id, acls } if id.is_nil() && acls.is_empty()), "{old:?}");
    }
}
