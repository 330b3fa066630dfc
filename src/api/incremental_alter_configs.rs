//! IncrementalAlterConfigs (key 44): a topic's or a consumer group's configs set, deleted,
//! appended to or subtracted from, key by key (`kafka-configs --alter`, the admin clients'
//! incrementalAlterConfigs).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::ResponseError;

use super::config_changes::{answer_all, distinct_keys, resource_types, topic_refusal, Outcome, GROUP};
use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::group_config;
use crate::cluster::topic_config::ConfigOp;
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::upstream::admin::incremental_alter_configs;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::IncrementalAlterConfigs, IncrementalAlterConfigsRequest, 0, 1);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: IncrementalAlterConfigsRequest = ctx.decode(body)?;
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
                GROUP => change_group(&node, resource, validate_only).await,
                _ => change_topic(&node, resource, validate_only).await,
            },
            async |keeper, resources| incremental_alter_configs(keeper, version, resources, validate_only).await,
        )
        .await;
        ctx.respond(&IncrementalAlterConfigsResponse::default().with_responses(responses))
    })))
}

/// INVALID_REQUEST for a key named twice, an unknown operation or a null value to set, append
/// or subtract.
fn checked(resource: &AlterConfigsResource) -> Outcome {
    distinct_keys(resource.configs.iter().map(|c| &*c.name))?;
    for config in &resource.configs {
        match (ConfigOp::from_code(config.config_operation), &config.value) {
            (None, _) => return Err((ResponseError::InvalidRequest, format!("unknown config operation {}", config.config_operation))),
            (Some(ConfigOp::Delete), _) | (_, Some(_)) => {}
            (_, None) => return Err((ResponseError::InvalidRequest, format!("Null value not supported for : {}", &*config.name))),
        }
    }
    Ok(())
}

/// Applies one topic resource's operations (already [`checked`]), all of them or none.
async fn change_topic(node: &std::sync::Arc<Node>, resource: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let changes = operations(resource);
    crate::cluster::configure_topic(node, &resource.resource_name, |current| current.altered(changes), validate_only)
        .await
        .map_err(topic_refusal)
}

/// Applies one group resource's operations (already [`checked`]), all of them or none.
async fn change_group(node: &std::sync::Arc<Node>, resource: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let groups = &node.config.groups;
    let alter = |current| group_config::altered(current, operations(resource), groups);
    crate::cluster::configure_group(node, &resource.resource_name, alter, validate_only).await
}

/// A resource's operations, each with its key and value (none for DELETE).
fn operations(resource: &AlterConfigsResource) -> impl Iterator<Item = (ConfigOp, &str, &str)> {
    resource.configs.iter().filter_map(|c| {
        let op = ConfigOp::from_code(c.config_operation)?;
        Some((op, &*c.name, c.value.as_deref().unwrap_or_default()))
    })
}

resource_types!(AlterConfigsResource, AlterConfigsResourceResponse);
