//! Where a partition's data lives: the one place that decides it.
//!
//! With local storage the metadata group places each partition on one node, and the node's
//! catalog gives the shard that owns its log there. In front of an upstream cluster a partition
//! is on the upstream broker that leads it, as the upstream's metadata last said — except
//! corral's own `__consumer_offsets`, which stays in local segments.

use super::{PartitionRef, StoreError};
use crate::node::Node;
use crate::runtime::ShardId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// On this node, owned by this shard.
    Shard(ShardId),
    /// On another corral node, which leads it.
    Node(i32),
    /// On the upstream cluster, led by this broker.
    Upstream(i32),
}

/// Whether a partition stays in local segments in front of an upstream: corral's own topic.
pub fn stays_local(partition: &PartitionRef) -> bool {
    crate::cluster::is_internal(&partition.topic.name)
}

/// Where a partition is when the node stands in front of an upstream cluster. `None` from the
/// view: the upstream does not know the partition (yet); `Some(-1)`: it has no leader now.
pub fn locate_in_front(
    node: &Node,
    partition: &PartitionRef,
    upstream_leader: impl FnOnce() -> Option<i32>,
) -> Result<Location, StoreError> {
    if stays_local(partition) {
        return locate(node, partition);
    }
    match upstream_leader() {
        Some(leader) if leader >= 0 => Ok(Location::Upstream(leader)),
        Some(_) => Err(StoreError::Upstream {
            code: kafka_protocol::ResponseError::LeaderNotAvailable.code(),
            message: None,
            record_errors: Vec::new(),
        }),
        None => Err(StoreError::UnknownPartition),
    }
}

pub fn locate(node: &Node, partition: &PartitionRef) -> Result<Location, StoreError> {
    let meta = partition.topic.partition(partition.index).ok_or(StoreError::UnknownPartition)?;
    if meta.leader == node.node_id {
        Ok(Location::Shard(meta.shard))
    } else {
        Ok(Location::Node(meta.leader))
    }
}

/// The shard that owns a partition on this node; an error a client acts on when it is elsewhere
/// or names a leader epoch other than the one local partitions keep (0; -1 names none). The
/// errors come in Kafka's order: unknown partition, then epoch, then leadership.
pub fn local_shard(node: &Node, partition: &PartitionRef, current_leader_epoch: i32) -> Result<ShardId, StoreError> {
    let location = locate(node, partition)?;
    if current_leader_epoch > 0 {
        return Err(StoreError::UnknownLeaderEpoch(current_leader_epoch));
    }
    match location {
        Location::Shard(shard) => Ok(shard),
        Location::Node(leader) | Location::Upstream(leader) => Err(StoreError::NotLeader { partition: partition.index, leader }),
    }
}
