//! SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with rsasl: the mechanisms' message
//! formats and proofs are the library's; corral supplies the stored credentials and decides what
//! a finished exchange means.

use std::sync::Arc;

use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::scram::properties::ScramStoredPassword;
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLConfig, SASLServer, SessionError, State};
use rsasl::property::{AuthId, AuthzId, Password};
use rsasl::validate::{Validate, Validation, ValidationError};

use super::credentials::{Credentials, ScramHash};
use super::watched::Watched;
use crate::config::{invalid, ConfigError};

/// What a finished exchange yields: the authenticated user's name, or why it failed.
struct Outcome;

impl Validation for Outcome {
    type Value = Result<String, Failure>;
}

/// Why an authentication failed; each has the message Kafka gives for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Unknown user or wrong password.
    InvalidCredentials,
    /// PLAIN with an authorization id other than the user name.
    AuthorizationId,
    /// The client's message could not be parsed.
    Malformed,
}

/// The SASL side of a node: its credentials and enabled mechanisms.
#[derive(Debug)]
pub struct SaslServer {
    config: Arc<SASLConfig>,
    pub mechanisms: Vec<String>,
}

impl SaslServer {
    pub(crate) fn new(sasl: &crate::config::SaslConfig) -> Result<SaslServer, ConfigError> {
        let path = sasl.credentials_file.clone().ok_or_else(|| invalid("sasl.credentials_file", "a SASL listener needs it"))?;
        let credentials = Watched::load("SASL credentials", vec![path], Credentials::load).map_err(|(key, reason)| invalid(key, reason))?;
        let config =
            SASLConfig::builder().with_defaults().with_callback(Lookup { credentials }).map_err(|e| invalid("sasl", e.to_string()))?;
        Ok(SaslServer { config, mechanisms: sasl.mechanisms.clone() })
    }

    /// Starts an exchange with a mechanism from [`SaslServer::mechanisms`].
    pub fn start(&self, mechanism: &str) -> Result<Exchange, String> {
        let name = Mechname::parse(mechanism.as_bytes()).map_err(|e| e.to_string())?;
        let session = SASLServer::<Outcome>::new(self.config.clone()).start_suggested(name).map_err(|e| e.to_string())?;
        Ok(Exchange { session, mechanism: mechanism.to_string() })
    }
}

/// One authentication in progress on one connection.
pub struct Exchange {
    session: rsasl::prelude::Session<Outcome>,
    pub mechanism: String,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange").field("mechanism", &self.mechanism).finish()
    }
}

/// Where an exchange stands after the client's latest message.
#[derive(Debug)]
pub enum Step {
    /// Send these bytes and wait for the client's next message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send the bytes (SCRAM's server-final message).
    Done {
        user: String,
        reply: Vec<u8>,
    },
    Failed(Failure),
}

impl Exchange {
    /// Feeds the client's message. Checking a PLAIN password derives a key (PBKDF2): run this off
    /// the shard's thread.
    pub fn step(&mut self, input: &[u8]) -> Step {
        let mut out = Vec::new();
        match self.session.step(Some(input), &mut out) {
            Ok(State::Running) => Step::Continue(out),
            Ok(State::Finished(_)) => match self.session.validation() {
                Some(Ok(user)) => Step::Done { user, reply: out },
                Some(Err(failure)) => Step::Failed(failure),
                // SCRAM: a wrong proof or unknown user ends the exchange without a validation.
                None => Step::Failed(Failure::InvalidCredentials),
            },
            Err(SessionError::ValidationError(_)) => Step::Failed(Failure::InvalidCredentials),
            Err(e) => {
                tracing::debug!(mechanism = %self.mechanism, error = %e, "SASL exchange failed");
                Step::Failed(Failure::Malformed)
            }
        }
    }
}

/// Answers the mechanisms' questions from the credentials file.
struct Lookup {
    credentials: Watched<Credentials>,
}

