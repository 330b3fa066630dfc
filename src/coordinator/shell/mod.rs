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
//!
//! # Layout
//!
//! One runner per partition ([`PartitionRunner`], here: loading, carrying out the state
//! machine's effects, the rebalances its events describe), its concerns each in a file:
//! `leadership.rs` (serving while this node leads), `proposals.rs` (records into Raft entries),
//! `offsets_log.rs` (the `__consumer_offsets` log: applying, checkpoints, snapshots) and
//! `timers.rs` (the state machine's timers, offset expiration).

mod leadership;
pub mod offsets_log;
mod proposals;
mod timers;

use std::cell::{Cell, OnceCell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use openraft::{BasicNode, ServerState};
use tokio::sync::{oneshot, Notify};

use super::events::GroupEvent;
use super::group::Token;
use super::log_batch::{encode_batch, split_records};
use super::outbox::{Effect, Response, TimerKey};
use super::rebalances::{RebalanceHistory, RebalanceTracker};
use super::records::{GroupRecord, StoredRecord};
use super::replicated::CoordinatorStateMachine;
use super::state::{CoordinatorState, GroupConfig};
use crate::clock::now_ms;
use crate::raft::election::{Canvass, Election};
use crate::raft::{Command, LogStoreConfig, Raft, RaftLogStore};
use crate::storage::Partition;

use self::offsets_log::OffsetsLog;
use self::proposals::Proposals;

/// How long a one-voter partition may take to elect itself and catch up at startup.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

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

/// One coordinator partition: its state machine and what runs it. Lives on its owning shard.
pub struct PartitionRunner {
    pub index: i32,
    /// The state machine; shared with `offsets`, which applies committed entries to it.
    pub state: Rc<RefCell<CoordinatorState>>,
    /// The partition's `__consumer_offsets` log, as the Raft state machine reaches it.
    offsets: Rc<OffsetsLog>,
    /// The partition's Raft group, with what decides when this node stands for election.
    election: OnceCell<Rc<Election>>,
    proposals: RefCell<Proposals>,
    node_id: u64,
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
    expiration_interval_ms: u64,
    /// Rebalances in progress on this partition, from the state machine's events.
    rebalances: RefCell<RebalanceTracker>,
    /// The last rebalances of each group, while this node coordinates the partition.
    pub history: RefCell<RebalanceHistory>,
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
        consumer: super::consumer_group::ConsumerGroupConfig,
        expiration_interval_ms: u64,
        raft: RaftSettings,
        network: N,
    ) -> Result<Rc<Self>, String> {
        let state = CoordinatorState::with_consumer_config(config, consumer);
        let (offsets, applied, records) = OffsetsLog::load(index, log, state).map_err(|e| format!("cannot read its log: {e}"))?;
        let runner = Rc::new(PartitionRunner {
            index,
            state: offsets.state().clone(),
            offsets: offsets.clone(),
            election: OnceCell::new(),
            proposals: RefCell::default(),
            node_id: raft.node_id,
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
            expiration_interval_ms,
            rebalances: RefCell::default(),
            history: RefCell::default(),
        });

        let store = RaftLogStore::open(&raft.dir, LogStoreConfig::default())
            .await
            .map_err(|e| format!("cannot open its Raft log in {}: {e}", raft.dir.display()))?;
        let machine = CoordinatorStateMachine::open(offsets, applied, raft.dir.clone())?;
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
        tokio::task::spawn_local(runner.clone().snapshot_loop());
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
            slowest = ?done.slowest.iter().map(|m| format!("{} {} after {} ms", m.member, m.step.name(), m.after_ms)).collect::<Vec<_>>(),
            "rebalance completed"
        );
        crate::metrics::rebalance_completed(done.kind.name(), done.cause.trigger(), done.total_ms, done.join_ms.zip(done.sync_ms));
        self.history.borrow_mut().record(done);
    }

    /// Drops every waiter: their connections answer COORDINATOR_NOT_AVAILABLE (shutdown).
    pub fn fail_waiters(&self) {
        self.waiting.borrow_mut().clear();
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
