//! Following the partition's Raft group: serving while this node leads it with a quorum,
//! stepping down when it does not, handing leadership over at shutdown, and naming the leader
//! to FindCoordinator.

use super::*;

/// How long a leader may go without hearing from a quorum before it stops serving: the voters
/// elect no other leader for [`crate::raft::election::LEASE`] after they last heard from it, less
/// the 100 ms at which `follow_leadership` looks.
const QUORUM_LEASE: Duration = Duration::from_millis(crate::raft::election::LEASE.as_millis() as u64 - 100);

impl PartitionRunner {
    /// Follows the Raft group's leadership: serves once this node leads and has applied every
    /// entry it had at election (the state is then complete), stops serving when it no longer
    /// leads, or when it has heard from no quorum for [`QUORUM_LEASE`] (a leader cut off from
    /// the others: clients must look elsewhere, where a new leader is being elected). Ends when
    /// the group shuts down.
    pub(super) async fn follow_leadership(self: Rc<Self>) {
        let Some(raft) = self.raft().cloned() else {
            return;
        };
        let mut metrics = raft.metrics();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The log's last index when this node was first seen leading (with a quorum).
        let mut catch_up: Option<Option<u64>> = None;
        let mut quorum_seen = tokio::time::Instant::now();
        let mut was_leading = false;
        loop {
            let (leading, last_log, applied, solo) = {
                let m = metrics.borrow_and_update();
                if self.leader.replace(m.current_leader) != m.current_leader && m.current_leader.is_some() {
                    crate::metrics::raft_leader_changed(self.index.to_string());
                }
                let solo = m.membership_config.membership().voter_ids().count() == 1;
                let leading = m.state == ServerState::Leader && m.current_leader == Some(self.node_id);
                if leading && !was_leading {
                    // Just elected: a quorum granted its votes now.
                    quorum_seen = tokio::time::Instant::now();
                }
                was_leading = leading;
                if let Some(ms) = m.millis_since_quorum_ack {
                    quorum_seen = quorum_seen.max(tokio::time::Instant::now() - Duration::from_millis(ms));
                }
                (leading, m.last_log_index, m.last_applied.map(|l| l.index), solo)
            };
            let has_quorum = solo || quorum_seen.elapsed() < QUORUM_LEASE;
            self.cut_off.set(leading && !has_quorum);
            if !(leading && has_quorum) {
                catch_up = None;
                if self.serving.get() {
                    self.step_down(if leading { "no quorum reached" } else { "another node leads" });
                }
            } else if !self.serving.get() && !self.leaving.get() {
                let target = *catch_up.get_or_insert(last_log);
                if applied >= target {
                    self.take_over(target);
                }
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                _ = tick.tick(), if leading && !solo => {}
            }
        }
    }

    /// Starts serving: the state holds every entry up to `applied`; what follows is proposed
    /// here.
    pub(super) fn take_over(self: &Rc<Self>, applied: Option<u64>) {
        self.offsets.lead_after(applied);
        self.state.borrow_mut().start_sessions(now_ms());
        self.serving.set(true);
        self.serving_changed.notify_waiters();
        tracing::debug!(partition = self.index, applied = ?applied, "coordinator partition serving (this node leads its Raft group)");
        self.run_effects();
    }

    /// Stops serving: pending requests are dropped, timers cancelled, and the state is rebuilt
    /// from the partition's log (what was applied), since it may hold records that never
    /// committed. Entries applied from now on are replayed.
    pub(super) fn step_down(&self, why: &'static str) {
        self.serving.set(false);
        self.serving_changed.notify_waiters();
        self.fail_waiters();
        self.proposals.borrow_mut().queue.clear();
        self.timers.borrow_mut().clear();
        self.timer_keys.borrow_mut().clear();
        self.rebalances.borrow_mut().clear();
        self.history.borrow_mut().clear();
        self.offsets.follow();
        tracing::info!(partition = self.index, leader = ?self.leader.get(), why, "coordinator partition stopped serving");
    }

    /// The node that leads this partition's Raft group, as last seen; `None` while there is none,
    /// or while this node thinks it leads but does not serve (catching up, or cut off).
    pub fn leader(&self) -> Option<u64> {
        self.leader.get().filter(|&id| id != self.node_id || self.serving.get())
    }

    /// The node FindCoordinator names: the leader; or, when this node is cut off from the others,
    /// the voter with the lowest id among them. Clients keep asking the node they last used, so
    /// naming no one would keep them asking this node for as long as it is cut off. A node named
    /// wrongly answers NOT_COORDINATOR, and the client asks again, now of a node that knows the
    /// new leader (librdkafka prefers the most recently used broker, the lower id on a tie). The
    /// guess stays the same, so a client does not flap between nodes.
    pub fn coordinator_hint(&self) -> Option<u64> {
        if !self.cut_off.get() {
            return self.leader();
        }
        self.voters.iter().copied().find(|&v| v != self.node_id)
    }

    /// Whether group requests are served here: NOT_COORDINATOR where another node leads (or none
    /// does), COORDINATOR_LOAD_IN_PROGRESS while this node, newly elected, catches up.
    pub fn availability(&self) -> Result<(), ResponseError> {
        if self.serving.get() {
            Ok(())
        } else if self.leader.get() == Some(self.node_id) && !self.cut_off.get() {
            Err(ResponseError::CoordinatorLoadInProgress)
        } else {
            Err(ResponseError::NotCoordinator)
        }
    }

    /// The partition's Raft group, once started.
    pub fn raft(&self) -> Option<&Raft> {
        self.election.get().map(|e| e.raft())
    }

    /// The partition's Raft group with its elections (where peers' RPCs arrive), once started.
    pub fn election(&self) -> Option<&Rc<Election>> {
        self.election.get()
    }

    /// Whether this partition answers group requests (it leads its Raft group and has caught up).
    pub fn serving(&self) -> bool {
        self.serving.get()
    }

    /// Before a clean shutdown of a cluster node: stops serving and hands the group's leadership
    /// to another node (see [`crate::raft::hand_off`]), if this node leads it.
    pub async fn hand_off(&self, peers: &crate::raft::transport::Peers) {
        self.leaving.set(true);
        if self.serving.get() {
            self.step_down("shutting down");
        }
        let Some(election) = self.election.get() else {
            return;
        };
        if election.raft().metrics().borrow().current_leader != Some(self.node_id) {
            return;
        }
        match crate::raft::hand_off(election, self.node_id, self.index as u32, peers).await {
            Ok(to) => tracing::info!(partition = self.index, to, "handed coordinator leadership over"),
            Err(why) => {
                tracing::info!(partition = self.index, %why, "could not hand coordinator leadership over; the others will elect a leader")
            }
        }
    }
}
