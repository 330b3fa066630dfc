//! Configuration: one validated struct tree.
//!
//! `config/corral.toml` is the reference: it lists every key with its default, and a unit test
//! proves that parsing it yields [`Config::default`]. A user's file only names the keys it
//! changes; unknown keys are rejected so a typo never silently falls back to a default.
//! [`Config::validate`] runs before any port is bound and names the offending key.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

pub mod authorization;
pub mod groups;
pub mod quotas;
pub mod security;

pub use groups::{GroupsConfig, MigrationPolicy};
pub use security::{ClientAuth, ClientSecurity, ListenerConfig, SaslConfig, SecurityProtocol, TlsConfig};

/// Why a configuration was refused. The message always names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config{}: {message}", in_file(.path))]
    Parse { path: Option<PathBuf>, message: String },
    #[error("invalid config: {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
}

fn in_file(path: &Option<PathBuf>) -> String {
    path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default()
}

pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What this node is to its clients: a broker, or an application's sidecar.
    pub role: Role,
    pub node: NodeConfig,
    pub kafka: KafkaConfig,
    pub admin: AdminConfig,
    pub runtime: RuntimeConfig,
    pub storage: StorageConfig,
    pub topics: TopicsConfig,
    pub groups: GroupsConfig,
    pub cluster: ClusterConfig,
    pub upstream: UpstreamConfig,
    pub sidecar: SidecarConfig,
    pub tls: TlsConfig,
    pub sasl: SaslConfig,
    pub authorization: authorization::AuthorizationConfig,
    pub quotas: quotas::QuotasConfig,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Coordinates groups itself, alone or as one node of a corral cluster.
    #[default]
    Broker,
    /// The only broker an application sees, at one local address: data goes to the upstream's
    /// leaders, group requests to the group service of `[sidecar]`.
    Sidecar,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Broker id reported to clients.
    pub id: i32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// The first listener: the one `cluster.nodes[].kafka` addresses.
    pub listen: SocketAddr,
    /// `host:port` given to clients of `listen`; empty = `listen`.
    pub advertised: String,
    /// The security protocol of `listen`.
    pub protocol: SecurityProtocol,
    /// Whether `listen` asks TLS clients for a certificate.
    pub client_auth: ClientAuth,
    /// More listeners, each with its own security protocol.
    pub listeners: Vec<ListenerConfig>,
    pub max_frame_bytes: u32,
    pub max_inflight_per_connection: usize,
    pub max_connections_per_shard: usize,
    /// Open client connections on the node; past it a new one is closed at once (Kafka's
    /// `max.connections`).
    pub max_connections: usize,
    /// Open connections from one client address; past it a new one is closed at once (Kafka's
    /// `max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// A connection with no request for this long, and none in progress, is closed (Kafka's
    /// `connections.max.idle.ms`).
    pub connections_max_idle_ms: u64,
    /// A request whose bytes have begun to arrive must arrive whole within this, or the
    /// connection is closed (a slow sender holds a buffer and a connection).
    pub request_body_timeout_ms: u64,
    /// Bytes of requests read and not yet answered, on the whole node; past it connections are
    /// not read until some are answered (Kafka's `queued.max.request.bytes`; -1: no limit).
    pub queued_max_request_bytes: i64,
    pub fetch_send: FetchSend,
}

/// How fetched segment bytes are written to the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchSend {
    /// sendfile(2): page cache to socket with no copy through user space.
    Sendfile,
    /// pread into a buffer, then write: the path TLS needs.
    Pread,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Record and serve metrics; off, every metric update is a no-op and `/metrics` is 404.
    pub metrics: bool,
    /// Groups given their own label in the per-group series of `/metrics`, in group-id order;
    /// the others are summed under `consumergroup="__other__"`.
    pub metrics_max_groups: usize,
    /// The window of the rebalance-storm signal (`corral_group_rebalances_recent`).
    pub rebalance_storm_window_minutes: u64,
    /// HTTPS with `[tls]`'s certificate. Nodes asking each other's admin listeners (the groups
    /// API) then check the certificate against `tls.ca_file` and present their own.
    pub tls: bool,
    /// Whether HTTPS clients must present a certificate signed by `tls.ca_file`.
    pub client_auth: ClientAuth,
    /// A file holding the token every request but the health probes must bear
    /// (`Authorization: Bearer ...`); none: no token asked for.
    pub bearer_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// 0 = one shard per available core.
    pub shards: usize,
    pub pin_threads: bool,
    pub mesh_queue_capacity: usize,
    pub shutdown_grace_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Where partition data lives: this node's segment files, or an upstream Kafka cluster.
    pub backend: StorageBackend,
    pub data_dir: PathBuf,
    pub retention_check_interval_ms: u64,
    pub flush_messages: u64,
    pub flush_ms: u64,
    pub max_producer_states_per_partition: usize,
    /// Segment files kept open at once over all shards; 0 = half the open-file limit.
    pub max_open_files: usize,
    /// How often each shard looks for compacted partitions to clean.
    pub cleaner_backoff_ms: u64,
    /// The most the key map of one compaction may hold (per shard).
    pub cleaner_dedupe_buffer_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    /// Kafka segment files under `storage.data_dir`.
    Local,
    /// The Kafka cluster of `[upstream]`; corral keeps the groups and offsets.
    Upstream,
}

