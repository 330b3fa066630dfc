//! Simulated members of KIP-848 consumer groups (ConsumerGroupHeartbeat), each one a task on the
//! current `LocalSet`. ConsumerGroupHeartbeat is always answered at once, so every member shares
//! the fast lanes of a [`Lanes`].
//!
//! A member behaves like a client whose revocation and assignment callbacks return at once:
//!
//! - it joins with a full request (epoch 0, a client-generated member id as v1 requires, the
//!   subscribed topic names, the rebalance timeout, an empty owned list);
//! - whenever a response carries an assignment, it owns exactly that from then on (it revokes
//!   what is gone and takes what is new immediately), and acknowledges with a heartbeat sent
//!   at once that reports the partitions it now owns (as the Java client does after
//!   reconciling);
//! - otherwise it heartbeats every `HeartbeatIntervalMs` the coordinator returns (the first wait
//!   at a random point of the interval, so members are not in lock-step), with every unchanged
//!   field left null;
//! - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: drop everything, rejoin with epoch 0.
//!
//! The group has converged when every member is at the same epoch, the newest any member has
//! seen, and their owned partitions cover every subscribed partition exactly once. The driver
//! then confirms it with ConsumerGroupDescribe (state Stable, assignment epoch = group epoch =
//! that epoch).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, GroupId};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::group_classic::{member_seed, xorshift, UNKNOWN_MEMBER_ID};
use crate::kafka::{error_name, topic_name};
use crate::mux::Lanes;

pub(crate) const FENCED_MEMBER_EPOCH: i16 = 110;

/// The subscribed topics: names, ids, partition counts, and a dense numbering of their
/// partitions (topic-major) for the coverage count.
#[derive(Debug, Clone)]
pub(crate) struct Topics {
    pub(crate) names: Vec<String>,
    base: HashMap<Uuid, (usize, i32)>,
    pub(crate) total: usize,
}

impl Topics {
    pub(crate) fn new(topics: &[(String, Uuid, i32)]) -> Topics {
        let mut base = HashMap::new();
        let mut total = 0;
        for (_, id, partitions) in topics {
            base.insert(*id, (total, *partitions));
            total += *partitions as usize;
        }
        Topics { names: topics.iter().map(|(n, _, _)| n.clone()).collect(), base, total }
    }

    fn index(&self, topic: Uuid, partition: i32) -> Option<u32> {
        let (base, count) = self.base.get(&topic)?;
        (0..*count).contains(&partition).then(|| (base + partition as usize) as u32)
    }
}

/// What every member of a consumer group is configured with.
#[derive(Debug, Clone)]
pub(crate) struct ConsumerSpec {
    pub(crate) group_id: String,
    pub(crate) topics: Rc<Topics>,
    pub(crate) rebalance_timeout_ms: i32,
    /// `uniform` or `range`; `None` = the coordinator's default.
    pub(crate) assignor: Option<String>,
    /// Preferred ConsumerGroupHeartbeat version (1 = client-generated member ids).
    pub(crate) version: i16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Nothing,
    Stop,
}

#[derive(Debug)]
struct Track {
    active: bool,
    member_id: String,
    epoch: i32,
    owned: Vec<u32>,
    cmd: Cmd,
    wake: Rc<Notify>,
    heartbeats: u64,
}

/// Shared record of a consumer group's members, kept so that convergence is an O(1) check.
#[derive(Debug)]
struct Tracker {
    tracks: RefCell<Vec<Track>>,
    /// Members owning each partition.
    owners: RefCell<Vec<u16>>,
    /// Partitions with at least one owner / with more than one.
    covered: Cell<usize>,
    duplicated: Cell<usize>,
    /// Active members per member epoch.
    epochs: RefCell<HashMap<i32, usize>>,
    max_epoch: Cell<i32>,
    active: Cell<usize>,
    /// When the converged condition last became true (None while it is false).
    converged_since: Cell<Option<Instant>>,
    /// When some member first reached the newest epoch.
    newest_epoch_at: Cell<Option<Instant>>,
    changed: Notify,
    failure: RefCell<Option<String>>,
    total: usize,
}

