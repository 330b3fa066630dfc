//! TLS with rustls: the node's certificate, read again when its files change; the server side of
//! the Kafka and admin listeners (with each one's client-certificate check) and of the Raft port;
//! the client side toward other nodes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};

use super::watched::{LoadError, Watched};
use crate::config::{invalid, ConfigError};
use crate::config::{ClientAuth, TlsConfig};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the TLS config of a listener. The certificate is shared by every listener of the node
/// (one [`CertificateFiles`]); client certificates are checked per listener. `to_kernel` lets
/// a session's keys be taken out of rustls, to hand it to the kernel.
pub(crate) fn server_config(
    certificate: &Arc<CertificateFiles>,
    tls: &TlsConfig,
    client_auth: ClientAuth,
    to_kernel: bool,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(|e| invalid("tls", e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let verifier = WebPkiClientVerifier::builder_with_provider(trusted_roots(tls)?, provider());
            let verifier = match client_auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| invalid("tls.ca_file", e.to_string()))?)
        }
    };
    let mut config = builder.with_cert_resolver(certificate.clone());
    config.enable_secret_extraction = to_kernel;
    Ok(Arc::new(config))
}

/// A client's TLS config: the server's certificate must chain to `tls.ca_file` and name the host
/// dialed; `certificate`, if any, is presented as the client's.
pub fn client_config(tls: &TlsConfig, certificate: Option<&Arc<CertificateFiles>>) -> Result<Arc<ClientConfig>, ConfigError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("tls", e.to_string()))?
        .with_root_certificates(trusted_roots(tls)?);
    Ok(Arc::new(match certificate {
        Some(certificate) => builder.with_client_cert_resolver(certificate.clone()),
        None => builder.with_no_client_auth(),
    }))
}

/// The CAs of `tls.ca_file`.
fn trusted_roots(tls: &TlsConfig) -> Result<Arc<RootCertStore>, ConfigError> {
    let path = tls.ca_file.as_deref().ok_or_else(|| invalid("tls.ca_file", "is required to check the other side's certificate"))?;
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path).map_err(|reason| invalid("tls.ca_file", reason))? {
        roots.add(cert).map_err(|e| invalid("tls.ca_file", format!("{}: {e}", path.display())))?;
    }
    Ok(Arc::new(roots))
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// The node's certificate and key, from `tls.cert_file` and `tls.key_file`, read again when
/// either changes: connections made from then on present the new certificate, open ones keep
/// theirs.
#[derive(Debug)]
pub struct CertificateFiles(Watched<Arc<CertifiedKey>>);

impl CertificateFiles {
    pub fn load(tls: &TlsConfig) -> Result<Arc<CertificateFiles>, ConfigError> {
        let cert = tls.cert_file.clone().ok_or_else(|| invalid("tls.cert_file", "is required by a TLS listener"))?;
        let key = tls.key_file.clone().ok_or_else(|| invalid("tls.key_file", "is required by a TLS listener"))?;
        let watched = Watched::load("TLS certificate", vec![cert, key], load_key).map_err(|(key, reason)| invalid(key, reason))?;
        Ok(Arc::new(CertificateFiles(watched)))
    }
}

impl ResolvesServerCert for CertificateFiles {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.get()))
    }
}

impl ResolvesClientCert for CertificateFiles {
    fn resolve(&self, _root_hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.get()))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn load_key(paths: &[PathBuf]) -> Result<Arc<CertifiedKey>, LoadError> {
    let (cert_path, key_path) = (&paths[0], &paths[1]);
    let chain = read_certificates(cert_path).map_err(|reason| ("tls.cert_file", reason))?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| ("tls.key_file", format!("{}: {e}", key_path.display())))?;
    let key = CertifiedKey::from_der(chain, key, &provider())
        .map_err(|e| ("tls.key_file", format!("{} does not fit {}: {e}", key_path.display(), cert_path.display())))?;
    Ok(Arc::new(key))
}

/// The principal of a verified client certificate: `User:` and its subject's distinguished name
/// as RFC 4514 writes it, most specific first (`CN=app1,OU=payments,O=example`), which is what
/// Kafka's default principal builder gives.
pub(crate) fn client_principal(connection: &rustls::ServerConnection) -> Option<super::Principal> {
    use x509_cert::der::Decode;
    let leaf = connection.peer_certificates()?.first()?;
    let certificate = x509_cert::Certificate::from_der(leaf.as_ref()).ok()?;
    Some(super::Principal::user(certificate.tbs_certificate().subject().to_string()))
}

/// Both ends of TLS between corral's nodes (the Raft port, the admin listeners): accepting a
/// node or client, with the given client-certificate check, and dialing another node (when
/// `tls.ca_file` says whom to trust).
#[derive(Clone)]
pub struct NodeTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub connector: Option<tokio_rustls::TlsConnector>,
}

impl NodeTls {
    pub(crate) fn new(certificate: &Arc<CertificateFiles>, tls: &TlsConfig, client_auth: ClientAuth) -> Result<NodeTls, ConfigError> {
        Ok(NodeTls {
            acceptor: tokio_rustls::TlsAcceptor::from(server_config(certificate, tls, client_auth, false)?),
            connector: match tls.ca_file {
                Some(_) => Some(tokio_rustls::TlsConnector::from(client_config(tls, Some(certificate))?)),
                None => None,
            },
        })
    }
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeTls")
    }
}
