//! Produce scenario: `connections` producer connections append pre-encoded record batches to a
//! topic's partitions, each connection keeping up to `in_flight` requests outstanding (like a
//! producer's max.in.flight.requests.per.connection), one batch per request.
//!
//! Every request carries the same batch, encoded once: the client's cost per request is one
//! write of ready bytes, so the number reflects what the server takes to receive, validate
//! (CRC-32C), append and acknowledge a batch.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::future::try_join_all;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;

use crate::kafka::{self, error_name, KafkaConn, PartitionInfo, PreparedRequest};
use crate::secure::Security;
use crate::stats::{cpu_probe, Measurement, Window};
use crate::wire::SocketOpts;

/// Produce v12 is the newest version that names topics (v13 uses topic ids).
const PREFERRED_VERSION: i16 = 12;
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct ProduceOpts {
    pub(crate) topic: String,
    pub(crate) connections: usize,
    /// Value bytes per record (records have no key and no headers).
    pub(crate) record_size: usize,
    pub(crate) batch_records: usize,
    pub(crate) in_flight: usize,
    pub(crate) acks: i16,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    /// Instead of running for `duration`, append this many bytes of batches and stop (used to
    /// fill a partition for the fetch scenario); no warm-up then.
    pub(crate) total_bytes: Option<u64>,
    pub(crate) socket: SocketOpts,
    /// The server's pid, when it runs on this machine: its CPU time is measured too.
    pub(crate) server_pid: Option<u32>,
    /// TLS and SASL of every connection (plain TCP by default).
    pub(crate) security: Security,
}

/// State shared by the connections of one run (they all run on one task).
struct Shared {
    window: RefCell<Window>,
    /// Batches still to send in `total_bytes` mode.
    budget: Cell<Option<u64>>,
    stop: Cell<bool>,
    batch_len: u64,
    batch_records: u64,
}

impl Shared {
    /// Takes one batch from the budget; false when the run should send no more.
    fn claim(&self) -> bool {
        if self.stop.get() {
            return false;
        }
        match self.budget.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                self.budget.set(Some(n - 1));
                true
            }
        }
    }
}

pub(crate) async fn run(bootstrap: SocketAddr, opts: &ProduceOpts) -> Result<Measurement> {
    if opts.acks == 0 {
        bail!("acks=0 has no responses to time; use 1 or -1");
    }
    let mut admin = KafkaConn::connect_with(bootstrap, opts.socket, &opts.security).await?;
    let partitions = kafka::partitions(&mut admin, bootstrap, &opts.topic).await?;
    drop(admin);
    if partitions.is_empty() {
        bail!("topic {} has no partitions", opts.topic);
    }
    let batch = kafka::record_batch(opts.batch_records, opts.record_size)?;
    let connections = opts.connections.max(1);

    let (warmup, duration) = match opts.total_bytes {
        Some(_) => (Duration::ZERO, Duration::MAX),
        None => (opts.warmup, opts.duration),
    };
    let shared = Shared {
        window: RefCell::new(Window::new(warmup, duration).with_cpu_probe(cpu_probe(opts.server_pid))),
        budget: Cell::new(opts.total_bytes.map(|b| b.div_ceil(batch.len() as u64))),
        stop: Cell::new(false),
        batch_len: batch.len() as u64,
        batch_records: opts.batch_records as u64,
    };

    // Connection i produces to partitions i, i + C, i + 2C, ... (or shares partition i mod P
    // when there are more connections than partitions).
    let mut producers = Vec::with_capacity(connections);
    for i in 0..connections {
        let mine: Vec<&PartitionInfo> = if connections <= partitions.len() {
            partitions.iter().skip(i).step_by(connections).collect()
        } else {
            vec![&partitions[i % partitions.len()]]
        };
        let mut conn = KafkaConn::connect_with(mine[0].leader, opts.socket, &opts.security).await?;
        let version = conn.version::<ProduceRequest>(PREFERRED_VERSION)?;
        let requests = mine
            .iter()
            .map(|p| {
                let request = ProduceRequest::default().with_acks(opts.acks).with_timeout_ms(30_000).with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(kafka::topic_name(&opts.topic))
                        .with_partition_data(vec![PartitionProduceData::default().with_index(p.index).with_records(Some(batch.clone()))]),
                ]);
                conn.prepare(version, &request)
            })
            .collect::<Result<Vec<_>>>()?;
        producers.push((conn, requests));
    }
    try_join_all(producers.into_iter().map(|(conn, requests)| produce_on(conn, requests, opts, &shared))).await?;
    Ok(shared.window.into_inner().finish())
}

/// One connection's loop: keep the window of requests full, count each acknowledgement.
async fn produce_on(mut conn: KafkaConn, mut requests: Vec<PreparedRequest>, opts: &ProduceOpts, shared: &Shared) -> Result<()> {
    let mut next = 0;
    loop {
        while conn.in_flight() < opts.in_flight.max(1) && shared.claim() {
            conn.send_prepared(&mut requests[next]).await?;
            next = (next + 1) % requests.len();
        }
        if conn.in_flight() == 0 {
            return Ok(());
        }
        let response = tokio::time::timeout(RESPONSE_TIMEOUT, conn.recv::<ProduceRequest>()).await.context("no Produce response")??;
        for t in &response.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    let message = p.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
                    bail!("producing to {}-{}: {} {message}", opts.topic, p.index, error_name(p.error_code));
                }
            }
        }
        if !shared.window.borrow_mut().tick(shared.batch_len, shared.batch_len, shared.batch_records) {
            shared.stop.set(true);
        }
    }
}