impl Tracker {
    fn new(total: usize) -> Tracker {
        Tracker {
            tracks: RefCell::new(Vec::new()),
            owners: RefCell::new(vec![0; total]),
            covered: Cell::new(0),
            duplicated: Cell::new(0),
            epochs: RefCell::new(HashMap::new()),
            max_epoch: Cell::new(0),
            active: Cell::new(0),
            converged_since: Cell::new(None),
            newest_epoch_at: Cell::new(None),
            changed: Notify::new(),
            failure: RefCell::new(None),
            total,
        }
    }

    fn add(&self, member_id: String) -> usize {
        let mut tracks = self.tracks.borrow_mut();
        tracks.push(Track {
            active: true,
            member_id,
            epoch: 0,
            owned: Vec::new(),
            cmd: Cmd::Nothing,
            wake: Rc::new(Notify::new()),
            heartbeats: 0,
        });
        *self.epochs.borrow_mut().entry(0).or_default() += 1;
        self.active.set(self.active.get() + 1);
        drop(tracks);
        self.recheck();
        tracks_len(self) - 1
    }

    fn own(&self, partitions: &[u32], add: bool) {
        let mut owners = self.owners.borrow_mut();
        for &p in partitions {
            let n = &mut owners[p as usize];
            if add {
                *n += 1;
                match *n {
                    1 => self.covered.set(self.covered.get() + 1),
                    2 => self.duplicated.set(self.duplicated.get() + 1),
                    _ => {}
                }
            } else {
                *n -= 1;
                match *n {
                    0 => self.covered.set(self.covered.get() - 1),
                    1 => self.duplicated.set(self.duplicated.get() - 1),
                    _ => {}
                }
            }
        }
    }

    /// A member's latest epoch and owned partitions (sorted).
    fn update(&self, idx: usize, epoch: i32, owned: Option<Vec<u32>>) {
        let mut tracks = self.tracks.borrow_mut();
        let t = &mut tracks[idx];
        t.heartbeats += 1;
        if !t.active {
            return;
        }
        if t.epoch != epoch {
            let mut epochs = self.epochs.borrow_mut();
            *epochs.entry(t.epoch).or_default() -= 1;
            *epochs.entry(epoch).or_default() += 1;
            t.epoch = epoch;
            if epoch > self.max_epoch.get() {
                self.max_epoch.set(epoch);
                self.newest_epoch_at.set(Some(Instant::now()));
            }
        }
        if let Some(owned) = owned {
            if owned != t.owned {
                let old = std::mem::replace(&mut t.owned, owned);
                self.own(&old, false);
                self.own(&t.owned, true);
            }
        }
        drop(tracks);
        self.recheck();
    }

    fn deactivate(&self, idx: usize) {
        let mut tracks = self.tracks.borrow_mut();
        let t = &mut tracks[idx];
        if !t.active {
            return;
        }
        t.active = false;
        *self.epochs.borrow_mut().entry(t.epoch).or_default() -= 1;
        let owned = std::mem::take(&mut t.owned);
        drop(tracks);
        self.own(&owned, false);
        self.active.set(self.active.get() - 1);
        self.recheck();
    }

    fn converged(&self) -> bool {
        let active = self.active.get();
        active > 0
            && self.covered.get() == self.total
            && self.duplicated.get() == 0
            && self.epochs.borrow().get(&self.max_epoch.get()).copied() == Some(active)
    }

    fn recheck(&self) {
        let now = self.converged();
        match (now, self.converged_since.get()) {
            (true, None) => self.converged_since.set(Some(Instant::now())),
            (false, Some(_)) => self.converged_since.set(None),
            _ => {}
        }
        self.changed.notify_one();
    }

    fn fail(&self, idx: usize, e: anyhow::Error) {
        self.failure.borrow_mut().get_or_insert_with(|| format!("member {idx}: {e:#}"));
        self.changed.notify_one();
    }
}

fn tracks_len(t: &Tracker) -> usize {
    t.tracks.borrow().len()
}

struct MemberCtx {
    idx: usize,
    member_id: String,
    spec: Rc<ConsumerSpec>,
    lanes: Rc<Lanes>,
    tracker: Rc<Tracker>,
}

async fn member_task(ctx: MemberCtx) {
    let (idx, tracker) = (ctx.idx, ctx.tracker.clone());
    if let Err(e) = member_loop(ctx).await {
        tracker.fail(idx, e);
    }
}

