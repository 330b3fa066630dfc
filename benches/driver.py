"""What the Python benchmark drivers share: a free port, running corral-bench, reading its
throughput and CPU lines, a CA and server certificate for TLS listeners."""

import re
import socket
import subprocess
import sys
from pathlib import Path


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


def cpu_per_gb(text: str) -> float:
    """corral's CPU seconds (user + system) per GB of the timed run, as corral-bench prints it."""
    m = re.search(r"server CPU per GB: ([\d.]+) s user \+ ([\d.]+) s system", text)
    return float(m.group(1)) + float(m.group(2)) if m else float("nan")


def make_certificates(directory: Path) -> None:
    """ca.crt, server.crt and server.key in `directory`: a trustme CA and a certificate it signed
    for 127.0.0.1."""
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    server.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    server.private_key_pem.write_to_path(str(directory / "server.key"))
