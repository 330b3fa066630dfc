//! What an operator sees of the groups of one coordinator partition: an overview of each group
//! and the details of one (members, assignments, committed offsets with lag, the rebalance
//! history), as the admin API serves them. Pure functions of the state; where partitions end and
//! what topics are called comes from the caller ([`PartitionFacts`]).

use serde::Serialize;
use uuid::Uuid;

use super::consumer_group::ConsumerGroup;
use super::consumer_protocol::assigned_partitions;
use super::group::{ClassicGroup, GroupState};
use super::rebalances::{RebalanceHistory, RebalanceSummary};
use super::records::TopicPartitions;
use super::state::CoordinatorState;

/// What the coordinator does not know itself: topic names and log end offsets.
pub trait PartitionFacts {
    /// The log end offset of a partition this node can see, `None` otherwise.
    fn end_offset(&self, topic: &str, partition: i32) -> Option<i64>;
    fn topic_name(&self, id: Uuid) -> Option<String>;
}

/// Where a coordinator partition is served.
#[derive(Debug, Clone, Copy)]
pub struct Coordinator {
    pub partition: i32,
    pub node: i32,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupOverview {
    pub group: String,
    /// `classic` or `consumer` (KIP-848).
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub protocol_type: String,
    pub state: &'static str,
    /// The generation (classic) or group epoch (KIP-848).
    pub generation: i32,
    pub members: usize,
    pub coordinator_partition: i32,
    pub coordinator_node: i32,
    /// Sum of the lag of every committed partition whose end offset is known here.
    pub lag_sum: Option<i64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupDetail {
    #[serde(flatten)]
    pub overview: GroupOverview,
    /// The chosen protocol (classic: the assignor the members agreed on).
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// KIP-848: the epoch of the target assignment.
    pub assignment_epoch: Option<i32>,
    pub members: Vec<MemberView>,
    pub offsets: Vec<OffsetView>,
    /// Oldest first.
    pub rebalances: Vec<RebalanceView>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The protocol the member speaks: `classic` (JoinGroup/SyncGroup), or `consumer` (KIP-848);
    /// a consumer group holds classic members while it migrates.
    pub protocol: &'static str,
    /// KIP-848: the member's epoch and reconciliation state.
    pub member_epoch: Option<i32>,
    pub member_state: Option<&'static str>,
    pub assignment: Vec<TopicAssignment>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TopicAssignment {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OffsetView {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// The member that owns the partition now, if any.
    pub owner: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RebalanceView {
    pub trigger: &'static str,
    /// The members the trigger names (who joined, left, timed out, ...).
    pub trigger_members: Vec<String>,
    pub restarts: u32,
    pub generation_before: i32,
    pub generation_after: i32,
    pub members_before: usize,
    pub members_after: usize,
    pub join_ms: Option<i64>,
    pub sync_ms: Option<i64>,
    pub total_ms: i64,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub slowest: Vec<SlowMemberView>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SlowMemberView {
    pub member: String,
    pub step: &'static str,
    pub after_ms: i64,
}

impl From<&RebalanceSummary> for RebalanceView {
    fn from(r: &RebalanceSummary) -> Self {
        RebalanceView {
            trigger: r.cause.trigger(),
            trigger_members: r.cause.members().into_iter().map(str::to_string).collect(),
            restarts: r.restarts,
            generation_before: r.generation_before,
            generation_after: r.generation_after,
            members_before: r.members_before,
            members_after: r.members_after,
            join_ms: r.join_ms,
            sync_ms: r.sync_ms,
            total_ms: r.total_ms,
            started_at_ms: r.started_at,
            ended_at_ms: r.ended_at,
            slowest: r
                .slowest
                .iter()
                .map(|m| SlowMemberView { member: m.member.clone(), step: m.step.name(), after_ms: m.after_ms })
                .collect(),
        }
    }
}

/// Committed offsets of a group with their end offsets and lag, sorted by topic and partition.
pub fn committed(state: &CoordinatorState, group: &str, facts: &impl PartitionFacts) -> Vec<OffsetView> {
    let Some(stored) = state.offsets.get(group) else {
        return Vec::new();
    };
    let mut out: Vec<OffsetView> = stored
        .iter()
        .map(|((topic, partition), value)| {
            let end = facts.end_offset(topic, *partition);
            OffsetView {
                topic: topic.clone(),
                partition: *partition,
                committed_offset: value.offset,
                log_end_offset: end,
                // A commit beyond the end (a truncated log) is no lag, as kafka_exporter counts it.
                lag: end.map(|e| (e - value.offset).max(0)),
                metadata: value.metadata.clone(),
                commit_timestamp: value.commit_timestamp,
                owner: None,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    out
}

fn lag_sum(offsets: &[OffsetView]) -> Option<i64> {
    offsets.iter().filter_map(|o| o.lag).reduce(|a, b| a.saturating_add(b))
}

fn classic_overview(g: &ClassicGroup, lag_sum: Option<i64>, at: Coordinator) -> GroupOverview {
    GroupOverview {
        group: g.id.clone(),
        kind: "classic",
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        state: g.state.name(),
        generation: g.generation,
        members: g.members.len(),
        coordinator_partition: at.partition,
        coordinator_node: at.node,
        lag_sum,
    }
}

fn consumer_overview(g: &ConsumerGroup, lag_sum: Option<i64>, at: Coordinator) -> GroupOverview {
    GroupOverview {
        group: g.id.clone(),
        kind: "consumer",
        protocol_type: "consumer".into(),
        state: g.state_name(),
        generation: g.group_epoch,
        members: g.members.len(),
        coordinator_partition: at.partition,
        coordinator_node: at.node,
        lag_sum,
    }
}

/// Every group of the partition (Dead ones aside), sorted by id.
pub fn overviews(state: &CoordinatorState, facts: &impl PartitionFacts, at: Coordinator) -> Vec<GroupOverview> {
    let lag = |group: &str| lag_sum(&committed(state, group, facts));
    let mut out: Vec<GroupOverview> = state
        .groups
        .values()
        .filter(|g| !g.is(GroupState::Dead))
        .map(|g| classic_overview(g, lag(&g.id), at))
        .chain(state.consumer_groups.values().map(|g| consumer_overview(g, lag(&g.id), at)))
        .collect();
    out.sort_by(|a, b| a.group.cmp(&b.group));
    out
}

/// One group in full; `None` when the partition does not know it.
pub fn detail(
    state: &CoordinatorState,
    history: &RebalanceHistory,
    group: &str,
    facts: &impl PartitionFacts,
    at: Coordinator,
) -> Option<GroupDetail> {
    let mut offsets = committed(state, group, facts);
    let lag = lag_sum(&offsets);
    let rebalances = history.of(group).iter().map(RebalanceView::from).collect();
    let (overview, protocol, leader, assignment_epoch, members) = if let Some(g) = state.consumer_groups.get(group) {
        let name = |id: &Uuid| facts.topic_name(*id).unwrap_or_else(|| id.to_string());
        let members = g
            .members
            .values()
            .map(|m| MemberView {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                protocol: if m.classic.is_some() { "classic" } else { "consumer" },
                member_epoch: Some(m.epoch),
                member_state: Some(m.state.name()),
                assignment: by_name(&m.assigned, &name),
            })
            .collect();
        (consumer_overview(g, lag, at), g.members.values().find_map(|m| m.server_assignor.clone()), None, Some(g.assignment_epoch), members)
    } else {
        let g = state.groups.get(group).filter(|g| !g.is(GroupState::Dead))?;
        let consumer = g.protocol_type.as_deref() == Some("consumer");
        let members = g
            .members
            .values()
            .map(|m| MemberView {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                protocol: "classic",
                member_epoch: None,
                member_state: None,
                assignment: if consumer { classic_assignment(&m.assignment) } else { Vec::new() },
            })
            .collect();
        (classic_overview(g, lag, at), g.protocol_name.clone(), g.leader.clone(), None, members)
    };
    let members: Vec<MemberView> = members;
    for o in &mut offsets {
        o.owner = members
            .iter()
            .find(|m| m.assignment.iter().any(|a| a.topic == o.topic && a.partitions.contains(&o.partition)))
            .map(|m| m.member_id.clone());
    }
    Some(GroupDetail { overview, protocol, leader, assignment_epoch, members, offsets, rebalances })
}

fn by_name(partitions: &TopicPartitions, name: &impl Fn(&Uuid) -> String) -> Vec<TopicAssignment> {
    let mut out: Vec<TopicAssignment> =
        partitions.iter().map(|(id, ps)| TopicAssignment { topic: name(id), partitions: ps.iter().copied().collect() }).collect();
    out.sort_by(|a, b| a.topic.cmp(&b.topic));
    out
}

fn classic_assignment(bytes: &[u8]) -> Vec<TopicAssignment> {
    let mut out: Vec<TopicAssignment> = assigned_partitions(bytes)
        .unwrap_or_default()
        .into_iter()
        .map(|(topic, mut partitions)| {
            partitions.sort_unstable();
            TopicAssignment { topic, partitions }
        })
        .collect();
    out.sort_by(|a, b| a.topic.cmp(&b.topic));
    out
}
