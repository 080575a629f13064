"""alphabet-sort: keep a growing list of names sorted over several turns (multi-turn).

Turn 1 gives ``first_names`` names to sort; each later turn adds ``names_per_turn`` more
and asks for the whole list sorted again. The answer of a turn is its non-empty lines
(an ``<answer>`` tag, if present, is unwrapped first).

Reward: the mean over turns of ``lcs_ratio(answer_lines, sorted_lines)`` (LCS over whole
lines), so each turn counts equally and a partly right list earns partial credit. Metrics:
``turn_<t>`` per turn and ``exact`` (1.0 when every turn was exactly right).

All turns of one episode share one branch when the renderer can bridge turns; otherwise
each turn re-renders and starts a new branch (see :mod:`prl.tasks.conversation`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.tasks import Conversation, episode_trace, extract_answer, lcs_ratio, with_default_max_tokens
from prl.types import Sampling, Trace
from prl_tasks_builtin.words import NAMES

SYSTEM = "You sort names alphabetically. Reply with the sorted names only, one per line."


def answer_lines(text: str) -> list[str]:
    return [line.strip() for line in extract_answer(text).splitlines() if line.strip()]


class AlphabetSort(Taskset):
    """Sort names, then re-sort as new names arrive each turn."""

    id = "alphabet-sort"
    in_process = True
    splits = ("train", "eval", "test")

    class Config(TasksetConfig):
        """alphabet-sort taskset."""

        id: Literal["alphabet-sort"] = "alphabet-sort"
        """Taskset id."""
        num_train: Annotated[int, Field(ge=1)] = 5000
        """Examples in the train split."""
        num_eval: Annotated[int, Field(ge=1)] = 100
        """Examples in the eval split."""
        num_turns: Annotated[int, Field(ge=1, le=8)] = 3
        """Turns per episode."""
        first_names: Annotated[int, Field(ge=1)] = 3
        """Names in the first turn."""
        names_per_turn: Annotated[int, Field(ge=1)] = 2
        """Names added by each later turn."""
        seed: int = 0
        """Data seed (train uses 2·seed, eval 2·seed+1)."""
        max_tokens: Annotated[int, Field(ge=1)] = 128
        """Completion bound per turn when the run's sampling leaves max_tokens unset."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        split = "eval" if split == "test" else split  # one held-out split, by either name
        c = self.config
        total = c.first_names + c.names_per_turn * (c.num_turns - 1)
        if total > len(NAMES):
            raise ValueError(
                f"env.taskset: {total} names per episode exceed the {len(NAMES)} available; "
                "lower num_turns or names_per_turn"
            )
        count = {"train": c.num_train, "eval": c.num_eval}.get(split)
        if count is None:
            raise ValueError(f"alphabet-sort has splits 'train' and 'eval', not '{split}'")
        rng = random.Random(2 * c.seed + (split == "eval"))
        for i in range(count):
            names = rng.sample(NAMES, total)
            turns = [names[: c.first_names]]
            for t in range(1, c.num_turns):
                start = c.first_names + (t - 1) * c.names_per_turn
                turns.append(names[start : start + c.names_per_turn])
            prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _first_message(turns[0])}]
            yield Task(task_id=f"{split}/{i}", prompt=prompt, data={"turns": turns})

    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        sampling = with_default_max_tokens(sampling, self.config.max_tokens)
        conv = Conversation(renderer, task.prompt)
        seen: list[str] = []
        scores: list[float] = []
        for t, new in enumerate(task.data["turns"]):
            if t > 0:
                conv.add({"role": "user", "content": _later_message(new)})
            seen += new
            reply = await conv.sample(client, sampling)
            scores.append(lcs_ratio(answer_lines(reply), sorted(seen)))
        metrics = {f"turn_{t}": s for t, s in enumerate(scores)}
        metrics["exact"] = float(all(s == 1.0 for s in scores))
        return episode_trace(task, conv, reward=sum(scores) / len(scores), metrics=metrics, env=self.id)


def _first_message(names: list[str]) -> str:
    return "Sort these names alphabetically, one per line:\n" + "\n".join(names)


def _later_message(names: list[str]) -> str:
    return "Add these names and give the whole list sorted again, one per line:\n" + "\n".join(names)
