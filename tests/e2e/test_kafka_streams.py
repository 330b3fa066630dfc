"""Kafka Streams 4.4 on corral: a word count whose state lives in a compacted changelog.

The application (tests/e2e/java, StreamsCount) counts words into an in-memory store, so every
start restores the whole state from the store's changelog topic, which corral compacts while the
test runs. Three runs over three waves of input must end with the counts of all three: a restore
that lost or doubled an update, or read a compacted changelog wrongly, shows in the counts.
Streams also creates its internal topics with its own configs (the changelog compacted) and
purges its repartition topic with DeleteRecords.
"""

from __future__ import annotations

import json
import struct
import uuid

import clients
from apache_kafka import CORRAL_GROUP_CONFIG
from groups import wait_until
from test_java_client import java_classpath, run_java  # noqa: F401 (a fixture)

WORDS = [f"w{i}" for i in range(10)]
WAVE = 300
CORRAL_CONFIG = CORRAL_GROUP_CONFIG + "[storage]\ncleaner_backoff_ms = 200\n"
MAIN = "corral.e2e.StreamsCount"


def compaction_removed(server) -> float:
    status, metrics = server.http_get("/metrics")
    assert status == 200
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("corral_compaction_records_removed_total"))


def test_a_word_count_restores_its_state_from_a_compacted_changelog(corral_factory, java_classpath, tmp_path):  # noqa: F811
    server = corral_factory(config=CORRAL_CONFIG)
    app = f"wordcount-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-words", f"{app}-counts"
    clients.create_topic(server.bootstrap, source, partitions=2)
    clients.create_topic(server.bootstrap, sink, partitions=2)
    producer = clients.producer(server.bootstrap)

    def run(wave: int) -> dict[str, int]:
        items = [(f"k{i}".encode(), WORDS[i % len(WORDS)].encode()) for i in range(WAVE)]
        clients.produce_all(producer, source, items)
        total = WAVE * wave
        args = (server.bootstrap, app, source, sink, str(tmp_path / "state"), str(total))
        stdout = run_java(java_classpath, tmp_path, f"streams-{wave}", MAIN, *args)
        return json.loads(stdout.strip().splitlines()[-1])["counts"]

    per_word = WAVE // len(WORDS)
    assert run(1) == {w: per_word for w in WORDS}
    assert run(2) == {w: 2 * per_word for w in WORDS}
    # The changelog was compacted before the third run restores from it.
    wait_until(lambda: compaction_removed(server) > 0, "the changelog compacted", timeout=30)
    assert run(3) == {w: 3 * per_word for w in WORDS}

    changelog = f"{app}-counts-changelog"
    admin = clients.admin_client(server.bootstrap)
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, changelog)
    assert admin.describe_configs([resource])[resource].result(30)["cleanup.policy"].value == "compact"
    # The changelog holds the last count of each word, and fewer records than the updates made.
    # (Each partition's records come in offset order, and a word is in one partition.)
    records = [r for part in clients.consume_all(server.bootstrap, changelog).values() for r in part]
    last = {r.key.decode(): struct.unpack(">q", r.value)[0] for r in records}
    assert last == {w: 3 * per_word for w in WORDS}
    assert len(records) < 3 * WAVE
    # The output topic's last count of each word is the same.
    output = [r for part in clients.consume_all(server.bootstrap, sink).values() for r in part]
    assert {r.key.decode(): struct.unpack(">q", r.value)[0] for r in output} == last
    # Streams purged the records it had read from its repartition topic.
    repartition = f"{app}-by-word-repartition"
    assert any(clients.watermarks(server.bootstrap, repartition, p)[0] > 0 for p in range(2))
