//! KIP-848 reconciliation as a pure function of heartbeats and time.

use std::collections::{BTreeSet, HashMap};

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::consumer_group::{ConsumerGroupConfig, ConsumerHeartbeat, GroupOverrides, HeartbeatAnswer, TopicView};
use super::events::RebalanceCause;
use super::outbox::{Effect, TimerKey};
use super::records::{GroupRecord, TopicPartitions};
use super::state::{CoordinatorState, GroupConfig};

const NONE: i16 = 0;
const SESSION: i32 = 10_000;

#[derive(Default)]
pub(super) struct Topics(HashMap<String, (Uuid, i32)>, u64);

impl Topics {
    pub(super) fn add(&mut self, name: &str, partitions: i32) -> Uuid {
        let id = self.0.get(name).map(|t| t.0).unwrap_or_else(Uuid::new_v4);
        self.0.insert(name.to_string(), (id, partitions));
        self.1 += 1;
        id
    }
}

impl TopicView for Topics {
    fn by_name(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }
    fn by_id(&self, id: Uuid) -> Option<(String, i32)> {
        self.0.iter().find(|(_, t)| t.0 == id).map(|(n, t)| (n.clone(), t.1))
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        self.1
    }
}

pub(super) struct Harness {
    pub(super) state: CoordinatorState,
    pub(super) topics: Topics,
    pub(super) now: i64,
    timers: Vec<(TimerKey, i64)>,
    pub(super) log: Vec<GroupRecord>,
    /// What each member believes it owns (as a client would track it).
    pub(super) owned: HashMap<String, TopicPartitions>,
    epochs: HashMap<String, i32>,
    events: Vec<(i64, super::events::GroupEvent)>,
    /// Responses delivered to parked or waiting requests, by token.
    pub(super) replies: Vec<(u64, super::outbox::Response)>,
}

impl Harness {
    pub(super) fn new() -> Harness {
        // Targets computed at once: these tests follow one assignment at a time (the interval
        // has its own test).
        let consumer = ConsumerGroupConfig {
            session_timeout_ms: SESSION,
            heartbeat_interval_ms: 1_000,
            assignment_interval_ms: 0,
            ..ConsumerGroupConfig::default()
        };
        Harness {
            state: CoordinatorState::with_consumer_config(GroupConfig::default(), consumer),
            topics: Topics::default(),
            now: 0,
            timers: Vec::new(),
            log: Vec::new(),
            owned: HashMap::new(),
            epochs: HashMap::new(),
            events: Vec::new(),
            replies: Vec::new(),
        }
    }

    /// The rebalances that ended so far, as the shell sums them up.
    fn rebalances(&self) -> Vec<super::rebalances::RebalanceSummary> {
        let mut tracker = super::rebalances::RebalanceTracker::default();
        self.events.iter().filter_map(|(at, e)| tracker.observe(*at, e)).collect()
    }

