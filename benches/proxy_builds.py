#!/usr/bin/env python3
"""Two or more corral builds in front of the same Apache Kafka broker, in one run: what a change
to the upstream path does to throughput and to corral's CPU per GB, each build against direct in
the same round (the order rotated every round, since the machine's speed drifts).

    cargo build --release --bins && cp target/release/corral /tmp/corral-after
    git stash && cargo build --release --bins && cp target/release/corral /tmp/corral-before && git stash pop
    .venv/bin/python benches/proxy_builds.py /tmp/corral-before /tmp/corral-after [--rounds 5] [--duration 4]

Each round, for Kafka directly and each build (a corral with `storage.backend = "upstream"`):
produce throughput and fetch throughput, the loads of benches/proxy_overhead.py, and the build's
CPU seconds per GB of each. Prints the medians and the per-round ratios to direct.
"""

import argparse
import statistics

from proxy_overhead import REPO, cpu_seconds, fetch_mbps, kafka_and_corrals, produce_mbps, rotated, start_corral, upstream_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="corral binaries")
    ap.add_argument("--bench", default=str(REPO / "target" / "release" / "corral-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4)
    args = ap.parse_args()

    with kafka_and_corrals(args, "corral-proxy-builds-", "builds-fetch") as (work, kafka, servers):
        for i, build in enumerate(args.builds):
            servers[f"build{i + 1}"] = start_corral(argparse.Namespace(corral=build), work / f"build{i + 1}", upstream_config(kafka.bootstrap))
        names = ["direct", *servers]
        keys = ("produce MB/s", "produce CPU s/GB", "fetch MB/s", "fetch CPU s/GB")
        rows = {k: {n: [] for n in names} for k in keys}
        for rnd in range(args.rounds):
            for name in rotated(names, rnd):
                bootstrap, proc = (kafka.bootstrap, None) if name == "direct" else (servers[name][1], servers[name][0])
                measured = []
                for load in (lambda: produce_mbps(args, bootstrap, f"builds-produce-{name}-{rnd}"), lambda: fetch_mbps(args, bootstrap, "builds-fetch")):
                    before = cpu_seconds(proc.pid) if proc else 0.0
                    mb_per_s = load()
                    cpu = (cpu_seconds(proc.pid) - before) / (mb_per_s * args.duration / 1000) if proc else 0.0
                    measured += [mb_per_s, cpu]
                for key, value in zip(keys, measured):
                    rows[key][name].append(value)
                print(f"round {rnd + 1} {name:7}: " + "  ".join(f"{k} {v:.2f}" for k, v in zip(keys, measured)), flush=True)
        print()
        for i, build in enumerate(args.builds):
            name = f"build{i + 1}"
            print(f"{name}: {build}")
            for key in ("produce MB/s", "fetch MB/s"):
                ratios = [b / d for b, d in zip(rows[key][name], rows[key]["direct"])]
                print(f"  {key:16} {statistics.median(rows[key][name]):9.1f}  of direct {statistics.median(ratios):.3f}  ({', '.join(f'{r:.2f}' for r in ratios)})")
            for key in ("produce CPU s/GB", "fetch CPU s/GB"):
                per = ", ".join(f"{v:.2f}" for v in rows[key][name])
                print(f"  {key:16} {statistics.median(rows[key][name]):9.2f}  ({per})")


if __name__ == "__main__":
    main()
