//! Online migration between the classic and the consumer protocol (§6.10), as a pure function
//! of requests and time: classic clients and KIP-848 clients in one group, every partition owned
//! by at most one of them at every step.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::ResponseError;

use super::consumer_group::TopicView;
use super::consumer_protocol;
use super::consumer_tests::Harness;
use super::outbox::Response;
use super::records::GroupRecord;
use super::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use super::state::CoordinatorState;
use crate::config::MigrationPolicy;

const NONE: i16 = 0;
const TOPIC: &str = "orders";

/// Partitions by topic name, as a classic client holds them.
type Owned = Vec<(String, Vec<i32>)>;

/// A ConsumerProtocolSubscription v1: the topics and the partitions the member owns.
fn subscription(topics: &[&str], owned: &Owned) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.put_i32(owned.len() as i32);
    for (t, ps) in owned {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.freeze()
}

/// A classic client (cooperative: it keeps its partitions across re-joins and reports them).
#[derive(Debug, Clone, Default)]
struct Classic {
    id: String,
    generation: i32,
    owned: Owned,
}

struct Mixed {
    h: Harness,
    classic: HashMap<String, Classic>,
    next_token: u64,
}

impl Mixed {
    fn new() -> Mixed {
        let mut h = Harness::new();
        h.topics.add(TOPIC, 4);
        Mixed { h, classic: HashMap::new(), next_token: 1000 }
    }

    fn reply(&mut self, token: u64) -> Option<Response> {
        let at = self.h.replies.iter().position(|(t, _)| *t == token)?;
        Some(self.h.replies.remove(at).1)
    }

