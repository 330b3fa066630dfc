//! OffsetFetch (key 9), v0–v9: one group (v0–v7) or several (v8+, KIP-709). Unknown groups and
//! partitions answer offset -1 without an error, as Kafka does.
//!
//! v0, which Kafka 4 removed (KIP-896) and the codec has no schema for, read offsets from
//! ZooKeeper where v1 read Kafka's own; corral has one store, so v0 reads the same offsets. Its
//! request and response are laid out as v1's, which is decoded and encoded in their place.
//!
//! Each group needs DESCRIBE (else GROUP_AUTHORIZATION_FAILED, per group from v8). A named topic
//! without DESCRIBE answers TOPIC_AUTHORIZATION_FAILED for its partitions; when all of a group's
//! offsets are fetched, such topics are left out.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services, NONE};
use crate::coordinator::offsets::FetchedOffset;
use crate::coordinator::router::FetchedOffsets;
use crate::protocol::{RequestContext, RequestError};
use crate::security::acl::{Operation, Resource};

/// The version from which the codec has a schema for OffsetFetch.
const CODEC_MIN: i16 = 1;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::OffsetFetch, 0, 9, codec_min = CODEC_MIN, decode = decode);

/// v0 is laid out as v1.
fn decode(ctx: &RequestContext, mut body: Bytes) -> Result<OffsetFetchRequest, RequestError> {
    let version = ctx.api_version.max(CODEC_MIN);
    OffsetFetchRequest::decode(&mut body, version).map_err(|source| RequestError::Decode {
        api: ctx.api_key,
        version: ctx.api_version,
        source,
    })
}

type Topics = Option<Vec<(String, Vec<i32>)>>;
/// Offsets by topic, with the error code each topic's partitions carry.
type Fetched = Vec<(String, i16, Vec<FetchedOffset>)>;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request = decode(&ctx, body)?;
    let version = ctx.api_version.max(CODEC_MIN);
    // (group, topics, KIP-848 member id and epoch from v9)
    let wanted: Vec<(GroupId, Topics, Option<String>, i32)> = if version >= 8 {
        request
            .groups
            .into_iter()
            .map(|g| {
                let topics = g.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
                (g.group_id, topics, g.member_id.map(|m| m.to_string()), g.member_epoch)
            })
            .collect()
    } else {
        let topics = request.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
        vec![(request.group_id, topics, None, -1)]
    };
    // Enqueue every group's lookup, then gather. A group without DESCRIBE is not looked up; named
    // topics without DESCRIBE are answered here, and the offsets of such topics left out.
    let node = services.node();
    let mut pending = Vec::with_capacity(wanted.len());
    for (group, topics, member, epoch) in wanted {
        if let Some(e) = groups::refusal(services.as_ref(), &ctx, Operation::Describe, &group) {
            pending.push((group, topics, Vec::new(), Err(e.code())));
            continue;
        }
        let (asked, refused) = match topics.clone() {
            Some(ts) => {
                let (asked, refused) = ts.into_iter().partition(|(t, _)| node.allows(&ctx, Operation::Describe, Resource::Topic(t)));
                (Some(asked), refused)
            }
            None => (None, Vec::new()),
        };
        let reply = services.groups().fetch_offsets(group.to_string(), asked, member, epoch).await;
        pending.push((group, topics, refused, Ok(reply)));
    }
    Ok(Handled::Later(Box::pin(async move {
        let node = services.node();
        let mut results: Vec<(GroupId, Topics, Result<Fetched, i16>)> = Vec::with_capacity(pending.len());
        for (group, topics, refused, reply) in pending {
            let result = match reply {
                Err(code) => Err(code),
                Ok(reply) => {
                    let result = reply.await.and_then(|r| r).map_err(|e| e.code());
                    services.metrics().group_answered(ApiKey::OffsetFetch, result.as_ref().err().copied().unwrap_or(0));
                    result.map(|offsets| visible(offsets, refused, |t| node.allows(&ctx, Operation::Describe, Resource::Topic(t))))
                }
            };
            results.push((group, topics, result));
        }
        ctx.respond_as(&shape(results, version), version)
    })))
}

