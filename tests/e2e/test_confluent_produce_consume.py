"""confluent-kafka (librdkafka): every compression codec, produced idempotently and read back."""

from __future__ import annotations

from collections import defaultdict

import pytest

import clients
from segments import CODECS, read_batches, segment_files

RECORDS_PER_CODEC = 2000
PARTITIONS = 3


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_exactly_once_in_order(corral, topic_name, codec):
    clients.create_topic(corral.bootstrap, topic_name, partitions=PARTITIONS)

    # Distinct keys and values; values repeat text so that every codec actually shrinks them.
    items = [
        (f"{codec}-key-{i:05d}".encode(), (f"{codec} value {i:05d} | " + "corral stores kafka batches " * 4).encode())
        for i in range(RECORDS_PER_CODEC)
    ]
    p = clients.producer(corral.bootstrap, compression_type=codec, linger_ms=20)
    delivered = clients.produce_all(p, topic_name, items)

    by_key = {key: (value, part, offset) for key, value, part, offset in delivered}
    assert len(by_key) == RECORDS_PER_CODEC
    produced_order = defaultdict(list)  # partition -> keys in produce order
    for key, _value, part, _offset in delivered:
        produced_order[part].append(key)
    assert len(produced_order) > 1, "the default partitioner should spread distinct keys over partitions"

    got = clients.consume_all(corral.bootstrap, topic_name)
    seen = set()
    for part, records in got.items():
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(records))), f"partition {part}: offsets not contiguous from 0 in order"
        assert [r.key for r in records] == produced_order[part], f"partition {part}: records not in produce order"
        for r in records:
            assert r.key not in seen, f"{r.key!r} delivered twice"
            seen.add(r.key)
            value, want_part, want_offset = by_key[r.key]
            assert r.value == value, f"{r.key!r}: value differs"
            assert (r.partition, r.offset) == (want_part, want_offset), f"{r.key!r}: not at its acknowledged offset"
    assert seen == set(by_key), f"{len(set(by_key) - seen)} acknowledged records missing"

    # The batches are stored as the producer compressed them (corral never re-encodes), so the
    # codec bits on disk prove the client really used the codec rather than falling back.
    want = CODECS[codec]
    stored = []
    for part in range(PARTITIONS):
        for seg in segment_files(corral.partition_dir(topic_name, part)):
            batches, trailing = read_batches(seg)
            assert trailing == 0, f"{seg}: {trailing} bytes after the last batch"
            stored += batches
    assert sum(b.records_count for b in stored) == RECORDS_PER_CODEC
    assert {b.codec for b in stored} == {want}, (
        f"stored codecs {sorted({b.codec for b in stored})}, want {want}: the producer sent {codec} batches "
        "uncompressed. (librdkafka enables lz4 only for brokers whose ApiVersions lists FindCoordinator v0; "
        "see its rdkafka_feature.c.)"
    )
