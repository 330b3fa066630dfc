//! The per-group series of `/metrics`, computed at the scrape from the coordinator's state (so a
//! group that is gone has no series left behind): consumer lag with the names and labels of
//! kafka_exporter, which existing dashboards and alerts use, and corral's own per-group series.
//!
//! Only the first `admin.metrics_max_groups` groups (in group-id order) get series of their own;
//! the rest are summed under `consumergroup="__other__"` (sums per topic, no per-partition
//! series), so the number of series stays bounded however many groups there are.

use std::collections::BTreeMap;

use crate::clock::now_ms;
use crate::coordinator::inspect::{self, Coordinator, OffsetView};
use crate::metrics::scraped::*;
use crate::node::Node;
use crate::runtime::shard::Shard;

use super::groups::NodeFacts;

/// The label of the groups beyond the cap.
const OTHER: &str = "__other__";

/// What one group contributes to the exposition.
struct GroupRow {
    group: String,
    kind: &'static str,
    state: &'static str,
    generation: i32,
    members: usize,
    offsets: Vec<OffsetView>,
    rebalances: Vec<(&'static str, u64)>,
    recent_rebalances: usize,
}

fn shard_rows(shard: &Shard, storm_since: i64) -> Vec<GroupRow> {
    let facts = NodeFacts(&shard.node);
    let mut rows = Vec::new();
    for runner in shard.coordinators().iter().filter(|r| r.serving()) {
        let state = runner.state.borrow();
        let history = runner.history.borrow();
        let at = Coordinator { partition: runner.index, node: shard.node.node_id };
        for g in inspect::overviews(&state, &facts, at) {
            let offsets = inspect::committed(&state, &g.group, &facts);
            let rebalances = history.totals(&g.group).map(|t| t.iter().map(|(k, v)| (*k, *v)).collect()).unwrap_or_default();
            let recent_rebalances = history.count_since(&g.group, storm_since);
            rows.push(GroupRow {
                group: g.group,
                kind: g.kind,
                state: g.state,
                generation: g.generation,
                members: g.members,
                offsets,
                rebalances,
                recent_rebalances,
            });
        }
    }
    rows
}

/// Appends the per-group series to `out`.
pub(super) async fn render(node: &Node, out: &mut String) {
    let storm_since = now_ms() - node.config.admin.rebalance_storm_window_minutes as i64 * 60_000;
    let mut rows = Vec::new();
    for shard in 0..node.mesh.shard_count() {
        match node.mesh.run_on(shard, move |s| async move { shard_rows(&s, storm_since) }).await {
            Ok(r) => rows.extend(r),
            Err(e) => tracing::debug!(error = %e, "no group series from a stopped shard"),
        }
    }
    rows.sort_by(|a, b| a.group.cmp(&b.group));
    let cap = node.config.admin.metrics_max_groups.min(rows.len());
    write_series(out, &rows[..cap], &rows[cap..]);
}

fn write_series(out: &mut String, labelled: &[GroupRow], other: &[GroupRow]) {
    let mut by_state: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for r in labelled.iter().chain(other) {
        *by_state.entry((r.kind, r.state)).or_default() += 1;
    }
    family(out, &GROUPS);
    for ((kind, state), n) in &by_state {
        sample(out, &GROUPS, &[("type", kind), ("state", state)], *n as i64);
    }
    family(out, &GROUPS_UNLABELLED);
    sample(out, &GROUPS_UNLABELLED, &[], other.len() as i64);

    family(out, &GROUP_MEMBERS);
    for r in labelled {
        sample(out, &GROUP_MEMBERS, &[("consumergroup", &r.group)], r.members as i64);
    }
    if !other.is_empty() {
        sample(out, &GROUP_MEMBERS, &[("consumergroup", OTHER)], other.iter().map(|r| r.members as i64).sum());
    }

    family(out, &GROUP_CURRENT_OFFSET);
    for r in labelled {
        for o in &r.offsets {
            let labels = [("consumergroup", r.group.as_str()), ("topic", &o.topic), ("partition", &o.partition.to_string())];
            sample(out, &GROUP_CURRENT_OFFSET, &labels, o.committed_offset);
        }
    }
    family(out, &GROUP_CURRENT_OFFSET_SUM);
    for r in labelled {
        for (topic, sum) in per_topic(&r.offsets, |o| Some(o.committed_offset)) {
            sample(out, &GROUP_CURRENT_OFFSET_SUM, &[("consumergroup", &r.group), ("topic", topic)], sum);
        }
    }
    family(out, &GROUP_LAG);
    for r in labelled {
        for o in &r.offsets {
            if let Some(lag) = o.lag {
                let labels = [("consumergroup", r.group.as_str()), ("topic", &o.topic), ("partition", &o.partition.to_string())];
                sample(out, &GROUP_LAG, &labels, lag);
            }
        }
    }
    family(out, &GROUP_LAG_SUM);
    for r in labelled {
        for (topic, sum) in per_topic(&r.offsets, |o| o.lag) {
            sample(out, &GROUP_LAG_SUM, &[("consumergroup", &r.group), ("topic", topic)], sum);
        }
    }
    let other_offsets: Vec<OffsetView> = other.iter().flat_map(|r| r.offsets.iter().cloned()).collect();
    for (topic, sum) in per_topic(&other_offsets, |o| o.lag) {
        sample(out, &GROUP_LAG_SUM, &[("consumergroup", OTHER), ("topic", topic)], sum);
    }

    family(out, &GROUP_GENERATION);
    for r in labelled {
        sample(out, &GROUP_GENERATION, &[("consumergroup", &r.group), ("type", r.kind)], r.generation as i64);
    }
    family(out, &GROUP_REBALANCES);
    for r in labelled {
        for (trigger, n) in &r.rebalances {
            sample(out, &GROUP_REBALANCES, &[("consumergroup", &r.group), ("trigger", trigger)], *n as i64);
        }
    }
    let mut other_rebalances: BTreeMap<&str, u64> = BTreeMap::new();
    for (trigger, n) in other.iter().flat_map(|r| &r.rebalances) {
        *other_rebalances.entry(trigger).or_default() += n;
    }
    for (trigger, n) in &other_rebalances {
        sample(out, &GROUP_REBALANCES, &[("consumergroup", OTHER), ("trigger", trigger)], *n as i64);
    }
    family(out, &GROUP_REBALANCES_RECENT);
    for r in labelled {
        sample(out, &GROUP_REBALANCES_RECENT, &[("consumergroup", &r.group)], r.recent_rebalances as i64);
    }
    if !other.is_empty() {
        sample(out, &GROUP_REBALANCES_RECENT, &[("consumergroup", OTHER)], other.iter().map(|r| r.recent_rebalances as i64).sum());
    }
}

/// Sums a value of the offsets per topic, skipping unknown values; topics in name order.
fn per_topic(offsets: &[OffsetView], value: impl Fn(&OffsetView) -> Option<i64>) -> BTreeMap<&str, i64> {
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    for o in offsets {
        if let Some(v) = value(o) {
            let sum = sums.entry(o.topic.as_str()).or_default();
            *sum = sum.saturating_add(v);
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(topic: &str, partition: i32, committed_offset: i64, lag: Option<i64>) -> OffsetView {
        OffsetView {
            topic: topic.into(),
            partition,
            committed_offset,
            log_end_offset: lag.map(|l| committed_offset + l),
            lag,
            metadata: String::new(),
            commit_timestamp: 0,
            owner: None,
        }
    }

    fn row(group: &str, members: usize, lag: i64, rebalances: u64) -> GroupRow {
        GroupRow {
            group: group.into(),
            kind: "classic",
            state: "Stable",
            generation: 3,
            members,
            offsets: vec![offset("t", 0, 10, Some(lag)), offset("t", 1, 20, Some(lag)), offset("u", 0, 5, None)],
            rebalances: vec![("member_joined", rebalances)],
            recent_rebalances: rebalances as usize,
        }
    }

    #[test]
    fn groups_beyond_the_cap_are_summed_under_one_label() {
        let rows = [row("a", 2, 1, 1), row("b", 3, 2, 4), row("c", 5, 3, 6)];
        let mut out = String::new();
        write_series(&mut out, &rows[..1], &rows[1..]);
        assert!(out.contains("kafka_consumergroup_lag{consumergroup=\"a\",topic=\"t\",partition=\"1\"} 1\n"));
        assert!(out.contains("kafka_consumergroup_lag_sum{consumergroup=\"a\",topic=\"t\"} 2\n"));
        assert!(
            !out.contains("kafka_consumergroup_lag_sum{consumergroup=\"a\",topic=\"u\"}"),
            "no lag sum of a topic whose lag is unknown"
        );
        assert!(out.contains("kafka_consumergroup_current_offset_sum{consumergroup=\"a\",topic=\"u\"} 5\n"));
        assert!(out.contains("kafka_consumergroup_members{consumergroup=\"__other__\"} 8\n"));
        assert!(out.contains("kafka_consumergroup_lag_sum{consumergroup=\"__other__\",topic=\"t\"} 10\n"));
        assert!(out.contains("corral_group_rebalances_total{consumergroup=\"__other__\",trigger=\"member_joined\"} 10\n"));
        assert!(out.contains("corral_metrics_groups_unlabelled 2\n"));
        assert!(out.contains("corral_groups{type=\"classic\",state=\"Stable\"} 3\n"));
        for name in ["b", "c"] {
            assert!(!out.contains(&format!("consumergroup=\"{name}\"")), "{name} has no series of its own");
        }
    }
}