/// `[upstream]`: the Kafka-compatible cluster that holds partition data when
/// `storage.backend = "upstream"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `host:port` of one or more upstream brokers, to learn the cluster from.
    pub bootstrap: Vec<String>,
    pub connect_timeout_ms: u64,
    /// How long one upstream request may take (a Fetch: this beyond its own max wait).
    pub request_timeout_ms: u64,
    /// Idle connections kept per upstream broker, per shard.
    pub pool_size: usize,
    /// The upstream's metadata is read again at least this often.
    pub metadata_max_age_ms: u64,
    /// The least time between two reads of the upstream's metadata.
    pub retry_backoff_ms: u64,
    /// TLS and SASL toward the upstream's brokers.
    pub security: ClientSecurity,
}

/// `[sidecar]`: where a sidecar (`role = "sidecar"`) sends group requests.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SidecarConfig {
    /// `host:port` of one or more nodes of the group service: a corral cluster, or a Kafka
    /// cluster whose own coordinator keeps the groups.
    pub group_bootstrap: Vec<String>,
    /// How long a group request may take to reach its coordinator, following it as it moves
    /// (a JoinGroup: this beyond its rebalance timeout).
    pub request_timeout_ms: u64,
    /// TLS and SASL toward the group service.
    pub security: ClientSecurity,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicsConfig {
    pub auto_create: bool,
    pub default_partitions: i32,
    pub max_partitions: i32,
    /// Partitions of all replicated topics that one node may hold.
    pub max_partitions_per_node: i32,
    pub defaults: TopicDefaults,
}

/// The nodes of a cluster. Membership is static: every node lists the same nodes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Address the Raft listener binds (traffic between nodes). Unused on a single node.
    pub raft_listen: SocketAddr,
    /// Every node, this one included. Empty: a single node (this one).
    pub nodes: Vec<ClusterNode>,
    /// The secret every node proves it knows before the Raft port reads anything from it (a
    /// challenge: it never crosses the wire). Required when `nodes` lists other nodes, from
    /// here or from `secret_file`, unless `tls` is on.
    pub secret: Option<String>,
    /// A file holding the secret (a mounted Kubernetes Secret); whitespace around it is ignored.
    pub secret_file: Option<PathBuf>,
    /// Mutual TLS on the Raft port: each node presents `[tls]`'s certificate and accepts only
    /// peers whose certificate chains to `tls.ca_file` (a dialer also checks that the
    /// certificate names the host of the peer's `raft` address). With a secret as well, its
    /// handshake runs inside TLS.
    pub tls: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    pub id: i32,
    /// `host:port` of the node's Raft listener.
    pub raft: String,
    /// `host:port` clients are told to connect to (the node's `kafka.advertised`).
    pub kafka: String,
    /// `host:port` of the node's admin listener: lets any node answer the groups API for groups
    /// another node coordinates.
    #[serde(default)]
    pub admin: Option<String>,
    /// `host:port` of each listener after the first, by listener name.
    #[serde(default)]
    pub listeners: std::collections::BTreeMap<String, String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            raft_listen: SocketAddr::from(([127, 0, 0, 1], 9094)),
            nodes: Vec::new(),
            secret: None,
            secret_file: None,
            tls: false,
        }
    }
}

