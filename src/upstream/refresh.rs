//! Keeps the upstream view fresh and mirrors the upstream's topics into the catalog.
//!
//! One task per node (on the first shard): it asks a broker for ApiVersions and Metadata every
//! `metadata_max_age_ms`, and sooner when a shard marks the view stale (at most once per
//! `retry_backoff_ms`). Brokers are tried in turn — those of the last view, then the bootstrap —
//! so a broker going away costs one connection attempt. Until the upstream has answered once the
//! node is not ready; errors are logged with the bootstrap they were tried against.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::{Upstream, UpstreamError, UpstreamPartition, UpstreamTopic, UpstreamView};
use crate::cluster::topic_config::TopicConfig;
use crate::node::Node;

/// The Metadata version asked for (topic ids, v10+; no topic-name-only quirks).
const METADATA_VERSION: i16 = 12;
const API_VERSIONS_VERSION: i16 = 3;

/// Runs until the node shuts down.
pub async fn run(node: Arc<Node>, upstream: Arc<Upstream>) {
    let config = &upstream.config;
    let max_age = Duration::from_millis(config.metadata_max_age_ms);
    let backoff = Duration::from_millis(config.retry_backoff_ms);
    let mut generation = 0u64;
    let mut failures = 0u32;
    loop {
        generation += 1;
        match fetch_view(&upstream, generation).await {
            Ok(view) => {
                if failures > 0 || generation == 1 {
                    tracing::info!(brokers = view.brokers.len(), topics = view.topics.len(), "upstream metadata loaded");
                }
                failures = 0;
                mirror(&node, &view);
                upstream.publish(view);
                crate::metrics::upstream_metadata_refreshed(true);
            }
            Err(e) => {
                failures += 1;
                crate::metrics::upstream_metadata_refreshed(false);
                // Every failure at first, then one in ten: a long outage does not flood the log.
                if failures <= 3 || failures.is_multiple_of(10) {
                    tracing::warn!(bootstrap = %config.bootstrap.join(","), error = %e, failures, "cannot read the upstream's metadata; retrying");
                }
            }
        }
        let wait = if failures > 0 { backoff.saturating_mul(failures.min(10)) } else { max_age };
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = upstream.stale.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        // A burst of stale marks makes one refresh.
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

/// Asks the brokers of the last view, then the bootstrap addresses, until one answers.
async fn fetch_view(upstream: &Upstream, generation: u64) -> Result<UpstreamView, UpstreamError> {
    let config = &upstream.config;
    let mut addresses: Vec<String> = upstream.view().map(|v| v.brokers.values().cloned().collect()).unwrap_or_default();
    for bootstrap in &config.bootstrap {
        if !addresses.contains(bootstrap) {
            addresses.push(bootstrap.clone());
        }
    }
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let mut last = UpstreamError::NoMetadata(config.bootstrap.join(","));
    for address in addresses {
        let connection = Connection::open(address, upstream.dialer.clone());
        match tokio::time::timeout(timeout, ask(&connection, generation)).await {
            Ok(Ok(view)) => return Ok(view),
            Ok(Err(e)) => last = e,
            Err(_) => last = UpstreamError::Timeout(config.request_timeout_ms),
        }
    }
    Err(last)
}

async fn ask(connection: &Connection, generation: u64) -> Result<UpstreamView, UpstreamError> {
    let versions_request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("corral"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let versions = connection.send(API_VERSIONS_VERSION, &versions_request)?;
    let metadata = connection.send(METADATA_VERSION, &MetadataRequest::default().with_topics(None))?;
    let versions = versions.await?;
    if versions.error_code != 0 {
        return Err(UpstreamError::Protocol(format!("{}: ApiVersions error {}", connection.address, versions.error_code)));
    }
    let metadata = metadata.await?;
    let brokers = metadata.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
    let mut topics = HashMap::new();
    for t in metadata.topics {
        let Some(name) = t.name else { continue };
        if t.error_code != 0 {
            continue;
        }
        let mut partitions = vec![UpstreamPartition { leader: -1, leader_epoch: -1 }; t.partitions.len()];
        for p in t.partitions {
            if let Some(slot) = usize::try_from(p.partition_index).ok().and_then(|i| partitions.get_mut(i)) {
                *slot = UpstreamPartition { leader: p.leader_id.0, leader_epoch: p.leader_epoch };
            }
        }
        topics.insert(name.0.to_string(), UpstreamTopic { id: t.topic_id, internal: t.is_internal, partitions });
    }
    let versions: BTreeMap<i16, (i16, i16)> = versions.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
    if !versions.contains_key(&(ApiKey::Produce as i16)) || !versions.contains_key(&(ApiKey::Fetch as i16)) {
        return Err(UpstreamError::Protocol(format!("{} serves neither Produce nor Fetch", connection.address)));
    }
    let fetched_at = Some(std::time::Instant::now());
    Ok(UpstreamView { brokers, controller: metadata.controller_id.0, topics, versions, generation, fetched_at })
}

/// The upstream's topics in the catalog: each with the upstream's id and partition count, its
/// partitions led by the corral nodes in turn ([`corral_leader`]). The upstream's internal
/// topics stay hidden, and `__consumer_offsets` is corral's own.
pub fn mirror(node: &Node, view: &UpstreamView) {
    let catalog = &node.catalog;
    let nodes: Vec<i32> = node.brokers.keys().copied().collect();
    for (name, topic) in &view.topics {
        if topic.internal || crate::cluster::is_internal(name) {
            continue;
        }
        let unchanged = catalog.get(name).is_some_and(|t| t.id == topic.id && t.partitions.len() == topic.partitions.len());
        if unchanged {
            continue;
        }
        // A topic deleted and created again upstream has a new id: the old one goes first.
        let previous = catalog.get(name).filter(|old| {
            let same = old.id == topic.id;
            if !same {
                catalog.unpublish(old);
            }
            same
        });
        let placement = (0..topic.partitions.len() as i32).map(|p| corral_leader(&nodes, topic.id, p)).collect();
        catalog.publish(catalog.build(name.clone(), topic.id, TopicConfig::default(), placement, previous.as_deref()));
    }
    for gone in catalog.all().into_iter().filter(|t| !crate::cluster::is_internal(&t.name) && !view.topics.contains_key(&t.name)) {
        catalog.unpublish(&gone);
    }
}

/// The corral node Metadata names as a partition's leader in front of an upstream: the nodes in
/// id order, partition `p` of a topic on the node `(start + p) mod n`, where `start` comes from
/// the topic id — a topic's partitions spread evenly, and every node computes the same answer.
/// Any node serves any partition; the rule only spreads the clients' load.
pub fn corral_leader(nodes: &[i32], topic_id: uuid::Uuid, partition: i32) -> i32 {
    if nodes.is_empty() {
        return -1;
    }
    let (hi, lo) = topic_id.as_u64_pair();
    let start = (hi ^ lo) % nodes.len() as u64;
    nodes[((start + partition as u64) % nodes.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::corral_leader;

    #[test]
    fn a_topics_partitions_spread_evenly_and_every_node_agrees() {
        let nodes = [0, 1, 2];
        for _ in 0..50 {
            let id = uuid::Uuid::new_v4();
            let mut per_node = [0; 3];
            for p in 0..6 {
                let leader = corral_leader(&nodes, id, p);
                assert_eq!(leader, corral_leader(&nodes, id, p));
                per_node[leader as usize] += 1;
            }
            assert_eq!(per_node, [2, 2, 2]);
        }
        assert_eq!(corral_leader(&[7], uuid::Uuid::new_v4(), 3), 7);
        assert_eq!(corral_leader(&[], uuid::Uuid::new_v4(), 0), -1);
    }
}
