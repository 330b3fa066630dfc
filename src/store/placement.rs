//! Where a partition's data lives: the one place that decides it.
//!
//! With local storage the metadata group places each partition on one node, and the node's
//! catalog gives the shard that owns its log there.

use super::{PartitionRef, StoreError};
use crate::node::Node;
use crate::runtime::ShardId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// On this node, owned by this shard.
    Shard(ShardId),
    /// On another corral node, which leads it.
    Node(i32),
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
        Location::Node(leader) => Err(StoreError::NotLeader { partition: partition.index, leader }),
    }
}
