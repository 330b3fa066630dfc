//! Per-topic configuration: Kafka's topic config names, validated, with broker defaults.
//!
//! Keys that change how corral stores data are enforced; keys Kafka knows but that have no
//! effect on a single-copy log (replication settings, compression passthrough) are accepted and
//! reported, so tools that set them keep working. Unknown keys and unsupported values are
//! refused with INVALID_CONFIG, as Kafka refuses them.

use std::collections::BTreeMap;

use crate::config::{StorageConfig, TopicDefaults, MIN_NEW_SEGMENT_BYTES};
use crate::storage::{CleanupPolicy, CompactionConfig, LogConfig};

/// How a config value came to be, as DescribeConfigs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (Kafka's DYNAMIC_TOPIC_CONFIG = 1).
    Topic,
    /// The broker's configured default (STATIC_BROKER_CONFIG = 4).
    Broker,
    /// Kafka's built-in default (DEFAULT_CONFIG = 5).
    Default,
    /// Set on the group (Kafka's DYNAMIC_GROUP_CONFIG = 8).
    Group,
}

impl ConfigSource {
    pub fn code(self) -> i8 {
        match self {
            ConfigSource::Topic => 1,
            ConfigSource::Broker => 4,
            ConfigSource::Default => 5,
            ConfigSource::Group => 8,
        }
    }
}

/// Kafka's config types, as DescribeConfigs v3+ reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// One known topic config key.
#[derive(Debug)]
struct Key {
    name: &'static str,
    kind: ConfigType,
    /// `None`: the default comes from corral's config (`[topics.defaults]`).
    fixed_default: Option<&'static str>,
    doc: &'static str,
}

const KEYS: &[Key] = &[
    Key {
        name: "cleanup.policy",
        kind: ConfigType::List,
        fixed_default: Some("delete"),
        doc: "delete: retention removes old segments; compact: the last record of each key is kept.",
    },
    Key {
        name: "compression.type",
        kind: ConfigType::String,
        fixed_default: Some("producer"),
        doc: "Batches are stored as producers compressed them.",
    },
    Key {
        name: "delete.retention.ms",
        kind: ConfigType::Long,
        fixed_default: Some("86400000"),
        doc: "How long a tombstone stays in a compacted topic, counted from its record time.",
    },
    Key { name: "file.delete.delay.ms", kind: ConfigType::Long, fixed_default: Some("60000"), doc: "Kept for compatibility." },
    Key { name: "flush.messages", kind: ConfigType::Long, fixed_default: Some("9223372036854775807"), doc: "See storage.flush_messages." },
    Key { name: "flush.ms", kind: ConfigType::Long, fixed_default: Some("9223372036854775807"), doc: "See storage.flush_ms." },
    Key { name: "index.interval.bytes", kind: ConfigType::Int, fixed_default: None, doc: "Bytes of log between offset-index entries." },
    Key {
        name: "max.compaction.lag.ms",
        kind: ConfigType::Long,
        fixed_default: Some("9223372036854775807"),
        doc: "A record stays uncompacted at most this long, whatever the dirty ratio.",
    },
    Key { name: "max.message.bytes", kind: ConfigType::Int, fixed_default: None, doc: "Largest record batch accepted." },
    Key {
        name: "message.timestamp.type",
        kind: ConfigType::String,
        fixed_default: Some("CreateTime"),
        doc: "Only CreateTime is supported.",
    },
    Key {
        name: "min.cleanable.dirty.ratio",
        kind: ConfigType::Double,
        fixed_default: Some("0.5"),
        doc: "Compact once this share of the log was written since the last compaction.",
    },
    Key {
        name: "min.compaction.lag.ms",
        kind: ConfigType::Long,
        fixed_default: Some("0"),
        doc: "A record stays uncompacted at least this long.",
    },
    Key { name: "min.insync.replicas", kind: ConfigType::Int, fixed_default: Some("1"), doc: "One copy per partition." },
    Key { name: "preallocate", kind: ConfigType::Boolean, fixed_default: Some("false"), doc: "Kept for compatibility." },
    Key {
        name: "retention.bytes",
        kind: ConfigType::Long,
        fixed_default: None,
        doc: "Delete old segments beyond this size; -1 = no limit.",
    },
    Key { name: "retention.ms", kind: ConfigType::Long, fixed_default: None, doc: "Delete segments older than this; -1 = forever." },
    Key { name: "segment.bytes", kind: ConfigType::Int, fixed_default: None, doc: "Roll the active segment at this size." },
    Key {
        name: "segment.index.bytes",
        kind: ConfigType::Int,
        fixed_default: Some("10485760"),
        doc: "Kept for compatibility; indexes grow as needed.",
    },
    Key { name: "segment.jitter.ms", kind: ConfigType::Long, fixed_default: Some("0"), doc: "Kept for compatibility." },
    Key { name: "segment.ms", kind: ConfigType::Long, fixed_default: None, doc: "Roll the active segment after this long." },
    Key { name: "unclean.leader.election.enable", kind: ConfigType::Boolean, fixed_default: Some("false"), doc: "Kept for compatibility." },
];

