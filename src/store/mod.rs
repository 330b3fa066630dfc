//! The partition store: the one boundary between the data APIs (Produce, Fetch, ListOffsets,
//! DeleteRecords) and wherever a partition's records live.
//!
//! Handlers in `api/` name partitions and say what they want; a store decides where each
//! partition's data is ([`placement`]) and goes there. Handlers never borrow a log, check
//! leadership or pick a shard themselves.
//!
//! Implementations:
//! - [`local::LocalStore`]: Kafka segment files on this node, each partition on the shard that
//!   owns it (reached through the mesh); reads are file ranges, sent with sendfile(2).
//! - [`upstream::UpstreamStore`]: an existing Kafka cluster; reads are bytes as the upstream sent
//!   them. corral's own topic (`__consumer_offsets`) stays in local segments.
//!
//! Every implementation passes the same conformance suite (`tests/it/t25_store.rs`).
//!
//! A store lives on one shard (`Rc`, `!Send`): each shard has its own.

pub mod local;
pub mod placement;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use kafka_protocol::ResponseError;

use crate::chunk::Chunk;
use crate::cluster::catalog::Topic;
pub use crate::protocol::fetch_response::AbortedTransaction;
use crate::storage::StorageError;

/// One partition of a topic the catalog knows.
#[derive(Debug, Clone)]
pub struct PartitionRef {
    pub topic: Arc<Topic>,
    pub index: i32,
}

/// One record batch to append (Produce v3+ carries exactly one per partition).
#[derive(Debug)]
pub struct Append {
    pub partition: PartitionRef,
    /// A whole v2 record batch, as the producer sent it.
    pub batch: Bytes,
}

/// What one Produce asks of the store.
#[derive(Debug)]
pub struct AppendPlan {
    pub batches: Vec<Append>,
    /// 0, 1 or -1 (all in-sync replicas), as the producer asked.
    pub acks: i16,
    /// How long the producer waits for the answer.
    pub timeout: Duration,
    /// Names the producing client connection: appends with the same lane keep their order on
    /// the way to an upstream, those of different lanes may be worked on side by side.
    pub lane: usize,
}

/// Where an appended batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

/// What one Fetch asks of the store: the partitions in request order, and the request's limits.
#[derive(Debug)]
pub struct FetchPlan {
    pub partitions: Vec<PartitionFetch>,
    /// Bytes of records the response may hold, across partitions (KIP-74: the first partition
    /// with data always keeps its whole first batch).
    pub max_bytes: u64,
    /// Answer as soon as this many bytes are there...
    pub min_bytes: u64,
    /// ...or once this long has passed (zero: answer at once).
    pub max_wait: Duration,
    /// 0: read uncommitted, 1: read committed (up to the last stable offset).
    pub isolation_level: i8,
}

#[derive(Debug)]
pub struct PartitionFetch {
    pub partition: PartitionRef,
    pub fetch_offset: i64,
    pub max_bytes: u64,
    /// The leader epoch the client believes in (-1: none).
    pub current_leader_epoch: i32,
}

/// One partition's part of a fetch.
#[derive(Debug, Default)]
pub struct PartitionData {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Whole record batches (the last one possibly cut short, as Kafka sends it); `None`: none.
    pub records: Option<Chunk>,
    /// Transactions aborted among the records (a read-committed fetch from an upstream; local
    /// partitions hold no transactions).
    pub aborted_transactions: Vec<AbortedTransaction>,
}

/// What a ListOffsets entry asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log end offset (-1).
    Latest,
    /// The log start offset (-2).
    Earliest,
    /// The first offset kept locally (-4); with no tiered storage, the log start offset.
    EarliestLocal,
    /// The record with the largest timestamp (-3).
    MaxTimestamp,
    /// The last tiered offset (-5): nothing is tiered.
    LatestTiered,
    /// The first record whose timestamp is at or after this one.
    AtOrAfter(i64),
    /// As `AtOrAfter`, but the log end offset when every record is older (ListOffsets v0).
    AtOrAfterElseEnd(i64),
    /// Nothing matches; the partition is still checked (ListOffsets v0's other negative values).
    NoMatch,
}

