//! The node: state shared by every shard of this process.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cluster::catalog::Catalog;
use crate::cluster::producer_ids::ProducerIds;
use crate::config::Config;
use crate::runtime::Mesh;
use crate::storage::log::partition_dir_name;

/// Node-wide, read-mostly state. Shared by all shards through an `Arc`; everything mutable in it
/// is either concurrent (the catalog) or behind a short lock (producer ids).
#[derive(Debug)]
pub struct Node {
    pub config: Config,
    pub node_id: i32,
    pub cluster_id: String,
    /// `(host, port)` clients are told to connect to.
    pub advertised: (String, u16),
    pub catalog: Catalog,
    /// The log end of each partition hosted here, watched by long-polling fetches.
    pub end_offsets: crate::storage::EndOffsets,
    pub mesh: Mesh,
    pub producer_ids: ProducerIds,
    /// Cancelled on SIGTERM/SIGINT (or by a test): listeners stop, connections drain.
    pub shutdown: CancellationToken,
    /// The previous run shut down cleanly, so indexes and snapshots on disk can be trusted.
    pub clean_start: bool,
    /// Segment files each shard keeps open (`storage.max_open_files` over the shards).
    pub open_files_per_shard: usize,
    /// Owner shard of each coordinator partition (`__consumer_offsets` partition → shard). Fixed
    /// for the life of the process, so group requests route without touching the catalog.
    pub coordinator_shards: Vec<crate::runtime::ShardId>,
    pub(crate) ready: AtomicBool,
    /// The cluster's nodes (this one alone on a single node): id → advertised address on the
    /// first Kafka listener.
    pub brokers: std::collections::BTreeMap<i32, (String, u16)>,
    /// The same, for each listener (`[0]` is `brokers`): clients are told the addresses of the
    /// listener they reached.
    pub listener_brokers: Vec<std::collections::BTreeMap<i32, (String, u16)>>,
    /// The Kafka listeners, in `kafka.listeners` order.
    pub listeners: Vec<Arc<crate::security::Listener>>,
    /// SASL credentials and mechanisms, when a listener uses SASL.
    pub sasl: Option<Arc<crate::security::sasl::SaslServer>>,
    /// HTTPS on the admin listener and toward the other nodes' (`admin.tls`).
    pub admin_tls: Option<crate::security::tls::NodeTls>,
    /// The bearer token the admin listener asks for, and sends to the other nodes'.
    pub(crate) admin_token: Option<Arc<crate::security::admin_token::AdminToken>>,
    /// Who may do what (`[authorization]`).
    pub authorizer: crate::security::acl::Authorizer,
    /// Clients' usage against their quotas (`[quotas]`).
    pub quotas: crate::security::quota::Quotas,
    /// Links to the other nodes' Raft listeners (none on a single node).
    pub peers: Arc<crate::raft::transport::Peers>,
    /// The metadata group's leader as last seen (the controller Metadata names), -1 if none.
    pub metadata_leader: AtomicI64,
    /// The upstream cluster holding partition data (`storage.backend = "upstream"`).
    pub upstream: Option<Arc<crate::upstream::Upstream>>,
    /// Where group requests go when this node is a sidecar (`role = "sidecar"`).
    pub sidecar: Option<Arc<crate::sidecar::GroupService>>,
    /// Connections and request bytes the node's clients hold, across every shard.
    pub(crate) client_limits: Arc<crate::net::limits::ClientLimits>,
}

impl Node {
    /// The brokers' addresses as seen from a listener (the first when the request came from
    /// elsewhere).
    pub fn brokers_for(&self, ctx: &crate::protocol::RequestContext) -> &std::collections::BTreeMap<i32, (String, u16)> {
        let index = ctx.security.as_ref().map_or(0, |s| s.listener.index);
        self.listener_brokers.get(index).unwrap_or(&self.brokers)
    }

    /// Whether the request's principal may perform `operation` on `resource`.
    pub fn allows(
        &self,
        ctx: &crate::protocol::RequestContext,
        operation: crate::security::acl::Operation,
        resource: crate::security::acl::Resource<'_>,
    ) -> bool {
        self.authorizer.is_open() || self.authorizer.allows_from(&ctx.principal(), ctx.peer.map(|p| p.ip()), operation, resource)
    }

    /// `authorized_operations` of a resource for the request's principal.
    pub fn authorized_operations(&self, ctx: &crate::protocol::RequestContext, resource: crate::security::acl::Resource<'_>) -> i32 {
        self.authorizer.operations(&ctx.principal(), ctx.peer.map(|p| p.ip()), resource)
    }

    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.config.storage.data_dir.join(partition_dir_name(topic, partition))
    }

    /// The Raft group directory of a coordinator partition: `<data_dir>/raft/__consumer_offsets-<p>`.
    pub fn coordinator_raft_dir(&self, partition: i32) -> PathBuf {
        self.config.storage.data_dir.join("raft").join(partition_dir_name(crate::cluster::OFFSETS_TOPIC, partition))
    }

    /// The metadata group's directory: `<data_dir>/raft/metadata`.
    pub fn metadata_raft_dir(&self) -> PathBuf {
        self.config.storage.data_dir.join("raft").join("metadata")
    }

    /// The node Metadata names as the controller: the metadata group's leader, or this node
    /// while there is none (topic requests sent here are forwarded to the leader anyway).
    pub fn controller(&self) -> i32 {
        match self.metadata_leader.load(Ordering::Acquire) {
            leader @ 0.. => i32::try_from(leader).unwrap_or(self.node_id),
            _ => self.node_id,
        }
    }

    /// The Raft voters of every group, with their Raft addresses: the configured nodes, or this
    /// node alone.
    pub fn raft_members(&self) -> std::collections::BTreeMap<u64, openraft::BasicNode> {
        let cluster = &self.config.cluster;
        if cluster.is_multi_node() {
            cluster.nodes.iter().map(|n| (n.id as u64, openraft::BasicNode::new(n.raft.clone()))).collect()
        } else {
            let address = format!("{}:{}", self.advertised.0, self.advertised.1);
            std::collections::BTreeMap::from([(self.node_id as u64, openraft::BasicNode::new(address))])
        }
    }

    /// Every shard is accepting, the upstream and the group service (if any) have answered, and
    /// the node is not shutting down (`/health/ready`).
    pub fn is_ready(&self) -> bool {
        let upstream_known = self.upstream.as_ref().is_none_or(|u| u.view().is_some());
        let groups_known = self.sidecar.as_ref().is_none_or(|s| s.view().is_some());
        self.ready.load(Ordering::Acquire) && upstream_known && groups_known && !self.shutdown.is_cancelled()
    }

    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}
