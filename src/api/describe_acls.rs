//! DescribeAcls (key 29): the `[authorization]` rules as Kafka's ACL bindings, then the ACLs made
//! with CreateAcls, for `kafka-acls --list` and the admin clients' describeAcls.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{ApiKey, DescribeAclsRequest, DescribeAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{BindingFilter, Operation, Resource, INVALID_FILTER};

/// v0 was removed by Kafka 4 (KIP-896).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DescribeAcls, DescribeAclsRequest, 1, 3);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DescribeAclsRequest = ctx.decode(body)?;
    let node = services.node();
    let filter = BindingFilter {
        resource_type: request.resource_type_filter,
        name: request.resource_name_filter.as_deref(),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.as_deref(),
        host: request.host_filter.as_deref(),
        operation: request.operation,
        permission: request.permission_type,
    };
    let failed = |error: ResponseError, message: &'static str| {
        DescribeAclsResponse::default().with_error_code(error.code()).with_error_message(Some(StrBytes::from_static_str(message)))
    };
    let response = if node.authorizer.is_open() {
        failed(ResponseError::SecurityDisabled, "No Authorizer is configured.")
    } else if !node.allows(&ctx, Operation::Describe, Resource::Cluster) {
        failed(ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.")
    } else if !filter.is_valid() {
        failed(ResponseError::InvalidRequest, INVALID_FILTER)
    } else {
        let mut resources: Vec<DescribeAclsResource> = Vec::new();
        // Bindings of one resource pattern are listed together, in the order first seen.
        let mut by_pattern: HashMap<(i8, i8, String), usize> = HashMap::new();
        for binding in node.authorizer.bindings().into_iter().filter(|b| filter.matches(b)) {
            let acl = AclDescription::default()
                .with_principal(StrBytes::from_string(binding.principal))
                .with_host(StrBytes::from_string(binding.host))
                .with_operation(binding.operation)
                .with_permission_type(binding.permission);
            let key = (binding.resource_type, binding.pattern, binding.name);
            match by_pattern.get(&key) {
                Some(&at) => resources[at].acls.push(acl),
                None => {
                    let resource = DescribeAclsResource::default()
                        .with_resource_type(key.0)
                        .with_resource_name(StrBytes::from_string(key.2.clone()))
                        .with_pattern_type(key.1)
                        .with_acls(vec![acl]);
                    by_pattern.insert(key, resources.len());
                    resources.push(resource);
                }
            }
        }
        DescribeAclsResponse::default().with_resources(resources)
    };
    Ok(Handled::Now(ctx.respond(&response)))
}
