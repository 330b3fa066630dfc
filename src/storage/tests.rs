//! Tests of the partition log as a whole: append, read, index lookups, roll, retention and
//! recovery, against real files in a temporary directory.

use std::os::unix::fs::FileExt;

use kafka_protocol::records::Compression as Codec;

use std::rc::Rc;

use super::log::PartitionLog;
use super::{FileSlice, LogConfig, OpenFiles, StorageError};
use crate::record_batch::tests::batch;
use crate::record_batch::{self, BatchHeader};

fn config() -> LogConfig {
    LogConfig::for_tests()
}

/// Room for two open files: every test also runs its segments through evictions and reopens.
fn files() -> Rc<OpenFiles> {
    OpenFiles::new(2)
}

fn slice_bytes(slice: &FileSlice) -> Vec<u8> {
    let mut buf = vec![0u8; slice.len as usize];
    slice.file.read_exact_at(&mut buf, slice.position).unwrap();
    buf
}

/// Base offsets of the whole batches in `bytes`.
fn batch_offsets(mut bytes: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while let Ok(h) = BatchHeader::parse(bytes) {
        if h.total_len() > bytes.len() {
            break;
        }
        record_batch::validate(&bytes[..h.total_len()]).unwrap();
        out.push(h.base_offset);
        bytes = &bytes[h.total_len()..];
    }
    out
}

#[test]
fn append_assigns_offsets_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    for i in 0..10 {
        let info = log.append(&batch(3, Codec::None, None, 1000 + i), 0).unwrap();
        assert_eq!(info.base_offset, i * 3);
        assert!(!info.duplicate);
    }
    assert_eq!(log.log_end_offset(), 30);
    // From the middle of a batch: the read starts at the batch that holds the offset.
    let read = log.read(7, 1 << 20, true).unwrap();
    assert_eq!(read.high_watermark, 30);
    let offsets = batch_offsets(&slice_bytes(read.slice.as_ref().unwrap()));
    assert_eq!(offsets, vec![6, 9, 12, 15, 18, 21, 24, 27]);
    // At the end: nothing, no error.
    assert!(log.read(30, 1 << 20, true).unwrap().slice.is_none());
    // Past the end, before the start: out of range.
    assert!(matches!(log.read(31, 100, true), Err(StorageError::OffsetOutOfRange { .. })));
    assert!(matches!(log.read(-1, 100, true), Err(StorageError::OffsetOutOfRange { .. })));
}

#[test]
fn max_bytes_and_the_first_batch_rule() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    let one = batch(5, Codec::None, None, 0);
    let len = one.len() as u64;
    for _ in 0..4 {
        log.append(&one, 0).unwrap();
    }
    // A limit below one batch still returns the whole first batch (KIP-74)...
    let read = log.read(0, 10, true).unwrap();
    assert_eq!(read.slice.unwrap().len, len);
    // ...unless another partition already filled the response.
    assert!(log.read(0, 0, false).unwrap().slice.is_none());
    // A limit of 2.5 batches: exactly that many bytes, the tail batch partial.
    let read = log.read(0, len * 5 / 2, true).unwrap();
    assert_eq!(read.slice.unwrap().len, len * 5 / 2);
}

#[test]
fn index_lookups_across_many_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.index_interval_bytes = 512;
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    for i in 0..500 {
        log.append(&batch(2, Codec::None, None, i * 10), 0).unwrap();
    }
    for target in [0, 1, 2, 377, 998, 999] {
        let read = log.read(target, 1, true).unwrap();
        let offsets = batch_offsets(&slice_bytes(read.slice.as_ref().unwrap()));
        assert_eq!(offsets, vec![target - target % 2], "target {target}");
    }
    // Timestamps: batch i holds records at i*10 and i*10+1.
    assert_eq!(log.timestamp_lookup(0).run().unwrap(), Some((0, 0)));
    assert_eq!(log.timestamp_lookup(2001).run().unwrap(), Some((401, 2001)));
    assert_eq!(log.timestamp_lookup(2002).run().unwrap(), Some((402, 2010)));
    assert_eq!(log.timestamp_lookup(10_000).run().unwrap(), None);
    assert_eq!(log.max_timestamp_lookup().run().unwrap(), Some((999, 4991)));
}

