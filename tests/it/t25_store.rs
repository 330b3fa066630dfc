//! The partition store's conformance suite: what every implementation of
//! `corral::store::PartitionStore` must do, checked through the trait alone. Appends get
//! consecutive offsets and read back as the producer sent them; fetches start at the batch holding the
//! offset, long-poll, keep `max_bytes` as Kafka does (KIP-74); offsets are looked up by bound and
//! by timestamp; idempotent retries are not stored twice; bad batches and unknown partitions get
//! Kafka's errors.
//!
//! Each case runs against the local store of a node started in-process (on one of its shards,
//! through the mesh), on a topic of two partitions. With `CORRAL_STORE_UPSTREAM` set to a Kafka
//! cluster's bootstrap (tests/e2e/test_store_conformance.py does), the node is configured with
//! `storage.backend = "upstream"` in front of it and every case runs against the upstream store,
//! each on a topic of its own.
//!
//! An upstream store passes on what its upstream answers. Where an upstream other than Kafka
//! answers differently from Kafka (`CORRAL_STORE_UPSTREAM_KIND=tansu`: Tansu 0.6), the case
//! expects that upstream's own answer, named by [`Deviation`], so the suite still checks that
//! corral passes it on unchanged; against Kafka and local segments every case expects Kafka's.

use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corral::chunk::Chunk;
use corral::config::StorageBackend;
use corral::runtime::Shard;
use corral::store::{
    Append, AppendPlan, Deletion, FetchPlan, OffsetQuery, OffsetSpec, PartitionData, PartitionFetch, PartitionRef, PartitionStore,
    DELETE_TO_HIGH_WATERMARK,
};
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use crate::harness::TestServer;
use crate::requests::create_topic;

/// Timestamp of the first record of the first batch; each batch is a second later.
const T0: i64 = 1_700_000_000_000;

/// The upstream the cases run against instead of local segments, if any.
fn upstream() -> Option<Vec<String>> {
    let bootstrap = std::env::var("CORRAL_STORE_UPSTREAM").ok().filter(|b| !b.is_empty())?;
    Some(bootstrap.split(',').map(str::to_string).collect())
}

/// An answer of Tansu 0.6 that is not Kafka's (each confirmed by sending the same request to
/// Tansu directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deviation {
    /// A batch whose CRC does not match is stored (Kafka: CORRUPT_MESSAGE).
    StoresCorruptBatches,
    /// A fetch past the log end answers no records, one before its start reads from the start;
    /// neither is refused (Kafka: OFFSET_OUT_OF_RANGE).
    FetchOutsideTheLogIsServed,
    /// A partition's own max_bytes is applied loosely if at all: at least the batches Kafka gives
    /// (it cuts after the last batch that fits), at most all of them, not the same from run to run.
    IgnoresPartitionMaxBytes,
    /// ListOffsets for the earliest or latest offset gives the wall-clock time (Kafka: -1).
    BoundsHaveATimestamp,
    /// An idempotent producer id it did not hand out itself is refused (Kafka: accepted).
    RefusesUnknownProducerIds,
    /// ListOffsets for the latest offset gives one past the last batch's base offset, not the log
    /// end (its Fetch reports the log end as the high watermark).
    LatestEndsAtTheLastBatchStart,
    /// ListOffsets by timestamp answers offset 0 whatever the timestamp (Kafka: the first record
    /// at or after it, or none).
    NoTimestampLookups,
    /// DeleteRecords is advertised, but the memory storage does not implement it: the broker's
    /// task fails and the connection closes (Kafka: the log start moves).
    NoDeleteRecords,
    /// A Fetch with max_wait 0 may be answered before its partitions are read: with some of their
    /// batches, or with none of the partitions at all (Kafka: what the log holds now). The cases
    /// give such a store a wait; with min_bytes 1 a fetch of records does not wait for it.
    ZeroWaitFetchesAnswerEarly,
}

