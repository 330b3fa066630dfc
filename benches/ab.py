#!/usr/bin/env python3
"""Before/after comparison of two corral servers in one run, alternating.

    python3 benches/ab.py --base OLD/target/release/corral --cand NEW/target/release/corral \
        --bench NEW/target/release/corral-bench --rounds 10

Every round starts both servers afresh (own temporary data directory, own ports, CORRAL_LOG=warn,
the same config), fills a partition of each for the fetch scenario, then runs every scenario
against the two back to back, the order swapped from one round to the next. The same load
generator (`--bench`) drives both. This machine's speed drifts by more than the differences
looked for, so only ratios taken within a round are compared: the table gives each side's median,
the median of the per-round candidate/base ratios and their min-max. The side that goes second
can be systematically faster or slower (produce is), so the
last column pairs each base-first round with the cand-first round after it (geometric mean of the
two ratios), which cancels such an order effect. Standard library only.
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

# The groups suite's [groups] settings (benches/bench/groups_suite.rs): a 1 s initial delay
# instead of 3 s, so the idle groups form quickly. Both servers get this file, nothing else.
CONFIG = "[groups]\ninitial_rebalance_delay_ms = 1000\nconsumer_heartbeat_interval_ms = 100\nconsumer_session_timeout_ms = 30000\n"

# (key, label, unit, higher is better)
METRICS = [
    ("produce_mbps", "produce 1 KiB records, acks=1, 4 conns x 4 partitions", "MB/s", True),
    ("produce_cpu_gb", "  server CPU per GB produced", "s/GB", False),
    ("fetch_mbps", "fetch 1 MiB, sendfile", "MB/s", True),
    ("fetch_cpu_gb", "  server CPU per GB fetched", "s/GB", False),
    ("hb_per_sec", "heartbeat storm", "heartbeats/s", True),
    ("hb_per_cpu", "  heartbeats per server CPU second", "/CPU s", True),
    ("commits_per_sec", "offset commits, 10 partitions each", "commits/s", True),
    ("commits_per_cpu", "  commits per server CPU second", "/CPU s", True),
]

servers = []  # live Popen objects, stopped on any exit
scratch = []  # temporary directories, removed on any exit


def on_signal(signum, _frame):
    # SIGTERM would otherwise skip the finally blocks; turn it into the same path as Ctrl-C.
    raise KeyboardInterrupt


def die_with_parent():
    # PR_SET_PDEATHSIG: a server gets SIGKILL if this script is killed with -9.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, binary, work, extra_config=""):
        self.name, self.dir = name, tempfile.mkdtemp(prefix=f"{name}-", dir=work)
        cfg = os.path.join(self.dir, "corral.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG + extra_config.replace("\\n", "\n"))
        kafka, admin = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{kafka}"
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        env = dict(os.environ, CORRAL_LOG="warn")
        args = [binary, "serve", "--data-dir", os.path.join(self.dir, "data"), "--listen", self.bootstrap,
                "--admin-listen", f"127.0.0.1:{admin}", "--config", cfg]
        # Own session: Ctrl-C reaches only this script, which then stops the servers itself.
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)
        servers.append(self.proc)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"{name} server exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit(f"{name} server not ready after 60 s; log: {self.log.name}")
            time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        servers.remove(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench(args, *argv):
    out = subprocess.run([args.bench, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"corral-bench {' '.join(argv)} failed:\n{out.stdout}{out.stderr}")
    return out.stdout


def mbps_and_cpu(text):
    # produce/fetch print "median X MB/s" and, with --server-pid, "server CPU per GB: U s user + S s system".
    mbps = float(re.search(r"median ([\d.]+) MB/s", text).group(1))
    cpu = re.search(r"server CPU per GB: ([\d.]+) s user \+ ([\d.]+) s system", text)
    return mbps, (float(cpu.group(1)) + float(cpu.group(2))) if cpu else float("nan")


def produce(args, s, rnd):
    text = bench(args, "produce", "--bootstrap", s.bootstrap, "--topic", f"ab-produce-{rnd}", "--create", "4",
                 "--connections", "4", "--in-flight", "4", "--acks", "1", "--warmup", "1",
                 "--duration", str(args.duration), "--reps", "1", "--server-pid", str(s.proc.pid))
    # Write back what was produced before the next run, so that no run pays for another's writeback.
    os.sync()
    mbps, cpu = mbps_and_cpu(text)
    return {"produce_mbps": mbps, "produce_cpu_gb": cpu}


def fetch(args, s, _rnd):
    text = bench(args, "fetch", "--bootstrap", s.bootstrap, "--topic", "ab-fetch", "--warmup", "0.5",
                 "--duration", str(args.duration), "--reps", "1", "--server-pid", str(s.proc.pid))
    mbps, cpu = mbps_and_cpu(text)
    return {"fetch_mbps": mbps, "fetch_cpu_gb": cpu}


def groups(args, s, _rnd):
    # One invocation forms the idle groups, then runs the heartbeat storm and the offset commits.
    out = os.path.join(s.dir, "groups.json")
    bench(args, "groups", "load", "--bootstrap", s.bootstrap, "--server-pid", str(s.proc.pid), "--shards", "2",
          "--idle-groups", str(args.groups), "--idle-members", "5", "--groups-per-wave", "500",
          "--committers", str(args.groups), "--load-reps", "1", "--warmup", "1", "--duration", str(args.duration),
          "--json", out)
    with open(out) as f:
        r = json.load(f)
    hb, c = r["heartbeat_storm"][0], r["commits"][0]
    if hb["errors"] or c["errors"]:
        print(f"    {s.name}: errors: heartbeats {hb['errors']}, commits {c['errors']}", flush=True)
    return {"hb_per_sec": hb["per_sec"], "hb_per_cpu": hb["per_server_cpu_sec"],
            "commits_per_sec": c["commits_per_sec"], "commits_per_cpu": c["commits"] / sum(c["server_cpu"])}


SCENARIOS = {"produce": produce, "fetch": fetch, "groups": groups}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="corral binary before the change")
    p.add_argument("--cand", required=True, help="corral binary after the change")
    p.add_argument("--bench", required=True, help="corral-bench binary driving both")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--duration", type=float, default=4.0, help="seconds measured per run")
    p.add_argument("--fetch-bytes", default="512MiB", help="size of the partition the fetch scenario reads")
    p.add_argument("--groups", type=int, default=1000, help="idle groups of 5 members (and as many committers)")
    p.add_argument("--work-dir", default=tempfile.gettempdir(), help="on the disk to measure, not a tmpfs")
    p.add_argument("--base-config", default="", help="TOML appended to the base's config (e.g. '[admin]\\nmetrics = false\\n')")
    p.add_argument("--cand-config", default="", help="TOML appended to the candidate's config")
    p.add_argument("--scenarios", default="produce,fetch,groups",
                   help="comma-separated subset of produce, fetch, groups (groups: heartbeats and commits)")
    args = p.parse_args()
    chosen = [SCENARIOS[name] for name in args.scenarios.split(",")]
    signal.signal(signal.SIGTERM, on_signal)
    work = tempfile.mkdtemp(prefix="corral-ab-", dir=args.work_dir)
    scratch.append(work)
    started, load0 = time.time(), os.getloadavg()[0]
    rounds = []  # per round: {"base": {metric: value}, "cand": {...}}
    try:
        for rnd in range(1, args.rounds + 1):
            # Swap which side goes first every round, so a drift in the machine's speed does not
            # favour one side.
            order = ["base", "cand"] if rnd % 2 else ["cand", "base"]
            live = {n: Server(n, getattr(args, n), work, getattr(args, f"{n}_config")) for n in order}
            if fetch in chosen:
                for s in live.values():
                    # Untimed: the partition the fetch scenario reads (and re-reads from its start).
                    bench(args, "produce", "--bootstrap", s.bootstrap, "--topic", "ab-fetch", "--create", "1",
                          "--connections", "1", "--bytes", args.fetch_bytes)
            os.sync()
            result = {n: {} for n in order}
            for scenario in chosen:
                for n in order:
                    result[n].update(scenario(args, live[n], rnd))
            for s in live.values():
                s.stop()
            rounds.append(result)
            print(f"round {rnd}/{args.rounds} ({' first, '.join(order)} second, {time.time() - started:.0f} s, "
                  f"load {os.getloadavg()[0]:.2f}): " +
                  ", ".join(f"{k} {result['cand'][k] / result['base'][k]:.3f}" for k in result["cand"]), flush=True)
    except KeyboardInterrupt:
        sys.exit("interrupted; servers stopped, scratch data removed")
    finally:
        for proc in list(servers):
            proc.kill()
            proc.wait()
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)
    report(args, rounds, time.time() - started, load0)


def report(args, rounds, seconds, load0):
    print(f"\n{len(rounds)} rounds in {seconds:.0f} s; load average (1 min) {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end; ratio = candidate / base (> 1: candidate higher)\n")
    print("| scenario | unit | base median | candidate median | median ratio | per-round ratios, min–max "
          "| both orders: pairs of rounds, median (min–max) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    measured = [m for m in METRICS if m[0] in rounds[0]["base"]] if rounds else []
    for key, label, unit, _higher in measured:
        base = [r["base"][key] for r in rounds]
        cand = [r["cand"][key] for r in rounds]
        ratios = [c / b for b, c in zip(base, cand)]
        pairs = [math.sqrt(ratios[i] * ratios[i + 1]) for i in range(0, len(ratios) - 1, 2)]
        both = f"{statistics.median(pairs):.3f} ({min(pairs):.3f}–{max(pairs):.3f})" if pairs else "–"
        digits = 3 if unit == "s/GB" else 0 if unit != "MB/s" else 1
        print(f"| {label.strip()} | {unit} | {statistics.median(base):,.{digits}f} | {statistics.median(cand):,.{digits}f} "
              f"| {statistics.median(ratios):.3f} | {min(ratios):.3f}–{max(ratios):.3f} | {both} |")
    print("\nper-round ratios:")
    for key, *_ in measured:
        print(f"  {key:<16} " + " ".join(f"{r['cand'][key] / r['base'][key]:.3f}" for r in rounds))


if __name__ == "__main__":
    main()
