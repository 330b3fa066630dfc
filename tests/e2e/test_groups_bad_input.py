"""Bad input to the group APIs on raw sockets (groupwire.py): the exact error codes Kafka gives, and
a server that stays up and keeps serving (including across a restart) after absurd group ids."""

from __future__ import annotations

import struct

import pytest

import clients
import groupwire as gw
import kafkawire as kw
from groups import GROUP_CONFIG, unique

MIN_SESSION_MS = 1000  # GROUP_CONFIG's groups.min_session_timeout_ms
MAX_SESSION_MS = 1800000  # the default groups.max_session_timeout_ms


@pytest.fixture
def server(corral_factory):
    return corral_factory(config=GROUP_CONFIG)


def joined_leader(conn: gw.GroupConn, group: str, topic: str = "t") -> tuple[str, int]:
    """Joins `group` as its only member (JoinGroup v1: no MEMBER_ID_REQUIRED round) and completes
    the rebalance with SyncGroup; returns (member id, generation)."""
    j = conn.join(group, protocols=[("range", gw.subscription([topic]))])
    assert j.error == gw.NONE, j
    assert j.leader == j.member_id and j.generation >= 1 and j.protocol == "range"
    assert [m for m, _ in j.members] == [j.member_id]
    err, data = conn.sync(group, j.generation, j.member_id, [(j.member_id, gw.assignment({topic: [0]}))])
    assert err == gw.NONE and gw.parse_assignment(data) == {topic: [0]}
    return j.member_id, j.generation


def test_join_group_rejects_bad_group_id_and_session_timeouts(server):
    with gw.GroupConn(server.bootstrap) as conn:
        for version in (1, 5):
            j = conn.join("", version=version)
            assert (j.error, j.generation, j.member_id) == (gw.INVALID_GROUP_ID, -1, ""), f"v{version}: {j}"
        group = unique("sessions")
        for timeout in (MIN_SESSION_MS - 1, MAX_SESSION_MS + 1, 0, -1):
            j = conn.join(group, session_timeout_ms=timeout)
            assert (j.error, j.generation) == (gw.INVALID_SESSION_TIMEOUT, -1), f"session timeout {timeout}: {j}"
        # Nothing was created by the refused joins.
        assert conn.describe(group).state == "Dead"
        # The bounds themselves are accepted.
        j = conn.join(group, session_timeout_ms=MIN_SESSION_MS)
        assert j.error == gw.NONE, j
        # v4+: a new dynamic member first gets its id with MEMBER_ID_REQUIRED (KIP-394).
        j2 = conn.join(unique("kip394"), version=5, session_timeout_ms=MAX_SESSION_MS)
        assert j2.error == gw.MEMBER_ID_REQUIRED and j2.member_id, j2


def test_heartbeat_and_sync_errors(server):
    group = unique("hb")
    with gw.GroupConn(server.bootstrap) as conn:
        # Unknown group, then unknown member of a live group.
        assert conn.heartbeat(unique("nogroup"), 1, "nobody") == gw.UNKNOWN_MEMBER_ID
        member, gen = joined_leader(conn, group)
        assert conn.heartbeat(group, gen, "nobody-0000") == gw.UNKNOWN_MEMBER_ID
        assert conn.heartbeat(group, gen, "") == gw.UNKNOWN_MEMBER_ID
        assert conn.heartbeat("", gen, member) == gw.INVALID_GROUP_ID
        # Wrong generation (the member itself is known).
        assert conn.heartbeat(group, gen + 1, member) == gw.ILLEGAL_GENERATION
        assert conn.heartbeat(group, gen - 1, member) == gw.ILLEGAL_GENERATION
        err, data = conn.sync(group, gen + 7, member, [])
        assert err == gw.ILLEGAL_GENERATION and not data
        err, data = conn.sync(group, gen, "nobody-0000", [])
        assert err == gw.UNKNOWN_MEMBER_ID
        assert conn.heartbeat(group, gen, member) == gw.NONE
        # SyncGroup in a Stable group returns the member's stored assignment.
        err, data = conn.sync(group, gen, member, [])
        assert err == gw.NONE and gw.parse_assignment(data) == {"t": [0]}
        # After a LeaveGroup the member is unknown and the group Empty.
        assert conn.leave(group, member) == gw.NONE
        assert conn.heartbeat(group, gen, member) == gw.UNKNOWN_MEMBER_ID
        assert conn.describe(group).state == "Empty"


