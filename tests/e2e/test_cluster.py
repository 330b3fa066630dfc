"""A 3-node corral cluster on loopback, with confluent-kafka group members committing offsets
while the group's coordinator is killed (kill -9) or cut off from the other nodes.

Each coordinator partition is a Raft group of the three nodes; its leader is the coordinator. The
checker records every acknowledged commit: none may be missing afterwards, committed offsets never
go backwards, and the node that was down or cut off converges to the same offsets.

Topics are replicated by the metadata group: the test creates its topic once and waits until every
node has it.
"""

from __future__ import annotations

import re
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import Cluster, offsets_partition, read_offset_commits, simple_commit

OFFSETS_PARTITIONS = 6
CONFIG = f"""
[groups]
offsets_partitions = {OFFSETS_PARTITIONS}
initial_rebalance_delay_ms = 0
"""
PARTITIONS = 3


def wait_until(predicate, describe, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {describe()}"
        time.sleep(0.05)


class Committer:
    """A group member (confluent-kafka, subscribed to `topic`) that commits ever larger offsets
    for its assigned partitions, one synchronous commit at a time, and records each one the
    coordinator acknowledged. Every tenth commit it also reads the committed offsets back: they
    must never be behind an acknowledged commit (offsets never go backwards)."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.acked: dict[tuple[str, int], int] = {}
        self.acks = 0
        self.failures: list[str] = []
        self.backwards: list[str] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stopping:
            self.consumer.poll(0.05)
            parts = self.consumer.assignment()
            if not parts:
                continue
            n += 1
            offsets = [TopicPartition(tp.topic, tp.partition, n) for tp in parts]
            try:
                result = self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                self.failures.append(str(e))
                time.sleep(0.05)
                continue
            if any(tp.error for tp in result or []):
                self.failures.append(str([tp.error for tp in result if tp.error]))
                continue
            with self.lock:
                for tp in offsets:
                    self.acked[(tp.topic, tp.partition)] = n
                self.acks += 1
            if n % 10 == 0:
                try:
                    back = self.consumer.committed(parts, timeout=10)
                except KafkaException:
                    continue
                with self.lock:
                    for tp in back:
                        want = self.acked.get((tp.topic, tp.partition), -1)
                        if tp.offset < want:
                            self.backwards.append(f"{tp.topic}[{tp.partition}] read {tp.offset} after {want} was acknowledged")

    def count(self) -> int:
        with self.lock:
            return self.acks

    def close(self) -> dict[tuple[str, int], int]:
        self.stopping = True
        self.thread.join(30)
        self.consumer.close()
        with self.lock:
            return dict(self.acked)


def committed(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        c.close()


def create_everywhere(cluster: Cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS)]).values():
        future.result(30)
    cluster.wait_for_topic(topic, PARTITIONS)


def converged(cluster: Cluster, node: int, group: str, topic: str, expected: dict) -> bool:
    """Whether node `node`'s own `__consumer_offsets` holds `expected` for the group."""
    partition = offsets_partition(group, OFFSETS_PARTITIONS)
    latest = read_offset_commits(f"127.0.0.1:{cluster.kafka[node]}", partition)
    return all(latest.get((group, t, p)) == o for (t, p), o in expected.items())


@pytest.fixture
def cluster(corral_factory, request):
    c = Cluster(corral_factory, size=3, extra_config=CONFIG)
    request.addfinalizer(c.close)
    return c.start()


def test_coordinator_killed_mid_commit_stream_loses_no_acknowledged_commit(cluster):
    """kill -9 of the coordinator while a member commits: another node takes over, the member
    re-discovers it and goes on; every acknowledged commit is there; the killed node, restarted,
    catches up from the log."""
    group, topic = f"failover-{uuid.uuid4().hex[:8]}", f"failover-{uuid.uuid4().hex[:8]}"
    create_everywhere(cluster, topic)
    committer = Committer(cluster.bootstrap, group, topic)
    wait_until(lambda: committer.count() >= 30, lambda: f"30 commits (failures: {committer.failures[-3:]})")

    old = cluster.coordinator(group)
    cluster.nodes[old].kill9()
    survivors = [i for i in range(cluster.size) if i != old]
    at_kill = committer.count()
    wait_until(lambda: committer.count() >= at_kill + 30, lambda: f"30 commits after the kill (failures: {committer.failures[-3:]})")
    new = cluster.coordinator(group, among=survivors, other_than=old)

    acked = committer.close()
    assert not committer.backwards, committer.backwards
    assert len(acked) == PARTITIONS, acked
    assert committed(cluster.bootstrap, group, topic) == acked

    cluster.nodes[old].start()
    wait_until(lambda: converged(cluster, old, group, topic, acked), lambda: f"node {old} to catch up to {acked}")


def test_graceful_shutdown_hands_leadership_over_first(cluster):
    """SIGTERM to the coordinator: before it stops it hands the leadership of every group it leads
    to a node that holds its whole log, so the member goes on at that node; nothing acknowledged
    is lost, and the node converges when it comes back."""
    group, topic = f"handoff-{uuid.uuid4().hex[:8]}", f"handoff-{uuid.uuid4().hex[:8]}"
    create_everywhere(cluster, topic)
    committer = Committer(cluster.bootstrap, group, topic)
    wait_until(lambda: committer.count() >= 30, lambda: f"30 commits (failures: {committer.failures[-3:]})")

    old = cluster.coordinator(group)
    was_controller = cluster.topic_as_seen_by(old, "__consumer_offsets")[0] == old
    log_from = cluster.nodes[old].log_path.stat().st_size
    assert cluster.nodes[old].stop() == 0
    log = cluster.nodes[old].log_path.read_text()[log_from:]
    partition = offsets_partition(group, OFFSETS_PARTITIONS)
    handed = re.search(rf"handed coordinator leadership over partition={partition} to=(\d+)", log)
    assert handed, f"no hand-off of partition {partition} in the log:\n{log[-3000:]}"
    assert ("handed metadata leadership over" in log) == was_controller
    survivors = [i for i in range(cluster.size) if i != old]
    assert cluster.coordinator(group, among=survivors) == int(handed.group(1))

    at_stop = committer.count()
    wait_until(lambda: committer.count() >= at_stop + 30, lambda: f"30 commits after the stop (failures: {committer.failures[-3:]})")
    acked = committer.close()
    assert not committer.backwards, committer.backwards
    assert committed(cluster.bootstrap, group, topic) == acked

    cluster.nodes[old].start()
    wait_until(lambda: converged(cluster, old, group, topic, acked), lambda: f"node {old} to catch up to {acked}")


def raw_commit(cluster: Cluster, node: int, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v2 of a simple group, sent to node `node` alone; the error code."""
    return simple_commit(cluster.kafka[node], group, topic, offset)


def same_partition_group(group: str, prefix: str) -> str:
    """A group id that hashes to the same coordinator partition as `group`."""
    target = offsets_partition(group, OFFSETS_PARTITIONS)
    for i in range(10_000):
        candidate = f"{prefix}-{i}"
        if offsets_partition(candidate, OFFSETS_PARTITIONS) == target:
            return candidate
    raise AssertionError("no group id found")


def test_coordinator_cut_off_cannot_acknowledge_and_the_cluster_heals(cluster):
    """The coordinator is cut off from the other two nodes, while clients still reach it: it
    acknowledges no commit and stops naming itself coordinator; the majority elects another node
    and commits go on there; after healing, the member (which may stall while it keeps asking the
    cut-off node) carries on, the cut-off node follows, and every node holds every acknowledged
    commit."""
    group, topic = f"partition-{uuid.uuid4().hex[:8]}", f"partition-{uuid.uuid4().hex[:8]}"
    simple = same_partition_group(group, f"simple-{uuid.uuid4().hex[:8]}")
    create_everywhere(cluster, topic)
    committer = Committer(cluster.bootstrap, group, topic)
    wait_until(lambda: committer.count() >= 30, lambda: f"30 commits (failures: {committer.failures[-3:]})")

    old = cluster.coordinator(group)
    cluster.cut(old)
    majority = [i for i in range(cluster.size) if i != old]
    new = cluster.coordinator(group, among=majority, other_than=old)
    wait_until(lambda: cluster.coordinator_as_seen_by(old, group)[1] != old, lambda: f"node {old} to stop naming itself: {cluster.coordinator_as_seen_by(old, group)}")

    # The majority goes on: commits of a group in the same coordinator partition are acknowledged
    # by the new leader; the cut-off node acknowledges none.
    simple_acked = {}
    for offset in range(1, 21):
        assert raw_commit(cluster, new, simple, topic, offset) == 0
        simple_acked[(topic, 0)] = offset
    refused = raw_commit(cluster, old, simple, topic, 10_000)
    assert refused in (14, 15, 16), f"the cut-off node answered {refused} to a commit"

    cluster.heal()
    at_heal = committer.count()
    wait_until(lambda: committer.count() >= at_heal + 30, lambda: f"30 commits after healing (failures: {committer.failures[-3:]})")
    acked = committer.close()
    assert not committer.backwards, committer.backwards
    assert committed(cluster.bootstrap, group, topic) == acked
    for node in range(cluster.size):
        wait_until(lambda: converged(cluster, node, group, topic, acked), lambda: f"node {node} to converge to {acked}")
        wait_until(lambda: converged(cluster, node, simple, topic, simple_acked), lambda: f"node {node} to hold {simple_acked} for {simple}")
    assert cluster.coordinator(group) == new, "leadership stays with the majority's leader after healing"
