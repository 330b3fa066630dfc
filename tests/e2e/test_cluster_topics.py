"""Topics in a 3-node corral cluster: the metadata Raft group replicates them, each partition is
placed on one node (local storage), and Metadata names that node as its leader.

A topic request sent to any node reaches the metadata group's leader (the node forwards it); every
node then knows the topic, with the same id and the same leaders. Real clients (confluent-kafka)
produce and consume through the leaders Metadata names; raw Produce, Fetch and ListOffsets sent to
a node that does not hold the partition get NOT_LEADER_OR_FOLLOWER. A node that was down while
topics changed catches up when it comes back.
"""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType

from cluster import Cluster, create_topics_v2, parse_create_topics_v2
from kafkawire import Conn, fetch_v4, parse_fetch_v4, parse_produce_v3, produce_v3, record_batch

NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10


def controller(cluster: Cluster, among: list[int] | None = None, timeout: float = 30.0) -> int:
    """The controller (metadata group leader) every node in `among` names."""
    among = list(range(cluster.size)) if among is None else among
    deadline = time.monotonic() + timeout
    while True:
        named = {cluster.topic_as_seen_by(i, "__consumer_offsets")[0] for i in among}
        if len(named) == 1 and named <= set(among):
            return named.pop()
        assert time.monotonic() < deadline, f"nodes name different controllers: {named}"
        time.sleep(0.05)


def raw_produce(cluster: Cluster, node: int, topic: str, partition: int, value: bytes) -> int:
    conn = Conn(f"127.0.0.1:{cluster.kafka[node]}")
    try:
        conn.send(produce_v3(1, topic, partition, record_batch([(None, value)])))
        _, results = parse_produce_v3(conn.recv_frame())
        return results[(topic, partition)][0]
    finally:
        conn.close()


def raw_fetch(cluster: Cluster, node: int, topic: str, partition: int) -> int:
    conn = Conn(f"127.0.0.1:{cluster.kafka[node]}")
    try:
        conn.send(fetch_v4(1, topic, partition, 0))
        _, results = parse_fetch_v4(conn.recv_frame())
        return results[(topic, partition)][0]
    finally:
        conn.close()


