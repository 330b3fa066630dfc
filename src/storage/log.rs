//! A partition's log: its ordered segments, offset assignment, roll, retention and recovery.
//!
//! Synchronous by design: appends go to the page cache and return; whatever must wait for a disk
//! (fsync) is handed to the caller as [`SyncTarget`]s ([`PartitionLog::take_unsynced`]), so this
//! type stays easy to test and never blocks on a flush.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::record_batch::{self, BatchHeader};

pub mod compaction;

use super::open_files::OpenFiles;
use super::producer_state::{ProducerStates, SequenceCheck};
use super::segment::{self, Recovery, Segment, SyncTarget};
use super::timestamp_scan::TimestampLookup;
use super::{FileSlice, LogConfig, StorageError};

/// How long producer state is kept without writes (Kafka's `producer.id.expiration.ms`).
pub(crate) const PRODUCER_EXPIRATION_MS: i64 = 24 * 3600 * 1000;
const PRODUCER_SNAPSHOT: &str = "producer.snapshot";
/// The offset below which every segment was fsynced (Kafka's recovery point): after a crash,
/// segments that reach past it are checked batch by batch, those below it are trusted.
const RECOVERY_POINT: &str = "recovery-point";
/// The log start offset that DeleteRecords moved into a segment (Kafka's log-start-offset
/// checkpoint, one file per partition). Absent while the log starts at its first segment.
const LOG_START_OFFSET: &str = "log-start-offset";

/// Result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// The batch was a retry of one already written; nothing new was stored.
    pub duplicate: bool,
    /// Records in the batch.
    pub records: u32,
    /// The batch's producer took the place of another in a full producer table.
    pub producer_evicted: bool,
}

/// Result of a read: the bytes to send and the offsets a fetch response reports.
#[derive(Debug, Clone)]
pub struct ReadInfo {
    pub slice: Option<FileSlice>,
    /// Length of the first batch in `slice` (which always holds it whole); 0 without a slice.
    pub first_batch_len: u64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// What a retention pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionReport {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
}

/// What opening a partition found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpenReport {
    pub segments: usize,
    pub recovered_batches: u64,
    pub truncated_bytes: u64,
}

/// One partition's log. Lives on the shard that owns the partition.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// The owning shard's open segment files.
    files: Rc<OpenFiles>,
    /// Never empty; the last segment is the active one.
    segments: BTreeMap<i64, Segment>,
    producers: ProducerStates,
    /// Files written since the last sync, besides the active segment.
    unsynced: Vec<SyncTarget>,
    /// A segment was created since the last sync: its directory entry must be fsynced too.
    dir_unsynced: bool,
    /// The partition's directory was created and its entry in the data directory is not synced:
    /// the first fsync covers it.
    parent_unsynced: bool,
    /// The directory and the first segment's file exist. A new partition creates them at its
    /// first append: creating a topic of 10,000 partitions writes nothing to disk, and a
    /// partition never written costs no inode.
    on_disk: bool,
    unflushed_messages: u64,
    /// The first fsync that failed. After it nothing is known about what reached the disk (a
    /// later fsync can succeed with the failed pages dropped), so the log takes no more writes
    /// and never reports anything durable again.
    sync_failed: Option<String>,
    /// The recovery point last written.
    recovery_point: i64,
    /// Where DeleteRecords put the start of the log; records below it are gone to readers even
    /// while their segment remains. The log starts at the larger of this and its first segment.
    deleted_before: i64,
    /// Where the dirty section of a compacted log starts: the offset the last compaction reached.
    cleaned_to: i64,
}

impl PartitionLog {
    /// A new, empty partition. Its directory and first segment are created by the first append
    /// and fsynced by the first flush after it: until then a crash loses only an empty partition,
    /// which opening creates again.
    pub fn create(files: &Rc<OpenFiles>, dir: &Path, config: LogConfig, now_ms: i64) -> PartitionLog {
        let segment = Segment::unwritten(files, dir, 0, config.index_interval_bytes, now_ms);
        let mut log = PartitionLog::with_segments(files, dir, config, BTreeMap::from([(0, segment)]));
        log.on_disk = false;
        log
    }

