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
        ConnectionSecurity { listener, state: RefCell::new(state), muted_until: Cell::new(None) }
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

    /// Who the connection acts as: `User:ANONYMOUS` before SASL authentication.
    pub fn principal(&self) -> Principal {
        match &*self.state.borrow() {
            AuthState::Authenticated { principal, .. } => principal.clone(),
            _ => Principal::anonymous(),
        }
    }

    /// SaslHandshake: records the mechanism. `reauth` is whether re-authentication is enabled.
    pub fn handshake(&self, mechanism: &str, reauth: bool) -> Result<(), HandshakeRefusal> {
        let mut state = self.state.borrow_mut();
        let reauthenticating = match &*state {
            AuthState::AwaitingHandshake => None,
            AuthState::Authenticated { principal, .. } if reauth => Some(principal.clone()),
            _ => return Err(HandshakeRefusal::IllegalState),
        };
        *state = AuthState::Handshaken { mechanism: mechanism.to_string(), reauthenticating };
        Ok(())
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
