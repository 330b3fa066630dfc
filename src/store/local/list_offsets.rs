//! Offset lookups: the log's bounds answered on the owning shard; timestamp lookups (reads and
//! decompression) on a blocking thread, a few requests at a time.

use std::collections::HashMap;
use std::rc::Rc;

use uuid::Uuid;

use crate::runtime::{Shard, ShardId};
use crate::storage::{PartitionLog, TimestampLookup};
use crate::store::placement::local_shard;
use crate::store::{FoundOffset, OffsetQuery, OffsetSpec, Results, StoreError};

/// Requests whose timestamp lookups run at once on the node (the others wait).
const MAX_CONCURRENT_LOOKUPS: usize = 4;
static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONCURRENT_LOOKUPS);

type Lookup = Result<FoundOffset, StoreError>;

/// A query's answer as its owning shard sees it: complete, or a timestamp lookup still to run
/// (kept off the shards: see [`TimestampLookup`]).
#[derive(Debug)]
enum Planned {
    Done(Lookup),
    /// `or_end`: the answer when nothing matches.
    Scan {
        lookup: TimestampLookup,
        or_end: Option<i64>,
    },
}

pub(super) async fn list_offsets(shard: &Rc<Shard>, queries: Vec<OffsetQuery>) -> Results<FoundOffset> {
    let node = &shard.node;
    let mut jobs: HashMap<ShardId, Vec<(Uuid, i32, OffsetSpec)>> = HashMap::new();
    let slots: Vec<Result<(ShardId, usize), StoreError>> = queries
        .into_iter()
        .map(|q| {
            let target = local_shard(node, &q.partition, q.current_leader_epoch)?;
            let queue = jobs.entry(target).or_default();
            queue.push((q.partition.topic.id, q.partition.index, q.spec));
            Ok((target, queue.len() - 1))
        })
        .collect();

    let mut replies = HashMap::with_capacity(jobs.len());
    for (target, list) in jobs {
        let reply = node.mesh.call(shard, target, move |owner| {
            list.into_iter()
                .map(|(id, partition, spec)| match owner.partition(id, partition) {
                    Some(p) => plan(&p.log.borrow(), spec),
                    None => Planned::Done(Err(StoreError::UnknownPartition)),
                })
                .collect::<Vec<Planned>>()
        });
        replies.insert(target, reply.await);
    }
    let mut planned: Vec<(ShardId, Vec<Planned>)> = Vec::with_capacity(replies.len());
    for (target, reply) in replies {
        planned.push((target, reply.await.unwrap_or_default()));
    }
    let mut results = run_scans(planned).await;
    slots
        .into_iter()
        .map(|slot| {
            let (target, position) = slot?;
            let Some(results) = results.as_mut() else { return Err(StoreError::Failed("the timestamp lookup failed")) };
            let answer = results.get_mut(&target).and_then(|list| list.get_mut(position));
            answer.map_or(Err(StoreError::Unavailable("the partition's shard is shutting down")), |a| {
                std::mem::replace(a, Err(StoreError::UnknownPartition))
            })
        })
        .collect()
}

/// What answers a query: `(offset, timestamp)`, or `None` when no record matches.
fn plan(log: &PartitionLog, spec: OffsetSpec) -> Planned {
    match spec {
        OffsetSpec::Latest => Planned::Done(Ok(Some((log.log_end_offset(), -1)))),
        OffsetSpec::Earliest | OffsetSpec::EarliestLocal => Planned::Done(Ok(Some((log.log_start_offset(), -1)))),
        OffsetSpec::MaxTimestamp => Planned::Scan { lookup: log.max_timestamp_lookup(), or_end: None },
        // No tiered storage: nothing is tiered.
        OffsetSpec::LatestTiered | OffsetSpec::NoMatch => Planned::Done(Ok(None)),
        OffsetSpec::AtOrAfter(ts) => Planned::Scan { lookup: log.timestamp_lookup(ts), or_end: None },
        OffsetSpec::AtOrAfterElseEnd(ts) => Planned::Scan { lookup: log.timestamp_lookup(ts), or_end: Some(log.log_end_offset()) },
    }
}

/// Runs every timestamp lookup of the request on one blocking thread and returns each shard's
/// answers in its job order; `None` if that thread failed.
async fn run_scans(planned: Vec<(ShardId, Vec<Planned>)>) -> Option<HashMap<ShardId, Vec<Lookup>>> {
    let has_scans = planned.iter().any(|(_, list)| list.iter().any(|p| matches!(p, Planned::Scan { lookup, .. } if !lookup.is_empty())));
    let finish = move |planned: Vec<(ShardId, Vec<Planned>)>| -> HashMap<ShardId, Vec<Lookup>> {
        planned
            .into_iter()
            .map(|(target, list)| {
                let answers = list
                    .into_iter()
                    .map(|p| match p {
                        Planned::Done(answer) => answer,
                        Planned::Scan { lookup, or_end: None } => lookup.run().map_err(StoreError::Storage),
                        Planned::Scan { lookup, or_end: Some(end) } => {
                            lookup.run().map(|found| Some((found.map_or(end, |(offset, _)| offset), -1))).map_err(StoreError::Storage)
                        }
                    })
                    .collect();
                (target, answers)
            })
            .collect()
    };
    if !has_scans {
        return Some(finish(planned));
    }
    // Each lookup may hold a decompressed batch (up to 32 MiB): a few at a time on the node, the
    // rest wait their turn rather than start threads and buffers without bound.
    let Ok(_permit) = LOOKUPS.acquire().await else { return None };
    match tokio::task::spawn_blocking(move || finish(planned)).await {
        Ok(results) => Some(results),
        Err(e) => {
            tracing::error!(error = %e, "timestamp lookup failed");
            None
        }
    }
}
