//! One handler per Kafka API, and the table that dispatches to them.
//!
//! Each handler file declares its [`ApiEntry`]: the API key, the versions it serves, the minimum
//! it advertises, and its function. ApiVersions is generated from [`TABLE`]; nothing else lists
//! supported versions.
//!
//! # Two stages
//!
//! A handler runs in two stages. The first runs on the connection's reader before the next
//! request is read, so whatever must happen in request order (enqueueing appends, offset
//! commits) happens there. If the handler then has to wait (for an fsync, for data to arrive),
//! it returns [`Handled::Later`] with the rest of its work, which runs concurrently while the
//! connection goes on reading. Responses are still written in request order.
//!
//! # What handlers see
//!
//! A handler is given [`Services`]: the node's shared state, its shard's metrics, the partition
//! store and the group router, and nothing else. Where a partition's data or a group's
//! coordinator lives is decided below that line (`crate::store`, `crate::coordinator::router`).
//! A sidecar's group requests never reach these handlers: they are forwarded to its group
//! service as they come (`crate::sidecar`).

mod alter_configs;
mod api_versions;
mod config_changes;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_acls;
mod create_partitions;
mod create_topics;
mod delete_acls;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_acls;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod fetch;
mod find_coordinator;
mod groups;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod produce;
mod sasl_authenticate;
mod sasl_handshake;
mod sync_group;

pub(crate) use sasl_authenticate::raw_token as raw_sasl_token;

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use kafka_protocol::messages::ApiKey;

use crate::coordinator::router::GroupRouter;
use crate::metrics::ShardMetrics;
use crate::node::Node;
use crate::protocol::{Reply, RequestContext, RequestError};
use crate::security::quota::QuotaKind;
use crate::store::PartitionStore;

/// All a handler may use. Lives on one shard.
pub(crate) trait Services {
    /// The node's shared, read-mostly state: config, topic catalog, brokers.
    fn node(&self) -> &Arc<Node>;
    fn metrics(&self) -> &ShardMetrics;
    /// Produce, Fetch and ListOffsets go here.
    fn store(&self) -> &dyn PartitionStore;
    /// Every group API goes here, unless the node is a sidecar.
    fn groups(&self) -> &dyn GroupRouter;
    /// A sidecar forwards the group APIs to its group service instead.
    fn sidecar(&self) -> Option<&Rc<crate::sidecar::forward::Forwarder>>;
}

/// The outcome of a handler's first stage.
pub(crate) enum Handled {
    /// The response is complete.
    Now(Reply),
    /// The rest of the work; its output is the response.
    Later(LocalBoxFuture<'static, Reply>),
}

pub(crate) type HandlerResult = Result<Handled, RequestError>;
type HandlerFn = fn(Rc<dyn Services>, RequestContext, Bytes) -> LocalBoxFuture<'static, HandlerResult>;
type DecodeFn = fn(&RequestContext, Bytes) -> Result<(), RequestError>;

/// An API served by corral.
pub(crate) struct ApiEntry {
    pub(crate) key: ApiKey,
    /// Lowest version served.
    pub(crate) min: i16,
    /// Highest version served.
    pub(crate) max: i16,
    /// Lowest version advertised in ApiVersions. Lower than `min` only where clients key
    /// features on an old version being listed (spec §10.2: Produce, JoinGroup).
    pub(crate) advertised_min: i16,
    /// Lowest version the codec decodes. Versions from `min` up to it are decoded by the
    /// handler itself (those Kafka 4 removed that clients still send, KIP-896).
    pub(crate) codec_min: i16,
    pub(crate) handle: HandlerFn,
    /// Decodes the request body and drops it (what the handler's first step does).
    pub(crate) decode: DecodeFn,
}

/// Every API corral serves.
pub(crate) const TABLE: &[ApiEntry] = &[
    produce::ENTRY,
    fetch::ENTRY,
    list_offsets::ENTRY,
    metadata::ENTRY,
    offset_commit::ENTRY,
    offset_fetch::ENTRY,
    find_coordinator::ENTRY,
    join_group::ENTRY,
    heartbeat::ENTRY,
    leave_group::ENTRY,
    sync_group::ENTRY,
    describe_groups::ENTRY,
    list_groups::ENTRY,
    api_versions::ENTRY,
    create_topics::ENTRY,
    delete_topics::ENTRY,
    init_producer_id::ENTRY,
    describe_configs::ENTRY,
    alter_configs::ENTRY,
    incremental_alter_configs::ENTRY,
    create_partitions::ENTRY,
    delete_groups::ENTRY,
    offset_delete::ENTRY,
    describe_acls::ENTRY,
    create_acls::ENTRY,
    delete_acls::ENTRY,
    describe_log_dirs::ENTRY,
    delete_records::ENTRY,
    describe_cluster::ENTRY,
    consumer_group_heartbeat::ENTRY,
    consumer_group_describe::ENTRY,
    sasl_handshake::ENTRY,
    sasl_authenticate::ENTRY,
];

pub(crate) fn entry(key: ApiKey) -> Option<&'static ApiEntry> {
    TABLE.iter().find(|e| e.key == key)
}

