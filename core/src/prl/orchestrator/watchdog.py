"""The stall watchdog: when no step finishes in time, say once what the run waits on.

A thread of the orchestrator, because the orchestrator is the one process that sees every
other: the rollouts it has in flight (to inference, through env servers it spawned), the
batches it shipped, and the trainer's weight versions in the handshake markers of
``broadcasts/step_V`` (:mod:`prl.handshake`). A thread rather than an asyncio task so that
an orchestrator whose event loop is blocked is reported too.

Progress is any of: the trainer publishes a version (a step finished), inference loads
one, the orchestrator ships a batch. The run is stalled once nothing progressed for
``max(min_stall_s, factor x median of the last step times)`` (``first_step_s`` until a
step time is known). Then one line goes to the log (the launcher echoes it to the
console) and one time-keyed row to the monitors; another line only when the verdict
changes, and one ``resumed`` line once progress comes back.

The verdict, first match wins (each from a signal, never from a guess):

1. the orchestrator's event loop does not answer: the orchestrator;
2. inference does not answer ``/health``: inference at its URL;
3. the trainer published version V but the handshake stopped before ``.finished``: the
   trainer (no ``.receiver_ready`` yet: the orchestrator's acknowledgement);
4. episodes in flight: the env server of a source with episodes in flight that does not
   answer its health probe; else inference (it holds the requests, and answers slowly);
5. nothing in flight and batch S shipped but version S not published: the trainer on batch S;
6. else the orchestrator collecting its batch (with the filtered-groups hint when finished
   groups carry no learning signal).

Rows: ``watcher/stalled_s``, ``watcher/waiting_on`` (:data:`CODES`; 0 on the resumed
row), ``watcher/threshold_s``, ``watcher/pid`` (when known), all with ``step: null``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl import handshake, layout, procinfo
from prl.contracts.monitor import log_time_keyed
from prl.envs.protocol import ProtocolClient

if TYPE_CHECKING:
    from prl.config.watchdog import WatchdogConfig

log = logging.getLogger("prl.orchestrator")

CODES = {"inference": 1, "env_server": 2, "trainer": 3, "orchestrator": 4}
PROBE_S = 2.0
TICK_S = 1.0
RECENT_STEPS = 20


@dataclass
class Verdict:
    """What the run waits on: ``kind`` (a key of :data:`CODES`) and the words for it."""

    kind: str
    what: str
    pid: int | None = None
    log: str | None = None
    who: str = ""
    """The waited-on party in a few words (for the resumed line)."""

    def line(self) -> str:
        last = procinfo.last_line(self.log)
        return f"waiting for {self.what}" + (f"; last log line: {last!r}" if last else "")


class StallWatchdog:
    """Watches one orchestrator (see the module docstring); ``tick`` does one check."""

    def __init__(self, orch: Any, config: WatchdogConfig, loop: Any = None) -> None:
        """``orch``: the :class:`prl.orchestrator.loop.Orchestrator` to watch (read, never
        changed); ``loop``: its event loop, pinged each tick to tell a blocked one."""
        self.orch = orch
        self.config = config
        self.loop = loop
        self.log_dir = os.environ.get("PRL_ATTEMPT_LOG_DIR")
        self.broadcasts = Path(orch.run_dir) / "broadcasts"
        self._mark: tuple | None = None
        self._progress_at = time.monotonic()
        self._step_done_at: float | None = None
        self._step_times: list[float] = []
        self._said: str | None = None
        self._who: str | None = None
        self._stalled_since: float | None = None
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="stall-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_S * 3)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the watchdog must never take the run down
                log.exception("stall watchdog check failed")

    def _heartbeat(self) -> None:
        self._beat = time.monotonic()

    # ---- the check ------------------------------------------------------------------
    def threshold(self) -> float:
        """Seconds without progress that count as a stall."""
        if not self._step_times:
            return max(self.config.min_stall_s, self.config.first_step_s)
        median = statistics.median(self._step_times[-RECENT_STEPS:])
        return max(self.config.min_stall_s, self.config.factor * median)

    def tick(self, now: float | None = None) -> Verdict | None:
        """One check: note progress, or report a stall; returns the verdict it reported."""
        now = time.monotonic() if now is None else now
        if self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(self._heartbeat)
            except RuntimeError:  # the loop closed under us: the orchestrator is ending
                return None
        loaded = self.orch.follower.version if self.orch.follower else None
        published = self._published()
        # A step finished: the trainer published its version (the loaded one where the
        # weight transport leaves no handshake markers).
        trained = published if published is not None else loaded
        mark = (trained, loaded, self.orch.step)
        if mark != self._mark:
            if self._stalled_since is not None:
                self._resumed(now)
            if self._mark is not None and trained is not None and trained != self._mark[0]:
                self._step_finished(now)
            self._mark, self._progress_at = mark, now
            return None
        waited = now - self._progress_at
        if waited < self.threshold():
            return None
        verdict = self.diagnose(now)
        if verdict.what != self._said:
            self._report(verdict, waited)
        return verdict

    def _step_finished(self, now: float) -> None:
        if self._step_done_at is not None:
            self._step_times.append(now - self._step_done_at)
            del self._step_times[:-RECENT_STEPS]
        self._step_done_at = now

    def _report(self, verdict: Verdict, waited: float) -> None:
        if self._stalled_since is None:
            self._stalled_since = self._progress_at  # the stall began at the last progress
        self._said, self._who = verdict.what, verdict.who
        threshold = self.threshold()
        how = f"threshold {threshold:.0f} s"
        if self._step_times:
            median = statistics.median(self._step_times[-RECENT_STEPS:])
            how += f" = max({self.config.min_stall_s:g} s, {self.config.factor:g} x median step {median:.1f} s)"
        log.warning("watchdog: no step for %.0f s (%s): %s", waited, how, verdict.line())
        row = {"watcher/stalled_s": waited, "watcher/waiting_on": float(CODES[verdict.kind])}
        row["watcher/threshold_s"] = threshold
        if verdict.pid:
            row["watcher/pid"] = float(verdict.pid)
        self._log_row(row)

    def _resumed(self, now: float) -> None:
        stalled = now - self._stalled_since if self._stalled_since is not None else 0.0
        log.warning("watchdog: resumed after %.0f s stalled (was waiting for %s)", stalled, self._who)
        self._log_row({"watcher/stalled_s": stalled, "watcher/waiting_on": 0.0})
        self._stalled_since, self._said = None, None
        # The step that spanned the stall says nothing about the run's pace: drop it.
        self._step_done_at = None

    def _log_row(self, row: dict[str, float]) -> None:
        log_time_keyed(self.orch.monitors, row, "watchdog", log)

    # ---- signals --------------------------------------------------------------------
    def _published(self) -> int | None:
        """The newest version the trainer published (``.sender_ready``), None without markers."""
        done = [v for v in handshake.steps(self.broadcasts) if self._marker(v, handshake.SENDER)]
        return done[-1] if done else None

    def _marker(self, version: int, name: str) -> bool:
        return (layout.step_dir(self.broadcasts, version) / name).exists()

    def _process(self, name: str) -> tuple[int | None, str | None]:
        row = procinfo.read(self.log_dir).get(name) or {}
        return row.get("pid"), row.get("log")

    def diagnose(self, now: float | None = None) -> Verdict:
        """What the run waits on now (the order of the module docstring)."""
        now = time.monotonic() if now is None else now
        orch = self.orch
        if self.loop is not None and now - self._beat > max(10.0, 5 * TICK_S):
            blocked = f"its event loop has not run for {now - self._beat:.0f} s"
            return _verdict("orchestrator", "the orchestrator", blocked, os.getpid())
        verdict = self._inference() or self._handover()
        if verdict is not None:
            return verdict
        if orch.inflight_episodes > 0:
            return self._rollouts(now)
        trained = self._published()
        trained = trained if trained is not None else (orch.follower.version if orch.follower else None)
        shipped = orch.step - 1
        if trained is not None and shipped > trained:
            pid, log_path = self._process("trainer")
            detail = f"batches up to {shipped} shipped, weights version {trained} published"
            return _verdict("trainer", f"the trainer on batch {trained + 1}", detail, pid, log_path)
        return self._collecting()

    def _inference(self) -> Verdict | None:
        url = getattr(self.orch.client, "base_url", None)
        problem = _http_health(url) if url else None
        if problem is None:
            return None
        pid, log_path = self._process("inference")
        detail = f"/health: {problem}; {self.orch.inflight_episodes} episodes in flight"
        loaded, trained = (self.orch.follower.version if self.orch.follower else None), self._published()
        if trained is not None and loaded is not None and trained > loaded:
            detail += f"; loading weights version {trained}"
        return _verdict("inference", f"inference at {url}", detail, pid, log_path)

    def _handover(self) -> Verdict | None:
        trained = self._published()
        loaded = self.orch.follower.version if self.orch.follower else None
        if trained is None or (loaded is not None and loaded >= trained) or self._marker(trained, handshake.FINISHED):
            return None
        where = f"broadcasts/{layout.step_name(trained)}"
        if not self._marker(trained, handshake.RECEIVER):
            who = f"the orchestrator to acknowledge weights version {trained}"
            return _verdict("orchestrator", who, f"{where}/.receiver_ready missing", os.getpid())
        pid, log_path = self._process("trainer")
        who = f"the trainer handing over weights version {trained}"
        return _verdict("trainer", who, f"{where} stopped before .finished", pid, log_path)

    def _rollouts(self, now: float) -> Verdict:
        orch = self.orch
        busy = getattr(orch, "inflight_by_source", {})
        for source in orch.mixer.sources:
            env = source.env
            address = getattr(env, "address", None)
            if not busy.get(source.name) or not address:
                continue
            pid, log_path = getattr(env, "pid", None), getattr(env, "log_path", None)
            if isinstance(getattr(env, "_remote", None), ProtocolClient):
                problem = _env_health(address)
            else:  # a taskset's own wire protocol: prl cannot ask it, the kernel can
                problem = "process stopped" if procinfo.state(pid) in ("T", "t") else None
            if problem is not None:
                who = f"env server of source '{source.name}' at {address}"
                detail = f"health: {problem}; {busy[source.name]} episodes in flight"
                return _verdict("env_server", who, detail, pid, log_path)
        if orch.buffer.filtered_traces:
            return self._collecting()
        url = getattr(orch.client, "base_url", "the inference client")
        pid, log_path = self._process("inference")
        last = getattr(orch, "last_arrival", None)
        detail = "it answers /health" + (f", last group finished {now - last:.0f} s ago" if last else "")
        who = f"inference at {url} to finish {orch.inflight_episodes} episodes in flight"
        return _verdict("inference", who, detail, pid, log_path)

    def _collecting(self) -> Verdict:
        orch = self.orch
        version = orch.follower.version if orch.follower else None
        detail = (
            f"{orch.buffer.count}/{orch.config.batch_size} traces ready, {orch.inflight_episodes} episodes "
            f"in flight, policy version {version}"
        )
        if orch.buffer.filtered_traces:
            detail += (
                f"; {orch.buffer.filtered_traces} finished traces were filtered out: every episode of their "
                "group earned the same reward, so they carry no learning signal (start from a policy that "
                "sometimes succeeds, or set orchestrator.constant_trainer_batch_size = false)"
            )
        return _verdict("orchestrator", f"the orchestrator collecting batch {orch.step}", detail, os.getpid())


def _verdict(kind: str, who: str, detail: str, pid: int | None, log_path: str | None = None) -> Verdict:
    """``who (pid N, state; detail)``: the process first, since that is what a user acts on."""
    return Verdict(kind, f"{who} ({procinfo.describe(pid)}; {detail})", pid, log_path, who)


def _http_health(url: str) -> str | None:
    """None when ``url``/health answers 200, else what went wrong, in a few words."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=PROBE_S) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except TimeoutError:
        return f"no answer in {PROBE_S:g} s"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"no answer in {PROBE_S:g} s"
        return f"unreachable ({reason})"


def _env_health(address: str) -> str | None:
    """None when the env server at ``host:port`` answers prl's JSON health request."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_S) as sock:
            sock.settimeout(PROBE_S)
            sock.sendall(json.dumps({"method": "health"}).encode() + b"\n")
            reply = sock.makefile("rb").readline()
    except TimeoutError:
        return f"no answer in {PROBE_S:g} s"
    except (OSError, ValueError) as exc:
        return f"unreachable ({exc})"
    if not reply:
        return "closed the connection without a reply"
    return None
