//! The state machine's timers (session, join, sync, KIP-848 deadlines) and the periodic offset
//! expiration.

use super::*;

impl PartitionRunner {
    pub(super) fn arm(&self, key: TimerKey, deadline: i64) {
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

    pub(super) async fn timer_loop(self: Rc<Self>) {
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
                let Some(key) = self.timer_keys.borrow_mut().remove(&seq) else {
                    continue;
                };
                self.state.borrow_mut().fire(now, &key);
                self.run_effects();
            }
        }
    }

    pub(super) async fn expiration_loop(self: Rc<Self>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(self.expiration_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if !self.serving() {
                continue;
            }
            let expired = self.with_state(|s, now| s.expire_offsets(now));
            if expired > 0 {
                tracing::info!(partition = self.index, expired, "expired committed offsets");
            }
            let state = self.state.borrow();
            self.history.borrow_mut().retain(|g| state.groups.contains_key(g) || state.consumer_groups.contains_key(g));
        }
    }

    /// Asks the Raft group for a snapshot whenever the partition's log wants a checkpoint.
    pub(super) async fn snapshot_loop(self: Rc<Self>) {
        loop {
            self.offsets.snapshot_wanted().await;
            let Some(raft) = self.raft().cloned() else {
                return;
            };
            if let Err(e) = raft.trigger().snapshot().await {
                tracing::error!(partition = self.index, error = %e, "cannot trigger a coordinator snapshot");
            }
        }
    }
}
