"""The same requests to Kafka and to corral: online migration of a group between the classic
protocol and the consumer protocol (KIP-848), with Apache Kafka 4.4 as the reference.

corral follows Kafka's `group.consumer.migration.policy` (default `bidirectional`): a
ConsumerGroupHeartbeat joining a live classic group of protocol type "consumer" converts it into a
consumer group whose classic members keep JoinGroup/SyncGroup/Heartbeat, and the group turns
classic again when its last consumer-protocol member leaves. Every case sends one sequence of raw
requests (kip848wire.py for the flexible KIP-848 APIs, groupwire.py for the classic ones) to a
real Kafka cluster and to a corral server and asserts that both answer alike, as
test_kafka_reference.py does (whose fixtures and helpers this module uses).

Random member ids are replaced by the names the scenario gave them and generations/epochs are
given relative to the classic generation G the group had when it was converted. Kafka's own
choices that depend on the iteration order of its hash maps are compared by their shape: which of
the two classic members keeps two partitions when a third member arrives (called K below; the
one that gives one up is R), which of its partitions a member keeps, and which member a
downgraded group's first join makes leader.

Both compute a consumer group's new target assignment at most once a second
(group.consumer.assignment.interval.ms); within that interval a new member joins at the current
assignment epoch and the group is "Assigning". test_classic_join_within_the_assignment_interval
compares that; elsewhere a case that adds a member to a consumer group which had an assignment
waits past the interval first, so that the answers do not depend on timing.

The classic members use session and rebalance timeouts of 30 s, long enough that none is fenced
while a case runs.
"""

from __future__ import annotations

import re
import struct
import time
from dataclasses import dataclass

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

import clients
import groupwire as gw
import kip848wire as k8
import test_kafka_reference as reference
from test_kafka_reference import UUID, Names, Side, assert_both_serve, barrier, compare, recv_join, send_join, unique, wait_state

# test_kafka_reference's fixture (Kafka, then a new corral); pytest finds it by this name.
sides = reference.sides

SESSION_MS = 30000
REBALANCE_MS = 30000
PARTITIONS = 4
ALL = list(range(PARTITIONS))
# Both servers are configured with it (apache_kafka.CORRAL_GROUP_CONFIG).
HEARTBEAT_INTERVAL_MS = 1000
UNSUPPORTED_VERSION = 35
# Both compute a consumer group's target assignment at most this often
# (group.consumer.assignment.interval.ms, default 1000).
ASSIGNMENT_INTERVAL_S = 1.0

VERSIONS_USED = {
    (k8.CONSUMER_GROUP_HEARTBEAT, 0),
    (k8.CONSUMER_GROUP_DESCRIBE, 1),
    (k8.LIST_GROUPS, 5),
    (k8.JOIN_GROUP, 7),
    (gw.JOIN_GROUP, 5),
    (gw.SYNC_GROUP, 1),
    (gw.HEARTBEAT, 1),
    (gw.OFFSET_COMMIT, 2),
    (gw.OFFSET_COMMIT, 7),
    (gw.DESCRIBE_GROUPS, 0),
    (gw.DESCRIBE_GROUPS, 4),
}


def test_both_serve_the_versions_used(sides):
    assert_both_serve(sides, VERSIONS_USED)


# --- helpers ----------------------------------------------------------------------------------------


def topic_id(side: Side, topic: str) -> bytes:
    """The topic's id (16 bytes) as the server's Metadata gives it."""
    admin = AdminClient({"bootstrap.servers": side.bootstrap, "logger": clients.RDKAFKA_LOG})
    u = admin.describe_topics(TopicCollection([topic]), request_timeout=30)[topic].result(30).topic_id
    return struct.pack(">QQ", u.get_most_significant_bits() & (2**64 - 1), u.get_least_significant_bits() & (2**64 - 1))


def past_assignment_interval() -> None:
    """Waits until Kafka would compute a new target assignment at once, so that an answer does not
    depend on when its last one was (test_classic_join_within_the_assignment_interval shows the
    answers within the interval)."""
    time.sleep(ASSIGNMENT_INTERVAL_S + 0.3)


def id_form(member_id: str | None) -> str:
    """The form of a server-made member id: Kafka's Uuid (22 characters of URL-safe base64) for
    the members a consumer group makes, `<client id>-<uuid>` for a classic group's; "uuid" for
    the 36-character form of a UUID."""
    if member_id is None or member_id == "":
        return repr(member_id)
    if re.fullmatch(r"[A-Za-z0-9_-]{22}", member_id):
        return "base64 uuid"
    if re.fullmatch(UUID, member_id):
        return "uuid"
    m = re.fullmatch(rf"(.*)-{UUID}", member_id)
    return f"{m.group(1)}-<uuid>" if m else f"<unexpected form: {member_id}>"


def protocols(topic: str, owned: dict[str, list[int]], names: tuple[str, ...] = ("range",)) -> list[tuple[str, bytes]]:
    return [(n, k8.subscription_v1([topic], owned)) for n in names]


