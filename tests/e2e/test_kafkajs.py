"""KafkaJS (pure JavaScript client): admin and an idempotent producer, read back with librdkafka.

The KafkaJS side lives in js/kafkajs_e2e.js (installed by `npm ci` in tests/e2e/js, which
scripts/test.sh runs). The records it produced are read back here with confluent-kafka, an
independent client; KafkaJS's own group consumer is exercised in test_groups_other_clients.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import clients
from segments import CODECS, read_batches, segment_files

JS_DIR = Path(__file__).resolve().parent / "js"


def test_kafkajs_admin_and_producer(corral, topic_name):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/test.sh installs it)"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed: run `npm ci` in tests/e2e/js"

    run = subprocess.run(
        [node, str(JS_DIR / "kafkajs_e2e.js"), corral.bootstrap, topic_name],
        cwd=JS_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    stderr = run.stderr.decode(errors="replace")
    assert run.returncode == 0, f"kafkajs_e2e.js exited {run.returncode}:\n{stderr}"
    produced = json.loads(run.stdout.decode().strip().splitlines()[-1])["produced"]
    assert len(produced) == 200

    got = clients.consume_all(corral.bootstrap, topic_name)
    stored = {(r.partition, r.offset): r for recs in got.values() for r in recs}
    assert len(stored) == len(produced), f"{len(stored)} records stored, {len(produced)} acknowledged to KafkaJS"
    for m in produced:
        r = stored.get((m["partition"], m["offset"]))
        assert r is not None, f"{m['key']} missing at {m['partition']}/{m['offset']}"
        assert (r.key.decode(), r.value.decode()) == (m["key"], m["value"])
    for part, recs in got.items():
        assert [r.offset for r in recs] == list(range(len(recs))), f"partition {part}: offsets not contiguous"

    # Both the uncompressed and the gzip batches are stored as KafkaJS sent them.
    codecs = {b.codec for p in got for seg in segment_files(corral.partition_dir(topic_name, p)) for b in read_batches(seg)[0]}
    assert codecs == {CODECS["none"], CODECS["gzip"]}
