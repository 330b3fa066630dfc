"""Raw-protocol requests of the group APIs, for tests that need exact error codes or ids that no
client library exposes (generations, member ids of other members).

Written from the Kafka protocol specification on top of kafkawire's primitives; non-flexible
versions only (request header v1, response header v0). Every `*_request` returns a framed request,
every `parse_*` takes a response frame (without its size prefix) and returns the correlation id
first.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkawire import Conn, Reader, array, i8, i16, i32, i64, nbytes, request, string

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DELETE_GROUPS = 42

# Error codes (Kafka's Errors.java).
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
# Used by test_kafka_reference.py.
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
INVALID_REQUEST = 42
GROUP_SUBSCRIBED_TO_TOPIC = 86
OFFSET_DELETE = 47


# --- consumer protocol payloads -----------------------------------------------------------------


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0."""
    return i16(0) + array([string(t) for t in topics]) + nbytes(b"")


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    return i16(0) + array([string(t) + array([i32(p) for p in ps]) for t, ps in parts.items()]) + nbytes(b"")


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}
    r = Reader(data)
    r.take("h")
    out = {}
    for _ in range(r.take("i")):
        t = r.string()
        out[t] = [r.take("i") for _ in range(r.take("i"))]
    return out


# --- requests -----------------------------------------------------------------------------------


def find_coordinator_v1(corr: int, key: str) -> bytes:
    return request(FIND_COORDINATOR, 1, corr, string(key) + i8(0))


def join_group(
    corr: int,
    group: str,
    member_id: str = "",
    *,
    version: int = 1,
    session_timeout_ms: int = 10000,
    rebalance_timeout_ms: int = 10000,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    instance_id: str | None = None,
) -> bytes:
    """JoinGroup v1-v5."""
    assert 1 <= version <= 5
    if protocols is None:
        protocols = [("range", subscription(["t"]))]
    body = string(group) + i32(session_timeout_ms) + i32(rebalance_timeout_ms) + string(member_id)
    if version >= 5:
        body += string(instance_id)
    body += string(protocol_type) + array([string(n) + nbytes(m) for n, m in protocols])
    return request(JOIN_GROUP, version, corr, body)


@dataclass
class JoinResponse:
    corr: int
    error: int
    generation: int
    protocol: str | None
    leader: str | None
    member_id: str | None
    members: list[tuple[str, bytes]]


def parse_join_group(frame: bytes, version: int = 1) -> JoinResponse:
    r = Reader(frame)
    corr = r.take("i")
    if version >= 2:
        r.take("i")  # throttle
    error, generation = r.take("h"), r.take("i")
    protocol, leader, member_id = r.string(), r.string(), r.string()
    members = []
    for _ in range(r.take("i")):
        mid = r.string()
        if version >= 5:
            r.string()
        members.append((mid, r.nbytes()))
    assert r.done(), f"{len(frame) - r.pos} bytes after a JoinGroup v{version} body"
    return JoinResponse(corr, error, generation, protocol, leader, member_id, members)


def sync_group(
    corr: int, group: str, generation: int, member_id: str, assignments: list[tuple[str, bytes]], *, version: int = 1, instance_id: str | None = None
) -> bytes:
    """SyncGroup v0-v3."""
    assert 0 <= version <= 3
    body = string(group) + i32(generation) + string(member_id)
    if version >= 3:
        body += string(instance_id)
    body += array([string(m) + nbytes(a) for m, a in assignments])
    return request(SYNC_GROUP, version, corr, body)


def parse_sync_group(frame: bytes, version: int = 1) -> tuple[int, int, bytes | None]:
    r = Reader(frame)
    corr = r.take("i")
    if version >= 1:
        r.take("i")
    error = r.take("h")
    data = r.nbytes()
    assert r.done()
    return corr, error, data


