"""Online migration of a live group between the classic and the consumer (KIP-848) protocol, the
way Kafka documents it: a rolling restart of the application's consumers with
group.protocol=consumer, and back (groups.consumer_migration_policy = "bidirectional", the
default).

confluent-kafka members (group_member.py) consume a topic while a producer writes. Members are
restarted one by one with the other protocol; at every step each partition has exactly one owner
(by the members' own rebalance callbacks), no produced record is lost, and a record is read twice
only after the last commit its first reader had acknowledged. ListGroups, DescribeGroups /
ConsumerGroupDescribe (through confluent-kafka's admin client) and the admin API's per-member
protocol show the group's type and its members' protocols at each step. The same with the group's
coordinator killed with kill -9 in the middle of the migration (3 nodes).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import ConsumerGroupType

import clients
import kip848
from cluster import Cluster
from groups import all_records, double_ownership, unique, wait_owned_exactly_once, wait_until

PARTITIONS = 6
T = 30


class Writer:
    """Produces keyed records to the topic until stopped; remembers every acknowledged one."""

    def __init__(self, bootstrap: str, topic: str):
        self.acked: set[tuple[str, int, int]] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = clients.producer(bootstrap)
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.add((msg.topic(), msg.partition(), msg.offset()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(self._topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=self._delivered)
            self._producer.poll(0)
            i += 1
            time.sleep(0.01)
        self._producer.flush(60)

    def stop(self) -> set[tuple[str, int, int]]:
        self._stop.set()
        self._thread.join(90)
        assert not self.failed, f"produce failures: {self.failed[:3]}"
        return self.acked


def classic_conf(bootstrap: str, group: str, topic: str, i: int) -> dict:
    return dict(
        client="confluent",
        bootstrap=bootstrap,
        group=group,
        topics=[topic],
        assignor="range",
        client_id=f"e2e-migrate-classic-{i}",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=15000,
    )


def consumer_conf(bootstrap: str, group: str, topic: str, i: int) -> dict:
    return kip848.member_conf(bootstrap, group, topic, client_id=f"e2e-migrate-consumer-{i}")


def group_type(bootstrap: str, group: str):
    """The group's type as ListGroups shows it, and as confluent-kafka's DescribeConsumerGroups
    finds it (ConsumerGroupDescribe, falling back to DescribeGroups for a classic group)."""
    admin = clients.admin_client(bootstrap)
    listed = admin.list_consumer_groups(request_timeout=T).result(T)
    entry = next((g for g in listed.valid if g.group_id == group), None)
    described = admin.describe_consumer_groups([group], request_timeout=T)[group].result(T)
    return (entry.type if entry else None), described.type


def member_protocols(server, group: str) -> dict[str, str]:
    """client id -> the protocol the coordinator says the member speaks (admin API)."""
    status, body = server.http_get(f"/v1/groups/{group}")
    assert status == 200, body
    return {m["client_id"]: m["protocol"] for m in json.loads(body)["members"]}


def assert_no_loss_and_duplicates_only_after_commits(members, produced: set) -> None:
    """Every acknowledged record was consumed; a record consumed twice was past the last commit its
    first reader had acknowledged when the second reader got it."""
    counts = all_records(members)
    missing = produced - set(counts)
    assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:5]}"
    readers: dict[tuple[str, int, int], list[tuple[float, object]]] = {}
    for m in members:
        for e in m.of("records"):
            for t, p, o, _ in e["recs"]:
                readers.setdefault((t, p, o), []).append((e["ts"], m))
    for (t, p, o), seen in readers.items():
        if len(seen) < 2:
            continue
        seen.sort(key=lambda x: x[0])
        (_, first), (again_at, _) = seen[0], seen[1]
        acked_before = [
            off
            for e in first.of("commit")
            if e["error"] is None and e["ts"] <= again_at
            for tt, pp, off in e["offsets"]
            if (tt, pp) == (t, p) and (tt, pp) not in {(x, y) for x, y, _ in e["errors"]}
        ]
        assert max(acked_before, default=-1) <= o, (
            f"{(t, p, o)} read again although {first.name} had committed {max(acked_before)} for it before"
        )


def migrate(members, bootstrap: str, group: str, topic: str, server_of=None, midway=None) -> None:
    """The migration: 3 classic members; each restarted with group.protocol=consumer; then two
    restarted back to classic, the last of which turns the group classic again. `server_of()` is
    the node whose admin API to ask; `midway()` runs when the group is half migrated."""
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    writer = Writer(bootstrap, topic)
    everyone = []

    def start(name, conf):
        m = members(name, **conf)
        everyone.append(m)
        return m

    def settle(live, expect_type, protocols: dict[str, str]):
        wait_owned_exactly_once(live, all_parts, timeout=90)
        assert not double_ownership(everyone), double_ownership(everyone)
        wait_until(
            lambda: group_type(bootstrap, group) == (expect_type, expect_type),
            lambda: f"group {group} listed and described as {expect_type}: {group_type(bootstrap, group)}",
        )
        if server_of is not None:
            wait_until(
                lambda: member_protocols(server_of(), group) == protocols,
                lambda: f"member protocols {protocols}: {member_protocols(server_of(), group)}",
            )

    live = [start(f"classic{i}", classic_conf(bootstrap, group, topic, i)) for i in range(3)]
    settle(live, ConsumerGroupType.CLASSIC, {f"e2e-migrate-classic-{i}": "classic" for i in range(3)})

    # The rolling upgrade: each classic member replaced by a consumer-protocol one.
    for i in range(3):
        live[i].close()
        live[i] = start(f"consumer{i}", consumer_conf(bootstrap, group, topic, i))
        protocols = {f"e2e-migrate-consumer-{j}": "consumer" for j in range(i + 1)}
        protocols |= {f"e2e-migrate-classic-{j}": "classic" for j in range(i + 1, 3)}
        settle(live, ConsumerGroupType.CONSUMER, protocols)
        if i == 0 and midway is not None:
            midway()
            settle(live, ConsumerGroupType.CONSUMER, protocols)

    # The rollback: classic members join the consumer group; when the last consumer-protocol
    # member leaves, the group is classic again.
    live[0].close()
    live[0] = start("back0", classic_conf(bootstrap, group, topic, 10))
    settle(
        live,
        ConsumerGroupType.CONSUMER,
        {"e2e-migrate-classic-10": "classic", "e2e-migrate-consumer-1": "consumer", "e2e-migrate-consumer-2": "consumer"},
    )
    live[1].close()
    live[1] = start("back1", classic_conf(bootstrap, group, topic, 11))
    settle(
        live,
        ConsumerGroupType.CONSUMER,
        {"e2e-migrate-classic-10": "classic", "e2e-migrate-classic-11": "classic", "e2e-migrate-consumer-2": "consumer"},
    )
    live[2].close()
    live.pop()
    settle(live, ConsumerGroupType.CLASSIC, {"e2e-migrate-classic-10": "classic", "e2e-migrate-classic-11": "classic"})

    produced = writer.stop()
    ends: dict[tuple[str, int], int] = {}
    for t, p, o in produced:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)

    def all_consumed_and_committed():
        acked: dict = {}
        for m in everyone:
            for tp, o in m.acked_commits().items():
                acked[tp] = max(acked.get(tp, -1), o)
        return produced <= set(all_records(everyone)) and all(acked.get(tp, -1) >= end for tp, end in ends.items())

    wait_until(all_consumed_and_committed, lambda: f"{len(produced)} records consumed and committed; " + "; ".join(m.describe() for m in live))
    assert_no_loss_and_duplicates_only_after_commits(everyone, produced)
    for m in everyone:
        assert not [e for e in m.errors() if "FATAL" in e.upper()], f"{m.name}: {m.errors()[:3]}"
    for m in live:
        m.close()


def test_rolling_upgrade_to_the_consumer_protocol_and_back(corral_factory, members):
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic, group = unique("migrate"), unique("migrate")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    migrate(members, b, group, topic, server_of=lambda: server)


@pytest.fixture
def three_nodes(corral_factory, request):
    c = Cluster(corral_factory, size=3, relays=False, extra_config=kip848.CONFIG)
    request.addfinalizer(c.close)
    return c.start()


def test_migration_survives_kill9_of_the_coordinator(three_nodes, members):
    cluster = three_nodes
    b = cluster.bootstrap
    topic, group = unique("migrate-failover"), unique("migrate-failover")
    cluster.create_topic(topic, PARTITIONS)
    killed = []

    def kill_coordinator():
        # A half-migrated group: classic members inside a consumer group. Another node takes it
        # over from the Raft log; the killed node comes back (as its pod would) and catches up.
        old = cluster.coordinator(group)
        cluster.nodes[old].kill9()
        killed.append(old)
        survivors = [i for i in range(cluster.size) if i != old]
        cluster.coordinator(group, among=survivors, other_than=old, timeout=60)
        cluster.nodes[old].start()

    def admin_node():
        return cluster.nodes[cluster.coordinator(group)]

    migrate(members, b, group, topic, server_of=admin_node, midway=kill_coordinator)
    assert killed, "the coordinator was killed"