/// Tansu 0.6's deviations.
const TANSU: &[Deviation] = &[
    Deviation::StoresCorruptBatches,
    Deviation::FetchOutsideTheLogIsServed,
    Deviation::IgnoresPartitionMaxBytes,
    Deviation::BoundsHaveATimestamp,
    Deviation::RefusesUnknownProducerIds,
    Deviation::LatestEndsAtTheLastBatchStart,
    Deviation::NoTimestampLookups,
    Deviation::NoDeleteRecords,
    Deviation::ZeroWaitFetchesAnswerEarly,
];

/// Whether the upstream under test answers as `deviation` says.
fn deviates(deviation: Deviation) -> bool {
    let kind = std::env::var("CORRAL_STORE_UPSTREAM_KIND").unwrap_or_default();
    upstream().is_some() && kind == "tansu" && TANSU.contains(&deviation)
}

/// Runs `case` on a shard of a fresh node whose topic (of two partitions) is new.
fn run<F>(case: F)
where
    F: for<'a> FnOnce(&'a dyn PartitionStore, [PartitionRef; 2]) -> futures_util::future::LocalBoxFuture<'a, ()> + Send + 'static,
{
    let upstream = upstream();
    let server = match upstream.clone() {
        None => TestServer::start(),
        Some(bootstrap) => TestServer::start_with(|c| {
            c.storage.backend = StorageBackend::Upstream;
            c.upstream.bootstrap = bootstrap;
        }),
    };
    let node = server.node().clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !node.is_ready() {
        assert!(std::time::Instant::now() < deadline, "the node is not ready after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let topic_name = if upstream.is_some() { format!("conformance-{}", uuid::Uuid::new_v4().simple()) } else { "conformance".to_string() };
    create_topic(&mut server.client(), &topic_name, 2);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime
        .block_on(node.mesh.run_on(0, move |shard: Rc<Shard>| async move {
            let topic = shard.node.catalog.get(&topic_name).expect("topic exists");
            let partitions = [PartitionRef { topic: topic.clone(), index: 0 }, PartitionRef { topic, index: 1 }];
            case(shard.store(), partitions).await;
        }))
        .expect("the shard runs the case");
}

/// A batch of `n` records of 100 bytes, timestamps from `timestamp` on; `producer` = (id, epoch,
/// base sequence) for an idempotent producer.
fn batch(n: usize, timestamp: i64, producer: Option<(i64, i16, i32)>) -> Bytes {
    crate::requests::batch_at(n, 100, timestamp, Compression::None, producer)
}

/// Appends each batch to `partition`, one store call each; the base offsets (or codes).
async fn append(store: &dyn PartitionStore, partition: &PartitionRef, batches: &[Bytes]) -> Vec<Result<i64, ResponseError>> {
    let mut out = Vec::new();
    for b in batches {
        let appended = store.append(appending(vec![Append { partition: partition.clone(), batch: b.clone() }])).await;
        out.extend(appended.await.into_iter().map(|r| r.map(|a| a.base_offset).map_err(|e| e.code())));
    }
    out
}

fn read(partition: &PartitionRef, fetch_offset: i64, max_bytes: u64) -> PartitionFetch {
    PartitionFetch { partition: partition.clone(), fetch_offset, max_bytes, current_leader_epoch: -1 }
}

fn plan(partitions: Vec<PartitionFetch>, max_bytes: u64, max_wait: Duration) -> FetchPlan {
    let max_wait = match deviates(Deviation::ZeroWaitFetchesAnswerEarly) {
        true => max_wait.max(Duration::from_millis(500)),
        false => max_wait,
    };
    FetchPlan { partitions, max_bytes, min_bytes: 1, max_wait, isolation_level: 0 }
}

/// Appends as a Produce with acks=all sends them.
fn appending(batches: Vec<Append>) -> AppendPlan {
    AppendPlan { batches, acks: -1, timeout: Duration::from_secs(30), lane: 0 }
}

/// The record bytes of a fetched partition, wherever they are (piped ones are read out of their
/// pipes and kept in memory, so they can be looked at again).
/// The batches a fetch cut by a partition's max_bytes returned: `kafka`'s; from a store that
/// applies the limit loosely, at least those and a prefix of `all`.
fn assert_cut_by_partition_limit(offsets: &[i64], kafka: &[i64], all: &[i64]) {
    match deviates(Deviation::IgnoresPartitionMaxBytes) {
        true => assert!(offsets.len() >= kafka.len() && all.starts_with(offsets), "{offsets:?}"),
        false => assert_eq!(offsets, kafka),
    }
}

async fn bytes_of(data: &mut PartitionData) -> Vec<u8> {
    if let Some(Chunk::Pipe(_)) = &data.records {
        let Some(Chunk::Pipe(piped)) = data.records.take() else { unreachable!() };
        data.records = Some(Chunk::Bytes(piped.into_bytes().await.unwrap()));
    }
    match &data.records {
        None => Vec::new(),
        Some(Chunk::Bytes(b)) => b.to_vec(),
        Some(Chunk::File(slice)) => {
            let mut buf = vec![0; slice.len as usize];
            slice.file.read_exact_at(&mut buf, slice.position).unwrap();
            buf
        }
        Some(Chunk::Pipe(_)) => unreachable!("read out above"),
    }
}

fn concat(batches: &[Bytes]) -> Vec<u8> {
    batches.iter().flat_map(|b| b.iter().copied()).collect()
}

/// Batches with the two fields a store sets cleared: the base offset (bytes 0..8) and the
/// partition leader epoch (12..16); everything the CRC covers is the producer's.
fn without_assigned_fields(mut records: Vec<u8>) -> Vec<u8> {
    let mut at = 0;
    while at + 16 <= records.len() {
        let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize + 12;
        records[at..at + 8].fill(0);
        records[at + 12..at + 16].fill(0);
        at += len;
    }
    records
}

async fn same_batches(stored: &mut PartitionData, sent: &[Bytes]) -> bool {
    without_assigned_fields(bytes_of(stored).await) == without_assigned_fields(concat(sent))
}

async fn fetch_one(store: &dyn PartitionStore, partition: &PartitionRef, offset: i64) -> Result<PartitionData, ResponseError> {
    let mut results = store.fetch(plan(vec![read(partition, offset, 1 << 20)], 1 << 20, Duration::ZERO)).await;
    results.remove(0).map_err(|e| e.code())
}

async fn offset_of(store: &dyn PartitionStore, partition: &PartitionRef, spec: OffsetSpec) -> Result<Option<(i64, i64)>, ResponseError> {
    let query = OffsetQuery { partition: partition.clone(), spec, current_leader_epoch: -1, isolation_level: 0 };
    store.list_offsets(vec![query]).await.remove(0).map_err(|e| e.code())
}

async fn delete_before(store: &dyn PartitionStore, partition: &PartitionRef, offset: i64) -> Result<i64, ResponseError> {
    store.delete_records(vec![Deletion { partition: partition.clone(), offset }]).await.remove(0).map_err(|e| e.code())
}

/// Three batches of 5 records, at T0, T0 + 1 s and T0 + 2 s.
fn three_batches() -> [Bytes; 3] {
    [batch(5, T0, None), batch(5, T0 + 1000, None), batch(5, T0 + 2000, None)]
}

#[test]
fn appends_get_consecutive_offsets_and_read_back_as_sent() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            let batches = three_batches();
            assert_eq!(append(store, &p0, &batches).await, vec![Ok(0), Ok(5), Ok(10)]);
            let mut data = fetch_one(store, &p0, 0).await.unwrap();
            assert!(same_batches(&mut data, &batches).await, "the batches as the producer sent them");
            assert_eq!((data.high_watermark, data.log_start_offset), (15, 0));
            // The other partition is a log of its own.
            assert_eq!(append(store, &p1, &batches[..1]).await, vec![Ok(0)]);
        })
    });
}

