//! LeaveGroup (key 13), v0–v5: one member (v0–v2) or a batch (v3+, KIP-345).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{ApiKey, LeaveGroupRequest, LeaveGroupResponse};
use kafka_protocol::protocol::StrBytes;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::Operation;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::LeaveGroup, LeaveGroupRequest, 0, 5);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: LeaveGroupRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    if let Some(e) = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id) {
        // A group-level error, without the members (as Kafka answers at every version).
        return Ok(Handled::Now(ctx.respond(&LeaveGroupResponse::default().with_error_code(e.code()))));
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request.members.iter().map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string()))).collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let answer = services.groups().leave(request.group_id.to_string(), members.clone()).await;
    Ok(Handled::Later(Box::pin(async move {
        let (error, codes) = match answer.await {
            Ok(result) => (result.error, result.members),
            Err(e) => (e.code(), vec![e.code(); members.len()]),
        };
        let first_failed = codes.iter().copied().find(|&c| c != 0).unwrap_or(0);
        services.metrics().group_answered(ApiKey::LeaveGroup, if error != 0 { error } else { first_failed });
        let response = if version >= 3 {
            LeaveGroupResponse::default().with_error_code(error).with_members(
                members
                    .into_iter()
                    .zip(codes)
                    .map(|((member, instance), code)| {
                        MemberResponse::default()
                            .with_member_id(StrBytes::from_string(member))
                            .with_group_instance_id(instance.map(StrBytes::from_string))
                            .with_error_code(code)
                    })
                    .collect(),
            )
        } else {
            // v0–v2: a top-level error wins, else the single member's.
            let code = if error != 0 { error } else { codes.first().copied().unwrap_or(0) };
            LeaveGroupResponse::default().with_error_code(code)
        };
        ctx.respond(&response)
    })))
}
