//! Log compaction (`cleanup.policy=compact`): the cleaner keeps the last record of each key.
//!
//! As in Kafka, the sealed segments split at the offset the last compaction reached (its
//! checkpoint) into a clean head and a dirty tail. Once the dirty share of the log reaches
//! `min.cleanable.dirty.ratio`, or a dirty record is older than `max.compaction.lag.ms`, a map of
//! key → last offset is built over the dirty segments, and every sealed segment is written again
//! without the records a later record of the same key replaced, without records that have no key,
//! and without tombstones past their batch's delete horizon. The active segment is never touched,
//! nor a segment with a record younger than `min.compaction.lag.ms`.
//!
//! The delete horizon (KIP-534, as Kafka): the first compaction that keeps a tombstone writes its
//! batch again with the horizon set to that compaction's time plus `delete.retention.ms`; the
//! first compaction after the horizon removes the tombstone. So a consumer has
//! `delete.retention.ms` from the deletion's first compaction to read it, whatever timestamp the
//! producer gave the tombstone.
//!
//! As Kafka's cleaner, a compaction writes neighbouring segments into one while their sizes before
//! it add up to no more than `segment.bytes` (and their offsets to no more than an index's relative
//! offsets reach): the segments compaction shrank do not stay many small files.
//!
//! A batch whose records all stay is copied as it is; one that loses some keeps its offsets,
//! timestamps and producer fields (its last offset delta too, so producer sequences stay whole)
//! and holds the records kept, byte for byte, compressed again with its codec. One that loses all
//! goes, unless it is the last batch of a producer whose state the partition keeps: that one
//! stays, empty and uncompressed, as Kafka keeps it, so that the producer's retry of it is still
//! known after a crash. Offsets never move: a consumer sees gaps, as it does with Kafka.
//!
//! Three steps keep whole-segment reads and writes off the shard thread:
//! [`PartitionLog::cleaner_plan`] (on the shard: which segments), [`CleanerPlan::run`] (a
//! blocking thread: the key map, the segments written again and fsynced) and
//! [`PartitionLog::install_cleaned`] (on the shard: one rename per segment, indexes built from the
//! batches written).
//!
//! A crash at any point leaves whole segments: a segment written again is `<base>.log.cleaned`
//! until it is fsynced; the old segment's index files are removed and the directory fsynced before
//! the rename over `<base>.log`, so whichever log a crash leaves is indexed again by a scan.
//! Opening a partition removes any `.cleaned` file. Before segments merged into one are put in
//! place, a journal (`cleaner-merges`) names each merge: its first segment and where it ends. A
//! crash before the rename leaves the segments as they were; one after it leaves the merged
//! segment and maybe some of those it replaced, which opening the partition then deletes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{read_offset_file, sync_dir, write_atomically, PartitionLog};
use crate::record_batch::{self, BatchError, BatchHeader, RawRecord};
use crate::storage::segment::{self, Segment, StoredBatch};
use crate::storage::{timestamp_scan, StorageError};

/// The offset the last compaction reached, per partition (Kafka keeps one such file per log
/// directory).
const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// The merges being put in place: one line per merged segment, `<first base> <end>`.
const MERGE_JOURNAL: &str = "cleaner-merges";
/// The widest offset range one segment may hold: its index keeps offsets relative to its base.
const MAX_SEGMENT_OFFSETS: i64 = i32::MAX as i64;
/// Key → the offset of its last record in the dirty segments.
type KeyMap = HashMap<Box<[u8]>, i64>;
/// What a key in the map costs besides its bytes: the boxed slice, the offset, the table's slot.
const MAP_ENTRY_OVERHEAD: u64 = 48;

/// What one compaction of a partition is to do, decided on its shard.
#[derive(Debug)]
pub struct CleanerPlan {
    dir: PathBuf,
    /// Sealed segments from the log start to the end of the dirty section, oldest first.
    segments: Vec<Sealed>,
    /// `segments[first_dirty..]` were written since the last compaction.
    first_dirty: usize,
    delete_retention_ms: i64,
    buffer_bytes: u64,
    /// Neighbouring segments are merged up to this size (`segment.bytes`).
    segment_bytes: u64,
    now_ms: i64,
    /// Producer id → the base offset of its last batch, while its state is kept: such a batch
    /// stays even when none of its records do (empty, as Kafka keeps it), so that its sequence
    /// numbers survive a rebuild of the producer state from the log.
    last_batches: HashMap<i64, i64>,
}

