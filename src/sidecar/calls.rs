//! What the forwarder needs to know of each group API: the groups a request names, how to
//! narrow a request naming several to one (each group may have another coordinator), where its
//! response carries the coordinator-level error, the response Kafka gives for an error, and how
//! the parts of a split request make one response.

use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as DescribedConsumerGroup;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, Request};

/// A group API as the forwarder handles it.
pub(super) trait GroupCall: Request + Clone + 'static
where
    Self::Response: Encodable + Default + 'static,
{
    /// The groups the request names, in order (one for most APIs).
    fn groups(&self, version: i16) -> Vec<String>;

    /// The request narrowed to its `index`-th group (APIs naming several).
    fn only(&self, _version: i16, _index: usize) -> Self {
        self.clone()
    }

    /// The coordinator-level error code of a response to a one-group request.
    fn error(response: &Self::Response, version: i16) -> i16;

    /// The response Kafka gives to this one-group request when it fails with `code`.
    fn failed(&self, version: i16, code: i16) -> Self::Response;

    /// The responses to the parts, in request order, as one.
    fn merge(parts: Vec<Self::Response>) -> Self::Response {
        parts.into_iter().next().unwrap_or_default()
    }

    /// How long the coordinator may legitimately hold the request (JoinGroup waits for the
    /// rebalance), in milliseconds.
    fn held_ms(&self) -> u64 {
        0
    }
}

fn name(group: &GroupId) -> Vec<String> {
    vec![group.0.to_string()]
}

impl GroupCall for JoinGroupRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &JoinGroupResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> JoinGroupResponse {
        JoinGroupResponse::default().with_error_code(code).with_member_id(self.member_id.clone())
    }
    fn held_ms(&self) -> u64 {
        // v0 has no rebalance timeout: the session timeout stands for it.
        self.rebalance_timeout_ms.max(self.session_timeout_ms).max(0) as u64
    }
}

impl GroupCall for SyncGroupRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &SyncGroupResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> SyncGroupResponse {
        SyncGroupResponse::default().with_error_code(code)
    }
}

impl GroupCall for HeartbeatRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &HeartbeatResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> HeartbeatResponse {
        HeartbeatResponse::default().with_error_code(code)
    }
}

impl GroupCall for LeaveGroupRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &LeaveGroupResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> LeaveGroupResponse {
        LeaveGroupResponse::default().with_error_code(code)
    }
}

impl GroupCall for OffsetCommitRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &OffsetCommitResponse, _: i16) -> i16 {
        // A coordinator-level error is given to every partition.
        r.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next().unwrap_or(0)
    }
    fn failed(&self, _: i16, code: i16) -> OffsetCommitResponse {
        let topics = self
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| OffsetCommitResponsePartition::default().with_partition_index(p.partition_index).with_error_code(code))
                    .collect();
                OffsetCommitResponseTopic::default().with_name(t.name.clone()).with_topic_id(t.topic_id).with_partitions(partitions)
            })
            .collect();
        OffsetCommitResponse::default().with_topics(topics)
    }
}

/// OffsetFetch names one group up to v7 and several from v8 (KIP-709).
const OFFSET_FETCH_GROUPS: i16 = 8;

impl GroupCall for OffsetFetchRequest {
    fn groups(&self, version: i16) -> Vec<String> {
        if version >= OFFSET_FETCH_GROUPS {
            self.groups.iter().map(|g| g.group_id.0.to_string()).collect()
        } else {
            name(&self.group_id)
        }
    }
    fn only(&self, version: i16, index: usize) -> Self {
        let mut one = self.clone();
        if version >= OFFSET_FETCH_GROUPS {
            one.groups = self.groups.get(index).cloned().into_iter().collect();
        }
        one
    }
    fn error(r: &OffsetFetchResponse, version: i16) -> i16 {
        match version {
            OFFSET_FETCH_GROUPS.. => r.groups.first().map_or(0, |g| g.error_code),
            2.. => r.error_code,
            // v0–v1 put it on each partition.
            _ => r.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next().unwrap_or(0),
        }
    }
    fn failed(&self, version: i16, code: i16) -> OffsetFetchResponse {
        if version >= OFFSET_FETCH_GROUPS {
            let groups =
                self.groups.iter().map(|g| OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone()).with_error_code(code));
            return OffsetFetchResponse::default().with_groups(groups.collect());
        }
        let topics = self.topics.iter().flatten().map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| OffsetFetchResponsePartition::default().with_partition_index(p).with_committed_offset(-1).with_error_code(code));
            OffsetFetchResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions.collect())
        });
        OffsetFetchResponse::default().with_error_code(code).with_topics(topics.collect())
    }
    fn merge(parts: Vec<OffsetFetchResponse>) -> OffsetFetchResponse {
        let mut merged = OffsetFetchResponse::default();
        for part in parts {
            merged.throttle_time_ms = merged.throttle_time_ms.max(part.throttle_time_ms);
            merged.groups.extend(part.groups);
            // Up to v7 there is one part: its fields are the response.
            if merged.groups.is_empty() {
                merged.error_code = part.error_code;
                merged.topics = part.topics;
            }
        }
        merged
    }
}

impl GroupCall for OffsetDeleteRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &OffsetDeleteResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> OffsetDeleteResponse {
        OffsetDeleteResponse::default().with_error_code(code)
    }
}

impl GroupCall for ConsumerGroupHeartbeatRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        name(&self.group_id)
    }
    fn error(r: &ConsumerGroupHeartbeatResponse, _: i16) -> i16 {
        r.error_code
    }
    fn failed(&self, _: i16, code: i16) -> ConsumerGroupHeartbeatResponse {
        ConsumerGroupHeartbeatResponse::default().with_error_code(code)
    }
}

