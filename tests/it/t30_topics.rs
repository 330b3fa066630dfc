//! Topic administration through the protocol.

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest, MetadataRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use crate::harness::TestServer;
use crate::requests::{batch, create_topic, fetch, name, produce};

fn create(c: &mut crate::harness::Client, topic: CreatableTopic) -> (i16, Option<String>) {
    let r = c.call(7, &CreateTopicsRequest::default().with_timeout_ms(1000).with_topics(vec![topic]));
    (r.topics[0].error_code, r.topics[0].error_message.as_ref().map(|m| m.to_string()))
}

fn topic(n: &str, partitions: i32, rf: i16) -> CreatableTopic {
    CreatableTopic::default().with_name(name(n)).with_num_partitions(partitions).with_replication_factor(rf)
}

#[test]
fn create_topics_validates_like_kafka() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(create(&mut c, topic("ok", 3, 1)).0, 0);
    assert_eq!(create(&mut c, topic("ok", 3, 1)).0, 36, "TOPIC_ALREADY_EXISTS");
    assert_eq!(create(&mut c, topic("bad/name", 1, 1)).0, 17, "INVALID_TOPIC_EXCEPTION");
    assert_eq!(create(&mut c, topic("zero", 0, 1)).0, 37, "INVALID_PARTITIONS");
    assert_eq!(create(&mut c, topic("huge", 1_000_000, 1)).0, 37, "above topics.max_partitions");
    let (code, message) = create(&mut c, topic("rf", 1, 3));
    assert_eq!(code, 38, "INVALID_REPLICATION_FACTOR");
    assert!(message.unwrap().contains("larger than available brokers"));
    let with_config = |k: &str, v: &str| {
        topic("cfg", 1, 1).with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_string(k.into()))
            .with_value(Some(StrBytes::from_string(v.into())))])
    };
    assert_eq!(create(&mut c, with_config("no.such.config", "1")).0, 40, "INVALID_CONFIG");
    assert_eq!(create(&mut c, with_config("cleanup.policy", "shred")).0, 40, "an unknown cleanup policy");
    assert_eq!(create(&mut c, with_config("retention.ms", "60000")).0, 0);
    // Validate-only creates nothing.
    let r = c.call(7, &CreateTopicsRequest::default().with_validate_only(true).with_topics(vec![topic("dry", 1, 1)]));
    assert_eq!(r.topics[0].error_code, 0);
    let all = c.call(9, &MetadataRequest::default().with_topics(None));
    let mut names: Vec<String> = all.topics.iter().filter(|t| !t.is_internal).map(|t| t.name.as_ref().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, ["cfg", "ok"]);
    assert!(all.topics.iter().any(|t| t.is_internal && t.name.as_ref().is_some_and(|n| &*n.0 == "__consumer_offsets")));
    // The override is reported with its source; defaults too.
    let r = c.call(
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("cfg"))]),
    );
    let get = |n: &str| r.results[0].configs.iter().find(|e| &*e.name == n).unwrap().clone();
    assert_eq!(get("retention.ms").value.as_deref(), Some("60000"));
    assert_eq!(get("retention.ms").config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    assert_eq!(get("segment.bytes").value.as_deref(), Some("1073741824"));
}

#[test]
fn delete_then_recreate_starts_empty() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "again", 2);
    c.call(9, &produce("again", 1, batch(4, 10, Compression::None, None), 1));
    let r = c.call(5, &DeleteTopicsRequest::default().with_topic_names(vec![name("again")]));
    assert_eq!(r.responses[0].error_code, 0);
    let r = c.call(5, &DeleteTopicsRequest::default().with_topic_names(vec![name("again")]));
    assert_eq!(r.responses[0].error_code, 3, "already gone");
    let r = c.call(9, &produce("again", 1, batch(1, 1, Compression::None, None), 1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
    assert!(!server.data_dir().join("again-1").exists());
    create_topic(&mut c, "again", 2);
    let r = c.call(11, &fetch("again", 1, 0, 1000, 0));
    assert_eq!(r.responses[0].partitions[0].high_watermark, 0, "nothing of the old topic remains");
}

#[test]
fn partitions_can_grow_but_not_shrink() {
    let server = TestServer::start();
    let mut c = server.client();
    create_topic(&mut c, "grow", 1);
    let grow = |c: &mut crate::harness::Client, n: i32| {
        c.call(
            3,
            &CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default().with_name(name("grow")).with_count(n)]),
        )
        .results[0]
            .error_code
    };
    assert_eq!(grow(&mut c, 4), 0);
    assert_eq!(grow(&mut c, 2), 37, "INVALID_PARTITIONS");
    let r = c.call(9, &produce("grow", 3, batch(1, 1, Compression::None, None), 1));
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let r = c.call(9, &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name("grow")))])));
    assert_eq!(r.topics[0].partitions.len(), 4);
}

#[test]
fn metadata_auto_creates_unless_told_not_to() {
    let server = TestServer::start_with(|c| c.topics.default_partitions = 3);
    let mut c = server.client();
    let ask = |c: &mut crate::harness::Client, t: &str, allow: bool| {
        c.call(
            9,
            &MetadataRequest::default()
                .with_allow_auto_topic_creation(allow)
                .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(t)))])),
        )
        .topics
        .remove(0)
    };
    let t = ask(&mut c, "auto", true);
    assert_eq!((t.error_code, t.partitions.len()), (0, 3));
    assert_eq!(ask(&mut c, "manual", false).error_code, 3);
    assert_eq!(ask(&mut c, "in valid", true).error_code, 17);
    let server = TestServer::start_with(|c| c.topics.auto_create = false);
    let mut c = server.client();
    assert_eq!(ask(&mut c, "auto", true).error_code, 3);
}
