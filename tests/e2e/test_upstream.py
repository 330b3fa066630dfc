"""corral in front of a real Apache Kafka 4.4 cluster (`storage.backend = "upstream"`): the
upstream holds the records, corral runs the groups and keeps their offsets.

The Kafka behind corral is `apache_kafka_classic`: it serves no KIP-848, so a KIP-848 consumer
that works here works because corral runs its group. Records produced through corral are read
back from Kafka directly; committed offsets are read from corral, and Kafka is shown to know
nothing of the group.
"""

from __future__ import annotations

import os
import time

import pytest

import clients
import kafkawire as kw
from apache_kafka import corral_upstream_config
from groups import committed, group_consume, high_watermarks, listed_groups, unique, wait_until

PARTITIONS = 3
COUNT = 300


upstream_config = corral_upstream_config


@pytest.fixture
def front(corral_factory, apache_kafka_classic):
    """corral in front of the classic-only Kafka cluster."""
    return corral_factory(config=upstream_config(apache_kafka_classic.bootstrap))


def test_produce_and_group_consume_through_corral_records_in_kafka_offsets_in_corral(front, apache_kafka_classic):
    topic, group = unique("up-roundtrip"), unique("up-group")
    clients.create_topic(front.bootstrap, topic, partitions=PARTITIONS)
    values = [f"value-{i}".encode() for i in range(COUNT)]
    delivered = clients.produce_all(clients.producer(front.bootstrap), topic, [(str(i).encode(), v) for i, v in enumerate(values)])
    assert sorted(v for _, v, _, _ in delivered) == sorted(values)

    # The records are in Kafka, read from Kafka directly, where corral said they are.
    direct = clients.consume_all(apache_kafka_classic.bootstrap, topic)
    in_kafka = {(r.partition, r.offset): r.value for rs in direct.values() for r in rs}
    assert {(p, o): v for _, v, p, o in delivered} == in_kafka

    # A group whose coordinator is corral consumes all of them once.
    got = group_consume(front.bootstrap, topic, group, COUNT)
    assert sorted(v for _, _, v in got) == sorted(values)

    # The offsets are corral's: committed there, unknown to Kafka.
    ends = {(topic, p): len(direct.get(p, [])) for p in range(PARTITIONS)}
    assert committed(front.bootstrap, group, list(ends)) == ends
    assert group in listed_groups(front.bootstrap)
    assert group not in listed_groups(apache_kafka_classic.bootstrap)


def test_kip848_consumer_in_front_of_a_kafka_without_kip848(front):
    topic, group = unique("up-kip848"), unique("up-kip848-group")
    clients.create_topic(front.bootstrap, topic, partitions=PARTITIONS)
    clients.produce_all(clients.producer(front.bootstrap), topic, [(None, f"v{i}".encode()) for i in range(60)])
    got = group_consume(front.bootstrap, topic, group, 60, protocol="consumer")
    assert sorted(v for _, _, v in got) == sorted(f"v{i}".encode() for i in range(60))
    # Each partition that got records is committed at its end; the sticky partitioner may leave
    # one without records, hence without a commit (-1001).
    parts = [(topic, p) for p in range(PARTITIONS)]
    ends = high_watermarks(front.bootstrap, topic, PARTITIONS)
    assert committed(front.bootstrap, group, parts) == {tp: (end if end else -1001) for tp, end in ends.items()}


def test_metadata_names_corral_alone_and_upstream_topics_appear(front, apache_kafka_classic):
    # A topic created on Kafka directly is served through corral.
    topic = unique("up-direct")
    clients.create_topic(apache_kafka_classic.bootstrap, topic, partitions=2)
    wait_until(lambda: topic in clients.admin_client(front.bootstrap).list_topics(timeout=10).topics, f"{topic} through corral", 30)
    md = clients.admin_client(front.bootstrap).list_topics(timeout=10)
    assert set(md.brokers) == {0}, md.brokers
    assert {b.port for b in md.brokers.values()} == {front.kafka_port}
    assert all(p.leader == 0 for p in md.topics[topic].partitions.values())
    # Neither Kafka's __consumer_offsets nor its other internal topics are shown; corral's is.
    assert "__consumer_offsets" in md.topics
    clients.produce_all(clients.producer(front.bootstrap), topic, [(None, b"x")], partition=1)
    assert clients.watermarks(front.bootstrap, topic, 1) == (0, 1)
    assert clients.watermarks(apache_kafka_classic.bootstrap, topic, 1) == (0, 1)


