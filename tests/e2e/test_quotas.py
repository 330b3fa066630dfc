"""Client quotas ([quotas]) with confluent-kafka: produce and fetch byte rates per principal; the
request-time share per client id, with raw Metadata requests.

`alice` has a produce and a fetch quota of QUOTA bytes per second; `bob` has none. Over a few
seconds of producing (and then consuming) as fast as librdkafka can, alice is throttled —
librdkafka reports the broker's throttle_time_ms through its throttle callback — and the rate
her requests are served at stays near the quota; bob, on the same node at the same time, is
never throttled. The windows are short (5 × 200 ms) so the rate settles within the test. A
client id with a tiny share of request time gets Metadata responses whose throttle_time_ms is
above zero (and waits that long before its next request is read); another client id does not.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kafkawire as kw
from security import SaslNode

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
QUOTA = 100_000
VALUE = b"x" * 1000


@pytest.fixture
def node(corral_factory, corral_bin, tmp_path):
    quotas = f"""
[quotas]
window_ms = 200
windows = 5
entries = [{{ principal = "User:alice", producer_byte_rate = {QUOTA}, consumer_byte_rate = {QUOTA} }}]
"""
    return SaslNode(corral_factory, corral_bin, tmp_path, USERS, quotas)


def as_user(node, user: str) -> dict:
    return node.as_user(user)


def produce_for(config: dict, topic: str, seconds: float) -> tuple[list[tuple[float, int]], list[float]]:
    """Produces as fast as the client is allowed for `seconds`: (time, bytes) of each
    acknowledgement, and the throttle times the broker reported."""
    acks: list[tuple[float, int]] = []
    throttles: list[float] = []
    producer = Producer(
        {
            **config,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 16384,
            # A short queue: the producer blocks at the rate it is served, and the final flush is short.
            "queue.buffering.max.messages": 200,
            "throttle_cb": lambda e: throttles.append(e.throttle_time),
        }
    )

    def delivered(err, msg):
        if err is None:
            acks.append((time.monotonic(), len(msg.value())))

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    return acks, throttles


def rate_after(events: list[tuple[float, int]], settle: float) -> float:
    """Bytes per second from `settle` seconds after the first event to the last."""
    start = events[0][0] + settle
    later = [(t, n) for t, n in events if t >= start]
    span = later[-1][0] - start
    return sum(n for _, n in later) / span


def create(node, topic: str) -> None:
    admin = AdminClient(as_user(node, "bob"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)


def test_produce_quota_throttles_one_principal_only(node):
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create(node, topic)
    acks, throttles = produce_for(as_user(node, "alice"), topic, 6.0)
    assert throttles and max(throttles) > 0, "alice was never throttled"
    # Request bytes include framing: the records' bytes stay at or below the quota.
    assert rate_after(acks, 2.0) <= QUOTA * 1.3, rate_after(acks, 2.0)

    bob_acks, bob_throttles = produce_for(as_user(node, "bob"), topic, 2.0)
    assert bob_throttles == [] or max(bob_throttles) == 0, bob_throttles
    assert sum(n for _, n in bob_acks) > 0
    status, body = node.server.http_get("/metrics")
    assert 'corral_quota_throttles_total{quota="produce"}' in body


def test_fetch_quota_throttles_the_consumer(node):
    topic = f"q-{uuid.uuid4().hex[:8]}"
    create(node, topic)
    # Batches smaller than what the quota allows in its measuring span (100 KB in 1 s), as a
    # fetch returns at least one whole batch.
    producer = Producer({**as_user(node, "bob"), "batch.size": 16384, "linger.ms": 5})
    for _ in range(800):
        producer.produce(topic, VALUE)
    assert producer.flush(30) == 0

    throttles: list[float] = []
    received: list[tuple[float, int]] = []
    consumer = Consumer(
        {
            **as_user(node, "alice"),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
            "max.partition.fetch.bytes": 65536,
            "throttle_cb": lambda e: throttles.append(e.throttle_time),
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and sum(n for _, n in received) < 800 * len(VALUE):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            received.append((time.monotonic(), len(message.value())))
    consumer.close()
    assert throttles and max(throttles) > 0, "the consumer was never throttled"
    assert rate_after(received, 1.0) <= QUOTA * 1.5, rate_after(received, 1.0)


def metadata_throttles(port: int, client_id: str, requests: int) -> list[int]:
    """throttle_time_ms of `requests` Metadata v4 requests, one after the other, as `client_id`."""
    throttles = []
    conn = kw.Conn(f"127.0.0.1:{port}")
    try:
        for corr in range(1, requests + 1):
            conn.send(kw.request(kw.API_METADATA, 4, corr, kw.array([]) + b"\x00", client_id=client_id))
            frame = conn.recv_frame()
            correlation, throttle = struct.unpack(">ii", frame[:8])
            assert correlation == corr
            throttles.append(throttle)
    finally:
        conn.close()
    return throttles


def test_request_time_quota_reports_its_throttle(corral_factory):
    server = corral_factory(
        config="""
[quotas]
window_ms = 200
windows = 5
entries = [{ client_id = "greedy", request_percentage = 0.01 }]
"""
    )
    greedy = metadata_throttles(server.kafka_port, "greedy", 40)
    assert max(greedy) > 0, greedy
    assert metadata_throttles(server.kafka_port, "modest", 40) == [0] * 40
    status, body = server.http_get("/metrics")
    assert 'corral_quota_throttles_total{quota="request"}' in body
