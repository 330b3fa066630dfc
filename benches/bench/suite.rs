//! The whole benchmark in one run: starts corral itself, measures produce, fetch through the
//! sendfile and the pread path, and the loopback TCP limit, then prints the table and the ratios
//! the targets are stated in.
//!
//! The machines this runs on are small and noisy (2 cores shared with other work), so the
//! comparisons are made within one run and in alternation: two corral servers run side by side
//! (fetch_send = "sendfile" and "pread", each over its own copy of the same partition), and
//! each round runs every fetch and loopback scenario once for a few seconds, in an order that
//! rotates from round to round. A disturbance then hits all scenarios alike, and the ratios are
//! taken within each round before the median across rounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::fetch::{self, FetchOpts};
use crate::kafka::{self, KafkaConn};
use crate::loopback::{self, LoopbackOpts, Mode};
use crate::produce::{self, ProduceOpts};
use crate::server::ManagedServer;
use crate::stats::{paired_ratio, Measurement, Series};
use crate::wire::SocketOpts;

/// Fetch must reach this fraction of the loopback (stream) limit.
const TARGET_FETCH_VS_LOOPBACK: f64 = 0.70;
/// "Clearly ahead": sendfile at least this much faster than pread, a margin above the spread
/// of the within-round ratios seen on the 2-core machines.
const TARGET_SENDFILE_VS_PREAD: f64 = 1.10;

const FETCH_TOPIC: &str = "bench-fetch";

#[derive(Debug, Clone)]
pub(crate) struct SuiteOpts {
    pub(crate) server: PathBuf,
    /// Passed through to `corral serve` (e.g. `--shards 1`).
    pub(crate) server_args: Vec<String>,
    pub(crate) work_dir: PathBuf,
    pub(crate) keep_data: bool,
    pub(crate) json: Option<PathBuf>,
    /// Size of the partition the fetch scenario reads.
    pub(crate) data_bytes: u64,
    /// Rounds of phase 2 (every fetch and loopback scenario once per round).
    pub(crate) rounds: usize,
    pub(crate) produce_reps: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    pub(crate) produce_partitions: i32,
    pub(crate) produce_connections: usize,
    pub(crate) produce_in_flight: usize,
    pub(crate) record_size: usize,
    pub(crate) batch_records: usize,
    pub(crate) fetch_bytes: i32,
    pub(crate) socket: SocketOpts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchSend {
    Sendfile = 0,
    Pread = 1,
}

impl FetchSend {
    fn name(self) -> &'static str {
        match self {
            FetchSend::Sendfile => "sendfile",
            FetchSend::Pread => "pread",
        }
    }
}

/// What phase 2 measures in each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    FetchSendfile,
    FetchPread,
    LoopbackStream,
    LoopbackRr,
    /// Diagnostic: the loopback writer sendfile(2)s corral's segment file, one request in
    /// flight: the kernel's part of a sendfile fetch with no server around it.
    LoopbackRrSegment,
}

impl Scenario {
    fn label(self) -> &'static str {
        match self {
            Scenario::FetchSendfile => "fetch sendfile",
            Scenario::FetchPread => "fetch pread",
            Scenario::LoopbackStream => "loopback stream",
            Scenario::LoopbackRr => "loopback 1 request in flight",
            Scenario::LoopbackRrSegment => "loopback 1 in flight, sendfile of segment",
        }
    }
}

#[derive(Debug, Default)]
struct Results {
    produce: Series,
    fill: Series,
    fetch_sendfile: Series,
    fetch_pread: Series,
    loopback_stream: Series,
    loopback_rr: Series,
    /// Diagnostic: 1 request in flight, the writer sendfile(2)s corral's segment file.
    loopback_rr_segment: Series,
    /// Receive buffer the kernel granted the reader (bytes).
    rcvbuf_granted: usize,
    load_at_start: f64,
}

