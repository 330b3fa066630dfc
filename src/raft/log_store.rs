//! The Raft log of one group, on our own segment files, with group commit.
//!
//! # Layout
//!
//! ```text
//! <dir>/                          one directory per Raft group, given to [`RaftLogStore::open`]
//!     00000000000000000001.log    records of entries 1, 2, …  (name = index of the first entry)
//!     00000000000000041872.log    the next segment, rolled once the previous one reached
//!                                 `segment_bytes`
//!     vote                        the last saved vote
//!     purged                      the last purged log id
//!     committed                   the last saved committed log id (may lag, see below)
//! ```
//!
//! A segment is a sequence of length-prefixed, CRC-32C-checked records, one per entry, in index
//! order with no gaps (the format is in `entry_codec`). The small files hold one CRC-checked
//! value each. `vote` and `purged` are replaced atomically and durably before the call that
//! changes them returns: write `<name>.tmp`, fsync it, rename it over `<name>`, fsync the
//! directory. `committed` is overwritten in place, without fsyncs (see below).
//!
//! Appending continues the log: the first entry must follow the last one (or the purged id), and
//! entries at or below the purged id are dropped, since the snapshot already holds them.
//!
//! # In memory
//!
//! For every segment, the byte position of each of its entries. Reading entries `[a, b)` of one
//! segment is then one `pread` of the bytes between `a`'s position and `b`'s, decoded in place.
//! The log and that index live on the shard that owns the group ([`Rc`], [`RefCell`]); the
//! store and every [`LogReader`] share them.
//!
//! # Durability: group commit
//!
//! [`RaftLogStorage::append`] writes the entries into the page cache at once (they are readable
//! when it returns) and queues openraft's callback. One flusher per store, running on tokio's
//! blocking pool while there is work, takes every write made so far, fdatasyncs the files they
//! touched (and the directory, when a segment was created), then completes every callback those
//! writes covered. Appends that arrive while an fsync runs are covered by the next one, so under
//! load one fsync serves many appends. Callbacks complete in append order.
//!
//! Truncate, purge and vote changes first wait for every earlier append to be on disk (openraft
//! requires log I/O to be serialized). An fsync error is sticky: every waiting and later write
//! fails, since after a failed fsync nothing is known about what reached the disk.
//!
//! openraft 0.9's core waits for each append's callback before it appends again (its
//! `append_to_log` is "a temp wrapper to make non-blocking `append_to_log` a blocking"), so with
//! 0.9 one group has at most one append in flight: a leader fsyncs once per `client_write` (or per
//! batch of entries a follower receives). The store already shares fsyncs among overlapping
//! appends, which a 0.10 core issues; with 0.9, batch several records into one [`Command`]
//! to share an fsync.
//!
//! The committed log id is written by the flusher once the entries it names are on disk:
//! overwritten in place without fsyncs, so it adds no disk wait to the serialized appends. Whatever of it survives a crash is therefore never ahead of the log (which would make
//! openraft fail to start) but may lag, or be lost and read as none (its CRC fails), which
//! openraft allows: it only re-applies less at startup. [`RaftLogStore::flush`] makes it durable.
//!
//! [`Command`]: super::Command
//!
//! # Recovery
//!
//! [`RaftLogStore::open`] scans every segment, checking each record's CRC and that indexes
//! follow each other. At the first bad record (a torn write at a crash, or a corrupt one) the
//! segment is truncated there and any later segment is deleted: the entries after it cannot be
//! used without a hole. Segments whose entries were all purged (a purge cut short) are deleted.

use std::collections::VecDeque;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
#[cfg(test)]
use std::time::{Duration, Instant};
use std::{cell::RefCell, rc::Rc};

use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftLogReader, StorageIOError};
use tokio::sync::oneshot;

use super::entry_codec::{self, CodecError, BODY_HEADER_LEN, MAX_BODY_LEN, RECORD_HEADER_LEN};
use super::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE_FILE: &str = "vote";
const PURGED_FILE: &str = "purged";
const COMMITTED_FILE: &str = "committed";

/// Settings of one Raft log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStoreConfig {
    /// A segment is rolled (a new file started) once it holds at least this many bytes.
    /// Purging frees whole segments, so this is also the granularity of reclaiming space.
    pub segment_bytes: u64,
    /// Upper bound on the bytes `limited_get_log_entries` returns at once (always at least one
    /// entry): the size of a replication batch.
    pub max_read_bytes: u64,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        LogStoreConfig { segment_bytes: 64 << 20, max_read_bytes: 1 << 20 }
    }
}

/// Errors of the Raft log. openraft receives them wrapped in its `StorageError`.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    #[error("raft log I/O failed: {0}")]
    Io(#[from] io::Error),
    #[error("raft log file {path} is unusable: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("raft log entry {index} is unreadable: {source}")]
    BadEntry { index: u64, source: CodecError },
    #[error("append of index {got} would leave a hole or overlap (the next index is {expected})")]
    NotContiguous { expected: u64, got: u64 },
    #[error("raft log entry {index} needs {size} bytes, more than the {MAX_BODY_LEN}-byte limit")]
    EntryTooLarge { index: u64, size: usize },
    #[error("an earlier raft log write or fsync failed ({0}); the log accepts no more writes")]
    Failed(String),
}

/// What [`RaftLogStore::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments kept.
    pub segments: usize,
    /// Entries in the kept segments (including purged ones not yet reclaimed).
    pub entries: u64,
    /// Bytes cut from the end of a segment at the first bad record.
    pub truncated_bytes: u64,
    /// Segment files deleted: empty, after a bad record, or wholly purged.
    pub deleted_segments: usize,
    /// Why the scan stopped early, when it did.
    pub bad_record: Option<String>,
}

// === Segment ===

/// One `.log` file: entries `base ..` with the position of each.
#[derive(Debug)]
struct Segment {
    base: u64,
    path: PathBuf,
    /// Shared with the flusher, which fsyncs it off the shard thread.
    file: Arc<File>,
    /// Bytes of valid records.
    size: u64,
    /// `positions[i]` is where the record of entry `base + i` starts.
    positions: Vec<u64>,
}

impl Segment {
    fn file_name(base: u64) -> String {
        format!("{base:020}.log")
    }

    fn create(dir: &Path, base: u64) -> io::Result<Segment> {
        let path = dir.join(Segment::file_name(base));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        Ok(Segment { base, path, file: Arc::new(file), size: 0, positions: Vec::new() })
    }

    /// The index the next entry appended here would get.
    fn next_index(&self) -> u64 {
        self.base + self.positions.len() as u64
    }

    fn last_index(&self) -> Option<u64> {
        self.next_index().checked_sub(1).filter(|_| !self.positions.is_empty())
    }

    fn start_of(&self, index: u64) -> u64 {
        self.positions[(index - self.base) as usize]
    }

    fn end_of(&self, index: u64) -> u64 {
        self.positions.get((index - self.base) as usize + 1).copied().unwrap_or(self.size)
    }

    /// The log id of one entry, read from its record's fixed part.
    fn read_log_id(&self, index: u64) -> Result<LogId, LogStoreError> {
        let mut header = [0u8; RECORD_HEADER_LEN];
        let start = self.start_of(index);
        self.file.read_exact_at(&mut header, start)?;
        let (len, crc) = entry_codec::parse_record_header(&header).map_err(|source| LogStoreError::BadEntry { index, source })?;
        let mut body = vec![0u8; len];
        self.file.read_exact_at(&mut body, start + RECORD_HEADER_LEN as u64)?;
        let fixed = entry_codec::check_body(crc, &body).map_err(|source| LogStoreError::BadEntry { index, source })?;
        Ok(fixed.log_id)
    }

