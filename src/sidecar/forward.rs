//! A shard's forwarding of group requests to the group service.
//!
//! Each request goes to the coordinator of its group, found with FindCoordinator and remembered.
//! A client connection gets its own connection to each coordinator it uses, as it would have
//! talking to the brokers itself: the coordinator works through its requests in order (a commit
//! then a fetch of offsets stay in that order), and one member's JoinGroup, held through a
//! rebalance, never delays another application's heartbeats. The request is written there in
//! the handler's first stage, so pipelined group requests keep their order.
//!
//! NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE, and a coordinator that cannot be reached, are
//! followed: the group's coordinator is looked up again and the request sent there, until
//! `sidecar.request_timeout_ms` has passed; then the client gets that error, as Kafka gives it,
//! and retries as it would against a broker. A request naming several groups (DescribeGroups,
//! DeleteGroups, ConsumerGroupDescribe, OffsetFetch v8+) is sent group by group, each to its own
//! coordinator, and the answers are merged in request order. ListGroups asks every broker of the
//! service.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::ResponseError;
use tokio::time::Instant;

use super::calls::GroupCall;
use super::GroupService;
use crate::protocol::{Reply, RequestContext, RequestError};
use crate::upstream::connection::Connection;
use crate::upstream::UpstreamError;

/// The highest FindCoordinator version sent: v4 is the first with batched keys, and nothing later
/// changes what a group lookup needs.
pub const FIND_COORDINATOR_VERSION: i16 = 4;
const GROUP_KEY: i8 = 0;
/// Coordinators remembered per shard; past this the cache starts again.
const MAX_REMEMBERED: usize = 100_000;

const NOT_COORDINATOR: i16 = ResponseError::NotCoordinator.code();
const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();

/// Coordinator-level errors the sidecar follows instead of passing on at once.
fn follows(code: i16) -> bool {
    code == NOT_COORDINATOR || code == COORDINATOR_NOT_AVAILABLE
}

type Response<T> = LocalBoxFuture<'static, Result<T, UpstreamError>>;

/// A forwarded request once its first try is written: its response to the client, to come.
pub(crate) type Forwarded = Result<LocalBoxFuture<'static, Reply>, RequestError>;

/// A reply that is ready now.
fn now(reply: Reply) -> Forwarded {
    Ok(Box::pin(std::future::ready(reply)))
}

/// One try: the response to come, or the error code of a request that could not be sent.
type Sent<T> = Result<Response<T>, i16>;

/// A client connection (its peer address) and a coordinator's address.
type LinkKey = (Option<SocketAddr>, String);

#[derive(Debug)]
pub struct Forwarder {
    service: Arc<GroupService>,
    /// Group id → `host:port` of its coordinator, as last found.
    coordinators: RefCell<HashMap<String, String>>,
    /// For lookups and listings: one connection per group service broker.
    shared: RefCell<HashMap<String, Rc<Connection>>>,
    /// Each client connection's own connections, by coordinator address.
    links: RefCell<HashMap<LinkKey, Rc<Connection>>>,
}

impl Forwarder {
    pub fn new(service: Arc<GroupService>) -> Forwarder {
        Forwarder { service, coordinators: Default::default(), shared: Default::default(), links: Default::default() }
    }