/// Why a topic config was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicConfigError {
    #[error("unknown topic config name: {0}")]
    UnknownKey(String),
    #[error("invalid value {value:?} for topic config {key}: {reason}")]
    InvalidValue { key: String, value: String, reason: &'static str },
    /// APPEND or SUBTRACT of a key whose value is not a list (Kafka's wording).
    #[error("config value {op} is not allowed for config key: {key}")]
    NotAList { op: &'static str, key: String },
}

/// What IncrementalAlterConfigs does to one key (Kafka's `AlterConfigOp.OpType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOp {
    Set,
    /// Back to the default.
    Delete,
    /// Values added to a list key (those not in it yet).
    Append,
    /// Values taken out of a list key.
    Subtract,
}

impl ConfigOp {
    pub fn from_code(code: i8) -> Option<ConfigOp> {
        match code {
            0 => Some(ConfigOp::Set),
            1 => Some(ConfigOp::Delete),
            2 => Some(ConfigOp::Append),
            3 => Some(ConfigOp::Subtract),
            _ => None,
        }
    }
}

/// A topic's explicitly set configs (name → value). Everything else comes from defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct TopicConfig {
    overrides: BTreeMap<String, String>,
}

/// One resolved config entry, for DescribeConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: &'static str,
    pub value: String,
    pub source: ConfigSource,
    pub kind: ConfigType,
    pub doc: &'static str,
}

impl TopicConfig {
    /// Validates `(name, value)` pairs from CreateTopics (a null value means "use the default").
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Result<TopicConfig, TopicConfigError> {
        let mut overrides = BTreeMap::new();
        for (name, value) in pairs {
            let key = KEYS.iter().find(|k| k.name == name).ok_or_else(|| TopicConfigError::UnknownKey(name.to_string()))?;
            let Some(value) = value else { continue };
            validate_value(key, value)?;
            overrides.insert(name.to_string(), normalized(key, value));
        }
        Ok(TopicConfig { overrides })
    }

    /// Checks configs that arrived already built (a replicated topic change) by the rules of
    /// [`TopicConfig::from_pairs`].
    pub fn validate(&self) -> Result<(), TopicConfigError> {
        TopicConfig::from_pairs(self.overrides.iter().map(|(k, v)| (k.as_str(), Some(v.as_str())))).map(|_| ())
    }

