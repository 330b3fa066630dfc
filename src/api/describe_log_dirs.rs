//! DescribeLogDirs (key 35): the partitions this node keeps in its data directory, with their
//! sizes (`kafka-log-dirs --describe`, and the topic sizes admin UIs show).
//!
//! corral has one log directory, `storage.data_dir`, and one copy of each partition, so every
//! offset lag is 0 and no partition is a future replica. The volume's total and usable bytes are
//! reported as unknown (-1, as Kafka's protocol allows). In front of an upstream cluster the
//! partitions' data is the upstream's: this API is not advertised there, and a request gets an
//! empty answer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_log_dirs_response::{DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic};
use kafka_protocol::messages::{ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DescribeLogDirs, DescribeLogDirsRequest, 1, 4);

/// Kafka's `DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES`.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DescribeLogDirsRequest = ctx.decode(body)?;
    let node = services.node().clone();
    // As Kafka: without DESCRIBE on the cluster the answer is empty (with the error from v3).
    if !node.allows(&ctx, Operation::Describe, Resource::Cluster) {
        let response = DescribeLogDirsResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        return Ok(Handled::Now(ctx.respond(&response)));
    }
    if node.upstream.is_some() {
        return Ok(Handled::Now(ctx.respond(&DescribeLogDirsResponse::default())));
    }
    // The partitions asked for; None = every partition.
    let wanted: Option<HashMap<String, HashSet<i32>>> = request.topics.map(|topics| {
        let mut wanted: HashMap<String, HashSet<i32>> = HashMap::new();
        for t in topics {
            wanted.entry(t.topic.0.to_string()).or_default().extend(t.partitions);
        }
        wanted
    });
    Ok(Handled::Later(Box::pin(async move {
        // Each shard's partitions and their sizes, gathered on the shards that own them.
        let jobs = (0..node.mesh.shard_count()).map(|shard| {
            node.mesh.run_on(shard, |owner| async move {
                owner.partitions().into_iter().map(|((topic, index), p)| (topic, index, p.log.borrow().size_bytes())).collect::<Vec<_>>()
            })
        });
        let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for (topic_id, index, size) in futures_util::future::join_all(jobs).await.into_iter().flatten().flatten() {
            let Some(topic) = node.catalog.get_by_id(topic_id) else { continue };
            if wanted.as_ref().is_some_and(|wanted| !wanted.get(&topic.name).is_some_and(|indexes| indexes.contains(&index))) {
                continue;
            }
            let partition = DescribeLogDirsPartition::default().with_partition_index(index).with_partition_size(size as i64);
            topics.entry(topic.name.clone()).or_default().push(partition);
        }
        let topics = topics
            .into_iter()
            .map(|(name, mut partitions)| {
                partitions.sort_by_key(|p| p.partition_index);
                DescribeLogDirsTopic::default().with_name(TopicName(StrBytes::from_string(name))).with_partitions(partitions)
            })
            .collect();
        let dir = std::path::absolute(&node.config.storage.data_dir).unwrap_or_else(|_| node.config.storage.data_dir.clone());
        let result = DescribeLogDirsResult::default()
            .with_log_dir(StrBytes::from_string(dir.display().to_string()))
            .with_topics(topics)
            .with_total_bytes(UNKNOWN_VOLUME_BYTES)
            .with_usable_bytes(UNKNOWN_VOLUME_BYTES);
        ctx.respond(&DescribeLogDirsResponse::default().with_results(vec![result]))
    })))
}
