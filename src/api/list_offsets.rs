//! ListOffsets (key 2): earliest, latest, max timestamp, or the first offset at a timestamp.
//!
//! v0, which Kafka 4 dropped (KIP-896) and the codec has no schema for, is decoded and encoded
//! here: sarama-based tools that predate v1 (LinkedIn Burrow 1.2) still ask for the latest offsets
//! with it. Its answer is a list of offsets (`old_style_offsets`) instead of one offset and
//! timestamp; corral puts at most one offset in it (see [`lookup_v0`]).

use std::collections::HashMap;
use std::rc::Rc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{ApiEntry, Handled, HandlerResult};
use crate::protocol::{RequestContext, RequestError};
use crate::runtime::{Shard, ShardId};
use crate::storage::{PartitionLog, StorageError, TimestampLookup};

/// Served from v0 (below the codec's v1), so built by hand rather than with `api_entry!`.
pub(crate) const ENTRY: ApiEntry = ApiEntry {
    key: ApiKey::ListOffsets,
    min: 0,
    max: 10,
    advertised_min: 0,
    handle: |shard, ctx, body| Box::pin(handle(shard, ctx, body)),
    decode: |ctx, body| decode(ctx, body).map(drop),
};

/// The version below which the codec has no schema for ListOffsets.
pub(crate) const CODEC_MIN: i16 = 1;

/// Special timestamps (Kafka's `ListOffsetsRequest` constants).
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

type Lookup = Result<Option<(i64, i64)>, LookupError>;

/// Requests whose timestamp lookups run at once on the node (the others wait).
const MAX_CONCURRENT_LOOKUPS: usize = 4;
static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONCURRENT_LOOKUPS);

#[derive(Debug)]
enum LookupError {
    Storage(StorageError),
    NotHosted,
    /// The blocking thread running the request's timestamp lookups failed.
    Failed,
}

