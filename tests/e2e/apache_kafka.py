"""A real Apache Kafka 4.4 cluster for the end-to-end suite: the reference corral is compared with
(test_kafka_reference.py, test_java_client.py) and the upstream storage tier of the upstream and
sidecar roles.

Three nodes on 127.0.0.1, each a KRaft broker and controller in one JVM
(`process.roles=broker,controller`), with a static controller quorum of all three
(`controller.quorum.voters`), replication factor 3 and `min.insync.replicas=2` for every topic,
`__consumer_offsets` included. The jars are Maven Central's, resolved by scripts/test.sh from
tests/kafka/pom.xml into .cache/kafka-4.4.0/libs (KAFKA_LIBS overrides the directory); the
brokers run as `java -cp 'libs/*' kafka.Kafka server.properties`.

Kafka cannot listen on port 0 and report the port, so the ports are picked free in advance
(bound, then closed) and the whole start is retried once with new ports if a broker still loses
the race (a BindException in its log). A restarted broker keeps its ports and data directory.
Each broker's output (log4j: warnings, the group coordinator at INFO; the JVM's own messages) goes to a file whose tail is put in
the error when the cluster does not start.

Group coordinator settings differ from Kafka's defaults where a test would otherwise wait for
nothing, and corral is configured the same way where the two are compared (see
`CORRAL_GROUP_CONFIG`): the initial rebalance delay is 100 ms instead of 3 s and KIP-848 members
heartbeat every second instead of every 5 s. `rebalance_protocols` sets
`group.coordinator.rebalance.protocols`: None keeps Kafka's default (KIP-848 served, which the
Java client tests compare corral with); `"classic"` serves no KIP-848, which the upstream-role
tests want from the Kafka behind corral: that config (deprecated in 4.4) plus the group.version=0
feature level at format time (what Kafka 5 will rely on alone). Kafka 4.4 then still lists
ConsumerGroupHeartbeat in ApiVersions but answers it with UNSUPPORTED_VERSION. conftest.py has one
session cluster of each kind, `apache_kafka` and `apache_kafka_classic`, each started on first use
only.

With `secure=True` every broker also has a SASL_SSL listener (`secure_bootstrap`): a certificate
for 127.0.0.1 from a CA made for the cluster (`ca_file`), and the user `SASL_USER` with
`SASL_PASSWORD` for PLAIN (in the listener's JAAS config) and for SCRAM-SHA-256 and -512 (stored
at format time, `kafka-storage format --add-scram`). Brokers still talk to each other in plaintext.

Every broker is stopped by its PID (SIGTERM, then SIGKILL), and is registered in conftest's
`_LIVE` so that an interrupted run leaves no JVM behind; a broker also dies with the process
that started it (PR_SET_PDEATHSIG), should that process be killed outright.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from kafkawire import Conn, metadata_v0, parse_metadata_v0

REPO = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.4.0"
DEFAULT_LIBS = REPO / ".cache" / f"kafka-{KAFKA_VERSION}" / "libs"
# Written by scripts/test.sh once every jar of tests/kafka/pom.xml is in the directory.
COMPLETE_MARKER = ".complete"

SASL_USER = "corral"
SASL_PASSWORD = "corral-upstream-secret"

HEAP = "-Xmx768m"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0

INITIAL_REBALANCE_DELAY_MS = 100
CONSUMER_HEARTBEAT_INTERVAL_MS = 1000
# The same group settings for a corral that is compared with this cluster (TOML, [groups]).
# The session timeout bounds are both servers' defaults (6000 / 1800000) and stay so.
CORRAL_GROUP_CONFIG = f"""
[groups]
initial_rebalance_delay_ms = {INITIAL_REBALANCE_DELAY_MS}
consumer_heartbeat_interval_ms = {CONSUMER_HEARTBEAT_INTERVAL_MS}
"""



def corral_upstream_config(bootstrap: str, **upstream) -> str:
    """The TOML that puts corral in front of the cluster at `bootstrap` (storage.backend =
    "upstream"); `upstream` adds keys of its [upstream] section."""
    addresses = ", ".join(f'"{b}"' for b in bootstrap.split(","))
    lines = ["[storage]", 'backend = "upstream"', "[upstream]", f"bootstrap = [{addresses}]"]
    lines += [f"{k} = {v}" for k, v in upstream.items()]
    return "\n".join(lines) + "\n"


def sidecar_config(storage: str, groups: str, upstream: dict | None = None, **sidecar) -> str:
    """TOML for a sidecar whose data is in the Kafka at `storage` and whose groups are run by the
    service at `groups` (comma-separated host:port); `upstream` and `sidecar` add keys to those
    sections. Other sections can follow."""
    addresses = ", ".join(f'"{a}"' for a in groups.split(","))
    lines = ["[sidecar]", f"group_bootstrap = [{addresses}]"] + [f"{k} = {v}" for k, v in sidecar.items()]
    return 'role = "sidecar"\n' + corral_upstream_config(storage, **(upstream or {})) + "\n".join(lines) + "\n"


LOG4J2 = REPO / "tests" / "kafka" / "log4j2.properties"


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies (PR_SET_PDEATHSIG),
    so that not even a pytest killed with SIGKILL, which runs no atexit hook, leaves a JVM behind."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def kafka_libs() -> Path:
    """The directory of Kafka's jars; an AssertionError naming the install step if incomplete."""
    libs = Path(os.environ.get("KAFKA_LIBS", str(DEFAULT_LIBS)))
    assert (libs / COMPLETE_MARKER).is_file() and any(libs.glob("kafka_2.13-*.jar")), (
        f"Apache Kafka {KAFKA_VERSION} jars are not installed in {libs}: scripts/test.sh installs them "
        f"(mvn -B -f tests/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory={libs}, then touch {libs / COMPLETE_MARKER})"
    )
    return libs


