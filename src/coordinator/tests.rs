//! The coordinator state machine as a pure function of requests and time: one test per row of
//! the spec's error tables and per timer, with explicit `now`.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::classic::HeartbeatRequest;
use super::events::{GroupEvent, RebalanceCause};
use super::group::GroupState;
use super::offsets::{CommitOffset, CommitRequest};
use super::outbox::{Effect, Response, TimerKey};
use super::rebalances::{RebalanceSummary, RebalanceTracker};
use super::records::GroupRecord;
use super::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use super::state::{CoordinatorState, GroupConfig};

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 60_000;
const DELAY: i64 = 3_000;

/// A coordinator plus the bookkeeping the shell would do: tokens, timers, an in-memory log.
struct Harness {
    state: CoordinatorState,
    now: i64,
    next_token: u64,
    replies: HashMap<u64, Response>,
    timers: Vec<(TimerKey, i64)>,
    log: Vec<GroupRecord>,
    /// Appends are acknowledged at once unless this is set.
    hold_appends: bool,
    held: Vec<u64>,
    events: Vec<(i64, GroupEvent)>,
}

impl Harness {
    fn new() -> Harness {
        Self::with(GroupConfig { initial_rebalance_delay_ms: DELAY, ..GroupConfig::default() })
    }

    fn with(config: GroupConfig) -> Harness {
        Harness {
            state: CoordinatorState::new(config),
            now: 0,
            next_token: 0,
            replies: HashMap::new(),
            timers: Vec::new(),
            log: Vec::new(),
            hold_appends: false,
            held: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Why each rebalance so far began, in order.
    fn causes(&self) -> Vec<RebalanceCause> {
        let started = self.events.iter().filter_map(|(_, e)| match e {
            GroupEvent::RebalanceStarted { cause, .. } => Some(cause.clone()),
            _ => None,
        });
        started.collect()
    }

    /// The rebalances that ended so far, as the shell sums them up.
    fn rebalances(&self) -> Vec<RebalanceSummary> {
        let mut tracker = RebalanceTracker::default();
        self.events.iter().filter_map(|(at, e)| tracker.observe(*at, e)).collect()
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Runs the effects: records to the log, timers queued, replies collected.
    fn settle(&mut self) {
        loop {
            let effects = self.state.out.drain();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Reply(token, response) => {
                        assert!(self.replies.insert(token, response).is_none(), "token {token} answered twice");
                    }
                    Effect::Timer(key, at) => self.timers.push((key, at)),
                    Effect::Event(at, event) => self.events.push((at, event)),
                    Effect::Append(id, records) => {
                        self.log.extend(records);
                        if self.hold_appends {
                            self.held.push(id);
                        } else {
                            self.state.appended(self.now, id, None);
                        }
                    }
                }
            }
        }
    }

    /// Moves time forward, firing every due timer in deadline order.
    fn advance_to(&mut self, t: i64) {
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

    fn join(&mut self, group: &str, member: &str, instance: Option<&str>, version: i16) -> u64 {
        self.join_with(group, member, instance, version, vec![("range".into(), Bytes::from_static(b"sub"))])
    }

    fn join_with(&mut self, group: &str, member: &str, instance: Option<&str>, version: i16, protocols: Vec<(String, Bytes)>) -> u64 {
        let token = self.token();
        let request = JoinRequest {
            group_id: group.into(),
            member_id: member.into(),
            instance_id: instance.map(Into::into),
            protocol_type: "consumer".into(),
            protocols,
            session_timeout_ms: SESSION,
            rebalance_timeout_ms: REBALANCE,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            version,
        };
        self.state.join(self.now, request, token, &super::consumer_tests::Topics::default());
        self.settle();
        token
    }

    /// A dynamic v5 member's full join: MEMBER_ID_REQUIRED, then the join with that id.
    fn join_new(&mut self, group: &str) -> (String, u64) {
        let first = self.join(group, "", None, 5);
        let id = self.join_reply(first).member_id;
        assert_eq!(self.join_reply(first).error, ResponseError::MemberIdRequired.code());
        let token = self.join(group, &id, None, 5);
        (id, token)
    }

    fn join_reply(&self, token: u64) -> JoinResult {
        match self.replies.get(&token) {
            Some(Response::Join(r)) => r.clone(),
            other => panic!("token {token}: expected a join reply, got {other:?}"),
        }
    }

    fn answered(&self, token: u64) -> bool {
        self.replies.contains_key(&token)
    }

    fn sync(&mut self, group: &str, member: &str, generation: i32, assignments: Vec<(String, Bytes)>) -> u64 {
        let token = self.token();
        let request = SyncRequest {
            group_id: group.into(),
            generation,
            member_id: member.into(),
            instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments,
        };
        self.state.sync(self.now, request, token);
        self.settle();
        token
    }

    fn sync_reply(&self, token: u64) -> SyncResult {
        match self.replies.get(&token) {
            Some(Response::Sync(r)) => r.clone(),
            other => panic!("token {token}: expected a sync reply, got {other:?}"),
        }
    }

    fn heartbeat(&mut self, group: &str, member: &str, generation: i32, instance: Option<&str>) -> i16 {
        let request =
            HeartbeatRequest { group_id: group.into(), generation, member_id: member.into(), instance_id: instance.map(Into::into) };
        let code = self.state.heartbeat(self.now, &request);
        self.settle();
        code
    }

    fn commit(&mut self, group: &str, member: &str, generation: i32, version: i16, offsets: &[(&str, i32, i64)]) -> Vec<i16> {
        let token = self.token();
        let request = CommitRequest {
            group_id: group.into(),
            generation,
            member_id: member.into(),
            instance_id: None,
            version,
            retention_ms: -1,
            offsets: offsets
                .iter()
                .map(|&(t, p, o)| CommitOffset {
                    topic: t.into(),
                    partition: p,
                    offset: o,
                    leader_epoch: -1,
                    metadata: None,
                    commit_timestamp: None,
                })
                .collect(),
        };
        self.state.commit(self.now, request, token, &super::consumer_tests::Topics::default());
        self.settle();
        match self.replies.get(&token) {
            Some(Response::Commit(codes)) => codes.clone(),
            other => panic!("expected commit reply, got {other:?}"),
        }
    }

    fn state_of(&self, group: &str) -> GroupState {
        self.state.groups[group].state
    }

    /// One member forms a Stable group; returns (member id, generation).
    fn stable_single(&mut self, group: &str) -> (String, i32) {
        let (id, token) = self.join_new(group);
        self.advance_to(self.now + DELAY);
        let joined = self.join_reply(token);
        let sync = self.sync(group, &id, joined.generation, vec![(id.clone(), Bytes::from_static(b"assignment"))]);
        assert_eq!(self.sync_reply(sync).error, 0);
        (id, joined.generation)
    }
}

const NONE: i16 = 0;

// === join phase ===

#[test]
fn a_single_member_waits_exactly_the_initial_delay() {
    let mut h = Harness::new();
    let (id, token) = h.join_new("g");
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
    h.advance_to(DELAY - 1);
    assert!(!h.answered(token), "the initial rebalance waits for its delay");
    h.advance_to(DELAY);
    let r = h.join_reply(token);
    assert_eq!((r.error, r.generation, r.leader.as_str()), (NONE, 1, id.as_str()));
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(r.members.len(), 1, "the leader gets the member list");
    assert_eq!(h.state_of("g"), GroupState::CompletingRebalance);

    let sync = h.sync("g", &id, 1, vec![(id.clone(), Bytes::from_static(b"a1"))]);
    let s = h.sync_reply(sync);
    assert_eq!((s.error, &s.assignment[..]), (NONE, &b"a1"[..]));
    assert_eq!(h.state_of("g"), GroupState::Stable);
    // Persisted: the creation record, then the group with its member at sync.
    let GroupRecord::Group { value: Some(v), .. } = h.log.last().unwrap() else { panic!() };
    assert_eq!((v.generation, v.members.len()), (1, 1));
    assert_eq!(&v.members[0].assignment[..], b"a1");
    // One rebalance: the group was created by its member, it joined after the delay and synced.
    let [done] = &h.rebalances()[..] else { panic!("one rebalance: {:?}", h.rebalances()) };
    assert_eq!(done.cause, RebalanceCause::GroupCreated { member: id });
    assert_eq!((done.generation_before, done.generation_after, done.members_before, done.members_after), (0, 1, 0, 1));
    assert_eq!((done.join_ms, done.sync_ms, done.total_ms), (Some(DELAY), Some(0), DELAY));
}

#[test]
fn every_rebalance_says_what_started_it() {
    let mut h = Harness::new();
    let (a, gen) = h.stable_single("g");
    // A second member joins the Stable group.
    let (b, tb) = h.join_new("g");
    assert_eq!(h.causes().last(), Some(&RebalanceCause::MemberJoined { member: b.clone() }));
    let ta = h.join_with("g", &a, None, 1, vec![("range".into(), Bytes::from_static(b"sub"))]);
    let gen2 = h.join_reply(ta).generation;
    assert_eq!(gen2, gen + 1);
    let leader = h.join_reply(ta).leader.clone();
    h.sync("g", &leader, gen2, vec![]);
    h.sync("g", if leader == a { &b } else { &a }, gen2, vec![]);
    let _ = tb;
    let last = h.rebalances().pop().expect("the join ended");
    assert_eq!((last.cause, last.members_before, last.members_after), (RebalanceCause::MemberJoined { member: b.clone() }, 1, 2));
    // A member rejoins with other protocols.
    h.join_with("g", &b, None, 1, vec![("roundrobin".into(), Bytes::new()), ("range".into(), Bytes::new())]);
    assert_eq!(h.causes().last(), Some(&RebalanceCause::MetadataChanged { member: b.clone() }));
    // Both leave at once.
    h.state.leave(h.now, "g", &[(a.clone(), None), (b.clone(), None)]);
    h.settle();
    let last = h.rebalances().pop().expect("the group emptied");
    assert_eq!(last.cause, RebalanceCause::MetadataChanged { member: b.clone() }, "the leave came while it ran");
    assert_eq!((last.restarts, last.members_after), (0, 0));
    assert_eq!(h.state_of("g"), GroupState::Empty);
}

#[test]
fn member_id_required_only_from_v4() {
    let mut h = Harness::new();
    let t = h.join("g", "", None, 3);
    assert!(!h.answered(t), "v3: added directly and parked");
    let t4 = h.join("g2", "", None, 4);
    assert_eq!(h.join_reply(t4).error, ResponseError::MemberIdRequired.code());
    assert!(h.join_reply(t4).member_id.starts_with("client-"));
}

#[test]
fn the_initial_delay_extends_while_members_keep_arriving() {
    let mut h = Harness::new();
    let (_, a) = h.join_new("g");
    h.advance_to(2_000);
    let (_, b) = h.join_new("g");
    // First window ends at 3000 with a new member seen: one more window (to 6000).
    h.advance_to(5_000);
    let (_, c) = h.join_new("g");
    h.advance_to(5_999);
    assert!(!h.answered(a) && !h.answered(b) && !h.answered(c));
    // 6000: c arrived in the second window: a third window, to 9000.
    h.advance_to(8_999);
    assert!(!h.answered(a));
    h.advance_to(9_000);
    for t in [a, b, c] {
        assert_eq!(h.join_reply(t).generation, 1);
    }
    assert_eq!(h.state.groups["g"].members.len(), 3);
}

#[test]
fn all_members_rejoining_completes_a_normal_rebalance_at_once() {
    let mut h = Harness::new();
    let (a, gen) = h.stable_single("g");
    // b joins: rebalance; a rejoins; both joined → complete immediately (not initial).
    let (b, tb) = h.join_new("g");
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat("g", &a, gen, None), ResponseError::RebalanceInProgress.code());
    let ta = h.join("g", &a, None, 5);
    assert_eq!(h.join_reply(ta).generation, gen + 1);
    assert_eq!(h.join_reply(tb).generation, gen + 1);
    assert_eq!(h.join_reply(ta).leader, a, "the leader keeps its role when it rejoins");
    assert!(h.join_reply(tb).members.is_empty());
    let _ = b;
}

#[test]
fn pending_member_ids_hold_the_join_phase_until_they_expire() {
    let mut h = Harness::new();
    let (a, gen) = h.stable_single("g");
    // A new member gets MEMBER_ID_REQUIRED but never comes back (KAFKA-7909).
    let ghost = h.join("g", "", None, 5);
    let ghost_id = h.join_reply(ghost).member_id;
    // a leader-rejoins to start a rebalance.
    let ta = h.join("g", &a, None, 5);
    assert!(!h.answered(ta), "the pending member blocks completion");
    h.advance_to(h.now + SESSION as i64);
    assert_eq!(h.join_reply(ta).generation, gen + 1, "completed once the pending id expired");
    assert!(!h.state.groups["g"].pending_members.contains_key(&ghost_id));
}

#[test]
fn rebalance_timeout_drops_dynamic_laggards_but_keeps_static_members() {
    let mut h = Harness::new();
    // Three members: a (dynamic), s (static), c (dynamic).
    let (a, ta) = h.join_new("g");
    let ts = h.join("g", "", Some("inst-s"), 5);
    let (c, tc) = h.join_new("g");
    h.advance_to(DELAY * 3);
    let gen = h.join_reply(ta).generation;
    let s = h.join_reply(ts).member_id;
    let leader = h.join_reply(ta).leader;
    let sync = h.sync("g", &leader, gen, vec![]);
    let _ = (tc, sync);
    for m in [&a, &s, &c] {
        if m != &leader {
            h.sync("g", m, gen, vec![]);
        }
    }
    assert_eq!(h.state_of("g"), GroupState::Stable);
    // Only a rejoins; s and c stay silent past the rebalance timeout (heartbeats keep them alive).
    let rejoin = h.join("g", &a, None, 5);
    let start = h.now;
    while h.now < start + REBALANCE as i64 {
        let t = h.now + 3_000;
        h.advance_to(t);
        h.heartbeat("g", &s, gen, Some("inst-s"));
        h.heartbeat("g", &c, gen, None);
    }
    let r = h.join_reply(rejoin);
    assert_eq!(r.generation, gen + 1);
    let g = &h.state.groups["g"];
    assert!(g.members.contains_key(&s), "static member kept");
    assert!(!g.members.contains_key(&c), "dynamic laggard dropped");
}

// === sessions and timers ===

#[test]
fn a_member_that_stops_heartbeating_is_removed_after_its_session() {
    let mut h = Harness::new();
    let (a, ta) = h.join_new("g");
    let (b, tb) = h.join_new("g");
    // b arrived in the first window: one more window.
    h.advance_to(2 * DELAY);
    let gen = h.join_reply(ta).generation;
    let leader = h.join_reply(ta).leader.clone();
    h.sync("g", &leader, gen, vec![]);
    let other = if leader == a { &b } else { &a };
    h.sync("g", other, gen, vec![]);
    let _ = tb;
    // a heartbeats; b goes silent.
    let start = h.now;
    while h.now < start + SESSION as i64 + 1 {
        h.advance_to(h.now + 2_000);
        let code = h.heartbeat("g", &a, gen, None);
        if code != NONE {
            assert_eq!(code, ResponseError::RebalanceInProgress.code());
            break;
        }
    }
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
    assert!(!h.state.groups["g"].members.contains_key(&b));
    assert_eq!(h.causes().last(), Some(&RebalanceCause::SessionTimeout { member: b.clone() }));
    assert_eq!(
        h.heartbeat("g", &b, gen, None),
        ResponseError::UnknownMemberId.code(),
        "removed members are unknown, not fenced by generation"
    );
}

#[test]
fn a_new_member_that_never_completes_its_join_is_dropped_after_five_minutes() {
    let mut h = Harness::new();
    // The existing member has a 10-minute rebalance timeout and never rejoins.
    let token = h.token();
    let mut request = JoinRequest {
        group_id: "g".into(),
        member_id: "".into(),
        instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::new())],
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: 600_000,
        client_id: "slow".into(),
        client_host: "/h".into(),
        version: 3,
    };
    h.state.join(0, request.clone(), token, &super::consumer_tests::Topics::default());
    h.settle();
    h.advance_to(DELAY);
    let slow = h.join_reply(token);
    h.sync("g", &slow.member_id, slow.generation, vec![]);
    // A newcomer joins and waits; the slow member only heartbeats.
    let newcomer = h.token();
    request.client_id = "new".into();
    h.state.join(h.now, request, newcomer, &super::consumer_tests::Topics::default());
    h.settle();
    while h.now < 299_000 {
        h.advance_to(h.now + 3_000);
        h.heartbeat("g", &slow.member_id, slow.generation, None);
    }
    assert!(!h.answered(newcomer));
    h.advance_to(DELAY + 300_000);
    let r = h.join_reply(newcomer);
    assert_eq!(r.error, ResponseError::UnknownMemberId.code(), "dropped by the 5-minute new-member timeout (KAFKA-7610)");
    assert_eq!(h.state.groups["g"].members.len(), 1);
}

