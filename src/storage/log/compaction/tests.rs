use std::rc::Rc;

use bytes::BytesMut;
use kafka_protocol::records::{Compression as Codec, RecordBatchDecoder};

use crate::storage::{CleanupPolicy, CompactionConfig, LogConfig, OpenFiles, PartitionLog, StorageError};

/// A compacted log that compacts whatever is dirty; tombstones stay 1 s.
fn config() -> LogConfig {
    let test = LogConfig::for_tests();
    LogConfig {
        index_interval_bytes: 1,
        cleanup: CleanupPolicy { delete: false, compact: true },
        compaction: CompactionConfig { delete_retention_ms: 1_000, min_dirty_ratio: 0.0, ..test.compaction },
        ..test
    }
}

fn files() -> Rc<OpenFiles> {
    OpenFiles::new(4)
}

/// One batch of `(key, value)` records written at `ts`.
fn batch(records: &[(Option<&str>, Option<&str>)], codec: Codec, ts: i64) -> BytesMut {
    let pairs: Vec<_> = records.iter().map(|(k, v)| (*k, v.map(str::as_bytes))).collect();
    crate::record_batch::tests::batch_of(&pairs, codec, None, ts, 0)
}

/// Every record a consumer reading from `from` gets: (offset, key, value).
fn consume(log: &PartitionLog, from: i64) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut next = from;
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20, true).unwrap();
        let slice = read.slice.unwrap();
        let mut bytes = vec![0u8; slice.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position).unwrap();
        let mut buf = bytes::Bytes::from(bytes);
        while !buf.is_empty() {
            // As a client does, past the whole batch: it may hold no record (a producer's last).
            next = next.max(crate::record_batch::BatchHeader::parse(&buf).unwrap().last_offset() + 1);
            let set = RecordBatchDecoder::decode(&mut buf).unwrap();
            for r in set.records {
                next = r.offset + 1;
                if r.offset >= from {
                    let text = |b: bytes::Bytes| String::from_utf8(b.to_vec()).unwrap();
                    out.push((r.offset, r.key.map(text).unwrap(), r.value.map(text)));
                }
            }
        }
    }
    out
}

fn compact(log: &mut PartitionLog, now: i64) -> u64 {
    let plan = log.cleaner_plan(now).expect("a compaction is due");
    let cleaned = plan.run().unwrap();
    let removed = cleaned.records_removed;
    log.install_cleaned(cleaned, now).unwrap();
    removed
}

fn kv(offset: i64, key: &str, value: &str) -> (i64, String, Option<String>) {
    (offset, key.to_string(), Some(value.to_string()))
}

#[test]
fn keeps_the_last_record_of_each_key_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    log.append(&batch(&[(Some("a"), Some("1")), (Some("b"), Some("2")), (Some("c"), Some("3"))], Codec::None, 10), 0).unwrap();
    log.append(&batch(&[(Some("a"), Some("4"))], Codec::Gzip, 11), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("b"), Some("5")), (Some("d"), Some("6"))], Codec::Zstd, 12), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("a"), Some("7"))], Codec::None, 13), 0).unwrap();

    // The active segment (a=7 at 6) takes no part: a=4 stays until it is sealed.
    assert_eq!(compact(&mut log, 100), 2);
    let expected = vec![kv(2, "c", "3"), kv(3, "a", "4"), kv(4, "b", "5"), kv(5, "d", "6"), kv(6, "a", "7")];
    assert_eq!(consume(&log, 0), expected);
    // A fetch inside the gap gets the next record kept; the log's ends do not move.
    assert_eq!(consume(&log, 1), expected);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 7));
    // Nothing new is dirty: no compaction is due.
    assert!(log.cleaner_plan(100).is_none());

    // After a crash every sealed segment is scanned again (no recovery point): same records.
    drop(log);
    let (mut log, report) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(consume(&log, 0), expected);

    // Sealing a=7 makes it dirty: a=4 goes at the next compaction.
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("e"), Some("8"))], Codec::Lz4, 14), 0).unwrap();
    assert_eq!(compact(&mut log, 100), 1);
    assert_eq!(consume(&log, 0), vec![kv(2, "c", "3"), kv(4, "b", "5"), kv(5, "d", "6"), kv(6, "a", "7"), kv(7, "e", "8")]);

    // A clean close and open trusts what the compaction wrote.
    log.close().unwrap();
    drop(log);
    let (log, _) = PartitionLog::open(&files(), &path, config(), true, 0).unwrap();
    assert_eq!(consume(&log, 3).len(), 4);
}

