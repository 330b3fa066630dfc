"""A topic of 10,000 partitions on one node whose open-file limit is far below 10,000.

A partition holds no descriptor of its own: segment files are opened through each shard's
budget (`storage.max_open_files`, by default half the process's limit) and index files are never
held open; a new partition touches the disk at its first append. The topic is created within
CreateTopics' timeout, written and read across a kill -9 and a clean restart, and the process
stays within its limit throughout.
"""

from __future__ import annotations

import os
import re
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 10_000
NOFILE = 2048
# Every fifth partition gets a record before the kill and one after it.
WRITTEN = range(0, PARTITIONS, 5)


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(server, name: str) -> float:
    status, text = server.http_get("/metrics")
    assert status == 200
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def produce(server, topic: str, tag: str) -> dict[int, int]:
    """One record per written partition, acks=all; returns partition -> acknowledged offset."""
    acked: dict[int, int] = {}
    errors = []

    def delivered(err, msg):
        if err:
            errors.append(err)
        else:
            acked[msg.partition()] = msg.offset()

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 20})
    for partition in WRITTEN:
        producer.produce(topic, value=f"{tag}-{partition}".encode(), partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    assert len(acked) == len(WRITTEN)
    return acked


def read_back(server, topic: str) -> dict[int, list[str]]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in WRITTEN])
    seen: dict[int, list[str]] = {}
    deadline = time.monotonic() + 90
    try:
        while sum(len(v) for v in seen.values()) < 2 * len(WRITTEN) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                seen.setdefault(msg.partition(), []).append(msg.value().decode())
    finally:
        consumer.close()
    return seen


def test_ten_thousand_partitions_within_a_small_open_file_limit(corral_factory, topic_name):
    server = corral_factory(start=False)
    server.prlimits = [f"--nofile={NOFILE}:{NOFILE}"]
    server.start()
    base = open_descriptors(server.pid)

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)], request_timeout=10, operation_timeout=10)[topic_name].result(timeout=15)
    described = admin.list_topics(topic_name, timeout=10).topics[topic_name]
    assert len(described.partitions) == PARTITIONS
    assert all(p.error is None and p.leader == 0 for p in described.partitions.values())
    assert not any(server.data_dir.glob(f"{topic_name}-*")), "no partition is on disk before its first append"
    assert open_descriptors(server.pid) < base + 50

    before = produce(server, topic_name, "before")
    assert all(offset == 0 for offset in before.values())
    assert len(list(server.data_dir.glob(f"{topic_name}-*"))) == len(WRITTEN)
    assert open_descriptors(server.pid) < NOFILE

    server.kill9()
    server.start()
    after = produce(server, topic_name, "after")
    assert all(offset == 1 for offset in after.values()), "every record acknowledged before kill -9 is still there"

    server.stop()
    server.start()
    seen = read_back(server, topic_name)
    assert {p: seen.get(p) for p in WRITTEN} == {p: [f"before-{p}", f"after-{p}"] for p in WRITTEN}

    # Within the budget: half the limit over the shards, whatever the partitions read and wrote.
    assert metric(server, "corral_segment_files_open") <= NOFILE // 2
    assert open_descriptors(server.pid) < NOFILE
    assert "Too many open files" not in server.log_text()
