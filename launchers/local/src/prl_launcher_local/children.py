"""One supervised child process: its own process group, output pumped into its log file.

A reader thread copies the child's combined stdout/stderr line by line into ``log_path``
(append mode, flushed per line), keeps the last lines for error reports, and echoes status
lines (``Step N | ...``) and watchdog reports (``waiting for ...``) to the console with the
child's name in front.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from prl.contracts.launcher import ProcessSpec
from prl.procs import stop_processes

# Step lines, and the stall watchdog's reports ("watchdog: ...", "waiting for ..."): a
# stalled run must say on the console what it waits on, not only in a log file.
STATUS = re.compile(rb"\bStep \d+ \||\bwatchdog: |\bwaiting for ")
TAIL_LINES = 30


class Child:
    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.proc: subprocess.Popen | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._thread: threading.Thread | None = None
        self._log = None

    @property
    def health_url(self) -> str | None:
        return self.spec.health_url

    @property
    def is_server(self) -> bool:
        return self.spec.service

    def start(self) -> None:
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.spec.ready_file is not None:
            Path(self.spec.ready_file).unlink(missing_ok=True)
        self._log = open(self.spec.log_path, "ab")  # noqa: SIM115 - closed in join()
        self.proc = subprocess.Popen(
            self.spec.argv,
            env={**os.environ, **self.spec.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: signals reach its children too
        )
        self._thread = threading.Thread(target=self._pump, name=f"log-{self.name}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self._log.write(line)
            self._log.flush()
            text = line.decode(errors="replace").rstrip("\n")
            self.tail.append(text)
            if STATUS.search(line):
                print(f"[{self.name}] {text[STATUS.search(line).start() :]}", flush=True)

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group (its own children too)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int | None:
        return None if self.proc is None else self.proc.wait(timeout)

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def last_line(self) -> str:
        """The last non-empty line the child printed (its one-line error, for a usage error)."""
        return next((line for line in reversed(self.tail) if line.strip()), "(no output)")

    def last_lines(self, n: int = 20) -> str:
        lines = list(self.tail)[-n:]
        return "\n".join(f"    {line}" for line in lines) if lines else "    (no output)"

    # ---- readiness --------------------------------------------------------------------
    def ready(self) -> bool:
        """Health URL answers 200, or the ready file exists (and its URL answers)."""
        url = self.health_url
        ready_file = self.spec.ready_file
        if url is None and ready_file is not None:
            if not Path(ready_file).exists():
                return False
            content = Path(ready_file).read_text().strip()
            if not content.startswith("http"):
                return True
            url = content
        return url is not None and _healthy(url)

    def waiting_for(self) -> str:
        if self.health_url:
            return f"{self.name} at {self.health_url}"
        return f"{self.name} (ready file {self.spec.ready_file})"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=2.0) as resp:
            return resp.status == 200
    except Exception:  # noqa: BLE001 - any failure means not ready yet
        return False


def exit_code(code: int) -> int:
    """Popen's negative ``-signal`` as the shell's ``128 + signal``."""
    return 128 - code if code < 0 else code


def stop_all(children: list[Child], grace: float) -> None:
    """SIGTERM every running child (last started first), SIGKILL what is left after ``grace``
    (saying so), then close their logs."""

    def said(child: Child) -> None:
        print(f"prl: {child.name} did not stop within {grace:g}s of SIGTERM; killing it", file=sys.stderr)

    stop_processes(children, grace, on_kill=said)
    for child in children:
        child.join()
