//! What the group APIs take from a request besides its body.

use kafka_protocol::ResponseError;

use super::Services;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

/// Kafka renders a client's address as Java's `InetAddress.toString()`: `/10.0.0.7`.
pub(crate) fn client_host(ctx: &RequestContext) -> String {
    ctx.peer.map(|p| format!("/{}", p.ip())).unwrap_or_default()
}

pub(crate) fn client_id(ctx: &RequestContext) -> String {
    ctx.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default()
}

/// GROUP_AUTHORIZATION_FAILED if the request's principal may not perform `operation` on the
/// group. For the APIs a member sends, whose answers `corral_group_requests_total` counts: the
/// refusal is counted as one.
pub(crate) fn refusal(services: &dyn Services, ctx: &RequestContext, operation: Operation, group: &str) -> Option<ResponseError> {
    if services.node().allows(ctx, operation, Resource::Group(group)) {
        return None;
    }
    services.metrics().group_answered(ctx.api_key, ResponseError::GroupAuthorizationFailed.code());
    Some(ResponseError::GroupAuthorizationFailed)
}