/// The request, and for v0 each partition's `max_num_offsets` in request order.
fn decode(ctx: &RequestContext, body: Bytes) -> Result<(ListOffsetsRequest, Vec<i32>), RequestError> {
    if ctx.api_version >= CODEC_MIN {
        return Ok((ctx.decode(body)?, Vec::new()));
    }
    decode_v0(body).map_err(|source| RequestError::Decode { api: ctx.api_key, version: ctx.api_version, source })
}

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let (request, max_num_offsets) = decode(&ctx, body)?;
    let v0 = ctx.api_version == 0;
    let catalog = &shard.node.catalog;
    let node_id = shard.node.node_id;
    let with_epoch = ctx.api_version >= 4;

    // (topic, partition, error or (shard, position in that shard's job list))
    let mut jobs: HashMap<ShardId, Vec<(Uuid, i32, i64)>> = HashMap::new();
    let mut plan = Vec::with_capacity(request.topics.len());
    // v0 (gone from Kafka 4) answers every listing, as Kafka's v0 path did.
    let duplicates = if v0 { Default::default() } else { duplicate_partitions(&request) };
    for topic in request.topics {
        let found = catalog.get(&topic.name.0);
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let slot = match found.as_ref().and_then(|t| t.partition(p.partition_index).map(|m| (t.id, m.shard, m.leader))) {
                _ if !duplicates.is_empty() && duplicates.contains(&(topic.name.0.to_string(), p.partition_index)) => {
                    Err(ResponseError::InvalidRequest)
                }
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(_) if p.current_leader_epoch > 0 => Err(ResponseError::UnknownLeaderEpoch),
                Some((_, _, leader)) if leader != node_id => Err(ResponseError::NotLeaderOrFollower),
                Some((id, target, _)) => {
                    let queue = jobs.entry(target).or_default();
                    queue.push((id, p.partition_index, p.timestamp));
                    Ok((target, queue.len() - 1))
                }
            };
            parts.push((p.partition_index, slot));
        }
        plan.push((topic.name, parts));
    }

    let mut replies = HashMap::with_capacity(jobs.len());
    for (target, list) in jobs {
        let reply = shard.node.mesh.call(&shard, target, move |owner| {
            list.into_iter()
                .map(|(id, partition, ts)| match owner.partition(id, partition) {
                    Some(p) if v0 => plan_v0(&p.log.borrow(), ts),
                    Some(p) => plan_lookup(&p.log.borrow(), ts),
                    None => Planned::Done(Err(LookupError::NotHosted)),
                })
                .collect::<Vec<Planned>>()
        });
        replies.insert(target, reply.await);
    }
    let mut planned: Vec<(ShardId, Vec<Planned>)> = Vec::with_capacity(replies.len());
    for (target, reply) in replies {
        planned.push((target, reply.await.unwrap_or_default()));
    }
    let mut results = run_scans(planned).await;

    let mut topics = Vec::with_capacity(plan.len());
    for (name, parts) in plan {
        let partitions = parts
            .into_iter()
            .map(|(index, slot)| {
                let base = ListOffsetsPartitionResponse::default().with_partition_index(index).with_timestamp(-1).with_offset(-1);
                let outcome = slot.and_then(|(target, pos)| {
                    let answer = match results.as_mut() {
                        Some(results) => {
                            results.get_mut(&target).and_then(|l| l.get_mut(pos)).map(|r| std::mem::replace(r, Err(LookupError::NotHosted)))
                        }
                        None => Some(Err(LookupError::Failed)),
                    };
                    match answer {
                        Some(Ok(found)) => Ok(found),
                        Some(Err(LookupError::Storage(e))) => Err(e.error_code()),
                        Some(Err(LookupError::Failed)) => Err(ResponseError::UnknownServerError),
                        Some(Err(LookupError::NotHosted)) | None => Err(ResponseError::UnknownTopicOrPartition),
                    }
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

/// A partition's answer as its owning shard sees it: complete, or a timestamp lookup still to
/// run (reads and decompression, kept off the shards: see [`TimestampLookup`]).
#[derive(Debug)]
enum Planned {
    Done(Lookup),
    /// `or_end`: the answer when nothing matches (v0 answers the log end offset).
    Scan {
        lookup: TimestampLookup,
        or_end: Option<i64>,
    },
}

/// What answers a ListOffsets timestamp: `(offset, timestamp)`, or `None` when no record matches.
fn plan_lookup(log: &PartitionLog, timestamp: i64) -> Planned {
    let scan = |lookup| Planned::Scan { lookup, or_end: None };
    match timestamp {
        LATEST => Planned::Done(Ok(Some((log.log_end_offset(), -1)))),
        EARLIEST | EARLIEST_LOCAL => Planned::Done(Ok(Some((log.log_start_offset(), -1)))),
        MAX_TIMESTAMP => scan(log.max_timestamp_lookup()),
        // No tiered storage: nothing is tiered.
        LATEST_TIERED => Planned::Done(Ok(None)),
        ts => scan(log.timestamp_lookup(ts)),
    }
}

/// The one offset a v0 answer holds, as `(offset, -1)`, or `None` for an empty list.
///
/// Only -1 (latest) and -2 (earliest) are special in v0, and they are answered as Kafka did. For a
/// timestamp, Kafka answered with the base offsets of segments last modified before it, a coarse
/// position corral does not track; corral answers with where the records at or after it begin:
/// the offset newer versions give, or the log end offset when every record is older. A negative
/// timestamp other than -1 and -2 matches nothing (as in Kafka).
fn plan_v0(log: &PartitionLog, timestamp: i64) -> Planned {
    match timestamp {
        LATEST => Planned::Done(Ok(Some((log.log_end_offset(), -1)))),
        EARLIEST => Planned::Done(Ok(Some((log.log_start_offset(), -1)))),
        ts if ts < 0 => Planned::Done(Ok(None)),
        ts => Planned::Scan { lookup: log.timestamp_lookup(ts), or_end: Some(log.log_end_offset()) },
    }
}

/// Runs every timestamp lookup of the request on one blocking thread and returns each shard's
/// answers in its job order; `None` if that thread failed.
async fn run_scans(planned: Vec<(ShardId, Vec<Planned>)>) -> Option<HashMap<ShardId, Vec<Lookup>>> {
    let has_scans = planned.iter().any(|(_, list)| list.iter().any(|p| matches!(p, Planned::Scan { lookup, .. } if !lookup.is_empty())));
    let finish = move |planned: Vec<(ShardId, Vec<Planned>)>| -> HashMap<ShardId, Vec<Lookup>> {
        planned
            .into_iter()
            .map(|(target, list)| {
                let answers = list
                    .into_iter()
                    .map(|p| match p {
                        Planned::Done(answer) => answer,
                        Planned::Scan { lookup, or_end: None } => lookup.run().map_err(LookupError::Storage),
                        Planned::Scan { lookup, or_end: Some(end) } => {
                            lookup.run().map(|found| Some((found.map_or(end, |(offset, _)| offset), -1))).map_err(LookupError::Storage)
                        }
                    })
                    .collect();
                (target, answers)
            })
            .collect()
    };
    if !has_scans {
        return Some(finish(planned));
    }
    // Each lookup may hold a decompressed batch (up to 32 MiB): a few at a time on the node, the
    // rest wait their turn rather than start threads and buffers without bound.
    let Ok(_permit) = LOOKUPS.acquire().await else { return None };
    match tokio::task::spawn_blocking(move || finish(planned)).await {
        Ok(results) => Some(results),
        Err(e) => {
            tracing::error!(error = %e, "timestamp lookup failed");
            None
        }
    }
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
        let name = match buf.try_get_i16()? {
            n if n < 0 => anyhow::bail!("topic name length is negative ({n})"),
            n => StrBytes::try_from(buf.try_get_bytes(n as usize)?)?,
        };
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

fn array_len(buf: &mut Bytes) -> anyhow::Result<i32> {
    match buf.try_get_i32()? {
        n if n < 0 => anyhow::bail!("array length is negative ({n})"),
        n => Ok(n),
    }
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
