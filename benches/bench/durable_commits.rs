//! `corral-bench commits`: durable offset commits on one node, against the fsync latency of the
//! filesystem they are written to, measured in the same run; with `--nodes N`, also on an N-node
//! cluster on loopback, alternating with the single node.
//!
//! Every coordinator record goes through its partition's Raft group, whose log is fdatasynced
//! (on a quorum of nodes, in a cluster) before the OffsetCommit is answered; the records of
//! requests that arrive while a write is in flight share the next entry and its fsync. So corral
//! runs with its default configuration (an empty config file, plus the node list in a cluster):
//! its data directories are fresh directories inside the work directory, next to the fsync
//! probe, and the two are checked to be on one filesystem.
//!
//! The committers are members of Stable one-member classic groups on a 10-partition topic, idle
//! after they synced. In a cluster the topic is created on every node, and each group is formed
//! on, and commits to, the node that FindCoordinator names for it, once every coordinator
//! partition has a leader. Each repetition, in this order:
//!
//! 1. fsync latency: 4 KiB writes, each followed by fdatasync, in the work directory;
//! 2. one committer, one commit in flight: OffsetCommit v9 of 10 partitions, closed loop;
//! 3. many committers (one member of each of 1,000 groups), 10 partitions per commit, closed
//!    loop, over 8 shared connections (to each node): the groups suite's commit scenario;
//! 4. with `--nodes`: 2 and 3 again on the cluster.
//!
//! Medians over the repetitions are reported against the targets: commit p99 within 5× the
//! fsync p99 (p50 against fsync p50 shown too), and at least 50,000 offsets/s on one node; the
//! cluster's numbers are set against the single node's.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::cluster::{self, ManagedCluster};
use crate::compare::{fsync_latency, time_now_utc, write_file};
use crate::group_classic::{register_topics, MemberConfig, Versions};
use crate::group_load::{self, describe_errors, median_of, servers_cpu_time, CommitOpts, CommitRun, IdleMember, SetupOpts};
use crate::groups_suite::verdict;
use crate::kafka::{self, KafkaConn};
use crate::server::ManagedServer;
use crate::suite::{load_average, machine, WorkDir};
use crate::wire::SocketOpts;

/// Commit latency may be at most this many times the fsync latency (p99 against p99).
const TARGET_LATENCY_VS_FSYNC: f64 = 5.0;
/// Offsets committed durably per second on one node, at least.
const TARGET_OFFSETS_PER_SEC: f64 = 50_000.0;
const TOPIC: &str = "bench-commits";
/// Members whose JoinGroup shares a parking connection while the groups form (below the
/// server's 32 requests read ahead per connection).
const PER_PARKING_LANE: usize = 25;
/// OffsetCommit version the committers speak (what the Java client sends).
const COMMIT_VERSION: i16 = 9;

#[derive(Debug, Clone)]
pub(crate) struct CommitsOpts {
    pub(crate) server: PathBuf,
    pub(crate) server_args: Vec<String>,
    pub(crate) work_dir: PathBuf,
    pub(crate) keep_data: bool,
    pub(crate) json: Option<PathBuf>,
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    /// fsyncs timed per repetition.
    pub(crate) fsync_samples: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    /// Concurrent committers of the many-committer run (one group each).
    pub(crate) committers: usize,
    pub(crate) partitions: i32,
    /// Connections the many committers share.
    pub(crate) connections: usize,
    /// How long the groups may take to form.
    pub(crate) timeout: Duration,
    /// Nodes of the cluster measured alongside the single node (1: the single node alone).
    pub(crate) nodes: usize,
}

/// Stable one-member classic groups on one topic, idle once they synced: the committers, each
/// with the node that coordinates its group.
#[derive(Debug, Clone)]
pub(crate) struct Committers {
    topic: String,
    partitions: i32,
    /// (index into the nodes, member), in the order of the groups' numbers.
    members: Vec<(usize, IdleMember)>,
}

