//! Every metric corral exports: names, help texts and labels are declared here and nowhere else.
//!
//! Recorded through the `metrics` facade, exported in Prometheus format by
//! `metrics-exporter-prometheus` on the admin port. Each shard holds its own handles (label
//! `shard`), so hot-path updates touch only that shard's atomics; Prometheus sums across shards.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "corral_requests_total";
pub const REQUEST_DURATION: &str = "corral_request_duration_seconds";
pub const REQUESTS_REJECTED: &str = "corral_requests_rejected_total";
pub const CONNECTIONS_ACTIVE: &str = "corral_connections_active";
pub const CONNECTIONS_ACCEPTED: &str = "corral_connections_accepted_total";
pub const BYTES_RECEIVED: &str = "corral_bytes_received_total";
pub const BYTES_SENT: &str = "corral_bytes_sent_total";
pub const SENDFILE_BYTES: &str = "corral_sendfile_bytes_total";
pub const RECORDS_APPENDED: &str = "corral_records_appended_total";
pub const RETENTION_SEGMENTS_DELETED: &str = "corral_retention_segments_deleted_total";
pub const RETENTION_BYTES_DELETED: &str = "corral_retention_bytes_deleted_total";
pub const COMPACTION_RECORDS_REMOVED: &str = "corral_compaction_records_removed_total";
pub const COMPACTION_BYTES_RECLAIMED: &str = "corral_compaction_bytes_reclaimed_total";
pub const SEGMENT_FILES_OPEN: &str = "corral_segment_files_open";
pub const SEGMENT_FILE_OPENS: &str = "corral_segment_file_opens_total";
pub const CONNECTIONS_REFUSED: &str = "corral_connections_refused_total";
pub const CONNECTIONS_CLOSED: &str = "corral_connections_closed_total";
pub const QUEUED_REQUEST_BYTES: &str = "corral_queued_request_bytes";
pub const RAFT_PEERS_REFUSED: &str = "corral_raft_peer_connections_refused_total";
pub const COORDINATOR_WRITES_REFUSED: &str = "corral_coordinator_writes_refused_total";
pub const PRODUCER_STATES_EVICTED: &str = "corral_producer_states_evicted_total";
pub const LIMITS_REACHED: &str = "corral_limits_reached_total";
pub const REBALANCES: &str = "corral_rebalances_total";
pub const REBALANCE_DURATION: &str = "corral_rebalance_duration_seconds";
pub const REBALANCE_PHASE_DURATION: &str = "corral_rebalance_phase_duration_seconds";
pub const COORDINATOR_WRITE_DURATION: &str = "corral_coordinator_write_duration_seconds";
pub const RAFT_LEADER_CHANGES: &str = "corral_raft_leader_changes_total";
pub const GROUP_REQUESTS: &str = "corral_group_requests_total";
pub const UPSTREAM_REQUESTS: &str = "corral_upstream_requests_total";
pub const UPSTREAM_REQUEST_DURATION: &str = "corral_upstream_request_duration_seconds";
pub const UPSTREAM_CONNECTIONS_OPENED: &str = "corral_upstream_connections_opened_total";
pub const UPSTREAM_METADATA_REFRESHES: &str = "corral_upstream_metadata_refreshes_total";
pub const UPSTREAM_METADATA_STALE: &str = "corral_upstream_metadata_stale_total";
pub const UPSTREAM_RETRIES: &str = "corral_upstream_retries_total";
pub const UPSTREAM_CONNECTIONS: &str = "corral_upstream_connections";
pub const SIDECAR_GROUP_REQUESTS: &str = "corral_sidecar_group_requests_total";
pub const SIDECAR_COORDINATOR_LOOKUPS: &str = "corral_sidecar_coordinator_lookups_total";
pub const SASL_AUTHENTICATIONS: &str = "corral_sasl_authentications_total";
pub const TLS_HANDSHAKES_FAILED: &str = "corral_tls_handshakes_failed_total";
pub const TLS_CONNECTIONS: &str = "corral_tls_connections_total";
pub const SECURITY_FILES_RELOADED: &str = "corral_security_files_reloaded_total";
pub const ADMIN_REQUESTS_UNAUTHORIZED: &str = "corral_admin_requests_unauthorized_total";
pub const QUOTA_THROTTLES: &str = "corral_quota_throttles_total";
pub const QUOTA_THROTTLE_MS: &str = "corral_quota_throttle_milliseconds_total";

