"""What the Python benchmark drivers share: a free port, running corral-bench, reading its
throughput line."""

import re
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench(args, *argv) -> str:
    """Runs `args.bench` (corral-bench) with `argv`; exits with its output if it fails."""
    out = subprocess.run([args.bench, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"corral-bench {' '.join(argv)} failed:\n{out.stdout}{out.stderr}")
    return out.stdout


def mbps(text: str) -> float:
    """The median MB/s corral-bench printed."""
    return float(re.search(r"median ([\d.]+) MB/s", text).group(1))
