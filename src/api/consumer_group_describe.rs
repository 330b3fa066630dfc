//! ConsumerGroupDescribe (key 69), v0–v1: KIP-848 groups, their members and assignments.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::coordinator::consumer::TopicView;
use crate::coordinator::records::TopicPartitions as Partitions;
use crate::protocol::RequestContext;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ConsumerGroupDescribe, ConsumerGroupDescribeRequest, 0, 1);

/// READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: everything, as without an authorizer.
const ALL_GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);
/// KIP-1099 member types (v1): a classic-protocol member of the group, a consumer-protocol one.
const CLASSIC_MEMBER: i8 = 0;
const CONSUMER_MEMBER: i8 = 1;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ConsumerGroupDescribeRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    let mut pending = Vec::with_capacity(request.group_ids.len());
    for group in request.group_ids {
        let reply = services.groups().describe_consumer_group(group.to_string()).await;
        pending.push((group, reply));
    }
    let include_operations = request.include_authorized_operations;
    Ok(Handled::Later(Box::pin(async move {
        let catalog = &services.node().catalog;
        let assignment = |p: Partitions| {
            Assignment::default().with_topic_partitions(
                p.into_iter()
                    .map(|(id, parts)| {
                        let name = catalog.by_id(id).map(|(n, _)| n).unwrap_or_default();
                        TopicPartitions::default()
                            .with_topic_id(id)
                            .with_topic_name(TopicName(StrBytes::from_string(name)))
                            .with_partitions(parts.into_iter().collect())
                    })
                    .collect(),
            )
        };
        let mut described = Vec::with_capacity(pending.len());
        for (group, reply) in pending {
            let base = DescribedGroup::default().with_group_id(group.clone());
            let entry = if group.is_empty() {
                base.with_error_code(ResponseError::InvalidGroupId.code())
                    .with_error_message(Some(StrBytes::from_static_str("GroupId can't be empty.")))
            } else {
                match reply.await {
                    Err(e) => base.with_error_code(e.code()),
                    Ok(None) => base
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(StrBytes::from_string(format!("Group {} not found.", &*group)))),
                    Ok(Some(g)) => {
                        let members = g
                            .members
                            .into_iter()
                            .map(|m| {
                                let member = Member::default()
                                    .with_member_id(StrBytes::from_string(m.member_id))
                                    .with_instance_id(m.instance_id.map(StrBytes::from_string))
                                    .with_rack_id(m.rack_id.map(StrBytes::from_string))
                                    .with_member_epoch(m.epoch)
                                    .with_client_id(StrBytes::from_string(m.client_id))
                                    .with_client_host(StrBytes::from_string(m.client_host))
                                    .with_subscribed_topic_names(
                                        m.subscribed_names.into_iter().map(|n| TopicName(StrBytes::from_string(n))).collect(),
                                    )
                                    // Kafka 4.4 describes "no regex" as "", not null.
                                    .with_subscribed_topic_regex(Some(StrBytes::from_string(m.subscribed_regex.unwrap_or_default())))
                                    .with_assignment(assignment(m.assignment))
                                    .with_target_assignment(assignment(m.target));
                                if version >= 1 {
                                    member.with_member_type(if m.classic { CLASSIC_MEMBER } else { CONSUMER_MEMBER })
                                } else {
                                    member
                                }
                            })
                            .collect();
                        let entry = base
                            .with_group_state(StrBytes::from_static_str(g.state))
                            .with_group_epoch(g.group_epoch)
                            .with_assignment_epoch(g.assignment_epoch)
                            .with_assignor_name(StrBytes::from_static_str(g.assignor))
                            .with_members(members);
                        if include_operations {
                            entry.with_authorized_operations(ALL_GROUP_OPERATIONS)
                        } else {
                            entry
                        }
                    }
                }
            };
            described.push(entry);
        }
        ctx.respond(&ConsumerGroupDescribeResponse::default().with_groups(described))
    })))
}
