"""The same requests to Kafka and to corral: the group coordinator's edge cases, with Apache Kafka 4.4
as the reference.

corral claims Kafka's group coordinator behaviour (error codes, generations, the classic state
machine, static membership); our own tests check our reading of the protocol. Here every case
sends one sequence of raw requests (groupwire.py, kafkawire.py: exact error codes and ids that no
client library exposes) to a real Kafka cluster (apache_kafka.py: the broker that FindCoordinator
names as the group's coordinator) and to a corral server, and asserts that both answer alike:
error codes and, where they mean something, the shape of the answer (generations, protocol name,
leader, member counts and the form of member ids; random member ids are replaced by the names the
scenario gave them). Kafka's answer is also checked against what the case expects, so a change
of Kafka's behaviour shows as such.

Both servers have the same group settings: Kafka's defaults for the session timeout bounds (6 s
and 30 min, corral's defaults too) and a 100 ms initial rebalance delay on both
(apache_kafka.CORRAL_GROUP_CONFIG). The request versions are ones both serve
(test_both_serve_the_versions_used checks it against their ApiVersions).

Each case is its own test, so a difference names itself; a difference found is fixed in corral,
not marked expected.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import groupwire as gw
import kafkawire as kw
import kip848wire as k8
from apache_kafka import CORRAL_GROUP_CONFIG

SESSION_MS = 10000
REBALANCE_MS = 10000
WAIT_S = 60.0
# __consumer_offsets partitions of both: Kafka's default, corral's groups.offsets_partitions.
OFFSETS_PARTITIONS = 50
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRIABLE_COORDINATOR_ERRORS = (14, 15, 16)
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

# (api key, version) of every request this module sends.
VERSIONS_USED = {
    (kw.API_API_VERSIONS, 0),
    (kw.API_METADATA, 0),
    (kw.API_LIST_OFFSETS, 1),
    (gw.FIND_COORDINATOR, 1),
    (gw.JOIN_GROUP, 3),
    (gw.JOIN_GROUP, 4),
    (gw.JOIN_GROUP, 5),
    (gw.SYNC_GROUP, 1),
    (gw.SYNC_GROUP, 3),
    (gw.HEARTBEAT, 1),
    (gw.HEARTBEAT, 3),
    (gw.LEAVE_GROUP, 1),
    (gw.LEAVE_GROUP, 3),
    (gw.OFFSET_COMMIT, 2),
    (gw.OFFSET_COMMIT, 7),
    (gw.OFFSET_FETCH, 1),
    (gw.DESCRIBE_GROUPS, 0),
    (gw.DESCRIBE_GROUPS, 4),
    (gw.LIST_GROUPS, 0),
    (gw.DELETE_GROUPS, 0),
    (gw.OFFSET_DELETE, 0),
}


# --- the two servers ------------------------------------------------------------------------------


class Side:
    """One server under test, reached as a client would: FindCoordinator first."""

    def __init__(self, name: str, bootstrap: str):
        self.name = name
        self.bootstrap = bootstrap
        self.first = bootstrap.split(",")[0]
        self._conns: list[gw.GroupConn] = []

    def coordinator(self, group: str) -> str:
        """host:port of the group's coordinator, once it serves the group: retried, as clients do,
        while Kafka creates __consumer_offsets and its new coordinators load their partitions."""
        deadline = time.monotonic() + WAIT_S
        while True:
            with gw.GroupConn(self.first) as conn:
                _, err, _node, host, port = conn.call(gw.find_coordinator_v1, gw.parse_find_coordinator_v1, group)
            if err == gw.NONE:
                with gw.GroupConn(f"{host}:{port}") as conn:
                    err = conn.describe(group).error
                if err == gw.NONE:
                    return f"{host}:{port}"
            assert err in RETRIABLE_COORDINATOR_ERRORS, f"{self.name}: FindCoordinator/DescribeGroups({group!r}) -> error {err}"
            assert time.monotonic() < deadline, f"{self.name}: no coordinator for {group!r} within {WAIT_S}s (last error {err})"
            time.sleep(0.2)

    def conn(self, group: str) -> gw.GroupConn:
        """A new connection to the group's coordinator (closed at the end of the test)."""
        c = gw.GroupConn(self.coordinator(group))
        self._conns.append(c)
        return c

    def any_conn(self) -> gw.GroupConn:
        c = gw.GroupConn(self.first)
        self._conns.append(c)
        return c

    def create_topic(self, partitions: int = 2) -> str:
        """A new topic (the broker's default replication factor), known to every broker."""
        topic = f"ref-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": clients.RDKAFKA_LOG})
        admin.create_topics([NewTopic(topic, num_partitions=partitions)], request_timeout=30)[topic].result(30)
        for address in self.bootstrap.split(","):
            deadline = time.monotonic() + WAIT_S
            while True:
                c = kw.Conn(address)
                try:
                    c.send(kw.metadata_v0(1, [topic]))
                    _, _brokers, topics = kw.parse_metadata_v0(c.recv_frame())
                finally:
                    c.close()
                if topics.get(topic) == gw.NONE:
                    break
                assert time.monotonic() < deadline, f"{self.name}: topic {topic} not known to {address}: {topics}"
                time.sleep(0.1)
        return topic

    def wait_assignable(self, topic: str, near: str) -> None:
        """Until the broker coordinating group `near` assigns `topic` to a consumer group: Kafka's
        group coordinator learns of a new topic from its metadata image, which can lag behind the
        brokers' Metadata answers (a first heartbeat then gets an empty assignment)."""
        target = self.coordinator(near)
        deadline = time.monotonic() + WAIT_S
        probe = f"assignable-{uuid.uuid4().hex[:8]}"
        while self.coordinator(probe) != target:
            assert time.monotonic() < deadline, f"{self.name}: no group coordinated by {target}"
            probe = f"assignable-{uuid.uuid4().hex[:8]}"
        heartbeat = (k8.consumer_group_heartbeat_v0, k8.parse_consumer_group_heartbeat)
        with gw.GroupConn(target) as conn:
            h = conn.call(*heartbeat, probe, "", 0, rebalance_timeout_ms=10000, subscribed_topics=[topic], owned=[])
            while not any(parts for _, parts in h.assignment or []):
                assert h.error == gw.NONE and time.monotonic() < deadline, f"{self.name}: {topic} not assigned: {h}"
                time.sleep(0.1)
                h = conn.call(*heartbeat, probe, h.member_id, h.member_epoch)
            conn.call(*heartbeat, probe, h.member_id, -1)

    def close(self) -> None:
        for c in self._conns:
            c.close()