/// Latency buckets, seconds: from a cached metadata answer to a long-polled fetch.
const LATENCY_BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Rebalance buckets, seconds: from a single member's rejoin to a large group's slow sync.
const REBALANCE_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (once per process) and returns the handle that renders it.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.to_string()), LATENCY_BUCKETS)
                .expect("buckets are not empty")
                .set_buckets_for_metric(Matcher::Full(REBALANCE_DURATION.to_string()), REBALANCE_BUCKETS)
                .expect("buckets are not empty")
                .set_buckets_for_metric(Matcher::Full(REBALANCE_PHASE_DURATION.to_string()), REBALANCE_BUCKETS)
                .expect("buckets are not empty")
                .set_buckets_for_metric(Matcher::Full(COORDINATOR_WRITE_DURATION.to_string()), LATENCY_BUCKETS)
                .expect("buckets are not empty")
                .set_buckets_for_metric(Matcher::Full(UPSTREAM_REQUEST_DURATION.to_string()), LATENCY_BUCKETS)
                .expect("buckets are not empty")
                .install_recorder()
                .expect("the metrics recorder is installed once");
            describe();
            zero_counters();
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        SIDECAR_GROUP_REQUESTS,
        "Group requests a sidecar forwarded, by API and outcome (ok; followed: answered after the coordinator moved; failed: answered with the coordinator error)"
    );
    describe_counter!(SIDECAR_COORDINATOR_LOOKUPS, "FindCoordinator requests a sidecar sent to the group service, by outcome");
    describe_counter!(UPSTREAM_REQUESTS, "Requests sent to the upstream cluster, by broker, API and outcome (ok or error: no answer)");
    describe_histogram!(
        UPSTREAM_REQUEST_DURATION,
        Unit::Seconds,
        "Time from sending a request to the upstream to its answer, by broker and API"
    );
    describe_counter!(UPSTREAM_CONNECTIONS_OPENED, "Connections opened to upstream brokers, by broker");
    describe_counter!(UPSTREAM_METADATA_REFRESHES, "Reads of the upstream's metadata, by outcome");
    describe_counter!(UPSTREAM_METADATA_STALE, "Times an upstream answer showed corral's view of the upstream to be stale");
    describe_gauge!(UPSTREAM_CONNECTIONS, "Connections to upstream brokers open or being opened, on every shard");
    describe_counter!(UPSTREAM_RETRIES, "Requests sent to the upstream again after a metadata refresh, by API");
    describe_counter!(SASL_AUTHENTICATIONS, "SASL authentications finished, by mechanism and outcome (ok, failed)");
    describe_counter!(
        TLS_CONNECTIONS,
        "Client connections whose TLS handshake completed, by listener and by who encrypts: the kernel (kTLS) or rustls"
    );
    describe_counter!(TLS_HANDSHAKES_FAILED, "Client connections closed because their TLS handshake failed or timed out, by listener");
    describe_counter!(SECURITY_FILES_RELOADED, "TLS certificates and SASL credentials loaded again after their files changed (what)");
    describe_counter!(
        ADMIN_REQUESTS_UNAUTHORIZED,
        "Admin listener requests answered 401: no bearer token, or not admin.bearer_token_file's"
    );
    describe_counter!(QUOTA_THROTTLES, "Requests over their client quota, by quota (produce, fetch, request)");
    describe_counter!(QUOTA_THROTTLE_MS, "Milliseconds clients were throttled for, by quota (produce, fetch, request)");
    describe_counter!(REQUESTS, "Requests completed, by API and version");
    describe_histogram!(REQUEST_DURATION, Unit::Seconds, "Time from reading a request to writing its response, by API and version");
    describe_counter!(REQUESTS_REJECTED, "Requests that closed their connection (malformed, unknown API, unsupported version)");
    describe_gauge!(CONNECTIONS_ACTIVE, "Open client connections");
    describe_counter!(CONNECTIONS_ACCEPTED, "Client connections accepted");
    describe_counter!(BYTES_RECEIVED, Unit::Bytes, "Request bytes read from clients");
    describe_counter!(BYTES_SENT, Unit::Bytes, "Response bytes written to clients");
    describe_counter!(SENDFILE_BYTES, Unit::Bytes, "Record bytes sent to consumers with sendfile(2)");
    describe_counter!(RECORDS_APPENDED, "Records appended to partition logs");
    describe_counter!(RETENTION_SEGMENTS_DELETED, "Segments deleted by retention");
    describe_gauge!(SEGMENT_FILES_OPEN, "Segment files held open by the shards' caches (storage.max_open_files)");
    describe_counter!(SEGMENT_FILE_OPENS, "Segment files opened: a count growing with traffic means the cache is too small");
    describe_counter!(RETENTION_BYTES_DELETED, Unit::Bytes, "Bytes deleted by retention");
    describe_counter!(
        COMPACTION_RECORDS_REMOVED,
        "Records compaction removed from compacted topics (replaced, keyless, expired tombstones)"
    );
    describe_counter!(COMPACTION_BYTES_RECLAIMED, Unit::Bytes, "Bytes of segments compaction freed");
    describe_counter!(CONNECTIONS_REFUSED, "Client connections closed as they were accepted, by the limit they would pass (limit)");
    describe_counter!(CONNECTIONS_CLOSED, "Client connections closed by the node: idle past connections_max_idle_ms, or a request slower than request_body_timeout_ms (reason)");
    describe_gauge!(
        QUEUED_REQUEST_BYTES,
        Unit::Bytes,
        "Bytes of requests read and not yet answered, on the node (at most queued_max_request_bytes)"
    );
    describe_counter!(
        RAFT_PEERS_REFUSED,
        "Connections to the Raft port closed before any message was read: not a node of the cluster, or a wrong cluster secret"
    );
    describe_counter!(
        COORDINATOR_WRITES_REFUSED,
        "Group writes refused before they were proposed: larger than one __consumer_offsets batch may be"
    );
    describe_counter!(REBALANCES, "Rebalances completed, by group protocol (kind) and what started them (trigger)");
    describe_histogram!(
        REBALANCE_DURATION,
        Unit::Seconds,
        "Time from a rebalance's start until every member held its assignment, by group protocol"
    );
    describe_histogram!(
        REBALANCE_PHASE_DURATION,
        Unit::Seconds,
        "Time each phase of a classic rebalance took (phase: join, until every member rejoined; sync, from there to Stable)"
    );
    describe_counter!(
        GROUP_REQUESTS,
        "Group requests answered, by API and result (error: Kafka's error name, NONE for success; OffsetCommit and LeaveGroup: the first failed partition's or member's)"
    );
    describe_histogram!(
        COORDINATOR_WRITE_DURATION,
        Unit::Seconds,
        "Time from proposing a coordinator partition's records to their Raft entry being committed and applied"
    );
    describe_counter!(
        RAFT_LEADER_CHANGES,
        "Times the leader of a Raft group changed as this node saw it (raft_group: a coordinator partition, or metadata)"
    );
    describe_counter!(LIMITS_REACHED, "Requests refused because they would pass a configured limit, by the limit's config key");
    describe_counter!(
        PRODUCER_STATES_EVICTED,
        "Idempotent producers forgotten early because a partition tracked max_producer_states_per_partition others"
    );
}