def heartbeat(conn: gw.GroupConn, group: str, member_id: str, epoch: int, **kwargs) -> k8.HeartbeatResponse:
    return conn.call(k8.consumer_group_heartbeat_v0, k8.parse_consumer_group_heartbeat, group, member_id, epoch, **kwargs)


def consumer_describe(side: Side, addr: str, group: str) -> k8.DescribedConsumerGroup:
    """ConsumerGroupDescribe v1 of `group`, after a barrier (Kafka answers from committed state)."""
    barrier(side, group)
    with gw.GroupConn(addr) as c:
        _, groups = c.call(k8.consumer_group_describe, k8.parse_consumer_group_describe, [group])
    assert len(groups) == 1 and groups[0].group_id == group, groups
    return groups[0]


def listed(side: Side, addr: str, group: str) -> tuple | None:
    """The group's ListGroups v5 entry at its coordinator: (protocol type, state, type)."""
    barrier(side, group)
    with gw.GroupConn(addr) as c:
        _, err, groups = c.call(k8.list_groups_v5, k8.parse_list_groups_v5)
    assert err == gw.NONE
    entries = [(g.protocol_type, g.state, g.group_type) for g in groups if g.group_id == group]
    return entries[0] if len(entries) == 1 else entries or None


def classic_describe(side: Side, addr: str, group: str, version: int) -> gw.GroupDescription | gw.GroupDescriptionV4:
    """DescribeGroups v0 or v4 at the coordinator found before the conversion (Side.coordinator
    needs a DescribeGroups without error, which a consumer group may not give)."""
    barrier(side, group)
    with gw.GroupConn(addr) as c:
        if version == 0:
            return c.describe(group)
        _, groups = c.call(gw.describe_groups_v4, gw.parse_describe_groups_v4, [group], False)
    assert len(groups) == 1 and groups[0].group_id == group
    return groups[0]


@dataclass
class Topic:
    name: str
    tid: bytes


def parts_of(entries, t: Topic) -> dict[str, list[int]]:
    """{topic: sorted partitions} from [(topic id, partitions)] or [(topic id, name, partitions)],
    the scenario's topic (each server has its own name and id for it) named "T"."""
    out: dict[str, list[int]] = {}
    for entry in entries or []:
        name = "T" if entry[0] == t.tid else f"<unknown topic id {entry[0].hex()}>"
        if len(entry) == 3 and entry[1] != t.name:
            name += f" named {entry[1]}"
        out.setdefault(name, []).extend(entry[-1])
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def flat(parts: dict[str, list[int]]) -> list[int]:
    return sorted(p for ps in parts.values() for p in ps)


def sync_assignment(conn: gw.GroupConn, group: str, generation: int, member_id: str, topic: str) -> tuple:
    """A follower's SyncGroup v1: (error, (assignment version, partitions of T, user data))."""
    err, data = conn.sync(group, generation, member_id, [])
    full = k8.parse_assignment_full(data)
    if full is not None:
        version, parts, user_data = full
        full = (version, {("T" if t == topic else t): ps for t, ps in parts.items()}, user_data)
    return err, full


def heartbeat_answer(h: k8.HeartbeatResponse, names: Names, t: Topic, generation: int | None, exact: bool = True, label: str = "G") -> dict:
    """A ConsumerGroupHeartbeat answer; its epoch relative to `generation` where one is given; the
    assigned partitions, or with `exact=False` only how many (which ones is the assignor's choice)."""
    assignment = None if h.assignment is None else parts_of(h.assignment, t)
    if assignment is not None and not exact:
        assignment = {name: len(ps) for name, ps in assignment.items()}
    return {
        "error": h.error,
        "message": h.message is not None,
        "member id": names(h.member_id),
        "epoch": h.member_epoch if generation is None else relative(h.member_epoch, generation, label),
        "heartbeat interval": h.heartbeat_interval_ms,
        "assignment": assignment,
    }


def relative(epoch: int, base: int, label: str = "G") -> str:
    """An epoch or generation relative to the scenario's base one; 0 and below as they are."""
    return f"{label}{epoch - base:+d}" if epoch > 0 else str(epoch)


# --- a classic group of two, then upgraded ----------------------------------------------------------


@dataclass
class ClassicPair:
    group: str
    topic: str
    t: Topic
    addr: str
    names: Names
    ca: gw.GroupConn
    cb: gw.GroupConn
    a: str
    b: str
    generation: int


