"""Raw-protocol requests of the KIP-848 group APIs (ConsumerGroupHeartbeat, ConsumerGroupDescribe),
of OffsetCommit v9 (the first a consumer-protocol member may commit with), of ListGroups v5 and of
JoinGroup v7 (the first version whose answer names the protocol type), for
the tests that compare corral's group migration with Apache Kafka's
(test_kafka_reference_migration.py).

Flexible versions only: request header v2 (header v1, then an empty tagged-field section),
response header v1 (correlation id, then tagged fields); compact strings, bytes and arrays (length
+ 1 as an unsigned varint, 0 for null); every struct ends with a tagged-field section, which the
parsers read and skip. Written from Kafka 4.4's message definitions (common/message/*.json in
kafka-clients-4.4.0.jar). Every builder returns a framed request; every `parse_*` takes a
response frame (without its size prefix) and returns the correlation id first.

Also the ConsumerProtocol payloads of a classic member that owns partitions (subscription v1)
and a parser of an assignment that keeps its version and user data.
"""

from __future__ import annotations

from dataclasses import dataclass

import kafkawire as kw
from kafkawire import NO_TAGS, Reader, array, compact_array, compact_bytes, compact_string, i8, i16, i32, i64, nbytes, string

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
LIST_GROUPS = 16
JOIN_GROUP = 11
OFFSET_COMMIT = 8

# ConsumerGroupDescribe v1's MemberType (KIP-1099).
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1

CLIENT_ID = "corral-e2e-raw"


# --- flexible-version primitives ------------------------------------------------------------------


