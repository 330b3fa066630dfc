"""Consumer groups with confluent-kafka (librdkafka 2.16): three assignors sharing partitions,
members leaving and crashing, resuming from committed offsets, committed offsets surviving a kill -9
of the server, a live group surviving a server restart without a rebalance, and churn under load.

Members are separate processes (group_member.py) so that one can be SIGKILLed; they commit
synchronously after every batch they process.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import ConsumerGroupState

import clients
import groupwire as gw
from groups import (
    GROUP_CONFIG,
    all_records,
    assert_not_evicted_early,
    committed,
    high_watermarks,
    produce,
    unique,
    wait_group,
    wait_owned_exactly_once,
    wait_until,
)

PARTITIONS = 6
SESSION_MS = 3000
HEARTBEAT_MS = 300


def member_conf(bootstrap: str, group: str, topic: str, assignor: str | None, **extra) -> dict:
    conf = dict(
        client="confluent",
        bootstrap=bootstrap,
        group=group,
        topics=[topic],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=10000,
    )
    if assignor:
        conf["assignor"] = assignor
    conf.update(extra)
    return conf


def wait_consumed_and_committed(ms, expected: set[tuple[str, int, int]], topic: str, what: str) -> None:
    """Waits until the members together processed every expected record and acknowledged a commit
    past the last one of each partition."""
    ends: dict[tuple[str, int], int] = {}
    for t, p, o in expected:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)

    def done():
        seen = set(all_records(ms))
        if not expected <= seen:
            return False
        acked: dict = {}
        for m in ms:
            for tp, o in m.acked_commits().items():
                acked[tp] = max(acked.get(tp, -1), o)
        return all(acked.get(tp, -1) >= end for tp, end in ends.items())

    wait_until(
        done,
        lambda: f"{what}: {len(expected)} records consumed and committed; consumed "
        f"{len(set(all_records(ms)) & expected)}; " + "; ".join(m.describe() for m in ms),
    )


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_group_shares_partitions_survives_leave_and_crash_and_resumes(corral_factory, members, assignor):
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic = unique(f"shared-{assignor}")
    group = unique(f"group-{assignor}")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}

    ms = [members(f"m{i}", **member_conf(b, group, topic, assignor, client_id=f"e2e-member-{i}")) for i in range(3)]

    # 1. Three members share the six partitions; the coordinator's view agrees with theirs.
    wait_owned_exactly_once(ms, all_parts)
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 3)
    assert desc.partition_assignor == assignor
    by_member_id = {m.last_assign["member"]: m for m in ms}
    assert {d.member_id for d in desc.members} == set(by_member_id), "DescribeGroups lists other members than joined"
    for d in desc.members:
        m = by_member_id[d.member_id]
        assert {(tp.topic, tp.partition) for tp in d.assignment.topic_partitions} == m.owned, f"{m.name}: coordinator and client disagree"
        assert d.client_id == m.conf["client_id"]
        assert d.host.lstrip("/") == "127.0.0.1"
    if assignor != "cooperative-sticky":
        # Eager assignors split 6 partitions over 3 members 2-2-2.
        assert sorted(len(m.owned) for m in ms) == [2, 2, 2]

    # 2. Every record is processed exactly once, by the member owning its partition, and the
    # committed offsets end at the high watermarks.
    deliveries = produce(b, topic, 600, prefix="first-")
    first = {(topic, p, o) for _, _, p, o in deliveries}
    wait_consumed_and_committed(ms, first, topic, "first batch")
    counts = all_records(ms)
    assert set(counts) == first and max(counts.values()) == 1, f"duplicates: {[k for k, v in counts.items() if v > 1][:10]}"
    for m in ms:
        assert {(t, p) for t, p, _, _ in m.records()} <= m.owned, f"{m.name} consumed a partition it does not own"
        assert not m.commit_failures(), f"{m.name}: commits failed in a stable group: {m.commit_failures()[:3]}"
        assert not m.errors(), f"{m.name}: consumer errors {m.errors()[:3]}"
    hw = high_watermarks(b, topic, PARTITIONS)
    assert sum(hw.values()) == 600
    assert committed(b, group, sorted(all_parts)) == hw

    # 3. A member that leaves (close() sends LeaveGroup) hands its partitions to the other two.
    leaver = ms[0]
    leaver_id = leaver.last_assign["member"]
    leaver.close()
    survivors = ms[1:]
    wait_owned_exactly_once(survivors, all_parts)
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 2)
    assert leaver_id not in {d.member_id for d in desc.members}

    # 4. A member that crashes (SIGKILL: no LeaveGroup) is evicted once its session timeout has
    # passed without a heartbeat, and the last member owns everything.
    crashed, survivor = survivors
    killed_at = time.monotonic()
    crashed.kill()
    wait_owned_exactly_once([survivor], all_parts)
    wait_group(b, group, ConsumerGroupState.STABLE, 1)
    assert_not_evicted_early(survivor, killed_at, SESSION_MS)
    # Nothing was re-delivered: the partitions moved at their committed offsets.
    assert set(all_records(ms)) == first and max(all_records(ms).values()) == 1

    # 5. Everyone stops; more records arrive; a new member resumes from the committed offsets and
    # reads only the new records.
    survivor.close()
    wait_group(b, group, ConsumerGroupState.EMPTY, 0)
    deliveries = produce(b, topic, 120, prefix="second-")
    second = {(topic, p, o) for _, _, p, o in deliveries}
    newcomer = members("m3", **member_conf(b, group, topic, assignor, client_id="e2e-member-3"))
    ms.append(newcomer)
    wait_consumed_and_committed([newcomer], second, topic, "second batch")
    firsts: dict = {}
    for t, p, o, _ in newcomer.records():
        firsts.setdefault((t, p), o)
    assert firsts == {tp: hw[tp] for tp in firsts}, f"resumed at {firsts}, committed offsets were {hw}"
    counts = all_records(ms)
    assert set(counts) == first | second and max(counts.values()) == 1
    newcomer.close()
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, PARTITIONS)


def test_committed_offsets_survive_kill9_of_the_server(corral_factory, members):
    """Offsets committed (and acknowledged) before a kill -9 are where the group resumes after the
    restart; nothing acknowledged is lost."""
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic = unique("durable-offsets")
    group = unique("durable-group")
    clients.create_topic(b, topic, partitions=3)
    all_parts = sorted((topic, p) for p in range(3))
    deliveries = produce(b, topic, 3000, prefix="d")
    assert len(deliveries) == 3000

    # Small batches so that many commits are acknowledged and more are in flight at the kill.
    m = members("committer", **member_conf(b, group, topic, None, client_id="e2e-committer", batch=10))
    wait_until(lambda: len(m.of("commit")) >= 30, lambda: f"30 commits; {m.describe()}")
    server.kill9()
    m.kill()
    acked = m.acked_commits()
    attempted: dict = {}
    for e in m.of("committing"):  # every commit sent, whether answered before the kill or not
        for t, p, o in e["offsets"]:
            attempted.setdefault((t, p), set()).add(o)
    assert acked, "no commit was acknowledged before the kill"

    server.start()
    after = committed(b, group, all_parts)
    for tp, o in acked.items():
        assert after[tp] >= o, f"{tp}: commit of offset {o} was acknowledged, but after the restart the group is at {after[tp]}"
    for tp, o in after.items():
        # Whatever is there was sent by the member (acknowledged, or in flight at the kill).
        assert o == -1001 or o in attempted.get(tp, set()), f"{tp}: committed offset {o} was never sent"

    # A new member of the group resumes exactly there. The crashed member is still registered after
    # the restart; it is evicted after its session timeout and the rebalance completes.
    resumed = members("resumer", **member_conf(b, group, topic, None, client_id="e2e-resumer"))
    expected = {(topic, p, o) for _, _, p, o in deliveries if o >= max(after[(topic, p)], 0)}
    wait_consumed_and_committed([resumed], expected, topic, "after restart")
    firsts: dict = {}
    for t, p, o, _ in resumed.records():
        firsts.setdefault((t, p), o)
    hw = high_watermarks(b, topic, 3)
    for tp in all_parts:
        if max(after[tp], 0) < hw[tp]:
            assert firsts.get(tp) == max(after[tp], 0), f"{tp}: resumed at {firsts.get(tp)}, committed offset was {after[tp]}"
        else:
            assert tp not in firsts, f"{tp}: everything was committed, yet {firsts[tp]} was delivered again"
    assert set(all_records([resumed])) == expected
    resumed.close()
    assert committed(b, group, all_parts) == high_watermarks(b, topic, 3)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_live_group_survives_server_restart_without_rebalance(corral_factory, members, how):
    """The coordinator reloads a Stable group from __consumer_offsets: after a restart (clean or
    kill -9) its members' heartbeats at the old generation are accepted, nobody rejoins, and
    consumption goes on from the committed offsets."""
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic, group = unique(f"restart-{how}"), unique(f"restart-{how}")
    clients.create_topic(b, topic, partitions=4)
    all_parts = {(topic, p) for p in range(4)}
    ms = [members(f"m{i}", **member_conf(b, group, topic, "range", client_id=f"e2e-restart-{i}", session_timeout_ms=10000)) for i in range(2)]
    wait_owned_exactly_once(ms, all_parts)
    wait_group(b, group, ConsumerGroupState.STABLE, 2)
    wait_until(lambda: ms[0].last_assign["gen"] == ms[1].last_assign["gen"], lambda: [m.describe() for m in ms])
    generation = ms[0].last_assign["gen"]
    first = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="pre-")}
    wait_consumed_and_committed(ms, first, topic, "before the restart")
    marks = [len(m.snapshot()) for m in ms]

    if how == "sigterm":
        server.restart()
    else:
        server.kill9()
        server.start()

    with gw.GroupConn(b) as conn:
        d = conn.describe(group)
        assert d.state == "Stable" and sorted(x[0] for x in d.members) == sorted(m.last_assign["member"] for m in ms), d
        for m in ms:
            assert gw.parse_assignment(next(x[4] for x in d.members if x[0] == m.last_assign["member"])) == {
                topic: sorted(p for _, p in m.owned)
            }
            assert conn.heartbeat(group, generation, m.last_assign["member"]) == gw.NONE, f"{m.name} lost its membership"
    second = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="post-")}
    wait_consumed_and_committed(ms, second, topic, "after the restart")
    counts = all_records(ms)
    assert set(counts) == first | second and max(counts.values()) == 1
    for m, mark in zip(ms, marks):
        changes = [e["ev"] for e in m.snapshot()[mark:] if e["ev"] in ("assign", "revoke", "lost")]
        assert changes == [], f"{m.name} went through a rebalance after the restart: {changes}"
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, 4)


def acked_past(member, topic: str, partition: int, offset: int) -> bool:
    """Whether `member` had a commit acknowledged beyond `offset` of the partition."""
    for e in member.snapshot():
        if e["ev"] != "commit" or e["error"]:
            continue
        refused = {(t, p) for t, p, _ in e["errors"]}
        if any((t, p) == (topic, partition) and (t, p) not in refused and o > offset for t, p, o in e["offsets"]):
            return True
    return False


def test_group_churn_while_producing(corral_factory, members):
    """Members join, leave and crash while records keep arriving (cooperative-sticky, the
    incremental protocol). The group keeps consuming through the churn, ends with every partition
    owned exactly once, loses no record, and a record comes back only if a member that processed
    it crashed or had its commit refused: never after an acknowledged commit."""
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic, group = unique("churn"), unique("churn")
    clients.create_topic(b, topic, partitions=8)
    all_parts = {(topic, p) for p in range(8)}
    conf = lambda i: member_conf(b, group, topic, "cooperative-sticky", client_id=f"e2e-churn-{i}", batch=20)  # noqa: E731
    live = [members(f"m{i}", **conf(i)) for i in range(3)]
    everyone = list(live)
    killed: set[str] = set()

    stop = threading.Event()
    produced: list[tuple] = []
    producer_errors: list[BaseException] = []

    def produce_until_stopped():
        try:
            p = clients.producer(b)
            batch = 0
            while not stop.is_set():
                produced.extend(clients.produce_all(p, topic, [(f"c{batch}-{j}".encode(), b"churn") for j in range(25)]))
                batch += 1
                stop.wait(0.02)  # pacing only: nothing waits on it
        except BaseException as e:
            producer_errors.append(e)

    thread = threading.Thread(target=produce_until_stopped, name="churn-producer", daemon=True)
    thread.start()
    try:
        for step, action in enumerate(["add", "add", "kill", "close", "add", "kill", "close", "add"]):
            # Between changes the group must make progress: more records processed.
            seen = sum(all_records(everyone).values())
            wait_until(
                lambda: sum(all_records(everyone).values()) >= seen + 100,
                lambda: f"progress before step {step} ({action}); " + "; ".join(m.describe() for m in live),
            )
            if action == "add":
                m = members(f"m{len(everyone)}", **conf(len(everyone)))
                live.append(m)
                everyone.append(m)
            elif action == "kill":
                m = live.pop(0)
                m.kill()
                killed.add(m.name)
            else:
                live.pop(0).close()
    finally:
        stop.set()
        thread.join(60)
    assert not producer_errors, producer_errors

    wait_owned_exactly_once(live, all_parts)
    wait_group(b, group, ConsumerGroupState.STABLE, len(live))
    expected = {(topic, p, o) for _, _, p, o in produced}
    wait_until(lambda: expected <= set(all_records(everyone)), lambda: f"{len(expected - set(all_records(everyone)))} records never consumed")
    hw = high_watermarks(b, topic, 8)
    assert sum(hw.values()) == len(expected)
    wait_until(lambda: committed(b, group, sorted(all_parts)) == hw, "committed offsets at the high watermarks", interval=0.2)
    by_record: dict = {}
    for m in everyone:
        for t, p, o, _ in m.records():
            by_record.setdefault((t, p, o), []).append(m.name)
    twice = {r: names for r, names in by_record.items() if len(names) > 1}
    # At-least-once: a record is delivered again only if a member that processed it crashed, or
    # its commit was refused (REBALANCE_IN_PROGRESS while the group completes a rebalance, as in
    # Kafka). A record whose commit every processing member had acknowledged must never return.
    by_name = {m.name: m for m in everyone}
    redelivered = {r: names for r, names in twice.items() if not (killed & set(names)) and all(acked_past(by_name[n], *r) for n in names)}
    assert not redelivered, f"delivered again after an acknowledged commit: {list(redelivered.items())[:5]}"
    for m in live:
        m.close()
