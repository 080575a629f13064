"""``prl replay <run_dir> --step N``: recompute one recorded RL step and compare it.

What a step needs, all written by the run itself (``docs/troubleshooting.md``):

* the exported batch of step N (``token_exports/step_N/batch_rank_0.msgpack``) and the
  step's recorded loss and pre-clip gradient norm (``token_exports/step_N/step.json``),
  both written with ``trainer.enable_token_export = true``;
* the state before the step: ``checkpoints/step_{N-1}`` (model, optimizer, scheduler), or
  for step 1 the model's initial weights and a fresh optimizer;
* to compare the updated weights, ``checkpoints/step_N``. Checkpoints rather than a
  per-step weight digest: a checkpoint says by how much and in which tensor the weights
  differ, a digest only that they do; with ``ckpt.interval = 1`` every step can be replayed.
  Without step N's checkpoint the loss and gradient norm are still compared.

The step runs through :meth:`prl_trainer_torch.rl.RLRun.learn`, the code the trainer ran:
forward, loss, backward, clipping, optimizer and scheduler step, in one process (a run of
one trainer worker). Settings passed as ``--trainer.<path> value`` are applied over the
run's resolved trainer config and reported with the run's value. Each quantity is compared
bitwise; when it differs, the largest absolute difference is reported (for the weights,
with the tensor where it is largest). Exit status: 0 when every compared quantity is equal,
1 when one differs, 2 for bad input.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel, ConfigDict

from prl import layout
from prl.config.components import TrainerConfig
from prl.config.errors import ConfigError
from prl.config.resolve import resolve
from prl.config.sections import ResumeConfig
from prl_trainer_torch import annotations as notes
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.rl import RLRun
from prl_trainer_torch.token_export import STEP_RECORD, batch_path, read_batch

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig

RESOLVED = Path("configs") / "latest" / "resolved" / "trainer.json"


class ReplaySettings(BaseModel):
    """The settings ``prl replay`` takes: the run's trainer config under ``trainer``, so
    flags and their error messages carry the paths a user knows (``--trainer.optim.lr``)."""

    model_config = ConfigDict(extra="forbid")
    trainer: TrainerConfig


@dataclass
class Inputs:
    """What one step's replay reads, checked to exist (:func:`find_inputs`)."""

    run_dir: Path
    step: int
    config: TrainerConfig  # the replay's (the run's, with the flags applied)
    changes: list[str]  # "--trainer.optim.lr 0.002 (run: 0.001)", one per changed setting
    record: dict[str, float]
    batch: Path
    start: Path | None  # checkpoint before the step; None: the model's initial weights
    end: Path | None  # the step's own checkpoint, when saved


@dataclass
class Quantity:
    """One compared quantity: equal bitwise, or the largest absolute difference (and where)."""

    name: str
    run: float | None = None
    replay: float | None = None
    diff: float = 0.0
    where: str = ""
    equal: bool = True


@dataclass
class Report:
    inputs: Inputs
    quantities: list[Quantity] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return all(q.equal for q in self.quantities)


def _usage(message: str) -> ConfigError:
    return ConfigError(f"prl replay: {message}", "Usage error")


def load_settings(run_dir: Path, flags: list[str]) -> tuple[Any, list[str]]:
    """(the run's trainer config with ``flags`` applied, the changed settings described)."""
    path = run_dir / RESOLVED
    if not path.is_file():
        raise _usage(f"RUN_DIR: {run_dir} has no resolved trainer config ({RESOLVED}); is it a `prl rl` run directory?")
    for flag in flags:
        if flag.startswith("-") and not flag.startswith("--trainer."):
            raise _usage(f"{flag}: only trainer settings can change in a replay (--trainer.<path> value)")
    run = resolve(ReplaySettings, ["--trainer", "@", str(path)], prog="prl replay").config.trainer
    retyped = _retyped(json.loads(path.read_text()), flags)
    with tempfile.TemporaryDirectory(prefix="prl-replay-") as tmp:
        if retyped is not None:
            path = Path(tmp) / "trainer.json"
            path.write_text(json.dumps(retyped))
        replay = resolve(ReplaySettings, ["--trainer", "@", str(path), *flags], prog="prl replay").config.trainer
    return replay, describe_changes(run.model_dump(mode="json"), replay.model_dump(mode="json"))


