//! DescribeConfigs (key 32): topic configs (effective value and source), a consumer group's
//! (its own values over the `[groups]` settings) and this broker's.
//!
//! In front of an upstream cluster, a topic's configs are the upstream's, and in a sidecar a
//! group's are its group service's: those resources are asked of the cluster that keeps them, one
//! request per cluster, and its answers put in their places. `__consumer_offsets` and the broker
//! resource stay corral's.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym};
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::config_changes::{pass_on_all, Keeper, BROKER, GROUP, TOPIC};
use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::cluster::group_config;
use crate::cluster::topic_config::{ConfigSource, ConfigType};
use crate::config::Config;
use crate::config::GroupsConfig;
use crate::coordinator::consumer_group::GroupOverrides;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};
use crate::upstream::admin::describe_configs;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DescribeConfigs, DescribeConfigsRequest, 1, 4);

/// One config as reported.
struct Described {
    name: String,
    value: String,
    source: ConfigSource,
    kind: ConfigType,
    doc: &'static str,
    /// Broker settings come from the config file; every topic and group config can be changed.
    read_only: bool,
    /// Where the value could come from, the one in effect first; none: the config itself.
    synonyms: Vec<(&'static str, String, ConfigSource)>,
}

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DescribeConfigsRequest = ctx.decode(body)?;
    let node = services.node();
    let mut results = Vec::with_capacity(request.resources.len());
    // Resources another cluster keeps: their positions in `results`, their keeper, the resources.
    let mut passed: Vec<(usize, Keeper, DescribeConfigsResource)> = Vec::new();
    for resource in request.resources {
        let mut result =
            DescribeConfigsResult::default().with_resource_type(resource.resource_type).with_resource_name(resource.resource_name.clone());
        let keeper = Keeper::of(node, resource.resource_type, &resource.resource_name);
        let described = match (resource.resource_type, keeper) {
            (TOPIC, _) if !node.allows(&ctx, Operation::DescribeConfigs, Resource::Topic(&resource.resource_name)) => {
                Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string()))
            }
            (GROUP, _) if !node.allows(&ctx, Operation::DescribeConfigs, Resource::Group(&resource.resource_name)) => {
                Err((ResponseError::GroupAuthorizationFailed, "Authorization failed.".to_string()))
            }
            (_, Some(keeper)) => {
                passed.push((results.len(), keeper, resource));
                results.push(result);
                continue;
            }
            (BROKER, _) if !node.allows(&ctx, Operation::DescribeConfigs, Resource::Cluster) => {
                Err((ResponseError::ClusterAuthorizationFailed, "Authorization failed.".to_string()))
            }
            (TOPIC, _) => match node.catalog.get(&resource.resource_name) {
                Some(topic) => Ok(topic
                    .config
                    .entries(&node.config.topics.defaults)
                    .into_iter()
                    .map(|e| Described {
                        name: e.name.to_string(),
                        value: e.value,
                        source: e.source,
                        kind: e.kind,
                        doc: e.doc,
                        read_only: false,
                        synonyms: Vec::new(),
                    })
                    .collect::<Vec<_>>()),
                None => Err((ResponseError::UnknownTopicOrPartition, format!("topic '{}' does not exist", &*resource.resource_name))),
            },
            (BROKER, _) if resource.resource_name.is_empty() || *resource.resource_name == node.node_id.to_string() => {
                Ok(broker_configs(&node.config, node.node_id))
            }
            (BROKER, _) => {
                Err((ResponseError::InvalidRequest, format!("this is broker {}, not {}", node.node_id, &*resource.resource_name)))
            }
            (GROUP, _) => Ok(group_configs(&node.config.groups, node.catalog.group_configs.get(&resource.resource_name))),
            (other, _) => Err((ResponseError::InvalidRequest, format!("resource type {other} is not supported"))),
        };
        match described {
            Ok(entries) => {
                let configs = entries
                    .into_iter()
                    // Null lists every config; so does an empty list (nothing useful to list otherwise).
                    .filter(|e| match &resource.configuration_keys {
                        Some(keys) if !keys.is_empty() => keys.iter().any(|k| **k == e.name),
                        _ => true,
                    })
                    .map(|e| to_result(e, request.include_synonyms, request.include_documentation))
                    .collect();
                result = result.with_configs(configs);
            }
            Err((code, message)) => {
                result = result.with_error_code(code.code()).with_error_message(Some(StrBytes::from_string(message)));
            }
        }
        results.push(result);
    }
    if passed.is_empty() {
        return Ok(Handled::Now(ctx.respond(&DescribeConfigsResponse::default().with_results(results))));
    }
    Ok(Handled::Later(Box::pin(async move {
        let (version, synonyms, documentation) = (ctx.api_version, request.include_synonyms, request.include_documentation);
        let ask = async |keeper: &Keeper, resources| describe_configs(keeper, version, resources, synonyms, documentation).await;
        pass_on_all(&mut results, passed, ask, |r, code, message| {
            r.error_code = code;
            r.error_message = Some(StrBytes::from_string(message));
        })
        .await;
        ctx.respond(&DescribeConfigsResponse::default().with_results(results))
    })))
}

