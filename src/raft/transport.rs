//! Raft traffic between the nodes of a cluster: the RPCs of every group, from every shard, to one
//! peer share one TCP connection.
//!
//! # Wire format
//!
//! Frames of a 4-byte big-endian length and a body:
//!
//! ```text
//! request:   id u64 | group u32 | kind u8 | payload
//! response:  id u64 | status u8 | payload
//! ```
//!
//! `id` pairs a response with its request (responses come back in any order); `group` is the
//! coordinator partition, or [`METADATA_GROUP`]; `kind` is append-entries, vote,
//! install-snapshot or pre-vote, a leader's request to stand for election (it hands over),
//! or (metadata group only) a topic change forwarded to its leader. Payloads are
//! openraft's own messages in postcard's binary serde form: the request, then the `Result` the
//! peer's Raft returned; a pre-vote is the candidate's last log id, answered yes or no (also in
//! postcard); a forwarded change is its JSON entry, answered by the `Result` of writing it. A
//! status other than OK carries a UTF-8 reason (the group is not running there yet, a payload
//! did not decode) and reads as "unreachable" to openraft, which retries.
//!
//! # Threads
//!
//! The connections live on one `raft-net` thread, which also accepts the peers' connections.
//! A shard sends a request to the link of its peer through a channel and awaits the response; an
//! inbound request is decoded and checked here, then handed to the node's [`Inbound`], which runs
//! it in its group (on the shard that owns the group). This module knows nothing of shards or of
//! what the groups hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;

use super::peer_auth::{PeerAuth, PeerStream};
use super::{LogId, NodeId, TypeConfig, METADATA_GROUP};

/// Largest frame either side accepts: a batch of entries is at most the log's replication budget
/// or one entry (at most [`super::entry_codec::MAX_BODY_LEN`]), a snapshot chunk a few MiB; the
/// rest is room for their encoding. A follower that lags can always be sent the next entry.
const MAX_FRAME: usize = super::entry_codec::MAX_BODY_LEN + (4 << 20);
/// Requests of one peer connection running at once; past it the connection is not read until
/// one completes (a peer cannot make this node spawn without bound).
const MAX_IN_FLIGHT: usize = 256;
/// Requests queued for one peer while its connection is busy or being made.
const QUEUE: usize = 4096;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// After a failed connect, requests fail at once for this long instead of each trying again.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);
/// How long a forwarded topic change may take (the leader gives up on its write after 10 s).
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(12);

const STATUS_OK: u8 = 0;
const STATUS_ERROR: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    AppendEntries = 1,
    Vote = 2,
    InstallSnapshot = 3,
    /// A topic change for the metadata group's leader to write.
    Propose = 4,
    /// Stand for election now: the leader hands its leadership over (it is shutting down, or it
    /// is a new group's first leader and the target the group's preferred leader).
    Elect = 5,
    /// Would you vote for me (whose last log id is this)? See [`super::election`].
    PreVote = 6,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::AppendEntries),
            2 => Some(Kind::Vote),
            3 => Some(Kind::InstallSnapshot),
            4 => Some(Kind::Propose),
            5 => Some(Kind::Elect),
            6 => Some(Kind::PreVote),
            _ => None,
        }
    }
}

/// Why a request got no answer from the peer's Raft.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("cannot reach node {node} at {addr}: {reason}")]
    Unreachable { node: NodeId, addr: String, reason: String },
    #[error("node {node}: {reason}")]
    Refused { node: NodeId, reason: String },
}

struct Outgoing {
    group: u32,
    kind: Kind,
    payload: Bytes,
    reply: oneshot::Sender<Result<Bytes, LinkError>>,
}

/// The links from this node to every other node of the cluster. Shared by all shards.
#[derive(Debug, Default)]
pub struct Peers {
    links: HashMap<NodeId, mpsc::Sender<Outgoing>>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing").field("group", &self.group).field("kind", &self.kind).finish()
    }
}

/// What the `raft-net` thread runs: the inbound listener and one link task per peer.
#[derive(Debug)]
pub struct PeerTasks {
    listener: std::net::TcpListener,
    links: Vec<(NodeId, String, mpsc::Receiver<Outgoing>)>,
    auth: PeerAuth,
}

