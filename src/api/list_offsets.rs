//! ListOffsets (key 2): earliest, latest, max timestamp, or the first offset at a timestamp.
//!
//! v0, which Kafka 4 dropped (KIP-896) and the codec has no schema for, is decoded and encoded
//! here: sarama-based tools that predate v1 (LinkedIn Burrow 1.2) still ask for the latest offsets
//! with it. Its answer is a list of offsets (`old_style_offsets`) instead of one offset and
//! timestamp; corral puts at most one offset in it (see [`spec`]).

use std::rc::Rc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::old_versions::{array_len, string};
use crate::protocol::{RequestContext, RequestError};
use crate::security::acl::{Operation, Resource};
use crate::store::{OffsetQuery, OffsetSpec, PartitionRef};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ListOffsets, 0, 10, codec_min = CODEC_MIN, decode = decode);

/// The version below which the codec has no schema for ListOffsets.
const CODEC_MIN: i16 = 1;

/// Special timestamps (Kafka's `ListOffsetsRequest` constants).
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// The request, and for v0 each partition's `max_num_offsets` in request order.
fn decode(ctx: &RequestContext, body: Bytes) -> Result<(ListOffsetsRequest, Vec<i32>), RequestError> {
    if ctx.api_version >= CODEC_MIN {
        return Ok((ctx.decode(body)?, Vec::new()));
    }
    decode_v0(body).map_err(|source| RequestError::Decode { api: ctx.api_key, version: ctx.api_version, source })
}

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let (request, max_num_offsets) = decode(&ctx, body)?;
    let v0 = ctx.api_version == 0;
    let catalog = &services.node().catalog;
    let with_epoch = ctx.api_version >= 4;

    let mut queries = Vec::new();
    // Each partition: its answer now, or the position of its query.
    let mut plan = Vec::with_capacity(request.topics.len());
    // v0 (gone from Kafka 4) answers every listing, as Kafka's v0 path did.
    let duplicates = if v0 { Default::default() } else { duplicate_partitions(&request) };
    let names_unknown = request.topics.iter().any(|t| catalog.get(&t.name.0).is_none());
    super::learn_new_topics(services.node(), names_unknown, super::UNKNOWN_TOPIC_WAIT).await;
    for topic in request.topics {
        let found = catalog.get(&topic.name.0);
        let authorized = services.node().allows(&ctx, Operation::Describe, Resource::Topic(&topic.name.0));
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let slot = match &found {
                _ if !duplicates.is_empty() && duplicates.contains(&(topic.name.0.to_string(), p.partition_index)) => {
                    Err(ResponseError::InvalidRequest)
                }
                _ if !authorized => Err(ResponseError::TopicAuthorizationFailed),
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(t) => {
                    let partition = PartitionRef { topic: t.clone(), index: p.partition_index };
                    queries.push(OffsetQuery {
                        partition,
                        spec: spec(p.timestamp, v0),
                        current_leader_epoch: p.current_leader_epoch,
                        isolation_level: request.isolation_level,
                    });
                    Ok(queries.len() - 1)
                }
            };
            parts.push((p.partition_index, slot));
        }
        plan.push((topic.name, parts));
    }
    let mut results: Vec<Option<_>> = services.store().list_offsets(queries).await.into_iter().map(Some).collect();

    let mut topics = Vec::with_capacity(plan.len());
    for (name, parts) in plan {
        let partitions = parts
            .into_iter()
            .map(|(index, slot)| {
                let base = ListOffsetsPartitionResponse::default().with_partition_index(index).with_timestamp(-1).with_offset(-1);
                let outcome = slot.and_then(|i| match results.get_mut(i).and_then(Option::take) {
                    Some(Ok(found)) => Ok(found),
                    Some(Err(e)) => Err(e.code()),
                    None => Err(ResponseError::UnknownServerError),
                });
                match outcome {
                    Ok(Some((offset, ts))) => {
                        let r = base.with_offset(offset).with_timestamp(ts);
                        if with_epoch {
                            r.with_leader_epoch(0)
                        } else {
                            r
                        }
                    }
                    Ok(None) => base,
                    Err(code) => base.with_error_code(code.code()),
                }
            })
            .collect();
        topics.push(ListOffsetsTopicResponse::default().with_name(name).with_partitions(partitions));
    }
    if v0 {
        return Ok(Handled::Now(ctx.respond(&ResponseV0::new(topics, &max_num_offsets))));
    }
    Ok(Handled::Now(ctx.respond(&ListOffsetsResponse::default().with_topics(topics))))
}

