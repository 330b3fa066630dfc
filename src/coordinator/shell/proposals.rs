//! Records on their way into the Raft log: queued per request, batched into entries within the
//! `__consumer_offsets` batch bound (split where the state machine allows it, refused where it
//! must be atomic), one write in flight at a time.

use super::*;

/// How long a write may wait to commit (Kafka's `offsets.commit.timeout.ms`); after that the
/// request gets COORDINATOR_NOT_AVAILABLE (a leader cut off from its quorum never acknowledges).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Requests whose records wait for the next Raft entry.
#[derive(Debug, Default)]
pub(super) struct Proposals {
    pub(super) queue: VecDeque<Queued>,
    pub(super) in_flight: bool,
}

/// One request's records, encoded, with the bytes they take in a batch.
#[derive(Debug)]
pub(super) struct Queued {
    id: u64,
    records: Vec<StoredRecord>,
    bytes: usize,
}

/// What the next Raft entry carries: the records of the requests `ids`, or a refusal of one
/// request whose records cannot be written.
#[derive(Debug)]
pub(super) enum Next {
    Entry {
        ids: Vec<u64>,
        records: Vec<StoredRecord>,
    },
    /// One request's records, in entries of at most the bound each (a write that may be split).
    Pieces {
        id: u64,
        pieces: Vec<Vec<StoredRecord>>,
    },
    Refuse {
        id: u64,
        bytes: usize,
        max: usize,
    },
}

impl PartitionRunner {
    /// Queues records for the Raft log; the state machine hears the outcome once they are
    /// committed. One write is in flight at a time; what queues meanwhile shares the next entry.
    pub(super) fn append(self: &Rc<Self>, id: u64, records: Vec<GroupRecord>) {
        let records: Vec<StoredRecord> = records.iter().map(GroupRecord::encode).collect();
        let bytes = crate::coordinator::log_batch::batch_bytes(&records);
        let mut proposals = self.proposals.borrow_mut();
        proposals.queue.push_back(Queued { id, records, bytes });
        if !proposals.in_flight {
            proposals.in_flight = true;
            tokio::task::spawn_local(self.clone().propose());
        }
    }

    /// Takes what the next entry carries from the queue: requests in order while their records
    /// fit in one batch. A request too large for a batch alone is split where the state machine
    /// allows it; where it must be atomic it goes alone, up to its own bound (an offset commit:
    /// `max.message.bytes`; group metadata: the coordinator's), and is refused beyond it (before
    /// anything is proposed, so the log never holds an entry it could not apply).
    pub(super) fn next_entry(&self) -> Option<Next> {
        let bound = self.offsets.max_batch_bytes();
        let mut proposals = self.proposals.borrow_mut();
        let first = proposals.queue.pop_front()?;
        if first.bytes > bound {
            let state = self.state.borrow();
            return Some(if state.may_split(first.id) {
                Next::Pieces { id: first.id, pieces: split_records(first.records, bound) }
            } else {
                let max = state.atomic_bound(first.id).min(crate::raft::MAX_COMMAND_BYTES);
                if first.bytes <= max {
                    // Group metadata larger than a user topic's batch: an entry of its own.
                    Next::Entry { ids: vec![first.id], records: first.records }
                } else {
                    Next::Refuse { id: first.id, bytes: first.bytes, max }
                }
            });
        }
        let (mut ids, mut records, mut bytes) = (vec![first.id], first.records, first.bytes);
        while let Some(next) = proposals.queue.front() {
            // Each batch's header and log-id header are counted once.
            let more = next.bytes - crate::coordinator::log_batch::batch_bytes(&[]);
            if bytes + more > bound {
                break;
            }
            let next = proposals.queue.pop_front().expect("front exists");
            ids.push(next.id);
            records.extend(next.records);
            bytes += more;
        }
        Some(Next::Entry { ids, records })
    }

    pub(super) async fn propose(self: Rc<Self>) {
        loop {
            let Some(next) = self.next_entry() else {
                self.proposals.borrow_mut().in_flight = false;
                return;
            };
            let (ids, outcome) = match next {
                Next::Entry { ids, records } => {
                    let outcome = if records.is_empty() { Ok(()) } else { self.write(&records).await };
                    if let Err(code) = outcome {
                        tracing::warn!(partition = self.index, records = records.len(), error = ?code, "coordinator records not written");
                    }
                    (ids, outcome)
                }
                Next::Pieces { id, pieces } => {
                    let mut outcome = Ok(());
                    for piece in &pieces {
                        outcome = self.write(piece).await;
                        if outcome.is_err() {
                            break;
                        }
                    }
                    if let Err(code) = outcome {
                        tracing::warn!(partition = self.index, pieces = pieces.len(), error = ?code, "coordinator records not written");
                    }
                    (vec![id], outcome)
                }
                Next::Refuse { id, bytes, max } => {
                    crate::metrics::coordinator_write_refused();
                    tracing::warn!(
                        partition = self.index,
                        bytes,
                        max,
                        "coordinator records refused: larger than one __consumer_offsets batch may be"
                    );
                    (vec![id], Err(ResponseError::RecordListTooLarge))
                }
            };
            let now = now_ms();
            {
                let mut state = self.state.borrow_mut();
                for id in ids {
                    state.appended(now, id, outcome.err());
                }
            }
            self.run_effects();
        }
    }

    /// Writes records as one entry and waits until it is committed and applied.
    pub(super) async fn write(&self, records: &[StoredRecord]) -> Result<(), ResponseError> {
        let Some(raft) = self.raft() else {
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let started = std::time::Instant::now();
        let write = raft.client_write(Command::new(encode_batch(records, now_ms())));
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(_)) => {
                crate::metrics::coordinator_write_committed(started.elapsed());
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::warn!(partition = self.index, error = %e, "Raft write failed");
                Err(raft_error_code(&e))
            }
            Err(_) => {
                tracing::warn!(partition = self.index, "Raft write did not commit within {WRITE_TIMEOUT:?}");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }
}

/// Raft write failures as coordinator clients see them (spec §1.4): this node does not lead the
/// partition (any more), or its log failed; either way clients look for the coordinator again.
pub(super) fn raft_error_code(e: &openraft::error::RaftError<u64, openraft::error::ClientWriteError<u64, BasicNode>>) -> ResponseError {
    match e {
        openraft::error::RaftError::APIError(_) | openraft::error::RaftError::Fatal(_) => ResponseError::NotCoordinator,
    }
}
