//! One segment: a `.log` file of v2 record batches plus its `.index` and `.timeindex`.
//!
//! File names are the base offset, zero-padded to 20 digits, as in Kafka
//! (`00000000000000000000.log`), so tools that understand Kafka's log layout can read them.
//!
//! The `.log` is opened through the shard's [`OpenFiles`] when it is used; the index files are
//! written when the segment is sealed (see `index.rs`).

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::record_batch::{self, BatchHeader};

use super::index::{IndexLoad, IndexWrite, OffsetIndex, TimeIndex};
use super::open_files::{CachedFile, OpenFiles};
use super::timestamp_scan::{self, Target, TimestampScan};
use super::FileSlice;

pub(crate) fn file_name(base_offset: i64, ext: &str) -> String {
    format!("{base_offset:020}.{ext}")
}

/// Where a fetch offset falls in a segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchPosition {
    pub(crate) position: u64,
    pub(crate) header: BatchHeader,
}

/// A batch as written to a segment: where it is, and what of its header the indexes need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoredBatch {
    pub(crate) position: u64,
    pub(crate) len: u32,
    pub(crate) last_offset: i64,
    pub(crate) max_timestamp: i64,
}

impl StoredBatch {
    pub(crate) fn of(header: &BatchHeader, position: u64, len: u32) -> StoredBatch {
        StoredBatch { position, len, last_offset: header.last_offset(), max_timestamp: header.max_timestamp }
    }
}

/// A segment of one partition. Lives on the shard that owns the partition; the log file handle is
/// shared (`Arc`) with in-flight fetch responses, which keeps it readable even after retention
/// deletes the file.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    log: CachedFile,
    /// The log file's inode: a timestamp scan run off the shard tells by it whether compaction
    /// has put another file in this one's place since the scan was prepared.
    inode: u64,
    /// Bytes of valid batches in the log file.
    size: u64,
    index: OffsetIndex,
    time_index: TimeIndex,
    index_interval: u32,
    bytes_since_index: u32,
    /// One past the last offset stored here (the base offset when empty).
    pub(crate) next_offset: i64,
    /// Largest batch timestamp and the last offset of that batch; -1 when none.
    pub(crate) max_timestamp: i64,
    pub(crate) offset_of_max_timestamp: i64,
    /// The first batch's max timestamp: segment.ms counts record time from it, as in Kafka.
    pub(crate) first_timestamp: Option<i64>,
    /// Wall time the segment was created (or opened), for segments without record timestamps.
    pub(crate) created_ms: i64,
}

impl Segment {
    /// Creates a new, empty segment.
    pub(crate) fn create(files: &Rc<OpenFiles>, dir: &Path, base_offset: i64, index_interval: u32, now_ms: i64) -> io::Result<Segment> {
        let mut segment = Segment::unwritten(files, dir, base_offset, index_interval, now_ms);
        segment.create_file()?;
        Ok(segment)
    }

    /// An empty segment whose file does not exist yet ([`Segment::create_file`] makes it): a new
    /// partition touches the disk at its first append, not when its topic is created.
    pub(crate) fn unwritten(files: &Rc<OpenFiles>, dir: &Path, base_offset: i64, index_interval: u32, now_ms: i64) -> Segment {
        Segment::empty(files.file(dir.join(file_name(base_offset, "log"))), dir, base_offset, index_interval, now_ms)
    }

    /// Creates (or empties) the segment's log file.
    pub(crate) fn create_file(&mut self) -> io::Result<()> {
        let opened = OpenOptions::new().create(true).read(true).append(true).open(self.log.path())?;
        opened.set_len(0)?;
        self.inode = opened.metadata()?.ino();
        self.log.insert(opened)?;
        Ok(())
    }

    /// A segment that has indexed nothing yet, over `log`.
    fn empty(log: CachedFile, dir: &Path, base_offset: i64, index_interval: u32, now_ms: i64) -> Segment {
        Segment {
            base_offset,
            log,
            inode: 0,
            size: 0,
            index: OffsetIndex::new(&dir.join(file_name(base_offset, "index")), base_offset),
            time_index: TimeIndex::new(&dir.join(file_name(base_offset, "timeindex")), base_offset),
            index_interval,
            bytes_since_index: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_timestamp: None,
            created_ms: now_ms,
        }
    }

