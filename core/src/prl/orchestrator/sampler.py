"""Curriculum samplers: which task of a source comes next.

* ``standard``: shuffled epochs. Epoch ``e`` visits every task once in the order of a
  permutation drawn from ``Random(seed * 1_000_003 + e)``, so the state is just
  ``(epoch, index)`` and a resumed run continues the very same sequence.
* ``difficulty_pool``: the standard order, but a task whose last group was uninformative
  (every rollout got the same reward, so GRPO-style advantages are all zero) is skipped
  with probability 3/4 while it stays so. At least one task per epoch is always served.
  State adds the set of uninformative tasks and the skip RNG.
"""

from __future__ import annotations

import random
from typing import Any

from prl.contracts.taskset import Task

SKIP_PROBABILITY = 0.75


class StandardSampler:
    """Shuffled epochs over ``tasks`` (see module docstring)."""

    type = "standard"

    def __init__(self, tasks: list[Task], seed: int) -> None:
        if not tasks:
            raise ValueError("the source has no tasks to sample from")
        self.tasks = tasks
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def _advance(self) -> Task:
        if self.index >= len(self._order):
            self.epoch += 1
            self.index = 0
            self._order = self._permutation(self.epoch)
        task = self.tasks[self._order[self.index]]
        self.index += 1
        return task

    def next(self) -> Task:
        return self._advance()

    def observe(self, task_id: str, rewards: list[float]) -> None:
        """Outcome of a finished group (unused by the standard sampler)."""

    def metrics(self) -> dict[str, float]:
        return {"epoch": float(self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        return {"type": self.type, "epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("type") != self.type:
            raise ValueError(f"sampler state is for '{state.get('type')}', this source uses '{self.type}'")
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
        self._order = self._permutation(self.epoch)


class DifficultyPoolSampler(StandardSampler):
    """Standard epochs that mostly skip tasks whose last group had no reward spread."""

    type = "difficulty_pool"

    def __init__(self, tasks: list[Task], seed: int) -> None:
        super().__init__(tasks, seed)
        self.flat: set[str] = set()
        self._rng = random.Random(seed)

    def next(self) -> Task:
        for _ in range(len(self.tasks)):
            task = self._advance()
            if task.task_id not in self.flat or self._rng.random() >= SKIP_PROBABILITY:
                return task
        return task

    def observe(self, task_id: str, rewards: list[float]) -> None:
        if len(rewards) > 1 and max(rewards) == min(rewards):
            self.flat.add(task_id)
        else:
            self.flat.discard(task_id)

    def metrics(self) -> dict[str, float]:
        return {"epoch": float(self.epoch), "uninformative_frac": len(self.flat) / len(self.tasks)}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["flat"] = sorted(self.flat)
        state["rng"] = rng_to_json(self._rng)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.flat = set(state.get("flat", []))
        if "rng" in state:
            self._rng.setstate(rng_from_json(state["rng"]))


def make_sampler(kind: str, tasks: list[Task], seed: int) -> StandardSampler:
    if kind == "standard":
        return StandardSampler(tasks, seed)
    if kind == "difficulty_pool":
        return DifficultyPoolSampler(tasks, seed)
    raise ValueError(f"sampler.type: unknown sampler '{kind}' (standard, difficulty_pool)")


def rng_to_json(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