    /// Carries out the state machine's effects (appends succeed at once) until none is left.
    pub(super) fn settle(&mut self) {
        loop {
            let effects = self.state.out.drain();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Timer(key, at) => self.timers.push((key, at)),
                    Effect::Append(id, records) => {
                        self.log.extend(records);
                        self.state.appended(self.now, id, None);
                    }
                    Effect::Reply(token, response) => self.replies.push((token, response)),
                    Effect::Event(at, event) => self.events.push((at, event)),
                }
            }
        }
    }

    pub(super) fn advance_to(&mut self, t: i64) {
        loop {
            self.timers.sort_by_key(|(_, at)| *at);
            match self.timers.first() {
                Some((_, at)) if *at <= t => {
                    let (key, at) = self.timers.remove(0);
                    self.now = self.now.max(at);
                    self.state.fire(self.now, &key);
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = t;
    }

    pub(super) fn request(&self, member: &str, epoch: i32) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            version: 1,
            ..ConsumerHeartbeat::default()
        }
    }

    pub(super) fn send(&mut self, request: ConsumerHeartbeat) -> HeartbeatAnswer {
        let answer = self.state.consumer_heartbeat(self.now, request, &self.topics);
        self.settle();
        answer
    }

    /// A member joins subscribing to `topics`.
    pub(super) fn join(&mut self, member: &str, topics: &[&str]) -> HeartbeatAnswer {
        let mut r = self.request(member, 0);
        r.subscribed_names = Some(topics.iter().map(|t| t.to_string()).collect());
        r.owned = Some(TopicPartitions::new());
        let a = self.send(r);
        self.absorb(member, &a);
        a
    }

    /// A regular heartbeat reporting what the member owns.
    pub(super) fn beat(&mut self, member: &str) -> HeartbeatAnswer {
        let mut r = self.request(member, self.epochs[member]);
        r.owned = Some(self.owned[member].clone());
        let a = self.send(r);
        self.absorb(member, &a);
        a
    }

    /// Like a client: adopt the new assignment (revoking what is gone, then taking what is new).
    pub(super) fn absorb(&mut self, member: &str, a: &HeartbeatAnswer) {
        if a.error != NONE {
            return;
        }
        self.epochs.insert(member.to_string(), a.epoch);
        if let Some(assignment) = &a.assignment {
            self.owned.insert(member.to_string(), assignment.clone());
        } else {
            self.owned.entry(member.to_string()).or_default();
        }
    }

    /// Heartbeats every member round-robin until all are stable at the assignment epoch,
    /// checking after each that no partition is owned by two members.
    fn converge(&mut self) {
        for _ in 0..20 {
            let members: Vec<String> = self.epochs.keys().cloned().collect();
            for m in &members {
                self.beat(m);
                self.check_exclusive();
            }
            let g = &self.state.consumer_groups["g"];
            if g.state_name() == "Stable" && members.iter().all(|m| self.epochs[m] == g.assignment_epoch) {
                return;
            }
        }
        panic!("did not converge: {}", self.state.consumer_groups["g"].state_name());
    }

    fn check_exclusive(&self) {
        let mut seen = HashMap::new();
        for (member, owned) in &self.owned {
            for (t, ps) in owned {
                for p in ps {
                    if let Some(other) = seen.insert((*t, *p), member.clone()) {
                        panic!("partition {t}/{p} owned by {member} and {other}");
                    }
                }
            }
        }
    }

    /// OffsetCommit of offset 7 for `orders`/`partition` by `member` at `epoch`: its code.
    pub(super) fn commit(&mut self, member: &str, epoch: i32, version: i16, partition: i32) -> Option<i16> {
        use super::offsets::{CommitOffset, CommitRequest};
        let offset =
            CommitOffset { topic: "orders".into(), partition, offset: 7, leader_epoch: -1, metadata: None, commit_timestamp: None };
        let request = CommitRequest {
            group_id: "g".into(),
            generation: epoch,
            member_id: member.into(),
            instance_id: None,
            version,
            retention_ms: -1,
            offsets: vec![offset],
        };
        self.state.commit(self.now, request, 1, &self.topics);
        let mut code = None;
        for e in self.state.out.drain() {
            match e {
                Effect::Reply(_, super::outbox::Response::Commit(c)) => code = Some(c[0]),
                Effect::Append(id, _) => self.state.appended(self.now, id, None),
                _ => {}
            }
        }
        code.or_else(|| {
            self.state.out.drain().into_iter().find_map(|e| match e {
                Effect::Reply(_, super::outbox::Response::Commit(c)) => Some(c[0]),
                _ => None,
            })
        })
    }

    fn count(&self, member: &str) -> usize {
        self.owned[member].values().map(BTreeSet::len).sum()
    }
}

#[test]
fn a_first_member_gets_every_partition() {
    let mut h = Harness::new();
    let t = h.topics.add("orders", 6);
    let a = h.join("a", &["orders"]);
    // Kafka 4.4: a new group is at epoch 1; its first member moves it to 2.
    assert_eq!((a.error, a.epoch, a.interval_ms), (NONE, 2, 1_000));
    assert_eq!(a.member_id.as_deref(), Some("a"));
    assert_eq!(a.assignment.unwrap()[&t].len(), 6);
    // A steady heartbeat: same epoch, assignment unchanged (null).
    let again = h.beat("a");
    assert_eq!((again.epoch, again.assignment), (2, None));
}