def heartbeat(corr: int, group: str, generation: int, member_id: str, *, version: int = 1, instance_id: str | None = None) -> bytes:
    """Heartbeat v0-v3."""
    assert 0 <= version <= 3
    body = string(group) + i32(generation) + string(member_id)
    if version >= 3:
        body += string(instance_id)
    return request(HEARTBEAT, version, corr, body)


def parse_heartbeat(frame: bytes, version: int = 1) -> tuple[int, int]:
    r = Reader(frame)
    corr = r.take("i")
    if version >= 1:
        r.take("i")
    error = r.take("h")
    assert r.done()
    return corr, error


def leave_group_v1(corr: int, group: str, member_id: str) -> bytes:
    return request(LEAVE_GROUP, 1, corr, string(group) + string(member_id))


def parse_leave_group_v1(frame: bytes) -> tuple[int, int]:
    return parse_heartbeat(frame, 1)


def describe_groups_v0(corr: int, groups: list[str]) -> bytes:
    return request(DESCRIBE_GROUPS, 0, corr, array([string(g) for g in groups]))


@dataclass
class GroupDescription:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str, str, bytes, bytes]]  # member id, client id, host, metadata, assignment


def parse_describe_groups_v0(frame: bytes) -> tuple[int, list[GroupDescription]]:
    r = Reader(frame)
    corr = r.take("i")
    groups = []
    for _ in range(r.take("i")):
        error, gid, state, ptype, proto = r.take("h"), r.string(), r.string(), r.string(), r.string()
        members = [(r.string(), r.string(), r.string(), r.nbytes(), r.nbytes()) for _ in range(r.take("i"))]
        groups.append(GroupDescription(error, gid, state, ptype, proto, members))
    assert r.done()
    return corr, groups


def list_groups_v0(corr: int) -> bytes:
    return request(LIST_GROUPS, 0, corr, b"")


def parse_list_groups_v0(frame: bytes) -> tuple[int, int, list[tuple[str, str]]]:
    r = Reader(frame)
    corr, error = r.take("i"), r.take("h")
    groups = [(r.string(), r.string()) for _ in range(r.take("i"))]
    assert r.done()
    return corr, error, groups


