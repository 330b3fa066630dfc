//! Client quotas (`[quotas]`): produce and fetch byte rates, and a share of request time, per
//! principal and client id, with Kafka's throttling.
//!
//! As in Kafka (KIP-13, KIP-124, KIP-219), a request over its quota is still answered, with
//! `throttle_time_ms` set to how long the client must wait to fall back under it, and the
//! connection reads nothing more from the client for that long. A throttled fetch is answered
//! without data, and its bytes are not counted. Rates are measured over `windows` windows of
//! `window_ms` each (Kafka's `quota.window.num` and `quota.window.size.seconds`).
//!
//! Which limits apply to a (principal, client id), most specific first: an entry naming both; an
//! entry naming the principal only (shared by all its clients); one naming the client id only
//! (shared by that client id under every principal); `default` (each pair on its own).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Principal;
pub use crate::config::quotas::{QuotaEntry, QuotaLimits, QuotasConfig};
use dashmap::DashMap;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    Produce,
    Fetch,
    Request,
}

impl QuotaKind {
    pub fn label(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Request => "request",
        }
    }

    fn limit(self, limits: &QuotaLimits) -> f64 {
        match self {
            QuotaKind::Produce => limits.producer_byte_rate as f64,
            QuotaKind::Fetch => limits.consumer_byte_rate as f64,
            // Milliseconds of shard time per second.
            QuotaKind::Request => limits.request_percentage * 10.0,
        }
    }
}

/// Whose usage a sensor counts: the entity the matching entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entity {
    kind: QuotaKind,
    principal: Option<String>,
    client_id: Option<String>,
}

/// Every client's usage, node-wide.
#[derive(Debug, Default)]
pub struct Quotas {
    config: QuotasConfig,
    sensors: DashMap<Entity, Mutex<Rate>>,
}

impl Quotas {
    pub fn new(config: &QuotasConfig) -> Quotas {
        Quotas { config: config.clone(), sensors: DashMap::new() }
    }

    /// Whether any limit of this kind is configured (else nothing is measured).
    pub fn limits(&self, kind: QuotaKind) -> bool {
        std::iter::once(&self.config.default).chain(self.config.entries.iter().map(|e| &e.limits)).any(|l| kind.limit(l) > 0.0)
    }

    /// Records `amount` (bytes, or milliseconds of shard time) and returns how long the client
    /// must be throttled: zero while under its quota.
    pub fn record(&self, kind: QuotaKind, principal: &Principal, client_id: &str, amount: f64) -> Duration {
        let Some((entity, limit)) = self.entity(kind, principal, client_id) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let window = Duration::from_millis(self.config.window_ms);
        let sensor = self.sensors.entry(entity).or_insert_with(|| Mutex::new(Rate::default()));
        let mut rate = sensor.lock().unwrap_or_else(|e| e.into_inner());
        rate.record(now, amount, window, self.config.windows as usize);
        let (per_second, elapsed) = rate.measure(now, window, self.config.windows as usize);
        if per_second <= limit {
            return Duration::ZERO;
        }
        // Kafka's formula: how long until the measured rate falls back to the quota.
        let throttle = elapsed.mul_f64((per_second - limit) / limit);
        let throttle = throttle.min(window * self.config.windows);
        crate::metrics::quota_throttled(kind.label(), throttle);
        throttle
    }

    /// The most a client may receive within the quota's whole measuring span: a fetch asks the
    /// store for no more than this, as Kafka caps `fetch.max.bytes`, so a response can fit.
    pub fn max_bytes_in_window(&self, kind: QuotaKind, principal: &Principal, client_id: &str) -> Option<u64> {
        let (_, limit) = self.entity(kind, principal, client_id)?;
        let span = Duration::from_millis(self.config.window_ms) * self.config.windows;
        Some((limit * span.as_secs_f64()) as u64)
    }

    /// Takes back what [`Quotas::record`] counted (a throttled fetch sends no data).
    pub fn unrecord(&self, kind: QuotaKind, principal: &Principal, client_id: &str, amount: f64) {
        if let Some((entity, _)) = self.entity(kind, principal, client_id) {
            if let Some(sensor) = self.sensors.get(&entity) {
                sensor.lock().unwrap_or_else(|e| e.into_inner()).record(
                    Instant::now(),
                    -amount,
                    Duration::from_millis(self.config.window_ms),
                    self.config.windows as usize,
                );
            }
        }
    }

