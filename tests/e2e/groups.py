"""Helpers for the consumer-group end-to-end tests (test_groups_*.py).

Members run in their own processes (group_member.py), so a test can close one the way an
application would, or SIGKILL it so that it vanishes without a LeaveGroup. Every member reports its
assignments, the records it processed and its commits as JSON events; `Member` collects them from
a reader thread. Tests wait for outcomes by polling with generous bounds (`wait_until`), never by
sleeping for a time that usually suffices.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition

import clients

HERE = Path(__file__).resolve().parent
MEMBER_SCRIPT = HERE / "group_member.py"

# A group config for fast tests: a short initial rebalance delay (the default 3 s is for real
# deployments) and a session-timeout floor low enough for the 2-3 s session timeouts the members
# use, so that a vanished member is evicted in seconds.
GROUP_CONFIG = """
[groups]
initial_rebalance_delay_ms = 200
min_session_timeout_ms = 1000
"""

# Upper bounds: only reached when something is wrong.
WAIT_S = 60.0


def wait_until(cond, what: str, timeout: float = WAIT_S, interval: float = 0.05):
    """Polls `cond()` until it returns a truthy value, which is returned. Fails with `what` (a string
    or a callable giving one, for the state at the time of failure) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            desc = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {desc}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Member:
    """A group member process (group_member.py) and the events it reported."""

    def __init__(self, name: str, log_dir: Path, **conf):
        self.name = name
        self.conf = conf
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.stderr_path = log_dir / f"member-{name}.stderr.log"
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), json.dumps(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=HERE,
        )
        self.killed_at: float | None = None
        self.reader = threading.Thread(target=self._read, name=f"member-{name}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"ev": "garbage", "line": line.decode(errors="replace")}
            event["t"] = time.monotonic()
            with self.lock:
                self.events.append(event)

    # --- what the member reported ----------------------------------------------------------

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.events)

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.snapshot() if e["ev"] == kind]

    @property
    def owned(self) -> set[tuple[str, int]]:
        """The member's assignment as of its last rebalance callback (empty once it has exited)."""
        if not self.alive():
            return set()
        changes = [e for e in self.snapshot() if e["ev"] in ("assign", "revoke", "lost")]
        return {tuple(tp) for tp in changes[-1]["owned"]} if changes else set()

    @property
    def last_assign(self) -> dict | None:
        assigns = self.of("assign")
        return assigns[-1] if assigns else None

    def records(self) -> list[tuple[str, int, int, str]]:
        return [tuple(r) for e in self.of("records") for r in e["recs"]]

    def acked_commits(self) -> dict[tuple[str, int], int]:
        """The highest offset per partition whose synchronous commit the client reported as done."""
        out: dict[tuple[str, int], int] = {}
        for e in self.of("commit"):
            if e["error"] is not None:
                continue
            failed = {(t, p) for t, p, _ in e["errors"]}
            for t, p, o in e["offsets"]:
                if (t, p) not in failed:
                    out[(t, p)] = max(out.get((t, p), -1), o)
        return out

    def commit_failures(self) -> list[dict]:
        return [e for e in self.of("commit") if e["error"] is not None or e["errors"]]

    def errors(self) -> list[str]:
        return [e["msg"] for e in self.of("error")]

    def describe(self) -> str:
        tail = [e for e in self.snapshot() if e["ev"] != "records"][-8:]
        return f"{self.name}(alive={self.alive()}, owned={sorted(self.owned)}, last events={tail})"

    # --- lifecycle -------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = WAIT_S) -> None:
        """Asks the member to close its consumer as an application would, and waits for it to exit."""
        try:
            self.proc.stdin.write(b"close\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not exit within {timeout}s of close; {self.stderr_tail()}")
        self.reader.join(10)
        assert rc == 0, f"member {self.name} exited {rc}; {self.stderr_tail()}"
        assert self.of("closed"), f"member {self.name} exited without closing its consumer"

    def kill(self) -> None:
        """SIGKILL: the member vanishes without a LeaveGroup or a final commit."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        # When it was surely dead (same clock as the events' "ts": CLOCK_MONOTONIC).
        self.killed_at = time.monotonic()
        self.reader.join(10)

    def go(self) -> None:
        """Lets a member started with hold=True subscribe."""
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def stderr_tail(self, lines: int = 40) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        text = self.stderr_path.read_text(errors="replace").splitlines()
        return f"stderr of {self.name}:\n" + "\n".join(text[-lines:])

    def cleanup(self) -> None:
        if self.alive():
            self.kill()
        self._stderr.close()


# --- assertions over several members ------------------------------------------------------------


def ownership(live: list[Member]) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for m in live:
        for tp in m.owned:
            out.setdefault(tp, []).append(m.name)
    return out


def owned_exactly_once(live: list[Member], partitions: set[tuple[str, int]]) -> bool:
    """Every partition is owned by exactly one of `live`, and each of them owns something."""
    own = ownership(live)
    return set(own) == partitions and all(len(v) == 1 for v in own.values()) and all(m.owned for m in live)


def wait_owned_exactly_once(live: list[Member], partitions: set[tuple[str, int]], timeout: float = WAIT_S) -> dict:
    wait_until(
        lambda: owned_exactly_once(live, partitions),
        lambda: f"each of {len(partitions)} partitions owned by exactly one of {[m.name for m in live]}: "
        + "; ".join(m.describe() for m in live),
        timeout,
    )
    return ownership(live)


def assert_not_evicted_early(survivor: Member, killed_at: float, session_ms: int) -> None:
    """The survivor's first rebalance callback after a member was SIGKILLed came no earlier than
    most of the session timeout: the coordinator waited for the session to expire rather than,
    say, evicting on disconnect. (The victim's last heartbeat was a few hundred ms before the kill,
    hence the margin; a late reaction is never a failure.)"""
    reaction = next(e for e in survivor.snapshot() if e["ev"] in ("assign", "revoke", "lost") and e["t"] > killed_at)
    assert reaction["t"] - killed_at >= 0.6 * session_ms / 1000, (
        f"the member was evicted {reaction['t'] - killed_at:.2f}s after it was killed; its session timeout is {session_ms} ms"
    )


def ownership_intervals(m: Member) -> list[tuple[tuple[str, int], float, float, str]]:
    """(partition, start, end, how it ended) for every span in which `m` owned a partition.

    Uses the member's own timestamps (CLOCK_MONOTONIC, comparable across processes): a span starts
    when the assign callback that gave the partition was entered ("t0") and ends when the revoke or
    lost callback that took it away had returned ("ts"), or when the member exited (its "closed"
    event, or the moment it was known dead after a SIGKILL). Spans still open end at +inf. The
    spans are therefore as wide as the member's ownership can have been, never narrower.
    """
    spans = []
    since: dict[tuple[str, int], float] = {}
    end_of_life = float("inf")
    for e in m.snapshot():
        if e["ev"] == "assign":
            for tp in map(tuple, e["parts"]):
                since.setdefault(tp, e["t0"])
        elif e["ev"] in ("revoke", "lost"):
            for tp in map(tuple, e["parts"]):
                if tp in since:
                    spans.append((tp, since.pop(tp), e["ts"], e["ev"]))
        elif e["ev"] == "closed":
            end_of_life = min(end_of_life, e["ts"])
    if m.killed_at is not None:
        end_of_life = min(end_of_life, m.killed_at)
    for tp, start in since.items():
        spans.append((tp, start, end_of_life, "exit" if end_of_life != float("inf") else "open"))
    return spans


def double_ownership(ms: list[Member]) -> list[str]:
    """Every moment at which a partition was owned by two members at once (by their callbacks):
    a partition must be revoked by its old owner before its new owner's assign callback runs."""
    by_tp: dict[tuple[str, int], list[tuple[float, float, str, str]]] = {}
    for m in ms:
        for tp, start, end, how in ownership_intervals(m):
            by_tp.setdefault(tp, []).append((start, end, m.name, how))
    problems = []
    for tp, spans in sorted(by_tp.items()):
        spans.sort()
        for (s1, e1, n1, h1), (s2, e2, n2, h2) in zip(spans, spans[1:]):
            if s2 < e1:
                problems.append(
                    f"{tp}: {n2} was assigned it at {s2:.3f} while {n1} owned it (since {s1:.3f}, until {h1} at {e1:.3f})"
                )
    return problems


