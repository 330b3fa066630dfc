//! Steady-state load on the group coordinator: many small Stable classic groups, then
//!
//! - a heartbeat storm: pre-encoded Heartbeat requests for every member, pipelined over a few
//!   connections (a window of requests in flight per connection), responses checked for their
//!   error code;
//! - offset commits: concurrent committers (members of those groups, closed loop: each one waits
//!   for its commit before the next), N partitions per OffsetCommit, with per-request latency;
//! - memory: the server's RSS before and after the groups are created.
//!
//! The groups are created with the full classic protocol by [`crate::group_classic`] members, in
//! waves (so that each parking lane stays under the server's read-ahead), and the members go idle
//! after they have synced: from then on the storm and the committers speak for them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::{ApiKey, GroupId, HeartbeatRequest, OffsetCommitRequest};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::group_classic::{ClassicGroup, GroupSpec, MemberConfig};
use crate::kafka::{self, error_name, topic_name, KafkaConn};
use crate::mux::{strip_header, FrameBuf, Lanes};
use crate::server::{process_cpu_time, process_memory, Memory};
use crate::stats::median;
use crate::wire::{Cursor, SocketOpts};

/// A member that has synced and gone idle.
#[derive(Debug, Clone)]
pub(crate) struct IdleMember {
    pub(crate) group: String,
    pub(crate) member_id: String,
    pub(crate) generation: i32,
}

#[derive(Debug, Clone)]
pub(crate) struct SetupOpts {
    pub(crate) groups: usize,
    pub(crate) members_per_group: usize,
    /// The topic every group subscribes to, and its partition count.
    pub(crate) topic: (String, i32),
    /// Groups created at a time.
    pub(crate) groups_per_wave: usize,
    pub(crate) per_parking_lane: usize,
    pub(crate) fast_lanes: usize,
    pub(crate) member: MemberConfig,
    pub(crate) group_prefix: String,
    pub(crate) timeout: Duration,
}

/// One wave of the setup.
#[derive(Debug, Clone)]
pub(crate) struct Wave {
    pub(crate) members_total: usize,
    pub(crate) seconds: f64,
    pub(crate) memory: Option<Memory>,
}

/// The outcome of the setup: the idle members, and the server's memory along the way.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) members: Vec<IdleMember>,
    /// Memory with the setup's connections open and no group yet.
    pub(crate) baseline: Option<Memory>,
    pub(crate) waves: Vec<Wave>,
    /// Memory after the last wave, once the members have been idle for `settle`.
    pub(crate) settled: Option<Memory>,
    pub(crate) seconds: f64,
    pub(crate) connections: (usize, usize),
}

impl Setup {
    /// Server memory per member, overall: (settled − baseline) / members, in bytes.
    pub(crate) fn bytes_per_member(&self) -> Option<(f64, f64)> {
        let (b, s) = (self.baseline?, self.settled?);
        let n = self.members.len().max(1) as f64;
        Some(((s.rss_kb as f64 - b.rss_kb as f64) * 1024.0 / n, (s.anon_kb as f64 - b.anon_kb as f64) * 1024.0 / n))
    }

    /// Marginal memory per member between the end of the first wave and the end of the last
    /// (transient per-connection buffers are already allocated after the first wave).
    pub(crate) fn marginal_bytes_per_member(&self) -> Option<(f64, f64)> {
        let first = self.waves.first()?;
        let last = self.waves.last()?;
        let (a, b) = (first.memory?, last.memory?);
        let n = (last.members_total - first.members_total) as f64;
        (n > 0.0).then(|| ((b.rss_kb as f64 - a.rss_kb as f64) * 1024.0 / n, (b.anon_kb as f64 - a.anon_kb as f64) * 1024.0 / n))
    }
}

/// Creates `groups` Stable groups of `members_per_group` members; returns their idle members.
pub(crate) async fn setup(addr: SocketAddr, opts: &SetupOpts, server_pid: Option<u32>, settle: Duration) -> Result<Setup> {
    let names: Vec<String> = (0..opts.groups).map(|i| format!("{}{i}", opts.group_prefix)).collect();
    setup_named(addr, opts, &names, server_pid, settle).await
}