/// Stored batches carry the offsets the store assigned, whatever base offset the producer sent.
#[test]
fn fetched_batches_carry_the_assigned_base_offsets() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            let batches = three_batches();
            append(store, &p0, &batches).await;
            let bytes = bytes_of(&mut fetch_one(store, &p0, 0).await.unwrap()).await;
            assert_eq!(crate::requests::batch_offsets(&bytes), vec![0, 5, 10]);
        })
    });
}

#[test]
fn a_fetch_starts_at_the_batch_holding_its_offset() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()).await;
            let bytes = bytes_of(&mut fetch_one(store, &p0, 7).await.unwrap()).await;
            assert_eq!(crate::requests::batch_offsets(&bytes), vec![5, 10]);
            let mut at_end = fetch_one(store, &p0, 15).await.unwrap();
            assert!(bytes_of(&mut at_end).await.is_empty(), "nothing at the log end");
        })
    });
}

#[test]
fn a_fetch_outside_the_log_is_out_of_range() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()).await;
            if deviates(Deviation::FetchOutsideTheLogIsServed) {
                let mut past = fetch_one(store, &p0, 16).await.unwrap();
                assert!(bytes_of(&mut past).await.is_empty() && past.high_watermark == 15, "{past:?}");
                let before = bytes_of(&mut fetch_one(store, &p0, -1).await.unwrap()).await;
                assert_eq!(crate::requests::batch_offsets(&before), vec![0, 5, 10]);
                return;
            }
            assert_eq!(fetch_one(store, &p0, 16).await.unwrap_err(), ResponseError::OffsetOutOfRange);
            assert_eq!(fetch_one(store, &p0, -1).await.unwrap_err(), ResponseError::OffsetOutOfRange);
        })
    });
}

