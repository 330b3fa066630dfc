//! When a member of a multi-voter group stands for election: decided here, with a pre-vote;
//! openraft runs the vote itself.
//!
//! openraft 0.9 draws a node's election timeout once per process and has no pre-vote. Both cost
//! whole election rounds after a leader dies:
//!
//! - two followers whose timeouts happen to be close split the vote, and split it again on every
//!   retry, since their timeouts stay the same;
//! - a follower with a shorter log stands first, is refused, and still raises the term, so the
//!   follower that could win is refused in turn, by it, and must try again a term later;
//! - a member that restarts stands before the leader's (backed-off) replication reaches it, and
//!   unseats a healthy leader.
//!
//! So openraft's own election timer is off ([`Election::start`]) and [`Election::run`] replaces
//! it: a follower that has not heard from a leader for [`LEASE`] plus a random delay, drawn anew
//! for every attempt, first asks the other voters whether they would vote for it (Raft's
//! pre-vote, §9.6 of Ongaro's thesis). A voter says yes only if it has not heard from a leader
//! for [`LEASE`] itself, does not lead, and holds no entry the candidate lacks. Only with a
//! quorum of yeses does the node stand, through `trigger().elect()`; otherwise the term stays as
//! it is. What "heard from a leader" means is seen where the group's RPCs arrive:
//! [`Election::append_entries`] and [`Election::install_snapshot`].
//!
//! Leadership spreads over the nodes because each group has a preferred leader, which stands
//! first. A group led by another node (the preferred one was down, or started later, or lost the
//! race of a new group's first election, which openraft runs in term 1 when each member
//! initializes the group) goes back to it, as Kafka's preferred leader election does: once the
//! preferred leader holds every entry, the leader hands the group over as a node that shuts down
//! does (`super::hand_off`), at once in term 1, else after leading for [`PREFERRED_LEADER_RETURN`].

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::ServerState;
use tokio::time::Instant;

use super::{LogId, LogReader, NodeId, Raft, TypeConfig};

/// How long a voter refuses to elect anyone after it last heard from a leader. It is openraft's
/// leader lease too (its `election_timeout_max`, see `super::group_config`), under which
/// openraft itself refuses votes.
pub const LEASE: Duration = Duration::from_millis(750);

/// Extra delay, in ms, before a follower stands, drawn for every attempt: the preferred leader
/// of a group first, so leadership spreads over the nodes, the others after it. Failover takes
/// about [`LEASE`] plus this after the last heartbeat from a leader that died.
fn spread(preferred_leader: bool) -> std::ops::Range<u64> {
    if preferred_leader {
        0..150
    } else {
        150..500
    }
}

/// How long a node other than the preferred leader leads a group (after term 1) before it hands
/// the group back to the preferred leader, which is up again and holds every entry.
const PREFERRED_LEADER_RETURN: Duration = Duration::from_secs(10);
/// How long a leader waits for the preferred leader to take the group over before it asks
/// again.
const HAND_OVER_RETRY: Duration = Duration::from_secs(1);

/// How often a follower checks whether it should stand.
const TICK: Duration = Duration::from_millis(50);
/// How long a candidate waits for a voter's pre-vote.
const PRE_VOTE_TIMEOUT: Duration = Duration::from_millis(250);

/// Asks another member of the group for its pre-vote; implemented by each group network.
pub trait Canvass {
    /// Whether `target` would vote for this node, whose last log id is `last_log_id`, now.
    fn pre_vote(&self, target: NodeId, last_log_id: Option<LogId>) -> impl Future<Output = Result<bool, String>>;
    /// Asks `target` to stand for election now (this node leads and hands the group over).
    fn ask_to_stand(&self, target: NodeId) -> impl Future<Output = Result<(), String>>;
}

/// The elections of one group on this node. Lives on the shard that owns the group.
pub struct Election {
    group: u32,
    raft: Raft,
    log: LogReader,
    preferred_leader: NodeId,
    /// When this node last heard from a leader.
    heard: Cell<Instant>,
    /// When this node last stood, or granted its vote, or led: it waits a timeout from then
    /// before it stands (again).
    last_attempt: Cell<Instant>,
    /// Cleared when the node is shutting down and hands its leadership over: it stands no more.
    standing: Cell<bool>,
    /// The snapshot being received, and the offset its next chunk may start at, at most.
    receiving: std::cell::RefCell<Option<(String, u64)>>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").field("group", &self.group).field("standing", &self.standing.get()).finish()
    }
}

