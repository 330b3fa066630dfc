//! Fetch (key 1): each requested partition from the partition store (file ranges, sent with
//! sendfile(2), for local segments), long-polled until `min_bytes` arrive or `max_wait_ms` passes.
//!
//! Fetch sessions (KIP-227) are declined: every response carries session id 0, so clients send
//! full fetch requests, which Kafka clients support.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::{ApiKey, FetchRequest};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services, NONE};
use crate::cluster::catalog::Topic;
use crate::protocol::fetch_response::{self, FetchPartitionReply, FetchReply, FetchTopicReply};
use crate::protocol::{Reply, RequestContext};
use crate::security::acl::{Operation, Resource};
use crate::security::quota::QuotaKind;
use crate::store::{FetchPlan, PartitionFetch, PartitionRef};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Fetch, FetchRequest, 4, 18);

/// Upper bound on how long one fetch may wait, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: FetchRequest = ctx.decode(body)?;
    Ok(Handled::Later(Box::pin(fetch(services, ctx, request))))
}

/// A requested topic as the response lists it: name (v≤12), id (v13+), partitions in order.
type TopicLayout = (kafka_protocol::protocol::StrBytes, Uuid, Vec<(i32, Slot)>);

/// A requested partition: answered already (an error) or its position in the store's plan.
enum Slot {
    Error(i16),
    Read(usize),
}

async fn fetch(services: Rc<dyn Services>, ctx: RequestContext, request: FetchRequest) -> Reply {
    let version = ctx.api_version;
    if version >= 7 && (request.session_id != 0 || request.session_epoch > 0) {
        // Sessions are never created, so a client can only name one it invented.
        let code = if request.session_id != 0 { ResponseError::FetchSessionIdNotFound } else { ResponseError::InvalidFetchSessionEpoch };
        let reply = FetchReply { error_code: code.code(), ..Default::default() };
        return Reply::Chunks(fetch_response::encode(ctx.correlation_id, version, reply));
    }

    let catalog = &services.node().catalog;
    let unknown = |t: &FetchTopic| if version >= 13 { catalog.get_by_id(t.topic_id).is_none() } else { catalog.get(&t.topic.0).is_none() };
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT);
    let started = std::time::Instant::now();
    // Past `max_wait_ms` if need be: the client knows of the topic, and the refresh is short.
    super::learn_new_topics(services.node(), request.topics.iter().any(unknown), super::UNKNOWN_TOPIC_WAIT).await;
    let mut partitions = Vec::new();
    let mut layout: Vec<TopicLayout> = Vec::with_capacity(request.topics.len());
    // A partition listed more than once is read and answered once (Kafka keeps one entry per
    // partition too), so one request cannot make the node read the same data many times.
    let mut listed = std::collections::HashSet::new();
    for t in &request.topics {
        let topic: Option<Arc<Topic>> = if version >= 13 { catalog.get_by_id(t.topic_id) } else { catalog.get(&t.topic.0) };
        let unknown = if version >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
        // Before existence, as Kafka: a client without READ learns nothing about the topic.
        let name = topic.as_ref().map(|t| t.name.as_str()).unwrap_or(t.topic.0.as_str());
        let authorized = (version >= 13 && topic.is_none()) || services.node().allows(&ctx, Operation::Read, Resource::Topic(name));
        let mut slots = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key =
                if version >= 13 { (None, t.topic_id, p.partition) } else { (Some(t.topic.0.as_str()), uuid::Uuid::nil(), p.partition) };
            if !listed.insert(key) {
                continue;
            }
            let slot = match &topic {
                _ if !authorized => Slot::Error(ResponseError::TopicAuthorizationFailed.code()),
                None => Slot::Error(unknown.code()),
                Some(topic) => {
                    partitions.push(PartitionFetch {
                        partition: PartitionRef { topic: topic.clone(), index: p.partition },
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes.max(0) as u64,
                        current_leader_epoch: p.current_leader_epoch,
                    });
                    Slot::Read(partitions.len() - 1)
                }
            };
            slots.push((p.partition, slot));
        }
        layout.push((t.topic.0.clone(), t.topic_id, slots));
    }
    // An unknown or forbidden topic is an error to report at once, as the store does for its own
    // errors.
    let has_unknown = layout.iter().flat_map(|(_, _, s)| s).any(|(_, s)| matches!(s, Slot::Error(_)));
    let wait = if has_unknown { Duration::ZERO } else { max_wait.saturating_sub(started.elapsed()) };
    let mut max_bytes = request.max_bytes.max(0) as u64;
    if services.node().quotas.limits(QuotaKind::Fetch) {
        let client_id = ctx.client_id.as_deref().unwrap_or_default();
        if let Some(quota_bytes) = services.node().quotas.max_bytes_in_window(QuotaKind::Fetch, &ctx.principal(), client_id) {
            max_bytes = max_bytes.min(quota_bytes);
        }
    }
    let plan = FetchPlan {
        partitions,
        max_bytes,
        min_bytes: request.min_bytes.max(0) as u64,
        max_wait: wait,
        isolation_level: request.isolation_level,
    };
    let mut reads: Vec<Option<_>> = services.store().fetch(plan).await.into_iter().map(Some).collect();

    let topics = layout
        .into_iter()
        .map(|(name, topic_id, slots)| {
            let partitions = slots
                .into_iter()
                .map(|(index, slot)| match slot {
                    Slot::Error(code) => FetchPartitionReply::error(index, code),
                    Slot::Read(i) => match reads.get_mut(i).and_then(Option::take) {
                        Some(Ok(data)) => FetchPartitionReply {
                            partition_index: index,
                            error_code: NONE,
                            high_watermark: data.high_watermark,
                            last_stable_offset: data.last_stable_offset,
                            log_start_offset: data.log_start_offset,
                            records: data.records,
                            aborted_transactions: data.aborted_transactions,
                        },
                        Some(Err(e)) => FetchPartitionReply::error(index, e.code().code()),
                        None => FetchPartitionReply::error(index, ResponseError::UnknownServerError.code()),
                    },
                })
                .collect();
            FetchTopicReply { name, topic_id, partitions }
        })
        .collect();
    let frame = fetch_response::encode(ctx.correlation_id, version, FetchReply { topics, ..Default::default() });
    let throttle = super::throttle(services.node(), &ctx, QuotaKind::Fetch, frame.len as f64);
    if throttle.is_zero() {
        return Reply::Chunks(frame);
    }
    // Over the quota: no data now, and its bytes do not count (as Kafka's throttled fetch).
    let client_id = ctx.client_id.as_deref().unwrap_or_default();
    services.node().quotas.unrecord(QuotaKind::Fetch, &ctx.principal(), client_id, frame.len as f64);
    let reply = FetchReply { throttle_time_ms: throttle.as_millis() as i32, ..Default::default() };
    Reply::Chunks(fetch_response::encode(ctx.correlation_id, version, reply))
}
