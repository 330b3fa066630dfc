//! SaslHandshake (key 17): the client names its SASL mechanism. After v1 the tokens travel in
//! SaslAuthenticate requests; after v0 (removed by Kafka 4, KIP-896, still sent by Sarama with
//! PLAIN when it is configured for a Kafka version before 1.0) they come as bare size-prefixed
//! frames (`sasl_authenticate::raw_token`).

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::{Reply, RequestContext};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::SaslHandshake, SaslHandshakeRequest, 0, 1);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: SaslHandshakeRequest = ctx.decode(body)?;
    let node = services.node();
    let (Some(security), Some(sasl)) = (ctx.security.as_ref().filter(|s| s.listener.protocol.uses_sasl()), node.sasl.as_ref()) else {
        // Not a SASL listener: Kafka answers, and serves the connection on.
        return Ok(Handled::Now(ctx.respond(&SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()))));
    };
    let mechanisms: Vec<StrBytes> = sasl.mechanisms.iter().map(|m| StrBytes::from_string(m.clone())).collect();
    let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
    if !sasl.mechanisms.iter().any(|m| *m == request.mechanism.as_str()) {
        // The client learns what is offered; then the connection is closed, as Kafka does.
        let response = response.with_error_code(ResponseError::UnsupportedSaslMechanism.code());
        return Ok(Handled::Now(closing(ctx.respond(&response))));
    }
    let reauth = node.config.sasl.connections_max_reauth_ms > 0;
    if security.handshake(&request.mechanism, reauth, ctx.api_version == 0).is_err() {
        let response = response.with_error_code(ResponseError::IllegalSaslState.code());
        return Ok(Handled::Now(closing(ctx.respond(&response))));
    }
    Ok(Handled::Now(ctx.respond(&response)))
}

/// The reply, after which the connection is closed.
pub(super) fn closing(reply: Reply) -> Reply {
    match reply {
        Reply::Frame(frame) => Reply::Last(frame),
        other => other,
    }
}