    /// These configs after `changes` (IncrementalAlterConfigs), each value checked as
    /// CreateTopics checks it. APPEND and SUBTRACT start from the key's current value, its
    /// default when it has none, as in Kafka.
    pub fn altered<'a>(&self, changes: impl IntoIterator<Item = (ConfigOp, &'a str, &'a str)>) -> Result<TopicConfig, TopicConfigError> {
        let mut overrides = self.overrides.clone();
        for (op, name, value) in changes {
            let key = KEYS.iter().find(|k| k.name == name).ok_or_else(|| TopicConfigError::UnknownKey(name.to_string()))?;
            let list = |op| {
                if key.kind != ConfigType::List {
                    return Err(TopicConfigError::NotAList { op, key: name.to_string() });
                }
                let current = overrides.get(name).map(String::as_str).or(key.fixed_default).unwrap_or_default();
                Ok(current.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect::<Vec<_>>())
            };
            let items = || value.split(',').map(str::trim).filter(|v| !v.is_empty());
            let new = match op {
                ConfigOp::Set => value.to_string(),
                ConfigOp::Delete => {
                    overrides.remove(name);
                    continue;
                }
                ConfigOp::Append => {
                    let mut values = list("append")?;
                    for item in items() {
                        if !values.iter().any(|v| v == item) {
                            values.push(item.to_string());
                        }
                    }
                    values.join(",")
                }
                ConfigOp::Subtract => {
                    let values = list("subtract")?;
                    values.into_iter().filter(|v| !items().any(|item| item == v)).collect::<Vec<_>>().join(",")
                }
            };
            validate_value(key, &new)?;
            overrides.insert(name.to_string(), normalized(key, &new));
        }
        Ok(TopicConfig { overrides })
    }

    /// Kafka 4's minimums for a topic created now: `segment.bytes` at least 1 MiB (KIP-1030).
    /// Changes already in the metadata log were checked by [`TopicConfig::validate`] alone and stay
    /// valid, so a log written before the minimum replays the same.
    pub fn check_new_topic(&self) -> Result<(), TopicConfigError> {
        self.check_changed_from(&TopicConfig::default())
    }

    /// [`TopicConfig::check_new_topic`] for the values that differ from `before` (a topic's
    /// configs changed): a small `segment.bytes` the topic was created with stays.
    pub fn check_changed_from(&self, before: &TopicConfig) -> Result<(), TopicConfigError> {
        if let Some(value) = self.overrides.get("segment.bytes").filter(|v| before.overrides.get("segment.bytes") != Some(*v)) {
            if value.trim().parse::<i64>().is_ok_and(|n| n < MIN_NEW_SEGMENT_BYTES as i64) {
                let reason = "must be at least 1048576 (Kafka 4's minimum)";
                return Err(TopicConfigError::InvalidValue { key: "segment.bytes".into(), value: value.clone(), reason });
            }
        }
        Ok(())
    }

    /// `__consumer_offsets`: compacted by the coordinator itself (never deleted by retention),
    /// 100 MiB segments as Kafka's `offsets.topic.segment.bytes`.
    pub fn internal_offsets() -> TopicConfig {
        let pairs = [("cleanup.policy", "compact"), ("retention.ms", "-1"), ("retention.bytes", "-1"), ("segment.bytes", "104857600")];
        TopicConfig { overrides: pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    /// The storage settings of a partition of this topic.
    pub fn log_config(&self, defaults: &TopicDefaults, storage: &StorageConfig) -> LogConfig {
        let get = |name: &str| self.overrides.get(name).and_then(|v| v.parse::<i64>().ok());
        let policy = self.overrides.get("cleanup.policy").map_or("delete", String::as_str);
        let has = |item: &str| policy.split(',').any(|p| p.trim() == item);
        let ratio = self.overrides.get("min.cleanable.dirty.ratio").and_then(|v| v.trim().parse::<f64>().ok());
        LogConfig {
            segment_bytes: defaults
                .internal_segment_bytes
                .unwrap_or_else(|| get("segment.bytes").map_or(defaults.segment_bytes, |v| v as u64)),
            segment_ms: get("segment.ms").unwrap_or(defaults.segment_ms),
            retention_bytes: get("retention.bytes").unwrap_or(defaults.retention_bytes),
            retention_ms: get("retention.ms").unwrap_or(defaults.retention_ms),
            index_interval_bytes: get("index.interval.bytes").map_or(defaults.index_interval_bytes, |v| v as u32),
            max_message_bytes: get("max.message.bytes").map_or(defaults.max_message_bytes, |v| v as u32),
            max_producer_states: storage.max_producer_states_per_partition,
            cleanup: CleanupPolicy { delete: has("delete"), compact: has("compact") },
            compaction: CompactionConfig {
                delete_retention_ms: get("delete.retention.ms").unwrap_or(86_400_000),
                min_lag_ms: get("min.compaction.lag.ms").unwrap_or(0),
                max_lag_ms: get("max.compaction.lag.ms").unwrap_or(i64::MAX),
                min_dirty_ratio: ratio.unwrap_or(0.5),
                buffer_bytes: storage.cleaner_dedupe_buffer_bytes,
            },
        }
    }

    /// Every known key with its effective value and where it came from.
    pub fn entries(&self, defaults: &TopicDefaults) -> Vec<ConfigEntry> {
        KEYS.iter()
            .map(|k| {
                let (value, source) = match (self.overrides.get(k.name), k.fixed_default) {
                    (Some(v), _) => (v.clone(), ConfigSource::Topic),
                    (None, Some(d)) => (d.to_string(), ConfigSource::Default),
                    (None, None) => (broker_default(k.name, defaults), ConfigSource::Broker),
                };
                ConfigEntry { name: k.name, value, source, kind: k.kind, doc: k.doc }
            })
            .collect()
    }

    /// The explicitly set `(name, value)` pairs.
    pub fn overrides(&self) -> impl Iterator<Item = (&str, &str)> {
        self.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn broker_default(name: &str, d: &TopicDefaults) -> String {
    match name {
        "index.interval.bytes" => d.index_interval_bytes.to_string(),
        "max.message.bytes" => d.max_message_bytes.to_string(),
        "retention.bytes" => d.retention_bytes.to_string(),
        "retention.ms" => d.retention_ms.to_string(),
        "segment.bytes" => d.segment_bytes.to_string(),
        "segment.ms" => d.segment_ms.to_string(),
        other => unreachable!("{other} has a fixed default"),
    }
}

/// A list value without the duplicates Kafka drops (with a warning) from it.
fn normalized(key: &Key, value: &str) -> String {
    if key.kind != ConfigType::List {
        return value.to_string();
    }
    let mut items: Vec<&str> = Vec::new();
    for item in value.split(',').map(str::trim) {
        if !items.contains(&item) {
            items.push(item);
        }
    }
    items.join(",")
}

fn validate_value(key: &Key, value: &str) -> Result<(), TopicConfigError> {
    let bad = |reason| Err(TopicConfigError::InvalidValue { key: key.name.to_string(), value: value.to_string(), reason });
    match key.kind {
        ConfigType::Int | ConfigType::Long => {
            let Ok(n) = value.trim().parse::<i64>() else {
                return bad("not a number");
            };
            let (min, max): (i64, i64) = match key.name {
                "segment.bytes" => (14, i32::MAX as i64),
                "max.message.bytes" => (1, i32::MAX as i64),
                "index.interval.bytes" => (0, i32::MAX as i64),
                "segment.ms" => (1, i64::MAX),
                "retention.ms" | "retention.bytes" => (-1, i64::MAX),
                "max.compaction.lag.ms" => (1, i64::MAX),
                "min.insync.replicas" => (1, 1),
                _ if key.kind == ConfigType::Int => (0, i32::MAX as i64),
                _ => (0, i64::MAX),
            };
            if n < min || n > max {
                return bad("out of range");
            }
        }
        ConfigType::Boolean => {
            if !matches!(value, "true" | "false") {
                return bad("expected true or false");
            }
        }
        ConfigType::String | ConfigType::List | ConfigType::Double => match key.name {
            "cleanup.policy" => {
                let items: Vec<&str> = value.split(',').map(str::trim).collect();
                if items.iter().any(|i| !matches!(*i, "delete" | "compact")) {
                    return bad("each value must be delete or compact");
                }
            }
            "min.cleanable.dirty.ratio" if !value.trim().parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)) => {
                return bad("must be a number between 0 and 1")
            }
            "message.timestamp.type" if value != "CreateTime" => return bad("only CreateTime is supported"),
            "compression.type" if !matches!(value, "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd") => {
                return bad("unknown compression type")
            }
            _ => {}
        },
    }
    Ok(())
}

/// Checks a topic name as Kafka does: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be {name:?}"));
    }
    if name.len() > 249 {
        return Err(format!("topic name is {} characters long; the limit is 249", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("topic name {name:?} contains {c:?}; allowed are ASCII letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_topic_name("orders.v1_EU-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
    }

    #[test]
    fn overrides_and_defaults() {
        let d = TopicDefaults::default();
        let c = TopicConfig::from_pairs([("retention.ms", Some("1000")), ("segment.bytes", Some("2048")), ("flush.ms", None)]).unwrap();
        let log = c.log_config(&d, &crate::config::StorageConfig::default());
        assert_eq!(log.retention_ms, 1000);
        assert_eq!(log.segment_bytes, 2048);
        assert_eq!(log.max_message_bytes, d.max_message_bytes);
        let entries = c.entries(&d);
        let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
        assert_eq!((retention.value.as_str(), retention.source), ("1000", ConfigSource::Topic));
        let bytes = entries.iter().find(|e| e.name == "retention.bytes").unwrap();
        assert_eq!((bytes.value.as_str(), bytes.source), ("-1", ConfigSource::Broker));
        let policy = entries.iter().find(|e| e.name == "cleanup.policy").unwrap();
        assert_eq!(policy.source, ConfigSource::Default);
    }

    #[test]
    fn incremental_changes() {
        let c = TopicConfig::from_pairs([("retention.ms", Some("1000")), ("segment.ms", Some("5000"))]).unwrap();
        let changed = c.altered([(ConfigOp::Set, "retention.ms", "2000"), (ConfigOp::Delete, "segment.ms", "")]).unwrap();
        assert_eq!(changed.overrides().collect::<Vec<_>>(), [("retention.ms", "2000")]);
        // Deleting a key that is not set changes nothing.
        assert_eq!(changed.altered([(ConfigOp::Delete, "max.message.bytes", "")]).unwrap(), changed);
        // A list key: append starts from the default, and a value already there is not added twice.
        let appended = c.altered([(ConfigOp::Append, "cleanup.policy", "delete")]).unwrap();
        assert_eq!(appended.overrides.get("cleanup.policy").map(String::as_str), Some("delete"));
        let both = c.altered([(ConfigOp::Append, "cleanup.policy", "compact")]).unwrap();
        assert_eq!(both.overrides.get("cleanup.policy").map(String::as_str), Some("delete,compact"));
        let log = both.log_config(&TopicDefaults::default(), &crate::config::StorageConfig::default());
        assert_eq!(log.cleanup, CleanupPolicy { delete: true, compact: true });
        let compact = both.altered([(ConfigOp::Subtract, "cleanup.policy", "delete")]).unwrap();
        assert_eq!(compact.overrides.get("cleanup.policy").map(String::as_str), Some("compact"));
        assert!(matches!(c.altered([(ConfigOp::Append, "cleanup.policy", "shred")]), Err(TopicConfigError::InvalidValue { .. })));
        assert_eq!(
            c.altered([(ConfigOp::Append, "retention.ms", "1")]),
            Err(TopicConfigError::NotAList { op: "append", key: "retention.ms".into() })
        );
        assert_eq!(
            c.altered([(ConfigOp::Subtract, "segment.ms", "1")]),
            Err(TopicConfigError::NotAList { op: "subtract", key: "segment.ms".into() })
        );
        assert_eq!(c.altered([(ConfigOp::Set, "no.such", "1")]), Err(TopicConfigError::UnknownKey("no.such".into())));
        assert!(c.altered([(ConfigOp::Set, "retention.ms", "soon")]).is_err());
        // Kafka 4's segment.bytes minimum holds for a value set now, not for one a topic has.
        let small = TopicConfig::from_pairs([("segment.bytes", Some("2048"))]).unwrap();
        let kept = small.altered([(ConfigOp::Set, "retention.ms", "1")]).unwrap();
        assert!(kept.check_changed_from(&small).is_ok());
        let set = c.altered([(ConfigOp::Set, "segment.bytes", "2048")]).unwrap();
        assert!(set.check_changed_from(&c).is_err());
    }

    #[test]
    fn refusals() {
        assert_eq!(TopicConfig::from_pairs([("no.such", Some("1"))]), Err(TopicConfigError::UnknownKey("no.such".into())));
        assert!(TopicConfig::from_pairs([("cleanup.policy", Some("compact"))]).is_ok());
        let deduplicated = TopicConfig::from_pairs([("cleanup.policy", Some("compact, compact"))]).unwrap();
        assert_eq!(deduplicated.overrides().collect::<Vec<_>>(), [("cleanup.policy", "compact")]);
        assert!(TopicConfig::from_pairs([("min.cleanable.dirty.ratio", Some("1.5"))]).is_err());
        assert!(TopicConfig::from_pairs([("max.compaction.lag.ms", Some("0"))]).is_err());
        assert!(TopicConfig::from_pairs([("segment.bytes", Some("abc"))]).is_err());
        assert!(TopicConfig::from_pairs([("segment.bytes", Some("1"))]).is_err());
        assert!(TopicConfig::from_pairs([("retention.ms", Some("-2"))]).is_err());
        assert!(TopicConfig::from_pairs([("preallocate", Some("yes"))]).is_err());
    }
}
