//! Appends: validated and written on the owning shard, in the order they arrive there.

use std::collections::HashMap;
use std::rc::Rc;

use futures_util::future::LocalBoxFuture;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::runtime::{Shard, ShardId};
use crate::storage::partition::FlushResult;
use crate::storage::{AppendInfo, StorageError};
use crate::store::placement::local_shard;
use crate::store::{Append, Appended, Results, StoreError};

/// One partition's append, sent to its owning shard.
struct AppendJob {
    topic_id: Uuid,
    partition: i32,
    batch: bytes::Bytes,
}

type AppendResult = Result<(AppendInfo, Option<oneshot::Receiver<FlushResult>>), StoreError>;

/// Where an append's answer comes from.
enum Slot {
    Done(StoreError),
    /// Position in that shard's job list.
    Queued(ShardId, usize),
}

/// Enqueues every append on its owning shard now, in order per shard; the returned future
/// settles them.
pub(super) async fn start(shard: Rc<Shard>, appends: Vec<Append>) -> LocalBoxFuture<'static, Results<Appended>> {
    let node = &shard.node;
    let mut jobs: HashMap<ShardId, Vec<AppendJob>> = HashMap::new();
    let slots: Vec<Slot> = appends
        .into_iter()
        .map(|a| match local_shard(node, &a.partition, -1) {
            Err(e) => Slot::Done(e),
            Ok(target) => {
                let queue = jobs.entry(target).or_default();
                queue.push(AppendJob { topic_id: a.partition.topic.id, partition: a.partition.index, batch: a.batch });
                Slot::Queued(target, queue.len() - 1)
            }
        })
        .collect();
    let now = now_ms();
    let mut replies = HashMap::with_capacity(jobs.len());
    for (target, batch) in jobs {
        let reply = node.mesh.call(&shard, target, move |owner| append_all(owner, batch, now)).await;
        replies.insert(target, reply);
    }
    Box::pin(async move {
        let mut results: HashMap<ShardId, Vec<Option<AppendResult>>> = HashMap::with_capacity(replies.len());
        for (target, reply) in replies {
            let outcome = match reply.await {
                Ok(list) => list.into_iter().map(Some).collect(),
                Err(_) => Vec::new(),
            };
            results.insert(target, outcome);
        }
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            out.push(match slot {
                Slot::Done(e) => Err(e),
                Slot::Queued(target, position) => {
                    let result = results.get_mut(&target).and_then(|list| list.get_mut(position)).and_then(Option::take);
                    settle(result).await
                }
            });
        }
        out
    })
}

/// Every append answered as the shard's shutdown answers them.
pub(super) fn stopped(count: usize) -> LocalBoxFuture<'static, Results<Appended>> {
    Box::pin(std::future::ready((0..count).map(|_| Err(StoreError::Unavailable("the partition's shard is shutting down"))).collect()))
}

/// Runs on the owning shard: appends each batch, in order.
fn append_all(owner: &Rc<Shard>, jobs: Vec<AppendJob>, now: i64) -> Vec<AppendResult> {
    jobs.into_iter()
        .map(|job| {
            let partition = owner.partition(job.topic_id, job.partition).ok_or(StoreError::UnknownPartition)?;
            let (info, durable) = partition.append(&job.batch, now).inspect_err(|e| {
                if matches!(e, StorageError::Io(_)) {
                    tracing::error!(error = %e, "append failed");
                }
            })?;
            if !info.duplicate {
                owner.metrics.records_appended(info.records as u64);
            }
            if info.producer_evicted {
                crate::metrics::producer_state_evicted();
            }
            Ok((info, durable))
        })
        .collect()
}

/// Waits for the append's fsync where the flush policy requires one.
async fn settle(result: Option<AppendResult>) -> Result<Appended, StoreError> {
    let (info, durable) = result.ok_or(StoreError::Unavailable("the partition's shard is shutting down"))??;
    if let Some(durable) = durable {
        match durable.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "fsync failed");
                return Err(StoreError::Flush(e.to_string()));
            }
            Err(_) => return Err(StoreError::Flush("the fsync did not complete".into())),
        }
    }
    Ok(Appended { base_offset: info.base_offset, log_start_offset: info.log_start_offset })
}
