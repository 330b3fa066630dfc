//! ListOffsets against the upstream: one request per leading broker, on leased connections.
//! Partitions whose leader moved or went away (or whose new leader does not know its high
//! watermark yet) are asked again once the view is refreshed, within the upstream's request
//! timeout, as a Kafka consumer retries its ListOffsets.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{means_stale, note, split, upstream_error, FoundOffset, OffsetQuery, Results, StoreError};
use crate::store::OffsetSpec;
use crate::upstream::pool::Pool;
use crate::upstream::{UpstreamError, UpstreamView};

/// ListOffsets v1 (one offset per partition) to v9.
const VERSIONS: (i16, i16) = (1, 9);

/// What the upstream is asked for: Kafka's timestamp, or nothing (the answer is known).
fn timestamp(spec: OffsetSpec) -> Option<i64> {
    match spec {
        OffsetSpec::Latest => Some(-1),
        OffsetSpec::Earliest => Some(-2),
        OffsetSpec::MaxTimestamp => Some(-3),
        OffsetSpec::EarliestLocal => Some(-4),
        OffsetSpec::LatestTiered => Some(-5),
        OffsetSpec::AtOrAfter(t) | OffsetSpec::AtOrAfterElseEnd(t) => Some(t),
        OffsetSpec::NoMatch => None,
    }
}

pub(super) async fn list_offsets(pool: Rc<Pool>, queries: Vec<OffsetQuery>) -> Results<FoundOffset> {
    let mut results = ask(&pool, &queries, |q| timestamp(q.spec).unwrap_or(-1)).await;
    // ListOffsets v0 by timestamp: the log end when every record is older.
    let at_end: Vec<usize> = (0..queries.len())
        .filter(|&i| matches!(queries[i].spec, OffsetSpec::AtOrAfterElseEnd(_)) && matches!(results[i], Ok(None)))
        .collect();
    if !at_end.is_empty() {
        let again: Vec<OffsetQuery> = at_end.iter().map(|&i| OffsetQuery { spec: OffsetSpec::Latest, ..queries[i].clone() }).collect();
        for (i, found) in at_end.into_iter().zip(ask(&pool, &again, |_| -1).await) {
            results[i] = found;
        }
    }
    for (q, r) in queries.iter().zip(results.iter_mut()) {
        if q.spec == OffsetSpec::NoMatch && r.is_ok() {
            *r = Ok(None);
        }
    }
    results
}

async fn ask(pool: &Rc<Pool>, queries: &[OffsetQuery], timestamp: impl Fn(&OffsetQuery) -> i64) -> Results<FoundOffset> {
    let mut results: Vec<Option<Result<FoundOffset, StoreError>>> = (0..queries.len()).map(|_| None).collect();
    let mut view = match pool.upstream.view_or_error() {
        Ok(view) => view,
        Err(e) => return queries.iter().map(|_| Err(e.clone().into())).collect(),
    };
    let deadline = Instant::now() + Duration::from_millis(pool.upstream.config.request_timeout_ms);
    let mut positions: Vec<usize> = (0..queries.len()).collect();
    loop {
        ask_once(pool, &view, queries, &positions, &timestamp, &mut results).await;
        positions.retain(|&i| matches!(&results[i], Some(Err(e)) if worth_asking_again(e)));
        let left = deadline.saturating_duration_since(Instant::now());
        if positions.is_empty() || left.is_zero() {
            break;
        }
        match pool.upstream.refreshed(view.generation, left).await {
            Some(fresh) if fresh.generation > view.generation => {
                crate::metrics::upstream_retried(ApiKey::ListOffsets);
                view = fresh;
            }
            // No newer view in time: the last error stands.
            _ => break,
        }
    }
    results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Failed("no answer from the upstream")))).collect()
}

/// An error that asking again a moment later answers, as a Kafka consumer's ListOffsets retries:
/// the partition's leader moved, has none yet, cannot be reached, or is new and does not know its
/// high watermark yet (OFFSET_NOT_AVAILABLE). A topic that does not exist is answered at once.
fn worth_asking_again(error: &StoreError) -> bool {
    match error {
        StoreError::Upstream { code, .. } if *code == ResponseError::OffsetNotAvailable.code() => true,
        StoreError::Upstream { code, .. } => means_stale(*code) && *code != ResponseError::UnknownTopicOrPartition.code(),
        StoreError::UpstreamUnavailable(e) => e.may_pass_when_sent_again(),
        _ => false,
    }
}

