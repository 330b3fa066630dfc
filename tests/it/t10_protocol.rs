//! Framing, version negotiation, every API at every served version, and hostile input.

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use crate::harness::{Client, TestServer};
use crate::requests::{batch, create_topic, fetch, name, produce};

#[test]
fn api_versions_lists_every_api_with_the_client_quirks() {
    let server = TestServer::start();
    let mut client = server.client();
    for version in 0..=4 {
        let mut request = ApiVersionsRequest::default();
        if version >= 3 {
            request = request
                .with_client_software_name(StrBytes::from_static_str("corral-it"))
                .with_client_software_version(StrBytes::from_static_str("1.0"));
        }
        let response = client.call(version, &request);
        assert_eq!(response.error_code, 0);
        let range = |key: ApiKey| {
            let k = response.api_keys.iter().find(|k| k.api_key == key as i16).unwrap_or_else(|| panic!("{key:?} listed"));
            (k.min_version, k.max_version)
        };
        assert_eq!(range(ApiKey::Produce), (0, 13), "Produce is advertised from v0");
        assert_eq!(range(ApiKey::Fetch), (4, 18));
        assert_eq!(range(ApiKey::Metadata), (0, 13));
        assert_eq!(range(ApiKey::ListOffsets), (0, 10), "ListOffsets v0 is served for sarama-based tools");
        assert_eq!(range(ApiKey::OffsetCommit), (0, 9), "OffsetCommit v0 and v1 are served for clients from before Kafka 4");
        assert_eq!(range(ApiKey::OffsetFetch), (0, 9));
        assert_eq!(range(ApiKey::ApiVersions), (0, 4));
    }
}

#[test]
fn api_versions_too_new_gets_a_v0_answer_with_unsupported_version() {
    let server = TestServer::start();
    let mut client = server.client();
    // ApiVersions v99: header v2 (client id + empty tagged fields), empty body.
    let mut frame = BytesMut::new();
    frame.put_i16(18);
    frame.put_i16(99);
    frame.put_i32(7);
    frame.put_i16(-1);
    frame.put_u8(0);
    let mut sized = BytesMut::new();
    sized.put_i32(frame.len() as i32);
    sized.extend_from_slice(&frame);
    client.write_raw(&sized);
    let mut response = client.read_frame().unwrap();
    assert_eq!(response.get_i32(), 7, "correlation id, header v0");
    assert_eq!(response.get_i16(), 35, "UNSUPPORTED_VERSION");
    let count = response.get_i32();
    assert!(count >= 10, "the full list follows, v0 layout");
    let mut keys = Vec::new();
    for _ in 0..count {
        keys.push((response.get_i16(), response.get_i16(), response.get_i16()));
    }
    assert!(keys.contains(&(18, 0, 4)));
    assert!(!response.has_remaining());
    // The connection stays usable.
    assert_eq!(client.call(2, &ApiVersionsRequest::default()).error_code, 0);
    // v3+ clients must name themselves validly (KIP-511), as Kafka checks.
    assert_eq!(client.call(3, &ApiVersionsRequest::default()).error_code, 42, "INVALID_REQUEST");
}

