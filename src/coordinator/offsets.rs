//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and offset expiration (spec §4).

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::classic::{touch_session, validate_member};
use super::consumer_group::TopicView;
use super::events::GroupEvent;
use super::group::{ClassicGroup, GroupState, Token};
use super::outbox::{Continuation, Response};
use super::records::{GroupRecord, OffsetValue};
use super::state::CoordinatorState;

const NONE: i16 = 0;

/// OffsetCommit as the state machine sees it (topics already checked against the catalog).
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub version: i16,
    /// v2–v4 `RetentionTimeMs`; -1 = broker default.
    pub retention_ms: i64,
    pub offsets: Vec<CommitOffset>,
}

#[derive(Debug, Clone)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// OffsetCommit v1's own commit time; `None` (or -1 on the wire) is the time it arrives.
    pub commit_timestamp: Option<i64>,
}

/// What an offset's age is measured from (§4.6).
#[derive(Debug, Clone, Copy)]
enum ExpiryBase {
    /// The offset's own commit time (simple groups, Stable consumer groups).
    CommitTime,
    /// A fixed time: when the group became Empty.
    Since(i64),
}

impl ExpiryBase {
    fn of(self, value: &OffsetValue) -> i64 {
        match self {
            ExpiryBase::CommitTime => value.commit_timestamp,
            ExpiryBase::Since(t) => t,
        }
    }
}

/// One partition of an OffsetFetch answer: `(partition, offset, leader epoch, metadata)`.
pub type FetchedOffset = (i32, i64, i32, String);

impl CoordinatorState {
    /// OffsetCommit (§4.1). The answer (one code per offset, in order) arrives as
    /// `Response::Commit` for `token` once the accepted offsets are stored.
    /// `topics` names the topics' ids, by which a KIP-848 member's partitions are kept.
    pub fn commit(&mut self, now: i64, request: CommitRequest, token: Token, topics: &dyn TopicView) {
        let n = request.offsets.len();
        if request.group_id.len() > super::state::MAX_ID_BYTES {
            return self.out.reply(token, Response::Commit(vec![ResponseError::InvalidGroupId.code(); n]));
        }
        if let Err(e) = self.validate_commit(now, &request, topics) {
            return self.out.reply(token, Response::Commit(vec![e.code(); n]));
        }
        let mut codes = Vec::with_capacity(n);
        let mut accepted = Vec::with_capacity(n);
        let expire = (request.version <= 4 && request.retention_ms != -1).then(|| now.saturating_add(request.retention_ms));
        for o in request.offsets {
            let metadata = o.metadata.unwrap_or_default();
            // Kafka measures metadata as Java String.length(): UTF-16 code units.
            if metadata.encode_utf16().count() > self.config.offset_metadata_max_bytes {
                codes.push(ResponseError::OffsetMetadataTooLarge.code());
                continue;
            }
            codes.push(NONE);
            let commit_timestamp = o.commit_timestamp.filter(|&t| t != -1).unwrap_or(now);
            let value =
                OffsetValue { offset: o.offset, leader_epoch: o.leader_epoch, metadata, commit_timestamp, expire_timestamp: expire };
            accepted.push((o.topic, o.partition, value));
        }
        if accepted.is_empty() {
            return self.out.reply(token, Response::Commit(codes));
        }
        let records = accepted
            .iter()
            .map(|(topic, partition, value)| GroupRecord::Offset {
                group: request.group_id.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: Some(value.clone()),
            })
            .collect();
        self.out.append(records, Continuation::Commit { group: request.group_id, token, offsets: accepted, codes });
    }