#[test]
fn partitions_move_only_after_their_owner_revokes_them() {
    let mut h = Harness::new();
    let t = h.topics.add("orders", 6);
    h.join("a", &["orders"]);
    let b = h.join("b", &["orders"]);
    // b's target includes partitions a still owns: it gets nothing yet.
    assert_eq!(b.epoch, 3);
    assert!(b.assignment.unwrap().get(&t).is_none_or(|s| s.is_empty()));
    h.check_exclusive();
    // a learns it must give up half: its assignment shrinks, its epoch waits.
    let a = h.beat("a");
    assert_eq!(a.epoch, 2, "epoch advances only once revocation is acknowledged");
    assert_eq!(h.count("a"), 3);
    // a now reports owning only its 3: epoch 3; then b gets the released ones.
    let a = h.beat("a");
    assert_eq!(a.epoch, 3);
    let b = h.beat("b");
    assert_eq!(b.assignment.unwrap()[&t].len(), 3);
    h.converge();
    assert_eq!(h.state.consumer_groups["g"].state_name(), "Stable");
    // Two rebalances: the group created by a (converged at once), b joining (converged once a
    // revoked and b took the partitions).
    let causes: Vec<_> = h.rebalances().into_iter().map(|r| (r.cause, r.generation_after, r.members_after)).collect();
    assert_eq!(
        causes,
        vec![(RebalanceCause::GroupCreated { member: "a".into() }, 2, 1), (RebalanceCause::MemberJoined { member: "b".into() }, 3, 2)]
    );
}

#[test]
fn three_members_on_six_partitions_own_two_each_and_a_leaver_is_rebalanced() {
    let mut h = Harness::new();
    h.topics.add("orders", 6);
    for m in ["a", "b", "c"] {
        h.join(m, &["orders"]);
        h.converge();
    }
    for m in ["a", "b", "c"] {
        assert_eq!(h.count(m), 2, "{m}");
    }
    // c leaves.
    let mut leave = h.request("c", -1);
    leave.member_epoch = -1;
    let out = h.send(leave);
    assert_eq!((out.error, out.epoch), (NONE, -1));
    h.owned.remove("c");
    h.epochs.remove("c");
    h.converge();
    assert_eq!(h.count("a") + h.count("b"), 6);
    assert_eq!(h.count("a"), 3);
    let last = h.rebalances().pop().expect("converged after the leave");
    assert_eq!((last.cause, last.members_before, last.members_after), (RebalanceCause::MemberLeft { members: vec!["c".into()] }, 3, 2));
}

#[test]
fn a_silent_member_is_fenced_after_its_session() {
    let mut h = Harness::new();
    h.topics.add("orders", 4);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    h.converge();
    // Only a heartbeats.
    while h.now < SESSION as i64 + 1_000 {
        h.advance_to(h.now + 1_000);
        h.beat("a");
    }
    assert!(!h.state.consumer_groups["g"].members.contains_key("b"));
    h.owned.remove("b");
    h.epochs.remove("b");
    h.converge();
    assert_eq!(h.count("a"), 4);
    assert_eq!(h.rebalances().pop().map(|r| r.cause), Some(RebalanceCause::SessionTimeout { member: "b".into() }));
    // b comes back with its old epoch: fenced.
    let mut r = h.request("b", 3);
    r.owned = Some(TopicPartitions::new());
    assert_eq!(h.send(r).error, ResponseError::UnknownMemberId.code());
}

