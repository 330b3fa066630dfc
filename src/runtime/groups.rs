//! The group router of a shard: group id → coordinator partition (Kafka's formula) → the shard
//! of this node that owns that partition, reached through the mesh.

use std::rc::{Rc, Weak};

use futures_util::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::{Shard, ShardStopped};
use crate::coordinator::admin::{DescribedGroup, ListedGroup};
use crate::coordinator::classic::{HeartbeatRequest, LeaveResult};
use crate::coordinator::consumer::DescribedConsumerGroup;
use crate::coordinator::consumer_group::{ConsumerHeartbeat, HeartbeatAnswer, TopicView};
use crate::coordinator::offsets::CommitRequest;
use crate::coordinator::outbox::Response;
use crate::coordinator::partition_for;
use crate::coordinator::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use crate::coordinator::router::{Answer, GroupRouter, OffsetsOrError, Queued, TopicPartitionList};
use crate::coordinator::shell::PartitionRunner;
use crate::node::Node;
use crate::security::acl::{Authorizer, Operation, Resource};
use crate::security::Caller;

/// The coordinator partitions of this node, as one shard reaches them.
#[derive(Debug)]
pub struct LocalGroups {
    /// The shard this router belongs to (which holds the router).
    shard: Weak<Shard>,
}

impl LocalGroups {
    pub fn new(shard: Weak<Shard>) -> LocalGroups {
        LocalGroups { shard }
    }

    /// Enqueues `f` on the shard that owns `group_id`'s coordinator partition, in request order.
    /// It runs only where that partition serves; elsewhere the answer is the partition's error
    /// (NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while a new leader catches up).
    async fn call<T, F>(&self, group_id: String, f: F) -> Answer<T>
    where
        F: FnOnce(&Rc<Shard>, &Rc<PartitionRunner>) -> T + Send + 'static,
        T: Send + Unpin + 'static,
    {
        let Some(shard) = self.shard.upgrade() else { return Box::pin(std::future::ready(Err(ResponseError::CoordinatorNotAvailable))) };
        let node = &shard.node;
        let partition = partition_for(&group_id, node.config.groups.offsets_partitions);
        let Some(&owner) = node.coordinator_shards.get(partition as usize) else {
            return Box::pin(std::future::ready(Err(ResponseError::NotCoordinator)));
        };
        let reply = node
            .mesh
            .call(&shard, owner, move |owner| owner.coordinator(partition).map(|runner| runner.availability().map(|()| f(owner, &runner))))
            .await;
        Box::pin(async move { resolve(reply.await) })
    }

    /// As [`Self::call`], for operations the state machine answers once their records are
    /// stored: `f` starts it with a waiter, `pick` takes the answer from the response.
    async fn call_waiting<T, F>(&self, group_id: String, f: F, pick: fn(Response) -> Option<T>) -> Answer<T>
    where
        F: FnOnce(&Rc<Shard>, &Rc<PartitionRunner>, crate::coordinator::group::Token) + Send + 'static,
        T: 'static,
    {
        let waiting = self
            .call(group_id, move |owner, runner| {
                let (token, rx) = runner.waiter();
                f(owner, runner, token);
                rx
            })
            .await;
        Box::pin(async move {
            let rx: oneshot::Receiver<Response> = waiting.await?;
            rx.await.ok().and_then(pick).ok_or(ResponseError::CoordinatorNotAvailable)
        })
    }
}

/// The topics as a caller sees them when it resolves a group's regex subscriptions: a regex
/// matches only the topics it may describe from its address (Kafka's rule). Topics are looked up
/// by name and id as in the catalog: those a consumer names were checked by
/// ConsumerGroupHeartbeat's handler.
struct Describable<'a> {
    topics: &'a dyn TopicView,
    /// The rules and whom they are applied to; `None` without rules.
    viewer: Option<(&'a Authorizer, &'a Caller)>,
}

impl<'a> Describable<'a> {
    fn new(node: &'a Node, caller: &'a Caller) -> Describable<'a> {
        Describable { topics: &node.catalog, viewer: (!node.authorizer.is_open()).then_some((&node.authorizer, caller)) }
    }
}

impl TopicView for Describable<'_> {
    fn by_name(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        self.topics.by_name(name)
    }

    fn by_id(&self, id: uuid::Uuid) -> Option<(String, i32)> {
        self.topics.by_id(id)
    }

    fn names(&self) -> Vec<String> {
        let mut names = self.topics.names();
        if let Some((authorizer, caller)) = self.viewer {
            names.retain(|n| authorizer.allows_from(&caller.principal, caller.host, Operation::Describe, Resource::Topic(n)));
        }
        names
    }

    fn version(&self) -> u64 {
        self.topics.version()
    }
}