    fn join_request(&self, name: &str, owned: &Owned) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: self.classic.get(name).map(|c| c.id.clone()).unwrap_or_default(),
            instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![("cooperative-sticky".into(), subscription(&[TOPIC], owned))],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            client_id: name.into(),
            client_host: "/h".into(),
            version: 3,
        }
    }

    /// Sends JoinGroup; the answer if it came at once.
    fn send_join(&mut self, name: &str) -> (u64, Option<JoinResult>) {
        let owned = self.classic.get(name).map(|c| c.owned.clone()).unwrap_or_default();
        let request = self.join_request(name, &owned);
        self.next_token += 1;
        let token = self.next_token;
        let Mixed { h, .. } = self;
        h.state.join(h.now, request, token, &h.topics);
        h.settle();
        let answer = match self.reply(token) {
            Some(Response::Join(r)) => Some(r),
            _ => None,
        };
        if let Some(r) = &answer {
            if r.error == NONE {
                let c = self.classic.entry(name.to_string()).or_default();
                c.id = r.member_id.clone();
                c.generation = r.generation;
            }
        }
        (token, answer)
    }

    fn sync(&mut self, name: &str, assignments: Vec<(String, Bytes)>) -> SyncResult {
        let c = &self.classic[name];
        let request = SyncRequest {
            group_id: "g".into(),
            generation: c.generation,
            member_id: c.id.clone(),
            instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("cooperative-sticky".into()),
            assignments,
        };
        self.next_token += 1;
        let token = self.next_token;
        self.h.state.sync(self.h.now, request, token);
        self.h.settle();
        match self.reply(token) {
            Some(Response::Sync(r)) => {
                if r.error == NONE {
                    // Cooperative: drop what is no longer assigned, take what is.
                    let (partitions, _) = consumer_protocol::assignment(&r.assignment).expect("an assignment");
                    self.classic.get_mut(name).unwrap().owned = partitions;
                }
                r
            }
            other => panic!("no SyncGroup answer: {other:?}"),
        }
    }

    fn heartbeat(&mut self, name: &str) -> i16 {
        let c = &self.classic[name];
        let request =
            super::classic::HeartbeatRequest { group_id: "g".into(), generation: c.generation, member_id: c.id.clone(), instance_id: None };
        let code = self.h.state.heartbeat(self.h.now, &request);
        self.h.settle();
        code
    }

    /// A classic member's turn: heartbeat, and re-join and sync when told to.
    fn classic_turn(&mut self, name: &str) {
        if self.heartbeat(name) == NONE {
            return;
        }
        let (_, answer) = self.send_join(name);
        let answer = answer.expect("a classic member of a consumer group is answered at once");
        assert_eq!(answer.error, NONE, "re-join of {name}");
        assert!(answer.leader.is_empty() && answer.members.is_empty(), "nobody runs a client-side assignor");
        let result = self.sync(name, Vec::new());
        assert!(result.error == NONE || result.error == ResponseError::RebalanceInProgress.code(), "sync of {name}: {result:?}");
    }

    /// Every member takes turns until the consumer group is Stable with every member at its
    /// epoch, checking after each turn that no partition has two owners.
    fn converge(&mut self) {
        for _ in 0..30 {
            let classic: Vec<String> = self.classic.keys().cloned().collect();
            for name in &classic {
                self.classic_turn(name);
                self.check_exclusive();
            }
            let consumers: Vec<String> = self.h_members();
            for m in &consumers {
                self.h.beat(m);
                self.check_exclusive();
            }
            let g = &self.h.state.consumer_groups["g"];
            let settled = g.members.values().all(|m| m.epoch == g.group_epoch && m.state == super::consumer_group::MemberState::Stable);
            if g.state_name() == "Stable" && settled && classic.iter().all(|n| self.classic[n].generation == g.group_epoch) {
                return;
            }
        }
        panic!("did not converge: {:?}", self.h.state.consumer_groups["g"].state_name());
    }

    /// Consumer-protocol members the harness drives.
    fn h_members(&self) -> Vec<String> {
        let Some(g) = self.h.state.consumer_groups.get("g") else { return Vec::new() };
        g.members.values().filter(|m| m.classic.is_none()).map(|m| m.id.clone()).collect()
    }

    /// Every partition owned by at most one member, classic or not.
    fn check_exclusive(&self) {
        let id = self.h.topics.by_name(TOPIC).expect("the topic").0;
        let mut seen: HashMap<i32, String> = HashMap::new();
        let consumer_owned = self.h_members().into_iter().map(|m| {
            let ps: Vec<i32> = self.h.owned.get(&m).and_then(|o| o.get(&id)).map(|s| s.iter().copied().collect()).unwrap_or_default();
            (m, ps)
        });
        let classic_owned = self.classic.iter().map(|(n, c)| (n.clone(), c.owned.iter().flat_map(|(_, ps)| ps.clone()).collect()));
        for (member, ps) in consumer_owned.chain(classic_owned) {
            for p in ps {
                if let Some(other) = seen.insert(p, member.clone()) {
                    panic!("partition {p} owned by {member} and {other}");
                }
            }
        }
    }

    /// Partitions owned across all members.
    fn owned_count(&self) -> usize {
        let id = self.h.topics.by_name(TOPIC).expect("the topic").0;
        let consumer: usize = self.h_members().iter().map(|m| self.h.owned.get(m).and_then(|o| o.get(&id)).map_or(0, |s| s.len())).sum();
        consumer + self.classic.values().map(|c| c.owned.iter().map(|(_, ps)| ps.len()).sum::<usize>()).sum::<usize>()
    }

    /// A classic group of `names` at generation 1, partitions split by the leader.
    fn classic_group(&mut self, names: &[&str]) {
        let tokens: Vec<u64> = names.iter().map(|n| self.send_join(n).0).collect();
        self.h.advance_to(self.h.now + 10_000);
        let mut leader = None;
        for (name, token) in names.iter().zip(tokens) {
            let Some(Response::Join(r)) = self.reply(token) else { panic!("{name} not answered") };
            assert_eq!(r.error, NONE);
            let c = self.classic.entry(name.to_string()).or_default();
            c.id = r.member_id.clone();
            c.generation = r.generation;
            if r.leader == r.member_id {
                leader = Some(name.to_string());
            }
        }
        let leader = leader.expect("a leader");
        let per = 4 / names.len() as i32;
        let assignments: Vec<(String, Bytes)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let ps: Vec<i32> = (i as i32 * per..(i as i32 + 1) * per).collect();
                (self.classic[*n].id.clone(), consumer_protocol::write_assignment(&[(TOPIC.into(), ps)], 1))
            })
            .collect();
        assert_eq!(self.sync(&leader, assignments).error, NONE);
        for name in names.iter().filter(|n| **n != leader) {
            assert_eq!(self.sync(name, Vec::new()).error, NONE);
        }
        assert!(self.h.state.groups["g"].is(super::group::GroupState::Stable));
    }

    /// A consumer-protocol member joins.
    fn consumer_join(&mut self, member: &str) -> i16 {
        self.h.join(member, &[TOPIC]).error
    }
}

