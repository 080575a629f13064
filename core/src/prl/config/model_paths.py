"""Which models and datasets a resolved config loads, under the fields the user set
(prl.hub fetches the hub ids among them before launch), and whether its renderers can
serve the model they will be given. Checked at resolve time, before any process starts."""

from __future__ import annotations

import json

from prl.config.errors import ConfigError
from prl.config.policy import TrainerModelConfig
from prl.hub import Need, is_local, local_dir

# Root configs whose own model section is only tokenized (a served model), never loaded.
_TOKENIZER_ONLY_ROOTS = {"EvalConfig", "OrchestratorConfig"}


def needs_of(cfg: object, merged: dict) -> list[Need]:
    """Every model, tokenizer and dataset a resolved root config loads: its own and those of
    its trainer, orchestrator and inference sections. A shared ``model.name`` the user gave
    comes first, so an error names the field they wrote. The orchestrator only tokenizes."""
    root_tok = type(cfg).__name__ in _TOKENIZER_ONLY_ROOTS
    out: list[Need] = []
    shared = merged.get("model") if isinstance(merged, dict) else None
    if isinstance(shared, dict) and isinstance(shared.get("name"), str):
        out.append(Need("model.name", "model", shared["name"], tokenizer_only=root_tok))
    for prefix, tok_only in (("", root_tok), ("trainer.", False), ("orchestrator.", True), ("inference.", False)):
        comp = getattr(cfg, prefix[:-1], None) if prefix else cfg
        model, tokenizer = getattr(comp, "model", None), getattr(comp, "tokenizer", None)
        # A component that only tokenizes, given a tokenizer, uses the model name only to
        # ask its server for it (a served or LoRA name, not a repo).
        served_only = tok_only and isinstance(getattr(tokenizer, "name", None), str)
        if isinstance(getattr(model, "name", None), str) and not served_only:
            out.append(Need(f"{prefix}model.name", "model", model.name, tokenizer_only=tok_only))
        if isinstance(getattr(tokenizer, "name", None), str):
            out.append(Need(f"{prefix}tokenizer.name", "model", tokenizer.name, tokenizer_only=True))
    data = getattr(cfg, "data", None)
    if getattr(data, "type", None) == "sft" and isinstance(getattr(data, "name", None), str):
        out.append(Need("data.name", "dataset", data.name, getattr(data, "revision", None)))
    return out


def check_renderers(cfg: object) -> None:
    """Ask every renderer a resolved root config builds (its own ``renderer`` and its
    orchestrator's) whether it can serve the model it will be given, so an ``auto``
    renderer with an unmapped model fails before launch, as one line naming the flag."""
    for prefix in ("", "orchestrator."):
        comp = getattr(cfg, prefix[:-1], None) if prefix else cfg
        renderer = getattr(comp, "renderer", None)
        check = getattr(renderer, "check", None)
        if check is None:
            continue
        tokenizer = getattr(getattr(comp, "tokenizer", None), "name", None)
        model = tokenizer or getattr(getattr(comp, "model", None), "name", None)
        if not isinstance(model, str):
            continue
        if not is_local(model) and local_dir(model) is None:
            continue  # a hub id a dry run did not fetch: checked at launch, once its files are here
        try:
            check(model)
        except ValueError as exc:
            raise ConfigError(f"--{prefix}renderer.name: {exc}") from None


def check_image_sources(cfg: object) -> None:
    """``prl rl``: a source whose taskset puts images in its prompts
    (:attr:`prl.contracts.taskset.Taskset.sends_images`) trains a text model only if the
    config says the model sees images (``[model.vlm]``); otherwise the server would refuse
    every rollout's images, so the run is refused as one line naming the source."""
    orch = getattr(cfg, "orchestrator", None)
    model = getattr(orch, "model", None)
    if model is None:
        return
    groups = [("train", getattr(orch, "train", None)), ("eval", getattr(orch, "eval", None))]
    for group, section in groups:
        for i, source in enumerate(getattr(section, "source", None) or []):
            taskset = source.env.taskset
            if not getattr(taskset.plugin_class(), "sends_images", False):
                continue
            if getattr(model, "vlm", None) is None:
                raise ConfigError(
                    f"--orchestrator.{group}.source[{i}].env.taskset: {taskset.id} sends images in its prompts "
                    f"and {model.name} is trained as a text model: set [model.vlm] for a vision-language model"
                )


def check_eval_image_sources(cfg: object) -> None:
    """``prl eval``: a source whose taskset puts images in its prompts, on a model that is
    here and has no vision tower (no ``vision_config``), is refused in one line naming the
    source; the server would refuse every rollout's images. A hub id not fetched yet is left
    to the server."""
    model = getattr(getattr(cfg, "model", None), "name", None)
    where = local_dir(model) if isinstance(model, str) else None
    config = where / "config.json" if where is not None else None
    if config is None or not config.is_file() or "vision_config" in json.loads(config.read_text()):
        return
    for i, source in enumerate(getattr(cfg, "source", None) or []):
        taskset = source.env.taskset
        if getattr(taskset.plugin_class(), "sends_images", False):
            raise ConfigError(
                f"--source[{i}].env.taskset: {taskset.id} sends images in its prompts and {model} is a text "
                "model (its config has no vision_config): evaluate a vision-language model"
            )


def check_trained_model(cfg: object) -> None:
    """Let the trainer's model settings (``prl sft``: ``model``; ``prl rl``:
    ``trainer.model``) check themselves against the model they will train
    (:meth:`TrainerModelConfig.check_model`), once its files are here, so a setting the
    model cannot honour fails before launch as one line naming the flag."""
    for prefix in ("", "trainer."):
        comp = getattr(cfg, prefix[:-1], None) if prefix else cfg
        model = getattr(comp, "model", None)
        if not isinstance(model, TrainerModelConfig):
            continue
        where = local_dir(model.name)
        if where is None:
            continue  # a hub id a dry run did not fetch: the trainer checks the loaded model
        try:
            model.check_model(str(where))
        except ValueError as exc:
            raise ConfigError(f"--{prefix}model.{exc}") from None
