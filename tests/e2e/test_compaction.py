"""Compacted topics (cleanup.policy=compact), with real clients.

A compacted topic keeps the last record of each key. The scenarios with a `target` run on corral
and on Apache Kafka 4.4 (the reference: the same records kept, the same refusals). The others
cover what only corral's own storage shows: tombstones going after delete.retention.ms, a kill -9
and restart after compactions, the metrics, and kafka-python reading across the gaps.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

import clients
import kafkawire as kw
from test_delete_records import leader_address

T = clients.TIMEOUT_S
# The cleaner looks every 200 ms (Kafka: 15 s, log.cleaner.backoff.ms).
CORRAL_CONFIG = "[storage]\ncleaner_backoff_ms = 200\n"
# Small segments rolled by time, compacted as soon as anything is dirty.
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01"}
KEYS = 10
ROUNDS = 3


@pytest.fixture(params=["corral", "kafka"])
def target(request, corral_factory, apache_kafka) -> str:
    return corral_factory(config=CORRAL_CONFIG).bootstrap if request.param == "corral" else apache_kafka.bootstrap


def new_topic(bootstrap: str, **config: str) -> str:
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic, config=COMPACTED | config)
    return topic


def produce_rounds(bootstrap: str, topic: str, rounds: int = ROUNDS) -> list[tuple]:
    """`rounds` values of each key, then (after segment.ms) one more record, which rolls the
    segment: everything before it can be compacted (its key is new each time, so it stays).
    Returns the deliveries."""
    producer = clients.producer(bootstrap)
    items = [(f"k{k}".encode(), f"r{r}-k{k}".encode()) for r in range(rounds) for k in range(KEYS)]
    delivered = clients.produce_all(producer, topic, items, partition=0)
    time.sleep(0.5)
    delivered += clients.produce_all(producer, topic, [(f"roll-{uuid.uuid4().hex[:6]}".encode(), b"roll")], partition=0)
    return delivered


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in clients.consume_all(bootstrap, topic, [0])[0]]


def wait_until_compacted(bootstrap: str, topic: str, expected: list, timeout: float = 60.0) -> list:
    """Reads the topic from the beginning until it holds exactly `expected`."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_all(bootstrap, topic)
        if records == expected or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def last_of_each_key(delivered: list[tuple]) -> list[tuple[int, bytes, bytes]]:
    last = {key: (offset, key, value) for key, value, _partition, offset in delivered}
    return sorted(last.values())


def compacted_rounds(bootstrap: str) -> tuple[str, list[tuple], list[tuple]]:
    """A new compacted topic with `ROUNDS` values of each key, once compacted: the topic, the
    deliveries and what it holds."""
    topic = new_topic(bootstrap)
    delivered = produce_rounds(bootstrap, topic)
    expected = last_of_each_key(delivered)
    assert [offset for offset, _, _ in expected] == list(range(KEYS * (ROUNDS - 1), KEYS * ROUNDS + 1))
    assert wait_until_compacted(bootstrap, topic, expected) == expected
    return topic, delivered, expected


def test_a_consumer_reads_the_last_record_of_each_key(target):
    topic, _, _ = compacted_rounds(target)
    # The offsets are kept (the consumer read across the gap) and the watermarks do not move.
    assert clients.watermarks(target, topic, 0) == (0, KEYS * ROUNDS + 1)


def test_records_without_a_key_are_refused(target):
    topic = new_topic(target)
    producer = clients.producer(target, enable_idempotence=False, retries=0)
    errors: list = []
    producer.produce(topic, b"no key", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(T)
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD], errors
    # A keyed record still goes in.
    clients.produce_all(producer, topic, [(b"k", b"v")], partition=0)
    assert clients.watermarks(target, topic, 0) == (0, 1)


