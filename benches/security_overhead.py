#!/usr/bin/env python3
"""What TLS and SASL cost on corral's Kafka listeners, in one run against one node:

    .venv/bin/python benches/security_overhead.py --corral target/release/corral \
        --bench target/release/corral-bench [--rounds 3] [--duration 4]

Makes a CA and a server certificate (trustme, as tests/e2e/security.py does) and a user with
SCRAM-SHA-256 and SCRAM-SHA-512 credentials of 4096 iterations (`corral sasl-credential`), then
starts one release corral with four Kafka listeners: PLAINTEXT, SSL, SASL_SSL, SASL_PLAINTEXT.
TLS is rustls in userspace on both sides; without kTLS (this kernel's tcp_available_ulp is
printed) a TLS fetch reads the segment and encrypts it instead of sendfile(2).

Each round measures, the order of the listeners rotated every round (the machine's speed
drifts):
- produce throughput: corral-bench produce, 1 KiB records in 1000-record batches, acks=1,
  4 connections x 4 in flight, 4 partitions (a fresh topic per run);
- fetch throughput: corral-bench fetch of one partition filled once (256 MiB, in the page
  cache) in 1 MiB fetches, one connection;
  over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512; SASL only costs at connection setup), with
  corral's CPU seconds per GB;
- connection setup: corral-bench connect, connections one at a time, each timed from connect(2)
  until ApiVersions is answered after the TLS handshake (full, no resumption) and SASL:
  PLAINTEXT, SSL, SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, SASL_SSL with
  SCRAM-SHA-512; with corral's CPU milliseconds per connection.
Prints the medians over rounds and the ratios against PLAINTEXT per round. The server is stopped
by its pid at the end and the scratch directory removed.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from driver import bench, cpu_per_gb, free_port, make_certificates, mbps

REPO = Path(__file__).resolve().parents[1]
USER, PASSWORD = "bench", "bench-secret"
ITERATIONS = 4096
FETCH_TOPIC = "sec-fetch"

# Listeners of the throughput runs (SASL_SSL logs in with SCRAM-SHA-512).
THROUGHPUT = ["PLAINTEXT", "SSL", "SASL_SSL"]
# Connection setup scenarios: label -> (listener, TLS, SASL mechanism).
SETUP = {
    "PLAINTEXT": ("PLAINTEXT", False, None),
    "SSL": ("SSL", True, None),
    "SASL_PLAINTEXT PLAIN": ("SASL_PLAINTEXT", False, "PLAIN"),
    "SASL_PLAINTEXT SCRAM-SHA-256": ("SASL_PLAINTEXT", False, "SCRAM-SHA-256"),
    "SASL_PLAINTEXT SCRAM-SHA-512": ("SASL_PLAINTEXT", False, "SCRAM-SHA-512"),
    "SASL_SSL SCRAM-SHA-512": ("SASL_SSL", True, "SCRAM-SHA-512"),
}


def security_argv(certs: Path, tls: bool, mechanism: str | None) -> list[str]:
    argv = ["--tls-ca-file", str(certs / "ca.crt")] if tls else []
    if mechanism:
        argv += ["--sasl-mechanism", mechanism, "--sasl-username", USER, "--sasl-password", PASSWORD]
    return argv


def throughput_argv(certs: Path, listener: str) -> list[str]:
    return security_argv(certs, listener in ("SSL", "SASL_SSL"), "SCRAM-SHA-512" if listener.startswith("SASL") else None)


def make_credentials(corral: str, path: Path) -> None:
    out = subprocess.run([corral, "sasl-credential", "--user", USER, "--iterations", str(ITERATIONS)],
                         input=PASSWORD + "\n", capture_output=True, text=True, check=True)
    path.write_text(out.stdout)


def start_corral(args, work: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """Starts corral with the four listeners and waits until it is ready."""
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT", "admin")}
    listeners = {name: f"127.0.0.1:{ports[name]}" for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    config = f"""