impl Committers {
    /// Creates `topic` with `partitions` partitions on every node and `groups` one-member groups
    /// subscribed to it (named after the topic), each formed on its coordinator.
    pub(crate) async fn create(
        nodes: &[SocketAddr],
        topic: &str,
        partitions: i32,
        groups: usize,
        member: MemberConfig,
        timeout: Duration,
    ) -> Result<Committers> {
        // Each node keeps its own topics, and OffsetCommit checks the topic on the coordinator;
        // where topics are replicated, the other nodes answer TOPIC_ALREADY_EXISTS, which is fine.
        for &addr in nodes {
            let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
            kafka::create_topic(&mut admin, topic, partitions, &[]).await?;
        }
        register_topics(&[(topic.into(), partitions)]);
        let names: Vec<String> = (0..groups).map(|i| format!("{topic}-{i}")).collect();
        let coordinators = if nodes.len() == 1 { vec![0; groups] } else { cluster::agreed_coordinators(nodes, &names, timeout).await? };
        let setup = SetupOpts {
            groups,
            members_per_group: 1,
            topic: (topic.into(), partitions),
            groups_per_wave: groups.max(1),
            per_parking_lane: PER_PARKING_LANE,
            fast_lanes: groups.clamp(1, 4),
            member,
            group_prefix: format!("{topic}-"),
            timeout,
        };
        let per_node: Vec<(SocketAddr, Vec<String>)> = nodes
            .iter()
            .enumerate()
            .map(|(n, &addr)| (addr, names.iter().zip(&coordinators).filter(|(_, &c)| c == n).map(|(g, _)| g.clone()).collect()))
            .collect();
        let setups = futures_util::future::try_join_all(
            per_node
                .iter()
                .filter(|(_, groups)| !groups.is_empty())
                .map(|(addr, groups)| group_load::setup_named(*addr, &setup, groups, None, Duration::ZERO)),
        )
        .await?;
        let mut formed: HashMap<String, IdleMember> = setups.into_iter().flat_map(|s| s.members).map(|m| (m.group.clone(), m)).collect();
        let members = names
            .iter()
            .zip(coordinators)
            .map(|(g, n)| formed.remove(g).map(|m| (n, m)).with_context(|| format!("group {g} formed no member")))
            .collect::<Result<_>>()?;
        Ok(Committers { topic: topic.into(), partitions, members })
    }

    /// How many of the first `n` committers each of `nodes` nodes coordinates.
    fn per_node(&self, n: usize, nodes: usize) -> Vec<usize> {
        let mut counts = vec![0; nodes];
        for (node, _) in self.members.iter().take(n) {
            counts[*node] += 1;
        }
        counts
    }

    /// The first `n` committers each commit every partition of the topic, wait for the answer
    /// and commit again, over `connections` shared connections to each node, each to its
    /// group's coordinator. Any error code fails the run.
    pub(crate) async fn run(
        &self,
        nodes: &[SocketAddr],
        n: usize,
        connections: usize,
        warmup: Duration,
        duration: Duration,
        server_pids: &[u32],
    ) -> Result<CommitRun> {
        if n > self.members.len() {
            bail!("{n} committers asked for, {} groups formed", self.members.len());
        }
        let routed: Vec<Vec<IdleMember>> =
            (0..nodes.len()).map(|node| self.members[..n].iter().filter(|(c, _)| *c == node).map(|(_, m)| m.clone()).collect()).collect();
        let routes: Vec<(SocketAddr, &[IdleMember])> = nodes.iter().copied().zip(routed.iter().map(Vec::as_slice)).collect();
        let opts = CommitOpts {
            topic: self.topic.clone(),
            partitions_per_commit: self.partitions,
            connections,
            warmup,
            duration,
            version: COMMIT_VERSION,
        };
        let run = group_load::commit_storm_routed(&routes, &opts, server_pids).await?;
        if !run.errors.is_empty() {
            bail!("commit errors: {}", describe_errors(&run.errors));
        }
        if run.commits == 0 {
            bail!("no commit was answered in the {:.1} s window", run.seconds);
        }
        Ok(run)
    }
}

/// What the committers commit to: one node, or the nodes of a cluster.
struct Target {
    label: String,
    nodes: Vec<SocketAddr>,
    pids: Vec<u32>,
    committers: Committers,
    /// Coordinator partitions each node leads (a cluster only).
    leaders_per_node: Vec<usize>,
    /// The servers' CPU while idle with the groups formed, in cores.
    idle_cores: f64,
}

/// A target's two runs in one repetition.
#[derive(Debug, Clone)]
struct Runs {
    single: CommitRun,
    many: CommitRun,
}

