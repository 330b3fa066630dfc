//! What corral asks of the upstream cluster itself rather than of a partition's leader: topic
//! changes, topic configs (described and changed) and producer ids. Sent to the broker the upstream names as its controller (a Kafka
//! broker passes them on to the active controller), each on a connection of its own: these are
//! rare, and none should wait behind a long poll.
//!
//! Config requests are passed the same way to any cluster that keeps configs corral does not
//! ([`ConfigKeeper`]): the upstream its topics', a sidecar's group service its groups'.
//!
//! A topic change is answered once the upstream's metadata shows it, so the catalog (mirrored
//! from that metadata) already has it when the client asks for Metadata next.

use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{
    alter_configs_request, alter_configs_response, incremental_alter_configs_request, incremental_alter_configs_response,
    AlterConfigsRequest, ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, ProducerId, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use super::connection::Connection;
use super::{Upstream, UpstreamError, UpstreamView};
use crate::cluster::topic_config::TopicConfig;
use crate::cluster::TopicError;

/// The upstream's answer for one topic or producer id: its error code and message.
fn refused(code: i16, message: Option<&StrBytes>) -> TopicError {
    TopicError::Upstream { code, message: message.map(|m| m.to_string()).unwrap_or_default() }
}

/// Sends `request` to the upstream's controller in the highest version both serve of `ours`.
async fn ask<R: Request>(upstream: &Upstream, key: ApiKey, ours: (i16, i16), request: R) -> Result<(R::Response, u64), UpstreamError> {
    let view = upstream.view_or_error()?;
    let version = view.version(key, ours)?;
    let address = view
        .address(view.controller)
        .or_else(|_| view.brokers.values().next().map(String::as_str).ok_or(UpstreamError::UnknownBroker(view.controller)))?;
    let config = &upstream.config;
    let connection = Connection::open(address.to_string(), upstream.dialer.clone());
    let started = Instant::now();
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let answer = match tokio::time::timeout(timeout, connection.send(version, &request)?).await {
        Ok(answer) => answer,
        Err(_) => Err(UpstreamError::Timeout(config.request_timeout_ms)),
    };
    crate::metrics::upstream_request(view.controller, key, started.elapsed(), answer.is_ok());
    Ok((answer?, view.generation))
}

/// A cluster whose configs corral passes requests on to.
pub trait ConfigKeeper {
    /// Sends `request` in the highest version both serve of `ours`, to a broker that answers for
    /// the cluster's configs.
    fn ask_configs<R: Request + 'static>(
        &self,
        key: ApiKey,
        ours: (i16, i16),
        request: R,
    ) -> impl std::future::Future<Output = Result<R::Response, UpstreamError>>;
}

impl ConfigKeeper for Upstream {
    async fn ask_configs<R: Request + 'static>(&self, key: ApiKey, ours: (i16, i16), request: R) -> Result<R::Response, UpstreamError> {
        ask(self, key, ours, request).await.map(|(response, _)| response)
    }
}

/// Waits (within the request timeout) until the upstream's metadata satisfies `done`.
async fn until(upstream: &Upstream, mut seen: u64, done: impl Fn(&UpstreamView) -> bool) -> Result<(), TopicError> {
    let deadline = Instant::now() + Duration::from_millis(upstream.config.request_timeout_ms);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match upstream.refreshed(seen, left).await {
            Some(view) if done(&view) => return Ok(()),
            Some(view) if !left.is_zero() => seen = view.generation,
            _ => {
                return Err(TopicError::Upstream {
                    code: kafka_protocol::ResponseError::RequestTimedOut.code(),
                    message: "the upstream's metadata does not show the change yet".into(),
                })
            }
        }
    }
}

pub async fn create_topic(
    upstream: &Upstream,
    name: &str,
    partitions: i32,
    config: &TopicConfig,
    validate_only: bool,
) -> Result<(), TopicError> {
    let configs = config
        .overrides()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(-1)
        .with_configs(configs);
    let timeout_ms = upstream.config.request_timeout_ms as i32;
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(timeout_ms).with_validate_only(validate_only);
    let (response, seen) = ask(upstream, ApiKey::CreateTopics, (2, 7), request).await?;
    let result = response.topics.iter().find(|t| t.name.0.as_str() == name).ok_or(TopicError::Unknown)?;
    if result.error_code != 0 {
        return Err(refused(result.error_code, result.error_message.as_ref()));
    }
    if validate_only {
        return Ok(());
    }
    until(upstream, seen, |view| view.topics.get(name).is_some_and(|t| t.partitions.iter().all(|p| p.leader >= 0))).await
}

pub async fn grow_topic(upstream: &Upstream, name: &str, count: i32, validate_only: bool) -> Result<(), TopicError> {
    let topic = CreatePartitionsTopic::default().with_name(TopicName(StrBytes::from_string(name.to_string()))).with_count(count);
    let timeout_ms = upstream.config.request_timeout_ms as i32;
    let request = CreatePartitionsRequest::default().with_topics(vec![topic]).with_timeout_ms(timeout_ms).with_validate_only(validate_only);
    let (response, seen) = ask(upstream, ApiKey::CreatePartitions, (0, 3), request).await?;
    let result = response.results.iter().find(|t| t.name.0.as_str() == name).ok_or(TopicError::Unknown)?;
    if result.error_code != 0 {
        return Err(refused(result.error_code, result.error_message.as_ref()));
    }
    if validate_only {
        return Ok(());
    }
    until(upstream, seen, |view| view.topics.get(name).is_some_and(|t| t.partitions.len() as i32 >= count)).await
}

