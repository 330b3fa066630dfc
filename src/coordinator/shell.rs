//! Runs each coordinator partition's state machine on the shard that owns it: keeps its timers,
//! makes its records durable through the partition's Raft group, loads the partition at startup,
//! and hands responses to the connections waiting for them.
//!
//! # Durability
//!
//! Every record goes through the partition's Raft log (fsynced; see [`super::replicated`]) before
//! the request that produced it is answered, so an acknowledged offset commit or group assignment
//! survives a crash. Records of requests that arrive while a write is in flight are batched into
//! the next entry: one fsync serves them all.
//!
//! # Startup
//!
//! The partition's `__consumer_offsets` log is replayed first; it says which Raft entry it holds
//! last, and the Raft group then re-applies the committed entries after it. The partition serves
//! once this node leads its group and has applied everything in its log; until then group
//! requests get COORDINATOR_LOAD_IN_PROGRESS.
//!
//! # Compaction
//!
//! `__consumer_offsets` keeps only the latest value per key. When a partition's log has grown
//! well past the live state, the shell asks its Raft group for a snapshot: a checkpoint (every
//! live offset and every settled group, in a fresh segment) replaces the segments before it, and
//! the Raft log is purged up to it.

use std::cell::{Cell, OnceCell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use openraft::{BasicNode, ServerState};
use tokio::sync::{oneshot, Notify};

use super::events::GroupEvent;
use super::group::{GroupState, Token};
use super::rebalances::RebalanceTracker;
use super::records::GroupRecord;
use super::replicated::{self, encode_batch, stamp_log_id, CoordinatorStateMachine};
use super::state::{CoordinatorState, Effect, GroupConfig, Response, TimerKey};
use crate::clock::now_ms;
use crate::raft::election::{Canvass, Election};
use crate::raft::{Command, LogId, LogStoreConfig, Raft, RaftLogStore};
use crate::storage::{Partition, StorageError};

/// Log growth (bytes) that triggers a checkpoint, at the least.
const CHECKPOINT_MIN_BYTES: u64 = 64 * 1024 * 1024;
/// Records per batch written, at most (batches are bounded by bytes too).
const MAX_RECORDS_PER_BATCH: usize = 500;
/// How long a one-voter partition may take to elect itself and catch up at startup.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a leader may go without hearing from a quorum before it stops serving: the voters
/// elect no other leader for [`crate::raft::election::LEASE`] after they last heard from it, less
/// the 100 ms at which `follow_leadership` looks.
const QUORUM_LEASE: Duration = Duration::from_millis(crate::raft::election::LEASE.as_millis() as u64 - 100);
/// How long a write may wait to commit (Kafka's `offsets.commit.timeout.ms`); after that the
/// request gets COORDINATOR_NOT_AVAILABLE (a leader cut off from its quorum never acknowledges).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a coordinator partition's Raft group needs to start.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    /// The group's directory (its log, vote, applied membership).
    pub dir: PathBuf,
    pub node_id: u64,
    /// The group's voters and their addresses when it is first initialized (this node alone on
    /// a single node).
    pub members: BTreeMap<u64, BasicNode>,
    /// The member that stands for election first, so leadership of the partitions spreads over
    /// the nodes.
    pub preferred_leader: u64,
    pub config: Arc<openraft::Config>,
}

impl RaftSettings {
    /// A one-voter group: this node, at `address`.
    pub fn solo(dir: PathBuf, node_id: u64, address: String, config: Arc<openraft::Config>) -> RaftSettings {
        RaftSettings { dir, node_id, members: BTreeMap::from([(node_id, BasicNode::new(address))]), preferred_leader: node_id, config }
    }
}

/// Requests whose records wait for the next Raft entry.
#[derive(Debug, Default)]
struct Proposals {
    queue: VecDeque<Queued>,
    in_flight: bool,
}

/// One request's records, with the bytes they take in a batch.
#[derive(Debug)]
struct Queued {
    id: u64,
    records: Vec<GroupRecord>,
    bytes: usize,
}

