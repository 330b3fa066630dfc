"""Group administration with confluent-kafka's AdminClient and kafka-python's KafkaAdminClient:
ListGroups (with state filters), DescribeGroups, OffsetFetch, OffsetCommit from an admin (alter
offsets), OffsetDelete and DeleteGroups, against a live (Stable) group, a group that emptied and a
group that does not exist.

confluent-kafka's Python AdminClient has no delete_consumer_group_offsets (librdkafka has
rd_kafka_DeleteConsumerGroupOffsets, the binding does not expose it), so OffsetDelete is driven
through kafka-python's delete_group_offsets.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError
from kafka.structs import OffsetAndMetadata

import clients
from groups import GROUP_CONFIG, committed, high_watermarks, produce, unique, wait_group, wait_owned_exactly_once, wait_until

T = 30


@pytest.fixture
def scene(corral_factory, members):
    """A topic with records; a live group (one member, Stable, subscribed to the topic); an idle
    group (consumed, committed and closed: Empty); the name of a group that never existed."""
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic, other_topic = unique("admin-topic"), unique("admin-other")
    clients.create_topic(b, topic, partitions=3)
    clients.create_topic(b, other_topic, partitions=1)
    produce(b, topic, 90, prefix="a")
    parts = {(topic, p) for p in range(3)}
    live_group, idle_group, missing_group = unique("admin-live"), unique("admin-idle"), unique("admin-missing")
    conf = dict(client="confluent", bootstrap=b, topics=[topic], assignor="range", session_timeout_ms=6000, heartbeat_interval_ms=300)

    idle = members("idle", group=idle_group, client_id="e2e-idle", **conf)
    live = members("live", group=live_group, client_id="e2e-live", **conf)
    for m in (idle, live):
        wait_owned_exactly_once([m], parts)
        wait_until(lambda: m.acked_commits() == high_watermarks(b, topic, 3), lambda: m.describe())
    idle.close()
    wait_group(b, idle_group, ConsumerGroupState.EMPTY, 0)
    wait_group(b, live_group, ConsumerGroupState.STABLE, 1)
    return dict(server=server, b=b, topic=topic, other_topic=other_topic, live=live_group, idle=idle_group,
                missing=missing_group, live_member=live, committed=high_watermarks(b, topic, 3))  # fmt: skip


def offsets_of(admin, group: str) -> dict[tuple[str, int], int]:
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=T)[group].result(T)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.error is None}


def test_confluent_admin_groups(scene):
    b, topic, live, idle, missing = scene["b"], scene["topic"], scene["live"], scene["idle"], scene["missing"]
    admin = clients.admin_client(b)

    # ListGroups, with and without state filters (ListGroups v4+).
    listed = admin.list_consumer_groups(request_timeout=T).result(T)
    assert not listed.errors
    by_id = {g.group_id: g for g in listed.valid}
    assert by_id[live].state == ConsumerGroupState.STABLE and not by_id[live].is_simple_consumer_group
    assert by_id[idle].state == ConsumerGroupState.EMPTY and not by_id[idle].is_simple_consumer_group
    assert missing not in by_id
    stable = {g.group_id for g in admin.list_consumer_groups(states={ConsumerGroupState.STABLE}, request_timeout=T).result(T).valid}
    assert live in stable and idle not in stable
    empty = {g.group_id for g in admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}, request_timeout=T).result(T).valid}
    assert idle in empty and live not in empty
    both = {g.group_id for g in admin.list_consumer_groups(states={ConsumerGroupState.EMPTY, ConsumerGroupState.STABLE}, request_timeout=T).result(T).valid}
    assert {live, idle} <= both

    # DescribeGroups: the live member with its decoded assignment, client id and host.
    futs = admin.describe_consumer_groups([live, idle], request_timeout=T)
    d = futs[live].result(T)
    assert d.state == ConsumerGroupState.STABLE and d.partition_assignor == "range" and not d.is_simple_consumer_group
    assert d.coordinator.id == 0 and d.coordinator.port == scene["server"].kafka_port
    [m] = d.members
    assert m.member_id == scene["live_member"].last_assign["member"]
    assert m.client_id == "e2e-live" and m.host == "/127.0.0.1" and m.group_instance_id is None
    assert sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions) == [(topic, 0), (topic, 1), (topic, 2)]
    e = futs[idle].result(T)
    assert e.state == ConsumerGroupState.EMPTY and e.members == [] and e.partition_assignor == ""

    # A group that does not exist: librdkafka sends DescribeGroups v5, where Kafka answers with
    # state Dead and no members (GROUP_ID_NOT_FOUND only from v6, KIP-1043).
    g = admin.describe_consumer_groups([missing], request_timeout=T)[missing].result(T)
    assert g.state == ConsumerGroupState.DEAD and g.members == []

    # Committed offsets (OffsetFetch with all topics).
    expected = scene["committed"]
    assert sorted(expected.values()) != [0, 0, 0] and sum(expected.values()) == 90
    assert offsets_of(admin, live) == expected
    assert offsets_of(admin, idle) == expected
    assert offsets_of(admin, missing) == {}

    # Altering offsets of the Empty group (OffsetCommit with generation -1), then reading them back.
    req = ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, 0, 5), TopicPartition(topic, 2, 0)])
    res = admin.alter_consumer_group_offsets([req], request_timeout=T)[idle].result(T)
    assert [(tp.partition, tp.offset, tp.error) for tp in res.topic_partitions] == [(0, 5, None), (2, 0, None)]
    altered = {(topic, 0): 5, (topic, 1): expected[(topic, 1)], (topic, 2): 0}
    assert offsets_of(admin, idle) == altered
    # The group's next consumer starts there (OffsetFetch with explicit partitions).
    assert committed(b, idle, [(topic, 0), (topic, 1), (topic, 2)]) == altered

    # Altering offsets of a live group is refused: an anonymous commit to a non-empty group.
    req = ConsumerGroupTopicPartitions(live, [TopicPartition(topic, 0, 1)])
    res = admin.alter_consumer_group_offsets([req], request_timeout=T)[live].result(T)
    [tp] = res.topic_partitions
    assert tp.error is not None and tp.error.code() == KafkaError.UNKNOWN_MEMBER_ID, tp
    assert offsets_of(admin, live) == expected

    # Creating a group by altering its offsets: a "simple" group (no protocol type), listed Empty.
    simple = unique("admin-simple")
    req = ConsumerGroupTopicPartitions(simple, [TopicPartition(topic, 1, 7)])
    admin.alter_consumer_group_offsets([req], request_timeout=T)[simple].result(T)
    listed = {g.group_id: g for g in admin.list_consumer_groups(request_timeout=T).result(T).valid}
    assert listed[simple].is_simple_consumer_group and listed[simple].state == ConsumerGroupState.EMPTY
    assert offsets_of(admin, simple) == {(topic, 1): 7}

    # DeleteGroups: a live group is not empty; an Empty one goes, with its offsets; a missing one
    # is not found.
    futs = admin.delete_consumer_groups([live, idle, missing, simple], request_timeout=T)
    with pytest.raises(KafkaException) as exc:
        futs[live].result(T)
    assert exc.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    assert futs[idle].result(T) is None
    assert futs[simple].result(T) is None
    with pytest.raises(KafkaException) as exc:
        futs[missing].result(T)
    assert exc.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    remaining = {g.group_id for g in admin.list_consumer_groups(request_timeout=T).result(T).valid}
    assert live in remaining and idle not in remaining and simple not in remaining
    assert offsets_of(admin, idle) == {}
    assert offsets_of(admin, live) == expected
    with pytest.raises(KafkaException) as exc:
        admin.delete_consumer_groups([idle], request_timeout=T)[idle].result(T)
    assert exc.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

    # The live member never noticed any of it.
    live_member = scene["live_member"]
    assert [e["ev"] for e in live_member.snapshot() if e["ev"] in ("assign", "revoke", "lost")] == ["assign"]
    live_member.close()
    wait_group(b, live, ConsumerGroupState.EMPTY, 0)
    assert admin.delete_consumer_groups([live], request_timeout=T)[live].result(T) is None


def test_kafka_python_admin_groups(scene):
    b, topic, other_topic, live, idle, missing = (scene[k] for k in ("b", "topic", "other_topic", "live", "idle", "missing"))
    admin = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000, client_id="e2e-kp-admin")
    try:
        # ListGroups (all, then with a state filter).
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups[live]["protocol_type"] == "consumer" and groups[idle]["protocol_type"] == "consumer"
        assert missing not in groups
        stable = {g["group_id"]: g for g in admin.list_groups(states_filter=["Stable"])}
        assert live in stable and idle not in stable
        assert stable[live]["group_state"] == "Stable"

        # DescribeGroups, with the member's subscription and assignment decoded by kafka-python.
        described = admin.describe_groups([live, idle])
        d = described[live]
        assert d["error"] is None and d["group_state"] == "Stable"
        assert d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
        [m] = d["members"]
        assert m["member_id"] == scene["live_member"].last_assign["member"]
        assert m["client_id"] == "e2e-live" and m["client_host"] == "/127.0.0.1"
        assert m["member_metadata"]["topics"] == [topic]
        assignment = {t["topic"]: sorted(t["partitions"]) for t in m["member_assignment"]["assigned_partitions"]}
        assert assignment == {topic: [0, 1, 2]}
        assert described[idle]["group_state"] == "Empty" and described[idle]["members"] == []
        # kafka-python asks for the authorized operations (v3+): with no authorizer, all five.
        assert sorted(d["authorized_operations"]) == ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
        # DescribeGroups v6 reports a missing group as GROUP_ID_NOT_FOUND (KIP-1043).
        nope = admin.describe_groups([missing])[missing]
        assert nope["group_state"] == "Dead" and nope["members"] == [] and "GroupIdNotFoundError" in nope["error"]

        # OffsetFetch.
        expected = {KpTopicPartition(t, p): o for (t, p), o in scene["committed"].items()}
        got = admin.list_group_offsets({live: None})[live]
        assert {tp: om.offset for tp, om in got.items()} == expected

        # OffsetCommit from the admin into the Empty group.
        result = admin.alter_group_offsets(idle, {KpTopicPartition(topic, 1): OffsetAndMetadata(11, "reset by e2e", -1)})
        assert {tp: e.__name__ for tp, e in result.items()} == {KpTopicPartition(topic, 1): "NoError"}
        got = admin.list_group_offsets({idle: [KpTopicPartition(topic, 1)]})[idle]
        assert (got[KpTopicPartition(topic, 1)].offset, got[KpTopicPartition(topic, 1)].metadata) == (11, "reset by e2e")

        # OffsetDelete: refused for a topic the live group is subscribed to; fine for a topic it
        # is not subscribed to; done for the Empty group; GROUP_ID_NOT_FOUND for a missing group.
        result = admin.delete_group_offsets(live, [KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
        assert {tp.partition: e.__name__ for tp, e in result.items()} == {0: "GroupSubscribedToTopicError", 1: "GroupSubscribedToTopicError"}
        result = admin.delete_group_offsets(live, [KpTopicPartition(other_topic, 0)])
        assert {tp: e.__name__ for tp, e in result.items()} == {KpTopicPartition(other_topic, 0): "NoError"}
        assert {tp: om.offset for tp, om in admin.list_group_offsets({live: None})[live].items()} == expected
        result = admin.delete_group_offsets(idle, [KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
        assert {tp.partition: e.__name__ for tp, e in result.items()} == {0: "NoError", 1: "NoError"}
        remaining = admin.list_group_offsets({idle: None})[idle]
        assert {tp: om.offset for tp, om in remaining.items()} == {KpTopicPartition(topic, 2): expected[KpTopicPartition(topic, 2)]}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(missing, [KpTopicPartition(topic, 0)])

        # DeleteGroups.
        result = admin.delete_groups([live, idle, missing])
        assert result == {live: "NonEmptyGroupError", idle: "OK", missing: "GroupIdNotFoundError"}
        groups = {g["group_id"] for g in admin.list_groups()}
        assert live in groups and idle not in groups
    finally:
        admin.close()
