//! The cross-shard mesh: each shard has a bounded inbox; any shard can run work on another and get
//! the answer back.
//!
//! # Ordering
//!
//! A [`Mesh::call`] runs its closure *synchronously* on the target shard, in the order calls were
//! enqueued. A connection that enqueues request A before request B therefore has A's effect
//! (an append, an offset commit) applied before B's on every shard — the same guarantee Kafka
//! gives by processing one request per connection at a time, while still letting the responses
//! be awaited concurrently.
//!
//! # Backpressure
//!
//! Inboxes are bounded. A full inbox makes the sender wait; it never grows memory or fails.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures_util::future::LocalBoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::shard::Shard;

/// Index of a shard, `0..shards`.
pub type ShardId = usize;

/// Work sent to a shard: runs on that shard's thread with its context.
pub(crate) type Job = Box<dyn FnOnce(&Rc<Shard>) -> Option<LocalBoxFuture<'static, ()>> + Send>;

/// The target shard stopped (the process is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard {0} is not running")]
pub struct ShardStopped(pub ShardId);

/// Senders to every shard's inbox. Shared by all shards (`Send + Sync`).
#[derive(Debug)]
pub struct Mesh {
    inboxes: Vec<mpsc::Sender<Job>>,
}

impl Mesh {
    /// Creates the mesh and the inbox receivers, one per shard, in shard order.
    pub(crate) fn new(shards: usize, capacity: usize) -> (Mesh, Vec<mpsc::Receiver<Job>>) {
        let (senders, receivers) = (0..shards).map(|_| mpsc::channel(capacity)).unzip();
        (Mesh { inboxes: senders }, receivers)
    }

    pub fn shard_count(&self) -> usize {
        self.inboxes.len()
    }

    /// Jobs waiting in each shard's inbox.
    pub fn queue_depths(&self) -> Vec<usize> {
        self.inboxes.iter().map(|inbox| inbox.max_capacity() - inbox.capacity()).collect()
    }

    /// Runs `f` on shard `to`, synchronously and in enqueue order, and returns a handle to its
    /// result. Waits only for room in the target's inbox; on the caller's own shard `f` runs
    /// immediately.
    pub async fn call<T, F>(&self, from: &Rc<Shard>, to: ShardId, f: F) -> Reply<T>
    where
        F: FnOnce(&Rc<Shard>) -> T + Send + 'static,
        T: Send + 'static,
    {
        if to == from.id {
            return Reply::Ready(Some(f(from)));
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |shard| {
            let _ = tx.send(f(shard));
            None
        });
        match self.inboxes[to].send(job).await {
            Ok(()) => Reply::Remote { rx, shard: to },
            Err(_) => Reply::Ready(None).stopped(to),
        }
    }

    /// Runs the future made by `f` on shard `to` and returns its output. `f` itself runs in
    /// enqueue order; the future it returns proceeds concurrently with later work.
    pub async fn spawn_on<T, F, Fut>(&self, from: &Rc<Shard>, to: ShardId, f: F) -> Result<T, ShardStopped>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        if to == from.id {
            return Ok(f(from.clone()).await);
        }
        self.run_on(to, f).await
    }

    /// Runs `f` on shard `to` from a thread that is not a shard (the Raft network thread).
    pub async fn run_on<T, F, Fut>(&self, to: ShardId, f: F) -> Result<T, ShardStopped>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |shard| {
            let fut = f(shard.clone());
            Some(Box::pin(async move {
                let _ = tx.send(fut.await);
            }))
        });
        self.inboxes[to].send(job).await.map_err(|_| ShardStopped(to))?;
        rx.await.map_err(|_| ShardStopped(to))
    }
}

/// The pending result of a [`Mesh::call`]. Await it to get the value.
#[derive(Debug)]
pub enum Reply<T> {
    Ready(Option<T>),
    Stopped(ShardId),
    Remote { rx: oneshot::Receiver<T>, shard: ShardId },
}

impl<T> Reply<T> {
    fn stopped(self, shard: ShardId) -> Self {
        match self {
            Reply::Ready(None) => Reply::Stopped(shard),
            other => other,
        }
    }
}

impl<T: Unpin> Future for Reply<T> {
    type Output = Result<T, ShardStopped>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Reply::Ready(value) => Poll::Ready(value.take().ok_or(ShardStopped(usize::MAX))),
            Reply::Stopped(shard) => Poll::Ready(Err(ShardStopped(*shard))),
            Reply::Remote { rx, shard } => Pin::new(rx).poll(cx).map_err(|_| ShardStopped(*shard)),
        }
    }
}

/// Drains a shard's inbox: runs each job in arrival order on this shard.
pub(crate) async fn serve_inbox(shard: Rc<Shard>, mut inbox: mpsc::Receiver<Job>) {
    while let Some(job) = inbox.recv().await {
        if let Some(fut) = job(&shard) {
            tokio::task::spawn_local(fut);
        }
    }
}
