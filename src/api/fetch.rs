//! Fetch (key 1): file slices from each partition's owning shard, long-polled until `min_bytes`
//! arrive or `max_wait_ms` passes, sent with sendfile(2).
//!
//! Fetch sessions (KIP-227) are declined: every response carries session id 0, so clients send
//! full fetch requests, which Kafka clients support.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::{ApiKey, FetchRequest};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::{api_entry, ApiEntry, Handled, HandlerResult, NONE};
use crate::cluster::catalog::Topic;
use crate::protocol::fetch_response::{self, FetchPartitionReply, FetchReply, FetchTopicReply};
use crate::protocol::{Reply, RequestContext};
use crate::runtime::{Shard, ShardId};
use crate::storage::{ReadInfo, StorageError};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::Fetch, FetchRequest, 4, 18);

/// Upper bound on how long one fetch may wait, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);

async fn handle(shard: Rc<Shard>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: FetchRequest = ctx.decode(body)?;
    Ok(Handled::Later(Box::pin(fetch(shard, ctx, request))))
}

/// One requested partition that exists here.
struct Target {
    topic_id: Uuid,
    partition: i32,
    shard: ShardId,
    fetch_offset: i64,
    max_bytes: u64,
    end_offset: watch::Receiver<i64>,
}

/// A requested topic as the response lists it: name (v≤12), id (v13+), partitions in order.
type TopicLayout = (kafka_protocol::protocol::StrBytes, Uuid, Vec<(i32, Slot)>);

/// One partition read sent to its owning shard: (position in `targets`, topic, partition,
/// fetch offset, max bytes).
type ReadJob = (usize, Uuid, i32, i64, u64);

/// A requested partition: answered already (an error) or to be read.
enum Slot {
    Error(i16),
    Read(usize),
}

type ReadResult = Result<ReadInfo, ReadError>;

#[derive(Debug)]
enum ReadError {
    Storage(StorageError),
    NotHosted,
}

impl ReadError {
    fn code(&self) -> i16 {
        match self {
            ReadError::Storage(e) => e.error_code().code(),
            ReadError::NotHosted => ResponseError::UnknownTopicOrPartition.code(),
        }
    }
}

