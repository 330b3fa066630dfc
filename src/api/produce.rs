//! Produce (key 0): validate each partition's record batch, append it on the shard that owns the
//! partition, and answer once it is stored (and on disk, if the flush policy says so).
//!
//! The appends are enqueued to the owning shards in the first stage, so pipelined produce
//! requests on one connection are appended in the order they were sent. With acks=0 nothing is
//! written back, unless the produce failed: then the connection is closed, as Kafka does.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{api_entry, ApiEntry, Handled, HandlerResult};
use crate::clock::now_ms;
use crate::protocol::{Reply, RequestContext};
use crate::record_batch::{BatchHeader, Compression, HEADER_LEN};
use crate::runtime::{Shard, ShardId};
use crate::storage::partition::FlushResult;
use crate::storage::{AppendInfo, StorageError};

/// Served from v3 (record batch v2); advertised from v0 because librdkafka before 2.11.1 turns
/// compression off unless Produce v0 is listed (KAFKA-18659).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Produce, ProduceRequest, 3, 13, advertised_min = 0);

/// Zstandard batches need Produce v7+ (KIP-110).
const ZSTD_MIN_VERSION: i16 = 7;

/// One partition's append, sent to its owning shard.
struct AppendJob {
    topic_id: Uuid,
    partition: i32,
    batch: Bytes,
}

type AppendResult = Result<(AppendInfo, Option<oneshot::Receiver<FlushResult>>), AppendError>;

#[derive(Debug)]
enum AppendError {
    Storage(StorageError),
    /// The partition is not (or no longer) on its owner, e.g. deleted concurrently.
    NotHosted,
}

/// A partition's answer: known now, or waiting on an append.
enum Slot {
    Done(PartitionProduceResponse),
    Pending { shard: ShardId, position: usize, index: i32 },
}

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ProduceRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    let catalog = &shard.node.catalog;
    let acks_valid = matches!(request.acks, -1..=1);

    let node_id = shard.node.node_id;
    let mut jobs: HashMap<ShardId, Vec<AppendJob>> = HashMap::new();
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for data in request.topic_data {
        let topic = if version >= 13 { catalog.get_by_id(data.topic_id) } else { catalog.get(&data.name.0) };
        let unknown = if version >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
        let mut slots = Vec::with_capacity(data.partition_data.len());
        for p in data.partition_data {
            let slot = if !acks_valid {
                Slot::Done(failed(p.index, ResponseError::InvalidRequiredAcks, None))
            } else {
                match topic.as_ref().map(|t| (t.id, t.partition(p.index))) {
                    None => Slot::Done(failed(p.index, unknown, None)),
                    Some(_) if topic.as_ref().is_some_and(|t| crate::cluster::is_internal(&t.name)) => {
                        Slot::Done(failed(p.index, ResponseError::InvalidTopicException, Some("cannot write to an internal topic".into())))
                    }
                    Some((_, None)) => Slot::Done(failed(p.index, ResponseError::UnknownTopicOrPartition, None)),
                    Some((_, Some(meta))) if meta.leader != node_id => Slot::Done(failed(
                        p.index,
                        ResponseError::NotLeaderOrFollower,
                        Some(format!("partition {} is on node {}", p.index, meta.leader)),
                    )),
                    Some((topic_id, Some(meta))) => match single_batch(p.records, version) {
                        Err((code, message)) => Slot::Done(failed(p.index, code, Some(message))),
                        Ok(batch) => {
                            let queue = jobs.entry(meta.shard).or_default();
                            queue.push(AppendJob { topic_id, partition: p.index, batch });
                            Slot::Pending { shard: meta.shard, position: queue.len() - 1, index: p.index }
                        }
                    },
                }
            };
            slots.push(slot);
        }
        topics.push((data.name, data.topic_id, slots));
    }

    // Enqueue every append now, in request order per shard.
    let now = now_ms();
    let mut replies = HashMap::with_capacity(jobs.len());
    for (target, batch) in jobs {
        let reply = shard.node.mesh.call(&shard, target, move |owner| append_all(owner, batch, now)).await;
        replies.insert(target, reply);
    }
    let acks = request.acks;
    Ok(Handled::Later(Box::pin(async move {
        let mut results: HashMap<ShardId, Vec<Option<AppendResult>>> = HashMap::with_capacity(replies.len());
        for (target, reply) in replies {
            let outcome = match reply.await {
                Ok(list) => list.into_iter().map(Some).collect(),
                Err(_) => Vec::new(),
            };
            results.insert(target, outcome);
        }
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic_id, slots) in topics {
            let mut partitions = Vec::with_capacity(slots.len());
            for slot in slots {
                partitions.push(match slot {
                    Slot::Done(response) => response,
                    Slot::Pending { shard: target, position, index } => {
                        let result = results.get_mut(&target).and_then(|list| list.get_mut(position)).and_then(Option::take);
                        settle(index, result).await
                    }
                });
            }
            responses.push(TopicProduceResponse::default().with_name(name).with_topic_id(topic_id).with_partition_responses(partitions));
        }
        if acks == 0 {
            // No response to carry an error: as Kafka does, close the connection so the
            // producer notices and refreshes its metadata.
            let failed = responses.iter().flat_map(|t| &t.partition_responses).any(|p| p.error_code != 0);
            return if failed { Reply::Close("a produce with acks=0 failed") } else { Reply::None };
        }
        ctx.respond(&ProduceResponse::default().with_responses(responses))
    })))
}