/// DeleteRecords moves the log start into a batch: reads below it are out of range, the earliest
/// offset is the new start, and a read at the start gets the whole batch holding it.
#[test]
fn deleting_records_moves_the_log_start() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()).await;
            if deviates(Deviation::NoDeleteRecords) {
                assert!(delete_before(store, &p0, 7).await.is_err());
                return;
            }
            assert_eq!(delete_before(store, &p0, 7).await, Ok(7));
            assert_eq!(offset_of(store, &p0, OffsetSpec::Earliest).await, Ok(Some((7, -1))));
            assert_eq!(fetch_one(store, &p0, 6).await.unwrap_err(), ResponseError::OffsetOutOfRange);
            let mut data = fetch_one(store, &p0, 7).await.unwrap();
            assert_eq!(data.log_start_offset, 7);
            assert_eq!(crate::requests::batch_offsets(&bytes_of(&mut data).await), vec![5, 10]);
            // An earlier offset changes nothing; one past the high watermark is refused.
            assert_eq!(delete_before(store, &p0, 3).await, Ok(7));
            assert_eq!(delete_before(store, &p0, 16).await, Err(ResponseError::OffsetOutOfRange));
            // -1 is the high watermark; an empty partition's is 0.
            assert_eq!(delete_before(store, &p0, DELETE_TO_HIGH_WATERMARK).await, Ok(15));
            assert_eq!(delete_before(store, &p1, DELETE_TO_HIGH_WATERMARK).await, Ok(0));
            assert_eq!(append(store, &p0, &three_batches()[..1]).await, vec![Ok(15)]);
        })
    });
}

/// A fetch at the log end waits for the next append and answers with it. (No time is asserted:
/// without a wake-up the fetch would wait out its 30 s and the outer 20 s limit fails the case.)
#[test]
fn a_fetch_at_the_log_end_wakes_up_on_an_append() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()[..1]).await;
            let waiting = store.fetch(plan(vec![read(&p0, 5, 1 << 20)], 1 << 20, Duration::from_secs(30)));
            let later = batch(3, T0 + 5000, None);
            let append_later = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                append(store, &p0, std::slice::from_ref(&later)).await
            };
            let (fetched, appended) = tokio::time::timeout(Duration::from_secs(20), futures_util::future::join(waiting, append_later))
                .await
                .expect("the waiting fetch woke up on the append");
            assert_eq!(appended, vec![Ok(5)]);
            let mut data = fetched.into_iter().next().unwrap().unwrap();
            assert_eq!(crate::requests::batch_offsets(&bytes_of(&mut data).await), vec![5]);
        })
    });
}

#[test]
fn a_fetch_with_nothing_new_answers_empty_after_max_wait() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()).await;
            let results = store.fetch(plan(vec![read(&p0, 15, 1 << 20)], 1 << 20, Duration::from_millis(200))).await;
            let mut data = results.into_iter().next().unwrap().unwrap();
            assert!(bytes_of(&mut data).await.is_empty());
            assert_eq!(data.high_watermark, 15);
        })
    });
}

