//! Produce to the upstream: one Produce per leading broker, over the ordered connection of the
//! client connection's lane to it, sent again to the new leader while the request's timeout lasts.
//!
//! Batches of idempotent producers are never sent again here: the producer re-sends every batch
//! after a failed one itself, in sequence order. Were corral to re-send one while the client's
//! next request for the same partition went ahead, the upstream would see them out of order
//! (OUT_OF_ORDER_SEQUENCE_NUMBER after an acknowledged batch, which a producer cannot recover
//! from).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, LocalBoxFuture};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{find_partition, note, split, worth_retrying, AppendPlan, Appended, Results, StoreError};
use crate::upstream::pool::Pool;
use crate::upstream::{UpstreamError, UpstreamView};

/// Produce v3 (record batch v2) to v12 (the last that names topics).
const VERSIONS: (i16, i16) = (3, 12);

/// One Produce in flight to one broker: the positions it carries, and its answer.
type Sent = (Vec<usize>, LocalBoxFuture<'static, Result<Option<kafka_protocol::messages::ProduceResponse>, UpstreamError>>);

/// Queues the produces now (so pipelined produces keep their order); the future answers them.
pub(super) fn append(pool: Rc<Pool>, plan: AppendPlan) -> LocalBoxFuture<'static, Results<Appended>> {
    let deadline = Instant::now() + plan.timeout;
    let mut results: Vec<Option<Result<Appended, StoreError>>> = (0..plan.batches.len()).map(|_| None).collect();
    let view = pool.upstream.view_or_error();
    let first = match &view {
        Ok(view) => send(&pool, view, &plan, (0..plan.batches.len()).collect(), &mut results),
        Err(e) => {
            results.iter_mut().for_each(|r| *r = Some(Err(e.clone().into())));
            (Vec::new(), Vec::new())
        }
    };
    Box::pin(async move {
        let (mut sent, mut unplaced) = first;
        let mut view = view.ok();
        loop {
            let mut retry = collect(&pool, &plan, sent, &mut results, deadline).await;
            retry.append(&mut unplaced);
            let (Some(seen), false) = (view.as_ref(), retry.is_empty()) else { break };
            let left = deadline.saturating_duration_since(Instant::now());
            match pool.upstream.refreshed(seen.generation, left).await {
                Some(fresh) if fresh.generation > seen.generation && !left.is_zero() => {
                    crate::metrics::upstream_retried(ApiKey::Produce);
                    (sent, unplaced) = send(&pool, &fresh, &plan, retry, &mut results);
                    view = Some(fresh);
                }
                // No newer view in time: the last error stands.
                _ => break,
            }
        }
        results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Failed("no answer from the upstream")))).collect()
    })
}

/// Sends `positions` to their leaders; records the errors of those it cannot send, and gives
/// those of them that a newer view may place (no leader now, a topic the view does not show
/// yet): a producer waits for its metadata in the same case.
fn send(
    pool: &Rc<Pool>,
    view: &UpstreamView,
    plan: &AppendPlan,
    positions: Vec<usize>,
    results: &mut [Option<Result<Appended, StoreError>>],
) -> (Vec<Sent>, Vec<usize>) {
    let version = match view.version(ApiKey::Produce, VERSIONS) {
        Ok(v) => v,
        Err(e) => {
            positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
            return (Vec::new(), Vec::new());
        }
    };
    let placed = split(pool, view, positions.iter().map(|&i| (i, &plan.batches[i].partition)));
    let mut unplaced = Vec::new();
    for (i, e) in placed.unplaced {
        note(&pool.upstream, &e);
        if worth_retrying(&e) && !sequenced(&plan.batches[i].batch) {
            unplaced.push(i);
        }
        results[i] = Some(Err(e));
    }
    let mut sent = Vec::new();
    for (broker, positions) in
        placed.by_leader.into_iter().flat_map(|(broker, positions)| rounds(plan, positions).into_iter().map(move |r| (broker, r)))
    {
        let Ok(address) = view.address(broker) else { continue };
        let request = produce_request(plan, &positions);
        let connection = pool.ordered(broker, address, plan.lane);
        let started = Instant::now();
        let acks = plan.acks;
        let outcome = connection.send_produce(version, &request).map(|response| -> LocalBoxFuture<'static, _> {
            Box::pin(async move {
                let response = response.await;
                if acks != 0 {
                    crate::metrics::upstream_request(broker, ApiKey::Produce, started.elapsed(), response.is_ok());
                }
                response
            })
        });
        match outcome {
            Ok(response) => sent.push((positions, response)),
            Err(e) => positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into()))),
        }
    }
    (sent, unplaced)
}