impl GroupCall for DescribeGroupsRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        self.groups.iter().map(|g| g.0.to_string()).collect()
    }
    fn only(&self, _: i16, index: usize) -> Self {
        self.clone().with_groups(self.groups.get(index).cloned().into_iter().collect())
    }
    fn error(r: &DescribeGroupsResponse, _: i16) -> i16 {
        r.groups.first().map_or(0, |g| g.error_code)
    }
    fn failed(&self, _: i16, code: i16) -> DescribeGroupsResponse {
        let groups = self.groups.iter().map(|g| DescribedGroup::default().with_group_id(g.clone()).with_error_code(code));
        DescribeGroupsResponse::default().with_groups(groups.collect())
    }
    fn merge(parts: Vec<DescribeGroupsResponse>) -> DescribeGroupsResponse {
        let throttle = parts.iter().map(|p| p.throttle_time_ms).max().unwrap_or(0);
        DescribeGroupsResponse::default().with_throttle_time_ms(throttle).with_groups(parts.into_iter().flat_map(|p| p.groups).collect())
    }
}

impl GroupCall for DeleteGroupsRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        self.groups_names.iter().map(|g| g.0.to_string()).collect()
    }
    fn only(&self, _: i16, index: usize) -> Self {
        self.clone().with_groups_names(self.groups_names.get(index).cloned().into_iter().collect())
    }
    fn error(r: &DeleteGroupsResponse, _: i16) -> i16 {
        r.results.first().map_or(0, |g| g.error_code)
    }
    fn failed(&self, _: i16, code: i16) -> DeleteGroupsResponse {
        let results = self.groups_names.iter().map(|g| DeletableGroupResult::default().with_group_id(g.clone()).with_error_code(code));
        DeleteGroupsResponse::default().with_results(results.collect())
    }
    fn merge(parts: Vec<DeleteGroupsResponse>) -> DeleteGroupsResponse {
        let throttle = parts.iter().map(|p| p.throttle_time_ms).max().unwrap_or(0);
        DeleteGroupsResponse::default().with_throttle_time_ms(throttle).with_results(parts.into_iter().flat_map(|p| p.results).collect())
    }
}

impl GroupCall for ConsumerGroupDescribeRequest {
    fn groups(&self, _: i16) -> Vec<String> {
        self.group_ids.iter().map(|g| g.0.to_string()).collect()
    }
    fn only(&self, _: i16, index: usize) -> Self {
        self.clone().with_group_ids(self.group_ids.get(index).cloned().into_iter().collect())
    }
    fn error(r: &ConsumerGroupDescribeResponse, _: i16) -> i16 {
        r.groups.first().map_or(0, |g| g.error_code)
    }
    fn failed(&self, _: i16, code: i16) -> ConsumerGroupDescribeResponse {
        let groups = self.group_ids.iter().map(|g| DescribedConsumerGroup::default().with_group_id(g.clone()).with_error_code(code));
        ConsumerGroupDescribeResponse::default().with_groups(groups.collect())
    }
    fn merge(parts: Vec<ConsumerGroupDescribeResponse>) -> ConsumerGroupDescribeResponse {
        let throttle = parts.iter().map(|p| p.throttle_time_ms).max().unwrap_or(0);
        ConsumerGroupDescribeResponse::default()
            .with_throttle_time_ms(throttle)
            .with_groups(parts.into_iter().flat_map(|p| p.groups).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;

    #[test]
    fn several_groups_are_narrowed_one_by_one_and_merged_in_order() {
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId("a".into()), GroupId("b".into())]);
        assert_eq!(request.groups(5), ["a", "b"]);
        assert_eq!(request.only(5, 1).groups(5), ["b"]);
        let parts = vec![request.only(5, 0).failed(5, 16), request.only(5, 1).failed(5, 15)];
        let merged = DescribeGroupsRequest::merge(parts);
        let codes: Vec<_> = merged.groups.iter().map(|g| (g.group_id.0.to_string(), g.error_code)).collect();
        assert_eq!(codes, [("a".to_string(), 16), ("b".to_string(), 15)]);
    }

    #[test]
    fn offset_fetch_errors_sit_where_each_version_puts_them() {
        let v8 = OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default().with_group_id(GroupId("a".into())),
            OffsetFetchRequestGroup::default().with_group_id(GroupId("b".into())),
        ]);
        assert_eq!(v8.groups(8), ["a", "b"]);
        let failed = v8.only(8, 1).failed(8, 16);
        assert_eq!(OffsetFetchRequest::error(&failed, 8), 16);
        assert_eq!(failed.groups[0].group_id.0.as_str(), "b");
        let v1 = OffsetFetchRequest::default().with_group_id(GroupId("g".into())).with_topics(Some(vec![
            kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(TopicName("t".into()))
                .with_partition_indexes(vec![0, 1]),
        ]));
        let failed = v1.failed(1, 16);
        assert_eq!(OffsetFetchRequest::error(&failed, 1), 16);
        assert_eq!(failed.topics[0].partitions.len(), 2);
        let merged = OffsetFetchRequest::merge(vec![failed]);
        assert_eq!(merged.topics.len(), 1);
    }

    #[test]
    fn a_failed_commit_answers_every_partition() {
        use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
        let request =
            OffsetCommitRequest::default().with_group_id(GroupId("g".into())).with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName("t".into()))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(0),
                    OffsetCommitRequestPartition::default().with_partition_index(3),
                ])]);
        let failed = request.failed(8, 16);
        let partitions: Vec<_> = failed.topics[0].partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
        assert_eq!(partitions, [(0, 16), (3, 16)]);
        assert_eq!(OffsetCommitRequest::error(&failed, 8), 16);
    }
}