/// [`setup`] of the groups named `names` (instead of `opts.groups` groups named after
/// `opts.group_prefix`): in a cluster, the groups one node coordinates.
pub(crate) async fn setup_named(
    addr: SocketAddr,
    opts: &SetupOpts,
    names: &[String],
    server_pid: Option<u32>,
    settle: Duration,
) -> Result<Setup> {
    let per_wave = opts.groups_per_wave.clamp(1, names.len().max(1));
    let wave_members = per_wave * opts.members_per_group;
    let lanes = Rc::new(Lanes::connect(addr, opts.fast_lanes, wave_members, opts.per_parking_lane).await?);
    let memory = || server_pid.and_then(process_memory);
    // Connections are open and idle: their buffers are part of the baseline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = memory();
    let mut out = Setup { members: Vec::new(), baseline, waves: Vec::new(), settled: None, seconds: 0.0, connections: lanes.connections() };
    let started = Instant::now();
    let mut next_group = 0;
    while next_group < names.len() {
        let wave_started = Instant::now();
        let count = per_wave.min(names.len() - next_group);
        let mut groups = Vec::with_capacity(count);
        for i in 0..count {
            let spec = GroupSpec::new(names[next_group + i].clone(), vec![opts.topic.clone()], opts.member.clone())?;
            groups.push(ClassicGroup::spawn(Rc::new(spec), lanes.clone(), opts.members_per_group, i * opts.members_per_group));
        }
        let deadline = Instant::now() + opts.timeout;
        for g in &mut groups {
            g.wait_started(deadline).await.context("creating the idle groups")?;
        }
        for (i, g) in groups.into_iter().enumerate() {
            // Members go idle without leaving; their sessions outlive the benchmark.
            let members = g.members();
            g.stop(false).await?;
            let group = &names[next_group + i];
            for (member_id, generation) in members {
                out.members.push(IdleMember { group: group.clone(), member_id, generation });
            }
        }
        next_group += count;
        out.waves.push(Wave { members_total: out.members.len(), seconds: wave_started.elapsed().as_secs_f64(), memory: memory() });
        eprintln!("    setup: {} groups ({} members) Stable after {:.1} s", next_group, out.members.len(), started.elapsed().as_secs_f64());
    }
    out.seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(settle).await;
    out.settled = memory();
    Ok(out)
}

#[derive(Debug, Clone)]
pub(crate) struct StormOpts {
    pub(crate) connections: usize,
    /// Heartbeats in flight per connection.
    pub(crate) depth: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    pub(crate) version: i16,
}

/// One measured storm.
#[derive(Debug, Clone, Default)]
pub(crate) struct StormRun {
    pub(crate) heartbeats: u64,
    pub(crate) seconds: f64,
    /// Error codes other than 0, with counts.
    pub(crate) errors: BTreeMap<i16, u64>,
    /// Server CPU seconds (user, system) in the measured window.
    pub(crate) server_cpu: Option<(f64, f64)>,
    /// This process's CPU seconds in the window.
    pub(crate) client_cpu: f64,
}

impl StormRun {
    pub(crate) fn per_sec(&self) -> f64 {
        self.heartbeats as f64 / self.seconds.max(1e-9)
    }

    /// Heartbeats per second of server CPU (user + system).
    pub(crate) fn per_cpu_sec(&self) -> Option<f64> {
        self.server_cpu.map(|(u, s)| self.heartbeats as f64 / (u + s).max(1e-9))
    }
}

/// Shared counters of the storm's connection tasks.
#[derive(Debug, Default)]
struct StormCounters {
    done: Cell<u64>,
    errors: RefCell<BTreeMap<i16, u64>>,
    stop: Cell<bool>,
    failure: RefCell<Option<String>>,
}

/// Heartbeats for `members` as fast as the server answers, over `connections` connections.
pub(crate) async fn heartbeat_storm(
    addr: SocketAddr,
    members: &[IdleMember],
    opts: &StormOpts,
    server_pid: Option<u32>,
) -> Result<StormRun> {
    if members.is_empty() {
        bail!("no members to heartbeat for");
    }
    let counters = Rc::new(StormCounters::default());
    let mut tasks = Vec::new();
    let connections = opts.connections.clamp(1, members.len());
    for c in 0..connections {
        let (stream, version, frames) = heartbeat_connection(addr, members, c, connections, opts.version).await?;
        let counters = counters.clone();
        let depth = opts.depth.max(1);
        tasks.push(tokio::task::spawn_local(async move {
            if let Err(e) = storm_connection(stream, frames, version, depth, &counters).await {
                counters.failure.borrow_mut().get_or_insert(format!("{e:#}"));
            }
        }));
    }
    tokio::time::sleep(opts.warmup).await;
    let (n0, e0, t0) = (counters.done.get(), counters.errors.borrow().clone(), Instant::now());
    let (cpu0, me0) = (server_pid.and_then(process_cpu_time), self_cpu());
    tokio::time::sleep(opts.duration).await;
    let (n1, t1) = (counters.done.get(), Instant::now());
    let (cpu1, me1) = (server_pid.and_then(process_cpu_time), self_cpu());
    let e1 = counters.errors.borrow().clone();
    counters.stop.set(true);
    for t in tasks {
        t.await?;
    }
    if let Some(f) = counters.failure.borrow().as_ref() {
        bail!("heartbeat storm: {f}");
    }
    let mut errors = BTreeMap::new();
    for (code, n) in e1 {
        let d = n - e0.get(&code).copied().unwrap_or(0);
        if d > 0 {
            errors.insert(code, d);
        }
    }
    Ok(StormRun { heartbeats: n1 - n0, seconds: (t1 - t0).as_secs_f64(), errors, server_cpu: cpu_delta(cpu0, cpu1), client_cpu: me1 - me0 })
}

