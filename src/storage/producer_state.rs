//! Idempotent-producer bookkeeping for one partition (KIP-98's producer state).
//!
//! For each producer id the partition remembers the epoch and the last five batches it wrote
//! (their sequence ranges and offsets). A retried batch that matches one of them is a duplicate:
//! it is acknowledged with the original offset and not written again. A batch whose first
//! sequence does not follow the last one is out of order. Five is the most batches a producer
//! keeps in flight per partition with idempotence on.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::record_batch::BatchHeader;

/// Batches remembered per producer (`max.in.flight.requests.per.connection` ≤ 5).
const CACHED_BATCHES: usize = 5;

/// What the producer state says about a new batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceCheck {
    /// Write it.
    Append,
    /// Already written at this base offset: acknowledge without writing.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id}: epoch {epoch} is older than the current epoch {current}")]
    FencedEpoch { producer_id: i64, epoch: i16, current: i16 },
    #[error("producer {producer_id}: sequence {got} does not follow {last} (epoch {epoch})")]
    OutOfOrder { producer_id: i64, epoch: i16, last: i32, got: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct CachedBatch {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    /// Wall time of the last write, for expiry (`producer.id.expiration.ms`).
    last_write_ms: i64,
}

/// Per-partition producer table. Lives with its partition on the owning shard.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// Checks a batch from an idempotent producer before it is written.
    pub(crate) fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state expired): any sequence starts it, as in Kafka.
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(SequenceError::FencedEpoch { producer_id: h.producer_id, epoch: h.producer_epoch, current: entry.epoch });
        }
        if h.producer_epoch > entry.epoch {
            // A bumped epoch restarts sequences at zero.
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder { producer_id: h.producer_id, epoch: h.producer_epoch, last: -1, got: h.base_sequence })
            };
        }
        let last_seq = h.last_sequence();
        if let Some(dup) = entry.batches.iter().find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq) {
            return Ok(SequenceCheck::Duplicate { base_offset: dup.base_offset });
        }
        let last = entry.batches.back().map_or(-1, |b| b.last_seq);
        if h.base_sequence == next_sequence(last) {
            Ok(SequenceCheck::Append)
        } else {
            Err(SequenceError::OutOfOrder { producer_id: h.producer_id, epoch: h.producer_epoch, last, got: h.base_sequence })
        }
    }

    /// Records a batch that was written (at append, and when rebuilding from the log). A
    /// producer new to a partition that already tracks `max` producers takes the place of the one
    /// that wrote least recently, as if that one's state had expired early: the id is the client's
    /// choice, so the table must not grow with what a client invents. Returns whether one was.
    pub(crate) fn record(&mut self, h: &BatchHeader, now_ms: i64, max: usize) -> bool {
        if !h.has_producer_id() {
            return false;
        }
        let mut evicted = false;
        if self.producers.len() >= max.max(1) && !self.producers.contains_key(&h.producer_id) {
            if let Some(oldest) = self.producers.iter().min_by_key(|(id, e)| (e.last_write_ms, **id)).map(|(id, _)| *id) {
                self.producers.remove(&oldest);
                evicted = true;
            }
        }
        let entry = self.producers.entry(h.producer_id).or_insert_with(|| ProducerEntry {
            epoch: h.producer_epoch,
            batches: VecDeque::with_capacity(CACHED_BATCHES),
            last_write_ms: now_ms,
        });
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(CachedBatch { first_seq: h.base_sequence, last_seq: h.last_sequence(), base_offset: h.base_offset });
        entry.last_write_ms = entry.last_write_ms.max(now_ms);
        evicted
    }

    /// Each producer's last batch, by its base offset: compaction keeps that batch, emptied if
    /// need be, so that a retry of it is still known after the producer state is rebuilt.
    pub(crate) fn last_batches(&self) -> HashMap<i64, i64> {
        self.producers.iter().filter_map(|(&id, e)| Some((id, e.batches.back()?.base_offset))).collect()
    }

    /// Forgets producers that have not written for `expiration_ms`.
    pub(crate) fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, e| now_ms - e.last_write_ms < expiration_ms);
    }

    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }
}

fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerStates::default();
        let b0 = header(1, 0, 0, 3, 0);
        assert_eq!(s.check(&b0), Ok(SequenceCheck::Append));
        s.record(&b0, 0, usize::MAX);
        let b1 = header(1, 0, 3, 2, 3);
        assert_eq!(s.check(&b1), Ok(SequenceCheck::Append));
        s.record(&b1, 0, usize::MAX);
        // Retry of the first batch: duplicate, original offset.
        assert_eq!(s.check(&header(1, 0, 0, 3, 99)), Ok(SequenceCheck::Duplicate { base_offset: 0 }));
        // A gap.
        assert!(matches!(s.check(&header(1, 0, 9, 1, 99)), Err(SequenceError::OutOfOrder { last: 4, got: 9, .. })));
        // Older epoch is fenced.
        s.record(&header(1, 2, 0, 1, 5), 0, usize::MAX);
        assert!(matches!(s.check(&header(1, 1, 1, 1, 99)), Err(SequenceError::FencedEpoch { current: 2, .. })));
        // Newer epoch must restart at 0.
        assert!(s.check(&header(1, 3, 5, 1, 99)).is_err());
        assert_eq!(s.check(&header(1, 3, 0, 1, 99)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn only_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..6 {
            s.record(&header(7, 0, i, 1, i as i64), 0, usize::MAX);
        }
        assert_eq!(s.check(&header(7, 0, 5, 1, 0)), Ok(SequenceCheck::Duplicate { base_offset: 5 }));
        assert_eq!(s.check(&header(7, 0, 1, 1, 0)), Ok(SequenceCheck::Duplicate { base_offset: 1 }));
        // Sequence 0 fell out of the cache: it is no longer recognised, and it is out of order.
        assert!(s.check(&header(7, 0, 0, 1, 0)).is_err());
    }

    #[test]
    fn unknown_producer_may_start_anywhere_and_sequences_wrap() {
        let mut s = ProducerStates::default();
        let h = header(3, 0, i32::MAX, 1, 0);
        assert_eq!(s.check(&h), Ok(SequenceCheck::Append));
        s.record(&h, 0, usize::MAX);
        assert_eq!(s.check(&header(3, 0, 0, 1, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn expiry() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 1, 0), 1000, usize::MAX);
        s.record(&header(2, 0, 0, 1, 1), 5000, usize::MAX);
        s.expire(6000, 2000);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_full_table_forgets_the_producer_that_wrote_least_recently() {
        let mut s = ProducerStates::default();
        for (id, at) in [(1, 300), (2, 100), (3, 200)] {
            assert!(!s.record(&header(id, 0, 0, 1, id), at, 3));
        }
        // A known producer never evicts.
        assert!(!s.record(&header(1, 0, 1, 1, 10), 400, 3));
        assert!(s.record(&header(4, 0, 0, 1, 11), 500, 3), "a fourth producer takes a place");
        assert_eq!(s.len(), 3);
        assert_eq!(s.check(&header(2, 0, 5, 1, 12)), Ok(SequenceCheck::Append), "producer 2 (oldest) was forgotten");
        assert!(s.check(&header(3, 0, 5, 1, 12)).is_err(), "producer 3 is still tracked");
    }
}