#[test]
fn the_sync_phase_times_out_when_the_leader_never_syncs() {
    let mut h = Harness::new();
    let (_, ta) = h.join_new("g");
    let (_, tb) = h.join_new("g");
    h.advance_to(2 * DELAY);
    let r = h.join_reply(ta);
    let follower = if r.leader == r.member_id { h.join_reply(tb).member_id } else { r.member_id.clone() };
    let parked = h.sync("g", &follower, r.generation, vec![]);
    assert!(!h.answered(parked));
    // Heartbeats during CompletingRebalance succeed (KAFKA-10134); both stay alive, but the
    // leader never sends its SyncGroup.
    let deadline = h.now + REBALANCE as i64;
    while h.now < deadline {
        assert_eq!(h.heartbeat("g", &follower, r.generation, None), NONE);
        assert_eq!(h.heartbeat("g", &r.leader, r.generation, None), NONE);
        h.advance_to((h.now + 3_000).min(deadline));
    }
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance, "the leader was removed and a rebalance started");
    assert_eq!(h.sync_reply(parked).error, ResponseError::RebalanceInProgress.code());
    assert!(!h.state.groups["g"].members.contains_key(&r.leader));
    assert_eq!(h.causes().last(), Some(&RebalanceCause::RebalanceTimeout { members: vec![r.leader.clone()] }));
}

