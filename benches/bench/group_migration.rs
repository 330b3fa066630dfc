//! Scenario 7 of the groups suite: the online migration of a live classic group to the KIP-848
//! protocol and back, as a rolling restart starts it.
//!
//! A classic group of N members (one topic) is Stable; its steady state is measured (heartbeats
//! and server CPU over a window). One KIP-848 member joins: its first ConsumerGroupHeartbeat
//! converts the group (the conversion is inside that request). The classic members learn from
//! their next Heartbeat that they must re-join, and are served the server's assignment through
//! JoinGroup/SyncGroup; the group has settled when every classic member synced the new epoch and
//! the KIP-848 member owns the rest. The mixed group's steady state is measured over the same
//! window. Then the KIP-848 member leaves: the group turns classic again and rebalances (the
//! classic members' own leader assigns).

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::group_classic::{ClassicGroup, GroupSpec};
use crate::group_consumer::{ConsumerGroup, ConsumerSpec};
use crate::mux::Lanes;
use crate::server::process_cpu_time;

/// Heartbeats and server CPU over one steady-state window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Steady {
    pub(crate) heartbeats: u64,
    pub(crate) seconds: f64,
    pub(crate) server_cpu: Option<f64>,
}

impl Steady {
    /// Server CPU microseconds per heartbeat.
    pub(crate) fn cpu_us_per_heartbeat(&self) -> Option<f64> {
        self.server_cpu.filter(|_| self.heartbeats > 0).map(|c| c * 1e6 / self.heartbeats as f64)
    }
}

/// One migration, measured.
#[derive(Debug, Clone)]
pub(crate) struct MigrationRun {
    pub(crate) members: usize,
    pub(crate) classic_generation: i32,
    pub(crate) classic: Steady,
    /// The converting ConsumerGroupHeartbeat: round trip and the server CPU it took.
    pub(crate) convert: Duration,
    pub(crate) convert_cpu: Option<f64>,
    /// From that heartbeat until every member holds its share at the new epoch.
    pub(crate) settle: Duration,
    pub(crate) settle_cpu: Option<f64>,
    pub(crate) settle_requests: u64,
    pub(crate) epoch: i32,
    pub(crate) mixed: Steady,
    /// From the KIP-848 member's leave until the classic group synced a new generation.
    pub(crate) downgrade: Duration,
    pub(crate) downgrade_cpu: Option<f64>,
}

impl Steady {
    fn to_json(self) -> Value {
        json!({"heartbeats": self.heartbeats, "seconds": self.seconds, "server_cpu_seconds": self.server_cpu,
               "server_cpu_us_per_heartbeat": self.cpu_us_per_heartbeat()})
    }
}

impl MigrationRun {
    pub(crate) fn to_json(&self) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        json!({
            "members": self.members, "classic_generation": self.classic_generation, "classic_steady": self.classic.to_json(),
            "convert_ms": ms(self.convert), "convert_server_cpu_seconds": self.convert_cpu,
            "settle_ms": ms(self.settle), "settle_server_cpu_seconds": self.settle_cpu, "settle_requests": self.settle_requests,
            "epoch": self.epoch, "mixed_steady": self.mixed.to_json(),
            "downgrade_ms": ms(self.downgrade), "downgrade_server_cpu_seconds": self.downgrade_cpu,
        })
    }
}

fn cpu_now(pid: Option<u32>) -> Option<Duration> {
    pid.and_then(process_cpu_time).map(|(user, system)| user + system)
}

fn cpu_since(pid: Option<u32>, before: Option<Duration>) -> Option<f64> {
    cpu_now(pid).zip(before).map(|(after, before)| after.saturating_sub(before).as_secs_f64())
}

async fn steady(pid: Option<u32>, window: Duration, heartbeats: impl Fn() -> u64) -> Steady {
    let (beats, cpu, t0) = (heartbeats(), cpu_now(pid), Instant::now());
    tokio::time::sleep(window).await;
    Steady { heartbeats: heartbeats() - beats, seconds: t0.elapsed().as_secs_f64(), server_cpu: cpu_since(pid, cpu) }
}

/// Runs the migration on a classic group of `members` members (`classic`: its spec, one topic)
/// and one KIP-848 member (`consumer`: the same group id and topic).
pub(crate) async fn run(
    classic: Rc<GroupSpec>,
    consumer: Rc<ConsumerSpec>,
    lanes: Rc<Lanes>,
    members: usize,
    pid: Option<u32>,
    window: Duration,
    timeout: Duration,
) -> Result<MigrationRun> {
    let partitions = classic.partitions();
    let (mut group, _) = ClassicGroup::start(classic, lanes.clone(), members, timeout).await?;
    let classic_generation = group.generation();
    let classic_steady = steady(pid, window, || group.heartbeats()).await;

    // The first KIP-848 member: its first heartbeat converts the group.
    let mut newcomer = ConsumerGroup::empty(consumer, lanes.clone());
    let (sent, cpu, t0) = (lanes.requests_sent(), cpu_now(pid), Instant::now());
    let idx = newcomer.add_member();
    let convert = loop {
        if let Some(f) = newcomer.failure() {
            bail!("the KIP-848 member failed: {f}");
        }
        if newcomer.member(idx).0 > 0 {
            break t0.elapsed();
        }
        let left = timeout.saturating_sub(t0.elapsed());
        if left.is_zero() || tokio::time::timeout(left, newcomer.changed()).await.is_err() {
            bail!("the KIP-848 member was not answered within {timeout:?}");
        }
    };
    let convert_cpu = cpu_since(pid, cpu);

    let settled = group.wait_next_generation(t0, timeout).await?;
    let epoch = settled.generation;
    loop {
        let (at, owned) = newcomer.member(idx);
        if at == epoch && owned + settled.assigned_partitions == partitions {
            break;
        }
        if let Some(f) = newcomer.failure() {
            bail!("the KIP-848 member failed: {f}");
        }
        if t0.elapsed() > timeout {
            bail!("not settled within {timeout:?}: the KIP-848 member at epoch {at} owns {owned} partitions, the classic members {} (epoch {epoch})", settled.assigned_partitions);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let settle = t0.elapsed();
    let (settle_cpu, settle_requests) = (cpu_since(pid, cpu), lanes.requests_sent() - sent);
    let mixed = steady(pid, window, || group.heartbeats() + newcomer.heartbeats()).await;

    // It leaves: the classic members are a classic group again, and rebalance.
    let (cpu, t0) = (cpu_now(pid), Instant::now());
    newcomer.stop().await?;
    let back = group.wait_next_generation(t0, timeout).await?;
    if back.assigned_partitions != partitions {
        bail!("after the downgrade the classic members hold {} of {partitions} partitions", back.assigned_partitions);
    }
    let (downgrade, downgrade_cpu) = (t0.elapsed(), cpu_since(pid, cpu));
    group.stop(true).await?;
    Ok(MigrationRun {
        members,
        classic_generation,
        classic: classic_steady,
        convert,
        convert_cpu,
        settle,
        settle_cpu,
        settle_requests,
        epoch,
        mixed,
        downgrade,
        downgrade_cpu,
    })
}
