//! Consumer groups through the protocol: every group API at every served version, a full
//! join/sync/commit cycle across shards, and what survives a restart.

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::harness::{Client, TestServer};
use crate::requests::{create_topic, name};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn group(v: &str) -> GroupId {
    GroupId(s(v))
}

fn quick() -> TestServer {
    TestServer::start_with(|c| c.groups.initial_rebalance_delay_ms = 0)
}

fn join_request(g: &str, member: &str, version: i16) -> JoinGroupRequest {
    let mut r = JoinGroupRequest::default()
        .with_group_id(group(g))
        .with_session_timeout_ms(10_000)
        .with_member_id(s(member))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(s("range")).with_metadata(Bytes::from_static(b"\0\0\0\0\0\0"))]);
    if version >= 1 {
        r = r.with_rebalance_timeout_ms(30_000);
    }
    r
}

/// Joins a group alone (handling MEMBER_ID_REQUIRED) and syncs; returns (member id, generation).
fn form(c: &mut Client, g: &str, version: i16) -> (String, i32) {
    let mut r = c.call(version, &join_request(g, "", version));
    if r.error_code == 79 {
        r = c.call(version, &join_request(g, &r.member_id, version));
    }
    assert_eq!(r.error_code, 0, "join v{version}");
    assert_eq!(r.leader, r.member_id);
    let member = r.member_id.to_string();
    let sync_version = version.min(5);
    let mut sync = SyncGroupRequest::default()
        .with_group_id(group(g))
        .with_generation_id(r.generation_id)
        .with_member_id(s(&member))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(s(&member))
            .with_assignment(Bytes::from_static(b"mine"))]);
    if sync_version >= 5 {
        sync = sync.with_protocol_type(Some(s("consumer"))).with_protocol_name(Some(s("range")));
    }
    let synced = c.call(sync_version, &sync);
    assert_eq!(synced.error_code, 0, "sync v{sync_version}");
    assert_eq!(&synced.assignment[..], b"mine");
    (member, r.generation_id)
}

#[test]
fn find_coordinator_points_at_this_node() {
    let server = quick();
    let mut c = server.client();
    for v in 0..=3 {
        let r = c.call(v, &FindCoordinatorRequest::default().with_key(s("g")));
        assert_eq!((r.error_code, r.port), (0, server.addr.port() as i32), "v{v}");
    }
    for v in 4..=6 {
        let r = c.call(v, &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("a"), s("b")]));
        assert_eq!(r.coordinators.len(), 2);
        assert!(r.coordinators.iter().all(|k| k.error_code == 0 && k.port == server.addr.port() as i32));
    }
    let r = c.call(2, &FindCoordinatorRequest::default().with_key(s("txn")).with_key_type(1));
    assert_eq!(r.error_code, 42, "transactions: a clear error");
    assert!(r.error_message.unwrap().contains("transactions"));
}

#[test]
fn every_join_and_sync_version_forms_a_group() {
    let server = quick();
    let mut c = server.client();
    for v in 0..=9 {
        let g = format!("join-v{v}");
        let (member, generation) = form(&mut c, &g, v);
        for hv in 0..=4 {
            let r =
                c.call(hv, &HeartbeatRequest::default().with_group_id(group(&g)).with_generation_id(generation).with_member_id(s(&member)));
            assert_eq!(r.error_code, 0, "heartbeat v{hv}");
        }
    }
    // LeaveGroup at every version.
    for v in 0..=5 {
        let g = format!("leave-v{v}");
        let (member, _) = form(&mut c, &g, 5);
        let request = if v >= 3 {
            LeaveGroupRequest::default().with_group_id(group(&g)).with_members(vec![MemberIdentity::default().with_member_id(s(&member))])
        } else {
            LeaveGroupRequest::default().with_group_id(group(&g)).with_member_id(s(&member))
        };
        let r = c.call(v, &request);
        assert_eq!(r.error_code, 0, "leave v{v}");
        let r = c.call(v, &request);
        let code = if v >= 3 { r.members[0].error_code } else { r.error_code };
        assert_eq!(code, 25, "leave v{v} twice: UNKNOWN_MEMBER_ID");
    }
}

