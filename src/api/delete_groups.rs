//! DeleteGroups (key 42), v0–v2: Empty groups only; their offsets go with them. Each group needs
//! DELETE.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, GroupId};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

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
    // Groups the principal may not delete are not looked up (`None`).
    let mut pending = Vec::with_capacity(unique.len());
    for group in unique {
        let reply = if services.node().allows(&ctx, Operation::Delete, Resource::Group(&group)) {
            Some(services.groups().delete_group(group.to_string()).await)
        } else {
            None
        };
        pending.push((group, reply));
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(pending.len());
        for (group, reply) in pending {
            let code = match reply {
                Some(reply) => reply.await.unwrap_or_else(|e| e.code()),
                None => ResponseError::GroupAuthorizationFailed.code(),
            };
            results.push(DeletableGroupResult::default().with_group_id(group).with_error_code(code));
        }
        ctx.respond(&DeleteGroupsResponse::default().with_results(results))
    })))
}
