//! One pipelined connection to an upstream broker, owned by one shard.
//!
//! Requests are queued in the order they are made and written by one task; Kafka answers a
//! connection's requests in the order it received them, so the reader pairs each response with
//! the oldest request still waiting (and checks its correlation id). A request is queued before
//! its caller awaits anything, so two requests made one after the other reach the broker in that
//! order — pipelined produces keep their order.
//!
//! The connection is opened by its writer task (with TLS and SASL as the [`Dialer`] says);
//! requests made meanwhile wait in the queue. Any I/O error, a response out of order or a frame
//! over the limit closes the connection and fails every request still waiting on it; the pool
//! then opens a new one. A connection whose SASL session is about to end reports itself closed
//! so the pool replaces it; once every handle is dropped, it still reads the responses of the
//! requests it carried before it closes.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{FetchRequest, ProduceRequest, ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use super::dialer::{Dialer, WriteHalf};
use super::fetch_response::{self, FetchAnswer};
use super::frame::{FrameReader, ReadHalf};
use super::produce_frame;
use super::request_frame::{encode, header};
use super::UpstreamError;

/// The largest response frame accepted from an upstream broker.
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// Queued frames are written together, up to about this many of their pieces in one vectored
/// write.
const MAX_PIECES_PER_WRITE: usize = 64;
/// Linux's limit on the pieces of one vectored write.
const IOV_MAX: usize = 1024;
/// How long a connection no longer used waits for the responses of the requests it carried.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Who waits for a response, and in what form.
enum Waiter {
    /// The body in memory, for the caller to decode.
    Body(oneshot::Sender<Result<Bytes, UpstreamError>>),
    /// A Fetch of this version, parsed as it arrives (its records maybe in pipes).
    Fetch(i16, oneshot::Sender<Result<FetchAnswer, UpstreamError>>),
}

impl Waiter {
    fn fail(self, e: UpstreamError) {
        let _ = match self {
            Waiter::Body(tx) => tx.send(Err(e)).map_err(drop),
            Waiter::Fetch(_, tx) => tx.send(Err(e)).map_err(drop),
        };
    }
}

/// A request waiting for its response.
struct InFlight {
    correlation_id: i32,
    response_header_version: i16,
    waiter: Waiter,
}

#[derive(Default)]
struct State {
    in_flight: VecDeque<InFlight>,
    /// Set once the connection is gone: why, for requests that come later.
    closed: Option<UpstreamError>,
    /// When the connection stops taking requests (its SASL session ends soon after).
    retire_at: Option<Instant>,
    /// Every handle is gone: the reader stops once nothing is in flight.
    draining: bool,
}

/// A shard's connection to one upstream broker.
#[derive(Debug)]
pub struct Connection {
    pub address: String,
    frames: mpsc::UnboundedSender<Vec<Bytes>>,
    state: Rc<RefCell<StateCell>>,
    next_correlation_id: Cell<i32>,
}

/// `State` behind a `Debug` that says only how busy it is.
struct StateCell(State);

impl std::fmt::Debug for StateCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("in_flight", &self.0.in_flight.len()).field("closed", &self.0.closed).finish()
    }
}

impl Connection {
    /// Starts connecting to `address` (on this shard's runtime) and returns at once.
    pub fn open(address: String, dialer: Arc<Dialer>) -> Connection {
        let (frames, queued) = mpsc::unbounded_channel();
        let state = Rc::new(RefCell::new(StateCell(State::default())));
        tokio::task::spawn_local(run(address.clone(), dialer, queued, state.clone()));
        Connection { address, frames, state, next_correlation_id: Cell::new(0) }
    }

    /// Whether the connection is gone, or should take no new request.
    pub fn is_closed(&self) -> bool {
        let state = &self.state.borrow().0;
        state.closed.is_some() || self.frames.is_closed() || state.retire_at.is_some_and(|at| Instant::now() >= at)
    }

    /// Requests waiting for their response.
    pub fn in_flight(&self) -> usize {
        self.state.borrow().0.in_flight.len()
    }