def classic_pair(side: Side, prefix: str) -> ClassicPair:
    """A classic group of two raw members, Stable: A joins and syncs alone (generation 1), B joins
    (A re-joins, generation 2) and the leader A gives A partitions 0,1 and B 2,3 of a new
    4-partition topic."""
    group, names, topic = unique(prefix), Names(), side.create_topic(PARTITIONS)
    side.wait_assignable(topic, group)
    tid = topic_id(side, topic)
    addr = side.coordinator(group)
    ca, cb = side.conn(group), side.conn(group)
    join = {"version": 5, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS}
    first = ca.join(group, "", protocols=protocols(topic, {}), **join)
    assert first.error == gw.MEMBER_ID_REQUIRED, first
    a = first.member_id
    names.name(a, "A")
    ja = ca.join(group, a, protocols=protocols(topic, {}), **join)
    assert ja.error == gw.NONE and ja.generation == 1 and ja.leader == a, ja
    assert ca.sync(group, 1, a, [(a, gw.assignment({topic: ALL}))])[0] == gw.NONE
    first = cb.join(group, "", protocols=protocols(topic, {}), **join)
    assert first.error == gw.MEMBER_ID_REQUIRED, first
    b = first.member_id
    names.name(b, "B")
    pending_b = send_join(cb, group, b, protocols=protocols(topic, {}), **join)
    wait_state(side, group, "PreparingRebalance")
    pending_a = send_join(ca, group, a, protocols=protocols(topic, {topic: ALL}), **join)
    ja, jb = recv_join(ca, pending_a), recv_join(cb, pending_b)
    assert ja.error == jb.error == gw.NONE and ja.generation == jb.generation == 2 and ja.leader == a, (ja, jb)
    assignments = [(a, gw.assignment({topic: [0, 1]})), (b, gw.assignment({topic: [2, 3]}))]
    assert ca.sync(group, 2, a, assignments)[0] == gw.NONE
    assert cb.sync(group, 2, b, [])[0] == gw.NONE
    return ClassicPair(group, topic, Topic(topic, tid), addr, names, ca, cb, a, b, 2)


@dataclass
class Upgraded:
    pair: ClassicPair
    cc: gw.GroupConn
    c: str
    join: k8.HeartbeatResponse
    described: k8.DescribedConsumerGroup
    # The classic members by role: K keeps its two partitions in the new target, R gives one up.
    k: str
    r: str
    roles_found: bool


def upgrade(side: Side, prefix: str) -> tuple[Upgraded, dict]:
    """classic_pair, then C joins with a ConsumerGroupHeartbeat v0 (epoch 0, subscribed to the
    topic, owning nothing). Returns the state and what was observed so far."""
    p = classic_pair(side, prefix)
    out: dict = {"listed before": listed(side, p.addr, p.group)}
    cc = side.conn(p.group)
    h = heartbeat(cc, p.group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[p.topic], owned=[])
    c = h.member_id or ""
    if c:
        p.names.name(c, "C")
    out["C joins"] = heartbeat_answer(h, p.names, p.t, p.generation)
    out["C member id form"] = id_form(h.member_id)
    d = consumer_describe(side, p.addr, p.group)
    members = {p.names(m.member_id): m for m in d.members}
    # K and R by the target assignment (see the module docstring).
    revoking = [n for n in ("A", "B") if n in members and len(flat(parts_of(members[n].target_assignment, p.t))) < 2]
    roles_found = len(revoking) == 1
    r_name = revoking[0] if roles_found else "A"
    k_name = "B" if r_name == "A" else "A"
    ids = {"A": p.a, "B": p.b}
    return Upgraded(p, cc, c, h, d, ids[k_name], ids[r_name], roles_found), out


def describe_record(u: Upgraded, d: k8.DescribedConsumerGroup, names: Names) -> dict:
    """ConsumerGroupDescribe's answer: the group, then each member without its target; the targets
    by shape (whose they are is Kafka's hash-map order)."""
    g, t = u.pair.generation, u.pair.t
    subscribed = {u.pair.topic: "T"}
    members = sorted(
        (
            names(m.member_id),
            relative(m.member_epoch, g),
            m.member_type,
            m.client_id,
            m.client_host,
            m.instance_id,
            m.rack_id,
            [subscribed.get(name, name) for name in m.subscribed_topic_names],
            m.subscribed_topic_regex,
            parts_of(m.assignment, t),
        )
        for m in d.members
    )
    targets = {names(m.member_id): flat(parts_of(m.target_assignment, t)) for m in d.members}
    currents = {names(m.member_id): flat(parts_of(m.assignment, t)) for m in d.members}
    everyone = sorted(p for target in targets.values() for p in target)
    return {
        "group": (d.error, d.state, relative(d.group_epoch, g), relative(d.assignment_epoch, g), d.assignor, d.authorized_operations),
        "members": members,
        "target sizes": sorted(len(target) for target in targets.values()),
        "targets within current assignments": sorted(set(targets[n]) <= set(currents[n]) for n in targets if currents[n]),
        "targets cover each partition once": everyone == ALL,
    }


# --- 1. upgrade ------------------------------------------------------------------------------------


