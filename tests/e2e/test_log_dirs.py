"""DescribeLogDirs: the partitions a node keeps and their sizes, as Kafka's kafka-log-dirs tool
and kafka-python's describe_log_dirs read them."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

import clients
from apache_kafka import CORRAL_GROUP_CONFIG, corral_upstream_config
from test_java_client import JVM, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)

LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"


def log_dirs_tool(classpath: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    command = [*JVM, "-cp", classpath, LOG_DIRS_COMMAND, "--bootstrap-server", bootstrap, "--describe", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def produce(bootstrap: str, topic: str, partition: int, count: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "logger": clients.RDKAFKA_LOG})
    for _ in range(count):
        producer.produce(topic, b"x" * size, partition=partition)
    assert producer.flush(clients.TIMEOUT_S) == 0


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_log_dirs_tool_shows_partitions_and_sizes(kind, corral_factory, apache_kafka, java_classpath):
    server = corral_factory() if kind == "corral" else None
    bootstrap = server.bootstrap if server else apache_kafka.bootstrap
    topic = f"dirs-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 0, 100, 1000)
    shown = log_dirs_tool(java_classpath, bootstrap, "--topic-list", topic)
    assert shown.returncode == 0, shown.stdout + shown.stderr[-3000:]
    described = json.loads(shown.stdout.strip().splitlines()[-1])
    partitions = {p["partition"]: p for b in described["brokers"] for d in b["logDirs"] for p in d["partitions"]}
    assert set(partitions) == {f"{topic}-0", f"{topic}-1"}, described
    assert partitions[f"{topic}-0"]["size"] >= 100 * 1000
    assert partitions[f"{topic}-1"]["size"] == 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in partitions.values())
    if server:
        (broker,) = described["brokers"]
        (log_dir,) = broker["logDirs"]
        assert log_dir["error"] is None
        assert log_dir["logDir"] == str(server.partition_dir(topic, 0).parent.resolve())


def test_kafka_python_describe_log_dirs(corral_factory):
    from kafka.admin import KafkaAdminClient

    server = corral_factory()
    topic = f"dirs-{uuid.uuid4().hex[:8]}"
    clients.create_topic(server.bootstrap, topic, partitions=3)
    produce(server.bootstrap, topic, 2, 10, 500)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=int(clients.TIMEOUT_S * 1000))
    try:
        described = admin.describe_log_dirs({topic: [1, 2]})
    finally:
        admin.close()
    (broker,) = described
    (log_dir,) = broker["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, str(server.partition_dir(topic, 0).parent.resolve()))
    # The volume's size is not measured: reported unknown, as the protocol allows.
    assert (log_dir["total_bytes"], log_dir["usable_bytes"]) == (-1, -1)
    (listed,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in listed["partitions"]}
    assert listed["name"] == topic and set(sizes) == {1, 2}, described
    assert sizes[1] == 0 and sizes[2] > 10 * 500, sizes


def test_not_advertised_in_front_of_kafka(corral_factory, apache_kafka_classic, java_classpath):
    front = corral_factory(config=CORRAL_GROUP_CONFIG + corral_upstream_config(apache_kafka_classic.bootstrap))
    shown = log_dirs_tool(java_classpath, front.bootstrap)
    assert shown.returncode != 0
    assert "UnsupportedVersionException" in shown.stdout + shown.stderr, shown