[kafka]
listen = "{listeners['PLAINTEXT']}"
listeners = [
  {{ name = "SSL", protocol = "SSL", listen = "{listeners['SSL']}" }},
  {{ name = "SASL_SSL", protocol = "SASL_SSL", listen = "{listeners['SASL_SSL']}" }},
  {{ name = "SASL_PLAINTEXT", protocol = "SASL_PLAINTEXT", listen = "{listeners['SASL_PLAINTEXT']}" }},
]
[tls]
cert_file = "{work / 'server.crt'}"
key_file = "{work / 'server.key'}"
[sasl]
credentials_file = "{work / 'users.toml'}"
[admin]
listen = "127.0.0.1:{ports['admin']}"
metrics = false
"""
    (work / "corral.toml").write_text(config)
    log = open(work / "corral.log", "wb")
    proc = subprocess.Popen([args.corral, "serve", "--data-dir", str(work / "data"), "--config", str(work / "corral.toml")],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, CORRAL_LOG="warn"))
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", ports["admin"]), timeout=1) as s:
                s.sendall(b"GET /health/ready HTTP/1.0\r\n\r\n")
                if b" 200 " in s.recv(100):
                    return proc, listeners
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"corral not ready; its log: {work / 'corral.log'}")
        time.sleep(0.1)


def setup_cost(args, certs: Path, bootstrap: str, tls: bool, mechanism: str | None, pid: int) -> tuple[float, float, float, float]:
    """p50 ms, p99 ms, connections/s, corral CPU ms per connection."""
    out = bench(args, "connect", "--bootstrap", bootstrap, "--count", str(args.connections), "--warmup-count", "20",
                "--server-pid", str(pid), *security_argv(certs, tls, mechanism))
    m = re.search(r"median p50 ([\d.]+) ms, p99 ([\d.]+) ms, ([\d.]+) connections/s(?:, server CPU ([\d.]+) ms/connection)?", out)
    return float(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4) or "nan")


def ratio_line(label: str, values: dict[str, list[float]], base: str, other: str, fmt: str = "10.1f") -> str:
    ratios = [o / b for o, b in zip(values[other], values[base])]
    per = ", ".join(f"{r:.3f}" for r in ratios)
    return (f"{label:34} {statistics.median(values[base]):{fmt}} {statistics.median(values[other]):{fmt}} "
            f"{statistics.median(ratios):8.3f}  ({per})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corral", default=str(REPO / "target" / "release" / "corral"))
    ap.add_argument("--bench", default=str(REPO / "target" / "release" / "corral-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4)
    ap.add_argument("--connections", type=int, default=500, help="connections timed per setup scenario and round")
    args = ap.parse_args()

    ulp = Path("/proc/sys/net/ipv4/tcp_available_ulp")
    print(f"kernel {os.uname().release}; tcp_available_ulp: {ulp.read_text().strip() if ulp.exists() else '?'!r} "
          f"(kTLS needs 'tls'); {os.cpu_count()} CPUs", flush=True)
    work = Path(tempfile.mkdtemp(prefix="corral-security-bench-"))
    proc = None
    try:
        make_certificates(work)
        make_credentials(args.corral, work / "users.toml")
        proc, listeners = start_corral(args, work)
        pid = str(proc.pid)
        # The fetch partition, filled once over PLAINTEXT; every listener reads the same bytes.
        bench(args, "produce", "--bootstrap", listeners["PLAINTEXT"], "--topic", FETCH_TOPIC, "--create", "1", "--bytes", str(256 << 20))
        rows = {k: {n: [] for n in THROUGHPUT} for k in ("produce MB/s", "fetch MB/s", "produce CPU s/GB", "fetch CPU s/GB")}
        for rnd in range(args.rounds):
            order = THROUGHPUT[rnd % len(THROUGHPUT):] + THROUGHPUT[: rnd % len(THROUGHPUT)]
            for name in order:
                sec = throughput_argv(work, name)
                out = bench(args, "produce", "--bootstrap", listeners[name], "--topic", f"sec-produce-{name.lower()}-{rnd}", "--create", "4",
                            "--connections", "4", "--in-flight", "4", "--acks", "1", "--warmup", "1", "--duration", str(args.duration),
                            "--reps", "1", "--server-pid", pid, *sec)
                p, pc = mbps(out), cpu_per_gb(out)
                out = bench(args, "fetch", "--bootstrap", listeners[name], "--topic", FETCH_TOPIC, "--no-warm-pass", "--warmup", "0.5",
                            "--duration", str(args.duration), "--reps", "1", "--server-pid", pid, *sec)
                f, fc = mbps(out), cpu_per_gb(out)
                for key, value in (("produce MB/s", p), ("fetch MB/s", f), ("produce CPU s/GB", pc), ("fetch CPU s/GB", fc)):
                    rows[key][name].append(value)
                print(f"round {rnd + 1} {name:10}: produce {p:7.1f} MB/s ({pc:.2f} CPU s/GB)  fetch {f:7.1f} MB/s ({fc:.2f} CPU s/GB)",
                      flush=True)

        labels = list(SETUP)
        setup = {k: {n: [] for n in labels} for k in ("p50 ms", "p99 ms", "conn/s", "CPU ms/conn")}
        for rnd in range(args.rounds):
            order = labels[rnd % len(labels):] + labels[: rnd % len(labels)]
            for label in order:
                listener, tls, mechanism = SETUP[label]
                p50, p99, rate, cpu = setup_cost(args, work, listeners[listener], tls, mechanism, proc.pid)
                for key, value in (("p50 ms", p50), ("p99 ms", p99), ("conn/s", rate), ("CPU ms/conn", cpu)):
                    setup[key][label].append(value)
                print(f"round {rnd + 1} setup {label:30}: p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  {rate:8.1f} conn/s  "
                      f"corral CPU {cpu:.3f} ms/conn", flush=True)

        print()
        print(f"Throughput, medians of {args.rounds} rounds of {args.duration:g} s (MB = 10^6 bytes); ratio = X / PLAINTEXT, per round in ()")
        for other in THROUGHPUT[1:]:
            print(f"{'':34} {'PLAINTEXT':>10} {other:>10} {'ratio':>8}")
            for key, values in rows.items():
                print(ratio_line(key, values, "PLAINTEXT", other, "10.1f" if "MB/s" in key else "10.2f"))
            print()
        print(f"Connection setup (connect until ApiVersions answered), {args.connections} connections one at a time per round, "
              "medians of rounds; ratio = p50 / PLAINTEXT p50, per round in ()")
        print(f"{'':30} {'p50 ms':>8} {'p99 ms':>8} {'conn/s':>8} {'corral CPU ms/conn':>19} {'p50 ratio':>10}")
        for label in labels:
            ratios = [x / b for x, b in zip(setup["p50 ms"][label], setup["p50 ms"]["PLAINTEXT"])]
            per = ", ".join(f"{r:.1f}" for r in ratios)
            print(f"{label:30} {statistics.median(setup['p50 ms'][label]):8.3f} {statistics.median(setup['p99 ms'][label]):8.3f} "
                  f"{statistics.median(setup['conn/s'][label]):8.1f} {statistics.median(setup['CPU ms/conn'][label]):19.3f} "
                  f"{statistics.median(ratios):10.1f}  ({per})")
    finally:
        if proc is not None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        # Gigabytes of produced data: never left behind, whatever ended the run.
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
