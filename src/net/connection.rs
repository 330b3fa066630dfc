//! One client connection: frames in, responses out, in request order.
//!
//! The reader decodes each frame and runs the handler's ordering-critical first stage before it
//! reads the next one (see [`crate::api::Handled`]); whatever the handler defers runs as its own
//! task. The writer receives the pending responses through a bounded channel — its capacity is
//! the connection's in-flight limit — and writes each one when it is complete, in order; small
//! responses that are ready together leave in one write.
//!
//! A malformed frame, an unknown API or an unsupported version closes this connection only,
//! after the responses to earlier requests have been written. So does a connection idle for
//! `connections_max_idle_ms`, and one whose request does not arrive whole within
//! `request_body_timeout_ms`. Each request read holds its bytes of the node's
//! `queued_max_request_bytes` until it is answered; past it the reader waits.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_util::StreamExt;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::{Decoder, FramedRead, LengthDelimitedCodec};

use super::sendfile;
use crate::api::{self, Handled};
use crate::config::FetchSend;
use crate::protocol::{Chunk, Reply, RequestError};
use crate::runtime::Shard;
use crate::security::session::ConnectionSecurity;

/// A response the writer is waiting for.
struct Pending {
    /// The request's API key and version, for its metrics.
    api: Option<(ApiKey, i16)>,
    started: Instant,
    reply: PendingReply,
    /// The request's bytes of the node's budget, given back once the response is written.
    _held: Option<tokio::sync::OwnedSemaphorePermit>,
}

enum PendingReply {
    Ready(Reply),
    Task(JoinHandle<Reply>),
    /// The request could not be served: write what came before, then close.
    Close(RequestError),
}

/// The writing half of a client connection. Only a plain TCP socket can take sendfile(2) and
/// corking; a TLS stream gets the bytes.
pub(crate) trait ClientWriter: AsyncWrite + Unpin + 'static {
    fn tcp(&self) -> Option<&TcpStream>;
}

impl ClientWriter for OwnedWriteHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + 'static> ClientWriter for tokio::io::WriteHalf<tokio_rustls::server::TlsStream<IO>> {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl ClientWriter for crate::security::kernel_tls::Writer {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.get_ref().tcp())
    }
}

/// Serves a plaintext connection.
pub(crate) async fn serve_tcp(shard: Rc<Shard>, stream: TcpStream, peer: SocketAddr, security: ConnectionSecurity) {
    let (read_half, write_half) = stream.into_split();
    serve(shard, read_half, write_half, peer, security).await;
}

/// Serves a connection whose TLS handshake is done, encrypted by rustls.
pub(crate) async fn serve_tls<IO: AsyncRead + AsyncWrite + Unpin + 'static>(
    shard: Rc<Shard>,
    stream: tokio_rustls::server::TlsStream<IO>,
    peer: SocketAddr,
    security: ConnectionSecurity,
) {
    let (read_half, write_half) = tokio::io::split(stream);
    serve(shard, read_half, write_half, peer, security).await;
}

/// Serves a TLS connection the kernel encrypts (kTLS): a plain socket to corral, so fetches
/// keep sendfile(2). `early` is what rustls had decrypted before it gave the session up.
pub(crate) async fn serve_kernel_tls(shard: Rc<Shard>, stream: TcpStream, early: Vec<u8>, peer: SocketAddr, security: ConnectionSecurity) {
    let (read_half, write_half) = stream.into_split();
    let writer = crate::security::kernel_tls::writer(write_half);
    serve(shard, std::io::Cursor::new(early).chain(read_half), writer, peer, security).await;
}

