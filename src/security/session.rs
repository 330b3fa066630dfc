//! One connection's authentication state: which requests it may send now, and as whom.
//!
//! On a SASL listener (Kafka's `SaslServerAuthenticator`):
//!
//! ```text
//!   AwaitingHandshake ──SaslHandshake──▶ Handshaken ──SaslAuthenticate──▶ Exchanging ─┐
//!     (ApiVersions too)                                                      ▲ ◀────────┘
//!                                                 Authenticated ◀── proof ───┘
//!                                                   │  SaslHandshake (KIP-368, when
//!                                                   └─ connections_max_reauth_ms > 0) ──▶ Handshaken
//! ```
//!
//! After SaslHandshake v0 the exchange's tokens come as bare size-prefixed frames, not as
//! SaslAuthenticate requests (Kafka before 1.0; Sarama with PLAIN when it is configured for a
//! Kafka version before 1.0). A v0 session cannot re-authenticate.
//!
//! Anything else before authentication closes the connection, as Kafka does. Other listeners
//! start Authenticated: as the subject of the client's certificate if it sent one, else as
//! `User:ANONYMOUS`.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use super::sasl::Exchange;
use super::{Listener, Principal};

#[derive(Debug)]
pub struct ConnectionSecurity {
    pub listener: Arc<Listener>,
    state: RefCell<AuthState>,
    /// A quota throttled the client: nothing more is read from it before this.
    muted_until: Cell<Option<Instant>>,
    /// The handshake was v0: until authenticated, frames are bare SASL tokens.
    raw_tokens: Cell<bool>,
}

#[derive(Debug)]
enum AuthState {
    AwaitingHandshake,
    Handshaken {
        mechanism: String,
        reauthenticating: Option<Principal>,
    },
    Exchanging {
        exchange: Box<Exchange>,
        reauthenticating: Option<Principal>,
    },
    /// A step of the exchange is running; nothing else may be read meanwhile.
    Stepping,
    Authenticated {
        principal: Principal,
        expires: Option<Instant>,
    },
}

/// Why a request was refused before its handler ran; the connection is closed.
pub type Refusal = &'static str;

impl ConnectionSecurity {
    /// `certificate` is the principal of the client's TLS certificate, if it sent one.
    pub fn new(listener: Arc<Listener>, certificate: Option<Principal>) -> ConnectionSecurity {
        let state = match listener.protocol.uses_sasl() {
            true => AuthState::AwaitingHandshake,
            false => AuthState::Authenticated { principal: certificate.unwrap_or_else(Principal::anonymous), expires: None },
        };
        ConnectionSecurity { listener, state: RefCell::new(state), muted_until: Cell::new(None), raw_tokens: Cell::new(false) }
    }

    /// Whether a request with this API key may be served now.
    pub fn admits(&self, api: Option<ApiKey>) -> Result<(), Refusal> {
        match (&*self.state.borrow(), api) {
            (AuthState::Authenticated { expires: Some(at), .. }, Some(api)) if *at <= Instant::now() && api != ApiKey::SaslHandshake => {
                Err("the SASL session expired and the client did not authenticate again")
            }
            (AuthState::Authenticated { .. }, _) => Ok(()),
            (AuthState::AwaitingHandshake, Some(ApiKey::ApiVersions | ApiKey::SaslHandshake)) => Ok(()),
            (AuthState::AwaitingHandshake, _) => Err("a request other than ApiVersions or SaslHandshake before SASL authentication"),
            (AuthState::Handshaken { .. } | AuthState::Exchanging { .. }, Some(ApiKey::SaslAuthenticate)) => Ok(()),
            (AuthState::Handshaken { .. } | AuthState::Exchanging { .. }, _) => {
                Err("a request other than SaslAuthenticate during SASL authentication")
            }
            (AuthState::Stepping, _) => Err("a request while a SASL step was running"),
        }
    }

    /// Throttles the connection (a quota violation): its next request is read after `for_`.
    pub fn mute(&self, for_: Duration) {
        let until = Instant::now() + for_;
        if self.muted_until.get().is_none_or(|t| t < until) {
            self.muted_until.set(Some(until));
        }
    }

    /// Until when the connection is muted, if it is.
    pub fn muted_until(&self) -> Option<Instant> {
        self.muted_until.take().filter(|t| *t > Instant::now())
    }

    /// Whether the connection has authenticated (every connection of a listener without SASL).
    pub fn is_authenticated(&self) -> bool {
        matches!(&*self.state.borrow(), AuthState::Authenticated { .. })
    }

