//! DeleteRecords (key 21): moves partitions' log start offsets forward, so that the records
//! below are no longer read (`kafka-delete-records`, the admin clients' deleteRecords, Kafka
//! Streams purging its repartition topics).
//!
//! Each partition is answered with its log start offset afterwards (the low watermark). As in
//! Kafka: DELETE on the topic is needed; an offset past the high watermark, or below -1 (which
//! names the high watermark), is OFFSET_OUT_OF_RANGE; corral's own `__consumer_offsets` cannot be
//! cut (INVALID_TOPIC_EXCEPTION). The partition's store does the rest: local segments on the
//! node that leads the partition, or the upstream's leader.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};
use crate::store::{Deletion, PartitionRef, DELETE_TO_HIGH_WATERMARK};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DeleteRecords, DeleteRecordsRequest, 0, 2);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DeleteRecordsRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let names_unknown = request.topics.iter().any(|t| node.catalog.get(&t.name.0).is_none());
    super::learn_new_topics(&node, names_unknown, Duration::from_millis(request.timeout_ms.max(0) as u64)).await;

    // As Kafka: a partition named more than once is answered once, for the last offset named.
    let mut last_offsets: HashMap<(&str, i32), i64> = HashMap::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            last_offsets.insert((topic.name.0.as_str(), p.partition_index), p.offset);
        }
    }
    let mut deletions = Vec::new();
    // Each partition: its error now, or the position of its deletion.
    let mut plan = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let found = node.catalog.get(&topic.name.0);
        // Before existence, as Kafka: a client without DELETE learns nothing about the topic.
        let authorized = node.allows(&ctx, Operation::Delete, Resource::Topic(&topic.name.0));
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let Some(offset) = last_offsets.remove(&(topic.name.0.as_str(), p.partition_index)) else { continue };
            let slot = match &found {
                _ if !authorized => Err(ResponseError::TopicAuthorizationFailed),
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(t) if cluster::is_internal(&t.name) => Err(ResponseError::InvalidTopicException),
                Some(_) if offset < DELETE_TO_HIGH_WATERMARK => Err(ResponseError::OffsetOutOfRange),
                Some(t) => {
                    deletions.push(Deletion { partition: PartitionRef { topic: t.clone(), index: p.partition_index }, offset });
                    Ok(deletions.len() - 1)
                }
            };
            parts.push((p.partition_index, slot));
        }
        if !parts.is_empty() {
            plan.push((topic.name.clone(), parts));
        }
    }
    let mut results: Vec<Option<_>> = services.store().delete_records(deletions).await.into_iter().map(Some).collect();

    let topics = plan
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(index, slot)| {
                    let outcome = slot.and_then(|i| match results.get_mut(i).and_then(Option::take) {
                        Some(Ok(low_watermark)) => Ok(low_watermark),
                        Some(Err(e)) => Err(e.code()),
                        None => Err(ResponseError::UnknownServerError),
                    });
                    let result = DeleteRecordsPartitionResult::default().with_partition_index(index);
                    match outcome {
                        Ok(low_watermark) => result.with_low_watermark(low_watermark),
                        Err(code) => result.with_low_watermark(-1).with_error_code(code.code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    Ok(Handled::Now(ctx.respond(&DeleteRecordsResponse::default().with_topics(topics))))
}