/// What the next Raft entry carries: the records of the requests `ids`, or a refusal of one
/// request whose records cannot be written.
#[derive(Debug)]
enum Next {
    Entry {
        ids: Vec<u64>,
        records: Vec<GroupRecord>,
    },
    /// One request's records, in entries of at most the bound each (a write that may be split).
    Pieces {
        id: u64,
        pieces: Vec<Vec<GroupRecord>>,
    },
    Refuse {
        id: u64,
        bytes: usize,
    },
}

/// One coordinator partition: its state machine and what runs it. Lives on its owning shard.
pub struct PartitionRunner {
    pub index: i32,
    pub state: RefCell<CoordinatorState>,
    log: Rc<Partition>,
    /// The partition's Raft group, with what decides when this node stands for election.
    election: OnceCell<Rc<Election>>,
    proposals: RefCell<Proposals>,
    node_id: u64,
    /// Entries from this index on were proposed by this node as leader, their records already in
    /// `state`; entries before it are replayed when applied.
    local_from: Cell<u64>,
    /// This node leads the partition's Raft group and has applied its whole log.
    serving: Cell<bool>,
    serving_changed: Notify,
    /// The group's leader as last seen (for FindCoordinator).
    leader: Cell<Option<u64>>,
    /// This node leads the group but has heard from no quorum lately: it is cut off.
    cut_off: Cell<bool>,
    /// The node is shutting down: it hands leadership over and never serves again.
    leaving: Cell<bool>,
    /// The group's voters, in id order.
    voters: Vec<u64>,
    waiting: RefCell<HashMap<Token, oneshot::Sender<Response>>>,
    next_token: Cell<Token>,
    timers: RefCell<BinaryHeap<Reverse<(i64, u64)>>>,
    timer_keys: RefCell<HashMap<u64, TimerKey>>,
    next_timer: Cell<u64>,
    wake: Notify,
    /// Log size right after the last checkpoint.
    checkpoint_size: Cell<u64>,
    snapshot_requested: Cell<bool>,
    expiration_interval_ms: u64,
    /// Rebalances in progress on this partition, from the state machine's events.
    rebalances: RefCell<RebalanceTracker>,
}

impl std::fmt::Debug for PartitionRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionRunner").field("index", &self.index).field("serving", &self.serving.get()).finish()
    }
}

