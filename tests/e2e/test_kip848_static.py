"""KIP-848 static membership (group.instance.id) with confluent-kafka.

On close() librdkafka's static KIP-848 member revokes its partitions locally and sends a
ConsumerGroupHeartbeat with epoch -2 ("leaving temporarily"): the coordinator keeps the member and
its partitions reserved for the session timeout. A new consumer with the same instance id that
joins within that time takes over the same partitions, and the other members notice nothing (no
revocation, no new assignment). A static member that does not come back is removed when its
session times out, and its partitions go to the others.
"""

from __future__ import annotations

import re

from confluent_kafka import ConsumerGroupType

import clients
import kip848
from groups import (
    all_records,
    committed,
    describe_group,
    double_ownership,
    high_watermarks,
    owned_exactly_once,
    produce,
    unique,
    wait_owned_exactly_once,
    wait_until,
)

PARTITIONS = 6


def static_conf(b: str, group: str, topic: str, instance: str, **extra) -> dict:
    return kip848.member_conf(b, group, topic, instance_id=instance, client_id=f"e2e-{instance}", **extra)


def rebalance_events(m, since: int) -> list:
    return [(e["ev"], e["parts"]) for e in m.snapshot()[since:] if e["ev"] in ("assign", "revoke", "lost")]


def test_static_member_restart_keeps_partitions_and_others_undisturbed(corral_factory, members):
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic, group = unique("kip848-static"), unique("kip848-static")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}

    # Instance a logs librdkafka's group protocol debug lines, to see what it sends on close.
    a = members("a", **static_conf(b, group, topic, "instance-a", extra={"debug": "cgrp"}, log_level="DEBUG"))
    others = [members(n, **static_conf(b, group, topic, f"instance-{n}")) for n in ("b", "c")]
    ms = [a, *others]
    wait_owned_exactly_once(ms, all_parts)
    wait_until(lambda: sorted(len(m.owned) for m in ms) == [2, 2, 2], lambda: "; ".join(m.describe() for m in ms))
    first = {(topic, p, o) for _, _, p, o in produce(b, topic, 300, prefix="before-")}
    kip848.wait_consumed_and_committed(ms, first, "before the restart")
    desc = describe_group(b, group)
    assert desc.type == ConsumerGroupType.CONSUMER
    assert {d.group_instance_id for d in desc.members} == {"instance-a", "instance-b", "instance-c"}
    old_a_id = a.last_assign["member"]
    a_parts = a.owned
    marks = {m.name: len(m.snapshot()) for m in others}

    # The replacement process is up with its consumer created, waiting to subscribe.
    a2 = members("a2", **static_conf(b, group, topic, "instance-a", hold=True))
    ms.append(a2)
    wait_until(lambda: a2.of("holding"), lambda: a2.describe())

    # close(): librdkafka leaves with epoch -2, as a static member should.
    a.close()
    log = a.stderr_path.read_text(errors="replace")
    leaves = re.findall(r'ConsumerGroupHeartbeat of member id "[^"]*", group id "[^"]*", generation id (-\d+), group instance id "([^"]*)"', log)
    assert leaves == [("-2", "instance-a")], f"the static member's leave heartbeat(s): {leaves}"
    assert re.search(r"ConsumerGroupHeartbeat response received in state", log), "the leave heartbeat got no (successful) answer"
    # The coordinator keeps the member, with its partitions, for the session timeout.
    desc = describe_group(b, group)
    kept = {d.member_id: d for d in desc.members}
    assert old_a_id in kept, f"the static member was removed at once: {sorted(kept)}"
    assert {(tp.topic, tp.partition) for tp in kept[old_a_id].assignment.topic_partitions} == a_parts

    # A new consumer with the same instance id takes its place and its partitions.
    a2.go()
    wait_until(lambda: a2.owned == a_parts, lambda: f"the restarted member owns {sorted(a_parts)}; {a2.describe()}")
    wait_owned_exactly_once(ms[1:], all_parts)
    new_a_id = a2.last_assign["member"]
    assert new_a_id != old_a_id
    for m in others:
        assert rebalance_events(m, marks[m.name]) == [], f"{m.name} noticed the restart: {rebalance_events(m, marks[m.name])}"
    desc = describe_group(b, group)
    assert {d.member_id for d in desc.members} == {new_a_id, *(m.last_assign["member"] for m in others)}
    d = next(d for d in desc.members if d.member_id == new_a_id)
    assert d.group_instance_id == "instance-a" and {(tp.topic, tp.partition) for tp in d.assignment.topic_partitions} == a_parts

    # It resumes from the committed offsets: records are processed once across the restart.
    hw = high_watermarks(b, topic, PARTITIONS)
    second = {(topic, p, o) for _, _, p, o in produce(b, topic, 300, prefix="after-")}
    kip848.wait_consumed_and_committed([a2, *others], second, "after the restart")
    starts = kip848.first_offsets(a2)
    assert starts == {tp: hw[tp] for tp in starts} and set(starts) == a_parts, f"resumed at {starts}; committed {hw}"
    counts = all_records(ms)
    assert set(counts) == first | second and max(counts.values()) == 1
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, PARTITIONS)
    assert not double_ownership(ms), double_ownership(ms)

    for m in (a2, *others):
        m.close()
    assert not double_ownership(ms), double_ownership(ms)


