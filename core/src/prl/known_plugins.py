"""Install hints: which in-repo distribution provides a tag, so a config naming a plugin that
is not installed can say what to install. Data only; nothing here selects or configures a
plugin, and third-party plugins are found through their entry points instead."""

from __future__ import annotations

_PROVIDES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    # distribution: (folder in the repository, {kind: tags})
    "prl-algo-grpo": ("algorithms/grpo", {"algorithms": ("grpo",)}),
    "prl-algo-max-rl": ("algorithms/max-rl", {"algorithms": ("max_rl",)}),
    "prl-algo-opd": ("algorithms/opd", {"algorithms": ("opd",)}),
    "prl-algo-sft": ("algorithms/sft", {"algorithms": ("sft",)}),
    "prl-algo-opsd": ("algorithms/opsd", {"algorithms": ("opsd",)}),
    "prl-algo-rae": ("algorithms/rae", {"algorithms": ("rae",)}),
    "prl-algo-hierarchical-grpo": ("algorithms/hierarchical-grpo", {"algorithms": ("hierarchical_grpo",)}),
    "prl-algo-echo": ("algorithms/echo", {"algorithms": ("echo",)}),
    "prl-algo-debug": ("algorithms/debug", {"algorithms": ("debug",)}),
    "prl-loss-ipo": ("algorithms/loss-ipo", {"losses": ("ipo",)}),
    "prl-loss-icepop": ("algorithms/loss-icepop", {"losses": ("icepop",)}),
    "prl-loss-ppo": ("algorithms/loss-ppo", {"losses": ("ppo",)}),
    "prl-loss-cispo": ("algorithms/loss-cispo", {"losses": ("cispo",)}),
    "prl-loss-custom": ("algorithms/loss-custom", {"losses": ("custom",)}),
    "prl-monitor-file": ("monitors/file", {"monitors": ("file",)}),
    "prl-monitor-console": ("monitors/console", {"monitors": ("console",)}),
    "prl-monitor-wandb": ("monitors/wandb", {"monitors": ("wandb",)}),
    "prl-monitor-prime": ("monitors/prime", {"monitors": ("prime",)}),
    "prl-dashboard": ("plugins/dashboard", {"commands": ("dashboard",)}),
    "prl-model-init": ("plugins/model-init", {"commands": ("model",)}),
    "prl-weights-filesystem": ("plugins/weights-filesystem", {"weight_transports": ("filesystem",)}),
    "prl-weights-nccl": ("plugins/weights-nccl", {"weight_transports": ("nccl",)}),
    # with the reference's [deployment] type spellings each stands for (reference_types)
    "prl-launcher-local": ("launchers/local", {"launchers": ("local", "single_node")}),
    "prl-launcher-slurm": ("launchers/slurm", {"launchers": ("slurm", "multi_node")}),
    "prl-inference-torch": ("plugins/inference-torch", {"inference_backends": ("torch",)}),
    "prl-inference-vllm": ("plugins/inference-vllm", {"inference_backends": ("vllm",)}),
    "prl-trainer-torch": ("plugins/trainer-torch", {"trainers": ("torch",)}),
    "prl-renderers": ("renderers/renderers", {"renderers": ("auto", "default", "custom")}),
    "prl-tasks-builtin": (
        "plugins/tasks-builtin",
        {"tasksets": ("reverse-text", "alphabet-sort", "kuhn-poker", "proposer-solver", "coloured-shapes")},
    ),
}

KNOWN_PROVIDERS: dict[tuple[str, str], str] = {
    (kind, tag): dist for dist, (_, kinds) in _PROVIDES.items() for kind, tags in kinds.items() for tag in tags
}
KNOWN_FOLDERS: dict[str, str] = {dist: folder for dist, (folder, _) in _PROVIDES.items()}


def install_hint(kind: str, tag: object) -> str:
    """``"; install the distribution 'prl-x' (...)"`` for a known tag, else ``""``."""
    dist = KNOWN_PROVIDERS.get((kind, tag)) if isinstance(tag, str) else None
    if dist is None:
        return ""
    checkout = f"pip install -e <repo>/{KNOWN_FOLDERS.get(dist, dist)} from a checkout"
    return f"; install the distribution '{dist}' (pip install {dist}, or {checkout})"
