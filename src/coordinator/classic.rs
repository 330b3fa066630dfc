//! The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the timers that
//! drive rebalances (spec §3). Section numbers below refer to `shared/spec/group-coordinator.md`.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::consumer_group::TopicView;
use super::events::{Departure, GroupEvent, GroupKind, MemberStep, RebalanceCause};
use super::group::{ClassicGroup, GroupState, JoinPhase, Member, ParkedJoin, Token};
use super::outbox::{Continuation, Outbox, Response, TimerKey};
use super::requests::{JoinRequest, JoinResult, JoinedMember, SyncRequest, SyncResult};
use super::state::{CoordinatorState, GroupConfig, MAX_ID_BYTES, MAX_RECORD_STRING_BYTES, MEMBER_ID_PREFIX_BYTES};

const NONE: i16 = 0;

/// Heartbeat as the state machine sees it.
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
}

/// LeaveGroup's answer: a top-level error and one code per listed member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveResult {
    pub error: i16,
    pub members: Vec<i16>,
}

impl CoordinatorState {
    /// JoinGroup (§3.3). The answer arrives as `Response::Join` for `token`, now or later.
    pub fn join(&mut self, now: i64, request: JoinRequest, token: Token, topics: &dyn TopicView) {
        let cfg = &self.config;
        let out = &mut self.out;
        let too_long = |id: &str| id.len() > MAX_ID_BYTES;
        if request.group_id.is_empty() || too_long(&request.group_id) || request.instance_id.as_deref().is_some_and(too_long) {
            return out.reply(token, Response::Join(JoinResult::error(ResponseError::InvalidGroupId, &request.member_id)));
        }
        let unstorable = |s: &str| s.len() > MAX_RECORD_STRING_BYTES;
        let names = request.protocols.iter().map(|(name, _)| name.as_str());
        if [&request.protocol_type, &request.member_id, &request.client_id, &request.client_host].into_iter().any(|s| unstorable(s))
            || names.clone().any(unstorable)
        {
            return out.reply(token, Response::Join(JoinResult::error(ResponseError::InvalidRequest, &request.member_id)));
        }
        if !(cfg.min_session_timeout_ms..=cfg.max_session_timeout_ms).contains(&request.session_timeout_ms) {
            return out.reply(token, Response::Join(JoinResult::error(ResponseError::InvalidSessionTimeout, &request.member_id)));
        }
        // A KIP-848 group of this id: a live one takes the member as a classic member of the
        // consumer group (§6.10), unless the member is the new incarnation of the group's last
        // consumer-protocol member, which turns the group classic; an empty one gives way.
        if let Some(consumer) = self.consumer_groups.get(&request.group_id) {
            let replaced = request.instance_id.as_ref().filter(|_| request.member_id.is_empty());
            let replaced = replaced.and_then(|instance| consumer.static_members.get(instance)).cloned();
            let live = !consumer.members.is_empty();
            if live && !replaced.is_some_and(|old| self.downgrade_for_static_replacement(now, &request.group_id, &old)) {
                return self.join_consumer_group(now, request, token, topics);
            }
            if self.consumer_groups.get(&request.group_id).is_some_and(|g| g.members.is_empty()) {
                let records = self.delete_consumer_group(&request.group_id);
                self.out.append(records, Continuation::Nothing);
            }
        }
        let created = !self.groups.contains_key(&request.group_id);
        if created && !request.member_id.is_empty() {
            return self.out.reply(token, Response::Join(JoinResult::error(ResponseError::UnknownMemberId, &request.member_id)));
        }
        // (An empty consumer group of this id, deleted above, no longer counts.)
        if created && !self.may_create_group() {
            return self.out.reply(token, Response::Join(JoinResult::error(ResponseError::ThrottlingQuotaExceeded, &request.member_id)));
        }
        let cfg = &self.config;
        let out = &mut self.out;
        let group = self.groups.entry(request.group_id.clone()).or_insert_with(|| ClassicGroup::new(request.group_id.clone(), now));
        if !accepts_joining_member(group, &request.member_id, cfg.max_size) {
            return out.reply(token, Response::Join(JoinResult::error(ResponseError::GroupMaxSizeReached, "")));
        }
        if request.member_id.is_empty() {
            join_new_member(group, out, cfg, now, request, token);
        } else {
            join_existing_member(group, out, cfg, now, request, token);
        }
        if created {
            out.append(vec![CoordinatorState::group_record(group, None)], Continuation::Nothing);
        }
    }

