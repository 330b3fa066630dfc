//! The topic catalog: which topics exist, their ids, partition counts and configs.
//!
//! Read on every request by every shard, changed rarely (topic admin), so it is a concurrent map
//! of immutable `Arc<Topic>` values: a change builds a new `Topic` and swaps it in. Changes are
//! serialised by one async lock and written to `meta/topics.json` (atomically) before they are
//! acknowledged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::watch;
use uuid::Uuid;

use super::topic_config::TopicConfig;
use crate::runtime::ShardId;
use crate::storage::log::write_atomically;

/// One partition's routing facts.
#[derive(Debug)]
pub struct PartitionMeta {
    /// The shard that owns the partition's log.
    pub shard: ShardId,
    /// Log end offset published by the owning shard, watched by long-polling fetches.
    pub end_offset: Arc<watch::Sender<i64>>,
}

/// A topic. Immutable once published; changes replace it.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionMeta>,
    pub config: TopicConfig,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&PartitionMeta> {
        usize::try_from(index).ok().and_then(|i| self.partitions.get(i))
    }
}

/// Partition → shard: spread a topic's partitions round-robin from a per-topic starting shard.
pub fn shard_for(topic_id: Uuid, partition: i32, shards: usize) -> ShardId {
    let (hi, lo) = topic_id.as_u64_pair();
    let start = (hi ^ lo) % shards as u64;
    ((start + partition as u64) % shards as u64) as usize
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredTopic {
    name: String,
    id: Uuid,
    partitions: i32,
    #[serde(default)]
    config: TopicConfig,
}

/// All topics of this node. Shared by every shard.
#[derive(Debug)]
pub struct Catalog {
    by_name: DashMap<String, Arc<Topic>>,
    by_id: DashMap<Uuid, Arc<Topic>>,
    /// Serialises changes and their persistence.
    write: tokio::sync::Mutex<()>,
    path: PathBuf,
    shards: usize,
    /// Counts changes (see [`crate::coordinator::consumer::TopicView::version`]).
    version: AtomicU64,
}

impl Catalog {
    /// Loads `meta/topics.json` (an absent file is an empty catalog).
    pub fn load(meta_dir: &Path, shards: usize) -> std::io::Result<Catalog> {
        let path = meta_dir.join("topics.json");
        let stored: Vec<StoredTopic> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let catalog = Catalog { by_name: DashMap::new(), by_id: DashMap::new(), write: Default::default(), path, shards, version: AtomicU64::new(0) };
        for t in stored {
            catalog.publish(catalog.build(t.name, t.id, t.partitions, t.config, None));
        }
        Ok(catalog)
    }

    /// Builds a topic value; partitions that already exist keep their watch channels.
    fn build(&self, name: String, id: Uuid, partitions: i32, config: TopicConfig, previous: Option<&Topic>) -> Arc<Topic> {
        let partitions = (0..partitions)
            .map(|p| match previous.and_then(|t| t.partition(p)) {
                Some(old) => PartitionMeta { shard: old.shard, end_offset: old.end_offset.clone() },
                None => PartitionMeta { shard: shard_for(id, p, self.shards), end_offset: Arc::new(watch::channel(0).0) },
            })
            .collect();
        Arc::new(Topic { name, id, partitions, config })
    }

    fn publish(&self, topic: Arc<Topic>) {
        self.by_id.insert(topic.id, topic.clone());
        self.by_name.insert(topic.name.clone(), topic);
        self.version.fetch_add(1, Ordering::Release);
    }

    fn unpublish(&self, topic: &Topic) {
        self.by_name.remove(&topic.name);
        self.by_id.remove(&topic.id);
        self.version.fetch_add(1, Ordering::Release);
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.by_name.get(name).map(|t| t.clone())
    }

    pub fn get_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.by_id.get(&id).map(|t| t.clone())
    }

    /// Every topic, sorted by name.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        let mut topics: Vec<_> = self.by_name.iter().map(|t| t.clone()).collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Takes the change lock; hold it across a read-check-write of the catalog.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write.lock().await
    }

    /// Adds a topic and persists the catalog. Call with the change lock held.
    pub fn insert(&self, name: &str, partitions: i32, config: TopicConfig) -> std::io::Result<Arc<Topic>> {
        let topic = self.build(name.to_string(), Uuid::new_v4(), partitions, config, None);
        self.publish(topic.clone());
        if let Err(e) = self.persist() {
            self.unpublish(&topic);
            return Err(e);
        }
        Ok(topic)
    }

    /// Grows a topic to `partitions` and persists. Call with the change lock held.
    pub fn set_partition_count(&self, topic: &Topic, partitions: i32) -> std::io::Result<Arc<Topic>> {
        let grown = self.build(topic.name.clone(), topic.id, partitions, topic.config.clone(), Some(topic));
        let previous = self.get(&topic.name);
        self.publish(grown.clone());
        if let Err(e) = self.persist() {
            if let Some(previous) = previous {
                self.publish(previous);
            }
            return Err(e);
        }
        Ok(grown)
    }

    /// Removes a topic and persists. Call with the change lock held.
    pub fn remove(&self, topic: &Topic) -> std::io::Result<()> {
        self.unpublish(topic);
        self.persist()
    }

    fn persist(&self) -> std::io::Result<()> {
        let stored: BTreeMap<String, StoredTopic> = self
            .by_name
            .iter()
            .map(|t| {
                (t.name.clone(), StoredTopic { name: t.name.clone(), id: t.id, partitions: t.partitions.len() as i32, config: t.config.clone() })
            })
            .collect();
        let list: Vec<&StoredTopic> = stored.values().collect();
        let bytes = serde_json::to_vec_pretty(&list).map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)
    }
}

/// The group coordinator reads topic names, ids and partition counts through this view.
impl crate::coordinator::consumer::TopicView for Catalog {
    fn by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.get(name).map(|t| (t.id, t.partitions.len() as i32))
    }

    fn by_id(&self, id: Uuid) -> Option<(String, i32)> {
        self.get_by_id(id).map(|t| (t.name.clone(), t.partitions.len() as i32))
    }

    fn names(&self) -> Vec<String> {
        self.by_name.iter().filter(|t| !crate::cluster::is_internal(&t.name)).map(|t| t.name.clone()).collect()
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::load(dir.path(), 2).unwrap();
        assert!(catalog.is_empty());
        let cfg = TopicConfig::from_pairs([("retention.ms", Some("5"))]).unwrap();
        let t = catalog.insert("a", 3, cfg.clone()).unwrap();
        catalog.insert("b", 1, TopicConfig::default()).unwrap();
        let grown = catalog.set_partition_count(&t, 5).unwrap();
        assert!(Arc::ptr_eq(&grown.partitions[0].end_offset, &t.partitions[0].end_offset));
        catalog.remove(&catalog.get("b").unwrap()).unwrap();

        let again = Catalog::load(dir.path(), 2).unwrap();
        assert_eq!(again.len(), 1);
        let a = again.get("a").unwrap();
        assert_eq!(a.id, t.id);
        assert_eq!(a.partitions.len(), 5);
        assert_eq!(a.config, cfg);
        assert!(again.get_by_id(t.id).is_some());
        for p in 0..5 {
            assert_eq!(a.partitions[p as usize].shard, shard_for(t.id, p, 2));
        }
    }

    #[test]
    fn partitions_spread_over_shards() {
        let id = Uuid::new_v4();
        let shards: std::collections::HashSet<_> = (0..8).map(|p| shard_for(id, p, 4)).collect();
        assert_eq!(shards.len(), 4);
    }
}
