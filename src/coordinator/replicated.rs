//! A coordinator partition as the state machine of its Raft group.
//!
//! # What the log holds
//!
//! Each entry's [`Command`] is one `__consumer_offsets` record batch (Kafka's v2 format, the
//! records in Kafka's key/value layouts), built by [`super::log_batch::encode_batch`]. The leader batches the
//! records of many requests into one entry, since openraft 0.9 fsyncs once per entry.
//!
//! # Applying
//!
//! Applying an entry appends its batch to the partition's `__consumer_offsets` log, which clients
//! and tools such as Burrow read, and which is this state machine's durable form: the first
//! record of every batch carries the id of the entry it came from (a record header, which Kafka
//! readers ignore), so after a restart the last batch in the partition says what was applied and
//! openraft re-applies only what follows, from its own log.
//!
//! The leader changes its [`CoordinatorState`] before it proposes (a commit is answered only once
//! its entry is committed and applied); entries it proposed are not replayed into the state again.
//! Every other entry, the ones re-applied at startup and (on a follower) the leader's, is replayed
//! through the same `replay` that loads a partition.
//!
//! # Snapshots
//!
//! A snapshot is the live records (every committed offset, every settled group) at the last
//! applied entry. Building one also rewrites the partition's log as that checkpoint and fsyncs it,
//! so openraft may then purge the Raft log up to it.

use std::io::Cursor;
use std::path::PathBuf;
use std::rc::Rc;

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};

use super::shell::offsets_log::OffsetsLog;
use crate::raft::{Entry, LogId, StorageError, StoredMembership, TypeConfig};

/// The file beside the Raft log that holds the last applied membership.
const MEMBERSHIP_FILE: &str = "applied_membership";

fn sm_error(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

/// The Raft state machine of one coordinator partition: applies entries to the partition's
/// [`OffsetsLog`] (shared with the runner, which owns the Raft group, which owns this).
#[derive(Debug)]
pub struct CoordinatorStateMachine {
    offsets: Rc<OffsetsLog>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// The Raft group's directory, where the applied membership is kept.
    dir: PathBuf,
    /// The last snapshot built or installed.
    current: Option<StoredSnapshot>,
}

type Meta = SnapshotMeta<u64, openraft::BasicNode>;
type StoredSnapshot = (Meta, Rc<Vec<u8>>);

impl CoordinatorStateMachine {
    /// `last_applied` is what the partition's log says it holds; the membership is read from
    /// `dir`.
    pub fn open(offsets: Rc<OffsetsLog>, last_applied: Option<LogId>, dir: PathBuf) -> Result<Self, String> {
        let membership = crate::raft::read_state_file(&dir, MEMBERSHIP_FILE, crate::raft::decode_stored_membership)
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        Ok(CoordinatorStateMachine { offsets, last_applied, membership, dir, current: None })
    }

    /// Checkpoints the partition at the last applied entry and keeps it as the current snapshot.
    fn checkpoint(&mut self) -> Result<Snapshot<TypeConfig>, Box<StorageError>> {
        let data = Rc::new(self.offsets.checkpoint(self.last_applied).map_err(|e| Box::new(sm_error(e)))?);
        let last = self.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: self.membership.clone(),
            snapshot_id: format!("{}-{}", last.map_or(0, |l| l.leader_id.term), last.map_or(0, |l| l.index)),
        };
        self.current = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data.as_ref().clone())) })
    }
}

/// A snapshot already taken (the checkpoint is written when the builder is made, consistent with
/// the state at that moment).
#[derive(Debug)]
pub struct Checkpoint(Option<Result<Snapshot<TypeConfig>, Box<StorageError>>>);

impl RaftSnapshotBuilder<TypeConfig> for Checkpoint {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        match self.0.take() {
            Some(built) => built.map_err(|e| *e),
            None => Err(sm_error("snapshot builder used twice")),
        }
    }
}