    /// SyncGroup (§3.7). The answer arrives as `Response::Sync` for `token`.
    pub fn sync(&mut self, now: i64, request: SyncRequest, token: Token) {
        let out = &mut self.out;
        if request.group_id.is_empty() {
            return out.reply(token, Response::Sync(SyncResult::error(ResponseError::InvalidGroupId)));
        }
        if self.consumer_groups.get(&request.group_id).is_some_and(|g| !g.members.is_empty()) {
            let result = self.sync_consumer_group(now, &request);
            return self.out.reply(token, Response::Sync(result));
        }
        let Some(group) = self.groups.get_mut(&request.group_id).filter(|g| !g.is(GroupState::Empty)) else {
            return out.reply(token, Response::Sync(SyncResult::error(ResponseError::UnknownMemberId)));
        };
        let fail = |out: &mut Outbox, e: ResponseError| out.reply(token, Response::Sync(SyncResult::error(e)));
        if group.is(GroupState::Dead) {
            return fail(out, ResponseError::CoordinatorNotAvailable);
        }
        if let Err(e) = validate_member(group, &request.member_id, request.instance_id.as_deref()) {
            return fail(out, e);
        }
        if request.generation != group.generation {
            return fail(out, ResponseError::IllegalGeneration);
        }
        let differs = |asked: &Option<String>, ours: &Option<String>| matches!((asked, ours), (Some(a), Some(b)) if a != b);
        if differs(&request.protocol_type, &group.protocol_type) || differs(&request.protocol_name, &group.protocol_name) {
            return fail(out, ResponseError::InconsistentGroupProtocol);
        }
        match group.state {
            GroupState::PreparingRebalance => fail(out, ResponseError::RebalanceInProgress),
            GroupState::CompletingRebalance => {
                let member = group.members.get_mut(&request.member_id).expect("validated");
                if let Some(previous) = member.awaiting_sync.replace(token) {
                    out.reply(previous, Response::Sync(SyncResult::error(ResponseError::RebalanceInProgress)));
                }
                let (group_id, member) = (group.id.clone(), request.member_id.clone());
                out.event(now, GroupEvent::MemberReady { group: group_id, member, step: MemberStep::Synced });
                group.pending_sync.remove(&request.member_id);
                if group.pending_sync.is_empty() {
                    group.sync_deadline = None;
                    // Free the set's table: a settled group should cost only its members.
                    group.pending_sync.shrink_to_fit();
                }
                if group.leader.as_deref() == Some(request.member_id.as_str()) {
                    let mut assignments: HashMap<String, Bytes> = HashMap::with_capacity(group.members.len());
                    for (member, assignment) in request.assignments {
                        if group.members.contains_key(&member) {
                            assignments.insert(member, Bytes::copy_from_slice(&assignment));
                        }
                    }
                    let record = CoordinatorState::group_record(group, Some(&assignments));
                    let generation = group.generation;
                    out.append(vec![record], Continuation::SyncComplete { group: group.id.clone(), generation, assignments });
                }
            }
            GroupState::Stable => {
                group.pending_sync.remove(&request.member_id);
                if group.pending_sync.is_empty() {
                    group.sync_deadline = None;
                    // Free the set's table: a settled group should cost only its members.
                    group.pending_sync.shrink_to_fit();
                }
                let (id, protocol_type, protocol_name) = (group.id.clone(), group.protocol_type.clone(), group.protocol_name.clone());
                let member = group.members.get_mut(&request.member_id).expect("validated");
                touch_session(&id, member, out, now);
                let assignment = member.assignment.clone();
                out.reply(token, Response::Sync(SyncResult { error: NONE, protocol_type, protocol_name, assignment }));
            }
            GroupState::Empty | GroupState::Dead => unreachable!("handled above"),
        }
    }

    /// The leader's assignment was stored (or not): deliver it and go Stable, or rebalance.
    pub(crate) fn complete_sync(
        &mut self,
        now: i64,
        group_id: &str,
        generation: i32,
        assignments: HashMap<String, Bytes>,
        error: Option<ResponseError>,
    ) {
        let cfg = &self.config;
        let out = &mut self.out;
        let Some(group) = self.groups.get_mut(group_id) else { return };
        if !group.is(GroupState::CompletingRebalance) || group.generation != generation {
            return;
        }
        match error {
            None => {
                let (id, protocol_type, protocol_name) = (group.id.clone(), group.protocol_type.clone(), group.protocol_name.clone());
                for member in group.members.values_mut() {
                    member.assignment = assignments.get(&member.id).cloned().unwrap_or_default();
                    if let Some(token) = member.awaiting_sync.take() {
                        let result = SyncResult {
                            error: NONE,
                            protocol_type: protocol_type.clone(),
                            protocol_name: protocol_name.clone(),
                            assignment: member.assignment.clone(),
                        };
                        out.reply(token, Response::Sync(result));
                        touch_session(&id, member, out, now);
                    }
                }
                set_state(group, out, GroupState::Stable, now);
                let (generation, members) = (group.generation, group.members.len());
                out.event(now, GroupEvent::Stabilized { group: group.id.clone(), kind: GroupKind::Classic, generation, members });
            }
            Some(e) => {
                let id = group.id.clone();
                for member in group.members.values_mut() {
                    member.assignment = Bytes::new();
                    if let Some(token) = member.awaiting_sync.take() {
                        out.reply(token, Response::Sync(SyncResult::error(e)));
                        touch_session(&id, member, out, now);
                    }
                }
                prepare_rebalance(group, out, cfg, now, RebalanceCause::AssignmentNotStored);
            }
        }
    }

