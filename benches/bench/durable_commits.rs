//! `corral-bench commits`: durable offset commits on one node, against the fsync latency of the
//! filesystem they are written to, measured in the same run.
//!
//! Every coordinator record goes through its partition's one-voter Raft group, whose log is
//! fdatasynced before the OffsetCommit is answered; the records of requests that arrive while a
//! write is in flight share the next entry and its fsync. So corral runs with its default
//! configuration (an empty config file): its data directory is a fresh directory inside the work
//! directory, next to the fsync probe, and the two are checked to be on one filesystem.
//!
//! The committers are members of Stable one-member classic groups on a 10-partition topic, idle
//! after they synced. Each repetition, in this order:
//!
//! 1. fsync latency: 4 KiB writes, each followed by fdatasync, in the work directory;
//! 2. one committer, one commit in flight: OffsetCommit v9 of 10 partitions, closed loop;
//! 3. many committers (one member of each of 1,000 groups), 10 partitions per commit, closed
//!    loop, over 8 shared connections: the groups suite's commit scenario.
//!
//! Medians over the repetitions are reported against the targets: commit p99 within 5× the
//! fsync p99 (p50 against fsync p50 shown too), and at least 50,000 offsets/s.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::compare::{fsync_latency, time_now_utc, write_file};
use crate::group_classic::{register_topics, MemberConfig, Versions};
use crate::group_load::{self, describe_errors, median_of, CommitOpts, CommitRun, IdleMember, SetupOpts};
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
}

/// Stable one-member classic groups on one topic, idle once they synced: the committers.
#[derive(Debug, Clone)]
pub(crate) struct Committers {
    topic: String,
    partitions: i32,
    members: Vec<IdleMember>,
}

impl Committers {
    /// Creates `topic` with `partitions` partitions and `groups` one-member groups subscribed to
    /// it (named after the topic).
    pub(crate) async fn create(addr: SocketAddr, topic: &str, partitions: i32, groups: usize, member: MemberConfig, timeout: Duration) -> Result<Committers> {
        let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
        kafka::create_topic(&mut admin, topic, partitions, &[]).await?;
        register_topics(&[(topic.into(), partitions)]);
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
        let members = group_load::setup(addr, &setup, None, Duration::ZERO).await?.members;
        Ok(Committers { topic: topic.into(), partitions, members })
    }

    /// The first `n` committers each commit every partition of the topic, wait for the answer
    /// and commit again, over `connections` shared connections. Any error code fails the run.
    pub(crate) async fn run(&self, addr: SocketAddr, n: usize, connections: usize, warmup: Duration, duration: Duration, server_pid: Option<u32>) -> Result<CommitRun> {
        if n > self.members.len() {
            bail!("{n} committers asked for, {} groups formed", self.members.len());
        }
        let opts = CommitOpts { topic: self.topic.clone(), partitions_per_commit: self.partitions, connections, warmup, duration, version: COMMIT_VERSION };
        let run = group_load::commit_storm(addr, &self.members[..n], &opts, server_pid).await?;
        if !run.errors.is_empty() {
            bail!("commit errors: {}", describe_errors(&run.errors));
        }
        if run.commits == 0 {
            bail!("no commit was answered in the {:.1} s window", run.seconds);
        }
        Ok(run)
    }
}

/// One repetition: the fsync probe, then one committer, then many.
#[derive(Debug, Clone)]
struct Rep {
    fsync_p50_ms: f64,
    fsync_p99_ms: f64,
    single: CommitRun,
    many: CommitRun,
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
    /// (machine busy, machine steal, server, this process) CPU seconds now.
    fn sample(server_pid: Option<u32>) -> (f64, f64, f64, f64) {
        let (busy, steal) = machine_cpu().unwrap_or((f64::NAN, f64::NAN));
        let server = server_pid.and_then(crate::server::process_cpu_time).map_or(f64::NAN, |(u, s)| (u + s).as_secs_f64());
        (busy, steal, server, group_load::self_cpu())
    }