/// A connection for heartbeats and the encoded Heartbeat of every `connections`-th member from
/// the `c`-th (correlation id 0, set when sent).
async fn heartbeat_connection(
    addr: SocketAddr,
    members: &[IdleMember],
    c: usize,
    connections: usize,
    preferred: i16,
) -> Result<(tokio::net::TcpStream, i16, Vec<Vec<u8>>)> {
    let conn = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
    let version = conn.version::<HeartbeatRequest>(preferred)?;
    let (stream, _) = conn.into_parts()?;
    let client_id = StrBytes::from_static_str("corral-bench-hb");
    let mut frames = Vec::new();
    for m in members.iter().skip(c).step_by(connections) {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(m.group.clone())))
            .with_generation_id(m.generation)
            .with_member_id(StrBytes::from_string(m.member_id.clone()));
        let mut frame = BytesMut::new();
        kafka::encode_frame(&mut frame, version, 0, &client_id, &request)?;
        frames.push(frame.to_vec());
    }
    Ok((stream, version, frames))
}

#[derive(Debug, Clone)]
pub(crate) struct PacedOpts {
    pub(crate) connections: usize,
    /// Every member heartbeats once per interval (a client's heartbeat.interval.ms), its turn
    /// spread evenly over the interval.
    pub(crate) interval: Duration,
    pub(crate) duration: Duration,
    pub(crate) version: i16,
}

/// Every idle member heartbeating at a client's pace: is each answered on time?
#[derive(Debug, Clone, Default)]
pub(crate) struct PacedRun {
    pub(crate) members: usize,
    pub(crate) interval_seconds: f64,
    pub(crate) seconds: f64,
    pub(crate) heartbeats: u64,
    /// Send to response, milliseconds, sorted.
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) errors: BTreeMap<i16, u64>,
    pub(crate) server_cpu: Option<(f64, f64)>,
}

impl PacedRun {
    /// The rate the members ask for: each once per interval.
    pub(crate) fn required_per_sec(&self) -> f64 {
        self.members as f64 / self.interval_seconds.max(1e-9)
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.heartbeats as f64 / self.seconds.max(1e-9)
    }

    pub(crate) fn latency_ms(&self, q: f64) -> f64 {
        let n = self.latencies_ms.len();
        if n == 0 {
            return f64::NAN;
        }
        self.latencies_ms[((n - 1) as f64 * q).round() as usize]
    }

    /// Server cores used (user + system over the run).
    pub(crate) fn server_cores(&self) -> Option<f64> {
        self.server_cpu.map(|(u, s)| (u + s) / self.seconds.max(1e-9))
    }
}

/// State shared by a paced connection's writer and reader.
#[derive(Debug, Default)]
struct Paced {
    sent_at: RefCell<std::collections::VecDeque<Instant>>,
    latencies_ms: RefCell<Vec<f64>>,
    errors: RefCell<BTreeMap<i16, u64>>,
}

