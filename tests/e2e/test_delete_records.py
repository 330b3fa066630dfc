"""Deleting records: DeleteRecords, with real clients.

The scenarios with a `target` run on corral, on Apache Kafka 4.4 (the reference: the same calls,
the same answers), on corral in front of Kafka (the upstream's leader moves its log start) and
through a sidecar. The records below the offset must be gone: the low watermark and the earliest
offset move, and a consumer reading from the beginning starts there. The others cover a kill
and restart, three nodes, Kafka's kafka-delete-records tool and kafka-python.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition

import clients
import kafkawire as kw
from apache_kafka import TARGETS, target_bootstrap
from test_java_client import JVM, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)

T = clients.TIMEOUT_S
DELETE_RECORDS_COMMAND = "org.apache.kafka.tools.DeleteRecordsCommand"


@pytest.fixture(params=TARGETS)
def target(request, corral_factory, apache_kafka, apache_kafka_classic) -> str:
    return target_bootstrap(request.param, corral_factory, apache_kafka, apache_kafka_classic)


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    """`count` records, each in a batch of its own (each waited for)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "logger": clients.RDKAFKA_LOG})
    for i in range(count):
        errors: list = []
        producer.produce(topic, f"r{i}".encode(), partition=partition, on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(T)
        assert errors == [None], errors


def delete(admin, *wanted: tuple[str, int, int]) -> dict[tuple[str, int], int | KafkaError]:
    """Each partition's low watermark after the deletion, or its error."""
    futures = admin.delete_records([TopicPartition(t, p, o) for t, p, o in wanted], request_timeout=T, operation_timeout=T)
    out: dict[tuple[str, int], int | KafkaError] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(T).low_watermark
        except KafkaException as e:
            out[(tp.topic, tp.partition)] = e.args[0]
    return out


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex[:6]}", "logger": clients.RDKAFKA_LOG})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=T)
    finally:
        consumer.close()


