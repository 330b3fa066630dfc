//! CreateTopics (key 19).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::topic_config::TopicConfig;
use crate::cluster::{self, TopicError};
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::CreateTopics, CreateTopicsRequest, 2, 7);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: CreateTopicsRequest = ctx.decode(body)?;
    let mut counts: HashMap<StrBytes, usize> = HashMap::new();
    for t in &request.topics {
        *counts.entry(t.name.0.clone()).or_default() += 1;
    }
    let node = services.node();
    let cluster_create = node.allows(&ctx, Operation::Create, Resource::Cluster);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.clone();
        let mut result = CreatableTopicResult::default().with_name(name.clone());
        if counts[&name.0] > 1 {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_string(format!("topic '{}' appears more than once in the request", &*name.0)))),
            );
            continue;
        }
        if !cluster_create && !node.allows(&ctx, Operation::Create, Resource::Topic(&name.0)) {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(StrBytes::from_static_str("Authorization failed."))),
            );
            continue;
        }
        match create(services.node(), topic, request.validate_only).await {
            Ok((partitions, config, id)) => {
                result = result.with_num_partitions(partitions).with_replication_factor(1).with_topic_id(id);
                if ctx.api_version >= 5 {
                    let defaults = &services.node().config.topics.defaults;
                    let configs = config
                        .entries(defaults)
                        .into_iter()
                        .map(|e| {
                            CreatableTopicConfigs::default()
                                .with_name(StrBytes::from_static_str(e.name))
                                .with_value(Some(StrBytes::from_string(e.value)))
                                .with_config_source(e.source.code())
                        })
                        .collect();
                    result = result.with_configs(Some(configs));
                }
            }
            Err(e) => {
                result = result.with_error_code(e.error_code().code()).with_error_message(Some(StrBytes::from_string(e.to_string())));
            }
        }
        results.push(result);
    }
    Ok(Handled::Now(ctx.respond(&CreateTopicsResponse::default().with_topics(results))))
}

async fn create(node: &Arc<Node>, topic: CreatableTopic, validate_only: bool) -> Result<(i32, TopicConfig, uuid::Uuid), TopicError> {
    let partitions = match (topic.num_partitions, topic.assignments.is_empty()) {
        (-1, true) => node.config.topics.default_partitions,
        (n, true) => n,
        (-1, false) => {
            for a in &topic.assignments {
                if a.broker_ids.iter().any(|b| b.0 != node.node_id) || a.broker_ids.len() != 1 {
                    return Err(TopicError::InvalidReplicaAssignment(format!(
                        "partition {} must be assigned to broker {} only",
                        a.partition_index, node.node_id
                    )));
                }
            }
            topic.assignments.len() as i32
        }
        (_, false) => {
            return Err(TopicError::InvalidPartitions("both num_partitions and manual assignments were given".into()));
        }
    };
    if partitions < 1 {
        return Err(TopicError::InvalidPartitions(format!("number of partitions must be larger than 0, got {partitions}")));
    }
    match topic.replication_factor {
        -1 | 1 => {}
        rf if rf < 1 => return Err(TopicError::InvalidReplicationFactor(format!("replication factor must be larger than 0, got {rf}"))),
        rf => return Err(TopicError::InvalidReplicationFactor(format!("replication factor: {rf} larger than available brokers: 1"))),
    }
    let config = TopicConfig::from_pairs(topic.configs.iter().map(|c| (&*c.name, c.value.as_deref())))?;
    config.check_new_topic()?;
    let created = cluster::create_topic(node, &topic.name.0, partitions, config.clone(), validate_only).await?;
    Ok((partitions, config, created.map_or(uuid::Uuid::nil(), |t| t.id)))
}