impl ClusterConfig {
    /// Whether other nodes are configured.
    pub fn is_multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    /// The cluster secret, from `secret` or `secret_file` (at most one of them); none only with
    /// mutual TLS.
    pub fn secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let secret = match (&self.secret, &self.secret_file) {
            (Some(_), Some(_)) => return Err(invalid("cluster.secret", "set either secret or secret_file, not both")),
            (None, None) if self.tls => return Ok(None),
            (None, None) => {
                return Err(invalid(
                    "cluster.secret",
                    "a cluster of several nodes needs a shared secret (secret or secret_file) or mutual TLS (cluster.tls)",
                ))
            }
            (Some(secret), None) => secret.trim().as_bytes().to_vec(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| invalid("cluster.secret_file", format!("cannot read {}: {e}", path.display())))?
                .trim()
                .as_bytes()
                .to_vec(),
        };
        if secret.len() < MIN_SECRET_BYTES {
            let key = if self.secret.is_some() { "cluster.secret" } else { "cluster.secret_file" };
            return Err(invalid(key, format!("the secret must have at least {MIN_SECRET_BYTES} bytes, got {}", secret.len())));
        }
        Ok(Some(secret))
    }
}

/// The shortest cluster secret accepted.
const MIN_SECRET_BYTES: usize = 16;

/// Broker-wide defaults of the per-topic configs (Kafka's `log.*` settings).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicDefaults {
    pub segment_bytes: u64,
    /// Every partition's segment size, below the 1 MiB minimum of `segment_bytes`: for tests that
    /// need many segments (Kafka's `internal.segment.bytes`). Not in config/corral.toml.
    pub internal_segment_bytes: Option<u64>,
    pub segment_ms: i64,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub index_interval_bytes: u32,
    pub max_message_bytes: u32,
}

// === defaults: mirror config/corral.toml (a test keeps them equal) ===

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            advertised: String::new(),
            protocol: SecurityProtocol::Plaintext,
            client_auth: ClientAuth::None,
            listeners: Vec::new(),
            max_frame_bytes: 100 * 1024 * 1024,
            max_inflight_per_connection: 32,
            max_connections_per_shard: 10_000,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            connections_max_idle_ms: 600_000,
            request_body_timeout_ms: 30_000,
            queued_max_request_bytes: 512 * 1024 * 1024,
            fetch_send: FetchSend::Sendfile,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9095)),
            metrics: true,
            metrics_max_groups: 1_000,
            rebalance_storm_window_minutes: 10,
            tls: false,
            client_auth: Default::default(),
            bearer_token_file: None,
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig { shards: 0, pin_threads: true, mesh_queue_capacity: 1024, shutdown_grace_ms: 10_000 }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: StorageBackend::Local,
            data_dir: PathBuf::from("./data"),
            retention_check_interval_ms: 300_000,
            flush_messages: 0,
            flush_ms: 0,
            max_producer_states_per_partition: 10_000,
            max_open_files: 0,
            cleaner_backoff_ms: 15_000,
            cleaner_dedupe_buffer_bytes: 64 << 20,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            bootstrap: Vec::new(),
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            pool_size: 4,
            metadata_max_age_ms: 30_000,
            retry_backoff_ms: 100,
            security: Default::default(),
        }
    }
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig { group_bootstrap: Vec::new(), request_timeout_ms: 30_000, security: Default::default() }
    }
}

impl Default for TopicsConfig {
    fn default() -> Self {
        TopicsConfig {
            auto_create: true,
            default_partitions: 1,
            max_partitions: 10_000,
            max_partitions_per_node: 100_000,
            defaults: TopicDefaults::default(),
        }
    }
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            segment_bytes: 1024 * 1024 * 1024,
            internal_segment_bytes: None,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
        }
    }
}

// === loading and validation ===

/// Hard bounds, documented next to the check that enforces them.
const MIN_FRAME_BYTES: u32 = 1024;
/// Kafka sizes are i32 on the wire; a frame larger than this cannot be expressed.
const MAX_FRAME_BYTES: u32 = i32::MAX as u32;
/// Kafka 4's smallest `segment.bytes` and `log.segment.bytes` (KIP-1030): 1 MiB.
pub const MIN_NEW_SEGMENT_BYTES: u64 = 1024 * 1024;
/// The smallest segment storage can work with (`internal_segment_bytes`): a batch header.
const MIN_SEGMENT_BYTES: u64 = 14;
/// Positions in Kafka's offset index are 32-bit.
const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;
const MAX_SHARDS: usize = 1024;

