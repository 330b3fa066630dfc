//! The KIP-848 consumer group protocol (spec §6): ConsumerGroupHeartbeat, server-side target
//! assignments and per-member reconciliation, in which a partition is revoked from its owner and
//! released before it is assigned to another member.
//!
//! Epochs: the *group epoch* moves whenever an input of the assignment changes (membership,
//! subscriptions, partition counts); the *assignment epoch* is the group epoch the current
//! target assignment was computed for; a *member epoch* is the target epoch a member has
//! reconciled to. A partition has an owner while some member holds it (assigned or pending
//! revocation); only a partition without owner can be given to another member.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::assignor::{Assignor, MemberSpec};
use super::consumer_group::{
    flatten, holdings, member_tombstones, new_member_id, ConsumerGroup, ConsumerGroupConfig, ConsumerHeartbeat, ConsumerMember,
    HeartbeatAnswer, MemberState, TopicView, LEAVE_EPOCH, STATIC_LEAVE_EPOCH,
};
use super::events::{Departure, GroupEvent, GroupKind, MemberStep, RebalanceCause};
use super::group::GroupState;
use super::outbox::{Continuation, Outbox, TimerKey};
use super::records::{ClassicMemberMetadata, GroupRecord, TopicPartitions};
use super::state::CoordinatorState;

const NONE: i16 = 0;

/// One partition of one topic.
type Tp = (Uuid, i32);

impl CoordinatorState {
    /// ConsumerGroupHeartbeat (§6.4).
    pub fn consumer_heartbeat(&mut self, now: i64, request: ConsumerHeartbeat, topics: &dyn TopicView) -> HeartbeatAnswer {
        if let Err((code, message)) = self.validate_heartbeat(&request) {
            return HeartbeatAnswer::error(code, message);
        }
        if request.member_epoch < 0 {
            return self.consumer_leave(now, &request);
        }
        let interval = self.consumer.heartbeat_interval_ms_of(&request.group_id);
        match self.consumer_join_or_beat(now, request, topics) {
            Ok(mut answer) => {
                answer.interval_ms = interval;
                answer
            }
            Err((code, message)) => HeartbeatAnswer::error(code, message),
        }
    }

    /// §6.2 validation.
    fn validate_heartbeat(&self, r: &ConsumerHeartbeat) -> Result<(), (ResponseError, String)> {
        let invalid = |m: &str| Err((ResponseError::InvalidRequest, m.to_string()));
        if r.group_id.is_empty() {
            return invalid("GroupId can't be empty.");
        }
        if r.group_id.len() > super::state::MAX_ID_BYTES {
            return Err((ResponseError::InvalidGroupId, "GroupId is too long.".into()));
        }
        if r.member_id.is_empty() && (r.version >= 1 || r.member_epoch > 0 || r.member_epoch == LEAVE_EPOCH) {
            return invalid("MemberId can't be empty.");
        }
        if r.member_id.len() > super::state::MAX_RECORD_STRING_BYTES {
            return invalid("MemberId is too long.");
        }
        if r.instance_id.as_deref() == Some("") {
            return invalid("InstanceId can't be empty.");
        }
        if r.instance_id.as_deref().is_some_and(|i| i.len() > super::state::MAX_ID_BYTES) {
            return invalid("InstanceId is too long.");
        }
        if r.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        if r.member_epoch == 0 {
            if r.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if r.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if r.subscribed_names.is_none() && r.subscribed_regex.is_none() {
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.");
            }
        } else if r.member_epoch == STATIC_LEAVE_EPOCH && r.instance_id.is_none() {
            return invalid("InstanceId can't be null.");
        } else if r.member_epoch < STATIC_LEAVE_EPOCH {
            return invalid(&format!("MemberEpoch is invalid: {}.", r.member_epoch));
        }
        if let Some(name) = r.server_assignor.as_deref() {
            if !self.consumer.assignors.iter().any(|a| a.name() == name) {
                return Err((ResponseError::UnsupportedAssignor, format!("ServerAssignor {name} is not supported.")));
            }
        }
        if let Some(regex) = r.subscribed_regex.as_deref().filter(|r| !r.is_empty()) {
            if compile(regex).is_err() {
                return Err((
                    ResponseError::InvalidRegularExpression,
                    format!("SubscribedTopicRegex {regex} is not a valid regular expression."),
                ));
            }
        }
        Ok(())
    }