    /// The entity whose quota applies, and its limit per second; None without a limit.
    fn entity(&self, kind: QuotaKind, principal: &Principal, client_id: &str) -> Option<(Entity, f64)> {
        let user = principal.to_string();
        let matches =
            |e: &&QuotaEntry| e.principal.as_ref().is_none_or(|p| *p == user) && e.client_id.as_ref().is_none_or(|c| c == client_id);
        // Most specific first: both named, the principal, the client id.
        let specificity = |e: &QuotaEntry| match (&e.principal, &e.client_id) {
            (Some(_), Some(_)) => 0,
            (Some(_), None) => 1,
            _ => 2,
        };
        let entry = self.config.entries.iter().filter(matches).min_by_key(|e| specificity(e));
        let (entity, limits) = match entry {
            Some(e) => (Entity { kind, principal: e.principal.clone(), client_id: e.client_id.clone() }, &e.limits),
            None => (Entity { kind, principal: Some(user), client_id: Some(client_id.to_string()) }, &self.config.default),
        };
        let limit = kind.limit(limits);
        (limit > 0.0).then_some((entity, limit))
    }
}

/// A rate over the last `windows` windows (Kafka's `Rate` over a `SampledStat`).
#[derive(Debug, Default)]
struct Rate {
    /// (window start, total recorded in it), oldest first.
    samples: VecDeque<(Instant, f64)>,
}

impl Rate {
    fn record(&mut self, now: Instant, amount: f64, window: Duration, windows: usize) {
        match self.samples.back_mut() {
            Some((start, total)) if now.duration_since(*start) < window => *total += amount,
            _ => self.samples.push_back((now, amount)),
        }
        while self.samples.len() > windows {
            self.samples.pop_front();
        }
        while self.samples.front().is_some_and(|(start, _)| now.duration_since(*start) >= window * windows as u32) {
            self.samples.pop_front();
        }
    }

    /// (amount per second, the span it was measured over). As Kafka, the span is at least all
    /// windows but one, so a first burst is not measured over a few milliseconds.
    fn measure(&self, now: Instant, window: Duration, windows: usize) -> (f64, Duration) {
        let total: f64 = self.samples.iter().map(|(_, v)| v).sum();
        let oldest = self.samples.front().map_or(now, |(start, _)| *start);
        let elapsed = now.duration_since(oldest).max(window * (windows as u32 - 1));
        (total / elapsed.as_secs_f64(), elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(text: &str) -> Quotas {
        let config: QuotasConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        Quotas::new(&config)
    }

    #[test]
    fn a_client_over_its_rate_is_throttled_for_what_brings_it_back() {
        let q = quotas("window_ms = 1000\nwindows = 11\n[default]\nproducer_byte_rate = 1000\n");
        let alice = Principal::user("alice");
        // 10 s of measuring span at least: 10,000 bytes are exactly the quota.
        assert_eq!(q.record(QuotaKind::Produce, &alice, "app", 10_000.0), Duration::ZERO);
        // 20,000 bytes over 10 s is twice the quota: throttled for another 10 s.
        let throttle = q.record(QuotaKind::Produce, &alice, "app", 10_000.0);
        assert!((9_900..=10_000).contains(&throttle.as_millis()), "{throttle:?}");
        // Each (principal, client id) has the default quota to itself.
        assert_eq!(q.record(QuotaKind::Produce, &alice, "other", 10_000.0), Duration::ZERO);
        // No fetch limit is configured.
        assert_eq!(q.record(QuotaKind::Fetch, &alice, "app", 1e12), Duration::ZERO);
    }

    #[test]
    fn the_most_specific_entry_applies_and_is_shared() {
        let q = quotas(
            r#"
            [[entries]]
            principal = "User:alice"
            consumer_byte_rate = 100
            [[entries]]
            principal = "User:alice"
            client_id = "special"
            consumer_byte_rate = 1000000
            [[entries]]
            client_id = "batch"
            consumer_byte_rate = 10
            "#,
        );
        let alice = Principal::user("alice");
        assert_eq!(q.record(QuotaKind::Fetch, &alice, "special", 100_000.0), Duration::ZERO);
        // alice's other clients share one quota of 100 B/s.
        assert_eq!(q.record(QuotaKind::Fetch, &alice, "a", 1_000.0), Duration::ZERO);
        assert!(q.record(QuotaKind::Fetch, &alice, "b", 1_000.0) > Duration::ZERO);
        // "batch" under another principal falls to the client-id entry.
        assert!(q.record(QuotaKind::Fetch, &Principal::user("bob"), "batch", 1_000.0) > Duration::ZERO);
        assert_eq!(q.record(QuotaKind::Fetch, &Principal::user("bob"), "other", 1e9), Duration::ZERO);
    }

    #[test]
    fn unrecorded_bytes_do_not_count() {
        let q = quotas("[default]\nconsumer_byte_rate = 1000\n");
        let p = Principal::anonymous();
        assert_eq!(q.record(QuotaKind::Fetch, &p, "c", 10_000.0), Duration::ZERO);
        assert!(q.record(QuotaKind::Fetch, &p, "c", 5_000.0) > Duration::ZERO);
        q.unrecord(QuotaKind::Fetch, &p, "c", 5_000.0);
        assert_eq!(q.record(QuotaKind::Fetch, &p, "c", 0.0), Duration::ZERO);
    }
}