def _retyped(data: dict[str, Any], flags: list[str]) -> dict[str, Any] | None:
    """The run's resolved config with every section whose plugin ``type`` a flag changes
    cut down to the new type: the old plugin's fields would not validate against the new
    one (``--trainer.loss.type ppo`` over an ipo run). None when no flag changes a type."""
    changed = False
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if not (name.startswith("--trainer.") and name.endswith(".type")):
            continue
        value = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
        node: Any = data
        for part in name.removeprefix("--trainer.").removesuffix(".type").split("."):
            node = node.get(part.replace("-", "_")) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get("type") != value:
            node.clear()
            node["type"] = value
            changed = True
    return data if changed else None


def describe_changes(run: Any, replay: Any, path: str = "--trainer") -> list[str]:
    """Each leaf setting that differs, as ``<flag> <replay value> (run: <run value>)``."""
    if isinstance(run, dict) and isinstance(replay, dict):
        if "type" in run and run.get("type") != replay.get("type"):
            # another plugin: its other fields are that plugin's, not changes of the run's
            return describe_changes(run["type"], replay.get("type"), f"{path}.type")
        out = []
        for key in sorted(set(run) | set(replay)):
            out += describe_changes(run.get(key), replay.get(key), f"{path}.{key.replace('_', '-')}")
        return out
    if run == replay:
        return []
    return [f"{path} {_show(replay)} (run: {_show(run)})"]


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def find_inputs(run_dir: Path, step: int, flags: list[str]) -> Inputs:
    """Every file the replay of ``step`` needs, or a one-line usage error naming what is missing."""
    if step < 1:
        raise _usage(f"--step {step}: steps count from 1")
    config, changes = load_settings(run_dir, flags)
    if config.num_workers != 1:
        raise _usage(f"RUN_DIR: the run trained on {config.num_workers} workers; replay recomputes one-worker runs")
    exports = run_dir / "token_exports"
    if not exports.is_dir():
        raise _usage(
            f"RUN_DIR: {run_dir} has no token export (token_exports/); "
            "run with trainer.enable_token_export = true to make its steps replayable"
        )
    step_dir = layout.step_dir(exports, step)
    batch, record_path = batch_path(run_dir, step, 0), step_dir / STEP_RECORD
    if not (batch.is_file() and record_path.is_file()):
        exported = sorted(s for s, p in layout.step_dirs(exports).items() if (p / STEP_RECORD).is_file())
        have = f"steps {exported[0]}-{exported[-1]}" if exported else "no step"
        raise _usage(f"--step {step}: no exported batch and record for step {step} in {step_dir} (exported: {have})")
    root = ckpt.ckpt_root(config, run_dir)
    complete = set(ckpt.complete_steps(root))
    start = None
    if step > 1:
        if step - 1 not in complete:
            raise _usage(
                f"--step {step}: no complete checkpoint of step {step - 1} to start from "
                f"({layout.step_dir(root, step - 1)}); replaying every step needs ckpt.interval = 1"
            )
        start = layout.step_dir(root, step - 1)
    end = layout.step_dir(root, step) if step in complete else None
    record = json.loads(record_path.read_text())
    return Inputs(run_dir, step, config, changes, record, batch, start, end)


