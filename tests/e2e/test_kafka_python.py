"""kafka-python (a pure-Python client, independent of librdkafka) against corral."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

import clients
from segments import CODECS, read_batches, segment_files

T = clients.TIMEOUT_S
RECORDS = 500


def read_back(bootstrap: str, topic: str, partitions: list[int], expected: int):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=30000,
        fetch_max_wait_ms=100,
    )
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records = []
        deadline = time.monotonic() + 60
        while len(records) < expected:
            assert time.monotonic() < deadline, f"read {len(records)} of {expected} records"
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        # Nothing beyond what was produced.
        end = consumer.end_offsets(tps)
        assert sum(end.values()) == expected
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("compression", [None, "gzip"], ids=["uncompressed", "gzip"])
def test_kafka_python_produce_and_consume(corral, topic_name, compression):
    admin = KafkaAdminClient(bootstrap_servers=corral.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)], timeout_ms=30000)
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=corral.bootstrap, acks="all", compression_type=compression, linger_ms=5)
    try:
        futures = [
            (f"k{i:04d}".encode(), f"kafka-python value {i:04d} ".encode() * 3, producer.send(topic_name, key=f"k{i:04d}".encode(), value=f"kafka-python value {i:04d} ".encode() * 3))
            for i in range(RECORDS)
        ]
        producer.flush(timeout=T)
        acked = {}
        for key, value, fut in futures:
            md = fut.get(timeout=T)
            acked[key] = (value, md.partition, md.offset)
    finally:
        producer.close(timeout=T)
    assert len({(p, o) for _, p, o in acked.values()}) == RECORDS, "two records acknowledged at the same offset"

    records = read_back(corral.bootstrap, topic_name, [0, 1], RECORDS)
    assert len(records) == RECORDS
    by_partition = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r.offset)
        value, partition, offset = acked[r.key]
        assert (r.value, r.partition, r.offset) == (value, partition, offset), f"{r.key!r} differs from what was acknowledged"
    for p, offsets in by_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous from 0"
    assert {r.key for r in records} == set(acked)

    # Stored as sent: the codec bits on disk show kafka-python really compressed.
    codecs = {b.codec for p in (0, 1) for seg in segment_files(corral.partition_dir(topic_name, p)) for b in read_batches(seg)[0]}
    assert codecs == {CODECS[compression or "none"]}

    # The other clients read the same records (cross-client compatibility of the stored batches).
    got = clients.consume_all(corral.bootstrap, topic_name)
    assert sum(len(v) for v in got.values()) == RECORDS
    for recs in got.values():
        for r in recs:
            assert acked[r.key][1:] == (r.partition, r.offset)


def test_kafka_python_admin_create_list_delete(corral, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=corral.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)], timeout_ms=30000)
        assert topic_name in admin.list_topics()
        described = admin.describe_topics([topic_name])
        assert len(described) == 1 and described[0]["error_code"] == 0
        assert sorted(p["partition_index"] for p in described[0]["partitions"]) == [0, 1, 2]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)], timeout_ms=30000)

        admin.delete_topics([topic_name], timeout_ms=30000)
        assert topic_name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic_name], timeout_ms=30000)
    finally:
        admin.close()
