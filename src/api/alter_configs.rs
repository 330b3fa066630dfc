//! AlterConfigs (key 33), the older way to change configs: a topic's or a consumer group's
//! explicitly set configs replaced as a whole by those the request names (kafka-python's and
//! KafkaJS's alterConfigs).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ApiKey};
use kafka_protocol::ResponseError;

use super::config_changes::{answer_all, distinct_keys, resource_types, topic_refusal, Outcome, GROUP};
use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::group_config;
use crate::cluster::topic_config::TopicConfig;
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::upstream::admin::alter_configs;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::AlterConfigs, AlterConfigsRequest, 0, 2);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: AlterConfigsRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let validate_only = request.validate_only;
    Ok(Handled::Later(Box::pin(async move {
        let version = ctx.api_version;
        let responses = answer_all(
            &node,
            &ctx,
            request.resources,
            checked,
            async |resource| match resource.resource_type {
                GROUP => replace_group_configs(&node, resource, validate_only).await,
                _ => replace_topic_configs(&node, resource, validate_only).await,
            },
            async |keeper, resources| alter_configs(keeper, version, resources, validate_only).await,
        )
        .await;
        ctx.respond(&AlterConfigsResponse::default().with_responses(responses))
    })))
}

/// INVALID_REQUEST for a key named twice or a null value, as Kafka refuses them.
fn checked(resource: &AlterConfigsResource) -> Outcome {
    distinct_keys(resource.configs.iter().map(|c| &*c.name))?;
    match resource.configs.iter().find(|c| c.value.is_none()) {
        Some(null) => Err((ResponseError::InvalidRequest, format!("Null value not supported for : {}", &*null.name))),
        None => Ok(()),
    }
}

/// Replaces one topic's set configs with the resource's (already [`checked`]).
async fn replace_topic_configs(node: &std::sync::Arc<Node>, resource: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let pairs = resource.configs.iter().map(|c| (&*c.name, c.value.as_deref()));
    crate::cluster::configure_topic(node, &resource.resource_name, |_| TopicConfig::from_pairs(pairs), validate_only)
        .await
        .map_err(topic_refusal)
}

/// Replaces one group's own configs with the resource's (already [`checked`]).
async fn replace_group_configs(node: &std::sync::Arc<Node>, resource: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let pairs = resource.configs.iter().map(|c| (&*c.name, c.value.as_deref().unwrap_or_default()));
    let replace = |_| group_config::replaced(pairs, &node.config.groups);
    crate::cluster::configure_group(node, &resource.resource_name, replace, validate_only).await
}

resource_types!(AlterConfigsResource, AlterConfigsResourceResponse);