#[derive(Debug)]
struct Sealed {
    base: i64,
    size: u64,
    /// The base of the segment after it: where a compaction that ends here has cleaned to.
    end: i64,
}

/// What a compaction wrote, to be installed on the partition's shard.
#[derive(Debug)]
pub struct Cleaned {
    dir: PathBuf,
    rewritten: Vec<Rewritten>,
    /// Where the next compaction's dirty section starts.
    cleaned_to: i64,
    pub records_removed: u64,
    /// Bytes of the segments written again, before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// A segment written again, at `<base>.log.cleaned`: one segment's records, or several's.
#[derive(Debug)]
struct Rewritten {
    base: i64,
    /// The segments after `base` whose records it holds too, which it replaces.
    merged: Vec<i64>,
    /// The base of the segment after the last one it replaces.
    end: i64,
    /// Its batches, to index it without reading it back; `None` when listing them would have
    /// taken more than the key map's buffer (a segment of tiny batches), and it is scanned.
    batches: Option<Vec<StoredBatch>>,
    size: u64,
}

/// Why a compaction did not run to its end. Nothing in the log changed.
#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("compaction I/O failed: {0}")]
    Io(#[from] io::Error),
    #[error("a stored batch cannot be compacted: {0}")]
    Batch(#[from] BatchError),
    #[error("the keys of segment {base} do not fit in storage.cleaner_dedupe_buffer_bytes ({buffer} bytes)")]
    BufferTooSmall { base: i64, buffer: u64 },
}

impl PartitionLog {
    /// The compaction this log is due, if any: it is compacted, has dirty sealed segments old
    /// enough, and their share of the log reaches the dirty ratio (or one is overdue).
    pub fn cleaner_plan(&self, now_ms: i64) -> Option<CleanerPlan> {
        let c = &self.config.compaction;
        if !self.config.cleanup.compact || self.sync_failed.is_some() {
            return None;
        }
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let sealed = self.segments.values().take(bases.len() - 1);
        let cleanable: Vec<&Segment> = sealed.take_while(|s| s.max_timestamp <= now_ms.saturating_sub(c.min_lag_ms)).collect();
        let first_dirty = cleanable.iter().position(|s| s.base_offset >= self.cleaned_to)?;
        let (clean, dirty) = cleanable.split_at(first_dirty);
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size()).sum();
        let clean_bytes: u64 = clean.iter().map(|s| s.size()).sum();
        if dirty_bytes == 0 {
            return None;
        }
        let ratio = dirty_bytes as f64 / (dirty_bytes + clean_bytes) as f64;
        let overdue = dirty.iter().any(|s| s.first_timestamp.is_some_and(|t| now_ms.saturating_sub(t) > c.max_lag_ms));
        if ratio < c.min_dirty_ratio && !overdue {
            return None;
        }
        let segments = cleanable.iter().zip(&bases[1..]).map(|(s, &end)| Sealed { base: s.base_offset, size: s.size(), end }).collect();
        Some(CleanerPlan {
            dir: self.dir.clone(),
            segments,
            first_dirty,
            delete_retention_ms: c.delete_retention_ms,
            buffer_bytes: c.buffer_bytes,
            segment_bytes: self.config.segment_bytes,
            now_ms,
            last_batches: self.producers.last_batches(),
        })
    }

    /// Puts the segments a compaction wrote in place of those it read. A segment deleted
    /// meanwhile (retention, DeleteRecords) stays deleted, and a merge that included one is not
    /// installed; a segment left empty is deleted, unless it is the first (which keeps the log's
    /// start offset).
    pub fn install_cleaned(&mut self, cleaned: Cleaned, now_ms: i64) -> Result<(), StorageError> {
        let active = self.active().base_offset;
        let merges: String = cleaned.rewritten.iter().filter(|r| !r.merged.is_empty()).map(|r| format!("{} {}\n", r.base, r.end)).collect();
        if !merges.is_empty() {
            write_atomically(&self.dir.join(MERGE_JOURNAL), merges.as_bytes())?;
        }
        for Rewritten { base, merged, end: _, batches, size } in cleaned.rewritten {
            let written = cleaned_path(&self.dir, base);
            let all_there = std::iter::once(base).chain(merged.iter().copied()).all(|b| b < active && self.segments.contains_key(&b));
            if !all_there {
                remove_if_present(&written)?;
                continue;
            }
            if size == 0 && self.segments.keys().next() != Some(&base) {
                remove_if_present(&written)?;
                for b in std::iter::once(base).chain(merged) {
                    self.segments.remove(&b).expect("present").delete()?;
                }
                self.dir_unsynced = true;
                continue;
            }
            std::fs::rename(&written, self.dir.join(segment::file_name(base, "log")))?;
            for b in merged {
                self.segments.remove(&b).expect("present").delete()?;
            }
            let interval = self.config.index_interval_bytes;
            let mut segment = match batches {
                Some(batches) => Segment::from_batches(&self.files, &self.dir, base, interval, &batches, now_ms)?,
                None => Segment::open(&self.files, &self.dir, base, interval, false, now_ms)?.0,
            };
            self.unsynced.extend(segment.rebuilt_indexes()?);
            // Replacing the old segment drops its cached file: reads open the new one.
            self.segments.insert(base, segment);
            self.dir_unsynced = true;
        }
        if !merges.is_empty() {
            // The renames and deletions are on disk before the journal that would finish them goes.
            sync_dir(&self.dir)?;
            remove_if_present(&self.dir.join(MERGE_JOURNAL))?;
        }
        if cleaned.cleaned_to > self.cleaned_to {
            self.cleaned_to = cleaned.cleaned_to;
            write_atomically(&self.dir.join(CLEANER_CHECKPOINT), cleaned.cleaned_to.to_string().as_bytes())?;
        }
        Ok(())
    }
}

impl Cleaned {
    /// Removes what the compaction wrote, for a partition that is gone.
    pub fn discard(self) {
        for rewritten in self.rewritten {
            let _ = remove_if_present(&cleaned_path(&self.dir, rewritten.base));
        }
    }
}

impl CleanerPlan {
    /// Builds the key map and writes the segments that lose records (blocking: run it off the
    /// shard thread).
    pub fn run(self) -> Result<Cleaned, CleanError> {
        let (map, end) = self.key_map()?;
        let mut cleaned =
            Cleaned { dir: self.dir.clone(), rewritten: Vec::new(), cleaned_to: 0, records_removed: 0, bytes_before: 0, bytes_after: 0 };
        for group in self.groups(end) {
            if let Some((rewritten, removed, size)) = self.rewrite(group, &map)? {
                cleaned.records_removed += removed;
                cleaned.bytes_before += group.iter().map(|s| s.size).sum::<u64>();
                cleaned.bytes_after += size;
                cleaned.rewritten.push(rewritten);
            }
        }
        cleaned.cleaned_to = self.segments[end - 1].end;
        // The old indexes go before the renames: a crash in between leaves a log to scan.
        for rewritten in &cleaned.rewritten {
            for ext in ["index", "timeindex"] {
                remove_if_present(&self.dir.join(segment::file_name(rewritten.base, ext)))?;
            }
        }
        sync_dir(&self.dir)?;
        Ok(cleaned)
    }

