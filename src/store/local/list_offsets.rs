//! Offset lookups: the log's bounds answered on the owning shard; timestamp lookups (reads and
//! decompression) on a blocking thread, a few requests at a time.

use std::rc::Rc;

use crate::runtime::Shard;
use crate::storage::{PartitionLog, TimestampLookup};
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
    let items = queries.iter().map(|q| (&q.partition, q.current_leader_epoch, q.spec)).collect();
    let planned = super::on_owning_shards(shard, items, |partition, spec| Ok(plan(&partition.log.borrow(), spec))).await;
    match run_scans(planned).await {
        Some(results) => results,
        None => (0..queries.len()).map(|_| Err(StoreError::Failed("the timestamp lookup failed"))).collect(),
    }
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

/// Runs every timestamp lookup of the request on one blocking thread; the answers in the order
/// of `planned`, `None` if that thread failed.
async fn run_scans(planned: Vec<Result<Planned, StoreError>>) -> Option<Results<FoundOffset>> {
    let has_scans = planned.iter().any(|p| matches!(p, Ok(Planned::Scan { lookup, .. }) if !lookup.is_empty()));
    let finish = move |planned: Vec<Result<Planned, StoreError>>| -> Results<FoundOffset> {
        planned
            .into_iter()
            .map(|p| match p? {
                Planned::Done(answer) => answer,
                Planned::Scan { lookup, or_end: None } => lookup.run().map_err(StoreError::Storage),
                Planned::Scan { lookup, or_end: Some(end) } => {
                    lookup.run().map(|found| Some((found.map_or(end, |(offset, _)| offset), -1))).map_err(StoreError::Storage)
                }
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
