//! DeleteAcls (key 31): the ACLs each filter matches removed through the metadata group, and
//! listed back, for `kafka-acls --remove` and the admin clients' deleteAcls. The
//! `[authorization]` rules are config and stay. Needs ALTER on the cluster.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::{ApiKey, DeleteAclsRequest, DeleteAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{AclBinding, BindingFilter, INVALID_FILTER, MAX_DELETE_FILTERS, MAX_LISTED_DELETIONS};

/// v0 was removed by Kafka 4 (KIP-896).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DeleteAcls, DeleteAclsRequest, 1, 3);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DeleteAclsRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let refused = |error: ResponseError, message: &str| {
        let result = failed(error, message.to_string());
        let response = DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()]);
        Ok(Handled::Now(ctx.respond(&response)))
    };
    if let Some((error, message)) = super::create_acls::refusal(&node, &ctx) {
        return refused(error, message);
    }
    if request.filters.len() > MAX_DELETE_FILTERS {
        return refused(ResponseError::InvalidRequest, &format!("at most {MAX_DELETE_FILTERS} filters in one request"));
    }
    Ok(Handled::Later(Box::pin(async move {
        let filters: Vec<BindingFilter<'_>> = request.filters.iter().map(filter).collect();
        let valid: Vec<BindingFilter<'_>> = filters.iter().filter(|f| f.is_valid()).cloned().collect();
        let mut deleted = match crate::cluster::acls::delete(&node, &valid).await {
            Ok(Ok(removed)) => Ok(removed.into_iter()),
            Ok(Err(too_many)) => Err((ResponseError::InvalidRequest, too_many)),
            Err(e) => Err((e.error_code(), e.to_string())),
        };
        let results = filters
            .iter()
            .map(|f| match (&mut deleted, f.is_valid()) {
                (_, false) => failed(ResponseError::InvalidRequest, INVALID_FILTER.to_string()),
                (Err((error, reason)), true) => failed(*error, reason.clone()),
                (Ok(removed), true) => match removed.next().unwrap_or(Some(Vec::new())) {
                    Some(matched) => DeleteAclsFilterResult::default()
                        .with_error_message(None)
                        .with_matching_acls(matched.into_iter().map(matching).collect()),
                    None => failed(
                        ResponseError::InvalidRequest,
                        format!("with the filters before it, this one would list more than {MAX_LISTED_DELETIONS} ACLs; send it alone"),
                    ),
                },
            })
            .collect();
        ctx.respond(&DeleteAclsResponse::default().with_filter_results(results))
    })))
}

fn filter(f: &DeleteAclsFilter) -> BindingFilter<'_> {
    BindingFilter {
        resource_type: f.resource_type_filter,
        name: f.resource_name_filter.as_deref(),
        pattern_type: f.pattern_type_filter,
        principal: f.principal_filter.as_deref(),
        host: f.host_filter.as_deref(),
        operation: f.operation,
        permission: f.permission_type,
    }
}

fn matching(acl: AclBinding) -> DeleteAclsMatchingAcl {
    // No message where nothing failed, as Kafka answers.
    DeleteAclsMatchingAcl::default()
        .with_error_message(None)
        .with_resource_type(acl.resource_type)
        .with_resource_name(StrBytes::from_string(acl.name))
        .with_pattern_type(acl.pattern)
        .with_principal(StrBytes::from_string(acl.principal))
        .with_host(StrBytes::from_string(acl.host))
        .with_operation(acl.operation)
        .with_permission_type(acl.permission)
}

fn failed(error: ResponseError, message: String) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default().with_error_code(error.code()).with_error_message(Some(StrBytes::from_string(message)))
}
