//! Routing a group request to its coordinator: group id → coordinator partition (Kafka's
//! formula) → the shard that owns that partition, reached through the mesh.

use std::rc::Rc;

use kafka_protocol::ResponseError;

use crate::coordinator::partition_for;
use crate::coordinator::shell::PartitionRunner;
use crate::runtime::{Reply, Shard, ShardStopped};

/// Enqueues `f` on the shard that coordinates `group_id`, in request order. The reply is `None`
/// when no coordinator partition is hosted there, and the partition's error when it does not
/// serve (NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while a new leader catches up).
pub(crate) async fn call<T, F>(shard: &Rc<Shard>, group_id: &str, f: F) -> Reply<Option<Result<T, ResponseError>>>
where
    F: FnOnce(&Rc<Shard>, &Rc<PartitionRunner>) -> T + Send + 'static,
    T: Send + Unpin + 'static,
{
    let node = &shard.node;
    let partition = partition_for(group_id, node.config.groups.offsets_partitions);
    let Some(&owner) = node.coordinator_shards.get(partition as usize) else {
        return Reply::Ready(Some(None));
    };
    node.mesh
        .call(shard, owner, move |owner| owner.coordinator(partition).map(|runner| runner.availability().map(|()| f(owner, &runner))))
        .await
}

/// The node to name as `group_id`'s coordinator: the leader of its coordinator partition's Raft
/// group as the owner shard last saw it (`None` while there is no leader; see
/// [`PartitionRunner::coordinator_hint`]).
pub(crate) async fn coordinator_of(shard: &Rc<Shard>, group_id: &str) -> Option<u64> {
    let node = &shard.node;
    let partition = partition_for(group_id, node.config.groups.offsets_partitions);
    let owner = *node.coordinator_shards.get(partition as usize)?;
    let leader = node.mesh.call(shard, owner, move |owner| owner.coordinator(partition).and_then(|r| r.coordinator_hint()));
    leader.await.await.ok().flatten()
}

/// Resolves a reply to a value or the coordinator-level error (spec §1.4).
pub(crate) fn resolve<T>(outcome: Result<Option<Result<T, ResponseError>>, ShardStopped>) -> Result<T, ResponseError> {
    match outcome {
        Ok(Some(value)) => value,
        Ok(None) => Err(ResponseError::NotCoordinator),
        Err(_) => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// Kafka renders a client's address as Java's `InetAddress.toString()`: `/10.0.0.7`.
pub(crate) fn client_host(ctx: &crate::protocol::RequestContext) -> String {
    ctx.peer.map(|p| format!("/{}", p.ip())).unwrap_or_default()
}

pub(crate) fn client_id(ctx: &crate::protocol::RequestContext) -> String {
    ctx.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default()
}
