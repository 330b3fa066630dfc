//! Metadata (key 3): brokers (every node of the cluster), topics and their partitions with the
//! node each is placed on as its leader, and auto topic creation (through the metadata group, like
//! CreateTopics). The controller named is the metadata group's leader.
//!
//! In front of an upstream cluster the catalog mirrors the upstream's topics (`crate::upstream`);
//! a topic named here that the catalog lacks is looked for upstream first.
//!
//! `__consumer_offsets` is held whole by every node (its contents are replicated by the
//! coordinator's Raft groups), so each node names itself as its partitions' leader.

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::catalog::Topic;
use crate::cluster::topic_config::{validate_topic_name, TopicConfig};
use crate::cluster::{self, TopicError};
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Metadata, MetadataRequest, 0, 13);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: MetadataRequest = ctx.decode(body)?;
    let node = services.node();
    let catalog = &node.catalog;
    // v0: an empty list means every topic; v1+: null means every topic, empty means none.
    let requested = match request.topics {
        Some(topics) if !(ctx.api_version == 0 && topics.is_empty()) => Some(topics),
        _ => None,
    };
    let auto_create = node.config.topics.auto_create && (ctx.api_version < 4 || request.allow_auto_topic_creation);
    if let Some(upstream) = &node.upstream {
        let names_unknown = requested.iter().flatten().any(|t| t.name.as_ref().is_some_and(|n| catalog.get(&n.0).is_none()));
        upstream.before_metadata(names_unknown, std::time::Duration::from_secs(5)).await;
    }

    // A sidecar's groups and offsets are its group service's: it has no `__consumer_offsets`.
    let hidden = |name: &str| node.sidecar.is_some() && cluster::is_internal(name);
    let describable = |name: &str| node.allows(&ctx, Operation::Describe, Resource::Topic(name));
    let forbidden = |name: Option<TopicName>| {
        MetadataResponseTopic::default().with_name(name).with_error_code(ResponseError::TopicAuthorizationFailed.code())
    };
    let may_create =
        |name: &str| node.allows(&ctx, Operation::Create, Resource::Cluster) || node.allows(&ctx, Operation::Create, Resource::Topic(name));
    let mut topics: Vec<MetadataResponseTopic> = match requested {
        // Every topic: those the client may describe.
        None => catalog.all().iter().filter(|t| !hidden(&t.name) && describable(&t.name)).map(|t| describe(services.node(), t)).collect(),
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len());
            for t in wanted {
                out.push(match t.name {
                    Some(name) if hidden(&name.0) => MetadataResponseTopic::default()
                        .with_name(Some(name))
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                    Some(name) if !describable(&name.0) => forbidden(Some(name)),
                    Some(name) => lookup_or_create(services.node(), &name.0, auto_create, may_create(&name.0)).await,
                    None => match catalog.get_by_id(t.topic_id) {
                        Some(topic) if !describable(&topic.name) => forbidden(None).with_topic_id(t.topic_id),
                        Some(topic) => describe(services.node(), &topic),
                        None => MetadataResponseTopic::default()
                            .with_name(None)
                            .with_topic_id(t.topic_id)
                            .with_error_code(ResponseError::UnknownTopicId.code()),
                    },
                });
            }
            out
        }
    };
    if ctx.api_version >= 8 && request.include_topic_authorized_operations {
        for t in topics.iter_mut().filter(|t| t.error_code == 0) {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            t.topic_authorized_operations = node.authorized_operations(&ctx, Resource::Topic(&name));
        }
    }
    let mut response = MetadataResponse::default()
        .with_brokers(
            node.brokers_for(&ctx)
                .iter()
                .map(|(id, (host, port))| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(*id))
                        .with_host(StrBytes::from_string(host.clone()))
                        .with_port(*port as i32)
                })
                .collect(),
        )
        .with_cluster_id(Some(StrBytes::from_string(node.cluster_id.clone())))
        .with_controller_id(BrokerId(node.controller()))
        .with_topics(topics);
    if (8..=10).contains(&ctx.api_version) && request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = node.authorized_operations(&ctx, Resource::Cluster);
    }
    Ok(Handled::Now(ctx.respond(&response)))
}

/// The topic, or creates it if `auto_create` allows; without `may_create` (CREATE on the cluster
/// or the topic), TOPIC_AUTHORIZATION_FAILED instead, as Kafka answers.
async fn lookup_or_create(node: &Arc<Node>, name: &StrBytes, auto_create: bool, may_create: bool) -> MetadataResponseTopic {
    let catalog = &node.catalog;
    if let Some(topic) = catalog.get(name) {
        return describe(node, &topic);
    }
    let error =
        |code: ResponseError| MetadataResponseTopic::default().with_name(Some(TopicName(name.clone()))).with_error_code(code.code());
    if validate_topic_name(name).is_err() {
        return error(ResponseError::InvalidTopicException);
    }
    if !auto_create {
        return error(ResponseError::UnknownTopicOrPartition);
    }
    if !may_create {
        return error(ResponseError::TopicAuthorizationFailed);
    }
    let partitions = node.config.topics.default_partitions;
    match cluster::create_topic(node, name, partitions, TopicConfig::default(), false).await {
        Ok(Some(topic)) => describe(node, &topic),
        // Another request created it first.
        Err(TopicError::AlreadyExists(_)) | Ok(None) => match catalog.get(name) {
            Some(topic) => describe(node, &topic),
            None => error(ResponseError::LeaderNotAvailable),
        },
        Err(e) => {
            tracing::warn!(topic = %name, error = %e, "auto topic creation failed");
            match e {
                // No controller reachable yet: clients retry on LEADER_NOT_AVAILABLE.
                TopicError::NotController(_) | TopicError::Write(_) => error(ResponseError::LeaderNotAvailable),
                e => error(e.error_code()),
            }
        }
    }
}

fn describe(node: &Node, topic: &Arc<Topic>) -> MetadataResponseTopic {
    let internal = crate::cluster::is_internal(&topic.name);
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, meta)| {
            let leader = BrokerId(if internal { node.node_id } else { meta.leader });
            MetadataResponsePartition::default()
                .with_partition_index(index as i32)
                .with_leader_id(leader)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![leader])
                .with_isr_nodes(vec![leader])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(internal)
        .with_partitions(partitions)
}
