//! FindCoordinator (key 10): a group's coordinator is the node leading the Raft group of its
//! coordinator partition (this node, on a single node). A sidecar names itself for every group
//! (it forwards their requests). Batched keys from v4. Transactions are not served, so
//! TRANSACTION keys get a clear, non-retriable error. A group key needs DESCRIBE on the group,
//! in a sidecar too (FindCoordinator is not forwarded).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::FindCoordinator, FindCoordinatorRequest, 0, 6);

/// Key types (KIP-98, KIP-932).
const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: FindCoordinatorRequest = ctx.decode(body)?;
    let keys: Vec<StrBytes> = if ctx.api_version >= 4 { request.coordinator_keys.clone() } else { vec![request.key.clone()] };
    let mut coordinators = Vec::with_capacity(keys.len());
    for key in keys {
        coordinators.push(answer(services.as_ref(), &ctx, request.key_type, key).await);
    }
    let response = if ctx.api_version >= 4 {
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let c = coordinators.pop().unwrap_or_default();
        let mut r =
            FindCoordinatorResponse::default().with_error_code(c.error_code).with_node_id(c.node_id).with_host(c.host).with_port(c.port);
        if ctx.api_version >= 1 {
            // v1–v3 success carries the literal "NONE", as Kafka fills it from the error name.
            r = r.with_error_message(Some(c.error_message.unwrap_or_else(|| StrBytes::from_static_str("NONE"))));
        }
        r
    };
    Ok(Handled::Now(ctx.respond(&response)))
}

/// The coordinator of one key: the node that leads the Raft group of the group's coordinator
/// partition (this node, on a single node).
async fn answer(services: &dyn Services, ctx: &RequestContext, key_type: i8, key: StrBytes) -> Coordinator {
    let refuse = |code: ResponseError, message: &'static str| {
        Coordinator::default()
            .with_key(key.clone())
            .with_node_id(BrokerId(-1))
            .with_host(StrBytes::default())
            .with_port(-1)
            .with_error_code(code.code())
            .with_error_message(Some(StrBytes::from_static_str(message)))
    };
    let node = services.node();
    match key_type {
        GROUP if !node.allows(ctx, Operation::Describe, Resource::Group(&key)) => {
            return refuse(ResponseError::GroupAuthorizationFailed, "not authorized to describe the group")
        }
        GROUP => {}
        TRANSACTION => return refuse(ResponseError::InvalidRequest, "transactions are not supported by corral"),
        _ => return refuse(ResponseError::InvalidRequest, "unsupported coordinator key type"),
    }
    let leader = match services.sidecar() {
        Some(_) => Some(node.node_id),
        None => services.groups().coordinator_of(key.to_string()).await.and_then(|id| i32::try_from(id).ok()),
    };
    match leader.and_then(|id| node.brokers_for(ctx).get(&id).map(|addr| (id, addr))) {
        Some((id, (host, port))) => Coordinator::default()
            .with_key(key.clone())
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_string(host.clone()))
            .with_port(*port as i32),
        None => refuse(ResponseError::CoordinatorNotAvailable, "the group's coordinator partition has no leader yet"),
    }
}