    fn delete(self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

// === Log ===

/// The segments and index of one Raft log. Lives on the shard that owns the group, shared by the
/// store and its readers; never borrowed across an `await`.
#[derive(Debug)]
struct Log {
    dir: PathBuf,
    config: LogStoreConfig,
    /// In index order, contiguous, each holding at least one entry.
    segments: VecDeque<Segment>,
    purged: Option<LogId>,
    /// The last entry's id, when there are entries.
    last: Option<LogId>,
}

/// What a write touched, for the flusher.
#[derive(Debug, Default)]
struct Touched {
    files: Vec<Arc<File>>,
    dir: bool,
}

impl Touched {
    fn file(&mut self, file: &Arc<File>) {
        if !self.files.iter().any(|f| Arc::ptr_eq(f, file)) {
            self.files.push(file.clone());
        }
    }
}

impl Log {
    /// The last log id openraft sees: the last entry, or the last purged id when that is later
    /// (everything purged, or a snapshot installed past the log's end).
    fn last_log_id(&self) -> Option<LogId> {
        match (self.last, self.purged) {
            (Some(last), Some(purged)) if purged.index >= last.index => Some(purged),
            (Some(last), _) => Some(last),
            (None, purged) => purged,
        }
    }

    /// The index the next append must start at; `None` for a log that never had an entry.
    fn next_index(&self) -> Option<u64> {
        self.last_log_id().map(|id| id.index + 1)
    }

    fn append(&mut self, entries: &[Entry]) -> Result<Touched, LogStoreError> {
        // Entries a purge already covers (the snapshot holds them) are dropped, not stored.
        let covered = entries.iter().take_while(|e| self.purged.is_some_and(|p| e.log_id.index <= p.index)).count();
        let entries = &entries[covered..];
        let mut expected = self.next_index();
        for entry in entries {
            let index = entry.log_id.index;
            if let Some(expected) = expected.filter(|&e| e != index) {
                return Err(LogStoreError::NotContiguous { expected, got: index });
            }
            if let EntryPayload::Normal(command) = &entry.payload {
                let size = BODY_HEADER_LEN + command.payload().len();
                if size > MAX_BODY_LEN {
                    return Err(LogStoreError::EntryTooLarge { index, size });
                }
            }
            expected = Some(index + 1);
        }

        let mut touched = Touched::default();
        let mut buf = Vec::new();
        let mut pending = Vec::new();
        for entry in entries {
            let roll = match self.segments.back() {
                None => true,
                Some(active) => {
                    active.size + buf.len() as u64 >= self.config.segment_bytes && !(active.positions.is_empty() && pending.is_empty())
                }
            };
            if roll {
                self.write_pending(&mut buf, &mut pending, &mut touched)?;
                self.segments.push_back(Segment::create(&self.dir, entry.log_id.index)?);
                touched.dir = true;
            }
            let active = self.segments.back().expect("a segment exists after rolling");
            pending.push((active.size + buf.len() as u64, entry.log_id));
            entry_codec::encode_entry(entry, &mut buf);
        }
        self.write_pending(&mut buf, &mut pending, &mut touched)?;
        Ok(touched)
    }

    /// Writes the records buffered for the active segment and indexes them.
    fn write_pending(&mut self, buf: &mut Vec<u8>, pending: &mut Vec<(u64, LogId)>, touched: &mut Touched) -> io::Result<()> {
        let Some(&(_, last)) = pending.last() else { return Ok(()) };
        let active = self.segments.back_mut().expect("records are buffered for an existing segment");
        active.file.write_all_at(buf, active.size)?;
        active.size += buf.len() as u64;
        active.positions.extend(pending.iter().map(|&(position, _)| position));
        touched.file(&active.file);
        self.last = Some(last);
        buf.clear();
        pending.clear();
        Ok(())
    }

    /// Entries in `[start, end)` that are present. With a byte budget, stops early once the next
    /// entry would exceed it, but always returns at least one entry if any is present.
    fn read(&self, start: u64, end: u64, budget: Option<u64>) -> Result<Vec<Entry>, LogStoreError> {
        let start = start.max(self.purged.map_or(0, |p| p.index + 1));
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        let mut left = budget;
        let first = self.segments.partition_point(|s| s.base <= start).saturating_sub(1);
        for segment in self.segments.range(first..) {
            if segment.base >= end {
                break;
            }
            let from_index = start.max(segment.base);
            let mut to_index = end.min(segment.next_index());
            if from_index >= to_index {
                continue;
            }
            let from = segment.start_of(from_index);
            let mut cut = false;
            if let Some(left) = left.as_mut() {
                let mut i = from_index;
                while i < to_index && (segment.end_of(i) - from <= *left || (i == from_index && out.is_empty())) {
                    i += 1;
                }
                cut = i < to_index;
                to_index = i;
                if to_index == from_index {
                    break;
                }
                *left = left.saturating_sub(segment.end_of(to_index - 1) - from);
            }
            let to = segment.end_of(to_index - 1);
            let mut buf = vec![0u8; (to - from) as usize];
            segment.file.read_exact_at(&mut buf, from)?;
            let buf = Bytes::from(buf);
            for index in from_index..to_index {
                let record = buf.slice((segment.start_of(index) - from) as usize..(segment.end_of(index) - from) as usize);
                let entry = entry_codec::decode_record(record).map_err(|source| LogStoreError::BadEntry { index, source })?;
                if entry.log_id.index != index {
                    return Err(LogStoreError::Corrupt {
                        path: segment.path.clone(),
                        reason: format!("the record at index {index} holds index {}", entry.log_id.index),
                    });
                }
                out.push(entry);
            }
            if cut {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes the entries at and after `index`.
    fn truncate(&mut self, index: u64) -> Result<Touched, LogStoreError> {
        let mut touched = Touched::default();
        while let Some(active) = self.segments.back_mut() {
            if active.base >= index {
                let segment = self.segments.pop_back().expect("checked");
                segment.delete()?;
                touched.dir = true;
                continue;
            }
            if active.next_index() > index {
                let keep = (index - active.base) as usize;
                let size = active.positions[keep];
                active.file.set_len(size)?;
                active.size = size;
                active.positions.truncate(keep);
                touched.file(&active.file);
            }
            break;
        }
        self.last = match self.segments.back() {
            Some(active) => Some(active.read_log_id(active.next_index() - 1)?),
            None => None,
        };
        Ok(touched)
    }

    /// Forgets the entries up to `log_id` and deletes every segment left with none. The caller has
    /// made the new purged id durable first.
    fn purge(&mut self, log_id: LogId) -> io::Result<bool> {
        self.purged = Some(log_id);
        let mut deleted = false;
        while self.segments.front().is_some_and(|s| s.last_index().is_none_or(|last| last <= log_id.index)) {
            self.segments.pop_front().expect("checked").delete()?;
            deleted = true;
        }
        if self.segments.is_empty() {
            self.last = None;
        }
        Ok(deleted)
    }
}

// === Flusher ===

type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

/// Someone waiting for writes up to `seq` to be on disk; `full` also waits for the committed log
/// id to be written.
struct Waiter {
    seq: u64,
    full: bool,
    done: Done,
}

/// The part of a store the flusher shares: what needs syncing and who is waiting for it.
#[derive(Debug)]
struct SyncShared {
    dir: PathBuf,
    state: Mutex<SyncState>,
}

struct SyncState {
    /// Sequence number of the last write (append, truncate, roll) made to the page cache.
    written: u64,
    /// Every write up to this one is on disk.
    synced: u64,
    /// Files written since the last sync; the directory too when a segment was created or
    /// deleted.
    dirty: Vec<Arc<File>>,
    dir_dirty: bool,
    waiters: Vec<Waiter>,
    /// A committed log id to write once write `seq` is on disk: `(seq, committed)`.
    committed: Option<(u64, Option<LogId>)>,
    committed_writing: bool,
    /// The last committed id written, and whether that write has been fsynced.
    committed_last: Option<LogId>,
    committed_unsynced: bool,
    /// Whether a flusher is running (at most one per store).
    running: bool,
    /// Set by the first failed write or fsync; fails every later write.
    failed: Option<String>,
    stats: SyncStats,
    #[cfg(test)]
    sync_delay: Duration,
}

impl fmt::Debug for SyncState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncState")
            .field("written", &self.written)
            .field("synced", &self.synced)
            .field("waiters", &self.waiters.len())
            .field("running", &self.running)
            .field("failed", &self.failed)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl SyncState {
    fn committed_settled(&self) -> bool {
        self.committed.is_none() && !self.committed_writing && !self.committed_unsynced
    }

    fn is_satisfied(&self, waiter: &Waiter) -> bool {
        waiter.seq <= self.synced && (!waiter.full || self.committed_settled())
    }

    /// Removes and returns the waiters whose writes are now on disk.
    fn take_ready(&mut self) -> Vec<Done> {
        let (ready, waiting): (Vec<Waiter>, Vec<Waiter>) =
            std::mem::take(&mut self.waiters).into_iter().partition(|w| self.is_satisfied(w));
        self.waiters = waiting;
        ready.into_iter().map(|w| w.done).collect()
    }

    fn failure(&self) -> Option<io::Error> {
        self.failed.as_ref().map(|why| io::Error::other(format!("raft log failed earlier: {why}")))
    }
}

/// Counters of a store's flusher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Sync rounds: each makes every write before it durable and completes every append it
    /// covered, however many.
    pub rounds: u64,
    /// fdatasync calls on segment files (a round syncs each file it touched).
    pub file_syncs: u64,
    /// Writes of the committed file.
    pub committed_writes: u64,
}

enum Job {
    Sync { target: u64, files: Vec<Arc<File>>, dir: bool },
    Committed { committed: Option<LogId>, durable: bool },
}

impl SyncShared {
    fn lock(&self) -> MutexGuard<'_, SyncState> {
        // The state stays consistent under every panic point (none are expected): keep going.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records writes made to the page cache; returns the sequence number that covers them.
    fn note_write(&self, touched: Touched) -> u64 {
        let mut st = self.lock();
        if touched.files.is_empty() && !touched.dir {
            return st.written;
        }
        st.written += 1;
        for file in touched.files {
            if !st.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
                st.dirty.push(file);
            }
        }
        st.dir_dirty |= touched.dir;
        st.written
    }

    /// Marks the store failed after a write error and fails everyone waiting.
    fn fail(&self, why: &LogStoreError) {
        let waiters: Vec<Done> = {
            let mut st = self.lock();
            st.failed.get_or_insert_with(|| why.to_string());
            st.waiters.drain(..).map(|w| w.done).collect()
        };
        for done in waiters {
            done(Err(io::Error::other(format!("raft log failed: {why}"))));
        }
    }

    /// Calls `done` once writes up to `seq` (and, with `full`, the committed id) are on disk.
    fn wait(self: &Arc<Self>, seq: u64, full: bool, done: Done) {
        let waiter = Waiter { seq, full, done };
        let mut st = self.lock();
        if let Some(error) = st.failure() {
            drop(st);
            (waiter.done)(Err(error));
        } else if st.is_satisfied(&waiter) {
            drop(st);
            (waiter.done)(Ok(()));
        } else {
            st.waiters.push(waiter);
            self.start(st);
        }
    }

    /// Waits until every write so far (and, with `full`, the committed id) is on disk.
    async fn wait_synced(self: &Arc<Self>, full: bool) -> Result<(), LogStoreError> {
        let seq = self.lock().written;
        let (tx, rx) = oneshot::channel();
        self.wait(
            seq,
            full,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(result) => result.map_err(LogStoreError::from),
            Err(_) => Err(LogStoreError::Failed("the flusher stopped (runtime shutting down)".into())),
        }
    }

    /// Asks for `committed` to be written once every write so far is on disk.
    fn save_committed(self: &Arc<Self>, committed: Option<LogId>) {
        let mut st = self.lock();
        let seq = st.written;
        st.committed = Some((seq, committed));
        self.start(st);
    }

    /// Starts the flusher unless it is running.
    fn start(self: &Arc<Self>, mut st: MutexGuard<'_, SyncState>) {
        if st.running {
            return;
        }
        st.running = true;
        drop(st);
        let shared = self.clone();
        // Detached: the flusher ends by itself once there is nothing left to sync.
        drop(tokio::task::spawn_blocking(move || shared.run()));
    }

    /// The flusher: sync, complete, repeat while there is work. Runs on the blocking pool.
    fn run(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                if let Some(error) = st.failure() {
                    st.running = false;
                    let waiters: Vec<Done> = st.waiters.drain(..).map(|w| w.done).collect();
                    drop(st);
                    for done in waiters {
                        done(Err(io::Error::new(error.kind(), error.to_string())));
                    }
                    return;
                }
                let full_waiter = st.waiters.iter().any(|w| w.full);
                if st.committed.is_some_and(|(seq, _)| seq <= st.synced) {
                    let (_, committed) = st.committed.take().expect("checked");
                    st.committed_writing = true;
                    Job::Committed { committed, durable: full_waiter }
                } else if st.written > st.synced {
                    Job::Sync { target: st.written, files: std::mem::take(&mut st.dirty), dir: std::mem::take(&mut st.dir_dirty) }
                } else if st.committed_unsynced && full_waiter {
                    st.committed_writing = true;
                    Job::Committed { committed: st.committed_last, durable: true }
                } else {
                    // Everything is on disk: no waiter is left, but be sure, then stop.
                    let ready = st.take_ready();
                    debug_assert!(st.waiters.is_empty(), "waiters left behind: {st:?}");
                    st.running = false;
                    drop(st);
                    for done in ready {
                        done(Ok(()));
                    }
                    return;
                }
            };
            match job {
                Job::Sync { target, files, dir } => {
                    #[cfg(test)]
                    {
                        let delay = self.lock().sync_delay;
                        std::thread::sleep(delay);
                    }
                    let result = files.iter().try_for_each(|f| f.sync_data()).and_then(|()| if dir { sync_dir(&self.dir) } else { Ok(()) });
                    let ready = {
                        let mut st = self.lock();
                        st.stats.rounds += 1;
                        st.stats.file_syncs += files.len() as u64;
                        match &result {
                            Ok(()) => {
                                st.synced = target;
                                st.take_ready()
                            }
                            Err(e) => {
                                tracing::error!(dir = %self.dir.display(), error = %e, "raft log fsync failed");
                                st.failed.get_or_insert_with(|| format!("fsync: {e}"));
                                st.waiters.drain(..).map(|w| w.done).collect()
                            }
                        }
                    };
                    for done in ready {
                        done(result.as_ref().map(|_| ()).map_err(|e| io::Error::new(e.kind(), e.to_string())));
                    }
                }
                Job::Committed { committed, durable } => {
                    // Entries up to `committed` are already on disk, so whatever of this write
                    // survives a crash is never ahead of the log; without fsyncs it costs no disk
                    // wait, which matters as openraft 0.9 waits for each append's flush.
                    let payload = entry_codec::encode_optional_log_id(committed.as_ref());
                    let written = if durable {
                        write_state_file(&self.dir, COMMITTED_FILE, &payload)
                    } else {
                        overwrite_state_file(&self.dir, COMMITTED_FILE, &payload)
                    };
                    if let Err(e) = &written {
                        // Optional state: an older committed id only means more re-applying on
                        // restart. A failing disk will fail the next log fsync anyway.
                        tracing::warn!(dir = %self.dir.display(), error = %e, "could not save the committed log id");
                    }
                    let ready = {
                        let mut st = self.lock();
                        st.committed_writing = false;
                        st.committed_last = committed;
                        st.committed_unsynced = written.is_ok() && !durable;
                        st.stats.committed_writes += 1;
                        st.take_ready()
                    };
                    for done in ready {
                        done(Ok(()));
                    }
                }
            }
        }
    }
}

/// A handle on a store's flusher that stays valid after the store moves into a `Raft`: for
/// metrics, and to flush at shutdown once the Raft instance has stopped.
#[derive(Debug, Clone)]
pub struct LogSyncHandle(Arc<SyncShared>);

impl LogSyncHandle {
    pub fn stats(&self) -> SyncStats {
        self.0.lock().stats
    }

