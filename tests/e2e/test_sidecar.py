"""The sidecar role (`role = "sidecar"`): an application configured with one local address, the
sidecar's, and nothing else.

The sidecar keeps no data and runs no group: records go to the Kafka behind it (the
`apache_kafka_classic` cluster, which serves no KIP-848), group requests to its group service —
a corral cluster in front of the same Kafka (the normal deployment), or Kafka's own coordinator.
The client only ever sees the sidecar: one broker, the leader of every partition and the
coordinator of every group.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException

import clients
import kafkawire as kw
from apache_kafka import corral_upstream_config, free_ports, sidecar_config
from groups import committed, group_consume, listed_groups, unique, wait_until
from groupwire import find_coordinator_v1, heartbeat, parse_find_coordinator_v1, parse_heartbeat

PARTITIONS = 3


@pytest.fixture
def corral_groups(corral_factory, apache_kafka_classic):
    """One corral node in front of the Kafka: the sidecar's group service."""
    return corral_factory(config=corral_upstream_config(apache_kafka_classic.bootstrap), name="groups")


@pytest.fixture
def sidecar(corral_factory, apache_kafka_classic, corral_groups):
    return corral_factory(config=sidecar_config(apache_kafka_classic.bootstrap, corral_groups.bootstrap), name="sidecar")


def test_the_sidecar_is_the_only_broker_leader_and_coordinator(sidecar, corral_groups, apache_kafka_classic):
    topic = unique("sc-md")
    clients.create_topic(sidecar.bootstrap, topic, partitions=6)
    md = clients.admin_client(sidecar.bootstrap).list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", sidecar.kafka_port)]
    (only,) = md.brokers
    assert {p.leader for p in md.topics[topic].partitions.values()} == {only}
    # The topic is Kafka's; the groups and their offsets are the group service's, not the sidecar's.
    assert clients.partition_count(apache_kafka_classic.bootstrap, topic) == 6
    assert "__consumer_offsets" not in md.topics
    conn = kw.Conn(sidecar.bootstrap)
    try:
        for group in ("a", "b", unique("sc-g")):
            conn.send(find_coordinator_v1(1, group))
            _, error, node, host, port = parse_find_coordinator_v1(conn.recv_frame())
            assert (error, node, host, port) == (0, only, "127.0.0.1", sidecar.kafka_port)
        conn.send(kw.api_versions_v0(2))
        _, err, versions = kw.parse_api_versions_v0(conn.recv_frame())
    finally:
        conn.close()
    # Group APIs as the group service serves them (corral: KIP-848 too), data APIs as Kafka does.
    assert err == 0 and 68 in versions and versions[kw.API_FETCH][1] <= 18


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_consumes_through_the_sidecar_with_offsets_in_the_corral_cluster(sidecar, corral_groups, apache_kafka_classic, protocol):
    topic, group = unique("sc-rt"), unique("sc-group")
    clients.create_topic(sidecar.bootstrap, topic, partitions=PARTITIONS)
    values = [f"v{i}".encode() for i in range(200)]
    # Keyed, so every partition gets records (and a committed offset).
    delivered = clients.produce_all(clients.producer(sidecar.bootstrap), topic, [(v, v) for v in values])
    direct = clients.consume_all(apache_kafka_classic.bootstrap, topic)
    assert {(r.partition, r.offset): r.value for rs in direct.values() for r in rs} == {(p, o): v for _, v, p, o in delivered}

    got = group_consume(sidecar.bootstrap, topic, group, len(values), protocol=protocol)
    assert sorted(v for _, _, v in got) == sorted(values)
    ends = {(topic, p): len(direct.get(p, [])) for p in range(PARTITIONS)}
    # Committed in the group service, read back through the sidecar and from the service directly;
    # Kafka has never heard of the group.
    assert committed(corral_groups.bootstrap, group, list(ends)) == ends
    assert committed(sidecar.bootstrap, group, list(ends)) == ends
    assert group not in listed_groups(apache_kafka_classic.bootstrap)
    # The group admin APIs through the sidecar answer as the service does.
    admin = clients.admin_client(sidecar.bootstrap)
    assert group in listed_groups(sidecar.bootstrap)
    (described,) = admin.describe_consumer_groups([group], request_timeout=30).values()
    assert described.result().state == ConsumerGroupState.EMPTY
    (deleted,) = admin.delete_consumer_groups([group], request_timeout=30).values()
    deleted.result()
    assert group not in listed_groups(corral_groups.bootstrap)