// === error tables ===

#[test]
fn join_errors() {
    let mut h = Harness::new();
    let t = h.join("", "", None, 5);
    assert_eq!(h.join_reply(t).error, ResponseError::InvalidGroupId.code());
    let token = h.token();
    let mut bad = JoinRequest {
        group_id: "g".into(),
        member_id: "".into(),
        instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::new())],
        session_timeout_ms: 5_999,
        rebalance_timeout_ms: REBALANCE,
        client_id: "c".into(),
        client_host: "/h".into(),
        version: 5,
    };
    h.state.join(0, bad.clone(), token, &super::consumer_tests::Topics::default());
    h.settle();
    assert_eq!(h.join_reply(token).error, ResponseError::InvalidSessionTimeout.code());
    bad.session_timeout_ms = SESSION;
    bad.protocols.clear();
    let token = h.token();
    h.state.join(0, bad, token, &super::consumer_tests::Topics::default());
    h.settle();
    assert_eq!(h.join_reply(token).error, ResponseError::InconsistentGroupProtocol.code(), "no protocols on an empty group");
    let t = h.join("missing", "some-id", None, 5);
    assert_eq!(h.join_reply(t).error, ResponseError::UnknownMemberId.code());
    let t = h.join(&"g".repeat(super::state::MAX_ID_BYTES + 1), "", None, 5);
    assert_eq!(h.join_reply(t).error, ResponseError::InvalidGroupId.code(), "oversized group id");
    let t = h.join("g", "", Some(&"i".repeat(super::state::MAX_ID_BYTES + 1)), 5);
    assert_eq!(h.join_reply(t).error, ResponseError::InvalidGroupId.code(), "oversized instance id");

    let (a, _) = h.stable_single("s");
    let t = h.join_with("s", "", None, 5, vec![("roundrobin".into(), Bytes::new())]);
    assert_eq!(h.join_reply(t).error, ResponseError::InconsistentGroupProtocol.code(), "no protocol in common");
    let t = h.join("s", "stranger", None, 5);
    assert_eq!(h.join_reply(t).error, ResponseError::UnknownMemberId.code());
    let _ = a;
}