/// One repetition: the fsync probe, then one committer and then many on each target.
#[derive(Debug, Clone)]
struct Rep {
    fsync_p50_ms: f64,
    fsync_p99_ms: f64,
    /// By target: the single node first, then the cluster.
    runs: Vec<Runs>,
    /// What else the machine did meanwhile: a disturbed repetition shows here.
    disturbance: Disturbance,
}

/// CPU the machine spent outside the server and this process over a repetition (interrupts,
/// kernel threads, other processes), and CPU time the hypervisor took away (steal), in seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Disturbance {
    seconds: f64,
    outside_cpu: f64,
    steal: f64,
}

impl Disturbance {
    /// (machine busy, machine steal, servers, this process) CPU seconds now.
    fn sample(server_pids: &[u32]) -> (f64, f64, f64, f64) {
        let (busy, steal) = machine_cpu().unwrap_or((f64::NAN, f64::NAN));
        let servers = servers_cpu_time(server_pids).map_or(f64::NAN, |(u, s)| (u + s).as_secs_f64());
        (busy, steal, servers, group_load::self_cpu())
    }

    fn since(before: (f64, f64, f64, f64), started: Instant, server_pids: &[u32]) -> Disturbance {
        let now = Disturbance::sample(server_pids);
        Disturbance {
            seconds: started.elapsed().as_secs_f64(),
            outside_cpu: (now.0 - before.0) - (now.2 - before.2) - (now.3 - before.3),
            steal: now.1 - before.1,
        }
    }

    fn to_json(self) -> Value {
        json!({ "seconds": self.seconds, "outside_cpu_seconds": self.outside_cpu, "steal_seconds": self.steal })
    }
}

/// Machine-wide busy and steal CPU seconds, from the first line of /proc/stat (user nice system
/// idle iowait irq softirq steal).
fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let busy = ticks.first()? + ticks.get(1)? + ticks.get(2)? + ticks.get(5)? + ticks.get(6)?;
    let hz = crate::server::clock_ticks();
    Some((busy as f64 / hz, ticks.get(7).copied().unwrap_or(0) as f64 / hz))
}

/// Medians over the repetitions.
#[derive(Debug, Clone, Copy)]
struct Summary {
    fsync_p50_ms: f64,
    fsync_p99_ms: f64,
    single_p50_ms: f64,
    single_p99_ms: f64,
    single_commits_per_sec: f64,
    many_commits_per_sec: f64,
    many_offsets_per_sec: f64,
    many_p50_ms: f64,
    many_p99_ms: f64,
    many_server_cpu_seconds: f64,
    many_seconds: f64,
    many_client_cpu_seconds: f64,
}

impl Summary {
    /// Medians of target `t`'s runs.
    fn new(reps: &[Rep], t: usize) -> Summary {
        let many = |f: fn(&CommitRun) -> f64| median_of(reps, |r| f(&r.runs[t].many));
        Summary {
            fsync_p50_ms: median_of(reps, |r| r.fsync_p50_ms),
            fsync_p99_ms: median_of(reps, |r| r.fsync_p99_ms),
            single_p50_ms: median_of(reps, |r| r.runs[t].single.latency_ms(0.5)),
            single_p99_ms: median_of(reps, |r| r.runs[t].single.latency_ms(0.99)),
            single_commits_per_sec: median_of(reps, |r| r.runs[t].single.commits_per_sec()),
            many_commits_per_sec: many(CommitRun::commits_per_sec),
            many_offsets_per_sec: many(CommitRun::offsets_per_sec),
            many_p50_ms: many(|r| r.latency_ms(0.5)),
            many_p99_ms: many(|r| r.latency_ms(0.99)),
            many_server_cpu_seconds: many(|r| r.server_cpu_seconds().unwrap_or(f64::NAN)),
            many_seconds: many(|r| r.seconds),
            many_client_cpu_seconds: many(|r| r.client_cpu),
        }
    }

    fn single_p50_ratio(&self) -> f64 {
        self.single_p50_ms / self.fsync_p50_ms
    }

    fn single_p99_ratio(&self) -> f64 {
        self.single_p99_ms / self.fsync_p99_ms
    }

    fn offsets_ratio(&self) -> f64 {
        self.many_offsets_per_sec / TARGET_OFFSETS_PER_SEC
    }

    fn latency_met(&self) -> bool {
        self.single_p99_ratio() <= TARGET_LATENCY_VS_FSYNC
    }

    fn offsets_met(&self) -> bool {
        self.offsets_ratio() >= 1.0
    }

