//! Online migration between the classic and the consumer group protocol (spec §6.10), under
//! Kafka's `group.consumer.migration.policy`.
//!
//! - **Upgrade**: a ConsumerGroupHeartbeat joining a live classic group converts it into a consumer
//!   group that keeps its members (generation as epoch), their assignments and the offsets.
//! - **Classic members inside a consumer group** keep sending JoinGroup, SyncGroup, Heartbeat and
//!   LeaveGroup. They are consumer-group members whose subscription comes from their embedded
//!   ConsumerProtocolSubscription; the server's assignment reaches them through SyncGroup, and a
//!   heartbeat answers REBALANCE_IN_PROGRESS when they must re-join to move on.
//! - **Downgrade**: when the last consumer-protocol member leaves a group of classic members, it
//!   becomes a classic group again and rebalances.
//!
//! Each conversion is one atomic append: the old group's tombstones and the new group's records,
//! so a failover replays either the group before or the group after.

use std::collections::HashSet;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::config::MigrationPolicy;

use super::classic::LeaveResult;
use super::classic::{prepare_rebalance, set_state};
use super::consumer::{apply_member_changes, subscription_metadata, to_topic_partitions, MemberChange};
use super::consumer_group::{
    flatten, member_tombstones, new_member_id, ConsumerGroup, ConsumerHeartbeat, ConsumerMember, MemberState, TopicView,
};
use super::consumer_protocol;
use super::events::{Departure, GroupEvent, GroupKind, RebalanceCause};
use super::group::Token;
use super::group::{ClassicGroup, GroupState, Member};
use super::outbox::{Continuation, Response, TimerKey};
use super::records::{ClassicMemberMetadata, GroupRecord, TopicPartitions};
use super::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use super::state::CoordinatorState;

const NONE: i16 = 0;

/// The embedded protocol type a group must speak to be converted.
const CONSUMER_PROTOCOL: &str = "consumer";

impl MigrationPolicy {
    fn upgrades(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade)
    }

    fn downgrades(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade)
    }
}

/// The size a batch of these records takes in the log.
fn batch_bytes(records: &[GroupRecord]) -> usize {
    let stored: Vec<_> = records.iter().map(GroupRecord::encode).collect();
    super::log_batch::batch_bytes(&stored)
}

/// Partitions by topic name → by topic id; topics that no longer exist are left out.
fn by_id(partitions: &[(String, Vec<i32>)], topics: &dyn TopicView) -> TopicPartitions {
    let known = partitions.iter().filter_map(|(name, ps)| topics.by_name(name).map(|(id, _)| ps.iter().map(move |p| (id, *p))));
    to_topic_partitions(known.flatten())
}

/// Partitions by topic id → by topic name, with the names the group's subscription resolved.
fn by_name(group: &ConsumerGroup, partitions: &TopicPartitions) -> Vec<(String, Vec<i32>)> {
    partitions
        .iter()
        .filter_map(|(id, ps)| {
            let name = group.subscription_metadata.iter().find(|(_, (topic, _))| topic == id).map(|(name, _)| name.clone())?;
            Some((name, ps.iter().copied().collect()))
        })
        .collect()
}

/// A classic member's assignment, written in the ConsumerProtocol version of its `metadata`.
fn assignment_bytes(group: &ConsumerGroup, partitions: &TopicPartitions, metadata: &[u8]) -> Bytes {
    let version = consumer_protocol::version(metadata).unwrap_or(0);
    consumer_protocol::write_assignment(&by_name(group, partitions), version)
}

