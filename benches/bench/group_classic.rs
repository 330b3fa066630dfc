//! Simulated members of classic consumer groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup),
//! each one a task on the current `LocalSet`, sharing the connections of a [`Lanes`].
//!
//! A member behaves like the Java consumer with an eager assignor:
//!
//! 1. JoinGroup with an empty member id; MEMBER_ID_REQUIRED (79) hands it an id; JoinGroup again
//!    with that id (parked by the coordinator until the join phase ends).
//! 2. The leader decodes every member's ConsumerProtocolSubscription, assigns the partitions of
//!    the subscribed topics round-robin over the sorted member ids (Java's `roundrobin`), and
//!    sends the ConsumerProtocolAssignment bytes in its SyncGroup; followers send an empty
//!    SyncGroup. Every member decodes its assignment.
//! 3. Heartbeat every `heartbeat_interval` (the first one at a random point of the first
//!    interval, so members are not in lock-step); REBALANCE_IN_PROGRESS (27) or
//!    ILLEGAL_GENERATION (22) → back to 1 with the same id; UNKNOWN_MEMBER_ID (25) → back to 1
//!    with an empty id.
//!
//! The scenario driver ([`ClassicGroup`]) starts members, makes one leave or join, and waits
//! until every member has synced the same new generation; the [`Tracker`] keeps the timestamps
//! it needs for the breakdown of each rebalance.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    consumer_protocol_assignment, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest, JoinGroupRequest,
    LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::kafka::{error_name, topic_name};
use crate::mux::Lanes;

pub(crate) const MEMBER_ID_REQUIRED: i16 = 79;
pub(crate) const REBALANCE_IN_PROGRESS: i16 = 27;
pub(crate) const ILLEGAL_GENERATION: i16 = 22;
pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;

/// ConsumerProtocolSubscription / Assignment version the members write (Java writes 3).
const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// Protocol versions the simulated members prefer (negotiated down if the server serves less).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Versions {
    pub(crate) join: i16,
    pub(crate) sync: i16,
    pub(crate) heartbeat: i16,
    pub(crate) leave: i16,
}

impl Default for Versions {
    fn default() -> Self {
        // JoinGroup v5: MEMBER_ID_REQUIRED (v4+) and static-membership fields, what librdkafka
        // and kafka-python send; the others at what the Java 3.x/4.x client sends.
        Versions { join: 5, sync: 5, heartbeat: 4, leave: 5 }
    }
}

/// What every member of a classic group is configured with.
#[derive(Debug, Clone)]
pub(crate) struct MemberConfig {
    pub(crate) session_timeout_ms: i32,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) heartbeat_interval: Duration,
    /// Assignor (protocol) name; the leader always assigns round-robin.
    pub(crate) protocol: String,
    pub(crate) versions: Versions,
}

/// A classic group the scenario runs.
#[derive(Debug)]
pub(crate) struct GroupSpec {
    pub(crate) group_id: String,
    /// Subscribed topics and their partition counts.
    pub(crate) topics: Vec<(String, i32)>,
    pub(crate) member: MemberConfig,
    /// The JoinGroup metadata every member sends (ConsumerProtocolSubscription, v3).
    subscription: Bytes,
}

impl GroupSpec {
    pub(crate) fn new(group_id: String, topics: Vec<(String, i32)>, member: MemberConfig) -> Result<GroupSpec> {
        let subscription = encode_subscription(topics.iter().map(|(t, _)| t.as_str()))?;
        Ok(GroupSpec { group_id, topics, member, subscription })
    }

    pub(crate) fn partitions(&self) -> usize {
        self.topics.iter().map(|(_, p)| *p as usize).sum()
    }
}

/// A subscription as the Java client writes it: version prefix, then the v3 struct (topics, no
/// user data, no owned partitions — an eager member has revoked them before it joins —,
/// generation -1, no rack).
pub(crate) fn encode_subscription<'a>(topics: impl Iterator<Item = &'a str>) -> Result<Bytes> {
    let subscription = ConsumerProtocolSubscription::default()
        .with_topics(topics.map(|t| StrBytes::from_string(t.to_string())).collect())
        .with_generation_id(-1);
    let mut buf = BytesMut::new();
    buf.put_i16(CONSUMER_PROTOCOL_VERSION);
    subscription.encode(&mut buf, CONSUMER_PROTOCOL_VERSION)?;
    Ok(buf.freeze())
}

