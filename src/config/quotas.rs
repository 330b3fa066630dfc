//! `[quotas]`: byte rates and request-time shares per principal and client id (enforced by
//! [`crate::security::quota`]).

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Limits; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaLimits {
    /// Bytes of produce requests per second (Kafka's `producer_byte_rate`).
    pub producer_byte_rate: u64,
    /// Bytes of fetch responses per second (Kafka's `consumer_byte_rate`).
    pub consumer_byte_rate: u64,
    /// Percent of one shard's time spent on the client's requests (Kafka's
    /// `request_percentage`, of one I/O thread).
    pub request_percentage: f64,
}

/// One `quotas.entries` item.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaEntry {
    /// `User:NAME`; absent: every principal.
    #[serde(default)]
    pub principal: Option<String>,
    /// A client id; absent: every client id.
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(flatten)]
    pub limits: QuotaLimits,
}

/// `[quotas]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    pub default: QuotaLimits,
    pub entries: Vec<QuotaEntry>,
    pub window_ms: u64,
    pub windows: u32,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        QuotasConfig { default: QuotaLimits::default(), entries: Vec::new(), window_ms: 1000, windows: 11 }
    }
}

impl QuotasConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=60_000).contains(&self.window_ms) {
            return Err(invalid("quotas.window_ms", "must be between 1 and 60000"));
        }
        if !(2..=100).contains(&self.windows) {
            return Err(invalid("quotas.windows", "must be between 2 and 100"));
        }
        for limits in std::iter::once(&self.default).chain(self.entries.iter().map(|e| &e.limits)) {
            if !(0.0..=100_000.0).contains(&limits.request_percentage) {
                return Err(invalid("quotas", "request_percentage must be between 0 and 100000"));
            }
        }
        for e in &self.entries {
            if e.principal.is_none() && e.client_id.is_none() {
                return Err(invalid("quotas.entries", "an entry names a principal, a client id or both (quotas.default is for everyone)"));
            }
            if e.principal.as_ref().is_some_and(|p| !p.starts_with("User:")) {
                return Err(invalid("quotas.entries", format!("principal {:?}: expected User:NAME", e.principal)));
            }
        }
        Ok(())
    }
}