def s_upgrade(side: Side) -> dict:
    """Upgrade, then the classic members' requests inside the consumer group until all three are
    reconciled: R re-joins twice (first to give up a partition), K once, C gets the partition."""
    u, out = upgrade(side, "upgrade")
    p, names = u.pair, u.pair.names
    group, topic, g = p.group, p.topic, p.generation
    out["roles found"] = u.roles_found
    out["described"] = describe_record(u, u.described, names)
    out["listed"] = listed(side, p.addr, group)
    d0 = classic_describe(side, p.addr, group, 0)
    out["DescribeGroups v0"] = (d0.error, d0.state, d0.protocol_type, d0.protocol, sorted(names(m[0]) for m in d0.members))
    d4 = classic_describe(side, p.addr, group, 4)
    out["DescribeGroups v4"] = (d4.error, d4.state, d4.protocol_type, d4.protocol, sorted(names(m[0]) for m in d4.members), d4.authorized_operations)
    # From here on the classic members are named by role.
    roles = Names()
    roles.name(u.k, "K")
    roles.name(u.r, "R")
    roles.name(u.c, "C")
    ck, cr = (p.ca, p.cb) if u.k == p.a else (p.cb, p.ca)
    k_owned = [0, 1] if u.k == p.a else [2, 3]
    r_owned = [2, 3] if u.k == p.a else [0, 1]

    # Offset commits of a classic member are checked against its member epoch (its generation).
    out["R commit v2 wrong generation"] = commit_v2(cr, group, g + 1, u.r, topic)
    out["R commit v7 wrong generation"] = commit_v7(cr, group, g + 1, u.r, topic)
    out["R commit v2 its generation"] = commit_v2(cr, group, g, u.r, topic)
    out["anonymous commit"] = commit_v2(cr, group, -1, "", topic)
    # A consumer-protocol member must commit with OffsetCommit v9+.
    out["C commit v7 its epoch"] = commit_v7(u.cc, group, u.join.member_epoch, u.c, topic)

    out["unknown member heartbeat"] = cr.heartbeat(group, g, "ghost-member")
    out["R heartbeat wrong generation"] = cr.heartbeat(group, g + 1, u.r)
    out["R heartbeat old generation"] = cr.heartbeat(group, g, u.r)
    out["R sync old generation"] = cr.sync(group, g, u.r, [])[0]

    # R re-joins owning its two partitions, listing another protocol first.
    j = cr.call(
        k8.join_group_v7,
        k8.parse_join_group_v7,
        group,
        u.r,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        protocols=protocols(topic, {topic: r_owned}, ("cooperative-sticky", "range")),
    )
    out["R re-joins (v7)"] = {
        "error": j.error,
        "generation": relative(j.generation, g),
        "protocol type": j.protocol_type,
        "protocol": j.protocol,
        "leader": j.leader,
        "member id": roles(j.member_id),
        "members": j.members,
    }
    err, asg = sync_assignment(cr, group, j.generation, u.r, topic)
    out["R sync"] = (err, asg and (asg[0], {t: (len(ps), set(ps) <= set(r_owned)) for t, ps in asg[1].items()}, asg[2]))
    r_kept = asg[1].get("T", []) if asg else []
    out["R heartbeat after sync"] = cr.heartbeat(group, j.generation, u.r)
    # Having given up the partition, R re-joins (v5) owning what it kept.
    j2 = cr.join(group, u.r, version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocols=protocols(topic, {topic: r_kept}))
    out["R re-joins again (v5)"] = (j2.error, relative(j2.generation, g), j2.protocol, j2.leader, roles(j2.member_id), j2.members)
    err, asg = sync_assignment(cr, group, j2.generation, u.r, topic)
    out["R sync again"] = (err, asg and (asg[0], {t: ps == r_kept for t, ps in asg[1].items()}, asg[2]))
    out["R heartbeat"] = cr.heartbeat(group, j2.generation, u.r)

    out["K heartbeat old generation"] = ck.heartbeat(group, g, u.k)
    jk = ck.join(group, u.k, version=5, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocols=protocols(topic, {topic: k_owned}))
    out["K re-joins (v5)"] = (jk.error, relative(jk.generation, g), jk.protocol, jk.leader, roles(jk.member_id), jk.members)
    err, asg = sync_assignment(ck, group, jk.generation, u.k, topic)
    out["K sync"] = (err, asg and (asg[0], {t: ps == k_owned for t, ps in asg[1].items()}, asg[2]))

    # C's next heartbeat: R released the partition C's target names.
    h = heartbeat(u.cc, group, u.c, u.join.member_epoch, owned=[])
    out["C heartbeat"] = heartbeat_answer(h, roles, p.t, g, exact=False)
    c_parts = flat(parts_of(h.assignment, p.t))
    out["C got R's released partition"] = sorted(c_parts + r_kept) == sorted(r_owned)
    d = consumer_describe(side, p.addr, group)
    out["described at the end"] = (d.state, relative(d.group_epoch, g), relative(d.assignment_epoch, g), sorted((roles(m.member_id), relative(m.member_epoch, g), m.member_type) for m in d.members))
    return out


def commit_v2(conn: gw.GroupConn, group: str, generation: int, member_id: str, topic: str) -> list[int]:
    return list(conn.call(gw.offset_commit_v2, gw.parse_offset_commit_v2, group, generation, member_id, {(topic, 0): 1})[1].values())


def commit_v7(conn: gw.GroupConn, group: str, generation: int, member_id: str, topic: str) -> list[int]:
    return list(conn.call(gw.offset_commit_v7, gw.parse_offset_commit_v7, group, generation, member_id, {(topic, 0): 1})[1].values())