def test_join_with_other_protocol_type_or_assignor_is_inconsistent(server):
    group = unique("proto")
    with gw.GroupConn(server.bootstrap) as a, gw.GroupConn(server.bootstrap) as b:
        member, gen = joined_leader(a, group)
        j = b.join(group, protocol_type="connect", protocols=[("range", b"")])
        assert (j.error, j.generation) == (gw.INCONSISTENT_GROUP_PROTOCOL, -1), j
        j = b.join(group, protocols=[("roundrobin", gw.subscription(["t"]))])
        assert j.error == gw.INCONSISTENT_GROUP_PROTOCOL, j
        j = b.join(group, protocols=[])
        assert j.error == gw.INCONSISTENT_GROUP_PROTOCOL, j
        # The refused joins did not disturb the group.
        assert a.heartbeat(group, gen, member) == gw.NONE
        d = a.describe(group)
        assert (d.state, d.protocol_type, d.protocol, [m[0] for m in d.members]) == ("Stable", "consumer", "range", [member])
        # An Empty group needs a protocol type too.
        j = b.join(unique("typeless"), protocol_type="", protocols=[("range", b"")])
        assert j.error == gw.INCONSISTENT_GROUP_PROTOCOL, j


def huge_id_round(conn: gw.GroupConn, group: str, topic: str) -> dict[str, int]:
    """Every group API once with `group`; returns the error code of each (all must be answered)."""
    codes = {}
    _, codes["find_coordinator"], node, host, port = conn.call(gw.find_coordinator_v1, gw.parse_find_coordinator_v1, group)
    j = conn.join(group, protocols=[("range", gw.subscription([topic]))])
    codes["join"] = j.error
    member, gen = (j.member_id, j.generation) if j.error == gw.NONE else ("m", 1)
    codes["sync"], _ = conn.sync(group, gen, member, [(member, gw.assignment({topic: [0]}))])
    codes["heartbeat"] = conn.heartbeat(group, gen, member)
    _, commit = conn.call(gw.offset_commit_v2, gw.parse_offset_commit_v2, group, gen, member, {(topic, 0): 1})
    codes["offset_commit"] = commit[(topic, 0)]
    _, fetched = conn.call(gw.offset_fetch_v1, gw.parse_offset_fetch_v1, group, [(topic, 0)])
    codes["offset_fetch"] = fetched[(topic, 0)][1]
    _, groups = conn.call(gw.describe_groups_v0, gw.parse_describe_groups_v0, [group])
    assert [g.group_id for g in groups] == [group]
    codes["describe"] = groups[0].error
    codes["leave"] = conn.leave(group, member)
    _, deleted = conn.call(gw.delete_groups_v0, gw.parse_delete_groups_v0, [group])
    codes["delete"] = deleted[group]
    return codes