def callback_log(m: Member) -> list[tuple[str, list[int]]]:
    """The member's rebalance callbacks in order, as (kind, partitions)."""
    return [(e["ev"], [p for _, p in e["parts"]]) for e in m.snapshot() if e["ev"] in ("assign", "revoke", "lost")]


def all_records(ms: list[Member]) -> Counter:
    return Counter((t, p, o) for m in ms for t, p, o, _ in m.records())


# --- confluent-kafka admin views ----------------------------------------------------------------


def describe_group(bootstrap: str, group: str):
    admin = clients.admin_client(bootstrap)
    return admin.describe_consumer_groups([group], request_timeout=30)[group].result(30)


def wait_group(bootstrap: str, group: str, state: ConsumerGroupState, members: int, timeout: float = WAIT_S):
    """Waits until DescribeGroups reports `state` with `members` members; returns the description."""
    last = [None]

    def check():
        d = describe_group(bootstrap, group)
        last[0] = d
        return d if d.state == state and len(d.members) == members else None

    return wait_until(
        check,
        lambda: f"group {group} {state} with {members} members; last: "
        + (f"{last[0].state} {[(m.member_id, m.assignment.topic_partitions) for m in last[0].members]}" if last[0] else "none"),
        timeout,
        interval=0.2,
    )


def committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch from a consumer that never joins the group)."""
    c = clients.consumer(bootstrap, group_id=group)
    try:
        got = c.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    finally:
        c.close()
    for tp in got:
        assert tp.error is None, f"OffsetFetch error for {tp}"
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def listed_groups(bootstrap: str) -> set[str]:
    """The ids ListGroups gives (every broker asked); any broker's error fails the call. The
    admin client is kept until the answer is in: one dropped earlier answers nothing."""
    admin = clients.admin_client(bootstrap)
    listing = admin.list_consumer_groups(request_timeout=30).result()
    assert not listing.errors, listing.errors
    return {g.group_id for g in listing.valid}


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    return {(topic, p): clients.watermarks(bootstrap, topic, p)[1] for p in range(partitions)}


def produce(bootstrap: str, topic: str, count: int, prefix: str = "r") -> list[tuple]:
    """Produces `count` keyed records spread over the topic's partitions; returns the deliveries."""
    p = clients.producer(bootstrap)
    return clients.produce_all(p, topic, [(f"{prefix}{i}".encode(), f"value {prefix}{i}".encode()) for i in range(count)])


def group_consume(bootstrap: str, topic: str, group: str, count: int, protocol: str = "classic") -> list[tuple[int, int, bytes]]:
    """Consumes `count` records as a member of `group`, committing synchronously as it goes;
    returns (partition, offset, value) of each."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "group.protocol": protocol,
        "logger": clients.RDKAFKA_LOG,
    }
    if protocol == "classic":
        conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 90
    try:
        c.subscribe([topic])
        while len(got) < count:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {count} records"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
            c.commit(message=msg, asynchronous=False)
    finally:
        c.close()
    return got