#[test]
fn group_max_size() {
    let mut h = Harness::with(GroupConfig { max_size: 1, initial_rebalance_delay_ms: DELAY, ..GroupConfig::default() });
    h.stable_single("g");
    let t = h.join("g", "", None, 3);
    assert_eq!(h.join_reply(t).error, ResponseError::GroupMaxSizeReached.code());
    assert_eq!(h.join_reply(t).member_id, "");
}

#[test]
fn pending_members_are_bounded() {
    let mut h = Harness::with(GroupConfig { max_pending_members: 2, initial_rebalance_delay_ms: DELAY, ..GroupConfig::default() });
    for _ in 0..2 {
        let t = h.join("g", "", None, 4);
        assert_eq!(h.join_reply(t).error, ResponseError::MemberIdRequired.code());
    }
    let t = h.join("g", "", None, 4);
    assert_eq!(h.join_reply(t).error, ResponseError::GroupMaxSizeReached.code());
    assert_eq!(h.join_reply(t).member_id, "");
    // Another group is not affected.
    let t = h.join("other", "", None, 4);
    assert_eq!(h.join_reply(t).error, ResponseError::MemberIdRequired.code());
}

#[test]
fn groups_per_partition_are_bounded() {
    let mut h = Harness::with(GroupConfig { max_groups: 2, initial_rebalance_delay_ms: DELAY, ..GroupConfig::default() });
    h.stable_single("a");
    assert_eq!(h.commit("simple", "", -1, 8, &[("t", 0, 5)]), vec![0]);
    let t = h.join("c", "", None, 4);
    assert_eq!(h.join_reply(t).error, ResponseError::ThrottlingQuotaExceeded.code());
    assert_eq!(h.commit("simple-2", "", -1, 8, &[("t", 0, 5)]), vec![ResponseError::ThrottlingQuotaExceeded.code()]);
    // The groups that exist keep working.
    assert_eq!(h.commit("simple", "", -1, 8, &[("t", 0, 6)]), vec![0]);
    let t = h.join("a", "", None, 4);
    assert_eq!(h.join_reply(t).error, ResponseError::MemberIdRequired.code());
}

#[test]
fn sync_errors() {
    let mut h = Harness::new();
    let t = h.sync("missing", "m", 1, vec![]);
    assert_eq!(h.sync_reply(t).error, ResponseError::UnknownMemberId.code());
    let (a, gen) = h.stable_single("g");
    let t = h.sync("g", &a, gen + 5, vec![]);
    assert_eq!(h.sync_reply(t).error, ResponseError::IllegalGeneration.code());
    let t = h.sync("g", "nobody", gen, vec![]);
    assert_eq!(h.sync_reply(t).error, ResponseError::UnknownMemberId.code());
    let token = h.token();
    h.state.sync(
        h.now,
        SyncRequest {
            group_id: "g".into(),
            generation: gen,
            member_id: a.clone(),
            instance_id: None,
            protocol_type: Some("connect".into()),
            protocol_name: None,
            assignments: vec![],
        },
        token,
    );
    h.settle();
    assert_eq!(h.sync_reply(token).error, ResponseError::InconsistentGroupProtocol.code());
    // Stable: a repeated sync returns the stored assignment.
    let t = h.sync("g", &a, gen, vec![]);
    assert_eq!(&h.sync_reply(t).assignment[..], b"assignment");
    // PreparingRebalance (a newcomer joined): REBALANCE_IN_PROGRESS.
    h.join_new("g");
    let t = h.sync("g", &a, gen, vec![]);
    assert_eq!(h.sync_reply(t).error, ResponseError::RebalanceInProgress.code());
}

