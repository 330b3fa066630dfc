//! A consumer group's own configs (Kafka's dynamic group configs, KIP-848): its session timeout,
//! heartbeat interval and assignment interval, over the `[groups]` settings. Set with
//! IncrementalAlterConfigs or AlterConfigs on the group's GROUP resource, replicated through the
//! metadata group, read by the coordinators at each use.
//!
//! Each value must lie in Kafka's default range for it (`group.consumer.min/max.*`), widened to
//! take in corral's own `[groups]` setting, so that a deployment whose default lies outside
//! Kafka's range can still set a group back to it. Kafka's share and streams group configs are
//! not served: corral runs neither kind of group.

use kafka_protocol::ResponseError;

use super::topic_config::{ConfigOp, ConfigSource};
use crate::config::GroupsConfig;
use crate::coordinator::consumer_group::GroupOverrides;

/// One group config.
#[derive(Debug)]
pub struct GroupKey {
    pub name: &'static str,
    /// Kafka's broker setting that gives the default (its synonym in DescribeConfigs).
    pub broker_name: &'static str,
    /// Kafka's built-in default.
    pub kafka_default: i32,
    /// Kafka's default range for a group's value.
    kafka_range: (i32, i32),
    pub doc: &'static str,
    /// corral's `[groups]` setting.
    pub configured: fn(&GroupsConfig) -> i32,
    pub get: fn(&GroupOverrides) -> Option<i32>,
    set: fn(&mut GroupOverrides, Option<i32>),
}

pub const KEYS: [GroupKey; 3] = [
    GroupKey {
        name: "consumer.assignment.interval.ms",
        broker_name: "group.consumer.assignment.interval.ms",
        kafka_default: 1_000,
        kafka_range: (0, 15_000),
        doc: "How often at most the group's target assignment is computed (groups.consumer_assignment_interval_ms).",
        configured: |g| g.consumer_assignment_interval_ms as i32,
        get: |o| o.assignment_interval_ms,
        set: |o, v| o.assignment_interval_ms = v,
    },
    GroupKey {
        name: "consumer.heartbeat.interval.ms",
        broker_name: "group.consumer.heartbeat.interval.ms",
        kafka_default: 5_000,
        kafka_range: (5_000, 15_000),
        doc: "The heartbeat interval given to the group's members (groups.consumer_heartbeat_interval_ms).",
        configured: |g| g.consumer_heartbeat_interval_ms,
        get: |o| o.heartbeat_interval_ms,
        set: |o, v| o.heartbeat_interval_ms = v,
    },
    GroupKey {
        name: "consumer.session.timeout.ms",
        broker_name: "group.consumer.session.timeout.ms",
        kafka_default: 45_000,
        kafka_range: (45_000, 60_000),
        doc: "How long a member of the group may go without a heartbeat (groups.consumer_session_timeout_ms).",
        configured: |g| g.consumer_session_timeout_ms,
        get: |o| o.session_timeout_ms,
        set: |o, v| o.session_timeout_ms = v,
    },
];

impl GroupKey {
    /// The values a group may set: Kafka's range, widened to take in the `[groups]` setting.
    pub fn range(&self, groups: &GroupsConfig) -> (i32, i32) {
        let configured = (self.configured)(groups);
        (self.kafka_range.0.min(configured), self.kafka_range.1.max(configured))
    }

    /// Where the value a group without its own comes from: the config file when it changes
    /// Kafka's default there, else Kafka's default.
    pub fn default_source(&self, groups: &GroupsConfig) -> ConfigSource {
        match (self.configured)(groups) == self.kafka_default {
            true => ConfigSource::Default,
            false => ConfigSource::Broker,
        }
    }
}

fn key(name: &str) -> Result<&'static GroupKey, (ResponseError, String)> {
    KEYS.iter().find(|k| k.name == name).ok_or_else(|| invalid(format!("Unknown group config name: {name}")))
}

fn invalid(message: String) -> (ResponseError, String) {
    (ResponseError::InvalidConfig, message)
}

/// `current` after IncrementalAlterConfigs' `changes`, each value checked as Kafka checks it.
pub fn altered<'a>(
    current: GroupOverrides,
    changes: impl IntoIterator<Item = (ConfigOp, &'a str, &'a str)>,
    groups: &GroupsConfig,
) -> Result<GroupOverrides, (ResponseError, String)> {
    let mut next = current;
    for (op, name, value) in changes {
        let key = key(name)?;
        let value = match op {
            ConfigOp::Set => Some(parse(key, value, groups)?),
            ConfigOp::Delete => None,
            ConfigOp::Append => return Err(invalid(format!("Config value append is not allowed for config key: {name}"))),
            ConfigOp::Subtract => return Err(invalid(format!("Config value subtract is not allowed for config key: {name}"))),
        };
        (key.set)(&mut next, value);
    }
    Ok(next)
}

