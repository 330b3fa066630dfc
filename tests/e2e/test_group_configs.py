"""A consumer group's own configs (KIP-848's dynamic group configs): `consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms` and `consumer.assignment.interval.ms` on the group's GROUP
resource.

The reference cases send the same raw requests to Apache Kafka 4.4 and to corral (the fixtures
and helpers of test_kafka_reference.py) and assert the same answers: DescribeConfigs of a group,
IncrementalAlterConfigs and AlterConfigs with good and bad values, and the heartbeat interval a
member is given once its group has its own. The others cover Kafka's kafka-configs tool, the
confluent-kafka admin client, a kill -9 and restart, three nodes, authorization-free refusals and
the sidecar, whose groups its group service runs.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import clients
import groupwire as gw
import kafkawire as kw
import test_kafka_reference as reference
from apache_kafka import CORRAL_GROUP_CONFIG, corral_upstream_config, sidecar_config
from test_java_client import JVM, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)
from test_kafka_reference import Side, compare, unique
from test_kafka_reference_migration import heartbeat

# test_kafka_reference's fixture (Kafka, then a new corral); pytest finds it by this name.
sides = reference.sides

T = clients.TIMEOUT_S
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
INCREMENTAL_ALTER_CONFIGS, ALTER_CONFIGS, DESCRIBE_CONFIGS = 44, 33, 32
SESSION, HEARTBEAT, ASSIGNMENT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "consumer.assignment.interval.ms"
# Kafka applies a group config from its metadata log, a moment after it answered.
EFFECT_S = 15.0
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


def incremental_v0(corr: int, group: str, configs: list[tuple[str, int, str | None]]) -> bytes:
    entries = kw.array([kw.string(k) + kw.i8(op) + kw.string(v) for k, op, v in configs])
    return kw.request(INCREMENTAL_ALTER_CONFIGS, 0, corr, kw.array([kw.i8(GROUP) + kw.string(group) + entries]) + kw.i8(0))


def alter_v0(corr: int, group: str, configs: list[tuple[str, str]]) -> bytes:
    entries = kw.array([kw.string(k) + kw.string(v) for k, v in configs])
    return kw.request(ALTER_CONFIGS, 0, corr, kw.array([kw.i8(GROUP) + kw.string(group) + entries]) + kw.i8(0))


def parse_alter(frame: bytes) -> tuple[int, int, str | None]:
    """The correlation id, and the one resource's error code and message, of either API's v0
    response."""
    r = kw.Reader(frame)
    corr = r.take("i")
    r.take("i")  # throttle_time_ms
    assert r.take("i") == 1
    code, message = r.take("h"), r.string()
    r.take("b"), r.string()
    return corr, code, message


def describe_v1(corr: int, group: str) -> bytes:
    return kw.request(DESCRIBE_CONFIGS, 1, corr, kw.array([kw.i8(GROUP) + kw.string(group) + kw.i32(-1)]) + kw.i8(1))


def parse_describe(frame: bytes) -> tuple[int, int, dict]:
    """The correlation id, the error code, and {name: (value, read_only, source, synonyms)} of
    the consumer.* configs."""
    r = kw.Reader(frame)
    corr = r.take("i")
    r.take("i")
    assert r.take("i") == 1
    code, _message, _kind, _name = r.take("h"), r.string(), r.take("b"), r.string()
    configs = {}
    for _ in range(max(r.take("i"), 0)):
        name, value, read_only, source, _sensitive = r.string(), r.string(), r.take("b"), r.take("b"), r.take("b")
        synonyms = [(r.string(), r.string(), r.take("b")) for _ in range(r.take("i"))]
        if name.startswith("consumer."):
            configs[name] = (value, read_only, source, synonyms)
    return corr, code, configs


def change(side: Side, build, *args) -> tuple[int, str | None]:
    with gw.GroupConn(side.first) as conn:
        return conn.call(build, parse_alter, *args)[1:]


def described(side: Side, group: str) -> tuple[int, dict]:
    with gw.GroupConn(side.first) as conn:
        return conn.call(describe_v1, parse_describe, group)[1:]


def settled(side: Side, group: str, wanted: dict[str, str]) -> dict:
    """The group's described configs once they show `wanted` (Kafka applies a change a moment
    after it answered), or as they are after EFFECT_S."""
    deadline = time.monotonic() + EFFECT_S
    while True:
        code, configs = described(side, group)
        if all(configs.get(k, (None,))[0] == v for k, v in wanted.items()) or time.monotonic() > deadline:
            return {"code": code, "configs": configs}
        time.sleep(0.2)


def s_describe_and_change(side: Side) -> dict:
    group = unique("gcfg")
    out: dict = {"defaults": described(side, group)}
    out["set session"] = change(side, incremental_v0, group, [(SESSION, SET, "50000")])
    out["after set"] = settled(side, group, {SESSION: "50000"})
    out["set heartbeat and assignment"] = change(side, incremental_v0, group, [(HEARTBEAT, SET, "6000"), (ASSIGNMENT, SET, "0")])
    out["after both"] = settled(side, group, {HEARTBEAT: "6000", ASSIGNMENT: "0"})
    out["delete session"] = change(side, incremental_v0, group, [(SESSION, DELETE, None)])
    out["after delete"] = settled(side, group, {SESSION: "45000"})
    # AlterConfigs: the keys it names become the group's whole set.
    out["legacy"] = change(side, alter_v0, group, [(SESSION, "55000")])
    out["after legacy"] = settled(side, group, {SESSION: "55000", HEARTBEAT: "1000"})
    return out


def test_configs_are_described_and_changed_as_kafka_does(sides):
    heartbeat_default = ("1000", 0, 4, [("group.consumer.heartbeat.interval.ms", "1000", 4), ("group.consumer.heartbeat.interval.ms", "5000", 5)])
    compare(
        sides,
        s_describe_and_change,
        {
            "set session": (0, None),
            "legacy": (0, None),
            "after legacy": {
                "code": 0,
                "configs": {
                    SESSION: ("55000", 0, 8, [(SESSION, "55000", 8), ("group.consumer.session.timeout.ms", "45000", 5)]),
                    ASSIGNMENT: ("1000", 0, 5, [("group.consumer.assignment.interval.ms", "1000", 5)]),
                    HEARTBEAT: heartbeat_default,
                },
            },
        },
    )


def s_bad_values(side: Side) -> dict:
    group = unique("gcfg-bad")
    cases = {
        "session below its range": [(SESSION, SET, "1000")],
        "heartbeat above its range": [(HEARTBEAT, SET, "50000")],
        "assignment negative": [(ASSIGNMENT, SET, "-1")],
        "assignment above its range": [(ASSIGNMENT, SET, "999999999")],
        "not a number": [(SESSION, SET, "abc")],
        "unknown key": [("no.such.config", SET, "1")],
        "append": [(SESSION, APPEND, "1")],
        "one good, one bad": [(HEARTBEAT, SET, "6000"), (SESSION, SET, "1")],
    }
    out = {case: change(side, incremental_v0, group, configs)[0] for case, configs in cases.items()}
    out["legacy, unknown key"] = change(side, alter_v0, group, [("no.such.config", "1")])[0]
    # Nothing was changed by the refused requests.
    out["after"] = {name: value[0] for name, value in described(side, group)[1].items()}
    return out


def test_bad_values_are_refused_as_kafka_refuses_them(sides):
    invalid_config = 40
    compare(sides, s_bad_values, {"session below its range": invalid_config, "unknown key": invalid_config, "append": invalid_config})


def s_heartbeat_interval(side: Side) -> dict:
    group, topic = unique("gcfg-hb"), side.create_topic(2)
    joined = heartbeat(side.conn(group), group, "", 0, rebalance_timeout_ms=30000, subscribed_topics=[topic], owned=[])
    out: dict = {"joined": (joined.error, joined.heartbeat_interval_ms)}
    assert change(side, incremental_v0, group, [(HEARTBEAT, SET, "7000")]) == (0, None)
    deadline = time.monotonic() + EFFECT_S
    coordinator = side.conn(group)
    while True:
        beat = heartbeat(coordinator, group, joined.member_id, joined.member_epoch)
        if beat.heartbeat_interval_ms == 7000 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out["after the change"] = (beat.error, beat.heartbeat_interval_ms)
    return out


def test_a_member_gets_its_groups_heartbeat_interval(sides):
    compare(sides, s_heartbeat_interval, {"joined": (0, 1000), "after the change": (0, 7000)})


def test_configs_survive_a_kill_and_restart(corral_factory):
    server = corral_factory(config=CORRAL_GROUP_CONFIG)
    side = Side("corral", server.bootstrap)
    assert change(side, incremental_v0, "kept", [(SESSION, SET, "50000")]) == (0, None)
    server.kill9()
    server.restart()
    assert described(side, "kept")[1][SESSION][:3] == ("50000", 0, 8)


def test_a_change_through_one_node_reaches_every_node(cluster):
    bootstraps = [f"127.0.0.1:{port}" for port in cluster.kafka]
    assert change(Side("node 1", bootstraps[1]), incremental_v0, "shared", [(SESSION, SET, "50000")]) == (0, None)
    for bootstrap in bootstraps:
        deadline = time.monotonic() + EFFECT_S
        while described(Side("node", bootstrap), "shared")[1][SESSION][0] != "50000":
            assert time.monotonic() < deadline, f"{bootstrap} does not show the change"
            time.sleep(0.2)


def test_confluent_admin_alters_and_describes_a_group(corral_factory):
    bootstrap = corral_factory(config=CORRAL_GROUP_CONFIG).bootstrap
    admin = clients.admin_client(bootstrap)
    group = f"admin-{uuid.uuid4().hex[:6]}"
    entries = [ConfigEntry(HEARTBEAT, "8000", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=T)[resource].result(T)
    configs = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)], request_timeout=T)
    assert next(iter(configs.values())).result(T)[HEARTBEAT].value == "8000"
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(SESSION, "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad], request_timeout=T)[bad].result(T)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value


@pytest.mark.parametrize("kind", ["corral", "kafka"])
def test_kafka_configs_tool_on_groups(kind, corral_factory, apache_kafka, java_classpath):
    bootstrap = corral_factory(config=CORRAL_GROUP_CONFIG).bootstrap if kind == "corral" else apache_kafka.bootstrap
    group = f"tool-{uuid.uuid4().hex[:8]}"
    entity = ["--entity-type", "groups", "--entity-name", group]

    def tool(*args: str) -> subprocess.CompletedProcess:
        command = [*JVM, "-cp", java_classpath, CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)

    added = tool("--alter", *entity, "--add-config", f"{SESSION}=50000")
    assert added.returncode == 0, added.stdout + added.stderr[-3000:]
    assert f"Completed updating config for group {group}." in added.stdout, added.stdout
    deadline = time.monotonic() + EFFECT_S
    while f"{SESSION}=50000 sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{SESSION}=50000" not in (shown := tool("--describe", *entity)).stdout:
        assert time.monotonic() < deadline, shown.stdout + shown.stderr[-3000:]
        time.sleep(0.5)
    bad = tool("--alter", *entity, "--add-config", f"{SESSION}=1000")
    assert bad.returncode != 0
    assert f"{SESSION} must be in the range 45000 to 60000 inclusive." in bad.stderr, bad.stderr[-3000:]


def test_in_front_of_an_upstream_groups_are_corrals(corral_factory, apache_kafka_classic):
    """The upstream role keeps groups itself, configs included. A sidecar's groups are its group
    service's: their configs are changed and described there, through the sidecar, whether the
    service is a corral cluster or Kafka's own coordinators."""
    kafka = apache_kafka_classic.bootstrap
    front = corral_factory(config=CORRAL_GROUP_CONFIG + corral_upstream_config(kafka))
    assert change(Side("front", front.bootstrap), incremental_v0, "fronted", [(SESSION, SET, "50000")]) == (0, None)
    assert described(Side("front", front.bootstrap), "fronted")[1][SESSION][0] == "50000"

    for name, service in (("corral", front.bootstrap), ("kafka", kafka)):
        sidecar = Side("sidecar", corral_factory(config=sidecar_config(kafka, service), name=f"sidecar-{name}").bootstrap)
        group = f"through-{name}-{uuid.uuid4().hex[:6]}"
        assert change(sidecar, incremental_v0, group, [(SESSION, SET, "55000")]) == (0, None), name
        assert settled(Side(name, service), group, {SESSION: "55000"})["configs"][SESSION][:3] == ("55000", 0, 8), name
        assert settled(sidecar, group, {SESSION: "55000"})["configs"][SESSION][:3] == ("55000", 0, 8), name
        # The service's own checks answer.
        assert change(sidecar, incremental_v0, group, [(SESSION, SET, "1")])[0] == 40, name