def test_records_of_a_compacted_topic_cannot_be_deleted(target):
    topic = new_topic(target)
    clients.produce_all(clients.producer(target), topic, [(b"k", b"v")] * 3, partition=0)
    admin = clients.admin_client(target)
    future = admin.delete_records([TopicPartition(topic, 0, 2)], request_timeout=T, operation_timeout=T)[TopicPartition(topic, 0, 2)]
    with pytest.raises(KafkaException) as refused:
        future.result(T)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    # compact,delete allows it.
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource], request_timeout=T)[resource].result(T)
    future = admin.delete_records([TopicPartition(topic, 0, 2)], request_timeout=T, operation_timeout=T)[TopicPartition(topic, 0, 2)]
    assert future.result(T).low_watermark == 2


@pytest.mark.parametrize("policy", ["shred", "delete,shred"])
def test_a_bad_cleanup_policy_is_refused(target, policy):
    admin = clients.admin_client(target)
    topic = f"bad-policy-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": policy})], request_timeout=T)
    with pytest.raises(KafkaException) as refused:
        futures[topic].result(T)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_duplicate_policies_are_dropped(target):
    topic = new_topic(target, **{"cleanup.policy": "compact,delete,compact"})
    admin = clients.admin_client(target)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=T)[resource].result(T)
    assert configs["cleanup.policy"].value == "compact,delete"


def test_a_topic_switched_to_compact_is_compacted(corral_factory):
    server = corral_factory(config=CORRAL_CONFIG)
    topic = f"switched-{uuid.uuid4().hex[:8]}"
    clients.create_topic(server.bootstrap, topic, config={"segment.ms": "300", "min.cleanable.dirty.ratio": "0.01"})
    producer = clients.producer(server.bootstrap)
    delivered = clients.produce_all(producer, topic, [(b"k", b"1"), (b"k", b"2")], partition=0)
    admin = clients.admin_client(server.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], request_timeout=T)[resource].result(T)
    time.sleep(0.5)
    delivered += clients.produce_all(producer, topic, [(b"roll", b"roll")], partition=0)
    expected = last_of_each_key(delivered)
    assert wait_until_compacted(server.bootstrap, topic, expected) == expected == [(1, b"k", b"2"), (2, b"roll", b"roll")]