    /// Heartbeat (§3.9): the error code.
    pub fn heartbeat(&mut self, now: i64, request: &HeartbeatRequest) -> i16 {
        let out = &mut self.out;
        if request.group_id.is_empty() {
            return ResponseError::InvalidGroupId.code();
        }
        if self.consumer_groups.contains_key(&request.group_id) {
            let r = request;
            return self.heartbeat_consumer_group(now, &r.group_id, &r.member_id, r.instance_id.as_deref(), r.generation);
        }
        let Some(group) = self.groups.get_mut(&request.group_id) else { return ResponseError::UnknownMemberId.code() };
        if group.is(GroupState::Dead) {
            return ResponseError::CoordinatorNotAvailable.code();
        }
        if let Err(e) = validate_member(group, &request.member_id, request.instance_id.as_deref()) {
            return e.code();
        }
        if request.generation != group.generation {
            return ResponseError::IllegalGeneration.code();
        }
        let id = group.id.clone();
        let state = group.state;
        let member = group.members.get_mut(&request.member_id).expect("validated");
        match state {
            GroupState::Empty | GroupState::Dead => ResponseError::UnknownMemberId.code(),
            GroupState::PreparingRebalance => {
                touch_session(&id, member, out, now);
                ResponseError::RebalanceInProgress.code()
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                touch_session(&id, member, out, now);
                NONE
            }
        }
    }

