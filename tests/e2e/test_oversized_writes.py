"""Group writes larger than one `__consumer_offsets` batch, from real clients. An offset commit
over `max.message.bytes` is refused with Kafka's code; group metadata goes up to the bound of the
coordinator's own log and is refused beyond it. Either refusal comes before the Raft log, so the
coordinator partition keeps serving and the node starts again (a committed entry it cannot apply
would stop both)."""

from __future__ import annotations

import struct
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import clients
import groupwire as gw
from cluster import offsets_partition
from groups import GROUP_CONFIG, unique

PARTITIONS = 300
METADATA = "m" * 4000  # each one within offset.metadata.max.bytes (4096)


def committer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "logger": clients.RDKAFKA_LOG})


def commit_codes(consumer: Consumer, offsets: list[TopicPartition]) -> dict[int, int]:
    """Commits synchronously; the code of every partition (0 where it was committed)."""
    try:
        result = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as e:
        # librdkafka raises with the first partition's error; every partition failed alike.
        return {tp.partition: e.args[0].code() for tp in offsets}
    return {tp.partition: (tp.error.code() if tp.error else 0) for tp in result}


def committed(consumer: Consumer, topic: str, partitions) -> dict[int, tuple[int, str | None]]:
    got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
    return {tp.partition: (tp.offset, tp.metadata) for tp in got}


def test_an_oversized_offset_commit_is_refused_and_the_coordinator_keeps_serving(corral, topic_name):
    clients.create_topic(corral.bootstrap, topic_name, partitions=PARTITIONS)
    group = unique("big-commit")
    c = committer(corral.bootstrap, group)
    try:
        big = [TopicPartition(topic_name, p, 1, metadata=METADATA) for p in range(PARTITIONS)]
        codes = commit_codes(c, big)
        assert set(codes.values()) == {KafkaError.INVALID_COMMIT_OFFSET_SIZE}, codes
        # The next commit of the same group (so the same coordinator partition) succeeds.
        small = [TopicPartition(topic_name, p, 7, metadata="ok") for p in (0, 299)]
        assert commit_codes(c, small) == {0: 0, 299: 0}
        assert committed(c, topic_name, [0, 1, 299]) == {0: (7, "ok"), 1: (-1001, None), 299: (7, "ok")}
    finally:
        c.close()

    corral.restart()
    c = committer(corral.bootstrap, group)
    try:
        assert committed(c, topic_name, [0, 299]) == {0: (7, "ok"), 299: (7, "ok")}
        assert commit_codes(c, [TopicPartition(topic_name, 5, 9)]) == {5: 0}
    finally:
        c.close()


def group_metadata_value(bootstrap: str, group: str) -> bytes | None:
    """The group's latest metadata record (key type 2) in `__consumer_offsets`, read by a Kafka
    client (confluent-kafka) from the start of the group's partition to its end."""
    partition = offsets_partition(group, 50)
    _, high = clients.watermarks(bootstrap, "__consumer_offsets", partition)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False, "logger": clients.RDKAFKA_LOG})
    latest = None
    try:
        consumer.assign([TopicPartition("__consumer_offsets", partition, 0)])
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, f"__consumer_offsets-{partition} not read to {high}"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            key = msg.key()
            if struct.unpack(">h", key[:2])[0] == 2 and key[4:].decode() == group:
                latest = msg.value()
            if msg.offset() + 1 >= high:
                return latest
    finally:
        consumer.close()


def test_group_metadata_larger_than_a_user_batch_is_stored_and_replayed(corral_factory):
    """A group whose metadata record exceeds a user topic's 1 MB batch (a 10,000-member group's
    does) is stored: the coordinator's own log bounds it, not max.message.bytes. It replays after
    kill -9 and a Kafka client reads it from __consumer_offsets."""
    server = corral_factory(config=GROUP_CONFIG)
    group = unique("big-sync")
    big = bytes(range(256)) * (8 << 10)  # 2 MiB
    with gw.GroupConn(server.bootstrap) as conn:
        j = conn.join(group, protocols=[("range", gw.subscription(["t"]))])
        assert j.error == gw.NONE, j
        err, data = conn.sync(group, j.generation, j.member_id, [(j.member_id, big)])
        assert (err, data == big) == (gw.NONE, True), f"SyncGroup answered {err}"
    value = group_metadata_value(server.bootstrap, group)
    assert value is not None and len(value) > len(big), "the group's record, as a Kafka client reads it"
    server.kill9()
    server.start()
    with gw.GroupConn(server.bootstrap) as conn:
        d = conn.describe(group)
        assert (d.state, len(d.members)) == ("Stable", 1), d
        assert d.members[0][0] == j.member_id and d.members[0][4] == big, "the member and its assignment replayed"
        assert conn.heartbeat(group, j.generation, j.member_id) == gw.NONE


def test_an_assignment_beyond_the_coordinators_bound_fails_sync_group_and_the_group_recovers(corral_factory):
    server = corral_factory(config=GROUP_CONFIG)
    group = unique("huge-sync")
    with gw.GroupConn(server.bootstrap) as conn:
        j = conn.join(group, protocols=[("range", gw.subscription(["t"]))])
        assert j.error == gw.NONE, j
        # 65 MiB of assignment: more than one entry of the coordinator's Raft log carries (64 MiB).
        err, _ = conn.sync(group, j.generation, j.member_id, [(j.member_id, b"\0" * (65 << 20))])
        assert err == -1, f"SyncGroup answered {err}, Kafka answers UNKNOWN_SERVER_ERROR (-1)"
        # The member rejoins and completes a rebalance with an assignment that fits.
        j = conn.join(group, member_id=j.member_id, protocols=[("range", gw.subscription(["t"]))])
        assert j.error == gw.NONE, j
        err, data = conn.sync(group, j.generation, j.member_id, [(j.member_id, gw.assignment({"t": [0]}))])
        assert err == gw.NONE and gw.parse_assignment(data) == {"t": [0]}
    server.restart()
    with gw.GroupConn(server.bootstrap) as conn:
        assert conn.describe(group).state in ("Stable", "Empty", "PreparingRebalance")


def test_large_group_metadata_survives_kill9_of_its_coordinator(corral_factory, request):
    """The same 2 MiB group record in a 3-node cluster: replicated through Raft, it is there on the
    node that takes the group over when its coordinator is killed."""
    from cluster import Cluster

    cluster = Cluster(corral_factory, size=3, relays=False, extra_config=GROUP_CONFIG)
    request.addfinalizer(cluster.close)
    cluster.start()
    group = unique("big-failover")
    big = bytes(range(256)) * (8 << 10)  # 2 MiB
    old = cluster.coordinator(group)
    with gw.GroupConn(f"127.0.0.1:{cluster.kafka[old]}") as conn:
        j = conn.join(group, protocols=[("range", gw.subscription(["t"]))], session_timeout_ms=60000)
        assert j.error == gw.NONE, j
        err, data = conn.sync(group, j.generation, j.member_id, [(j.member_id, big)])
        assert (err, data == big) == (gw.NONE, True), f"SyncGroup answered {err}"
    cluster.nodes[old].kill9()
    survivors = [i for i in range(cluster.size) if i != old]
    new = cluster.coordinator(group, among=survivors, other_than=old, timeout=60)
    with gw.GroupConn(f"127.0.0.1:{cluster.kafka[new]}") as conn:
        d = conn.describe(group)
        assert (d.state, len(d.members)) == ("Stable", 1), d
        assert d.members[0][4] == big, "the assignment, from the new coordinator's log"
        assert conn.heartbeat(group, j.generation, j.member_id) == gw.NONE