#[test]
fn a_segment_left_empty_is_deleted_unless_it_is_the_first() {
    let dir = tempfile::tempdir().unwrap();
    // Segments too large to merge, so each is written again on its own.
    let cfg = LogConfig { segment_bytes: 1, ..config() };
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    for value in ["1", "2", "3"] {
        log.append(&batch(&[(Some("k"), Some(value))], Codec::Snappy, 10), 0).unwrap();
        log.roll(0).unwrap();
    }
    assert_eq!(log.segment_count(), 4);
    assert_eq!(compact(&mut log, 100), 2);
    // The first segment stays (empty) and keeps the start; the second is gone.
    assert_eq!(log.segment_count(), 3);
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(consume(&log, 0), vec![kv(2, "k", "3")]);
}

#[test]
fn an_old_tombstone_stays_delete_retention_ms_from_its_first_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    // Written with timestamps far older than delete.retention.ms (1 s), as a mirrored topic's.
    log.append(&batch(&[(Some("a"), Some("1")), (Some("b"), Some("2"))], Codec::None, 10), 0).unwrap();
    log.append(&batch(&[(Some("a"), None)], Codec::Lz4, 10), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("c"), Some("3"))], Codec::None, 10), 0).unwrap();
    // The first compaction keeps the tombstone and sets its batch's horizon: 100 s + 1 s.
    compact(&mut log, 100_000);
    let tombstone = (2, "a".to_string(), None);
    assert_eq!(consume(&log, 0), vec![kv(1, "b", "2"), tombstone.clone(), kv(3, "c", "3")]);
    let horizon = |log: &PartitionLog| {
        let batches = stored_horizons(log);
        batches.into_iter().find(|&(base, _)| base == 2).and_then(|(_, h)| h)
    };
    assert_eq!(horizon(&log), Some(101_000));
    // Before the horizon, another compaction keeps it (and the horizon it has).
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("d"), Some("4"))], Codec::None, 10), 0).unwrap();
    compact(&mut log, 100_900);
    assert_eq!(consume(&log, 0), vec![kv(1, "b", "2"), tombstone, kv(3, "c", "3"), kv(4, "d", "4")]);
    assert_eq!(horizon(&log), Some(101_000));
    // The first compaction at or after it removes the tombstone.
    log.roll(0).unwrap();
    log.append(&batch(&[(Some("e"), Some("5"))], Codec::None, 10), 0).unwrap();
    compact(&mut log, 101_000);
    assert_eq!(consume(&log, 0), vec![kv(1, "b", "2"), kv(3, "c", "3"), kv(4, "d", "4"), kv(5, "e", "5")]);
}

/// Each batch's base offset and delete horizon, in the first segment.
fn stored_horizons(log: &PartitionLog) -> Vec<(i64, Option<i64>)> {
    stored_batch_headers(log, 0).into_iter().map(|h| (h.base_offset, h.delete_horizon_ms())).collect()
}

#[test]
fn when_compaction_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { compaction: CompactionConfig { min_lag_ms: 5_000, min_dirty_ratio: 0.5, ..config().compaction }, ..config() };
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    log.append(&batch(&[(Some("a"), Some("1"))], Codec::None, 10_000), 0).unwrap();
    log.roll(0).unwrap();
    // Younger than min.compaction.lag.ms; only the active segment; nothing sealed.
    assert!(log.cleaner_plan(12_000).is_none());
    assert!(log.cleaner_plan(16_000).is_some());
    compact(&mut log, 16_000);
    // One dirty segment as large as the clean one: a ratio of 0.5 is reached; a third is not.
    log.append(&batch(&[(Some("b"), Some("2"))], Codec::None, 10_000), 0).unwrap();
    log.roll(0).unwrap();
    assert!(log.cleaner_plan(16_000).is_some());
    log.set_config(LogConfig { compaction: CompactionConfig { min_dirty_ratio: 0.6, ..cfg.compaction }, ..cfg });
    assert!(log.cleaner_plan(16_000).is_none());
    // Unless a dirty record is older than max.compaction.lag.ms.
    log.set_config(LogConfig { compaction: CompactionConfig { min_dirty_ratio: 0.6, max_lag_ms: 1_000, ..cfg.compaction }, ..cfg });
    assert!(log.cleaner_plan(16_000).is_some());
    // A log that is not compacted never is.
    log.set_config(LogConfig { cleanup: CleanupPolicy { delete: true, compact: false }, ..cfg });
    assert!(log.cleaner_plan(16_000).is_none());
}