/// The configs AlterConfigs names, as the group's whole set.
pub fn replaced<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    groups: &GroupsConfig,
) -> Result<GroupOverrides, (ResponseError, String)> {
    altered(GroupOverrides::default(), pairs.into_iter().map(|(name, value)| (ConfigOp::Set, name, value)), groups)
}

fn parse(key: &GroupKey, value: &str, groups: &GroupsConfig) -> Result<i32, (ResponseError, String)> {
    let name = key.name;
    let number: i32 =
        value.trim().parse().map_err(|_| invalid(format!("Invalid value {value} for configuration {name}: Not a number of type INT")))?;
    if number < 0 {
        return Err(invalid(format!("Invalid value {number} for configuration {name}: Value must be at least 0")));
    }
    let (min, max) = key.range(groups);
    if number < min || number > max {
        return Err(invalid(format!("{name} must be in the range {min} to {max} inclusive.")));
    }
    Ok(number)
}

/// Whether overrides can have come from [`altered`] (a replicated change is checked with it):
/// no value is negative. The ranges depend on each node's `[groups]` and are checked where the
/// change is asked for.
pub fn validate(overrides: &GroupOverrides) -> Result<(), String> {
    match KEYS.iter().find_map(|k| (k.get)(overrides).filter(|v| *v < 0).map(|v| (k.name, v))) {
        Some((name, v)) => Err(format!("{name} = {v} is negative")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups() -> GroupsConfig {
        GroupsConfig { consumer_heartbeat_interval_ms: 1_000, ..GroupsConfig::default() }
    }

    #[test]
    fn values_are_checked_as_kafka_checks_them() {
        let g = groups();
        let set = |name, value| altered(GroupOverrides::default(), [(ConfigOp::Set, name, value)], &g);
        let session = set("consumer.session.timeout.ms", "50000").unwrap();
        assert_eq!(session.session_timeout_ms, Some(50_000));
        let refused = |name, value| set(name, value).unwrap_err().1;
        assert_eq!(
            refused("consumer.session.timeout.ms", "1000"),
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."
        );
        // The range takes in the configured heartbeat interval (1 s, below Kafka's 5 s minimum).
        assert_eq!(set("consumer.heartbeat.interval.ms", "1000").unwrap().heartbeat_interval_ms, Some(1_000));
        assert_eq!(
            refused("consumer.heartbeat.interval.ms", "50000"),
            "consumer.heartbeat.interval.ms must be in the range 1000 to 15000 inclusive."
        );
        assert_eq!(
            refused("consumer.assignment.interval.ms", "-1"),
            "Invalid value -1 for configuration consumer.assignment.interval.ms: Value must be at least 0"
        );
        assert_eq!(
            refused("consumer.session.timeout.ms", "abc"),
            "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"
        );
        assert_eq!(refused("no.such", "1"), "Unknown group config name: no.such");
        assert_eq!(set("consumer.assignment.interval.ms", "0").unwrap().assignment_interval_ms, Some(0));
    }

    #[test]
    fn delete_takes_a_key_back_to_its_default_and_lists_cannot_grow() {
        let g = groups();
        let current = GroupOverrides { session_timeout_ms: Some(50_000), heartbeat_interval_ms: Some(6_000), ..Default::default() };
        let next = altered(current, [(ConfigOp::Delete, "consumer.session.timeout.ms", "")], &g).unwrap();
        assert_eq!(next, GroupOverrides { heartbeat_interval_ms: Some(6_000), ..Default::default() });
        let appended = altered(current, [(ConfigOp::Append, "consumer.session.timeout.ms", "1")], &g);
        assert_eq!(appended.unwrap_err().0, ResponseError::InvalidConfig);
        // AlterConfigs: what is not named goes back to its default.
        assert_eq!(
            replaced([("consumer.heartbeat.interval.ms", "7000")], &g).unwrap(),
            GroupOverrides { heartbeat_interval_ms: Some(7_000), ..Default::default() }
        );
        assert!(validate(&next).is_ok());
        assert!(validate(&GroupOverrides { assignment_interval_ms: Some(-5), ..Default::default() }).is_err());
    }
}