/// The consumer group a classic group becomes: every member at the generation as its epoch,
/// Stable, holding (and targeted with) its last assignment. Members whose assignment is stale
/// (the group was rebalancing) are told to re-join by the epoch the joining member moves.
fn consumer_group_from(classic: &ClassicGroup, topics: &dyn TopicView, now: i64) -> Result<ConsumerGroup, &'static str> {
    let generation = classic.generation;
    let mut group = ConsumerGroup::new(classic.id.clone(), now);
    group.group_epoch = generation;
    group.assignment_epoch = generation;
    group.converged_epoch = generation;
    for m in classic.members.values() {
        let protocol = classic.protocol_name.as_deref().or_else(|| m.protocols.first().map(|(name, _)| name.as_str())).unwrap_or("");
        let subscription = consumer_protocol::subscription(&m.metadata_for(protocol)).ok_or("a member's subscription is malformed")?;
        let assigned = if m.assignment.is_empty() {
            TopicPartitions::new()
        } else {
            let (partitions, user_data) = consumer_protocol::assignment(&m.assignment).ok_or("a member's assignment is malformed")?;
            if user_data {
                return Err("an assignment carries user data of a client-side assignor");
            }
            by_id(&partitions, topics)
        };
        let mut names = subscription.topics;
        names.sort();
        names.dedup();
        let mut member = ConsumerMember::new(m.id.clone());
        member.instance_id = m.instance_id.clone();
        member.rack_id = subscription.rack_id;
        member.client_id = m.client_id.clone();
        member.client_host = m.client_host.clone();
        member.subscribed_names = names;
        member.rebalance_timeout_ms = m.rebalance_timeout_ms;
        member.epoch = generation;
        member.previous_epoch = generation;
        member.state = MemberState::Stable;
        member.assigned = assigned.clone();
        member.settle_assignment_epochs(generation);
        member.classic = Some(ClassicMemberMetadata { session_timeout_ms: m.session_timeout_ms, protocols: m.protocols.clone() });
        if let Some(instance) = &m.instance_id {
            group.static_members.insert(instance.clone(), m.id.clone());
        }
        group.target.insert(m.id.clone(), assigned);
        group.members.insert(m.id.clone(), member);
        group.set_holdings(&m.id, &HashSet::new());
    }
    group.subscription_metadata = subscription_metadata(&group, topics);
    Ok(group)
}

/// The classic group a consumer group of classic members becomes once `leaving` is gone: Stable
/// at the group epoch, each member holding its target assignment, about to rebalance.
fn classic_group_from(group: &ConsumerGroup, leaving: &str, now: i64) -> ClassicGroup {
    let mut classic = ClassicGroup::new(group.id.clone(), now);
    classic.generation = group.group_epoch;
    classic.protocol_type = Some(CONSUMER_PROTOCOL.to_string());
    for m in group.members.values().filter(|m| m.id != leaving) {
        let meta = m.classic.as_ref().expect("only classic members remain");
        if let Some(instance) = &m.instance_id {
            classic.static_members.insert(instance.clone(), m.id.clone());
        }
        classic.insert_member(Member {
            id: m.id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            session_timeout_ms: meta.session_timeout_ms,
            protocols: meta.protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            is_new: false,
            session_deadline: Some(now + meta.session_timeout_ms as i64),
        });
    }
    classic.protocol_name = classic.select_protocol();
    let protocol = classic.protocol_name.clone().unwrap_or_default();
    for member in classic.members.values_mut() {
        let target = group.target.get(&member.id).cloned().unwrap_or_default();
        member.assignment = assignment_bytes(group, &target, &member.metadata_for(&protocol));
    }
    classic.transition(GroupState::Stable, now);
    classic.update_subscribed_topics();
    classic
}