#[test]
fn a_key_map_too_small_for_one_segment_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { compaction: CompactionConfig { buffer_bytes: 100, ..config().compaction }, ..config() };
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    log.append(&batch(&[(Some("a"), Some("1")), (Some("b"), Some("2")), (Some("c"), Some("3"))], Codec::None, 10), 0).unwrap();
    log.roll(0).unwrap();
    let error = log.cleaner_plan(100).unwrap().run().unwrap_err();
    assert!(error.to_string().contains("storage.cleaner_dedupe_buffer_bytes"), "{error}");
    assert_eq!(consume(&log, 0).len(), 3);
}

#[test]
fn compacted_topics_refuse_keyless_records_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    let refused = log.append(&batch(&[(Some("a"), Some("1")), (None, Some("2"))], Codec::Gzip, 10), 0).unwrap_err();
    assert!(matches!(refused, StorageError::NoKey { .. }));
    let why = "Compacted topic cannot accept message without key in topic partition t-0";
    assert_eq!(refused.record_errors(), vec![(1, why.to_string())]);
    assert!(refused.to_string().contains(&format!("RecordError(batchIndex=1, message='{why}')")), "{refused}");
    assert_eq!(log.log_end_offset(), 0);
    log.append(&batch(&[(Some("a"), Some("1"))], Codec::None, 10), 0).unwrap();
    let refused = log.delete_records_before(1).unwrap_err();
    assert_eq!(refused.to_string(), "Records of partition t-0 can not be deleted due to the configured policy");
    // compact,delete takes both.
    log.set_config(LogConfig { cleanup: CleanupPolicy { delete: true, compact: true }, ..config() });
    assert_eq!(log.delete_records_before(1).unwrap(), 1);
}

#[test]
fn opening_removes_what_an_interrupted_compaction_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    log.append(&batch(&[(Some("a"), Some("1")), (Some("a"), Some("2"))], Codec::None, 10), 0).unwrap();
    log.roll(0).unwrap();
    let cleaned = log.cleaner_plan(100).unwrap().run().unwrap();
    assert!(path.join("00000000000000000000.log.cleaned").exists());
    drop((cleaned, log));
    let (log, _) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    assert!(!path.join("00000000000000000000.log.cleaned").exists());
    assert_eq!(consume(&log, 0), vec![kv(0, "a", "1"), kv(1, "a", "2")]);
}

#[test]
fn a_batch_that_cannot_be_looked_inside_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let plain = LogConfig { cleanup: CleanupPolicy { delete: true, compact: false }, ..config() };
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), plain, 0);
    // Written before the topic was compacted: gzip that does not decompress, under a valid CRC.
    let mut opaque = batch(&[(Some("x"), Some("1"))], Codec::Gzip, 10).to_vec();
    opaque[61..].fill(0xab);
    let crc = crc32c::crc32c(&opaque[21..]);
    opaque[17..21].copy_from_slice(&crc.to_be_bytes());
    log.append(&opaque, 0).unwrap();
    log.append(&batch(&[(Some("a"), Some("1")), (Some("a"), Some("2"))], Codec::None, 10), 0).unwrap();
    log.roll(0).unwrap();
    log.set_config(config());
    assert_eq!(compact(&mut log, 100), 1);
    let read = log.read(0, 1 << 20, true).unwrap();
    assert_eq!(read.first_batch_len as usize, opaque.len());
    assert_eq!(consume(&log, 1), vec![kv(2, "a", "2")]);
}

