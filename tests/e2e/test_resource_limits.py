"""Everything a client can create on a node has a limit, refused with its code while the rest of
the node keeps working, and counted in `/metrics`: partitions per node
(`topics.max_partitions_per_node`), Kafka 4's `segment.bytes` minimum, idempotent producers per
partition (`storage.max_producer_states_per_partition`), groups per coordinator partition
(`groups.max_groups_per_partition`) and members waiting to rejoin (`groups.max_pending_members`).
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

import clients
import groupwire as gw
import kafkawire as kw

POLICY_VIOLATION = 44
INVALID_CONFIG = 40
GROUP_MAX_SIZE_REACHED = 81
MEMBER_ID_REQUIRED = 79
THROTTLING_QUOTA_EXCEEDED = 89


def metric(server, name: str, label: str = "") -> float:
    status, text = server.http_get("/metrics")
    assert status == 200
    pattern = rf"^{name}{{[^}}]*{label}[^}}]*}} (\S+)$" if label else rf"^{name}(?:{{[^}}]*}})? (\S+)$"
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def create_error(admin, topic: NewTopic) -> int | None:
    try:
        admin.create_topics([topic], request_timeout=15)[topic.topic].result(timeout=20)
        return None
    except KafkaException as e:
        return e.args[0].code()


def test_partitions_per_node_are_limited(corral_factory, topic_name):
    server = corral_factory(config="[topics]\nmax_partitions_per_node = 10\n")
    admin = clients.admin_client(server.bootstrap)
    assert create_error(admin, NewTopic(f"{topic_name}-a", 6)) is None
    # 6 + 5 > 10: refused as a whole, nothing created.
    assert create_error(admin, NewTopic(f"{topic_name}-b", 5)) == POLICY_VIOLATION
    assert f"{topic_name}-b" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as grown:
        admin.create_partitions([NewPartitions(f"{topic_name}-a", 11)], request_timeout=15)[f"{topic_name}-a"].result(timeout=20)
    assert grown.value.args[0].code() == POLICY_VIOLATION
    assert metric(server, "corral_limits_reached_total", 'limit="topics.max_partitions_per_node"') >= 2
    # What fits still fits, and the existing topic serves.
    assert create_error(admin, NewTopic(f"{topic_name}-c", 4)) is None
    delivered = clients.produce_all(clients.producer(server.bootstrap), f"{topic_name}-a", [(b"k", b"v")], partition=5)
    assert delivered[0][3] == 0
    # The limit holds across a restart (the count comes from the replicated catalog).
    server.restart()
    assert create_error(clients.admin_client(server.bootstrap), NewTopic(f"{topic_name}-d", 1)) == POLICY_VIOLATION


def test_segment_bytes_has_kafka_4s_minimum(corral, topic_name):
    admin = clients.admin_client(corral.bootstrap)
    assert create_error(admin, NewTopic(f"{topic_name}-small", 1, config={"segment.bytes": "4096"})) == INVALID_CONFIG
    assert create_error(admin, NewTopic(f"{topic_name}-mib", 1, config={"segment.bytes": str(1 << 20)})) is None


def idempotent_produce(conn: kw.Conn, corr: int, topic: str, producer_id: int, sequence: int) -> tuple[int, int]:
    batch = kw.record_batch([(b"k", b"from %d" % producer_id)], producer=(producer_id, 0, sequence))
    conn.send(kw.produce_v3(corr, topic, 0, batch))
    got_corr, results = kw.parse_produce_v3(conn.recv_frame())
    assert got_corr == corr
    return results[(topic, 0)]


def test_producer_states_per_partition_are_bounded(corral_factory, topic_name):
    server = corral_factory(config="[storage]\nmax_producer_states_per_partition = 3\n")
    clients.create_topic(server.bootstrap, topic_name)
    conn = kw.Conn(server.bootstrap)
    # Producer ids are the client's to choose: six of them on one partition.
    for pid in range(1000, 1006):
        assert idempotent_produce(conn, pid, topic_name, pid, 0)[0] == 0
    assert metric(server, "corral_producer_states_evicted_total") == 3
    # A producer still tracked is still checked: its retry is a duplicate, a gap is refused.
    err, offset = idempotent_produce(conn, 2000, topic_name, 1005, 0)
    assert (err, offset) == (0, 5), "the retry of producer 1005's batch is acknowledged at its first offset"
    assert idempotent_produce(conn, 2001, topic_name, 1005, 7)[0] == 45, "OUT_OF_ORDER_SEQUENCE_NUMBER"
    # A forgotten one starts again, as after producer.id.expiration.ms.
    assert idempotent_produce(conn, 2002, topic_name, 1000, 1)[0] == 0
    conn.close()


def test_groups_per_coordinator_partition_are_bounded(corral_factory, topic_name):
    config = "[groups]\noffsets_partitions = 1\nmax_groups_per_partition = 2\ninitial_rebalance_delay_ms = 0\n"
    server = corral_factory(config=config)
    clients.create_topic(server.bootstrap, topic_name)

    def commit(group: str) -> int | None:
        c = clients.consumer(server.bootstrap, **{"group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
            return None
        except KafkaException as e:
            return e.args[0].code()
        finally:
            c.close()

    assert commit("first") is None
    assert commit("second") is None
    assert commit("third") == THROTTLING_QUOTA_EXCEEDED
    with gw.GroupConn(server.bootstrap) as conn:
        assert conn.join("joined", version=4).error == THROTTLING_QUOTA_EXCEEDED
        # Existing groups keep working: a member joins one of them.
        assert conn.join("first", version=4).error == MEMBER_ID_REQUIRED
    assert commit("second") is None
    assert metric(server, "corral_limits_reached_total", 'limit="groups.max_groups_per_partition"') >= 2


def test_members_waiting_to_rejoin_are_bounded(corral_factory):
    server = corral_factory(config="[groups]\nmax_pending_members = 2\ninitial_rebalance_delay_ms = 0\n")
    with gw.GroupConn(server.bootstrap) as conn:
        waiting = [conn.join("g", version=4) for _ in range(2)]
        assert [r.error for r in waiting] == [MEMBER_ID_REQUIRED] * 2
        refused = conn.join("g", version=4)
        assert (refused.error, refused.member_id) == (GROUP_MAX_SIZE_REACHED, "")
        # One of the waiting members completes its join: the group forms as usual.
        joined = conn.join("g", waiting[0].member_id, version=4, rebalance_timeout_ms=1000)
        assert joined.error == 0 and joined.member_id == waiting[0].member_id
    assert metric(server, "corral_limits_reached_total", 'limit="groups.max_pending_members"') >= 1
