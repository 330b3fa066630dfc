//! Background work each shard runs over the partitions it owns.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use super::shard::{PartitionKey, Shard};
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

/// Compacts the partitions of compacted topics this shard owns, one at a time, every
/// `storage.cleaner_backoff_ms`. Reading and writing segments runs on a blocking thread; the
/// shard only decides what to compact and puts the result in place.
pub(crate) async fn compaction(shard: Rc<Shard>) {
    let period = Duration::from_millis(shard.node.config.storage.cleaner_backoff_ms);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // A partition whose compaction failed (an error, a panic, an install that did not take)
    // waits ten rounds before the next try, rather than reading the same segments again every
    // round.
    let mut failed: HashMap<PartitionKey, i64> = HashMap::new();
    let retry_after = period.as_millis() as i64 * 10;
    loop {
        tick.tick().await;
        let now = now_ms();
        failed.retain(|_, until| *until > now);
        for (key @ (topic_id, index), partition) in shard.partitions() {
            if failed.contains_key(&key) {
                continue;
            }
            let Some(plan) = partition.log.borrow().cleaner_plan(now_ms()) else { continue };
            let dir = partition.log.borrow().dir().display().to_string();
            let cleaned = match tokio::task::spawn_blocking(move || plan.run()).await {
                Ok(Ok(cleaned)) => cleaned,
                Ok(Err(e)) => {
                    tracing::warn!(partition = %dir, error = %e, "compaction failed");
                    failed.insert(key, now_ms() + retry_after);
                    continue;
                }
                Err(e) => {
                    tracing::error!(partition = %dir, error = %e, "compaction task failed");
                    failed.insert(key, now_ms() + retry_after);
                    continue;
                }
            };
            // The topic may have been deleted, or deleted and created again, meanwhile.
            if !shard.partition(topic_id, index).is_some_and(|p| Rc::ptr_eq(&p, &partition)) {
                cleaned.discard();
                continue;
            }
            let (removed, reclaimed) = (cleaned.records_removed, cleaned.bytes_before.saturating_sub(cleaned.bytes_after));
            let installed = partition.log.borrow_mut().install_cleaned(cleaned, now_ms());
            match installed {
                Ok(()) => {
                    shard.metrics.compacted(removed, reclaimed);
                    tracing::info!(partition = %dir, records_removed = removed, bytes_reclaimed = reclaimed, "compacted");
                }
                Err(e) => {
                    tracing::error!(partition = %dir, error = %e, "installing a compaction failed");
                    failed.insert(key, now_ms() + retry_after);
                }
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