/// Decodes a request frame exactly as [`dispatch`] would, without serving it: the header, the
/// version check and the body. For fuzzing.
pub fn decode_request(mut frame: Bytes) -> Result<ApiKey, RequestError> {
    let ctx = RequestContext::parse(&mut frame)?;
    let entry = entry(ctx.api_key)
        .filter(|e| (e.min..=e.max).contains(&ctx.api_version))
        .ok_or(RequestError::UnsupportedVersion { api: ctx.api_key, version: ctx.api_version })?;
    (entry.decode)(&ctx, frame)?;
    Ok(ctx.api_key)
}

/// Parses a request frame and runs its handler's first stage.
pub(crate) async fn dispatch(
    services: &Rc<dyn Services>,
    mut frame: Bytes,
    peer: std::net::SocketAddr,
    connection: u64,
    security: &Rc<crate::security::session::ConnectionSecurity>,
) -> HandlerResult {
    let mut ctx = RequestContext::parse(&mut frame)?;
    ctx.peer = Some(peer);
    ctx.connection = connection;
    ctx.security = Some(security.clone());
    let Some(entry) = entry(ctx.api_key) else {
        return Err(RequestError::UnsupportedVersion { api: ctx.api_key, version: ctx.api_version });
    };
    if ctx.api_version < entry.min || ctx.api_version > entry.max {
        if ctx.api_key == ApiKey::ApiVersions {
            return Ok(Handled::Now(api_versions::unsupported_version(&ctx)));
        }
        return Err(RequestError::UnsupportedVersion { api: ctx.api_key, version: ctx.api_version });
    }
    if let Some(sidecar) = services.sidecar().filter(|_| crate::sidecar::FORWARDED_APIS.contains(&ctx.api_key)) {
        // Forwarded requests are decoded and encoded by the codec, which lacks the old versions.
        if ctx.api_version < entry.codec_min {
            return Err(RequestError::UnsupportedVersion { api: ctx.api_key, version: ctx.api_version });
        }
        return sidecar.serve(ctx, frame).await.map(Handled::Later);
    }
    let node = services.node().clone();
    if !node.quotas.limits(QuotaKind::Request) {
        return (entry.handle)(services.clone(), ctx, frame).await;
    }
    // The request-time quota counts the shard time the request takes: its first stage, and
    // each poll of the rest. Over the quota, the connection is muted and the response reports
    // the throttle in its throttle_time_ms (protocol/throttle.rs).
    let started = std::time::Instant::now();
    let (api, version, header_version) = (ctx.api_key, ctx.api_version, ctx.response_header_version());
    let account = (ctx.principal(), ctx.client_id.as_deref().unwrap_or_default().to_string(), ctx.security.clone());
    let handled = (entry.handle)(services.clone(), ctx, frame).await?;
    let first_stage = started.elapsed();
    let record = move |reply: Reply, spent: std::time::Duration| {
        let (principal, client_id, security) = account;
        let throttle = node.quotas.record(QuotaKind::Request, &principal, &client_id, spent.as_secs_f64() * 1000.0);
        if throttle.is_zero() {
            return reply;
        }
        if let Some(security) = security {
            security.mute(throttle);
        }
        let throttle_ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
        crate::protocol::throttle::report(reply, api, version, header_version, throttle_ms)
    };
    Ok(match handled {
        Handled::Now(reply) => Handled::Now(record(reply, first_stage)),
        Handled::Later(rest) => Handled::Later(Box::pin(PollTimed { inner: rest, spent: first_stage, done: Some(Box::new(record)) })),
    })
}

