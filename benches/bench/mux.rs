//! Many simulated clients over a few connections: the plumbing of the consumer-group scenarios.
//!
//! A [`Mux`] is one Kafka connection shared by any number of tasks (one per simulated group
//! member). A task encodes its request and awaits its own response; a writer task coalesces
//! whatever requests are queued into one write(2) and a reader task hands each response frame to
//! the task that asked, in order (a Kafka connection answers its requests in the order they were
//! sent). Everything runs on one thread (`Rc`, a tokio `LocalSet`).
//!
//! # Head-of-line blocking, and lanes
//!
//! Because a connection answers in request order, a request the coordinator *parks* (a JoinGroup
//! waiting for the join phase to end, a follower's SyncGroup waiting for the leader's) holds back
//! every response behind it on that connection. Real Kafka clients have one coordinator
//! connection each, so this is an artifact of multiplexing, and the scenarios must not measure
//! it. [`Lanes`] therefore keeps two pools:
//!
//! - *fast* lanes carry requests that are always answered at once: Heartbeat, LeaveGroup,
//!   OffsetCommit, ConsumerGroupHeartbeat, and the first JoinGroup of a member (which gets
//!   MEMBER_ID_REQUIRED straight away);
//! - *parking* lanes carry JoinGroup (with a member id) and SyncGroup. Each member is bound to
//!   one, and each parking lane has few enough members that all of them can be parked at once
//!   within the server's read-ahead (`kafka.max_inflight_per_connection`, 32 by default): a
//!   connection with more parked requests than that would stop being read, and a leader's
//!   SyncGroup queued behind them would never arrive.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use crate::kafka::{self, KafkaConn, MAX_RESPONSE};
use crate::wire::{Cursor, SocketOpts};

/// Reads `[i32 size][body]` frames through one growing buffer: one read(2) usually brings many
/// small responses, so the reader does not pay two syscalls per frame.
#[derive(Debug, Default)]
pub(crate) struct FrameBuf {
    buf: BytesMut,
}

impl FrameBuf {
    pub(crate) fn new() -> FrameBuf {
        FrameBuf { buf: BytesMut::with_capacity(64 * 1024) }
    }

    /// The next whole frame's body, if one is buffered.
    pub(crate) fn try_next(&mut self) -> io::Result<Option<Bytes>> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = i32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes"));
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= MAX_RESPONSE)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("frame size {len} out of range")))?;
        if self.buf.len() < 4 + len {
            self.buf.reserve(4 + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(4);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Reads until a whole frame is buffered and returns its body.
    pub(crate) async fn next<R: AsyncRead + Unpin>(&mut self, reader: &mut R) -> io::Result<Bytes> {
        loop {
            if let Some(frame) = self.try_next()? {
                return Ok(frame);
            }
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            if reader.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by the server"));
            }
        }
    }
}

/// A request on its way to the writer.
struct Outgoing {
    frame: BytesMut,
    api_key: i16,
    version: i16,
    reply: oneshot::Sender<Result<Bytes>>,
}

/// A request written and not answered yet.
struct Waiting {
    correlation_id: i32,
    api_key: i16,
    version: i16,
    reply: oneshot::Sender<Result<Bytes>>,
}

/// Requests written and not answered, shared by the writer and the reader.
#[derive(Default)]
struct Waiters {
    queue: RefCell<VecDeque<Waiting>>,
    /// Set by the reader when the connection failed: later requests fail at once.
    failed: RefCell<Option<String>>,
}

/// One connection shared by many tasks. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Mux {
    tx: mpsc::UnboundedSender<Outgoing>,
    versions: Rc<HashMap<i16, (i16, i16)>>,
    client_id: StrBytes,
    /// Requests sent, for the reports.
    sent: Rc<Cell<u64>>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux").field("sent", &self.sent.get()).finish()
    }
}

impl Mux {
    /// Connects, negotiates versions and starts the writer and reader tasks (on the current
    /// `LocalSet`).
    pub(crate) async fn connect(addr: SocketAddr, client_id: &str) -> Result<Mux> {
        let conn = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
        let (stream, versions) = conn.into_parts()?;
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let waiting = Rc::new(Waiters::default());
        tokio::task::spawn_local(write_loop(write, rx, waiting.clone()));
        tokio::task::spawn_local(read_loop(read, waiting));
        Ok(Mux { tx, versions: Rc::new(versions), client_id: StrBytes::from_string(client_id.to_string()), sent: Rc::new(Cell::new(0)) })
    }

    /// The version to speak for `R`: the highest common one up to `preferred`.
    pub(crate) fn version<R: Request>(&self, preferred: i16) -> Result<i16> {
        kafka::pick_version::<R>(&self.versions, preferred)
    }

    /// Sends a request at `version` and waits for its response.
    pub(crate) async fn call<R: Request>(&self, version: i16, request: &R) -> Result<R::Response> {
        let body = self.call_raw(version, request).await?;
        let mut body = body;
        R::Response::decode(&mut body, version).with_context(|| format!("decoding {} v{version} response", kafka::api_name(R::KEY)))
    }

    /// Sends a request and returns the response body (header already skipped), undecoded.
    pub(crate) async fn call_raw<R: Request>(&self, version: i16, request: &R) -> Result<Bytes> {
        let mut frame = BytesMut::with_capacity(256);
        kafka::encode_frame(&mut frame, version, 0, &self.client_id, request)?;
        let (reply, rx) = oneshot::channel();
        self.tx.send(Outgoing { frame, api_key: R::KEY, version, reply }).map_err(|_| anyhow!("connection closed"))?;
        self.sent.set(self.sent.get() + 1);
        rx.await.map_err(|_| anyhow!("connection closed before the response to {}", kafka::api_name(R::KEY)))?
    }
}

