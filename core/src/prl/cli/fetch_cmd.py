"""``prl fetch @ cfg.toml``: download every model and dataset a config names into the
Hugging Face cache and say where, so that machines without internet (SLURM compute
nodes) run from a shared cache with ``HF_HUB_OFFLINE=1``.

The config may be an RL, SFT, eval or inference config; the kind is told by the file (the
first root config that validates it), or named first: ``prl fetch sft @ sft.toml``.
"""

from __future__ import annotations

from prl import hub
from prl.config.errors import ConfigError
from prl.config.model_paths import needs_of
from prl.config.resolve import resolve

USAGE = "usage: prl fetch [rl|sft|eval|inference] @ FILE [--flags ...]"


def _roots() -> dict[str, type]:
    from prl.config.components import InferenceConfig
    from prl.config.roots import EvalConfig, RLConfig, SFTConfig

    return {"rl": RLConfig, "sft": SFTConfig, "eval": EvalConfig, "inference": InferenceConfig}


def _resolve_any(argv: list[str]):
    """The first root config kind that accepts ``argv`` (or the one named first)."""
    roots = _roots()
    if argv and argv[0] in roots:
        return resolve(roots[argv[0]], argv[1:])
    if not argv:
        raise ConfigError(f"prl fetch: no config given; {USAGE}")
    first: ConfigError | None = None
    for root in roots.values():
        try:
            return resolve(root, argv)
        except ConfigError as exc:
            first = first or exc
    raise ConfigError(
        f"prl fetch: the config is not a valid rl, sft, eval or inference config; name its kind "
        f"(e.g. prl fetch rl @ FILE) to see why. As an RL config: {first.message.splitlines()[0]}"
    )


def cmd_fetch(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(USAGE)
        print(__doc__)
        return 0
    res = _resolve_any(argv)
    needs = needs_of(res.config, res.merged)
    fetched = hub.fetch(needs)
    for need, path in fetched.items():
        print(f"{need.kind} {need.name}{'@' + need.revision if need.revision else ''} ({need.field}): {path}")
    local = sorted({n.name for n in needs if n.name and hub.is_local(n.name)})
    for name in local:
        print(f"local path {name}: nothing to fetch")
    print(
        f"prl fetch: {len(fetched)} from the hub in {hub.hf_hub_cache()}; on a machine without internet "
        f"run with HF_HUB_CACHE={hub.hf_hub_cache()} and HF_HUB_OFFLINE=1"
    )
    return 0
