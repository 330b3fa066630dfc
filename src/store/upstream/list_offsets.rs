//! ListOffsets against the upstream: one request per leading broker ([`leaders`]). Partitions
//! whose leader moved or went away (or whose new leader does not know its high watermark yet) are
//! asked again once the view is refreshed, as a Kafka consumer retries its ListOffsets.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::leaders::{self, PerLeader};
use super::{find_partition, means_stale, upstream_error, FoundOffset, OffsetQuery, PartitionRef, Results, StoreError};
use crate::store::OffsetSpec;
use crate::upstream::pool::Pool;

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
    leaders::ask(pool, &Asked { queries, timestamp }).await
}

/// The queries, and the timestamp each asks the upstream for.
struct Asked<'a, F> {
    queries: &'a [OffsetQuery],
    timestamp: F,
}

impl<F: Fn(&OffsetQuery) -> i64> PerLeader for Asked<'_, F> {
    type Request = ListOffsetsRequest;
    type Found = FoundOffset;
    const API: ApiKey = ApiKey::ListOffsets;
    const VERSIONS: (i16, i16) = VERSIONS;

    fn len(&self) -> usize {
        self.queries.len()
    }

    fn partition(&self, position: usize) -> &PartitionRef {
        &self.queries[position].partition
    }

    fn request(&self, positions: &[usize], timeout: Duration) -> ListOffsetsRequest {
        let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
        for &i in positions {
            let q = &self.queries[i];
            topics.entry(q.partition.topic.name.as_str()).or_default().push(
                ListOffsetsPartition::default()
                    .with_partition_index(q.partition.index)
                    .with_current_leader_epoch(-1)
                    .with_timestamp((self.timestamp)(q)),
            );
        }
        // The queries of one ListOffsets share its isolation level.
        let isolation_level = positions.iter().map(|&i| self.queries[i].isolation_level).max().unwrap_or(0);
        ListOffsetsRequest::default()
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
            )
    }

    fn answer(&self, response: &ListOffsetsResponse, position: usize) -> Result<FoundOffset, StoreError> {
        let wanted = &self.queries[position].partition;
        match find_partition(&response.topics, wanted, |t| &t.name, |t| &t.partitions, |p| p.partition_index) {
            None => Err(StoreError::Failed("the upstream's list offsets response lacks a partition")),
            Some(p) if p.error_code != 0 => Err(upstream_error(p.error_code, None)),
            Some(p) if p.offset < 0 => Ok(None),
            Some(p) => Ok(Some((p.offset, p.timestamp))),
        }
    }

    fn worth_asking_again(error: &StoreError) -> bool {
        worth_asking_again(error)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::UpstreamError;

    #[test]
    fn asked_again_only_where_a_moment_later_can_answer() {
        let code = |e: ResponseError| StoreError::Upstream { code: e.code(), message: None, record_errors: Vec::new() };
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
