"""Static membership (group.instance.id, KIP-345) with confluent-kafka and kafka-python.

A static member that restarts within its session timeout takes its place back: same partitions,
same generation, no rebalance for the other members. Neither client sends LeaveGroup for a static
member on close (librdkafka never does; kafka-python skips it for brokers >= 2.3), so the
confluent-kafka member is restarted with close() and the kafka-python one is SIGKILLed, covering
both a clean restart and a crash.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupState
from kafka.admin import KafkaAdminClient, MemberToRemove

import clients
import groupwire as gw
from groups import (
    GROUP_CONFIG,
    all_records,
    assert_not_evicted_early,
    committed,
    describe_group,
    high_watermarks,
    produce,
    unique,
    wait_group,
    wait_owned_exactly_once,
    wait_until,
)

PARTITIONS = 4
SESSION_MS = 6000
HEARTBEAT_MS = 300


def static_conf(client: str, bootstrap: str, group: str, topic: str, instance: str) -> dict:
    conf = dict(
        client=client,
        bootstrap=bootstrap,
        group=group,
        topics=[topic],
        instance_id=instance,
        client_id=f"e2e-{instance}",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=20000,
    )
    if client == "confluent":
        conf["assignor"] = "range"  # eager: any rebalance would revoke every member's partitions
    return conf


def wait_all_committed(ms, expected: set, what: str) -> None:
    ends: dict = {}
    for t, p, o in expected:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)

    def done():
        if not expected <= set(all_records(ms)):
            return False
        acked: dict = {}
        for m in ms:
            for tp, o in m.acked_commits().items():
                acked[tp] = max(acked.get(tp, -1), o)
        return all(acked.get(tp, -1) >= e for tp, e in ends.items())

    wait_until(done, lambda: f"{what}: " + "; ".join(m.describe() for m in ms))


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_static_member_restart_keeps_partitions_without_rebalance(corral_factory, members, client):
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic = unique(f"static-{client}")
    group = unique(f"static-{client}")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}

    a = members("a", **static_conf(client, b, group, topic, "instance-a"))
    other = members("b", **static_conf(client, b, group, topic, "instance-b"))
    wait_owned_exactly_once([a, other], all_parts)
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 2)
    assert {d.group_instance_id for d in desc.members} == {"instance-a", "instance-b"}
    # Both members are at the same generation once the group is stable.
    wait_until(lambda: a.last_assign["gen"] == other.last_assign["gen"], lambda: f"{a.describe()} {other.describe()}")
    generation = a.last_assign["gen"]
    old_a_id, b_id = a.last_assign["member"], other.last_assign["member"]
    assert old_a_id.startswith("instance-a-") and b_id.startswith("instance-b-"), "static member ids start with the instance id"
    a_parts = a.owned
    b_events = len(other.snapshot())

    first = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="before-")}
    wait_all_committed([a, other], first, "records before the restart")

    # The restart: confluent-kafka closes (no LeaveGroup for a static member), kafka-python
    # crashes. Either way the coordinator keeps the member until its session times out.
    if client == "confluent":
        a.close()
    else:
        a.kill()
    desc = describe_group(b, group)
    assert old_a_id in {d.member_id for d in desc.members}, (
        f"the static member was removed at once ({desc.state}, {[d.member_id for d in desc.members]}): "
        "it must stay until its session timeout"
    )

    restarted = members("a2", **static_conf(client, b, group, topic, "instance-a"))
    wait_until(lambda: restarted.last_assign, lambda: f"the restarted member's assignment; {restarted.describe()}")
    got = restarted.last_assign
    assert {tuple(tp) for tp in got["owned"]} == a_parts, "the restarted static member got other partitions"
    assert got["gen"] == generation, f"a new generation ({got['gen']}, was {generation}): the group rebalanced"
    assert got["member"] != old_a_id and got["member"].startswith("instance-a-"), "a restarted member gets a new member id"
    wait_owned_exactly_once([restarted, other], all_parts)

    # The coordinator agrees: same generation for both members (a raw Heartbeat at the old
    # generation is accepted), the old member id is fenced, and DescribeGroups lists the new id.
    with gw.GroupConn(b) as conn:
        assert conn.heartbeat(group, generation, b_id, version=3, instance_id="instance-b") == gw.NONE
        assert conn.heartbeat(group, generation, got["member"], version=3, instance_id="instance-a") == gw.NONE
        assert conn.heartbeat(group, generation, old_a_id, version=3, instance_id="instance-a") == gw.FENCED_INSTANCE_ID
        assert conn.heartbeat(group, generation, old_a_id, version=0) == gw.UNKNOWN_MEMBER_ID
        d = conn.describe(group)
        assert d.state == "Stable"
        assert {m[0] for m in d.members} == {b_id, got["member"]}
    # The other member noticed nothing: no revocation, no new assignment.
    assert [e["ev"] for e in other.snapshot()[b_events:] if e["ev"] in ("assign", "revoke", "lost")] == []

    # The restarted member continues from the committed offsets: it reads only new records.
    second = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="after-")}
    wait_all_committed([restarted, other], second, "records after the restart")
    counts = all_records([a, other, restarted])
    assert set(counts) == first | second and max(counts.values()) == 1, "records lost or delivered twice across the restart"
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, PARTITIONS)

    if client == "confluent":
        # A static member that does not come back is evicted when its session times out.
        killed_at = time.monotonic()
        restarted.kill()
        wait_owned_exactly_once([other], all_parts)
        assert_not_evicted_early(other, killed_at, SESSION_MS)
        desc = wait_group(b, group, ConsumerGroupState.STABLE, 1)
        assert [d.group_instance_id for d in desc.members] == ["instance-b"]
    else:
        # An operator removes the static member by its instance id (LeaveGroup v3+ with an empty
        # member id, what `kafka-consumer-groups --remove-members` sends); the partitions move.
        restarted.kill()
        admin = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
        try:
            result = admin.remove_group_members(group, [MemberToRemove(group_instance_id="instance-a")])
        finally:
            admin.close()
        assert [e.__name__ for e in result.values()] == ["NoError"], result
        wait_owned_exactly_once([other], all_parts)
        desc = wait_group(b, group, ConsumerGroupState.STABLE, 1)
        assert [d.group_instance_id for d in desc.members] == ["instance-b"]
    other.close()
