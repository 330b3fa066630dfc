"""A minimal hand-written Kafka wire encoder/decoder for raw-socket tests.

Only what the raw-socket tests need: request framing (header v1 for non-flexible versions, header
v2 and the compact forms of flexible ones), a v2 record batch with CRC-32C, and decoders for the
few responses they read. Written from the Kafka
protocol specification, independently of corral's code and of the client libraries.
"""

from __future__ import annotations

import gzip
import socket
import struct
import time

# --- primitives ---------------------------------------------------------------------------------


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def nbytes(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def uvarint(n: int) -> bytes:
    """Unsigned varint (the lengths of flexible versions' compact forms)."""
    assert n >= 0
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    data = s.encode()
    return uvarint(len(data) + 1) + data


def compact_bytes(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def compact_array(items: list[bytes] | None) -> bytes:
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


# An empty tagged-field section.
NO_TAGS = uvarint(0)


def varint(v: int) -> bytes:
    """Zig-zag varint (record fields)."""
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# --- CRC-32C (Castagnoli), as Kafka's record batch uses ----------------------------------------

_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value


# --- record batch v2 ----------------------------------------------------------------------------


GZIP = 1


def record_batch(
    records: list[tuple[bytes | None, bytes | None]],
    base_timestamp: int | None = None,
    codec: int = 0,
    claimed_count: int | None = None,
    producer: tuple[int, int, int] | None = None,
) -> bytes:
    """A v2 batch at base offset 0: uncompressed, or with `codec=GZIP` gzip-compressed;
    `claimed_count` overrides the record count the header states; `producer` is the idempotent
    producer's (id, epoch, base sequence), none (-1) by default."""
    producer_id, epoch, sequence = producer or (-1, -1, -1)
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = i8(0) + varint(0) + varint(delta)
        rec += varint(-1) if key is None else varint(len(key)) + key
        rec += varint(-1) if value is None else varint(len(value)) + value
        rec += varint(0)  # headers
        body += varint(len(rec)) + rec
    if codec == GZIP:
        body = bytearray(gzip.compress(bytes(body)))
    count = len(records) if claimed_count is None else claimed_count
    after_crc = (
        i16(codec)  # attributes: the codec, create time
        + i32(count - 1)  # last offset delta
        + i64(ts)
        + i64(ts)
        + i64(producer_id)
        + i16(epoch)
        + i32(sequence)
        + i32(count)
        + bytes(body)
    )
    crc = crc32c(after_crc)
    after_length = i32(0) + i8(2) + struct.pack(">I", crc) + after_crc  # leader epoch, magic, crc
    return i64(0) + i32(len(after_length)) + after_length


# --- requests -----------------------------------------------------------------------------------

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_API_VERSIONS = 18


def request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str = "corral-e2e-raw") -> bytes:
    """A framed request with header v1 (for non-flexible versions)."""
    payload = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id) + body
    return i32(len(payload)) + payload