    /// LeaveGroup (§3.10): `members` are `(member id, instance id)` pairs.
    pub fn leave(&mut self, now: i64, group_id: &str, members: &[(String, Option<String>)]) -> LeaveResult {
        let cfg = &self.config;
        let out = &mut self.out;
        if group_id.is_empty() {
            return LeaveResult {
                error: ResponseError::InvalidGroupId.code(),
                members: vec![ResponseError::InvalidGroupId.code(); members.len()],
            };
        }
        if self.consumer_groups.contains_key(group_id) {
            return self.leave_consumer_group(now, group_id, members);
        }
        let Some(group) = self.groups.get_mut(group_id) else {
            return LeaveResult { error: NONE, members: vec![ResponseError::UnknownMemberId.code(); members.len()] };
        };
        if group.is(GroupState::Dead) {
            let code = ResponseError::CoordinatorNotAvailable.code();
            return LeaveResult { error: code, members: vec![code; members.len()] };
        }
        let mut codes = Vec::with_capacity(members.len());
        let mut leavers = Vec::new();
        // Whether every leaver was named by instance id alone (an admin removing it).
        let mut by_admin = true;
        let mut pending_left = false;
        for (member_id, instance_id) in members {
            let code = if member_id.is_empty() {
                match instance_id.as_ref().and_then(|i| group.static_members.get(i)).cloned() {
                    Some(id) => {
                        remove_member_answering(group, out, &id, now, Departure::Left);
                        leavers.push(id);
                        NONE
                    }
                    None => ResponseError::UnknownMemberId.code(),
                }
            } else if group.pending_members.remove(member_id).is_some() {
                pending_left = true;
                NONE
            } else {
                match validate_member(group, member_id, instance_id.as_deref()) {
                    Err(e) => e.code(),
                    Ok(()) => {
                        remove_member_answering(group, out, member_id, now, Departure::Left);
                        leavers.push(member_id.clone());
                        by_admin = false;
                        NONE
                    }
                }
            };
            codes.push(code);
        }
        if !leavers.is_empty() {
            match group.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    let cause = if by_admin {
                        RebalanceCause::AdminRemoved { members: leavers }
                    } else {
                        RebalanceCause::MemberLeft { members: leavers }
                    };
                    prepare_rebalance(group, out, cfg, now, cause)
                }
                GroupState::PreparingRebalance => maybe_complete_join(group, out, cfg, now, false),
                GroupState::Empty | GroupState::Dead => {}
            }
        } else if pending_left && group.is(GroupState::PreparingRebalance) {
            maybe_complete_join(group, out, cfg, now, false);
        }
        LeaveResult { error: NONE, members: codes }
    }

    /// A timer fired. Stale timers (the state moved on) do nothing.
    pub fn fire(&mut self, now: i64, key: &TimerKey) {
        let cfg = &self.config;
        let out = &mut self.out;
        match key {
            TimerKey::Session { group, member } => {
                let Some(g) = self.groups.get_mut(group) else { return };
                expire_session(g, out, cfg, now, member);
            }
            TimerKey::Pending { group, member } => {
                let Some(g) = self.groups.get_mut(group) else { return };
                if g.pending_members.get(member).is_some_and(|&deadline| deadline <= now) {
                    g.pending_members.remove(member);
                    maybe_complete_join(g, out, cfg, now, true);
                }
            }
            TimerKey::Join { group } => {
                let Some(g) = self.groups.get_mut(group) else { return };
                if g.is(GroupState::PreparingRebalance) && g.join_deadline.is_some_and(|d| d <= now) {
                    join_timer_fired(g, out, cfg, now);
                }
            }
            TimerKey::ConsumerSession { .. }
            | TimerKey::ConsumerRebalance { .. }
            | TimerKey::ConsumerAssignment { .. }
            | TimerKey::ClassicJoin { .. }
            | TimerKey::ClassicSync { .. } => self.fire_consumer(now, key),
            TimerKey::Sync { group } => {
                let Some(g) = self.groups.get_mut(group) else { return };
                if g.sync_deadline.is_some_and(|d| d <= now) && matches!(g.state, GroupState::CompletingRebalance | GroupState::Stable) {
                    g.sync_deadline = None;
                    let laggards: Vec<String> = g.pending_sync.iter().cloned().collect();
                    if !laggards.is_empty() {
                        for id in &laggards {
                            remove_member_answering(g, out, id, now, Departure::RebalanceTimeout);
                        }
                        prepare_rebalance(g, out, cfg, now, RebalanceCause::RebalanceTimeout { members: laggards });
                    }
                }
            }
        }
    }

    /// A static member's replacement was stored (or not): answer its JoinGroup, or undo.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_static_rejoin(
        &mut self,
        now: i64,
        group_id: &str,
        token: Token,
        result: JoinResult,
        old_member: Member,
        new_member_id: String,
        old_leader: Option<String>,
        error: Option<ResponseError>,
    ) {
        let out = &mut self.out;
        let Some(error) = error else {
            return out.reply(token, Response::Join(result));
        };
        if let Some(group) = self.groups.get_mut(group_id) {
            if group.remove_member(&new_member_id).is_some() {
                if let Some(instance) = &old_member.instance_id {
                    group.static_members.insert(instance.clone(), old_member.id.clone());
                }
                let id = group.id.clone();
                let mut restored = old_member;
                restored.awaiting_join = None;
                restored.awaiting_sync = None;
                touch_session(&id, &mut restored, out, now);
                group.insert_member(restored);
                group.leader = old_leader;
            }
        }
        out.reply(token, Response::Join(JoinResult::error(error, "")));
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Capacity rule of `group.max.size` (§3.3 step 2).
fn accepts_joining_member(group: &ClassicGroup, member_id: &str, max: usize) -> bool {
    match group.state {
        GroupState::Empty | GroupState::Dead => true,
        GroupState::PreparingRebalance => {
            // Fewer members than the limit: fewer joined too (counting them goes through all).
            group.members.len() < max
                || group.members.get(member_id).is_some_and(|m| m.awaiting_join.is_some())
                || group.joined_count() < max
        }
        GroupState::CompletingRebalance | GroupState::Stable => group.members.contains_key(member_id) || group.members.len() < max,
    }
}

/// Identity check shared by every classic API that carries a member id and instance id.
pub(crate) fn validate_member(group: &ClassicGroup, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
    if let Some(instance) = instance_id {
        match group.static_members.get(instance) {
            None => return Err(ResponseError::UnknownMemberId),
            Some(owner) if owner != member_id => return Err(ResponseError::FencedInstanceId),
            Some(_) => {}
        }
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

fn join_new_member(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64, request: JoinRequest, token: Token) {
    if group.is(GroupState::Dead) {
        return out.reply(token, Response::Join(JoinResult::error(ResponseError::CoordinatorNotAvailable, &request.member_id)));
    }
    if !group.supports(&request.protocol_type, &request.protocols) {
        return out.reply(token, Response::Join(JoinResult::error(ResponseError::InconsistentGroupProtocol, &request.member_id)));
    }
    let prefix = truncate(request.instance_id.as_deref().unwrap_or(&request.client_id), MEMBER_ID_PREFIX_BYTES);
    let member_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
    match &request.instance_id {
        Some(instance) => match group.static_members.get(instance).cloned() {
            Some(old_id) => replace_static_member(group, out, cfg, now, request, token, old_id, member_id),
            None => add_member_and_rebalance(group, out, cfg, now, &request, member_id, token),
        },
        None if request.version >= 4 && group.pending_members.len() >= cfg.max_pending_members => {
            crate::metrics::limit_reached(crate::metrics::labels::LIMIT_PENDING_MEMBERS);
            out.reply(token, Response::Join(JoinResult::error(ResponseError::GroupMaxSizeReached, "")));
        }
        None if request.version >= 4 => {
            // KIP-394: hand out the id first; the member joins with it.
            let deadline = now + request.session_timeout_ms as i64;
            group.pending_members.insert(member_id.clone(), deadline);
            out.timer(TimerKey::Pending { group: group.id.clone(), member: member_id.clone() }, deadline);
            out.reply(token, Response::Join(JoinResult::error(ResponseError::MemberIdRequired, &member_id)));
        }
        None => add_member_and_rebalance(group, out, cfg, now, &request, member_id, token),
    }
}

fn join_existing_member(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64, request: JoinRequest, token: Token) {
    let member_id = request.member_id.clone();
    let fail = |out: &mut Outbox, e: ResponseError| out.reply(token, Response::Join(JoinResult::error(e, &member_id)));
    if group.is(GroupState::Dead) {
        return fail(out, ResponseError::CoordinatorNotAvailable);
    }
    if !group.supports(&request.protocol_type, &request.protocols) {
        return fail(out, ResponseError::InconsistentGroupProtocol);
    }
    if group.take_pending(&member_id) {
        return add_member_and_rebalance(group, out, cfg, now, &request, member_id.clone(), token);
    }
    if let Err(e) = validate_member(group, &member_id, request.instance_id.as_deref()) {
        return fail(out, e);
    }
    let is_leader = group.leader.as_deref() == Some(member_id.as_str());
    let same = group.members[&member_id].same_protocols(&request.protocols);
    match group.state {
        GroupState::PreparingRebalance => {
            update_member(group, out, now, &request, token);
            maybe_complete_join(group, out, cfg, now, false);
        }
        GroupState::CompletingRebalance if same => {
            let result = current_result(group, &member_id, is_leader);
            out.reply(token, Response::Join(result));
        }
        GroupState::Stable if same && !is_leader => {
            let result = current_result(group, &member_id, false);
            out.reply(token, Response::Join(result));
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            update_member(group, out, now, &request, token);
            let cause = if same {
                RebalanceCause::LeaderRejoined { member: member_id }
            } else {
                RebalanceCause::MetadataChanged { member: member_id }
            };
            prepare_rebalance(group, out, cfg, now, cause);
        }
        GroupState::Empty | GroupState::Dead => fail(out, ResponseError::UnknownMemberId),
    }
}

/// The current generation's JoinGroup answer for a member (the leader also gets the members).
fn current_result(group: &ClassicGroup, member_id: &str, with_members: bool) -> JoinResult {
    JoinResult {
        error: NONE,
        generation: group.generation,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        leader: group.leader.clone().unwrap_or_default(),
        skip_assignment: false,
        member_id: member_id.to_string(),
        members: if with_members { member_list(group) } else { Vec::new() },
    }
}

fn member_list(group: &ClassicGroup) -> Vec<JoinedMember> {
    let protocol = group.protocol_name.as_deref().unwrap_or_default();
    group
        .members
        .values()
        .map(|m| JoinedMember { member_id: m.id.clone(), instance_id: m.instance_id.clone(), metadata: m.metadata_for(protocol) })
        .collect()
}

/// Updates a known member from its JoinGroup and parks the request.
fn update_member(group: &mut ClassicGroup, out: &mut Outbox, now: i64, request: &JoinRequest, token: Token) {
    group.set_protocols(&request.member_id, copy_protocols(&request.protocols));
    let member = group.members.get_mut(&request.member_id).expect("validated member");
    member.session_timeout_ms = request.session_timeout_ms;
    member.rebalance_timeout_ms = request.rebalance_timeout_ms;
    if let Some(previous) = member.awaiting_join.replace(ParkedJoin { token, version: request.version }) {
        // A retried JoinGroup supersedes the one still parked.
        out.reply(previous.token, Response::Join(JoinResult::error(ResponseError::RebalanceInProgress, &request.member_id)));
    }
    say_joined(group.id.clone(), out, now, request.member_id.clone());
}

/// Says that a member's JoinGroup is in for the join phase.
fn say_joined(group: String, out: &mut Outbox, now: i64, member: String) {
    out.event(now, GroupEvent::MemberReady { group, member, step: MemberStep::Joined });
}

/// Protocol metadata is copied out of the request frame so the frame can be freed.
fn copy_protocols(protocols: &[(String, Bytes)]) -> Vec<(String, Bytes)> {
    protocols.iter().map(|(n, m)| (n.clone(), Bytes::copy_from_slice(m))).collect()
}

fn add_member_and_rebalance(
    group: &mut ClassicGroup,
    out: &mut Outbox,
    cfg: &GroupConfig,
    now: i64,
    request: &JoinRequest,
    member_id: String,
    token: Token,
) {
    let deadline = now + cfg.new_member_join_timeout_ms;
    let member = Member {
        id: member_id.clone(),
        instance_id: request.instance_id.clone(),
        client_id: request.client_id.clone(),
        client_host: request.client_host.clone(),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        session_timeout_ms: request.session_timeout_ms,
        protocols: copy_protocols(&request.protocols),
        assignment: Bytes::new(),
        awaiting_join: Some(ParkedJoin { token, version: request.version }),
        awaiting_sync: None,
        is_new: true,
        session_deadline: Some(deadline),
    };
    if group.members.is_empty() {
        group.protocol_type = Some(request.protocol_type.clone());
    }
    if group.leader.is_none() {
        group.leader = Some(member_id.clone());
    }
    if let Some(instance) = &request.instance_id {
        group.static_members.insert(instance.clone(), member_id.clone());
    }
    group.insert_member(member);
    if group.is(GroupState::PreparingRebalance) && matches!(group.join_phase, JoinPhase::Initial { .. }) {
        group.new_member_added = true;
    }
    out.timer(TimerKey::Session { group: group.id.clone(), member: member_id.clone() }, deadline);
    out.event(now, GroupEvent::MemberJoined { group: group.id.clone(), kind: GroupKind::Classic, member: member_id.clone() });
    match group.state {
        GroupState::Empty => prepare_rebalance(group, out, cfg, now, RebalanceCause::GroupCreated { member: member_id }),
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, out, cfg, now, RebalanceCause::MemberJoined { member: member_id })
        }
        _ => maybe_complete_join(group, out, cfg, now, false),
    }
}

/// A known `group.instance.id` joins with a new member id (a restart): the new member takes the
/// old one's place (§3.12).
#[allow(clippy::too_many_arguments)]
fn replace_static_member(
    group: &mut ClassicGroup,
    out: &mut Outbox,
    cfg: &GroupConfig,
    now: i64,
    request: JoinRequest,
    token: Token,
    old_id: String,
    new_id: String,
) {
    let old_leader = group.leader.clone();
    let was_pending_sync = group.pending_sync.contains(&old_id);
    let Some(old) = group.remove_member(&old_id) else { return };
    if let Some(parked) = old.awaiting_join {
        out.reply(parked.token, Response::Join(JoinResult::error(ResponseError::FencedInstanceId, &old_id)));
    }
    if let Some(parked) = old.awaiting_sync {
        out.reply(parked, Response::Sync(SyncResult::error(ResponseError::FencedInstanceId)));
    }
    let mut member = old.clone();
    member.id = new_id.clone();
    member.awaiting_join = None;
    member.awaiting_sync = None;
    member.session_deadline = None;
    let id = group.id.clone();
    touch_session(&id, &mut member, out, now);
    let instance = request.instance_id.clone().expect("static member");
    group.static_members.insert(instance.clone(), new_id.clone());
    out.event(
        now,
        GroupEvent::MemberRemoved { group: id.clone(), kind: GroupKind::Classic, member: old_id.clone(), departure: Departure::Replaced },
    );
    out.event(now, GroupEvent::MemberJoined { group: id.clone(), kind: GroupKind::Classic, member: new_id.clone() });
    group.insert_member(member);
    if old_leader.as_deref() == Some(old_id.as_str()) || group.leader.is_none() {
        group.leader = Some(new_id.clone());
    }
    if was_pending_sync {
        group.pending_sync.insert(new_id.clone());
    }

    let mut joined = request;
    joined.member_id = new_id.clone();
    match group.state {
        GroupState::Stable => {
            let selected_before = group.protocol_name.clone();
            group.set_protocols(&new_id, copy_protocols(&joined.protocols));
            {
                let m = group.members.get_mut(&new_id).expect("just inserted");
                m.session_timeout_ms = joined.session_timeout_ms;
                m.rebalance_timeout_ms = joined.rebalance_timeout_ms;
            }
            if group.select_protocol() == selected_before {
                // No rebalance: persist the replacement, then answer (v9+: SkipAssignment).
                let is_leader = group.leader.as_deref() == Some(new_id.as_str());
                let skip = joined.version >= 9 && is_leader;
                let result = JoinResult {
                    error: NONE,
                    generation: group.generation,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    leader: if joined.version >= 9 { group.leader.clone() } else { old_leader.clone() }.unwrap_or_default(),
                    skip_assignment: skip,
                    member_id: new_id.clone(),
                    members: if skip { member_list(group) } else { Vec::new() },
                };
                let record = CoordinatorState::group_record(group, None);
                out.append(
                    vec![record],
                    Continuation::StaticRejoin {
                        group: group.id.clone(),
                        token,
                        result,
                        old_member: Box::new(old),
                        new_member_id: new_id,
                        old_leader,
                    },
                );
            } else {
                park(group, out, now, &new_id, token, joined.version);
                prepare_rebalance(group, out, cfg, now, RebalanceCause::StaticMemberReplaced { instance, member: new_id });
            }
        }
        GroupState::PreparingRebalance => {
            update_member(group, out, now, &joined, token);
            maybe_complete_join(group, out, cfg, now, false);
        }
        GroupState::CompletingRebalance | GroupState::Empty | GroupState::Dead => {
            // The leader may be computing an assignment keyed by the old id: rebalance.
            update_member(group, out, now, &joined, token);
            prepare_rebalance(group, out, cfg, now, RebalanceCause::StaticMemberReplaced { instance, member: new_id });
        }
    }
}

fn park(group: &mut ClassicGroup, out: &mut Outbox, now: i64, member_id: &str, token: Token, version: i16) {
    if let Some(m) = group.members.get_mut(member_id) {
        m.awaiting_join = Some(ParkedJoin { token, version });
        say_joined(group.id.clone(), out, now, member_id.to_string());
    }
}

/// Starts a rebalance (§3.2): clears a half-finished sync, arms the join timer. Every caller
/// says why.
pub(crate) fn prepare_rebalance(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64, cause: RebalanceCause) {
    let (generation, members) = (group.generation, cause.members_before(group.members.len()));
    out.event(now, GroupEvent::RebalanceStarted { group: group.id.clone(), kind: GroupKind::Classic, cause, generation, members });
    if group.is(GroupState::CompletingRebalance) {
        let id = group.id.clone();
        for member in group.members.values_mut() {
            member.assignment = Bytes::new();
            if let Some(token) = member.awaiting_sync.take() {
                out.reply(token, Response::Sync(SyncResult::error(ResponseError::RebalanceInProgress)));
                touch_session(&id, member, out, now);
            }
        }
    }
    group.sync_deadline = None;
    group.pending_sync.clear();
    let deadline = if group.is(GroupState::Empty) {
        let delay = cfg.initial_rebalance_delay_ms;
        let remaining = (group.rebalance_timeout_ms() - delay).max(0);
        group.join_phase = JoinPhase::Initial { delay_ms: delay, remaining_ms: remaining };
        group.new_member_added = false;
        now + delay
    } else {
        group.join_phase = JoinPhase::Normal;
        now + group.rebalance_timeout_ms()
    };
    group.join_deadline = Some(deadline);
    set_state(group, out, GroupState::PreparingRebalance, now);
    out.timer(TimerKey::Join { group: group.id.clone() }, deadline);
    // A non-initial rebalance in which everyone has already joined completes at once.
    maybe_complete_join(group, out, cfg, now, false);
}

/// Completes the join phase if everyone has joined — never from a request during an initial
/// rebalance (only its delay timer completes it), but after timer-driven removals always.
fn maybe_complete_join(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64, by_timer: bool) {
    let initial = matches!(group.join_phase, JoinPhase::Initial { .. });
    if group.is(GroupState::PreparingRebalance) && group.all_members_joined() && (by_timer || !initial) {
        complete_join(group, out, cfg, now);
    }
}

fn join_timer_fired(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64) {
    if let JoinPhase::Initial { delay_ms, remaining_ms } = group.join_phase {
        if group.new_member_added && remaining_ms > 0 {
            // KIP-134: members keep arriving; wait one more window, within the rebalance timeout.
            group.new_member_added = false;
            let next = delay_ms.min(remaining_ms);
            group.join_phase = JoinPhase::Initial { delay_ms, remaining_ms: (remaining_ms - delay_ms).max(0) };
            group.join_deadline = Some(now + next);
            out.timer(TimerKey::Join { group: group.id.clone() }, now + next);
            return;
        }
    }
    complete_join(group, out, cfg, now);
}

/// Ends the join phase (§3.5): drops dynamic members that did not rejoin, bumps the generation,
/// answers every parked JoinGroup and starts the sync phase.
fn complete_join(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64) {
    group.join_deadline = None;
    let absent: Vec<String> =
        group.members.values().filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none()).map(|m| m.id.clone()).collect();
    for id in absent {
        remove_member_answering(group, out, &id, now, Departure::NotRejoined);
    }
    if group.is(GroupState::Dead) {
        return;
    }
    let leader_joined = group.leader.as_ref().and_then(|l| group.members.get(l)).is_some_and(|m| m.awaiting_join.is_some());
    if !leader_joined {
        if let Some(m) = group.members.values().find(|m| m.awaiting_join.is_some()) {
            group.leader = Some(m.id.clone());
        } else if !group.members.is_empty() {
            // Only absent static members are left: wait another rebalance timeout.
            let deadline = now + group.rebalance_timeout_ms();
            group.join_deadline = Some(deadline);
            out.timer(TimerKey::Join { group: group.id.clone() }, deadline);
            return;
        }
    }
    group.generation += 1;
    if group.members.is_empty() {
        group.protocol_name = None;
        group.leader = None;
        set_state(group, out, GroupState::Empty, now);
        group.update_subscribed_topics();
        out.event(now, GroupEvent::JoinCompleted { group: group.id.clone(), generation: group.generation, members: 0 });
        out.append(vec![CoordinatorState::group_record(group, None)], Continuation::Nothing);
        return;
    }
    group.protocol_name = group.select_protocol();
    group.update_subscribed_topics();
    set_state(group, out, GroupState::CompletingRebalance, now);
    out.event(now, GroupEvent::JoinCompleted { group: group.id.clone(), generation: group.generation, members: group.members.len() });
    let leader = group.leader.clone().unwrap_or_default();
    let members = member_list(group);
    let id = group.id.clone();
    for member in group.members.values_mut() {
        if let Some(parked) = member.awaiting_join.take() {
            let result = JoinResult {
                error: NONE,
                generation: group.generation,
                protocol_type: group.protocol_type.clone(),
                protocol_name: group.protocol_name.clone(),
                leader: leader.clone(),
                skip_assignment: false,
                member_id: member.id.clone(),
                members: if member.id == leader { members.clone() } else { Vec::new() },
            };
            out.reply(parked.token, Response::Join(result));
        }
        member.is_new = false;
        let deadline = now + member.session_timeout_ms as i64;
        member.session_deadline = Some(deadline);
        out.timer(TimerKey::Session { group: id.clone(), member: member.id.clone() }, deadline);
        group.pending_sync.insert(member.id.clone());
    }
    let deadline = now + group.rebalance_timeout_ms();
    group.sync_deadline = Some(deadline);
    out.timer(TimerKey::Sync { group: id }, deadline);
    let _ = cfg;
}

