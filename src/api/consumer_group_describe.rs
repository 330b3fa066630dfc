//! ConsumerGroupDescribe (key 69), v0–v1: KIP-848 groups, their members and assignments. Each
//! group needs DESCRIBE, and so does every topic its members are assigned.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services, NONE};
use crate::coordinator::consumer::DescribedConsumerGroup;
use crate::coordinator::consumer_group::TopicView;
use crate::coordinator::records::TopicPartitions as Partitions;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::ConsumerGroupDescribe, ConsumerGroupDescribeRequest, 0, 1);

/// KIP-1099 member types (v1): a classic-protocol member of the group, a consumer-protocol one.
const CLASSIC_MEMBER: i8 = 0;
const CONSUMER_MEMBER: i8 = 1;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: ConsumerGroupDescribeRequest = ctx.decode(body)?;
    let version = ctx.api_version;
    // Groups the principal may not describe are not looked up (`None`).
    let mut pending = Vec::with_capacity(request.group_ids.len());
    for group in request.group_ids {
        let reply = if services.node().allows(&ctx, Operation::Describe, Resource::Group(&group)) {
            Some(services.groups().describe_consumer_group(group.to_string()).await)
        } else {
            None
        };
        pending.push((group, reply));
    }
    let include_operations = request.include_authorized_operations;
    Ok(Handled::Later(Box::pin(async move {
        let node = services.node();
        let catalog = &node.catalog;
        // Topics deleted since they were assigned name nothing. Without rules, all are.
        let describable = |id| {
            node.authorizer.is_open()
                || catalog.by_id(id).is_none_or(|(name, _)| node.allows(&ctx, Operation::Describe, Resource::Topic(&name)))
        };
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
            let Some(reply) = reply else {
                described.push(base.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
                continue;
            };
            let mut entry = if group.is_empty() {
                base.with_error_code(ResponseError::InvalidGroupId.code())
                    .with_error_message(Some(StrBytes::from_static_str("GroupId can't be empty.")))
            } else {
                match reply.await {
                    Err(e) => base.with_error_code(e.code()),
                    Ok(None) => base
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(StrBytes::from_string(format!("Group {} not found.", &*group)))),
                    // As Kafka: the group is not shown rather than show those topics.
                    Ok(Some(g)) if assigns_hidden_topic(&g, describable) => {
                        base.with_error_code(ResponseError::TopicAuthorizationFailed.code()).with_error_message(Some(
                            StrBytes::from_static_str("the group's assignments name topics the client may not describe"),
                        ))
                    }
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
                        base.with_group_state(StrBytes::from_static_str(g.state))
                            .with_group_epoch(g.group_epoch)
                            .with_assignment_epoch(g.assignment_epoch)
                            .with_assignor_name(StrBytes::from_static_str(g.assignor))
                            .with_members(members)
                    }
                }
            };
            if include_operations && entry.error_code == NONE {
                entry.authorized_operations = node.authorized_operations(&ctx, Resource::Group(&group));
            }
            described.push(entry);
        }
        ctx.respond(&ConsumerGroupDescribeResponse::default().with_groups(described))
    })))
}

/// Whether a member's assignment or target holds a topic that is not `describable`.
fn assigns_hidden_topic(group: &DescribedConsumerGroup, describable: impl Fn(uuid::Uuid) -> bool) -> bool {
    group.members.iter().flat_map(|m| m.assignment.keys().chain(m.target.keys())).any(|id| !describable(*id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::consumer::DescribedConsumerMember;

    #[test]
    fn a_hidden_topic_in_an_assignment_or_a_target_hides_the_group() {
        let (shown, hidden) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let member = |assignment: &[uuid::Uuid], target: &[uuid::Uuid]| DescribedConsumerMember {
            member_id: "m".into(),
            instance_id: None,
            rack_id: None,
            epoch: 1,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_names: Vec::new(),
            subscribed_regex: None,
            assignment: assignment.iter().map(|id| (*id, [0].into())).collect(),
            target: target.iter().map(|id| (*id, [0].into())).collect(),
            classic: false,
        };
        let group = |members| DescribedConsumerGroup { state: "Stable", group_epoch: 1, assignment_epoch: 1, assignor: "uniform", members };
        let describable = |id| id != hidden;
        assert!(!assigns_hidden_topic(&group(vec![member(&[shown], &[shown])]), describable));
        assert!(assigns_hidden_topic(&group(vec![member(&[shown], &[shown]), member(&[hidden], &[])]), describable));
        assert!(assigns_hidden_topic(&group(vec![member(&[shown], &[shown, hidden])]), describable));
    }
}
