"""The real Kafka cluster the suite compares corral with (apache_kafka.py, conftest's
`apache_kafka` and `apache_kafka_classic`): three brokers that replicate, survive the loss of one,
take a killed broker back, and are whole again for the next test when a test leaves one down.

These check the fixture itself, which later tests (the upstream role, broker failures) rely on:
if it silently gave a cluster of fewer brokers, or one that serves KIP-848 when asked not to,
those tests would prove nothing.
"""

from __future__ import annotations

from confluent_kafka.admin import NewTopic

import clients
import kafkawire as kw
from groups import unique, wait_until

CONSUMER_GROUP_HEARTBEAT = 68
UNSUPPORTED_VERSION = 35






def consumer_group_heartbeat_error(address: str, group: str) -> int:
    """The error code of a KIP-848 join (ConsumerGroupHeartbeat v0, epoch 0, flexible: request
    header v2, response header v1) sent to `address`."""
    header = kw.i16(CONSUMER_GROUP_HEARTBEAT) + kw.i16(0) + kw.i32(7) + kw.string("corral-e2e-raw") + kw.uvarint(0)
    body = kw.compact_string(group) + kw.compact_string("") + kw.i32(0) + kw.compact_string(None) + kw.compact_string(None) + kw.i32(30000)
    body += kw.uvarint(2) + kw.compact_string("t") + kw.compact_string(None) + kw.uvarint(1) + kw.uvarint(0)
    c = kw.Conn(address)
    try:
        c.send(kw.i32(len(header) + len(body)) + header + body)
        frame = c.recv_frame()
    finally:
        c.close()
    r = kw.Reader(frame)
    assert r.take("i") == 7 and r.take("b") == 0  # correlation id, no tagged fields
    r.take("i")  # throttle
    return r.take("h")


def test_three_brokers_replicate_and_survive_a_killed_broker(apache_kafka):
    assert len(apache_kafka.ports) == 3 and len(set(apache_kafka.ports)) == 3
    assert apache_kafka.bootstrap == ",".join(f"127.0.0.1:{p}" for p in apache_kafka.ports)
    for b in apache_kafka.brokers:
        assert apache_kafka.brokers_seen_by(b) == {1, 2, 3}
    topic = unique("kafka-rf3")
    admin = clients.admin_client(apache_kafka.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2)], request_timeout=30)[topic].result(30)
    # The broker that answers may not have the new topic's metadata yet.
    meta = wait_until(
        lambda: len((m := admin.list_topics(topic, timeout=30).topics[topic]).partitions) == 2 and m, f"{topic}'s partitions in metadata", 30
    )
    # The broker defaults: replication factor 3, every replica in sync.
    assert sorted(len(p.replicas) for p in meta.partitions.values()) == [3, 3], meta.partitions
    assert sorted(len(p.isrs) for p in meta.partitions.values()) == [3, 3], meta.partitions

    # acks=all with one broker of three down: min.insync.replicas=2 is still met.
    apache_kafka.kill(1)
    p = clients.producer(apache_kafka.bootstrap)
    delivered = clients.produce_all(p, topic, [(b"k%d" % i, b"v%d" % i) for i in range(20)])
    assert len(delivered) == 20
    apache_kafka.start(1)
    for b in apache_kafka.brokers:
        assert apache_kafka.brokers_seen_by(b) == {1, 2, 3}
    # Left down on purpose: the next test gets the cluster whole again.
    apache_kafka.kill(2)
    assert not apache_kafka.brokers[2].alive()


def test_a_broker_left_down_is_restarted_for_the_next_test(apache_kafka):
    assert all(b.alive() for b in apache_kafka.brokers)
    assert apache_kafka.brokers[2].starts == 2, "broker 2 was not restarted after the test before killed it"
    for b in apache_kafka.brokers:
        assert apache_kafka.brokers_seen_by(b) == {1, 2, 3}


def test_classic_only_cluster_serves_no_kip848(apache_kafka, apache_kafka_classic):
    # Kafka's default serves KIP-848; the classic-only cluster (the deprecated
    # group.coordinator.rebalance.protocols=classic and the group.version=0 feature level) answers
    # ConsumerGroupHeartbeat with UNSUPPORTED_VERSION, which makes a Java consumer with
    # group.protocol=consumer fail ("The cluster does not support the new CONSUMER group
    # protocol"). Kafka 4.4 still lists the API in ApiVersions either way.
    assert consumer_group_heartbeat_error(apache_kafka.brokers[0].address, unique("kip848")) != UNSUPPORTED_VERSION
    for b in apache_kafka_classic.brokers:
        assert consumer_group_heartbeat_error(b.address, unique("kip848")) == UNSUPPORTED_VERSION
        assert apache_kafka_classic.brokers_seen_by(b) == {1, 2, 3}
    assert set(apache_kafka_classic.ports).isdisjoint(apache_kafka.ports)