/// Every API at every version it is served in gets a response that decodes at that version.
#[test]
fn every_api_answers_at_every_served_version() {
    let server = TestServer::start();
    let mut client = server.client();
    create_topic(&mut client, "versions", 2);
    let topic_id = client
        .call(12, &MetadataRequest::default().with_topics(None))
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| &*n.0 == "versions"))
        .unwrap()
        .topic_id;

    for v in 0..=13 {
        let topics = if v >= 1 { Some(vec![MetadataRequestTopic::default().with_name(Some(name("versions")))]) } else { Some(vec![]) };
        let r = client.call(v, &MetadataRequest::default().with_topics(topics));
        let t = r.topics.iter().find(|t| t.name.as_ref().map(|n| &*n.0) == Some("versions")).unwrap();
        assert_eq!((t.error_code, t.partitions.len()), (0, 2), "metadata v{v}");
    }
    for v in 3..=13 {
        let mut request = produce("versions", 0, batch(2, 10, Compression::None, None), 1);
        if v >= 13 {
            request.topic_data[0].topic_id = topic_id;
            request.topic_data[0].name = Default::default();
        }
        let r = client.call(v, &request);
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "produce v{v}");
    }
    for v in 4..=18 {
        let mut request = fetch("versions", 0, 0, 1 << 20, 0);
        if v >= 13 {
            request.topics[0].topic_id = topic_id;
            request.topics[0].topic = Default::default();
        }
        let r = client.call(v, &request);
        let p = &r.responses[0].partitions[0];
        assert_eq!((p.error_code, p.high_watermark), (0, 22), "fetch v{v}");
        assert!(!p.records.as_ref().unwrap().is_empty());
    }
    for v in 1..=10 {
        let r = client.call(
            v,
            &ListOffsetsRequest::default().with_replica_id(kafka_protocol::messages::BrokerId(-1)).with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(name("versions"))
                    .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)]),
            ]),
        );
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.error_code, p.offset), (0, 22), "list offsets v{v}");
    }
    for v in 2..=7 {
        let topic = format!("created-v{v}");
        let r = client.call(
            v,
            &CreateTopicsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![CreatableTopic::default().with_name(name(&topic)).with_num_partitions(1).with_replication_factor(1)]),
        );
        assert_eq!(r.topics[0].error_code, 0, "create topics v{v}");
    }
    for v in 0..=3 {
        let topic = format!("created-v{}", v + 2);
        let r = client.call(
            v,
            &CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default().with_name(name(&topic)).with_count(2)]),
        );
        assert_eq!(r.results[0].error_code, 0, "create partitions v{v}");
    }
    for v in 1..=6 {
        let topic = format!("created-v{}", v + 1);
        let mut request = DeleteTopicsRequest::default().with_timeout_ms(1000);
        if v >= 6 {
            request = request.with_topics(vec![DeleteTopicState::default().with_name(Some(name(&topic)))]);
        } else {
            request = request.with_topic_names(vec![name(&topic)]);
        }
        let r = client.call(v, &request);
        assert_eq!(r.responses[0].error_code, 0, "delete topics v{v}");
    }
    for v in 0..=5 {
        let r = client.call(v, &InitProducerIdRequest::default().with_transaction_timeout_ms(1000));
        assert_eq!(r.error_code, 0, "init producer id v{v}");
        assert!(r.producer_id.0 >= 0);
    }
    for v in 0..=2 {
        let r = client.call(v, &DescribeClusterRequest::default());
        assert_eq!((r.error_code, r.brokers.len()), (0, 1), "describe cluster v{v}");
    }
    for v in 1..=4 {
        let r = client.call(
            v,
            &DescribeConfigsRequest::default().with_include_synonyms(true).with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("versions"))]),
        );
        assert_eq!(r.results[0].error_code, 0, "describe configs v{v}");
        assert!(r.results[0].configs.iter().any(|c| &*c.name == "retention.ms"));
    }
}