#[derive(Debug, Clone)]
pub struct OffsetQuery {
    pub partition: PartitionRef,
    pub spec: OffsetSpec,
    pub current_leader_epoch: i32,
    /// 0: read uncommitted, 1: read committed (the latest offset is then the last stable one).
    pub isolation_level: i8,
}

/// What a DeleteRecords entry asks for: every record of the partition below `offset` deleted.
#[derive(Debug, Clone)]
pub struct Deletion {
    pub partition: PartitionRef,
    /// The new log start offset; -1: the high watermark (delete every record).
    pub offset: i64,
}

/// DeleteRecords' offset that names the high watermark.
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// A found offset: `(offset, timestamp)`, the timestamp -1 where the spec has none.
pub type FoundOffset = Option<(i64, i64)>;

/// Results in the order of what was asked.
pub type Results<T> = Vec<Result<T, StoreError>>;

/// Where partition data lives, seen from one shard.
pub trait PartitionStore: std::fmt::Debug {
    /// Starts the appends, each partition's in the order given, before the returned future is
    /// first polled (the outer future completes once they are queued where they will be
    /// written, so pipelined produces keep their order). The inner future completes once each
    /// batch is stored as the acks and the flush policy require.
    fn append(&self, plan: AppendPlan) -> LocalBoxFuture<'_, LocalBoxFuture<'static, Results<Appended>>>;

    /// Reads each partition from its fetch offset; waits (up to `max_wait`) until `min_bytes`
    /// are there, an error is to be reported, or the node shuts down.
    fn fetch(&self, plan: FetchPlan) -> LocalBoxFuture<'static, Results<PartitionData>>;

    /// Answers each query.
    fn list_offsets(&self, queries: Vec<OffsetQuery>) -> LocalBoxFuture<'static, Results<FoundOffset>>;

    /// Moves each partition's log start offset up to the deletion's offset; answers the log
    /// start offset after it (Kafka's low watermark). An offset past the high watermark is
    /// OFFSET_OUT_OF_RANGE; one at or below the log start changes nothing.
    fn delete_records(&self, deletions: Vec<Deletion>) -> LocalBoxFuture<'static, Results<i64>>;
}

/// Why the store could not serve a partition; one mapping to Kafka error codes.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("partition {partition} is on node {leader}")]
    NotLeader { partition: i32, leader: i32 },
    #[error("this server does not host this topic-partition")]
    UnknownPartition,
    #[error("the leader epoch {0} is not known (corral's partitions keep epoch 0)")]
    UnknownLeaderEpoch(i32),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("fsync failed: {0}")]
    Flush(String),
    #[error("{0}")]
    Unavailable(&'static str),
    #[error("{0}")]
    Failed(&'static str),
    /// The upstream's own error for the partition; for a produce, the records it refused one by
    /// one (KIP-467), passed on to the client.
    #[error("upstream error {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Upstream { code: i16, message: Option<String>, record_errors: Vec<(i32, String)> },
    #[error(transparent)]
    UpstreamUnavailable(#[from] crate::upstream::UpstreamError),
}

impl StoreError {
    /// The records of a batch refused one by one (KIP-467): index and why.
    pub fn record_errors(&self) -> Vec<(i32, String)> {
        match self {
            StoreError::Storage(e) => e.record_errors(),
            StoreError::Upstream { record_errors, .. } => record_errors.clone(),
            _ => Vec::new(),
        }
    }

    pub fn code(&self) -> ResponseError {
        match self {
            StoreError::NotLeader { .. } => ResponseError::NotLeaderOrFollower,
            StoreError::UnknownPartition => ResponseError::UnknownTopicOrPartition,
            StoreError::UnknownLeaderEpoch(_) => ResponseError::UnknownLeaderEpoch,
            StoreError::Storage(e) => e.error_code(),
            StoreError::Flush(_) => ResponseError::KafkaStorageError,
            StoreError::Unavailable(_) => ResponseError::RequestTimedOut,
            StoreError::Failed(_) => ResponseError::UnknownServerError,
            StoreError::Upstream { code, .. } => ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError),
            // The client refreshes its metadata and tries again, as after a broker went away.
            StoreError::UpstreamUnavailable(crate::upstream::UpstreamError::Timeout(_)) => ResponseError::RequestTimedOut,
            StoreError::UpstreamUnavailable(_) => ResponseError::NotLeaderOrFollower,
        }
    }
}