    fn consumer_join_or_beat(
        &mut self,
        now: i64,
        r: ConsumerHeartbeat,
        topics: &dyn TopicView,
    ) -> Result<HeartbeatAnswer, (ResponseError, String)> {
        let not_found = || (ResponseError::GroupIdNotFound, format!("Group {} not found.", r.group_id));
        // 1. The group: a consumer group, or an empty classic group replaced by one.
        if !self.consumer_groups.contains_key(&r.group_id) {
            if r.member_epoch != 0 {
                return Err(not_found());
            }
            if let Some(classic) = self.groups.get(&r.group_id) {
                if !classic.members.is_empty() || !classic.pending_members.is_empty() || classic.state != GroupState::Empty {
                    // A live classic group: converted when the policy and the group allow it.
                    self.upgrade_classic_group(now, &r.group_id, topics)?;
                } else {
                    self.groups.remove(&r.group_id);
                    self.out.append(vec![GroupRecord::Group { group: r.group_id.clone(), value: None }], Continuation::Nothing);
                    self.consumer_groups.insert(r.group_id.clone(), ConsumerGroup::new(r.group_id.clone(), now));
                }
            } else if !self.may_create_group() {
                let max = self.config.max_groups;
                return Err((
                    ResponseError::ThrottlingQuotaExceeded,
                    format!("This coordinator partition holds {max} groups (groups.max_groups_per_partition)."),
                ));
            } else {
                self.consumer_groups.insert(r.group_id.clone(), ConsumerGroup::new(r.group_id.clone(), now));
            }
        }
        let cfg = self.consumer.for_group(&r.group_id);
        let group = self.consumer_groups.get_mut(&r.group_id).expect("present");
        let mut records = Vec::new();

        // 2–3. The member.
        let member_id = if r.member_id.is_empty() { new_member_id() } else { r.member_id.clone() };
        let known = group.members.contains_key(&member_id);
        if !known
            && r.member_epoch == 0
            && group.members.len() >= cfg.max_size
            && r.instance_id.as_ref().is_none_or(|i| !group.static_members.contains_key(i))
        {
            return Err((
                ResponseError::GroupMaxSizeReached,
                format!("The consumer group has reached its maximum capacity of {} members.", cfg.max_size),
            ));
        }
        let mut replaced_static = false;
        match (&r.instance_id, r.member_epoch) {
            (Some(instance), 0) => match group.static_members.get(instance).cloned() {
                Some(owner) if owner == member_id => {}
                Some(owner) => {
                    let previous = &group.members[&owner];
                    // A classic member's instance is taken over at once (§6.10), as Kafka does.
                    if previous.epoch != STATIC_LEAVE_EPOCH && previous.classic.is_none() {
                        return Err((
                            ResponseError::UnreleasedInstanceId,
                            format!("Static member {instance} has not released its instance id."),
                        ));
                    }
                    group.replace_static_member(instance, &owner, &member_id, &mut records, &mut self.out, now);
                    replaced_static = true;
                }
                None => {
                    group.static_members.insert(instance.clone(), member_id.clone());
                }
            },
            (Some(instance), _) => match group.static_members.get(instance) {
                None => return Err((ResponseError::UnknownMemberId, format!("Instance id {instance} is unknown."))),
                Some(owner) if *owner != member_id => {
                    return Err((ResponseError::FencedInstanceId, format!("Instance id {instance} is owned by another member.")))
                }
                Some(_) => {}
            },
            (None, _) => {}
        }
        if !group.members.contains_key(&member_id) {
            if r.member_epoch != 0 {
                return Err((ResponseError::UnknownMemberId, format!("Member {member_id} is not a member of group {}.", group.id)));
            }
            group.members.insert(member_id.clone(), ConsumerMember::new(member_id.clone()));
        }
        {
            let member = &group.members[&member_id];
            if r.member_epoch > 0 && r.member_epoch != member.epoch {
                // A lost response: the member may still be one epoch behind, owning a subset.
                let behind_ok = r.member_epoch == member.previous_epoch
                    && r.owned
                        .as_ref()
                        .is_none_or(|owned| flatten(owned).all(|(t, p)| member.assigned.get(&t).is_some_and(|s| s.contains(&p))));
                if r.member_epoch > member.epoch || !behind_ok {
                    return Err((
                        ResponseError::FencedMemberEpoch,
                        format!("The consumer group member has a greater or smaller member epoch ({}) than the one known by the group coordinator ({}).", r.member_epoch, member.epoch),
                    ));
                }
            }
        }

        // 4–6. Apply what changed, move the epochs, reconcile.
        let rejoining = r.member_epoch == 0 && known && !replaced_static;
        let change = MemberChange { known, replaced_static, rejoining, classic: None };
        let before_assigned = apply_member_changes(&mut self.out, group, &cfg, now, &member_id, &r, change, topics, &mut records);
        let member = &group.members[&member_id];
        if member.assigned != before_assigned || member.epoch != r.member_epoch.max(0) || rejoining || !known || replaced_static {
            records.push(GroupRecord::CurrentAssignment {
                group: group.id.clone(),
                member: member_id.clone(),
                value: Some(member.current()),
            });
        }

        group.note_convergence(&mut self.out, now);

        // 7. The session.
        let session = group.members.get_mut(&member_id).expect("present").touch_session(&group.id, &cfg, now);
        let member = &group.members[&member_id];
        let timers: Vec<(TimerKey, i64)> = [
            session,
            member.rebalance_deadline.map(|d| (TimerKey::ConsumerRebalance { group: group.id.clone(), member: member_id.clone() }, d)),
        ]
        .into_iter()
        .flatten()
        .collect();

        // 8. The answer: the assignment when joining, on a full request, or when it changed.
        let send_assignment = r.member_epoch == 0 || r.is_full() || member.assigned != before_assigned;
        let answer = HeartbeatAnswer {
            error: NONE,
            message: None,
            member_id: Some(member_id.clone()),
            epoch: member.epoch,
            interval_ms: 0,
            assignment: send_assignment.then(|| member.assigned.clone()),
        };
        for (key, at) in timers {
            self.out.timer(key, at);
        }
        if !records.is_empty() {
            self.out.append(records, Continuation::Nothing);
        }
        Ok(answer)
    }

