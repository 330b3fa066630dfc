//! Cluster metadata: topics and their partitions, producer ids, and the operations that change
//! them (create, delete, grow a topic).
//!
//! A change is written to the catalog first, then every affected partition is opened or closed on
//! the shard that owns it, through the mesh.

pub mod catalog;
pub mod producer_ids;
pub mod topic_config;

use std::rc::Rc;
use std::sync::Arc;

use kafka_protocol::ResponseError;

use self::catalog::Topic;
use self::topic_config::{validate_topic_name, TopicConfig, TopicConfigError};
use crate::clock::now_ms;
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
            .insert(OFFSETS_TOPIC, partitions, TopicConfig::internal_offsets())
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
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error(transparent)]
    InvalidConfig(#[from] TopicConfigError),
    #[error("this server does not host this topic")]
    Unknown,
    #[error("topic '{0}' is internal")]
    Internal(String),
    #[error("cannot persist the topic catalog: {0}")]
    Catalog(#[from] std::io::Error),
    #[error("cannot open partition storage: {0}")]
    Storage(#[from] StorageError),
    #[error(transparent)]
    ShardStopped(#[from] ShardStopped),
}

impl TopicError {
    pub fn error_code(&self) -> ResponseError {
        match self {
            TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
            TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
            TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
            TopicError::Unknown => ResponseError::UnknownTopicOrPartition,
            TopicError::Internal(_) => ResponseError::InvalidRequest,
            TopicError::Catalog(_) | TopicError::Storage(_) => ResponseError::KafkaStorageError,
            TopicError::ShardStopped(_) => ResponseError::RequestTimedOut,
        }
    }
}

/// Checks a partition count against the node's limit.
pub fn check_partition_count(shard: &Shard, count: i32) -> Result<(), TopicError> {
    let max = shard.node.config.topics.max_partitions;
    if count < 1 || count > max {
        return Err(TopicError::InvalidPartitions(format!("number of partitions must be between 1 and {max}, got {count}")));
    }
    Ok(())
}

/// Creates a topic: validates, records it in the catalog, opens its partitions on their shards.
/// With `validate_only` nothing is changed.
pub async fn create_topic(
    shard: &Rc<Shard>,
    name: &str,
    partitions: i32,
    config: TopicConfig,
    validate_only: bool,
) -> Result<Option<Arc<Topic>>, TopicError> {
    validate_topic_name(name).map_err(TopicError::InvalidName)?;
    check_partition_count(shard, partitions)?;
    let catalog = &shard.node.catalog;
    let _change = catalog.lock().await;
    if catalog.get(name).is_some() {
        return Err(TopicError::AlreadyExists(name.to_string()));
    }
    if validate_only {
        return Ok(None);
    }
    let topic = catalog.insert(name, partitions, config)?;
    open_partitions(shard, &topic, 0..partitions).await?;
    tracing::info!(topic = name, partitions, "created topic");
    Ok(Some(topic))
}

/// Adds partitions to a topic, up to `count` in total.
pub async fn grow_topic(shard: &Rc<Shard>, name: &str, count: i32, validate_only: bool) -> Result<(), TopicError> {
    let catalog = &shard.node.catalog;
    let _change = catalog.lock().await;
    let topic = catalog.get(name).ok_or(TopicError::Unknown)?;
    if is_internal(name) {
        return Err(TopicError::Internal(name.to_string()));
    }
    let current = topic.partitions.len() as i32;
    if count <= current {
        return Err(TopicError::InvalidPartitions(format!("topic currently has {current} partitions, which is higher than or equal to the requested {count}")));
    }
    check_partition_count(shard, count)?;
    if validate_only {
        return Ok(());
    }
    let grown = catalog.set_partition_count(&topic, count)?;
    open_partitions(shard, &grown, current..count).await?;
    tracing::info!(topic = name, from = current, to = count, "added partitions");
    Ok(())
}

/// Deletes a topic: removes it from the catalog, then closes and deletes its partitions.
pub async fn delete_topic(shard: &Rc<Shard>, topic: &Arc<Topic>) -> Result<(), TopicError> {
    if is_internal(&topic.name) {
        return Err(TopicError::Internal(topic.name.clone()));
    }
    let catalog = &shard.node.catalog;
    let _change = catalog.lock().await;
    match catalog.get(&topic.name) {
        Some(current) if current.id == topic.id => {}
        _ => return Err(TopicError::Unknown),
    }
    catalog.remove(topic)?;
    let mut pending = Vec::new();
    for (index, meta) in topic.partitions.iter().enumerate() {
        let id = topic.id;
        let dir = shard.node.partition_dir(&topic.name, index as i32);
        let reply = shard.node.mesh.call(shard, meta.shard, move |owner| {
            owner.remove_partition(id, index as i32);
            discard_dir(&dir)
        });
        pending.push(reply.await);
    }
    for reply in pending {
        if let Err(e) = reply.await? {
            tracing::warn!(topic = %topic.name, error = %e, "could not remove a deleted partition's files");
        }
    }
    tracing::info!(topic = %topic.name, "deleted topic");
    Ok(())
}

/// Opens (creating) partitions `range` of `topic` on their owning shards.
async fn open_partitions(shard: &Rc<Shard>, topic: &Arc<Topic>, range: std::ops::Range<i32>) -> Result<(), TopicError> {
    let mut pending = Vec::new();
    for index in range {
        let meta = topic.partition(index).expect("partition in range");
        let topic = topic.clone();
        let reply = shard.node.mesh.call(shard, meta.shard, move |owner| open_partition(owner, &topic, index));
        pending.push(reply.await);
    }
    for reply in pending {
        reply.await??;
    }
    Ok(())
}

/// Creates a new partition's log on its owning shard. Leftover files under the same directory
/// name (from a topic deleted during a crash) are moved aside first, never reused.
fn open_partition(owner: &Rc<Shard>, topic: &Topic, index: i32) -> Result<(), StorageError> {
    let node = &owner.node;
    let dir = node.partition_dir(&topic.name, index);
    if dir.exists() {
        discard_dir(&dir)?;
    }
    let config = topic.config.log_config(&node.config.topics.defaults);
    let log = PartitionLog::create(&dir, config, now_ms())?;
    let meta = topic.partition(index).expect("partition exists");
    owner.add_partition(topic.id, index, Partition::new(log, meta.end_offset.clone(), node.config.storage.flush_messages));
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