@pytest.fixture
def sides(apache_kafka, corral_factory):
    """Kafka (the reference) first, then corral; both with the same group settings."""
    corral = corral_factory(config=CORRAL_GROUP_CONFIG)
    # A new corral may listen on a port an earlier test's corral had: its barrier topic is new.
    _BARRIER_TOPICS.pop(corral.bootstrap, None)
    both = [Side("kafka", apache_kafka.bootstrap), Side("corral", corral.bootstrap)]
    yield both
    for s in both:
        s.close()


def compare(sides, scenario, expected: dict | None = None, **kwargs) -> None:
    """Runs `scenario(side, **kwargs)` on Kafka and on corral; Kafka must answer `expected` (the
    keys it lists) and corral exactly what Kafka answered."""
    got = {s.name: scenario(s, **kwargs) for s in sides}
    for name, answers in got.items():
        print(f"{name}: {answers}")
    if expected is not None:
        mismatched = {k: (got["kafka"].get(k), v) for k, v in expected.items() if got["kafka"].get(k) != v}
        assert not mismatched, f"Kafka itself answered otherwise than the case expects (got, expected): {mismatched}"
    assert got["corral"] == got["kafka"]


# --- scenario helpers -----------------------------------------------------------------------------


class Names:
    """Replaces member ids by the names a scenario gave them; an id it was not told of by its
    form (`<client id>-<uuid>`), so that two servers' random ids compare equal."""

    def __init__(self):
        self.ids: dict[str, str] = {}

    def name(self, member_id: str, name: str) -> str:
        self.ids[member_id] = name
        return name

    def __call__(self, member_id: str | None) -> str | None:
        if member_id is None or member_id == "":
            return member_id
        if member_id in self.ids:
            return self.ids[member_id]
        m = re.fullmatch(rf"(.*)-{UUID}", member_id)
        return f"{m.group(1)}-<uuid>" if m else f"<unexpected form: {member_id}>"


def unique(prefix: str) -> str:
    return f"ref-{prefix}-{uuid.uuid4().hex[:8]}"


def join_shape(j: gw.JoinResponse, names: Names) -> dict:
    return {
        "error": j.error,
        "generation": j.generation,
        "protocol": j.protocol,
        "leader": names(j.leader),
        "member_id": names(j.member_id),
        "members": sorted(names(m) for m, _ in j.members),
    }


def join_new(conn: gw.GroupConn, group: str, version: int = 5, **kwargs) -> gw.JoinResponse:
    """A new dynamic member's join as a v4+ client does it: MEMBER_ID_REQUIRED, then again with
    the id. Waits for the join phase to complete."""
    j = conn.join(group, "", version=version, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, **kwargs)
    assert j.error == gw.MEMBER_ID_REQUIRED and j.member_id, j
    j = conn.join(group, j.member_id, version=version, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, **kwargs)
    assert j.error == gw.NONE, j
    return j


def stable_member(conn: gw.GroupConn, group: str, topic: str = "t") -> gw.JoinResponse:
    """Joins `group` as its only member and syncs (leader: assigns itself partition 0)."""
    j = join_new(conn, group, protocols=[("range", gw.subscription([topic]))])
    assert j.leader == j.member_id and j.generation == 1, j
    err, _ = conn.sync(group, j.generation, j.member_id, [(j.member_id, gw.assignment({topic: [0]}))])
    assert err == gw.NONE
    return j


def send_join(conn: gw.GroupConn, group: str, member_id: str, version: int = 5, **kwargs) -> tuple[int, int]:
    """Sends a JoinGroup without waiting for its answer (it parks until the join phase ends)."""
    corr = conn.next_corr()
    kwargs.setdefault("session_timeout_ms", SESSION_MS)
    kwargs.setdefault("rebalance_timeout_ms", REBALANCE_MS)
    conn.send(gw.join_group(corr, group, member_id, version=version, **kwargs))
    return corr, version


def recv_join(conn: gw.GroupConn, pending: tuple[int, int]) -> gw.JoinResponse:
    corr, version = pending
    frame = conn.recv_frame()
    assert frame is not None, "the server closed the connection instead of answering JoinGroup"
    j = gw.parse_join_group(frame, version)
    assert j.corr == corr
    return j


def java_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str) -> int:
    h = java_hash(group)
    return 0 if h == -(2**31) else abs(h) % OFFSETS_PARTITIONS


# For each __consumer_offsets partition, a group id that maps to it.
BARRIER_GROUPS: dict[int, str] = {}
for _i in range(100000):
    BARRIER_GROUPS.setdefault(offsets_partition(f"ref-barrier-{_i}"), f"ref-barrier-{_i}")
    if len(BARRIER_GROUPS) == OFFSETS_PARTITIONS:
        break
# Each server's barrier topic, by bootstrap address (Kafka's for the session; a corral's for its test).
_BARRIER_TOPICS: dict[str, str] = {}


def barrier(side: Side, group: str) -> None:
    """Returns once every write of `group`'s coordinator partition made so far is committed.

    Kafka answers some requests before their write is committed (a JoinGroup that creates a group
    and answers MEMBER_ID_REQUIRED or an error writes the new, empty group after answering), and
    serves reads such as DescribeGroups from the last committed state, so a DescribeGroups sent
    right after may not see the group yet. An OffsetCommit is answered only once committed; one
    by another group of the same partition, written after, is a barrier for both servers.
    """
    topic = _BARRIER_TOPICS.get(side.bootstrap)
    if topic is None:
        topic = _BARRIER_TOPICS[side.bootstrap] = side.create_topic(1)
    other = BARRIER_GROUPS[offsets_partition(group)]
    with gw.GroupConn(side.coordinator(other)) as c:
        assert by_partition(commit(c, other, -1, "", {(topic, 0): 0})) == {0: gw.NONE}


def describe(side: Side, group: str) -> gw.GroupDescription:
    """DescribeGroups v0 of `group`, after a barrier."""
    barrier(side, group)
    with gw.GroupConn(side.coordinator(group)) as c:
        return c.describe(group)


def describe_v4(side: Side, group: str, include_authorized_operations: bool = False) -> gw.GroupDescriptionV4:
    barrier(side, group)
    with gw.GroupConn(side.coordinator(group)) as c:
        _, groups = c.call(gw.describe_groups_v4, gw.parse_describe_groups_v4, [group], include_authorized_operations)
    assert len(groups) == 1 and groups[0].group_id == group
    return groups[0]


