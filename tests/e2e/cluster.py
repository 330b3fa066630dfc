"""A corral cluster on loopback for end-to-end tests: N `corral serve` processes with static
`[cluster] nodes`, and (unless `relays=False`) a fault-injecting relay on every directed link
between two nodes' Raft listeners, so a test can cut a node off from the others while clients
still reach it.

Node i's config names node j's Raft address as the relay (i→j), which forwards to node j's real
Raft listener. Cutting node k closes every relay into or out of k and refuses new connections
until healed.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from typing import Callable

from conftest import CorralServer
from groupwire import find_coordinator_v1, offset_commit_v2, parse_find_coordinator_v1, parse_offset_commit_v2
from kafkawire import Conn, Reader, array, i16, i32, request, string

# The secret the test clusters' nodes prove to each other on their Raft ports.
CLUSTER_SECRET = "corral-test-cluster-secret"


class Relay:
    """A TCP relay from a local port to `target`, which can be cut (connections closed, new ones
    refused) and healed."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.cut = False
        self.closed = False
        self.lock = threading.Lock()
        self.live: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.cut:
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.live += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def set_cut(self, cut: bool) -> None:
        with self.lock:
            self.cut = cut
            doomed, self.live = (self.live, []) if cut else ([], self.live)
        for s in doomed:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.set_cut(True)
        self.listener.close()


class Cluster:
    """`size` nodes (ids 0..size-1), started by `start()`; servers are made by `corral_factory`
    (so teardown stops them by PID and their logs join a failed test's report)."""

    def __init__(
        self,
        corral_factory,
        size: int = 3,
        extra_config: str | Callable[[int], str] = "",
        relays: bool = True,
        secret: str | None = CLUSTER_SECRET,
    ):
        """`extra_config`: more config for every node, or node i's from a function of i.
        `secret`: the cluster secret (None: none, for nodes that prove themselves by TLS)."""
        self.secret = secret
        self.size = size
        # Hold the chosen ports until the relays have bound theirs, so no two coincide.
        held = []
        for _ in range(3 * size):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        ports = [s.getsockname()[1] for s in held]
        self.kafka, self.admin, self.raft = ports[:size], ports[size : 2 * size], ports[2 * size :]
        pairs = [(i, j) for i in range(size) for j in range(size) if i != j] if relays else []
        self.relays = {(i, j): Relay(("127.0.0.1", self.raft[j])) for i, j in pairs}
        for s in held:
            s.close()
        self.nodes: list[CorralServer] = []
        for i in range(size):
            extra = extra_config(i) if callable(extra_config) else extra_config
            server = corral_factory(config=self._config(i, extra), start=False, name=f"node{i}")
            server.kafka_port, server.admin_port = self.kafka[i], self.admin[i]
            self.nodes.append(server)

    def _config(self, i: int, extra: str) -> str:
        def raft_addr(j: int) -> str:
            relay = self.relays.get((i, j))
            return f"127.0.0.1:{relay.port if relay else self.raft[j]}"

        nodes = ",\n".join(
            f'  {{ id = {j}, raft = "{raft_addr(j)}", kafka = "127.0.0.1:{self.kafka[j]}", admin = "127.0.0.1:{self.admin[j]}" }}'
            for j in range(self.size)
        )
        secret = f'secret = "{self.secret}"' if self.secret else ""
        return f"""[node]
id = {i}
[cluster]
raft_listen = "127.0.0.1:{self.raft[i]}"
{secret}
nodes = [
{nodes}
]
{extra}"""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka)

    def start(self) -> "Cluster":
        # Nodes do not wait for each other at startup, so starting them one by one is fine.
        for node in self.nodes:
            node.start()
        return self

    def cut(self, k: int, cut: bool = True) -> None:
        for (i, j), relay in self.relays.items():
            if k in (i, j):
                relay.set_cut(cut)

    def heal(self) -> None:
        for relay in self.relays.values():
            relay.set_cut(False)

    def close(self) -> None:
        for relay in self.relays.values():
            relay.close()

    def coordinator_as_seen_by(self, i: int, group: str) -> tuple[int, int]:
        """(error code, node id) of FindCoordinator for `group`, asked of node i alone."""
        conn = Conn(f"127.0.0.1:{self.kafka[i]}")
        try:
            conn.send(find_coordinator_v1(1, group))
            _, error, node, _, _ = parse_find_coordinator_v1(conn.recv_frame())
            return error, node
        finally:
            conn.close()

    def coordinator(self, group: str, among: list[int] | None = None, other_than: int | None = None, timeout: float = 30.0) -> int:
        """The node every node in `among` names as the group's coordinator (waiting until they
        agree, and until it is not `other_than`)."""
        among = list(range(self.size)) if among is None else among
        deadline = time.monotonic() + timeout
        while True:
            answers = {i: self.coordinator_as_seen_by(i, group) for i in among}
            nodes = {node for error, node in answers.values() if error == 0}
            if len(nodes) == 1 and all(error == 0 for error, _ in answers.values()) and other_than not in nodes:
                return nodes.pop()
            assert time.monotonic() < deadline, f"no agreed coordinator for {group}: {answers}"
            time.sleep(0.05)


    def topic_as_seen_by(self, i: int, topic: str) -> tuple[int, int, list[int]]:
        """(controller id, topic error code, leader of each partition) from node i's Metadata."""
        conn = Conn(f"127.0.0.1:{self.kafka[i]}")
        try:
            conn.send(metadata_v4(1, [topic]))
            controller, topics = parse_metadata_v4(conn.recv_frame())
            error, leaders = topics[topic]
            return controller, error, leaders
        finally:
            conn.close()

    def wait_for_topic(self, topic: str, partitions: int, among: list[int] | None = None, timeout: float = 30.0) -> list[int]:
        """Waits until every node in `among` reports `topic` with `partitions` partitions and the
        same leaders; returns the leaders."""
        among = list(range(self.size)) if among is None else among
        deadline = time.monotonic() + timeout
        while True:
            seen = {i: self.topic_as_seen_by(i, topic) for i in among}
            layouts = {tuple(leaders) for _, error, leaders in seen.values() if error == 0}
            if len(layouts) == 1 and all(e == 0 and len(l) == partitions for _, e, l in seen.values()):
                return list(layouts.pop())
            assert time.monotonic() < deadline, f"nodes disagree on {topic}: {seen}"
            time.sleep(0.05)

    def create_topic(self, topic: str, partitions: int, via: int = 0, among: list[int] | None = None) -> list[int]:
        """Creates a topic by a raw CreateTopics sent to node `via` (whichever node leads the
        metadata group), waits until every node in `among` (all by default) has it, and returns
        its partitions' leaders."""
        conn = Conn(f"127.0.0.1:{self.kafka[via]}")
        try:
            conn.send(create_topics_v2(1, topic, partitions))
            errors = parse_create_topics_v2(conn.recv_frame())
        finally:
            conn.close()
        assert errors == {topic: 0}, errors
        return self.wait_for_topic(topic, partitions, among=among)


