//! OffsetCommit (key 8), v0–v9: validated by the coordinator in Kafka's order, answered once the
//! offsets are stored.
//!
//! v0 and v1, which Kafka 4 removed (KIP-896) and the codec has no schema for, are decoded here:
//! Sarama before 1.27 commits with v1, and such clients otherwise consume but never commit. v1
//! carries a commit time per partition (-1: the time it arrives); v0 names no member or
//! generation. Their responses are laid out as v2's, which is encoded in their place.

use std::rc::Rc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse, TopicName};
use kafka_protocol::ResponseError;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services, UNKNOWN_TOPIC_WAIT};
use crate::coordinator::offsets::{CommitOffset, CommitRequest};
use crate::protocol::old_versions::{array_len, nullable_string, string};
use crate::protocol::{RequestContext, RequestError};
use crate::security::acl::{Operation, Resource};

/// Per requested topic, per partition: an error found before reaching the coordinator, or the
/// position of its offset among those sent on.
type Layout = Vec<(kafka_protocol::messages::TopicName, Vec<(i32, Result<usize, i16>)>)>;

/// The version from which the codec has a schema for OffsetCommit.
const CODEC_MIN: i16 = 2;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::OffsetCommit, 0, 9, codec_min = CODEC_MIN, decode = decode);

/// The request, and for v1 each partition's commit time in request order (empty otherwise).
fn decode(ctx: &RequestContext, body: Bytes) -> Result<(OffsetCommitRequest, Vec<i64>), RequestError> {
    if ctx.api_version >= CODEC_MIN {
        return Ok((ctx.decode(body)?, Vec::new()));
    }
    decode_old(body, ctx.api_version).map_err(|source| RequestError::Decode { api: ctx.api_key, version: ctx.api_version, source })
}

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let (request, commit_timestamps) = decode(&ctx, body)?;
    let mut commit_timestamps = commit_timestamps.into_iter();
    let node = services.node();
    let catalog = &node.catalog;
    // Without READ on the group nothing is committed; without READ on a topic, none of its
    // partitions. Both are answered before a topic is looked for.
    let group_refused = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id);
    let refusals: Vec<Option<i16>> = request
        .topics
        .iter()
        .map(|t| match group_refused {
            Some(e) => Some(e.code()),
            None if !node.allows(&ctx, Operation::Read, Resource::Topic(&t.name)) => Some(ResponseError::TopicAuthorizationFailed.code()),
            None => None,
        })
        .collect();
    let names_unknown = request.topics.iter().zip(&refusals).any(|(t, refused)| refused.is_none() && catalog.get(&t.name.0).is_none());
    super::learn_new_topics(node, names_unknown, UNKNOWN_TOPIC_WAIT).await;
    let mut layout: Layout = Vec::new();
    let mut offsets = Vec::new();
    for (topic, refused) in request.topics.iter().zip(refusals) {
        let known = catalog.get(&topic.name.0);
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let slot = match (&known, refused) {
                (Some(t), None) if t.partition(p.partition_index).is_some() => {
                    let commit_timestamp = commit_timestamps.next();
                    offsets.push(CommitOffset {
                        topic: topic.name.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_timestamp,
                    });
                    Ok(offsets.len() - 1)
                }
                (_, refused) => {
                    commit_timestamps.next();
                    Err(refused.unwrap_or(ResponseError::UnknownTopicOrPartition.code()))
                }
            };
            parts.push((p.partition_index, slot));
        }
        layout.push((topic.name.clone(), parts));
    }
    let respond = |ctx: &RequestContext, codes: &[i16], layout: Layout| {
        let topics = layout
            .into_iter()
            .map(|(name, parts)| {
                OffsetCommitResponseTopic::default().with_name(name).with_partitions(
                    parts
                        .into_iter()
                        .map(|(index, slot)| {
                            let code =
                                slot.map_or_else(|e| e, |i| codes.get(i).copied().unwrap_or(ResponseError::UnknownServerError.code()));
                            OffsetCommitResponsePartition::default().with_partition_index(index).with_error_code(code)
                        })
                        .collect(),
                )
            })
            .collect();
        // v0 and v1 answer in v2's layout (v3 added the throttle time).
        ctx.respond_as(&OffsetCommitResponse::default().with_topics(topics), ctx.api_version.max(CODEC_MIN))
    };
    if offsets.is_empty() {
        return Ok(Handled::Now(respond(&ctx, &[], layout)));
    }
    let n = offsets.len();
    let commit = CommitRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        version: ctx.api_version,
        retention_ms: request.retention_time_ms,
        offsets,
    };
    let answer = services.groups().commit(commit).await;
    Ok(Handled::Later(Box::pin(async move {
        let codes = answer.await.unwrap_or_else(|e| vec![e.code(); n]);
        services.metrics().group_answered(ApiKey::OffsetCommit, codes.iter().copied().find(|&c| c != 0).unwrap_or(0));
        respond(&ctx, &codes, layout)
    })))
}

