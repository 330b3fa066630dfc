//! A KIP-848 consumer group as the coordinator keeps it: its members with their reconciliation
//! state, the target assignment and who owns each partition, the heartbeat and its answer as the
//! state machine sees them, and the settings (`group.consumer.*`). The protocol itself is
//! [`super::consumer`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use dashmap::DashMap;

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::config::{GroupsConfig, MigrationPolicy};

use super::assignor::Assignor;
use super::events::{Departure, GroupEvent, GroupKind};
use super::outbox::{Outbox, TimerKey};
use super::records::{AssignmentEpochs, ClassicMemberMetadata, ConsumerMemberValue, CurrentAssignmentValue, GroupRecord, TopicPartitions};

/// One partition of one topic.
type Tp = (Uuid, i32);

/// A member id made by the coordinator (ConsumerGroupHeartbeat v0, a classic member joining a
/// consumer group), in the form of Kafka's `Uuid.randomUuid().toString()`: 16 random bytes in
/// URL-safe base64 without padding, never starting with '-'.
pub(super) fn new_member_id() -> String {
    use base64::Engine;
    loop {
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Uuid::new_v4().as_bytes());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// Epoch a member sends to leave.
pub const LEAVE_EPOCH: i32 = -1;
/// Epoch a static member sends to leave temporarily (it keeps its partitions).
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Topic metadata the coordinator needs: names ↔ ids and partition counts.
pub trait TopicView {
    fn by_name(&self, name: &str) -> Option<Tp>;
    fn by_id(&self, id: Uuid) -> Option<(String, i32)>;
    /// Every topic name (regex subscriptions are matched against them).
    fn names(&self) -> Vec<String>;
    /// Moves whenever a topic is created, grown or deleted: heartbeats recheck the group's
    /// subscribed topics only when it moved (or the subscriptions did).
    fn version(&self) -> u64;
}

/// Reconciliation state of a member (persisted values as Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable = 0,
    /// Waiting for the member to give up partitions it must revoke.
    UnrevokedPartitions = 1,
    /// Waiting for other members to release partitions of its target.
    UnreleasedPartitions = 2,
}

impl MemberState {
    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }

    pub(super) fn from_code(code: i8) -> MemberState {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

/// A KIP-848 member. Lives in its group on the coordinator's shard.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    /// Partitions the member may own now.
    pub assigned: TopicPartitions,
    /// Partitions it must give up before its epoch can advance.
    pub pending_revocation: TopicPartitions,
    /// The member epoch at which it was given each partition it holds, assigned or pending
    /// revocation (KIP-1251): a commit from an older epoch is fenced for that partition.
    pub assignment_epochs: AssignmentEpochs,
    pub session_deadline: Option<i64>,
    pub rebalance_deadline: Option<i64>,
    /// Set while the member speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    pub classic: Option<ClassicMemberMetadata>,
    /// A classic member told to re-join must do so before this (its rebalance timeout).
    pub join_deadline: Option<i64>,
    /// A classic member that joined must send SyncGroup before this (its rebalance timeout).
    pub sync_deadline: Option<i64>,
}

impl ConsumerMember {
    pub(super) fn new(id: String) -> ConsumerMember {
        ConsumerMember {
            id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_names: Vec::new(),
            subscribed_regex: None,
            rebalance_timeout_ms: -1,
            server_assignor: None,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: TopicPartitions::new(),
            pending_revocation: TopicPartitions::new(),
            assignment_epochs: AssignmentEpochs::new(),
            session_deadline: None,
            rebalance_deadline: None,
            classic: None,
            join_deadline: None,
            sync_deadline: None,
        }
    }

    /// Its session: the classic session timeout it joined with, or the group's.
    pub(super) fn session_timeout_ms(&self, cfg: &ConsumerGroupConfig) -> i64 {
        self.classic.as_ref().map_or(cfg.session_timeout_ms, |c| c.session_timeout_ms) as i64
    }

    /// Restarts its session. Returns the timer to arm, unless one is pending at or before the new
    /// deadline (a pending one re-arms itself when it finds the deadline moved).
    pub(super) fn touch_session(&mut self, group: &str, cfg: &ConsumerGroupConfig, now: i64) -> Option<(TimerKey, i64)> {
        let deadline = now + self.session_timeout_ms(cfg);
        let needs_timer = self.session_deadline.is_none_or(|d| deadline < d);
        self.session_deadline = Some(deadline);
        needs_timer.then(|| (TimerKey::ConsumerSession { group: group.to_string(), member: self.id.clone() }, deadline))
    }