def first_offset_read(bootstrap: str, topic: str, partition: int) -> int:
    """The offset of the first record a consumer reads from the beginning of the partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rd-{uuid.uuid4().hex[:6]}", "logger": clients.RDKAFKA_LOG})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        for _ in range(int(T * 2)):
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            return message.offset()
        raise AssertionError("no record read")
    finally:
        consumer.close()


def code(outcome) -> int | None:
    return outcome.code() if isinstance(outcome, KafkaError) else None


def test_records_below_the_offset_are_gone(target):
    admin = clients.admin_client(target)
    topic = f"delrec-{uuid.uuid4().hex[:8]}"
    clients.create_topic(target, topic, partitions=2)
    produce(target, topic, 0, 10)
    produce(target, topic, 1, 3)

    # OFFSET_END (-1): everything up to the high watermark.
    assert delete(admin, (topic, 0, 4), (topic, 1, OFFSET_END)) == {(topic, 0): 4, (topic, 1): 3}
    assert watermarks(target, topic, 0) == (4, 10)
    assert watermarks(target, topic, 1) == (3, 3)
    assert first_offset_read(target, topic, 0) == 4

    # An earlier offset leaves the start where it is; one past the high watermark is refused.
    assert delete(admin, (topic, 0, 2)) == {(topic, 0): 4}
    assert code(delete(admin, (topic, 0, 11))[(topic, 0)]) == KafkaError.OFFSET_OUT_OF_RANGE
    # Up to the end: nothing is left to read, and what is produced next is read.
    assert delete(admin, (topic, 0, 10)) == {(topic, 0): 10}
    produce(target, topic, 0, 1)
    assert first_offset_read(target, topic, 0) == 10


DELETE_RECORDS = 21


def delete_records_v0(correlation_id: int, topic: str, partitions: list[tuple[int, int]]) -> bytes:
    body = kw.array([kw.string(topic) + kw.array([kw.i32(p) + kw.i64(o) for p, o in partitions])]) + kw.i32(10000)
    return kw.request(DELETE_RECORDS, 0, correlation_id, body)


def answered(conn: kw.Conn, frame: bytes) -> list[tuple[int, int, int]]:
    """(partition, low watermark, error code) of each partition answered, in order."""
    conn.send(frame)
    r = kw.Reader(conn.recv_frame())
    r.take("i")  # correlation id
    r.take("i")  # throttle_time_ms
    out = []
    for _ in range(r.take("i")):
        r.string()
        out += [(r.take("i"), r.take("q"), r.take("h")) for _ in range(r.take("i"))]
    return out


def leader_address(bootstrap: str, topic: str) -> str:
    """Where partition 0 of `topic` is led (Metadata v0)."""
    conn = kw.Conn(bootstrap.split(",")[0])
    try:
        conn.send(kw.metadata_v0(1, [topic]))
        r = kw.Reader(conn.recv_frame())
    finally:
        conn.close()
    r.take("i")
    brokers = {}
    for _ in range(r.take("i")):
        node, host, port = r.take("i"), r.string(), r.take("i")
        brokers[node] = f"{host}:{port}"
    leaders = {}
    for _ in range(r.take("i")):
        r.take("h"), r.string()
        for _ in range(r.take("i")):
            _, index, leader = r.take("h"), r.take("i"), r.take("i")
            leaders[index] = leader
            [r.take("i") for _ in range(r.take("i"))]
            [r.take("i") for _ in range(r.take("i"))]
    return brokers[leaders[0]]


def test_edge_cases_are_answered_as_kafka_answers_them(corral_factory, apache_kafka):
    """Raw requests to partition 0's leader, on Kafka 4.4 and on corral: offsets below -1 and
    past the high watermark, a partition and a topic that do not exist, a partition named twice."""
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    cases = {
        "below -1": delete_records_v0(1, topic, [(0, -2)]),
        "past the high watermark": delete_records_v0(2, topic, [(0, 6)]),
        "unknown partition": delete_records_v0(3, topic, [(3, 0)]),
        "unknown topic": delete_records_v0(4, f"no-such-{topic}", [(0, 0)]),
        "moved": delete_records_v0(5, topic, [(0, 2)]),
        "named twice": delete_records_v0(6, topic, [(0, 3), (0, 1)]),
        "to the high watermark": delete_records_v0(7, topic, [(0, -1)]),
    }
    answers = {}
    for kind, bootstrap in (("kafka", apache_kafka.bootstrap), ("corral", corral_factory().bootstrap)):
        clients.create_topic(bootstrap, topic)
        produce(bootstrap, topic, 0, 5)
        conn = kw.Conn(leader_address(bootstrap, topic))
        try:
            answers[kind] = {case: answered(conn, frame) for case, frame in cases.items()}
        finally:
            conn.close()
    assert answers["corral"] == answers["kafka"]
    # What Kafka answers, so that a change of it shows as such.
    assert answers["kafka"]["past the high watermark"] == [(0, -1, 1)]
    assert answers["kafka"]["moved"] == [(0, 2, 0)]
    assert answers["kafka"]["to the high watermark"] == [(0, 5, 0)]


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_the_offsets_topic_cannot_be_cut(kind, corral_factory, apache_kafka):
    bootstrap = corral_factory().bootstrap if kind == "corral" else apache_kafka.bootstrap
    # Kafka creates __consumer_offsets when a group first needs it.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "logger": clients.RDKAFKA_LOG})
    consumer.committed([TopicPartition("any", 0)], timeout=T)
    consumer.close()
    outcome = delete(clients.admin_client(bootstrap), ("__consumer_offsets", 0, 0))[("__consumer_offsets", 0)]
    assert code(outcome) == KafkaError.TOPIC_EXCEPTION, outcome


def test_the_start_survives_a_kill_and_restart(corral_factory):
    server = corral_factory()
    topic = "kept-start"
    clients.create_topic(server.bootstrap, topic)
    produce(server.bootstrap, topic, 0, 6)
    assert delete(clients.admin_client(server.bootstrap), (topic, 0, 4)) == {(topic, 0): 4}
    server.kill9()
    server.restart()
    assert watermarks(server.bootstrap, topic, 0) == (4, 6)
    assert first_offset_read(server.bootstrap, topic, 0) == 4


def test_each_node_deletes_from_the_partitions_it_leads(cluster):
    """Three nodes: the admin client sends each partition's deletion to its leader."""
    topic = "cluster-delete"
    leaders = cluster.create_topic(topic, 6, via=0)
    assert sorted(set(leaders)) == [0, 1, 2], leaders
    bootstraps = [f"127.0.0.1:{port}" for port in cluster.kafka]
    for partition in range(6):
        produce(bootstraps[0], topic, partition, 3)
    admin = clients.admin_client(bootstraps[1])
    assert delete(admin, *[(topic, p, 2) for p in range(6)]) == {(topic, p): 2 for p in range(6)}
    for partition in range(6):
        assert watermarks(bootstraps[2], topic, partition) == (2, 3)


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_delete_records_tool(kind, corral_factory, apache_kafka, java_classpath, tmp_path):
    bootstrap = corral_factory().bootstrap if kind == "corral" else apache_kafka.bootstrap
    topic = f"tool-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic)
    produce(bootstrap, topic, 0, 5)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3}]}))
    command = [*JVM, "-cp", java_classpath, DELETE_RECORDS_COMMAND, "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert f"partition: {topic}-0\tlow_watermark: 3" in run.stdout, run.stdout
    assert watermarks(bootstrap, topic, 0) == (3, 5)


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_python_delete_records(kind, corral_factory, apache_kafka):
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    bootstrap = corral_factory().bootstrap if kind == "corral" else apache_kafka.bootstrap
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic)
    produce(bootstrap, topic, 0, 5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(T * 1000))
    try:
        result = admin.delete_records({KpTopicPartition(topic, 0): 2})
        assert [(tp.partition, r["low_watermark"]) for tp, r in result.items()] == [(0, 2)], result
    finally:
        admin.close()
    assert watermarks(bootstrap, topic, 0) == (2, 5)