/// Every member heartbeats once per `opts.interval` for `opts.duration`, over `opts.connections`
/// connections; each heartbeat's latency is measured from its write to its answer.
pub(crate) async fn heartbeat_paced(
    addr: SocketAddr,
    members: &[IdleMember],
    opts: &PacedOpts,
    server_pid: Option<u32>,
) -> Result<PacedRun> {
    if members.is_empty() {
        bail!("no members to heartbeat for");
    }
    let connections = opts.connections.clamp(1, members.len());
    let mut setups = Vec::new();
    for c in 0..connections {
        setups.push(heartbeat_connection(addr, members, c, connections, opts.version).await?);
    }
    let cpu0 = server_pid.and_then(process_cpu_time);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut states = Vec::new();
    for (stream, version, frames) in setups {
        let state = Rc::new(Paced::default());
        states.push(state.clone());
        let (interval, duration) = (opts.interval, opts.duration);
        tasks.push(tokio::task::spawn_local(async move { paced_connection(stream, frames, version, interval, duration, state).await }));
    }
    for task in tasks {
        task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu1 = server_pid.and_then(process_cpu_time);
    let mut run = PacedRun {
        members: members.len(),
        interval_seconds: opts.interval.as_secs_f64(),
        seconds,
        server_cpu: cpu_delta(cpu0, cpu1),
        ..Default::default()
    };
    for state in states {
        run.latencies_ms.extend(state.latencies_ms.borrow().iter());
        for (code, n) in state.errors.borrow().iter() {
            *run.errors.entry(*code).or_default() += n;
        }
    }
    run.heartbeats = run.latencies_ms.len() as u64;
    run.latencies_ms.sort_by(f64::total_cmp);
    Ok(run)
}

async fn paced_connection(
    stream: tokio::net::TcpStream,
    frames: Vec<Vec<u8>>,
    version: i16,
    interval: Duration,
    duration: Duration,
    state: Rc<Paced>,
) -> Result<()> {
    let (read, mut write) = stream.into_split();
    let reader = tokio::task::spawn_local(read_paced(read, version, state.clone()));
    let n = frames.len() as u64;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let mut sent = 0u64;
    let mut out = Vec::new();
    while started.elapsed() < duration {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() / interval.as_secs_f64() * n as f64) as u64;
        out.clear();
        while sent < due {
            let at = out.len();
            out.extend_from_slice(&frames[(sent % n) as usize]);
            sent += 1;
            out[at + 8..at + 12].copy_from_slice(&(sent as i32).to_be_bytes());
            state.sent_at.borrow_mut().push_back(Instant::now());
        }
        write.write_all(&out).await?;
        if reader.is_finished() {
            break;
        }
    }
    // Wait for the last answers (a heartbeat not answered within a session timeout is a failure).
    let deadline = Instant::now() + Duration::from_secs(45);
    while !state.sent_at.borrow().is_empty() && !reader.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if reader.is_finished() {
        reader.await??;
        bail!("the connection closed");
    }
    reader.abort();
    let unanswered = state.sent_at.borrow().len();
    if unanswered > 0 {
        bail!("{unanswered} heartbeats unanswered 45 s after the last was sent");
    }
    Ok(())
}

/// Reads the answers of a paced connection until it is aborted (or fails).
async fn read_paced(mut read: tokio::net::tcp::OwnedReadHalf, version: i16, state: Rc<Paced>) -> Result<()> {
    let mut frames_in = FrameBuf::new();
    let mut expected: i32 = 1;
    loop {
        let frame = frames_in.next(&mut read).await?;
        let mut next = Some(frame);
        while let Some(frame) = next {
            let body = strip_header(frame, ApiKey::Heartbeat as i16, version, expected)?;
            expected = expected.wrapping_add(1);
            let sent = state.sent_at.borrow_mut().pop_front().context("an answer to nothing sent")?;
            state.latencies_ms.borrow_mut().push(sent.elapsed().as_secs_f64() * 1e3);
            let mut c = Cursor::new(&body);
            if version >= 1 {
                c.i32()?;
            }
            let code = c.i16()?;
            if code != 0 {
                *state.errors.borrow_mut().entry(code).or_default() += 1;
            }
            next = frames_in.try_next()?;
        }
    }
}