fn to_result(e: Described, synonyms: bool, documentation: bool) -> DescribeConfigsResourceResult {
    let value = StrBytes::from_string(e.value);
    let name = StrBytes::from_string(e.name);
    let mut r = DescribeConfigsResourceResult::default()
        .with_name(name.clone())
        .with_value(Some(value.clone()))
        .with_read_only(e.read_only)
        .with_config_source(e.source.code())
        .with_config_type(e.kind as i8)
        .with_documentation(documentation.then(|| StrBytes::from_static_str(e.doc)));
    if synonyms {
        let synonym = |name: StrBytes, value: StrBytes, source: ConfigSource| {
            DescribeConfigsSynonym::default().with_name(name).with_value(Some(value)).with_source(source.code())
        };
        r = r.with_synonyms(match e.synonyms.is_empty() {
            true => vec![synonym(name, value, e.source)],
            false => e
                .synonyms
                .into_iter()
                .map(|(n, v, source)| synonym(StrBytes::from_static_str(n), StrBytes::from_string(v), source))
                .collect(),
        });
    }
    r
}

/// A group's configs, as Kafka describes them: the group's own value (DYNAMIC_GROUP_CONFIG), else
/// the broker's setting; the synonyms name the broker setting and Kafka's default behind it.
fn group_configs(groups: &GroupsConfig, own: GroupOverrides) -> Vec<Described> {
    group_config::KEYS
        .iter()
        .map(|key| {
            let configured = (key.configured)(groups);
            let mut synonyms = Vec::new();
            if let Some(value) = (key.get)(&own) {
                synonyms.push((key.name, value.to_string(), ConfigSource::Group));
            }
            if key.default_source(groups) == ConfigSource::Broker {
                synonyms.push((key.broker_name, configured.to_string(), ConfigSource::Broker));
            }
            synonyms.push((key.broker_name, key.kafka_default.to_string(), ConfigSource::Default));
            let (value, source) = match (key.get)(&own) {
                Some(value) => (value, ConfigSource::Group),
                None => (configured, key.default_source(groups)),
            };
            Described {
                name: key.name.to_string(),
                value: value.to_string(),
                source,
                kind: ConfigType::Int,
                doc: key.doc,
                read_only: false,
                synonyms,
            }
        })
        .collect()
}

/// The broker settings clients and tools look at, under Kafka's names.
fn broker_configs(config: &Config, node_id: i32) -> Vec<Described> {
    let d = &config.topics.defaults;
    let s = &config.storage;
    let long = |v: i64| if v == 0 { i64::MAX.to_string() } else { v.to_string() };
    [
        ("broker.id", node_id.to_string(), ConfigType::Int, "This node's id (node.id)."),
        ("auto.create.topics.enable", config.topics.auto_create.to_string(), ConfigType::Boolean, "topics.auto_create"),
        ("num.partitions", config.topics.default_partitions.to_string(), ConfigType::Int, "topics.default_partitions"),
        ("log.dirs", s.data_dir.display().to_string(), ConfigType::String, "storage.data_dir"),
        ("log.segment.bytes", d.segment_bytes.to_string(), ConfigType::Int, "topics.defaults.segment_bytes"),
        ("log.roll.ms", d.segment_ms.to_string(), ConfigType::Long, "topics.defaults.segment_ms"),
        ("log.retention.bytes", d.retention_bytes.to_string(), ConfigType::Long, "topics.defaults.retention_bytes"),
        ("log.retention.ms", d.retention_ms.to_string(), ConfigType::Long, "topics.defaults.retention_ms"),
        ("log.index.interval.bytes", d.index_interval_bytes.to_string(), ConfigType::Int, "topics.defaults.index_interval_bytes"),
        ("message.max.bytes", d.max_message_bytes.to_string(), ConfigType::Int, "topics.defaults.max_message_bytes"),
        (
            "log.retention.check.interval.ms",
            s.retention_check_interval_ms.to_string(),
            ConfigType::Long,
            "storage.retention_check_interval_ms",
        ),
        ("log.flush.interval.messages", long(s.flush_messages as i64), ConfigType::Long, "storage.flush_messages"),
        ("log.flush.interval.ms", long(s.flush_ms as i64), ConfigType::Long, "storage.flush_ms"),
        ("socket.request.max.bytes", config.kafka.max_frame_bytes.to_string(), ConfigType::Int, "kafka.max_frame_bytes"),
    ]
    .into_iter()
    .map(|(name, value, kind, doc)| Described {
        name: name.to_string(),
        value,
        source: ConfigSource::Broker,
        kind,
        doc,
        read_only: true,
        synonyms: Vec::new(),
    })
    .collect()
}
