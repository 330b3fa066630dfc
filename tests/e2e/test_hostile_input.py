"""Hostile and malformed input on raw sockets.

After every bad frame the server process must still be alive, a connection opened before the bad
frame must still be served, and a real client (confluent-kafka) on a new connection must still
produce and consume. Where Kafka defines the answer (an error code, closing the connection), the
test checks that answer too.
"""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import clients
import kafkawire as kw

RECV_TIMEOUT_S = 10.0
# A server that allocated what a hostile header asked for would show it here.
MAX_RSS_BYTES = 1 << 30


@pytest.fixture
def target(corral, topic_name):
    """A topic with three records, and a raw connection opened before anything bad happens."""
    clients.create_topic(corral.bootstrap, topic_name, partitions=1)
    delivered = clients.produce_all(clients.producer(corral.bootstrap), topic_name, [(b"k%d" % i, b"before %d" % i) for i in range(3)])
    assert [d[3] for d in delivered] == [0, 1, 2]
    witness = kw.Conn(corral.bootstrap, timeout=RECV_TIMEOUT_S)
    witness.send(kw.api_versions_v0(1))
    corr, err, _ = kw.parse_api_versions_v0(witness.recv_frame())
    assert (corr, err) == (1, 0)
    yield corral, topic_name, witness
    witness.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def assert_still_serves(server, topic: str, witness: kw.Conn) -> None:
    assert server.alive(), f"corral died (exit code {server.proc.poll()})"
    assert rss_bytes(server.pid) < MAX_RSS_BYTES, f"corral's memory grew to {rss_bytes(server.pid) >> 20} MiB"

    # The connection opened before the bad frame is still served.
    witness.send(kw.metadata_v0(7001, [topic]))
    frame = witness.recv_frame()
    assert frame is not None, "the earlier connection was closed"
    corr, brokers, topics = kw.parse_metadata_v0(frame)
    assert corr == 7001 and topics == {topic: 0}
    assert brokers == [(0, "127.0.0.1", server.kafka_port)]

    # A real client on a new connection produces and consumes.
    delivered = clients.produce_all(clients.producer(server.bootstrap), topic, [(b"after", b"still serving")])
    offset = delivered[0][3]
    got = clients.consume_all(server.bootstrap, topic)[0]
    assert (got[-1].offset, got[-1].key, got[-1].value) == (offset, b"after", b"still serving")


def open_conn(server) -> kw.Conn:
    return kw.Conn(server.bootstrap, timeout=RECV_TIMEOUT_S)


def expect_answer_or_close(conn: kw.Conn, correlation_id: int) -> None:
    """Malformed but framed: the server may answer (with this correlation id) or close; not hang."""
    try:
        frame = conn.recv_frame()
    except (ConnectionResetError, socket.timeout) as e:
        if isinstance(e, socket.timeout):
            raise AssertionError("the server neither answered nor closed the connection") from e
        return
    if frame is not None:
        assert struct.unpack_from(">i", frame)[0] == correlation_id


# --- the cases ----------------------------------------------------------------------------------


def test_huge_size_prefix_closes_connection(target):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(struct.pack(">I", 0x7FFFFFFF) + b"\x00\x12\x00\x00")
    conn.expect_closed()
    assert_still_serves(server, topic, witness)


@pytest.mark.parametrize("size", [-1, -2147483648, -100], ids=["minus-1", "int-min", "minus-100"])
def test_negative_size_prefix_closes_connection(target, size):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(struct.pack(">i", size) + b"\x00" * 16)
    conn.expect_closed()
    assert_still_serves(server, topic, witness)


