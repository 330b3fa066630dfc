//! DeleteRecords on local segments: each partition's log start moved on its owning shard.

use std::rc::Rc;

use crate::runtime::Shard;
use crate::storage::partition::Partition;
use crate::store::{Deletion, Results, StoreError, DELETE_TO_HIGH_WATERMARK};

pub(super) async fn delete_records(shard: &Rc<Shard>, deletions: Vec<Deletion>) -> Results<i64> {
    let items = deletions.iter().map(|d| (&d.partition, -1, d.offset)).collect();
    super::on_owning_shards(shard, items, delete_before).await
}

fn delete_before(partition: &Partition, offset: i64) -> Result<i64, StoreError> {
    let mut log = partition.log.borrow_mut();
    let offset = if offset == DELETE_TO_HIGH_WATERMARK { log.log_end_offset() } else { offset };
    Ok(log.delete_records_before(offset)?)
}
