//! The upstream store: partition data in an existing Kafka cluster (`storage.backend =
//! "upstream"`).
//!
//! Each request is split by the upstream broker that leads each partition (from the node's
//! [`UpstreamView`]), sent over this shard's [`Pool`], and the answers are put back in the order
//! asked. Record batches pass through as the bytes they are, in both directions. Leader hints of
//! the upstream's responses (KIP-951) are not passed on: corral names its own nodes in Metadata.
//!
//! An upstream answer that says the view is stale (a leader moved, a topic is new or gone, a
//! broker is unreachable) marks it so; Produce and ListOffsets then wait for the refresh and ask
//! again, within their timeout, as a Kafka producer and consumer would; Fetch gives the client a
//! retriable error at once, which it retries after its next Metadata (a fetch's own wait is the
//! client's `max_wait_ms`).

mod append;
mod delete_records;
mod fetch;
mod leaders;
mod list_offsets;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use futures_util::future::LocalBoxFuture;
use kafka_protocol::ResponseError;

use super::local::LocalStore;
use super::placement::{self, Location};
use super::{
    AppendPlan, Appended, Deletion, FetchPlan, FoundOffset, OffsetQuery, PartitionData, PartitionRef, PartitionStore, Results, StoreError,
};
use crate::upstream::pool::Pool;
use crate::upstream::{Upstream, UpstreamView};

#[derive(Debug)]
pub struct UpstreamStore {
    pool: Rc<Pool>,
    /// corral's own topic, `__consumer_offsets`, in local segments.
    local: LocalStore,
}

impl UpstreamStore {
    pub fn new(node: Arc<crate::node::Node>, upstream: Arc<Upstream>, local: LocalStore) -> UpstreamStore {
        UpstreamStore { pool: Rc::new(Pool::new(node, upstream)), local }
    }

    pub fn pool(&self) -> &Rc<Pool> {
        &self.pool
    }
}

impl PartitionStore for UpstreamStore {
    fn append(&self, plan: AppendPlan) -> LocalBoxFuture<'_, LocalBoxFuture<'static, Results<Appended>>> {
        // Produce refuses internal topics before the store is asked.
        Box::pin(std::future::ready(append::append(self.pool.clone(), plan)))
    }

    fn fetch(&self, plan: FetchPlan) -> LocalBoxFuture<'static, Results<PartitionData>> {
        let FetchPlan { partitions, max_bytes, min_bytes, max_wait, isolation_level } = plan;
        let (local, remote) = divide(partitions, |p| placement::stays_local(&p.partition));
        let with = |partitions| FetchPlan { partitions, max_bytes, min_bytes, max_wait, isolation_level };
        let local_read = (!local.1.is_empty()).then(|| self.local.fetch(with(local.1)));
        read_both((local.0, local_read), (remote.0, fetch::fetch(self.pool.clone(), with(remote.1))))
    }

    fn list_offsets(&self, queries: Vec<OffsetQuery>) -> LocalBoxFuture<'static, Results<FoundOffset>> {
        let (local, remote) = divide(queries, |q| placement::stays_local(&q.partition));
        let local_read = (!local.1.is_empty()).then(|| self.local.list_offsets(local.1));
        read_both((local.0, local_read), (remote.0, list_offsets::list_offsets(self.pool.clone(), remote.1)))
    }

    fn delete_records(&self, deletions: Vec<Deletion>) -> LocalBoxFuture<'static, Results<i64>> {
        // DeleteRecords refuses internal topics before the store is asked.
        let pool = self.pool.clone();
        Box::pin(async move { delete_records::delete_records(&pool, &deletions).await })
    }
}

/// Reads the local part (if any) and the upstream part at once; their results in the order asked.
fn read_both<T: 'static>(
    local: (Vec<usize>, Option<LocalBoxFuture<'static, Results<T>>>),
    remote: (Vec<usize>, impl std::future::Future<Output = Results<T>> + 'static),
) -> LocalBoxFuture<'static, Results<T>> {
    Box::pin(async move {
        let local_read = async move {
            match local.1 {
                Some(read) => read.await,
                None => Vec::new(),
            }
        };
        let (local_results, remote_results) = futures_util::future::join(local_read, remote.1).await;
        merge((local.0, local_results), (remote.0, remote_results))
    })
}

