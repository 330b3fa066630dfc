"""The Raft port of a cluster node admits only the cluster's own nodes.

A raw socket that sends Raft frames (a vote with a term near u64::MAX, an AppendEntries, a topic
creation named `../x`) without the handshake is closed before any of it is decoded; so is a
handshake from a node id outside `[cluster] nodes`, and one with the wrong secret. A peer that
does prove the secret still cannot have an invalid topic change proposed. Nothing reaches a
node's disk, each refusal is counted in `/metrics`, and the cluster keeps serving.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import uuid

import clients
from cluster import CLUSTER_SECRET, refused_count, simple_commit

MAGIC = b"CRA1"
KIND_APPEND_ENTRIES, KIND_VOTE, KIND_PROPOSE = 1, 2, 4
METADATA_GROUP = 0xFFFFFFFF


def raft_frame(req_id: int, group: int, kind: int, payload: bytes) -> bytes:
    body = struct.pack(">QIB", req_id, group, kind) + payload
    return struct.pack(">I", len(body)) + body


def read_until_closed(sock: socket.socket, timeout: float = 15.0) -> bytes:
    """Everything the peer sends before it closes (a close with our bytes unread is a reset)."""
    sock.settimeout(timeout)
    got = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return got
        if not data:
            return got
        got += data


def create_x() -> bytes:
    change = {"Create": {"name": "../x", "id": str(uuid.uuid4()), "config": {}, "placement": [0]}}
    return json.dumps(change).encode()


def proof(secret: bytes, label: bytes, dialer: int, acceptor: int, dialer_nonce: bytes, acceptor_nonce: bytes) -> bytes:
    msg = MAGIC + label + struct.pack(">QQ", dialer, acceptor) + dialer_nonce + acceptor_nonce
    return hmac.new(secret, msg, hashlib.sha256).digest()


def handshake(port: int, dialer: int, acceptor: int, secret: bytes) -> tuple[socket.socket, bytes]:
    """Runs the dialer's side; returns the socket and what the acceptor said last (its
    challenge, then b"\\0" when it accepted, or b"" when it closed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    nonce = os.urandom(32)
    sock.sendall(MAGIC + struct.pack(">QQ", dialer, acceptor) + nonce)
    challenge = b""
    while len(challenge) < 64:
        try:
            data = sock.recv(64 - len(challenge))
        except ConnectionResetError:
            data = b""
        if not data:
            return sock, b""
        challenge += data
    theirs, their_proof = challenge[:32], challenge[32:]
    assert hmac.compare_digest(their_proof, proof(CLUSTER_SECRET.encode(), b"acceptor", dialer, acceptor, nonce, theirs))
    sock.sendall(proof(secret, b"dialer", dialer, acceptor, nonce, theirs))
    return sock, read_until_closed(sock) if secret != CLUSTER_SECRET.encode() else sock.recv(1)


def files_mentioning(root, needle: bytes) -> list[str]:
    hits = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    hits.append(path)
    return hits


def test_the_raft_port_admits_only_the_clusters_nodes(cluster, tmp_path):
    target = cluster.nodes[0]
    port = cluster.raft[0]
    before = refused_count(target)
    vote = struct.pack(">Q", 2**64 - 2) + b"\x01" * 64  # a term near u64::MAX
    attempts = [
        raft_frame(1, 0, KIND_VOTE, vote),
        raft_frame(2, 0, KIND_APPEND_ENTRIES, b"\x00" * 64),
        raft_frame(3, METADATA_GROUP, KIND_PROPOSE, create_x()),
    ]
    for frame in attempts:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            sock.sendall(frame)
            assert read_until_closed(sock) == b"", "the Raft port answered a peer that did not authenticate"

    # A node id outside [cluster] nodes: closed before any challenge.
    sock, said = handshake(port, dialer=9, acceptor=0, secret=CLUSTER_SECRET.encode())
    sock.close()
    assert said == b""
    # A listed node id with the wrong secret: the proof is refused.
    sock, said = handshake(port, dialer=1, acceptor=0, secret=b"not the cluster secret at all")
    sock.close()
    assert said == b""
    assert refused_count(target) - before == len(attempts) + 2

    # A peer with the secret still cannot have an invalid topic change proposed.
    sock, said = handshake(port, dialer=1, acceptor=0, secret=CLUSTER_SECRET.encode())
    assert said == b"\x00", "the cluster's own secret was refused"
    sock.sendall(raft_frame(7, METADATA_GROUP, KIND_PROPOSE, create_x()))
    (length,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    body = sock.recv(length, socket.MSG_WAITALL)
    sock.close()
    req_id, status = struct.unpack(">QB", body[:9])
    assert req_id == 7
    # The write is answered with its Result: an error that names the refusal.
    assert status == 0 and b"invalid topic change" in body[9:], body

    for node in cluster.nodes:
        assert files_mentioning(node.data_dir, b"../x") == [], "the hostile topic change reached a disk"
        assert not (node.data_dir.parent / "x-0").exists()
    # The cluster keeps serving: a topic is created and an offset committed.
    clients.create_topic(cluster.bootstrap, "after-hostile-peers")
    cluster.wait_for_topic("after-hostile-peers", 1)
    coordinator = cluster.coordinator("after-hostile-peers")
    assert simple_commit(cluster.kafka[coordinator], "after-hostile-peers", "after-hostile-peers", 5) == 0
