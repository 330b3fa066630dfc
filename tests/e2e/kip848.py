"""Shared pieces of the KIP-848 (group.protocol=consumer) end-to-end tests (test_kip848_*.py).

The server decides a KIP-848 member's session timeout and heartbeat interval; these tests give
corral short ones so that a vanished member is fenced in seconds. Members are group_member.py
processes with "protocol": "consumer" (see groups.Member).
"""

from __future__ import annotations

from groups import GROUP_CONFIG, all_records, wait_until

SESSION_MS = 4000
HEARTBEAT_MS = 500

# The classic keys of GROUP_CONFIG too: the classic consumer of the protocol-mismatch test uses
# a short session timeout.
CONFIG = (
    GROUP_CONFIG
    + f"""consumer_session_timeout_ms = {SESSION_MS}
consumer_heartbeat_interval_ms = {HEARTBEAT_MS}
consumer_assignors = ["uniform", "range"]
"""
)


def member_conf(bootstrap: str, group: str, topic: str, assignor: str | None = None, **extra) -> dict:
    """A confluent-kafka KIP-848 member: `assignor` is its group.remote.assignor."""
    conf = dict(
        client="confluent",
        protocol="consumer",
        bootstrap=bootstrap,
        group=group,
        topics=[topic],
        # The rebalance timeout a KIP-848 member sends: how long it may take to revoke.
        max_poll_interval_ms=15000,
    )
    if assignor:
        conf["remote_assignor"] = assignor
    conf.update(extra)
    return conf


def wait_consumed_and_committed(ms, expected: set[tuple[str, int, int]], what: str) -> None:
    """Waits until the members together processed every expected record and had a commit past the
    last one of each partition acknowledged."""
    ends: dict[tuple[str, int], int] = {}
    for t, p, o in expected:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)

    def done():
        if not expected <= set(all_records(ms)):
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


def first_offsets(m) -> dict[tuple[str, int], int]:
    """The first offset the member processed on each partition."""
    out: dict = {}
    for t, p, o, _ in m.records():
        out.setdefault((t, p), o)
    return out
