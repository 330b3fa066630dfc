"""LinkedIn Burrow (Debian's 1.2) monitors consumer lag by reading `__consumer_offsets`.

Burrow is what many operators point at a Kafka cluster to watch consumer lag. It never asks the
brokers about groups: it consumes the internal `__consumer_offsets` topic from the beginning,
decodes each record in Kafka's own internal layout (offset commit key v1 with value v3 here),
and combines the committed offsets with the partitions' end offsets, which it asks for with
ListOffsets v0 (sarama's legacy request). So this test proves that corral's durable group
records are readable by a third-party tool as Kafka's are, and that the lag an operator sees is
exact: per partition, committed offset and lag, and again after the group commits more.

Burrow 1.2 refuses to start without ZooKeeper, so the test runs a private standalone ZooKeeper
(Debian's `zookeeper` jars, in the foreground, on 127.0.0.1) next to Burrow and corral. Every
process listens on 127.0.0.1 and is stopped by its PID; Burrow's and ZooKeeper's logs are in the
test's temporary directory and attached to the report when the test fails. Both programs are
installed by scripts/test.sh; when one is missing the test fails, it is never skipped.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

import clients
import conftest
from groups import GROUP_CONFIG, WAIT_S, unique, wait_until

BURROW = "/usr/bin/Burrow"  # Debian's burrow package
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # libzookeeper-java, pulled in by zookeeper
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")  # libslf4j-java: ZooKeeper logs to stderr
CLUSTER = "corral"  # the cluster's name in Burrow's config and URLs

PARTITIONS = 3
RECORDS = 50  # per partition, before the first commit
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    """A port free on 127.0.0.1 right now (ZooKeeper cannot report one it picked itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Program:
    """A helper program started by the test: its output goes to a log file; stopped by its PID."""

    def __init__(self, name: str, workdir: Path):
        self.name = name
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.output_path = workdir / f"{name}.output.log"
        self.proc: subprocess.Popen | None = None

    def spawn(self, args: list[str]) -> None:
        with open(self.output_path, "ab") as out:
            out.write(f"==== e2e: {' '.join(args)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        conftest._LIVE[self.proc.pid] = self.proc

    def exited(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        conftest._LIVE.pop(self.proc.pid, None)


class ZooKeeper(Program):
    """A standalone ZooKeeper on 127.0.0.1 with its own data directory."""

    def __init__(self, workdir: Path):
        super().__init__("zookeeper", workdir)
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeper":
        java = shutil.which("java")
        assert java, "java not found: ZooKeeper needs a JRE (scripts/test.sh installs zookeeper, which pulls one in)"
        for jar in (ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR):
            assert jar.is_file(), f"{jar} not found: scripts/test.sh installs Debian's zookeeper"
        # The port is picked before ZooKeeper binds it: if another process takes it meanwhile,
        # ZooKeeper exits and the next attempt picks another.
        for _attempt in range(3):
            self.port = free_port()
            data_dir = self.workdir / "data"
            data_dir.mkdir(exist_ok=True)
            config = self.workdir / "zoo.cfg"
            config.write_text(
                "tickTime=500\n"
                f"dataDir={data_dir}\n"
                f"clientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=srvr\n"
            )
            self.spawn(
                [
                    java,
                    "-Xmx256m",
                    "-Dzookeeper.admin.enableServer=false",
                    "-cp",
                    f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(config),
                ]
            )
            if self._wait_serving():
                return self
            self.stop()
        raise AssertionError(f"ZooKeeper did not start in 3 attempts:\n{self.output()[-3000:]}")

    def _srvr(self) -> str:
        """ZooKeeper's `srvr` four-letter command: its version and mode once it serves."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"srvr")
                chunks = []
                while chunk := s.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return ""

    def _wait_serving(self) -> bool:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.exited() is not None:
                return False
            if "Mode: standalone" in self._srvr():
                return True
            time.sleep(0.1)
        raise AssertionError(f"ZooKeeper did not answer srvr within {WAIT_S}s:\n{self.output()[-3000:]}")


class Burrow(Program):
    """Burrow watching one cluster (corral): its cluster module asks for the partitions' end
    offsets every second, its consumer module reads `__consumer_offsets` from the beginning."""

    LISTENER = re.compile(r'"msg":"started listener".*"listener":"127\.0\.0\.1:(\d+)"')

    def __init__(self, workdir: Path, kafka: str, zookeeper: str):
        super().__init__("burrow", workdir)
        self.log_path = workdir / "burrow.log"
        self.kafka = kafka
        self.zookeeper = zookeeper
        self.http_port = 0

    def config(self) -> str:
        return f"""
[general]
pidfile="{self.workdir / 'burrow.pid'}"

[logging]
filename="{self.log_path}"
level="debug"

[zookeeper]
servers=["{self.zookeeper}"]
timeout=6
root-path="/burrow"

[client-profile.e2e]
client-id="burrow-e2e"
kafka-version="2.0.0"

[cluster.{CLUSTER}]
class-name="kafka"
servers=["{self.kafka}"]
client-profile="e2e"
topic-refresh=1
offset-refresh=1

[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers=["{self.kafka}"]
client-profile="e2e"
offsets-topic="__consumer_offsets"
start-latest=false

[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1

[evaluator.default]
class-name="caching"
expire-cache=1

[httpserver.default]
address="127.0.0.1:0"
"""

    def start(self) -> "Burrow":
        assert Path(BURROW).is_file(), f"{BURROW} not found: scripts/test.sh installs Debian's burrow"
        (self.workdir / "burrow.toml").write_text(self.config())
        self.spawn([BURROW, "-config-dir", str(self.workdir)])
        deadline = time.monotonic() + WAIT_S
        while True:
            rc = self.exited()
            assert rc is None, f"Burrow exited with code {rc} during startup:\n{self.output()}\n{self.log_tail()}"
            m = self.LISTENER.search(self.log_text())
            if m:
                self.http_port = int(m.group(1))
                break
            assert time.monotonic() < deadline, f"Burrow did not start its HTTP listener within {WAIT_S}s:\n{self.log_tail()}"
            time.sleep(0.05)
        wait_until(lambda: self.get("/burrow/admin")[0] == 200, lambda: f"Burrow's /burrow/admin answers 200:\n{self.log_tail()}")
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_entries(self) -> list[dict]:
        return [json.loads(line) for line in self.log_text().splitlines() if line.startswith("{")]

    def get(self, path: str) -> tuple[int, dict | str]:
        """GET on Burrow's HTTP API: (status, parsed JSON body). HTTP errors are returned."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as r:
                status, body = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode()
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    # --- what Burrow reports --------------------------------------------------------------

    def topic_offsets(self, topic: str) -> list[int] | None:
        """The partitions' end offsets as Burrow's cluster module last fetched them."""
        status, body = self.get(f"/v3/kafka/{CLUSTER}/topic/{topic}")
        return body.get("offsets") if status == 200 and isinstance(body, dict) else None

    def consumers(self) -> list[str]:
        status, body = self.get(f"/v3/kafka/{CLUSTER}/consumer")
        return body.get("consumers") or [] if status == 200 and isinstance(body, dict) else []

    def lag(self, group: str) -> tuple[dict[tuple[str, int], dict], int] | None:
        """Per (topic, partition): committed offset, lag at that commit, current lag; and the
        group's total lag. None while Burrow does not know the group."""
        status, body = self.get(f"/v3/kafka/{CLUSTER}/consumer/{group}/lag")
        if status != 200 or not isinstance(body, dict) or body.get("error"):
            return None
        st = body["status"]
        parts = {
            (p["topic"], p["partition"]): {
                "offset": p["end"]["offset"],
                "lag": p["end"]["lag"],
                "current_lag": p["current_lag"],
            }
            for p in st["partitions"]
            if p.get("end")
        }
        return parts, st["totallag"]


@pytest.fixture
def programs(request):
    """Starts helper programs (`programs(p)` with p a ZooKeeper or Burrow, returns p.start());
    stops them by their PID at teardown, the last started first."""
    started: list[Program] = []
    request.node._extra_logs = []

    def start(program: Program):
        started.append(program)
        request.node._extra_logs.append((f"{program.name} output", program.output_path))
        if isinstance(program, Burrow):
            request.node._extra_logs.append(("burrow log", program.log_path))
        return program.start()

    yield start
    for program in reversed(started):
        program.stop()


def expected_view(topic: str, committed: dict[int, int], ends: dict[int, int]) -> tuple[dict, int]:
    parts = {
        (topic, p): {"offset": committed[p], "lag": ends[p] - committed[p], "current_lag": ends[p] - committed[p]}
        for p in range(PARTITIONS)
    }
    return parts, sum(ends[p] - committed[p] for p in range(PARTITIONS))


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    done = consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    assert all(tp.error is None for tp in done), f"commit failed: {done}"


def test_burrow_reports_exact_lag_from_consumer_offsets(corral_factory, programs, tmp_path, topic_name):
    server = corral_factory(config=GROUP_CONFIG)
    b = server.bootstrap
    topic = topic_name
    clients.create_topic(b, topic, partitions=PARTITIONS)
    producer = clients.producer(b)
    for p in range(PARTITIONS):
        clients.produce_all(producer, topic, [(None, f"r{p}-{i}".encode()) for i in range(RECORDS)], partition=p)
    ends = {p: RECORDS for p in range(PARTITIONS)}

    zk = programs(ZooKeeper(tmp_path / "zookeeper"))
    burrow = programs(Burrow(tmp_path / "burrow", kafka=b, zookeeper=zk.address))

    # 1. Burrow's cluster module knows the partitions' end offsets (ListOffsets v0). Burrow
    # drops a commit for a partition whose end offset it does not know yet, so the group
    # commits only after this.
    wait_until(
        lambda: burrow.topic_offsets(topic) == [ends[p] for p in range(PARTITIONS)],
        lambda: f"Burrow reports end offsets {[ends[p] for p in range(PARTITIONS)]} for {topic}, "
        f"got {burrow.topic_offsets(topic)}:\n{burrow.log_tail()}",
    )

    # 2. A member of a live group (its group metadata is in __consumer_offsets too) commits
    # 10 of 50, 25 of 50 and 50 of 50: Burrow reports lags 40, 25 and 0, 65 in all.
    group = unique("burrow-group")
    consumer = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "logger": clients.RDKAFKA_LOG,
        }
    )
    try:
        consumer.subscribe([topic])

        def assigned():
            consumer.poll(0.1)
            return len(consumer.assignment()) == PARTITIONS

        wait_until(assigned, f"the only member of {group} is assigned all {PARTITIONS} partitions")

        first = {0: 10, 1: 25, 2: 50}
        commit(consumer, topic, first)
        want = expected_view(topic, first, ends)
        assert want[1] == 65
        # Just after its start Burrow may need 10-15 s to see it: sarama adds the 50 partitions of
        # __consumer_offsets to its fetch a few at a time, between fetches that each wait 250 ms
        # for data (as they would with Kafka), so the bound is generous.
        wait_until(
            lambda: burrow.lag(group) == want,
            lambda: f"Burrow reports {want} for {group}, got {burrow.lag(group)}:\n{burrow.log_tail()}",
        )
        assert group in burrow.consumers(), f"Burrow's consumer list misses {group}: {burrow.consumers()}"

        # 3. The group goes on: 20 more records on partition 1, then commits of 50, 60 and 50.
        # Burrow follows the stream of commits (and of end offsets): lags 0, 10 and 0.
        clients.produce_all(producer, topic, [(None, f"more-{i}".encode()) for i in range(20)], partition=1)
        ends[1] += 20
        wait_until(
            lambda: burrow.topic_offsets(topic) == [ends[p] for p in range(PARTITIONS)],
            lambda: f"Burrow reports end offsets {ends} for {topic}, got {burrow.topic_offsets(topic)}",
        )
        second = {0: 50, 1: 60, 2: 50}
        commit(consumer, topic, second)
        want = expected_view(topic, second, ends)
        assert want[1] == 10
        wait_until(
            lambda: burrow.lag(group) == want,
            lambda: f"Burrow reports {want} for {group}, got {burrow.lag(group)}:\n{burrow.log_tail()}",
        )
        # Burrow's view agrees with corral's own answer (OffsetFetch).
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert {tp.partition: tp.offset for tp in got} == second
    finally:
        consumer.close()

    # 4. Burrow decoded every offset record and fetched every end offset without an error. The
    # one record type Burrow 1.2 cannot read is group metadata v3 (it reads v0 and v1 only;
    # Kafka has written v2+ since 2.1), which it skips with a warning: it only loses the
    # partitions' owners, not the lag.
    entries = burrow.log_entries()
    errors = [e for e in entries if e["level"] in ("error", "panic", "fatal", "dpanic")]
    assert not errors, f"Burrow logged errors: {errors[:5]}"
    decode_failures = [e for e in entries if e["msg"] == "failed to decode"]
    unexpected = [
        e for e in decode_failures if not (e.get("message_type") == "metadata" and e.get("reason") == "value version" and e.get("version") == 3)
    ]
    assert not unexpected, f"Burrow could not decode records of __consumer_offsets: {unexpected[:5]}"
    offsets_read = [e for e in entries if e["msg"] == "consumer offset" and e.get("group") == group]
    assert sorted((e["partition"], e["offset"]) for e in offsets_read) == sorted(
        [(p, o) for p, o in first.items()] + [(p, o) for p, o in second.items()]
    ), "Burrow read exactly the group's six commits from __consumer_offsets"
