//! SaslAuthenticate (key 36): one message of the SASL exchange the handshake chose. A failed
//! exchange is answered with SASL_AUTHENTICATION_FAILED after `sasl.failed_authentication_delay_ms`,
//! then the connection is closed. After SaslHandshake v0 the same messages come as bare frames
//! ([`raw_token`]).

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::sasl_handshake::closing;
use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::node::Node;
use crate::protocol::{Reply, RequestContext};
use crate::security::sasl::{Exchange, Failure, Step};
use crate::security::session::ConnectionSecurity;
use crate::security::Principal;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::SaslAuthenticate, SaslAuthenticateRequest, 0, 2);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: SaslAuthenticateRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let Some(security) = ctx.security.clone().filter(|s| s.listener.protocol.uses_sasl()).filter(|_| node.sasl.is_some()) else {
        let response = SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_static_str("SaslAuthenticate on a listener without SASL")));
        return Ok(Handled::Now(ctx.respond(&response)));
    };
    let stepping = step(node, security, request.auth_bytes, ctx.peer);
    Ok(Handled::Later(Box::pin(async move {
        match stepping.await {
            Stepped::Continue(reply) => ctx.respond(&SaslAuthenticateResponse::default().with_auth_bytes(reply.into())),
            Stepped::Authenticated { reply, lifetime_ms } => {
                ctx.respond(&SaslAuthenticateResponse::default().with_auth_bytes(reply.into()).with_session_lifetime_ms(lifetime_ms))
            }
            Stepped::Refused { code, message } => {
                let response = SaslAuthenticateResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(StrBytes::from_string(message)));
                closing(ctx.respond(&response))
            }
        }
    })))
}

/// A token that came as a bare frame after SaslHandshake v0: the answer is a bare frame too (the
/// size, then the server's token, empty when there is none). A failed exchange closes the
/// connection without an answer, as Kafka did. Takes the exchange at once, as a handler's first
/// stage does; the rest is the returned future.
pub(crate) fn raw_token(
    services: &Rc<dyn Services>,
    security: Rc<ConnectionSecurity>,
    token: Bytes,
    peer: SocketAddr,
) -> impl Future<Output = Reply> + 'static {
    let stepping = step(services.node().clone(), security, token, Some(peer));
    async move {
        match stepping.await {
            Stepped::Continue(reply) | Stepped::Authenticated { reply, .. } => {
                let mut frame = BytesMut::with_capacity(4 + reply.len());
                frame.put_u32(reply.len() as u32);
                frame.put_slice(&reply);
                Reply::Frame(frame.freeze())
            }
            Stepped::Refused { .. } => Reply::Close("SASL authentication failed"),
        }
    }
}

/// What one step of the exchange came to.
enum Stepped {
    /// The client sends its next message.
    Continue(Vec<u8>),
    /// The connection now acts as the user.
    Authenticated { reply: Vec<u8>, lifetime_ms: i64 },
    /// The connection is closed after the answer.
    Refused { code: ResponseError, message: String },
}

/// One message of the exchange. The exchange is taken from the connection at once, before its
/// next frame is read (nothing else is admitted meanwhile); the returned future steps it (off the
/// shard's thread: PLAIN derives a key from the password) and moves the connection's state on. A
/// failure waits `sasl.failed_authentication_delay_ms` first.
fn step(
    node: Arc<Node>,
    security: Rc<ConnectionSecurity>,
    input: Bytes,
    peer: Option<SocketAddr>,
) -> impl Future<Output = Stepped> + 'static {
    let taken = match node.sasl.clone() {
        None => Err(Stepped::Refused { code: ResponseError::IllegalSaslState, message: "SASL is not configured".to_string() }),
        Some(sasl) => security
            .take_exchange(|mechanism| sasl.start(mechanism))
            .map_err(|message| Stepped::Refused { code: ResponseError::IllegalSaslState, message }),
    };
    async move {
        let (exchange, reauthenticating) = match taken {
            Ok(taken) => taken,
            Err(refused) => return refused,
        };
        step_taken(&node, &security, exchange, reauthenticating, input, peer).await
    }
}

async fn step_taken(
    node: &Node,
    security: &ConnectionSecurity,
    mut exchange: Box<Exchange>,
    reauthenticating: Option<Principal>,
    input: Bytes,
    peer: Option<SocketAddr>,
) -> Stepped {
    let stepped = tokio::task::spawn_blocking(move || {
        let step = exchange.step(&input);
        (exchange, step)
    })
    .await;
    let (exchange, step) = match stepped {
        Ok(done) => done,
        Err(e) => {
            security.failed();
            return Stepped::Refused { code: ResponseError::SaslAuthenticationFailed, message: format!("SASL step failed: {e}") };
        }
    };
    let mechanism = exchange.mechanism.clone();
    let outcome = match step {
        Step::Continue(reply) => {
            security.continue_exchange(exchange, reauthenticating);
            return Stepped::Continue(reply);
        }
        Step::Done { user, reply } => {
            let principal = Principal::user(user);
            match reauthenticating {
                Some(previous) if previous != principal => {
                    Err(format!("Cannot change principals during re-authentication from {previous}: {principal}"))
                }
                _ => Ok((principal, reply)),
            }
        }
        Step::Failed(failure) => Err(failure_message(failure, &mechanism)),
    };
    match outcome {
        Ok((principal, reply)) => {
            let lifetime = node.config.sasl.connections_max_reauth_ms;
            tracing::debug!(?peer, %principal, %mechanism, "authenticated");
            crate::metrics::sasl_authentication(&mechanism, true);
            security.authenticated(principal, (lifetime > 0).then(|| Duration::from_millis(lifetime)));
            Stepped::Authenticated { reply, lifetime_ms: lifetime as i64 }
        }
        Err(message) => {
            tracing::info!(?peer, %mechanism, %message, "SASL authentication failed");
            crate::metrics::sasl_authentication(&mechanism, false);
            security.failed();
            tokio::time::sleep(Duration::from_millis(node.config.sasl.failed_authentication_delay_ms)).await;
            Stepped::Refused { code: ResponseError::SaslAuthenticationFailed, message }
        }
    }
}

/// The messages Kafka's authenticators give, which clients show their users.
fn failure_message(failure: Failure, mechanism: &str) -> String {
    match (failure, mechanism) {
        (Failure::AuthorizationId, _) => {
            "Authentication failed: Client requested an authorization id that is different from username".to_string()
        }
        (_, "PLAIN") => "Authentication failed: Invalid username or password".to_string(),
        (Failure::InvalidCredentials, _) => {
            format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")
        }
        (Failure::Malformed, _) => format!("Authentication failed: malformed {mechanism} message"),
    }
}