#[test]
fn a_rolling_upgrade_converts_the_group_and_keeps_partitions_exclusive() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.owned_count(), 4);

    // The first upgraded member converts the group: generation 1 becomes epoch 1, bumped by it.
    assert_eq!(m.consumer_join("c"), NONE);
    assert!(!m.h.state.groups.contains_key("g"));
    let g = &m.h.state.consumer_groups["g"];
    assert_eq!((g.members.len(), g.group_epoch), (3, 2));
    assert!(g.members.values().filter(|x| x.classic.is_some()).count() == 2);
    let tombstone = m.h.log.iter().position(|r| matches!(r, GroupRecord::Group { value: None, .. })).expect("classic tombstone");
    assert!(m.h.log[tombstone..].iter().any(|r| matches!(r, GroupRecord::ConsumerGroup { epoch: Some(1), .. })));
    m.check_exclusive();
    m.converge();
    assert_eq!(m.owned_count(), 4);
    let described = m.h.state.describe_consumer_group("g").unwrap();
    assert_eq!(described.members.iter().filter(|x| x.classic).count(), 2);
    assert_eq!(m.h.state.list_groups(&[], &[])[0].group_type, "consumer");
    assert!(m.h.state.describe_group("g").is_none(), "DescribeGroups sees no classic group");

    // The second classic member restarts with the consumer protocol.
    let b = m.classic.remove("b").unwrap();
    assert_eq!(m.h.state.leave(m.h.now, "g", &[(b.id.clone(), None)]).members, vec![NONE]);
    m.h.settle();
    assert_eq!(m.consumer_join("b2"), NONE);
    m.converge();
    assert_eq!(m.owned_count(), 4);

    // The last one too: a consumer group with no classic member left.
    let a = m.classic.remove("a").unwrap();
    m.h.state.leave(m.h.now, "g", &[(a.id, None)]);
    m.h.settle();
    assert_eq!(m.consumer_join("a2"), NONE);
    m.converge();
    assert!(m.h.state.consumer_groups["g"].members.values().all(|x| x.classic.is_none()));
}

#[test]
fn a_rollback_converts_the_group_back_when_the_last_consumer_member_leaves() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    m.converge();
    let epoch = m.h.state.consumer_groups["g"].group_epoch;
    let of_c: usize = m.h.state.consumer_groups["g"].target["c"].values().map(|ps| ps.len()).sum();
    assert!(of_c > 0);

    // c leaves (restarted back to classic): the group is classic again and rebalances.
    let mut leave = m.h.request("c", -1);
    leave.member_epoch = -1;
    assert_eq!(m.h.send(leave).error, NONE);
    assert!(!m.h.state.consumer_groups.contains_key("g"));
    let g = &m.h.state.groups["g"];
    assert_eq!((g.generation, g.state), (epoch, super::group::GroupState::PreparingRebalance));
    assert_eq!(g.members.len(), 2);
    let record = m.h.log.iter().rev().find(|r| matches!(r, GroupRecord::Group { value: Some(_), .. })).expect("a classic record");
    let GroupRecord::Group { value: Some(v), .. } = record else { unreachable!() };
    assert_eq!(v.generation, epoch);
    // Each member's assignment in the record is its target, in its own protocol version.
    let assigned: usize = v.members.iter().map(|x| consumer_protocol::assignment(&x.assignment).unwrap().0[0].1.len()).sum();
    assert_eq!(assigned, 4 - of_c, "c's partitions are unassigned until the rebalance");

    // The classic members re-join through the classic protocol.
    assert_eq!(m.heartbeat("a"), ResponseError::RebalanceInProgress.code());
    let (ta, parked) = m.send_join("a");
    assert!(parked.is_none(), "a waits for b");
    let (_, b) = m.send_join("b");
    let Some(Response::Join(a)) = m.reply(ta) else { panic!("a not answered") };
    for r in [a, b.expect("b completes the join phase")] {
        assert_eq!((r.error, r.generation), (NONE, epoch + 1));
    }
    assert!(m.h.state.groups["g"].is(super::group::GroupState::CompletingRebalance));
}