    fn many_server_cores(&self) -> f64 {
        self.many_server_cpu_seconds / self.many_seconds
    }

    /// Server CPU (all nodes) per acknowledged commit of the many committers, in microseconds.
    fn many_server_us_per_commit(&self) -> f64 {
        self.many_server_cpu_seconds * 1e6 / (self.many_commits_per_sec * self.many_seconds)
    }

    fn to_json(self) -> Value {
        json!({
            "fsync_p50_ms": self.fsync_p50_ms,
            "fsync_p99_ms": self.fsync_p99_ms,
            "single_p50_ms": self.single_p50_ms,
            "single_p99_ms": self.single_p99_ms,
            "single_commits_per_sec": self.single_commits_per_sec,
            "many_commits_per_sec": self.many_commits_per_sec,
            "many_offsets_per_sec": self.many_offsets_per_sec,
            "many_p50_ms": self.many_p50_ms,
            "many_p99_ms": self.many_p99_ms,
            "many_server_cpu_seconds": self.many_server_cpu_seconds,
            "many_server_cores": self.many_server_cores(),
            "many_server_cpu_us_per_commit": self.many_server_us_per_commit(),
            "many_client_cores": self.many_client_cpu_seconds / self.many_seconds,
            "many_offsets_per_server_cpu_second": self.many_offsets_per_sec * self.many_seconds / self.many_server_cpu_seconds,
        })
    }
}

