//! InitProducerId (key 22): a fresh producer id for an idempotent producer.
//!
//! Transactions are not served yet; a transactional id is refused with INVALID_REQUEST (the
//! client reports it and the log says why) rather than a retriable code that would retry forever.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult};
use crate::protocol::RequestContext;
use crate::runtime::Shard;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::InitProducerId, InitProducerIdRequest, 0, 5);

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: InitProducerIdRequest = ctx.decode(body)?;
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    let response = if request.transactional_id.as_ref().is_some_and(|t| !t.0.is_empty()) {
        tracing::warn!(client = ?ctx.client_id, "refused InitProducerId with a transactional id: transactions are not supported");
        response.with_error_code(ResponseError::InvalidRequest.code())
    } else {
        // Idempotent producers always get a new id; a bumped epoch is not needed (KIP-360 path
        // applies to transactional producers).
        match shard.node.producer_ids.next() {
            Ok(id) => response.with_producer_id(ProducerId(id)).with_producer_epoch(0),
            Err(e) => {
                tracing::error!(error = %e, "cannot persist producer id allocation");
                response.with_error_code(ResponseError::UnknownServerError.code())
            }
        }
    };
    Ok(Handled::Now(ctx.respond(&response)))
}
