//! The security parts of the config tree: listeners' protocols, `[tls]` and `[sasl]`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{invalid, parse_host_port, Config, ConfigError};

/// How a listener's clients connect, as Kafka names it (`security.protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum SecurityProtocol {
    #[default]
    #[serde(rename = "PLAINTEXT")]
    Plaintext,
    #[serde(rename = "SSL")]
    Ssl,
    #[serde(rename = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[serde(rename = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// Whether a TLS listener asks for client certificates (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    #[default]
    None,
    /// Asked for; a client without one is still served.
    Requested,
    /// A client without a certificate signed by `tls.ca_file` is refused.
    Required,
}

/// One `kafka.listeners` entry: a listener besides `kafka.listen`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The listener's name, unique on the node; defaults to its protocol's name.
    #[serde(default)]
    pub name: String,
    pub protocol: SecurityProtocol,
    pub listen: SocketAddr,
    /// `host:port` clients of this listener are told to connect to; empty = `listen`.
    #[serde(default)]
    pub advertised: String,
    /// TLS listeners only.
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// `[tls]`: the certificate every TLS listener presents, and the CA client certificates are
/// checked against.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM: the certificate chain, the node's own first.
    pub cert_file: Option<PathBuf>,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// PEM: the CAs a client certificate must chain to (listeners with `client_auth`).
    pub ca_file: Option<PathBuf>,
    /// Hand a Kafka listener's connection to kernel TLS (kTLS) after its handshake, where the
    /// kernel offers it for the cipher suite agreed: fetches then keep sendfile(2).
    pub ktls: bool,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig { cert_file: None, key_file: None, ca_file: None, ktls: true }
    }
}

/// SASL mechanisms corral serves.
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// `[sasl]`: authentication on SASL_PLAINTEXT and SASL_SSL listeners.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SaslConfig {
    /// Offered in SaslHandshake, in this order (Kafka's `sasl.enabled.mechanisms`).
    pub mechanisms: Vec<String>,
    /// The users and their SCRAM credentials (`corral sasl-credential` makes the entries).
    /// Read again when it changes.
    pub credentials_file: Option<PathBuf>,
    /// A client must authenticate again within this, or its connection is closed (KIP-368,
    /// Kafka's `connections.max.reauth.ms`); 0: never.
    pub connections_max_reauth_ms: u64,
    /// A failed authentication is answered after this, then the connection is closed (Kafka's
    /// `connection.failed.authentication.delay.ms`): slows down password guessing.
    pub failed_authentication_delay_ms: u64,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: SASL_MECHANISMS.iter().map(|m| m.to_string()).collect(),
            credentials_file: None,
            connections_max_reauth_ms: 0,
            failed_authentication_delay_ms: 100,
        }
    }
}

/// How corral connects as a client to a storage tier (`[upstream.security]`) or a group service
/// (`[sidecar.security]`): Kafka's client `security.protocol`, `ssl.*` and `sasl.*` settings.
/// corral authenticates as itself; its clients' identities are not passed on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientSecurity {
    pub protocol: SecurityProtocol,
    /// PEM: the CAs the brokers' certificates must chain to (SSL, SASL_SSL). A broker's
    /// certificate must also name the host corral dials.
    pub ca_file: Option<PathBuf>,
    /// PEM: a certificate (and `key_file`, its key) for brokers that require client certificates.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_PLAINTEXT, SASL_SSL).
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    /// A file holding the password (a mounted Secret); whitespace around it is ignored. Read
    /// again for each new connection when it changes.
    pub sasl_password_file: Option<PathBuf>,
}

impl ClientSecurity {
    /// `key`: where the table is (`upstream.security`), named by every error.
    pub(crate) fn validate(&self, key: &'static str) -> Result<(), ConfigError> {
        let tls = self.protocol.uses_tls();
        if tls && self.ca_file.is_none() {
            return Err(invalid(key, format!("ca_file: {} needs the CA that signs the brokers' certificates", self.protocol.name())));
        }
        if !tls && (self.ca_file.is_some() || self.cert_file.is_some()) {
            return Err(invalid(key, format!("ca_file, cert_file: set, but protocol {} uses no TLS", self.protocol.name())));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(key, "cert_file and key_file go together"));
        }
        let sasl = [self.sasl_mechanism.is_some(), self.sasl_username.is_some(), self.sasl_password_file.is_some()];
        if self.protocol.uses_sasl() {
            let mechanism = self.sasl_mechanism.as_deref().unwrap_or_default();
            if !SASL_MECHANISMS.contains(&mechanism) {
                return Err(invalid(key, format!("sasl_mechanism: {mechanism:?}: choose from {}", SASL_MECHANISMS.join(", "))));
            }
            if sasl.contains(&false) {
                return Err(invalid(key, "sasl_mechanism, sasl_username and sasl_password_file are all required by a SASL protocol"));
            }
        } else if sasl.contains(&true) {
            return Err(invalid(key, format!("sasl_*: set, but protocol {} uses no SASL", self.protocol.name())));
        }
        Ok(())
    }
}