impl Config {
    /// Parses a TOML document, layering it over the defaults.
    pub fn from_toml(text: &str, path: Option<PathBuf>) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse { path, message: e.to_string().trim_end().to_string() })
    }

    /// Reads and parses a config file (not yet validated).
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::from_toml(&text, Some(path.to_path_buf()))
    }

    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let c = &self.cluster;
        if c.nodes.is_empty() {
            return Ok(());
        }
        let mut seen = std::collections::BTreeSet::new();
        for node in &c.nodes {
            if node.id < 0 {
                return Err(invalid("cluster.nodes", format!("node ids must be >= 0, got {}", node.id)));
            }
            if !seen.insert(node.id) {
                return Err(invalid("cluster.nodes", format!("node id {} is listed twice", node.id)));
            }
            parse_host_port(&node.raft).map_err(|reason| invalid("cluster.nodes", format!("node {}: raft: {reason}", node.id)))?;
            parse_host_port(&node.kafka).map_err(|reason| invalid("cluster.nodes", format!("node {}: kafka: {reason}", node.id)))?;
            if let Some(admin) = &node.admin {
                parse_host_port(admin).map_err(|reason| invalid("cluster.nodes", format!("node {}: admin: {reason}", node.id)))?;
            }
        }
        if !seen.contains(&self.node.id) {
            return Err(invalid("cluster.nodes", format!("must include this node (node.id = {})", self.node.id)));
        }
        if c.is_multi_node() && (self.listeners().iter().any(|l| l.listen == c.raft_listen) || c.raft_listen == self.admin.listen) {
            return Err(invalid("cluster.raft_listen", "must differ from the Kafka listeners and admin.listen"));
        }
        if c.is_multi_node() {
            c.secret()?;
        }
        Ok(())
    }

    fn validate_upstream(&self) -> Result<(), ConfigError> {
        let u = &self.upstream;
        if self.storage.backend != StorageBackend::Upstream {
            if !u.bootstrap.is_empty() {
                return Err(invalid("upstream.bootstrap", "is set but storage.backend is not \"upstream\""));
            }
            if u.security != Default::default() {
                return Err(invalid("upstream.security", "is set but storage.backend is not \"upstream\""));
            }
            return Ok(());
        }
        if u.bootstrap.is_empty() {
            return Err(invalid("upstream.bootstrap", "must name at least one host:port when storage.backend = \"upstream\""));
        }
        for address in &u.bootstrap {
            parse_host_port(address).map_err(|reason| invalid("upstream.bootstrap", format!("{address}: {reason}")))?;
        }
        for (key, value) in [
            ("upstream.connect_timeout_ms", u.connect_timeout_ms),
            ("upstream.request_timeout_ms", u.request_timeout_ms),
            ("upstream.metadata_max_age_ms", u.metadata_max_age_ms),
            ("upstream.retry_backoff_ms", u.retry_backoff_ms),
        ] {
            if !(1..=3_600_000).contains(&value) {
                return Err(invalid(key, format!("must be between 1 and 3600000, got {value}")));
            }
        }
        if !(1..=1024).contains(&u.pool_size) {
            return Err(invalid("upstream.pool_size", format!("must be between 1 and 1024, got {}", u.pool_size)));
        }
        u.security.validate("upstream.security")
    }

    fn validate_sidecar(&self) -> Result<(), ConfigError> {
        let s = &self.sidecar;
        if self.role != Role::Sidecar {
            if !s.group_bootstrap.is_empty() {
                return Err(invalid("sidecar.group_bootstrap", "is set but role is not \"sidecar\""));
            }
            if s.security != Default::default() {
                return Err(invalid("sidecar.security", "is set but role is not \"sidecar\""));
            }
            return Ok(());
        }
        if self.storage.backend != StorageBackend::Upstream {
            return Err(invalid("role", "\"sidecar\" needs storage.backend = \"upstream\": a sidecar keeps no partition data"));
        }
        if self.cluster.is_multi_node() {
            return Err(invalid("cluster.nodes", "a sidecar is one node; list the corral cluster in sidecar.group_bootstrap"));
        }
        if s.group_bootstrap.is_empty() {
            return Err(invalid(
                "sidecar.group_bootstrap",
                "must name at least one host:port of the group service when role = \"sidecar\"",
            ));
        }
        for address in &s.group_bootstrap {
            parse_host_port(address).map_err(|reason| invalid("sidecar.group_bootstrap", format!("{address}: {reason}")))?;
        }
        // A sidecar forwards group requests as they come, under its own identity: the group
        // service authorizes that identity, and per-client rules here would check only half.
        if !self.authorization.rules.is_empty() || !self.authorization.super_users.is_empty() {
            return Err(invalid(
                "authorization",
                "is not served in the sidecar role: the group service and the storage tier authorize the sidecar's own identity",
            ));
        }
        if !(1..=3_600_000).contains(&s.request_timeout_ms) {
            return Err(invalid("sidecar.request_timeout_ms", format!("must be between 1 and 3600000, got {}", s.request_timeout_ms)));
        }
        s.security.validate("sidecar.security")
    }

    /// Checks every bound and cross-field rule. Runs before anything is bound or opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&k.max_frame_bytes) {
            return Err(invalid(
                "kafka.max_frame_bytes",
                format!("must be between {MIN_FRAME_BYTES} and {MAX_FRAME_BYTES}, got {}", k.max_frame_bytes),
            ));
        }
        if k.max_inflight_per_connection == 0 || k.max_inflight_per_connection > 65_536 {
            return Err(invalid("kafka.max_inflight_per_connection", "must be between 1 and 65536"));
        }
        if k.max_connections_per_shard == 0 {
            return Err(invalid("kafka.max_connections_per_shard", "must be at least 1"));
        }
        if k.max_connections == 0 {
            return Err(invalid("kafka.max_connections", "must be at least 1"));
        }
        if k.max_connections_per_ip == 0 {
            return Err(invalid("kafka.max_connections_per_ip", "must be at least 1"));
        }
        if k.connections_max_idle_ms == 0 {
            return Err(invalid("kafka.connections_max_idle_ms", "must be at least 1"));
        }
        if k.request_body_timeout_ms == 0 {
            return Err(invalid("kafka.request_body_timeout_ms", "must be at least 1"));
        }
        if k.queued_max_request_bytes != -1 && k.queued_max_request_bytes < k.max_frame_bytes as i64 {
            return Err(invalid(
                "kafka.queued_max_request_bytes",
                format!("must be -1 (no limit) or at least kafka.max_frame_bytes ({})", k.max_frame_bytes),
            ));
        }
        if !k.advertised.is_empty() {
            parse_host_port(&k.advertised).map_err(|reason| invalid("kafka.advertised", reason))?;
        }
        if self.admin.listen == k.listen && k.listen.port() != 0 {
            return Err(invalid("admin.listen", "must differ from kafka.listen"));
        }
        security::validate(self)?;
        self.authorization.validate()?;
        self.quotas.validate()?;
        if !(1..=1_440).contains(&self.admin.rebalance_storm_window_minutes) {
            return Err(invalid("admin.rebalance_storm_window_minutes", "must be between 1 and 1440"));
        }
        if self.node.id < 0 {
            return Err(invalid("node.id", format!("must be >= 0, got {}", self.node.id)));
        }
        self.validate_cluster()?;
        self.validate_upstream()?;
        self.validate_sidecar()?;
        let r = &self.runtime;
        if r.shards > MAX_SHARDS {
            return Err(invalid("runtime.shards", format!("must be at most {MAX_SHARDS}, got {}", r.shards)));
        }
        if r.mesh_queue_capacity == 0 {
            return Err(invalid("runtime.mesh_queue_capacity", "must be at least 1"));
        }
        if self.storage.data_dir.as_os_str().is_empty() {
            return Err(invalid("storage.data_dir", "must not be empty"));
        }
        if self.storage.max_producer_states_per_partition == 0 {
            return Err(invalid("storage.max_producer_states_per_partition", "must be at least 1"));
        }
        if self.storage.retention_check_interval_ms == 0 {
            return Err(invalid("storage.retention_check_interval_ms", "must be at least 1"));
        }
        if self.storage.cleaner_backoff_ms == 0 {
            return Err(invalid("storage.cleaner_backoff_ms", "must be at least 1"));
        }
        if self.storage.cleaner_dedupe_buffer_bytes < 1 << 20 {
            return Err(invalid("storage.cleaner_dedupe_buffer_bytes", "must be at least 1048576"));
        }
        let t = &self.topics;
        if t.max_partitions < 1 {
            return Err(invalid("topics.max_partitions", "must be at least 1"));
        }
        if t.max_partitions_per_node < 1 {
            return Err(invalid("topics.max_partitions_per_node", "must be at least 1"));
        }
        if t.default_partitions < 1 || t.default_partitions > t.max_partitions {
            return Err(invalid(
                "topics.default_partitions",
                format!("must be between 1 and topics.max_partitions ({}), got {}", t.max_partitions, t.default_partitions),
            ));
        }
        self.groups.validate()?;
        let d = &t.defaults;
        let min = MIN_NEW_SEGMENT_BYTES;
        if !(min..=MAX_SEGMENT_BYTES).contains(&d.segment_bytes) {
            return Err(invalid(
                "topics.defaults.segment_bytes",
                format!("must be between {min} and {MAX_SEGMENT_BYTES}, got {}", d.segment_bytes),
            ));
        }
        if let Some(bytes) = d.internal_segment_bytes.filter(|b| !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(b)) {
            return Err(invalid(
                "topics.defaults.internal_segment_bytes",
                format!("must be between {MIN_SEGMENT_BYTES} and {MAX_SEGMENT_BYTES}, got {bytes}"),
            ));
        }
        if d.segment_ms < 1 {
            return Err(invalid("topics.defaults.segment_ms", "must be at least 1"));
        }
        if d.retention_ms < -1 {
            return Err(invalid("topics.defaults.retention_ms", "must be -1 (forever) or >= 0"));
        }
        if d.retention_bytes < -1 {
            return Err(invalid("topics.defaults.retention_bytes", "must be -1 (unlimited) or >= 0"));
        }
        if d.max_message_bytes == 0 || d.max_message_bytes > i32::MAX as u32 {
            return Err(invalid("topics.defaults.max_message_bytes", "must be between 1 and 2147483647"));
        }
        Ok(())
    }

    /// Number of shards to run: the configured count, or one per available core.
    pub fn shard_count(&self) -> usize {
        match self.runtime.shards {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            n => n,
        }
    }

    /// `(host, port)` clients should connect to.
    /// The Kafka listeners: `kafka.listen` first, then `kafka.listeners`. Names default to the
    /// protocol's.
    pub fn listeners(&self) -> Vec<ListenerConfig> {
        let k = &self.kafka;
        let first = ListenerConfig {
            name: String::new(),
            protocol: k.protocol,
            listen: k.listen,
            advertised: k.advertised.clone(),
            client_auth: k.client_auth,
        };
        let mut listeners: Vec<ListenerConfig> = std::iter::once(first).chain(k.listeners.iter().cloned()).collect();
        for l in &mut listeners {
            if l.name.is_empty() {
                l.name = l.protocol.name().to_string();
            }
        }
        listeners
    }
}

