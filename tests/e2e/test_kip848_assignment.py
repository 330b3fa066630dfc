"""KIP-848 server-side assignment with confluent-kafka (librdkafka 2.16, group.protocol=consumer):
three members join one after another on a six-partition topic and end with two partitions each,
and at no moment does a partition have two owners (revocation before assignment, checked across
members with the timestamps of their rebalance callbacks).

The same scenario runs against corral with each server-side assignor (`uniform`, `range`) and
against librdkafka's mock cluster, the reference (see mockcluster.py). What differs between them
is asserted per target and described in `TARGETS`.
"""

from __future__ import annotations

import pytest

import clients
import kip848
from groups import callback_log, double_ownership, unique, wait_owned_exactly_once, wait_until
from mockcluster import MockCluster

PARTITIONS = 6

# target -> (server, group.remote.assignor)
TARGETS = {
    "corral-uniform": ("corral", "uniform"),
    "corral-range": ("corral", "range"),
    # The mock ignores group.remote.assignor: its assignment is a range split in join order.
    "mock": ("mock", "range"),
}


def timeline(ms) -> str:
    """Every member's rebalance callbacks in time order (seconds since the first member started)."""
    t0 = min(e["ts"] for m in ms for e in m.snapshot())
    rows = sorted(
        (e["t0"] - t0, e["ts"] - t0, m.name, e["ev"], [p for _, p in e["parts"]])
        for m in ms
        for e in m.snapshot()
        if e["ev"] in ("assign", "revoke", "lost")
    )
    return "\n".join(f"  {a:7.3f}-{b:7.3f} {name} {ev} {parts}" for a, b, name, ev, parts in rows)


def balanced_and_settled(ms, all_parts, sizes):
    own = {}
    for m in ms:
        for tp in m.owned:
            own.setdefault(tp, []).append(m.name)
    return set(own) == all_parts and all(len(v) == 1 for v in own.values()) and sorted(len(m.owned) for m in ms) == sizes


def join_one_by_one(members, bootstrap: str, topic: str, group: str, assignor: str):
    """Members m0, m1, m2 join in turn; after each join the group settles to a balanced split.
    Returns the members and the partitions each owned after each step."""
    all_parts = {(topic, p) for p in range(PARTITIONS)}
    ms = []
    steps = []
    for i, sizes in enumerate([[6], [3, 3], [2, 2, 2]]):
        ms.append(members(f"m{i}", **kip848.member_conf(bootstrap, group, topic, assignor, client_id=f"e2e-kip848-{i}")))
        wait_owned_exactly_once(ms, all_parts)
        wait_until(
            lambda: balanced_and_settled(ms, all_parts, sizes),
            lambda: f"step {i}: split {sizes}; " + "; ".join(m.describe() for m in ms),
        )
        steps.append({m.name: sorted(p for _, p in m.owned) for m in ms})
    return ms, steps


@pytest.mark.parametrize("target", list(TARGETS))
def test_members_join_in_turn_and_partitions_never_have_two_owners(corral_factory, members, target):
    server_kind, assignor = TARGETS[target]
    topic, group = unique(f"kip848-{target}"), unique(f"kip848-{target}")
    mock = None
    try:
        if server_kind == "corral":
            server = corral_factory(config=kip848.CONFIG)
            bootstrap = server.bootstrap
            clients.create_topic(bootstrap, topic, partitions=PARTITIONS)
        else:
            mock = MockCluster(kip848.SESSION_MS, kip848.HEARTBEAT_MS)
            bootstrap = mock.bootstrap
            mock.create_topic(topic, PARTITIONS)

        ms, steps = join_one_by_one(members, bootstrap, topic, group, assignor)
        logs = {m.name: callback_log(m) for m in ms}
        final = steps[-1]
        print(f"\n{target}: {steps}\n{timeline(ms)}")

        # Every partition was revoked by its old owner before its new owner's assign callback.
        problems = double_ownership(ms)
        assert not problems, f"partitions owned twice: {problems}; callbacks:\n{timeline(ms)}"
        # Partitions did move (so the check above was not vacuous): m0 gave up four of its six.
        assert sum(len(parts) for kind, parts in logs["m0"] if kind == "revoke") >= 4, logs
        assert not any(kind == "lost" for log in logs.values() for kind, _ in log), f"partitions lost in a calm group: {logs}"
        for m in ms:
            assert not m.errors(), f"{m.name}: consumer errors {m.errors()[:3]}"

        if assignor == "range":
            # Range: contiguous, equal ranges (co-partitioning).
            assert sorted(map(tuple, final.values())) == [(0, 1), (2, 3), (4, 5)], steps
        else:
            # Uniform is sticky: a member that already owns partitions only ever gives some up
            # when another joins; it is never handed different ones.
            for name in ("m0", "m1"):
                later_assigns = [parts for kind, parts in logs[name][1:] if kind == "assign" and parts]
                assert later_assigns == [], f"{name} got other partitions after its first assignment: {logs[name]}"
            assert set(final["m0"]) <= set(steps[1]["m0"]) <= set(steps[0]["m0"]), steps
            assert set(final["m1"]) <= set(steps[1]["m1"]), steps
        if server_kind == "mock":
            # The mock's split is in join order.
            assert final == {"m0": [0, 1], "m1": [2, 3], "m2": [4, 5]}, steps

        for m in ms:
            m.close()
        # Closing members revoke what they own; still nobody owned anything twice.
        assert not double_ownership(ms), double_ownership(ms)
    finally:
        if mock is not None:
            mock.close()


class _FakeMember:
    """Just enough of groups.Member for double_ownership()."""

    def __init__(self, name, events, killed_at=None):
        self.name, self.events, self.killed_at = name, events, killed_at

    def snapshot(self):
        return list(self.events)


def test_double_ownership_detector_sees_overlaps():
    """The check the test above relies on reports a partition assigned before its old owner's
    revocation had completed, and accepts a clean hand-over."""
    tp = ["t", 0]
    a = _FakeMember("a", [{"ev": "assign", "parts": [tp], "t0": 1.0, "ts": 1.1}, {"ev": "revoke", "parts": [tp], "t0": 2.0, "ts": 2.2}])
    early = _FakeMember("b", [{"ev": "assign", "parts": [tp], "t0": 2.1, "ts": 2.3}])
    late = _FakeMember("b", [{"ev": "assign", "parts": [tp], "t0": 2.3, "ts": 2.4}])
    assert len(double_ownership([a, early])) == 1
    assert double_ownership([a, late]) == []
    # A member that never revoked owns until it exits (SIGKILL) or forever.
    crashed = _FakeMember("a", [{"ev": "assign", "parts": [tp], "t0": 1.0, "ts": 1.1}], killed_at=5.0)
    assert len(double_ownership([crashed, late])) == 1
    assert double_ownership([crashed, _FakeMember("b", [{"ev": "assign", "parts": [tp], "t0": 5.5, "ts": 5.6}])]) == []