#[test]
fn offsets_commit_fetch_delete_at_every_version() {
    let server = quick();
    let mut c = server.client();
    create_topic(&mut c, "orders", 3);
    let (member, generation) = form(&mut c, "committers", 5);
    for v in 2..=9 {
        let mut r = OffsetCommitRequest::default()
            .with_group_id(group("committers"))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(&member))
            .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name("orders")).with_partitions(vec![
                OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(100 + v as i64),
                OffsetCommitRequestPartition::default().with_partition_index(9).with_committed_offset(1),
            ])]);
        if v <= 4 {
            r = r.with_retention_time_ms(-1);
        }
        let response = c.call(v, &r);
        let codes: Vec<i16> = response.topics[0].partitions.iter().map(|p| p.error_code).collect();
        assert_eq!(codes, vec![0, 3], "commit v{v}: the unknown partition alone fails");
    }
    for v in 1..=7 {
        let r = c.call(
            v,
            &OffsetFetchRequest::default()
                .with_group_id(group("committers"))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default().with_name(name("orders")).with_partition_indexes(vec![0, 1])])),
        );
        let offsets: Vec<i64> = r.topics[0].partitions.iter().map(|p| p.committed_offset).collect();
        assert_eq!(offsets, vec![109, -1], "fetch v{v}");
    }
    for v in 8..=9 {
        let r = c.call(
            v,
            &OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default().with_group_id(group("committers")).with_topics(None),
                OffsetFetchRequestGroup::default()
                    .with_group_id(group("nobody"))
                    .with_topics(Some(vec![OffsetFetchRequestTopics::default().with_name(name("orders")).with_partition_indexes(vec![2])])),
            ]),
        );
        assert_eq!(r.groups[0].topics[0].partitions[0].committed_offset, 109, "fetch v{v}, all topics");
        assert_eq!(r.groups[1].topics[0].partitions[0].committed_offset, -1, "fetch v{v}, unknown group");
    }
    // The group is live and consumes "orders": deleting its offsets is refused per topic.
    let delete = OffsetDeleteRequest::default().with_group_id(group("committers")).with_topics(vec![OffsetDeleteRequestTopic::default()
        .with_name(name("orders"))
        .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)])]);
    let r = c.call(0, &delete);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "the subscription (opaque test bytes) names no topics");
}

#[test]
fn admin_apis_list_describe_delete() {
    let server = quick();
    let mut c = server.client();
    let (member, _) = form(&mut c, "live", 5);
    c.call(8, &OffsetCommitRequest::default().with_group_id(group("idle")).with_generation_id_or_member_epoch(-1).with_topics(vec![]));
    create_topic(&mut c, "t", 1);
    c.call(
        8,
        &OffsetCommitRequest::default().with_group_id(group("idle")).with_generation_id_or_member_epoch(-1).with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(5)]),
        ]),
    );
    for v in 0..=5 {
        let r = c.call(v, &ListGroupsRequest::default());
        let mut ids: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
        ids.sort();
        assert_eq!(ids, ["idle", "live"], "list v{v}");
    }
    let r = c.call(4, &ListGroupsRequest::default().with_states_filter(vec![s("stable")]));
    assert_eq!(r.groups.len(), 1);
    assert_eq!(&*r.groups[0].group_state, "Stable");
    for v in 0..=6 {
        let r = c.call(v, &DescribeGroupsRequest::default().with_groups(vec![group("live"), group("missing")]));
        let live = &r.groups[0];
        assert_eq!((live.error_code, &*live.group_state, &*live.protocol_data), (0, "Stable", "range"), "describe v{v}");
        assert_eq!(live.members[0].member_id.to_string(), member);
        assert_eq!(&live.members[0].member_assignment[..], b"mine");
        assert!(live.members[0].client_host.starts_with("/127.0.0.1"));
        let missing = &r.groups[1];
        assert_eq!(&*missing.group_state, "Dead");
        assert_eq!(missing.error_code, if v >= 6 { 69 } else { 0 });
    }
    for v in 0..=2 {
        let r = c.call(v, &DeleteGroupsRequest::default().with_groups_names(vec![group("live"), group("missing")]));
        assert_eq!(r.results[0].error_code, 68, "NON_EMPTY_GROUP, v{v}");
        assert_eq!(r.results[1].error_code, 69, "GROUP_ID_NOT_FOUND, v{v}");
    }
    let r = c.call(2, &DeleteGroupsRequest::default().with_groups_names(vec![group("idle"), group("idle")]));
    assert_eq!(r.results.len(), 1, "duplicates collapse");
    assert_eq!(r.results[0].error_code, 0);
    let r = c.call(5, &ListGroupsRequest::default());
    assert_eq!(r.groups.len(), 1);
}