pub(crate) fn run(opts: &CommitsOpts) -> Result<()> {
    crate::server::cleanup_on_signal()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let work = WorkDir::create(&opts.work_dir, opts.keep_data)?;
    let started = Instant::now();
    let load_start = load_average();
    let config = work.path.join("corral.toml");
    std::fs::write(&config, "# Empty: corral's defaults. Every coordinator record is fsynced through its Raft log before the answer.\n")?;
    let data = work.path.join("data");
    let server = ManagedServer::start(&opts.server, &data, &config, &work.path.join("corral.log"), &opts.server_args)?;
    let filesystem = same_filesystem(&work.path, &data)?;
    let cluster = if opts.nodes > 1 { Some(ManagedCluster::start(&opts.server, &work.path, opts.nodes, &opts.server_args)?) } else { None };
    let m = machine();
    println!("corral-bench commits{}: {} CPUs, Linux {}, {}", if opts.quick { " --quick" } else { "" }, m.nproc, m.kernel, m.cpu);
    println!(
        "server: {} serve {} (default config); data and fsync probe in {} ({filesystem})",
        opts.server.display(),
        opts.server_args.join(" "),
        work.path.display()
    );
    if cluster.is_some() {
        println!("cluster: {} nodes of the same binary on 127.0.0.1 (default config plus the node list, direct Raft links), alongside the single node", opts.nodes);
    }
    let (reps, targets) = local.block_on(&runtime, measure(opts, &server, cluster.as_ref(), &work.path))?;
    server.stop()?;
    if let Some(cluster) = cluster {
        cluster.stop()?;
    }

    let summary = Summary::new(&reps, 0);
    println!("{}", to_markdown(opts, &summary));
    let cluster_summary = (targets.len() > 1).then(|| Summary::new(&reps, 1));
    if let Some(c) = &cluster_summary {
        println!("{}", cluster_markdown(opts, &targets, &summary, c, &reps));
    }
    let load_end = load_average();
    println!("load average (1 min): start {load_start:.2}, end {load_end:.2}");
    if let Some(path) = &opts.json {
        let mut report = json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "date": time_now_utc(),
            "quick": opts.quick,
            "machine": m.to_json(),
            "server": opts.server,
            "server_args": opts.server_args,
            "server_config": "defaults (empty config file)",
            "work_dir": work.path,
            "filesystem": filesystem,
            "params": {
                "reps": reps.len(), "fsync_samples": opts.fsync_samples, "fsync_write_bytes": 4096,
                "warmup_seconds": opts.warmup.as_secs_f64(), "duration_seconds": opts.duration.as_secs_f64(),
                "committers": opts.committers, "partitions_per_commit": opts.partitions, "connections": opts.connections,
                "offset_commit_version": COMMIT_VERSION,
            },
            "targets": { "commit_p99_vs_fsync_p99_at_most": TARGET_LATENCY_VS_FSYNC, "offsets_per_sec_at_least": TARGET_OFFSETS_PER_SEC },
            "summary": summary.to_json(),
            "idle_server_cores": targets[0].idle_cores,
            "ratios": {
                "single_p50_vs_fsync_p50": summary.single_p50_ratio(),
                "single_p99_vs_fsync_p99": summary.single_p99_ratio(),
                "many_p50_vs_fsync_p50": summary.many_p50_ms / summary.fsync_p50_ms,
                "many_p99_vs_fsync_p99": summary.many_p99_ms / summary.fsync_p99_ms,
                "offsets_per_sec_vs_target": summary.offsets_ratio(),
            },
            "met": { "commit_p99_vs_fsync_p99": summary.latency_met(), "offsets_per_sec": summary.offsets_met() },
            "reps": reps.iter().map(|r| {
                let mut rep = json!({
                    "fsync_p50_ms": r.fsync_p50_ms, "fsync_p99_ms": r.fsync_p99_ms,
                    "single": r.runs[0].single.to_json(), "many": r.runs[0].many.to_json(), "machine": r.disturbance.to_json(),
                });
                if let Some(c) = r.runs.get(1) {
                    rep["cluster_single"] = c.single.to_json();
                    rep["cluster_many"] = c.many.to_json();
                }
                rep
            }).collect::<Vec<_>>(),
            "load_average_1min": { "start": load_start, "end": load_end },
            "seconds": started.elapsed().as_secs_f64(),
        });
        if let (Some(c), Some(t)) = (&cluster_summary, targets.get(1)) {
            report["cluster"] = json!({
                "nodes": opts.nodes,
                "server_config": "defaults plus [node] id and [cluster] raft_listen and nodes (127.0.0.1, direct Raft links)",
                "connections_per_node": opts.connections,
                "coordinator_partitions_led_per_node": t.leaders_per_node,
                "committers_per_node": t.committers.per_node(opts.committers, opts.nodes),
                "one_committer_node": t.committers.members.first().map(|(n, _)| n),
                "idle_server_cores": t.idle_cores,
                "summary": c.to_json(),
                "vs_single_node": {
                    "one_committer_p50": c.single_p50_ms / summary.single_p50_ms,
                    "one_committer_p99": c.single_p99_ms / summary.single_p99_ms,
                    "many_commits_per_sec": c.many_commits_per_sec / summary.many_commits_per_sec,
                    "many_offsets_per_sec": c.many_offsets_per_sec / summary.many_offsets_per_sec,
                    "many_offsets_per_sec_median_of_rep_ratios": rep_ratio(&reps),
                    "many_server_cpu_per_commit": c.many_server_us_per_commit() / summary.many_server_us_per_commit(),
                },
                "one_committer_p99_vs_fsync_p99": c.single_p99_ratio(),
            });
        }
        write_file(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    eprintln!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Median over the repetitions of the cluster's many-committer offsets/s divided by the single
/// node's in the same repetition.
fn rep_ratio(reps: &[Rep]) -> f64 {
    median_of(reps, |r| r.runs[1].many.offsets_per_sec() / r.runs[0].many.offsets_per_sec())
}

/// CPU cores the servers use over `window`, with nothing asked of them.
async fn idle_cores(pids: &[u32], window: Duration) -> f64 {
    let cpu = || servers_cpu_time(pids).map_or(f64::NAN, |(u, s)| (u + s).as_secs_f64());
    let before = cpu();
    tokio::time::sleep(window).await;
    (cpu() - before) / window.as_secs_f64()
}

async fn measure(
    opts: &CommitsOpts,
    server: &ManagedServer,
    cluster: Option<&ManagedCluster>,
    probe_dir: &Path,
) -> Result<(Vec<Rep>, Vec<Target>)> {
    let member = MemberConfig {
        // The members go idle once synced: their sessions must outlive the benchmark.
        session_timeout_ms: 1_800_000,
        rebalance_timeout_ms: 60_000,
        heartbeat_interval: Duration::from_secs(1),
        protocol: "roundrobin".into(),
        versions: Versions::default(),
    };
    let mut targets = Vec::new();
    let formed = Instant::now();
    let committers = Committers::create(&[server.kafka], TOPIC, opts.partitions, opts.committers, member.clone(), opts.timeout).await?;
    eprintln!(
        "  one node: {} one-member groups Stable after {:.1} s (the server's default initial rebalance delay applies)",
        opts.committers,
        formed.elapsed().as_secs_f64()
    );
    targets.push(Target {
        label: "one node".into(),
        nodes: vec![server.kafka],
        pids: server.pid().into_iter().collect(),
        committers,
        leaders_per_node: Vec::new(),
        idle_cores: 0.0,
    });
    if let Some(cluster) = cluster {
        let nodes = cluster.kafka();
        let waited = Instant::now();
        let leaders = cluster::wait_for_leaders(&nodes, opts.timeout).await?;
        let mut leaders_per_node = vec![0; nodes.len()];
        for &l in &leaders {
            leaders_per_node[l] += 1;
        }
        eprintln!(
            "  {} nodes: all {} coordinator partitions led by their preferred node after {:.1} s; led per node {leaders_per_node:?}",
            nodes.len(),
            leaders.len(),
            waited.elapsed().as_secs_f64()
        );
        let formed = Instant::now();
        let committers = Committers::create(&nodes, TOPIC, opts.partitions, opts.committers, member, opts.timeout).await?;
        eprintln!(
            "  {} nodes: {} one-member groups Stable after {:.1} s, each on its coordinator; committers per node {:?}",
            nodes.len(),
            opts.committers,
            formed.elapsed().as_secs_f64(),
            committers.per_node(opts.committers, nodes.len())
        );
        targets.push(Target {
            label: format!("{} nodes", nodes.len()),
            nodes,
            pids: cluster.pids(),
            committers,
            leaders_per_node,
            idle_cores: 0.0,
        });
    }
    for t in &mut targets {
        t.idle_cores = idle_cores(&t.pids, Duration::from_secs(2)).await;
        eprintln!("  {}: servers idle with the groups formed use {:.3} cores", t.label, t.idle_cores);
    }
    let all_pids: Vec<u32> = targets.iter().flat_map(|t| t.pids.iter().copied()).collect();
    let mut reps = Vec::with_capacity(opts.reps);
    for rep in 1..=opts.reps {
        let (before, started) = (Disturbance::sample(&all_pids), Instant::now());
        let (fsync_p50_ms, fsync_p99_ms) = fsync_latency(probe_dir, opts.fsync_samples)?;
        eprintln!("  {rep}/{}: fsync of 4 KiB p50 {fsync_p50_ms:.3} ms, p99 {fsync_p99_ms:.3} ms", opts.reps);
        let mut runs = Vec::with_capacity(targets.len());
        for t in &targets {
            let single = t.committers.run(&t.nodes, 1, 1, opts.warmup, opts.duration, &t.pids).await?;
            progress(rep, opts.reps, &format!("{}, one committer", t.label), &single);
            let many = t.committers.run(&t.nodes, opts.committers, opts.connections, opts.warmup, opts.duration, &t.pids).await?;
            progress(rep, opts.reps, &format!("{}, {} committers", t.label, opts.committers), &many);
            runs.push(Runs { single, many });
        }
        let disturbance = Disturbance::since(before, started, &all_pids);
        eprintln!(
            "  {rep}/{}: CPU outside the servers and this process (interrupts, kernel threads, other processes) {:.2} s, steal {:.2} s, in {:.1} s",
            opts.reps,
            disturbance.outside_cpu,
            disturbance.steal,
            disturbance.seconds
        );
        reps.push(Rep { fsync_p50_ms, fsync_p99_ms, runs, disturbance });
    }
    Ok((reps, targets))
}

fn progress(rep: usize, reps: usize, what: &str, run: &CommitRun) {
    eprintln!(
        "  {rep}/{reps}: {what}: {:.0} commits/s, {:.0} offsets/s, p50 {:.3} ms, p99 {:.3} ms, server CPU {}, client CPU {:.2} s",
        run.commits_per_sec(),
        run.offsets_per_sec(),
        run.latency_ms(0.5),
        run.latency_ms(0.99),
        run.server_cpu_seconds().map_or("-".into(), |c| format!("{c:.2} s")),
        run.client_cpu
    );
}

/// Fails unless `data` (the server's data directory) is on the filesystem of `probe` (where the
/// fsync latency is measured); returns that filesystem's type and source, and warns when fsync
/// means nothing there (a tmpfs).
fn same_filesystem(probe: &Path, data: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).with_context(|| format!("{}", p.display()));
    if dev(probe)? != dev(data)? {
        bail!("{} and the data directory {} are on different filesystems", probe.display(), data.display());
    }
    let (fstype, source) = mount_of(probe).unwrap_or_else(|| ("unknown".into(), "unknown".into()));
    if matches!(fstype.as_str(), "tmpfs" | "ramfs") {
        eprintln!("  WARNING: {} is on a {fstype}: fsync does not reach a disk; pass --work-dir on a disk", probe.display());
    }
    Ok(format!("{fstype} on {source}"))
}

