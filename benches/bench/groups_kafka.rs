//! The consumer-group scenarios against Apache Kafka (`groups suite --kafka-libs`): one KRaft
//! broker, started fresh for each half as corral is, with its group settings made the suite's.
//!
//! The connections differ from corral's run, because of how Kafka serves a connection: it reads a
//! connection's next request only once it has answered the previous one. A parked JoinGroup or
//! SyncGroup would hold back every member behind it on a shared connection, so each simulated
//! member parks on a connection of its own (as a real client does); and the requests answered at
//! once (heartbeats, commits) are spread over at least 64 connections, with as many in flight in
//! all as corral gets on its few. A scenario Kafka fails is a result: it is recorded with its
//! error and the suite goes on with the next.

use std::path::Path;

use anyhow::Result;

use crate::groups_suite::{load_phase, print_report, rebalance_phase, GroupsOpts, Results};
use crate::kafka::{self, KafkaConn};
use crate::server::ManagedServer;
use crate::wire::SocketOpts;

/// Kafka's heap: the 2 GiB that issue-sized runs give corral's whole process.
const HEAP: &str = "-Xmx2g";
/// Connections at least for requests answered at once (Kafka serves one at a time on each).
const PARALLEL_CONNECTIONS: usize = 64;

/// Runs the halves `opts` asks for against Kafka and prints their report; the options as they
/// were used, and the results.
pub(crate) fn run(
    opts: &GroupsOpts,
    libs: &Path,
    work: &Path,
    runtime: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
) -> Result<(GroupsOpts, Results)> {
    let spread = |connections: usize| connections.max(PARALLEL_CONNECTIONS);
    let opts = GroupsOpts {
        per_parking_lane: 1,
        fast_lanes: spread(opts.fast_lanes),
        storm_connections: spread(opts.storm_connections),
        storm_depth: (opts.storm_depth * opts.storm_connections).div_ceil(spread(opts.storm_connections)),
        commit_connections: spread(opts.commit_connections),
        // A connection per member of a wave: keep the waves within the open-file limit.
        groups_per_wave: opts.groups_per_wave.min(1000),
        ..opts.clone()
    };
    println!();
    println!("Apache Kafka ({}/*, one KRaft broker, java {HEAP}), the same scenarios:", libs.display());
    for (key, value) in properties(&opts) {
        println!("  {key}={value}");
    }
    let mut results = Results::keep_going(0);
    results.note_load("kafka start");
    for (half, on) in [("rebalance", opts.rebalance), ("load", opts.load)] {
        if !on {
            continue;
        }
        let dir = work.join(format!("kafka-{half}"));
        let server = ManagedServer::start_kafka_with(libs, &dir, &work.join(format!("kafka-{half}.log")), &properties(&opts), HEAP)?;
        let (addr, pid) = (server.kafka, server.pid());
        let outcome = local.block_on(runtime, async {
            // Kafka creates __consumer_offsets at the first FindCoordinator.
            let mut admin = KafkaConn::connect(addr, SocketOpts { rcvbuf: 0 }).await?;
            kafka::wait_for_coordinator(&mut admin, &crate::cluster::probe_groups(50)).await?;
            match half {
                "rebalance" => rebalance_phase(&opts, addr, pid, &mut results).await,
                _ => load_phase(&opts, addr, pid, &mut results).await,
            }
        });
        results.settle(&format!("kafka, {half} scenarios"), outcome)?;
        server.stop()?;
        results.note_load(&format!("kafka after {half}"));
    }
    print_report(&opts, &results);
    Ok((opts, results))
}

/// Kafka's broker settings for the suite's group settings (corral's `[groups]` keys, as
/// [`GroupsOpts::config_toml`] writes them), with the bounds around each value widened to admit it.
fn properties(opts: &GroupsOpts) -> Vec<(&'static str, String)> {
    let heartbeat = opts.consumer_heartbeat_interval_ms.to_string();
    let session = opts.consumer_session_timeout_ms.to_string();
    let assignment = opts.consumer_assignment_interval_ms.to_string();
    vec![
        ("group.initial.rebalance.delay.ms", opts.initial_delay_ms.to_string()),
        ("group.consumer.heartbeat.interval.ms", heartbeat.clone()),
        ("group.consumer.min.heartbeat.interval.ms", heartbeat),
        ("group.consumer.session.timeout.ms", session.clone()),
        ("group.consumer.min.session.timeout.ms", session),
        ("group.consumer.assignment.interval.ms", assignment.clone()),
        ("group.consumer.min.assignment.interval.ms", assignment),
        // 200 by default; the suite's groups are larger.
        ("group.consumer.max.size", (opts.members + 10).max(200).to_string()),
        ("group.max.session.timeout.ms", opts.idle_session_timeout_ms.max(opts.session_timeout_ms).max(1_800_000).to_string()),
    ]
}
