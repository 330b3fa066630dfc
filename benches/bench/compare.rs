//! `corral-bench all`: every scenario against corral and its peers (Apache Kafka, Tansu) in one
//! run, next to the limits of the machine measured in the same run (loopback TCP, fsync latency),
//! with each server's CPU seconds and peak RSS per scenario. Writes JSON and a Markdown table.
//!
//! The servers run one after the other with the same load generator and client settings. Kafka
//! (one KRaft broker) and corral keep their logs on disk, Tansu in memory (its only local engine).
//! Each corral result is reported with its ratio to each peer and, where one bounds it, to the
//! limit.
//!
//! Scenarios, per server:
//! - produce: 4 connections × 4 partitions, 4 requests in flight, batches of 1,000 records of
//!   100 B or 1 KiB, acks=1 and acks=-1;
//! - fetch: one consumer reads a large partition from its start in 1 MiB fetches (corral: its
//!   sendfile path, then the pread path on the same data);
//! - end-to-end latency at a fixed produce rate (`latency.rs`);
//! - classic group formation with N simulated members, and the rebalance when one leaves;
//! - G idle groups of 5 members: server memory, a heartbeat storm, offset commits;
//! - real clients: confluent-kafka consumers in one group drain a topic
//!   (`benches/clients/drain.py`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::durable_commits::Committers;
use crate::fetch::{self, FetchOpts};
use crate::group_classic::{register_topics, ClassicGroup, Discovery, GroupSpec, MemberConfig, Versions};
use crate::group_load::{self, CommitOpts, SetupOpts, StormOpts};
use crate::kafka::{self, KafkaConn};
use crate::latency::{self, LatencyOpts};
use crate::loopback::{self, LoopbackOpts, Mode};
use crate::mux::Lanes;
use crate::produce::{self, ProduceOpts};
use crate::server::{process_memory, ManagedServer, ResourceMeter, Resources};
use crate::suite::{load_average, machine, WorkDir};
use crate::wire::SocketOpts;

const CORRAL: &str = "corral";
const KAFKA: &str = "kafka";
const TANSU: &str = "tansu";
/// Corral's initial rebalance delay in this suite (Kafka's default is 3 s).
const INITIAL_DELAY_MS: u64 = 1000;
const FETCH_BYTES: i32 = 1 << 20;
const FETCH_SENDFILE: &str = "fetch 1 MiB from the start of a partition (corral: sendfile path)";
const FETCH_PREAD: &str = "fetch 1 MiB from the start of a partition (corral: pread path)";
const RECORDS_PER_BATCH: usize = 1000;
/// Members whose JoinGroup / SyncGroup share one connection. One, as with real clients: Kafka
/// (and Tansu) read a connection's next request only after answering the previous one, so a
/// parked JoinGroup would hold back the joins of the members behind it. (corral answers
/// pipelined requests out of a parked one's way; the groups suite shares connections.)
const PER_PARKING_LANE: usize = 1;

#[derive(Debug, Clone)]
pub(crate) struct AllOpts {
    pub(crate) server: PathBuf,
    pub(crate) server_args: Vec<String>,
    /// Apache Kafka's jars (a peer, started with `java`); without them Kafka does not run.
    pub(crate) kafka_libs: Option<PathBuf>,
    /// Tansu's binary (a peer); without it Tansu does not run.
    pub(crate) tansu: Option<PathBuf>,
    /// A Python with confluent-kafka, for the real-client scenario; without it that row is
    /// reported as not run.
    pub(crate) python: Option<PathBuf>,
    pub(crate) work_dir: PathBuf,
    pub(crate) keep_data: bool,
    pub(crate) json: Option<PathBuf>,
    pub(crate) markdown: Option<PathBuf>,
    pub(crate) quick: bool,
}

/// How big each scenario is.
struct Scale {
    warmup: Duration,
    duration: Duration,
    fill_bytes: u64,
    latency_rate: u32,
    formation: Vec<usize>,
    idle_groups: Vec<usize>,
    committers: usize,
    drain_records: usize,
    fsync_samples: usize,
    timeout: Duration,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                warmup: Duration::from_millis(300),
                duration: Duration::from_secs(1),
                fill_bytes: 32 << 20,
                latency_rate: 200,
                formation: vec![10, 50],
                idle_groups: vec![50, 200],
                committers: 50,
                drain_records: 10_000,
                fsync_samples: 100,
                timeout: Duration::from_secs(60),
            }
        } else {
            Scale {
                warmup: Duration::from_secs(1),
                duration: Duration::from_secs(5),
                fill_bytes: 512 << 20,
                latency_rate: 1000,
                formation: vec![10, 100, 1000],
                idle_groups: vec![100, 1000, 3000],
                committers: 1000,
                drain_records: 200_000,
                fsync_samples: 500,
                timeout: Duration::from_secs(120),
            }
        }
    }
}