async fn fetch(shard: Rc<Shard>, ctx: RequestContext, request: FetchRequest) -> Reply {
    let version = ctx.api_version;
    if version >= 7 && (request.session_id != 0 || request.session_epoch > 0) {
        // Sessions are never created, so a client can only name one it invented.
        let code = if request.session_id != 0 { ResponseError::FetchSessionIdNotFound } else { ResponseError::InvalidFetchSessionEpoch };
        let reply = FetchReply { error_code: code.code(), ..Default::default() };
        return Reply::Chunks(fetch_response::encode(ctx.correlation_id, version, reply));
    }

    let catalog = &shard.node.catalog;
    let node_id = shard.node.node_id;
    let mut targets = Vec::new();
    let mut layout = Vec::with_capacity(request.topics.len());
    // A partition listed more than once is read and answered once (Kafka keeps one entry per
    // partition too), so one request cannot make the node read the same data many times.
    let mut listed = std::collections::HashSet::new();
    for t in &request.topics {
        let topic: Option<Arc<Topic>> = if version >= 13 { catalog.get_by_id(t.topic_id) } else { catalog.get(&t.topic.0) };
        let unknown = if version >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
        let mut slots = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key =
                if version >= 13 { (None, t.topic_id, p.partition) } else { (Some(t.topic.0.as_str()), uuid::Uuid::nil(), p.partition) };
            if !listed.insert(key) {
                continue;
            }
            let slot = match topic.as_ref().map(|topic| (topic.id, topic.partition(p.partition))) {
                None => Slot::Error(unknown.code()),
                Some((_, None)) => Slot::Error(ResponseError::UnknownTopicOrPartition.code()),
                Some(_) if p.current_leader_epoch > 0 => Slot::Error(ResponseError::UnknownLeaderEpoch.code()),
                Some((_, Some(meta))) if meta.leader != node_id => Slot::Error(ResponseError::NotLeaderOrFollower.code()),
                Some((topic_id, Some(meta))) => {
                    targets.push(Target {
                        topic_id,
                        partition: p.partition,
                        shard: meta.shard,
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes.max(0) as u64,
                        end_offset: meta.end_offset.subscribe(),
                    });
                    Slot::Read(targets.len() - 1)
                }
            };
            slots.push((p.partition, slot));
        }
        layout.push((t.topic.0.clone(), t.topic_id, slots));
    }
    let has_unknown = layout.iter().flat_map(|(_, _, s)| s).any(|(_, s)| matches!(s, Slot::Error(_)));

    let max_bytes = request.max_bytes.max(0) as u64;
    let min_bytes = request.min_bytes.max(0) as u64;
    let wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT);
    let deadline = Instant::now() + wait;
    let shutdown = shard.node.shutdown.clone();

    loop {
        // Seen values are marked before reading, so an append during the read still wakes us.
        for t in targets.iter_mut() {
            t.end_offset.mark_unchanged();
        }
        let mut reads = read_all(&shard, &targets).await;
        let (reply, bytes, has_error) = assemble(&layout, &mut reads, max_bytes);
        let done = has_error || has_unknown || bytes >= min_bytes || wait.is_zero() || Instant::now() >= deadline;
        if done || shutdown.is_cancelled() {
            return Reply::Chunks(fetch_response::encode(ctx.correlation_id, version, reply));
        }
        let changed = async {
            if targets.is_empty() {
                std::future::pending::<()>().await;
            }
            let _ = select_all(targets.iter_mut().map(|t| Box::pin(t.end_offset.changed()))).await;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = changed => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Reads every target on its owning shard (one mesh call per shard), in request order.
async fn read_all(shard: &Rc<Shard>, targets: &[Target]) -> Vec<Option<ReadResult>> {
    let mut jobs: HashMap<ShardId, Vec<ReadJob>> = HashMap::new();
    for (i, t) in targets.iter().enumerate() {
        jobs.entry(t.shard).or_default().push((i, t.topic_id, t.partition, t.fetch_offset, t.max_bytes));
    }
    let mut pending = Vec::with_capacity(jobs.len());
    for (target, list) in jobs {
        let reply = shard.node.mesh.call(shard, target, move |owner| {
            list.into_iter()
                .map(|(i, id, partition, offset, max)| {
                    let result = match owner.partition(id, partition) {
                        Some(p) => p.log.borrow().read(offset, max, true).map_err(ReadError::Storage),
                        None => Err(ReadError::NotHosted),
                    };
                    (i, result)
                })
                .collect::<Vec<_>>()
        });
        pending.push(reply.await);
    }
    let mut out: Vec<Option<ReadResult>> = (0..targets.len()).map(|_| None).collect();
    for reply in pending {
        if let Ok(list) = reply.await {
            for (i, result) in list {
                out[i] = Some(result);
            }
        }
    }
    out
}

/// Builds the response in request order within the response's `max_bytes`: the first partition
/// with data always keeps its whole first batch (KIP-74); later ones get what budget is left.
fn assemble(layout: &[TopicLayout], reads: &mut [Option<ReadResult>], max_bytes: u64) -> (FetchReply, u64, bool) {
    let mut budget = max_bytes;
    let mut total = 0u64;
    let mut has_error = false;
    let mut topics = Vec::with_capacity(layout.len());
    for (name, topic_id, slots) in layout {
        let mut partitions = Vec::with_capacity(slots.len());
        for (index, slot) in slots {
            let reply = match slot {
                Slot::Error(code) => {
                    has_error = true;
                    FetchPartitionReply::error(*index, *code)
                }
                Slot::Read(i) => match reads[*i].take() {
                    None => {
                        has_error = true;
                        FetchPartitionReply::error(*index, ResponseError::RequestTimedOut.code())
                    }
                    Some(Err(e)) => {
                        has_error = true;
                        FetchPartitionReply::error(*index, e.code())
                    }
                    Some(Ok(info)) => {
                        let records = info.slice.and_then(|mut slice| {
                            let keep = if total == 0 { slice.len.min(budget.max(info.first_batch_len)) } else { slice.len.min(budget) };
                            slice.len = keep;
                            (keep > 0).then_some(slice)
                        });
                        let sent = records.as_ref().map_or(0, |s| s.len);
                        total += sent;
                        budget = budget.saturating_sub(sent);
                        FetchPartitionReply {
                            partition_index: *index,
                            error_code: NONE,
                            high_watermark: info.high_watermark,
                            last_stable_offset: info.high_watermark,
                            log_start_offset: info.log_start_offset,
                            records,
                        }
                    }
                },
            };
            partitions.push(reply);
        }
        topics.push(FetchTopicReply { name: name.clone(), topic_id: *topic_id, partitions });
    }
    (FetchReply { topics, ..Default::default() }, total, has_error)
}