fn owned_list(owned: &[(Uuid, Vec<i32>)]) -> Vec<TopicPartitions> {
    owned.iter().map(|(t, ps)| TopicPartitions::default().with_topic_id(*t).with_partitions(ps.clone())).collect()
}

async fn member_loop(ctx: MemberCtx) -> Result<()> {
    let MemberCtx { idx, member_id, spec, lanes, tracker } = ctx;
    let lane = lanes.fast(idx).clone();
    let version = lane.version::<ConsumerGroupHeartbeatRequest>(spec.version)?;
    let group = GroupId(StrBytes::from_string(spec.group_id.clone()));
    let names: Vec<_> = spec.topics.names.iter().map(|n| topic_name(n)).collect();
    let wake = tracker.tracks.borrow()[idx].wake.clone();
    let mut rng = member_seed(idx);
    let mut epoch = 0;
    let mut owned: Vec<(Uuid, Vec<i32>)> = Vec::new();
    let mut full = true;
    let mut report = false;
    let mut first_wait = true;
    let mut member_id_sent = if version >= 1 { member_id } else { String::new() };
    loop {
        if tracker.tracks.borrow()[idx].cmd == Cmd::Stop {
            return Ok(());
        }
        let mut request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group.clone())
            .with_member_id(StrBytes::from_string(member_id_sent.clone()))
            .with_member_epoch(epoch);
        if full {
            request = request
                .with_rebalance_timeout_ms(spec.rebalance_timeout_ms)
                .with_subscribed_topic_names(Some(names.clone()))
                .with_server_assignor(spec.assignor.clone().map(StrBytes::from_string))
                .with_topic_partitions(Some(owned_list(&owned)));
        } else if report {
            request = request.with_topic_partitions(Some(owned_list(&owned)));
        }
        let response = lane.call(version, &request).await?;
        let interval;
        match response.error_code {
            0 => {
                full = false;
                report = false;
                epoch = response.member_epoch;
                if let Some(id) = response.member_id.as_ref().filter(|id| id.as_str() != member_id_sent) {
                    // v0: the coordinator names the member.
                    member_id_sent = id.to_string();
                    tracker.tracks.borrow_mut()[idx].member_id = member_id_sent.clone();
                }
                interval = Duration::from_millis(response.heartbeat_interval_ms.max(1) as u64);
                let mut dense = None;
                if let Some(assignment) = response.assignment {
                    let mut next: Vec<(Uuid, Vec<i32>)> = assignment
                        .topic_partitions
                        .into_iter()
                        .map(|tp| {
                            let mut ps = tp.partitions;
                            ps.sort_unstable();
                            (tp.topic_id, ps)
                        })
                        .collect();
                    next.sort_by_key(|(t, _)| *t);
                    if next != owned {
                        owned = next;
                        // Revoked and assigned at once; say so in the next heartbeat, now.
                        report = true;
                    }
                    let mut d: Vec<u32> = Vec::with_capacity(owned.iter().map(|(_, p)| p.len()).sum());
                    for (t, ps) in &owned {
                        for &p in ps {
                            d.push(spec.topics.index(*t, p).ok_or_else(|| anyhow!("assigned an unknown partition {t}-{p}"))?);
                        }
                    }
                    d.sort_unstable();
                    dense = Some(d);
                }
                tracker.update(idx, epoch, dense);
            }
            FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID => {
                epoch = 0;
                owned.clear();
                full = true;
                report = false;
                tracker.update(idx, 0, Some(Vec::new()));
                continue;
            }
            code => {
                bail!("ConsumerGroupHeartbeat: {} {}", error_name(code), response.error_message.map(|m| m.to_string()).unwrap_or_default())
            }
        }
        if report {
            continue;
        }
        let wait = if first_wait {
            first_wait = false;
            Duration::from_nanos(xorshift(&mut rng) % (interval.as_nanos().max(1) as u64))
        } else {
            interval
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = wake.notified() => {}
        }
    }
}

/// The breakdown of one convergence.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConvergeTiming {
    pub(crate) members: usize,
    pub(crate) epoch: i32,
    /// Event → every member at the newest epoch, owning its target.
    pub(crate) total: Duration,
    /// Event → the first member at the final epoch.
    pub(crate) first_at_epoch: Duration,
    /// ConsumerGroupHeartbeats sent during the event.
    pub(crate) requests: u64,
}