#[test]
fn the_policy_decides_which_conversions_happen() {
    for (policy, upgrades, downgrades) in [
        (MigrationPolicy::Bidirectional, true, true),
        (MigrationPolicy::Upgrade, true, false),
        (MigrationPolicy::Downgrade, false, true),
        (MigrationPolicy::Disabled, false, false),
    ] {
        let mut m = Mixed::new();
        m.h.state.consumer.migration_policy = policy;
        m.classic_group(&["a", "b"]);
        let mut r = m.h.request("c", 0);
        r.subscribed_names = Some(vec![TOPIC.into()]);
        r.owned = Some(Default::default());
        let answer = m.h.send(r);
        if !upgrades {
            assert_eq!(answer.error, ResponseError::GroupIdNotFound.code(), "{policy:?}");
            assert!(m.h.state.groups.contains_key("g"));
            continue;
        }
        assert_eq!(answer.error, NONE, "{policy:?}");
        m.h.absorb("c", &answer);
        m.converge();
        let mut leave = m.h.request("c", -1);
        leave.member_epoch = -1;
        m.h.send(leave);
        assert_eq!(m.h.state.groups.contains_key("g"), downgrades, "{policy:?}");
        assert_eq!(m.h.state.consumer_groups.contains_key("g"), !downgrades, "{policy:?}");
    }
    // KAFKA-20640: with migration disabled, no classic member joins a consumer group; under
    // `upgrade`, classic members still (re-)join.
    for (policy, code) in [(MigrationPolicy::Disabled, ResponseError::InconsistentGroupProtocol.code()), (MigrationPolicy::Upgrade, NONE)] {
        let mut m = Mixed::new();
        m.h.state.consumer.migration_policy = policy;
        assert_eq!(m.consumer_join("c"), NONE);
        assert_eq!(m.send_join("x").1.unwrap().error, code, "{policy:?}");
    }
}

#[test]
fn groups_that_cannot_convert_are_refused() {
    // Not the consumer embedded protocol (Kafka Connect's, say).
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    m.h.state.groups.get_mut("g").unwrap().protocol_type = Some("connect".into());
    let mut r = m.h.request("c", 0);
    r.subscribed_names = Some(vec![TOPIC.into()]);
    r.owned = Some(Default::default());
    assert_eq!(m.h.send(r.clone()).error, ResponseError::GroupIdNotFound.code());

    // An assignment with a client-side assignor's user data.
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    let g = m.h.state.groups.get_mut("g").unwrap();
    let member = g.members.values_mut().next().unwrap();
    let mut with_data = member.assignment.to_vec();
    with_data.truncate(with_data.len() - 4);
    with_data.extend_from_slice(&[0, 0, 0, 1, 7]);
    member.assignment = Bytes::from(with_data);
    assert_eq!(m.h.send(r.clone()).error, ResponseError::GroupIdNotFound.code());

    // More members than a consumer group may have.
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    m.h.state.consumer.max_size = 1;
    assert_eq!(m.h.send(r).error, ResponseError::GroupIdNotFound.code());
    assert!(m.h.state.groups["g"].is(super::group::GroupState::Stable));
}

#[test]
fn parked_requests_of_the_classic_group_are_told_to_rejoin() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    // a re-joins (a rebalance starts) and waits for b.
    let (token, answer) = m.send_join("a");
    assert!(answer.is_none(), "parked");
    assert_eq!(m.consumer_join("c"), NONE);
    let Some(Response::Join(r)) = m.reply(token) else { panic!("the parked JoinGroup is answered") };
    assert_eq!(r.error, ResponseError::RebalanceInProgress.code());
    m.converge();
    assert_eq!(m.owned_count(), 4);
}

