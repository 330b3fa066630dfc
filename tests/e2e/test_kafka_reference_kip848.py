"""The same requests to Kafka and to corral: offset commits of KIP-848 members, with Apache Kafka 4.4
as the reference.

KIP-1251 (Kafka 4.3) dates each partition a consumer-protocol member holds from the member epoch
at which it was given it. An OffsetCommit from an older epoch than the member's (one sent just
before a heartbeat moved the epoch) is accepted when the member has held every partition it
commits since that epoch, and fenced with STALE_MEMBER_EPOCH otherwise; an epoch newer than the
member's is always fenced. franz-go and the Java client rely on it to commit while they reconcile.

Every case sends one sequence of raw requests (kip848wire.py) to a real Kafka cluster and to a
corral server and asserts that both answer alike, as test_kafka_reference.py does (whose fixtures
and helpers this module uses). Epochs are named relative to the first member's first one.
"""

from __future__ import annotations

import kip848wire as k8
import test_kafka_reference as reference
from test_kafka_reference import Names, Side, assert_both_serve, compare, unique
from test_kafka_reference_migration import heartbeat, past_assignment_interval, topic_id

# test_kafka_reference's fixture (Kafka, then a new corral); pytest finds it by this name.
sides = reference.sides

REBALANCE_MS = 30000
NONE = 0
STALE_MEMBER_EPOCH = 113
VERSIONS_USED = {(k8.CONSUMER_GROUP_HEARTBEAT, 0), (k8.OFFSET_COMMIT, 9)}


def test_both_serve_the_versions_used(sides):
    assert_both_serve(sides, VERSIONS_USED)


def s_commit_from_an_older_epoch(side: Side) -> dict:
    group, names, topic = unique("kip1251"), Names(), side.create_topic(2)
    side.wait_assignable(topic, group)
    tid = topic_id(side, topic)
    ca, cb = side.conn(group), side.conn(group)
    out: dict = {}

    def commit(conn, member: str, epoch: int, partitions: list[int]) -> list[int]:
        codes = conn.call(k8.offset_commit_v9, k8.parse_offset_commit_v9, group, epoch, member, {(topic, p): 5 for p in partitions})[1]
        return [codes[(topic, p)] for p in partitions]

    # A joins alone and owns both partitions at its first epoch E.
    ja = heartbeat(ca, group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[topic], owned=[])
    a, e = ja.member_id, ja.member_epoch
    names.name(a, "A")
    out["A joins"] = (ja.error, sorted(p for _, ps in ja.assignment or [] for p in ps))
    out["A confirms"] = heartbeat(ca, group, a, e, owned=[(tid, [0, 1])]).error
    # B joins: A must give up one partition (R) and keeps the other (K); once it reports that it
    # did, its epoch moves on.
    past_assignment_interval()
    jb = heartbeat(cb, group, "", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topics=[topic], owned=[])
    b = jb.member_id
    names.name(b, "B")
    out["B joins"] = (jb.error, f"E+{jb.member_epoch - e}", sorted(p for _, ps in jb.assignment or [] for p in ps))
    revoking = heartbeat(ca, group, a, e, owned=[(tid, [0, 1])])
    kept = [p for _, ps in revoking.assignment or [] for p in ps]
    out["A told to revoke"] = (revoking.error, f"E+{revoking.member_epoch - e}", len(kept))
    if len(kept) != 1:
        return out
    k, r = kept[0], 1 - kept[0]
    revoked = heartbeat(ca, group, a, e, owned=[(tid, [k])])
    e2 = revoked.member_epoch
    out["A revoked"] = (revoked.error, f"E+{e2 - e}")

    out["A commits K at E"] = commit(ca, a, e, [k])
    out["A commits R at E"] = commit(ca, a, e, [r])
    out["A commits K and R at E"] = commit(ca, a, e, [k, r])
    out["A commits R at its epoch"] = commit(ca, a, e2, [r])
    out["A commits K at a newer epoch"] = commit(ca, a, e2 + 1, [k])
    out["A commits K at an epoch before E"] = commit(ca, a, e - 1, [k])

    # B takes R at the epoch A moved to: that epoch may commit it, the one before may not.
    took = heartbeat(cb, group, b, jb.member_epoch, owned=[])
    out["B takes R"] = (took.error, f"E+{took.member_epoch - e}", [p for _, ps in took.assignment or [] for p in ps] == [r])
    out["B commits R at its epoch"] = commit(cb, b, took.member_epoch, [r])
    out["B commits R at E"] = commit(cb, b, e, [r])
    return out


def test_a_commit_from_an_older_epoch_covers_what_was_held_since(sides):
    compare(
        sides,
        s_commit_from_an_older_epoch,
        expected={
            "A told to revoke": (NONE, "E+0", 1),
            "A revoked": (NONE, "E+1"),
            "A commits K at E": [NONE],
            "A commits R at E": [STALE_MEMBER_EPOCH],
            "A commits K and R at E": [STALE_MEMBER_EPOCH, STALE_MEMBER_EPOCH],
            "A commits R at its epoch": [NONE],
            "A commits K at a newer epoch": [STALE_MEMBER_EPOCH],
            "A commits K at an epoch before E": [STALE_MEMBER_EPOCH],
            "B commits R at its epoch": [NONE],
            "B commits R at E": [STALE_MEMBER_EPOCH],
        },
    )