    pub(super) fn metadata(&self) -> ConsumerMemberValue {
        ConsumerMemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_names: self.subscribed_names.clone(),
            subscribed_regex: self.subscribed_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            server_assignor: self.server_assignor.clone(),
            classic: self.classic.clone(),
        }
    }

    pub(super) fn current(&self) -> CurrentAssignmentValue {
        CurrentAssignmentValue {
            epoch: self.epoch,
            previous_epoch: self.previous_epoch,
            state: self.state as i8,
            assigned: self.assigned.clone(),
            pending_revocation: self.pending_revocation.clone(),
            epochs: self.assignment_epochs.clone(),
        }
    }

    /// Keeps `assignment_epochs` to the partitions it holds now: a partition it held before
    /// keeps its epoch, one it was just given gets `epoch`.
    pub(super) fn settle_assignment_epochs(&mut self, epoch: i32) {
        let held = flatten(&self.assigned).chain(flatten(&self.pending_revocation));
        self.assignment_epochs = held.map(|tp| (tp, self.assignment_epochs.get(&tp).copied().unwrap_or(epoch))).collect();
    }

    /// The epoch at which it was given `tp`, if it holds it (assigned or pending revocation).
    pub(super) fn assignment_epoch(&self, tp: Tp) -> Option<i32> {
        self.assignment_epochs.get(&tp).copied()
    }
}

/// A KIP-848 consumer group. Lives in its coordinator partition on the owning shard.
#[derive(Debug)]
pub struct ConsumerGroup {
    pub id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: IndexMap<String, ConsumerMember>,
    pub static_members: HashMap<String, String>,
    /// The target assignment of `assignment_epoch`.
    pub target: HashMap<String, TopicPartitions>,
    /// Current owner of each held partition.
    pub owners: HashMap<Tp, String>,
    /// Partition count of each subscribed topic when the epoch last moved.
    pub subscription_metadata: BTreeMap<String, Tp>,
    /// Topics matched by each member's regex when last resolved.
    pub resolved_regex: HashMap<String, BTreeSet<String>>,
    /// The topic catalog's version when regexes and `subscription_metadata` were last brought up
    /// to date; `None` after membership or subscriptions changed.
    pub topics_checked: Option<u64>,
    pub state_timestamp: i64,
    /// The group epoch at which every member last held its target (an event said so); a rebalance
    /// is in progress while it differs from `group_epoch`.
    pub(super) converged_epoch: i32,
    /// When the next target assignment may be computed (`assignment_interval_ms` after the last).
    pub(super) next_assignment_at: i64,
    /// A timer is armed to compute the target once that time comes.
    pub(super) assignment_timer: bool,
}

impl ConsumerGroup {
    pub(super) fn new(id: String, now: i64) -> ConsumerGroup {
        // Kafka 4.4 starts both epochs of a new group at 1: its first member's join moves the
        // group to 2, and a member of a group whose inputs never moved holds epoch 1.
        ConsumerGroup {
            id,
            group_epoch: 1,
            assignment_epoch: 1,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            target: HashMap::new(),
            owners: HashMap::new(),
            subscription_metadata: BTreeMap::new(),
            resolved_regex: HashMap::new(),
            topics_checked: None,
            state_timestamp: now,
            converged_epoch: 1,
            next_assignment_at: i64::MIN,
            assignment_timer: false,
        }
    }

    /// Says so once the rebalance in progress is over: every member at the target epoch, or no
    /// member left.
    pub(super) fn note_convergence(&mut self, out: &mut Outbox, now: i64) {
        if self.converged_epoch == self.group_epoch || !matches!(self.state_name(), "Stable" | "Empty") {
            return;
        }
        self.converged_epoch = self.group_epoch;
        let (generation, members) = (self.group_epoch, self.members.len());
        out.event(now, GroupEvent::Stabilized { group: self.id.clone(), kind: GroupKind::Consumer, generation, members });
    }

