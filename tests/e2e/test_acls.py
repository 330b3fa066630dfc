"""ACLs made and removed with CreateAcls and DeleteAcls, through the admin clients of
confluent-kafka, kafka-python and KafkaJS and Kafka's own kafka-acls tool, beside the
`[authorization]` rules of test_authorization.py.

The users and rules are that file's: `admin` is a super user, `alice` has rules for the
`payments.` topics, `bob` has none. What an ACL allows or denies is checked with the clients'
own produce and consume, from the same run; the ACLs outlive a kill -9 of the node, and in a
3-node cluster reach every node, one that was down included.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

import test_acls_reference as raw
from security import LISTENING
from test_cluster_topics import controller
from test_authorization import (  # noqa: F401 (node is a fixture)
    USERS,
    acl_command,
    any_filter,
    as_user,
    bindings,
    consume_error,
    create_topics,
    node,
    produce,
)
from test_java_client import java_classpath  # noqa: F401 (a fixture)

TIMEOUT_S = 20
JS_DIR = Path(__file__).resolve().parent / "js"


def acl(restype, name, principal, operation, permission=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL, host="*") -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, operation, permission)


def create(admin: AdminClient, *acls: AclBinding) -> dict[AclBinding, KafkaException | None]:
    """Each binding's outcome: None when made, the broker's refusal otherwise."""
    outcomes = {}
    for binding, future in admin.create_acls(list(acls), request_timeout=15).items():
        try:
            future.result(timeout=TIMEOUT_S)
            outcomes[binding] = None
        except KafkaException as e:
            outcomes[binding] = e
    return outcomes


def delete(admin: AdminClient, *filters) -> list[list[tuple]]:
    """The bindings each filter removed."""
    futures = admin.delete_acls(list(filters), request_timeout=15)
    described = lambda b: (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name, b.permission_type.name)  # noqa: E731
    return [sorted(described(b) for b in futures[f].result(timeout=TIMEOUT_S)) for f in filters]


def error_codes(outcomes: list[KafkaError | None]) -> list[int | None]:
    return [None if e is None else e.code() for e in outcomes]


def test_acls_allow_deny_and_are_removed(node):
    topic, group = f"orders.{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    admin, bob = AdminClient(as_user(node, "admin")), as_user(node, "bob")
    assert error_codes(produce(bob, topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    made = create(
        admin,
        acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE),
        acl(ResourceType.TOPIC, "orders.", "User:bob", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.GROUP, "bob-", "User:bob", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
    )
    assert list(made.values()) == [None, None, None], made
    assert error_codes(produce(bob, topic, 5)) == [None] * 5
    assert consume_error(bob, topic, group) is None, "READ on the prefix and on the group's prefix"

    # Listed with the rules, as Kafka lists ACLs: one binding per operation.
    mine = bindings(admin, any_filter(principal="User:bob"))
    assert mine == sorted([
        ("TOPIC", topic, "LITERAL", "User:bob", "*", "WRITE", "ALLOW"),
        ("TOPIC", "orders.", "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
        ("GROUP", "bob-", "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
    ]), mine  # fmt: skip

    # A DENY wins over the ALLOW, for its operation only.
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE, AclPermissionType.DENY)).values()) == [None]
    assert error_codes(produce(bob, topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert consume_error(bob, topic, group + "-2") is None

    # DeleteAcls returns what each filter removed; removing the DENY lets bob write again.
    removed = delete(admin, any_filter(permission_type=AclPermissionType.DENY), any_filter(principal="User:nobody"))
    assert removed == [[("TOPIC", topic, "LITERAL", "User:bob", "*", "WRITE", "DENY")], []], removed
    assert error_codes(produce(bob, topic, 1)) == [None]
    # The rules are config: a filter matching them removes none.
    assert delete(admin, any_filter(principal="User:alice")) == [[]]
    assert ("TOPIC", "payments.", "PREFIXED", "User:alice", "*", "READ", "ALLOW") in bindings(admin, any_filter(principal="User:alice"))


def offsets_records(config: dict, group: str, seconds: float = 15.0) -> int | KafkaError:
    """How many records of `__consumer_offsets` a reader got in `seconds`, or its first error."""
    reader = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    reader.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(50)])
    records, deadline = 0, time.monotonic() + seconds
    try:
        while records == 0 and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is not None:
                return message.error()
            records += message is not None
        return records
    finally:
        reader.close()


def test_a_literal_acl_on_consumer_offsets_lets_a_lag_monitor_read_it(node):
    """As Kafka's users let Burrow read `__consumer_offsets`: READ on the topic by name. An ACL
    for every topic does not open it, since it holds every group's members and hosts."""
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    assert produce(as_user(node, "alice"), topic, 1) == [None]
    assert consume_error(as_user(node, "alice"), topic, "payments-lag") is None, "a commit to read back"
    admin, bob = AdminClient(as_user(node, "admin")), as_user(node, "bob")
    made = create(
        admin,
        acl(ResourceType.TOPIC, "*", "User:bob", AclOperation.READ),
        acl(ResourceType.GROUP, "bob-lag", "User:bob", AclOperation.READ),
    )
    assert list(made.values()) == [None, None], made
    offsets_metadata = lambda: AdminClient(bob).list_topics(topic="__consumer_offsets", timeout=15).topics["__consumer_offsets"]  # noqa: E731
    assert offsets_metadata().error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert list(create(admin, acl(ResourceType.TOPIC, "__consumer_offsets", "User:bob", AclOperation.READ)).values()) == [None]
    assert offsets_metadata().error is None
    read = offsets_records(bob, "bob-lag")
    assert isinstance(read, int) and read > 0, read
    # Reading is all it gives: no one but super users writes the topic.
    assert list(create(admin, acl(ResourceType.TOPIC, "__consumer_offsets", "User:bob", AclOperation.WRITE)).values()) == [None]
    assert error_codes(produce(bob, "__consumer_offsets", 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert delete(admin, any_filter(principal="User:bob"))[0] != []


def test_a_regex_subscription_sees_the_topics_its_host_may_describe(node):
    """A KIP-848 group's regex matches the topics the member may describe from where it
    connects: an ACL for another host shows it nothing, and a new ACL the topic it names."""
    prefix = f"regex{uuid.uuid4().hex[:6]}."
    near, far, group = prefix + "near", prefix + "far", f"bob-regex-{uuid.uuid4().hex[:6]}"
    create_topics(node, near, far)
    made = create(
        AdminClient(as_user(node, "admin")),
        acl(ResourceType.TOPIC, near, "User:bob", AclOperation.READ, host="127.0.0.1"),
        acl(ResourceType.TOPIC, far, "User:bob", AclOperation.READ, host="10.9.9.9"),
        acl(ResourceType.GROUP, group, "User:bob", AclOperation.READ),
    )
    assert list(made.values()) == [None, None, None], made
    consumer = Consumer({**as_user(node, "bob"), "group.id": group, "group.protocol": "consumer"})
    consumer.subscribe([f"^{re.escape(prefix)}.*"])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error() is None, message.error()
        assert sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == [(near, 0), (near, 1)]
        # An ACL change is a metadata change: the group resolves its regex again.
        assert list(create(AdminClient(as_user(node, "admin")), acl(ResourceType.TOPIC, far, "User:bob", AclOperation.READ)).values()) == [None]
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumer.assignment()) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error() is None, message.error()
        assert sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == [(far, 0), (far, 1), (near, 0), (near, 1)]
    finally:
        consumer.close()


def test_acls_from_one_host_apply_to_that_host(node):
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    admin, bob = AdminClient(as_user(node, "admin")), as_user(node, "bob")
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE, host="10.9.9.9")).values()) == [None]
    assert error_codes(produce(bob, topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED], "bob connects from 127.0.0.1"
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE, host="127.0.0.1")).values()) == [None]
    assert error_codes(produce(bob, topic, 1)) == [None]


