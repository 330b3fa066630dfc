"""A crash loop: kill -9 at a random moment during a produce stream and a commit stream, restart,
and check that every acknowledged record and every acknowledged commit is there. Repeated
`CORRAL_CRASH_LOOP_ITERATIONS` times (3 in the test command; the long mode runs hundreds:
`CORRAL_CRASH_LOOP_ITERATIONS=300 .venv/bin/python -m pytest tests/e2e/test_crash_loop.py`).

Records are produced by raw Produce v3 (acks=-1, one record per request, one connection) and
offsets committed by raw OffsetCommit v2 of a simple group, so what counts as acknowledged is
exactly what the server answered, with no client retries in between.
"""

from __future__ import annotations

import os
import random
import threading
import time

import clients
import groupwire as gw
import kafkawire as kw

ITERATIONS = int(os.environ.get("CORRAL_CRASH_LOOP_ITERATIONS", "3"))
GROUP = "crash-loop"


def produce_stream(bootstrap: str, topic: str, stop: threading.Event, acked: list[bytes], start: int) -> None:
    try:
        conn = kw.Conn(bootstrap, timeout=5)
        n = start
        while not stop.is_set():
            value = f"r{n}".encode()
            conn.send(kw.produce_v3(n, topic, 0, kw.record_batch([(None, value)])))
            frame = conn.recv_frame()
            if frame is None:
                return
            _, res = kw.parse_produce_v3(frame)
            if res[(topic, 0)][0] == 0:
                acked.append(value)
            n += 1
    except (OSError, AssertionError):
        return  # the server went away mid-request: that record was not acknowledged


def commit_stream(bootstrap: str, topic: str, stop: threading.Event, acked: list[int], start: int) -> None:
    try:
        conn = kw.Conn(bootstrap, timeout=5)
        offset = start
        while not stop.is_set():
            conn.send(gw.offset_commit_v2(offset, GROUP, -1, "", {(topic, 0): offset}))
            frame = conn.recv_frame()
            if frame is None:
                return
            _, codes = gw.parse_offset_commit_v2(frame)
            if codes[(topic, 0)] == 0:
                acked.append(offset)
            offset += 1
    except (OSError, AssertionError):
        return


def committed(bootstrap: str, topic: str) -> int:
    conn = kw.Conn(bootstrap, timeout=30)
    try:
        conn.send(gw.offset_fetch_v1(1, GROUP, [(topic, 0)]))
        _, got = gw.parse_offset_fetch_v1(conn.recv_frame())
        return got[(topic, 0)][0]
    finally:
        conn.close()


def test_every_acknowledged_record_and_commit_survives_a_crash_loop(corral, topic_name):
    clients.create_topic(corral.bootstrap, topic_name)
    records: list[bytes] = []
    commits: list[int] = []
    rng = random.Random(int(os.environ.get("CORRAL_CRASH_LOOP_SEED", "848")))
    started = time.monotonic()
    for iteration in range(ITERATIONS):
        stop = threading.Event()
        threads = [
            threading.Thread(target=produce_stream, args=(corral.bootstrap, topic_name, stop, records, 1_000_000 * iteration)),
            threading.Thread(target=commit_stream, args=(corral.bootstrap, topic_name, stop, commits, 1_000_000 * iteration)),
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.2, 1.5))
        corral.kill9()
        stop.set()
        for t in threads:
            t.join(30)
        corral.start()
        # Every acknowledged commit is there: the committed offset is at least the last one
        # acknowledged (a commit the server applied but could not answer may follow it).
        if commits:
            assert committed(corral.bootstrap, topic_name) >= commits[-1], f"iteration {iteration}: a commit was lost"
    got = {r.value for r in clients.consume_all(corral.bootstrap, topic_name)[0]}
    lost = [v for v in records if v not in got]
    assert not lost, f"{len(lost)} of {len(records)} acknowledged records lost, e.g. {lost[:5]}"
    assert records and commits, "nothing was acknowledged: the loop tested nothing"
    print(
        f"crash loop: {ITERATIONS} kill -9 in {time.monotonic() - started:.0f} s; "
        f"{len(records)} acknowledged records and {len(commits)} acknowledged commits, none lost"
    )