    /// Epoch -1 (leave) or -2 (static member leaving temporarily), §6.6.
    fn consumer_leave(&mut self, now: i64, r: &ConsumerHeartbeat) -> HeartbeatAnswer {
        let Some(group) = self.consumer_groups.get_mut(&r.group_id) else {
            return HeartbeatAnswer::error(ResponseError::GroupIdNotFound, format!("Group {} not found.", r.group_id));
        };
        let member_id = match &r.instance_id {
            Some(instance) => match group.static_members.get(instance) {
                None => return HeartbeatAnswer::error(ResponseError::UnknownMemberId, format!("Instance id {instance} is unknown.")),
                Some(owner) if *owner != r.member_id => {
                    return HeartbeatAnswer::error(
                        ResponseError::FencedInstanceId,
                        format!("Instance id {instance} is owned by another member."),
                    )
                }
                Some(owner) => owner.clone(),
            },
            None if group.members.contains_key(&r.member_id) => r.member_id.clone(),
            None => return HeartbeatAnswer::error(ResponseError::UnknownMemberId, format!("Member {} is unknown.", r.member_id)),
        };
        let answer = |epoch| HeartbeatAnswer {
            error: NONE,
            message: None,
            member_id: Some(member_id.clone()),
            epoch,
            interval_ms: 0,
            assignment: None,
        };
        if r.member_epoch == STATIC_LEAVE_EPOCH {
            let member = group.members.get_mut(&member_id).expect("present");
            member.epoch = STATIC_LEAVE_EPOCH;
            member.pending_revocation.clear();
            member.settle_assignment_epochs(STATIC_LEAVE_EPOCH);
            member.state = MemberState::Stable;
            member.rebalance_deadline = None;
            let value = member.current();
            self.out.append(
                vec![GroupRecord::CurrentAssignment { group: r.group_id.clone(), member: member_id.clone(), value: Some(value) }],
                Continuation::Nothing,
            );
            return answer(STATIC_LEAVE_EPOCH);
        }
        self.remove_consumer_member(now, &r.group_id.clone(), &member_id, Departure::Left);
        answer(LEAVE_EPOCH)
    }