async fn write_loop(mut socket: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Outgoing>, waiting: Rc<Waiters>) {
    let mut next_id: i32 = 1;
    let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
    let push = |out: Outgoing, buf: &mut Vec<u8>, next_id: &mut i32| {
        if let Some(e) = waiting.failed.borrow().as_ref() {
            let _ = out.reply.send(Err(anyhow!("connection failed: {e}")));
            return;
        }
        let id = *next_id;
        *next_id = next_id.wrapping_add(1);
        let mut frame = out.frame;
        frame[8..12].copy_from_slice(&id.to_be_bytes());
        buf.extend_from_slice(&frame);
        // Registered before the bytes leave, so the reader always finds its waiter.
        waiting.queue.borrow_mut().push_back(Waiting { correlation_id: id, api_key: out.api_key, version: out.version, reply: out.reply });
    };
    while let Some(first) = rx.recv().await {
        push(first, &mut buf, &mut next_id);
        while buf.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(out) => push(out, &mut buf, &mut next_id),
                Err(_) => break,
            }
        }
        if buf.is_empty() {
            continue;
        }
        if let Err(e) = socket.write_all(&buf).await {
            waiting.failed.borrow_mut().get_or_insert_with(|| e.to_string());
            break;
        }
        buf.clear();
    }
    // Whatever is still queued can never be answered.
    for w in waiting.queue.borrow_mut().drain(..) {
        let _ = w.reply.send(Err(anyhow!("connection closed")));
    }
    rx.close();
    while let Ok(out) = rx.try_recv() {
        let _ = out.reply.send(Err(anyhow!("connection closed")));
    }
    let _ = socket.shutdown().await;
}

async fn read_loop(mut socket: OwnedReadHalf, waiting: Rc<Waiters>) {
    let mut frames = FrameBuf::new();
    let error = loop {
        let frame = match frames.next(&mut socket).await {
            Ok(frame) => frame,
            Err(e) => break anyhow!(e),
        };
        let Some(w) = waiting.queue.borrow_mut().pop_front() else { break anyhow!("a response nobody asked for") };
        match strip_header(frame, w.api_key, w.version, w.correlation_id) {
            Ok(body) => {
                let _ = w.reply.send(Ok(body));
            }
            Err(e) => {
                let _ = w.reply.send(Err(anyhow!("{e:#}")));
                break e;
            }
        }
    };
    waiting.failed.borrow_mut().get_or_insert_with(|| format!("{error:#}"));
    for w in waiting.queue.borrow_mut().drain(..) {
        let _ = w.reply.send(Err(anyhow!("connection failed: {error:#}")));
    }
}

/// Checks the correlation id and skips the response header; returns the body.
pub(crate) fn strip_header(mut frame: Bytes, api_key: i16, version: i16, correlation_id: i32) -> Result<Bytes> {
    let api = ApiKey::try_from(api_key).map_err(|()| anyhow!("unknown API key {api_key}"))?;
    let mut cursor = Cursor::new(&frame);
    let id = cursor.i32()?;
    if id != correlation_id {
        bail!("response to correlation id {id}, expected {correlation_id} ({})", kafka::api_name(api_key));
    }
    if api.response_header_version(version) >= 1 {
        cursor.skip_tagged_fields()?;
    }
    let at = cursor.position();
    frame.advance(at);
    Ok(frame)
}

/// The connections a scenario's members share: a few fast lanes and enough parking lanes.
#[derive(Debug, Clone)]
pub(crate) struct Lanes {
    fast: Vec<Mux>,
    park: Vec<Mux>,
}

impl Lanes {
    /// `fast` fast lanes and enough parking lanes for `members` members at most
    /// `per_parking_lane` to a lane.
    pub(crate) async fn connect(addr: SocketAddr, fast: usize, members: usize, per_parking_lane: usize) -> Result<Lanes> {
        let park = members.div_ceil(per_parking_lane.max(1)).max(1);
        Lanes::connect_exact(addr, fast, park).await
    }

    pub(crate) async fn connect_exact(addr: SocketAddr, fast: usize, park: usize) -> Result<Lanes> {
        let mut lanes = Lanes { fast: Vec::new(), park: Vec::new() };
        for i in 0..fast.max(1) {
            lanes.fast.push(Mux::connect(addr, &format!("corral-bench-f{i}")).await?);
        }
        for i in 0..park {
            lanes.park.push(Mux::connect(addr, &format!("corral-bench-p{i}")).await?);
        }
        Ok(lanes)
    }

    pub(crate) fn fast(&self, member: usize) -> &Mux {
        &self.fast[member % self.fast.len()]
    }

    /// Member `member`'s parking lane (members are dealt round-robin).
    pub(crate) fn park(&self, member: usize) -> &Mux {
        if self.park.is_empty() {
            return self.fast(member);
        }
        &self.park[member % self.park.len()]
    }

    pub(crate) fn connections(&self) -> (usize, usize) {
        (self.fast.len(), self.park.len())
    }

    pub(crate) fn requests_sent(&self) -> u64 {
        self.fast.iter().chain(&self.park).map(|m| m.sent.get()).sum()
    }
}
