"""The group API versions Kafka 4 removed (KIP-896) that clients still send, served by corral's
coordinator: OffsetCommit v0 and v1, OffsetFetch v0.

Raw-protocol cases check each version's answers and that every version reads the same offsets;
Debian's Sarama 1.22 (tests/e2e/sarama, built by scripts/test.sh), which commits with OffsetCommit
v1 and fetches with OffsetFetch v1, consumes as a group, is stopped, and resumes from its commit
after corral is killed and restarted — on local storage and in front of Apache Kafka 4.4, which
refuses those versions itself. Sarama assuming Kafka 0.11 logs in with SASL/PLAIN through
SaslHandshake v0 and a bare token frame, which Kafka 4 removed too.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import clients
import groupwire as gw
import kafkawire as kw
from apache_kafka import corral_upstream_config
from groups import GROUP_CONFIG, committed, unique
from security import SaslNode

SARAMA_CLIENT = Path(__file__).resolve().parent / "sarama" / "target" / "sarama-client"


def offsets_v(conn: gw.GroupConn, version: int, group: str, parts: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (offset, error)} by OffsetFetch v0 or v1."""
    return conn.call(lambda corr, *a: gw.offset_fetch_v1(corr, *a, version=version), gw.parse_offset_fetch_v1, group, parts)[1]


def requests_of(server, api: str, version: int) -> float:
    """corral_requests_total for one API version, summed over shards."""
    status, text = server.http_get("/metrics")
    assert status == 200
    prefix = "corral_requests_total{"
    total = 0.0
    for line in text.splitlines():
        if line.startswith(prefix) and f'api="{api}"' in line and f'version="{version}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_offset_commit_v0_v1_and_offset_fetch_v0(corral_factory):
    server = corral_factory(config=GROUP_CONFIG)
    topic = unique("old-versions")
    clients.create_topic(server.bootstrap, topic, partitions=2)
    parts = [(topic, 0), (topic, 1)]
    simple, v1_group, live = unique("old-v0"), unique("old-v1"), unique("old-live")

    with gw.GroupConn(server.bootstrap) as c:
        # v0 names no member or generation: a simple group's commit.
        _, codes = c.call(gw.offset_commit_v0, gw.parse_offset_commit_v0, simple, {(topic, 0): 5, (topic, 1): 7})
        assert codes == {(topic, 0): gw.NONE, (topic, 1): gw.NONE}
        _, codes = c.call(gw.offset_commit_v0, gw.parse_offset_commit_v0, simple, {("no-such-topic", 0): 1}, metadata=None)
        assert codes == {("no-such-topic", 0): gw.UNKNOWN_TOPIC_OR_PARTITION}
        # v1 from outside any group (generation -1, no member): a commit time given and one not.
        _, codes = c.call(gw.offset_commit_v1, gw.parse_offset_commit_v1, v1_group, -1, "", {(topic, 0): 11}, commit_timestamp=1_700_000_000_000)
        assert codes == {(topic, 0): gw.NONE}
        _, codes = c.call(gw.offset_commit_v1, gw.parse_offset_commit_v1, v1_group, -1, "", {(topic, 1): 12})
        assert codes == {(topic, 1): gw.NONE}

        # Every version reads the same offsets: v0, v1, and a current client's.
        for version in (0, 1):
            assert offsets_v(c, version, simple, parts) == {(topic, 0): (5, gw.NONE), (topic, 1): (7, gw.NONE)}
            assert offsets_v(c, version, v1_group, parts) == {(topic, 0): (11, gw.NONE), (topic, 1): (12, gw.NONE)}
            assert offsets_v(c, version, unique("old-none"), parts) == {(topic, 0): (-1, gw.NONE), (topic, 1): (-1, gw.NONE)}
        assert committed(server.bootstrap, simple, parts) == {(topic, 0): 5, (topic, 1): 7}

        # v1 in a live classic group is checked like v2: generation and member.
        j = c.join(live)
        assert j.error == gw.NONE, j
        err, _ = c.sync(live, j.generation, j.member_id, [(j.member_id, gw.assignment({topic: [0, 1]}))])
        assert err == gw.NONE
        _, codes = c.call(gw.offset_commit_v1, gw.parse_offset_commit_v1, live, j.generation + 1, j.member_id, {(topic, 0): 3})
        assert codes == {(topic, 0): gw.ILLEGAL_GENERATION}
        _, codes = c.call(gw.offset_commit_v1, gw.parse_offset_commit_v1, live, j.generation, "someone-else", {(topic, 0): 3})
        assert codes == {(topic, 0): gw.UNKNOWN_MEMBER_ID}
        _, codes = c.call(gw.offset_commit_v1, gw.parse_offset_commit_v1, live, j.generation, j.member_id, {(topic, 0): 3})
        assert codes == {(topic, 0): gw.NONE}
        # v0 is not checked against the members (Kafka kept its offsets apart from the group).
        _, codes = c.call(gw.offset_commit_v0, gw.parse_offset_commit_v0, live, {(topic, 1): 4})
        assert codes == {(topic, 1): gw.NONE}
        assert offsets_v(c, 0, live, parts) == {(topic, 0): (3, gw.NONE), (topic, 1): (4, gw.NONE)}

    assert requests_of(server, "OffsetCommit", 0) >= 3 and requests_of(server, "OffsetCommit", 1) >= 5
    assert requests_of(server, "OffsetFetch", 0) >= 4

    # Acknowledged commits of the old versions survive kill -9.
    server.kill9()
    server.start()
    with gw.GroupConn(server.bootstrap) as c:
        assert offsets_v(c, 0, simple, parts) == {(topic, 0): (5, gw.NONE), (topic, 1): (7, gw.NONE)}
        assert offsets_v(c, 1, v1_group, parts) == {(topic, 0): (11, gw.NONE), (topic, 1): (12, gw.NONE)}


