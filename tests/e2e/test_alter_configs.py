"""Changing a topic's configs: IncrementalAlterConfigs and AlterConfigs, with real clients.

The scenarios with a `target` run on corral, on Apache Kafka 4.4 (the reference: the same calls,
the same answers), on corral in front of Kafka (the upstream keeps topic configs, and corral
passes the change on) and through a sidecar. The change must show in DescribeConfigs and take
effect: a `max.message.bytes` lowered makes a larger record fail with MSG_SIZE_TOO_LARGE. The
others cover a restart, three nodes, raw requests sent to Kafka and to corral, Kafka's
kafka-configs tool and kafka-python.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

import clients
import kafkawire as kw
from apache_kafka import TARGETS, target_bootstrap
from test_java_client import JVM, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)

T = clients.TIMEOUT_S
# How long a change may take to reach the partitions (Kafka applies it on each broker from its
# metadata log; corral before it answers).
EFFECT_S = 20.0
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


@pytest.fixture(params=TARGETS)
def target(request, corral_factory, apache_kafka, apache_kafka_classic) -> str:
    return target_bootstrap(request.param, corral_factory, apache_kafka, apache_kafka_classic)


def incremental(topic: str, *changes: tuple[str, str | None, AlterConfigOpType]) -> ConfigResource:
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, value, op in changes]
    return ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)


def alter(admin, resource: ConfigResource, validate_only: bool = False) -> None:
    admin.incremental_alter_configs([resource], request_timeout=T, validate_only=validate_only)[resource].result(T)


def refusal(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(T)
    return info.value.args[0]


def described(admin, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource], request_timeout=T)[resource].result(T)


def set_on_topic(admin, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (Kafka's DYNAMIC_TOPIC_CONFIG)."""
    return {name: e.value for name, e in described(admin, topic).items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def wait_for_configs(admin, topic: str, wanted: dict[str, str | None]) -> dict[str, str]:
    """The topic's set configs once each key of `wanted` has its value there (None: not set), or
    as they are after EFFECT_S."""
    deadline = time.monotonic() + EFFECT_S
    while True:
        current = set_on_topic(admin, topic)
        if all(current.get(k) == v for k, v in wanted.items()) or time.monotonic() > deadline:
            return current
        time.sleep(0.2)


def produce_one(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    outcome: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "logger": clients.RDKAFKA_LOG})
    producer.produce(topic, b"x" * size, partition=0, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(T)
    assert outcome, "no delivery report"
    return outcome[0]


def first_refusal(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    """Produces `size` bytes until the broker refuses them (a change reaches every partition
    within EFFECT_S); the refusal, or None."""
    deadline = time.monotonic() + EFFECT_S
    while True:
        err = produce_one(bootstrap, topic, size)
        if err is not None or time.monotonic() > deadline:
            return err
        time.sleep(0.3)


def test_incremental_changes_show_and_take_effect(target):
    admin = clients.admin_client(target)
    topic = f"alter-{uuid.uuid4().hex[:8]}"
    clients.create_topic(target, topic, partitions=2, config={"retention.ms": "3600000"})
    assert produce_one(target, topic, 5000) is None

    alter(
        admin,
        incremental(
            topic,
            ("max.message.bytes", "2000", AlterConfigOpType.SET),
            ("segment.ms", "600000", AlterConfigOpType.SET),
            ("retention.ms", None, AlterConfigOpType.DELETE),
        ),
    )
    assert wait_for_configs(admin, topic, {"max.message.bytes": "2000", "segment.ms": "600000"}) == {
        "max.message.bytes": "2000",
        "segment.ms": "600000",
    }
    entries = described(admin, topic)
    assert entries["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, "a deleted key is back at its default"
    # Every topic config can be changed, so none is reported read-only (kafka-python skips those).
    assert not [name for name, e in entries.items() if e.is_read_only]

    err = first_refusal(target, topic, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert produce_one(target, topic, 100) is None

    # Deleting the key lifts the limit again.
    alter(admin, incremental(topic, ("max.message.bytes", None, AlterConfigOpType.DELETE)))
    assert wait_for_configs(admin, topic, {"max.message.bytes": None}) == {"segment.ms": "600000"}
    deadline = time.monotonic() + EFFECT_S
    while (err := produce_one(target, topic, 5000)) is not None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert err is None, err


def test_validate_only_changes_nothing(target):
    admin = clients.admin_client(target)
    topic = f"alter-{uuid.uuid4().hex[:8]}"
    clients.create_topic(target, topic)
    alter(admin, incremental(topic, ("retention.ms", "1234567", AlterConfigOpType.SET)), validate_only=True)
    time.sleep(1.0)
    assert "retention.ms" not in set_on_topic(admin, topic)


@pytest.mark.parametrize(
    "change, code",
    [
        (("no.such.config", "1", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG),
        (("retention.ms", "soon", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG),
        (("retention.ms", "1000", AlterConfigOpType.APPEND), KafkaError.INVALID_CONFIG),
        (("segment.ms", "1000", AlterConfigOpType.SUBTRACT), KafkaError.INVALID_CONFIG),
    ],
    ids=["unknown-key", "not-a-number", "append-to-a-number", "subtract-from-a-number"],
)
def test_bad_changes_are_refused_as_kafka_refuses_them(target, change, code):
    admin = clients.admin_client(target)
    topic = f"alter-{uuid.uuid4().hex[:8]}"
    clients.create_topic(target, topic)
    resource = incremental(topic, ("retention.bytes", "100000000", AlterConfigOpType.SET), change)
    err = refusal(admin.incremental_alter_configs([resource], request_timeout=T)[resource])
    assert err.code() == code, err
    time.sleep(0.5)
    assert set_on_topic(admin, topic) == {}, "a refused resource changes none of its keys"


def test_an_unknown_topic_is_refused(target):
    admin = clients.admin_client(target)
    resource = incremental(f"missing-{uuid.uuid4().hex[:8]}", ("retention.ms", "1000", AlterConfigOpType.SET))
    err = refusal(admin.incremental_alter_configs([resource], request_timeout=T)[resource])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err


def test_alter_configs_replaces_the_topics_set_configs(target):
    """The older AlterConfigs: the keys it names become the topic's whole set."""
    admin = clients.admin_client(target)
    topic = f"alter-{uuid.uuid4().hex[:8]}"
    clients.create_topic(target, topic, config={"retention.ms": "3600000", "max.message.bytes": "3000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "900000"})
    admin.alter_configs([resource], request_timeout=T)[resource].result(T)
    deadline = time.monotonic() + EFFECT_S
    while (current := set_on_topic(admin, topic)) != {"segment.ms": "900000"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert current == {"segment.ms": "900000"}


def test_configs_survive_a_kill_and_restart(corral_factory):
    server = corral_factory()
    admin = clients.admin_client(server.bootstrap)
    topic = "kept-configs"
    clients.create_topic(server.bootstrap, topic)
    alter(admin, incremental(topic, ("max.message.bytes", "2000", AlterConfigOpType.SET)))
    server.kill9()
    server.restart()
    admin = clients.admin_client(server.bootstrap)
    assert set_on_topic(admin, topic) == {"max.message.bytes": "2000"}
    err = produce_one(server.bootstrap, topic, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err


def test_a_change_on_one_node_reaches_every_node(cluster):
    """Three nodes: the change made through one node shows on the others, and every node holding a
    partition of the topic enforces it."""
    topic = "cluster-configs"
    leaders = cluster.create_topic(topic, 6, via=0)
    assert sorted(set(leaders)) == [0, 1, 2], leaders
    bootstraps = [f"127.0.0.1:{port}" for port in cluster.kafka]
    alter(clients.admin_client(bootstraps[1]), incremental(topic, ("max.message.bytes", "2000", AlterConfigOpType.SET)))
    for bootstrap in bootstraps:
        assert wait_for_configs(clients.admin_client(bootstrap), topic, {"max.message.bytes": "2000"}) == {"max.message.bytes": "2000"}
    producer = Producer({"bootstrap.servers": bootstraps[2], "acks": "all", "logger": clients.RDKAFKA_LOG})
    for size in (5000, 100):
        outcomes: list = []
        for partition in range(6):
            producer.produce(topic, b"x" * size, partition=partition, on_delivery=lambda err, msg: outcomes.append((msg.partition(), err)))
        producer.flush(T)
        assert sorted(p for p, _ in outcomes) == list(range(6)), outcomes
        if size > 2000:
            assert all(err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE for _, err in outcomes), outcomes
        else:
            assert all(err is None for _, err in outcomes), outcomes


def test_broker_settings_are_refused_as_static(corral_factory):
    server = corral_factory()
    admin = clients.admin_client(server.bootstrap)
    broker = str(admin.describe_cluster(request_timeout=T).result(T).nodes[0].id)
    resource = ConfigResource(
        ResourceType.BROKER, broker, incremental_configs=[ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    )
    err = refusal(admin.incremental_alter_configs([resource], request_timeout=T)[resource])
    assert err.code() == KafkaError.INVALID_REQUEST, err
    assert "config file" in err.str(), err


def test_internal_offsets_topic_is_refused(corral_factory):
    server = corral_factory()
    admin = clients.admin_client(server.bootstrap)
    resource = incremental("__consumer_offsets", ("retention.ms", "1000", AlterConfigOpType.SET))
    err = refusal(admin.incremental_alter_configs([resource], request_timeout=T)[resource])
    assert err.code() == KafkaError.INVALID_REQUEST, err


INCREMENTAL_ALTER_CONFIGS = 44
ALTER_CONFIGS = 33
TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1


def incremental_v0(correlation_id: int, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> bytes:
    body = kw.array(
        [kw.i8(kind) + kw.string(name) + kw.array([kw.string(k) + kw.i8(op) + kw.string(v) for k, op, v in configs]) for kind, name, configs in resources]
    )
    return kw.request(INCREMENTAL_ALTER_CONFIGS, 0, correlation_id, body + kw.i8(0))


def alter_v0(correlation_id: int, resources: list[tuple[int, str, list[tuple[str, str | None]]]]) -> bytes:
    body = kw.array([kw.i8(kind) + kw.string(name) + kw.array([kw.string(k) + kw.string(v) for k, v in configs]) for kind, name, configs in resources])
    return kw.request(ALTER_CONFIGS, 0, correlation_id, body + kw.i8(0))


def answered(conn: kw.Conn, frame: bytes) -> list[tuple[int, int, str]]:
    """(error code, resource type, resource name) of each resource answered, in order (both APIs'
    v0 responses have this layout)."""
    conn.send(frame)
    r = kw.Reader(conn.recv_frame())
    r.take("i")  # correlation id
    r.take("i")  # throttle_time_ms
    out = []
    for _ in range(r.take("i")):
        code = r.take("h")
        r.string()  # message
        out.append((code, r.take("b"), r.string()))
    return out


def test_edge_cases_are_answered_as_kafka_answers_them(corral_factory, apache_kafka):
    """Raw requests that no client library sends, to Kafka 4.4 and to corral: a resource named
    twice, a key named twice, a null value to set, a value with a delete."""
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    cases = {
        "resource twice": incremental_v0(1, [(TOPIC, topic, [("retention.ms", SET, "1000")]), (TOPIC, topic, [("segment.ms", SET, "700000")])]),
        "key twice": incremental_v0(2, [(TOPIC, topic, [("retention.ms", SET, "1000"), ("retention.ms", SET, "2000")])]),
        "null to set": incremental_v0(3, [(TOPIC, topic, [("retention.ms", SET, None)])]),
        "delete with a value": incremental_v0(5, [(TOPIC, topic, [("retention.ms", DELETE, "1000")])]),
        "legacy key twice": alter_v0(7, [(TOPIC, topic, [("retention.ms", "1000"), ("retention.ms", "2000")])]),
        "legacy null value": alter_v0(8, [(TOPIC, topic, [("retention.ms", None)])]),
    }
    answers = {}
    for kind, bootstrap in (("kafka", apache_kafka.bootstrap), ("corral", corral_factory().bootstrap)):
        clients.create_topic(bootstrap, topic)
        conn = kw.Conn(bootstrap.split(",")[0])
        try:
            answers[kind] = {case: answered(conn, frame) for case, frame in cases.items()}
        finally:
            conn.close()
    assert answers["corral"] == answers["kafka"]
    # What Kafka answers, so that a change of it shows as such.
    assert answers["kafka"]["resource twice"] == [(42, TOPIC, topic), (42, TOPIC, topic)]
    assert answers["kafka"]["key twice"] == [(42, TOPIC, topic)]


@pytest.mark.parametrize("kind", ["corral", "corral-upstream"])
def test_requests_kafka_fails_on_get_invalid_request(kind, corral_factory, apache_kafka, apache_kafka_classic):
    """Kafka 4.4 does not answer these well: an unknown operation fails in its controller
    (UNKNOWN_SERVER_ERROR, and the controller gives up its leadership), and AlterConfigs naming a
    resource twice gets no answer at all. corral answers INVALID_REQUEST, and in front of Kafka
    does not pass them on."""
    bootstrap = target_bootstrap(kind, corral_factory, apache_kafka, apache_kafka_classic)
    topic = f"raw-edge-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic)
    conn = kw.Conn(bootstrap)
    try:
        assert answered(conn, incremental_v0(1, [(TOPIC, topic, [("retention.ms", 9, "1000")])])) == [(42, TOPIC, topic)]
        twice = alter_v0(2, [(TOPIC, topic, [("retention.ms", "1000")]), (TOPIC, topic, [("segment.ms", "700000")])])
        assert answered(conn, twice) == [(42, TOPIC, topic), (42, TOPIC, topic)]
        # A resource type that has no configs to change here.
        assert answered(conn, incremental_v0(3, [(16, "some-user", [("x", SET, "1")])])) == [(42, 16, "some-user")]
    finally:
        conn.close()
    assert set_on_topic(clients.admin_client(bootstrap), topic) == {}


def config_command(classpath: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """Kafka's own kafka-configs (org.apache.kafka.tools.ConfigCommand)."""
    command = [*JVM, "-cp", classpath, CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_configs_tool_alters_and_describes(kind, corral_factory, apache_kafka, java_classpath):
    bootstrap = corral_factory().bootstrap if kind == "corral" else apache_kafka.bootstrap
    topic = f"tool-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic)
    entity = ["--entity-type", "topics", "--entity-name", topic]
    added = config_command(java_classpath, bootstrap, "--alter", *entity, "--add-config", "retention.ms=86400000,max.message.bytes=4096")
    assert added.returncode == 0, added.stdout + added.stderr[-3000:]
    assert f"Completed updating config for topic {topic}." in added.stdout, added.stdout
    deadline = time.monotonic() + EFFECT_S
    while True:
        shown = config_command(java_classpath, bootstrap, "--describe", *entity)
        text = shown.stdout
        if ("retention.ms=86400000" in text and "max.message.bytes=4096" in text) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"Dynamic configs for topic {topic} are:" in text, text
    assert "retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000" in text, text
    assert "max.message.bytes=4096 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=4096" in text, text
    deleted = config_command(java_classpath, bootstrap, "--alter", *entity, "--delete-config", "retention.ms")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr[-3000:]
    bad = config_command(java_classpath, bootstrap, "--alter", *entity, "--add-config", "no.such.config=1")
    assert bad.returncode != 0
    assert "InvalidConfigurationException" in bad.stdout + bad.stderr or "no.such.config" in bad.stdout + bad.stderr, bad


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_python_alter_configs(kind, corral_factory, apache_kafka):
    """kafka-python 3 checks the keys against DescribeConfigs (those not read-only), then uses
    IncrementalAlterConfigs; told not to, it sends AlterConfigs with the topic's other set keys."""
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    bootstrap = corral_factory().bootstrap if kind == "corral" else apache_kafka.bootstrap
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    clients.create_topic(bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(T * 1000))
    confluent = clients.admin_client(bootstrap)
    try:
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})
        assert admin.alter_configs([resource]) == {"topic": {topic: "OK"}}
        assert wait_for_configs(confluent, topic, {"retention.ms": "7200000"}) == {"retention.ms": "7200000"}
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "800000"})
        assert admin.alter_configs([resource], incremental=False) == {"topic": {topic: "OK"}}
        wanted = {"retention.ms": "7200000", "segment.ms": "800000"}
        assert wait_for_configs(confluent, topic, wanted) == wanted
        with pytest.raises(ValueError, match="no.such.config"):
            admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"no.such.config": "1"})])
    finally:
        admin.close()
