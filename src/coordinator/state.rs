//! The coordinator of one `__consumer_offsets` partition as a pure state machine.
//!
//! Every entry point takes `now` (milliseconds) and a request, changes the state, and leaves its
//! outputs in the [`Outbox`]: responses to parked requests, timers to arm, and records to
//! append to the partition's log. It never reads the clock, spawns, or touches a socket, so it is
//! tested by calling it with explicit times, and the shell ([`super::shell`]) drives it for real.
//!
//! Records appended are durable state; everything else (parked requests, heartbeat deadlines,
//! pending members) is volatile, as in Kafka. [`CoordinatorState::replay`] rebuilds the durable
//! part from the log when the partition is loaded.
//!
//! The protocol logic is split by area: [`super::classic`] (join, sync, heartbeat, leave,
//! timers), [`super::offsets`] (commit, fetch, delete, expiration), [`super::admin`] (list,
//! describe, delete groups).

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::consumer_group::{ConsumerGroup, ConsumerGroupConfig};
use super::group::{ClassicGroup, GroupState, Member};
use super::outbox::{write_error, Continuation, Outbox, Response, TimerKey};
use super::records::{GroupMetadataValue, GroupRecord, MemberMetadata, OffsetValue};
use super::requests::JoinResult;

/// Longest group id or group instance id accepted (bytes). Kafka sets no limit, but its record
/// keys store them as 16-bit-length strings; corral refuses longer ones up front.
pub const MAX_ID_BYTES: usize = 16 * 1024;

/// Longest string stored as a 16-bit-length string of a `__consumer_offsets` record (protocol
/// type and names, member and client ids, client host): a longer one is refused with
/// INVALID_REQUEST, never cut.
pub const MAX_RECORD_STRING_BYTES: usize = i16::MAX as usize;

/// Member ids are `<client id or instance id>-<uuid>`; the prefix is cut to this many bytes.
pub(crate) const MEMBER_ID_PREFIX_BYTES: usize = 1024;

/// Group-coordinator settings (Kafka's `group.*` and `offsets.*` broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub initial_rebalance_delay_ms: i64,
    pub max_size: usize,
    /// `groups.max_pending_members`.
    pub max_pending_members: usize,
    /// `groups.max_groups_per_partition`: groups of every type on this coordinator partition.
    pub max_groups: usize,
    pub offset_metadata_max_bytes: usize,
    pub offsets_retention_ms: i64,
    /// How long a new member may take to complete its first join (KAFKA-7610; Kafka: 5 min).
    pub new_member_join_timeout_ms: i64,
    /// The largest record batch of `__consumer_offsets` (Kafka applies the broker's
    /// `message.max.bytes` to it): an offset commit that does not fit is refused, and writes that
    /// may be split are split to it.
    pub max_batch_bytes: usize,
    /// The largest atomic write of group metadata (a classic group's assignment, a conversion
    /// between protocols). It follows from what one Raft entry carries, not from user topics'
    /// `max.message.bytes`: the metadata of a group of 10,000 members is over 1 MB, and the
    /// coordinator's log is corral's own.
    pub max_group_batch_bytes: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
            max_pending_members: 20_000,
            max_groups: 20_000,
            offset_metadata_max_bytes: 4096,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            new_member_join_timeout_ms: 300_000,
            max_batch_bytes: 1_048_588,
            max_group_batch_bytes: crate::raft::MAX_COMMAND_BYTES,
        }
    }
}

impl GroupConfig {
    /// The settings of `[groups]`; a group's batch of records is bounded as a message is, by
    /// `topics.defaults.max_message_bytes`.
    pub fn from_config(config: &crate::config::Config) -> GroupConfig {
        let g = &config.groups;
        GroupConfig {
            min_session_timeout_ms: g.min_session_timeout_ms,
            max_session_timeout_ms: g.max_session_timeout_ms,
            initial_rebalance_delay_ms: g.initial_rebalance_delay_ms as i64,
            max_size: g.max_size as usize,
            max_pending_members: g.max_pending_members as usize,
            max_groups: g.max_groups_per_partition as usize,
            offset_metadata_max_bytes: g.offset_metadata_max_bytes as usize,
            offsets_retention_ms: (g.offsets_retention_minutes as i64).saturating_mul(60_000),
            max_batch_bytes: config.topics.defaults.max_message_bytes as usize,
            ..GroupConfig::default()
        }
    }
}

