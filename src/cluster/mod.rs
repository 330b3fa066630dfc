//! Cluster metadata: topics and their partitions, producer ids, and the operations that change
//! them (create, delete, grow a topic, change its configs).
//!
//! A change is checked against this node's catalog, then proposed to the metadata Raft group
//! ([`metadata_group`]); every node applies it, opening or closing the partitions placed on it on
//! the shards that own them.

pub mod acls;
pub mod catalog;
pub mod group_config;
pub mod metadata_group;
pub mod producer_ids;
pub mod topic_config;

use std::rc::Rc;
use std::sync::Arc;

use kafka_protocol::ResponseError;

use self::catalog::Topic;
use self::metadata_group::{TopicChange, WriteError};
use self::topic_config::{validate_topic_name, TopicConfig, TopicConfigError};
use crate::clock::now_ms;
use crate::coordinator::consumer_group::GroupOverrides;
use crate::node::Node;
use crate::runtime::{Shard, ShardStopped};
use crate::storage::{Partition, PartitionLog, StorageError};

/// The internal topic holding the group coordinator's records, one partition per coordinator
/// partition, in Kafka's layout.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Creates `__consumer_offsets` on first start, and refuses a data directory whose partition
/// count differs from `groups.offsets_partitions` (groups would map to other partitions).
pub fn ensure_offsets_topic(catalog: &catalog::Catalog, partitions: i32) -> Result<(), String> {
    match catalog.get(OFFSETS_TOPIC) {
        Some(t) if t.partitions.len() as i32 == partitions => Ok(()),
        Some(t) => Err(format!(
            "invalid config: groups.offsets_partitions: this data directory was created with {} (groups map to partitions by it), got {partitions}",
            t.partitions.len()
        )),
        None => catalog
            .insert_local(OFFSETS_TOPIC, partitions, TopicConfig::internal_offsets())
            .map(drop)
            .map_err(|e| format!("cannot create {OFFSETS_TOPIC}: {e}")),
    }
}

/// Topics clients may read but not write, delete or grow.
pub fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC
}