    /// Waits until everything written so far is on disk, the committed log id included.
    pub async fn flush(&self) -> Result<(), LogStoreError> {
        self.0.wait_synced(true).await
    }
}

// === RaftLogStore ===

/// The Raft log of one group (see the module docs). Lives on the shard that owns the group.
#[derive(Debug)]
pub struct RaftLogStore {
    log: Rc<RefCell<Log>>,
    sync: Arc<SyncShared>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    recovery: RecoveryReport,
}

/// Reads entries of a [`RaftLogStore`] while it keeps appending: openraft gives one to each
/// replication stream. Lives on the same shard as its store. Reads are `pread`s on the shard
/// thread, like the partition store's fetch path: recent entries come from the page cache.
#[derive(Debug, Clone)]
pub struct LogReader {
    log: Rc<RefCell<Log>>,
}

impl RaftLogStore {
    /// Opens the log in `dir` (creating it if needed) and recovers it: see the module docs.
    /// The scan runs on the blocking pool.
    pub async fn open(dir: impl Into<PathBuf>, config: LogStoreConfig) -> Result<RaftLogStore, LogStoreError> {
        let dir = dir.into();
        let recovered =
            tokio::task::spawn_blocking(move || recover(dir, config)).await.map_err(|e| LogStoreError::Io(io::Error::other(e)))??;
        let Recovered { log, vote, committed, report } = recovered;
        if report.truncated_bytes > 0 || report.deleted_segments > 0 {
            tracing::warn!(
                dir = %log.dir.display(),
                truncated_bytes = report.truncated_bytes,
                deleted_segments = report.deleted_segments,
                bad_record = report.bad_record.as_deref().unwrap_or(""),
                "raft log repaired at open"
            );
        }
        tracing::debug!(dir = %log.dir.display(), ?report, last = ?log.last_log_id(), "raft log opened");
        let sync = Arc::new(SyncShared {
            dir: log.dir.clone(),
            state: Mutex::new(SyncState {
                written: 0,
                synced: 0,
                dirty: Vec::new(),
                dir_dirty: false,
                waiters: Vec::new(),
                committed: None,
                committed_writing: false,
                committed_last: committed,
                committed_unsynced: false,
                running: false,
                failed: None,
                stats: SyncStats::default(),
                #[cfg(test)]
                sync_delay: Duration::ZERO,
            }),
        });
        Ok(RaftLogStore { log: Rc::new(RefCell::new(log)), sync, vote, committed, recovery: report })
    }

