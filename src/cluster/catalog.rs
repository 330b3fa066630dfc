//! The topic catalog: which topics exist, their ids, partition counts, configs and placement.
//!
//! Read on every request by every shard, changed rarely (topic admin), so it is a concurrent map
//! of immutable `Arc<Topic>` values: a change builds a new `Topic` and swaps it in.
//!
//! Topics are replicated by the metadata Raft group (`super::metadata_group`): every node applies
//! the same changes to its catalog, in log order, and writes it to `meta/topics.json` (atomically)
//! together with the id of the last entry applied, so a restart re-applies only what follows.
//! `__consumer_offsets` is the exception: every node creates it locally with the partition count
//! of its config and holds all of its partitions (their contents are replicated by the
//! coordinator's own Raft groups).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use uuid::Uuid;

use super::topic_config::TopicConfig;
use crate::coordinator::consumer_group::{GroupOverrides, SharedGroupOverrides};
use crate::raft::{LogId, StoredMembership};
use crate::runtime::ShardId;
use crate::security::acl::{AclBinding, Acls, Removed};
use crate::storage::log::write_atomically;

/// One partition's routing facts.
#[derive(Debug)]
pub struct PartitionMeta {
    /// The shard that owns the partition's log (on the node that hosts it).
    pub shard: ShardId,
    /// The node that hosts the partition's log and leads it (local storage: one replica).
    pub leader: i32,
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

    /// The node of each partition, in partition order.
    pub fn placement(&self) -> Vec<i32> {
        self.partitions.iter().map(|p| p.leader).collect()
    }
}

/// Partition → shard: spread a topic's partitions round-robin from a per-topic starting shard.
pub fn shard_for(topic_id: Uuid, partition: i32, shards: usize) -> ShardId {
    let (hi, lo) = topic_id.as_u64_pair();
    let start = (hi ^ lo) % shards as u64;
    ((start + partition as u64) % shards as u64) as usize
}

/// A topic as the catalog file and the metadata group's snapshots hold it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    #[serde(default)]
    pub config: TopicConfig,
    /// The node of each partition. Absent in files written before topics were replicated: every
    /// partition is then this node's.
    #[serde(default)]
    pub placement: Vec<i32>,
}

/// `meta/topics.json`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct StoredCatalog {
    /// The last metadata-group entry applied to `topics`.
    applied: Option<LogId>,
    membership: StoredMembership,
    topics: Vec<StoredTopic>,
    /// Absent in files written before producer ids were allocated through the metadata group.
    #[serde(default)]
    producer_ids: ProducerIdBlocks,
    /// Absent in files written before groups had configs of their own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    group_configs: BTreeMap<String, GroupOverrides>,
    /// Absent in files written before CreateAcls was served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    acls: Vec<AclBinding>,
}

/// What a metadata-group snapshot holds: the replicated topics, the producer-id blocks, the
/// groups' own configs and the ACLs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CatalogSnapshotData {
    pub topics: Vec<StoredTopic>,
    pub producer_ids: ProducerIdBlocks,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, GroupOverrides>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclBinding>,
}

impl CatalogSnapshotData {
    /// Snapshots taken before producer ids were replicated hold only the list of topics.
    pub fn parse(bytes: &[u8]) -> serde_json::Result<CatalogSnapshotData> {
        let value: serde_json::Value = serde_json::from_slice(bytes)?;
        if value.is_array() {
            let topics = serde_json::from_value(value)?;
            return Ok(CatalogSnapshotData {
                topics,
                producer_ids: ProducerIdBlocks::default(),
                group_configs: BTreeMap::new(),
                acls: Vec::new(),
            });
        }
        serde_json::from_value(value)
    }
}

impl StoredCatalog {
    /// Reads the file's JSON; files written before topics were replicated hold a plain list.
    fn parse(bytes: &[u8]) -> serde_json::Result<StoredCatalog> {
        // Through a `Value`: its map keys may be read as numbers (membership node ids), which
        // serde's untagged enums cannot do.
        let value: serde_json::Value = serde_json::from_slice(bytes)?;
        if value.is_array() {
            let topics = serde_json::from_value(value)?;
            return Ok(StoredCatalog {
                applied: None,
                membership: Default::default(),
                topics,
                producer_ids: Default::default(),
                group_configs: BTreeMap::new(),
                acls: Vec::new(),
            });
        }
        serde_json::from_value(value)
    }
}

