//! The consumer-group benchmark in one run: starts corral itself (twice: one server for the
//! rebalance scenarios, a fresh one for the steady-state load so that its memory baseline is
//! clean), runs every scenario, prints the tables with the targets, and optionally writes JSON.
//!
//! Rebalance scenarios (server A), repeated `reps` times, each in fresh groups:
//!
//! 1. classic, 1 topic: N members start (initial rebalance delay D applies) → all synced;
//! 2. the same group: one member leaves; the others learn it from their heartbeats, and once
//!    more with every member told at once (the coordinator's part alone);
//! 6. classic and KIP-848 side by side on T topics × P partitions: start, one joins, one leaves;
//! 7. migration (`group_migration`): N classic members, 1 topic; a KIP-848 member converts the
//!    group, everyone settles, steady state before and after, then it leaves (back to classic).
//!
//! Load scenarios (server B): G groups × M members created and left idle (memory per member),
//! a heartbeat storm for all of them (heartbeats/s, per shard and per server CPU second), and
//! offset commits (many committers, then one alone for its latency).

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::MetadataRequest;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::group_classic::{register_topics, ClassicGroup, Discovery, GroupSpec, MemberConfig, RebalanceTiming, Versions};
use crate::group_consumer::{ConsumerGroup, ConsumerSpec, ConvergeTiming, Topics};
use crate::group_load::{self, describe_errors, CommitOpts, CommitRun, PacedOpts, PacedRun, SetupOpts, StormOpts, StormRun};
use crate::group_migration::{self, MigrationRun};
use crate::kafka::{self, topic_name, KafkaConn};
use crate::mux::Lanes;
use crate::server::{process_cpu_time, ManagedServer};
use crate::stats::median;
use crate::wire::SocketOpts;

/// Targets of the issue (goals to compare against; never asserted).
const TARGET_START_BEYOND_DELAY: Duration = Duration::from_secs(1);
const TARGET_HEARTBEATS_PER_CORE: f64 = 200_000.0;
const TARGET_BYTES_PER_MEMBER: f64 = 2048.0;
/// The steady-state windows of the migration scenario.
const MIGRATION_WINDOW: Duration = Duration::from_secs(4);

#[derive(Debug, Clone)]
pub(crate) struct GroupsOpts {
    pub(crate) server: PathBuf,
    pub(crate) server_args: Vec<String>,
    pub(crate) work_dir: PathBuf,
    pub(crate) keep_data: bool,
    pub(crate) json: Option<PathBuf>,
    /// Which halves to run.
    pub(crate) rebalance: bool,
    pub(crate) load: bool,
    /// Of the rebalance scenarios, only the migration (7) / only the classic group's (1, 2).
    pub(crate) migration_only: bool,
    pub(crate) classic_only: bool,
    pub(crate) reps: usize,
    pub(crate) members: usize,
    pub(crate) topics: usize,
    pub(crate) partitions_per_topic: i32,
    pub(crate) initial_delay_ms: u64,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) session_timeout_ms: i32,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) consumer_heartbeat_interval_ms: i32,
    pub(crate) consumer_session_timeout_ms: i32,
    pub(crate) consumer_assignment_interval_ms: u64,
    pub(crate) assignor: Option<String>,
    pub(crate) fast_lanes: usize,
    pub(crate) per_parking_lane: usize,
    pub(crate) join_version: i16,
    pub(crate) timeout: Duration,
    pub(crate) idle_groups: usize,
    pub(crate) idle_members_per_group: usize,
    pub(crate) idle_partitions: i32,
    pub(crate) groups_per_wave: usize,
    pub(crate) idle_session_timeout_ms: i32,
    /// The paced run: every idle member heartbeats once per this (heartbeat.interval.ms).
    pub(crate) idle_heartbeat_interval: Duration,
    pub(crate) storm_connections: usize,
    pub(crate) storm_depth: usize,
    pub(crate) load_reps: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    pub(crate) committers: usize,
    pub(crate) commit_partitions: i32,
    pub(crate) commit_connections: usize,
    /// Apache Kafka's jars: the same scenarios against Kafka too, after corral.
    pub(crate) kafka_libs: Option<PathBuf>,
}

impl GroupsOpts {
    fn member_config(&self) -> MemberConfig {
        MemberConfig {
            session_timeout_ms: self.session_timeout_ms,
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            heartbeat_interval: self.heartbeat_interval,
            protocol: "roundrobin".into(),
            versions: Versions { join: self.join_version, ..Versions::default() },
        }
    }

    fn config_toml(&self) -> String {
        format!(
            "[groups]\ninitial_rebalance_delay_ms = {}\nconsumer_heartbeat_interval_ms = {}\nconsumer_session_timeout_ms = {}\n\
             consumer_assignment_interval_ms = {}\n",
            self.initial_delay_ms,
            self.consumer_heartbeat_interval_ms,
            self.consumer_session_timeout_ms,
            self.consumer_assignment_interval_ms
        )
    }
}

/// One measured event (a start, a join or a leave) of one group.
#[derive(Debug, Clone, Default)]
struct EventRun {
    members: usize,
    generation: i32,
    total: f64,
    discovery: Option<f64>,
    join: Option<f64>,
    assign: Option<f64>,
    sync: Option<f64>,
    server_side: Option<f64>,
    first_park: Option<f64>,
    delay_served: Option<f64>,
    first_at_epoch: Option<f64>,
    requests: u64,
    assigned_partitions: Option<usize>,
    server_cpu: Option<f64>,
}

impl EventRun {
    fn classic(t: &RebalanceTiming, cpu: Option<f64>) -> EventRun {
        EventRun {
            members: t.members,
            generation: t.generation,
            total: ms(t.total),
            discovery: Some(ms(t.discovery)),
            join: Some(ms(t.join)),
            assign: Some(ms(t.leader_assign)),
            sync: Some(ms(t.sync)),
            server_side: Some(ms(t.server_side())),
            first_park: None,
            delay_served: t.delay_served.map(ms),
            first_at_epoch: None,
            requests: t.requests,
            assigned_partitions: Some(t.assigned_partitions),
            server_cpu: cpu,
        }
    }

