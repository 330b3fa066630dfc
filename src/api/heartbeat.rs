//! Heartbeat (key 12), v0–v4.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult};
use crate::coordinator::classic;
use crate::protocol::RequestContext;
use crate::runtime::Shard;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Heartbeat, HeartbeatRequest, 0, 4);

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: HeartbeatRequest = ctx.decode(body)?;
    let beat = classic::HeartbeatRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
    };
    let pending =
        groups::call(&shard, &beat.group_id.clone(), move |_, runner| runner.with_state(|state, now| state.heartbeat(now, &beat))).await;
    Ok(Handled::Later(Box::pin(async move {
        let code = groups::resolve(pending.await).unwrap_or_else(|e| e.code());
        shard.metrics.group_answered(ApiKey::Heartbeat, code);
        ctx.respond(&HeartbeatResponse::default().with_error_code(code))
    })))
}
