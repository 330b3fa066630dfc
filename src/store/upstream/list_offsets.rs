//! ListOffsets against the upstream: one request per leading broker, on leased connections.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{note, split, upstream_error, FoundOffset, OffsetQuery, Results, StoreError};
use crate::store::OffsetSpec;
use crate::upstream::pool::Pool;
use crate::upstream::UpstreamError;

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
    let view = match pool.upstream.view_or_error() {
        Ok(view) => view,
        Err(e) => return queries.iter().map(|_| Err(e.clone().into())).collect(),
    };
    // Asking for what corral cannot map (tiered offsets on an old upstream) fails per partition.
    let version = match view.version(ApiKey::ListOffsets, VERSIONS) {
        Ok(v) => v,
        Err(e) => return queries.iter().map(|_| Err(e.clone().into())).collect(),
    };
    let placed = split(pool, &view, queries.iter().enumerate().map(|(i, q)| (i, &q.partition)));
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
    results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Failed("no answer from the upstream")))).collect()
}
