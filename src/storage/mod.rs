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
//!     recovery-point, log-start-offset  where crash recovery starts; where DeleteRecords moved the start
//!     cleaner-offset-checkpoint        where the last compaction ended (compacted topics)
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
pub use log::compaction::{CleanError, Cleaned, CleanerPlan};
pub use log::{AppendInfo, OpenReport, PartitionLog, ReadInfo, RetentionReport};
pub use open_files::{per_shard_budget, OpenFiles};
pub use partition::Partition;
pub use producer_state::SequenceError;
pub use segment::SyncTarget;
pub use timestamp_scan::TimestampLookup;

/// Per-partition log settings (the topic's configs over the broker defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub index_interval_bytes: u32,
    pub max_message_bytes: u32,
    /// Idempotent producers tracked per partition (`storage.max_producer_states_per_partition`).
    pub max_producer_states: usize,
    pub cleanup: CleanupPolicy,
    pub compaction: CompactionConfig,
}

#[cfg(test)]
impl LogConfig {
    /// One large segment, no retention, Kafka's defaults otherwise.
    pub(crate) fn for_tests() -> LogConfig {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: i64::MAX / 2,
            retention_bytes: -1,
            retention_ms: -1,
            index_interval_bytes: 4096,
            max_message_bytes: 1 << 20,
            max_producer_states: 10_000,
            cleanup: CleanupPolicy { delete: true, compact: false },
            compaction: CompactionConfig {
                delete_retention_ms: 86_400_000,
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                min_dirty_ratio: 0.5,
                buffer_bytes: 1 << 20,
            },
        }
    }
}

/// `cleanup.policy`: what removes old records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Retention (`retention.ms`, `retention.bytes`) deletes old segments.
    pub delete: bool,
    /// The cleaner keeps the last record of each key ([`log::compaction`]).
    pub compact: bool,
}

/// The settings of a compacted log (Kafka's names in the comments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionConfig {
    /// `delete.retention.ms`: how long a tombstone is kept, from its record time.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment is compacted only once all its records are this old.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment this old is compacted whatever the ratio.
    pub max_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of the log written since the last compaction that
    /// starts the next.
    pub min_dirty_ratio: f64,
    /// `storage.cleaner_dedupe_buffer_bytes`: the most the key map of one compaction may hold.
    pub buffer_bytes: u64,
}

#[cfg(test)]
mod tests;