/// Why a topic operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic '{0}' already exists")]
    AlreadyExists(String),
    #[error("{0}")]
    InvalidName(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    /// A limit of this deployment (`topics.max_partitions_per_node`).
    #[error("{0}")]
    PolicyViolation(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error(transparent)]
    InvalidConfig(#[from] TopicConfigError),
    #[error("this server does not host this topic")]
    Unknown,
    /// The principal lacks the operation on the topic (`[authorization]`).
    #[error("Authorization failed.")]
    Unauthorized,
    #[error("topic '{0}' is internal")]
    Internal(String),
    #[error(transparent)]
    NotController(metadata_group::WriteError),
    #[error(transparent)]
    Write(#[from] metadata_group::WriteError),
    #[error("cannot open partition storage: {0}")]
    Storage(#[from] StorageError),
    #[error(transparent)]
    ShardStopped(#[from] ShardStopped),
    /// The upstream cluster refused the change.
    #[error("{message}")]
    Upstream { code: i16, message: String },
    #[error(transparent)]
    UpstreamUnavailable(crate::upstream::UpstreamError),
}

impl TopicError {
    pub fn error_code(&self) -> ResponseError {
        match self {
            TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
            TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
            TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            TopicError::PolicyViolation(_) => ResponseError::PolicyViolation,
            TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
            TopicError::Unknown => ResponseError::UnknownTopicOrPartition,
            TopicError::Unauthorized => ResponseError::TopicAuthorizationFailed,
            TopicError::Internal(_) => ResponseError::InvalidRequest,
            TopicError::NotController(_) => ResponseError::NotController,
            TopicError::Write(metadata_group::WriteError::Timeout(_)) => ResponseError::RequestTimedOut,
            TopicError::Write(_) => ResponseError::UnknownServerError,
            TopicError::Storage(_) => ResponseError::KafkaStorageError,
            TopicError::ShardStopped(_) => ResponseError::RequestTimedOut,
            TopicError::Upstream { code, .. } => ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError),
            TopicError::UpstreamUnavailable(_) => ResponseError::RequestTimedOut,
        }
    }
}

/// Checks a partition count against the node's limit.
pub fn check_partition_count(node: &Node, count: i32) -> Result<(), TopicError> {
    let max = node.config.topics.max_partitions;
    if count < 1 || count > max {
        return Err(TopicError::InvalidPartitions(format!("number of partitions must be between 1 and {max}, got {count}")));
    }
    Ok(())
}

/// Refuses a topic's placement that takes a node past `topics.max_partitions_per_node`.
fn check_node_budget(node: &Node, topic: uuid::Uuid, placement: &[i32]) -> Result<(), TopicError> {
    let held = node.catalog.partitions_per_node(topic);
    let max = node.config.topics.max_partitions_per_node;
    metadata_group::check_partitions_per_node(placement, |n| held.get(&n).copied().unwrap_or(0), max).map_err(|e| {
        crate::metrics::limit_reached(crate::metrics::labels::LIMIT_PARTITIONS_PER_NODE);
        TopicError::PolicyViolation(e)
    })
}

/// Creates a topic: validates it, then has the metadata group create it on every node. With
/// `validate_only` nothing is changed.
pub async fn create_topic(
    node: &Arc<Node>,
    name: &str,
    partitions: i32,
    config: TopicConfig,
    validate_only: bool,
) -> Result<Option<Arc<Topic>>, TopicError> {
    validate_topic_name(name).map_err(TopicError::InvalidName)?;
    check_partition_count(node, partitions)?;
    if let Some(upstream) = &node.upstream {
        if is_internal(name) {
            return Err(TopicError::Internal(name.to_string()));
        }
        crate::upstream::admin::create_topic(upstream, name, partitions, &config, validate_only).await?;
        return Ok(if validate_only { None } else { node.catalog.get(name) });
    }
    let _change = node.catalog.lock().await;
    if node.catalog.get(name).is_some() {
        return Err(TopicError::AlreadyExists(name.to_string()));
    }
    let id = uuid::Uuid::new_v4();
    let placement = metadata_group::place(node, id, 0..partitions);
    check_node_budget(node, id, &placement)?;
    if validate_only {
        return Ok(None);
    }
    propose(node, TopicChange::Create { name: name.to_string(), id, config, placement }).await?;
    match node.catalog.get(name) {
        Some(topic) if topic.id == id => Ok(Some(topic)),
        // A request on another node created it first.
        _ => Err(TopicError::AlreadyExists(name.to_string())),
    }
}

/// Adds partitions to a topic, up to `count` in total, placed over the nodes like a new topic's.
pub async fn grow_topic(node: &Arc<Node>, name: &str, count: i32, validate_only: bool) -> Result<(), TopicError> {
    if let Some(upstream) = &node.upstream {
        if is_internal(name) {
            return Err(TopicError::Internal(name.to_string()));
        }
        check_partition_count(node, count)?;
        return crate::upstream::admin::grow_topic(upstream, name, count, validate_only).await;
    }
    let _change = node.catalog.lock().await;
    let topic = node.catalog.get(name).ok_or(TopicError::Unknown)?;
    if is_internal(name) {
        return Err(TopicError::Internal(name.to_string()));
    }
    let current = topic.partitions.len() as i32;
    if count <= current {
        return Err(TopicError::InvalidPartitions(format!(
            "topic currently has {current} partitions, which is higher than or equal to the requested {count}"
        )));
    }
    check_partition_count(node, count)?;
    let mut placement = topic.placement();
    placement.extend(metadata_group::place(node, topic.id, current..count));
    check_node_budget(node, topic.id, &placement)?;
    if validate_only {
        return Ok(());
    }
    propose(node, TopicChange::AddPartitions { id: topic.id, placement }).await?;
    match node.catalog.get_by_id(topic.id) {
        Some(grown) if grown.partitions.len() as i32 >= count => Ok(()),
        _ => Err(TopicError::Unknown),
    }
}

/// Deletes a topic: the metadata group removes it from every node, each closing and deleting the
/// partitions it holds.
pub async fn delete_topic(node: &Arc<Node>, topic: &Arc<Topic>) -> Result<(), TopicError> {
    if is_internal(&topic.name) {
        return Err(TopicError::Internal(topic.name.clone()));
    }
    if let Some(upstream) = &node.upstream {
        return crate::upstream::admin::delete_topic(upstream, &topic.name).await;
    }
    let _change = node.catalog.lock().await;
    match node.catalog.get(&topic.name) {
        Some(current) if current.id == topic.id => {}
        _ => return Err(TopicError::Unknown),
    }
    propose(node, TopicChange::Delete { id: topic.id }).await
}

/// Changes a topic's configs to what `alter` makes of them, on every node. With `validate_only`
/// nothing is changed. In front of an upstream cluster a topic's configs are the upstream's, and
/// the API handlers pass the change on instead.
pub async fn configure_topic(
    node: &Arc<Node>,
    name: &str,
    alter: impl FnOnce(&TopicConfig) -> Result<TopicConfig, TopicConfigError>,
    validate_only: bool,
) -> Result<(), TopicError> {
    if is_internal(name) {
        return Err(TopicError::Internal(name.to_string()));
    }
    let _change = node.catalog.lock().await;
    let topic = node.catalog.get(name).ok_or(TopicError::Unknown)?;
    let config = alter(&topic.config)?;
    config.check_changed_from(&topic.config)?;
    if validate_only || config == topic.config {
        return Ok(());
    }
    propose(node, TopicChange::Configure { id: topic.id, config }).await
}

/// Changes a group's own configs to what `alter` makes of them, on every node. With
/// `validate_only` nothing is changed. The group need not exist (as in Kafka): its configs wait
/// for it.
pub async fn configure_group(
    node: &Arc<Node>,
    group: &str,
    alter: impl FnOnce(GroupOverrides) -> Result<GroupOverrides, (ResponseError, String)>,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    if group.is_empty() {
        return Err((ResponseError::InvalidRequest, "Group name must not be empty".to_string()));
    }
    let _change = node.catalog.lock().await;
    let current = node.catalog.group_configs.get(group);
    let config = alter(current)?;
    if validate_only || config == current {
        return Ok(());
    }
    let change = TopicChange::ConfigureGroup { group: group.to_string(), config };
    propose(node, change).await.map_err(|e| (e.error_code(), e.to_string()))
}

/// Proposes a topic change through the metadata group, on the shard that hosts it.
async fn propose(node: &Arc<Node>, change: TopicChange) -> Result<(), TopicError> {
    let outcome = node
        .mesh
        .run_on(metadata_group::METADATA_SHARD, move |owner| async move {
            match owner.metadata() {
                Some(group) => group.propose(&change).await,
                None => Err(WriteError::NotLeader(None)),
            }
        })
        .await?;
    outcome.map_err(|e| match e {
        WriteError::NotLeader(_) | WriteError::Unreachable { .. } => TopicError::NotController(e),
        e => TopicError::Write(e),
    })
}

/// Creates a new partition's log on its owning shard. Leftover files under the same directory
/// name (from a topic deleted during a crash) are moved aside first, never reused.
fn open_partition(owner: &Rc<Shard>, topic: &Topic, index: i32) -> Result<(), StorageError> {
    let node = &owner.node;
    let dir = node.partition_dir(&topic.name, index);
    if dir.exists() {
        discard_dir(&dir)?;
    }
    let config = topic.config.log_config(&node.config.topics.defaults, &node.config.storage);
    let log = PartitionLog::create(&owner.open_files, &dir, config, now_ms());
    let end_offset = node.end_offsets.publisher(topic.id, index);
    owner.add_partition(topic.id, index, Partition::new(log, end_offset, node.config.storage.flush_messages));
    Ok(())
}

/// Renames a partition directory to `<name>.<uuid>-delete` (so its name is free at once) and
/// removes it in the background. Startup removes any such directory left by a crash.
fn discard_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let doomed = dir.with_file_name(format!(
        "{}.{}{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("partition"),
        uuid::Uuid::new_v4().simple(),
        DELETED_SUFFIX
    ));
    std::fs::rename(dir, &doomed)?;
    tokio::task::spawn_blocking(move || {
        if let Err(e) = std::fs::remove_dir_all(&doomed) {
            tracing::warn!(dir = %doomed.display(), error = %e, "could not remove deleted partition");
        }
    });
    Ok(())
}

/// Suffix of partition directories awaiting removal.
pub const DELETED_SUFFIX: &str = "-delete";

/// Removes directories left behind by deletions interrupted by a crash.
pub fn remove_deleted_dirs(data_dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(DELETED_SUFFIX)) && entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}