impl SessionCallback for Lookup {
    fn callback(&self, session_data: &SessionData, context: &Context<'_>, request: &mut Request<'_>) -> Result<(), SessionError> {
        if !request.is::<ScramStoredPassword<'_>>() {
            return Ok(());
        }
        let (Some(user), Some(hash)) = (context.get_ref::<AuthId>(), ScramHash::of_mechanism(session_data.mechanism().mechanism.as_str()))
        else {
            return Ok(());
        };
        let credentials = self.credentials.get();
        // Left unsatisfied for an unknown user: the mechanism then fails the exchange without
        // telling the client whether the user exists.
        if let Some(credential) = credentials.users.get(user).and_then(|u| u.scram(hash)) {
            request.satisfy::<ScramStoredPassword<'_>>(&ScramStoredPassword::new(
                credential.iterations,
                &credential.salt,
                &credential.stored_key,
                &credential.server_key,
            ))?;
        }
        Ok(())
    }

    fn validate(&self, session_data: &SessionData, context: &Context<'_>, validate: &mut Validate<'_>) -> Result<(), ValidationError> {
        let user = context.get_ref::<AuthId>().unwrap_or_default().to_string();
        let authzid = context.get_ref::<AuthzId>().filter(|a| !a.is_empty());
        let outcome = if authzid.is_some_and(|a| a != user) {
            Err(Failure::AuthorizationId)
        } else if session_data.mechanism().mechanism.as_str() == "PLAIN" {
            // SCRAM proved the password already; PLAIN's is checked against the stored keys.
            let password = context.get_ref::<Password>().unwrap_or_default();
            match self.credentials.get().users.get(&user) {
                Some(u) if u.password_matches(password) => Ok(user),
                _ => Err(Failure::InvalidCredentials),
            }
        } else {
            Ok(user)
        };
        validate.finalize::<Outcome>(outcome);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use rsasl::prelude::SASLClient;

    use super::*;
    use crate::security::credentials::ScramCredential;

    fn server(dir: &std::path::Path) -> SaslServer {
        let c256 = ScramCredential::new(ScramHash::Sha256, b"alice-secret", 4096).unwrap();
        let c512 = ScramCredential::new(ScramHash::Sha512, b"alice-secret", 4096).unwrap();
        let path = dir.join("users.toml");
        std::fs::write(
            &path,
            format!("[users.alice]\nSCRAM-SHA-256 = \"{}\"\nSCRAM-SHA-512 = \"{}\"\n", c256.to_kafka_string(), c512.to_kafka_string()),
        )
        .unwrap();
        let config = crate::config::SaslConfig { credentials_file: Some(path), ..Default::default() };
        SaslServer::new(&config).unwrap()
    }

    /// Runs a whole exchange against rsasl's own client.
    fn authenticate(server: &SaslServer, mechanism: &str, user: &str, password: &str) -> Step {
        let client_config = SASLConfig::with_credentials(None, user.to_string(), password.to_string()).unwrap();
        let name = Mechname::parse(mechanism.as_bytes()).unwrap();
        let mut client = SASLClient::new(client_config).start_suggested(&[name]).unwrap();
        let mut exchange = server.start(mechanism).unwrap();
        let mut to_server = Cursor::new(Vec::new());
        client.step(None, &mut to_server).unwrap();
        loop {
            match exchange.step(to_server.get_ref()) {
                Step::Continue(reply) => {
                    to_server = Cursor::new(Vec::new());
                    client.step(Some(&reply), &mut to_server).unwrap();
                }
                done => return done,
            }
        }
    }

    #[test]
    fn every_mechanism_accepts_the_password_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(dir.path());
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            match authenticate(&server, mechanism, "alice", "alice-secret") {
                Step::Done { user, .. } => assert_eq!(user, "alice", "{mechanism}"),
                other => panic!("{mechanism}: {other:?}"),
            }
            for (user, password) in [("alice", "wrong"), ("mallory", "alice-secret")] {
                match authenticate(&server, mechanism, user, password) {
                    Step::Failed(Failure::InvalidCredentials) => {}
                    other => panic!("{mechanism} {user}/{password}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn garbage_fails_the_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(dir.path());
        for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
            let mut exchange = server.start(mechanism).unwrap();
            assert!(matches!(exchange.step(b"\xff\x00"), Step::Failed(_)), "{mechanism}");
        }
    }
}