/// OffsetCommit v0: `group_id`, topics `[name, partitions [partition_index, committed_offset,
/// committed_metadata]]`; v1 adds `generation_id` and `member_id` after the group id and a
/// `commit_timestamp` after each offset. Returned as the v2 request they map onto (no retention
/// time; v0 as a commit from outside any group) and v1's commit times.
fn decode_old(mut body: Bytes, version: i16) -> anyhow::Result<(OffsetCommitRequest, Vec<i64>)> {
    let buf = &mut body;
    let group_id = GroupId(string(buf)?);
    let (generation, member_id) = if version >= 1 { (buf.try_get_i32()?, string(buf)?) } else { (-1, Default::default()) };
    let mut commit_timestamps = Vec::new();
    let mut topics = Vec::new();
    for _ in 0..array_len(buf)? {
        let name = TopicName(string(buf)?);
        let mut partitions = Vec::new();
        for _ in 0..array_len(buf)? {
            let partition_index = buf.try_get_i32()?;
            let committed_offset = buf.try_get_i64()?;
            if version >= 1 {
                commit_timestamps.push(buf.try_get_i64()?);
            }
            let committed_metadata = nullable_string(buf)?;
            partitions.push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(partition_index)
                    .with_committed_offset(committed_offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(committed_metadata),
            );
        }
        topics.push(OffsetCommitRequestTopic::default().with_name(name).with_partitions(partitions));
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id)
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(member_id)
        .with_retention_time_ms(-1)
        .with_topics(topics);
    Ok((request, commit_timestamps))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::Encodable;

    use super::*;

    /// One field on the wire: the layouts below follow the fields and versions of Kafka's
    /// OffsetCommitRequest.json and OffsetCommitResponse.json.
    enum F {
        I16(i16),
        I32(i32),
        I64(i64),
        Str(Option<&'static str>),
    }
    use F::*;

    fn wire(fields: &[F]) -> Bytes {
        let mut b = Vec::new();
        for f in fields {
            match f {
                I16(v) => b.extend(v.to_be_bytes()),
                I32(v) => b.extend(v.to_be_bytes()),
                I64(v) => b.extend(v.to_be_bytes()),
                Str(None) => b.extend((-1i16).to_be_bytes()),
                Str(Some(s)) => {
                    b.extend((s.len() as i16).to_be_bytes());
                    b.extend(s.as_bytes());
                }
            }
        }
        Bytes::from(b)
    }

    #[test]
    fn v0_request_layout() {
        // GroupId; Topics [Name; Partitions [PartitionIndex, CommittedOffset, CommittedMetadata]]
        let body =
            wire(&[Str(Some("group")), I32(1), Str(Some("t")), I32(2), I32(0), I64(42), Str(Some("meta")), I32(1), I64(43), Str(None)]);
        let (r, timestamps) = decode_old(body, 0).unwrap();
        assert_eq!(
            (r.group_id.as_str(), r.generation_id_or_member_epoch, r.member_id.as_str(), r.retention_time_ms),
            ("group", -1, "", -1)
        );
        assert!(timestamps.is_empty());
        let p = &r.topics[0].partitions;
        assert_eq!(r.topics[0].name.as_str(), "t");
        assert_eq!((p[0].partition_index, p[0].committed_offset, p[0].committed_metadata.as_deref()), (0, 42, Some("meta")));
        assert_eq!((p[1].partition_index, p[1].committed_offset, p[1].committed_metadata.as_deref()), (1, 43, None));
    }

    #[test]
    fn v1_request_layout() {
        // GroupId, GenerationIdOrMemberEpoch (v1+), MemberId (v1+);
        // Topics [Name; Partitions [PartitionIndex, CommittedOffset, CommitTimestamp (v1 only), CommittedMetadata]]
        let body = wire(&[
            Str(Some("group")),
            I32(7),
            Str(Some("member-1")),
            I32(2),
            Str(Some("a")),
            I32(1),
            I32(3),
            I64(100),
            I64(1_700_000_000_000),
            Str(Some("")),
            Str(Some("b")),
            I32(1),
            I32(0),
            I64(5),
            I64(-1),
            Str(None),
        ]);
        let (r, timestamps) = decode_old(body, 1).unwrap();
        assert_eq!((r.group_id.as_str(), r.generation_id_or_member_epoch, r.member_id.as_str()), ("group", 7, "member-1"));
        assert_eq!(timestamps, vec![1_700_000_000_000, -1]);
        let offsets: Vec<_> = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), p.partition_index, p.committed_offset)))
            .collect();
        assert_eq!(offsets, vec![("a".into(), 3, 100), ("b".into(), 0, 5)]);
    }

    #[test]
    fn truncated_or_hostile_requests_fail_to_decode() {
        let whole = wire(&[Str(Some("g")), I32(1), Str(Some("t")), I32(1), I32(0), I64(1), Str(None)]);
        for cut in 0..whole.len() {
            assert!(decode_old(whole.slice(..cut), 0).is_err(), "v0 cut at {cut} decoded");
        }
        assert!(decode_old(wire(&[Str(Some("g")), I32(-1)]), 0).is_err());
        assert!(decode_old(wire(&[Str(Some("g")), I32(i32::MAX)]), 0).is_err());
        assert!(decode_old(wire(&[Str(None), I32(0)]), 0).is_err(), "a null group id");
    }

    #[test]
    fn v0_and_v1_responses_are_laid_out_as_v2() {
        // Topics [Name; Partitions [PartitionIndex, ErrorCode]]; ThrottleTimeMs only from v3.
        let response = OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
            .with_name(TopicName("t".to_string().into()))
            .with_partitions(vec![OffsetCommitResponsePartition::default().with_partition_index(4).with_error_code(25)])]);
        let mut encoded = bytes::BytesMut::new();
        response.encode(&mut encoded, CODEC_MIN).unwrap();
        assert_eq!(encoded.freeze(), wire(&[I32(1), Str(Some("t")), I32(1), I32(4), I16(25)]));
    }
}
