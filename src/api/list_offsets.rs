//! ListOffsets (key 2): earliest, latest, max timestamp, or the first offset at a timestamp.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{api_entry, ApiEntry, Handled, HandlerResult};
use crate::protocol::RequestContext;
use crate::runtime::{Shard, ShardId};
use crate::storage::{PartitionLog, StorageError};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ListOffsets, ListOffsetsRequest, 1, 10);

/// Special timestamps (Kafka's `ListOffsetsRequest` constants).
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

type Lookup = Result<Option<(i64, i64)>, LookupError>;

#[derive(Debug)]
enum LookupError {
    Storage(StorageError),
    NotHosted,
}

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ListOffsetsRequest = ctx.decode(body)?;
    let catalog = &shard.node.catalog;
    let with_epoch = ctx.api_version >= 4;

    // (topic, partition, error or (shard, position in that shard's job list))
    let mut jobs: HashMap<ShardId, Vec<(Uuid, i32, i64)>> = HashMap::new();
    let mut plan = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let found = catalog.get(&topic.name.0);
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let slot = match found.as_ref().and_then(|t| t.partition(p.partition_index).map(|m| (t.id, m.shard))) {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(_) if p.current_leader_epoch > 0 => Err(ResponseError::UnknownLeaderEpoch),
                Some((id, target)) => {
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
                    Some(p) => lookup(&p.log.borrow(), ts).map_err(LookupError::Storage),
                    None => Err(LookupError::NotHosted),
                })
                .collect::<Vec<Lookup>>()
        });
        replies.insert(target, reply.await);
    }
    let mut results: HashMap<ShardId, Vec<Lookup>> = HashMap::new();
    for (target, reply) in replies {
        results.insert(target, reply.await.unwrap_or_default());
    }

    let mut topics = Vec::with_capacity(plan.len());
    for (name, parts) in plan {
        let partitions = parts
            .into_iter()
            .map(|(index, slot)| {
                let base = ListOffsetsPartitionResponse::default().with_partition_index(index).with_timestamp(-1).with_offset(-1);
                let outcome = slot.and_then(|(target, pos)| {
                    match results.get_mut(&target).and_then(|l| l.get_mut(pos)).map(|r| std::mem::replace(r, Err(LookupError::NotHosted))) {
                        Some(Ok(found)) => Ok(found),
                        Some(Err(LookupError::Storage(e))) => Err(e.error_code()),
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
    Ok(Handled::Now(ctx.respond(&ListOffsetsResponse::default().with_topics(topics))))
}

/// `(offset, timestamp)` for a ListOffsets timestamp, or `None` when no record matches.
fn lookup(log: &PartitionLog, timestamp: i64) -> Result<Option<(i64, i64)>, StorageError> {
    match timestamp {
        LATEST => Ok(Some((log.log_end_offset(), -1))),
        EARLIEST | EARLIEST_LOCAL => Ok(Some((log.log_start_offset(), -1))),
        MAX_TIMESTAMP => log.max_timestamp_record(),
        // No tiered storage: nothing is tiered.
        LATEST_TIERED => Ok(None),
        ts => log.offset_for_timestamp(ts),
    }
}