/// A group's offsets as the principal may see them: of the topics it may describe, then the
/// named topics it may not, each partition with TOPIC_AUTHORIZATION_FAILED.
fn visible(offsets: FetchedOffsets, refused: Vec<(String, Vec<i32>)>, describable: impl Fn(&str) -> bool) -> Fetched {
    let shown = offsets.into_iter().filter(|(t, _)| describable(t)).map(|(t, parts)| (t, NONE, parts));
    shown.chain(unfetched(refused, ResponseError::TopicAuthorizationFailed.code())).collect()
}

/// Partitions answered without an offset, with `error`.
fn unfetched(topics: Vec<(String, Vec<i32>)>, error: i16) -> Fetched {
    topics.into_iter().map(|(t, ps)| (t, error, ps.into_iter().map(|p| (p, -1, -1, String::new())).collect())).collect()
}

fn shape(results: Vec<(GroupId, Topics, Result<Fetched, i16>)>, version: i16) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = results
            .into_iter()
            .map(|(group, _, result)| {
                let (error, fetched) = match result {
                    Ok(f) => (NONE, f),
                    Err(e) => (e, Vec::new()),
                };
                OffsetFetchResponseGroup::default().with_group_id(group).with_error_code(error).with_topics(
                    fetched
                        .into_iter()
                        .map(|(topic, code, parts)| {
                            OffsetFetchResponseTopics::default().with_name(TopicName(StrBytes::from_string(topic))).with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, offset, epoch, metadata)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(StrBytes::from_string(metadata)))
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let (_, requested, result) = results.into_iter().next().expect("one group below v8");
    let (error, fetched) = match result {
        Ok(f) => (NONE, f),
        // v1 has no group-level error: every requested partition carries it.
        Err(e) if version < 2 => (NONE, unfetched(requested.unwrap_or_default(), e)),
        Err(e) => (e, Vec::new()),
    };
    let topics = fetched
        .into_iter()
        .map(|(topic, code, parts)| {
            OffsetFetchResponseTopic::default().with_name(TopicName(StrBytes::from_string(topic))).with_partitions(
                parts
                    .into_iter()
                    .map(|(p, offset, epoch, metadata)| {
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                            .with_metadata(Some(StrBytes::from_string(metadata)))
                            .with_error_code(code)
                    })
                    .collect(),
            )
        })
        .collect();
    // Below v2 `error` is NONE, which the layout has no field for.
    OffsetFetchResponse::default().with_topics(topics).with_error_code(error)
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::protocol::Encodable;

    use super::*;

    /// OffsetFetch v0 (Kafka's OffsetFetchRequest.json and OffsetFetchResponse.json before
    /// KIP-896): the request `GroupId; Topics [Name; PartitionIndexes [int32]]`, the response
    /// `Topics [Name; Partitions [PartitionIndex, CommittedOffset, Metadata, ErrorCode]]`, as v1.
    #[test]
    fn v0_is_laid_out_as_v1() {
        let mut request = BytesMut::new();
        request.put_i16(1);
        request.put_slice(b"g");
        request.put_i32(1);
        request.put_i16(1);
        request.put_slice(b"t");
        request.put_i32(2);
        request.put_i32(0);
        request.put_i32(5);
        let ctx = RequestContext {
            api_key: ApiKey::OffsetFetch,
            api_version: 0,
            correlation_id: 1,
            client_id: None,
            peer: None,
            connection: 0,
            security: None,
        };
        let decoded = decode(&ctx, request.freeze()).unwrap();
        assert_eq!(decoded.group_id.as_str(), "g");
        let topics = decoded.topics.unwrap();
        assert_eq!((topics[0].name.as_str(), topics[0].partition_indexes.clone()), ("t", vec![0, 5]));

        let fetched = vec![("t".to_string(), NONE, vec![(5, 42, -1, "m".to_string())])];
        let response = shape(vec![(GroupId("g".to_string().into()), None, Ok(fetched))], CODEC_MIN);
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, CODEC_MIN).unwrap();
        let mut expected = BytesMut::new();
        expected.put_i32(1);
        expected.put_i16(1);
        expected.put_slice(b"t");
        expected.put_i32(1);
        expected.put_i32(5);
        expected.put_i64(42);
        expected.put_i16(1);
        expected.put_slice(b"m");
        expected.put_i16(0);
        assert_eq!(encoded, expected);
    }

    const GROUP_AUTHORIZATION_FAILED: i16 = ResponseError::GroupAuthorizationFailed.code();
    const TOPIC_AUTHORIZATION_FAILED: i16 = ResponseError::TopicAuthorizationFailed.code();

    fn group() -> GroupId {
        GroupId("g".to_string().into())
    }

    /// (topic, partition, offset, error) of every partition answered below v8.
    fn partitions(response: &OffsetFetchResponse) -> Vec<(String, i32, i64, i16)> {
        let topics = response.topics.iter();
        topics
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), p.partition_index, p.committed_offset, p.error_code)))
            .collect()
    }

    #[test]
    fn offsets_of_topics_not_describable_are_left_out_or_refused() {
        let offsets = vec![("a".to_string(), vec![(0, 7, -1, String::new())]), ("secret".to_string(), vec![(0, 9, -1, String::new())])];
        let fetched = visible(offsets, vec![("b".to_string(), vec![0, 1])], |t| t != "secret");
        let response = shape(vec![(group(), None, Ok(fetched))], 7);
        assert_eq!(response.error_code, NONE);
        assert_eq!(
            partitions(&response),
            vec![
                ("a".into(), 0, 7, NONE),
                ("b".into(), 0, -1, TOPIC_AUTHORIZATION_FAILED),
                ("b".into(), 1, -1, TOPIC_AUTHORIZATION_FAILED)
            ]
        );
    }

    #[test]
    fn a_refused_group_in_each_layout() {
        let requested = Some(vec![("t".to_string(), vec![0, 1])]);
        // v1 has no group-level error: each requested partition carries it.
        let v1 = shape(vec![(group(), requested.clone(), Err(GROUP_AUTHORIZATION_FAILED))], 1);
        assert_eq!(partitions(&v1), vec![("t".into(), 0, -1, GROUP_AUTHORIZATION_FAILED), ("t".into(), 1, -1, GROUP_AUTHORIZATION_FAILED)]);
        let v2 = shape(vec![(group(), requested.clone(), Err(GROUP_AUTHORIZATION_FAILED))], 2);
        assert_eq!((v2.error_code, v2.topics.len()), (GROUP_AUTHORIZATION_FAILED, 0));
        // v8+: the refused group's own entry; the others are answered.
        let other = GroupId("h".to_string().into());
        let v8 = shape(
            vec![(group(), requested, Err(GROUP_AUTHORIZATION_FAILED)), (other, None, Ok(unfetched(vec![("t".into(), vec![0])], NONE)))],
            8,
        );
        let groups: Vec<_> = v8.groups.iter().map(|g| (g.group_id.to_string(), g.error_code, g.topics.len())).collect();
        assert_eq!(groups, vec![("g".into(), GROUP_AUTHORIZATION_FAILED, 0), ("h".into(), NONE, 1)]);
        for version in [1, 2, 8] {
            let response = shape(vec![(group(), Some(vec![("t".to_string(), vec![0])]), Err(GROUP_AUTHORIZATION_FAILED))], version);
            response.encode(&mut BytesMut::new(), version).unwrap();
        }
    }
}
