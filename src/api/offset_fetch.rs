//! OffsetFetch (key 9), v0–v9: one group (v0–v7) or several (v8+, KIP-709). Unknown groups and
//! partitions answer offset -1 without an error, as Kafka does.
//!
//! v0, which Kafka 4 removed (KIP-896) and the codec has no schema for, read offsets from
//! ZooKeeper where v1 read Kafka's own; corral has one store, so v0 reads the same offsets. Its
//! request and response are laid out as v1's, which is decoded and encoded in their place.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services, NONE};
use crate::coordinator::offsets::FetchedOffset;
use crate::protocol::{RequestContext, RequestError};

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
type Fetched = Vec<(String, Vec<FetchedOffset>)>;

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
    // Enqueue every group's lookup, then gather.
    let mut pending = Vec::with_capacity(wanted.len());
    for (group, topics, member, epoch) in wanted {
        let reply = services.groups().fetch_offsets(group.to_string(), topics.clone(), member, epoch).await;
        pending.push((group, topics, reply));
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut results: Vec<(GroupId, Topics, Result<Fetched, i16>)> = Vec::with_capacity(pending.len());
        for (group, topics, reply) in pending {
            let result = reply.await.and_then(|r| r).map_err(|e| e.code());
            services.metrics().group_answered(ApiKey::OffsetFetch, result.as_ref().err().copied().unwrap_or(0));
            results.push((group, topics, result));
        }
        ctx.respond_as(&shape(results, version), version)
    })))
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
                        .map(|(topic, parts)| {
                            OffsetFetchResponseTopics::default().with_name(TopicName(StrBytes::from_string(topic))).with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, offset, epoch, metadata)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(StrBytes::from_string(metadata)))
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
        Err(e) if version < 2 => {
            let parts =
                requested.unwrap_or_default().into_iter().map(|(t, ps)| (t, ps.into_iter().map(|p| (p, -1, -1, String::new())).collect()));
            (e, parts.collect())
        }
        Err(e) => (e, Vec::new()),
    };
    let partition_error = if version < 2 { error } else { NONE };
    let topics = fetched
        .into_iter()
        .map(|(topic, parts)| {
            OffsetFetchResponseTopic::default().with_name(TopicName(StrBytes::from_string(topic))).with_partitions(
                parts
                    .into_iter()
                    .map(|(p, offset, epoch, metadata)| {
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                            .with_metadata(Some(StrBytes::from_string(metadata)))
                            .with_error_code(partition_error)
                    })
                    .collect(),
            )
        })
        .collect();
    let response = OffsetFetchResponse::default().with_topics(topics);
    if version >= 2 {
        response.with_error_code(error)
    } else {
        response
    }
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
        let ctx = RequestContext { api_key: ApiKey::OffsetFetch, api_version: 0, correlation_id: 1, client_id: None, peer: None };
        let decoded = decode(&ctx, request.freeze()).unwrap();
        assert_eq!(decoded.group_id.as_str(), "g");
        let topics = decoded.topics.unwrap();
        assert_eq!((topics[0].name.as_str(), topics[0].partition_indexes.clone()), ("t", vec![0, 5]));

        let fetched = vec![("t".to_string(), vec![(5, 42, -1, "m".to_string())])];
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
}
