//! End-to-end latency at a fixed produce rate: one producer connection appends one-record
//! batches to a fresh single-partition topic at `rate` per second (acks=1), while one consumer
//! connection long-polls that partition (max_wait 500 ms, min_bytes 1). The latency of record
//! `i` is from just before its Produce request is written to when the consumer's fetch returns
//! it. The topic is fresh, so record `i` has offset `i`; nothing inside the records is read.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest};
use serde_json::{json, Value};

use crate::fetch::fetch_request;
use crate::kafka::{self, error_name, KafkaConn, PartitionSkim};
use crate::stats::percentile;
use crate::wire::SocketOpts;

const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct LatencyOpts {
    /// A topic with one partition, created empty for this run.
    pub(crate) topic: String,
    pub(crate) rate: u32,
    pub(crate) record_size: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct LatencyRun {
    /// Latencies of the records produced after the warm-up, in microseconds.
    pub(crate) micros: Vec<u64>,
    /// Records produced per second, as achieved.
    pub(crate) achieved_rate: f64,
}

impl LatencyRun {
    pub(crate) fn ms(&self, q: f64) -> f64 {
        let mut sorted = self.micros.clone();
        sorted.sort_unstable();
        percentile(&sorted, q) as f64 / 1000.0
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "records": self.micros.len(),
            "achieved_rate": self.achieved_rate,
            "p50_ms": self.ms(0.5),
            "p99_ms": self.ms(0.99),
            "max_ms": self.ms(1.0),
        })
    }
}

pub(crate) async fn run(bootstrap: SocketAddr, opts: &LatencyOpts) -> Result<LatencyRun> {
    let mut admin = KafkaConn::connect(bootstrap, SocketOpts { rcvbuf: 0 }).await?;
    let leader = kafka::partitions(&mut admin, bootstrap, &opts.topic)
        .await?
        .into_iter()
        .find(|p| p.index == 0)
        .with_context(|| format!("topic {} has no partition 0", opts.topic))?
        .leader;
    drop(admin);
    let sent: RefCell<Vec<Instant>> = RefCell::new(Vec::new());
    let total = opts.warmup + opts.duration;
    let (produced, seen) = tokio::try_join!(produce(leader, opts, total, &sent), consume(leader, opts, total, &sent))?;
    let warm = sent.borrow().iter().take_while(|&&at| at < sent.borrow()[0] + opts.warmup).count();
    let micros: Vec<u64> = seen.into_iter().skip(warm).collect();
    if micros.is_empty() {
        bail!("no record was consumed after the warm-up");
    }
    Ok(LatencyRun { micros, achieved_rate: produced as f64 / total.as_secs_f64() })
}

/// Sends one record every 1/rate s; each Produce is answered before the next is sent (the
/// interval leaves far more time than a round trip needs).
async fn produce(leader: SocketAddr, opts: &LatencyOpts, total: Duration, sent: &RefCell<Vec<Instant>>) -> Result<u64> {
    let mut conn = KafkaConn::connect(leader, SocketOpts { rcvbuf: 0 }).await?;
    let version = conn.version::<ProduceRequest>(12)?;
    let batch = kafka::record_batch(1, opts.record_size)?;
    let request = ProduceRequest::default().with_acks(1).with_timeout_ms(30_000).with_topic_data(vec![TopicProduceData::default()
        .with_name(kafka::topic_name(&opts.topic))
        .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))])]);
    let mut prepared = conn.prepare(version, &request)?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(opts.rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut count = 0;
    while started.elapsed() < total {
        tick.tick().await;
        sent.borrow_mut().push(Instant::now());
        conn.send_prepared(&mut prepared).await?;
        let response = tokio::time::timeout(RESPONSE_TIMEOUT, conn.recv::<ProduceRequest>()).await.context("no Produce response")??;
        for p in response.responses.iter().flat_map(|t| &t.partition_responses) {
            if p.error_code != 0 {
                bail!("producing to {}: {}", opts.topic, error_name(p.error_code));
            }
        }
        count += 1;
    }
    Ok(count)
}

/// Long-polls from offset 0 until every record produced in `total` has been seen; returns the
/// latency of each record in offset order, in microseconds.
async fn consume(leader: SocketAddr, opts: &LatencyOpts, total: Duration, sent: &RefCell<Vec<Instant>>) -> Result<Vec<u64>> {
    let mut conn = KafkaConn::connect(leader, SocketOpts { rcvbuf: 0 }).await?;
    let version = conn.version::<FetchRequest>(crate::fetch::PREFERRED_VERSION)?;
    let mut skims: Vec<PartitionSkim> = Vec::with_capacity(1);
    let mut latencies = Vec::new();
    let mut offset = 0i64;
    let deadline = Instant::now() + total + RESPONSE_TIMEOUT;
    loop {
        let done = Instant::now() >= deadline - RESPONSE_TIMEOUT && offset as usize >= sent.borrow().len();
        if done {
            return Ok(latencies);
        }
        if Instant::now() >= deadline {
            bail!("records up to offset {} were never fetched", sent.borrow().len());
        }
        conn.send(version, &fetch_request(&opts.topic, 0, offset, 1 << 20, 500)).await?;
        let response = tokio::time::timeout(RESPONSE_TIMEOUT, conn.recv_raw()).await.context("no Fetch response")??;
        let now = Instant::now();
        kafka::skim_fetch(response.body, response.version, &mut skims)?;
        let Some(p) = skims.first() else { bail!("Fetch response without the partition") };
        if p.error_code != 0 {
            bail!("fetching {}: {}", opts.topic, error_name(p.error_code));
        }
        if let Some(next) = kafka::whole_batches(&response.body[p.records.clone()])?.next_offset {
            let sent = sent.borrow();
            for o in offset..next {
                let at = sent.get(o as usize).with_context(|| format!("offset {o} fetched before it was produced"))?;
                latencies.push(now.duration_since(*at).as_micros() as u64);
            }
            offset = next;
        }
    }
}