def test_consumer_heartbeat_upgrades_a_live_classic_group(sides):
    compare(
        sides,
        s_upgrade,
        {
            "listed before": ("consumer", "Stable", "classic"),
            # C gets an id of Kafka's Uuid form, the epoch of the bumped group and no partition:
            # its target's partition is still R's.
            "C joins": {"error": gw.NONE, "message": False, "member id": "C", "epoch": "G+1", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {}},
            "C member id form": "base64 uuid",
            "roles found": True,
            "described": {
                "group": (gw.NONE, "Reconciling", "G+1", "G+1", "uniform", -(2**31)),
                # The classic members keep their ids, generation (as epoch) and assignment.
                "members": [
                    ("A", "G+0", k8.MEMBER_TYPE_CLASSIC, "corral-e2e-raw", "/127.0.0.1", None, None, ["T"], "", {"T": [0, 1]}),
                    ("B", "G+0", k8.MEMBER_TYPE_CLASSIC, "corral-e2e-raw", "/127.0.0.1", None, None, ["T"], "", {"T": [2, 3]}),
                    ("C", "G+1", k8.MEMBER_TYPE_CONSUMER, "corral-e2e-raw", "/127.0.0.1", None, None, ["T"], "", {}),
                ],
                "target sizes": [1, 1, 2],
                "targets within current assignments": [True, True],
                "targets cover each partition once": True,
            },
            "listed": ("consumer", "Reconciling", "consumer"),
            # DescribeGroups describes classic groups only: a consumer group is Dead to it.
            "DescribeGroups v0": (gw.NONE, "Dead", "", "", []),
            "DescribeGroups v4": (gw.NONE, "Dead", "", "", [], -(2**31)),
            "R commit v2 wrong generation": [gw.ILLEGAL_GENERATION],
            "R commit v7 wrong generation": [gw.ILLEGAL_GENERATION],
            "R commit v2 its generation": [gw.NONE],
            "anonymous commit": [gw.UNKNOWN_MEMBER_ID],
            "C commit v7 its epoch": [UNSUPPORTED_VERSION],
            "unknown member heartbeat": gw.UNKNOWN_MEMBER_ID,
            "R heartbeat wrong generation": gw.ILLEGAL_GENERATION,
            "R heartbeat old generation": gw.REBALANCE_IN_PROGRESS,
            "R sync old generation": gw.REBALANCE_IN_PROGRESS,
            # Still owning the partition to give up: its old epoch, the first protocol it lists, no
            # leader, no member list; SyncGroup gives what it keeps, in the subscription's version.
            "R re-joins (v7)": {"error": gw.NONE, "generation": "G+0", "protocol type": "consumer", "protocol": "cooperative-sticky", "leader": "", "member id": "R", "members": []},
            "R sync": (gw.NONE, (1, {"T": (1, True)}, None)),
            "R heartbeat after sync": gw.REBALANCE_IN_PROGRESS,
            "R re-joins again (v5)": (gw.NONE, "G+1", "range", "", "R", []),
            "R sync again": (gw.NONE, (1, {"T": True}, None)),
            "R heartbeat": gw.NONE,
            "K heartbeat old generation": gw.REBALANCE_IN_PROGRESS,
            "K re-joins (v5)": (gw.NONE, "G+1", "range", "", "K", []),
            "K sync": (gw.NONE, (1, {"T": True}, None)),
            "C heartbeat": {"error": gw.NONE, "message": False, "member id": "C", "epoch": "G+1", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {"T": 1}},
            "C got R's released partition": True,
            "described at the end": ("Stable", "G+1", "G+1", [("C", "G+1", 1), ("K", "G+1", 0), ("R", "G+1", 0)]),
        },
    )


# --- 2. refusal ----------------------------------------------------------------------------------


def s_refused(side: Side, leave_first: bool) -> dict:
    """A classic group of protocol type "connect" (one member S, Stable), then a
    ConsumerGroupHeartbeat join; with `leave_first`, S leaves before (the group is Empty)."""
    group, names, topic = unique("connect"), Names(), side.create_topic(1)
    side.wait_assignable(topic, group)
    addr = side.coordinator(group)
    cs = side.conn(group)
    join = {"version": 5, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS, "protocol_type": "connect", "protocols": [("default", b"\x00\x01worker")]}
    first = cs.join(group, "", **join)
    assert first.error == gw.MEMBER_ID_REQUIRED, first
    s = first.member_id
    names.name(s, "S")
    j = cs.join(group, s, **join)
    assert j.error == gw.NONE and j.generation == 1, j
    assert cs.sync(group, 1, s, [(s, b"\x00\x01tasks")])[0] == gw.NONE
    out: dict = {}
    if leave_first:
        out["S leaves"] = cs.leave(group, s)
    out["listed before"] = listed(side, addr, group)
    h = heartbeat(side.conn(group), group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[topic], owned=[])
    if h.member_id:
        names.name(h.member_id, "C")
    out["C joins"] = heartbeat_answer(h, names, Topic(topic, topic_id(side, topic)), None)
    out["listed after"] = listed(side, addr, group)
    d = classic_describe(side, addr, group, 0)
    out["DescribeGroups v0"] = (d.error, d.state, d.protocol_type, d.protocol, [(names(m), client, host, meta, asg) for m, client, host, meta, asg in d.members])
    if not leave_first:
        out["S heartbeat"] = cs.heartbeat(group, 1, s)
    cd = consumer_describe(side, addr, group)
    out["ConsumerGroupDescribe"] = (cd.error, cd.state, [(names(m.member_id), m.member_type) for m in cd.members])
    return out