def flexible_request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str = "corral-e2e-raw") -> bytes:
    """A framed request with header v2 (flexible versions): header v1, then an empty tagged-field
    section; the client id stays a non-compact nullable string."""
    payload = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id) + NO_TAGS + body
    return i32(len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return request(API_API_VERSIONS, 0, correlation_id, b"")


def metadata_v0(correlation_id: int, topics: list[str]) -> bytes:
    return request(API_METADATA, 0, correlation_id, array([string(t) for t in topics]))


def produce_v3(correlation_id: int, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> bytes:
    body = string(None) + i16(acks) + i32(timeout_ms)
    body += array([string(topic) + array([i32(partition) + nbytes(batch)])])
    return request(API_PRODUCE, 3, correlation_id, body)


def produce_v8(correlation_id: int, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> bytes:
    """Produce v8 (KIP-467: the response names each rejected record); the body is v3's."""
    body = string(None) + i16(acks) + i32(timeout_ms)
    body += array([string(topic) + array([i32(partition) + nbytes(batch)])])
    return request(API_PRODUCE, 8, correlation_id, body)


def fetch_v4(correlation_id: int, topic: str, partition: int, offset: int, max_wait_ms: int = 100) -> bytes:
    body = i32(-1) + i32(max_wait_ms) + i32(1) + i32(1 << 20) + i8(0)
    body += array([string(topic) + array([i32(partition) + i64(offset) + i32(1 << 20)])])
    return request(API_FETCH, 4, correlation_id, body)


# --- connection ---------------------------------------------------------------------------------


class Conn:
    """A blocking socket with whole-frame reads and a timeout on every operation."""

    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None if not buf else bytes(buf)
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes | None:
        """The next response frame without its size prefix; None if the server closed the connection."""
        head = self._read_exact(4)
        if head is None:
            return None
        assert len(head) == 4, f"connection closed inside a size prefix ({head!r})"
        (size,) = struct.unpack(">i", head)
        assert 0 <= size < 100 << 20, f"implausible response size {size}"
        frame = self._read_exact(size)
        assert frame is not None and len(frame) == size, "connection closed inside a response"
        return frame

    def expect_closed(self) -> None:
        """Asserts the server closes this connection without sending anything (within the timeout)."""
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return
        assert data == b"", f"expected the server to close the connection, got {len(data)} bytes: {data[:64]!r}"

    def close(self) -> None:
        self.sock.close()


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return v

    def string(self) -> str | None:
        n = self.take("h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def nbytes(self) -> bytes | None:
        n = self.take("i")
        if n < 0:
            return None
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def done(self) -> bool:
        return self.pos == len(self.data)


def parse_api_versions_v0(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api key: (min, max)}); asserts the body is exactly v0."""
    r = Reader(frame)
    corr = r.take("i")
    err = r.take("h")
    n = r.take("i")
    apis = {}
    for _ in range(n):
        key, lo, hi = r.take("h"), r.take("h"), r.take("h")
        apis[key] = (lo, hi)
    assert r.done(), f"{len(frame) - r.pos} bytes after a v0 ApiVersions body"
    return corr, err, apis


def parse_metadata_v0(frame: bytes) -> tuple[int, list[tuple[int, str, int]], dict[str, int]]:
    """(correlation id, brokers [(id, host, port)], {topic: error code})."""
    r = Reader(frame)
    corr = r.take("i")
    brokers = [(r.take("i"), r.string(), r.take("i")) for _ in range(r.take("i"))]
    topics = {}
    for _ in range(r.take("i")):
        err = r.take("h")
        name = r.string()
        for _ in range(r.take("i")):
            r.take("h"), r.take("i"), r.take("i")
            [r.take("i") for _ in range(r.take("i"))]
            [r.take("i") for _ in range(r.take("i"))]
        topics[name] = err
    assert r.done()
    return corr, brokers, topics


def parse_produce_v3(frame: bytes) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """(correlation id, {(topic, partition): (error code, base offset)})."""
    corr, partitions = _parse_produce(frame, 3)
    return corr, {key: (err, base) for key, (err, base, _, _) in partitions.items()}


def parse_produce_v8(frame: bytes) -> tuple[int, dict[tuple[str, int], tuple[int, int, list[tuple[int, str | None]], str | None]]]:
    """(correlation id, {(topic, partition): (error code, base offset, record errors as
    (batch index, message), error message)})."""
    return _parse_produce(frame, 8)


def _parse_produce(frame: bytes, version: int):
    """A Produce response of v3 (no log start offset, no record errors) or v8."""
    r = Reader(frame)
    corr = r.take("i")
    out = {}
    for _ in range(r.take("i")):
        topic = r.string()
        for _ in range(r.take("i")):
            part, err, base, _append_time = r.take("i"), r.take("h"), r.take("q"), r.take("q")
            record_errors, message = [], None
            if version >= 8:
                _log_start = r.take("q")
                record_errors = [(r.take("i"), r.string()) for _ in range(r.take("i"))]
                message = r.string()
            out[(topic, part)] = (err, base, record_errors, message)
    r.take("i")  # throttle time
    assert r.done()
    return corr, out


def parse_fetch_v4(frame: bytes) -> tuple[int, dict[tuple[str, int], tuple[int, int, bytes | None]]]:
    """(correlation id, {(topic, partition): (error code, high watermark, records)})."""
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle time
    out = {}
    for _ in range(r.take("i")):
        topic = r.string()
        for _ in range(r.take("i")):
            part, err, hw, _lso = r.take("i"), r.take("h"), r.take("q"), r.take("q")
            n_aborted = r.take("i")
            for _ in range(max(n_aborted, 0)):
                r.take("q"), r.take("q")
            out[(topic, part)] = (err, hw, r.nbytes())
    assert r.done()
    return corr, out


# --- ListOffsets v1 (tests/e2e/test_kafka_reference.py) ------------------------------------------

API_LIST_OFFSETS = 2
LATEST = -1
EARLIEST = -2


def list_offsets_v1(correlation_id: int, topic: str, partitions: list[int], timestamp: int = LATEST) -> bytes:
    """ListOffsets v1 (the lowest version Kafka 4 serves) as a consumer sends it (replica id -1)."""
    body = i32(-1) + array([string(topic) + array([i32(p) + i64(timestamp) for p in partitions])])
    return request(API_LIST_OFFSETS, 1, correlation_id, body)


def parse_list_offsets_v1(frame: bytes) -> tuple[int, dict[tuple[str, int], tuple[int, int, int]]]:
    """(correlation id, {(topic, partition): (error code, timestamp, offset)})."""
    r = Reader(frame)
    corr = r.take("i")
    out = {}
    for _ in range(r.take("i")):
        topic = r.string()
        for _ in range(r.take("i")):
            part, err, ts, offset = r.take("i"), r.take("h"), r.take("q"), r.take("q")
            out[(topic, part)] = (err, ts, offset)
    assert r.done()
    return corr, out