    /// Creates the directory and the first segment's file, before the first append.
    fn materialize(&mut self) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        self.active_mut().create_file()?;
        self.on_disk = true;
        self.dir_unsynced = true;
        self.parent_unsynced = true;
        Ok(())
    }

    fn with_segments(files: &Rc<OpenFiles>, dir: &Path, config: LogConfig, segments: BTreeMap<i64, Segment>) -> PartitionLog {
        PartitionLog {
            dir: dir.to_path_buf(),
            config,
            files: files.clone(),
            segments,
            producers: ProducerStates::default(),
            unsynced: Vec::new(),
            dir_unsynced: false,
            parent_unsynced: false,
            on_disk: true,
            unflushed_messages: 0,
            sync_failed: None,
            recovery_point: 0,
            deleted_before: 0,
            cleaned_to: 0,
        }
    }

    /// Opens an existing partition directory (creating it if missing).
    ///
    /// After a clean shutdown the indexes and the producer snapshot are loaded as written. After
    /// a crash every segment that reaches past the recovery point (the active one at least) is
    /// scanned, every batch checked, a torn tail truncated and the indexes rebuilt; producer
    /// state is rebuilt from the batch headers of every segment.
    pub fn open(
        files: &Rc<OpenFiles>,
        dir: &Path,
        config: LogConfig,
        clean: bool,
        now_ms: i64,
    ) -> Result<(PartitionLog, OpenReport), StorageError> {
        if !dir.exists() {
            return Ok((PartitionLog::create(files, dir, config, now_ms), OpenReport { segments: 1, ..Default::default() }));
        }
        compaction::finish_merges(dir)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if compaction::is_leftover(name) {
                std::fs::remove_file(dir.join(name))?;
                continue;
            }
            if let Some(base) = name.strip_suffix(".log").and_then(|b| b.parse::<i64>().ok()) {
                bases.push(base);
            }
        }
        if bases.is_empty() {
            return Ok((PartitionLog::create(files, dir, config, now_ms), OpenReport { segments: 1, ..Default::default() }));
        }
        bases.sort_unstable();
        let mut report = OpenReport::default();
        let mut segments = BTreeMap::new();
        // Without a recovery point (a log written before it was kept) every segment is checked.
        let recovery_point = read_recovery_point(dir);
        let mut torn_at = None;
        for (i, &base) in bases.iter().enumerate() {
            if torn_at.is_some() {
                // Past a torn segment: its records would leave a gap in the offsets (Kafka drops
                // them the same way).
                let (segment, _) = Segment::open(files, dir, base, config.index_interval_bytes, true, now_ms)?;
                report.truncated_bytes += segment.size();
                segment.delete()?;
                continue;
            }
            let fsynced = bases.get(i + 1).is_some_and(|&next| next <= recovery_point);
            let trust = clean || fsynced;
            let (segment, Recovery { batches, truncated_bytes }) =
                Segment::open(files, dir, base, config.index_interval_bytes, trust, now_ms)?;
            report.recovered_batches += batches;
            report.truncated_bytes += truncated_bytes;
            if truncated_bytes > 0 && i + 1 < bases.len() {
                torn_at = Some(base);
            }
            segments.insert(base, segment);
        }
        report.segments = segments.len();
        let mut log = PartitionLog::with_segments(files, dir, config, segments);
        log.recovery_point = recovery_point;
        // A start past the end (the log's tail lost in a crash) cannot be: the log then starts
        // at its end.
        log.deleted_before = read_log_start_offset(dir).min(log.log_end_offset());
        log.cleaned_to = compaction::read_cleaner_checkpoint(dir).min(log.log_end_offset());
        // Sealed segments whose indexes were rebuilt write them now; the next fsync covers them
        // before the recovery point moves past them.
        let sealed = log.segments.len() - 1;
        for segment in log.segments.values_mut().take(sealed) {
            let written = segment.rebuilt_indexes()?;
            log.unsynced.extend(written);
        }
        let snapshot = if clean { log.load_producer_snapshot() } else { None };
        log.producers = match snapshot {
            Some(states) => states,
            None => log.rebuild_producer_states(now_ms)?,
        };
        Ok((log, report))
    }

    fn load_producer_snapshot(&self) -> Option<ProducerStates> {
        let text = std::fs::read(self.dir.join(PRODUCER_SNAPSHOT)).ok()?;
        let snapshot: ProducerSnapshot = serde_json::from_slice(&text).ok()?;
        (snapshot.log_end_offset == self.log_end_offset()).then_some(snapshot.producers)
    }

    fn rebuild_producer_states(&self, now_ms: i64) -> io::Result<ProducerStates> {
        let mut states = ProducerStates::default();
        for segment in self.segments.values() {
            segment.for_each_batch(|h| {
                states.record(h, now_ms, self.config.max_producer_states);
            })?;
        }
        Ok(states)
    }

    pub fn log_start_offset(&self) -> i64 {
        let first = *self.segments.keys().next().expect("a log always has a segment");
        first.max(self.deleted_before)
    }

    /// Moves the start of the log to `offset` (DeleteRecords): records below it are no longer
    /// read, listed or counted, and the segments wholly below it are deleted. An offset at or
    /// below the current start changes nothing; one past the log end is refused. Returns the new
    /// log start offset.
    ///
    /// The new start is written at once (a killed process keeps it) and fsynced by the
    /// partition's next flush, as an append is.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, StorageError> {
        self.check_sync()?;
        if !self.config.cleanup.delete {
            return Err(StorageError::DeleteNotAllowed { partition: self.partition_name() });
        }
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset < 0 || offset > end {
            return Err(StorageError::OffsetOutOfRange { requested: offset, start, end });
        }
        if offset <= start {
            return Ok(start);
        }
        let path = self.dir.join(LOG_START_OFFSET);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, offset.to_string())?;
        std::fs::rename(&tmp, &path)?;
        self.unsynced.push(SyncTarget::Path(path));
        self.dir_unsynced = true;
        self.deleted_before = offset;
        self.delete_segments_before(offset)?;
        Ok(offset)
    }

    /// Offset the next appended record gets. On one node this is also the high watermark.
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    fn active(&self) -> &Segment {
        self.segments.values().next_back().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.values_mut().next_back().expect("a log always has a segment")
    }

    /// Validates one record batch, checks the producer's sequence, assigns offsets and writes it.
    pub fn append(&mut self, batch: &[u8], now_ms: i64) -> Result<AppendInfo, StorageError> {
        self.check_sync()?;
        if batch.len() > self.config.max_message_bytes as usize {
            return Err(StorageError::MessageTooLarge { size: batch.len(), max: self.config.max_message_bytes });
        }
        let mut header = record_batch::validate(batch)?;
        if header.is_control() {
            return Err(StorageError::ControlBatch);
        }
        if header.is_transactional() {
            return Err(StorageError::Transactional);
        }
        if self.config.cleanup.compact {
            let records = record_batch::records_without_key(batch)?;
            if !records.is_empty() {
                return Err(StorageError::NoKey { partition: self.partition_name(), records });
            }
        }
        if header.has_producer_id() {
            if let SequenceCheck::Duplicate { base_offset } = self.producers.check(&header)? {
                return Ok(AppendInfo {
                    base_offset,
                    log_start_offset: self.log_start_offset(),
                    duplicate: true,
                    records: header.records_count as u32,
                    producer_evicted: false,
                });
            }
        }
        let base_offset = self.log_end_offset();
        header.base_offset = base_offset;
        header.partition_leader_epoch = 0;
        if !self.on_disk {
            self.materialize()?;
        }
        self.maybe_roll(&header, batch.len(), now_ms)?;

        let mut head = [0u8; 16];
        head[0..8].copy_from_slice(&base_offset.to_be_bytes());
        head[8..12].copy_from_slice(&batch[8..12]);
        head[12..16].copy_from_slice(&header.partition_leader_epoch.to_be_bytes());
        self.active_mut().append(&header, &head, &batch[16..])?;
        let producer_evicted = self.producers.record(&header, now_ms, self.config.max_producer_states);
        self.unflushed_messages += header.records_count as u64;
        Ok(AppendInfo {
            base_offset,
            log_start_offset: self.log_start_offset(),
            duplicate: false,
            records: header.records_count as u32,
            producer_evicted,
        })
    }

    /// Starts a new segment when the active one is full, spans more than segment.ms, or cannot
    /// index the batch's offsets (relative offsets are 32-bit).
    ///
    /// Age is measured as Kafka measures it: the incoming batch's timestamp against the segment's
    /// first batch timestamp, so replayed or backdated records do not roll a segment per batch;
    /// wall time since creation only when the segment's records carry no timestamps.
    fn maybe_roll(&mut self, header: &BatchHeader, len: usize, now_ms: i64) -> Result<(), StorageError> {
        let active = self.active();
        if active.is_empty() {
            return Ok(());
        }
        let full = active.size() + len as u64 > self.config.segment_bytes;
        let waited = match active.first_timestamp {
            // Timestamps are the client's: any two i64 may meet here.
            Some(first) => header.max_timestamp.saturating_sub(first),
            None => now_ms.saturating_sub(active.created_ms),
        };
        let old = waited > self.config.segment_ms;
        let offsets = header.last_offset() - active.base_offset > i32::MAX as i64;
        if full || old || offsets {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment and opens a new one at the log end offset.
    pub fn roll(&mut self, now_ms: i64) -> Result<(), StorageError> {
        let next = self.log_end_offset();
        let sealed = self.active_mut().seal()?;
        self.unsynced.extend(sealed);
        let segment = Segment::create(&self.files, &self.dir, next, self.config.index_interval_bytes, now_ms)?;
        self.segments.insert(next, segment);
        self.dir_unsynced = true;
        Ok(())
    }

    /// Reads from `offset`: at most `max_bytes`, but with `min_one_batch` always the whole first
    /// batch, so a consumer makes progress even past a batch larger than its limits (KIP-74).
    pub fn read(&self, offset: i64, max_bytes: u64, min_one_batch: bool) -> Result<ReadInfo, StorageError> {
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        if offset < start || offset > end {
            return Err(StorageError::OffsetOutOfRange { requested: offset, start, end });
        }
        let mut info = ReadInfo { slice: None, first_batch_len: 0, high_watermark: end, log_start_offset: start };
        if offset == end || (max_bytes == 0 && !min_one_batch) {
            return Ok(info);
        }
        let first = self.segments.range(..=offset).next_back().map(|(b, _)| *b).unwrap_or(start);
        for (_, segment) in self.segments.range(first..) {
            if let Some((slice, first_batch_len)) = segment.read(offset, max_bytes, min_one_batch)? {
                info.slice = Some(slice);
                info.first_batch_len = first_batch_len;
                break;
            }
        }
        Ok(info)
    }

    /// The lookup of the first record with a timestamp at or after `timestamp`, to run off the
    /// shard thread ([`TimestampLookup::run`] gives `(offset, timestamp)`).
    pub fn timestamp_lookup(&self, timestamp: i64) -> TimestampLookup {
        let start = self.log_start_offset();
        TimestampLookup { scans: self.segments.values().filter_map(|s| s.timestamp_scan(timestamp, start)).collect() }
    }

    /// The lookup of the record with the largest timestamp in the log (ListOffsets MAX_TIMESTAMP).
    pub fn max_timestamp_lookup(&self) -> TimestampLookup {
        let best = self.segments.values().filter(|s| s.max_timestamp >= 0).max_by_key(|s| (s.max_timestamp, -s.base_offset));
        TimestampLookup { scans: best.and_then(|s| s.max_timestamp_scan()).into_iter().collect() }
    }

    /// Deletes the oldest segments that are past `retention.ms` or beyond `retention.bytes`.
    /// The active segment is rolled first when everything in it has expired.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<RetentionReport, StorageError> {
        // Segments a DeleteRecords left wholly below the start (a crash can leave them).
        let mut report = self.delete_segments_before(self.deleted_before)?;
        if !self.config.cleanup.delete {
            // Compacted only: the cleaner removes what is removed.
        } else if self.config.retention_ms >= 0 {
            let active = self.active();
            let expired = |s: &Segment| s.max_timestamp >= 0 && now_ms - s.max_timestamp > self.config.retention_ms;
            if !active.is_empty() && expired(active) && self.segments.values().all(|s| s.is_empty() || expired(s)) {
                self.roll(now_ms)?;
            }
            while self.segments.len() > 1 {
                let oldest = self.segments.values().next().expect("non-empty");
                let expired = oldest.max_timestamp >= 0 && now_ms - oldest.max_timestamp > self.config.retention_ms;
                if !expired {
                    break;
                }
                self.delete_oldest(&mut report)?;
            }
        }
        if self.config.cleanup.delete && self.config.retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - self.config.retention_bytes;
            while self.segments.len() > 1 {
                let oldest = self.segments.values().next().expect("non-empty").size() as i64;
                if excess - oldest < 0 {
                    break;
                }
                excess -= oldest;
                self.delete_oldest(&mut report)?;
            }
        }
        self.producers.expire(now_ms, PRODUCER_EXPIRATION_MS);
        Ok(report)
    }

    /// Deletes every segment that ends before `offset` (never the active one): the log then
    /// starts at the first remaining segment, or at the start DeleteRecords set, if later. Used
    /// to drop what a compaction checkpoint replaced and what DeleteRecords deleted.
    pub fn delete_segments_before(&mut self, offset: i64) -> Result<RetentionReport, StorageError> {
        let mut report = RetentionReport::default();
        while self.segments.len() > 1 {
            let mut bases = self.segments.keys();
            let (_, next) = (bases.next(), bases.next().copied());
            match next {
                Some(next_base) if next_base <= offset => self.delete_oldest(&mut report)?,
                _ => break,
            }
        }
        Ok(report)
    }

    fn delete_oldest(&mut self, report: &mut RetentionReport) -> Result<(), StorageError> {
        let base = *self.segments.keys().next().expect("non-empty");
        let segment = self.segments.remove(&base).expect("present");
        report.segments_deleted += 1;
        report.bytes_deleted += segment.size();
        segment.delete()?;
        Ok(())
    }

    /// Messages appended since the last completed flush.
    pub fn unflushed_messages(&self) -> u64 {
        self.unflushed_messages
    }

    /// Everything an fsync must cover to make the current log end durable: files of segments
    /// rolled since the last sync, the directory where segments were created since (and the data
    /// directory's entry for a new partition), and the active segment's log. Resets the unflushed
    /// count. Refused once an fsync has failed.
    pub fn take_unsynced(&mut self) -> Result<Vec<SyncTarget>, StorageError> {
        self.check_sync()?;
        let mut targets = std::mem::take(&mut self.unsynced);
        if std::mem::take(&mut self.dir_unsynced) {
            targets.push(SyncTarget::Path(self.dir.clone()));
        }
        if std::mem::take(&mut self.parent_unsynced) {
            if let Some(parent) = self.dir.parent() {
                targets.push(SyncTarget::Path(parent.to_path_buf()));
            }
        }
        if self.on_disk {
            targets.push(SyncTarget::Open(self.active().log_file()?));
        }
        self.unflushed_messages = 0;
        Ok(targets)
    }

    /// Records that an fsync of what [`PartitionLog::take_unsynced`] returned failed: the log
    /// takes no more writes and syncs nothing more (see `sync_failed`).
    pub fn sync_failed(&mut self, error: &io::Error) {
        self.sync_failed.get_or_insert_with(|| error.to_string());
    }

    fn check_sync(&self) -> Result<(), StorageError> {
        match &self.sync_failed {
            Some(e) => {
                Err(StorageError::Io(io::Error::other(format!("an earlier fsync of this partition failed ({e}); it takes no more writes"))))
            }
            None => Ok(()),
        }
    }

    /// The recovery point to write once everything [`PartitionLog::take_unsynced`] returned is
    /// on disk, if it moved: the active segment's base (every segment before it is then fsynced).
    pub fn recovery_point_after_sync(&self) -> Option<(PathBuf, i64)> {
        let base = self.active().base_offset;
        (base > self.recovery_point).then(|| (self.dir.join(RECOVERY_POINT), base))
    }

    /// The recovery point `offset` was written.
    pub fn recovery_point_written(&mut self, offset: i64) {
        self.recovery_point = self.recovery_point.max(offset);
    }

    /// Writes what a clean start reads (the active segment's indexes, the producer snapshot), for
    /// a clean shutdown. Nothing is fsynced here: with thousands of partitions that is thousands
    /// of flushes, so the caller syncs the whole file system once ([`sync_filesystem`]) before it
    /// records the shutdown as clean. An empty log writes nothing (opening it costs nothing).
    ///
    /// Every close replaces or removes the snapshot, so the one a clean start finds is always the
    /// last shutdown's (and one left by an earlier shutdown is never trusted).
    pub fn close(&mut self) -> Result<(), StorageError> {
        self.check_sync()?;
        if self.size_bytes() == 0 && self.segments.len() == 1 {
            match std::fs::remove_file(self.dir.join(PRODUCER_SNAPSHOT)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                _ => return Ok(()),
            }
        }
        self.active_mut().close()?;
        // Over the old file: the clean-shutdown marker is what makes it trusted.
        let snapshot = ProducerSnapshot { log_end_offset: self.log_end_offset(), producers: self.producers.clone() };
        std::fs::write(self.dir.join(PRODUCER_SNAPSHOT), serde_json::to_vec(&snapshot).map_err(io::Error::other)?)?;
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The partition as Kafka names it in messages (`topic-0`): its directory's name.
    fn partition_name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Producers with state in this partition.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProducerSnapshot {
    log_end_offset: i64,
    producers: ProducerStates,
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Writes a recovery point (durably: see [`write_atomically`]).
pub(crate) fn write_recovery_point(path: &Path, offset: i64) -> io::Result<()> {
    write_atomically(path, offset.to_string().as_bytes())
}

/// The recovery point of a partition directory; 0 (check everything) when there is none.
fn read_recovery_point(dir: &Path) -> i64 {
    read_offset_file(&dir.join(RECOVERY_POINT))
}

/// The log start offset DeleteRecords left in a partition directory; 0 when there is none.
fn read_log_start_offset(dir: &Path) -> i64 {
    read_offset_file(&dir.join(LOG_START_OFFSET))
}

fn read_offset_file(path: &Path) -> i64 {
    std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Flushes everything written to the file system that holds `dir` (syncfs(2)): one call for
/// what closing every partition wrote.
pub fn sync_filesystem(dir: &Path) -> io::Result<()> {
    rustix::fs::syncfs(File::open(dir)?)?;
    Ok(())
}

/// fsync a directory so that entries created or renamed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Name of a partition's directory, as Kafka names it.
pub fn partition_dir_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

#[doc(hidden)]
pub fn segment_file_name(base_offset: i64) -> String {
    segment::file_name(base_offset, "log")
}
