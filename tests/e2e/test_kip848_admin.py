"""KIP-848 consumer groups seen by confluent-kafka's AdminClient, and classic clients meeting them.

confluent-kafka 2.16 lists groups with their type (ListGroups v5: `ConsumerGroupListing.type`,
filter `types=`) and describes a group with ConsumerGroupDescribe first, falling back to
DescribeGroups when the coordinator answers GROUP_ID_NOT_FOUND (a classic group). With migration
disabled, a classic consumer (JoinGroup) cannot join a consumer group that has live KIP-848
members: corral answers INCONSISTENT_GROUP_PROTOCOL, which librdkafka reports as a consumer error.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, ConsumerGroupType

import clients
import kip848
from groups import (
    all_records,
    describe_group,
    produce,
    unique,
    wait_group,
    wait_owned_exactly_once,
    wait_until,
)

T = 30
PARTITIONS = 4


def listing(admin, **kwargs) -> dict:
    res = admin.list_consumer_groups(request_timeout=T, **kwargs).result(T)
    assert not res.errors, res.errors
    return {g.group_id: g for g in res.valid}


def parts_of(assignment) -> set:
    return {(tp.topic, tp.partition) for tp in assignment.topic_partitions}


def rebalance_events(m, since: int) -> list:
    return [(e["ev"], e["parts"]) for e in m.snapshot()[since:] if e["ev"] in ("assign", "revoke", "lost")]


def test_admin_lists_and_describes_consumer_groups(corral_factory, members):
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic = unique("kip848-admin")
    group, classic_group = unique("kip848-admin"), unique("classic-admin")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    ms = [members(f"m{i}", **kip848.member_conf(b, group, topic, "range", client_id=f"e2e-kip848-admin-{i}")) for i in range(2)]
    classic = members(
        "classic",
        client="confluent",
        bootstrap=b,
        group=classic_group,
        topics=[topic],
        assignor="range",
        client_id="e2e-classic-admin",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    wait_owned_exactly_once(ms, all_parts)
    wait_owned_exactly_once([classic], all_parts)
    admin = clients.admin_client(b)

    # ListGroups: the group is a CONSUMER group, Stable once every member has reconciled.
    wait_until(
        lambda: (g := listing(admin).get(group)) is not None and g.state == ConsumerGroupState.STABLE,
        lambda: f"{group} listed Stable: {vars(listing(admin).get(group) or object())}",
    )
    groups = listing(admin)
    assert groups[group].type == ConsumerGroupType.CONSUMER and not groups[group].is_simple_consumer_group
    assert groups[classic_group].type == ConsumerGroupType.CLASSIC
    # Filtered by type (ListGroups v5 TypesFilter) and by state.
    consumer_only = listing(admin, types={ConsumerGroupType.CONSUMER})
    assert group in consumer_only and classic_group not in consumer_only
    classic_only = listing(admin, types={ConsumerGroupType.CLASSIC})
    assert classic_group in classic_only and group not in classic_only
    assert group in listing(admin, states={ConsumerGroupState.STABLE}, types={ConsumerGroupType.CONSUMER})
    assert group not in listing(admin, states={ConsumerGroupState.EMPTY})

    # DescribeConsumerGroups: ConsumerGroupDescribe, with members, assignments and targets.
    d = admin.describe_consumer_groups([group], request_timeout=T)[group].result(T)
    assert d.type == ConsumerGroupType.CONSUMER and d.state == ConsumerGroupState.STABLE
    assert d.partition_assignor == "range" and not d.is_simple_consumer_group
    assert d.coordinator.id == 0 and d.coordinator.port == server.kafka_port
    by_id = {m.last_assign["member"]: m for m in ms}
    assert {x.member_id for x in d.members} == set(by_id), "ConsumerGroupDescribe lists other members than joined"
    for x in d.members:
        m = by_id[x.member_id]
        assert parts_of(x.assignment) == m.owned, f"{m.name}: coordinator and client disagree"
        assert x.target_assignment is not None and parts_of(x.target_assignment) == m.owned, f"{m.name}: target differs from a settled assignment"
        assert x.client_id == m.conf["client_id"] and x.host.lstrip("/") == "127.0.0.1" and x.group_instance_id is None
    assert sorted(sorted(p for _, p in parts_of(x.assignment)) for x in d.members) == [[0, 1], [2, 3]]
    # A classic group through the same call (ConsumerGroupDescribe says GROUP_ID_NOT_FOUND; the
    # client falls back to DescribeGroups).
    c = admin.describe_consumer_groups([classic_group], request_timeout=T)[classic_group].result(T)
    assert c.type == ConsumerGroupType.CLASSIC and c.state == ConsumerGroupState.STABLE and c.partition_assignor == "range"
    assert [parts_of(x.assignment) for x in c.members] == [all_parts]

    # Emptied: listed and described Empty, still a CONSUMER group; then DeleteGroups removes it.
    for m in ms:
        m.close()
    classic.close()
    wait_until(
        lambda: (g := listing(admin).get(group)) is not None and g.state == ConsumerGroupState.EMPTY,
        lambda: f"{group} listed Empty: {vars(listing(admin).get(group) or object())}",
    )
    assert listing(admin)[group].type == ConsumerGroupType.CONSUMER
    d = admin.describe_consumer_groups([group], request_timeout=T)[group].result(T)
    assert d.type == ConsumerGroupType.CONSUMER and d.state == ConsumerGroupState.EMPTY and d.members == []
    assert admin.delete_consumer_groups([group], request_timeout=T)[group].result(T) is None
    assert group not in listing(admin)


def test_classic_consumer_cannot_join_a_live_consumer_group_with_migration_disabled(corral_factory, members):
    """groups.consumer_migration_policy = "disabled" keeps a group to one protocol (KAFKA-20640):
    a classic consumer is refused by a live consumer group (with any other policy it joins it as
    a classic member, test_group_migration.py)."""
    server = corral_factory(config=kip848.CONFIG + 'consumer_migration_policy = "disabled"\n')
    b = server.bootstrap
    topic, group = unique("kip848-mixed"), unique("kip848-mixed")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    ms = [members(f"m{i}", **kip848.member_conf(b, group, topic, client_id=f"e2e-kip848-mixed-{i}")) for i in range(2)]
    wait_owned_exactly_once(ms, all_parts)
    wait_until(lambda: describe_group(b, group).state == ConsumerGroupState.STABLE, "the consumer group Stable")
    marks = {m.name: len(m.snapshot()) for m in ms}

    classic = members(
        "classic",
        client="confluent",
        bootstrap=b,
        group=group,
        topics=[topic],
        assignor="range",
        client_id="e2e-classic-intruder",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    wait_until(
        lambda: any(e.get("code") == "INCONSISTENT_GROUP_PROTOCOL" for e in classic.of("error")),
        lambda: f"the classic consumer reports INCONSISTENT_GROUP_PROTOCOL; {classic.describe()}; errors {classic.errors()}",
    )
    assert "JoinGroup failed" in classic.errors()[0], classic.errors()

    # The consumer group goes on as before: same members, nobody rebalanced, records consumed
    # once by its members and never by the classic consumer.
    records = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="mixed-")}
    kip848.wait_consumed_and_committed(ms, records, "with a classic consumer knocking")
    counts = all_records(ms)
    assert set(counts) == records and max(counts.values()) == 1
    assert classic.of("assign") == [] and classic.records() == []
    for m in ms:
        assert rebalance_events(m, marks[m.name]) == [], f"{m.name} was disturbed: {rebalance_events(m, marks[m.name])}"
    d = describe_group(b, group)
    assert d.type == ConsumerGroupType.CONSUMER and d.state == ConsumerGroupState.STABLE
    assert {x.member_id for x in d.members} == {m.last_assign["member"] for m in ms}
    assert all(x.client_id != "e2e-classic-intruder" for x in d.members)
    classic.close()
    for m in ms:
        assert rebalance_events(m, marks[m.name]) == [], f"{m.name} was disturbed: {rebalance_events(m, marks[m.name])}"
    for m in ms:
        m.close()
    # Once the consumer group is empty, a classic consumer may take the group id over.
    wait_group(b, group, ConsumerGroupState.EMPTY, 0)
    late = members(
        "classic-late",
        client="confluent",
        bootstrap=b,
        group=group,
        topics=[topic],
        assignor="range",
        client_id="e2e-classic-late",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    wait_owned_exactly_once([late], all_parts)
    d = describe_group(b, group)
    assert d.type == ConsumerGroupType.CLASSIC and [x.client_id for x in d.members] == ["e2e-classic-late"]
    late.close()