impl RaftStateMachine<TypeConfig> for CoordinatorStateMachine {
    type SnapshotBuilder = Checkpoint;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        for entry in entries {
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(command) => self
                    .offsets
                    .apply_batch(&entry.log_id, command.payload())
                    .map_err(|e| StorageError::from(StorageIOError::apply(entry.log_id, AnyError::error(e))))?,
                EntryPayload::Membership(membership) => {
                    let stored = StoredMembership::new(Some(entry.log_id), membership);
                    let bytes = crate::raft::encode_stored_membership(&stored);
                    crate::raft::write_state_file(&self.dir, MEMBERSHIP_FILE, &bytes).map_err(sm_error)?;
                    self.membership = stored;
                }
            }
            self.last_applied = Some(entry.log_id);
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Checkpoint {
        Checkpoint(Some(self.checkpoint()))
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        self.offsets
            .install(&data, meta.last_log_id)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e.to_string())))?;
        let bytes = crate::raft::encode_stored_membership(&meta.last_membership);
        crate::raft::write_state_file(&self.dir, MEMBERSHIP_FILE, &bytes).map_err(sm_error)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.current = Some((meta.clone(), Rc::new(data)));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        match &self.current {
            Some((meta, data)) => Ok(Some(Snapshot { meta: meta.clone(), snapshot: Box::new(Cursor::new(data.as_ref().clone())) })),
            // After a restart nothing is cached; openraft then builds one if its log was purged.
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::coordinator::log_batch::encode_batch;
    use crate::coordinator::raft_test_support::{commit, commit_with_metadata, committed, local, open_partition};
    use crate::coordinator::records::{GroupRecord, OffsetValue, StoredRecord};
    use crate::coordinator::shell::{PartitionRunner, RaftSettings};
    use crate::coordinator::state::GroupConfig;
    use tempfile::TempDir;

    const NODE: u64 = 7;

    /// A coordinator partition as a shard runs it: its `__consumer_offsets` log in `dir/log`,
    /// its Raft group in `dir/raft`.
    async fn start(dir: &std::path::Path, raft_config: &Arc<openraft::Config>) -> Rc<PartitionRunner> {
        let partition = open_partition(&dir.join("log"));
        let raft = RaftSettings::solo(dir.join("raft"), NODE, "127.0.0.1:9092".into(), raft_config.clone());
        PartitionRunner::start(0, partition, GroupConfig::default(), Default::default(), 3_600_000, raft, crate::raft::network::SoloNetwork)
            .await
            .expect("partition starts")
    }

    /// Every acknowledged commit is in the Raft log: with its `__consumer_offsets` partition gone
    /// entirely (as if none of it had reached the disk), a restarted partition rebuilds the same
    /// offsets from the Raft log alone; with the partition intact, it re-applies nothing twice.
    #[test]
    fn the_raft_log_alone_rebuilds_every_acknowledged_commit() {
        let tmp = TempDir::new().unwrap();
        let config = crate::raft::coordinator_config().unwrap();
        local(async {
            let runner = start(tmp.path(), &config).await;
            // Concurrent commits share entries (one write in flight at a time).
            let offsets: Vec<[(i32, i64); 1]> = (0..200).map(|i| [(i % 4, i as i64)]).collect();
            let commits = offsets.iter().map(|o| commit(&runner, o));
            for codes in futures_util::future::join_all(commits).await {
                assert_eq!(codes, vec![0]);
            }
            let entries = runner.raft().unwrap().metrics().borrow().last_applied.unwrap().index;
            assert!(entries < 200, "200 commits took {entries} entries: none were batched");
            runner.shutdown().await;
        });
        let before: Vec<i64> = (196..200).collect();

        // The partition intact: nothing is applied twice (the stamped log id says where it was).
        let size = |dir: &std::path::Path| -> u64 {
            let segments = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).filter(|e| e.path().extension().is_some_and(|x| x == "log"));
            segments.map(|e| e.metadata().unwrap().len()).sum()
        };
        let log_size = size(&tmp.path().join("log"));
        local(async {
            let runner = start(tmp.path(), &config).await;
            let got: Vec<i64> = (0..4).map(|p| committed(&runner, p).unwrap()).collect();
            assert_eq!(got, before);
            runner.shutdown().await;
        });
        assert_eq!(size(&tmp.path().join("log")), log_size, "a restart re-applied entries the partition held");

        std::fs::remove_dir_all(tmp.path().join("log")).unwrap();
        local(async {
            let runner = start(tmp.path(), &config).await;
            let got: Vec<i64> = (0..4).map(|p| committed(&runner, p).unwrap()).collect();
            assert_eq!(got, before, "rebuilt from the Raft log");
            assert_eq!(commit(&runner, &[(0, 1_000)]).await, vec![0], "serves after the rebuild");
            runner.shutdown().await;
        });
    }

    /// A snapshot checkpoints the partition and lets the Raft log be purged; a restart loads the
    /// checkpoint plus what followed it.
    #[test]
    fn a_snapshot_purges_the_raft_log_and_a_restart_loads_it() {
        let tmp = TempDir::new().unwrap();
        let config = Arc::new(
            openraft::Config { max_in_snapshot_log_to_keep: 0, ..crate::raft::coordinator_config().unwrap().as_ref().clone() }
                .validate()
                .unwrap(),
        );
        local(async {
            let runner = start(tmp.path(), &config).await;
            for i in 0..50 {
                assert_eq!(commit(&runner, &[(0, i), (1, 1_000 + i)]).await, vec![0, 0]);
            }
            // Overwrite and delete: only the live values may survive the checkpoint.
            assert_eq!(commit(&runner, &[(2, 5)]).await, vec![0]);
            let raft = runner.raft().unwrap().clone();
            let applied = raft.metrics().borrow().last_applied;
            raft.trigger().snapshot().await.unwrap();
            let wait = raft.wait(Some(std::time::Duration::from_secs(10)));
            wait.snapshot(applied.unwrap(), "snapshot").await.unwrap();
            wait.purged(applied, "purge").await.unwrap();
            // The checkpoint replaced the partition's earlier segments.
            let segments = std::fs::read_dir(tmp.path().join("log"))
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
                .count();
            assert_eq!(segments, 1, "one segment (the checkpoint) left");
            assert_eq!(commit(&runner, &[(3, 77)]).await, vec![0]);
            runner.shutdown().await;
        });
        local(async {
            let runner = start(tmp.path(), &config).await;
            assert_eq!(committed(&runner, 0), Some(49));
            assert_eq!(committed(&runner, 1), Some(1_049));
            assert_eq!(committed(&runner, 2), Some(5));
            assert_eq!(committed(&runner, 3), Some(77), "the entry after the snapshot is re-applied");
            runner.shutdown().await;
        });
    }

    /// 300 partitions with 4,000 bytes of metadata each (allowed one by one) make a batch over
    /// `max.message.bytes`: the commit is refused with INVALID_COMMIT_OFFSET_SIZE before anything
    /// is proposed, the partition goes on serving, and it starts again.
    #[test]
    fn an_oversized_commit_is_refused_and_the_partition_keeps_serving() {
        let tmp = TempDir::new().unwrap();
        let config = crate::raft::coordinator_config().unwrap();
        let metadata = "m".repeat(4_000);
        let big: Vec<(i32, i64)> = (0..300).map(|p| (p, 1)).collect();
        local(async {
            let runner = start(tmp.path(), &config).await;
            let codes = commit_with_metadata(&runner, &big, Some(&metadata)).await;
            assert_eq!(codes, vec![kafka_protocol::ResponseError::InvalidCommitOffsetSize.code(); 300]);
            assert_eq!(committed(&runner, 0), None, "nothing of the refused commit is applied");
            // 200 partitions fit one batch: accepted.
            let fits: Vec<(i32, i64)> = (0..200).map(|p| (p, 2)).collect();
            assert_eq!(commit_with_metadata(&runner, &fits, Some(&metadata)).await, vec![0; 200]);
            assert_eq!(commit(&runner, &[(299, 3)]).await, vec![0]);
            runner.shutdown().await;
        });
        local(async {
            let runner = start(tmp.path(), &config).await;
            assert_eq!(committed(&runner, 0), Some(2));
            assert_eq!(committed(&runner, 299), Some(3));
            assert_eq!(commit(&runner, &[(0, 4)]).await, vec![0], "serves after the restart");
            runner.shutdown().await;
        });
    }

    /// A data directory whose Raft log already holds an entry larger than `max.message.bytes`
    /// (as the coordinator proposed before its writes were bounded) applies it, and the partition
    /// starts again and serves.
    #[test]
    fn a_committed_entry_larger_than_a_batch_applies_and_restarts() {
        let tmp = TempDir::new().unwrap();
        let config = crate::raft::coordinator_config().unwrap();
        let metadata = "m".repeat(4_000);
        local(async {
            let runner = start(tmp.path(), &config).await;
            let records: Vec<GroupRecord> = (0..300)
                .map(|p| GroupRecord::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: p,
                    value: Some(OffsetValue {
                        offset: 9,
                        leader_epoch: -1,
                        metadata: metadata.clone(),
                        commit_timestamp: 1,
                        expire_timestamp: None,
                    }),
                })
                .collect();
            let batch = encode_batch(&encoded(&records), 1_000);
            assert!(batch.len() > 1_200_000);
            let raft = runner.raft().unwrap().clone();
            raft.client_write(crate::raft::Command::new(batch)).await.expect("the oversized entry commits and applies");
            assert_eq!(commit(&runner, &[(0, 10)]).await, vec![0], "serves after applying it");
            runner.shutdown().await;
        });
        // Applied again from the Raft log alone, as after a crash before the partition's log had it.
        std::fs::remove_dir_all(tmp.path().join("log")).unwrap();
        local(async {
            let runner = start(tmp.path(), &config).await;
            assert_eq!(committed(&runner, 0), Some(10));
            assert_eq!(committed(&runner, 299), Some(9));
            runner.shutdown().await;
        });
    }

    fn encoded(records: &[GroupRecord]) -> Vec<StoredRecord> {
        records.iter().map(GroupRecord::encode).collect()
    }
}