#[test]
fn a_timestamp_lookup_prepared_before_a_compaction_reads_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    log.append(&batch(&[(Some("a"), Some("1")), (Some("b"), Some("1"))], Codec::None, 10), 0).unwrap();
    log.append(&batch(&[(Some("a"), Some("2"))], Codec::None, 20), 0).unwrap();
    log.append(&batch(&[(Some("c"), Some("3"))], Codec::None, 30), 0).unwrap();
    log.roll(0).unwrap();
    let lookup = log.timestamp_lookup(30);
    // The compaction shortens the first batch: the third moves to an earlier position.
    compact(&mut log, 100);
    assert_eq!(lookup.run().unwrap(), Some((3, 30)));
    assert_eq!(log.timestamp_lookup(30).run().unwrap(), Some((3, 30)));
}

#[test]
fn a_segment_of_more_batches_than_the_buffer_lists_is_indexed_by_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    log.append(&batch(&[(Some("a"), Some("1"))], Codec::None, 10), 0).unwrap();
    for i in 0..10 {
        log.append(&batch(&[(Some(&format!("k{i}")), Some("v"))], Codec::None, 11 + i), 0).unwrap();
    }
    log.roll(0).unwrap();
    assert_eq!(compact(&mut log, 100), 0);
    // Room in the buffer for the one dirty key, and for five batches in the list of those written.
    log.set_config(LogConfig { compaction: CompactionConfig { buffer_bytes: 160, ..config().compaction }, ..config() });
    log.append(&batch(&[(Some("a"), Some("2"))], Codec::None, 30), 0).unwrap();
    log.roll(0).unwrap();
    assert_eq!(compact(&mut log, 100), 1);
    let records = consume(&log, 0);
    assert_eq!((records.len(), records[0].0, records[10].clone()), (11, 1, kv(11, "a", "2")));
    assert_eq!(log.timestamp_lookup(15).run().unwrap(), Some((5, 15)));
}

/// The batches of the log from `from`: (base offset, records, codec bits, producer id).
fn stored_batches(log: &PartitionLog, from: i64) -> Vec<(i64, i32, i16, i64)> {
    let headers = stored_batch_headers(log, from);
    headers.into_iter().map(|h| (h.base_offset, h.records_count, h.attributes & 0x07, h.producer_id)).collect()
}

/// The header of every batch one read from offset `from` gets (to the end of its segment).
fn stored_batch_headers(log: &PartitionLog, from: i64) -> Vec<crate::record_batch::BatchHeader> {
    let read = log.read(from, 1 << 20, true).unwrap();
    let slice = read.slice.unwrap();
    let mut bytes = vec![0u8; slice.len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position).unwrap();
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let header = crate::record_batch::BatchHeader::parse(rest).unwrap();
        rest = &rest[header.total_len()..];
        out.push(header);
    }
    out
}

#[test]
fn a_producers_last_batch_stays_empty_so_a_retry_of_it_is_known_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    let from = |producer: i64, sequence: i32, value: &str| {
        crate::record_batch::tests::batch_of(&[(Some("k"), Some(value.as_bytes()))], Codec::Gzip, Some((producer, 0, sequence)), 10, 0)
    };
    // Producer 7 writes k twice (offsets 0 and 1), then producer 8 replaces it (offset 2).
    log.append(&from(7, 0, "a"), 0).unwrap();
    let last_of_7 = from(7, 1, "b");
    log.append(&last_of_7, 0).unwrap();
    log.append(&from(8, 0, "c"), 0).unwrap();
    log.roll(0).unwrap();
    assert_eq!(compact(&mut log, 100), 2);
    assert_eq!(consume(&log, 0), vec![kv(2, "k", "c")]);
    // Producer 7's first batch is gone; its last stays, empty and uncompressed, as Kafka keeps it.
    assert_eq!(stored_batches(&log, 0), vec![(1, 0, 0, 7), (2, 1, 1, 8)]);

    // After a crash the producer state is rebuilt from the log: the retry is a duplicate.
    drop(log);
    let (mut log, _) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    let retry = log.append(&last_of_7, 0).unwrap();
    assert!(retry.duplicate && retry.base_offset == 1, "{retry:?}");
    assert_eq!(log.log_end_offset(), 3);

    // Once producer 7 has written again, its empty batch is no longer needed; producer 8's
    // batch, now replaced, stays empty in its turn.
    log.append(&from(7, 2, "d"), 0).unwrap();
    log.roll(0).unwrap();
    assert_eq!(compact(&mut log, 100), 1);
    // The two segments, small, are now one.
    assert_eq!(stored_batches(&log, 0), vec![(2, 0, 0, 8), (3, 1, 1, 7)]);
    assert_eq!(consume(&log, 0), vec![kv(3, "k", "d")]);
}