def test_creating_acls_needs_alter_on_the_cluster_and_valid_bindings(node):
    admin, bob = AdminClient(as_user(node, "admin")), AdminClient(as_user(node, "bob"))
    binding = acl(ResourceType.TOPIC, "t", "User:bob", AclOperation.READ)
    (refused,) = create(bob, binding).values()
    assert refused is not None and refused.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, refused
    (refused,) = delete_refusals(bob, any_filter())
    assert refused.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, refused
    # Kafka's refusals, each binding on its own: the good one is still made.
    outcomes = create(admin, acl(ResourceType.BROKER, "other", "User:bob", AclOperation.ALTER), binding)
    bad, good = outcomes.values()
    assert bad is not None and bad.args[0].code() == KafkaError.INVALID_REQUEST, bad
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in bad.args[0].str(), bad
    assert good is None
    assert bindings(admin, any_filter(principal="User:bob")) == [("TOPIC", "t", "LITERAL", "User:bob", "*", "READ", "ALLOW")]
    # Made twice, held once.
    assert list(create(admin, binding).values()) == [None]
    assert len(bindings(admin, any_filter(principal="User:bob"))) == 1


def delete_refusals(admin: AdminClient, *filters) -> list[KafkaException]:
    refusals = []
    for future in admin.delete_acls(list(filters), request_timeout=15).values():
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=TIMEOUT_S)
        refusals.append(refused.value)
    return refusals


