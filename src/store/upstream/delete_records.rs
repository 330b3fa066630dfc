//! DeleteRecords against the upstream: one request per leading broker ([`leaders`]), asked again
//! after a leader moved. Moving a log start twice to the same offset is harmless, so a request
//! whose answer was lost can be sent again.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::leaders::{self, PerLeader};
use super::{find_partition, means_stale, upstream_error, Deletion, PartitionRef, Results, StoreError};
use crate::upstream::pool::Pool;

pub(super) async fn delete_records(pool: &Rc<Pool>, deletions: &[Deletion]) -> Results<i64> {
    leaders::ask(pool, &Asked(deletions)).await
}

struct Asked<'a>(&'a [Deletion]);

impl PerLeader for Asked<'_> {
    type Request = DeleteRecordsRequest;
    type Found = i64;
    const API: ApiKey = ApiKey::DeleteRecords;
    const VERSIONS: (i16, i16) = (0, 2);

    fn len(&self) -> usize {
        self.0.len()
    }

    fn partition(&self, position: usize) -> &PartitionRef {
        &self.0[position].partition
    }

    fn request(&self, positions: &[usize], timeout: Duration) -> DeleteRecordsRequest {
        let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
        for &i in positions {
            let d = &self.0[i];
            topics
                .entry(d.partition.topic.name.as_str())
                .or_default()
                .push(DeleteRecordsPartition::default().with_partition_index(d.partition.index).with_offset(d.offset));
        }
        DeleteRecordsRequest::default().with_timeout_ms(timeout.as_millis() as i32).with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    DeleteRecordsTopic::default().with_name(TopicName(StrBytes::from_string(name.to_string()))).with_partitions(partitions)
                })
                .collect(),
        )
    }

    fn answer(&self, response: &DeleteRecordsResponse, position: usize) -> Result<i64, StoreError> {
        let wanted = &self.0[position].partition;
        match find_partition(&response.topics, wanted, |t| &t.name, |t| &t.partitions, |p| p.partition_index) {
            None => Err(StoreError::Failed("the upstream's delete records response lacks a partition")),
            Some(p) if p.error_code != 0 => Err(upstream_error(p.error_code, None)),
            Some(p) => Ok(p.low_watermark),
        }
    }

    /// The partition's leader moved or has none yet, or its broker could not be reached. A topic
    /// the upstream does not know is answered at once.
    fn worth_asking_again(error: &StoreError) -> bool {
        match error {
            StoreError::Upstream { code, .. } => means_stale(*code) && *code != ResponseError::UnknownTopicOrPartition.code(),
            StoreError::UpstreamUnavailable(e) => e.may_pass_when_sent_again(),
            _ => false,
        }
    }
}