/// Serves one connection until the client closes it, it sends something unservable, or the
/// node shuts down.
async fn serve<R: AsyncRead + Unpin, W: ClientWriter>(
    shard: Rc<Shard>,
    read_half: R,
    write_half: W,
    peer: SocketAddr,
    security: ConnectionSecurity,
) {
    let config = &shard.node.config.kafka;
    let security = Rc::new(security);
    let connection = shard.next_connection_number();
    let codec = LengthDelimitedCodec::builder().length_field_length(4).max_frame_length(config.max_frame_bytes as usize).new_codec();
    let decoder = Frames { codec, security: security.clone(), max_frame_bytes: config.max_frame_bytes as usize };
    let mut frames = FramedRead::new(read_half, decoder);
    let (tx, rx) = mpsc::channel::<Pending>(config.max_inflight_per_connection);
    let writer = tokio::task::spawn_local(write_loop(shard.clone(), write_half, rx, peer));
    let shutdown = shard.node.shutdown.clone();
    let _open = shard.metrics.connection_opened();
    let services: Rc<dyn api::Services> = shard.clone();
    let idle = Duration::from_millis(config.connections_max_idle_ms);
    let body_timeout = Duration::from_millis(config.request_body_timeout_ms);
    // One timer for the connection's life, not one per request.
    let mut check = tokio::time::interval((idle.min(body_timeout) / 2).max(Duration::from_millis(10)));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.reset();
    let mut active_at = Instant::now();
    // When bytes of an incomplete request were first seen waiting.
    let mut partial_since: Option<Instant> = None;

    loop {
        if let Some(until) = security.muted_until() {
            // Over a quota: the client waits out its throttle time before it is read again.
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(until.into()) => {}
            }
            active_at = Instant::now();
        }
        let frame = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            frame = frames.next() => frame,
            _ = check.tick() => {
                let now = Instant::now();
                if !frames.read_buffer().is_empty() {
                    if now - *partial_since.get_or_insert(now) >= body_timeout {
                        tracing::debug!(%peer, "closing connection: a request did not arrive within request_body_timeout_ms");
                        crate::metrics::connection_closed(crate::metrics::labels::CLOSED_SLOW_REQUEST);
                        break;
                    }
                } else if tx.capacity() < tx.max_capacity() {
                    // Responses still being made or written: not idle.
                    active_at = now;
                } else if now - active_at >= idle {
                    tracing::debug!(%peer, "closing connection: idle for connections_max_idle_ms");
                    crate::metrics::connection_closed(crate::metrics::labels::CLOSED_IDLE);
                    break;
                }
                continue;
            }
        };
        let frame = match frame {
            None => break,
            Some(Ok(frame)) => frame.freeze(),
            Some(Err(e)) => {
                // Oversized size prefix, or the socket failed.
                tracing::debug!(%peer, error = %e, "closing connection");
                break;
            }
        };
        shard.metrics.bytes_received(frame.len() as u64 + 4);
        partial_since = None;
        let held = shard.node.client_limits.hold_request(frame.len() + 4).await;
        let started = Instant::now();
        active_at = started;
        if security.expects_raw_token() {
            // After SaslHandshake v0 a frame is a bare SASL token, not a request.
            let step = api::raw_sasl_token(&services, security.clone(), frame, peer);
            let pending = Pending { api: None, started, reply: PendingReply::Task(tokio::task::spawn_local(step)), _held: held };
            if tx.send(pending).await.is_err() {
                break;
            }
            continue;
        }
        let api = frame
            .get(0..4)
            .and_then(|h| Some((ApiKey::try_from(i16::from_be_bytes([h[0], h[1]])).ok()?, i16::from_be_bytes([h[2], h[3]]))));
        if let Err(why) = security.admits(api.map(|(key, _)| key)) {
            // As Kafka: a client that skips or breaks authentication is disconnected.
            tracing::info!(%peer, listener = %security.listener.name, api = ?api.map(|(key, _)| key), why, "closing connection");
            crate::metrics::connection_closed(crate::metrics::labels::CLOSED_UNAUTHENTICATED);
            let _ = tx.send(Pending { api, started, reply: PendingReply::Ready(Reply::Close(why)), _held: held }).await;
            break;
        }
        let (reply, close) = match api::dispatch(&services, frame, peer, connection, &security).await {
            Ok(Handled::Now(reply)) => (PendingReply::Ready(reply), false),
            Ok(Handled::Later(fut)) => (PendingReply::Task(tokio::task::spawn_local(fut)), false),
            Err(e) => (PendingReply::Close(e), true),
        };
        if tx.send(Pending { api, started, reply, _held: held }).await.is_err() || close {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
    if let Some(sidecar) = shard.sidecar_forwarder() {
        sidecar.connection_closed(peer);
    }
}

/// The largest frame read before a SASL connection is authenticated (Kafka's
/// `sasl.server.max.receive.size` default).
const UNAUTHENTICATED_FRAME_MAX: usize = 512 * 1024;

/// Kafka's size-prefixed frames of at most `kafka.max_frame_bytes`; before SASL authentication
/// of at most [`UNAUTHENTICATED_FRAME_MAX`], so that whoever has no password cannot make the node
/// buffer large requests. The limit is taken when a frame's size arrives, when the
/// authentication it follows has completed.
struct Frames {
    codec: LengthDelimitedCodec,
    security: Rc<ConnectionSecurity>,
    max_frame_bytes: usize,
}

impl Decoder for Frames {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        let max = match self.security.is_authenticated() {
            true => self.max_frame_bytes,
            false => self.max_frame_bytes.min(UNAUTHENTICATED_FRAME_MAX),
        };
        self.codec.set_max_frame_length(max);
        self.codec.decode(src)
    }
}

/// Small responses that are ready back to back are copied into one buffer and leave in one
/// write: with many requests in flight (heartbeats, commits) a syscall per response would cost
/// more than the requests themselves.
const COALESCE_FRAME_MAX: usize = 16 * 1024;
const COALESCE_BUFFER_MAX: usize = 64 * 1024;
const IDLE_BUFFER_MAX: usize = 4 * 1024;