def test_acls_outlive_a_kill_9(node):
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    admin = AdminClient(as_user(node, "admin"))
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE)).values()) == [None]
    node.server.kill9()
    node.server.start()
    port = LISTENING.findall(node.server.run_log_text())[-1][2]
    node.sasl_bootstrap = f"127.0.0.1:{port}"
    assert bindings(AdminClient(as_user(node, "admin")), any_filter(principal="User:bob")) == [
        ("TOPIC", topic, "LITERAL", "User:bob", "*", "WRITE", "ALLOW")
    ]
    assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [None]


def test_kafka_acls_tool_adds_and_removes(node, java_classpath, tmp_path):
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    run = lambda user, *args: acl_command(java_classpath, tmp_path, node.sasl_bootstrap, user, *args)  # noqa: E731
    added = run("admin", "--add", "--allow-principal", "User:bob", "--operation", "Write", "--operation", "Describe", "--topic", topic)
    assert added.returncode == 0, added.stdout + added.stderr[-3000:]
    assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [None]
    listed = run("admin", "--list", "--topic", topic)
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in listed.stdout, listed
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)" in listed.stdout, listed
    assert "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed.stdout, listed
    # Only who may alter the cluster adds ACLs.
    denied = run("bob", "--add", "--allow-principal", "User:bob", "--operation", "All", "--topic", topic)
    assert "ClusterAuthorizationException" in denied.stdout + denied.stderr, denied
    removed = run("admin", "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    assert removed.returncode == 0, removed.stdout + removed.stderr[-3000:]
    assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    left = bindings(AdminClient(as_user(node, "admin")), any_filter(principal="User:bob"))
    assert left == [("TOPIC", topic, "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW")], left


# --- A 3-node cluster: the ACLs go through the metadata group ----------------------------------------

# Anonymous clients may run the cluster and see its topics, but write none: writing is an ACL's.
CLUSTER_RULES = """
[authorization]
rules = [
  { principal = "User:ANONYMOUS", resource = "cluster", operations = ["all"] },
  { principal = "User:ANONYMOUS", resource = "topic", operations = ["describe", "create"] },
  { principal = "User:ANONYMOUS", resource = "group", operations = ["describe"] },
]
"""


@pytest.fixture
def secured_cluster(corral_factory, request):
    from cluster import Cluster

    c = Cluster(corral_factory, size=3, relays=False, extra_config=CLUSTER_RULES)
    request.addfinalizer(c.close)
    return c.start()


def produce_to(bootstrap: str, topic: str, partition: int) -> int | None:
    """One record to one partition: None when acknowledged, the error code otherwise."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "retries": 0})
    producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert len(outcome) == 1, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def produce_until(bootstrap: str, topic: str, partition: int, wanted: int | None, seconds: float = 30.0) -> int | None:
    """`produce_to` again until it answers `wanted` or `seconds` pass; the last answer."""
    deadline = time.monotonic() + seconds
    while (code := produce_to(bootstrap, topic, partition)) != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    return code


def test_acls_reach_every_node_and_one_that_was_down(secured_cluster):
    cluster = secured_cluster
    topic = f"acl-{uuid.uuid4().hex[:6]}"
    leaders = cluster.create_topic(topic, 3)
    assert sorted(leaders) == [0, 1, 2], leaders
    assert [produce_to(cluster.bootstrap, topic, p) for p in range(3)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3

    # Made through one node, checked by each partition's leader. The answer comes once the
    # controller has it committed and the node asked has applied it; the others apply it as they
    # read the log, a moment later (as Kafka's brokers do).
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka[1]}"})
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:ANONYMOUS", AclOperation.WRITE)).values()) == [None]
    assert [produce_until(cluster.bootstrap, topic, p, None) for p in range(3)] == [None] * 3

    # A DENY made while one node is down reaches it when it is back.
    down = leaders[2]
    cluster.nodes[down].kill9()
    # The admin client sends CreateAcls to the controller Metadata names: once the two left agree
    # on one (a new election if the killed node led the metadata group).
    alive = controller(cluster, among=[i for i in range(3) if i != down])
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka[alive]}"})
    deny = acl(ResourceType.TOPIC, topic, "User:ANONYMOUS", AclOperation.WRITE, AclPermissionType.DENY)
    assert list(create(admin, deny).values()) == [None]
    cluster.nodes[down].restart()
    direct = f"127.0.0.1:{cluster.kafka[down]}"
    assert produce_until(cluster.bootstrap, topic, 2, KafkaError.TOPIC_AUTHORIZATION_FAILED) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    listed = bindings(AdminClient({"bootstrap.servers": direct}), any_filter(permission_type=AclPermissionType.DENY))
    assert listed == [("TOPIC", topic, "LITERAL", "User:ANONYMOUS", "*", "WRITE", "DENY")], listed

    # A raw DeleteAcls to a node that does not lead the metadata group: forwarded, matched where
    # applied, and the node asked lists what was removed.
    follower = next(i for i in range(3) if i != controller(cluster))
    (removed,) = raw.delete(f"127.0.0.1:{cluster.kafka[follower]}", raw.acl_filter(kind=raw.TOPIC, name=topic, permission=raw.DENY))
    assert removed[:2] == (0, None) and [acl[:7] for acl in removed[2]] == [(raw.TOPIC, topic, raw.LITERAL, "User:ANONYMOUS", "*", raw.WRITE, raw.DENY)], removed
    assert produce_until(cluster.bootstrap, topic, 2, None) is None


# --- KafkaJS --------------------------------------------------------------------------------------


def run_kafkajs(node: str, bootstrap: str, step: str, topic: str) -> dict:
    config = {
        "brokers": [bootstrap],
        "sasl": {"mechanism": "scram-sha-256", "username": "admin", "password": USERS["admin"]},
        "topic": topic,
        "principal": "User:bob",
        "step": step,
    }
    run = subprocess.run([node, str(JS_DIR / "kafkajs_acls.js"), json.dumps(config)], cwd=JS_DIR, capture_output=True, text=True, timeout=120)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and lines, f"kafkajs_acls.js exited {run.returncode}\n{run.stdout}\n{run.stderr[-4000:]}"
    return json.loads(lines[-1])


def test_kafkajs_creates_describes_and_deletes(node, kafkajs):
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    made = run_kafkajs(kafkajs, node.sasl_bootstrap, "create", topic)
    assert made["described"] == [
        ["TOPIC", topic, "LITERAL", "User:bob", "*", "DELETE", "DENY"],
        ["TOPIC", topic, "LITERAL", "User:bob", "*", "WRITE", "ALLOW"],
    ], made
    assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [None]
    gone = run_kafkajs(kafkajs, node.sasl_bootstrap, "delete", topic)
    assert gone["deleted"] == made["described"] and gone["described"] == [], gone
    assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# --- kafka-python ---------------------------------------------------------------------------------


def test_kafka_python_creates_describes_and_deletes(node):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    admin = KafkaAdminClient(
        bootstrap_servers=node.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"],
        request_timeout_ms=15000,
    )
    try:
        pattern = ResourcePattern(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        write = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        made = admin.create_acls([write])
        assert made["failed"] == [] and len(made["succeeded"]) == 1, made
        assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [None]

        bobs = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        acls, error = admin.describe_acls(bobs)
        assert error.errno == 0 and [(a.principal, a.operation, a.permission_type, a.resource_pattern.resource_name) for a in acls] == [
            ("User:bob", ACLOperation.WRITE, ACLPermissionType.ALLOW, topic)
        ], (acls, error)

        ((_, removed, error),) = admin.delete_acls([bobs])
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in removed] == [topic], (removed, error)
        assert error_codes(produce(as_user(node, "bob"), topic, 1)) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        admin.close()


def idempotent_produce(config: dict, topic: str) -> int | None:
    """One record from a new idempotent producer: None when acknowledged, else the error code.
    confluent-kafka raises librdkafka's fatal error from `flush`, inside the delivery callback
    (a SystemError whose context is the KafkaException)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**config, "enable.idempotence": True, "message.timeout.ms": 10000})
    try:
        producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(20)
    except (KafkaException, SystemError) as e:
        raised = e if isinstance(e, KafkaException) else (e.__context__ or e.__cause__)
        assert isinstance(raised, KafkaException), e
        return raised.args[0].code()
    assert len(outcome) == 1, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def test_an_idempotent_producer_needs_a_write_no_deny_dominates(node):
    """InitProducerId of an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
    some topic (KIP-679), weighed as Kafka weighs it: a DENY on a prefix of the ALLOW's name
    overrides it."""
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    admin, bob = AdminClient(as_user(node, "admin")), as_user(node, "bob")
    assert list(create(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE)).values()) == [None]
    assert idempotent_produce(bob, topic) is None
    deny = acl(ResourceType.TOPIC, "orders.", "User:bob", AclOperation.WRITE, AclPermissionType.DENY, pattern=ResourcePatternType.PREFIXED)
    assert list(create(admin, deny).values()) == [None]
    assert idempotent_produce(bob, topic) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
