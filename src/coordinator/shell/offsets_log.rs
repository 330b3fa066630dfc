//! The partition's `__consumer_offsets` log: committed entries applied to it, checkpoints that
//! replace what they cover (Raft snapshots), snapshots installed from the leader, and reading it
//! back at load. [`OffsetsLog`] is what the Raft state machine holds; the runner shares it.

use std::cell::{Cell, RefCell};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::clock::now_ms;
use crate::coordinator::group::GroupState;
use crate::coordinator::log_batch::{self, encode_batch, split_records, stamp_log_id};
use crate::coordinator::records::GroupRecord;
use crate::coordinator::state::CoordinatorState;
use crate::raft::LogId;
use crate::storage::{Partition, StorageError};

/// Log growth (bytes) that triggers a checkpoint, at the least.
const CHECKPOINT_MIN_BYTES: u64 = 64 * 1024 * 1024;

/// A coordinator partition's `__consumer_offsets` log and the state it holds, as the Raft state
/// machine reaches them: shared by the runner and its [`CoordinatorStateMachine`], so applying an
/// entry never calls back up into the runner.
#[derive(Debug)]
pub struct OffsetsLog {
    index: i32,
    log: Rc<Partition>,
    /// The partition's state machine, shared with the runner.
    state: Rc<RefCell<CoordinatorState>>,
    /// Entries from this index on were proposed by this node as leader, their records already in
    /// `state`; entries before it are replayed when applied.
    local_from: Cell<u64>,
    /// Log size right after the last checkpoint.
    checkpoint_size: Cell<u64>,
    snapshot_requested: Cell<bool>,
    /// Raised once the log has grown well beyond the last checkpoint: the runner asks its Raft
    /// group for a snapshot.
    snapshot_wanted: Notify,
}

impl OffsetsLog {
    /// Reads the partition's log into `state`; returns the id of the last Raft entry it holds and
    /// how many records were read.
    pub(super) fn load(
        index: i32,
        log: Rc<Partition>,
        mut state: CoordinatorState,
    ) -> Result<(Rc<Self>, Option<LogId>, usize), StorageError> {
        let now = now_ms();
        let mut records = 0usize;
        let applied = for_each_record(&log, |record| {
            state.replay(record, now);
            records += 1;
        })?;
        let size = log.log.borrow().size_bytes();
        let offsets = OffsetsLog {
            index,
            log,
            state: Rc::new(RefCell::new(state)),
            local_from: Cell::new(u64::MAX),
            checkpoint_size: Cell::new(size),
            snapshot_requested: Cell::new(false),
            snapshot_wanted: Notify::new(),
        };
        Ok((Rc::new(offsets), applied, records))
    }

    pub(super) fn state(&self) -> &Rc<RefCell<CoordinatorState>> {
        &self.state
    }

    /// This node leads: the state holds every entry up to `applied`, and what follows is
    /// proposed here (its records are in the state already).
    pub(super) fn lead_after(&self, applied: Option<u64>) {
        self.local_from.set(applied.map_or(0, |i| i + 1));
    }

    /// This node follows: every entry applied from now on is replayed into the state, which is
    /// rebuilt from the log (what was applied), since it may hold records that never committed.
    pub(super) fn follow(&self) {
        self.local_from.set(u64::MAX);
        let now = now_ms();
        let mut fresh = self.fresh_state();
        match for_each_record(&self.log, |record| fresh.replay(record, now)) {
            Ok(_) => *self.state.borrow_mut() = fresh,
            Err(e) => {
                tracing::error!(partition = self.index, error = %e, "cannot reload the coordinator partition's log")
            }
        }
    }

    /// The largest batch a write may propose: `__consumer_offsets`' bound, within what a Raft
    /// entry may carry.
    pub(super) fn max_batch_bytes(&self) -> usize {
        self.state.borrow().config.max_batch_bytes.min(crate::raft::MAX_COMMAND_BYTES)
    }

    /// Waits until the log has grown enough for a checkpoint.
    pub(super) async fn snapshot_wanted(&self) {
        self.snapshot_wanted.notified().await
    }

    /// Applies one committed entry (from [`CoordinatorStateMachine`]): the batch goes into the
    /// partition's log stamped with its entry's id, and into the state unless this node proposed
    /// it.
    pub(crate) fn apply_batch(&self, log_id: &LogId, payload: &Bytes) -> Result<(), String> {
        let mut batch = payload.to_vec();
        stamp_log_id(&mut batch, log_id)?;
        let now = now_ms();
        self.log.append(&batch, now).map_err(|e| e.to_string())?;
        if log_id.index < self.local_from.get() {
            let records = log_batch::decode_batch(Bytes::from(batch))?;
            let mut state = self.state.borrow_mut();
            for record in log_batch::group_records(records, 0) {
                state.replay(record, now);
            }
        }
        // On every member, leader or follower: each purges its own Raft log.
        self.maybe_snapshot();
        Ok(())
    }

    /// Asks for a snapshot once the partition's log has grown well beyond the last checkpoint.
    fn maybe_snapshot(&self) {
        let size = self.log.log.borrow().size_bytes();
        let threshold = CHECKPOINT_MIN_BYTES.max(self.checkpoint_size.get() * 2);
        if size < threshold || self.snapshot_requested.get() {
            return;
        }
        self.snapshot_requested.set(true);
        self.snapshot_wanted.notify_one();
    }