    fn consumer(t: &ConvergeTiming, cpu: Option<f64>) -> EventRun {
        EventRun {
            members: t.members,
            generation: t.epoch,
            total: ms(t.total),
            first_at_epoch: Some(ms(t.first_at_epoch)),
            requests: t.requests,
            server_cpu: cpu,
            ..EventRun::default()
        }
    }

    fn json(&self) -> Value {
        json!({
            "members": self.members, "generation_or_epoch": self.generation, "total_ms": self.total,
            "discovery_ms": self.discovery, "join_ms": self.join, "leader_assign_ms": self.assign, "sync_ms": self.sync,
            "server_side_ms": self.server_side, "first_parked_join_ms": self.first_park, "delay_served_ms": self.delay_served,
            "first_member_at_final_epoch_ms": self.first_at_epoch, "requests": self.requests,
            "assigned_partitions": self.assigned_partitions, "server_cpu_seconds": self.server_cpu,
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The runs of one event kind.
#[derive(Debug, Clone)]
struct Row {
    key: &'static str,
    label: String,
    runs: Vec<EventRun>,
}

impl Row {
    fn med(&self, f: impl Fn(&EventRun) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(v))
    }
}

#[derive(Debug, Default)]
pub(crate) struct Results {
    /// Go on past a failed scenario, recording how it failed (for a peer: a failure is a result).
    keep_going: bool,
    failures: Vec<String>,
    rows: Vec<Row>,
    topic_creation_seconds: f64,
    /// Topics scenario 6 actually used (the open-file limit may cap them).
    topics: usize,
    setup: Option<group_load::Setup>,
    storms: Vec<StormRun>,
    paced: Option<PacedRun>,
    commits: Vec<CommitRun>,
    single: Vec<CommitRun>,
    shards: usize,
    load_at: Vec<(String, f64)>,
    migrations: Vec<MigrationRun>,
}

impl Results {
    pub(crate) fn keep_going(shards: usize) -> Results {
        Results { keep_going: true, shards, ..Results::default() }
    }

    /// A scenario's outcome: a failure is returned, or recorded when going on past failures.
    pub(crate) fn settle(&mut self, scenario: &str, outcome: Result<()>) -> Result<()> {
        match outcome {
            Err(e) if self.keep_going => {
                eprintln!("  {scenario} failed: {e:#}");
                self.failures.push(format!("{scenario}: {e:#}"));
                Ok(())
            }
            other => other.with_context(|| format!("{scenario} failed")),
        }
    }

    pub(crate) fn note_load(&mut self, when: &str) {
        self.load_at.push((when.to_string(), crate::suite::load_average()));
    }

    fn row(&mut self, key: &'static str, label: &str) -> &mut Row {
        if let Some(i) = self.rows.iter().position(|r| r.key == key) {
            return &mut self.rows[i];
        }
        self.rows.push(Row { key, label: label.to_string(), runs: Vec::new() });
        self.rows.last_mut().expect("pushed")
    }

    fn get(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }
}

pub(crate) fn run(opts: &GroupsOpts) -> Result<()> {
    crate::server::cleanup_on_signal()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let work = crate::suite::WorkDir::create(&opts.work_dir, opts.keep_data)?;
    let config = work.path.join("groups.toml");
    std::fs::write(&config, opts.config_toml())?;
    let shards = shard_count(opts);
    let mut results = Results { shards, ..Results::default() };
    print_header(
        opts,
        &format!("{} {}  ({shards} shards; data in {})", opts.server.display(), opts.server_args.join(" "), work.path.display()),
    );
    results.note_load("start");

    if opts.rebalance {
        let server = ManagedServer::start(
            &opts.server,
            &work.path.join("data-rebalance"),
            &config,
            &work.path.join("corral-rebalance.log"),
            &opts.server_args,
        )?;
        local.block_on(&runtime, rebalance_phase(opts, server.kafka, server.pid(), &mut results))?;
        server.stop()?;
        results.note_load("after rebalance scenarios");
    }
    if opts.load {
        let server = ManagedServer::start(
            &opts.server,
            &work.path.join("data-load"),
            &config,
            &work.path.join("corral-load.log"),
            &opts.server_args,
        )?;
        local.block_on(&runtime, load_phase(opts, server.kafka, server.pid(), &mut results))?;
        server.stop()?;
        results.note_load("end");
    }
    print_report(opts, &results);
    let kafka = match &opts.kafka_libs {
        Some(libs) => Some(crate::groups_kafka::run(opts, libs, &work.path, &runtime, &local)?),
        None => None,
    };
    write_json(opts, &results, kafka.as_ref())
}

/// The same scenarios against a server that is already running (configured by whoever started
/// it: see [`GroupsOpts::config_toml`] for what the suite uses). `shards` is its shard count.
pub(crate) fn run_against(opts: &GroupsOpts, addr: std::net::SocketAddr, pid: Option<u32>, shards: usize) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let mut results = Results { shards, ..Results::default() };
    print_header(opts, &format!("{addr} (running; pid {}; {shards} shards)", pid.map_or("unknown".into(), |p| p.to_string())));
    println!("  (the server's own [groups] settings apply; the suite uses:\n{})", opts.config_toml().trim_end());
    results.note_load("start");
    if opts.rebalance {
        local.block_on(&runtime, rebalance_phase(opts, addr, pid, &mut results))?;
    }
    if opts.load {
        local.block_on(&runtime, load_phase(opts, addr, pid, &mut results))?;
    }
    results.note_load("end");
    print_report(opts, &results);
    write_json(opts, &results, None)
}

/// The JSON report, with Apache Kafka's beside corral's when it ran too.
fn write_json(opts: &GroupsOpts, results: &Results, kafka: Option<&(GroupsOpts, Results)>) -> Result<()> {
    let Some(path) = &opts.json else { return Ok(()) };
    let mut report = json_report(opts, results);
    if let (Some((kafka_opts, kafka_results)), Some(object)) = (kafka, report.as_object_mut()) {
        object.insert("kafka".into(), json_report(kafka_opts, kafka_results));
    }
    std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The server's shard count: `--shards N` if passed through, else one per core (the default).
fn shard_count(opts: &GroupsOpts) -> usize {
    let args = &opts.server_args;
    let mut n = None;
    for (i, a) in args.iter().enumerate() {
        if a == "--shards" {
            n = args.get(i + 1).and_then(|v| v.parse().ok());
        } else if let Some(v) = a.strip_prefix("--shards=") {
            n = v.parse().ok();
        }
    }
    n.filter(|&n: &usize| n > 0).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Times `f` and the server CPU it took.
async fn with_cpu<T>(pid: Option<u32>, f: impl std::future::Future<Output = Result<T>>) -> Result<(T, Option<f64>)> {
    let before = pid.and_then(process_cpu_time);
    let out = f.await?;
    let after = pid.and_then(process_cpu_time);
    let cpu = before.zip(after).map(|((u0, s0), (u1, s1))| (u1 + s1).saturating_sub(u0 + s0).as_secs_f64());
    Ok((out, cpu))
}

async fn create_topics(addr: std::net::SocketAddr, topics: &[(String, i32)]) -> Result<Vec<(String, Uuid, i32)>> {
    let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
    for (name, partitions) in topics {
        kafka::create_topic(&mut admin, name, *partitions, &[]).await?;
    }
    let request = MetadataRequest::default()
        .with_topics(Some(topics.iter().map(|(n, _)| MetadataRequestTopic::default().with_name(Some(topic_name(n)))).collect()))
        .with_allow_auto_topic_creation(false);
    let (_, response) = admin.call(12, &request).await?;
    let mut out = Vec::new();
    for (name, partitions) in topics {
        let t = response.topics.iter().find(|t| t.name.as_ref().map(|n| n.as_str()) == Some(name.as_str()));
        let Some(t) = t.filter(|t| t.error_code == 0) else { bail!("topic {name} missing from Metadata") };
        if t.topic_id.is_nil() {
            bail!("topic {name} has no topic id (Metadata v10+ is needed for KIP-848)");
        }
        out.push((name.clone(), t.topic_id, *partitions));
    }
    Ok(out)
}

pub(crate) async fn rebalance_phase(opts: &GroupsOpts, addr: std::net::SocketAddr, pid: Option<u32>, results: &mut Results) -> Result<()> {
    // Scenarios 1 and 2 use the first topic; scenario 6 all of them.
    let topics = if opts.migration_only || opts.classic_only { 1 } else { opts.topics };
    results.topics = topics;
    let all: Vec<(String, i32)> = (0..topics).map(|i| (format!("bench-t{i}"), opts.partitions_per_topic)).collect();
    let created = Instant::now();
    let ids = create_topics(addr, &all).await?;
    results.topic_creation_seconds = created.elapsed().as_secs_f64();
    eprintln!(
        "  created {} topics ({} partitions) in {:.1} s",
        all.len(),
        all.iter().map(|(_, p)| *p as i64).sum::<i64>(),
        results.topic_creation_seconds
    );
    register_topics(&all);
    let lanes = Rc::new(Lanes::connect(addr, opts.fast_lanes, opts.members + 1, opts.per_parking_lane).await?);
    let scene = Scene { opts, lanes, pid, all, ids };

    for rep in 0..opts.reps {
        let tag = format!("{}/{}", rep + 1, opts.reps);
        if opts.migration_only {
            let outcome = migration(&scene, rep, results).await;
            results.settle("migration", outcome)?;
            continue;
        }
        let outcome = classic_one_topic(&scene, rep, &tag, results).await;
        results.settle("classic, one topic", outcome)?;
        if opts.classic_only {
            continue;
        }
        let outcome = classic_many_topics(&scene, rep, &tag, results).await;
        results.settle("classic, many topics", outcome)?;
        let outcome = consumer_many_topics(&scene, rep, &tag, results).await;
        results.settle("KIP-848, many topics", outcome)?;
        let outcome = migration(&scene, rep, results).await;
        results.settle("migration", outcome)?;
    }
    Ok(())
}

/// What the rebalance scenarios share: the server's topics and the members' connections.
struct Scene<'a> {
    opts: &'a GroupsOpts,
    lanes: Rc<Lanes>,
    pid: Option<u32>,
    all: Vec<(String, i32)>,
    ids: Vec<(String, Uuid, i32)>,
}

/// Scenarios 1 and 2: a classic group on the first topic starts, then one member leaves twice.
async fn classic_one_topic(scene: &Scene<'_>, rep: usize, tag: &str, results: &mut Results) -> Result<()> {
    let (opts, pid, timeout, n) = (scene.opts, scene.pid, scene.opts.timeout, scene.opts.members);
    let delay = Duration::from_millis(opts.initial_delay_ms);
    let spec = Rc::new(GroupSpec::new(format!("bench-classic-{rep}"), scene.all[..1].to_vec(), opts.member_config())?);
    let ((mut group, start), cpu) = with_cpu(pid, ClassicGroup::start(spec.clone(), scene.lanes.clone(), n, timeout)).await?;
    let mut run = EventRun::classic(&start, cpu);
    run.first_park = Some(ms(group.first_park));
    check_partitions(&start, spec.partitions())?;
    progress(&format!("classic 1x{} start {tag}", opts.partitions_per_topic), &run, Some(delay));
    results
        .row("classic_start", &format!("classic, {n} members, 1 topic x {} partitions: start", opts.partitions_per_topic))
        .runs
        .push(run);
    let (leave, cpu) = with_cpu(pid, group.leave_one(Discovery::Heartbeat, timeout)).await?;
    check_partitions(&leave, spec.partitions())?;
    let run = EventRun::classic(&leave, cpu);
    progress(&format!("classic 1x{} leave (heartbeat) {tag}", opts.partitions_per_topic), &run, None);
    results.row("classic_leave_hb", "  one leaves, others learn from heartbeats").runs.push(run);
    let (leave, cpu) = with_cpu(pid, group.leave_one(Discovery::Immediate, timeout)).await?;
    check_partitions(&leave, spec.partitions())?;
    let run = EventRun::classic(&leave, cpu);
    progress(&format!("classic 1x{} leave (told at once) {tag}", opts.partitions_per_topic), &run, None);
    results.row("classic_leave_now", "  one leaves, others told at once (coordinator only)").runs.push(run);
    group.stop(true).await
}

/// Scenario 6, classic half: a classic group on every topic starts, one joins, one leaves.
async fn classic_many_topics(scene: &Scene<'_>, rep: usize, tag: &str, results: &mut Results) -> Result<()> {
    let (opts, pid, timeout, n) = (scene.opts, scene.pid, scene.opts.timeout, scene.opts.members);
    let topics = scene.all.len();
    let delay = Duration::from_millis(opts.initial_delay_ms);
    let spec = Rc::new(GroupSpec::new(format!("bench-classic-multi-{rep}"), scene.all.clone(), opts.member_config())?);
    let ((mut group, start), cpu) = with_cpu(pid, ClassicGroup::start(spec.clone(), scene.lanes.clone(), n, timeout)).await?;
    let mut run = EventRun::classic(&start, cpu);
    run.first_park = Some(ms(group.first_park));
    check_partitions(&start, spec.partitions())?;
    progress(&format!("classic {}x{} start {tag}", topics, opts.partitions_per_topic), &run, Some(delay));
    let label = format!("classic, {n} members, {topics} topics x {} partitions: start", opts.partitions_per_topic);
    results.row("multi_classic_start", &label).runs.push(run);
    let (join, cpu) = with_cpu(pid, group.join_one(timeout)).await?;
    check_partitions(&join, spec.partitions())?;
    let run = EventRun::classic(&join, cpu);
    progress(&format!("classic {}x{} join {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_classic_join", "  one joins (others learn from heartbeats)").runs.push(run);
    let (leave, cpu) = with_cpu(pid, group.leave_one(Discovery::Heartbeat, timeout)).await?;
    check_partitions(&leave, spec.partitions())?;
    let run = EventRun::classic(&leave, cpu);
    progress(&format!("classic {}x{} leave {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_classic_leave", "  one leaves (others learn from heartbeats)").runs.push(run);
    group.stop(true).await
}

/// Scenario 6, KIP-848 half: a consumer group on every topic starts, one joins, one leaves,
/// the steady state, then a join and a leave in a group settled past the assignment interval.
async fn consumer_many_topics(scene: &Scene<'_>, rep: usize, tag: &str, results: &mut Results) -> Result<()> {
    let (opts, pid, timeout, n) = (scene.opts, scene.pid, scene.opts.timeout, scene.opts.members);
    let topics = scene.all.len();
    let spec = Rc::new(ConsumerSpec {
        group_id: format!("bench-consumer-{rep}"),
        topics: Rc::new(Topics::new(&scene.ids)),
        rebalance_timeout_ms: opts.rebalance_timeout_ms,
        assignor: opts.assignor.clone(),
        version: 1,
    });
    let ((mut group, start), cpu) = with_cpu(pid, ConsumerGroup::start(spec, scene.lanes.clone(), n, timeout)).await?;
    let run = EventRun::consumer(&start, cpu);
    progress(&format!("KIP-848 {}x{} start {tag}", topics, opts.partitions_per_topic), &run, None);
    let label = format!("KIP-848, {n} members, {topics} topics x {} partitions: start", opts.partitions_per_topic);
    results.row("multi_consumer_start", &label).runs.push(run);
    let (join, cpu) = with_cpu(pid, group.join_one(timeout)).await?;
    let run = EventRun::consumer(&join, cpu);
    progress(&format!("KIP-848 {}x{} join {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_consumer_join", "  one joins").runs.push(run);
    let (leave, cpu) = with_cpu(pid, group.leave_one(timeout)).await?;
    let run = EventRun::consumer(&leave, cpu);
    progress(&format!("KIP-848 {}x{} leave {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_consumer_leave", "  one leaves").runs.push(run);
    // Steady state: what the members heartbeating every interval cost the server.
    let (beats, cpu) = with_cpu(pid, async {
        let before = group.heartbeats();
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(group.heartbeats() - before)
    })
    .await?;
    results.row("consumer_idle", "  steady state, 2 s (heartbeats / server CPU)").runs.push(EventRun {
        members: n,
        total: 2000.0,
        requests: beats,
        server_cpu: cpu,
        ..EventRun::default()
    });
    // The join and leave above each came right after a change, so their target waited out
    // the assignment interval. A group settled for longer than the interval (2 s of steady
    // state above) has its target computed at once.
    let (join, cpu) = with_cpu(pid, group.join_one(timeout)).await?;
    let run = EventRun::consumer(&join, cpu);
    progress(&format!("KIP-848 {}x{} join, settled {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_consumer_join_settled", "  one joins a group settled past the assignment interval").runs.push(run);
    tokio::time::sleep(Duration::from_millis(opts.consumer_assignment_interval_ms + 500)).await;
    let (leave, cpu) = with_cpu(pid, group.leave_one(timeout)).await?;
    let run = EventRun::consumer(&leave, cpu);
    progress(&format!("KIP-848 {}x{} leave, settled {tag}", topics, opts.partitions_per_topic), &run, None);
    results.row("multi_consumer_leave_settled", "  one leaves a group settled past the assignment interval").runs.push(run);
    group.stop().await
}

/// Scenario 7: a classic group on the first topic migrated to KIP-848 and back.
async fn migration(scene: &Scene<'_>, rep: usize, results: &mut Results) -> Result<()> {
    let (opts, ids, pid) = (scene.opts, &scene.ids, scene.pid);
    let group_id = format!("bench-migrate-{rep}");
    let (topic, _, partitions) = &ids[0];
    let classic = Rc::new(GroupSpec::new(group_id.clone(), vec![(topic.clone(), *partitions)], opts.member_config())?);
    let consumer = Rc::new(ConsumerSpec {
        group_id,
        topics: Rc::new(Topics::new(&ids[..1])),
        rebalance_timeout_ms: opts.rebalance_timeout_ms,
        assignor: opts.assignor.clone(),
        version: 1,
    });
    let run = group_migration::run(classic, consumer, scene.lanes.clone(), opts.members, pid, MIGRATION_WINDOW, opts.timeout).await?;
    let per_beat = |s: &group_migration::Steady| fmt(s.cpu_us_per_heartbeat(), 1);
    eprintln!(
        "  migration {}/{}: {} classic members (generation {}): converted in {:.1} ms (server CPU {} s), settled at epoch {} in {:.1} ms \
         ({} requests); server CPU per heartbeat {} us classic, {} us mixed; back to classic in {:.1} ms",
        rep + 1,
        opts.reps,
        run.members,
        run.classic_generation,
        ms(run.convert),
        fmt(run.convert_cpu, 3),
        run.epoch,
        ms(run.settle),
        run.settle_requests,
        per_beat(&run.classic),
        per_beat(&run.mixed),
        ms(run.downgrade),
    );
    results.migrations.push(run);
    Ok(())
}

fn check_partitions(t: &RebalanceTiming, expected: usize) -> Result<()> {
    if t.assigned_partitions != expected {
        bail!("members hold {} partitions in generation {}, expected {expected}", t.assigned_partitions, t.generation);
    }
    Ok(())
}

fn progress(what: &str, r: &EventRun, delay: Option<Duration>) {
    let mut s = format!("  {what:<44} {:>5} members  total {:>8.1} ms", r.members, r.total);
    if let (Some(delay), Some(first), Some(served)) = (delay, r.first_park, r.delay_served) {
        let windows = (served / ms(delay)).round().max(1.0);
        s += &format!("  (delay served {served:.0} ms = {windows:.0} x D; beyond {:.1} ms)", r.total - first - windows * ms(delay));
    } else if let (Some(d), Some(srv)) = (r.discovery, r.server_side) {
        s += &format!("  discovery {d:.1} ms, server side {srv:.1} ms");
    } else if let Some(e) = r.first_at_epoch {
        s += &format!("  first at epoch {} after {e:.1} ms", r.generation);
    }
    if let Some(cpu) = r.server_cpu {
        s += &format!("  server CPU {:.3} s", cpu);
    }
    s += &format!("  {} requests", r.requests);
    eprintln!("{s}");
}

pub(crate) async fn load_phase(opts: &GroupsOpts, addr: std::net::SocketAddr, pid: Option<u32>, results: &mut Results) -> Result<()> {
    let topic = ("bench-idle".to_string(), opts.idle_partitions);
    create_topics(addr, std::slice::from_ref(&topic)).await?;
    register_topics(std::slice::from_ref(&topic));
    let member = MemberConfig {
        session_timeout_ms: opts.idle_session_timeout_ms,
        rebalance_timeout_ms: opts.rebalance_timeout_ms,
        heartbeat_interval: Duration::from_secs(1),
        ..opts.member_config()
    };
    let setup_opts = SetupOpts {
        groups: opts.idle_groups,
        members_per_group: opts.idle_members_per_group,
        topic: topic.clone(),
        groups_per_wave: opts.groups_per_wave,
        per_parking_lane: opts.per_parking_lane,
        fast_lanes: opts.fast_lanes,
        member,
        group_prefix: "bench-idle-".into(),
        timeout: opts.timeout,
    };
    eprintln!("  creating {} groups x {} members ({} per wave)", opts.idle_groups, opts.idle_members_per_group, opts.groups_per_wave);
    let setup = group_load::setup(addr, &setup_opts, pid, Duration::from_secs(3)).await?;
    if let Some((rss, anon)) = setup.bytes_per_member() {
        eprintln!("  memory per idle member: {rss:.0} B RSS ({anon:.0} B anonymous)");
    }
    let storm = StormOpts {
        connections: opts.storm_connections,
        depth: opts.storm_depth,
        warmup: opts.warmup,
        duration: opts.duration,
        version: 4,
    };
    for rep in 0..opts.load_reps {
        let run = group_load::heartbeat_storm(addr, &setup.members, &storm, pid).await?;
        eprintln!(
            "  heartbeat storm {}/{}: {:.0} heartbeats/s, {:.0} per server CPU second, client CPU {:.2} s, errors: {}",
            rep + 1,
            opts.load_reps,
            run.per_sec(),
            run.per_cpu_sec().unwrap_or(f64::NAN),
            run.client_cpu,
            describe_errors(&run.errors)
        );
        results.storms.push(run);
    }
    // Two intervals at least: every member heartbeats twice.
    let paced_opts = PacedOpts {
        connections: opts.storm_connections,
        interval: opts.idle_heartbeat_interval,
        duration: opts.duration.max(2 * opts.idle_heartbeat_interval),
        version: 4,
    };
    let paced = group_load::heartbeat_paced(addr, &setup.members, &paced_opts, pid).await?;
    eprintln!(
        "  paced heartbeats: {:.0}/s asked, {:.0}/s answered, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, errors: {}",
        paced.required_per_sec(),
        paced.per_sec(),
        paced.latency_ms(0.5),
        paced.latency_ms(0.99),
        paced.latency_ms(1.0),
        describe_errors(&paced.errors)
    );
    results.paced = Some(paced);
    let committers: Vec<_> = setup.members.iter().step_by(opts.idle_members_per_group.max(1)).take(opts.committers).cloned().collect();
    let commit = CommitOpts {
        topic: topic.0.clone(),
        partitions_per_commit: opts.commit_partitions.min(opts.idle_partitions),
        connections: opts.commit_connections,
        warmup: opts.warmup,
        duration: opts.duration,
        version: 9,
    };
    for rep in 0..opts.load_reps {
        let run = group_load::commit_storm(addr, &committers, &commit, pid).await?;
        eprintln!(
            "  commits {}/{}: {} committers, {:.0} commits/s, {:.0} offsets/s, p50 {:.2} ms, p99 {:.2} ms, errors: {}",
            rep + 1,
            opts.load_reps,
            run.committers,
            run.commits_per_sec(),
            run.offsets_per_sec(),
            run.latency_ms(0.5),
            run.latency_ms(0.99),
            describe_errors(&run.errors)
        );
        results.commits.push(run);
        let single = CommitOpts { connections: 1, ..commit.clone() };
        let run = group_load::commit_storm(addr, &committers[..1], &single, pid).await?;
        eprintln!(
            "  one committer alone {}/{}: {:.0} commits/s, p50 {:.3} ms, p99 {:.3} ms",
            rep + 1,
            opts.load_reps,
            run.commits_per_sec(),
            run.latency_ms(0.5),
            run.latency_ms(0.99)
        );
        results.single.push(run);
    }
    results.setup = Some(setup);
    Ok(())
}

fn print_header(opts: &GroupsOpts, server: &str) {
    let m = crate::suite::machine();
    println!("corral-bench groups: {} CPUs, Linux {}, {}", m.nproc, m.kernel, m.cpu);
    println!("server: {server}");
    println!(
        "server config: [groups] initial_rebalance_delay_ms = {}, consumer_heartbeat_interval_ms = {}, consumer_session_timeout_ms = {}, \
         consumer_assignment_interval_ms = {}",
        opts.initial_delay_ms, opts.consumer_heartbeat_interval_ms, opts.consumer_session_timeout_ms, opts.consumer_assignment_interval_ms
    );
    println!(
        "classic members: session {} ms, rebalance timeout {} ms, heartbeat every {} ms, protocol roundrobin (leader assigns), JoinGroup v{}; \
         {} fast lanes + parking lanes of {} members",
        opts.session_timeout_ms,
        opts.rebalance_timeout_ms,
        opts.heartbeat_interval.as_millis(),
        opts.join_version,
        opts.fast_lanes,
        opts.per_parking_lane
    );
}

fn print_migrations(opts: &GroupsOpts, runs: &[MigrationRun]) {
    let med = |f: &dyn Fn(&MigrationRun) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(v))
    };
    println!();
    println!(
        "Migration (scenario 7): {} classic members, 1 topic x {} partitions, classic heartbeats every {} ms; medians over {} runs",
        opts.members,
        opts.partitions_per_topic,
        opts.heartbeat_interval.as_millis(),
        runs.len()
    );
    println!(
        "  conversion (the KIP-848 member's first heartbeat converts the group): {} ms, server CPU {} s",
        fmt(med(&|m| Some(ms(m.convert))), 1),
        fmt(med(&|m| m.convert_cpu), 3)
    );
    println!(
        "  settled (every classic member synced the new epoch, the KIP-848 member owns the rest): {} ms, server CPU {} s, {} requests",
        fmt(med(&|m| Some(ms(m.settle))), 1),
        fmt(med(&|m| m.settle_cpu), 3),
        fmt(med(&|m| Some(m.settle_requests as f64)), 0)
    );
    let classic = med(&|m| m.classic.cpu_us_per_heartbeat());
    let mixed = med(&|m| m.mixed.cpu_us_per_heartbeat());
    println!(
        "  steady state over {} s: {} heartbeats/s classic, {} mixed; server CPU per heartbeat {} us classic, {} us mixed (mixed / classic {})",
        MIGRATION_WINDOW.as_secs(),
        fmt(med(&|m| Some(m.classic.heartbeats as f64 / m.classic.seconds)), 0),
        fmt(med(&|m| Some(m.mixed.heartbeats as f64 / m.mixed.seconds)), 0),
        fmt(classic, 1),
        fmt(mixed, 1),
        fmt(classic.zip(mixed).map(|(c, m)| m / c), 2)
    );
    println!(
        "  back to classic (the KIP-848 member leaves; the classic group rebalances): {} ms, server CPU {} s",
        fmt(med(&|m| Some(ms(m.downgrade))), 1),
        fmt(med(&|m| m.downgrade_cpu), 3)
    );
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

pub(crate) fn print_report(opts: &GroupsOpts, r: &Results) {
    let delay = opts.initial_delay_ms as f64;
    if !r.rows.is_empty() {
        println!();
        println!(
            "Rebalances: medians over {} repetitions (ms, client clock). discovery = until the last member sent its JoinGroup;",
            opts.reps
        );
        println!("server side = total - discovery - leader's assignment work; KIP-848: total = until every member owns its target at the final epoch.");
        println!(
            "{:<66} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
            "event", "total", "discovery", "join", "assign", "sync", "server", "srv CPU s", "requests", "epoch"
        );
        for row in &r.rows {
            if row.key == "consumer_idle" {
                continue;
            }
            println!(
                "{:<66} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
                row.label,
                fmt(row.med(|x| Some(x.total)), 1),
                fmt(row.med(|x| x.discovery), 1),
                fmt(row.med(|x| x.join), 1),
                fmt(row.med(|x| x.assign), 1),
                fmt(row.med(|x| x.sync), 1),
                fmt(row.med(|x| x.server_side), 1),
                fmt(row.med(|x| x.server_cpu), 3),
                fmt(row.med(|x| Some(x.requests as f64)), 0),
                fmt(row.med(|x| Some(x.generation as f64)), 0),
            );
        }
        for key in ["classic_start", "multi_classic_start"] {
            if let Some(row) = r.get(key) {
                let windows = row.med(|x| x.delay_served).map(|s| (s / delay).round().max(1.0)).unwrap_or(1.0);
                let beyond = row.med(|x| Some(x.total - x.first_park? - (x.delay_served? / delay).round().max(1.0) * delay));
                let after_timer = row.med(|x| Some(x.total - x.first_park? - x.delay_served?));
                println!(
                    "{}: first parked JoinGroup at {} ms; delay served {} ms ({windows:.0} x D, D = {delay:.0} ms: KIP-134 extends the delay once \
                     while members keep arriving); beyond the delay {} ms; after the join phase ended {} ms",
                    row.label.trim(),
                    fmt(row.med(|x| x.first_park), 1),
                    fmt(row.med(|x| x.delay_served), 1),
                    fmt(beyond, 1),
                    fmt(after_timer, 1)
                );
                if key == "classic_start" {
                    if let Some(b) = beyond {
                        println!(
                            "  target: all synced within {} ms beyond the initial delay: {}",
                            TARGET_START_BEYOND_DELAY.as_millis(),
                            verdict(b <= ms(TARGET_START_BEYOND_DELAY))
                        );
                    }
                }
            }
        }
        if let Some(row) = r.get("consumer_idle") {
            let beats = row.med(|x| Some(x.requests as f64)).unwrap_or(0.0);
            let cpu = row.med(|x| x.server_cpu);
            println!(
                "KIP-848 steady state ({} members, heartbeat interval {} ms): {:.0} heartbeats/s, server CPU {} s per second",
                opts.members,
                opts.consumer_heartbeat_interval_ms,
                beats / 2.0,
                fmt(cpu.map(|c| c / 2.0), 3)
            );
        }
    }
    if !r.migrations.is_empty() {
        print_migrations(opts, &r.migrations);
    }
    if let Some(setup) = &r.setup {
        println!();
        let n = setup.members.len();
        println!(
            "Idle members: {} groups x {} members = {n} Stable members, created in {:.1} s over {} fast + {} parking connections",
            opts.idle_groups, opts.idle_members_per_group, setup.seconds, setup.connections.0, setup.connections.1
        );
        let mem = |m: Option<crate::server::Memory>| {
            m.map_or("-".into(), |m| format!("VmRSS {} kB (anon {} kB, file {} kB)", m.rss_kb, m.anon_kb, m.file_kb))
        };
        println!("  server memory before: {}", mem(setup.baseline));
        for (i, w) in setup.waves.iter().enumerate() {
            println!("  after wave {} ({} members, {:.1} s): {}", i + 1, w.members_total, w.seconds, mem(w.memory));
        }
        println!("  settled (3 s idle):   {}", mem(setup.settled));
        if let Some((rss, anon)) = setup.bytes_per_member() {
            println!(
                "  per idle member: {rss:.0} B RSS ({anon:.0} B anonymous); target < {TARGET_BYTES_PER_MEMBER:.0} B: {}",
                verdict(rss < TARGET_BYTES_PER_MEMBER)
            );
        }
        if let Some((rss, anon)) = setup.marginal_bytes_per_member() {
            println!("  marginal, first to last wave: {rss:.0} B RSS ({anon:.0} B anonymous) per member");
        }
    }
    if !r.storms.is_empty() {
        println!();
        let per_sec = group_load::median_of(&r.storms, StormRun::per_sec);
        let per_cpu = group_load::median_of(&r.storms, |s| s.per_cpu_sec().unwrap_or(f64::NAN));
        let server_cores = group_load::median_of(&r.storms, |s| s.server_cpu.map_or(f64::NAN, |(u, sy)| (u + sy) / s.seconds));
        let client_cores = group_load::median_of(&r.storms, |s| s.client_cpu / s.seconds);
        println!(
            "Heartbeat storm: {} members, {} connections x {} in flight, Heartbeat v4, {} x {:.0} s (medians)",
            r.setup.as_ref().map_or(0, |s| s.members.len()),
            opts.storm_connections,
            opts.storm_depth,
            r.storms.len(),
            opts.duration.as_secs_f64()
        );
        // A server without shards (a peer) has no per-shard figure.
        let per_shard = (r.shards > 0).then(|| per_sec / r.shards as f64);
        let shard_part = per_shard.map_or(String::new(), |p| format!(" / {} shards = {p:.0} per shard;", r.shards));
        println!(
            "  {per_sec:.0} heartbeats/s;{shard_part} per server CPU second (user+sys) = {per_cpu:.0}; \
             server used {server_cores:.2} cores, this client {client_cores:.2}"
        );
        let shard_verdict = per_shard.map_or(String::new(), |p| format!(", {} (per shard)", verdict(p >= TARGET_HEARTBEATS_PER_CORE)));
        println!(
            "  target >= {TARGET_HEARTBEATS_PER_CORE:.0} heartbeats/s per core: {} (per CPU second){shard_verdict}",
            verdict(per_cpu >= TARGET_HEARTBEATS_PER_CORE)
        );
        for (i, s) in r.storms.iter().enumerate() {
            println!(
                "  run {}: {:.0}/s, server CPU {}, errors {}",
                i + 1,
                s.per_sec(),
                s.server_cpu.map_or("-".into(), |(u, sy)| format!("{u:.2} user + {sy:.2} sys")),
                describe_errors(&s.errors)
            );
        }
    }
    if let Some(p) = &r.paced {
        println!(
            "Paced heartbeats: each of {} members once per {:.0} ms (a client's heartbeat.interval.ms) for {:.0} s, {} connections",
            p.members,
            p.interval_seconds * 1e3,
            p.seconds,
            opts.storm_connections
        );
        println!(
            "  {:.0} heartbeats/s asked, {:.0}/s answered; latency p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; server used {:.2} cores; errors {}",
            p.required_per_sec(),
            p.per_sec(),
            p.latency_ms(0.5),
            p.latency_ms(0.99),
            p.latency_ms(1.0),
            p.server_cores().unwrap_or(f64::NAN),
            describe_errors(&p.errors)
        );
    }
    if !r.commits.is_empty() {
        println!();
        let c = &r.commits;
        println!(
            "Offset commits: {} committers (one member of each of {} groups), {} partitions per OffsetCommit v9, closed loop, {} connections",
            c[0].committers, c[0].committers, opts.commit_partitions, opts.commit_connections
        );
        println!(
            "  {:.0} commits/s, {:.0} offsets/s; latency p50 {:.2} ms, p99 {:.2} ms; per server CPU second {:.0} commits (medians of {})",
            group_load::median_of(c, CommitRun::commits_per_sec),
            group_load::median_of(c, CommitRun::offsets_per_sec),
            group_load::median_of(c, |x| x.latency_ms(0.5)),
            group_load::median_of(c, |x| x.latency_ms(0.99)),
            group_load::median_of(c, |x| x.server_cpu.map_or(f64::NAN, |(u, s)| x.commits as f64 / (u + s).max(1e-9))),
            c.len()
        );
        let s = &r.single;
        println!(
            "  one committer alone: {:.0} commits/s, latency p50 {:.3} ms, p99 {:.3} ms",
            group_load::median_of(s, CommitRun::commits_per_sec),
            group_load::median_of(s, |x| x.latency_ms(0.5)),
            group_load::median_of(s, |x| x.latency_ms(0.99))
        );
    }
    if !r.failures.is_empty() {
        println!();
        println!("Failed scenarios:");
        for failure in &r.failures {
            println!("  {failure}");
        }
    }
    println!();
    println!("load average (1 min): {}", r.load_at.iter().map(|(when, l)| format!("{when} {l:.2}")).collect::<Vec<_>>().join(", "));
}

pub(crate) fn json_report(opts: &GroupsOpts, r: &Results) -> Value {
    let m = crate::suite::machine();
    let rows: serde_json::Map<String, Value> = r
        .rows
        .iter()
        .map(|row| {
            (
                row.key.to_string(),
                json!({
                    "label": row.label.trim(),
                    "median_total_ms": row.med(|x| Some(x.total)),
                    "median_server_side_ms": row.med(|x| x.server_side),
                    "median_discovery_ms": row.med(|x| x.discovery),
                    "runs": row.runs.iter().map(EventRun::json).collect::<Vec<_>>(),
                }),
            )
        })
        .collect();
    let setup = r.setup.as_ref().map(|s| {
        let mem = |m: Option<crate::server::Memory>| m.map(|m| json!({"rss_kb": m.rss_kb, "anon_kb": m.anon_kb, "file_kb": m.file_kb}));
        json!({
            "members": s.members.len(),
            "seconds": s.seconds,
            "connections": {"fast": s.connections.0, "parking": s.connections.1},
            "baseline": mem(s.baseline),
            "waves": s.waves.iter().map(|w| json!({"members": w.members_total, "seconds": w.seconds, "memory": mem(w.memory)})).collect::<Vec<_>>(),
            "settled": mem(s.settled),
            "bytes_per_member_rss": s.bytes_per_member().map(|b| b.0),
            "bytes_per_member_anon": s.bytes_per_member().map(|b| b.1),
            "marginal_bytes_per_member_rss": s.marginal_bytes_per_member().map(|b| b.0),
        })
    });
    let storms: Vec<Value> = r
        .storms
        .iter()
        .map(|s| {
            json!({"heartbeats": s.heartbeats, "seconds": s.seconds, "per_sec": s.per_sec(), "per_server_cpu_sec": s.per_cpu_sec(),
                   "server_cpu": s.server_cpu, "client_cpu_seconds": s.client_cpu, "errors": s.errors})
        })
        .collect();
    let commits = |runs: &[CommitRun]| -> Vec<Value> { runs.iter().map(CommitRun::to_json).collect() };
    json!({
        "machine": m.to_json(),
        "shards": r.shards,
        "params": {
            "server": opts.server, "server_args": opts.server_args, "reps": opts.reps, "members": opts.members,
            "topics_requested": opts.topics, "partitions_per_topic": opts.partitions_per_topic,
            "initial_rebalance_delay_ms": opts.initial_delay_ms, "classic_heartbeat_interval_ms": opts.heartbeat_interval.as_millis() as u64,
            "session_timeout_ms": opts.session_timeout_ms, "rebalance_timeout_ms": opts.rebalance_timeout_ms,
            "consumer_heartbeat_interval_ms": opts.consumer_heartbeat_interval_ms, "consumer_session_timeout_ms": opts.consumer_session_timeout_ms,
            "consumer_assignment_interval_ms": opts.consumer_assignment_interval_ms,
            "assignor": opts.assignor, "fast_lanes": opts.fast_lanes, "members_per_parking_lane": opts.per_parking_lane,
            "join_version": opts.join_version, "idle_groups": opts.idle_groups, "idle_members_per_group": opts.idle_members_per_group,
            "idle_partitions": opts.idle_partitions, "groups_per_wave": opts.groups_per_wave, "idle_session_timeout_ms": opts.idle_session_timeout_ms,
            "storm_connections": opts.storm_connections, "storm_depth": opts.storm_depth, "load_reps": opts.load_reps,
            "warmup_seconds": opts.warmup.as_secs_f64(), "duration_seconds": opts.duration.as_secs_f64(),
            "committers": opts.committers, "commit_partitions": opts.commit_partitions, "commit_connections": opts.commit_connections,
        },
        "topic_creation_seconds": r.topic_creation_seconds,
        "topics_used": r.topics,
        "rebalances": rows,
        "migration": r.migrations.iter().map(MigrationRun::to_json).collect::<Vec<_>>(),
        "idle_members": setup,
        "heartbeat_storm": storms,
        "paced_heartbeats": r.paced.as_ref().map(|p| json!({
            "members": p.members, "interval_seconds": p.interval_seconds, "seconds": p.seconds, "heartbeats": p.heartbeats,
            "asked_per_sec": p.required_per_sec(), "answered_per_sec": p.per_sec(),
            "latency_ms": {"p50": p.latency_ms(0.5), "p99": p.latency_ms(0.99), "max": p.latency_ms(1.0)},
            "server_cores": p.server_cores(), "errors": p.errors,
        })),
        "commits": commits(&r.commits),
        "single_committer": commits(&r.single),
        "failures": r.failures,
        "load_average_1min": r.load_at,
        "targets": {
            "start_beyond_delay_ms": ms(TARGET_START_BEYOND_DELAY),
            "heartbeats_per_core": TARGET_HEARTBEATS_PER_CORE,
            "bytes_per_idle_member": TARGET_BYTES_PER_MEMBER,
        },
    })
}