def wait_state(side: Side, group: str, state: str) -> None:
    deadline = time.monotonic() + WAIT_S
    conn = side.conn(group)
    while (got := conn.describe(group).state) != state:
        assert time.monotonic() < deadline, f"{side.name}: group {group} still {got}, expected {state}"
        time.sleep(0.02)


def commit(conn: gw.GroupConn, group: str, generation: int, member_id: str, offsets: dict) -> dict:
    return conn.call(gw.offset_commit_v2, gw.parse_offset_commit_v2, group, generation, member_id, offsets)[1]


def fetch(conn: gw.GroupConn, group: str, parts: list) -> dict:
    return conn.call(gw.offset_fetch_v1, gw.parse_offset_fetch_v1, group, parts)[1]


def by_partition(result: dict) -> dict:
    """{(topic, partition): v} with the scenario's random topic name dropped."""
    return {p: v for (_t, p), v in sorted(result.items())}


# --- the versions -------------------------------------------------------------------------------


def api_ranges(address: str) -> dict[int, tuple[int, int]]:
    c = kw.Conn(address)
    try:
        c.send(kw.api_versions_v0(1))
        _, err, apis = kw.parse_api_versions_v0(c.recv_frame())
    finally:
        c.close()
    assert err == 0
    return apis


def assert_both_serve(sides, versions: set[tuple[int, int]]) -> None:
    """Both servers' ApiVersions list every (api key, version) of `versions`."""
    for side in sides:
        apis = api_ranges(side.first)
        outside = sorted((k, v, apis.get(k)) for k, v in versions if not (k in apis and apis[k][0] <= v <= apis[k][1]))
        assert not outside, f"{side.name} does not serve (api, version, its range): {outside}"


def test_both_serve_the_versions_used(sides):
    assert_both_serve(sides, VERSIONS_USED)


# --- JoinGroup ------------------------------------------------------------------------------------


def s_member_id_required(side: Side) -> dict:
    group, names = unique("kip394"), Names()
    conn = side.conn(group)
    first = conn.join(group, "", version=4, session_timeout_ms=SESSION_MS)
    second = conn.join(group, first.member_id, version=4, session_timeout_ms=SESSION_MS)
    if second.member_id == first.member_id:
        names.name(second.member_id, "A")
    return {"first": join_shape(first, Names()), "second": join_shape(second, names)}


def test_join_v4_new_member_gets_member_id_required_then_joins(sides):
    compare(
        sides,
        s_member_id_required,
        {
            "first": {"error": gw.MEMBER_ID_REQUIRED, "generation": -1, "protocol": "", "leader": "", "member_id": "corral-e2e-raw-<uuid>", "members": []},
            "second": {"error": gw.NONE, "generation": 1, "protocol": "range", "leader": "A", "member_id": "A", "members": ["A"]},
        },
    )


def s_join_v3_direct(side: Side) -> dict:
    group, names = unique("v3"), Names()
    j = side.conn(group).join(group, "", version=3, session_timeout_ms=SESSION_MS)
    names.name(j.member_id, "A")
    return join_shape(j, names)


def test_join_v3_new_member_joins_without_member_id_required(sides):
    compare(sides, s_join_v3_direct, {"error": gw.NONE, "generation": 1, "leader": "A", "members": ["A"]})


def s_join_unknown_member(side: Side, live: bool) -> dict:
    group = unique("unknown-member")
    conn = side.conn(group)
    if live:
        stable_member(conn, group)
    j = conn.join(group, "ghost-member", version=4, session_timeout_ms=SESSION_MS)
    return {"join": join_shape(j, Names()), "state": describe(side, group).state}


@pytest.mark.parametrize("live", [False, True], ids=["missing-group", "live-group"])
def test_join_with_unknown_member_id(sides, live):
    compare(sides, s_join_unknown_member, {"join": {"error": gw.UNKNOWN_MEMBER_ID, "generation": -1, "protocol": "", "leader": "", "member_id": "<unexpected form: ghost-member>", "members": []}}, live=live)


def s_join_session_timeout(side: Side, timeout: int) -> dict:
    group = unique("session")
    j = side.conn(group).join(group, "", version=4, session_timeout_ms=timeout)
    return {"error": j.error, "generation": j.generation, "state": describe(side, group).state}


@pytest.mark.parametrize(
    "timeout,error",
    [(5999, gw.INVALID_SESSION_TIMEOUT), (1800001, gw.INVALID_SESSION_TIMEOUT), (6000, gw.MEMBER_ID_REQUIRED), (1800000, gw.MEMBER_ID_REQUIRED)],
    ids=["below-min", "above-max", "min", "max"],
)
def test_join_session_timeout_bounds(sides, timeout, error):
    compare(sides, s_join_session_timeout, {"error": error, "generation": -1}, timeout=timeout)


def s_join_inconsistent(side: Side, protocol_type: str, protocols: list) -> dict:
    group = unique("inconsistent")
    conn = side.conn(group)
    stable_member(conn, group)
    j = side.conn(group).join(group, "", version=3, session_timeout_ms=SESSION_MS, protocol_type=protocol_type, protocols=protocols)
    d = describe(side, group)
    return {"error": j.error, "generation": j.generation, "state": d.state, "members": len(d.members)}


@pytest.mark.parametrize(
    "protocol_type,protocols",
    [("connect", [("range", gw.subscription(["t"]))]), ("consumer", [("roundrobin", gw.subscription(["t"]))])],
    ids=["other-protocol-type", "no-common-protocol"],
)
def test_join_inconsistent_group_protocol(sides, protocol_type, protocols):
    compare(sides, s_join_inconsistent, {"error": gw.INCONSISTENT_GROUP_PROTOCOL, "state": "Stable", "members": 1}, protocol_type=protocol_type, protocols=protocols)


def s_join_empty_group_protocol(side: Side, protocol_type: str, protocols: list) -> dict:
    group = unique("empty-protocol")
    j = side.conn(group).join(group, "", version=3, session_timeout_ms=SESSION_MS, protocol_type=protocol_type, protocols=protocols)
    return {"error": j.error, "generation": j.generation, "state": describe(side, group).state}


@pytest.mark.parametrize(
    "protocol_type,protocols", [("", [("range", b"")]), ("consumer", [])], ids=["empty-protocol-type", "no-protocols"]
)
def test_join_new_group_needs_protocol_type_and_protocols(sides, protocol_type, protocols):
    compare(sides, s_join_empty_group_protocol, {"error": gw.INCONSISTENT_GROUP_PROTOCOL, "generation": -1}, protocol_type=protocol_type, protocols=protocols)