    /// Serves one of [`super::FORWARDED_APIS`].
    pub(crate) fn serve(self: &Rc<Self>, ctx: RequestContext, body: Bytes) -> LocalBoxFuture<'static, Forwarded> {
        let this = self.clone();
        match ctx.api_key {
            ApiKey::JoinGroup => Box::pin(this.forward::<JoinGroupRequest>(ctx, body)),
            ApiKey::SyncGroup => Box::pin(this.forward::<SyncGroupRequest>(ctx, body)),
            ApiKey::Heartbeat => Box::pin(this.forward::<HeartbeatRequest>(ctx, body)),
            ApiKey::LeaveGroup => Box::pin(this.forward::<LeaveGroupRequest>(ctx, body)),
            ApiKey::OffsetCommit => Box::pin(this.forward::<OffsetCommitRequest>(ctx, body)),
            ApiKey::OffsetFetch => Box::pin(this.forward::<OffsetFetchRequest>(ctx, body)),
            ApiKey::OffsetDelete => Box::pin(this.forward::<OffsetDeleteRequest>(ctx, body)),
            ApiKey::DescribeGroups => Box::pin(this.forward::<DescribeGroupsRequest>(ctx, body)),
            ApiKey::DeleteGroups => Box::pin(this.forward::<DeleteGroupsRequest>(ctx, body)),
            ApiKey::ConsumerGroupHeartbeat => Box::pin(this.forward::<ConsumerGroupHeartbeatRequest>(ctx, body)),
            ApiKey::ConsumerGroupDescribe => Box::pin(this.forward::<ConsumerGroupDescribeRequest>(ctx, body)),
            ApiKey::ListGroups => Box::pin(this.list_groups(ctx, body)),
            api => Box::pin(std::future::ready(Err(RequestError::UnsupportedVersion { api, version: ctx.api_version }))),
        }
    }

    /// The client connection from `peer` closed: so do its connections to the coordinators.
    pub fn connection_closed(&self, peer: SocketAddr) {
        self.links.borrow_mut().retain(|(owner, _), _| *owner != Some(peer));
    }

    async fn forward<R: GroupCall>(self: Rc<Self>, ctx: RequestContext, body: Bytes) -> Forwarded
    where
        R::Response: Encodable + Default + 'static,
    {
        let request: R = ctx.decode(body)?;
        let version = ctx.api_version;
        let groups = request.groups(version);
        let served = self.service.view().map(|v| v.serves(ctx.api_key, version));
        if served != Some(true) {
            let code = if served.is_none() { COORDINATOR_NOT_AVAILABLE } else { ResponseError::UnsupportedVersion.code() };
            return now(ctx.respond(&request.failed(version, code)));
        }
        let parts: Vec<(R, String)> = match groups.len() {
            0 => return now(ctx.respond(&R::merge(Vec::new()))),
            1 => vec![(request, groups.into_iter().next().unwrap_or_default())],
            _ => groups.into_iter().enumerate().map(|(i, group)| (request.only(version, i), group)).collect(),
        };
        let deadline = Instant::now() + self.service.request_timeout();
        // Each part's first try is written now, before the connection reads its next request.
        let mut first = Vec::with_capacity(parts.len());
        for (part, group) in &parts {
            first.push(self.attempt(&ctx, part, group, deadline).await);
        }
        Ok(Box::pin(async move {
            let mut answers = Vec::with_capacity(parts.len());
            for ((part, group), sent) in parts.into_iter().zip(first) {
                answers.push(self.finish(&ctx, part, &group, sent, deadline).await);
            }
            ctx.respond(&R::merge(answers))
        }))
    }

    /// Finds the group's coordinator and writes the request to it.
    async fn attempt<R: GroupCall>(&self, ctx: &RequestContext, part: &R, group: &str, deadline: Instant) -> Sent<R::Response>
    where
        R::Response: Encodable + Default + 'static,
    {
        let address = self.coordinator(group, deadline).await?;
        let link = self.link(ctx.peer, &address);
        match link.send_as(ctx.api_version, part, ctx.client_id.clone()) {
            Ok(response) => Ok(Box::pin(response)),
            Err(_) => Err(NOT_COORDINATOR),
        }
    }

    /// Waits for the answer, following the coordinator while it moves.
    async fn finish<R: GroupCall>(
        &self,
        ctx: &RequestContext,
        part: R,
        group: &str,
        mut sent: Sent<R::Response>,
        deadline: Instant,
    ) -> R::Response
    where
        R::Response: Encodable + Default + 'static,
    {
        let version = ctx.api_version;
        // The coordinator may hold a JoinGroup through the rebalance before it answers.
        let patience = deadline + Duration::from_millis(part.held_ms());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let code = match sent {
                Ok(response) => match tokio::time::timeout_at(patience, response).await {
                    Ok(Ok(answer)) => {
                        let code = R::error(&answer, version);
                        if !follows(code) {
                            crate::metrics::sidecar_group_request(ctx.api_key, attempts, true);
                            return answer;
                        }
                        code
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(group, error = %e, "group request not answered by its coordinator");
                        self.service.mark_stale();
                        NOT_COORDINATOR
                    }
                    Err(_) => COORDINATOR_NOT_AVAILABLE,
                },
                Err(code) if follows(code) => code,
                // The lookup itself was refused (an invalid group id): nothing to follow.
                Err(code) => {
                    crate::metrics::sidecar_group_request(ctx.api_key, attempts, false);
                    return part.failed(version, code);
                }
            };
            self.coordinators.borrow_mut().remove(group);
            let backoff = self.service.retry_backoff;
            if Instant::now() + backoff >= deadline {
                crate::metrics::sidecar_group_request(ctx.api_key, attempts, false);
                return part.failed(version, code);
            }
            tokio::time::sleep(backoff).await;
            sent = self.attempt(ctx, &part, group, deadline).await;
        }
    }

    /// The address of the group's coordinator: remembered, or asked of the group service.
    async fn coordinator(&self, group: &str, deadline: Instant) -> Result<String, i16> {
        if let Some(address) = self.coordinators.borrow().get(group) {
            return Ok(address.clone());
        }
        let view = self.service.view().ok_or(COORDINATOR_NOT_AVAILABLE)?;
        let version = view.version(ApiKey::FindCoordinator, FIND_COORDINATOR_VERSION).ok_or(COORDINATOR_NOT_AVAILABLE)?;
        let key = StrBytes::from_string(group.to_string());
        let request = if version >= 4 {
            FindCoordinatorRequest::default().with_key_type(GROUP_KEY).with_coordinator_keys(vec![key])
        } else {
            FindCoordinatorRequest::default().with_key_type(GROUP_KEY).with_key(key)
        };
        for address in self.service.addresses() {
            let Ok(response) = self.shared(&address).send(version, &request) else { continue };
            let response = match tokio::time::timeout_at(deadline, response).await {
                Ok(Ok(response)) => response,
                Ok(Err(_)) => {
                    self.service.mark_stale();
                    continue;
                }
                Err(_) => break,
            };
            let (code, host, port) = match response.coordinators.into_iter().next() {
                Some(c) if version >= 4 => (c.error_code, c.host, c.port),
                _ => (response.error_code, response.host, response.port),
            };
            crate::metrics::sidecar_coordinator_lookup(code == 0);
            if code != 0 {
                return Err(code);
            }
            let address = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            let mut remembered = self.coordinators.borrow_mut();
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
            remembered.insert(group.to_string(), address.clone());
            return Ok(address);
        }
        crate::metrics::sidecar_coordinator_lookup(false);
        Err(COORDINATOR_NOT_AVAILABLE)
    }

    fn shared(&self, address: &str) -> Rc<Connection> {
        let mut shared = self.shared.borrow_mut();
        match shared.get(address) {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                let c = Rc::new(Connection::open(address.to_string(), self.service.dialer.clone()));
                shared.insert(address.to_string(), c.clone());
                c
            }
        }
    }

    /// The client connection's own connection to the coordinator at `address`.
    fn link(&self, peer: Option<SocketAddr>, address: &str) -> Rc<Connection> {
        let mut links = self.links.borrow_mut();
        let key = (peer, address.to_string());
        match links.get(&key) {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                let c = Rc::new(Connection::open(address.to_string(), self.service.dialer.clone()));
                links.insert(key, c.clone());
                c
            }
        }
    }

    /// ListGroups asks every broker of the group service (each lists the groups it
    /// coordinates) and answers the union; if one cannot answer, the client gets its error.
    async fn list_groups(self: Rc<Self>, ctx: RequestContext, body: Bytes) -> Forwarded {
        let request: ListGroupsRequest = ctx.decode(body)?;
        let view = self.service.view();
        let Some(view) = view.filter(|v| v.serves(ApiKey::ListGroups, ctx.api_version)) else {
            let response = ListGroupsResponse::default().with_error_code(COORDINATOR_NOT_AVAILABLE);
            return now(ctx.respond(&response));
        };
        let pending: Vec<_> =
            view.brokers.values().map(|address| self.shared(address).send_as(ctx.api_version, &request, ctx.client_id.clone())).collect();
        let deadline = Instant::now() + self.service.request_timeout();
        Ok(Box::pin(async move {
            let mut merged = ListGroupsResponse::default();
            let mut seen = HashSet::new();
            let mut error = 0;
            for response in pending {
                let answer = match response {
                    Ok(response) => tokio::time::timeout_at(deadline, response).await.ok().and_then(Result::ok),
                    Err(_) => None,
                };
                match answer {
                    Some(r) if r.error_code == 0 => {
                        merged.throttle_time_ms = merged.throttle_time_ms.max(r.throttle_time_ms);
                        merged.groups.extend(r.groups.into_iter().filter(|g| seen.insert(g.group_id.clone())));
                    }
                    Some(r) => error = r.error_code,
                    None => {
                        self.service.mark_stale();
                        error = COORDINATOR_NOT_AVAILABLE;
                    }
                }
            }
            if error != 0 {
                merged = ListGroupsResponse::default().with_error_code(error);
            }
            ctx.respond(&merged)
        }))
    }
}
