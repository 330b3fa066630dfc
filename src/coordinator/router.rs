//! The group coordinator as the group APIs see it: one call per operation, typed requests and
//! answers, wherever the coordinator runs.
//!
//! Every call works in two steps, as handlers do: the outer future completes once the request is
//! queued where it will be served (so pipelined requests of one connection keep their order), the
//! inner one with the answer. The error is the coordinator-level one a client acts on
//! (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); everything else
//! is in the answer, as Kafka puts it in the response.
//!
//! Implementations: the coordinator partitions on this node's shards
//! ([`crate::runtime::groups::LocalGroups`]).

use futures_util::future::LocalBoxFuture;
use kafka_protocol::ResponseError;

use super::admin::{DescribedGroup, ListedGroup};
use super::classic::{HeartbeatRequest, LeaveResult};
use super::consumer::DescribedConsumerGroup;
use super::consumer_group::{ConsumerHeartbeat, HeartbeatAnswer};
use super::offsets::{CommitRequest, FetchedOffset};
use super::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use crate::security::Caller;

/// An answer still to come.
pub type Answer<T> = LocalBoxFuture<'static, Result<T, ResponseError>>;

/// A request being queued; then its answer.
pub type Queued<'a, T> = LocalBoxFuture<'a, Answer<T>>;

/// `(topic, partitions)` pairs, as OffsetFetch and OffsetDelete name them.
pub type TopicPartitionList = Vec<(String, Vec<i32>)>;

/// Committed offsets by topic, as OffsetFetch answers them.
pub type FetchedOffsets = Vec<(String, Vec<FetchedOffset>)>;

/// A group's committed offsets, or the group-level error OffsetFetch answers.
pub type OffsetsOrError = Result<FetchedOffsets, ResponseError>;

/// `caller` in [`GroupRouter::join`] and [`GroupRouter::consumer_heartbeat`]: who sent the
/// request, and from where. Should it resolve the group's regex subscriptions, they match only the
/// topics it may describe (as in Kafka, where the request that refreshes them decides for the
/// whole group).
pub trait GroupRouter: std::fmt::Debug {
    fn join(&self, request: JoinRequest, caller: Caller) -> Queued<'_, JoinResult>;
    fn sync(&self, request: SyncRequest) -> Queued<'_, SyncResult>;
    /// The heartbeat's error code.
    fn heartbeat(&self, request: HeartbeatRequest) -> Queued<'_, i16>;
    fn leave(&self, group_id: String, members: Vec<(String, Option<String>)>) -> Queued<'_, LeaveResult>;
    /// One code per offset of the request, in order.
    fn commit(&self, request: CommitRequest) -> Queued<'_, Vec<i16>>;
    /// The committed offsets of `topics` (all when `None`), after checking the KIP-848 member
    /// and epoch when named.
    fn fetch_offsets(
        &self,
        group_id: String,
        topics: Option<TopicPartitionList>,
        member_id: Option<String>,
        member_epoch: i32,
    ) -> Queued<'_, OffsetsOrError>;
    /// One code per partition of each topic, in order; or the group-level error.
    fn delete_offsets(&self, group_id: String, topics: TopicPartitionList) -> Queued<'_, Result<Vec<Vec<i16>>, ResponseError>>;
    /// `None`: no such group.
    fn describe(&self, group_id: String) -> Queued<'_, Option<DescribedGroup>>;
    /// `None`: no such consumer group.
    fn describe_consumer_group(&self, group_id: String) -> Queued<'_, Option<DescribedConsumerGroup>>;
    fn consumer_heartbeat(&self, request: ConsumerHeartbeat, caller: Caller) -> Queued<'_, HeartbeatAnswer>;
    /// The group's deletion code.
    fn delete_group(&self, group_id: String) -> Queued<'_, i16>;
    /// Every group this router reaches, filtered by state and type (empty filters: all).
    fn list_groups(&self, states: Vec<String>, types: Vec<String>) -> LocalBoxFuture<'_, LocalBoxFuture<'static, Vec<ListedGroup>>>;
    /// The node to name as the group's coordinator; `None` while there is none.
    fn coordinator_of(&self, group_id: String) -> LocalBoxFuture<'_, Option<u64>>;
}