/// A member's session timer fired (§3.11).
fn expire_session(group: &mut ClassicGroup, out: &mut Outbox, cfg: &GroupConfig, now: i64, member_id: &str) {
    let Some(member) = group.members.get_mut(member_id) else { return };
    match member.session_deadline {
        None => return,
        Some(deadline) if deadline > now => {
            // Heartbeats moved it: look again then.
            out.timer(TimerKey::Session { group: group.id.clone(), member: member_id.to_string() }, deadline);
            return;
        }
        Some(_) => {}
    }
    if !(member.is_new || (member.awaiting_join.is_none() && member.awaiting_sync.is_none())) {
        // A parked request keeps it; its timer restarts when the request completes.
        member.session_deadline = None;
        return;
    }
    remove_member_answering(group, out, member_id, now, Departure::SessionTimeout);
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, out, cfg, now, RebalanceCause::SessionTimeout { member: member_id.to_string() })
        }
        GroupState::PreparingRebalance => maybe_complete_join(group, out, cfg, now, true),
        GroupState::Empty | GroupState::Dead => {}
    }
}

/// Removes a member, answering its parked requests with UNKNOWN_MEMBER_ID.
fn remove_member_answering(group: &mut ClassicGroup, out: &mut Outbox, member_id: &str, now: i64, departure: Departure) {
    if let Some(member) = group.remove_member(member_id) {
        out.event(
            now,
            GroupEvent::MemberRemoved { group: group.id.clone(), kind: GroupKind::Classic, member: member.id.clone(), departure },
        );
        if let Some(parked) = member.awaiting_join {
            out.reply(parked.token, Response::Join(JoinResult::error(ResponseError::UnknownMemberId, "")));
        }
        if let Some(token) = member.awaiting_sync {
            out.reply(token, Response::Sync(SyncResult::error(ResponseError::UnknownMemberId)));
        }
    }
}

/// Moves a group to `to` and says so.
pub(crate) fn set_state(group: &mut ClassicGroup, out: &mut Outbox, to: GroupState, now: i64) {
    let from = group.state;
    group.transition(to, now);
    if from != to {
        out.event(now, GroupEvent::StateChanged { group: group.id.clone(), from, to });
    }
}

/// Restarts a member's session. A timer is armed only when none is pending at or before the new
/// deadline (a pending one re-arms itself when it finds the deadline moved).
pub(crate) fn touch_session(group_id: &str, member: &mut Member, out: &mut Outbox, now: i64) {
    let deadline = now + member.session_timeout_ms as i64;
    let needs_timer = member.session_deadline.is_none_or(|current| deadline < current);
    member.session_deadline = Some(deadline);
    if needs_timer {
        out.timer(TimerKey::Session { group: group_id.to_string(), member: member.id.clone() }, deadline);
    }
}
