"""confluent-kafka AdminClient against corral: topic admin, configs, cluster, offsets.

These servers run with topic auto-creation off, so that a deleted or never-created topic stays
unknown instead of being re-created by the first client that asks for it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic, OffsetSpec, ResourceType

import clients

NO_AUTO_CREATE = "[topics]\nauto_create = false\n"
T = clients.TIMEOUT_S


@pytest.fixture
def server(corral_factory):
    return corral_factory(config=NO_AUTO_CREATE)


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(T)
    return info.value.args[0]


@pytest.mark.parametrize(
    "bad_name",
    ["bad name!", "..", ".", "x" * 250, "slash/name"],
    ids=["space-and-bang", "dotdot", "dot", "too-long", "slash"],
)
def test_create_topic_with_invalid_name_is_refused(server, bad_name):
    admin = clients.admin_client(server.bootstrap)
    fs = admin.create_topics([NewTopic(bad_name, num_partitions=1, replication_factor=1)], request_timeout=T)
    assert error_of(fs[bad_name]).code() == KafkaError.TOPIC_EXCEPTION
    assert bad_name not in admin.list_topics(timeout=T).topics


@pytest.mark.parametrize(
    "partitions, replication, config, code",
    [
        (0, 1, {}, KafkaError.INVALID_PARTITIONS),
        (1, 3, {}, KafkaError.INVALID_REPLICATION_FACTOR),
        (1, 1, {"no.such.config": "1"}, KafkaError.INVALID_CONFIG),
        (1, 1, {"retention.ms": "not-a-number"}, KafkaError.INVALID_CONFIG),
    ],
    ids=["zero-partitions", "replication-3", "unknown-config", "bad-config-value"],
)
def test_create_topic_with_invalid_settings_is_refused(server, topic_name, partitions, replication, config, code):
    admin = clients.admin_client(server.bootstrap)
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=partitions, replication_factor=replication, config=config)], request_timeout=T)
    err = error_of(fs[topic_name])
    assert err.code() == code, f"got {err}"
    assert topic_name not in admin.list_topics(timeout=T).topics, "a refused topic must not be created"
    assert not server.partition_dir(topic_name, 0).exists()


def test_duplicate_create_reports_topic_already_exists(server, topic_name):
    admin = clients.admin_client(server.bootstrap)
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)], request_timeout=T)
    assert fs[topic_name].result(T) is None
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=5, replication_factor=1)], request_timeout=T)
    assert error_of(fs[topic_name]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    # The first creation stands.
    assert len(admin.list_topics(timeout=T).topics[topic_name].partitions) == 2


def test_list_topics_and_describe_configs(server, topic_name):
    admin = clients.admin_client(server.bootstrap)
    other = topic_name + "-other"
    fs = admin.create_topics(
        [
            NewTopic(topic_name, num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"}),
            NewTopic(other, num_partitions=1, replication_factor=-1),
        ],
        request_timeout=T,
    )
    for f in fs.values():
        f.result(T)

    md = admin.list_topics(timeout=T)
    assert {topic_name, other} <= set(md.topics)
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]
    assert sorted(md.topics[other].partitions) == [0]
    for p in md.topics[topic_name].partitions.values():
        assert p.leader == 0 and p.replicas == [0] and p.isrs == [0]
    assert list(md.brokers) == [0]
    assert (md.brokers[0].host, md.brokers[0].port) == ("127.0.0.1", server.kafka_port)

    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([res], request_timeout=T)[res].result(T)
    assert "retention.ms" in configs and "segment.bytes" in configs
    retention = configs["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_default
    segment = configs["segment.bytes"]
    assert segment.value == str(1024 * 1024 * 1024), "the broker default from config/corral.toml"
    assert segment.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # The topic created without overrides reports the broker default retention (7 days).
    res_other = ConfigResource(ResourceType.TOPIC, other)
    configs_other = admin.describe_configs([res_other], request_timeout=T)[res_other].result(T)
    assert configs_other["retention.ms"].value == str(7 * 24 * 3600 * 1000)

    # An unknown topic is an error, not an empty description.
    res_missing = ConfigResource(ResourceType.TOPIC, topic_name + "-missing")
    err = error_of(admin.describe_configs([res_missing], request_timeout=T)[res_missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_adds_writable_partitions(server, topic_name):
    admin = clients.admin_client(server.bootstrap)
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)], request_timeout=T)[topic_name].result(T)
    admin.create_partitions([NewPartitions(topic_name, 4)], request_timeout=T)[topic_name].result(T)
    assert sorted(admin.list_topics(topic=topic_name, timeout=T).topics[topic_name].partitions) == [0, 1, 2, 3]

    # Shrinking is refused.
    err = error_of(admin.create_partitions([NewPartitions(topic_name, 2)], request_timeout=T)[topic_name])
    assert err.code() == KafkaError.INVALID_PARTITIONS

    # Every new partition takes and serves records.
    p = clients.producer(server.bootstrap)
    for part in range(4):
        delivered = clients.produce_all(p, topic_name, [(b"k%d" % part, b"v%d" % part)], partition=part)
        assert delivered[0][2:] == (part, 0)
    got = clients.consume_all(server.bootstrap, topic_name)
    assert {part: [(r.offset, r.value) for r in recs] for part, recs in got.items()} == {
        part: [(0, b"v%d" % part)] for part in range(4)
    }


def test_delete_topic_makes_it_unknown(server, topic_name):
    admin = clients.admin_client(server.bootstrap)
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)], request_timeout=T)[topic_name].result(T)
    p = clients.producer(server.bootstrap)
    clients.produce_all(p, topic_name, [(b"k", b"before delete")])
    del p

    admin.delete_topics([topic_name], operation_timeout=T, request_timeout=T)[topic_name].result(T)
    assert topic_name not in admin.list_topics(timeout=T).topics
    md = admin.list_topics(topic=topic_name, timeout=T)
    assert md.topics[topic_name].error is not None
    assert md.topics[topic_name].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Deleting it again: it is unknown.
    err = error_of(admin.delete_topics([topic_name], request_timeout=T)[topic_name])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Producing to it fails (auto-creation is off on this server).
    reports = []
    p = clients.producer(
        server.bootstrap, message_timeout_ms=20000, topic_metadata_propagation_max_ms=1000, enable_idempotence=False
    )
    p.produce(topic_name, key=b"k", value=b"after delete", on_delivery=lambda err, msg: reports.append(err))
    p.flush(T)
    assert len(reports) == 1 and reports[0] is not None, "producing to a deleted topic must fail"
    assert reports[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), reports[0]

    # Its data is gone from disk too (possibly after a rename-then-delete).
    deadline = time.monotonic() + T
    while server.partition_dir(topic_name, 0).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.partition_dir(topic_name, 0).exists()

    # The name can be used again, and the new topic starts empty.
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)], request_timeout=T)[topic_name].result(T)
    assert clients.watermarks(server.bootstrap, topic_name, 0) == (0, 0)


def test_describe_cluster(server):
    admin = clients.admin_client(server.bootstrap)
    desc = admin.describe_cluster(request_timeout=T).result(T)
    assert desc.cluster_id, "cluster id must be set"
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(0, "127.0.0.1", server.kafka_port)]
    assert desc.controller is not None and desc.controller.id == 0
    # The cluster id is kept across restarts.
    cluster_id = desc.cluster_id
    server.restart()
    admin = clients.admin_client(server.bootstrap)
    assert admin.describe_cluster(request_timeout=T).result(T).cluster_id == cluster_id


def test_list_offsets_earliest_latest_and_by_timestamp(server, topic_name):
    admin = clients.admin_client(server.bootstrap)
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)], request_timeout=T)[topic_name].result(T)
    tp = TopicPartition(topic_name, 0)

    def list_offset(spec):
        return admin.list_offsets({tp: spec}, request_timeout=T)[tp].result(T)

    assert list_offset(OffsetSpec.earliest()).offset == 0
    assert list_offset(OffsetSpec.latest()).offset == 0

    # 20 records, one second apart in record time, in batches of 5.
    base = int(time.time() * 1000) - 3_600_000
    p = clients.producer(server.bootstrap, linger_ms=0)
    reports = []
    for i in range(20):
        p.produce(topic_name, partition=0, value=b"r%d" % i, timestamp=base + i * 1000, on_delivery=lambda e, m: reports.append((e, m.offset())))
        if i % 5 == 4:
            assert p.flush(T) == 0
    assert [e for e, _ in reports] == [None] * 20
    assert [o for _, o in reports] == list(range(20))

    assert list_offset(OffsetSpec.earliest()).offset == 0
    assert list_offset(OffsetSpec.latest()).offset == 20
    # First offset whose timestamp is >= the one asked for, also inside a batch.
    for i in (0, 3, 5, 7, 19):
        info = list_offset(OffsetSpec.for_timestamp(base + i * 1000))
        assert (info.offset, info.timestamp) == (i, base + i * 1000), f"timestamp of record {i}"
    info = list_offset(OffsetSpec.for_timestamp(base + 2500))
    assert info.offset == 3
    # Before everything: the first record; after everything: no offset (-1).
    assert list_offset(OffsetSpec.for_timestamp(base - 10_000)).offset == 0
    assert list_offset(OffsetSpec.for_timestamp(base + 100_000)).offset == -1
    # The record with the largest timestamp (ListOffsets v7+, KIP-734).
    info = list_offset(OffsetSpec.max_timestamp())
    assert (info.offset, info.timestamp) == (19, base + 19 * 1000)

    # The same answers through the consumer API (ListOffsets as consumers use it).
    c = clients.consumer(server.bootstrap)
    try:
        assert c.get_watermark_offsets(tp, timeout=T, cached=False) == (0, 20)
        found = c.offsets_for_times([TopicPartition(topic_name, 0, base + 7000)], timeout=T)
        assert found[0].error is None and found[0].offset == 7
    finally:
        c.close()
