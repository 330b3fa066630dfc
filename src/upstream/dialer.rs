//! Opening a connection to an upstream broker or a group service's node: TCP, then TLS and SASL
//! as `[upstream.security]` or `[sidecar.security]` say, before the connection carries any
//! request.
//!
//! SASL runs as a Kafka client runs it: SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate carries the mechanism's messages (rsasl's client makes and checks them)
//! until the exchange is done. When the broker says how long the session lasts (KIP-368), the
//! connection reports that, and the pool stops handing the connection out before it ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request, StrBytes};
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLClient, SASLConfig, State};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::frame::ReadHalf;
use super::UpstreamError;
use crate::config::{invalid, ConfigError};
use crate::config::{ClientSecurity, TlsConfig};
use crate::security::watched::{LoadError, Watched};

const SASL_HANDSHAKE_VERSION: i16 = 1;
/// v1 is the first to carry the session lifetime; flexible v2 adds nothing corral reads.
const SASL_AUTHENTICATE_VERSION: i16 = 1;
/// The largest SASL response frame read (a SCRAM server message is well under 1 KiB).
const MAX_SASL_FRAME: usize = 64 << 10;
/// A connection is no longer handed out this long before the broker ends its session.
const SESSION_MARGIN: Duration = Duration::from_secs(5);

pub type WriteHalf = Box<dyn AsyncWrite + Unpin>;

/// A connection ready for requests.
pub struct Dialed {
    pub read: ReadHalf,
    pub write: WriteHalf,
    /// From when on the connection should take no new request: its SASL session ends soon.
    pub retire_at: Option<Instant>,
}

impl std::fmt::Debug for Dialed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialed").field("retire_at", &self.retire_at).finish_non_exhaustive()
    }
}

/// How this node connects to one upstream or group service.
pub struct Dialer {
    connect_timeout: Duration,
    tls: Option<TlsConnector>,
    sasl: Option<SaslLogin>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| (&s.mechanism, &s.username)))
            .finish()
    }
}

struct SaslLogin {
    mechanism: String,
    username: String,
    password: Watched<String>,
}

impl Dialer {
    /// Plain TCP.
    pub fn plaintext(connect_timeout: Duration) -> Arc<Dialer> {
        Arc::new(Dialer { connect_timeout, tls: None, sasl: None })
    }

    /// Reads the CA, certificate and password files now: a failure names `key`.
    pub fn new(security: &ClientSecurity, key: &'static str, connect_timeout: Duration) -> Result<Arc<Dialer>, ConfigError> {
        let named = |e: ConfigError| match e {
            ConfigError::Invalid { reason, .. } => invalid(key, reason),
            other => other,
        };
        let tls = match security.protocol.uses_tls() {
            false => None,
            true => {
                let files = TlsConfig {
                    cert_file: security.cert_file.clone(),
                    key_file: security.key_file.clone(),
                    ca_file: security.ca_file.clone(),
                    ..TlsConfig::default()
                };
                let certificate = match files.cert_file {
                    Some(_) => Some(crate::security::tls::CertificateFiles::load(&files).map_err(named)?),
                    None => None,
                };
                Some(TlsConnector::from(crate::security::tls::client_config(&files, certificate.as_ref()).map_err(named)?))
            }
        };
        let sasl = match (security.protocol.uses_sasl(), &security.sasl_password_file) {
            (true, Some(path)) => Some(SaslLogin {
                mechanism: security.sasl_mechanism.clone().unwrap_or_default(),
                username: security.sasl_username.clone().unwrap_or_default(),
                password: Watched::load("SASL password", vec![path.clone()], read_password).map_err(|(_, reason)| invalid(key, reason))?,
            }),
            _ => None,
        };
        Ok(Arc::new(Dialer { connect_timeout, tls, sasl }))
    }

