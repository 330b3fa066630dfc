//! The segment files a shard keeps open, within a budget.
//!
//! A partition holds no descriptor of its own. A segment's `.log` is opened when it is written or
//! read and stays in this cache until less recently used files push it out; index files are never
//! held open (their entries live in memory, see `index.rs`). A node therefore holds many more
//! partitions than its open-file limit, and only the partitions in use cost descriptors.
//!
//! Handles already given out (an `Arc<File>` in a fetch response, a timestamp lookup or an fsync)
//! stay valid when the cache lets them go: the descriptor closes when the last holder drops it.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

/// The open segment files each shard may keep: `storage.max_open_files` (or half of the process's
/// open-file limit when it is 0) over the shards. Raises the soft limit to the hard one first, as
/// the JVM does for Kafka. The error names the key.
pub fn per_shard_budget(configured: usize, shards: usize) -> Result<usize, String> {
    let limit = rlimit::increase_nofile_limit(u64::MAX).map_err(|e| format!("cannot read the open-file limit: {e}"))? as usize;
    let total = match configured {
        0 => limit / 2,
        n if n >= limit => {
            return Err(format!("{n} is not below the process's open-file limit ({limit}), which connections and the Raft log need too"))
        }
        n => n,
    };
    Ok((total / shards.max(1)).max(MIN_PER_SHARD))
}

/// Even under a tiny limit a shard keeps this many (an append and a fetch of other segments).
const MIN_PER_SHARD: usize = 16;

/// Files of one shard's segments, at most `capacity` of them open at once. Lives on its shard.
#[derive(Debug)]
pub struct OpenFiles {
    capacity: usize,
    state: RefCell<State>,
}

#[derive(Debug, Default)]
struct State {
    next_slot: u64,
    /// Ticks on every use: the least recently used file has the smallest.
    clock: u64,
    open: HashMap<u64, Open>,
    by_use: BTreeMap<u64, u64>,
}

#[derive(Debug)]
struct Open {
    file: Arc<File>,
    used: u64,
}

impl OpenFiles {
    /// Keeps at most `capacity` files open (at least one).
    pub fn new(capacity: usize) -> Rc<OpenFiles> {
        Rc::new(OpenFiles { capacity: capacity.max(1), state: RefCell::new(State::default()) })
    }

    /// Files open now.
    pub fn len(&self) -> usize {
        self.state.borrow().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A handle on the file at `path`; nothing is opened until it is used.
    pub(crate) fn file(self: &Rc<Self>, path: PathBuf) -> CachedFile {
        let mut state = self.state.borrow_mut();
        state.next_slot += 1;
        CachedFile { path, slot: state.next_slot, files: self.clone() }
    }

    fn get(&self, slot: u64, mut open: impl FnMut() -> io::Result<File>) -> io::Result<Arc<File>> {
        let mut state = self.state.borrow_mut();
        state.clock += 1;
        let now = state.clock;
        let State { open: files, by_use, .. } = &mut *state;
        if let Some(entry) = files.get_mut(&slot) {
            by_use.remove(&entry.used);
            by_use.insert(now, slot);
            entry.used = now;
            return Ok(entry.file.clone());
        }
        let file = match open() {
            Ok(file) => file,
            // The process is out of descriptors (sockets count too): give back half of ours, once.
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                state.evict_to(self.capacity / 2);
                open()?
            }
            Err(e) => return Err(e),
        };
        crate::metrics::segment_file_opened();
        let file = Arc::new(file);
        state.open.insert(slot, Open { file: file.clone(), used: now });
        state.by_use.insert(now, slot);
        state.evict_to(self.capacity);
        Ok(file)
    }

    fn forget(&self, slot: u64) {
        let mut state = self.state.borrow_mut();
        if let Some(entry) = state.open.remove(&slot) {
            state.by_use.remove(&entry.used);
            crate::metrics::segment_file_closed();
        }
    }
}

impl State {
    fn evict_to(&mut self, keep: usize) {
        while self.open.len() > keep {
            let Some((_, slot)) = self.by_use.pop_first() else { break };
            self.open.remove(&slot);
            crate::metrics::segment_file_closed();
        }
    }
}

/// One segment file, opened through its shard's [`OpenFiles`]. Dropping it closes the file (once
/// no handle given out holds it).
#[derive(Debug)]
pub(crate) struct CachedFile {
    path: PathBuf,
    slot: u64,
    files: Rc<OpenFiles>,
}

impl CachedFile {
    /// The open file (opened for reading and appending when the cache had let it go).
    pub(crate) fn get(&self) -> io::Result<Arc<File>> {
        self.files.get(self.slot, || std::fs::OpenOptions::new().read(true).append(true).open(&self.path))
    }

    /// Puts a file just opened (or created) at this path in the cache.
    pub(crate) fn insert(&self, file: File) -> io::Result<Arc<File>> {
        let mut file = Some(file);
        self.files.get(self.slot, || file.take().map_or_else(|| std::fs::OpenOptions::new().read(true).append(true).open(&self.path), Ok))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        self.files.forget(self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_capacity_open_and_reopens_on_demand() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(2);
        let handles: Vec<CachedFile> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                std::fs::write(&path, [i as u8]).unwrap();
                files.file(path)
            })
            .collect();
        let first = handles[0].get().unwrap();
        handles[1].get().unwrap();
        handles[0].get().unwrap(); // 0 is now more recent than 1
        handles[2].get().unwrap(); // pushes 1 out
        assert_eq!(files.len(), 2);
        let state = files.state.borrow();
        assert!(state.open.contains_key(&handles[0].slot) && !state.open.contains_key(&handles[1].slot));
        drop(state);
        // An evicted file opens again; a dropped one closes; a handle given out outlives both.
        handles[1].get().unwrap();
        assert_eq!(files.len(), 2);
        let [zero, one, _two]: [CachedFile; 3] = handles.try_into().unwrap();
        drop((zero, one));
        assert_eq!(files.len(), 1);
        let mut byte = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&*first, &mut byte, 0).unwrap();
        assert_eq!(byte, [0]);
    }
}
