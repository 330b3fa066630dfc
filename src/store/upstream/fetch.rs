//! Fetch from the upstream: one Fetch per leading broker, each on a leased connection (a long
//! poll holds its connection), answered as soon as the answers in hand satisfy `min_bytes` or
//! every broker has answered. A broker still polling when the others have answered enough is
//! left to finish in the background (what it sends is dropped; its connection goes back to the
//! pool) and its partitions are read again at once, without waiting. Each broker is asked for the
//! whole `max_bytes`; the merged answer is then cut to it in request order, as Kafka does.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{note, split, upstream_error, FetchPlan, PartitionData, Results, StoreError};
use crate::chunk::Chunk;
use crate::upstream::fetch_response::FetchAnswer;
use crate::upstream::pool::{Lease, Pool};
use crate::upstream::UpstreamError;

/// Fetch v4 (record batch v2, last stable offset) to v12 (the last that names topics).
const VERSIONS: (i16, i16) = (4, 12);

pub(super) async fn fetch(pool: Rc<Pool>, plan: FetchPlan) -> Results<PartitionData> {
    let mut results: Vec<Option<Result<PartitionData, StoreError>>> = (0..plan.partitions.len()).map(|_| None).collect();
    let view = match pool.upstream.view_or_error() {
        Ok(view) => view,
        Err(e) => return plan.partitions.iter().map(|_| Err(e.clone().into())).collect(),
    };
    let version = match view.version(ApiKey::Fetch, VERSIONS) {
        Ok(v) => v,
        Err(e) => return plan.partitions.iter().map(|_| Err(e.clone().into())).collect(),
    };
    let placed = split(&pool, &view, plan.partitions.iter().enumerate().map(|(i, p)| (i, &p.partition)));
    for (i, e) in placed.unplaced {
        note(&pool.upstream, &e);
        results[i] = Some(Err(e));
    }
    let round = Round { pool: &pool, view: &view, version, plan: &plan };
    let enough = round.run(placed.by_leader, plan.max_wait, plan.min_bytes, &mut results).await;
    if enough {
        // Brokers still long-polling when the others had enough: their partitions are read again
        // without waiting, so the answer holds what they have now.
        let waiting: Vec<usize> = (0..results.len()).filter(|&i| results[i].is_none()).collect();
        let placed = split(&pool, &view, waiting.into_iter().map(|i| (i, &plan.partitions[i].partition)));
        round.run(placed.by_leader, Duration::ZERO, 0, &mut results).await;
    }
    let mut results: Results<PartitionData> =
        results.into_iter().map(|r| r.unwrap_or(Err(StoreError::Failed("no answer from the upstream")))).collect();
    keep_within(plan.max_bytes, &mut results);
    results
}

/// One Fetch to each broker, for the partitions it leads.
struct Round<'a> {
    pool: &'a Rc<Pool>,
    view: &'a crate::upstream::UpstreamView,
    version: i16,
    plan: &'a FetchPlan,
}

impl Round<'_> {
    /// Records each broker's answer; returns early (true) once `min_bytes` are in hand while
    /// some broker is still polling, which is left to finish in the background.
    async fn run(
        &self,
        by_leader: BTreeMap<i32, Vec<usize>>,
        max_wait: Duration,
        min_bytes: u64,
        results: &mut [Option<Result<PartitionData, StoreError>>],
    ) -> bool {
        let pool = self.pool;
        let wait_at_most = max_wait + Duration::from_millis(pool.upstream.config.request_timeout_ms);
        let mut polls = FuturesUnordered::new();
        for (broker, positions) in by_leader {
            let Ok(address) = self.view.address(broker) else { continue };
            let lease = pool.lease(broker, address);
            let request = fetch_request(self.plan, &positions, max_wait, min_bytes);
            let sent = lease.send_fetch(self.version, &request);
            let started = Instant::now();
            polls.push(async move {
                let answer = match sent {
                    Ok(response) => match tokio::time::timeout(wait_at_most, response).await {
                        Ok(answer) => answer,
                        Err(_) => Err(UpstreamError::Timeout(wait_at_most.as_millis() as u64)),
                    },
                    Err(e) => Err(e),
                };
                crate::metrics::upstream_request(broker, ApiKey::Fetch, started.elapsed(), answer.is_ok());
                (positions, answer, lease)
            });
        }
        let mut bytes = 0u64;
        while let Some((positions, answer, lease)) = polls.next().await {
            drop::<Lease>(lease);
            match answer {
                Ok(response) => bytes += record(pool, self.plan, &positions, response, results),
                Err(e) => {
                    pool.upstream.mark_stale();
                    positions.iter().for_each(|&i| results[i] = Some(Err(e.clone().into())));
                }
            }
            // A round that does not wait (max_wait 0) waits for every broker.
            if !max_wait.is_zero() && bytes >= min_bytes.max(1) && !polls.is_empty() {
                tokio::task::spawn_local(async move { while polls.next().await.is_some() {} });
                return true;
            }
        }
        false
    }
}