    /// Removes (fences) a member: its partitions are released and the group epoch moves.
    pub(crate) fn remove_consumer_member(&mut self, now: i64, group_id: &str, member_id: &str, departure: Departure) {
        if self.downgrade_without(now, group_id, member_id, departure) {
            return;
        }
        let Some(group) = self.consumer_groups.get_mut(group_id) else { return };
        let Some(member) = group.members.shift_remove(member_id) else { return };
        if let Some(instance) = &member.instance_id {
            if group.static_members.get(instance).map(String::as_str) == Some(member_id) {
                group.static_members.remove(instance);
            }
        }
        group.release_all(member_id);
        group.target.remove(member_id);
        group.resolved_regex.remove(member_id);
        group.topics_checked = None;
        group.group_epoch += 1;
        group.state_timestamp = now;
        let mut records = member_tombstones(group_id, member_id);
        records.push(GroupRecord::ConsumerGroup { group: group_id.to_string(), epoch: Some(group.group_epoch) });
        let kind = GroupKind::Consumer;
        self.out.event(now, GroupEvent::MemberRemoved { group: group_id.to_string(), kind, member: member_id.to_string(), departure });
        let member = member_id.to_string();
        let cause = match departure {
            Departure::SessionTimeout => RebalanceCause::SessionTimeout { member },
            Departure::RebalanceTimeout => RebalanceCause::RebalanceTimeout { members: vec![member] },
            _ => RebalanceCause::MemberLeft { members: vec![member] },
        };
        let (generation, members) = (group.group_epoch, cause.members_before(group.members.len()));
        self.out.event(now, GroupEvent::RebalanceStarted { group: group_id.to_string(), kind, cause, generation, members });
        group.note_convergence(&mut self.out, now);
        self.out.append(records, Continuation::Nothing);
    }

    /// A member's deadline passed (its session; revoking, or for a classic member re-joining or
    /// syncing, within its rebalance timeout): fence it, if still due. Or a group's deferred
    /// target assignment is due.
    pub(crate) fn fire_consumer(&mut self, now: i64, key: &TimerKey) {
        if let TimerKey::ConsumerAssignment { group } = key {
            let cfg = self.consumer.for_group(group);
            let Some(group) = self.consumer_groups.get_mut(group) else { return };
            group.assignment_timer = false;
            if group.group_epoch > group.assignment_epoch {
                let mut records = Vec::new();
                assign_when_due(&mut self.out, group, &cfg, now, &mut records);
                if !records.is_empty() {
                    self.out.append(records, Continuation::Nothing);
                }
            }
            return;
        }
        type Deadline = fn(&ConsumerMember) -> Option<i64>;
        let (group_id, member_id, deadline, departure, reason): (_, _, Deadline, _, _) = match key {
            TimerKey::ConsumerSession { group, member } => {
                (group, member, |m| m.session_deadline, Departure::SessionTimeout, "session timeout")
            }
            TimerKey::ConsumerRebalance { group, member } => {
                (group, member, |m| m.rebalance_deadline, Departure::RebalanceTimeout, "rebalance timeout")
            }
            // A classic member of the group that did not re-join or sync in time (§6.10).
            TimerKey::ClassicJoin { group, member } => {
                (group, member, |m| m.join_deadline, Departure::RebalanceTimeout, "no re-join within the rebalance timeout")
            }
            TimerKey::ClassicSync { group, member } => {
                (group, member, |m| m.sync_deadline, Departure::RebalanceTimeout, "no sync within the rebalance timeout")
            }
            _ => return,
        };
        let Some(member) = self.consumer_groups.get(group_id).and_then(|g| g.members.get(member_id)) else { return };
        match deadline(member) {
            Some(d) if d <= now => {
                tracing::info!(group = %group_id, member = %member_id, reason, "fencing consumer group member");
                self.remove_consumer_member(now, &group_id.clone(), &member_id.clone(), departure);
            }
            Some(d) => {
                // Moved since: look again then.
                let key = key.clone();
                self.out.timer(key, d);
            }
            None => {}
        }
    }

