//! The shard-local handle on one partition: the log plus durability and wake-ups.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use super::log::{AppendInfo, PartitionLog};
use super::StorageError;

/// The outcome of waiting for an fsync; the error is shared by every waiter of that fsync.
pub type FlushResult = Result<(), Arc<io::Error>>;

/// One partition as its owning shard sees it. Lives only on that shard (`Rc`, `RefCell`); other
/// shards reach it through the mesh and watch its log end through [`Partition::end_offset`].
#[derive(Debug)]
pub struct Partition {
    pub log: RefCell<PartitionLog>,
    /// The log end offset (= high watermark on one node), published after every append so
    /// long-polling fetches on any shard wake up.
    end_offset: Arc<watch::Sender<i64>>,
    /// fsync once this many messages are unflushed; 0 = leave it to the page cache.
    flush_messages: u64,
    flush: RefCell<FlushState>,
    flushing: Cell<bool>,
    /// Makes the next fsync fail, as a failing disk would.
    #[cfg(test)]
    pub(crate) fail_next_sync: Cell<bool>,
}

#[derive(Debug, Default)]
struct FlushState {
    /// Every offset below this is on disk.
    durable_offset: i64,
    waiters: Vec<(i64, oneshot::Sender<FlushResult>)>,
}

impl Partition {
    pub fn new(log: PartitionLog, end_offset: Arc<watch::Sender<i64>>, flush_messages: u64) -> Rc<Partition> {
        let leo = log.log_end_offset();
        end_offset.send_replace(leo);
        Rc::new(Partition {
            log: RefCell::new(log),
            end_offset,
            flush_messages,
            flush: RefCell::new(FlushState { durable_offset: leo, waiters: Vec::new() }),
            flushing: Cell::new(false),
            #[cfg(test)]
            fail_next_sync: Cell::new(false),
        })
    }

    /// Appends one batch. When the flush policy requires it, also returns a receiver that
    /// completes once the batch is on disk; the produce response waits for it.
    pub fn append(
        self: &Rc<Self>,
        batch: &[u8],
        now_ms: i64,
    ) -> Result<(AppendInfo, Option<oneshot::Receiver<FlushResult>>), StorageError> {
        let (info, leo, unflushed, rolled) = {
            let mut log = self.log.borrow_mut();
            let segments = log.segment_count();
            let info = log.append(batch, now_ms)?;
            (info, log.log_end_offset(), log.unflushed_messages(), log.segment_count() > segments)
        };
        if !info.duplicate {
            self.end_offset.send_replace(leo);
        }
        let durable =
            if self.flush_messages > 0 && (unflushed >= self.flush_messages || info.duplicate) { Some(self.flush_to(leo)) } else { None };
        if rolled && durable.is_none() {
            // The sealed segment is fsynced in the background, so the recovery point moves past it
            // and a restart after a crash checks only what follows.
            drop(self.flush_to(leo));
        }
        Ok((info, durable))
    }

    /// Returns a receiver that completes once every offset below `offset` is on disk. Concurrent
    /// requests share fsyncs: while one runs, later requests wait and are all covered by the next.
    pub fn flush_to(self: &Rc<Self>, offset: i64) -> oneshot::Receiver<FlushResult> {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.flush.borrow_mut();
            if state.durable_offset >= offset {
                let _ = tx.send(Ok(()));
                return rx;
            }
            state.waiters.push((offset, tx));
        }
        if !self.flushing.replace(true) {
            tokio::task::spawn_local(self.clone().flush_loop());
        }
        rx
    }

    /// fsyncs until every waiter is covered. A failed fsync fails its waiters and every later
    /// one: the log refuses to sync again (see [`PartitionLog::sync_failed`]).
    async fn flush_loop(self: Rc<Self>) {
        loop {
            let taken = {
                let mut log = self.log.borrow_mut();
                let target = log.log_end_offset();
                log.take_unsynced().map(|files| (target, files, log.recovery_point_after_sync()))
            };
            #[cfg(test)]
            let inject_failure = self.fail_next_sync.take();
            #[cfg(not(test))]
            let inject_failure = false;
            let result = match taken {
                Err(e) => Err(Arc::new(io::Error::other(e.to_string()))),
                Ok((target, files, recovery)) => {
                    let synced = tokio::task::spawn_blocking(move || {
                        if inject_failure {
                            return Err(io::Error::other("injected fsync failure"));
                        }
                        files.iter().try_for_each(super::SyncTarget::sync)?;
                        if let Some((path, offset)) = &recovery {
                            super::log::write_recovery_point(path, *offset)?;
                        }
                        Ok(recovery.map(|(_, offset)| offset))
                    })
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)));
                    let mut log = self.log.borrow_mut();
                    match synced {
                        Ok(recovery) => {
                            if let Some(offset) = recovery {
                                log.recovery_point_written(offset);
                            }
                            Ok(target)
                        }
                        Err(e) => {
                            tracing::error!(partition = %log.dir().display(), error = %e, "fsync failed; the partition takes no more writes");
                            log.sync_failed(&e);
                            Err(Arc::new(e))
                        }
                    }
                }
            };
            let mut state = self.flush.borrow_mut();
            let (result, target) = match result {
                Ok(target) => {
                    state.durable_offset = target;
                    (Ok(()), target)
                }
                Err(e) => (Err(e), i64::MAX),
            };
            let waiters = std::mem::take(&mut state.waiters);
            for (offset, tx) in waiters {
                match &result {
                    Ok(()) if offset > target => state.waiters.push((offset, tx)),
                    Ok(()) => drop(tx.send(Ok(()))),
                    Err(e) => drop(tx.send(Err(e.clone()))),
                }
            }
            if state.waiters.is_empty() {
                self.flushing.set(false);
                return;
            }
        }
    }

    /// Flushes if anything is unflushed (the `flush_ms` timer).
    pub fn flush_if_dirty(self: &Rc<Self>) {
        let (dirty, leo) = {
            let log = self.log.borrow();
            (log.unflushed_messages() > 0, log.log_end_offset())
        };
        if dirty {
            drop(self.flush_to(leo));
        }
    }

    pub fn end_offset_watch(&self) -> &Arc<watch::Sender<i64>> {
        &self.end_offset
    }

    /// Publishes the log end again (after retention or truncation changed the log).
    pub fn publish_end_offset(&self) {
        self.end_offset.send_replace(self.log.borrow().log_end_offset());
    }
}