async fn storm_connection(
    stream: tokio::net::TcpStream,
    frames: Vec<Vec<u8>>,
    version: i16,
    depth: usize,
    counters: &StormCounters,
) -> Result<()> {
    let (mut read, mut write) = stream.into_split();
    let mut reader = FrameBuf::new();
    let mut out: Vec<u8> = Vec::with_capacity(depth * frames.first().map_or(128, Vec::len));
    let mut next_member = 0usize;
    let mut next_id: i32 = 1;
    let mut expected: i32 = 1;
    let mut in_flight = 0usize;
    loop {
        // Top the window up once half of it has been answered: one write(2) for many requests.
        if !counters.stop.get() && in_flight <= depth / 2 {
            out.clear();
            while in_flight < depth {
                let frame = &frames[next_member];
                next_member = (next_member + 1) % frames.len();
                let at = out.len();
                out.extend_from_slice(frame);
                out[at + 8..at + 12].copy_from_slice(&next_id.to_be_bytes());
                next_id = next_id.wrapping_add(1);
                in_flight += 1;
            }
            write.write_all(&out).await?;
        }
        if in_flight == 0 {
            return Ok(());
        }
        let frame = reader.next(&mut read).await?;
        let mut next = Some(frame);
        while let Some(frame) = next {
            let body = strip_header(frame, ApiKey::Heartbeat as i16, version, expected)?;
            expected = expected.wrapping_add(1);
            in_flight -= 1;
            let mut c = Cursor::new(&body);
            if version >= 1 {
                c.i32()?;
            }
            let code = c.i16()?;
            counters.done.set(counters.done.get() + 1);
            if code != 0 {
                *counters.errors.borrow_mut().entry(code).or_default() += 1;
            }
            next = if in_flight > 0 { reader.try_next()? } else { None };
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct CommitOpts {
    pub(crate) topic: String,
    pub(crate) partitions_per_commit: i32,
    pub(crate) connections: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    pub(crate) version: i16,
}

/// One measured commit run.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommitRun {
    pub(crate) committers: usize,
    pub(crate) commits: u64,
    pub(crate) offsets: u64,
    pub(crate) seconds: f64,
    /// Latency of every commit completed in the window, sorted (microseconds).
    pub(crate) latencies_us: Vec<u64>,
    pub(crate) errors: BTreeMap<i16, u64>,
    pub(crate) server_cpu: Option<(f64, f64)>,
    /// This process's CPU seconds in the window (the load generator shares the machine).
    pub(crate) client_cpu: f64,
}

impl CommitRun {
    pub(crate) fn commits_per_sec(&self) -> f64 {
        self.commits as f64 / self.seconds.max(1e-9)
    }

    pub(crate) fn offsets_per_sec(&self) -> f64 {
        self.offsets as f64 / self.seconds.max(1e-9)
    }

    /// Latency quantile in milliseconds.
    pub(crate) fn latency_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        crate::stats::percentile(&self.latencies_us, q) as f64 / 1000.0
    }

    /// Server CPU seconds in the window, user + system.
    pub(crate) fn server_cpu_seconds(&self) -> Option<f64> {
        self.server_cpu.map(|(u, s)| u + s)
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"committers": self.committers, "commits": self.commits, "offsets": self.offsets, "seconds": self.seconds,
               "commits_per_sec": self.commits_per_sec(), "offsets_per_sec": self.offsets_per_sec(),
               "p50_ms": self.latency_ms(0.5), "p99_ms": self.latency_ms(0.99), "server_cpu": self.server_cpu,
               "client_cpu_seconds": self.client_cpu, "errors": self.errors})
    }
}

#[derive(Debug, Default)]
struct CommitCounters {
    measuring: Cell<bool>,
    stop: Cell<bool>,
    commits: Cell<u64>,
    offsets: Cell<u64>,
    latencies_us: RefCell<Vec<u64>>,
    errors: RefCell<BTreeMap<i16, u64>>,
    failure: RefCell<Option<String>>,
}

/// Every committer commits `partitions_per_commit` offsets, waits for the answer, and commits
/// again (offsets grow by one each time).
pub(crate) async fn commit_storm(
    addr: SocketAddr,
    committers: &[IdleMember],
    opts: &CommitOpts,
    server_pid: Option<u32>,
) -> Result<CommitRun> {
    commit_storm_routed(&[(addr, committers)], opts, server_pid.as_slice()).await
}