/// The coordinator-level outcome of a routed call (spec §1.4): no partition served there is
/// NOT_COORDINATOR; a stopped shard is COORDINATOR_NOT_AVAILABLE.
fn resolve<T>(outcome: Result<Option<Result<T, ResponseError>>, ShardStopped>) -> Result<T, ResponseError> {
    match outcome {
        Ok(Some(value)) => value,
        Ok(None) => Err(ResponseError::NotCoordinator),
        Err(_) => Err(ResponseError::CoordinatorNotAvailable),
    }
}

impl GroupRouter for LocalGroups {
    fn join(&self, request: JoinRequest, caller: Caller) -> Queued<'_, JoinResult> {
        let group = request.group_id.clone();
        Box::pin(self.call_waiting(
            group,
            move |owner, runner, token| runner.with_state(|s, now| s.join(now, request, token, &Describable::new(&owner.node, &caller))),
            |r| match r {
                Response::Join(result) => Some(result),
                _ => None,
            },
        ))
    }

    fn sync(&self, request: SyncRequest) -> Queued<'_, SyncResult> {
        let group = request.group_id.clone();
        Box::pin(self.call_waiting(
            group,
            move |_, runner, token| runner.with_state(|s, now| s.sync(now, request, token)),
            |r| match r {
                Response::Sync(result) => Some(result),
                _ => None,
            },
        ))
    }

    fn heartbeat(&self, request: HeartbeatRequest) -> Queued<'_, i16> {
        let group = request.group_id.clone();
        Box::pin(self.call(group, move |_, runner| runner.with_state(|s, now| s.heartbeat(now, &request))))
    }

    fn leave(&self, group_id: String, members: Vec<(String, Option<String>)>) -> Queued<'_, LeaveResult> {
        let group = group_id.clone();
        Box::pin(self.call(group, move |_, runner| runner.with_state(|s, now| s.leave(now, &group_id, &members))))
    }

    fn commit(&self, request: CommitRequest) -> Queued<'_, Vec<i16>> {
        let group = request.group_id.clone();
        Box::pin(self.call_waiting(
            group,
            move |owner, runner, token| runner.with_state(|s, now| s.commit(now, request, token, &owner.node.catalog)),
            |r| match r {
                Response::Commit(codes) => Some(codes),
                _ => None,
            },
        ))
    }

    fn fetch_offsets(
        &self,
        group_id: String,
        topics: Option<TopicPartitionList>,
        member_id: Option<String>,
        member_epoch: i32,
    ) -> Queued<'_, OffsetsOrError> {
        let group = group_id.clone();
        Box::pin(self.call(group, move |_, runner| {
            let state = runner.state.borrow();
            state
                .validate_fetch_member(&group_id, member_id.as_deref(), member_epoch)
                .map(|()| state.fetch_offsets(&group_id, topics.as_deref()))
        }))
    }

    fn delete_offsets(&self, group_id: String, topics: TopicPartitionList) -> Queued<'_, Result<Vec<Vec<i16>>, ResponseError>> {
        let group = group_id.clone();
        Box::pin(self.call(group, move |_, runner| runner.with_state(|s, _| s.delete_offsets(&group_id, &topics))))
    }

    fn describe(&self, group_id: String) -> Queued<'_, Option<DescribedGroup>> {
        let group = group_id.clone();
        Box::pin(self.call(group, move |_, runner| runner.state.borrow().describe_group(&group_id)))
    }

    fn describe_consumer_group(&self, group_id: String) -> Queued<'_, Option<DescribedConsumerGroup>> {
        let group = group_id.clone();
        Box::pin(self.call(group, move |_, runner| runner.state.borrow().describe_consumer_group(&group_id)))
    }

    fn consumer_heartbeat(&self, request: ConsumerHeartbeat, caller: Caller) -> Queued<'_, HeartbeatAnswer> {
        let group = request.group_id.clone();
        Box::pin(self.call(group, move |owner, runner| {
            runner.with_state(|s, now| s.consumer_heartbeat(now, request, &Describable::new(&owner.node, &caller)))
        }))
    }

    fn delete_group(&self, group_id: String) -> Queued<'_, i16> {
        let group = group_id.clone();
        let start =
            move |_: &Rc<Shard>, runner: &Rc<PartitionRunner>, token| runner.with_state(|s, now| s.delete_groups(now, &[group_id], token));
        Box::pin(self.call_waiting(group, start, |r| match r {
            Response::DeleteGroups(codes) => Some(codes.first().copied().unwrap_or(0)),
            _ => None,
        }))
    }

    fn list_groups(&self, states: Vec<String>, types: Vec<String>) -> LocalBoxFuture<'_, LocalBoxFuture<'static, Vec<ListedGroup>>> {
        Box::pin(list_groups(self.shard.upgrade(), states, types))
    }

    fn coordinator_of(&self, group_id: String) -> LocalBoxFuture<'_, Option<u64>> {
        let shard = self.shard.upgrade();
        Box::pin(async move {
            let shard = shard?;
            let node = &shard.node;
            let partition = partition_for(&group_id, node.config.groups.offsets_partitions);
            let owner = *node.coordinator_shards.get(partition as usize)?;
            let leader = node.mesh.call(&shard, owner, move |owner| owner.coordinator(partition).and_then(|r| r.coordinator_hint()));
            leader.await.await.ok().flatten()
        })
    }
}