/// What a request's timestamp asks the store for.
///
/// In v0 only -1 (latest) and -2 (earliest) are special, and they are answered as Kafka did. For a
/// timestamp, Kafka answered with the base offsets of segments last modified before it, a coarse
/// position corral does not track; corral answers with where the records at or after it begin:
/// the offset newer versions give, or the log end offset when every record is older. A negative
/// timestamp other than -1 and -2 matches nothing (as in Kafka).
fn spec(timestamp: i64, v0: bool) -> OffsetSpec {
    match timestamp {
        LATEST => OffsetSpec::Latest,
        EARLIEST => OffsetSpec::Earliest,
        _ if v0 && timestamp < 0 => OffsetSpec::NoMatch,
        ts if v0 => OffsetSpec::AtOrAfterElseEnd(ts),
        MAX_TIMESTAMP => OffsetSpec::MaxTimestamp,
        EARLIEST_LOCAL => OffsetSpec::EarliestLocal,
        LATEST_TIERED => OffsetSpec::LatestTiered,
        ts => OffsetSpec::AtOrAfter(ts),
    }
}

/// Partitions the request lists more than once: each of their entries is answered with
/// INVALID_REQUEST and none is looked up, as Kafka does from v1 on.
fn duplicate_partitions(request: &ListOffsetsRequest) -> std::collections::HashSet<(String, i32)> {
    let mut seen = std::collections::HashSet::new();
    let mut twice = std::collections::HashSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.as_str(), p.partition_index);
            if !seen.insert(key) {
                twice.insert((key.0.to_string(), key.1));
            }
        }
    }
    twice
}

/// ListOffsets v0: `replica_id`, then topics `[name, partitions [partition_index, timestamp,
/// max_num_offsets]]`. Returned as the v1 request (which v0 maps onto: no leader epoch, read
/// uncommitted) and the `max_num_offsets` of each partition in request order.
fn decode_v0(mut body: Bytes) -> anyhow::Result<(ListOffsetsRequest, Vec<i32>)> {
    let buf = &mut body;
    let replica_id = buf.try_get_i32()?;
    let mut max_num_offsets = Vec::new();
    let mut topics = Vec::new();
    for _ in 0..array_len(buf)? {
        let name = string(buf)?;
        let mut partitions = Vec::new();
        for _ in 0..array_len(buf)? {
            let partition_index = buf.try_get_i32()?;
            let timestamp = buf.try_get_i64()?;
            max_num_offsets.push(buf.try_get_i32()?);
            partitions.push(ListOffsetsPartition::default().with_partition_index(partition_index).with_timestamp(timestamp));
        }
        topics.push(ListOffsetsTopic::default().with_name(TopicName(name)).with_partitions(partitions));
    }
    Ok((ListOffsetsRequest::default().with_replica_id(BrokerId(replica_id)).with_topics(topics), max_num_offsets))
}

/// ListOffsets v0's response: topics `[name, partitions [partition_index, error_code,
/// old_style_offsets [int64]]]`.
struct ResponseV0 {
    topics: Vec<(TopicName, Vec<PartitionV0>)>,
}

/// `(partition_index, error_code, the one old-style offset if any)`.
type PartitionV0 = (i32, i16, Option<i64>);

impl ResponseV0 {
    /// The v1 answer in v0's form: its offset, unless there is none or the client asked for none.
    fn new(topics: Vec<ListOffsetsTopicResponse>, max_num_offsets: &[i32]) -> ResponseV0 {
        let mut max = max_num_offsets.iter();
        let topics = topics
            .into_iter()
            .map(|t| {
                let parts = t
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let wanted = max.next().is_some_and(|&n| n > 0);
                        (p.partition_index, p.error_code, (wanted && p.offset >= 0).then_some(p.offset))
                    })
                    .collect();
                (t.name, parts)
            })
            .collect();
        ResponseV0 { topics }
    }
}

impl Encodable for ResponseV0 {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, _version: i16) -> anyhow::Result<()> {
        buf.put_i32(self.topics.len() as i32);
        for (name, parts) in &self.topics {
            // A name that was decoded from an i16-length string fits one.
            buf.put_i16(name.0.len() as i16);
            buf.put_slice(name.0.as_bytes());
            buf.put_i32(parts.len() as i32);
            for &(index, error_code, offset) in parts {
                buf.put_i32(index);
                buf.put_i16(error_code);
                buf.put_i32(offset.is_some() as i32);
                if let Some(offset) = offset {
                    buf.put_i64(offset);
                }
            }
        }
        Ok(())
    }

    fn compute_size(&self, _version: i16) -> anyhow::Result<usize> {
        let mut size = 4;
        for (name, parts) in &self.topics {
            size += 2 + name.0.len() + 4;
            size += parts.iter().map(|p| 4 + 2 + 4 + if p.2.is_some() { 8 } else { 0 }).sum::<usize>();
        }
        Ok(size)
    }
}