    /// Rebuilds KIP-848 state from a record (partition load).
    pub(crate) fn replay_consumer(&mut self, record: GroupRecord, now: i64) {
        let group_id = record.group().to_string();
        // A classic group of the same id that is only a shell for offsets gives way.
        if self.groups.get(&group_id).is_some_and(|g| g.members.is_empty()) {
            self.groups.remove(&group_id);
        }
        let group = self.consumer_groups.entry(group_id.clone()).or_insert_with(|| ConsumerGroup::new(group_id.clone(), now));
        match record {
            GroupRecord::ConsumerGroup { epoch: Some(e), .. } => group.group_epoch = e,
            GroupRecord::ConsumerGroup { epoch: None, .. } => {
                self.consumer_groups.remove(&group_id);
            }
            GroupRecord::TargetEpoch { epoch, .. } => group.assignment_epoch = epoch.unwrap_or(0),
            GroupRecord::ConsumerMember { member, value: Some(v), .. } => {
                let m = group.members.entry(member.clone()).or_insert_with(|| ConsumerMember::new(member.clone()));
                if let Some(instance) = &v.instance_id {
                    group.static_members.insert(instance.clone(), member.clone());
                }
                m.instance_id = v.instance_id;
                m.rack_id = v.rack_id;
                m.client_id = v.client_id;
                m.client_host = v.client_host;
                m.subscribed_names = v.subscribed_names;
                m.subscribed_regex = v.subscribed_regex;
                m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                m.server_assignor = v.server_assignor;
                m.classic = v.classic;
            }
            GroupRecord::ConsumerMember { member, value: None, .. } => {
                if let Some(m) = group.members.shift_remove(&member) {
                    if let Some(instance) = m.instance_id {
                        group.static_members.remove(&instance);
                    }
                }
                group.release_all(&member);
            }
            GroupRecord::TargetAssignment { member, partitions: Some(p), .. } => {
                group.target.insert(member, p);
            }
            GroupRecord::TargetAssignment { member, partitions: None, .. } => {
                group.target.remove(&member);
            }
            GroupRecord::CurrentAssignment { member, value: Some(v), .. } => {
                let before: HashSet<Tp> = group.members.get(&member).map(holdings).unwrap_or_default();
                let m = group.members.entry(member.clone()).or_insert_with(|| ConsumerMember::new(member.clone()));
                m.epoch = v.epoch;
                m.previous_epoch = v.previous_epoch;
                m.state = MemberState::from_code(v.state);
                m.assigned = v.assigned;
                m.pending_revocation = v.pending_revocation;
                // A record without epochs (written before KIP-1251) dates every partition from
                // the member's epoch, as Kafka does: no commit is let through that was not before.
                m.assignment_epochs = v.epochs;
                m.settle_assignment_epochs(v.epoch.max(0));
                group.set_holdings(&member, &before);
            }
            GroupRecord::CurrentAssignment { .. } => {}
            GroupRecord::Offset { .. } | GroupRecord::Group { .. } => unreachable!("classic records are replayed elsewhere"),
        }
    }

    /// After loading: every member's session starts now.
    pub(crate) fn start_consumer_sessions(&mut self, now: i64) {
        let mut timers = Vec::new();
        for g in self.consumer_groups.values_mut() {
            for m in g.members.values_mut() {
                let deadline = now + m.session_timeout_ms(&self.consumer.for_group(&g.id));
                m.session_deadline = Some(deadline);
                timers.push((TimerKey::ConsumerSession { group: g.id.clone(), member: m.id.clone() }, deadline));
            }
        }
        for (key, at) in timers {
            self.out.timer(key, at);
        }
    }

    /// The records that rebuild a consumer group (compaction checkpoint).
    pub(crate) fn consumer_group_records(group: &ConsumerGroup) -> Vec<GroupRecord> {
        let id = &group.id;
        let mut records = vec![GroupRecord::ConsumerGroup { group: id.clone(), epoch: Some(group.group_epoch) }];
        for m in group.members.values() {
            records.push(GroupRecord::ConsumerMember { group: id.clone(), member: m.id.clone(), value: Some(m.metadata()) });
            records.push(GroupRecord::CurrentAssignment { group: id.clone(), member: m.id.clone(), value: Some(m.current()) });
        }
        for (member, partitions) in &group.target {
            records.push(GroupRecord::TargetAssignment { group: id.clone(), member: member.clone(), partitions: Some(partitions.clone()) });
        }
        records.push(GroupRecord::TargetEpoch { group: id.clone(), epoch: Some(group.assignment_epoch) });
        records
    }

    /// Deletes an Empty consumer group's records (DeleteGroups, or replacement by a classic group).
    pub(crate) fn delete_consumer_group(&mut self, group_id: &str) -> Vec<GroupRecord> {
        match self.consumer_groups.remove(group_id) {
            Some(g) => {
                vec![GroupRecord::TargetEpoch { group: g.id.clone(), epoch: None }, GroupRecord::ConsumerGroup { group: g.id, epoch: None }]
            }
            None => Vec::new(),
        }
    }
}

/// What a heartbeat or a classic member's JoinGroup changes besides the request's fields.
pub(super) struct MemberChange {
    /// The member existed before this request.
    pub known: bool,
    /// A static member's new incarnation took the old one's place.
    pub replaced_static: bool,
    /// Epoch 0 from a known member: it dropped its partitions (KAFKA-19233).
    pub rejoining: bool,
    /// The member's classic-protocol metadata; `None` for a consumer-protocol member.
    pub classic: Option<ClassicMemberMetadata>,
}