class ReplayRun(RLRun):
    """The trainer of the run as it stood before the step: no transport, monitors or export."""

    def __init__(self, config: TrainerConfig, run_dir: Path, start: Path | None) -> None:
        self.config = config
        self.build_model(config)
        self.run_dir, self.ckpt_root = run_dir, ckpt.ckpt_root(config, run_dir)
        self.loss_fn = config.loss.build()
        self.monitors, self.exporter, self.annotator = [], None, None
        self.notes = notes.NoteWriter(self.monitors)
        if start is not None:
            fresh = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
            lora = self.adapter is not None
            # Everything restored, whatever the run's own [resume] said.
            whole = ResumeConfig()
            self.progress = ckpt.load(start, self.hf, self.optimizer, self.scheduler, whole, adapter_only=lora)
            self._settings_over_checkpoint(fresh)

    def _settings_over_checkpoint(self, fresh: list[dict[str, Any]]) -> None:
        """The checkpoint restored the run's optimizer hyperparameters and lr; a setting
        changed for the replay must win over them. Left alone otherwise, so an unchanged
        replay uses the restored values bit for bit."""
        if all(_same_hyper(g, f) for g, f in zip(self.optimizer.param_groups, fresh, strict=True)):
            return
        for i, (group, new) in enumerate(zip(self.optimizer.param_groups, fresh, strict=True)):
            group.update({k: v for k, v in new.items() if k != "lr"})
            self.scheduler.base_lrs[i] = new["initial_lr"]
            group["lr"] = new["initial_lr"] * self.scheduler.lr_lambdas[i](self.scheduler.last_epoch)


def _same_hyper(group: dict[str, Any], fresh: dict[str, Any]) -> bool:
    return all(group.get(k) == v for k, v in fresh.items() if k != "lr")


def replay_step(inputs: Inputs) -> Report:
    """Recompute the step and compare it with what the run recorded."""
    config = inputs.config
    os.environ.update({k: str(v) for k, v in config.env_vars.items()})
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        # The run's trainer started with these threads; CPU reductions split work by them.
        torch.set_num_threads(int(threads))
    run = ReplayRun(config, inputs.run_dir, inputs.start)
    try:
        metrics, grad_norm, _lr = run.learn(read_batch(inputs.batch))
        report = Report(inputs)
        report.quantities.append(_scalar("loss", inputs.record["loss"], metrics["loss/all"]))
        report.quantities.append(_scalar("grad norm", inputs.record["grad_norm"], float(grad_norm)))
        if inputs.end is not None:
            report.quantities.append(_weights(run, inputs.end))
        return report
    finally:
        run.close()


def _scalar(name: str, run: float, replay: float) -> Quantity:
    equal = run == replay or (run != run and replay != replay)  # NaN recorded and replayed
    return Quantity(name, run, replay, 0.0 if equal else abs(run - replay), equal=equal)


def _weights(run: ReplayRun, end: Path) -> Quantity:
    """The replayed weights against the step's checkpoint, tensor by tensor."""
    lora = run.adapter is not None
    saved = ckpt.read_model_state(end, run.hf, adapter_only=lora)
    out = Quantity("weights")
    for name, mine in ckpt.model_state(run.hf, adapter_only=lora).items():
        theirs = saved[name]
        if torch.equal(mine, theirs):
            continue
        out.equal = False
        diff = (mine.double() - theirs.double()).abs().nan_to_num(nan=float("inf")).max().item()
        if diff >= out.diff or not out.where:
            out.diff, out.where = diff, name
    return out


def format_report(report: Report) -> list[str]:
    """The report's lines: what was replayed, then each quantity's result under the settings."""
    inp = report.inputs
    start = _rel(inp.start, inp.run_dir) if inp.start is not None else "the model's initial weights"
    head = f"step {inp.step} of {inp.run_dir}: replayed from {start} on {_rel(inp.batch, inp.run_dir)}"
    settings = f"with {', '.join(inp.changes)}" if inp.changes else "with the run's settings"
    parts = [_result(q) for q in report.quantities]
    if inp.end is None:
        parts.append(f"weights not compared (no checkpoint of step {inp.step})")
    lines = [head, f"{settings}: {', '.join(parts)}"]
    for q in report.quantities:
        if q.run is not None and not q.equal:
            lines.append(f"  {q.name}: run {q.run!r}, replay {q.replay!r}")
    return lines


def _result(q: Quantity) -> str:
    if q.equal:
        return f"{q.name} equal" + (" (bitwise)" if q.name == "weights" else "")
    if q.name == "weights":
        return f"weights differ by at most {q.diff:.2g} ({q.where})"
    return f"{q.name} differs by {q.diff:.2g}"


def _rel(path: Path, base: Path) -> str:
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return str(path)