#[test]
fn small_segments_are_merged_up_to_segment_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let one = batch(&[(Some("k0"), Some("v"))], Codec::None, 10).len() as u64;
    // Room for three one-record segments in one.
    let cfg = LogConfig { segment_bytes: 3 * one, ..config() };
    let mut log = PartitionLog::create(&files(), &path, cfg, 0);
    for k in 0..7 {
        log.append(&batch(&[(Some(&*format!("k{k}")), Some("v"))], Codec::None, 10), 0).unwrap();
        log.roll(0).unwrap();
    }
    assert_eq!(log.segment_count(), 8);
    let before = consume(&log, 0);
    assert_eq!(compact(&mut log, 100), 0);
    // Seven sealed segments: 3 + 3 + 1, and the active one.
    assert_eq!(log.segment_count(), 4);
    assert_eq!(consume(&log, 0), before);
    let on_disk = |ext: &str| {
        let mut names: Vec<String> =
            std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n.ends_with(ext)).collect();
        names.sort();
        names
    };
    assert_eq!(
        on_disk(".log"),
        ["00000000000000000000.log", "00000000000000000003.log", "00000000000000000006.log", "00000000000000000007.log"]
    );
    assert!(on_disk("merges").is_empty() && on_disk(".cleaned").is_empty());
    // A reopened log, after a crash or not, reads the same.
    for clean in [false, true] {
        drop(log);
        log = PartitionLog::open(&files(), &path, cfg, clean, 0).unwrap().0;
        assert_eq!(log.segment_count(), 4);
        assert_eq!(consume(&log, 0), before);
    }
}

#[test]
fn a_merge_cut_short_by_a_crash_is_finished_or_undone_at_open() {
    let cfg = |segment_bytes| LogConfig { segment_bytes, ..config() };
    let fill = |path: &std::path::Path| {
        let mut log = PartitionLog::create(&files(), path, cfg(1 << 20), 0);
        for value in ["1", "2", "3"] {
            log.append(&batch(&[(Some("k"), Some(value)), (Some(value), Some("x"))], Codec::None, 10), 0).unwrap();
            log.roll(0).unwrap();
        }
        log
    };
    let expected = vec![kv(1, "1", "x"), kv(3, "2", "x"), kv(4, "k", "3"), kv(5, "3", "x")];

    // Stopped after the journal, before the rename: the segments stay as they were.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let log = fill(&path);
    let before = consume(&log, 0);
    let cleaned = log.cleaner_plan(100).unwrap().run().unwrap();
    assert_eq!(cleaned.rewritten.len(), 1);
    std::fs::write(path.join(super::MERGE_JOURNAL), "0 6\n").unwrap();
    drop(log);
    let log = PartitionLog::open(&files(), &path, cfg(1 << 20), false, 0).unwrap().0;
    assert_eq!(log.segment_count(), 4);
    assert_eq!(consume(&log, 0), before);
    assert!(!path.join(super::MERGE_JOURNAL).exists());

    // Stopped after the rename, before the segments it replaced were deleted: they go at open.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = fill(&path);
    let replaced: Vec<(String, Vec<u8>)> = ["00000000000000000002.log", "00000000000000000004.log"]
        .iter()
        .map(|name| (name.to_string(), std::fs::read(path.join(name)).unwrap()))
        .collect();
    compact(&mut log, 100);
    assert_eq!(consume(&log, 0), expected);
    drop(log);
    for (name, bytes) in &replaced {
        std::fs::write(path.join(name), bytes).unwrap();
    }
    std::fs::write(path.join(super::MERGE_JOURNAL), "0 6\n").unwrap();
    let log = PartitionLog::open(&files(), &path, cfg(1 << 20), false, 0).unwrap().0;
    assert_eq!(log.segment_count(), 2);
    assert_eq!(consume(&log, 0), expected);
}
