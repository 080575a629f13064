"""The job a run becomes: the node plan (JSON) and the sbatch script rendered from a template.

Everything is checked here, before anything is submitted, and a problem is one line naming
the field (exit 2): ``sbatch`` missing from PATH, node counts that do not add up, a
template that does not render.

Files, under ``<run_dir>/launcher/``::

    <entry>.sbatch          the job script (``sbatch`` it by hand after a dry run)
    <entry>.plan.json       what every node starts: read by ``python -m prl_launcher_slurm.node``
    logs/job_<id>.log       the job's output, each line prefixed with its node rank
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from prl.config.errors import ConfigError
from prl.contracts.launcher import ProcessSpec

if TYPE_CHECKING:  # annotations only
    from prl.config.roots import RLConfig, SFTConfig
    from prl_launcher_slurm.settings import SlurmSettings

TEMPLATE = Path(__file__).parent / "templates" / "job.sbatch.j2"
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@dataclass
class Job:
    """A rendered job: its script and plan on disk, and the command that submits it."""

    entry: str
    script: Path
    plan: Path
    log_dir: Path
    nodes: int

    @property
    def command(self) -> list[str]:
        return ["sbatch", str(self.script)]

    def log_path(self, job_id: str) -> Path:
        return self.log_dir / f"job_{job_id}.log"


def entry_of(root: Any) -> str:
    """``rl`` for an RLConfig, ``sft`` for an SFTConfig, ``inference`` for an InferenceConfig
    (names the script and rl.json)."""
    return type(root).__name__.removesuffix("Config").lower() if root is not None else "run"


def require_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise ConfigError(
            "--slurm: sbatch is not on PATH; run on a SLURM login node (or install the SLURM client), "
            "or drop --slurm to run here"
        )


def trainer_world(root: Any) -> int:
    """Data-parallel trainer processes of the run (RL: trainer.num_workers; SFT: num_workers)."""
    trainer = getattr(root, "trainer", None)
    return int(getattr(trainer, "num_workers", None) or getattr(root, "num_workers", 1) or 1)


def check_layout(config: SlurmSettings, root: RLConfig | SFTConfig, processes: list[ProcessSpec]) -> None:
    """Node counts and transports that a multi-node job can run, or a one-line error."""
    if not config.num_train_nodes:
        return
    roles = {p.role for p in processes}
    has_inference = "inference" in roles
    if has_inference and config.num_infer_nodes < 1:
        raise ConfigError(
            f"--deployment.num-infer-nodes: this run starts an inference server, so a multi-node job needs "
            f"num_infer_nodes >= 1 (got {config.num_infer_nodes}) next to num_train_nodes = {config.num_train_nodes}"
        )
    if not has_inference and config.num_infer_nodes:
        raise ConfigError(
            f"--deployment.num-infer-nodes: {config.num_infer_nodes} inference node(s) asked for, but this run "
            "starts no inference server; set num_infer_nodes = 0"
        )
    world = trainer_world(root)
    if world % config.num_train_nodes:
        field = "--trainer.num-workers" if hasattr(root, "trainer") else "--num-workers"
        raise ConfigError(
            f"{field}: {world} trainer processes cannot be split evenly over num_train_nodes = "
            f"{config.num_train_nodes} (use a multiple of it)"
        )
    transport = getattr(getattr(root, "orchestrator", None), "rollout_transport", None)
    if transport is not None and transport.type == "zmq" and transport.host in LOOPBACK:
        raise ConfigError(
            f"--rollout-transport.host: trainer nodes cannot reach the orchestrator at '{transport.host}'; "
            "use rollout_transport.type = 'filesystem' on shared storage, or the orchestrator node's address"
        )
    weights = getattr(root, "weight_broadcast", None)
    if has_inference and getattr(weights, "host", None) in LOOPBACK:
        # A transport that meets at a host (NCCL: the trainer listens) cannot meet at a
        # loopback address across nodes, and the trainer node is only known once allocated.
        raise ConfigError(
            f"--weight-broadcast.host: inference and trainer run on different nodes, so they cannot meet at "
            f"'{weights.host}'; use weight_broadcast.type = 'filesystem' on shared storage for multi_node"
        )


def write_engines(config: SlurmSettings, root: RLConfig | SFTConfig, config_dir: Path) -> list[dict]:
    """Several inference nodes: each runs one engine on ``backend_port`` + its node index,
    bound to every interface (the router on the first inference node reaches it), from its
    own resolved config; [] for one inference node."""
    inference = getattr(root, "inference", None)
    if config.num_infer_nodes < 2 or not config.num_train_nodes or inference is None:
        return []
    if not inference.server.backend_port:
        raise ConfigError(
            "--inference.server.backend-port: several inference nodes need a fixed backend_port "
            "(the router on the first node must know every engine's port before they start)"
        )
    out = []
    for k in range(config.num_infer_nodes):
        engine = inference.model_copy(deep=True)
        # backend_port + k: distinct ports even where several "nodes" share one host.
        port = inference.server.backend_port + k
        engine.server.host, engine.server.port = "0.0.0.0", port
        engine.server.engines, engine.server.ready_file = 1, None
        engine.slurm = None  # served inside this job, not submitted as one of its own
        if hasattr(engine.backend, "ready_file"):
            engine.backend.ready_file = None
        path = config_dir / "resolved" / "inference" / f"node_{k}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(engine.model_dump_json(indent=2) + "\n")
        out.append({"port": port, "argv": [sys.executable, "-m", "prl", "inference", "@", str(path)]})
    return out


def _spec_json(spec: ProcessSpec) -> dict:
    out = dataclasses.asdict(spec)
    return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}


def write_plan(
    path: Path,
    config: SlurmSettings,
    root: RLConfig | SFTConfig,
    processes: list[ProcessSpec],
    log_dir: Path,
    engines: list[dict] = (),
) -> None:
    """What every node of the job starts (read by :mod:`prl_launcher_slurm.node`);
    ``engines``: one inference engine per inference node (:func:`write_engines`)."""
    trainers = [p for p in processes if p.role == "trainer"]
    train_json = next((a for p in trainers for a in reversed(p.argv) if a.endswith(".json")), None)
    plan = {
        "run_dir": str(Path(log_dir).parent.parent),  # logs/attempt_N is two levels down
        "log_dir": str(log_dir),
        "num_infer_nodes": config.num_infer_nodes,
        "num_train_nodes": config.num_train_nodes,
        "rdzv_port": config.rdzv_port,
        "nproc_per_node": trainer_world(root) // max(config.num_train_nodes, 1),
        # The plain trainer command each torchrun rank runs on a trainer node (multi-node).
        "trainer_argv": ["-m", "prl", "sft-trainer" if entry_of(root) == "sft" else "trainer", "@", train_json],
        "local": {
            "gpus_per_node": config.gpus_per_node,
            "num_infer_gpus": 0 if config.num_train_nodes else config.num_infer_gpus,
            "num_train_gpus": 0 if config.num_train_nodes else config.num_train_gpus,
            "startup_timeout": config.startup_timeout,
            "stop_timeout": config.stop_timeout,
        },
        "processes": [_spec_json(p) for p in processes],
        "infer_engines": list(engines),
        "api_key": engine_key(root.inference) if engines else None,
    }
    path.write_text(json.dumps(plan, indent=2) + "\n")
    path.chmod(0o600)  # it may hold the engines' generated API key


def engine_key(inference: Any) -> str | None:
    """Engines bound beyond loopback need an API key for their admin routes: None when the
    user gave one (``inference.server.api_key`` / $PRL_API_KEY), else one made for this job,
    which its processes get as $PRL_API_KEY."""
    if inference.server.api_key or os.environ.get("PRL_API_KEY"):
        return None
    import secrets

    return secrets.token_urlsafe(24)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env


def render(template: Path | None, values: dict[str, Any]) -> str:
    """The job script from ``template`` (the built-in one when None); a template that is
    missing, malformed or uses an unknown variable is a one-line error."""
    path = Path(template) if template is not None else TEMPLATE
    field = "--slurm.template"
    try:
        source = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        return _environment().from_string(source).render(**values)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{field}: {path} does not render: line {exc.lineno}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise ConfigError(f"{field}: {path} does not render: {exc}") from None


def template_values(config: SlurmSettings, root: RLConfig | SFTConfig, job: Job, attempt: str) -> dict[str, Any]:
    """The variables a template sees (docs/slurm.md lists them)."""
    slurm = getattr(root, "slurm", None)
    run_name = getattr(getattr(root, "run", None), "name", None) or "prl"
    gpus = slurm.gpus_per_node if slurm is not None and slurm.gpus_per_node is not None else config.gpus_per_node
    if job.entry == "inference":
        layout = f"the inference server alone on one node, {gpus or 0} GPU(s)"
    elif config.num_train_nodes:
        layout = f"{config.num_infer_nodes} inference node(s) + {config.num_train_nodes} trainer node(s)"
    else:
        layout = f"single node, {config.num_infer_gpus} inference GPU(s) + {config.num_train_gpus} trainer GPU(s)"
    return {
        "entry": job.entry,
        "run_name": run_name,
        "attempt": attempt,
        "layout": layout,
        "job_name": (slurm.job_name if slurm is not None else None) or run_name,
        "nodes": job.nodes,
        "num_infer_nodes": config.num_infer_nodes,
        "num_train_nodes": config.num_train_nodes,
        "partition": getattr(slurm, "partition", None),
        "account": getattr(slurm, "account", None),
        "qos": getattr(slurm, "qos", None),
        "time": getattr(slurm, "time", "24:00:00"),
        "gpus_per_node": gpus or None,
        "cpus_per_task": getattr(slurm, "cpus_per_task", None),
        "mem": getattr(slurm, "mem", None),
        "extra_directives": list(getattr(slurm, "extra_directives", [])),
        "setup": list(getattr(slurm, "setup", [])),
        "workdir": os.getcwd(),
        "job_log": str(job.log_dir / "job_%j.log"),
        "python": sys.executable,
        "plan": str(job.plan),
        "run_dir": str(job.plan.parent.parent),
    }
