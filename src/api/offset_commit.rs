//! OffsetCommit (key 8), v2–v9: validated by the coordinator in Kafka's order, answered once the
//! offsets are stored.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{ApiKey, OffsetCommitRequest, OffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::offsets::{CommitOffset, CommitRequest};
use crate::protocol::RequestContext;

/// Per requested topic, per partition: an error found before reaching the coordinator, or the
/// position of its offset among those sent on.
type Layout = Vec<(kafka_protocol::messages::TopicName, Vec<(i32, Result<usize, i16>)>)>;

/// How long a commit naming a topic unknown here waits for the upstream's metadata.
const UNKNOWN_TOPIC_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::OffsetCommit, OffsetCommitRequest, 2, 9);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: OffsetCommitRequest = ctx.decode(body)?;
    let catalog = &services.node().catalog;
    if let Some(upstream) = &services.node().upstream {
        if request.topics.iter().any(|t| catalog.get(&t.name.0).is_none()) {
            upstream.look_for_new_topics(UNKNOWN_TOPIC_WAIT).await;
        }
    }
    let mut layout: Layout = Vec::new();
    let mut offsets = Vec::new();
    for topic in &request.topics {
        let known = catalog.get(&topic.name.0);
        let mut parts = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let slot = match &known {
                Some(t) if t.partition(p.partition_index).is_some() => {
                    offsets.push(CommitOffset {
                        topic: topic.name.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                    });
                    Ok(offsets.len() - 1)
                }
                _ => Err(ResponseError::UnknownTopicOrPartition.code()),
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
        ctx.respond(&OffsetCommitResponse::default().with_topics(topics))
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
