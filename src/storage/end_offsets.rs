//! The log end offset of every partition this node hosts: published by the shard that owns the
//! partition after each append, watched by long-polling fetches on every shard.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::watch;
use uuid::Uuid;

/// Node-wide (shared by every shard): one watch channel per hosted partition.
#[derive(Debug, Default)]
pub struct EndOffsets {
    channels: DashMap<(Uuid, i32), Arc<watch::Sender<i64>>>,
}

impl EndOffsets {
    /// The channel a partition publishes to, made on first use. A partition reopened (or grown
    /// into) keeps the channel its watchers already hold.
    pub fn publisher(&self, topic_id: Uuid, partition: i32) -> Arc<watch::Sender<i64>> {
        self.channels.entry((topic_id, partition)).or_insert_with(|| Arc::new(watch::channel(0).0)).clone()
    }

    /// Watches a hosted partition's log end; `None` if this node does not host it.
    pub fn subscribe(&self, topic_id: Uuid, partition: i32) -> Option<watch::Receiver<i64>> {
        self.channels.get(&(topic_id, partition)).map(|c| c.subscribe())
    }

    /// The log end last published, if this node hosts the partition.
    pub fn current(&self, topic_id: Uuid, partition: i32) -> Option<i64> {
        self.channels.get(&(topic_id, partition)).map(|c| *c.borrow())
    }

    /// Forgets a partition that was closed for good (its topic deleted): once its log is dropped
    /// too, watchers see the channel close and read again.
    pub fn remove(&self, topic_id: Uuid, partition: i32) {
        self.channels.remove(&(topic_id, partition));
    }
}
