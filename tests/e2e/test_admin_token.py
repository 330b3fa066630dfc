"""A bearer token on the admin listener (`admin.bearer_token_file`).

Metrics and the groups API answer 401 without the token or with another (each one counted in
`corral_admin_requests_unauthorized_total`); the health probes and the page answer without it.
The page asks for the token, or takes it from its address's fragment, and reads the groups with
it (headless Chromium). A rotated token file takes effect without a restart. `corral groups`
sends the token with `--token-file`, and in a 3-node cluster any node answers `/v1/groups` for the
whole cluster, asking the others with the token they share. A missing token file stops the start
with a message naming the key.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request

from cluster import Cluster
from test_groups_page import chromium, text_of

TOKEN = "first-7d1f0c2e9b"
ROTATED = "second-0a55e1f3c4"


def get(admin: str, path: str, token: str | None = None):
    """GET on an admin listener: (status, body, headers; their names in any case)."""
    request = urllib.request.Request(f"http://{admin}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


def token_config(path) -> str:
    return f'[admin]\nbearer_token_file = "{path}"\n'


def test_metrics_and_groups_need_the_token_and_a_rotated_one_takes_over(corral_factory, corral_bin, tmp_path):
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    node = corral_factory(config=token_config(token_file))
    for path in ("/metrics", "/v1/groups", "/v1/groups/some-group"):
        status, _, headers = get(node.admin, path)
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer"), (path, status, dict(headers))
        assert get(node.admin, path, "not-the-token")[0] == 401, path
    status, metrics, _ = get(node.admin, "/metrics", TOKEN)
    assert status == 200
    assert "corral_admin_requests_unauthorized_total 6" in metrics, "each refused request is counted"
    status, body, _ = get(node.admin, "/v1/groups", TOKEN)
    assert status == 200 and "groups" in json.loads(body)
    # Probes and the page, which holds no data, need no token.
    assert get(node.admin, "/health/ready")[:2] == (200, "ready\n")
    assert get(node.admin, "/health/live")[0] == 200
    assert get(node.admin, "/")[0] == 200

    cli = lambda *extra: subprocess.run(  # noqa: E731
        [str(corral_bin), "groups", "list", "--admin", node.admin, "--output", "json", *extra], capture_output=True, text=True, timeout=30
    )
    assert cli().returncode != 0
    listed = cli("--token-file", str(token_file))
    assert listed.returncode == 0, listed.stderr
    assert "groups" in json.loads(listed.stdout)

    # The file is rotated: the new token is asked for within seconds, the old one no longer works.
    time.sleep(1.1)  # a modification time the node can tell from the first
    token_file.write_text(ROTATED + "\n")
    deadline = time.monotonic() + 10
    while get(node.admin, "/metrics", ROTATED)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert get(node.admin, "/metrics", ROTATED)[0] == 200
    assert get(node.admin, "/metrics", TOKEN)[0] == 401


def test_nodes_of_a_cluster_ask_each_other_with_the_token(corral_factory, tmp_path):
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN)
    c = Cluster(corral_factory, size=3, extra_config=token_config(token_file))
    try:
        c.start()
        for admin in (node.admin for node in c.nodes):
            # A cluster-wide listing asks every other node's admin listener.
            status, body, _ = get(admin, "/v1/groups", TOKEN)
            assert status == 200, body
            assert json.loads(body)["missing"] == [], body
    finally:
        c.close()


def test_a_missing_token_file_stops_the_start(corral_bin, tmp_path):
    config = tmp_path / "corral.toml"
    config.write_text(token_config(tmp_path / "absent"))
    checked = subprocess.run([str(corral_bin), "check-config", str(config)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 2, checked
    assert "admin.bearer_token_file" in checked.stderr, checked.stderr


def test_the_page_asks_for_the_token_and_reads_the_groups_with_it(corral_factory, tmp_path):
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    node = corral_factory(config=token_config(token_file))
    # Without the token, the page shows its form for one (and no listing).
    asked = chromium(tmp_path, f"http://{node.admin}/", "--dump-dom").stdout
    assert "<form" in asked and "This node asks for a bearer token (admin.bearer_token_file). " in text_of(asked), asked
    assert not re.search(r"\b\d+ groups\b", text_of(asked)), asked
    # With it in the address's fragment, the page reads /v1/groups with it.
    before = unauthorized(node)
    shown = chromium(tmp_path, f"http://{node.admin}/#token={TOKEN}", "--dump-dom").stdout
    assert re.search(r"\b0 groups\b", text_of(shown)) and "<form" not in shown, shown
    assert unauthorized(node) == before, "no request of the page's was refused"
    # A wrong one is refused, and the form says so.
    refused = chromium(tmp_path, f"http://{node.admin}/#token=not-the-token", "--dump-dom").stdout
    assert "<form" in refused and "bearer token (admin.bearer_token_file): the token was refused." in text_of(refused), refused
    # Nor does a fragment that is not percent-encoding stop the page.
    odd = chromium(tmp_path, f"http://{node.admin}/#token=ab%zz", "--dump-dom").stdout
    assert "<form" in odd and "the token was refused" in text_of(odd), odd


def unauthorized(node) -> float:
    status, metrics, _ = get(node.admin, "/metrics", TOKEN)
    assert status == 200
    (value,) = [line.split()[-1] for line in metrics.splitlines() if line.startswith("corral_admin_requests_unauthorized_total")]
    return float(value)