/// A group's own session timeout and heartbeat interval (its GROUP resource's configs) apply
/// from the next heartbeat, and only to that group.
#[test]
fn a_groups_overrides_apply_from_the_next_heartbeat() {
    let mut h = Harness::new();
    h.topics.add("orders", 2);
    assert_eq!(h.join("a", &["orders"]).interval_ms, 1_000);
    let overrides =
        GroupOverrides { session_timeout_ms: Some(3 * SESSION), heartbeat_interval_ms: Some(2_500), assignment_interval_ms: None };
    h.state.consumer.overrides.set("g", overrides);
    h.state.consumer.overrides.set("other", GroupOverrides { heartbeat_interval_ms: Some(9_000), ..Default::default() });
    assert_eq!(h.beat("a").interval_ms, 2_500);
    // The session now lasts three times as long: silent for twice the default session, a stays.
    let silent_until = h.now + 2 * SESSION as i64;
    h.advance_to(silent_until);
    assert!(h.state.consumer_groups["g"].members.contains_key("a"));
    h.advance_to(silent_until + 2 * SESSION as i64);
    assert!(!h.state.consumer_groups["g"].members.contains_key("a"), "fenced once the longer session passed");
    // Removed overrides: the defaults again.
    h.state.consumer.overrides.set("g", GroupOverrides::default());
    assert_eq!(h.join("b", &["orders"]).interval_ms, 1_000);
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_fenced() {
    let mut h = Harness::new();
    h.topics.add("orders", 4);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    // a is told to revoke but keeps reporting everything it owned.
    let stale = h.owned["a"].clone();
    let mut r = h.request("a", 2);
    r.owned = Some(stale.clone());
    h.send(r);
    assert!(h.state.consumer_groups["g"].members["a"].rebalance_deadline.is_some());
    // a keeps its session alive, still claiming everything, past its 30 s rebalance timeout.
    for _ in 0..40 {
        h.advance_to(h.now + 1_000);
        h.beat("b");
        if h.state.consumer_groups["g"].members.contains_key("a") {
            let mut r = h.request("a", 2);
            r.owned = Some(stale.clone());
            h.send(r);
        }
    }
    assert!(!h.state.consumer_groups["g"].members.contains_key("a"), "fenced by its rebalance timeout");
    let mut started = h.events.iter().filter_map(|(_, e)| match e {
        super::events::GroupEvent::RebalanceStarted { cause, .. } => Some(cause.clone()),
        _ => None,
    });
    assert_eq!(started.next_back(), Some(RebalanceCause::RebalanceTimeout { members: vec!["a".into()] }));
}

#[test]
fn epoch_errors() {
    let mut h = Harness::new();
    h.topics.add("orders", 2);
    let mut r = h.request("x", 5);
    r.owned = Some(TopicPartitions::new());
    assert_eq!(h.send(r).error, ResponseError::GroupIdNotFound.code());
    h.join("a", &["orders"]);
    let mut r = h.request("a", 9);
    r.owned = Some(h.owned["a"].clone());
    assert_eq!(h.send(r).error, ResponseError::FencedMemberEpoch.code(), "ahead of the coordinator");
    let mut r = h.request("stranger", 1);
    r.owned = Some(TopicPartitions::new());
    assert_eq!(h.send(r).error, ResponseError::UnknownMemberId.code());
    // KAFKA-19233: a known member re-joining with epoch 0 is accepted.
    let again = h.join("a", &["orders"]);
    assert_eq!(again.error, NONE);
    assert_eq!(again.assignment.unwrap().values().map(BTreeSet::len).sum::<usize>(), 2);
}

#[test]
fn a_lost_response_is_tolerated_one_epoch_back() {
    let mut h = Harness::new();
    let t = h.topics.add("orders", 4);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    h.converge();
    let epoch = h.epochs["a"];
    // A third member joins; a reconciles to a new epoch but "loses" the response.
    h.join("c", &["orders"]);
    let answer = h.beat("a");
    let mut subset = TopicPartitions::new();
    subset.insert(t, answer.assignment.clone().unwrap_or_default().get(&t).cloned().unwrap_or_default());
    let mut r = h.request("a", epoch);
    r.owned = Some(subset);
    let retried = h.send(r);
    assert!(retried.error == NONE || h.epochs["a"] == epoch, "previous epoch with a subset is accepted");
}

#[test]
fn validation() {
    let mut h = Harness::new();
    let mut r = h.request("", 0);
    r.subscribed_names = Some(vec![]);
    r.owned = Some(TopicPartitions::new());
    assert_eq!(h.send(r.clone()).error, ResponseError::InvalidRequest.code(), "v1 needs a member id");
    r.member_id = "m".into();
    r.owned = None;
    assert_eq!(h.send(r.clone()).error, ResponseError::InvalidRequest.code(), "joining needs an empty owned list");
    r.owned = Some(TopicPartitions::new());
    r.server_assignor = Some("sticky".into());
    assert_eq!(h.send(r.clone()).error, ResponseError::UnsupportedAssignor.code());
    r.server_assignor = None;
    r.subscribed_regex = Some("(unclosed".into());
    assert_eq!(h.send(r.clone()).error, ResponseError::InvalidRegularExpression.code());
    r.subscribed_regex = None;
    r.group_id = String::new();
    assert_eq!(h.send(r.clone()).error, ResponseError::InvalidRequest.code());
    r.group_id = "g".into();
    r.member_id = "m".repeat(40_000);
    assert_eq!(h.send(r.clone()).error, ResponseError::InvalidRequest.code(), "a member id too long for the record key");
    r.member_id = "m".into();
    r.member_epoch = -3;
    assert_eq!(h.send(r).error, ResponseError::InvalidRequest.code());
}

#[test]
fn a_static_member_restart_keeps_its_partitions() {
    let mut h = Harness::new();
    let t = h.topics.add("orders", 4);
    let mut r = h.request("s1", 0);
    r.instance_id = Some("inst".into());
    r.subscribed_names = Some(vec!["orders".into()]);
    r.owned = Some(TopicPartitions::new());
    let first = h.send(r.clone());
    assert_eq!(first.assignment.as_ref().unwrap()[&t].len(), 4);
    // A new process with the same instance id while the old one has not left: refused.
    let mut clash = r.clone();
    clash.member_id = "s2".into();
    assert_eq!(h.send(clash.clone()).error, ResponseError::UnreleasedInstanceId.code());
    // The old process leaves temporarily (-2); the new one takes its place and partitions.
    let mut leave = h.request("s1", -2);
    leave.instance_id = Some("inst".into());
    assert_eq!(h.send(leave).epoch, -2);
    let epoch_before = h.state.consumer_groups["g"].group_epoch;
    let second = h.send(clash);
    assert_eq!(second.error, NONE);
    assert_eq!(second.assignment.unwrap()[&t].len(), 4);
    assert_eq!(h.state.consumer_groups["g"].group_epoch, epoch_before, "no rebalance");
    // The old member id is gone.
    let mut old = h.request("s1", 1);
    old.instance_id = Some("inst".into());
    assert_eq!(h.send(old).error, ResponseError::FencedInstanceId.code());
    // The replacement has a session of its own: silent, it is removed after it.
    h.advance_to(h.now + SESSION as i64 + 1);
    assert!(!h.state.consumer_groups["g"].members.contains_key("s2"), "the replacement's session expires");
}

#[test]
fn new_partitions_and_regex_subscriptions_are_picked_up() {
    let mut h = Harness::new();
    let orders = h.topics.add("orders", 2);
    let mut r = h.request("a", 0);
    r.subscribed_regex = Some("ord.*".into());
    r.owned = Some(TopicPartitions::new());
    let a = h.send(r);
    h.absorb("a", &a);
    assert_eq!(h.owned["a"][&orders].len(), 2);
    // Partitions added and a new matching topic created: both are assigned.
    h.topics.add("orders", 4);
    let more = h.topics.add("ordinals", 1);
    h.topics.add("payments", 3);
    h.converge();
    assert_eq!(h.owned["a"][&orders].len(), 4);
    assert_eq!(h.owned["a"][&more].len(), 1);
    assert_eq!(h.owned["a"].len(), 2, "payments does not match");
}

#[test]
fn state_is_rebuilt_from_records() {
    let mut h = Harness::new();
    h.topics.add("orders", 6);
    for m in ["a", "b"] {
        h.join(m, &["orders"]);
    }
    h.converge();
    let mut restored = CoordinatorState::new(GroupConfig::default());
    for record in h.log.clone() {
        let decoded = GroupRecord::decode(&record.key(), record.value().as_deref()).unwrap().unwrap();
        restored.replay(decoded, 0);
    }
    let before = &h.state.consumer_groups["g"];
    let after = &restored.consumer_groups["g"];
    assert_eq!((after.group_epoch, after.assignment_epoch), (before.group_epoch, before.assignment_epoch));
    for m in ["a", "b"] {
        assert_eq!(after.members[m].assigned, before.members[m].assigned);
        assert_eq!(after.members[m].epoch, before.members[m].epoch);
    }
    assert_eq!(after.owners, before.owners);
}

#[test]
fn offsets_of_consumer_groups_check_the_member_epoch() {
    let mut h = Harness::new();
    h.topics.add("orders", 1);
    h.join("a", &["orders"]);
    assert_eq!(h.commit("a", 2, 9, 0), Some(NONE));
    assert_eq!(h.commit("a", 1, 9, 0), Some(ResponseError::StaleMemberEpoch.code()));
    assert_eq!(h.commit("a", 2, 8, 0), Some(ResponseError::UnsupportedVersion.code()));
    assert_eq!(h.commit("zz", 2, 9, 0), Some(ResponseError::UnknownMemberId.code()));
    assert_eq!(h.state.fetch_offsets("g", None)[0].1[0].1, 7);
    assert_eq!(h.state.validate_fetch_member("g", Some("a"), 0), Err(ResponseError::StaleMemberEpoch));
    assert_eq!(h.state.validate_fetch_member("g", None, -1), Ok(()));
}

#[test]
fn an_older_epoch_commits_the_partitions_held_since_then() {
    // KIP-1251 (Kafka 4.3): a commit sent just before a heartbeat moved the member's epoch.
    let mut h = Harness::new();
    let t = h.topics.add("orders", 4);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    h.beat("a"); // told to revoke two partitions: still at epoch 2
    let stale = Some(ResponseError::StaleMemberEpoch.code());
    let a = h.beat("a"); // revoked: epoch 3
    assert_eq!(a.epoch, 3);
    let kept: Vec<i32> = h.owned["a"][&t].iter().copied().collect();
    let given_up: Vec<i32> = (0..4).filter(|p| !kept.contains(p)).collect();
    // Epoch 2 still commits what a has held since epoch 2, not what it gave up.
    assert_eq!(h.commit("a", 2, 9, kept[0]), Some(NONE));
    assert_eq!(h.commit("a", 2, 9, given_up[0]), stale);
    // An epoch newer than the member's is fenced, as before.
    assert_eq!(h.commit("a", 4, 9, kept[0]), stale);
    h.converge();
    // b was given its partitions at epoch 3: an older epoch may not commit them.
    assert_eq!(h.commit("b", 3, 9, given_up[0]), Some(NONE));
    assert_eq!(h.commit("b", 2, 9, given_up[0]), stale);
    // The epochs survive a rebuild from the records.
    let mut restored = CoordinatorState::new(GroupConfig::default());
    for record in h.log.clone() {
        let decoded = GroupRecord::decode(&record.key(), record.value().as_deref()).unwrap().unwrap();
        restored.replay(decoded, 0);
    }
    for m in ["a", "b"] {
        let (before, after) = (&h.state.consumer_groups["g"].members[m], &restored.consumer_groups["g"].members[m]);
        assert_eq!(after.assignment_epochs, before.assignment_epochs, "{m}");
    }
    assert_eq!(restored.consumer_groups["g"].members["a"].assignment_epoch((t, kept[0])), Some(2));
}

#[test]
fn classic_and_consumer_groups_share_one_namespace() {
    let mut h = Harness::new();
    h.topics.add("orders", 1);
    h.join("a", &["orders"]);
    let listed = h.state.list_groups(&[], &["consumer".into()]);
    assert_eq!((listed.len(), listed[0].group_type, listed[0].state), (1, "consumer", "Stable"));
    assert!(h.state.list_groups(&[], &["classic".into()]).is_empty());
    // With migration disabled, a classic member cannot join a live consumer group (KAFKA-20640).
    h.state.consumer.migration_policy = crate::config::MigrationPolicy::Disabled;
    let join = super::requests::JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), bytes::Bytes::new())],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        client_id: "c".into(),
        client_host: "/h".into(),
        version: 5,
    };
    h.state.join(h.now, join.clone(), 77, &h.topics);
    let replies: Vec<Effect> = h.state.out.drain();
    assert!(replies.iter().any(
        |e| matches!(e, Effect::Reply(77, super::outbox::Response::Join(r)) if r.error == ResponseError::InconsistentGroupProtocol.code())
    ));
    // DeleteGroups refuses the live consumer group; after its member leaves it succeeds.
    h.state.delete_groups(h.now, &["g".into()], 5);
    assert!(h
        .state
        .out
        .drain()
        .iter()
        .any(|e| matches!(e, Effect::Reply(5, super::outbox::Response::DeleteGroups(c)) if c[0] == ResponseError::NonEmptyGroup.code())));
    let mut leave = h.request("a", -1);
    leave.member_epoch = -1;
    h.send(leave);
    h.state.delete_groups(h.now, &["g".into()], 6);
    let effects = h.state.out.drain();
    for e in &effects {
        if let Effect::Append(id, _) = e {
            h.state.appended(h.now, *id, None);
        }
    }
    let more = h.state.out.drain();
    assert!(effects
        .iter()
        .chain(more.iter())
        .any(|e| matches!(e, Effect::Reply(6, super::outbox::Response::DeleteGroups(c)) if c[0] == NONE)));
    assert!(h.state.consumer_groups.is_empty());
    // A consumer heartbeat replaces an empty classic (simple) group of the same id.
    h.state.groups.insert("simple".into(), super::group::ClassicGroup::new("simple".into(), 0));
    let mut r = h.request("m", 0);
    r.group_id = "simple".into();
    r.subscribed_names = Some(vec!["orders".into()]);
    r.owned = Some(TopicPartitions::new());
    assert_eq!(h.send(r).error, NONE);
    assert!(!h.state.groups.contains_key("simple"));
}