    /// The group-level checks of OffsetCommit, in Kafka's order (§4.1 steps 5–6).
    fn validate_commit(&mut self, now: i64, r: &CommitRequest, topics: &dyn TopicView) -> Result<(), ResponseError> {
        if r.version == 0 {
            return self.validate_commit_v0(now, &r.group_id);
        }
        if let Some(group) = self.consumer_groups.get(&r.group_id) {
            // KIP-848 members commit with their member epoch (§4.1 step 7).
            if r.generation < 0 && group.members.is_empty() {
                return Ok(());
            }
            let member = group.members.get(&r.member_id).ok_or(ResponseError::UnknownMemberId)?;
            // Classic members of the group (§6.10) commit as classic members do.
            let classic = member.classic.is_some();
            if r.version < 9 && !classic {
                return Err(ResponseError::UnsupportedVersion);
            }
            let fenced = if classic { ResponseError::IllegalGeneration } else { ResponseError::StaleMemberEpoch };
            if r.generation > member.epoch {
                return Err(fenced);
            }
            // KIP-1251 (Kafka 4.3): an older epoch may still commit the partitions the member
            // was given at or before it (a commit sent just before a heartbeat moved the epoch);
            // one partition it does not hold, or got later, fences the whole commit.
            if r.generation < member.epoch {
                for o in &r.offsets {
                    let since = topics.by_name(&o.topic).and_then(|(id, _)| member.assignment_epoch((id, o.partition)));
                    if since.is_none_or(|epoch| r.generation < epoch) {
                        return Err(fenced);
                    }
                }
            }
            return Ok(());
        }
        let out = &mut self.out;
        let Some(group) = self.groups.get_mut(&r.group_id) else {
            if r.generation < 0 {
                // A commit from outside any group (assign() users, admin tools): a simple group.
                if !self.may_create_group() {
                    return Err(ResponseError::ThrottlingQuotaExceeded);
                }
                self.groups.insert(r.group_id.clone(), ClassicGroup::new(r.group_id.clone(), now));
                return Ok(());
            }
            return Err(if r.version >= 9 { ResponseError::GroupIdNotFound } else { ResponseError::IllegalGeneration });
        };
        if group.is(GroupState::Dead) {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if r.generation < 0 && group.is(GroupState::Empty) {
            return Ok(());
        }
        if r.generation >= 0 || !r.member_id.is_empty() || r.instance_id.is_some() {
            validate_member(group, &r.member_id, r.instance_id.as_deref())?;
            if r.generation != group.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if !group.is(GroupState::Empty) {
            return Err(ResponseError::UnknownMemberId);
        }
        if group.is(GroupState::CompletingRebalance) {
            return Err(ResponseError::RebalanceInProgress);
        }
        let id = group.id.clone();
        if let Some(member) = group.members.get_mut(&r.member_id) {
            touch_session(&id, member, out, now);
        }
        Ok(())
    }

    /// OffsetCommit v0 names no member or generation: Kafka stored its offsets apart from the
    /// group (in ZooKeeper), whatever the group's state. corral keeps them with the group's
    /// others, which OffsetFetch of any version reads, so v0 checks no membership; a group that
    /// does not exist becomes a simple group, as a commit from outside any group does.
    fn validate_commit_v0(&mut self, now: i64, group_id: &str) -> Result<(), ResponseError> {
        if self.consumer_groups.contains_key(group_id) {
            return Ok(());
        }
        match self.groups.get(group_id) {
            Some(group) if group.is(GroupState::Dead) => Err(ResponseError::CoordinatorNotAvailable),
            Some(_) => Ok(()),
            None if !self.may_create_group() => Err(ResponseError::ThrottlingQuotaExceeded),
            None => {
                self.groups.insert(group_id.to_string(), ClassicGroup::new(group_id.to_string(), now));
                Ok(())
            }
        }
    }

    pub(crate) fn complete_commit(
        &mut self,
        now: i64,
        group_id: &str,
        token: Token,
        offsets: Vec<(String, i32, OffsetValue)>,
        codes: Vec<i16>,
        error: Option<ResponseError>,
    ) {
        let codes = match error {
            Some(e) => codes.iter().map(|&c| if c == NONE { e.code() } else { c }).collect(),
            None => {
                if self.groups.contains_key(group_id) || self.consumer_groups.contains_key(group_id) {
                    let partitions = offsets.len();
                    let stored = self.offsets.entry(group_id.to_string()).or_default();
                    for (topic, partition, value) in offsets {
                        stored.insert((topic, partition), value);
                    }
                    self.out.event(now, GroupEvent::OffsetsCommitted { group: group_id.to_string(), partitions });
                }
                codes
            }
        };
        self.out.reply(token, Response::Commit(codes));
    }

    /// OffsetFetch for one group (§4.2). `topics = None` asks for every committed offset.
    /// Unknown groups and partitions answer offset -1 without an error, as Kafka does.
    pub fn fetch_offsets(&self, group_id: &str, topics: Option<&[(String, Vec<i32>)]>) -> Vec<(String, Vec<FetchedOffset>)> {
        let live = self.groups.get(group_id).is_some_and(|g| !g.is(GroupState::Dead)) || self.consumer_groups.contains_key(group_id);
        let offsets = self.offsets.get(group_id).filter(|_| live);
        match topics {
            Some(topics) => topics
                .iter()
                .map(|(topic, partitions)| {
                    let found = partitions
                        .iter()
                        .map(|&p| match offsets.and_then(|o| o.get(&(topic.clone(), p))) {
                            Some(v) => (p, v.offset, v.leader_epoch, v.metadata.clone()),
                            None => (p, -1, -1, String::new()),
                        })
                        .collect();
                    (topic.clone(), found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<&str, Vec<FetchedOffset>> = BTreeMap::new();
                if let Some(o) = offsets {
                    for ((topic, p), v) in o {
                        by_topic.entry(topic).or_default().push((*p, v.offset, v.leader_epoch, v.metadata.clone()));
                    }
                }
                by_topic
                    .into_iter()
                    .map(|(topic, mut parts)| {
                        parts.sort_by_key(|p| p.0);
                        (topic.to_string(), parts)
                    })
                    .collect()
            }
        }
    }

    /// OffsetFetch v9 from a KIP-848 member: its id and epoch must be current (§4.2 step 4).
    pub fn validate_fetch_member(&self, group_id: &str, member_id: Option<&str>, epoch: i32) -> Result<(), ResponseError> {
        let Some(group) = self.consumer_groups.get(group_id) else { return Ok(()) };
        if member_id.is_none() && epoch < 0 {
            return Ok(());
        }
        let member = member_id.and_then(|m| group.members.get(m)).ok_or(ResponseError::UnknownMemberId)?;
        if member.epoch != epoch {
            return Err(if member.classic.is_some() { ResponseError::IllegalGeneration } else { ResponseError::StaleMemberEpoch });
        }
        Ok(())
    }

    /// OffsetDelete (§4.3): per topic, per partition codes; or a group-level error.
    pub fn delete_offsets(&mut self, group_id: &str, topics: &[(String, Vec<i32>)]) -> Result<Vec<Vec<i16>>, ResponseError> {
        if let Some(group) = self.consumer_groups.get(group_id) {
            let subscribed: std::collections::HashSet<String> = group
                .members
                .values()
                .flat_map(|m| m.subscribed_names.iter().cloned().chain(group.resolved_regex.get(&m.id).into_iter().flatten().cloned()))
                .collect();
            let mut tombstones = Vec::new();
            let mut codes = Vec::with_capacity(topics.len());
            let mut stored = self.offsets.get_mut(group_id);
            for (topic, partitions) in topics {
                if subscribed.contains(topic) {
                    codes.push(vec![ResponseError::GroupSubscribedToTopic.code(); partitions.len()]);
                    continue;
                }
                for &p in partitions {
                    if stored.as_mut().is_some_and(|o| o.remove(&(topic.clone(), p)).is_some()) {
                        tombstones.push(GroupRecord::Offset {
                            group: group_id.to_string(),
                            topic: topic.clone(),
                            partition: p,
                            value: None,
                        });
                    }
                }
                codes.push(vec![NONE; partitions.len()]);
            }
            if !tombstones.is_empty() {
                self.out.append(tombstones, Continuation::Nothing);
            }
            return Ok(codes);
        }
        let group = self.groups.get_mut(group_id).filter(|g| !g.is(GroupState::Dead)).ok_or(ResponseError::GroupIdNotFound)?;
        let active = matches!(group.state, GroupState::PreparingRebalance | GroupState::CompletingRebalance | GroupState::Stable);
        if active && group.protocol_type.as_deref() != Some("consumer") {
            return Err(ResponseError::NonEmptyGroup);
        }
        let mut tombstones = Vec::new();
        let mut codes = Vec::with_capacity(topics.len());
        for (topic, partitions) in topics {
            if active && group.is_subscribed(topic) {
                codes.push(vec![ResponseError::GroupSubscribedToTopic.code(); partitions.len()]);
                continue;
            }
            let mut stored = self.offsets.get_mut(group_id);
            for &p in partitions {
                if stored.as_mut().is_some_and(|o| o.remove(&(topic.clone(), p)).is_some()) {
                    tombstones.push(GroupRecord::Offset { group: group_id.to_string(), topic: topic.clone(), partition: p, value: None });
                }
            }
            codes.push(vec![NONE; partitions.len()]);
        }
        if !tombstones.is_empty() {
            self.out.append(tombstones, Continuation::Nothing);
        }
        Ok(codes)
    }

    /// The offset expiration job (§4.6): tombstones offsets past retention, and deletes Empty
    /// groups that have no offsets left. Returns how many offsets expired.
    pub fn expire_offsets(&mut self, now: i64) -> usize {
        let retention = self.config.offsets_retention_ms;
        let mut records = Vec::new();
        let mut dead_groups = Vec::new();
        let mut expired_count = 0;
        for group in self.groups.values() {
            // What an offset's age counts from; None = nothing in this group expires.
            let base = match (&group.protocol_type, group.state) {
                (None, _) => Some(ExpiryBase::CommitTime),
                (Some(_), GroupState::Empty) => Some(ExpiryBase::Since(group.state_timestamp)),
                (Some(t), GroupState::Stable) if t == "consumer" && group.subscribed_topics.is_some() => Some(ExpiryBase::CommitTime),
                _ => None,
            };
            let Some(base) = base else { continue };
            let offsets = self.offsets.entry(group.id.clone()).or_default();
            let expired: Vec<(String, i32)> = offsets
                .iter()
                .filter(|((topic, _), v)| {
                    !(group.state == GroupState::Stable && group.is_subscribed(topic))
                        && (v.expire_timestamp.is_some_and(|e| now >= e) || now.saturating_sub(base.of(v)) >= retention)
                })
                .map(|(k, _)| k.clone())
                .collect();
            let partitions = expired.len();
            for (topic, partition) in expired {
                offsets.remove(&(topic.clone(), partition));
                records.push(GroupRecord::Offset { group: group.id.clone(), topic, partition, value: None });
                expired_count += 1;
            }
            if partitions > 0 {
                self.out.event(now, GroupEvent::OffsetsExpired { group: group.id.clone(), partitions });
            }
            if offsets.is_empty() && group.is(GroupState::Empty) && group.pending_members.is_empty() {
                dead_groups.push(group.id.clone());
            }
        }
        for group in self.consumer_groups.values() {
            let subscribed: std::collections::HashSet<&String> = group.subscription_metadata.keys().collect();
            let offsets = self.offsets.entry(group.id.clone()).or_default();
            let expired: Vec<(String, i32)> = offsets
                .iter()
                .filter(|((topic, _), v)| {
                    !subscribed.contains(topic)
                        && (v.expire_timestamp.is_some_and(|e| now >= e) || now.saturating_sub(v.commit_timestamp) >= retention)
                })
                .map(|(k, _)| k.clone())
                .collect();
            let partitions = expired.len();
            for (topic, partition) in expired {
                offsets.remove(&(topic.clone(), partition));
                records.push(GroupRecord::Offset { group: group.id.clone(), topic, partition, value: None });
                expired_count += 1;
            }
            if partitions > 0 {
                self.out.event(now, GroupEvent::OffsetsExpired { group: group.id.clone(), partitions });
            }
        }
        for id in dead_groups {
            self.offsets.remove(&id);
            if let Some(mut g) = self.groups.remove(&id) {
                super::classic::set_state(&mut g, &mut self.out, GroupState::Dead, now);
                records.push(GroupRecord::Group { group: id, value: None });
            }
        }
        if !records.is_empty() {
            self.out.append(records, Continuation::Nothing);
        }
        expired_count
    }
}
