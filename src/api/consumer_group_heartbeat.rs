//! ConsumerGroupHeartbeat (key 68), v0–v1: the KIP-848 consumer protocol. The coordinator
//! computes assignments; each heartbeat moves the member one step toward its target.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::consumer_group::{ConsumerHeartbeat, HeartbeatAnswer};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ConsumerGroupHeartbeat, ConsumerGroupHeartbeatRequest, 0, 1);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ConsumerGroupHeartbeatRequest = ctx.decode(body)?;
    let node = services.node();
    let refusal = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id).or_else(|| {
        // Every topic named needs DESCRIBE: Kafka refuses the heartbeat rather than leave one
        // out. (The topics a regex matches are filtered instead, as it is resolved.)
        let mut names = request.subscribed_topic_names.iter().flatten();
        names.any(|t| !node.allows(&ctx, Operation::Describe, Resource::Topic(t))).then(|| {
            services.metrics().group_answered(ApiKey::ConsumerGroupHeartbeat, ResponseError::TopicAuthorizationFailed.code());
            ResponseError::TopicAuthorizationFailed
        })
    });
    if let Some(e) = refusal {
        return Ok(Handled::Now(ctx.respond(&ConsumerGroupHeartbeatResponse::default().with_error_code(e.code()))));
    }
    let beat = ConsumerHeartbeat {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|s| s.to_string()),
        rack_id: request.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_names: request.subscribed_topic_names.map(|names| names.into_iter().map(|n| n.to_string()).collect()),
        subscribed_regex: request.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: request.server_assignor.map(|s| s.to_string()),
        owned: request.topic_partitions.map(|tps| {
            let mut owned = crate::coordinator::records::TopicPartitions::new();
            for tp in tps {
                owned.entry(tp.topic_id).or_default().extend(tp.partitions);
            }
            owned
        }),
        client_id: groups::client_id(&ctx),
        client_host: groups::client_host(&ctx),
        version: ctx.api_version,
    };
    // In front of an upstream, a topic created there by another client (a sidecar) is unknown
    // here until the next refresh: a subscription naming one asks for it now.
    if let (Some(upstream), Some(names)) = (&services.node().upstream, &beat.subscribed_names) {
        if names.iter().any(|n| services.node().catalog.get(n).is_none()) {
            upstream.mark_stale();
        }
    }
    let answer = services.groups().consumer_heartbeat(beat, ctx.caller()).await;
    Ok(Handled::Later(Box::pin(async move {
        let answer = answer.await.unwrap_or_else(|e| HeartbeatAnswer {
            error: e.code(),
            message: None,
            member_id: None,
            epoch: 0,
            interval_ms: 0,
            assignment: None,
        });
        services.metrics().group_answered(ApiKey::ConsumerGroupHeartbeat, answer.error);
        ctx.respond(&shape(answer))
    })))
}

fn shape(a: HeartbeatAnswer) -> ConsumerGroupHeartbeatResponse {
    let mut response = ConsumerGroupHeartbeatResponse::default()
        .with_error_code(a.error)
        .with_error_message(a.message.map(StrBytes::from_string))
        .with_member_id(a.member_id.map(StrBytes::from_string))
        .with_member_epoch(a.epoch)
        .with_heartbeat_interval_ms(a.interval_ms);
    if a.error == ResponseError::UnknownServerError.code() {
        return response;
    }
    if let Some(assignment) = a.assignment {
        response = response.with_assignment(Some(
            Assignment::default().with_topic_partitions(
                assignment
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TopicPartitions::default().with_topic_id(topic).with_partitions(partitions.into_iter().collect())
                    })
                    .collect(),
            ),
        ));
    }
    response
}
