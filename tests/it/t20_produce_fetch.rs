//! Produce and fetch through the server: ordering, idempotence, long polling, fetch limits, and
//! the sendfile and pread paths.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{FetchRequest, InitProducerIdRequest, MetadataRequest, ProduceRequest};
use kafka_protocol::records::Compression;

use crate::harness::TestServer;
use crate::requests::{batch, batch_offsets, create_topic, fetch, name, produce};

fn fetch_records(client: &mut crate::harness::Client, topic: &str, partition: i32, offset: i64, max_bytes: i32) -> (i16, i64, Bytes) {
    let r = client.call(11, &fetch(topic, partition, offset, max_bytes, 0));
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.high_watermark, p.records.clone().unwrap_or_default())
}

#[test]
fn every_codec_round_trips_with_offsets_assigned() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "codecs", 1);
    let codecs = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
    for (i, codec) in codecs.into_iter().enumerate() {
        let r = c.call(9, &produce("codecs", 0, batch(10, 100, codec, None), -1));
        let p = &r.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, i as i64 * 10));
    }
    let (err, hw, records) = fetch_records(&mut c, "codecs", 0, 0, 1 << 20);
    assert_eq!((err, hw), (0, 50));
    assert_eq!(batch_offsets(&records), vec![0, 10, 20, 30, 40]);
    let decoded = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut records.clone()).unwrap();
    let values: usize = decoded.iter().map(|set| set.records.len()).sum();
    assert_eq!(values, 50);
    assert_eq!(decoded[4].records[9].offset, 49);
}

#[test]
fn pipelined_produces_are_appended_and_answered_in_order() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "pipeline", 4);
    // 200 requests without reading any response; partitions land on both shards.
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(c.send(9, &produce("pipeline", i % 4, batch(5, 20, Compression::None, None), 1)));
    }
    let mut next = [0i64; 4];
    for (i, id) in ids.into_iter().enumerate() {
        let (got, r) = c.recv::<ProduceRequest>(9);
        assert_eq!(got, id, "responses come back in request order");
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0);
        let part = i % 4;
        assert_eq!(p.base_offset, next[part], "appends happen in request order");
        next[part] += 5;
    }
}

#[test]
fn a_waiting_fetch_holds_back_later_responses_on_its_connection() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "waiting", 1);
    let fetch_id = c.send(11, &fetch("waiting", 0, 0, 1 << 20, 300));
    let meta_id = c.send(1, &MetadataRequest::default().with_topics(None));
    let (first, _) = c.recv::<FetchRequest>(11);
    assert_eq!(first, fetch_id);
    let (second, _) = c.recv::<MetadataRequest>(1);
    assert_eq!(second, meta_id);
}

#[test]
fn a_long_poll_wakes_when_records_arrive() {
    let server = TestServer::start();
    let mut setup = server.client();
    create_topic(&mut setup, "poll", 1);
    let addr = server.addr;
    let waiter = std::thread::spawn(move || {
        let mut c = crate::harness::Client::connect(addr);
        // Waits up to the server's cap; the read timeout (30 s) is the test's upper bound.
        c.call(11, &fetch("poll", 0, 0, 1 << 20, 60_000))
    });
    std::thread::sleep(Duration::from_millis(200));
    let r = setup.call(9, &produce("poll", 0, batch(3, 10, Compression::None, None), 1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let response = waiter.join().unwrap();
    let p = &response.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 3);
    assert_eq!(batch_offsets(p.records.as_ref().unwrap()), vec![0]);
}

#[test]
fn the_first_batch_is_whole_even_above_max_bytes() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "big", 1);
    let big = batch(10, 1000, Compression::None, None);
    for expected in [0, 10] {
        let r = c.call(9, &produce("big", 0, big.clone(), 1));
        let p = &r.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, expected), "{:?}", p.error_message);
    }
    let (_, _, records) = fetch_records(&mut c, "big", 0, 0, 100);
    assert_eq!(records.len(), big.len(), "exactly the first batch (KIP-74)");
    let (_, _, records) = fetch_records(&mut c, "big", 0, 0, 1 << 20);
    assert_eq!(records.len(), 2 * big.len());
}