#[test]
fn classic_members_of_a_consumer_group_are_checked_as_kafka_checks_them() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    m.converge();
    let a = m.classic["a"].clone();
    let hb = |m: &mut Mixed, member: &str, generation| {
        let request = super::classic::HeartbeatRequest { group_id: "g".into(), generation, member_id: member.into(), instance_id: None };
        m.h.state.heartbeat(m.h.now, &request)
    };
    assert_eq!(hb(&mut m, &a.id, a.generation), NONE);
    assert_eq!(hb(&mut m, &a.id, a.generation - 1), ResponseError::IllegalGeneration.code());
    assert_eq!(hb(&mut m, "nobody", a.generation), ResponseError::UnknownMemberId.code());
    let c_epoch = m.h.state.consumer_groups["g"].members["c"].epoch;
    assert_eq!(hb(&mut m, "c", c_epoch), ResponseError::UnknownMemberId.code(), "not classic");
    // Offsets: the epoch is the generation; a wrong one is ILLEGAL_GENERATION, v8 is fine.
    let commit = |m: &mut Mixed, generation| {
        let offset = super::offsets::CommitOffset {
            topic: TOPIC.into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp: None,
        };
        let request = super::offsets::CommitRequest {
            group_id: "g".into(),
            generation,
            member_id: a.id.clone(),
            instance_id: None,
            version: 8,
            retention_ms: -1,
            offsets: vec![offset],
        };
        m.next_token += 1;
        m.h.state.commit(m.h.now, request, m.next_token, &m.h.topics);
        m.h.settle();
        match m.reply(m.next_token) {
            Some(Response::Commit(codes)) => codes[0],
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(commit(&mut m, a.generation), NONE);
    assert_eq!(commit(&mut m, a.generation + 1), ResponseError::IllegalGeneration.code());
    // A JoinGroup with another protocol than the classic members speak.
    let mut request = m.join_request("x", &Vec::new());
    request.protocols = vec![("range".into(), subscription(&[TOPIC], &Vec::new()))];
    m.next_token += 1;
    m.h.state.join(m.h.now, request, m.next_token, &m.h.topics);
    m.h.settle();
    let Some(Response::Join(r)) = m.reply(m.next_token) else { panic!() };
    assert_eq!(r.error, ResponseError::InconsistentGroupProtocol.code());
    // v4+ dynamic members are asked for a member id first.
    let mut request = m.join_request("y", &Vec::new());
    request.version = 5;
    m.next_token += 1;
    m.h.state.join(m.h.now, request, m.next_token, &m.h.topics);
    m.h.settle();
    let Some(Response::Join(r)) = m.reply(m.next_token) else { panic!() };
    assert_eq!(r.error, ResponseError::MemberIdRequired.code());
    assert!(!r.member_id.is_empty());
}

#[test]
fn a_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    // b is told to re-join and never does: fenced after its rebalance timeout (20 s), while a
    // and c go on heartbeating.
    assert_eq!(m.heartbeat("b"), ResponseError::RebalanceInProgress.code());
    for t in (1..=25).map(|s| s * 1_000) {
        m.h.advance_to(m.h.now.max(t));
        m.classic_turn("a");
        m.h.beat("c");
    }
    assert!(!m.h.state.consumer_groups["g"].members.contains_key(&m.classic["b"].id));
    m.classic.remove("b");
    m.converge();
    assert_eq!(m.owned_count(), 4);
    // A member that joins but never syncs is fenced after its rebalance timeout too.
    let (_, answer) = m.send_join("d");
    assert_eq!(answer.unwrap().error, NONE);
    let d = m.classic["d"].id.clone();
    let start = m.h.now;
    for t in (1..=25).map(|s| start + s * 1_000) {
        m.h.advance_to(t);
        m.classic_turn("a");
        m.h.beat("c");
    }
    assert!(!m.h.state.consumer_groups["g"].members.contains_key(&d));
}