def refused_count(server) -> float:
    """Connections the node's Raft port refused (`corral_raft_peer_connections_refused_total`)."""
    status, text = server.http_get("/metrics")
    assert status == 200
    m = re.search(r"^corral_raft_peer_connections_refused_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def simple_commit(port: int, group: str, topic: str, offset: int, timeout: float = 30.0) -> int:
    """OffsetCommit v2 of a simple group (no members) for partition 0 of `topic`, sent to the node
    listening on `port` alone; its error code."""
    conn = Conn(f"127.0.0.1:{port}", timeout=timeout)
    try:
        conn.send(offset_commit_v2(1, group, -1, "", {(topic, 0): offset}))
        _, codes = parse_offset_commit_v2(conn.recv_frame())
        return codes[(topic, 0)]
    finally:
        conn.close()


API_METADATA = 3
API_CREATE_TOPICS = 19


def metadata_v4(correlation_id: int, topics: list[str]) -> bytes:
    """Metadata v4 without auto topic creation (v0-v3 create the topics they name)."""
    return request(API_METADATA, 4, correlation_id, array([string(t) for t in topics]) + b"\x00")


def parse_metadata_v4(frame: bytes) -> tuple[int, dict[str, tuple[int, list[int]]]]:
    """(controller id, {topic: (error code, leader of each partition in partition order)})."""
    r = Reader(frame)
    r.take("i"), r.take("i")  # correlation id, throttle time
    for _ in range(r.take("i")):
        r.take("i"), r.string(), r.take("i"), r.string()  # broker: id, host, port, rack
    r.string()  # cluster id
    controller = r.take("i")
    topics = {}
    for _ in range(r.take("i")):
        error, name, _internal = r.take("h"), r.string(), r.take("b")
        leaders = {}
        for _ in range(r.take("i")):
            _err, index, leader = r.take("h"), r.take("i"), r.take("i")
            [r.take("i") for _ in range(r.take("i"))]
            [r.take("i") for _ in range(r.take("i"))]
            leaders[index] = leader
        topics[name] = (error, [leaders[p] for p in sorted(leaders)])
    assert r.done()
    return controller, topics


def create_topics_v2(correlation_id: int, topic: str | list[str], partitions: int) -> bytes:
    topics = [topic] if isinstance(topic, str) else topic
    specs = [string(t) + i32(partitions) + i16(1) + array([]) + array([]) for t in topics]
    return request(API_CREATE_TOPICS, 2, correlation_id, array(specs) + i32(30000) + b"\x00")


def parse_create_topics_v2(frame: bytes) -> dict[str, int]:
    """{topic: error code}."""
    r = Reader(frame)
    r.take("i"), r.take("i")  # correlation id, throttle time
    out = {}
    for _ in range(r.take("i")):
        name, error, _message = r.string(), r.take("h"), r.string()
        out[name] = error
    assert r.done()
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos


def _records(batches: bytes):
    """(offset, key, value) of every record in uncompressed v2 batches."""
    pos = 0
    while pos + 61 <= len(batches):
        base, length = struct.unpack(">qi", batches[pos : pos + 12])
        end = pos + 12 + length
        if end > len(batches):
            return
        (count,) = struct.unpack(">i", batches[pos + 57 : pos + 61])
        r = pos + 61
        for _ in range(count):
            _, r = _varint(batches, r)  # record length
            r += 1  # attributes
            _, r = _varint(batches, r)  # timestamp delta (a varlong; small here)
            delta, r = _varint(batches, r)
            klen, r = _varint(batches, r)
            key = None if klen < 0 else batches[r : r + klen]
            r += max(klen, 0)
            vlen, r = _varint(batches, r)
            value = None if vlen < 0 else batches[r : r + vlen]
            r += max(vlen, 0)
            headers, r = _varint(batches, r)
            for _ in range(headers):
                hk, r = _varint(batches, r)
                r += hk
                hv, r = _varint(batches, r)
                r += max(hv, 0)
            yield base + delta, key, value
        pos = end


def read_offset_commits(bootstrap: str, partition: int) -> dict[tuple[str, str, int], int]:
    """The latest committed offset per (group, topic, partition) in one partition of one node's
    own `__consumer_offsets` (asked of that node alone, by raw Fetch; offset key v0/v1 and value
    v0–v4, as Kafka lays them out)."""
    from kafkawire import fetch_v4, parse_fetch_v4

    latest: dict[tuple[str, str, int], int] = {}
    conn = Conn(bootstrap)
    try:
        offset, corr = 0, 0
        while True:
            corr += 1
            conn.send(fetch_v4(corr, "__consumer_offsets", partition, offset, max_wait_ms=0))
            _, parts = parse_fetch_v4(conn.recv_frame())
            error, high, records = parts[("__consumer_offsets", partition)]
            assert error == 0, f"fetch of __consumer_offsets-{partition} failed with error {error}"
            progressed = False
            for at, key, value in _records(records or b""):
                if at < offset:
                    continue
                offset, progressed = at + 1, True
                if key is None or struct.unpack(">h", key[:2])[0] not in (0, 1):
                    continue
                pos, names = 2, []
                for _ in range(2):
                    (n,) = struct.unpack(">h", key[pos : pos + 2])
                    names.append(key[pos + 2 : pos + 2 + n].decode())
                    pos += 2 + n
                k = (names[0], names[1], struct.unpack(">i", key[pos : pos + 4])[0])
                if value is None:
                    latest.pop(k, None)
                else:
                    latest[k] = struct.unpack(">q", value[2:10])[0]
            if offset >= high or not progressed:
                return latest
    finally:
        conn.close()


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka's coordinator partition of a group: abs(Java hashCode) % partitions."""
    h = 0
    data = group.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return 0 if h == -(1 << 31) else abs(h) % partitions