#[test]
fn a_failed_assignment_write_rebalances() {
    let mut h = Harness::new();
    let (id, token) = h.join_new("g");
    h.advance_to(DELAY);
    let gen = h.join_reply(token).generation;
    h.hold_appends = true;
    let t = h.sync("g", &id, gen, vec![(id.clone(), Bytes::from_static(b"x"))]);
    assert!(!h.answered(t), "answered only after the write");
    let append = h.held.pop().unwrap();
    h.state.appended(h.now, append, Some(ResponseError::NotCoordinator));
    h.settle();
    assert_eq!(h.sync_reply(t).error, ResponseError::NotCoordinator.code());
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
}

/// An assignment too large for the coordinator's log (refused by the shell before it is
/// proposed) fails the SyncGroup with UNKNOWN_SERVER_ERROR, as Kafka's coordinator does, and the
/// group rebalances; may_split says the write is atomic, and its bound is the coordinator's own,
/// not a user topic's batch.
#[test]
fn an_assignment_too_large_to_write_fails_the_sync_with_unknown_server_error() {
    let mut h = Harness::new();
    let (id, token) = h.join_new("g");
    h.advance_to(DELAY);
    let gen = h.join_reply(token).generation;
    h.hold_appends = true;
    let t = h.sync("g", &id, gen, vec![(id.clone(), Bytes::from(vec![0u8; 2 << 20]))]);
    let append = h.held.pop().unwrap();
    assert!(!h.state.may_split(append), "a group's assignment is written whole or not at all");
    assert_eq!(h.state.atomic_bound(append), h.state.config.max_group_batch_bytes);
    assert!(h.state.config.max_group_batch_bytes > 2 << 20, "2 MiB of group metadata is stored");
    h.state.appended(h.now, append, Some(ResponseError::RecordListTooLarge));
    h.settle();
    assert_eq!(h.sync_reply(t).error, ResponseError::UnknownServerError.code());
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
}

#[test]
fn heartbeat_errors() {
    let mut h = Harness::new();
    assert_eq!(h.heartbeat("", "m", 1, None), ResponseError::InvalidGroupId.code());
    assert_eq!(h.heartbeat("missing", "m", 1, None), ResponseError::UnknownMemberId.code());
    let (a, gen) = h.stable_single("g");
    assert_eq!(h.heartbeat("g", &a, gen, None), NONE);
    assert_eq!(h.heartbeat("g", &a, gen + 1, None), ResponseError::IllegalGeneration.code());
    assert_eq!(h.heartbeat("g", "x", gen, None), ResponseError::UnknownMemberId.code());
    assert_eq!(h.heartbeat("g", &a, gen, Some("not-registered")), ResponseError::UnknownMemberId.code());
}

#[test]
fn leave_group() {
    let mut h = Harness::new();
    let r = h.state.leave(0, "missing", &[("m".into(), None)]);
    assert_eq!((r.error, r.members[0]), (NONE, ResponseError::UnknownMemberId.code()));
    let (a, _) = h.stable_single("g");
    let r = h.state.leave(h.now, "g", &[(a.clone(), None), (a.clone(), None), ("x".into(), None)]);
    h.settle();
    assert_eq!(r.members, vec![NONE, ResponseError::UnknownMemberId.code(), ResponseError::UnknownMemberId.code()]);
    // The last member left: everyone remaining (nobody) has joined, so the rebalance completes
    // at once into Empty with a new generation.
    let g = &h.state.groups["g"];
    assert_eq!((g.state, g.generation), (GroupState::Empty, 2));
    let last = h.rebalances().pop().expect("the rebalance ended with the group empty");
    assert_eq!((last.cause, last.members_after, last.generation_after), (RebalanceCause::MemberLeft { members: vec![a] }, 0, 2));
}

// === static membership ===

#[test]
fn a_static_member_restart_keeps_its_assignment_without_a_rebalance() {
    let mut h = Harness::new();
    let t = h.join("g", "", Some("i1"), 5);
    h.advance_to(DELAY);
    let first = h.join_reply(t);
    h.sync("g", &first.member_id, first.generation, vec![(first.member_id.clone(), Bytes::from_static(b"p0"))]);
    assert_eq!(h.state_of("g"), GroupState::Stable);

    // Restart: same instance id, empty member id.
    let t = h.join("g", "", Some("i1"), 5);
    let again = h.join_reply(t);
    assert_eq!(again.error, NONE);
    assert_eq!(again.generation, first.generation, "no new generation");
    assert_ne!(again.member_id, first.member_id);
    assert_eq!(again.leader, first.member_id, "below v9 the old leader id is reported");
    assert_eq!(h.state_of("g"), GroupState::Stable);
    let s = h.sync("g", &again.member_id, again.generation, vec![]);
    assert_eq!(&h.sync_reply(s).assignment[..], b"p0");
    // The old incarnation is fenced.
    assert_eq!(h.heartbeat("g", &first.member_id, first.generation, Some("i1")), ResponseError::FencedInstanceId.code());

    // v9: the restarted leader learns it leads, with SkipAssignment.
    let t = h.join("g", "", Some("i1"), 9);
    let v9 = h.join_reply(t);
    assert!(v9.skip_assignment);
    assert_eq!(v9.leader, v9.member_id);
    assert_eq!(v9.members.len(), 1);
}