async fn write_loop<W: ClientWriter>(shard: Rc<Shard>, mut socket: W, mut rx: mpsc::Receiver<Pending>, peer: SocketAddr) {
    let use_sendfile = shard.node.config.kafka.fetch_send == FetchSend::Sendfile;
    let mut copy_buf = Vec::new();
    let mut out = BytesMut::new();
    let mut yielded = false;
    loop {
        let pending = match rx.try_recv() {
            Ok(pending) => pending,
            Err(_) if !out.is_empty() && !yielded => {
                // Let the reader and the handlers run once first: more responses may be ready
                // to join this write.
                yielded = true;
                tokio::task::yield_now().await;
                continue;
            }
            Err(_) => {
                yielded = false;
                // Nothing more is queued: what was gathered leaves now, and an idle connection
                // does not keep a burst's buffer.
                if flush(&mut socket, &mut out, peer).await.is_err() {
                    break;
                }
                if out.capacity() > IDLE_BUFFER_MAX {
                    out = BytesMut::new();
                }
                match rx.recv().await {
                    Some(pending) => pending,
                    None => break,
                }
            }
        };
        let reply = match pending.reply {
            PendingReply::Ready(reply) => reply,
            PendingReply::Task(task) => {
                // Before waiting for the handler, what was gathered leaves, and so do records a
                // TLS stream holds back (a plain socket holds nothing).
                if !task.is_finished() && (!out.is_empty() || socket.tcp().is_none()) {
                    tokio::task::yield_now().await;
                    if !task.is_finished() && flush(&mut socket, &mut out, peer).await.is_err() {
                        break;
                    }
                }
                match task.await {
                    Ok(reply) => reply,
                    Err(e) => {
                        tracing::error!(%peer, api = ?pending.api, error = %e, "request handler failed; closing connection");
                        break;
                    }
                }
            }
            PendingReply::Close(e) => {
                tracing::warn!(%peer, error = %e, "closing connection");
                shard.metrics.request_rejected();
                break;
            }
        };
        let written = reply.wire_len();
        let result = match reply {
            Reply::Failed(e) => {
                tracing::error!(%peer, error = %e, "closing connection");
                break;
            }
            Reply::Close(why) => {
                tracing::debug!(%peer, why, "closing connection");
                break;
            }
            Reply::None => Ok(()),
            Reply::Frame(bytes) if bytes.len() <= COALESCE_FRAME_MAX => {
                out.extend_from_slice(&bytes);
                if out.len() >= COALESCE_BUFFER_MAX {
                    socket.write_all_buf(&mut out).await
                } else {
                    Ok(())
                }
            }
            Reply::Frame(bytes) => match socket.write_all_buf(&mut out).await {
                Ok(()) => socket.write_all(&bytes).await,
                Err(e) => Err(e),
            },
            Reply::Last(bytes) => {
                out.extend_from_slice(&bytes);
                tracing::debug!(%peer, "closing connection after its last response");
                break;
            }
            Reply::Chunks(frame) => match socket.write_all_buf(&mut out).await {
                Ok(()) => write_chunks(&shard, &mut socket, frame.chunks, use_sendfile, &mut copy_buf).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "write failed; closing connection");
            break;
        }
        shard.metrics.bytes_sent(written);
        if let Some((api, version)) = pending.api {
            shard.metrics.request_completed(api, version, pending.started.elapsed());
        }
    }
    // Responses gathered before a close still reach the client.
    let _ = flush(&mut socket, &mut out, peer).await;
    let _ = socket.shutdown().await;
}

/// Writes what was gathered, and everything written before it: a TLS stream may hold records back
/// when the socket is full (it returns from a write once it took the bytes), and only a flush
/// sends them. Called before the writer waits for a response, so none is left behind meanwhile.
async fn flush<W: ClientWriter>(socket: &mut W, out: &mut BytesMut, peer: SocketAddr) -> std::io::Result<()> {
    let result = match socket.write_all_buf(out).await {
        Ok(()) => socket.flush().await,
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        tracing::debug!(%peer, error = %e, "write failed; closing connection");
    }
    result
}

async fn write_chunks<W: ClientWriter>(
    shard: &Shard,
    socket: &mut W,
    chunks: Vec<Chunk>,
    use_sendfile: bool,
    copy_buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    // The header, each file range and the trailer would otherwise leave as separate segments
    // (TCP_NODELAY is on); corking sends them as full segments, halving server CPU per byte.
    let cork = chunks.len() > 1;
    if let Some(tcp) = socket.tcp().filter(|_| cork) {
        let _ = socket2::SockRef::from(tcp).set_tcp_cork(true);
    }
    let result = write_each(shard, socket, chunks, use_sendfile, copy_buf).await;
    if let Some(tcp) = socket.tcp().filter(|_| cork) {
        let _ = socket2::SockRef::from(tcp).set_tcp_cork(false);
    }
    result
}

async fn write_each<W: ClientWriter>(
    shard: &Shard,
    socket: &mut W,
    chunks: Vec<Chunk>,
    use_sendfile: bool,
    copy_buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(bytes) => socket.write_all(&bytes).await?,
            Chunk::File(slice) => match socket.tcp().filter(|_| use_sendfile) {
                Some(tcp) => {
                    sendfile::send(tcp, &slice).await?;
                    shard.metrics.sendfile_bytes(slice.len);
                }
                None => sendfile::copy(socket, &slice, copy_buf).await?,
            },
            Chunk::Pipe(piped) => match socket.tcp().filter(|_| use_sendfile) {
                Some(tcp) => piped.splice_to(tcp).await?,
                None => piped.copy_to(socket, copy_buf).await?,
            },
        }
    }
    Ok(())
}
