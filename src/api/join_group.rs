//! JoinGroup (key 11), v0–v9: parked on the coordinator until the join phase completes.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{ApiKey, JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::StrBytes;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::requests::{JoinRequest, JoinResult};
use crate::protocol::RequestContext;
use crate::security::acl::Operation;

/// Served from v0: librdkafka before 2.11 enables its consumer groups only if v0 is listed
/// (KAFKA-19444).
pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::JoinGroup, JoinGroupRequest, 0, 9);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: JoinGroupRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    if let Some(e) = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id) {
        // Kafka's error answer names no member.
        return Ok(Handled::Now(ctx.respond(&shape(JoinResult::error(e, ""), version))));
    }
    let join = JoinRequest {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata)).collect(),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout serves as one (not -1: brod#465).
        rebalance_timeout_ms: if version == 0 { request.session_timeout_ms } else { request.rebalance_timeout_ms },
        client_id: groups::client_id(&ctx),
        client_host: groups::client_host(&ctx),
        version,
    };
    let member_id = join.member_id.clone();
    let answer = services.groups().join(join, ctx.caller()).await;
    Ok(Handled::Later(Box::pin(async move {
        let result = answer.await.unwrap_or_else(|e| JoinResult::error(e, &member_id));
        services.metrics().group_answered(ApiKey::JoinGroup, result.error);
        ctx.respond(&shape(result, version))
    })))
}

/// Version shaping: protocol name is "" (not null) before v7, protocol type and SkipAssignment
/// exist only from v7 and v9, instance ids from v5.
fn shape(r: JoinResult, version: i16) -> JoinGroupResponse {
    let name = r.protocol_name.map(StrBytes::from_string);
    let mut response = JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation)
        .with_leader(StrBytes::from_string(r.leader))
        .with_member_id(StrBytes::from_string(r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(StrBytes::from_string(m.member_id))
                        .with_group_instance_id(if version >= 5 { m.instance_id.map(StrBytes::from_string) } else { None })
                        .with_metadata(m.metadata)
                })
                .collect(),
        );
    response = if version >= 7 {
        response.with_protocol_type(r.protocol_type.map(StrBytes::from_string)).with_protocol_name(name)
    } else {
        response.with_protocol_name(Some(name.unwrap_or_default()))
    };
    if version >= 9 {
        response = response.with_skip_assignment(r.skip_assignment);
    }
    response
}