pub async fn delete_topic(upstream: &Upstream, name: &str) -> Result<(), TopicError> {
    let timeout_ms = upstream.config.request_timeout_ms as i32;
    let topic_name = TopicName(StrBytes::from_string(name.to_string()));
    let request = DeleteTopicsRequest::default()
        .with_topic_names(vec![topic_name.clone()])
        .with_topics(vec![DeleteTopicState::default().with_name(Some(topic_name))])
        .with_timeout_ms(timeout_ms);
    let (response, seen) = ask(upstream, ApiKey::DeleteTopics, (1, 6), request).await?;
    let result = response.responses.iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name)).ok_or(TopicError::Unknown)?;
    if result.error_code != 0 {
        return Err(refused(result.error_code, result.error_message.as_ref()));
    }
    until(upstream, seen, |view| !view.topics.contains_key(name)).await
}

/// The keeper's configs of `resources`, as its DescribeConfigs answers them, in the order asked.
/// Asked in the highest version both serve up to `version` (the client's), so the answer holds
/// nothing the client's version cannot carry.
pub async fn describe_configs(
    keeper: &impl ConfigKeeper,
    version: i16,
    resources: Vec<DescribeConfigsResource>,
    include_synonyms: bool,
    include_documentation: bool,
) -> Result<Vec<DescribeConfigsResult>, UpstreamError> {
    let request = DescribeConfigsRequest::default()
        .with_resources(resources.clone())
        .with_include_synonyms(include_synonyms)
        .with_include_documentation(include_documentation);
    let response = keeper.ask_configs(ApiKey::DescribeConfigs, (1, version), request).await?;
    let asked = resources.iter().map(|r| (r.resource_type, &r.resource_name));
    Ok(in_order(
        asked,
        response.results,
        |r| (r.resource_type, &r.resource_name),
        |kind, name, code, message| {
            DescribeConfigsResult::default()
                .with_error_code(code)
                .with_error_message(Some(message))
                .with_resource_type(kind)
                .with_resource_name(name.clone())
        },
    ))
}

/// Passes an IncrementalAlterConfigs of `resources` on to the keeper, in the highest version
/// both serve up to the client's; its answers in the order asked.
pub async fn incremental_alter_configs(
    keeper: &impl ConfigKeeper,
    version: i16,
    resources: Vec<incremental_alter_configs_request::AlterConfigsResource>,
    validate_only: bool,
) -> Result<Vec<incremental_alter_configs_response::AlterConfigsResourceResponse>, UpstreamError> {
    let asked: Vec<_> = resources.iter().map(|r| (r.resource_type, r.resource_name.clone())).collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(resources).with_validate_only(validate_only);
    let response = keeper.ask_configs(ApiKey::IncrementalAlterConfigs, (0, version), request).await?;
    Ok(in_order(
        asked.iter().map(|(k, n)| (*k, n)),
        response.responses,
        |r| (r.resource_type, &r.resource_name),
        |kind, name, code, message| {
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(Some(message))
                .with_resource_type(kind)
                .with_resource_name(name.clone())
        },
    ))
}

/// Passes an AlterConfigs of `resources` on to the keeper, as [`incremental_alter_configs`] does.
pub async fn alter_configs(
    keeper: &impl ConfigKeeper,
    version: i16,
    resources: Vec<alter_configs_request::AlterConfigsResource>,
    validate_only: bool,
) -> Result<Vec<alter_configs_response::AlterConfigsResourceResponse>, UpstreamError> {
    let asked: Vec<_> = resources.iter().map(|r| (r.resource_type, r.resource_name.clone())).collect();
    let request = AlterConfigsRequest::default().with_resources(resources).with_validate_only(validate_only);
    let response = keeper.ask_configs(ApiKey::AlterConfigs, (0, version), request).await?;
    Ok(in_order(
        asked.iter().map(|(k, n)| (*k, n)),
        response.responses,
        |r| (r.resource_type, &r.resource_name),
        |kind, name, code, message| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(Some(message))
                .with_resource_type(kind)
                .with_resource_name(name.clone())
        },
    ))
}

/// The upstream's per-resource `answers`, one for each resource `asked` and in its order; a
/// resource it left out gets UNKNOWN_SERVER_ERROR, made by `missing`.
fn in_order<'a, R>(
    asked: impl Iterator<Item = (i8, &'a StrBytes)>,
    mut answers: Vec<R>,
    resource_of: impl Fn(&R) -> (i8, &StrBytes),
    missing: impl Fn(i8, &StrBytes, i16, StrBytes) -> R,
) -> Vec<R> {
    asked
        .map(|(kind, name)| match answers.iter().position(|r| resource_of(r) == (kind, name)) {
            Some(at) => answers.swap_remove(at),
            None => missing(
                kind,
                name,
                kafka_protocol::ResponseError::UnknownServerError.code(),
                StrBytes::from_static_str("the cluster passed on to did not answer for this resource"),
            ),
        })
        .collect()
}

/// A producer id from the upstream, so the sequence numbers of an idempotent producer are the
/// upstream's to check.
pub async fn init_producer_id(upstream: &Upstream, transaction_timeout_ms: i32) -> Result<(i64, i16), TopicError> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (response, _) = ask(upstream, ApiKey::InitProducerId, (0, 5), request).await?;
    if response.error_code != 0 {
        return Err(refused(response.error_code, None));
    }
    Ok((response.producer_id.0, response.producer_epoch))
}

impl From<UpstreamError> for TopicError {
    fn from(e: UpstreamError) -> TopicError {
        TopicError::UpstreamUnavailable(e)
    }
}