/// One server's result for one scenario.
#[derive(Debug, Clone, Default)]
struct Cell {
    value: Option<f64>,
    resources: Resources,
    error: Option<String>,
    detail: Value,
}

/// One scenario: a value per server, and the limit that bounds it, if any.
#[derive(Debug, Clone)]
struct Row {
    key: String,
    label: String,
    unit: &'static str,
    higher_is_better: bool,
    limit: Option<(&'static str, f64)>,
    cells: BTreeMap<&'static str, Cell>,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    limits: Value,
    /// Scaling series for the plot: (x, server) → value.
    formation: BTreeMap<usize, BTreeMap<&'static str, f64>>,
    heartbeats: BTreeMap<usize, BTreeMap<&'static str, f64>>,
    memory: BTreeMap<usize, (usize, usize, BTreeMap<&'static str, f64>)>,
}

impl Report {
    fn row(&mut self, key: &str, label: &str, unit: &'static str, higher_is_better: bool) -> &mut Row {
        if let Some(i) = self.rows.iter().position(|r| r.key == key) {
            return &mut self.rows[i];
        }
        self.rows.push(Row { key: key.into(), label: label.into(), unit, higher_is_better, limit: None, cells: BTreeMap::new() });
        self.rows.last_mut().expect("pushed")
    }
}

pub(crate) fn run(opts: &AllOpts) -> Result<()> {
    crate::server::cleanup_on_signal()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let work = WorkDir::create(&opts.work_dir, opts.keep_data)?;
    let scale = Scale::new(opts.quick);
    let started = Instant::now();
    let load_start = load_average();
    let m = machine();
    eprintln!("corral-bench all{}: {} CPUs, Linux {}, {}", if opts.quick { " --quick" } else { "" }, m.nproc, m.kernel, m.cpu);
    let mut report = Report::default();

    eprintln!("limits of this machine");
    let loopback = local.block_on(&runtime, loopback::run(&loopback_opts(&scale)))?.mb_per_sec();
    let (fsync_p50, fsync_p99) = fsync_latency(&work.path, scale.fsync_samples)?;
    let disk_write = buffered_write(&work.path, scale.fill_bytes)?;
    eprintln!("  loopback TCP {loopback:.0} MB/s; fsync of 4 KiB p50 {fsync_p50:.3} ms, p99 {fsync_p99:.3} ms");
    eprintln!("  buffered file write {disk_write:.0} MB/s");
    report.limits = json!({ "loopback_mb_per_sec": loopback, "fsync_p50_ms": fsync_p50, "fsync_p99_ms": fsync_p99, "buffered_write_mb_per_sec": disk_write });

    let config = work.path.join("corral.toml");
    std::fs::write(&config, format!("[groups]\ninitial_rebalance_delay_ms = {INITIAL_DELAY_MS}\n"))?;
    let corral_data = work.path.join("corral-data");
    let server = ManagedServer::start(&opts.server, &corral_data, &config, &work.path.join("corral.log"), &opts.server_args)?;
    eprintln!("{CORRAL}: {} {}", opts.server.display(), opts.server_args.join(" "));
    local.block_on(&runtime, scenarios(CORRAL, &server, opts, &scale, &mut report))?;
    server.stop()?;

    // Over the same data: the pread path (the partition the sendfile fetch read), and offset
    // commits that wait for an fsync (flush_messages = 1), against the fsync limit.
    let durable_config = work.path.join("corral-pread-fsync.toml");
    std::fs::write(
        &durable_config,
        format!(
            "[kafka]\nfetch_send = \"pread\"\n[storage]\nflush_messages = 1\n[groups]\ninitial_rebalance_delay_ms = {INITIAL_DELAY_MS}\n"
        ),
    )?;
    let server =
        ManagedServer::start(&opts.server, &corral_data, &durable_config, &work.path.join("corral-pread-fsync.log"), &opts.server_args)?;
    let cell = local.block_on(&runtime, measured(&server, fetch_cell(&server, &scale, false)));
    report_cell(&mut report, "fetch_pread", FETCH_PREAD, "MB/s", true, CORRAL, cell);
    let cell = local.block_on(&runtime, measured(&server, durable_commit_latency(&server, &scale)));
    report_cell(
        &mut report,
        "durable_commit_latency_p50",
        "offset commit latency p50, one committer, fsync before the answer",
        "ms",
        false,
        CORRAL,
        cell,
    );
    server.stop()?;

    if let Some(libs) = &opts.kafka_libs {
        let server = ManagedServer::start_kafka(libs, &work.path.join("kafka"), &work.path.join("kafka.log"), INITIAL_DELAY_MS)?;
        eprintln!("{KAFKA}: java -cp {}/* kafka.Kafka (one KRaft broker, log on disk)", libs.display());
        local.block_on(&runtime, scenarios(KAFKA, &server, opts, &scale, &mut report))?;
        server.stop()?;
    }
    if let Some(tansu) = &opts.tansu {
        let server = ManagedServer::start_tansu(tansu, &work.path.join("tansu.log"))?;
        eprintln!("{TANSU}: {} (memory storage)", tansu.display());
        local.block_on(&runtime, scenarios(TANSU, &server, opts, &scale, &mut report))?;
        server.stop()?;
    }
    // The pread row ran last (its own server); it belongs under the sendfile row.
    if let (Some(sendfile), Some(pread)) =
        (report.rows.iter().position(|r| r.key == "fetch_sendfile"), report.rows.iter().position(|r| r.key == "fetch_pread"))
    {
        let row = report.rows.remove(pread);
        report.rows.insert(sendfile + usize::from(pread > sendfile), row);
    }
    for row in &mut report.rows {
        row.limit = match row.key.as_str() {
            "fetch_sendfile" | "fetch_pread" => Some(("loopback TCP", loopback)),
            "commit_latency_p50" | "durable_commit_latency_p50" => Some(("fsync p50", fsync_p50)),
            key if key.starts_with("produce_") && key.ends_with("_mb") => Some(("buffered write", disk_write)),
            _ => None,
        };
    }

    let results = to_json(opts, &scale, &report, started.elapsed(), load_start);
    let markdown = to_markdown(opts, &report);
    println!("{markdown}");
    if let Some(path) = &opts.json {
        write_file(path, &(serde_json::to_string_pretty(&results)? + "\n"))?;
    }
    if let Some(path) = &opts.markdown {
        write_file(path, &markdown)?;
    }
    eprintln!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn loopback_opts(scale: &Scale) -> LoopbackOpts {
    LoopbackOpts {
        mode: Mode::Stream,
        chunk: FETCH_BYTES as usize,
        warmup: scale.warmup,
        duration: scale.duration,
        socket: SocketOpts { rcvbuf: 4 << 20 },
        file: None,
    }
}

/// Throughput of writing `bytes` to a new file in 1 MiB write(2)s, without fsync: the page-cache
/// write path that bounds what a server storing on this disk can accept.
fn buffered_write(dir: &Path, bytes: u64) -> Result<f64> {
    use std::io::Write;
    let path = dir.join("write-probe");
    let mut file = std::fs::File::create(&path)?;
    let block = vec![0xa5u8; 1 << 20];
    let t = Instant::now();
    let mut written = 0u64;
    while written < bytes {
        file.write_all(&block)?;
        written += block.len() as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(written as f64 / 1e6 / secs.max(1e-9))
}

/// Latency of a 4 KiB write followed by fdatasync(2) in the work directory: the floor under
/// any durable acknowledgement.
pub(crate) fn fsync_latency(dir: &Path, samples: usize) -> Result<(f64, f64)> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let block = vec![0x5au8; 4096];
    let mut micros = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        micros.push(t.elapsed().as_micros() as u64);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    micros.sort_unstable();
    Ok((crate::stats::percentile(&micros, 0.5) as f64 / 1000.0, crate::stats::percentile(&micros, 0.99) as f64 / 1000.0))
}

/// Runs `f`, measuring the server's CPU and peak RSS meanwhile; a failure becomes the cell's
/// error (the suite goes on with the next scenario).
async fn measured(server: &ManagedServer, f: impl std::future::Future<Output = Result<Cell>>) -> Cell {
    let meter = server.pid().map(ResourceMeter::start);
    let result = f.await;
    let resources = meter.map(ResourceMeter::finish).unwrap_or_default();
    match result {
        Ok(cell) => Cell { resources, ..cell },
        Err(e) => Cell { resources, error: Some(format!("{e:#}")), ..Cell::default() },
    }
}

fn report_cell(report: &mut Report, key: &str, label: &str, unit: &'static str, higher_is_better: bool, server: &'static str, cell: Cell) {
    match (&cell.value, &cell.error) {
        (Some(v), _) => eprintln!("  {label}: {v:.1} {unit}{}", cpu_rss(&cell.resources)),
        (None, Some(e)) => eprintln!("  {label}: FAILED: {e}"),
        (None, None) => eprintln!("  {label}: not run"),
    }
    report.row(key, label, unit, higher_is_better).cells.insert(server, cell);
}

fn cpu_rss(r: &Resources) -> String {
    let mut s = String::new();
    if let Some(cpu) = r.cpu_seconds {
        let _ = write!(s, "  (server CPU {cpu:.2} s");
        if let Some(rss) = r.peak_rss_kb {
            let _ = write!(s, ", peak RSS {:.0} MB", rss as f64 / 1024.0);
        }
        s.push(')');
    }
    s
}

fn value(v: f64, detail: Value) -> Cell {
    Cell { value: Some(v), detail, ..Cell::default() }
}

async fn scenarios(name: &'static str, server: &ManagedServer, opts: &AllOpts, scale: &Scale, report: &mut Report) -> Result<()> {
    let addr = server.kafka;
    let pid = server.pid();
    let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
    // Every server here has the default 50 coordinator partitions.
    kafka::wait_for_coordinator(&mut admin, &crate::cluster::probe_groups(50)).await?;

    for (size, acks) in [(100usize, 1i16), (100, -1), (1024, 1), (1024, -1)] {
        let topic = format!("bench-produce-{size}-{}", if acks == 1 { "1" } else { "all" });
        kafka::create_topic(&mut admin, &topic, 4, &[]).await?;
        let produce = ProduceOpts {
            topic: topic.clone(),
            connections: 4,
            record_size: size,
            batch_records: RECORDS_PER_BATCH,
            in_flight: 4,
            acks,
            warmup: scale.warmup,
            duration: scale.duration,
            total_bytes: None,
            socket: SocketOpts { rcvbuf: 0 },
            server_pid: pid,
            security: Default::default(),
        };
        let cell = measured(server, async {
            let m = produce::run(addr, &produce).await?;
            Ok(value(m.records_per_sec(), json!({ "mb_per_sec": m.mb_per_sec() })))
        })
        .await;
        let acks_name = if acks == 1 { "1" } else { "all" };
        let mb = Cell { value: cell.detail.get("mb_per_sec").and_then(Value::as_f64), ..cell.clone() };
        report_cell(
            report,
            &format!("produce_{size}_{acks_name}"),
            &format!("produce {size} B records, acks={acks_name}"),
            "records/s",
            true,
            name,
            cell,
        );
        report_cell(
            report,
            &format!("produce_{size}_{acks_name}_mb"),
            &format!("produce {size} B records, acks={acks_name}"),
            "MB/s",
            true,
            name,
            mb,
        );
        let _ = kafka::delete_topic(&mut admin, &topic).await;
    }

    let cell = measured(server, fetch_cell(server, scale, true)).await;
    report_cell(report, "fetch_sendfile", FETCH_SENDFILE, "MB/s", true, name, cell.clone());
    if name != CORRAL {
        // The peer has one fetch path: it stands against both of corral's.
        report.row("fetch_pread", FETCH_PREAD, "MB/s", true).cells.insert(name, cell);
    }

    kafka::create_topic(&mut admin, "bench-latency", 1, &[]).await?;
    let latency = LatencyOpts {
        topic: "bench-latency".into(),
        rate: scale.latency_rate,
        record_size: 100,
        warmup: scale.warmup,
        duration: scale.duration * 2,
    };
    let run = measured(server, async {
        let run = latency::run(addr, &latency).await?;
        Ok(value(run.ms(0.5), run.to_json()))
    })
    .await;
    let p99 = Cell { value: run.detail.get("p99_ms").and_then(Value::as_f64), ..run.clone() };
    report_cell(report, "latency_p50", &format!("end-to-end latency p50 at {} records/s", scale.latency_rate), "ms", false, name, run);
    report_cell(report, "latency_p99", &format!("end-to-end latency p99 at {} records/s", scale.latency_rate), "ms", false, name, p99);

    groups(name, server, scale, report).await?;

    let cell = measured(server, drain(addr, opts, scale, &mut admin)).await;
    report_cell(report, "drain", &format!("3 confluent-kafka consumers drain {} records", scale.drain_records), "s", false, name, cell);
    Ok(())
}

async fn fetch_cell(server: &ManagedServer, scale: &Scale, fill: bool) -> Result<Cell> {
    let addr = server.kafka;
    let topic = "bench-fetch".to_string();
    if fill {
        let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
        kafka::create_topic(&mut admin, &topic, 1, &[]).await?;
        let fill = ProduceOpts {
            topic: topic.clone(),
            connections: 1,
            record_size: 1024,
            batch_records: RECORDS_PER_BATCH,
            in_flight: 4,
            acks: 1,
            warmup: Duration::ZERO,
            duration: Duration::MAX,
            total_bytes: Some(scale.fill_bytes),
            socket: SocketOpts { rcvbuf: 0 },
            server_pid: None,
            security: Default::default(),
        };
        produce::run(addr, &fill).await?;
    }
    let read = |one_pass, warmup, duration| FetchOpts {
        topic: topic.clone(),
        partition: 0,
        fetch_bytes: FETCH_BYTES,
        warmup,
        duration,
        one_pass,
        socket: SocketOpts { rcvbuf: 4 << 20 },
        server_pid: server.pid(),
        security: Default::default(),
    };
    // One untimed pass first, so that the data is in the page cache for every path alike.
    fetch::run(addr, &read(true, Duration::ZERO, Duration::MAX)).await?;
    let m = fetch::run(addr, &read(false, scale.warmup, scale.duration)).await?;
    Ok(value(m.mb_per_sec(), json!({ "partition_bytes": scale.fill_bytes })))
}

/// Simulated members' settings. The session timeout is the one `drain.py`'s consumers use: Tansu
/// completes a join only after about half the session timeout, so a longer one would measure
/// little but that wait.
fn member_config() -> MemberConfig {
    MemberConfig {
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 60_000,
        heartbeat_interval: Duration::from_millis(100),
        protocol: "roundrobin".into(),
        versions: Versions::default(),
    }
}

async fn groups(name: &'static str, server: &ManagedServer, scale: &Scale, report: &mut Report) -> Result<()> {
    let addr = server.kafka;
    let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
    let topic = ("bench-groups".to_string(), 100);
    kafka::create_topic(&mut admin, &topic.0, topic.1, &[]).await?;
    register_topics(std::slice::from_ref(&topic));
    formation(name, server, scale, &topic, report).await?;
    idle_groups(name, server, scale, &mut admin, report).await
}

/// N members form one group, then one of them leaves; the connections close afterwards.
async fn formation(name: &'static str, server: &ManagedServer, scale: &Scale, topic: &(String, i32), report: &mut Report) -> Result<()> {
    let most = scale.formation.iter().copied().max().unwrap_or(0);
    let lanes = Rc::new(Lanes::connect(server.kafka, 4, most + 1, PER_PARKING_LANE).await?);
    for &n in &scale.formation {
        let spec = Rc::new(GroupSpec::new(format!("bench-form-{n}"), vec![topic.clone()], member_config())?);
        let mut formed: Option<ClassicGroup> = None;
        let cell = measured(server, async {
            let (group, timing) = ClassicGroup::start(spec.clone(), lanes.clone(), n, scale.timeout).await?;
            formed = Some(group);
            let beyond = timing.delay_served.map(|d| (timing.total.saturating_sub(d)).as_secs_f64() * 1000.0);
            Ok(value(timing.total.as_secs_f64() * 1000.0, json!({ "beyond_initial_delay_ms": beyond })))
        })
        .await;
        if let Some(v) = cell.value {
            report.formation.entry(n).or_default().insert(name, v);
        }
        report_cell(report, &format!("formation_{n}"), &format!("{n} members join one group: until all synced"), "ms", false, name, cell);
        let Some(mut group) = formed else { continue };
        let cell = measured(server, async {
            let timing = group.leave_one(Discovery::Heartbeat, scale.timeout).await?;
            Ok(value(timing.total.as_secs_f64() * 1000.0, json!({ "discovery_ms": timing.discovery.as_secs_f64() * 1000.0 })))
        })
        .await;
        report_cell(report, &format!("leave_{n}"), &format!("{n} members, one leaves: until the rest synced"), "ms", false, name, cell);
        let _ = group.stop(true).await;
    }
    Ok(())
}

/// Idle groups of 5 members, in growing numbers: the server's memory, a heartbeat storm and
/// offset commits at each size.
async fn idle_groups(name: &'static str, server: &ManagedServer, scale: &Scale, admin: &mut KafkaConn, report: &mut Report) -> Result<()> {
    let addr = server.kafka;
    let (mut total_groups, mut total_committed) = (0, 0);
    for &g in &scale.idle_groups {
        let setup_opts = SetupOpts {
            groups: g,
            members_per_group: 5,
            topic: ("bench-idle".into(), 10),
            groups_per_wave: g.min(2000),
            per_parking_lane: PER_PARKING_LANE,
            fast_lanes: 4,
            // The members go quiet after the setup; the storm that follows keeps them alive.
            member: MemberConfig { heartbeat_interval: Duration::from_secs(1), ..member_config() },
            group_prefix: format!("bench-idle-{g}-"),
            timeout: scale.timeout,
        };
        if total_groups == 0 {
            kafka::create_topic(admin, "bench-idle", 10, &[]).await?;
            register_topics(&[("bench-idle".into(), 10)]);
        }
        let mut setup = None;
        let cell = measured(server, async {
            let s = group_load::setup(addr, &setup_opts, server.pid(), Duration::from_secs(1)).await?;
            let per_member = s.bytes_per_member().map(|(rss, _)| rss);
            let rss_mb = s.settled.or(s.waves.last().and_then(|w| w.memory)).map(|m| m.rss_kb as f64 / 1024.0);
            setup = Some(s);
            Ok(value(rss_mb.unwrap_or(f64::NAN), json!({ "bytes_per_member": per_member })))
        })
        .await;
        total_groups += g;
        report_cell(
            report,
            &format!("rss_{g}"),
            &format!("server RSS with {total_groups} idle groups x 5 members"),
            "MB",
            false,
            name,
            cell,
        );
        let Some(setup) = setup else { continue };

        let storm = StormOpts { connections: 8, depth: 128, warmup: scale.warmup, duration: scale.duration, version: 4 };
        let cell = measured(server, async {
            let run = group_load::heartbeat_storm(addr, &setup.members, &storm, server.pid()).await?;
            if !run.errors.is_empty() {
                bail!("heartbeat errors: {}", group_load::describe_errors(&run.errors));
            }
            Ok(value(run.per_sec(), json!({ "per_server_cpu_second": run.per_cpu_sec() })))
        })
        .await;
        if let Some(v) = cell.value {
            report.heartbeats.entry(g).or_default().insert(name, v);
        }
        report_cell(report, &format!("heartbeats_{g}"), &format!("heartbeats/s, {g} groups x 5 members"), "/s", true, name, cell);

        let committers: Vec<_> = setup.members.iter().step_by(5).take(scale.committers.min(g)).cloned().collect();
        let commit = CommitOpts {
            topic: "bench-idle".into(),
            partitions_per_commit: 10,
            connections: 8,
            warmup: scale.warmup,
            duration: scale.duration,
            version: 9,
        };
        let cell = measured(server, async {
            let run = group_load::commit_storm(addr, &committers, &commit, server.pid()).await?;
            if !run.errors.is_empty() {
                bail!("commit errors: {}", group_load::describe_errors(&run.errors));
            }
            Ok(value(
                run.commits_per_sec(),
                json!({ "committers": run.committers, "p50_ms": run.latency_ms(0.5), "p99_ms": run.latency_ms(0.99) }),
            ))
        })
        .await;
        report_cell(
            report,
            &format!("commits_{g}"),
            &format!("offset commits/s (10 partitions each), {} committers", committers.len()),
            "/s",
            true,
            name,
            cell,
        );
        if let Some(memory) = server.pid().and_then(process_memory) {
            total_committed += committers.len() * 10;
            report
                .memory
                .entry(total_groups)
                .or_insert((total_groups * 5, total_committed, BTreeMap::new()))
                .2
                .insert(name, memory.rss_kb as f64);
        }
        if g == *scale.idle_groups.first().unwrap_or(&0) {
            let single = CommitOpts { connections: 1, ..commit.clone() };
            let cell = measured(server, async {
                let run = group_load::commit_storm(addr, &committers[..1], &single, server.pid()).await?;
                Ok(value(run.latency_ms(0.5), json!({ "p99_ms": run.latency_ms(0.99) })))
            })
            .await;
            report_cell(report, "commit_latency_p50", "offset commit latency p50, one committer", "ms", false, name, cell);
        }
    }
    Ok(())
}

/// One member of a one-member group commits 10 partitions at a time, one commit in flight, on a
/// server that fsyncs before answering.
async fn durable_commit_latency(server: &ManagedServer, scale: &Scale) -> Result<Cell> {
    let committers = Committers::create(&[server.kafka], "bench-durable", 10, 1, member_config(), scale.timeout).await?;
    let run = committers.run(&[server.kafka], 1, 1, scale.warmup, scale.duration, server.pid().as_slice()).await?;
    Ok(value(run.latency_ms(0.5), json!({ "p99_ms": run.latency_ms(0.99), "commits_per_sec": run.commits_per_sec() })))
}

/// Fills a 6-partition topic and times confluent-kafka consumers draining it.
async fn drain(addr: SocketAddr, opts: &AllOpts, scale: &Scale, admin: &mut KafkaConn) -> Result<Cell> {
    let Some(python) = &opts.python else { bail!("no --python given (a Python with confluent-kafka)") };
    let topic = "bench-drain";
    kafka::create_topic(admin, topic, 6, &[]).await?;
    let batch_len = kafka::record_batch(RECORDS_PER_BATCH, 100)?.len() as u64;
    let batches = scale.drain_records.div_ceil(RECORDS_PER_BATCH) as u64;
    let fill = ProduceOpts {
        topic: topic.into(),
        connections: 6,
        record_size: 100,
        batch_records: RECORDS_PER_BATCH,
        in_flight: 4,
        acks: 1,
        warmup: Duration::ZERO,
        duration: Duration::MAX,
        total_bytes: Some(batches * batch_len),
        socket: SocketOpts { rcvbuf: 0 },
        server_pid: None,
        security: Default::default(),
    };
    produce::run(addr, &fill).await?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/clients/drain.py");
    let records = batches as usize * RECORDS_PER_BATCH;
    let mut command = std::process::Command::new(python);
    command.arg(&script).args(["--bootstrap", &addr.to_string(), "--topic", topic, "--group", "bench-drain", "--consumers", "3"]).args([
        "--expect",
        &records.to_string(),
        "--timeout",
        &scale.timeout.as_secs().to_string(),
    ]);
    // drain.py enforces the timeout itself.
    let output = tokio::task::spawn_blocking(move || command.output())
        .await?
        .with_context(|| format!("running {} {}", python.display(), script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .with_context(|| format!("drain.py printed no result:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr)))?;
    if result["ok"] != Value::Bool(true) {
        bail!("drain incomplete: {result}");
    }
    let seconds = result["seconds"].as_f64().context("no seconds in the drain result")?;
    Ok(value(seconds, result))
}

fn to_json(opts: &AllOpts, scale: &Scale, report: &Report, elapsed: Duration, load_start: f64) -> Value {
    let m = machine();
    let cell_json = |c: &Cell| {
        json!({
            "value": c.value,
            "server_cpu_seconds": c.resources.cpu_seconds,
            "peak_rss_kb": c.resources.peak_rss_kb,
            "error": c.error,
            "detail": c.detail,
        })
    };
    let rows: Vec<Value> = report
        .rows
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "label": r.label,
                "unit": r.unit,
                "higher_is_better": r.higher_is_better,
                "limit": r.limit.map(|(name, v)| json!({ "name": name, "value": v })),
                "ratio_to_peer": peers(opts).iter().map(|&p| (p.to_string(), json!(ratio_to_peer(r, p)))).collect::<serde_json::Map<_, _>>(),
                "ratio_to_limit": ratio_to_limit(r),
                "servers": r.cells.iter().map(|(s, c)| (s.to_string(), cell_json(c))).collect::<serde_json::Map<_, _>>(),
            })
        })
        .collect();
    let series = |map: &BTreeMap<usize, BTreeMap<&'static str, f64>>, x: &str, suffix: &str| -> Vec<Value> {
        map.iter()
            .map(|(k, v)| {
                let mut o = serde_json::Map::new();
                o.insert(x.into(), json!(k));
                for s in [CORRAL, KAFKA, TANSU] {
                    o.insert(format!("{s}_{suffix}"), json!(v.get(s)));
                }
                Value::Object(o)
            })
            .collect()
    };
    let memory: Vec<Value> = report
        .memory
        .iter()
        .map(|(groups, (members, committed, v))| {
            json!({
                "groups": groups,
                "members": members,
                "committed_partitions": committed,
                "corral_rss_kb": v.get(CORRAL),
                "kafka_rss_kb": v.get(KAFKA),
                "tansu_rss_kb": v.get(TANSU),
            })
        })
        .collect();
    json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "date": time_now_utc(),
        "quick": opts.quick,
        "machine": m.to_json(),
        "servers": { "corral": opts.server, "kafka": opts.kafka_libs, "tansu": opts.tansu },
        "params": {
            "warmup_seconds": scale.warmup.as_secs_f64(),
            "duration_seconds": scale.duration.as_secs_f64(),
            "fetch_partition_bytes": scale.fill_bytes,
            "latency_rate": scale.latency_rate,
            "corral_initial_rebalance_delay_ms": INITIAL_DELAY_MS,
            "drain_records": scale.drain_records,
        },
        "limits": report.limits,
        "rows": rows,
        "scaling": {
            "formation": series(&report.formation, "members", "ms"),
            "heartbeats": series(&report.heartbeats, "groups", "per_sec"),
            "memory": memory,
        },
        "seconds": elapsed.as_secs_f64(),
        "load_average_1min": { "start": load_start, "end": load_average() },
    })
}