def test_huge_group_ids_get_answers_and_the_server_stays_up(server):
    b = server.bootstrap
    topic = unique("huge-ids")
    clients.create_topic(b, topic, partitions=1)
    huge = "g" * 30000
    with gw.GroupConn(b) as conn:
        codes = huge_id_round(conn, huge, topic)
        # Kafka sets no limit on group ids, but its __consumer_offsets record keys hold them as
        # 16-bit-length strings; corral refuses ids over 16 KiB up front with INVALID_GROUP_ID where
        # a group would be created (JoinGroup, OffsetCommit), and everything else sees a group
        # that does not exist.
        assert codes == {
            "find_coordinator": gw.NONE,
            "join": gw.INVALID_GROUP_ID,
            "sync": gw.UNKNOWN_MEMBER_ID,
            "heartbeat": gw.UNKNOWN_MEMBER_ID,
            "offset_commit": gw.INVALID_GROUP_ID,
            "offset_fetch": gw.NONE,
            "describe": gw.NONE,
            "leave": gw.UNKNOWN_MEMBER_ID,
            "delete": gw.GROUP_ID_NOT_FOUND,
        }, codes
        _, fetched = conn.call(gw.offset_fetch_v1, gw.parse_offset_fetch_v1, huge, [(topic, 0)])
        assert fetched == {(topic, 0): (-1, gw.NONE)}
        assert conn.describe(huge).state == "Dead"
        # A long but plausible id (10,000 characters) works end to end.
        long_id = "L" * 10000
        member, gen = joined_leader(conn, long_id, topic)
        _, commit = conn.call(gw.offset_commit_v2, gw.parse_offset_commit_v2, long_id, gen, member, {(topic, 0): 42})
        assert commit == {(topic, 0): gw.NONE}
        _, _, groups = conn.call(gw.list_groups_v0, gw.parse_list_groups_v0)
        assert (long_id, "consumer") in groups
        assert huge not in {g for g, _ in groups}

    # Still serving real clients, and the long id's offsets survive a restart.
    assert server.alive()
    clients.produce_all(clients.producer(b), topic, [(b"k", b"after huge ids")])
    assert clients.consume_all(b, topic)[0][-1].value == b"after huge ids"
    server.restart()
    with gw.GroupConn(b) as conn:
        _, fetched = conn.call(gw.offset_fetch_v1, gw.parse_offset_fetch_v1, long_id, [(topic, 0)])
        assert fetched == {(topic, 0): (42, gw.NONE)}
        assert conn.describe(long_id).state in ("Stable", "Empty")
    server.kill9()
    server.start()
    with gw.GroupConn(b) as conn:
        _, fetched = conn.call(gw.offset_fetch_v1, gw.parse_offset_fetch_v1, long_id, [(topic, 0)])
        assert fetched == {(topic, 0): (42, gw.NONE)}






def join_group_v6(corr: int, group: str, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bytes:
    """JoinGroup v6 (flexible: compact strings, so a string may be longer than 32,767 bytes)."""
    body = kw.compact_string(group) + kw.i32(10000) + kw.i32(10000) + kw.compact_string("") + kw.compact_string(None)
    body += kw.compact_string(protocol_type) + kw.uvarint(len(protocols) + 1)
    for name, metadata in protocols:
        body += kw.compact_string(name) + kw.uvarint(len(metadata) + 1) + metadata + b"\x00"
    body += b"\x00"  # tagged fields
    header = kw.i16(gw.JOIN_GROUP) + kw.i16(6) + kw.i32(corr) + kw.string("corral-e2e-raw") + b"\x00"
    return kw.i32(len(header) + len(body)) + header + body


def test_strings_too_long_for_the_group_record_are_refused(server):
    """A 40 KB protocol type (or protocol name) fits JoinGroup v6's compact strings but not the
    16-bit strings of the group's `__consumer_offsets` record: INVALID_REQUEST, nothing created,
    and the server goes on (also across a restart)."""
    group = unique("long-strings")
    long = "x" * 40_000
    conn = kw.Conn(server.bootstrap)
    try:
        for corr, (ptype, name) in enumerate([(long, "range"), ("consumer", long)], start=1):
            conn.send(join_group_v6(corr, group, ptype, [(name, gw.subscription(["t"]))]))
            frame = conn.recv_frame()
            assert frame is not None, "the connection was closed"
            # Response header v1 (correlation id, tagged fields), then throttle time, error code.
            assert struct.unpack_from(">i", frame)[0] == corr
            assert struct.unpack_from(">h", frame, 4 + 1 + 4)[0] == 42, "INVALID_REQUEST (42) expected"
    finally:
        conn.close()
    with gw.GroupConn(server.bootstrap) as conn:
        assert conn.describe(group).state == "Dead", "nothing was created"
        member, gen = joined_leader(conn, group)
        assert conn.heartbeat(group, gen, member) == gw.NONE
    server.restart()
    with gw.GroupConn(server.bootstrap) as conn:
        assert conn.describe(group).state in ("Stable", "Empty")
