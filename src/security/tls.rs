//! TLS on the Kafka listeners (rustls): the node's certificate, read again when its files change,
//! and the client-certificate check of each listener.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use super::config::{ClientAuth, TlsConfig};
use super::watched::{LoadError, Watched};
use crate::config::{invalid, ConfigError};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the TLS config of a listener. The certificate is shared by every listener of the node
/// (one [`CertificateFiles`]); client certificates are checked per listener.
pub(crate) fn server_config(
    certificate: &Arc<CertificateFiles>,
    tls: &TlsConfig,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(|e| invalid("tls", e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let path = tls.ca_file.as_deref().ok_or_else(|| invalid("tls.ca_file", "is required by client_auth"))?;
            let mut roots = RootCertStore::empty();
            for cert in read_certificates(path).map_err(|reason| invalid("tls.ca_file", reason))? {
                roots.add(cert).map_err(|e| invalid("tls.ca_file", format!("{}: {e}", path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match client_auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| invalid("tls.ca_file", e.to_string()))?)
        }
    };
    Ok(Arc::new(builder.with_cert_resolver(certificate.clone())))
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
pub(crate) struct CertificateFiles(Watched<Arc<CertifiedKey>>);

impl CertificateFiles {
    pub(crate) fn load(tls: &TlsConfig) -> Result<Arc<CertificateFiles>, ConfigError> {
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