    /// Empty / Assigning / Reconciling / Stable, as ListGroups and ConsumerGroupDescribe name them.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.epoch != self.assignment_epoch || m.state != MemberState::Stable) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Every topic some member subscribes to, by name.
    pub(super) fn subscribed_topics(&self) -> BTreeSet<String> {
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(m.subscribed_names.iter().cloned());
            if let Some(resolved) = self.resolved_regex.get(&m.id) {
                topics.extend(resolved.iter().cloned());
            }
        }
        topics
    }

    /// The ids of the topics a member subscribes to, as the subscription metadata resolved them.
    pub(super) fn member_topics(&self, member: &ConsumerMember) -> BTreeSet<Uuid> {
        let names = member.subscribed_names.iter().chain(self.resolved_regex.get(&member.id).into_iter().flatten());
        names.filter_map(|n| self.subscription_metadata.get(n).map(|(id, _)| *id)).collect()
    }

    /// Updates the owner table after a member's holdings changed.
    /// A static member's new incarnation takes the old one's place and partitions.
    pub(super) fn replace_static_member(
        &mut self,
        instance: &str,
        old_id: &str,
        new_id: &str,
        records: &mut Vec<GroupRecord>,
        out: &mut Outbox,
        now: i64,
    ) {
        let mut old = self.members.shift_remove(old_id).expect("mapped member exists");
        records.extend(member_tombstones(&self.id, old_id));
        let (kind, departure) = (GroupKind::Consumer, Departure::Replaced);
        out.event(now, GroupEvent::MemberRemoved { group: self.id.clone(), kind, member: old_id.to_string(), departure });
        let target = self.target.remove(old_id).unwrap_or_default();
        self.target.insert(new_id.to_string(), target);
        old.id = new_id.to_string();
        old.epoch = 0;
        old.previous_epoch = 0;
        // Timers are keyed by member id: the new id needs its own.
        old.session_deadline = None;
        old.rebalance_deadline = None;
        old.join_deadline = None;
        old.sync_deadline = None;
        self.members.insert(new_id.to_string(), old);
        for holder in self.owners.values_mut() {
            if holder == old_id {
                *holder = new_id.to_string();
            }
        }
        self.static_members.insert(instance.to_string(), new_id.to_string());
    }

    pub(super) fn set_holdings(&mut self, member_id: &str, before: &HashSet<Tp>) {
        let member = &self.members[member_id];
        let after: HashSet<Tp> = holdings(member);
        for tp in before.difference(&after) {
            if self.owners.get(tp).map(String::as_str) == Some(member_id) {
                self.owners.remove(tp);
            }
        }
        for tp in after {
            self.owners.insert(tp, member_id.to_string());
        }
    }

    pub(super) fn release_all(&mut self, member_id: &str) {
        self.owners.retain(|_, owner| owner != member_id);
    }
}

pub(super) fn holdings(member: &ConsumerMember) -> HashSet<Tp> {
    flatten(&member.assigned).chain(flatten(&member.pending_revocation)).collect()
}

pub(super) fn flatten(tp: &TopicPartitions) -> impl Iterator<Item = Tp> + '_ {
    tp.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
}

/// ConsumerGroupHeartbeat as the state machine sees it.
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_names: Option<Vec<String>>,
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// Partitions the member reports owning; `None` = unchanged.
    pub owned: Option<TopicPartitions>,
    pub client_id: String,
    pub client_host: String,
    pub version: i16,
}

impl ConsumerHeartbeat {
    /// Everything a joining member must send (spec §6.1).
    pub(super) fn is_full(&self) -> bool {
        self.rebalance_timeout_ms != -1 && (self.subscribed_names.is_some() || self.subscribed_regex.is_some()) && self.owned.is_some()
    }
}

/// The heartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub epoch: i32,
    pub interval_ms: i32,
    /// The full set of partitions the member may own now; `None` = unchanged.
    pub assignment: Option<TopicPartitions>,
}

impl HeartbeatAnswer {
    pub(super) fn error(code: ResponseError, message: impl Into<String>) -> HeartbeatAnswer {
        HeartbeatAnswer { error: code.code(), message: Some(message.into()), member_id: None, epoch: 0, interval_ms: 0, assignment: None }
    }
}

/// A group's own KIP-848 settings (Kafka's dynamic group configs `consumer.session.timeout.ms`,
/// `consumer.heartbeat.interval.ms` and `consumer.assignment.interval.ms`, set with
/// IncrementalAlterConfigs on the group's GROUP resource); `None` leaves the `[groups]` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_timeout_ms: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_ms: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_interval_ms: Option<i32>,
}

