//! Produce (key 0): check each partition's record batch, hand it to the partition store, and
//! answer once it is stored (and on disk, if the flush policy says so).
//!
//! The appends are enqueued in the first stage, so pipelined produce requests on one connection
//! are appended in the order they were sent. With acks=0 nothing is written back, unless the
//! produce failed: then the connection is closed, as Kafka does. In front of an upstream, a topic
//! the catalog lacks is looked for there first (one metadata refresh), as Metadata and
//! OffsetCommit do.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::produce_response::{BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::{Reply, RequestContext};
use crate::record_batch::{BatchHeader, Compression, HEADER_LEN};
use crate::security::acl::{Operation, Resource};
use crate::security::quota::QuotaKind;
use crate::store::{Append, AppendPlan, PartitionRef};

/// Served from v3 (record batch v2); advertised from v0 because librdkafka before 2.11.1 turns
/// compression off unless Produce v0 is listed (KAFKA-18659).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Produce, ProduceRequest, 3, 13, advertised_min = 0);

/// Zstandard batches need Produce v7+ (KIP-110).
const ZSTD_MIN_VERSION: i16 = 7;

/// A partition's answer: known now, or the position of its append in what the store was given.
enum Slot {
    Done(PartitionProduceResponse),
    Appending { position: usize, index: i32 },
}

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let size = body.len();
    let request: ProduceRequest = ctx.decode(body)?;
    let throttle = super::throttle(services.node(), &ctx, QuotaKind::Produce, size as f64);
    let version = ctx.api_version;
    let catalog = &services.node().catalog;
    let acks_valid = matches!(request.acks, -1..=1);
    let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    let unknown =
        |t: &TopicProduceData| if version >= 13 { catalog.get_by_id(t.topic_id).is_none() } else { catalog.get(&t.name.0).is_none() };
    super::learn_new_topics(services.node(), request.topic_data.iter().any(unknown), timeout).await;

    let mut appends = Vec::new();
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for data in request.topic_data {
        let topic = if version >= 13 { catalog.get_by_id(data.topic_id) } else { catalog.get(&data.name.0) };
        let unknown = if version >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
        // Before existence, as Kafka: a client without WRITE learns nothing about the topic.
        let name = topic.as_ref().map(|t| t.name.as_str()).unwrap_or(data.name.0.as_str());
        let authorized = (version >= 13 && topic.is_none()) || services.node().allows(&ctx, Operation::Write, Resource::Topic(name));
        let mut slots = Vec::with_capacity(data.partition_data.len());
        for p in data.partition_data {
            let slot = match &topic {
                _ if !acks_valid => Slot::Done(failed(p.index, ResponseError::InvalidRequiredAcks, None)),
                _ if !authorized => Slot::Done(failed(p.index, ResponseError::TopicAuthorizationFailed, None)),
                None => Slot::Done(failed(p.index, unknown, None)),
                Some(t) if crate::cluster::is_internal(&t.name) => {
                    Slot::Done(failed(p.index, ResponseError::InvalidTopicException, Some("cannot write to an internal topic".into())))
                }
                Some(t) => match single_batch(p.records, version) {
                    Err((code, message)) => Slot::Done(failed(p.index, code, Some(message))),
                    Ok(batch) => {
                        appends.push(Append { partition: PartitionRef { topic: t.clone(), index: p.index }, batch });
                        Slot::Appending { position: appends.len() - 1, index: p.index }
                    }
                },
            };
            slots.push(slot);
        }
        topics.push((data.name, data.topic_id, slots));
    }

    // Enqueued now, so pipelined produces are appended in the order they were sent.
    let acks = request.acks;
    // A connection's produces keep their order; different connections' may go side by side.
    let lane = ctx.connection as usize;
    let appended = services.store().append(AppendPlan { batches: appends, acks, timeout, lane }).await;
    Ok(Handled::Later(Box::pin(async move {
        let mut results: Vec<Option<_>> = appended.await.into_iter().map(Some).collect();
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic_id, slots) in topics {
            let partitions = slots
                .into_iter()
                .map(|slot| match slot {
                    Slot::Done(response) => response,
                    Slot::Appending { position, index } => match results.get_mut(position).and_then(Option::take) {
                        Some(Ok(at)) => PartitionProduceResponse::default()
                            .with_index(index)
                            .with_base_offset(at.base_offset)
                            .with_log_start_offset(at.log_start_offset),
                        Some(Err(e)) => failed(index, e.code(), Some(e.to_string())).with_record_errors(record_errors(&e)),
                        None => failed(index, ResponseError::UnknownServerError, None),
                    },
                })
                .collect();
            responses.push(TopicProduceResponse::default().with_name(name).with_topic_id(topic_id).with_partition_responses(partitions));
        }
        if acks == 0 {
            // No response to carry an error: as Kafka does, close the connection so the
            // producer notices and refreshes its metadata.
            let failed = responses.iter().flat_map(|t| &t.partition_responses).any(|p| p.error_code != 0);
            return if failed { Reply::Close("a produce with acks=0 failed") } else { Reply::None };
        }
        ctx.respond(&ProduceResponse::default().with_responses(responses).with_throttle_time_ms(throttle.as_millis() as i32))
    })))
}

fn failed(index: i32, code: ResponseError, message: Option<String>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_error_message(message.map(StrBytes::from_string))
}

/// The records of a batch refused one by one, as Produce v8+ names them (KIP-467).
fn record_errors(e: &crate::store::StoreError) -> Vec<BatchIndexAndErrorMessage> {
    let errors = e.record_errors().into_iter();
    errors
        .map(|(i, why)| BatchIndexAndErrorMessage::default().with_batch_index(i).with_batch_index_error_message(Some(why.into())))
        .collect()
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
