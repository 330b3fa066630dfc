//! CreateAcls (key 30): ACLs made through the metadata group, for `kafka-acls --add`, the admin
//! clients' createAcls and operators such as Strimzi's. Needs ALTER on the cluster, and
//! `[authorization]` configured (without it every request is allowed, and Kafka answers
//! SECURITY_DISABLED).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::security::acl::{AclBinding, Operation, Resource};

/// v0 was removed by Kafka 4 (KIP-896).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::CreateAcls, CreateAclsRequest, 1, 3);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: CreateAclsRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let refused = |error: ResponseError, message: &str| {
        let result = failed(error, message.to_string());
        let response = CreateAclsResponse::default().with_results(vec![result; request.creations.len()]);
        Ok(Handled::Now(ctx.respond(&response)))
    };
    if let Some((error, message)) = refusal(&node, &ctx) {
        return refused(error, message);
    }
    let bindings: Vec<Result<AclBinding, String>> = request.creations.iter().map(binding).map(|b| b.validate().map(|()| b)).collect();
    Ok(Handled::Later(Box::pin(async move {
        let valid: Vec<AclBinding> = bindings.iter().filter_map(|b| b.as_ref().ok().cloned()).collect();
        let made = match valid.is_empty() {
            true => Ok(()),
            false => crate::cluster::acls::create(&node, valid).await.map_err(|e| (e.error_code(), e.to_string())),
        };
        let results = bindings
            .into_iter()
            .map(|b| match (b, &made) {
                (Err(reason), _) => failed(ResponseError::InvalidRequest, reason),
                (Ok(_), Err((error, reason))) => failed(*error, reason.clone()),
                (Ok(_), Ok(())) => AclCreationResult::default(),
            })
            .collect();
        ctx.respond(&CreateAclsResponse::default().with_results(results))
    })))
}

/// Why CreateAcls and DeleteAcls are refused whole, if they are: SECURITY_DISABLED without
/// `[authorization]`, as Kafka without an authorizer; ALTER on the cluster, as Kafka asks.
pub(super) fn refusal(node: &Node, ctx: &RequestContext) -> Option<(ResponseError, &'static str)> {
    if node.authorizer.is_open() {
        Some((ResponseError::SecurityDisabled, "No Authorizer is configured."))
    } else if !node.allows(ctx, Operation::Alter, Resource::Cluster) {
        Some((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed."))
    } else {
        None
    }
}

fn binding(creation: &AclCreation) -> AclBinding {
    AclBinding {
        resource_type: creation.resource_type,
        name: creation.resource_name.to_string(),
        pattern: creation.resource_pattern_type,
        principal: creation.principal.to_string(),
        host: creation.host.to_string(),
        operation: creation.operation,
        permission: creation.permission_type,
    }
}

fn failed(error: ResponseError, message: String) -> AclCreationResult {
    AclCreationResult::default().with_error_code(error.code()).with_error_message(Some(StrBytes::from_string(message)))
}