/// Asks the leaders of the queries at `positions`, as `view` places them, and puts their answers
/// into `results`.
async fn ask_once(
    pool: &Rc<Pool>,
    view: &UpstreamView,
    queries: &[OffsetQuery],
    positions: &[usize],
    timestamp: &impl Fn(&OffsetQuery) -> i64,
    results: &mut [Option<Result<FoundOffset, StoreError>>],
) {
    // Asking for what corral cannot map (tiered offsets on an old upstream) fails per partition.
    let version = match view.version(ApiKey::ListOffsets, VERSIONS) {
        Ok(v) => v,
        Err(e) => {
            positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
            return;
        }
    };
    let placed = split(pool, view, positions.iter().map(|&i| (i, &queries[i].partition)));
    for (i, e) in placed.unplaced {
        note(&pool.upstream, &e);
        results[i] = Some(Err(e));
    }
    let timeout = Duration::from_millis(pool.upstream.config.request_timeout_ms);
    let mut asked = Vec::new();
    for (broker, positions) in placed.by_leader {
        let Ok(address) = view.address(broker) else { continue };
        let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
        for &i in &positions {
            let q = &queries[i];
            topics.entry(q.partition.topic.name.as_str()).or_default().push(
                ListOffsetsPartition::default()
                    .with_partition_index(q.partition.index)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp(q)),
            );
        }
        // The queries of one ListOffsets share its isolation level.
        let isolation_level = positions.iter().map(|&i| queries[i].isolation_level).max().unwrap_or(0);
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_isolation_level(isolation_level)
            .with_timeout_ms(timeout.as_millis() as i32)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(name.to_string())))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let lease = pool.lease(broker, address);
        let sent = lease.send(version, &request);
        asked.push(async move {
            let started = Instant::now();
            let answer = match sent {
                Ok(response) => {
                    tokio::time::timeout(timeout, response).await.unwrap_or(Err(UpstreamError::Timeout(timeout.as_millis() as u64)))
                }
                Err(e) => Err(e),
            };
            crate::metrics::upstream_request(broker, ApiKey::ListOffsets, started.elapsed(), answer.is_ok());
            drop(lease);
            (positions, answer)
        });
    }
    for (positions, answer) in join_all(asked).await {
        match answer {
            Err(e) => {
                pool.upstream.mark_stale();
                positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
            }
            Ok(response) => {
                for &i in &positions {
                    let wanted = &queries[i].partition;
                    let found = response
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == wanted.topic.name)
                        .flat_map(|t| &t.partitions)
                        .find(|p| p.partition_index == wanted.index);
                    let result = match found {
                        None => Err(StoreError::Failed("the upstream's list offsets response lacks a partition")),
                        Some(p) if p.error_code != 0 => Err(upstream_error(p.error_code, None)),
                        Some(p) if p.offset < 0 => Ok(None),
                        Some(p) => Ok(Some((p.offset, p.timestamp))),
                    };
                    if let Err(e) = &result {
                        note(&pool.upstream, e);
                    }
                    results[i] = Some(result);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_again_only_where_a_moment_later_can_answer() {
        let code = |e: ResponseError| StoreError::Upstream { code: e.code(), message: None };
        for again in [
            code(ResponseError::NotLeaderOrFollower),
            code(ResponseError::LeaderNotAvailable),
            code(ResponseError::OffsetNotAvailable),
            StoreError::UpstreamUnavailable(UpstreamError::Disconnected("b1".into())),
        ] {
            assert!(worth_asking_again(&again), "{again:?}");
        }
        for answered in [
            code(ResponseError::UnknownTopicOrPartition),
            code(ResponseError::OffsetOutOfRange),
            StoreError::UpstreamUnavailable(UpstreamError::Timeout(30_000)),
            StoreError::UpstreamUnavailable(UpstreamError::Unsupported(ApiKey::ListOffsets)),
        ] {
            assert!(!worth_asking_again(&answered), "{answered:?}");
        }
    }
}
