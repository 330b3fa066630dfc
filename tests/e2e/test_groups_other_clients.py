"""Consumer groups with clients other than librdkafka 2.16: kafka-python (pure Python), KafkaJS
(pure JavaScript) and Debian's kcat (librdkafka 2.0.2, balanced consumer `-G`).

Each forms a group of two members, consumes every record exactly once and commits; the committed
offsets are then read back with other clients (confluent-kafka's committed() and AdminClient's
list_consumer_group_offsets, i.e. OffsetFetch) and must match what was consumed. The
kafka-python and KafkaJS groups run twice: against corral on local storage, and against corral in
front of the classic-only Kafka cluster (the records in Kafka, the group in corral).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions

import clients
from apache_kafka import corral_upstream_config, sidecar_config
from groups import (
    GROUP_CONFIG,
    all_records,
    committed,
    high_watermarks,
    produce,
    unique,
    wait_group,
    wait_owned_exactly_once,
    wait_until,
)

JS_DIR = Path(__file__).resolve().parent / "js"


def admin_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """All committed offsets of the group, via AdminClient.list_consumer_group_offsets."""
    admin = clients.admin_client(bootstrap)
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)[group].result(30)
    assert result.group_id == group
    for tp in result.topic_partitions:
        assert tp.error is None, tp
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def next_offsets(records) -> dict[tuple[str, int], int]:
    out: dict = {}
    for t, p, o in records:
        out[(t, p)] = max(out.get((t, p), 0), o + 1)
    return out


@pytest.fixture(params=["local", "upstream", "sidecar"])
def group_server(request, corral_factory, apache_kafka_classic):
    """corral on local storage, in front of the classic-only Kafka cluster (the records in
    Kafka, the group in corral), or a sidecar in front of that Kafka whose groups such a corral
    runs (the clients see only the sidecar)."""
    if request.param == "local":
        return corral_factory(config=GROUP_CONFIG)
    front = corral_factory(config=GROUP_CONFIG + corral_upstream_config(apache_kafka_classic.bootstrap))
    if request.param == "sidecar":
        return corral_factory(config=sidecar_config(apache_kafka_classic.bootstrap, front.bootstrap), name="sidecar")
    return front


def test_kafka_python_group(group_server, members):
    b = group_server.bootstrap
    topic, group = unique("kp-group"), unique("kp-group")
    clients.create_topic(b, topic, partitions=4)
    all_parts = {(topic, p) for p in range(4)}
    conf = dict(client="kafka-python", bootstrap=b, group=group, topics=[topic], session_timeout_ms=6000, heartbeat_interval_ms=300)
    ms = [members(f"kp{i}", client_id=f"e2e-kp-{i}", **conf) for i in range(2)]
    wait_owned_exactly_once(ms, all_parts)
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 2)
    assert sorted(d.client_id for d in desc.members) == ["e2e-kp-0", "e2e-kp-1"]

    produced = {(topic, p, o) for _, _, p, o in produce(b, topic, 400, prefix="kp")}
    ends = next_offsets(produced)

    def all_committed():
        acked = {}
        for m in ms:
            acked.update({tp: max(o, acked.get(tp, -1)) for tp, o in m.acked_commits().items()})
        return produced <= set(all_records(ms)) and all(acked.get(tp, -1) >= e for tp, e in ends.items())

    wait_until(all_committed, lambda: "; ".join(m.describe() for m in ms))
    counts = all_records(ms)
    assert set(counts) == produced and max(counts.values()) == 1
    for m in ms:
        assert {(t, p) for t, p, _, _ in m.records()} <= m.owned
        assert not m.commit_failures(), m.commit_failures()[:3]
    consumed_ends = next_offsets(counts)
    assert committed(b, group, sorted(all_parts)) == consumed_ends == high_watermarks(b, topic, 4)
    assert admin_offsets(b, group) == consumed_ends

    # kafka-python's close() sends LeaveGroup: the other member takes everything at once.
    ms[0].close()
    wait_owned_exactly_once(ms[1:], all_parts)
    wait_group(b, group, ConsumerGroupState.STABLE, 1)
    ms[1].close()
    wait_group(b, group, ConsumerGroupState.EMPTY, 0)


def test_kafkajs_group(group_server):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/test.sh installs it)"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed: run `npm ci` in tests/e2e/js"
    b = group_server.bootstrap
    topic, group = unique("kjs-group"), unique("kjs-group")
    clients.create_topic(b, topic, partitions=4)

    run = subprocess.run(
        [node, str(JS_DIR / "kafkajs_group.js"), b, topic, group, "4", "300"],
        cwd=JS_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=180,
    )
    stderr = run.stderr.decode(errors="replace")
    assert run.returncode == 0, f"kafkajs_group.js exited {run.returncode}:\n{stderr}"
    out = json.loads(run.stdout.decode().strip().splitlines()[-1])

    # Every record exactly once, each by the consumer owning its partition.
    consumed = [(topic, c["partition"], c["offset"]) for c in out["consumed"]]
    assert len(consumed) == len(set(consumed)) == 300, f"{len(consumed)} deliveries of {len(set(consumed))} records"
    hw = high_watermarks(b, topic, 4)
    assert set(consumed) == {(topic, p, o) for (t, p), end in hw.items() for o in range(end)}
    for c in out["consumed"]:
        assert c["partition"] in out["assignments"][c["consumer"]]

    # The offsets KafkaJS committed (autoCommit, and on disconnect) are what it consumed, as seen
    # by KafkaJS's own admin and by librdkafka.
    consumed_ends = next_offsets(consumed)
    assert {(topic, int(p)): o for p, o in out["committed"].items()} == consumed_ends
    assert committed(b, group, sorted(hw)) == consumed_ends == hw
    assert admin_offsets(b, group) == consumed_ends
    wait_group(b, group, ConsumerGroupState.EMPTY, 0)


KCAT_REBALANCED = re.compile(r"% Group (\S+) rebalanced \(memberid (\S+)\): (assigned|revoked): (.*)")


class Kcat:
    """`kcat -G GROUP TOPIC`: a balanced consumer printing `topic partition offset key` lines."""

    def __init__(self, bootstrap: str, group: str, topic: str, workdir: Path, name: str, exit_at_end: bool = False):
        exe = shutil.which("kcat")
        assert exe, "kcat is not installed (scripts/test.sh installs Debian's kcat)"
        self.out_path = workdir / f"kcat-{name}.out"
        self.err_path = workdir / f"kcat-{name}.err"
        args = [exe, "-b", bootstrap, "-G", group, "-u", "-f", "%t %p %o %k\\n"]
        args += ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300", "-X", "auto.offset.reset=earliest"]
        args += ["-X", "auto.commit.interval.ms=100"]
        if exit_at_end:
            args.append("-e")
        self.proc = subprocess.Popen(args + [topic], stdout=open(self.out_path, "wb"), stderr=open(self.err_path, "wb"))

    def owned(self) -> set[int]:
        """Partitions as of kcat's last rebalance line."""
        owned: set[int] = set()
        for line in self.err_path.read_text(errors="replace").splitlines():
            m = KCAT_REBALANCED.match(line)
            if m:
                parts = {int(x) for x in re.findall(r"\[(\d+)\]", m.group(4))}
                owned = parts if m.group(3) == "assigned" else owned - parts
        return owned

    def records(self) -> list[tuple[str, int, int]]:
        out = []
        text = self.out_path.read_text(errors="replace")
        for line in text[: text.rfind("\n") + 1].splitlines():  # complete lines only: kcat is writing
            t, p, o, _ = line.split(" ", 3)
            out.append((t, int(p), int(o)))
        return out

    def stop(self) -> None:
        """SIGTERM: kcat closes its consumer, which commits the offsets it stored."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.wait()

    def wait(self, timeout: float = 60) -> None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"kcat did not exit:\n{self.err_path.read_text(errors='replace')}")
        assert rc == 0, f"kcat exited {rc}:\n{self.err_path.read_text(errors='replace')}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_kcat_balanced_consumer_group(corral_factory, tmp_path):
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic, group = unique("kcat-group"), unique("kcat-group")
    clients.create_topic(b, topic, partitions=4)
    kcats = [Kcat(b, group, topic, tmp_path, f"member{i}") for i in range(2)]
    try:
        wait_until(
            lambda: all(k.owned() for k in kcats) and sorted(p for k in kcats for p in k.owned()) == [0, 1, 2, 3],
            lambda: f"both kcat members to own partitions: {[sorted(k.owned()) for k in kcats]}",
        )
        produced = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="kc")}
        wait_until(
            lambda: produced <= {r for k in kcats for r in k.records()},
            lambda: f"kcat members to print {len(produced)} records; got {sum(len(k.records()) for k in kcats)}",
        )
        owned_at_end = [k.owned() for k in kcats]
        for k in kcats:
            k.stop()
    finally:
        for k in kcats:
            k.kill()
    deliveries = [r for k in kcats for r in k.records()]
    assert len(deliveries) == len(set(deliveries)) and set(deliveries) == produced
    for k, owned in zip(kcats, owned_at_end):
        assert {p for _, p, _ in k.records()} <= owned, "a kcat member consumed a partition it does not own"
    hw = high_watermarks(b, topic, 4)
    assert committed(b, group, sorted(hw)) == next_offsets(deliveries) == hw
    assert admin_offsets(b, group) == hw

    # A later kcat in the same group resumes at the committed offsets: only new records.
    more = {(topic, p, o) for _, _, p, o in produce(b, topic, 40, prefix="kc-more")}
    late = Kcat(b, group, topic, tmp_path, "late", exit_at_end=True)
    try:
        late.wait()
    finally:
        late.kill()
    assert sorted(late.records()) == sorted(more)
    assert committed(b, group, sorted(hw)) == high_watermarks(b, topic, 4)


def test_mixed_client_group_and_an_incompatible_assignor(corral_factory, members):
    """librdkafka and kafka-python members share one group (both speak the `consumer` protocol
    with the range assignor); a member offering only an assignor nobody else supports is refused
    with INCONSISTENT_GROUP_PROTOCOL and does not disturb the group."""
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic, group = unique("mixed"), unique("mixed")
    clients.create_topic(b, topic, partitions=4)
    all_parts = {(topic, p) for p in range(4)}
    base = dict(bootstrap=b, group=group, topics=[topic], session_timeout_ms=6000, heartbeat_interval_ms=300)
    ms = [members("librdkafka", client="confluent", client_id="e2e-mixed-rdkafka", **base),
          members("kafka-python", client="kafka-python", client_id="e2e-mixed-kp", **base)]  # fmt: skip
    wait_owned_exactly_once(ms, all_parts)
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 2)
    assert desc.partition_assignor == "range"
    assert sorted(d.client_id for d in desc.members) == ["e2e-mixed-kp", "e2e-mixed-rdkafka"]
    marks = [len(m.snapshot()) for m in ms]

    odd = members("cooperative-only", client="confluent", client_id="e2e-mixed-coop", assignor="cooperative-sticky", **base)
    wait_until(lambda: odd.errors(), lambda: f"a JoinGroup error for the cooperative-only member; {odd.describe()}")
    assert "INCONSISTENT_GROUP_PROTOCOL" in odd.errors()[0]
    assert not odd.owned
    desc = wait_group(b, group, ConsumerGroupState.STABLE, 2)
    assert "e2e-mixed-coop" not in {d.client_id for d in desc.members}
    odd.close()

    produced = {(topic, p, o) for _, _, p, o in produce(b, topic, 200, prefix="mx")}
    wait_until(
        lambda: produced <= set(all_records(ms)) and committed(b, group, sorted(all_parts)) == high_watermarks(b, topic, 4),
        lambda: "; ".join(m.describe() for m in ms),
        interval=0.2,
    )
    counts = all_records(ms)
    assert set(counts) == produced and max(counts.values()) == 1
    for m, mark in zip(ms, marks):
        assert [e["ev"] for e in m.snapshot()[mark:] if e["ev"] in ("assign", "revoke", "lost")] == [], f"{m.name} was rebalanced"
    for m in ms:
        m.close()
