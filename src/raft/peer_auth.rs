//! Who may talk on the Raft port: only the cluster's own nodes, proven by the cluster secret, by
//! mutual TLS (`cluster.tls`), or by both.
//!
//! With `cluster.tls`, every connection is first a TLS session in which both sides present a
//! certificate that chains to `tls.ca_file`, and the dialer checks that the acceptor's names the
//! host it dialed; the handshake below then runs inside it. Without a secret, that handshake only
//! states the two node ids (magic `CRT1`, no proofs). Either way the acceptor checks that the
//! dialer's certificate names the host of the Raft address of the node it claims to be, so a
//! certificate from the same CA made for a client or another host cannot pose as a node.
//!
//! Every connection starts with a mutual challenge–response before any Raft frame is read. The
//! secret never crosses the wire; each side proves it knows it with an HMAC-SHA256 over both
//! nodes' ids and a fresh random nonce from each side, so a recorded handshake proves nothing on
//! another connection, and the acceptor's proof (made with another label) never serves as the
//! dialer's.
//!
//! ```text
//! dialer   → acceptor:  magic "CRA1" | dialer id u64 | acceptor id u64 | dialer nonce [32]
//! acceptor → dialer:    acceptor nonce [32] | HMAC(secret, "acceptor" | ids | nonces) [32]
//! dialer   → acceptor:  HMAC(secret, "dialer" | ids | nonces) [32]
//! acceptor → dialer:    0 (accepted)
//! ```
//!
//! The acceptor closes the connection, before reading anything else, when the magic is wrong,
//! the dialer's id is not another node of `[cluster] nodes`, the acceptor id is not its own, the
//! proof is wrong, or the handshake takes longer than [`HANDSHAKE_TIMEOUT`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::ParsedCertificate;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::NodeId;
use crate::security::tls::NodeTls;

