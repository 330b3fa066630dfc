//! The Raft and mesh series of `/metrics`, read at the scrape: each Raft group's term, leader and
//! apply lag as this node sees them (coordinator partitions and the metadata group), and each
//! shard's inbox depth.

use crate::metrics::scraped::*;
use crate::node::Node;
use crate::raft::Raft;
use crate::runtime::shard::Shard;

/// One Raft group as this node sees it.
struct RaftRow {
    group: String,
    term: u64,
    leader: i64,
    apply_lag: u64,
}

fn row(group: String, raft: &Raft) -> RaftRow {
    let m = raft.metrics().borrow().clone();
    let applied = m.last_applied.map_or(0, |l| l.index + 1);
    let logged = m.last_log_index.map_or(0, |i| i + 1);
    RaftRow { group, term: m.current_term, leader: m.current_leader.map_or(-1, |l| l as i64), apply_lag: logged.saturating_sub(applied) }
}

fn shard_rows(shard: &Shard) -> Vec<RaftRow> {
    let mut rows: Vec<RaftRow> = shard.coordinators().iter().filter_map(|r| Some(row(r.index.to_string(), r.raft()?))).collect();
    if let Some(metadata) = shard.metadata() {
        rows.push(row("metadata".into(), metadata.raft()));
    }
    rows
}

/// Appends the Raft and mesh series to `out`.
pub(super) async fn render(node: &Node, out: &mut String) {
    let mut rows = Vec::new();
    for shard in 0..node.mesh.shard_count() {
        match node.mesh.run_on(shard, |s| async move { shard_rows(&s) }).await {
            Ok(r) => rows.extend(r),
            Err(e) => tracing::debug!(error = %e, "no Raft series from a stopped shard"),
        }
    }
    rows.sort_by(|a, b| a.group.cmp(&b.group));
    family(out, &RAFT_TERM);
    for r in &rows {
        sample(out, &RAFT_TERM, &[("raft_group", &r.group)], r.term as i64);
    }
    family(out, &RAFT_LEADER);
    for r in &rows {
        sample(out, &RAFT_LEADER, &[("raft_group", &r.group)], r.leader);
    }
    family(out, &RAFT_APPLY_LAG);
    for r in &rows {
        sample(out, &RAFT_APPLY_LAG, &[("raft_group", &r.group)], r.apply_lag as i64);
    }
    family(out, &MESH_QUEUE_DEPTH);
    for (shard, depth) in node.mesh.queue_depths().into_iter().enumerate() {
        sample(out, &MESH_QUEUE_DEPTH, &[("shard", &shard.to_string())], depth as i64);
    }
}