/// One KIP-848 consumer group driven by the benchmark.
pub(crate) struct ConsumerGroup {
    spec: Rc<ConsumerSpec>,
    lanes: Rc<Lanes>,
    tracker: Rc<Tracker>,
    tasks: Vec<Option<JoinHandle<()>>>,
}

/// A group dropped without `stop` (a failed or timed-out scenario) takes its members with it:
/// they would otherwise go on loading the server under the next scenario.
impl Drop for ConsumerGroup {
    fn drop(&mut self) {
        for task in self.tasks.iter_mut().filter_map(Option::take) {
            task.abort();
        }
    }
}

impl ConsumerGroup {
    /// A group without members yet, for members that join a group others run too (a classic
    /// group being migrated): the convergence of [`ConsumerGroup::start`] does not apply there.
    pub(crate) fn empty(spec: Rc<ConsumerSpec>, lanes: Rc<Lanes>) -> ConsumerGroup {
        let tracker = Rc::new(Tracker::new(spec.topics.total));
        ConsumerGroup { spec, lanes, tracker, tasks: Vec::new() }
    }

    /// (epoch, partitions owned) of member `idx`.
    pub(crate) fn member(&self, idx: usize) -> (i32, usize) {
        let tracks = self.tracker.tracks.borrow();
        (tracks[idx].epoch, tracks[idx].owned.len())
    }

    /// Returns when a member was answered or failed.
    pub(crate) async fn changed(&self) {
        self.tracker.changed.notified().await
    }