/// [`commit_storm`] with each committer sending to its own node: `routes` pairs a node with the
/// committers whose groups it coordinates, and each node gets `opts.connections` connections.
/// One measured window covers them all; the server CPU is the sum over `server_pids`.
pub(crate) async fn commit_storm_routed(
    routes: &[(SocketAddr, &[IdleMember])],
    opts: &CommitOpts,
    server_pids: &[u32],
) -> Result<CommitRun> {
    let counters = Rc::new(CommitCounters::default());
    let mut tasks = Vec::new();
    let mut committers = 0;
    for &(addr, members) in routes.iter().filter(|(_, members)| !members.is_empty()) {
        let lanes = Lanes::connect_exact(addr, opts.connections, 0).await?;
        let version = lanes.fast(0).version::<OffsetCommitRequest>(opts.version)?;
        committers += members.len();
        spawn_committers(&lanes, version, members, opts, &counters, &mut tasks);
    }
    if committers == 0 {
        bail!("no committers");
    }
    tokio::time::sleep(opts.warmup).await;
    let (cpu0, me0, t0) = (servers_cpu_time(server_pids), self_cpu(), Instant::now());
    counters.measuring.set(true);
    tokio::time::sleep(opts.duration).await;
    counters.measuring.set(false);
    let (cpu1, me1, t1) = (servers_cpu_time(server_pids), self_cpu(), Instant::now());
    counters.stop.set(true);
    for t in tasks {
        t.await?;
    }
    if let Some(f) = counters.failure.borrow().as_ref() {
        bail!("offset commits: {f}");
    }
    let mut latencies = counters.latencies_us.take();
    latencies.sort_unstable();
    Ok(CommitRun {
        committers,
        commits: counters.commits.get(),
        offsets: counters.offsets.get(),
        seconds: (t1 - t0).as_secs_f64(),
        latencies_us: latencies,
        errors: counters.errors.take(),
        server_cpu: cpu_delta(cpu0, cpu1),
        client_cpu: me1 - me0,
    })
}

/// One closed-loop task per committer, spread over the fast lanes of one node.
fn spawn_committers(
    lanes: &Lanes,
    version: i16,
    committers: &[IdleMember],
    opts: &CommitOpts,
    counters: &Rc<CommitCounters>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    for (i, m) in committers.iter().enumerate() {
        let lane = lanes.fast(i).clone();
        let counters = counters.clone();
        let m = m.clone();
        let opts = opts.clone();
        tasks.push(tokio::task::spawn_local(async move {
            let mut offset = 0i64;
            while !counters.stop.get() {
                offset += 1;
                let request = OffsetCommitRequest::default()
                    .with_group_id(GroupId(StrBytes::from_string(m.group.clone())))
                    .with_generation_id_or_member_epoch(m.generation)
                    .with_member_id(StrBytes::from_string(m.member_id.clone()))
                    .with_topics(vec![OffsetCommitRequestTopic::default().with_name(topic_name(&opts.topic)).with_partitions(
                        (0..opts.partitions_per_commit)
                            .map(|p| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(offset * 100 + i64::from(p))
                            })
                            .collect(),
                    )]);
                let sent = Instant::now();
                let response = match lane.call(version, &request).await {
                    Ok(r) => r,
                    Err(e) => {
                        counters.failure.borrow_mut().get_or_insert(format!("{e:#}"));
                        return;
                    }
                };
                let latency = sent.elapsed();
                let mut ok = 0;
                for t in &response.topics {
                    for p in &t.partitions {
                        if p.error_code == 0 {
                            ok += 1;
                        } else {
                            *counters.errors.borrow_mut().entry(p.error_code).or_default() += 1;
                        }
                    }
                }
                if counters.measuring.get() {
                    counters.commits.set(counters.commits.get() + 1);
                    counters.offsets.set(counters.offsets.get() + ok);
                    counters.latencies_us.borrow_mut().push(latency.as_micros() as u64);
                }
            }
        }));
    }
}

/// (user, system) CPU time of several processes together; None unless every one was read.
pub(crate) fn servers_cpu_time(pids: &[u32]) -> Option<(Duration, Duration)> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold((Duration::ZERO, Duration::ZERO), |(u, s), &pid| process_cpu_time(pid).map(|(pu, ps)| (u + pu, s + ps)))
}

fn cpu_delta(a: Option<(Duration, Duration)>, b: Option<(Duration, Duration)>) -> Option<(f64, f64)> {
    let ((u0, s0), (u1, s1)) = (a?, b?);
    Some(((u1.saturating_sub(u0)).as_secs_f64(), (s1.saturating_sub(s0)).as_secs_f64()))
}

/// This process's CPU seconds (user + system), all threads.
pub(crate) fn self_cpu() -> f64 {
    process_cpu_time(std::process::id()).map_or(0.0, |(u, s)| (u + s).as_secs_f64())
}

/// Median of a field over runs.
pub(crate) fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

/// Error codes as "NAME (code) xN".
pub(crate) fn describe_errors(errors: &BTreeMap<i16, u64>) -> String {
    if errors.is_empty() {
        return "none".into();
    }
    errors.iter().map(|(c, n)| format!("{} x{n}", error_name(*c))).collect::<Vec<_>>().join(", ")
}