impl PartitionRunner {
    /// Loads a partition (its log, then its Raft group's entries after it) and starts its Raft
    /// group. A one-voter group returns once it serves; in a cluster the partition serves whenever
    /// this node leads its group (see `follow_leadership`).
    pub async fn start<N: openraft::RaftNetworkFactory<crate::raft::TypeConfig> + Canvass + Clone + 'static>(
        index: i32,
        log: Rc<Partition>,
        config: GroupConfig,
        consumer: super::consumer::ConsumerGroupConfig,
        expiration_interval_ms: u64,
        raft: RaftSettings,
        network: N,
    ) -> Result<Rc<Self>, String> {
        let now = now_ms();
        let mut state = CoordinatorState::with_consumer_config(config, consumer);
        let mut records = 0usize;
        let applied = for_each_record(&log, |record| {
            state.replay(record, now);
            records += 1;
        })
        .map_err(|e| format!("cannot read its log: {e}"))?;
        let size = log.log.borrow().size_bytes();
        let runner = Rc::new(PartitionRunner {
            index,
            state: RefCell::new(state),
            log,
            election: OnceCell::new(),
            proposals: RefCell::default(),
            node_id: raft.node_id,
            local_from: Cell::new(u64::MAX),
            serving: Cell::new(false),
            serving_changed: Notify::new(),
            leader: Cell::new(None),
            cut_off: Cell::new(false),
            leaving: Cell::new(false),
            voters: raft.members.keys().copied().collect(),
            waiting: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            timers: RefCell::new(BinaryHeap::new()),
            timer_keys: RefCell::new(HashMap::new()),
            next_timer: Cell::new(0),
            wake: Notify::new(),
            checkpoint_size: Cell::new(size),
            snapshot_requested: Cell::new(false),
            expiration_interval_ms,
            rebalances: RefCell::default(),
        });

        let store = RaftLogStore::open(&raft.dir, LogStoreConfig::default())
            .await
            .map_err(|e| format!("cannot open its Raft log in {}: {e}", raft.dir.display()))?;
        let machine = CoordinatorStateMachine::open(Rc::downgrade(&runner), applied, raft.dir.clone())?;
        let log_reader = store.reader();
        let group = Raft::new(raft.node_id, raft.config.clone(), network.clone(), store, machine)
            .await
            .map_err(|e| format!("cannot start its Raft group: {e}"))?;
        crate::raft::join_group(&group, raft.node_id, &raft.members, STARTUP_TIMEOUT).await?;
        let election = Election::start(index as u32, group, log_reader, raft.preferred_leader, network);
        let _ = runner.election.set(election);
        tokio::task::spawn_local(runner.clone().follow_leadership());
        tokio::task::spawn_local(runner.clone().timer_loop());
        tokio::task::spawn_local(runner.clone().expiration_loop());
        if raft.members.len() == 1 {
            let served = tokio::time::timeout(STARTUP_TIMEOUT, async {
                while !runner.serving() {
                    runner.serving_changed.notified().await;
                }
            });
            served.await.map_err(|_| format!("did not take the lead of its one-voter Raft group within {STARTUP_TIMEOUT:?}"))?;
        }
        {
            let state = runner.state.borrow();
            let groups = state.groups.len() + state.consumer_groups.len();
            if groups > 0 {
                tracing::info!(partition = index, records, groups, applied = ?applied, "loaded coordinator partition");
            }
        }
        Ok(runner)
    }

    /// Follows the Raft group's leadership: serves once this node leads and has applied every
    /// entry it had at election (the state is then complete), stops serving when it no longer
    /// leads, or when it has heard from no quorum for [`QUORUM_LEASE`] (a leader cut off from
    /// the others: clients must look elsewhere, where a new leader is being elected). Ends when
    /// the group shuts down.
    async fn follow_leadership(self: Rc<Self>) {
        let Some(raft) = self.raft().cloned() else {
            return;
        };
        let mut metrics = raft.metrics();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The log's last index when this node was first seen leading (with a quorum).
        let mut catch_up: Option<Option<u64>> = None;
        let mut quorum_seen = tokio::time::Instant::now();
        let mut was_leading = false;
        loop {
            let (leading, last_log, applied, solo) = {
                let m = metrics.borrow_and_update();
                self.leader.set(m.current_leader);
                let solo = m.membership_config.membership().voter_ids().count() == 1;
                let leading = m.state == ServerState::Leader && m.current_leader == Some(self.node_id);
                if leading && !was_leading {
                    // Just elected: a quorum granted its votes now.
                    quorum_seen = tokio::time::Instant::now();
                }
                was_leading = leading;
                if let Some(ms) = m.millis_since_quorum_ack {
                    quorum_seen = quorum_seen.max(tokio::time::Instant::now() - Duration::from_millis(ms));
                }
                (leading, m.last_log_index, m.last_applied.map(|l| l.index), solo)
            };
            let has_quorum = solo || quorum_seen.elapsed() < QUORUM_LEASE;
            self.cut_off.set(leading && !has_quorum);
            if !(leading && has_quorum) {
                catch_up = None;
                if self.serving.get() {
                    self.step_down(if leading { "no quorum reached" } else { "another node leads" });
                }
            } else if !self.serving.get() && !self.leaving.get() {
                let target = *catch_up.get_or_insert(last_log);
                if applied >= target {
                    self.take_over(target);
                }
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                _ = tick.tick(), if leading && !solo => {}
            }
        }
    }

    /// Starts serving: the state holds every entry up to `applied`; what follows is proposed
    /// here.
    fn take_over(self: &Rc<Self>, applied: Option<u64>) {
        self.local_from.set(applied.map_or(0, |i| i + 1));
        self.state.borrow_mut().start_sessions(now_ms());
        self.serving.set(true);
        self.serving_changed.notify_waiters();
        tracing::debug!(partition = self.index, applied = ?applied, "coordinator partition serving (this node leads its Raft group)");
        self.run_effects();
    }

    /// Stops serving: pending requests are dropped, timers cancelled, and the state is rebuilt
    /// from the partition's log (what was applied), since it may hold records that never
    /// committed. Entries applied from now on are replayed.
    fn step_down(&self, why: &'static str) {
        self.serving.set(false);
        self.serving_changed.notify_waiters();
        self.local_from.set(u64::MAX);
        self.fail_waiters();
        self.proposals.borrow_mut().queue.clear();
        self.timers.borrow_mut().clear();
        self.timer_keys.borrow_mut().clear();
        self.rebalances.borrow_mut().clear();
        let now = now_ms();
        let mut fresh = self.fresh_state();
        match for_each_record(&self.log, |record| fresh.replay(record, now)) {
            Ok(_) => *self.state.borrow_mut() = fresh,
            Err(e) => {
                tracing::error!(partition = self.index, error = %e, "cannot reload the coordinator partition's log")
            }
        }
        tracing::info!(partition = self.index, leader = ?self.leader.get(), why, "coordinator partition stopped serving");
    }

    /// The node that leads this partition's Raft group, as last seen; `None` while there is none,
    /// or while this node thinks it leads but does not serve (catching up, or cut off).
    pub fn leader(&self) -> Option<u64> {
        self.leader.get().filter(|&id| id != self.node_id || self.serving.get())
    }

    /// The node FindCoordinator names: the leader; or, when this node is cut off from the others,
    /// the voter with the lowest id among them. Clients keep asking the node they last used, so
    /// naming no one would keep them asking this node for as long as it is cut off. A node named
    /// wrongly answers NOT_COORDINATOR, and the client asks again, now of a node that knows the
    /// new leader (librdkafka prefers the most recently used broker, the lower id on a tie). The
    /// guess stays the same, so a client does not flap between nodes.
    pub fn coordinator_hint(&self) -> Option<u64> {
        if !self.cut_off.get() {
            return self.leader();
        }
        self.voters.iter().copied().find(|&v| v != self.node_id)
    }

    /// Whether group requests are served here: NOT_COORDINATOR where another node leads (or none
    /// does), COORDINATOR_LOAD_IN_PROGRESS while this node, newly elected, catches up.
    pub fn availability(&self) -> Result<(), ResponseError> {
        if self.serving.get() {
            Ok(())
        } else if self.leader.get() == Some(self.node_id) && !self.cut_off.get() {
            Err(ResponseError::CoordinatorLoadInProgress)
        } else {
            Err(ResponseError::NotCoordinator)
        }
    }

    /// The partition's Raft group, once started.
    pub fn raft(&self) -> Option<&Raft> {
        self.election.get().map(|e| e.raft())
    }

    /// The partition's Raft group with its elections (where peers' RPCs arrive), once started.
    pub fn election(&self) -> Option<&Rc<Election>> {
        self.election.get()
    }

    /// Whether this partition answers group requests (it leads its Raft group and has caught up).
    pub fn serving(&self) -> bool {
        self.serving.get()
    }

    /// Registers a waiter for a response; returns its token.
    pub fn waiter(&self) -> (Token, oneshot::Receiver<Response>) {
        let token = self.next_token.get() + 1;
        self.next_token.set(token);
        let (tx, rx) = oneshot::channel();
        self.waiting.borrow_mut().insert(token, tx);
        (token, rx)
    }

    /// Runs `f` against the state machine, then carries out what it asked for.
    pub fn with_state<T>(self: &Rc<Self>, f: impl FnOnce(&mut CoordinatorState, i64) -> T) -> T {
        let out = f(&mut self.state.borrow_mut(), now_ms());
        self.run_effects();
        out
    }

    /// Carries out pending effects until there are none.
    fn run_effects(self: &Rc<Self>) {
        loop {
            let effects = self.state.borrow_mut().out.drain();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Reply(token, response) => {
                        if let Some(tx) = self.waiting.borrow_mut().remove(&token) {
                            let _ = tx.send(response);
                        }
                    }
                    Effect::Timer(key, deadline) => self.arm(key, deadline),
                    Effect::Append(id, records) => self.append(id, records),
                    Effect::Event(at, event) => self.observe(at, &event),
                }
            }
        }
    }

    /// What happened in a group: a finished rebalance gets one log line and its metrics.
    fn observe(&self, at: i64, event: &GroupEvent) {
        let Some(done) = self.rebalances.borrow_mut().observe(at, event) else { return };
        tracing::info!(
            partition = self.index,
            group = %done.group,
            kind = %done.kind.name(),
            trigger = %done.cause.trigger(),
            members_named = ?done.cause.members(),
            restarts = done.restarts,
            generation = format_args!("{} -> {}", done.generation_before, done.generation_after),
            members = format_args!("{} -> {}", done.members_before, done.members_after),
            join_ms = ?done.join_ms,
            sync_ms = ?done.sync_ms,
            total_ms = done.total_ms,
            "rebalance completed"
        );
        crate::metrics::rebalance_completed(done.kind.name(), done.cause.trigger(), done.total_ms);
    }

    fn arm(&self, key: TimerKey, deadline: i64) {
        let seq = self.next_timer.get() + 1;
        self.next_timer.set(seq);
        self.timer_keys.borrow_mut().insert(seq, key);
        let mut timers = self.timers.borrow_mut();
        let earliest = timers.peek().map(|Reverse((at, _))| *at);
        timers.push(Reverse((deadline, seq)));
        if earliest.is_none_or(|at| deadline < at) {
            self.wake.notify_one();
        }
    }

    /// Queues records for the Raft log; the state machine hears the outcome once they are
    /// committed. One write is in flight at a time; what queues meanwhile shares the next entry.
    fn append(self: &Rc<Self>, id: u64, records: Vec<GroupRecord>) {
        let bytes = super::records::batch_bytes(&records);
        let mut proposals = self.proposals.borrow_mut();
        proposals.queue.push_back(Queued { id, records, bytes });
        if !proposals.in_flight {
            proposals.in_flight = true;
            tokio::task::spawn_local(self.clone().propose());
        }
    }

    /// The largest batch a write may propose: `__consumer_offsets`' bound, within what a Raft
    /// entry may carry.
    fn max_batch_bytes(&self) -> usize {
        self.state.borrow().config.max_batch_bytes.min(crate::raft::MAX_COMMAND_BYTES)
    }

    /// Takes what the next entry carries from the queue: requests in order while their records
    /// fit in one batch. A request too large for a batch alone is split where the state machine
    /// allows it, and refused where it must be atomic (before anything is proposed, so the log
    /// never holds an entry it could not apply).
    fn next_entry(&self) -> Option<Next> {
        let bound = self.max_batch_bytes();
        let mut proposals = self.proposals.borrow_mut();
        let first = proposals.queue.pop_front()?;
        if first.bytes > bound {
            return Some(if self.state.borrow().may_split(first.id) {
                Next::Pieces { id: first.id, pieces: split_records(first.records, bound) }
            } else {
                Next::Refuse { id: first.id, bytes: first.bytes }
            });
        }
        let (mut ids, mut records, mut bytes) = (vec![first.id], first.records, first.bytes);
        while let Some(next) = proposals.queue.front() {
            // Each batch's header and log-id header are counted once.
            let more = next.bytes - super::records::batch_bytes(&[]);
            if bytes + more > bound {
                break;
            }
            let next = proposals.queue.pop_front().expect("front exists");
            ids.push(next.id);
            records.extend(next.records);
            bytes += more;
        }
        Some(Next::Entry { ids, records })
    }

    async fn propose(self: Rc<Self>) {
        loop {
            let Some(next) = self.next_entry() else {
                self.proposals.borrow_mut().in_flight = false;
                return;
            };
            let (ids, outcome) = match next {
                Next::Entry { ids, records } => {
                    let outcome = if records.is_empty() { Ok(()) } else { self.write(&records).await };
                    if let Err(code) = outcome {
                        tracing::warn!(partition = self.index, records = records.len(), error = ?code, "coordinator records not written");
                    }
                    (ids, outcome)
                }
                Next::Pieces { id, pieces } => {
                    let mut outcome = Ok(());
                    for piece in &pieces {
                        outcome = self.write(piece).await;
                        if outcome.is_err() {
                            break;
                        }
                    }
                    if let Err(code) = outcome {
                        tracing::warn!(partition = self.index, pieces = pieces.len(), error = ?code, "coordinator records not written");
                    }
                    (vec![id], outcome)
                }
                Next::Refuse { id, bytes } => {
                    crate::metrics::coordinator_write_refused();
                    tracing::warn!(
                        partition = self.index,
                        bytes,
                        max = self.max_batch_bytes(),
                        "coordinator records refused: larger than one __consumer_offsets batch may be"
                    );
                    (vec![id], Err(ResponseError::RecordListTooLarge))
                }
            };
            let now = now_ms();
            {
                let mut state = self.state.borrow_mut();
                for id in ids {
                    state.appended(now, id, outcome.err());
                }
            }
            self.run_effects();
        }
    }

    /// Writes records as one entry and waits until it is committed and applied.
    async fn write(&self, records: &[GroupRecord]) -> Result<(), ResponseError> {
        let Some(raft) = self.raft() else {
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let write = raft.client_write(Command::new(encode_batch(records, now_ms())));
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!(partition = self.index, error = %e, "Raft write failed");
                Err(raft_error_code(&e))
            }
            Err(_) => {
                tracing::warn!(partition = self.index, "Raft write did not commit within {WRITE_TIMEOUT:?}");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    /// Applies one committed entry (from [`CoordinatorStateMachine`]): the batch goes into the
    /// partition's log stamped with its entry's id, and into the state unless this node proposed
    /// it.
    pub(crate) fn apply_batch(&self, log_id: &LogId, payload: &Bytes) -> Result<(), String> {
        let mut batch = payload.to_vec();
        stamp_log_id(&mut batch, log_id)?;
        let now = now_ms();
        self.log.append(&batch, now).map_err(|e| e.to_string())?;
        if log_id.index < self.local_from.get() {
            let records = replicated::decode_batch(Bytes::from(batch))?;
            let mut state = self.state.borrow_mut();
            for record in replicated::group_records(records, 0) {
                state.replay(record, now);
            }
        }
        // On every member, leader or follower: each purges its own Raft log.
        self.maybe_snapshot();
        Ok(())
    }

    /// Asks the Raft group for a snapshot once the partition's log has grown well beyond the
    /// last checkpoint.
    fn maybe_snapshot(&self) {
        let size = self.log.log.borrow().size_bytes();
        let threshold = CHECKPOINT_MIN_BYTES.max(self.checkpoint_size.get() * 2);
        if size < threshold || self.snapshot_requested.get() {
            return;
        }
        let Some(raft) = self.raft().cloned() else {
            return;
        };
        self.snapshot_requested.set(true);
        tokio::task::spawn_local(async move {
            if let Err(e) = raft.trigger().snapshot().await {
                tracing::error!(error = %e, "cannot trigger a coordinator snapshot");
            }
        });
    }

    /// Rewrites the partition's log as the live state at `applied` (every batch stamped with it),
    /// fsyncs it, drops the segments before it, and returns the batches written (the snapshot).
    /// The live state is read back from the log itself, which holds exactly the applied entries:
    /// a leader's state may already hold records of entries not yet committed.
    pub(crate) fn checkpoint(&self, applied: Option<LogId>) -> Result<Vec<u8>, StorageError> {
        let now = now_ms();
        let mut applied_state = self.fresh_state();
        for_each_record(&self.log, |record| applied_state.replay(record, now))?;
        let data = self.rewrite(live_records(&applied_state), applied)?;
        let after = self.log.log.borrow().size_bytes();
        tracing::info!(partition = self.index, bytes = after, applied = ?applied, "checkpointed coordinator partition");
        self.checkpoint_size.set(after);
        self.snapshot_requested.set(false);
        Ok(data)
    }

    /// An empty state with this partition's settings.
    fn fresh_state(&self) -> CoordinatorState {
        let state = self.state.borrow();
        CoordinatorState::with_consumer_config(state.config.clone(), state.consumer.clone())
    }

    /// Replaces the state with a snapshot's (from the group's leader) and rewrites the log.
    pub(crate) fn install(&self, data: &[u8], applied: Option<LogId>) -> Result<(), String> {
        let now = now_ms();
        let mut fresh = self.fresh_state();
        let mut rest = Bytes::copy_from_slice(data);
        while !rest.is_empty() {
            let header = crate::record_batch::BatchHeader::parse(&rest).map_err(|e| e.to_string())?;
            if header.total_len() > rest.len() {
                return Err("snapshot ends inside a batch".into());
            }
            let batch = rest.split_to(header.total_len());
            for record in replicated::group_records(replicated::decode_batch(batch)?, 0) {
                fresh.replay(record, now);
            }
        }
        let records = live_records(&fresh);
        *self.state.borrow_mut() = fresh;
        self.fail_waiters();
        self.rewrite(records, applied).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Writes `records` as a checkpoint in a fresh segment, fsyncs it and deletes what precedes
    /// it. An empty state still writes one batch, so the log keeps saying what was applied.
    fn rewrite(&self, mut records: Vec<GroupRecord>, applied: Option<LogId>) -> Result<Vec<u8>, StorageError> {
        let now = now_ms();
        if records.is_empty() {
            // A tombstone of no group: replaying it changes nothing.
            records.push(GroupRecord::Group { group: String::new(), value: None });
        }
        let mut data = Vec::new();
        let mut log = self.log.log.borrow_mut();
        log.roll(now)?;
        let start = log.log_end_offset();
        for chunk in split_records(records, self.max_batch_bytes()) {
            let mut batch = encode_batch(&chunk, now).to_vec();
            if let Some(id) = &applied {
                stamp_log_id(&mut batch, id).expect("our own batches carry the header");
            }
            log.append(&batch, now)?;
            data.extend_from_slice(&batch);
        }
        for file in log.take_unsynced()? {
            file.sync_data()?;
        }
        log.delete_segments_before(start)?;
        drop(log);
        self.log.publish_end_offset();
        Ok(data)
    }

    async fn timer_loop(self: Rc<Self>) {
        loop {
            let next = self.timers.borrow().peek().map(|Reverse((at, _))| *at);
            match next {
                None => self.wake.notified().await,
                Some(at) => {
                    let delay = (at - now_ms()).max(0) as u64;
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(delay)) => {}
                        _ = self.wake.notified() => continue,
                    }
                }
            }
            let now = now_ms();
            loop {
                let due = {
                    let mut timers = self.timers.borrow_mut();
                    match timers.peek() {
                        Some(Reverse((at, _))) if *at <= now => timers.pop().map(|Reverse((_, seq))| seq),
                        _ => None,
                    }
                };
                let Some(seq) = due else { break };
                let Some(key) = self.timer_keys.borrow_mut().remove(&seq) else {
                    continue;
                };
                self.state.borrow_mut().fire(now, &key);
                self.run_effects();
            }
        }
    }

    async fn expiration_loop(self: Rc<Self>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(self.expiration_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if !self.serving() {
                continue;
            }
            let expired = self.with_state(|s, now| s.expire_offsets(now));
            if expired > 0 {
                tracing::info!(partition = self.index, expired, "expired committed offsets");
            }
        }
    }

    /// Drops every waiter: their connections answer COORDINATOR_NOT_AVAILABLE (shutdown).
    pub fn fail_waiters(&self) {
        self.waiting.borrow_mut().clear();
    }

    /// Before a clean shutdown of a cluster node: stops serving and hands the group's leadership
    /// to another node (see [`crate::raft::hand_off`]), if this node leads it.
    pub async fn hand_off(&self, peers: &crate::raft::transport::Peers) {
        self.leaving.set(true);
        if self.serving.get() {
            self.step_down("shutting down");
        }
        let Some(election) = self.election.get() else {
            return;
        };
        if election.raft().metrics().borrow().current_leader != Some(self.node_id) {
            return;
        }
        match crate::raft::hand_off(election, self.node_id, self.index as u32, peers).await {
            Ok(to) => tracing::info!(partition = self.index, to, "handed coordinator leadership over"),
            Err(why) => {
                tracing::info!(partition = self.index, %why, "could not hand coordinator leadership over; the others will elect a leader")
            }
        }
    }

    /// Stops the partition's Raft group (clean shutdown); waiting requests are dropped.
    pub async fn shutdown(&self) {
        self.serving.set(false);
        self.leader.set(None);
        self.fail_waiters();
        if let Some(raft) = self.raft() {
            if let Err(e) = raft.shutdown().await {
                tracing::warn!(partition = self.index, error = %e, "Raft group did not shut down cleanly");
            }
        }
    }

    pub fn group_count(&self) -> usize {
        self.state.borrow().groups.len()
    }
}

