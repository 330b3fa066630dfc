//! Raft: how corral makes the coordinator's state durable and replicated (openraft 0.9,
//! `storage-v2`, `singlethreaded`).
//!
//! # Raft groups
//!
//! Every group in a node shares the one [`TypeConfig`] declared here:
//!
//! - **One group per coordinator partition** (`__consumer_offsets` partition `p`). Its leader is
//!   the group coordinator for every consumer group that hashes to `p`. What must survive a crash —
//!   group metadata at sync, committed offsets, member changes of KIP-848 groups — is a
//!   [`Command`] in its log, holding records in Kafka's `__consumer_offsets` key/value layouts so
//!   the internal topic can be served to tools that read it. Raft `apply` replays them through the
//!   same sans-I/O group state machine the leader runs.
//! - **One metadata group**: the topics, their configs and the node each partition is placed on
//!   (`crate::cluster::metadata_group`). Every node applies its entries to its topic catalog.
//!
//! A single node is a one-voter cluster: the same code path, durable on its own disk. Heartbeat
//! liveness stays in memory on the leader, as in Kafka; it is never logged.
//!
//! # Layout
//!
//! - [`election`]: when a member stands for election (a pre-vote, then openraft's vote).
//! - [`log_store`]: [`RaftLogStore`], the log on our own segment files, with group commit (many
//!   appends share one fsync) and torn-tail recovery.
//! - `entry_codec`: the binary format of log records and of the small vote / committed / purged
//!   files beside them.
//! - [`network`]: the network of a single node's one-voter groups, which has no peers to reach.
//! - [`transport`]: the network of a cluster: every group's RPCs to one peer share one TCP
//!   connection, and peers' requests are run on the shard that owns their group.
//!
//! The coordinator's state machine is `crate::coordinator::replicated`; the metadata group's is
//! `crate::cluster::metadata_group`.
//!
//! # Runtime
//!
//! With openraft's `singlethreaded` feature nothing here needs `Send`: a Raft instance, its log
//! store and its state machine live on the shard that owns the partition, on that shard's
//! `LocalSet` (openraft spawns its tasks with `spawn_local`, so `Raft::new` must run inside one).
//! Only the fsyncs leave the shard thread, on tokio's blocking pool, and the bytes to and from
//! other nodes, on the `raft-net` thread.

pub mod election;
mod entry_codec;
pub mod log_store;
pub mod network;
pub mod peer_auth;
pub mod transport;

/// The metadata group's id on the Raft links; coordinator partitions use their index.
pub const METADATA_GROUP: u32 = u32::MAX;

use bytes::Bytes;

pub use entry_codec::CodecError;
pub(crate) use log_store::{read_state_file, write_state_file};
pub use log_store::{LogReader, LogStoreConfig, LogStoreError, LogSyncHandle, RaftLogStore, RecoveryReport, SyncStats};

