//! ListGroups (key 16), v0–v5: every group this node coordinates, from every shard.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{ApiKey, GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{api_entry, ApiEntry, Handled, HandlerResult};
use crate::protocol::RequestContext;
use crate::runtime::Shard;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ListGroups, ListGroupsRequest, 0, 5);

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ListGroupsRequest = ctx.decode(body)?;
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_string()).collect();
    let mesh = &shard.node.mesh;
    let mut pending = Vec::with_capacity(mesh.shard_count());
    for target in 0..mesh.shard_count() {
        let (states, types) = (states.clone(), types.clone());
        let reply = mesh
            .call(&shard, target, move |owner| {
                owner.coordinators().iter().flat_map(|r| r.state.borrow().list_groups(&states, &types)).collect::<Vec<_>>()
            })
            .await;
        pending.push(reply);
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut groups = Vec::new();
        for reply in pending {
            if let Ok(list) = reply.await {
                groups.extend(list.into_iter().map(|g| {
                    ListedGroup::default()
                        .with_group_id(GroupId(StrBytes::from_string(g.group_id)))
                        .with_protocol_type(StrBytes::from_string(g.protocol_type))
                        .with_group_state(StrBytes::from_static_str(g.state))
                        .with_group_type(StrBytes::from_static_str(g.group_type))
                }));
            }
        }
        groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
        ctx.respond(&ListGroupsResponse::default().with_groups(groups))
    })))
}