/// A handler's second stage that adds up the time its polls take, and reports it with the reply
/// when done (which may change the reply).
struct PollTimed {
    inner: LocalBoxFuture<'static, Reply>,
    spent: std::time::Duration,
    done: Option<Box<dyn FnOnce(Reply, std::time::Duration) -> Reply>>,
}

impl std::future::Future for PollTimed {
    type Output = Reply;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Reply> {
        let started = std::time::Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.spent += started.elapsed();
        match polled {
            std::task::Poll::Ready(reply) => match self.done.take() {
                Some(done) => std::task::Poll::Ready(done(reply, self.spent)),
                None => std::task::Poll::Ready(reply),
            },
            pending => pending,
        }
    }
}

/// Counts `amount` against the client's quota of this kind; if it is over, mutes its connection
/// for the throttle time, which the response reports (`throttle_time_ms`).
pub(crate) fn throttle(node: &Node, ctx: &RequestContext, kind: QuotaKind, amount: f64) -> std::time::Duration {
    if !node.quotas.limits(kind) {
        return std::time::Duration::ZERO;
    }
    let client_id = ctx.client_id.as_deref().unwrap_or_default();
    let throttle = node.quotas.record(kind, &ctx.principal(), client_id, amount);
    if let Some(security) = ctx.security.as_ref().filter(|_| !throttle.is_zero()) {
        security.mute(throttle);
    }
    throttle
}

/// Builds an [`ApiEntry`] for the `handle` function of the module it is used in.
macro_rules! api_entry {
    ($key:expr, $request:ty, $min:expr, $max:expr) => {
        api_entry!($key, $request, $min, $max, advertised_min = $min)
    };
    ($key:expr, $request:ty, $min:expr, $max:expr, advertised_min = $adv:expr) => {
        crate::api::ApiEntry {
            key: $key,
            min: $min,
            max: $max,
            advertised_min: $adv,
            codec_min: $min,
            handle: |services, ctx, body| Box::pin(handle(services, ctx, body)),
            decode: |ctx, body| ctx.decode::<$request>(body).map(drop),
        }
    };
    // Versions from `$min` up to `$codec_min` are the module's own: its `decode` decodes every version.
    ($key:expr, $min:expr, $max:expr, codec_min = $codec_min:expr, decode = $decode:path) => {
        crate::api::ApiEntry {
            key: $key,
            min: $min,
            max: $max,
            advertised_min: $min,
            codec_min: $codec_min,
            handle: |services, ctx, body| Box::pin(handle(services, ctx, body)),
            decode: |ctx, body| $decode(ctx, body).map(drop),
        }
    };
}
use api_entry;

/// Success in a response's error-code field.
const NONE: i16 = 0;

/// In front of an upstream, how long a request naming a topic the catalog lacks waits for a
/// refresh of the upstream's metadata (the topic may be new there, or the last view may have
/// come from a broker that had not learnt of it yet).
const UNKNOWN_TOPIC_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// In front of an upstream, a request that names a topic the catalog lacks waits (at most
/// `wait`) for the upstream's metadata to be read again before it is answered: another corral
/// node, or the upstream itself, may have told the client of a topic this node has not seen yet.
async fn learn_new_topics(node: &Node, names_unknown_topic: bool, wait: std::time::Duration) {
    if let (Some(upstream), true) = (&node.upstream, names_unknown_topic) {
        upstream.look_for_new_topics(wait.min(UNKNOWN_TOPIC_WAIT)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent_with_the_codec() {
        let mut seen = std::collections::HashSet::new();
        for e in TABLE {
            assert!(seen.insert(e.key as i16), "{:?} listed twice", e.key);
            let codec = e.key.valid_versions();
            if e.codec_min > e.min {
                // The versions under `codec_min` are the handler's own, while the codec lacks them.
                assert_eq!(codec.min, e.codec_min, "{:?}: the codec serves from v{}: drop the hand-written versions", e.key, codec.min);
            }
            assert!(
                e.codec_min >= codec.min && e.max <= codec.max,
                "{:?} {}..={} outside the codec's {codec:?}",
                e.key,
                e.codec_min,
                e.max
            );
            assert!(e.advertised_min <= e.min);
        }
    }
}
