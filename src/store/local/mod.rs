//! Local segments: each partition's log on the shard that owns it, on this node.
//!
//! Every operation groups its partitions by owning shard and sends each shard one job through
//! the mesh (run directly when it is this shard), so a request costs one hop per shard, not one
//! per partition.

mod append;
mod delete_records;
mod fetch;
mod list_offsets;

use std::collections::HashMap;
use std::rc::{Rc, Weak};

use futures_util::future::LocalBoxFuture;
use uuid::Uuid;

use super::placement::local_shard;
use super::{
    AppendPlan, Appended, Deletion, FetchPlan, FoundOffset, OffsetQuery, PartitionData, PartitionRef, PartitionStore, Results, StoreError,
};
use crate::runtime::{Shard, ShardId};
use crate::storage::partition::Partition;

/// The local store of one shard.
#[derive(Debug)]
pub struct LocalStore {
    /// The shard this store belongs to (which holds the store).
    shard: Weak<Shard>,
}

impl LocalStore {
    pub fn new(shard: Weak<Shard>) -> LocalStore {
        LocalStore { shard }
    }

    fn shard(&self) -> Option<Rc<Shard>> {
        self.shard.upgrade()
    }
}

impl PartitionStore for LocalStore {
    fn append(&self, plan: AppendPlan) -> LocalBoxFuture<'_, LocalBoxFuture<'static, Results<Appended>>> {
        match self.shard() {
            Some(shard) => Box::pin(append::start(shard, plan.batches)),
            None => Box::pin(std::future::ready(append::stopped(plan.batches.len()))),
        }
    }

    fn fetch(&self, plan: FetchPlan) -> LocalBoxFuture<'static, Results<PartitionData>> {
        let shard = self.shard();
        Box::pin(async move {
            match shard {
                Some(shard) => fetch::fetch(shard, plan).await,
                None => plan.partitions.iter().map(|_| Err(super::StoreError::Unavailable("the shard is shutting down"))).collect(),
            }
        })
    }

    fn list_offsets(&self, queries: Vec<OffsetQuery>) -> LocalBoxFuture<'static, Results<FoundOffset>> {
        let shard = self.shard();
        Box::pin(async move {
            match shard {
                Some(shard) => list_offsets::list_offsets(&shard, queries).await,
                None => queries.iter().map(|_| Err(super::StoreError::Unavailable("the shard is shutting down"))).collect(),
            }
        })
    }

    fn delete_records(&self, deletions: Vec<Deletion>) -> LocalBoxFuture<'static, Results<i64>> {
        let shard = self.shard();
        Box::pin(async move {
            match shard {
                Some(shard) => delete_records::delete_records(&shard, deletions).await,
                None => deletions.iter().map(|_| Err(StoreError::Unavailable("the shard is shutting down"))).collect(),
            }
        })
    }
}

/// Runs `work` on the shard that owns each item's partition (`current_leader_epoch` checked as
/// [`local_shard`] does), one mesh call per shard; the answers in the order of `items`.
async fn on_owning_shards<I, T>(
    shard: &Rc<Shard>,
    items: Vec<(&PartitionRef, i32, I)>,
    work: fn(&Partition, I) -> Result<T, StoreError>,
) -> Results<T>
where
    I: Send + 'static,
    T: Send + Unpin + 'static,
{
    let node = &shard.node;
    let mut jobs: HashMap<ShardId, Vec<(Uuid, i32, I)>> = HashMap::new();
    let slots: Vec<Result<(ShardId, usize), StoreError>> = items
        .into_iter()
        .map(|(partition, current_leader_epoch, item)| {
            let target = local_shard(node, partition, current_leader_epoch)?;
            let queue = jobs.entry(target).or_default();
            queue.push((partition.topic.id, partition.index, item));
            Ok((target, queue.len() - 1))
        })
        .collect();
    let mut replies = HashMap::with_capacity(jobs.len());
    for (target, list) in jobs {
        let reply = node.mesh.call(shard, target, move |owner| {
            list.into_iter()
                .map(|(id, index, item)| match owner.partition(id, index) {
                    Some(partition) => work(&partition, item),
                    None => Err(StoreError::UnknownPartition),
                })
                .collect::<Vec<Result<T, StoreError>>>()
        });
        replies.insert(target, reply.await);
    }
    let mut answers: HashMap<ShardId, Vec<Result<T, StoreError>>> = HashMap::with_capacity(replies.len());
    for (target, reply) in replies {
        answers.insert(target, reply.await.unwrap_or_default());
    }
    slots
        .into_iter()
        .map(|slot| {
            let (target, position) = slot?;
            let answer = answers.get_mut(&target).and_then(|list| list.get_mut(position));
            answer.map_or(Err(StoreError::Unavailable("the partition's shard is shutting down")), |a| {
                std::mem::replace(a, Err(StoreError::UnknownPartition))
            })
        })
        .collect()
}