fn decode_subscription(bytes: &Bytes) -> Result<ConsumerProtocolSubscription> {
    if bytes.len() < 2 {
        bail!("subscription of {} bytes", bytes.len());
    }
    // Newer versions only append fields: read a newer one as the newest known.
    let version = i16::from_be_bytes([bytes[0], bytes[1]]).min(CONSUMER_PROTOCOL_VERSION);
    let mut body = bytes.slice(2..);
    ConsumerProtocolSubscription::decode(&mut body, version)
}

/// A member's assignment as the Java leader writes it (version prefix, v3 struct).
pub(crate) fn encode_assignment(partitions: &[(String, Vec<i32>)]) -> Result<Bytes> {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        partitions
            .iter()
            .map(|(topic, ps)| {
                consumer_protocol_assignment::TopicPartition::default().with_topic(topic_name(topic)).with_partitions(ps.clone())
            })
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(CONSUMER_PROTOCOL_VERSION);
    assignment.encode(&mut buf, CONSUMER_PROTOCOL_VERSION)?;
    Ok(buf.freeze())
}

/// Partitions in an assignment.
fn decode_assignment(bytes: &Bytes) -> Result<usize> {
    if bytes.len() < 2 {
        bail!("assignment of {} bytes (a consumer must get at least the version)", bytes.len());
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]).min(CONSUMER_PROTOCOL_VERSION);
    let mut body = bytes.slice(2..);
    let assignment = ConsumerProtocolAssignment::decode(&mut body, version)?;
    Ok(assignment.assigned_partitions.iter().map(|tp| tp.partitions.len()).sum())
}

/// The leader's work: round-robin over the sorted member ids, partitions in topic order.
fn round_robin(members: &[(String, Bytes)]) -> Result<Vec<SyncGroupRequestAssignment>> {
    let mut topics: Vec<String> = Vec::new();
    for (_, metadata) in members {
        for t in decode_subscription(metadata)?.topics {
            let t = t.to_string();
            if !topics.contains(&t) {
                topics.push(t);
            }
        }
    }
    topics.sort();
    let mut ids: Vec<&str> = members.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    let mut per_member: Vec<Vec<(String, Vec<i32>)>> = vec![Vec::new(); ids.len()];
    let mut next = 0usize;
    for topic in &topics {
        let partitions = TOPIC_PARTITIONS.with(|t| t.borrow().get(topic).copied()).ok_or_else(|| anyhow!("unknown topic {topic}"))?;
        for p in 0..partitions {
            let slot = &mut per_member[next % ids.len()];
            match slot.last_mut() {
                Some((t, ps)) if t == topic => ps.push(p),
                _ => slot.push((topic.clone(), vec![p])),
            }
            next += 1;
        }
    }
    ids.iter()
        .zip(per_member)
        .map(|(id, parts)| {
            Ok(SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_assignment(encode_assignment(&parts)?))
        })
        .collect()
}

thread_local! {
    /// Partition counts of the topics members may subscribe to (the leader's metadata: a real
    /// leader gets them from a Metadata request).
    static TOPIC_PARTITIONS: RefCell<HashMap<String, i32>> = RefCell::new(HashMap::new());
}

/// Makes topics known to the leaders' assignor.
pub(crate) fn register_topics(topics: &[(String, i32)]) {
    TOPIC_PARTITIONS.with(|t| {
        let mut t = t.borrow_mut();
        for (name, partitions) in topics {
            t.insert(name.clone(), *partitions);
        }
    });
}

/// What the driver asks a member to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Nothing,
    /// Rejoin now (the "told at once" variant of a rebalance).
    Rejoin,
    /// Stop at the next opportunity (without leaving).
    Stop,
}

/// Timestamps of one member, for the breakdown of a rebalance.
#[derive(Debug, Clone)]
struct Track {
    active: bool,
    member_id: String,
    generation: i32,
    cmd: Cmd,
    wake: Rc<Notify>,
    /// Latest JoinGroup sent with a member id (the one the coordinator parks).
    park_join_sent: Option<Instant>,
    /// First JoinGroup with a member id since the last reset (for the initial delay).
    first_park_join_sent: Option<Instant>,
    join_done: Option<(i32, Instant)>,
    leader: bool,
    sync_sent: Option<Instant>,
    synced: Option<(i32, Instant)>,
    partitions: usize,
    heartbeats: u64,
}