/// KIP-74: the first partition with data keeps its whole first batch even past `max_bytes`;
/// later partitions get only what the budget leaves (here nothing).
#[test]
fn max_bytes_keeps_the_first_batch_whole_and_cuts_the_rest() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            let batches = three_batches();
            append(store, &p0, &batches).await;
            append(store, &p1, &batches).await;
            let results = store.fetch(plan(vec![read(&p0, 0, 1 << 20), read(&p1, 0, 1 << 20)], 1, Duration::ZERO)).await;
            let [first, second]: [_; 2] = results.try_into().unwrap();
            assert!(same_batches(&mut first.unwrap(), &batches[..1]).await, "one whole batch");
            let mut second = second.unwrap();
            assert!(bytes_of(&mut second).await.is_empty());
            assert_eq!(second.high_watermark, 15, "a partition cut to nothing still reports its offsets");

            // Each partition's own limit applies too.
            let limit = (batches[0].len() + batches[1].len()) as u64;
            let mut results = store.fetch(plan(vec![read(&p0, 0, limit)], 1 << 20, Duration::ZERO)).await;
            let bytes = bytes_of(results[0].as_mut().unwrap()).await;
            assert_cut_by_partition_limit(&crate::requests::batch_offsets(&bytes), &[0, 5], &[0, 5, 10]);
        })
    });
}

/// Record sets of hundreds of kilobytes (which an upstream store moves through pipes rather
/// than memory) read back whole and in order, side by side in one fetch, and cut by a
/// partition's limit as small ones are.
#[test]
fn large_record_sets_read_back_whole_and_in_order() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            let large: Vec<Bytes> = (0..8).map(|i| crate::requests::batch_at(100, 1000, T0 + i * 1000, Compression::None, None)).collect();
            append(store, &p0, &large).await;
            append(store, &p1, &large[..3]).await;
            let both = vec![read(&p0, 0, 4 << 20), read(&p1, 0, 4 << 20)];
            let results = store.fetch(plan(both, 8 << 20, Duration::ZERO)).await;
            let [first, second]: [_; 2] = results.try_into().unwrap();
            assert!(same_batches(&mut first.unwrap(), &large).await, "eight batches of 100 KB");
            assert!(same_batches(&mut second.unwrap(), &large[..3]).await, "three batches of 100 KB");

            let limit = large[..3].iter().map(|b| b.len() as u64).sum::<u64>() + 500;
            let mut results = store.fetch(plan(vec![read(&p0, 0, limit)], 8 << 20, Duration::ZERO)).await;
            let bytes = bytes_of(results[0].as_mut().unwrap()).await;
            let all: Vec<i64> = (0..8).map(|i| i * 100).collect();
            assert_cut_by_partition_limit(&crate::requests::batch_offsets(&bytes), &[0, 100, 200], &all);
        })
    });
}

#[test]
fn offsets_are_found_by_bound_and_by_timestamp() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            append(store, &p0, &three_batches()).await;
            let bound = |found: Result<Option<(i64, i64)>, ResponseError>| match deviates(Deviation::BoundsHaveATimestamp) {
                true => found.map(|f| f.map(|(offset, _)| (offset, -1))),
                false => found,
            };
            // Three batches of 5 records: the last starts at 10.
            let end = if deviates(Deviation::LatestEndsAtTheLastBatchStart) { 11 } else { 15 };
            assert_eq!(bound(offset_of(store, &p0, OffsetSpec::Earliest).await), Ok(Some((0, -1))));
            assert_eq!(bound(offset_of(store, &p0, OffsetSpec::Latest).await), Ok(Some((end, -1))));
            assert_eq!(bound(offset_of(store, &p1, OffsetSpec::Latest).await), Ok(Some((0, -1))), "an empty partition ends at 0");
            if deviates(Deviation::NoTimestampLookups) {
                for timestamp in [T0 + 1000, T0 + 9000] {
                    assert_eq!(offset_of(store, &p0, OffsetSpec::AtOrAfter(timestamp)).await.unwrap().map(|f| f.0), Some(0));
                }
                return;
            }
            assert_eq!(offset_of(store, &p0, OffsetSpec::AtOrAfter(T0 + 1000)).await.unwrap().map(|f| f.0), Some(5));
            assert_eq!(offset_of(store, &p0, OffsetSpec::AtOrAfter(T0 + 1002)).await.unwrap(), Some((7, T0 + 1002)));
            assert_eq!(offset_of(store, &p0, OffsetSpec::AtOrAfter(T0 + 9000)).await, Ok(None));
            assert_eq!(bound(offset_of(store, &p0, OffsetSpec::AtOrAfterElseEnd(T0 + 9000)).await), Ok(Some((end, -1))));
            assert_eq!(offset_of(store, &p0, OffsetSpec::MaxTimestamp).await, Ok(Some((14, T0 + 2004))));
            // No record of an empty partition has a timestamp.
            assert_eq!(offset_of(store, &p1, OffsetSpec::AtOrAfter(T0)).await, Ok(None));
        })
    });
}