impl Peers {
    /// Links to `peers` (id → Raft address; this node excluded), and the tasks that serve them;
    /// every connection, either way, is authenticated by `auth` first.
    pub fn new(listener: std::net::TcpListener, peers: BTreeMap<NodeId, String>, auth: PeerAuth) -> (Peers, PeerTasks) {
        let mut links = HashMap::new();
        let mut tasks = Vec::new();
        for (id, addr) in peers {
            let (tx, rx) = mpsc::channel(QUEUE);
            links.insert(id, tx);
            tasks.push((id, addr, rx));
        }
        (Peers { links }, PeerTasks { listener, links: tasks, auth })
    }

    /// The Raft network of one group.
    pub fn network(self: &Arc<Self>, group: u32) -> PeerNetwork {
        PeerNetwork { group, peers: self.clone() }
    }

    async fn send(&self, target: NodeId, group: u32, kind: Kind, payload: Bytes) -> Result<Bytes, LinkError> {
        let link = self.links.get(&target).ok_or_else(|| LinkError::Refused { node: target, reason: "not a configured peer".into() })?;
        let (reply, rx) = oneshot::channel();
        let gone = || LinkError::Unreachable { node: target, addr: String::new(), reason: "link stopped".into() };
        link.send(Outgoing { group, kind, payload, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Asks node `target` to stand for election in `group` now (see [`super::hand_off`]).
    pub async fn elect(&self, target: NodeId, group: u32) -> Result<(), String> {
        let sent = self.send(target, group, Kind::Elect, Bytes::new());
        let body = match tokio::time::timeout(CONNECT_TIMEOUT, sent).await {
            Ok(result) => result.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("node {target} did not answer in time")),
        };
        decode::<Result<(), String>>(&body)?
    }

    /// Asks node `target` for its pre-vote in `group` (see [`super::election`]).
    pub async fn pre_vote(&self, target: NodeId, group: u32, last_log_id: Option<LogId>) -> Result<bool, String> {
        let body = self.send(target, group, Kind::PreVote, encode(&last_log_id)?).await.map_err(|e| e.to_string())?;
        decode(&body)
    }

    /// Has node `leader` write a change as the metadata group's leader; gives the leader's
    /// answer (`T`, as its [`Inbound`] encoded it), or why none came.
    pub async fn propose<T: DeserializeOwned>(&self, leader: NodeId, change: Bytes) -> Result<T, String> {
        let sent = self.send(leader, METADATA_GROUP, Kind::Propose, change);
        let body = match tokio::time::timeout(PROPOSE_TIMEOUT, sent).await {
            Ok(result) => result.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("no answer within {PROPOSE_TIMEOUT:?}")),
        };
        decode(&body)
    }
}

/// Runs the peers' requests on this node: each in its group, on the shard that owns the group.
/// Gives the reply as the peer's call expects it, encoded with [`encode`]: the `Result` of the
/// group's Raft for an RPC, the answer to a pre-vote, an election or a proposal.
pub trait Inbound: Send + Sync + 'static {
    fn serve(&self, group: u32, request: PeerRequest) -> BoxFuture<'static, Result<Bytes, String>>;
}

/// Starts the `raft-net` thread: it accepts peers' connections and keeps this node's links until
/// `stop` is cancelled, after the shards have stopped (a shutting-down leader hands its
/// leadership over through these links).
pub fn start(inbound: Arc<dyn Inbound>, tasks: PeerTasks, stop: CancellationToken) -> std::io::Result<std::thread::JoinHandle<()>> {
    tasks.listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("raft-net".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "raft-net: cannot build its runtime");
                return;
            }
        };
        runtime.block_on(async move {
            for (id, addr, rx) in tasks.links {
                tokio::spawn(run_link(id, addr, rx, tasks.auth.clone()));
            }
            let listener = match tokio::net::TcpListener::from_std(tasks.listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "raft-net: cannot register the Raft listener");
                    return;
                }
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => {
                            let _ = stream.set_nodelay(true);
                            tokio::spawn(serve_peer(inbound.clone(), stream, peer, tasks.auth.clone()));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "raft-net: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                }
            }
        });
    })
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec()
}