impl Track {
    fn new() -> Track {
        Track {
            active: true,
            member_id: String::new(),
            generation: -1,
            cmd: Cmd::Nothing,
            wake: Rc::new(Notify::new()),
            park_join_sent: None,
            first_park_join_sent: None,
            join_done: None,
            leader: false,
            sync_sent: None,
            synced: None,
            partitions: 0,
            heartbeats: 0,
        }
    }
}

/// Shared record of a group's members.
#[derive(Debug, Default)]
struct Tracker {
    tracks: RefCell<Vec<Track>>,
    /// Active members whose latest synced generation is the key.
    synced_per_generation: RefCell<HashMap<i32, usize>>,
    active: Cell<usize>,
    changed: Notify,
    failure: RefCell<Option<String>>,
}

impl Tracker {
    fn add(&self) -> usize {
        let mut tracks = self.tracks.borrow_mut();
        tracks.push(Track::new());
        self.active.set(self.active.get() + 1);
        tracks.len() - 1
    }

    fn with<T>(&self, idx: usize, f: impl FnOnce(&mut Track) -> T) -> T {
        f(&mut self.tracks.borrow_mut()[idx])
    }

    fn synced(&self, idx: usize, generation: i32, partitions: usize) {
        let now = Instant::now();
        let old = self.with(idx, |t| {
            let old = t.synced.map(|(g, _)| g);
            t.synced = Some((generation, now));
            t.partitions = partitions;
            t.generation = generation;
            old.filter(|_| t.active)
        });
        let mut counts = self.synced_per_generation.borrow_mut();
        if let Some(g) = old {
            *counts.entry(g).or_default() -= 1;
        }
        *counts.entry(generation).or_default() += 1;
        drop(counts);
        self.changed.notify_one();
    }

    fn deactivate(&self, idx: usize) {
        let synced = self.with(idx, |t| {
            let was = t.active;
            t.active = false;
            was.then_some(t.synced.map(|(g, _)| g))
        });
        if let Some(synced) = synced {
            self.active.set(self.active.get() - 1);
            if let Some(g) = synced {
                *self.synced_per_generation.borrow_mut().entry(g).or_default() -= 1;
            }
        }
        self.changed.notify_one();
    }

    fn fail(&self, idx: usize, e: anyhow::Error) {
        self.failure.borrow_mut().get_or_insert_with(|| format!("member {idx}: {e:#}"));
        self.changed.notify_one();
    }

    /// Waits until every active member has synced one generation newer than `after` (-1 for a
    /// new group: Kafka's first generation is 1, Tansu's 0).
    async fn wait_synced(&self, after: i32, deadline: Instant) -> Result<i32> {
        loop {
            if let Some(f) = self.failure.borrow().as_ref() {
                bail!("{f}");
            }
            let active = self.active.get();
            let done = self.synced_per_generation.borrow().iter().find(|&(&g, &n)| g > after && n == active && active > 0).map(|(&g, _)| g);
            if let Some(g) = done {
                return Ok(g);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, self.changed.notified()).await.is_err() {
                let counts = self.synced_per_generation.borrow().clone();
                bail!("timed out: {active} active members, synced per generation {counts:?}");
            }
        }
    }
}