/// The peers this run compares corral with.
fn peers(opts: &AllOpts) -> Vec<&'static str> {
    [(KAFKA, opts.kafka_libs.is_some()), (TANSU, opts.tansu.is_some())].into_iter().filter(|(_, on)| *on).map(|(p, _)| p).collect()
}

/// corral ÷ peer, oriented so that > 1 means corral is ahead.
fn ratio_to_peer(r: &Row, peer: &str) -> Option<f64> {
    let c = r.cells.get(CORRAL)?.value?;
    let p = r.cells.get(peer)?.value?;
    let ratio = if r.higher_is_better { c / p } else { p / c };
    ratio.is_finite().then_some(ratio)
}

/// corral ÷ limit for throughput; corral ÷ floor for latency (how many times the floor).
fn ratio_to_limit(r: &Row) -> Option<f64> {
    let c = r.cells.get(CORRAL)?.value?;
    let (_, limit) = r.limit?;
    Some(c / limit).filter(|v| v.is_finite())
}

fn fmt_value(c: Option<&Cell>) -> String {
    match c {
        None => "–".into(),
        Some(Cell { value: Some(v), .. }) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(Cell { value: Some(v), .. }) => format!("{v:.2}"),
        Some(Cell { error: Some(_), .. }) => "failed".into(),
        Some(_) => "–".into(),
    }
}

