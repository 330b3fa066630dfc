"""Authorization rules ([authorization]) with confluent-kafka and kafka-python, and the rules as
ACL bindings (DescribeAcls) through confluent-kafka and Kafka's kafka-acls tool. ACLs made with
CreateAcls are in test_acls.py.

Users authenticate with SCRAM on a SASL_PLAINTEXT listener: `alice` may read and write the
`payments.` topics and use the `payments-` groups, `ops` may describe every group (so it may
read `__consumer_offsets`, as Burrow does), `admin` is a super user, and `bob` has no rule. The
PLAINTEXT listener's clients are `User:ANONYMOUS`, which no rule names. Each denied request gets
Kafka's error, and the listing APIs show only what the principal may describe.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from security import SaslNode
from test_java_client import JVM, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"

USERS = {"alice": "alice-secret", "bob": "bob-secret", "ops": "ops-secret", "admin": "admin-secret"}
RULES = """
[authorization]
super_users = ["User:admin"]
rules = [
  { principal = "User:alice", resource = "topic", prefix = "payments.", operations = ["read", "write"] },
  { principal = "User:alice", resource = "group", prefix = "payments-", operations = ["read"] },
  { principal = "User:ops", resource = "group", operations = ["describe"] },
  { principal = "User:ops", resource = "topic", operations = ["describe"] },
]
"""


@pytest.fixture
def node(corral_factory, corral_bin, tmp_path):
    return SaslNode(corral_factory, corral_bin, tmp_path, USERS, "[groups]\ninitial_rebalance_delay_ms = 100\n" + RULES)


def as_user(node, user: str) -> dict:
    return node.as_user(user)


def create_topics(node, *names: str) -> None:
    admin = AdminClient(as_user(node, "admin"))
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names], request_timeout=15).values():
        future.result(timeout=20)


def produce(config: dict, topic: str, count: int = 10) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(20)
    return outcomes


def consume_error(config: dict, topic: str, group: str, seconds: float = 15.0) -> KafkaError | None:
    """The first error a group consumer gets, or None once it received a record."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            return message.error()
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def test_rules_allow_and_deny_with_kafka_errors(node):
    topic, other = f"payments.{uuid.uuid4().hex[:6]}", f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic, other)
    alice, bob = as_user(node, "alice"), as_user(node, "bob")

    assert produce(alice, topic) == [None] * 10
    assert consume_error(alice, topic, "payments-1") is None

    denied = produce(bob, topic, 1)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], denied
    assert denied[0].str() == "Broker: Topic authorization failed"
    denied = produce(alice, other, 1)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], denied

    error = consume_error(alice, topic, "orders-group")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    error = consume_error(bob, topic, "payments-1")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error

    # Committing to a group alice may use, for a topic she may not read.
    consumer = Consumer({**alice, "group.id": "payments-2"})
    with pytest.raises(KafkaException) as refused:
        consumer.commit(offsets=[TopicPartition(other, 0, 1)], asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused.value
    consumer.close()


def test_changing_configs_needs_alter_configs(node):
    """IncrementalAlterConfigs of a topic needs ALTER_CONFIGS on it (alice may read and write
    payments.*, not change their configs); of the broker, on the cluster."""
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    change = [ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=change)
    admin, alice = AdminClient(as_user(node, "admin")), AdminClient(as_user(node, "alice"))
    with pytest.raises(KafkaException) as refused:
        alice.incremental_alter_configs([resource], request_timeout=15)[resource].result(20)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused.value
    broker_id = str(admin.describe_cluster(request_timeout=15).result(20).nodes[0].id)
    broker = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=change)
    with pytest.raises(KafkaException) as refused:
        alice.incremental_alter_configs([broker], request_timeout=15)[broker].result(20)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, refused.value

    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(20)
    entries = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15)
    assert next(iter(entries.values())).result(20)["retention.ms"].value == "7200000"


