//! Producer id allocation for idempotent producers (InitProducerId).
//!
//! Ids must never repeat, even across restarts, or a new producer would inherit an old one's
//! sequence state; and in a cluster no two nodes may hand out the same id, or two producers that
//! started on different nodes would share sequence state on a partition both write.
//!
//! Each node draws from its own share of the id space: with `n` nodes in `[cluster] nodes` (a list
//! that never changes for a cluster), the node at position `k` of the sorted list hands out
//! `k, k + n, k + 2n, ...`. Kafka hands out blocks from its controller's log (AllocateProducerIds)
//! because its broker ids come and go; corral's membership is static, so each node's share is
//! fixed, and InitProducerId needs no round trip and keeps working while the metadata group
//! elects a leader. A single node's share is every id, as before.
//!
//! Within its share a node counts in blocks: the end of the current block is persisted before
//! any id from it is used, so after a crash allocation resumes past every id ever issued.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::storage::log::write_atomically;

const BLOCK: i64 = 1000;

#[derive(Debug)]
struct Block {
    /// Counts within this node's share: the id is `next * stride + position`.
    next: i64,
    end: i64,
}

/// Shared by all shards; allocation takes a short lock.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    block: Mutex<Block>,
    /// This node's position among the cluster's nodes, and how many there are.
    position: i64,
    stride: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    next_block_start: i64,
}

impl ProducerIds {
    /// `position` of `nodes`: this node's place in the sorted list of the cluster's nodes (0 of 1
    /// on a single node).
    pub fn load(meta_dir: &Path, position: usize, nodes: usize) -> std::io::Result<ProducerIds> {
        let path = meta_dir.join("producer_ids.json");
        let start = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<Stored>(&bytes)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?
                    .next_block_start
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let block = Mutex::new(Block { next: start, end: start });
        Ok(ProducerIds { path, block, position: position as i64, stride: nodes.max(1) as i64 })
    }

    /// A producer id never handed out before, by this node or any other of the cluster.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        if block.next == block.end {
            let end = block.end + BLOCK;
            let bytes = serde_json::to_vec(&Stored { next_block_start: end }).map_err(std::io::Error::other)?;
            write_atomically(&self.path, &bytes)?;
            block.end = end;
        }
        let id = block.next.checked_mul(self.stride).and_then(|i| i.checked_add(self.position));
        let id = id.ok_or_else(|| std::io::Error::other("the producer id space of this node is used up"))?;
        block.next += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_repeats_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::load(dir.path(), 0, 1).unwrap();
        let first: Vec<i64> = (0..5).map(|_| ids.next().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2, 3, 4]);
        drop(ids);
        let ids = ProducerIds::load(dir.path(), 0, 1).unwrap();
        assert_eq!(ids.next().unwrap(), BLOCK);
    }

    #[test]
    fn nodes_of_a_cluster_never_hand_out_the_same_id() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut seen = std::collections::HashSet::new();
        for round in 0..2 {
            let nodes: Vec<ProducerIds> = dirs.iter().enumerate().map(|(k, d)| ProducerIds::load(d.path(), k, 3).unwrap()).collect();
            for _ in 0..(BLOCK as usize + 5) {
                for ids in &nodes {
                    let id = ids.next().unwrap();
                    assert!(seen.insert(id), "id {id} handed out twice (round {round})");
                }
            }
        }
    }
}
