"""Fixtures for corral's end-to-end tests: a real `corral serve` process per test.

Each server gets its own temporary data directory and its own ports on 127.0.0.1. It is started
with port 0 for both listeners and the real ports are read from the startup log line
(`corral is serving kafka=127.0.0.1:N admin=127.0.0.1:M ...`), so there is no window in which
another process could take a port picked in advance. A restart reuses the same ports and data
directory, as an operator restarting a broker would.

The server's stderr goes to a file next to its data directory; when a test fails, the end of that
file is attached to the test report. Every server is stopped by its PID at teardown.

`apache_kafka` and `apache_kafka_classic` are real Apache Kafka 4.4 clusters (apache_kafka.py),
one of each per session, started by the first test that asks for one.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = REPO / "target" / "debug" / "corral"

# Generous upper bounds: they only matter when something is wrong.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SERVING = re.compile(r"corral is serving kafka=(\S+):(\d+) admin=(\S+):(\d+)")

# Every server runs under an address-space limit (what `prlimit --as` sets), so code that reserves
# what a hostile length prefix claims fails the test instead of hiding behind lazy allocation.
# CORRAL_E2E_ADDRESS_SPACE_BYTES=0 runs without it (e.g. under a sanitizer).
ADDRESS_SPACE_BYTES = int(os.environ.get("CORRAL_E2E_ADDRESS_SPACE_BYTES", str(4 << 30)))

# Every process started here, so that even an interrupted run leaves none behind.
_LIVE: dict[int, subprocess.Popen] = {}


@atexit.register
def _kill_leftovers() -> None:
    for pid, proc in list(_LIVE.items()):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _LIVE.pop(pid, None)


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


class CorralServer:
    """One `corral serve` process (and its successors after restarts) on one data directory."""

    def __init__(self, binary: Path, workdir: Path, config: str | None = None, extra_args: list[str] | None = None):
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = workdir / "data"
        self.log_path = workdir / "corral.stderr.log"
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = workdir / "corral.toml"
            self.config_path.write_text(config)
        self.extra_args = list(extra_args or [])
        # prlimit(1) options for the process, e.g. "--nofile=4096:4096".
        self.prlimits: list[str] = []
        self.kafka_port = 0
        self.admin_port = 0
        # With admin.tls: how http_get speaks HTTPS to the admin listener.
        self.admin_ssl: ssl.SSLContext | None = None
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # Byte offset in the log file where the current run's output begins.
        self._run_log_offset = 0

    # --- addresses -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.kafka_port, "server was never started"
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin(self) -> str:
        assert self.admin_port, "server was never started"
        return f"127.0.0.1:{self.admin_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server was never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    # --- logs ------------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything every run of this server wrote to stderr, without colour codes."""
        try:
            return strip_ansi(self.log_path.read_bytes().decode("utf-8", "replace"))
        except FileNotFoundError:
            return ""

    def run_log_text(self) -> str:
        """What the current (or last) run wrote."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._run_log_offset)
                return strip_ansi(f.read().decode("utf-8", "replace"))
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 300) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # --- lifecycle -------------------------------------------------------------------------

    def command(self) -> list[str]:
        args = [
            str(self.binary),
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.kafka_port}",
            "--admin-listen",
            f"127.0.0.1:{self.admin_port}",
        ]
        if self.config_path is not None:
            args += ["--config", str(self.config_path)]
        args += self.extra_args
        limits = [f"--as={ADDRESS_SPACE_BYTES}"] if ADDRESS_SPACE_BYTES > 0 else []
        limits += self.prlimits
        if limits:
            prlimit = shutil.which("prlimit")
            assert prlimit, "prlimit (util-linux) is needed to run corral under resource limits"
            # prlimit sets the limits on itself and execs corral: the PID stays corral's.
            args = [prlimit, *limits, "--", *args]
        return args

    def start(self, timeout: float = START_TIMEOUT_S, ready: bool = True) -> "CorralServer":
        """Starts the server and returns once /health/ready answers 200 (`ready=False`: once it
        logs that it is serving)."""
        assert not self.alive(), "server is already running"
        self.starts += 1
        args = self.command()
        with open(self.log_path, "ab") as log:
            self._run_log_offset = log.tell()
            log.write(f"==== e2e: start #{self.starts}: {' '.join(args)}\n".encode())
            log.flush()
            env = dict(os.environ)
            env.setdefault("CORRAL_LOG", "info,openraft=warn")
            env["NO_COLOR"] = "1"
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env
            )
        _LIVE[self.proc.pid] = self.proc
        self._wait_serving(timeout, ready)
        return self

    def _wait_serving(self, timeout: float, ready: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError(f"corral exited with code {rc} during startup:\n{self.run_log_text()}")
            m = SERVING.search(self.run_log_text())
            if m:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"corral did not log 'corral is serving' within {timeout}s:\n{self.run_log_text()}")
            time.sleep(0.02)
        kafka_port, admin_port = int(m.group(2)), int(m.group(4))
        assert m.group(1) == "127.0.0.1" and m.group(3) == "127.0.0.1", m.group(0)
        if self.kafka_port:
            assert kafka_port == self.kafka_port, f"restarted on another port: {m.group(0)}"
            assert admin_port == self.admin_port, f"restarted on another port: {m.group(0)}"
        self.kafka_port, self.admin_port = kafka_port, admin_port
        while ready:
            status = None
            try:
                status, _ = self.http_get("/health/ready", timeout=2.0)
            except OSError:
                pass
            if status == 200:
                return
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError(f"corral exited with code {rc} during startup:\n{self.run_log_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"/health/ready not 200 within {timeout}s (last status {status}):\n{self.run_log_text()}")
            time.sleep(0.02)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Graceful stop: SIGTERM, then asserts the process exits with code 0 within `timeout`."""
        assert self.alive(), "server is not running"
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"corral did not exit within {timeout}s of SIGTERM:\n{self.run_log_text()}")
        finally:
            _LIVE.pop(self.proc.pid, None)
        assert rc == 0, f"corral exited with code {rc} after SIGTERM, expected 0:\n{self.run_log_text()}"
        return rc

    def kill9(self) -> int:
        """Crash: SIGKILL, no chance to flush or write the clean-shutdown marker."""
        assert self.alive(), "server is not running"
        self.proc.kill()
        rc = self.proc.wait(STOP_TIMEOUT_S)
        _LIVE.pop(self.proc.pid, None)
        return rc

    def restart(self, timeout: float = START_TIMEOUT_S) -> "CorralServer":
        """Stops the server gracefully if it runs, then starts it on the same data dir and ports."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def teardown(self) -> None:
        """Stops the process by its PID whatever state the test left it in.

        A server still running is stopped with SIGTERM and must exit 0: every test thereby also
        checks that corral shuts down cleanly after the traffic it saw. It is killed if it hangs.
        """
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                _LIVE.pop(self.proc.pid, None)
                raise AssertionError(f"corral did not exit within {STOP_TIMEOUT_S}s of SIGTERM at teardown")
            _LIVE.pop(self.proc.pid, None)
            assert rc == 0, f"corral exited with code {rc} after SIGTERM at teardown, expected 0"
        _LIVE.pop(self.proc.pid, None)

    # --- admin HTTP ------------------------------------------------------------------------

    def http_get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        """GET on the admin listener: (status, body). HTTP error statuses are returned, not raised."""
        scheme = "https" if self.admin_ssl else "http"
        url = f"{scheme}://{self.admin}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=self.admin_ssl) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")


def _build_binary() -> Path:
    override = os.environ.get("CORRAL_BIN")
    if override:
        path = Path(override)
    else:
        path = DEFAULT_BINARY
        cargo = shutil.which("cargo")
        if cargo:
            # A no-op when scripts/test.sh has just built it; keeps a direct pytest run honest.
            build = subprocess.run(
                [cargo, "build", "--bins", "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            if build.returncode != 0:
                pytest.fail(f"`cargo build --bins` failed:\n{build.stdout.decode(errors='replace')}", pytrace=False)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"corral binary not found at {path}: build it with `cargo build --bins` "
            "(scripts/test.sh does) or point CORRAL_BIN at one",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def corral_bin() -> Path:
    return _build_binary()


@pytest.fixture
def corral_factory(corral_bin, tmp_path, request):
    """Makes servers: `corral_factory(config=None, start=True, name="server")`.

    `config` is the text of a TOML config file (only the keys it changes).
    """
    servers: list[CorralServer] = []
    request.node._corral_servers = servers

    def make(config: str | None = None, start: bool = True, name: str | None = None, extra_args=None) -> CorralServer:
        name = name or f"server{len(servers)}"
        server = CorralServer(corral_bin, tmp_path / name, config=config, extra_args=extra_args)
        servers.append(server)
        if start:
            server.start()
        return server

    yield make
    errors = []
    for server in servers:
        try:
            server.teardown()
        except AssertionError as e:
            errors.append(f"{server.workdir.name}: {e}")
    assert not errors, "; ".join(errors)


@pytest.fixture
def corral(corral_factory) -> CorralServer:
    """A running server with the default configuration."""
    return corral_factory()


@pytest.fixture
def cluster(corral_factory, request):
    """Three nodes on this machine without fault-injecting relays (cluster.py); a test file that
    needs another shape defines its own `cluster`."""
    from cluster import Cluster  # cluster.py imports this module

    c = Cluster(corral_factory, size=3, relays=False)
    request.addfinalizer(c.close)
    return c.start()


@pytest.fixture(scope="session")
def kafkajs() -> str:
    """The `node` executable, once tests/e2e/js has KafkaJS (the test command runs `npm ci` there)."""
    exe = shutil.which("node")
    assert exe, "node is not installed (scripts/test.sh installs it)"
    assert (Path(__file__).resolve().parent / "js" / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed: run `npm ci` in tests/e2e/js"
    return exe


# --- Apache Kafka (apache_kafka.py) ---------------------------------------------------------------

# fixture name -> `group.coordinator.rebalance.protocols` of that session cluster (None: Kafka's
# default, classic and KIP-848).
_KAFKA_KINDS = {"apache_kafka": None, "apache_kafka_classic": "classic"}
# The clusters this session started, by fixture name.
_KAFKA_CLUSTERS: dict[str, object] = {}


def _session_kafka(tmp_path_factory, name: str):
    from apache_kafka import ApacheKafkaCluster

    # The cluster behind corral's upstream role also has a SASL_SSL listener (test_upstream_security.py).
    secure = name == "apache_kafka_classic"
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp(name), live=_LIVE, rebalance_protocols=_KAFKA_KINDS[name], secure=secure)
    _KAFKA_CLUSTERS[name] = cluster
    try:
        cluster.start_all()
    except BaseException:
        cluster.stop()
        raise
    print(f"\n{name}: 3 Kafka brokers started in {cluster.start_seconds:.1f}s at {cluster.bootstrap}")
    yield cluster
    cluster.stop()  # a no-op if the last test that used it stopped it
    _KAFKA_CLUSTERS.pop(name, None)


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory):
    """A real Apache Kafka 4.4 cluster: 3 KRaft nodes (broker + controller each) on 127.0.0.1,
    replication factor 3, min.insync.replicas 2, serving the classic and the KIP-848 group
    protocols (Kafka's default). Started once per session, on first use; stopped by PID at the
    end (or after the last test that uses it). `.bootstrap`, `.ports`, `.kill(i)`, `.start(i)`
    (see apache_kafka.py). A test that leaves a broker down need not restart it: `_kafka_whole`
    does before the next test."""
    yield from _session_kafka(tmp_path_factory, "apache_kafka")


@pytest.fixture(scope="session")
def apache_kafka_classic(tmp_path_factory):
    """As `apache_kafka`, a second cluster with `group.coordinator.rebalance.protocols=classic`
    and the group.version=0 feature (KIP-848 disabled on Kafka: ConsumerGroupHeartbeat gets
    UNSUPPORTED_VERSION): the Kafka that corral's upstream role sits in front of."""
    yield from _session_kafka(tmp_path_factory, "apache_kafka_classic")


def _last_kafka_users(session) -> dict[str, object]:
    """For each Kafka fixture, the last test of this run that uses it."""
    last = getattr(session, "_last_kafka_users", None)
    if last is None:
        last = {name: item for item in session.items for name in _KAFKA_KINDS if name in getattr(item, "fixturenames", ())}
        session._last_kafka_users = last
    return last


@pytest.fixture(autouse=True)
def _kafka_whole(request):
    """Before each test that uses a Kafka cluster: every broker a test before it killed is
    started again, and the test waits until all three are registered. The brokers' logs are
    attached to the report if the test fails.

    After the last test of the run that uses a cluster, its brokers are stopped rather than left
    idle until the end of the session (an idle cluster costs about 6% of a core); a test after it
    that used the cluster anyway would find it started again."""
    used = [name for name in _KAFKA_KINDS if name in request.fixturenames]
    for name in used:
        cluster = request.getfixturevalue(name)
        cluster.ensure_running()
        extra = getattr(request.node, "_extra_logs", [])
        request.node._extra_logs = extra + [(f"{name} broker {b.index}", b.log_path) for b in cluster.brokers]
    yield
    last = _last_kafka_users(request.session)
    for name in used:
        if last.get(name) is request.node and name in _KAFKA_CLUSTERS:
            _KAFKA_CLUSTERS[name].stop()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to this test (and to this run)."""
    import uuid

    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for server in getattr(item, "_corral_servers", []):
            report.sections.append((f"corral stderr ({server.log_path})", server.log_tail() or "(empty)"))
        for member in getattr(item, "_group_members", []):
            report.sections.append((f"group member {member.name} ({member.stderr_path})", member.stderr_tail(60)))
        # Other programs a test ran (ZooKeeper, Burrow): (title, log file path).
        for title, path in getattr(item, "_extra_logs", []):
            try:
                tail = "\n".join(Path(path).read_text(errors="replace").splitlines()[-150:])
            except OSError as e:
                tail = f"(unreadable: {e})"
            report.sections.append((f"{title} ({path})", tail or "(empty)"))
    return report


@pytest.fixture
def members(tmp_path, request):
    """Starts consumer-group member processes (groups.Member): `members(name, **conf)`.

    Members still running at teardown are killed by their PID.
    """
    from groups import Member

    started = []
    request.node._group_members = started

    def start(name: str, **conf):
        m = Member(name, tmp_path, **conf)
        started.append(m)
        return m

    yield start
    for m in started:
        m.cleanup()