impl CoordinatorState {
    /// Converts the live classic group `group_id` into a consumer group, for a
    /// ConsumerGroupHeartbeat joining it; GROUP_ID_NOT_FOUND where the policy or the group does
    /// not allow it (Kafka's `validateOnlineUpgrade`).
    pub(super) fn upgrade_classic_group(
        &mut self,
        now: i64,
        group_id: &str,
        topics: &dyn TopicView,
    ) -> Result<(), (ResponseError, String)> {
        let classic = &self.groups[group_id];
        let refuse = |why: &str| {
            tracing::info!(group = %group_id, "classic group not upgraded to a consumer group: {why}");
            Err((ResponseError::GroupIdNotFound, format!("Group {group_id} is not a consumer group.")))
        };
        if !self.consumer.migration_policy.upgrades() {
            return refuse("groups.consumer_migration_policy does not allow upgrades");
        }
        if classic.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL) {
            return refuse("its members do not use the consumer embedded protocol");
        }
        if classic.members.len() > self.consumer.max_size {
            return refuse("it has more members than groups.consumer_max_size");
        }
        let group = match consumer_group_from(classic, topics, now) {
            Ok(group) => group,
            Err(why) => return refuse(why),
        };
        let mut records = vec![GroupRecord::Group { group: group_id.to_string(), value: None }];
        records.extend(Self::consumer_group_records(&group));
        if batch_bytes(&records) > self.config.max_group_batch_bytes {
            return refuse("its records do not fit one __consumer_offsets batch");
        }
        // Parked requests of the classic group are told to re-join, now into the consumer group.
        let classic = self.groups.remove(group_id).expect("present");
        for member in classic.members.into_values() {
            if let Some(parked) = member.awaiting_join {
                self.out.reply(parked.token, Response::Join(JoinResult::error(ResponseError::RebalanceInProgress, &member.id)));
            }
            if let Some(token) = member.awaiting_sync {
                self.out.reply(token, Response::Sync(SyncResult::error(ResponseError::RebalanceInProgress)));
            }
        }
        tracing::info!(group = %group_id, members = group.members.len(), epoch = group.group_epoch, "classic group upgraded to a consumer group");
        let mut group = group;
        for member in group.members.values_mut() {
            let deadline = now + member.session_timeout_ms(&self.consumer.for_group(group_id));
            member.session_deadline = Some(deadline);
            self.out.timer(TimerKey::ConsumerSession { group: group_id.to_string(), member: member.id.clone() }, deadline);
        }
        self.consumer_groups.insert(group_id.to_string(), group);
        self.out.append(records, Continuation::Atomic);
        Ok(())
    }

    /// Converts a consumer group back to a classic group when `leaving`, its last
    /// consumer-protocol member, is removed and the others all speak the classic protocol (Kafka's
    /// `validateOnlineDowngradeWithFencedMember`). True if it did (the member is gone with it).
    pub(super) fn downgrade_without(&mut self, now: i64, group_id: &str, leaving: &str, departure: Departure) -> bool {
        let Some(group) = self.consumer_groups.get(group_id) else { return false };
        let Some(member) = group.members.get(leaving) else { return false };
        let others_classic = group.members.values().filter(|m| m.id != leaving).all(|m| m.classic.is_some());
        if member.classic.is_some() || !others_classic || group.members.len() <= 1 {
            return false;
        }
        if !self.consumer.migration_policy.downgrades() {
            tracing::info!(group = %group_id, "consumer group not downgraded to a classic group: groups.consumer_migration_policy does not allow downgrades");
            return false;
        }
        if group.members.len() - 1 > self.config.max_size {
            tracing::info!(group = %group_id, "consumer group not downgraded to a classic group: it has more members than groups.max_size");
            return false;
        }
        let mut classic = classic_group_from(group, leaving, now);
        let mut records: Vec<GroupRecord> = group.members.keys().flat_map(|m| member_tombstones(group_id, m)).collect();
        records.push(GroupRecord::TargetEpoch { group: group_id.to_string(), epoch: None });
        records.push(GroupRecord::ConsumerGroup { group: group_id.to_string(), epoch: None });
        records.push(CoordinatorState::group_record(&classic, None));
        if batch_bytes(&records) > self.config.max_group_batch_bytes {
            tracing::info!(group = %group_id, "consumer group not downgraded to a classic group: its records do not fit one __consumer_offsets batch");
            return false;
        }
        self.consumer_groups.remove(group_id);
        tracing::info!(group = %group_id, members = classic.members.len(), generation = classic.generation, "consumer group downgraded to a classic group");
        let out = &mut self.out;
        out.event(
            now,
            GroupEvent::MemberRemoved { group: group_id.to_string(), kind: GroupKind::Consumer, member: leaving.to_string(), departure },
        );
        out.append(records, Continuation::Atomic);
        for member in classic.members.values() {
            let deadline = member.session_deadline.expect("set by the conversion");
            out.timer(TimerKey::Session { group: group_id.to_string(), member: member.id.clone() }, deadline);
        }
        let member = leaving.to_string();
        let cause = match departure {
            Departure::SessionTimeout => RebalanceCause::SessionTimeout { member },
            Departure::RebalanceTimeout => RebalanceCause::RebalanceTimeout { members: vec![member] },
            _ => RebalanceCause::MemberLeft { members: vec![member] },
        };
        set_state(&mut classic, out, GroupState::Stable, now);
        prepare_rebalance(&mut classic, out, &self.config, now, cause);
        self.groups.insert(group_id.to_string(), classic);
        true
    }

    /// A classic JoinGroup of the static member `replaced` holds: when that is the group's last
    /// consumer-protocol member, the group turns classic now (Kafka's
    /// `validateOnlineDowngradeWithReplacedMember`) and the join is served by the classic group,
    /// which rebalances. True if the consumer group is gone or empty.
    pub(super) fn downgrade_for_static_replacement(&mut self, now: i64, group_id: &str, replaced: &str) -> bool {
        let Some(group) = self.consumer_groups.get(group_id) else { return false };
        let Some(member) = group.members.get(replaced) else { return false };
        let others_classic = group.members.values().filter(|m| m.id != replaced).all(|m| m.classic.is_some());
        if member.classic.is_some() || !others_classic || !self.consumer.migration_policy.downgrades() {
            return false;
        }
        if group.members.len() == 1 {
            // Nobody else: the group empties and gives way to a classic one.
            self.remove_consumer_member(now, group_id, replaced, Departure::Replaced);
            return true;
        }
        self.downgrade_without(now, group_id, replaced, Departure::Replaced)
    }

    /// JoinGroup into a non-empty consumer group: the member joins as a classic-protocol member
    /// of the consumer group (Kafka's `classicGroupJoinToConsumerGroup`). Answered once its
    /// records are stored.
    pub(super) fn join_consumer_group(&mut self, now: i64, request: JoinRequest, token: Token, topics: &dyn TopicView) {
        let fail = |state: &mut CoordinatorState, e: ResponseError, member: &str| {
            state.out.reply(token, Response::Join(JoinResult::error(e, member)));
        };
        // KAFKA-20640: with migration disabled, groups stay single-protocol.
        if self.consumer.migration_policy == MigrationPolicy::Disabled {
            return fail(self, ResponseError::InconsistentGroupProtocol, &request.member_id);
        }
        let cfg = self.consumer.for_group(&request.group_id);
        let group = &self.consumer_groups[&request.group_id];
        let unknown = request.member_id.is_empty();
        let member_id = if unknown { new_member_id() } else { request.member_id.clone() };
        let static_owner = request.instance_id.as_ref().and_then(|i| group.static_members.get(i)).cloned();
        if !group.members.contains_key(&member_id) && static_owner.is_none() && group.members.len() >= cfg.max_size {
            return fail(self, ResponseError::GroupMaxSizeReached, &member_id);
        }
        if !supports_protocols(group, &request.protocol_type, &request.protocols) {
            return fail(self, ResponseError::InconsistentGroupProtocol, &member_id);
        }
        if unknown && request.instance_id.is_none() && request.version >= 4 {
            return fail(self, ResponseError::MemberIdRequired, &member_id);
        }
        let Some(subscription) = request.protocols.first().and_then(|(_, metadata)| consumer_protocol::subscription(metadata)) else {
            return fail(self, ResponseError::InconsistentGroupProtocol, &member_id);
        };
        match (&request.instance_id, &static_owner) {
            (Some(_), Some(owner)) if !unknown && *owner != member_id => return fail(self, ResponseError::FencedInstanceId, &member_id),
            (Some(_), None) if !unknown => return fail(self, ResponseError::UnknownMemberId, &member_id),
            _ => {}
        }
        let group = self.consumer_groups.get_mut(&request.group_id).expect("present");

        // The member: found, created, or a static member's new incarnation.
        let mut records = Vec::new();
        let mut replaced_static = false;
        if let (Some(instance), Some(owner), true) = (&request.instance_id, &static_owner, unknown) {
            group.replace_static_member(instance, owner, &member_id, &mut records, &mut self.out, now);
            replaced_static = true;
        }
        let known = group.members.contains_key(&member_id) && !replaced_static;
        if !group.members.contains_key(&member_id) {
            group.members.insert(member_id.clone(), ConsumerMember::new(member_id.clone()));
        }
        if let Some(instance) = &request.instance_id {
            group.static_members.insert(instance.clone(), member_id.clone());
        }
        let before = group.members[&member_id].current();

        let update = ConsumerHeartbeat {
            group_id: request.group_id.clone(),
            member_id: member_id.clone(),
            member_epoch: -1,
            instance_id: request.instance_id.clone(),
            rack_id: subscription.rack_id.clone(),
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            subscribed_names: Some(subscription.topics.clone()),
            subscribed_regex: None,
            server_assignor: None,
            owned: Some(by_id(&subscription.owned, topics)),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            version: request.version,
        };
        let classic = ClassicMemberMetadata { session_timeout_ms: request.session_timeout_ms, protocols: request.protocols.clone() };
        let change = MemberChange { known, replaced_static, rejoining: false, classic: Some(classic) };
        apply_member_changes(&mut self.out, group, &cfg, now, &member_id, &update, change, topics, &mut records);
        let member = group.members.get_mut(&member_id).expect("present");
        if member.current() != before || !known {
            records.push(GroupRecord::CurrentAssignment {
                group: group.id.clone(),
                member: member_id.clone(),
                value: Some(member.current()),
            });
        }

        // Its session, and the SyncGroup it owes within its rebalance timeout.
        member.join_deadline = None;
        let session = member.touch_session(&group.id, &cfg, now);
        let sync = now + request.rebalance_timeout_ms.max(0) as i64;
        member.sync_deadline = Some(sync);
        let result = JoinResult {
            error: NONE,
            generation: member.epoch,
            protocol_type: Some(CONSUMER_PROTOCOL.to_string()),
            protocol_name: request.protocols.first().map(|(name, _)| name.clone()),
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.clone(),
            members: Vec::new(),
        };
        group.note_convergence(&mut self.out, now);
        let group_id = group.id.clone();
        if let Some((key, at)) = session {
            self.out.timer(key, at);
        }
        self.out.timer(TimerKey::ClassicSync { group: group_id, member: member_id }, sync);
        if records.is_empty() {
            self.out.reply(token, Response::Join(result));
        } else {
            self.out.append(records, Continuation::Joined { token, result });
        }
    }

    /// SyncGroup from a classic member of a consumer group: its current assignment (Kafka's
    /// `classicGroupSyncToConsumerGroup`).
    pub(super) fn sync_consumer_group(&mut self, now: i64, request: &SyncRequest) -> SyncResult {
        let group = &self.consumer_groups[&request.group_id];
        let member = match classic_member(group, &request.member_id, request.instance_id.as_deref(), request.generation) {
            Ok(member) => member,
            Err(e) => return SyncResult::error(e),
        };
        let (protocol_name, metadata) = member.classic.as_ref().and_then(|c| c.protocols.first().cloned()).unwrap_or_default();
        let differs = |asked: &Option<String>, ours: &str| asked.as_deref().is_some_and(|a| a != ours);
        if differs(&request.protocol_type, CONSUMER_PROTOCOL) || differs(&request.protocol_name, &protocol_name) {
            return SyncResult::error(ResponseError::InconsistentGroupProtocol);
        }
        let member_id = member.id.clone();
        // A newer target: re-join first, unless it is still revoking (it re-joins after).
        if group.assignment_epoch > member.epoch && member.state != MemberState::UnrevokedPartitions {
            return SyncResult::error(self.ask_to_rejoin(now, &request.group_id, &member_id));
        }
        let assignment = assignment_bytes(group, &member.assigned, &metadata);
        let cfg = &self.consumer.for_group(&request.group_id);
        let member = self.consumer_groups.get_mut(&request.group_id).and_then(|g| g.members.get_mut(&member_id)).expect("present");
        member.sync_deadline = None;
        if let Some((key, at)) = member.touch_session(&request.group_id, cfg, now) {
            self.out.timer(key, at);
        }
        SyncResult { error: NONE, protocol_type: request.protocol_type.clone(), protocol_name: request.protocol_name.clone(), assignment }
    }

    /// Heartbeat from a classic member of a consumer group (Kafka's
    /// `classicGroupHeartbeatToConsumerGroup`): REBALANCE_IN_PROGRESS when it must re-join.
    pub(super) fn heartbeat_consumer_group(
        &mut self,
        now: i64,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> i16 {
        let group = &self.consumer_groups[group_id];
        let member = match classic_member(group, member_id, instance_id, generation) {
            Ok(member) => member,
            Err(e) => return e.code(),
        };
        // It re-joins when there is a newer target (the group epoch may be ahead while the
        // target waits for the assignment interval), when it must revoke partitions, or when
        // partitions it waited for were released.
        let rejoin = member.epoch < group.assignment_epoch
            || member.state == MemberState::UnrevokedPartitions
            || (member.state == MemberState::UnreleasedPartitions && !waits_on_unreleased(group, &member.id));
        let member_id = member.id.clone();
        let cfg = &self.consumer.for_group(group_id);
        let member = self.consumer_groups.get_mut(group_id).and_then(|g| g.members.get_mut(&member_id)).expect("present");
        if let Some((key, at)) = member.touch_session(group_id, cfg, now) {
            self.out.timer(key, at);
        }
        if rejoin {
            return self.ask_to_rejoin(now, group_id, &member_id).code();
        }
        NONE
    }

    /// LeaveGroup naming classic members of a consumer group (Kafka's
    /// `classicGroupLeaveToConsumerGroup`): one code per member.
    pub(super) fn leave_consumer_group(&mut self, now: i64, group_id: &str, members: &[(String, Option<String>)]) -> LeaveResult {
        let mut codes = Vec::with_capacity(members.len());
        for (member_id, instance_id) in members {
            let group = self.consumer_groups.get(group_id);
            let found = group.ok_or(ResponseError::UnknownMemberId).and_then(|group| {
                let member = match instance_id {
                    None => group.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?,
                    Some(instance) => {
                        let owner = group.static_members.get(instance).ok_or(ResponseError::UnknownMemberId)?;
                        if !member_id.is_empty() && owner != member_id {
                            return Err(ResponseError::FencedInstanceId);
                        }
                        &group.members[owner]
                    }
                };
                member.classic.as_ref().map(|_| member.id.clone()).ok_or(ResponseError::UnknownMemberId)
            });
            match found {
                Ok(id) => {
                    self.remove_consumer_member(now, group_id, &id, Departure::Left);
                    codes.push(NONE);
                }
                Err(e) => codes.push(e.code()),
            }
        }
        LeaveResult { error: NONE, members: codes }
    }

    /// The member must re-join: starts its join deadline (if none runs); REBALANCE_IN_PROGRESS.
    fn ask_to_rejoin(&mut self, now: i64, group_id: &str, member_id: &str) -> ResponseError {
        let member = self.consumer_groups.get_mut(group_id).and_then(|g| g.members.get_mut(member_id)).expect("present");
        if member.join_deadline.is_none() {
            let deadline = now + member.rebalance_timeout_ms.max(0) as i64;
            member.join_deadline = Some(deadline);
            self.out.timer(TimerKey::ClassicJoin { group: group_id.to_string(), member: member_id.to_string() }, deadline);
        }
        ResponseError::RebalanceInProgress
    }
}

