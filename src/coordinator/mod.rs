//! The group coordinator: consumer groups run by corral itself.
//!
//! # Layout
//!
//! Groups map to a coordinator partition with Kafka's own formula ([`partition_for`]), so the
//! partition numbers match a Kafka cluster's `__consumer_offsets`. Each partition has one
//! [`state::CoordinatorState`]: a pure state machine (requests and timer firings in, responses,
//! timers and records out) that lives on the shard owning the partition. The shell
//! ([`shell`]) runs it: it keeps the timers, appends records to the partition's log and routes
//! responses back to the waiting connections.
//!
//! - [`group`]: a classic group and its members.
//! - [`classic`]: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalance timers.
//! - [`offsets`]: OffsetCommit, OffsetFetch, OffsetDelete, offset expiration.
//! - [`admin`]: ListGroups, DescribeGroups, DeleteGroups.
//! - [`consumer`]: the KIP-848 protocol; [`migration`]: conversions between it and the classic one.
//! - [`records`]: the `__consumer_offsets` record formats.
//! - [`events`]: what happened in a group (rebalances and their causes, members, offsets), an
//!   effect like the others for metrics, history and the log to consume.
//! - [`rebalances`]: rebalances followed from those events, from their start to their end.
//! - [`router`]: the coordinator's operations as the group APIs call them, wherever it runs.

pub mod admin;
pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod consumer_group;
mod consumer_protocol;
pub mod events;
pub mod group;
pub mod inspect;
pub mod log_batch;
pub mod migration;
pub mod offsets;
pub mod outbox;
pub mod rebalances;
pub mod records;
pub mod replicated;
pub mod requests;
pub mod router;
pub mod shell;
pub mod state;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod consumer_tests;
#[cfg(test)]
mod migration_tests;
#[cfg(test)]
mod raft_test_support;
#[cfg(test)]
mod tests;

/// The storage settings of a `__consumer_offsets` partition. Its log is written only by applying
/// committed Raft entries, whose size the coordinator bounded when it proposed them (with
/// `max.message.bytes` of the topic): applying one must never fail on a limit, or the partition
/// could not start again. Its compaction is the coordinator's own (checkpoints of group state),
/// never the cleaner's.
pub fn offsets_log_config(config: crate::storage::LogConfig) -> crate::storage::LogConfig {
    let cleanup = crate::storage::CleanupPolicy { delete: false, compact: false };
    crate::storage::LogConfig { max_message_bytes: u32::MAX, cleanup, ..config }
}

/// The coordinator partition of a group: `abs(javaHashCode(group)) % partitions`, with Kafka's
/// `Utils.abs` (`i32::MIN` maps to 0), hashing UTF-16 code units as Java's `String.hashCode`.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let hash = group_id.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions
}

#[cfg(test)]
mod partition_tests {
    use super::partition_for;

    #[test]
    fn matches_kafka() {
        // Values computed with Java: Math.abs("...".hashCode()) % 50, and Utils.abs for MIN.
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("a", 50), 97 % 50);
        assert_eq!(partition_for("my-group", 50), 12); // hashCode -1906497762
        assert_eq!(partition_for("console-consumer-12345", 50), 6); // hashCode 158455506
                                                                    // "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // UTF-16 code units, not bytes: 'é' is one unit (0xE9).
        assert_eq!(partition_for("é", 1000), 0xE9);
        // A character outside the BMP is two units (a surrogate pair).
        let h = 0xD83Di32.wrapping_mul(31).wrapping_add(0xDE00);
        assert_eq!(partition_for("😀", 100_000), h % 100_000);
    }
}
