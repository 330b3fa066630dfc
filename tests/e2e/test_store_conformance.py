"""The partition store's conformance suite (tests/it/t25_store.rs) against Apache Kafka: the same
cases `cargo test` runs against local segments, run again with the node's store in front of the
real Kafka cluster (`CORRAL_STORE_UPSTREAM`). The test binary is the one `cargo test` built; cargo
builds it first if it is missing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The cases of t25_store.rs: every one must have run and passed.
CASES = 12


def test_the_store_conformance_suite_passes_against_kafka(apache_kafka_classic):
    env = dict(os.environ, CORRAL_STORE_UPSTREAM=apache_kafka_classic.bootstrap, CORRAL_LOG="warn", RUST_BACKTRACE="0")
    run = subprocess.run(
        ["cargo", "test", "--quiet", "--test", "it", "t25_store::", "--", "--test-threads=2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-12000:]
    passed = re.search(r"test result: ok\. (\d+) passed; 0 failed", out)
    assert passed and int(passed.group(1)) == CASES, out[-3000:]
