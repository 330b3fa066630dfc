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
    /// In join order. Add members with [`ClassicGroup::insert_member`] and change their
    /// protocols with [`ClassicGroup::set_protocols`], which keep `protocol_support`.
    pub members: IndexMap<String, Member>,
    /// How many members support each protocol name, so that a JoinGroup's compatibility check
    /// does not go through every member (a 10,000-member group rejoining would take a second).
    protocol_support: HashMap<String, usize>,
    /// Where [`ClassicGroup::all_members_joined`] last found a member without a JoinGroup (a
    /// hint only: every member is looked at).
    not_joined_hint: std::cell::Cell<usize>,
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
            protocol_support: HashMap::new(),
            not_joined_hint: std::cell::Cell::new(0),
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
    /// Asked after each JoinGroup: the members are looked at from the one last found without a
    /// JoinGroup, so a group rejoining in (about) join order is not gone through at each one.
    pub fn all_members_joined(&self) -> bool {
        if !self.pending_members.is_empty() {
            return false;
        }
        let n = self.members.len();
        let start = self.not_joined_hint.get().min(n);
        let missing = (start..n).chain(0..start).find(|&i| self.members[i].awaiting_join.is_none());
        self.not_joined_hint.set(missing.unwrap_or(0));
        missing.is_none()
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
        let everyone = self.members.len();
        let supported =
            protocols.iter().any(|(name, _)| everyone == 0 || self.protocol_support.get(name).copied().unwrap_or(0) == everyone);
        debug_assert_eq!(
            supported,
            protocols.iter().any(|(name, _)| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == name))),
            "protocol_support is out of step with the members"
        );
        self.protocol_type.as_deref() == Some(protocol_type) && supported
    }

    /// Adds (or replaces) a member.
    pub fn insert_member(&mut self, member: Member) {
        count_support(&mut self.protocol_support, &member.protocols, true);
        if let Some(old) = self.members.insert(member.id.clone(), member) {
            count_support(&mut self.protocol_support, &old.protocols, false);
        }
    }

    /// Sets the protocols a member supports (from its JoinGroup).
    pub fn set_protocols(&mut self, member_id: &str, protocols: Vec<(String, Bytes)>) {
        let Some(member) = self.members.get_mut(member_id) else { return };
        count_support(&mut self.protocol_support, &protocols, true);
        let old = std::mem::replace(&mut member.protocols, protocols);
        count_support(&mut self.protocol_support, &old, false);
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
        count_support(&mut self.protocol_support, &member.protocols, false);
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

/// Counts (or uncounts) a member's protocol names, each name once.
fn count_support(support: &mut HashMap<String, usize>, protocols: &[(String, Bytes)], add: bool) {
    for (i, (name, _)) in protocols.iter().enumerate() {
        if protocols[..i].iter().any(|(n, _)| n == name) {
            continue;
        }
        if add {
            *support.entry(name.clone()).or_default() += 1;
        } else if let Some(count) = support.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                support.remove(name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, protocols: &[&str]) -> Member {
        Member {
            id: id.to_string(),
            instance_id: None,
            client_id: "client".to_string(),
            client_host: "/127.0.0.1".to_string(),
            rebalance_timeout_ms: 60_000,
            session_timeout_ms: 30_000,
            protocols: protocols.iter().map(|p| (p.to_string(), Bytes::new())).collect(),
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            is_new: false,
            session_deadline: None,
        }
    }

    fn offer(protocols: &[&str]) -> Vec<(String, Bytes)> {
        protocols.iter().map(|p| (p.to_string(), Bytes::new())).collect()
    }

    fn stable_group() -> ClassicGroup {
        let mut group = ClassicGroup::new("g".to_string(), 0);
        group.protocol_type = Some("consumer".to_string());
        group.transition(GroupState::Stable, 0);
        group
    }

    #[test]
    fn a_protocol_fits_only_while_every_member_supports_it() {
        let mut group = stable_group();
        group.insert_member(member("a", &["range", "roundrobin"]));
        group.insert_member(member("b", &["roundrobin", "roundrobin"]));
        assert!(group.supports("consumer", &offer(&["roundrobin"])));
        assert!(!group.supports("consumer", &offer(&["range"])));
        assert!(!group.supports("connect", &offer(&["roundrobin"])));
        // b changes its mind, then leaves: what it supported no longer limits the group.
        group.set_protocols("b", offer(&["range"]));
        assert!(group.supports("consumer", &offer(&["range"])));
        assert!(!group.supports("consumer", &offer(&["roundrobin"])));
        group.remove_member("b");
        assert!(group.supports("consumer", &offer(&["roundrobin"])));
        // Replacing a member under its id counts it once.
        group.insert_member(member("a", &["sticky"]));
        assert!(group.supports("consumer", &offer(&["sticky"])));
        assert!(!group.supports("consumer", &offer(&["roundrobin"])));
    }

    #[test]
    fn all_members_joined_looks_at_every_member_whatever_the_order_they_join_in() {
        let mut group = stable_group();
        for id in ["a", "b", "c", "d"] {
            group.insert_member(member(id, &["range"]));
        }
        let parked = || Some(ParkedJoin { token: 0, version: 5 });
        for id in ["c", "a", "d"] {
            group.members.get_mut(id).unwrap().awaiting_join = parked();
            assert!(!group.all_members_joined());
        }
        group.members.get_mut("b").unwrap().awaiting_join = parked();
        assert!(group.all_members_joined());
        // A member that joined earlier is found missing again once its JoinGroup is answered.
        group.members.get_mut("a").unwrap().awaiting_join = None;
        assert!(!group.all_members_joined());
        group.members.get_mut("a").unwrap().awaiting_join = parked();
        group.pending_members.insert("e".to_string(), 0);
        assert!(!group.all_members_joined());
    }
}
