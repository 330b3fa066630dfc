//! `[groups]`: the group coordinator's settings (Kafka's `group.*` and `offsets.*` broker
//! settings), checked here; the coordinator makes its own settings from them (`GroupConfig`,
//! `ConsumerGroupConfig`).

use serde::Deserialize;

use super::{invalid, ConfigError};
use crate::coordinator::assignor::Assignor;

/// Kafka's bound of `group.consumer.assignment.interval.ms` (`group.consumer.max.assignment.interval.ms`).
const MAX_ASSIGNMENT_INTERVAL_MS: u64 = 15_000;

/// The group coordinator (Kafka's `group.*` and `offsets.*` broker settings).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupsConfig {
    pub offsets_partitions: i32,
    pub initial_rebalance_delay_ms: u64,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub max_size: i32,
    /// Members of one classic group waiting to rejoin with the id MEMBER_ID_REQUIRED gave them.
    pub max_pending_members: u32,
    /// Groups (of every type, simple ones included) one coordinator partition holds.
    pub max_groups_per_partition: u32,
    pub offset_metadata_max_bytes: u32,
    pub offsets_retention_minutes: u64,
    pub offsets_retention_check_interval_ms: u64,
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
    pub consumer_max_size: i32,
    pub consumer_assignors: Vec<String>,
    /// Which live groups convert between the classic and the consumer protocol (Kafka's
    /// `group.consumer.migration.policy`).
    pub consumer_migration_policy: String,
    /// How often a consumer group's target assignment may be computed at most (Kafka's
    /// `group.consumer.assignment.interval.ms`).
    pub consumer_assignment_interval_ms: u64,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig {
            offsets_partitions: 50,
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX,
            max_pending_members: 20_000,
            max_groups_per_partition: 20_000,
            offset_metadata_max_bytes: 4096,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_max_size: i32::MAX,
            consumer_assignors: vec!["uniform".into(), "range".into()],
            consumer_migration_policy: "bidirectional".into(),
            consumer_assignment_interval_ms: 1_000,
        }
    }
}

/// Which conversions of non-empty groups are allowed (Kafka's `group.consumer.migration.policy`).
/// Empty groups convert both ways whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    pub const NAMES: [&'static str; 4] = ["bidirectional", "upgrade", "downgrade", "disabled"];

    pub fn from_name(name: &str) -> Option<MigrationPolicy> {
        match name.trim().to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }
}

impl GroupsConfig {
    /// Checks every bound and cross-field rule of the section.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let g = self;
        if !(1..=1000).contains(&g.offsets_partitions) {
            return Err(invalid("groups.offsets_partitions", format!("must be between 1 and 1000, got {}", g.offsets_partitions)));
        }
        if g.min_session_timeout_ms < 1 || g.min_session_timeout_ms > g.max_session_timeout_ms {
            return Err(invalid(
                "groups.min_session_timeout_ms",
                format!("must be at least 1 and at most groups.max_session_timeout_ms ({})", g.max_session_timeout_ms),
            ));
        }
        if g.max_size < 1 {
            return Err(invalid("groups.max_size", "must be at least 1"));
        }
        if g.offsets_retention_minutes == 0 {
            return Err(invalid("groups.offsets_retention_minutes", "must be at least 1"));
        }
        if g.offsets_retention_check_interval_ms == 0 {
            return Err(invalid("groups.offsets_retention_check_interval_ms", "must be at least 1"));
        }
        if g.consumer_heartbeat_interval_ms < 1 || g.consumer_heartbeat_interval_ms >= g.consumer_session_timeout_ms {
            return Err(invalid(
                "groups.consumer_heartbeat_interval_ms",
                format!("must be at least 1 and below groups.consumer_session_timeout_ms ({})", g.consumer_session_timeout_ms),
            ));
        }
        if g.consumer_max_size < 1 {
            return Err(invalid("groups.consumer_max_size", "must be at least 1"));
        }
        if g.max_pending_members == 0 {
            return Err(invalid("groups.max_pending_members", "must be at least 1"));
        }
        if g.max_groups_per_partition == 0 {
            return Err(invalid("groups.max_groups_per_partition", "must be at least 1"));
        }
        if g.consumer_assignors.is_empty() {
            return Err(invalid("groups.consumer_assignors", "must name at least one assignor"));
        }
        if let Some(bad) = g.consumer_assignors.iter().find(|a| Assignor::from_name(a).is_none()) {
            return Err(invalid("groups.consumer_assignors", format!("unknown assignor {bad:?}; known: \"uniform\", \"range\"")));
        }
        if g.consumer_assignment_interval_ms > MAX_ASSIGNMENT_INTERVAL_MS {
            return Err(invalid(
                "groups.consumer_assignment_interval_ms",
                format!("must be at most {MAX_ASSIGNMENT_INTERVAL_MS} (group.consumer.max.assignment.interval.ms)"),
            ));
        }
        if MigrationPolicy::from_name(&g.consumer_migration_policy).is_none() {
            let known = MigrationPolicy::NAMES.map(|n| format!("{n:?}")).join(", ");
            return Err(invalid(
                "groups.consumer_migration_policy",
                format!("unknown policy {:?}; known: {known}", g.consumer_migration_policy),
            ));
        }
        Ok(())
    }
}