#[test]
fn leave_by_instance_id() {
    let mut h = Harness::new();
    let t = h.join("g", "", Some("i1"), 5);
    h.advance_to(DELAY);
    let r = h.join_reply(t);
    h.sync("g", &r.member_id, r.generation, vec![]);
    let out = h.state.leave(h.now, "g", &[("".into(), Some("i1".into())), ("".into(), Some("unknown".into()))]);
    assert_eq!(out.members, vec![NONE, ResponseError::UnknownMemberId.code()]);
    h.settle();
    // Named by instance id alone: an admin tool removed it (kafka-consumer-groups --delete-members).
    assert_eq!(h.causes().last(), Some(&RebalanceCause::AdminRemoved { members: vec![r.member_id.clone()] }));
    assert_eq!(h.rebalances().last().map(|r| r.cause.trigger()), Some("admin_action"));
}

// === offsets ===

#[test]
fn offset_commit_validation_order() {
    let mut h = Harness::new();
    // Outside any group: a simple group is created.
    assert_eq!(h.commit("simple", "", -1, 8, &[("t", 0, 5)]), vec![NONE]);
    assert_eq!(h.state.groups["simple"].protocol_type, None);
    // Missing group with a generation: ILLEGAL_GENERATION below v9, GROUP_ID_NOT_FOUND from v9.
    assert_eq!(h.commit("nope", "m", 1, 8, &[("t", 0, 5)]), vec![ResponseError::IllegalGeneration.code()]);
    assert_eq!(h.commit("nope", "m", 1, 9, &[("t", 0, 5)]), vec![ResponseError::GroupIdNotFound.code()]);

    let (a, gen) = h.stable_single("g");
    assert_eq!(h.commit("g", &a, gen, 8, &[("t", 0, 10), ("t", 1, 20)]), vec![NONE, NONE]);
    assert_eq!(h.commit("g", &a, gen + 1, 8, &[("t", 0, 11)]), vec![ResponseError::IllegalGeneration.code()]);
    assert_eq!(h.commit("g", "x", gen, 8, &[("t", 0, 11)]), vec![ResponseError::UnknownMemberId.code()]);
    assert_eq!(h.commit("g", "", -1, 8, &[("t", 0, 11)]), vec![ResponseError::UnknownMemberId.code()], "anonymous commit to a live group");
    // PreparingRebalance (a newcomer joined): accepted with the old generation, so eager
    // consumers can commit while revoking.
    let (_, newcomer) = h.join_new("g");
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
    assert_eq!(h.commit("g", &a, gen, 8, &[("t", 0, 12)]), vec![NONE]);
    // a rejoins: everyone joined, CompletingRebalance: REBALANCE_IN_PROGRESS.
    h.join("g", &a, None, 5);
    assert_eq!(h.join_reply(newcomer).generation, gen + 1);
    assert_eq!(h.commit("g", &a, gen + 1, 8, &[("t", 0, 13)]), vec![ResponseError::RebalanceInProgress.code()]);

    let fetched = h.state.fetch_offsets("g", Some(&[("t".to_string(), vec![0, 1, 2])]));
    let offsets: Vec<i64> = fetched[0].1.iter().map(|p| p.1).collect();
    assert_eq!(offsets, vec![12, 20, -1]);
    let all = h.state.fetch_offsets("g", None);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].1.len(), 2);
    let unknown = h.state.fetch_offsets("unknown", Some(&[("t".to_string(), vec![0])]));
    assert_eq!(unknown[0].1[0], (0, -1, -1, String::new()));
}

#[test]
fn offset_metadata_limit_is_per_partition() {
    let mut h = Harness::new();
    let token = h.token();
    let long = "é".repeat(4097);
    h.state.commit(
        0,
        CommitRequest {
            group_id: "g".into(),
            generation: -1,
            member_id: "".into(),
            instance_id: None,
            version: 8,
            retention_ms: -1,
            offsets: vec![
                CommitOffset { topic: "t".into(), partition: 0, offset: 1, leader_epoch: -1, metadata: Some(long), commit_timestamp: None },
                CommitOffset {
                    topic: "t".into(),
                    partition: 1,
                    offset: 1,
                    leader_epoch: 3,
                    metadata: Some("é".repeat(4096)),
                    commit_timestamp: None,
                },
            ],
        },
        token,
        &super::consumer_tests::Topics::default(),
    );
    h.settle();
    assert_eq!(h.replies[&token], Response::Commit(vec![ResponseError::OffsetMetadataTooLarge.code(), NONE]));
}

#[test]
fn offset_delete_and_delete_groups() {
    let mut h = Harness::new();
    assert_eq!(h.state.delete_offsets("missing", &[]), Err(ResponseError::GroupIdNotFound));
    h.commit("simple", "", -1, 8, &[("t", 0, 5), ("u", 0, 6)]);
    assert_eq!(h.state.delete_offsets("simple", &[("t".into(), vec![0, 9])]), Ok(vec![vec![NONE, NONE]]));
    h.settle();
    assert_eq!(h.state.fetch_offsets("simple", None).len(), 1);

    let (a, gen) = h.stable_single("live");
    h.commit("live", &a, gen, 8, &[("t", 0, 1)]);
    let token = h.token();
    h.state.delete_groups(h.now, &["live".into(), "simple".into(), "missing".into()], token);
    h.settle();
    assert_eq!(
        h.replies[&token],
        Response::DeleteGroups(vec![ResponseError::NonEmptyGroup.code(), NONE, ResponseError::GroupIdNotFound.code()])
    );
    assert!(!h.state.groups.contains_key("simple"));
    assert!(matches!(h.log.last(), Some(GroupRecord::Group { value: None, .. })));
}

