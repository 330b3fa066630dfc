"""kcat (Debian's 1.7.1 with librdkafka 2.0.2, an older librdkafka than confluent-kafka's)."""

from __future__ import annotations

import shutil
import subprocess

import clients
from segments import CODECS, read_batches, segment_files


def kcat(*args: str, stdin: bytes | None = None) -> str:
    exe = shutil.which("kcat")
    assert exe, "kcat is not installed (scripts/test.sh installs Debian's kcat)"
    run = subprocess.run([exe, *args], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert run.returncode == 0, f"kcat {' '.join(args)} exited {run.returncode}:\n{run.stderr.decode(errors='replace')}"
    return run.stdout.decode()


def test_kcat_metadata_produce_consume(corral, topic_name):
    b = corral.bootstrap
    clients.create_topic(b, topic_name, partitions=2)

    listing = kcat("-b", b, "-L", "-m", "30")
    assert "1 brokers:" in listing
    assert f"broker 0 at 127.0.0.1:{corral.kafka_port}" in listing
    assert f'topic "{topic_name}" with 2 partitions:' in listing
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listing

    # Plain lines to partition 0, snappy-compressed keyed lines to partition 1.
    plain = [f"plain line {i}" for i in range(100)]
    kcat("-b", b, "-P", "-t", topic_name, "-p", "0", "-X", "acks=all", stdin=("\n".join(plain) + "\n").encode())
    keyed = [(f"key{i}", f"snappy line {i} " + "x" * 40) for i in range(100)]
    kcat(
        "-b", b, "-P", "-t", topic_name, "-p", "1", "-z", "snappy", "-K", ":",
        stdin=("\n".join(f"{k}:{v}" for k, v in keyed) + "\n").encode(),
    )  # fmt: skip

    out = kcat("-b", b, "-C", "-t", topic_name, "-e", "-o", "beginning", "-q", "-f", "%p|%o|%k|%s\n")
    lines = out.splitlines()
    got = {0: [], 1: []}
    for line in lines:
        part, offset, key, value = line.split("|", 3)
        got[int(part)].append((int(offset), key, value))
    assert got[0] == [(i, "", v) for i, v in enumerate(plain)]
    assert got[1] == [(i, k, v) for i, (k, v) in enumerate(keyed)]

    # Reading a single partition from an offset.
    tail = kcat("-b", b, "-C", "-t", topic_name, "-p", "1", "-o", "95", "-e", "-q", "-f", "%o %s\n")
    assert tail.splitlines() == [f"{i} {keyed[i][1]}" for i in range(95, 100)]

    # The snappy batches are stored compressed, the plain ones not.
    assert {b.codec for seg in segment_files(corral.partition_dir(topic_name, 0)) for b in read_batches(seg)[0]} == {CODECS["none"]}
    assert {b.codec for seg in segment_files(corral.partition_dir(topic_name, 1)) for b in read_batches(seg)[0]} == {CODECS["snappy"]}


def test_kcat_produce_auto_creates_topic(corral, topic_name):
    kcat("-b", corral.bootstrap, "-P", "-t", topic_name, stdin=b"one\ntwo\nthree\n")
    out = kcat("-b", corral.bootstrap, "-C", "-t", topic_name, "-e", "-o", "beginning", "-q", "-f", "%o:%s\n")
    assert out.splitlines() == ["0:one", "1:two", "2:three"]
