//! CreatePartitions (key 37): grow a topic.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::{self, TopicError};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::CreatePartitions, CreatePartitionsRequest, 0, 3);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: CreatePartitionsRequest = ctx.decode(body)?;
    let node_id = services.node().node_id;
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let bad_assignment = topic.assignments.iter().flatten().any(|a| a.broker_ids.len() != 1 || a.broker_ids[0].0 != node_id);
        let outcome = if !services.node().allows(&ctx, Operation::Alter, Resource::Topic(&topic.name.0)) {
            Err(TopicError::Unauthorized)
        } else if bad_assignment {
            Err(TopicError::InvalidReplicaAssignment(format!("new partitions must be assigned to broker {node_id} only")))
        } else {
            cluster::grow_topic(services.node(), &topic.name.0, topic.count, request.validate_only).await
        };
        let mut result = CreatePartitionsTopicResult::default().with_name(topic.name);
        if let Err(e) = outcome {
            result = result.with_error_code(e.error_code().code()).with_error_message(Some(StrBytes::from_string(e.to_string())));
        }
        results.push(result);
    }
    Ok(Handled::Now(ctx.respond(&CreatePartitionsResponse::default().with_results(results))))
}