def test_consumer_heartbeat_into_a_live_connect_group_is_refused(sides):
    compare(
        sides,
        s_refused,
        {
            "listed before": ("connect", "Stable", "classic"),
            "C joins": {"error": gw.GROUP_ID_NOT_FOUND, "message": True, "member id": None, "epoch": 0, "heartbeat interval": 0, "assignment": None},
            "listed after": ("connect", "Stable", "classic"),
            "DescribeGroups v0": (gw.NONE, "Stable", "connect", "default", [("S", "corral-e2e-raw", "/127.0.0.1", b"\x00\x01worker", b"\x00\x01tasks")]),
            "S heartbeat": gw.NONE,
            "ConsumerGroupDescribe": (gw.GROUP_ID_NOT_FOUND, "", []),
        },
        leave_first=False,
    )


def test_consumer_heartbeat_replaces_an_empty_connect_group(sides):
    compare(
        sides,
        s_refused,
        {
            "S leaves": gw.NONE,
            "listed before": ("connect", "Empty", "classic"),
            # An empty classic group of any protocol type is replaced by a new consumer group,
            # whose first member Kafka gives epoch 2.
            "C joins": {"error": gw.NONE, "message": False, "member id": "C", "epoch": 2, "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {"T": [0]}},
            "listed after": ("consumer", "Stable", "consumer"),
            "DescribeGroups v0": (gw.NONE, "Dead", "", "", []),
            "ConsumerGroupDescribe": (gw.NONE, "Stable", [("C", k8.MEMBER_TYPE_CONSUMER)]),
        },
        leave_first=True,
    )


# --- 3. downgrade ----------------------------------------------------------------------------------


def s_downgrade(side: Side) -> dict:
    """Upgrade, then C leaves at once: the group turns classic, rebalances, K and R re-join."""
    u, out = upgrade(side, "downgrade")
    p = u.pair
    group, topic, g = p.group, p.topic, p.generation
    roles = Names()
    roles.name(u.k, "K")
    roles.name(u.r, "R")
    roles.name(u.c, "C")
    ck, cr = (p.ca, p.cb) if u.k == p.a else (p.cb, p.ca)
    k_owned = [0, 1] if u.k == p.a else [2, 3]
    r_owned = [2, 3] if u.k == p.a else [0, 1]
    out["roles found"] = u.roles_found

    h = heartbeat(u.cc, group, u.c, -1)
    out["C leaves"] = heartbeat_answer(h, roles, p.t, g)
    out["listed"] = listed(side, p.addr, group)
    d = classic_describe(side, p.addr, group, 0)
    members = {}
    for m, client, host, meta, asg in d.members:
        full = k8.parse_assignment_full(asg)
        parts = full[1].get(topic, []) if full else []
        owned = k_owned if m == u.k else r_owned
        members[roles(m)] = (client, host, meta, full and full[0], len(parts), set(parts) <= set(owned))
    out["DescribeGroups v0"] = (d.error, d.state, d.protocol_type, d.protocol, dict(sorted(members.items())))
    cd = consumer_describe(side, p.addr, group)
    out["ConsumerGroupDescribe"] = (cd.error, cd.state, len(cd.members))

    out["K heartbeat old generation"] = ck.heartbeat(group, g, u.k)
    out["K heartbeat generation G+1"] = ck.heartbeat(group, g + 1, u.k)
    out["R heartbeat old generation"] = cr.heartbeat(group, g, u.r)

    join = {"session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS}
    pending_k = send_join(ck, group, u.k, protocols=protocols(topic, {topic: k_owned}), **join)
    pending_r = send_join(cr, group, u.r, protocols=protocols(topic, {topic: r_owned}), **join)
    jk, jr = recv_join(ck, pending_k), recv_join(cr, pending_r)
    leaders = {roles(jk.leader), roles(jr.leader)}
    out["re-joins"] = {
        name: (j.error, relative(j.generation, g), j.protocol, roles(j.member_id))
        for name, j in (("K", jk), ("R", jr))
    }
    out["one leader, K or R"] = leaders <= {"K", "R"} and len(leaders) == 1
    leader_join = jk if roles(jk.leader) == "K" else jr
    out["the leader's answer lists"] = sorted(roles(m) for m, _ in leader_join.members)
    out["the follower's answer lists"] = [roles(m) for m, _ in (jr if leader_join is jk else jk).members]
    leader_conn, follower_conn = (ck, cr) if leader_join is jk else (cr, ck)
    follower = u.r if leader_join is jk else u.k
    assignments = [(u.k, gw.assignment({topic: k_owned})), (u.r, gw.assignment({topic: r_owned}))]
    out["leader sync"] = leader_conn.sync(group, leader_join.generation, leader_join.member_id, assignments)[0]
    out["follower sync"] = follower_conn.sync(group, leader_join.generation, follower, [])[0]
    d = classic_describe(side, p.addr, group, 0)
    out["after"] = (d.state, d.protocol_type, d.protocol, sorted(roles(m[0]) for m in d.members))
    out["listed after"] = listed(side, p.addr, group)
    return out


def test_last_consumer_member_leaving_downgrades_to_classic(sides):
    compare(
        sides,
        s_downgrade,
        {
            "listed before": ("consumer", "Stable", "classic"),
            "C joins": {"error": gw.NONE, "message": False, "member id": "C", "epoch": "G+1", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {}},
            "C member id form": "base64 uuid",
            "roles found": True,
            "C leaves": {"error": gw.NONE, "message": False, "member id": "C", "epoch": "-1", "heartbeat interval": 0, "assignment": None},
            "listed": ("consumer", "PreparingRebalance", "classic"),
            # A classic group again, rebalancing; each member's assignment is its target in the
            # consumer group (R's without the partition meant for C), in its subscription's version.
            "DescribeGroups v0": (
                gw.NONE,
                "PreparingRebalance",
                "consumer",
                "",
                {"K": ("corral-e2e-raw", "/127.0.0.1", b"", 1, 2, True), "R": ("corral-e2e-raw", "/127.0.0.1", b"", 1, 1, True)},
            ),
            "ConsumerGroupDescribe": (gw.GROUP_ID_NOT_FOUND, "", 0),
            # The classic generation is the group epoch (G+1).
            "K heartbeat old generation": gw.ILLEGAL_GENERATION,
            "K heartbeat generation G+1": gw.REBALANCE_IN_PROGRESS,
            "R heartbeat old generation": gw.ILLEGAL_GENERATION,
            "re-joins": {"K": (gw.NONE, "G+2", "range", "K"), "R": (gw.NONE, "G+2", "range", "R")},
            "one leader, K or R": True,
            "the leader's answer lists": ["K", "R"],
            "the follower's answer lists": [],
            "leader sync": gw.NONE,
            "follower sync": gw.NONE,
            "after": ("Stable", "consumer", "range", ["K", "R"]),
            "listed after": ("consumer", "Stable", "classic"),
        },
    )


# --- 4. classic join into a consumer group ---------------------------------------------------------


def s_classic_join_into_consumer_group(side: Side) -> dict:
    """C1 alone in a new consumer group (epochs below relative to its first, E), then classic X
    joins: X and C1 end with two partitions each."""
    group, names, topic = unique("classic-into"), Names(), side.create_topic(PARTITIONS)
    side.wait_assignable(topic, group)
    t = Topic(topic, topic_id(side, topic))
    addr = side.coordinator(group)
    cc1, cx = side.conn(group), side.conn(group)
    out: dict = {}
    h = heartbeat(cc1, group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[topic], owned=[])
    assert h.error == gw.NONE and h.member_id, h
    c1 = h.member_id
    names.name(c1, "C1")
    epoch = h.member_epoch
    out["C1 joins"] = heartbeat_answer(h, names, t, None)
    c1_parts = flat(parts_of(h.assignment, t))

    join = {"version": 5, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS, "protocols": protocols(topic, {}, ("range", "roundrobin"))}
    past_assignment_interval()
    first = cx.join(group, "", **join)
    out["X first join"] = (first.error, first.generation, first.protocol, first.leader, id_form(first.member_id), first.members)
    x = first.member_id
    names.name(x, "X")
    j = cx.join(group, x, **join)
    out["X join"] = (j.error, relative(j.generation, epoch, "E"), j.protocol, j.leader, names(j.member_id), j.members)
    out["X sync"] = sync_assignment(cx, group, j.generation, x, topic)
    out["X heartbeat after sync"] = cx.heartbeat(group, j.generation, x)
    d = consumer_describe(side, addr, group)
    out["described"] = (
        d.error,
        d.state,
        relative(d.group_epoch, epoch, "E"),
        sorted((names(m.member_id), relative(m.member_epoch, epoch, "E"), m.member_type, len(flat(parts_of(m.target_assignment, t)))) for m in d.members),
    )
    out["listed"] = listed(side, addr, group)

    # C1 gives up what X's target names, then X re-joins (v7) and gets it.
    h = heartbeat(cc1, group, c1, epoch, owned=[(t.tid, c1_parts)])
    out["C1 heartbeat"] = heartbeat_answer(h, names, t, epoch, exact=False, label="E")
    kept = flat(parts_of(h.assignment, t))
    h = heartbeat(cc1, group, c1, h.member_epoch, owned=[(t.tid, kept)])
    out["C1 heartbeat after revoking"] = heartbeat_answer(h, names, t, epoch, label="E")
    out["X heartbeat after C1 revoked"] = cx.heartbeat(group, j.generation, x)
    j7 = cx.call(
        k8.join_group_v7,
        k8.parse_join_group_v7,
        group,
        x,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        protocols=protocols(topic, {}, ("range", "roundrobin")),
    )
    out["X re-joins (v7)"] = (j7.error, relative(j7.generation, epoch, "E"), j7.protocol_type, j7.protocol, j7.leader, names(j7.member_id), j7.members)
    err, asg = sync_assignment(cx, group, j7.generation, x, topic)
    x_parts = asg[1].get("T", []) if asg else []
    out["X sync again"] = (err, asg and (asg[0], len(x_parts), asg[2]))
    out["X and C1 split the topic"] = sorted(x_parts + kept) == ALL
    out["X heartbeat at the end"] = cx.heartbeat(group, j7.generation, x)
    return out


def test_classic_join_into_a_consumer_group(sides):
    compare(
        sides,
        s_classic_join_into_consumer_group,
        {
            # The first member of a new consumer group: epoch 2 from Kafka 4.4.
            "C1 joins": {"error": gw.NONE, "message": False, "member id": "C1", "epoch": 2, "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {"T": ALL}},
            # MEMBER_ID_REQUIRED with an id of Kafka's Uuid form (a consumer group's), not a
            # classic group's `<client id>-<uuid>`.
            "X first join": (gw.MEMBER_ID_REQUIRED, -1, "", "", "base64 uuid", []),
            # Generation = X's epoch, the first protocol X lists, no leader, no member list;
            # nothing to sync while C1 holds X's partitions.
            "X join": (gw.NONE, "E+1", "range", "", "X", []),
            "X sync": (gw.NONE, (1, {}, None)),
            "X heartbeat after sync": gw.NONE,
            "described": (gw.NONE, "Reconciling", "E+1", [("C1", "E+0", k8.MEMBER_TYPE_CONSUMER, 2), ("X", "E+1", k8.MEMBER_TYPE_CLASSIC, 2)]),
            "listed": ("consumer", "Reconciling", "consumer"),
            "C1 heartbeat": {"error": gw.NONE, "message": False, "member id": "C1", "epoch": "E+0", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": {"T": 2}},
            "C1 heartbeat after revoking": {"error": gw.NONE, "message": False, "member id": "C1", "epoch": "E+1", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": None},
            # X's partitions are free: it must re-join to get them.
            "X heartbeat after C1 revoked": gw.REBALANCE_IN_PROGRESS,
            "X re-joins (v7)": (gw.NONE, "E+1", "consumer", "range", "", "X", []),
            "X sync again": (gw.NONE, (1, 2, None)),
            "X and C1 split the topic": True,
            "X heartbeat at the end": gw.NONE,
        },
    )


def s_classic_join_within_interval(side: Side) -> dict:
    """C1 alone in a new consumer group, then classic X joins at once, within the assignment
    interval after C1's assignment."""
    group, names, topic = unique("classic-batched"), Names(), side.create_topic(PARTITIONS)
    side.wait_assignable(topic, group)
    t = Topic(topic, topic_id(side, topic))
    addr = side.coordinator(group)
    cc1, cx = side.conn(group), side.conn(group)
    # The first barrier may create its topic: not within the interval below.
    barrier(side, group)
    h = heartbeat(cc1, group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[topic], owned=[])
    assert h.error == gw.NONE and h.member_id, h
    c1, epoch = h.member_id, h.member_epoch
    names.name(c1, "C1")
    join = {"version": 5, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS, "protocols": protocols(topic, {})}
    x = cx.join(group, "", **join).member_id
    names.name(x, "X")
    j = cx.join(group, x, **join)
    out: dict = {"X join": (j.error, relative(j.generation, epoch, "E"), j.protocol, j.leader, names(j.member_id), j.members)}
    out["X sync"] = sync_assignment(cx, group, j.generation, x, topic)
    out["X heartbeat"] = cx.heartbeat(group, j.generation, x)
    d = consumer_describe(side, addr, group)
    out["described"] = (d.state, relative(d.group_epoch, epoch, "E"), relative(d.assignment_epoch, epoch, "E"))
    h = heartbeat(cc1, group, c1, epoch, owned=[(t.tid, ALL)])
    out["C1 heartbeat"] = heartbeat_answer(h, names, t, epoch, exact=False, label="E")
    # Past the interval (C1 heartbeating as a client would) both have the new target assignment.
    past_assignment_interval()
    owned = flat(parts_of(h.assignment, t)) if h.assignment is not None else ALL
    heartbeat(cc1, group, c1, h.member_epoch, owned=[(t.tid, owned)])
    d = consumer_describe(side, addr, group)
    out["described after the interval"] = (d.state, relative(d.group_epoch, epoch, "E"), relative(d.assignment_epoch, epoch, "E"))
    return out


def test_classic_join_within_the_assignment_interval(sides):
    compare(
        sides,
        s_classic_join_within_interval,
        {
            # The group epoch moves at once, the new target assignment only once the interval
            # since the last one has passed: X joins at the current assignment epoch.
            "X join": (gw.NONE, "E+0", "range", "", "X", []),
            "X sync": (gw.NONE, (1, {}, None)),
            "X heartbeat": gw.NONE,
            "described": ("Assigning", "E+1", "E+0"),
            "C1 heartbeat": {"error": gw.NONE, "message": False, "member id": "C1", "epoch": "E+0", "heartbeat interval": HEARTBEAT_INTERVAL_MS, "assignment": None},
            "described after the interval": ("Reconciling", "E+1", "E+1"),
        },
    )
