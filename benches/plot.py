"""Plot the scaling part of a benchmark suite's results (corral vs Tansu) as one PNG.

    python benches/plot.py benchmarks/results.json benchmarks/scaling.png

Reads the top-level "scaling" object of the results JSON (written by `corral-bench all`) and
draws three side-by-side panels, one line per server:
  1. consumer group formation time (ms) vs members,
  2. heartbeats per second vs groups,
  3. server RSS (MB) vs groups, with the committed partitions in the x tick labels.
A null value (peer not run, or the scenario failed) is left out; a panel with no data says so.
The suptitle names the machine ("machine": {"cpu", "nproc"}) and "date" when present.
"""

import datetime
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

SERVERS = [("corral", "tab:blue", "o"), ("kafka", "tab:green", "^"), ("tansu", "tab:orange", "s")]


def points(rows, x_key, y_key, scale=1.0):
    """(x, y) pairs of rows where both values are present, sorted by x."""
    pts = [(r.get(x_key), r.get(y_key)) for r in rows]
    return sorted((x, y * scale) for x, y in pts if x is not None and y is not None)


def panel(ax, rows, x_key, y_key, title, xlabel, ylabel, scale=1.0, tick_label=None):
    """Draws one panel: a line per server over rows[x_key] (log scale) against rows[y_key]."""
    drawn = set()  # x values with at least one point
    for name, color, marker in SERVERS:
        pts = points(rows, x_key, f"{name}_{y_key}", scale)
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker=marker, color=color, label=name)
            drawn.update(xs)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    # Tick exactly at the measured x values, labelled in full (not as powers of ten).
    xs = sorted(drawn)
    ax.set_xticks(xs)
    ax.set_xticklabels([tick_label(x) if tick_label else f"{x:,}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.legend()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT.png")
    with open(sys.argv[1]) as f:
        results = json.load(f)
    scaling = results.get("scaling") or {}
    if not scaling:
        print(f"plot.py: no \"scaling\" results in {sys.argv[1]}", file=sys.stderr)

    memory = scaling.get("memory") or []
    partitions = {r["groups"]: r.get("committed_partitions") for r in memory if r.get("groups") is not None}

    def memory_tick(groups):
        parts = partitions.get(groups)
        return f"{groups:,}" if parts is None else f"{groups:,}\n({parts:,} parts)"

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    panel(axes[0], scaling.get("formation") or [], "members", "ms",
          "Group formation time", "members in one group", "time to form (ms)")
    panel(axes[1], scaling.get("heartbeats") or [], "groups", "per_sec",
          "Heartbeat throughput", "groups", "heartbeats/s")
    panel(axes[2], memory, "groups", "rss_kb",
          "Server memory", "groups (committed partitions)", "server RSS (MB)",
          scale=1 / 1024, tick_label=memory_tick)

    title = "corral vs Tansu: consumer group scaling"
    machine = results.get("machine") or {}
    about = [str(machine["cpu"])] if machine.get("cpu") else []
    if machine.get("nproc"):
        about.append(f"{machine['nproc']} CPUs")
    if results.get("date"):
        date = str(results["date"])
        if date.startswith("unix "):  # results files written before dates were ISO 8601
            date = datetime.datetime.fromtimestamp(int(date[5:]), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        about.append(date)
    if about:
        title += "\n" + ", ".join(about)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"plot.py: wrote {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
