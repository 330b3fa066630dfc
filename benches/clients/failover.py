"""Coordinator failover and replicated commit latency on a 3-node corral cluster on loopback.

    python benches/clients/failover.py [--binary target/release/corral] [--trials 20] [--json PATH]

Starts three `corral serve` processes with static `[cluster] nodes` (default timeouts), then:

- commit latency: one simple-group committer sends OffsetCommit (one partition) to the group's
  coordinator, one at a time, for a few seconds; p50/p99 against one single node measured the
  same way in the same run (a commit on a cluster is acknowledged once two of three nodes have
  fsynced it);
- failover, `--trials` times: commit once, kill -9 the group's coordinator, then ask the live
  nodes FindCoordinator and commit to the node named, every 10 ms, until a commit is
  acknowledged. The time from the kill to that acknowledgement is one trial. The killed node is
  restarted (and the cluster agrees on a coordinator again) before the next trial;
- graceful hand-off, `--trials` times: the same, with SIGTERM instead of kill -9 (the stopping
  node hands the leadership of its groups to a caught-up node before it exits).

The cluster harness is the end-to-end tests' (tests/e2e/cluster.py), without its relays: the
nodes' Raft links are direct.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from cluster import Cluster, simple_commit  # noqa: E402
from conftest import CorralServer  # noqa: E402
from groupwire import offset_commit_v2, parse_offset_commit_v2  # noqa: E402
from kafkawire import Conn  # noqa: E402

TOPIC = "bench-failover"


def commit_once(port: int, group: str, offset: int, timeout: float = 5.0) -> int:
    return simple_commit(port, group, TOPIC, offset, timeout)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def commit_latency(port: int, group: str, seconds: float) -> dict:
    """One committer on one connection, one commit in flight."""
    conn = Conn(f"127.0.0.1:{port}", timeout=10)
    latencies = []
    try:
        deadline = time.monotonic() + seconds
        offset = 0
        while time.monotonic() < deadline:
            offset += 1
            started = time.perf_counter()
            conn.send(offset_commit_v2(offset, group, -1, "", {(TOPIC, 0): offset}))
            _, codes = parse_offset_commit_v2(conn.recv_frame())
            latencies.append((time.perf_counter() - started) * 1000)
            assert codes[(TOPIC, 0)] == 0, codes
    finally:
        conn.close()
    return {
        "commits": len(latencies),
        "p50_ms": round(percentile(latencies, 0.5), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "commits_per_sec": round(len(latencies) / seconds),
    }


def failover_trial(cluster: Cluster, group: str, stop: str) -> float:
    """Commits, stops the group's coordinator (`kill9`, or `terminate`: SIGTERM, the node exits by
    itself), and returns the seconds until the live nodes acknowledge a commit; then brings the
    node back."""
    # Leadership may be moving back to a group's preferred leader (a node restarted by an earlier
    # trial): the node stopped is the one that acknowledged this commit.
    deadline = time.monotonic() + 30
    while True:
        coordinator = cluster.coordinator(group)
        if commit_once(cluster.kafka[coordinator], group, 1) == 0:
            break
        assert time.monotonic() < deadline, f"{group}: no commit acknowledged before the trial"
        time.sleep(0.05)
    server = cluster.nodes[coordinator]
    stopping = None
    stopped = time.monotonic()
    if stop == "kill9":
        server.kill9()
    else:
        # SIGTERM; the node exits by itself once it has handed over and closed its partitions.
        stopping = threading.Thread(target=server.stop)
        stopping.start()
    live = [i for i in range(cluster.size) if i != coordinator]
    while True:
        assert time.monotonic() - stopped < 60, f"{group}: no commit acknowledged within 60 s"
        try:
            named = {cluster.coordinator_as_seen_by(i, group) for i in live}
            target = next(node for error, node in named if error == 0 and node in live)
            if commit_once(cluster.kafka[target], group, 2, timeout=2.0) == 0:
                break
        except (StopIteration, OSError, AssertionError):
            pass
        time.sleep(0.01)
    took = time.monotonic() - stopped
    if stopping is not None:
        stopping.join()
    server.start()
    cluster.coordinator(group)
    return took


class Factory:
    """Makes CorralServer processes in a work directory, as the tests' fixture does."""

    def __init__(self, binary: Path, workdir: Path):
        self.binary, self.workdir, self.servers = binary, workdir, []

    def __call__(self, config=None, start=True, name=None, extra_args=None) -> CorralServer:
        server = CorralServer(self.binary, self.workdir / (name or f"server{len(self.servers)}"), config=config, extra_args=extra_args)
        self.servers.append(server)
        if start:
            server.start()
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            if server.alive():
                server.kill9()


def create_topic(port: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for future in admin.create_topics([NewTopic(TOPIC, 1)]).values():
        future.result(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, default=REPO / "target" / "release" / "corral")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the nodes' data directories and logs")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="corral-failover-"))
    factory = Factory(args.binary, workdir)
    report: dict = {"date": time.strftime("%Y-%m-%d"), "trials": args.trials}
    try:
        single = factory(name="single")
        create_topic(single.kafka_port)
        report["single_node_commit"] = commit_latency(single.kafka_port, "bench-latency", args.latency_seconds)
        single.stop()

        cluster = Cluster(factory, size=3, relays=False).start()
        # Topics are replicated: create it once, then wait until every node has it.
        create_topic(cluster.kafka[0])
        cluster.wait_for_topic(TOPIC, 1)
        leader = cluster.coordinator("bench-latency")
        report["cluster_commit"] = commit_latency(cluster.kafka[leader], "bench-latency", args.latency_seconds)
        print(f"commit latency, one committer: single node p50 {report['single_node_commit']['p50_ms']} ms "
              f"p99 {report['single_node_commit']['p99_ms']} ms; 3 nodes p50 {report['cluster_commit']['p50_ms']} ms "
              f"p99 {report['cluster_commit']['p99_ms']} ms")

        for mode, stop in (("kill -9", "kill9"), ("SIGTERM", "terminate")):
            times = [failover_trial(cluster, f"bench-{stop}-{trial}", stop) for trial in range(args.trials)]
            for trial, took in enumerate(times):
                print(f"{mode} trial {trial + 1}/{args.trials} (group bench-{stop}-{trial}): commit acknowledged after {took:.3f} s")
            summary = {
                "min": round(min(times), 3),
                "p50": round(statistics.median(times), 3),
                "p90": round(percentile(times, 0.9), 3),
                "max": round(max(times), 3),
                "all": [round(t, 3) for t in times],
            }
            report["failover_s" if stop == "kill9" else "handoff_s"] = summary
            print(f"{mode} of the coordinator to the first acknowledged commit, {args.trials} trials: "
                  f"min {summary['min']} s, p50 {summary['p50']} s, p90 {summary['p90']} s, max {summary['max']} s")
        cluster.close()
    finally:
        factory.stop_all()
        if args.keep:
            print(f"data directories and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
