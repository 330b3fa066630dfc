#!/usr/bin/env python3
"""What a TLS listener costs with kernel TLS (kTLS) and with rustls, against plaintext, in one run:

    bash scripts/uml.sh && cargo build --release --bins
    .venv/bin/python benches/kernel_tls.py [--rounds 5] [--duration 3]

This machine's kernel has no kTLS, so the benchmark runs inside a User-mode Linux guest whose
kernel has it (tests/e2e/uml.py boots it; scripts/uml.sh installs it). In the guest, two release
nodes run: `kernel`, with a PLAINTEXT and an SSL listener and `tls.ktls = true`, and `rustls`,
the same with `tls.ktls = false`. Each round, in an order rotated every round, corral-bench
measures over PLAINTEXT (of the `kernel` node), SSL with kTLS and SSL with rustls:
- fetch: one connection reads one partition filled once (128 MiB, in the page cache) in 1 MiB
  fetches; kTLS sends it with sendfile(2), rustls reads and encrypts it;
- produce: 1 KiB records in 1000-record batches, acks=1, 2 connections x 4 in flight;
with the node's CPU seconds per GB. Prints the medians and the ratios to PLAINTEXT per round.

The guest is one CPU, its system calls cost more than on the host (UML catches each one), and
its kernel encrypts AES-GCM with generic C code (no AES-NI: UML has no x86 crypto drivers),
while rustls (ring) uses AES-NI in both places. The ratios are this guest's, not a real
kernel's; they show the shape of the trade.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from driver import bench, cpu_per_gb, make_certificates, mbps

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from uml import run_guest  # noqa: E402

FETCH_TOPIC = "ktls-fetch"
# Label -> (node, listener, TLS).
PATHS = {"PLAINTEXT": ("kernel", "PLAINTEXT", False), "SSL kTLS": ("kernel", "SSL", True), "SSL rustls": ("rustls", "SSL", True)}
PORTS = {"kernel": (9092, 9093, 9095), "rustls": (9192, 9193, 9195)}


def start_node(args, work: Path, name: str) -> subprocess.Popen:
    plaintext, ssl, admin = PORTS[name]
    config = f"""
[kafka]
listen = "127.0.0.1:{plaintext}"
listeners = [{{ name = "SSL", protocol = "SSL", listen = "127.0.0.1:{ssl}" }}]
[tls]
cert_file = "{work / 'server.crt'}"
key_file = "{work / 'server.key'}"
ktls = {'true' if name == 'kernel' else 'false'}
[admin]
listen = "127.0.0.1:{admin}"
"""
    (work / f"{name}.toml").write_text(config)
    log = open(work / f"{name}.log", "wb")
    proc = subprocess.Popen([args.corral, "serve", "--data-dir", str(work / f"data-{name}"), "--config", str(work / f"{name}.toml")],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{admin}/health/ready", timeout=1)
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"node {name} not ready:\n{(work / f'{name}.log').read_text()[-3000:]}")
            time.sleep(0.2)


def encryption_counts(name: str) -> str:
    text = urllib.request.urlopen(f"http://127.0.0.1:{PORTS[name][2]}/metrics").read().decode()
    return ", ".join(line for line in text.splitlines() if line.startswith("corral_tls_connections_total"))


def gcm_drivers() -> str:
    """The guest kernel's AES-GCM implementations, as /proc/crypto names them."""
    drivers, name = [], None
    for line in Path("/proc/crypto").read_text().splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "name":
            name = value
        elif key == "driver" and name == "gcm(aes)":
            drivers.append(value)
    return ", ".join(drivers) or "none loaded"


