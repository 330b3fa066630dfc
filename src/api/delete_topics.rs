//! DeleteTopics (key 20): by name (v1–v5) or by name or id (v6).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DeleteTopics, DeleteTopicsRequest, 1, 6);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DeleteTopicsRequest = ctx.decode(body)?;
    let targets: Vec<(Option<TopicName>, Uuid)> = if ctx.api_version >= 6 {
        request.topics.into_iter().map(|t| (t.name, t.topic_id)).collect()
    } else {
        request.topic_names.into_iter().map(|n| (Some(n), Uuid::nil())).collect()
    };
    let catalog = &services.node().catalog;
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let topic = match &name {
            Some(n) => catalog.get(&n.0),
            None => catalog.get_by_id(id),
        };
        let mut result = DeletableTopicResult::default().with_name(name.clone()).with_topic_id(id);
        // Before existence, as Kafka: a client without DELETE learns nothing about the topic.
        let named = topic.as_ref().map(|t| t.name.as_str()).or(name.as_ref().map(|n| n.0.as_str()));
        let authorized = named.is_none_or(|n| services.node().allows(&ctx, Operation::Delete, Resource::Topic(n)));
        let outcome = match topic {
            _ if !authorized => Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string())),
            None if name.is_none() => Err((ResponseError::UnknownTopicId, "unknown topic id".to_string())),
            None => Err((ResponseError::UnknownTopicOrPartition, "this server does not host this topic".to_string())),
            Some(topic) => {
                result = result.with_name(Some(TopicName(StrBytes::from_string(topic.name.clone())))).with_topic_id(topic.id);
                cluster::delete_topic(services.node(), &topic).await.map_err(|e| (e.error_code(), e.to_string()))
            }
        };
        if let Err((code, message)) = outcome {
            result = result.with_error_code(code.code()).with_error_message(Some(StrBytes::from_string(message)));
        }
        responses.push(result);
    }
    Ok(Handled::Now(ctx.respond(&DeleteTopicsResponse::default().with_responses(responses))))
}