def test_a_truncated_old_commit_closes_the_connection_and_nothing_else(corral_factory):
    server = corral_factory()
    frame = gw.offset_commit_v1(1, "g", -1, "", {("t", 0): 1})
    for cut in (8, 20, len(frame) - 3):
        # Keep the size prefix truthful to the bytes sent: a short body, not a short frame.
        body = frame[4:cut]
        conn = kw.Conn(server.bootstrap)
        try:
            conn.send(len(body).to_bytes(4, "big") + body)
            conn.expect_closed()
        finally:
            conn.close()
    with gw.GroupConn(server.bootstrap) as c:
        assert offsets_v(c, 0, "g", [("t", 0)]) == {("t", 0): (-1, gw.NONE)}


def run_sarama(bootstrap: str, topic: str, group: str, count: int, env: dict | None = None, timeout_s: int = 60) -> subprocess.CompletedProcess:
    assert SARAMA_CLIENT.exists(), f"{SARAMA_CLIENT} is missing: scripts/test.sh builds it"
    argv = [str(SARAMA_CLIENT), "consume", bootstrap, topic, group, str(count), str(timeout_s)]
    return subprocess.run(argv, capture_output=True, timeout=timeout_s + 60, env={**os.environ, **(env or {})})


def sarama_consume(bootstrap: str, topic: str, group: str, count: int, env: dict | None = None) -> list[tuple[int, int, bytes]]:
    """Runs the Sarama consumer until `count` records are consumed and committed."""
    run = run_sarama(bootstrap, topic, group, count, env)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-3000:]
    records = []
    for line in run.stdout.decode().splitlines():
        partition, offset, value = line.split(" ", 2)
        records.append((int(partition), int(offset), value.encode()))
    assert len(records) == count, run.stdout.decode()[-2000:]
    return records