/// A Produce carries one batch per partition: a partition given twice goes in a second request,
/// queued after the first on the same connection, so its batches keep their order.
fn rounds(plan: &AppendPlan, positions: Vec<usize>) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for i in positions {
        let p = &plan.batches[i].partition;
        let same = |&j: &usize| plan.batches[j].partition.index == p.index && plan.batches[j].partition.topic.name == p.topic.name;
        match rounds.iter_mut().find(|r| !r.iter().any(same)) {
            Some(round) => round.push(i),
            None => rounds.push(vec![i]),
        }
    }
    rounds
}

fn produce_request(plan: &AppendPlan, positions: &[usize]) -> ProduceRequest {
    let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
    for &i in positions {
        let append = &plan.batches[i];
        topics
            .entry(append.partition.topic.name.as_str())
            .or_default()
            .push(PartitionProduceData::default().with_index(append.partition.index).with_records(Some(append.batch.clone())));
    }
    let timeout_ms = i32::try_from(plan.timeout.as_millis()).unwrap_or(i32::MAX);
    ProduceRequest::default().with_acks(plan.acks).with_timeout_ms(timeout_ms).with_topic_data(
        topics
            .into_iter()
            .map(|(name, partitions)| {
                TopicProduceData::default().with_name(TopicName(StrBytes::from_string(name.to_string()))).with_partition_data(partitions)
            })
            .collect(),
    )
}

/// Waits for what was sent and records each partition's answer; gives the positions worth
/// sending again once the view is refreshed.
async fn collect(
    pool: &Rc<Pool>,
    plan: &AppendPlan,
    sent: Vec<Sent>,
    results: &mut [Option<Result<Appended, StoreError>>],
    deadline: Instant,
) -> Vec<usize> {
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(pool.upstream.config.request_timeout_ms);
    let (positions, responses): (Vec<_>, Vec<_>) = sent.into_iter().unzip();
    let answers = match tokio::time::timeout(left, join_all(responses)).await {
        Ok(answers) => answers,
        Err(_) => positions.iter().map(|_| Err(UpstreamError::Timeout(left.as_millis() as u64))).collect(),
    };
    let mut retry = Vec::new();
    for (positions, answer) in positions.into_iter().zip(answers) {
        match answer {
            Ok(None) => positions.iter().for_each(|&i| results[i] = Some(Ok(Appended { base_offset: -1, log_start_offset: -1 }))),
            Ok(Some(response)) => {
                for &i in &positions {
                    let wanted = &plan.batches[i].partition;
                    let found = find_partition(&response.responses, wanted, |t| &t.name, |t| &t.partition_responses, |p| p.index);
                    let result = match found {
                        None => Err(StoreError::Failed("the upstream's produce response lacks a partition")),
                        Some(p) if p.error_code == 0 => Ok(Appended { base_offset: p.base_offset, log_start_offset: p.log_start_offset }),
                        Some(p) => Err(produce_error(p)),
                    };
                    if let Err(e) = &result {
                        note(&pool.upstream, e);
                        if worth_retrying(e) && !sequenced(&plan.batches[i].batch) {
                            retry.push(i);
                        }
                    }
                    results[i] = Some(result);
                }
            }
            Err(e) => {
                pool.upstream.mark_stale();
                for &i in &positions {
                    results[i] = Some(Err(e.clone().into()));
                    if !sequenced(&plan.batches[i].batch) {
                        retry.push(i);
                    }
                }
            }
        }
    }
    retry
}

/// The upstream's error for a partition of a Produce, with the records it refused one by one
/// (KIP-467), for the client's response.
fn produce_error(p: &PartitionProduceResponse) -> StoreError {
    let record_errors =
        p.record_errors.iter().map(|r| (r.batch_index, r.batch_index_error_message.as_deref().unwrap_or_default().to_string()));
    StoreError::Upstream {
        code: p.error_code,
        message: p.error_message.as_ref().map(|m| m.to_string()),
        record_errors: record_errors.collect(),
    }
}

/// Whether the batch carries a producer id, and so sequence numbers the upstream checks.
fn sequenced(batch: &[u8]) -> bool {
    crate::record_batch::BatchHeader::parse(batch).is_ok_and(|h| h.has_producer_id())
}