def flexible_request(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    return kw.flexible_request(api_key, version, corr, body, client_id=CLIENT_ID)


class FlexReader(Reader):
    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take("B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            assert shift < 35, "unsigned varint longer than 5 bytes"

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def compact_len(self) -> int:
        """An array's length; -1 for null."""
        return self.uvarint() - 1

    def int32s(self) -> list[int]:
        return [self.take("i") for _ in range(max(self.compact_len(), 0))]

    def strings(self) -> list[str]:
        return [self.compact_string() for _ in range(max(self.compact_len(), 0))]

    def uuid(self) -> bytes:
        b = self.data[self.pos : self.pos + 16]
        assert len(b) == 16, "truncated uuid"
        self.pos += 16
        return b

    def tags(self) -> None:
        """Skips a tagged-field section."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def header(self) -> int:
        """Response header v1: the correlation id."""
        corr = self.take("i")
        self.tags()
        return corr


# --- ConsumerGroupHeartbeat v0 --------------------------------------------------------------------


def consumer_group_heartbeat_v0(
    corr: int,
    group: str,
    member_id: str,
    member_epoch: int,
    *,
    instance_id: str | None = None,
    rack_id: str | None = None,
    rebalance_timeout_ms: int = -1,
    subscribed_topics: list[str] | None = None,
    server_assignor: str | None = None,
    owned: list[tuple[bytes, list[int]]] | None = None,
) -> bytes:
    """`owned` is the TopicPartitions field: [(topic id, partitions)], None for null (unchanged)."""
    body = compact_string(group) + compact_string(member_id) + i32(member_epoch)
    body += compact_string(instance_id) + compact_string(rack_id) + i32(rebalance_timeout_ms)
    body += compact_array(None if subscribed_topics is None else [compact_string(t) for t in subscribed_topics])
    body += compact_string(server_assignor)
    if owned is not None:
        owned_items = []
        for topic_id, parts in owned:
            assert len(topic_id) == 16
            owned_items.append(topic_id + compact_array([i32(p) for p in parts]) + NO_TAGS)
        body += compact_array(owned_items)
    else:
        body += compact_array(None)
    return flexible_request(CONSUMER_GROUP_HEARTBEAT, 0, corr, body + NO_TAGS)


@dataclass
class HeartbeatResponse:
    corr: int
    error: int
    message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[tuple[bytes, list[int]]] | None  # [(topic id, partitions)]; None: not sent


def parse_consumer_group_heartbeat(frame: bytes) -> HeartbeatResponse:
    r = FlexReader(frame)
    corr = r.header()
    r.take("i")  # throttle
    error, message, member_id = r.take("h"), r.compact_string(), r.compact_string()
    epoch, interval = r.take("i"), r.take("i")
    assignment = None
    # A nullable struct: -1 null, 1 present.
    marker = r.take("b")
    assert marker in (-1, 1), f"nullable struct marker {marker}"
    if marker == 1:
        assignment = []
        for _ in range(max(r.compact_len(), 0)):
            topic_id, parts = r.uuid(), r.int32s()
            r.tags()
            assignment.append((topic_id, parts))
        r.tags()
    r.tags()
    assert r.done(), f"{len(frame) - r.pos} bytes after a ConsumerGroupHeartbeat v0 body"
    return HeartbeatResponse(corr, error, message, member_id, epoch, interval, assignment)


# --- ConsumerGroupDescribe v0/v1 ------------------------------------------------------------------


def consumer_group_describe(corr: int, groups: list[str], include_authorized_operations: bool = False, version: int = 1) -> bytes:
    body = compact_array([compact_string(g) for g in groups]) + i8(1 if include_authorized_operations else 0) + NO_TAGS
    return flexible_request(CONSUMER_GROUP_DESCRIBE, version, corr, body)


@dataclass
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[tuple[bytes, str, list[int]]]  # [(topic id, topic name, partitions)]
    target_assignment: list[tuple[bytes, str, list[int]]]
    member_type: int  # v1; -1 (the default) in v0


@dataclass
class DescribedConsumerGroup:
    error: int
    message: str | None
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[DescribedMember]
    authorized_operations: int


def _described_assignment(r: FlexReader) -> list[tuple[bytes, str, list[int]]]:
    out = []
    for _ in range(max(r.compact_len(), 0)):
        topic_id, name, parts = r.uuid(), r.compact_string(), r.int32s()
        r.tags()
        out.append((topic_id, name, parts))
    r.tags()
    return out


def parse_consumer_group_describe(frame: bytes, version: int = 1) -> tuple[int, list[DescribedConsumerGroup]]:
    r = FlexReader(frame)
    corr = r.header()
    r.take("i")  # throttle
    groups = []
    for _ in range(max(r.compact_len(), 0)):
        error, message, gid, state = r.take("h"), r.compact_string(), r.compact_string(), r.compact_string()
        group_epoch, assignment_epoch, assignor = r.take("i"), r.take("i"), r.compact_string()
        members = []
        for _ in range(max(r.compact_len(), 0)):
            mid, inst, rack, epoch = r.compact_string(), r.compact_string(), r.compact_string(), r.take("i")
            client, host, topics, regex = r.compact_string(), r.compact_string(), r.strings(), r.compact_string()
            assignment, target = _described_assignment(r), _described_assignment(r)
            member_type = r.take("b") if version >= 1 else -1
            r.tags()
            members.append(DescribedMember(mid, inst, rack, epoch, client, host, topics, regex, assignment, target, member_type))
        authorized = r.take("i")
        r.tags()
        groups.append(DescribedConsumerGroup(error, message, gid, state, group_epoch, assignment_epoch, assignor, members, authorized))
    r.tags()
    assert r.done(), f"{len(frame) - r.pos} bytes after a ConsumerGroupDescribe v{version} body"
    return corr, groups


# --- ListGroups v5 --------------------------------------------------------------------------------


def list_groups_v5(corr: int, states: list[str] | None = None, types: list[str] | None = None) -> bytes:
    """Empty filters list every group with its state and type."""
    body = compact_array([compact_string(s) for s in states or []]) + compact_array([compact_string(t) for t in types or []])
    return flexible_request(LIST_GROUPS, 5, corr, body + NO_TAGS)


@dataclass
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


def parse_list_groups_v5(frame: bytes) -> tuple[int, int, list[ListedGroup]]:
    """(correlation id, error, groups)."""
    r = FlexReader(frame)
    corr = r.header()
    r.take("i")  # throttle
    error = r.take("h")
    groups = []
    for _ in range(max(r.compact_len(), 0)):
        groups.append(ListedGroup(r.compact_string(), r.compact_string(), r.compact_string(), r.compact_string()))
        r.tags()
    r.tags()
    assert r.done(), f"{len(frame) - r.pos} bytes after a ListGroups v5 body"
    return corr, error, groups


# --- JoinGroup v7 ---------------------------------------------------------------------------------


def join_group_v7(
    corr: int,
    group: str,
    member_id: str,
    *,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: list[tuple[str, bytes]],
    protocol_type: str = "consumer",
    instance_id: str | None = None,
) -> bytes:
    """JoinGroup v7: flexible, and the first version whose answer names the protocol type."""
    body = compact_string(group) + i32(session_timeout_ms) + i32(rebalance_timeout_ms) + compact_string(member_id)
    body += compact_string(instance_id) + compact_string(protocol_type)
    body += compact_array([compact_string(n) + compact_bytes(m) + NO_TAGS for n, m in protocols])
    return flexible_request(JOIN_GROUP, 7, corr, body + NO_TAGS)


@dataclass
class JoinResponseV7:
    corr: int
    error: int
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # member id, instance id, metadata


def parse_join_group_v7(frame: bytes) -> JoinResponseV7:
    r = FlexReader(frame)
    corr = r.header()
    r.take("i")  # throttle
    error, generation = r.take("h"), r.take("i")
    protocol_type, protocol, leader, member_id = r.compact_string(), r.compact_string(), r.compact_string(), r.compact_string()
    members = []
    for _ in range(max(r.compact_len(), 0)):
        members.append((r.compact_string(), r.compact_string(), r.compact_bytes()))
        r.tags()
    r.tags()
    assert r.done(), f"{len(frame) - r.pos} bytes after a JoinGroup v7 body"
    return JoinResponseV7(corr, error, generation, protocol_type, protocol, leader, member_id, members)


# --- OffsetCommit v9 --------------------------------------------------------------------------------


def offset_commit_v9(corr: int, group: str, member_epoch: int, member_id: str, offsets: dict[tuple[str, int], int]) -> bytes:
    """OffsetCommit v9: a member's epoch in GenerationIdOrMemberEpoch; topics by name; no leader
    epoch (-1) and empty metadata."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    topics = [
        compact_string(t) + compact_array([i32(p) + i64(o) + i32(-1) + compact_string("") + NO_TAGS for p, o in parts]) + NO_TAGS
        for t, parts in by_topic.items()
    ]
    body = compact_string(group) + i32(member_epoch) + compact_string(member_id) + compact_string(None) + compact_array(topics)
    return flexible_request(OFFSET_COMMIT, 9, corr, body + NO_TAGS)


def parse_offset_commit_v9(frame: bytes) -> tuple[int, dict[tuple[str, int], int]]:
    """The correlation id and each partition's error code."""
    r = FlexReader(frame)
    corr = r.header()
    r.take("i")  # throttle
    codes = {}
    for _ in range(max(r.compact_len(), 0)):
        topic = r.compact_string()
        for _ in range(max(r.compact_len(), 0)):
            partition, error = r.take("i"), r.take("h")
            r.tags()
            codes[(topic, partition)] = error
        r.tags()
    r.tags()
    assert r.done(), f"{len(frame) - r.pos} bytes after an OffsetCommit v9 body"
    return corr, codes


# --- ConsumerProtocol payloads of a classic member --------------------------------------------------


def subscription_v1(topics: list[str], owned: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolSubscription v1: v0 (topics, null user data) and the owned partitions."""
    body = i16(1) + array([string(t) for t in topics]) + nbytes(None)
    return body + array([string(t) + array([i32(p) for p in ps]) for t, ps in owned.items()])


def parse_assignment_full(data: bytes | None) -> tuple[int, dict[str, list[int]], bytes | None] | None:
    """ConsumerProtocolAssignment: (version, {topic: partitions}, user data); None for no bytes.
    Versions 1-3 are laid out as v0."""
    if not data:
        return None
    r = Reader(data)
    version = r.take("h")
    parts = {}
    for _ in range(r.take("i")):
        t = r.string()
        parts[t] = [r.take("i") for _ in range(r.take("i"))]
    user_data = r.nbytes()
    assert r.done(), f"{len(data) - r.pos} bytes after a ConsumerProtocolAssignment"
    return version, parts, user_data
