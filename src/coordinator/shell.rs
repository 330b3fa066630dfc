//! Runs each coordinator partition's state machine on the shard that owns it: keeps its timers,
//! appends its records to the partition's log (a partition of the internal `__consumer_offsets`
//! topic, in Kafka's record format), replays that log at startup, and hands responses to the
//! connections waiting for them.
//!
//! # Durability
//!
//! Every record is appended to the log before the request that produced it is answered, so an
//! acknowledged offset commit or group assignment survives a crash; the flush policy
//! (`storage.flush_messages`) decides whether that also waits for an fsync.
//!
//! # Compaction
//!
//! `__consumer_offsets` keeps only the latest value per key. When a partition's log has grown
//! well past the live state, the shell writes a checkpoint (every live offset and every settled
//! group, in a fresh segment) and deletes the segments before it; replaying the checkpoint and
//! what follows rebuilds the same state.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::ResponseError;
use tokio::sync::{oneshot, Notify};

use super::group::{GroupState, Token};
use super::records::GroupRecord;
use super::state::{CoordinatorState, Effect, GroupConfig, Response, TimerKey};
use crate::clock::now_ms;
use crate::storage::{Partition, StorageError};

/// Log growth (bytes) that triggers a checkpoint, at the least.
const CHECKPOINT_MIN_BYTES: u64 = 64 * 1024 * 1024;
/// Records per batch when writing a checkpoint.
const CHECKPOINT_BATCH: usize = 500;

/// One coordinator partition: its state machine and what runs it. Lives on its owning shard.
#[derive(Debug)]
pub struct PartitionRunner {
    pub index: i32,
    pub state: RefCell<CoordinatorState>,
    log: Rc<Partition>,
    waiting: RefCell<HashMap<Token, oneshot::Sender<Response>>>,
    next_token: Cell<Token>,
    timers: RefCell<BinaryHeap<Reverse<(i64, u64)>>>,
    timer_keys: RefCell<HashMap<u64, TimerKey>>,
    next_timer: Cell<u64>,
    wake: Notify,
    /// Log size right after the last checkpoint.
    checkpoint_size: Cell<u64>,
    expiration_interval_ms: u64,
}

impl PartitionRunner {
    /// Loads a partition: replays its log into a fresh state, starts sessions and timers.
    pub fn load(
        index: i32,
        log: Rc<Partition>,
        config: GroupConfig,
        consumer: super::consumer::ConsumerGroupConfig,
        expiration_interval_ms: u64,
    ) -> Result<Rc<Self>, StorageError> {
        let now = now_ms();
        let mut state = CoordinatorState::with_consumer_config(config, consumer);
        let mut records = 0usize;
        for_each_record(&log, |record| {
            state.replay(record, now);
            records += 1;
        })?;
        state.start_sessions(now);
        let size = log.log.borrow().size_bytes();
        let runner = Rc::new(PartitionRunner {
            index,
            state: RefCell::new(state),
            log,
            waiting: RefCell::new(HashMap::new()),
            next_token: Cell::new(0),
            timers: RefCell::new(BinaryHeap::new()),
            timer_keys: RefCell::new(HashMap::new()),
            next_timer: Cell::new(0),
            wake: Notify::new(),
            checkpoint_size: Cell::new(size),
            expiration_interval_ms,
        });
        if records > 0 {
            let state = runner.state.borrow();
            tracing::info!(partition = index, records, groups = state.groups.len() + state.consumer_groups.len(), "loaded coordinator partition");
        }
        runner.run_effects();
        tokio::task::spawn_local(runner.clone().timer_loop());
        tokio::task::spawn_local(runner.clone().expiration_loop());
        Ok(runner)
    }

    /// Registers a waiter for a response; returns its token.
    pub fn waiter(&self) -> (Token, oneshot::Receiver<Response>) {
        let token = self.next_token.get() + 1;
        self.next_token.set(token);
        let (tx, rx) = oneshot::channel();
        self.waiting.borrow_mut().insert(token, tx);
        (token, rx)
    }

    /// Runs `f` against the state machine, then carries out what it asked for.
    pub fn with_state<T>(self: &Rc<Self>, f: impl FnOnce(&mut CoordinatorState, i64) -> T) -> T {
        let out = f(&mut self.state.borrow_mut(), now_ms());
        self.run_effects();
        out
    }

