#!/usr/bin/env python3
"""What log compaction costs producers, and how fast it goes, in one run.

    .venv/bin/python benches/compaction.py --corral target/release/corral \
        --bench target/release/corral-bench [--rounds 3] [--mb 300] [--duration 4]

Starts one corral (local storage, the cleaner looking every 100 ms). Each round:
- fills a topic of one partition, cleanup.policy=delete and 16 MiB segments, with `--mb` MB of
  random 200-byte values over 10,000 keys (confluent-kafka, lz4), so that all but the last
  10,000 records are replaced by a later one;
- measures produce throughput to another topic (corral-bench produce, 1 KiB records, acks=1,
  4 partitions) for `--duration` seconds with the cleaner idle: the baseline;
- switches the filled topic to cleanup.policy=compact and times the compaction, from the switch
  to its result in `/metrics`, with nothing else running; reads the same segment files with
  `cat` for the machine's read rate (from the page cache);
- fills a second topic the same way, switches it, and measures the same produce again while the
  cleaner works: the ratio of the two is what a compaction costs the producers of a node.
Prints each round and the medians.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from driver import bench, free_port, mbps

KEYS = 10_000
VALUE = 200


def metric(admin: str, name: str) -> float:
    body = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in body.splitlines() if line.startswith(name))


def admin_client(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, topic: str, partitions: int, config: dict) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)


def set_policy(bootstrap: str, topic: str, policy: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entry = ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = admin_client(bootstrap)  # kept: its futures fail once it is destroyed
    admin.incremental_alter_configs([resource])[resource].result(30)


def fill(bootstrap: str, topic: str, megabytes: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "compression.type": "lz4",
                  "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 256 * 1024})
    values = [os.urandom(VALUE) for _ in range(997)]  # incompressible, as most payloads are
    for i in range(megabytes * 1_000_000 // VALUE):
        while True:
            try:
                p.produce(topic, values[i % len(values)], key=f"key-{i % KEYS}".encode(), partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def produce_mbps(args, bootstrap: str, topic: str) -> float:
    return mbps(bench(args, "produce", "--bootstrap", bootstrap, "--topic", topic, "--create", "4", "--connections", "4",
                      "--in-flight", "4", "--acks", "1", "--warmup", "0.5", "--duration", str(args.duration), "--reps", "1"))


def sealed_segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))[:-1]


def read_mbps(files: list[Path]) -> float:
    size = sum(f.stat().st_size for f in files)
    start = time.monotonic()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return size / 1e6 / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corral", default="target/release/corral")
    parser.add_argument("--bench", default="target/release/corral-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="corral-compaction-"))
    port, admin_port = free_port(), free_port()
    config = work / "corral.toml"
    config.write_text("[storage]\ncleaner_backoff_ms = 100\n")
    server = subprocess.Popen([args.corral, "serve", "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
                               "--admin-listen", f"127.0.0.1:{admin_port}", "--config", str(config)],
                              stdout=subprocess.DEVNULL, stderr=open(work / "corral.log", "wb"))
    bootstrap, admin = f"127.0.0.1:{port}", f"127.0.0.1:{admin_port}"
    rows = []
    try:
        for _ in range(100):
            try:
                metric(admin, "corral_compaction_records_removed_total")
                break
            except OSError:
                time.sleep(0.1)
        for round_ in range(args.rounds):
            alone, loaded = f"alone-{round_}", f"loaded-{round_}"
            for topic in (alone, loaded):
                create(bootstrap, topic, 1, {"cleanup.policy": "delete", "segment.bytes": str(16 << 20)})
                fill(bootstrap, topic, args.mb)
            sealed = sealed_segments(work / "data" / f"{alone}-0")
            sealed_mb = sum(f.stat().st_size for f in sealed) / 1e6
            disk_read = read_mbps(sealed)
            base = produce_mbps(args, bootstrap, f"load-{round_}")

            def compaction(topic: str, done: dict) -> None:
                removed_before = metric(admin, "corral_compaction_records_removed_total")
                start = time.monotonic()
                set_policy(bootstrap, topic, "compact")
                while metric(admin, "corral_compaction_records_removed_total") == removed_before:
                    time.sleep(0.02)
                done["seconds"] = time.monotonic() - start

            quiet: dict[str, float] = {}
            compaction(alone, quiet)
            busy: dict[str, float] = {}
            waiter = threading.Thread(target=compaction, args=(loaded, busy))
            waiter.start()
            during = produce_mbps(args, bootstrap, f"load-{round_}")
            waiter.join(300)
            kept_mb = sum(f.stat().st_size for f in sealed_segments(work / "data" / f"{alone}-0")) / 1e6
            row = {"compaction_mbps": sealed_mb / quiet["seconds"], "loaded_mbps": sealed_mb / busy["seconds"],
                   "read_mbps": disk_read, "ratio": during / base}
            rows.append(row)
            print(f"round {round_ + 1}: compacted {sealed_mb:.0f} MB to {kept_mb:.1f} MB in {quiet['seconds']:.2f} s alone "
                  f"({row['compaction_mbps']:.0f} MB/s; cat reads them at {disk_read:.0f} MB/s), in {busy['seconds']:.2f} s "
                  f"under the produce load | produce {base:.0f} MB/s idle, {during:.0f} MB/s while compacting ({row['ratio']:.2f})",
                  flush=True)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    median = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    print(f"median: compaction {median('compaction_mbps'):.0f} MB/s of sealed log alone, {median('loaded_mbps'):.0f} MB/s "
          f"under load (cat: {median('read_mbps'):.0f} MB/s); produce while compacting {median('ratio'):.2f} of idle")


if __name__ == "__main__":
    sys.exit(main())
