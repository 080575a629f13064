"""A submitted job, seen from the submitting command: sbatch, its state, its log, scancel.

:func:`watch` follows the job until it ends: it tails the job log (every line prefixed with
its node rank by ``srun --label``), echoes status lines (``Step N | ...``, ``waiting for
...``) and prl's own messages, says when the job starts running and where, and returns the
job's exit code. A failure is said with the node that failed (rank and host), the
component and its last log lines, as the node's local supervisor printed them. Ctrl-C (or
SIGTERM) cancels the job with ``scancel`` and returns 128 + the signal.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prl.config.errors import HostError

STATUS = re.compile(r"\bStep \d+ \||\bwaiting for ")
LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
HOSTS = re.compile(r"^prl: job \S+ on (\S+)")
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
POLL_S = 1.0
Announce = Callable[[str], "str | None"]


def submit(script: Path) -> str:
    """``sbatch --parsable script``; the job id, or a one-line error with sbatch's reason."""
    try:
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostError(f"sbatch {script}: {exc}") from None
    if out.returncode != 0:
        reason = (out.stderr or out.stdout).strip().splitlines()
        raise HostError(f"sbatch refused {script}: {reason[-1] if reason else f'exit {out.returncode}'}")
    return out.stdout.strip().split(";")[0]


def state(job_id: str) -> tuple[str, int | None, str]:
    """(JobState, exit code or None, node list) from scontrol, or sacct once the controller
    has forgotten the job; ("UNKNOWN", None, "") when neither knows it."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    if out.returncode == 0 and "JobState=" in out.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", out.stdout))
        return fields["JobState"], _exit(fields.get("ExitCode")), fields.get("NodeList", "")
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,NodeList"], capture_output=True, text=True
    )
    line = out.stdout.strip().splitlines()[:1] if out.returncode == 0 else []
    if line and line[0].count("|") == 2:
        st, code, nodes = line[0].split("|")
        return st.split()[0], _exit(code), nodes
    return "UNKNOWN", None, ""


def _exit(code: str | None) -> int | None:
    """``ExitCode=2:0`` is exit status 2; ``0:9`` is killed by signal 9 (128 + 9)."""
    if not code or ":" not in code:
        return None
    status, sig = (int(x) for x in code.split(":")[:2])
    return status or (128 + sig if sig else 0)


def cancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True)


class LogFollower:
    """Reads new lines of the job log and says what matters on the console."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.hosts: list[str] = []
        self._in_report = False
        self._partial = b""

    def node(self, rank: int) -> str:
        host = self.hosts[rank] if rank < len(self.hosts) else "?"
        return f"node {rank} ({host})"

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for raw in lines:
            self._line(raw.decode(errors="replace"))

    def _line(self, line: str) -> None:
        m = LABEL.match(line)
        rank, text = (int(m.group(1)), m.group(2)) if m else (None, line)
        hosts = HOSTS.match(text)
        if hosts:
            self.hosts = hosts.group(1).split(",")
            return
        if text.startswith("prl: "):
            # The node's supervisor says what failed; name the node in front of it.
            where = f"{self.node(rank)}: " if rank is not None else ""
            print(f"prl: {where}{text[5:]}", file=sys.stderr, flush=True)
            self._in_report = True
        elif self._in_report and text.startswith("    "):
            print(text, file=sys.stderr, flush=True)
        else:
            self._in_report = False
            if STATUS.search(text):  # the node's supervisor already put the component first
                prefix = f"{self.node(rank)}: " if rank is not None and len(self.hosts) > 1 else ""
                print(prefix + text, flush=True)


def watch(job_id: str, log_path: Path, poll_s: float = POLL_S, announce: Announce | None = None) -> int:
    """Follow the job to its end (see the module docstring); its exit code. ``announce``,
    called with the job's node list while it runs, returns a line to print once (a server
    job's address, when it serves) or None to be asked again."""
    follower = LogFollower(log_path)
    caught: list[int] = []
    restore = _catch_signals(caught)
    said_running = False
    try:
        while True:
            follower.poll()
            if caught:
                return _cancelled(job_id, caught[0], follower)
            st, code, nodes = state(job_id)
            if st == "RUNNING" and not said_running:
                said_running = True
                print(f"prl: SLURM job {job_id} is running on {nodes}", flush=True)
            if st == "RUNNING" and announce is not None:
                line = announce(nodes)
                if line is not None:
                    print(line, flush=True)
                    announce = None
            if st in ENDED or st == "UNKNOWN":
                time.sleep(0.5)  # the last lines reach the shared log a moment later
                follower.poll()
                return _ended(job_id, st, code, log_path)
            time.sleep(poll_s)
    finally:
        restore()


def _ended(job_id: str, st: str, code: int | None, log_path: Path) -> int:
    if st == "COMPLETED":
        print(f"prl: SLURM job {job_id} completed", flush=True)
        return 0
    code = code or 1
    print(f"prl: SLURM job {job_id} ended {st} (exit code {code}); job log: {log_path}", file=sys.stderr, flush=True)
    return code


def _cancelled(job_id: str, sig: int, follower: LogFollower) -> int:
    print(f"prl: {signal.Signals(sig).name} received; cancelling SLURM job {job_id} (scancel)", file=sys.stderr)
    cancel(job_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and state(job_id)[0] not in ENDED | {"UNKNOWN"}:
        follower.poll()
        time.sleep(0.5)
    print(f"prl: SLURM job {job_id} cancelled", file=sys.stderr, flush=True)
    return 128 + sig


def _catch_signals(caught: list[int]):
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: caught.append(signum))

    def restore():
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
