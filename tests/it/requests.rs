//! Request builders shared by the tests.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::harness::Client;

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One v2 record batch of `n` records; `producer` = (id, epoch, base sequence) for idempotence.
pub fn batch(n: usize, value_len: usize, compression: Compression, producer: Option<(i64, i16, i32)>) -> Bytes {
    batch_at(n, value_len, 1_700_000_000_000, compression, producer)
}

/// [`batch`], with record timestamps from `timestamp` on, one millisecond apart.
pub fn batch_at(n: usize, value_len: usize, timestamp: i64, compression: Compression, producer: Option<(i64, i16, i32)>) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id: producer.map_or(-1, |p| p.0),
            producer_epoch: producer.map_or(-1, |p| p.1),
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: producer.map_or(i as i32 - 1, |p| p.2 + i as i32),
            timestamp: timestamp + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![b'x'; value_len])),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
    buf.freeze()
}

pub fn produce(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
        .with_name(name(topic))
        .with_partition_data(vec![PartitionProduceData::default().with_index(partition).with_records(Some(records))])])
}

pub fn fetch(topic: &str, partition: i32, offset: i64, max_bytes: i32, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(max_bytes)])])
}

pub fn create_topic(client: &mut Client, topic: &str, partitions: i32) {
    let response = client.call(
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default().with_name(name(topic)).with_num_partitions(partitions).with_replication_factor(1)]),
    );
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0].error_message);
}

/// Base offsets of the complete batches in a fetch's record bytes.
pub fn batch_offsets(mut records: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while records.len() >= 12 {
        let base = i64::from_be_bytes(records[0..8].try_into().unwrap());
        let len = i32::from_be_bytes(records[8..12].try_into().unwrap()) as usize + 12;
        if len > records.len() {
            break;
        }
        out.push(base);
        records = &records[len..];
    }
    out
}
