//! TLS and SASL for the benchmark's client connections: what `--tls-ca-file` and `--sasl-*`
//! turn on, and the stream type [`KafkaConn`](crate::kafka::KafkaConn) reads and writes.
//!
//! [`BenchStream`] is an enum, not a boxed trait object: a plain connection is a `TcpStream`
//! behind one `match` per poll, with no extra copy, buffer or lock, so the plaintext numbers are
//! those of the code before TLS existed here. A TLS connection is rustls in userspace (ring
//! provider, as corral's server): every byte is copied through rustls's buffers and encrypted or
//! decrypted on this thread.
//!
//! SASL runs as a Kafka client runs it, right after TCP (and TLS): SaslHandshake v1 names the
//! mechanism, then SaslAuthenticate v1 carries the messages that rsasl's client makes and
//! checks (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). ApiVersions follows authentication.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLClient, SASLConfig, State};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::kafka::{error_name, KafkaConn};
use crate::wire::{self, SocketOpts};

/// SaslHandshake v1: the mechanism's messages then go in SaslAuthenticate requests (v0 would
/// send them as bare frames).
const SASL_HANDSHAKE_VERSION: i16 = 1;
const SASL_AUTHENTICATE_VERSION: i16 = 1;

/// How the benchmark's connections are secured; the default is plain TCP without SASL.
#[derive(Default, Clone)]
pub(crate) struct Security {
    tls: Option<TlsClient>,
    sasl: Option<SaslLogin>,
}

#[derive(Clone)]
struct TlsClient {
    connector: TlsConnector,
    /// The name the server's certificate must carry; `None`: the address connected to.
    server_name: Option<ServerName<'static>>,
}

#[derive(Clone)]
struct SaslLogin {
    mechanism: String,
    username: String,
    password: String,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| (&s.mechanism, &s.username)))
            .finish()
    }
}

/// What the command line asks for.
#[derive(Debug, Default, Clone)]
pub(crate) struct SecurityOpts<'a> {
    /// Turns TLS on and trusts the CAs in this PEM file.
    pub(crate) tls_ca_file: Option<&'a Path>,
    /// The name to check the server's certificate against (default: the IP connected to).
    pub(crate) tls_server_name: Option<&'a str>,
    /// Let rustls resume TLS sessions (its default). Off, every connection makes a full
    /// handshake, as a client that starts afresh does.
    pub(crate) tls_resumption: bool,
    pub(crate) sasl_mechanism: Option<&'a str>,
    pub(crate) sasl_username: Option<&'a str>,
    pub(crate) sasl_password: Option<&'a str>,
}

impl Security {
    pub(crate) fn new(opts: &SecurityOpts<'_>) -> Result<Security> {
        let tls = match opts.tls_ca_file {
            None => None,
            Some(ca_file) => {
                let server_name = opts
                    .tls_server_name
                    .map(|name| ServerName::try_from(name.to_string()).map_err(|e| anyhow!("--tls-server-name {name}: {e}")))
                    .transpose()?;
                Some(TlsClient { connector: TlsConnector::from(client_config(ca_file, opts.tls_resumption)?), server_name })
            }
        };
        let sasl = match opts.sasl_mechanism {
            None => None,
            Some(mechanism) => {
                let (Some(username), Some(password)) = (opts.sasl_username, opts.sasl_password) else {
                    bail!("--sasl-mechanism needs --sasl-username and --sasl-password");
                };
                Mechname::parse(mechanism.as_bytes()).map_err(|e| anyhow!("--sasl-mechanism {mechanism}: {e}"))?;
                Some(SaslLogin { mechanism: mechanism.to_string(), username: username.to_string(), password: password.to_string() })
            }
        };
        Ok(Security { tls, sasl })
    }

    /// Kafka's name for the listener protocol this speaks.
    pub(crate) fn protocol(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }

