"""Producer ids are unique across a 3-node cluster: InitProducerId on every node hands out ids no
other node hands out, so idempotent producers that start on different nodes and write one
partition never share sequence state. Ids come in blocks handed out through the metadata group:
a restarted node takes a fresh block, past every block any node was given."""

from __future__ import annotations

import struct

import kafkawire as kw

API_INIT_PRODUCER_ID = 22
# Where the metadata group's blocks begin (src/cluster/catalog.rs FIRST_PRODUCER_ID).
FIRST_ID = 1 << 40


def init_producer_id(port: int, corr: int) -> int:
    """InitProducerId v0 of an idempotent (non-transactional) producer; its producer id."""
    conn = kw.Conn(f"127.0.0.1:{port}")
    try:
        conn.send(kw.request(API_INIT_PRODUCER_ID, 0, corr, kw.i16(-1) + kw.i32(60000)))
        frame = conn.recv_frame()
    finally:
        conn.close()
    got_corr, _throttle, error, producer_id, epoch = struct.unpack(">iihqh", frame)
    assert (got_corr, error, epoch) == (corr, 0, 0), (got_corr, error, epoch)
    return producer_id


def test_producer_ids_never_collide_across_nodes(cluster):
    issued = []
    for round_ in range(5):
        for i in range(cluster.size):
            issued.append((i, init_producer_id(cluster.kafka[i], 100 * round_ + i)))
    ids = [pid for _, pid in issued]
    assert len(set(ids)) == len(ids), f"a producer id was handed out twice: {issued}"
    assert min(ids) >= FIRST_ID, f"ids below the first block: {sorted(ids)[:3]}"
    # Each node took one block and counts up within it.
    for i in range(cluster.size):
        mine = [pid for n, pid in issued if n == i]
        assert mine == list(range(mine[0], mine[0] + len(mine))), f"node {i}: {mine}"
    cluster.nodes[1].restart()
    again = [init_producer_id(cluster.kafka[1], 900 + n) for n in range(3)]
    assert min(again) > max(ids), f"a restarted node took no fresh block: {again} after {sorted(ids)}"