/// The response's byte budget across partitions, in request order, as Kafka keeps it (KIP-74):
/// the first partition with records keeps at least its first whole batch; each later one keeps
/// what the budget leaves, cut at that byte (a client skips a partial last batch).
fn keep_within(max_bytes: u64, results: &mut Results<PartitionData>) {
    let mut budget = max_bytes;
    let mut first = true;
    for data in results.iter_mut().filter_map(|r| r.as_mut().ok()) {
        let Some(records) = data.records.take() else { continue };
        let len = records.len();
        let mut keep = len.min(budget);
        if first {
            keep = keep.max(first_batch_len(records_start(&records)).min(len));
        }
        budget = budget.saturating_sub(keep);
        if keep > 0 {
            first = false;
        }
        data.records = (keep > 0).then(|| match records {
            Chunk::Bytes(bytes) => Chunk::Bytes(bytes.slice(..keep as usize)),
            Chunk::Pipe(mut piped) => {
                piped.truncate(keep);
                Chunk::Pipe(piped)
            }
            file @ Chunk::File(_) => file,
        });
    }
}

/// The first bytes of records from the upstream (a piped set keeps its first batch's header in
/// memory).
fn records_start(records: &Chunk) -> &[u8] {
    match records {
        Chunk::Bytes(bytes) => bytes,
        Chunk::Pipe(piped) => piped.head(),
        Chunk::File(_) => &[],
    }
}

/// The length of the record batch the bytes start with (its header's length field + 12).
fn first_batch_len(records: &[u8]) -> u64 {
    match records.get(8..12) {
        Some(len) => u64::from(u32::from_be_bytes(len.try_into().expect("four bytes"))) + 12,
        None => records.len() as u64,
    }
}

/// The wait and minimum a Fetch carries upstream. "Answer now" goes as a 1 ms wait for 0 bytes,
/// never as a 0 ms wait: Kafka answers both at once (0 bytes are always there), while Tansu 0.6
/// skips its read loop for a 0 ms wait and answers with no partitions at all.
fn upstream_wait(max_wait: Duration, min_bytes: u64) -> (u64, u64) {
    match max_wait.as_millis() as u64 {
        0 => (1, 0),
        ms => (ms, min_bytes),
    }
}

fn fetch_request(plan: &FetchPlan, positions: &[usize], max_wait: Duration, min_bytes: u64) -> FetchRequest {
    let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for &i in positions {
        let p = &plan.partitions[i];
        topics.entry(p.partition.topic.name.as_str()).or_default().push(
            FetchPartition::default()
                .with_partition(p.partition.index)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(p.fetch_offset)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(i32::try_from(p.max_bytes).unwrap_or(i32::MAX)),
        );
    }
    let clamp = |v: u64| i32::try_from(v).unwrap_or(i32::MAX);
    let (wait_ms, min_bytes) = upstream_wait(max_wait, min_bytes);
    FetchRequest::default()
        .with_max_wait_ms(clamp(wait_ms))
        .with_min_bytes(clamp(min_bytes))
        .with_max_bytes(clamp(plan.max_bytes))
        .with_isolation_level(plan.isolation_level)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    FetchTopic::default().with_topic(TopicName(StrBytes::from_string(name.to_string()))).with_partitions(partitions)
                })
                .collect(),
        )
}

