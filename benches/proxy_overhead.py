#!/usr/bin/env python3
"""What corral in front of Kafka costs a client, in one run: client -> Kafka against
client -> corral -> Kafka (the upstream role) and client -> sidecar -> Kafka (the sidecar role),
the same load generator for all three.

    .venv/bin/python benches/proxy_overhead.py --corral target/release/corral \
        --bench target/release/corral-bench [--rounds 3] [--duration 5]

Starts one Apache Kafka 4.4 broker (the jars scripts/test.sh resolves into .cache/, through
tests/e2e/apache_kafka.py), one corral with `storage.backend = "upstream"` in front of it, and
one corral with `role = "sidecar"` whose data is in the same Kafka and whose group service is
the first corral. Each round measures each of the three (the order rotated every round, since
the machine's speed drifts):
- produce throughput: corral-bench produce, 1 KiB records in 1000-record batches, acks=1,
  4 connections x 4 in flight, 4 partitions;
- fetch throughput: corral-bench fetch of one filled partition in 1 MiB fetches;
- produce latency: one 1 KiB record at a time with acks=1 (confluent-kafka, each send waited
  for), p50 and p99 of 2000;
- fetch latency: one Fetch v4 at a time (the version librdkafka 2.0 asks for, so nothing follows
  the records in the response) of the filled partition's first MiB, p50 and p99 of 300;
and each corral's CPU seconds per GB moved. Prints the medians, the through/direct ratios per
round and the added latency (through minus direct).

With `--pin`, Kafka and the load generators run on the first CPU and each corral on the second,
as a proxy on a host of its own would: the ratios then show what corral's path costs a client,
without corral taking CPU time from the broker and the client. Without it (the default) all of
them share every CPU, and on a small machine every CPU second corral spends is one that Kafka
and the client lose.
"""

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from driver import bench, free_port, mbps

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from apache_kafka import ApacheKafkaCluster, corral_upstream_config  # noqa: E402




def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")






def produce_mbps(args, bootstrap: str, topic: str) -> float:
    # Kafka answers CreateTopics before its broker leads the new partitions (corral-bench then
    # stops at NOT_LEADER_OR_FOLLOWER): a first small produce, tried until it is accepted, waits.
    for _ in range(20):
        first = subprocess.run([args.bench, "produce", "--bootstrap", bootstrap, "--topic", topic, "--create", "4", "--bytes", str(1 << 20)],
                               capture_output=True, text=True)
        if first.returncode == 0:
            break
        time.sleep(0.25)
    return mbps(bench(args, "produce", "--bootstrap", bootstrap, "--topic", topic, "--create", "4", "--connections", "4",
                      "--in-flight", "4", "--acks", "1", "--warmup", "1", "--duration", str(args.duration), "--reps", "1"))


def fetch_mbps(args, bootstrap: str, topic: str) -> float:
    return mbps(bench(args, "fetch", "--bootstrap", bootstrap, "--topic", topic, "--warmup", "0.5",
                      "--duration", str(args.duration), "--reps", "1"))


def latencies_ms(bootstrap: str, topic: str, n: int = 2000) -> tuple[float, float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "enable.idempotence": False})
    value = b"x" * 1024
    for _ in range(100):  # warm-up: metadata, connections
        p.produce(topic, value)
        p.flush(10)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        p.produce(topic, value, partition=0)
        p.flush(10)
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * len(samples)) - 1]


