//! Timestamp lookups (ListOffsets by timestamp and MAX_TIMESTAMP), prepared on the shard that owns
//! the partition and run off it.
//!
//! Finding a record by its timestamp means reading batches and, for compressed ones, decompressing
//! them: up to [`crate::decompress::MAX_DECOMPRESSED_BYTES`] per batch, chosen by whoever wrote the
//! batch. That is CPU the produce and fetch path must not wait behind, so the shard only takes the
//! positions from its indexes (a [`TimestampLookup`]) and the reads run on a blocking thread.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use crate::record_batch::{self, BatchHeader, HEADER_LEN, LOG_OVERHEAD};

use super::StorageError;

/// The reads that answer one lookup: a scan per segment that may hold the answer, in offset order;
/// the first scan that finds a record answers.
#[derive(Debug, Default)]
pub struct TimestampLookup {
    pub(super) scans: Vec<TimestampScan>,
}

impl TimestampLookup {
    /// No segment can hold the answer: [`TimestampLookup::run`] reads nothing.
    pub fn is_empty(&self) -> bool {
        self.scans.is_empty()
    }

    /// `(offset, timestamp)` of the record found, `None` when no record matches. Blocking I/O.
    pub fn run(self) -> Result<Option<(i64, i64)>, StorageError> {
        for scan in self.scans {
            if let Some(found) = scan.run()? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}

/// One segment's part of a lookup. The file is opened by the thread that runs it (the shard's
/// cache of open files is for appends and fetches); `size` is what the segment held when the
/// lookup was prepared.
#[derive(Debug)]
pub(super) struct TimestampScan {
    pub(super) log: PathBuf,
    /// The file's inode when the lookup was prepared.
    pub(super) inode: u64,
    /// Where to start reading: the offset index's position for `from_offset`.
    pub(super) position: u64,
    pub(super) size: u64,
    /// Records before this offset do not count (the time index gives a lower bound).
    pub(super) from_offset: i64,
    pub(super) target: Target,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// The first record with a timestamp at or after this one.
    AtOrAfter(i64),
    /// The record with the segment's largest timestamp, which is this one; its batch holds
    /// `from_offset`.
    Max(i64),
}

impl TimestampScan {
    /// A segment that retention deleted meanwhile holds no answer any more. One that compaction
    /// wrote again is read from its start (the positions prepared were the old file's).
    fn run(&self) -> Result<Option<(i64, i64)>, StorageError> {
        let log = match File::open(&self.log) {
            Ok(log) => log,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let metadata = log.metadata()?;
        let (mut position, size) =
            if metadata.ino() == self.inode { (self.position, self.size) } else { (0, metadata.len().min(self.size)) };
        while let Some(header) = read_header(&log, position, size)? {
            if header.last_offset() >= self.from_offset {
                match self.target {
                    Target::AtOrAfter(timestamp) if header.max_timestamp >= timestamp => {
                        let records = record_timestamps(&log, position, &header)?;
                        let at_or_after = |&&(offset, ts): &&(i64, i64)| ts >= timestamp && offset >= self.from_offset;
                        if let Some(&found) = records.iter().find(at_or_after) {
                            return Ok(Some(found));
                        }
                    }
                    Target::AtOrAfter(_) => {}
                    Target::Max(timestamp) => {
                        let records = record_timestamps(&log, position, &header)?;
                        let found = records.into_iter().find(|&(_, ts)| ts == timestamp);
                        return Ok(found.or(Some((header.last_offset(), timestamp))));
                    }
                }
            }
            position += header.total_len() as u64;
        }
        Ok(None)
    }
}

/// A batch whose records cannot be looked inside (see [`crate::decompress`]) is the batch's error,
/// not the disk's.
fn record_timestamps(log: &File, position: u64, header: &BatchHeader) -> Result<Vec<(i64, i64)>, StorageError> {
    let mut buf = vec![0u8; header.total_len()];
    log.read_exact_at(&mut buf, position)?;
    Ok(record_batch::record_timestamps(&buf)?)
}

/// The header of the batch at `position`, `None` past `limit` or where no valid header is.
pub(super) fn read_header(log: &File, position: u64, limit: u64) -> io::Result<Option<BatchHeader>> {
    if position + HEADER_LEN as u64 > limit {
        return Ok(None);
    }
    let mut head = [0u8; HEADER_LEN];
    log.read_exact_at(&mut head, position)?;
    Ok(BatchHeader::parse(&head).ok().filter(|h| h.batch_length >= (HEADER_LEN - LOG_OVERHEAD) as i32))
}
