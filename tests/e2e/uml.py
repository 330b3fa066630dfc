"""A User-mode Linux guest whose kernel offers kernel TLS (kTLS), for tests/e2e/test_kernel_tls.py
and benches/kernel_tls.py.

The machines corral is tested on have no `tls` TCP upper-layer protocol in their kernel.
scripts/uml.sh installs a UML kernel (into .cache/uml) that has it: a kernel that boots as a
process of this machine, with this machine's file system as its root (hostfs). The guest runs the
same corral binary, Python venv and clients as the host, on its own kernel and network stack
(loopback only, so its ports never clash with the host's). A guest runs one shell script as it
boots, then powers off; the script's output and exit code come back.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UML = REPO / ".cache" / "uml"
# The kernel TLS module and the ciphers it may be asked for.
MODULES = ["tls", "gcm", "ctr", "chacha20poly1305"]


@dataclass
class GuestRun:
    returncode: int
    # What the script printed (stdout and stderr).
    output: str
    # The kernel's console, for a failure's message.
    console: str


def kernel() -> Path:
    path = UML / "linux"
    if not path.exists():
        raise RuntimeError(f"no UML kernel at {path}: run `bash scripts/uml.sh` (scripts/test.sh does)")
    return path


def run_guest(script: str, workdir: Path, timeout: float = 300, memory: str = "1G") -> GuestRun:
    """Boots a guest that runs `script` (sh) in `workdir` and powers off."""
    workdir.mkdir(parents=True, exist_ok=True)
    body = workdir / "guest-script.sh"
    output = workdir / "guest.out"
    code = workdir / "guest.rc"
    init = workdir / "guest-init.sh"
    for stale in (output, code):
        stale.unlink(missing_ok=True)
    body.write_text(script)
    modules = " ".join(MODULES)
    init.write_text(
        f"""#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /dev/shm
for m in {modules}; do modprobe -d {UML}/modules $m || echo "modprobe $m failed"; done
ip link set lo up
cd {workdir}
sh {body} > {output} 2>&1
echo $? > {code}
sync
poweroff -f
"""
    )
    init.chmod(0o755)
    command = [
        str(kernel()),
        f"mem={memory}",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "rw",
        f"init={init}",
        "con0=fd:0,fd:1",
        "con=null",
        f"uml_dir={workdir}",
        f"umid=corral-{os.getpid()}",
    ]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        console, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The kernel and its helper processes are one process group.
        os.killpg(process.pid, signal.SIGKILL)
        console, _ = process.communicate()
        raise AssertionError(
            f"the UML guest did not power off within {timeout} s; its script printed:\n"
            f"{output.read_text() if output.exists() else ''}\nconsole:\n{console.decode(errors='replace')[-4000:]}"
        ) from None
    console_text = console.decode(errors="replace")
    if not code.exists():
        raise AssertionError(f"the UML guest's script did not finish; console:\n{console_text[-4000:]}")
    return GuestRun(int(code.read_text().strip() or -1), output.read_text(errors="replace"), console_text)
