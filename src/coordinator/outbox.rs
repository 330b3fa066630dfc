//! What one call into the state machine asks of the shell that runs it: replies to parked
//! requests, timers to arm, events, and records to append (with what to do once they are
//! stored), collected in an [`Outbox`].

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::events::GroupEvent;
use super::group::{Member, Token};
use super::records::GroupRecord;
use super::requests::{JoinResult, SyncResult};

/// Timers the state machine asks for. Each firing is checked against the current state, so a
/// timer that is no longer relevant does nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TimerKey {
    /// A member's session (also the 5-minute new-member join timeout).
    Session { group: String, member: String },
    /// A MEMBER_ID_REQUIRED member that has not re-joined.
    Pending { group: String, member: String },
    /// The join phase: the initial delay or the rebalance timeout.
    Join { group: String },
    /// The sync phase (KAFKA-12890).
    Sync { group: String },
    /// A KIP-848 member's session.
    ConsumerSession { group: String, member: String },
    /// A KIP-848 member that must revoke partitions before this deadline.
    ConsumerRebalance { group: String, member: String },
    /// A consumer group's target assignment, deferred by the assignment interval.
    ConsumerAssignment { group: String },
    /// A classic member of a consumer group told to re-join (§6.10).
    ClassicJoin { group: String, member: String },
    /// A classic member of a consumer group that joined and owes a SyncGroup (§6.10).
    ClassicSync { group: String, member: String },
}

/// A response delivered to a request that was parked or waited for its records.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    Join(JoinResult),
    Sync(SyncResult),
    /// Per offset of the request, in request order.
    Commit(Vec<i16>),
    /// Per group of the request, in request order.
    DeleteGroups(Vec<i16>),
}

/// What the state machine wants done.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Reply(Token, Response),
    Timer(TimerKey, i64),
    /// Something happened at this time (see [`super::events`]); nothing waits for it.
    Event(i64, GroupEvent),
    /// Append these records; call [`super::state::CoordinatorState::appended`] with `id` once they are stored.
    Append(u64, Vec<GroupRecord>),
}

/// What to do once an append completes.
#[derive(Debug)]
pub(crate) enum Continuation {
    /// Nothing waits for it (a failure is only logged).
    Nothing,
    /// Nothing waits for it, but its records go in one batch or not at all (a group converted
    /// from one protocol to the other).
    Atomic,
    /// A classic member joined a consumer group: answer its JoinGroup once the records are
    /// stored (with the write's error otherwise).
    Joined { token: Token, result: JoinResult },
    /// The leader's SyncGroup of `generation`: deliver the assignments.
    SyncComplete { group: String, generation: i32, assignments: HashMap<String, Bytes> },
    /// A static member replaced without rebalance: answer its JoinGroup, or undo on failure.
    StaticRejoin {
        group: String,
        token: Token,
        result: JoinResult,
        old_member: Box<Member>,
        new_member_id: String,
        old_leader: Option<String>,
    },
    /// Offsets accepted by OffsetCommit: apply them and answer.
    Commit { group: String, token: Token, offsets: Vec<(String, i32, super::records::OffsetValue)>, codes: Vec<i16> },
    /// DeleteGroups: answer.
    DeleteGroups { token: Token, codes: Vec<i16> },
}

/// What a failed write of the coordinator's records tells the client (spec §1.4). Records too
/// large for a batch fail an offset commit with INVALID_COMMIT_OFFSET_SIZE, per partition (the
/// code Kafka's coordinator gave for it before 4.0, and the one that names the cause), and any
/// other write with UNKNOWN_SERVER_ERROR, as Kafka's; other codes pass as they are.
pub(crate) fn write_error(error: ResponseError, then: &Continuation) -> ResponseError {
    match error {
        ResponseError::MessageTooLarge | ResponseError::RecordListTooLarge | ResponseError::InvalidFetchSize => match then {
            Continuation::Commit { .. } => ResponseError::InvalidCommitOffsetSize,
            _ => ResponseError::UnknownServerError,
        },
        other => other,
    }
}

/// Outputs collected during one call into the state machine.
#[derive(Debug, Default)]
pub struct Outbox {
    pub effects: Vec<Effect>,
    next_append: u64,
    pub(crate) continuations: HashMap<u64, Continuation>,
}

impl Outbox {
    pub(crate) fn reply(&mut self, token: Token, response: Response) {
        self.effects.push(Effect::Reply(token, response));
    }

    pub(crate) fn event(&mut self, at: i64, event: GroupEvent) {
        self.effects.push(Effect::Event(at, event));
    }

    pub(crate) fn timer(&mut self, key: TimerKey, deadline: i64) {
        self.effects.push(Effect::Timer(key, deadline));
    }

    pub(crate) fn append(&mut self, records: Vec<GroupRecord>, then: Continuation) {
        self.next_append += 1;
        let id = self.next_append;
        self.continuations.insert(id, then);
        self.effects.push(Effect::Append(id, records));
    }

    /// Takes the effects produced so far.
    pub fn drain(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }
}
