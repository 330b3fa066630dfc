"""A KIP-848 consumer group (confluent-kafka, group.protocol=consumer) through its life: three
members consume every record exactly once with committed offsets; a member that leaves (close())
hands its partitions over at once; a member that is SIGKILLed loses them only when its session
times out; everyone stops, the server restarts (SIGTERM or kill -9), and a new member resumes from
the committed offsets, reading only the records that arrived since.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType

import clients
import kip848
from groups import (
    all_records,
    committed,
    double_ownership,
    high_watermarks,
    produce,
    unique,
    wait_owned_exactly_once,
    wait_until,
)

PARTITIONS = 6
T = 30


def listed(bootstrap: str, group: str):
    """The group as ListGroups shows it (None if absent)."""
    admin = clients.admin_client(bootstrap)
    res = admin.list_consumer_groups(request_timeout=T).result(T)
    assert not res.errors, res.errors
    return next((g for g in res.valid if g.group_id == group), None)


def first_reaction(m, after: float) -> dict:
    return next(e for e in m.snapshot() if e["ev"] in ("assign", "revoke", "lost") and e["t0"] > after)


@pytest.mark.parametrize("restart", ["sigterm", "kill9"])
def test_consume_once_leave_crash_restart_resume(corral_factory, members, restart):
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic, group = unique(f"kip848-life-{restart}"), unique(f"kip848-life-{restart}")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    conf = lambda i: kip848.member_conf(b, group, topic, client_id=f"e2e-kip848-life-{i}")  # noqa: E731

    ms = [members(f"m{i}", **conf(i)) for i in range(3)]
    wait_owned_exactly_once(ms, all_parts)
    wait_until(lambda: sorted(len(m.owned) for m in ms) == [2, 2, 2], lambda: "; ".join(m.describe() for m in ms))

    # 1. Every record is processed once, by the member owning its partition; the committed
    # offsets end at the high watermarks.
    first = {(topic, p, o) for _, _, p, o in produce(b, topic, 600, prefix="first-")}
    kip848.wait_consumed_and_committed(ms, first, "first batch")
    counts = all_records(ms)
    assert set(counts) == first and max(counts.values()) == 1, f"duplicates: {[k for k, v in counts.items() if v > 1][:10]}"
    for m in ms:
        assert {(t, p) for t, p, _, _ in m.records()} <= m.owned, f"{m.name} consumed a partition it does not own"
        assert not m.commit_failures(), f"{m.name}: commits failed in a stable group: {m.commit_failures()[:3]}"
        assert not m.errors(), f"{m.name}: consumer errors {m.errors()[:3]}"
    hw = high_watermarks(b, topic, PARTITIONS)
    assert sum(hw.values()) == 600
    assert committed(b, group, sorted(all_parts)) == hw

    # 2. A member that leaves (close(): a heartbeat with epoch -1) hands its partitions to the
    # other two, who keep their own (uniform is sticky: nothing is revoked from them).
    leaver, crashed, survivor = ms
    left = leaver.owned
    marks = {m.name: len(m.snapshot()) for m in (crashed, survivor)}
    leaver.close()
    wait_owned_exactly_once([crashed, survivor], all_parts)
    for m in (crashed, survivor):
        kinds = [e["ev"] for e in m.snapshot()[marks[m.name] :] if e["ev"] in ("revoke", "lost")]
        assert kinds == [], f"{m.name} had partitions taken away when another member left: {kinds}"
    assert left <= crashed.owned | survivor.owned

    # 3. A member that is SIGKILLed (no leave heartbeat) keeps its partitions until its session
    # times out; then the last member owns everything.
    crashed.kill()
    wait_owned_exactly_once([survivor], all_parts, timeout=60)
    reaction = first_reaction(survivor, crashed.killed_at)
    waited = reaction["t0"] - crashed.killed_at
    # Its last heartbeat came at most a heartbeat interval before the kill.
    assert waited >= 0.75 * kip848.SESSION_MS / 1000, (
        f"the killed member's partitions moved {waited:.2f}s after the kill; the session timeout is {kip848.SESSION_MS} ms"
    )
    assert not double_ownership(ms), double_ownership(ms)
    # Nothing was delivered twice: the partitions moved at their committed offsets.
    second = {(topic, p, o) for _, _, p, o in produce(b, topic, 120, prefix="second-")}
    kip848.wait_consumed_and_committed([survivor], second, "second batch")
    counts = all_records(ms)
    assert set(counts) == first | second and max(counts.values()) == 1

    # 4. Everyone stops; the group is an Empty consumer group, with its offsets.
    survivor.close()
    wait_until(
        lambda: (g := listed(b, group)) is not None and g.state == ConsumerGroupState.EMPTY,
        lambda: f"group {group} listed Empty: {vars(listed(b, group) or object())}",
    )
    hw = high_watermarks(b, topic, PARTITIONS)
    assert committed(b, group, sorted(all_parts)) == hw

    # 5. The server restarts; the group and its offsets are still there.
    if restart == "sigterm":
        server.restart()
    else:
        server.kill9()
        server.start()
    g = listed(b, group)
    assert g is not None and g.type == ConsumerGroupType.CONSUMER and g.state == ConsumerGroupState.EMPTY, vars(g) if g else None
    assert committed(b, group, sorted(all_parts)) == hw

    # 6. A new member resumes from the committed offsets: it reads only the new records.
    third = {(topic, p, o) for _, _, p, o in produce(b, topic, 120, prefix="third-")}
    newcomer = members("m3", **conf(3))
    ms.append(newcomer)
    kip848.wait_consumed_and_committed([newcomer], third, "after the restart")
    starts = kip848.first_offsets(newcomer)
    assert starts == {tp: hw[tp] for tp in starts}, f"resumed at {starts}, committed offsets were {hw}"
    counts = all_records(ms)
    assert set(counts) == first | second | third and max(counts.values()) == 1
    assert not newcomer.commit_failures() and not newcomer.errors()
    newcomer.close()
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, PARTITIONS)


@pytest.mark.parametrize("restart", ["sigterm", "kill9"])
def test_live_group_survives_server_restart_without_rebalance(corral_factory, members, restart):
    """The coordinator reloads a live consumer group (members, epochs, assignments) from
    __consumer_offsets: after a restart its members' heartbeats at their epochs are accepted,
    nobody loses or gives up a partition, and consumption goes on from the committed offsets."""
    server = corral_factory(config=kip848.CONFIG)
    b = server.bootstrap
    topic, group = unique(f"kip848-live-{restart}"), unique(f"kip848-live-{restart}")
    clients.create_topic(b, topic, partitions=4)
    all_parts = {(topic, p) for p in range(4)}
    ms = [members(f"m{i}", **kip848.member_conf(b, group, topic, "range", client_id=f"e2e-kip848-live-{i}")) for i in range(2)]
    wait_owned_exactly_once(ms, all_parts)
    wait_until(lambda: sorted(len(m.owned) for m in ms) == [2, 2], lambda: "; ".join(m.describe() for m in ms))
    first = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="pre-")}
    kip848.wait_consumed_and_committed(ms, first, "before the restart")
    owned = {m.name: m.owned for m in ms}
    marks = {m.name: len(m.snapshot()) for m in ms}

    if restart == "sigterm":
        server.restart()
    else:
        server.kill9()
        server.start()

    second = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="post-")}
    kip848.wait_consumed_and_committed(ms, second, "after the restart")
    counts = all_records(ms)
    assert set(counts) == first | second and max(counts.values()) == 1
    for m in ms:
        changes = [(e["ev"], e["parts"]) for e in m.snapshot()[marks[m.name] :] if e["ev"] in ("assign", "revoke", "lost")]
        assert changes == [], f"{m.name} went through a rebalance after the restart: {changes}"
        assert m.owned == owned[m.name]
    assert committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, 4)
    for m in ms:
        m.close()