#[test]
fn timestamps_inside_compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    log.append(&batch(10, Codec::Zstd, None, 100), 0).unwrap();
    log.append(&batch(10, Codec::Lz4, None, 200), 0).unwrap();
    assert_eq!(log.timestamp_lookup(105).run().unwrap(), Some((5, 105)));
    assert_eq!(log.timestamp_lookup(150).run().unwrap(), Some((10, 200)));
    assert_eq!(log.max_timestamp_lookup().run().unwrap(), Some((19, 209)));
}

#[test]
fn a_clean_restart_keeps_the_timestamps_of_a_segment_smaller_than_the_index_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    log.append(&batch(3, Codec::None, None, 100), 0).unwrap();
    log.close().unwrap();
    drop(log);
    let (log, _) = PartitionLog::open(&files(), &path, config(), true, 0).unwrap();
    assert_eq!(log.timestamp_lookup(101).run().unwrap(), Some((1, 101)));
    assert_eq!(log.max_timestamp_lookup().run().unwrap(), Some((2, 102)));
}

#[test]
fn rolls_by_size_and_reads_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(4, Codec::None, None, 0);
    let mut cfg = config();
    cfg.segment_bytes = one.len() as u64 * 3;
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, cfg, 0);
    for _ in 0..10 {
        log.append(&one, 0).unwrap();
    }
    assert_eq!(log.segment_count(), 4);
    let names: Vec<String> = {
        let mut v: Vec<String> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".log"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(names, ["00000000000000000000.log", "00000000000000000012.log", "00000000000000000024.log", "00000000000000000036.log"]);
    // A read returns data from one segment at a time; a consumer walks across.
    let mut next = 0;
    let mut seen = Vec::new();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20, true).unwrap();
        let offsets = batch_offsets(&slice_bytes(read.slice.as_ref().unwrap()));
        next = offsets.last().unwrap() + 4;
        seen.extend(offsets);
    }
    assert_eq!(seen, (0..10).map(|i| i * 4).collect::<Vec<_>>());
}

#[test]
fn rolls_by_age_of_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.segment_ms = 1000;
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    // Old timestamps do not roll every batch: age is record time since the segment's first batch.
    let years_later = 100_000_000_000;
    log.append(&batch(1, Codec::None, None, 5_000), years_later).unwrap();
    log.append(&batch(1, Codec::None, None, 5_500), years_later).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&batch(1, Codec::None, None, 6_001), years_later).unwrap();
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn retention_by_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let one = batch(1, Codec::None, None, 0);
    let mut cfg = config();
    cfg.segment_bytes = one.len() as u64 * 2;
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    for i in 0..10 {
        log.append(&batch(1, Codec::None, None, i * 1000), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 5);
    // Size: keep at most 5 batches' worth; whole segments go, the active one stays.
    cfg.retention_bytes = one.len() as i64 * 5;
    log.set_config(cfg);
    let report = log.apply_retention(0).unwrap();
    assert_eq!(report.segments_deleted, 2);
    assert_eq!(log.log_start_offset(), 4);
    assert!(matches!(log.read(0, 100, true), Err(StorageError::OffsetOutOfRange { .. })));
    // Time: segments whose newest record is older than retention.ms go.
    cfg.retention_bytes = -1;
    cfg.retention_ms = 3_500;
    log.set_config(cfg);
    let report = log.apply_retention(9_000).unwrap();
    assert_eq!(report.segments_deleted, 1);
    assert_eq!(log.log_start_offset(), 6);
    // Everything expired: the active segment is rolled and deleted; the log is empty at its end.
    let report = log.apply_retention(100_000).unwrap();
    assert_eq!(report.segments_deleted, 2);
    assert_eq!(log.log_start_offset(), 10);
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(log.append(&one, 0).unwrap().base_offset, 10);
}

#[test]
fn recovers_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    for _ in 0..5 {
        log.append(&batch(2, Codec::Snappy, None, 0), 0).unwrap();
    }
    let full = log.size_bytes();
    drop(log);
    // Cut the last batch in half, as a crash mid-write would.
    let seg = path.join("00000000000000000000.log");
    let one = batch(2, Codec::Snappy, None, 0).len() as u64;
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(full - one / 2).unwrap();
    drop(f);
    let (log, report) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    assert_eq!(report.recovered_batches, 4);
    assert_eq!(report.truncated_bytes, one - one / 2);
    assert_eq!(log.log_end_offset(), 8);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), full - one);
}

