"""Smoke test of corral-bench: each suite runs on a tiny scale against the debug build and its
results file carries a number for every scenario. Speed is never asserted; a scenario that
could not produce its number fails the test."""

import json
import math
import subprocess
from pathlib import Path

from apache_kafka import kafka_libs
from conftest import DEFAULT_BINARY, REPO

BENCH = DEFAULT_BINARY.parent / "corral-bench"


def run_bench(args: list[str], json_path: Path, tmp_path: Path, timeout: float) -> dict:
    assert BENCH.exists(), f"{BENCH} is missing: `cargo build --bins` builds it"
    cmd = [str(BENCH), *args, "--server", str(DEFAULT_BINARY), "--json", str(json_path), "--work-dir", str(tmp_path)]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return json.loads(json_path.read_text())


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_groups_suite_quick(tmp_path):
    """corral, then Apache Kafka 4.4 through the same scenarios (--kafka-libs)."""
    results = run_bench(
        ["groups", "suite", "--quick", "--members", "20", "--partitions-per-topic", "20", "--topics", "2",
         "--idle-groups", "100", "--groups-per-wave", "50", "--committers", "20", "--initial-delay-ms", "300",
         "--kafka-libs", str(kafka_libs())],
        tmp_path / "groups.json", tmp_path, timeout=600,
    )
    for server in [results, results["kafka"]]:
        assert server["failures"] == [], server["failures"]
        rebalances = server["rebalances"]
        for name in ["classic_start", "classic_leave_hb", "classic_leave_now", "multi_classic_start", "multi_classic_join",
                     "multi_classic_leave", "multi_consumer_start", "multi_consumer_join", "multi_consumer_leave",
                     "multi_consumer_join_settled", "multi_consumer_leave_settled"]:
            assert positive(rebalances[name]["median_total_ms"]), (name, rebalances[name])
        # Tiny groups may fit in memory the allocator already holds: a number, not necessarily > 0.
        assert math.isfinite(server["idle_members"]["bytes_per_member_rss"])
        assert all(positive(run["per_sec"]) for run in server["heartbeat_storm"]), server["heartbeat_storm"]
        assert all(positive(run["commits_per_sec"]) for run in server["commits"]), server["commits"]
    assert results["kafka"]["params"]["members_per_parking_lane"] == 1


def test_all_quick_against_corral(tmp_path):
    """The one-command comparison suite, corral only: every scenario row carries corral's number."""
    python = REPO / ".venv" / "bin" / "python"
    results = run_bench(["all", "--quick", "--python", str(python)], tmp_path / "all.json", tmp_path, timeout=900)
    keys = {row["key"] for row in results["rows"]}
    for key in ["produce_100_1", "produce_100_all", "produce_1024_1", "produce_1024_all", "produce_100_1_mb", "produce_1024_all_mb",
                "fetch_sendfile", "fetch_pread", "durable_commit_latency_p50",
                "latency_p50", "latency_p99", "formation_10", "leave_10", "formation_50", "leave_50", "rss_50",
                "heartbeats_50", "commits_50", "commit_latency_p50", "rss_200", "heartbeats_200", "commits_200", "drain"]:
        assert key in keys, f"no {key} row in {sorted(keys)}"
    for row in results["rows"]:
        corral = row["servers"]["corral"]
        assert corral["error"] is None, (row["key"], corral["error"])
        assert positive(corral["value"]), (row["key"], corral)
    for limit in ["loopback_mb_per_sec", "fsync_p50_ms", "buffered_write_mb_per_sec"]:
        assert positive(results["limits"][limit]), (limit, results["limits"])
    scaling = results["scaling"]
    assert [p["members"] for p in scaling["formation"]] == [10, 50]
    assert all(positive(p["corral_per_sec"]) for p in scaling["heartbeats"])
    assert all(positive(p["corral_rss_kb"]) for p in scaling["memory"])


def test_produce_fetch_suite_quick(tmp_path):
    results = run_bench(["suite", "--quick", "--data-bytes", "32MiB"], tmp_path / "suite.json", tmp_path, timeout=600)
    for name in ["produce", "produce_fill", "fetch_sendfile", "fetch_pread", "loopback_stream", "loopback_rr",
                 "loopback_rr_sendfile_segment"]:
        assert positive(results["results"][name]["median_mb_per_sec"]), (name, results["results"][name])
    for name, ratio in results["ratios"].items():
        assert positive(ratio), (name, ratio)


def test_durable_commits_quick(tmp_path):
    """Durable offset commits (Raft, default config) against the fsync latency of the same filesystem:
    every summary number, ratio and per-repetition number is present and positive."""
    results = run_bench(["commits", "--quick"], tmp_path / "commits.json", tmp_path, timeout=300)
    summary = results["summary"]
    for key in ["fsync_p50_ms", "fsync_p99_ms", "single_p50_ms", "single_p99_ms", "single_commits_per_sec",
                "many_commits_per_sec", "many_offsets_per_sec", "many_p50_ms", "many_p99_ms", "many_server_cpu_seconds",
                "many_server_cores", "many_client_cores", "many_offsets_per_server_cpu_second"]:
        assert positive(summary.get(key)), (key, summary)
    for key in ["single_p50_vs_fsync_p50", "single_p99_vs_fsync_p99", "many_p50_vs_fsync_p50", "many_p99_vs_fsync_p99",
                "offsets_per_sec_vs_target"]:
        assert positive(results["ratios"].get(key)), (key, results["ratios"])
    assert set(results["met"]) == {"commit_p99_vs_fsync_p99", "offsets_per_sec"}, results["met"]
    assert len(results["reps"]) == 1, results["reps"]
    for rep in results["reps"]:
        assert positive(rep["fsync_p50_ms"]) and positive(rep["fsync_p99_ms"]), rep
        for name in ["single", "many"]:
            run = rep[name]
            assert run["errors"] == {}, (name, run["errors"])
            for key in ["committers", "commits", "offsets", "seconds", "commits_per_sec", "offsets_per_sec", "p50_ms", "p99_ms"]:
                assert positive(run[key]), (name, key, run)
            assert positive(sum(run["server_cpu"])), (name, run["server_cpu"])
    assert results["reps"][0]["single"]["committers"] == 1
    assert results["reps"][0]["many"]["committers"] == 100


def test_durable_commits_on_three_nodes_quick(tmp_path):
    """`commits --nodes 3`: the same run on a 3-node loopback cluster beside the single node; every
    cluster number and ratio is present and positive, the partitions led per node add up to the
    50 coordinator partitions, and the committers per node to all committers."""
    results = run_bench(["commits", "--quick", "--nodes", "3"], tmp_path / "cluster.json", tmp_path, timeout=300)
    cluster = results["cluster"]
    assert cluster["nodes"] == 3, cluster["nodes"]
    for key in ["single_p50_ms", "single_p99_ms", "single_commits_per_sec", "many_commits_per_sec",
                "many_offsets_per_sec", "many_server_cpu_seconds", "many_server_cpu_us_per_commit"]:
        assert positive(cluster["summary"].get(key)), (key, cluster["summary"])
    assert all(positive(v) for v in cluster["vs_single_node"].values()), cluster["vs_single_node"]
    assert sum(cluster["coordinator_partitions_led_per_node"]) == 50, cluster["coordinator_partitions_led_per_node"]
    assert sum(cluster["committers_per_node"]) == results["reps"][0]["many"]["committers"], cluster