/// Raft write failures as coordinator clients see them (spec §1.4): this node does not lead the
/// partition (any more), or its log failed; either way clients look for the coordinator again.
fn raft_error_code(e: &openraft::error::RaftError<u64, openraft::error::ClientWriteError<u64, BasicNode>>) -> ResponseError {
    match e {
        openraft::error::RaftError::APIError(_) | openraft::error::RaftError::Fatal(_) => ResponseError::NotCoordinator,
    }
}

/// The records that rebuild the current durable state: every committed offset, and the metadata
/// of every group that is not mid-rebalance (those write theirs when their rebalance completes).
fn live_records(state: &CoordinatorState) -> Vec<GroupRecord> {
    let mut records = Vec::new();
    for group in state.groups.values() {
        if matches!(group.state, GroupState::Stable | GroupState::Empty) && group.protocol_type.is_some() {
            records.push(CoordinatorState::group_record(group, None));
        }
    }
    for group in state.consumer_groups.values() {
        records.extend(CoordinatorState::consumer_group_records(group));
    }
    for (group, offsets) in &state.offsets {
        for ((topic, partition), value) in offsets {
            records.push(GroupRecord::Offset {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: Some(value.clone()),
            });
        }
    }
    records
}

/// Splits records into batches of at most `max_bytes` and [`MAX_RECORDS_PER_BATCH`] records each, in
/// order; a record larger than `max_bytes` on its own is a batch of its own (the partition's log
/// takes any batch the Raft log committed).
fn split_records(records: Vec<GroupRecord>, max_bytes: usize) -> Vec<Vec<GroupRecord>> {
    let empty = super::records::batch_bytes(&[]);
    let mut pieces: Vec<Vec<GroupRecord>> = Vec::new();
    let mut bytes = empty;
    for record in records {
        let size = record.batch_bytes();
        match pieces.last_mut() {
            Some(piece) if bytes + size <= max_bytes && piece.len() < MAX_RECORDS_PER_BATCH => {
                bytes += size;
                piece.push(record);
            }
            _ => {
                bytes = empty + size;
                pieces.push(vec![record]);
            }
        }
    }
    pieces
}

