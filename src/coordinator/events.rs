//! What happened in a group, said by the state machine as it happens.
//!
//! Every rebalance, member change and offset change is an [`super::outbox::Effect::Event`] with
//! the time it happened. The state machine only says it; what is done with it — metrics, the log,
//! a rebalance history — belongs to whoever carries out the effects ([`super::shell`]), so the
//! state machine stays a pure function of its inputs and every consumer reads the same stream.

use super::group::GroupState;

/// Which protocol a group speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// JoinGroup / SyncGroup / Heartbeat.
    Classic,
    /// KIP-848 ConsumerGroupHeartbeat.
    Consumer,
}

impl GroupKind {
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Classic => "classic",
            GroupKind::Consumer => "consumer",
        }
    }
}

/// Why a rebalance began (classic: a new join phase; KIP-848: a new group epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceCause {
    /// The first member of an empty group arrived.
    GroupCreated { member: String },
    /// A member joined a group that had members.
    MemberJoined { member: String },
    /// Members left (LeaveGroup, or a KIP-848 heartbeat with epoch -1).
    MemberLeft { members: Vec<String> },
    /// Static members were removed by an admin tool: a LeaveGroup naming them by instance id
    /// alone, as Kafka's AdminClient removeMembersFromConsumerGroup sends it (a member leaving
    /// itself names its member id).
    AdminRemoved { members: Vec<String> },
    /// A member stopped heartbeating for its session timeout.
    SessionTimeout { member: String },
    /// Members did not finish the rebalance in time and were removed: a classic group's members
    /// that never sent SyncGroup, or a KIP-848 member that did not revoke partitions.
    RebalanceTimeout { members: Vec<String> },
    /// A static member came back under a new member id and took the old one's place.
    StaticMemberReplaced { instance: String, member: String },
    /// A member's protocols (classic) or subscription (KIP-848) changed.
    MetadataChanged { member: String },
    /// A classic group's leader rejoined a Stable group (to compute a new assignment).
    LeaderRejoined { member: String },
    /// The topics a KIP-848 group subscribes to changed (created, deleted, more partitions, a
    /// regular expression matching anew).
    TopicsChanged,
    /// The leader's assignment could not be stored.
    AssignmentNotStored,
}

impl RebalanceCause {
    /// The label metrics use.
    pub fn trigger(&self) -> &'static str {
        match self {
            RebalanceCause::GroupCreated { .. } => "group_created",
            RebalanceCause::MemberJoined { .. } => "member_joined",
            RebalanceCause::MemberLeft { .. } => "member_left",
            RebalanceCause::AdminRemoved { .. } => "admin_action",
            RebalanceCause::SessionTimeout { .. } => "session_timeout",
            RebalanceCause::RebalanceTimeout { .. } => "rebalance_timeout",
            RebalanceCause::StaticMemberReplaced { .. } => "static_member_replaced",
            RebalanceCause::MetadataChanged { .. } => "metadata_changed",
            RebalanceCause::LeaderRejoined { .. } => "leader_rejoined",
            RebalanceCause::TopicsChanged => "topics_changed",
            RebalanceCause::AssignmentNotStored => "assignment_not_stored",
        }
    }

    /// How many members the group had before the change that started the rebalance, given how
    /// many it has now (the joiner is already in, the leavers already out).
    pub fn members_before(&self, now: usize) -> usize {
        match self {
            RebalanceCause::GroupCreated { .. } | RebalanceCause::MemberJoined { .. } => now.saturating_sub(1),
            RebalanceCause::MemberLeft { members }
            | RebalanceCause::AdminRemoved { members }
            | RebalanceCause::RebalanceTimeout { members } => now + members.len(),
            RebalanceCause::SessionTimeout { .. } => now + 1,
            _ => now,
        }
    }

    /// The members the cause names, for the log.
    pub fn members(&self) -> Vec<&str> {
        match self {
            RebalanceCause::GroupCreated { member }
            | RebalanceCause::MemberJoined { member }
            | RebalanceCause::SessionTimeout { member }
            | RebalanceCause::StaticMemberReplaced { member, .. }
            | RebalanceCause::MetadataChanged { member }
            | RebalanceCause::LeaderRejoined { member } => vec![member.as_str()],
            RebalanceCause::MemberLeft { members }
            | RebalanceCause::AdminRemoved { members }
            | RebalanceCause::RebalanceTimeout { members } => members.iter().map(String::as_str).collect(),
            RebalanceCause::TopicsChanged | RebalanceCause::AssignmentNotStored => Vec::new(),
        }
    }
}

/// Why a member is no longer in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    Left,
    SessionTimeout,
    RebalanceTimeout,
    /// Did not rejoin during a classic join phase.
    NotRejoined,
    /// A static member's new id replaced it.
    Replaced,
}

/// A step of a rebalance that each member takes; the last to take it held the rebalance up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberStep {
    /// Classic: its JoinGroup for the join phase arrived.
    Joined,
    /// Classic: its SyncGroup for the new generation arrived.
    Synced,
    /// KIP-848: it reached the target assignment's epoch.
    Reconciled,
}

impl MemberStep {
    pub fn name(self) -> &'static str {
        match self {
            MemberStep::Joined => "joined",
            MemberStep::Synced => "synced",
            MemberStep::Reconciled => "reconciled",
        }
    }
}

/// One thing that happened in a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// A rebalance began: `generation` is the classic generation it starts from, or the new
    /// KIP-848 group epoch; `members` is how many the group had before the change.
    RebalanceStarted {
        group: String,
        kind: GroupKind,
        cause: RebalanceCause,
        generation: i32,
        members: usize,
    },
    /// A classic group's join phase ended: the new generation and its members.
    JoinCompleted {
        group: String,
        generation: i32,
        members: usize,
    },
    /// The rebalance is over: every member holds its assignment of `generation` (classic: the
    /// leader's assignment was delivered; KIP-848: every member reached the target epoch, or
    /// none is left).
    Stabilized {
        group: String,
        kind: GroupKind,
        generation: i32,
        members: usize,
    },
    MemberJoined {
        group: String,
        kind: GroupKind,
        member: String,
    },
    /// A member took a step of the rebalance in progress (or of the next one).
    MemberReady {
        group: String,
        member: String,
        step: MemberStep,
    },
    MemberRemoved {
        group: String,
        kind: GroupKind,
        member: String,
        departure: Departure,
    },
    /// A classic group's state changed.
    StateChanged {
        group: String,
        from: GroupState,
        to: GroupState,
    },
    /// Offsets of `partitions` partitions were committed (stored).
    OffsetsCommitted {
        group: String,
        partitions: usize,
    },
    /// Offsets of `partitions` partitions expired (offsets.retention.minutes).
    OffsetsExpired {
        group: String,
        partitions: usize,
    },
}

impl GroupEvent {
    pub fn group(&self) -> &str {
        match self {
            GroupEvent::RebalanceStarted { group, .. }
            | GroupEvent::JoinCompleted { group, .. }
            | GroupEvent::Stabilized { group, .. }
            | GroupEvent::MemberJoined { group, .. }
            | GroupEvent::MemberReady { group, .. }
            | GroupEvent::MemberRemoved { group, .. }
            | GroupEvent::StateChanged { group, .. }
            | GroupEvent::OffsetsCommitted { group, .. }
            | GroupEvent::OffsetsExpired { group, .. } => group,
        }
    }
}
