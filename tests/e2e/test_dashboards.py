"""The Grafana dashboards (grafana/dashboards/*.json) against a real Prometheus (Debian's package)
scraping a real corral every second while confluent-kafka members drive a group through a create,
a join and a leave, with one oversized offset commit and one topic past a limit: every query of
every panel returns series, every template variable lists the workload's values, every metric
name the dashboards use is in `/metrics`, and `promtool check metrics` accepts the exposition.
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
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

import clients
from conftest import REPO, CorralServer
from groups import GROUP_CONFIG, Member, unique, wait_owned_exactly_once, wait_until

DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
PARTITIONS = 4
# Small enough that one commit of every partition with 4000 bytes of metadata is refused
# (corral_coordinator_writes_refused_total), and the partitions limit is easy to pass
# (corral_limits_reached_total): both series exist only once it has happened.
CONFIG = (
    GROUP_CONFIG
    + """
[topics]
max_partitions_per_node = 40
[topics.defaults]
max_message_bytes = 10000
"""
)
SCRAPE_S = 1
# What Grafana would put in a query for a range of a few minutes with a 1 s scrape interval.
GRAFANA_VARS = {"$__rate_interval": "20s", "$__interval": "5s", "$__range": "5m"}
PROM_START_S = 30.0


def free_port() -> int:
    # Prometheus cannot report a port it picked itself: take one the kernel calls free.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, workdir: Path, target: str):
        self.binary = shutil.which("prometheus")
        assert self.binary, "prometheus not found: install Debian's prometheus package (scripts/test.sh does)"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "prometheus.log"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_S}s\n"
            f"  scrape_timeout: {SCRAPE_S}s\n"
            f"  evaluation_interval: {SCRAPE_S}s\n"
            "scrape_configs:\n"
            "  - job_name: corral\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=info",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
        deadline = time.monotonic() + PROM_START_S
        while True:
            assert self.proc.poll() is None, f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}"
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready within {PROM_START_S}s:\n{self.log_tail()}"
            time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            # Bad queries are answered 400 with the error in the body.
            return json.load(e)

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr, time=f"{time.time():.3f}")

    def scrapes_since(self, since: float) -> int:
        answer = self.query('up{job="corral"}[1m]')
        return sum(1 for series in answer["data"]["result"] for ts, _ in series["values"] if float(ts) > since)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def commit_code(bootstrap: str, group: str, offsets: list[TopicPartition]) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "logger": clients.RDKAFKA_LOG})
    try:
        result = c.commit(offsets=offsets, asynchronous=False)
        return next((tp.error.code() for tp in result if tp.error), 0)
    except KafkaException as e:
        return e.args[0].code()
    finally:
        c.close()


def committed_sum(server, group: str, topic: str) -> float | None:
    status, text = server.http_get("/metrics")
    assert status == 200
    m = re.search(rf'^kafka_consumergroup_current_offset_sum{{consumergroup="{group}",topic="{topic}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


@pytest.fixture(scope="module")
def corral_server(corral_bin, tmp_path_factory):
    server = CorralServer(corral_bin, tmp_path_factory.mktemp("dashboards") / "corral", config=CONFIG)
    server.start()
    yield server
    server.teardown()


@pytest.fixture(scope="module")
def prometheus(corral_server, tmp_path_factory):
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), corral_server.admin)
    # Prometheus hands static targets to its scrapers after about 5 s; the workload waits for
    # the first scrape, so that Prometheus sees the series change.
    try:
        started = time.time() - 60
        wait_until(lambda: prom.scrapes_since(started) >= 1, lambda: f"a first scrape; prometheus log:\n{prom.log_tail()}", timeout=30)
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="module")
def workload(corral_server, prometheus, tmp_path_factory):
    """Drives the group while Prometheus scrapes; returns the values the template variables take."""
    b = corral_server.bootstrap
    topic, group = unique("dash"), unique("dash-group")
    clients.create_topic(b, topic, partitions=PARTITIONS)
    clients.produce_all(clients.producer(b), topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(40)])
    parts = {(topic, p) for p in range(PARTITIONS)}
    logs = tmp_path_factory.mktemp("members")
    conf = dict(client="confluent", bootstrap=b, group=group, topics=[topic], session_timeout_ms=2000, heartbeat_interval_ms=200)
    started = []
    try:
        first = Member("first", logs, client_id="dash-first", **conf)
        started.append(first)
        wait_owned_exactly_once([first], parts)
        second = Member("second", logs, client_id="dash-second", **conf)
        started.append(second)
        wait_owned_exactly_once([first, second], parts)
        second.close()
        wait_owned_exactly_once([first], parts)
        wait_until(lambda: committed_sum(corral_server, group, topic) == 40, "the group committed all 40 records")

        admin = clients.admin_client(b)
        too_big = unique("dash-too-big")
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic(too_big, 100)], request_timeout=15)[too_big].result(20)
        assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
        big = [TopicPartition(topic, p, 1, metadata="m" * 4000) for p in range(PARTITIONS)]
        assert commit_code(b, unique("dash-big-commit"), big) == KafkaError.INVALID_COMMIT_OFFSET_SIZE

        # Enough scrapes after the last change that every rate() window holds two samples of it.
        done = time.time()
        wait_until(
            lambda: prometheus.scrapes_since(done) >= 3,
            lambda: f"three scrapes after the workload; prometheus log:\n{prometheus.log_tail()}",
            timeout=30,
        )
        up = prometheus.query('up{job="corral"}')["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"], up
        yield {"consumergroup": group, "topic": topic, "instance": corral_server.admin}
    finally:
        for m in started:
            m.cleanup()


def panels(dashboard: dict):
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows hold their panels


def substitute(expr: str, values: dict) -> str:
    for name, value in values.items():
        assert re.fullmatch(r"[A-Za-z0-9_.:-]+", value), f"{value!r} would need regex escaping"
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a variable the test does not know: {expr}"
    return expr


def exprs():
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for p in panels(dashboard):
            for t in p.get("targets", []):
                if "expr" in t:
                    yield path.name, p["title"], t["refId"], t["expr"]


def test_there_are_dashboards():
    names = {p.name for p in DASHBOARDS}
    assert names == {"corral-rebalances.json", "corral-consumer-lag.json", "corral-node.json"}, names
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        ids = [p["id"] for p in panels(d)]
        assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat: {ids}"
        for p in panels(d):
            if p["type"] != "row":
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (path.name, p["title"])
                refs = [t["refId"] for t in p["targets"]]
                assert refs and len(refs) == len(set(refs)), (path.name, p["title"], refs)


def test_provisioning_points_at_the_dashboards_and_a_prometheus():
    import yaml

    ds = yaml.safe_load((REPO / "grafana/provisioning/datasources/corral-prometheus.yaml").read_text())
    assert [(d["type"], d["uid"]) for d in ds["datasources"]] == [("prometheus", "prometheus")]
    providers = yaml.safe_load((REPO / "grafana/provisioning/dashboards/corral.yaml").read_text())["providers"]
    assert [p["type"] for p in providers] == ["file"] and providers[0]["options"]["path"]
    for path in DASHBOARDS:
        variable = next(v for v in json.loads(path.read_text())["templating"]["list"] if v["name"] == "datasource")
        assert variable["type"] == "datasource" and variable["query"] == "prometheus"
        assert variable["current"]["value"] == ds["datasources"][0]["uid"], path.name


def test_promtool_accepts_the_exposition(corral_server, workload):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: it ships in Debian's prometheus package"
    status, text = corral_server.http_get("/metrics")
    assert status == 200
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    report = (out.stdout + out.stderr).strip()
    # 0: clean; 3: lint problems only (1 is a parse error).
    assert out.returncode in (0, 3), f"promtool check metrics exited {out.returncode}:\n{report}"
    problems = [line for line in report.splitlines() if line.strip()]
    # kafka_consumergroup_lag_sum and _current_offset_sum are gauges named as kafka_exporter names
    # them (so its dashboards and alerts work unchanged); promtool flags the suffix.
    theirs = [p for p in problems if p.startswith("kafka_consumergroup_")]
    ours = [p for p in problems if p not in theirs]
    if theirs:
        print("promtool lint, kafka_exporter's names:\n" + "\n".join(theirs))
    assert not ours, "promtool check metrics:\n" + "\n".join(ours)


def test_every_metric_the_dashboards_use_is_exported(corral_server, workload):
    status, text = corral_server.http_get("/metrics")
    assert status == 200
    exported = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", text, re.M))
    used = {name for _, _, _, expr in exprs() for name in re.findall(r"\b((?:corral|kafka)_[a-z0-9_]+)\b", expr)}
    assert used, "no metric names found in the dashboards"
    missing = sorted(used - exported)
    assert not missing, f"used by the dashboards, not in /metrics: {missing}"
    print("metrics the dashboards use: " + ", ".join(sorted(used)))


def test_template_variables_list_the_workload(prometheus, workload):
    checked = []
    for path in DASHBOARDS:
        for v in json.loads(path.read_text())["templating"]["list"]:
            if v["type"] != "query":
                continue
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert m, f"{path.name} ${v['name']}: not a label_values() query: {query}"
            selector, label = substitute(m.group(1), workload), m.group(2)
            answer = prometheus.api("series", **{"match[]": selector, "start": f"{time.time() - 300:.0f}"})
            assert answer["status"] == "success", (path.name, v["name"], answer)
            values = {s.get(label) for s in answer["data"]}
            assert workload[v["name"]] in values, f"{path.name} ${v['name']}: {query} gave {sorted(map(str, values))}"
            checked.append(f"{path.name} ${v['name']}")
    assert checked


def test_every_panel_query_returns_series(prometheus, workload):
    failures, count = [], 0
    for dashboard, title, ref, expr in exprs():
        concrete = substitute(expr, workload)
        answer = prometheus.query(concrete)
        count += 1
        where = f"{dashboard} / {title} / {ref}: {concrete}"
        if answer.get("status") != "success":
            failures.append(f"{where}\n    error: {answer.get('errorType')}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            failures.append(f"{where}\n    no series")
        elif answer.get("warnings"):
            failures.append(f"{where}\n    warnings: {answer['warnings']}")
    assert count >= 20, f"only {count} queries found"
    assert not failures, f"{len(failures)} of {count} queries failed:\n" + "\n".join(failures)
