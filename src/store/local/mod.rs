//! Local segments: each partition's log on the shard that owns it, on this node.
//!
//! Every operation groups its partitions by owning shard and sends each shard one job through
//! the mesh (run directly when it is this shard), so a request costs one hop per shard, not one
//! per partition.

mod append;
mod fetch;
mod list_offsets;

use std::rc::{Rc, Weak};

use futures_util::future::LocalBoxFuture;

use super::{AppendPlan, Appended, FetchPlan, FoundOffset, OffsetQuery, PartitionData, PartitionStore, Results};
use crate::runtime::Shard;

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
}
