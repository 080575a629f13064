"""What `prl new plugin` needs to know about each plugin kind, beyond :data:`prl.plugins.KINDS`.

The naming follows the in-repo distributions: a kind prefix in the distribution and package
name (``prl-algo-max-rl`` / ``prl_algo_max_rl``), and the tag spelled the way that kind's
existing tags are. Algorithm and loss types are Python-style (``max_rl``), and a monitor's
key is a field name under ``[monitors]``, so those use underscores; every other tag is a
plain config value and keeps the hyphen (``reverse-text``, ``deepseek-v3``).
"""

from __future__ import annotations

from dataclasses import dataclass

TORCH = "torch>=2.6,<3"


@dataclass(frozen=True)
class KindTemplate:
    kind: str
    """Key in :data:`prl.plugins.KINDS` and the template folder's name."""
    alias: str
    """The singular, hyphenated spelling users type (``weight-transport``)."""
    prefix: str
    """Distribution/package prefix after ``prl-`` (``algo`` gives ``prl-algo-<name>``)."""
    tag_attr: str
    """The ClassVar holding the tag (``type``, ``name``, ``key`` or ``id``)."""
    underscore_tag: bool
    """Whether the tag uses ``_`` instead of ``-``."""
    module: str
    """Implementation module inside the package."""
    suffix: str
    """Class-name suffix (``Algorithm`` gives ``MyThingAlgorithm``)."""
    contract: str
    """The contract class in :mod:`prl.contracts`."""
    summary: str
    """What the scaffolded implementation does (the distribution's description)."""
    selects: str
    """TOML tables that select the plugin in a ``prl rl`` config; ``{tag}`` is filled in."""
    dependencies: tuple[str, ...] = ()
    """Requirements besides prl-core."""
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Optional dependency groups."""


TEMPLATES: dict[str, KindTemplate] = {
    t.kind: t
    for t in (
        KindTemplate(
            "algorithms",
            "algorithm",
            "algo",
            "type",
            True,
            "algorithm",
            "Algorithm",
            "Algorithm",
            "group-mean-centred advantages",
            '[orchestrator.train.algo]\ntype = "{tag}"',
        ),
        KindTemplate(
            "losses",
            "loss",
            "loss",
            "type",
            True,
            "loss",
            "Loss",
            "Loss",
            "a plain policy-gradient loss",
            '[trainer.loss]\ntype = "{tag}"',
            dependencies=(TORCH,),
        ),
        KindTemplate(
            "renderers",
            "renderer",
            "renderer",
            "name",
            False,
            "renderer",
            "Renderer",
            "Renderer",
            "another renderer plus a default system prompt",
            '[orchestrator.renderer]    # prl rl; prl sft and prl eval take [renderer]\nname = "{tag}"\nbase = "auto"',
        ),
        KindTemplate(
            "monitors",
            "monitor",
            "monitor",
            "key",
            True,
            "monitor",
            "Monitor",
            "Monitor",
            "metric rows appended as JSON lines",
            "[monitors.{tag}]    # an empty section turns it on",
        ),
        KindTemplate(
            "weight_transports",
            "weight-transport",
            "weights",
            "type",
            False,
            "transport",
            "Weights",
            "WeightTransport",
            "safetensors files in a shared directory",
            '[weight_broadcast]\ntype = "{tag}"',
            extras=(("trainer", (TORCH, "safetensors>=0.4")),),
        ),
        KindTemplate(
            "launchers",
            "launcher",
            "launcher",
            "type",
            False,
            "launcher",
            "Launcher",
            "Launcher",
            "services first, then every other process side by side",
            '[deployment]\ntype = "{tag}"',
        ),
        KindTemplate(
            "inference_backends",
            "inference-backend",
            "inference",
            "type",
            False,
            "backend",
            "Backend",
            "InferenceBackend",
            "the embedded torch inference server under its own tag",
            '[inference.backend]\ntype = "{tag}"',
            dependencies=("prl-inference-torch>=0.1,<0.2",),
        ),
        KindTemplate(
            "tasksets",
            "taskset",
            "tasks",
            "id",
            False,
            "taskset",
            "Taskset",
            "Taskset",
            "two arithmetic questions scored by exact match",
            '[[orchestrator.train.source]]\nname = "{tag}"\nenv.taskset.id = "{tag}"',
        ),
        KindTemplate(
            "trainers",
            "trainer",
            "trainer",
            "type",
            False,
            "trainer",
            "Trainer",
            "Trainer",
            "the torch trainer under its own tag",
            '[trainer]    # prl rl; prl sft takes trainer_type = "{tag}" at the top level\ntype = "{tag}"',
            dependencies=("prl-trainer-torch>=0.1,<0.2",),
        ),
    )
}

ALIASES: dict[str, str] = {t.alias: t.kind for t in TEMPLATES.values()}
