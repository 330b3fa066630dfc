//! DescribeGroups (key 15), v0–v6. Each group needs DESCRIBE.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{ApiKey, DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services, NONE};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DescribeGroups, DescribeGroupsRequest, 0, 6);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DescribeGroupsRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    let include_operations = version >= 3 && request.include_authorized_operations;
    // Groups the principal may not describe are not looked up (`None`).
    let mut pending = Vec::with_capacity(request.groups.len());
    for group in request.groups {
        let reply = if services.node().allows(&ctx, Operation::Describe, Resource::Group(&group)) {
            Some(services.groups().describe(group.to_string()).await)
        } else {
            None
        };
        pending.push((group, reply));
    }
    Ok(Handled::Later(Box::pin(async move {
        let mut described = Vec::with_capacity(pending.len());
        for (group, reply) in pending {
            let base = DescribedGroup::default().with_group_id(group.clone());
            let Some(reply) = reply else {
                // As Kafka: no state, members or operations.
                described.push(base.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
                continue;
            };
            let mut entry = match reply.await {
                Err(e) => base.with_error_code(e.code()).with_group_state(StrBytes::from_static_str("Dead")),
                Ok(None) if version >= 6 => base
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(StrBytes::from_string(format!("Group {} not found.", &*group))))
                    .with_group_state(StrBytes::from_static_str("Dead")),
                Ok(None) => base.with_group_state(StrBytes::from_static_str("Dead")),
                Ok(Some(g)) => base
                    .with_group_state(StrBytes::from_static_str(g.state))
                    .with_protocol_type(StrBytes::from_string(g.protocol_type))
                    .with_protocol_data(StrBytes::from_string(g.protocol_data))
                    .with_members(
                        g.members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(StrBytes::from_string(m.member_id))
                                    .with_group_instance_id(if version >= 4 { m.instance_id.map(StrBytes::from_string) } else { None })
                                    .with_client_id(StrBytes::from_string(m.client_id))
                                    .with_client_host(StrBytes::from_string(m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    ),
            };
            // Kafka fills them in for every entry without an error (a Dead group below v6 too).
            if include_operations && entry.error_code == NONE {
                entry.authorized_operations = services.node().authorized_operations(&ctx, Resource::Group(&group));
            }
            described.push(entry);
        }
        ctx.respond(&DescribeGroupsResponse::default().with_groups(described))
    })))
}