def test_api_versions_in_front_of_kafka(front):
    conn = kw.Conn(front.bootstrap)
    try:
        conn.send(kw.api_versions_v0(1))
        _, err, versions = kw.parse_api_versions_v0(conn.recv_frame())
    finally:
        conn.close()
    assert err == 0
    # Data APIs no higher than Kafka 4.4 serves them; group APIs (KIP-848 too) are corral's.
    assert versions[kw.API_PRODUCE][1] <= 13 and versions[kw.API_FETCH][1] <= 18
    assert 68 in versions  # ConsumerGroupHeartbeat, which this Kafka does not serve


def test_unreachable_upstream_is_not_ready_and_says_why(corral_factory):
    server = corral_factory(config=upstream_config("127.0.0.1:1", connect_timeout_ms=500), start=False)
    server.start(ready=False)
    wait_until(lambda: "cannot read the upstream's metadata" in server.run_log_text(), "the log says why", 30)
    assert "127.0.0.1:1" in server.run_log_text()
    time.sleep(1.0)
    assert server.alive(), "corral exited"
    status, _ = server.http_get("/health/ready")
    assert status == 503
    status, _ = server.http_get("/health/live")
    assert status == 200


def test_an_acknowledged_record_survives_a_killed_upstream_broker(front, apache_kafka_classic):
    """A leader move under an acks=all stream: one of the three brokers is killed while records are
    produced through corral; every record corral acknowledged is in Kafka afterwards, once."""
    topic = unique("up-leader-move")
    clients.create_topic(front.bootstrap, topic, partitions=PARTITIONS)
    producer = clients.producer(front.bootstrap, linger_ms=2)
    acked: list[tuple[int, int, bytes]] = []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for i in range(3000):
        if i == 1000:
            apache_kafka_classic.kill(1)
        producer.produce(topic, value=f"m{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
        if i % 100 == 0:
            time.sleep(0.02)
    assert producer.flush(90) == 0
    assert len(acked) == 3000, f"{3000 - len(acked)} records not acknowledged"
    direct = clients.consume_all(apache_kafka_classic.bootstrap, topic)
    in_kafka = [(r.partition, r.offset, r.value) for rs in direct.values() for r in rs]
    assert sorted(in_kafka) == sorted(acked)
    assert len({v for _, _, v in in_kafka}) == 3000, "a record is in Kafka twice"


def test_list_offsets_follows_a_killed_leader(front, apache_kafka_classic):
    """A partition's upstream leader is killed, then the partition's offsets are asked through
    corral at once (before corral or Kafka knows the broker is gone): corral asks again once its
    view of the upstream is refreshed, as a Kafka consumer retries its ListOffsets, and the client
    gets the offsets rather than an error."""
    from confluent_kafka.admin import AdminClient

    topic = unique("up-lo-leader")
    clients.create_topic(front.bootstrap, topic, partitions=PARTITIONS)
    clients.produce_all(clients.producer(front.bootstrap), topic, [(None, f"r{i}".encode()) for i in range(60)])
    expected = high_watermarks(apache_kafka_classic.bootstrap, topic, PARTITIONS)
    assert sum(expected.values()) == 60
    # Through corral once, so that its view of the upstream names the leader about to die.
    assert high_watermarks(front.bootstrap, topic, PARTITIONS) == expected
    leaders = AdminClient({"bootstrap.servers": apache_kafka_classic.bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
    victim = leaders[0].leader
    index = next(b.index for b in apache_kafka_classic.brokers if b.node_id == victim)
    apache_kafka_classic.kill(index)
    started = time.monotonic()
    assert high_watermarks(front.bootstrap, topic, PARTITIONS) == expected
    print(f"offsets after killing broker {victim}, the leader of partition 0: {time.monotonic() - started:.1f} s")


def test_three_corral_nodes_in_front_of_kafka(corral_factory, apache_kafka_classic):
    from cluster import Cluster

    c = Cluster(corral_factory, size=3, relays=False, extra_config=upstream_config(apache_kafka_classic.bootstrap))
    try:
        c.start()
        topic, group = unique("up-cluster"), unique("up-cluster-group")
        clients.create_topic(f"127.0.0.1:{c.kafka[1]}", topic, partitions=6)
        # A client told of the topic by node 1 may ask the others before they have read the
        # upstream's metadata again: they look for it there rather than call it unknown.
        for node, ask, parse in [
            (0, kw.list_offsets_v1(1, topic, list(range(6))), kw.parse_list_offsets_v1),
            (2, kw.fetch_v4(1, topic, 0, 0), kw.parse_fetch_v4),
        ]:
            conn = kw.Conn(f"127.0.0.1:{c.kafka[node]}")
            try:
                conn.send(ask)
                answers = parse(conn.recv_frame())[1]
            finally:
                conn.close()
            assert answers and all(a[0] == 0 for a in answers.values()), (node, answers)
        # Leadership is spread over the corral nodes: two partitions each.
        md = clients.admin_client(c.bootstrap).list_topics(topic, timeout=10)
        assert set(md.brokers) == {0, 1, 2}
        leaders = sorted(p.leader for p in md.topics[topic].partitions.values())
        assert leaders == [0, 0, 1, 1, 2, 2], leaders
        # Every node serves every partition: node 2 takes a produce for each, whoever Metadata names
        # (once it knows the topic: a Metadata request naming it makes node 2 look upstream).
        assert clients.partition_count(f"127.0.0.1:{c.kafka[2]}", topic) == 6
        for p in range(6):
            conn = kw.Conn(f"127.0.0.1:{c.kafka[2]}")
            try:
                conn.send(kw.produce_v3(1, topic, p, kw.record_batch([(None, b"via node 2")])))
                frame = conn.recv_frame()
            finally:
                conn.close()
            assert kw.parse_produce_v3(frame)[1][(topic, p)][0] == 0
        clients.produce_all(clients.producer(c.bootstrap), topic, [(None, f"c{i}".encode()) for i in range(300)])
        got = group_consume(c.bootstrap, topic, group, 306)
        assert sorted(v for _, _, v in got) == sorted([b"via node 2"] * 6 + [f"c{i}".encode() for i in range(300)])
        ends = {(topic, p): n for p, n in enumerate(len(clients.consume_all(apache_kafka_classic.bootstrap, topic, [p])[p]) for p in range(6))}
        for node in range(3):
            assert committed(f"127.0.0.1:{c.kafka[node]}", group, list(ends)) == ends
    finally:
        c.close()


def test_no_connection_or_descriptor_leaks(corral_factory, apache_kafka_classic):
    """Client churn and an upstream broker restarting leave corral with no more descriptors than
    its bounded upstream pool explains, and a second round of the same leaves no more than the
    first."""
    pool_size, shards, brokers = 1, 2, 3
    server = corral_factory(config=f"[runtime]\nshards = {shards}\n" + upstream_config(apache_kafka_classic.bootstrap, pool_size=pool_size))
    descriptors = lambda: len(os.listdir(f"/proc/{server.pid}/fd"))  # noqa: E731
    at_start = descriptors()
    topic = unique("up-leaks")
    clients.create_topic(server.bootstrap, topic, partitions=PARTITIONS)

    def churn(n: int) -> None:
        for i in range(5):
            clients.produce_all(clients.producer(server.bootstrap), topic, [(None, f"{n}-{i}-{j}".encode()) for j in range(20)])
            clients.consume_all(server.bootstrap, topic)
        apache_kafka_classic.kill(2)
        clients.produce_all(clients.producer(server.bootstrap), topic, [(None, f"{n}-down".encode())])
        apache_kafka_classic.start(2)
        clients.produce_all(clients.producer(server.bootstrap), topic, [(None, f"{n}-back".encode())])
        clients.consume_all(server.bootstrap, topic)

    # Per shard and broker: the ordered connection and the idle ones kept; one for metadata.
    upstream_bound = shards * brokers * (1 + pool_size) + 1
    churn(1)
    first = wait_until(lambda: (n := descriptors()) <= at_start + upstream_bound and n, f"descriptors back within the pool's bound ({at_start} + {upstream_bound})", 30)
    churn(2)
    second = wait_until(lambda: (n := descriptors()) <= first + 2 and n, lambda: f"descriptors after the second round: {descriptors()}, after the first {first}", 30)
    assert second <= at_start + upstream_bound
    print(f"descriptors: {at_start} at start, {first} after the first round, {second} after the second (bound {at_start + upstream_bound})")


def test_the_whole_upstream_down_then_back(front, apache_kafka_classic):
    """Every upstream broker killed: a produce is answered with a retriable error within its own
    timeout, a fetch within its wait and the request timeout, corral stays up; once Kafka is back,
    producing through corral works again."""
    topic = unique("up-down")
    clients.create_topic(front.bootstrap, topic, partitions=1)
    clients.produce_all(clients.producer(front.bootstrap), topic, [(None, b"before")])
    for i in range(len(apache_kafka_classic.brokers)):
        apache_kafka_classic.kill(i)
    conn = kw.Conn(front.bootstrap, timeout=30)
    try:
        started = time.monotonic()
        conn.send(kw.produce_v3(1, topic, 0, kw.record_batch([(None, b"while down")]), acks=-1, timeout_ms=3000))
        produced = kw.parse_produce_v3(conn.recv_frame())[1][(topic, 0)]
        produce_s = time.monotonic() - started
        started = time.monotonic()
        conn.send(kw.fetch_v4(2, topic, 0, 0, max_wait_ms=500))
        fetched = kw.parse_fetch_v4(conn.recv_frame())[1][(topic, 0)]
        fetch_s = time.monotonic() - started
    finally:
        conn.close()
    # NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT: a producer retries either after new metadata.
    assert produced[0] in (6, 7), produced
    assert produce_s < 3.0 + 2.0, f"the produce was answered after {produce_s:.1f} s"
    assert fetched[0] != 0 and fetch_s < 0.5 + 5.0, (fetched, fetch_s)
    assert front.alive()
    apache_kafka_classic.ensure_running()
    wait_until(
        lambda: clients.produce_all(clients.producer(front.bootstrap), topic, [(None, b"after")]) and True,
        "a produce through corral once Kafka is back",
        60,
    )
    values = [r.value for r in clients.consume_all(front.bootstrap, topic)[0]]
    assert values[0] == b"before" and b"after" in values and b"while down" not in values, values


def test_a_read_committed_consumer_skips_transactions_aborted_in_kafka(front, apache_kafka_classic):
    """Transactions written to Kafka directly (corral serves no transactional producer); a
    read-committed consumer through corral skips the aborted one, as it does reading from Kafka:
    the upstream's aborted-transaction list reaches the client with the records, and ListOffsets
    asks the upstream with the client's isolation level."""
    from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition

    topic = unique("up-txn")
    clients.create_topic(front.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": apache_kafka_classic.bootstrap, "transactional.id": unique("up-txn-id")})
    producer.init_transactions(30)
    for txn, n, commit in (("t1", 3, True), ("t2", 4, False), ("t3", 2, True)):
        producer.begin_transaction()
        for i in range(n):
            producer.produce(topic, f"{txn}-{i}".encode(), partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    # With a transaction open, the latest offset for read committed is its first offset (the last
    # stable offset), as Kafka answers it; read uncommitted gets the high watermark.
    producer.begin_transaction()
    producer.produce(topic, b"open-0", partition=0)
    producer.produce(topic, b"open-1", partition=0)
    producer.flush(30)
    latest = {server: (latest_offset(server, topic, IsolationLevel.READ_COMMITTED), latest_offset(server, topic, IsolationLevel.READ_UNCOMMITTED))
              for server in (apache_kafka_classic.bootstrap, front.bootstrap)}
    producer.abort_transaction(30)
    del producer  # closes it while Kafka is up
    stable, end = latest[apache_kafka_classic.bootstrap]
    assert stable < end
    assert latest[front.bootstrap] == (stable, end)

    def read(bootstrap: str, isolation: str) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("up-txn-reader"), "isolation.level": isolation,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            # The last record written comes after any aborted one a consumer would wrongly get.
            while b"t3-1" not in values and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    values.append(m.value())
        finally:
            consumer.close()
        return values

    committed_only = [b"t1-0", b"t1-1", b"t1-2", b"t3-0", b"t3-1"]
    everything = [b"t1-0", b"t1-1", b"t1-2", b"t2-0", b"t2-1", b"t2-2", b"t2-3", b"t3-0", b"t3-1"]
    assert read(apache_kafka_classic.bootstrap, "read_committed") == committed_only
    assert read(front.bootstrap, "read_committed") == committed_only
    assert read(front.bootstrap, "read_uncommitted") == everything



def test_topic_configs_are_the_upstreams(front, apache_kafka_classic):
    """DescribeConfigs of a topic through corral answers what Kafka answers: the configs set at
    creation through corral, those set in Kafka directly (including ones corral has no setting
    for), and the sources of the others."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = unique("up-configs")
    clients.create_topic(front.bootstrap, topic, partitions=1, config={"retention.ms": "123456"})
    direct_admin = clients.admin_client(apache_kafka_classic.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    direct_admin.incremental_alter_configs([resource])[resource].result(30)

    def described(bootstrap: str) -> dict[str, tuple]:
        admin = clients.admin_client(bootstrap)
        asked = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = admin.describe_configs([asked], request_timeout=30)[asked].result(30)
        return {name: (e.value, e.source, e.is_read_only, e.is_sensitive) for name, e in entries.items()}

    def shows_the_change():
        d = described(front.bootstrap)
        return d if d.get("min.compaction.lag.ms", (None,))[0] == "5000" else None

    through_corral = wait_until(shows_the_change, "min.compaction.lag.ms set in Kafka to show through corral", timeout=30)
    assert through_corral["retention.ms"][0] == "123456"
    assert through_corral == described(apache_kafka_classic.bootstrap)


def latest_offset(bootstrap: str, topic: str, isolation) -> int:
    """Partition 0's latest offset as ListOffsets answers it for `isolation`."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation, request_timeout=30)
    return futures[tp].result(30).offset


def test_records_the_upstream_refuses_are_named_to_the_client(front):
    """A batch Kafka refuses record by record (keyless records for a compacted topic) gets Kafka's
    `record_errors` through corral (Produce v8, KIP-467)."""
    topic = unique("up-compacted")
    clients.create_topic(front.bootstrap, topic, partitions=1, config={"cleanup.policy": "compact"})
    conn = kw.Conn(front.bootstrap)
    try:
        conn.send(kw.produce_v8(1, topic, 0, kw.record_batch([(b"k", b"a"), (None, b"b"), (None, b"c")])))
        _, partitions = kw.parse_produce_v8(conn.recv_frame())
    finally:
        conn.close()
    error, _, record_errors, message = partitions[(topic, 0)]
    assert error == 87, partitions  # INVALID_RECORD
    assert [index for index, _ in record_errors] == [1, 2], record_errors
    assert all("without key" in why for _, why in record_errors), record_errors
    assert message and "2 record errors" in message, message