def test_group_configs_need_alter_configs_on_the_group(node):
    """A group's own configs: ALTER_CONFIGS on the group to change them (alice may read her
    groups, not configure them), DESCRIBE_CONFIGS to see them."""
    group = f"payments-{uuid.uuid4().hex[:6]}"
    change = [ConfigEntry("consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=change)
    admin, alice = AdminClient(as_user(node, "admin")), AdminClient(as_user(node, "alice"))
    with pytest.raises(KafkaException) as refused:
        alice.incremental_alter_configs([resource], request_timeout=15)[resource].result(20)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused.value
    plain = ConfigResource(ResourceType.GROUP, group)
    with pytest.raises(KafkaException) as refused:
        alice.describe_configs([plain], request_timeout=15)[plain].result(20)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused.value
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(20)
    described = admin.describe_configs([plain], request_timeout=15)[plain].result(20)
    assert described["consumer.heartbeat.interval.ms"].value == "6000"


def test_deleting_records_needs_delete(node):
    """DeleteRecords needs DELETE on the topic: alice may read and write payments.*, not cut them."""
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    producer = Producer(as_user(node, "alice"))
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0
    admin, alice = AdminClient(as_user(node, "admin")), AdminClient(as_user(node, "alice"))
    wanted = [TopicPartition(topic, 0, 1)]
    with pytest.raises(KafkaException) as refused:
        alice.delete_records(wanted, request_timeout=15)[wanted[0]].result(20)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused.value
    assert admin.delete_records(wanted, request_timeout=15)[wanted[0]].result(20).low_watermark == 1


def test_listings_show_only_what_may_be_described(node):
    topic, other = f"payments.{uuid.uuid4().hex[:6]}", f"orders.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic, other)
    assert produce(as_user(node, "alice"), topic, 1) == [None]
    assert consume_error(as_user(node, "alice"), topic, "payments-list") is None
    admin_view = AdminClient(as_user(node, "admin"))
    # A group alice may not see, made by the super user.
    consumer = Consumer({**as_user(node, "admin"), "group.id": "orders-list"})
    consumer.commit(offsets=[TopicPartition(other, 0, 0)], asynchronous=False)
    consumer.close()

    alice = AdminClient(as_user(node, "alice"))
    assert set(alice.list_topics(timeout=15).topics) == {topic}
    metadata = alice.list_topics(topic=other, timeout=15)
    assert metadata.topics[other].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(admin_view.list_topics(timeout=15).topics) >= {topic, other, "__consumer_offsets"}

    groups = {g.group_id for g in alice.list_consumer_groups().result(timeout=15).valid}
    assert "orders-list" not in groups and "payments-list" in groups, groups
    described = alice.describe_consumer_groups(["payments-list", "orders-list"], include_authorized_operations=True)
    ops = described["payments-list"].result(timeout=15).authorized_operations
    assert set(ops) == {AclOperation.READ, AclOperation.DESCRIBE}, ops
    with pytest.raises(KafkaException) as refused:
        described["orders-list"].result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # CREATE is nobody's but the super user's.
    created = alice.create_topics([NewTopic(f"payments.new-{uuid.uuid4().hex[:4]}", 1, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as refused:
        next(iter(created.values())).result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consumer_offsets_needs_every_group(node):
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    assert produce(as_user(node, "alice"), topic, 1) == [None]
    assert consume_error(as_user(node, "alice"), topic, "payments-burrow") is None
    # ops describes every group: it reads the group records, as Burrow does.
    ops = Consumer({**as_user(node, "ops"), "group.id": "unused", "enable.auto.commit": False})
    ops.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(50)])
    records = 0
    deadline = time.monotonic() + 15
    while records == 0 and time.monotonic() < deadline:
        message = ops.poll(0.5)
        if message is not None and message.error() is None:
            records += 1
    ops.close()
    assert records > 0
    # alice describes some groups only: no member list of other groups for her.
    alice = AdminClient(as_user(node, "alice"))
    metadata = alice.list_topics(topic="__consumer_offsets", timeout=15)
    assert metadata.topics["__consumer_offsets"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_anonymous_clients_see_nothing(node):
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    anonymous = AdminClient({"bootstrap.servers": node.server.bootstrap})
    assert anonymous.list_topics(timeout=15).topics == {}
    denied = produce({"bootstrap.servers": node.server.bootstrap}, topic, 1)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], denied


def test_kafka_python_reports_the_denials(node):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)

    def options(user):
        return dict(
            bootstrap_servers=node.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=user,
            sasl_plain_password=USERS[user],
        )

    producer = KafkaProducer(**options("bob"), max_block_ms=10000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send(topic, b"x").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(topic, **options("bob"), group_id="payments-kp", consumer_timeout_ms=10000)
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10000)
        consumer.poll(timeout_ms=10000)
    consumer.close()

    # DescribeLogDirs needs DESCRIBE on the cluster. Refused, the answer holds no directory and
    # CLUSTER_AUTHORIZATION_FAILED, which kafka-python does not look at.
    for user, listed in (("bob", []), ("admin", [topic])):
        admin = KafkaAdminClient(**options(user), request_timeout_ms=15000)
        try:
            (broker,) = admin.describe_log_dirs([topic])
            assert [t["name"] for d in broker["log_dirs"] for t in d["topics"]] == listed, broker
        finally:
            admin.close()


# --- DescribeAcls: the rules as Kafka's ACL bindings ------------------------------------------------


def any_filter(**fields) -> AclBindingFilter:
    args = {
        "restype": ResourceType.ANY, "name": None, "resource_pattern_type": ResourcePatternType.ANY, "principal": None,
        "host": None, "operation": AclOperation.ANY, "permission_type": AclPermissionType.ANY,
    } | fields  # fmt: skip
    return AclBindingFilter(**args)


def bindings(admin: AdminClient, f: AclBindingFilter) -> list[tuple]:
    found = admin.describe_acls(f, request_timeout=15).result(timeout=20)
    return sorted((b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name, b.permission_type.name) for b in found)


def test_describe_acls_lists_the_rules(node):
    admin = AdminClient(as_user(node, "admin"))
    everything = bindings(admin, any_filter())
    assert everything == sorted([
        ("TOPIC", "payments.", "PREFIXED", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "payments.", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW"),
        ("GROUP", "payments-", "PREFIXED", "User:alice", "*", "READ", "ALLOW"),
        ("GROUP", "*", "LITERAL", "User:ops", "*", "DESCRIBE", "ALLOW"),
        ("TOPIC", "*", "LITERAL", "User:ops", "*", "DESCRIBE", "ALLOW"),
    ]), everything  # fmt: skip
    # What applies to one topic (MATCH): its prefixes and the wildcard.
    matching = bindings(admin, any_filter(restype=ResourceType.TOPIC, name="payments.eu", resource_pattern_type=ResourcePatternType.MATCH))
    assert [(b[1], b[3], b[5]) for b in matching] == [("*", "User:ops", "DESCRIBE"), ("payments.", "User:alice", "READ"), ("payments.", "User:alice", "WRITE")], matching
    # One principal's; one operation's; no DENY rules.
    assert {b[3] for b in bindings(admin, any_filter(principal="User:ops"))} == {"User:ops"}
    assert bindings(admin, any_filter(operation=AclOperation.WRITE)) == [("TOPIC", "payments.", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW")]
    assert bindings(admin, any_filter(permission_type=AclPermissionType.DENY)) == []
    # bob may not describe the cluster: librdkafka drops DescribeAcls' error code (the Java
    # client's exceptions are asserted below), so he sees an empty listing.
    assert bindings(AdminClient(as_user(node, "bob")), any_filter()) == []


def kafka_tool(classpath: str, directory, bootstrap: str, user: str | None, main: str, *args: str) -> subprocess.CompletedProcess:
    """One of Kafka's own tools (`main`), as `user` over SCRAM (None: PLAINTEXT, no login)."""
    command = [*JVM, "-cp", classpath, main, "--bootstrap-server", bootstrap]
    if user is not None:
        props = directory / f"{user}.properties"
        props.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{USERS[user]}";\n'
        )
        command += ["--command-config", str(props)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def acl_command(classpath: str, directory, bootstrap: str, user: str | None, *args: str) -> subprocess.CompletedProcess:
    """Kafka's own kafka-acls (org.apache.kafka.tools.AclCommand)."""
    return kafka_tool(classpath, directory, bootstrap, user, ACL_COMMAND, *args)


def test_kafka_log_dirs_tool_needs_describe_on_the_cluster(node, java_classpath, tmp_path):
    topic = f"payments.{uuid.uuid4().hex[:6]}"
    create_topics(node, topic)
    tool = "org.apache.kafka.tools.LogDirsCommand"
    denied = kafka_tool(java_classpath, tmp_path, node.sasl_bootstrap, "bob", tool, "--describe", "--topic-list", topic)
    assert "ClusterAuthorizationException" in denied.stdout + denied.stderr, denied
    shown = kafka_tool(java_classpath, tmp_path, node.sasl_bootstrap, "admin", tool, "--describe", "--topic-list", topic)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f'"partition":"{topic}-0"' in shown.stdout, shown.stdout


def test_kafka_acls_tool_lists_the_rules(node, java_classpath, tmp_path):
    listed = acl_command(java_classpath, tmp_path, node.sasl_bootstrap, "admin", "--list", "--topic", "payments.eu", "--resource-pattern-type", "match")
    assert listed.returncode == 0, listed.stderr[-3000:]
    text = listed.stdout
    assert "ResourcePattern(resourceType=TOPIC, name=payments., patternType=PREFIXED)" in text, text
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in text, text
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in text, text
    assert "ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)" in text, text
    assert "(principal=User:ops, host=*, operation=DESCRIBE, permissionType=ALLOW)" in text, text
    assert "resourceType=GROUP" not in text, text
    # Describing ACLs needs DESCRIBE on the cluster, as in Kafka.
    denied = acl_command(java_classpath, tmp_path, node.sasl_bootstrap, "bob", "--list")
    assert "ClusterAuthorizationException: Cluster authorization failed." in denied.stdout + denied.stderr, denied


def test_kafka_acls_tool_without_rules_is_security_disabled(corral_factory, java_classpath, tmp_path):
    server = corral_factory()
    listed = acl_command(java_classpath, tmp_path, server.bootstrap, None, "--list")
    assert "SecurityDisabledException: No Authorizer is configured." in listed.stdout + listed.stderr, listed
    added = acl_command(java_classpath, tmp_path, server.bootstrap, None, "--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "t")
    assert "SecurityDisabledException: No Authorizer is configured." in added.stdout + added.stderr, added