/// Records each partition's answer; gives the bytes of records received.
fn record(
    pool: &Pool,
    plan: &FetchPlan,
    positions: &[usize],
    mut response: FetchAnswer,
    results: &mut [Option<Result<PartitionData, StoreError>>],
) -> u64 {
    if response.error_code != 0 {
        let e = upstream_error(response.error_code, None);
        note(&pool.upstream, &e);
        for &i in positions {
            results[i] = Some(Err(upstream_error(response.error_code, None)));
        }
        return 0;
    }
    let mut bytes = 0;
    for &i in positions {
        let wanted = &plan.partitions[i].partition;
        let found = response
            .topics
            .iter_mut()
            .filter(|t| t.name == wanted.topic.name)
            .flat_map(|t| &mut t.partitions)
            .find(|p| p.index == wanted.index);
        let result = match found {
            None => Err(StoreError::Failed("the upstream's fetch response lacks a partition")),
            Some(p) if p.error_code != 0 => Err(upstream_error(p.error_code, None)),
            Some(p) => {
                let records = p.records.take();
                bytes += records.as_ref().map_or(0, Chunk::len);
                Ok(PartitionData {
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    records,
                    aborted_transactions: std::mem::take(&mut p.aborted_transactions),
                })
            }
        };
        if let Err(e) = &result {
            note(&pool.upstream, e);
        }
        results[i] = Some(result);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn answer_now_goes_upstream_as_a_one_millisecond_wait_for_nothing() {
        assert_eq!(upstream_wait(Duration::ZERO, 1), (1, 0));
        assert_eq!(upstream_wait(Duration::from_micros(900), 500), (1, 0));
        assert_eq!(upstream_wait(Duration::from_millis(500), 1), (500, 1));
    }

    /// `n` record batches of `len` bytes each (only the length field matters here).
    fn batches(n: usize, len: usize) -> Bytes {
        let mut out = Vec::new();
        for _ in 0..n {
            let mut b = vec![0u8; len];
            b[8..12].copy_from_slice(&((len - 12) as u32).to_be_bytes());
            out.extend(b);
        }
        Bytes::from(out)
    }

    fn data(records: Option<Bytes>) -> Result<PartitionData, StoreError> {
        Ok(PartitionData {
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            records: records.map(Chunk::Bytes),
            ..Default::default()
        })
    }

    fn kept(results: &[Result<PartitionData, StoreError>]) -> Vec<usize> {
        results
            .iter()
            .map(|r| match &r.as_ref().unwrap().records {
                Some(Chunk::Bytes(b)) => b.len(),
                _ => 0,
            })
            .collect()
    }

    #[test]
    fn the_first_partition_with_records_keeps_its_first_batch_whole() {
        let mut results = vec![data(None), data(Some(batches(3, 100))), data(Some(batches(2, 100)))];
        keep_within(1, &mut results);
        assert_eq!(kept(&results), vec![0, 100, 0]);
    }

    #[test]
    fn later_partitions_get_what_the_budget_leaves_cut_at_that_byte() {
        let mut results = vec![data(Some(batches(2, 100))), data(Some(batches(2, 100))), data(Some(batches(1, 100)))];
        keep_within(350, &mut results);
        assert_eq!(kept(&results), vec![200, 150, 0]);
        // Offsets are kept for a partition cut to nothing.
        assert_eq!(results[2].as_ref().unwrap().high_watermark, 10);
    }

    #[test]
    fn errors_and_empty_partitions_take_nothing_from_the_budget() {
        let mut results = vec![Err(StoreError::UnknownPartition), data(None), data(Some(batches(2, 100)))];
        keep_within(1 << 20, &mut results);
        assert!(results[0].is_err());
        assert_eq!(kept(&results[1..]), vec![0, 200]);
    }
}