impl Results {
    fn series_mut(&mut self, scenario: Scenario) -> &mut Series {
        match scenario {
            Scenario::FetchSendfile => &mut self.fetch_sendfile,
            Scenario::FetchPread => &mut self.fetch_pread,
            Scenario::LoopbackStream => &mut self.loopback_stream,
            Scenario::LoopbackRr => &mut self.loopback_rr,
            Scenario::LoopbackRrSegment => &mut self.loopback_rr_segment,
        }
    }
}

pub(crate) fn run(opts: &SuiteOpts) -> Result<()> {
    crate::server::cleanup_on_signal()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let work = WorkDir::create(&opts.work_dir, opts.keep_data)?;
    let data_dir = |mode: FetchSend| work.path.join(format!("data-{}", mode.name()));
    let config = |mode: FetchSend| -> Result<PathBuf> {
        let path = work.path.join(format!("{}.toml", mode.name()));
        std::fs::write(&path, format!("[kafka]\nfetch_send = \"{}\"\n", mode.name()))?;
        Ok(path)
    };
    let configs = [config(FetchSend::Sendfile)?, config(FetchSend::Pread)?];
    let start = |mode: FetchSend| {
        let log = work.path.join(format!("corral-{}.log", mode.name()));
        ManagedServer::start(&opts.server, &data_dir(mode), &configs[mode as usize], &log, &opts.server_args)
    };

    print_header(opts, &work.path);
    let mut results = Results { load_at_start: load_average(), ..Results::default() };
    let fetch_opts = |server: &ManagedServer, one_pass: bool| FetchOpts {
        topic: FETCH_TOPIC.into(),
        partition: 0,
        fetch_bytes: opts.fetch_bytes,
        warmup: opts.warmup,
        duration: opts.duration,
        one_pass,
        socket: opts.socket,
        server_pid: server.pid(),
        security: Default::default(),
    };
    let produce_opts = |server: &ManagedServer, topic: &str| ProduceOpts {
        topic: topic.into(),
        connections: opts.produce_connections,
        record_size: opts.record_size,
        batch_records: opts.batch_records,
        in_flight: opts.produce_in_flight,
        acks: 1,
        warmup: opts.warmup,
        duration: opts.duration,
        total_bytes: None,
        socket: opts.socket,
        server_pid: server.pid(),
        security: Default::default(),
    };

    // Phase 1, on the sendfile server: produce, then fill the partition fetch reads.
    eprintln!("phase 1: produce ({} repetitions), fill {} MB for fetch", opts.produce_reps, opts.data_bytes / 1_000_000);
    let server = start(FetchSend::Sendfile)?;
    runtime.block_on(async {
        let mut admin = KafkaConn::connect(server.kafka, opts.socket).await?;
        for rep in 0..opts.produce_reps {
            // A fresh topic per repetition, deleted afterwards, keeps disk use bounded.
            let topic = format!("bench-produce-{rep}");
            kafka::create_topic(&mut admin, &topic, opts.produce_partitions, &[]).await?;
            let m = produce::run(server.kafka, &produce_opts(&server, &topic)).await.context("produce")?;
            progress(&format!("produce {}/{}", rep + 1, opts.produce_reps), &m);
            results.produce.push(m);
            kafka::delete_topic(&mut admin, &topic).await?;
        }
        kafka::create_topic(&mut admin, FETCH_TOPIC, 1, &[]).await?;
        let fill = ProduceOpts { connections: 1, total_bytes: Some(opts.data_bytes), ..produce_opts(&server, FETCH_TOPIC) };
        let m = produce::run(server.kafka, &fill).await.context("filling the fetch partition")?;
        progress("fill (1 connection, 1 partition)", &m);
        results.fill.push(m);
        anyhow::Ok(())
    })?;
    // A clean stop fsyncs the partition; the pread server gets its own copy of the data, so
    // both servers can run side by side and be measured in alternation.
    server.stop()?;
    copy_dir(&data_dir(FetchSend::Sendfile), &data_dir(FetchSend::Pread))?;
    sync_all();
    let segment = largest_segment(&data_dir(FetchSend::Sendfile).join(format!("{FETCH_TOPIC}-0")));

    // Phase 2: rounds of short runs of every scenario, in rotating order, so that whatever else
    // the machine is doing affects all of them alike.
    let servers = [start(FetchSend::Sendfile)?, start(FetchSend::Pread)?];
    runtime.block_on(async {
        // One untimed pass over each copy so every byte is in the page cache before timing.
        for (server, mode) in servers.iter().zip([FetchSend::Sendfile, FetchSend::Pread]) {
            let m = fetch::run(server.kafka, &fetch_opts(server, true)).await.context("warm-up read")?;
            progress(&format!("warm-up read, {} server (untimed)", mode.name()), &m);
        }
        let probe = crate::wire::connect(servers[0].kafka, opts.socket).await?;
        results.rcvbuf_granted = crate::wire::recv_buffer(&probe);
        anyhow::Ok(())
    })?;
    let mut scenarios = vec![Scenario::FetchSendfile, Scenario::FetchPread, Scenario::LoopbackStream, Scenario::LoopbackRr];
    if segment.is_some() {
        scenarios.push(Scenario::LoopbackRrSegment);
    }
    eprintln!("phase 2: {} rounds of {} scenarios", opts.rounds, scenarios.len());
    for round in 0..opts.rounds {
        let tag = format!("{}/{}", round + 1, opts.rounds);
        for i in 0..scenarios.len() {
            let scenario = scenarios[(i + round) % scenarios.len()];
            let loopback = |mode, file: Option<&PathBuf>| LoopbackOpts {
                mode,
                chunk: opts.fetch_bytes as usize,
                warmup: opts.warmup,
                duration: opts.duration,
                socket: opts.socket,
                file: file.cloned(),
            };
            let m = runtime.block_on(async {
                match scenario {
                    Scenario::FetchSendfile => fetch::run(servers[0].kafka, &fetch_opts(&servers[0], false)).await,
                    Scenario::FetchPread => fetch::run(servers[1].kafka, &fetch_opts(&servers[1], false)).await,
                    Scenario::LoopbackStream => loopback::run(&loopback(Mode::Stream, None)).await,
                    Scenario::LoopbackRr => loopback::run(&loopback(Mode::Rr, None)).await,
                    Scenario::LoopbackRrSegment => loopback::run(&loopback(Mode::Rr, segment.as_ref())).await,
                }
            });
            let m = m.with_context(|| scenario.label().to_string())?;
            progress(&format!("{} {tag}", scenario.label()), &m);
            results.series_mut(scenario).push(m);
        }
    }
    for server in servers {
        server.stop()?;
    }

    let report = Report::new(&results);
    report.print(opts, &results);
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json(opts, &results))? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Copies a directory tree (a stopped server's data directory).
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Flushes dirty pages (the copy just made) so that writeback does not overlap the timed runs.
fn sync_all() {
    let _ = std::process::Command::new("sync").status();
}

fn progress(what: &str, m: &Measurement) {
    eprintln!("  {what:<44} {}", m.describe());
}

fn print_header(opts: &SuiteOpts, work: &Path) {
    let m = machine();
    println!("corral-bench suite: {} CPUs, Linux {}, {}", m.nproc, m.kernel, m.cpu);
    println!("server: {} {}  (data in {})", opts.server.display(), opts.server_args.join(" "), work.display());
    println!(
        "shape: {} B records, {} per batch; produce {} connections x {} partitions, {} in flight, acks=1; \
         fetch {} B (max_bytes = partition_max_bytes), 1 partition of {} MB, 1 in flight; \
         each run {} s measured after {} s warm-up; {} rounds of fetch/loopback, {} produce runs",
        opts.record_size,
        opts.batch_records,
        opts.produce_connections,
        opts.produce_partitions,
        opts.produce_in_flight,
        opts.fetch_bytes,
        opts.data_bytes / 1_000_000,
        opts.duration.as_secs_f64(),
        opts.warmup.as_secs_f64(),
        opts.rounds,
        opts.produce_reps
    );
}

struct Report {
    fetch_vs_loopback: f64,
    fetch_vs_pread: f64,
    fetch_vs_rr: f64,
    fetch_vs_segment: Option<f64>,
    pread_vs_loopback: f64,
}

impl Report {
    fn new(r: &Results) -> Report {
        Report {
            fetch_vs_loopback: paired_ratio(&r.fetch_sendfile, &r.loopback_stream),
            fetch_vs_pread: paired_ratio(&r.fetch_sendfile, &r.fetch_pread),
            fetch_vs_rr: paired_ratio(&r.fetch_sendfile, &r.loopback_rr),
            fetch_vs_segment: (!r.loopback_rr_segment.runs.is_empty()).then(|| paired_ratio(&r.fetch_sendfile, &r.loopback_rr_segment)),
            pread_vs_loopback: paired_ratio(&r.fetch_pread, &r.loopback_stream),
        }
    }

    fn print(&self, opts: &SuiteOpts, r: &Results) {
        println!();
        println!("MB = 10^6 bytes. median and best of the runs ({} rounds; produce: {} runs).", opts.rounds, opts.produce_reps);
        println!("{:<46} {:>11} {:>10} {:>12} {:>22}", "scenario", "median MB/s", "best MB/s", "records/s", "server CPU s/GB usr+sys");
        let produce = format!("produce {}x{} (conns x partitions), acks=1", opts.produce_connections, opts.produce_partitions);
        let rows: [(&str, &Series, bool); 7] = [
            (&produce, &r.produce, true),
            ("produce fill 1x1 (single run)", &r.fill, true),
            ("fetch sendfile", &r.fetch_sendfile, false),
            ("fetch pread", &r.fetch_pread, false),
            ("loopback stream (TCP limit)", &r.loopback_stream, false),
            ("loopback 1 request in flight", &r.loopback_rr, false),
            ("loopback 1 in flight, sendfile of segment", &r.loopback_rr_segment, false),
        ];
        for (name, series, records) in rows {
            if series.runs.is_empty() {
                continue;
            }
            let records = if records { format!("{:.0}", series.median_records_per_sec()) } else { "-".into() };
            let cpu = series.median_server_cpu_per_gb().map_or("-".into(), |(u, s)| format!("{u:.2}+{s:.2}"));
            println!("{name:<46} {:>11.1} {:>10.1} {records:>12} {cpu:>22}", series.median_mbps(), series.best_mbps());
        }
        println!(
            "fetch counts response bytes on the wire; whole batches only: sendfile {:.1} MB/s, pread {:.1} MB/s \
             (each {} B fetch ends in part of a batch that the next fetch sends again)",
            r.fetch_sendfile.median_useful_mbps(),
            r.fetch_pread.median_useful_mbps(),
            opts.fetch_bytes
        );
        println!(
            "fetch reader receive buffer: SO_RCVBUF {} requested, {} granted",
            if opts.socket.rcvbuf == 0 { "not set (autotuning)".to_string() } else { opts.socket.rcvbuf.to_string() },
            r.rcvbuf_granted
        );
        println!();
        println!("ratios (median over the rounds of the ratio within each round):");
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        println!(
            "  fetch(sendfile) / loopback(stream)   {:>5.2}   target >= {:.2}: {}",
            self.fetch_vs_loopback,
            TARGET_FETCH_VS_LOOPBACK,
            verdict(self.fetch_vs_loopback >= TARGET_FETCH_VS_LOOPBACK)
        );
        println!(
            "  fetch(sendfile) / fetch(pread)       {:>5.2}   target >= {:.2} (clearly ahead): {}",
            self.fetch_vs_pread,
            TARGET_SENDFILE_VS_PREAD,
            verdict(self.fetch_vs_pread >= TARGET_SENDFILE_VS_PREAD)
        );
        println!("  fetch(pread) / loopback(stream)      {:>5.2}", self.pread_vs_loopback);
        println!("  fetch(sendfile) / loopback(1 in flight)            {:>5.2}", self.fetch_vs_rr);
        if let Some(ratio) = self.fetch_vs_segment {
            println!("  fetch(sendfile) / loopback(1 in flight, sendfile)  {ratio:>5.2}   (corral vs a bare sendfile loop)");
        }
        println!("load average (1 min) at start {:.2}, at end {:.2}", r.load_at_start, load_average());
    }

    fn json(&self, opts: &SuiteOpts, r: &Results) -> serde_json::Value {
        let m = machine();
        json!({
            "machine": m.to_json(),
            "summary": "median and best of the runs; ratios are medians over rounds of the ratio within each round",
            "params": {
                "server": opts.server,
                "server_args": opts.server_args,
                "record_size": opts.record_size,
                "batch_records": opts.batch_records,
                "produce_partitions": opts.produce_partitions,
                "produce_connections": opts.produce_connections,
                "produce_in_flight": opts.produce_in_flight,
                "acks": 1,
                "fetch_bytes": opts.fetch_bytes,
                "data_bytes": opts.data_bytes,
                "rounds": opts.rounds,
                "produce_repetitions": opts.produce_reps,
                "warmup_seconds": opts.warmup.as_secs_f64(),
                "duration_seconds": opts.duration.as_secs_f64(),
                "rcvbuf_requested": opts.socket.rcvbuf,
                "rcvbuf_granted": r.rcvbuf_granted,
            },
            "results": {
                "produce": r.produce.to_json(),
                "produce_fill": r.fill.to_json(),
                "fetch_sendfile": r.fetch_sendfile.to_json(),
                "fetch_pread": r.fetch_pread.to_json(),
                "loopback_stream": r.loopback_stream.to_json(),
                "loopback_rr": r.loopback_rr.to_json(),
                "loopback_rr_sendfile_segment": r.loopback_rr_segment.to_json(),
            },
            "load_average_1min": { "start": r.load_at_start, "end": load_average() },
            "ratios": {
                "fetch_sendfile_vs_loopback": self.fetch_vs_loopback,
                "fetch_sendfile_vs_fetch_pread": self.fetch_vs_pread,
                "fetch_sendfile_vs_loopback_rr": self.fetch_vs_rr,
                "fetch_sendfile_vs_loopback_rr_sendfile_segment": self.fetch_vs_segment,
                "fetch_pread_vs_loopback": self.pread_vs_loopback,
            },
            "targets": {
                "fetch_vs_loopback_min": TARGET_FETCH_VS_LOOPBACK,
                "fetch_vs_loopback_met": self.fetch_vs_loopback >= TARGET_FETCH_VS_LOOPBACK,
                "sendfile_vs_pread_min": TARGET_SENDFILE_VS_PREAD,
                "sendfile_vs_pread_met": self.fetch_vs_pread >= TARGET_SENDFILE_VS_PREAD,
            },
        })
    }
}

/// The 1-minute load average: other tenants of a small machine show up here, and a run made
/// under load is worth repeating.
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(f64::NAN)
}

/// The largest segment file of a corral partition directory (`<topic>-<partition>/*.log`).
fn largest_segment(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .max()
        .map(|(_, path)| path)
}

/// Removed when dropped (on success and on error) unless the data should be kept.
pub(crate) struct WorkDir {
    pub(crate) path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub(crate) fn create(parent: &Path, keep: bool) -> Result<WorkDir> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos();
        let path = parent.join(format!("corral-bench-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        if !keep {
            crate::server::register_dir(&path);
        }
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
            crate::server::unregister_dir(&self.path);
        }
    }
}

pub(crate) struct Machine {
    pub(crate) nproc: usize,
    pub(crate) kernel: String,
    pub(crate) cpu: String,
    pub(crate) mem_kb: u64,
}

impl Machine {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({ "nproc": self.nproc, "kernel": self.kernel, "cpu": self.cpu, "mem_total_kb": self.mem_kb })
    }
}

pub(crate) fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let meminfo = read("/proc/meminfo");
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default(),
        mem_kb: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}
