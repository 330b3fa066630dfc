"""Small helpers over confluent-kafka shared by the end-to-end tests.

Consumers here never join a group: they assign partitions explicitly, read from an explicit offset
and never commit, so these helpers test the data path alone (groups have their own tests, see
test_groups_*.py). librdkafka insists on a group.id for a Consumer even then; with assign() and
explicit offsets it never needs the coordinator.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30.0

# librdkafka's own log lines go through Python logging, so pytest shows them with the test that
# produced them (on failure) instead of printing them at random from background threads.
RDKAFKA_LOG = logging.getLogger("librdkafka")


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "logger": RDKAFKA_LOG})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = admin_client(bootstrap)  # keep a reference: the futures fail if it is destroyed
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=TIMEOUT_S,
    )
    futures[name].result(TIMEOUT_S)


def producer(bootstrap: str, **extra) -> Producer:
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 60000,
        "logger": RDKAFKA_LOG,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return Producer(conf)


def produce_all(p: Producer, topic: str, items, partition: int | None = None) -> list[tuple]:
    """Produces (key, value) pairs, waits for every delivery report and asserts each succeeded.

    Returns (key, value, partition, offset) per record, in produce order.
    """
    reports: dict[int, tuple] = {}

    def on_delivery(i):
        def cb(err, msg):
            reports[i] = (err, msg.partition(), msg.offset())

        return cb

    count = 0
    keyed = []
    for i, (key, value) in enumerate(items):
        kwargs = {"key": key, "value": value, "on_delivery": on_delivery(i)}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
        keyed.append((key, value))
        count += 1
    remaining = p.flush(TIMEOUT_S * 2)
    assert remaining == 0, f"{remaining} messages still undelivered after flush"
    assert len(reports) == count, f"{count - len(reports)} delivery reports missing"
    failed = [(i, reports[i][0]) for i in range(count) if reports[i][0] is not None]
    assert not failed, f"{len(failed)} deliveries failed, first: {failed[:5]}"
    return [(keyed[i][0], keyed[i][1], reports[i][1], reports[i][2]) for i in range(count)]


def consumer(bootstrap: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "corral-e2e-unused",  # required by librdkafka; never joined (assign only)
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "logger": RDKAFKA_LOG,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return Consumer(conf)


def partition_count(bootstrap: str, topic: str) -> int:
    admin = admin_client(bootstrap)
    md = admin.list_topics(topic=topic, timeout=TIMEOUT_S)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return len(t.partitions)


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False)
    finally:
        c.close()


def consume_all(bootstrap: str, topic: str, partitions: list[int] | None = None, timeout: float = 60.0, **extra) -> dict[int, list[Record]]:
    """Reads every partition from offset 0 up to its high watermark (as of the call).

    Asserts no consumer error other than end-of-partition. Returns the records per partition in
    the order they arrived.
    """
    if partitions is None:
        partitions = list(range(partition_count(bootstrap, topic)))
    c = consumer(bootstrap, **extra)
    try:
        ends = {}
        for p in partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S, cached=False)
            ends[p] = high
        out: dict[int, list[Record]] = {p: [] for p in partitions}
        pending = {p for p in partitions if ends[p] > 0}
        if not pending:
            return out
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, (
                f"timed out reading {topic}: still waiting for partitions {sorted(pending)}; "
                f"ends={ends} got={ {p: len(v) for p, v in out.items()} }"
            )
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error on {topic}: {err}")
            p = msg.partition()
            ts_type, ts = msg.timestamp()
            out[p].append(Record(p, msg.offset(), msg.key(), msg.value(), ts))
            if msg.offset() + 1 >= ends[p]:
                pending.discard(p)
        return out
    finally:
        c.close()