def offset_commit_v2(corr: int, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int]) -> bytes:
    topics: dict[str, list[bytes]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(i32(p) + i64(o) + string(""))
    body = string(group) + i32(generation) + string(member_id) + i64(-1)
    body += array([string(t) + array(ps) for t, ps in topics.items()])
    return request(OFFSET_COMMIT, 2, corr, body)


def parse_offset_commit_v2(frame: bytes) -> tuple[int, dict[tuple[str, int], int]]:
    r = Reader(frame)
    corr = r.take("i")
    out = {}
    for _ in range(r.take("i")):
        t = r.string()
        for _ in range(r.take("i")):
            p, err = r.take("i"), r.take("h")
            out[(t, p)] = err
    assert r.done()
    return corr, out


def offset_commit_v0(corr: int, group: str, offsets: dict[tuple[str, int], int], metadata: str | None = "") -> bytes:
    """OffsetCommit v0 (removed in Kafka 4): `group_id [topic [partition offset metadata]]`."""
    topics: dict[str, list[bytes]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(i32(p) + i64(o) + string(metadata))
    return request(OFFSET_COMMIT, 0, corr, string(group) + array([string(t) + array(ps) for t, ps in topics.items()]))


def offset_commit_v1(
    corr: int, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int], commit_timestamp: int = -1
) -> bytes:
    """OffsetCommit v1 (removed in Kafka 4): v0 with `generation_id member_id` after the group and
    a `commit_timestamp` after each offset (-1: the time it arrives)."""
    topics: dict[str, list[bytes]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(i32(p) + i64(o) + i64(commit_timestamp) + string(""))
    body = string(group) + i32(generation) + string(member_id)
    return request(OFFSET_COMMIT, 1, corr, body + array([string(t) + array(ps) for t, ps in topics.items()]))


# OffsetCommit v0 and v1 answer in v2's layout.
parse_offset_commit_v0 = parse_offset_commit_v1 = parse_offset_commit_v2


def offset_fetch_v1(corr: int, group: str, parts: list[tuple[str, int]], version: int = 1) -> bytes:
    """OffsetFetch v1, or v0 (removed in Kafka 4), which is laid out the same."""
    topics: dict[str, list[bytes]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(i32(p))
    return request(OFFSET_FETCH, version, corr, string(group) + array([string(t) + array(ps) for t, ps in topics.items()]))


def parse_offset_fetch_v1(frame: bytes) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """(correlation id, {(topic, partition): (offset, error)})."""
    r = Reader(frame)
    corr = r.take("i")
    out = {}
    for _ in range(r.take("i")):
        t = r.string()
        for _ in range(r.take("i")):
            p, o = r.take("i"), r.take("q")
            r.string()  # metadata
            err = r.take("h")
            out[(t, p)] = (o, err)
    assert r.done()
    return corr, out


def delete_groups_v0(corr: int, groups: list[str]) -> bytes:
    return request(DELETE_GROUPS, 0, corr, array([string(g) for g in groups]))


def parse_delete_groups_v0(frame: bytes) -> tuple[int, dict[str, int]]:
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle
    out = {}
    for _ in range(r.take("i")):
        g = r.string()
        out[g] = r.take("h")
    assert r.done()
    return corr, out


def parse_find_coordinator_v1(frame: bytes) -> tuple[int, int, int, str, int]:
    """(correlation id, error, node id, host, port)."""
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")
    error = r.take("h")
    r.string()  # error message
    node, host, port = r.take("i"), r.string(), r.take("i")
    assert r.done()
    return corr, error, node, host, port


# --- a connection that checks correlation ids ---------------------------------------------------


class GroupConn(Conn):
    """A raw connection with one call per request; every answer must carry the request's id."""

    def __init__(self, bootstrap: str, timeout: float = 30.0):
        super().__init__(bootstrap, timeout)
        self.corr = 0

    def __enter__(self) -> "GroupConn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def call(self, build, parse, *args, **kwargs):
        corr = self.next_corr()
        self.send(build(corr, *args, **kwargs))
        frame = self.recv_frame()
        assert frame is not None, f"the server closed the connection instead of answering {build.__name__}"
        result = parse(frame)
        got = result.corr if hasattr(result, "corr") else result[0]
        assert got == corr, f"{build.__name__}: answer carries correlation id {got}, expected {corr}"
        return result

    def join(self, group: str, member_id: str = "", version: int = 1, **kwargs) -> JoinResponse:
        return self.call(join_group, lambda f: parse_join_group(f, version), group, member_id, version=version, **kwargs)

    def sync(self, group: str, generation: int, member_id: str, assignments, version: int = 1, **kwargs) -> tuple[int, bytes | None]:
        _, err, data = self.call(sync_group, lambda f: parse_sync_group(f, version), group, generation, member_id, assignments, version=version, **kwargs)
        return err, data

    def heartbeat(self, group: str, generation: int, member_id: str, version: int = 1, **kwargs) -> int:
        return self.call(heartbeat, lambda f: parse_heartbeat(f, version), group, generation, member_id, version=version, **kwargs)[1]

    def leave(self, group: str, member_id: str) -> int:
        return self.call(leave_group_v1, parse_leave_group_v1, group, member_id)[1]

    def describe(self, group: str) -> GroupDescription:
        _, groups = self.call(describe_groups_v0, parse_describe_groups_v0, [group])
        assert len(groups) == 1 and groups[0].group_id == group
        return groups[0]


# --- more versions (test_kafka_reference.py) ----------------------------------------------------


def leave_group_v3(corr: int, group: str, members: list[tuple[str, str | None]]) -> bytes:
    """LeaveGroup v3 (batch, KIP-345): members are (member id, group instance id); an empty member
    id with an instance id is the admin clients' removal by instance id."""
    return request(LEAVE_GROUP, 3, corr, string(group) + array([string(m) + string(i) for m, i in members]))


def parse_leave_group_v3(frame: bytes) -> tuple[int, int, list[tuple[str, str | None, int]]]:
    """(correlation id, top-level error, [(member id, instance id, error)])."""
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle
    error = r.take("h")
    members = [(r.string(), r.string(), r.take("h")) for _ in range(r.take("i"))]
    assert r.done()
    return corr, error, members


def describe_groups_v4(corr: int, groups: list[str], include_authorized_operations: bool = False) -> bytes:
    """DescribeGroups v4: members carry their group instance id; v3+ can ask for the authorized
    operations."""
    return request(DESCRIBE_GROUPS, 4, corr, array([string(g) for g in groups]) + i8(1 if include_authorized_operations else 0))


@dataclass
class GroupDescriptionV4:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str | None, str, str, bytes, bytes]]  # member id, instance id, client id, host, metadata, assignment
    authorized_operations: int


def parse_describe_groups_v4(frame: bytes) -> tuple[int, list[GroupDescriptionV4]]:
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle
    groups = []
    for _ in range(r.take("i")):
        error, gid, state, ptype, proto = r.take("h"), r.string(), r.string(), r.string(), r.string()
        members = [(r.string(), r.string(), r.string(), r.string(), r.nbytes(), r.nbytes()) for _ in range(r.take("i"))]
        groups.append(GroupDescriptionV4(error, gid, state, ptype, proto, members, r.take("i")))
    assert r.done()
    return corr, groups


def offset_commit_v7(
    corr: int,
    group: str,
    generation: int,
    member_id: str,
    offsets: dict[tuple[str, int], int],
    instance_id: str | None = None,
    metadata: dict[tuple[str, int], str | None] | None = None,
) -> bytes:
    """OffsetCommit v7 (the last non-flexible version): group instance id, per-partition leader
    epoch (-1) and metadata (`metadata` by partition, "" where not given)."""
    metadata = metadata or {}
    topics: dict[str, list[bytes]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(i32(p) + i64(o) + i32(-1) + string(metadata.get((t, p), "")))
    body = string(group) + i32(generation) + string(member_id) + string(instance_id)
    body += array([string(t) + array(ps) for t, ps in topics.items()])
    return request(OFFSET_COMMIT, 7, corr, body)


def parse_offset_commit_v7(frame: bytes) -> tuple[int, dict[tuple[str, int], int]]:
    r = Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle
    out = {}
    for _ in range(r.take("i")):
        t = r.string()
        for _ in range(r.take("i")):
            p, err = r.take("i"), r.take("h")
            out[(t, p)] = err
    assert r.done()
    return corr, out


def find_coordinator_v1_key_type(corr: int, key: str, key_type: int) -> bytes:
    """FindCoordinator v1 with any key type (0 group, 1 transaction, 2 share from v6)."""
    return request(FIND_COORDINATOR, 1, corr, string(key) + i8(key_type))


def offset_delete_v0(corr: int, group: str, parts: list[tuple[str, int]]) -> bytes:
    """OffsetDelete v0 (KIP-496)."""
    topics: dict[str, list[bytes]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(i32(p))
    return request(OFFSET_DELETE, 0, corr, string(group) + array([string(t) + array(ps) for t, ps in topics.items()]))


def parse_offset_delete_v0(frame: bytes) -> tuple[int, int, dict[tuple[str, int], int]]:
    """(correlation id, top-level error, {(topic, partition): error})."""
    r = Reader(frame)
    corr, error = r.take("i"), r.take("h")
    r.take("i")  # throttle
    out = {}
    for _ in range(r.take("i")):
        t = r.string()
        for _ in range(r.take("i")):
            p, err = r.take("i"), r.take("h")
            out[(t, p)] = err
    assert r.done()
    return corr, error, out
