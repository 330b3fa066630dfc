"""Crash and restart: acknowledged records survive kill -9, torn tails are cut, clean stops are clean.

All with the default flush policy (storage.flush_messages = 0: the page cache). A kill -9 ends the
process, not the machine, so the page cache keeps every write the process made; an acknowledged
record must therefore survive it.
"""

from __future__ import annotations

import threading
import time

import pytest

import clients
from segments import read_batches

T = clients.TIMEOUT_S


def test_acknowledged_records_survive_kill9_mid_stream(corral, topic_name):
    b = corral.bootstrap
    clients.create_topic(b, topic_name, partitions=2)

    acked: dict[int, tuple[int, int]] = {}  # record number -> (partition, offset)
    failed: dict[int, str] = {}
    stop = threading.Event()
    produced = [0]
    producer_error: list[BaseException] = []
    p = clients.producer(
        b,
        linger_ms=2,
        message_timeout_ms=120000,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=500,
        queue_buffering_max_messages=50000,
    )

    def on_delivery(err, msg):
        i = int(msg.key())
        if err is not None:
            failed[i] = str(err)
        else:
            acked[i] = (msg.partition(), msg.offset())

    def run():
        try:
            i = 0
            while not stop.is_set() and i < 1_000_000:
                try:
                    p.produce(topic_name, key=str(i).encode(), value=f"durable record {i}".encode(), on_delivery=on_delivery)
                    i += 1
                    produced[0] = i
                except BufferError:
                    p.poll(0.05)
                p.poll(0)
            p.flush(120)
        except BaseException as e:  # surfaced by the main thread
            producer_error.append(e)

    thread = threading.Thread(target=run, name="durability-producer", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 3000:
            assert time.monotonic() < deadline and thread.is_alive(), f"only {len(acked)} records acknowledged"
            time.sleep(0.01)
        # Mid-stream: the producer thread is still producing and has records in flight.
        in_flight = len(p)
        acked_at_kill = len(acked)
        assert thread.is_alive() and in_flight > 0
        rc = corral.kill9()
        assert rc == -9
        corral.start()
        deadline = time.monotonic() + 90
        while len(acked) < acked_at_kill + in_flight + 3000:
            assert time.monotonic() < deadline, (
                f"producer stalled after restart: {len(acked)} acknowledged ({acked_at_kill} before the kill), "
                f"{len(failed)} failed, first failure: {next(iter(failed.values()), None)}"
            )
            assert thread.is_alive(), f"producer thread ended early: {producer_error}"
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(150)
    assert not thread.is_alive(), "producer did not finish flushing"
    assert not producer_error, producer_error
    assert len(p) == 0, f"{len(p)} records never delivered"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {list(failed.items())[:3]}"
    assert len(acked) == produced[0]
    print(f"kill -9 with {in_flight} records in flight after {acked_at_kill} acknowledged; {len(acked)} acknowledged in all")

    got = clients.consume_all(b, topic_name, timeout=120)
    log = {}
    for part, records in got.items():
        assert [r.offset for r in records] == list(range(len(records))), f"partition {part}: offsets not contiguous from 0"
        for r in records:
            log[(part, r.offset)] = r
    # Every acknowledged record is at exactly its acknowledged offset.
    for i, (part, offset) in acked.items():
        r = log.get((part, offset))
        assert r is not None, f"record {i} acknowledged at {part}/{offset} is missing (high watermark {len(got[part])})"
        assert (r.key, r.value) == (str(i).encode(), f"durable record {i}".encode()), f"record {i}: another record at {part}/{offset}"
    # In produce order within each partition.
    for part in got:
        offsets = [o for _, (pp, o) in sorted(acked.items()) if pp == part]
        assert offsets == sorted(offsets), f"partition {part}: records stored out of produce order"
    # Nothing extra: the idempotent producer's retries across the crash were not stored twice.
    assert len(log) == len(acked), f"{len(log) - len(acked)} records in the log beyond those acknowledged (duplicates?)"


def produce_rounds(bootstrap: str, topic: str, rounds: int, per_round: int, tag: str = "r"):
    """Produces `rounds` separate flushes (so at least `rounds` batches) to partition 0."""
    p = clients.producer(bootstrap, linger_ms=0)
    delivered = []
    for rnd in range(rounds):
        items = [(f"{tag}{rnd}-{i}".encode(), f"value {tag}{rnd}-{i}".encode()) for i in range(per_round)]
        delivered += clients.produce_all(p, topic, items, partition=0)
    return delivered


TORN_TAILS = {
    # name: (how to damage the file given the last batch, whether that batch is lost)
    "cut-mid-records": lambda data, last: data[: last.position + last.total_len // 2],
    "cut-mid-length-prefix": lambda data, last: data[: last.position + 7],
    "corrupt-last-batch-crc": lambda data, last: flip(data, last.position + last.total_len - 3),
    "zeroes-after-last-batch": lambda data, last: data + bytes(4096),
}


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize("damage", list(TORN_TAILS))
def test_torn_tail_is_truncated_on_recovery(corral, topic_name, damage):
    b = corral.bootstrap
    clients.create_topic(b, topic_name, partitions=1)
    delivered = produce_rounds(b, topic_name, rounds=8, per_round=25)
    assert [d[3] for d in delivered] == list(range(200))
    corral.stop()

    seg = corral.partition_dir(topic_name, 0) / "00000000000000000000.log"
    batches, trailing = read_batches(seg)
    assert trailing == 0 and len(batches) >= 8
    last = batches[-1]
    seg.write_bytes(TORN_TAILS[damage](seg.read_bytes(), last))
    marker = corral.data_dir / ".clean_shutdown"
    assert marker.exists(), "a clean stop leaves the clean-shutdown marker"
    marker.unlink()

    corral.start()
    assert "clean_start=false" in corral.run_log_text()
    lost_last = damage != "zeroes-after-last-batch"
    end = last.base_offset if lost_last else last.last_offset + 1
    assert clients.watermarks(b, topic_name, 0) == (0, end)

    got = clients.consume_all(b, topic_name)[0]
    assert [(r.offset, r.key, r.value) for r in got] == [(d[3], d[0], d[1]) for d in delivered[:end]]

    # New records continue from the recovered end.
    more = produce_rounds(b, topic_name, rounds=2, per_round=10, tag="after")
    assert [d[3] for d in more] == list(range(end, end + 20))
    got = clients.consume_all(b, topic_name)[0]
    assert [(r.offset, r.key) for r in got] == [(d[3], d[0]) for d in delivered[:end] + more]
    # The damaged bytes are gone from the file: its batches cover offsets 0.. without gap or overlap
    # and nothing follows the last one.
    corral.stop()
    batches, trailing = read_batches(seg)
    assert trailing == 0
    assert batches[0].base_offset == 0
    for prev, nxt in zip(batches, batches[1:]):
        assert nxt.base_offset == prev.last_offset + 1, f"batch at {nxt.position} follows offset {prev.last_offset}"
    assert batches[-1].last_offset == end + 19


def test_graceful_shutdown_then_restart_keeps_data(corral, topic_name):
    b = corral.bootstrap
    clients.create_topic(b, topic_name, partitions=3)
    p = clients.producer(b)
    items = [(f"k{i}".encode(), f"graceful {i}".encode()) for i in range(600)]
    delivered = clients.produce_all(p, topic_name, items)

    # A consumer is connected and long-polling while the server is asked to stop.
    c = clients.consumer(b, fetch_wait_max_ms=500)
    c.assign([clients.TopicPartition(topic_name, part, 0) for part in range(3)])
    deadline = time.monotonic() + T
    seen = 0
    while seen < 600 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen += 1
    assert seen == 600
    c.poll(0.2)  # a fetch at the end of the log is now waiting for data

    assert corral.stop() == 0
    assert (corral.data_dir / ".clean_shutdown").exists()
    c.close()

    corral.start()
    assert "clean_start=true" in corral.run_log_text()
    assert not (corral.data_dir / ".clean_shutdown").exists(), "the marker is consumed at start"
    got = clients.consume_all(b, topic_name)
    stored = {(r.partition, r.offset): (r.key, r.value) for recs in got.values() for r in recs}
    assert stored == {(part, off): (k, v) for k, v, part, off in delivered}

    # Writes continue at the end of each partition.
    ends = {part: len(recs) for part, recs in got.items()}
    more = clients.produce_all(clients.producer(b), topic_name, [(f"after{i}".encode(), b"x") for i in range(30)])
    for _, _, part, off in more:
        assert off >= ends[part]
    for part in range(3):
        offsets = sorted(off for _, _, pp, off in more if pp == part)
        assert offsets == list(range(ends[part], ends[part] + len(offsets)))
