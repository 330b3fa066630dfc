//! DeleteGroups (key 42), v0–v2: Empty groups only; their offsets go with them.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, GroupId};

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DeleteGroups, DeleteGroupsRequest, 0, 2);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DeleteGroupsRequest = ctx.decode(body)?;
    // Duplicate ids are collapsed, as in Kafka.
    let mut unique: Vec<GroupId> = Vec::new();
    for g in request.groups_names {
        if !unique.contains(&g) {
            unique.push(g);
        }
    }
    let mut pending = Vec::with_capacity(unique.len());
    for group in unique {
        let reply = services.groups().delete_group(group.to_string()).await;
        pending.push((group, reply));
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(pending.len());
        for (group, reply) in pending {
            let code = reply.await.unwrap_or_else(|e| e.code());
            results.push(DeletableGroupResult::default().with_group_id(group).with_error_code(code));
        }
        ctx.respond(&DeleteGroupsResponse::default().with_results(results))
    })))
}