    /// The first failure of a member, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        self.tracker.failure.borrow().clone()
    }

    pub(crate) fn add_member(&mut self) -> usize {
        let member_id = Uuid::new_v4().simple().to_string();
        let idx = self.tracker.add(member_id.clone());
        let ctx = MemberCtx { idx, member_id, spec: self.spec.clone(), lanes: self.lanes.clone(), tracker: self.tracker.clone() };
        self.tasks.push(Some(tokio::task::spawn_local(member_task(ctx))));
        idx
    }

    /// Starts `members` members at once and waits for the group to converge.
    pub(crate) async fn start(
        spec: Rc<ConsumerSpec>,
        lanes: Rc<Lanes>,
        members: usize,
        timeout: Duration,
    ) -> Result<(ConsumerGroup, ConvergeTiming)> {
        let tracker = Rc::new(Tracker::new(spec.topics.total));
        let mut group = ConsumerGroup { spec, lanes, tracker, tasks: Vec::new() };
        let sent = group.lanes.requests_sent();
        let t0 = Instant::now();
        for _ in 0..members {
            group.add_member();
        }
        let timing = group.wait(t0, sent, timeout).await?;
        Ok((group, timing))
    }

    /// A new member joins.
    pub(crate) async fn join_one(&mut self, timeout: Duration) -> Result<ConvergeTiming> {
        let sent = self.lanes.requests_sent();
        let t0 = Instant::now();
        self.tracker.newest_epoch_at.set(None);
        self.add_member();
        self.wait(t0, sent, timeout).await
    }

    /// A member leaves (a heartbeat with epoch -1).
    pub(crate) async fn leave_one(&mut self, timeout: Duration) -> Result<ConvergeTiming> {
        let victim = {
            let tracks = self.tracker.tracks.borrow();
            (0..tracks.len()).rev().find(|&i| tracks[i].active).ok_or_else(|| anyhow!("no member to leave"))?
        };
        self.stop_member(victim).await?;
        let member_id = self.tracker.tracks.borrow()[victim].member_id.clone();
        let sent = self.lanes.requests_sent();
        let t0 = Instant::now();
        self.tracker.newest_epoch_at.set(None);
        self.leave(victim, &member_id).await?;
        self.wait(t0, sent, timeout).await
    }

    async fn stop_member(&mut self, idx: usize) -> Result<()> {
        let wake = {
            let mut tracks = self.tracker.tracks.borrow_mut();
            tracks[idx].cmd = Cmd::Stop;
            tracks[idx].wake.clone()
        };
        wake.notify_one();
        if let Some(task) = self.tasks[idx].take() {
            task.await?;
        }
        Ok(())
    }

    async fn leave(&self, idx: usize, member_id: &str) -> Result<()> {
        let lane = self.lanes.fast(idx);
        let version = lane.version::<ConsumerGroupHeartbeatRequest>(self.spec.version)?;
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.spec.group_id.clone())))
            .with_member_id(StrBytes::from_string(member_id.to_string()))
            .with_member_epoch(-1);
        self.tracker.deactivate(idx);
        let response = lane.call(version, &request).await?;
        if response.error_code != 0 {
            bail!("leaving: {}", error_name(response.error_code));
        }
        Ok(())
    }

    async fn wait(&self, t0: Instant, sent_before: u64, timeout: Duration) -> Result<ConvergeTiming> {
        let deadline = t0 + timeout;
        loop {
            if let Some(f) = self.tracker.failure.borrow().as_ref() {
                bail!("{f}");
            }
            if let Some(since) = self.tracker.converged_since.get() {
                let epoch = self.tracker.max_epoch.get();
                if self.confirm(epoch).await? {
                    // Still converged at the same epoch after the describe round trip.
                    if self.tracker.converged_since.get() == Some(since) {
                        return Ok(ConvergeTiming {
                            members: self.tracker.active.get(),
                            epoch,
                            total: since.saturating_duration_since(t0),
                            first_at_epoch: self
                                .tracker
                                .newest_epoch_at
                                .get()
                                .map_or(Duration::ZERO, |at| at.saturating_duration_since(t0)),
                            requests: self.lanes.requests_sent() - sent_before,
                        });
                    }
                    continue;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, self.tracker.changed.notified()).await.is_err() {
                bail!(
                    "not converged after {timeout:?}: {} active, {}/{} partitions owned, {} owned twice, epochs {:?}",
                    self.tracker.active.get(),
                    self.tracker.covered.get(),
                    self.tracker.total,
                    self.tracker.duplicated.get(),
                    self.tracker.epochs.borrow().iter().filter(|(_, &n)| n > 0).collect::<HashMap<_, _>>()
                );
            }
        }
    }

    /// ConsumerGroupDescribe agrees: Stable, at `epoch`.
    async fn confirm(&self, epoch: i32) -> Result<bool> {
        let lane = self.lanes.fast(0);
        let version = lane.version::<ConsumerGroupDescribeRequest>(1)?;
        let request =
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(StrBytes::from_string(self.spec.group_id.clone()))]);
        let response = lane.call(version, &request).await?;
        let g = response.groups.first().ok_or_else(|| anyhow!("ConsumerGroupDescribe returned no group"))?;
        if g.error_code != 0 {
            bail!("ConsumerGroupDescribe: {}", error_name(g.error_code));
        }
        Ok(g.group_state.as_str() == "Stable" && g.group_epoch == epoch && g.assignment_epoch == epoch)
    }

    pub(crate) fn heartbeats(&self) -> u64 {
        self.tracker.tracks.borrow().iter().map(|t| t.heartbeats).sum()
    }

    /// Every member leaves (epoch -1), one after the other.
    pub(crate) async fn stop(mut self) -> Result<()> {
        for idx in 0..self.tasks.len() {
            if self.tasks[idx].is_some() {
                let wake = {
                    let mut tracks = self.tracker.tracks.borrow_mut();
                    tracks[idx].cmd = Cmd::Stop;
                    tracks[idx].wake.clone()
                };
                wake.notify_one();
            }
        }
        for task in self.tasks.iter_mut().filter_map(Option::take) {
            if tokio::time::timeout(Duration::from_secs(30), task).await.is_err() {
                bail!("a member did not stop within 30 s");
            }
        }
        if let Some(f) = self.tracker.failure.borrow().as_ref() {
            bail!("{f}");
        }
        let active: Vec<(usize, String)> =
            self.tracker.tracks.borrow().iter().enumerate().filter(|(_, t)| t.active).map(|(i, t)| (i, t.member_id.clone())).collect();
        let leaves = active.iter().map(|(idx, id)| self.leave(*idx, id));
        for result in futures_util::future::join_all(leaves).await {
            result?;
        }
        Ok(())
    }
}