    /// Carries out pending effects until there are none.
    fn run_effects(self: &Rc<Self>) {
        loop {
            let effects = self.state.borrow_mut().out.drain();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Reply(token, response) => {
                        if let Some(tx) = self.waiting.borrow_mut().remove(&token) {
                            let _ = tx.send(response);
                        }
                    }
                    Effect::Timer(key, deadline) => self.arm(key, deadline),
                    Effect::Append(id, records) => self.append(id, records),
                }
            }
        }
    }

    fn arm(&self, key: TimerKey, deadline: i64) {
        let seq = self.next_timer.get() + 1;
        self.next_timer.set(seq);
        self.timer_keys.borrow_mut().insert(seq, key);
        let mut timers = self.timers.borrow_mut();
        let earliest = timers.peek().map(|Reverse((at, _))| *at);
        timers.push(Reverse((deadline, seq)));
        if earliest.is_none_or(|at| deadline < at) {
            self.wake.notify_one();
        }
    }

    /// Appends records; the state machine hears the outcome once they are stored.
    fn append(self: &Rc<Self>, id: u64, records: Vec<GroupRecord>) {
        let now = now_ms();
        match self.write(&records, now) {
            Ok(None) => self.state.borrow_mut().appended(now, id, None),
            Ok(Some(durable)) => {
                let runner = self.clone();
                tokio::task::spawn_local(async move {
                    let error = match durable.await {
                        Ok(Ok(())) => None,
                        _ => Some(ResponseError::NotCoordinator),
                    };
                    runner.state.borrow_mut().appended(now_ms(), id, error);
                    runner.run_effects();
                });
            }
            Err(e) => {
                tracing::error!(partition = self.index, error = %e, "cannot write coordinator records");
                self.state.borrow_mut().appended(now, id, Some(storage_error_code(&e)));
            }
        }
        self.maybe_checkpoint();
    }

    /// Writes records as one batch. Returns a receiver when the flush policy wants an fsync.
    fn write(
        &self,
        records: &[GroupRecord],
        now: i64,
    ) -> Result<Option<oneshot::Receiver<crate::storage::partition::FlushResult>>, StorageError> {
        let batch = encode_batch(records, now);
        let (_, durable) = self.log.append(&batch, now)?;
        Ok(durable)
    }

    async fn timer_loop(self: Rc<Self>) {
        loop {
            let next = self.timers.borrow().peek().map(|Reverse((at, _))| *at);
            match next {
                None => self.wake.notified().await,
                Some(at) => {
                    let delay = (at - now_ms()).max(0) as u64;
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(delay)) => {}
                        _ = self.wake.notified() => continue,
                    }
                }
            }
            let now = now_ms();
            loop {
                let due = {
                    let mut timers = self.timers.borrow_mut();
                    match timers.peek() {
                        Some(Reverse((at, _))) if *at <= now => timers.pop().map(|Reverse((_, seq))| seq),
                        _ => None,
                    }
                };
                let Some(seq) = due else { break };
                let Some(key) = self.timer_keys.borrow_mut().remove(&seq) else { continue };
                self.state.borrow_mut().fire(now, &key);
                self.run_effects();
            }
        }
    }

    async fn expiration_loop(self: Rc<Self>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(self.expiration_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let expired = self.with_state(|s, now| s.expire_offsets(now));
            if expired > 0 {
                tracing::info!(partition = self.index, expired, "expired committed offsets");
            }
        }
    }

    /// Writes a checkpoint of the live state and drops the segments before it, once the log has
    /// grown well beyond the last checkpoint.
    fn maybe_checkpoint(&self) {
        let size = self.log.log.borrow().size_bytes();
        let threshold = CHECKPOINT_MIN_BYTES.max(self.checkpoint_size.get() * 2);
        if size < threshold {
            return;
        }
        match self.checkpoint() {
            Ok(()) => {
                let after = self.log.log.borrow().size_bytes();
                tracing::info!(partition = self.index, before = size, after, "compacted coordinator log");
                self.checkpoint_size.set(after);
            }
            Err(e) => tracing::error!(partition = self.index, error = %e, "coordinator log checkpoint failed"),
        }
    }

    fn checkpoint(&self) -> Result<(), StorageError> {
        let now = now_ms();
        let records = live_records(&self.state.borrow());
        let mut log = self.log.log.borrow_mut();
        log.roll(now)?;
        let start = log.log_end_offset();
        for chunk in records.chunks(CHECKPOINT_BATCH) {
            log.append(&encode_batch(chunk, now), now)?;
        }
        log.delete_segments_before(start)?;
        drop(log);
        self.log.publish_end_offset();
        Ok(())
    }

    /// Drops every waiter: their connections answer COORDINATOR_NOT_AVAILABLE (shutdown).
    pub fn fail_waiters(&self) {
        self.waiting.borrow_mut().clear();
    }

    pub fn group_count(&self) -> usize {
        self.state.borrow().groups.len()
    }
}

/// Storage failures as coordinator clients see them (spec §1.4).
fn storage_error_code(e: &StorageError) -> ResponseError {
    match e {
        StorageError::MessageTooLarge { .. } => ResponseError::UnknownServerError,
        _ => ResponseError::NotCoordinator,
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
            records.push(GroupRecord::Offset { group: group.clone(), topic: topic.clone(), partition: *partition, value: Some(value.clone()) });
        }
    }
    records
}

/// Encodes records as one uncompressed v2 batch.
fn encode_batch(records: &[GroupRecord], now: i64) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: now,
            key: Some(r.key()),
            value: r.value(),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None })
        .expect("coordinator records always encode");
    buf.freeze()
}

/// Reads every record of a coordinator partition's log, oldest first.
fn for_each_record(log: &Partition, mut f: impl FnMut(GroupRecord)) -> Result<(), StorageError> {
    let log = log.log.borrow();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
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
            let mut one = bytes.split_to(header.total_len());
            let set = RecordBatchDecoder::decode(&mut one).map_err(|_| {
                StorageError::Batch(crate::record_batch::BatchError::Invalid("coordinator batch does not decode"))
            })?;
            for record in set.records {
                if record.offset < offset {
                    continue;
                }
                let Some(key) = record.key else { continue };
                match GroupRecord::decode(&key, record.value.as_deref()) {
                    Ok(Some(r)) => f(r),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(offset = record.offset, error = %e, "skipping unreadable coordinator record"),
                }
            }
            last = header.last_offset() + 1;
        }
        if last <= offset {
            break;
        }
        offset = last;
    }
    Ok(())
}