/// Steps 4–6 of a heartbeat (§6.4), shared with a classic member's JoinGroup (§6.10): applies the
/// member's changes, moves the group epoch and the target when their inputs moved, and reconciles
/// the member. Returns the member's assignment before.
#[allow(clippy::too_many_arguments)]
pub(super) fn apply_member_changes(
    out: &mut Outbox,
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    now: i64,
    member_id: &str,
    r: &ConsumerHeartbeat,
    change: MemberChange,
    topics: &dyn TopicView,
    records: &mut Vec<GroupRecord>,
) -> TopicPartitions {
    // 4. Apply what changed.
    let MemberChange { known, replaced_static, rejoining, classic } = change;
    let member = group.members.get_mut(member_id).expect("present");
    let mut metadata_changed = !known || replaced_static;
    if member.classic != classic {
        member.classic = classic;
        metadata_changed = true;
    }
    let mut bump = false;
    let mut subscription_changed = false;
    if let Some(names) = &r.subscribed_names {
        let mut names = names.clone();
        names.sort();
        names.dedup();
        if names != member.subscribed_names {
            member.subscribed_names = names;
            metadata_changed = true;
            subscription_changed = true;
        }
    }
    if let Some(regex) = &r.subscribed_regex {
        let regex = (!regex.is_empty()).then(|| regex.clone());
        if regex != member.subscribed_regex {
            member.subscribed_regex = regex;
            metadata_changed = true;
            subscription_changed = true;
        }
    }
    bump |= subscription_changed;
    if r.rebalance_timeout_ms != -1 && r.rebalance_timeout_ms != member.rebalance_timeout_ms {
        member.rebalance_timeout_ms = r.rebalance_timeout_ms;
        metadata_changed = true;
    }
    for (field, value) in [(&mut member.rack_id, &r.rack_id), (&mut member.server_assignor, &r.server_assignor)] {
        if value.is_some() && field != value {
            *field = value.clone();
            metadata_changed = true;
        }
    }
    if r.instance_id.is_some() && member.instance_id != r.instance_id {
        member.instance_id = r.instance_id.clone();
        metadata_changed = true;
    }
    if member.client_id != r.client_id || member.client_host != r.client_host {
        member.client_id = r.client_id.clone();
        member.client_host = r.client_host.clone();
        metadata_changed = true;
    }
    if rejoining {
        // KAFKA-19233 (4.2): epoch 0 from a known member is a re-join, not a fencing. It has
        // dropped its partitions; release them and start over.
        let before = holdings(member);
        member.assigned.clear();
        member.pending_revocation.clear();
        member.assignment_epochs.clear();
        member.epoch = 0;
        member.previous_epoch = 0;
        member.state = MemberState::Stable;
        member.rebalance_deadline = None;
        group.set_holdings(member_id, &before);
        records.push(GroupRecord::CurrentAssignment {
            group: group.id.clone(),
            member: member_id.to_string(),
            value: Some(group.members[member_id].current()),
        });
    }
    if metadata_changed {
        records.push(GroupRecord::ConsumerMember {
            group: group.id.clone(),
            member: member_id.to_string(),
            value: Some(group.members[member_id].metadata()),
        });
    }
    // Subscribed topics: rechecked only when subscriptions or the topics changed, so that a
    // steady heartbeat costs the same in a group of 5 members as in one of 5,000.
    let topics_version = topics.version();
    if metadata_changed || group.topics_checked != Some(topics_version) {
        if resolve_regexes(group, topics) {
            bump = true;
        }
        let metadata = subscription_metadata(group, topics);
        if metadata != group.subscription_metadata {
            group.subscription_metadata = metadata;
            bump = true;
        }
        group.topics_checked = Some(topics_version);
    }
    if !known {
        out.event(now, GroupEvent::MemberJoined { group: group.id.clone(), kind: GroupKind::Consumer, member: member_id.to_string() });
    }
    if bump {
        let member = member_id.to_string();
        let cause = match &r.instance_id {
            _ if !known && group.members.len() == 1 => RebalanceCause::GroupCreated { member },
            Some(instance) if replaced_static => RebalanceCause::StaticMemberReplaced { instance: instance.clone(), member },
            _ if !known => RebalanceCause::MemberJoined { member },
            _ if subscription_changed => RebalanceCause::MetadataChanged { member },
            _ => RebalanceCause::TopicsChanged,
        };
        group.group_epoch += 1;
        records.push(GroupRecord::ConsumerGroup { group: group.id.clone(), epoch: Some(group.group_epoch) });
        let (generation, members) = (group.group_epoch, cause.members_before(group.members.len()));
        out.event(now, GroupEvent::RebalanceStarted { group: group.id.clone(), kind: GroupKind::Consumer, cause, generation, members });
    }

    // 5. A new target assignment when its inputs moved, once the interval since the last allows.
    if group.group_epoch > group.assignment_epoch {
        assign_when_due(out, group, cfg, now, records);
    }

    // 6. Reconcile this member toward its target.
    let before_assigned = group.members[member_id].assigned.clone();
    let epoch_before = group.members[member_id].epoch;
    let target = group.target.get(member_id).cloned().unwrap_or_default();
    reconcile(group, member_id, &target, r.owned.as_ref(), now);
    let member = &group.members[member_id];
    if member.epoch != epoch_before && member.epoch == group.assignment_epoch && member.state == MemberState::Stable {
        let (group_id, member) = (group.id.clone(), member_id.to_string());
        out.event(now, GroupEvent::MemberReady { group: group_id, member, step: MemberStep::Reconciled });
    }
    before_assigned
}

