//! ListGroups (key 16), v0–v5: every group this node coordinates, from every shard.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{ApiKey, GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ListGroups, ListGroupsRequest, 0, 5);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ListGroupsRequest = ctx.decode(body)?;
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_string()).collect();
    // DESCRIBE on the cluster shows every group; without it, those the principal may describe.
    let every_group = services.node().allows(&ctx, Operation::Describe, Resource::Cluster);
    let listed = services.groups().list_groups(states, types).await;
    Ok(Handled::Later(Box::pin(async move {
        let node = services.node();
        let mut groups: Vec<ListedGroup> = listed
            .await
            .into_iter()
            .filter(|g| every_group || node.allows(&ctx, Operation::Describe, Resource::Group(&g.group_id)))
            .map(|g| {
                ListedGroup::default()
                    .with_group_id(GroupId(StrBytes::from_string(g.group_id)))
                    .with_protocol_type(StrBytes::from_string(g.protocol_type))
                    .with_group_state(StrBytes::from_static_str(g.state))
                    .with_group_type(StrBytes::from_static_str(g.group_type))
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
        ctx.respond(&ListGroupsResponse::default().with_groups(groups))
    })))
}
