"""The groups API in a 3-node cluster: any node answers `/v1/groups` for the whole cluster and
`/v1/groups/{id}` for a group another node coordinates (asking that node's admin listener), and
`corral groups` pointed at any node shows the same group."""

from __future__ import annotations

import json
import subprocess
import urllib.request

from cluster import simple_commit
from groups import unique, wait_until


def get(admin_port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}{path}", timeout=15) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_any_node_answers_for_every_group(cluster, corral_bin):
    topic = unique("capi")
    cluster.create_topic(topic, 1)
    groups = [unique("capi-group") for _ in range(6)]
    for g in groups:
        assert simple_commit(cluster.kafka[cluster.coordinator(g)], g, topic, 7) == 0

    # Every node lists every group, each with the node that coordinates it (leaderships may still
    # move to their preferred nodes after startup, so the two are read together).
    def listed_right(i: int) -> bool:
        status, listing = get(cluster.admin[i], "/v1/groups")
        seen = {g["group"]: g["coordinator_node"] for g in listing["groups"]}
        return status == 200 and listing["missing"] == [] and all(seen.get(g) == cluster.coordinator(g) for g in groups)

    for i in range(cluster.size):
        wait_until(lambda: listed_right(i), f"node {i} lists every group with its coordinator", timeout=30)

    # A node asked about a group it does not coordinate asks the coordinator's node.
    g = groups[0]
    coordinator = cluster.coordinator(g)
    other = next(i for i in range(cluster.size) if i != coordinator)
    status, detail = get(cluster.admin[other], f"/v1/groups/{g}")
    assert status == 200, detail
    assert detail["coordinator_node"] == cluster.coordinator(g)
    assert [(o["topic"], o["partition"], o["committed_offset"]) for o in detail["offsets"]] == [(topic, 0, 7)]
    # Only this node: it says who coordinates instead of asking.
    status, local = get(cluster.admin[other], f"/v1/groups/{g}?scope=local")
    assert status == 421 and local["coordinator_node"] == cluster.coordinator(g), local

    out = subprocess.run([str(corral_bin), "groups", "--admin", f"127.0.0.1:{cluster.admin[other]}", "describe", g],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert any(line.split()[:4] == [g, topic, "0", "7"] for line in out.stdout.splitlines()), out.stdout

    # A node that is down is named under `missing`; the others' groups are still listed.
    down = other
    cluster.nodes[down].stop()
    up = next(i for i in range(cluster.size) if i != down)
    wait_until(lambda: get(cluster.admin[up], "/v1/groups")[1]["missing"] != [], "the stopped node named as missing", timeout=30)
    status, listing = get(cluster.admin[up], "/v1/groups")
    assert [m["node"] for m in listing["missing"]] == [down], listing["missing"]