    /// `segments[..end]` in runs of neighbours to write into one segment each, as Kafka groups
    /// them: as many as fit in `segment.bytes` together (sizes before this compaction) and in one
    /// segment's offset range.
    fn groups(&self, end: usize) -> Vec<&[Sealed]> {
        let mut groups = Vec::new();
        let mut rest = &self.segments[..end];
        while let Some(first) = rest.first() {
            let mut size = first.size;
            let mut len = 1;
            while let Some(next) = rest.get(len) {
                if size + next.size > self.segment_bytes || next.end - first.base > MAX_SEGMENT_OFFSETS {
                    break;
                }
                size += next.size;
                len += 1;
            }
            let (group, after) = rest.split_at(len);
            groups.push(group);
            rest = after;
        }
        groups
    }

    /// The last offset of each key in the dirty segments, and how many segments the map covers
    /// (those whose keys fit in the buffer, whole segments only).
    fn key_map(&self) -> Result<(KeyMap, usize), CleanError> {
        let mut map = KeyMap::new();
        let mut used = 0u64;
        for (i, sealed) in self.segments.iter().enumerate().skip(self.first_dirty) {
            // This segment's keys, counted as they come so that no more than the buffer is held.
            let mut keys = KeyMap::new();
            let mut needed = 0u64;
            let read = for_each_batch(&self.dir, sealed, |_, _, header, records| {
                for record in records.unwrap_or_default() {
                    let Some(key) = record.key.filter(|_| !header.is_control()) else { continue };
                    if let Some(last) = keys.get_mut(key) {
                        *last = record.offset;
                        continue;
                    }
                    keys.insert(key.into(), record.offset);
                    if !map.contains_key(key) {
                        needed += key.len() as u64 + MAP_ENTRY_OVERHEAD;
                        if used + needed > self.buffer_bytes {
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                }
                Ok(ControlFlow::Continue(()))
            })?;
            if read.is_break() {
                if i == self.first_dirty {
                    return Err(CleanError::BufferTooSmall { base: sealed.base, buffer: self.buffer_bytes });
                }
                return Ok((map, i));
            }
            used += needed;
            map.extend(keys);
        }
        Ok((map, self.segments.len()))
    }

    /// Writes the segments of `group` again, as one, without the records compaction removes;
    /// `None` when it is one segment that loses none. Returns the segment written, the records
    /// removed and its size.
    fn rewrite(&self, group: &[Sealed], map: &KeyMap) -> Result<Option<(Rewritten, u64, u64)>, CleanError> {
        let first = &group[0];
        // Several segments are always written, into one file.
        let mut out: Option<BufWriter<File>> = match group.len() {
            1 => None,
            _ => Some(BufWriter::new(File::create(cleaned_path(&self.dir, first.base))?)),
        };
        let keep = |header: &BatchHeader, record: &RawRecord<'_>| {
            let Some(key) = record.key else { return header.is_control() };
            let replaced = map.get(key).is_some_and(|&last| record.offset < last);
            // A tombstone stays until its batch's delete horizon (none yet: it is set below).
            let expired_tombstone = record.tombstone && header.delete_horizon_ms().is_some_and(|horizon| self.now_ms >= horizon);
            !replaced && !expired_tombstone
        };
        let mut batches = Some(Vec::new());
        let most_batches = self.buffer_bytes as usize / std::mem::size_of::<StoredBatch>();
        let (mut removed, mut size) = (0u64, 0u64);
        let last_of_its_producer =
            |header: &BatchHeader| header.has_producer_id() && self.last_batches.get(&header.producer_id) == Some(&header.base_offset);
        for sealed in group {
            // Every batch is read: the closure never breaks.
            let _: ControlFlow<()> = for_each_batch(&self.dir, sealed, |position, raw, header, records| {
                // A batch that cannot be looked inside stays as it is.
                let unchanged = records.is_none();
                let records = records.unwrap_or_default();
                let kept: Vec<RawRecord<'_>> = records.iter().filter(|r| keep(header, r)).copied().collect();
                removed += (records.len() - kept.len()) as u64;
                // Empty (all its records replaced, or emptied by an earlier compaction): it goes,
                // unless its producer's sequence numbers are to be remembered.
                let drop = !unchanged && kept.is_empty() && !last_of_its_producer(header);
                // The first compaction to keep a tombstone starts its delete.retention.ms (KIP-534):
                // a tombstone's own timestamp may be long past (a mirrored topic's, say), and
                // consumers are still to see the deletion for that long.
                let delete_horizon = (header.delete_horizon_ms().is_none() && kept.iter().any(|r| r.tombstone))
                    .then(|| self.now_ms.saturating_add(self.delete_retention_ms));
                let changes = drop || kept.len() < records.len() || delete_horizon.is_some();
                if changes && out.is_none() {
                    // The first batch that changes: everything before it is copied as it is.
                    let mut file = BufWriter::new(File::create(cleaned_path(&self.dir, sealed.base))?);
                    let mut old = File::open(self.dir.join(segment::file_name(sealed.base, "log")))?.take(position);
                    io::copy(&mut old, &mut file)?;
                    out = Some(file);
                }
                let mut list = |batch: StoredBatch| {
                    if batches.as_ref().is_some_and(|b| b.len() >= most_batches) {
                        batches = None;
                    }
                    if let Some(batches) = batches.as_mut() {
                        batches.push(batch);
                    }
                };
                let Some(file) = out.as_mut() else {
                    list(StoredBatch::of(header, position, raw.len() as u32));
                    size = position + raw.len() as u64;
                    return Ok(ControlFlow::Continue(()));
                };
                if drop {
                    return Ok(ControlFlow::Continue(()));
                }
                let rebuilt;
                let bytes = if kept.len() == records.len() && delete_horizon.is_none() {
                    raw
                } else {
                    rebuilt = record_batch::with_records(header, raw, &kept, delete_horizon)?;
                    &rebuilt[..]
                };
                file.write_all(bytes)?;
                list(StoredBatch::of(&BatchHeader::parse(bytes)?, size, bytes.len() as u32));
                size += bytes.len() as u64;
                Ok(ControlFlow::Continue(()))
            })?;
        }
        let Some(file) = out else { return Ok(None) };
        file.into_inner().map_err(io::IntoInnerError::into_error)?.sync_all()?;
        let merged = group[1..].iter().map(|s| s.base).collect();
        let rewritten = Rewritten { base: first.base, merged, end: group[group.len() - 1].end, batches, size };
        Ok(Some((rewritten, removed, size)))
    }
}

/// Calls `f` with each batch of a sealed segment: its position, bytes, header and records (none
/// for a batch that cannot be looked inside), until `f` breaks.
fn for_each_batch(
    dir: &Path,
    sealed: &Sealed,
    mut f: impl FnMut(u64, &[u8], &BatchHeader, Option<&[RawRecord<'_>]>) -> Result<ControlFlow<()>, CleanError>,
) -> Result<ControlFlow<()>, CleanError> {
    let log = File::open(dir.join(segment::file_name(sealed.base, "log")))?;
    let mut position = 0u64;
    let mut buf = Vec::new();
    while let Some(header) = timestamp_scan::read_header(&log, position, sealed.size)? {
        let len = header.total_len();
        buf.resize(len, 0);
        log.read_exact_at(&mut buf, position)?;
        let looked_inside = record_batch::payload(&buf);
        let records = looked_inside.as_ref().ok().and_then(|(header, payload)| record_batch::records(header, payload).ok());
        if records.is_none() {
            // Stored before its topic was compacted (a client's batch that decompresses past the
            // cap, say): it stays as it is, its keys out of the map.
            tracing::debug!(segment = sealed.base, position, "a batch compaction cannot look inside is kept");
        }
        if f(position, &buf, &header, records.as_deref())?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
        position += len as u64;
    }
    Ok(ControlFlow::Continue(()))
}

fn cleaned_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{}.cleaned", segment::file_name(base, "log")))
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The offset the last compaction reached in `dir`; 0 when none ran.
pub(super) fn read_cleaner_checkpoint(dir: &Path) -> i64 {
    read_offset_file(&dir.join(CLEANER_CHECKPOINT))
}

/// Finishes the merges a compaction was putting in place when the process stopped (before the
/// segments of `dir` are opened). A merge whose segment was not renamed yet leaves the segments it
/// read as they are (its `.cleaned` file is a leftover); one whose segment is in place deletes the
/// segments it replaced that are still there.
pub(super) fn finish_merges(dir: &Path) -> io::Result<()> {
    let journal = dir.join(MERGE_JOURNAL);
    let Ok(text) = std::fs::read_to_string(&journal) else { return Ok(()) };
    let merges: Vec<(i64, i64)> = text
        .lines()
        .filter_map(|line| {
            let (base, end) = line.split_once(' ')?;
            Some((base.parse().ok()?, end.parse().ok()?))
        })
        .collect();
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(base) = name.to_str().and_then(|n| n.strip_suffix(".log")).and_then(|b| b.parse::<i64>().ok()) {
            bases.push(base);
        }
    }
    for (first, end) in merges {
        if cleaned_path(dir, first).exists() {
            continue;
        }
        for &base in bases.iter().filter(|&&b| first < b && b < end) {
            tracing::info!(dir = %dir.display(), base, merged_into = first, "deleting a segment a compaction merged before the process stopped");
            for ext in ["log", "index", "timeindex"] {
                remove_if_present(&dir.join(segment::file_name(base, ext)))?;
            }
        }
    }
    sync_dir(dir)?;
    remove_if_present(&journal)
}

/// Whether a file in a partition directory is a segment a compaction was writing when the
/// process stopped.
pub(super) fn is_leftover(name: &str) -> bool {
    name.ends_with(".log.cleaned")
}

#[cfg(test)]
mod tests;
