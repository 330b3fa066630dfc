"""A client program run as a long-lived process that prints one JSON event per line (the Java
and franz-go `member` subcommands): its events, read on a thread, and its stop."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path


class EventProcess:
    """`argv` started with its stderr in `stderr_path`; every event it printed, in order, each a
    JSON object with an "event" key. Closing its stdin asks it to finish."""

    def __init__(self, name: str, argv: list[str], stderr_path: Path):
        self.name = name
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.lock:
                self.events.append(event)

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]

    def describe(self, leave_out: tuple[str, ...] = ()) -> str:
        with self.lock:
            events = [e for e in self.events if e["event"] not in leave_out]
        return f"member {self.name} (running: {self.proc.poll() is None}) events {events[-12:]}; stderr: {self.stderr_path.read_text(errors='replace')[-3000:]}"

    def close(self) -> None:
        """Closes stdin: the process finishes, prints `closed` and exits 0."""
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        self.reader.join(10)
        assert rc == 0 and self.of("closed"), self.describe()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


class Started:
    """The processes a test started, killed at its end if still running (the body of a fixture)."""

    def __init__(self, kind: type[EventProcess]):
        self.kind = kind
        self.started: list[EventProcess] = []

    def __call__(self, *args, **kwargs) -> EventProcess:
        process = self.kind(*args, **kwargs)
        self.started.append(process)
        return process

    def cleanup(self) -> None:
        for process in self.started:
            process.cleanup()