def s_join_empty_group_id(side: Side) -> dict:
    with side.any_conn() as conn:
        return {v: conn.join("", "", version=v, session_timeout_ms=SESSION_MS).error for v in (3, 5)}


def test_join_empty_group_id(sides):
    compare(sides, s_join_empty_group_id, {3: gw.INVALID_GROUP_ID, 5: gw.INVALID_GROUP_ID})


# --- SyncGroup --------------------------------------------------------------------------------------


def s_sync_errors(side: Side) -> dict:
    group = unique("sync")
    conn = side.conn(group)
    a = stable_member(conn, group)
    wrong_gen = conn.sync(group, a.generation + 1, a.member_id, [])
    unknown = conn.sync(group, a.generation, "ghost-member", [])
    missing = unique("sync-missing")
    missing_group = side.conn(missing).sync(missing, 1, "ghost-member", [])
    again = conn.sync(group, a.generation, a.member_id, [])
    return {
        "wrong generation": wrong_gen[0],
        "unknown member": unknown[0],
        "missing group": missing_group[0],
        "stable resync": (again[0], gw.parse_assignment(again[1])),
    }


def test_sync_group_wrong_generation_and_unknown_member(sides):
    compare(
        sides,
        s_sync_errors,
        {
            "wrong generation": gw.ILLEGAL_GENERATION,
            "unknown member": gw.UNKNOWN_MEMBER_ID,
            "missing group": gw.UNKNOWN_MEMBER_ID,
            "stable resync": (gw.NONE, {"t": [0]}),
        },
    )


# --- a second member joins a stable group: PreparingRebalance, then CompletingRebalance -------------