def sarama_round_trip(server, topic: str, produce_to: str) -> None:
    """20 records; Sarama consumes 10 and commits them with v1; corral is killed and restarted;
    Sarama resumes from the commit and consumes the other 10, none twice."""
    group = unique("sarama")
    clients.create_topic(server.bootstrap, topic, partitions=2)
    values = [f"s{i}".encode() for i in range(20)]
    clients.produce_all(clients.producer(produce_to), topic, [(None, v) for v in values])
    commits_v1 = requests_of(server, "OffsetCommit", 1)

    first = sarama_consume(server.bootstrap, topic, group, 10)
    assert requests_of(server, "OffsetCommit", 1) > commits_v1, "Sarama 1.22 committed with another version than v1"
    assert requests_of(server, "OffsetFetch", 1) >= 1
    # The commit is each partition's next offset after what was consumed.
    expected = {(topic, p): max([o for q, o, _ in first if q == p], default=-1) + 1 for p in (0, 1)}
    expected = {tp: o for tp, o in expected.items() if o > 0}
    got = committed(server.bootstrap, group, list(expected))
    assert got == expected

    server.kill9()
    server.start()
    second = sarama_consume(server.bootstrap, topic, group, 10)
    consumed = [v for _, _, v in first + second]
    assert sorted(consumed) == sorted(values), "a record was consumed twice or never"


def test_sarama_commits_with_v1_and_resumes_after_a_restart(corral_factory):
    server = corral_factory(config=GROUP_CONFIG)
    sarama_round_trip(server, unique("sarama-local"), server.bootstrap)


def test_sarama_in_front_of_kafka_4(corral_factory, apache_kafka_classic):
    """Kafka 4 closes the connection of an OffsetCommit v1; in front of it, corral answers."""
    server = corral_factory(config=GROUP_CONFIG + corral_upstream_config(apache_kafka_classic.bootstrap))
    sarama_round_trip(server, unique("sarama-upstream"), apache_kafka_classic.bootstrap)
    conn = kw.Conn(apache_kafka_classic.bootstrap.split(",")[0])
    try:
        conn.send(gw.offset_commit_v1(1, unique("kafka-v1"), -1, "", {("t", 0): 1}))
        conn.expect_closed()  # Kafka 4 answers no OffsetCommit v1
    finally:
        conn.close()


def test_sarama_logs_in_with_sasl_handshake_v0(corral_factory, corral_bin, tmp_path):
    """Sarama 1.22 told the broker is Kafka 0.11 sends SaslHandshake v0, then its PLAIN token as a
    bare frame; corral answers with an empty token frame, and the client consumes as a group. A
    wrong password closes the connection, as Kafka did."""
    users = {"burrow": "burrow-secret"}
    node = SaslNode(corral_factory, corral_bin, tmp_path, users, GROUP_CONFIG)
    topic, group = unique("sarama-sasl"), unique("sarama-sasl")
    clients.create_topic(node.server.bootstrap, topic, partitions=2)
    values = [f"v0-{i}".encode() for i in range(10)]
    clients.produce_all(clients.producer(node.server.bootstrap), topic, [(None, v) for v in values])
    handshakes_v0 = requests_of(node.server, "SaslHandshake", 0)
    env = {"SARAMA_KAFKA_VERSION": "0.11.0.0", "SARAMA_SASL_USER": "burrow", "SARAMA_SASL_PASSWORD": users["burrow"]}
    consumed = sarama_consume(node.sasl_bootstrap, topic, group, 10, env)
    assert sorted(v for _, _, v in consumed) == sorted(values)
    assert requests_of(node.server, "SaslHandshake", 0) > handshakes_v0, "Sarama did not use SaslHandshake v0"
    # A partition Sarama read records from has their count committed. One it read nothing from
    # has 0 committed, or nothing when the member left before its first periodic commit.
    read = {(topic, p): len([1 for q, _, _ in consumed if q == p]) for p in (0, 1)}
    found = committed(node.server.bootstrap, group, [(topic, 0), (topic, 1)])
    assert {tp: n for tp, n in found.items() if read[tp] > 0} == {tp: n for tp, n in read.items() if n > 0}
    assert all(found[tp] in (0, -1001) for tp, n in read.items() if n == 0), found
    # A wrong password: corral closes the connection after the token; Sarama tries each broker,
    # then gives up.
    wrong = run_sarama(node.sasl_bootstrap, topic, unique("sarama-refused"), 1, {**env, "SARAMA_SASL_PASSWORD": "wrong"}, timeout_s=5)
    assert wrong.returncode == 1, wrong
    assert b"client has run out of available brokers to talk to" in wrong.stderr, wrong.stderr.decode(errors="replace")[-2000:]
    assert "SASL authentication failed" in node.server.run_log_text()