    /// What the connections do, for the scenarios' headers: "SASL_SSL (SCRAM-SHA-512)".
    pub(crate) fn describe(&self) -> String {
        match &self.sasl {
            Some(login) => format!("{} ({})", self.protocol(), login.mechanism),
            None => self.protocol().to_string(),
        }
    }

    /// TCP with the benchmark's socket options, then the TLS handshake when TLS is on.
    pub(crate) async fn connect(&self, addr: SocketAddr, opts: SocketOpts) -> Result<BenchStream> {
        let tcp = wire::connect(addr, opts).await.with_context(|| format!("cannot connect to {addr}"))?;
        let Some(tls) = &self.tls else { return Ok(BenchStream::Plain(tcp)) };
        let name = tls.server_name.clone().unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let stream = tls.connector.connect(name, tcp).await.with_context(|| format!("TLS handshake with {addr}"))?;
        Ok(BenchStream::Tls(Box::new(stream)))
    }

    /// SASL authentication on a connection just made, when SASL is on.
    pub(crate) async fn login(&self, conn: &mut KafkaConn) -> Result<()> {
        let Some(login) = &self.sasl else { return Ok(()) };
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(login.mechanism.clone()));
        let answer = conn.call_at(SASL_HANDSHAKE_VERSION, &handshake).await.context("SaslHandshake")?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            bail!(
                "SASL mechanism {} refused ({}); the server offers {}",
                login.mechanism,
                error_name(answer.error_code),
                offered.join(", ")
            );
        }
        let config = SASLConfig::with_credentials(None, login.username.clone(), login.password.clone())?;
        let name = Mechname::parse(login.mechanism.as_bytes())?;
        let mut session = SASLClient::new(config).start_suggested(&[name])?;
        let mut input: Option<Bytes> = None;
        loop {
            let mut message = Vec::new();
            let state = session.step(input.as_deref(), &mut message).with_context(|| format!("SASL {}", login.mechanism))?;
            let finished = matches!(state, State::Finished(_));
            if finished && input.is_some() && message.is_empty() {
                // SCRAM: the server's final message was checked by the step above.
                return Ok(());
            }
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let answer = conn.call_at(SASL_AUTHENTICATE_VERSION, &request).await.context("SaslAuthenticate")?;
            if answer.error_code != 0 {
                let why = answer.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
                bail!("SASL {} as {}: {} {why}", login.mechanism, login.username, error_name(answer.error_code));
            }
            if finished {
                return Ok(());
            }
            input = Some(answer.auth_bytes);
        }
    }
}

/// A rustls client config trusting the CAs of `ca_file`, with ring (as corral's server).
fn client_config(ca_file: &Path, resumption: bool) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .with_context(|| format!("reading {}", ca_file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", ca_file.display()))?;
    if certs.is_empty() {
        bail!("{}: no PEM certificate in it", ca_file.display());
    }
    for cert in certs {
        roots.add(cert).with_context(|| format!("{}: not a CA certificate", ca_file.display()))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !resumption {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// A client connection: plain TCP, or TLS over TCP.
#[derive(Debug)]
pub(crate) enum BenchStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl BenchStream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            BenchStream::Plain(s) => s,
            BenchStream::Tls(s) => s.get_ref().0,
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// The socket itself, for scenarios that drive it without this type (plain TCP only).
    pub(crate) fn into_plain(self) -> Result<TcpStream> {
        match self {
            BenchStream::Plain(s) => Ok(s),
            BenchStream::Tls(_) => bail!("this scenario runs on plain TCP only"),
        }
    }
}

impl AsyncRead for BenchStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BenchStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            BenchStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BenchStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BenchStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            BenchStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            // A TcpStream has nothing to flush: no call at all.
            BenchStream::Plain(_) => Poll::Ready(Ok(())),
            BenchStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            BenchStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            BenchStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            BenchStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            BenchStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            BenchStream::Plain(s) => s.is_write_vectored(),
            BenchStream::Tls(s) => s.is_write_vectored(),
        }
    }
}
