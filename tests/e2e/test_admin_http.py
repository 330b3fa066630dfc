"""The admin HTTP listener: health probes and Prometheus metrics reflect real traffic."""

from __future__ import annotations

import gc
import re
import time

import clients
import kafkawire as kw

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(server) -> list[tuple[str, dict[str, str], float]]:
    status, body = server.http_get("/metrics")
    assert status == 200
    samples = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return samples


def total(samples, name: str, **labels) -> float | None:
    """Sum over shards of a metric's samples matching `labels`; None if there is no such sample."""
    values = [v for n, l, v in samples if n == name and all(l.get(k) == want for k, want in labels.items())]
    return sum(values) if values else None


def wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_health_endpoints(corral):
    assert corral.http_get("/health/live")[0] == 200
    assert corral.http_get("/health/ready")[0] == 200
    assert corral.http_get("/no/such/path")[0] == 404


def test_metrics_reflect_traffic(corral, topic_name):
    b = corral.bootstrap
    before = scrape(corral)
    assert total(before, "corral_connections_active") is not None, "the gauge is exported before any client connects"

    clients.create_topic(b, topic_name, partitions=2)
    p = clients.producer(b)
    clients.produce_all(p, topic_name, [(b"k%d" % i, b"metrics %d" % i) for i in range(25)])
    del p
    gc.collect()

    after_produce = scrape(corral)
    assert total(after_produce, "corral_requests_total", api="Produce") >= 1
    assert total(after_produce, "corral_requests_total", api="CreateTopics") >= 1
    assert total(after_produce, "corral_records_appended_total") == 25
    assert total(after_produce, "corral_request_duration_seconds_count", api="Produce") >= 1

    got = clients.consume_all(b, topic_name)
    assert sum(len(v) for v in got.values()) == 25
    after_fetch = scrape(corral)
    assert total(after_fetch, "corral_sendfile_bytes_total") > 0
    assert total(after_fetch, "corral_requests_total", api="Fetch") >= 1
    assert total(after_fetch, "corral_bytes_sent_total") > total(after_fetch, "corral_sendfile_bytes_total")

    # Open connections are counted while open, and no longer once closed. Every client above has
    # been destroyed, so the gauge must come back to 0 first.
    gc.collect()
    wait_for(lambda: total(scrape(corral), "corral_connections_active") == 0, "corral_connections_active to reach 0")
    conns = [kw.Conn(b) for _ in range(3)]
    for i, c in enumerate(conns):
        c.send(kw.api_versions_v0(i))
        assert c.recv_frame() is not None
    assert total(scrape(corral), "corral_connections_active") == 3
    for c in conns:
        c.close()
    wait_for(lambda: total(scrape(corral), "corral_connections_active") == 0, "corral_connections_active to drop back to 0")

    # A request that closes its connection is counted as rejected.
    rejected = total(scrape(corral), "corral_requests_rejected_total") or 0
    c = kw.Conn(b)
    c.send(kw.request(999, 0, 1, b""))
    c.expect_closed()
    c.close()
    wait_for(lambda: total(scrape(corral), "corral_requests_rejected_total") == rejected + 1, "corral_requests_rejected_total + 1")


def test_metrics_only_answers_get(corral):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://{corral.admin}/metrics", data=b"", method="POST")
    try:
        urllib.request.urlopen(req, timeout=10)
        status = 200
    except urllib.error.HTTPError as e:
        status = e.code
    assert status == 405