#[test]
fn recovers_from_garbage_and_a_bad_crc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    for _ in 0..3 {
        log.append(&batch(1, Codec::None, None, 0), 0).unwrap();
    }
    let good = log.size_bytes();
    drop(log);
    let seg = path.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    // Flip a byte inside the third batch's records: its CRC no longer matches.
    let one = batch(1, Codec::None, None, 0).len();
    bytes[2 * one + 70] ^= 0x55;
    bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    std::fs::write(&seg, &bytes).unwrap();
    let (mut log, report) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    assert_eq!(report.recovered_batches, 2);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.size_bytes(), good - one as u64);
    assert_eq!(log.append(&batch(1, Codec::None, None, 0), 0).unwrap().base_offset, 2);
}

#[test]
fn clean_reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let one = batch(3, Codec::Gzip, None, 50);
    let mut cfg = config();
    cfg.segment_bytes = one.len() as u64 * 4;
    cfg.index_interval_bytes = 1;
    let mut log = PartitionLog::create(&files(), &path, cfg, 0);
    for _ in 0..10 {
        log.append(&one, 0).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let (log, report) = PartitionLog::open(&files(), &path, cfg, true, 0).unwrap();
    assert_eq!(report.segments, 3);
    assert_eq!(report.recovered_batches, 0, "a clean open trusts the indexes");
    assert_eq!(log.log_end_offset(), 30);
    let read = log.read(13, 1 << 20, true).unwrap();
    assert_eq!(batch_offsets(&slice_bytes(read.slice.as_ref().unwrap()))[0], 12);
    assert_eq!(log.max_timestamp_lookup().run().unwrap().map(|r| r.1), Some(52));
}

#[test]
fn idempotent_producer_dedup_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = PartitionLog::create(&files(), &path, config(), 0);
    let b0 = batch(2, Codec::None, Some((42, 0, 0)), 0);
    let b1 = batch(2, Codec::None, Some((42, 0, 2)), 0);
    assert_eq!(log.append(&b0, 0).unwrap().base_offset, 0);
    assert_eq!(log.append(&b1, 0).unwrap().base_offset, 2);
    let dup = log.append(&b0, 0).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.base_offset, 0);
    assert_eq!(log.log_end_offset(), 4);
    let gap = batch(1, Codec::None, Some((42, 0, 9)), 0);
    assert!(matches!(log.append(&gap, 0), Err(StorageError::Sequence(_))));
    drop(log);
    // Unclean restart: producer state is rebuilt from the log itself.
    let (mut log, _) = PartitionLog::open(&files(), &path, config(), false, 0).unwrap();
    assert!(log.append(&b1, 0).unwrap().duplicate);
    log.close().unwrap();
    drop(log);
    // Clean restart: from the snapshot.
    let (mut log, _) = PartitionLog::open(&files(), &path, config(), true, 0).unwrap();
    assert!(log.append(&b1, 0).unwrap().duplicate);
    assert_eq!(log.append(&batch(1, Codec::None, Some((42, 0, 4)), 0), 0).unwrap().base_offset, 4);
}

#[test]
fn rejects_bad_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.max_message_bytes = 200;
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), cfg, 0);
    let big = batch(5, Codec::None, None, 0);
    assert!(matches!(log.append(&big, 0), Err(StorageError::MessageTooLarge { .. })));
    let mut bad = batch(1, Codec::None, None, 0);
    let n = bad.len();
    bad[n - 1] ^= 1;
    assert!(matches!(log.append(&bad, 0), Err(StorageError::Batch(_))));
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn stored_bytes_are_the_producer_bytes_with_offsets_assigned() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    log.append(&batch(2, Codec::None, None, 0), 0).unwrap();
    let sent = batch(3, Codec::Lz4, None, 7);
    log.append(&sent, 0).unwrap();
    let read = log.read(2, 1 << 20, true).unwrap();
    let stored = slice_bytes(read.slice.as_ref().unwrap());
    assert_eq!(&stored[0..8], &2i64.to_be_bytes());
    assert_eq!(&stored[8..12], &sent[8..12]);
    assert_eq!(&stored[12..16], &0i32.to_be_bytes());
    assert_eq!(&stored[16..], &sent[16..]);
}

