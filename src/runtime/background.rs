//! Background work each shard runs over the partitions it owns.

use std::rc::Rc;
use std::time::Duration;

use super::shard::Shard;
use crate::clock::now_ms;

/// Applies retention (size and age) every `storage.retention_check_interval_ms`.
pub(crate) async fn retention(shard: Rc<Shard>) {
    let period = Duration::from_millis(shard.node.config.storage.retention_check_interval_ms);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = now_ms();
        for (_, partition) in shard.partitions() {
            let result = partition.log.borrow_mut().apply_retention(now);
            match result {
                Ok(report) if report.segments_deleted > 0 => {
                    partition.publish_end_offset();
                    shard.metrics.retention_deleted(report.segments_deleted, report.bytes_deleted);
                    tracing::info!(
                        partition = %partition.log.borrow().dir().display(),
                        segments = report.segments_deleted,
                        bytes = report.bytes_deleted,
                        "retention deleted segments"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::error!(partition = %partition.log.borrow().dir().display(), error = %e, "retention failed"),
            }
        }
    }
}

/// fsyncs partitions with unflushed data every `storage.flush_ms`.
pub(crate) async fn periodic_flush(shard: Rc<Shard>) {
    let mut tick = tokio::time::interval(Duration::from_millis(shard.node.config.storage.flush_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (_, partition) in shard.partitions() {
            partition.flush_if_dirty();
        }
    }
}