/// Committed offsets of one group: (topic, partition) → value.
pub type GroupOffsets = HashMap<(String, i32), OffsetValue>;

/// The coordinator of one partition. Lives on the shard that owns the partition.
#[derive(Debug)]
pub struct CoordinatorState {
    pub config: GroupConfig,
    pub consumer: ConsumerGroupConfig,
    /// Classic groups (including simple, offsets-only groups). A group id is in at most one of
    /// `groups` and `consumer_groups`.
    pub groups: HashMap<String, ClassicGroup>,
    /// KIP-848 consumer groups.
    pub consumer_groups: HashMap<String, ConsumerGroup>,
    /// Committed offsets by group id, whatever the group's type (as Kafka keeps them apart from
    /// group metadata).
    pub offsets: HashMap<String, GroupOffsets>,
    pub out: Outbox,
}

impl CoordinatorState {
    pub fn new(config: GroupConfig) -> CoordinatorState {
        Self::with_consumer_config(config, ConsumerGroupConfig::default())
    }

    pub fn with_consumer_config(config: GroupConfig, consumer: ConsumerGroupConfig) -> CoordinatorState {
        CoordinatorState {
            config,
            consumer,
            groups: HashMap::new(),
            consumer_groups: HashMap::new(),
            offsets: HashMap::new(),
            out: Outbox::default(),
        }
    }

    /// Whether another group may be created here (`groups.max_groups_per_partition`; a refusal
    /// is counted in metrics). Replaying the log never asks: what was written stays.
    pub(crate) fn may_create_group(&self) -> bool {
        let room = self.groups.len() + self.consumer_groups.len() < self.config.max_groups;
        if !room {
            crate::metrics::limit_reached(crate::metrics::labels::LIMIT_GROUPS_PER_PARTITION);
        }
        room
    }

