"""``python -m prl_launcher_slurm.node <plan.json>``: one node's part of a SLURM job.

``srun`` starts this once per node; ``$SLURM_NODEID`` is the node rank and
``$PRL_SLURM_HOSTS`` (set by the job script from ``scontrol show hostnames``) the host names
in rank order. The node then supervises its processes with prl's local launcher (services
first, the first failure stops the rest and is reported with the component's last log
lines, exit code 2 stays a one-line usage error):

* single node: every process of the plan, GPUs split as ``[deployment]`` says;
* multi-node, node ranks ``0 .. num_infer_nodes-1``: inference, and on rank 0 everything
  else that is not the trainer (orchestrator, online eval); with several inference nodes
  each runs one engine (``resolved/inference/node_K.json``, on ``backend_port`` + K) and
  rank 0 also prl's router on ``server.port`` in front of all of them (``python -m
  prl.engines``), which is where the orchestrator's client goes;
* multi-node, the other ranks: the trainer under torchrun, ``nproc_per_node`` ranks here,
  joined across trainer nodes by a c10d rendezvous on the first trainer node.

Per-node logs go to ``logs/attempt_N/{inference,trainer}/node_K.log`` (K counts nodes of
that role), the router's to ``inference/router.log``; ``inference.log`` and ``trainer.log``
link to ``node_0.log``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from prl import torchrun
from prl.contracts.launcher import ProcessSpec


def load_processes(plan: dict) -> list[ProcessSpec]:
    out = []
    for raw in plan["processes"]:
        spec = ProcessSpec(**raw)
        spec.log_path = Path(spec.log_path)
        spec.ready_file = Path(spec.ready_file) if spec.ready_file else None
        out.append(spec)
    return out


def node_addr(name: str) -> str:
    """The address SLURM reaches node ``name`` at (NodeAddr), else the name itself."""
    try:
        out = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return name
    for field in out.stdout.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1] or name
    return name


def trainer_command(plan: dict, train_rank: int, rdzv_host: str, job_id: str) -> list[str]:
    """torchrun over this node's trainer ranks, meeting the other trainer nodes at the
    rendezvous on the first one (each rank runs the plain ``prl trainer`` / ``prl sft-trainer``)."""
    torchrun_logs = Path(plan["log_dir"]) / "trainer" / "torchrun" / f"node_{train_rank}"
    return torchrun.command(
        plan["trainer_argv"],
        nproc=plan["nproc_per_node"],
        log_dir=torchrun_logs,
        nodes=plan["num_train_nodes"],
        rendezvous=f"{rdzv_host}:{plan['rdzv_port']}",
        run_id=f"prl-{job_id}",
    )


def node_processes(plan: dict, rank: int, hosts: list[str], job_id: str) -> list[ProcessSpec]:
    """The processes node ``rank`` runs (see the module docstring)."""
    processes = load_processes(plan)
    n_infer, n_train = plan["num_infer_nodes"], plan["num_train_nodes"]
    if not n_train:
        return processes
    logs = Path(plan["log_dir"])
    if rank < n_infer and plan.get("infer_engines"):
        return routed_inference(plan, processes, rank, hosts)
    if rank < n_infer:
        mine = [p for p in processes if p.role != "trainer" and (rank == 0 or p.role == "inference")]
        return [_per_node_log(p, logs, rank) if p.role == "inference" else p for p in mine]
    train_rank = rank - n_infer
    rdzv_host = node_addr(hosts[n_infer]) if len(hosts) > n_infer else "localhost"
    trainers = [p for p in processes if p.role == "trainer"][:1]
    return [
        dataclasses.replace(
            _per_node_log(p, logs, train_rank), argv=trainer_command(plan, train_rank, rdzv_host, job_id)
        )
        for p in trainers
    ]


def routed_inference(plan: dict, processes: list[ProcessSpec], rank: int, hosts: list[str]) -> list[ProcessSpec]:
    """Inference node ``rank`` of several: its engine; the first node also the router (in
    the inference process's place: same ready file, log ``inference/router.log``) in front
    of every node's engine, and the orchestrator and the rest next to it."""
    logs, key = Path(plan["log_dir"]), plan.get("api_key")
    inference = next(p for p in processes if p.role == "inference")
    engine = plan["infer_engines"][rank]
    env = {k: v for k, v in inference.env.items() if k != "PRL_READY_FILE"} | ({"PRL_API_KEY": key} if key else {})
    mine = [
        dataclasses.replace(
            inference,
            name=f"inference-engine-{rank}",
            argv=engine["argv"],
            log_path=logs / "inference" / f"node_{rank}.log",
            env=env,
            ready_file=None,
            health_url=f"http://127.0.0.1:{engine['port']}",
        )
    ]
    if rank:
        # Only a service here, which would end the node at once: serve until rank 0 is done.
        marker = str(done_marker(plan))
        wait = [sys.executable, "-m", "prl_launcher_slurm.node", "--wait-for", marker]
        return [*mine, ProcessSpec("wait-for-node-0", wait, mine[0].log_path, role="waiter")]
    urls = [f"http://{node_addr(hosts[k])}:{e['port']}" for k, e in enumerate(plan["infer_engines"])]
    resolved = next(a for a in reversed(inference.argv) if a.endswith(".json"))
    router = dataclasses.replace(
        inference,
        argv=[sys.executable, "-m", "prl.engines", resolved, *urls],
        log_path=logs / "inference" / "router.log",
        env=inference.env | ({"PRL_API_KEY": key} if key else {}),
    )
    rest = [
        dataclasses.replace(p, env=p.env | ({"PRL_API_KEY": key} if key else {}))
        for p in processes
        if p.role not in ("trainer", "inference")
    ]
    return [*mine, router, *rest]


def done_marker(plan: dict) -> Path:
    """Written by node 0 when its part ends, so inference nodes that only serve stop too."""
    return Path(plan["log_dir"]) / "inference" / ".node_0_done"


def _wait_for(path: Path) -> int:
    while not path.exists():
        time.sleep(1.0)
    return 0


def _per_node_log(spec: ProcessSpec, logs: Path, k: int) -> ProcessSpec:
    return dataclasses.replace(spec, log_path=logs / spec.role / f"node_{k}.log")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--wait-for":
        return _wait_for(Path(args[1]))
    if len(args) != 1:
        print("usage: python -m prl_launcher_slurm.node <plan.json>", file=sys.stderr)
        return 2
    from prl_launcher_local import LocalLauncher

    plan = json.loads(Path(args[0]).read_text())
    rank = int(os.environ.get("SLURM_NODEID", "0"))
    hosts = [h for h in os.environ.get("PRL_SLURM_HOSTS", "").split(",") if h] or [socket.gethostname()]
    processes = node_processes(plan, rank, hosts, os.environ.get("SLURM_JOB_ID", "local"))
    if not processes:
        return 0
    launcher = LocalLauncher(LocalLauncher.Config(**plan["local"]), Path(plan["run_dir"]))
    try:
        return launcher.launch(processes)
    finally:
        if rank == 0 and plan.get("infer_engines"):
            done_marker(plan).parent.mkdir(parents=True, exist_ok=True)
            done_marker(plan).touch()


if __name__ == "__main__":
    sys.exit(main())