impl Election {
    /// Takes over the elections of a started group: a group with other voters gets
    /// [`Election::run`] in place of openraft's election timer. `log` reads the group's log.
    ///
    /// A member that restarts with a leader's vote counts as having just heard from it, as
    /// openraft does (it refuses votes for the lease). Otherwise (a new group, or a member that
    /// was voting when it stopped) no leader is known.
    pub fn start<C: Canvass + 'static>(
        group: u32,
        raft: Raft,
        log: LogReader,
        preferred_leader: NodeId,
        canvass: C,
    ) -> std::rc::Rc<Election> {
        let now = Instant::now();
        let (knows_leader, voters) = {
            let m = raft.metrics().borrow().clone();
            (m.vote.committed, m.membership_config.membership().voter_ids().count())
        };
        let long_ago = now.checked_sub(LEASE).unwrap_or(now);
        let election = std::rc::Rc::new(Election {
            group,
            raft,
            log,
            preferred_leader,
            heard: Cell::new(if knows_leader { now } else { long_ago }),
            last_attempt: Cell::new(now),
            standing: Cell::new(true),
            receiving: Default::default(),
        });
        if voters > 1 {
            election.raft.runtime_config().elect(false);
            tokio::task::spawn_local(election.clone().run(canvass));
        }
        election
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// This node stands for election no more (it is shutting down); it still votes.
    pub fn withdraw(&self) {
        self.standing.set(false);
    }

    /// Stands for election at once: the leader hands the group over to this node. Refused once
    /// this node is shutting down.
    pub async fn stand_now(&self) -> Result<(), String> {
        if !self.standing.get() {
            return Err("this node is shutting down".into());
        }
        self.raft.trigger().elect().await.map_err(|e| e.to_string())
    }

    fn heard_from_leader(&self) {
        self.heard.set(Instant::now());
    }

    /// A leader's append-entries (or heartbeat), handed to the group's Raft.
    pub async fn append_entries(&self, rpc: AppendEntriesRequest<TypeConfig>) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let answer = self.raft.append_entries(rpc).await;
        if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            self.heard_from_leader();
        }
        answer
    }

    /// A leader's snapshot chunk, handed to the group's Raft. Chunks come in order (a resent
    /// one may repeat what arrived): one that starts past what this snapshot has received, or
    /// continues a snapshot that is not the one being received, is refused before openraft would
    /// seek to it and grow the snapshot's buffer to that offset.
    pub async fn install_snapshot(
        &self,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let id = &rpc.meta.snapshot_id;
        let expected = match &*self.receiving.borrow() {
            Some((receiving, next)) if receiving == id => *next,
            _ => 0,
        };
        if rpc.offset > expected {
            let segment = |offset| openraft::SnapshotSegmentId { id: id.clone(), offset };
            let mismatch = openraft::error::SnapshotMismatch { expect: segment(expected), got: segment(rpc.offset) };
            return Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(mismatch)));
        }
        let end = rpc.offset.saturating_add(rpc.data.len() as u64);
        *self.receiving.borrow_mut() = (!rpc.done).then(|| (id.clone(), end.max(expected)));
        let leader_vote = rpc.vote;
        let answer = self.raft.install_snapshot(rpc).await;
        if matches!(&answer, Ok(r) if r.vote == leader_vote) {
            self.heard_from_leader();
        }
        answer
    }

    /// A candidate's vote request, handed to the group's Raft.
    pub async fn vote(&self, rpc: VoteRequest<NodeId>) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
        let answer = self.raft.vote(rpc).await;
        if matches!(&answer, Ok(r) if r.vote_granted) {
            // As in Raft, granting a vote restarts this node's own election timer.
            self.last_attempt.set(Instant::now());
        }
        answer
    }

    /// Whether this node would vote now for a candidate whose last log id is `candidate_last`.
    pub fn pre_vote(&self, candidate_last: Option<LogId>) -> bool {
        let leading = self.raft.metrics().borrow().state == ServerState::Leader;
        let silent = self.heard.get().elapsed();
        let mine = self.log.last_log_id();
        let granted = !leading && silent >= LEASE && candidate_last >= mine;
        tracing::debug!(group = self.group, granted, leading, ?silent, ?candidate_last, ?mine, "pre-vote asked");
        granted
    }

    /// As if this node had heard from no leader for [`LEASE`] (tests of the pre-vote).
    #[cfg(test)]
    pub fn forget_leader(&self) {
        self.heard.set(Instant::now() - LEASE);
    }

    fn draw_timeout(&self, me: NodeId) -> Duration {
        LEASE + Duration::from_millis(fastrand::u64(spread(self.preferred_leader == me)))
    }

    /// Whether this node, leading since `led_since`, should now hand the group to its preferred
    /// leader: that member holds every entry, and this node's lease has run out, so its vote and
    /// the candidate's own make a quorum.
    fn should_hand_over(&self, m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>, led_since: Instant) -> bool {
        let caught_up =
            m.replication.as_ref().and_then(|r| r.get(&self.preferred_leader)).is_some_and(|l| l.map(|l| l.index) == m.last_log_index);
        self.standing.get()
            && self.preferred_leader != m.id
            && led_since.elapsed() >= if m.current_term == 1 { LEASE } else { PREFERRED_LEADER_RETURN }
            && caught_up
    }

    /// Stands for election whenever the leader has been silent for a fresh random timeout and a
    /// quorum granted the pre-vote. Ends when the group shuts down.
    async fn run<C: Canvass>(self: std::rc::Rc<Self>, canvass: C) {
        let mut metrics = self.raft.metrics();
        let me = metrics.borrow().id;
        let mut timeout = self.draw_timeout(me);
        let mut led_since: Option<Instant> = None;
        let mut handed_over_at: Option<Instant> = None;
        loop {
            tokio::time::sleep(TICK).await;
            if metrics.has_changed().is_err() {
                return;
            }
            let (leading, others, hand_over) = {
                let m = metrics.borrow_and_update();
                let leading = m.state == ServerState::Leader;
                if !leading {
                    led_since = None;
                } else if led_since.is_none() {
                    led_since = Some(Instant::now());
                }
                let hand_over = led_since.is_some_and(|since| self.should_hand_over(&m, since));
                let others: Vec<NodeId> = m.membership_config.membership().voter_ids().filter(|&v| v != me).collect();
                (leading, others, hand_over)
            };
            if leading {
                // A leader that steps down waits a whole timeout before it stands again.
                self.last_attempt.set(Instant::now());
                if hand_over && handed_over_at.is_none_or(|at| at.elapsed() >= HAND_OVER_RETRY) {
                    handed_over_at = Some(Instant::now());
                    match canvass.ask_to_stand(self.preferred_leader).await {
                        Ok(()) => {
                            tracing::info!(group = self.group, to = self.preferred_leader, "handing the group back to its preferred leader")
                        }
                        Err(e) => tracing::debug!(group = self.group, error = %e, "the preferred leader would not stand"),
                    }
                }
                continue;
            }
            let due = |e: &Election| e.heard.get().elapsed() >= timeout && e.last_attempt.get().elapsed() >= timeout;
            if !self.standing.get() || !due(&self) {
                continue;
            }
            let last_log_id = self.log.last_log_id();
            let asks = others.iter().map(|&voter| tokio::time::timeout(PRE_VOTE_TIMEOUT, canvass.pre_vote(voter, last_log_id)));
            let answers = futures_util::future::join_all(asks).await;
            tracing::debug!(group = self.group, ?answers, "pre-vote answers");
            let granted = 1 + answers.into_iter().filter(|r| matches!(r, Ok(Ok(true)))).count();
            // A leader may have been heard from meanwhile.
            if 2 * granted > others.len() + 1 && due(&self) && self.standing.get() {
                tracing::info!(
                    group = self.group,
                    granted,
                    ?last_log_id,
                    "no leader heard from; a quorum granted the pre-vote; standing for election"
                );
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
            } else {
                tracing::debug!(group = self.group, granted, "pre-vote not granted by a quorum");
            }
            self.last_attempt.set(Instant::now());
            timeout = self.draw_timeout(me);
        }
    }
}