def test_kafka_itself_as_the_group_service(corral_factory, apache_kafka):
    """The sidecar in front of a Kafka that also runs the groups: FindCoordinator is asked of
    Kafka and each group request goes to the Kafka broker coordinating its group."""
    sc = corral_factory(config=sidecar_config(apache_kafka.bootstrap, apache_kafka.bootstrap), name="sidecar")
    topic, group = unique("sc-kafka"), unique("sc-kafka-group")
    clients.create_topic(sc.bootstrap, topic, partitions=PARTITIONS)
    clients.produce_all(clients.producer(sc.bootstrap), topic, [(f"k{i}".encode(), f"k{i}".encode()) for i in range(90)])
    for protocol in ("classic", "consumer"):
        g = f"{group}-{protocol}"
        got = group_consume(sc.bootstrap, topic, g, 90, protocol=protocol)
        assert sorted(v for _, _, v in got) == sorted(f"k{i}".encode() for i in range(90))
        # The offsets are Kafka's own.
        assert sum(committed(apache_kafka.bootstrap, g, [(topic, p) for p in range(PARTITIONS)]).values()) == 90
        assert g in listed_groups(apache_kafka.bootstrap)


def test_a_group_consumes_across_a_killed_coordinator_and_a_killed_kafka_broker(corral_factory, apache_kafka_classic):
    """A client that knows only the sidecar consumes as a group from a 3-node corral cluster in
    front of Kafka while a producer writes through the same sidecar; the coordinator of the group
    is killed with SIGKILL, then one Kafka broker. Every acknowledged record is consumed; a record
    is consumed twice only where a consumer re-reads after its group moved (what Kafka allows:
    the records after its last commit), and the offsets committed before the kill are kept."""
    from cluster import Cluster

    c = Cluster(corral_factory, size=3, relays=False, extra_config=corral_upstream_config(apache_kafka_classic.bootstrap))
    c.start()
    try:
        sc = corral_factory(config=sidecar_config(apache_kafka_classic.bootstrap, c.bootstrap), name="sidecar")
        topic, group = unique("sc-failover"), unique("sc-failover-group")
        clients.create_topic(sc.bootstrap, topic, partitions=PARTITIONS)
        total = 3000
        acked: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:
            p = clients.producer(sc.bootstrap, linger_ms=2)

            def on_delivery(err, msg):
                if err is None:
                    acked.append(msg.value())

            for i in range(total):
                p.produce(topic, value=f"f{i}".encode(), on_delivery=on_delivery)
                p.poll(0)
                time.sleep(0.004)
            assert p.flush(90) == 0

        consumed: list[bytes] = []
        consumer = Consumer(
            {
                "bootstrap.servers": sc.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "logger": clients.RDKAFKA_LOG,
            }
        )

        def consume() -> None:
            consumer.subscribe([topic])
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                consumed.append(msg.value())
                if len(consumed) % 20 == 0:
                    try:
                        consumer.commit(asynchronous=False)
                    except Exception:  # a commit during the failover fails retriably; the next one counts
                        pass

        producer_thread = threading.Thread(target=produce)
        consumer_thread = threading.Thread(target=consume)
        producer_thread.start()
        consumer_thread.start()
        wait_until(lambda: len(consumed) >= 300, "the group consuming before the kill", 60)
        coordinator = c.coordinator(group)
        before = committed(sc.bootstrap, group, [(topic, p) for p in range(PARTITIONS)])
        c.nodes[coordinator].kill9()
        wait_until(lambda: len(consumed) >= 1200, "the group consuming after its coordinator was killed", 90)
        apache_kafka_classic.kill(1)
        producer_thread.join(180)
        assert not producer_thread.is_alive()
        wait_until(lambda: set(acked) <= set(consumed), lambda: f"{len(set(acked) - set(consumed))} acknowledged records not consumed", 120)
        stop.set()
        consumer_thread.join(30)
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as e:
            assert e.args[0].code() == KafkaError._NO_OFFSET, e  # nothing consumed since the last commit
        consumer.close()

        assert len(acked) == total, f"{total - len(acked)} records not acknowledged"
        duplicates = len(consumed) - len(set(consumed))
        # Each member re-reads at most what it consumed after its last commit (20 records per
        # partition) each time the group moves: once for the coordinator, once for a broker.
        assert duplicates <= 2 * 20 * PARTITIONS, f"{duplicates} records consumed twice"
        after = committed(sc.bootstrap, group, [(topic, p) for p in range(PARTITIONS)])
        assert all(after[tp] >= max(before[tp], 0) for tp in after), (before, after)
        # The offsets are in the surviving corral nodes, not in Kafka.
        survivor = next(i for i in range(3) if i != coordinator)
        assert committed(f"127.0.0.1:{c.kafka[survivor]}", group, list(after)) == after
        print(f"acked {len(acked)}, consumed {len(consumed)} ({duplicates} twice), coordinator was node {coordinator}")
    finally:
        stop.set()
        c.close()


