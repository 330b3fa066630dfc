//! Rebalances as they run, from the coordinator's events: when one began and why, when its join
//! phase ended, which members were last to take each step, and when it was over. Each finished
//! rebalance becomes a [`RebalanceSummary`], which the shell logs (one line per rebalance),
//! counts in metrics and keeps in a bounded [`RebalanceHistory`] per group.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::events::{GroupEvent, GroupKind, MemberStep, RebalanceCause};

/// Members named as the slowest of a rebalance.
const SLOWEST_NAMED: usize = 3;
/// Rebalances kept per group, newest last.
pub const HISTORY_PER_GROUP: usize = 16;

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
    /// When it began and ended (ms since the epoch).
    pub started_at: i64,
    pub ended_at: i64,
    /// The members last to take their final step, slowest first.
    pub slowest: Vec<SlowMember>,
}

/// A member that held a rebalance up: its last step and how long after the start it took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowMember {
    pub member: String,
    pub step: MemberStep,
    pub after_ms: i64,
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
    /// Each member's latest step in this rebalance, and when.
    steps: HashMap<String, (MemberStep, i64)>,
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
                            steps: HashMap::new(),
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
            GroupEvent::MemberReady { group, member, step } => {
                if let Some(running) = self.in_flight.get_mut(group) {
                    running.steps.insert(member.clone(), (*step, at));
                }
                None
            }
            GroupEvent::MemberRemoved { group, member, .. } => {
                if let Some(running) = self.in_flight.get_mut(group) {
                    running.steps.remove(member);
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
        let mut slowest: Vec<SlowMember> = running
            .steps
            .into_iter()
            .map(|(member, (step, when))| SlowMember { member, step, after_ms: when - running.started_at })
            .collect();
        slowest.sort_by(|a, b| b.after_ms.cmp(&a.after_ms).then_with(|| a.member.cmp(&b.member)));
        slowest.truncate(SLOWEST_NAMED);
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
            started_at: running.started_at,
            ended_at: at,
            slowest,
        })
    }

    /// Forgets every rebalance in progress (the coordinator partition moved away).
    pub fn clear(&mut self) {
        self.in_flight.clear();
    }
}

/// The last [`HISTORY_PER_GROUP`] rebalances of each group on a coordinator partition, and how
/// many there were by trigger.
#[derive(Debug, Default)]
pub struct RebalanceHistory {
    by_group: HashMap<String, VecDeque<RebalanceSummary>>,
    totals: HashMap<String, BTreeMap<&'static str, u64>>,
}

impl RebalanceHistory {
    pub fn record(&mut self, done: RebalanceSummary) {
        *self.totals.entry(done.group.clone()).or_default().entry(done.cause.trigger()).or_default() += 1;
        let kept = self.by_group.entry(done.group.clone()).or_default();
        if kept.len() == HISTORY_PER_GROUP {
            kept.pop_front();
        }
        kept.push_back(done);
    }

    /// A group's rebalances, oldest first.
    pub fn of(&self, group: &str) -> Vec<RebalanceSummary> {
        self.by_group.get(group).map(|kept| kept.iter().cloned().collect()).unwrap_or_default()
    }

    /// How many of a group's kept rebalances ended at or after `since`.
    pub fn count_since(&self, group: &str, since: i64) -> usize {
        self.by_group.get(group).map_or(0, |kept| kept.iter().filter(|r| r.ended_at >= since).count())
    }

    /// A group's rebalances by trigger, since this node began coordinating it.
    pub fn totals(&self, group: &str) -> Option<&BTreeMap<&'static str, u64>> {
        self.totals.get(group)
    }

    /// Forgets the groups `exists` no longer knows.
    pub fn retain(&mut self, exists: impl Fn(&str) -> bool) {
        self.by_group.retain(|group, _| exists(group));
        self.totals.retain(|group, _| exists(group));
    }

    pub fn clear(&mut self) {
        self.by_group.clear();
        self.totals.clear();
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

    #[test]
    fn the_members_last_to_take_their_step_are_named_slowest() {
        let mut t = RebalanceTracker::default();
        let ready = |member: &str, step| GroupEvent::MemberReady { group: "g".into(), member: member.into(), step };
        // A step before the rebalance began is not counted.
        t.observe(50, &ready("x", MemberStep::Joined));
        t.observe(100, &started(RebalanceCause::MemberJoined { member: "d".into() }, 1, 4));
        for (at, m) in [(110, "a"), (130, "b"), (900, "c"), (120, "d")] {
            t.observe(at, &ready(m, MemberStep::Joined));
        }
        t.observe(900, &GroupEvent::JoinCompleted { group: "g".into(), generation: 2, members: 4 });
        for (at, m) in [(905, "a"), (910, "c"), (950, "d")] {
            t.observe(at, &ready(m, MemberStep::Synced));
        }
        t.observe(
            960,
            &GroupEvent::MemberRemoved {
                group: "g".into(),
                kind: GroupKind::Classic,
                member: "d".into(),
                departure: super::super::events::Departure::Left,
            },
        );
        let done =
            t.observe(960, &GroupEvent::Stabilized { group: "g".into(), kind: GroupKind::Classic, generation: 2, members: 3 }).unwrap();
        let slowest: Vec<(&str, MemberStep, i64)> = done.slowest.iter().map(|m| (m.member.as_str(), m.step, m.after_ms)).collect();
        assert_eq!(slowest, vec![("c", MemberStep::Synced, 810), ("a", MemberStep::Synced, 805), ("b", MemberStep::Joined, 30)]);
        assert_eq!((done.started_at, done.ended_at), (100, 960));
    }

    fn summary(group: &str, ended_at: i64, cause: RebalanceCause) -> RebalanceSummary {
        let mut t = RebalanceTracker::default();
        t.observe(
            ended_at - 10,
            &GroupEvent::RebalanceStarted { group: group.into(), kind: GroupKind::Classic, cause, generation: 1, members: 1 },
        );
        t.observe(ended_at, &GroupEvent::Stabilized { group: group.into(), kind: GroupKind::Classic, generation: 2, members: 1 }).unwrap()
    }

    #[test]
    fn the_history_keeps_the_last_rebalances_of_each_group_and_counts_them_all() {
        let mut h = RebalanceHistory::default();
        for i in 0..HISTORY_PER_GROUP as i64 + 4 {
            h.record(summary("g", 1_000 + i, RebalanceCause::MemberJoined { member: format!("m{i}") }));
        }
        h.record(summary("g", 5_000, RebalanceCause::SessionTimeout { member: "m0".into() }));
        h.record(summary("other", 5_000, RebalanceCause::TopicsChanged));
        let kept = h.of("g");
        assert_eq!(kept.len(), HISTORY_PER_GROUP);
        assert_eq!(kept.last().unwrap().cause.trigger(), "session_timeout", "newest last");
        assert_eq!(kept[0].cause, RebalanceCause::MemberJoined { member: "m5".into() }, "the oldest dropped first");
        let totals: Vec<(&str, u64)> = h.totals("g").unwrap().iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(totals, vec![("member_joined", HISTORY_PER_GROUP as u64 + 4), ("session_timeout", 1)]);
        assert_eq!(h.count_since("g", 1_010), 11, "the storm window counts what is kept and ended since");
        h.retain(|g| g == "other");
        assert!(h.of("g").is_empty() && h.totals("g").is_none());
        assert_eq!(h.of("other").len(), 1);
    }
}