/// All topics of the cluster. Shared by every shard.
#[derive(Debug)]
pub struct Catalog {
    by_name: DashMap<String, Arc<Topic>>,
    by_id: DashMap<Uuid, Arc<Topic>>,
    /// Serialises this node's topic requests (check, then propose).
    write: tokio::sync::Mutex<()>,
    path: PathBuf,
    shards: usize,
    /// This node's id: the node of partitions whose file names none.
    node_id: i32,
    /// What the metadata group last applied here.
    applied: Mutex<(Option<LogId>, StoredMembership)>,
    /// Counts changes (see [`crate::coordinator::consumer_group::TopicView::version`]).
    version: AtomicU64,
    /// The producer-id blocks handed out through the metadata group.
    pub producer_ids: ReplicatedProducerIds,
    /// Groups' own configs, set through the metadata group; the coordinators read them.
    pub group_configs: SharedGroupOverrides,
    /// The ACLs made with CreateAcls; the authorizer reads them.
    pub acls: Arc<Acls>,
    /// Whether CreateAcls entries proposed here added their ACLs (or why not), for their handlers.
    pub acl_creations: super::acls::Outcomes<Result<(), String>>,
    /// What DeleteAcls entries proposed here removed (or why none), for their handlers.
    pub acl_deletions: super::acls::Outcomes<Result<Removed, String>>,
}