/// Keeps the connection to one peer: connects when there is something to send, and again after
/// the connection breaks.
async fn run_link(node: NodeId, addr: String, mut rx: mpsc::Receiver<Outgoing>, auth: PeerAuth) {
    let mut failed_at: Option<tokio::time::Instant> = None;
    while let Some(first) = rx.recv().await {
        let unreachable = |reason: String| LinkError::Unreachable { node, addr: addr.clone(), reason };
        if failed_at.is_some_and(|at| at.elapsed() < RECONNECT_BACKOFF) {
            let _ = first.reply.send(Err(unreachable("connection failed just now".into())));
            continue;
        }
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                failed_at = Some(tokio::time::Instant::now());
                let _ = first.reply.send(Err(unreachable(e.to_string())));
                continue;
            }
            Err(_) => {
                failed_at = Some(tokio::time::Instant::now());
                let _ = first.reply.send(Err(unreachable("connect timed out".into())));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let host = crate::config::parse_host_port(&addr).map(|(host, _)| host).unwrap_or_default();
        let stream = match auth.connect(stream, node, &host).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(peer = node, %addr, error = %e, "raft-net: handshake failed");
                failed_at = Some(tokio::time::Instant::now());
                let _ = first.reply.send(Err(unreachable(format!("handshake failed: {e}"))));
                continue;
            }
        };
        failed_at = None;
        tracing::info!(peer = node, %addr, "raft-net: connected");
        let reason = run_connection(node, &addr, stream, first, &mut rx).await;
        tracing::info!(peer = node, %addr, %reason, "raft-net: connection closed");
    }
}

/// Sends requests and matches responses until the connection breaks; then fails every request
/// still waiting. Returns why it ended.
async fn run_connection(node: NodeId, addr: &str, stream: PeerStream, first: Outgoing, rx: &mut mpsc::Receiver<Outgoing>) -> String {
    let (read, write) = tokio::io::split(stream);
    let mut reader = FramedRead::new(read, codec());
    let mut writer = FramedWrite::new(write, codec());
    let mut pending: HashMap<u64, oneshot::Sender<Result<Bytes, LinkError>>> = HashMap::new();
    let mut next_id = 0u64;
    let mut queued = Some(first);
    let reason = loop {
        if let Some(request) = queued.take() {
            next_id += 1;
            let mut frame = BytesMut::with_capacity(13 + request.payload.len());
            frame.put_u64(next_id);
            frame.put_u32(request.group);
            frame.put_u8(request.kind as u8);
            frame.extend_from_slice(&request.payload);
            pending.insert(next_id, request.reply);
            if let Err(e) = writer.send(frame.freeze()).await {
                break format!("write failed: {e}");
            }
        }
        tokio::select! {
            request = rx.recv() => match request {
                Some(request) => queued = Some(request),
                None => break "node shutting down".to_string(),
            },
            frame = reader.next() => match frame {
                Some(Ok(mut frame)) if frame.len() >= 9 => {
                    let id = frame.get_u64();
                    let status = frame.get_u8();
                    let Some(reply) = pending.remove(&id) else { continue };
                    let result = if status == STATUS_OK {
                        Ok(frame.freeze())
                    } else {
                        Err(LinkError::Refused { node, reason: String::from_utf8_lossy(&frame).into_owned() })
                    };
                    let _ = reply.send(result);
                }
                Some(Ok(_)) => break "short response frame".to_string(),
                Some(Err(e)) => break format!("read failed: {e}"),
                None => break "closed by the peer".to_string(),
            },
        }
    };
    for (_, reply) in pending.drain() {
        let _ = reply.send(Err(LinkError::Unreachable { node, addr: addr.to_string(), reason: reason.clone() }));
    }
    reason
}

/// Answers one peer's requests, once it has proven to be a node of the cluster: each runs on the
/// shard that owns its group; responses go back as they complete.
async fn serve_peer(inbound: Arc<dyn Inbound>, stream: TcpStream, peer: std::net::SocketAddr, auth: PeerAuth) {
    let (peer_id, stream) = match auth.accept(stream).await {
        Ok(accepted) => accepted,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "raft-net: refused a connection");
            crate::metrics::raft_peer_refused();
            return;
        }
    };
    tracing::debug!(%peer, peer_id, "raft-net: peer authenticated");
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let (read, write) = tokio::io::split(stream);
    let mut reader = FramedRead::new(read, codec());
    let mut writer = FramedWrite::new(write, codec());
    let (tx, mut responses) = mpsc::channel::<Bytes>(QUEUE);
    let writing = tokio::spawn(async move {
        while let Some(frame) = responses.recv().await {
            if writer.send(frame).await.is_err() {
                return;
            }
        }
    });
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let Some(Ok(mut frame)) = reader.next().await else {
            break;
        };
        if frame.len() < 13 {
            tracing::warn!(%peer, "raft-net: short request frame; closing");
            break;
        }
        let id = frame.get_u64();
        let group = frame.get_u32();
        let kind = frame.get_u8();
        let payload = frame.freeze();
        let inbound = inbound.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let served = match PeerRequest::decode(kind, &payload) {
                Ok(request) => inbound.serve(group, request).await,
                Err(e) => Err(e),
            };
            let (status, body) = match served {
                Ok(body) => (STATUS_OK, body),
                Err(reason) => (STATUS_ERROR, Bytes::from(reason)),
            };
            let mut out = BytesMut::with_capacity(9 + body.len());
            out.put_u64(id);
            out.put_u8(status);
            out.extend_from_slice(&body);
            let _ = tx.send(out.freeze()).await;
        });
    }
    drop(tx);
    let _ = writing.await;
}