fn fmt_resources(c: Option<&Cell>) -> String {
    match c.map(|c| c.resources) {
        Some(Resources { cpu_seconds: Some(cpu), peak_rss_kb: Some(rss) }) => format!("{cpu:.1} s / {:.0} MB", rss as f64 / 1024.0),
        Some(Resources { cpu_seconds: Some(cpu), .. }) => format!("{cpu:.1} s"),
        _ => "–".into(),
    }
}

fn to_markdown(opts: &AllOpts, report: &Report) -> String {
    let mut md = String::new();
    let peers = peers(opts);
    let servers: Vec<&str> = std::iter::once(CORRAL).chain(peers.iter().copied()).collect();
    let mut header = String::from("| scenario | unit |");
    servers.iter().for_each(|s| header += &format!(" {s} |"));
    peers.iter().for_each(|p| header += &format!(" corral vs {p} |"));
    header += " limit | corral ÷ limit |";
    servers.iter().for_each(|s| header += &format!(" {s} CPU / peak RSS |"));
    let _ = writeln!(md, "{header}");
    let _ = writeln!(md, "|---|---|{}---|---:|{}", "---:|".repeat(servers.len() + peers.len()), "---:|".repeat(servers.len()));
    for r in &report.rows {
        let mut line = format!("| {} | {} |", r.label, r.unit);
        servers.iter().for_each(|s| line += &format!(" {} |", fmt_value(r.cells.get(s))));
        peers.iter().for_each(|p| line += &format!(" {} |", ratio_to_peer(r, p).map_or("–".into(), |v| format!("{v:.2}×"))));
        match r.limit {
            Some((name, v)) => line += &format!(" {name} {v:.2} | {} |", ratio_to_limit(r).map_or("–".into(), |v| format!("{v:.2}"))),
            None => line += " – | – |",
        }
        servers.iter().for_each(|s| line += &format!(" {} |", fmt_resources(r.cells.get(s))));
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(
        md,
        "\nScaling:\n\n| work |{}\n|---|{}",
        servers.iter().map(|s| format!(" {s} |")).collect::<String>(),
        "---:|".repeat(servers.len())
    );
    let row = |work: String, v: &BTreeMap<&'static str, f64>, f: &dyn Fn(f64) -> String| {
        let cells: String = servers.iter().map(|s| format!(" {} |", v.get(s).map_or("–".into(), |&x| f(x)))).collect();
        format!("| {work} |{cells}")
    };
    for (n, v) in &report.formation {
        let _ = writeln!(md, "{}", row(format!("group formation, {n} members"), v, &|x| format!("{x:.0} ms")));
    }
    for (g, v) in &report.heartbeats {
        let _ = writeln!(md, "{}", row(format!("heartbeats, {g} groups x 5 members"), v, &|x| format!("{x:.0}/s")));
    }
    for (g, (members, committed, v)) in &report.memory {
        let work = format!("server RSS, {g} groups ({members} members), {committed} committed partitions");
        let _ = writeln!(md, "{}", row(work, v, &|x| format!("{:.0} MB", x / 1024.0)));
    }
    let failures: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r| {
            r.cells
                .iter()
                .filter_map(move |(s, c)| c.error.as_ref().map(|e| format!("- {s}, {}: {}", r.label, e.lines().next().unwrap_or(""))))
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(md, "\nFailed scenarios:\n{}", failures.join("\n"));
    }
    md
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (days to civil date: Howard Hinnant's
/// algorithm; no date crate for one timestamp).
pub(crate) fn time_now_utc() -> String {
    utc_date(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64)
}

fn utc_date(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc_date(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc_date(1_795_972_268), "2026-11-29T17:11:08Z");
    }
}
