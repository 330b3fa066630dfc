"""Client quotas ([quotas]) with confluent-kafka: produce and fetch byte rates per principal; the
request-time share per client id, with raw Metadata, Produce and ApiVersions requests.

`alice` has a produce and a fetch quota of QUOTA bytes per second; `bob` has none. Over a few
seconds of producing (and then consuming) as fast as librdkafka can, alice is throttled —
librdkafka reports the broker's throttle_time_ms through its throttle callback — and the rate
her requests are served at stays near the quota; bob, on the same node at the same time, is
never throttled. The windows are short (5 × 200 ms) so the rate settles within the test. A
client id with a tiny share of request time gets Metadata, Produce and ApiVersions responses
whose throttle_time_ms is above zero (and waits that long before its next request is read);
another client id does not. Metadata has the field first in its body, Produce and ApiVersions
last: both places are checked.
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


def throttles(port: int, client_id: str, requests: int, make, read, until_throttled: bool = False) -> list[int]:
    """throttle_time_ms of `requests` requests, one after the other, as `client_id` (or until
    one is throttled): `make(correlation id, client id)` builds a request, `read(frame)` returns
    the response's (correlation id, throttle)."""
    found = []
    conn = kw.Conn(f"127.0.0.1:{port}")
    try:
        for corr in range(1, requests + 1):
            conn.send(make(corr, client_id))
            correlation, throttle = read(conn.recv_frame())
            assert correlation == corr
            found.append(throttle)
            if until_throttled and throttle > 0:
                break
    finally:
        conn.close()
    return found


def metadata_v4(corr: int, client_id: str) -> bytes:
    return kw.request(kw.API_METADATA, 4, corr, kw.array([]) + b"\x00", client_id=client_id)


def read_metadata_v4(frame: bytes) -> tuple[int, int]:
    return struct.unpack(">ii", frame[:8])


def api_versions_v1(corr: int, client_id: str) -> bytes:
    return kw.request(kw.API_API_VERSIONS, 1, corr, b"", client_id=client_id)


def read_api_versions_v1(frame: bytes) -> tuple[int, int]:
    """The throttle follows the error code and the array of (key, min, max)."""
    r = kw.Reader(frame)
    corr, error = r.take("i"), r.take("h")
    assert error == 0
    for _ in range(r.take("i")):
        r.take("h"), r.take("h"), r.take("h")
    throttle = r.take("i")
    assert r.done()
    return corr, throttle


def produce_v3_to(topic: str):
    def make(corr: int, client_id: str) -> bytes:
        body = kw.string(None) + kw.i16(1) + kw.i32(10000)
        batch = kw.record_batch([(None, b"v%d" % corr)])
        body += kw.array([kw.string(topic) + kw.array([kw.i32(0) + kw.nbytes(batch)])])
        return kw.request(kw.API_PRODUCE, 3, corr, body, client_id=client_id)

    return make


def read_produce_v3(frame: bytes) -> tuple[int, int]:
    """The throttle is the body's last field; every partition must have been written."""
    corr, partitions = kw.parse_produce_v3(frame)
    assert all(err == 0 for err, _ in partitions.values()), partitions
    return corr, struct.unpack(">i", frame[-4:])[0]


def test_request_time_quota_reports_its_throttle(corral_factory):
    server = corral_factory(
        config="""
[quotas]
window_ms = 200
windows = 5
entries = [{ client_id = "greedy", request_percentage = 0.01 }]
"""
    )
    topic = f"throttled-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    port = server.kafka_port
    for make, read in [
        (metadata_v4, read_metadata_v4),
        (produce_v3_to(topic), read_produce_v3),
        (api_versions_v1, read_api_versions_v1),
    ]:
        greedy = throttles(port, "greedy", 40, make, read, until_throttled=True)
        assert max(greedy) > 0, (make.__name__, greedy)
        assert throttles(port, "modest", 40, make, read) == [0] * 40, make.__name__
    status, body = server.http_get("/metrics")
    assert 'corral_quota_throttles_total{quota="request"}' in body