impl Catalog {
    /// Loads `meta/topics.json` (an absent file is an empty catalog).
    pub fn load(meta_dir: &Path, shards: usize, node_id: i32) -> std::io::Result<Catalog> {
        let path = meta_dir.join("topics.json");
        let stored = match std::fs::read(&path) {
            Ok(bytes) => StoredCatalog::parse(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => StoredCatalog {
                applied: None,
                membership: Default::default(),
                topics: Vec::new(),
                producer_ids: Default::default(),
                group_configs: BTreeMap::new(),
                acls: Vec::new(),
            },
            Err(e) => return Err(e),
        };
        let StoredCatalog { applied, membership, topics, producer_ids, group_configs, acls } = stored;
        let applied = (applied, membership);
        let catalog = Catalog {
            by_name: DashMap::new(),
            by_id: DashMap::new(),
            write: Default::default(),
            path,
            shards,
            node_id,
            applied: Mutex::new(applied),
            version: AtomicU64::new(0),
            producer_ids: ReplicatedProducerIds(Mutex::new(producer_ids)),
            group_configs: SharedGroupOverrides::default(),
            acls: Arc::new(Acls::new(acls)),
            acl_creations: Default::default(),
            acl_deletions: Default::default(),
        };
        for (group, overrides) in group_configs {
            catalog.group_configs.set(&group, overrides);
        }
        for t in topics {
            let placement = catalog.placement_of(&t);
            catalog.publish(catalog.build(t.name, t.id, t.config, placement, None));
        }
        Ok(catalog)
    }

    fn placement_of(&self, t: &StoredTopic) -> Vec<i32> {
        if t.placement.len() == t.partitions.max(0) as usize {
            t.placement.clone()
        } else {
            vec![self.node_id; t.partitions.max(0) as usize]
        }
    }

    /// Builds a topic value with one partition per entry of `placement`; partitions that already
    /// exist in `previous` keep their shard and node.
    pub(crate) fn build(&self, name: String, id: Uuid, config: TopicConfig, placement: Vec<i32>, previous: Option<&Topic>) -> Arc<Topic> {
        let partitions = placement
            .into_iter()
            .enumerate()
            .map(|(p, leader)| match previous.and_then(|t| t.partition(p as i32)) {
                Some(old) => PartitionMeta { shard: old.shard, leader: old.leader },
                None => PartitionMeta { shard: shard_for(id, p as i32, self.shards), leader },
            })
            .collect();
        Arc::new(Topic { name, id, partitions, config })
    }

    /// Makes a topic (new or changed) visible to every shard.
    pub(crate) fn publish(&self, topic: Arc<Topic>) {
        self.by_id.insert(topic.id, topic.clone());
        self.by_name.insert(topic.name.clone(), topic);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Counts a change that is not a topic's but changes what a principal may see of them (the
    /// ACLs): groups resolve their regex subscriptions again.
    pub(crate) fn touch(&self) {
        self.version.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn unpublish(&self, topic: &Topic) {
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

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Takes the change lock; hold it across a read-check-propose of a topic change.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write.lock().await
    }

    /// Adds a topic held by this node alone (`__consumer_offsets`) and persists the catalog.
    pub fn insert_local(&self, name: &str, partitions: i32, config: TopicConfig) -> std::io::Result<Arc<Topic>> {
        let placement = vec![self.node_id; partitions.max(0) as usize];
        let topic = self.build(name.to_string(), Uuid::new_v4(), config, placement, None);
        self.publish(topic.clone());
        if let Err(e) = self.persist() {
            self.unpublish(&topic);
            return Err(e);
        }
        Ok(topic)
    }

    /// What the metadata group last applied to this catalog.
    pub fn applied(&self) -> (Option<LogId>, StoredMembership) {
        self.applied.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records what the metadata group has applied and writes the catalog with it.
    pub(crate) fn persist_applied(&self, applied: Option<LogId>, membership: StoredMembership) -> std::io::Result<()> {
        *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = (applied, membership);
        self.persist()
    }

    /// Partitions each node holds of the replicated topics other than `except` (internal topics
    /// are every node's own and do not count): the same on every node at the same point of the
    /// metadata log.
    pub fn partitions_per_node(&self, except: Uuid) -> BTreeMap<i32, usize> {
        let mut held = BTreeMap::new();
        for topic in self.by_name.iter().filter(|t| t.id != except && !super::is_internal(&t.name)) {
            for partition in &topic.partitions {
                *held.entry(partition.leader).or_default() += 1;
            }
        }
        held
    }

    /// What a metadata-group snapshot holds.
    pub fn snapshot(&self) -> CatalogSnapshotData {
        CatalogSnapshotData {
            topics: self.replicated(),
            producer_ids: self.producer_ids.get(),
            group_configs: self.group_configs.all(),
            acls: self.acls.all().to_vec(),
        }
    }

    /// The replicated topics (every one but `__consumer_offsets`), sorted by name.
    pub fn replicated(&self) -> Vec<StoredTopic> {
        self.stored().into_iter().filter(|t| !super::is_internal(&t.name)).collect()
    }

    fn stored(&self) -> Vec<StoredTopic> {
        let sorted: BTreeMap<String, StoredTopic> = self
            .by_name
            .iter()
            .map(|t| {
                let stored = StoredTopic {
                    name: t.name.clone(),
                    id: t.id,
                    partitions: t.partitions.len() as i32,
                    config: t.config.clone(),
                    placement: t.placement(),
                };
                (t.name.clone(), stored)
            })
            .collect();
        sorted.into_values().collect()
    }

    fn persist(&self) -> std::io::Result<()> {
        let (applied, membership) = self.applied();
        let stored = StoredCatalog {
            applied,
            membership,
            topics: self.stored(),
            producer_ids: self.producer_ids.get(),
            group_configs: self.group_configs.all(),
            acls: self.acls.all().to_vec(),
        };
        let bytes = serde_json::to_vec_pretty(&stored).map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)
    }
}

/// Producer ids in blocks, as the metadata group hands them out (applied in log order, the same
/// on every node).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerIdBlocks {
    /// The first id of the next block; 0 until the first block.
    pub next_block: i64,
    /// The last block each node was given, `[start, end)`.
    pub last: BTreeMap<i32, (i64, i64)>,
}

/// Ids per block.
pub const PRODUCER_ID_BLOCK: i64 = 1000;
/// Where blocks begin: above every id the per-node shares of earlier versions handed out
/// (`k, k + n, ...` from 0, far below this), so an upgraded cluster never sees an id twice.
pub const FIRST_PRODUCER_ID: i64 = 1 << 40;

/// [`ProducerIdBlocks`] behind a lock, on the catalog.
#[derive(Debug, Default)]
pub struct ReplicatedProducerIds(Mutex<ProducerIdBlocks>);

impl ReplicatedProducerIds {
    /// Hands `node` the next block (applying an AllocateProducerIds entry).
    pub(crate) fn allocate(&self, node: i32) -> (i64, i64) {
        let mut blocks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let start = blocks.next_block.max(FIRST_PRODUCER_ID);
        let end = start.saturating_add(PRODUCER_ID_BLOCK);
        blocks.next_block = end;
        blocks.last.insert(node, (start, end));
        (start, end)
    }

    /// The block `node` was last given.
    pub fn last(&self, node: i32) -> Option<(i64, i64)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).last.get(&node).copied()
    }

