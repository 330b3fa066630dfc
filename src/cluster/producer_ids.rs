//! Producer id allocation for idempotent producers (InitProducerId).
//!
//! Ids must never repeat, even across restarts, or a new producer would inherit an old one's
//! sequence state; and in a cluster no two nodes may hand out the same id, or two producers that
//! started on different nodes would share sequence state on a partition both write.
//!
//! As Kafka does with AllocateProducerIds, a node takes ids from a block it was given through the
//! metadata group: the block is an entry of the replicated log ([`TopicChange::AllocateProducerIds`]),
//! so blocks never overlap, whichever node asks, and a node that restarts asks for a fresh block
//! rather than trusting anything it kept itself. The ids left in a block when a node stops are
//! never used.

use std::sync::{Arc, Mutex};

use super::metadata_group::{TopicChange, WriteError};
use super::TopicError;
use crate::node::Node;

/// The block this node hands ids out of. Shared by all shards.
#[derive(Debug, Default)]
pub struct ProducerIds {
    /// The next id and the end of the block, `None` before the first block.
    block: Mutex<Option<(i64, i64)>>,
    /// One block asked for at a time.
    asking: tokio::sync::Mutex<()>,
}

impl ProducerIds {
    /// The next id of the current block, if any is left.
    fn take(&self) -> Option<i64> {
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        let (next, end) = block.as_mut()?;
        if *next >= *end {
            return None;
        }
        *next += 1;
        Some(*next - 1)
    }
}

/// A producer id no node of the cluster has handed out before. Asks the metadata group for a
/// block when this node's is used up (the first time after a start, and every
/// [`super::catalog::PRODUCER_ID_BLOCK`] ids).
pub async fn next_producer_id(node: &Arc<Node>) -> Result<i64, TopicError> {
    let ids = &node.producer_ids;
    if let Some(id) = ids.take() {
        return Ok(id);
    }
    let _asking = ids.asking.lock().await;
    if let Some(id) = ids.take() {
        return Ok(id);
    }
    super::propose(node, TopicChange::AllocateProducerIds { node: node.node_id }).await?;
    // Applied here before `propose` returns; the last block given to this node is the one just
    // asked for (this node asks one at a time).
    let missing = || TopicError::Write(WriteError::Failed("the producer id block was not applied here".into()));
    let block = node.catalog.producer_ids.last(node.node_id).ok_or_else(missing)?;
    tracing::debug!(start = block.0, end = block.1, "took a block of producer ids");
    *ids.block.lock().unwrap_or_else(|e| e.into_inner()) = Some(block);
    ids.take().ok_or_else(missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::catalog::{ReplicatedProducerIds, FIRST_PRODUCER_ID, PRODUCER_ID_BLOCK};

    #[test]
    fn blocks_never_overlap_and_ids_come_from_the_block_in_order() {
        let replicated = ReplicatedProducerIds::default();
        let first = replicated.allocate(0);
        let second = replicated.allocate(1);
        let third = replicated.allocate(0);
        assert_eq!(first, (FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + PRODUCER_ID_BLOCK));
        assert_eq!((second.0, third.0), (first.1, second.1));
        assert_eq!(replicated.last(0), Some(third));

        let ids = ProducerIds::default();
        assert_eq!(ids.take(), None, "no block before the first allocation");
        *ids.block.lock().unwrap() = Some((10, 12));
        assert_eq!((ids.take(), ids.take(), ids.take()), (Some(10), Some(11), None));
    }

    #[test]
    fn a_snapshot_never_moves_the_counter_back() {
        let replicated = ReplicatedProducerIds::default();
        let (_, end) = replicated.allocate(0);
        let mut old = replicated.get();
        old.next_block = 5;
        replicated.replace(old);
        assert_eq!(replicated.allocate(1).0, end);
    }
}