#[test]
fn reads_span_many_large_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
    let one = batch(10, Codec::None, None, 0);
    for _ in 0..5 {
        log.append(&one, 0).unwrap();
    }
    let read = log.read(0, 1 << 20, true).unwrap();
    assert_eq!(batch_offsets(&slice_bytes(read.slice.as_ref().unwrap())), vec![0, 10, 20, 30, 40]);
    let read = log.read(25, 1 << 20, true).unwrap();
    assert_eq!(batch_offsets(&slice_bytes(read.slice.as_ref().unwrap())), vec![20, 30, 40]);
}

/// After a crash every segment past the recovery point is checked, not only the active one: a
/// sealed segment that was never fsynced and came back torn is cut where it tears, and the
/// segments after it go (their offsets would leave a gap). Segments below the recovery point are
/// trusted as written.
#[test]
fn segments_past_the_recovery_point_are_checked_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let one = batch(1, Codec::None, None, 0).len() as u64;
    let mut log = PartitionLog::create(&files(), &path, LogConfig { segment_bytes: 2 * one, ..config() }, 0);
    for _ in 0..4 {
        log.append(&batch(1, Codec::None, None, 0), 0).unwrap();
    }
    // Segments [0, 2) and [2, 4) exist; syncing makes 2 the recovery point... once the active
    // segment starts at 2 (it rolls at the next append).
    log.append(&batch(1, Codec::None, None, 0), 0).unwrap();
    assert_eq!(log.segment_count(), 3);
    for target in log.take_unsynced().unwrap() {
        target.sync().unwrap();
    }
    let (point_file, point) = log.recovery_point_after_sync().unwrap();
    assert_eq!(point, 4);
    super::log::write_recovery_point(&point_file, point).unwrap();
    log.recovery_point_written(point);
    assert!(log.recovery_point_after_sync().is_none(), "written once per segment");
    // Two more segments, never synced: [4, 6) sealed, [6, 7) active.
    for _ in 0..2 {
        log.append(&batch(1, Codec::None, None, 0), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 4);
    drop(log);
    // The sealed, unsynced segment lost its second batch's tail in the crash.
    let torn = path.join(super::segment::file_name(4, "log"));
    let f = std::fs::OpenOptions::new().write(true).open(&torn).unwrap();
    f.set_len(one + one / 2).unwrap();
    drop(f);
    let (log, report) = PartitionLog::open(&files(), &path, LogConfig { segment_bytes: 2 * one, ..config() }, false, 0).unwrap();
    assert_eq!(log.log_end_offset(), 5, "cut at the torn batch of segment 4");
    assert_eq!(log.segment_count(), 3, "the segment after the tear is gone");
    assert_eq!(report.truncated_bytes, (one - one / 2) + one);
    assert!(!path.join(super::segment::file_name(6, "log")).exists());
}

/// A failed fsync is never forgotten: its waiters fail, and so does every later append and
/// flush, even though a later fsync would succeed (the failed pages may be gone).
#[test]
fn a_failed_fsync_is_never_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::LocalSet::new().block_on(&runtime, async {
        let log = PartitionLog::create(&files(), &dir.path().join("t-0"), config(), 0);
        let partition = super::Partition::new(log, std::sync::Arc::new(tokio::sync::watch::channel(0).0), 1);
        let (_, durable) = partition.append(&batch(1, Codec::None, None, 0), 0).unwrap();
        durable.unwrap().await.unwrap().expect("the first fsync succeeds");
        partition.fail_next_sync.set(true);
        let (_, durable) = partition.append(&batch(1, Codec::None, None, 0), 0).unwrap();
        assert!(durable.unwrap().await.unwrap().is_err(), "the injected failure reaches the waiter");
        assert!(matches!(partition.append(&batch(1, Codec::None, None, 0), 0), Err(StorageError::Io(_))), "no more writes");
        assert!(partition.flush_to(2).await.unwrap().is_err(), "nothing more is reported durable");
        assert!(partition.log.borrow_mut().close().is_err(), "nor a clean shutdown");
    });
}