/// Label values of the node-wide counters, declared here so each series exists from the start.
pub mod labels {
    pub const LIMIT_PARTITIONS_PER_NODE: &str = "topics.max_partitions_per_node";
    pub const LIMIT_PENDING_MEMBERS: &str = "groups.max_pending_members";
    pub const LIMIT_GROUPS_PER_PARTITION: &str = "groups.max_groups_per_partition";
    pub const REFUSED_MAX_CONNECTIONS: &str = "max_connections";
    pub const REFUSED_MAX_CONNECTIONS_PER_IP: &str = "max_connections_per_ip";
    pub const CLOSED_IDLE: &str = "idle";
    pub const CLOSED_SLOW_REQUEST: &str = "slow_request";
    pub const CLOSED_UNAUTHENTICATED: &str = "unauthenticated";
}

/// Kafka's name of an error (`REBALANCE_IN_PROGRESS`), from the codec's (`RebalanceInProgress`).
fn kafka_error_name(e: kafka_protocol::ResponseError) -> String {
    let mut name = String::new();
    for (i, c) in format!("{e:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// Counters of rare events exist at 0 from the start, so `rate()` and alerts see the first one.
fn zero_counters() {
    for c in [RAFT_PEERS_REFUSED, COORDINATOR_WRITES_REFUSED, PRODUCER_STATES_EVICTED] {
        counter!(c).increment(0);
    }
    for limit in [labels::LIMIT_PARTITIONS_PER_NODE, labels::LIMIT_PENDING_MEMBERS, labels::LIMIT_GROUPS_PER_PARTITION] {
        counter!(LIMITS_REACHED, "limit" => limit).increment(0);
    }
    for limit in [labels::REFUSED_MAX_CONNECTIONS, labels::REFUSED_MAX_CONNECTIONS_PER_IP] {
        counter!(CONNECTIONS_REFUSED, "limit" => limit).increment(0);
    }
    for reason in [labels::CLOSED_IDLE, labels::CLOSED_SLOW_REQUEST, labels::CLOSED_UNAUTHENTICATED] {
        counter!(CONNECTIONS_CLOSED, "reason" => reason).increment(0);
    }
}

/// One shard's metric handles. Lives on its shard.
#[derive(Debug)]
pub struct ShardMetrics {
    shard: String,
    per_api: RefCell<HashMap<(i16, i16), (Counter, Histogram)>>,
    per_group_result: RefCell<HashMap<(i16, i16), Counter>>,
    connections_active: Gauge,
    connections_accepted: Counter,
    bytes_received: Counter,
    bytes_sent: Counter,
    sendfile_bytes: Counter,
    records_appended: Counter,
    rejected: Counter,
}

impl ShardMetrics {
    pub fn new(shard: usize) -> ShardMetrics {
        let label = shard.to_string();
        ShardMetrics {
            per_api: RefCell::new(HashMap::new()),
            per_group_result: RefCell::new(HashMap::new()),
            connections_active: gauge!(CONNECTIONS_ACTIVE, "shard" => label.clone()),
            connections_accepted: counter!(CONNECTIONS_ACCEPTED, "shard" => label.clone()),
            bytes_received: counter!(BYTES_RECEIVED, "shard" => label.clone()),
            bytes_sent: counter!(BYTES_SENT, "shard" => label.clone()),
            sendfile_bytes: counter!(SENDFILE_BYTES, "shard" => label.clone()),
            records_appended: counter!(RECORDS_APPENDED, "shard" => label.clone()),
            rejected: counter!(REQUESTS_REJECTED, "shard" => label.clone()),
            shard: label,
        }
    }

    pub fn request_completed(&self, api: ApiKey, version: i16, elapsed: Duration) {
        let mut per_api = self.per_api.borrow_mut();
        let (count, latency) = per_api.entry((api as i16, version)).or_insert_with(|| {
            let (name, version) = (format!("{api:?}"), version.to_string());
            (
                counter!(REQUESTS, "api" => name.clone(), "version" => version.clone(), "shard" => self.shard.clone()),
                histogram!(REQUEST_DURATION, "api" => name, "version" => version, "shard" => self.shard.clone()),
            )
        });
        count.increment(1);
        latency.record(elapsed.as_secs_f64());
    }

    /// A group request (Heartbeat, JoinGroup, SyncGroup, LeaveGroup, OffsetCommit, OffsetFetch,
    /// ConsumerGroupHeartbeat) answered with `code`.
    pub fn group_answered(&self, api: ApiKey, code: i16) {
        let mut per_result = self.per_group_result.borrow_mut();
        let counter = per_result.entry((api as i16, code)).or_insert_with(|| {
            let error = match kafka_protocol::ResponseError::try_from_code(code) {
                None if code == 0 => "NONE".to_string(),
                None => format!("UNKNOWN_CODE_{code}"),
                Some(e) => kafka_error_name(e),
            };
            counter!(GROUP_REQUESTS, "api" => format!("{api:?}"), "error" => error, "shard" => self.shard.clone())
        });
        counter.increment(1);
    }

    pub fn request_rejected(&self) {
        self.rejected.increment(1);
    }

    /// Counts an open connection until the returned guard drops.
    pub fn connection_opened(&self) -> ConnectionGuard {
        self.connections_accepted.increment(1);
        self.connections_active.increment(1.0);
        ConnectionGuard(self.connections_active.clone())
    }

    pub fn bytes_received(&self, n: u64) {
        self.bytes_received.increment(n);
    }

    pub fn bytes_sent(&self, n: u64) {
        self.bytes_sent.increment(n);
    }

    pub fn sendfile_bytes(&self, n: u64) {
        self.sendfile_bytes.increment(n);
    }

    pub fn records_appended(&self, n: u64) {
        self.records_appended.increment(n);
    }

    pub fn retention_deleted(&self, segments: usize, bytes: u64) {
        counter!(RETENTION_SEGMENTS_DELETED, "shard" => self.shard.clone()).increment(segments as u64);
        counter!(RETENTION_BYTES_DELETED, "shard" => self.shard.clone()).increment(bytes);
    }

    pub fn compacted(&self, records_removed: u64, bytes_reclaimed: u64) {
        counter!(COMPACTION_RECORDS_REMOVED, "shard" => self.shard.clone()).increment(records_removed);
        counter!(COMPACTION_BYTES_RECLAIMED, "shard" => self.shard.clone()).increment(bytes_reclaimed);
    }
}

/// A client connection closed at accept: `limit` names the limit it would pass.
pub fn connection_refused(limit: &'static str) {
    counter!(CONNECTIONS_REFUSED, "limit" => limit).increment(1);
}

/// A client connection the node closed: idle, or a request that did not arrive in time.
pub fn connection_closed(reason: &'static str) {
    counter!(CONNECTIONS_CLOSED, "reason" => reason).increment(1);
}

/// A SASL exchange finished.
pub fn sasl_authentication(mechanism: &str, ok: bool) {
    counter!(SASL_AUTHENTICATIONS, "mechanism" => mechanism.to_string(), "outcome" => if ok { "ok" } else { "failed" }).increment(1);
}

/// A client's TLS handshake completed; `kernel`: the kernel took the session (kTLS).
pub fn tls_connection(listener: &str, kernel: bool) {
    let encryption = if kernel { "kernel" } else { "rustls" };
    counter!(TLS_CONNECTIONS, "listener" => listener.to_string(), "encryption" => encryption).increment(1);
}

/// A client's TLS handshake failed or timed out.
pub fn tls_handshake_failed(listener: &str) {
    counter!(TLS_HANDSHAKES_FAILED, "listener" => listener.to_string()).increment(1);
}

/// An admin request without the bearer token was answered 401.
pub fn admin_request_unauthorized() {
    counter!(ADMIN_REQUESTS_UNAUTHORIZED).increment(1);
}

/// Certificate or credential files were loaded again.
pub fn security_file_reloaded(what: &'static str) {
    counter!(SECURITY_FILES_RELOADED, "what" => what).increment(1);
}

/// A request over its quota: the client is throttled for `throttle`.
pub fn quota_throttled(quota: &'static str, throttle: Duration) {
    counter!(QUOTA_THROTTLES, "quota" => quota).increment(1);
    counter!(QUOTA_THROTTLE_MS, "quota" => quota).increment(throttle.as_millis() as u64);
}

/// Request bytes held on the node now.
pub fn queued_request_bytes(bytes: usize) {
    gauge!(QUEUED_REQUEST_BYTES).set(bytes as f64);
}

/// A connection to the Raft port that did not authenticate.
pub fn raft_peer_refused() {
    counter!(RAFT_PEERS_REFUSED).increment(1);
}

/// A group write too large for one `__consumer_offsets` batch, refused.
pub fn coordinator_write_refused() {
    counter!(COORDINATOR_WRITES_REFUSED).increment(1);
}

/// A rebalance of a `kind` group, started by `trigger`, ended after `total_ms` (classic groups:
/// its join and sync phases took `phases_ms`).
pub fn rebalance_completed(kind: &'static str, trigger: &'static str, total_ms: i64, phases_ms: Option<(i64, i64)>) {
    counter!(REBALANCES, "kind" => kind, "trigger" => trigger).increment(1);
    histogram!(REBALANCE_DURATION, "kind" => kind).record(total_ms.max(0) as f64 / 1000.0);
    if let Some((join, sync)) = phases_ms {
        histogram!(REBALANCE_PHASE_DURATION, "kind" => kind, "phase" => "join").record(join.max(0) as f64 / 1000.0);
        histogram!(REBALANCE_PHASE_DURATION, "kind" => kind, "phase" => "sync").record(sync.max(0) as f64 / 1000.0);
    }
}

/// A coordinator partition's write committed after `elapsed`.
pub fn coordinator_write_committed(elapsed: Duration) {
    histogram!(COORDINATOR_WRITE_DURATION).record(elapsed.as_secs_f64());
}

/// The leader of Raft group `raft_group` changed.
pub fn raft_leader_changed(raft_group: String) {
    counter!(RAFT_LEADER_CHANGES, "raft_group" => raft_group).increment(1);
}

/// A request refused by the limit `key` (its config key).
pub fn limit_reached(key: &'static str) {
    counter!(LIMITS_REACHED, "limit" => key).increment(1);
}

/// A shard's cache opened a segment file.
pub fn segment_file_opened() {
    counter!(SEGMENT_FILE_OPENS).increment(1);
    gauge!(SEGMENT_FILES_OPEN).increment(1.0);
}

/// A shard's cache let a segment file go.
pub fn segment_file_closed() {
    gauge!(SEGMENT_FILES_OPEN).decrement(1.0);
}

/// A partition's producer table was full: the producer that wrote least recently was forgotten.
pub fn producer_state_evicted() {
    counter!(PRODUCER_STATES_EVICTED).increment(1);
}

/// An upstream request to `broker` answered (`ok`) or not after `elapsed`.
pub fn upstream_request(broker: i32, api: ApiKey, elapsed: Duration, ok: bool) {
    let (broker, api) = (broker.to_string(), format!("{api:?}"));
    let outcome = if ok { "ok" } else { "error" };
    counter!(UPSTREAM_REQUESTS, "broker" => broker.clone(), "api" => api.clone(), "outcome" => outcome).increment(1);
    histogram!(UPSTREAM_REQUEST_DURATION, "broker" => broker, "api" => api).record(elapsed.as_secs_f64());
}

pub fn upstream_connection_opened(broker: i32) {
    counter!(UPSTREAM_CONNECTIONS_OPENED, "broker" => broker.to_string()).increment(1);
}

pub fn upstream_metadata_refreshed(ok: bool) {
    counter!(UPSTREAM_METADATA_REFRESHES, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

pub fn upstream_metadata_stale() {
    counter!(UPSTREAM_METADATA_STALE).increment(1);
}

pub fn upstream_retried(api: ApiKey) {
    counter!(UPSTREAM_RETRIES, "api" => format!("{api:?}")).increment(1);
}

/// A sidecar answered a forwarded group request: `attempts` sends, `ok` without the
/// coordinator-level error.
pub fn sidecar_group_request(api: ApiKey, attempts: u32, ok: bool) {
    let outcome = match (ok, attempts) {
        (false, _) => "failed",
        (true, 0..=1) => "ok",
        (true, _) => "followed",
    };
    counter!(SIDECAR_GROUP_REQUESTS, "api" => format!("{api:?}"), "outcome" => outcome).increment(1);
}

pub fn sidecar_coordinator_lookup(ok: bool) {
    counter!(SIDECAR_COORDINATOR_LOOKUPS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

/// Counts one upstream connection in `corral_upstream_connections` while it lives.
#[derive(Debug)]
pub struct UpstreamConnectionGuard(Gauge);

/// An upstream connection begins (connecting, then open).
pub fn upstream_connection_begun() -> UpstreamConnectionGuard {
    let g = gauge!(UPSTREAM_CONNECTIONS);
    g.increment(1.0);
    UpstreamConnectionGuard(g)
}

impl Drop for UpstreamConnectionGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Decrements the open-connections gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard(Gauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Series computed at each scrape from the state of the coordinators, the Raft groups and the
/// mesh (so nothing is left behind when a group goes), rendered by the admin listener after what
/// the recorder holds. Their names, types and help texts live here with the rest.
pub mod scraped {
    use std::fmt::Write;

    /// One family of the text format.
    #[derive(Debug)]
    pub struct Family {
        pub name: &'static str,
        pub kind: &'static str,
        pub help: &'static str,
    }

    const fn gauge(name: &'static str, help: &'static str) -> Family {
        Family { name, kind: "gauge", help }
    }

    // Per group, with kafka_exporter's names and labels (consumergroup, topic, partition).
    pub const GROUP_MEMBERS: Family = gauge("kafka_consumergroup_members", "Members of the consumer group.");
    pub const GROUP_CURRENT_OFFSET: Family =
        gauge("kafka_consumergroup_current_offset", "Committed offset of the consumer group in the partition.");
    pub const GROUP_CURRENT_OFFSET_SUM: Family =
        gauge("kafka_consumergroup_current_offset_sum", "Sum of the committed offsets of the consumer group in the topic.");
    pub const GROUP_LAG: Family =
        gauge("kafka_consumergroup_lag", "Log end offset minus committed offset, in the partition (where this node holds its log).");
    pub const GROUP_LAG_SUM: Family = gauge("kafka_consumergroup_lag_sum", "Lag of the consumer group summed over the topic's partitions.");
    // Per group, corral's own.
    pub const GROUP_GENERATION: Family = gauge("corral_group_generation", "Generation (classic) or group epoch (KIP-848) of the group.");
    pub const GROUP_REBALANCES: Family = Family {
        name: "corral_group_rebalances_total",
        kind: "counter",
        help: "Rebalances of the group by trigger, since this node began coordinating it.",
    };
    pub const GROUP_REBALANCES_RECENT: Family = gauge(
        "corral_group_rebalances_recent",
        "Rebalances of the group that ended within admin.rebalance_storm_window_minutes (at most the 16 kept): a rebalance storm.",
    );
    pub const GROUPS: Family = gauge("corral_groups", "Groups this node coordinates, by type and state.");
    pub const GROUPS_UNLABELLED: Family =
        gauge("corral_metrics_groups_unlabelled", "Groups summed under consumergroup=\"__other__\" (beyond admin.metrics_max_groups).");
    // Per Raft group (raft_group: a coordinator partition's index, or metadata).
    pub const RAFT_TERM: Family = gauge("corral_raft_term", "Current term of the Raft group on this node.");
    pub const RAFT_LEADER: Family = gauge("corral_raft_leader", "The Raft group's leader as this node sees it (-1: none).");
    pub const RAFT_APPLY_LAG: Family = gauge("corral_raft_apply_lag", "Entries in this node's log of the Raft group not applied yet.");
    // Per shard.
    pub const MESH_QUEUE_DEPTH: Family = gauge("corral_mesh_queue_depth", "Cross-shard jobs waiting in the shard's inbox.");

    pub fn family(out: &mut String, f: &Family) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", f.name, f.help, f.name, f.kind);
    }

    pub fn sample(out: &mut String, f: &Family, labels: &[(&str, &str)], value: i64) {
        out.push_str(f.name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (key, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{key}=\"");
                escape_label(out, v);
                out.push('"');
            }
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }

    /// A label value as the text format wants it: backslash, double quote and newline escaped.
    fn escape_label(out: &mut String, value: &str) {
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn kafka_names_its_errors_in_upper_snake_case() {
            assert_eq!(super::super::kafka_error_name(kafka_protocol::ResponseError::RebalanceInProgress), "REBALANCE_IN_PROGRESS");
            assert_eq!(super::super::kafka_error_name(kafka_protocol::ResponseError::NotCoordinator), "NOT_COORDINATOR");
        }

        #[test]
        fn label_values_are_escaped() {
            let mut out = String::new();
            sample(&mut out, &GROUP_MEMBERS, &[("consumergroup", "a\"b\\c\nd")], 1);
            assert_eq!(out, "kafka_consumergroup_members{consumergroup=\"a\\\"b\\\\c\\nd\"} 1\n");
        }
    }
}
