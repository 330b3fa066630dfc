//! Many partitions on one node: topics of `--partitions` partitions (10,000) created one after
//! another up to `--topics` of them (10: 100,000 partitions), then one record written to and read
//! back from every partition, then a clean restart and a restart after kill -9.
//!
//! Reported: each CreateTopics' latency and the time until every partition is led (usable), the
//! time to write and read every partition once (corral's first write creates the partition's
//! directory and segment file), the server's open descriptors against its open-file limit and
//! its RSS after each step, and both start times. With `--kafka-libs`, Apache Kafka (one KRaft
//! broker, same limits) goes through steps 1 and 2 after corral, until it fails.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest};
use serde_json::json;

use crate::kafka::{self, error_name, topic_name, KafkaConn};
use crate::server::{open_file_limit, process_memory, ManagedServer};
use crate::suite::{machine, WorkDir};
use crate::wire::SocketOpts;

pub(crate) struct PartitionsOpts {
    pub(crate) server: PathBuf,
    pub(crate) server_args: Vec<String>,
    pub(crate) work_dir: PathBuf,
    pub(crate) keep_data: bool,
    pub(crate) json: Option<PathBuf>,
    pub(crate) topics: usize,
    pub(crate) partitions: i32,
    pub(crate) kafka_libs: Option<PathBuf>,
}

/// Steps 1 and 2 on one server; stops at the first failure and says which step failed.
#[derive(Debug, Default)]
struct Fill {
    /// CreateTopics answered, then every partition led, per topic created.
    creates: Vec<(Duration, Duration)>,
    written: Option<Duration>,
    read: Option<Duration>,
    failure: Option<String>,
}

impl Fill {
    fn partitions(&self, per_topic: i32) -> u64 {
        self.creates.len() as u64 * per_topic as u64
    }
}