#[test]
fn a_converted_group_replays_from_its_records() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    m.converge();
    let replayed = replay(&m.h.log);
    let (before, after) = (&m.h.state.consumer_groups["g"], &replayed.consumer_groups["g"]);
    assert!(!replayed.groups.contains_key("g"));
    assert_eq!((after.group_epoch, after.assignment_epoch), (before.group_epoch, before.assignment_epoch));
    for (id, member) in &before.members {
        let again = &after.members[id];
        assert_eq!((&again.classic, &again.assigned, again.epoch), (&member.classic, &member.assigned, member.epoch));
    }
    // And back: the downgraded group replays as a classic group.
    let mut leave = m.h.request("c", -1);
    leave.member_epoch = -1;
    m.h.send(leave);
    let replayed = replay(&m.h.log);
    assert!(!replayed.consumer_groups.contains_key("g"));
    let g = &replayed.groups["g"];
    assert_eq!((g.members.len(), g.protocol_type.as_deref()), (2, Some("consumer")));
}

fn replay(log: &[GroupRecord]) -> CoordinatorState {
    let mut state = CoordinatorState::new(Default::default());
    for record in log {
        state.replay(record.clone(), 0);
    }
    state
}

#[test]
fn a_classic_static_member_replacing_the_last_consumer_member_turns_the_group_classic() {
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    // c, a static KIP-848 member, converts the group.
    let mut r = m.h.request("c", 0);
    r.instance_id = Some("pod-c".into());
    r.subscribed_names = Some(vec![TOPIC.into()]);
    r.owned = Some(Default::default());
    let answer = m.h.send(r);
    assert_eq!(answer.error, NONE);
    m.h.absorb("c", &answer);
    m.converge();
    // pod-c restarts with the classic protocol: the group is classic again and rebalances; the
    // new incarnation's JoinGroup waits for the others, as in any classic rebalance.
    let mut request = m.join_request("c-again", &Vec::new());
    request.instance_id = Some("pod-c".into());
    m.next_token += 1;
    let token = m.next_token;
    m.h.state.join(m.h.now, request, token, &m.h.topics);
    m.h.settle();
    assert!(!m.h.state.consumer_groups.contains_key("g"));
    let g = &m.h.state.groups["g"];
    assert!(g.is(super::group::GroupState::PreparingRebalance));
    assert_eq!(g.members.len(), 3);
    assert!(m.reply(token).is_none(), "parked until a and b re-join");
    let (_, first) = m.send_join("a");
    assert!(first.is_none());
    let (_, last) = m.send_join("b");
    let last = last.expect("the join phase completes");
    let Some(Response::Join(c)) = m.reply(token) else { panic!("the static member's join is answered") };
    assert_eq!((c.error, last.error, c.generation), (NONE, NONE, last.generation));

    // With a member that is not the last consumer-protocol one, it joins as a classic member.
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    let mut r = m.h.request("d", 0);
    r.instance_id = Some("pod-d".into());
    r.subscribed_names = Some(vec![TOPIC.into()]);
    r.owned = Some(Default::default());
    assert_eq!(m.h.send(r).error, NONE);
    let mut request = m.join_request("d-again", &Vec::new());
    request.instance_id = Some("pod-d".into());
    m.next_token += 1;
    m.h.state.join(m.h.now, request, m.next_token, &m.h.topics);
    m.h.settle();
    let g = &m.h.state.consumer_groups["g"];
    let d = &g.members[&g.static_members["pod-d"]];
    assert!(d.classic.is_some(), "pod-d is a classic member of the consumer group now");
}

#[test]
fn conversions_that_would_not_fit_are_not_made() {
    // Upgrade: the conversion's records must fit one batch, or the group stays classic.
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    m.h.state.config.max_group_batch_bytes = 200;
    let mut r = m.h.request("c", 0);
    r.subscribed_names = Some(vec![TOPIC.into()]);
    r.owned = Some(Default::default());
    assert_eq!(m.h.send(r).error, ResponseError::GroupIdNotFound.code());
    assert!(m.h.state.groups["g"].is(super::group::GroupState::Stable));

    // Downgrade: more classic members than groups.max_size allows stay in the consumer group.
    let mut m = Mixed::new();
    m.classic_group(&["a", "b"]);
    assert_eq!(m.consumer_join("c"), NONE);
    m.converge();
    m.h.state.config.max_size = 1;
    let mut leave = m.h.request("c", -1);
    leave.member_epoch = -1;
    assert_eq!(m.h.send(leave).error, NONE);
    let g = &m.h.state.consumer_groups["g"];
    assert_eq!((g.members.len(), m.h.state.groups.contains_key("g")), (2, false));
}