#[test]
fn offsets_expire_after_retention() {
    let mut h = Harness::with(GroupConfig { offsets_retention_ms: 1_000, ..GroupConfig::default() });
    h.commit("simple", "", -1, 8, &[("t", 0, 5)]);
    h.now = 500;
    h.commit("simple", "", -1, 8, &[("t", 1, 5)]);
    h.now = 1_200;
    assert_eq!(h.state.expire_offsets(h.now), 1);
    h.now = 1_600;
    assert_eq!(h.state.expire_offsets(h.now), 1);
    h.settle();
    assert!(!h.state.groups.contains_key("simple"), "an Empty group without offsets is deleted");
}

// === durability ===

#[test]
fn replaying_the_log_restores_groups_and_offsets() {
    let mut h = Harness::new();
    let (a, gen) = h.stable_single("g");
    h.commit("g", &a, gen, 8, &[("t", 0, 42)]);
    h.commit("simple", "", -1, 8, &[("t", 3, 7)]);
    let mut restored = CoordinatorState::new(GroupConfig::default());
    for record in h.log.clone() {
        // Through the byte encoding, as the log stores them.
        let decoded = GroupRecord::decode(&record.key(), record.value().as_deref()).unwrap().unwrap();
        restored.replay(decoded, 99);
    }
    let g = &restored.groups["g"];
    assert_eq!((g.state, g.generation, g.leader.as_deref()), (GroupState::Stable, gen, Some(a.as_str())));
    assert_eq!(&g.members[&a].assignment[..], b"assignment");
    assert_eq!(restored.fetch_offsets("g", None)[0].1[0].1, 42);
    assert_eq!(restored.fetch_offsets("simple", None)[0].1[0].1, 7);
    // A loaded member heartbeats with its generation and is kept.
    restored.start_sessions(100);
    let hb = HeartbeatRequest { group_id: "g".into(), generation: gen, member_id: a.clone(), instance_id: None };
    assert_eq!(restored.heartbeat(101, &hb), NONE);
}

#[test]
fn list_and_describe() {
    let mut h = Harness::new();
    let (a, _) = h.stable_single("g");
    h.commit("simple", "", -1, 8, &[("t", 0, 1)]);
    let all = h.state.list_groups(&[], &[]);
    assert_eq!(all.len(), 2);
    assert_eq!(h.state.list_groups(&["stable".into()], &[]).len(), 1);
    assert_eq!(h.state.list_groups(&[], &["consumer".into()]).len(), 0);
    let d = h.state.describe_group("g").unwrap();
    assert_eq!((d.state, d.protocol_data.as_str()), ("Stable", "range"));
    assert_eq!(&d.members[0].assignment[..], b"assignment");
    assert_eq!(d.members[0].member_id, a);
    assert!(h.state.describe_group("nope").is_none());
}

#[test]
fn describe_outside_stable_gives_assignments_without_metadata() {
    let mut h = Harness::new();
    let (a, _) = h.stable_single("g");
    let (b, _) = h.join_new("g");
    assert_eq!(h.state_of("g"), GroupState::PreparingRebalance);
    let d = h.state.describe_group("g").unwrap();
    assert_eq!((d.state, d.protocol_data.as_str()), ("PreparingRebalance", ""));
    let member = |id: &str| d.members.iter().find(|m| m.member_id == id).unwrap().clone();
    // As Kafka 4: the last synced assignment stays visible; metadata only once Stable.
    assert_eq!((&member(&a).assignment[..], &member(&a).metadata[..]), (&b"assignment"[..], &b""[..]));
    assert!(member(&b).assignment.is_empty());
}

/// Strings stored with a 16-bit length in the group's record are refused when longer, with
/// INVALID_REQUEST, before anything is created (a cut string would corrupt the record).
#[test]
fn a_string_too_long_for_the_group_record_is_refused() {
    let mut h = Harness::new();
    let long = "p".repeat(40_000);
    for (protocol_type, protocol) in [(long.as_str(), "range"), ("consumer", long.as_str())] {
        let token = h.token();
        let request = JoinRequest {
            group_id: "g".into(),
            member_id: String::new(),
            instance_id: None,
            protocol_type: protocol_type.into(),
            protocols: vec![(protocol.into(), Bytes::from_static(b"sub"))],
            session_timeout_ms: SESSION,
            rebalance_timeout_ms: REBALANCE,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            version: 5,
        };
        h.state.join(h.now, request, token, &super::consumer_tests::Topics::default());
        h.settle();
        assert_eq!(h.join_reply(token).error, ResponseError::InvalidRequest.code());
    }
    assert!(h.state.groups.is_empty(), "nothing was created");
    assert!(h.log.is_empty());
}

/// A retention time at the end of i64 (OffsetCommit v2-v4) saturates instead of overflowing.
#[test]
fn an_extreme_retention_time_saturates() {
    let mut h = Harness::new();
    let token = h.token();
    let request = CommitRequest {
        group_id: "g".into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        version: 2,
        retention_ms: i64::MAX,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp: None,
        }],
    };
    h.now = 1_000;
    h.state.commit(h.now, request, token, &super::consumer_tests::Topics::default());
    h.settle();
    assert!(matches!(h.replies.get(&token), Some(Response::Commit(codes)) if codes == &vec![NONE]));
    match &h.log[..] {
        [GroupRecord::Offset { value: Some(v), .. }] => assert_eq!(v.expire_timestamp, Some(i64::MAX)),
        other => panic!("expected one offset record, got {other:?}"),
    }
}

