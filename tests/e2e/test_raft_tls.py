"""Mutual TLS between the nodes of a cluster, in place of the cluster secret (`cluster.tls`).

Three nodes, each with its own certificate from one CA and no secret, form a cluster: a topic is
created through the metadata group, an offset is committed, the coordinator is killed with -9 and
the offset is read back at the new coordinator, all over TLS between the nodes. A raw connection
that tries the secret handshake without TLS is refused. Then one node comes back with a
certificate from the same CA made for another host (as a client's would be): the other two refuse
it, since it does not name the host of that node's Raft address. Then it comes back with a
certificate from another CA: the other two refuse its connections (counted in `/metrics`), it
never learns of a topic created after, and the two go on serving.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import trustme

from cluster import Cluster, refused_count, simple_commit
from groupwire import GroupConn, offset_fetch_v1, parse_offset_fetch_v1


def write_identity(ca: trustme.CA, directory: Path, name: str, host: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """A certificate for `host` from `ca`, its key and the CA's own certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert(host, common_name=name)
    paths = directory / f"{name}.crt", directory / f"{name}.key", directory / "ca.crt"
    cert.cert_chain_pems[0].write_to_path(str(paths[0]))
    cert.private_key_pem.write_to_path(str(paths[1]))
    ca.cert_pem.write_to_path(str(paths[2]))
    return paths


def tls_section(cert: Path, key: Path, ca: Path) -> str:
    return f"""[tls]
cert_file = "{cert}"
key_file = "{key}"
ca_file = "{ca}"
"""


def tls_config(identity: tuple[Path, Path, Path]) -> str:
    # Cluster appends this right after `nodes`, inside [cluster]: TLS on, and (secret=None) no secret.
    return "tls = true\n[groups]\ninitial_rebalance_delay_ms = 0\n" + tls_section(*identity)


def wait_until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def fetch_offset(port: int, group: str, topic: str) -> tuple[int, int]:
    with GroupConn(f"127.0.0.1:{port}") as conn:
        _, offsets = conn.call(offset_fetch_v1, parse_offset_fetch_v1, group, [(topic, 0)])
    return offsets[(topic, 0)]


def restart_refused(cluster: Cluster, identity: tuple[Path, Path, Path]) -> None:
    """Starts the stopped node 2 with `identity` and waits until nodes 0 and 1 have refused it."""
    node = cluster.nodes[2]
    text = node.config_path.read_text()
    node.config_path.write_text(text[: text.index("[tls]")] + tls_section(*identity))
    refused_before = [refused_count(cluster.nodes[i]) for i in (0, 1)]
    node.start(ready=False)
    wait_until(
        lambda: all(refused_count(cluster.nodes[i]) > refused_before[k] for k, i in enumerate((0, 1))),
        f"nodes 0 and 1 to refuse node 2 with the certificate {identity[0].name} of {identity[0].parent.name}",
    )


def test_nodes_prove_themselves_by_certificate_and_a_foreign_ca_is_refused(corral_factory, tmp_path):
    ca, other_ca = trustme.CA(), trustme.CA()
    identities = [write_identity(ca, tmp_path / "tls", f"node{i}") for i in range(3)]
    cluster = Cluster(corral_factory, extra_config=lambda i: tls_config(identities[i]), secret=None)
    cluster.start()
    try:
        topic, group = f"tls-{uuid.uuid4().hex[:8]}", f"tls-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 1)
        coordinator = cluster.coordinator(group)
        assert simple_commit(cluster.kafka[coordinator], group, topic, 7) == 0

        # Without TLS, the secret handshake of an old node is answered by a TLS alert, then closed.
        before = refused_count(cluster.nodes[0])
        with socket.create_connection(("127.0.0.1", cluster.raft[0]), timeout=10) as sock:
            sock.sendall(b"CRA1" + (1).to_bytes(8, "big") + (0).to_bytes(8, "big") + b"\0" * 32)
            sock.settimeout(10)
            try:
                answer = sock.recv(64)
            except ConnectionResetError:
                answer = b""
            assert answer == b"" or answer[0] == 0x15, f"the Raft port answered a plain connection with {answer!r}"
        wait_until(lambda: refused_count(cluster.nodes[0]) > before, "the plain connection to be counted as refused")

        # Failover over TLS: the offset survives the coordinator's kill -9.
        cluster.nodes[coordinator].kill9()
        survivors = [i for i in range(3) if i != coordinator]
        new = cluster.coordinator(group, among=survivors, other_than=coordinator)
        assert fetch_offset(cluster.kafka[new], group, topic) == (7, 0)
        cluster.nodes[coordinator].start()

        # Node 2 again, with a certificate from the same CA for another host: it cannot pose as
        # node 2, whose Raft address is on 127.0.0.1.
        foreign = cluster.nodes[2]
        foreign.stop()
        restart_refused(cluster, write_identity(ca, tmp_path / "elsewhere", "node2", host="127.0.0.9"))
        assert "does not name 127.0.0.1" in cluster.nodes[0].run_log_text()
        foreign.stop()

        # Node 2 again, with a certificate from another CA (and trusting only that CA).
        restart_refused(cluster, write_identity(other_ca, tmp_path / "other", "node2"))
        assert "handshake failed" in foreign.run_log_text()

        later = f"tls-later-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(later, 1, among=[0, 1])
        time.sleep(2)
        _, error, _ = cluster.topic_as_seen_by(2, later)
        assert error != 0, "the node with a foreign certificate learned of a topic created after it was refused"
        coordinator = cluster.coordinator(group, among=[0, 1])
        assert simple_commit(cluster.kafka[coordinator], group, topic, 9) == 0
    finally:
        cluster.close()