    /// Queues `request` now; the returned future gives its response.
    pub fn send<R: Request>(
        &self,
        version: i16,
        request: &R,
    ) -> Result<impl std::future::Future<Output = Result<R::Response, UpstreamError>> + 'static, UpstreamError> {
        self.send_as(version, request, None)
    }

    /// As [`Self::send`], in the name of `client_id` (corral's own when `None`): a request
    /// forwarded for a client keeps the client's id, which coordinators record per member.
    pub fn send_as<R: Request>(
        &self,
        version: i16,
        request: &R,
        client_id: Option<StrBytes>,
    ) -> Result<impl std::future::Future<Output = Result<R::Response, UpstreamError>> + 'static, UpstreamError> {
        let id = self.next_correlation_id();
        self.send_frame::<R>(version, id, vec![encode(request, version, id, client_id)?])
    }

    /// Queues a Produce whose large record sets are written from the producer's own bytes (see
    /// [`produce_frame`]); gives its response, or nothing for acks=0 (which gets none).
    pub fn send_produce(
        &self,
        version: i16,
        request: &ProduceRequest,
    ) -> Result<impl std::future::Future<Output = Result<Option<ProduceResponse>, UpstreamError>> + 'static, UpstreamError> {
        let id = self.next_correlation_id();
        let head = header(ProduceRequest::KEY, ProduceRequest::header_version(version), version, id, None)?;
        let frame = produce_frame::pieces(head, request, version)?;
        let answer = match request.acks {
            0 => {
                self.queue::<ProduceRequest>(version, id, frame, None)?;
                None
            }
            _ => Some(self.send_frame::<ProduceRequest>(version, id, frame)?),
        };
        Ok(async move {
            match answer {
                Some(response) => response.await.map(Some),
                None => Ok(None),
            }
        })
    }

    /// Queues `frame`, a request of correlation id `id`; the future gives the decoded response.
    fn send_frame<R: Request>(
        &self,
        version: i16,
        id: i32,
        frame: Vec<Bytes>,
    ) -> Result<impl std::future::Future<Output = Result<R::Response, UpstreamError>> + 'static, UpstreamError> {
        let (waiter, response) = oneshot::channel();
        self.queue::<R>(version, id, frame, Some(Waiter::Body(waiter)))?;
        let address = self.address.clone();
        Ok(async move {
            let mut body = response.await.map_err(|_| UpstreamError::Disconnected(address.clone()))??;
            R::Response::decode(&mut body, version)
                .map_err(|e| UpstreamError::Protocol(format!("{address}: cannot decode the response to API {} v{version}: {e}", R::KEY)))
        })
    }

    /// Queues a Fetch (v4–v12); its response is parsed as it arrives, its large record sets
    /// spliced into pipes on a plain TCP connection.
    pub fn send_fetch(
        &self,
        version: i16,
        request: &FetchRequest,
    ) -> Result<impl std::future::Future<Output = Result<FetchAnswer, UpstreamError>> + 'static, UpstreamError> {
        let (waiter, response) = oneshot::channel();
        let id = self.next_correlation_id();
        self.queue::<FetchRequest>(version, id, vec![encode(request, version, id, None)?], Some(Waiter::Fetch(version, waiter)))?;
        let address = self.address.clone();
        Ok(async move { response.await.map_err(|_| UpstreamError::Disconnected(address))? })
    }

    fn next_correlation_id(&self) -> i32 {
        let id = self.next_correlation_id.get();
        self.next_correlation_id.set(id.wrapping_add(1));
        id
    }

    /// Queues `frame`, whose correlation id is `correlation_id`; its response goes to `waiter`.
    fn queue<R: Request>(&self, version: i16, correlation_id: i32, frame: Vec<Bytes>, waiter: Option<Waiter>) -> Result<(), UpstreamError> {
        let mut state = self.state.borrow_mut();
        if let Some(e) = &state.0.closed {
            return Err(e.clone());
        }
        self.frames.send(frame).map_err(|_| UpstreamError::Disconnected(self.address.clone()))?;
        if let Some(waiter) = waiter {
            let response_header_version = R::Response::header_version(version);
            state.0.in_flight.push_back(InFlight { correlation_id, response_header_version, waiter });
        }
        Ok(())
    }
}

