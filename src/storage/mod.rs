//! Local partition storage: Kafka's on-disk log format, read back as file slices.
//!
//! # Layout
//!
//! ```text
//! <data_dir>/<topic>-<partition>/
//!     00000000000000000000.log         record batches (v2), as producers sent them
//!     00000000000000000000.index       sparse offset -> position (written when sealed)
//!     00000000000000000000.timeindex   sparse timestamp -> offset (written when sealed)
//!     producer.snapshot                idempotent-producer state, written at clean shutdown
//! ```
//!
//! [`log::PartitionLog`] is the synchronous core (append, read, roll, retention, recovery);
//! [`partition::Partition`] wraps it for its owning shard: background fsyncs with group commit
//! and the log-end watch that wakes long-polling fetches on every shard. [`OpenFiles`] is the
//! shard's budget of open segment files: partitions hold no descriptors of their own.

mod end_offsets;
mod error;
mod index;
pub mod log;
mod open_files;
pub mod partition;
mod producer_state;
mod segment;
mod timestamp_scan;

pub use crate::chunk::FileSlice;
pub use end_offsets::EndOffsets;
pub use error::StorageError;
pub use log::{AppendInfo, OpenReport, PartitionLog, ReadInfo, RetentionReport};
pub use open_files::{per_shard_budget, OpenFiles};
pub use partition::Partition;
pub use producer_state::SequenceError;
pub use segment::SyncTarget;
pub use timestamp_scan::TimestampLookup;

/// Per-partition log settings (the topic's configs over the broker defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub index_interval_bytes: u32,
    pub max_message_bytes: u32,
    /// Idempotent producers tracked per partition (`storage.max_producer_states_per_partition`).
    pub max_producer_states: usize,
}

#[cfg(test)]
mod tests;
