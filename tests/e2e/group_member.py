"""One consumer-group member in its own process, driven by the group tests (see groups.py).

    python group_member.py '<json config>'

The config names the client ("confluent" or "kafka-python"), the bootstrap address, the group,
the topics and the client settings. The member subscribes, consumes, and after every batch it
processed commits the next offsets synchronously. It reports what happens as JSON lines on stdout,
one event per line, flushed at once:

    {"ev": "started", "pid": N}
    {"ev": "assign", "parts": [[topic, p], ...], "owned": [[topic, p], ...], "gen": G, "member": ID}
    {"ev": "revoke" | "lost", "parts": [...], "owned": [...]}
    {"ev": "records", "recs": [[topic, p, offset, key], ...]}
    {"ev": "committing", "offsets": [[topic, p, offset], ...]}     (before each synchronous commit)
    {"ev": "commit", "offsets": [[topic, p, offset], ...], "errors": [[topic, p, error] ...], "error": null | str}
    {"ev": "error", "msg": str, "code": name}                       (confluent-kafka)
    {"ev": "holding", "pid": N}                                   (with "hold": consumer made, not subscribed)
    {"ev": "closed"}

"owned" is the member's whole assignment after the callback, so the test does not have to replay
incremental (cooperative) assignments itself. Every event also carries "ts", the member's
time.monotonic() when it was emitted (CLOCK_MONOTONIC, one clock for every process of the machine,
so events of different members can be ordered); rebalance callbacks add "t0", the time the callback
was entered. An assignment therefore holds from its "t0" and a revocation is complete at its "ts".

With "protocol": "consumer" a confluent-kafka member uses the KIP-848 protocol
(group.protocol=consumer): the broker decides the session timeout, the heartbeat interval and the
assignment, so session.timeout.ms, heartbeat.interval.ms and partition.assignment.strategy are not
set (librdkafka rejects them); "remote_assignor" becomes group.remote.assignor. Its rebalance
callbacks are incremental, as with cooperative-sticky. With "hold": true the member creates its
consumer but subscribes only when told "go" on stdin (a restart can then be timed precisely).
"log_level" sets the level of librdkafka's log lines on stderr (e.g. "DEBUG" with a "debug" setting).

Commands arrive as lines on stdin: "close" closes the consumer the way an application would
(confluent-kafka: close(), which sends LeaveGroup for a dynamic classic member, and for a KIP-848
member a leave heartbeat with epoch -1, or -2 if static; kafka-python: close()) and exits 0. End of
stdin does the same, so a member never outlives the test that started it. A member that is
SIGKILLed does neither: that is how the tests make a member disappear without a LeaveGroup.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import struct
import sys
import threading
import time

CONF = json.loads(sys.argv[1])
OUT_LOCK = threading.Lock()


def emit(**event) -> None:
    event["ts"] = time.monotonic()
    line = json.dumps(event)
    with OUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


COMMANDS: queue.Queue = queue.Queue()


def read_stdin() -> None:
    for line in sys.stdin:
        COMMANDS.put(line.strip())
    COMMANDS.put("close")


def command() -> str | None:
    try:
        return COMMANDS.get_nowait()
    except queue.Empty:
        return None


def tps(parts) -> list:
    return sorted([tp.topic, tp.partition] for tp in parts)


# --- confluent-kafka ----------------------------------------------------------------------------


def cgmd_generation(consumer) -> int | None:
    """The generation librdkafka holds, from its serialized group metadata (`CGMDv2:` + int32 in
    host byte order + group id + member id + instance id)."""
    raw = consumer.consumer_group_metadata()
    if isinstance(raw, bytes) and raw.startswith(b"CGMDv2:"):
        return struct.unpack_from("=i", raw, 7)[0]
    return None


def run_confluent() -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    log = logging.getLogger("librdkafka")
    level = getattr(logging, CONF.get("log_level", "INFO"))
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(message)s")
    kip848 = CONF.get("protocol") == "consumer"
    cooperative = kip848 or CONF.get("assignor") == "cooperative-sticky"
    conf = {
        "bootstrap.servers": CONF["bootstrap"],
        "group.id": CONF["group"],
        "client.id": CONF.get("client_id", "corral-e2e-member"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": CONF.get("max_poll_interval_ms", 20000),
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 500,
        "logger": log,
    }
    if kip848:
        # KIP-848: the broker decides the session timeout, the heartbeat interval and the assignor.
        conf["group.protocol"] = "consumer"
        if CONF.get("remote_assignor"):
            conf["group.remote.assignor"] = CONF["remote_assignor"]
    else:
        conf["session.timeout.ms"] = CONF.get("session_timeout_ms", 6000)
        conf["heartbeat.interval.ms"] = CONF.get("heartbeat_interval_ms", 500)
    if CONF.get("assignor"):
        conf["partition.assignment.strategy"] = CONF["assignor"]
    if CONF.get("instance_id"):
        conf["group.instance.id"] = CONF["instance_id"]
    conf.update(CONF.get("extra", {}))
    consumer = Consumer(conf)
    owned: set = set()

    def on_assign(c, parts):
        t0 = time.monotonic()
        # What confluent-kafka does by default, made explicit: cooperative assignments are
        # increments, eager ones the whole assignment.
        if cooperative:
            c.incremental_assign(parts)
        else:
            c.assign(parts)
            owned.clear()
        owned.update((tp.topic, tp.partition) for tp in parts)
        emit(ev="assign", parts=tps(parts), owned=sorted(map(list, owned)), gen=cgmd_generation(c), member=c.memberid(), t0=t0)

    def on_revoke(c, parts):
        t0 = time.monotonic()
        if cooperative:
            c.incremental_unassign(parts)
        else:
            c.unassign()
        owned.difference_update((tp.topic, tp.partition) for tp in parts)
        emit(ev="revoke", parts=tps(parts), owned=sorted(map(list, owned)), t0=t0)

    def on_lost(c, parts):
        t0 = time.monotonic()
        if cooperative:
            c.incremental_unassign(parts)
        else:
            c.unassign()
        owned.difference_update((tp.topic, tp.partition) for tp in parts)
        emit(ev="lost", parts=tps(parts), owned=sorted(map(list, owned)), t0=t0)

    if CONF.get("hold"):
        emit(ev="holding", pid=os.getpid())
        while True:
            cmd = COMMANDS.get()
            if cmd == "go":
                break
            if cmd == "close":
                consumer.close()
                emit(ev="closed")
                return
    consumer.subscribe(CONF["topics"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit(ev="started", pid=os.getpid())
    batch = CONF.get("batch", 100)
    while True:
        cmd = command()
        if cmd == "close":
            consumer.close()
            emit(ev="closed")
            return
        msgs = consumer.consume(num_messages=batch, timeout=0.1)
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                emit(ev="error", msg=str(err), code=err.name())
        if not good:
            continue
        emit(ev="records", recs=[[m.topic(), m.partition(), m.offset(), (m.key() or b"").decode()] for m in good])
        nxt: dict = {}
        for m in good:
            nxt[(m.topic(), m.partition())] = max(nxt.get((m.topic(), m.partition()), 0), m.offset() + 1)
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(nxt.items())]
        emit(ev="committing", offsets=[[t, p, o] for (t, p), o in sorted(nxt.items())])
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
            errors = [[tp.topic, tp.partition, str(tp.error)] for tp in result if tp.error is not None]
            emit(ev="commit", offsets=[[tp.topic, tp.partition, tp.offset] for tp in result], errors=errors, error=None)
        except KafkaException as e:
            emit(ev="commit", offsets=[[t, p, o] for (t, p), o in sorted(nxt.items())], errors=[], error=str(e))


# --- kafka-python -------------------------------------------------------------------------------


def run_kafka_python() -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    kwargs = dict(
        bootstrap_servers=CONF["bootstrap"],
        group_id=CONF["group"],
        client_id=CONF.get("client_id", "corral-e2e-member"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=CONF.get("session_timeout_ms", 6000),
        heartbeat_interval_ms=CONF.get("heartbeat_interval_ms", 500),
        max_poll_interval_ms=CONF.get("max_poll_interval_ms", 20000),
        fetch_max_wait_ms=100,
        request_timeout_ms=30000,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=500,
    )
    if CONF.get("instance_id"):
        kwargs["group_instance_id"] = CONF["instance_id"]
    kwargs.update(CONF.get("extra", {}))
    consumer = KafkaConsumer(**kwargs)
    owned: set = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            owned.difference_update((tp.topic, tp.partition) for tp in revoked)
            emit(ev="revoke", parts=tps(revoked), owned=sorted(map(list, owned)))

        def on_partitions_assigned(self, assigned):
            owned.clear()  # kafka-python's assignors are eager: this is the whole assignment
            owned.update((tp.topic, tp.partition) for tp in assigned)
            md = consumer.group_metadata()
            emit(ev="assign", parts=tps(assigned), owned=sorted(map(list, owned)), gen=md.generation_id, member=md.member_id)

        def on_partitions_lost(self, lost):
            owned.difference_update((tp.topic, tp.partition) for tp in lost)
            emit(ev="lost", parts=tps(lost), owned=sorted(map(list, owned)))

    consumer.subscribe(CONF["topics"], listener=Listener())
    emit(ev="started", pid=os.getpid())
    batch = CONF.get("batch", 100)
    while True:
        cmd = command()
        if cmd == "close":
            consumer.close(autocommit=False)
            emit(ev="closed")
            return
        polled = consumer.poll(timeout_ms=100, max_records=batch)
        good = [r for recs in polled.values() for r in recs]
        if not good:
            continue
        emit(ev="records", recs=[[r.topic, r.partition, r.offset, (r.key or b"").decode()] for r in good])
        nxt: dict = {}
        for r in good:
            nxt[(r.topic, r.partition)] = max(nxt.get((r.topic, r.partition), 0), r.offset + 1)
        offsets = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in nxt.items()}
        emit(ev="committing", offsets=[[t, p, o] for (t, p), o in sorted(nxt.items())])
        try:
            consumer.commit(offsets=offsets)
            emit(ev="commit", offsets=[[t, p, o] for (t, p), o in sorted(nxt.items())], errors=[], error=None)
        except KafkaError as e:
            emit(ev="commit", offsets=[[t, p, o] for (t, p), o in sorted(nxt.items())], errors=[], error=repr(e))


def main() -> None:
    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    client = CONF["client"]
    if client == "confluent":
        run_confluent()
    elif client == "kafka-python":
        run_kafka_python()
    else:
        raise SystemExit(f"unknown client {client!r}")


if __name__ == "__main__":
    main()