/// The type and source of the filesystem `path` is on: the longest mount point that contains
/// it, from /proc/self/mountinfo.
fn mount_of(path: &Path) -> Option<(String, String)> {
    let path = std::fs::canonicalize(path).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = PathBuf::from(head.split(' ').nth(4)?.replace("\\040", " "));
            let mut fs = tail.split(' ');
            let (fstype, source) = (fs.next()?.to_string(), fs.next()?.to_string());
            path.starts_with(&point).then_some((point.as_os_str().len(), fstype, source))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, fstype, source)| (fstype, source))
}

fn to_markdown(opts: &CommitsOpts, s: &Summary) -> String {
    let reps = opts.reps;
    let mut md = format!(
        "\nDurable offset commits on one node (Raft, fsync before the answer): medians of {reps} repetition{}, {:.0} s measured each; \
         OffsetCommit v{COMMIT_VERSION} of {} partitions, closed loop\n\n\
         | measurement | result | compared with | ratio | target |\n|---|---:|---|---:|---|\n",
        if reps == 1 { "" } else { "s" },
        opts.duration.as_secs_f64(),
        opts.partitions
    );
    let mut row = |cells: [&str; 5]| {
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    };
    let many = format!("{} committers over {} connections", opts.committers, opts.connections);
    let cores = |cpu: f64| format!("{cpu:.2} s in {:.1} s ({:.2} cores)", s.many_seconds, cpu / s.many_seconds);
    let latency_target = format!("≤ {TARGET_LATENCY_VS_FSYNC:.0}×: **{}**", verdict(s.latency_met()));
    let offsets_target = format!("≥ {TARGET_OFFSETS_PER_SEC:.0}: **{}**", verdict(s.offsets_met()));
    row(["fsync of 4 KiB (write + fdatasync), p50 / p99", &format!("{:.3} / {:.3} ms", s.fsync_p50_ms, s.fsync_p99_ms), "–", "–", "–"]);
    row(["one committer, latency p50", &format!("{:.3} ms", s.single_p50_ms), "fsync p50", &format!("{:.2}×", s.single_p50_ratio()), "–"]);
    row([
        "one committer, latency p99",
        &format!("{:.3} ms", s.single_p99_ms),
        "fsync p99",
        &format!("{:.2}×", s.single_p99_ratio()),
        &latency_target,
    ]);
    row(["one committer, commits/s", &format!("{:.0}", s.single_commits_per_sec), "–", "–", "–"]);
    row([&format!("{many}, commits/s"), &format!("{:.0}", s.many_commits_per_sec), "–", "–", "–"]);
    row([
        &format!("{many}, offsets/s"),
        &format!("{:.0}", s.many_offsets_per_sec),
        "target",
        &format!("{:.2}×", s.offsets_ratio()),
        &offsets_target,
    ]);
    row([
        &format!("{many}, latency p50"),
        &format!("{:.2} ms", s.many_p50_ms),
        "fsync p50",
        &format!("{:.1}×", s.many_p50_ms / s.fsync_p50_ms),
        "–",
    ]);
    row([
        &format!("{many}, latency p99"),
        &format!("{:.2} ms", s.many_p99_ms),
        "fsync p99",
        &format!("{:.1}×", s.many_p99_ms / s.fsync_p99_ms),
        "–",
    ]);
    row([&format!("{many}, server CPU (user + sys)"), &cores(s.many_server_cpu_seconds), "–", "–", "–"]);
    row([&format!("{many}, load generator CPU"), &cores(s.many_client_cpu_seconds), "–", "–", "–"]);
    let _ = writeln!(
        md,
        "\nThe latency target is taken on the one committer (one commit in flight). With {} committers in a closed loop, latency is \
         committers ÷ throughput (Little's law): queueing, shown for information.",
        opts.committers
    );
    md
}