/// Validates the listeners (`kafka.listen` and `kafka.listeners`), `[tls]`, `[sasl]` and each
/// node's listener addresses.
pub(crate) fn validate(config: &Config) -> Result<(), ConfigError> {
    let listeners = config.listeners();
    let mut names = std::collections::BTreeSet::new();
    for (i, l) in listeners.iter().enumerate() {
        if !names.insert(l.name.as_str()) {
            return Err(invalid("kafka.listeners", format!("listener name {} is used twice", l.name)));
        }
        if l.name.is_empty() || !l.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(invalid("kafka.listeners", format!("listener name {:?}: letters, digits, _ and - only", l.name)));
        }
        if listeners[..i].iter().any(|o| o.listen == l.listen && l.listen.port() != 0) {
            return Err(invalid("kafka.listeners", format!("{} is bound by two listeners", l.listen)));
        }
        if l.listen == config.admin.listen && l.listen.port() != 0 {
            return Err(invalid("admin.listen", format!("must differ from listener {}", l.name)));
        }
        let key = if i == 0 { "kafka.client_auth" } else { "kafka.listeners" };
        if !l.advertised.is_empty() {
            parse_host_port(&l.advertised).map_err(|reason| invalid("kafka.listeners", format!("{}: advertised: {reason}", l.name)))?;
        }
        if l.client_auth != ClientAuth::None && !l.protocol.uses_tls() {
            return Err(invalid(key, format!("{}: client_auth needs an SSL or SASL_SSL listener", l.name)));
        }
        if l.client_auth != ClientAuth::None && config.tls.ca_file.is_none() {
            return Err(invalid("tls.ca_file", format!("listener {} checks client certificates: name the CA that signs them", l.name)));
        }
    }
    let raft_tls = config.cluster.tls && config.cluster.is_multi_node();
    if config.admin.client_auth != ClientAuth::None && !config.admin.tls {
        return Err(invalid("admin.client_auth", "needs admin.tls"));
    }
    let user = if listeners.iter().any(|l| l.protocol.uses_tls()) {
        Some("a TLS listener (SSL, SASL_SSL)")
    } else if raft_tls {
        Some("cluster.tls")
    } else if config.admin.tls {
        Some("admin.tls")
    } else {
        None
    };
    if let Some(user) = user {
        if config.tls.cert_file.is_none() {
            return Err(invalid("tls.cert_file", format!("{user} needs a certificate")));
        }
        if config.tls.key_file.is_none() {
            return Err(invalid("tls.key_file", format!("{user} needs a private key")));
        }
    }
    let checks_peers = if raft_tls {
        Some("cluster.tls checks the other nodes' certificates")
    } else if config.admin.tls && config.admin.client_auth != ClientAuth::None {
        Some("admin.client_auth checks client certificates")
    } else if config.admin.tls && config.cluster.nodes.iter().any(|n| n.admin.is_some() && n.id != config.node.id) {
        Some("admin.tls: nodes check each other's admin certificates")
    } else {
        None
    };
    if let (Some(why), None) = (checks_peers, &config.tls.ca_file) {
        return Err(invalid("tls.ca_file", format!("{why}: name the CA that signs them")));
    }
    let s = &config.sasl;
    for m in &s.mechanisms {
        if !SASL_MECHANISMS.contains(&m.as_str()) {
            return Err(invalid("sasl.mechanisms", format!("{m} is not served; choose from {}", SASL_MECHANISMS.join(", "))));
        }
    }
    if listeners.iter().any(|l| l.protocol.uses_sasl()) {
        if s.mechanisms.is_empty() {
            return Err(invalid("sasl.mechanisms", "a SASL listener needs at least one mechanism"));
        }
        if s.credentials_file.is_none() {
            return Err(invalid("sasl.credentials_file", "a SASL listener needs the users' credentials"));
        }
    }
    if s.failed_authentication_delay_ms > 60_000 {
        return Err(invalid("sasl.failed_authentication_delay_ms", "must be at most 60000"));
    }
    if config.cluster.is_multi_node() {
        for node in &config.cluster.nodes {
            for l in &listeners[1..] {
                let address = node
                    .listeners
                    .get(&l.name)
                    .ok_or_else(|| invalid("cluster.nodes", format!("node {}: listeners: no address for listener {}", node.id, l.name)))?;
                parse_host_port(address)
                    .map_err(|reason| invalid("cluster.nodes", format!("node {}: listeners.{}: {reason}", node.id, l.name)))?;
            }
        }
    }
    Ok(())
}
