//! FindCoordinator (key 10): every group is coordinated by this node (one node). Batched keys
//! from v4. Transactions are not served, so TRANSACTION keys get a clear, non-retriable error.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult};
use crate::protocol::RequestContext;
use crate::runtime::Shard;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::FindCoordinator, FindCoordinatorRequest, 0, 6);

/// Key types (KIP-98, KIP-932).
const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: FindCoordinatorRequest = ctx.decode(body)?;
    let node = &shard.node;
    let answer = |key: StrBytes| -> Coordinator {
        let refuse = |code: ResponseError, message: &'static str| {
            Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_host(StrBytes::default())
                .with_port(-1)
                .with_error_code(code.code())
                .with_error_message(Some(StrBytes::from_static_str(message)))
        };
        match request.key_type {
            GROUP => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(node.node_id))
                .with_host(StrBytes::from_string(node.advertised.0.clone()))
                .with_port(node.advertised.1 as i32),
            TRANSACTION => refuse(ResponseError::InvalidRequest, "transactions are not supported by corral"),
            _ => refuse(ResponseError::InvalidRequest, "unsupported coordinator key type"),
        }
    };
    let response = if ctx.api_version >= 4 {
        FindCoordinatorResponse::default().with_coordinators(request.coordinator_keys.into_iter().map(answer).collect())
    } else {
        let c = answer(request.key);
        let mut r = FindCoordinatorResponse::default()
            .with_error_code(c.error_code)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port);
        if ctx.api_version >= 1 {
            // v1–v3 success carries the literal "NONE", as Kafka fills it from the error name.
            r = r.with_error_message(Some(c.error_message.unwrap_or_else(|| StrBytes::from_static_str("NONE"))));
        }
        r
    };
    Ok(Handled::Now(ctx.respond(&response)))
}