/// The cluster against the single node, measured in the same repetitions.
fn cluster_markdown(opts: &CommitsOpts, targets: &[Target], one: &Summary, c: &Summary, reps: &[Rep]) -> String {
    let cluster = &targets[1];
    let n = opts.nodes;
    let mut md = format!(
        "\nDurable offset commits, one node against {n} nodes on loopback (each group's requests sent to its coordinator), \
         alternating in every repetition: medians of {} repetition{}\n\n\
         | measurement | one node | {n} nodes | {n} nodes ÷ one node |\n|---|---:|---:|---:|\n",
        opts.reps,
        if opts.reps == 1 { "" } else { "s" }
    );
    let mut row = |what: &str, a: String, b: String, ratio: f64| {
        let _ = writeln!(md, "| {what} | {a} | {b} | {ratio:.2}× |");
    };
    let many = format!("{} committers", opts.committers);
    row(
        "one committer, latency p50",
        format!("{:.3} ms", one.single_p50_ms),
        format!("{:.3} ms", c.single_p50_ms),
        c.single_p50_ms / one.single_p50_ms,
    );
    row(
        "one committer, latency p99",
        format!("{:.3} ms", one.single_p99_ms),
        format!("{:.3} ms", c.single_p99_ms),
        c.single_p99_ms / one.single_p99_ms,
    );
    row(
        "one committer, commits/s",
        format!("{:.0}", one.single_commits_per_sec),
        format!("{:.0}", c.single_commits_per_sec),
        c.single_commits_per_sec / one.single_commits_per_sec,
    );
    row(
        &format!("{many}, commits/s"),
        format!("{:.0}", one.many_commits_per_sec),
        format!("{:.0}", c.many_commits_per_sec),
        c.many_commits_per_sec / one.many_commits_per_sec,
    );
    row(
        &format!("{many}, offsets/s"),
        format!("{:.0}", one.many_offsets_per_sec),
        format!("**{:.0}**", c.many_offsets_per_sec),
        c.many_offsets_per_sec / one.many_offsets_per_sec,
    );
    row(
        &format!("{many}, latency p50"),
        format!("{:.2} ms", one.many_p50_ms),
        format!("{:.2} ms", c.many_p50_ms),
        c.many_p50_ms / one.many_p50_ms,
    );
    row(
        &format!("{many}, latency p99"),
        format!("{:.2} ms", one.many_p99_ms),
        format!("{:.2} ms", c.many_p99_ms),
        c.many_p99_ms / one.many_p99_ms,
    );
    row(
        &format!("{many}, server CPU, all nodes (cores)"),
        format!("{:.2}", one.many_server_cores()),
        format!("{:.2}", c.many_server_cores()),
        c.many_server_cores() / one.many_server_cores(),
    );
    row(
        &format!("{many}, server CPU per commit, all nodes"),
        format!("{:.0} µs", one.many_server_us_per_commit()),
        format!("{:.0} µs", c.many_server_us_per_commit()),
        c.many_server_us_per_commit() / one.many_server_us_per_commit(),
    );
    row(
        &format!("{many}, load generator CPU (cores)"),
        format!("{:.2}", one.many_client_cpu_seconds / one.many_seconds),
        format!("{:.2}", c.many_client_cpu_seconds / c.many_seconds),
        (c.many_client_cpu_seconds / c.many_seconds) / (one.many_client_cpu_seconds / one.many_seconds),
    );
    let per_rep: Vec<String> =
        reps.iter().map(|r| format!("{:.2}×", r.runs[1].many.offsets_per_sec() / r.runs[0].many.offsets_per_sec())).collect();
    let _ = writeln!(
        md,
        "\nfsync of 4 KiB p50 / p99: {:.3} / {:.3} ms; {n}-node one-committer p99 {:.2}× the fsync p99. \
         Offsets/s ratio per repetition: {} (median {:.2}×). The {many} use {} connections to the one node and {} to each of the {n} nodes; \
         committers per node {:?}, coordinator partitions led per node {:?}. Idle with the groups formed, the servers use {:.3} cores (one node) and {:.3} (all {n} nodes).",
        c.fsync_p50_ms,
        c.fsync_p99_ms,
        c.single_p99_ratio(),
        per_rep.join(", "),
        rep_ratio(reps),
        opts.connections,
        opts.connections,
        cluster.committers.per_node(opts.committers, n),
        cluster.leaders_per_node,
        targets[0].idle_cores,
        cluster.idle_cores
    );
    md
}