/// Asks every shard for the groups of the coordinator partitions it serves.
async fn list_groups(shard: Option<Rc<Shard>>, states: Vec<String>, types: Vec<String>) -> LocalBoxFuture<'static, Vec<ListedGroup>> {
    let Some(shard) = shard else { return Box::pin(std::future::ready(Vec::new())) };
    let mesh = &shard.node.mesh;
    let mut pending = Vec::with_capacity(mesh.shard_count());
    for target in 0..mesh.shard_count() {
        let (states, types) = (states.clone(), types.clone());
        let reply = mesh
            .call(&shard, target, move |owner| {
                owner.coordinators().iter().flat_map(|r| r.state.borrow().list_groups(&states, &types)).collect::<Vec<_>>()
            })
            .await;
        pending.push(reply);
    }
    Box::pin(async move {
        let mut groups = Vec::new();
        for reply in pending {
            if let Ok(list) = reply.await {
                groups.extend(list);
            }
        }
        groups
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{AclBinding, Acls, AuthorizationConfig, PatternType, ResourceType, ALLOW};
    use crate::security::Principal;

    struct Topics;

    impl TopicView for Topics {
        fn by_name(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
            (name == "orders").then_some((uuid::Uuid::from_u128(1), 3))
        }
        fn by_id(&self, _: uuid::Uuid) -> Option<(String, i32)> {
            None
        }
        fn names(&self) -> Vec<String> {
            vec!["payments.in".into(), "orders".into()]
        }
        fn version(&self) -> u64 {
            7
        }
    }

    #[test]
    fn regexes_see_only_describable_topics() {
        let config: AuthorizationConfig =
            toml::from_str(r#"rules = [{ principal = "User:alice", resource = "topic", prefix = "payments.", operations = ["read"] }]"#)
                .unwrap();
        let acls = std::sync::Arc::new(Acls::default());
        let authorizer = Authorizer::new(&config, acls.clone());
        let from = |ip: &str| Caller { principal: Principal::user("alice"), host: Some(ip.parse().unwrap()) };
        let (near, far) = (from("10.0.0.7"), from("10.0.0.8"));
        let view = Describable { topics: &Topics, viewer: Some((&authorizer, &near)) };
        assert_eq!(view.names(), vec!["payments.in".to_string()]);
        // An ACL for one host shows the topic to the caller from that host only.
        acls.add(&[AclBinding {
            resource_type: ResourceType::Topic.code(),
            name: "orders".into(),
            pattern: PatternType::Literal as i8,
            principal: "User:alice".into(),
            host: "10.0.0.7".into(),
            operation: Operation::Describe as i8,
            permission: ALLOW,
        }])
        .unwrap();
        assert_eq!(view.names(), vec!["payments.in".to_string(), "orders".to_string()]);
        let view_far = Describable { topics: &Topics, viewer: Some((&authorizer, &far)) };
        assert_eq!(view_far.names(), vec!["payments.in".to_string()]);
        // Lookups are not filtered: a named topic was checked by the request's handler.
        assert_eq!((view.by_name("orders").map(|t| t.1), view.version()), (Some(3), 7));
        let open = Describable { topics: &Topics, viewer: None };
        assert_eq!(open.names().len(), 2);
    }
}
