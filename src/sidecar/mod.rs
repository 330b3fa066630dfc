//! The sidecar role (`role = "sidecar"`): the only broker an application sees, at one local
//! address.
//!
//! Data requests go straight to the storage tier's leaders through the upstream store
//! (`crate::store::upstream`): a Produce or Fetch spanning several upstream leaders is split and
//! merged there. Metadata names this node as the leader of every partition and FindCoordinator
//! names it as the coordinator of every group.
//!
//! Group requests are not served here: [`forward::Forwarder`] sends each to the coordinator of
//! its group in the *group service* of `[sidecar]` — a corral cluster, or any Kafka cluster's
//! own coordinator — found with FindCoordinator and followed when it moves. [`GroupService`] is
//! what the node knows of that service (its brokers, the versions it serves), kept fresh by
//! [`run`] on the first shard.

mod calls;
pub mod forward;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::SidecarConfig;
use crate::upstream::connection::Connection;
use crate::upstream::UpstreamError;

/// The group APIs a sidecar forwards; ApiVersions advertises them no higher than the group
/// service serves them.
pub const FORWARDED_APIS: [ApiKey; 12] = [
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
];

const API_VERSIONS_VERSION: i16 = 3;
/// Highest Metadata version asked for (only the brokers are read).
const METADATA_VERSION: i16 = 12;

/// What the sidecar knows of the group service at one moment.
#[derive(Debug, Clone, Default)]
pub struct GroupServiceView {
    /// Broker id → `host:port`.
    pub brokers: BTreeMap<i32, String>,
    /// API key → (min, max) version the service serves.
    pub versions: BTreeMap<i16, (i16, i16)>,
}

impl GroupServiceView {
    /// Whether the service serves `key` at `version`.
    pub fn serves(&self, key: ApiKey, version: i16) -> bool {
        self.versions.get(&(key as i16)).is_some_and(|(min, max)| (*min..=*max).contains(&version))
    }

    /// The highest version of `key` the service serves, no higher than `ours`.
    pub fn version(&self, key: ApiKey, ours: i16) -> Option<i16> {
        let (min, max) = *self.versions.get(&(key as i16))?;
        let v = max.min(ours);
        (v >= min).then_some(v)
    }
}

/// The group service, shared by every shard of the node.
#[derive(Debug)]
pub struct GroupService {
    pub config: SidecarConfig,
    /// TCP, TLS and SASL toward the group service's nodes.
    pub dialer: Arc<crate::upstream::dialer::Dialer>,
    pub retry_backoff: Duration,
    metadata_max_age: Duration,
    view: watch::Sender<Option<Arc<GroupServiceView>>>,
    stale: Notify,
}

impl GroupService {
    /// Reads the files `[sidecar.security]` names: a failure names the key.
    pub fn new(config: &crate::config::Config) -> Result<GroupService, crate::config::ConfigError> {
        let u = &config.upstream;
        let connect_timeout = Duration::from_millis(u.connect_timeout_ms);
        Ok(GroupService {
            config: config.sidecar.clone(),
            dialer: crate::upstream::dialer::Dialer::new(&config.sidecar.security, "sidecar.security", connect_timeout)?,
            retry_backoff: Duration::from_millis(u.retry_backoff_ms),
            metadata_max_age: Duration::from_millis(u.metadata_max_age_ms),
            view: watch::Sender::new(None),
            stale: Notify::new(),
        })
    }

    /// The latest view; `None` until the service answered once.
    pub fn view(&self) -> Option<Arc<GroupServiceView>> {
        self.view.borrow().clone()
    }

    /// Addresses to try, known brokers first, then the bootstrap.
    pub fn addresses(&self) -> Vec<String> {
        let mut addresses: Vec<String> = self.view().map(|v| v.brokers.values().cloned().collect()).unwrap_or_default();
        for bootstrap in &self.config.group_bootstrap {
            if !addresses.contains(bootstrap) {
                addresses.push(bootstrap.clone());
            }
        }
        addresses
    }

