//! Who a client is: the security protocol of the listener it reached, TLS, SASL, and the
//! principal a connection acts as.
//!
//! A TLS listener wraps each accepted socket in rustls before the connection reads a frame. A
//! SASL listener then answers only ApiVersions, SaslHandshake and SaslAuthenticate until the
//! client authenticated ([`session::ConnectionSecurity`]); the two SASL APIs are handlers like
//! any other (`api/sasl_handshake.rs`, `api/sasl_authenticate.rs`). Where the kernel offers
//! it, a TLS connection's session is then handed to the kernel ([`kernel_tls`]).

pub mod acl;
pub mod acl_binding;
pub(crate) mod admin_token;
pub mod credentials;
pub(crate) mod kernel_tls;
pub mod quota;
pub mod sasl;
pub mod session;
pub mod tls;
pub(crate) mod watched;

use std::net::SocketAddr;
use std::sync::Arc;

pub use crate::config::SecurityProtocol;

/// Who a connection acts as, as Kafka writes it: `User:alice`, `User:ANONYMOUS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    /// What a client is before, or without, authenticating.
    pub fn anonymous() -> Principal {
        Principal { name: "ANONYMOUS".to_string() }
    }

    pub fn user(name: impl Into<String>) -> Principal {
        Principal { name: name.into() }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

/// Who sent a request and from where: what an ACL is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub principal: Principal,
    /// The client's address; `None` where it is not known.
    pub host: Option<std::net::IpAddr>,
}

/// A Kafka listener as the node runs it.
pub struct Listener {
    /// Its place in [`crate::config::Config::listeners`]; Metadata answers with the brokers'
    /// addresses on the same listener.
    pub index: usize,
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bound: SocketAddr,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    /// Where the kernel takes TLS sessions (`tls.ktls`, and a TLS listener).
    pub(crate) kernel_tls: Option<Arc<kernel_tls::KernelTls>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("name", &self.name).field("protocol", &self.protocol).field("bound", &self.bound).finish()
    }
}

/// The node's listeners once bound, the SASL server if one of them needs it, and TLS for the
/// Raft port and the admin listener where configured.
pub(crate) struct NodeSecurity {
    pub(crate) listeners: Vec<Arc<Listener>>,
    pub(crate) sasl: Option<Arc<sasl::SaslServer>>,
    /// Mutual TLS between nodes on the Raft port (`cluster.tls`).
    pub(crate) raft_tls: Option<tls::NodeTls>,
    /// HTTPS on the admin listener, and toward other nodes' (`admin.tls`).
    pub(crate) admin_tls: Option<tls::NodeTls>,
    /// The bearer token of the admin listener (`admin.bearer_token_file`).
    pub(crate) admin_token: Option<Arc<admin_token::AdminToken>>,
}

/// Reads the certificate, key and credential files the listeners need, as a start would: what
/// `corral check-config` runs after validating the config.
pub fn check_files(config: &crate::config::Config) -> Result<(), crate::config::ConfigError> {
    let unbound: Vec<SocketAddr> = config.listeners().iter().map(|l| l.listen).collect();
    listeners(config, &unbound, None).map(drop)
}

/// Loads what the listeners' security needs (certificates, credentials): a failure names the key.
/// `kernel_tls` is what [`kernel_tls::for_config`] found, given to every TLS listener.
pub(crate) fn listeners(
    config: &crate::config::Config,
    bound: &[SocketAddr],
    kernel_tls: Option<Arc<kernel_tls::KernelTls>>,
) -> Result<NodeSecurity, crate::config::ConfigError> {
    let configs = config.listeners();
    let needs_certificate = configs.iter().any(|l| l.protocol.uses_tls()) || config.cluster.tls || config.admin.tls;
    let certificate = match needs_certificate {
        true => Some(tls::CertificateFiles::load(&config.tls)?),
        false => None,
    };
    let node_tls = |on: bool, client_auth| match (&certificate, on) {
        (Some(certificate), true) => tls::NodeTls::new(certificate, &config.tls, client_auth).map(Some),
        _ => Ok(None),
    };
    let raft_tls = node_tls(config.cluster.tls && config.cluster.is_multi_node(), crate::config::ClientAuth::Required)?;
    let admin_tls = node_tls(config.admin.tls, config.admin.client_auth)?;
    let admin_token = admin_token::for_config(config).map_err(|(key, reason)| crate::config::invalid(key, reason))?;
    let sasl = match configs.iter().any(|l| l.protocol.uses_sasl()) {
        true => Some(Arc::new(sasl::SaslServer::new(&config.sasl)?)),
        false => None,
    };
    let mut listeners = Vec::with_capacity(configs.len());
    for (index, (l, &bound)) in configs.iter().zip(bound).enumerate() {
        let (tls, kernel_tls) = match &certificate {
            Some(certificate) if l.protocol.uses_tls() => {
                let config = tls::server_config(certificate, &config.tls, l.client_auth, kernel_tls.is_some())?;
                (Some(tokio_rustls::TlsAcceptor::from(config)), kernel_tls.clone())
            }
            _ => (None, None),
        };
        listeners.push(Arc::new(Listener { index, name: l.name.clone(), protocol: l.protocol, bound, tls, kernel_tls }));
    }
    Ok(NodeSecurity { listeners, sasl, raft_tls, admin_tls, admin_token })
}