/// ListOffsets v0 (dropped by Kafka 4 and by the codec, still sent by sarama-based tools such as
/// Burrow 1.2): latest and earliest as one-element `old_style_offsets`, an empty list when the
/// client asks for no offsets, and a per-partition error for an unknown topic.
#[test]
fn list_offsets_v0_answers_with_old_style_offsets() {
    let server = TestServer::start();
    let mut client = server.client();
    create_topic(&mut client, "legacy", 2);
    // Five records with timestamps 1_700_000_000_000 + 0..5.
    let r = client.call(3, &produce("legacy", 0, batch(5, 10, Compression::None, None), 1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);

    // replica_id -1; topics [name, partitions [partition, timestamp, max_num_offsets]].
    type Query<'a> = (&'a str, &'a [(i32, i64, i32)]);
    let queries: &[Query<'_>] = &[
        (
            "legacy",
            &[(0, -1, 1), (0, -2, 1), (1, -1, 1), (0, -1, 0), (0, 1_700_000_000_003, 1), (0, 1_700_000_000_100, 1), (0, -3, 1), (7, -1, 1)],
        ),
        ("no-such-topic", &[(0, -1, 1)]),
    ];
    let mut frame = BytesMut::new();
    frame.put_i16(ApiKey::ListOffsets as i16);
    frame.put_i16(0);
    frame.put_i32(42);
    frame.put_i16(-1);
    frame.put_i32(-1);
    frame.put_i32(queries.len() as i32);
    for (topic, parts) in queries {
        frame.put_i16(topic.len() as i16);
        frame.put_slice(topic.as_bytes());
        frame.put_i32(parts.len() as i32);
        for &(partition, timestamp, max) in *parts {
            frame.put_i32(partition);
            frame.put_i64(timestamp);
            frame.put_i32(max);
        }
    }
    client.write_raw(&sized(&frame));

    let mut r = client.read_frame().unwrap();
    assert_eq!(r.get_i32(), 42, "correlation id, header v0");
    let mut got = Vec::new();
    for _ in 0..r.get_i32() {
        let len = r.get_i16() as usize;
        let name = r.split_to(len);
        for _ in 0..r.get_i32() {
            let (partition, error_code) = (r.get_i32(), r.get_i16());
            let offsets: Vec<i64> = (0..r.get_i32()).map(|_| r.get_i64()).collect();
            got.push((String::from_utf8(name.to_vec()).unwrap(), partition, error_code, offsets));
        }
    }
    assert!(!r.has_remaining(), "{} bytes after the body", r.remaining());
    let want = |t: &str, p, e, o: &[i64]| (t.to_string(), p, e, o.to_vec());
    assert_eq!(
        got,
        vec![
            want("legacy", 0, 0, &[5]),
            want("legacy", 0, 0, &[0]),
            want("legacy", 1, 0, &[0]),
            want("legacy", 0, 0, &[]),
            want("legacy", 0, 0, &[3]),
            want("legacy", 0, 0, &[5]),
            want("legacy", 0, 0, &[]),
            want("legacy", 7, 3, &[]),
            want("no-such-topic", 0, 3, &[]),
        ]
    );
    // The connection goes on with current versions.
    assert_eq!(client.call(2, &ApiVersionsRequest::default()).error_code, 0);
}

fn sized(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// After each bad frame the offending connection is closed, while a connection opened before
/// it and one opened after it are served normally.
#[test]
fn bad_frames_close_only_their_connection() {
    let server = TestServer::start();
    let mut bystander = server.client();
    create_topic(&mut bystander, "hostile", 1);
    let mut metadata_v0_huge_array = vec![0u8, 3, 0, 0, 0, 0, 0, 9, 0xff, 0xff];
    metadata_v0_huge_array.extend_from_slice(&[0x7f, 0xff, 0xff, 0xf0, 0, 1, b'x']);
    let mut metadata_v12_huge_compact = vec![0u8, 3, 0, 12, 0, 0, 0, 9, 0xff, 0xff, 0];
    metadata_v12_huge_compact.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("size prefix above the maximum", 0x7fff_ffffu32.to_be_bytes().to_vec()),
        ("negative size prefix", (-5i32).to_be_bytes().to_vec()),
        ("frame shorter than a header", sized(&[0, 3])),
        ("unknown API key", sized(&[0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff])),
        ("unsupported Metadata version", sized(&[0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff])),
        ("Produce v2 (advertised, not served)", sized(&[0, 0, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 0, 1])),
        ("API corral does not serve (ElectLeaders)", sized(&[0, 43, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 0, 0])),
        ("JoinGroup with a body cut short", sized(&[0, 11, 0, 5, 0, 0, 0, 1, 0xff, 0xff, 0, 1, b'g'])),
        ("Metadata v0 claiming 2^31 topics", sized(&metadata_v0_huge_array)),
        ("Metadata v12 claiming 2^32 topics", sized(&metadata_v12_huge_compact)),
        (
            "ListOffsets v0 with a body cut short",
            sized(&[0, 2, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 1, b'x']),
        ),
        (
            "ListOffsets v0 claiming 2^31 topics",
            sized(&[0, 2, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]),
        ),
        // OffsetCommit v1: group "g", generation 0, member "", then the topic count.
        (
            "OffsetCommit v1 claiming 2^31 topics",
            sized(&[0, 8, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 1, b'g', 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]),
        ),
        ("OffsetCommit v0 with a body cut short", sized(&[0, 8, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 1, b'g', 0, 0, 0, 1, 0, 1, b't', 0, 0])),
        ("garbage body", sized(&[0, 19, 0, 7, 0, 0, 0, 1, 0xff, 0xff, 0, 0xde, 0xad, 0xbe, 0xef])),
    ];
    for (what, bytes) in cases {
        let mut bad = server.client();
        bad.write_raw(&bytes);
        assert!(bad.is_closed(), "{what}: the connection is closed");
        // The bystander (opened earlier) and a new connection still work.
        let r = bystander.call(1, &MetadataRequest::default().with_topics(None));
        assert!(r.topics.iter().any(|t| t.name.as_ref().is_some_and(|n| &*n.0 == "hostile")), "{what}: bystander served");
        let mut fresh = server.client();
        let r = fresh.call(3, &produce("hostile", 0, batch(1, 5, Compression::None, None), 1));
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "{what}: new connection served");
    }
}

#[test]
fn truncated_frame_then_close_leaves_the_server_serving() {
    let server = TestServer::start();
    let mut c = server.client();
    c.write_raw(&[0, 0, 0, 100, 0, 3, 0, 1]);
    drop(c);
    let mut c = Client::connect(server.addr);
    assert_eq!(c.call(2, &ApiVersionsRequest::default()).error_code, 0);
}
