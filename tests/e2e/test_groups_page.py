"""The groups page (`/` on the admin port) in a real browser: Debian's headless Chromium renders it
against a corral whose group confluent-kafka members created, joined and left, and the rendered
DOM lists the group and, for the group the address selects (`/?group=ID`), its rebalances with
their causes. The screenshot is kept in the test's temporary directory.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import urllib.parse

import clients
from groups import GROUP_CONFIG, unique, wait_owned_exactly_once, wait_until

CHROMIUM_TIMEOUT_S = 90


def chromium(tmp_path, url: str, *mode: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "chromium not found: install Debian's chromium package (scripts/test.sh does)"
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    args = [
        binary,
        "--headless",
        "--no-sandbox",  # runs as root here
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        # This machine has no network beyond loopback: keep Chromium from trying to phone home.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        # Virtual time runs the page's fetches to completion before the DOM is taken.
        "--virtual-time-budget=4000",
        *mode,
        url,
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    assert out.returncode == 0, f"chromium exited {out.returncode}:\n{out.stderr[-3000:]}"
    return out


def text_of(dom: str) -> str:
    """The DOM's text, tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


def test_the_page_shows_the_groups_and_their_rebalances(corral_factory, members, tmp_path):
    server = corral_factory(config=GROUP_CONFIG)
    b, topic, group = server.bootstrap, unique("page"), unique("page-group")
    clients.create_topic(b, topic, partitions=2)
    parts = {(topic, p) for p in range(2)}
    # Five records in each partition: the page lists a committed offset for both.
    producer = clients.producer(b)
    for p in range(2):
        clients.produce_all(producer, topic, [(None, f"v{p}-{i}".encode()) for i in range(5)], partition=p)
    conf = dict(client="confluent", bootstrap=b, group=group, topics=[topic], session_timeout_ms=2000, heartbeat_interval_ms=200)
    first = members("first", client_id="page-first", **conf)
    wait_owned_exactly_once([first], parts)
    second = members("second", client_id="page-second", **conf)
    wait_owned_exactly_once([first, second], parts)
    second.close()
    wait_owned_exactly_once([first], parts)

    def history():
        status, body = server.http_get("/v1/groups/" + urllib.parse.quote(group, safe=""))
        assert status == 200, body
        return [r["trigger"] for r in json.loads(body)["rebalances"]]

    wait_until(lambda: {"group_created", "member_joined", "member_left"} <= set(history()), lambda: f"the three rebalances: {history()}")

    def lag_sum():
        status, body = server.http_get("/v1/groups")
        assert status == 200, body
        return next(g["lag_sum"] for g in json.loads(body)["groups"] if g["group"] == group)

    wait_until(lambda: lag_sum() == 0, lambda: f"the members committed all 10 records (lag {lag_sum()})")

    # The list: every group with its state and members.
    listing = chromium(tmp_path, f"http://{server.admin}/", "--dump-dom").stdout
    rows = re.findall(r'<tr class="group[^"]*" data-group="([^"]+)">(.*?)</tr>', listing, re.S)
    assert [g for g, _ in rows] == [group], f"group rows in the rendered page: {rows}\n{listing[-3000:]}"
    cells = [text_of(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1], re.S)]
    assert cells[:3] == [group, "classic", "Stable"] and cells[4:5] == ["1"] and cells[6:] == ["0"], cells
    assert 'class="error"' not in listing, text_of(listing)

    # One group, selected by the address: its rebalances, newest first, each with its cause.
    url = f"http://{server.admin}/?group={urllib.parse.quote(group, safe='')}"
    detail = chromium(tmp_path, url, "--dump-dom").stdout
    causes = re.findall(r'<span class="cause">([a-z_]+)</span>', detail)
    assert causes == list(reversed(history())), f"the timeline's causes {causes}, the history {history()}\n{text_of(detail)[-3000:]}"
    assert "member_joined" in causes and "member_left" in causes
    assert f"Group {group}" in text_of(detail), text_of(detail)[-3000:]
    assert "page-first" in text_of(detail), "the member table names the member's client id"
    offsets = re.search(r"<h2>Committed offsets</h2>\s*<table>.*?<tbody>(.*?)</tbody>", detail, re.S)
    assert offsets, text_of(detail)[-3000:]
    committed = [
        [text_of(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in re.findall(r"<tr>(.*?)</tr>", offsets.group(1), re.S)
    ]
    assert sorted(r[:2] for r in committed) == [[topic, "0"], [topic, "1"]], committed
    assert sum(int(r[2]) for r in committed) == 10 and {r[4] for r in committed} == {"0"}, committed

    shot = tmp_path / "groups-page.png"
    chromium(tmp_path, url, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, f"{shot}: {len(data)} bytes"
    print(f"screenshot of {url}: {shot}")