def free_ports(n: int) -> list[int]:
    """n distinct ports that were free a moment ago (bound together, then closed)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, lines: int = 80) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(unreadable: {e})"


class KafkaBroker:
    """One node: a broker and a controller in one JVM, on its own data directory."""

    def __init__(self, index: int, workdir: Path):
        self.index = index
        self.node_id = index + 1
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "broker.log"
        self.port = 0
        self.controller_port = 0
        self.secure_port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker was never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 80) -> str:
        return tail(self.log_path, lines)

    def run_log_text(self) -> str:
        return self.log_path.read_text(errors="replace").split("==== e2e: start #")[-1] if self.log_path.exists() else ""


def _cluster_id() -> str:
    """A random KRaft cluster id (16 bytes, URL-safe base64). One that starts with "-" would be
    taken for an option by kafka-storage's argument parser (one id in 64), so none does."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


class ApacheKafkaCluster:
    """Three KRaft nodes (broker + controller each) on 127.0.0.1.

    `bootstrap` is every broker's address; `ports` the brokers' Kafka ports by index;
    `kill(i)` kills broker i with SIGKILL, `start(i)` starts it again on its data directory and
    ports and waits until every broker lists all three; `ensure_running()` restarts whatever a
    test left down.
    """

    def __init__(
        self,
        workdir: Path,
        live: dict | None = None,
        size: int = 3,
        rebalance_protocols: str | None = None,
        libs: Path | None = None,
        secure: bool = False,
        extra: dict | None = None,
    ):
        """`extra`: more broker settings (an authorizer, say), over the ones written here."""
        self.workdir = workdir
        self.extra = extra or {}
        self.secure = secure
        # The CA of the SASL_SSL listeners' certificate (secure=True).
        self.ca_file = workdir / "tls" / "ca.pem"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.libs = libs or kafka_libs()
        self.live = live if live is not None else {}
        self.rebalance_protocols = rebalance_protocols
        self.cluster_id = _cluster_id()
        self.brokers = [KafkaBroker(i, workdir / f"broker{i}") for i in range(size)]
        self.log4j_path = LOG4J2
        # Seconds the first start took (formatting included), for the record.
        self.start_seconds: float | None = None

    # --- addresses -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def ports(self) -> list[int]:
        return [b.port for b in self.brokers]

    @property
    def secure_bootstrap(self) -> str:
        assert self.secure, "the cluster has no SASL_SSL listener"
        return ",".join(f"127.0.0.1:{b.secure_port}" for b in self.brokers)

    def log_tails(self, lines: int = 60) -> str:
        return "\n\n".join(f"---- broker {b.index} (node {b.node_id}) {b.log_path}:\n{b.log_tail(lines)}" for b in self.brokers)

    # --- configuration ---------------------------------------------------------------------

    def _assign_ports(self) -> None:
        ports = free_ports(3 * len(self.brokers))
        for i, b in enumerate(self.brokers):
            b.port, b.controller_port, b.secure_port = ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]

    def _make_certificate(self) -> Path:
        """The SASL_SSL listeners' certificate for 127.0.0.1 and its key, in one PEM file as
        Kafka's PEM keystore wants it (the key unencrypted PKCS#8); the CA in `ca_file`."""
        import trustme
        from cryptography.hazmat.primitives import serialization

        directory = self.ca_file.parent
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
        pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        keystore = directory / "broker.pem"
        keystore.write_bytes(pkcs8 + b"".join(c.bytes() for c in cert.cert_chain_pems))
        ca.cert_pem.write_to_path(str(self.ca_file))
        return keystore

    def _write_config(self, b: KafkaBroker) -> None:
        voters = ",".join(f"{o.node_id}@127.0.0.1:{o.controller_port}" for o in self.brokers)
        # Three replicas, two in sync; fewer on a smaller cluster (the benchmarks' single broker).
        rf, isr = min(3, len(self.brokers)), min(2, len(self.brokers))
        props = {
            "process.roles": "broker,controller",
            "node.id": b.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CONTROLLER://127.0.0.1:{b.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(b.data_dir),
            "num.partitions": 1,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": INITIAL_REBALANCE_DELAY_MS,
            "group.consumer.min.heartbeat.interval.ms": min(CONSUMER_HEARTBEAT_INTERVAL_MS, 5000),
            "group.consumer.heartbeat.interval.ms": CONSUMER_HEARTBEAT_INTERVAL_MS,
            # Two cores for everything: fewer threads than Kafka's defaults.
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 4,
            "log.flush.interval.messages": 9223372036854775807,
        }
        if self.rebalance_protocols is not None:
            props["group.coordinator.rebalance.protocols"] = self.rebalance_protocols
        if self.secure:
            jaas = "org.apache.kafka.common.security"
            props["listeners"] += f",SASL_SSL://127.0.0.1:{b.secure_port}"
            props["advertised.listeners"] += f",SASL_SSL://127.0.0.1:{b.secure_port}"
            props["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
            props |= {
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{jaas}.plain.PlainLoginModule required user_{SASL_USER}="{SASL_PASSWORD}";',
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f"{jaas}.scram.ScramLoginModule required;",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{jaas}.scram.ScramLoginModule required;",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": self.workdir / "tls" / "broker.pem",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": self.ca_file,
            }
        props |= self.extra
        b.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _java(self, *args: str, heap: str = HEAP) -> list[str]:
        return [
            "java",
            heap,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.log4j_path}",
            "-cp",
            f"{self.libs}/*",
            *args,
        ]

    def _format(self, b: KafkaBroker) -> None:
        b.data_dir.mkdir(parents=True, exist_ok=True)
        args = ["format", "--cluster-id", self.cluster_id, "--config", str(b.config_path)]
        if self.rebalance_protocols is not None and "consumer" not in self.rebalance_protocols.split(","):
            # KIP-848 is also a feature level (KIP-1022): off at 0, when ApiVersions does not
            # advertise ConsumerGroupHeartbeat (the config alone still advertises it in 4.4).
            args += ["--feature", "group.version=0"]
        if self.secure:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mechanism}=[name={SASL_USER},password={SASL_PASSWORD}]"]
        out = subprocess.run(
            self._java("kafka.tools.StorageTool", *args, heap="-Xmx256m"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"kafka-storage format failed for broker {b.index} (exit {out.returncode}):\n{out.stdout}\n{out.stderr}"

    # --- lifecycle -------------------------------------------------------------------------

    def _spawn(self, b: KafkaBroker) -> None:
        assert not b.alive(), f"broker {b.index} is already running"
        b.starts += 1
        args = self._java("kafka.Kafka", str(b.config_path))
        with open(b.log_path, "ab") as log:
            log.write(f"==== e2e: start #{b.starts}: {' '.join(args)}\n".encode())
            log.flush()
            b.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=b.workdir, preexec_fn=_die_with_parent
            )
        self.live[b.proc.pid] = b.proc

    def start_all(self, timeout: float = START_TIMEOUT_S) -> "ApacheKafkaCluster":
        """Formats the data directories and starts every broker; returns once all three are up."""
        began = time.monotonic()
        for attempt in (1, 2):
            self._assign_ports()
            if self.secure:
                self._make_certificate()
            for b in self.brokers:
                if b.data_dir.exists():
                    subprocess.run(["rm", "-rf", str(b.data_dir)], check=True)
                b.workdir.mkdir(parents=True, exist_ok=True)
                self._write_config(b)
                self._format(b)
            for b in self.brokers:
                self._spawn(b)
            try:
                self.wait_ready(timeout)
                break
            except AssertionError:
                lost_race = any("BindException" in b.run_log_text() or "Address already in use" in b.run_log_text() for b in self.brokers)
                self.stop()
                if attempt == 2 or not lost_race:
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def kill(self, index: int) -> int:
        """SIGKILL broker `index` (a crash); returns its exit status."""
        b = self.brokers[index]
        assert b.alive(), f"broker {index} is not running"
        b.proc.kill()
        rc = b.proc.wait(STOP_TIMEOUT_S)
        self.live.pop(b.proc.pid, None)
        return rc

    def start(self, index: int, timeout: float = START_TIMEOUT_S) -> None:
        """Starts broker `index` again on its data directory and ports; returns once every broker
        lists all of them."""
        self._spawn(self.brokers[index])
        self.wait_ready(timeout)

    def ensure_running(self, timeout: float = START_TIMEOUT_S) -> None:
        """Restarts every broker a test left down, then waits until the cluster is whole."""
        for b in self.brokers:
            if not b.alive():
                if b.proc is not None:
                    self.live.pop(b.proc.pid, None)
                self._spawn(b)
        self.wait_ready(timeout)

    def brokers_seen_by(self, b: KafkaBroker) -> set[int] | None:
        """The broker ids broker `b` lists in a Metadata v0 response, or None if it does not answer."""
        try:
            conn = Conn(b.address, timeout=5.0)
        except OSError:
            return None
        try:
            conn.send(metadata_v0(1, []))
            frame = conn.recv_frame()
            if frame is None:
                return None
            _, brokers, _ = parse_metadata_v0(frame)
            return {node for node, _, _ in brokers}
        except (OSError, AssertionError):
            return None
        finally:
            conn.close()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Waits until every broker runs and lists every broker (all registered and unfenced)."""
        want = {b.node_id for b in self.brokers}
        deadline = time.monotonic() + timeout
        while True:
            for b in self.brokers:
                rc = b.proc.poll() if b.proc is not None else "never started"
                if rc is not None:
                    raise AssertionError(f"Kafka broker {b.index} exited ({rc}) during startup\n{self.log_tails()}")
            seen = [self.brokers_seen_by(b) for b in self.brokers]
            if all(s == want for s in seen):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"Kafka cluster not ready within {timeout}s (brokers listed by each: {seen})\n{self.log_tails()}")
            time.sleep(0.2)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to every running broker, SIGKILL to those still running after `timeout`."""
        running = [b for b in self.brokers if b.alive()]
        for b in running:
            b.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for b in running:
            try:
                b.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait()
        for b in self.brokers:
            if b.proc is not None:
                self.live.pop(b.proc.pid, None)


if __name__ == "__main__":
    # Manual use: python tests/e2e/apache_kafka.py DIR starts a cluster, prints its bootstrap and
    # the start time, and stops it on Enter (or Ctrl-C).
    import sys
    import tempfile

    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="apache-kafka-"))
    protocols = sys.argv[2] if len(sys.argv) > 2 else None
    cluster = ApacheKafkaCluster(work, rebalance_protocols=protocols)
    try:
        cluster.start_all()
        print(f"bootstrap={cluster.bootstrap} started in {cluster.start_seconds:.1f}s (logs under {work})", flush=True)
        try:
            input()
        except (EOFError, KeyboardInterrupt):
            pass
    finally:
        t = time.monotonic()
        cluster.stop()
        print(f"stopped in {time.monotonic() - t:.1f}s", flush=True)


# Where a client's end-to-end test runs: corral, the Kafka reference cluster, corral in front of
# the classic-only Kafka cluster (whose groups, KIP-848 ones too, corral runs), or a sidecar in
# front of that Kafka whose groups that corral runs.
TARGETS = ["corral", "kafka", "corral-upstream", "sidecar"]


def target_bootstrap(kind: str, corral_factory, kafka, kafka_classic) -> str:
    """The bootstrap of the target `kind` (one of TARGETS), the corral nodes started with
    `corral_factory` and CORRAL_GROUP_CONFIG; `kafka` and `kafka_classic` are the session's
    clusters (the apache_kafka and apache_kafka_classic fixtures)."""
    if kind == "corral":
        return corral_factory(config=CORRAL_GROUP_CONFIG).bootstrap
    if kind in ("corral-upstream", "sidecar"):
        front = corral_factory(config=CORRAL_GROUP_CONFIG + corral_upstream_config(kafka_classic.bootstrap))
        if kind == "sidecar":
            return corral_factory(config=sidecar_config(kafka_classic.bootstrap, front.bootstrap), name="sidecar").bootstrap
        return front.bootstrap
    return kafka.bootstrap