/// Items (with their positions) for which `pred` holds, and the others.
type Part<T> = (Vec<usize>, Vec<T>);

fn divide<T>(items: Vec<T>, pred: impl Fn(&T) -> bool) -> (Part<T>, Part<T>) {
    let (mut yes, mut no): (Part<T>, Part<T>) = Default::default();
    for (i, item) in items.into_iter().enumerate() {
        let part = if pred(&item) { &mut yes } else { &mut no };
        part.0.push(i);
        part.1.push(item);
    }
    (yes, no)
}

/// The results of both parts, back in the order of the items.
fn merge<T>(a: Part<Result<T, StoreError>>, b: Part<Result<T, StoreError>>) -> Results<T> {
    let mut out: Vec<(usize, Result<T, StoreError>)> = a.0.into_iter().zip(a.1).chain(b.0.into_iter().zip(b.1)).collect();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Error codes of an upstream partition that mean the view is stale: the partition moved, is
/// new, or is gone.
fn means_stale(code: i16) -> bool {
    [
        ResponseError::NotLeaderOrFollower,
        ResponseError::UnknownTopicOrPartition,
        ResponseError::LeaderNotAvailable,
        ResponseError::FencedLeaderEpoch,
        ResponseError::UnknownLeaderEpoch,
        ResponseError::UnknownTopicId,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// The answer for `wanted` in a response's lists of partitions by topic.
fn find_partition<'a, T, P>(
    topics: &'a [T],
    wanted: &PartitionRef,
    name: impl Fn(&T) -> &str,
    partitions: impl Fn(&'a T) -> &'a [P],
    index: impl Fn(&P) -> i32,
) -> Option<&'a P> {
    topics.iter().filter(|t| name(t) == wanted.topic.name).flat_map(partitions).find(|p| index(p) == wanted.index)
}

/// A partition's error as the upstream gave it.
fn upstream_error(code: i16, message: Option<&kafka_protocol::protocol::StrBytes>) -> StoreError {
    StoreError::Upstream { code, message: message.map(|m| m.to_string()), record_errors: Vec::new() }
}

/// The positions of `partitions`, grouped by the upstream broker that leads each; those the view
/// cannot place get their error in `unplaced`.
struct Split {
    by_leader: BTreeMap<i32, Vec<usize>>,
    unplaced: Vec<(usize, StoreError)>,
}

fn split<'a>(pool: &Pool, view: &UpstreamView, partitions: impl Iterator<Item = (usize, &'a PartitionRef)>) -> Split {
    let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    let mut unplaced = Vec::new();
    for (position, p) in partitions {
        let leader = || view.partition(&p.topic.name, p.index).map(|up| up.leader);
        match placement::locate_in_front(&pool.node, p, leader) {
            Ok(Location::Upstream(broker)) if view.brokers.contains_key(&broker) => by_leader.entry(broker).or_default().push(position),
            Ok(_) => unplaced.push((
                position,
                StoreError::Upstream { code: ResponseError::LeaderNotAvailable.code(), message: None, record_errors: Vec::new() },
            )),
            Err(e) => unplaced.push((position, e)),
        }
    }
    Split { by_leader, unplaced }
}

/// Marks the view stale when an error says so.
fn note(upstream: &Upstream, error: &StoreError) {
    match error {
        StoreError::Upstream { code, .. } if means_stale(*code) => upstream.mark_stale(),
        StoreError::UnknownPartition | StoreError::UpstreamUnavailable(_) => upstream.mark_stale(),
        _ => {}
    }
}

/// An error worth sending the produce again for, once the view is refreshed.
fn worth_retrying(error: &StoreError) -> bool {
    match error {
        StoreError::Upstream { code, .. } => means_stale(*code),
        StoreError::UpstreamUnavailable(e) => e.may_pass_when_sent_again(),
        StoreError::UnknownPartition => true,
        _ => false,
    }
}