/// The connection's life: connect, then write queued frames and read responses until either
/// side fails, or every `Connection` handle is dropped and the last response has come.
async fn run(address: String, dialer: Arc<Dialer>, mut queued: mpsc::UnboundedReceiver<Vec<Bytes>>, state: Rc<RefCell<StateCell>>) {
    let _open = crate::metrics::upstream_connection_begun();
    let error = match dialer.dial(&address).await {
        Err(e) => e,
        Ok(dialed) => {
            state.borrow_mut().0.retire_at = dialed.retire_at;
            let mut write_half = dialed.write;
            let reader = read_responses(address.clone(), dialed.read, state.clone());
            tokio::pin!(reader);
            let writer = async {
                let mut pieces = VecDeque::new();
                while let Some(frame) = queued.recv().await {
                    // Frames queued together leave in one vectored write, none of them copied.
                    pieces.extend(frame);
                    while pieces.len() < MAX_PIECES_PER_WRITE {
                        let Ok(more) = queued.try_recv() else { break };
                        pieces.extend(more);
                    }
                    if let Err(e) = write_pieces(&mut write_half, &mut pieces).await {
                        return Some(UpstreamError::Disconnected(format!("{address}: {e}")));
                    }
                }
                None
            };
            let unused = || UpstreamError::Disconnected(format!("{address}: closed"));
            tokio::select! {
                e = &mut reader => e,
                written = writer => match written {
                    Some(e) => e,
                    None => {
                        // No handle is left: the requests already sent still get their answers.
                        let idle = {
                            let mut state = state.borrow_mut();
                            state.0.draining = true;
                            state.0.in_flight.is_empty()
                        };
                        match idle {
                            true => unused(),
                            false => tokio::time::timeout(DRAIN_LIMIT, &mut reader).await.unwrap_or_else(|_| unused()),
                        }
                    }
                },
            }
        }
    };
    tracing::debug!(%address, %error, "upstream connection closed");
    queued.close();
    let waiting = {
        let mut state = state.borrow_mut();
        state.0.closed = Some(error.clone());
        std::mem::take(&mut state.0.in_flight)
    };
    for request in waiting {
        request.waiter.fail(error.clone());
    }
}

/// Writes every piece of `pieces` with vectored writes, dropping each once it is on the wire.
async fn write_pieces(write_half: &mut WriteHalf, pieces: &mut VecDeque<Bytes>) -> std::io::Result<()> {
    while !pieces.is_empty() {
        let mut written = {
            let slices: Vec<std::io::IoSlice<'_>> = pieces.iter().take(IOV_MAX).map(|p| std::io::IoSlice::new(p)).collect();
            write_half.write_vectored(&slices).await?
        };
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(front) = pieces.front_mut() else { break };
            if written >= front.len() {
                written -= front.len();
                pieces.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
    // A no-op on TCP; TLS sends what it buffered.
    write_half.flush().await
}

async fn read_responses(address: String, read_half: ReadHalf, state: Rc<RefCell<StateCell>>) -> UpstreamError {
    let mut reader = FrameReader::new(read_half, address.clone(), MAX_RESPONSE_BYTES);
    loop {
        let frame = match reader.next_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return UpstreamError::Disconnected(format!("{address}: closed by the broker")),
            Err(e) => return e,
        };
        let Some(InFlight { correlation_id, response_header_version, waiter }) = state.borrow_mut().0.in_flight.pop_front() else {
            return UpstreamError::Protocol(format!("{address}: a response to no request"));
        };
        let out_of_order = || UpstreamError::Protocol(format!("{address}: response out of order"));
        let answered = match waiter {
            Waiter::Body(waiter) => {
                let body = frame.rest().await.and_then(|mut body| match ResponseHeader::decode(&mut body, response_header_version) {
                    Ok(header) if header.correlation_id == correlation_id => Ok(body),
                    _ => Err(out_of_order()),
                });
                let _ = waiter.send(body.clone());
                body.map(drop)
            }
            Waiter::Fetch(version, waiter) => {
                let mut frame = frame;
                let deliver = |answer| drop(waiter.send(answer));
                match fetch_response::read_header(&mut frame, response_header_version).await {
                    Ok(id) if id == correlation_id => fetch_response::read(&mut frame, version, deliver).await,
                    Ok(_) => {
                        deliver(Err(out_of_order()));
                        Err(out_of_order())
                    }
                    Err(e) => {
                        deliver(Err(e.clone()));
                        Err(e)
                    }
                }
            }
        };
        if let Err(e) = answered {
            return e;
        }
        let state = &state.borrow().0;
        if state.draining && state.in_flight.is_empty() {
            return UpstreamError::Disconnected(format!("{address}: closed"));
        }
    }
}