/// A distinct, non-zero xorshift state for member `idx`.
pub(crate) fn member_seed(idx: usize) -> u64 {
    0x9e37_79b9_7f4a_7c15_u64 ^ (idx as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Small xorshift generator (heartbeat phases; no dependency needed).
pub(crate) fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

struct MemberCtx {
    idx: usize,
    /// Which lanes the member uses.
    slot: usize,
    spec: Rc<GroupSpec>,
    lanes: Rc<Lanes>,
    tracker: Rc<Tracker>,
}

async fn member_task(ctx: MemberCtx) {
    let (idx, tracker) = (ctx.idx, ctx.tracker.clone());
    if let Err(e) = member_loop(ctx).await {
        tracker.fail(idx, e);
    }
}

async fn member_loop(ctx: MemberCtx) -> Result<()> {
    let MemberCtx { idx, slot, spec, lanes, tracker } = ctx;
    let cfg = &spec.member;
    let fast = lanes.fast(slot).clone();
    let park = lanes.park(slot).clone();
    let join_v = fast.version::<JoinGroupRequest>(cfg.versions.join)?;
    let sync_v = fast.version::<SyncGroupRequest>(cfg.versions.sync)?;
    let hb_v = fast.version::<HeartbeatRequest>(cfg.versions.heartbeat)?;
    let group = GroupId(StrBytes::from_string(spec.group_id.clone()));
    let protocols = vec![JoinGroupRequestProtocol::default()
        .with_name(StrBytes::from_string(cfg.protocol.clone()))
        .with_metadata(spec.subscription.clone())];
    let wake = tracker.with(idx, |t| t.wake.clone());
    let mut rng = member_seed(idx);
    let mut member_id = String::new();
    let stopped = |tracker: &Tracker| tracker.with(idx, |t| t.cmd == Cmd::Stop);

    'rejoin: loop {
        // Whatever made the member rejoin, a pending "rejoin now" is served by this rejoin.
        tracker.with(idx, |t| {
            if t.cmd == Cmd::Rejoin {
                t.cmd = Cmd::Nothing;
            }
        });
        // 1. JoinGroup: MEMBER_ID_REQUIRED first, then the parked join.
        let joined = loop {
            if stopped(&tracker) {
                return Ok(());
            }
            let request = JoinGroupRequest::default()
                .with_group_id(group.clone())
                .with_session_timeout_ms(cfg.session_timeout_ms)
                .with_rebalance_timeout_ms(cfg.rebalance_timeout_ms)
                .with_member_id(StrBytes::from_string(member_id.clone()))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(protocols.clone());
            let lane = if member_id.is_empty() {
                &fast
            } else {
                let now = Instant::now();
                tracker.with(idx, |t| {
                    t.park_join_sent = Some(now);
                    t.first_park_join_sent.get_or_insert(now);
                });
                &park
            };
            let response = lane.call(join_v, &request).await?;
            match response.error_code {
                0 => break response,
                MEMBER_ID_REQUIRED => member_id = response.member_id.to_string(),
                UNKNOWN_MEMBER_ID => member_id.clear(),
                REBALANCE_IN_PROGRESS => {}
                code => bail!("JoinGroup: {}", error_name(code)),
            }
        };
        let generation = joined.generation_id;
        let leader = joined.leader.as_str() == member_id;
        tracker.with(idx, |t| {
            t.join_done = Some((generation, Instant::now()));
            t.leader = leader;
            t.member_id = member_id.clone();
        });

        // 2. SyncGroup; the leader computes the assignment.
        let assignments = if leader {
            let members: Vec<(String, Bytes)> = joined.members.iter().map(|m| (m.member_id.to_string(), m.metadata.clone())).collect();
            round_robin(&members).context("leader assignment")?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(group.clone())
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(joined.protocol_name.clone())
            .with_assignments(assignments);
        tracker.with(idx, |t| t.sync_sent = Some(Instant::now()));
        let synced = park.call(sync_v, &request).await?;
        match synced.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => continue 'rejoin,
            UNKNOWN_MEMBER_ID => {
                member_id.clear();
                continue 'rejoin;
            }
            code => bail!("SyncGroup: {}", error_name(code)),
        }
        let partitions = decode_assignment(&synced.assignment).context("member assignment")?;
        tracker.synced(idx, generation, partitions);

        // 3. Heartbeats until told otherwise.
        let interval = cfg.heartbeat_interval;
        let jitter = Duration::from_nanos(xorshift(&mut rng) % (interval.as_nanos().max(1) as u64));
        let mut next = tokio::time::Instant::now() + jitter;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => next += interval,
                _ = wake.notified() => {}
            }
            let cmd = tracker.with(idx, |t| std::mem::replace(&mut t.cmd, Cmd::Nothing));
            match cmd {
                Cmd::Stop => {
                    tracker.with(idx, |t| t.cmd = Cmd::Stop);
                    return Ok(());
                }
                Cmd::Rejoin => continue 'rejoin,
                Cmd::Nothing => {}
            }
            let request = HeartbeatRequest::default()
                .with_group_id(group.clone())
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(member_id.clone()));
            let response = fast.call(hb_v, &request).await?;
            tracker.with(idx, |t| t.heartbeats += 1);
            match response.error_code {
                0 => {}
                REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => continue 'rejoin,
                UNKNOWN_MEMBER_ID => {
                    member_id.clear();
                    continue 'rejoin;
                }
                code => bail!("Heartbeat: {}", error_name(code)),
            }
        }
    }
}

