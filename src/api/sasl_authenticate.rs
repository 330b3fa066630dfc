//! SaslAuthenticate (key 36): one message of the SASL exchange the handshake chose. A failed
//! exchange is answered with SASL_AUTHENTICATION_FAILED after `sasl.failed_authentication_delay_ms`,
//! then the connection is closed.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::sasl_handshake::closing;
use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::sasl::{Failure, Step};
use crate::security::Principal;

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::SaslAuthenticate, SaslAuthenticateRequest, 0, 2);

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: SaslAuthenticateRequest = ctx.decode(body)?;
    let node = services.node().clone();
    let (Some(security), Some(sasl)) = (ctx.security.clone().filter(|s| s.listener.protocol.uses_sasl()), node.sasl.clone()) else {
        let response = SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_static_str("SaslAuthenticate on a listener without SASL")));
        return Ok(Handled::Now(ctx.respond(&response)));
    };
    let (mut exchange, reauthenticating) = match security.take_exchange(|mechanism| sasl.start(mechanism)) {
        Ok(taken) => taken,
        Err(e) => {
            let response = SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_string(e)));
            return Ok(Handled::Now(closing(ctx.respond(&response))));
        }
    };
    Ok(Handled::Later(Box::pin(async move {
        // PLAIN derives a key from the password (PBKDF2): not on the shard's thread.
        let input = request.auth_bytes;
        let stepped = tokio::task::spawn_blocking(move || {
            let step = exchange.step(&input);
            (exchange, step)
        })
        .await;
        let (exchange, step) = match stepped {
            Ok(done) => done,
            Err(e) => return crate::protocol::Reply::Failed(format!("SASL step failed: {e}")),
        };
        let mechanism = exchange.mechanism.clone();
        let outcome = match step {
            Step::Continue(reply) => {
                security.continue_exchange(exchange, reauthenticating);
                return ctx.respond(&SaslAuthenticateResponse::default().with_auth_bytes(reply.into()));
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
                tracing::debug!(peer = ?ctx.peer, %principal, %mechanism, "authenticated");
                crate::metrics::sasl_authentication(&mechanism, true);
                security.authenticated(principal, (lifetime > 0).then(|| Duration::from_millis(lifetime)));
                ctx.respond(&SaslAuthenticateResponse::default().with_auth_bytes(reply.into()).with_session_lifetime_ms(lifetime as i64))
            }
            Err(message) => {
                tracing::info!(peer = ?ctx.peer, %mechanism, %message, "SASL authentication failed");
                crate::metrics::sasl_authentication(&mechanism, false);
                security.failed();
                tokio::time::sleep(Duration::from_millis(node.config.sasl.failed_authentication_delay_ms)).await;
                let response = SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                    .with_error_message(Some(StrBytes::from_string(message)));
                closing(ctx.respond(&response))
            }
        }
    })))
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
