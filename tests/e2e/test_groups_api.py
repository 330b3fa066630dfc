"""What operators look at: the groups API (`/v1/groups`, `/v1/groups/{id}`), `corral groups`, the
per-group series of `/metrics` and the groups page, after confluent-kafka members (classic and
KIP-848) drove a group through a join, a leave, a session timeout and a static restart.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse

import clients
from groups import GROUP_CONFIG, unique, wait_group, wait_owned_exactly_once, wait_until
from confluent_kafka import ConsumerGroupState

CONFIG = GROUP_CONFIG + "consumer_session_timeout_ms = 2000\nconsumer_heartbeat_interval_ms = 300\n"
TIMEOUTS = dict(session_timeout_ms=2000, heartbeat_interval_ms=200)


def get_json(server, path: str) -> tuple[int, dict]:
    status, body = server.http_get(path)
    return status, json.loads(body)


def group_detail(server, group: str) -> dict:
    status, body = get_json(server, "/v1/groups/" + urllib.parse.quote(group, safe=""))
    assert status == 200, body
    return body


def triggers(server, group: str) -> list[str]:
    return [r["trigger"] for r in group_detail(server, group)["rebalances"]]


def cli(corral_bin, server, *args: str) -> str:
    out = subprocess.run([str(corral_bin), "groups", "--admin", server.admin, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def member(members, name, b, group, topic, **extra):
    conf = dict(client="confluent", bootstrap=b, group=group, topics=[topic], client_id=f"e2e-{name}")
    conf.update(extra)
    return members(name, **conf)


def metric(text: str, name: str, **labels) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_classic_group_history_api_cli_and_metrics(corral_factory, corral_bin, members):
    server = corral_factory(config=CONFIG)
    b, topic, group = server.bootstrap, unique("api"), unique("api-group")
    clients.create_topic(b, topic, partitions=4)
    parts = {(topic, p) for p in range(4)}

    first = member(members, "first", b, group, topic, **TIMEOUTS)
    wait_owned_exactly_once([first], parts)
    second = member(members, "second", b, group, topic, **TIMEOUTS)
    wait_owned_exactly_once([first, second], parts)
    second.close()
    wait_owned_exactly_once([first], parts)
    third = member(members, "third", b, group, topic, **TIMEOUTS)
    wait_owned_exactly_once([first, third], parts)
    third.kill()
    wait_owned_exactly_once([first], parts)
    wait_until(lambda: "session_timeout" in triggers(server, group), "a session_timeout rebalance in the history")

    # A static member restarted under the same instance id takes its place without a rebalance
    # (Kafka's rule: the group is Stable and the selected protocol stays the same).
    static = member(members, "static", b, group, topic, instance_id="pod-0", **TIMEOUTS)
    wait_owned_exactly_once([first, static], parts)
    before = triggers(server, group)
    old_id = next(m["member_id"] for m in group_detail(server, group)["members"] if m["instance_id"] == "pod-0")
    static.kill()
    static2 = member(members, "static2", b, group, topic, instance_id="pod-0", **TIMEOUTS)
    wait_owned_exactly_once([first, static2], parts)
    wait_group(b, group, ConsumerGroupState.STABLE, 2)
    detail = group_detail(server, group)
    new_id = next(m["member_id"] for m in detail["members"] if m["instance_id"] == "pod-0")
    assert new_id != old_id, "the restarted static member has a new member id"
    assert triggers(server, group) == before, "a static restart with the same protocols is no rebalance"

    # The history, oldest first, with the members each trigger names and the phases' times.
    history = detail["rebalances"]
    names = [r["trigger"] for r in history]
    assert names[0] == "group_created", names
    for trigger in ["member_joined", "member_left", "session_timeout"]:
        assert trigger in names, names
    left = next(r for r in history if r["trigger"] == "member_left")
    assert (left["members_before"], left["members_after"]) == (2, 1), left
    assert left["generation_after"] == left["generation_before"] + 1, left
    assert left["join_ms"] is not None and left["sync_ms"] is not None and left["total_ms"] >= left["join_ms"], left
    timed_out = next(r for r in history if r["trigger"] == "session_timeout")
    assert len(timed_out["trigger_members"]) == 1, timed_out
    joined = next(r for r in history if r["trigger"] == "member_joined")
    assert joined["slowest"], "the members last to join or sync are named"

    # Members with client id, host, instance id and assignment; offsets with lag.
    # A replaced static member keeps the client id it joined with, as in Kafka's coordinator.
    assert {m["client_id"] for m in detail["members"]} == {"e2e-first", "e2e-static"}
    assert all(m["client_host"].startswith("/127.0.0.1") for m in detail["members"]), detail["members"]
    assigned = sorted((a["topic"], p) for m in detail["members"] for a in m["assignment"] for p in a["partitions"])
    assert assigned == sorted(parts), detail["members"]
    producer = clients.producer(b)
    for p in range(4):
        clients.produce_all(producer, topic, [(None, f"v{i}".encode()) for i in range(10)], partition=p)
    wait_until(lambda: {o["partition"] for o in group_detail(server, group)["offsets"]} == set(range(4)), "commits of every partition")
    wait_until(lambda: all(o["lag"] == 0 for o in group_detail(server, group)["offsets"]), "the members caught up")
    first.close()
    static2.close()
    for p in range(4):
        clients.produce_all(producer, topic, [(None, b"late") for _ in range(2)], partition=p)
    wait_until(lambda: sum(o["lag"] for o in group_detail(server, group)["offsets"]) == 8, "8 records of lag")

    status, listing = get_json(server, "/v1/groups")
    assert status == 200 and listing["missing"] == []
    overview = next(g for g in listing["groups"] if g["group"] == group)
    assert overview["type"] == "classic" and overview["lag_sum"] == 8 and overview["coordinator_node"] == 0, overview
    assert get_json(server, "/v1/groups/no-such-group")[0] == 404

    # corral groups: the same facts as tables and as JSON.
    table = cli(corral_bin, server, "describe", group)
    header = next(line for line in table.splitlines() if line.startswith("GROUP"))
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = [line.split() for line in table.splitlines() if line.startswith(group)]
    assert len(rows) == 4 and sum(int(r[5]) for r in rows) == 8, table
    history_table = cli(corral_bin, server, "history", group)
    for trigger in ["group_created", "member_joined", "member_left", "session_timeout"]:
        assert trigger in history_table, history_table
    assert json.loads(cli(corral_bin, server, "history", group, "--output", "json"))[0]["trigger"] == "group_created"
    assert group in cli(corral_bin, server, "list")

    # /metrics: kafka_exporter's lag series and the group's rebalances by trigger.
    status, text = server.http_get("/metrics")
    assert status == 200
    assert metric(text, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 8
    assert sum(metric(text, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition=str(p)) for p in range(4)) == 8
    # A closed static member sends no LeaveGroup: it stays until its session times out.
    assert metric(text, "kafka_consumergroup_members", consumergroup=group) == 1
    for trigger in ["group_created", "member_joined", "member_left", "session_timeout"]:
        assert metric(text, "corral_group_rebalances_total", consumergroup=group, trigger=trigger) >= 1, trigger
    assert metric(text, "corral_group_rebalances_recent", consumergroup=group) == len(history)
    # The coordinator partition's Raft group, read at the scrape; requests by API and version.
    partition = str(overview["coordinator_partition"])
    assert metric(text, "corral_raft_leader", raft_group=partition) == 0
    assert metric(text, "corral_raft_term", raft_group=partition) >= 1
    assert metric(text, "corral_raft_apply_lag", raft_group="metadata") is not None
    assert metric(text, "corral_requests_total", api="Heartbeat") >= 1
    assert re.search(r'^corral_requests_total\{api="JoinGroup",version="\d+"', text, re.M), "requests are labelled by version"
    assert re.search(r'^corral_rebalance_phase_duration_seconds_count\{kind="classic",phase="join"\}', text, re.M)
    assert re.search(r"^corral_coordinator_write_duration_seconds_count \d+", text, re.M)
    # Group requests by result: successes, and the MEMBER_ID_REQUIRED every new librdkafka member
    # gets first; rare-event counters exist at 0 before their first event.
    for api in ["Heartbeat", "JoinGroup", "SyncGroup", "LeaveGroup", "OffsetCommit", "OffsetFetch"]:
        assert metric(text, "corral_group_requests_total", api=api, error="NONE") >= 1, api
    assert metric(text, "corral_group_requests_total", api="JoinGroup", error="MEMBER_ID_REQUIRED") >= 1
    assert metric(text, "corral_limits_reached_total", limit="groups.max_pending_members") == 0


def test_a_kip848_group_in_the_api(corral_factory, corral_bin, members):
    server = corral_factory(config=CONFIG)
    b, topic, group = server.bootstrap, unique("api848"), unique("api848-group")
    clients.create_topic(b, topic, partitions=4)
    parts = {(topic, p) for p in range(4)}
    first = member(members, "first", b, group, topic, protocol="consumer")
    wait_owned_exactly_once([first], parts)
    second = member(members, "second", b, group, topic, protocol="consumer")
    wait_owned_exactly_once([first, second], parts)
    wait_until(lambda: "member_joined" in triggers(server, group), "the KIP-848 join in the history")
    detail = group_detail(server, group)
    assert detail["type"] == "consumer" and detail["state"] == "Stable", detail
    assert all(m["member_epoch"] == detail["generation"] for m in detail["members"]), detail["members"]
    joined = next(r for r in detail["rebalances"] if r["trigger"] == "member_joined")
    assert joined["join_ms"] is None and joined["generation_after"] == joined["generation_before"] + 1, joined
    assert joined["slowest"] and all(m["step"] == "reconciled" for m in joined["slowest"]), joined
    assert sorted((a["topic"], p) for m in detail["members"] for a in m["assignment"] for p in a["partitions"]) == sorted(parts)
    assert "member_joined" in cli(corral_bin, server, "history", group)
    _, text = server.http_get("/metrics")
    assert metric(text, "corral_group_requests_total", api="ConsumerGroupHeartbeat", error="NONE") >= 1


def test_the_group_cap_sums_the_rest(corral_factory):
    server = corral_factory(config=CONFIG + "\n[admin]\nmetrics_max_groups = 2\n")
    b, topic = server.bootstrap, unique("cap")
    clients.create_topic(b, topic, partitions=1)
    clients.produce_all(clients.producer(b), topic, [(None, b"x") for _ in range(10)])
    from confluent_kafka import TopicPartition

    groups = sorted(unique("cap-group") for _ in range(5))
    for g in groups:
        c = clients.consumer(b, group_id=g)
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        c.close()
    status, text = server.http_get("/metrics")
    assert status == 200
    labelled = {g for g in groups if metric(text, "kafka_consumergroup_lag_sum", consumergroup=g, topic=topic) is not None}
    assert labelled == set(groups[:2]), labelled
    assert metric(text, "kafka_consumergroup_lag_sum", consumergroup="__other__", topic=topic) == 18
    assert re.search(r"^corral_metrics_groups_unlabelled (\d+)$", text, re.M).group(1) == "3"
    assert re.search(r'^corral_groups\{type="classic",state="Empty"\} (\d+)$', text, re.M).group(1) == "5"


def test_metrics_can_be_turned_off(corral_factory):
    server = corral_factory(config=CONFIG + "\n[admin]\nmetrics = false\n")
    topic = unique("nometrics")
    clients.create_topic(server.bootstrap, topic, partitions=1)
    clients.produce_all(clients.producer(server.bootstrap), topic, [(None, b"x")])
    status, body = server.http_get("/metrics")
    assert status == 404 and "admin.metrics = false" in body, (status, body)
    assert server.http_get("/v1/groups")[0] == 200, "the groups API stays"
