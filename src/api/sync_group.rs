//! SyncGroup (key 14), v0–v5: the leader's assignment, stored, then handed to every member.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::requests::{SyncRequest, SyncResult};
use crate::protocol::RequestContext;
use crate::security::acl::Operation;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::SyncGroup, SyncGroupRequest, 0, 5);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: SyncGroupRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    // KIP-559: v5 must name the protocol type and name (checked before anything else).
    if version >= 5 && (request.protocol_type.is_none() || request.protocol_name.is_none()) {
        let response = shape(SyncResult::error(ResponseError::InconsistentGroupProtocol), version);
        return Ok(Handled::Now(ctx.respond(&response)));
    }
    if let Some(e) = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id) {
        return Ok(Handled::Now(ctx.respond(&shape(SyncResult::error(e), version))));
    }
    let sync = SyncRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        protocol_type: request.protocol_type.map(|p| p.to_string()),
        protocol_name: request.protocol_name.map(|p| p.to_string()),
        assignments: request.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect(),
    };
    let answer = services.groups().sync(sync).await;
    Ok(Handled::Later(Box::pin(async move {
        let result = answer.await.unwrap_or_else(SyncResult::error);
        services.metrics().group_answered(ApiKey::SyncGroup, result.error);
        ctx.respond(&shape(result, version))
    })))
}

fn shape(r: SyncResult, version: i16) -> SyncGroupResponse {
    let response = SyncGroupResponse::default().with_error_code(r.error).with_assignment(r.assignment);
    if version >= 5 {
        response
            .with_protocol_type(r.protocol_type.map(StrBytes::from_string))
            .with_protocol_name(r.protocol_name.map(StrBytes::from_string))
    } else {
        response
    }
}