    /// Rewrites the partition's log as the live state at `applied` (every batch stamped with it),
    /// fsyncs it, drops the segments before it, and returns the batches written (the snapshot).
    /// The live state is read back from the log itself, which holds exactly the applied entries:
    /// a leader's state may already hold records of entries not yet committed.
    pub(crate) fn checkpoint(&self, applied: Option<LogId>) -> Result<Vec<u8>, StorageError> {
        let now = now_ms();
        let mut applied_state = self.fresh_state();
        for_each_record(&self.log, |record| applied_state.replay(record, now))?;
        let data = self.rewrite(live_records(&applied_state), applied)?;
        let after = self.log.log.borrow().size_bytes();
        tracing::info!(partition = self.index, bytes = after, applied = ?applied, "checkpointed coordinator partition");
        self.checkpoint_size.set(after);
        self.snapshot_requested.set(false);
        Ok(data)
    }

    /// An empty state with this partition's settings.
    fn fresh_state(&self) -> CoordinatorState {
        let state = self.state.borrow();
        CoordinatorState::with_consumer_config(state.config.clone(), state.consumer.clone())
    }

    /// Replaces the state with a snapshot's (from the group's leader) and rewrites the log.
    /// openraft installs snapshots only on a node that does not lead, so no request waits on the
    /// state replaced (the runner dropped its waiters when it stopped serving).
    pub(crate) fn install(&self, data: &[u8], applied: Option<LogId>) -> Result<(), String> {
        let now = now_ms();
        let mut fresh = self.fresh_state();
        let mut rest = Bytes::copy_from_slice(data);
        while !rest.is_empty() {
            let header = crate::record_batch::BatchHeader::parse(&rest).map_err(|e| e.to_string())?;
            if header.total_len() > rest.len() {
                return Err("snapshot ends inside a batch".into());
            }
            let batch = rest.split_to(header.total_len());
            for record in log_batch::group_records(log_batch::decode_batch(batch)?, 0) {
                fresh.replay(record, now);
            }
        }
        let records = live_records(&fresh);
        *self.state.borrow_mut() = fresh;
        self.rewrite(records, applied).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Writes `records` as a checkpoint in a fresh segment, fsyncs it and deletes what precedes
    /// it. An empty state still writes one batch, so the log keeps saying what was applied.
    fn rewrite(&self, mut records: Vec<GroupRecord>, applied: Option<LogId>) -> Result<Vec<u8>, StorageError> {
        let now = now_ms();
        if records.is_empty() {
            // A tombstone of no group: replaying it changes nothing.
            records.push(GroupRecord::Group { group: String::new(), value: None });
        }
        let mut data = Vec::new();
        let mut log = self.log.log.borrow_mut();
        log.roll(now)?;
        let start = log.log_end_offset();
        let records = records.iter().map(GroupRecord::encode).collect();
        for chunk in split_records(records, self.max_batch_bytes()) {
            let mut batch = encode_batch(&chunk, now).to_vec();
            if let Some(id) = &applied {
                stamp_log_id(&mut batch, id).expect("our own batches carry the header");
            }
            log.append(&batch, now)?;
            data.extend_from_slice(&batch);
        }
        for target in log.take_unsynced()? {
            target.sync()?;
        }
        log.delete_segments_before(start)?;
        drop(log);
        self.log.publish_end_offset();
        Ok(data)
    }
}

/// The records that rebuild the current durable state: every committed offset, and the metadata
/// of every group that is not mid-rebalance (those write theirs when their rebalance completes).
fn live_records(state: &CoordinatorState) -> Vec<GroupRecord> {
    let mut records = Vec::new();
    for group in state.groups.values() {
        if matches!(group.state, GroupState::Stable | GroupState::Empty) && group.protocol_type.is_some() {
            records.push(CoordinatorState::group_record(group, None));
        }
    }
    for group in state.consumer_groups.values() {
        records.extend(CoordinatorState::consumer_group_records(group));
    }
    for (group, offsets) in &state.offsets {
        for ((topic, partition), value) in offsets {
            records.push(GroupRecord::Offset {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: Some(value.clone()),
            });
        }
    }
    records
}

/// Reads every record of a coordinator partition's log, oldest first; returns the id of the
/// last Raft entry the log holds.
fn for_each_record(log: &Partition, mut f: impl FnMut(GroupRecord)) -> Result<Option<LogId>, StorageError> {
    let log = log.log.borrow();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut applied = None;
    let unreadable = |reason| StorageError::Batch(crate::record_batch::BatchError::Invalid(reason));
    while offset < end {
        let read = log.read(offset, 4 * 1024 * 1024, true)?;
        let Some(slice) = read.slice else { break };
        let mut buf = vec![0u8; slice.len as usize];
        slice.file.read_exact_at(&mut buf, slice.position)?;
        let mut bytes = Bytes::from(buf);
        let mut last = offset;
        while bytes.len() >= crate::record_batch::HEADER_LEN {
            let header = crate::record_batch::BatchHeader::parse(&bytes).map_err(StorageError::Batch)?;
            if header.total_len() > bytes.len() {
                break;
            }
            let records = log_batch::decode_batch(bytes.split_to(header.total_len())).map_err(unreadable)?;
            if let Some(id) = records.first().and_then(log_batch::stamped_log_id) {
                applied = Some(id);
            }
            log_batch::group_records(records, offset).for_each(&mut f);
            last = header.last_offset() + 1;
        }
        if last <= offset {
            break;
        }
        offset = last;
    }
    Ok(applied)
}
