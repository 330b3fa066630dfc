//! Requests that each partition's leader answers by itself (ListOffsets, DeleteRecords): one
//! request per leading broker, sent at once on leased connections. Partitions whose leader moved
//! or went away are asked again once the view is refreshed, within the upstream's request
//! timeout, as a Kafka client retries them.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Request;

use super::{note, split, PartitionRef, Results, StoreError};
use crate::upstream::pool::Pool;
use crate::upstream::{UpstreamError, UpstreamView};

/// What one such request asks of the upstream, item by item.
pub(super) trait PerLeader {
    type Request: Request;
    type Found;
    const API: ApiKey;
    /// The versions corral sends.
    const VERSIONS: (i16, i16);

    /// How many items are asked.
    fn len(&self) -> usize;
    /// The partition of the item at `position`.
    fn partition(&self, position: usize) -> &PartitionRef;
    /// One request for the items at `positions`, all led by one broker.
    fn request(&self, positions: &[usize], timeout: Duration) -> Self::Request;
    /// The answer for the item at `position` in a broker's response.
    fn answer(&self, response: &<Self::Request as Request>::Response, position: usize) -> Result<Self::Found, StoreError>;
    /// Whether asking again once the view is refreshed may answer where `error` did not.
    fn worth_asking_again(error: &StoreError) -> bool;
}

/// Asks each item's leader, again after refreshes while it is worth it; the answers in item order.
pub(super) async fn ask<L: PerLeader>(pool: &Rc<Pool>, asked: &L) -> Results<L::Found> {
    let mut results: Vec<Option<Result<L::Found, StoreError>>> = (0..asked.len()).map(|_| None).collect();
    let mut view = match pool.upstream.view_or_error() {
        Ok(view) => view,
        Err(e) => return (0..asked.len()).map(|_| Err(e.clone().into())).collect(),
    };
    let deadline = Instant::now() + Duration::from_millis(pool.upstream.config.request_timeout_ms);
    let mut positions: Vec<usize> = (0..asked.len()).collect();
    loop {
        ask_once(pool, &view, asked, &positions, &mut results).await;
        positions.retain(|&i| matches!(&results[i], Some(Err(e)) if L::worth_asking_again(e)));
        let left = deadline.saturating_duration_since(Instant::now());
        if positions.is_empty() || left.is_zero() {
            break;
        }
        match pool.upstream.refreshed(view.generation, left).await {
            Some(fresh) if fresh.generation > view.generation => {
                crate::metrics::upstream_retried(L::API);
                view = fresh;
            }
            // No newer view in time: the last error stands.
            _ => break,
        }
    }
    results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Failed("no answer from the upstream")))).collect()
}

/// Asks the leaders of the items at `positions`, as `view` places them, and puts their answers
/// into `results`.
async fn ask_once<L: PerLeader>(
    pool: &Rc<Pool>,
    view: &UpstreamView,
    asked: &L,
    positions: &[usize],
    results: &mut [Option<Result<L::Found, StoreError>>],
) {
    let version = match view.version(L::API, L::VERSIONS) {
        Ok(v) => v,
        Err(e) => {
            positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
            return;
        }
    };
    let placed = split(pool, view, positions.iter().map(|&i| (i, asked.partition(i))));
    for (i, e) in placed.unplaced {
        note(&pool.upstream, &e);
        results[i] = Some(Err(e));
    }
    let timeout = Duration::from_millis(pool.upstream.config.request_timeout_ms);
    let mut sent = Vec::new();
    for (broker, positions) in placed.by_leader {
        let Ok(address) = view.address(broker) else { continue };
        let request = asked.request(&positions, timeout);
        let lease = pool.lease(broker, address);
        let response = lease.send(version, &request);
        sent.push(async move {
            let started = Instant::now();
            let answer = match response {
                Ok(response) => {
                    tokio::time::timeout(timeout, response).await.unwrap_or(Err(UpstreamError::Timeout(timeout.as_millis() as u64)))
                }
                Err(e) => Err(e),
            };
            crate::metrics::upstream_request(broker, L::API, started.elapsed(), answer.is_ok());
            drop(lease);
            (positions, answer)
        });
    }
    for (positions, answer) in join_all(sent).await {
        match answer {
            Err(e) => {
                pool.upstream.mark_stale();
                positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
            }
            Ok(response) => {
                for i in positions {
                    let result = asked.answer(&response, i);
                    if let Err(e) = &result {
                        note(&pool.upstream, e);
                    }
                    results[i] = Some(result);
                }
            }
        }
    }
}