def close_and_wait_eviction(leaver, stayers, all_parts) -> float:
    """Closes a static member (a -2 heartbeat) that does not come back; waits until the others own
    every partition; returns how long after the close the first of them got one of its partitions."""
    marks = {m.name: len(m.snapshot()) for m in stayers}
    leaver.close()
    closed_at = leaver.of("closed")[0]["ts"]
    wait_until(
        lambda: owned_exactly_once(stayers, all_parts),
        lambda: f"{leaver.name} (closed with -2 and gone) evicted and its partitions given to {[m.name for m in stayers]}; "
        + "; ".join(m.describe() for m in stayers)
        + "; the coordinator's members: "
        + str([(d.member_id, d.group_instance_id, sorted(tp.partition for tp in d.assignment.topic_partitions)) for d in describe_group(leaver.conf["bootstrap"], leaver.conf["group"]).members]),
        timeout=30,
    )
    for m in stayers:
        kinds = {k for k, _ in rebalance_events(m, marks[m.name])}
        assert kinds == {"assign"}, f"{m.name}: {rebalance_events(m, marks[m.name])}"
    reaction = min(e["t0"] for m in stayers for e in m.snapshot()[marks[m.name] :] if e["ev"] == "assign")
    return reaction - closed_at


def test_static_member_that_does_not_come_back_is_evicted_after_its_session(corral_factory, members):
    """A static member that left with -2 keeps its partitions reserved only for the session
    timeout; then they go to the others. Also for a member that had itself replaced an earlier
    incarnation of its instance id (a restarted static member)."""
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic, group = unique("kip848-static-gone"), unique("kip848-static-gone")
    clients.create_topic(b, topic, partitions=4)
    all_parts = {(topic, p) for p in range(4)}
    stayer = members("b", **static_conf(b, group, topic, "instance-b"))

    # 1. The first incarnation of instance-a leaves for good.
    a = members("a", **static_conf(b, group, topic, "instance-a"))
    wait_owned_exactly_once([a, stayer], all_parts)
    waited = close_and_wait_eviction(a, [stayer], all_parts)
    assert waited >= 0.75 * kip848.SESSION_MS / 1000, (
        f"the departed static member's partitions moved {waited:.2f}s after it closed; session timeout {kip848.SESSION_MS} ms"
    )
    assert [d.group_instance_id for d in describe_group(b, group).members] == ["instance-b"]

    # 2. instance-a again: a1 joins, restarts as a2 (which replaces a1 within the session
    # timeout), and a2 then leaves for good.
    a1 = members("a1", **static_conf(b, group, topic, "instance-a"))
    wait_owned_exactly_once([a1, stayer], all_parts)
    a1_parts = a1.owned
    a2 = members("a2", **static_conf(b, group, topic, "instance-a", hold=True))
    wait_until(lambda: a2.of("holding"), lambda: a2.describe())
    a1.close()
    a2.go()
    wait_until(lambda: a2.owned == a1_parts, lambda: f"a2 owns {sorted(a1_parts)}; {a2.describe()}")
    waited = close_and_wait_eviction(a2, [stayer], all_parts)
    assert waited >= 0.75 * kip848.SESSION_MS / 1000, (
        f"the departed static member's partitions moved {waited:.2f}s after it closed; session timeout {kip848.SESSION_MS} ms"
    )
    assert [d.group_instance_id for d in describe_group(b, group).members] == ["instance-b"]
    assert not double_ownership([a, a1, a2, stayer]), double_ownership([a, a1, a2, stayer])
    stayer.close()
