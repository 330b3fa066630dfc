//! DeleteGroups (key 42), v0–v2: Empty groups only; their offsets go with them.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, GroupId};
use kafka_protocol::ResponseError;

use super::{api_entry, groups, ApiEntry, Handled, HandlerResult};
use crate::coordinator::state::Response;
use crate::protocol::RequestContext;
use crate::runtime::Shard;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DeleteGroups, DeleteGroupsRequest, 0, 2);

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
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
        let id = group.to_string();
        let reply = groups::call(&shard, &id.clone(), move |_, runner| {
            let (token, rx) = runner.waiter();
            runner.with_state(|state, now| state.delete_groups(now, &[id], token));
            rx
        })
        .await;
        pending.push((group, reply));
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(pending.len());
        for (group, reply) in pending {
            let code = match groups::resolve(reply.await) {
                Ok(rx) => match rx.await {
                    Ok(Response::DeleteGroups(codes)) => codes.first().copied().unwrap_or(0),
                    _ => ResponseError::CoordinatorNotAvailable.code(),
                },
                Err(e) => e.code(),
            };
            results.push(DeletableGroupResult::default().with_group_id(group).with_error_code(code));
        }
        ctx.respond(&DeleteGroupsResponse::default().with_results(results))
    })))
}
