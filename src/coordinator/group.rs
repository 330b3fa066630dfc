//! A classic consumer group and its members: the data the state machine works on.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;

/// Kafka's classic group states; the names are what ListGroups and DescribeGroups report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// Handle of a request waiting for its response (a parked JoinGroup or SyncGroup, or a request
/// waiting for its records to be stored). The shell maps it to the connection waiting for it.
pub type Token = u64;

/// A parked JoinGroup: who to answer and at which version (the response shape depends on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedJoin {
    pub token: Token,
    pub version: i16,
}

/// One member of a classic group. Lives inside its group on the coordinator's shard.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// Supported protocols in the member's order of preference, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<ParkedJoin>,
    pub awaiting_sync: Option<Token>,
    /// From the member's first join until the join phase it joined completes.
    pub is_new: bool,
    /// When the member's session expires; `None` while a parked request holds it alive.
    pub session_deadline: Option<i64>,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    /// Same protocol names, order and metadata bytes.
    pub fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// How the current join phase ends: by the initial-delay timer (an Empty group's first
/// rebalance, KIP-134) or by everyone joining / the rebalance timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinPhase {
    Initial { delay_ms: i64, remaining_ms: i64 },
    Normal,
}

/// A classic group. Lives in its coordinator partition on the shard that owns that partition.
#[derive(Debug)]
pub struct ClassicGroup {
    pub id: String,
    pub state: GroupState,
    pub previous_state: GroupState,
    /// When the group last changed state (persisted; offset expiration counts from it).
    pub state_timestamp: i64,
    pub generation: i32,
    /// Set by the first member of an Empty group; `None` for simple (offsets-only) groups.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// In join order.
    pub members: IndexMap<String, Member>,
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pub pending_members: HashMap<String, i64>,
    pub pending_sync: HashSet<String>,
    pub new_member_added: bool,
    pub join_phase: JoinPhase,
    pub join_deadline: Option<i64>,
    pub sync_deadline: Option<i64>,
    /// Topics the members subscribe to (selected protocol, `consumer` type); `None` = unknown.
    pub subscribed_topics: Option<HashSet<String>>,
}

impl ClassicGroup {
    pub fn new(id: String, now: i64) -> ClassicGroup {
        ClassicGroup {
            id,
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            state_timestamp: now,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            new_member_added: false,
            join_phase: JoinPhase::Normal,
            join_deadline: None,
            sync_deadline: None,
            subscribed_topics: Some(HashSet::new()),
        }
    }

    pub fn transition(&mut self, to: GroupState, now: i64) {
        self.previous_state = self.state;
        self.state = to;
        self.state_timestamp = now;
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    /// The rebalance timeout of the group: the largest of its members' (0 without members).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members.values().map(|m| m.rebalance_timeout_ms as i64).max().unwrap_or(0)
    }

    /// Every member has a parked JoinGroup and no MEMBER_ID_REQUIRED member is outstanding.
    pub fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub fn joined_count(&self) -> usize {
        self.members.values().filter(|m| m.awaiting_join.is_some()).count()
    }

    /// Whether a joining member with these protocols fits the group (JoinGroup's compatibility
    /// rule): an Empty group needs a protocol type and at least one protocol; otherwise the type
    /// must match and one protocol must be supported by every current member.
    pub fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.is(GroupState::Empty) {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == name)))
    }

    /// Protocol selection: candidates are the names every member supports; each member votes
    /// for its most preferred candidate; most votes wins (ties by first appearance).
    pub fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|name| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == name)))
            .collect();
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member.protocols.iter().find(|(n, _)| candidates.contains(&n.as_str())) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        votes.into_iter().find(|&(_, v)| v == best).map(|(name, _)| name.to_string())
    }

    /// Recomputes the subscribed topics from the members' metadata for the selected protocol.
    pub fn update_subscribed_topics(&mut self) {
        self.subscribed_topics = match (&self.protocol_type, &self.protocol_name) {
            (Some(t), Some(protocol)) if t == "consumer" => {
                let mut topics = HashSet::new();
                let mut known = true;
                for member in self.members.values() {
                    match super::consumer_protocol::subscribed_topics(&member.metadata_for(protocol)) {
                        Some(list) => topics.extend(list),
                        None => known = false,
                    }
                }
                known.then_some(topics)
            }
            (Some(_), _) if !self.members.is_empty() => None,
            _ => Some(HashSet::new()),
        };
    }

    pub fn is_subscribed(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => true,
        }
    }

    /// Removes a pending (MEMBER_ID_REQUIRED) member; true if it was pending. The table is freed
    /// once empty: a settled group should cost only its members.
    pub fn take_pending(&mut self, member_id: &str) -> bool {
        let was_pending = self.pending_members.remove(member_id).is_some();
        if self.pending_members.is_empty() {
            self.pending_members.shrink_to_fit();
        }
        was_pending
    }

    /// Removes a member and everything that refers to it; picks a new leader if needed.
    pub fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.shift_remove(member_id)?;
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(member)
    }
}
