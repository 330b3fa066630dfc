//! OffsetDelete (key 47), v0 (KIP-496). Needs DELETE on the group and READ on each topic.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{ApiKey, OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::OffsetDelete, OffsetDeleteRequest, 0, 0);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: OffsetDeleteRequest = ctx.decode(body)?;
    let node = services.node();
    if !node.allows(&ctx, Operation::Delete, Resource::Group(&request.group_id)) {
        let response = OffsetDeleteResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
        return Ok(Handled::Now(ctx.respond(&response)));
    }
    // Topics without READ, then unknown topics and partitions, are answered here; the rest go to
    // the coordinator.
    let mut layout = Vec::with_capacity(request.topics.len());
    let mut valid: Vec<(String, Vec<i32>)> = Vec::new();
    for topic in &request.topics {
        let refused = !node.allows(&ctx, Operation::Read, Resource::Topic(&topic.name));
        let known = node.catalog.get(&topic.name.0);
        let mut parts = Vec::new();
        let mut ok = Vec::new();
        for p in &topic.partitions {
            if refused {
                parts.push((p.partition_index, Some(ResponseError::TopicAuthorizationFailed.code())));
            } else if known.as_ref().is_some_and(|t| t.partition(p.partition_index).is_some()) {
                ok.push(p.partition_index);
                parts.push((p.partition_index, None));
            } else {
                parts.push((p.partition_index, Some(ResponseError::UnknownTopicOrPartition.code())));
            }
        }
        let position = (!ok.is_empty()).then(|| {
            valid.push((topic.name.to_string(), ok));
            valid.len() - 1
        });
        layout.push((topic.name.clone(), position, parts));
    }
    let group_id = request.group_id.to_string();
    if group_id.is_empty() {
        let response = OffsetDeleteResponse::default().with_error_code(ResponseError::InvalidGroupId.code());
        return Ok(Handled::Now(ctx.respond(&response)));
    }
    let answer = services.groups().delete_offsets(group_id, valid).await;
    Ok(Handled::Later(Box::pin(async move {
        let response = match answer.await {
            Err(e) | Ok(Err(e)) => OffsetDeleteResponse::default().with_error_code(e.code()),
            Ok(Ok(codes)) => OffsetDeleteResponse::default().with_topics(
                layout
                    .into_iter()
                    .map(|(name, position, parts)| {
                        let mut deleted = position.and_then(|i| codes.get(i)).map(|c| c.iter()).into_iter().flatten();
                        OffsetDeleteResponseTopic::default().with_name(name).with_partitions(
                            parts
                                .into_iter()
                                .map(|(index, error)| {
                                    let code = error.unwrap_or_else(|| deleted.next().copied().unwrap_or(0));
                                    OffsetDeleteResponsePartition::default().with_partition_index(index).with_error_code(code)
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            ),
        };
        ctx.respond(&response)
    })))
}