    /// Connects to `address`, with TLS and SASL as configured, within the connect timeout.
    pub async fn dial(&self, address: &str) -> Result<Dialed, UpstreamError> {
        let unreachable = |reason: String| UpstreamError::Unreachable(address.to_string(), reason);
        let timeout_ms = self.connect_timeout.as_millis();
        let tcp = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(address)).await {
            Err(_) => return Err(unreachable(format!("no connection within {timeout_ms} ms"))),
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Ok(Ok(stream)) => stream,
        };
        let _ = tcp.set_nodelay(true);
        let secured = tokio::time::timeout(self.connect_timeout, self.secure(tcp, address));
        secured.await.map_err(|_| unreachable(format!("TLS or SASL not done within {timeout_ms} ms")))?
    }

    async fn secure(&self, tcp: TcpStream, address: &str) -> Result<Dialed, UpstreamError> {
        let Some(tls) = &self.tls else {
            let mut tcp = tcp;
            let retire_at = self.login(&mut tcp, address).await?;
            // Plain TCP splits without a lock between the halves.
            let (read, write) = tcp.into_split();
            return Ok(Dialed { read: ReadHalf::Tcp(read), write: Box::new(write), retire_at });
        };
        let (host, _) = crate::config::parse_host_port(address).map_err(|e| UpstreamError::Unreachable(address.to_string(), e))?;
        let name = rustls::pki_types::ServerName::try_from(host)
            .map_err(|e| UpstreamError::Unreachable(address.to_string(), format!("not a TLS server name: {e}")))?;
        let mut stream = tls.connect(name, tcp).await.map_err(|e| UpstreamError::Refused(address.to_string(), format!("TLS: {e}")))?;
        let retire_at = self.login(&mut stream, address).await?;
        let (read, write) = tokio::io::split(stream);
        Ok(Dialed { read: ReadHalf::Stream(Box::new(read)), write: Box::new(write), retire_at })
    }

    /// Authenticates with SASL when configured; returns when to retire the connection.
    async fn login<S: AsyncRead + AsyncWrite + Unpin>(&self, stream: &mut S, address: &str) -> Result<Option<Instant>, UpstreamError> {
        let Some(login) = &self.sasl else { return Ok(None) };
        let refused = |reason: String| UpstreamError::Refused(address.to_string(), reason);
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(login.mechanism.clone()));
        let answer = exchange(stream, address, SASL_HANDSHAKE_VERSION, &handshake, 0).await?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(refused(format!("SASL mechanism {} is not enabled there (it offers {})", login.mechanism, offered.join(", "))));
        }
        let password = login.password.get();
        let config =
            SASLConfig::with_credentials(None, login.username.clone(), password.to_string()).map_err(|e| refused(e.to_string()))?;
        let name = Mechname::parse(login.mechanism.as_bytes()).map_err(|e| refused(e.to_string()))?;
        let mut session = SASLClient::new(config).start_suggested(&[name]).map_err(|e| refused(e.to_string()))?;
        let mut input: Option<Bytes> = None;
        let mut lifetime_ms = 0;
        for correlation_id in 1.. {
            let mut message = Vec::new();
            let state = session.step(input.as_deref(), &mut message).map_err(|e| refused(format!("SASL {}: {e}", login.mechanism)))?;
            let finished = matches!(state, State::Finished(_));
            if finished && input.is_some() && message.is_empty() {
                // SCRAM: the server's final message, checked by the step above.
                break;
            }
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let answer = exchange(stream, address, SASL_AUTHENTICATE_VERSION, &request, correlation_id).await?;
            if answer.error_code != 0 {
                let why = answer.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
                return Err(refused(format!("SASL {} as {}: error {}: {why}", login.mechanism, login.username, answer.error_code)));
            }
            lifetime_ms = answer.session_lifetime_ms;
            if finished {
                break;
            }
            input = Some(answer.auth_bytes);
        }
        Ok((lifetime_ms > 0).then(|| {
            let lifetime = Duration::from_millis(lifetime_ms as u64);
            Instant::now() + lifetime.saturating_sub(SESSION_MARGIN.min(lifetime / 2))
        }))
    }
}

/// Reads the CA, certificate and password files of `[upstream.security]` and
/// `[sidecar.security]`, as a start would: what `corral check-config` runs.
pub fn check_files(config: &crate::config::Config) -> Result<(), ConfigError> {
    let timeout = Duration::from_millis(config.upstream.connect_timeout_ms);
    if config.storage.backend == crate::config::StorageBackend::Upstream {
        Dialer::new(&config.upstream.security, "upstream.security", timeout)?;
    }
    if config.role == crate::config::Role::Sidecar {
        Dialer::new(&config.sidecar.security, "sidecar.security", timeout)?;
    }
    Ok(())
}

/// One request and its response on a connection that carries nothing else yet.
async fn exchange<S, R>(stream: &mut S, address: &str, version: i16, request: &R, correlation_id: i32) -> Result<R::Response, UpstreamError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: Request,
{
    let lost = |e: std::io::Error| UpstreamError::Disconnected(format!("{address}: {e}"));
    let frame = super::request_frame::encode(request, version, correlation_id, None)?;
    stream.write_all(&frame).await.map_err(lost)?;
    stream.flush().await.map_err(lost)?;
    let length = stream.read_u32().await.map_err(lost)? as usize;
    if length > MAX_SASL_FRAME {
        return Err(UpstreamError::Protocol(format!("{address}: a {length}-byte answer to API {}", R::KEY)));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.map_err(lost)?;
    let mut body = Bytes::from(body);
    let malformed =
        |e: anyhow::Error| UpstreamError::Protocol(format!("{address}: cannot decode the answer to API {} v{version}: {e}", R::KEY));
    let header = kafka_protocol::messages::ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(malformed)?;
    if header.correlation_id != correlation_id {
        return Err(UpstreamError::Protocol(format!("{address}: answer out of order")));
    }
    let response = R::Response::decode(&mut body, version).map_err(malformed)?;
    if body.has_remaining() {
        return Err(UpstreamError::Protocol(format!("{address}: {} bytes after the answer to API {}", body.remaining(), R::KEY)));
    }
    Ok(response)
}

fn read_password(paths: &[PathBuf]) -> Result<String, LoadError> {
    let path = &paths[0];
    let text = std::fs::read_to_string(path)
        .map_err(|e| ("sasl_password_file", format!("sasl_password_file: cannot read {}: {e}", path.display())))?;
    let password = text.trim();
    if password.is_empty() {
        return Err(("sasl_password_file", format!("sasl_password_file: {} is empty", path.display())));
    }
    Ok(password.to_string())
}
