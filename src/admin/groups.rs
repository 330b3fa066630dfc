//! The groups API, in JSON:
//!
//! - `GET /v1/groups`: every group of the cluster (id, type, state, generation or epoch, members,
//!   coordinator partition and node, lag sum). This node's own come from its shards; the others'
//!   from each node's admin listener (`cluster.nodes[].admin`). Nodes that could not be asked are
//!   listed under `missing`.
//! - `GET /v1/groups/{id}`: one group in full (members and their assignments, committed offsets
//!   with lag, the rebalance history), from the node that coordinates it: asked here, answered
//!   there.
//!
//! `?scope=local` answers from this node alone (what nodes ask each other, so nothing is asked
//! twice).

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::coordinator::inspect::{self, Coordinator, GroupOverview, PartitionFacts};
use crate::node::Node;
use crate::runtime::shard::Shard;

/// How long a node waits for another's answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Cluster,
    Local,
}

/// Topic names and end offsets as this node knows them: a partition's end offset is known where
/// its log is.
pub(super) struct NodeFacts<'a>(pub &'a Node);

impl PartitionFacts for NodeFacts<'_> {
    fn end_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        let topic = self.0.catalog.get(topic)?;
        self.0.end_offsets.current(topic.id, partition)
    }

    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.0.catalog.get_by_id(id).map(|t| t.name.clone())
    }
}

/// The overviews of the groups of every coordinator partition this shard serves.
fn shard_overviews(shard: &Shard) -> Vec<GroupOverview> {
    let facts = NodeFacts(&shard.node);
    shard
        .coordinators()
        .iter()
        .filter(|r| r.serving())
        .flat_map(|r| inspect::overviews(&r.state.borrow(), &facts, Coordinator { partition: r.index, node: shard.node.node_id }))
        .collect()
}

/// The groups this node coordinates.
async fn local_overviews(node: &Node) -> Result<Vec<GroupOverview>, String> {
    let mut out = Vec::new();
    for shard in 0..node.mesh.shard_count() {
        let groups = node.mesh.run_on(shard, |shard| async move { shard_overviews(&shard) }).await.map_err(|e| e.to_string())?;
        out.extend(groups);
    }
    Ok(out)
}

/// `GET /v1/groups`.
pub(super) async fn list(node: Arc<Node>, scope: Scope) -> (StatusCode, Value) {
    let mut groups: Vec<Value> = match local_overviews(&node).await {
        Ok(local) => local.iter().map(|g| json!(g)).collect(),
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": e })),
    };
    let mut missing = Vec::new();
    if scope == Scope::Cluster {
        for peer in node.config.cluster.nodes.iter().filter(|n| n.id != node.node_id) {
            let Some(admin) = &peer.admin else {
                missing.push(json!({ "node": peer.id, "reason": "no admin address in cluster.nodes" }));
                continue;
            };
            match ask(&node, admin, "/v1/groups?scope=local").await {
                Ok((StatusCode::OK, body)) => groups.extend(body["groups"].as_array().cloned().unwrap_or_default()),
                Ok((status, body)) => missing.push(json!({ "node": peer.id, "reason": format!("{status}: {}", body["error"]) })),
                Err(reason) => missing.push(json!({ "node": peer.id, "reason": reason })),
            }
        }
    }
    // During a leadership change two nodes may both report a partition: keep one.
    groups.sort_by(|a, b| a["group"].as_str().cmp(&b["group"].as_str()));
    groups.dedup_by(|a, b| a["group"] == b["group"]);
    (StatusCode::OK, json!({ "groups": groups, "missing": missing }))
}

/// What a shard says of one group.
enum Found {
    Here(Value),
    Unknown,
    /// The coordinator partition is served by another node (or, `None`, by none right now).
    Elsewhere(Option<u64>),
}

/// `GET /v1/groups/{id}`.
pub(super) async fn describe(node: Arc<Node>, group: String, scope: Scope) -> (StatusCode, Value) {
    let Some(offsets_topic) = node.catalog.get(crate::cluster::OFFSETS_TOPIC) else {
        return (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "the coordinator is not started" }));
    };
    let partition = crate::coordinator::partition_for(&group, offsets_topic.partitions.len() as i32);
    let Some(shard) = offsets_topic.partition(partition).map(|m| m.shard) else {
        return (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": format!("coordinator partition {partition} is unknown") }));
    };
    let id = group.clone();
    let found = node.mesh.run_on(shard, move |shard| async move { find(&shard, partition, &id) }).await;
    match found {
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": e.to_string() })),
        Ok(Found::Here(detail)) => (StatusCode::OK, detail),
        Ok(Found::Unknown) => (StatusCode::NOT_FOUND, json!({ "error": format!("group {group:?} does not exist") })),
        Ok(Found::Elsewhere(None)) => {
            (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": format!("coordinator partition {partition} has no leader right now") }))
        }
        Ok(Found::Elsewhere(Some(leader))) => {
            let peer = node.config.cluster.nodes.iter().find(|n| i64::from(n.id) == leader as i64);
            match (scope, peer.and_then(|p| p.admin.as_deref())) {
                (Scope::Cluster, Some(admin)) => {
                    let path = format!("/v1/groups/{}?scope=local", percent_encoding::utf8_percent_encode(&group, SEGMENT));
                    match ask(&node, admin, &path).await {
                        Ok((status, body)) => (status, body),
                        Err(reason) => (StatusCode::BAD_GATEWAY, json!({ "error": reason, "coordinator_node": leader })),
                    }
                }
                _ => (
                    StatusCode::MISDIRECTED_REQUEST,
                    json!({ "error": format!("node {leader} coordinates this group; ask its admin listener"), "coordinator_node": leader }),
                ),
            }
        }
    }
}

fn find(shard: &Shard, partition: i32, group: &str) -> Found {
    let Some(runner) = shard.coordinator(partition) else {
        return Found::Elsewhere(None);
    };
    if !runner.serving() {
        return Found::Elsewhere(runner.leader());
    }
    let at = Coordinator { partition, node: shard.node.node_id };
    let detail = inspect::detail(&runner.state.borrow(), &runner.history.borrow(), group, &NodeFacts(&shard.node), at);
    match detail {
        Some(d) => Found::Here(json!(d)),
        None => Found::Unknown,
    }
}

/// Characters escaped in a path segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Asks another node's admin listener; its JSON answer.
async fn ask(node: &Node, admin: &str, path: &str) -> Result<(StatusCode, Value), String> {
    let authorization = node.admin_token.as_ref().map(|token| token.header());
    let access =
        super::client::Access { tls: node.admin_tls.as_ref().and_then(|t| t.connector.as_ref()), authorization: authorization.as_deref() };
    let (status, body) = super::client::get(admin, path, access, PEER_TIMEOUT).await?;
    let body = serde_json::from_slice(&body).map_err(|e| format!("{admin} answered {status} with no JSON: {e}"))?;
    Ok((status, body))
}