def produce_and_consume(cluster: Cluster, topic: str, partitions: int, per_partition: int = 20) -> None:
    """confluent-kafka produces to every partition (acks=all) and reads everything back."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    failures = []
    sent = {p: [f"{topic}-{p}-{i}".encode() for i in range(per_partition)] for p in range(partitions)}
    for p, values in sent.items():
        for v in values:
            producer.produce(topic, v, partition=p, on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0
    assert failures == []

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 30
    try:
        while sum(map(len, got.values())) < partitions * per_partition and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    assert got == sent


def test_topics_are_replicated_and_each_partition_lives_on_one_node(cluster):
    leader = controller(cluster)
    other = next(i for i in range(cluster.size) if i != leader)
    topic = f"placed-{uuid.uuid4().hex[:8]}"

    # Sent to a node that does not lead the metadata group: it forwards the change.
    leaders = cluster.create_topic(topic, 6, via=other)
    assert sorted(leaders.count(n) for n in range(cluster.size)) == [2, 2, 2], leaders

    produce_and_consume(cluster, topic, 6)

    for p, owner in enumerate(leaders):
        elsewhere = (owner + 1) % cluster.size
        assert raw_produce(cluster, elsewhere, topic, p, b"misrouted") == NOT_LEADER_OR_FOLLOWER
        assert raw_fetch(cluster, elsewhere, topic, p) == NOT_LEADER_OR_FOLLOWER
        assert raw_produce(cluster, owner, topic, p, b"routed") == 0
        assert raw_fetch(cluster, owner, topic, p) == 0
        # Only the owner holds the partition's files.
        for n in range(cluster.size):
            assert cluster.nodes[n].partition_dir(topic, p).exists() == (n == owner), (p, n)

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka[other]}"})
    for future in admin.create_partitions([NewPartitions(topic, 9)]).values():
        future.result(30)
    grown = cluster.wait_for_topic(topic, 9)
    assert grown[:6] == leaders
    assert sorted(grown.count(n) for n in range(cluster.size)) == [3, 3, 3], grown
    for p in range(6, 9):
        assert raw_produce(cluster, grown[p], topic, p, b"grown") == 0

    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while any(cluster.topic_as_seen_by(n, topic)[1] != UNKNOWN_TOPIC_OR_PARTITION for n in range(cluster.size)):
        assert time.monotonic() < deadline, "the deleted topic is still reported"
        time.sleep(0.05)
    deadline = time.monotonic() + 10
    while any(cluster.nodes[grown[p]].partition_dir(topic, p).exists() for p in range(9)):
        assert time.monotonic() < deadline, "a deleted partition's files are still there"
        time.sleep(0.05)


def test_concurrent_creates_of_one_name_on_different_nodes_make_one_topic(cluster):
    """Each node checks its own catalog before proposing; the metadata group's order decides."""
    controller(cluster)
    topic = f"race-{uuid.uuid4().hex[:8]}"
    outcomes = {}

    def create(node: int) -> None:
        conn = Conn(f"127.0.0.1:{cluster.kafka[node]}")
        try:
            conn.send(create_topics_v2(1, topic, 3))
            outcomes[node] = parse_create_topics_v2(conn.recv_frame())[topic]
        finally:
            conn.close()

    threads = [threading.Thread(target=create, args=(n,)) for n in range(cluster.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes.values()) == [0, 36, 36], outcomes  # one created, TOPIC_ALREADY_EXISTS twice
    cluster.wait_for_topic(topic, 3)


def test_a_node_that_was_down_catches_up_on_topic_changes(cluster):
    controller(cluster)
    kept = f"kept-{uuid.uuid4().hex[:8]}"
    dropped = f"dropped-{uuid.uuid4().hex[:8]}"
    added = f"added-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(kept, 3)
    dropped_leaders = cluster.create_topic(dropped, 3)

    down = 2
    cluster.nodes[down].kill9()
    live = [0, 1]
    new_leader = controller(cluster, among=live)
    conn_admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{cluster.kafka[i]}" for i in live)})
    for future in conn_admin.delete_topics([dropped]).values():
        future.result(30)
    # Created while node 2 is down: its partitions placed on node 2 are created when it is back.
    added_leaders = cluster.create_topic(added, 3, via=new_leader, among=live)

    cluster.nodes[down].restart()
    assert cluster.wait_for_topic(added, 3) == added_leaders
    cluster.wait_for_topic(kept, 3)
    deadline = time.monotonic() + 30
    while cluster.topic_as_seen_by(down, dropped)[1] != UNKNOWN_TOPIC_OR_PARTITION:
        assert time.monotonic() < deadline, "the returning node still reports the deleted topic"
        time.sleep(0.05)
    for p, owner in enumerate(dropped_leaders):
        if owner == down:
            assert not cluster.nodes[down].partition_dir(dropped, p).exists()
    produce_and_consume(cluster, added, 3, per_partition=5)

    # What it caught up on is on its disk: after another restart it has the same topics at once.
    cluster.nodes[down].stop()
    cluster.nodes[down].start()
    assert cluster.topic_as_seen_by(down, added)[1:] == (0, added_leaders)
    assert cluster.topic_as_seen_by(down, dropped)[1] == UNKNOWN_TOPIC_OR_PARTITION


def test_a_node_that_missed_a_purged_log_installs_the_catalog_snapshot(cluster):
    """The metadata group snapshots its catalog every 1,000 entries and purges its log up to it;
    a node that was down for longer gets the snapshot and reconciles its topics with it."""
    controller(cluster)
    doomed_leaders = cluster.create_topic("doomed", 3)
    cluster.create_topic("grown", 3)
    down = 2
    cluster.nodes[down].kill9()
    leader = controller(cluster, among=[0, 1])
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka[leader]}"})
    for future in admin.delete_topics(["doomed"]).values():
        future.result(30)
    for future in admin.create_partitions([NewPartitions("grown", 6)]).values():
        future.result(30)
    # The grown topic's configs change too: the snapshot's topic differs in both.
    limit = [ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "grown", incremental_configs=limit)]).values():
        future.result(30)
    # So does a group's own config, which the snapshot also carries.
    session = [ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "configured", incremental_configs=session)]).values():
        future.result(30)
    bulk = [f"bulk-{i:04d}" for i in range(1050)]
    conn = Conn(f"127.0.0.1:{cluster.kafka[leader]}", timeout=60)
    try:
        for start in range(0, len(bulk), 50):
            conn.send(create_topics_v2(start, bulk[start : start + 50], 1))
            errors = parse_create_topics_v2(conn.recv_frame())
            assert set(errors.values()) == {0}, errors
    finally:
        conn.close()
    last = cluster.wait_for_topic(bulk[-1], 1, among=[0, 1])

    cluster.nodes[down].restart()
    assert cluster.wait_for_topic(bulk[-1], 1, timeout=60) == last
    grown = cluster.wait_for_topic("grown", 6)
    assert cluster.topic_as_seen_by(down, "doomed")[1] == UNKNOWN_TOPIC_OR_PARTITION
    assert "installed a metadata snapshot" in cluster.nodes[down].log_path.read_text()
    for p, owner in enumerate(doomed_leaders):
        if owner == down:
            assert not cluster.nodes[down].partition_dir("doomed", p).exists()
    for p in range(3, 6):
        if grown[p] == down:
            assert raw_produce(cluster, down, "grown", p, b"after the snapshot") == 0
    down_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka[down]}"})
    described = down_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "grown")])
    assert next(iter(described.values())).result(30)["max.message.bytes"].value == "2000"
    described = down_admin.describe_configs([ConfigResource(ResourceType.GROUP, "configured")])
    assert next(iter(described.values())).result(30)["consumer.session.timeout.ms"].value == "50000"
    for p in range(6):
        if grown[p] == down:
            assert raw_produce(cluster, down, "grown", p, b"x" * 5000) == MESSAGE_TOO_LARGE
    on_down = [t for t in bulk[:60] if cluster.topic_as_seen_by(down, t)[2] == [down]]
    assert on_down, "no bulk topic was placed on the returning node"
    for t in on_down:
        assert raw_produce(cluster, down, t, 0, b"after the snapshot") == 0