    fn since(before: (f64, f64, f64, f64), started: Instant, server_pid: Option<u32>) -> Disturbance {
        let now = Disturbance::sample(server_pid);
        Disturbance { seconds: started.elapsed().as_secs_f64(), outside_cpu: (now.0 - before.0) - (now.2 - before.2) - (now.3 - before.3), steal: now.1 - before.1 }
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
    fn new(reps: &[Rep]) -> Summary {
        let many = |f: fn(&CommitRun) -> f64| median_of(reps, |r| f(&r.many));
        Summary {
            fsync_p50_ms: median_of(reps, |r| r.fsync_p50_ms),
            fsync_p99_ms: median_of(reps, |r| r.fsync_p99_ms),
            single_p50_ms: median_of(reps, |r| r.single.latency_ms(0.5)),
            single_p99_ms: median_of(reps, |r| r.single.latency_ms(0.99)),
            single_commits_per_sec: median_of(reps, |r| r.single.commits_per_sec()),
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
            "many_server_cores": self.many_server_cpu_seconds / self.many_seconds,
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
    let m = machine();
    println!(
        "corral-bench commits{}: {} CPUs, Linux {}, {}",
        if opts.quick { " --quick" } else { "" },
        m.nproc,
        m.kernel,
        m.cpu
    );
    println!("server: {} serve {} (default config); data and fsync probe in {} ({filesystem})", opts.server.display(), opts.server_args.join(" "), work.path.display());
    let reps = local.block_on(&runtime, measure(opts, &server, &work.path))?;
    server.stop()?;

    let summary = Summary::new(&reps);
    println!("{}", to_markdown(opts, &summary));
    let load_end = load_average();
    println!("load average (1 min): start {load_start:.2}, end {load_end:.2}");
    if let Some(path) = &opts.json {
        let report = json!({
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
            "ratios": {
                "single_p50_vs_fsync_p50": summary.single_p50_ratio(),
                "single_p99_vs_fsync_p99": summary.single_p99_ratio(),
                "many_p50_vs_fsync_p50": summary.many_p50_ms / summary.fsync_p50_ms,
                "many_p99_vs_fsync_p99": summary.many_p99_ms / summary.fsync_p99_ms,
                "offsets_per_sec_vs_target": summary.offsets_ratio(),
            },
            "met": { "commit_p99_vs_fsync_p99": summary.latency_met(), "offsets_per_sec": summary.offsets_met() },
            "reps": reps.iter().map(|r| json!({
                "fsync_p50_ms": r.fsync_p50_ms, "fsync_p99_ms": r.fsync_p99_ms,
                "single": r.single.to_json(), "many": r.many.to_json(), "machine": r.disturbance.to_json(),
            })).collect::<Vec<_>>(),
            "load_average_1min": { "start": load_start, "end": load_end },
            "seconds": started.elapsed().as_secs_f64(),
        });
        write_file(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    eprintln!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

async fn measure(opts: &CommitsOpts, server: &ManagedServer, probe_dir: &Path) -> Result<Vec<Rep>> {
    let (addr, pid) = (server.kafka, server.pid());
    let member = MemberConfig {
        // The members go idle once synced: their sessions must outlive the benchmark.
        session_timeout_ms: 1_800_000,
        rebalance_timeout_ms: 60_000,
        heartbeat_interval: Duration::from_secs(1),
        protocol: "roundrobin".into(),
        versions: Versions::default(),
    };
    let formed = Instant::now();
    let committers = Committers::create(addr, TOPIC, opts.partitions, opts.committers, member, opts.timeout).await?;
    eprintln!("  {} one-member groups Stable after {:.1} s (the server's default initial rebalance delay applies)", opts.committers, formed.elapsed().as_secs_f64());
    let mut reps = Vec::with_capacity(opts.reps);
    for rep in 1..=opts.reps {
        let (before, started) = (Disturbance::sample(pid), Instant::now());
        let (fsync_p50_ms, fsync_p99_ms) = fsync_latency(probe_dir, opts.fsync_samples)?;
        eprintln!("  {rep}/{}: fsync of 4 KiB p50 {fsync_p50_ms:.3} ms, p99 {fsync_p99_ms:.3} ms", opts.reps);
        let single = committers.run(addr, 1, 1, opts.warmup, opts.duration, pid).await?;
        progress(rep, opts.reps, "one committer", &single);
        let many = committers.run(addr, opts.committers, opts.connections, opts.warmup, opts.duration, pid).await?;
        progress(rep, opts.reps, &format!("{} committers", opts.committers), &many);
        let disturbance = Disturbance::since(before, started, pid);
        eprintln!(
            "  {rep}/{}: CPU outside the server and this process (interrupts, kernel threads, other processes) {:.2} s, steal {:.2} s, in {:.1} s",
            opts.reps,
            disturbance.outside_cpu,
            disturbance.steal,
            disturbance.seconds
        );
        reps.push(Rep { fsync_p50_ms, fsync_p99_ms, single, many, disturbance });
    }
    Ok(reps)
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
    row(["one committer, latency p99", &format!("{:.3} ms", s.single_p99_ms), "fsync p99", &format!("{:.2}×", s.single_p99_ratio()), &latency_target]);
    row(["one committer, commits/s", &format!("{:.0}", s.single_commits_per_sec), "–", "–", "–"]);
    row([&format!("{many}, commits/s"), &format!("{:.0}", s.many_commits_per_sec), "–", "–", "–"]);
    row([&format!("{many}, offsets/s"), &format!("{:.0}", s.many_offsets_per_sec), "target", &format!("{:.2}×", s.offsets_ratio()), &offsets_target]);
    row([&format!("{many}, latency p50"), &format!("{:.2} ms", s.many_p50_ms), "fsync p50", &format!("{:.1}×", s.many_p50_ms / s.fsync_p50_ms), "–"]);
    row([&format!("{many}, latency p99"), &format!("{:.2} ms", s.many_p99_ms), "fsync p99", &format!("{:.1}×", s.many_p99_ms / s.fsync_p99_ms), "–"]);
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