const MAGIC: &[u8; 4] = b"CRA1";
/// The handshake without a secret, over mutual TLS: ids only.
const MAGIC_TLS_ONLY: &[u8; 4] = b"CRT1";
const NONCE_LEN: usize = 32;
const PROOF_LEN: usize = 32;
const HELLO_LEN: usize = 4 + 8 + 8 + NONCE_LEN;
const ACCEPTED: u8 = 0;
/// How long either side waits for the other's part of the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("not a corral Raft handshake")]
    BadMagic,
    #[error("node {0} is not another node of [cluster] nodes")]
    UnknownNode(NodeId),
    #[error("the certificate of a peer claiming to be node {node} does not name {host}, the host of its Raft address")]
    NotThatNode { node: NodeId, host: String },
    #[error("the dialer meant to reach node {wanted}, this is node {me}")]
    WrongTarget { wanted: NodeId, me: NodeId },
    #[error("the peer's proof is wrong: its cluster secret differs")]
    BadProof,
    #[error("the handshake took longer than {HANDSHAKE_TIMEOUT:?}")]
    Timeout,
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("{0:?} cannot be a TLS server name")]
    ServerName(String),
    #[error("no randomness for a nonce: {0}")]
    Random(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A connection between two nodes once the handshake is done: plain TCP or TLS.
pub trait PeerIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerIo for T {}
pub type PeerStream = Box<dyn PeerIo>;

/// This node's side of the handshake: its id, the secret and the TLS it requires (at least one
/// of them), and the nodes it accepts.
#[derive(Clone)]
pub struct PeerAuth {
    me: NodeId,
    secret: Option<Arc<[u8]>>,
    tls: Option<NodeTls>,
    /// The other nodes, each with the host of its Raft address.
    nodes: Arc<BTreeMap<NodeId, String>>,
}

impl std::fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuth")
            .field("me", &self.me)
            .field("nodes", &self.nodes)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl PeerAuth {
    /// `nodes`: every node of the cluster with the host of its Raft address (this one is never
    /// accepted as a peer). The config's validation makes sure `secret` or `tls` is there.
    pub fn new(me: NodeId, secret: Option<&[u8]>, tls: Option<NodeTls>, nodes: impl IntoIterator<Item = (NodeId, String)>) -> PeerAuth {
        PeerAuth { me, secret: secret.map(Into::into), tls, nodes: Arc::new(nodes.into_iter().filter(|(n, _)| *n != me).collect()) }
    }

    fn magic(&self) -> &'static [u8; 4] {
        match self.secret {
            Some(_) => MAGIC,
            None => MAGIC_TLS_ONLY,
        }
    }

    /// The acceptor's side; returns the authenticated peer's id and the connection to use.
    pub async fn accept(&self, stream: TcpStream) -> Result<(NodeId, PeerStream), AuthError> {
        within_timeout(async {
            let (mut stream, certificate): (PeerStream, _) = match &self.tls {
                Some(tls) => {
                    let stream = tls.acceptor.accept(stream).await.map_err(AuthError::Tls)?;
                    let certificate =
                        stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).map(|c| c.clone().into_owned());
                    (Box::new(stream), certificate)
                }
                None => (Box::new(stream), None),
            };
            let peer = self.accept_inner(&mut stream, certificate).await?;
            Ok((peer, stream))
        })
        .await
    }

    /// `certificate`: the dialer's, under TLS (the acceptor requires one there).
    async fn accept_inner<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        certificate: Option<CertificateDer<'static>>,
    ) -> Result<NodeId, AuthError> {
        let mut hello = [0u8; HELLO_LEN];
        stream.read_exact(&mut hello).await?;
        if &hello[..4] != self.magic() {
            return Err(AuthError::BadMagic);
        }
        let dialer = u64::from_be_bytes(hello[4..12].try_into().expect("8 bytes"));
        let wanted = u64::from_be_bytes(hello[12..20].try_into().expect("8 bytes"));
        let Some(host) = self.nodes.get(&dialer) else {
            return Err(AuthError::UnknownNode(dialer));
        };
        if wanted != self.me {
            return Err(AuthError::WrongTarget { wanted, me: self.me });
        }
        if self.tls.is_some() && !certificate.as_ref().is_some_and(|c| names(c, host)) {
            return Err(AuthError::NotThatNode { node: dialer, host: host.clone() });
        }
        let Some(secret) = &self.secret else {
            // Mutual TLS alone: the certificate was the proof.
            stream.write_all(&[ACCEPTED]).await?;
            stream.flush().await?;
            return Ok(dialer);
        };
        let dialer_nonce: [u8; NONCE_LEN] = hello[20..].try_into().expect("nonce length");
        let my_nonce = nonce()?;
        let transcript = Transcript { dialer, acceptor: self.me, dialer_nonce, acceptor_nonce: my_nonce };
        let mut challenge = [0u8; NONCE_LEN + PROOF_LEN];
        challenge[..NONCE_LEN].copy_from_slice(&my_nonce);
        challenge[NONCE_LEN..].copy_from_slice(&transcript.proof(secret, b"acceptor"));
        stream.write_all(&challenge).await?;
        stream.flush().await?;
        let mut proof = [0u8; PROOF_LEN];
        stream.read_exact(&mut proof).await?;
        transcript.verify(secret, b"dialer", &proof)?;
        stream.write_all(&[ACCEPTED]).await?;
        stream.flush().await?;
        Ok(dialer)
    }

    /// The dialer's side, toward node `target` at `host` (the host of its Raft address, which its
    /// certificate must name under TLS); returns the connection to use.
    pub async fn connect(&self, stream: TcpStream, target: NodeId, host: &str) -> Result<PeerStream, AuthError> {
        within_timeout(async {
            let mut stream: PeerStream = match &self.tls {
                Some(NodeTls { connector: Some(connector), .. }) => {
                    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| AuthError::ServerName(host.into()))?;
                    Box::new(connector.connect(name, stream).await.map_err(AuthError::Tls)?)
                }
                Some(NodeTls { connector: None, .. }) => {
                    return Err(AuthError::Tls(std::io::Error::other("no CA to check the peer against")))
                }
                None => Box::new(stream),
            };
            self.connect_inner(&mut stream, target).await?;
            Ok(stream)
        })
        .await
    }

    async fn connect_inner<S: AsyncRead + AsyncWrite + Unpin>(&self, stream: &mut S, target: NodeId) -> Result<(), AuthError> {
        let my_nonce = nonce()?;
        let mut hello = [0u8; HELLO_LEN];
        hello[..4].copy_from_slice(self.magic());
        hello[4..12].copy_from_slice(&self.me.to_be_bytes());
        hello[12..20].copy_from_slice(&target.to_be_bytes());
        hello[20..].copy_from_slice(&my_nonce);
        stream.write_all(&hello).await?;
        stream.flush().await?;
        let Some(secret) = &self.secret else {
            return read_accepted(stream).await;
        };
        let mut challenge = [0u8; NONCE_LEN + PROOF_LEN];
        stream.read_exact(&mut challenge).await?;
        let acceptor_nonce: [u8; NONCE_LEN] = challenge[..NONCE_LEN].try_into().expect("nonce length");
        let transcript = Transcript { dialer: self.me, acceptor: target, dialer_nonce: my_nonce, acceptor_nonce };
        transcript.verify(secret, b"acceptor", &challenge[NONCE_LEN..])?;
        stream.write_all(&transcript.proof(secret, b"dialer")).await?;
        stream.flush().await?;
        read_accepted(stream).await
    }
}

/// Whether a certificate names `host` (a DNS name or an IP address) among its subject
/// alternative names.
fn names(certificate: &CertificateDer<'_>, host: &str) -> bool {
    let Ok(name) = ServerName::try_from(host) else { return false };
    ParsedCertificate::try_from(certificate).is_ok_and(|parsed| rustls::client::verify_server_name(&parsed, &name).is_ok())
}