/// Compiles a subscription regex, matched against whole topic names (RE2 syntax, as Kafka).
fn compile(regex: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{regex})$")).size_limit(1 << 20).build()
}

/// Resolves every member's regex against the current topics; true if any result changed.
fn resolve_regexes(group: &mut ConsumerGroup, topics: &dyn TopicView) -> bool {
    let with_regex: Vec<(String, String)> =
        group.members.values().filter_map(|m| m.subscribed_regex.clone().map(|r| (m.id.clone(), r))).collect();
    let mut changed = false;
    let names = if with_regex.is_empty() { Vec::new() } else { topics.names() };
    for (member, regex) in &with_regex {
        let resolved: BTreeSet<String> = match compile(regex) {
            Ok(re) => names.iter().filter(|n| re.is_match(n)).cloned().collect(),
            Err(_) => BTreeSet::new(),
        };
        if group.resolved_regex.get(member) != Some(&resolved) {
            group.resolved_regex.insert(member.clone(), resolved);
            changed = true;
        }
    }
    let before = group.resolved_regex.len();
    group.resolved_regex.retain(|m, _| with_regex.iter().any(|(id, _)| id == m));
    changed || group.resolved_regex.len() != before
}

pub(super) fn subscription_metadata(group: &ConsumerGroup, topics: &dyn TopicView) -> BTreeMap<String, Tp> {
    group.subscribed_topics().into_iter().filter_map(|name| topics.by_name(&name).map(|t| (name, t))).collect()
}

/// Computes the target assignment of the group epoch if `assignment_interval_ms` has passed since
/// the last one (Kafka 4.4's `group.consumer.assignment.interval.ms`), else arms a timer for then:
/// members that arrive together are assigned together, and meanwhile the group is Assigning and
/// its members reconcile toward the previous target.
fn assign_when_due(out: &mut Outbox, group: &mut ConsumerGroup, cfg: &ConsumerGroupConfig, now: i64, records: &mut Vec<GroupRecord>) {
    if now >= group.next_assignment_at {
        compute_target(group, cfg, records);
        group.next_assignment_at = now.saturating_add(cfg.assignment_interval_ms);
    } else if !group.assignment_timer {
        group.assignment_timer = true;
        out.timer(TimerKey::ConsumerAssignment { group: group.id.clone() }, group.next_assignment_at);
    }
}

/// Computes the target assignment of the current group epoch with the group's assignor.
fn compute_target(group: &mut ConsumerGroup, cfg: &ConsumerGroupConfig, records: &mut Vec<GroupRecord>) {
    let assignor = preferred_assignor(group, cfg);
    let partitions: HashMap<Uuid, i32> = group.subscription_metadata.values().copied().collect();
    let specs: Vec<MemberSpec> = group
        .members
        .values()
        .map(|m| MemberSpec {
            member_id: m.id.clone(),
            instance_id: m.instance_id.clone(),
            rack_id: m.rack_id.clone(),
            topics: group.member_topics(m),
            current: group.target.get(&m.id).cloned().unwrap_or_default(),
        })
        .collect();
    let target = assignor.assign(&specs, &partitions);
    for (member, partitions) in &target {
        if group.target.get(member) != Some(partitions) {
            records.push(GroupRecord::TargetAssignment {
                group: group.id.clone(),
                member: member.clone(),
                partitions: Some(partitions.clone()),
            });
        }
    }
    group.target = target;
    group.assignment_epoch = group.group_epoch;
    records.push(GroupRecord::TargetEpoch { group: group.id.clone(), epoch: Some(group.assignment_epoch) });
}