/// Reads every record of a coordinator partition's log, oldest first; returns the id of the
/// last Raft entry the log holds.
fn for_each_record(log: &Partition, mut f: impl FnMut(GroupRecord)) -> Result<Option<LogId>, StorageError> {
    let log = log.log.borrow();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut applied = None;
    let unreadable = |reason| StorageError::Batch(crate::record_batch::BatchError::Invalid(reason));
    while offset < end {
        let read = log.read(offset, 4 * 1024 * 1024, true)?;
        let Some(slice) = read.slice else { break };
        let mut buf = vec![0u8; slice.len as usize];
        slice.file.read_exact_at(&mut buf, slice.position)?;
        let mut bytes = Bytes::from(buf);
        let mut last = offset;
        while bytes.len() >= crate::record_batch::HEADER_LEN {
            let header = crate::record_batch::BatchHeader::parse(&bytes).map_err(StorageError::Batch)?;
            if header.total_len() > bytes.len() {
                break;
            }
            let records = replicated::decode_batch(bytes.split_to(header.total_len())).map_err(unreadable)?;
            if let Some(id) = records.first().and_then(replicated::stamped_log_id) {
                applied = Some(id);
            }
            replicated::group_records(records, offset).for_each(&mut f);
            last = header.last_offset() + 1;
        }
        if last <= offset {
            break;
        }
        offset = last;
    }
    Ok(applied)
}