#[test]
fn partitions_share_a_bounded_set_of_open_files_and_write_indexes_when_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let files = OpenFiles::new(4);
    let cfg = LogConfig { index_interval_bytes: 1, ..config() };
    let one = batch(1, Codec::None, None, 0).len() as u64;
    let mut logs: Vec<PartitionLog> = (0..50)
        .map(|p| PartitionLog::create(&files, &dir.path().join(format!("t-{p}")), LogConfig { segment_bytes: 3 * one, ..cfg }, 0))
        .collect();
    assert!(!dir.path().join("t-0").exists(), "a partition touches the disk at its first append");
    for round in 0..4 {
        for log in &mut logs {
            log.append(&batch(1, Codec::None, None, 0), 0).unwrap();
            assert_eq!(log.read(round, 1 << 20, true).unwrap().slice.map(|s| batch_offsets(&slice_bytes(&s))), Some(vec![round]));
        }
        assert!(files.len() <= 4, "{} files open", files.len());
    }
    // Each log rolled once: the sealed segment's indexes are on disk, the active one's are not.
    let first = dir.path().join("t-0");
    assert!(first.join("00000000000000000000.index").exists() && first.join("00000000000000000000.timeindex").exists());
    assert!(!first.join("00000000000000000003.index").exists());
    // A clean shutdown writes them; a clean start trusts them and reads the same.
    logs[0].close().unwrap();
    assert!(first.join("00000000000000000003.index").exists());
    drop(logs);
    assert_eq!(files.len(), 0, "dropping the logs closes their files");
    let (log, report) = PartitionLog::open(&files, &first, LogConfig { segment_bytes: 3 * one, ..cfg }, true, 0).unwrap();
    assert_eq!((report.segments, report.recovered_batches, log.log_end_offset()), (2, 0, 4));
    assert_eq!(log.read(1, 1 << 20, true).unwrap().slice.map(|s| batch_offsets(&slice_bytes(&s))), Some(vec![1, 2]));
}

#[test]
fn deleting_records_moves_the_start_into_a_segment_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let one = batch(3, Codec::None, None, 1000);
    let cfg = LogConfig { segment_bytes: 2 * one.len() as u64, ..config() };
    let mut log = PartitionLog::create(&files(), &path, cfg, 0);
    for i in 0..6 {
        log.append(&batch(3, Codec::None, None, 1000 + i), 0).unwrap();
    }
    // Segments of two batches each: bases 0, 6 and 12; offsets 0..18.
    assert_eq!(log.segment_count(), 3);
    assert!(matches!(log.delete_records_before(19), Err(StorageError::OffsetOutOfRange { requested: 19, .. })));
    assert!(matches!(log.delete_records_before(-2), Err(StorageError::OffsetOutOfRange { .. })));

    assert_eq!(log.delete_records_before(8).unwrap(), 8);
    assert_eq!(log.log_start_offset(), 8);
    // The segment wholly below the start is gone; the one holding it stays.
    assert_eq!(log.segment_count(), 2);
    assert!(matches!(log.read(7, 1 << 20, true), Err(StorageError::OffsetOutOfRange { requested: 7, start: 8, end: 18 })));
    // A read at the start gets the whole batch holding it, as Kafka sends it.
    let read = log.read(8, 1 << 20, true).unwrap();
    assert_eq!(batch_offsets(&slice_bytes(&read.slice.unwrap())), vec![6, 9]);
    assert_eq!(read.log_start_offset, 8);
    // An earlier offset changes nothing.
    assert_eq!(log.delete_records_before(3).unwrap(), 8);
    // A timestamp lookup finds no record below the start (offset 6 has timestamp 1002).
    assert_eq!(log.timestamp_lookup(0).run().unwrap().map(|(offset, _)| offset), Some(8));

    // Written at once: a reopen after a crash (no clean close) and after a clean one keep it.
    drop(log);
    let (log, _) = PartitionLog::open(&files(), &path, cfg, false, 0).unwrap();
    assert_eq!(log.log_start_offset(), 8);
    drop(log);
    let (mut log, _) = PartitionLog::open(&files(), &path, cfg, true, 0).unwrap();
    assert_eq!(log.log_start_offset(), 8);

    // Up to the log end: nothing is left to read, and appends go on from the end.
    assert_eq!(log.delete_records_before(18).unwrap(), 18);
    assert_eq!(log.log_start_offset(), 18);
    assert!(log.read(18, 1 << 20, true).unwrap().slice.is_none());
    assert_eq!(log.append(&one, 0).unwrap().base_offset, 18);
    let unsynced = log.take_unsynced().unwrap();
    let start_file = |t: &super::SyncTarget| matches!(t, super::SyncTarget::Path(p) if p.ends_with("log-start-offset"));
    assert!(unsynced.iter().any(start_file), "the next flush fsyncs the start's file");
}