/// Kafka 4.4's `group.consumer.assignment.interval.ms`: members arriving within the interval of
/// the last target assignment are assigned together when it ends.
#[test]
fn members_arriving_together_are_assigned_together() {
    let mut h = Harness::new();
    h.state.consumer.assignment_interval_ms = 1_000;
    let t = h.topics.add("orders", 6);
    let a = h.join("a", &["orders"]);
    assert_eq!((a.epoch, a.assignment.unwrap()[&t].len()), (2, 6), "the first target is computed at once");
    h.advance_to(10);
    let b = h.join("b", &["orders"]);
    h.advance_to(20);
    let c = h.join("c", &["orders"]);
    let g = &h.state.consumer_groups["g"];
    assert_eq!((g.group_epoch, g.assignment_epoch, g.state_name()), (4, 2, "Assigning"));
    // Meanwhile the newcomers hold the current target's epoch, and nothing.
    assert_eq!((b.epoch, c.epoch), (2, 2));
    assert!(c.assignment.unwrap().is_empty());
    let targets = |h: &Harness| h.log.iter().filter(|r| matches!(r, GroupRecord::TargetEpoch { epoch: Some(_), .. })).count();
    assert_eq!(targets(&h), 1);
    // The interval ends: one target for both arrivals, without waiting for a heartbeat.
    h.advance_to(1_000);
    let g = &h.state.consumer_groups["g"];
    assert_eq!((g.assignment_epoch, targets(&h)), (4, 2));
    h.converge();
    assert_eq!(h.count("a") + h.count("b") + h.count("c"), 6);
    assert!(["a", "b", "c"].iter().all(|m| h.count(m) == 2));
}
