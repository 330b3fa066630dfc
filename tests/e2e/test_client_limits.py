"""What one client can hold of a node is bounded, and reaching a bound costs only that client:
connections per address (`max_connections_per_ip`), idle connections (`connections_max_idle_ms`),
slow senders (`request_body_timeout_ms`) and the bytes of requests in flight
(`queued_max_request_bytes`). Each is counted in `/metrics`; other clients keep working."""

from __future__ import annotations

import re
import time

import clients
import kafkawire as kw

WAIT_S = 20.0


def metric(server, name: str, label: str) -> float:
    status, text = server.http_get("/metrics")
    assert status == 200
    m = re.search(rf'^{name}{{[^}}]*{label}[^}}]*}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def api_versions_ok(conn: kw.Conn, corr: int) -> bool:
    conn.send(kw.api_versions_v0(corr))
    frame = conn.recv_frame()
    return frame is not None and kw.parse_api_versions_v0(frame)[:2] == (corr, 0)


def closed_within(conn: kw.Conn, seconds: float) -> bool:
    conn.sock.settimeout(seconds)
    try:
        return conn.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connections_per_address_are_limited(corral_factory):
    server = corral_factory(config="[kafka]\nmax_connections_per_ip = 3\n")
    held = [kw.Conn(server.bootstrap) for _ in range(3)]
    for i, conn in enumerate(held):
        assert api_versions_ok(conn, i + 1)
    extra = kw.Conn(server.bootstrap)
    assert closed_within(extra, WAIT_S), "a fourth connection from 127.0.0.1 was served"
    assert metric(server, "corral_connections_refused_total", 'limit="max_connections_per_ip"') >= 1
    # The three admitted connections are untouched, and a closed one gives its place back.
    assert all(api_versions_ok(conn, 10 + i) for i, conn in enumerate(held))
    held.pop().sock.close()
    deadline = time.monotonic() + WAIT_S
    while True:
        again = kw.Conn(server.bootstrap)
        try:
            if api_versions_ok(again, 20):
                break
        except (ConnectionResetError, AssertionError):
            pass
        again.sock.close()
        assert time.monotonic() < deadline, "the freed place was never given back"
        time.sleep(0.1)
    again.sock.close()
    for conn in held:
        conn.sock.close()


def test_idle_connections_and_slow_senders_are_closed(corral_factory, topic_name):
    server = corral_factory(config="[kafka]\nconnections_max_idle_ms = 1000\nrequest_body_timeout_ms = 1000\n")
    idle = kw.Conn(server.bootstrap)
    assert api_versions_ok(idle, 1)
    busy = kw.Conn(server.bootstrap)
    slow = kw.Conn(server.bootstrap)
    slow.send(kw.i32(100) + b"\x00" * 10)  # 10 of a request's 100 bytes, then nothing
    # A connection that keeps sending requests outlives both.
    started = time.monotonic()
    while time.monotonic() - started < 3.0:
        assert api_versions_ok(busy, 2), "an active connection was closed"
        time.sleep(0.2)
    assert closed_within(idle, WAIT_S), "the idle connection was kept"
    assert closed_within(slow, WAIT_S), "the slow sender was kept"
    assert metric(server, "corral_connections_closed_total", 'reason="idle"') >= 1
    assert metric(server, "corral_connections_closed_total", 'reason="slow_request"') >= 1
    # A real client on a new connection produces and consumes.
    clients.create_topic(server.bootstrap, topic_name)
    delivered = clients.produce_all(clients.producer(server.bootstrap), topic_name, [(b"k", b"after the limits")])
    got = clients.consume_all(server.bootstrap, topic_name)[0]
    assert [(r.offset, r.value) for r in got] == [(delivered[0][3], b"after the limits")]


def test_requests_in_flight_are_bounded_by_bytes(corral_factory, topic_name):
    """A node budget of 1 MiB of requests: producers with more than that in flight still get every
    record through, waiting for the budget instead of holding more."""
    server = corral_factory(config="[kafka]\nmax_frame_bytes = 1048576\nqueued_max_request_bytes = 1048576\n")
    clients.create_topic(server.bootstrap, topic_name, partitions=4)
    producers = [clients.producer(server.bootstrap, linger_ms=0, batch_size=200_000) for _ in range(3)]
    items = [(f"k{i}".encode(), bytes(20_000)) for i in range(150)]
    for p in producers:
        for key, value in items:
            p.produce(topic_name, key=key, value=value)
    for p in producers:
        assert p.flush(60) == 0, "records left undelivered"
    total = sum(clients.watermarks(server.bootstrap, topic_name, part)[1] for part in range(4))
    assert total == 3 * len(items)
    # Everything was answered: nothing is held. A request's bytes are given back just after its
    # response is written, so the client can read the last response first.
    deadline = time.monotonic() + 5
    while True:
        status, text = server.http_get("/metrics")
        if re.search(r"^corral_queued_request_bytes 0$", text, re.M) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    held = re.search(r"^corral_queued_request_bytes (\S+)$", text, re.M)
    assert held and held.group(1) == "0", f"the gauge of held request bytes: {held and held.group(1)}"
