"""A throw-away SLURM cluster on this machine, for the real-SLURM tests.

munged, slurmctld and ``nodes`` slurmd daemons (several NodeName entries on 127.0.0.1, each
slurmd on its own port, started with ``slurmd -N <name>``) run from a temporary directory
with a generated slurm.conf; :meth:`Cluster.stop` ends exactly the daemons it started.
Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge
(``launchers/slurm/setup-slurm.sh`` installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from prl.serving import free_port

LOOPBACK = "127.0.0.1"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (run launchers/slurm/setup-slurm.sh as root)"
    if os.geteuid() != 0:
        return "the test cluster runs its daemons as root"
    return None


class Cluster:
    def __init__(self, root: Path, nodes: int = 3, cpus: int = 2) -> None:
        self.root = Path(root)
        self.names = [f"n{i}" for i in range(nodes)]
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.pidfiles: list[Path] = []

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _write_conf(self) -> None:
        r, host = self.root, socket.gethostname()
        for sub in ("state", "log", "munge", *(f"spool/{n}" for n in self.names)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        lines = [
            "ClusterName=prltest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port(LOOPBACK)}",
            f"SlurmdPort={free_port(LOOPBACK)}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge' / 'sock'}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd-%n.log'}",
            # No cgroups in a container: track processes by their parent chain, bind nothing.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "KillWait=10",
            "MinJobAge=600",
        ]
        for name in self.names:
            lines.append(
                f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port(LOOPBACK)} "
                f"CPUs={self.cpus} RealMemory=4000 State=UNKNOWN"
            )
        lines.append(f"PartitionName=debug Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 60.0) -> None:
        self._write_conf()
        munge = self.root / "munge"
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge.chmod(0o700)
        self._daemon(
            [
                "munged",
                "--force",
                f"--key-file={key}",
                f"--socket={munge / 'sock'}",
                f"--pid-file={munge / 'pid'}",
                f"--log-file={munge / 'log'}",
                f"--seed-file={munge / 'seed'}",
            ],
            munge / "pid",
        )
        env = {**os.environ, **self.env}
        self._daemon(["slurmctld", "-f", str(self.conf), "-i"], self.root / "slurmctld.pid", env)
        for name in self.names:
            self._daemon(["slurmd", "-f", str(self.conf), "-N", name], self.root / f"slurmd-{name}.pid", env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T %D"], env=env, capture_output=True, text=True)
            if out.stdout.split()[:2] == ["idle", str(len(self.names))]:
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the test SLURM cluster did not come up: sinfo says {out.stdout!r} {out.stderr!r}")

    def _daemon(self, argv: list[str], pidfile: Path, env: dict | None = None) -> None:
        subprocess.run(argv, env=env, check=True, capture_output=True)
        self.pidfiles.append(pidfile)
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        """Cancel this cluster's jobs and wait for them to end (their slurmstepd would outlive
        the daemons), then SIGTERM each daemon it started (by its pid file), last first."""
        env = {**os.environ, **self.env}
        if self.pidfiles:
            subprocess.run(["scancel", "--user", str(os.geteuid())], env=env, capture_output=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                out = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
                if out.returncode != 0 or not out.stdout.strip():
                    break
                time.sleep(0.5)
        for pidfile in reversed(self.pidfiles):
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        self.pidfiles.clear()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A 3-node SLURM cluster on this machine (several slurmd on 127.0.0.1), for the session."""
    why = missing()
    if why:
        pytest.skip(why)
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), nodes=3, cpus=os.cpu_count() or 2)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """This test's environment points SLURM's commands at the test cluster."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    return slurm_cluster.env