    /// Asks for the service's brokers to be read again (one did not answer).
    pub fn mark_stale(&self) {
        self.stale.notify_one();
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }
}

/// A group's own configs are the group service's: config requests naming groups are passed to
/// one of its brokers (a Kafka broker hands changes to its controller; a corral node to its
/// metadata group).
impl crate::upstream::admin::ConfigKeeper for GroupService {
    async fn ask_configs<R: Request + 'static>(&self, key: ApiKey, ours: (i16, i16), request: R) -> Result<R::Response, UpstreamError> {
        let view = self.view().ok_or_else(|| UpstreamError::NoMetadata(self.config.group_bootstrap.join(",")))?;
        let version = view.version(key, ours.1).filter(|v| *v >= ours.0).ok_or(UpstreamError::Unsupported(key))?;
        let address =
            self.addresses().into_iter().next().ok_or_else(|| UpstreamError::NoMetadata(self.config.group_bootstrap.join(",")))?;
        let connection = Connection::open(address, self.dialer.clone());
        match tokio::time::timeout(self.request_timeout(), connection.send(version, &request)?).await {
            Ok(answer) => answer.inspect_err(|_| self.mark_stale()),
            Err(_) => {
                self.mark_stale();
                Err(UpstreamError::Timeout(self.config.request_timeout_ms))
            }
        }
    }
}

/// Keeps the view fresh until the node shuts down: every `upstream.metadata_max_age_ms`, and
/// sooner (at most once per `upstream.retry_backoff_ms`) when a shard marks it stale.
pub async fn run(shutdown: CancellationToken, service: Arc<GroupService>) {
    let mut failures = 0u32;
    loop {
        match fetch_view(&service).await {
            Ok(view) => {
                if failures > 0 || service.view().is_none() {
                    tracing::info!(brokers = view.brokers.len(), "group service reached");
                }
                failures = 0;
                service.view.send_replace(Some(Arc::new(view)));
            }
            Err(e) => {
                failures += 1;
                if failures <= 3 || failures.is_multiple_of(10) {
                    let bootstrap = service.config.group_bootstrap.join(",");
                    tracing::warn!(%bootstrap, error = %e, failures, "cannot reach the group service (sidecar.group_bootstrap); retrying");
                }
            }
        }
        let wait = if failures > 0 { service.retry_backoff.saturating_mul(failures.min(10)) } else { service.metadata_max_age };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = service.stale.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(service.retry_backoff) => {}
        }
    }
}

async fn fetch_view(service: &GroupService) -> Result<GroupServiceView, UpstreamError> {
    let mut last = UpstreamError::NoMetadata(service.config.group_bootstrap.join(","));
    for address in service.addresses() {
        let connection = Connection::open(address, service.dialer.clone());
        match tokio::time::timeout(service.request_timeout(), ask(&connection)).await {
            Ok(Ok(view)) => return Ok(view),
            Ok(Err(e)) => last = e,
            Err(_) => last = UpstreamError::Timeout(service.config.request_timeout_ms),
        }
    }
    Err(last)
}

async fn ask(connection: &Connection) -> Result<GroupServiceView, UpstreamError> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("corral-sidecar"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let versions = connection.send(API_VERSIONS_VERSION, &request)?.await?;
    if versions.error_code != 0 {
        return Err(UpstreamError::Protocol(format!("{}: ApiVersions error {}", connection.address, versions.error_code)));
    }
    let mut view = GroupServiceView {
        versions: versions.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect(),
        ..Default::default()
    };
    let version = view.version(ApiKey::Metadata, METADATA_VERSION).ok_or(UpstreamError::Unsupported(ApiKey::Metadata))?;
    if view.version(ApiKey::FindCoordinator, forward::FIND_COORDINATOR_VERSION).is_none() {
        return Err(UpstreamError::Unsupported(ApiKey::FindCoordinator));
    }
    let metadata = connection.send(version, &MetadataRequest::default().with_topics(Some(Vec::new())))?.await?;
    view.brokers = metadata.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
    Ok(view)
}