/// OffsetCommit v1 stores the commit time it carries (-1: the time it arrived), which offset
/// expiration then measures from.
#[test]
fn an_offset_commit_v1_keeps_its_commit_time() {
    let mut h = Harness::new();
    h.now = 5_000_000;
    for (timestamp, stored) in [(Some(1_234), 1_234), (Some(-1), 5_000_000), (None, 5_000_000)] {
        let token = h.token();
        let offset =
            CommitOffset { topic: "t".into(), partition: 0, offset: 5, leader_epoch: -1, metadata: None, commit_timestamp: timestamp };
        let request = CommitRequest {
            group_id: "g".into(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            version: 1,
            retention_ms: -1,
            offsets: vec![offset],
        };
        h.log.clear();
        h.state.commit(h.now, request, token, &super::consumer_tests::Topics::default());
        h.settle();
        assert!(matches!(h.replies.get(&token), Some(Response::Commit(codes)) if codes == &vec![NONE]));
        match &h.log[..] {
            [GroupRecord::Offset { value: Some(v), .. }] => {
                assert_eq!((v.commit_timestamp, v.expire_timestamp), (stored, None), "commit timestamp {timestamp:?}")
            }
            other => panic!("expected one offset record, got {other:?}"),
        }
    }
}

/// OffsetCommit v0 names no member or generation: it is stored whatever the group's members,
/// and makes a simple group where there is none.
#[test]
fn an_offset_commit_v0_checks_no_membership() {
    let mut h = Harness::new();
    let (member, generation) = h.stable_single("g");
    assert_eq!(h.commit("g", "", -1, 2, &[("t", 0, 1)]), vec![ResponseError::UnknownMemberId.code()]);
    assert_eq!(h.commit("g", "", -1, 0, &[("t", 0, 1)]), vec![NONE]);
    assert_eq!(h.state_of("g"), GroupState::Stable, "the live group is untouched");
    assert_eq!(h.commit("g", &member, generation, 1, &[("t", 1, 2)]), vec![NONE]);
    assert_eq!(h.commit("g", &member, generation + 1, 1, &[("t", 1, 2)]), vec![ResponseError::IllegalGeneration.code()]);
    assert_eq!(h.commit("new", "", -1, 0, &[("t", 0, 9)]), vec![NONE]);
    assert_eq!(h.state_of("new"), GroupState::Empty);
    let fetched = h.state.fetch_offsets("g", None);
    assert_eq!(fetched, vec![("t".to_string(), vec![(0, 1, -1, String::new()), (1, 2, -1, String::new())])]);
}

/// A consumer-protocol assignment (v0) of one topic's partitions.
fn assignment_of(topic: &str, partitions: &[i32]) -> Bytes {
    let mut b = vec![0, 0, 0, 0, 0, 1];
    b.extend((topic.len() as i16).to_be_bytes());
    b.extend(topic.as_bytes());
    b.extend((partitions.len() as i32).to_be_bytes());
    for p in partitions {
        b.extend(p.to_be_bytes());
    }
    b.extend((-1i32).to_be_bytes());
    Bytes::from(b)
}

struct Facts;

impl super::inspect::PartitionFacts for Facts {
    fn end_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        (topic == "t" && partition == 0).then_some(9)
    }
    fn topic_name(&self, _: uuid::Uuid) -> Option<String> {
        None
    }
}

#[test]
fn the_members_slowest_to_sync_are_named_and_the_group_is_shown_whole() {
    use super::events::MemberStep;
    use super::inspect::{detail, overviews, Coordinator};
    use super::rebalances::{RebalanceHistory, SlowMember};

    let mut h = Harness::new();
    let (a, _) = h.stable_single("g");
    let start = h.now;
    let (b, _) = h.join_new("g");
    h.advance_to(start + 700);
    let ta = h.join("g", &a, None, 5);
    let (generation, leader) = (h.join_reply(ta).generation, h.join_reply(ta).leader.clone());
    let follower = if leader == a { b.clone() } else { a.clone() };
    h.sync("g", &follower, generation, vec![]);
    h.advance_to(start + 900);
    h.sync("g", &leader, generation, vec![(a.clone(), assignment_of("t", &[0])), (b.clone(), assignment_of("t", &[1]))]);
    assert_eq!(h.state_of("g"), GroupState::Stable);
    let done = h.rebalances().pop().expect("the join ended");
    assert_eq!(
        done.slowest,
        vec![
            SlowMember { member: leader.clone(), step: MemberStep::Synced, after_ms: 900 },
            SlowMember { member: follower.clone(), step: MemberStep::Synced, after_ms: 700 },
        ]
    );
    assert_eq!((done.join_ms, done.sync_ms, done.total_ms), (Some(700), Some(200), 900));

    assert_eq!(h.commit("g", &a, generation, 8, &[("t", 0, 5), ("t", 1, 7)]), vec![NONE, NONE]);
    let mut history = RebalanceHistory::default();
    h.rebalances().into_iter().for_each(|r| history.record(r));
    let at = Coordinator { partition: 3, node: 0 };
    let g = detail(&h.state, &history, "g", &Facts, at).expect("the group exists");
    assert_eq!((g.overview.kind, g.overview.state, g.overview.generation, g.overview.members), ("classic", "Stable", generation, 2));
    assert_eq!((g.overview.coordinator_partition, g.overview.lag_sum), (3, Some(4)));
    let assigned: Vec<(String, Vec<i32>)> =
        g.members.iter().flat_map(|m| m.assignment.iter().map(|t| (m.member_id.clone(), t.partitions.clone()))).collect();
    assert!(assigned.contains(&(a.clone(), vec![0])) && assigned.contains(&(b.clone(), vec![1])), "{assigned:?}");
    let [p0, p1] = &g.offsets[..] else { panic!("two offsets: {:?}", g.offsets) };
    assert_eq!(
        (p0.partition, p0.committed_offset, p0.log_end_offset, p0.lag, p0.owner.as_deref()),
        (0, 5, Some(9), Some(4), Some(a.as_str()))
    );
    assert_eq!((p1.partition, p1.committed_offset, p1.log_end_offset, p1.lag, p1.owner.as_deref()), (1, 7, None, None, Some(b.as_str())));
    let triggers: Vec<&str> = g.rebalances.iter().map(|r| r.trigger).collect();
    assert_eq!(triggers, vec!["group_created", "member_joined"]);
    assert_eq!(g.rebalances[1].trigger_members, vec![b.clone()]);
    assert!(detail(&h.state, &history, "nope", &Facts, at).is_none());
    assert_eq!(overviews(&h.state, &Facts, at).iter().map(|o| o.group.as_str()).collect::<Vec<_>>(), vec!["g"]);
}
