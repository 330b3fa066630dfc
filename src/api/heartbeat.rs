//! Heartbeat (key 12), v0–v4.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::classic;
use crate::protocol::RequestContext;
use crate::security::acl::Operation;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Heartbeat, HeartbeatRequest, 0, 4);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: HeartbeatRequest = ctx.decode(body)?;
    if let Some(e) = groups::refusal(services.as_ref(), &ctx, Operation::Read, &request.group_id) {
        return Ok(Handled::Now(ctx.respond(&HeartbeatResponse::default().with_error_code(e.code()))));
    }
    let beat = classic::HeartbeatRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
    };
    let answer = services.groups().heartbeat(beat).await;
    Ok(Handled::Later(Box::pin(async move {
        let code = answer.await.unwrap_or_else(|e| e.code());
        services.metrics().group_answered(ApiKey::Heartbeat, code);
        ctx.respond(&HeartbeatResponse::default().with_error_code(code))
    })))
}