def test_no_connection_or_descriptor_leaks(corral_factory, apache_kafka_classic, corral_groups):
    """Group members and producers coming and going through a sidecar, and its group service
    killed and started again, leave the sidecar with no more descriptors than its bounded pools
    explain: a client connection's connections to the coordinators close with it."""
    shards, pool_size, brokers = 1, 1, 3
    config = sidecar_config(apache_kafka_classic.bootstrap, corral_groups.bootstrap, upstream={"pool_size": pool_size})
    sc = corral_factory(config=config + f"[runtime]\nshards = {shards}\n", name="sidecar")
    descriptors = lambda: len(os.listdir(f"/proc/{sc.pid}/fd"))  # noqa: E731
    at_start = descriptors()
    topic, group = unique("sc-leaks"), unique("sc-leaks-group")
    clients.create_topic(sc.bootstrap, topic, partitions=PARTITIONS)
    produced = 0

    def churn(n: int) -> None:
        nonlocal produced
        for i in range(3):
            clients.produce_all(clients.producer(sc.bootstrap), topic, [(f"{n}-{i}-{j}".encode(), b"x") for j in range(30)])
            produced += 30
            assert len(group_consume(sc.bootstrap, topic, f"{group}-{n}-{i}", produced)) == produced

    # Per shard: the upstream's ordered and idle connections per broker, one connection to the
    # group service's broker; two more for metadata reads in progress.
    bound = shards * brokers * (1 + pool_size) + shards + 2
    churn(1)
    first = wait_until(lambda: (n := descriptors()) <= at_start + bound and n, lambda: f"{descriptors()} descriptors, bound {at_start} + {bound}", 30)
    corral_groups.kill9()
    corral_groups.start()
    churn(2)
    second = wait_until(lambda: (n := descriptors()) <= max(first, at_start + bound) and n, lambda: f"{descriptors()} descriptors after the second round, {first} after the first", 30)
    print(f"descriptors: {at_start} at start, {first} after the first round, {second} after the second (bound {at_start + bound})")


def test_group_service_unreachable_at_start(corral_factory, apache_kafka_classic):
    """No group service at the configured address: the sidecar says so naming the key, stays
    not ready, and answers group requests at once with a retriable error instead of hanging."""
    (port,) = free_ports(1)
    sc = corral_factory(config=sidecar_config(apache_kafka_classic.bootstrap, f"127.0.0.1:{port}"), start=False, name="sidecar")
    sc.start(ready=False)
    wait_until(lambda: "sidecar.group_bootstrap" in sc.log_text(), "a log line naming sidecar.group_bootstrap", 30)
    assert sc.http_get("/health/ready")[0] == 503
    conn = kw.Conn(sc.bootstrap)
    try:
        conn.send(kw.api_versions_v0(1))
        assert kw.parse_api_versions_v0(conn.recv_frame())[1] == 0
        began = time.monotonic()
        conn.send(heartbeat(2, unique("sc-none"), 1, "m"))
        _, error = parse_heartbeat(conn.recv_frame())
        assert error == 15, error  # COORDINATOR_NOT_AVAILABLE
        assert time.monotonic() - began < 10
    finally:
        conn.close()