def s_second_member(side: Side, stop_at: str) -> dict:
    """A is the stable leader; B joins (A must rejoin); the scenario reports what `stop_at` asks."""
    group, names, topic = unique("rebalance"), Names(), side.create_topic(1) if stop_at == "commit" else "t"
    ca, cb = side.conn(group), side.conn(group)
    a = stable_member(ca, group, topic)
    names.name(a.member_id, "A")
    first = cb.join(group, "", version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
    assert first.error == gw.MEMBER_ID_REQUIRED
    names.name(first.member_id, "B")
    pending_b = send_join(cb, group, first.member_id)
    wait_state(side, group, "PreparingRebalance")
    out: dict = {}
    out["A heartbeat while preparing"] = ca.heartbeat(group, a.generation, a.member_id)
    out["A sync while preparing"] = ca.sync(group, a.generation, a.member_id, [])[0]
    if stop_at == "describe":
        # Outside Stable, DescribeGroups names no protocol and gives members without metadata.
        d = describe(side, group)
        members = sorted((names(m), client, host, meta, gw.parse_assignment(asg)) for m, client, host, meta, asg in d.members)
        out["described while preparing"] = (d.error, d.state, d.protocol_type, d.protocol, members)
    if stop_at == "commit":
        out["A commit while preparing"] = by_partition(commit(ca, group, a.generation, a.member_id, {(topic, 0): 1}))
    pending_a = send_join(ca, group, a.member_id)
    ja, jb = recv_join(ca, pending_a), recv_join(cb, pending_b)
    out["A join"], out["B join"] = join_shape(ja, names), join_shape(jb, names)
    out["state"] = describe(side, group).state
    if stop_at == "describe":
        d4 = describe_v4(side, group)
        out["described while completing (v4)"] = (d4.state, d4.protocol, sorted((names(m), meta, gw.parse_assignment(asg)) for m, _i, _c, _h, meta, asg in d4.members))
    if stop_at in ("completing", "commit"):
        out["B heartbeat while completing"] = cb.heartbeat(group, jb.generation, jb.member_id)
        out["A heartbeat old generation"] = ca.heartbeat(group, a.generation, a.member_id)
    if stop_at == "commit":
        out["B commit while completing"] = by_partition(commit(cb, group, jb.generation, jb.member_id, {(topic, 0): 2}))
    if stop_at == "sync":
        corr = cb.next_corr()
        cb.send(gw.sync_group(corr, group, jb.generation, jb.member_id, []))  # a follower's sync waits for the leader's
        err_a, data_a = ca.sync(group, ja.generation, ja.member_id, [(ja.member_id, gw.assignment({"t": [0]})), (jb.member_id, gw.assignment({"t": [1]}))])
        _, err_b, data_b = gw.parse_sync_group(cb.recv_frame())
        out["A sync"], out["B sync"] = (err_a, gw.parse_assignment(data_a)), (err_b, gw.parse_assignment(data_b))
        d = describe(side, group)
        out["after sync"] = (d.state, d.protocol_type, d.protocol, sorted(names(m[0]) for m in d.members))
    if stop_at == "rejoin":
        sync_both(ca, cb, group, ja, jb)
        # A follower re-joining a Stable group with the same protocols is answered at once.
        out["B rejoins unchanged"] = join_shape(cb.join(group, jb.member_id, version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS), names)
        out["state after B"] = describe(side, group).state
        # The leader re-joining a Stable group starts a rebalance, even with the same protocols.
        pending_a = send_join(ca, group, ja.member_id)
        wait_state(side, group, "PreparingRebalance")
        out["B heartbeat"] = cb.heartbeat(group, jb.generation, jb.member_id)
        pending_b = send_join(cb, group, jb.member_id)
        out["A rejoin"], out["B rejoin"] = join_shape(recv_join(ca, pending_a), names), join_shape(recv_join(cb, pending_b), names)
    if stop_at == "leave":
        sync_both(ca, cb, group, ja, jb)
        out["A leaves"] = ca.leave(group, ja.member_id)
        out["B heartbeat"] = cb.heartbeat(group, jb.generation, jb.member_id)
        out["A heartbeat after leaving"] = ca.heartbeat(group, ja.generation, ja.member_id)
        jb2 = cb.join(group, jb.member_id, version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
        out["B rejoin"] = join_shape(jb2, names)
        out["B leaves"] = cb.leave(group, jb.member_id)
        d = describe(side, group)
        out["after both left"] = (d.state, d.protocol_type, d.protocol, len(d.members))
        out["B heartbeat in the empty group"] = cb.heartbeat(group, jb2.generation, jb.member_id)
        t = side.create_topic(1)
        out["anonymous commit to the empty group"] = by_partition(commit(cb, group, -1, "", {(t, 0): 1}))
    return out


def sync_both(ca: gw.GroupConn, cb: gw.GroupConn, group: str, ja: gw.JoinResponse, jb: gw.JoinResponse) -> None:
    """The leader A assigns partition 0 to itself and 1 to B; both sync."""
    assignments = [(ja.member_id, gw.assignment({"t": [0]})), (jb.member_id, gw.assignment({"t": [1]}))]
    assert ca.sync(group, ja.generation, ja.member_id, assignments)[0] == gw.NONE
    assert cb.sync(group, jb.generation, jb.member_id, [])[0] == gw.NONE


REBALANCE_JOINS = {
    "A join": {"error": gw.NONE, "generation": 2, "protocol": "range", "leader": "A", "member_id": "A", "members": ["A", "B"]},
    "B join": {"error": gw.NONE, "generation": 2, "protocol": "range", "leader": "A", "member_id": "B", "members": []},
    "state": "CompletingRebalance",
}


def test_heartbeat_during_rebalance_gets_rebalance_in_progress(sides):
    compare(
        sides,
        s_second_member,
        {
            "A heartbeat while preparing": gw.REBALANCE_IN_PROGRESS,
            "A sync while preparing": gw.REBALANCE_IN_PROGRESS,
            **REBALANCE_JOINS,
        },
        stop_at="joins",
    )


def test_describe_group_outside_stable_gives_current_assignments(sides):
    compare(
        sides,
        s_second_member,
        {
            "described while preparing": (
                gw.NONE,
                "PreparingRebalance",
                "consumer",
                "",
                [("A", "corral-e2e-raw", "/127.0.0.1", b"", {"t": [0]}), ("B", "corral-e2e-raw", "/127.0.0.1", b"", {})],
            ),
            "described while completing (v4)": ("CompletingRebalance", "", [("A", b"", {"t": [0]}), ("B", b"", {})]),
            **REBALANCE_JOINS,
        },
        stop_at="describe",
    )


def test_heartbeat_while_completing_rebalance_succeeds(sides):
    compare(
        sides,
        s_second_member,
        {"B heartbeat while completing": gw.NONE, "A heartbeat old generation": gw.ILLEGAL_GENERATION, **REBALANCE_JOINS},
        stop_at="completing",
    )


def test_offset_commit_while_preparing_ok_while_completing_rebalance_in_progress(sides):
    compare(
        sides,
        s_second_member,
        {"A commit while preparing": {0: gw.NONE}, "B commit while completing": {0: gw.REBALANCE_IN_PROGRESS}},
        stop_at="commit",
    )


def test_leader_sync_completes_the_rebalance(sides):
    compare(
        sides,
        s_second_member,
        {"A sync": (gw.NONE, {"t": [0]}), "B sync": (gw.NONE, {"t": [1]}), "after sync": ("Stable", "consumer", "range", ["A", "B"])},
        stop_at="sync",
    )


def test_rejoin_in_a_stable_group_follower_answered_leader_rebalances(sides):
    compare(
        sides,
        s_second_member,
        {
            "B rejoins unchanged": {"error": gw.NONE, "generation": 2, "protocol": "range", "leader": "A", "member_id": "B", "members": []},
            "state after B": "Stable",
            "B heartbeat": gw.REBALANCE_IN_PROGRESS,
            "A rejoin": {"error": gw.NONE, "generation": 3, "protocol": "range", "leader": "A", "member_id": "A", "members": ["A", "B"]},
            "B rejoin": {"error": gw.NONE, "generation": 3, "protocol": "range", "leader": "A", "member_id": "B", "members": []},
        },
        stop_at="rejoin",
    )


def test_leader_leaves_then_the_group_empties(sides):
    compare(
        sides,
        s_second_member,
        {
            "A leaves": gw.NONE,
            "B heartbeat": gw.REBALANCE_IN_PROGRESS,
            "A heartbeat after leaving": gw.UNKNOWN_MEMBER_ID,
            "B rejoin": {"error": gw.NONE, "generation": 3, "protocol": "range", "leader": "B", "member_id": "B", "members": ["B"]},
            "B leaves": gw.NONE,
            "after both left": ("Empty", "consumer", "", 0),
            "B heartbeat in the empty group": gw.UNKNOWN_MEMBER_ID,
            "anonymous commit to the empty group": {0: gw.NONE},
        },
        stop_at="leave",
    )


def s_rejoin_changed_metadata(side: Side) -> dict:
    group, names = unique("metadata"), Names()
    conn = side.conn(group)
    a = stable_member(conn, group)
    names.name(a.member_id, "A")
    j = conn.join(group, a.member_id, version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocols=[("range", gw.subscription(["t", "u"]))])
    return {"rejoin": join_shape(j, names), "state": describe(side, group).state}


def test_rejoin_with_a_new_subscription_starts_a_new_generation(sides):
    compare(
        sides,
        s_rejoin_changed_metadata,
        {"rejoin": {"error": gw.NONE, "generation": 2, "protocol": "range", "leader": "A", "member_id": "A", "members": ["A"]}, "state": "CompletingRebalance"},
    )


# --- Heartbeat ----------------------------------------------------------------------------------


def s_heartbeat_errors(side: Side) -> dict:
    group, missing_group = unique("hb"), unique("hb-missing")
    conn = side.conn(group)
    missing = side.conn(missing_group).heartbeat(missing_group, 1, "ghost-member")
    a = stable_member(conn, group)
    return {
        "missing group": missing,
        "unknown member": conn.heartbeat(group, a.generation, "ghost-member"),
        "wrong generation": conn.heartbeat(group, a.generation + 1, a.member_id),
        "ok": conn.heartbeat(group, a.generation, a.member_id),
        "empty group id": conn.heartbeat("", a.generation, a.member_id),
    }


def test_heartbeat_unknown_group_member_and_generation(sides):
    compare(
        sides,
        s_heartbeat_errors,
        {
            "missing group": gw.UNKNOWN_MEMBER_ID,
            "unknown member": gw.UNKNOWN_MEMBER_ID,
            "wrong generation": gw.ILLEGAL_GENERATION,
            "ok": gw.NONE,
            "empty group id": gw.INVALID_GROUP_ID,
        },
    )


# --- OffsetCommit / OffsetFetch -------------------------------------------------------------------


def s_simple_commit(side: Side) -> dict:
    group, topic = unique("simple"), side.create_topic(2)
    conn = side.conn(group)
    committed = commit(conn, group, -1, "", {(topic, 0): 5, (topic, 1): 7})
    fetched = fetch(conn, group, [(topic, 0), (topic, 1), (topic, 2)])
    d = describe(side, group)
    _, err, listed = conn.call(gw.list_groups_v0, gw.parse_list_groups_v0)
    return {
        "commit": by_partition(committed),
        "fetch": by_partition(fetched),
        "describe": (d.error, d.state, d.protocol_type, d.protocol, len(d.members)),
        "listed": (err, [ptype for g, ptype in listed if g == group]),
    }


def test_offset_commit_standalone_creates_a_simple_group(sides):
    compare(
        sides,
        s_simple_commit,
        {
            "commit": {0: gw.NONE, 1: gw.NONE},
            "fetch": {0: (5, gw.NONE), 1: (7, gw.NONE), 2: (-1, gw.NONE)},
            "describe": (gw.NONE, "Empty", "", "", 0),
            "listed": (gw.NONE, [""]),
        },
    )


def s_commit_generations(side: Side) -> dict:
    group, missing, topic = unique("commit-gen"), unique("commit-missing"), side.create_topic(1)
    conn = side.conn(group)
    a = stable_member(conn, group, topic)
    return {
        "wrong generation": by_partition(commit(conn, group, a.generation + 1, a.member_id, {(topic, 0): 3})),
        "unknown member": by_partition(commit(conn, group, a.generation, "ghost-member", {(topic, 0): 3})),
        "anonymous to a live group": by_partition(commit(conn, group, -1, "", {(topic, 0): 3})),
        "missing group, generation 1": by_partition(commit(side.conn(missing), missing, 1, "ghost-member", {(topic, 0): 3})),
        "right generation": by_partition(commit(conn, group, a.generation, a.member_id, {(topic, 0): 4})),
        "fetch": by_partition(fetch(conn, group, [(topic, 0)])),
    }


def test_offset_commit_generation_and_member_checks(sides):
    compare(
        sides,
        s_commit_generations,
        {
            "wrong generation": {0: gw.ILLEGAL_GENERATION},
            "unknown member": {0: gw.UNKNOWN_MEMBER_ID},
            "anonymous to a live group": {0: gw.UNKNOWN_MEMBER_ID},
            "missing group, generation 1": {0: gw.ILLEGAL_GENERATION},
            "right generation": {0: gw.NONE},
            "fetch": {0: (4, gw.NONE)},
        },
    )


def s_commit_unknown_topic(side: Side) -> dict:
    group, topic = unique("commit-topic"), side.create_topic(1)
    conn = side.conn(group)
    missing = f"ref-missing-{uuid.uuid4().hex[:8]}"
    out = {
        "unknown topic": by_partition(commit(conn, group, -1, "", {(missing, 0): 1})),
        "unknown partition": by_partition(commit(conn, group, -1, "", {(topic, 0): 1, (topic, 5): 1})),
    }
    out["fetch"] = by_partition(fetch(conn, group, [(topic, 0), (topic, 5)]))
    return out


def test_offset_commit_unknown_topic_or_partition(sides):
    compare(
        sides,
        s_commit_unknown_topic,
        {
            "unknown topic": {0: gw.UNKNOWN_TOPIC_OR_PARTITION},
            "unknown partition": {0: gw.NONE, 5: gw.UNKNOWN_TOPIC_OR_PARTITION},
            "fetch": {0: (1, gw.NONE), 5: (-1, gw.NONE)},
        },
    )


def s_fetch_unknown_group(side: Side) -> dict:
    group, topic = unique("fetch-missing"), side.create_topic(1)
    conn = side.conn(group)
    return {"known topic": by_partition(fetch(conn, group, [(topic, 0)])), "unknown topic": by_partition(fetch(conn, group, [("ref-nothing-here", 3)]))}


def test_offset_fetch_unknown_group(sides):
    compare(sides, s_fetch_unknown_group, {"known topic": {0: (-1, gw.NONE)}, "unknown topic": {3: (-1, gw.NONE)}})


def s_commit_metadata(side: Side) -> dict:
    group, topic = unique("commit-metadata"), side.create_topic(3)
    conn = side.conn(group)
    offsets = {(topic, 0): 1, (topic, 1): 2, (topic, 2): 3}
    metadata = {(topic, 0): "m" * 4096, (topic, 1): "m" * 4097, (topic, 2): None}
    result = conn.call(gw.offset_commit_v7, gw.parse_offset_commit_v7, group, -1, "", offsets, None, metadata)[1]
    corr = conn.next_corr()
    conn.send(gw.offset_fetch_v1(corr, group, list(offsets)))
    # OffsetFetch v1 with the metadata: (offset, metadata length, error).
    r = kw.Reader(conn.recv_frame())
    assert r.take("i") == corr
    fetched = {}
    for _ in range(r.take("i")):
        r.string()
        for _ in range(r.take("i")):
            p, o, m, e = r.take("i"), r.take("q"), r.string(), r.take("h")
            fetched[p] = (o, None if m is None else len(m), e)
    return {"commit": by_partition(result), "fetch": dict(sorted(fetched.items()))}


def test_offset_commit_metadata_too_large(sides):
    compare(
        sides,
        s_commit_metadata,
        # The limit is offset.metadata.max.bytes (4096, both); null metadata is stored as "".
        {"commit": {0: gw.NONE, 1: gw.OFFSET_METADATA_TOO_LARGE, 2: gw.NONE}, "fetch": {0: (1, 4096, gw.NONE), 1: (-1, 0, gw.NONE), 2: (3, 0, gw.NONE)}},
    )


def s_offset_delete(side: Side) -> dict:
    group, subscribed, other = unique("offset-delete"), side.create_topic(1), side.create_topic(1)
    conn = side.conn(group)
    missing_group = unique("offset-delete-missing")
    out = {"missing group": side.conn(missing_group).call(gw.offset_delete_v0, gw.parse_offset_delete_v0, missing_group, [(subscribed, 0)])[1]}
    a = stable_member(conn, group, subscribed)
    assert by_partition(commit(conn, group, a.generation, a.member_id, {(subscribed, 0): 5, (other, 0): 6})) == {0: gw.NONE}
    for name, topic in (("subscribed topic", subscribed), ("other topic", other)):
        _, err, parts = conn.call(gw.offset_delete_v0, gw.parse_offset_delete_v0, group, [(topic, 0)])
        out[name] = (err, by_partition(parts))
    out["fetch after"] = {name: by_partition(fetch(conn, group, [(t, 0)])) for name, t in (("subscribed", subscribed), ("other", other))}
    out["empty group id"] = conn.call(gw.offset_delete_v0, gw.parse_offset_delete_v0, "", [(other, 0)])[1]
    return out


def test_offset_delete(sides):
    compare(
        sides,
        s_offset_delete,
        {
            "missing group": gw.GROUP_ID_NOT_FOUND,
            "subscribed topic": (gw.NONE, {0: gw.GROUP_SUBSCRIBED_TO_TOPIC}),
            "other topic": (gw.NONE, {0: gw.NONE}),
            "fetch after": {"subscribed": {0: (5, gw.NONE)}, "other": {0: (-1, gw.NONE)}},
            "empty group id": gw.INVALID_GROUP_ID,
        },
    )


# --- DescribeGroups -------------------------------------------------------------------------------


def s_describe_unknown(side: Side) -> dict:
    group = unique("describe-missing")
    d0, d4 = describe(side, group), describe_v4(side, group)
    return {
        "v0": (d0.error, d0.state, d0.protocol_type, d0.protocol, d0.members),
        "v4": (d4.error, d4.state, d4.protocol_type, d4.protocol, d4.members, d4.authorized_operations),
    }


def test_describe_unknown_group_is_dead(sides):
    compare(sides, s_describe_unknown, {"v0": (gw.NONE, "Dead", "", "", []), "v4": (gw.NONE, "Dead", "", "", [], -(2**31))})


def s_describe_stable(side: Side, authorized: bool) -> dict:
    group, names = unique("describe"), Names()
    conn = side.conn(group)
    a = stable_member(conn, group)
    names.name(a.member_id, "A")
    d = describe_v4(side, group, authorized)
    return {
        "group": (d.error, d.state, d.protocol_type, d.protocol),
        "members": [(names(m), inst, client, host, gw.parse_assignment(asg)) for m, inst, client, host, _meta, asg in d.members],
        "metadata is the subscription": [meta == gw.subscription(["t"]) for *_, meta, _asg in d.members],
        "authorized operations": d.authorized_operations,
    }


@pytest.mark.parametrize("authorized", [False, True], ids=["plain", "authorized-operations"])
def test_describe_stable_group(sides, authorized):
    compare(
        sides,
        s_describe_stable,
        {
            "group": (gw.NONE, "Stable", "consumer", "range"),
            "members": [("A", None, "corral-e2e-raw", "/127.0.0.1", {"t": [0]})],
            "metadata is the subscription": [True],
        },
        authorized=authorized,
    )


# --- LeaveGroup -----------------------------------------------------------------------------------


def s_leave_unknown(side: Side) -> dict:
    group = unique("leave")
    conn = side.conn(group)
    missing_group = unique("leave-missing")
    v1_missing = side.conn(missing_group).leave(missing_group, "ghost-member")
    v3_missing = side.conn(missing_group).call(gw.leave_group_v3, gw.parse_leave_group_v3, missing_group, [("ghost-member", None)])[1:]
    stable_member(conn, group)
    v1_unknown = conn.leave(group, "ghost-member")
    v3_unknown = conn.call(gw.leave_group_v3, gw.parse_leave_group_v3, group, [("ghost-member", None), ("", "ghost-instance")])[1:]
    return {"v1 missing group": v1_missing, "v3 missing group": v3_missing, "v1 unknown member": v1_unknown, "v3 unknown members": v3_unknown, "state": describe(side, group).state}


def test_leave_group_unknown_member(sides):
    compare(
        sides,
        s_leave_unknown,
        {
            "v1 missing group": gw.UNKNOWN_MEMBER_ID,
            "v3 missing group": (gw.NONE, [("ghost-member", None, gw.UNKNOWN_MEMBER_ID)]),
            "v1 unknown member": gw.UNKNOWN_MEMBER_ID,
            "v3 unknown members": (gw.NONE, [("ghost-member", None, gw.UNKNOWN_MEMBER_ID), ("", "ghost-instance", gw.UNKNOWN_MEMBER_ID)]),
            "state": "Stable",
        },
    )


def s_leave_by_instance_id(side: Side) -> dict:
    group, names = unique("leave-static"), Names()
    conn = side.conn(group)
    j = conn.join(group, "", version=5, instance_id="pod-0", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
    assert j.error == gw.NONE, j
    names.name(j.member_id, "S")
    assert conn.sync(group, j.generation, j.member_id, [(j.member_id, gw.assignment({"t": [0]}))], version=3, instance_id="pod-0")[0] == gw.NONE
    _, err, members = side.conn(group).call(gw.leave_group_v3, gw.parse_leave_group_v3, group, [("", "pod-0")])
    d = describe(side, group)
    return {
        "leave": (err, [(names(m), i, e) for m, i, e in members]),
        "after": (d.state, len(d.members)),
        "old member heartbeat": conn.heartbeat(group, j.generation, j.member_id, version=3, instance_id="pod-0"),
    }


def test_leave_group_by_instance_id_removes_the_static_member(sides):
    compare(
        sides,
        s_leave_by_instance_id,
        {"leave": (gw.NONE, [("", "pod-0", gw.NONE)]), "after": ("Empty", 0), "old member heartbeat": gw.UNKNOWN_MEMBER_ID},
    )


# --- DeleteGroups ---------------------------------------------------------------------------------


def delete(side: Side, group: str) -> int:
    with gw.GroupConn(side.coordinator(group)) as c:
        return c.call(gw.delete_groups_v0, gw.parse_delete_groups_v0, [group])[1][group]


def s_delete_non_empty(side: Side) -> dict:
    group = unique("delete-live")
    stable_member(side.conn(group), group)
    return {"delete": delete(side, group), "state": describe(side, group).state}


def test_delete_groups_non_empty_group(sides):
    compare(sides, s_delete_non_empty, {"delete": gw.NON_EMPTY_GROUP, "state": "Stable"})


def s_delete_unknown(side: Side) -> dict:
    return {"delete": delete(side, unique("delete-missing"))}


def test_delete_groups_unknown_group(sides):
    compare(sides, s_delete_unknown, {"delete": gw.GROUP_ID_NOT_FOUND})


def s_delete_empty(side: Side) -> dict:
    group, topic = unique("delete-empty"), side.create_topic(1)
    conn = side.conn(group)
    a = stable_member(conn, group, topic)
    assert by_partition(commit(conn, group, a.generation, a.member_id, {(topic, 0): 9})) == {0: gw.NONE}
    assert conn.leave(group, a.member_id) == gw.NONE
    state_before = describe(side, group).state
    err = delete(side, group)
    d = describe(side, group)
    return {
        "before": state_before,
        "delete": err,
        "after": (d.error, d.state),
        "offsets after": by_partition(fetch(conn, group, [(topic, 0)])),
        "delete again": delete(side, group),
    }


def test_delete_groups_empty_group_with_offsets(sides):
    compare(
        sides,
        s_delete_empty,
        {"before": "Empty", "delete": gw.NONE, "after": (gw.NONE, "Dead"), "offsets after": {0: (-1, gw.NONE)}, "delete again": gw.GROUP_ID_NOT_FOUND},
    )


# --- ListOffsets ----------------------------------------------------------------------------------


def s_list_offsets_unknown_topic(side: Side) -> dict:
    conn = side.any_conn()
    missing = f"ref-missing-{uuid.uuid4().hex[:8]}"
    out = {}
    for name, ts in (("latest", kw.LATEST), ("earliest", kw.EARLIEST)):
        corr = conn.next_corr()
        conn.send(kw.list_offsets_v1(corr, missing, [0], ts))
        got_corr, parts = kw.parse_list_offsets_v1(conn.recv_frame())
        assert got_corr == corr
        out[name] = by_partition(parts)
    return out


def test_list_offsets_unknown_topic(sides):
    compare(sides, s_list_offsets_unknown_topic, {"latest": {0: (gw.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}, "earliest": {0: (gw.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}})


# --- static membership (KIP-345) ------------------------------------------------------------------


def s_static_replace(side: Side) -> dict:
    group, names, topic = unique("static"), Names(), side.create_topic(1)
    c1, c2 = side.conn(group), side.conn(group)
    join = dict(version=5, instance_id="pod-0", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocols=[("range", gw.subscription([topic]))])
    s1 = c1.join(group, "", **join)
    names.name(s1.member_id, "S1")
    out = {"first join": join_shape(s1, names)}
    out["first sync"] = c1.sync(group, s1.generation, s1.member_id, [(s1.member_id, gw.assignment({topic: [0]}))], version=3, instance_id="pod-0")[0]
    s2 = c2.join(group, "", **join)
    if s2.member_id != s1.member_id:
        names.name(s2.member_id, "S2")
    out["rejoin"] = join_shape(s2, names)
    err, data = c2.sync(group, s2.generation, s2.member_id, [], version=3, instance_id="pod-0")
    out["new member sync"] = (err, gw.parse_assignment(data) == {topic: [0]})
    out["old member heartbeat"] = c1.heartbeat(group, s1.generation, s1.member_id, version=3, instance_id="pod-0")
    out["old member sync"] = c1.sync(group, s1.generation, s1.member_id, [], version=3, instance_id="pod-0")[0]
    out["old member commit"] = by_partition(c1.call(gw.offset_commit_v7, gw.parse_offset_commit_v7, group, s1.generation, s1.member_id, {(topic, 0): 1}, "pod-0")[1])
    out["new member commit"] = by_partition(c2.call(gw.offset_commit_v7, gw.parse_offset_commit_v7, group, s2.generation, s2.member_id, {(topic, 0): 2}, "pod-0")[1])
    out["new member heartbeat"] = c2.heartbeat(group, s2.generation, s2.member_id, version=3, instance_id="pod-0")
    _, err, left = side.conn(group).call(gw.leave_group_v3, gw.parse_leave_group_v3, group, [(s1.member_id, "pod-0")])
    out["leave with the old member id"] = (err, [(names(m), i, e) for m, i, e in left])
    out["new member heartbeat with another instance id"] = c2.heartbeat(group, s2.generation, s2.member_id, version=3, instance_id="pod-1")
    out["unknown instance with a member id"] = join_shape(
        side.conn(group).join(group, "ghost-member", version=5, instance_id="pod-9", session_timeout_ms=SESSION_MS), names
    )
    d = describe_v4(side, group)
    out["described"] = (d.state, [(names(m), inst) for m, inst, *_ in d.members])
    return out


def test_static_member_rejoin_replaces_the_old_member_which_is_fenced(sides):
    compare(
        sides,
        s_static_replace,
        {
            # A static member joins without MEMBER_ID_REQUIRED.
            "first join": {"error": gw.NONE, "generation": 1, "protocol": "range", "leader": "S1", "member_id": "S1", "members": ["S1"]},
            # Same instance id, empty member id: a new member id replaces the old one in place, no
            # rebalance; below v9 the leader named is the old member id, and no member list.
            "rejoin": {"error": gw.NONE, "generation": 1, "protocol": "range", "leader": "S1", "member_id": "S2", "members": []},
            "new member sync": (gw.NONE, True),
            "old member heartbeat": gw.FENCED_INSTANCE_ID,
            "old member sync": gw.FENCED_INSTANCE_ID,
            "old member commit": {0: gw.FENCED_INSTANCE_ID},
            "new member commit": {0: gw.NONE},
            "new member heartbeat": gw.NONE,
            "leave with the old member id": (gw.NONE, [("S1", "pod-0", gw.FENCED_INSTANCE_ID)]),
            "new member heartbeat with another instance id": gw.UNKNOWN_MEMBER_ID,
            "unknown instance with a member id": {"error": gw.UNKNOWN_MEMBER_ID, "generation": -1, "protocol": "", "leader": "", "member_id": "<unexpected form: ghost-member>", "members": []},
            "described": ("Stable", [("S2", "pod-0")]),
        },
    )


# --- FindCoordinator ------------------------------------------------------------------------------


def s_find_coordinator_key_types(side: Side) -> dict:
    out = {}
    with side.any_conn() as conn:
        for key_type in (0, 2, 7):
            corr = conn.next_corr()
            conn.send(gw.find_coordinator_v1_key_type(corr, unique("fc"), key_type))
            got, err, node, host, port = gw.parse_find_coordinator_v1(conn.recv_frame())
            assert got == corr
            out[key_type] = (err, node >= 0, bool(host), port > 0)
    return out


def test_find_coordinator_key_types(sides):
    # SHARE (2) needs v6; 7 is no key type.
    compare(sides, s_find_coordinator_key_types, {0: (gw.NONE, True, True, True), 2: (gw.INVALID_REQUEST, False, False, False), 7: (gw.INVALID_REQUEST, False, False, False)})