/// The assignor named by the most members, else the first configured (§6.9).
pub(crate) fn preferred_assignor(group: &ConsumerGroup, cfg: &ConsumerGroupConfig) -> Assignor {
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for m in group.members.values() {
        if let Some(a) = m.server_assignor.as_deref() {
            *votes.entry(a).or_default() += 1;
        }
    }
    let best = votes.iter().max_by_key(|(name, n)| (**n, std::cmp::Reverse(*name))).and_then(|(name, _)| Assignor::from_name(name));
    best.or_else(|| cfg.assignors.first().copied()).unwrap_or(Assignor::Uniform)
}

/// Moves a member one step toward its target (§6.5): partitions to revoke are withheld until the
/// member reports it no longer owns them; partitions still owned by others are withheld until
/// released.
fn reconcile(group: &mut ConsumerGroup, member_id: &str, target: &TopicPartitions, owned: Option<&TopicPartitions>, now: i64) {
    let target_epoch = group.assignment_epoch;
    let still_owns = |tp: &Tp| owned.is_none_or(|o| o.get(&tp.0).is_some_and(|s| s.contains(&tp.1)));
    let ConsumerGroup { members, owners, .. } = &mut *group;
    let member = members.get_mut(member_id).expect("member present");
    if member.epoch == STATIC_LEAVE_EPOCH {
        // A returning static member resumes from its old assignment at epoch 0.
        member.epoch = 0;
    }
    match member.state {
        MemberState::UnrevokedPartitions if flatten(&member.pending_revocation).any(|tp| still_owns(&tp)) => return,
        MemberState::Stable if member.epoch == target_epoch => return,
        _ => {}
    }
    let before = holdings(member);
    member.pending_revocation.clear();
    member.rebalance_deadline = None;

    let current: HashSet<Tp> = flatten(&member.assigned).collect();
    let wanted: HashSet<Tp> = flatten(target).collect();
    let kept: HashSet<Tp> = current.intersection(&wanted).copied().collect();
    let revoke: Vec<Tp> = current.difference(&wanted).copied().collect();
    if revoke.iter().any(still_owns) {
        member.assigned = to_topic_partitions(kept.iter().copied());
        member.pending_revocation = to_topic_partitions(revoke.into_iter());
        member.state = MemberState::UnrevokedPartitions;
        if member.rebalance_timeout_ms > 0 {
            member.rebalance_deadline = Some(now + member.rebalance_timeout_ms as i64);
        }
    } else {
        let free = |tp: &Tp| owners.get(tp).is_none_or(|o| o == member_id);
        let (assignable, unreleased): (Vec<Tp>, Vec<Tp>) = wanted.difference(&kept).copied().partition(|tp| free(tp));
        member.assigned = to_topic_partitions(kept.into_iter().chain(assignable));
        member.state = if unreleased.is_empty() { MemberState::Stable } else { MemberState::UnreleasedPartitions };
        if member.epoch != target_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = target_epoch;
        }
    }
    // What it was just given dates from the epoch it moves to; what it kept, from before.
    member.settle_assignment_epochs(target_epoch);
    group.set_holdings(member_id, &before);
}

pub(super) fn to_topic_partitions(items: impl Iterator<Item = Tp>) -> TopicPartitions {
    let mut out = TopicPartitions::new();
    for (t, p) in items {
        out.entry(t).or_default().insert(p);
    }
    out
}

/// ConsumerGroupDescribe's view of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConsumerGroup {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<DescribedConsumerMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assignment: TopicPartitions,
    pub target: TopicPartitions,
    /// Speaks the classic protocol inside the consumer group (§6.10).
    pub classic: bool,
}

impl CoordinatorState {
    /// ConsumerGroupDescribe (§6.11); `None` when no consumer group has this id.
    pub fn describe_consumer_group(&self, group_id: &str) -> Option<DescribedConsumerGroup> {
        let g = self.consumer_groups.get(group_id)?;
        Some(DescribedConsumerGroup {
            state: g.state_name(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: preferred_assignor(g, &self.consumer).name(),
            members: g
                .members
                .values()
                .map(|m| DescribedConsumerMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_names: m.subscribed_names.clone(),
                    subscribed_regex: m.subscribed_regex.clone(),
                    assignment: m.assigned.clone(),
                    target: g.target.get(&m.id).cloned().unwrap_or_default(),
                    classic: m.classic.is_some(),
                })
                .collect(),
        })
    }
}
