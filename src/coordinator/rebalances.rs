//! Rebalances as they run, from the coordinator's events: when one began and why, when its join
//! phase ended, and when it was over. Each finished rebalance becomes a [`RebalanceSummary`],
//! which the shell logs (one line per rebalance) and counts in metrics.

use std::collections::HashMap;

use super::events::{GroupEvent, GroupKind, RebalanceCause};

/// One rebalance from its start to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceSummary {
    pub group: String,
    pub kind: GroupKind,
    /// What started it; `restarts` counts the causes that started it again before it ended.
    pub cause: RebalanceCause,
    pub restarts: u32,
    pub generation_before: i32,
    pub generation_after: i32,
    pub members_before: usize,
    pub members_after: usize,
    /// Classic groups: from the start to the end of the join phase, and from there to Stable.
    pub join_ms: Option<i64>,
    pub sync_ms: Option<i64>,
    pub total_ms: i64,
}

#[derive(Debug)]
struct InFlight {
    kind: GroupKind,
    cause: RebalanceCause,
    restarts: u32,
    started_at: i64,
    generation_before: i32,
    members_before: usize,
    join_completed_at: Option<i64>,
}

/// The rebalances in progress, by group.
#[derive(Debug, Default)]
pub struct RebalanceTracker {
    in_flight: HashMap<String, InFlight>,
}

impl RebalanceTracker {
    /// Takes in one event; returns the summary of a rebalance it ended.
    pub fn observe(&mut self, at: i64, event: &GroupEvent) -> Option<RebalanceSummary> {
        match event {
            GroupEvent::RebalanceStarted { group, kind, cause, generation, members } => {
                // KIP-848 names the new epoch; the one before it is the previous.
                let before = if *kind == GroupKind::Consumer { generation - 1 } else { *generation };
                match self.in_flight.get_mut(group) {
                    Some(running) => running.restarts += 1,
                    None => {
                        let running = InFlight {
                            kind: *kind,
                            cause: cause.clone(),
                            restarts: 0,
                            started_at: at,
                            generation_before: before,
                            members_before: *members,
                            join_completed_at: None,
                        };
                        self.in_flight.insert(group.clone(), running);
                    }
                }
                None
            }
            GroupEvent::JoinCompleted { group, generation, members } => {
                if *members == 0 {
                    return self.finish(group, at, *generation, 0);
                }
                if let Some(running) = self.in_flight.get_mut(group) {
                    running.join_completed_at = Some(at);
                }
                None
            }
            GroupEvent::Stabilized { group, generation, members, .. } => self.finish(group, at, *generation, *members),
            // A group deleted or expired mid-rebalance: it never ends.
            GroupEvent::StateChanged { group, to: super::group::GroupState::Dead, .. } => {
                self.in_flight.remove(group);
                None
            }
            _ => None,
        }
    }

    fn finish(&mut self, group: &str, at: i64, generation: i32, members: usize) -> Option<RebalanceSummary> {
        let running = self.in_flight.remove(group)?;
        Some(RebalanceSummary {
            group: group.to_string(),
            kind: running.kind,
            cause: running.cause,
            restarts: running.restarts,
            generation_before: running.generation_before,
            generation_after: generation,
            members_before: running.members_before,
            members_after: members,
            join_ms: running.join_completed_at.map(|j| j - running.started_at),
            sync_ms: running.join_completed_at.map(|j| at - j),
            total_ms: at - running.started_at,
        })
    }

    /// Forgets every rebalance in progress (the coordinator partition moved away).
    pub fn clear(&mut self) {
        self.in_flight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(cause: RebalanceCause, generation: i32, members: usize) -> GroupEvent {
        GroupEvent::RebalanceStarted { group: "g".into(), kind: GroupKind::Classic, cause, generation, members }
    }

    #[test]
    fn a_classic_rebalance_is_summed_up_with_its_phases() {
        let mut t = RebalanceTracker::default();
        let cause = RebalanceCause::MemberJoined { member: "b".into() };
        assert_eq!(t.observe(100, &started(cause.clone(), 3, 1)), None);
        assert_eq!(t.observe(150, &started(RebalanceCause::MetadataChanged { member: "a".into() }, 3, 2)), None);
        assert_eq!(t.observe(400, &GroupEvent::JoinCompleted { group: "g".into(), generation: 4, members: 2 }), None);
        let done = t.observe(460, &GroupEvent::Stabilized { group: "g".into(), kind: GroupKind::Classic, generation: 4, members: 2 });
        let done = done.expect("the rebalance ended");
        assert_eq!((done.cause, done.restarts), (cause, 1), "the first cause is kept, the restart counted");
        assert_eq!((done.generation_before, done.generation_after, done.members_before, done.members_after), (3, 4, 1, 2));
        assert_eq!((done.join_ms, done.sync_ms, done.total_ms), (Some(300), Some(60), 360));
        assert_eq!(
            t.observe(500, &GroupEvent::Stabilized { group: "g".into(), kind: GroupKind::Classic, generation: 4, members: 2 }),
            None
        );
    }

    #[test]
    fn a_group_that_empties_ends_its_rebalance() {
        let mut t = RebalanceTracker::default();
        t.observe(0, &started(RebalanceCause::SessionTimeout { member: "a".into() }, 2, 1));
        let done = t.observe(10, &GroupEvent::JoinCompleted { group: "g".into(), generation: 3, members: 0 }).expect("ended");
        assert_eq!((done.members_after, done.total_ms, done.sync_ms), (0, 10, None));
        let last_left = GroupEvent::RebalanceStarted {
            group: "c".into(),
            kind: GroupKind::Consumer,
            cause: RebalanceCause::MemberLeft { members: vec!["m".into()] },
            generation: 7,
            members: 1,
        };
        assert_eq!(t.observe(20, &last_left), None);
        let empty = GroupEvent::Stabilized { group: "c".into(), kind: GroupKind::Consumer, generation: 7, members: 0 };
        let done = t.observe(20, &empty).expect("nothing left to converge");
        assert_eq!((done.generation_before, done.generation_after, done.members_before, done.total_ms), (6, 7, 1, 0));
    }
}