/// How the remaining members learn that a rebalance started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Discovery {
    /// From their next Heartbeat (REBALANCE_IN_PROGRESS), as real clients do.
    Heartbeat,
    /// The benchmark tells every member to rejoin at once: only the coordinator's part remains.
    Immediate,
}

/// The breakdown of one rebalance. Every duration is measured by the client (monotonic clock).
#[derive(Debug, Clone, Default)]
pub(crate) struct RebalanceTiming {
    pub(crate) members: usize,
    pub(crate) generation: i32,
    /// Event → every member synced the new generation.
    pub(crate) total: Duration,
    /// Event → the last member sent its (parked) JoinGroup: how long the members took to learn
    /// of the rebalance (the heartbeat interval bounds it).
    pub(crate) discovery: Duration,
    /// The last JoinGroup sent → the last JoinGroup response received.
    pub(crate) join: Duration,
    /// The leader's JoinGroup response → its SyncGroup sent: the client-side assignment.
    pub(crate) leader_assign: Duration,
    /// The leader's SyncGroup sent → the last SyncGroup response received.
    pub(crate) sync: Duration,
    /// For a start: the first parked JoinGroup → the first JoinGroup response (the initial
    /// rebalance delay as served).
    pub(crate) delay_served: Option<Duration>,
    /// Partitions in all members' assignments (a check: every partition exactly once).
    pub(crate) assigned_partitions: usize,
    pub(crate) requests: u64,
}

impl RebalanceTiming {
    /// What the coordinator and the wire took: everything but discovery and the leader's own
    /// assignment work.
    pub(crate) fn server_side(&self) -> Duration {
        self.total.saturating_sub(self.discovery).saturating_sub(self.leader_assign)
    }
}

/// One classic group driven by the benchmark.
pub(crate) struct ClassicGroup {
    spec: Rc<GroupSpec>,
    lanes: Rc<Lanes>,
    tracker: Rc<Tracker>,
    tasks: Vec<Option<JoinHandle<()>>>,
    /// Lane slots are `slot_base + member index`.
    slot_base: usize,
    generation: i32,
    /// For a start: t0 → first parked JoinGroup.
    pub(crate) first_park: Duration,
}

/// A group dropped without `stop` (a failed or timed-out scenario) takes its members with it:
/// they would otherwise go on loading the server under the next scenario.
impl Drop for ClassicGroup {
    fn drop(&mut self) {
        for task in self.tasks.iter_mut().filter_map(Option::take) {
            task.abort();
        }
    }
}

impl ClassicGroup {
    /// Starts `members` members at once.
    pub(crate) fn spawn(spec: Rc<GroupSpec>, lanes: Rc<Lanes>, members: usize, slot_base: usize) -> ClassicGroup {
        let mut group = ClassicGroup {
            spec,
            lanes,
            tracker: Rc::new(Tracker::default()),
            tasks: Vec::new(),
            slot_base,
            generation: 0,
            first_park: Duration::ZERO,
        };
        for _ in 0..members {
            group.add_member();
        }
        group
    }

    fn add_member(&mut self) -> usize {
        let idx = self.tracker.add();
        let ctx = MemberCtx {
            idx,
            slot: self.slot_base + idx,
            spec: self.spec.clone(),
            lanes: self.lanes.clone(),
            tracker: self.tracker.clone(),
        };
        self.tasks.push(Some(tokio::task::spawn_local(member_task(ctx))));
        idx
    }