    /// Applies one record read back from the log (partition load).
    pub fn replay(&mut self, record: GroupRecord, now: i64) {
        match record {
            GroupRecord::Offset { group, topic, partition, value } => {
                // Offsets without group metadata belong to a simple group.
                if !self.consumer_groups.contains_key(&group) {
                    self.groups.entry(group.clone()).or_insert_with(|| ClassicGroup::new(group.clone(), now));
                }
                match value {
                    Some(v) => {
                        self.offsets.entry(group).or_default().insert((topic, partition), v);
                    }
                    None => {
                        if let Some(offsets) = self.offsets.get_mut(&group) {
                            offsets.remove(&(topic, partition));
                        }
                    }
                }
            }
            GroupRecord::Group { group, value: None } => {
                self.groups.remove(&group);
            }
            GroupRecord::Group { group, value: Some(v) } => {
                self.consumer_groups.remove(&group);
                let mut g = ClassicGroup::new(group, now);
                g.generation = v.generation;
                g.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type);
                g.protocol_name = v.protocol.filter(|p| !p.is_empty());
                g.leader = v.leader.filter(|l| !l.is_empty());
                g.state_timestamp = if v.state_timestamp >= 0 { v.state_timestamp } else { now };
                for m in v.members {
                    let protocol = g.protocol_name.clone().unwrap_or_default();
                    if let Some(instance) = &m.instance_id {
                        g.static_members.insert(instance.clone(), m.member_id.clone());
                    }
                    g.insert_member(Member {
                        id: m.member_id,
                        instance_id: m.instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        rebalance_timeout_ms: m.rebalance_timeout_ms,
                        session_timeout_ms: m.session_timeout_ms,
                        protocols: vec![(protocol, m.subscription)],
                        assignment: m.assignment,
                        awaiting_join: None,
                        awaiting_sync: None,
                        is_new: false,
                        session_deadline: None,
                    });
                }
                g.state = if g.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
                g.previous_state = g.state;
                g.update_subscribed_topics();
                self.groups.insert(g.id.clone(), g);
            }
            consumer => self.replay_consumer(consumer, now),
        }
    }

    /// After loading: start every member's session, as Kafka does for a freshly loaded group.
    pub fn start_sessions(&mut self, now: i64) {
        let mut timers = Vec::new();
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                let deadline = now + m.session_timeout_ms as i64;
                m.session_deadline = Some(deadline);
                timers.push((TimerKey::Session { group: g.id.clone(), member: m.id.clone() }, deadline));
            }
        }
        for (key, deadline) in timers {
            self.out.timer(key, deadline);
        }
        self.start_consumer_sessions(now);
    }

    /// Continues whatever waited for append `id`. `error` is the code to report if it failed.
    pub fn appended(&mut self, now: i64, id: u64, error: Option<ResponseError>) {
        let Some(then) = self.out.continuations.remove(&id) else {
            return;
        };
        let error = error.map(|e| write_error(e, &then));
        match then {
            Continuation::Nothing | Continuation::Atomic => {}
            Continuation::Joined { token, result } => {
                let result = match error {
                    None => result,
                    Some(e) => JoinResult::error(e, &result.member_id),
                };
                self.out.reply(token, Response::Join(result));
            }
            Continuation::SyncComplete { group, generation, assignments } => {
                self.complete_sync(now, &group, generation, assignments, error)
            }
            Continuation::StaticRejoin { group, token, result, old_member, new_member_id, old_leader } => {
                self.complete_static_rejoin(now, &group, token, result, *old_member, new_member_id, old_leader, error)
            }
            Continuation::Commit { group, token, offsets, codes } => self.complete_commit(now, &group, token, offsets, codes, error),
            Continuation::DeleteGroups { token, codes } => {
                let codes = match error {
                    None => codes,
                    Some(e) => codes.iter().map(|&c| if c == 0 { e.code() } else { c }).collect(),
                };
                self.out.reply(token, Response::DeleteGroups(codes));
            }
        }
    }

    /// Whether the records of append `id` may be written in several batches: only where nothing
    /// waits for them (their changes are in the state already, and each record stands alone),
    /// as Kafka's non-atomic coordinator writes. A commit or a group's assignment is all or nothing.
    pub fn may_split(&self, id: u64) -> bool {
        matches!(self.out.continuations.get(&id), Some(Continuation::Nothing) | None)
    }

    /// The largest batch append `id` may be written in when it must be atomic: an offset commit
    /// keeps Kafka's `max.message.bytes`; group metadata has the coordinator's own bound.
    pub fn atomic_bound(&self, id: u64) -> usize {
        match self.out.continuations.get(&id) {
            Some(Continuation::Commit { .. }) => self.config.max_batch_bytes,
            _ => self.config.max_group_batch_bytes,
        }
    }

    /// The group's metadata record, as written at SyncGroup completion.
    pub(crate) fn group_record(group: &ClassicGroup, assignments: Option<&HashMap<String, Bytes>>) -> GroupRecord {
        let protocol = group.protocol_name.clone();
        let members = group
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: protocol.as_deref().map(|p| m.metadata_for(p)).unwrap_or_default(),
                assignment: match assignments {
                    Some(a) => a.get(&m.id).cloned().unwrap_or_default(),
                    None => m.assignment.clone(),
                },
            })
            .collect();
        GroupRecord::Group {
            group: group.id.clone(),
            value: Some(GroupMetadataValue {
                protocol_type: group.protocol_type.clone().unwrap_or_default(),
                generation: group.generation,
                protocol,
                leader: group.leader.clone(),
                state_timestamp: group.state_timestamp,
                members,
            }),
        }
    }
}
