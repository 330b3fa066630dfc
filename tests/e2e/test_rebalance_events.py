"""Every rebalance is seen with what started it: confluent-kafka members (classic and KIP-848)
join, leave and crash, and the coordinator's log line and `/metrics` name each rebalance's trigger.
"""

from __future__ import annotations

import re

from confluent_kafka import ConsumerGroupState

import clients
from groups import GROUP_CONFIG, unique, wait_group, wait_owned_exactly_once, wait_until

SESSION_MS = 2000
# KIP-848 members are told the broker's session timeout; keep it short for the crash.
CONFIG = GROUP_CONFIG + "consumer_session_timeout_ms = 2000\nconsumer_heartbeat_interval_ms = 300\n"


def rebalances(server, kind: str, trigger: str) -> float:
    status, text = server.http_get("/metrics")
    assert status == 200
    pattern = rf'^corral_rebalances_total{{[^}}]*kind="{kind}"[^}}]*trigger="{trigger}"[^}}]*}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def completed_lines(server, group: str) -> list[str]:
    return [line for line in server.log_text().splitlines() if "rebalance completed" in line and f"group={group}" in line]


def member(members, name: str, bootstrap: str, group: str, topic: str, **extra):
    conf = dict(client="confluent", bootstrap=bootstrap, group=group, topics=[topic], client_id=f"e2e-{name}")
    conf.update(extra)
    return members(name, **conf)


def test_classic_rebalances_name_their_trigger(corral_factory, members):
    server = corral_factory(config=CONFIG)
    b, topic, group = server.bootstrap, unique("events"), unique("events-group")
    clients.create_topic(b, topic, partitions=4)
    parts = {(topic, p) for p in range(4)}
    timeouts = dict(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200)

    first = member(members, "first", b, group, topic, **timeouts)
    wait_owned_exactly_once([first], parts)
    wait_until(lambda: rebalances(server, "classic", "group_created") >= 1, "a group_created rebalance in /metrics")
    second = member(members, "second", b, group, topic, **timeouts)
    wait_owned_exactly_once([first, second], parts)
    wait_until(lambda: rebalances(server, "classic", "member_joined") >= 1, "a member_joined rebalance in /metrics")
    second.close()
    wait_owned_exactly_once([first], parts)
    wait_until(lambda: rebalances(server, "classic", "member_left") >= 1, "a member_left rebalance in /metrics")
    third = member(members, "third", b, group, topic, **timeouts)
    wait_owned_exactly_once([first, third], parts)
    third.kill()
    wait_owned_exactly_once([first], parts)
    wait_until(lambda: rebalances(server, "classic", "session_timeout") >= 1, "a session_timeout rebalance in /metrics")
    wait_group(b, group, ConsumerGroupState.STABLE, 1)

    lines = completed_lines(server, group)
    triggers = [re.search(r"trigger=(\w+)", line).group(1) for line in lines]
    assert triggers[:1] == ["group_created"], lines
    for trigger in ["member_joined", "member_left", "session_timeout"]:
        assert trigger in triggers, f"no {trigger} line: {lines}"
    left = next(line for line in lines if "trigger=member_left" in line)
    assert "members=2 -> 1" in left, left
    assert "join_ms=Some(" in left and "total_ms=" in left, left


def test_kip848_rebalances_name_their_trigger(corral_factory, members):
    server = corral_factory(config=CONFIG)
    b, topic, group = server.bootstrap, unique("events848"), unique("events848-group")
    clients.create_topic(b, topic, partitions=4)
    parts = {(topic, p) for p in range(4)}

    first = member(members, "first", b, group, topic, protocol="consumer")
    wait_owned_exactly_once([first], parts)
    second = member(members, "second", b, group, topic, protocol="consumer")
    wait_owned_exactly_once([first, second], parts)
    wait_until(lambda: rebalances(server, "consumer", "member_joined") >= 1, "a KIP-848 member_joined rebalance")
    second.kill()
    wait_owned_exactly_once([first], parts)
    wait_until(lambda: rebalances(server, "consumer", "session_timeout") >= 1, "a KIP-848 session_timeout rebalance")
    assert rebalances(server, "consumer", "group_created") >= 1
    lines = completed_lines(server, group)
    assert any("kind=consumer" in line and "trigger=member_joined" in line for line in lines), lines