openraft::declare_raft_types!(
    /// The openraft type configuration of every corral Raft group.
    pub TypeConfig:
        D = Command,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A node's id in every Raft group (the broker id).
pub type NodeId = u64;
/// A log entry of any corral Raft group.
pub type Entry = openraft::Entry<TypeConfig>;
/// `(leader id, index)` of a log entry.
pub type LogId = openraft::LogId<NodeId>;
/// A persisted vote.
pub type Vote = openraft::Vote<NodeId>;
/// Voters and learners of a group, with their addresses.
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
/// The error every storage call returns to openraft.
pub type StorageError = openraft::StorageError<NodeId>;
/// A running Raft group.
pub type Raft = openraft::Raft<TypeConfig>;
/// The membership a state machine last applied, with the id of the entry that carried it.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;

/// The largest command a node proposes: well under the log's record limit
/// ([`entry_codec::MAX_BODY_LEN`]) and the transport's frame, which carries one entry at the
/// least, so a follower that lags can always catch up.
pub const MAX_COMMAND_BYTES: usize = 64 << 20;

/// Length of a log id in its binary form (`term | node id | index`, u64 each, big-endian).
pub const LOG_ID_LEN: usize = 24;

/// A log id in its binary form, as the coordinator stamps it into `__consumer_offsets` batches.
pub fn log_id_bytes(log_id: &LogId) -> [u8; LOG_ID_LEN] {
    let mut out = [0u8; LOG_ID_LEN];
    out.copy_from_slice(&entry_codec::encode_log_id(log_id));
    out
}

/// Reads a log id written by [`log_id_bytes`].
pub fn parse_log_id(bytes: &[u8]) -> Result<LogId, CodecError> {
    entry_codec::decode_log_id(bytes)
}

/// Encodes a state machine's applied membership (for a small state file beside its log).
pub fn encode_stored_membership(stored: &StoredMembership) -> Vec<u8> {
    entry_codec::encode_stored_membership(stored)
}

pub fn decode_stored_membership(bytes: &[u8]) -> Result<StoredMembership, CodecError> {
    entry_codec::decode_stored_membership(bytes)
}

/// Timers of a coordinator partition's Raft group. Snapshots are triggered by the coordinator
/// itself, by how much its `__consumer_offsets` partition has grown, not by entry count: one
/// entry holds a whole batch of records.
pub fn coordinator_config() -> Result<std::sync::Arc<openraft::Config>, Box<openraft::ConfigError>> {
    let keep = openraft::Config::default().max_in_snapshot_log_to_keep;
    group_config("corral-coordinator", openraft::SnapshotPolicy::Never, keep)
}

/// Timers of the metadata group: as a coordinator partition's. Its entries are single topic
/// changes, so a snapshot (the whole catalog, small) every thousand of them bounds what a restart
/// replays; the log is purged up to each snapshot, and a node that lags further installs it.
pub fn metadata_config() -> Result<std::sync::Arc<openraft::Config>, Box<openraft::ConfigError>> {
    group_config("corral-metadata", openraft::SnapshotPolicy::LogsSinceLast(METADATA_SNAPSHOT_EVERY), 0)
}

/// Entries of the metadata group between two snapshots.
pub const METADATA_SNAPSHOT_EVERY: u64 = 1000;

/// openraft's election timer runs for one-voter groups only (they elect themselves at once);
/// in a cluster [`election::Election`] decides when a member stands. `election_timeout_max` is
/// openraft's leader lease: a voter refuses votes for that long after it heard from a leader.
fn group_config(
    name: &str,
    snapshot_policy: openraft::SnapshotPolicy,
    keep_after_snapshot: u64,
) -> Result<std::sync::Arc<openraft::Config>, Box<openraft::ConfigError>> {
    let lease = election::LEASE.as_millis() as u64;
    let config = openraft::Config {
        cluster_name: name.into(),
        heartbeat_interval: 100,
        election_timeout_min: lease / 2,
        election_timeout_max: lease,
        snapshot_policy,
        max_in_snapshot_log_to_keep: keep_after_snapshot,
        ..Default::default()
    };
    Ok(std::sync::Arc::new(config.validate().map_err(Box::new)?))
}

/// Brings up a group that has just been started: a new group is initialized with `members`
/// (every member does so alike; openraft allows it, and each stands for election once). Refuses
/// a group whose voters are not the configured nodes. A one-voter group then elects itself;
/// [`election::Election`] runs the elections of the others.
pub async fn join_group(
    raft: &Raft,
    node_id: NodeId,
    members: &std::collections::BTreeMap<NodeId, openraft::BasicNode>,
    timeout: std::time::Duration,
) -> Result<(), String> {
    let fatal = |e: openraft::error::Fatal<NodeId>| format!("its Raft group failed: {e}");
    if !raft.is_initialized().await.map_err(fatal)? {
        raft.initialize(members.clone()).await.map_err(|e| format!("cannot initialize its Raft group: {e}"))?;
    }
    let has_voters = |m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>| m.membership_config.membership().voter_ids().next().is_some();
    let metrics = raft.wait(Some(timeout)).metrics(has_voters, "membership").await.map_err(|e| format!("has no membership: {e}"))?;
    let voters: Vec<NodeId> = metrics.membership_config.membership().voter_ids().collect();
    let configured: Vec<NodeId> = members.keys().copied().collect();
    if !voters.contains(&node_id) {
        return Err(format!(
            "its Raft group's voters are {voters:?}, which do not include node.id {node_id}; this data directory belongs to another node"
        ));
    }
    if voters != configured {
        return Err(format!(
            "its Raft group's voters are {voters:?} but cluster.nodes lists {configured:?}; changing the nodes of an existing cluster is not supported"
        ));
    }
    Ok(())
}

/// How long a leader that is shutting down tries to hand its leadership over.
const HAND_OFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// How long one candidate gets to take over before it is asked again.
const HAND_OFF_ATTEMPT: std::time::Duration = std::time::Duration::from_millis(400);

/// Hands leadership of a group this node leads to another voter, before a clean shutdown: once a
/// voter holds every entry, it is asked to stand for election at once. This node grants it the
/// vote once its own leader lease has run out (its maximum election timeout after it was
/// elected), which with the candidate's own vote is a quorum of three; the third voter still
/// refuses while it hears from a leader. Clients then find the new leader in milliseconds
/// instead of after an election timeout. A candidate refused (this node was elected too
/// recently) is asked again until [`HAND_OFF_TIMEOUT`]; this node stands for election no more.
/// Returns the new leader, or why none took over (the others then elect one as after a crash).
/// The caller stops proposing first, so the log stops growing.
pub async fn hand_off(election: &election::Election, me: NodeId, group: u32, peers: &transport::Peers) -> Result<NodeId, String> {
    // This node still votes, but must not stand against its successor once it steps down.
    election.withdraw();
    let raft = election.raft();
    let deadline = tokio::time::Instant::now() + HAND_OFF_TIMEOUT;
    let mut unreachable = std::collections::BTreeSet::new();
    let mut last_error = String::from("no other voter holds every entry");
    let handed = |m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>| m.current_leader.is_some_and(|l| l != me);
    // Waits up to one attempt's time for another node to lead.
    let taken_over = || async {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let moved = raft.wait(Some(remaining.min(HAND_OFF_ATTEMPT))).metrics(handed, "leadership handed off").await;
        moved.ok().and_then(|m| m.current_leader)
    };
    loop {
        let (leader, successor) = {
            let m = raft.metrics().borrow().clone();
            if let Some(new_leader) = m.current_leader.filter(|_| handed(&m)) {
                return Ok(new_leader);
            }
            let caught_up =
                |v: &NodeId| m.replication.as_ref().and_then(|r| r.get(v)).is_some_and(|l| l.map(|l| l.index) == m.last_log_index);
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().filter(|&v| v != me).collect();
            if voters.iter().all(|v| unreachable.contains(v)) {
                return Err(last_error);
            }
            (m.current_leader, voters.into_iter().find(|v| caught_up(v) && !unreachable.contains(v)))
        };
        match (leader, successor) {
            // This node (the only leader left to see) no longer leads: a candidate is being
            // elected, or has won and not yet been heard from.
            (None, _) => {
                if let Some(new_leader) = taken_over().await {
                    return Ok(new_leader);
                }
            }
            (Some(_), Some(successor)) => match peers.elect(successor, group).await {
                Ok(()) => {
                    if let Some(new_leader) = taken_over().await {
                        return Ok(new_leader);
                    }
                    last_error = format!("node {successor} stood for election but did not take over");
                }
                Err(e) => {
                    unreachable.insert(successor);
                    last_error = format!("node {successor} would not stand for election: {e}");
                }
            },
            // Still leading, no voter caught up yet.
            (Some(_), None) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(last_error);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The application data of a log entry: an opaque payload. The coordinator puts encoded
/// `__consumer_offsets` record batches in it; the log store stores and returns the bytes as they
/// are and never looks inside.
#[derive(Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Command {
    payload: Bytes,
}

impl Command {
    pub fn new(payload: Bytes) -> Command {
        Command { payload }
    }

    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    pub fn into_payload(self) -> Bytes {
        self.payload
    }
}

impl std::fmt::Debug for Command {
    /// The length only: payloads are record batches, too long and too binary for a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command").field("len", &self.payload.len()).finish()
    }
}

impl From<Bytes> for Command {
    fn from(payload: Bytes) -> Command {
        Command::new(payload)
    }
}