    pub fn get(&self) -> ProducerIdBlocks {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a snapshot's blocks (the counter never moves back).
    pub(crate) fn replace(&self, from_snapshot: ProducerIdBlocks) {
        let mut blocks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let next_block = blocks.next_block.max(from_snapshot.next_block);
        *blocks = ProducerIdBlocks { next_block, ..from_snapshot };
    }
}

/// The group coordinator reads topic names, ids and partition counts through this view.
impl crate::coordinator::consumer_group::TopicView for Catalog {
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
    fn persists_and_reloads_with_placement_and_applied_entry() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::load(dir.path(), 2, 1).unwrap();
        assert!(catalog.is_empty());
        let cfg = TopicConfig::from_pairs([("retention.ms", Some("5"))]).unwrap();
        let t = catalog.build("a".into(), Uuid::new_v4(), cfg.clone(), vec![1, 2, 3], None);
        catalog.publish(t.clone());
        let b = catalog.build("b".into(), Uuid::new_v4(), TopicConfig::default(), vec![2], None);
        catalog.publish(b.clone());
        let grown = catalog.build("a".into(), t.id, cfg.clone(), vec![1, 2, 3, 1, 2], Some(&t));
        assert_eq!(grown.partitions[0].shard, t.partitions[0].shard);
        catalog.publish(grown);
        catalog.unpublish(&b);
        let acl = crate::security::acl::AclBinding {
            resource_type: 2,
            name: "orders".into(),
            pattern: 3,
            principal: "User:bob".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        };
        catalog.acls.add(std::slice::from_ref(&acl)).unwrap();
        let applied = LogId::new(openraft::CommittedLeaderId::new(3, 1), 17);
        let members = std::collections::BTreeMap::from([(1u64, openraft::BasicNode::new("h:1"))]);
        let membership = StoredMembership::new(Some(applied), openraft::Membership::from(members));
        catalog.persist_applied(Some(applied), membership.clone()).unwrap();

        let again = Catalog::load(dir.path(), 2, 1).unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again.applied(), (Some(applied), membership));
        let a = again.get("a").unwrap();
        assert_eq!(a.id, t.id);
        assert_eq!(a.placement(), vec![1, 2, 3, 1, 2]);
        assert_eq!(a.config, cfg);
        assert!(again.get_by_id(t.id).is_some());
        assert_eq!(again.acls.all().to_vec(), vec![acl.clone()]);
        assert_eq!(again.snapshot().acls, vec![acl]);
        for p in 0..5 {
            assert_eq!(a.partitions[p as usize].shard, shard_for(t.id, p, 2));
        }
    }

    #[test]
    fn a_catalog_written_before_replication_loads_with_every_partition_here() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        let legacy = format!(r#"[{{"name":"old","id":"{id}","partitions":3,"config":{{}}}}]"#);
        std::fs::write(dir.path().join("topics.json"), legacy).unwrap();
        let catalog = Catalog::load(dir.path(), 2, 7).unwrap();
        assert_eq!(catalog.get("old").unwrap().placement(), vec![7, 7, 7]);
        assert_eq!(catalog.applied().0, None);
    }

    #[test]
    fn partitions_spread_over_shards() {
        let id = Uuid::new_v4();
        let shards: std::collections::HashSet<_> = (0..8).map(|p| shard_for(id, p, 4)).collect();
        assert_eq!(shards.len(), 4);
    }
}