    /// Starts `members` members and waits until all of them have synced one generation.
    pub(crate) async fn start(
        spec: Rc<GroupSpec>,
        lanes: Rc<Lanes>,
        members: usize,
        timeout: Duration,
    ) -> Result<(ClassicGroup, RebalanceTiming)> {
        let sent_before = lanes.requests_sent();
        let t0 = Instant::now();
        let mut group = ClassicGroup::spawn(spec, lanes, members, 0);
        let generation = group.tracker.wait_synced(-1, t0 + timeout).await?;
        let mut timing = group.timing(t0, generation);
        let first_park = group.tracker.tracks.borrow().iter().filter_map(|t| t.first_park_join_sent).min();
        let join_done =
            group.tracker.tracks.borrow().iter().filter_map(|t| t.join_done.filter(|(g, _)| *g == generation).map(|(_, at)| at)).min();
        if let (Some(park), Some(done)) = (first_park, join_done) {
            timing.delay_served = Some(done.saturating_duration_since(park));
            group.first_park = park.saturating_duration_since(t0);
        }
        timing.requests = group.lanes.requests_sent() - sent_before;
        group.generation = generation;
        Ok((group, timing))
    }

    /// Waits until a group started with [`ClassicGroup::spawn`] has synced.
    pub(crate) async fn wait_started(&mut self, deadline: Instant) -> Result<()> {
        self.generation = self.tracker.wait_synced(-1, deadline).await?;
        Ok(())
    }

    /// One member (a follower) leaves with LeaveGroup; the others rejoin.
    pub(crate) async fn leave_one(&mut self, discovery: Discovery, timeout: Duration) -> Result<RebalanceTiming> {
        let victim = {
            let tracks = self.tracker.tracks.borrow();
            (0..tracks.len()).rev().find(|&i| tracks[i].active && !tracks[i].leader).ok_or_else(|| anyhow!("no follower to leave"))?
        };
        // The member stops (it is between heartbeats), then the benchmark sends its LeaveGroup.
        self.tracker.with(victim, |t| t.cmd = Cmd::Stop);
        self.tracker.with(victim, |t| t.wake.clone()).notify_one();
        if let Some(task) = self.tasks[victim].take() {
            task.await?;
        }
        let member_id = self.tracker.with(victim, |t| t.member_id.clone());
        let fast = self.lanes.fast(self.slot_base + victim).clone();
        let version = fast.version::<LeaveGroupRequest>(self.spec.member.versions.leave)?;
        let request = leave_request(&self.spec.group_id, version, &[member_id]);
        let sent_before = self.lanes.requests_sent();
        let t0 = Instant::now();
        self.tracker.deactivate(victim);
        let response = fast.call(version, &request).await?;
        if response.error_code != 0 || response.members.iter().any(|m| m.error_code != 0) {
            bail!("LeaveGroup failed: {}", error_name(response.error_code));
        }
        if discovery == Discovery::Immediate {
            // Set before waking: a member in the middle of a heartbeat sees it next.
            let wakes: Vec<Rc<Notify>> = self
                .tracker
                .tracks
                .borrow_mut()
                .iter_mut()
                .filter(|t| t.active)
                .map(|t| {
                    t.cmd = Cmd::Rejoin;
                    t.wake.clone()
                })
                .collect();
            for w in wakes {
                w.notify_one();
            }
        }
        let generation = self.tracker.wait_synced(self.generation, t0 + timeout).await?;
        self.generation = generation;
        let mut timing = self.timing(t0, generation);
        timing.requests = self.lanes.requests_sent() - sent_before;
        Ok(timing)
    }

    /// A new member joins; the others learn of the rebalance from their heartbeats.
    pub(crate) async fn join_one(&mut self, timeout: Duration) -> Result<RebalanceTiming> {
        let sent_before = self.lanes.requests_sent();
        let t0 = Instant::now();
        self.add_member();
        let generation = self.tracker.wait_synced(self.generation, t0 + timeout).await?;
        self.generation = generation;
        let mut timing = self.timing(t0, generation);
        timing.requests = self.lanes.requests_sent() - sent_before;
        Ok(timing)
    }