/// A peer's request, decoded and checked.
#[derive(Debug)]
pub enum PeerRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    PreVote(Option<LogId>),
    Elect,
    /// A topic change for the metadata group's leader to write (checked again there).
    Propose(Bytes),
}

impl PeerRequest {
    /// Decodes the payload of a request of `kind`; refuses unknown kinds, payloads that do not
    /// decode (or leave bytes over), and terms above [`MAX_TERM`].
    pub fn decode(kind: u8, payload: &Bytes) -> Result<PeerRequest, String> {
        let kind = Kind::from_u8(kind).ok_or_else(|| format!("unknown request kind {kind}"))?;
        Ok(match kind {
            Kind::AppendEntries => {
                let rpc: AppendEntriesRequest<TypeConfig> = decode(payload)?;
                check_term(&rpc.vote)?;
                PeerRequest::AppendEntries(rpc)
            }
            Kind::Vote => {
                let rpc: VoteRequest<NodeId> = decode(payload)?;
                check_term(&rpc.vote)?;
                PeerRequest::Vote(rpc)
            }
            Kind::InstallSnapshot => {
                let rpc: InstallSnapshotRequest<TypeConfig> = decode(payload)?;
                check_term(&rpc.vote)?;
                PeerRequest::InstallSnapshot(rpc)
            }
            Kind::PreVote => PeerRequest::PreVote(decode(payload)?),
            Kind::Elect => PeerRequest::Elect,
            Kind::Propose => PeerRequest::Propose(payload.clone()),
        })
    }
}

/// The highest term a peer may claim. Terms grow by one an election, so no real cluster gets
/// near it; a term near `u64::MAX` would overflow at the next election.
const MAX_TERM: u64 = u64::MAX >> 1;

fn check_term(vote: &super::Vote) -> Result<(), String> {
    match vote.leader_id.term {
        term if term > MAX_TERM => Err(format!("refused a term of {term}: above {MAX_TERM}")),
        _ => Ok(()),
    }
}

/// Encodes a payload: postcard's binary serde form.
pub fn encode<T: Serialize>(value: &T) -> Result<Bytes, String> {
    postcard::to_stdvec(value).map(Bytes::from).map_err(|e| format!("cannot encode: {e}"))
}

/// Decodes one whole message: bytes left over mean it was not what it claimed to be.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(format!("cannot decode: {} bytes after the message", rest.len())),
        Err(e) => Err(format!("cannot decode: {e}")),
    }
}

/// The Raft network of one group: RPCs go over the node's shared links.
#[derive(Debug, Clone)]
pub struct PeerNetwork {
    group: u32,
    peers: Arc<Peers>,
}

impl super::election::Canvass for PeerNetwork {
    async fn pre_vote(&self, target: NodeId, last_log_id: Option<LogId>) -> Result<bool, String> {
        self.peers.pre_vote(target, self.group, last_log_id).await
    }

    async fn ask_to_stand(&self, target: NodeId) -> Result<(), String> {
        self.peers.elect(target, self.group).await
    }
}

/// One group's client for one peer.
#[derive(Debug, Clone)]
pub struct PeerClient {
    group: u32,
    target: NodeId,
    peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> PeerClient {
        PeerClient { group: self.group, target, peers: self.peers.clone() }
    }
}

impl PeerClient {
    /// Sends a request and decodes the peer Raft's `Result`, within openraft's deadline.
    async fn call<Req, Resp, E>(&self, kind: Kind, request: &Req, option: &RPCOption) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = encode(request).map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        let sent = self.peers.send(self.target, self.group, kind, payload);
        let body = match tokio::time::timeout(option.hard_ttl(), sent).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("node {} did not answer in time", self.target));
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
        };
        let result: Result<Resp, E> = decode(&body).map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Kind::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>> {
        self.call(Kind::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Kind::Vote, &rpc, &option).await
    }
}
