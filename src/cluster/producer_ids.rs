//! Producer id allocation for idempotent producers (InitProducerId).
//!
//! Ids must never repeat, even across restarts, or a new producer would inherit an old one's
//! sequence state. Ids are handed out from blocks; the end of the current block is persisted
//! before any id from it is used, so after a crash allocation resumes past every id ever issued.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::storage::log::write_atomically;

const BLOCK: i64 = 1000;

#[derive(Debug)]
struct Block {
    next: i64,
    end: i64,
}

/// Shared by all shards; allocation takes a short lock.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    block: Mutex<Block>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    next_block_start: i64,
}

impl ProducerIds {
    pub fn load(meta_dir: &Path) -> std::io::Result<ProducerIds> {
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
        Ok(ProducerIds { path, block: Mutex::new(Block { next: start, end: start }) })
    }

    /// A producer id never handed out before.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        if block.next == block.end {
            let end = block.end + BLOCK;
            let bytes = serde_json::to_vec(&Stored { next_block_start: end }).map_err(std::io::Error::other)?;
            write_atomically(&self.path, &bytes)?;
            block.end = end;
        }
        let id = block.next;
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
        let ids = ProducerIds::load(dir.path()).unwrap();
        let first: Vec<i64> = (0..5).map(|_| ids.next().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2, 3, 4]);
        drop(ids);
        let ids = ProducerIds::load(dir.path()).unwrap();
        assert_eq!(ids.next().unwrap(), BLOCK);
    }
}
