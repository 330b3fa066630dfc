//! One segment: a `.log` file of v2 record batches plus its `.index` and `.timeindex`.
//!
//! File names are the base offset, zero-padded to 20 digits, as in Kafka
//! (`00000000000000000000.log`), so tools that understand Kafka's log layout can read them.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::record_batch::{self, BatchHeader};

use super::index::{IndexLoad, OffsetIndex, TimeIndex};
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

/// A segment of one partition. Lives on the shard that owns the partition; the log file handle is
/// shared (`Arc`) with in-flight fetch responses, which keeps it readable even after retention
/// deletes the file.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    log_path: PathBuf,
    log: Arc<File>,
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
    pub(crate) fn create(dir: &Path, base_offset: i64, index_interval: u32, now_ms: i64) -> io::Result<Segment> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = OpenOptions::new().create(true).read(true).append(true).open(&log_path)?;
        log.set_len(0)?;
        Ok(Segment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size: 0,
            index: OffsetIndex::create(&dir.join(file_name(base_offset, "index")), base_offset)?,
            time_index: TimeIndex::create(&dir.join(file_name(base_offset, "timeindex")), base_offset)?,
            index_interval,
            bytes_since_index: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_timestamp: None,
            created_ms: now_ms,
        })
    }

    /// Opens a segment written earlier.
    ///
    /// With `trust_indexes` (a clean shutdown and a sealed segment) the index files are loaded and
    /// only sanity-checked; otherwise the log is scanned batch by batch, every CRC is checked, the
    /// file is truncated at the first invalid batch (a torn tail) and both indexes are rebuilt.
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        index_interval: u32,
        trust_indexes: bool,
        now_ms: i64,
    ) -> io::Result<(Segment, Recovery)> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = Arc::new(OpenOptions::new().read(true).append(true).open(&log_path)?);
        let file_len = log.metadata()?.len();
        let index_path = dir.join(file_name(base_offset, "index"));
        let time_path = dir.join(file_name(base_offset, "timeindex"));

        if trust_indexes {
            let loaded = (OffsetIndex::load(&index_path, base_offset, file_len.max(1))?, TimeIndex::load(&time_path, base_offset)?);
            if let (IndexLoad::Corrupt(why), _) | (_, IndexLoad::Corrupt(why)) = &loaded {
                tracing::warn!(segment = %log_path.display(), reason = why, "rebuilding index");
            }
            if let (IndexLoad::Loaded(index), IndexLoad::Loaded(time_index)) = loaded {
                let mut segment = Segment {
                    base_offset,
                    log_path: log_path.clone(),
                    log: log.clone(),
                    size: file_len,
                    index,
                    time_index,
                    index_interval,
                    bytes_since_index: 0,
                    next_offset: base_offset,
                    max_timestamp: -1,
                    offset_of_max_timestamp: -1,
                    first_timestamp: None,
                    created_ms: now_ms,
                };
                if let Some(last) = segment.last_batch()? {
                    segment.next_offset = last.header.last_offset() + 1;
                    if let Some((ts, off)) = segment.time_index.last_entry() {
                        segment.max_timestamp = ts;
                        segment.offset_of_max_timestamp = off;
                    }
                    if let Some(first) = segment.batch_at(0)? {
                        segment.first_timestamp = valid_ts(first.max_timestamp);
                    }
                    return Ok((segment, Recovery::default()));
                }
                if file_len == 0 {
                    return Ok((segment, Recovery::default()));
                }
                // The index says the log is non-empty but its last batch is unreadable: scan.
            }
        }

        let mut segment = Segment {
            base_offset,
            log_path,
            log,
            size: 0,
            index: OffsetIndex::create(&index_path, base_offset)?,
            time_index: TimeIndex::create(&time_path, base_offset)?,
            index_interval,
            bytes_since_index: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_timestamp: None,
            created_ms: now_ms,
        };
        let recovery = segment.rebuild(file_len)?;
        Ok((segment, recovery))
    }

    /// Scans the whole log, validating each batch and rebuilding the indexes; truncates the file
    /// after the last valid batch.
    fn rebuild(&mut self, file_len: u64) -> io::Result<Recovery> {
        let mut position = 0u64;
        let mut recovery = Recovery::default();
        let mut buf = Vec::new();
        let mut first = true;
        while position < file_len {
            let header = match self.read_header(position, file_len)? {
                Some(h) => h,
                None => break,
            };
            let total = header.total_len();
            if header.base_offset < self.next_offset || position + total as u64 > file_len {
                break;
            }
            buf.resize(total, 0);
            self.log.read_exact_at(&mut buf, position)?;
            if record_batch::validate(&buf).is_err() {
                break;
            }
            if first {
                self.first_timestamp = valid_ts(header.max_timestamp);
                first = false;
            }
            self.track(&header, position, total as u32)?;
            position += total as u64;
            recovery.batches += 1;
        }
        if position < file_len {
            recovery.truncated_bytes = file_len - position;
            self.log.set_len(position)?;
        }
        self.size = position;
        Ok(recovery)
    }

    /// Reads and parses the batch header at `position`, or `None` when the bytes there cannot be
    /// a batch (past the end, too short, wrong magic).
    fn read_header(&self, position: u64, limit: u64) -> io::Result<Option<BatchHeader>> {
        timestamp_scan::read_header(&self.log, position, limit)
    }

    fn batch_at(&self, position: u64) -> io::Result<Option<BatchHeader>> {
        self.read_header(position, self.size)
    }

    /// The last batch, found from the last index entry.
    fn last_batch(&self) -> io::Result<Option<BatchPosition>> {
        let (_, mut position) = self.index.lookup(i64::MAX);
        let mut last = None;
        while let Some(header) = self.read_header(position as u64, self.size)? {
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

    /// Updates the indexes and offset bookkeeping for a batch just written at `position`.
    fn track(&mut self, header: &BatchHeader, position: u64, len: u32) -> io::Result<()> {
        if self.bytes_since_index >= self.index_interval {
            self.index.append(header.last_offset(), position as u32)?;
            self.time_index.maybe_append(self.max_timestamp.max(header.max_timestamp), self.offset_for_time(header))?;
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset();
        }
        self.next_offset = header.last_offset() + 1;
        Ok(())
    }

    fn offset_for_time(&self, header: &BatchHeader) -> i64 {
        if header.max_timestamp > self.max_timestamp {
            header.last_offset()
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
        let mut file = &*self.log;
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
        self.track(header, position, total as u32)
    }

    /// Finds the first batch that holds `offset` or a later one.
    pub(crate) fn find_batch(&self, offset: i64) -> io::Result<Option<BatchPosition>> {
        let (_, start) = self.index.lookup(offset);
        let mut position = start as u64;
        while let Some(header) = self.batch_at(position)? {
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
        let Some(found) = self.find_batch(offset)? else { return Ok(None) };
        let available = self.size - found.position;
        let first_len = found.header.total_len() as u64;
        let mut len = available.min(max_bytes);
        if min_one_batch && len < first_len {
            len = first_len.min(available);
        }
        if len == 0 {
            return Ok(None);
        }
        Ok(Some((FileSlice { file: self.log.clone(), position: found.position, len }, first_len.min(available))))
    }

    /// The scan that finds the first record with a timestamp at or after `timestamp`, `None` when
    /// every record here is older.
    pub(crate) fn timestamp_scan(&self, timestamp: i64) -> Option<TimestampScan> {
        if self.max_timestamp < timestamp {
            return None;
        }
        Some(self.scan_from(self.time_index.lookup(timestamp), Target::AtOrAfter(timestamp)))
    }

    /// The scan that finds the record holding this segment's largest timestamp.
    pub(crate) fn max_timestamp_scan(&self) -> Option<TimestampScan> {
        (self.max_timestamp >= 0).then(|| self.scan_from(self.offset_of_max_timestamp, Target::Max(self.max_timestamp)))
    }

    fn scan_from(&self, from_offset: i64, target: Target) -> TimestampScan {
        let (_, position) = self.index.lookup(from_offset);
        TimestampScan { log: self.log.clone(), position: position as u64, size: self.size, from_offset, target }
    }

    /// Calls `f` with the header of every batch, in order (producer-state rebuild).
    pub(crate) fn for_each_batch(&self, mut f: impl FnMut(&BatchHeader)) -> io::Result<()> {
        let mut position = 0;
        while let Some(header) = self.batch_at(position)? {
            f(&header);
            position += header.total_len() as u64;
        }
        Ok(())
    }

    /// Seals the segment when it stops being the active one: records its final max timestamp in
    /// the time index. The caller syncs [`Segment::files`] in the background.
    pub(crate) fn seal(&mut self) -> io::Result<()> {
        if self.max_timestamp >= 0 {
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
        }
        Ok(())
    }

    /// The segment's three files, for an fsync off the shard thread.
    pub(crate) fn files(&self) -> [Arc<File>; 3] {
        [self.log.clone(), self.index.file(), self.time_index.file()]
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Removes the segment's files. In-flight fetches keep their handle and still read.
    pub(crate) fn delete(self) -> io::Result<()> {
        for path in [self.log_path.as_path(), self.index.path(), self.time_index.path()] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