async fn fill(server: &ManagedServer, names: &[String], partitions: i32) -> Fill {
    let mut out = Fill::default();
    let steps = async {
        let mut conn = KafkaConn::connect(server.kafka, SocketOpts { rcvbuf: 0 }).await?;
        for name in names {
            let started = Instant::now();
            kafka::send_create_topic(&mut conn, name, partitions, &[]).await?;
            let answered = started.elapsed();
            kafka::wait_partitions_led(&mut conn, name, partitions, kafka::READY_TIMEOUT).await?;
            out.creates.push((answered, started.elapsed()));
            println!(
                "  CreateTopics {name} ({partitions} partitions): answered in {:.0} ms, every partition led after {:.0} ms",
                answered.as_secs_f64() * 1e3,
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        let started = Instant::now();
        for name in names {
            produce_one_each(&mut conn, name, partitions).await?;
        }
        out.written = Some(started.elapsed());
        let started = Instant::now();
        for name in names {
            fetch_one_each(&mut conn, name, partitions).await?;
        }
        out.read = Some(started.elapsed());
        anyhow::Ok(())
    };
    if let Err(e) = steps.await {
        out.failure = Some(format!("{e:#}"));
    }
    out
}

/// What the server holds after a step.
struct Footprint {
    descriptors: usize,
    rss_mb: f64,
}

fn footprint(server: &ManagedServer) -> Footprint {
    let pid = server.pid().unwrap_or(0);
    let descriptors = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let rss_mb = process_memory(pid).map_or(0.0, |m| m.rss_kb as f64 / 1024.0);
    Footprint { descriptors, rss_mb }
}

pub(crate) fn run(opts: &PartitionsOpts) -> Result<()> {
    crate::server::cleanup_on_signal()?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let work = WorkDir::create(&opts.work_dir, opts.keep_data)?;
    let config = work.path.join("corral.toml");
    std::fs::write(&config, "# Defaults, with room for the topics.\n[topics]\nmax_partitions_per_node = 1000000\n")?;
    let data = work.path.join("data");
    let log = work.path.join("corral.log");
    let limit = open_file_limit();
    let total = opts.topics as u64 * opts.partitions as u64;
    let m = machine();
    println!("corral-bench partitions: {} CPUs, Linux {}, {}", m.nproc, m.kernel, m.cpu);
    println!(
        "{} topics of {} partitions ({total} in all) on one node; open-file limit {limit}; data in {}",
        opts.topics,
        opts.partitions,
        work.path.display()
    );

    let mut server = ManagedServer::start(&opts.server, &data, &config, &log, &opts.server_args)?;
    let idle = footprint(&server);
    let names: Vec<String> = (0..opts.topics).map(|t| format!("many-{t}")).collect();
    println!("corral:");
    let corral = runtime.block_on(fill(&server, &names, opts.partitions));
    if let Some(failure) = &corral.failure {
        bail!("corral: {failure}");
    }
    let (written, read) = (corral.written.unwrap_or_default(), corral.read.unwrap_or_default());
    let creates: Vec<Duration> = corral.creates.iter().map(|c| c.0).collect();
    let created = footprint(&server);
    println!(
        "  one record written to every partition: {:.2} s ({:.0} µs per partition); read back: {:.2} s",
        written.as_secs_f64(),
        written.as_secs_f64() * 1e6 / total as f64,
        read.as_secs_f64()
    );

    let stopping = Instant::now();
    server.stop()?;
    let stopped = stopping.elapsed();
    let starting = Instant::now();
    server = ManagedServer::start(&opts.server, &data, &config, &log, &opts.server_args)?;
    let clean_start = starting.elapsed();
    let after_clean = footprint(&server);
    // kill -9: every active segment is scanned at the next start.
    drop(server);
    let starting = Instant::now();
    let server = ManagedServer::start(&opts.server, &data, &config, &log, &opts.server_args)?;
    let crash_start = starting.elapsed();
    runtime.block_on(async {
        let mut conn = KafkaConn::connect(server.kafka, SocketOpts { rcvbuf: 0 }).await?;
        for name in &names {
            fetch_one_each(&mut conn, name, opts.partitions).await?;
        }
        anyhow::Ok(())
    })?;
    let after_crash = footprint(&server);
    server.stop()?;

    let kafka = match &opts.kafka_libs {
        Some(libs) => {
            println!("kafka (one KRaft broker, java -cp {}/*):", libs.display());
            let kafka = ManagedServer::start_kafka(libs, &work.path.join("kafka"), &work.path.join("kafka.log"), 3000)?;
            let kafka_idle = footprint(&kafka);
            let outcome = runtime.block_on(fill(&kafka, &names, opts.partitions));
            let kafka_filled = footprint(&kafka);
            let alive = kafka.pid().is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
            if let Some(failure) = &outcome.failure {
                println!("  failed after {} partitions: {failure}", outcome.partitions(opts.partitions));
            }
            let _ = kafka.stop();
            Some((outcome, kafka_idle, kafka_filled, alive, tail(&work.path.join("kafka.log"))))
        }
        None => None,
    };

    if let Some((k, idle, filled, alive, log)) = &kafka {
        println!();
        println!("Apache Kafka, the same steps:");
        for (i, (answered, led)) in k.creates.iter().enumerate() {
            println!("| CreateTopics many-{i}: answered / every partition led | {:.0} / {:.0} ms |", ms(*answered), ms(*led));
        }
        if let (Some(w), Some(r)) = (k.written, k.read) {
            println!("| write one record to each / read back | {:.2} / {:.2} s |", w.as_secs_f64(), r.as_secs_f64());
        }
        println!("| descriptors idle / at the end | {} / {} (limit {limit}) |", idle.descriptors, filled.descriptors);
        println!("| RSS idle / at the end | {:.0} / {:.0} MB |", idle.rss_mb, filled.rss_mb);
        if let Some(failure) = &k.failure {
            println!(
                "| failed | after {} partitions; process {}: {failure} |",
                k.partitions(opts.partitions),
                if *alive { "alive" } else { "gone" }
            );
            println!("kafka.log, last lines:\n{log}");
        }
    }
    let mut sorted = creates.clone();
    sorted.sort();
    println!();
    println!("| step | result |");
    println!("|---|---|");
    println!(
        "| CreateTopics, {} partitions (median / max of {}) | {:.0} / {:.0} ms |",
        opts.partitions,
        creates.len(),
        ms(sorted[sorted.len() / 2]),
        ms(sorted[sorted.len() - 1])
    );
    println!("| write one record to each of {total} partitions | {:.2} s |", written.as_secs_f64());
    println!("| read every partition back | {:.2} s |", read.as_secs_f64());
    println!("| descriptors: idle / {total} partitions written / after a clean restart / after kill -9 and reads | {} / {} / {} / {} (limit {limit}) |", idle.descriptors, created.descriptors, after_clean.descriptors, after_crash.descriptors);
    println!(
        "| RSS: idle / {total} partitions | {:.0} / {:.0} MB ({:.1} KB per partition) |",
        idle.rss_mb,
        created.rss_mb,
        (created.rss_mb - idle.rss_mb) * 1024.0 / total as f64
    );
    println!(
        "| clean stop / clean start / start after kill -9 | {:.2} / {:.2} / {:.2} s |",
        stopped.as_secs_f64(),
        clean_start.as_secs_f64(),
        crash_start.as_secs_f64()
    );
    if let Some(path) = &opts.json {
        let report = json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": m.to_json(),
            "topics": opts.topics, "partitions_per_topic": opts.partitions, "open_file_limit": limit,
            "create_topics_ms": creates.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "write_all_seconds": written.as_secs_f64(), "read_all_seconds": read.as_secs_f64(),
            "descriptors": {"idle": idle.descriptors, "written": created.descriptors, "clean_restart": after_clean.descriptors, "crash_restart": after_crash.descriptors},
            "rss_mb": {"idle": idle.rss_mb, "written": created.rss_mb, "clean_restart": after_clean.rss_mb, "crash_restart": after_crash.rss_mb},
            "stop_seconds": stopped.as_secs_f64(), "clean_start_seconds": clean_start.as_secs_f64(), "crash_start_seconds": crash_start.as_secs_f64(),
            "kafka": kafka.as_ref().map(|(k, idle, filled, alive, _)| json!({
                "create_topics_ms": k.creates.iter().map(|(a, l)| json!({"answered": ms(*a), "led": ms(*l)})).collect::<Vec<_>>(),
                "write_all_seconds": k.written.map(|d| d.as_secs_f64()), "read_all_seconds": k.read.map(|d| d.as_secs_f64()),
                "descriptors": {"idle": idle.descriptors, "end": filled.descriptors}, "rss_mb": {"idle": idle.rss_mb, "end": filled.rss_mb},
                "failure": k.failure, "alive_at_the_end": alive,
            })),
        });
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    Ok(())
}

/// One Produce request carrying a one-record batch for every partition of `topic`.
async fn produce_one_each(conn: &mut KafkaConn, topic: &str, partitions: i32) -> Result<()> {
    let batch = kafka::record_batch(1, 100)?;
    let data = (0..partitions).map(|p| PartitionProduceData::default().with_index(p).with_records(Some(batch.clone()))).collect();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(60_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(data)]);
    let (_, response) = conn.call(9, &request).await?;
    for t in &response.responses {
        for p in &t.partition_responses {
            if p.error_code != 0 {
                bail!("produce to {topic}-{}: {}", p.index, error_name(p.error_code));
            }
        }
    }
    Ok(())
}

/// One Fetch request for every partition of `topic` from offset 0; each must return its record.
async fn fetch_one_each(conn: &mut KafkaConn, topic: &str, partitions: i32) -> Result<()> {
    let wanted = (0..partitions)
        .map(|p| FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(1024).with_log_start_offset(-1))
        .collect();
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(64 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(wanted)]);
    let (_, response) = conn.call(12, &request).await?;
    let mut with_records = 0;
    for t in &response.responses {
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!("fetch from {topic}-{}: {}", p.partition_index, error_name(p.error_code));
            }
            with_records += usize::from(p.records.as_ref().is_some_and(|r| !r.is_empty()));
        }
    }
    if with_records != partitions as usize {
        bail!("fetch from {topic}: {with_records} of {partitions} partitions returned their record");
    }
    Ok(())
}

/// The last lines of a log file.
fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