    pub fn dir(&self) -> PathBuf {
        self.sync.dir.clone()
    }

    /// What opening the log found and repaired.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn sync_handle(&self) -> LogSyncHandle {
        LogSyncHandle(self.sync.clone())
    }

    /// A reader of this log that stays valid while openraft owns the store.
    pub fn reader(&self) -> LogReader {
        LogReader { log: self.log.clone() }
    }

    /// Appends entries and calls `done` once they are on disk (see the module docs). This is what
    /// [`RaftLogStorage::append`] does with openraft's callback.
    ///
    /// # Errors
    ///
    /// Entries that do not continue the log ([`LogStoreError::NotContiguous`]) or are too large
    /// are refused and nothing is written. A write error fails the store for good.
    pub fn append_with(
        &mut self,
        entries: impl IntoIterator<Item = Entry>,
        done: impl FnOnce(io::Result<()>) + Send + 'static,
    ) -> Result<(), LogStoreError> {
        if let Some(why) = self.sync.lock().failed.clone() {
            return Err(LogStoreError::Failed(why));
        }
        let entries: Vec<Entry> = entries.into_iter().collect();
        let touched = match self.log.borrow_mut().append(&entries) {
            Ok(touched) => touched,
            Err(e @ LogStoreError::Io(_)) => {
                self.sync.fail(&e);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let seq = self.sync.note_write(touched);
        self.sync.wait(seq, false, Box::new(done));
        Ok(())
    }

    /// Waits until everything written so far is on disk, the committed log id included: for a
    /// graceful shutdown.
    pub async fn flush(&self) -> Result<(), LogStoreError> {
        self.sync.wait_synced(true).await
    }

    async fn wait_synced(&self, full: bool) -> Result<(), LogStoreError> {
        self.sync.wait_synced(full).await
    }

    /// Records a change that bypassed `append` (a truncation) and waits until it is durable.
    async fn sync_touched(&self, touched: Touched) -> Result<(), LogStoreError> {
        self.sync.note_write(touched);
        self.wait_synced(false).await
    }

    fn check_failed(&self) -> Result<(), LogStoreError> {
        match self.sync.lock().failed.clone() {
            Some(why) => Err(LogStoreError::Failed(why)),
            None => Ok(()),
        }
    }
}

fn read_entries(log: &Rc<RefCell<Log>>, range: impl RangeBounds<u64>, budget: Option<u64>) -> Result<Vec<Entry>, LogStoreError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    log.borrow().read(start, end, budget)
}

fn read_error(e: LogStoreError) -> StorageError {
    match &e {
        LogStoreError::BadEntry { index, .. } => StorageIOError::read_log_at_index(*index, AnyError::new(&e)).into(),
        _ => StorageIOError::read_logs(AnyError::new(&e)).into(),
    }
}

fn write_error(e: LogStoreError) -> StorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

fn vote_error(e: LogStoreError) -> StorageError {
    StorageIOError::write_vote(AnyError::new(&e)).into()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> io::Result<T> + Send + 'static) -> Result<T, LogStoreError> {
    tokio::task::spawn_blocking(f).await.map_err(io::Error::other)?.map_err(LogStoreError::from)
}

// === openraft ===

impl LogReader {
    /// The id of the last entry written (durable or not yet), or of the last purged one.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.log.borrow().last_log_id()
    }
}

/// The store reads through a [`LogReader`] of its own log.
impl RaftLogReader<TypeConfig> for RaftLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        LogReader { log: self.log.clone() }.try_get_log_entries(range).await
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        LogReader { log: self.log.clone() }.limited_get_log_entries(start, end).await
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read_entries(&self.log, range, None).map_err(read_error)
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let budget = self.log.borrow().config.max_read_bytes;
        read_entries(&self.log, start..end, Some(budget)).map_err(read_error)
    }
}