    /// Opens a segment written earlier.
    ///
    /// With `trust_indexes` (a clean shutdown and a sealed segment) the index files are loaded and
    /// only sanity-checked; otherwise the log is scanned batch by batch, every CRC is checked, the
    /// file is truncated at the first invalid batch (a torn tail) and both indexes are rebuilt in
    /// memory (written by [`Segment::write_indexes`]). An empty log needs no index files.
    pub(crate) fn open(
        files: &Rc<OpenFiles>,
        dir: &Path,
        base_offset: i64,
        index_interval: u32,
        trust_indexes: bool,
        now_ms: i64,
    ) -> io::Result<(Segment, Recovery)> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let opened = OpenOptions::new().read(true).append(true).open(&log_path)?;
        let metadata = opened.metadata()?;
        let file_len = metadata.len();
        let log = files.file(log_path);
        log.insert(opened)?;
        let mut segment = Segment::empty(log, dir, base_offset, index_interval, now_ms);
        segment.inode = metadata.ino();
        if trust_indexes && file_len > 0 && segment.load_indexes(file_len)? {
            return Ok((segment, Recovery::default()));
        }
        segment.index = OffsetIndex::new(segment.index.path(), base_offset);
        segment.time_index = TimeIndex::new(segment.time_index.path(), base_offset);
        let recovery = segment.rebuild(file_len)?;
        Ok((segment, recovery))
    }

    /// A sealed segment over a log file just written whole (by compaction), indexed from the
    /// batches written rather than by reading the file back.
    pub(crate) fn from_batches(
        files: &Rc<OpenFiles>,
        dir: &Path,
        base_offset: i64,
        index_interval: u32,
        batches: &[StoredBatch],
        now_ms: i64,
    ) -> io::Result<Segment> {
        let path = dir.join(file_name(base_offset, "log"));
        let inode = std::fs::metadata(&path)?.ino();
        let mut segment = Segment::empty(files.file(path), dir, base_offset, index_interval, now_ms);
        segment.inode = inode;
        if let Some(first) = batches.first() {
            segment.first_timestamp = valid_ts(first.max_timestamp);
        }
        for &batch in batches {
            segment.track(batch);
            segment.size = batch.position + batch.len as u64;
        }
        segment.record_max_timestamp();
        Ok(segment)
    }

    /// Loads the index files and the offsets and timestamps they give; `false` when they cannot
    /// be trusted (missing, corrupt, or pointing at no readable batch).
    fn load_indexes(&mut self, file_len: u64) -> io::Result<bool> {
        let loaded =
            (OffsetIndex::load(self.index.path(), self.base_offset, file_len)?, TimeIndex::load(self.time_index.path(), self.base_offset)?);
        let (index, time_index) = match loaded {
            (IndexLoad::Loaded(index), IndexLoad::Loaded(time_index)) => (index, time_index),
            (IndexLoad::Corrupt(why), _) | (_, IndexLoad::Corrupt(why)) => {
                tracing::warn!(segment = %self.log.path().display(), reason = why, "rebuilding index");
                return Ok(false);
            }
        };
        self.index = index;
        self.time_index = time_index;
        self.size = file_len;
        let Some(last) = self.last_batch()? else { return Ok(false) };
        self.next_offset = last.header.last_offset() + 1;
        if let Some((ts, off)) = self.time_index.last_entry() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = off;
        }
        if let Some(first) = self.batch_at(&*self.log.get()?, 0)? {
            self.first_timestamp = valid_ts(first.max_timestamp);
        }
        Ok(true)
    }

    /// Scans the whole log, validating each batch and rebuilding the indexes; truncates the file
    /// after the last valid batch.
    fn rebuild(&mut self, file_len: u64) -> io::Result<Recovery> {
        let log = self.log.get()?;
        let mut position = 0u64;
        let mut recovery = Recovery::default();
        let mut buf = Vec::new();
        let mut first = true;
        while position < file_len {
            let header = match timestamp_scan::read_header(&log, position, file_len)? {
                Some(h) => h,
                None => break,
            };
            let total = header.total_len();
            if header.base_offset < self.next_offset || position + total as u64 > file_len {
                break;
            }
            buf.resize(total, 0);
            log.read_exact_at(&mut buf, position)?;
            if record_batch::validate_stored(&buf).is_err() {
                break;
            }
            if first {
                self.first_timestamp = valid_ts(header.max_timestamp);
                first = false;
            }
            self.track(StoredBatch::of(&header, position, total as u32));
            position += total as u64;
            recovery.batches += 1;
        }
        if position < file_len {
            recovery.truncated_bytes = file_len - position;
            log.set_len(position)?;
        }
        self.size = position;
        Ok(recovery)
    }

    /// The batch header at `position`, or `None` when the bytes there cannot be a batch (past
    /// the end, too short, wrong magic).
    fn batch_at(&self, log: &File, position: u64) -> io::Result<Option<BatchHeader>> {
        timestamp_scan::read_header(log, position, self.size)
    }

    /// The last batch, found from the last index entry.
    fn last_batch(&self) -> io::Result<Option<BatchPosition>> {
        let log = self.log.get()?;
        let (_, mut position) = self.index.lookup(i64::MAX);
        let mut last = None;
        while let Some(header) = self.batch_at(&log, position as u64)? {
            let next = position as u64 + header.total_len() as u64;
            if next > self.size {
                break;
            }
            last = Some(BatchPosition { position: position as u64, header });
            if next > u32::MAX as u64 {
                break;
            }
            position = next as u32;
        }
        Ok(last)
    }

    /// Updates the indexes and offset bookkeeping for a batch just written.
    fn track(&mut self, batch: StoredBatch) {
        if self.bytes_since_index >= self.index_interval {
            self.index.append(batch.last_offset, batch.position as u32);
            self.time_index.maybe_append(self.max_timestamp.max(batch.max_timestamp), self.offset_for_time(&batch));
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += batch.len;
        if batch.max_timestamp > self.max_timestamp {
            self.max_timestamp = batch.max_timestamp;
            self.offset_of_max_timestamp = batch.last_offset;
        }
        self.next_offset = batch.last_offset + 1;
    }

    fn offset_for_time(&self, batch: &StoredBatch) -> i64 {
        if batch.max_timestamp > self.max_timestamp {
            batch.last_offset
        } else {
            self.offset_of_max_timestamp.max(self.base_offset)
        }
    }

    /// Appends one batch whose offsets are already assigned. `head` holds the rewritten first 16
    /// bytes (base offset, length, leader epoch) and `rest` the remaining bytes as received, so the
    /// producer's buffer is written without being copied.
    pub(crate) fn append(&mut self, header: &BatchHeader, head: &[u8; 16], rest: &[u8]) -> io::Result<()> {
        let position = self.size;
        let mut bufs = [IoSlice::new(head), IoSlice::new(rest)];
        let mut bufs: &mut [IoSlice<'_>] = &mut bufs;
        let mut written = 0usize;
        let total = head.len() + rest.len();
        let log = self.log.get()?;
        let mut file = &*log;
        while written < total {
            let n = file.write_vectored(bufs)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "segment write returned 0"));
            }
            written += n;
            IoSlice::advance_slices(&mut bufs, n);
        }
        if self.size == 0 {
            self.first_timestamp = valid_ts(header.max_timestamp);
        }
        self.size += total as u64;
        self.track(StoredBatch::of(header, position, total as u32));
        Ok(())
    }

    /// Finds the first batch that holds `offset` or a later one.
    pub(crate) fn find_batch(&self, log: &File, offset: i64) -> io::Result<Option<BatchPosition>> {
        let (_, start) = self.index.lookup(offset);
        let mut position = start as u64;
        while let Some(header) = self.batch_at(log, position)? {
            if header.last_offset() >= offset {
                return Ok(Some(BatchPosition { position, header }));
            }
            position += header.total_len() as u64;
        }
        Ok(None)
    }

    /// A slice of whole and partial batches starting at the batch that holds `offset`, at most
    /// `max_bytes` long, except that with `min_one_batch` the first batch is always whole (KIP-74).
    /// Returns the slice and the length of its first batch.
    pub(crate) fn read(&self, offset: i64, max_bytes: u64, min_one_batch: bool) -> io::Result<Option<(FileSlice, u64)>> {
        let log = self.log.get()?;
        let Some(found) = self.find_batch(&log, offset)? else { return Ok(None) };
        let available = self.size - found.position;
        let first_len = found.header.total_len() as u64;
        let mut len = available.min(max_bytes);
        if min_one_batch && len < first_len {
            len = first_len.min(available);
        }
        if len == 0 {
            return Ok(None);
        }
        Ok(Some((FileSlice { file: log, position: found.position, len }, first_len.min(available))))
    }

    /// The scan that finds the first record with a timestamp at or after `timestamp` and an
    /// offset at or after `log_start`; `None` when every record here is older or below it.
    pub(crate) fn timestamp_scan(&self, timestamp: i64, log_start: i64) -> Option<TimestampScan> {
        if self.max_timestamp < timestamp || self.next_offset <= log_start {
            return None;
        }
        Some(self.scan_from(self.time_index.lookup(timestamp).max(log_start), Target::AtOrAfter(timestamp)))
    }

    /// The scan that finds the record holding this segment's largest timestamp.
    pub(crate) fn max_timestamp_scan(&self) -> Option<TimestampScan> {
        (self.max_timestamp >= 0).then(|| self.scan_from(self.offset_of_max_timestamp, Target::Max(self.max_timestamp)))
    }

    fn scan_from(&self, from_offset: i64, target: Target) -> TimestampScan {
        let (_, position) = self.index.lookup(from_offset);
        TimestampScan {
            log: self.log.path().to_path_buf(),
            inode: self.inode,
            position: position as u64,
            size: self.size,
            from_offset,
            target,
        }
    }

    /// Calls `f` with the header of every batch, in order (producer-state rebuild).
    pub(crate) fn for_each_batch(&self, mut f: impl FnMut(&BatchHeader)) -> io::Result<()> {
        let log = self.log.get()?;
        let mut position = 0;
        while let Some(header) = self.batch_at(&log, position)? {
            f(&header);
            position += header.total_len() as u64;
        }
        Ok(())
    }

    /// Seals the segment when it stops being the active one: records its final max timestamp in
    /// the time index and writes both indexes. Returns what the caller must fsync (in the
    /// background) before the segment counts as durable.
    pub(crate) fn seal(&mut self) -> io::Result<Vec<SyncTarget>> {
        self.record_max_timestamp();
        let mut targets = vec![SyncTarget::Open(self.log.get()?)];
        targets.extend(self.write_indexes(IndexWrite::Atomic)?);
        Ok(targets)
    }

    /// Writes the active segment's indexes at a clean shutdown, its max timestamp included (a
    /// clean start reads it from the time index, as Kafka does when it closes a segment).
    pub(crate) fn close(&mut self) -> io::Result<()> {
        self.record_max_timestamp();
        self.write_indexes(IndexWrite::InPlace)?;
        Ok(())
    }

    fn record_max_timestamp(&mut self) {
        if self.max_timestamp >= 0 {
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
        }
    }

    /// Writes the indexes a scan rebuilt (a sealed segment's, at open) for the next fsync.
    pub(crate) fn rebuilt_indexes(&mut self) -> io::Result<Vec<SyncTarget>> {
        self.write_indexes(IndexWrite::Atomic)
    }

    /// Writes the index files whose entries changed since they were last written and names them
    /// for an fsync (a sealed or rebuilt segment's; the active one's at a clean shutdown).
    pub(crate) fn write_indexes(&mut self, how: IndexWrite) -> io::Result<Vec<SyncTarget>> {
        let mut written = Vec::new();
        if let Some(path) = self.index.write(how)? {
            written.push(SyncTarget::Path(path.to_path_buf()));
        }
        if let Some(path) = self.time_index.write(how)? {
            written.push(SyncTarget::Path(path.to_path_buf()));
        }
        Ok(written)
    }

    /// The log file, for an fsync off the shard thread.
    pub(crate) fn log_file(&self) -> io::Result<Arc<File>> {
        self.log.get()
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Removes the segment's files. In-flight fetches keep their handle and still read.
    pub(crate) fn delete(self) -> io::Result<()> {
        for path in [self.log.path(), self.index.path(), self.time_index.path()] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A file an fsync must cover: one already open, or one to open for it (index files and
/// directories, which hold no descriptor between writes).
#[derive(Debug)]
pub enum SyncTarget {
    Open(Arc<File>),
    Path(PathBuf),
}

impl SyncTarget {
    /// Blocking. A file removed meanwhile (retention, a deleted topic) needs no fsync.
    pub fn sync(&self) -> io::Result<()> {
        match self {
            SyncTarget::Open(file) => file.sync_data(),
            SyncTarget::Path(path) => match File::open(path) {
                Ok(file) => file.sync_all(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            },
        }
    }
}

/// What opening a segment had to repair.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recovery {
    pub(crate) batches: u64,
    pub(crate) truncated_bytes: u64,
}

fn valid_ts(ts: i64) -> Option<i64> {
    (ts >= 0).then_some(ts)
}