def in_guest(args) -> None:
    print(f"guest kernel {os.uname().release}, {os.cpu_count()} CPU; tcp_available_ulp: "
          f"{Path('/proc/sys/net/ipv4/tcp_available_ulp').read_text().strip()!r}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="corral-ktls-bench-", dir=args.scratch))
    nodes = {}
    try:
        make_certificates(work)
        for name in PORTS:
            nodes[name] = start_node(args, work, name)
        for name in PORTS:
            bench(args, "produce", "--bootstrap", f"127.0.0.1:{PORTS[name][0]}", "--topic", FETCH_TOPIC, "--create", "1",
                  "--bytes", str(args.fetch_mib << 20))
        rows = {k: {label: [] for label in PATHS} for k in ("fetch MB/s", "fetch CPU s/GB", "produce MB/s", "produce CPU s/GB")}
        labels = list(PATHS)
        for rnd in range(args.rounds):
            for label in labels[rnd % len(labels):] + labels[: rnd % len(labels)]:
                node, listener, tls = PATHS[label]
                port = PORTS[node][0] if listener == "PLAINTEXT" else PORTS[node][1]
                sec = ["--tls-ca-file", str(work / "ca.crt")] if tls else []
                pid = str(nodes[node].pid)
                out = bench(args, "fetch", "--bootstrap", f"127.0.0.1:{port}", "--topic", FETCH_TOPIC, "--no-warm-pass", "--warmup", "0.5",
                            "--duration", str(args.duration), "--reps", "1", "--server-pid", pid, *sec)
                f, fc = mbps(out), cpu_per_gb(out)
                out = bench(args, "produce", "--bootstrap", f"127.0.0.1:{port}", "--topic", f"ktls-produce-{rnd}-{label.replace(' ', '-')}",
                            "--create", "2", "--connections", "2", "--in-flight", "4", "--acks", "1", "--warmup", "0.5",
                            "--duration", str(args.duration), "--reps", "1", "--server-pid", pid, *sec)
                p, pc = mbps(out), cpu_per_gb(out)
                for key, value in (("fetch MB/s", f), ("fetch CPU s/GB", fc), ("produce MB/s", p), ("produce CPU s/GB", pc)):
                    rows[key][label].append(value)
                print(f"round {rnd + 1} {label:10}: fetch {f:7.1f} MB/s ({fc:.2f} CPU s/GB)  produce {p:7.1f} MB/s ({pc:.2f} CPU s/GB)",
                      flush=True)
        for name in PORTS:
            print(f"node {name}: {encryption_counts(name)}")
        print(f"the guest kernel's gcm(aes): {gcm_drivers()}")
        print()
        print(f"Medians of {args.rounds} rounds of {args.duration:g} s (MB = 10^6 bytes); ratio = X / PLAINTEXT, per round in ()")
        print(f"{'':18} {'PLAINTEXT':>10} {'SSL kTLS':>10} {'ratio':>7} {'SSL rustls':>11} {'ratio':>7}")
        for key, values in rows.items():
            fmt = "10.1f" if "MB/s" in key else "10.2f"
            cells = [f"{key:18} {statistics.median(values['PLAINTEXT']):{fmt}}"]
            per = []
            for label in ("SSL kTLS", "SSL rustls"):
                ratios = [x / b for x, b in zip(values[label], values["PLAINTEXT"])]
                cells.append(f"{statistics.median(values[label]):{fmt}} {statistics.median(ratios):7.3f}")
                per.append(f"{label}: " + ", ".join(f"{r:.3f}" for r in ratios))
            print(" ".join(cells) + "   (" + "; ".join(per) + ")")
    finally:
        for proc in nodes.values():
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corral", default=str(REPO / "target" / "release" / "corral"))
    ap.add_argument("--bench", default=str(REPO / "target" / "release" / "corral-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--fetch-mib", type=int, default=128)
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_guest:
        in_guest(args)
        return
    print(f"host kernel {os.uname().release}; tcp_available_ulp: "
          f"{Path('/proc/sys/net/ipv4/tcp_available_ulp').read_text().strip()!r}: booting a UML guest with kTLS", flush=True)
    work = Path(tempfile.mkdtemp(prefix="corral-ktls-guest-"))
    try:
        command = [sys.executable, str(Path(__file__).resolve()), "--in-guest", "--corral", args.corral, "--bench", args.bench,
                   "--rounds", str(args.rounds), "--duration", str(args.duration), "--fetch-mib", str(args.fetch_mib),
                   "--scratch", str(work)]
        # The guest's own /tmp is the host's: the scratch directory is made under `work`.
        run = run_guest(" ".join(command) + "\n", work, timeout=3600, memory="2G")
        print(run.output, end="")
        if run.returncode != 0:
            raise SystemExit(f"the benchmark failed in the guest (exit {run.returncode})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