    /// Who the connection acts as: `User:ANONYMOUS` before SASL authentication.
    pub fn principal(&self) -> Principal {
        match &*self.state.borrow() {
            AuthState::Authenticated { principal, .. } => principal.clone(),
            _ => Principal::anonymous(),
        }
    }

    /// SaslHandshake: records the mechanism. `reauth` is whether re-authentication is enabled;
    /// `raw_tokens`, whether the handshake was v0 (tokens as bare frames; first authentication
    /// only).
    pub fn handshake(&self, mechanism: &str, reauth: bool, raw_tokens: bool) -> Result<(), HandshakeRefusal> {
        let mut state = self.state.borrow_mut();
        let reauthenticating = match &*state {
            AuthState::AwaitingHandshake => None,
            AuthState::Authenticated { principal, .. } if reauth && !raw_tokens => Some(principal.clone()),
            _ => return Err(HandshakeRefusal::IllegalState),
        };
        *state = AuthState::Handshaken { mechanism: mechanism.to_string(), reauthenticating };
        self.raw_tokens.set(raw_tokens);
        Ok(())
    }

    /// Whether the next frame is a bare SASL token (after SaslHandshake v0), not a request.
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens.get() && matches!(&*self.state.borrow(), AuthState::Handshaken { .. } | AuthState::Exchanging { .. })
    }

    /// SaslAuthenticate: takes the exchange (starting it after a handshake) for one step. The
    /// state is `Stepping` until [`ConnectionSecurity::step_done`].
    pub fn take_exchange(
        &self,
        start: impl FnOnce(&str) -> Result<Exchange, String>,
    ) -> Result<(Box<Exchange>, Option<Principal>), String> {
        let mut state = self.state.borrow_mut();
        match std::mem::replace(&mut *state, AuthState::Stepping) {
            AuthState::Handshaken { mechanism, reauthenticating } => match start(&mechanism) {
                Ok(exchange) => Ok((Box::new(exchange), reauthenticating)),
                Err(e) => Err(e),
            },
            AuthState::Exchanging { exchange, reauthenticating } => Ok((exchange, reauthenticating)),
            other => {
                *state = other;
                Err("SaslAuthenticate without SaslHandshake".to_string())
            }
        }
    }

    /// The client must send its next message.
    pub fn continue_exchange(&self, exchange: Box<Exchange>, reauthenticating: Option<Principal>) {
        *self.state.borrow_mut() = AuthState::Exchanging { exchange, reauthenticating };
    }

    /// The exchange succeeded; `lifetime` is how long the session lasts (KIP-368).
    pub fn authenticated(&self, principal: Principal, lifetime: Option<Duration>) {
        *self.state.borrow_mut() = AuthState::Authenticated { principal, expires: lifetime.map(|d| Instant::now() + d) };
        self.raw_tokens.set(false);
    }

    /// The exchange failed: the connection admits nothing more (it is closed after the answer).
    pub fn failed(&self) {
        *self.state.borrow_mut() = AuthState::Stepping;
    }
}

/// Why a SaslHandshake was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HandshakeRefusal {
    /// Not a SASL listener, or a handshake where none is expected (ILLEGAL_SASL_STATE).
    IllegalState,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SecurityProtocol;

    fn sasl_connection() -> ConnectionSecurity {
        let listener = Listener {
            index: 0,
            name: "SASL_PLAINTEXT".into(),
            protocol: SecurityProtocol::SaslPlaintext,
            bound: "127.0.0.1:9092".parse().unwrap(),
            tls: None,
            kernel_tls: None,
        };
        ConnectionSecurity::new(Arc::new(listener), None)
    }

    #[test]
    fn handshake_v0_takes_bare_tokens_until_authenticated_and_never_again() {
        let c = sasl_connection();
        assert!(!c.is_authenticated() && !c.expects_raw_token());
        c.handshake("PLAIN", true, true).unwrap();
        assert!(c.expects_raw_token(), "the next frame is a token");
        c.authenticated(Principal::user("u"), None);
        assert!(c.is_authenticated() && !c.expects_raw_token());
        // Re-authentication (KIP-368) needs v1: a v0 handshake now is refused.
        assert_eq!(c.handshake("PLAIN", true, true), Err(HandshakeRefusal::IllegalState));
        c.handshake("PLAIN", true, false).unwrap();
        assert!(!c.expects_raw_token(), "after v1 tokens come in SaslAuthenticate");
    }
}
