//! InitProducerId (key 22): a fresh producer id for an idempotent producer.
//!
//! Transactions are not served yet; a transactional id is refused with INVALID_REQUEST (the
//! client reports it and the log says why) rather than a retriable code that would retry forever.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::metadata_group::WriteError;
use crate::cluster::TopicError;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource, ResourceType};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::InitProducerId, InitProducerIdRequest, 0, 5);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: InitProducerIdRequest = ctx.decode(body)?;
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    let response = if request.transactional_id.as_ref().is_some_and(|t| !t.0.is_empty()) {
        tracing::warn!(client = ?ctx.client_id, "refused InitProducerId with a transactional id: transactions are not supported");
        response.with_error_code(ResponseError::InvalidRequest.code())
    } else if !may_write_idempotently(services.node(), &ctx) {
        response.with_error_code(ResponseError::ClusterAuthorizationFailed.code())
    } else {
        // Idempotent producers always get a new id; a bumped epoch is not needed (KIP-360 path
        // applies to transactional producers).
        let allocated = match &services.node().upstream {
            Some(upstream) => crate::upstream::admin::init_producer_id(upstream, request.transaction_timeout_ms).await,
            None => crate::cluster::producer_ids::next_producer_id(services.node()).await.map(|id| (id, 0)),
        };
        match allocated {
            Ok((id, epoch)) => response.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
            Err(e) => {
                tracing::warn!(error = %e, code = e.error_code().code(), "no producer id for the client");
                response.with_error_code(allocation_error(&e).code())
            }
        }
    };
    Ok(Handled::Now(ctx.respond(&response)))
}

/// IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679), as Kafka requires.
fn may_write_idempotently(node: &crate::node::Node, ctx: &RequestContext) -> bool {
    let principal = ctx.principal();
    node.allows(ctx, Operation::IdempotentWrite, Resource::Cluster)
        || node.authorizer.allows_some(&principal, ctx.peer.map(|p| p.ip()), Operation::Write, ResourceType::Topic)
}

/// As Kafka answers when its broker has no block yet: retriable while the metadata group
/// elects a leader or is slow to commit, so the producer asks again.
fn allocation_error(e: &TopicError) -> ResponseError {
    match e {
        TopicError::NotController(_)
        | TopicError::Write(WriteError::Timeout(_) | WriteError::NotLeader(_) | WriteError::Unreachable { .. }) => {
            ResponseError::CoordinatorLoadInProgress
        }
        TopicError::ShardStopped(_) | TopicError::UpstreamUnavailable(_) => ResponseError::CoordinatorLoadInProgress,
        TopicError::Upstream { code, .. } => ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError),
        _ => ResponseError::UnknownServerError,
    }
}