#[test]
fn idempotent_retries_are_acknowledged_once_and_gaps_refused() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "idem", 1);
    let pid = c.call(4, &InitProducerIdRequest::default().with_transaction_timeout_ms(1000)).producer_id.0;
    let first = batch(5, 10, Compression::Lz4, Some((pid, 0, 0)));
    let r = c.call(9, &produce("idem", 0, first.clone(), -1));
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 0);
    let r = c.call(9, &produce("idem", 0, batch(5, 10, Compression::Lz4, Some((pid, 0, 5))), -1));
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 5);
    // A retry of the first batch: same offset, nothing written.
    let r = c.call(9, &produce("idem", 0, first, -1));
    let p = &r.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    let (_, hw, _) = fetch_records(&mut c, "idem", 0, 0, 1 << 20);
    assert_eq!(hw, 10);
    // A gap in sequence numbers.
    let r = c.call(9, &produce("idem", 0, batch(1, 10, Compression::None, Some((pid, 0, 42))), -1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    // Another producer id is independent.
    let other = c.call(4, &InitProducerIdRequest::default().with_transaction_timeout_ms(1000)).producer_id.0;
    assert_ne!(other, pid);
}

#[test]
fn produce_and_fetch_errors_are_per_partition_codes() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "errors", 1);
    let code = |r: kafka_protocol::messages::ProduceResponse| r.responses[0].partition_responses[0].error_code;
    let mut corrupt = batch(2, 10, Compression::None, None).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert_eq!(code(c.call(9, &produce("errors", 0, Bytes::from(corrupt), 1))), 2, "CORRUPT_MESSAGE");
    assert_eq!(code(c.call(9, &produce("nope", 0, batch(1, 1, Compression::None, None), 1))), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(code(c.call(9, &produce("errors", 7, batch(1, 1, Compression::None, None), 1))), 3, "no such partition");
    assert_eq!(code(c.call(9, &produce("errors", 0, batch(1, 1, Compression::None, None), 2))), 21, "INVALID_REQUIRED_ACKS");
    assert_eq!(code(c.call(6, &produce("errors", 0, batch(1, 1, Compression::Zstd, None), 1))), 76, "zstd before v7");
    let mut two = batch(1, 1, Compression::None, None).to_vec();
    two.extend_from_slice(&two.clone());
    assert_eq!(code(c.call(9, &produce("errors", 0, Bytes::from(two), 1))), 87, "two batches: INVALID_RECORD");
    assert_eq!(code(c.call(9, &produce("errors", 0, Bytes::new(), 1))), 87, "no batch");
    let (err, _, _) = fetch_records(&mut c, "errors", 0, 5, 1000);
    assert_eq!(err, 1, "OFFSET_OUT_OF_RANGE");
    let (err, _, _) = fetch_records(&mut c, "missing", 0, 0, 1000);
    assert_eq!(err, 3);
}

#[test]
fn acks_zero_gets_no_response_but_is_stored() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "fire", 1);
    for _ in 0..3 {
        c.send(9, &produce("fire", 0, batch(2, 5, Compression::None, None), 0));
    }
    // The next response on the connection is the fetch's: acks=0 produced nothing.
    let id = c.send(11, &fetch("fire", 0, 0, 1 << 20, 0));
    let (got, r) = c.recv::<FetchRequest>(11);
    assert_eq!(got, id);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 6);
    // A failed acks=0 produce closes the connection: the only way to tell the producer.
    c.send(9, &produce("no-such-topic", 0, batch(1, 5, Compression::None, None), 0));
    assert!(c.is_closed());
}

/// The sendfile path and the pread path put identical bytes on the wire.
#[test]
fn sendfile_and_pread_send_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let request = |topic: &str, max: i32| fetch(topic, 0, 0, max, 0);
    let mut frames = Vec::new();
    for mode in [corral::config::FetchSend::Sendfile, corral::config::FetchSend::Pread] {
        let server = TestServer::start_in(dir.path(), |c| c.kafka.fetch_send = mode);
        if mode == corral::config::FetchSend::Sendfile {
            let mut c = server.client();
            create_topic(&mut c, "same", 1);
            for i in 0..50 {
                let codec = if i % 2 == 0 { Compression::Snappy } else { Compression::None };
                c.call(9, &produce("same", 0, batch(20, 300, codec, None), 1));
            }
        }
        // A fresh connection in both runs, so correlation ids match too.
        let mut c = server.client();
        let mut these = Vec::new();
        for max in [100, 5000, 1 << 20] {
            c.send(11, &request("same", max));
            these.push(c.read_frame().unwrap());
        }
        frames.push(these);
        server.stop();
    }
    assert_eq!(frames[0], frames[1]);
    assert!(frames[0][2].len() > 100_000);
}

/// A partition listed many times in one request costs one read: Fetch answers it once, and
/// ListOffsets answers every listing of it with INVALID_REQUEST (as Kafka) and the others as usual.
#[test]
fn a_partition_listed_twice_is_answered_once_or_refused() {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::ListOffsetsRequest;
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "twice", 2);
    let r = c.call(9, &produce("twice", 0, batch(3, 20, Compression::None, None), 1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);

    let mut request = fetch("twice", 0, 0, 1 << 20, 0);
    let again = request.topics[0].partitions[0].clone();
    request.topics[0].partitions.extend(std::iter::repeat_n(again, 1000));
    let r = c.call(11, &request);
    let answered: usize = r.responses.iter().map(|t| t.partitions.len()).sum();
    assert_eq!(answered, 1, "1,001 listings of one partition answered once");
    assert_eq!(r.responses[0].partitions[0].high_watermark, 3);

    let part = |p: i32| ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1);
    let topic = ListOffsetsTopic::default().with_name(name("twice")).with_partitions(vec![part(0), part(1), part(0)]);
    let r = c.call(7, &ListOffsetsRequest::default().with_replica_id(kafka_protocol::messages::BrokerId(-1)).with_topics(vec![topic]));
    let got: Vec<(i32, i16, i64)> = r.topics[0].partitions.iter().map(|p| (p.partition_index, p.error_code, p.offset)).collect();
    assert_eq!(got, vec![(0, 42, -1), (1, 0, 0), (0, 42, -1)]);
}