impl GroupOverrides {
    pub fn is_empty(&self) -> bool {
        *self == GroupOverrides::default()
    }
}

/// Every group's overrides, kept by the node's catalog (which the metadata group writes) and
/// read by its coordinators at each use, so a change applies from a member's next heartbeat.
#[derive(Debug, Clone, Default)]
pub struct SharedGroupOverrides(Arc<DashMap<String, GroupOverrides>>);

impl SharedGroupOverrides {
    pub fn get(&self, group: &str) -> GroupOverrides {
        self.0.get(group).map(|o| *o).unwrap_or_default()
    }

    /// Sets a group's overrides; empty ones are removed.
    pub fn set(&self, group: &str, overrides: GroupOverrides) {
        match overrides.is_empty() {
            true => drop(self.0.remove(group)),
            false => drop(self.0.insert(group.to_string(), overrides)),
        }
    }

    /// Makes the overrides exactly `all` (a metadata snapshot installed).
    pub fn replace(&self, all: std::collections::BTreeMap<String, GroupOverrides>) {
        self.0.retain(|group, _| all.contains_key(group));
        for (group, overrides) in all {
            self.set(&group, overrides);
        }
    }

    /// Every group with overrides.
    pub fn all(&self) -> std::collections::BTreeMap<String, GroupOverrides> {
        self.0.iter().map(|e| (e.key().clone(), *e.value())).collect()
    }
}

impl PartialEq for SharedGroupOverrides {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedGroupOverrides {}

/// KIP-848 settings (Kafka's `group.consumer.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
    /// In preference order; the first is the default.
    pub assignors: Vec<Assignor>,
    /// `group.consumer.migration.policy`.
    pub migration_policy: MigrationPolicy,
    /// `group.consumer.assignment.interval.ms`: a group's target assignment is computed at most
    /// this often, so members arriving together are assigned together.
    pub assignment_interval_ms: i64,
    /// Groups' own settings over these.
    pub overrides: SharedGroupOverrides,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![Assignor::Uniform, Assignor::Range],
            migration_policy: MigrationPolicy::Bidirectional,
            assignment_interval_ms: 1_000,
            overrides: SharedGroupOverrides::default(),
        }
    }
}

impl ConsumerGroupConfig {
    /// The `consumer_*` settings of `[groups]` (their names checked when the config was read).
    pub fn from_config(g: &GroupsConfig) -> ConsumerGroupConfig {
        ConsumerGroupConfig {
            session_timeout_ms: g.consumer_session_timeout_ms,
            heartbeat_interval_ms: g.consumer_heartbeat_interval_ms,
            max_size: g.consumer_max_size as usize,
            assignors: g.consumer_assignors.iter().filter_map(|a| Assignor::from_name(a)).collect(),
            migration_policy: MigrationPolicy::from_name(&g.consumer_migration_policy).unwrap_or(MigrationPolicy::Bidirectional),
            assignment_interval_ms: g.consumer_assignment_interval_ms as i64,
            overrides: SharedGroupOverrides::default(),
        }
    }

    /// The heartbeat interval `group`'s members are given (without copying the rest).
    pub fn heartbeat_interval_ms_of(&self, group: &str) -> i32 {
        self.overrides.get(group).heartbeat_interval_ms.unwrap_or(self.heartbeat_interval_ms)
    }

    /// These settings with `group`'s own overrides.
    pub fn for_group(&self, group: &str) -> ConsumerGroupConfig {
        let o = self.overrides.get(group);
        ConsumerGroupConfig {
            session_timeout_ms: o.session_timeout_ms.unwrap_or(self.session_timeout_ms),
            heartbeat_interval_ms: o.heartbeat_interval_ms.unwrap_or(self.heartbeat_interval_ms),
            assignment_interval_ms: o.assignment_interval_ms.map_or(self.assignment_interval_ms, i64::from),
            ..self.clone()
        }
    }
}

pub(super) fn member_tombstones(group: &str, member: &str) -> Vec<GroupRecord> {
    vec![
        GroupRecord::CurrentAssignment { group: group.to_string(), member: member.to_string(), value: None },
        GroupRecord::TargetAssignment { group: group.to_string(), member: member.to_string(), partitions: None },
        GroupRecord::ConsumerMember { group: group.to_string(), member: member.to_string(), value: None },
    ]
}
