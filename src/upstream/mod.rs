//! The upstream cluster: an existing Kafka-compatible cluster that holds the partition data when
//! `storage.backend = "upstream"`.
//!
//! [`Upstream`] is node-wide: what corral knows of the upstream (its brokers, the leader of each
//! partition, the API versions it serves) as one immutable [`UpstreamView`], refreshed by one
//! task ([`refresh::run`]) every `metadata_max_age_ms` and whenever a shard reports that the view
//! is stale (a partition's leader moved, a broker went away). Each refresh also mirrors the
//! upstream's topics into the node's catalog, so Metadata, the KIP-848 assignor and the admin
//! API see them as corral topics.
//!
//! Connections are per shard ([`pool::Pool`]): a shard's requests never cross threads.

pub mod admin;
pub mod connection;
pub mod dialer;
pub mod fetch_response;
pub mod frame;
pub mod pool;
mod produce_frame;
pub mod refresh;
mod request_frame;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use crate::config::UpstreamConfig;

/// Why a request to the upstream could not be made or answered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream broker {0} is unreachable: {1}")]
    Unreachable(String, String),
    #[error("upstream connection lost: {0}")]
    Disconnected(String),
    #[error("upstream broker {0} refused corral: {1}")]
    Refused(String, String),
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    #[error("no answer from the upstream within {0} ms")]
    Timeout(u64),
    #[error("the upstream's metadata is not known yet (bootstrap {0})")]
    NoMetadata(String),
    #[error("upstream broker {0} is not in the upstream's metadata")]
    UnknownBroker(i32),
    #[error("the upstream does not serve {0:?} in a version corral speaks")]
    Unsupported(ApiKey),
}

impl UpstreamError {
    /// Whether sending again on a refreshed view may succeed: not once the request's own time ran
    /// out, nor when the upstream serves the API in no version corral speaks.
    pub fn may_pass_when_sent_again(&self) -> bool {
        !matches!(self, UpstreamError::Timeout(_) | UpstreamError::Unsupported(_))
    }
}

/// One partition as the upstream's metadata describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamPartition {
    /// The upstream broker that leads it; -1 while it has none.
    pub leader: i32,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTopic {
    pub id: Uuid,
    pub internal: bool,
    pub partitions: Vec<UpstreamPartition>,
}

/// What corral knows of the upstream at one moment. Immutable; a refresh makes a new one.
#[derive(Debug, Clone, Default)]
pub struct UpstreamView {
    /// Broker id → `host:port`.
    pub brokers: BTreeMap<i32, String>,
    pub controller: i32,
    pub topics: HashMap<String, UpstreamTopic>,
    /// API key → (min, max) version the upstream serves (every broker's intersection as the
    /// bootstrap broker reports it).
    pub versions: BTreeMap<i16, (i16, i16)>,
    /// Counts refreshes: a shard that found this view stale waits for a higher one.
    pub generation: u64,
    pub fetched_at: Option<std::time::Instant>,
}

impl UpstreamView {
    /// The version to send `key` in: the highest both the upstream and corral (`ours`) serve.
    pub fn version(&self, key: ApiKey, ours: (i16, i16)) -> Result<i16, UpstreamError> {
        let (min, max) = self.versions.get(&(key as i16)).copied().ok_or(UpstreamError::Unsupported(key))?;
        let (low, high) = (min.max(ours.0), max.min(ours.1));
        if low > high {
            return Err(UpstreamError::Unsupported(key));
        }
        Ok(high)
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<UpstreamPartition> {
        self.topics.get(topic)?.partitions.get(usize::try_from(partition).ok()?).copied()
    }

    /// The address of a broker, the leader of a partition or the controller.
    pub fn address(&self, broker: i32) -> Result<&str, UpstreamError> {
        self.brokers.get(&broker).map(String::as_str).ok_or(UpstreamError::UnknownBroker(broker))
    }
}

/// A Metadata listing of every topic refreshes a view older than this.
const LISTING_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// The upstream, shared by every shard of the node.
#[derive(Debug)]
pub struct Upstream {
    pub config: UpstreamConfig,
    /// TCP, TLS and SASL toward the upstream's brokers.
    pub dialer: Arc<dialer::Dialer>,
    view: watch::Sender<Option<Arc<UpstreamView>>>,
    stale: Notify,
}

impl Upstream {
    /// Reads the files `[upstream.security]` names: a failure names the key.
    pub fn new(config: UpstreamConfig) -> Result<Upstream, crate::config::ConfigError> {
        let connect_timeout = std::time::Duration::from_millis(config.connect_timeout_ms);
        let dialer = dialer::Dialer::new(&config.security, "upstream.security", connect_timeout)?;
        Ok(Upstream { config, dialer, view: watch::Sender::new(None), stale: Notify::new() })
    }

    /// The latest view; `None` until the upstream answered once.
    pub fn view(&self) -> Option<Arc<UpstreamView>> {
        self.view.borrow().clone()
    }

    pub fn view_or_error(&self) -> Result<Arc<UpstreamView>, UpstreamError> {
        self.view().ok_or_else(|| UpstreamError::NoMetadata(self.config.bootstrap.join(",")))
    }

    /// Asks for a refresh of the view (a leader moved, a broker is gone, a topic changed).
    pub fn mark_stale(&self) {
        crate::metrics::upstream_metadata_stale();
        self.stale.notify_one();
    }

    /// Asks for a refresh and waits (at most `wait`) for a view newer than `seen`; gives the
    /// latest view either way.
    pub async fn refreshed(&self, seen: u64, wait: std::time::Duration) -> Option<Arc<UpstreamView>> {
        self.mark_stale();
        let mut rx = self.view.subscribe();
        let newer = rx.wait_for(|v| v.as_ref().is_some_and(|v| v.generation > seen));
        let _ = tokio::time::timeout(wait, newer).await;
        self.view()
    }

    /// Before Metadata is answered: a topic the client names that the catalog lacks may be new
    /// upstream, so the view is refreshed first (waiting at most `wait`); a listing of every
    /// topic is answered at once, and the view refreshed behind it when older than `LISTING_AGE`.
    pub async fn before_metadata(&self, names_unknown_topic: bool, wait: std::time::Duration) {
        let Some(view) = self.view() else { return };
        if names_unknown_topic {
            self.look_for_new_topics(wait).await;
        } else if view.fetched_at.is_none_or(|at| at.elapsed() > LISTING_AGE) {
            self.mark_stale();
        }
    }

    /// A request names a topic the catalog lacks, which may be new upstream (created there by
    /// another client, a sidecar): the view is refreshed first, waiting at most `wait`.
    pub async fn look_for_new_topics(&self, wait: std::time::Duration) {
        if let Some(view) = self.view() {
            self.refreshed(view.generation, wait).await;
        }
    }

    fn publish(&self, view: UpstreamView) {
        self.view.send_replace(Some(Arc::new(view)));
    }
}