async fn read_accepted<S: AsyncRead + Unpin>(stream: &mut S) -> Result<(), AuthError> {
    let mut accepted = [0u8; 1];
    stream.read_exact(&mut accepted).await.map_err(|_| AuthError::BadProof)?;
    match accepted[0] {
        ACCEPTED => Ok(()),
        _ => Err(AuthError::BadProof),
    }
}

/// What both proofs cover.
struct Transcript {
    dialer: NodeId,
    acceptor: NodeId,
    dialer_nonce: [u8; NONCE_LEN],
    acceptor_nonce: [u8; NONCE_LEN],
}

impl Transcript {
    fn mac(&self, secret: &[u8], label: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(MAGIC);
        mac.update(label);
        mac.update(&self.dialer.to_be_bytes());
        mac.update(&self.acceptor.to_be_bytes());
        mac.update(&self.dialer_nonce);
        mac.update(&self.acceptor_nonce);
        mac
    }

    fn proof(&self, secret: &[u8], label: &[u8]) -> [u8; PROOF_LEN] {
        self.mac(secret, label).finalize().into_bytes().into()
    }

    /// Checks a proof in constant time.
    fn verify(&self, secret: &[u8], label: &[u8], proof: &[u8]) -> Result<(), AuthError> {
        self.mac(secret, label).verify_slice(proof).map_err(|_| AuthError::BadProof)
    }
}

fn nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(nonce)
}

async fn within_timeout<T>(f: impl std::future::Future<Output = Result<T, AuthError>>) -> Result<T, AuthError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, f).await.unwrap_or(Err(AuthError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a cluster secret of some length";

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (dialer, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (dialer.unwrap(), accepted.unwrap().0)
    }

    fn nodes<const N: usize>(ids: [NodeId; N]) -> Vec<(NodeId, String)> {
        ids.into_iter().map(|id| (id, "127.0.0.1".to_string())).collect()
    }

    async fn handshake(dialer: &PeerAuth, target: NodeId, acceptor: &PeerAuth) -> (Result<(), AuthError>, Result<NodeId, AuthError>) {
        let (a, b) = pair().await;
        let (dialed, accepted) = tokio::join!(dialer.connect(a, target, "127.0.0.1"), acceptor.accept(b));
        (dialed.map(drop), accepted.map(|(peer, _)| peer))
    }

    #[tokio::test]
    async fn nodes_with_the_same_secret_accept_each_other() {
        let one = PeerAuth::new(1, Some(SECRET), None, nodes([0, 1, 2]));
        let two = PeerAuth::new(2, Some(SECRET), None, nodes([0, 1, 2]));
        let (dialed, accepted) = handshake(&one, 2, &two).await;
        dialed.unwrap();
        assert_eq!(accepted.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_wrong_secret_an_unknown_node_or_a_wrong_target_is_refused() {
        let two = PeerAuth::new(2, Some(SECRET), None, nodes([0, 1, 2]));
        let impostor = PeerAuth::new(1, Some(b"another secret entirely........".as_slice()), None, nodes([0, 1, 2]));
        let (dialed, accepted) = handshake(&impostor, 2, &two).await;
        assert!(matches!(dialed, Err(AuthError::BadProof)), "{dialed:?}");
        assert!(accepted.is_err());
        let stranger = PeerAuth::new(9, Some(SECRET), None, nodes([9, 2]));
        let (_, accepted) = handshake(&stranger, 2, &two).await;
        assert!(matches!(accepted, Err(AuthError::UnknownNode(9))), "{accepted:?}");
        let itself = PeerAuth::new(2, Some(SECRET), None, nodes([0, 1, 2]));
        let (_, accepted) = handshake(&itself, 2, &two).await;
        assert!(matches!(accepted, Err(AuthError::UnknownNode(2))), "{accepted:?}");
        let one = PeerAuth::new(1, Some(SECRET), None, nodes([0, 1, 2]));
        let (_, accepted) = handshake(&one, 0, &two).await;
        assert!(matches!(accepted, Err(AuthError::WrongTarget { wanted: 0, me: 2 })), "{accepted:?}");
    }

    #[tokio::test]
    async fn raw_bytes_are_refused_before_anything_is_decoded() {
        let two = PeerAuth::new(2, Some(SECRET), None, nodes([0, 1, 2]));
        let (mut a, b) = pair().await;
        // A Raft request frame, as the transport writes them after the handshake.
        let frame = [
            0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        a.write_all(&frame).await.unwrap();
        assert!(matches!(two.accept(b).await, Err(AuthError::BadMagic)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_dialer_times_out() {
        let two = PeerAuth::new(2, Some(SECRET), None, nodes([0, 1, 2]));
        let (_a, b) = pair().await;
        assert!(matches!(two.accept(b).await, Err(AuthError::Timeout)));
    }
}