#[test]
fn groups_and_offsets_survive_a_restart_on_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let mut formed = Vec::new();
    {
        let server = TestServer::start_in(dir.path(), |c| c.groups.initial_rebalance_delay_ms = 0);
        let mut c = server.client();
        create_topic(&mut c, "t", 1);
        // Enough groups to land on several coordinator partitions and both shards.
        for i in 0..12 {
            let g = format!("group-{i}");
            let (member, generation) = form(&mut c, &g, 5);
            let r = c.call(
                8,
                &OffsetCommitRequest::default()
                    .with_group_id(group(&g))
                    .with_generation_id_or_member_epoch(generation)
                    .with_member_id(s(&member))
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(i)])]),
            );
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
            formed.push((g, member, generation));
        }
        server.stop();
    }
    let server = TestServer::start_in(dir.path(), |c| c.groups.initial_rebalance_delay_ms = 0);
    let mut c = server.client();
    for (i, (g, member, generation)) in formed.iter().enumerate() {
        let r = c.call(
            5,
            &OffsetFetchRequest::default()
                .with_group_id(group(g))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default().with_name(name("t")).with_partition_indexes(vec![0])])),
        );
        assert_eq!(r.topics[0].partitions[0].committed_offset, i as i64);
        // The member of the Stable group is still known, with its generation and assignment.
        let hb = c.call(3, &HeartbeatRequest::default().with_group_id(group(g)).with_generation_id(*generation).with_member_id(s(member)));
        assert_eq!(hb.error_code, 0, "{g}");
        let sync =
            c.call(3, &SyncGroupRequest::default().with_group_id(group(g)).with_generation_id(*generation).with_member_id(s(member)));
        assert_eq!(&sync.assignment[..], b"mine");
    }
}

#[test]
fn consumer_group_heartbeat_and_describe_at_every_version() {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest};
    let server = quick();
    let mut c = server.client();
    create_topic(&mut c, "events", 4);
    for v in 0..=1 {
        let g = format!("kip848-v{v}");
        let member = if v >= 1 { s("member-one") } else { s("") };
        let r = c.call(
            v,
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(group(&g))
                .with_member_id(member)
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![name("events")]))
                .with_topic_partitions(Some(Vec::<TopicPartitions>::new())),
        );
        // A new group is at epoch 1 (Kafka 4.4); its first member moves it to 2.
        assert_eq!((r.error_code, r.member_epoch), (0, 2), "heartbeat v{v}: {:?}", r.error_message);
        let assigned: usize = r.assignment.as_ref().unwrap().topic_partitions.iter().map(|t| t.partitions.len()).sum();
        assert_eq!(assigned, 4);
        let member_id = r.member_id.unwrap();
        if v == 0 {
            // Made by the coordinator, as Kafka's Uuid prints: 22 characters of URL-safe base64.
            assert!(member_id.len() == 22 && member_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{member_id}");
        }
        for dv in 0..=1 {
            let d = c.call(dv, &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group(&g), group("nope")]));
            assert_eq!((d.groups[0].error_code, &*d.groups[0].group_state), (0, "Stable"), "describe v{dv}");
            assert_eq!(d.groups[0].members[0].member_id, member_id);
            assert_eq!(&*d.groups[0].members[0].assignment.topic_partitions[0].topic_name.0, "events");
            assert_eq!(d.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
        }
        // Leave.
        let r =
            c.call(v, &ConsumerGroupHeartbeatRequest::default().with_group_id(group(&g)).with_member_id(member_id).with_member_epoch(-1));
        assert_eq!((r.error_code, r.member_epoch), (0, -1));
    }
    let groups = c.call(5, &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]));
    assert_eq!(groups.groups.len(), 2);
    assert!(groups.groups.iter().all(|g| &*g.group_type == "consumer" && &*g.group_state == "Empty"));
}