    fn timing(&self, t0: Instant, generation: i32) -> RebalanceTiming {
        let tracks = self.tracker.tracks.borrow();
        let active: Vec<&Track> = tracks.iter().filter(|t| t.active).collect();
        let since = |at: Instant| at.saturating_duration_since(t0);
        let max = |f: &dyn Fn(&Track) -> Option<Instant>| active.iter().filter_map(|t| f(t)).max();
        let last_join_sent = max(&|t| t.park_join_sent).unwrap_or(t0);
        let last_join_done = max(&|t| t.join_done.filter(|(g, _)| *g == generation).map(|(_, at)| at)).unwrap_or(t0);
        let all_synced = max(&|t| t.synced.filter(|(g, _)| *g == generation).map(|(_, at)| at)).unwrap_or(t0);
        let leader = active.iter().find(|t| t.leader && t.generation == generation);
        let (leader_join, leader_sync) = leader.map_or((t0, t0), |l| (l.join_done.map_or(t0, |(_, at)| at), l.sync_sent.unwrap_or(t0)));
        RebalanceTiming {
            members: active.len(),
            generation,
            total: since(all_synced),
            discovery: since(last_join_sent),
            join: last_join_done.saturating_duration_since(last_join_sent),
            leader_assign: leader_sync.saturating_duration_since(leader_join),
            sync: all_synced.saturating_duration_since(leader_sync),
            delay_served: None,
            assigned_partitions: active.iter().map(|t| t.partitions).sum(),
            requests: 0,
        }
    }

    /// Waits until every member has synced a generation newer than the last one waited for,
    /// moved by something outside the group's own members (a KIP-848 member joining or leaving a
    /// group being migrated). `requests` is left to the caller.
    pub(crate) async fn wait_next_generation(&mut self, t0: Instant, timeout: Duration) -> Result<RebalanceTiming> {
        let generation = self.tracker.wait_synced(self.generation, t0 + timeout).await?;
        self.generation = generation;
        Ok(self.timing(t0, generation))
    }

    /// Heartbeats the members have sent so far.
    pub(crate) fn heartbeats(&self) -> u64 {
        self.tracker.tracks.borrow().iter().map(|t| t.heartbeats).sum()
    }

    pub(crate) fn generation(&self) -> i32 {
        self.generation
    }

    /// (member id, generation) of every active member.
    pub(crate) fn members(&self) -> Vec<(String, i32)> {
        self.tracker.tracks.borrow().iter().filter(|t| t.active).map(|t| (t.member_id.clone(), t.generation)).collect()
    }

    /// Stops every member's task; with `leave`, then removes them all with one LeaveGroup.
    pub(crate) async fn stop(mut self, leave: bool) -> Result<()> {
        let wakes: Vec<Rc<Notify>> = self
            .tracker
            .tracks
            .borrow_mut()
            .iter_mut()
            .map(|t| {
                t.cmd = Cmd::Stop;
                t.wake.clone()
            })
            .collect();
        for w in wakes {
            w.notify_one();
        }
        for task in self.tasks.iter_mut().filter_map(Option::take) {
            if tokio::time::timeout(Duration::from_secs(30), task).await.is_err() {
                bail!("a member did not stop within 30 s");
            }
        }
        if let Some(f) = self.tracker.failure.borrow().as_ref() {
            bail!("{f}");
        }
        if leave {
            let ids: Vec<String> = self.members().into_iter().map(|(id, _)| id).filter(|id| !id.is_empty()).collect();
            let fast = self.lanes.fast(self.slot_base).clone();
            let version = fast.version::<LeaveGroupRequest>(self.spec.member.versions.leave)?.max(3);
            let response = fast.call(version, &leave_request(&self.spec.group_id, version, &ids)).await?;
            if response.error_code != 0 {
                bail!("LeaveGroup of every member: {}", error_name(response.error_code));
            }
        }
        Ok(())
    }
}

fn leave_request(group: &str, version: i16, members: &[String]) -> LeaveGroupRequest {
    let request = LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_string())));
    if version >= 3 {
        request.with_members(
            members
                .iter()
                .map(|id| {
                    let m = MemberIdentity::default().with_member_id(StrBytes::from_string(id.clone()));
                    if version >= 5 {
                        m.with_reason(Some(StrBytes::from_static_str("corral-bench")))
                    } else {
                        m
                    }
                })
                .collect(),
        )
    } else {
        request.with_member_id(StrBytes::from_string(members.first().cloned().unwrap_or_default()))
    }
}