impl RaftLogStorage<TypeConfig> for RaftLogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let log = self.log.borrow();
        Ok(LogState { last_purged_log_id: log.purged, last_log_id: log.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader { log: self.log.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        if self.vote.as_ref() == Some(vote) {
            return Ok(());
        }
        self.check_failed().map_err(vote_error)?;
        self.wait_synced(false).await.map_err(vote_error)?;
        let dir = self.dir();
        let payload = entry_codec::encode_vote(vote);
        blocking(move || write_state_file(&dir, VOTE_FILE, &payload)).await.map_err(vote_error)?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if self.committed != committed {
            self.committed = committed;
            self.sync.save_committed(committed);
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_with(entries, move |result| callback.log_io_completed(result)).map_err(write_error)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.check_failed().map_err(write_error)?;
        self.wait_synced(false).await.map_err(write_error)?;
        let touched = self.log.borrow_mut().truncate(log_id.index);
        let touched = match touched {
            Ok(touched) => touched,
            Err(e) => {
                self.sync.fail(&e);
                return Err(write_error(e));
            }
        };
        self.sync_touched(touched).await.map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if self.log.borrow().purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        self.check_failed().map_err(write_error)?;
        self.wait_synced(false).await.map_err(write_error)?;
        // The purged id is durable before any entry goes: a crash in between leaves segments
        // that the next open deletes.
        let dir = self.dir();
        let payload = entry_codec::encode_log_id(&log_id);
        blocking(move || write_state_file(&dir, PURGED_FILE, &payload)).await.map_err(write_error)?;
        let deleted = self.log.borrow_mut().purge(log_id).map_err(|e| write_error(e.into()))?;
        if deleted {
            // No need to wait: segments that come back after a crash are deleted at open.
            self.sync.note_write(Touched { files: Vec::new(), dir: true });
        }
        Ok(())
    }
}

// === files ===

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` atomically and durably: temp file, fsync, rename, fsync the directory.
pub(crate) fn write_state_file(dir: &Path, name: &str, payload: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(&entry_codec::seal_state(payload))?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Overwrites `dir/name` in place, without waiting for the disk: after a crash the file holds the
/// old payload, the new one, or bytes its CRC rejects. (A temp file and a rename per write cost
/// an inode allocation each; at one write per fsync round that was half the server's CPU.)
fn overwrite_state_file(dir: &Path, name: &str, payload: &[u8]) -> io::Result<()> {
    let sealed = entry_codec::seal_state(payload);
    let file = OpenOptions::new().write(true).create(true).truncate(false).open(dir.join(name))?;
    file.write_all_at(&sealed, 0)?;
    if file.metadata()?.len() != sealed.len() as u64 {
        file.set_len(sealed.len() as u64)?;
    }
    Ok(())
}

/// Reads a state file: `None` when it does not exist.
pub(crate) fn read_state_file<T>(
    dir: &Path,
    name: &str,
    decode: impl FnOnce(&[u8]) -> Result<T, CodecError>,
) -> Result<Option<T>, LogStoreError> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let value = entry_codec::open_state(&bytes).and_then(decode).map_err(|e| LogStoreError::Corrupt { path, reason: e.to_string() })?;
    Ok(Some(value))
}

struct Recovered {
    log: Log,
    vote: Option<Vote>,
    committed: Option<LogId>,
    report: RecoveryReport,
}

/// Outcome of scanning one segment file.
struct Scan {
    positions: Vec<u64>,
    last: Option<LogId>,
    valid_len: u64,
    file_len: u64,
    bad_record: Option<String>,
}

fn scan_segment(file: &File, base: u64) -> io::Result<Scan> {
    let file_len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut scan = Scan { positions: Vec::new(), last: None, valid_len: 0, file_len, bad_record: None };
    let mut body = Vec::new();
    while scan.valid_len < file_len {
        let position = scan.valid_len;
        let remaining = file_len - position;
        let bad = |why: String| Some(format!("at byte {position}: {why}"));
        if remaining < RECORD_HEADER_LEN as u64 {
            scan.bad_record = bad(format!("torn record header ({remaining} bytes)"));
            break;
        }
        let mut header = [0u8; RECORD_HEADER_LEN];
        reader.read_exact(&mut header)?;
        let (len, crc) = match entry_codec::parse_record_header(&header) {
            Ok(h) => h,
            Err(e) => {
                scan.bad_record = bad(e.to_string());
                break;
            }
        };
        if remaining < (RECORD_HEADER_LEN + len) as u64 {
            scan.bad_record = bad(format!("torn record ({len}-byte body, {remaining} bytes left)"));
            break;
        }
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
        let fixed = match entry_codec::check_body(crc, &body) {
            Ok(fixed) => fixed,
            Err(e) => {
                scan.bad_record = bad(e.to_string());
                break;
            }
        };
        let expected = base + scan.positions.len() as u64;
        if fixed.log_id.index != expected {
            scan.bad_record = bad(format!("record holds index {}, expected {expected}", fixed.log_id.index));
            break;
        }
        scan.positions.push(position);
        scan.last = Some(fixed.log_id);
        scan.valid_len = position + (RECORD_HEADER_LEN + len) as u64;
    }
    Ok(scan)
}

fn recover(dir: PathBuf, config: LogStoreConfig) -> Result<Recovered, LogStoreError> {
    fs::create_dir_all(&dir)?;
    let mut report = RecoveryReport::default();
    let mut bases = Vec::new();
    for dirent in fs::read_dir(&dir)? {
        let name = dirent?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            // A state file write cut short: the previous version is still in place.
            fs::remove_file(dir.join(name))?;
        } else if let Some(base) = name.strip_suffix(".log").filter(|s| s.len() == 20).and_then(|s| s.parse::<u64>().ok()) {
            bases.push(base);
        }
    }
    bases.sort_unstable();

    let vote = read_state_file(&dir, VOTE_FILE, entry_codec::decode_vote)?;
    let purged = read_state_file(&dir, PURGED_FILE, entry_codec::decode_log_id)?;
    let committed = match read_state_file(&dir, COMMITTED_FILE, entry_codec::decode_optional_log_id) {
        Ok(committed) => committed.flatten(),
        // Optional: without it openraft re-applies from the state machine's own position.
        Err(LogStoreError::Corrupt { path, reason }) => {
            tracing::warn!(path = %path.display(), reason, "ignoring an unreadable committed log id");
            None
        }
        Err(e) => return Err(e),
    };

    let mut segments: VecDeque<Segment> = VecDeque::new();
    let mut last: Option<LogId> = None;
    let mut dir_changed = false;
    let mut discard_rest = false;
    for base in bases {
        let path = dir.join(Segment::file_name(base));
        if !discard_rest {
            // A crash can leave a rolled-to segment on disk while the end of the one before it
            // (written in the same sync round, never acknowledged) is lost: what follows a gap
            // cannot be used.
            if let Some(expected) = last.map(|l| l.index + 1).filter(|&e| e != base) {
                let why = format!("segment {base} does not continue the log (expected index {expected})");
                tracing::warn!(segment = %path.display(), "{why}; deleting it and every later segment");
                report.bad_record.get_or_insert(why);
                discard_rest = true;
            }
        }
        if discard_rest {
            fs::remove_file(&path)?;
            report.deleted_segments += 1;
            dir_changed = true;
            continue;
        }
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let scan = scan_segment(&file, base)?;
        if scan.valid_len < scan.file_len {
            tracing::warn!(
                segment = %path.display(),
                reason = scan.bad_record.as_deref().unwrap_or(""),
                kept_bytes = scan.valid_len,
                cut_bytes = scan.file_len - scan.valid_len,
                "truncating the raft log at its first bad record"
            );
            file.set_len(scan.valid_len)?;
            file.sync_all()?;
            report.truncated_bytes += scan.file_len - scan.valid_len;
            report.bad_record = report.bad_record.or(scan.bad_record);
            discard_rest = true;
        }
        if scan.positions.is_empty() {
            // Created by a roll whose first write never reached the disk.
            drop(file);
            fs::remove_file(&path)?;
            report.deleted_segments += 1;
            dir_changed = true;
            discard_rest = true;
            continue;
        }
        report.entries += scan.positions.len() as u64;
        last = scan.last;
        segments.push_back(Segment { base, path, file: Arc::new(file), size: scan.valid_len, positions: scan.positions });
    }

    let mut log = Log { dir: dir.clone(), config, segments, purged: None, last };
    if let Some(purged) = purged {
        // Finishes a purge cut short by a crash.
        let before = log.segments.len();
        dir_changed |= log.purge(purged)?;
        report.deleted_segments += before - log.segments.len();
        if let Some(first) = log.segments.front().filter(|s| s.base > purged.index + 1) {
            return Err(LogStoreError::Corrupt {
                path: first.path.clone(),
                reason: format!("the log starts at index {} but only entries up to {} were purged", first.base, purged.index),
            });
        }
    }
    if dir_changed {
        sync_dir(&dir)?;
    }
    report.segments = log.segments.len();
    Ok(Recovered { log, vote, committed, report })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::Cursor;
    use std::sync::atomic::{AtomicU64, Ordering};

    use bytes::{Buf, BufMut};
    use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
    use openraft::raft::{
        AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
    };
    use openraft::storage::{RaftLogStorageExt, RaftStateMachine, Snapshot, SnapshotMeta};
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{BasicNode, CommittedLeaderId, RaftSnapshotBuilder, StoredMembership};
    use tempfile::TempDir;

    use super::*;
    use crate::raft::{Command, Membership};

    // === fixtures ===

    fn id(term: u64, index: u64) -> LogId {
        LogId { leader_id: CommittedLeaderId::new(term, 1), index }
    }

    fn normal(term: u64, index: u64) -> Entry {
        // Payload sizes vary so records straddle segment boundaries at different offsets.
        let payload = format!("offset-commit-{index}-{}", "x".repeat((index % 7 * 9) as usize));
        Entry { log_id: id(term, index), payload: EntryPayload::Normal(Command::new(Bytes::from(payload))) }
    }

    fn entry(term: u64, index: u64) -> Entry {
        match index % 10 {
            0 => Entry { log_id: id(term, index), payload: EntryPayload::Blank },
            5 => Entry {
                log_id: id(term, index),
                payload: EntryPayload::Membership(Membership::new(
                    vec![BTreeSet::from([1, 2, 3])],
                    BTreeMap::from([(1, BasicNode::new("a:1")), (2, BasicNode::new("b:2")), (3, BasicNode::new("c:3"))]),
                )),
            },
            _ => normal(term, index),
        }
    }

    fn entries(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
        indexes.map(|i| entry(term, i)).collect()
    }

    fn small_segments() -> LogStoreConfig {
        LogStoreConfig { segment_bytes: 256, ..LogStoreConfig::default() }
    }

    async fn open(dir: &Path, config: LogStoreConfig) -> RaftLogStore {
        RaftLogStore::open(dir, config).await.expect("open")
    }

    /// Appends in batches of 1, 2, 3, … entries, each batch waiting for its fsync.
    async fn append(store: &mut RaftLogStore, all: Vec<Entry>) {
        let mut all = all.into_iter().peekable();
        let mut batch = 1;
        while all.peek().is_some() {
            let chunk: Vec<Entry> = all.by_ref().take(batch).collect();
            store.blocking_append(chunk).await.expect("append");
            batch += 1;
        }
    }

    async fn read_all(store: &mut RaftLogStore) -> Vec<Entry> {
        store.try_get_log_entries(..).await.expect("read")
    }

    /// `(first index, path)` of every segment file, in order.
    fn segment_files(dir: &Path) -> Vec<(u64, PathBuf)> {
        let mut files: Vec<(u64, PathBuf)> = fs::read_dir(dir)
            .unwrap()
            .map(|d| d.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .map(|p| (p.file_stem().unwrap().to_str().unwrap().parse().unwrap(), p))
            .collect();
        files.sort();
        files
    }

    fn log_state(store: &RaftLogStore) -> (Option<LogId>, Option<LogId>) {
        let log = store.log.borrow();
        (log.purged, log.last_log_id())
    }

    // === append and read ===

    #[tokio::test]
    async fn append_and_read_across_segment_rolls() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let mut reader = store.get_log_reader().await;
        assert!(read_all(&mut store).await.is_empty());
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, None);

        let want = entries(2, 1..=120);
        append(&mut store, want.clone()).await;

        let files = segment_files(tmp.path());
        assert!(files.len() >= 10, "expected many small segments, got {}", files.len());
        assert_eq!(files[0].0, 1);
        for window in files.windows(2) {
            assert!(window[0].0 < window[1].0);
        }
        assert_eq!(read_all(&mut store).await, want);
        // A reader taken before the appends sees them, in any range, across segment boundaries.
        assert_eq!(reader.try_get_log_entries(17..43).await.unwrap(), want[16..42].to_vec());
        assert_eq!(reader.try_get_log_entries(50..=50).await.unwrap(), want[49..50].to_vec());
        assert_eq!(reader.try_get_log_entries(110..500).await.unwrap(), want[109..].to_vec());
        assert!(reader.try_get_log_entries(121..).await.unwrap().is_empty());
        assert!(reader.try_get_log_entries(0..1).await.unwrap().is_empty());
        // Every segment boundary is read correctly on both sides.
        for (base, _) in &files[1..] {
            let got = reader.try_get_log_entries(base - 1..base + 1).await.unwrap();
            assert_eq!(got, want[(*base - 2) as usize..*base as usize].to_vec());
        }
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(id(2, 120)));

        drop((store, reader));
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.recovery().entries, 120);
        assert_eq!(store.recovery().segments, files.len());
        assert_eq!(store.recovery().truncated_bytes, 0);
        assert_eq!(read_all(&mut store).await, want);
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(id(2, 120)));
        // The log goes on where it was.
        append(&mut store, entries(3, 121..=125)).await;
        assert_eq!(read_all(&mut store).await.len(), 125);
    }

    #[tokio::test]
    async fn limited_reads_respect_the_byte_budget() {
        let tmp = TempDir::new().unwrap();
        let config = LogStoreConfig { segment_bytes: 256, max_read_bytes: 300 };
        let mut store = open(tmp.path(), config).await;
        let want = entries(1, 1..=80);
        append(&mut store, want.clone()).await;

        let mut got = Vec::new();
        let mut next = 1;
        while next <= 80 {
            let batch = store.limited_get_log_entries(next, 81).await.unwrap();
            assert!(!batch.is_empty(), "a non-empty range must return an entry");
            let mut bytes = Vec::new();
            for e in &batch {
                entry_codec::encode_entry(e, &mut bytes);
            }
            assert!(batch.len() == 1 || bytes.len() as u64 <= config.max_read_bytes, "{} bytes", bytes.len());
            next += batch.len() as u64;
            got.extend(batch);
        }
        assert_eq!(got, want);

        // An entry larger than the budget still comes back on its own.
        let big = Entry { log_id: id(1, 81), payload: EntryPayload::Normal(Command::new(Bytes::from(vec![7u8; 5000]))) };
        store.blocking_append([big.clone()]).await.unwrap();
        assert_eq!(store.limited_get_log_entries(81, 82).await.unwrap(), vec![big]);
    }

    #[tokio::test]
    async fn appends_must_continue_the_log() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        // A new log may start anywhere (openraft starts at 0; a follower may start later).
        append(&mut store, entries(1, 5..=9)).await;
        for bad in [vec![entry(1, 11)], vec![entry(1, 9)], vec![entry(1, 10), entry(1, 12)]] {
            let err = store.append_with(bad, |_| panic!("a refused append must not complete")).unwrap_err();
            assert!(matches!(err, LogStoreError::NotContiguous { .. }), "{err}");
        }
        assert_eq!(read_all(&mut store).await, entries(1, 5..=9));
        append(&mut store, entries(1, 10..=10)).await;
        assert_eq!(read_all(&mut store).await.len(), 6);
    }

    // === truncate and purge ===

    #[tokio::test]
    async fn truncate_inside_a_segment_and_at_a_boundary() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let want = entries(1, 1..=60);
        append(&mut store, want.clone()).await;

        // Inside a segment: pick an index that is not a segment's first entry.
        let files = segment_files(tmp.path());
        let inside = (30..60).find(|i| files.iter().all(|(base, _)| base != i)).unwrap();
        store.truncate(id(1, inside)).await.unwrap();
        assert_eq!(read_all(&mut store).await, want[..(inside - 1) as usize].to_vec());
        assert_eq!(log_state(&store).1, Some(id(1, inside - 1)));
        assert!(segment_files(tmp.path()).iter().all(|(base, _)| *base < inside));

        // At a boundary: the segment that starts there goes entirely.
        let files = segment_files(tmp.path());
        let (boundary, path) = files.last().unwrap().clone();
        store.truncate(id(1, boundary)).await.unwrap();
        assert!(!path.exists());
        assert_eq!(segment_files(tmp.path()).len(), files.len() - 1);
        assert_eq!(read_all(&mut store).await, want[..(boundary - 1) as usize].to_vec());
        assert_eq!(log_state(&store).1, Some(id(1, boundary - 1)));

        // Past the end: nothing happens.
        store.truncate(id(1, 1000)).await.unwrap();
        assert_eq!(read_all(&mut store).await.len() as u64, boundary - 1);

        // A new leader's entries replace the truncated ones, and survive a reopen.
        let replacement = entries(2, boundary..=boundary + 20);
        append(&mut store, replacement.clone()).await;
        let mut expected = want[..(boundary - 1) as usize].to_vec();
        expected.extend(replacement);
        assert_eq!(read_all(&mut store).await, expected);
        drop(store);
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.recovery().truncated_bytes, 0);
        assert_eq!(read_all(&mut store).await, expected);

        // Truncating everything leaves an empty log that accepts a fresh start.
        store.truncate(id(1, 1)).await.unwrap();
        assert!(read_all(&mut store).await.is_empty());
        assert!(segment_files(tmp.path()).is_empty());
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, None);
        append(&mut store, entries(3, 1..=3)).await;
        assert_eq!(read_all(&mut store).await, entries(3, 1..=3));
    }

    #[tokio::test]
    async fn purge_deletes_whole_segments_and_is_remembered() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let want = entries(1, 1..=60);
        append(&mut store, want.clone()).await;
        let before = segment_files(tmp.path());

        store.purge(id(1, 27)).await.unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(id(1, 27)), Some(id(1, 60))));
        assert_eq!(read_all(&mut store).await, want[27..].to_vec());
        assert!(store.try_get_log_entries(20..30).await.unwrap().iter().all(|e| e.log_id.index >= 28));
        let after = segment_files(tmp.path());
        assert!(after.len() < before.len(), "whole segments are freed");
        // The segment holding 28 is kept, whole: only segments with nothing left are deleted.
        assert!(after[0].0 <= 28);
        assert!(before.iter().filter(|(base, _)| *base <= 28).count() >= 2);
        // Purging again to an earlier point changes nothing.
        store.purge(id(1, 10)).await.unwrap();
        assert_eq!(log_state(&store).0, Some(id(1, 27)));

        drop(store);
        let mut store = open(tmp.path(), small_segments()).await;
        let state = store.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(id(1, 27)), Some(id(1, 60))));
        assert_eq!(read_all(&mut store).await, want[27..].to_vec());

        // Past the end (a snapshot installed beyond the log): no entry and no segment left.
        store.purge(id(2, 100)).await.unwrap();
        assert!(segment_files(tmp.path()).is_empty());
        assert!(read_all(&mut store).await.is_empty());
        let state = store.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(id(2, 100)), Some(id(2, 100))));
        let err = store.append_with([entry(2, 102)], |_| ()).unwrap_err();
        assert!(matches!(err, LogStoreError::NotContiguous { expected: 101, got: 102 }), "{err}");
        append(&mut store, entries(2, 101..=103)).await;
        drop(store);
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(read_all(&mut store).await, entries(2, 101..=103));
        assert_eq!(log_state(&store), (Some(id(2, 100)), Some(id(2, 103))));
    }

    #[tokio::test]
    async fn open_finishes_an_interrupted_purge() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        append(&mut store, entries(1, 1..=60)).await;
        let files = segment_files(tmp.path());
        drop(store);
        // The purged id reached the disk; the crash came before the segments were deleted.
        let purged = files[3].0 - 1;
        write_state_file(tmp.path(), PURGED_FILE, &entry_codec::encode_log_id(&id(1, purged))).unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.recovery().deleted_segments, 3);
        assert_eq!(segment_files(tmp.path())[0].0, purged + 1);
        assert_eq!(read_all(&mut store).await, entries(1, purged + 1..=60));
    }

    // === durability ===

    #[tokio::test]
    async fn group_commit_shares_fsyncs() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        // A slow disk: each fsync takes 20 ms, so appends pile up behind it.
        store.sync.lock().sync_delay = Duration::from_millis(20);
        let completed = Arc::new(Mutex::new(Vec::new()));
        let mut receivers = Vec::new();
        const APPENDS: u64 = 200;
        for i in 1..=APPENDS {
            let (tx, rx) = oneshot::channel();
            let completed = completed.clone();
            store
                .append_with([entry(1, i)], move |result| {
                    completed.lock().unwrap().push(i);
                    let _ = tx.send(result);
                })
                .unwrap();
            receivers.push(rx);
        }
        // Readable at once, durable only later.
        assert_eq!(read_all(&mut store).await.len() as u64, APPENDS);
        assert!(completed.lock().unwrap().len() < APPENDS as usize);
        for rx in receivers {
            rx.await.unwrap().unwrap();
        }
        let stats = store.sync_handle().stats();
        assert!(stats.rounds < APPENDS / 10, "{APPENDS} appends took {} fsync rounds", stats.rounds);
        assert!(stats.rounds >= 1);
        // Callbacks complete in append order.
        assert_eq!(*completed.lock().unwrap(), (1..=APPENDS).collect::<Vec<_>>());
        eprintln!("{APPENDS} appends, {} sync rounds, {} file fsyncs", stats.rounds, stats.file_syncs);
    }

    #[tokio::test]
    async fn callback_waits_for_the_fsync() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        store.sync.lock().sync_delay = Duration::from_millis(100);
        let (tx, mut rx) = oneshot::channel();
        store.append_with([entry(1, 1)], move |r| drop(tx.send(r))).unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(rx.try_recv().is_err(), "completed before its fsync");
        assert_eq!(store.sync_handle().stats().rounds, 0);
        rx.await.unwrap().unwrap();
        assert_eq!(store.sync_handle().stats().rounds, 1);
    }

    #[tokio::test]
    async fn torn_tail_is_cut_at_open() {
        let tmp = TempDir::new().unwrap();
        let config = LogStoreConfig::default();
        let mut store = open(tmp.path(), config).await;
        let want = entries(1, 1..=10);
        append(&mut store, want.clone()).await;
        let (path, last_start, size) = {
            let log = store.log.borrow();
            let segment = &log.segments[0];
            (segment.path.clone(), segment.start_of(10), segment.size)
        };
        drop(store);

        // A crash in the middle of writing entry 10's body.
        let torn_at = last_start + RECORD_HEADER_LEN as u64 + 3;
        OpenOptions::new().write(true).open(&path).unwrap().set_len(torn_at).unwrap();
        let mut store = open(tmp.path(), config).await;
        let report = store.recovery().clone();
        assert_eq!(report.truncated_bytes, torn_at - last_start);
        assert!(report.bad_record.as_deref().unwrap().contains("torn record"), "{report:?}");
        assert_eq!(fs::metadata(&path).unwrap().len(), last_start);
        assert_eq!(read_all(&mut store).await, want[..9].to_vec());
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(id(1, 9)));
        // The log continues from the last good entry, and the repair is for good.
        let redo = vec![normal(2, 10), normal(2, 11)];
        store.blocking_append(redo.clone()).await.unwrap();
        drop(store);
        let mut store = open(tmp.path(), config).await;
        assert_eq!(store.recovery().truncated_bytes, 0);
        let mut expected = want[..9].to_vec();
        expected.extend(redo);
        assert_eq!(read_all(&mut store).await, expected);
        drop(store);

        // A crash in the middle of a record header.
        let new_size = fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all_at(&[0, 0, 1], new_size).unwrap();
        drop(f);
        let mut store = open(tmp.path(), config).await;
        assert_eq!(store.recovery().truncated_bytes, 3);
        assert_eq!(read_all(&mut store).await, expected);
        drop(store);
        assert!(size > 0);
    }

    #[tokio::test]
    async fn corrupt_record_and_what_follows_are_dropped() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let want = entries(1, 1..=60);
        append(&mut store, want.clone()).await;
        let files = segment_files(tmp.path());
        assert!(files.len() > 4);
        // Flip one byte inside the body of the second entry of the third segment.
        let (base, path) = files[2].clone();
        let position = {
            let log = store.log.borrow();
            log.segments.iter().find(|s| s.base == base).unwrap().start_of(base + 1)
        };
        drop(store);
        let f = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut byte = [0u8; 1];
        let at = position + RECORD_HEADER_LEN as u64 + 10;
        f.read_exact_at(&mut byte, at).unwrap();
        f.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
        drop(f);

        let mut store = open(tmp.path(), small_segments()).await;
        let report = store.recovery().clone();
        assert!(report.bad_record.as_deref().unwrap().contains("CRC"), "{report:?}");
        // Later segments would leave a hole: they go too.
        assert_eq!(report.deleted_segments, files.len() - 3);
        assert_eq!(segment_files(tmp.path()).len(), 3);
        assert_eq!(read_all(&mut store).await, want[..base as usize].to_vec());
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(id(1, base)));
    }

    #[tokio::test]
    async fn segment_tail_lost_in_a_crash_drops_what_follows() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let want = entries(1, 1..=80);
        append(&mut store, want.clone()).await;
        let files = segment_files(tmp.path());
        assert!(files.len() > 6);
        let (cut_base, cut_position) = {
            let log = store.log.borrow();
            let segment = log.segments.iter().find(|s| s.base == files[2].0).unwrap();
            assert!(segment.positions.len() >= 2);
            (segment.base, segment.start_of(segment.base + 1))
        };
        drop(store);

        // The end of segment 2 is lost at a record boundary (its records all check out), while
        // the segments rolled after it reached the disk: a gap.
        OpenOptions::new().write(true).open(&files[2].1).unwrap().set_len(cut_position).unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        let report = store.recovery().clone();
        assert_eq!(report.deleted_segments, files.len() - 3, "{report:?}");
        assert!(report.bad_record.as_deref().unwrap().contains("does not continue"), "{report:?}");
        assert_eq!(read_all(&mut store).await, want[..cut_base as usize].to_vec());
        append(&mut store, entries(2, cut_base + 1..=cut_base + 3)).await;
        drop(store);

        // A rolled-to segment that is empty on disk: it and everything after it go.
        let files = segment_files(tmp.path());
        OpenOptions::new().write(true).open(&files[1].1).unwrap().set_len(0).unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.recovery().deleted_segments, files.len() - 1);
        assert_eq!(read_all(&mut store).await, want[..(files[1].0 - 1) as usize].to_vec());
        assert_eq!(segment_files(tmp.path()).len(), 1);
    }

    #[tokio::test]
    async fn vote_and_committed_survive_reopen() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.read_vote().await.unwrap(), None);
        assert_eq!(store.read_committed().await.unwrap(), None);
        append(&mut store, entries(1, 1..=5)).await;
        let vote = Vote::new(3, 2);
        store.save_vote(&vote).await.unwrap();
        store.save_committed(Some(id(1, 4))).await.unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 4)));
        store.flush().await.unwrap();
        drop(store);

        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 4)));
        let committed_vote = Vote::new_committed(4, 1);
        store.save_vote(&committed_vote).await.unwrap();
        store.save_committed(Some(id(1, 5))).await.unwrap();
        store.flush().await.unwrap();
        drop(store);
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.read_vote().await.unwrap(), Some(committed_vote));
        assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 5)));
        assert!(fs::read_dir(tmp.path()).unwrap().all(|d| !d.unwrap().path().to_string_lossy().ends_with(".tmp")));
    }

    #[tokio::test]
    async fn committed_is_never_written_ahead_of_the_log() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        store.sync.lock().sync_delay = Duration::from_millis(200);
        // A follower: the leader's commit index covers entries this node has not synced yet.
        store.append_with(entries(1, 1..=3), |_| ()).unwrap();
        store.save_committed(Some(id(1, 3))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!tmp.path().join(COMMITTED_FILE).exists(), "committed id on disk before its entries");
        store.flush().await.unwrap();
        let on_disk = read_state_file(tmp.path(), COMMITTED_FILE, entry_codec::decode_optional_log_id).unwrap();
        assert_eq!(on_disk, Some(Some(id(1, 3))));
        assert!(store.sync_handle().stats().committed_writes >= 1);
    }

    #[tokio::test]
    async fn corrupt_state_files() {
        let tmp = TempDir::new().unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        store.save_vote(&Vote::new(1, 1)).await.unwrap();
        store.save_committed(Some(id(1, 0))).await.unwrap();
        store.flush().await.unwrap();
        drop(store);
        // A bad committed file is ignored (it is optional), a bad vote is not (double voting).
        fs::write(tmp.path().join(COMMITTED_FILE), b"garbage").unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.read_committed().await.unwrap(), None);
        drop(store);
        fs::write(tmp.path().join(VOTE_FILE), b"garbage").unwrap();
        let err = RaftLogStore::open(tmp.path(), small_segments()).await.unwrap_err();
        assert!(matches!(err, LogStoreError::Corrupt { .. }), "{err}");
        // A temp file left by a crash is removed and does not count.
        write_state_file(tmp.path(), VOTE_FILE, &entry_codec::encode_vote(&Vote::new(2, 1))).unwrap();
        fs::write(tmp.path().join("vote.tmp"), b"half").unwrap();
        let mut store = open(tmp.path(), small_segments()).await;
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        assert!(!tmp.path().join("vote.tmp").exists());
    }

    // === openraft's conformance suite ===

    /// A test-only state machine: it records every applied command and snapshots that record.
    /// The coordinator's real state machine comes later.
    #[derive(Debug, Default)]
    struct MemStateMachine {
        state: SmState,
        snapshot: Rc<RefCell<Option<StoredSnapshot>>>,
        snapshots_built: Rc<AtomicU64>,
    }

    #[derive(Debug, Default, Clone)]
    struct SmState {
        last_applied: Option<LogId>,
        membership: StoredMembership<u64, BasicNode>,
        applied: Vec<(LogId, Bytes)>,
    }

    #[derive(Debug, Clone)]
    struct StoredSnapshot {
        meta: SnapshotMeta<u64, BasicNode>,
        data: Vec<u8>,
    }

    #[derive(Debug)]
    struct MemSnapshotBuilder {
        state: SmState,
        slot: Rc<RefCell<Option<StoredSnapshot>>>,
        built: Rc<AtomicU64>,
    }

    fn encode_applied(applied: &[(LogId, Bytes)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_u32(applied.len() as u32);
        for (log_id, payload) in applied {
            entry_codec::put_log_id(&mut out, log_id);
            out.put_u32(payload.len() as u32);
            out.extend_from_slice(payload);
        }
        out
    }

    fn decode_applied(mut b: &[u8]) -> Result<Vec<(LogId, Bytes)>, CodecError> {
        if b.len() < 4 {
            return Err(CodecError::Truncated { needed: 4 });
        }
        let count = b.get_u32();
        let mut applied = Vec::new();
        for _ in 0..count {
            let log_id = entry_codec::get_log_id(&mut b)?;
            if b.len() < 4 {
                return Err(CodecError::Truncated { needed: 4 });
            }
            let len = b.get_u32() as usize;
            if b.len() < len {
                return Err(CodecError::Truncated { needed: len - b.len() });
            }
            applied.push((log_id, b.copy_to_bytes(len)));
        }
        Ok(applied)
    }

    impl RaftSnapshotBuilder<TypeConfig> for MemSnapshotBuilder {
        async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
            let n = self.built.fetch_add(1, Ordering::Relaxed) + 1;
            let last = self.state.last_applied;
            let meta = SnapshotMeta {
                last_log_id: last,
                last_membership: self.state.membership.clone(),
                snapshot_id: format!("{}-{}-{n}", last.map_or(0, |l| l.leader_id.term), last.map_or(0, |l| l.index)),
            };
            let data = encode_applied(&self.state.applied);
            *self.slot.borrow_mut() = Some(StoredSnapshot { meta: meta.clone(), data: data.clone() });
            Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
        }
    }

    impl RaftStateMachine<TypeConfig> for MemStateMachine {
        type SnapshotBuilder = MemSnapshotBuilder;

        async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership<u64, BasicNode>), StorageError> {
            Ok((self.state.last_applied, self.state.membership.clone()))
        }

        async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
        where
            I: IntoIterator<Item = Entry> + OptionalSend,
            I::IntoIter: OptionalSend,
        {
            let mut replies = Vec::new();
            for entry in entries {
                self.state.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(command) => self.state.applied.push((entry.log_id, command.into_payload())),
                    EntryPayload::Membership(m) => self.state.membership = StoredMembership::new(Some(entry.log_id), m),
                }
                replies.push(());
            }
            Ok(replies)
        }

        async fn get_snapshot_builder(&mut self) -> MemSnapshotBuilder {
            MemSnapshotBuilder { state: self.state.clone(), slot: self.snapshot.clone(), built: self.snapshots_built.clone() }
        }

        async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
            Ok(Box::new(Cursor::new(Vec::new())))
        }

        async fn install_snapshot(
            &mut self,
            meta: &SnapshotMeta<u64, BasicNode>,
            snapshot: Box<Cursor<Vec<u8>>>,
        ) -> Result<(), StorageError> {
            let data = snapshot.into_inner();
            let applied = decode_applied(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
            self.state = SmState { last_applied: meta.last_log_id, membership: meta.last_membership.clone(), applied };
            *self.snapshot.borrow_mut() = Some(StoredSnapshot { meta: meta.clone(), data });
            Ok(())
        }

        async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
            Ok(self.snapshot.borrow().clone().map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
        }
    }

    /// Each suite case gets a fresh directory with small segments, so rolls happen inside it.
    struct Builder;

    impl StoreBuilder<TypeConfig, RaftLogStore, MemStateMachine, TempDir> for Builder {
        async fn build(&self) -> Result<(TempDir, RaftLogStore, MemStateMachine), StorageError> {
            let tmp = TempDir::new().map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
            let store = RaftLogStore::open(tmp.path().join("raft"), LogStoreConfig { segment_bytes: 128, max_read_bytes: 256 })
                .await
                .map_err(write_error)?;
            Ok((tmp, store, MemStateMachine::default()))
        }
    }

    /// openraft's storage conformance suite. It builds its own tokio runtime per case (so this is
    /// a plain test, not a tokio one); the store needs no LocalSet (its flusher is on the
    /// blocking pool), so it runs as is. Several cases sleep 1 s (purge may be lazy).
    #[test]
    fn openraft_storage_suite() {
        let started = Instant::now();
        Suite::test_all(Builder).expect("openraft storage suite");
        eprintln!("openraft storage suite passed in {:.1?}", started.elapsed());
    }

    // === a real Raft on a shard's LocalSet ===

    #[derive(Debug)]
    struct NoNetwork;

    fn unreachable<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
        RPCError::Unreachable(Unreachable::new(&io::Error::other("single-node test: no peers")))
    }

    impl RaftNetworkFactory<TypeConfig> for NoNetwork {
        type Network = NoNetwork;

        async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> NoNetwork {
            NoNetwork
        }
    }

    impl RaftNetwork<TypeConfig> for NoNetwork {
        async fn append_entries(
            &mut self,
            _rpc: AppendEntriesRequest<TypeConfig>,
            _option: RPCOption,
        ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
            Err(unreachable())
        }

        async fn install_snapshot(
            &mut self,
            _rpc: InstallSnapshotRequest<TypeConfig>,
            _option: RPCOption,
        ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
            Err(unreachable())
        }

        async fn vote(
            &mut self,
            _rpc: VoteRequest<u64>,
            _option: RPCOption,
        ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
            Err(unreachable())
        }
    }

    /// A one-voter group on a current_thread runtime + LocalSet, as on a shard: concurrent client
    /// writes all commit through this store, and everything is there after a restart. (openraft
    /// 0.9 waits for each append's fsync before the next, so expect about one round per write.)
    #[test]
    fn single_node_raft_on_a_local_set() {
        const WRITES: usize = 300;
        let tmp = TempDir::new().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        let (stats, last) = local.block_on(&runtime, async {
            let store = open(tmp.path(), LogStoreConfig { segment_bytes: 4096, ..LogStoreConfig::default() }).await;
            let handle = store.sync_handle();
            let config =
                openraft::Config { heartbeat_interval: 50, election_timeout_min: 150, election_timeout_max: 300, ..Default::default() };
            let raft =
                openraft::Raft::<TypeConfig>::new(1, Arc::new(config.validate().unwrap()), NoNetwork, store, MemStateMachine::default())
                    .await
                    .unwrap();
            raft.initialize(BTreeMap::from([(1, BasicNode::new("127.0.0.1:0"))])).await.unwrap();
            raft.wait(Some(Duration::from_secs(10))).current_leader(1, "leader").await.unwrap();

            let writes = (0..WRITES).map(|i| raft.client_write(Command::new(Bytes::from(format!("commit-{i}")))));
            let results = futures_util::future::join_all(writes).await;
            let last = results.into_iter().map(|r| r.expect("client_write").log_id).max().unwrap();
            raft.shutdown().await.unwrap();
            handle.flush().await.unwrap();
            (handle.stats(), last)
        });
        drop(local);
        drop(runtime);
        eprintln!("{WRITES} client writes, {} sync rounds, {} committed-id writes", stats.rounds, stats.committed_writes);
        assert!(stats.rounds >= 1 && stats.committed_writes >= 1, "{stats:?}");

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut store = open(tmp.path(), LogStoreConfig::default()).await;
            let all = read_all(&mut store).await;
            let commands: Vec<Bytes> = all
                .iter()
                .filter_map(|e| match &e.payload {
                    EntryPayload::Normal(c) => Some(c.payload().clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(commands.len(), WRITES);
            let mut seen: Vec<String> = commands.iter().map(|c| String::from_utf8(c.to_vec()).unwrap()).collect();
            seen.sort();
            let mut expected: Vec<String> = (0..WRITES).map(|i| format!("commit-{i}")).collect();
            expected.sort();
            assert_eq!(seen, expected);
            assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(last));
            assert_eq!(store.read_committed().await.unwrap(), Some(last));
            let vote = store.read_vote().await.unwrap().expect("vote saved");
            assert!(vote.is_committed() && vote.leader_id().voted_for() == Some(1), "{vote:?}");
        });
    }
}