/// A producer's retry of a batch already stored is answered with the first append's offset and
/// not stored again; a gap in its sequence numbers is refused.
#[test]
fn an_idempotent_retry_is_stored_once() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            let first = batch(5, T0, Some((4000, 0, 0)));
            let second = batch(5, T0 + 1000, Some((4000, 0, 5)));
            if deviates(Deviation::RefusesUnknownProducerIds) {
                let refused = Err(ResponseError::UnknownProducerId);
                assert_eq!(append(store, &p0, &[first]).await, vec![refused]);
                return;
            }
            assert_eq!(append(store, &p0, &[first, second.clone(), second]).await, vec![Ok(0), Ok(5), Ok(5)]);
            assert_eq!(offset_of(store, &p0, OffsetSpec::Latest).await, Ok(Some((10, -1))));
            let gap = batch(5, T0 + 2000, Some((4000, 0, 20)));
            assert_eq!(append(store, &p0, &[gap]).await, vec![Err(ResponseError::OutOfOrderSequenceNumber)]);
        })
    });
}

#[test]
fn a_corrupt_batch_is_refused_and_nothing_is_stored() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            let mut corrupt = batch(5, T0, None).to_vec();
            let last = corrupt.len() - 1;
            corrupt[last] ^= 0xff;
            if deviates(Deviation::StoresCorruptBatches) {
                assert_eq!(append(store, &p0, &[Bytes::from(corrupt)]).await, vec![Ok(0)]);
                return;
            }
            assert_eq!(append(store, &p0, &[Bytes::from(corrupt)]).await, vec![Err(ResponseError::CorruptMessage)]);
            assert_eq!(offset_of(store, &p0, OffsetSpec::Latest).await, Ok(Some((0, -1))));
        })
    });
}

/// Appends in one call are answered in the order given, each partition's in order.
#[test]
fn one_call_appends_to_several_partitions_in_order() {
    run(|store, [p0, p1]| {
        Box::pin(async move {
            let b = three_batches();
            let appends = vec![
                Append { partition: p0.clone(), batch: b[0].clone() },
                Append { partition: p1.clone(), batch: b[1].clone() },
                Append { partition: p0.clone(), batch: b[2].clone() },
            ];
            let results: Vec<i64> = store.append(appending(appends)).await.await.into_iter().map(|r| r.unwrap().base_offset).collect();
            assert_eq!(results, vec![0, 0, 5]);
        })
    });
}

#[test]
fn a_partition_the_topic_lacks_is_unknown() {
    run(|store, [p0, _]| {
        Box::pin(async move {
            let missing = PartitionRef { topic: p0.topic.clone(), index: 7 };
            let unknown = ResponseError::UnknownTopicOrPartition;
            assert_eq!(append(store, &missing, &[batch(1, T0, None)]).await, vec![Err(unknown)]);
            assert_eq!(fetch_one(store, &missing, 0).await.unwrap_err(), unknown);
            assert_eq!(offset_of(store, &missing, OffsetSpec::Latest).await, Err(unknown));
        })
    });
}