def fetch_latencies_ms(bootstrap: str, topic: str, n: int = 300) -> tuple[float, float]:
    import kafkawire as kw

    conn = kw.Conn(bootstrap)
    samples = []
    try:
        for i in range(n + 20):  # the first 20: warm-up
            t = time.perf_counter()
            conn.send(kw.fetch_v4(i + 1, topic, 0, 0, max_wait_ms=0))
            frame = conn.recv_frame()
            if i >= 20:
                samples.append((time.perf_counter() - t) * 1000)
            error, _, records = kw.parse_fetch_v4(frame)[1][(topic, 0)]
            assert error == 0 and records, f"fetch from {bootstrap}: error {error}"
    finally:
        conn.close()
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * len(samples)) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corral", default=str(REPO / "target" / "release" / "corral"))
    ap.add_argument("--bench", default=str(REPO / "target" / "release" / "corral-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--pin", action="store_true", help="Kafka and the load on CPU 0, each corral on CPU 1")
    args = ap.parse_args()
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs two CPUs")
        # Inherited by Kafka and every load generator this script starts; corral is moved.
        args.corral_cpus = set(cpus[1:2])
        os.sched_setaffinity(0, set(cpus[:1]))

    with kafka_and_corrals(args, "corral-proxy-bench-", "proxy-fetch") as (work, kafka, servers):
        direct = kafka.bootstrap
        servers["corral"] = start_corral(args, work / "corral", upstream_config(direct))
        sidecar = 'role = "sidecar"\n' + corral_upstream_config(direct) + f'[sidecar]\ngroup_bootstrap = ["{servers["corral"][1]}"]\n'
        servers["sidecar"] = start_corral(args, work / "sidecar", sidecar + "[admin]\nmetrics = false\n")
        names = ["direct", *servers]
        keys = ("produce MB/s", "fetch MB/s", "latency p50 ms", "latency p99 ms", "fetch p50 ms", "fetch p99 ms")
        rows = {k: {n: [] for n in names} for k in keys}
        cpu_per_gb: dict[str, list[float]] = {n: [] for n in servers}
        for rnd in range(args.rounds):
            for name in rotated(names, rnd):
                bootstrap = direct if name == "direct" else servers[name][1]
                proc = servers.get(name, (None,))[0]
                before = cpu_seconds(proc.pid) if proc else 0.0
                p = produce_mbps(args, bootstrap, f"proxy-produce-{name}-{rnd}")
                f = fetch_mbps(args, bootstrap, "proxy-fetch")
                if proc:
                    moved_gb = (p + f) * args.duration * 1e6 / 1e9
                    cpu_per_gb[name].append((cpu_seconds(proc.pid) - before) / moved_gb)
                p50, p99 = latencies_ms(bootstrap, f"proxy-latency-{name}-{rnd}")
                f50, f99 = fetch_latencies_ms(bootstrap, "proxy-fetch")
                for key, value in zip(keys, (p, f, p50, p99, f50, f99)):
                    rows[key][name].append(value)
                print(f"round {rnd + 1} {name:7}: produce {p:7.1f} MB/s  fetch {f:7.1f} MB/s  p50 {p50:.3f} ms  p99 {p99:.3f} ms"
                      f"  fetch p50 {f50:.3f} ms  p99 {f99:.3f} ms", flush=True)
        print()
        for through in servers:
            print(f"{'':16} {'direct':>10} {through:>10} {through + '/direct (per round)':>34}")
            for key, v in rows.items():
                ratios = [c / d for c, d in zip(v[through], v["direct"])]
                per = ", ".join(f"{r:.3f}" for r in ratios)
                print(f"{key:16} {statistics.median(v['direct']):10.3f} {statistics.median(v[through]):10.3f} {statistics.median(ratios):10.3f}  ({per})")
            for what, p50_key, p99_key in (("produce", "latency p50 ms", "latency p99 ms"), ("fetch", "fetch p50 ms", "fetch p99 ms")):
                added = [c - d for c, d in zip(rows[p50_key][through], rows[p50_key]["direct"])]
                added99 = [c - d for c, d in zip(rows[p99_key][through], rows[p99_key]["direct"])]
                print(f"added {what} latency: p50 {statistics.median(added):.3f} ms, p99 {statistics.median(added99):.3f} ms (median over rounds)")
            # CPU over produce and fetch with their warm-ups, per GB of the timed part: an upper bound.
            print(f"{through} CPU per GB moved (produce + fetch): {statistics.median(cpu_per_gb[through]):.2f} s")
            print()


@contextlib.contextmanager
def kafka_and_corrals(args, prefix: str, fetch_topic: str):
    """One Kafka broker in a new scratch directory, with `fetch_topic` filled once (256 MiB);
    yields the directory, the broker and a dict for the corrals the caller starts. All of them
    are stopped and the directory removed at the end."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    kafka = ApacheKafkaCluster(work / "kafka", size=1)
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        kafka.start_all()
        bench(args, "produce", "--bootstrap", kafka.bootstrap, "--topic", fetch_topic, "--create", "1", "--bytes", str(256 << 20))
        yield work, kafka, servers
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
        kafka.stop()
        # Tens of GB at these rates: never left behind, whatever ended the run.
        shutil.rmtree(work, ignore_errors=True)


def upstream_config(bootstrap: str) -> str:
    """A corral in front of the broker at `bootstrap`, its metrics off as in every measurement."""
    return "[admin]\nmetrics = false\n" + corral_upstream_config(bootstrap)


def rotated(names: list[str], rnd: int) -> list[str]:
    """The order of round `rnd`: rotated every round, since the machine's speed drifts."""
    return names[rnd % len(names) :] + names[: rnd % len(names)]


def start_corral(args, workdir: Path, config: str) -> tuple[subprocess.Popen, str]:
    """Starts a corral with `config` and waits until it is ready; returns it and its bootstrap."""
    workdir.mkdir(parents=True)
    kport, aport = free_port(), free_port()
    (workdir / "corral.toml").write_text(config)
    log = open(workdir / "corral.log", "wb")
    cpus = getattr(args, "corral_cpus", None)
    proc = subprocess.Popen([args.corral, "serve", "--data-dir", str(workdir / "data"), "--listen", f"127.0.0.1:{kport}",
                             "--admin-listen", f"127.0.0.1:{aport}", "--config", str(workdir / "corral.toml")],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, CORRAL_LOG="warn"),
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", aport), timeout=1) as s:
                s.sendall(b"GET /health/ready HTTP/1.0\r\n\r\n")
                if b" 200 " in s.recv(100):
                    return proc, f"127.0.0.1:{kport}"
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"corral in {workdir} not ready; its log: {workdir / 'corral.log'}")
        time.sleep(0.1)

if __name__ == "__main__":
    main()
