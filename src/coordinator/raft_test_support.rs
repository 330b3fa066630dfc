//! What the coordinator's Raft tests share: a partition log in a directory, a shard-like runtime,
//! and offset commits of group "g", topic "t" driven through a runner as OffsetCommit drives them.

use std::rc::Rc;
use std::sync::Arc;

use super::offsets::{CommitOffset, CommitRequest};
use super::outbox::Response;
use super::shell::PartitionRunner;
use crate::storage::{LogConfig, Partition, PartitionLog};

/// A `__consumer_offsets` partition's log in `dir` (opened as after a crash: scanned).
pub(super) fn open_partition(dir: &std::path::Path) -> Rc<Partition> {
    let config = LogConfig { segment_bytes: 1 << 20, max_message_bytes: 1_048_588, ..LogConfig::for_tests() };
    let config = super::offsets_log_config(config);
    let (log, _) = PartitionLog::open(&crate::storage::OpenFiles::new(64), dir, config, false, crate::clock::now_ms()).unwrap();
    Partition::new(log, Arc::new(tokio::sync::watch::channel(0).0), 0)
}

/// Runs `f` on a current-thread runtime inside a LocalSet, as a shard does.
pub(super) fn local<F: std::future::Future>(f: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::LocalSet::new().block_on(&runtime, f)
}

/// Commits `(partition, offset)` pairs of group "g", topic "t" (a simple group); the codes, or
/// NOT_COORDINATOR when the runner does not serve or drops the request (it stopped serving).
pub(super) async fn commit(runner: &Rc<PartitionRunner>, offsets: &[(i32, i64)]) -> Vec<i16> {
    commit_with_metadata(runner, offsets, None).await
}

/// [`commit`], each offset with `metadata`.
pub(super) async fn commit_with_metadata(runner: &Rc<PartitionRunner>, offsets: &[(i32, i64)], metadata: Option<&str>) -> Vec<i16> {
    let not_coordinator = vec![kafka_protocol::ResponseError::NotCoordinator.code(); offsets.len()];
    if !runner.serving() {
        return not_coordinator;
    }
    let (token, reply) = runner.waiter();
    let request = CommitRequest {
        group_id: "g".into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        version: 8,
        retention_ms: -1,
        offsets: offsets
            .iter()
            .map(|&(partition, offset)| CommitOffset {
                topic: "t".into(),
                partition,
                offset,
                leader_epoch: -1,
                metadata: metadata.map(String::from),
                commit_timestamp: None,
            })
            .collect(),
    };
    runner.with_state(|s, now| s.commit(now, request, token, &super::consumer_tests::Topics::default()));
    match reply.await {
        Ok(Response::Commit(codes)) => codes,
        Ok(other) => panic!("expected a commit reply, got {other:?}"),
        Err(_) => not_coordinator,
    }
}

/// The offset of group "g", topic "t", `partition` in the runner's state.
pub(super) fn committed(runner: &PartitionRunner, partition: i32) -> Option<i64> {
    let state = runner.state.borrow();
    state.offsets.get("g")?.get(&("t".to_string(), partition)).map(|v| v.offset)
}
