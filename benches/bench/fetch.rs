//! Fetch scenario: one consumer connection reads one partition from its start in fixed-size
//! fetches (partition_max_bytes = max_bytes), one request in flight, as a Kafka consumer does
//! against one broker. At the end of the log it starts over at the log start, so a run lasts as
//! long as asked whatever the partition's size.
//!
//! Responses are read whole into a reused buffer by the same [`crate::wire::FrameReader`] the
//! loopback reader uses; only the response fields and batch headers needed for the next offset
//! are looked at. Records are never decoded.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;

use crate::kafka::{self, error_name, KafkaConn, PartitionSkim};
use crate::secure::Security;
use crate::stats::{cpu_probe, Measurement, Window};
use crate::wire::SocketOpts;

/// Fetch v12 is the newest version that names topics (v13+ use topic ids).
pub(crate) const PREFERRED_VERSION: i16 = 12;
/// A server that stops answering fails the run instead of hanging it.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct FetchOpts {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// Both max_bytes and partition_max_bytes.
    pub(crate) fetch_bytes: i32,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    /// Stop after reading the partition once (used to pull it into the page cache).
    pub(crate) one_pass: bool,
    pub(crate) socket: SocketOpts,
    /// The server's pid, when it runs on this machine: its CPU time is measured too.
    pub(crate) server_pid: Option<u32>,
    /// TLS and SASL of the connection (plain TCP by default).
    pub(crate) security: Security,
}

/// Reads the partition for the configured time and returns what was measured.
pub(crate) async fn run(bootstrap: SocketAddr, opts: &FetchOpts) -> Result<Measurement> {
    let mut conn = KafkaConn::connect_with(bootstrap, opts.socket, &opts.security).await?;
    let leader = kafka::partitions(&mut conn, bootstrap, &opts.topic)
        .await?
        .into_iter()
        .find(|p| p.index == opts.partition)
        .with_context(|| format!("topic {} has no partition {}", opts.topic, opts.partition))?
        .leader;
    if leader != bootstrap {
        conn = KafkaConn::connect_with(leader, opts.socket, &opts.security).await?;
    }
    let version = conn.version::<FetchRequest>(PREFERRED_VERSION)?;

    let window = if opts.one_pass { Window::new(Duration::ZERO, Duration::MAX) } else { Window::new(opts.warmup, opts.duration) };
    let mut window = window.with_cpu_probe(cpu_probe(opts.server_pid));
    let mut partitions: Vec<PartitionSkim> = Vec::with_capacity(1);
    let mut offset = 0i64;
    loop {
        conn.send(version, &request(opts, offset)).await?;
        let response = tokio::time::timeout(RESPONSE_TIMEOUT, conn.recv_raw()).await.context("no Fetch response")??;
        let error = kafka::skim_fetch(response.body, response.version, &mut partitions)?;
        if error != 0 {
            bail!("Fetch failed: {}", error_name(error));
        }
        let p = match partitions.as_slice() {
            [p] if p.partition == opts.partition => p,
            _ => bail!("Fetch response does not hold exactly partition {}", opts.partition),
        };
        if p.error_code != 0 {
            bail!("fetching {}-{} at offset {offset}: {}", opts.topic, opts.partition, error_name(p.error_code));
        }
        if p.high_watermark <= p.log_start_offset.max(0) {
            bail!("partition {}-{} is empty; produce to it first", opts.topic, opts.partition);
        }
        let span = kafka::whole_batches(&response.body[p.records.clone()])?;
        match span.next_offset {
            Some(next) => offset = next,
            // KIP-74: a fetch always returns at least one whole batch when there is data.
            None if offset < p.high_watermark => {
                bail!("no whole batch in a fetch at offset {offset} (high watermark {})", p.high_watermark)
            }
            None => {}
        }
        let more = window.tick(response.wire_len as u64, span.bytes as u64, span.records);
        if offset >= p.high_watermark {
            if opts.one_pass {
                break;
            }
            offset = p.log_start_offset.max(0);
        }
        if !more {
            break;
        }
    }
    Ok(window.finish())
}

fn request(opts: &FetchOpts, offset: i64) -> FetchRequest {
    fetch_request(&opts.topic, opts.partition, offset, opts.fetch_bytes, 500)
}

/// A full fetch (no session) of one partition, as a consumer sends it.
pub(crate) fn fetch_request(topic: &str, partition: i32, offset: i64, max_bytes: i32, max_wait_ms: i32) -> FetchRequest {
    let partition = FetchPartition::default().with_partition(partition).with_fetch_offset(offset).with_partition_max_bytes(max_bytes);
    let topic = FetchTopic::default().with_topic(kafka::topic_name(topic)).with_partitions(vec![partition]);
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        // No fetch session (KIP-227): every request is a full fetch, as session_epoch -1 says.
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![topic])
}