/// Runs on the owning shard: appends each batch, in order.
fn append_all(owner: &Rc<Shard>, jobs: Vec<AppendJob>, now: i64) -> Vec<AppendResult> {
    jobs.into_iter()
        .map(|job| {
            let partition = owner.partition(job.topic_id, job.partition).ok_or(AppendError::NotHosted)?;
            let (info, durable) = partition.append(&job.batch, now).map_err(AppendError::Storage)?;
            if !info.duplicate {
                owner.metrics.records_appended(info.records as u64);
            }
            if info.producer_evicted {
                crate::metrics::producer_state_evicted();
            }
            Ok((info, durable))
        })
        .collect()
}

/// Turns an append result into the partition's response, waiting for its fsync if required.
async fn settle(index: i32, result: Option<AppendResult>) -> PartitionProduceResponse {
    match result {
        None => failed(index, ResponseError::RequestTimedOut, Some("the partition's shard is shutting down".into())),
        Some(Err(AppendError::NotHosted)) => failed(index, ResponseError::UnknownTopicOrPartition, None),
        Some(Err(AppendError::Storage(e))) => {
            if matches!(e, StorageError::Io(_)) {
                tracing::error!(error = %e, "append failed");
            }
            failed(index, e.error_code(), Some(e.to_string()))
        }
        Some(Ok((info, durable))) => {
            if let Some(durable) = durable {
                match durable.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "fsync failed");
                        return failed(index, ResponseError::KafkaStorageError, Some(format!("fsync failed: {e}")));
                    }
                    Err(_) => return failed(index, ResponseError::KafkaStorageError, Some("fsync did not complete".into())),
                }
            }
            PartitionProduceResponse::default()
                .with_index(index)
                .with_base_offset(info.base_offset)
                .with_log_start_offset(info.log_start_offset)
        }
    }
}

fn failed(index: i32, code: ResponseError, message: Option<String>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_error_message(message.map(StrBytes::from_string))
}

/// Produce v3+ carries exactly one v2 record batch per partition (as Kafka requires).
fn single_batch(records: Option<Bytes>, version: i16) -> Result<Bytes, (ResponseError, String)> {
    let records = records.unwrap_or_default();
    if records.len() < HEADER_LEN {
        let what = if records.is_empty() { "no record batch" } else { "a truncated record batch" };
        return Err((ResponseError::InvalidRecord, format!("produce request has {what}; exactly one is required")));
    }
    let header = BatchHeader::parse(&records).map_err(|e| (ResponseError::InvalidRecord, e.to_string()))?;
    let total = header.total_len();
    if total < records.len() {
        return Err((ResponseError::InvalidRecord, "produce requests may carry exactly one record batch per partition".into()));
    }
    if total > records.len() {
        return Err((ResponseError::CorruptMessage, format!("record batch declares {total} bytes but {} were sent", records.len())));
    }
    if header.compression() == Ok(Compression::Zstd) && version < ZSTD_MIN_VERSION {
        return Err((ResponseError::UnsupportedCompressionType, "zstd needs Produce v7 or later".into()));
    }
    Ok(records)
}
