//! Fetches: file ranges read on each partition's owning shard, long-polled on the log-end
//! watches until `min_bytes` are there or `max_wait` has passed.

use std::collections::HashMap;
use std::rc::Rc;

use futures_util::future::select_all;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::chunk::Chunk;
use crate::runtime::{Shard, ShardId};
use crate::storage::ReadInfo;
use crate::store::placement::local_shard;
use crate::store::{FetchPlan, PartitionData, Results, StoreError};

/// A partition to read, on its owning shard.
struct Target {
    topic_id: Uuid,
    partition: i32,
    shard: ShardId,
    fetch_offset: i64,
    max_bytes: u64,
    end_offset: watch::Receiver<i64>,
}

/// One partition read sent to its owning shard: (position in the plan, topic, partition, fetch
/// offset, max bytes).
type ReadJob = (usize, Uuid, i32, i64, u64);

pub(super) async fn fetch(shard: Rc<Shard>, plan: FetchPlan) -> Results<PartitionData> {
    let node = shard.node.clone();
    // Each partition: an error known now, or its target.
    let mut answers: Vec<Option<Result<PartitionData, StoreError>>> = Vec::with_capacity(plan.partitions.len());
    let mut targets: Vec<(usize, Target)> = Vec::new();
    for (i, p) in plan.partitions.iter().enumerate() {
        let target = local_shard(&node, &p.partition, p.current_leader_epoch).and_then(|owner| {
            let end_offset = node.end_offsets.subscribe(p.partition.topic.id, p.partition.index).ok_or(StoreError::UnknownPartition)?;
            Ok(Target {
                topic_id: p.partition.topic.id,
                partition: p.partition.index,
                shard: owner,
                fetch_offset: p.fetch_offset,
                max_bytes: p.max_bytes,
                end_offset,
            })
        });
        match target {
            Ok(t) => {
                targets.push((i, t));
                answers.push(None);
            }
            Err(e) => answers.push(Some(Err(e))),
        }
    }
    let any_error = answers.iter().any(Option::is_some);
    let deadline = Instant::now() + plan.max_wait;
    let shutdown = node.shutdown.clone();

    loop {
        // Seen values are marked before reading, so an append during the read still wakes us.
        for (_, t) in targets.iter_mut() {
            t.end_offset.mark_unchanged();
        }
        let reads = read_all(&shard, &targets).await;
        let (data, bytes, read_error) = within_budget(reads, plan.max_bytes);
        let done = any_error || read_error || bytes >= plan.min_bytes || plan.max_wait.is_zero() || Instant::now() >= deadline;
        if done || shutdown.is_cancelled() {
            for ((i, _), result) in targets.iter().zip(data) {
                answers[*i] = Some(result);
            }
            return answers.into_iter().map(|a| a.unwrap_or(Err(StoreError::Failed("the partition was not read")))).collect();
        }
        let changed = async {
            if targets.is_empty() {
                std::future::pending::<()>().await;
            }
            let _ = select_all(targets.iter_mut().map(|(_, t)| Box::pin(t.end_offset.changed()))).await;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = changed => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Reads every target on its owning shard (one mesh call per shard), in plan order.
async fn read_all(shard: &Rc<Shard>, targets: &[(usize, Target)]) -> Vec<Result<ReadInfo, StoreError>> {
    let mut jobs: HashMap<ShardId, Vec<ReadJob>> = HashMap::new();
    for (i, (_, t)) in targets.iter().enumerate() {
        jobs.entry(t.shard).or_default().push((i, t.topic_id, t.partition, t.fetch_offset, t.max_bytes));
    }
    let mut pending = Vec::with_capacity(jobs.len());
    for (target, list) in jobs {
        let reply = shard.node.mesh.call(shard, target, move |owner| {
            list.into_iter()
                .map(|(i, id, partition, offset, max)| {
                    let result = match owner.partition(id, partition) {
                        Some(p) => p.log.borrow().read(offset, max, true).map_err(StoreError::Storage),
                        None => Err(StoreError::UnknownPartition),
                    };
                    (i, result)
                })
                .collect::<Vec<_>>()
        });
        pending.push(reply.await);
    }
    let mut out: Vec<Result<ReadInfo, StoreError>> =
        (0..targets.len()).map(|_| Err(StoreError::Unavailable("the partition's shard is shutting down"))).collect();
    for reply in pending {
        if let Ok(list) = reply.await {
            for (i, result) in list {
                out[i] = result;
            }
        }
    }
    out
}

/// Cuts the reads to the response's `max_bytes`, in plan order: the first partition with data
/// always keeps its whole first batch (KIP-74); later ones get what budget is left. Returns the
/// answers, the bytes they hold, and whether any is an error.
fn within_budget(reads: Vec<Result<ReadInfo, StoreError>>, max_bytes: u64) -> (Results<PartitionData>, u64, bool) {
    let mut budget = max_bytes;
    let mut total = 0u64;
    let mut has_error = false;
    let data = reads
        .into_iter()
        .map(|read| {
            let info = read.inspect_err(|_| has_error = true)?;
            let records = info.slice.and_then(|mut slice| {
                let keep = if total == 0 { slice.len.min(budget.max(info.first_batch_len)) } else { slice.len.min(budget) };
                slice.len = keep;
                (keep > 0).then_some(slice)
            });
            let sent = records.as_ref().map_or(0, |s| s.len);
            total += sent;
            budget = budget.saturating_sub(sent);
            Ok(PartitionData {
                high_watermark: info.high_watermark,
                last_stable_offset: info.high_watermark,
                log_start_offset: info.log_start_offset,
                records: records.map(Chunk::File),
                aborted_transactions: Vec::new(),
            })
        })
        .collect();
    (data, total, has_error)
}