def test_truncated_frame_then_close(target):
    server, topic, witness = target
    conn = open_conn(server)
    full = kw.metadata_v0(5, [topic])
    conn.send(full[: len(full) // 2])
    conn.close()
    # And one that ends inside the size prefix.
    conn = open_conn(server)
    conn.send(b"\x00\x00")
    conn.close()
    assert_still_serves(server, topic, witness)


def test_unknown_api_key_closes_connection(target):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(kw.request(999, 0, 42, b""))
    conn.expect_closed()
    assert_still_serves(server, topic, witness)


def test_unsupported_metadata_version_closes_connection(target):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(kw.request(kw.API_METADATA, 99, 43, kw.array([kw.string(topic)])))
    conn.expect_closed()
    assert_still_serves(server, topic, witness)


def test_unsupported_api_versions_version_gets_v0_error_response(target):
    server, topic, witness = target
    conn = open_conn(server)
    # A future client: ApiVersions v99 is flexible, so header v2 (client id, then an empty tag
    # buffer) and a body corral cannot know.
    header = kw.i16(kw.API_API_VERSIONS) + kw.i16(99) + kw.i32(44) + kw.string("future-client") + b"\x00"
    body = b"\x0efuture-client\x061.0.0\x00"
    conn.send(kw.i32(len(header) + len(body)) + header + body)
    frame = conn.recv_frame()
    assert frame is not None, "ApiVersions v99 must be answered, not dropped"
    corr, err, apis = kw.parse_api_versions_v0(frame)
    assert corr == 44
    assert err == 35, f"error code {err}, expected 35 UNSUPPORTED_VERSION"
    assert kw.API_API_VERSIONS in apis and apis[kw.API_API_VERSIONS][0] == 0
    assert kw.API_PRODUCE in apis and kw.API_FETCH in apis and kw.API_METADATA in apis
    # The client then retries with a version from the list, on the same connection.
    conn.send(kw.api_versions_v0(45))
    corr, err, apis_v0 = kw.parse_api_versions_v0(conn.recv_frame())
    assert (corr, err) == (45, 0) and apis_v0 == apis
    conn.close()
    assert_still_serves(server, topic, witness)


@pytest.mark.parametrize("api_key, version", [(kw.API_PRODUCE, 3), (kw.API_METADATA, 1), (kw.API_FETCH, 4)], ids=["produce-v3", "metadata-v1", "fetch-v4"])
def test_garbage_after_valid_header(target, api_key, version):
    server, topic, witness = target
    garbage = random.Random(f"{api_key}/{version}").randbytes(200)
    conn = open_conn(server)
    conn.send(kw.request(api_key, version, 46, garbage))
    expect_answer_or_close(conn, 46)
    conn.close()
    assert_still_serves(server, topic, witness)


def test_metadata_array_length_far_beyond_frame(target):
    server, topic, witness = target
    conn = open_conn(server)
    body = kw.i32(0x7FFFFFF0) + kw.string("a") + kw.string("b")
    conn.send(kw.request(kw.API_METADATA, 0, 47, body))
    conn.expect_closed()
    assert_still_serves(server, topic, witness)






# Each declares far more elements or bytes than its frame holds. The suite runs corral under an
# address-space limit (conftest.ADDRESS_SPACE_BYTES): a decoder that reserved what the prefix
# claims would abort the process, not just grow it lazily.
HUGE_PREFIXES = {
    # Metadata v9 (flexible): topics as a compact array of 0x7FFFFFF0 - 1 entries.
    "compact-array": kw.flexible_request(kw.API_METADATA, 9, 48, kw.uvarint(0x7FFFFFF0) + b"\x00" * 8),
    # Metadata v1: topics as an array of 2^31 - 16 entries.
    "array": kw.request(kw.API_METADATA, 1, 48, kw.i32(0x7FFFFFF0) + kw.string("a")),
    # Produce v3: transactional id null, acks, timeout, one topic whose one partition's records
    # claim 2 GiB.
    "bytes": kw.request(kw.API_PRODUCE, 3, 48, kw.i16(-1) + kw.i16(1) + kw.i32(1000) + kw.i32(1) + kw.string("t") + kw.i32(1) + kw.i32(0) + kw.i32(0x7FFFFFF0)),
    # FindCoordinator v4 (flexible): a compact array of coordinator keys, 2^32 - 2 entries.
    "compact-array-of-strings": kw.flexible_request(10, 4, 48, kw.i8(0) + kw.uvarint(0xFFFFFFFF) + kw.uvarint(2) + b"g"),
}


@pytest.mark.parametrize("frame", HUGE_PREFIXES.values(), ids=HUGE_PREFIXES.keys())
def test_a_length_prefix_beyond_the_frame_reserves_nothing(target, frame):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(frame)
    expect_answer_or_close(conn, 48)
    conn.close()
    assert_still_serves(server, topic, witness)


def test_produce_with_corrupted_crc_is_refused(target):
    server, topic, witness = target
    conn = open_conn(server)
    # Control: the same encoder's intact batch is accepted, so the refusal below is the CRC's.
    good = kw.record_batch([(b"raw-good", b"intact batch")])
    conn.send(kw.produce_v3(48, topic, 0, good))
    corr, res = kw.parse_produce_v3(conn.recv_frame())
    assert corr == 48 and res == {(topic, 0): (0, 3)}

    bad = bytearray(kw.record_batch([(b"raw-bad", b"this batch gets a flipped byte")]))
    bad[-5] ^= 0x01  # inside the records, covered by the CRC
    conn.send(kw.produce_v3(49, topic, 0, bytes(bad)))
    frame = conn.recv_frame()
    assert frame is not None, "a corrupt batch is answered with an error code, not a closed connection"
    corr, res = kw.parse_produce_v3(frame)
    assert corr == 49
    err, base = res[(topic, 0)]
    assert err == 2, f"error code {err}, expected 2 CORRUPT_MESSAGE"
    assert base == -1
    # Nothing was stored.
    assert clients.watermarks(server.bootstrap, topic, 0) == (0, 4)
    # The same connection goes on.
    conn.send(kw.produce_v3(50, topic, 0, kw.record_batch([(b"raw-next", b"after the corrupt one")])))
    corr, res = kw.parse_produce_v3(conn.recv_frame())
    assert corr == 50 and res == {(topic, 0): (0, 4)}
    conn.close()
    got = clients.consume_all(server.bootstrap, topic)[0]
    assert [(r.offset, r.key) for r in got] == [(0, b"k0"), (1, b"k1"), (2, b"k2"), (3, b"raw-good"), (4, b"raw-next")]
    assert_still_serves(server, topic, witness)


def test_a_decompression_bomb_is_refused_when_looked_inside(target):
    """Records that decompress to 40 MiB (a few kilobytes of gzip) are stored as sent, since corral
    never decompresses to produce or fetch; ListOffsets by timestamp, which must look inside,
    refuses that batch instead of inflating it, and the server goes on."""
    server, topic, witness = target
    conn = open_conn(server)
    ts = 4_000_000_000_000  # after every record the fixture wrote
    bomb = kw.record_batch([(b"bomb", bytes(40 << 20))], base_timestamp=ts, codec=kw.GZIP)
    assert len(bomb) < 1 << 20
    conn.send(kw.produce_v3(60, topic, 0, bomb))
    corr, res = kw.parse_produce_v3(conn.recv_frame())
    assert corr == 60 and res == {(topic, 0): (0, 3)}
    conn.close()
    c = clients.consumer(server.bootstrap, **{"group.id": "bomb-lookup"})
    try:
        with pytest.raises(KafkaException) as failed:
            c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)
        assert failed.value.args[0].code() == KafkaError.INVALID_RECORD, failed.value
    finally:
        c.close()
    assert_still_serves(server, topic, witness)


def test_a_compressed_batch_claiming_more_records_than_fit_is_refused(target):
    server, topic, witness = target
    conn = open_conn(server)
    batch = kw.record_batch([(b"k", b"v")], codec=kw.GZIP, claimed_count=2**31 - 1)
    conn.send(kw.produce_v3(61, topic, 0, batch))
    corr, res = kw.parse_produce_v3(conn.recv_frame())
    assert corr == 61 and res == {(topic, 0): (87, -1)}, "INVALID_RECORD expected"
    conn.close()
    assert clients.watermarks(server.bootstrap, topic, 0) == (0, 3)
    assert_still_serves(server, topic, witness)


def test_fetch_beyond_end_is_offset_out_of_range(target):
    server, topic, witness = target
    conn = open_conn(server)
    conn.send(kw.fetch_v4(51, topic, 0, 1000))
    corr, res = kw.parse_fetch_v4(conn.recv_frame())
    assert corr == 51
    err, hw, records = res[(topic, 0)]
    assert err == 1, f"error code {err}, expected 1 OFFSET_OUT_OF_RANGE"
    assert hw in (-1, 3)  # Kafka itself reports -1 (unknown) with this error
    assert not records
    # A fetch at the end is not an error: it waits (briefly) and returns nothing.
    conn.send(kw.fetch_v4(52, topic, 0, 3, max_wait_ms=50))
    corr, res = kw.parse_fetch_v4(conn.recv_frame())
    assert corr == 52 and res[(topic, 0)][:2] == (0, 3) and not res[(topic, 0)][2]
    # And at 0 it returns the records.
    conn.send(kw.fetch_v4(53, topic, 0, 0))
    corr, res = kw.parse_fetch_v4(conn.recv_frame())
    assert corr == 53 and res[(topic, 0)][:2] == (0, 3) and res[(topic, 0)][2]
    conn.close()
    assert_still_serves(server, topic, witness)