def test_tombstones_go_after_delete_retention_ms(corral_factory):
    server = corral_factory(config=CORRAL_CONFIG)
    topic = new_topic(server.bootstrap, **{"delete.retention.ms": "2000"})
    producer = clients.producer(server.bootstrap)
    clients.produce_all(producer, topic, [(b"a", b"1"), (b"b", b"2"), (b"a", None)], partition=0)
    time.sleep(0.5)
    clients.produce_all(producer, topic, [(b"c", b"3")], partition=0)
    # The tombstone replaces a=1 and stays for a while, so consumers see the deletion.
    assert wait_until_compacted(server.bootstrap, topic, [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")])[1] == (2, b"a", None)
    # Once delete.retention.ms has passed, the next compaction removes it.
    time.sleep(2.5)
    clients.produce_all(producer, topic, [(b"d", b"4")], partition=0)
    time.sleep(0.5)
    clients.produce_all(producer, topic, [(b"e", b"5")], partition=0)
    expected = [(1, b"b", b"2"), (3, b"c", b"3"), (4, b"d", b"4"), (5, b"e", b"5")]
    assert wait_until_compacted(server.bootstrap, topic, expected) == expected


def test_compactions_survive_a_kill_and_restart(corral_factory):
    server = corral_factory(config=CORRAL_CONFIG)
    topic, delivered, expected = compacted_rounds(server.bootstrap)
    status, metrics = server.http_get("/metrics")
    assert status == 200
    removed = sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("corral_compaction_records_removed_total"))
    assert removed == KEYS * (ROUNDS - 1), metrics
    server.kill9()
    server.restart()
    assert read_all(server.bootstrap, topic) == expected
    # Compaction goes on after the restart: a new round replaces every key again.
    delivered += produce_rounds(server.bootstrap, topic, rounds=1)
    expected = last_of_each_key(delivered)
    assert wait_until_compacted(server.bootstrap, topic, expected) == expected


def test_small_segments_are_merged_into_one(corral_factory):
    """Every record here rolls a segment (segment.ms is 300 ms); compaction writes the small
    segments it reads into one, as Kafka's cleaner groups segments up to segment.bytes. What
    consumers read does not change, and a kill -9 and restart keep it."""
    server = corral_factory(config=CORRAL_CONFIG)
    topic = new_topic(server.bootstrap)
    producer = clients.producer(server.bootstrap)
    delivered = []
    for k in range(8):
        delivered += clients.produce_all(producer, topic, [(f"k{k}".encode(), b"v")], partition=0)
        time.sleep(0.4)
    delivered += clients.produce_all(producer, topic, [(b"last", b"v")], partition=0)
    expected = last_of_each_key(delivered)
    segments = lambda: sorted(path.name for path in server.partition_dir(topic, 0).glob("*.log"))  # noqa: E731
    deadline = time.monotonic() + 60
    while len(segments()) > 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    # The eight sealed segments are one now; the active one holds the last record.
    assert segments() == ["00000000000000000000.log", "00000000000000000008.log"], segments()
    assert read_all(server.bootstrap, topic) == expected
    server.kill9()
    server.restart()
    assert read_all(server.bootstrap, topic) == expected
    assert kafka_python_reads(server.bootstrap, topic) == expected


def kafka_python_reads(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """What kafka-python reads of partition 0 from its start: (offset, key, value)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [(m.offset, m.key, m.value) for m in consumer]
    finally:
        consumer.close()


def test_kafka_python_reads_across_the_gaps(corral_factory):
    server = corral_factory(config=CORRAL_CONFIG)
    topic, _, expected = compacted_rounds(server.bootstrap)
    seen = kafka_python_reads(server.bootstrap, topic)
    assert seen == expected


def first_batch(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """The first batch a raw Fetch v4 from offset 0 of partition 0 gets: (base offset, last offset
    delta, record count)."""
    base_offset, last_offset_delta, count, _attributes, _base_timestamp = fetched_batches(bootstrap, topic)[0]
    return base_offset, last_offset_delta, count


def fetched_batches(bootstrap: str, topic: str) -> list[tuple[int, int, int, int, int]]:
    """The batches a raw Fetch v4 from offset 0 of partition 0 gets: (base offset, last offset
    delta, record count, attributes, base timestamp) each."""
    conn = kw.Conn(leader_address(bootstrap, topic))
    try:
        conn.send(kw.fetch_v4(1, topic, 0, 0))
        _, partitions = kw.parse_fetch_v4(conn.recv_frame())
    finally:
        conn.close()
    error, _high_watermark, records = partitions[(topic, 0)]
    assert error == 0 and records, partitions
    batches = []
    position = 0
    while position + 61 <= len(records):
        base_offset, length = struct.unpack_from(">qi", records, position)
        attributes, last_offset_delta, base_timestamp = struct.unpack_from(">hiq", records, position + 21)
        count, = struct.unpack_from(">i", records, position + 57)
        batches.append((base_offset, last_offset_delta, count, attributes, base_timestamp))
        position += 12 + length
    return batches


def test_a_producers_last_batch_stays_empty_when_its_records_are_replaced(target):
    """An idempotent producer's last batch is kept, emptied, once another producer replaced all
    its keys: its sequence numbers stay in the log, so a retry of it is still a duplicate after
    the producer state is rebuilt. Consumers read across it."""
    topic = new_topic(target)
    first = clients.producer(target, linger_ms=200)
    clients.produce_all(first, topic, [(f"k{k}".encode(), b"first") for k in range(KEYS)], partition=0)
    second = clients.producer(target)
    delivered = clients.produce_all(second, topic, [(f"k{k}".encode(), b"second") for k in range(KEYS)], partition=0)
    time.sleep(0.5)
    delivered += clients.produce_all(second, topic, [(f"roll-{uuid.uuid4().hex[:6]}".encode(), b"roll")], partition=0)
    expected = [(offset, key, value) for key, value, _partition, offset in delivered]
    assert [offset for offset, _, _ in expected] == list(range(KEYS, 2 * KEYS + 1))
    assert wait_until_compacted(target, topic, expected) == expected
    # The first producer's one batch: offsets 0 to 9, no record left.
    assert first_batch(target, topic) == (0, KEYS - 1, 0)
    seen = kafka_python_reads(target, topic)
    assert seen == expected
    assert clients.watermarks(target, topic, 0) == (0, 2 * KEYS + 1)


HOUR_MS = 3600_000
DELETE_HORIZON_FLAG = 0x40


def test_an_old_tombstone_stays_delete_retention_ms_from_its_first_compaction(target):
    """KIP-534: a tombstone whose timestamp is long past (a mirrored topic's, say) outlives the
    compaction that first sees it, which sets its batch's delete horizon to delete.retention.ms
    from then. Consumers still read each record's own timestamp."""
    topic = new_topic(target, **{"delete.retention.ms": str(HOUR_MS)})
    two_days_ago = int(time.time() * 1000) - 48 * HOUR_MS
    producer = clients.producer(target)
    for key, value in ((b"a", b"1"), (b"b", b"2"), (b"a", None)):
        producer.produce(topic, key=key, value=value, partition=0, timestamp=two_days_ago)
    assert producer.flush(T) == 0
    time.sleep(0.5)
    started_ms = int(time.time() * 1000)
    (roll, _, _, offset), = clients.produce_all(producer, topic, [(f"roll-{uuid.uuid4().hex[:6]}".encode(), b"roll")], partition=0)
    expected = [(1, b"b", b"2"), (2, b"a", None), (offset, roll, b"roll")]
    assert wait_until_compacted(target, topic, expected) == expected
    consumed = clients.consume_all(target, topic, [0])[0]
    assert [r.timestamp for r in consumed[:2]] == [two_days_ago, two_days_ago]
    # The batch holding the tombstone: its base timestamp is now the horizon.
    holding = [b for b in fetched_batches(target, topic) if b[0] <= 2 <= b[0] + b[1]]
    assert len(holding) == 1, fetched_batches(target, topic)
    _, _, _, attributes, horizon = holding[0]
    assert attributes & DELETE_HORIZON_FLAG, holding
    assert started_ms + HOUR_MS <= horizon <= int(time.time() * 1000) + HOUR_MS, (horizon - started_ms, holding)


def test_records_without_a_key_are_named_in_the_produce_response(target):
    """KIP-467: a batch refused for its keyless records names each of them in `record_errors`
    (Produce v8+), as Kafka does."""
    topic = new_topic(target)
    batch = kw.record_batch([(None, b"a"), (b"k", b"b"), (None, b"c")])
    # Kafka answers CreateTopics before its metadata shows the partition and its broker leads it:
    # no leader, NOT_LEADER_OR_FOLLOWER (6) or UNKNOWN_TOPIC_OR_PARTITION (3) until then.
    deadline = time.monotonic() + T
    for correlation in range(1, 1000):
        try:
            leader = leader_address(target, topic)
        except KeyError:
            assert time.monotonic() < deadline, f"no leader of {topic}-0 within {T} s"
            time.sleep(0.2)
            continue
        conn = kw.Conn(leader)
        try:
            conn.send(kw.produce_v8(correlation, topic, 0, batch))
            _, partitions = kw.parse_produce_v8(conn.recv_frame())
        finally:
            conn.close()
        if partitions[(topic, 0)][0] not in (3, 6) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    error, base_offset, record_errors, message = partitions[(topic, 0)]
    assert (error, base_offset) == (87, -1), partitions  # INVALID_RECORD
    assert [index for index, _ in record_errors] == [0, 2], record_errors
    for _, why in record_errors:
        assert why == f"Compacted topic cannot accept message without key in topic partition {topic}-0", why
    assert message and "2 record errors" in message, message
    assert clients.watermarks(target, topic, 0) == (0, 0)