/// The classic member a SyncGroup or Heartbeat names, checked as Kafka does: the instance id's
/// owner, a member that speaks the classic protocol, and its epoch as the generation.
fn classic_member<'a>(
    group: &'a ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
) -> Result<&'a ConsumerMember, ResponseError> {
    let member = match instance_id {
        None => group.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?,
        Some(instance) => {
            let owner = group.static_members.get(instance).ok_or(ResponseError::UnknownMemberId)?;
            if owner != member_id {
                return Err(ResponseError::FencedInstanceId);
            }
            &group.members[owner]
        }
    };
    if member.classic.is_none() {
        return Err(ResponseError::UnknownMemberId);
    }
    if member.epoch != generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(member)
}

/// Whether a classic member can join with these protocols: protocol type `consumer`, and a
/// protocol every classic member of the group supports (any, while there is none).
fn supports_protocols(group: &ConsumerGroup, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
    if protocol_type != CONSUMER_PROTOCOL || protocols.is_empty() {
        return false;
    }
    let classic: Vec<&ClassicMemberMetadata> = group.members.values().filter_map(|m| m.classic.as_ref()).collect();
    protocols.iter().any(|(name, _)| classic.iter().all(|c| c.protocols.iter().any(|(n, _)| n == name)))
}

/// Whether a member waits for partitions of its target that another member still holds.
fn waits_on_unreleased(group: &ConsumerGroup, member_id: &str) -> bool {
    let member = &group.members[member_id];
    let assigned: HashSet<(Uuid, i32)> = flatten(&member.assigned).collect();
    let target = group.target.get(member_id);
    target.is_some_and(|t| flatten(t).any(|tp| !assigned.contains(&tp) && group.owners.get(&tp).is_some_and(|o| o != member_id)))
}