/// Splits `host:port` (a hostname, IPv4 or `[IPv6]`).
pub fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("expected host:port, got {s:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("missing host in {s:?}"));
    }
    let port: u16 = port.parse().map_err(|_| format!("invalid port in {s:?}"))?;
    if port == 0 {
        return Err(format!("port must not be 0 in {s:?}"));
    }
    Ok((host.to_string(), port))
}

/// The documented default configuration, embedded so the binary and the docs cannot drift.
pub const REFERENCE_TOML: &str = include_str!("../../config/corral.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_file_is_the_default() {
        let parsed = Config::from_toml(REFERENCE_TOML, None).unwrap();
        assert_eq!(parsed, Config::default());
        parsed.validate().unwrap();
    }

    #[test]
    fn upstream_settings_are_checked_against_the_backend() {
        let parse = |text: &str| Config::from_toml(text, None).and_then(|c| c.validate().map(|()| c));
        let err = parse("[storage]\nbackend = \"upstream\"\n").unwrap_err().to_string();
        assert!(err.contains("upstream.bootstrap"), "{err}");
        let err = parse("[upstream]\nbootstrap = [\"kafka:9092\"]\n").unwrap_err().to_string();
        assert!(err.contains("upstream.bootstrap") && err.contains("storage.backend"), "{err}");
        let err = parse("[storage]\nbackend = \"upstream\"\n[upstream]\nbootstrap = [\"nohost\"]\n").unwrap_err().to_string();
        assert!(err.contains("upstream.bootstrap"), "{err}");
        let err =
            parse("[storage]\nbackend = \"upstream\"\n[upstream]\nbootstrap = [\"kafka:9092\"]\npool_size = 0\n").unwrap_err().to_string();
        assert!(err.contains("upstream.pool_size"), "{err}");
        let err = parse("[storage]\nbackend = \"s3\"\n").unwrap_err().to_string();
        assert!(err.contains("backend"), "{err}");
        let ok = parse("[storage]\nbackend = \"upstream\"\n[upstream]\nbootstrap = [\"kafka-0.kafka:9092\", \"10.0.0.1:9092\"]\n").unwrap();
        assert_eq!(ok.upstream.bootstrap.len(), 2);
    }

    #[test]
    fn sidecar_settings_are_checked_against_the_role() {
        let parse = |text: &str| Config::from_toml(text, None).and_then(|c| c.validate().map(|()| c));
        let upstream = "[storage]\nbackend = \"upstream\"\n[upstream]\nbootstrap = [\"kafka:9092\"]\n";
        let err = parse("role = \"sidecar\"\n").unwrap_err().to_string();
        assert!(err.contains("role") && err.contains("storage.backend"), "{err}");
        let err = parse(&format!("role = \"sidecar\"\n{upstream}")).unwrap_err().to_string();
        assert!(err.contains("sidecar.group_bootstrap"), "{err}");
        let err = parse("[sidecar]\ngroup_bootstrap = [\"corral:9092\"]\n").unwrap_err().to_string();
        assert!(err.contains("sidecar.group_bootstrap") && err.contains("role"), "{err}");
        let err = parse(&format!("role = \"sidecar\"\n{upstream}[sidecar]\ngroup_bootstrap = [\"corral\"]\n")).unwrap_err().to_string();
        assert!(err.contains("sidecar.group_bootstrap"), "{err}");
        let err = parse("role = \"proxy\"\n").unwrap_err().to_string();
        assert!(err.contains("role"), "{err}");
        let ok = parse(&format!("role = \"sidecar\"\n{upstream}[sidecar]\ngroup_bootstrap = [\"corral-0.corral:9092\"]\n")).unwrap();
        assert_eq!(ok.role, Role::Sidecar);
        let rules = "[authorization]\nsuper_users = [\"User:admin\"]\n";
        let err = parse(&format!("role = \"sidecar\"\n{upstream}[sidecar]\ngroup_bootstrap = [\"corral:9092\"]\n{rules}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("authorization") && err.contains("sidecar"), "{err}");
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::from_toml("", None).unwrap(), Config::default());
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::from_toml("[kafka]\nlisten_port = 1\n", None).unwrap_err().to_string();
        assert!(err.contains("listen_port"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let err = Config::from_toml("[kafka]\nmax_frame_bytes = \"big\"\n", None).unwrap_err().to_string();
        assert!(err.contains("max_frame_bytes"), "{err}");
    }

    #[test]
    fn out_of_range_names_the_key() {
        let mut c = Config::default();
        c.kafka.max_frame_bytes = 10;
        assert!(c.validate().unwrap_err().to_string().contains("kafka.max_frame_bytes"));
        let mut c = Config::default();
        c.topics.default_partitions = 0;
        assert!(c.validate().unwrap_err().to_string().contains("topics.default_partitions"));
        let mut c = Config::default();
        c.groups.min_session_timeout_ms = 10_000_000;
        assert!(c.validate().unwrap_err().to_string().contains("groups.min_session_timeout_ms"));
        let mut c = Config::default();
        c.kafka.advertised = "nohost".into();
        assert!(c.validate().unwrap_err().to_string().contains("kafka.advertised"));
        let mut c = Config::default();
        c.groups.consumer_migration_policy = "sideways".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("groups.consumer_migration_policy") && err.contains("\"downgrade\""), "{err}");
        c.groups.consumer_migration_policy = "Upgrade".into();
        c.validate().unwrap();
        assert_eq!(MigrationPolicy::from_name(&c.groups.consumer_migration_policy), Some(MigrationPolicy::Upgrade));
    }

    #[test]
    fn host_port() {
        assert_eq!(parse_host_port("a.b:9092").unwrap(), ("a.b".into(), 9092));
        assert_eq!(parse_host_port("[::1]:9092").unwrap(), ("::1".into(), 9092));
        assert!(parse_host_port("a:0").is_err());
        assert!(parse_host_port(":1").is_err());
    }
}
