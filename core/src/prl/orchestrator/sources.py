"""Train sources resolved against their group defaults, and the seeded source mixer.

Group-level values are defaults: a source's ``group_size``, ``algo`` and each ``sampling``
key it leaves unset come from ``orchestrator.train``. A source whose algorithm samples from
a frozen model (``sampling_source()`` is a ``{name, base_url}`` dict, e.g. sft) gets its own
inference client for that server; its rollouts never touch the policy. The mixer picks a source with
probability proportional to ``ratio`` from one seeded RNG whose state is checkpointed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prl.config.components import SourceConfig, TrainGroupConfig
from prl.orchestrator.sampler import StandardSampler, make_sampler, rng_from_json, rng_to_json
from prl.types import Sampling

if TYPE_CHECKING:
    from prl.contracts import Algorithm, AlgorithmConfig


def resolve_sampling(group: TrainGroupConfig, source: SourceConfig) -> Sampling:
    base = group.sampling.model_dump()
    base.update({k: v for k, v in source.sampling.model_dump().items() if v is not None})
    return Sampling(
        temperature=base["temperature"],
        top_p=base["top_p"],
        top_k=base["top_k"],
        max_tokens=base["max_completion_tokens"],
        seed=base["seed"],
    )


def build_algorithm(config: AlgorithmConfig) -> Algorithm:
    return config.build()


def sampling_client(algorithm: Algorithm) -> Any:
    """An inference client for the frozen model ``algorithm`` samples from; None: the policy."""
    source = algorithm.sampling_source()
    if source == "policy":
        return None
    from prl.frozen import FrozenModelConfig

    return FrozenModelConfig.model_validate(source).sampler()


@dataclass
class TrainSource:
    """One train source with everything dispatch needs."""

    name: str
    config: SourceConfig
    env: Any  # prl.envs.EnvSource or a stand-in with the same methods
    group_size: int
    sampling: Sampling
    algorithm: Algorithm
    min_abs_advantage: float
    ratio: float
    sampler: StandardSampler | None = None
    rejected_groups: int = 0  # groups the admission gates kept out since the last step
    client: Any = None  # the frozen model's client when the algorithm does not sample the policy

    def make_sampler(self) -> None:
        self.sampler = make_sampler(self.config.sampler.type, self.env.tasks(), self.config.sampler.seed)


def resolve_source(
    group: TrainGroupConfig, source: SourceConfig, env: Any, algorithm: Algorithm | None = None
) -> TrainSource:
    algo_cfg = source.algo if source.algo is not None else group.algo
    algorithm = algorithm if algorithm is not None else build_algorithm(algo_cfg)
    return TrainSource(
        name=source.name,
        config=source,
        env=env,
        group_size=source.group_size or group.group_size,
        sampling=resolve_sampling(group, source),
        algorithm=algorithm,
        min_abs_advantage=source.min_abs_advantage,
        ratio=source.ratio,
        client=sampling_client(algorithm),
    )


class SourceMixer:
    """Seeded choice of the next source, proportional to ``ratio``."""

    def __init__(self, sources: list[TrainSource], seed: int) -> None:
        if not sources:
            raise ValueError("orchestrator.train.source: at least one train source is required")
        self.sources = list(sources)  # a dead source leaves the mix, not the run's list
        self.weights = [s.ratio for s in sources]
        self.rng = random.Random(seed)

    def pick(self) -> TrainSource:
        if len(self.sources) == 1:
            return self.sources[0]
        return self.rng.choices(self.sources, weights=self.weights)[0]

    def state_dict(self) -> dict[str, Any]:
        samplers = {s.name: s.sampler.state_dict() for s in self.sources if s.sampler}
        return {"rng": rng_to_json(self.rng), "samplers": samplers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(rng_from_json(state["rng"]))
        for source in self.sources:
            saved = state.get("samplers", {}).get(source.name)
            if saved is not None and source.sampler is not None:
                source.sampler.load_state_dict(saved)
